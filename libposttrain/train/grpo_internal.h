/* Internals of GRPO, shared by its files (grpo_rollout.c: the buffer and its
 * log-probabilities; grpo_reward.c: scoring and reward statistics;
 * grpo_advantage.c; grpo_loss.c: the per-token loss; grpo_step.c) and
 * reachable by the tests. */
#ifndef PT_TRAIN_GRPO_INTERNAL_H
#define PT_TRAIN_GRPO_INTERNAL_H

#include "posttrain/dist.h"
#include "posttrain/grpo.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the buffer (grpo_rollout.c) ---- */

/* Where a sample's advantages come from. */
enum { GRPO_KIND_REWARD = 0, GRPO_KIND_SEGMENTS = 1, GRPO_KIND_ADVANTAGES = 2 };

/* One sample, copied in. */
typedef struct grpo_sample {
    int32_t *ids;
    int n_ids, prompt_len, n_comp, n_mask;
    uint8_t *mask;     /* n_comp */
    float *old, *ref;  /* n_comp; old is filled on first use when absent */
    float *samp;       /* n_comp sampling log-probabilities, or NULL */
    float *tadv;       /* n_comp advantages given by the host (GRPO_KIND_ADVANTAGES), or NULL */
    float *seg;        /* n_seg segment rewards (GRPO_KIND_SEGMENTS), or NULL */
    int n_seg, kind;
    bool has_old, has_ref, truncated;
    /* rewards were given for it (at add, by set_reward or score; segment
     * rewards and advantages at add), even if all declined (NaN) */
    bool scored;
    /* the temperature the library computed old, ref, sampling values at
     * (indexed by pt_rollout_logprobs); 0: given by the host */
    float lp_temp[3];
    int64_t group;
    float rewards[PT_GRPO_MAX_REWARD_FUNCS];
} grpo_sample;

/* The segment (0, 1, ...) of each completion token, -1 off the mask;
 * returns the number of segments. */
int pt__grpo_segments_of(int *seg_of, const uint8_t *mask, int n);

/* Tests only (pt__grpo_set_dlogp_hook). */
typedef void (*pt_grpo_dlogp_hook)(int sample, const float *dlogp, int n, void *payload);

struct pt_rollout_buffer {
    int k;                                   /* reward functions */
    char *names[PT_GRPO_MAX_REWARD_FUNCS];
    double weights[PT_GRPO_MAX_REWARD_FUNCS];
    grpo_sample *s;
    int n, cap;
    float *view_seg;                         /* a global view's copy of the segment rewards */
    bool scoring;                            /* pt_rollout_buffer_score is calling a reward function */
    bool free_pending;                       /* the reward function freed the buffer: freed after it returns */
    pt_grpo_dlogp_hook dlogp_hook;           /* tests only: NULL */
    void *dlogp_payload;
};

/* ---- the step's checks (grpo_check.c) ---- */

/* The options of pt_grpo_step / pt__grpo_accumulate: PT_OK or PT_EINVAL
 * naming the field. */
int pt__grpo_check_options(const pt_grpo_options *o);
/* Every sample's ids inside the model's vocabulary and its reference
 * logprobs present when beta > 0 (or to come from the LoRA base:
 * *refs_from_base); *maxlen receives the longest sample. */
int pt__grpo_check_samples(int *maxlen, bool *refs_from_base, const pt_rollout_buffer *buf, const pt_model *model,
                          const pt_grpo_options *o);
/* PT_ESTATE when no sample of buf has a reward and some were never scored. */
int pt__grpo_check_scored(const pt_rollout_buffer *buf);
/* Sample s has no reward: every reward function declined it (and no
 * over-long penalty scores it), or every segment; with given advantages:
 * every reward function declined it (it only reports them). */
bool pt__grpo_declined(const pt_rollout_buffer *buf, const grpo_sample *s, const pt_grpo_options *o);
/* The samples with rewards or segment rewards that pt__grpo_declined. */
void pt__grpo_count_unscored(int64_t *unscored, const pt_rollout_buffer *buf, const pt_grpo_options *o);

