/* Episodes into a rollout buffer (pt_rollout_buffer_add_episodes): each
 * episode that ended (not by an error or a stopped run) one sample, with
 * its loss mask, the sampler's log-probabilities and its rewards; a group
 * with per-turn rewards trains on segment rewards (docs/episodes.md). */
#include "train/episode_internal.h"
#include "train/grpo_internal.h"

#include <math.h>

/* True when the environment gave episode e a reward for at least one turn. */
static bool has_turn_rewards(const ep_rec *e, int k)
{
    for (int i = 0; i < e->n_turns * k; i++)
        if (!isnan(e->t_rew[i]))
            return true;
    return false;
}

/* The mask runs (segments) of e's completion, and into seg (one per run) the
 * combined turn rewards of the turns that sampled into it (NaN where no turn
 * of the run has a reward).  Returns the number of runs. */
static int segment_rewards(float *seg, const ep_rec *e, const double *w, int k)
{
    const uint8_t *m = e->mask + e->prompt_len;
    int c = e->n - e->prompt_len, n_seg = 0;
    for (int j = 0; j < c; j++)
        if (m[j] && (j == 0 || !m[j - 1]))
            seg[n_seg++] = NAN;
    for (int t = 0; t < e->n_turns; t++) {
        if (e->t_len[t] <= 0)
            continue;
        int pos = e->t_start[t] - e->prompt_len, idx = -1;
        for (int j = 0; j <= pos && j < c; j++)
            if (m[j] && (j == 0 || !m[j - 1]))
                idx++;
        const float *r = e->t_rew + (size_t)t * (size_t)k;
        bool any = false;
        for (int f = 0; f < k; f++)
            any |= !isnan(r[f]);
        if (idx < 0 || !any)
            continue;
        double v = pt__grpo_combine_rewards(r, w, k);
        seg[idx] = isnan(seg[idx]) ? (float)v : seg[idx] + (float)v;
    }
    return n_seg;
}

int pt_rollout_buffer_add_episodes(int *n_added, pt_rollout_buffer *buf,
                                   const pt_episode_results *res)
{
    if (n_added)
        *n_added = 0;
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(res);
    int guard = pt__rollout_check_not_scoring(buf, __func__);
    if (guard)
        return guard;
    if (res->k != buf->k)
        return pt__err(PT_EINVAL, "pt_rollout_buffer_add_episodes: the episodes carry %d "
                      "reward%s (n_reward_funcs) but buf has %d reward function%s", res->k,
                      res->k == 1 ? "" : "s", buf->k, buf->k == 1 ? "" : "s");
    int m = 0;
    size_t n_seg_total = 0;
    for (int i = 0; i < res->n; i++)
        if (res->e[i].end != PT_EPISODE_ERROR && res->e[i].end != PT_EPISODE_STOPPED) {
            m++;
            n_seg_total += (size_t)res->e[i].n_turns + 1;
        }
    if (m == 0)
        return PT_OK;
    pt_rollout_sample *s = pt__malloc_array((size_t)m, sizeof *s);
    float *seg = pt__malloc_array(n_seg_total, sizeof *seg);
    if (!s || !seg) {
        pt_free(s);
        pt_free(seg);
        return PT_ENOMEM;
    }
    int j = 0;
    float *sp = seg;
    for (int i = 0; i < res->n; i++) {
        const ep_rec *e = &res->e[i];
        if (e->end == PT_EPISODE_ERROR || e->end == PT_EPISODE_STOPPED)
            continue;
        /* A group one of whose episodes was rewarded per turn trains on
         * segment rewards, every member of it (docs/episodes.md). */
        bool per_turn = false;
        for (int q = 0; q < res->n && !per_turn; q++)
            per_turn = res->e[q].group == e->group && res->e[q].end != PT_EPISODE_ERROR &&
                       res->e[q].end != PT_EPISODE_STOPPED && has_turn_rewards(&res->e[q], res->k);
        pt_rollout_sample_init(&s[j]);
        s[j].ids = e->ids;
        s[j].n_ids = e->n;
        s[j].prompt_len = e->prompt_len;
        s[j].loss_mask = e->mask + e->prompt_len;
        s[j].sampling_logprobs = e->lp + e->prompt_len;
        s[j].group = e->group;
        s[j].rewards = e->rewards;
        s[j].truncated = e->truncated;
        if (per_turn) {
            s[j].n_segments = segment_rewards(sp, e, buf->weights, res->k);
            s[j].segment_rewards = sp;
            sp += s[j].n_segments;
        }
        j++;
    }
    int st = pt_rollout_buffer_add_group(buf, s, m);
    pt_free(s);
    pt_free(seg);
    if (st)
        return pt__err_prefix(st, "pt_rollout_buffer_add_episodes");
    if (n_added)
        *n_added = m;
    return PT_OK;
}
