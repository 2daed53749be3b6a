/* The rollout buffer: samples copied in and checked, their rewards (per
 * sample or per segment) or given advantages, and their old, reference and
 * sampling log-probabilities (read, or computed with forwards). */
#include "core/core.h"
#include "model/model.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int pt_rollout_buffer_options_init(pt_rollout_buffer_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->n_reward_funcs = 1;
    return PT_OK;
}

PT_ZERO_INIT(pt_rollout_sample_init, pt_rollout_sample, sample)

static void sample_release(grpo_sample *s)
{
    free(s->ids);
    free(s->mask);
    free(s->old);
    free(s->ref);
    free(s->samp);
    free(s->tadv);
    free(s->seg);
    memset(s, 0, sizeof *s);
}

void pt_rollout_buffer_free(pt_rollout_buffer *buf)
{
    if (!buf)
        return;
    if (buf->scoring) {
        /* from the reward function scoring it: pt_rollout_buffer_score frees it */
        buf->free_pending = true;
        return;
    }
    for (int i = 0; i < buf->n; i++)
        sample_release(&buf->s[i]);
    for (int k = 0; k < buf->k; k++)
        free(buf->names[k]);
    free(buf->s);
    free(buf);
}

/* The names and weights of the reward functions, copied into b. */
static int copy_reward_funcs(pt_rollout_buffer *b, const pt_rollout_buffer_options *o)
{
    b->k = o->n_reward_funcs;
    for (int k = 0; k < b->k; k++) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "reward%d", k);
        const char *name = o->reward_names && o->reward_names[k] ? o->reward_names[k] : tmp;
        b->names[k] = pt__strdup(name);
        b->weights[k] = o->reward_weights ? o->reward_weights[k] : 1.0;
        if (!b->names[k])
            return pt__err(PT_ENOMEM, "pt_rollout_buffer_create: out of memory");
    }
    return PT_OK;
}

int pt_rollout_buffer_create(pt_rollout_buffer **out, const pt_rollout_buffer_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    pt_rollout_buffer_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_rollout_buffer_options_init);
    PT_CHECK_ARG(o.n_reward_funcs >= 1 && o.n_reward_funcs <= PT_GRPO_MAX_REWARD_FUNCS, n_reward_funcs,
                 "%d is not in 1 .. %d", o.n_reward_funcs, PT_GRPO_MAX_REWARD_FUNCS);
    for (int k = 0; k < o.n_reward_funcs; k++)
        if (o.reward_weights && !isfinite(o.reward_weights[k]))
            return pt__err(PT_EINVAL, "pt_rollout_buffer_create: reward weight %d is %g (must be finite)", k,
                          o.reward_weights[k]);
    pt_rollout_buffer *b = pt__calloc(1, sizeof *b);
    if (!b)
        return pt__err(PT_ENOMEM, "pt_rollout_buffer_create: out of memory");
    int st;
    if ((st = copy_reward_funcs(b, &o))) {
        pt_rollout_buffer_free(b);
        return st;
    }
    *out = b;
    return PT_OK;
}

/* Entry j of a log-probability array of a sample (may be NULL): finite and <= 0. */
static int check_logprob(const float *lp, int j, const char *what, const char *kind)
{
    if (lp && !(isfinite(lp[j]) && lp[j] <= 0.0f))
        return pt__err(PT_EINVAL, "%s: %s logprob %d is %g (must be finite and <= 0)", what, kind, j, (double)lp[j]);
    return PT_OK;
}

int pt__grpo_segments_of(int *seg_of, const uint8_t *mask, int n)
{
    int k = -1;
    for (int j = 0; j < n; j++) {
        bool on = mask ? mask[j] != 0 : true;
        if (on && (j == 0 || !(mask ? mask[j - 1] != 0 : true)))
            k++;
        if (seg_of)
            seg_of[j] = on ? k : -1;
    }
    return k + 1;
}

/* The per-token advantages and segment rewards of sample s (checked for
 * the messages of `what`). */
