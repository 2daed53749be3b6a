/* Incremental decoding (pt_decode_stream): the text of each new id is what
 * decoding the window of recent ids adds to decoding the window without it,
 * emitted only once it no longer ends in an incomplete character. */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

struct pt_decode_stream {
    const pt_tokenizer *t;
    unsigned flags;
    tk_ids ids;          /* window of ids still needed as context */
    size_t prefix_index; /* ids[0..prefix_index) decode to `prefix` */
    pt_strbuf prefix, cur, out;
};

int pt_decode_stream_create(pt_decode_stream **out, const pt_tokenizer *t, unsigned flags)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(t);
    pt_decode_stream *s = pt__calloc(1, sizeof *s);
    if (!s)
        return PT_ENOMEM;
    s->t = t;
    s->flags = flags;
    *out = s;
    return 0;
}

int pt_decode_stream_new(pt_decode_stream **out, const pt_tokenizer *t, unsigned flags)
{
    return pt_decode_stream_create(out, t, flags);
}

void pt_decode_stream_free(pt_decode_stream *s)
{
    if (!s)
        return;
    free(s->ids.v);
    pt__strbuf_free(&s->prefix);
    pt__strbuf_free(&s->cur);
    pt__strbuf_free(&s->out);
    free(s);
}

static bool ends_incomplete(const pt_strbuf *b)
{
    return b->len >= 3 && memcmp(b->p + b->len - 3, "\xEF\xBF\xBD", 3) == 0;
}

/* Decode the window's ids[0..n) into b (emptied first). */
static int decode_window(pt_strbuf *b, const pt_decode_stream *s, size_t n)
{
    tk_strbuf_reuse(b);
    return tk_decode(b, s->t, s->ids.v, n, s->flags);
}

/* Put the text of cur beyond prefix into out (NUL-terminated, possibly empty). */
static int new_text(pt_decode_stream *s)
{
    tk_strbuf_reuse(&s->out);
    int st = pt__strbuf_reserve(&s->out, 0);
    if (st == 0 && s->cur.len > s->prefix.len)
        st = pt__strbuf_put(&s->out, s->cur.p + s->prefix.len, s->cur.len - s->prefix.len);
    return st;
}

int pt_decode_stream_step(const char **text, size_t *len, pt_decode_stream *s, int32_t id)
{
    PT_CHECK_NULL(text);
    PT_CHECK_NULL(len);
    PT_CHECK_NULL(s);
    *text = "";
    *len = 0;
    const pt_tokenizer *t = s->t;
    if (id < 0 || id >= t->vocab_size)
        return pt__err(PT_ERANGE, "pt_decode_stream_step: id %d is outside the vocabulary (size %d)", (int)id,
                      (int)t->vocab_size);
    int st;
    if (s->prefix.len == 0 && s->ids.n > 0) {
        if ((st = decode_window(&s->cur, s, s->ids.n)))
            return st;
        if (!ends_incomplete(&s->cur)) {
            tk_strbuf_reuse(&s->prefix);
            if ((st = pt__strbuf_put(&s->prefix, s->cur.p, s->cur.len)))
                return st;
            s->prefix_index = s->ids.n;
        }
    }
    if ((st = tk_ids_push(&s->ids, id)) || (st = decode_window(&s->cur, s, s->ids.n)))
        return st;
    if (s->cur.len <= s->prefix.len || ends_incomplete(&s->cur))
        return 0;
    if (memcmp(s->cur.p, s->prefix.p ? s->prefix.p : "", s->prefix.len) != 0)
        return pt__err(PT_ESTATE, "pt_decode_stream_step: the decoded text no longer extends what was emitted");
    if ((st = new_text(s)))
        return st;
    /* the ids before the prefix are no longer needed as context */
    size_t keep = s->ids.n - s->prefix_index;
    memmove(s->ids.v, s->ids.v + s->prefix_index, keep * sizeof *s->ids.v);
    s->ids.n = keep;
    if ((st = decode_window(&s->prefix, s, s->ids.n)))
        return st;
    s->prefix_index = keep;
    *text = s->out.p;
    *len = s->out.len;
    return 0;
}

int pt_decode_stream_flush(const char **text, size_t *len, pt_decode_stream *s)
{
    PT_CHECK_NULL(text);
    PT_CHECK_NULL(len);
    PT_CHECK_NULL(s);
    *text = "";
    *len = 0;
    int st = decode_window(&s->cur, s, s->ids.n);
    if (st == 0)
        st = new_text(s);
    if (st)
        return st;
    *text = s->out.p;
    *len = s->out.len;
    s->ids.n = 0;
    pt__strbuf_clear(&s->prefix);
    s->prefix_index = 0;
    return 0;
}
