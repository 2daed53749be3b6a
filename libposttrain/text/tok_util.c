/* Tokenizer helpers: growable buffers, hash maps, UTF-8, regex compilation. */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffers -------------------------------------------------------------- */
/* The capacity that holds n + extra items, doubling from 64.  Returns 1 with
 * *cap set when the array must grow, 0 when cap already holds them, or an
 * error naming `what` when the size overflows. */
static int grown_cap(size_t n, size_t extra, size_t *cap, const char *what)
{
    size_t need;
    if (!pt_add_size(n, extra, &need))
        return pt_err(PT_ENOMEM, "tokenizer: %s size overflows", what);
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (!pt_mul_size(c, 2, &c))
            return pt_err(PT_ENOMEM, "tokenizer: %s size overflows", what);
    }
    *cap = c;
    return 1;
}

int tk_buf_reserve(tk_buf *b, size_t extra)
{
    size_t cap = b->cap;
    int st = grown_cap(b->n, extra, &cap, "buffer");
    if (st <= 0)
        return st;
    char *p = realloc(b->p, cap);
    if (!p)
        return pt_err(PT_ENOMEM, "tokenizer: out of memory (%zu bytes)", cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

int tk_buf_put(tk_buf *b, const void *s, size_t n)
{
    if (n == 0)
        return 0;
    if (b->n + n > b->cap || b->n + n < b->n) {
        int st = tk_buf_reserve(b, n);
        if (st)
            return st;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

void tk_buf_free(tk_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

int tk_ids_reserve(tk_ids *a, size_t extra)
{
    size_t cap = a->cap;
    int st = grown_cap(a->n, extra, &cap, "id array");
    if (st <= 0)
        return st;
    int32_t *v = pt_realloc_array(a->v, cap, sizeof *v);
    if (!v)
        return PT_ENOMEM;
    a->v = v;
    a->cap = cap;
    return 0;
}

int tk_ids_push(tk_ids *a, int32_t x)
{
    if (a->n == a->cap) {
        int st = tk_ids_reserve(a, 1);
        if (st)
            return st;
    }
    a->v[a->n++] = x;
    return 0;
}

int tk_ranges_push(tk_ranges *r, size_t a, size_t b, int match)
{
    if (r->n == r->cap) {
        tk_range *v = pt_grow_array(r->v, &r->cap, 32, sizeof *v);
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
    uint32_t *slot = pt_calloc(cap, sizeof *slot);
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
    if (n > UINT32_MAX || m->pool.n > UINT32_MAX - n)
        return pt_err(PT_ERANGE, "tokenizer: vocabulary strings too large");
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
        struct tk_strent *e = pt_grow_array(m->ent, &m->ent_cap, 64, sizeof *e);
        if (!e)
            return PT_ENOMEM;
        m->ent = e;
    }
    uint32_t off = (uint32_t)m->pool.n;
    int st = tk_buf_put(&m->pool, k, n);
    if (st == 0)
        st = tk_buf_putc(&m->pool, '\0');
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
    tk_buf_free(&m->pool);
    memset(m, 0, sizeof *m);
}

int tk_pairmap_init(tk_pairmap *m, size_t expected)
{
    size_t cap = 64;
    while (cap < expected * 2 + 2)
        cap *= 2;
    m->key = pt_calloc(cap, sizeof *m->key);
    m->rank = pt_malloc_array(cap, sizeof *m->rank);
    m->newid = pt_malloc_array(cap, sizeof *m->newid);
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

/* ---- UTF-8 ------------------------------------------------------------------ */
size_t tk_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    unsigned lo = 0x80, hi = 0xBF;
    size_t need;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < need + 1)
        return 0;
    for (size_t i = 1; i <= need; i++) {
        unsigned d = s[i];
        if (d < lo || d > hi)
            return 0;
        lo = 0x80;
        hi = 0xBF;
        v = (v << 6) | (d & 0x3F);
    }
    *cp = v;
    return need + 1;
}

int tk_utf8_put(tk_buf *b, uint32_t cp)
{
    char t[4];
    size_t k;
    if (cp < 0x80) {
        t[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    return tk_buf_put(b, t, k);
}

/* Length of the maximal subpart of a well-formed sequence starting at s (at
 * least 1): what one U+FFFD replaces in a lossy conversion. */
static size_t utf8_maximal_subpart(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 1;
    size_t i = 1;
    while (i <= need && i < n && s[i] >= lo && s[i] <= hi) {
        i++;
        lo = 0x80;
        hi = 0xBF;
    }
    return i;
}

int tk_utf8_lossy(tk_buf *out, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = tk_utf8_next(u + i, n - i, &cp);
        if (k) {
            i += k;
            continue;
        }
        int st = tk_buf_put(out, s + run, i - run);
        if (st == 0)
            st = tk_buf_put(out, "\xEF\xBF\xBD", 3);
        if (st)
            return st;
        i += utf8_maximal_subpart(u + i, n - i);
        run = i;
    }
    return tk_buf_put(out, s + run, n - run);
}

bool tk_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = tk_utf8_next(u + i, n - i, &cp);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

bool tk_is_white_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* ---- regex ---------------------------------------------------------------------- */
/* Letters and numbers that the reference's regex engine (Oniguruma with
 * Unicode 16.0) puts in \\p{L} / \\p{N} but PCRE2 10.42 (Unicode 14.0) does not:
 * assigned in Unicode 15.0-16.0.  Measured by probing the reference with a
 * Split(\\p{L}, Removed) tokenizer on every code point that is a letter or
 * number in Unicode 17 but not in 14.  With a newer PCRE2 they are redundant. */
static const char L_EXTRA[] =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}"
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
static const char N_EXTRA[] =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

/* The reference runs its patterns on Oniguruma, whose Unicode \s is the
 * White_Space property and whose \w is Alphabetic + marks + Nd + Pc.  PCRE2's
 * UCP \s also matches U+180E and its \w differs, so rewrite those escapes
 * into explicit properties (which work inside and outside classes). */
static int rewrite_pattern(tk_buf *out, const char *p, size_t n)
{
    static const char WS[] = "\\p{White_Space}", NWS[] = "\\P{White_Space}";
    static const char W_IN[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
    bool in_class = false;
    size_t class_start = 0;
    int st = 0;
    for (size_t i = 0; i < n && st == 0; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 's')
                st = tk_buf_put(out, WS, sizeof WS - 1);
            else if (e == 'S')
                st = in_class ? tk_buf_put(out, p + i, 2) : tk_buf_put(out, NWS, sizeof NWS - 1);
            else if ((e == 'p' || e == 'P') && i + 2 < n &&
                     (p[i + 2] == 'L' || p[i + 2] == 'N' ||
                      (p[i + 2] == '{' && i + 4 < n && (p[i + 3] == 'L' || p[i + 3] == 'N') && p[i + 4] == '}'))) {
                /* \p{L} \pL \p{N} \pN (and \P outside classes): add the newer ranges */
                char prop = p[i + 2] == '{' ? p[i + 3] : p[i + 2];
                size_t skip = p[i + 2] == '{' ? 5 : 3;
                const char *extra = prop == 'L' ? L_EXTRA : N_EXTRA;
                if (e == 'P' && in_class) {
                    st = tk_buf_put(out, p + i, skip);
                } else {
                    if (!in_class)
                        st = tk_buf_put(out, e == 'P' ? "[^" : "[", e == 'P' ? 2 : 1);
                    if (st == 0)
                        st = tk_buf_put(out, prop == 'L' ? "\\p{L}" : "\\p{N}", 5);
                    if (st == 0)
                        st = tk_buf_put(out, extra, strlen(extra));
                    if (st == 0 && !in_class)
                        st = tk_buf_putc(out, ']');
                }
                i += skip - 1;
                continue;
            } else if (e == 'w' && in_class)
                st = tk_buf_put(out, W_IN, sizeof W_IN - 1);
            else if (e == 'w' || (e == 'W' && !in_class)) {
                st = tk_buf_put(out, e == 'w' ? "[" : "[^", e == 'w' ? 1 : 2);
                if (st == 0)
                    st = tk_buf_put(out, W_IN, sizeof W_IN - 1);
                if (st == 0)
                    st = tk_buf_putc(out, ']');
            } else {
                st = tk_buf_put(out, p + i, 2);
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            class_start = i + 1;
            if (class_start < n && p[class_start] == '^')
                class_start++;
        } else if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:name:] inside a class: copy through ":]" */
            size_t k = i + 2;
            while (k + 1 < n && !(p[k] == ':' && p[k + 1] == ']'))
                k++;
            if (k + 1 < n) {
                st = tk_buf_put(out, p + i, k + 2 - i);
                i = k + 1;
                continue;
            }
        } else if (in_class && c == ']' && i != class_start) {
            in_class = false;
        }
        st = tk_buf_putc(out, c);
    }
    return st;
}

int tk_regex_compile(tk_regex *r, const char *pattern, size_t len, bool literal, const char *where)
{
    int errcode = 0;
    PCRE2_SIZE erroff = 0;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    tk_buf rw = {0};
    if (literal) {
        opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_LITERAL;
    } else {
        int st = rewrite_pattern(&rw, pattern, len);
        if (st) {
            tk_buf_free(&rw);
            return st;
        }
        pattern = rw.p ? rw.p : "";
        len = rw.n;
    }
    r->code = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &errcode, &erroff, NULL);
    tk_buf_free(&rw);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return pt_err(literal ? PT_EFORMAT : PT_EUNSUPPORTED,
                      "tokenizer.json: %s: regex does not compile (at offset %zu after rewriting \\s and \\w): %s",
                      where, (size_t)erroff, (const char *)msg);
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void tk_regex_free(tk_regex *r)
{
    if (r->code)
        pcre2_code_free(r->code);
    r->code = NULL;
}
