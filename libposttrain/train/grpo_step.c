/* The GRPO step: options, the checks of the buffer, advantages, forwards and
 * backwards over micro-batches through the per-token loss, then the
 * optimizer step shared with SFT (step_internal.h). */
#include "core/core.h"
#include "model/model.h"
#include "posttrain/lora.h"
#include "dist/dist_internal.h"
#include "train/grpo_internal.h"
#include "train/dist_train.h"
#include "train/optimizer.h"
#include "train/step_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* With LoRA, the reference policy is the frozen base: the reference
 * logprobs the samples lack come from forwards with the adapters switched
 * off (switched on again whatever happens). */
static int fill_reference_from_base(pt_rollout_buffer *buf, pt_context *ctx, pt_model *model, float temperature)
{
    int st = pt_model_set_lora_enabled(model, false);
    if (st)
        return st;
    st = pt__rollout_compute_logprobs(buf, ctx, PT_ROLLOUT_REF, true, temperature);
    pt_model_set_lora_enabled(model, true);
    return st ? pt__err_prefix(st, "pt_grpo_step: reference logprobs of the base model (adapters off)") : PT_OK;
}

static void run_free(grpo_run *w)
{
    free(w->R);
    free(w->adv);
    free(w->zs);
    free(w->seg_off);
    free(w->segadv);
    free(w->lpc);
    free(w->dlc);
    free(w->tadv);
    free(w->pw);
    free(w->seg_of);
    free(w->bid);
    free(w->btg);
    free(w->blp);
    free(w->bdl);
    free(w->bent);
    free(w->bde);
    free(w->plan);
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
    pt__grpo_make_norm(&w->nm, w->o, n_seq, n_tok);
    w->n_tok = n_tok;
    return n_tok;
}

/* The entropy bonus's normaliser (TRL): dapo, cispo, vespo: their token
 * count (global_tokens or the loss tokens), so the term sums to the mean
 * over the global batch; the others: the loss tokens the entropy mask
 * keeps (every rank's), a mean per step.  At least 1. */
static void entropy_norm(grpo_run *w)
{
    const int lt = w->o->loss_type;
    double n = lt == PT_GRPO_LOSS_DAPO || lt == PT_GRPO_LOSS_CISPO || lt == PT_GRPO_LOSS_VESPO ? w->nm.n_tokens
               : w->o->top_entropy_quantile < 1                                             ? w->ent_kept_all
                                                                                            : w->n_tok;
    w->ent_norm = n > 1 ? n : 1;
}

void pt__grpo_set_dlogp_hook(pt_rollout_buffer *buf, pt_grpo_dlogp_hook fn, void *payload)
{
    buf->dlogp_hook = fn;
    buf->dlogp_payload = fn ? payload : NULL;
}

/* Sample k's advantage of every completion token into w->tadv. */
static void token_advantages(grpo_run *w, int k)
{
    const grpo_sample *s = &w->buf->s[k];
    const int i = w->offset + k;
    if (s->kind == GRPO_KIND_ADVANTAGES) {
        for (int j = 0; j < s->n_comp; j++)
            w->tadv[j] = s->tadv[j];
    } else if (s->kind == GRPO_KIND_SEGMENTS) {
        pt__grpo_segments_of(w->seg_of, s->mask, s->n_comp);
        for (int j = 0; j < s->n_comp; j++)
            w->tadv[j] = w->seg_of[j] >= 0 ? w->segadv[w->seg_off[i] + w->seg_of[j]] : 0.0;
    } else {
        for (int j = 0; j < s->n_comp; j++)
            w->tadv[j] = w->adv[i];
    }
}

