/* pt_grpo_step on a tiny model: the policy gradient at mu = 1, a finite
 * difference check of the full objective, learning a reward, determinism,
 * mu > 1 and bad inputs. */
#include "testutil.h"

#include "core/core.h"
#include "model/model.h"
#include "train/grpo_internal.h"
#include "train/optimizer.h"

#include <math.h>
#include <stddef.h>

#define V 37
#define PL 3 /* prompt length */

static pt_model *tiny_model(uint64_t seed)
{
    return pt_test_tiny_llama(V, seed);
}

static size_t total_params(const pt_model *m)
{
    size_t n = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        n += pt__model_tensor(m, i)->numel;
    return n;
}

static float *copy_params(const pt_model *m, bool grads)
{
    float *s = malloc(total_params(m) * sizeof *s);
    size_t off = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(s + off, grads ? t->grad : t->data, t->numel * sizeof *s);
        off += t->numel;
    }
    return s;
}

/* Six samples in two groups of three: completion lengths 2..5, one with a
 * masked tool token; rewards chosen so both groups have non-zero std. */
#define NS 6
static int32_t sids[NS][PL + 5];
static int slen[NS] = { PL + 2, PL + 4, PL + 3, PL + 5, PL + 2, PL + 3 };
static uint8_t smask[NS][5];
static float srew[NS] = { 1.0f, 0.0f, 0.5f, 2.0f, -1.0f, 0.25f };

static void make_samples(void)
{
    pt_rng r;
    pt__rng_seed(&r, 5);
    for (int i = 0; i < NS; i++) {
        for (int t = 0; t < slen[i]; t++)
            sids[i][t] = t < PL ? (int32_t)(1 + i / 3 + t) : (int32_t)pt__rng_below(&r, V);
        for (int j = 0; j < 5; j++)
            smask[i][j] = 1;
    }
    smask[1][1] = 0; /* tool output inside sample 1's completion */
}

static void add_samples(pt_rollout_buffer *buf, float (*old)[5], float (*ref)[5])
{
    for (int i = 0; i < NS; i++) {
        pt_rollout_sample s;
        pt_rollout_sample_init(&s);
        s.ids = sids[i];
        s.n_ids = slen[i];
        s.prompt_len = PL;
        s.loss_mask = smask[i];
        s.old_logprobs = old ? old[i] : NULL;
        s.ref_logprobs = ref ? ref[i] : NULL;
        s.group = 10 + i / 3;
        s.rewards = &srew[i];
        ck_assert_ok(pt_rollout_buffer_add(buf, &s));
    }
}

/* Current log-probabilities of every completion token of the samples. */
static void current_logprobs(pt_model *m, float (*out)[5])
{
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, 16));
    for (int i = 0; i < NS; i++) {
        int32_t tg[16];
        float lp[16];
        for (int t = 0; t < slen[i]; t++)
            tg[t] = t + 1 < slen[i] ? sids[i][t + 1] : -1;
        pt_batch b = pt_test_row_batch(sids[i], tg, slen[i]);
        ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
        for (int j = 0; j < slen[i] - PL; j++)
            out[i][j] = lp[PL - 1 + j];
    }
    pt_context_free(ctx);
}

