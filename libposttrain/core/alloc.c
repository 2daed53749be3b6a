#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *pt_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

/* count * size into *total; false (and the error set) when it overflows. */
static bool array_bytes(size_t count, size_t size, size_t *total)
{
    if (pt_mul_size(count, size, total))
        return true;
    pt_err(PT_ENOMEM, "allocation of %zu x %zu bytes overflows", count, size);
    return false;
}

void *pt_calloc(size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", total);
    return p;
}

void *pt_malloc_array(size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    return pt_malloc(total);
}

void *pt_realloc_array(void *p, size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    void *q = realloc(p, total ? total : 1);
    if (!q)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", total);
    return q;
}

void *pt_grow_array(void *p, size_t *cap, size_t first, size_t size)
{
    size_t c = *cap ? *cap * 2 : first;
    void *q = pt_realloc_array(p, c, size);
    if (q)
        *cap = c;
    return q;
}

void *pt_malloc_aligned(size_t n)
{
    size_t rounded;
    if (!pt_add_size(n, 63, &rounded)) {
        pt_err(PT_ENOMEM, "aligned allocation of %zu bytes overflows", n);
        return NULL;
    }
    rounded &= ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void pt_free_aligned(void *p)
{
    free(p);
}

void pt_free(void *ptr)
{
    free(ptr);
}

char *pt_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = pt_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}
