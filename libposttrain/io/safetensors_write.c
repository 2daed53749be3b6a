/* The durable safetensors writer: check every argument, build the header
 * (metadata first, then tensors by name, padded with spaces to a multiple of
 * 8), and write length, header and data through the atomic writer. */
#include "io/safetensors.h"

#include "core/core.h"
#include "core/strbuf.h"
#include "core/utf8.h"
#include "io/fileio.h"
#include "io/json.h"

#include <stdlib.h>
#include <string.h>

/* The checked, sorted arguments. */
typedef struct write_plan {
    const char *path;
    const pt_st_write_tensor *tensors;
    size_t n;
    const pt_st_write_tensor **order; /* tensors by name */
    uint64_t *sizes;                  /* bytes, by input position */
    const char *const **kv;           /* metadata pairs by key */
    size_t n_kv;
} write_plan;

static bool utf8_ok(const char *s)
{
    return pt__utf8_valid(s, strlen(s));
}

/* Everything about one tensor; its byte size into *size. */
static int check_tensor(const char *path, const pt_st_write_tensor *t, size_t i, uint64_t *size)
{
    if (!t->name)
        return pt__err(PT_EINVAL, "pt__st_write %s: tensor %zu has no name", path, i);
    if (!utf8_ok(t->name))
        return pt__err(PT_EINVAL, "pt__st_write %s: tensor name '%s' is not valid UTF-8", path, t->name);
    if (strcmp(t->name, "__metadata__") == 0)
        return pt__err(PT_EINVAL, "pt__st_write %s: '__metadata__' is reserved, not a tensor name", path);
    if (t->dtype < 0 || t->dtype >= PT_ST_DTYPE_COUNT)
        return pt__err(PT_EINVAL, "pt__st_write %s: tensor '%s' has unknown dtype %d", path, t->name,
                      t->dtype);
    if (t->ndim < 0 || t->ndim > PT_ST_MAX_DIMS)
        return pt__err(PT_EINVAL, "pt__st_write %s: tensor '%s' has rank %d (0..%d allowed)", path,
                      t->name, t->ndim, PT_ST_MAX_DIMS);
    uint64_t numel = 1;
    bool zero = false;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || (uint64_t)t->shape[d] > PT_ST_MAX_INT)
            return pt__err(PT_EINVAL, "pt__st_write %s: tensor '%s' has invalid dimension %lld", path,
                          t->name, (long long)t->shape[d]);
        if (t->shape[d] == 0)
            zero = true;
    }
    for (int d = 0; d < t->ndim && !zero; d++)
        if (__builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel) || numel > PT_ST_MAX_INT)
            return pt__err(PT_EINVAL, "pt__st_write %s: tensor '%s' is too large", path, t->name);
    if (zero)
        numel = 0;
    uint64_t bits = numel * pt__st_dtype_bits(t->dtype); /* numel <= 2^53, bits <= 64: no overflow */
    if (bits % 8 != 0)
        return pt__err(PT_EINVAL, "pt__st_write %s: tensor '%s': %llu elements of %s do not fill whole "
                      "bytes", path, t->name, (unsigned long long)numel, pt__st_dtype_name(t->dtype));
    *size = bits / 8;
    if (*size > 0 && !t->data)
        return pt__err(PT_EINVAL, "pt__st_write %s: tensor '%s' has no data", path, t->name);
    return PT_OK;
}

