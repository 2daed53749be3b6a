/* The GRPO advantages, loss, dL/dlogp and metrics against PyTorch autograd
 * (tests/reference/gen_grpo.py, TRL's formulas in float64), and a case with
 * declined completions computed by hand. */
#include "testutil.h"

#include "core/core.h"
#include "io/fileio.h"
#include "train/grpo_internal.h"

#include <cjson/cJSON.h>
#include <math.h>

static cJSON *doc;

static const cJSON *item(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    ck_assert_msg(v != NULL, "golden lacks %s", k);
    return v;
}
static double num(const cJSON *o, const char *k)
{
    const cJSON *v = item(o, k);
    ck_assert_msg(cJSON_IsNumber(v) || cJSON_IsBool(v), "%s is not a number", k);
    return cJSON_IsBool(v) ? (double)cJSON_IsTrue(v) : v->valuedouble;
}
static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = item(o, k);
    ck_assert(cJSON_IsString(v));
    return v->valuestring;
}
static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    ck_abort_msg("unknown name %s", s);
    return -1;
}

/* worst relative errors over all cases, printed at the end */
static double worst_loss, worst_dlogp, worst_adv, worst_metric;

static void close_rel(double got, double want, double floor, double *worst, const char *what, const char *cs)
{
    double den = fmax(fabs(want), floor);
    double e = fabs(got - want) / den;
    if (e > *worst)
        *worst = e;
    ck_assert_msg(e <= 1e-6, "%s: %s is %.12g, torch %.12g (rel %.3g)", cs, what, got, want, e);
}

/* A float array of the golden (NULL stays NaN) into out (at most cap). */
static int floats(float *out, const cJSON *arr, int cap)
{
    int n = cJSON_GetArraySize(arr);
    ck_assert_int_le(n, cap);
    for (int j = 0; j < n; j++) {
        const cJSON *v = cJSON_GetArrayItem(arr, j);
        out[j] = cJSON_IsNull(v) ? NAN : (float)v->valuedouble;
    }
    return n;
}

/* The case's options from the golden. */
static void case_options(pt_grpo_options *o, const cJSON *cs)
{
    static const char *const scales[] = { "group", "batch", "none", "rloo" };
    static const char *const losses[] = { "grpo", "bnpo", "dapo", "dr_grpo", "cispo", "vespo" };
    static const char *const levels[] = { "token", "sequence" };
    pt_grpo_options_init(o);
    o->scale_rewards = lookup(str(cs, "scale"), scales, 4);
    o->loss_type = lookup(str(cs, "loss_type"), losses, 6);
    const cJSON *v = item(cs, "vespo");
    o->vespo_k_pos = cJSON_GetArrayItem(v, 0)->valuedouble;
    o->vespo_lambda_pos = cJSON_GetArrayItem(v, 1)->valuedouble;
    o->vespo_k_neg = cJSON_GetArrayItem(v, 2)->valuedouble;
    o->vespo_lambda_neg = cJSON_GetArrayItem(v, 3)->valuedouble;
    o->importance_sampling_level = lookup(str(cs, "level"), levels, 2);
    o->epsilon_low = num(cs, "eps_low");
    o->epsilon_high = num(cs, "eps_high");
    o->beta = num(cs, "beta");
    o->max_completion_length = (int)num(cs, "max_completion_length");
    o->overlong_buffer = (int)num(cs, "overlong_buffer");
    o->mask_truncated_completions = num(cs, "mask_truncated") != 0;
    o->drop_zero_std_groups = num(cs, "drop_zero_std") != 0;
    o->global_tokens = num(cs, "global_tokens");
    ck_assert_ok(pt_grpo_is_correction_from_name(&o->importance_sampling_correction, str(cs, "is_mode")));
    o->importance_sampling_clip_min = num(cs, "is_clip_min");
    o->importance_sampling_clip_max = num(cs, "is_clip_max");
    o->delta = num(cs, "delta");
    o->top_entropy_quantile = num(cs, "top_entropy_quantile");
}

enum { MAXS = 32, MAXT = 16 };

/* R against the golden's (null: declined, NaN here) */
static void close_R(double got, const cJSON *want, const char *what, const char *name)
{
    if (cJSON_IsNull(want)) {
        ck_assert_msg(isnan(got), "%s: %s is %g, torch has none (declined)", name, what, got);
        return;
    }
    close_rel(got, want->valuedouble, 1e-3, &worst_adv, what, name);
}