/* The loss of sample k, row r of the micro-batch of width T just forwarded:
 * its entropy summed, its old logprobs recorded when it had none, the
 * sampler correction and the entropy mask, its dL/dlogp written into the
 * row of bdl. */
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
        s->lp_temp[PT_ROLLOUT_OLD] = w->temp;
    }
    pt__grpo_is_weights(w->pw, &w->acc, s->old, s->samp, s->mask, s->n_comp, w->o);
    const double is_logsum =
        w->o->loss_type == PT_GRPO_LOSS_VESPO ? pt__grpo_vespo_is_logsum(w->pw, s->mask, s->n_comp) : 0.0;
    for (int t = 0; t < s->n_comp; t++)
        if (s->mask[t]) {
            bool keep = (double)re[t] >= w->ent_thr;
            w->acc.ent_kept += keep;
            if (keep) {
                w->eff_sum += re[t];
                w->eff_n++;
            }
            if (!keep)
                w->pw[t] = 0.0;
        }
    token_advantages(w, k);
    pt_grpo_tokens tk = { .n = s->n_comp, .logp = w->lpc, .old = s->old, .ref = s->has_ref ? s->ref : NULL,
                          .mask = s->mask, .adv = w->tadv, .pw = w->pw, .token_adv = s->kind != GRPO_KIND_REWARD,
                          .is_logsum = is_logsum };
    pt__grpo_loss_sample(&w->acc, w->dlc, &tk, &w->nm);
    if (w->ent_coef != 0) {
        /* TRL's entropy bonus, -coef * sum_t H_t m_t / ent_norm over the
         * loss tokens the entropy mask keeps: dL/dH_t = -coef / ent_norm */
        float *rde = w->bde + (size_t)r * T;
        memset(rde, 0, (size_t)T * sizeof *rde);
        const double c = w->ent_coef / w->ent_norm;
        for (int t = 0; t < s->n_comp; t++)
            if (s->mask[t] && (double)re[t] >= w->ent_thr) {
                rde[s->prompt_len - 1 + t] = (float)-c;
                w->acc.loss -= c * re[t];
            }
    }
    if (w->buf->dlogp_hook)
        w->buf->dlogp_hook(k, w->dlc, s->n_comp, w->buf->dlogp_payload);
    memcpy(rd + (s->prompt_len - 1), w->dlc, (size_t)s->n_comp * sizeof *w->dlc);
}

/* The samples with one advantage whose truncated completion is masked: no
 * loss tokens, yet TRL counts them (ratio 1: not clipped; vespo's phi 1)
 * among the samples of the sequence-level clip metrics and of vespo's
 * phi mean. */
static void masked_units(grpo_run *w)
{
    const bool vespo = w->o->loss_type == PT_GRPO_LOSS_VESPO;
    if (!w->o->mask_truncated_completions || !(vespo || w->o->importance_sampling_level == PT_GRPO_IS_SEQUENCE))
        return;
    for (int k = 0; k < w->n; k++) {
        const grpo_sample *s = &w->buf->s[k];
        if (!s->truncated || s->kind != GRPO_KIND_REWARD ||
            (w->o->drop_zero_std_groups && w->zs[w->offset + k]))
            continue;
        if (vespo) {
            w->acc.phi_sum += 1.0;
            w->acc.phi_units += 1.0;
        } else {
            w->acc.clip_units += 1.0;
        }
    }
}

/* Fill the rows of micro-batch m (its training samples). */
static void fill_rows(grpo_run *w, const grpo_mb *m)
{
    int r = 0;
    for (int k = m->first; k < m->end; k++)
        if (trains(w, k)) {
            pt__grpo_fill_row(w->bid + (size_t)r * m->T, w->btg + (size_t)r * m->T, &w->buf->s[k], m->T);
            r++;
        }
}

/* The forward of micro-batch m (logprobs and entropies into blp, bent).
 * *retry: the context holds fewer rows, rows_cap was halved and nothing
 * was done. */
