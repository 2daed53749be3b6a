/* GRPO and its variants: the rollout buffer, rewards, advantages, the
 * per-token loss and the step (docs/grpo.md has the formulas). */
#include "core/core.h"
#include "model/model.h"
#include "posttrain/lora.h"
#include "train/grpo_internal.h"
#include "train/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the buffer ------------------------------------------------------------------ */

typedef struct grpo_sample {
    int32_t *ids;
    int n_ids, prompt_len, n_comp, n_mask;
    uint8_t *mask;     /* n_comp */
    float *old, *ref;  /* n_comp; old is filled on first use when absent */
    bool has_old, has_ref, truncated;
    int64_t group;
    float rewards[PT_GRPO_MAX_REWARD_FUNCS];
} grpo_sample;

struct pt_rollout_buffer {
    int k;
    char *names[PT_GRPO_MAX_REWARD_FUNCS];
    double weights[PT_GRPO_MAX_REWARD_FUNCS];
    grpo_sample *s;
    int n, cap;
};

int pt_rollout_buffer_options_init(pt_rollout_buffer_options *o)
{
    if (!o)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_options_init: opts is NULL");
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->n_reward_funcs = 1;
    return PT_OK;
}

int pt_rollout_sample_init(pt_rollout_sample *s)
{
    if (!s)
        return pt_err(PT_EINVAL, "pt_rollout_sample_init: sample is NULL");
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    return PT_OK;
}

static void sample_release(grpo_sample *s)
{
    free(s->ids);
    free(s->mask);
    free(s->old);
    free(s->ref);
    memset(s, 0, sizeof *s);
}

void pt_rollout_buffer_free(pt_rollout_buffer *buf)
{
    if (!buf)
        return;
    for (int i = 0; i < buf->n; i++)
        sample_release(&buf->s[i]);
    for (int k = 0; k < buf->k; k++)
        free(buf->names[k]);
    free(buf->s);
    free(buf);
}

int pt_rollout_buffer_create(pt_rollout_buffer **out, const pt_rollout_buffer_options *opts)
{
    if (!out)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_create: out is NULL");
    *out = NULL;
    pt_rollout_buffer_options def;
    pt_rollout_buffer_options_init(&def);
    if (!opts)
        opts = &def;
    if (opts->size != sizeof *opts)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_create: options size %zu is not %zu (call "
                      "pt_rollout_buffer_options_init)", opts->size, sizeof *opts);
    if (opts->n_reward_funcs < 1 || opts->n_reward_funcs > PT_GRPO_MAX_REWARD_FUNCS)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_create: n_reward_funcs %d is not in 1 .. %d",
                      opts->n_reward_funcs, PT_GRPO_MAX_REWARD_FUNCS);
    for (int k = 0; k < opts->n_reward_funcs; k++)
        if (opts->reward_weights && !isfinite(opts->reward_weights[k]))
            return pt_err(PT_EINVAL, "pt_rollout_buffer_create: reward weight %d is %g (must be finite)", k,
                          opts->reward_weights[k]);
    pt_rollout_buffer *b = pt_calloc(1, sizeof *b);
    if (!b)
        return pt_err(PT_ENOMEM, "pt_rollout_buffer_create: out of memory");
    b->k = opts->n_reward_funcs;
    for (int k = 0; k < b->k; k++) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "reward%d", k);
        const char *name = opts->reward_names && opts->reward_names[k] ? opts->reward_names[k] : tmp;
        b->names[k] = pt_strdup(name);
        b->weights[k] = opts->reward_weights ? opts->reward_weights[k] : 1.0;
        if (!b->names[k]) {
            pt_rollout_buffer_free(b);
            return pt_err(PT_ENOMEM, "pt_rollout_buffer_create: out of memory");
        }
    }
    *out = b;
    return PT_OK;
}

static int check_sample(const pt_rollout_buffer *buf, const pt_rollout_sample *s, int idx)
{
    if (s->size != sizeof *s)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: size %zu is not %zu (call pt_rollout_sample_init)",
                      idx, s->size, sizeof *s);
    if (!s->ids)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: ids is NULL", idx);
    if (s->prompt_len < 1 || s->n_ids <= s->prompt_len)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: lengths mismatch: prompt_len %d and n_ids %d "
                      "(need 1 <= prompt_len < n_ids)", idx, s->prompt_len, s->n_ids);
    for (int i = 0; i < s->n_ids; i++)
        if (s->ids[i] < 0)
            return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: token %d has id %d", idx, i, (int)s->ids[i]);
    int nc = s->n_ids - s->prompt_len, nm = 0;
    for (int j = 0; j < nc; j++) {
        if (s->loss_mask && s->loss_mask[j] > 1)
            return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: loss_mask[%d] is %d (must be 0 or 1)", idx, j,
                          s->loss_mask[j]);
        nm += s->loss_mask ? s->loss_mask[j] : 1;
        if (s->old_logprobs && !(isfinite(s->old_logprobs[j]) && s->old_logprobs[j] <= 0.0f))
            return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: old logprob %d is %g (must be finite and <= 0)",
                          idx, j, (double)s->old_logprobs[j]);
        if (s->ref_logprobs && !(isfinite(s->ref_logprobs[j]) && s->ref_logprobs[j] <= 0.0f))
            return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: ref logprob %d is %g (must be finite and <= 0)",
                          idx, j, (double)s->ref_logprobs[j]);
    }
    if (nm == 0)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: the loss mask is all zero (no completion token "
                      "to train on)", idx);
    if (s->rewards)
        for (int k = 0; k < buf->k; k++)
            if (isinf(s->rewards[k]))
                return pt_err(PT_EINVAL, "pt_rollout_buffer_add: sample %d: reward %d is infinite", idx, k);
    return PT_OK;
}

