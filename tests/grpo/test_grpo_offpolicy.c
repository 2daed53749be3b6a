/* pt_grpo_step against its sampler and beyond one reward per sample, on a
 * tiny model: training at the sampling temperature (a fully on-policy step
 * at T = 0.5 has ratio 1), the sampler's log-probabilities and the
 * importance-sampling correction of stale rollouts (its weights and metrics
 * by hand), the entropy quantile over several micro-batches, per-segment
 * rewards that do not reinforce a wrong turn, per-token advantages used as
 * given, central differences of the full objective with every new option,
 * and every bad option and sample. */
#include "testutil.h"

#include "core/core.h"
#include "model/model.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stddef.h>

#define V 37
#define PL 3   /* prompt length */
#define NP 4   /* prompts */
#define G 4    /* completions per prompt */
#define NR (NP * G)
#define MNT 8  /* new tokens */

/* ---- rollouts ------------------------------------------------------------------- */

typedef struct rollouts {
    int32_t prompts[NR * PL], lens[NR], tok[NR * MNT], nt[NR], fin[NR];
    float lp[NR * MNT];
} rollouts;

static void generate(rollouts *r, pt_model *m, float temperature, uint64_t seed)
{
    pt_generator *gen;
    ck_assert_ok(pt_generator_create(&gen, m, NR, PL + MNT));
    for (int i = 0; i < NR; i++) {
        for (int t = 0; t < PL; t++)
            r->prompts[i * PL + t] = (int32_t)(5 + 3 * (i / G) + t);
        r->lens[i] = PL;
    }
    pt_generate_options go;
    pt_generate_options_init(&go);
    go.max_new_tokens = MNT;
    go.n_stop_ids = 0;
    go.temperature = temperature;
    go.seed = seed;
    ck_assert_ok(pt_generate(gen, r->prompts, r->lens, NR, &go, r->tok, r->nt, r->fin, r->lp));
    pt_generator_free(gen);
}

static void sample_ids(int32_t *ids, const rollouts *r, int i)
{
    memcpy(ids, r->prompts + i * PL, PL * sizeof *ids);
    memcpy(ids + PL, r->tok + i * MNT, (size_t)r->nt[i] * sizeof *ids);
}

/* A buffer of the rollouts: old and sampling log-probabilities as asked,
 * rewards from the first completion token. */
static pt_rollout_buffer *rollout_buffer(const rollouts *r, bool old, bool sampling)
{
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    for (int i = 0; i < NR; i++) {
        int32_t ids[PL + MNT];
        sample_ids(ids, r, i);
        float rew = r->tok[i * MNT] < V / 2 ? 1.0f : (float)(r->tok[i * MNT + 1] % 3) * 0.25f;
        pt_rollout_sample s;
        pt_rollout_sample_init(&s);
        s.ids = ids;
        s.n_ids = PL + r->nt[i];
        s.prompt_len = PL;
        s.old_logprobs = old ? r->lp + i * MNT : NULL;
        s.sampling_logprobs = sampling ? r->lp + i * MNT : NULL;
        s.group = i / G;
        s.rewards = &rew;
        ck_assert_ok(pt_rollout_buffer_add(buf, &s));
    }
    return buf;
}

/* The most a forward at temperature T differs from the rollouts' logprobs. */
static double forward_vs_rollouts(pt_model *m, const rollouts *r, float T)
{
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, PL + MNT));
    double worst = 0;
    for (int i = 0; i < NR; i++) {
        int32_t ids[PL + MNT], tg[PL + MNT];
        float lp[PL + MNT];
        sample_ids(ids, r, i);
        int n = PL + r->nt[i];
        for (int t = 0; t < n; t++)
            tg[t] = t + 1 < n ? ids[t + 1] : -1;
        pt_batch b = pt_test_row_batch(ids, tg, n);
        b.temperature = T;
        ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
        for (int j = 0; j < r->nt[i]; j++)
            worst = fmax(worst, fabs((double)lp[PL - 1 + j] - (double)r->lp[i * MNT + j]));
    }
    pt_context_free(ctx);
    return worst;
}

/* ---- dL/dlogp of the step --------------------------------------------------------- */

typedef struct dl_rec {
    float d[64][16];
    int n[64], calls;
} dl_rec;

static void record_dlogp(int sample, const float *dlogp, int n, void *payload)
{
    dl_rec *r = payload;
    ck_assert(sample >= 0 && sample < 64 && n <= 16);
    memcpy(r->d[sample], dlogp, (size_t)n * sizeof *dlogp);
    r->n[sample] = n;
    r->calls++;
}

/* One accumulation (no optimizer step), its dL/dlogp into *rec when given;
 * the gradients are dropped. */
static void accumulate(pt_grpo_stats *st, dl_rec *rec, pt_context *ctx, pt_model *m, pt_rollout_buffer *buf,
                       const pt_grpo_options *o)
{
    if (rec)
        memset(rec, 0, sizeof *rec);
    pt__grpo_set_dlogp_hook(buf, rec ? record_dlogp : NULL, rec);
    pt_grpo_stats_init(st);
    int rc = pt__grpo_accumulate(st, ctx, m, buf, o, NULL);
    pt__grpo_set_dlogp_hook(buf, NULL, NULL);
    ck_assert_msg(rc == PT_OK, "pt__grpo_accumulate: %s", pt_last_error());
    ck_assert_ok(pt_model_zero_grad(m));
}

/* ---- the temperature ----------------------------------------------------------- */

