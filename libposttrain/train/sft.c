/* The SFT step: masked next-token cross-entropy over accumulated
 * micro-batches, through the model's per-token log-probability gradient. */
#include "core/core.h"
#include "model/model.h"
#include "train/dist_train.h"
#include "train/optimizer.h"
#include "train/step_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PT_ZERO_INIT(pt_sft_stats_init, pt_sft_stats, stats)

static double batch_weight(const pt_batch *b, const float *w)
{
    size_t n = (size_t)b->batch * (size_t)b->seq;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        if (b->targets && b->targets[i] >= 0)
            s += w ? (double)w[i] : 1.0;
    return s;
}

/* Micro-batch i of the caller's array (whose stride is the caller's
 * pt_batch size) read into *local: fields an older header lacks are the
 * defaults.  `what` names it in messages. */
static int read_micro(pt_batch *local, const pt_batch *micro, int i, const char *what)
{
    pt_batch_init(local);
    return pt__struct_read(local, sizeof *local, pt__struct_at(micro, (size_t)i), what, "pt_batch_init");
}

/* Check every micro-batch and its weights; *total receives the sum of the
 * loss weights, *max_tokens the largest B*T. */
static int check_micro(double *total, size_t *max_tokens, const pt_batch *micro, const float *const *weights,
                       int n_micro)
{
    *total = 0;
    *max_tokens = 0;
    for (int i = 0; i < n_micro; i++) {
        char what[48];
        snprintf(what, sizeof what, "pt_sft_step: micro-batch %d", i);
        pt_batch local;
        const pt_batch *b = &local;
        int st = read_micro(&local, micro, i, what);
        if (st)
            return st;
        if (b->batch < 1 || b->seq < 1)
            return pt__err(PT_EINVAL, "%s is not an initialised pt_batch with batch, seq >= 1", what);
        const float *w = weights ? weights[i] : NULL;
        size_t n = (size_t)b->batch * (size_t)b->seq;
        if (w)
            for (size_t j = 0; j < n; j++)
                if (!(w[j] >= 0.0f) || !isfinite(w[j]))
                    return pt__err(PT_EINVAL, "pt_sft_step: micro-batch %d: weight %zu is %g (must be finite and >= 0)",
                                  i, j, (double)w[j]);
        *total += batch_weight(b, w);
        if (n > *max_tokens)
            *max_tokens = n;
    }
    return PT_OK;
}

/* Forward and backward over every micro-batch, each token's gradient
 * -w / total; *loss_sum receives -sum(w * log p).  One micro-batch whose own
 * weight is the total (one process) goes through pt_model_loss directly. */
static int accumulate_micro(double *loss_sum, pt_context *ctx, const pt_batch *micro, const float *const *weights,
                            int n_micro, double total, size_t max_tokens, bool local_total)
{
    *loss_sum = 0;
    if (n_micro == 1 && local_total) {
        float loss = 0.0f;
        int st = pt__ctx_loss(ctx, micro, weights ? weights[0] : NULL, true, &loss);
        *loss_sum = (double)loss * total;
        return st;
    }
    float *lp = pt__malloc_array(max_tokens, sizeof *lp), *dlp = pt__malloc_array(max_tokens, sizeof *dlp);
    int st = (!lp || !dlp) ? PT_ENOMEM : PT_OK;
    for (int i = 0; i < n_micro && !st; i++) {
        pt_batch local;
        const pt_batch *b = &local;
        if ((st = read_micro(&local, micro, i, "pt_sft_step")))
            break;
        const float *w = weights ? weights[i] : NULL;
        size_t n = (size_t)b->batch * (size_t)b->seq;
        if (i > 0 && (st = pt_check_abort()))
            break;
        if ((st = pt__ctx_forward(ctx, b, lp, NULL)))
            break;
        for (size_t j = 0; j < n; j++) {
            float wj = (b->targets && b->targets[j] >= 0) ? (w ? w[j] : 1.0f) : 0.0f;
            *loss_sum -= (double)wj * (double)lp[j];
            dlp[j] = (float)(-(double)wj / total);
        }
        st = pt__ctx_backward(ctx, dlp);
    }
    free(lp);
    free(dlp);
    return st;
}

