/* Internal structures of the tokenizer engine (Hugging Face tokenizer.json).
 * Not installed.  The tokenizer is immutable after loading; every encode or
 * decode call works in its own scratch context. */
#ifndef PT_TEXT_TOK_INTERNAL_H
#define PT_TEXT_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/core.h"
#include "posttrain/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upper bound on ids: the id table is sized by the largest id, so refuse ids
 * far beyond the number of tokens actually listed. */
#define TK_MAX_ID ((int32_t)1 << 26)

/* ---- growable byte buffer and int arrays -------------------------------- */
typedef struct tk_buf {
    char *p;
    size_t n, cap;
} tk_buf;
int tk_buf_reserve(tk_buf *b, size_t extra);
int tk_buf_put(tk_buf *b, const void *s, size_t n);
static inline int tk_buf_putc(tk_buf *b, char c)
{
    if (b->n + 1 > b->cap && tk_buf_reserve(b, 1) != 0)
        return PT_ENOMEM;
    b->p[b->n++] = c;
    return 0;
}
void tk_buf_free(tk_buf *b);

typedef struct tk_ids {
    int32_t *v;
    size_t n, cap;
} tk_ids;
int tk_ids_push(tk_ids *a, int32_t x);
int tk_ids_reserve(tk_ids *a, size_t extra);

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
    tk_buf pool;
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

/* ---- UTF-8 ---------------------------------------------------------------- */
/* Length of the valid UTF-8 sequence at s[0..n), or 0 if s[0] does not start
 * one (invalid bytes are then taken one at a time).  *cp gets the code point. */
size_t tk_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* Length of the character unit at s: a valid sequence, or 1 for a bad byte. */
static inline size_t tk_utf8_unit(const char *s, size_t n, uint32_t *cp)
{
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k = tk_utf8_next((const unsigned char *)s, n, cp);
    if (k == 0) {
        *cp = 0xFFFFFFFFu;
        return 1;
    }
    return k;
}
int tk_utf8_put(tk_buf *b, uint32_t cp);
/* Append bytes converted as Rust's String::from_utf8_lossy does: each maximal
 * invalid subpart becomes one U+FFFD. */
int tk_utf8_lossy(tk_buf *out, const char *s, size_t n);
bool tk_utf8_valid(const char *s, size_t n);
bool tk_is_white_space(uint32_t cp);

/* ---- components ------------------------------------------------------------ */
typedef struct tk_regex {
    pcre2_code *code;
    bool jit;
} tk_regex;
int tk_regex_compile(tk_regex *r, const char *pattern, size_t len, bool literal, const char *where);
void tk_regex_free(tk_regex *r);

typedef enum { TKN_NFC, TKN_NFD, TKN_NFKC, TKN_NFKD, TKN_LOWERCASE, TKN_PREPEND, TKN_REPLACE,
               TKN_STRIP, TKN_STRIP_ACCENTS } tk_norm_kind;
typedef struct tk_norm {
    tk_norm_kind kind;
    char *str;          /* Prepend text / Replace content */
    size_t str_len;
    tk_regex re;        /* Replace pattern */
    bool left, right;   /* Strip */
} tk_norm;