START_TEST(test_on_policy_at_temperature)
{
    /* Rollouts at T = 0.5 (no top-k/top-p) with pt_generate's logprobs as
     * the old values: a step at T = 0.5 sees ratio 1 up to float rounding
     * (nothing clipped even with epsilons of 1e-5), a step at T = 1 (what
     * the library did before it had a temperature) clips a share. */
    pt_model *m = pt_test_tiny_llama(V, 21);
    rollouts r;
    generate(&r, m, 0.5f, 77);
    double d05 = forward_vs_rollouts(m, &r, 0.5f), d1 = forward_vs_rollouts(m, &r, 1.0f);
    printf("rollouts at T=0.5: max |log pi_T(forward) - log q(pt_generate)| = %.3g at T=0.5, %.3g at T=1\n", d05,
           d1);
    ck_assert_msg(d05 <= 1e-5, "the forward at T=0.5 differs from the sampler by %g", d05);
    ck_assert(d1 > 0.1);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, NR, PL + MNT));
    pt_rollout_buffer *buf = rollout_buffer(&r, true, false);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    pt_grpo_stats st;
    double clip[2];
    for (int k = 0; k < 2; k++) {
        o.temperature = k == 0 ? 1.0 : 0.5;
        accumulate(&st, NULL, ctx, m, buf, &o);
        clip[k] = st.clip_ratio_region;
    }
    printf("fully on-policy step, rollouts at T=0.5, eps 0.2: clip fraction %.4f scored at T=1, %.4f at T=0.5\n",
           clip[0], clip[1]);
    ck_assert_msg(clip[0] > 0.01, "at T=1 the step clips only %g", clip[0]);
    ck_assert_double_eq(clip[1], 0.0);
    o.epsilon_low = o.epsilon_high = 1e-5;
    accumulate(&st, NULL, ctx, m, buf, &o);
    ck_assert_double_eq(st.clip_ratio_region, 0.0);
    ck_assert(st.entropy > 0);
    pt_rollout_buffer_free(buf);

    /* the same rollouts as sampling logprobs, old ones recorded by the step:
     * the sampler and the trainer agree, the correction changes nothing */
    buf = rollout_buffer(&r, false, true);
    pt_grpo_options_init(&o);
    o.temperature = 0.5;
    o.importance_sampling_correction = PT_GRPO_IS_TOKEN_MASK;
    o.importance_sampling_clip_min = 1 - 1e-4;
    o.importance_sampling_clip_max = 1 + 1e-4;
    accumulate(&st, NULL, ctx, m, buf, &o);
    printf("sampler vs trainer at T=0.5: |diff| mean %.3g max %.3g, weights %.9f .. %.9f\n",
           st.sampling_logp_difference_mean, st.sampling_logp_difference_max, st.importance_sampling_ratio_min,
           st.importance_sampling_ratio_max);
    ck_assert(st.sampling_logp_difference_max <= 1e-5);
    ck_assert_double_eq(st.importance_sampling_corrected_fraction, 0.0);
    ck_assert(fabs(st.importance_sampling_ratio_min - 1) < 1e-5 && fabs(st.importance_sampling_ratio_max - 1) < 1e-5);
    ck_assert_double_eq(st.clip_ratio_region, 0.0);
    /* the old values the step recorded are at its temperature: a step at
     * another one is refused */
    o.temperature = 1.0;
    ck_assert_status(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL), PT_EINVAL,
                     "old log-probabilities were computed at temperature 0.5, the step's temperature is 1");
    pt_rollout_buffer_free(buf);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_compute_logprobs_at_temperature)
{
    /* pt_rollout_buffer_compute_logprobs_with: the forward at T, for each
     * kind; the step takes them at T and refuses them at another T; the
     * LoRA base's reference values are at the step's temperature */
    pt_model *m = pt_test_tiny_llama(V, 23), *base = pt_test_tiny_llama(V, 23);
    rollouts r;
    generate(&r, m, 0.7f, 5);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, NR, PL + MNT));
    pt_rollout_buffer *buf = rollout_buffer(&r, false, false);
    pt_rollout_logprobs_options lo;
    pt_rollout_logprobs_options_init(&lo);
    ck_assert_double_eq(lo.temperature, 1.0);
    lo.temperature = 0.7;
    for (int which = PT_ROLLOUT_OLD; which <= PT_ROLLOUT_SAMPLING; which++)
        ck_assert_ok(pt_rollout_buffer_compute_logprobs_with(buf, ctx, which, &lo));
    double worst = 0;
    for (int i = 0; i < NR; i++)
        for (int which = PT_ROLLOUT_OLD; which <= PT_ROLLOUT_SAMPLING; which++) {
            float got[MNT];
            ck_assert_ok(pt_rollout_buffer_get_logprobs(got, buf, i, which));
            for (int j = 0; j < r.nt[i]; j++)
                worst = fmax(worst, fabs((double)got[j] - r.lp[i * MNT + j]));
        }
    ck_assert_msg(worst <= 1e-5, "compute_logprobs_with at 0.7 differs from the sampler by %g", worst);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.beta = 0.1;
    pt_grpo_stats st;
    ck_assert_status(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL), PT_EINVAL,
                     "sample 0's old log-probabilities were computed at temperature 0.7, the step's temperature is 1");
    o.temperature = 0.7;
    accumulate(&st, NULL, ctx, m, buf, &o);
    ck_assert(st.kl < 1e-9 && st.sampling_logp_difference_max < 1e-9);
    lo.temperature = 0;
    ck_assert_status(pt_rollout_buffer_compute_logprobs_with(buf, ctx, PT_ROLLOUT_REF, &lo), PT_EINVAL,
                     "pt_rollout_buffer_compute_logprobs_with: temperature 0 must be finite and >= 1e-6");
    lo.temperature = NAN;
    ck_assert_status(pt_rollout_buffer_compute_logprobs_with(buf, ctx, PT_ROLLOUT_REF, &lo), PT_EINVAL,
                     "temperature nan");
    ck_assert_status(pt_rollout_buffer_compute_logprobs_with(buf, ctx, 3, NULL), PT_EINVAL,
                     "which 3 is not PT_ROLLOUT_OLD, PT_ROLLOUT_REF or PT_ROLLOUT_SAMPLING");
    pt_rollout_buffer_free(buf);

    /* LoRA: the base's reference values at the step's temperature */
    pt_lora_options lopt;
    pt_lora_options_init(&lopt);
    lopt.rank = 2;
    ck_assert_ok(pt_model_add_lora(m, &lopt));
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (t->adapter)
            for (size_t j = 0; j < t->numel; j++)
                t->data[j] = 0.1f * (float)sin((double)(i * 7 + j));
    }
    pt_context_free(ctx);
    ck_assert_ok(pt_context_create(&ctx, m, NR, PL + MNT));
    buf = rollout_buffer(&r, false, false);
    o.temperature = 0.6;
    accumulate(&st, NULL, ctx, m, buf, &o);
    pt_rollout_buffer *bref = rollout_buffer(&r, false, false);
    pt_context *bctx;
    ck_assert_ok(pt_context_create(&bctx, base, NR, PL + MNT));
    lo.temperature = 0.6;
    ck_assert_ok(pt_rollout_buffer_compute_logprobs_with(bref, bctx, PT_ROLLOUT_REF, &lo));
    for (int i = 0; i < NR; i++) {
        float a[MNT], b[MNT];
        ck_assert_ok(pt_rollout_buffer_get_logprobs(a, buf, i, PT_ROLLOUT_REF));
        ck_assert_ok(pt_rollout_buffer_get_logprobs(b, bref, i, PT_ROLLOUT_REF));
        ck_assert(memcmp(a, b, (size_t)r.nt[i] * sizeof *a) == 0);
    }
    ck_assert(st.kl > 0);
    pt_context_free(bctx);
    pt_rollout_buffer_free(bref);
    pt_rollout_buffer_free(buf);
    pt_context_free(ctx);
    pt_model_free(base);
    pt_model_free(m);
}
END_TEST