START_TEST(test_policy_gradient_at_mu1)
{
    /* old = current (recorded by the step): the grpo-loss gradient is
     * -sum_i A_i/(|o_i| G) sum_t grad log pi, which pt_model_loss gives with
     * weights A_i/(|o_i| G) (split into its positive and negative parts,
     * since pt_model_loss normalises by the weight sum). */
    make_samples();
    pt_model *m = tiny_model(3);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 4, 16)); /* 6 rows: the step splits them */
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, NULL, NULL);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.loss_type = PT_GRPO_LOSS_GRPO;
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL));
    float *g = copy_params(m, true);
    ck_assert_double_eq(st.tokens, 2 + 4 + 3 + 5 + 2 + 3 - 1); /* completion tokens, one masked */
    ck_assert_double_eq(st.clip_ratio_region, 0.0);
    ck_assert_double_eq(st.kl, 0.0);
    ck_assert_int_eq(st.groups, 2);
    ck_assert_double_eq(st.frac_reward_zero_std, 0.0);

    double R[NS], adv[NS];
    bool zs[NS];
    int64_t grp[NS];
    int nz;
    for (int i = 0; i < NS; i++) {
        R[i] = srew[i];
        grp[i] = 10 + i / 3;
    }
    int tz;
    ck_assert_int_eq(pt__grpo_advantages(adv, zs, &nz, &tz, R, grp, NS, PT_GRPO_SCALE_GROUP), 2);
    /* the group-normalised advantage of sample 0 by hand: rewards 1, 0, 0.5 */
    ck_assert_double_eq_tol(adv[0], 0.5 / (0.5 + 1e-4), 1e-12);
    enum { T = PL + 5 };
    int32_t ids[NS * T], tg[NS * T];
    float wp[NS * T], wn[NS * T];
    double sp = 0, sn = 0, lsum = 0;
    float lpc[NS][5];
    current_logprobs(m, lpc);
    for (int i = 0; i < NS; i++) {
        int cnt = 0;
        for (int j = 0; j < slen[i] - PL; j++)
            cnt += smask[i][j];
        for (int t = 0; t < T; t++) {
            int k = i * T + t, j = t - (PL - 1);
            ids[k] = t < slen[i] ? sids[i][t] : 0;
            bool on = j >= 0 && t + 1 < slen[i] && smask[i][j];
            tg[k] = on ? sids[i][t + 1] : -1;
            double w = on ? adv[i] / cnt / NS : 0.0;
            wp[k] = w > 0 ? (float)w : 0.0f;
            wn[k] = w < 0 ? (float)-w : 0.0f;
            sp += wp[k];
            sn += wn[k];
            if (on)
                lsum -= w * lpc[i][j];
        }
    }
    /* at r = 1 the objective is -(1/G) sum_i A_i (0 for centred groups),
     * not the surrogate -sum w log pi whose gradient it shares */
    double asum = 0;
    for (int i = 0; i < NS; i++)
        asum += adv[i];
    ck_assert_double_eq_tol(st.loss, -asum / NS, 1e-9);
    ck_assert(fabs(lsum) > 1e-3);
    pt_context *big;
    ck_assert_ok(pt_context_create(&big, m, NS, T));
    pt_batch b;
    pt_batch_init(&b);
    b.batch = NS;
    b.seq = T;
    b.input_ids = ids;
    b.targets = tg;
    float loss;
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_loss(big, &b, wp, true, &loss));
    float *gp = copy_params(m, true);
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_loss(big, &b, wn, true, &loss));
    float *gn = copy_params(m, true);
    size_t n = total_params(m);
    double maxg = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        maxg = fmax(maxg, fabs(g[i]));
    ck_assert(maxg > 1e-3);
    for (size_t i = 0; i < n; i++) {
        double want = sp * gp[i] - sn * gn[i];
        worst = fmax(worst, fabs(g[i] - want) / maxg);
    }
    printf("policy gradient at mu = 1: worst |grpo - pg| / max|g| = %.3g over %zu parameters\n", worst, n);
    ck_assert_msg(worst < 1e-5, "grpo gradient differs from the policy gradient by %g", worst);
    free(g);
    free(gp);
    free(gn);
    pt_context_free(big);
    pt_context_free(ctx);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
}
END_TEST

