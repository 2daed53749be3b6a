/* Forwards over the samples of a rollout buffer: the rows of a micro-batch,
 * and the old or reference log-probabilities of every sample. */
#include "core/core.h"
#include "model/model.h"
#include "train/grpo_internal.h"

#include <stdlib.h>
#include <string.h>

void pt_grpo_fill_row(int32_t *ids, int32_t *tg, const grpo_sample *s, int T)
{
    for (int t = 0; t < T; t++) {
        ids[t] = t < s->n_ids ? s->ids[t] : 0;
        tg[t] = (t >= s->prompt_len - 1 && t + 1 < s->n_ids) ? s->ids[t + 1] : -1;
    }
}

int pt_grpo_forward_rows(pt_context *ctx, const int32_t *ids, const int32_t *tg, int rows, int T, float *logprobs,
                         float *entropy)
{
    pt_batch b;
    pt_batch_init(&b);
    b.batch = rows;
    b.seq = T;
    b.input_ids = ids;
    b.targets = tg;
    return entropy ? pt_model_forward_entropy(ctx, &b, logprobs, entropy) : pt_model_forward(ctx, &b, logprobs, NULL);
}

/* The completion log-probabilities of every sample, in order, into res
 * (the sum of n_comp floats), in forwards of as many rows as ctx holds. */
static int forward_all(float *res, const pt_rollout_buffer *buf, pt_context *ctx, int maxlen)
{
    int n = buf->n, rows_cap = n;
    size_t cells = (size_t)n * (size_t)maxlen;
    int32_t *bid = pt_malloc_array(cells, sizeof *bid), *btg = pt_malloc_array(cells, sizeof *btg);
    float *blp = pt_malloc_array(cells, sizeof *blp);
    int st = PT_OK;
    if (!bid || !btg || !blp)
        st = pt_err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    size_t off = 0;
    for (int i = 0; i < n && !st;) {
        int rows = rows_cap < n - i ? rows_cap : n - i, T = 1;
        for (int r = 0; r < rows; r++)
            T = buf->s[i + r].n_ids > T ? buf->s[i + r].n_ids : T;
        for (int r = 0; r < rows; r++)
            pt_grpo_fill_row(bid + (size_t)r * T, btg + (size_t)r * T, &buf->s[i + r], T);
        if (i > 0 && (st = pt_check_abort()))
            break;
        st = pt_grpo_forward_rows(ctx, bid, btg, rows, T, blp, NULL);
        if (st == PT_EINVAL && rows > 1) {
            rows_cap = rows / 2; /* the context holds fewer rows: retry with half */
            st = PT_OK;
            continue;
        }
        if (st) {
            st = pt_err_prefix(st, "pt_rollout_buffer_compute_logprobs: forward of %d rows of %d tokens", rows, T);
            break;
        }
        for (int r = 0; r < rows; r++) {
            const grpo_sample *s = &buf->s[i + r];
            memcpy(res + off, blp + (size_t)r * T + (s->prompt_len - 1), (size_t)s->n_comp * sizeof *res);
            off += (size_t)s->n_comp;
        }
        i += rows;
    }
    free(bid);
    free(btg);
    free(blp);
    return st;
}

/* Copy res (from forward_all) into the samples' `which` logprobs: all of
 * them, or with only_missing those that have none. */
static void store(pt_rollout_buffer *buf, const float *res, int which, bool only_missing)
{
    size_t off = 0;
    for (int i = 0; i < buf->n; i++) {
        grpo_sample *s = &buf->s[i];
        if (only_missing && (which == PT_ROLLOUT_OLD ? s->has_old : s->has_ref)) {
            off += (size_t)s->n_comp;
            continue;
        }
        memcpy(which == PT_ROLLOUT_OLD ? s->old : s->ref, res + off, (size_t)s->n_comp * sizeof *res);
        if (which == PT_ROLLOUT_OLD)
            s->has_old = true;
        else
            s->has_ref = true;
        off += (size_t)s->n_comp;
    }
}

int pt_rollout_compute_logprobs(pt_rollout_buffer *buf, pt_context *ctx, int which, bool only_missing)
{
    if (buf->n == 0)
        return PT_OK;
    int maxlen = 0;
    size_t total = 0;
    for (int i = 0; i < buf->n; i++) {
        maxlen = buf->s[i].n_ids > maxlen ? buf->s[i].n_ids : maxlen;
        total += (size_t)buf->s[i].n_comp;
    }
    float *res = pt_malloc_array(total, sizeof *res);
    int st = res ? forward_all(res, buf, ctx, maxlen)
                 : pt_err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    for (int i = 0; i < buf->n && !st; i++) {
        grpo_sample *s = &buf->s[i];
        if (which == PT_ROLLOUT_REF && !s->ref && !(s->ref = pt_malloc_array((size_t)s->n_comp, sizeof *s->ref)))
            st = pt_err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    }
    if (!st)
        store(buf, res, which, only_missing);
    free(res);
    return st;
}

int pt_rollout_buffer_compute_logprobs(pt_rollout_buffer *buf, pt_context *ctx, int which)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(ctx);
    PT_CHECK_ARG(which == PT_ROLLOUT_OLD || which == PT_ROLLOUT_REF, which,
                 "%d is not PT_ROLLOUT_OLD or PT_ROLLOUT_REF", which);
    return pt_rollout_compute_logprobs(buf, ctx, which, false);
}