static int mb_forward(grpo_run *w, const grpo_mb *m, bool *retry)
{
    *retry = false;
    fill_rows(w, m);
    int st = pt__grpo_forward_rows(w->ctx, w->bid, w->btg, m->rows, m->T, w->temp, w->blp, w->bent);
    if (st == PT_EINVAL && m->rows > 1 && w->o->micro_batch == 0 && !w->plan) {
        w->rows_cap = m->rows / 2; /* the context holds fewer rows: retry with half */
        *retry = true;
        return PT_OK;
    }
    return st ? pt__err_prefix(st, "pt_grpo_step: forward of %d rows of %d tokens", m->rows, m->T) : PT_OK;
}

/* The losses and backward of micro-batch m, forwarded last on the context. */
static int mb_train(grpo_run *w, const grpo_mb *m)
{
    int r = 0;
    for (int k = m->first; k < m->end; k++)
        if (trains(w, k))
            sample_loss(w, k, r++, m->T);
    w->fwd_tokens += (double)m->rows * m->T;
    return w->bde ? pt__ctx_backward_entropy(w->ctx, w->bdl, w->bde) : pt__ctx_backward(w->ctx, w->bdl);
}

/* The next micro-batch from sample i on: the training samples up to
 * rows_cap of them; rows 0 when none is left. */
static grpo_mb next_mb(const grpo_run *w, int i)
{
    grpo_mb m = { .first = i, .end = i, .rows = 0, .T = 1 };
    for (; m.end < w->n && m.rows < w->rows_cap; m.end++)
        if (trains(w, m.end)) {
            m.rows++;
            m.T = w->buf->s[m.end].n_ids > m.T ? w->buf->s[m.end].n_ids : m.T;
        }
    return m;
}

static int alloc_rows(grpo_run *w)
{
    size_t cells = (size_t)w->rows_cap * (size_t)w->maxlen;
    w->bid = pt__malloc_array(cells, sizeof *w->bid);
    w->btg = pt__malloc_array(cells, sizeof *w->btg);
    w->blp = pt__malloc_array(cells, sizeof *w->blp);
    w->bdl = pt__malloc_array(cells, sizeof *w->bdl);
    w->bent = pt__malloc_array(cells, sizeof *w->bent);
    w->bde = w->ent_coef != 0 ? pt__malloc_array(cells, sizeof *w->bde) : NULL;
    if (!w->bid || !w->btg || !w->blp || !w->bdl || !w->bent || (w->ent_coef != 0 && !w->bde))
        return pt__err(PT_ENOMEM, "pt_grpo_step: out of memory for %d rows of %d tokens", w->rows_cap, w->maxlen);
    return PT_OK;
}

/* Every micro-batch of the step, in buffer order, skipping the samples
 * with no loss tokens: forward, loss, backward.  After an entropy pass the
 * context still holds its last micro-batch, which goes first. */
static int micro_batches(grpo_run *w)
{
    int st;
    if (w->plan) {
        if (w->n_plan == 0) /* none of this rank's samples trains */
            return PT_OK;
        if ((st = mb_train(w, &w->plan[w->n_plan - 1])))
            return st;
        for (int p = 0; p + 1 < w->n_plan; p++) {
            bool retry;
            if ((st = pt_check_abort()) || (st = mb_forward(w, &w->plan[p], &retry)) ||
                (st = mb_train(w, &w->plan[p])))
                return st;
        }
        return PT_OK;
    }
    if ((st = alloc_rows(w)))
        return st;
    int i = 0, batches = 0;
    while (i < w->n) {
        grpo_mb m = next_mb(w, i);
        if (m.rows == 0) {
            i = m.end;
            continue;
        }
        if (batches > 0 && (st = pt_check_abort()))
            return st;
        bool retry;
        if ((st = mb_forward(w, &m, &retry)))
            return st;
        if (retry)
            continue;
        if ((st = mb_train(w, &m)))
            return st;
        batches++;
        i = m.end;
    }
    return PT_OK;
}

/* top_entropy_quantile < 1: a forward of every micro-batch (recorded in
 * w->plan) for the entropies of this rank's loss tokens, with every rank's
 * (a collective when d is set: every rank calls it, with its status so
 * far), and their quantile 1 - rho into w->ent_thr. */