START_TEST(test_finite_difference)
{
    /* ratio != 1 (old = current + noise), beta > 0 with reference
     * log-probabilities, dapo loss: d objective / d w by central differences
     * on the parameters with the largest gradients of a few tensors. */
    make_samples();
    pt_model *m = tiny_model(4);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 8, 16));
    float old[NS][5], ref[NS][5];
    current_logprobs(m, old);
    pt_rng r;
    pt__rng_seed(&r, 9);
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < 5; j++) {
            ref[i][j] = fminf(-1e-3f, old[i][j] + 0.3f * (float)(pt__rng_uniform(&r) - 0.5));
            old[i][j] = fminf(-1e-3f, old[i][j] + 0.24f * (float)(pt__rng_uniform(&r) - 0.5));
        }
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, old, ref);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.beta = 0.2;
    o.epsilon_low = 0.15;
    o.epsilon_high = 0.3;
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL));
    ck_assert(st.kl > 0);
    const char *names[] = { "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                            "model.layers.1.mlp.down_proj.weight", "model.norm.weight" };
    float *gall = copy_params(m, true); /* the later calls accumulate more */
    int checked = 0;
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        const pt_tensor_ref *t = pt__model_find_tensor(m, names[k]);
        ck_assert_msg(t != NULL, "%s", names[k]);
        float *gcopy = malloc(t->numel * sizeof *gcopy);
        size_t base = 0;
        for (size_t q = 0; pt__model_tensor(m, q) != t; q++)
            base += pt__model_tensor(m, q)->numel;
        memcpy(gcopy, gall + base, t->numel * sizeof *gcopy);
        for (int rep = 0; rep < 2; rep++) {
            size_t best = 0;
            for (size_t i = 0; i < t->numel; i++)
                if (fabsf(gcopy[i]) > fabsf(gcopy[best]))
                    best = i;
            double an = gcopy[best];
            gcopy[best] = 0; /* next rep: the second largest */
            float w0 = t->data[best];
            double h = 2e-3, lp, lm;
            t->data[best] = w0 + (float)h;
            ck_assert_ok(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL));
            lp = st.loss;
            t->data[best] = w0 - (float)h;
            ck_assert_ok(pt__grpo_accumulate(&st, ctx, m, buf, &o, NULL));
            lm = st.loss;
            t->data[best] = w0;
            double fd = (lp - lm) / (2 * h);
            double e = fabs(fd - an) / fabs(an);
            worst = fmax(worst, e);
            ck_assert_msg(fabs(an) > 1e-3, "%s: gradient %g too small to check", names[k], an);
            ck_assert_msg(e < 2e-2, "%s[%zu]: analytic %g, finite difference %g", names[k], best, an, fd);
            checked++;
        }
        free(gcopy);
    }
    free(gall);
    printf("finite differences: %d parameters, worst relative error %.3g\n", checked, worst);
    pt_context_free(ctx);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
}
END_TEST

/* ---- learning a reward ---------------------------------------------------------- */

#define NP 4  /* prompts per step */
#define G 8   /* completions per prompt */
#define MNT 3 /* new tokens */

static int reward_first_token(float *rewards, const pt_reward_batch *batch, void *payload)
{
    int *calls = payload;
    (*calls)++;
    for (int i = 0; i < batch->n; i++) {
        const pt_reward_item *it = &batch->items[i];
        rewards[i] = it->ids[it->prompt_len] < 8 ? 1.0f : 0.0f;
    }
    return 0;
}

/* a second, declining function: scores only completions whose last token is even */
static int reward_even_last(float *rewards, const pt_reward_batch *batch, void *payload)
{
    (void)payload;
    for (int i = 0; i < batch->n; i++) {
        const pt_reward_item *it = &batch->items[i];
        rewards[i] = it->ids[it->n_ids - 1] % 2 == 0 ? 0.0f : NAN;
    }
    return 0;
}

/* Run `steps` generate -> score -> step rounds; returns the mean reward of
 * each round in rew[] (may be NULL). */