/* PT_ESTATE naming func when buf is being scored (a reward function may
 * not change the buffer it scores); else PT_OK (grpo_reward.c). */
int pt__rollout_check_not_scoring(const pt_rollout_buffer *buf, const char *func);
/* The n samples (stride: the caller's sample size) checked, then copied in;
 * all or nothing.  Messages name `func`. */
int pt__rollout_add_samples(pt_rollout_buffer *buf, const pt_rollout_sample *samples, int n, const char *func);

/* One row of a micro-batch for sample s, T wide: ids padded with 0,
 * targets on the completion positions (t >= prompt_len - 1), -1 elsewhere. */
void pt__grpo_fill_row(int32_t *ids, int32_t *tg, const grpo_sample *s, int T);

/* A forward of rows x T tokens on ctx at a temperature into logprobs, and
 * into entropy too when it is not NULL. */
int pt__grpo_forward_rows(pt_context *ctx, const int32_t *ids, const int32_t *tg, int rows, int T, float temperature,
                         float *logprobs, float *entropy);

/* Fill `which` logprobs from forwards on ctx at a temperature: of every
 * sample, or with only_missing of the samples that have none yet (all or
 * nothing). */
int pt__rollout_compute_logprobs(pt_rollout_buffer *buf, pt_context *ctx, int which, bool only_missing,
                                float temperature);

/* ---- rewards (grpo_reward.c) and advantages (grpo_advantage.c) ---- */

/* Sum w_k r_k over the functions that did not decline (NaN), 0 if all did. */
double pt__grpo_combine_rewards(const float *r, const double *w, int k);

/* DAPO's soft over-long penalty for a completion of len tokens. */
double pt__grpo_overlong_penalty(int len, int l_max, int l_c);

/* Unbiased std (torch.std) from the sum of squared deviations of n values;
 * 0 for fewer than two values. */
double pt__grpo_std(double sumsq_dev, int n);

/* torch.nanmean and TRL's nanstd of n values, NaN left out: the mean into
 * *mean (NaN when none), how many are not NaN into *count (when not NULL);
 * returns the unbiased std, NaN below two values. */
double pt__grpo_nan_mean_std(double *mean, int *count, const double *x, int n);

/* Reward and completion-length statistics over every sample of the buffer,
 * R the combined rewards (NaN: declined, left out as TRL's nanmean and
 * nanstd do): reward, reward_std, n_reward_funcs,
 * reward_func_mean/std, completion_*_length and clipped_ratio of *st. */
void pt__grpo_reward_stats(pt_grpo_stats *st, const pt_rollout_buffer *buf, const double *R);

/* Advantages of n samples from their combined rewards R (after any
 * over-long penalty; NaN: declined) and group ids, as TRL: a declined
 * sample is left out of its group's mean and std (and the batch's) and
 * gets advantage 0.  adv[i], zero_std[i] (its group has fewer than two
 * rewards, or all equal: nothing to learn).  Returns the number of groups,
 * through *n_zero how many have zero std, and through *n_trl_zero how many
 * samples TRL's is_std_zero flags (frac_reward_zero_std's numerator: the
 * std the scaling uses, per group or of the batch, isclose to 0; NaN, below
 * two rewards, is not).  PT_ENOMEM as a negative value. */
int pt__grpo_advantages(double *adv, bool *zero_std, int *n_zero, int *n_trl_zero, const double *R,
                       const int64_t *group, int n, int scale);

/* Per-segment advantages of n samples with segment rewards: sample i has
 * nseg[i] rewards at rew + off[i] (NaN: declined), and gets its advantages
 * at adv + off[i]: segment k against the segment-k rewards of its group
 * (docs/grpo.md).  zero_std[i]: no segment index of its group has a
 * spread.  Returns the number of groups (and *n_zero), or PT_ENOMEM as a
 * negative value. */
int pt__grpo_segment_advantages(double *adv, bool *zero_std, int *n_zero, const double *rew, const int *off,
                               const int *nseg, const int64_t *group, int n, int scale);

/* ---- the per-token loss (grpo_loss.c) ---- */