static int copy_sample(grpo_sample *d, const pt_rollout_buffer *buf, const pt_rollout_sample *s)
{
    memset(d, 0, sizeof *d);
    int nc = s->n_ids - s->prompt_len;
    d->n_ids = s->n_ids;
    d->prompt_len = s->prompt_len;
    d->n_comp = nc;
    d->ids = pt_malloc_array((size_t)s->n_ids, sizeof *d->ids);
    d->mask = pt_malloc_array((size_t)nc, 1);
    d->old = pt_malloc_array((size_t)nc, sizeof *d->old);
    d->ref = s->ref_logprobs ? pt_malloc_array((size_t)nc, sizeof *d->ref) : NULL;
    if (!d->ids || !d->mask || !d->old || (s->ref_logprobs && !d->ref)) {
        sample_release(d);
        return pt_err(PT_ENOMEM, "pt_rollout_buffer_add: out of memory");
    }
    memcpy(d->ids, s->ids, (size_t)s->n_ids * sizeof *d->ids);
    for (int j = 0; j < nc; j++) {
        d->mask[j] = s->loss_mask ? s->loss_mask[j] : 1;
        d->n_mask += d->mask[j];
        d->old[j] = s->old_logprobs ? s->old_logprobs[j] : 0.0f;
    }
    if (s->ref_logprobs)
        memcpy(d->ref, s->ref_logprobs, (size_t)nc * sizeof *d->ref);
    d->has_old = s->old_logprobs != NULL;
    d->has_ref = s->ref_logprobs != NULL;
    d->truncated = s->truncated;
    d->group = s->group;
    for (int k = 0; k < PT_GRPO_MAX_REWARD_FUNCS; k++)
        d->rewards[k] = (s->rewards && k < buf->k) ? s->rewards[k] : NAN;
    return PT_OK;
}

int pt_rollout_buffer_add_group(pt_rollout_buffer *buf, const pt_rollout_sample *samples, int n)
{
    if (!buf || !samples)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_add: NULL argument");
    if (n < 1)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_add_group: n %d must be >= 1", n);
    int st;
    for (int i = 0; i < n; i++)
        if ((st = check_sample(buf, &samples[i], i)))
            return st;
    if (n > INT32_MAX / 2 - buf->n)
        return pt_err(PT_ENOMEM, "pt_rollout_buffer_add: too many samples");
    if (buf->n + n > buf->cap) {
        int cap = buf->cap ? buf->cap : 16;
        while (cap < buf->n + n)
            cap *= 2;
        grpo_sample *ns = pt_realloc_array(buf->s, (size_t)cap, sizeof *ns);
        if (!ns)
            return pt_err(PT_ENOMEM, "pt_rollout_buffer_add: out of memory");
        buf->s = ns;
        buf->cap = cap;
    }
    for (int i = 0; i < n; i++)
        if ((st = copy_sample(&buf->s[buf->n + i], buf, &samples[i]))) {
            for (int j = 0; j < i; j++)
                sample_release(&buf->s[buf->n + j]);
            return st;
        }
    buf->n += n;
    return PT_OK;
}

int pt_rollout_buffer_add(pt_rollout_buffer *buf, const pt_rollout_sample *sample)
{
    return pt_rollout_buffer_add_group(buf, sample, 1);
}

int pt_rollout_buffer_clear(pt_rollout_buffer *buf)
{
    if (!buf)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_clear: buf is NULL");
    for (int i = 0; i < buf->n; i++)
        sample_release(&buf->s[i]);
    buf->n = 0;
    return PT_OK;
}

int pt_rollout_buffer_count(int *n, const pt_rollout_buffer *buf)
{
    if (!n || !buf)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_count: NULL argument");
    *n = buf->n;
    return PT_OK;
}

static int check_index(const pt_rollout_buffer *buf, int i, int k, const char *who)
{
    if (!buf)
        return pt_err(PT_EINVAL, "%s: buf is NULL", who);
    if (i < 0 || i >= buf->n)
        return pt_err(PT_EINVAL, "%s: sample %d is not in 0 .. %d", who, i, buf->n - 1);
    if (k < 0 || k >= buf->k)
        return pt_err(PT_EINVAL, "%s: reward function %d is not in 0 .. %d", who, k, buf->k - 1);
    return PT_OK;
}

int pt_rollout_buffer_set_reward(pt_rollout_buffer *buf, int i, int k, float reward)
{
    int st = check_index(buf, i, k, "pt_rollout_buffer_set_reward");
    if (st)
        return st;
    if (isinf(reward))
        return pt_err(PT_EINVAL, "pt_rollout_buffer_set_reward: reward is infinite (NaN declines)");
    buf->s[i].rewards[k] = reward;
    return PT_OK;
}

int pt_rollout_buffer_get_reward(float *reward, const pt_rollout_buffer *buf, int i, int k)
{
    if (!reward)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_get_reward: reward is NULL");
    int st = check_index(buf, i, k, "pt_rollout_buffer_get_reward");
    if (st)
        return st;
    *reward = buf->s[i].rewards[k];
    return PT_OK;
}

