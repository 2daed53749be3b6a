/* Containers and character helpers of the tokenizer engine: growable id and
 * range arrays, hash maps over strings and over id pairs, and UTF-8 units
 * (core's strict decoder, with a bad byte taken as a one-byte unit).  Bytes
 * are built in core's pt_strbuf.  Not installed; knows nothing of the
 * tokenizer itself (that is tok_internal.h). */
#ifndef PT_TEXT_TOK_UTIL_H
#define PT_TEXT_TOK_UTIL_H

#include "core/core.h"
#include "core/strbuf.h"
#include "core/utf8.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- int arrays and ranges -------------------------------------------------- */
typedef struct tk_ids {
    int32_t *v;
    size_t n, cap;
} tk_ids;
/* Room for `extra` more ids. */
int tk_ids_reserve(tk_ids *a, size_t extra);
int tk_ids_append(tk_ids *a, const int32_t *v, size_t n);
static inline int tk_ids_push(tk_ids *a, int32_t x)
{
    if (a->n == a->cap) {
        int st = tk_ids_reserve(a, 1);
        if (st)
            return st;
    }
    a->v[a->n++] = x;
    return 0;
}

/* Ranges inside a buffer. */
typedef struct tk_range {
    size_t a, b;   /* [a, b) */
    int match;     /* for split: the range is a regex match */
} tk_range;
typedef struct tk_ranges {
    tk_range *v;
    size_t n, cap;
} tk_ranges;
int tk_ranges_push(tk_ranges *r, size_t a, size_t b, int match);

/* A buffer that lives across calls (per-thread contexts, decode streams):
 * empty it and forget an earlier failure, keeping the memory. */
static inline void tk_strbuf_reuse(pt_strbuf *b)
{
    b->err = PT_OK;
    pt__strbuf_clear(b);
}

/* ---- hashing ------------------------------------------------------------ */
uint64_t tk_hash(const void *s, size_t n);

/* String -> int32 map; keys are copied into an internal pool. */
typedef struct tk_strmap {
    uint32_t *slot;    /* index+1 into ent, 0 = empty */
    size_t cap;        /* power of two */
    struct tk_strent {
        uint64_t hash;
        uint32_t off, len;
        int32_t val;
    } *ent;
    size_t n, ent_cap;
    pt_strbuf pool;    /* the keys, each NUL-terminated */
} tk_strmap;
/* Insert; returns 1 if the key already existed (value left unchanged), 0 if
 * inserted, <0 on error. */
int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t val);
/* Value or -1. */
int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n);
void tk_strmap_free(tk_strmap *m);
static inline const char *tk_strmap_key(const tk_strmap *m, size_t i, size_t *len)
{
    *len = m->ent[i].len;
    return m->pool.p + m->ent[i].off;
}

/* (id, id) -> (rank, new id) map for BPE merges. */
typedef struct tk_pairmap {
    uint64_t *key;     /* (a << 32 | b) + 1; 0 = empty */
    uint32_t *rank;
    int32_t *newid;
    size_t cap, n;
} tk_pairmap;
int tk_pairmap_init(tk_pairmap *m, size_t expected);
/* Insert or overwrite (a later duplicate merge overwrites the earlier one, as
 * the reference's HashMap does). */
void tk_pairmap_put(tk_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t newid);
static inline bool tk_pairmap_get(const tk_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *newid)
{
    if (m->cap == 0)
        return false;
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t mask = m->cap - 1, i = (size_t)(h >> 20) & mask;
    for (;;) {
        uint64_t s = m->key[i];
        if (s == k) {
            *rank = m->rank[i];
            *newid = m->newid[i];
            return true;
        }
        if (s == 0)
            return false;
        i = (i + 1) & mask;
    }
}
void tk_pairmap_free(tk_pairmap *m);

/* ---- UTF-8 units ------------------------------------------------------------ */
/* The code point of a byte that does not start a valid sequence. */
#define TK_BAD_CP 0xFFFFFFFFu

/* Length of the character unit at s[0..n) (n > 0): a valid sequence, or 1
 * for a bad byte (*cp = TK_BAD_CP).  ASCII takes the inline fast path. */
static inline size_t tk_utf8_unit(const char *s, size_t n, uint32_t *cp)
{
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k = pt__utf8_next((const unsigned char *)s, n, cp);
    if (k == 0) {
        *cp = TK_BAD_CP;
        return 1;
    }
    return k;
}
/* Length of the unit that ends at s[b) and starts at or after s[a] (a < b);
 * when the trailing bytes are not one unit, 1 with *cp = TK_BAD_CP. */
size_t tk_utf8_unit_back(const char *s, size_t a, size_t b, uint32_t *cp);
/* Append bytes converted as Rust's String::from_utf8_lossy does: each maximal
 * invalid subpart becomes one U+FFFD. */
int tk_utf8_lossy(pt_strbuf *out, const char *s, size_t n);
/* The White_Space property (what Rust's char::is_whitespace tests). */
bool tk_is_white_space(uint32_t cp);

#endif
