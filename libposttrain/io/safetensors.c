/* Strict safetensors reader and durable writer.  See safetensors.h and
 * docs/safetensors.md.  Every byte of an input file is hostile: nothing is
 * allocated from a header field before it is validated, every size is
 * computed with overflow checks, and every violation is a PT_EFORMAT or
 * PT_ERANGE naming the tensor and the rule. */
#include "io/safetensors.h"

#include "core/core.h"
#include "io/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- dtypes -------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bits;
} dtype_info[PT_ST_DTYPE_COUNT] = {
    [PT_ST_F32] = {"F32", 32},         [PT_ST_F16] = {"F16", 16},
    [PT_ST_BF16] = {"BF16", 16},       [PT_ST_F64] = {"F64", 64},
    [PT_ST_I64] = {"I64", 64},         [PT_ST_I32] = {"I32", 32},
    [PT_ST_I16] = {"I16", 16},         [PT_ST_I8] = {"I8", 8},
    [PT_ST_U8] = {"U8", 8},            [PT_ST_BOOL] = {"BOOL", 8},
    [PT_ST_U16] = {"U16", 16},         [PT_ST_U32] = {"U32", 32},
    [PT_ST_U64] = {"U64", 64},         [PT_ST_F8_E5M2] = {"F8_E5M2", 8},
    [PT_ST_F8_E4M3] = {"F8_E4M3", 8},  [PT_ST_F8_E8M0] = {"F8_E8M0", 8},
    [PT_ST_C64] = {"C64", 64},         [PT_ST_F4] = {"F4", 4},
    [PT_ST_F6_E2M3] = {"F6_E2M3", 6},  [PT_ST_F6_E3M2] = {"F6_E3M2", 6},
};

const char *pt_st_dtype_name(int dtype)
{
    if (dtype < 0 || dtype >= PT_ST_DTYPE_COUNT)
        return NULL;
    return dtype_info[dtype].name;
}

int pt_st_dtype_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < PT_ST_DTYPE_COUNT; i++)
        if (strcmp(dtype_info[i].name, name) == 0)
            return i;
    return -1;
}

unsigned pt_st_dtype_bits(int dtype)
{
    if (dtype < 0 || dtype >= PT_ST_DTYPE_COUNT)
        return 0;
    return dtype_info[dtype].bits;
}

/* ---- scalar conversions -------------------------------------------------- */

static inline float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float pt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant x 2^-24, exact in float */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) /* inf or NaN, payload kept */
        return bits_to_f32(sign | 0x7f800000u | (mant << 13));
    return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

float pt_bf16_to_f32(uint16_t b)
{
    return bits_to_f32((uint32_t)b << 16);
}

uint16_t pt_f32_to_bf16(float f)
{
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}

