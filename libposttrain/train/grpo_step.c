/* The GRPO step: options, the checks of the buffer, advantages, forwards and
 * backwards over micro-batches through the per-token loss, then the
 * optimizer step shared with SFT (step_internal.h). */
#include "core/core.h"
#include "model/model.h"
#include "posttrain/lora.h"
#include "train/grpo_internal.h"
#include "train/dist_train.h"
#include "train/optimizer.h"
#include "train/step_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int pt_grpo_options_init(pt_grpo_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->scale_rewards = PT_GRPO_SCALE_GROUP;
    opts->loss_type = PT_GRPO_LOSS_DAPO;
    opts->importance_sampling_level = PT_GRPO_IS_TOKEN;
    opts->epsilon_low = 0.2;
    opts->epsilon_high = 0.2;
    return PT_OK;
}

int pt_grpo_stats_init(pt_grpo_stats *stats)
{
    PT_STRUCT_INIT_ZERO(stats);
    stats->entropy = NAN;
    return PT_OK;
}

static int check_options(const pt_grpo_options *o)
{
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

/* Every sample's ids inside the model's vocabulary and its reference
 * logprobs present when beta > 0 (or to come from the LoRA base:
 * *refs_from_base); *maxlen receives the longest sample. */
static int check_samples(int *maxlen, bool *refs_from_base, const pt_rollout_buffer *buf, const pt_model *model,
                         const pt_grpo_options *o)
{
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    int st = pt_model_get_config(&cfg, model);
    if (st)
        return st;
    *maxlen = 0;
    *refs_from_base = false;
    for (int i = 0; i < buf->n; i++) {
        const grpo_sample *s = &buf->s[i];
        if (o->beta > 0 && !s->has_ref && pt_model_lora_enabled(model))
            *refs_from_base = true;
        else if (o->beta > 0 && !s->has_ref)
            return pt_err(PT_EINVAL, "pt_grpo_step: beta %g > 0 but sample %d has no ref_logprobs (set them, fill them "
                          "with pt_rollout_buffer_compute_logprobs, or train LoRA adapters: their base is the "
                          "reference)", o->beta, i);
        for (int t = 0; t < s->n_ids; t++)
            if (s->ids[t] >= cfg.vocab_size)
                return pt_err(PT_EINVAL, "pt_grpo_step: sample %d: token %d has id %d >= vocab_size %d", i, t,
                              (int)s->ids[t], cfg.vocab_size);
        *maxlen = s->n_ids > *maxlen ? s->n_ids : *maxlen;
    }
    return PT_OK;
}

/* *unscored: the samples that no reward function scored (all NaN: never
 * scored, or every function declined them); PT_ESTATE when that is every
 * sample, since the step would have nothing to learn from. */
static int count_unscored(int64_t *unscored, const pt_rollout_buffer *buf)
{
    int64_t n = 0;
    for (int i = 0; i < buf->n; i++) {
        bool any = false;
        for (int k = 0; k < buf->k && !any; k++)
            any = !isnan(buf->s[i].rewards[k]);
        n += !any;
    }
    *unscored = n;
    if (n == buf->n)
        return pt_err(PT_ESTATE, "pt_grpo_step: no sample has a reward: score the buffer first "
                      "(pt_rollout_buffer_score or pt_rollout_buffer_set_reward; all %d samples "
                      "have only NaN rewards)", buf->n);
    if (n > 0)
        pt_log(PT_LOG_WARN, "pt_grpo_step: %lld of %d samples have no reward (every reward "
               "function declined them): they count with reward 0", (long long)n, buf->n);
    return PT_OK;
}

/* With LoRA, the reference policy is the frozen base: the reference
 * logprobs the samples lack come from forwards with the adapters switched
 * off (switched on again whatever happens). */
static int fill_reference_from_base(pt_rollout_buffer *buf, pt_context *ctx, pt_model *model)
{
    int st = pt_model_set_lora_enabled(model, false);
    if (st)
        return st;
    st = pt_rollout_compute_logprobs(buf, ctx, PT_ROLLOUT_REF, true);
    pt_model_set_lora_enabled(model, true);
    return st ? pt_err_prefix(st, "pt_grpo_step: reference logprobs of the base model (adapters off)") : PT_OK;
}

/* The working state of one accumulation. */
typedef struct grpo_run {
    const pt_grpo_options *o;
    pt_rollout_buffer *buf;
    const pt_rollout_buffer *all; /* the whole global batch: buf, or every rank's (grpo_view.c) */
    int offset;                 /* buf's first sample in `all` */
    pt_context *ctx;
    int n, maxlen;              /* buf's samples, its longest */
    double *R, *adv;            /* per sample of `all`: combined reward, advantage */
    bool *zs;                   /* per sample of `all`: its group's rewards are all equal */
    float *lpc, *dlc;           /* one sample's completion logprobs and dL/dlogp */
    int rows_cap;               /* rows per forward */
    int32_t *bid, *btg;         /* a micro-batch: ids, targets */
    float *blp, *bdl, *bent;    /* its logprobs, dL/dlogp, entropies */
    pt_grpo_norm nm;
    pt_grpo_acc acc;
    double ent_sum, ent_n, fwd_tokens;
} grpo_run;

static void run_free(grpo_run *w)
{
    free(w->R);
    free(w->adv);
    free(w->zs);
    free(w->lpc);
    free(w->dlc);
    free(w->bid);
    free(w->btg);
    free(w->blp);
    free(w->bdl);
    free(w->bent);
}

/* Combined rewards (with the over-long penalty), advantages and the reward
 * statistics of the whole global batch into *stats. */
static int compute_advantages(grpo_run *w, pt_grpo_stats *stats)
{
    const pt_grpo_options *o = w->o;
    const pt_rollout_buffer *all = w->all;
    for (int i = 0; i < all->n; i++) {
        const grpo_sample *s = &all->s[i];
        w->R[i] = pt_grpo_combine_rewards(s->rewards, all->weights, all->k);
        if (o->overlong_buffer > 0)
            w->R[i] += pt_grpo_overlong_penalty(s->n_comp, o->max_completion_length, o->overlong_buffer);
    }
    int n_zero = 0;
    int64_t *groups = pt_malloc_array((size_t)all->n, sizeof *groups);
    if (!groups)
        return pt_err(PT_ENOMEM, "pt_grpo_step: out of memory");
    for (int i = 0; i < all->n; i++)
        groups[i] = all->s[i].group;
    int ng = pt_grpo_advantages(w->adv, w->zs, &n_zero, w->R, groups, all->n, o->scale_rewards);
    free(groups);
    if (ng < 0)
        return pt_err(PT_ENOMEM, "pt_grpo_step: out of memory");
    stats->groups = ng;
    stats->frac_reward_zero_std = (double)n_zero / ng;
    pt_grpo_reward_stats(stats, all, w->R);
    stats->groups_dropped = o->drop_zero_std_groups ? n_zero : 0;
    return PT_OK;
}

/* Whether sample k of this rank's buffer has loss tokens in this step (not
 * in a dropped group, not a masked truncated completion). */
static bool trains(const grpo_run *w, int k)
{
    return !((w->o->drop_zero_std_groups && w->zs[w->offset + k]) ||
             (w->o->mask_truncated_completions && w->buf->s[k].truncated));
}

/* The loss normalisers over the samples of the global batch that take
 * part; returns the loss tokens. */
static double make_norm(grpo_run *w)
{
    double n_seq = 0, n_tok = 0;
    for (int i = 0; i < w->all->n; i++) {
        const grpo_sample *s = &w->all->s[i];
        if (w->o->drop_zero_std_groups && w->zs[i])
            continue;
        n_seq += 1;
        if (!(w->o->mask_truncated_completions && s->truncated))
            n_tok += s->n_mask;
    }
    pt_grpo_make_norm(&w->nm, w->o, n_seq, n_tok);
    return n_tok;
}

/* The loss of sample k, row r of the micro-batch of width T just forwarded:
 * its entropy summed, its old logprobs recorded when it had none, its
 * dL/dlogp written into the row of bdl. */
static void sample_loss(grpo_run *w, int k, int r, int T)
{
    grpo_sample *s = &w->buf->s[k];
    const float *rl = w->blp + (size_t)r * T + (s->prompt_len - 1);
    const float *re = w->bent + (size_t)r * T + (s->prompt_len - 1);
    for (int t = 0; t < s->n_comp; t++)
        if (s->mask[t]) {
            w->ent_sum += re[t];
            w->ent_n++;
        }
    float *rd = w->bdl + (size_t)r * T;
    memset(rd, 0, (size_t)T * sizeof *rd);
    memcpy(w->lpc, rl, (size_t)s->n_comp * sizeof *w->lpc);
    if (!s->has_old) {
        memcpy(s->old, w->lpc, (size_t)s->n_comp * sizeof *w->lpc);
        s->has_old = true;
    }
    pt_grpo_loss_sample(&w->acc, w->dlc, w->lpc, s->old, s->has_ref ? s->ref : NULL, s->mask, s->n_comp,
                        w->adv[w->offset + k], &w->nm);
    memcpy(rd + (s->prompt_len - 1), w->dlc, (size_t)s->n_comp * sizeof *w->dlc);
}

/* Samples first .. end-1 (rows of them train, T wide): forward, loss,
 * backward.  *retry: the context holds fewer rows, rows_cap was halved and
 * nothing was done. */
static int micro_batch(grpo_run *w, int first, int end, int rows, int T, bool *retry)
{
    *retry = false;
    int r = 0;
    for (int k = first; k < end; k++)
        if (trains(w, k)) {
            pt_grpo_fill_row(w->bid + (size_t)r * T, w->btg + (size_t)r * T, &w->buf->s[k], T);
            r++;
        }
    int st = pt_grpo_forward_rows(w->ctx, w->bid, w->btg, rows, T, w->blp, w->bent);
    if (st == PT_EINVAL && rows > 1 && w->o->micro_batch == 0) {
        w->rows_cap = rows / 2; /* the context holds fewer rows: retry with half */
        *retry = true;
        return PT_OK;
    }
    if (st)
        return pt_err_prefix(st, "pt_grpo_step: forward of %d rows of %d tokens", rows, T);
    r = 0;
    for (int k = first; k < end; k++)
        if (trains(w, k))
            sample_loss(w, k, r++, T);
    w->fwd_tokens += (double)rows * T;
    return pt_model_backward(w->ctx, w->bdl);
}

/* Every micro-batch of the step, in buffer order, skipping the samples
 * with no loss tokens. */
static int micro_batches(grpo_run *w)
{
    size_t cells = (size_t)w->rows_cap * (size_t)w->maxlen;
    w->bid = pt_malloc_array(cells, sizeof *w->bid);
    w->btg = pt_malloc_array(cells, sizeof *w->btg);
    w->blp = pt_malloc_array(cells, sizeof *w->blp);
    w->bdl = pt_malloc_array(cells, sizeof *w->bdl);
    w->bent = pt_malloc_array(cells, sizeof *w->bent);
    if (!w->bid || !w->btg || !w->blp || !w->bdl || !w->bent)
        return pt_err(PT_ENOMEM, "pt_grpo_step: out of memory for %d rows of %d tokens", w->rows_cap, w->maxlen);
    int i = 0, batches = 0, st;
    while (i < w->n) {
        int rows = 0, T = 1, j = i;
        for (; j < w->n && rows < w->rows_cap; j++)
            if (trains(w, j)) {
                rows++;
                T = w->buf->s[j].n_ids > T ? w->buf->s[j].n_ids : T;
            }
        if (rows == 0) {
            i = j;
            continue;
        }
        if (batches > 0 && (st = pt_check_abort()))
            return st;
        bool retry;
        if ((st = micro_batch(w, i, j, rows, T, &retry)))
            return st;
        if (retry)
            continue;
        batches++;
        i = j;
    }
    return PT_OK;
}

/* The loss, KL, entropy, clipping and speed statistics of a finished
 * accumulation. */
static void finish_stats(pt_grpo_stats *stats, const grpo_run *w, double t0)
{
    const pt_grpo_acc *acc = &w->acc;
    stats->loss = acc->loss;
    stats->tokens = acc->tokens;
    stats->kl = acc->tokens > 0 ? acc->kl / acc->tokens : 0.0;
    stats->entropy = w->ent_n > 0 ? w->ent_sum / w->ent_n : 0.0;
    stats->clip_ratio_low = acc->tokens > 0 ? acc->clip_low / acc->tokens : 0.0;
    stats->clip_ratio_high = acc->tokens > 0 ? acc->clip_high / acc->tokens : 0.0;
    stats->clip_ratio_region = acc->tokens > 0 ? acc->clip_region / acc->tokens : 0.0;
    stats->train_seconds = now_seconds() - t0;
    stats->tokens_per_second = stats->train_seconds > 0 ? w->fwd_tokens / stats->train_seconds : 0.0;
}

/* With a job: the sums of this rank's accumulation added over every rank
 * (in rank order) in the collective that also agrees on the outcome. */
static int agree_sums(pt_dist *d, grpo_run *w, int st)
{
    double v[9] = { w->acc.loss, w->acc.tokens, w->acc.kl, w->acc.clip_low, w->acc.clip_high, w->acc.clip_region,
                    w->ent_sum, w->ent_n, w->fwd_tokens };
    st = pt_comm_agree_sum(NULL, d, st, v, 9, "pt_grpo_step");
    w->acc = (pt_grpo_acc){ v[0], v[1], v[2], v[3], v[4], v[5] };
    w->ent_sum = v[6];
    w->ent_n = v[7];
    w->fwd_tokens = v[8];
    return st;
}

int pt_grpo_accumulate(pt_grpo_stats *out, pt_context *ctx, pt_model *model, pt_rollout_buffer *buf,
                       const pt_grpo_options *o, pt_dist *d)
{
    double t0 = now_seconds();
    grpo_run w = { .o = o, .buf = buf, .all = buf, .ctx = ctx, .n = buf->n };
    bool refs_from_base = false;
    int st = check_options(o);
    if (!st && buf->n == 0)
        st = pt_err(PT_ESTATE, "pt_grpo_step: the buffer is empty");
    if (!st)
        st = check_samples(&w.maxlen, &refs_from_base, buf, model, o);
    /* with a job, every rank's samples (and outcome so far); from here on
     * every path of every rank reaches agree_sums */
    pt_rollout_buffer view;
    memset(&view, 0, sizeof view);
    if (d) {
        if ((st = pt_grpo_view_gather(&view, &w.offset, d, buf, st)))
            return st;
        w.all = &view;
    } else if (st) {
        return st;
    }
    pt_grpo_stats stats;
    pt_grpo_stats_init(&stats);
    int64_t unscored = 0;
    st = count_unscored(&unscored, w.all);
    if (!st && refs_from_base)
        st = fill_reference_from_base(buf, ctx, model);
    stats.samples_unscored = unscored;
    const size_t N = (size_t)w.all->n;
    if (!st) {
        w.R = pt_malloc_array(N, sizeof *w.R);
        w.adv = pt_malloc_array(N, sizeof *w.adv);
        w.zs = pt_malloc_array(N, sizeof *w.zs);
        w.lpc = pt_malloc_array((size_t)w.maxlen, sizeof *w.lpc);
        w.dlc = pt_malloc_array((size_t)w.maxlen, sizeof *w.dlc);
        if (!w.R || !w.adv || !w.zs || !w.lpc || !w.dlc)
            st = pt_err(PT_ENOMEM, "pt_grpo_step: out of memory");
    }
    if (!st)
        st = compute_advantages(&w, &stats);
    w.rows_cap = o->micro_batch > 0 ? o->micro_batch : w.n;
    if (!st && make_norm(&w) > 0)
        st = micro_batches(&w);
    if (d)
        st = agree_sums(d, &w, st);
    if (!st)
        finish_stats(&stats, &w, t0);
    if (st)
        pt_model_zero_grad(model);
    else
        *out = stats;
    run_free(&w);
    pt_grpo_view_free(&view);
    return st;
}

int pt_grpo_step(pt_grpo_stats *stats, pt_optimizer *opt, pt_context *ctx, pt_rollout_buffer *buf,
                 const pt_grpo_options *opts)
{
    PT_CHECK_NULL(opt);
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(buf);
    int st = PT_STRUCT_CHECK_OUT(stats, pt_grpo_stats, pt_grpo_stats_init);
    if (st || (st = pt_optimizer_check_context(opt, ctx, "pt_grpo_step")))
        return st;
    double t0 = now_seconds();
    pt_grpo_options o;
    if ((st = PT_STRUCT_READ(o, opts, pt_grpo_options_init)))
        return st;
    pt_dist *d = pt_optimizer_dist(opt);
    const double comm0 = pt_dist_comm_seconds(d);
    if (d) {
        int64_t step = 0;
        pt_optimizer_get_step(&step, opt);
        pt_dist_set_step(d, step + 1);
    }
    pt_grpo_stats local;
    pt_grpo_stats_init(&local);
    st = pt_grpo_accumulate(&local, ctx, pt_optimizer_model(opt), buf, &o, d);
    /* the gradients of every rank, summed (a step the finish will skip
     * for a non-finite loss or no tokens needs none) */
    if (!st && d && local.tokens > 0 && isfinite(local.loss))
        st = pt_dist_allreduce_grads(d, opt);
    const double fwd_tokens = local.tokens_per_second * local.train_seconds;
    pt_step_stats ss;
    int prev = pt_threads_enter(pt_context_get_num_threads(ctx)); /* the optimizer's loops */
    st = pt_train_finish_step(&ss, opt, st, local.tokens, local.loss);
    pt_threads_leave(prev);
    if (st)
        return st;
    PT_STEP_STATS_COPY(&local, &ss);
    /* the reported time is the whole step's, the optimizer update included */
    local.train_seconds = now_seconds() - t0;
    local.tokens_per_second = local.train_seconds > 0 ? fwd_tokens / local.train_seconds : 0.0;
    local.comm_seconds = pt_dist_comm_seconds(d) - comm0;
    pt_struct_write(stats, &local);
    return PT_OK;
}
