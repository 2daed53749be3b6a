/* Encoding: added tokens, normalizers, pre-tokenizers, the BPE model and the
 * post-processor, in the order the Hugging Face tokenizers library runs them:
 *
 *   1. non-normalized added tokens are matched on the raw text (leftmost,
 *      longest first, with their lstrip/rstrip/single_word flags);
 *   2. every remaining segment is normalized on its own, then the normalized
 *      added tokens are matched in it;
 *   3. every remaining piece goes through the pre-tokenizer stages, and each
 *      final pre-token through the BPE model (a priority queue of merges over a
 *      linked list of symbols: O(n log n) in the word length);
 *   4. with PT_TOK_ADD_SPECIAL, the template post-processor wraps the ids.
 *
 * Invalid UTF-8 never stops encoding: a byte that does not start a valid
 * sequence is a one-byte "character" of its own.  Regexes never match it
 * (PCRE2_MATCH_INVALID_UTF), the byte-level mapping maps it like any byte, and
 * the BPE model turns it into <0xNN> (byte_fallback), the unk token, or
 * nothing, exactly as for any character missing from the vocabulary. */
#include "text/tok_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

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
    tk_buf keys;
    tk_ids ids;
} tk_cache;

typedef struct tk_ctx {
    const pt_tokenizer *t;
    bool busy;
    uint32_t words;       /* pre-tokens since the last abort poll */
    tk_cache cache;
    tk_ids *out;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    tk_buf nbuf[2];
    tk_buf sbuf[TK_MAX_STAGES], mbuf[TK_MAX_STAGES];
    tk_ranges rng[TK_MAX_STAGES];
    tk_ranges seg, sub;
    tk_sym *sym;
    size_t sym_cap;
    tk_heapent *heap;
    size_t heap_cap;
} tk_ctx;

/* ---- regex helpers ------------------------------------------------------------ */
static int ctx_regex_ready(tk_ctx *c)
{
    if (c->md)
        return 0;
    c->md = pcre2_match_data_create(1, NULL);
    if (!c->md)
        return pt_err(PT_ENOMEM, "tokenizer: out of memory (regex match data)");
    c->mctx = pcre2_match_context_create(NULL);
    c->jit = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!c->mctx)
        return pt_err(PT_ENOMEM, "tokenizer: out of memory (regex context)");
    if (c->jit)
        pcre2_jit_stack_assign(c->mctx, NULL, c->jit);
    return 0;
}

/* Next match of re in s[0..n) at or after `start` that is not empty.
 * Returns 1 with [*a, *b), 0 when there is none, <0 on error. */
static int re_next(tk_ctx *c, const tk_regex *re, const char *s, size_t n, size_t start, size_t *a, size_t *b)
{
    int st = ctx_regex_ready(c);
    if (st)
        return st;
    while (start <= n) {
        int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, n, start, 0, c->md, c->mctx)
                         : pcre2_match(re->code, (PCRE2_SPTR)s, n, start, 0, c->md, c->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            return 0;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pt_err(PT_ERANGE, "tokenizer: regex matching failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        if (ov[1] > ov[0]) {
            *a = ov[0];
            *b = ov[1];
            return 1;
        }
        /* Empty match: look again one character further. */
        if (ov[0] >= n)
            return 0;
        uint32_t cp;
        start = ov[0] + tk_utf8_unit(s + ov[0], n - ov[0], &cp);
    }
    return 0;
}

/* Cover s[0..n) with alternating non-match / match ranges. */
static int re_find_all(tk_ctx *c, const tk_regex *re, const char *s, size_t n, tk_ranges *r)
{
    r->n = 0;
    size_t pos = 0, a, b;
    int st;
    while ((st = re_next(c, re, s, n, pos, &a, &b)) == 1) {
        if (a > pos && (st = tk_ranges_push(r, pos, a, 0)))
            return st;
        if ((st = tk_ranges_push(r, a, b, 1)))
            return st;
        pos = b;
    }
    if (st < 0)
        return st;
    if (pos < n && (st = tk_ranges_push(r, pos, n, 0)))
        return st;
    return 0;
}

