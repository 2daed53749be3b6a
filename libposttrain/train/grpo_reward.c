/* Rewards: scoring a buffer through a reward function, the combined reward
 * of a sample (weights, DAPO's over-long penalty) and the reward and length
 * statistics of a step. */
#include "core/core.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stdlib.h>

int pt__rollout_check_not_scoring(const pt_rollout_buffer *buf, const char *func)
{
    if (buf && buf->scoring)
        return pt__err(PT_ESTATE, "%s: the buffer is being scored (pt_rollout_buffer_score is calling its reward "
                      "function): a reward function may not change the buffer it scores; nothing was changed",
                      func);
    return PT_OK;
}

int pt_rollout_buffer_score(pt_rollout_buffer *buf, int k, pt_reward_fn fn, void *payload)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(fn);
    int guard = pt__rollout_check_not_scoring(buf, __func__);
    if (guard)
        return guard;
    if (k < 0 || k >= buf->k)
        return pt__err_arg(__func__, "reward function", "%d is not in 0 .. %d", k, buf->k - 1);
    if (buf->n == 0)
        return PT_OK;
    pt_reward_item *items = pt__malloc_array((size_t)buf->n, sizeof *items);
    float *r = pt__malloc_array((size_t)buf->n, sizeof *r);
    if (!items || !r) {
        free(items);
        free(r);
        return pt__err(PT_ENOMEM, "pt_rollout_buffer_score: out of memory");
    }
    for (int i = 0; i < buf->n; i++) {
        const grpo_sample *s = &buf->s[i];
        items[i] = (pt_reward_item){ .ids = s->ids, .n_ids = s->n_ids, .prompt_len = s->prompt_len,
                                     .group = s->group, .truncated = s->truncated };
        r[i] = NAN;
    }
    pt_reward_batch rb = { .size = sizeof rb, .n = buf->n, .items = items, .func_index = k,
                           .func_name = buf->names[k] };
    /* while the function runs, every call that would change the buffer
     * (add, clear, rewards, logprobs, a step) is PT_ESTATE, and a free waits */
    buf->scoring = true;
    int rc = fn(r, &rb, payload), st = PT_OK;
    buf->scoring = false;
    if (buf->free_pending) {
        free(items);
        free(r);
        pt_rollout_buffer_free(buf);
        return pt__err(PT_ESTATE, "pt_rollout_buffer_score: reward function %d freed the buffer it was scoring "
                      "(it is freed now; nothing was scored)", k);
    }
    if (rc != 0)
        st = pt__err(PT_ECALLBACK, "pt_rollout_buffer_score: reward function %d ('%s') returned %d", k,
                    buf->names[k], rc);
    for (int i = 0; i < buf->n && !st; i++)
        if (isinf(r[i]))
            st = pt__err(PT_ECALLBACK, "pt_rollout_buffer_score: reward function %d ('%s') gave sample %d an "
                        "infinite reward", k, buf->names[k], i);
    if (!st)
        for (int i = 0; i < buf->n; i++) {
            buf->s[i].rewards[k] = r[i];
            buf->s[i].scored = true;
        }
    free(items);
    free(r);
    return st;
}

double pt__grpo_combine_rewards(const float *r, const double *w, int k)
{
    double s = 0;
    for (int j = 0; j < k; j++)
        if (!isnan(r[j]))
            s += w[j] * (double)r[j];
    return s;
}

double pt__grpo_overlong_penalty(int len, int l_max, int l_c)
{
    if (l_c <= 0 || len <= l_max - l_c)
        return 0.0;
    if (len <= l_max)
        return (double)((l_max - l_c) - len) / (double)l_c;
    return -1.0;
}

/* Mean and std of reward function k over the samples it scored (TRL's
 * nanmean and nanstd: NaN mean when it scored none, NaN std below two). */
static void reward_func_stats(double *mean, double *sd, const pt_rollout_buffer *buf, int k)
{
    double *x = pt__malloc_array((size_t)buf->n, sizeof *x);
    *mean = *sd = NAN;
    if (!x)
        return; /* out of memory: the metric is NaN, nothing else depends on it */
    for (int i = 0; i < buf->n; i++)
        x[i] = buf->s[i].rewards[k];
    *sd = pt__grpo_nan_mean_std(mean, NULL, x, buf->n);
    free(x);
}

void pt__grpo_reward_stats(pt_grpo_stats *st, const pt_rollout_buffer *buf, const double *R)
{
    int n = buf->n;
    st->reward_std = pt__grpo_nan_mean_std(&st->reward, NULL, R, n);
    st->n_reward_funcs = buf->k;
    for (int k = 0; k < PT_GRPO_MAX_REWARD_FUNCS; k++) {
        st->reward_func_mean[k] = st->reward_func_std[k] = NAN;
        if (k < buf->k)
            reward_func_stats(&st->reward_func_mean[k], &st->reward_func_std[k], buf, k);
    }
    double lmin = INFINITY, lmax = 0, lsum = 0, trunc = 0;
    for (int i = 0; i < n; i++) {
        double l = buf->s[i].n_comp;
        lsum += l;
        lmin = l < lmin ? l : lmin;
        lmax = l > lmax ? l : lmax;
        trunc += buf->s[i].truncated;
    }
    st->completion_mean_length = lsum / n;
    st->completion_min_length = lmin;
    st->completion_max_length = lmax;
    st->clipped_ratio = trunc / n;
}