static int entropy_pass(grpo_run *w, int st)
{
    float *vals = NULL;
    size_t nv = 0, cap = 0;
    if (!st && !(w->plan = pt__malloc_array((size_t)w->n + 1, sizeof *w->plan)))
        st = pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    if (!st)
        st = alloc_rows(w);
    int i = 0;
    while (!st && i < w->n) {
        grpo_mb m = next_mb(w, i);
        if (m.rows == 0) {
            i = m.end;
            continue;
        }
        bool retry;
        if ((w->n_plan > 0 && (st = pt_check_abort())) || (st = mb_forward(w, &m, &retry)))
            break;
        if (retry)
            continue;
        w->plan[w->n_plan++] = m;
        int r = 0;
        for (int k = m.first; k < m.end && !st; k++) {
            if (!trains(w, k))
                continue;
            const grpo_sample *s = &w->buf->s[k];
            const float *re = w->bent + (size_t)r++ * m.T + (s->prompt_len - 1);
            if (nv + (size_t)s->n_comp > cap) {
                size_t nc = 2 * (cap + (size_t)s->n_comp);
                float *nvp = realloc(vals, nc * sizeof *vals);
                if (!nvp) {
                    st = pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
                    break;
                }
                vals = nvp;
                cap = nc;
            }
            for (int t = 0; t < s->n_comp; t++)
                if (s->mask[t])
                    vals[nv++] = re[t];
        }
        i = m.end;
    }
    float *allv = vals;
    size_t nall = nv;
    if (w->d) {
        /* every rank's entropies, in rank order */
        double cnt = (double)nv;
        st = pt__comm_agree_sum(NULL, w->d, st, &cnt, 1, "pt_grpo_step");
        const int size = pt_dist_size(w->d);
        size_t *counts = st ? NULL : pt__malloc_array((size_t)size * 2, sizeof *counts);
        double *per = st ? NULL : pt__malloc_array((size_t)size, sizeof *per);
        double mine = (double)nv;
        allv = NULL;
        if (!st && (!counts || !per || !(allv = pt__malloc_array((size_t)cnt + 1, sizeof *allv))))
            st = PT_ENOMEM; /* the same sizes on every rank: every rank fails here, or none */
        if (!st)
            st = pt__comm_allgather(w->d, &mine, sizeof mine, per, "pt_grpo_step");
        if (!st) {
            size_t off = 0;
            for (int q = 0; q < size; q++) {
                counts[q] = (size_t)per[q] * sizeof *allv;
                counts[size + q] = off;
                off += counts[q];
            }
            nall = (size_t)cnt;
            st = pt__comm_allgatherv(w->d, vals, nv * sizeof *vals, allv, counts, counts + size, "pt_grpo_step");
        }
        free(counts);
        free(per);
        free(vals);
    }
    if (!st)
        w->ent_thr = nall > 0 ? pt__grpo_quantile(allv, nall, 1.0 - w->o->top_entropy_quantile) : INFINITY;
    /* the loss tokens the mask keeps, every rank's: the entropy bonus's mean */
    w->ent_kept_all = 0;
    for (size_t q = 0; !st && q < nall; q++)
        w->ent_kept_all += (double)allv[q] >= w->ent_thr;
    free(allv);
    return st;
}

/* The loss, KL, entropy, clipping, sampler and speed statistics of a
 * finished accumulation. */
/* TRL's entropy control: the entropy over the kept loss tokens and the
 * next coefficient (a step with no loss token leaves both as they were). */
