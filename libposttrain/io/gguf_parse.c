/* The GGUF header parser: a cursor bounded by the file's length, every count
 * checked against the bytes left before anything is allocated, every sum and
 * product overflow-checked, then the directory-wide rules (unique keys and
 * names, general.alignment, tensor spans inside the data section, aligned,
 * not overlapping).  Messages name the key or tensor and the rule; the
 * caller prefixes "gguf <path>". */
#include "io/gguf_internal.h"

#include "core/core.h"
#include "core/utf8.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Smallest encodings: a pair is a key length, a 1-byte key, a type and a
 * 1-byte value; a tensor info a name length, a 1-byte name, n_dims, one ne,
 * the type and the offset. */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_BYTES 33u
/* Messages show at most this many bytes of a key or name. */
#define SHOW 200

/* ---- cursor ----------------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *base;
    size_t pos, len;
} cursor;

static size_t left(const cursor *c)
{
    return c->len - c->pos;
}

/* n more bytes for `what`, or PT_EFORMAT naming where the file ends. */
static int need(const cursor *c, uint64_t n, const char *what)
{
    if (n > left(c))
        return pt__err(PT_EFORMAT, "truncated at byte %zu: %s needs %" PRIu64 " bytes, %zu left",
                      c->pos, what, n, left(c));
    return PT_OK;
}

static int get_u32(cursor *c, uint32_t *v, const char *what)
{
    int st = need(c, 4, what);
    if (st != PT_OK)
        return st;
    *v = pt__gguf_le32(c->base + c->pos);
    c->pos += 4;
    return PT_OK;
}

static int get_u64(cursor *c, uint64_t *v, const char *what)
{
    int st = need(c, 8, what);
    if (st != PT_OK)
        return st;
    *v = pt__gguf_le64(c->base + c->pos);
    c->pos += 8;
    return PT_OK;
}

/* A string's length and bytes (pointing into the file). */
static int get_str(cursor *c, pt_gguf_str *s, uint64_t max, const char *what)
{
    uint64_t n;
    int st = get_u64(c, &n, what);
    if (st != PT_OK)
        return st;
    if (n > max)
        return pt__err(PT_ERANGE, "%s: length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes",
                      what, n, max);
    if ((st = need(c, n, what)) != PT_OK)
        return st;
    s->ptr = (const char *)c->base + c->pos;
    s->len = n;
    c->pos += (size_t)n;
    return PT_OK;
}

/* A key or tensor name: nonempty, valid UTF-8 without NUL, copied with a
 * terminating NUL into the arena. */
static int get_name(pt_gguf *g, cursor *c, const char **out, const char *what)
{
    pt_gguf_str s = {NULL, 0};
    int st = get_str(c, &s, PT_GGUF_MAX_KEY, what);
    if (st != PT_OK)
        return st;
    if (s.len == 0)
        return pt__err(PT_EFORMAT, "%s at byte %zu is empty", what, c->pos - 8);
    size_t ok = pt__utf8_valid_prefix(s.ptr, (size_t)s.len);
    if (ok != s.len)
        return pt__err(PT_EFORMAT, "%s at byte %zu is not valid UTF-8 (byte %zu of it)", what,
                      c->pos - (size_t)s.len - 8, ok);
    const char *nul = memchr(s.ptr, '\0', (size_t)s.len);
    if (nul)
        return pt__err(PT_EFORMAT, "%s at byte %zu contains a NUL byte (byte %zu of it)", what,
                      c->pos - (size_t)s.len - 8, (size_t)(nul - s.ptr));
    char *p = pt__gguf_arena_alloc(&g->arena, (size_t)s.len + 1);
    if (!p)
        return PT_ENOMEM;
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    *out = p;
    return PT_OK;
}

/* ---- metadata values -------------------------------------------------------- */

/* n fixed-size values of `type` from the file into host order. */
static void load_values(void *dst, const uint8_t *src, uint64_t n, size_t size)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, (size_t)(n * size));
#else
    for (uint64_t i = 0; i < n; i++, src += size) {
        if (size == 1)
            ((uint8_t *)dst)[i] = src[0];
        else if (size == 2)
            ((uint16_t *)dst)[i] = pt__gguf_le16(src);
        else if (size == 4)
            ((uint32_t *)dst)[i] = pt__gguf_le32(src);
        else
            ((uint64_t *)dst)[i] = pt__gguf_le64(src);
    }
