/* The GRPO step's options (pt_grpo_options_init, their checks) and the
 * checks of a buffer before a step: its samples against the model, and
 * whether it was scored (grpo_step.c runs the step). */
#include "core/core.h"
#include "model/model.h"
#include "posttrain/lora.h"
#include "train/grpo_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int pt_grpo_options_init(pt_grpo_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->scale_rewards = PT_GRPO_SCALE_GROUP;
    opts->loss_type = PT_GRPO_LOSS_DAPO;
    opts->importance_sampling_level = PT_GRPO_IS_TOKEN;
    opts->epsilon_low = 0.2;
    opts->epsilon_high = 0.2;
    opts->temperature = 1.0;
    opts->importance_sampling_correction = PT_GRPO_IS_SEQUENCE_MASK;
    opts->importance_sampling_clip_max = 3.0;
    opts->importance_sampling_clip_min = 0.0;
    opts->top_entropy_quantile = 1.0;
    opts->vespo_k_pos = 2.0;
    opts->vespo_lambda_pos = 3.0;
    opts->vespo_k_neg = 3.0;
    opts->vespo_lambda_neg = 2.0;
    opts->entropy_coef_max = 1.0;
    opts->entropy_coef_delta = 0.005;
    opts->entropy_target = 0.2;
    opts->entropy_last = INFINITY;
    return PT_OK;
}

int pt_grpo_stats_init(pt_grpo_stats *stats)
{
    PT_STRUCT_INIT_ZERO(stats);
    stats->entropy = NAN;
    stats->sampling_logp_difference_mean = stats->sampling_logp_difference_max = NAN;
    stats->importance_sampling_ratio_min = stats->importance_sampling_ratio_mean = NAN;
    stats->importance_sampling_ratio_max = stats->importance_sampling_corrected_fraction = NAN;
    stats->entropy_threshold = NAN;
    stats->entropy_kept_fraction = 1.0;
    stats->vespo_phi_seq_mean = NAN;
    stats->entropy_measured = stats->entropy_coef_next = NAN;
    return PT_OK;
}

/* The options added with the sampler correction and the loss family of
 * TRL 1.x (check_options' second half). */
static int check_options_1x(const pt_grpo_options *o)
{
    if (!(isfinite(o->temperature) && o->temperature >= 1e-6 && o->temperature <= FLT_MAX))
        return pt__err(PT_EINVAL, "pt_grpo_step: temperature %g must be finite and >= 1e-6 (the sampling "
                      "temperature; 1 when sampling greedily)", o->temperature);
    const int m = o->importance_sampling_correction;
    if (m < PT_GRPO_IS_CORRECTION_NONE || m > PT_GRPO_IS_SEQUENCE_MASK)
        return pt__err(PT_EINVAL, "pt_grpo_step: unknown importance_sampling_correction %d", m);
    const double cmax = o->importance_sampling_clip_max, cmin = o->importance_sampling_clip_min;
    if (!(cmax > 0) || !(cmin >= 0 && isfinite(cmin)) || !(cmin < cmax))
        return pt__err(PT_EINVAL, "pt_grpo_step: importance_sampling_clip_min %g and importance_sampling_clip_max %g "
                      "must satisfy 0 <= clip_min < clip_max (clip_max may be infinite)", cmin, cmax);
    if ((m == PT_GRPO_IS_TOKEN_TRUNCATE || m == PT_GRPO_IS_SEQUENCE_TRUNCATE) && cmin == 0 && isinf(cmax))
        return pt__err(PT_EINVAL, "pt_grpo_step: importance_sampling_correction %s needs "
                      "importance_sampling_clip_min > 0 or a finite importance_sampling_clip_max",
                      pt_grpo_is_correction_name(m));
    if (o->loss_type == PT_GRPO_LOSS_CISPO && !(o->epsilon_high > 0))
        return pt__err(PT_EINVAL, "pt_grpo_step: loss_type cispo needs epsilon_high > 0 (its cap on the ratio; "
                      "TRL recommends 5)");
    if (o->delta != 0 && !(isfinite(o->delta) && o->delta > 1.0 + o->epsilon_high))
        return pt__err(PT_EINVAL, "pt_grpo_step: delta %g must be 0 (off) or finite and > 1 + epsilon_high (%g)",
                      o->delta, 1.0 + o->epsilon_high);
    if (o->delta != 0 && (o->loss_type == PT_GRPO_LOSS_CISPO || o->loss_type == PT_GRPO_LOSS_VESPO))
        return pt__err(PT_EINVAL, "pt_grpo_step: delta (two-sided clipping) does not apply to loss_type %s",
                      pt_grpo_loss_type_name(o->loss_type));
    const double vk[4] = { o->vespo_k_pos, o->vespo_lambda_pos, o->vespo_k_neg, o->vespo_lambda_neg };
    static const char *const vn[4] = { "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg" };
    for (int i = 0; i < 4; i++)
        if (!(isfinite(vk[i]) && vk[i] >= 0 && vk[i] <= 1e6))
            return pt__err(PT_EINVAL, "pt_grpo_step: %s %g must be finite, >= 0 and <= 1e6", vn[i], vk[i]);
    if (!(isfinite(o->entropy_coef) && fabs(o->entropy_coef) <= 1e6))
        return pt__err(PT_EINVAL, "pt_grpo_step: entropy_coef %g must be finite (|entropy_coef| <= 1e6)",
                      o->entropy_coef);
    const double emin = o->entropy_coef_min, emax = o->entropy_coef_max;
    if (!(isfinite(emin) && isfinite(emax) && emin <= emax) ||
        !(isfinite(o->entropy_coef_delta) && o->entropy_coef_delta >= 0) || !isfinite(o->entropy_target) ||
        isnan(o->entropy_last))
        return pt__err(PT_EINVAL, "pt_grpo_step: the entropy control's entropy_coef_min %g <= entropy_coef_max %g, "
                      "entropy_coef_delta %g >= 0 and entropy_target %g must be finite, entropy_last %g not NaN",
                      emin, emax, o->entropy_coef_delta, o->entropy_target, o->entropy_last);
    if (!(o->top_entropy_quantile >= 0 && o->top_entropy_quantile <= 1))
        return pt__err(PT_EINVAL, "pt_grpo_step: top_entropy_quantile %g must be in [0, 1]", o->top_entropy_quantile);
    return PT_OK;
}