static void entropy_control(pt_grpo_stats *stats, const grpo_run *w)
{
    const pt_grpo_options *o = w->o;
    stats->entropy_measured = w->eff_n > 0 ? w->eff_sum / w->eff_n : o->entropy_last;
    double c = o->entropy_coef;
    if (o->use_adaptive_entropy && w->eff_n > 0) {
        c = stats->entropy_measured <= o->entropy_target ? c + o->entropy_coef_delta : c - o->entropy_coef_delta;
        c = c < o->entropy_coef_min ? o->entropy_coef_min : c > o->entropy_coef_max ? o->entropy_coef_max : c;
    }
    stats->entropy_coef_next = c;
}

static void finish_stats(pt_grpo_stats *stats, const grpo_run *w, double t0)
{
    const pt_grpo_acc *acc = &w->acc;
    const double tok = acc->tokens;
    stats->loss = acc->loss;
    stats->tokens = tok;
    stats->kl = tok > 0 ? acc->kl / tok : 0.0;
    stats->entropy = w->ent_n > 0 ? w->ent_sum / w->ent_n : 0.0;
    entropy_control(stats, w);
    const double cu = acc->clip_units; /* loss tokens, or samples at sequence level */
    stats->clip_ratio_low = cu > 0 ? acc->clip_low / cu : 0.0;
    stats->clip_ratio_high = cu > 0 ? acc->clip_high / cu : 0.0;
    stats->clip_ratio_region = cu > 0 ? acc->clip_region / cu : 0.0;
    stats->cispo_clip_ratio = cu > 0 ? acc->cispo_clip / cu : 0.0;
    if (acc->phi_units > 0)
        stats->vespo_phi_seq_mean = acc->phi_sum / acc->phi_units;
    if (acc->samp_tokens > 0) {
        stats->sampling_logp_difference_mean = acc->samp_diff_sum / acc->samp_tokens;
        stats->sampling_logp_difference_max = acc->samp_diff_max;
    }
    if (acc->is_units > 0) {
        stats->importance_sampling_ratio_mean = acc->is_sum / acc->is_units;
        stats->importance_sampling_ratio_min = acc->is_min;
        stats->importance_sampling_ratio_max = acc->is_max;
        stats->importance_sampling_corrected_fraction = acc->is_corrected / acc->is_units;
    }
    if (w->o->top_entropy_quantile < 1) {
        stats->entropy_threshold = w->ent_thr;
        stats->entropy_kept_fraction = tok > 0 ? acc->ent_kept / tok : 1.0;
    }
    stats->train_seconds = pt__now() - t0;
    stats->tokens_per_second = stats->train_seconds > 0 ? w->fwd_tokens / stats->train_seconds : 0.0;
}

/* With a job: the sums of this rank's accumulation added over every rank
 * (in rank order) in the collective that also agrees on the outcome; then
 * the extremes. */
static int agree_sums(pt_dist *d, grpo_run *w, int st)
{
    pt_grpo_acc *a = &w->acc;
    double v[21] = { a->loss, a->tokens, a->kl, a->clip_low, a->clip_high, a->clip_region, w->ent_sum, w->ent_n,
                     w->fwd_tokens, a->cispo_clip, a->samp_tokens, a->samp_diff_sum, a->is_units, a->is_sum,
                     a->is_corrected, a->ent_kept, a->clip_units, a->phi_sum, a->phi_units, w->eff_sum, w->eff_n };
    st = pt__comm_agree_sum(NULL, d, st, v, 21, "pt_grpo_step");
    a->loss = v[0];
    a->tokens = v[1];
    a->kl = v[2];
    a->clip_low = v[3];
    a->clip_high = v[4];
    a->clip_region = v[5];
    w->ent_sum = v[6];
    w->ent_n = v[7];
    w->fwd_tokens = v[8];
    a->cispo_clip = v[9];
    a->samp_tokens = v[10];
    a->samp_diff_sum = v[11];
    a->is_units = v[12];
    a->is_sum = v[13];
    a->is_corrected = v[14];
    a->ent_kept = v[15];
    a->clip_units = v[16];
    a->phi_sum = v[17];
    a->phi_units = v[18];
    w->eff_sum = v[19];
    w->eff_n = v[20];
    if (st)
        return st;
    /* every rank agreed: every rank is here */
    double x[3] = { a->samp_diff_max, a->is_max, -a->is_min };
    st = pt__comm_allreduce_max_f64(d, x, 3, "pt_grpo_step");
    a->samp_diff_max = x[0];
    a->is_max = x[1];
    a->is_min = -x[2];
    return st;
}

