/* The per-token GRPO loss: the clipped surrogate at token or sequence
 * level, the k3 KL term, and the loss type's normalisation (docs/grpo.md). */
#include "core/core.h"
#include "train/grpo_internal.h"

#include <math.h>

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
    double w = token_weight(nm, cnt);
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

static const pt_enum_entry k_grpo_loss_type_names[] = {
    { PT_GRPO_LOSS_GRPO, "grpo" },
    { PT_GRPO_LOSS_BNPO, "bnpo" },
    { PT_GRPO_LOSS_DAPO, "dapo" },
    { PT_GRPO_LOSS_DR_GRPO, "dr_grpo" },
};
PT_ENUM_NAME_FUNCS(pt_grpo_loss_type, k_grpo_loss_type_names, "loss type")

static const pt_enum_entry k_grpo_is_level_names[] = {
    { PT_GRPO_IS_TOKEN, "token" },
    { PT_GRPO_IS_SEQUENCE, "sequence" },
};
PT_ENUM_NAME_FUNCS(pt_grpo_is_level, k_grpo_is_level_names, "importance sampling level")