/* Apply a split behavior in place: on return r holds the ranges to keep. */
static void apply_behavior(tk_ranges *r, tk_behavior beh, bool invert)
{
    if (invert)
        for (size_t i = 0; i < r->n; i++)
            r->v[i].match = !r->v[i].match;
    size_t o = 0;
    int prev = 0;
    switch (beh) {
    case TKB_ISOLATED:
        break;
    case TKB_REMOVED:
        for (size_t i = 0; i < r->n; i++)
            if (!r->v[i].match)
                r->v[o++] = r->v[i];
        r->n = o;
        break;
    case TKB_CONTIGUOUS:
    case TKB_MERGED_PREV:
        /* A piece joins the one before it when it continues a run of its
         * kind (Contiguous) or is a match after a non-match (MergedWithPrevious). */
        for (size_t i = 0; i < r->n; i++) {
            int m = r->v[i].match;
            bool join = beh == TKB_CONTIGUOUS ? m == prev : m && !prev;
            if (o > 0 && join)
                r->v[o - 1].b = r->v[i].b;
            else
                r->v[o++] = r->v[i];
            prev = m;
        }
        r->n = o;
        break;
    case TKB_MERGED_NEXT: {
        /* Walk backwards: a match joins the piece after it. */
        size_t w = r->n;
        for (size_t k = r->n; k-- > 0;) {
            tk_range cur = r->v[k];
            if (w < r->n && cur.match && !prev)
                r->v[w].a = cur.a;
            else
                r->v[--w] = cur;
            prev = cur.match;
        }
        memmove(r->v, r->v + w, (r->n - w) * sizeof *r->v);
        r->n -= w;
        break;
    }
    }
}

/* ---- normalizers ---------------------------------------------------------------- */
static bool is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

/* The reference normalizes with older Unicode data (about 10.0) than
 * utf8proc's: these combining marks, added later, are starters (class 0) for
 * it, and it does not compose U+11935 U+11930.  Measured by probing the
 * reference's NFC on every mark against anchors of known classes.  They are
 * treated as barriers: normalization runs on the text between them. */
static const uint32_t NORM_BARRIER[][2] = {
    {0x07FD, 0x07FD}, {0x0898, 0x089F}, {0x08CA, 0x08D3}, {0x09FE, 0x09FE}, {0x0C3C, 0x0C3C},
    {0x0D3B, 0x0D3C}, {0x0EBA, 0x0EBA}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA},
    {0xA82C, 0xA82C}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85},
    {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x11930, 0x11930},
    {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47},
    {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x16FF0, 0x16FF1},
    {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF},
};

static bool norm_barrier(uint32_t cp)
{
    if (cp < 0x07FD)
        return false;
    size_t lo = 0, hi = sizeof NORM_BARRIER / sizeof NORM_BARRIER[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < NORM_BARRIER[mid][0])
            hi = mid;
        else if (cp > NORM_BARRIER[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* Unicode normalization of the valid UTF-8 runs of s; bad bytes and the
 * barrier marks above pass through unchanged. */
static int norm_unicode(tk_buf *out, const char *s, size_t n, utf8proc_option_t opt)
{
    if (is_ascii(s, n))
        return tk_buf_put(out, s, n);
    size_t i = 0;
    while (i < n) {
        size_t j = i, bk = 0;
        uint32_t cp;
        while (j < n) {
            size_t k = (unsigned char)s[j] < 0x80 ? 1 : tk_utf8_next((const unsigned char *)s + j, n - j, &cp);
            if (!k)
                break;
            if (k > 1 && norm_barrier(cp)) {
                bk = k;
                break;
            }
            j += k;
        }
        if (j > i) {
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(j - i), &dst,
                                              opt | UTF8PROC_STABLE);
            if (r < 0) {
                free(dst);
                return pt_err(PT_EINTERNAL, "tokenizer: Unicode normalization failed: %s", utf8proc_errmsg(r));
            }
            int st = tk_buf_put(out, dst, (size_t)r);
            free(dst);
            if (st)
                return st;
        }
        if (bk) {
            int st = tk_buf_put(out, s + j, bk);
            if (st)
                return st;
            j += bk;
        } else if (j < n) {
            int st = tk_buf_putc(out, s[j]);
            if (st)
                return st;
            j++;
        }
        i = j;
    }
    return 0;
}

static int norm_map_chars(tk_buf *out, const char *s, size_t n, tk_norm_kind kind)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = tk_utf8_unit(s + i, n - i, &cp);
        int st = 0;
        if (cp == 0xFFFFFFFFu) {
            st = tk_buf_putc(out, s[i]);
        } else if (kind == TKN_LOWERCASE) {
            if (cp == 0x130) /* İ lowercases to i + combining dot above */
                st = tk_buf_put(out, "i\xCC\x87", 3);
            else
                st = tk_utf8_put(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
        } else { /* strip accents: drop nonspacing marks */
            if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN)
                st = tk_buf_put(out, s + i, k);
        }
        if (st)
            return st;
        i += k;
    }
    return 0;
}

static int norm_strip(tk_buf *out, const char *s, size_t n, bool left, bool right)
{
    size_t a = 0, b = n;
    uint32_t cp;
    if (left) {
        while (a < b) {
            size_t k = tk_utf8_unit(s + a, b - a, &cp);
            if (!tk_is_white_space(cp))
                break;
            a += k;
        }
    }
    if (right) {
        while (b > a) {
            size_t p = b - 1;
            while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80 && b - p < 4)
                p--;
            size_t k = tk_utf8_unit(s + p, b - p, &cp);
            if (p + k != b) {  /* trailing bytes are not one character */
                break;
            }
            if (!tk_is_white_space(cp))
                break;
            b = p;
        }
    }
    return tk_buf_put(out, s + a, b - a);
}