/* The reported reward's mean and std (TRL's nanmean, nanstd) and the two
 * zero-std fractions against the golden. */
static void reward_metrics(const double *R, int n, int tz, int nz, int ng, const cJSON *cs, const char *name)
{
    double mean, sd = pt__grpo_nan_mean_std(&mean, NULL, R, n);
    close_rel(mean, num(cs, "reward_mean"), 1e-3, &worst_metric, "reward", name);
    close_rel(sd, num(cs, "reward_std"), 1e-3, &worst_metric, "reward_std", name);
    close_rel((double)tz / n, num(cs, "frac_reward_zero_std"), 1e-3, &worst_metric, "frac_reward_zero_std", name);
    close_rel((double)nz / ng, num(cs, "frac_zero_std_groups"), 1e-3, &worst_metric, "frac_zero_std_groups", name);
}

/* Whether sample i is in the case's list of declined samples. */
static bool declined(const cJSON *cs, int i)
{
    const cJSON *d;
    cJSON_ArrayForEach(d, item(cs, "declined"))
        if (d->valueint == i)
            return true;
    return false;
}

/* The per-token advantages of every sample (adv_tok) by the case's kind,
 * checked against the golden's R, advantages and segment advantages;
 * zs[i]: its group is dropped when drop_zero_std. */
static void case_advantages(double (*adv_tok)[MAXT], bool *zs, const cJSON *cs, const cJSON *js, const double *w,
                            int K, const pt_grpo_options *o, const char *name)
{
    int n = cJSON_GetArraySize(js);
    const char *kind = str(cs, "advantages");
    double R[MAXS], adv[MAXS];
    int64_t grp[MAXS];
    int nz = -1, ng = 0;
    for (int i = 0; i < n; i++)
        grp[i] = (int64_t)num(cJSON_GetArrayItem(js, i), "group");
    if (!strcmp(kind, "tokens")) {
        for (int i = 0; i < n; i++) {
            float ta[MAXT];
            int nc = floats(ta, item(cJSON_GetArrayItem(js, i), "tadv"), MAXT);
            for (int j = 0; j < nc; j++)
                adv_tok[i][j] = ta[j];
            zs[i] = false;
        }
        close_rel(0.0, num(cs, "frac_reward_zero_std"), 1e-3, &worst_metric, "frac_reward_zero_std", name);
        close_rel(0.0, num(cs, "frac_zero_std_groups"), 1e-3, &worst_metric, "frac_zero_std_groups", name);
        return;
    }
    if (!strcmp(kind, "segments")) {
        double rew[MAXS * 4], sadv[MAXS * 4];
        int off[MAXS], nseg[MAXS], o_ = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *s = cJSON_GetArrayItem(js, i);
            float r[8];
            nseg[i] = floats(r, item(s, "seg_rewards"), 8);
            off[i] = o_;
            double sum = 0;
            bool any = false;
            int nc = cJSON_GetArraySize(item(s, "logp"));
            for (int k = 0; k < nseg[i]; k++) {
                rew[o_ + k] = r[k];
                if (k == nseg[i] - 1 && o->overlong_buffer > 0)
                    rew[o_ + k] += pt__grpo_overlong_penalty(nc, o->max_completion_length, o->overlong_buffer);
                if (!isnan(rew[o_ + k])) {
                    sum += rew[o_ + k];
                    any = true;
                }
            }
            o_ += nseg[i];
            R[i] = any ? sum : NAN; /* every segment declined: no reward */
            close_R(R[i], cJSON_GetArrayItem(item(cs, "R"), i), "R (segments)", name);
        }
        ng = pt__grpo_segment_advantages(sadv, zs, &nz, rew, off, nseg, grp, n, o->scale_rewards);
        ck_assert_int_eq(ng, 5);
        int tz = 0;
        for (int i = 0; i < n; i++)
            tz += zs[i];
        reward_metrics(R, n, tz, nz, ng, cs, name);
        for (int i = 0; i < n; i++) {
            const cJSON *s = cJSON_GetArrayItem(js, i), *want = cJSON_GetArrayItem(item(cs, "seg_adv"), i);
            ck_assert_int_eq(cJSON_GetArraySize(want), nseg[i]);
            for (int k = 0; k < nseg[i]; k++)
                close_rel(sadv[off[i] + k], cJSON_GetArrayItem(want, k)->valuedouble, 1e-3, &worst_adv,
                          "segment advantage", name);
            int nc = cJSON_GetArraySize(item(s, "logp")), seg_of[MAXT];
            uint8_t m[MAXT];
            for (int j = 0; j < nc; j++)
                m[j] = (uint8_t)cJSON_GetArrayItem(item(s, "mask"), j)->valueint;
            ck_assert_int_eq(pt__grpo_segments_of(seg_of, m, nc), nseg[i]);
            for (int j = 0; j < nc; j++)
                adv_tok[i][j] = seg_of[j] >= 0 ? sadv[off[i] + seg_of[j]] : 0.0;
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_GetArrayItem(js, i);
        float r[2];
        floats(r, item(s, "rewards"), 2);
        if (declined(cs, i))
            r[0] = r[1] = NAN;
        int nc = cJSON_GetArraySize(item(s, "logp"));
        /* every function declined and no over-long penalty to score it: no reward */
        R[i] = isnan(r[0]) && isnan(r[1]) && o->overlong_buffer == 0 ? NAN : pt__grpo_combine_rewards(r, w, K);
        if (o->overlong_buffer > 0)
            R[i] += pt__grpo_overlong_penalty(nc, o->max_completion_length, o->overlong_buffer);
        close_R(R[i], cJSON_GetArrayItem(item(cs, "R"), i), "R", name);
    }
    int tz = -1;
    ng = pt__grpo_advantages(adv, zs, &nz, &tz, R, grp, n, o->scale_rewards);
    ck_assert_int_eq(ng, 5);
    reward_metrics(R, n, tz, nz, ng, cs, name);
    for (int i = 0; i < n; i++) {
        close_rel(adv[i], cJSON_GetArrayItem(item(cs, "adv"), i)->valuedouble, 1e-3, &worst_adv, "advantage", name);
        for (int j = 0; j < MAXT; j++)
            adv_tok[i][j] = adv[i];
    }
}