int pt__grpo_check_options(const pt_grpo_options *o)
{
    if (o->scale_rewards < PT_GRPO_SCALE_GROUP || o->scale_rewards > PT_GRPO_SCALE_RLOO)
        return pt__err(PT_EINVAL, "pt_grpo_step: unknown scale_rewards %d", o->scale_rewards);
    if (o->loss_type < PT_GRPO_LOSS_GRPO || o->loss_type > PT_GRPO_LOSS_VESPO)
        return pt__err(PT_EINVAL, "pt_grpo_step: unknown loss_type %d", o->loss_type);
    if (o->importance_sampling_level != PT_GRPO_IS_TOKEN && o->importance_sampling_level != PT_GRPO_IS_SEQUENCE)
        return pt__err(PT_EINVAL, "pt_grpo_step: unknown importance_sampling_level %d", o->importance_sampling_level);
    if (!(o->epsilon_low >= 0 && o->epsilon_low < 1) || !(o->epsilon_high >= 0 && isfinite(o->epsilon_high)))
        return pt__err(PT_EINVAL, "pt_grpo_step: epsilon_low %g must be in [0, 1) and epsilon_high %g finite and >= 0",
                      o->epsilon_low, o->epsilon_high);
    if (!(o->beta >= 0 && isfinite(o->beta)))
        return pt__err(PT_EINVAL, "pt_grpo_step: beta %g must be finite and >= 0", o->beta);
    if (o->max_completion_length < 0 || o->overlong_buffer < 0 || o->micro_batch < 0)
        return pt__err(PT_EINVAL, "pt_grpo_step: max_completion_length %d, overlong_buffer %d and micro_batch %d "
                      "must be >= 0", o->max_completion_length, o->overlong_buffer, o->micro_batch);
    if (o->overlong_buffer > 0 && o->overlong_buffer > o->max_completion_length)
        return pt__err(PT_EINVAL, "pt_grpo_step: overlong_buffer %d needs max_completion_length >= it (is %d)",
                      o->overlong_buffer, o->max_completion_length);
    if (o->loss_type == PT_GRPO_LOSS_DR_GRPO && o->max_completion_length <= 0)
        return pt__err(PT_EINVAL, "pt_grpo_step: loss_type dr_grpo needs max_completion_length > 0");
    if (!(o->global_tokens >= 0 && isfinite(o->global_tokens)) ||
        !(o->global_samples >= 0 && isfinite(o->global_samples)))
        return pt__err(PT_EINVAL, "pt_grpo_step: global_tokens %g and global_samples %g must be finite and >= 0",
                      o->global_tokens, o->global_samples);
    return check_options_1x(o);
}

/* Every sample's ids inside the model's vocabulary and its reference
 * logprobs present when beta > 0 (or to come from the LoRA base:
 * *refs_from_base); *maxlen receives the longest sample. */