int pt__grpo_accumulate(pt_grpo_stats *out, pt_context *ctx, pt_model *model, pt_rollout_buffer *buf,
                       const pt_grpo_options *o, pt_dist *d)
{
    double t0 = pt__now();
    grpo_run w = { .o = o, .buf = buf, .all = buf, .ctx = ctx, .d = d, .n = buf->n, .temp = (float)o->temperature,
                   .ent_thr = -INFINITY,
                   /* the bonus this step: adaptive, only when the last step's entropy is <= the target */
                   .ent_coef = !o->use_adaptive_entropy || o->entropy_last <= o->entropy_target ? o->entropy_coef
                                                                                               : 0.0 };
    w.acc.is_min = INFINITY;
    w.acc.is_max = -INFINITY;
    bool refs_from_base = false;
    int st = pt__grpo_check_options(o);
    if (!st && buf->n == 0)
        st = pt__err(PT_ESTATE, "pt_grpo_step: the buffer is empty");
    if (!st)
        st = pt__grpo_check_samples(&w.maxlen, &refs_from_base, buf, model, o);
    if (!st)
        st = pt__grpo_check_scored(buf);
    /* with a job, every rank's samples (and outcome so far); from here on
     * every path of every rank reaches agree_sums */
    pt_rollout_buffer view;
    memset(&view, 0, sizeof view);
    if (d) {
        if ((st = pt__grpo_view_gather(&view, &w.offset, d, buf, st)))
            return st;
        w.all = &view;
    } else if (st) {
        return st;
    }
    pt_grpo_stats stats;
    pt_grpo_stats_init(&stats);
    int64_t unscored = 0;
    pt__grpo_count_unscored(&unscored, w.all, o);
    /* nothing scored: no forward, no update (the same on every rank: the
     * view is global) */
    const bool no_rewards = unscored == w.all->n;
    if (!st && refs_from_base && !no_rewards)
        st = fill_reference_from_base(buf, ctx, model, w.temp);
    stats.samples_unscored = unscored;
    const size_t N = (size_t)w.all->n, L = (size_t)w.maxlen + 1;
    if (!st) {
        w.R = pt__malloc_array(N, sizeof *w.R);
        w.adv = pt__malloc_array(N, sizeof *w.adv);
        w.zs = pt__malloc_array(N, sizeof *w.zs);
        w.seg_off = pt__malloc_array(N, sizeof *w.seg_off);
        w.lpc = pt__malloc_array(L, sizeof *w.lpc);
        w.dlc = pt__malloc_array(L, sizeof *w.dlc);
        w.tadv = pt__malloc_array(L, sizeof *w.tadv);
        w.pw = pt__malloc_array(L, sizeof *w.pw);
        w.seg_of = pt__malloc_array(L, sizeof *w.seg_of);
        if (!w.R || !w.adv || !w.zs || !w.seg_off || !w.lpc || !w.dlc || !w.tadv || !w.pw || !w.seg_of)
            st = pt__err(PT_ENOMEM, "pt_grpo_step: out of memory");
    }
    if (!st && !no_rewards)
        st = pt__grpo_compute_advantages(&w, &stats);
    if (no_rewards) {
        stats.reward = stats.reward_std = NAN;
        stats.n_reward_funcs = w.all->k;
        for (int k = 0; k < w.all->k; k++)
            stats.reward_func_mean[k] = stats.reward_func_std[k] = NAN;
        stats.skip_reason = PT_SKIP_NO_REWARDS; /* for pt_grpo_step's finish */
        stats.entropy_measured = o->entropy_last;
        stats.entropy_coef_next = o->entropy_coef;
    }
    w.rows_cap = o->micro_batch > 0 ? o->micro_batch : w.n;
    /* the loss tokens of the global batch: the same on every rank; with a
     * job every rank takes part in the entropy pass's collectives, whatever
     * its outcome so far */
    const bool any_tokens = !st && !no_rewards && make_norm(&w) > 0;
    if (o->top_entropy_quantile < 1 && (any_tokens || (d && !no_rewards)))
        st = entropy_pass(&w, st);
    if (!st && any_tokens) {
        entropy_norm(&w);
        st = micro_batches(&w);
    }
    if (!st && any_tokens)
        masked_units(&w);
    if (d)
        st = agree_sums(d, &w, st);
    if (!st)
        finish_stats(&stats, &w, t0);
    if (st)
        pt_model_zero_grad(model);
    else
        *out = stats;
    run_free(&w);
    pt__grpo_view_free(&view);
    return st;
}