#endif
}

/* n values of a fixed-size type (bools must be 0 or 1). */
static int read_fixed(pt_gguf *g, cursor *c, pt_gguf_kv *kv, pt_gguf_type type, uint64_t n)
{
    size_t size = pt__gguf_type_size(type);
    int st = need(c, n * size, "the value"); /* n * size <= 2^28 * 8: no overflow */
    if (st != PT_OK)
        return st;
    const uint8_t *src = c->base + c->pos;
    if (type == PT_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (src[i] > 1)
                return pt__err(PT_EFORMAT, "bool value %u at byte %zu is not 0 or 1", src[i],
                              c->pos + (size_t)i);
    void *dst = pt__gguf_arena_alloc(&g->arena, (size_t)(n * size));
    if (!dst)
        return PT_ENOMEM;
    load_values(dst, src, n, size);
    c->pos += (size_t)(n * size);
    kv->data = dst;
    return PT_OK;
}

/* n strings (each pointing into the file). */
static int read_strings(pt_gguf *g, cursor *c, pt_gguf_kv *kv, uint64_t n)
{
    pt_gguf_str *s = pt__gguf_arena_alloc(&g->arena, (size_t)n * sizeof *s);
    if (!s)
        return PT_ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        int st = get_str(c, &s[i], PT_GGUF_MAX_STRING, "a string value");
        if (st != PT_OK)
            return n > 1 ? pt__err_prefix(st, "element %" PRIu64, i) : st;
    }
    kv->data = s;
    return PT_OK;
}

static int read_type(cursor *c, pt_gguf_type *out, const char *what)
{
    uint32_t t;
    int st = get_u32(c, &t, what);
    if (st != PT_OK)
        return st;
    if (t >= PT_GGUF_TYPE_COUNT)
        return pt__err(PT_EFORMAT, "unknown value type %" PRIu32 " at byte %zu", t, c->pos - 4);
    *out = (pt_gguf_type)t;
    return PT_OK;
}

/* An array's element type and count, bounded by the bytes left. */
static int read_array_head(cursor *c, pt_gguf_kv *kv)
{
    int st = read_type(c, &kv->elem_type, "the array element type");
    if (st != PT_OK)
        return st;
    if (kv->elem_type == PT_GGUF_ARRAY)
        return pt__err(PT_EFORMAT, "nested arrays are not allowed (at byte %zu)", c->pos - 4);
    if ((st = get_u64(c, &kv->n, "the array count")) != PT_OK)
        return st;
    if (kv->n > PT_GGUF_MAX_ARRAY)
        return pt__err(PT_ERANGE, "array of %" PRIu64 " elements exceeds the limit of %" PRIu64,
                      kv->n, PT_GGUF_MAX_ARRAY);
    size_t min = kv->elem_type == PT_GGUF_STRING ? 8 : pt__gguf_type_size(kv->elem_type);
    if (kv->n > left(c) / min)
        return pt__err(PT_EFORMAT,
                      "array of %" PRIu64 " %s values cannot fit in the %zu bytes left", kv->n,
                      pt__gguf_type_name(kv->elem_type), left(c));
    return PT_OK;
}

static int read_kv(pt_gguf *g, cursor *c, pt_gguf_kv *kv)
{
    int st = get_name(g, c, &kv->key, "key");
    if (st != PT_OK)
        return st;
    if ((st = read_type(c, &kv->type, "the value type")) != PT_OK)
        return pt__err_prefix(st, "key '%.*s'", SHOW, kv->key);
    pt_gguf_type type = kv->type;
    kv->n = 1;
    if (type == PT_GGUF_ARRAY) {
        if ((st = read_array_head(c, kv)) != PT_OK)
            return pt__err_prefix(st, "key '%.*s'", SHOW, kv->key);
        type = kv->elem_type;
    }
    if (type == PT_GGUF_STRING)
        st = read_strings(g, c, kv, kv->n);
    else
        st = read_fixed(g, c, kv, type, kv->n);
    if (st != PT_OK)
        return pt__err_prefix(st, "key '%.*s'", SHOW, kv->key);
    return PT_OK;
}

