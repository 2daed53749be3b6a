/* posttrain grpo's metrics row of a step (cmd_grpo.c writes it after the
 * step's updates): TRL's names, null for a value that is not finite. */
#include "cmd_grpo.h"

#include <math.h>
#include <stdio.h>

static void json_num(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ", \"%s\": %.6g", key, v);
    else
        fprintf(f, ", \"%s\": null", key);
}

void grpo_write_metrics(FILE *f, const grpo_args *a, int64_t step, const step_report *rep, bool dist)
{
    const grpo_rewards *rw = &a->rewards;
    const pt_grpo_stats *first = &rep->first, *gs = &rep->last;
    fprintf(f, "{\"step\": %lld", (long long)step);
    json_num(f, "reward", first->reward);
    json_num(f, "reward_std", first->reward_std);
    for (int k = 0; k < rw->n; k++) {
        char key[64];
        snprintf(key, sizeof key, "rewards/%s/mean", rw->name[k]);
        json_num(f, key, first->reward_func_mean[k]);
        snprintf(key, sizeof key, "rewards/%s/std", rw->name[k]);
        json_num(f, key, first->reward_func_std[k]);
    }
    json_num(f, "frac_reward_zero_std", first->frac_reward_zero_std);
    json_num(f, "frac_zero_std_groups", first->frac_zero_std_groups); /* ours: per group */
    json_num(f, "loss", rep->loss);
    json_num(f, "kl", gs->kl);
    json_num(f, "entropy", gs->entropy);
    json_num(f, "clip_ratio/region_mean", gs->clip_ratio_region);
    json_num(f, "clip_ratio/low_mean", gs->clip_ratio_low);
    json_num(f, "clip_ratio/high_mean", gs->clip_ratio_high);
    if (a->grpo.loss_type == PT_GRPO_LOSS_CISPO)
        json_num(f, "cispo_clip_ratio", gs->cispo_clip_ratio);
    if (a->grpo.use_adaptive_entropy || a->grpo.entropy_coef != 0) /* after the update, as TRL */
        json_num(f, "entropy_coef", gs->entropy_coef_next);
    if (a->grpo.loss_type == PT_GRPO_LOSS_VESPO)
        json_num(f, "vespo/phi_seq_mean", gs->vespo_phi_seq_mean);
    /* the sampler against the trainer, at the first iteration (TRL's names) */
    json_num(f, "sampling/sampling_logp_difference/mean", first->sampling_logp_difference_mean);
    json_num(f, "sampling/sampling_logp_difference/max", first->sampling_logp_difference_max);
    if (a->grpo.importance_sampling_correction != PT_GRPO_IS_CORRECTION_NONE) {
        json_num(f, "sampling/importance_sampling_ratio/min", first->importance_sampling_ratio_min);
        json_num(f, "sampling/importance_sampling_ratio/mean", first->importance_sampling_ratio_mean);
        json_num(f, "sampling/importance_sampling_ratio/max", first->importance_sampling_ratio_max);
        json_num(f, "sampling/importance_sampling_corrected_fraction", first->importance_sampling_corrected_fraction);
    }
    if (a->grpo.top_entropy_quantile < 1) {
        json_num(f, "entropy_threshold", gs->entropy_threshold);
        json_num(f, "entropy_kept_fraction", gs->entropy_kept_fraction);
    }
    json_num(f, "completions/mean_length", first->completion_mean_length);
    json_num(f, "completions/min_length", first->completion_min_length);
    json_num(f, "completions/max_length", first->completion_max_length);
    json_num(f, "completions/clipped_ratio", first->clipped_ratio);
    json_num(f, "grad_norm", gs->grad_norm);
    json_num(f, "lr", gs->lr);
    json_num(f, "tokens", gs->tokens);
    json_num(f, "gen_tokens_per_s", rep->gen_tps);
    json_num(f, "train_tokens_per_s", rep->train_tps);
    json_num(f, "step_seconds", rep->step_s);
    if (dist)
        json_num(f, "comm_seconds", rep->comm_s);
    if (a->env) {
        json_num(f, "episodes", rep->ep[EP_EPISODES]);
        json_num(f, "episodes/errors", rep->ep[EP_ERRORS]);
        json_num(f, "episodes/done", rep->ep[EP_DONE]);
        json_num(f, "episodes/truncated", rep->ep[EP_TRUNCATED]);
        json_num(f, "episodes/turns_mean", rep->ep[EP_TURNS] / rep->ep[EP_EPISODES]);
        json_num(f, "episodes/appended_tokens", rep->ep[EP_APPENDED]);
        json_num(f, "episodes/env_calls", rep->ep[EP_CALLS]);
        json_num(f, "env_seconds", rep->ep[EP_ENV_SECONDS]);
    }
    fprintf(f, ", \"skipped\": %s}\n", gs->skipped ? "true" : "false");
}