static int norm_replace(tk_ctx *c, tk_buf *out, const tk_norm *x, const char *s, size_t n)
{
    size_t pos = 0, a, b;
    int st;
    while ((st = re_next(c, &x->re, s, n, pos, &a, &b)) == 1) {
        if ((st = tk_buf_put(out, s + pos, a - pos)) || (st = tk_buf_put(out, x->str, x->str_len)))
            return st;
        pos = b;
    }
    if (st < 0)
        return st;
    return tk_buf_put(out, s + pos, n - pos);
}

/* Run the normalizer chain; the result is in *res (pointing into c->nbuf or s). */
static int normalize(tk_ctx *c, const char *s, size_t n, const char **res, size_t *res_n)
{
    const pt_tokenizer *t = c->t;
    const char *cur = s;
    size_t cur_n = n;
    int which = 0;
    for (size_t i = 0; i < t->n_norm; i++) {
        const tk_norm *x = &t->norm[i];
        tk_buf *out = &c->nbuf[which];
        out->n = 0;
        int st = 0;
        switch (x->kind) {
        case TKN_NFC:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_COMPOSE);
            break;
        case TKN_NFD:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_DECOMPOSE);
            break;
        case TKN_NFKC:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
            break;
        case TKN_NFKD:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
            break;
        case TKN_LOWERCASE:
        case TKN_STRIP_ACCENTS:
            st = norm_map_chars(out, cur, cur_n, x->kind);
            break;
        case TKN_STRIP:
            st = norm_strip(out, cur, cur_n, x->left, x->right);
            break;
        case TKN_PREPEND:
            if (cur_n > 0)
                st = tk_buf_put(out, x->str, x->str_len);
            if (st == 0)
                st = tk_buf_put(out, cur, cur_n);
            break;
        case TKN_REPLACE:
            st = norm_replace(c, out, x, cur, cur_n);
            break;
        }
        if (st)
            return st;
        cur = out->p ? out->p : "";
        cur_n = out->n;
        which ^= 1;
    }
    *res = cur;
    *res_n = cur_n;
    return 0;
}

/* ---- added tokens ------------------------------------------------------------------ */
static bool is_word_cp(uint32_t cp)
{
    if (cp == '_')
        return true;
    if (cp == 0xFFFFFFFFu)
        return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    /* Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation */
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* Code point of the last character of s[0..n) (invalid byte -> 0xFFFFFFFF). */
static size_t last_char(const char *s, size_t n, uint32_t *cp)
{
    size_t p = n - 1;
    while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80 && n - p < 4)
        p--;
    size_t k = tk_utf8_unit(s + p, n - p, cp);
    if (p + k != n) {
        *cp = 0xFFFFFFFFu;
        return 1;
    }
    return n - p;
}

/* Split s[0..n) at the matches of the trie's tokens, following the
 * reference's AddedVocabulary::find_matches.  Each output range has
 * match = added index + 1, or 0 for plain text. */
static int split_added(const pt_tokenizer *t, const tk_trie *tr, const char *s, size_t n, tk_ranges *out)
{
    out->n = 0;
    size_t start_offset = 0, pos = 0;
    const unsigned char *u = (const unsigned char *)s;
    int st;
    while (pos < n) {
        /* leftmost-longest match at or after pos */
        size_t i = pos, mlen = 0;
        int32_t mtok = -1;
        for (; i < n; i++) {
            uint32_t node = tr->root[u[i]];
            if (!node)
                continue;
            size_t j = i + 1;
            for (;;) {
                if (tr->nodes[node].token >= 0) {
                    mtok = tr->nodes[node].token;
                    mlen = j - i;
                }
                if (j >= n)
                    break;
                uint32_t nx = 0;
                for (uint32_t k = tr->nodes[node].first; k; k = tr->nodes[k].next)
                    if (tr->nodes[k].byte == u[j]) {
                        nx = k;
                        break;
                    }
                if (!nx)
                    break;
                node = nx;
                j++;
            }
            if (mtok >= 0)
                break;
        }
        if (mtok < 0)
            break;
        size_t start = i, stop = i + mlen;
        pos = stop;
        const tk_added *a = &t->added[mtok];
        if (a->single_word) {
            uint32_t cp;
            bool start_space = start == 0 || (last_char(s, start, &cp), !is_word_cp(cp));
            bool stop_space = stop == n || (tk_utf8_unit(s + stop, n - stop, &cp), !is_word_cp(cp));
            if (!start_space || !stop_space)
                continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                uint32_t cp;
                size_t k = last_char(s, ns, &cp);
                if (!tk_is_white_space(cp))
                    break;
                ns -= k;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < n) {
                uint32_t cp;
                size_t k = tk_utf8_unit(s + stop, n - stop, &cp);
                if (!tk_is_white_space(cp))
                    break;
                stop += k;
            }
        }
        if (start > start_offset && (st = tk_ranges_push(out, start_offset, start, 0)))
            return st;
        if ((st = tk_ranges_push(out, start, stop, mtok + 1)))
            return st;
        start_offset = stop;
        if (pos < stop)
            pos = stop;
    }
    if (start_offset < n && (st = tk_ranges_push(out, start_offset, n, 0)))
        return st;
    return 0;
}

