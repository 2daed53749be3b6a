/* Internal structures of the tokenizer engine (Hugging Face tokenizer.json).
 * Not installed.  The tokenizer is immutable after loading; every encode or
 * decode call works in its own scratch context. */
#ifndef PT_TEXT_TOK_INTERNAL_H
#define PT_TEXT_TOK_INTERNAL_H

#include "posttrain/tokenizer.h"
#include "text/tok_regex.h"
#include "text/tok_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upper bound on ids: the id table is sized by the largest id, so refuse ids
 * far beyond the number of tokens actually listed. */
#define TK_MAX_ID ((int32_t)1 << 26)

/* ---- components ------------------------------------------------------------ */
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
/* tok_trie.c: add s[0..n) for added token index `token` (a duplicate keeps
 * the first); the leftmost-longest match at or after pos in s[0..n): its
 * token index with *start and *len, or -1. */
int tk_trie_add(tk_trie *tr, const char *s, size_t n, int32_t token);
int32_t tk_trie_find(const tk_trie *tr, const char *s, size_t n, size_t pos, size_t *start, size_t *len);
void tk_trie_free(tk_trie *tr);

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
int tk_normalize_string(pt_strbuf *out, const pt_tokenizer *t, const char *s, size_t n);

/* Character of byte b in the byte-level (GPT-2) alphabet, 1 or 2 bytes. */
const char *tk_byte_char(unsigned b, size_t *len);

/* tok_decode.c */
int tk_decode(pt_strbuf *out, const pt_tokenizer *t, const int32_t *ids, size_t n, unsigned flags);

#endif