/* ---- the sampler correction ------------------------------------------------------ */

/* The correction by hand for mode/band over the buffer's old and sampling
 * values (every token is a loss token): weights per token of sample i into
 * w[i], and min, mean, max and the corrected fraction. */
static void is_by_hand(double (*w)[MNT], double out[4], const pt_rollout_buffer *buf, const rollouts *r, int mode,
                       double lo, double hi)
{
    double mn = INFINITY, mx = -INFINITY, sum = 0, units = 0, changed = 0;
    bool seq = mode == PT_GRPO_IS_SEQUENCE_TRUNCATE || mode == PT_GRPO_IS_SEQUENCE_MASK;
    bool mask = mode == PT_GRPO_IS_TOKEN_MASK || mode == PT_GRPO_IS_SEQUENCE_MASK;
    for (int i = 0; i < NR; i++) {
        float old[MNT], samp[MNT];
        ck_assert_ok(pt_rollout_buffer_get_logprobs(old, buf, i, PT_ROLLOUT_OLD));
        ck_assert_ok(pt_rollout_buffer_get_logprobs(samp, buf, i, PT_ROLLOUT_SAMPLING));
        double tot = 0;
        for (int j = 0; j < r->nt[i]; j++)
            tot += (double)old[j] - (double)samp[j];
        for (int j = 0; j < r->nt[i] && (!seq || j == 0); j++) {
            double rho = seq ? exp(tot) : exp((double)old[j] - (double)samp[j]);
            double x = rho >= lo && rho <= hi ? rho : mask ? 0.0 : rho < lo ? lo : hi;
            changed += x != rho;
            units++;
            sum += x;
            mn = fmin(mn, x);
            mx = fmax(mx, x);
            for (int t = 0; t < r->nt[i]; t++)
                if (seq || t == j)
                    w[i][t] = x;
        }
    }
    out[0] = mn;
    out[1] = sum / units;
    out[2] = mx;
    out[3] = changed / units;
}