/* ---- word cache ------------------------------------------------------------------- */
static void cache_clear(tk_cache *k, uint64_t uid)
{
    if (k->slot)
        memset(k->slot, 0, k->cap * sizeof *k->slot);
    k->n = 0;
    k->keys.n = 0;
    k->ids.n = 0;
    k->uid = uid;
}

static void cache_free(tk_cache *k)
{
    free(k->slot);
    free(k->ent);
    tk_buf_free(&k->keys);
    free(k->ids.v);
    memset(k, 0, sizeof *k);
}

/* Append the cached ids of w to out; returns 1 on a hit, 0 on a miss. */
static int cache_get(tk_ctx *c, const char *w, size_t n, uint64_t h)
{
    tk_cache *k = &c->cache;
    if (!k->slot || k->uid != c->t->uid)
        return 0;
    size_t j = (size_t)h & (k->cap - 1);
    while (k->slot[j]) {
        const struct tk_cent *e = &k->ent[k->slot[j] - 1];
        if (e->hash == h && e->key_len == n && memcmp(k->keys.p + e->key_off, w, n) == 0) {
            if (tk_ids_reserve(c->out, e->n_ids))
                return -1;
            memcpy(c->out->v + c->out->n, k->ids.v + e->ids_off, e->n_ids * sizeof(int32_t));
            c->out->n += e->n_ids;
            return 1;
        }
        j = (j + 1) & (k->cap - 1);
    }
    return 0;
}

/* Remember that w encodes to ids[0..n_ids).  Failures only skip caching. */
static void cache_put(tk_ctx *c, const char *w, size_t n, uint64_t h, const int32_t *ids, size_t n_ids)
{
    tk_cache *k = &c->cache;
    if (!k->slot) {
        k->cap = 2 * TK_CACHE_MAX_ENTRIES;
        k->slot = calloc(k->cap, sizeof *k->slot);
        k->ent = malloc(TK_CACHE_MAX_ENTRIES * sizeof *k->ent);
        if (!k->slot || !k->ent) {
            cache_free(k);
            return;
        }
        k->uid = c->t->uid;
    }
    if (k->uid != c->t->uid || k->n == TK_CACHE_MAX_ENTRIES)
        cache_clear(k, c->t->uid);
    size_t j = (size_t)h & (k->cap - 1);
    while (k->slot[j])
        j = (j + 1) & (k->cap - 1);
    struct tk_cent e = {h, (uint32_t)k->keys.n, (uint32_t)n, (uint32_t)k->ids.n, (uint32_t)n_ids};
    if (tk_buf_put(&k->keys, w, n) || tk_ids_reserve(&k->ids, n_ids)) {
        cache_clear(k, c->t->uid);
        return;
    }
    memcpy(k->ids.v + k->ids.n, ids, n_ids * sizeof *ids);
    k->ids.n += n_ids;
    k->ent[k->n++] = e;
    k->slot[j] = (uint32_t)k->n;
}

/* ---- BPE model ------------------------------------------------------------------- */
static int sym_reserve(tk_ctx *c, size_t n)
{
    if (n <= c->sym_cap)
        return 0;
    size_t cap = c->sym_cap ? c->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    tk_sym *s = pt_realloc_array(c->sym, cap, sizeof *s);
    if (!s)
        return PT_ENOMEM;
    c->sym = s;
    c->sym_cap = cap;
    tk_heapent *h = pt_realloc_array(c->heap, cap * 2, sizeof *h);
    if (!h)
        return PT_ENOMEM;
    c->heap = h;
    c->heap_cap = cap * 2;
    return 0;
}

static int heap_push(tk_ctx *c, size_t *hn, uint32_t rank, uint32_t pos)
{
    if (*hn == c->heap_cap) {
        tk_heapent *h = pt_realloc_array(c->heap, c->heap_cap * 2, sizeof *h);
        if (!h)
            return PT_ENOMEM;
        c->heap = h;
        c->heap_cap *= 2;
    }
    tk_heapent e = ((uint64_t)rank << 32) | pos;
    tk_heapent *hp = c->heap;
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (e >= hp[p])
            break;
        hp[i] = hp[p];
        i = p;
    }
    hp[i] = e;
    return 0;
}

static void heap_sift_down(tk_heapent *hp, size_t n, size_t i, tk_heapent e)
{
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n)
            break;
        size_t m = l;
        if (l + 1 < n && hp[l + 1] < hp[l])
            m = l + 1;
        if (hp[m] >= e)
            break;
        hp[i] = hp[m];
        i = m;
    }
    hp[i] = e;
}

