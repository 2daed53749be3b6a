/* The encode pipeline's scratch context and the stages that share it:
 * normalizers (tok_normalize.c), added-token matching (tok_added.c),
 * pre-tokenizers (tok_pretok.c) and the BPE model with its word cache
 * (tok_bpe.c); tok_encode.c runs them in order.  Not installed. */
#ifndef PT_TEXT_TOK_ENCODE_H
#define PT_TEXT_TOK_ENCODE_H

#include "text/tok_internal.h"

#define TK_MAX_STAGES 33

typedef struct tk_sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
} tk_sym;

/* A candidate merge: (rank << 32 | position), so the smallest key is the
 * best-ranked merge, leftmost first; its new id is merge_newid[rank]. */
typedef uint64_t tk_heapent;

/* Per-thread cache of BPE results for short words (the reference keeps a
 * similar cache inside the model).  Keyed by the tokenizer's unique id, so a
 * cache never serves another tokenizer; cleared when full. */
#define TK_CACHE_MAX_WORD 64
#define TK_CACHE_MAX_ENTRIES 32768
typedef struct tk_cache {
    uint64_t uid;
    uint32_t *slot;      /* index+1 into ent, 0 = empty */
    size_t cap;          /* power of two, 2 x TK_CACHE_MAX_ENTRIES */
    struct tk_cent {
        uint64_t hash;
        uint32_t key_off, key_len, ids_off, n_ids;
    } *ent;
    size_t n;
    pt_strbuf keys;
    tk_ids ids;
} tk_cache;

/* Scratch of one encode call (kept per thread between calls). */
typedef struct tk_ctx {
    const pt_tokenizer *t;
    bool busy;
    uint32_t words;       /* pre-tokens since the last abort poll */
    tk_cache cache;
    tk_ids *out;
    tk_matcher re;
    pt_strbuf nbuf[2];
    pt_strbuf sbuf[TK_MAX_STAGES], mbuf[TK_MAX_STAGES];
    tk_ranges rng[TK_MAX_STAGES];
    tk_ranges seg, sub;
    tk_sym *sym;
    size_t sym_cap;
    tk_heapent *heap;
    size_t heap_cap;
} tk_ctx;

/* tok_normalize.c: run the normalizer chain over s[0..n); the result is in
 * *res (pointing into c->nbuf or s). */
int tk_normalize(const char **res, size_t *res_n, tk_ctx *c, const char *s, size_t n);

/* tok_added.c: split s[0..n) at the matches of the trie's added tokens,
 * following the reference's AddedVocabulary::find_matches.  Each output range
 * has match = added index + 1, or 0 for plain text. */
int tk_split_added(tk_ranges *out, const pt_tokenizer *t, const tk_trie *tr, const char *s, size_t n);

/* tok_pretok.c: run pre-tokenizer stage `stage` and the later ones over
 * s[0..n) (`first`: s starts the input), then the model over each word. */
int tk_pretokenize(tk_ctx *c, size_t stage, const char *s, size_t n, bool first);

/* tok_bpe.c: append the ids of one pre-token to c->out. */
int tk_bpe_word(tk_ctx *c, const char *w, size_t n);
void tk_cache_free(tk_cache *k);

#endif