static int check_advantage_source(const pt_rollout_sample *s, int nc, const char *what)
{
    if (s->advantages && s->segment_rewards)
        return pt__err(PT_EINVAL, "%s: advantages and segment_rewards are both set (give one: per-token advantages "
                      "are used as given, segment rewards are normalised per segment)", what);
    for (int j = 0; s->advantages && j < nc; j++)
        if (!isfinite(s->advantages[j]))
            return pt__err(PT_EINVAL, "%s: advantage %d is %g (must be finite)", what, j, (double)s->advantages[j]);
    if (!s->segment_rewards) {
        if (s->n_segments != 0)
            return pt__err(PT_EINVAL, "%s: n_segments %d without segment_rewards", what, s->n_segments);
        return PT_OK;
    }
    int runs = pt__grpo_segments_of(NULL, s->loss_mask, nc);
    if (s->n_segments != runs)
        return pt__err(PT_EINVAL, "%s: n_segments %d does not match the loss mask's %d segment%s (runs of 1s)", what,
                      s->n_segments, runs, runs == 1 ? "" : "s");
    for (int k = 0; k < s->n_segments; k++)
        if (isinf(s->segment_rewards[k]))
            return pt__err(PT_EINVAL, "%s: segment reward %d is infinite (NaN declines)", what, k);
    return PT_OK;
}

/* Check the caller's sample `user` (index idx of the call to the public
 * function `func`) and read it into *s, a full pt_rollout_sample. */
static int check_sample(pt_rollout_sample *s, const pt_rollout_buffer *buf, const pt_rollout_sample *user, int idx,
                        const char *func)
{
    char what[64];
    snprintf(what, sizeof what, "%s: sample %d", func, idx);
    pt_rollout_sample_init(s);
    int st = pt__struct_read(s, sizeof *s, user, what, "pt_rollout_sample_init");
    if (st)
        return st;
    if (!s->ids)
        return pt__err(PT_EINVAL, "%s: ids is NULL", what);
    if (s->n_ids > 0 && (size_t)s->n_ids > PT_MAX_TOKENS)
        return pt__err_count(what, "n_ids", (size_t)s->n_ids, PT_MAX_TOKENS, "sample");
    if (s->prompt_len < 1 || s->n_ids <= s->prompt_len)
        return pt__err(PT_EINVAL, "%s: lengths mismatch: prompt_len %d and n_ids %d (need 1 <= prompt_len < n_ids)",
                      what, s->prompt_len, s->n_ids);
    for (int i = 0; i < s->n_ids; i++)
        if (s->ids[i] < 0)
            return pt__err(PT_EINVAL, "%s: token %d has id %d", what, i, (int)s->ids[i]);
    int nc = s->n_ids - s->prompt_len, nm = 0;
    for (int j = 0; j < nc; j++) {
        if (s->loss_mask && s->loss_mask[j] > 1)
            return pt__err(PT_EINVAL, "%s: loss_mask[%d] is %d (must be 0 or 1)", what, j, s->loss_mask[j]);
        nm += s->loss_mask ? s->loss_mask[j] : 1;
        if ((st = check_logprob(s->old_logprobs, j, what, "old")) ||
            (st = check_logprob(s->ref_logprobs, j, what, "ref")) ||
            (st = check_logprob(s->sampling_logprobs, j, what, "sampling")))
            return st;
    }
    if (nm == 0)
        return pt__err(PT_EINVAL, "%s: the loss mask is all zero (no completion token to train on)", what);
    for (int k = 0; s->rewards && k < buf->k; k++)
        if (isinf(s->rewards[k]))
            return pt__err(PT_EINVAL, "%s: reward %d is infinite", what, k);
    return check_advantage_source(s, nc, what);
}