/* An optional metric of the golden: NaN in C when the golden has none. */
static void opt_metric(double got, const cJSON *cs, const char *key, const char *name)
{
    if (!cJSON_GetObjectItemCaseSensitive(cs, key)) {
        ck_assert_msg(isnan(got), "%s: %s is %g, the golden has none", name, key, got);
        return;
    }
    close_rel(got, num(cs, key), 1e-6, &worst_metric, key, name);
}

START_TEST(test_against_torch)
{
    char *text;
    size_t len;
    ck_assert_ok(pt__read_file(&text, &len, PT_TEST_SRCDIR "/reference/grpo/grpo_golden.json", 1 << 24));
    doc = cJSON_ParseWithLength(text, len);
    free(text);
    ck_assert(doc != NULL);
    const cJSON *js = item(doc, "samples"), *jc = item(doc, "cases"), *jw = item(doc, "reward_weights");
    int n = cJSON_GetArraySize(js), K = cJSON_GetArraySize(jw);
    ck_assert_int_eq(n, 17);
    ck_assert_int_eq(K, 2);
    double w[2];
    for (int k = 0; k < K; k++)
        w[k] = cJSON_GetArrayItem(jw, k)->valuedouble;
    int ncases = cJSON_GetArraySize(jc);
    ck_assert_int_ge(ncases, 47);
    for (int c = 0; c < ncases; c++) {
        const cJSON *cs = cJSON_GetArrayItem(jc, c);
        const char *name = str(cs, "name");
        pt_grpo_options o;
        case_options(&o, cs);
        double adv_tok[MAXS][MAXT];
        bool zs[MAXS];
        case_advantages(adv_tok, zs, cs, js, w, K, &o, name);
        /* which samples train, the normalisers, the loss tokens' entropies */
        bool off[MAXS];
        double n_seq = 0, n_tok = 0;
        float ents[MAXS * MAXT];
        size_t nent = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *s = cJSON_GetArrayItem(js, i), *m = item(s, "mask");
            bool trunc = num(s, "truncated") != 0;
            off[i] = (o.drop_zero_std_groups && zs[i]) || (o.mask_truncated_completions && trunc);
            if (o.drop_zero_std_groups && zs[i])
                continue;
            n_seq++;
            if (off[i])
                continue;
            for (int j = 0; j < cJSON_GetArraySize(m); j++)
                if (cJSON_GetArrayItem(m, j)->valueint) {
                    n_tok++;
                    ents[nent++] = (float)cJSON_GetArrayItem(item(s, "ent"), j)->valuedouble;
                }
        }
        double thr = -INFINITY;
        if (o.top_entropy_quantile < 1) {
            thr = pt__grpo_quantile(ents, nent, 1.0 - o.top_entropy_quantile);
            close_rel(thr, num(cs, "entropy_threshold"), 1e-6, &worst_metric, "entropy threshold", name);
        }
        pt_grpo_norm nm;
        pt__grpo_make_norm(&nm, &o, n_seq, n_tok);
        pt_grpo_acc acc = { 0 };
        acc.is_min = INFINITY;
        acc.is_max = -INFINITY;
        double maxd = 0, kept = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *dl = cJSON_GetArrayItem(item(cs, "dlogp"), i);
            for (int j = 0; j < cJSON_GetArraySize(dl); j++)
                maxd = fmax(maxd, fabs(cJSON_GetArrayItem(dl, j)->valuedouble));
        }
        ck_assert_msg(maxd > 1e-4, "%s: the torch gradient is all zero", name);
        for (int i = 0; i < n; i++) {
            const cJSON *s = cJSON_GetArrayItem(js, i);
            float lp[MAXT], old[MAXT], ref[MAXT], samp[MAXT], ent[MAXT], dl[MAXT];
            int nc = floats(lp, item(s, "logp"), MAXT);
            floats(old, item(s, "old"), MAXT);
            floats(ref, item(s, "ref"), MAXT);
            floats(ent, item(s, "ent"), MAXT);
            bool has_samp = !cJSON_IsNull(item(s, "samp"));
            if (has_samp)
                floats(samp, item(s, "samp"), MAXT);
            uint8_t m[MAXT];
            for (int j = 0; j < nc; j++)
                m[j] = off[i] ? 0 : (uint8_t)cJSON_GetArrayItem(item(s, "mask"), j)->valueint;
            double pw[MAXT];
            double is_logsum = 0;
            if (!off[i])
                pt__grpo_is_weights(pw, &acc, old, has_samp ? samp : NULL, m, nc, &o);
            if (!off[i] && o.loss_type == PT_GRPO_LOSS_VESPO)
                is_logsum = pt__grpo_vespo_is_logsum(pw, m, nc);
            /* a masked truncated sample with one advantage: TRL counts it
             * among the sequences (ratio 1, phi 1), as the step does */
            const bool one_adv = !strcmp(str(cs, "advantages"), "rewards");
            if (off[i] && !(o.drop_zero_std_groups && zs[i]) && one_adv) {
                if (o.loss_type == PT_GRPO_LOSS_VESPO) {
                    acc.phi_sum += 1;
                    acc.phi_units += 1;
                } else if (o.importance_sampling_level == PT_GRPO_IS_SEQUENCE) {
                    acc.clip_units += 1;
                }
            }
            for (int j = 0; j < nc; j++)
                if (m[j] && !((double)ent[j] >= thr))
                    pw[j] = 0.0;
                else if (m[j])
                    kept++;
            pt_grpo_tokens tk = { .n = nc, .logp = lp, .old = old, .ref = ref, .mask = m, .adv = adv_tok[i],
                                  .pw = off[i] ? NULL : pw, .token_adv = !one_adv, .is_logsum = is_logsum };
            pt__grpo_loss_sample(&acc, dl, &tk, &nm);
            const cJSON *want = cJSON_GetArrayItem(item(cs, "dlogp"), i);
            ck_assert_int_eq(cJSON_GetArraySize(want), nc);
            for (int j = 0; j < nc; j++) {
                char what[64];
                snprintf(what, sizeof what, "dlogp[%d][%d]", i, j);
                close_rel(dl[j], cJSON_GetArrayItem(want, j)->valuedouble, 1e-3 * maxd, &worst_dlogp, what, name);
            }
        }
        close_rel(acc.loss, num(cs, "loss"), 1e-6, &worst_loss, "loss", name);
        ck_assert_double_eq(acc.tokens, num(cs, "tokens"));
        ck_assert_msg(kept == num(cs, "ent_kept"), "%s: %g tokens kept by the entropy mask, torch %g", name, kept,
                      num(cs, "ent_kept"));
        close_rel(acc.kl / acc.tokens, num(cs, "kl"), 1e-6, &worst_metric, "kl", name);
        close_rel(acc.clip_low / acc.clip_units, num(cs, "clip_low"), 1e-6, &worst_metric, "clip_low", name);
        close_rel(acc.clip_high / acc.clip_units, num(cs, "clip_high"), 1e-6, &worst_metric, "clip_high", name);
        close_rel(acc.clip_region / acc.clip_units, num(cs, "clip_region"), 1e-6, &worst_metric, "clip_region", name);
        close_rel(acc.cispo_clip / acc.clip_units, num(cs, "cispo_clip"), 1e-6, &worst_metric, "cispo_clip", name);
        opt_metric(acc.phi_units > 0 ? acc.phi_sum / acc.phi_units : NAN, cs, "phi_mean", name);
        opt_metric(acc.samp_tokens > 0 ? acc.samp_diff_sum / acc.samp_tokens : NAN, cs, "samp_diff_mean", name);
        opt_metric(acc.samp_tokens > 0 ? acc.samp_diff_max : NAN, cs, "samp_diff_max", name);
        opt_metric(acc.is_units > 0 ? acc.is_min : NAN, cs, "is_min", name);
        opt_metric(acc.is_units > 0 ? acc.is_sum / acc.is_units : NAN, cs, "is_mean", name);
        opt_metric(acc.is_units > 0 ? acc.is_max : NAN, cs, "is_max", name);
        opt_metric(acc.is_units > 0 ? acc.is_corrected / acc.is_units : NAN, cs, "is_corrected", name);
    }
    printf("grpo vs torch, worst relative errors over %d cases: loss %.3g, dlogp %.3g, R/advantages %.3g, "
           "metrics %.3g\n", ncases, worst_loss, worst_dlogp, worst_adv, worst_metric);
    cJSON_Delete(doc);
}
END_TEST

