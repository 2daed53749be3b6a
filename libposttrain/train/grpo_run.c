/* A GRPO run's round (posttrain/grpo_run.h): generated completions into the
 * rollout buffer, the round's metrics row, and the progress lines a host
 * shows for a round and a held-out evaluation (as `posttrain grpo` prints
 * them on stderr). */
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

PT_ZERO_INIT(pt_grpo_metrics_init, pt_grpo_metrics, m)

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

/* The start of a function of metrics that gives a string: its out-parameter
 * `out` (named out_name) checked and cleared, then the caller's metrics and
 * their first and last stats read (a caller's older, smaller structs read
 * as such); messages naming func. */
static int read_metrics(const char *func, const char *out_name, char **out, pt_grpo_metrics *m, pt_grpo_stats *f,
                        pt_grpo_stats *l, const pt_grpo_metrics *metrics)
{
    if (!out)
        return pt__err(PT_EINVAL, "%s: %s is NULL", func, out_name);
    *out = NULL;
    if (!metrics)
        return pt__err(PT_EINVAL, "%s: metrics is NULL", func);
    pt_grpo_metrics_init(m);
    int st = pt__struct_read(m, sizeof *m, metrics, func, "pt_grpo_metrics_init");
    if (st)
        return st;
    if (!m->first || !m->last)
        return pt__err(PT_EINVAL, "%s: %s is NULL", func, m->first ? "m.last" : "m.first");
    pt_grpo_stats_init(f);
    pt_grpo_stats_init(l);
    if ((st = pt__struct_read(f, sizeof *f, m->first, func, "pt_grpo_stats_init")))
        return st;
    return pt__struct_read(l, sizeof *l, m->last, func, "pt_grpo_stats_init");
}

int pt_grpo_metrics_row(char **json, const pt_grpo_metrics *metrics)
{
    pt_grpo_metrics m;
    pt_grpo_stats f, l;
    int st = read_metrics(__func__, "json", json, &m, &f, &l, metrics);
    if (st)
        return st;
    PT_CHECK_NULL(m.grpo);
    PT_CHECK_ARG(m.n_reward_funcs >= 0 && m.n_reward_funcs <= PT_GRPO_MAX_REWARD_FUNCS, m.n_reward_funcs,
                 "%d is not in 0 .. %d", m.n_reward_funcs, PT_GRPO_MAX_REWARD_FUNCS);
    PT_CHECK_ARG(m.n_reward_funcs == 0 || m.reward_names, m.reward_names, "is NULL");
    for (int k = 0; k < m.n_reward_funcs; k++)
        PT_CHECK_ARG(m.reward_names[k] && strlen(m.reward_names[k]) < 48, m.reward_names,
                     "name %d is NULL or longer than 47 bytes", k);
    pt_grpo_options o;
    if ((st = PT_STRUCT_READ(o, m.grpo, pt_grpo_options_init)))
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

/* ---- the progress lines ---------------------------------------------------- */

int pt_grpo_progress_line(char **line, const pt_grpo_metrics *metrics, int64_t total_steps, double elapsed_seconds)
{
    pt_grpo_metrics m;
    pt_grpo_stats f, l;
    int st = read_metrics(__func__, "line", line, &m, &f, &l, metrics);
    if (st)
        return st;
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_printf(&b, "step %lld/%lld reward %.4f std %.4f zero_std %.2f clip %.4f kl %.4g len %.1f loss %.4g "
                      "grad_norm %.3g lr %.3g gen %.0f tok/s train %.0f tok/s %.1fs", (long long)m.step,
                      (long long)total_steps, f.reward, f.reward_std, f.frac_reward_zero_std, l.clip_ratio_region,
                      l.kl, f.completion_mean_length, m.loss, l.grad_norm, l.lr, m.gen_tokens_per_s,
                      m.train_tokens_per_s, elapsed_seconds);
    const pt_grpo_episode_totals *e = m.episodes;
    if (e)
        pt__strbuf_printf(&b, " episodes %.0f errors %.0f turns %.2f", e->episodes, e->errors,
                          e->turns / e->episodes);
    *line = pt__strbuf_detach(&b, NULL);
    return *line ? PT_OK : pt__err(PT_ENOMEM, "%s: out of memory", __func__);
}

int pt_grpo_eval_line(char **line, const pt_grpo_eval_sums *sums, const pt_builtin_rewards *rewards, int samples,
                      double temperature, int64_t step)
{
    PT_CHECK_NULL(line);
    *line = NULL;
    PT_CHECK_NULL(sums);
    const bool acc = pt_builtin_rewards_have_accuracy(rewards); /* false for NULL */
    const double *n = sums->completions;
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_printf(&b, "eval step %lld: %.0f prompts greedy reward %.4f", (long long)step, n[PT_GRPO_EVAL_GREEDY],
                      sums->reward[PT_GRPO_EVAL_GREEDY] / n[PT_GRPO_EVAL_GREEDY]);
    if (acc)
        pt__strbuf_printf(&b, " accuracy %.4f", sums->correct[PT_GRPO_EVAL_GREEDY] / n[PT_GRPO_EVAL_GREEDY]);
    if (n[PT_GRPO_EVAL_SAMPLED] > 0) {
        pt__strbuf_printf(&b, ", sampled (T=%g, %d each) reward %.4f", temperature, samples,
                          sums->reward[PT_GRPO_EVAL_SAMPLED] / n[PT_GRPO_EVAL_SAMPLED]);
        if (acc)
            pt__strbuf_printf(&b, " accuracy %.4f", sums->correct[PT_GRPO_EVAL_SAMPLED] / n[PT_GRPO_EVAL_SAMPLED]);
    }
    *line = pt__strbuf_detach(&b, NULL);
    return *line ? PT_OK : pt__err(PT_ENOMEM, "%s: out of memory", __func__);
}