static void train_rounds(pt_model *m, int steps, double *rew, pt_grpo_stats *last)
{
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 0.02;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 8, PL + MNT));
    pt_generator *gen;
    ck_assert_ok(pt_generator_create(&gen, m, NP * G, PL + MNT));
    const char *names[2] = { "first_token", "even_last" };
    double weights[2] = { 1.0, 0.0 };
    pt_rollout_buffer_options bo;
    pt_rollout_buffer_options_init(&bo);
    bo.n_reward_funcs = 2;
    bo.reward_names = names;
    bo.reward_weights = weights;
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, &bo));
    int calls = 0;
    for (int s = 0; s < steps; s++) {
        int32_t prompts[NP * G * PL], lens[NP * G];
        for (int p = 0; p < NP; p++)
            for (int g = 0; g < G; g++) {
                for (int t = 0; t < PL; t++)
                    prompts[(p * G + g) * PL + t] = (int32_t)(10 + 5 * p + t);
                lens[p * G + g] = PL;
            }
        pt_generate_options go;
        pt_generate_options_init(&go);
        go.max_new_tokens = MNT;
        go.n_stop_ids = 0;
        go.seed = 100 + (uint64_t)s;
        int32_t tok[NP * G * MNT], nt[NP * G], fin[NP * G];
        float lp[NP * G * MNT];
        ck_assert_ok(pt_generate(gen, prompts, lens, NP * G, &go, tok, nt, fin, lp));
        ck_assert_ok(pt_rollout_buffer_clear(buf));
        for (int i = 0; i < NP * G; i++) {
            int32_t ids[PL + MNT];
            memcpy(ids, prompts + i * PL, PL * sizeof *ids);
            memcpy(ids + PL, tok + i * MNT, (size_t)nt[i] * sizeof *ids);
            pt_rollout_sample smp;
            pt_rollout_sample_init(&smp);
            smp.ids = ids;
            smp.n_ids = PL + nt[i];
            smp.prompt_len = PL;
            smp.old_logprobs = lp + i * MNT;
            smp.group = i / G;
            smp.truncated = fin[i] == PT_FINISH_LENGTH;
            ck_assert_ok(pt_rollout_buffer_add(buf, &smp));
        }
        ck_assert_ok(pt_rollout_buffer_score(buf, 0, reward_first_token, &calls));
        ck_assert_ok(pt_rollout_buffer_score(buf, 1, reward_even_last, NULL));
        /* the policy's mean next-token entropy over the completion tokens,
         * before the update, one row at a time (every token is in the loss) */
        double ent_sum = 0, ent_n = 0;
        for (int i = 0; i < NP * G; i++) {
            int32_t ids[PL + MNT];
            float ent[PL + MNT];
            memcpy(ids, prompts + i * PL, PL * sizeof *ids);
            memcpy(ids + PL, tok + i * MNT, (size_t)nt[i] * sizeof *ids);
            pt_batch b1 = pt_test_row_batch(ids, NULL, PL + nt[i]);
            ck_assert_ok(pt_model_forward_entropy(ctx, &b1, NULL, ent));
            for (int t = PL - 1; t < PL - 1 + nt[i]; t++) {
                ent_sum += ent[t];
                ent_n++;
            }
        }
        pt_grpo_options o;
        pt_grpo_options_init(&o);
        pt_grpo_stats st;
        pt_grpo_stats_init(&st);
        ck_assert_ok(pt_grpo_step(&st, opt, ctx, buf, &o));
        ck_assert(!st.skipped);
        ck_assert_int_eq(st.step, s + 1);
        ck_assert_double_eq(st.completion_mean_length, MNT);
        ck_assert_double_eq(st.clipped_ratio, 1.0);
        /* only the scored (even) ones count; NaN when the round has none
         * (which rounds do depends on the samples, so on the CPU's kernels) */
        int n_even = 0;
        for (int i = 0; i < NP * G; i++)
            n_even += nt[i] > 0 && tok[i * MNT + nt[i] - 1] % 2 == 0;
        if (n_even > 0)
            ck_assert_double_eq(st.reward_func_mean[1], 0.0);
        else
            ck_assert(isnan(st.reward_func_mean[1]));
        ck_assert_double_eq_tol(st.entropy, ent_sum / ent_n, 1e-5);
        ck_assert(st.entropy > 0 && st.entropy <= log((double)V) + 1e-6);
        if (rew)
            rew[s] = st.reward;
        if (last)
            *last = st;
    }
    ck_assert_int_eq(calls, steps);
    pt_rollout_buffer_free(buf);
    pt_generator_free(gen);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
}

START_TEST(test_learns_reward)
{
    enum { S = 30 };
    pt_model *m = tiny_model(7);
    double rew[S];
    pt_grpo_stats last;
    train_rounds(m, S, rew, &last);
    double first = (rew[0] + rew[1] + rew[2]) / 3, end = (rew[S - 1] + rew[S - 2] + rew[S - 3]) / 3;
    printf("learning: mean reward %.3f over the first 3 steps, %.3f over the last 3\n", first, end);
    for (int s = 0; s < S; s++)
        printf("%.2f ", rew[s]);
    printf("\n");
    ck_assert_msg(first < 0.45, "the start is already at %g", first);
    ck_assert_msg(end > 0.85, "mean reward only reached %g (start %g)", end, first);
    pt_model_free(m);
}
END_TEST

START_TEST(test_deterministic)
{
    pt_model *a = tiny_model(8), *b = tiny_model(8);
    train_rounds(a, 3, NULL, NULL);
    train_rounds(b, 3, NULL, NULL);
    float *pa = copy_params(a, false), *pb = copy_params(b, false), *p0;
    pt_model *c = tiny_model(8);
    p0 = copy_params(c, false);
    size_t n = total_params(a);
    ck_assert(memcmp(pa, pb, n * sizeof *pa) == 0);
    ck_assert(memcmp(pa, p0, n * sizeof *pa) != 0);
    free(pa);
    free(pb);
    free(p0);
    pt_model_free(a);
    pt_model_free(b);
    pt_model_free(c);
}
END_TEST