int pt_rollout_buffer_score(pt_rollout_buffer *buf, int k, pt_reward_fn fn, void *payload)
{
    if (!buf || !fn)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_score: NULL argument");
    if (k < 0 || k >= buf->k)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_score: reward function %d is not in 0 .. %d", k, buf->k - 1);
    if (buf->n == 0)
        return PT_OK;
    pt_reward_item *items = pt_malloc_array((size_t)buf->n, sizeof *items);
    float *r = pt_malloc_array((size_t)buf->n, sizeof *r);
    if (!items || !r) {
        free(items);
        free(r);
        return pt_err(PT_ENOMEM, "pt_rollout_buffer_score: out of memory");
    }
    for (int i = 0; i < buf->n; i++) {
        const grpo_sample *s = &buf->s[i];
        items[i] = (pt_reward_item){ .ids = s->ids, .n_ids = s->n_ids, .prompt_len = s->prompt_len,
                                     .group = s->group, .truncated = s->truncated };
        r[i] = NAN;
    }
    pt_reward_batch rb = { .size = sizeof rb, .n = buf->n, .items = items, .func_index = k,
                           .func_name = buf->names[k] };
    int rc = fn(r, &rb, payload), st = PT_OK;
    if (rc != 0)
        st = pt_err(PT_ECALLBACK, "pt_rollout_buffer_score: reward function %d ('%s') returned %d", k,
                    buf->names[k], rc);
    for (int i = 0; i < buf->n && !st; i++)
        if (isinf(r[i]))
            st = pt_err(PT_ECALLBACK, "pt_rollout_buffer_score: reward function %d ('%s') gave sample %d an "
                        "infinite reward", k, buf->names[k], i);
    if (!st)
        for (int i = 0; i < buf->n; i++)
            buf->s[i].rewards[k] = r[i];
    free(items);
    free(r);
    return st;
}

int pt_rollout_buffer_get_logprobs(float *out, const pt_rollout_buffer *buf, int i, int which)
{
    if (!out || !buf)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_get_logprobs: NULL argument");
    if (which != PT_ROLLOUT_OLD && which != PT_ROLLOUT_REF)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_get_logprobs: unknown which %d", which);
    if (i < 0 || i >= buf->n)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_get_logprobs: sample %d is not in 0 .. %d", i, buf->n - 1);
    const grpo_sample *s = &buf->s[i];
    if (which == PT_ROLLOUT_OLD ? !s->has_old : !s->has_ref)
        return pt_err(PT_ESTATE, "pt_rollout_buffer_get_logprobs: sample %d has no %s log-probabilities yet", i,
                      which == PT_ROLLOUT_OLD ? "old" : "reference");
    memcpy(out, which == PT_ROLLOUT_OLD ? s->old : s->ref, (size_t)s->n_comp * sizeof *out);
    return PT_OK;
}

/* One row of a micro-batch for sample s, T wide: ids padded with 0,
 * targets on the completion positions (t >= prompt_len - 1), -1 elsewhere. */
static void fill_row(int32_t *ids, int32_t *tg, const grpo_sample *s, int T)
{
    for (int t = 0; t < T; t++) {
        ids[t] = t < s->n_ids ? s->ids[t] : 0;
        tg[t] = (t >= s->prompt_len - 1 && t + 1 < s->n_ids) ? s->ids[t + 1] : -1;
    }
}

/* Fill `which` logprobs from forwards on ctx: of every sample, or with
 * only_missing of the samples that have none yet (all or nothing). */
static int compute_logprobs(pt_rollout_buffer *buf, pt_context *ctx, int which, bool only_missing)
{
    if (buf->n == 0)
        return PT_OK;
    int n = buf->n, maxlen = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        maxlen = buf->s[i].n_ids > maxlen ? buf->s[i].n_ids : maxlen;
        total += (size_t)buf->s[i].n_comp;
    }
    int rows_cap = n;
    size_t cells = (size_t)n * (size_t)maxlen;
    int32_t *bid = pt_malloc_array(cells, sizeof *bid), *btg = pt_malloc_array(cells, sizeof *btg);
    float *blp = pt_malloc_array(cells, sizeof *blp), *res = pt_malloc_array(total, sizeof *res);
    int st = PT_OK;
    if (!bid || !btg || !blp || !res)
        st = pt_err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    size_t off = 0;
    for (int i = 0; i < n && !st;) {
        int rows = rows_cap < n - i ? rows_cap : n - i, T = 1;
        for (int r = 0; r < rows; r++)
            T = buf->s[i + r].n_ids > T ? buf->s[i + r].n_ids : T;
        for (int r = 0; r < rows; r++)
            fill_row(bid + (size_t)r * T, btg + (size_t)r * T, &buf->s[i + r], T);
        if (i > 0 && (st = pt_check_abort()))
            break;
        pt_batch b;
        pt_batch_init(&b);
        b.batch = rows;
        b.seq = T;
        b.input_ids = bid;
        b.targets = btg;
        st = pt_model_forward(ctx, &b, blp, NULL);
        if (st == PT_EINVAL && rows > 1) {
            rows_cap = rows / 2;
            st = PT_OK;
            continue;
        }
        if (st) {
            st = pt_err_prefix(st, "pt_rollout_buffer_compute_logprobs: forward of %d rows of %d tokens", rows, T);
            break;
        }
        for (int r = 0; r < rows; r++) {
            const grpo_sample *s = &buf->s[i + r];
            memcpy(res + off, blp + (size_t)r * T + (s->prompt_len - 1), (size_t)s->n_comp * sizeof *res);
            off += (size_t)s->n_comp;
        }
        i += rows;
    }
    for (int i = 0; i < n && !st; i++) {
        grpo_sample *s = &buf->s[i];
        if (which == PT_ROLLOUT_REF && !s->ref && !(s->ref = pt_malloc_array((size_t)s->n_comp, sizeof *s->ref)))
            st = pt_err(PT_ENOMEM, "pt_rollout_buffer_compute_logprobs: out of memory");
    }
    if (!st) {
        off = 0;
        for (int i = 0; i < n; i++) {
            grpo_sample *s = &buf->s[i];
            if (only_missing && (which == PT_ROLLOUT_OLD ? s->has_old : s->has_ref)) {
                off += (size_t)s->n_comp;
                continue;
            }
            memcpy(which == PT_ROLLOUT_OLD ? s->old : s->ref, res + off, (size_t)s->n_comp * sizeof *res);
            if (which == PT_ROLLOUT_OLD)
                s->has_old = true;
            else
                s->has_ref = true;
            off += (size_t)s->n_comp;
        }
    }
    free(bid);
    free(btg);
    free(blp);
    free(res);
    return st;
}