/* the pieces by hand: the over-long penalty and the tie rule of the clip */
START_TEST(test_overlong_and_clip)
{
    ck_assert_double_eq(pt__grpo_overlong_penalty(5, 8, 3), 0.0);
    ck_assert_double_eq_tol(pt__grpo_overlong_penalty(7, 8, 3), -2.0 / 3.0, 1e-15);
    ck_assert_double_eq_tol(pt__grpo_overlong_penalty(8, 8, 3), -1.0, 1e-15);
    ck_assert_double_eq(pt__grpo_overlong_penalty(9, 8, 3), -1.0);
    float r[3] = { 1.0f, NAN, 2.0f };
    double w[3] = { 1.0, 5.0, 0.25 };
    ck_assert_double_eq(pt__grpo_combine_rewards(r, w, 3), 1.5);
    /* r = 1: gradient -A/|o|/G per token; A > 0 and r above 1 + eps_high: 0 */
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.loss_type = PT_GRPO_LOSS_GRPO;
    pt_grpo_norm nm;
    pt__grpo_make_norm(&nm, &o, 2, 0);
    float lp[2] = { -1.0f, -2.0f }, old[2] = { -1.0f, -2.5f }, dl[2];
    uint8_t m[2] = { 1, 1 };
    pt_grpo_acc acc = { 0 };
    double ta[2] = { 0.7, 0.7 };
    pt_grpo_tokens tk = { .n = 2, .logp = lp, .old = old, .mask = m, .adv = ta };
    pt__grpo_loss_sample(&acc, dl, &tk, &nm);
    ck_assert_float_eq_tol(dl[0], (float)(-0.7 / 4.0), 1e-8f);
    ck_assert_float_eq(dl[1], 0.0f); /* exp(0.5) > 1.2 with A > 0: clipped */
    ck_assert_double_eq(acc.clip_high, 1.0);
    ck_assert_double_eq_tol(acc.loss, (-0.7 - 1.2 * 0.7) / 4.0, 1e-12);
}
END_TEST

