/* The step's advantages over the whole global batch: each sample's reward
 * (NaN when declined), per-sample or per-segment advantages by kind, the
 * zero-std groups and the reward statistics (grpo_advantage.c has the
 * formulas; grpo_step.c runs the step). */
#include "core/core.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The reward a sample reports (stats) and learns from: its combined reward
 * (with the over-long penalty), or the sum of its segment rewards (the
 * penalty on the last); a sample with given advantages reports its
 * combined reward.  NaN for a sample with none (every reward function or
 * segment declined: TRL's unscorable completion), left out of the means. */
static double reported_reward(const grpo_sample *s, const pt_rollout_buffer *all, const pt_grpo_options *o)
{
    if (pt__grpo_declined(all, s, o))
        return NAN;
    double pen = o->overlong_buffer > 0 && s->kind != GRPO_KIND_ADVANTAGES
                     ? pt__grpo_overlong_penalty(s->n_comp, o->max_completion_length, o->overlong_buffer)
                     : 0.0;
    if (s->kind != GRPO_KIND_SEGMENTS)
        return pt__grpo_combine_rewards(s->rewards, all->weights, all->k) + pen;
    double r = 0;
    for (int k = 0; k < s->n_seg; k++)
        if (!isnan(s->seg[k]))
            r += (double)s->seg[k] + (k == s->n_seg - 1 ? pen : 0.0);
    return r;
}

/* Every group's members take their advantages from one place. */
static int check_group_kinds(const pt_rollout_buffer *all)
{
    static const char *const what[3] = { "rewards", "segment_rewards", "advantages" };
    int *first = pt__malloc_array((size_t)all->n, sizeof *first);
    int64_t *ids = pt__malloc_array((size_t)all->n, sizeof *ids);
    int st = first && ids ? PT_OK : pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    int ng = 0;
    for (int i = 0; i < all->n && !st; i++) {
        int g = 0;
        while (g < ng && ids[g] != all->s[i].group)
            g++;
        if (g == ng) {
            ids[ng++] = all->s[i].group;
            first[g] = i;
        } else if (all->s[first[g]].kind != all->s[i].kind) {
            st = pt__err(PT_EINVAL, "pt_grpo_step: a group mixes samples with %s and samples with %s (global "
                        "samples %d and %d): every member of a group takes its advantages from the same place",
                        what[all->s[first[g]].kind], what[all->s[i].kind], first[g], i);
        }
    }
    free(first);
    free(ids);
    return st;
}

/* The samples of `all` of one kind, compressed: their indices into idx,
 * returns how many. */
static int of_kind(int *idx, const pt_rollout_buffer *all, int kind)
{
    int m = 0;
    for (int i = 0; i < all->n; i++)
        if (all->s[i].kind == kind)
            idx[m++] = i;
    return m;
}

/* Advantages of the samples with segment rewards (the over-long penalty on
 * each one's last segment); *ng and *nz: their groups, with zero std. */
static int segment_advantages(grpo_run *w, const int *idx, int m, int *ng, int *nz)
{
    const pt_rollout_buffer *all = w->all;
    int *off = pt__malloc_array((size_t)m + 1, sizeof *off), *nseg = pt__malloc_array((size_t)m + 1, sizeof *nseg);
    int64_t *grp = pt__malloc_array((size_t)m + 1, sizeof *grp);
    bool *zs = pt__malloc_array((size_t)m + 1, sizeof *zs);
    double *rew = NULL, *adv = NULL;
    size_t total = 0;
    for (int j = 0; j < m; j++)
        total += (size_t)all->s[idx[j]].n_seg;
    rew = pt__malloc_array(total + 1, sizeof *rew);
    adv = pt__malloc_array(total + 1, sizeof *adv);
    int st = off && nseg && grp && zs && rew && adv ? PT_OK : pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    if (!st) {
        int o = 0;
        for (int j = 0; j < m; j++) {
            const grpo_sample *s = &all->s[idx[j]];
            off[j] = o;
            nseg[j] = s->n_seg;
            grp[j] = s->group;
            for (int k = 0; k < s->n_seg; k++)
                rew[o + k] = s->seg[k];
            if (w->o->overlong_buffer > 0 && s->n_seg > 0)
                rew[o + s->n_seg - 1] +=
                    pt__grpo_overlong_penalty(s->n_comp, w->o->max_completion_length, w->o->overlong_buffer);
            o += s->n_seg;
        }
        *ng = pt__grpo_segment_advantages(adv, zs, nz, rew, off, nseg, grp, m, w->o->scale_rewards);
        if (*ng < 0)
            st = pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    }
    for (int j = 0; j < m && !st; j++) {
        const int i = idx[j];
        w->zs[i] = zs[j];
        memcpy(w->segadv + w->seg_off[i], adv + off[j], (size_t)nseg[j] * sizeof *adv);
    }
    free(off);
    free(nseg);
    free(grp);
    free(zs);
    free(rew);
    free(adv);
    return st;
}

/* Advantages of the samples with rewards; *ng and *nz as above, *tz the
 * samples TRL counts in frac_reward_zero_std. */
static int reward_advantages(grpo_run *w, const int *idx, int m, int *ng, int *nz, int *tz)
{
    double *R = pt__malloc_array((size_t)m + 1, sizeof *R), *adv = pt__malloc_array((size_t)m + 1, sizeof *adv);
    int64_t *grp = pt__malloc_array((size_t)m + 1, sizeof *grp);
    bool *zs = pt__malloc_array((size_t)m + 1, sizeof *zs);
    int st = R && adv && grp && zs ? PT_OK : pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    if (!st) {
        for (int j = 0; j < m; j++) {
            R[j] = w->R[idx[j]];
            grp[j] = w->all->s[idx[j]].group;
        }
        *ng = pt__grpo_advantages(adv, zs, nz, tz, R, grp, m, w->o->scale_rewards);
        if (*ng < 0)
            st = pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    }
    for (int j = 0; j < m && !st; j++) {
        w->adv[idx[j]] = adv[j];
        w->zs[idx[j]] = zs[j];
    }
    free(R);
    free(adv);
    free(grp);
    free(zs);
    return st;
}

/* Rewards (with the over-long penalty), advantages (per sample or per
 * segment) and the reward statistics of the whole global batch into
 * *stats. */
int pt__grpo_compute_advantages(grpo_run *w, pt_grpo_stats *stats)
{
    const pt_rollout_buffer *all = w->all;
    int st = check_group_kinds(all);
    if (st)
        return st;
    size_t nseg = 0;
    for (int i = 0; i < all->n; i++) {
        const grpo_sample *s = &all->s[i];
        w->R[i] = reported_reward(s, all, w->o);
        w->adv[i] = 0.0;
        w->zs[i] = false;
        w->seg_off[i] = (int)nseg;
        nseg += (size_t)s->n_seg;
    }
    if (nseg > (size_t)INT32_MAX)
        return pt__err(PT_ERANGE, "pt_grpo_step: %zu segments is too many", nseg);
    w->segadv = pt__malloc_array(nseg + 1, sizeof *w->segadv);
    int *idx = pt__malloc_array((size_t)all->n, sizeof *idx);
    if (!w->segadv || !idx) {
        free(idx);
        return pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    }
    int ng_r = 0, nz_r = 0, tz_r = 0, ng_s = 0, nz_s = 0, tz_s = 0;
    int m_r = of_kind(idx, all, GRPO_KIND_REWARD);
    if (m_r > 0)
        st = reward_advantages(w, idx, m_r, &ng_r, &nz_r, &tz_r);
    int m_s = of_kind(idx, all, GRPO_KIND_SEGMENTS);
    if (!st && m_s > 0)
        st = segment_advantages(w, idx, m_s, &ng_s, &nz_s);
    for (int j = 0; j < m_s && !st; j++)
        tz_s += w->zs[idx[j]]; /* per sample: its group has no spread */
    free(idx);
    if (st)
        return st;
    stats->groups = ng_r + ng_s;
    stats->frac_zero_std_groups = stats->groups > 0 ? (double)(nz_r + nz_s) / (double)stats->groups : 0.0;
    stats->frac_reward_zero_std = m_r + m_s > 0 ? (double)(tz_r + tz_s) / (double)(m_r + m_s) : 0.0;
    pt__grpo_reward_stats(stats, all, w->R);
    stats->groups_dropped = w->o->drop_zero_std_groups ? nz_r + nz_s : 0;
    stats->segments = (int64_t)nseg;
    return PT_OK;
}