int pt_rollout_buffer_compute_logprobs(pt_rollout_buffer *buf, pt_context *ctx, int which)
{
    if (!buf || !ctx)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_compute_logprobs: NULL argument");
    if (which != PT_ROLLOUT_OLD && which != PT_ROLLOUT_REF)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_compute_logprobs: unknown which %d", which);
    return compute_logprobs(buf, ctx, which, false);
}

/* With LoRA, the reference policy is the frozen base: the reference
 * logprobs the samples lack come from forwards with the adapters switched
 * off (switched on again whatever happens). */
static int fill_reference_from_base(pt_rollout_buffer *buf, pt_context *ctx, pt_model *model)
{
    int st = pt_model_set_lora_enabled(model, false);
    if (st)
        return st;
    st = compute_logprobs(buf, ctx, PT_ROLLOUT_REF, true);
    pt_model_set_lora_enabled(model, true);
    return st ? pt_err_prefix(st, "pt_grpo_step: reference logprobs of the base model (adapters off)") : PT_OK;
}

/* ---- rewards and advantages ---------------------------------------------------------- */

double pt_grpo_combine_rewards(const float *r, const double *w, int k)
{
    double s = 0;
    for (int j = 0; j < k; j++)
        if (!isnan(r[j]))
            s += w[j] * (double)r[j];
    return s;
}

double pt_grpo_overlong_penalty(int len, int l_max, int l_c)
{
    if (l_c <= 0 || len <= l_max - l_c)
        return 0.0;
    if (len <= l_max)
        return (double)((l_max - l_c) - len) / (double)l_c;
    return -1.0;
}

/* Unbiased std (torch.std); 0 for fewer than two values. */
static double std_of(double sum, double sumsq_dev, int n)
{
    (void)sum;
    return n > 1 ? sqrt(sumsq_dev / (double)(n - 1)) : 0.0;
}

int pt_grpo_advantages(double *adv, bool *zero_std, int *n_zero, const double *R, const int64_t *group, int n,
                       int scale)
{
    int *gi = pt_malloc_array((size_t)n, sizeof *gi);
    int64_t *ids = pt_malloc_array((size_t)n, sizeof *ids);
    double *mean = pt_calloc((size_t)n, sizeof *mean), *sd = pt_calloc((size_t)n, sizeof *sd),
           *sum = pt_calloc((size_t)n, sizeof *sum);
    int *cnt = pt_calloc((size_t)n, sizeof *cnt);
    if (!gi || !ids || !mean || !sd || !sum || !cnt) {
        free(gi);
        free(ids);
        free(mean);
        free(sd);
        free(sum);
        free(cnt);
        return PT_ENOMEM;
    }
    int ng = 0;
    for (int i = 0; i < n; i++) {
        int g = 0;
        while (g < ng && ids[g] != group[i])
            g++;
        if (g == ng)
            ids[ng++] = group[i];
        gi[i] = g;
        sum[g] += R[i];
        cnt[g]++;
    }
    for (int g = 0; g < ng; g++)
        mean[g] = sum[g] / cnt[g];
    for (int i = 0; i < n; i++) {
        double d = R[i] - mean[gi[i]];
        sd[gi[i]] += d * d;
    }
    int nz = 0;
    for (int g = 0; g < ng; g++) {
        sd[g] = std_of(sum[g], sd[g], cnt[g]);
        if (sd[g] <= 1e-8)
            nz++;
    }
    double bstd = 0;
    if (scale == PT_GRPO_SCALE_BATCH) {
        double bm = 0, ss = 0;
        for (int i = 0; i < n; i++)
            bm += R[i];
        bm /= n;
        for (int i = 0; i < n; i++)
            ss += (R[i] - bm) * (R[i] - bm);
        bstd = std_of(bm, ss, n);
    }
    for (int i = 0; i < n; i++) {
        int g = gi[i];
        zero_std[i] = sd[g] <= 1e-8;
        double a;
        if (zero_std[i])
            a = 0.0;
        else if (scale == PT_GRPO_SCALE_GROUP)
            a = (R[i] - mean[g]) / (sd[g] + 1e-4);
        else if (scale == PT_GRPO_SCALE_BATCH)
            a = (R[i] - mean[g]) / (bstd + 1e-4);
        else if (scale == PT_GRPO_SCALE_NONE)
            a = R[i] - mean[g];
        else
            a = R[i] - (sum[g] - R[i]) / (cnt[g] - 1);
        adv[i] = a;
    }
    *n_zero = nz;
    free(gi);
    free(ids);
    free(mean);
    free(sd);
    free(sum);
    free(cnt);
    return ng;
}