uint16_t pt_f32_to_f16(float f)
{
    uint32_t u = f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep top payload bits, stay NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf (and inf itself) */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
        float v = fabsf(f) * 0x1p24f; /* exact scaling */
        return (uint16_t)(sign | (uint16_t)nearbyintf(v));
    }
    uint32_t h = ((((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* ---- UTF-8 --------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_seq(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    if (c < 0xc2)
        return 0;
    if (c < 0xe0) {
        if (n < 2 || (p[1] & 0xc0) != 0x80)
            return 0;
        return 2;
    }
    if (c < 0xf0) {
        if (n < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80)
            return 0;
        if (c == 0xe0 && p[1] < 0xa0)
            return 0; /* overlong */
        if (c == 0xed && p[1] >= 0xa0)
            return 0; /* surrogate */
        return 3;
    }
    if (c < 0xf5) {
        if (n < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80)
            return 0;
        if (c == 0xf0 && p[1] < 0x90)
            return 0; /* overlong */
        if (c == 0xf4 && p[1] >= 0x90)
            return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

static bool utf8_valid(const char *s)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(p + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

/* ---- header lexer ---------------------------------------------------------
 * cJSON is lenient (raw control characters in strings, any byte <= 0x20 as
 * whitespace, non-UTF-8, "\u0000", numbers through strtod, trailing bytes).
 * This pass enforces strict JSON lexical rules on the raw header and records
 * every number token exactly, in document order; the k-th number node of the
 * cJSON tree (in document order) is the k-th token here. */

enum num_kind { NUM_OK, NUM_NEGATIVE, NUM_NOT_INTEGER, NUM_LEADING_ZERO, NUM_TOO_LARGE };

typedef struct {
    uint64_t value;     /* valid when kind == NUM_OK */
    uint32_t pos;       /* byte offset in the header */
    uint8_t kind;
} num_token;

typedef struct {
    num_token *nums;
    size_t n_nums, cap_nums;
} lex_result;

static bool is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int lex_push(lex_result *lr, num_token t)
{
    if (lr->n_nums == lr->cap_nums) {
        num_token *p = pt_grow_array(lr->nums, &lr->cap_nums, 64, sizeof *p);
        if (!p)
            return PT_ENOMEM;
        lr->nums = p;
    }
    lr->nums[lr->n_nums++] = t;
    return PT_OK;
}

static int lex_header(lex_result *lr, const uint8_t *h, size_t n)
{
    if (n == 0 || h[0] != '{')
        return pt_err(PT_EFORMAT, "header does not start with '{' (the header must be a JSON object)");
    size_t depth = 0;
    size_t i = 0;
    while (i < n) {
        uint8_t c = h[i];
        if (depth == 0 && i > 0) {
            /* after the top-level object: only space padding */
            if (c != ' ')
                return pt_err(PT_EFORMAT,
                              "header has trailing byte 0x%02x at offset %zu after the JSON object "
                              "(only space padding is allowed)", c, i);
            i++;
            continue;
        }
        if (c == '"') {
            i++;
            for (;;) {
                if (i >= n)
                    return pt_err(PT_EFORMAT, "header JSON has an unterminated string");
                c = h[i];
                if (c == '"') {
                    i++;
                    break;
                }
                if (c < 0x20)
                    return pt_err(PT_EFORMAT,
                                  "header has a raw control character 0x%02x in a string at offset %zu",
                                  c, i);
                if (c == '\\') {
                    if (i + 1 >= n)
                        return pt_err(PT_EFORMAT, "header JSON has an unterminated string");
                    if (h[i + 1] == 'u' && i + 5 < n && memcmp(h + i + 2, "0000", 4) == 0)
                        return pt_err(PT_EFORMAT,
                                      "header string contains the escape \\u0000 at offset %zu "
                                      "(NUL is not allowed in names or metadata)", i);
                    i += 2;
                    continue;
                }
                size_t k = utf8_seq(h + i, n - i);
                if (k == 0)
                    return pt_err(PT_EFORMAT, "header is not valid UTF-8 at offset %zu", i);
                i += k;
            }
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
            i++;
            continue;
        }
        if (c == '}' || c == ']') {
            if (depth == 0)
                return pt_err(PT_EFORMAT, "header JSON has an unbalanced '%c' at offset %zu", c, i);
            depth--;
            i++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = i;
            bool neg = false, frac = false, too_long = false;
            size_t digits = 0;
            uint64_t v = 0;
            while (i < n && (h[i] == '-' || h[i] == '+' || h[i] == '.' || h[i] == 'e' ||
                             h[i] == 'E' || (h[i] >= '0' && h[i] <= '9'))) {
                uint8_t d = h[i];
                if (d == '-' && i == start)
                    neg = true;
                else if (d < '0' || d > '9')
                    frac = true;
                else if (!frac) {
                    digits++;
                    if (digits > 17)
                        too_long = true;
                    else
                        v = v * 10 + (uint64_t)(d - '0');
                }
                i++;
            }
            num_token t = {.value = v, .pos = (uint32_t)start, .kind = NUM_OK};
            if (neg)
                t.kind = NUM_NEGATIVE;
            else if (frac)
                t.kind = NUM_NOT_INTEGER;
            else if (digits > 1 && h[start] == '0')
                t.kind = NUM_LEADING_ZERO;
            else if (too_long || v > PT_ST_MAX_INT)
                t.kind = NUM_TOO_LARGE;
            int st = lex_push(lr, t);
            if (st != PT_OK)
                return st;
            continue;
        }
        if (c < 0x20 && !is_ws(c))
            return pt_err(PT_EFORMAT, "header has a control character 0x%02x at offset %zu", c, i);
        if (c >= 0x80)
            return pt_err(PT_EFORMAT, "header has a non-ASCII byte 0x%02x outside a string at offset %zu",
                          c, i);
        i++;
    }
    if (depth != 0)
        return pt_err(PT_EFORMAT, "header JSON object is not closed (truncated header?)");
    return PT_OK;
}

/* ---- the file handle ----------------------------------------------------- */

struct pt_st_file {
    const uint8_t *base;
    size_t len;
    bool mapped;
    char *path;
    uint64_t header_len;
    uint64_t data_len;
    pt_st_tensor *tensors; /* offset order */
    size_t count;
    size_t *by_name;       /* indices into tensors, sorted by name */
    const char **meta;     /* key, value, key, value ... in header order */
    size_t n_meta;
    char *strings;         /* arena for names and metadata */
};

/* Number nodes carry their token index in valueint (set by number_index). */
static int number_index(cJSON *node, size_t *next)
{
    for (cJSON *c = node; c; c = c->next) {
        if (cJSON_IsNumber(c)) {
            if (*next > (size_t)INT32_MAX)
                return pt_err(PT_ERANGE, "header has too many numbers");
            c->valueint = (int)(*next)++;
        }
        if (c->child) {
            int st = number_index(c->child, next);
            if (st != PT_OK)
                return st;
        }
    }
    return PT_OK;
}

/* Validate an integer header field; what = "shape[1]" etc. */
static int get_uint(const lex_result *lr, const cJSON *item, const char *tensor, const char *what,
                    int index, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return pt_err(PT_EFORMAT, "tensor '%s': %s[%d] is not a number", tensor, what, index);
    size_t k = (size_t)item->valueint;
    if (item->valueint < 0 || k >= lr->n_nums)
        return pt_err(PT_EINTERNAL, "tensor '%s': %s[%d] has no number token", tensor, what, index);
    const num_token *t = &lr->nums[k];
    switch (t->kind) {
    case NUM_OK:
        *out = t->value;
        return PT_OK;
    case NUM_NEGATIVE:
        return pt_err(PT_EFORMAT, "tensor '%s': %s[%d] is negative", tensor, what, index);
    case NUM_NOT_INTEGER:
        return pt_err(PT_EFORMAT, "tensor '%s': %s[%d] is not an integer (fraction or exponent)",
                      tensor, what, index);
    case NUM_LEADING_ZERO:
        return pt_err(PT_EFORMAT, "tensor '%s': %s[%d] has a leading zero (not valid JSON)", tensor,
                      what, index);
    default:
        return pt_err(PT_ERANGE, "tensor '%s': %s[%d] exceeds 2^53", tensor, what, index);
    }
}

typedef struct {
    const char *name; /* into the cJSON tree until the arena copy */
    int dtype;
    int ndim;
    int64_t shape[PT_ST_MAX_DIMS];
    uint64_t numel, nbytes, begin, end;
} entry;

static int parse_entry(const lex_result *lr, const cJSON *obj, entry *e)
{
    const char *name = e->name;
    if (!cJSON_IsObject(obj))
        return pt_err(PT_EFORMAT, "tensor '%s': entry is not a JSON object", name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *m = obj->child; m; m = m->next) {
        const cJSON **slot;
        if (strcmp(m->string, "dtype") == 0)
            slot = &dtype;
        else if (strcmp(m->string, "shape") == 0)
            slot = &shape;
        else if (strcmp(m->string, "data_offsets") == 0)
            slot = &offs;
        else
            return pt_err(PT_EFORMAT, "tensor '%s': unknown key '%s' in entry", name, m->string);
        if (*slot)
            return pt_err(PT_EFORMAT, "tensor '%s': duplicate key '%s' in entry", name, m->string);
        *slot = m;
    }
    if (!dtype)
        return pt_err(PT_EFORMAT, "tensor '%s': missing \"dtype\"", name);
    if (!shape)
        return pt_err(PT_EFORMAT, "tensor '%s': missing \"shape\"", name);
    if (!offs)
        return pt_err(PT_EFORMAT, "tensor '%s': missing \"data_offsets\"", name);

    if (!cJSON_IsString(dtype))
        return pt_err(PT_EFORMAT, "tensor '%s': dtype is not a string", name);
    e->dtype = pt_st_dtype_from_name(dtype->valuestring);
    if (e->dtype < 0)
        return pt_err(PT_EFORMAT, "tensor '%s': unknown dtype '%.32s'", name, dtype->valuestring);

    if (!cJSON_IsArray(shape))
        return pt_err(PT_EFORMAT, "tensor '%s': shape is not an array", name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > PT_ST_MAX_DIMS)
        return pt_err(PT_EUNSUPPORTED, "tensor '%s': rank %d exceeds the supported maximum of %d",
                      name, ndim, PT_ST_MAX_DIMS);
    e->ndim = ndim;
    bool zero = false;
    int d = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++) {
        uint64_t v;
        int st = get_uint(lr, x, name, "shape", d, &v);
        if (st != PT_OK)
            return st;
        e->shape[d] = (int64_t)v;
        if (v == 0)
            zero = true;
    }
    uint64_t numel = 1;
    if (zero)
        numel = 0;
    else
        for (d = 0; d < ndim; d++)
            if (__builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel) || numel > PT_ST_MAX_INT)
                return pt_err(PT_ERANGE, "tensor '%s': shape product overflows (exceeds 2^53 elements)",
                              name);
    e->numel = numel;

    if (!cJSON_IsArray(offs))
        return pt_err(PT_EFORMAT, "tensor '%s': data_offsets is not an array", name);
    if (cJSON_GetArraySize(offs) != 2)
        return pt_err(PT_EFORMAT, "tensor '%s': data_offsets must have exactly 2 elements, has %d",
                      name, cJSON_GetArraySize(offs));
    int st = get_uint(lr, offs->child, name, "data_offsets", 0, &e->begin);
    if (st == PT_OK)
        st = get_uint(lr, offs->child->next, name, "data_offsets", 1, &e->end);
    if (st != PT_OK)
        return st;
    if (e->end < e->begin)
        return pt_err(PT_EFORMAT, "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                      (unsigned long long)e->begin, (unsigned long long)e->end);

    uint64_t bits;
    if (__builtin_mul_overflow(numel, (uint64_t)dtype_info[e->dtype].bits, &bits))
        return pt_err(PT_ERANGE, "tensor '%s': byte size of %llu x %s overflows", name,
                      (unsigned long long)numel, dtype_info[e->dtype].name);
    if (bits % 8 != 0)
        return pt_err(PT_EFORMAT, "tensor '%s': %llu elements of %s do not fill whole bytes", name,
                      (unsigned long long)numel, dtype_info[e->dtype].name);
    e->nbytes = bits / 8;
    if (e->nbytes != e->end - e->begin)
        return pt_err(PT_EFORMAT,
                      "tensor '%s': shape x dtype size is %llu bytes but data_offsets [%llu, %llu] "
                      "span %llu bytes", name, (unsigned long long)e->nbytes,
                      (unsigned long long)e->begin, (unsigned long long)e->end,
                      (unsigned long long)(e->end - e->begin));
    return PT_OK;
}

static int cmp_entry_offset(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* qsort context for the by-name index (qsort has no user pointer in C11). */
static _Thread_local const pt_st_tensor *sort_tensors;

static int cmp_index_name(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    return strcmp(sort_tensors[i].name, sort_tensors[j].name);
}

static int parse_header(pt_st_file *f)
{
    const uint8_t *b = f->base;
    size_t len = f->len;
    if (len == 0)
        return pt_err(PT_EFORMAT, "file is empty (a safetensors file starts with an 8-byte header length)");
    if (len < 8)
        return pt_err(PT_EFORMAT, "file is %zu bytes, shorter than the 8-byte header length", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    if (n > PT_ST_MAX_HEADER)
        return pt_err(PT_ERANGE, "header length %llu exceeds the limit of %llu bytes",
                      (unsigned long long)n, (unsigned long long)PT_ST_MAX_HEADER);
    if (n < 2)
        return pt_err(PT_EFORMAT, "header length %llu is too small for a JSON object",
                      (unsigned long long)n);
    if (n > len - 8)
        return pt_err(PT_EFORMAT, "header length %llu points past the end of the file (%zu bytes)",
                      (unsigned long long)n, len);
    f->header_len = n;
    f->data_len = (uint64_t)len - 8 - n;
    const uint8_t *h = b + 8;

    lex_result lr = {0};
    cJSON *root = NULL;
    entry *entries = NULL;
    const cJSON **metas = NULL;
    const char **names = NULL;
    int st = lex_header(&lr, h, (size_t)n);
    if (st != PT_OK)
        goto done;

    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts((const char *)h, (size_t)n, &end, 0);
    if (!root) {
        long pos = end ? (long)(end - (const char *)h) : -1;
        st = pt_err(PT_EFORMAT, "header is not valid JSON (error near offset %ld)", pos);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        st = pt_err(PT_EFORMAT, "header is not a JSON object");
        goto done;
    }
    size_t next = 0;
    if ((st = number_index(root->child, &next)) != PT_OK)
        goto done;
    if (next != lr.n_nums) {
        st = pt_err(PT_EFORMAT, "header JSON numbers are malformed (%zu tokens, %zu values)",
                    lr.n_nums, next);
        goto done;
    }

    size_t n_members = 0;
    for (const cJSON *c = root->child; c; c = c->next)
        n_members++;
    entries = pt_calloc(n_members ? n_members : 1, sizeof *entries);
    names = pt_calloc(n_members ? n_members : 1, sizeof *names);
    if (!entries || !names) {
        st = PT_ENOMEM;
        goto done;
    }
    const cJSON *meta = NULL;
    size_t count = 0;
    for (const cJSON *c = root->child; c; c = c->next)
        names[count++] = c->string;
    /* duplicate keys at the top level (cJSON keeps them all) */
    qsort(names, count, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < count; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            if (strcmp(names[i], "__metadata__") == 0)
                st = pt_err(PT_EFORMAT, "duplicate key '__metadata__'");
            else
                st = pt_err(PT_EFORMAT, "duplicate tensor name '%s'", names[i]);
            goto done;
        }
    count = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            meta = c;
            continue;
        }
        entry *e = &entries[count++];
        e->name = c->string;
        if ((st = parse_entry(&lr, c, e)) != PT_OK)
            goto done;
    }

    size_t n_meta = 0;
    if (meta) {
        if (!cJSON_IsObject(meta)) {
            st = pt_err(PT_EFORMAT, "__metadata__ is not a JSON object");
            goto done;
        }
        for (const cJSON *m = meta->child; m; m = m->next) {
            if (!cJSON_IsString(m)) {
                st = pt_err(PT_EFORMAT, "__metadata__ value for key '%s' is not a string", m->string);
                goto done;
            }
            n_meta++;
        }
        metas = pt_calloc(n_meta ? n_meta : 1, sizeof *metas);
        free(names); /* reused for the metadata keys, which may outnumber the members */
        names = pt_calloc(n_meta ? n_meta : 1, sizeof *names);
        if (!metas || !names) {
            st = PT_ENOMEM;
            goto done;
        }
        size_t k = 0;
        for (const cJSON *m = meta->child; m; m = m->next)
            names[k++] = m->string;
        qsort(names, n_meta, sizeof *names, cmp_str_ptr);
        for (size_t i = 1; i < n_meta; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                st = pt_err(PT_EFORMAT, "__metadata__ has duplicate key '%s'", names[i]);
                goto done;
            }
        k = 0;
        for (const cJSON *m = meta->child; m; m = m->next)
            metas[k++] = m;
    }

    /* offsets: sorted, contiguous from 0, ending exactly at the data size */
    qsort(entries, count, sizeof *entries, cmp_entry_offset);
    uint64_t expect = 0;
    for (size_t i = 0; i < count; i++) {
        const entry *e = &entries[i];
        if (e->begin > expect) {
            st = pt_err(PT_EFORMAT, "tensor '%s': data_offsets begin at %llu, leaving a gap after %llu",
                        e->name, (unsigned long long)e->begin, (unsigned long long)expect);
            goto done;
        }
        if (e->begin < expect) {
            st = pt_err(PT_EFORMAT,
                        "tensor '%s': data_offsets begin at %llu, overlapping the previous tensor "
                        "(which ends at %llu)", e->name, (unsigned long long)e->begin,
                        (unsigned long long)expect);
            goto done;
        }
        expect = e->end;
        if (expect > f->data_len) {
            st = pt_err(PT_EFORMAT,
                        "tensor '%s': data_offsets end at %llu, past the end of the data area "
                        "(%llu bytes)", e->name, (unsigned long long)expect,
                        (unsigned long long)f->data_len);
            goto done;
        }
    }
    if (expect != f->data_len) {
        st = pt_err(PT_EFORMAT,
                    "tensor data ends at %llu but the data area is %llu bytes (trailing bytes)",
                    (unsigned long long)expect, (unsigned long long)f->data_len);
        goto done;
    }

    /* copy names and metadata into one arena; the cJSON tree then goes */
    size_t arena = 1, sz;
    for (size_t i = 0; i < count; i++) {
        if (!pt_add_size(arena, strlen(entries[i].name) + 1, &arena)) {
            st = pt_err(PT_ENOMEM, "header strings overflow");
            goto done;
        }
    }
    for (size_t i = 0; i < n_meta; i++) {
        sz = strlen(metas[i]->string) + strlen(metas[i]->valuestring) + 2;
        if (!pt_add_size(arena, sz, &arena)) {
            st = pt_err(PT_ENOMEM, "header strings overflow");
            goto done;
        }
    }
    f->strings = pt_malloc(arena);
    f->tensors = pt_calloc(count ? count : 1, sizeof *f->tensors);
    f->by_name = pt_calloc(count ? count : 1, sizeof *f->by_name);
    f->meta = pt_calloc(n_meta ? 2 * n_meta : 1, sizeof *f->meta);
    if (!f->strings || !f->tensors || !f->by_name || !f->meta) {
        st = PT_ENOMEM;
        goto done;
    }
    char *s = f->strings;
    const uint8_t *data = h + n;
    for (size_t i = 0; i < count; i++) {
        const entry *e = &entries[i];
        pt_st_tensor *t = &f->tensors[i];
        size_t l = strlen(e->name) + 1;
        memcpy(s, e->name, l);
        t->name = s;
        s += l;
        t->dtype = e->dtype;
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->numel = (size_t)e->numel;
        t->nbytes = (size_t)e->nbytes;
        t->offset = e->begin;
        t->data = data + e->begin;
        f->by_name[i] = i;
    }
    for (size_t i = 0; i < n_meta; i++) {
        size_t l = strlen(metas[i]->string) + 1;
        memcpy(s, metas[i]->string, l);
        f->meta[2 * i] = s;
        s += l;
        l = strlen(metas[i]->valuestring) + 1;
        memcpy(s, metas[i]->valuestring, l);
        f->meta[2 * i + 1] = s;
        s += l;
    }
    f->count = count;
    f->n_meta = n_meta;
    sort_tensors = f->tensors;
    qsort(f->by_name, count, sizeof *f->by_name, cmp_index_name);
    sort_tensors = NULL;
    st = PT_OK;
done:
    cJSON_Delete(root);
    free(lr.nums);
    free(entries);
    free(names);
    free(metas);
    return st;
}

void pt_st_close(pt_st_file *f)
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

static int finish_open(pt_st_file **out, pt_st_file *f)
{
    int st = parse_header(f);
    if (st != PT_OK) {
        pt_err_prefix(st, "%s", f->path);
        pt_st_close(f);
        return st;
    }
    *out = f;
    return PT_OK;
}

int pt_st_open_memory(pt_st_file **out, const void *buf, size_t len)
{
    if (!out)
        return pt_err(PT_EINVAL, "pt_st_open_memory: out is NULL");
    *out = NULL;
    if (!buf && len > 0)
        return pt_err(PT_EINVAL, "pt_st_open_memory: buffer is NULL");
    pt_st_file *f = pt_calloc(1, sizeof *f);
    if (!f)
        return PT_ENOMEM;
    f->path = pt_strdup("<memory>");
    if (!f->path) {
        free(f);
        return PT_ENOMEM;
    }
    f->base = buf;
    f->len = len;
    return finish_open(out, f);
}

int pt_st_open(pt_st_file **out, const char *path)
{
    if (!out)
        return pt_err(PT_EINVAL, "pt_st_open: out is NULL");
    *out = NULL;
    if (!path)
        return pt_err(PT_EINVAL, "pt_st_open: path is NULL");
    /* O_NONBLOCK: a FIFO or device under a hostile path must not hang the open */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return pt_err(PT_ENOTFOUND, "%s: no such file", path);
        return pt_io_errno(errno, "open", path);
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int st = pt_io_errno(errno, "stat", path);
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return pt_err(PT_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return pt_err(PT_ERANGE, "%s: file too large to map", path);
    }
    pt_st_file *f = pt_calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return PT_ENOMEM;
    }
    f->path = pt_strdup(path);
    if (!f->path) {
        free(f);
        close(fd);
        return PT_ENOMEM;
    }
    f->len = (size_t)sb.st_size;
    if (f->len > 0) {
        void *p = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int st = pt_io_errno(errno, "mmap", path);
            close(fd);
            free(f->path);
            free(f);
            return st;
        }
        f->base = p;
        f->mapped = true;
    }
    close(fd);
    return finish_open(out, f);
}

const char *pt_st_path(const pt_st_file *f)
{
    return f ? f->path : NULL;
}

size_t pt_st_count(const pt_st_file *f)
{
    return f ? f->count : 0;
}

const pt_st_tensor *pt_st_tensor_at(const pt_st_file *f, size_t i)
{
    if (!f || i >= f->count)
        return NULL;
    return &f->tensors[i];
}

const pt_st_tensor *pt_st_find(const pt_st_file *f, const char *name)
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

uint64_t pt_st_header_size(const pt_st_file *f)
{
    return f ? f->header_len : 0;
}

uint64_t pt_st_data_size(const pt_st_file *f)
{
    return f ? f->data_len : 0;
}

const char *pt_st_metadata(const pt_st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

size_t pt_st_metadata_count(const pt_st_file *f)
{
    return f ? f->n_meta : 0;
}

int pt_st_metadata_at(const pt_st_file *f, size_t i, const char **key, const char **value)
{
    if (!f || i >= f->n_meta)
        return pt_err(PT_EINVAL, "metadata index %zu out of range", i);
    if (key)
        *key = f->meta[2 * i];
    if (value)
        *value = f->meta[2 * i + 1];
    return PT_OK;
}

/* ---- reading as float ---------------------------------------------------- */

static inline uint16_t load_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
static inline uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
#endif

int pt_st_read_f32(const pt_st_tensor *t, float *dst, size_t numel)
{
    if (!t)
        return pt_err(PT_EINVAL, "pt_st_read_f32: tensor is NULL");
    if (numel != t->numel)
        return pt_err(PT_ESHAPE, "tensor '%s' has %zu elements, the caller expects %zu", t->name,
                      t->numel, numel);
    if (t->dtype != PT_ST_F32 && t->dtype != PT_ST_F16 && t->dtype != PT_ST_BF16)
        return pt_err(PT_EUNSUPPORTED, "tensor '%s' has dtype %s; only F32, F16 and BF16 load as float",
                      t->name, pt_st_dtype_name(t->dtype) ? pt_st_dtype_name(t->dtype) : "?");
    if (numel == 0)
        return PT_OK;
    if (!dst)
        return pt_err(PT_EINVAL, "pt_st_read_f32: destination for tensor '%s' is NULL", t->name);
    const uint8_t *src = t->data;
    long long n = (long long)numel;
    int nt = numel >= ((size_t)1 << 16) ? pt_get_num_threads() : 1;
    switch (t->dtype) {
    case PT_ST_F32:
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(dst, src, numel * sizeof(float));
#else
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = bits_to_f32(load_u32(src + 4 * i));
#endif
        break;
    case PT_ST_F16:
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = pt_f16_to_f32(load_u16(src + 2 * i));
        break;
    default:
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = pt_bf16_to_f32(load_u16(src + 2 * i));
        break;
    }
    return PT_OK;
}

/* ---- writer -------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    bool failed;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    size_t need;
    if (!pt_add_size(b->len, n + 1, &need)) {
        b->failed = true;
        return;
    }
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) {
            if (!pt_mul_size(cap, 2, &cap)) {
                b->failed = true;
                return;
            }
        }
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_json_string(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"')
            sb_put(b, "\\\"", 2);
        else if (*p == '\\')
            sb_put(b, "\\\\", 2);
        else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else
            sb_put(b, (const char *)p, 1);
    }
    sb_put(b, "\"", 1);
}

static void sb_u64(sbuf *b, uint64_t v)
{
    char num[24];
    int k = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    sb_put(b, num, (size_t)k);
}

static int cmp_write_name(const void *a, const void *b)
{
    const pt_st_write_tensor *x = *(const pt_st_write_tensor *const *)a;
    const pt_st_write_tensor *y = *(const pt_st_write_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_kv_key(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

int pt_st_write(const char *path, const pt_st_write_tensor *tensors, size_t n,
                const char *const *metadata_kv, size_t n_metadata_pairs)
{
    if (!path || !*path)
        return pt_err(PT_EINVAL, "pt_st_write: path is NULL or empty");
    if (!tensors && n > 0)
        return pt_err(PT_EINVAL, "pt_st_write %s: tensors is NULL", path);
    if (!metadata_kv && n_metadata_pairs > 0)
        return pt_err(PT_EINVAL, "pt_st_write %s: metadata is NULL", path);

    const pt_st_write_tensor **order = pt_calloc(n ? n : 1, sizeof *order);
    uint64_t *sizes = pt_calloc(n ? n : 1, sizeof *sizes);
    const char *const **kv = pt_calloc(n_metadata_pairs ? n_metadata_pairs : 1, sizeof *kv);
    sbuf hb = {0};
    int st = PT_OK;
    if (!order || !sizes || !kv) {
        st = PT_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const pt_st_write_tensor *t = &tensors[i];
        if (!t->name) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: tensor %zu has no name", path, i);
            goto done;
        }
        if (!utf8_valid(t->name)) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: tensor name '%s' is not valid UTF-8", path, t->name);
            goto done;
        }
        if (strcmp(t->name, "__metadata__") == 0) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: '__metadata__' is reserved, not a tensor name", path);
            goto done;
        }
        if (t->dtype < 0 || t->dtype >= PT_ST_DTYPE_COUNT) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: tensor '%s' has unknown dtype %d", path, t->name,
                        t->dtype);
            goto done;
        }
        if (t->ndim < 0 || t->ndim > PT_ST_MAX_DIMS) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: tensor '%s' has rank %d (0..%d allowed)", path,
                        t->name, t->ndim, PT_ST_MAX_DIMS);
            goto done;
        }
        uint64_t numel = 1;
        bool zero = false;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (uint64_t)t->shape[d] > PT_ST_MAX_INT) {
                st = pt_err(PT_EINVAL, "pt_st_write %s: tensor '%s' has invalid dimension %lld", path,
                            t->name, (long long)t->shape[d]);
                goto done;
            }
            if (t->shape[d] == 0)
                zero = true;
        }
        for (int d = 0; d < t->ndim && !zero; d++)
            if (__builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel) || numel > PT_ST_MAX_INT) {
                st = pt_err(PT_EINVAL, "pt_st_write %s: tensor '%s' is too large", path, t->name);
                goto done;
            }
        if (zero)
            numel = 0;
        uint64_t bits = numel * dtype_info[t->dtype].bits; /* numel <= 2^53, bits <= 64: no overflow */
        if (bits % 8 != 0) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: tensor '%s': %llu elements of %s do not fill whole "
                        "bytes", path, t->name, (unsigned long long)numel, dtype_info[t->dtype].name);
            goto done;
        }
        sizes[i] = bits / 8;
        if (sizes[i] > 0 && !t->data) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: tensor '%s' has no data", path, t->name);
            goto done;
        }
        order[i] = t;
    }
    qsort(order, n, sizeof *order, cmp_write_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: duplicate tensor name '%s'", path, order[i]->name);
            goto done;
        }
    for (size_t i = 0; i < n_metadata_pairs; i++) {
        const char *k = metadata_kv[2 * i], *v = metadata_kv[2 * i + 1];
        if (!k || !v) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: metadata pair %zu has a NULL key or value", path, i);
            goto done;
        }
        if (!utf8_valid(k) || !utf8_valid(v)) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: metadata '%s' is not valid UTF-8", path, k);
            goto done;
        }
        kv[i] = &metadata_kv[2 * i];
    }
    qsort(kv, n_metadata_pairs, sizeof *kv, cmp_kv_key);
    for (size_t i = 1; i < n_metadata_pairs; i++)
        if (strcmp(kv[i - 1][0], kv[i][0]) == 0) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: duplicate metadata key '%s'", path, kv[i][0]);
            goto done;
        }

    /* header JSON: metadata first (as Hugging Face writes it), then tensors by name */
    sb_str(&hb, "{");
    bool first = true;
    if (n_metadata_pairs > 0) {
        sb_str(&hb, "\"__metadata__\":{");
        for (size_t i = 0; i < n_metadata_pairs; i++) {
            if (i)
                sb_str(&hb, ",");
            sb_json_string(&hb, kv[i][0]);
            sb_str(&hb, ":");
            sb_json_string(&hb, kv[i][1]);
        }
        sb_str(&hb, "}");
        first = false;
    }
    /* sizes[] is indexed by input position; recover it from the pointer */
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const pt_st_write_tensor *t = order[i];
        uint64_t sz = sizes[t - tensors];
        if (!first)
            sb_str(&hb, ",");
        first = false;
        sb_json_string(&hb, t->name);
        sb_str(&hb, ":{\"dtype\":\"");
        sb_str(&hb, dtype_info[t->dtype].name);
        sb_str(&hb, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d)
                sb_str(&hb, ",");
            sb_u64(&hb, (uint64_t)t->shape[d]);
        }
        sb_str(&hb, "],\"data_offsets\":[");
        sb_u64(&hb, offset);
        sb_str(&hb, ",");
        if (__builtin_add_overflow(offset, sz, &offset) || offset > PT_ST_MAX_INT) {
            st = pt_err(PT_EINVAL, "pt_st_write %s: total data size exceeds 2^53 bytes", path);
            goto done;
        }
        sb_u64(&hb, offset);
        sb_str(&hb, "]}");
    }
    sb_str(&hb, "}");
    while (!hb.failed && hb.len % 8 != 0)
        sb_str(&hb, " ");
    if (hb.failed) {
        st = pt_err(PT_ENOMEM, "pt_st_write %s: out of memory building the header", path);
        goto done;
    }
    if ((uint64_t)hb.len > PT_ST_MAX_HEADER) {
        st = pt_err(PT_ERANGE, "pt_st_write %s: header of %zu bytes exceeds the %llu-byte limit", path,
                    hb.len, (unsigned long long)PT_ST_MAX_HEADER);
        goto done;
    }

    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (uint8_t)((uint64_t)hb.len >> (8 * i));
    pt_atomic_file af;
    if ((st = pt_atomic_open(&af, path)) != PT_OK)
        goto done;
    st = pt_atomic_write(&af, lenbuf, sizeof lenbuf);
    if (st == PT_OK)
        st = pt_atomic_write(&af, hb.p, hb.len);
    for (size_t i = 0; i < n && st == PT_OK; i++) {
        uint64_t sz = sizes[order[i] - tensors];
        if (sz > 0)
            st = pt_atomic_write(&af, order[i]->data, (size_t)sz);
    }
    if (st != PT_OK) {
        pt_atomic_abort(&af);
        goto done;
    }
    st = pt_atomic_commit(&af);
done:
    free(order);
    free(sizes);
    free(kv);
    free(hb.p);
    return st;
}
