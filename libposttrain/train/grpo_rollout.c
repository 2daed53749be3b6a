/* The rollout buffer: samples copied in and checked, their rewards, and
 * their old and reference log-probabilities (read, or computed with
 * forwards). */
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

int pt_rollout_sample_init(pt_rollout_sample *sample)
{
    PT_STRUCT_INIT_ZERO(sample);
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

/* The names and weights of the reward functions, copied into b. */
static int copy_reward_funcs(pt_rollout_buffer *b, const pt_rollout_buffer_options *o)
{
    b->k = o->n_reward_funcs;
    for (int k = 0; k < b->k; k++) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "reward%d", k);
        const char *name = o->reward_names && o->reward_names[k] ? o->reward_names[k] : tmp;
        b->names[k] = pt_strdup(name);
        b->weights[k] = o->reward_weights ? o->reward_weights[k] : 1.0;
        if (!b->names[k])
            return pt_err(PT_ENOMEM, "pt_rollout_buffer_create: out of memory");
    }
    return PT_OK;
}

int pt_rollout_buffer_create(pt_rollout_buffer **out, const pt_rollout_buffer_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    pt_rollout_buffer_options o;
    int st = PT_STRUCT_READ(o, opts, pt_rollout_buffer_options_init);
    if (st)
        return st;
    PT_CHECK_ARG(o.n_reward_funcs >= 1 && o.n_reward_funcs <= PT_GRPO_MAX_REWARD_FUNCS, n_reward_funcs,
                 "%d is not in 1 .. %d", o.n_reward_funcs, PT_GRPO_MAX_REWARD_FUNCS);
    for (int k = 0; k < o.n_reward_funcs; k++)
        if (o.reward_weights && !isfinite(o.reward_weights[k]))
            return pt_err(PT_EINVAL, "pt_rollout_buffer_create: reward weight %d is %g (must be finite)", k,
                          o.reward_weights[k]);
    pt_rollout_buffer *b = pt_calloc(1, sizeof *b);
    if (!b)
        return pt_err(PT_ENOMEM, "pt_rollout_buffer_create: out of memory");
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
        return pt_err(PT_EINVAL, "%s: %s logprob %d is %g (must be finite and <= 0)", what, kind, j, (double)lp[j]);
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
    int st = pt_struct_read(s, sizeof *s, user, what, "pt_rollout_sample_init");
    if (st)
        return st;
    if (!s->ids)
        return pt_err(PT_EINVAL, "%s: ids is NULL", what);
    if (s->prompt_len < 1 || s->n_ids <= s->prompt_len)
        return pt_err(PT_EINVAL, "%s: lengths mismatch: prompt_len %d and n_ids %d (need 1 <= prompt_len < n_ids)",
                      what, s->prompt_len, s->n_ids);
    for (int i = 0; i < s->n_ids; i++)
        if (s->ids[i] < 0)
            return pt_err(PT_EINVAL, "%s: token %d has id %d", what, i, (int)s->ids[i]);
    int nc = s->n_ids - s->prompt_len, nm = 0;
    for (int j = 0; j < nc; j++) {
        if (s->loss_mask && s->loss_mask[j] > 1)
            return pt_err(PT_EINVAL, "%s: loss_mask[%d] is %d (must be 0 or 1)", what, j, s->loss_mask[j]);
        nm += s->loss_mask ? s->loss_mask[j] : 1;
        if ((st = check_logprob(s->old_logprobs, j, what, "old")) ||
            (st = check_logprob(s->ref_logprobs, j, what, "ref")))
            return st;
    }
    if (nm == 0)
        return pt_err(PT_EINVAL, "%s: the loss mask is all zero (no completion token to train on)", what);
    for (int k = 0; s->rewards && k < buf->k; k++)
        if (isinf(s->rewards[k]))
            return pt_err(PT_EINVAL, "%s: reward %d is infinite", what, k);
    return PT_OK;
}

static int copy_sample(grpo_sample *d, const pt_rollout_buffer *buf, const pt_rollout_sample *s, const char *func)
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
        return pt_err(PT_ENOMEM, "%s: out of memory", func);
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