/* ---- the per-token loss ---------------------------------------------------------------- */

/* -min(r A, clip(r) A) and its derivative in r (torch's min splits a tie
 * evenly, which gives -A inside the clip range and 0 outside). */
static double surrogate(double *dl_dr, double r, double a, double lo, double hi)
{
    double rc = r < lo ? lo : r > hi ? hi : r;
    double l1 = r * a, l2 = rc * a;
    if (l1 < l2) {
        *dl_dr = -a;
        return -l1;
    }
    if (l1 > l2) {
        *dl_dr = 0.0;
        return -l2;
    }
    *dl_dr = (r >= lo && r <= hi) ? -a : -0.5 * a;
    return -l1;
}

void pt_grpo_loss_sample(pt_grpo_acc *acc, float *dlogp, const float *logp, const float *old, const float *ref,
                         const uint8_t *mask, int n, double adv, const pt_grpo_norm *nm)
{
    int cnt = 0;
    for (int j = 0; j < n; j++) {
        dlogp[j] = 0.0f;
        cnt += mask[j] != 0;
    }
    if (cnt == 0)
        return;
    double w;
    switch (nm->loss_type) {
    case PT_GRPO_LOSS_GRPO:
        w = 1.0 / (nm->n_seq * cnt);
        break;
    case PT_GRPO_LOSS_DR_GRPO:
        w = 1.0 / nm->dr_const;
        break;
    default:
        w = 1.0 / nm->n_tokens;
        break;
    }
    double lo = 1.0 - nm->eps_low, hi = 1.0 + nm->eps_high;
    double seq_r = 0, seq_dl = 0, seq_l = 0;
    if (nm->level == PT_GRPO_IS_SEQUENCE) {
        double s = 0;
        for (int j = 0; j < n; j++)
            if (mask[j])
                s += (double)logp[j] - (double)old[j];
        seq_r = exp(s / cnt);
        seq_l = surrogate(&seq_dl, seq_r, adv, lo, hi);
    }
    double lsum = 0;
    for (int j = 0; j < n; j++) {
        if (!mask[j])
            continue;
        double r, l, dl_dr, g;
        if (nm->level == PT_GRPO_IS_SEQUENCE) {
            r = seq_r;
            l = seq_l;
            g = seq_dl * seq_r; /* d l_i / d logp_t = dl/ds * s / |o|, summed over |o| tokens */
        } else {
            r = exp((double)logp[j] - (double)old[j]);
            l = surrogate(&dl_dr, r, adv, lo, hi);
            g = dl_dr * r;
        }
        bool low = r < lo && adv < 0, high = r > hi && adv > 0;
        acc->clip_low += low;
        acc->clip_high += high;
        acc->clip_region += low || high;
        if (ref) {
            double d = (double)ref[j] - (double)logp[j], e = exp(d);
            double k3 = e - d - 1.0;
            acc->kl += k3;
            if (nm->beta > 0) {
                l += nm->beta * k3;
                g += nm->beta * (1.0 - e);
            }
        }
        lsum += l;
        dlogp[j] = (float)(w * g);
    }
    acc->tokens += cnt;
    acc->loss += w * lsum;
}

/* ---- the step ---------------------------------------------------------------------------- */

void pt_grpo_make_norm(pt_grpo_norm *nm, const pt_grpo_options *o, double n_seq, double n_tok)
{
    nm->loss_type = o->loss_type;
    nm->level = o->importance_sampling_level;
    nm->eps_low = o->epsilon_low;
    nm->eps_high = o->epsilon_high;
    nm->beta = o->beta;
    nm->n_seq = n_seq;
    nm->n_tokens = (o->loss_type == PT_GRPO_LOSS_DAPO && o->global_tokens > 0) ? o->global_tokens : n_tok;
    nm->dr_const = (o->global_samples > 0 ? o->global_samples : n_seq) * o->max_completion_length;
}

int pt_grpo_options_init(pt_grpo_options *o)
{
    if (!o)
        return pt_err(PT_EINVAL, "pt_grpo_options_init: opts is NULL");
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->scale_rewards = PT_GRPO_SCALE_GROUP;
    o->loss_type = PT_GRPO_LOSS_DAPO;
    o->importance_sampling_level = PT_GRPO_IS_TOKEN;
    o->epsilon_low = 0.2;
    o->epsilon_high = 0.2;
    return PT_OK;
}

int pt_grpo_stats_init(pt_grpo_stats *s)
{
    if (!s)
        return pt_err(PT_EINVAL, "pt_grpo_stats_init: stats is NULL");
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    s->entropy = NAN;
    return PT_OK;
}