START_TEST(test_mu2_keeps_old_fixed)
{
    /* Step 1 records old = current (every ratio 1: nothing clipped even with
     * eps 0); step 2 on the same buffer sees ratios != 1 against those
     * fixed values, so with eps 0 tokens count as clipped. */
    make_samples();
    pt_model *m = tiny_model(5);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.type = PT_OPTIMIZER_SGD;
    oo.lr = 0.5;
    oo.momentum = 0;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 8, 16));
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, NULL, NULL);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.epsilon_low = o.epsilon_high = 0.0;
    pt_grpo_stats s1, s2;
    pt_grpo_stats_init(&s1);
    pt_grpo_stats_init(&s2);
    ck_assert_ok(pt_grpo_step(&s1, opt, ctx, buf, &o));
    ck_assert_double_eq(s1.clip_ratio_region, 0.0);
    ck_assert(s1.grad_norm > 0);
    ck_assert_ok(pt_grpo_step(&s2, opt, ctx, buf, &o));
    ck_assert_msg(s2.clip_ratio_region > 0.5, "clip region %g", s2.clip_ratio_region);
    ck_assert_double_eq(s2.clip_ratio_region, s2.clip_ratio_low + s2.clip_ratio_high);
    /* with eps 0 each token's term is -min(r A, A) >= -A: the objective
     * against fixed old values cannot fall below step 1's */
    ck_assert_msg(s2.loss > s1.loss, "loss %g then %g", s1.loss, s2.loss);
    ck_assert_int_eq(s2.step, 2);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
}
END_TEST

/* ---- bad inputs ------------------------------------------------------------------- */

static int failing_reward(float *rewards, const pt_reward_batch *batch, void *payload)
{
    (void)payload;
    for (int i = 0; i < batch->n; i++)
        rewards[i] = 5.0f; /* written, but must not reach the buffer */
    return 7;
}

START_TEST(test_bad_inputs)
{
    make_samples();
    pt_model *m = tiny_model(6);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 8, 6));
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    float *before = copy_params(m, false);
    size_t n = total_params(m);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);

    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_ESTATE, "the buffer is empty");

    pt_rollout_sample s;
    pt_rollout_sample_init(&s);
    s.ids = sids[0];
    s.n_ids = PL;
    s.prompt_len = PL;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "lengths mismatch");
    s.n_ids = PL + 2;
    float old[2] = { -1.0f, NAN };
    s.old_logprobs = old;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "old logprob 1 is nan");
    s.old_logprobs = NULL;
    uint8_t zero[2] = { 0, 0 };
    s.loss_mask = zero;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "loss mask is all zero");
    s.loss_mask = NULL;
    s.size = 3;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_EINVAL, "pt_rollout_sample_init");
    /* a sample from an older header (it ends before loss_mask): the rest defaults */
    s.size = offsetof(pt_rollout_sample, loss_mask);
    s.old_logprobs = old; /* beyond its size: not read (old[1] is NaN) */
    int cnt = -1;
    ck_assert_ok(pt_rollout_buffer_add(buf, &s));
    cnt = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(cnt, 1);
    float lp_old[2];
    ck_assert_status(pt_rollout_buffer_get_logprobs(lp_old, buf, 0, PT_ROLLOUT_OLD), PT_ESTATE, "no old");
    ck_assert_ok(pt_rollout_buffer_clear(buf));
    s.old_logprobs = NULL;
    s.size = sizeof s;
    cnt = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(cnt, 0);
    /* a group is all or nothing */
    pt_rollout_sample grp2[2] = { s, s };
    grp2[1].prompt_len = 0;
    ck_assert_status(pt_rollout_buffer_add_group(buf, grp2, 2), PT_EINVAL, "sample 1");
    cnt = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(cnt, 0);
    add_samples(buf, NULL, NULL);
    cnt = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(cnt, NS);

    o.epsilon_low = -0.1;
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, "epsilon_low -0.1");
    pt_grpo_options_init(&o);
    o.loss_type = 9;
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, "unknown loss_type 9");
    pt_grpo_options_init(&o);
    o.scale_rewards = -1;
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, "unknown scale_rewards -1");
    pt_grpo_options_init(&o);
    o.importance_sampling_level = 2;
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, "unknown importance_sampling_level 2");
    pt_grpo_options_init(&o);
    o.beta = 0.1;
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, "has no ref_logprobs");
    pt_grpo_options_init(&o);
    o.loss_type = PT_GRPO_LOSS_DR_GRPO;
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, "needs max_completion_length");
    pt_grpo_options_init(&o);
    /* the context holds 6 tokens, samples have up to 8: an error, nothing applied */
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, &o), PT_EINVAL, "pt_grpo_step: forward of 1 rows");

    /* a failing reward function: PT_ECALLBACK, rewards as they were */
    ck_assert_status(pt_rollout_buffer_score(buf, 0, failing_reward, NULL), PT_ECALLBACK, "returned 7");
    for (int i = 0; i < NS; i++) {
        float rw;
        ck_assert_ok(pt_rollout_buffer_get_reward(&rw, buf, i, 0));
        ck_assert_float_eq(rw, srew[i]);
    }
    ck_assert_status(pt_rollout_buffer_score(buf, 1, failing_reward, NULL), PT_EINVAL, "reward function 1");
    ck_assert_status(pt_rollout_buffer_set_reward(buf, NS, 0, 1.0f), PT_EINVAL, "sample 6");

    /* nothing above touched the model or the optimizer */
    float *after = copy_params(m, false);
    ck_assert(memcmp(before, after, n * sizeof *before) == 0);
    int64_t step = -1;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, 0);
    pt_opt_state_view sv;
    pt__optimizer_state_view(&sv, opt);
    ck_assert_int_eq(sv.skipped, 0);
    for (size_t i = 0; i < sv.numel_total; i++)
        ck_assert(sv.m[i] == 0.0f);
    free(before);
    free(after);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
}
END_TEST