/* The local part of a step: the arguments, the micro-batches and their
 * weight (*total).  Every rank of a job runs it and then agrees on the
 * outcome, so that an error on one rank never leaves the others waiting. */
static int local_checks(double *total, size_t *max_tokens, const pt_optimizer *opt, const pt_context *ctx,
                        const pt_batch *micro, const float *const *weights, int n_micro, const pt_sft_stats *stats)
{
    *total = 0;
    *max_tokens = 0;
    if (!ctx)
        return pt__err(PT_EINVAL, "pt_sft_step: ctx is NULL");
    if (!micro)
        return pt__err(PT_EINVAL, "pt_sft_step: micro is NULL");
    if (n_micro < 1)
        return pt__err_arg("pt_sft_step", "n_micro", "%d must be >= 1", n_micro);
    int st = pt__struct_check_out(stats, sizeof(pt_sft_stats), "pt_sft_step", "pt_sft_stats_init");
    if (st || (st = pt__optimizer_check_context(opt, ctx, "pt_sft_step")))
        return st;
    return check_micro(total, max_tokens, micro, weights, n_micro);
}

static int sft_step(pt_sft_stats *stats, pt_optimizer *opt, pt_context *ctx, const pt_batch *micro,
                    const float *const *weights, int n_micro);

int pt_sft_step(pt_sft_stats *stats, pt_optimizer *opt, pt_context *ctx, const pt_batch *micro,
                const float *const *weights, int n_micro)
{
    PT_CHECK_NULL(opt);
    int st = pt__train_take(opt, ctx, __func__);
    if (st)
        return st;
    st = sft_step(stats, opt, ctx, micro, weights, n_micro);
    pt__train_give(opt, ctx);
    return st;
}

static int sft_step(pt_sft_stats *stats, pt_optimizer *opt, pt_context *ctx, const pt_batch *micro,
                    const float *const *weights, int n_micro)
{
    pt_dist *d = pt__optimizer_dist(opt);
    const double comm0 = pt_dist_comm_seconds(d);
    double total;
    size_t max_tokens;
    int st = local_checks(&total, &max_tokens, opt, ctx, micro, weights, n_micro, stats);
    if (d) {
        int64_t step = 0;
        step = pt_optimizer_step_count(opt);
        pt__dist_set_step(d, step + 1);
        /* every rank's outcome, and the global loss weight: the normaliser */
        if ((st = pt__comm_agree_sum(NULL, d, st, &total, 1, "pt_sft_step")))
            return st;
    } else if (st) {
        return st;
    }
    pt_sft_stats local;
    pt_sft_stats_init(&local);
    local.tokens = total;
    double loss_sum = 0;
    if (total > 0)
        st = pt__err_in("pt_sft_step", accumulate_micro(&loss_sum, ctx, micro, weights, n_micro, total, max_tokens,
                                                       d == NULL));
    if (d) {
        int acc = pt__comm_agree_sum(NULL, d, st, &loss_sum, 1, "pt_sft_step");
        if (!acc && total > 0 && isfinite(loss_sum))
            acc = pt__dist_allreduce_grads(d, opt);
        st = acc;
    }
    local.loss = total > 0 ? loss_sum / total : 0.0;
    pt_step_stats ss;
    int prev = pt__threads_enter(pt_context_get_num_threads(ctx)); /* the optimizer's loops */
    st = pt__train_finish_step(&ss, opt, st, false, total, local.loss);
    pt__threads_leave(prev);
    if (st)
        return st;
    PT_STEP_STATS_COPY(&local, &ss);
    local.comm_seconds = pt_dist_comm_seconds(d) - comm0;
    pt__struct_write(stats, &local);
    return PT_OK;
}
