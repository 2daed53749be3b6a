/* Internal pieces of the GRPO step, reachable by the tests. */
#ifndef PT_TRAIN_GRPO_INTERNAL_H
#define PT_TRAIN_GRPO_INTERNAL_H

#include "posttrain/grpo.h"

#include <stdbool.h>
#include <stddef.h>

/* Shared by pt_sft_step and pt_grpo_step (defined in sft.c): after the
 * gradients of a whole step are accumulated, either skip the step (no loss
 * tokens, or a non-finite loss: the gradients are dropped and the skip
 * counted) or run pt_optimizer_step.  *out receives grad_norm, lr, step,
 * skipped and skipped_total. */
int pt_train_finish_step(pt_step_stats *out, pt_optimizer *opt, double tokens, double loss);

/* Constants of one step's loss aggregation. */
typedef struct pt_grpo_norm {
    int loss_type, level;
    double eps_low, eps_high, beta;
    double n_seq;      /* grpo: G, the samples of the step */
    double n_tokens;   /* bnpo / dapo: the token normaliser */
    double dr_const;   /* dr_grpo: G_total * max_completion_length */
} pt_grpo_norm;

/* The constants for the samples that take part: n_seq of them with n_tok
 * loss tokens (after masking). */
void pt_grpo_make_norm(pt_grpo_norm *nm, const pt_grpo_options *o, double n_seq, double n_tok);

/* Sums over loss tokens. */
typedef struct pt_grpo_acc {
    double loss;       /* aggregated loss contribution */
    double tokens;     /* loss tokens */
    double kl;         /* sum of k3 */
    double clip_low, clip_high, clip_region; /* counts */
} pt_grpo_acc;

/* The loss of one sample of n completion tokens with advantage adv: adds
 * to *acc and writes dL/dlogp into dlogp[0 .. n) (0 off the mask).  ref may
 * be NULL (then beta must be 0 and kl counts 0). */
void pt_grpo_loss_sample(pt_grpo_acc *acc, float *dlogp, const float *logp, const float *old,
                         const float *ref, const uint8_t *mask, int n, double adv, const pt_grpo_norm *nm);

/* Advantages of n samples from their combined rewards R (after any
 * over-long penalty) and group ids: adv[i], zero_std[i] (its group's
 * rewards are all equal).  Returns the number of groups and, through
 * *n_zero, how many have zero std.  PT_ENOMEM as a negative value. */
int pt_grpo_advantages(double *adv, bool *zero_std, int *n_zero, const double *R, const int64_t *group, int n,
                       int scale);

/* DAPO's soft over-long penalty for a completion of len tokens. */
double pt_grpo_overlong_penalty(int len, int l_max, int l_c);

/* Sum w_k r_k over the functions that did not decline (NaN), 0 if all did. */
double pt_grpo_combine_rewards(const float *r, const double *w, int k);

/* The forward and backward half of pt_grpo_step: checks, advantages, loss,
 * gradients accumulated into the model's (dropped on error); no optimizer
 * step.  Fills *out except grad_norm, lr, step and the skip fields. */
int pt_grpo_accumulate(pt_grpo_stats *out, pt_context *ctx, pt_model *model, pt_rollout_buffer *buf,
                       const pt_grpo_options *o);

#endif
