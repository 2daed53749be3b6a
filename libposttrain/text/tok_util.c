/* Tokenizer containers: id and range arrays, hash maps, UTF-8 units. */
#include "text/tok_util.h"
#include "posttrain/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- int arrays and ranges ------------------------------------------------- */
int tk_ids_reserve(tk_ids *a, size_t extra)
{
    size_t need;
    if (!pt__add_size(a->n, extra, &need))
        return pt__err(PT_ENOMEM, "tokenizer: id array size overflows");
    if (need <= a->cap)
        return 0;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < need)
        if (!pt__mul_size(cap, 2, &cap))
            return pt__err(PT_ENOMEM, "tokenizer: id array size overflows");
    int32_t *v = pt__realloc_array(a->v, cap, sizeof *v);
    if (!v)
        return PT_ENOMEM;
    a->v = v;
    a->cap = cap;
    return 0;
}

int tk_ids_append(tk_ids *a, const int32_t *v, size_t n)
{
    if (n == 0)
        return 0;
    int st = tk_ids_reserve(a, n);
    if (st)
        return st;
    memcpy(a->v + a->n, v, n * sizeof *v);
    a->n += n;
    return 0;
}

int tk_ranges_push(tk_ranges *r, size_t a, size_t b, int match)
{
    if (r->n == r->cap) {
        tk_range *v = pt__grow_array(r->v, &r->cap, 32, sizeof *v);
        if (!v)
            return PT_ENOMEM;
        r->v = v;
    }
    r->v[r->n].a = a;
    r->v[r->n].b = b;
    r->v[r->n].match = match;
    r->n++;
    return 0;
}

/* ---- hashing ---------------------------------------------------------------- */
uint64_t tk_hash(const void *data, size_t n)
{
    const unsigned char *s = data;
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 32;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return h;
}

static int strmap_grow(tk_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint32_t *slot = pt__calloc(cap, sizeof *slot);
    if (!slot)
        return PT_ENOMEM;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = (size_t)m->ent[i].hash & (cap - 1);
        while (slot[j])
            j = (j + 1) & (cap - 1);
        slot[j] = (uint32_t)(i + 1);
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return 0;
}