static int check_options(const pt_grpo_options *o)
{
    if (o->size != sizeof *o)
        return pt_err(PT_EINVAL, "pt_grpo_step: options size %zu is not %zu (call pt_grpo_options_init)", o->size,
                      sizeof *o);
    if (o->scale_rewards < PT_GRPO_SCALE_GROUP || o->scale_rewards > PT_GRPO_SCALE_RLOO)
        return pt_err(PT_EINVAL, "pt_grpo_step: unknown scale_rewards %d", o->scale_rewards);
    if (o->loss_type < PT_GRPO_LOSS_GRPO || o->loss_type > PT_GRPO_LOSS_DR_GRPO)
        return pt_err(PT_EINVAL, "pt_grpo_step: unknown loss_type %d", o->loss_type);
    if (o->importance_sampling_level != PT_GRPO_IS_TOKEN && o->importance_sampling_level != PT_GRPO_IS_SEQUENCE)
        return pt_err(PT_EINVAL, "pt_grpo_step: unknown importance_sampling_level %d", o->importance_sampling_level);
    if (!(o->epsilon_low >= 0 && o->epsilon_low < 1) || !(o->epsilon_high >= 0 && isfinite(o->epsilon_high)))
        return pt_err(PT_EINVAL, "pt_grpo_step: epsilon_low %g must be in [0, 1) and epsilon_high %g finite and >= 0",
                      o->epsilon_low, o->epsilon_high);
    if (!(o->beta >= 0 && isfinite(o->beta)))
        return pt_err(PT_EINVAL, "pt_grpo_step: beta %g must be finite and >= 0", o->beta);
    if (o->max_completion_length < 0 || o->overlong_buffer < 0 || o->micro_batch < 0)
        return pt_err(PT_EINVAL, "pt_grpo_step: max_completion_length %d, overlong_buffer %d and micro_batch %d "
                      "must be >= 0", o->max_completion_length, o->overlong_buffer, o->micro_batch);
    if (o->overlong_buffer > 0 && o->overlong_buffer > o->max_completion_length)
        return pt_err(PT_EINVAL, "pt_grpo_step: overlong_buffer %d needs max_completion_length >= it (is %d)",
                      o->overlong_buffer, o->max_completion_length);
    if (o->loss_type == PT_GRPO_LOSS_DR_GRPO && o->max_completion_length <= 0)
        return pt_err(PT_EINVAL, "pt_grpo_step: loss_type dr_grpo needs max_completion_length > 0");
    if (!(o->global_tokens >= 0 && isfinite(o->global_tokens)) ||
        !(o->global_samples >= 0 && isfinite(o->global_samples)))
        return pt_err(PT_EINVAL, "pt_grpo_step: global_tokens %g and global_samples %g must be finite and >= 0",
                      o->global_tokens, o->global_samples);
    return PT_OK;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reward and completion-length statistics over every sample of the buffer. */
static void reward_stats(pt_grpo_stats *st, const pt_rollout_buffer *buf, const double *R)
{
    int n = buf->n;
    double m = 0, ss = 0;
    for (int i = 0; i < n; i++)
        m += R[i];
    m /= n;
    for (int i = 0; i < n; i++)
        ss += (R[i] - m) * (R[i] - m);
    st->reward = m;
    st->reward_std = std_of(m, ss, n);
    st->n_reward_funcs = buf->k;
    for (int k = 0; k < PT_GRPO_MAX_REWARD_FUNCS; k++) {
        st->reward_func_mean[k] = st->reward_func_std[k] = NAN;
        if (k >= buf->k)
            continue;
        double s = 0, q = 0;
        int c = 0;
        for (int i = 0; i < n; i++)
            if (!isnan(buf->s[i].rewards[k])) {
                s += buf->s[i].rewards[k];
                c++;
            }
        if (!c)
            continue;
        s /= c;
        for (int i = 0; i < n; i++)
            if (!isnan(buf->s[i].rewards[k]))
                q += (buf->s[i].rewards[k] - s) * (buf->s[i].rewards[k] - s);
        st->reward_func_mean[k] = s;
        st->reward_func_std[k] = std_of(s, q, c);
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

int pt_grpo_accumulate(pt_grpo_stats *out, pt_context *ctx, pt_model *model, pt_rollout_buffer *buf,
                       const pt_grpo_options *o)
{
    int st = check_options(o);
    if (st)
        return st;
    if (buf->n == 0)
        return pt_err(PT_ESTATE, "pt_grpo_step: the buffer is empty");
    pt_model_config cfg;
    if ((st = pt_model_get_config(&cfg, model)))
        return st;
    int n = buf->n, maxlen = 0;
    bool refs_from_base = false;
    for (int i = 0; i < n; i++) {
        const grpo_sample *s = &buf->s[i];
        if (o->beta > 0 && !s->has_ref && pt_model_lora_enabled(model))
            refs_from_base = true;
        else if (o->beta > 0 && !s->has_ref)
            return pt_err(PT_EINVAL, "pt_grpo_step: beta %g > 0 but sample %d has no ref_logprobs (set them, fill them "
                          "with pt_rollout_buffer_compute_logprobs, or train LoRA adapters: their base is the "
                          "reference)", o->beta, i);
        for (int t = 0; t < s->n_ids; t++)
            if (s->ids[t] >= cfg.vocab_size)
                return pt_err(PT_EINVAL, "pt_grpo_step: sample %d: token %d has id %d >= vocab_size %d", i, t,
                              (int)s->ids[t], cfg.vocab_size);
        maxlen = s->n_ids > maxlen ? s->n_ids : maxlen;
    }
    if (refs_from_base && (st = fill_reference_from_base(buf, ctx, model)))
        return st;
    double t0 = now_seconds();
    pt_grpo_stats stats;
    pt_grpo_stats_init(&stats);
    double *R = pt_malloc_array((size_t)n, sizeof *R), *adv = pt_malloc_array((size_t)n, sizeof *adv);
    bool *zs = pt_malloc_array((size_t)n, sizeof *zs);
    float *lpc = pt_malloc_array((size_t)maxlen, sizeof *lpc), *dlc = pt_malloc_array((size_t)maxlen, sizeof *dlc);
    int32_t *bid = NULL, *btg = NULL;
    float *blp = NULL, *bdl = NULL, *bent = NULL;
    double ent_sum = 0, ent_n = 0;
    if (!R || !adv || !zs || !lpc || !dlc) {
        st = pt_err(PT_ENOMEM, "pt_grpo_step: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const grpo_sample *s = &buf->s[i];
        R[i] = pt_grpo_combine_rewards(s->rewards, buf->weights, buf->k);
        if (o->overlong_buffer > 0)
            R[i] += pt_grpo_overlong_penalty(s->n_comp, o->max_completion_length, o->overlong_buffer);
    }
    int n_zero = 0;
    {
        int64_t *groups = pt_malloc_array((size_t)n, sizeof *groups);
        if (!groups) {
            st = pt_err(PT_ENOMEM, "pt_grpo_step: out of memory");
            goto done;
        }
        for (int i = 0; i < n; i++)
            groups[i] = buf->s[i].group;
        int ng = pt_grpo_advantages(adv, zs, &n_zero, R, groups, n, o->scale_rewards);
        free(groups);
        if (ng < 0) {
            st = pt_err(PT_ENOMEM, "pt_grpo_step: out of memory");
            goto done;
        }
        stats.groups = ng;
        stats.frac_reward_zero_std = (double)n_zero / ng;
    }
    reward_stats(&stats, buf, R);
    stats.groups_dropped = o->drop_zero_std_groups ? n_zero : 0;

    /* normalisers over the samples that take part */
    double n_seq = 0, n_tok = 0;
    for (int i = 0; i < n; i++) {
        const grpo_sample *s = &buf->s[i];
        if (o->drop_zero_std_groups && zs[i])
            continue;
        n_seq += 1;
        if (!(o->mask_truncated_completions && s->truncated))
            n_tok += s->n_mask;
    }
    pt_grpo_norm nm;
    pt_grpo_make_norm(&nm, o, n_seq, n_tok);
    pt_grpo_acc acc = { 0 };
    double fwd_tokens = 0;
    int rows_cap = o->micro_batch > 0 ? o->micro_batch : n;
    size_t cells = (size_t)rows_cap * (size_t)maxlen;
    bid = pt_malloc_array(cells, sizeof *bid);
    btg = pt_malloc_array(cells, sizeof *btg);
    blp = pt_malloc_array(cells, sizeof *blp);
    bdl = pt_malloc_array(cells, sizeof *bdl);
    bent = pt_malloc_array(cells, sizeof *bent);
    if (!bid || !btg || !blp || !bdl || !bent) {
        st = pt_err(PT_ENOMEM, "pt_grpo_step: out of memory for %d rows of %d tokens", rows_cap, maxlen);
        goto done;
    }
    int i = 0, batches = 0;
    while (i < n && n_tok > 0) {
        /* the next rows that train: skip samples with no loss tokens */
        int first = i, rows = 0, T = 1;
        int j = i;
        while (j < n && rows < rows_cap) {
            const grpo_sample *s = &buf->s[j];
            bool skip = (o->drop_zero_std_groups && zs[j]) || (o->mask_truncated_completions && s->truncated);
            if (!skip) {
                rows++;
                T = s->n_ids > T ? s->n_ids : T;
            }
            j++;
        }
        if (rows == 0) {
            i = j;
            continue;
        }
        if (batches > 0 && (st = pt_check_abort()))
            goto done;
        int r = 0;
        for (int k = first; k < j; k++) {
            const grpo_sample *s = &buf->s[k];
            if ((o->drop_zero_std_groups && zs[k]) || (o->mask_truncated_completions && s->truncated))
                continue;
            fill_row(bid + (size_t)r * T, btg + (size_t)r * T, s, T);
            r++;
        }
        pt_batch b;
        pt_batch_init(&b);
        b.batch = rows;
        b.seq = T;
        b.input_ids = bid;
        b.targets = btg;
        st = pt_model_forward_entropy(ctx, &b, blp, bent);
        if (st == PT_EINVAL && rows > 1 && o->micro_batch == 0) {
            rows_cap = rows / 2; /* the context holds fewer rows: retry with half */
            st = PT_OK;
            continue;
        }
        if (st) {
            st = pt_err_prefix(st, "pt_grpo_step: forward of %d rows of %d tokens", rows, T);
            goto done;
        }
        r = 0;
        for (int k = first; k < j; k++) {
            grpo_sample *s = &buf->s[k];
            if ((o->drop_zero_std_groups && zs[k]) || (o->mask_truncated_completions && s->truncated))
                continue;
            const float *rl = blp + (size_t)r * T + (s->prompt_len - 1);
            const float *re = bent + (size_t)r * T + (s->prompt_len - 1);
            for (int t = 0; t < s->n_comp; t++)
                if (s->mask[t]) {
                    ent_sum += re[t];
                    ent_n++;
                }
            float *rd = bdl + (size_t)r * T;
            memset(rd, 0, (size_t)T * sizeof *rd);
            memcpy(lpc, rl, (size_t)s->n_comp * sizeof *lpc);
            if (!s->has_old) {
                memcpy(s->old, lpc, (size_t)s->n_comp * sizeof *lpc);
                s->has_old = true;
            }
            pt_grpo_loss_sample(&acc, dlc, lpc, s->old, s->has_ref ? s->ref : NULL, s->mask, s->n_comp, adv[k], &nm);
            memcpy(rd + (s->prompt_len - 1), dlc, (size_t)s->n_comp * sizeof *dlc);
            r++;
        }
        fwd_tokens += (double)rows * T;
        if ((st = pt_model_backward(ctx, bdl)))
            goto done;
        batches++;
        i = j;
    }
    stats.loss = acc.loss;
    stats.tokens = acc.tokens;
    stats.kl = acc.tokens > 0 ? acc.kl / acc.tokens : 0.0;
    stats.entropy = ent_n > 0 ? ent_sum / ent_n : 0.0;
    stats.clip_ratio_low = acc.tokens > 0 ? acc.clip_low / acc.tokens : 0.0;
    stats.clip_ratio_high = acc.tokens > 0 ? acc.clip_high / acc.tokens : 0.0;
    stats.clip_ratio_region = acc.tokens > 0 ? acc.clip_region / acc.tokens : 0.0;
    stats.train_seconds = now_seconds() - t0;
    stats.tokens_per_second = stats.train_seconds > 0 ? fwd_tokens / stats.train_seconds : 0.0;
done:
    if (st)
        pt_model_zero_grad(model);
    else
        *out = stats;
    free(R);
    free(adv);
    free(zs);
    free(lpc);
    free(dlc);
    free(bid);
    free(btg);
    free(blp);
    free(bdl);
    free(bent);
    return st;
}

int pt_grpo_step(pt_grpo_stats *stats, pt_optimizer *opt, pt_context *ctx, pt_rollout_buffer *buf,
                 const pt_grpo_options *opts)
{
    if (!opt || !ctx || !buf)
        return pt_err(PT_EINVAL, "pt_grpo_step: NULL argument");
    if (stats && stats->size != sizeof *stats)
        return pt_err(PT_EINVAL, "pt_grpo_step: stats size %zu is not %zu (call pt_grpo_stats_init)", stats->size,
                      sizeof *stats);
    pt_grpo_options def;
    pt_grpo_options_init(&def);
    if (!opts)
        opts = &def;
    pt_grpo_stats local;
    pt_grpo_stats_init(&local);
    int st = pt_grpo_accumulate(&local, ctx, pt_optimizer_model(opt), buf, opts);
    if (st) {
        pt_optimizer_zero_grads(opt);
        return st;
    }
    pt_step_stats ss;
    if ((st = pt_train_finish_step(&ss, opt, local.tokens, local.loss)))
        return st;
    local.grad_norm = ss.grad_norm;
    local.lr = ss.lr;
    local.step = ss.step;
    local.skipped = ss.skipped;
    local.skipped_total = ss.skipped_total;
    if (stats)
        *stats = local;
    return PT_OK;
}

/* ---- pt_grpo_scale names ---- */

static const pt_enum_entry k_grpo_scale_names[] = {
    { PT_GRPO_SCALE_GROUP, "group" },
    { PT_GRPO_SCALE_BATCH, "batch" },
    { PT_GRPO_SCALE_NONE, "none" },
    { PT_GRPO_SCALE_RLOO, "rloo" },
};

const char *pt_grpo_scale_name(int value)
{
    return pt_enum_name(k_grpo_scale_names, PT_ENUM_COUNT(k_grpo_scale_names), value);
}

int pt_grpo_scale_from_name(int *out, const char *name)
{
    return pt_enum_from_name(out, k_grpo_scale_names, PT_ENUM_COUNT(k_grpo_scale_names), name, __func__,
                             "reward scaling");
}

/* ---- pt_grpo_loss_type names ---- */

static const pt_enum_entry k_grpo_loss_type_names[] = {
    { PT_GRPO_LOSS_GRPO, "grpo" },
    { PT_GRPO_LOSS_BNPO, "bnpo" },
    { PT_GRPO_LOSS_DAPO, "dapo" },
    { PT_GRPO_LOSS_DR_GRPO, "dr_grpo" },
};

const char *pt_grpo_loss_type_name(int value)
{
    return pt_enum_name(k_grpo_loss_type_names, PT_ENUM_COUNT(k_grpo_loss_type_names), value);
}

int pt_grpo_loss_type_from_name(int *out, const char *name)
{
    return pt_enum_from_name(out, k_grpo_loss_type_names, PT_ENUM_COUNT(k_grpo_loss_type_names), name, __func__,
                             "loss type");
}

/* ---- pt_grpo_is_level names ---- */

static const pt_enum_entry k_grpo_is_level_names[] = {
    { PT_GRPO_IS_TOKEN, "token" },
    { PT_GRPO_IS_SEQUENCE, "sequence" },
};

const char *pt_grpo_is_level_name(int value)
{
    return pt_enum_name(k_grpo_is_level_names, PT_ENUM_COUNT(k_grpo_is_level_names), value);
}

int pt_grpo_is_level_from_name(int *out, const char *name)
{
    return pt_enum_from_name(out, k_grpo_is_level_names, PT_ENUM_COUNT(k_grpo_is_level_names), name, __func__,
                             "importance sampling level");
}

/* ---- pt_rollout_logprobs names ---- */

static const pt_enum_entry k_rollout_logprobs_names[] = {
    { PT_ROLLOUT_OLD, "old" },
    { PT_ROLLOUT_REF, "ref" },
};

const char *pt_rollout_logprobs_name(int value)
{
    return pt_enum_name(k_rollout_logprobs_names, PT_ENUM_COUNT(k_rollout_logprobs_names), value);
}

int pt_rollout_logprobs_from_name(int *out, const char *name)
{
    return pt_enum_from_name(out, k_rollout_logprobs_names, PT_ENUM_COUNT(k_rollout_logprobs_names), name, __func__,
                             "log-probability kind");
}
