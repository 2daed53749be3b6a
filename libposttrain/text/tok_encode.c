/* Encoding: added tokens, normalizers, pre-tokenizers, the BPE model and the
 * post-processor, in the order the Hugging Face tokenizers library runs them:
 *
 *   1. non-normalized added tokens are matched on the raw text (leftmost,
 *      longest first, with their lstrip/rstrip/single_word flags);
 *   2. every remaining segment is normalized on its own, then the normalized
 *      added tokens are matched in it;
 *   3. every remaining piece goes through the pre-tokenizer stages, and each
 *      final pre-token through the BPE model;
 *   4. with PT_TOK_ADD_SPECIAL, the template post-processor wraps the ids;
 *      with PT_TOK_TRUNCATE, truncation and padding apply.
 *
 * This file runs the steps and keeps the per-thread scratch contexts; the
 * steps themselves are in tok_added.c, tok_normalize.c, tok_pretok.c and
 * tok_bpe.c.
 *
 * Invalid UTF-8 never stops encoding: a byte that does not start a valid
 * sequence is a one-byte "character" of its own.  Regexes never match it
 * (PCRE2_MATCH_INVALID_UTF), the byte-level mapping maps it like any byte, and
 * the BPE model turns it into <0xNN> (byte_fallback), the unk token, or
 * nothing, exactly as for any character missing from the vocabulary. */
#include "text/tok_encode.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- contexts ---------------------------------------------------------------------- */
static void ctx_free(tk_ctx *c)
{
    tk_cache_free(&c->cache);
    tk_matcher_free(&c->re);
    for (int i = 0; i < 2; i++)
        pt__strbuf_free(&c->nbuf[i]);
    for (int i = 0; i < TK_MAX_STAGES; i++) {
        pt__strbuf_free(&c->sbuf[i]);
        pt__strbuf_free(&c->mbuf[i]);
        free(c->rng[i].v);
    }
    free(c->seg.v);
    free(c->sub.v);
    free(c->sym);
    free(c->heap);
}

int tk_normalize_string(pt_strbuf *out, const pt_tokenizer *t, const char *s, size_t n)
{
    tk_ctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    const char *r;
    size_t rn;
    int st = tk_normalize(&r, &rn, &c, s, n);
    if (st == 0)
        st = pt__strbuf_put(out, r, rn);
    ctx_free(&c);
    return st;
}

static int encode_text(tk_ctx *c, const char *text, size_t len)
{
    const pt_tokenizer *t = c->t;
    int st;
    if (t->trie_raw.count) {
        if ((st = tk_split_added(&c->seg, t, &t->trie_raw, text, len)))
            return st;
    } else {
        c->seg.n = 0;
        if (len && (st = tk_ranges_push(&c->seg, 0, len, 0)))
            return st;
    }
    for (size_t i = 0; i < c->seg.n; i++) {
        tk_range sg = c->seg.v[i];
        if (sg.match) {
            if ((st = tk_ids_push(c->out, t->added[sg.match - 1].id)))
                return st;
            continue;
        }
        const char *s = text + sg.a;
        size_t n = sg.b - sg.a;
        if (t->n_norm && (st = tk_normalize(&s, &n, c, s, n)))
            return st;
        if (n == 0)
            continue;
        if (t->trie_norm.count) {
            if ((st = tk_split_added(&c->sub, t, &t->trie_norm, s, n)))
                return st;
            for (size_t k = 0; k < c->sub.n; k++) {
                tk_range r = c->sub.v[k];
                if (r.match)
                    st = tk_ids_push(c->out, t->added[r.match - 1].id);
                else
                    st = tk_pretokenize(c, 0, s + r.a, r.b - r.a, sg.a == 0 && r.a == 0);
                if (st)
                    return st;
            }
        } else if ((st = tk_pretokenize(c, 0, s, n, sg.a == 0))) {
            return st;
        }
    }
    return 0;
}

/* Scratch contexts are kept per thread (with their regex match data, JIT
 * stack and word cache) so short encodes do not pay for setting them up. */
static pthread_once_t tk_once = PTHREAD_ONCE_INIT;
static pthread_key_t tk_key;
static bool tk_key_ok;

static void tk_ctx_destroy(void *p)
{
    ctx_free(p);
    free(p);
}

static void tk_key_init(void)
{
    tk_key_ok = pthread_key_create(&tk_key, tk_ctx_destroy) == 0;
}

/* If the library is unloaded (dlclose), drop the key so that exiting
 * threads do not call a destructor that is gone. */
__attribute__((destructor)) static void tk_key_fini(void)
{
    if (!tk_key_ok)
        return;
    tk_ctx *c = pthread_getspecific(tk_key);
    if (c && !c->busy) {
        pthread_setspecific(tk_key, NULL);
        tk_ctx_destroy(c);
    }
    pthread_key_delete(tk_key);
    tk_key_ok = false;
}

static tk_ctx *ctx_acquire(bool *owned)
{
    pthread_once(&tk_once, tk_key_init);
    tk_ctx *c = tk_key_ok ? pthread_getspecific(tk_key) : NULL;
    *owned = false;
    if (c && !c->busy) {
        c->busy = true;
        return c;
    }
    bool keep = tk_key_ok && !c;
    c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (keep && pthread_setspecific(tk_key, c) == 0) {
        c->busy = true;
        return c;
    }
    *owned = true;
    return c;
}

/* A buffer kept for the next call: freed when large, and without the sticky
 * error of a failed call. */
