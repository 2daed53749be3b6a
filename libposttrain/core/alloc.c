#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *pt__malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        pt__err(PT_ENOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

/* count * size into *total; false (and the error set) when it overflows. */
static bool array_bytes(size_t count, size_t size, size_t *total)
{
    if (pt__mul_size(count, size, total))
        return true;
    pt__err(PT_ENOMEM, "allocation of %zu x %zu bytes overflows", count, size);
    return false;
}

void *pt__calloc(size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        pt__err(PT_ENOMEM, "out of memory allocating %zu bytes", total);
    return p;
}

void *pt__malloc_array(size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    return pt__malloc(total);
}

void *pt__realloc_array(void *p, size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    void *q = realloc(p, total ? total : 1);
    if (!q)
        pt__err(PT_ENOMEM, "out of memory allocating %zu bytes", total);
    return q;
}

void *pt__grow_array(void *p, size_t *cap, size_t first, size_t size)
{
    size_t c = *cap ? *cap * 2 : first;
    void *q = pt__realloc_array(p, c, size);
    if (q)
        *cap = c;
    return q;
}

void *pt__malloc_aligned(size_t n)
{
    size_t rounded;
    if (!pt__add_size(n, 63, &rounded)) {
        pt__err(PT_ENOMEM, "aligned allocation of %zu bytes overflows", n);
        return NULL;
    }
    rounded &= ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
        pt__err(PT_ENOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void pt__free_aligned(void *p)
{
    free(p);
}

void pt_free(void *ptr)
{
    free(ptr);
}

char *pt__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = pt__malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void pt__release_pages(const void *p, size_t n)
{
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0 || n == 0)
        return;
    uintptr_t a = (uintptr_t)p, b = a + n;
    uintptr_t a2 = (a + (uintptr_t)ps - 1) & ~((uintptr_t)ps - 1), b2 = b & ~((uintptr_t)ps - 1);
    if (b2 > a2)
        (void)madvise((void *)a2, b2 - a2, MADV_DONTNEED);
}
