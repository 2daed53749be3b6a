/* Internal view of the optimizer, for tests and checkpoints. */
#ifndef PT_TRAIN_OPTIMIZER_H
#define PT_TRAIN_OPTIMIZER_H

#include "posttrain/train.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct pt_opt_param {
    float *data;
    float *grad;
    size_t numel;
    bool decay;       /* weight decay applies */
    const char *name; /* for messages and checkpoints; may be NULL */
} pt_opt_param;

/* An optimizer over explicit arrays (the model-based constructor builds the
 * same thing from the model's tensor table).  `params` is copied. */
int pt__optimizer_create_params(pt_optimizer **out, const pt_opt_param *params, size_t n,
                               const pt_optimizer_options *opts);

/* State for checkpoints: first and second moments (second is NULL for SGD),
 * each `numel_total` floats in parameter order, and the counters' values
 * (copies: they are set back only through pt__optimizer_restore_counters). */
typedef struct pt_opt_state_view {
    float *m;
    float *v;
    size_t numel_total;
    int64_t step;
    int64_t skipped;
} pt_opt_state_view;
void pt__optimizer_state_view(pt_opt_state_view *out, pt_optimizer *opt);
/* Set the step and skipped-step counters from a checkpoint: PT_ERANGE for a
 * negative count (nothing changed). */
int pt__optimizer_restore_counters(pt_optimizer *opt, int64_t step, int64_t skipped);
/* Count a skipped step (non-finite loss found before the update), log the
 * reason and drop the accumulated gradients. */
void pt__optimizer_record_skip(pt_optimizer *opt, const char *reason);
/* Drop the accumulated gradients. */
void pt__optimizer_zero_grads(pt_optimizer *opt);
pt_model *pt__optimizer_model(const pt_optimizer *opt);
/* Take the optimizer for the public function fn (PT_EBUSY when another call
 * has it: core/busy.h); give it back on every path. */
int pt__optimizer_take(pt_optimizer *opt, const char *fn);
void pt__optimizer_give(pt_optimizer *opt);
/* Both, optimizer first (ctx may be NULL); none held on failure. */
int pt__train_take(pt_optimizer *opt, pt_context *ctx, const char *fn);
void pt__train_give(pt_optimizer *opt, pt_context *ctx);
/* PT_ESTATE (naming `who`) when the optimizer's model changed structure
 * (LoRA added, merged, removed) since the optimizer was created. */
int pt__optimizer_check_current(const pt_optimizer *opt, const char *who);
/* The checks of a call where an optimizer and a context meet: both were made
 * for the same model (PT_EINVAL naming both otherwise) and that model has
 * not changed structure since the optimizer was created (PT_ESTATE). */
int pt__optimizer_check_context(const pt_optimizer *opt, const pt_context *ctx, const char *who);
/* PT_EINVAL (naming `who`) when opt was not created for `model`. */
int pt__optimizer_check_model(const pt_optimizer *opt, const pt_model *model, const char *who);

/* pt_optimizer_step on this rank's gradients alone (the steps that summed
 * them over a data-parallel job already, and single processes). */
int pt__optimizer_apply(pt_step_stats *stats, pt_optimizer *opt);

/* The parameters with their current gradient pointers (NULL when the model
 * has none allocated yet); *n receives their count. */
const pt_opt_param *pt__optimizer_params(pt_optimizer *opt, size_t *n);

const pt_optimizer_options *pt__optimizer_options_of(const pt_optimizer *opt);
/* Replace the learning rate and its schedule (a checkpoint's, on resume);
 * checked as the options are at creation (PT_EINVAL/PT_ERANGE, nothing
 * changed on failure). */
int pt__optimizer_set_schedule(pt_optimizer *opt, double lr, int schedule, int64_t warmup_steps,
                              int64_t total_steps, double min_lr_ratio);

#endif