/* Constants of one step's loss aggregation. */
typedef struct pt_grpo_norm {
    int loss_type, level;
    double eps_low, eps_high, beta;
    double delta;      /* two-sided clipping cap, INFINITY when off */
    double n_seq;      /* grpo: G, the samples of the step */
    double n_tokens;   /* bnpo / dapo / cispo: the token normaliser */
    double dr_const;   /* dr_grpo: G_total * max_completion_length */
    double vk_pos, vl_pos, vk_neg, vl_neg; /* vespo: k and lambda (lambda >= 1e-4) */
} pt_grpo_norm;

/* The constants for the samples that take part: n_seq of them with n_tok
 * loss tokens (after masking). */
void pt__grpo_make_norm(pt_grpo_norm *nm, const pt_grpo_options *o, double n_seq, double n_tok);

/* Sums over loss tokens. */
typedef struct pt_grpo_acc {
    double loss;       /* aggregated loss contribution */
    double tokens;     /* loss tokens */
    double kl;         /* sum of k3 */
    double clip_low, clip_high, clip_region; /* counts */
    double clip_units; /* what they count: loss tokens, or samples at sequence level */
    double cispo_clip; /* count */
    /* sampler against trainer (tokens with sampling logprobs) */
    double samp_tokens, samp_diff_sum, samp_diff_max;
    /* the correction's weights: units (tokens or samples), their sum,
     * extremes and how many were truncated or masked */
    double is_units, is_sum, is_min, is_max, is_corrected;
    /* entropy mask: loss tokens kept */
    double ent_kept;
    /* vespo: sum of phi and its units (samples; loss tokens of a sample
     * with per-token advantages) */
    double phi_sum, phi_units;
} pt_grpo_acc;

/* One sample's tokens for the loss. */
typedef struct pt_grpo_tokens {
    int n;                       /* completion tokens */
    const float *logp, *old;
    const float *ref;            /* NULL: no KL (beta must be 0) */
    const uint8_t *mask;         /* loss tokens */
    const double *adv;           /* per token */
    const double *pw;            /* per token weight of the policy term (the
                                  * correction times the entropy mask; vespo:
                                  * the entropy mask); NULL: 1 */
    bool token_adv;              /* the advantages vary by token (given, or per
                                  * segment): sequence-level metrics count tokens */
    double is_logsum;            /* vespo: the correction's log weight summed
                                  * (pt__grpo_vespo_is_logsum); else 0 */
} pt_grpo_tokens;

/* The loss of one sample: adds to *acc and writes dL/dlogp into dlogp[0 ..
 * n) (0 off the mask). */
void pt__grpo_loss_sample(pt_grpo_acc *acc, float *dlogp, const pt_grpo_tokens *t, const pt_grpo_norm *nm);

/* The correction's weight per token into w[0 .. n) (1 for a sample without
 * sampling log-probabilities: samp NULL; anything off the mask), from the
 * trainer's old and the sampler's log-probabilities, and its metrics into
 * *acc.  o: a full pt_grpo_options. */
void pt__grpo_is_weights(double *w, pt_grpo_acc *acc, const float *old, const float *samp, const uint8_t *mask, int n,
                        const pt_grpo_options *o);

/* vespo: the sum over the loss tokens of log w_t, w the correction's
 * weights in pw (token modes), each clamped to [log 1e-8, 20] as TRL's
 * get_gamma_weights; pw's loss tokens are set to 1 (vespo puts the
 * correction into phi, not on the tokens). */
double pt__grpo_vespo_is_logsum(double *pw, const uint8_t *mask, int n);

/* torch.quantile(x[0 .. n), q) (linear interpolation; sorts x in place);
 * NaN for n == 0. */
double pt__grpo_quantile(float *x, size_t n, double q);

/* ---- the step (grpo_step.c) ---- */

/* The forward and backward half of pt_grpo_step: checks, advantages, loss,
 * gradients accumulated into the model's (dropped on error); no optimizer
 * step.  `o` is a full pt_grpo_options.  Fills *out except grad_norm, lr,
 * step and the skip fields. */