static tk_heapent heap_pop(tk_ctx *c, size_t *hn)
{
    tk_heapent top = c->heap[0];
    tk_heapent last = c->heap[--(*hn)];
    if (*hn > 0)
        heap_sift_down(c->heap, *hn, 0, last);
    return top;
}

static int bpe_word(tk_ctx *c, const char *w, size_t n)
{
    const pt_tokenizer *t = c->t;
    int st;
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        int32_t id = n == 1 && (unsigned char)w[0] < 128 ? t->char1_ids[(unsigned char)w[0]]
                                                          : tk_strmap_get(&t->vocab, w, n);
        if (id >= 0)
            return tk_ids_push(c->out, id);
    }
    uint64_t h = 0;
    size_t out0 = c->out->n;
    bool cacheable = n <= TK_CACHE_MAX_WORD;
    if (cacheable) {
        h = tk_hash(w, n);
        st = cache_get(c, w, n, h);
        if (st)
            return st < 0 ? PT_ENOMEM : 0;
    }
    if (n >= ((size_t)1 << 31))
        return pt_err(PT_ERANGE, "tokenizer: a single pre-token of %zu bytes is too long (limit 2 GiB)", n);
    if ((st = sym_reserve(c, n + 1)))
        return st;
    tk_sym *sym = c->sym;
    size_t ns = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
#define ADD_SYM(ID, LEN)                                  \
    do {                                                  \
        sym[ns].id = (ID);                                \
        sym[ns].len = (LEN);                              \
        sym[ns].prev = (int32_t)ns - 1;                   \
        sym[ns].next = (int32_t)ns + 1;                   \
        ns++;                                             \
    } while (0)
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = tk_utf8_unit(w + i, n - i, &cp);
        int32_t id = k == 1 && (unsigned char)w[i] < 128 ? t->char1_ids[(unsigned char)w[i]]
                                                          : tk_strmap_get(&t->vocab, w + i, k);
        if (id >= 0) {
            if (unk_id >= 0) {
                ADD_SYM(unk_id, unk_len);
                unk_id = -1;
            }
            ADD_SYM(id, (uint32_t)k);
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t b = 0; b < k; b++)
                    if (t->byte_ids[(unsigned char)w[i + b]] < 0)
                        all = false;
                if (all) {
                    for (size_t b = 0; b < k; b++)
                        ADD_SYM(t->byte_ids[(unsigned char)w[i + b]], 1);
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk_id >= 0 && t->fuse_unk) {
                    unk_len += (uint32_t)k;
                } else {
                    if (unk_id >= 0)
                        ADD_SYM(unk_id, unk_len);
                    unk_id = t->unk_id;
                    unk_len = (uint32_t)k;
                }
            }
        }
        i += k;
    }
    if (unk_id >= 0)
        ADD_SYM(unk_id, unk_len);
#undef ADD_SYM
    if (ns == 0)
        return 0;
    sym[ns - 1].next = -1;
    if (ns > 1) {
        /* all initial pairs, then heapify in O(n) */
        size_t hn = 0;
        tk_heapent *hp = c->heap;
        for (size_t p = 0; p + 1 < ns; p++) {
            uint32_t rank;
            int32_t nid;
            if (tk_pairmap_get(&t->merges, sym[p].id, sym[p + 1].id, &rank, &nid))
                hp[hn++] = ((uint64_t)rank << 32) | p;
        }
        for (size_t k = hn / 2; k-- > 0;)
            heap_sift_down(hp, hn, k, hp[k]);
        while (hn > 0) {
            tk_heapent top = heap_pop(c, &hn);
            uint32_t pos = (uint32_t)top, top_rank = (uint32_t)(top >> 32);
            int32_t top_id = t->merge_newid[top_rank];
            tk_sym *cur = &sym[pos];
            if (cur->len == 0 || cur->next < 0)
                continue;
            int32_t np = cur->next;
            tk_sym right = sym[np];
            uint32_t rank;
            int32_t nid;
            /* a stale entry: the pair no longer makes this token (the
             * reference compares the new id, not the rank) */
            if (!tk_pairmap_get(&t->merges, cur->id, right.id, &rank, &nid) || nid != top_id)
                continue;
            cur->id = top_id;
            cur->len += right.len;
            cur->next = right.next;
            sym[np].len = 0;
            if (right.next >= 0)
                sym[right.next].prev = (int32_t)pos;
            if (cur->prev >= 0) {
                int32_t pp = cur->prev;
                if (tk_pairmap_get(&t->merges, sym[pp].id, cur->id, &rank, &nid) &&
                    (st = heap_push(c, &hn, rank, (uint32_t)pp)))
                    return st;
            }
            cur = &sym[pos];
            if (cur->next >= 0) {
                if (tk_pairmap_get(&t->merges, cur->id, sym[cur->next].id, &rank, &nid) &&
                    (st = heap_push(c, &hn, rank, pos)))
                    return st;
            }
        }
    }
    if ((st = tk_ids_reserve(c->out, ns)))
        return st;
    for (int32_t p = 0; p >= 0; p = sym[p].next)
        c->out->v[c->out->n++] = sym[p].id;
    if (cacheable)
        cache_put(c, w, n, h, c->out->v + out0, c->out->n - out0);
    return 0;
}