START_TEST(test_stale_rollouts_correction)
{
    /* Rollouts sampled, then the policy trained on for a few steps (TRL's
     * num_iterations > 1, or episodes played while training went on): the
     * step records pi_old from its own forward, compares it with the
     * sampler's values and weights each token's policy term.  Every mode
     * against the weights and metrics by hand, and dL/dlogp exactly the
     * uncorrected one times the weight. */
    pt_model *m = pt_test_tiny_llama(V, 31);
    rollouts r;
    generate(&r, m, 0.8f, 9);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.type = PT_OPTIMIZER_SGD;
    oo.lr = 0.05;
    oo.momentum = 0;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, NR, PL + MNT));
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.temperature = 0.8;
    o.importance_sampling_correction = PT_GRPO_IS_CORRECTION_NONE;
    pt_rollout_buffer *train = rollout_buffer(&r, false, false);
    for (int k = 0; k < 3; k++) {
        pt_grpo_stats st;
        pt_grpo_stats_init(&st);
        ck_assert_ok(pt_grpo_step(&st, opt, ctx, train, &o));
    }
    pt_rollout_buffer_free(train);
    dl_rec *plain = malloc(sizeof *plain), *corr = malloc(sizeof *corr);
    pt_grpo_stats st;
    pt_rollout_buffer *buf = rollout_buffer(&r, false, true);
    accumulate(&st, plain, ctx, m, buf, &o);
    printf("stale rollouts (3 updates later): sampler vs trainer |diff| mean %.4f max %.4f\n",
           st.sampling_logp_difference_mean, st.sampling_logp_difference_max);
    ck_assert(st.sampling_logp_difference_mean > 0.01);
    ck_assert(isnan(st.importance_sampling_ratio_mean)); /* none: nothing weighted */
    struct {
        int mode;
        double lo, hi;
    } cases[] = { { PT_GRPO_IS_TOKEN_TRUNCATE, 0, 1.05 },        { PT_GRPO_IS_TOKEN_TRUNCATE, 0.97, 1.02 },
                  { PT_GRPO_IS_TOKEN_MASK, 0.95, 1.04 },         { PT_GRPO_IS_SEQUENCE_TRUNCATE, 0.8, 1.2 },
                  { PT_GRPO_IS_SEQUENCE_MASK, 0.8, 1.25 },       { PT_GRPO_IS_SEQUENCE_MASK, 0, 3 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        o.importance_sampling_correction = cases[c].mode;
        o.importance_sampling_clip_min = cases[c].lo;
        o.importance_sampling_clip_max = cases[c].hi;
        accumulate(&st, corr, ctx, m, buf, &o);
        double w[NR][MNT], want[4];
        is_by_hand(w, want, buf, &r, cases[c].mode, cases[c].lo, cases[c].hi);
        const double got[4] = { st.importance_sampling_ratio_min, st.importance_sampling_ratio_mean,
                                st.importance_sampling_ratio_max, st.importance_sampling_corrected_fraction };
        printf("  %-17s [%g, %g]: weights %.4f / %.4f / %.4f, corrected %.3f\n",
               pt_grpo_is_correction_name(cases[c].mode), cases[c].lo, cases[c].hi, got[0], got[1], got[2], got[3]);
        for (int k = 0; k < 4; k++)
            ck_assert_msg(fabs(got[k] - want[k]) <= 1e-12 * fmax(1, fabs(want[k])), "%s metric %d: %.15g vs %.15g",
                          pt_grpo_is_correction_name(cases[c].mode), k, got[k], want[k]);
        double changed = 0;
        for (int i = 0; i < NR; i++)
            for (int j = 0; j < r.nt[i]; j++) {
                double e = (double)plain->d[i][j] * w[i][j];
                ck_assert_msg(fabs(corr->d[i][j] - e) <= 1e-6 * fabs(e) + 1e-12, "sample %d token %d: %g vs %g * %g",
                              i, j, (double)corr->d[i][j], (double)plain->d[i][j], w[i][j]);
                changed += w[i][j] != 1.0;
            }
        if (!(cases[c].mode == PT_GRPO_IS_SEQUENCE_MASK && cases[c].hi == 3))
            ck_assert_msg(changed > 0 && want[3] > 0, "case %zu corrects nothing", c);
    }
    /* a sample without sampling logprobs is left alone */
    float one = 1.0f;
    pt_rollout_sample s;
    pt_rollout_sample_init(&s);
    int32_t ids[PL + MNT];
    sample_ids(ids, &r, 0);
    s.ids = ids;
    s.n_ids = PL + r.nt[0];
    s.prompt_len = PL;
    s.group = 99;
    s.rewards = &one;
    ck_assert_ok(pt_rollout_buffer_add(buf, &s));
    o.importance_sampling_correction = PT_GRPO_IS_TOKEN_MASK;
    o.importance_sampling_clip_min = 0.99;
    o.importance_sampling_clip_max = 1.01;
    accumulate(&st, corr, ctx, m, buf, &o);
    ck_assert_int_eq(corr->calls, NR + 1);
    free(plain);
    free(corr);
    pt_rollout_buffer_free(buf);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* ---- the entropy quantile ------------------------------------------------------- */

START_TEST(test_entropy_quantile)
{
    /* top_entropy_quantile 0.4: the threshold is the 0.6 quantile of the
     * loss tokens' entropies (at the step's temperature), the tokens below
     * it lose their policy term (dL/dlogp exactly 0 with beta 0) and the
     * others keep theirs; the same with the step cut into micro-batches of
     * 3 rows (the extra forward pass) */
    pt_model *m = pt_test_tiny_llama(V, 41);
    rollouts r;
    generate(&r, m, 0.9f, 13);
    pt_rollout_buffer *buf = rollout_buffer(&r, true, false);
    /* the entropies by hand */
    pt_context *c1;
    ck_assert_ok(pt_context_create(&c1, m, 1, PL + MNT));
    float ent[NR][MNT], all[NR * MNT];
    size_t na = 0;
    for (int i = 0; i < NR; i++) {
        int32_t ids[PL + MNT];
        float e[PL + MNT];
        sample_ids(ids, &r, i);
        pt_batch b = pt_test_row_batch(ids, NULL, PL + r.nt[i]);
        b.temperature = 0.9f;
        ck_assert_ok(pt_model_forward_entropy(c1, &b, NULL, e));
        for (int j = 0; j < r.nt[i]; j++)
            all[na++] = ent[i][j] = e[PL - 1 + j];
    }
    pt_context_free(c1);
    double thr = pt__grpo_quantile(all, na, 0.6);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.temperature = 0.9;
    o.top_entropy_quantile = 0.4;
    dl_rec *rec = malloc(sizeof *rec), *rec3 = malloc(sizeof *rec3);
    pt_grpo_stats st, st3;
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, NR, PL + MNT));
    accumulate(&st, rec, ctx, m, buf, &o);
    o.micro_batch = 3;
    accumulate(&st3, rec3, ctx, m, buf, &o);
    printf("entropy quantile 0.4: threshold %.4f (by hand %.4f), kept %.3f of the loss tokens\n", st.entropy_threshold,
           thr, st.entropy_kept_fraction);
    ck_assert(fabs(st.entropy_threshold - thr) <= 1e-5 * thr);
    ck_assert(fabs(st3.entropy_threshold - thr) <= 1e-5 * thr);
    ck_assert(st.entropy_kept_fraction > 0.35 && st.entropy_kept_fraction < 0.45);
    ck_assert_double_eq(st.entropy_kept_fraction, st3.entropy_kept_fraction);
    ck_assert_int_eq(rec3->calls, NR);
    int kept = 0, zero = 0;
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < r.nt[i]; j++) {
            bool high = ent[i][j] >= thr;
            if (!high) {
                ck_assert_msg(rec->d[i][j] == 0.0f && rec3->d[i][j] == 0.0f, "a low-entropy token has a gradient");
                zero++;
            } else if (rec->d[i][j] != 0.0f) {
                kept++;
            }
            ck_assert(fabs(rec->d[i][j] - rec3->d[i][j]) <= 1e-6 * fabs(rec->d[i][j]) + 1e-9);
        }
    ck_assert(kept > 0 && zero > 0);
    ck_assert(fabs(st.loss - st3.loss) <= 1e-6 * fabs(st.loss));
    /* rho 1: every token; 0: the top token only */
    o.top_entropy_quantile = 0.0;
    o.micro_batch = 0;
    accumulate(&st, rec, ctx, m, buf, &o);
    ck_assert_double_eq(st.entropy_kept_fraction * st.tokens, 1.0);
    free(rec);
    free(rec3);
    pt_rollout_buffer_free(buf);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* ---- rewards per segment, advantages per token -------------------------------------- */