int pt__grpo_accumulate(pt_grpo_stats *out, pt_context *ctx, pt_model *model, pt_rollout_buffer *buf,
                       const pt_grpo_options *o, pt_dist *d);

/* Tests only: a step on buf calls fn with every training sample's dL/dlogp
 * (its index in buf, n completion tokens) before the backward; NULL
 * removes it.  A field of the buffer (no global state): steps on other
 * buffers, in other threads, do not call it. */
void pt__grpo_set_dlogp_hook(pt_rollout_buffer *buf, pt_grpo_dlogp_hook fn, void *payload);

/* ---- the step's working state (grpo_step.c, grpo_step_adv.c) ---- */

/* One micro-batch: samples first .. end-1 of the buffer (rows of them
 * train), T wide. */
typedef struct grpo_mb {
    int first, end, rows, T;
} grpo_mb;

/* The working state of one accumulation. */
typedef struct grpo_run {
    const pt_grpo_options *o;
    pt_rollout_buffer *buf;
    const pt_rollout_buffer *all; /* the whole global batch: buf, or every rank's (grpo_view.c) */
    int offset;                 /* buf's first sample in `all` */
    pt_context *ctx;
    pt_dist *d;
    float temp;                 /* the step's temperature */
    int n, maxlen;              /* buf's samples, its longest */
    double *R, *adv;            /* per sample of `all`: reported reward, advantage (reward samples) */
    bool *zs;                   /* per sample of `all`: its group has nothing to learn (zero std) */
    int *seg_off;               /* per sample of `all`: its first segment in segadv */
    double *segadv;             /* the advantage of every segment of `all` */
    float *lpc, *dlc;           /* one sample's completion logprobs and dL/dlogp */
    double *tadv, *pw;          /* one sample's per-token advantages and policy-term weights */
    int *seg_of;                /* one sample's segment index per token */
    int rows_cap;               /* rows per forward */
    int32_t *bid, *btg;         /* a micro-batch: ids, targets */
    float *blp, *bdl, *bent;    /* its logprobs, dL/dlogp, entropies */
    float *bde;                 /* entropy_coef != 0: its dL/dH */
    double n_tok;               /* the loss tokens of the global batch */
    double ent_kept_all;        /* top_entropy_quantile < 1: the loss tokens kept, every rank's */
    double ent_norm;            /* the entropy bonus's normaliser */
    double ent_coef;            /* the bonus's coefficient this step (0: off) */
    double eff_sum, eff_n;      /* entropies of the loss tokens the entropy mask keeps */
    grpo_mb *plan;              /* the micro-batches an entropy pass made (NULL: none) */
    int n_plan;
    double ent_thr;             /* top_entropy_quantile < 1: the threshold; else -inf */
    pt_grpo_norm nm;
    pt_grpo_acc acc;
    double ent_sum, ent_n, fwd_tokens;
} grpo_run;

/* Rewards (with the over-long penalty), advantages (per sample or per
 * segment) and the reward statistics of the whole global batch w->all
 * into w->R, w->adv, w->zs, w->segadv and *stats (grpo_step_adv.c). */
int pt__grpo_compute_advantages(grpo_run *w, pt_grpo_stats *stats);

/* ---- data-parallel steps (grpo_view.c) ---- */

/* Every rank's samples, in rank order, into *view: of each only what its
 * wire record carries (grpo_view.c: group, n_comp, n_mask, n_seg, kind,
 * truncated, rewards; every other field 0 or NULL: the token arrays stay
 * on their rank) and its segment rewards, seg pointing into the view's own
 * copy; groups renumbered densely by first
 * appearance, rank by rank, since group ids are local to a rank), and this
 * rank's first sample's index in it into *offset.  Collective: `status` is
 * this rank's outcome so far; PT_OK only when every rank's was (a failed
 * rank keeps its status and message, the others get PT_EPEER naming it).
 * On error *view is empty.  Free with pt__grpo_view_free. */
int pt__grpo_view_gather(pt_rollout_buffer *view, int *offset, pt_dist *d, const pt_rollout_buffer *buf, int status);
void pt__grpo_view_free(pt_rollout_buffer *view);

#endif