static int cmp_write_name(const void *a, const void *b)
{
    const pt_st_write_tensor *x = *(const pt_st_write_tensor *const *)a;
    const pt_st_write_tensor *y = *(const pt_st_write_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int check_tensors(write_plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        int st = check_tensor(p->path, &p->tensors[i], i, &p->sizes[i]);
        if (st != PT_OK)
            return st;
        p->order[i] = &p->tensors[i];
    }
    qsort(p->order, p->n, sizeof *p->order, cmp_write_name);
    for (size_t i = 1; i < p->n; i++)
        if (strcmp(p->order[i - 1]->name, p->order[i]->name) == 0)
            return pt__err(PT_EINVAL, "pt__st_write %s: duplicate tensor name '%s'", p->path,
                          p->order[i]->name);
    return PT_OK;
}

static int cmp_kv_key(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

static int check_metadata(write_plan *p, const char *const *metadata_kv)
{
    for (size_t i = 0; i < p->n_kv; i++) {
        const char *k = metadata_kv[2 * i], *v = metadata_kv[2 * i + 1];
        if (!k || !v)
            return pt__err(PT_EINVAL, "pt__st_write %s: metadata pair %zu has a NULL key or value",
                          p->path, i);
        if (!utf8_ok(k) || !utf8_ok(v))
            return pt__err(PT_EINVAL, "pt__st_write %s: metadata '%s' is not valid UTF-8", p->path, k);
        p->kv[i] = &metadata_kv[2 * i];
    }
    qsort(p->kv, p->n_kv, sizeof *p->kv, cmp_kv_key);
    for (size_t i = 1; i < p->n_kv; i++)
        if (strcmp(p->kv[i - 1][0], p->kv[i][0]) == 0)
            return pt__err(PT_EINVAL, "pt__st_write %s: duplicate metadata key '%s'", p->path,
                          p->kv[i][0]);
    return PT_OK;
}

static void put_str(pt_strbuf *hb, const char *s)
{
    pt__json_put_string(hb, s, strlen(s));
}

/* "name":{"dtype":"F32","shape":[2,3],"data_offsets":[b,e]}; *offset moves
 * from b to e. */
static int put_entry(pt_strbuf *hb, const write_plan *p, const pt_st_write_tensor *t,
                     uint64_t *offset)
{
    put_str(hb, t->name);
    pt__strbuf_printf(hb, ":{\"dtype\":\"%s\",\"shape\":[", pt__st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
        pt__strbuf_printf(hb, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
    pt__strbuf_printf(hb, "],\"data_offsets\":[%llu,", (unsigned long long)*offset);
    /* sizes[] is indexed by input position; recover it from the pointer */
    if (__builtin_add_overflow(*offset, p->sizes[t - p->tensors], offset) || *offset > PT_ST_MAX_INT)
        return pt__err(PT_EINVAL, "pt__st_write %s: total data size exceeds 2^53 bytes", p->path);
    pt__strbuf_printf(hb, "%llu]}", (unsigned long long)*offset);
    return PT_OK;
}

/* The header JSON: metadata first (as Hugging Face writes it), then the
 * tensors by name, then spaces up to a multiple of 8 bytes. */
static int build_header(pt_strbuf *hb, const write_plan *p)
{
    pt__strbuf_putc(hb, '{');
    if (p->n_kv > 0) {
        pt__strbuf_puts(hb, "\"__metadata__\":{");
        for (size_t i = 0; i < p->n_kv; i++) {
            if (i)
                pt__strbuf_putc(hb, ',');
            put_str(hb, p->kv[i][0]);
            pt__strbuf_putc(hb, ':');
            put_str(hb, p->kv[i][1]);
        }
        pt__strbuf_putc(hb, '}');
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (i || p->n_kv > 0)
            pt__strbuf_putc(hb, ',');
        int st = put_entry(hb, p, p->order[i], &offset);
        if (st != PT_OK)
            return st;
    }
    pt__strbuf_putc(hb, '}');
    while (!hb->err && hb->len % 8 != 0)
        pt__strbuf_putc(hb, ' ');
    if (hb->err)
        return pt__err(PT_ENOMEM, "pt__st_write %s: out of memory building the header", p->path);
    if ((uint64_t)hb->len > PT_ST_MAX_HEADER)
        return pt__err(PT_ERANGE, "pt__st_write %s: header of %zu bytes exceeds the %llu-byte limit",
                      p->path, hb->len, (unsigned long long)PT_ST_MAX_HEADER);
    return PT_OK;
}

/* Length, header and data, durably under p->path. */
static int write_file(const write_plan *p, const pt_strbuf *hb)
{
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (uint8_t)((uint64_t)hb->len >> (8 * i));
    pt_atomic_file af;
    int st = pt__atomic_open(&af, p->path);
    if (st != PT_OK)
        return st;
    st = pt__atomic_write(&af, lenbuf, sizeof lenbuf);
    if (st == PT_OK)
        st = pt__atomic_write(&af, hb->p, hb->len);
    for (size_t i = 0; i < p->n && st == PT_OK; i++) {
        uint64_t sz = p->sizes[p->order[i] - p->tensors];
        if (sz > 0)
            st = pt__atomic_write(&af, p->order[i]->data, (size_t)sz);
    }
    if (st != PT_OK) {
        pt__atomic_abort(&af);
        return st;
    }
    return pt__atomic_commit(&af);
}

int pt__st_write(const char *path, const pt_st_write_tensor *tensors, size_t n,
                const char *const *metadata_kv, size_t n_metadata_pairs)
{
    PT_CHECK_ARG(path && *path, path, "is NULL or empty");
    PT_CHECK_ARG(tensors || n == 0, tensors, "is NULL with n = %zu (writing %s)", n, path);
    PT_CHECK_ARG(metadata_kv || n_metadata_pairs == 0, metadata_kv,
                 "is NULL with n_metadata_pairs = %zu (writing %s)", n_metadata_pairs, path);
    write_plan p = {.path = path, .tensors = tensors, .n = n, .n_kv = n_metadata_pairs};
    p.order = pt__calloc(n ? n : 1, sizeof *p.order);
    p.sizes = pt__calloc(n ? n : 1, sizeof *p.sizes);
    p.kv = pt__calloc(n_metadata_pairs ? n_metadata_pairs : 1, sizeof *p.kv);
    pt_strbuf hb = PT_STRBUF_INIT;
    int st = !p.order || !p.sizes || !p.kv ? PT_ENOMEM : PT_OK;
    if (st == PT_OK && (st = check_tensors(&p)) == PT_OK &&
        (st = check_metadata(&p, metadata_kv)) == PT_OK && (st = build_header(&hb, &p)) == PT_OK)
        st = write_file(&p, &hb);
    free(p.order);
    free(p.sizes);
    free(p.kv);
    pt__strbuf_free(&hb);
    return st;
}