/* ---- the fixed header ------------------------------------------------------- */

static int read_magic_version(pt_gguf *g, cursor *c)
{
    int st = need(c, 4, "the magic");
    if (st != PT_OK)
        return st;
    if (memcmp(c->base, PT_GGUF_MAGIC, 4) != 0)
        return pt__err(PT_EFORMAT, "bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                      c->base[0], c->base[1], c->base[2], c->base[3]);
    c->pos = 4;
    if ((st = get_u32(c, &g->version, "the version")) != PT_OK)
        return st;
    if (g->version == 2 || g->version == 3)
        return PT_OK;
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return pt__err(PT_EUNSUPPORTED, "big-endian GGUF files are not supported");
    return pt__err(PT_EUNSUPPORTED, "GGUF version %" PRIu32 " is not supported (2 and 3 are)",
                  g->version);
}

/* A count of items of at least `min` bytes each, bounded by `max` and by the
 * bytes left. */
static int read_count(cursor *c, uint64_t *n, uint64_t max, size_t min, const char *what)
{
    int st = get_u64(c, n, what);
    if (st != PT_OK)
        return st;
    if (*n > max)
        return pt__err(PT_ERANGE, "%s %" PRIu64 " exceeds the limit of %" PRIu64, what, *n, max);
    if (*n > left(c) / min)
        return pt__err(PT_EFORMAT, "%s %" PRIu64 " cannot fit in the %zu bytes left (%zu bytes each at least)",
                      what, *n, left(c), min);
    return PT_OK;
}

/* ---- sorting and uniqueness ------------------------------------------------- */

static int cmp_kv(const void *a, const void *b)
{
    return strcmp((*(const pt_gguf_kv *const *)a)->key, (*(const pt_gguf_kv *const *)b)->key);
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp((*(const pt_gguf_tensor *const *)a)->name,
                  (*(const pt_gguf_tensor *const *)b)->name);
}

static int index_kv(pt_gguf *g)
{
    g->kv_by_key = pt__gguf_arena_alloc(&g->arena, g->n_kv * sizeof *g->kv_by_key);
    if (!g->kv_by_key)
        return PT_ENOMEM;
    for (size_t i = 0; i < g->n_kv; i++)
        g->kv_by_key[i] = &g->kv[i];
    if (g->n_kv > 1)
        qsort(g->kv_by_key, g->n_kv, sizeof *g->kv_by_key, cmp_kv);
    for (size_t i = 1; i < g->n_kv; i++)
        if (strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key) == 0)
            return pt__err(PT_EFORMAT, "duplicate key '%.*s'", SHOW, g->kv_by_key[i]->key);
    return PT_OK;
}

static int index_tensors(pt_gguf *g)
{
    g->t_by_name = pt__gguf_arena_alloc(&g->arena, g->n_tensors * sizeof *g->t_by_name);
    if (!g->t_by_name)
        return PT_ENOMEM;
    for (size_t i = 0; i < g->n_tensors; i++)
        g->t_by_name[i] = &g->tensors[i];
    if (g->n_tensors > 1)
        qsort(g->t_by_name, g->n_tensors, sizeof *g->t_by_name, cmp_tensor);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->t_by_name[i - 1]->name, g->t_by_name[i]->name) == 0)
            return pt__err(PT_EFORMAT, "duplicate tensor name '%.*s'", SHOW, g->t_by_name[i]->name);
    return PT_OK;
}

