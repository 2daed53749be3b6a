/* Parsing and validating a safetensors header into the handle's tables.
 * Nothing is allocated from a header field before it is validated (the
 * allocations scale with the members actually parsed), every size is
 * computed with overflow checks, and every violation is a PT_EFORMAT or
 * PT_ERANGE naming the tensor and the rule.  Steps, in the order they run:
 * the length prefix, the lexer and cJSON, duplicate top-level keys, each
 * tensor entry, __metadata__, the data spans, and the copy into an arena. */
#include "io/safetensors_internal.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ---- numbers ------------------------------------------------------------------- */

/* Number nodes carry their token index in valueint. */
static int number_index(cJSON *node, size_t *next)
{
    for (cJSON *c = node; c; c = c->next) {
        if (cJSON_IsNumber(c)) {
            if (*next > (size_t)INT32_MAX)
                return pt__err(PT_ERANGE, "header has too many numbers");
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

/* Validate an integer header field, element `index` of `what` ("shape"). */
static int get_uint(const st_lex_result *lr, const cJSON *item, const char *tensor, const char *what,
                    int index, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return pt__err(PT_EFORMAT, "tensor '%s': %s[%d] is not a number", tensor, what, index);
    size_t k = (size_t)item->valueint;
    if (item->valueint < 0 || k >= lr->n_nums)
        return pt__err(PT_EINTERNAL, "tensor '%s': %s[%d] has no number token", tensor, what, index);
    const st_num_token *t = &lr->nums[k];
    switch (t->kind) {
    case ST_NUM_OK:
        *out = t->value;
        return PT_OK;
    case ST_NUM_NEGATIVE:
        return pt__err(PT_EFORMAT, "tensor '%s': %s[%d] is negative", tensor, what, index);
    case ST_NUM_NOT_INTEGER:
        return pt__err(PT_EFORMAT, "tensor '%s': %s[%d] is not an integer (fraction or exponent)",
                      tensor, what, index);
    case ST_NUM_LEADING_ZERO:
        return pt__err(PT_EFORMAT, "tensor '%s': %s[%d] has a leading zero (not valid JSON)", tensor,
                      what, index);
    default:
        return pt__err(PT_ERANGE, "tensor '%s': %s[%d] exceeds 2^53", tensor, what, index);
    }
}

/* ---- one tensor entry ------------------------------------------------------------ */

typedef struct entry {
    const char *name; /* into the cJSON tree until the arena copy */
    int dtype;
    int ndim;
    int64_t shape[PT_ST_MAX_DIMS];
    uint64_t numel, nbytes, begin, end;
} entry;

/* Exactly the members dtype, shape and data_offsets, each once. */
static int entry_members(const cJSON *obj, const char *name, const cJSON **dtype,
                         const cJSON **shape, const cJSON **offs)
{
    if (!cJSON_IsObject(obj))
        return pt__err(PT_EFORMAT, "tensor '%s': entry is not a JSON object", name);
    *dtype = *shape = *offs = NULL;
    for (const cJSON *m = obj->child; m; m = m->next) {
        const cJSON **slot;
        if (strcmp(m->string, "dtype") == 0)
            slot = dtype;
        else if (strcmp(m->string, "shape") == 0)
            slot = shape;
        else if (strcmp(m->string, "data_offsets") == 0)
            slot = offs;
        else
            return pt__err(PT_EFORMAT, "tensor '%s': unknown key '%s' in entry", name, m->string);
        if (*slot)
            return pt__err(PT_EFORMAT, "tensor '%s': duplicate key '%s' in entry", name, m->string);
        *slot = m;
    }
    if (!*dtype)
        return pt__err(PT_EFORMAT, "tensor '%s': missing \"dtype\"", name);
    if (!*shape)
        return pt__err(PT_EFORMAT, "tensor '%s': missing \"shape\"", name);
    if (!*offs)
        return pt__err(PT_EFORMAT, "tensor '%s': missing \"data_offsets\"", name);
    return PT_OK;
}

/* The dimensions and their product (0 if any dimension is 0). */
static int entry_shape(const st_lex_result *lr, const cJSON *shape, entry *e)
{
    const char *name = e->name;
    if (!cJSON_IsArray(shape))
        return pt__err(PT_EFORMAT, "tensor '%s': shape is not an array", name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > PT_ST_MAX_DIMS)
        return pt__err(PT_EUNSUPPORTED, "tensor '%s': rank %d exceeds the supported maximum of %d",
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
                return pt__err(PT_ERANGE, "tensor '%s': shape product overflows (exceeds 2^53 elements)",
                              name);
    e->numel = numel;
    return PT_OK;
}

static int entry_offsets(const st_lex_result *lr, const cJSON *offs, entry *e)
{
    const char *name = e->name;
    if (!cJSON_IsArray(offs))
        return pt__err(PT_EFORMAT, "tensor '%s': data_offsets is not an array", name);
    if (cJSON_GetArraySize(offs) != 2)
        return pt__err(PT_EFORMAT, "tensor '%s': data_offsets must have exactly 2 elements, has %d",
                      name, cJSON_GetArraySize(offs));
    int st = get_uint(lr, offs->child, name, "data_offsets", 0, &e->begin);
    if (st == PT_OK)
        st = get_uint(lr, offs->child->next, name, "data_offsets", 1, &e->end);
    if (st != PT_OK)
        return st;
    if (e->end < e->begin)
        return pt__err(PT_EFORMAT, "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                      (unsigned long long)e->begin, (unsigned long long)e->end);
    return PT_OK;
}

/* numel x dtype bits: whole bytes, and exactly the span of data_offsets. */
static int entry_size(entry *e)
{
    const char *name = e->name, *dt = pt__st_dtype_name(e->dtype);
    uint64_t bits;
    if (__builtin_mul_overflow(e->numel, (uint64_t)pt__st_dtype_bits(e->dtype), &bits))
        return pt__err(PT_ERANGE, "tensor '%s': byte size of %llu x %s overflows", name,
                      (unsigned long long)e->numel, dt);
    if (bits % 8 != 0)
        return pt__err(PT_EFORMAT, "tensor '%s': %llu elements of %s do not fill whole bytes", name,
                      (unsigned long long)e->numel, dt);
    e->nbytes = bits / 8;
    if (e->nbytes != e->end - e->begin)
        return pt__err(PT_EFORMAT,
                      "tensor '%s': shape x dtype size is %llu bytes but data_offsets [%llu, %llu] "
                      "span %llu bytes", name, (unsigned long long)e->nbytes,
                      (unsigned long long)e->begin, (unsigned long long)e->end,
                      (unsigned long long)(e->end - e->begin));
    return PT_OK;
}

static int parse_entry(const st_lex_result *lr, const cJSON *obj, entry *e)
{
    const char *name = e->name;
    const cJSON *dtype, *shape, *offs;
    int st = entry_members(obj, name, &dtype, &shape, &offs);
    if (st != PT_OK)
        return st;
    if (!cJSON_IsString(dtype))
        return pt__err(PT_EFORMAT, "tensor '%s': dtype is not a string", name);
    e->dtype = pt__st_dtype_from_name(dtype->valuestring);
    if (e->dtype < 0)
        return pt__err(PT_EFORMAT, "tensor '%s': unknown dtype '%.32s'", name, dtype->valuestring);
    if ((st = entry_shape(lr, shape, e)) != PT_OK || (st = entry_offsets(lr, offs, e)) != PT_OK)
        return st;
    return entry_size(e);
}

/* ---- the whole header --------------------------------------------------------------- */

/* What the steps build; freed by parse_free (the handle's tables are not). */
typedef struct header_parse {
    st_lex_result lr;
    cJSON *root;
    entry *entries;      /* the tensors; by offset after check_spans */
    size_t count;
    const cJSON *meta;   /* the __metadata__ member, or NULL */
    const cJSON **metas; /* its members, in header order */
    size_t n_meta;
} header_parse;

static void parse_free(header_parse *hp)
{
    cJSON_Delete(hp->root);
    free(hp->lr.nums);
    free(hp->entries);
    free(hp->metas);
}

/* The 8-byte little-endian length N and the split into header and data. */
static int read_length(pt_st_file *f)
{
    const uint8_t *b = f->base;
    size_t len = f->len;
    if (len == 0)
        return pt__err(PT_EFORMAT, "file is empty (a safetensors file starts with an 8-byte header length)");
    if (len < 8)
        return pt__err(PT_EFORMAT, "file is %zu bytes, shorter than the 8-byte header length", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    if (n > PT_ST_MAX_HEADER)
        return pt__err(PT_ERANGE, "header length %llu exceeds the limit of %llu bytes",
                      (unsigned long long)n, (unsigned long long)PT_ST_MAX_HEADER);
    if (n < 2)
        return pt__err(PT_EFORMAT, "header length %llu is too small for a JSON object",
                      (unsigned long long)n);
    if (n > len - 8)
        return pt__err(PT_EFORMAT, "header length %llu points past the end of the file (%zu bytes)",
                      (unsigned long long)n, len);
    f->header_len = n;
    f->data_len = (uint64_t)len - 8 - n;
    return PT_OK;
}

/* Strict lexing, then cJSON; every number node tied to its token. */
static int parse_json(header_parse *hp, const uint8_t *h, size_t n)
{
    int st = pt__st_lex_header(&hp->lr, h, n);
    if (st != PT_OK)
        return st;
    const char *end = NULL;
    hp->root = cJSON_ParseWithLengthOpts((const char *)h, n, &end, 0);
    if (!hp->root) {
        long pos = end ? (long)(end - (const char *)h) : -1;
        return pt__err(PT_EFORMAT, "header is not valid JSON (error near offset %ld)", pos);
    }
    if (!cJSON_IsObject(hp->root))
        return pt__err(PT_EFORMAT, "header is not a JSON object");
    size_t next = 0;
    if ((st = number_index(hp->root->child, &next)) != PT_OK)
        return st;
    if (next != hp->lr.n_nums)
        return pt__err(PT_EFORMAT, "header JSON numbers are malformed (%zu tokens, %zu values)",
                      hp->lr.n_nums, next);
    return PT_OK;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The member names of obj, sorted, into *dup the first name that occurs
 * twice (NULL if none); *n_out the number of members. */
static int find_duplicate(const cJSON *obj, const char **dup, size_t *n_out)
{
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        n++;
    const char **names = pt__calloc(n ? n : 1, sizeof *names);
    if (!names)
        return PT_ENOMEM;
    size_t k = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        names[k++] = c->string;
    qsort(names, n, sizeof *names, cmp_str_ptr);
    *dup = NULL;
    for (size_t i = 1; i < n && !*dup; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            *dup = names[i];
    free(names);
    *n_out = n;
    return PT_OK;
}

/* No duplicate top-level keys (cJSON keeps them all), then each tensor. */
static int parse_entries(header_parse *hp)
{
    const char *dup;
    size_t n_members;
    int st = find_duplicate(hp->root, &dup, &n_members);
    if (st != PT_OK)
        return st;
    if (dup && strcmp(dup, "__metadata__") == 0)
        return pt__err(PT_EFORMAT, "duplicate key '__metadata__'");
    if (dup)
        return pt__err(PT_EFORMAT, "duplicate tensor name '%s'", dup);
    hp->entries = pt__calloc(n_members ? n_members : 1, sizeof *hp->entries);
    if (!hp->entries)
        return PT_ENOMEM;
    for (const cJSON *c = hp->root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            hp->meta = c;
            continue;
        }
        entry *e = &hp->entries[hp->count++];
        e->name = c->string;
        if ((st = parse_entry(&hp->lr, c, e)) != PT_OK)
            return st;
    }
    return PT_OK;
}

/* __metadata__: an object of strings with no duplicate keys. */
static int parse_metadata(header_parse *hp)
{
    const cJSON *meta = hp->meta;
    if (!meta)
        return PT_OK;
    if (!cJSON_IsObject(meta))
        return pt__err(PT_EFORMAT, "__metadata__ is not a JSON object");
    for (const cJSON *m = meta->child; m; m = m->next)
        if (!cJSON_IsString(m))
            return pt__err(PT_EFORMAT, "__metadata__ value for key '%s' is not a string", m->string);
    const char *dup;
    size_t n;
    int st = find_duplicate(meta, &dup, &n);
    if (st != PT_OK)
        return st;
    if (dup)
        return pt__err(PT_EFORMAT, "__metadata__ has duplicate key '%s'", dup);
    hp->metas = pt__calloc(n ? n : 1, sizeof *hp->metas);
    if (!hp->metas)
        return PT_ENOMEM;
    for (const cJSON *m = meta->child; m; m = m->next)
        hp->metas[hp->n_meta++] = m;
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

/* Sorted by offset, the spans are contiguous from 0 to the data size. */
static int check_spans(header_parse *hp, uint64_t data_len)
{
    qsort(hp->entries, hp->count, sizeof *hp->entries, cmp_entry_offset);
    uint64_t expect = 0;
    for (size_t i = 0; i < hp->count; i++) {
        const entry *e = &hp->entries[i];
        if (e->begin > expect)
            return pt__err(PT_EFORMAT, "tensor '%s': data_offsets begin at %llu, leaving a gap after %llu",
                          e->name, (unsigned long long)e->begin, (unsigned long long)expect);
        if (e->begin < expect)
            return pt__err(PT_EFORMAT,
                          "tensor '%s': data_offsets begin at %llu, overlapping the previous tensor "
                          "(which ends at %llu)", e->name, (unsigned long long)e->begin,
                          (unsigned long long)expect);
        expect = e->end;
        if (expect > data_len)
            return pt__err(PT_EFORMAT,
                          "tensor '%s': data_offsets end at %llu, past the end of the data area "
                          "(%llu bytes)", e->name, (unsigned long long)expect,
                          (unsigned long long)data_len);
    }
    if (expect != data_len)
        return pt__err(PT_EFORMAT,
                      "tensor data ends at %llu but the data area is %llu bytes (trailing bytes)",
                      (unsigned long long)expect, (unsigned long long)data_len);
    return PT_OK;
}

/* Bytes for every name and metadata string (with their NULs). */
static int arena_size(const header_parse *hp, size_t *out)
{
    size_t arena = 1;
    for (size_t i = 0; i < hp->count; i++)
        if (!pt__add_size(arena, strlen(hp->entries[i].name) + 1, &arena))
            return pt__err(PT_ENOMEM, "header strings overflow");
    for (size_t i = 0; i < hp->n_meta; i++) {
        size_t sz = strlen(hp->metas[i]->string) + strlen(hp->metas[i]->valuestring) + 2;
        if (!pt__add_size(arena, sz, &arena))
            return pt__err(PT_ENOMEM, "header strings overflow");
    }
    *out = arena;
    return PT_OK;
}

static char *arena_copy(char **s, const char *src)
{
    size_t l = strlen(src) + 1;
    char *at = memcpy(*s, src, l);
    *s += l;
    return at;
}

/* qsort context for the by-name index (qsort has no user pointer in C11). */
static _Thread_local const pt_st_tensor *sort_tensors;

static int cmp_index_name(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    return strcmp(sort_tensors[i].name, sort_tensors[j].name);
}

/* Copy names and metadata into one arena (the cJSON tree then goes) and
 * fill the tensors (offset order), the by-name index and the metadata. */
static int build_tables(pt_st_file *f, const header_parse *hp, const uint8_t *data)
{
    size_t arena = 0, count = hp->count, n_meta = hp->n_meta;
    int st = arena_size(hp, &arena);
    if (st != PT_OK)
        return st;
    f->strings = pt__malloc(arena);
    f->tensors = pt__calloc(count ? count : 1, sizeof *f->tensors);
    f->by_name = pt__calloc(count ? count : 1, sizeof *f->by_name);
    f->meta = pt__calloc(n_meta ? 2 * n_meta : 1, sizeof *f->meta);
    if (!f->strings || !f->tensors || !f->by_name || !f->meta)
        return PT_ENOMEM;
    char *s = f->strings;
    for (size_t i = 0; i < count; i++) {
        const entry *e = &hp->entries[i];
        pt_st_tensor *t = &f->tensors[i];
        t->name = arena_copy(&s, e->name);
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
        f->meta[2 * i] = arena_copy(&s, hp->metas[i]->string);
        f->meta[2 * i + 1] = arena_copy(&s, hp->metas[i]->valuestring);
    }
    f->count = count;
    f->n_meta = n_meta;
    sort_tensors = f->tensors;
    qsort(f->by_name, count, sizeof *f->by_name, cmp_index_name);
    sort_tensors = NULL;
    return PT_OK;
}

int pt__st_parse_header(pt_st_file *f)
{
    int st = read_length(f);
    if (st != PT_OK)
        return st;
    const uint8_t *h = f->base + 8;
    header_parse hp = {0};
    if ((st = parse_json(&hp, h, (size_t)f->header_len)) == PT_OK &&
        (st = parse_entries(&hp)) == PT_OK && (st = parse_metadata(&hp)) == PT_OK &&
        (st = check_spans(&hp, f->data_len)) == PT_OK)
        st = build_tables(f, &hp, h + f->header_len);
    parse_free(&hp);
    return st;
}
