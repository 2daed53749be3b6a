/* Forwards over the samples of a rollout buffer: the rows of a micro-batch,
 * and the old, reference or sampling log-probabilities of every sample at
 * a temperature. */
#include "core/core.h"
#include "model/model.h"
#include "train/grpo_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void pt__grpo_fill_row(int32_t *ids, int32_t *tg, const grpo_sample *s, int T)
{
    for (int t = 0; t < T; t++) {
        ids[t] = t < s->n_ids ? s->ids[t] : 0;
        tg[t] = (t >= s->prompt_len - 1 && t + 1 < s->n_ids) ? s->ids[t + 1] : -1;
    }
}

int pt__grpo_forward_rows(pt_context *ctx, const int32_t *ids, const int32_t *tg, int rows, int T, float temperature,
                         float *logprobs, float *entropy)
{
    pt_batch b;
    pt_batch_init(&b);
    b.batch = rows;
    b.seq = T;
    b.input_ids = ids;
    b.targets = tg;
    b.temperature = temperature;
    return entropy ? pt__ctx_forward_entropy(ctx, &b, logprobs, entropy) : pt__ctx_forward(ctx, &b, logprobs, NULL);
}

/* The completion log-probabilities of every sample, in order, into res
 * (the sum of n_comp floats), in forwards of as many rows as ctx holds. */
static int forward_all(float *res, const pt_rollout_buffer *buf, pt_context *ctx, int maxlen, float temperature)
{
    int n = buf->n, rows_cap = n;
    size_t cells = (size_t)n * (size_t)maxlen;
    int32_t *bid = pt__malloc_array(cells, sizeof *bid), *btg = pt__malloc_array(cells, sizeof *btg);
    float *blp = pt__malloc_array(cells, sizeof *blp);
    int st = PT_OK;
    if (!bid || !btg || !blp)
        st = pt__err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    size_t off = 0;
    for (int i = 0; i < n && !st;) {
        int rows = rows_cap < n - i ? rows_cap : n - i, T = 1;
        for (int r = 0; r < rows; r++)
            T = buf->s[i + r].n_ids > T ? buf->s[i + r].n_ids : T;
        for (int r = 0; r < rows; r++)
            pt__grpo_fill_row(bid + (size_t)r * T, btg + (size_t)r * T, &buf->s[i + r], T);
        if (i > 0 && (st = pt_check_abort()))
            break;
        st = pt__grpo_forward_rows(ctx, bid, btg, rows, T, temperature, blp, NULL);
        if (st == PT_EINVAL && rows > 1) {
            rows_cap = rows / 2; /* the context holds fewer rows: retry with half */
            st = PT_OK;
            continue;
        }
        if (st) {
            st = pt__err_prefix(st, "pt_rollout_buffer_compute_logprobs: forward of %d rows of %d tokens", rows, T);
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

/* The array of sample s that `which` names, and whether it is set. */
static float **lp_array(grpo_sample *s, int which)
{
    return which == PT_ROLLOUT_OLD ? &s->old : which == PT_ROLLOUT_REF ? &s->ref : &s->samp;
}

static bool lp_present(const grpo_sample *s, int which)
{
    return which == PT_ROLLOUT_OLD ? s->has_old : which == PT_ROLLOUT_REF ? s->has_ref : s->samp != NULL;
}

/* Copy res (from forward_all) into the samples' `which` logprobs: all of
 * them, or with only_missing those that have none (their arrays are
 * allocated). */
static void store(pt_rollout_buffer *buf, const float *res, int which, bool only_missing, float temperature)
{
    size_t off = 0;
    for (int i = 0; i < buf->n; i++) {
        grpo_sample *s = &buf->s[i];
        if (only_missing && lp_present(s, which)) {
            off += (size_t)s->n_comp;
            continue;
        }
        memcpy(*lp_array(s, which), res + off, (size_t)s->n_comp * sizeof *res);
        if (which == PT_ROLLOUT_OLD)
            s->has_old = true;
        else if (which == PT_ROLLOUT_REF)
            s->has_ref = true;
        s->lp_temp[which] = temperature;
        off += (size_t)s->n_comp;
    }
}

int pt__rollout_compute_logprobs(pt_rollout_buffer *buf, pt_context *ctx, int which, bool only_missing,
                                float temperature)
{
    if (buf->n == 0)
        return PT_OK;
    int maxlen = 0;
    size_t total = 0;
    for (int i = 0; i < buf->n; i++) {
        maxlen = buf->s[i].n_ids > maxlen ? buf->s[i].n_ids : maxlen;
        total += (size_t)buf->s[i].n_comp;
    }
    float *res = pt__malloc_array(total, sizeof *res);
    int st = res ? forward_all(res, buf, ctx, maxlen, temperature)
                 : pt__err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    /* room for the arrays a sample lacks (kept on error: they are unset) */
    for (int i = 0; i < buf->n && !st; i++) {
        float **a = lp_array(&buf->s[i], which);
        if (!*a && !(*a = pt__malloc_array((size_t)buf->s[i].n_comp, sizeof **a)))
            st = pt__err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    }
    if (!st)
        store(buf, res, which, only_missing, temperature);
    free(res);
    return st;
}

int pt_rollout_logprobs_options_init(pt_rollout_logprobs_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->temperature = 1.0;
    return PT_OK;
}

#define CHECK_WHICH(which)                                                                         \
    PT_CHECK_ARG((which) >= PT_ROLLOUT_OLD && (which) <= PT_ROLLOUT_SAMPLING, which,                  \
                 "%d is not PT_ROLLOUT_OLD, PT_ROLLOUT_REF or PT_ROLLOUT_SAMPLING", (which))

int pt_rollout_buffer_compute_logprobs_with(pt_rollout_buffer *buf, pt_context *ctx, int which,
                                            const pt_rollout_logprobs_options *opts)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(ctx);
    CHECK_WHICH(which);
    pt_rollout_logprobs_options o;
    int st = PT_STRUCT_READ(o, opts, pt_rollout_logprobs_options_init);
    if (st || (st = pt__rollout_check_not_scoring(buf, __func__)))
        return st;
    PT_CHECK_ARG(isfinite(o.temperature) && o.temperature >= 1e-6 && o.temperature <= FLT_MAX, temperature,
                 "%g must be finite and >= 1e-6", o.temperature);
    if ((st = pt__context_take(ctx, __func__)))
        return st;
    st = pt__rollout_compute_logprobs(buf, ctx, which, false, (float)o.temperature);
    pt__context_give(ctx);
    return pt__err_in(__func__, st);
}

int pt_rollout_buffer_compute_logprobs(pt_rollout_buffer *buf, pt_context *ctx, int which)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(ctx);
    CHECK_WHICH(which);
    int st = pt__rollout_check_not_scoring(buf, __func__);
    if (st || (st = pt__context_take(ctx, __func__)))
        return st;
    st = pt__rollout_compute_logprobs(buf, ctx, which, false, 1.0f);
    pt__context_give(ctx);
    return pt__err_in(__func__, st);
}
