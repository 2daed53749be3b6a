/* The per-token GRPO loss: the clipped surrogate (with two-sided clipping)
 * or CISPO at token or sequence level, the k3 KL term, the loss type's
 * normalisation, the sampler correction's weights and the entropy
 * quantile (docs/grpo.md). */
#include "core/core.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stdlib.h>

void pt__grpo_make_norm(pt_grpo_norm *nm, const pt_grpo_options *o, double n_seq, double n_tok)
{
    nm->loss_type = o->loss_type;
    nm->level = o->importance_sampling_level;
    nm->eps_low = o->epsilon_low;
    nm->eps_high = o->epsilon_high;
    nm->beta = o->beta;
    nm->delta = o->delta > 0 ? o->delta : INFINITY;
    nm->n_seq = n_seq;
    bool global = (o->loss_type == PT_GRPO_LOSS_DAPO || o->loss_type == PT_GRPO_LOSS_CISPO ||
                   o->loss_type == PT_GRPO_LOSS_VESPO) && o->global_tokens > 0;
    nm->n_tokens = global ? o->global_tokens : n_tok;
    nm->dr_const = (o->global_samples > 0 ? o->global_samples : n_seq) * o->max_completion_length;
    nm->vk_pos = o->vespo_k_pos;
    nm->vk_neg = o->vespo_k_neg;
    nm->vl_pos = o->vespo_lambda_pos > 1e-4 ? o->vespo_lambda_pos : 1e-4;
    nm->vl_neg = o->vespo_lambda_neg > 1e-4 ? o->vespo_lambda_neg : 1e-4;
}

static double clampd(double x, double lo, double hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* log 1e-8: the floor of VESPO's log weights (TRL's get_gamma_weights) */
#define VESPO_LOG_FLOOR (-18.420680743952367)

double pt__grpo_vespo_is_logsum(double *pw, const uint8_t *mask, int n)
{
    double s = 0;
    for (int j = 0; j < n; j++)
        if (mask[j]) {
            s += clampd(log(pw[j]), VESPO_LOG_FLOOR, 20.0); /* log 0 = -inf: the floor */
            pw[j] = 1.0;
        }
    return s;
}

/* VESPO's log w of a sample: sum over its loss tokens of the log ratio
 * (each clamped to [-20, 20]) plus the correction's, clamped to
 * [log 1e-8, 20] (TRL's get_gamma_weights, which sums, not averages). */
static double vespo_log_w(const pt_grpo_tokens *t)
{
    double s = 0;
    for (int j = 0; j < t->n; j++)
        if (t->mask[j])
            s += clampd((double)t->logp[j] - (double)t->old[j], -20.0, 20.0);
    return clampd(s + t->is_logsum, VESPO_LOG_FLOOR, 20.0);
}

/* phi(w) = exp(lambda + k log w - lambda w) with k, lambda by the sign of
 * the advantage; non-finite values are 0 (TRL's nan_to_num). */
static double vespo_phi(double log_w, double a, const pt_grpo_norm *nm)
{
    double k = a >= 0 ? nm->vk_pos : nm->vk_neg, l = a >= 0 ? nm->vl_pos : nm->vl_neg;
    double phi = exp(l + k * log_w - l * exp(log_w));
    return isfinite(phi) ? phi : 0.0;
}

/* -min(min(r, delta) A, clip(r) A) and its derivative in r, as torch's
 * autograd gives it: clamp passes the gradient inside its bounds (ends
 * included), min splits a tie evenly between its arguments. */
static double surrogate(double *dl_dr, double r, double a, double lo, double hi, double delta)
{
    double r1 = r > delta ? delta : r, d1 = r <= delta ? 1.0 : 0.0;
    double rc = r < lo ? lo : r > hi ? hi : r, d2 = (r >= lo && r <= hi) ? 1.0 : 0.0;
    double l1 = r1 * a, l2 = rc * a;
    if (l1 < l2) {
        *dl_dr = -a * d1;
        return -l1;
    }
    if (l1 > l2) {
        *dl_dr = -a * d2;
        return -l2;
    }
    *dl_dr = -0.5 * a * (d1 + d2);
    return -l1;
}

/* The weight of each loss token of a sample with cnt of them: the loss
 * type's normaliser. */
static double token_weight(const pt_grpo_norm *nm, int cnt)
{
    switch (nm->loss_type) {
    case PT_GRPO_LOSS_GRPO:
        return 1.0 / (nm->n_seq * cnt);
    case PT_GRPO_LOSS_DR_GRPO:
        return 1.0 / nm->dr_const;
    default:
        return 1.0 / nm->n_tokens;
    }
}