/* ---- pre-tokenizers --------------------------------------------------------------- */
static const char *const BYTE_CHARS[256] = {
#define TKB2(x) x
    TKB2("\xC4\x80"), "\xC4\x81", "\xC4\x82", "\xC4\x83", "\xC4\x84", "\xC4\x85", "\xC4\x86", "\xC4\x87",
    "\xC4\x88", "\xC4\x89", "\xC4\x8A", "\xC4\x8B", "\xC4\x8C", "\xC4\x8D", "\xC4\x8E", "\xC4\x8F",
    "\xC4\x90", "\xC4\x91", "\xC4\x92", "\xC4\x93", "\xC4\x94", "\xC4\x95", "\xC4\x96", "\xC4\x97",
    "\xC4\x98", "\xC4\x99", "\xC4\x9A", "\xC4\x9B", "\xC4\x9C", "\xC4\x9D", "\xC4\x9E", "\xC4\x9F",
    "\xC4\xA0", "!", "\"", "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ":", ";", "<", "=", ">", "?",
    "@", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O",
    "P", "Q", "R", "S", "T", "U", "V", "W", "X", "Y", "Z", "[", "\\", "]", "^", "_",
    "`", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o",
    "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "{", "|", "}", "~", "\xC4\xA1",
    "\xC4\xA2", "\xC4\xA3", "\xC4\xA4", "\xC4\xA5", "\xC4\xA6", "\xC4\xA7", "\xC4\xA8", "\xC4\xA9",
    "\xC4\xAA", "\xC4\xAB", "\xC4\xAC", "\xC4\xAD", "\xC4\xAE", "\xC4\xAF", "\xC4\xB0", "\xC4\xB1",
    "\xC4\xB2", "\xC4\xB3", "\xC4\xB4", "\xC4\xB5", "\xC4\xB6", "\xC4\xB7", "\xC4\xB8", "\xC4\xB9",
    "\xC4\xBA", "\xC4\xBB", "\xC4\xBC", "\xC4\xBD", "\xC4\xBE", "\xC4\xBF", "\xC5\x80", "\xC5\x81",
    "\xC5\x82", "\xC2\xA1", "\xC2\xA2", "\xC2\xA3", "\xC2\xA4", "\xC2\xA5", "\xC2\xA6", "\xC2\xA7",
    "\xC2\xA8", "\xC2\xA9", "\xC2\xAA", "\xC2\xAB", "\xC2\xAC", "\xC5\x83", "\xC2\xAE", "\xC2\xAF",
    "\xC2\xB0", "\xC2\xB1", "\xC2\xB2", "\xC2\xB3", "\xC2\xB4", "\xC2\xB5", "\xC2\xB6", "\xC2\xB7",
    "\xC2\xB8", "\xC2\xB9", "\xC2\xBA", "\xC2\xBB", "\xC2\xBC", "\xC2\xBD", "\xC2\xBE", "\xC2\xBF",
    "\xC3\x80", "\xC3\x81", "\xC3\x82", "\xC3\x83", "\xC3\x84", "\xC3\x85", "\xC3\x86", "\xC3\x87",
    "\xC3\x88", "\xC3\x89", "\xC3\x8A", "\xC3\x8B", "\xC3\x8C", "\xC3\x8D", "\xC3\x8E", "\xC3\x8F",
    "\xC3\x90", "\xC3\x91", "\xC3\x92", "\xC3\x93", "\xC3\x94", "\xC3\x95", "\xC3\x96", "\xC3\x97",
    "\xC3\x98", "\xC3\x99", "\xC3\x9A", "\xC3\x9B", "\xC3\x9C", "\xC3\x9D", "\xC3\x9E", "\xC3\x9F",
    "\xC3\xA0", "\xC3\xA1", "\xC3\xA2", "\xC3\xA3", "\xC3\xA4", "\xC3\xA5", "\xC3\xA6", "\xC3\xA7",
    "\xC3\xA8", "\xC3\xA9", "\xC3\xAA", "\xC3\xAB", "\xC3\xAC", "\xC3\xAD", "\xC3\xAE", "\xC3\xAF",
    "\xC3\xB0", "\xC3\xB1", "\xC3\xB2", "\xC3\xB3", "\xC3\xB4", "\xC3\xB5", "\xC3\xB6", "\xC3\xB7",
    "\xC3\xB8", "\xC3\xB9", "\xC3\xBA", "\xC3\xBB", "\xC3\xBC", "\xC3\xBD", "\xC3\xBE", "\xC3\xBF",
#undef TKB2
};

