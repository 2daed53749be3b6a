/* Token ids and the assistant mask of a chat rendering.
 *
 * The rendered text is cut only next to markers that are single added tokens
 * (a tokenizer never merges across an added token, and each piece between
 * them is normalised on its own: SentencePiece-style tokenizers prepend "▁"
 * to every such piece), so encoding the pieces one by one gives exactly the
 * ids of encoding the whole text.  Inside a piece, the first and last token
 * of an assistant span are found by encoding the piece up to the span's start
 * and end and comparing with the piece's ids: where the prefix encoding is a
 * prefix of the piece's ids the boundary falls between tokens; where it is
 * not, the first differing token straddles the boundary and is counted in the
 * span.  Cost: each assistant span encodes its piece's prefix twice, so the
 * work stays linear in the conversation length. */
#include "text/chat/chat_internal.h"

#include "core/core.h"
#include "text/tok_util.h"

#include <stdlib.h>
#include <string.h>

/* Number of leading ids shared by a and b. */
static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}

/* Index in the piece's ids where text position `pos` (piece-relative, 0 < pos <
 * piece length) falls: tokens before it are those of the prefix encoding that
 * agree with the piece's ids.  With `end`, a straddling token is counted
 * before the boundary. */
static int boundary(size_t *out, const char *piece, size_t pos, const int32_t *ids, size_t n,
                    bool end, pt_chat_encode_fn encode, void *payload)
{
    int32_t *pre = NULL;
    size_t npre = 0;
    int st = encode(&pre, &npre, piece, pos, payload);
    if (st != PT_OK)
        return st;
    size_t k = common_prefix(pre, npre, ids, n);
    if (end && k < npre && k < n)
        k++;
    free(pre);
    *out = k;
    return PT_OK;
}

/* Valid cut positions into cuts (room for r->n_cuts + 2), increasing, with 0
 * and the text's length at the ends; their count. */
static int valid_cuts(size_t *cuts, size_t *nc, const pt_chat_rendering *r, pt_chat_marker_fn is_marker,
                      void *payload)
{
    size_t n = 0;
    cuts[n++] = 0;
    for (size_t i = 0; i < r->n_cuts; i++) {
        const pt_chat_cut *c = &r->cuts[i];
        if (c->pos <= cuts[n - 1] || c->pos >= r->text.len)
            continue;
        int ok = is_marker(r->text.p + c->marker, c->marker_len, payload);
        if (ok < 0)
            return ok;
        if (ok)
            cuts[n++] = c->pos;
    }
    cuts[n++] = r->text.len;
    *nc = n;
    return PT_OK;
}

/* What one piece [c0, c1) adds: its ids (base onwards in ids) and the token
 * ranges of the assistant spans that begin in it, from span *span on. */
typedef struct piece_ctx {
    const pt_chat_rendering *r;
    pt_chat_encode_fn encode;
    void *payload;
    tk_ids ids;
    tk_ranges masked;   /* token ranges with mask 1 */
} piece_ctx;

static int mask_spans(piece_ctx *p, size_t *span, size_t c0, size_t c1, const int32_t *pids, size_t np,
                      size_t base)
{
    const pt_chat_rendering *r = p->r;
    const char *piece = r->text.p + c0;
    int st = PT_OK;
    /* Spans that begin in this piece (a span never crosses a valid cut:
     * cuts are only made outside assistant spans, but clamp anyway). */
    while (st == PT_OK && *span < r->n_spans && r->spans[*span].begin < c1) {
        const pt_chat_span *s = &r->spans[*span];
        if (s->end <= c0 || s->end <= s->begin) {
            (*span)++;
            continue;
        }
        size_t a = s->begin > c0 ? s->begin - c0 : 0;
        size_t e = s->end < c1 ? s->end - c0 : c1 - c0;
        size_t ta = 0, te = np;
        if (a > 0)
            st = boundary(&ta, piece, a, pids, np, false, p->encode, p->payload);
        if (st == PT_OK && e < c1 - c0)
            st = boundary(&te, piece, e, pids, np, true, p->encode, p->payload);
        if (st == PT_OK && te > ta)
            st = tk_ranges_push(&p->masked, base + ta, base + te, 1);
        if (s->end > c1)
            break; /* continues into the next piece */
        (*span)++;
    }
    return st;
}

static int add_piece(piece_ctx *p, size_t *span, size_t c0, size_t c1)
{
    int32_t *pids = NULL;
    size_t np = 0;
    int st = p->encode(&pids, &np, p->r->text.p + c0, c1 - c0, p->payload);
    if (st != PT_OK)
        return st;
    size_t base = p->ids.n;
    st = tk_ids_append(&p->ids, pids, np);
    if (st == PT_OK)
        st = mask_spans(p, span, c0, c1, pids, np, base);
    free(pids);
    return st;
}

/* The mask of n ids: 1 on the masked ranges. */
static uint8_t *make_mask(const tk_ranges *masked, size_t n)
{
    uint8_t *mask = pt__calloc(n, 1);
    if (mask)
        for (size_t i = 0; i < masked->n; i++)
            memset(mask + masked->v[i].a, 1, masked->v[i].b - masked->v[i].a);
    return mask;
}

int pt__chat_ids_from_rendering(int32_t **ids_out, uint8_t **mask_out, size_t *n_out,
                               const pt_chat_rendering *r, pt_chat_encode_fn encode,
                               pt_chat_marker_fn is_marker, void *payload)
{
    PT_CHECK_NULL(ids_out);
    PT_CHECK_NULL(n_out);
    *ids_out = NULL;
    *n_out = 0;
    if (mask_out)
        *mask_out = NULL;
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(encode);
    PT_CHECK_NULL(is_marker);
    size_t *cuts = pt__malloc_array(r->n_cuts + 2, sizeof *cuts);
    if (!cuts)
        return PT_ENOMEM;
    size_t nc = 0, span = 0;
    piece_ctx p = {.r = r, .encode = encode, .payload = payload};
    int st = valid_cuts(cuts, &nc, r, is_marker, payload);
    for (size_t i = 0; i + 1 < nc && st == PT_OK; i++)
        st = add_piece(&p, &span, cuts[i], cuts[i + 1]);
    free(cuts);
    uint8_t *mask = NULL;
    if (st == PT_OK && mask_out && p.ids.n > 0 && !(mask = make_mask(&p.masked, p.ids.n)))
        st = PT_ENOMEM;
    free(p.masked.v);
    if (st != PT_OK) {
        free(p.ids.v);
        return st;
    }
    *ids_out = p.ids.v;
    *n_out = p.ids.n;
    if (mask_out)
        *mask_out = mask;
    return PT_OK;
}