/* A two-turn episode: turn 1 (2 tokens), a tool result (2 tokens out of the
 * loss), turn 2 (2 tokens). */
#define EP_N 6
static const uint8_t k_ep_mask[EP_N] = { 1, 1, 0, 0, 1, 1 };

static void add_episode(pt_rollout_buffer *buf, int i, const float *seg, const float *reward, const float *tadv)
{
    int32_t ids[PL + EP_N];
    for (int t = 0; t < PL + EP_N; t++)
        ids[t] = (int32_t)((3 + 7 * i + 5 * t) % V);
    pt_rollout_sample s;
    pt_rollout_sample_init(&s);
    s.ids = ids;
    s.n_ids = PL + EP_N;
    s.prompt_len = PL;
    s.loss_mask = k_ep_mask;
    s.group = 1;
    s.rewards = reward;
    s.segment_rewards = seg;
    s.n_segments = seg ? 2 : 0;
    s.advantages = tadv;
    ck_assert_ok(pt_rollout_buffer_add(buf, &s));
}

START_TEST(test_segment_credit)
{
    /* Three episodes of one prompt.  A answers turn 1 wrong and turn 2
     * right; B and C answer turn 1 right and turn 2 wrong.  Rewarded for
     * the final answer only, A's advantage is positive on all its tokens:
     * the step reinforces its wrong first turn (dL/dlogp < 0 there).  With
     * a reward per turn, A's turn 1 is pushed down (dL/dlogp > 0) and its
     * turn 2 up, and B's and C's the other way round; the tool tokens get
     * nothing. */
    pt_model *m = pt_test_tiny_llama(V, 51);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 3, PL + EP_N));
    const float final[3] = { 1, 0, 0 }, turn[3][2] = { { 0, 1 }, { 1, 0 }, { 1, 0 } };
    pt_rollout_buffer *scalar, *seg;
    ck_assert_ok(pt_rollout_buffer_create(&scalar, NULL));
    ck_assert_ok(pt_rollout_buffer_create(&seg, NULL));
    for (int i = 0; i < 3; i++) {
        add_episode(scalar, i, NULL, &final[i], NULL);
        add_episode(seg, i, turn[i], NULL, NULL);
    }
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    dl_rec *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    pt_grpo_stats st;
    accumulate(&st, a, ctx, m, scalar, &o);
    ck_assert_int_eq(st.segments, 0);
    accumulate(&st, b, ctx, m, seg, &o);
    ck_assert_int_eq(st.segments, 6);
    ck_assert_double_eq(st.reward, 1.0); /* each episode's turns sum to 1 */
    ck_assert_double_eq(st.frac_reward_zero_std, 0.0);
    printf("episode A, dL/dlogp per token (turn 1 | tool | turn 2):\n  one reward:   ");
    for (int j = 0; j < EP_N; j++)
        printf("%+.4f ", (double)a->d[0][j]);
    printf("\n  per segment:  ");
    for (int j = 0; j < EP_N; j++)
        printf("%+.4f ", (double)b->d[0][j]);
    printf("\n");
    for (int j = 0; j < EP_N; j++) {
        if (!k_ep_mask[j]) {
            ck_assert(a->d[0][j] == 0.0f && b->d[0][j] == 0.0f);
            continue;
        }
        bool turn1 = j < 2;
        ck_assert_msg(a->d[0][j] < 0, "one reward: A's token %d is not reinforced (%g)", j, (double)a->d[0][j]);
        ck_assert_msg(turn1 ? b->d[0][j] > 0 : b->d[0][j] < 0, "per segment: A's token %d has dL/dlogp %g", j,
                      (double)b->d[0][j]);
        for (int i = 1; i < 3; i++) {
            ck_assert(a->d[i][j] > 0); /* final answer wrong: all pushed down */
            ck_assert_msg(turn1 ? b->d[i][j] < 0 : b->d[i][j] > 0, "per segment: sample %d token %d: %g", i, j,
                          (double)b->d[i][j]);
        }
    }
    /* segment rewards set later; a declined one gets no gradient */
    ck_assert_ok(pt_rollout_buffer_set_segment_reward(seg, 0, 0, NAN));
    float got = 0;
    ck_assert_ok(pt_rollout_buffer_get_segment_reward(&got, seg, 0, 1));
    ck_assert_float_eq(got, 1.0f);
    accumulate(&st, b, ctx, m, seg, &o);
    ck_assert(b->d[0][0] == 0.0f && b->d[0][1] == 0.0f && b->d[0][4] < 0);
    /* per-token advantages, used as given: at ratio 1 (dapo) dL/dlogp is
     * -A / tokens */
    pt_rollout_buffer *adv;
    ck_assert_ok(pt_rollout_buffer_create(&adv, NULL));
    const float ta[3][EP_N] = { { -1, -0.5f, 7, 7, 2, 0.25f }, { 0.5f, 0, 0, 0, -2, 1 }, { 3, -3, 0, 0, 1, 1 } };
    for (int i = 0; i < 3; i++)
        add_episode(adv, i, NULL, NULL, ta[i]);
    accumulate(&st, a, ctx, m, adv, &o);
    ck_assert_int_eq(st.groups, 0);
    ck_assert_int_eq(st.samples_unscored, 0);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < EP_N; j++)
            ck_assert_float_eq_tol(a->d[i][j], k_ep_mask[j] ? -ta[i][j] / 12.0f : 0.0f, 1e-7f);
    /* a group must not mix where its advantages come from */
    add_episode(adv, 3, turn[0], NULL, NULL);
    ck_assert_status(pt__grpo_accumulate(&st, ctx, m, adv, &o, NULL), PT_EINVAL,
                     "a group mixes samples with advantages and samples with segment_rewards");
    free(a);
    free(b);
    pt_rollout_buffer_free(adv);
    pt_rollout_buffer_free(scalar);
    pt_rollout_buffer_free(seg);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* ---- central differences of the whole objective ----------------------------------- */