/* A copy of n floats of src, or NULL for NULL; *fail when out of memory. */
static float *dup_floats(const float *src, int n, bool *fail)
{
    if (!src)
        return NULL;
    float *d = pt__malloc_array((size_t)(n > 0 ? n : 1), sizeof *d);
    if (!d)
        *fail = true;
    else
        memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

static int copy_sample(grpo_sample *d, const pt_rollout_buffer *buf, const pt_rollout_sample *s, const char *func)
{
    memset(d, 0, sizeof *d);
    int nc = s->n_ids - s->prompt_len;
    d->n_ids = s->n_ids;
    d->prompt_len = s->prompt_len;
    d->n_comp = nc;
    bool fail = false;
    d->ids = pt__malloc_array((size_t)s->n_ids, sizeof *d->ids);
    d->mask = pt__malloc_array((size_t)nc, 1);
    d->old = pt__malloc_array((size_t)nc, sizeof *d->old);
    d->ref = dup_floats(s->ref_logprobs, nc, &fail);
    d->samp = dup_floats(s->sampling_logprobs, nc, &fail);
    d->tadv = dup_floats(s->advantages, nc, &fail);
    d->seg = dup_floats(s->segment_rewards, s->n_segments, &fail);
    if (!d->ids || !d->mask || !d->old || fail) {
        sample_release(d);
        return pt__err(PT_ENOMEM, "%s: out of memory", func);
    }
    memcpy(d->ids, s->ids, (size_t)s->n_ids * sizeof *d->ids);
    for (int j = 0; j < nc; j++) {
        d->mask[j] = s->loss_mask ? s->loss_mask[j] : 1;
        d->n_mask += d->mask[j];
        d->old[j] = s->old_logprobs ? s->old_logprobs[j] : 0.0f;
    }
    d->has_old = s->old_logprobs != NULL;
    d->has_ref = s->ref_logprobs != NULL;
    d->truncated = s->truncated;
    d->group = s->group;
    d->n_seg = s->segment_rewards ? s->n_segments : 0;
    d->kind = s->advantages ? GRPO_KIND_ADVANTAGES : s->segment_rewards ? GRPO_KIND_SEGMENTS : GRPO_KIND_REWARD;
    d->scored = d->kind != GRPO_KIND_REWARD || s->rewards != NULL;
    for (int k = 0; k < PT_GRPO_MAX_REWARD_FUNCS; k++)
        d->rewards[k] = (s->rewards && k < buf->k) ? s->rewards[k] : NAN;
    return PT_OK;
}

/* Room for n more samples. */
static int reserve(pt_rollout_buffer *buf, int n, const char *func)
{
    if (n > INT32_MAX / 2 - buf->n)
        return pt__err(PT_ENOMEM, "%s: too many samples", func);
    if (buf->n + n <= buf->cap)
        return PT_OK;
    int cap = buf->cap ? buf->cap : 16;
    while (cap < buf->n + n)
        cap *= 2;
    grpo_sample *ns = pt__realloc_array(buf->s, (size_t)cap, sizeof *ns);
    if (!ns)
        return pt__err(PT_ENOMEM, "%s: out of memory", func);
    buf->s = ns;
    buf->cap = cap;
    return PT_OK;
}

/* The n samples (a caller's array, its stride the caller's sample size)
 * checked, then copied in; all or nothing.  Messages name `func`. */
int pt__rollout_add_samples(pt_rollout_buffer *buf, const pt_rollout_sample *samples, int n, const char *func)
{
    pt_rollout_sample *local = pt__malloc_array((size_t)n, sizeof *local);
    if (!local)
        return pt__err(PT_ENOMEM, "%s: out of memory", func);
    int st = PT_OK, i = 0;
    for (; i < n && !st; i++)
        st = check_sample(&local[i], buf, pt__struct_at(samples, (size_t)i), i, func);
    if (!st)
        st = reserve(buf, n, func);
    for (i = 0; i < n && !st; i++)
        st = copy_sample(&buf->s[buf->n + i], buf, &local[i], func);
    if (st)
        for (int j = 0; j < i - 1; j++)
            sample_release(&buf->s[buf->n + j]);
    else
        buf->n += n;
    free(local);
    return st;
}

int pt_rollout_buffer_add_group(pt_rollout_buffer *buf, const pt_rollout_sample *samples, int n)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(samples);
    PT_CHECK_ARG(n >= 1, n, "%d must be >= 1", n);
    PT_CHECK_COUNT(n, PT_MAX_MESSAGES, "group");
    int st = pt__rollout_check_not_scoring(buf, __func__);
    return st ? st : pt__rollout_add_samples(buf, samples, n, __func__);
}

int pt_rollout_buffer_add(pt_rollout_buffer *buf, const pt_rollout_sample *sample)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(sample);
    int st = pt__rollout_check_not_scoring(buf, __func__);
    return st ? st : pt__rollout_add_samples(buf, sample, 1, __func__);
}

int pt_rollout_buffer_clear(pt_rollout_buffer *buf)
{
    PT_CHECK_NULL(buf);
    int st = pt__rollout_check_not_scoring(buf, __func__);
    if (st)
        return st;
    for (int i = 0; i < buf->n; i++)
        sample_release(&buf->s[i]);
    buf->n = 0;
    return PT_OK;
}

int pt_rollout_buffer_size(const pt_rollout_buffer *buf)
{
    return buf ? buf->n : 0;
}

PT_DEPRECATED_GETTER(int, pt_rollout_buffer_count, n, pt_rollout_buffer, buf, pt_rollout_buffer_size)

