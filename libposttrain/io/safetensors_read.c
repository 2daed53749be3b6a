/* Opening a safetensors file (read-only mmap) or a caller's buffer, and the
 * handle's accessors.  Validation is pt__st_parse_header's. */
#include "io/safetensors_internal.h"

#include "core/core.h"
#include "io/fileio.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void pt__st_close(pt_st_file *f)
{
    if (!f)
        return;
    if (f->mapped && f->base)
        munmap((void *)f->base, f->len);
    free(f->path);
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    free(f);
}

/* Validate the bytes f holds and hand f out, or close it. */
static int finish_open(pt_st_file **out, pt_st_file *f)
{
    int st = pt__st_parse_header(f);
    if (st != PT_OK) {
        pt__err_prefix(st, "%s", f->path);
        pt__st_close(f);
        return st;
    }
    *out = f;
    return PT_OK;
}

/* An empty handle named `path`, or NULL (PT_ENOMEM recorded). */
static pt_st_file *new_handle(const char *path)
{
    pt_st_file *f = pt__calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->path = pt__strdup(path);
    if (!f->path) {
        free(f);
        return NULL;
    }
    return f;
}

int pt__st_open_memory(pt_st_file **out, const void *buffer, size_t len)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_ARG(buffer || len == 0, buffer, "is NULL (len %zu)", len);
    pt_st_file *f = new_handle("<memory>");
    if (!f)
        return PT_ENOMEM;
    f->base = buffer;
    f->len = len;
    return finish_open(out, f);
}

int pt__st_open(pt_st_file **out, const char *path)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(path);
    pt_st_file *f = new_handle(path);
    if (!f)
        return PT_ENOMEM;
    int st = pt__map_file(&f->base, &f->len, path, "");
    if (st != PT_OK) {
        pt__st_close(f);
        return st;
    }
    f->mapped = f->base != NULL;
    st = finish_open(out, f);
    if (st == PT_OK && (*out)->mapped)
        for (size_t i = 0; i < (*out)->count; i++)
            (*out)->tensors[i].mapped = true;
    return st;
}

const char *pt__st_path(const pt_st_file *f)
{
    return f ? f->path : NULL;
}

size_t pt__st_count(const pt_st_file *f)
{
    return f ? f->count : 0;
}

const pt_st_tensor *pt__st_tensor_at(const pt_st_file *f, size_t i)
{
    if (!f || i >= f->count)
        return NULL;
    return &f->tensors[i];
}

const pt_st_tensor *pt__st_find(const pt_st_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    size_t lo = 0, hi = f->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const pt_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

uint64_t pt__st_header_size(const pt_st_file *f)
{
    return f ? f->header_len : 0;
}

uint64_t pt__st_data_size(const pt_st_file *f)
{
    return f ? f->data_len : 0;
}

const char *pt__st_metadata(const pt_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

size_t pt__st_metadata_count(const pt_st_file *f)
{
    return f ? f->n_meta : 0;
}

int pt__st_metadata_at(const pt_st_file *f, size_t i, const char **key, const char **value)
{
    PT_CHECK_NULL(f);
    PT_CHECK_ARG(i < f->n_meta, i, "= %zu is out of range (the file has %zu metadata pairs)", i,
                 f->n_meta);
    if (key)
        *key = f->meta[2 * i];
    if (value)
        *value = f->meta[2 * i + 1];
    return PT_OK;
}