START_TEST(test_finite_difference_1x)
{
    /* ratio != 1, temperature 0.7, two-sided clipping, the token-truncate
     * correction against sampling values, per-segment advantages, beta > 0:
     * d objective / d w by central differences on the parameters with the
     * largest gradients of three tensors */
    pt_model *m = pt_test_tiny_llama(V, 61);
    rollouts r;
    generate(&r, m, 0.7f, 17);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, NR, PL + MNT));
    /* the policy's log-probabilities at T; the old ones a log-ratio x away,
     * x kept clear of the kinks of the clip (log 0.85, log 1.1) and of delta
     * (log 1.15), which central differences would straddle */
    pt_rollout_buffer *cur = rollout_buffer(&r, false, false);
    pt_rollout_logprobs_options lo;
    pt_rollout_logprobs_options_init(&lo);
    lo.temperature = 0.7;
    ck_assert_ok(pt_rollout_buffer_compute_logprobs_with(cur, ctx, PT_ROLLOUT_OLD, &lo));
    static const float k_x[6] = { -0.3f, -0.05f, 0.0f, 0.04f, 0.12f, 0.25f };
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    pt_rng rng;
    pt__rng_seed(&rng, 3);
    for (int i = 0; i < NR; i++) {
        int32_t ids[PL + MNT];
        sample_ids(ids, &r, i);
        float lpt[MNT], old[MNT], ref[MNT], samp[MNT], seg[2];
        uint8_t mask[MNT];
        int nc = r.nt[i];
        ck_assert_ok(pt_rollout_buffer_get_logprobs(lpt, cur, i, PT_ROLLOUT_OLD));
        for (int j = 0; j < nc; j++) {
            float x = k_x[pt__rng_below(&rng, 6)] + 0.01f * (float)(pt__rng_uniform(&rng) - 0.5);
            old[j] = fminf(-1e-3f, lpt[j] - x);
            ref[j] = fminf(-1e-3f, lpt[j] + 0.3f * (float)(pt__rng_uniform(&rng) - 0.5));
            samp[j] = fminf(-1e-3f, old[j] + 0.1f * (float)(pt__rng_uniform(&rng) - 0.5));
            mask[j] = !(j == 3 || j == 4);
        }
        for (int k = 0; k < 2; k++)
            seg[k] = (float)pt__rng_below(&rng, 4) * 0.5f;
        pt_rollout_sample s;
        pt_rollout_sample_init(&s);
        s.ids = ids;
        s.n_ids = PL + nc;
        s.prompt_len = PL;
        s.loss_mask = mask;
        s.old_logprobs = old;
        s.ref_logprobs = ref;
        s.sampling_logprobs = samp;
        s.group = i / G;
        s.segment_rewards = seg;
        s.n_segments = 2;
        ck_assert_ok(pt_rollout_buffer_add(buf, &s));
    }
    pt_rollout_buffer_free(cur);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.temperature = 0.7;
    o.beta = 0.1;
    o.epsilon_low = 0.15;
    o.epsilon_high = 0.1;
    o.delta = 1.15;
    o.importance_sampling_correction = PT_GRPO_IS_TOKEN_TRUNCATE;
    o.importance_sampling_clip_min = 0.97;
    o.importance_sampling_clip_max = 1.03;
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL));
    ck_assert(st.clip_ratio_region > 0 && st.importance_sampling_corrected_fraction > 0 && st.kl > 0);
    const char *names[] = { "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                            "model.layers.1.mlp.down_proj.weight" };
    size_t total = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        total += pt__model_tensor(m, i)->numel;
    float *gall = malloc(total * sizeof *gall);
    for (size_t i = 0, off = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(gall + off, t->grad, t->numel * sizeof *gall);
        off += t->numel;
    }
    double worst = 0;
    int checked = 0;
    for (int k = 0; k < 3; k++) {
        const pt_tensor_ref *t = pt__model_find_tensor(m, names[k]);
        ck_assert(t != NULL);
        size_t base = 0;
        for (size_t q = 0; pt__model_tensor(m, q) != t; q++)
            base += pt__model_tensor(m, q)->numel;
        float *g = gall + base;
        for (int rep = 0; rep < 2; rep++) {
            size_t best = 0;
            for (size_t i = 0; i < t->numel; i++)
                if (fabsf(g[i]) > fabsf(g[best]))
                    best = i;
            double an = g[best];
            g[best] = 0;
            float w0 = t->data[best];
            double h = 2e-3, lp, lm;
            t->data[best] = w0 + (float)h;
            ck_assert_ok(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL));
            lp = st.loss;
            t->data[best] = w0 - (float)h;
            ck_assert_ok(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL));
            lm = st.loss;
            t->data[best] = w0;
            double fd = (lp - lm) / (2 * h), e = fabs(fd - an) / fabs(an);

            worst = fmax(worst, e);
            ck_assert_msg(fabs(an) > 1e-4, "%s: gradient %g too small to check", names[k], an);
            ck_assert_msg(e < 2e-2, "%s[%zu]: analytic %g, finite difference %g", names[k], best, an, fd);
            checked++;
        }
    }
    printf("finite differences (T 0.7, delta, token_truncate, segments, beta): %d parameters, worst relative "
           "error %.3g\n", checked, worst);
    free(gall);
    ck_assert_ok(pt_model_zero_grad(m));
    pt_rollout_buffer_free(buf);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* ---- bad options and samples ----------------------------------------------------- */