START_TEST(test_zero_std_groups)
{
    /* equal rewards in both groups: A = 0, both groups counted; dropping them
     * leaves nothing to train on, so the step is skipped and counted. */
    make_samples();
    pt_model *m = tiny_model(2);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 8, 16));
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, NULL, NULL);
    for (int i = 0; i < NS; i++)
        ck_assert_ok(pt_rollout_buffer_set_reward(buf, i, 0, i < 3 ? 1.0f : 0.0f));
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    o.drop_zero_std_groups = true;
    ck_assert_ok(pt_grpo_step(&st, opt, ctx, buf, &o));
    ck_assert_double_eq(st.frac_reward_zero_std, 1.0);
    ck_assert_int_eq(st.groups_dropped, 2);
    ck_assert(st.skipped);
    ck_assert_double_eq(st.tokens, 0.0);
    ck_assert_double_eq_tol(st.reward, 0.5, 1e-12);
    ck_assert_int_eq(st.skipped_total, 1);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
}
END_TEST

START_TEST(test_lora_adapters_only)
{
    /* With LoRA the step trains the adapters only: the base stays
     * bit-identical, lora_B moves (it starts at 0, so its gradient is the
     * one that is non-zero at the first step). */
    make_samples();
    pt_model *m = tiny_model(10);
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 2;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    size_t nbase = pt__model_base_tensor_count(m);
    float *base0 = malloc(total_params(m) * sizeof *base0);
    size_t nb = 0;
    for (size_t i = 0; i < nbase; i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(base0 + nb, t->data, t->numel * sizeof *base0);
        nb += t->numel;
    }
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 0.01;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 8, 16));
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, NULL, NULL);
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_grpo_step(&st, opt, ctx, buf, NULL));
    ck_assert(!st.skipped && st.grad_norm > 0);
    nb = 0;
    for (size_t i = 0; i < nbase; i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        ck_assert_msg(memcmp(base0 + nb, t->data, t->numel * sizeof *base0) == 0, "%s changed", t->name);
        nb += t->numel;
    }
    const pt_tensor_ref *b = pt__model_find_tensor(m, "model.layers.0.self_attn.q_proj.lora_B.weight");
    ck_assert(b != NULL);
    double moved = 0;
    for (size_t i = 0; i < b->numel; i++)
        moved += fabsf(b->data[i]);
    ck_assert_msg(moved > 1e-4, "lora_B did not move (%g)", moved);
    free(base0);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
}
END_TEST