const char *tk_byte_char(unsigned b, size_t *len)
{
    const char *s = BYTE_CHARS[b & 0xFF];
    *len = (unsigned char)s[0] < 0x80 ? 1 : 2;
    return s;
}

static int pre_run(tk_ctx *c, size_t stage, const char *s, size_t n, bool first);

static int bytelevel_map_run(tk_ctx *c, size_t stage, const char *s, size_t n, bool first)
{
    tk_buf *m = &c->mbuf[stage];
    m->n = 0;
    int st = tk_buf_reserve(m, 2 * n);
    if (st)
        return st;
    char *o = m->p;
    for (size_t i = 0; i < n; i++) {
        const char *bc = BYTE_CHARS[(unsigned char)s[i]];
        o[0] = bc[0];
        if ((unsigned char)bc[0] >= 0x80) {
            o[1] = bc[1];
            o += 2;
        } else {
            o += 1;
        }
    }
    m->n = (size_t)(o - m->p);
    return pre_run(c, stage + 1, m->p, m->n, first);
}

static int split_run(tk_ctx *c, size_t stage, const tk_regex *re, tk_behavior beh, bool invert, const char *s,
                     size_t n, bool first, bool bytelevel)
{
    tk_ranges *r = &c->rng[stage];
    int st = re_find_all(c, re, s, n, r);
    if (st)
        return st;
    apply_behavior(r, beh, invert);
    /* r is owned by this stage; deeper stages use their own. */
    for (size_t i = 0; i < r->n; i++) {
        size_t a = r->v[i].a, b = r->v[i].b;
        if (b <= a)
            continue;
        bool f = first && a == 0;
        st = bytelevel ? bytelevel_map_run(c, stage, s + a, b - a, f) : pre_run(c, stage + 1, s + a, b - a, f);
        if (st)
            return st;
    }
    return 0;
}

static int pre_run(tk_ctx *c, size_t stage, const char *s, size_t n, bool first)
{
    const pt_tokenizer *t = c->t;
    if (n == 0)
        return 0;
    if (stage == t->n_pre) {
        /* long inputs honour the host's abort callback */
        if (++c->words >= 4096) {
            c->words = 0;
            int ab = pt_check_abort();
            if (ab)
                return ab;
        }
        return bpe_word(c, s, n);
    }
    const tk_pretok *p = &t->pre[stage];
    tk_buf *b = &c->sbuf[stage];
    int st;
    switch (p->kind) {
    case TKP_BYTELEVEL:
        if (p->add_prefix_space && s[0] != ' ') {
            b->n = 0;
            if ((st = tk_buf_putc(b, ' ')) || (st = tk_buf_put(b, s, n)))
                return st;
            s = b->p;
            n = b->n;
        }
        if (p->use_regex)
            return split_run(c, stage, &p->re, TKB_ISOLATED, false, s, n, first, true);
        return bytelevel_map_run(c, stage, s, n, first);
    case TKP_SPLIT:
        return split_run(c, stage, &p->re, p->behavior, p->invert, s, n, first, false);
    case TKP_METASPACE: {
        b->n = 0;
        bool starts = n >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0;
        bool prepend = false;
        /* ' ' becomes the replacement first, so a leading space counts as one */
        if (s[0] == ' ')
            starts = true;
        if (p->scheme == TK_PREPEND_ALWAYS)
            prepend = !starts;
        else if (p->scheme == TK_PREPEND_FIRST)
            prepend = !starts && first;
        if (prepend && (st = tk_buf_put(b, p->repl, p->repl_len)))
            return st;
        size_t run = 0;
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') {
                if ((st = tk_buf_put(b, s + run, i - run)) || (st = tk_buf_put(b, p->repl, p->repl_len)))
                    return st;
                run = i + 1;
            }
        }
        if ((st = tk_buf_put(b, s + run, n - run)))
            return st;
        if (p->split)
            return split_run(c, stage, &p->re, TKB_MERGED_NEXT, false, b->p, b->n, first, false);
        return pre_run(c, stage + 1, b->p, b->n, first);
    }
    }
    return pt_err(PT_EINTERNAL, "tokenizer: unknown pre-tokenizer kind");
}

/* ---- pipeline ---------------------------------------------------------------------- */
static void ctx_free(tk_ctx *c)
{
    cache_free(&c->cache);
    if (c->md)
        pcre2_match_data_free(c->md);
    if (c->mctx)
        pcre2_match_context_free(c->mctx);
    if (c->jit)
        pcre2_jit_stack_free(c->jit);
    for (int i = 0; i < 2; i++)
        tk_buf_free(&c->nbuf[i]);
    for (int i = 0; i < TK_MAX_STAGES; i++) {
        tk_buf_free(&c->sbuf[i]);
        tk_buf_free(&c->mbuf[i]);
        free(c->rng[i].v);
    }
    free(c->seg.v);
    free(c->sub.v);
    free(c->sym);
    free(c->heap);
}

