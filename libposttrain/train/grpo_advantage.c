/* Advantages: each sample's combined reward against its group's (TRL's
 * scale_rewards "group", "batch", "none", and RLOO's leave-one-out mean),
 * or each segment's reward against the segment-k rewards of its group. */
#include "core/core.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stdlib.h>

double pt__grpo_std(double sumsq_dev, int n)
{
    return n > 1 ? sqrt(sumsq_dev / (double)(n - 1)) : 0.0;
}

/* gi[i] the group of sample i, groups numbered in order of first appearance
 * of their id (ids receives the ids of the groups); returns the number of
 * groups. */
static int index_groups(int *gi, int64_t *ids, const int64_t *group, int n)
{
    int ng = 0;
    for (int i = 0; i < n; i++) {
        int g = 0;
        while (g < ng && ids[g] != group[i])
            g++;
        if (g == ng)
            ids[ng++] = group[i];
        gi[i] = g;
    }
    return ng;
}

/* Per-group sums over the samples with a reward (R not NaN: a sample every
 * reward function declined has NaN): gi[i] the group of sample i (as
 * index_groups), size (members), cnt (members with a reward) and sum per
 * group; returns the number of groups. */
static int assign_groups(int *gi, int64_t *ids, double *sum, int *cnt, int *size, const double *R,
                         const int64_t *group, int n)
{
    int ng = index_groups(gi, ids, group, n);
    for (int i = 0; i < n; i++) {
        int g = gi[i];
        size[g]++;
        if (!isnan(R[i])) {
            sum[g] += R[i];
            cnt[g]++;
        }
    }
    return ng;
}

double pt__grpo_nan_mean_std(double *mean, int *count, const double *x, int n)
{
    double m = 0, ss = 0;
    int c = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i])) {
            m += x[i];
            c++;
        }
    m = c > 0 ? m / c : NAN;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]))
            ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    if (count)
        *count = c;
    return c > 1 ? sqrt(ss / (double)(c - 1)) : NAN;
}

/* The advantage of reward r in a group with the given mean, std, sum and count. */
static double advantage(double r, double mean, double sd, double sum, int cnt, double bstd, int scale)
{
    if (scale == PT_GRPO_SCALE_GROUP)
        return (r - mean) / (sd + 1e-4);
    if (scale == PT_GRPO_SCALE_BATCH)
        return (r - mean) / (bstd + 1e-4);
    if (scale == PT_GRPO_SCALE_NONE)
        return r - mean;
    return r - (sum - r) / (cnt - 1);
}

int pt__grpo_advantages(double *adv, bool *zero_std, int *n_zero, int *n_trl_zero, const double *R,
                       const int64_t *group, int n, int scale)
{
    int *gi = pt__malloc_array((size_t)n, sizeof *gi), *cnt = pt__calloc((size_t)n, sizeof *cnt),
        *size = pt__calloc((size_t)n, sizeof *size);
    int64_t *ids = pt__malloc_array((size_t)n, sizeof *ids);
    double *mean = pt__calloc((size_t)n, sizeof *mean), *sd = pt__calloc((size_t)n, sizeof *sd),
           *sum = pt__calloc((size_t)n, sizeof *sum);
    int ng = PT_ENOMEM;
    if (gi && ids && mean && sd && sum && cnt && size) {
        ng = assign_groups(gi, ids, sum, cnt, size, R, group, n);
        for (int g = 0; g < ng; g++)
            mean[g] = cnt[g] > 0 ? sum[g] / cnt[g] : 0.0;
        for (int i = 0; i < n; i++)
            if (!isnan(R[i])) {
                double d = R[i] - mean[gi[i]];
                sd[gi[i]] += d * d;
            }
        /* ours: a group with fewer than two rewards, or all equal, has
         * nothing to learn */
        int nz = 0;
        for (int g = 0; g < ng; g++) {
            sd[g] = pt__grpo_std(sd[g], cnt[g]);
            if (cnt[g] < 2 || sd[g] <= 1e-8)
                nz++;
        }
        /* TRL's is_std_zero, per sample: torch.isclose(std, 0) of the std
         * the scaling uses, nanstd (NaN, so not zero, below two rewards)
         * of the group's or the batch's rewards; 0 with one value in all
         * (TRL's num_generations or batch of 1) */
        int bcnt;
        double bmean, bstd = pt__grpo_nan_mean_std(&bmean, &bcnt, R, n);
        int tz = 0;
        for (int i = 0; i < n; i++) {
            int g = gi[i];
            zero_std[i] = cnt[g] < 2 || sd[g] <= 1e-8;
            if (scale == PT_GRPO_SCALE_BATCH)
                tz += n == 1 || (bcnt > 1 && bstd <= 1e-8);
            else
                tz += size[g] == 1 || (cnt[g] > 1 && sd[g] <= 1e-8);
            /* a declined sample, and every member of a group with nothing
             * to learn: 0 (TRL: NaN, then nan_to_num) */
            adv[i] = zero_std[i] || isnan(R[i]) ? 0.0
                                                : advantage(R[i], mean[g], sd[g], sum[g], cnt[g], bstd, scale);
        }
        *n_zero = nz;
        *n_trl_zero = tz;
    }
    free(gi);
    free(ids);
    free(mean);
    free(sd);
    free(sum);
    free(cnt);
    free(size);
    return ng;
}