START_TEST(test_bad_inputs_1x)
{
    pt_model *m = pt_test_tiny_llama(V, 71);
    rollouts r;
    generate(&r, m, 1.0f, 1);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, NR, PL + MNT));
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, NULL));
    pt_rollout_buffer *buf = rollout_buffer(&r, false, true);
    pt_grpo_options o;
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
#define EXPECT_BAD(stmt, msg)                                                                                  \
    do {                                                                                                       \
        pt_grpo_options_init(&o);                                                                              \
        stmt;                                                                                                  \
        ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, msg);                                \
    } while (0)
    EXPECT_BAD(o.temperature = 0, "temperature 0 must be finite and >= 1e-6");
    EXPECT_BAD(o.temperature = -1, "temperature -1");
    EXPECT_BAD(o.temperature = NAN, "temperature nan");
    EXPECT_BAD(o.temperature = INFINITY, "temperature inf");
    EXPECT_BAD(o.importance_sampling_correction = 5, "unknown importance_sampling_correction 5");
    EXPECT_BAD(o.importance_sampling_correction = -1, "unknown importance_sampling_correction -1");
    EXPECT_BAD(o.importance_sampling_clip_max = 0, "importance_sampling_clip_max 0");
    EXPECT_BAD(o.importance_sampling_clip_max = NAN, "importance_sampling_clip_max nan");
    EXPECT_BAD(o.importance_sampling_clip_min = -0.5, "importance_sampling_clip_min -0.5");
    EXPECT_BAD(o.importance_sampling_clip_min = 3, "importance_sampling_clip_min 3 and importance_sampling_clip_max 3");
    EXPECT_BAD(o.importance_sampling_clip_min = INFINITY, "importance_sampling_clip_min inf");
    EXPECT_BAD((o.importance_sampling_correction = PT_GRPO_IS_TOKEN_TRUNCATE, o.importance_sampling_clip_max = INFINITY),
               "importance_sampling_correction token_truncate needs importance_sampling_clip_min > 0");
    EXPECT_BAD((o.loss_type = PT_GRPO_LOSS_CISPO, o.epsilon_high = 0), "loss_type cispo needs epsilon_high > 0");
    EXPECT_BAD(o.delta = 1.1, "delta 1.1 must be 0 (off) or finite and > 1 + epsilon_high (1.2)");
    EXPECT_BAD(o.delta = -2, "delta -2");
    EXPECT_BAD(o.delta = NAN, "delta nan");
    EXPECT_BAD((o.loss_type = PT_GRPO_LOSS_CISPO, o.epsilon_high = 5, o.delta = 8),
               "delta (two-sided clipping) does not apply to loss_type cispo");
    EXPECT_BAD(o.top_entropy_quantile = 1.5, "top_entropy_quantile 1.5 must be in [0, 1]");
    EXPECT_BAD(o.top_entropy_quantile = -0.1, "top_entropy_quantile -0.1");
    EXPECT_BAD(o.top_entropy_quantile = NAN, "top_entropy_quantile nan");
    EXPECT_BAD(o.loss_type = 6, "unknown loss_type 6");
    /* vespo takes the per-token correction into its weight: TRL refuses the sequence modes */
    EXPECT_BAD(o.loss_type = PT_GRPO_LOSS_VESPO, "loss_type vespo with sampling log-probabilities (sample 0) "
               "needs importance_sampling_correction token_truncate, token_mask or none, not sequence_mask");
    EXPECT_BAD((o.loss_type = PT_GRPO_LOSS_VESPO, o.delta = 2), "delta (two-sided clipping) does not apply to "
               "loss_type vespo");
    /* the names */
    int v = -1;
    ck_assert_ok(pt_grpo_loss_type_from_name(&v, "cispo"));
    ck_assert_int_eq(v, PT_GRPO_LOSS_CISPO);
    ck_assert_ok(pt_grpo_is_correction_from_name(&v, "sequence_mask"));
    ck_assert_int_eq(v, PT_GRPO_IS_SEQUENCE_MASK);
    ck_assert_str_eq(pt_grpo_is_correction_name(PT_GRPO_IS_CORRECTION_NONE), "none");
    ck_assert_str_eq(pt_rollout_logprobs_name(PT_ROLLOUT_SAMPLING), "sampling");
    ck_assert_status(pt_grpo_is_correction_from_name(&v, "vllm"), PT_EINVAL, "token_truncate");
    ck_assert(pt_grpo_is_correction_name(9) == NULL);
    /* defaults: TRL's */
    pt_grpo_options_init(&o);
    ck_assert_double_eq(o.temperature, 1.0);
    ck_assert_int_eq(o.importance_sampling_correction, PT_GRPO_IS_SEQUENCE_MASK);
    ck_assert_double_eq(o.importance_sampling_clip_max, 3.0);
    ck_assert_double_eq(o.importance_sampling_clip_min, 0.0);
    ck_assert_double_eq(o.delta, 0.0);
    ck_assert_double_eq(o.top_entropy_quantile, 1.0);
    /* nothing above changed the model or the optimizer */
    int64_t step = -1;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, 0);

    /* bad samples */
    int32_t ids[PL + 4] = { 1, 2, 3, 4, 5, 6, 7 };
    const uint8_t mask[4] = { 1, 0, 1, 1 };
    float lp[4] = { -1, -1, 0.5f, -1 }, adv[4] = { 1, NAN, 0, 0 }, seg[3] = { 1, 2, INFINITY };
    pt_rollout_sample s;
    pt_rollout_sample_init(&s);
    s.ids = ids;
    s.n_ids = PL + 4;
    s.prompt_len = PL;
    s.loss_mask = mask;
    s.sampling_logprobs = lp;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "sample 0: sampling logprob 2 is 0.5");
    s.sampling_logprobs = NULL;
    s.advantages = adv;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "advantage 1 is nan (must be finite)");
    adv[1] = 0;
    s.segment_rewards = seg;
    s.n_segments = 2;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "advantages and segment_rewards are both set");
    s.advantages = NULL;
    s.n_segments = 3;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL,
                     "n_segments 3 does not match the loss mask's 2 segments (runs of 1s)");
    s.loss_mask = NULL;
    s.n_segments = 2;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "n_segments 2 does not match the loss mask's 1 segment");
    s.loss_mask = mask;
    s.segment_rewards = seg + 1; /* 2, inf */
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "segment reward 1 is infinite");
    s.segment_rewards = NULL;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "n_segments 2 without segment_rewards");
    int n0 = 0, n1 = 0;
    n0 = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(n0, NR);
    s.n_segments = 2;
    s.segment_rewards = seg;
    s.group = 500;
    ck_assert_ok(pt_rollout_buffer_add(buf, &s));
    n1 = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(n1, NR + 1);
    ck_assert_status(pt_rollout_buffer_set_segment_reward(buf, 0, 0, 1.0f), PT_EINVAL,
                     "pt_rollout_buffer_set_segment_reward: sample 0 has no segment rewards");
    ck_assert_status(pt_rollout_buffer_set_segment_reward(buf, NR, 2, 1.0f), PT_EINVAL, "segment 2 is not in 0 .. 1");
    ck_assert_status(pt_rollout_buffer_set_segment_reward(buf, NR, 1, INFINITY), PT_EINVAL, "reward is infinite");
    float got;
    ck_assert_status(pt_rollout_buffer_get_segment_reward(&got, buf, NR + 1, 0), PT_EINVAL, "sample 17");
    ck_assert_status(pt_rollout_buffer_get_logprobs(lp, buf, NR, PT_ROLLOUT_SAMPLING), PT_ESTATE,
                     "sample 16 has no sampling log-probabilities");
    pt_rollout_buffer_free(buf);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grpo_offpolicy");
    TCase *tc = tcase_create("offpolicy");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_on_policy_at_temperature);
    tcase_add_test(tc, test_compute_logprobs_at_temperature);
    tcase_add_test(tc, test_stale_rollouts_correction);
    tcase_add_test(tc, test_entropy_quantile);
    tcase_add_test(tc, test_segment_credit);
    tcase_add_test(tc, test_finite_difference_1x);
    tcase_add_test(tc, test_bad_inputs_1x);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