static int grpo_step(pt_grpo_stats *stats, pt_optimizer *opt, pt_context *ctx, pt_rollout_buffer *buf,
                     const pt_grpo_options *opts);

int pt_grpo_step(pt_grpo_stats *stats, pt_optimizer *opt, pt_context *ctx, pt_rollout_buffer *buf,
                 const pt_grpo_options *opts)
{
    PT_CHECK_NULL(opt);
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(buf);
    int st = pt__train_take(opt, ctx, __func__);
    if (st)
        return st;
    st = grpo_step(stats, opt, ctx, buf, opts);
    pt__train_give(opt, ctx);
    return st;
}

static int grpo_step(pt_grpo_stats *stats, pt_optimizer *opt, pt_context *ctx, pt_rollout_buffer *buf,
                     const pt_grpo_options *opts)
{
    int st = pt__struct_check_out(stats, sizeof(pt_grpo_stats), "pt_grpo_step", "pt_grpo_stats_init");
    if (st || (st = pt__rollout_check_not_scoring(buf, "pt_grpo_step")) ||
        (st = pt__optimizer_check_context(opt, ctx, "pt_grpo_step")))
        return st;
    double t0 = pt__now();
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    if ((st = pt__struct_read(&o, sizeof o, opts, "pt_grpo_step", "pt_grpo_options_init")))
        return st;
    pt_dist *d = pt__optimizer_dist(opt);
    const double comm0 = pt_dist_comm_seconds(d);
    if (d) {
        int64_t step = 0;
        step = pt_optimizer_step_count(opt);
        pt__dist_set_step(d, step + 1);
    }
    pt_grpo_stats local;
    pt_grpo_stats_init(&local);
    st = pt__grpo_accumulate(&local, ctx, pt__optimizer_model(opt), buf, &o, d);
    /* the gradients of every rank, summed (a step the finish will skip
     * for a non-finite loss or no tokens needs none) */
    if (!st && d && local.tokens > 0 && isfinite(local.loss))
        st = pt__dist_allreduce_grads(d, opt);
    const double fwd_tokens = local.tokens_per_second * local.train_seconds;
    pt_step_stats ss;
    int prev = pt__threads_enter(pt_context_get_num_threads(ctx)); /* the optimizer's loops */
    st = pt__train_finish_step(&ss, opt, st, local.skip_reason == PT_SKIP_NO_REWARDS, local.tokens, local.loss);
    pt__threads_leave(prev);
    if (st)
        return pt__err_in("pt_grpo_step", st);
    PT_STEP_STATS_COPY(&local, &ss);
    /* the reported time is the whole step's, the optimizer update included */
    local.train_seconds = pt__now() - t0;
    local.tokens_per_second = local.train_seconds > 0 ? fwd_tokens / local.train_seconds : 0.0;
    local.comm_seconds = pt_dist_comm_seconds(d) - comm0;
    pt__struct_write(stats, &local);
    return PT_OK;
}