/* Sample i (and, with has_k, reward function k) of buf, for the messages of who. */
static int check_index(const pt_rollout_buffer *buf, int i, bool has_k, int k, const char *who)
{
    if (!buf)
        return pt__err(PT_EINVAL, "%s: buf is NULL", who);
    if (i < 0 || i >= buf->n)
        return pt__err_arg(who, "sample", "%d is not in 0 .. %d", i, buf->n - 1);
    if (has_k && (k < 0 || k >= buf->k))
        return pt__err_arg(who, "reward function", "%d is not in 0 .. %d", k, buf->k - 1);
    return PT_OK;
}

int pt_rollout_buffer_set_reward(pt_rollout_buffer *buf, int sample, int k, float reward)
{
    int st = pt__rollout_check_not_scoring(buf, __func__);
    if (!st)
        st = check_index(buf, sample, true, k, __func__);
    if (st)
        return st;
    PT_CHECK_ARG(!isinf(reward), reward, "is infinite (NaN declines)");
    buf->s[sample].rewards[k] = reward;
    buf->s[sample].scored = true;
    return PT_OK;
}

int pt_rollout_buffer_get_reward(float *reward, const pt_rollout_buffer *buf, int sample, int k)
{
    PT_CHECK_NULL(reward);
    int st = check_index(buf, sample, true, k, __func__);
    if (st)
        return st;
    *reward = buf->s[sample].rewards[k];
    return PT_OK;
}

/* Sample i's reward of segment k (checked for the messages of who). */
static int check_segment(const pt_rollout_buffer *buf, int i, int k, const char *who)
{
    int st = check_index(buf, i, false, 0, who);
    if (st)
        return st;
    const grpo_sample *s = &buf->s[i];
    if (s->kind != GRPO_KIND_SEGMENTS)
        return pt__err_arg(who, "sample", "%d has no segment rewards (it was added without segment_rewards)", i);
    if (k < 0 || k >= s->n_seg)
        return pt__err_arg(who, "segment", "%d is not in 0 .. %d", k, s->n_seg - 1);
    return PT_OK;
}

int pt_rollout_buffer_set_segment_reward(pt_rollout_buffer *buf, int sample, int segment, float reward)
{
    int st = pt__rollout_check_not_scoring(buf, __func__);
    if (!st)
        st = check_segment(buf, sample, segment, __func__);
    if (st)
        return st;
    PT_CHECK_ARG(!isinf(reward), reward, "is infinite (NaN declines)");
    buf->s[sample].seg[segment] = reward;
    return PT_OK;
}

int pt_rollout_buffer_get_segment_reward(float *reward, const pt_rollout_buffer *buf, int sample, int segment)
{
    PT_CHECK_NULL(reward);
    int st = check_segment(buf, sample, segment, __func__);
    if (st)
        return st;
    *reward = buf->s[sample].seg[segment];
    return PT_OK;
}

static const char *const k_lp_what[3] = { "old", "reference", "sampling" };

int pt_rollout_buffer_get_logprobs(float *out, const pt_rollout_buffer *buf, int sample, int which)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(buf);
    PT_CHECK_ARG(which >= PT_ROLLOUT_OLD && which <= PT_ROLLOUT_SAMPLING, which,
                 "%d is not PT_ROLLOUT_OLD, PT_ROLLOUT_REF or PT_ROLLOUT_SAMPLING", which);
    int st = check_index(buf, sample, false, 0, __func__);
    if (st)
        return st;
    const grpo_sample *s = &buf->s[sample];
    const float *src = which == PT_ROLLOUT_OLD ? (s->has_old ? s->old : NULL)
                     : which == PT_ROLLOUT_REF ? (s->has_ref ? s->ref : NULL) : s->samp;
    if (!src)
        return pt__err(PT_ESTATE, "pt_rollout_buffer_get_logprobs: sample %d has no %s log-probabilities yet", sample,
                      k_lp_what[which]);
    memcpy(out, src, (size_t)s->n_comp * sizeof *out);
    return PT_OK;
}

static const pt_enum_entry k_rollout_logprobs_names[] = {
    { PT_ROLLOUT_OLD, "old" },
    { PT_ROLLOUT_REF, "ref" },
    { PT_ROLLOUT_SAMPLING, "sampling" },
};
PT_ENUM_NAME_FUNCS(pt_rollout_logprobs, k_rollout_logprobs_names, "log-probability kind")
