/* The end of a training step, shared by pt_sft_step and pt_grpo_step
 * (step_internal.h). */
#include "train/step_internal.h"

#include "core/core.h"
#include "train/optimizer.h"

#include <math.h>

/* A skipped step: the gradients dropped, the skip counted and *out filled
 * from the optimizer's counters. */
static void skip_step(pt_step_stats *out, pt_optimizer *opt, bool no_rewards, double tokens, double loss)
{
    pt__optimizer_record_skip(opt, no_rewards ? "no sample has a reward"
                                  : tokens <= 0 ? "the batch has no target tokens"
                                  : isnan(loss) ? "the loss is NaN" : "the loss is infinite");
    int64_t step = 0;
    step = pt_optimizer_step_count(opt);
    out->lr = pt_optimizer_lr(opt);
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    out->step = step;
    out->skipped = true;
    out->skip_reason = no_rewards ? PT_SKIP_NO_REWARDS : tokens <= 0 ? PT_SKIP_NO_TOKENS : PT_SKIP_NONFINITE_LOSS;
    out->skipped_total = sv.skipped;
    out->grad_norm = no_rewards || tokens <= 0 ? 0.0 : NAN;
}

int pt__train_finish_step(pt_step_stats *out, pt_optimizer *opt, int accumulated, bool no_rewards, double tokens,
                         double loss)
{
    if (accumulated) {
        pt__optimizer_zero_grads(opt);
        return accumulated;
    }
    pt_step_stats_init(out);
    if (no_rewards || tokens <= 0 || !isfinite(loss)) {
        skip_step(out, opt, no_rewards, tokens, loss);
        return PT_OK;
    }
    return pt__optimizer_apply(out, opt);
}