int tk_normalize_string(const pt_tokenizer *t, tk_buf *out, const char *s, size_t n)
{
    tk_ctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    const char *r;
    size_t rn;
    int st = normalize(&c, s, n, &r, &rn);
    if (st == 0)
        st = tk_buf_put(out, r, rn);
    ctx_free(&c);
    return st;
}

static int encode_text(tk_ctx *c, const char *text, size_t len)
{
    const pt_tokenizer *t = c->t;
    int st;
    if (t->trie_raw.count) {
        if ((st = split_added(t, &t->trie_raw, text, len, &c->seg)))
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
        if (t->n_norm && (st = normalize(c, s, n, &s, &n)))
            return st;
        if (n == 0)
            continue;
        if (t->trie_norm.count) {
            if ((st = split_added(t, &t->trie_norm, s, n, &c->sub)))
                return st;
            for (size_t k = 0; k < c->sub.n; k++) {
                tk_range r = c->sub.v[k];
                if (r.match)
                    st = tk_ids_push(c->out, t->added[r.match - 1].id);
                else
                    st = pre_run(c, 0, s + r.a, r.b - r.a, sg.a == 0 && r.a == 0);
                if (st)
                    return st;
            }
        } else if ((st = pre_run(c, 0, s, n, sg.a == 0))) {
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

/* Give back memory that one huge input needed, keep the usual sizes. */
static void ctx_release(tk_ctx *c, bool owned)
{
    if (owned) {
        tk_ctx_destroy(c);
        return;
    }
    const size_t big = (size_t)4 << 20;
    for (int i = 0; i < 2; i++)
        if (c->nbuf[i].cap > big)
            tk_buf_free(&c->nbuf[i]);
    for (int i = 0; i < TK_MAX_STAGES; i++) {
        if (c->sbuf[i].cap > big)
            tk_buf_free(&c->sbuf[i]);
        if (c->mbuf[i].cap > big)
            tk_buf_free(&c->mbuf[i]);
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

int tk_encode(tk_ids *out, const pt_tokenizer *t, const char *text, size_t len, unsigned flags)
{
    bool owned;
    tk_ctx *c = ctx_acquire(&owned);
    if (!c)
        return pt_err(PT_ENOMEM, "tokenizer: out of memory (encode context)");
    c->t = t;
    c->out = out;
    c->words = 0;
    bool special = (flags & PT_TOK_ADD_SPECIAL) && t->n_post;
    bool trunc = (flags & PT_TOK_TRUNCATE) && t->has_trunc;
    int st = 0;
    if (trunc && t->trunc_only_second) {
        ctx_release(c, owned);
        return pt_err(PT_EINVAL, "tokenizer: truncation strategy OnlySecond needs a second sequence");
    }
    /* the content first, then the template around it (it is short) */
    size_t start = out->n;
    st = encode_text(c, text, len);
    ctx_release(c, owned);
    if (st)
        return st;
    size_t n_added = 0, pre = 0;
    bool seen_seq = false;
    if (special)
        for (size_t i = 0; i < t->n_post; i++) {
            if (t->post[i].is_seq)
                seen_seq = true;
            else {
                n_added += t->post[i].n_ids;
                if (!seen_seq)
                    pre += t->post[i].n_ids;
            }
        }
    size_t n = out->n - start;
    if (trunc) {
        /* as the reference: room for the special tokens is kept */
        size_t max = t->trunc_max > n_added ? t->trunc_max - n_added : 0;
        if (!special)
            max = t->trunc_max;
        if (n > max) {
            if (t->trunc_left)
                memmove(out->v + start, out->v + start + (n - max), max * sizeof *out->v);
            out->n = start + max;
            n = max;
        }
    }
    if (special) {
        if ((st = tk_ids_reserve(out, n_added)))
            return st;
        int32_t *v = out->v + start;
        memmove(v + pre, v, n * sizeof *v);
        size_t o = 0, after = pre + n;
        seen_seq = false;
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
        n += n_added;
    }
    if ((flags & PT_TOK_TRUNCATE) && t->has_pad) {
        size_t target = t->pad_fixed ? t->pad_fixed : n;
        if (t->pad_multiple > 0 && target % t->pad_multiple != 0)
            target += t->pad_multiple - target % t->pad_multiple;
        if (n < target) {
            size_t k = target - n;
            if ((st = tk_ids_reserve(out, k)))
                return st;
            int32_t *v = out->v + start;
            if (t->pad_left)
                memmove(v + k, v, n * sizeof *v);
            for (size_t i = 0; i < k; i++)
                v[t->pad_left ? i : n + i] = t->pad_id_json;
            out->n = start + target;
        }
    }
    return 0;
}