static void release_buf(pt_strbuf *b, size_t big)
{
    if (b->cap > big)
        pt__strbuf_free(b);
    else
        tk_strbuf_reuse(b);
}

/* Give back memory that one huge input needed, keep the usual sizes. */
static void ctx_release(tk_ctx *c, bool owned)
{
    if (owned) {
        tk_ctx_destroy(c);
        return;
    }
    const size_t big = (size_t)4 << 20;
    for (int i = 0; i < 2; i++)
        release_buf(&c->nbuf[i], big);
    for (int i = 0; i < TK_MAX_STAGES; i++) {
        release_buf(&c->sbuf[i], big);
        release_buf(&c->mbuf[i], big);
        if (c->rng[i].cap > big / sizeof(tk_range)) {
            free(c->rng[i].v);
            memset(&c->rng[i], 0, sizeof c->rng[i]);
        }
    }
    if (c->seg.cap > 65536) {
        free(c->seg.v);
        memset(&c->seg, 0, sizeof c->seg);
    }
    if (c->sub.cap > 65536) {
        free(c->sub.v);
        memset(&c->sub, 0, sizeof c->sub);
    }
    if (c->sym_cap > 65536) {
        free(c->sym);
        free(c->heap);
        c->sym = NULL;
        c->heap = NULL;
        c->sym_cap = c->heap_cap = 0;
    }
    c->t = NULL;
    c->out = NULL;
    c->busy = false;
}

/* ---- post-processing ------------------------------------------------------------- */
/* How many special ids the template adds, and how many of them come before
 * the sequence. */
static size_t template_counts(const pt_tokenizer *t, size_t *before)
{
    size_t n_added = 0;
    bool seen_seq = false;
    *before = 0;
    for (size_t i = 0; i < t->n_post; i++) {
        if (t->post[i].is_seq) {
            seen_seq = true;
            continue;
        }
        n_added += t->post[i].n_ids;
        if (!seen_seq)
            *before += t->post[i].n_ids;
    }
    return n_added;
}

/* Keep at most max of the n ids at v (from the end when truncating left). */
static size_t truncate_ids(const pt_tokenizer *t, int32_t *v, size_t n, size_t max)
{
    if (n <= max)
        return n;
    if (t->trunc_left)
        memmove(v, v + (n - max), max * sizeof *v);
    return max;
}

/* Wrap the n ids at out->v + start in the template's special ids. */
static int add_template(tk_ids *out, const pt_tokenizer *t, size_t start, size_t n)
{
    size_t pre, n_added = template_counts(t, &pre);
    int st = tk_ids_reserve(out, n_added);
    if (st)
        return st;
    int32_t *v = out->v + start;
    memmove(v + pre, v, n * sizeof *v);
    size_t o = 0, after = pre + n;
    bool seen_seq = false;
    for (size_t i = 0; i < t->n_post; i++) {
        const tk_post_item *it = &t->post[i];
        if (it->is_seq) {
            seen_seq = true;
            continue;
        }
        int32_t *dst = seen_seq ? v + after : v + o;
        memcpy(dst, it->ids, it->n_ids * sizeof *dst);
        if (seen_seq)
            after += it->n_ids;
        else
            o += it->n_ids;
    }
    out->n = start + n + n_added;
    return 0;
}

/* Pad the n ids at out->v + start to the fixed length or the multiple. */
static int pad_ids(tk_ids *out, const pt_tokenizer *t, size_t start, size_t n)
{
    size_t target = t->pad_fixed ? t->pad_fixed : n;
    if (t->pad_multiple > 0 && target % t->pad_multiple != 0)
        target += t->pad_multiple - target % t->pad_multiple;
    if (n >= target)
        return 0;
    size_t k = target - n;
    int st = tk_ids_reserve(out, k);
    if (st)
        return st;
    int32_t *v = out->v + start;
    if (t->pad_left)
        memmove(v + k, v, n * sizeof *v);
    for (size_t i = 0; i < k; i++)
        v[t->pad_left ? i : n + i] = t->pad_id_json;
    out->n = start + target;
    return 0;
}

/* ---- encode ------------------------------------------------------------------------- */
int tk_encode(tk_ids *out, const pt_tokenizer *t, const char *text, size_t len, unsigned flags)
{
    bool special = (flags & PT_TOK_ADD_SPECIAL) && t->n_post;
    bool trunc = (flags & PT_TOK_TRUNCATE) && t->has_trunc;
    if (trunc && t->trunc_only_second)
        return pt__err(PT_EINVAL, "tokenizer: truncation strategy OnlySecond needs a second sequence");
    bool owned;
    tk_ctx *c = ctx_acquire(&owned);
    if (!c)
        return pt__err(PT_ENOMEM, "tokenizer: out of memory (encode context)");
    c->t = t;
    c->out = out;
    c->words = 0;
    /* the content first, then the template around it (it is short) */
    size_t start = out->n;
    int st = encode_text(c, text, len);
    ctx_release(c, owned);
    if (st)
        return st;
    size_t n = out->n - start;
    if (trunc) {
        /* as the reference: room for the special tokens is kept */
        size_t pre, n_added = special ? template_counts(t, &pre) : 0;
        size_t max = special ? (t->trunc_max > n_added ? t->trunc_max - n_added : 0) : t->trunc_max;
        n = truncate_ids(t, out->v + start, n, max);
        out->n = start + n;
    }
    if (special) {
        if ((st = add_template(out, t, start, n)))
            return st;
        n = out->n - start;
    }
    if ((flags & PT_TOK_TRUNCATE) && t->has_pad)
        return pad_ids(out, t, start, n);
    return 0;
}
