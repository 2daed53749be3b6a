/* A GRPO run's round (posttrain/grpo_run.h): generated completions into the
 * rollout buffer, and the round's metrics row. */
#include "posttrain/grpo_run.h"

#include "core/core.h"
#include "core/strbuf.h"
#include "posttrain/generate.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- generated completions ------------------------------------------------- */

int pt_rollout_generated_init(pt_rollout_generated *g)
{
    PT_STRUCT_INIT_ZERO(g);
    g->group_size = 1;
    return PT_OK;
}

/* The counts of g checked; *total: the ids of every sample. */
static int check_generated(size_t *total, const pt_rollout_generated *g)
{
    PT_CHECK_ARG(g->n >= 1, g->n, "%d must be >= 1", g->n);
    PT_CHECK_ARG(g->stride >= 1, g->stride, "%d must be >= 1", g->stride);
    PT_CHECK_ARG(g->group_size >= 1, g->group_size, "%d must be >= 1", g->group_size);
    PT_CHECK_ARG(g->first_group >= 0, g->first_group, "%lld must be >= 0", (long long)g->first_group);
    PT_CHECK_NULL(g->prompts);
    PT_CHECK_NULL(g->prompt_lens);
    PT_CHECK_NULL(g->tokens);
    PT_CHECK_NULL(g->n_tokens);
    size_t t = 0;
    for (int i = 0; i < g->n; i++) {
        PT_CHECK_ARG(g->prompt_lens[i] >= 1, g->prompt_lens, "completion %d: prompt length %d must be >= 1", i,
                     g->prompt_lens[i]);
        PT_CHECK_ARG(g->n_tokens[i] >= 1 && g->n_tokens[i] <= g->stride, g->n_tokens,
                     "completion %d: %d tokens, not in 1 .. stride %d", i, g->n_tokens[i], g->stride);
        PT_CHECK_ARG(g->prompt_lens[i] <= INT32_MAX - g->n_tokens[i], g->prompt_lens, "completion %d is too long",
                     i);
        t += (size_t)g->prompt_lens[i] + (size_t)g->n_tokens[i];
    }
    *total = t;
    return PT_OK;
}

int pt_rollout_buffer_add_generated(pt_rollout_buffer *buf, const pt_rollout_generated *gen)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(gen);
    pt_rollout_generated g;
    size_t total = 0;
    int st = PT_STRUCT_READ(g, gen, pt_rollout_generated_init);
    if (!st)
        st = check_generated(&total, &g);
    if (!st)
        st = pt__rollout_check_not_scoring(buf, __func__);
    if (st)
        return st;
    int32_t *ids = pt__malloc_array(total, sizeof *ids);
    pt_rollout_sample *s = pt__malloc_array((size_t)g.n, sizeof *s);
    if (!ids || !s) {
        free(ids);
        free(s);
        return pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    }
    const int32_t *prompt = g.prompts;
    int32_t *at = ids;
    for (int i = 0; i < g.n; i++) {
        const int pl = g.prompt_lens[i], nt = g.n_tokens[i];
        const size_t off = (size_t)i * (size_t)g.stride;
        memcpy(at, prompt, (size_t)pl * sizeof *at);
        memcpy(at + pl, g.tokens + off, (size_t)nt * sizeof *at);
        prompt += pl;
        pt_rollout_sample_init(&s[i]);
        s[i].ids = at;
        s[i].n_ids = pl + nt;
        s[i].prompt_len = pl;
        s[i].sampling_logprobs = g.logprobs ? g.logprobs + off : NULL;
        s[i].group = g.first_group + i / g.group_size;
        s[i].truncated = g.finish && g.finish[i] == PT_FINISH_LENGTH;
        at += pl + nt;
    }
    st = pt__rollout_add_samples(buf, s, g.n, __func__);
    free(ids);
    free(s);
    return st;
}

/* ---- the metrics row --------------------------------------------------------- */

int pt_grpo_metrics_init(pt_grpo_metrics *m)
{
    PT_STRUCT_INIT_ZERO(m);
    return PT_OK;
}

/* The keys of the options that are on, after the clipping ratios. */
static void optional_keys(pt_strbuf *b, const pt_grpo_options *o, const pt_grpo_stats *first,
                          const pt_grpo_stats *gs)
{
    if (o->loss_type == PT_GRPO_LOSS_CISPO)
        pt__json_num(b, "cispo_clip_ratio", gs->cispo_clip_ratio);
    if (o->use_adaptive_entropy || o->entropy_coef != 0) /* after the update, as TRL */
        pt__json_num(b, "entropy_coef", gs->entropy_coef_next);
    if (o->loss_type == PT_GRPO_LOSS_VESPO)
        pt__json_num(b, "vespo/phi_seq_mean", gs->vespo_phi_seq_mean);
    /* the sampler against the trainer, at the first iteration (TRL's names) */
    pt__json_num(b, "sampling/sampling_logp_difference/mean", first->sampling_logp_difference_mean);
    pt__json_num(b, "sampling/sampling_logp_difference/max", first->sampling_logp_difference_max);
    if (o->importance_sampling_correction != PT_GRPO_IS_CORRECTION_NONE) {
        pt__json_num(b, "sampling/importance_sampling_ratio/min", first->importance_sampling_ratio_min);
        pt__json_num(b, "sampling/importance_sampling_ratio/mean", first->importance_sampling_ratio_mean);
        pt__json_num(b, "sampling/importance_sampling_ratio/max", first->importance_sampling_ratio_max);
        pt__json_num(b, "sampling/importance_sampling_corrected_fraction",
                     first->importance_sampling_corrected_fraction);
    }
    if (o->top_entropy_quantile < 1) {
        pt__json_num(b, "entropy_threshold", gs->entropy_threshold);
        pt__json_num(b, "entropy_kept_fraction", gs->entropy_kept_fraction);
    }
}

