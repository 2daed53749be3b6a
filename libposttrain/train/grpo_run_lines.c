/* A GRPO run's progress lines (posttrain/grpo_run.h): the line a host
 * shows for each round and for each held-out evaluation, as `posttrain
 * grpo` prints them on stderr. */
#include "posttrain/grpo_run.h"

#include "core/core.h"
#include "core/strbuf.h"

#include <stdio.h>
#include <string.h>

int pt_grpo_progress_line(char **line, const pt_grpo_metrics *metrics, int64_t total_steps, double elapsed_seconds)
{
    PT_CHECK_NULL(line);
    *line = NULL;
    PT_CHECK_NULL(metrics);
    pt_grpo_metrics m;
    int st = PT_STRUCT_READ(m, metrics, pt_grpo_metrics_init);
    if (st)
        return st;
    PT_CHECK_NULL(m.first);
    PT_CHECK_NULL(m.last);
    pt_grpo_stats f, l; /* a caller's older, smaller stats read as such */
    if ((st = PT_STRUCT_READ(f, m.first, pt_grpo_stats_init)) || (st = PT_STRUCT_READ(l, m.last, pt_grpo_stats_init)))
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
    PT_CHECK_NULL(rewards);
    pt_builtin_rewards rw;
    int st = PT_STRUCT_READ(rw, rewards, pt_builtin_rewards_init);
    if (st)
        return st;
    const bool acc = pt_builtin_rewards_have_accuracy(&rw);
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