typedef enum { TKB_REMOVED, TKB_ISOLATED, TKB_MERGED_PREV, TKB_MERGED_NEXT, TKB_CONTIGUOUS } tk_behavior;
typedef enum { TKP_BYTELEVEL, TKP_SPLIT, TKP_METASPACE } tk_pretok_kind;
typedef enum { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend_scheme;
typedef struct tk_pretok {
    tk_pretok_kind kind;
    /* ByteLevel */
    bool add_prefix_space, use_regex;
    /* Split (and ByteLevel with use_regex) */
    tk_regex re;
    tk_behavior behavior;
    bool invert;
    /* Metaspace */
    char repl[8];
    size_t repl_len;
    tk_prepend_scheme scheme;
    bool split;
} tk_pretok;

typedef enum { TKD_BYTELEVEL, TKD_REPLACE, TKD_BYTEFALLBACK, TKD_FUSE, TKD_STRIP, TKD_METASPACE } tk_dec_kind;
typedef struct tk_dec {
    tk_dec_kind kind;
    tk_regex re;         /* Replace pattern */
    char *content;       /* Replace content */
    size_t content_len;
    uint32_t strip_cp;   /* Strip content */
    size_t strip_start, strip_stop;
    char repl[8];        /* Metaspace */
    size_t repl_len;
    bool prefix;         /* Metaspace: prepend scheme != never */
} tk_dec;

/* Post-processor pieces: a template item is either the sequence or a list of
 * special ids. */
typedef struct tk_post_item {
    bool is_seq;
    int32_t *ids;
    size_t n_ids;
} tk_post_item;

typedef struct tk_added {
    char *content;
    size_t len;
    char *norm;          /* normalized content (for normalized tokens) */
    size_t norm_len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} tk_added;

/* Byte trie over added-token contents: leftmost-longest matching. */
typedef struct tk_trie_node {
    int32_t token;       /* index into added[], or -1 */
    uint32_t first;      /* first child (index), 0 = none */
    uint32_t next;       /* next sibling, 0 = none */
    unsigned char byte;
} tk_trie_node;
typedef struct tk_trie {
    tk_trie_node *nodes;   /* nodes[0] is the root */
    size_t n, cap;
    uint32_t root[256];    /* child of the root per first byte, 0 = none */
    size_t count;          /* number of patterns */
} tk_trie;

struct pt_tokenizer {
    uint64_t uid;                     /* unique per loaded tokenizer (cache key) */
    /* model */
    tk_strmap vocab;                  /* model vocab: string -> id */
    tk_pairmap merges;
    int32_t *merge_newid;             /* per merge rank: the token it makes */
    size_t n_merges;
    int32_t byte_ids[256];            /* <0xNN> ids or -1 */
    int32_t char1_ids[128];           /* ids of one-byte ASCII tokens or -1 */
    int32_t unk_id;                   /* model unk or -1 */
    bool byte_fallback, fuse_unk, ignore_merges;
    /* id table */
    int32_t vocab_size;               /* max id + 1 */
    const char **id_str;              /* per id: string (pool-backed) or NULL */
    uint32_t *id_len;
    uint8_t *id_flags;                /* 1 = added, 2 = special */
    /* added tokens */
    tk_added *added;
    size_t n_added;
    tk_strmap added_map;              /* content -> id */
    tk_trie trie_raw, trie_norm;      /* non-normalized / normalized tokens */
    /* pipeline */
    tk_norm *norm;
    size_t n_norm;
    tk_pretok *pre;
    size_t n_pre;
    tk_dec *dec;
    size_t n_dec;
    bool has_decoder;
    tk_post_item *post;               /* single template ($A plus specials) */
    size_t n_post;
    /* truncation / padding (applied only with PT_TOK_TRUNCATE) */
    bool has_trunc, trunc_left, trunc_only_second;
    size_t trunc_max;
    bool has_pad, pad_left;
    size_t pad_fixed;                 /* 0 = BatchLongest */
    size_t pad_multiple;
    int32_t pad_id_json;
    /* tokenizer_config.json */
    char *bos_token, *eos_token, *pad_token, *unk_token;
    int add_bos, add_eos;
    char *chat_template;              /* string form or "default" */
    char **tmpl_names, **tmpl_texts;
    size_t n_tmpl;
};

/* tok_load.c */
int tk_load_json(pt_tokenizer *t, const char *json, size_t len);
int tk_load_config(pt_tokenizer *t, const char *json, size_t len);
void tk_destroy(pt_tokenizer *t);

/* tok_encode.c */
int tk_encode(tk_ids *out, const pt_tokenizer *t, const char *text, size_t len, unsigned flags);
/* Run the normalizer chain over s (used at load to normalize added tokens). */
int tk_normalize_string(const pt_tokenizer *t, tk_buf *out, const char *s, size_t n);

/* Character of byte b in the byte-level (GPT-2) alphabet, 1 or 2 bytes. */
const char *tk_byte_char(unsigned b, size_t *len);

/* tok_decode.c */
int tk_decode(tk_buf *out, const pt_tokenizer *t, const int32_t *ids, size_t n, unsigned flags);

#endif