/* the new pieces by hand: torch.quantile's interpolation, segments, the
 * correction's band ends, the two-sided clip's tie */
START_TEST(test_pieces_1x)
{
    float x[5] = { 4, 1, 3, 2, 5 };
    ck_assert_double_eq(pt__grpo_quantile(x, 5, 0.0), 1.0);
    ck_assert_double_eq(pt__grpo_quantile(x, 5, 1.0), 5.0);
    ck_assert_double_eq(pt__grpo_quantile(x, 5, 0.5), 3.0);
    ck_assert_double_eq_tol(pt__grpo_quantile(x, 5, 0.3), 2.2, 1e-15); /* 1.2 of the way from 1 */
    ck_assert_double_eq_tol(pt__grpo_quantile(x, 4, 0.8), 3.4, 1e-15);
    ck_assert(isnan(pt__grpo_quantile(x, 0, 0.5)));
    float one = 7;
    ck_assert_double_eq(pt__grpo_quantile(&one, 1, 0.9), 7.0);
    int seg[7];
    const uint8_t m[7] = { 0, 1, 1, 0, 1, 0, 1 };
    ck_assert_int_eq(pt__grpo_segments_of(seg, m, 7), 3);
    const int want[7] = { -1, 0, 0, -1, 1, -1, 2 };
    for (int j = 0; j < 7; j++)
        ck_assert_int_eq(seg[j], want[j]);
    ck_assert_int_eq(pt__grpo_segments_of(NULL, NULL, 4), 1);
    /* the band is closed: rho exactly at clip_max is kept, not counted */
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.importance_sampling_correction = PT_GRPO_IS_TOKEN_MASK;
    o.importance_sampling_clip_min = 0.5;
    o.importance_sampling_clip_max = 1.0;
    const float old[3] = { -1, -1, -1 }, samp[3] = { -1, -0.5f, -2 };
    const uint8_t mk[3] = { 1, 1, 1 };
    double w[3];
    pt_grpo_acc acc = { 0 };
    acc.is_min = INFINITY;
    acc.is_max = -INFINITY;
    pt__grpo_is_weights(w, &acc, old, samp, mk, 3, &o);
    ck_assert_double_eq(w[0], 1.0);
    ck_assert_double_eq(w[1], exp(-0.5));
    ck_assert_double_eq(w[2], 0.0); /* e > 1 */
    ck_assert_double_eq(acc.is_corrected, 1.0);
    ck_assert_double_eq(acc.samp_diff_max, 1.0);
    pt__grpo_is_weights(w, &acc, old, NULL, mk, 3, &o); /* no sampling values: weight 1, no metric */
    ck_assert(w[0] == 1 && w[1] == 1 && w[2] == 1);
    ck_assert_double_eq(acc.is_units, 3.0);
    /* two-sided clipping: A < 0 and r above delta: the capped ratio, no gradient */
    o.loss_type = PT_GRPO_LOSS_BNPO;
    o.delta = 1.5;
    pt_grpo_norm nm;
    pt__grpo_make_norm(&nm, &o, 1, 1);
    float lp[1] = { -1.0f }, od[1] = { -2.0f }, dl[1];
    double a[1] = { -1.0 };
    uint8_t m1[1] = { 1 };
    pt_grpo_tokens tk = { .n = 1, .logp = lp, .old = od, .mask = m1, .adv = a };
    pt_grpo_acc ac2 = { 0 };
    pt__grpo_loss_sample(&ac2, dl, &tk, &nm); /* r = e > delta: loss -min(-1.5, -1.2) = 1.5 */
    ck_assert_double_eq_tol(ac2.loss, 1.5, 1e-15);
    ck_assert_float_eq(dl[0], 0.0f);
    nm.delta = INFINITY; /* without it: -r A, gradient r */
    pt_grpo_acc ac3 = { 0 };
    pt__grpo_loss_sample(&ac3, dl, &tk, &nm);
    ck_assert_double_eq_tol(ac3.loss, exp(1.0), 1e-12);
    ck_assert_float_eq_tol(dl[0], (float)exp(1.0), 1e-6f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grpo_loss");
    TCase *tc = tcase_create("loss");
    tcase_add_test(tc, test_against_torch);
    tcase_add_test(tc, test_overlong_and_clip);
    tcase_add_test(tc, test_pieces_1x);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