/* Room for n more samples. */
static int reserve(pt_rollout_buffer *buf, int n, const char *func)
{
    if (n > INT32_MAX / 2 - buf->n)
        return pt_err(PT_ENOMEM, "%s: too many samples", func);
    if (buf->n + n <= buf->cap)
        return PT_OK;
    int cap = buf->cap ? buf->cap : 16;
    while (cap < buf->n + n)
        cap *= 2;
    grpo_sample *ns = pt_realloc_array(buf->s, (size_t)cap, sizeof *ns);
    if (!ns)
        return pt_err(PT_ENOMEM, "%s: out of memory", func);
    buf->s = ns;
    buf->cap = cap;
    return PT_OK;
}

/* The n samples (a caller's array, its stride the caller's sample size)
 * checked, then copied in; all or nothing.  Messages name `func`. */
static int add_samples(pt_rollout_buffer *buf, const pt_rollout_sample *samples, int n, const char *func)
{
    pt_rollout_sample *local = pt_malloc_array((size_t)n, sizeof *local);
    if (!local)
        return pt_err(PT_ENOMEM, "%s: out of memory", func);
    int st = PT_OK, i = 0;
    for (; i < n && !st; i++)
        st = check_sample(&local[i], buf, pt_struct_at(samples, (size_t)i), i, func);
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
    return add_samples(buf, samples, n, __func__);
}

int pt_rollout_buffer_add(pt_rollout_buffer *buf, const pt_rollout_sample *sample)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(sample);
    return add_samples(buf, sample, 1, __func__);
}

int pt_rollout_buffer_clear(pt_rollout_buffer *buf)
{
    PT_CHECK_NULL(buf);
    for (int i = 0; i < buf->n; i++)
        sample_release(&buf->s[i]);
    buf->n = 0;
    return PT_OK;
}

int pt_rollout_buffer_count(int *n, const pt_rollout_buffer *buf)
{
    PT_CHECK_NULL(n);
    PT_CHECK_NULL(buf);
    *n = buf->n;
    return PT_OK;
}

/* Sample i (and, with has_k, reward function k) of buf, for the messages of who. */
static int check_index(const pt_rollout_buffer *buf, int i, bool has_k, int k, const char *who)
{
    if (!buf)
        return pt_err(PT_EINVAL, "%s: buf is NULL", who);
    if (i < 0 || i >= buf->n)
        return pt_err_arg(who, "sample", "%d is not in 0 .. %d", i, buf->n - 1);
    if (has_k && (k < 0 || k >= buf->k))
        return pt_err_arg(who, "reward function", "%d is not in 0 .. %d", k, buf->k - 1);
    return PT_OK;
}

int pt_rollout_buffer_set_reward(pt_rollout_buffer *buf, int sample, int k, float reward)
{
    int st = check_index(buf, sample, true, k, __func__);
    if (st)
        return st;
    PT_CHECK_ARG(!isinf(reward), reward, "is infinite (NaN declines)");
    buf->s[sample].rewards[k] = reward;
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

int pt_rollout_buffer_get_logprobs(float *out, const pt_rollout_buffer *buf, int sample, int which)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(buf);
    PT_CHECK_ARG(which == PT_ROLLOUT_OLD || which == PT_ROLLOUT_REF, which,
                 "%d is not PT_ROLLOUT_OLD or PT_ROLLOUT_REF", which);
    int st = check_index(buf, sample, false, 0, __func__);
    if (st)
        return st;
    const grpo_sample *s = &buf->s[sample];
    if (which == PT_ROLLOUT_OLD ? !s->has_old : !s->has_ref)
        return pt_err(PT_ESTATE, "pt_rollout_buffer_get_logprobs: sample %d has no %s log-probabilities yet", sample,
                      which == PT_ROLLOUT_OLD ? "old" : "reference");
    memcpy(out, which == PT_ROLLOUT_OLD ? s->old : s->ref, (size_t)s->n_comp * sizeof *out);
    return PT_OK;
}

static const pt_enum_entry k_rollout_logprobs_names[] = {
    { PT_ROLLOUT_OLD, "old" },
    { PT_ROLLOUT_REF, "ref" },
};
PT_ENUM_NAME_FUNCS(pt_rollout_logprobs, k_rollout_logprobs_names, "log-probability kind")
