/* The GRPO advantages, loss, dL/dlogp and metrics against PyTorch autograd
 * (tests/reference/gen_grpo.py, TRL's formulas in float64). */
#include "testutil.h"

#include "core/core.h"
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

START_TEST(test_against_torch)
{
    char *text;
    size_t len;
    ck_assert_ok(pt_read_file(&text, &len, PT_TEST_SRCDIR "/reference/grpo/grpo_golden.json", 1 << 24));
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
    ck_assert_int_ge(ncases, 16);
    static const char *const scales[] = { "group", "batch", "none", "rloo" };
    static const char *const losses[] = { "grpo", "bnpo", "dapo", "dr_grpo" };
    static const char *const levels[] = { "token", "sequence" };
    for (int c = 0; c < ncases; c++) {
        const cJSON *cs = cJSON_GetArrayItem(jc, c);
        const char *name = str(cs, "name");
        pt_grpo_options o;
        pt_grpo_options_init(&o);
        o.scale_rewards = lookup(str(cs, "scale"), scales, 4);
        o.loss_type = lookup(str(cs, "loss_type"), losses, 4);
        o.importance_sampling_level = lookup(str(cs, "level"), levels, 2);
        o.epsilon_low = num(cs, "eps_low");
        o.epsilon_high = num(cs, "eps_high");
        o.beta = num(cs, "beta");
        o.max_completion_length = (int)num(cs, "max_completion_length");
        o.overlong_buffer = (int)num(cs, "overlong_buffer");
        o.mask_truncated_completions = num(cs, "mask_truncated") != 0;
        o.drop_zero_std_groups = num(cs, "drop_zero_std") != 0;
        o.global_tokens = num(cs, "global_tokens");
        double R[32], adv[32];
        bool zs[32];
        int64_t grp[32];
        for (int i = 0; i < n; i++) {
            const cJSON *s = cJSON_GetArrayItem(js, i);
            float r[2];
            for (int k = 0; k < K; k++) {
                const cJSON *v = cJSON_GetArrayItem(item(s, "rewards"), k);
                r[k] = cJSON_IsNull(v) ? NAN : (float)v->valuedouble;
            }
            int nc = cJSON_GetArraySize(item(s, "logp"));
            R[i] = pt_grpo_combine_rewards(r, w, K);
            if (o.overlong_buffer > 0)
                R[i] += pt_grpo_overlong_penalty(nc, o.max_completion_length, o.overlong_buffer);
            grp[i] = (int64_t)num(s, "group");
            close_rel(R[i], cJSON_GetArrayItem(item(cs, "R"), i)->valuedouble, 1e-3, &worst_adv, "R", name);
        }
        int nz = -1;
        int ng = pt_grpo_advantages(adv, zs, &nz, R, grp, n, o.scale_rewards);
        ck_assert_int_eq(ng, 5);
        close_rel((double)nz / ng, num(cs, "frac_zero_std"), 1e-3, &worst_metric, "frac_zero_std", name);
        double n_seq = 0, n_tok = 0;
        for (int i = 0; i < n; i++) {
            close_rel(adv[i], cJSON_GetArrayItem(item(cs, "adv"), i)->valuedouble, 1e-3, &worst_adv, "advantage",
                      name);
            const cJSON *s = cJSON_GetArrayItem(js, i);
            if (o.drop_zero_std_groups && zs[i])
                continue;
            n_seq++;
            if (!(o.mask_truncated_completions && num(s, "truncated") != 0)) {
                const cJSON *m = item(s, "mask");
                for (int j = 0; j < cJSON_GetArraySize(m); j++)
                    n_tok += cJSON_GetArrayItem(m, j)->valuedouble;
            }
        }
        pt_grpo_norm nm;
        pt_grpo_make_norm(&nm, &o, n_seq, n_tok);
        pt_grpo_acc acc = { 0 };
        double maxd = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *dl = cJSON_GetArrayItem(item(cs, "dlogp"), i);
            for (int j = 0; j < cJSON_GetArraySize(dl); j++)
                maxd = fmax(maxd, fabs(cJSON_GetArrayItem(dl, j)->valuedouble));
        }
        ck_assert_msg(maxd > 1e-4, "%s: the torch gradient is all zero", name);
        for (int i = 0; i < n; i++) {
            const cJSON *s = cJSON_GetArrayItem(js, i);
            int nc = cJSON_GetArraySize(item(s, "logp"));
            float lp[16], old[16], ref[16], dl[16];
            uint8_t m[16];
            bool off = (o.drop_zero_std_groups && zs[i]) || (o.mask_truncated_completions && num(s, "truncated") != 0);
            for (int j = 0; j < nc; j++) {
                lp[j] = (float)cJSON_GetArrayItem(item(s, "logp"), j)->valuedouble;
                old[j] = (float)cJSON_GetArrayItem(item(s, "old"), j)->valuedouble;
                ref[j] = (float)cJSON_GetArrayItem(item(s, "ref"), j)->valuedouble;
                m[j] = off ? 0 : (uint8_t)cJSON_GetArrayItem(item(s, "mask"), j)->valueint;
            }
            pt_grpo_loss_sample(&acc, dl, lp, old, ref, m, nc, adv[i], &nm);
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
        close_rel(acc.kl / acc.tokens, num(cs, "kl"), 1e-6, &worst_metric, "kl", name);
        close_rel(acc.clip_low / acc.tokens, num(cs, "clip_low"), 1e-6, &worst_metric, "clip_low", name);
        close_rel(acc.clip_high / acc.tokens, num(cs, "clip_high"), 1e-6, &worst_metric, "clip_high", name);
        close_rel(acc.clip_region / acc.tokens, num(cs, "clip_region"), 1e-6, &worst_metric, "clip_region", name);
    }
    printf("grpo vs torch, worst relative errors over %d cases: loss %.3g, dlogp %.3g, R/advantages %.3g, "
           "metrics %.3g\n", ncases, worst_loss, worst_dlogp, worst_adv, worst_metric);
    cJSON_Delete(doc);
}
END_TEST