START_TEST(test_compute_logprobs)
{
    /* Reference log-probabilities from a forward of a second (reference)
     * model; old ones from the policy itself: then the first step has ratio
     * 1 and kl equals the mean k3 between the two models. */
    make_samples();
    pt_model *m = tiny_model(11), *refm = tiny_model(12);
    pt_context *ctx, *rctx, *small;
    ck_assert_ok(pt_context_create(&ctx, m, 8, 16));
    ck_assert_ok(pt_context_create(&rctx, refm, 2, 16)); /* 6 rows in micro-batches of 2 */
    ck_assert_ok(pt_context_create(&small, refm, 8, 5));
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, NULL, NULL);
    float got[5];
    ck_assert_status(pt_rollout_buffer_get_logprobs(got, buf, 0, PT_ROLLOUT_REF), PT_ESTATE, "no reference");
    /* too long for a 5-token context: an error and the buffer unchanged */
    ck_assert_status(pt_rollout_buffer_compute_logprobs(buf, small, PT_ROLLOUT_REF), PT_EINVAL,
                     "pt_rollout_buffer_compute_logprobs: forward of 1 rows");
    ck_assert_status(pt_rollout_buffer_get_logprobs(got, buf, 0, PT_ROLLOUT_REF), PT_ESTATE, "no reference");
    ck_assert_status(pt_rollout_buffer_compute_logprobs(buf, ctx, 5), PT_EINVAL, "which 5 is not PT_ROLLOUT_OLD, PT_ROLLOUT_REF or PT_ROLLOUT_SAMPLING");
    ck_assert_ok(pt_rollout_buffer_compute_logprobs(buf, rctx, PT_ROLLOUT_REF));
    ck_assert_ok(pt_rollout_buffer_compute_logprobs(buf, ctx, PT_ROLLOUT_OLD));
    float lpm[NS][5], lpr[NS][5];
    current_logprobs(m, lpm);
    current_logprobs(refm, lpr);
    double k3 = 0, cnt = 0;
    for (int i = 0; i < NS; i++) {
        int nc = slen[i] - PL;
        float o[5];
        ck_assert_ok(pt_rollout_buffer_get_logprobs(got, buf, i, PT_ROLLOUT_REF));
        ck_assert_ok(pt_rollout_buffer_get_logprobs(o, buf, i, PT_ROLLOUT_OLD));
        for (int j = 0; j < nc; j++) {
            ck_assert_float_eq_tol(got[j], lpr[i][j], 1e-5f);
            ck_assert_float_eq_tol(o[j], lpm[i][j], 1e-5f);
            if (smask[i][j]) {
                double d = (double)got[j] - (double)o[j];
                k3 += exp(d) - d - 1;
                cnt++;
            }
        }
    }
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.beta = 0.05;
    o.epsilon_low = o.epsilon_high = 0.0;
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_grpo_step(&st, opt, ctx, buf, &o));
    ck_assert(k3 / cnt > 1e-3);
    ck_assert_double_eq_tol(st.kl, k3 / cnt, 1e-4 * k3 / cnt);
    ck_assert_double_eq(st.clip_ratio_region, 0.0); /* the recorded old values are the policy's */
    pt_context_free(ctx);
    pt_context_free(rctx);
    pt_context_free(small);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
    pt_model_free(refm);
}
END_TEST