void pt__grpo_loss_sample(pt_grpo_acc *acc, float *dlogp, const pt_grpo_tokens *t, const pt_grpo_norm *nm)
{
    const int n = t->n;
    int cnt = 0;
    for (int j = 0; j < n; j++) {
        dlogp[j] = 0.0f;
        cnt += t->mask[j] != 0;
    }
    if (cnt == 0)
        return;
    const double w = token_weight(nm, cnt);
    const double lo = 1.0 - nm->eps_low, hi = 1.0 + nm->eps_high;
    const bool cispo = nm->loss_type == PT_GRPO_LOSS_CISPO, vespo = nm->loss_type == PT_GRPO_LOSS_VESPO;
    const bool seq = nm->level == PT_GRPO_IS_SEQUENCE && !vespo; /* vespo has its own sequence weight */
    /* GSPO: s = exp(mean (logp - old)); d l_u / d logp_t = dl_u/ds * s / cnt
     * for every loss token t, so each token's gradient is (s / cnt) times the
     * sum over u of the weighted dl_u/ds */
    double seq_r = 0, seq_g = 0;
    if (seq) {
        double sum = 0;
        for (int j = 0; j < n; j++)
            if (t->mask[j])
                sum += (double)t->logp[j] - (double)t->old[j];
        seq_r = exp(sum / cnt);
        if (!cispo) {
            for (int j = 0; j < n; j++)
                if (t->mask[j]) {
                    double dl;
                    surrogate(&dl, seq_r, t->adv[j], lo, hi, nm->delta);
                    seq_g += (t->pw ? t->pw[j] : 1.0) * dl;
                }
            seq_g *= seq_r / cnt;
        }
    }
    const double log_w = vespo ? vespo_log_w(t) : 0.0;
    double lsum = 0, c_low = 0, c_high = 0, c_region = 0, c_cispo = 0, phi_sum = 0, phi_one = 0;
    for (int j = 0; j < n; j++) {
        if (!t->mask[j])
            continue;
        const double a = t->adv[j], pw = t->pw ? t->pw[j] : 1.0;
        double r = seq ? seq_r : exp((double)t->logp[j] - (double)t->old[j]);
        double l, g;
        if (vespo) {
            /* -sg[phi(w)] A log pi: phi is detached */
            double phi = vespo_phi(log_w, a, nm);
            l = -phi * a * (double)t->logp[j] * pw;
            g = -phi * a * pw;
            phi_sum += phi;
            phi_one = phi; /* one advantage: the same on every token */
        } else if (cispo) {
            /* -sg[min(r, eps_high)] A log pi: the gradient does not go
             * through the (detached) ratio */
            double c = r < nm->eps_high ? r : nm->eps_high;
            l = -c * a * (double)t->logp[j] * pw;
            g = -c * a * pw;
            c_cispo += r > nm->eps_high && a > 0;
        } else {
            double dl_dr;
            l = surrogate(&dl_dr, r, a, lo, hi, nm->delta) * pw;
            g = seq ? seq_g : dl_dr * r * pw;
            /* TRL counts with the ratio capped at delta */
            double rm = r > nm->delta ? nm->delta : r;
            bool low = rm < lo && a < 0, high = rm > hi && a > 0;
            c_low += low;
            c_high += high;
            c_region += low || high;
        }
        if (t->ref) {
            double d = (double)t->ref[j] - (double)t->logp[j], e = exp(d);
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
    /* the clip metrics per token; at sequence level with one advantage per
     * sample, per sample (every token has the same ratio and advantage), as
     * TRL counts them; vespo's phi likewise per sample */
    const bool per_sample = !t->token_adv;
    if (seq && per_sample) {
        acc->clip_low += c_low > 0;
        acc->clip_high += c_high > 0;
        acc->clip_region += c_region > 0;
        acc->cispo_clip += c_cispo > 0;
        acc->clip_units += 1;
    } else {
        acc->clip_low += c_low;
        acc->clip_high += c_high;
        acc->clip_region += c_region;
        acc->cispo_clip += c_cispo;
        acc->clip_units += cnt;
    }
    if (vespo) {
        acc->phi_sum += per_sample ? phi_one : phi_sum;
        acc->phi_units += per_sample ? 1 : cnt;
    }
}

/* rho inside [lo, hi]: kept (mask modes), or clamped (truncate modes);
 * *changed when it was not left as it was. */
static double correct(double rho, int mode, double lo, double hi, bool *changed)
{
    bool mask = mode == PT_GRPO_IS_TOKEN_MASK || mode == PT_GRPO_IS_SEQUENCE_MASK;
    if (rho >= lo && rho <= hi) {
        *changed = false;
        return rho;
    }
    *changed = true;
    return mask ? 0.0 : rho < lo ? lo : hi;
}

void pt__grpo_is_weights(double *w, pt_grpo_acc *acc, const float *old, const float *samp, const uint8_t *mask, int n,
                        const pt_grpo_options *o)
{
    for (int j = 0; j < n; j++)
        w[j] = 1.0;
    if (!samp)
        return;
    double sum = 0;
    for (int j = 0; j < n; j++)
        if (mask[j]) {
            double d = (double)old[j] - (double)samp[j];
            sum += d;
            acc->samp_tokens++;
            acc->samp_diff_sum += fabs(d);
            acc->samp_diff_max = fabs(d) > acc->samp_diff_max ? fabs(d) : acc->samp_diff_max;
        }
    const int mode = o->importance_sampling_correction;
    if (mode == PT_GRPO_IS_CORRECTION_NONE)
        return;
    const double lo = o->importance_sampling_clip_min, hi = o->importance_sampling_clip_max;
    const bool seq = mode == PT_GRPO_IS_SEQUENCE_TRUNCATE || mode == PT_GRPO_IS_SEQUENCE_MASK;
    bool changed;
    double ws = seq ? correct(exp(sum), mode, lo, hi, &changed) : 0;
    if (seq) {
        acc->is_units++;
        acc->is_sum += ws;
        acc->is_corrected += changed;
        acc->is_min = ws < acc->is_min ? ws : acc->is_min;
        acc->is_max = ws > acc->is_max ? ws : acc->is_max;
    }
    for (int j = 0; j < n; j++) {
        if (!mask[j])
            continue;
        if (seq) {
            w[j] = ws;
            continue;
        }
        w[j] = correct(exp((double)old[j] - (double)samp[j]), mode, lo, hi, &changed);
        acc->is_units++;
        acc->is_sum += w[j];
        acc->is_corrected += changed;
        acc->is_min = w[j] < acc->is_min ? w[j] : acc->is_min;
        acc->is_max = w[j] > acc->is_max ? w[j] : acc->is_max;
    }
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double pt__grpo_quantile(float *x, size_t n, double q)
{
    if (n == 0)
        return NAN;
    qsort(x, n, sizeof *x, cmp_float);
    /* torch.quantile, interpolation "linear": position q (n - 1) between
     * its two neighbours, with torch's lerp */
    double pos = q * (double)(n - 1);
    size_t i = (size_t)floor(pos), k = i + 1 < n ? i + 1 : i;
    double wgt = pos - (double)i, a = x[i], b = x[k];
    return wgt < 0.5 ? a + wgt * (b - a) : b - (b - a) * (1.0 - wgt);
}

static const pt_enum_entry k_grpo_loss_type_names[] = {
    { PT_GRPO_LOSS_GRPO, "grpo" },
    { PT_GRPO_LOSS_BNPO, "bnpo" },
    { PT_GRPO_LOSS_DAPO, "dapo" },
    { PT_GRPO_LOSS_DR_GRPO, "dr_grpo" },
    { PT_GRPO_LOSS_CISPO, "cispo" },
    { PT_GRPO_LOSS_VESPO, "vespo" },
};
PT_ENUM_NAME_FUNCS(pt_grpo_loss_type, k_grpo_loss_type_names, "loss type")

static const pt_enum_entry k_grpo_is_level_names[] = {
    { PT_GRPO_IS_TOKEN, "token" },
    { PT_GRPO_IS_SEQUENCE, "sequence" },
};
PT_ENUM_NAME_FUNCS(pt_grpo_is_level, k_grpo_is_level_names, "importance sampling level")

static const pt_enum_entry k_grpo_is_correction_names[] = {
    { PT_GRPO_IS_CORRECTION_NONE, "none" },
    { PT_GRPO_IS_TOKEN_TRUNCATE, "token_truncate" },
    { PT_GRPO_IS_TOKEN_MASK, "token_mask" },
    { PT_GRPO_IS_SEQUENCE_TRUNCATE, "sequence_truncate" },
    { PT_GRPO_IS_SEQUENCE_MASK, "sequence_mask" },
};
PT_ENUM_NAME_FUNCS(pt_grpo_is_correction, k_grpo_is_correction_names, "importance sampling correction")
