/* The ends of an episode's turn that its tokens make: stop ids and stop
 * strings (posttrain/episode.h).  A stop string is searched in the turn's
 * decoded text, per row, only where a new piece can complete one. */
#include "train/episode_run.h"

#include "core/core.h"

#include <string.h>

/* The stop ids of the sampling options: theirs, or the config's eos. */
static int set_stop_ids(ep_run *r, const pt_model_config *c)
{
    int n = r->so.n_stop_ids;
    const int32_t *src = r->so.stop_ids;
    int32_t eos = c->eos_token_id;
    if (n < 0) {
        n = eos >= 0 && eos < c->vocab_size ? 1 : 0;
        src = &eos;
    }
    r->n_stop = n;
    if (n == 0)
        return PT_OK;
    if (!(r->stop = pt__malloc_array((size_t)n, sizeof *r->stop)))
        return PT_ENOMEM;
    memcpy(r->stop, src, (size_t)n * sizeof *r->stop);
    return PT_OK;
}

int pt__episode_stop_alloc(ep_run *r, const pt_model_config *c)
{
    int st = set_stop_ids(r, c);
    if (st)
        return st;
    const pt_episode_options *o = r->o;
    if (o->n_stop_strings <= 0)
        return PT_OK;
    const size_t B = (size_t)r->B;
    r->stop_len = pt__malloc_array((size_t)o->n_stop_strings, sizeof *r->stop_len);
    r->ds = pt__calloc(B, sizeof *r->ds);
    r->text = pt__calloc(B, sizeof *r->text);
    if (!r->stop_len || !r->ds || !r->text)
        return PT_ENOMEM;
    for (int s = 0; s < o->n_stop_strings; s++)
        r->stop_len[s] = strlen(o->stop_strings[s]);
    for (size_t i = 0; i < B; i++)
        if ((st = pt_decode_stream_create(&r->ds[i], o->tokenizer, 0)))
            return st;
    return PT_OK;
}

void pt__episode_stop_free(ep_run *r)
{
    if (r->ds)
        for (int i = 0; i < r->B; i++)
            pt_decode_stream_free(r->ds[i]);
    if (r->text)
        for (int i = 0; i < r->B; i++)
            pt__strbuf_free(&r->text[i]);
    pt_free(r->ds);
    pt_free(r->text);
    pt_free(r->stop);
    pt_free(r->stop_len);
}

bool pt__episode_is_stop_id(const ep_run *r, int32_t tok)
{
    for (int i = 0; i < r->n_stop; i++)
        if (r->stop[i] == tok)
            return true;
    return false;
}

int pt__episode_stop_string_hit(bool *hit, ep_run *r, int row, int32_t tok)
{
    *hit = false;
    if (tok < 0 || tok >= r->tok_vocab)
        return PT_OK;
    const char *piece;
    size_t plen;
    int st = pt_decode_stream_step(&piece, &plen, r->ds[row], tok);
    if (st)
        return st;
    pt_strbuf *b = &r->text[row];
    size_t old = b->len;
    if (plen == 0)
        return PT_OK;
    if ((st = pt__strbuf_put(b, piece, plen)))
        return st;
    for (int s = 0; s < r->o->n_stop_strings && !*hit; s++) {
        size_t sl = r->stop_len[s];
        size_t from = old + 1 > sl ? old + 1 - sl : 0;
        for (size_t i = from; i + sl <= b->len; i++)
            if (memcmp(b->p + i, r->o->stop_strings[s], sl) == 0) {
                *hit = true;
                break;
            }
    }
    return PT_OK;
}

int pt__episode_stop_turn_reset(ep_run *r, int row)
{
    if (r->o->n_stop_strings <= 0)
        return PT_OK;
    const char *rest;
    size_t n;
    int st = pt_decode_stream_flush(&rest, &n, r->ds[row]);
    if (st)
        return st;
    pt__strbuf_clear(&r->text[row]);
    return PT_OK;
}