int pt__grpo_check_samples(int *maxlen, bool *refs_from_base, const pt_rollout_buffer *buf, const pt_model *model,
                          const pt_grpo_options *o)
{
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    int st = pt_model_get_config(&cfg, model);
    if (st)
        return st;
    *maxlen = 0;
    *refs_from_base = false;
    for (int i = 0; i < buf->n; i++) {
        const grpo_sample *s = &buf->s[i];
        if (o->beta > 0 && !s->has_ref && pt_model_lora_enabled(model))
            *refs_from_base = true;
        else if (o->beta > 0 && !s->has_ref)
            return pt__err(PT_EINVAL, "pt_grpo_step: beta %g > 0 but sample %d has no ref_logprobs (set them, fill them "
                          "with pt_rollout_buffer_compute_logprobs, or train LoRA adapters: their base is the "
                          "reference)", o->beta, i);
        for (int t = 0; t < s->n_ids; t++)
            if (s->ids[t] >= cfg.vocab_size)
                return pt__err(PT_EINVAL, "pt_grpo_step: sample %d: token %d has id %d >= vocab_size %d", i, t,
                              (int)s->ids[t], cfg.vocab_size);
        /* log-probabilities the library computed: at the step's temperature */
        static const char *const kind[3] = { "old", "reference", "sampling" };
        for (int k = 0; k < 3; k++)
            if (s->lp_temp[k] != 0 && s->lp_temp[k] != (float)o->temperature)
                return pt__err(PT_EINVAL, "pt_grpo_step: sample %d's %s log-probabilities were computed at temperature "
                              "%g, the step's temperature is %g (compute them again at %g: "
                              "pt_rollout_buffer_compute_logprobs_with)", i, kind[k], (double)s->lp_temp[k],
                              o->temperature, o->temperature);
        if (o->loss_type == PT_GRPO_LOSS_VESPO && s->samp &&
            (o->importance_sampling_correction == PT_GRPO_IS_SEQUENCE_TRUNCATE ||
             o->importance_sampling_correction == PT_GRPO_IS_SEQUENCE_MASK))
            return pt__err(PT_EINVAL, "pt_grpo_step: loss_type vespo with sampling log-probabilities (sample %d) needs "
                          "importance_sampling_correction token_truncate, token_mask or none, not %s (TRL's rule: "
                          "vespo folds the per-token correction into its sequence weight)", i,
                          pt_grpo_is_correction_name(o->importance_sampling_correction));
        *maxlen = s->n_ids > *maxlen ? s->n_ids : *maxlen;
    }
    return PT_OK;
}

/* Sample s has a reward to learn from: one not NaN (or given advantages). */
static bool has_reward(const pt_rollout_buffer *buf, const grpo_sample *s)
{
    bool any = s->kind == GRPO_KIND_ADVANTAGES; /* its advantages are its signal */
    for (int k = 0; s->kind == GRPO_KIND_REWARD && k < buf->k && !any; k++)
        any = !isnan(s->rewards[k]);
    for (int k = 0; s->kind == GRPO_KIND_SEGMENTS && k < s->n_seg && !any; k++)
        any = !isnan(s->seg[k]);
    return any;
}

/* A buffer none of whose samples has a reward, one of which was never
 * scored at all, is a host that forgot to score: PT_ESTATE.  (Every
 * function declining every sample is TRL's all-None step: skipped.) */
int pt__grpo_check_scored(const pt_rollout_buffer *buf)
{
    bool never = false;
    for (int i = 0; i < buf->n; i++) {
        if (has_reward(buf, &buf->s[i]))
            return PT_OK;
        never |= !buf->s[i].scored;
    }
    if (!never)
        return PT_OK;
    return pt__err(PT_ESTATE, "pt_grpo_step: no sample has a reward: score the buffer first "
                  "(pt_rollout_buffer_score or pt_rollout_buffer_set_reward; all %d samples "
                  "have only NaN rewards, and some were never scored)", buf->n);
}

bool pt__grpo_declined(const pt_rollout_buffer *buf, const grpo_sample *s, const pt_grpo_options *o)
{
    /* the over-long penalty scores every sample with rewards (in TRL it is
     * a reward function, get_soft_overlong_punishment, that never declines) */
    if (s->kind == GRPO_KIND_REWARD && o->overlong_buffer > 0)
        return false;
    if (s->kind == GRPO_KIND_ADVANTAGES) {
        for (int k = 0; k < buf->k; k++)
            if (!isnan(s->rewards[k]))
                return false;
        return true;
    }
    return !has_reward(buf, s);
}

/* *unscored: the samples without a reward (all NaN: every function
 * declined them, or never scored among scored ones; with the over-long
 * penalty only samples with segment rewards can be).  When that is every
 * sample the step has nothing to learn from: the caller skips it
 * (PT_SKIP_NO_REWARDS). */
void pt__grpo_count_unscored(int64_t *unscored, const pt_rollout_buffer *buf, const pt_grpo_options *o)
{
    int64_t n = 0;
    for (int i = 0; i < buf->n; i++)
        n += buf->s[i].kind != GRPO_KIND_ADVANTAGES && pt__grpo_declined(buf, &buf->s[i], o);
    *unscored = n;
    if (n == buf->n)
        pt__log(PT_LOG_WARN, "pt_grpo_step: no sample has a reward (every reward function declined "
               "all %d): the step is skipped", buf->n);
    else if (n > 0)
        pt__log(PT_LOG_WARN, "pt_grpo_step: %lld of %d samples have no reward (every reward function, or "
               "every segment, declined them): they get advantage 0 and are left out of their group's mean "
               "and std and of the reward statistics (TRL)", (long long)n, buf->n);
}