/* general.alignment: absent (32), or a nonzero power-of-two uint32. */
static int read_alignment(pt_gguf *g)
{
    g->alignment = PT_GGUF_DEFAULT_ALIGNMENT;
    const pt_gguf_kv *kv = pt__gguf_find_kv(g, "general.alignment");
    if (!kv)
        return PT_OK;
    if (kv->type != PT_GGUF_UINT32)
        return pt__err(PT_EFORMAT, "general.alignment: expected uint32, found %s",
                      kv->type == PT_GGUF_ARRAY ? "array" : pt__gguf_type_name(kv->type));
    uint32_t a = *(const uint32_t *)kv->data;
    if (a == 0 || (a & (a - 1)) != 0)
        return pt__err(PT_EFORMAT, "general.alignment %" PRIu32 " is not a nonzero power of two", a);
    g->alignment = a;
    return PT_OK;
}

/* ---- tensor infos ----------------------------------------------------------- */

/* ne, numel and nbytes of t from its dims and type; the overflow checks. */
static int tensor_size(pt_gguf_tensor *t)
{
    uint64_t be, bb;
    if (!pt__ggml_type_block(t->type, &be, &bb))
        return pt__err(PT_EFORMAT, "unknown ggml type %d", t->type);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (t->ne[d] == 0)
            return pt__err(PT_EFORMAT, "ne[%" PRIu32 "] is 0", d);
        if (t->ne[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, t->ne[d], &numel) ||
            numel > (uint64_t)INT64_MAX)
            return pt__err(PT_EFORMAT, "the element count overflows (ne[%" PRIu32 "] = %" PRIu64 ")",
                          d, t->ne[d]);
    }
    if (t->ne[0] % be != 0)
        return pt__err(PT_EFORMAT, "ne[0] = %" PRIu64 " is not a multiple of the %s block size %" PRIu64,
                      t->ne[0], pt__ggml_type_name(t->type), be);
    if (__builtin_mul_overflow(numel / be, bb, &t->nbytes))
        return pt__err(PT_EFORMAT, "the byte size overflows");
    t->numel = numel;
    return PT_OK;
}