/* the pieces by hand: the over-long penalty and the tie rule of the clip */
START_TEST(test_overlong_and_clip)
{
    ck_assert_double_eq(pt_grpo_overlong_penalty(5, 8, 3), 0.0);
    ck_assert_double_eq_tol(pt_grpo_overlong_penalty(7, 8, 3), -2.0 / 3.0, 1e-15);
    ck_assert_double_eq_tol(pt_grpo_overlong_penalty(8, 8, 3), -1.0, 1e-15);
    ck_assert_double_eq(pt_grpo_overlong_penalty(9, 8, 3), -1.0);
    float r[3] = { 1.0f, NAN, 2.0f };
    double w[3] = { 1.0, 5.0, 0.25 };
    ck_assert_double_eq(pt_grpo_combine_rewards(r, w, 3), 1.5);
    /* r = 1: gradient -A/|o|/G per token; A > 0 and r above 1 + eps_high: 0 */
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.loss_type = PT_GRPO_LOSS_GRPO;
    pt_grpo_norm nm;
    pt_grpo_make_norm(&nm, &o, 2, 0);
    float lp[2] = { -1.0f, -2.0f }, old[2] = { -1.0f, -2.5f }, dl[2];
    uint8_t m[2] = { 1, 1 };
    pt_grpo_acc acc = { 0 };
    pt_grpo_loss_sample(&acc, dl, lp, old, NULL, m, 2, 0.7, &nm);
    ck_assert_float_eq_tol(dl[0], (float)(-0.7 / 4.0), 1e-8f);
    ck_assert_float_eq(dl[1], 0.0f); /* exp(0.5) > 1.2 with A > 0: clipped */
    ck_assert_double_eq(acc.clip_high, 1.0);
    ck_assert_double_eq_tol(acc.loss, (-0.7 - 1.2 * 0.7) / 4.0, 1e-12);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grpo_loss");
    TCase *tc = tcase_create("loss");
    tcase_add_test(tc, test_against_torch);
    tcase_add_test(tc, test_overlong_and_clip);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