static void episode_keys(pt_strbuf *b, const pt_grpo_episode_totals *e)
{
    pt__json_num(b, "episodes", e->episodes);
    pt__json_num(b, "episodes/errors", e->errors);
    pt__json_num(b, "episodes/done", e->done);
    pt__json_num(b, "episodes/truncated", e->truncated);
    pt__json_num(b, "episodes/turns_mean", e->turns / e->episodes);
    pt__json_num(b, "episodes/appended_tokens", e->appended_tokens);
    pt__json_num(b, "episodes/env_calls", e->env_calls);
    pt__json_num(b, "env_seconds", e->env_seconds);
}

int pt_grpo_metrics_row(char **json, const pt_grpo_metrics *metrics)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(metrics);
    pt_grpo_metrics m;
    int st = PT_STRUCT_READ(m, metrics, pt_grpo_metrics_init);
    if (st)
        return st;
    PT_CHECK_NULL(m.first);
    PT_CHECK_NULL(m.last);
    PT_CHECK_NULL(m.grpo);
    PT_CHECK_ARG(m.n_reward_funcs >= 0 && m.n_reward_funcs <= PT_GRPO_MAX_REWARD_FUNCS, m.n_reward_funcs,
                 "%d is not in 0 .. %d", m.n_reward_funcs, PT_GRPO_MAX_REWARD_FUNCS);
    PT_CHECK_ARG(m.n_reward_funcs == 0 || m.reward_names, m.reward_names, "is NULL");
    for (int k = 0; k < m.n_reward_funcs; k++)
        PT_CHECK_ARG(m.reward_names[k] && strlen(m.reward_names[k]) < 48, m.reward_names,
                     "name %d is NULL or longer than 47 bytes", k);
    pt_grpo_options o;
    pt_grpo_stats f, l; /* a caller's older, smaller stats read as such */
    if ((st = PT_STRUCT_READ(o, m.grpo, pt_grpo_options_init)) ||
        (st = PT_STRUCT_READ(f, m.first, pt_grpo_stats_init)) || (st = PT_STRUCT_READ(l, m.last, pt_grpo_stats_init)))
        return st;
    const pt_grpo_stats *first = &f, *gs = &l;
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_printf(&b, "{\"step\": %lld", (long long)m.step);
    pt__json_num(&b, "reward", first->reward);
    pt__json_num(&b, "reward_std", first->reward_std);
    for (int k = 0; k < m.n_reward_funcs; k++) {
        char key[64];
        snprintf(key, sizeof key, "rewards/%s/mean", m.reward_names[k]);
        pt__json_num(&b, key, first->reward_func_mean[k]);
        snprintf(key, sizeof key, "rewards/%s/std", m.reward_names[k]);
        pt__json_num(&b, key, first->reward_func_std[k]);
    }
    pt__json_num(&b, "frac_reward_zero_std", first->frac_reward_zero_std);
    pt__json_num(&b, "frac_zero_std_groups", first->frac_zero_std_groups); /* ours: per group */
    pt__json_num(&b, "loss", m.loss);
    pt__json_num(&b, "kl", gs->kl);
    pt__json_num(&b, "entropy", gs->entropy);
    pt__json_num(&b, "clip_ratio/region_mean", gs->clip_ratio_region);
    pt__json_num(&b, "clip_ratio/low_mean", gs->clip_ratio_low);
    pt__json_num(&b, "clip_ratio/high_mean", gs->clip_ratio_high);
    optional_keys(&b, &o, first, gs);
    pt__json_num(&b, "completions/mean_length", first->completion_mean_length);
    pt__json_num(&b, "completions/min_length", first->completion_min_length);
    pt__json_num(&b, "completions/max_length", first->completion_max_length);
    pt__json_num(&b, "completions/clipped_ratio", first->clipped_ratio);
    pt__json_num(&b, "grad_norm", gs->grad_norm);
    pt__json_num(&b, "lr", gs->lr);
    pt__json_num(&b, "tokens", gs->tokens);
    pt__json_num(&b, "gen_tokens_per_s", m.gen_tokens_per_s);
    pt__json_num(&b, "train_tokens_per_s", m.train_tokens_per_s);
    pt__json_num(&b, "step_seconds", m.step_seconds);
    if (m.comm)
        pt__json_num(&b, "comm_seconds", m.comm_seconds);
    if (m.episodes)
        episode_keys(&b, m.episodes);
    pt__strbuf_printf(&b, ", \"skipped\": %s}", gs->skipped ? "true" : "false");
    *json = pt__strbuf_detach(&b, NULL);
    return *json ? PT_OK : pt__err(PT_ENOMEM, "%s: out of memory", __func__);
}
