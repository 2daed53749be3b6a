/* The end of a training step, shared by pt_sft_step and pt_grpo_step: after
 * the gradients of the whole step are accumulated, skip the step or run the
 * optimizer, and copy the optimizer's fields into the step's own stats. */
#ifndef PT_TRAIN_STEP_INTERNAL_H
#define PT_TRAIN_STEP_INTERNAL_H

#include "posttrain/train.h"

/* `accumulated` is the status of the accumulation: an error drops the
 * gradients and is returned.  Otherwise either skip the step (no loss tokens,
 * or a non-finite loss: the gradients are dropped and the skip counted) or
 * run pt_optimizer_step.  *out receives grad_norm, lr, step, skipped and
 * skipped_total.  no_rewards (GRPO: nothing was scored, so nothing was
 * accumulated) skips the step with PT_SKIP_NO_REWARDS. */
int pt__train_finish_step(pt_step_stats *out, pt_optimizer *opt, int accumulated, bool no_rewards, double tokens,
                         double loss);

/* Copy the optimizer's part of a step (a pt_step_stats) into a step's stats
 * struct (pt_sft_stats, pt_grpo_stats: the fields have the same names). */
#define PT_STEP_STATS_COPY(dst, ss)                                           \
    do {                                                                      \
        (dst)->grad_norm = (ss)->grad_norm;                                   \
        (dst)->lr = (ss)->lr;                                                 \
        (dst)->step = (ss)->step;                                             \
        (dst)->skipped = (ss)->skipped;                                       \
        (dst)->skipped_total = (ss)->skipped_total;                           \
        (dst)->skip_reason = (ss)->skip_reason;                               \
    } while (0)

#endif
