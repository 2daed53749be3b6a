/* The SFT step: masked next-token cross-entropy over accumulated
 * micro-batches, through the model's per-token log-probability gradient. */
#include "core/core.h"
#include "model/model.h"
#include "train/grpo_internal.h"
#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int pt_sft_stats_init(pt_sft_stats *s)
{
    if (!s)
        return pt_err(PT_EINVAL, "pt_sft_stats_init: stats is NULL");
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    return PT_OK;
}

static double batch_weight(const pt_batch *b, const float *w)
{
    size_t n = (size_t)b->batch * (size_t)b->seq;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        if (b->targets && b->targets[i] >= 0)
            s += w ? (double)w[i] : 1.0;
    return s;
}

int pt_train_finish_step(pt_step_stats *out, pt_optimizer *opt, double total, double loss)
{
    pt_step_stats_init(out);
    if (total <= 0 || !isfinite(loss)) {
        pt_optimizer_record_skip(opt, total <= 0 ? "the batch has no target tokens"
                                     : isnan(loss) ? "the loss is NaN" : "the loss is infinite");
        int64_t step = 0;
        pt_optimizer_get_step(&step, opt);
        pt_optimizer_get_lr(&out->lr, opt);
        pt_opt_state_view sv;
        pt_optimizer_state_view(&sv, opt);
        out->step = step;
        out->skipped = true;
        out->skipped_total = *sv.skipped;
        out->grad_norm = total <= 0 ? 0.0 : NAN;
        return PT_OK;
    }
    return pt_optimizer_step(out, opt);
}

int pt_sft_step(pt_sft_stats *stats, pt_optimizer *opt, pt_context *ctx, const pt_batch *micro,
                const float *const *weights, int n_micro)
{
    if (!opt || !ctx || !micro)
        return pt_err(PT_EINVAL, "pt_sft_step: NULL argument");
    if (n_micro < 1)
        return pt_err(PT_EINVAL, "pt_sft_step: n_micro %d must be >= 1", n_micro);
    if (stats && stats->size != sizeof *stats)
        return pt_err(PT_EINVAL, "pt_sft_step: stats size %zu is not %zu (call pt_sft_stats_init)", stats->size,
                      sizeof *stats);
    double total = 0;
    size_t max_tokens = 0;
    for (int i = 0; i < n_micro; i++) {
        const pt_batch *b = &micro[i];
        if (b->size != sizeof *b || b->batch < 1 || b->seq < 1)
            return pt_err(PT_EINVAL, "pt_sft_step: micro-batch %d is not an initialised pt_batch with batch, seq >= 1", i);
        const float *w = weights ? weights[i] : NULL;
        size_t n = (size_t)b->batch * (size_t)b->seq;
        if (w)
            for (size_t j = 0; j < n; j++)
                if (!(w[j] >= 0.0f) || !isfinite(w[j]))
                    return pt_err(PT_EINVAL, "pt_sft_step: micro-batch %d: weight %zu is %g (must be finite and >= 0)",
                                  i, j, (double)w[j]);
        total += batch_weight(b, w);
        if (n > max_tokens)
            max_tokens = n;
    }
    pt_sft_stats local;
    pt_sft_stats_init(&local);
    local.tokens = total;
    int st = PT_OK;
    double loss_sum = 0;
    if (total > 0 && n_micro == 1) {
        float loss;
        st = pt_model_loss(ctx, &micro[0], weights ? weights[0] : NULL, true, &loss);
        loss_sum = (double)loss * total;
    } else if (total > 0) {
        float *lp = pt_malloc_array(max_tokens, sizeof *lp), *dlp = pt_malloc_array(max_tokens, sizeof *dlp);
        if (!lp || !dlp)
            st = PT_ENOMEM;
        for (int i = 0; i < n_micro && !st; i++) {
            const pt_batch *b = &micro[i];
            const float *w = weights ? weights[i] : NULL;
            size_t n = (size_t)b->batch * (size_t)b->seq;
            if (i > 0 && (st = pt_check_abort()))
                break;
            if ((st = pt_model_forward(ctx, b, lp, NULL)))
                break;
            for (size_t j = 0; j < n; j++) {
                float wj = (b->targets && b->targets[j] >= 0) ? (w ? w[j] : 1.0f) : 0.0f;
                loss_sum -= (double)wj * (double)lp[j];
                dlp[j] = (float)(-(double)wj / total);
            }
            st = pt_model_backward(ctx, dlp);
        }
        free(lp);
        free(dlp);
    }
    if (st) {
        pt_optimizer_zero_grads(opt);
        return st;
    }
    local.loss = total > 0 ? loss_sum / total : 0.0;
    pt_step_stats ss;
    if ((st = pt_train_finish_step(&ss, opt, total, local.loss)))
        return st;
    local.grad_norm = ss.grad_norm;
    local.lr = ss.lr;
    local.step = ss.step;
    local.skipped = ss.skipped;
    local.skipped_total = ss.skipped_total;
    if (stats)
        *stats = local;
    return PT_OK;
}
