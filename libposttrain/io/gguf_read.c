/* Opening a GGUF file (read-only mmap) or a caller's buffer, the handle's
 * accessors, the typed getters and reading a tensor as F32.  Validation is
 * pt__gguf_parse's. */
#include "io/gguf_internal.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"

#include <float.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void pt__gguf_close(pt_gguf *g)
{
    if (!g)
        return;
    if (g->mapped && g->base)
        munmap((void *)g->base, g->len);
    pt__gguf_arena_free(&g->arena);
    free(g->path);
    free(g);
}

/* Validate the bytes g holds and hand g out, or close it. */
static int finish_open(pt_gguf **out, pt_gguf *g)
{
    int st = pt__gguf_parse(g);
    if (st != PT_OK) {
        pt__err_prefix(st, "gguf %s", g->path ? g->path : "<memory>");
        pt__gguf_close(g);
        return st;
    }
    *out = g;
    return PT_OK;
}

int pt__gguf_open_memory(pt_gguf **out, const void *buf, size_t len)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_ARG(buf || len == 0, buf, "is NULL (len %zu)", len);
    pt_gguf *g = pt__calloc(1, sizeof *g);
    if (!g)
        return PT_ENOMEM;
    g->base = buf;
    g->len = len;
    return finish_open(out, g);
}

int pt__gguf_open(pt_gguf **out, const char *path)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(path);
    pt_gguf *g = pt__calloc(1, sizeof *g);
    if (!g || !(g->path = pt__strdup(path))) {
        free(g);
        return PT_ENOMEM;
    }
    int st = pt__map_file(&g->base, &g->len, path, "gguf ");
    if (st != PT_OK) {
        pt__gguf_close(g);
        return st;
    }
    g->mapped = g->base != NULL;
    return finish_open(out, g);
}

PT_GETTER(uint32_t, pt__gguf_version, pt_gguf, version, 0)
PT_GETTER(uint32_t, pt__gguf_alignment, pt_gguf, alignment, 0)
PT_GETTER(const char *, pt__gguf_path, pt_gguf, path, NULL)
PT_GETTER(uint64_t, pt__gguf_data_offset, pt_gguf, data_start, 0)
PT_GETTER(size_t, pt__gguf_kv_count, pt_gguf, n_kv, 0)
const pt_gguf_kv *pt__gguf_kv_at(const pt_gguf *g, size_t i)
{
    return g && i < g->n_kv ? &g->kv[i] : NULL;
}

PT_GETTER(size_t, pt__gguf_tensor_count, pt_gguf, n_tensors, 0)
const pt_gguf_tensor *pt__gguf_tensor_at(const pt_gguf *g, size_t i)
{
    return g && i < g->n_tensors ? &g->tensors[i] : NULL;
}

/* Binary search over pointers sorted by the string at byte `field` of each
 * pointee. */
static const void *find_sorted(const void *const *sorted, size_t n, size_t field, const char *s)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *k = *(const char *const *)((const char *)sorted[mid] + field);
        int c = strcmp(s, k);
        if (c == 0)
            return sorted[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const pt_gguf_kv *pt__gguf_find_kv(const pt_gguf *g, const char *key)
{
    if (!g || !key || !g->kv_by_key)
        return NULL;
    return find_sorted((const void *const *)g->kv_by_key, g->n_kv, offsetof(pt_gguf_kv, key), key);
}

const pt_gguf_tensor *pt__gguf_find_tensor(const pt_gguf *g, const char *name)
{
    if (!g || !name || !g->t_by_name)
        return NULL;
    return find_sorted((const void *const *)g->t_by_name, g->n_tensors,
                       offsetof(pt_gguf_tensor, name), name);
}