int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t val)
{
    if (n > UINT32_MAX || m->pool.len > UINT32_MAX - n)
        return pt__err(PT_ERANGE, "tokenizer: vocabulary strings too large");
    if ((m->n + 1) * 2 > m->cap) {
        int st = strmap_grow(m);
        if (st)
            return st;
    }
    uint64_t h = tk_hash(k, n);
    size_t j = (size_t)h & (m->cap - 1);
    while (m->slot[j]) {
        const struct tk_strent *e = &m->ent[m->slot[j] - 1];
        if (e->hash == h && e->len == n && memcmp(m->pool.p + e->off, k, n) == 0)
            return 1;
        j = (j + 1) & (m->cap - 1);
    }
    if (m->n == m->ent_cap) {
        struct tk_strent *e = pt__grow_array(m->ent, &m->ent_cap, 64, sizeof *e);
        if (!e)
            return PT_ENOMEM;
        m->ent = e;
    }
    uint32_t off = (uint32_t)m->pool.len;
    int st = pt__strbuf_put(&m->pool, k, n);
    if (st == 0)
        st = pt__strbuf_putc(&m->pool, '\0');
    if (st)
        return st;
    m->ent[m->n].hash = h;
    m->ent[m->n].off = off;
    m->ent[m->n].len = (uint32_t)n;
    m->ent[m->n].val = val;
    m->n++;
    m->slot[j] = (uint32_t)m->n;
    return 0;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n)
{
    if (m->cap == 0)
        return -1;
    uint64_t h = tk_hash(k, n);
    size_t j = (size_t)h & (m->cap - 1);
    while (m->slot[j]) {
        const struct tk_strent *e = &m->ent[m->slot[j] - 1];
        if (e->hash == h && e->len == n && memcmp(m->pool.p + e->off, k, n) == 0)
            return e->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tk_strmap_free(tk_strmap *m)
{
    free(m->slot);
    free(m->ent);
    pt__strbuf_free(&m->pool);
    memset(m, 0, sizeof *m);
}

int tk_pairmap_init(tk_pairmap *m, size_t expected)
{
    size_t cap = 64;
    while (cap < expected * 2 + 2)
        cap *= 2;
    m->key = pt__calloc(cap, sizeof *m->key);
    m->rank = pt__malloc_array(cap, sizeof *m->rank);
    m->newid = pt__malloc_array(cap, sizeof *m->newid);
    if (!m->key || !m->rank || !m->newid) {
        tk_pairmap_free(m);
        return PT_ENOMEM;
    }
    m->cap = cap;
    m->n = 0;
    return 0;
}

void tk_pairmap_put(tk_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t newid)
{
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t mask = m->cap - 1, i = (size_t)(h >> 20) & mask;
    while (m->key[i] != 0 && m->key[i] != k)
        i = (i + 1) & mask;
    if (m->key[i] == 0)
        m->n++;
    m->key[i] = k;
    m->rank[i] = rank;
    m->newid[i] = newid;
}

void tk_pairmap_free(tk_pairmap *m)
{
    free(m->key);
    free(m->rank);
    free(m->newid);
    memset(m, 0, sizeof *m);
}

/* ---- UTF-8 units -------------------------------------------------------------- */
size_t tk_utf8_unit_back(const char *s, size_t a, size_t b, uint32_t *cp)
{
    size_t p = b - 1;
    while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80 && b - p < 4)
        p--;
    size_t k = tk_utf8_unit(s + p, b - p, cp);
    if (p + k != b) {
        *cp = TK_BAD_CP;
        return 1;
    }
    return k;
}

/* Length of the maximal subpart of a well-formed sequence starting at s (at
 * least 1): what one U+FFFD replaces in a lossy conversion.  s[0..i] is such
 * a prefix when some valid sequence starts with it, which core's decoder
 * tells once the rest is filled with continuation bytes (any continuation
 * byte is valid after the second position). */
static size_t utf8_maximal_subpart(const unsigned char *s, size_t n)
{
    size_t need = s[0] >= 0xF0 ? 3 : s[0] >= 0xE0 ? 2 : 1;
    size_t i = 1;
    while (i <= need && i < n) {
        unsigned char t[4] = {0x80, 0x80, 0x80, 0x80};
        memcpy(t, s, i + 1);
        uint32_t cp;
        if (pt__utf8_next(t, need + 1, &cp) == 0)
            break;
        i++;
    }
    return i;
}

int tk_utf8_lossy(pt_strbuf *out, const char *s, size_t n)
{
    size_t i = 0;
    for (;;) {
        size_t ok = pt__utf8_valid_prefix(s + i, n - i);
        int st = pt__strbuf_put(out, s + i, ok);
        i += ok;
        if (st || i == n)
            return st;
        pt__strbuf_put(out, "\xEF\xBF\xBD", 3);
        i += utf8_maximal_subpart((const unsigned char *)s + i, n - i);
    }
}

bool tk_is_white_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* ---- pt_ids_parse ------------------------------------------------------------- */

static bool id_separator(char c)
{
    return c == ',' || c == ' ' || c == '\t' || c == '\n';
}

int pt_ids_parse(int32_t **ids, size_t *n, const char *s)
{
    PT_CHECK_NULL(ids);
    *ids = NULL;
    PT_CHECK_NULL(n);
    *n = 0;
    PT_CHECK_NULL(s);
    int32_t *out = pt__malloc_array(strlen(s) / 2 + 1, sizeof *out);
    if (!out)
        return PT_ENOMEM;
    size_t k = 0;
    for (const char *p = s;;) {
        while (id_separator(*p))
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX || (*end && !id_separator(*end))) {
            pt_free(out);
            return pt__err(PT_EINVAL, "pt_ids_parse: '%s' at offset %zu is not an int32 id", s,
                           (size_t)(p - s));
        }
        out[k++] = (int32_t)v;
        p = end;
    }
    if (k == 0) {
        pt_free(out);
        return pt__err(PT_EINVAL, "pt_ids_parse: '%s' holds no ids", s);
    }
    *ids = out;
    *n = k;
    return PT_OK;
}