static int read_tensor_info(pt_gguf *g, cursor *c, pt_gguf_tensor *t)
{
    int st = get_name(g, c, &t->name, "tensor name");
    if (st != PT_OK)
        return st;
    if ((st = get_u32(c, &t->ndim, "n_dims")) != PT_OK)
        return st;
    if (t->ndim < 1 || t->ndim > PT_GGUF_MAX_DIMS)
        return pt__err(PT_EFORMAT, "n_dims %" PRIu32 " is not in 1..%d", t->ndim, PT_GGUF_MAX_DIMS);
    for (int d = 0; d < PT_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    static const char *const ne_names[PT_GGUF_MAX_DIMS] = {"ne[0]", "ne[1]", "ne[2]", "ne[3]"};
    for (uint32_t d = 0; d < t->ndim; d++)
        if ((st = get_u64(c, &t->ne[d], ne_names[d])) != PT_OK)
            return st;
    uint32_t type;
    if ((st = get_u32(c, &type, "the ggml type")) != PT_OK)
        return st;
    t->type = type >= (uint32_t)PT_GGML_TYPE_END ? -1 : (int)type;
    if (t->type < 0)
        return pt__err(PT_EFORMAT, "unknown ggml type %" PRIu32, type);
    if ((st = tensor_size(t)) != PT_OK)
        return st;
    if ((st = get_u64(c, &t->offset, "the offset")) != PT_OK)
        return st;
    if (t->offset % g->alignment != 0)
        return pt__err(PT_EFORMAT, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                      t->offset, g->alignment);
    return PT_OK;
}

static int read_tensor_infos(pt_gguf *g, cursor *c)
{
    for (size_t i = 0; i < g->n_tensors; i++) {
        pt_gguf_tensor *t = &g->tensors[i];
        int st = read_tensor_info(g, c, t);
        if (st == PT_OK)
            continue;
        if (t->name)
            return pt__err_prefix(st, "tensor '%.*s'", SHOW, t->name);
        return pt__err_prefix(st, "tensor %zu", i);
    }
    return PT_OK;
}

static int cmp_offset(const void *a, const void *b)
{
    uint64_t x = (*(const pt_gguf_tensor *const *)a)->offset;
    uint64_t y = (*(const pt_gguf_tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}

/* Every span inside the data section, and no two overlapping. */
static int place_tensors(pt_gguf *g, size_t header_end)
{
    uint64_t start = ((uint64_t)header_end + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors > 0 && start > g->len)
        return pt__err(PT_EFORMAT, "the data section would start at byte %" PRIu64
                      ", past the end of the file (%zu bytes)", start, g->len);
    g->data_start = start > g->len ? g->len : start;
    uint64_t data_len = g->len - g->data_start;
    for (size_t i = 0; i < g->n_tensors; i++) {
        pt_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_len || t->nbytes > data_len - t->offset)
            return pt__err(PT_EFORMAT, "tensor '%.*s': bytes [%" PRIu64 ", +%" PRIu64
                          ") run past the end of the data section (%" PRIu64 " bytes)",
                          SHOW, t->name, t->offset, t->nbytes, data_len);
        t->data = g->base + g->data_start + t->offset;
    }
    const pt_gguf_tensor **by_off = pt__malloc_array(g->n_tensors ? g->n_tensors : 1, sizeof *by_off);
    if (!by_off)
        return PT_ENOMEM;
    for (size_t i = 0; i < g->n_tensors; i++)
        by_off[i] = &g->tensors[i];
    qsort(by_off, g->n_tensors, sizeof *by_off, cmp_offset);
    int st = PT_OK;
    for (size_t i = 1; i < g->n_tensors && st == PT_OK; i++)
        if (by_off[i - 1]->offset + by_off[i - 1]->nbytes > by_off[i]->offset)
            st = pt__err(PT_EFORMAT, "tensors '%.*s' (bytes %" PRIu64 "..%" PRIu64 ") and '%.*s' "
                        "(from byte %" PRIu64 ") overlap", SHOW, by_off[i - 1]->name,
                        by_off[i - 1]->offset, by_off[i - 1]->offset + by_off[i - 1]->nbytes,
                        SHOW, by_off[i]->name, by_off[i]->offset);
    free(by_off);
    return st;
}

/* ---- the whole header ------------------------------------------------------- */

static int read_all_kv(pt_gguf *g, cursor *c)
{
    for (size_t i = 0; i < g->n_kv; i++) {
        pt_gguf_kv *kv = &g->kv[i];
        int st = read_kv(g, c, kv);
        if (st != PT_OK)
            return kv->key ? st : pt__err_prefix(st, "metadata pair %zu", i);
    }
    return PT_OK;
}

int pt__gguf_parse(pt_gguf *g)
{
    cursor c = {g->base, 0, g->len};
    uint64_t n_tensors, n_kv;
    int st = read_magic_version(g, &c);
    if (st == PT_OK)
        st = read_count(&c, &n_tensors, PT_GGUF_MAX_TENSORS, MIN_TENSOR_BYTES, "tensor count");
    if (st == PT_OK)
        st = read_count(&c, &n_kv, PT_GGUF_MAX_KV, MIN_KV_BYTES, "metadata count");
    if (st == PT_OK && n_tensors > (left(&c) - n_kv * MIN_KV_BYTES) / MIN_TENSOR_BYTES)
        st = pt__err(PT_EFORMAT, "%" PRIu64 " pairs and %" PRIu64 " tensors cannot fit in the %zu bytes left",
                    n_kv, n_tensors, left(&c));
    if (st != PT_OK)
        return st;
    g->n_kv = (size_t)n_kv;
    g->n_tensors = (size_t)n_tensors;
    g->kv = pt__gguf_arena_alloc(&g->arena, g->n_kv * sizeof *g->kv);
    g->tensors = pt__gguf_arena_alloc(&g->arena, g->n_tensors * sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return PT_ENOMEM;
    memset(g->kv, 0, g->n_kv * sizeof *g->kv);
    memset(g->tensors, 0, g->n_tensors * sizeof *g->tensors);
    if ((st = read_all_kv(g, &c)) != PT_OK || (st = index_kv(g)) != PT_OK ||
        (st = read_alignment(g)) != PT_OK || (st = read_tensor_infos(g, &c)) != PT_OK ||
        (st = index_tensors(g)) != PT_OK)
        return st;
    return place_tensors(g, c.pos);
}
