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

#include <stdlib.h>
#include <string.h>

typedef struct id_buf {
    int32_t *ids;
    uint8_t *mask;
    size_t n, cap;
} id_buf;

static int buf_append(id_buf *b, const int32_t *ids, size_t n)
{
    size_t need;
    if (!pt_add_size(b->n, n, &need))
        return pt_err(PT_ENOMEM, "chat ids: too many tokens");
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            if (!pt_mul_size(cap, 2, &cap))
                return pt_err(PT_ENOMEM, "chat ids: too many tokens");
        int32_t *p = pt_realloc_array(b->ids, cap, sizeof *p);
        if (!p)
            return PT_ENOMEM;
        b->ids = p;
        uint8_t *q = pt_realloc_array(b->mask, cap, 1);
        if (!q)
            return PT_ENOMEM;
        b->mask = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->ids + b->n, ids, n * sizeof *ids);
    memset(b->mask + b->n, 0, n);
    b->n = need;
    return PT_OK;
}

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

int pt_chat_ids_from_rendering(int32_t **ids_out, uint8_t **mask_out, size_t *n_out,
                               const pt_chat_rendering *r, pt_chat_encode_fn encode,
                               pt_chat_marker_fn is_marker, void *payload)
{
    if (!ids_out || !n_out || !r || !encode || !is_marker)
        return pt_err(PT_EINVAL, "chat ids: NULL argument");
    *ids_out = NULL;
    *n_out = 0;
    if (mask_out)
        *mask_out = NULL;

    /* Valid cut positions, increasing, strictly inside the text. */
    size_t *cuts = pt_malloc_array(r->n_cuts + 2, sizeof *cuts);
    if (!cuts)
        return PT_ENOMEM;
    size_t nc = 0;
    cuts[nc++] = 0;
    int st = PT_OK;
    for (size_t i = 0; i < r->n_cuts && st == PT_OK; i++) {
        const pt_chat_cut *c = &r->cuts[i];
        if (c->pos <= cuts[nc - 1] || c->pos >= r->len)
            continue;
        int ok = is_marker(r->text + c->marker, c->marker_len, payload);
        if (ok < 0)
            st = ok;
        else if (ok)
            cuts[nc++] = c->pos;
    }
    cuts[nc++] = r->len;

    id_buf b = {0};
    size_t span = 0;
    for (size_t p = 0; p + 1 < nc && st == PT_OK; p++) {
        size_t c0 = cuts[p], c1 = cuts[p + 1];
        const char *piece = r->text + c0;
        int32_t *pids = NULL;
        size_t np = 0;
        st = encode(&pids, &np, piece, c1 - c0, payload);
        if (st != PT_OK)
            break;
        size_t base = b.n;
        st = buf_append(&b, pids, np);
        /* Spans that begin in this piece (a span never crosses a valid cut:
         * cuts are only made outside assistant spans, but clamp anyway). */
        while (st == PT_OK && span < r->n_spans && r->spans[span].begin < c1) {
            const pt_chat_span *s = &r->spans[span];
            if (s->end <= c0 || s->end <= s->begin) {
                span++;
                continue;
            }
            size_t a = s->begin > c0 ? s->begin - c0 : 0;
            size_t e = s->end < c1 ? s->end - c0 : c1 - c0;
            size_t ta = 0, te = np;
            if (a > 0)
                st = boundary(&ta, piece, a, pids, np, false, encode, payload);
            if (st == PT_OK && e < c1 - c0)
                st = boundary(&te, piece, e, pids, np, true, encode, payload);
            if (st == PT_OK && te > ta)
                memset(b.mask + base + ta, 1, te - ta);
            if (s->end <= c1)
                span++;
            else
                break; /* continues into the next piece */
        }
        free(pids);
    }
    free(cuts);
    if (st != PT_OK) {
        free(b.ids);
        free(b.mask);
        return st;
    }
    *ids_out = b.ids;
    *n_out = b.n;
    if (mask_out)
        *mask_out = b.mask;
    else
        free(b.mask);
    return PT_OK;
}
