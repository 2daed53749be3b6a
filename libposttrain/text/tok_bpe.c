/* The BPE model: each pre-token becomes symbols (characters, byte-fallback
 * bytes or unk), merged by a priority queue of merges over a linked list of
 * symbols (O(n log n) in the word length); short words are cached per
 * thread. */
#include "text/tok_encode.h"

#include <stdlib.h>
#include <string.h>

/* ---- word cache ---------------------------------------------------------------- */
static void cache_clear(tk_cache *k, uint64_t uid)
{
    if (k->slot)
        memset(k->slot, 0, k->cap * sizeof *k->slot);
    k->n = 0;
    tk_strbuf_reuse(&k->keys);
    k->ids.n = 0;
    k->uid = uid;
}

void tk_cache_free(tk_cache *k)
{
    free(k->slot);
    free(k->ent);
    pt__strbuf_free(&k->keys);
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
            return tk_ids_append(c->out, k->ids.v + e->ids_off, e->n_ids) ? -1 : 1;
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
            tk_cache_free(k);
            return;
        }
        k->uid = c->t->uid;
    }
    if (k->uid != c->t->uid || k->n == TK_CACHE_MAX_ENTRIES)
        cache_clear(k, c->t->uid);
    size_t j = (size_t)h & (k->cap - 1);
    while (k->slot[j])
        j = (j + 1) & (k->cap - 1);
    struct tk_cent e = {h, (uint32_t)k->keys.len, (uint32_t)n, (uint32_t)k->ids.n, (uint32_t)n_ids};
    if (pt__strbuf_put(&k->keys, w, n) || tk_ids_append(&k->ids, ids, n_ids)) {
        cache_clear(k, c->t->uid);
        return;
    }
    k->ent[k->n++] = e;
    k->slot[j] = (uint32_t)k->n;
}

/* ---- merging ------------------------------------------------------------------- */
static int sym_reserve(tk_ctx *c, size_t n)
{
    if (n <= c->sym_cap)
        return 0;
    size_t cap = c->sym_cap ? c->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    tk_sym *s = pt__realloc_array(c->sym, cap, sizeof *s);
    if (!s)
        return PT_ENOMEM;
    c->sym = s;
    c->sym_cap = cap;
    tk_heapent *h = pt__realloc_array(c->heap, cap * 2, sizeof *h);
    if (!h)
        return PT_ENOMEM;
    c->heap = h;
    c->heap_cap = cap * 2;
    return 0;
}

static int heap_push(tk_ctx *c, size_t *hn, uint32_t rank, uint32_t pos)
{
    if (*hn == c->heap_cap) {
        tk_heapent *h = pt__realloc_array(c->heap, c->heap_cap * 2, sizeof *h);
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

/* The symbols of w before any merge: one per character found in the vocabulary,
 * its bytes' <0xNN> tokens (byte_fallback), or the unk token (fused when
 * fuse_unk); characters with none of these are dropped.  Their count. */
static size_t initial_symbols(tk_sym *sym, const pt_tokenizer *t, const char *w, size_t n)
{
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
    if (ns > 0)
        sym[ns - 1].next = -1;
    return ns;
}

/* Queue the merge of the pair that starts at symbol p, if there is one. */
static int queue_pair(tk_ctx *c, size_t *hn, int32_t p)
{
    const tk_sym *sym = c->sym;
    uint32_t rank;
    int32_t nid;
    if (p < 0 || sym[p].next < 0 ||
        !tk_pairmap_get(&c->t->merges, sym[p].id, sym[sym[p].next].id, &rank, &nid))
        return 0;
    return heap_push(c, hn, rank, (uint32_t)p);
}

/* Apply the merges to the ns symbols, best rank first, leftmost first. */
static int merge_symbols(tk_ctx *c, size_t ns)
{
    const pt_tokenizer *t = c->t;
    tk_sym *sym = c->sym;
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
        int st = queue_pair(c, &hn, cur->prev);
        if (st == 0)
            st = queue_pair(c, &hn, (int32_t)pos);
        if (st)
            return st;
    }
    return 0;
}

int tk_bpe_word(tk_ctx *c, const char *w, size_t n)
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
        return pt__err(PT_ERANGE, "tokenizer: a single pre-token of %zu bytes is too long (limit 2 GiB)", n);
    if ((st = sym_reserve(c, n + 1)))
        return st;
    size_t ns = initial_symbols(c->sym, t, w, n);
    if (ns == 0)
        return 0;
    if (ns > 1 && (st = merge_symbols(c, ns)))
        return st;
    if ((st = tk_ids_reserve(c->out, ns)))
        return st;
    for (int32_t p = 0; p >= 0; p = c->sym[p].next)
        c->out->v[c->out->n++] = c->sym[p].id;
    if (cacheable)
        cache_put(c, w, n, h, c->out->v + out0, c->out->n - out0);
    return 0;
}