/* Group index of each of n samples by first appearance of its id; returns
 * the number of groups, or -1 out of memory. */
static int group_index(int *gi, const int64_t *group, int n)
{
    int64_t *ids = pt__malloc_array((size_t)(n > 0 ? n : 1), sizeof *ids);
    if (!ids)
        return -1;
    int ng = index_groups(gi, ids, group, n);
    free(ids);
    return ng;
}

int pt__grpo_segment_advantages(double *adv, bool *zero_std, int *n_zero, const double *rew, const int *off,
                               const int *nseg, const int64_t *group, int n, int scale)
{
    int K = 0;
    for (int i = 0; i < n; i++)
        K = nseg[i] > K ? nseg[i] : K;
    K = K > 0 ? K : 1;
    int *gi = pt__malloc_array((size_t)(n > 0 ? n : 1), sizeof *gi);
    int ng = gi ? group_index(gi, group, n) : -1;
    size_t cells = (size_t)(ng > 0 ? ng : 1) * (size_t)K;
    double *sum = pt__calloc(cells, sizeof *sum), *ss = pt__calloc(cells, sizeof *ss);
    double *bsum = pt__calloc((size_t)K, sizeof *bsum), *bss = pt__calloc((size_t)K, sizeof *bss);
    int *cnt = pt__calloc(cells, sizeof *cnt), *bcnt = pt__calloc((size_t)K, sizeof *bcnt);
    bool *spread = pt__calloc((size_t)(ng > 0 ? ng : 1), sizeof *spread);
    if (ng < 0 || !sum || !ss || !bsum || !bss || !cnt || !bcnt || !spread) {
        ng = PT_ENOMEM;
        goto done;
    }
    /* sums, then squared deviations, per (group, segment index) and per index */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nseg[i]; k++) {
                double r = rew[off[i] + k];
                if (isnan(r))
                    continue;
                size_t c = (size_t)gi[i] * K + k;
                if (pass == 0) {
                    sum[c] += r;
                    cnt[c]++;
                    bsum[k] += r;
                    bcnt[k]++;
                } else {
                    double m = sum[c] / cnt[c], bm = bsum[k] / bcnt[k];
                    ss[c] += (r - m) * (r - m);
                    bss[k] += (r - bm) * (r - bm);
                }
            }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nseg[i]; k++) {
            double r = rew[off[i] + k];
            size_t c = (size_t)gi[i] * K + k;
            double sd = isnan(r) ? 0 : pt__grpo_std(ss[c], cnt[c]);
            if (isnan(r) || sd <= 1e-8) {
                adv[off[i] + k] = 0.0;
                continue;
            }
            spread[gi[i]] = true;
            adv[off[i] + k] = advantage(r, sum[c] / cnt[c], sd, sum[c], cnt[c], pt__grpo_std(bss[k], bcnt[k]), scale);
        }
    int nz = 0;
    for (int g = 0; g < ng; g++)
        nz += !spread[g];
    for (int i = 0; i < n; i++)
        zero_std[i] = !spread[gi[i]];
    *n_zero = nz;
done:
    free(gi);
    free(sum);
    free(ss);
    free(bsum);
    free(bss);
    free(cnt);
    free(bcnt);
    free(spread);
    return ng;
}

static const pt_enum_entry k_grpo_scale_names[] = {
    { PT_GRPO_SCALE_GROUP, "group" },
    { PT_GRPO_SCALE_BATCH, "batch" },
    { PT_GRPO_SCALE_NONE, "none" },
    { PT_GRPO_SCALE_RLOO, "rloo" },
};
PT_ENUM_NAME_FUNCS(pt_grpo_scale, k_grpo_scale_names, "reward scaling")