START_TEST(test_lora_base_is_reference)
{
    /* With LoRA adapters and beta > 0, samples without reference logprobs
     * get them from the frozen base: the adapters switched off make the
     * model compute exactly its base (bit-identical to a model that never
     * had adapters), and the step's reference values and kl are those. */
    make_samples();
    pt_model *m = tiny_model(13), *base = tiny_model(13);
    ck_assert_status(pt_model_set_lora_enabled(base, false), PT_ESTATE, "has no LoRA adapters");
    ck_assert(!pt_model_lora_enabled(base));
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 2;
    lo.targets = PT_LORA_ALL;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    ck_assert(pt_model_lora_enabled(m));
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 0.05;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 8, 16));
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, NULL, NULL);
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_grpo_step(&st, opt, ctx, buf, NULL)); /* beta 0: moves lora_B off 0 */

    float lpb[NS][5], lpm[NS][5], lpoff[NS][5];
    current_logprobs(base, lpb);
    current_logprobs(m, lpm);
    double diff = 0;
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < slen[i] - PL; j++)
            diff = fmax(diff, fabs((double)lpm[i][j] - lpb[i][j]));
    ck_assert_msg(diff > 1e-4, "the adapters changed nothing (%g)", diff);
    ck_assert_ok(pt_model_set_lora_enabled(m, false));
    ck_assert(!pt_model_lora_enabled(m));
    current_logprobs(m, lpoff);
    for (int i = 0; i < NS; i++)
        ck_assert(memcmp(lpoff[i], lpb[i], (size_t)(slen[i] - PL) * sizeof(float)) == 0);
    /* switched off, nothing is trainable: a backward is refused */
    int32_t tg[16];
    for (int t = 0; t < slen[0]; t++)
        tg[t] = t + 1 < slen[0] ? sids[0][t + 1] : -1;
    pt_batch b = pt_test_row_batch(sids[0], tg, slen[0]);
    float loss;
    ck_assert_status(pt_model_loss(ctx, &b, NULL, true, &loss), PT_ESTATE, "switched off");
    ck_assert_ok(pt_model_set_lora_enabled(m, true));

    /* a fresh buffer without reference values, beta > 0 */
    pt_rollout_buffer *buf2;
    ck_assert_ok(pt_rollout_buffer_create(&buf2, NULL));
    add_samples(buf2, NULL, NULL);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.beta = 0.1;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_grpo_step(&st, opt, ctx, buf2, &o));
    ck_assert(pt_model_lora_enabled(m)); /* switched on again */
    double k3 = 0, cnt = 0;
    for (int i = 0; i < NS; i++) {
        float ref[5], old[5];
        ck_assert_ok(pt_rollout_buffer_get_logprobs(ref, buf2, i, PT_ROLLOUT_REF));
        ck_assert_ok(pt_rollout_buffer_get_logprobs(old, buf2, i, PT_ROLLOUT_OLD));
        for (int j = 0; j < slen[i] - PL; j++) {
            ck_assert_float_eq_tol(ref[j], lpb[i][j], 1e-5f);
            ck_assert_float_eq_tol(old[j], lpm[i][j], 1e-5f);
            if (smask[i][j]) {
                double d = (double)ref[j] - (double)old[j];
                k3 += exp(d) - d - 1;
                cnt++;
            }
        }
    }
    ck_assert(k3 / cnt > 1e-7);
    ck_assert_double_eq_tol(st.kl, k3 / cnt, 1e-3 * k3 / cnt + 1e-9);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    pt_rollout_buffer_free(buf2);
    pt_model_free(m);
    pt_model_free(base);
}
END_TEST

static int abort_at_first_poll(void *payload)
{
    int *calls = payload;
    return ++*calls >= 1;
}

START_TEST(test_abort_between_micro_batches)
{
    /* 6 rows in a 4-row context (two micro-batches): the abort callback
     * stops the step at its first poll (in a forward or between
     * micro-batches); the gradients are dropped and nothing is applied. */
    make_samples();
    pt_model *m = tiny_model(9);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 4, 16));
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    add_samples(buf, NULL, NULL);
    float *before = copy_params(m, false);
    int calls = 0;
    pt_set_abort_callback(abort_at_first_poll, &calls);
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_status(pt_grpo_step(&st, opt, ctx, buf, NULL), PT_ECANCELLED, NULL);
    pt_set_abort_callback(NULL, NULL);
    ck_assert_int_eq(calls, 1);
    float *after = copy_params(m, false), *grads = copy_params(m, true);
    size_t n = total_params(m);
    ck_assert(memcmp(before, after, n * sizeof *before) == 0);
    for (size_t i = 0; i < n; i++)
        ck_assert(grads[i] == 0.0f);
    int64_t step = -1;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, 0);
    /* and then the same step runs */
    ck_assert_ok(pt_grpo_step(&st, opt, ctx, buf, NULL));
    ck_assert_int_eq(st.step, 1);
    ck_assert(st.grad_norm > 0);
    free(before);
    free(after);
    free(grads);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    pt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grpo_step");
    TCase *tc = tcase_create("step");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_policy_gradient_at_mu1);
    tcase_add_test(tc, test_finite_difference);
    tcase_add_test(tc, test_mu2_keeps_old_fixed);
    tcase_add_test(tc, test_bad_inputs);
    tcase_add_test(tc, test_zero_std_groups);
    tcase_add_test(tc, test_abort_between_micro_batches);
    tcase_add_test(tc, test_lora_adapters_only);
    tcase_add_test(tc, test_compute_logprobs);
    tcase_add_test(tc, test_lora_base_is_reference);
    tcase_add_test(tc, test_deterministic);
    tcase_add_test(tc, test_learns_reward);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
