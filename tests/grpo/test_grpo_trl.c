/* TRL 1.9's semantics through pt_grpo_step on a tiny model, computed by
 * hand: completions every reward function declined (left out of their
 * group's mean and std, advantage 0; the reported mean reward over the
 * others), frac_reward_zero_std as TRL computes it beside ours, GSPO's clip
 * metrics per sequence, vespo at mu = 1, and the entropy bonus (its value
 * against the reported entropy, its gradient against central
 * differences). */
#include "testutil.h"

#include "core/core.h"
#include "model/model.h"
#include "train/grpo_internal.h"

#include <math.h>

#define V 37
#define PL 3 /* prompt length */
#define NC 2 /* completion tokens per sample */
#define N 10 /* samples */

/* Groups 10: {1, declined, 0}; 11: {2, 0.5, 3.5}; 12: {5, declined};
 * 13: {1, 1}. */
static const float k_rew[N] = { 1.0f, NAN, 0.0f, 2.0f, 0.5f, 3.5f, 5.0f, NAN, 1.0f, 1.0f };
static const int64_t k_grp[N] = { 10, 10, 10, 11, 11, 11, 12, 12, 13, 13 };

typedef struct env {
    pt_model *m;
    pt_context *ctx;
    pt_optimizer *opt;
    pt_rollout_buffer *buf;
} env;

static void env_open(env *e, const float *rew, const bool *truncated)
{
    e->m = pt_test_tiny_llama(V, 21);
    ck_assert_ok(pt_context_create(&e->ctx, e->m, N, PL + NC));
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 0.0; /* the weights stay: every step sees the same model */
    ck_assert_ok(pt_optimizer_create(&e->opt, e->m, &oo));
    ck_assert_ok(pt_rollout_buffer_create(&e->buf, NULL));
    for (int i = 0; i < N; i++) {
        int32_t ids[PL + NC] = { 1, 2, 3, (int32_t)(4 + i % 5), (int32_t)(9 + i % 7) };
        pt_rollout_sample s;
        pt_rollout_sample_init(&s);
        s.ids = ids;
        s.n_ids = PL + NC;
        s.prompt_len = PL;
        s.group = k_grp[i];
        s.rewards = &rew[i];
        s.truncated = truncated && truncated[i];
        ck_assert_ok(pt_rollout_buffer_add(e->buf, &s));
    }
}

static void env_close(env *e)
{
    pt_rollout_buffer_free(e->buf);
    pt_optimizer_free(e->opt);
    pt_context_free(e->ctx);
    pt_model_free(e->m);
}

/* Each sample's dL/dlogp as the step hands them to the backward. */
static float g_dl[N][NC];
static void record(int sample, const float *dlogp, int n, void *payload)
{
    (void)payload;
    ck_assert_int_eq(n, NC);
    memcpy(g_dl[sample], dlogp, sizeof g_dl[sample]);
}

/* One step with loss grpo; the old log-probabilities are recorded by the
 * step itself (mu = 1), so every ratio is exactly 1 and every token of
 * sample i has dL/dlogp = -A_i / (|o_i| G) = -A_i / (2 * 10). */
static void step_advantages(double *adv, pt_grpo_stats *st, env *e, int scale)
{
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.loss_type = PT_GRPO_LOSS_GRPO;
    o.scale_rewards = scale;
    pt_grpo_stats_init(st);
    memset(g_dl, 0, sizeof g_dl);
    pt__grpo_set_dlogp_hook(e->buf, record, NULL);
    int rc = pt_grpo_step(st, e->opt, e->ctx, e->buf, &o);
    pt__grpo_set_dlogp_hook(e->buf, NULL, NULL);
    ck_assert_ok(rc);
    ck_assert(!st->skipped);
    for (int i = 0; i < N; i++) {
        ck_assert_float_eq(g_dl[i][0], g_dl[i][1]);
        adv[i] = -(double)g_dl[i][0] * NC * N;
    }
}

static void assert_adv(const double *got, const double *want, const char *scale)
{
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 1e-6 * fmax(1.0, fabs(want[i])),
                      "scale %s: sample %d has advantage %.9g, by hand %.9g", scale, i, got[i], want[i]);
}

START_TEST(test_declined_by_hand)
{
    env e;
    env_open(&e, k_rew, NULL);
    /* The rewards that count: 1, 0, 2, 0.5, 3.5, 5, 1, 1 (the two declined
     * left out): sum 14 over 8, mean 1.75 (counting the declined as 0, as
     * before: 14 / 10 = 1.4).  Deviations -0.75, -1.75, 0.25, -1.25, 1.75,
     * 3.25, -0.75, -0.75; squares 0.5625 + 3.0625 + 0.0625 + 1.5625 +
     * 3.0625 + 10.5625 + 0.5625 + 0.5625 = 20; std sqrt(20 / 7). */
    const double bstd = sqrt(20.0 / 7.0);
    /* Group 10 {1, -, 0}: mean 0.5, std sqrt((0.25 + 0.25) / 1) = sqrt(0.5);
     * group 11 {2, 0.5, 3.5}: mean 2, std sqrt((0 + 2.25 + 2.25) / 2) = 1.5;
     * group 12 {5, -}: one reward, nothing to learn (TRL: nanstd NaN, so
     * NaN advantages, zeroed); group 13 {1, 1}: std 0.  The declined: 0. */
    const double s10 = sqrt(0.5) + 1e-4, s11 = 1.5 + 1e-4, sb = bstd + 1e-4;
    const double want_group[N] = { 0.5 / s10, 0, -0.5 / s10, 0, -1.5 / s11, 1.5 / s11, 0, 0, 0, 0 };
    const double want_batch[N] = { 0.5 / sb, 0, -0.5 / sb, 0, -1.5 / sb, 1.5 / sb, 0, 0, 0, 0 };
    const double want_none[N] = { 0.5, 0, -0.5, 0, -1.5, 1.5, 0, 0, 0, 0 };
    static const char *const names[3] = { "group", "batch", "none" };
    const double *want[3] = { want_group, want_batch, want_none };
    for (int sc = 0; sc < 3; sc++) {
        double adv[N];
        pt_grpo_stats st;
        step_advantages(adv, &st, &e, sc);
        assert_adv(adv, want[sc], names[sc]);
        ck_assert_double_eq_tol(st.reward, 1.75, 1e-12);
        ck_assert_double_eq_tol(st.reward_std, bstd, 1e-12);
        ck_assert_double_eq_tol(st.reward_func_mean[0], 1.75, 1e-12);
        ck_assert_int_eq(st.samples_unscored, 2);
        ck_assert_int_eq(st.groups, 4);
        /* TRL: per sample, isclose(std, 0) of the std the scaling uses:
         * group / none: only group 13's two samples (group 12's std is
         * NaN), 2 of 10; batch: the batch's std, not zero: 0.  Ours:
         * groups 12 and 13 of 4. */
        ck_assert_double_eq_tol(st.frac_reward_zero_std, sc == PT_GRPO_SCALE_BATCH ? 0.0 : 0.2, 1e-15);
        ck_assert_double_eq_tol(st.frac_zero_std_groups, 0.5, 1e-15);
        ck_assert(isnan(st.vespo_phi_seq_mean));
    }
    env_close(&e);
}
END_TEST

START_TEST(test_declined_overlong_scores)
{
    /* With DAPO's over-long penalty (in TRL a reward function that never
     * declines) no sample is declined: max_completion_length 2, buffer 1:
     * every 2-token completion gets ((2 - 1) - 2) / 1 = -1.  Group 10 {0,
     * -1, -1}, ..., group 12 {4, -1}: nothing is unscored, the mean reward
     * is over all ten: (14 - 10) / 10 = 0.4 (the two declined get only
     * the penalty). */
    env e;
    env_open(&e, k_rew, NULL);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.max_completion_length = 2;
    o.overlong_buffer = 1;
    pt_grpo_stats st;
    pt_grpo_stats_init(&st);
    ck_assert_ok(pt_grpo_step(&st, e.opt, e.ctx, e.buf, &o));
    ck_assert_int_eq(st.samples_unscored, 0);
    ck_assert_double_eq_tol(st.reward, 0.4, 1e-12);
    env_close(&e);
}
END_TEST

START_TEST(test_all_declined_group_and_one_sample)
{
    /* A group every member of which declined: TRL's nanmean is NaN there,
     * every advantage NaN, zeroed; nothing else moves.  And a buffer with a
     * single reward: reward_std NaN (TRL's nanstd of one value). */
    float rew[N];
    memcpy(rew, k_rew, sizeof rew);
    rew[3] = rew[4] = rew[5] = NAN; /* group 11 all declined */
    env e;
    env_open(&e, rew, NULL);
    double adv[N];
    pt_grpo_stats st;
    step_advantages(adv, &st, &e, PT_GRPO_SCALE_GROUP);
    const double s10 = sqrt(0.5) + 1e-4;
    const double want[N] = { 0.5 / s10, 0, -0.5 / s10, 0, 0, 0, 0, 0, 0, 0 };
    assert_adv(adv, want, "group, group 11 declined");
    ck_assert_int_eq(st.samples_unscored, 5);
    ck_assert_double_eq_tol(st.reward, (1 + 0 + 5 + 1 + 1) / 5.0, 1e-12);
    env_close(&e);

    for (int i = 0; i < N; i++)
        rew[i] = i == 6 ? 5.0f : NAN;
    env_open(&e, rew, NULL);
    step_advantages(adv, &st, &e, PT_GRPO_SCALE_BATCH);
    const double zero[N] = { 0 };
    assert_adv(adv, zero, "batch, one reward");
    ck_assert_double_eq(st.reward, 5.0);
    ck_assert(isnan(st.reward_std));
    ck_assert(isnan(st.reward_func_std[0]));
    /* TRL batch: nanstd of one value is NaN, not close to 0 */
    ck_assert_double_eq(st.frac_reward_zero_std, 0.0);
    ck_assert_double_eq(st.frac_zero_std_groups, 1.0);
    env_close(&e);
}
END_TEST

START_TEST(test_gspo_clip_counts_sequences)
{
    /* GSPO with a tiny band and old log-probabilities below the current
     * ones for the samples of group 11: their sequence ratio exp(mean(logp -
     * old)) = exp(0.5) is above 1 + eps_high; sample 5 has A > 0 (clipped
     * high), sample 4 A < 0 (not clipped: low needs r < 1 - eps_low), 3 has
     * A = 0.  Every other sample keeps ratio 1.  TRL counts sequences: 1
     * of the 10 samples, and with sample 9 truncated and masked (no loss
     * tokens) still 1 of 10; per token it would be 2 of 20, then 2 of 18. */
    for (int masked = 0; masked < 2; masked++) {
        bool tr[N] = { false };
        tr[9] = masked;
        env e;
        env_open(&e, k_rew, tr);
        /* the current log-probabilities, then old = current - 0.5 on group 11 */
        ck_assert_ok(pt_rollout_buffer_compute_logprobs(e.buf, e.ctx, PT_ROLLOUT_OLD));
        pt_rollout_buffer *b2;
        ck_assert_ok(pt_rollout_buffer_create(&b2, NULL));
        for (int i = 0; i < N; i++) {
            float old[NC];
            ck_assert_ok(pt_rollout_buffer_get_logprobs(old, e.buf, i, PT_ROLLOUT_OLD));
            for (int j = 0; j < NC && k_grp[i] == 11; j++)
                old[j] -= 0.5f;
            int32_t ids[PL + NC] = { 1, 2, 3, (int32_t)(4 + i % 5), (int32_t)(9 + i % 7) };
            pt_rollout_sample s;
            pt_rollout_sample_init(&s);
            s.ids = ids;
            s.n_ids = PL + NC;
            s.prompt_len = PL;
            s.group = k_grp[i];
            s.rewards = &k_rew[i];
            s.old_logprobs = old;
            s.truncated = tr[i];
            ck_assert_ok(pt_rollout_buffer_add(b2, &s));
        }
        pt_grpo_options o;
        pt_grpo_options_init(&o);
        o.importance_sampling_level = PT_GRPO_IS_SEQUENCE;
        o.epsilon_low = 3e-4;
        o.epsilon_high = 4e-4;
        o.mask_truncated_completions = masked;
        pt_grpo_stats st;
        pt_grpo_stats_init(&st);
        ck_assert_ok(pt_grpo_step(&st, e.opt, e.ctx, b2, &o));
        ck_assert_double_eq(st.tokens, masked ? 18.0 : 20.0);
        ck_assert_double_eq_tol(st.clip_ratio_high, 0.1, 1e-15);
        ck_assert_double_eq(st.clip_ratio_low, 0.0);
        ck_assert_double_eq_tol(st.clip_ratio_region, 0.1, 1e-15);
        pt_rollout_buffer_free(b2);
        env_close(&e);
    }
}
END_TEST

START_TEST(test_vespo_at_mu1)
{
    /* At mu = 1 (old = current) VESPO's sequence weight is w = 1 and
     * phi(1) = exp(lambda + k log 1 - lambda) = 1 for either sign: the
     * gradient is dapo's at ratio 1, -A / (loss tokens) per token, the
     * phi mean 1; the loss differs (-sum A log pi / N against -sum A / N). */
    env e;
    env_open(&e, k_rew, NULL);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    float dl_dapo[N][NC] = { { 0 } }; /* set by the first pass */
    double loss[2];
    for (int v = 0; v < 2; v++) {
        o.loss_type = v ? PT_GRPO_LOSS_VESPO : PT_GRPO_LOSS_DAPO;
        pt_grpo_stats st;
        pt_grpo_stats_init(&st);
        memset(g_dl, 0, sizeof g_dl);
        pt__grpo_set_dlogp_hook(e.buf, record, NULL);
        int rc = pt_grpo_step(&st, e.opt, e.ctx, e.buf, &o);
        pt__grpo_set_dlogp_hook(e.buf, NULL, NULL);
        ck_assert_ok(rc);
        loss[v] = st.loss;
        if (!v) {
            memcpy(dl_dapo, g_dl, sizeof g_dl);
            ck_assert(isnan(st.vespo_phi_seq_mean));
            continue;
        }
        ck_assert_double_eq(st.vespo_phi_seq_mean, 1.0);
        ck_assert_double_eq(st.clip_ratio_region, 0.0);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < NC; j++)
                ck_assert_float_eq_tol(g_dl[i][j], dl_dapo[i][j], 1e-7f);
    }
    /* dapo at ratio 1: -sum_i |o_i| A_i / 20 = 0 (each group's advantages
     * sum to 0 and every |o_i| is 2) */
    ck_assert_double_eq_tol(loss[0], 0.0, 1e-7);
    ck_assert(fabs(loss[1]) > 1e-4);
    env_close(&e);
}
END_TEST

START_TEST(test_vespo_options)
{
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    ck_assert(o.vespo_k_pos == 2 && o.vespo_lambda_pos == 3 && o.vespo_k_neg == 3 && o.vespo_lambda_neg == 2);
    int lt;
    ck_assert_ok(pt_grpo_loss_type_from_name(&lt, "vespo"));
    ck_assert_int_eq(lt, PT_GRPO_LOSS_VESPO);
    ck_assert_str_eq(pt_grpo_loss_type_name(PT_GRPO_LOSS_VESPO), "vespo");
    o.loss_type = PT_GRPO_LOSS_VESPO;
    ck_assert_ok(pt__grpo_check_options(&o));
    o.vespo_k_neg = -1;
    ck_assert_int_eq(pt__grpo_check_options(&o), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "vespo_k_neg") != NULL);
    o.vespo_k_neg = 3;
    o.vespo_lambda_pos = NAN;
    ck_assert_int_eq(pt__grpo_check_options(&o), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "vespo_lambda_pos") != NULL);
    o.vespo_lambda_pos = 3;
    o.delta = 2;
    ck_assert_int_eq(pt__grpo_check_options(&o), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "vespo") != NULL);
}
END_TEST

START_TEST(test_entropy_bonus_value)
{
    /* The bonus is -entropy_coef times the mean entropy over the loss
     * tokens, for every loss type (TRL: the dapo family sums over their
     * token count, the same mean here): the loss with it minus the loss
     * without is -0.3 * stats.entropy. */
    env e;
    env_open(&e, k_rew, NULL);
    static const int types[3] = { PT_GRPO_LOSS_GRPO, PT_GRPO_LOSS_DAPO, PT_GRPO_LOSS_BNPO };
    for (int k = 0; k < 3; k++) {
        pt_grpo_options o;
        pt_grpo_options_init(&o);
        o.loss_type = types[k];
        pt_grpo_stats s0, s1;
        pt_grpo_stats_init(&s0);
        pt_grpo_stats_init(&s1);
        ck_assert_ok(pt_grpo_step(&s0, e.opt, e.ctx, e.buf, &o));
        o.entropy_coef = 0.3;
        ck_assert_ok(pt_grpo_step(&s1, e.opt, e.ctx, e.buf, &o));
        ck_assert(s0.entropy > 0.5);
        ck_assert_double_eq(s1.entropy, s0.entropy);
        ck_assert_double_eq_tol(s1.loss - s0.loss, -0.3 * s0.entropy, 1e-9);
    }
    /* With top_entropy_quantile 0.5 the bonus covers the kept tokens (H >=
     * the threshold the step reports): grpo averages them, dapo sums them
     * over all 20 loss tokens (TRL's normaliser).  The entropies here from
     * a forward of each row. */
    double hsum = 0, hkept = 0, nkept = 0;
    float ent[N][NC];
    for (int i = 0; i < N; i++) {
        int32_t ids[PL + NC] = { 1, 2, 3, (int32_t)(4 + i % 5), (int32_t)(9 + i % 7) };
        float row[PL + NC];
        pt_batch b = pt_test_row_batch(ids, NULL, PL + NC);
        ck_assert_ok(pt_model_forward_entropy(e.ctx, &b, NULL, row));
        for (int j = 0; j < NC; j++) {
            ent[i][j] = row[PL - 1 + j];
            hsum += ent[i][j];
        }
    }
    for (int k = 0; k < 2; k++) {
        pt_grpo_options o;
        pt_grpo_options_init(&o);
        o.loss_type = k ? PT_GRPO_LOSS_DAPO : PT_GRPO_LOSS_GRPO;
        o.top_entropy_quantile = 0.5;
        pt_grpo_stats s0, s1;
        pt_grpo_stats_init(&s0);
        pt_grpo_stats_init(&s1);
        ck_assert_ok(pt_grpo_step(&s0, e.opt, e.ctx, e.buf, &o));
        o.entropy_coef = 0.3;
        ck_assert_ok(pt_grpo_step(&s1, e.opt, e.ctx, e.buf, &o));
        hkept = nkept = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < NC; j++)
                if ((double)ent[i][j] >= s1.entropy_threshold) {
                    hkept += ent[i][j];
                    nkept++;
                }
        ck_assert(nkept >= 10 && nkept < 20);
        ck_assert_double_eq_tol(s1.entropy, hsum / 20, 1e-5);
        /* TRL's world entropy: over the kept tokens */
        ck_assert_double_eq_tol(s1.entropy_measured, hkept / nkept, 1e-5);
        ck_assert_double_eq_tol(s1.loss - s0.loss, -0.3 * hkept / (k ? 20 : nkept), 1e-5);
    }
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.entropy_coef = NAN;
    ck_assert_int_eq(pt__grpo_check_options(&o), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "entropy_coef nan must be finite") != NULL);
    env_close(&e);
}
END_TEST

START_TEST(test_entropy_bonus_gradient)
{
    /* Central differences of the whole objective (the old log-probabilities
     * recorded by the first call, fixed after; grpo, then dr_grpo whose
     * policy term is normalised apart from the bonus's mean) with
     * entropy_coef 2: the parameters with the largest gradients of three
     * tensors. */
    env e;
    env_open(&e, k_rew, NULL);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.loss_type = PT_GRPO_LOSS_GRPO;
    o.entropy_coef = 2.0;
    for (int variant = 0; variant < 2; variant++) {
        o.loss_type = variant ? PT_GRPO_LOSS_DR_GRPO : PT_GRPO_LOSS_GRPO;
        o.max_completion_length = 4;
        pt_grpo_stats st;
        pt_grpo_stats_init(&st);
        ck_assert_ok(pt_model_zero_grad(e.m));
        ck_assert_ok(pt__grpo_accumulate(&st, e.ctx, e.m, e.buf, &o, NULL));
        const char *names[] = { "model.norm.weight", "model.layers.1.mlp.down_proj.weight",
                                "model.embed_tokens.weight" };
        double worst = 0;
        for (int k = 0; k < 3; k++) {
            const pt_tensor_ref *t = pt__model_find_tensor(e.m, names[k]);
            ck_assert_msg(t != NULL, "%s", names[k]);
            float *g = malloc(t->numel * sizeof *g);
            memcpy(g, t->grad, t->numel * sizeof *g);
            size_t best = 0;
            for (size_t i = 0; i < t->numel; i++)
                if (fabsf(g[i]) > fabsf(g[best]))
                    best = i;
            const double an = g[best], h = 2e-3;
            const float w0 = t->data[best];
            double l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                t->data[best] = w0 + (float)(sgn ? -h : h);
                ck_assert_ok(pt_model_zero_grad(e.m));
                ck_assert_ok(pt__grpo_accumulate(&st, e.ctx, e.m, e.buf, &o, NULL));
                l[sgn] = st.loss;
            }
            t->data[best] = w0;
            const double fd = (l[0] - l[1]) / (2 * h), err = fabs(fd - an) / fabs(an);
            worst = fmax(worst, err);
            ck_assert_msg(fabs(an) > 1e-3, "%s: gradient %g too small to check", names[k], an);
            ck_assert_msg(err < 2e-2, "%s %s[%zu]: analytic %g, finite difference %g", variant ? "dr_grpo" : "grpo",
                          names[k], best, an, fd);
            free(g);
        }
        /* without the bonus the gradient differs: the check sees it */
        pt_grpo_options o0 = o;
        o0.entropy_coef = 0;
        ck_assert_ok(pt_model_zero_grad(e.m));
        ck_assert_ok(pt__grpo_accumulate(&st, e.ctx, e.m, e.buf, &o0, NULL));
        const pt_tensor_ref *t = pt__model_find_tensor(e.m, "model.norm.weight");
        float g0 = t->grad[0];
        ck_assert_ok(pt_model_zero_grad(e.m));
        ck_assert_ok(pt__grpo_accumulate(&st, e.ctx, e.m, e.buf, &o, NULL));
        ck_assert(fabsf(t->grad[0] - g0) > 1e-4f * fabsf(g0) + 1e-7f);
        ck_assert_ok(pt_model_zero_grad(e.m));
        printf("entropy bonus (%s): central differences, worst relative error %.3g\n", variant ? "dr_grpo" : "grpo",
               worst);
    }
    env_close(&e);
}
END_TEST

START_TEST(test_entropy_adaptive)
{
    /* TRL's adaptive control, step by step (the tiny model's entropy is
     * about 3.5 nats): the bonus applies only when the previous step's
     * entropy is <= entropy_target; the next coefficient moves by delta
     * toward more bonus when the entropy is <= the target, clamped. */
    env e;
    env_open(&e, k_rew, NULL);
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    ck_assert(!o.use_adaptive_entropy && isinf(o.entropy_last) && o.entropy_coef_max == 1.0);
    ck_assert(o.entropy_coef_delta == 0.005 && o.entropy_target == 0.2 && o.entropy_coef_min == 0);
    o.loss_type = PT_GRPO_LOSS_GRPO;
    pt_grpo_stats s0, s;
    pt_grpo_stats_init(&s0);
    ck_assert_ok(pt_grpo_step(&s0, e.opt, e.ctx, e.buf, &o)); /* no bonus */
    ck_assert_double_eq(s0.entropy_measured, s0.entropy);
    ck_assert_double_eq(s0.entropy_coef_next, 0.0);        /* static: the coefficient as it was */
    o.use_adaptive_entropy = true;
    o.entropy_coef = 0.3;
    /* first step (entropy_last inf): no bonus; the entropy is above the
     * target 0.2: 0.3 - 0.005 */
    pt_grpo_stats_init(&s);
    ck_assert_ok(pt_grpo_step(&s, e.opt, e.ctx, e.buf, &o));
    ck_assert_double_eq(s.loss, s0.loss);
    ck_assert_double_eq_tol(s.entropy_coef_next, 0.295, 1e-15);
    /* a target above the entropy: last 1 <= 10, the bonus applies; next 0.305 */
    o.entropy_target = 10;
    o.entropy_last = 1;
    ck_assert_ok(pt_grpo_step(&s, e.opt, e.ctx, e.buf, &o));
    ck_assert_double_eq_tol(s.loss - s0.loss, -0.3 * s0.entropy, 1e-9);
    ck_assert_double_eq_tol(s.entropy_coef_next, 0.305, 1e-15);
    /* clamped at entropy_coef_max and entropy_coef_min */
    o.entropy_coef = 0.999;
    ck_assert_ok(pt_grpo_step(&s, e.opt, e.ctx, e.buf, &o));
    ck_assert_double_eq(s.entropy_coef_next, 1.0);
    o.entropy_target = 0.2;
    o.entropy_coef = 0.003;
    ck_assert_ok(pt_grpo_step(&s, e.opt, e.ctx, e.buf, &o));
    ck_assert_double_eq(s.entropy_coef_next, 0.0);
    ck_assert_double_eq(s.loss, s0.loss); /* last 1 > 0.2: no bonus */
    o.entropy_coef_min = 2; /* min above max */
    ck_assert_int_eq(pt__grpo_check_options(&o), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "entropy_coef_min 2 <= entropy_coef_max 1") != NULL);
    o.entropy_coef_min = 0;
    o.entropy_last = NAN;
    ck_assert_int_eq(pt__grpo_check_options(&o), PT_EINVAL);
    env_close(&e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grpo_trl");
    TCase *tc = tcase_create("trl");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_declined_by_hand);
    tcase_add_test(tc, test_declined_overlong_scores);
    tcase_add_test(tc, test_all_declined_group_and_one_sample);
    tcase_add_test(tc, test_gspo_clip_counts_sequences);
    tcase_add_test(tc, test_vespo_at_mu1);
    tcase_add_test(tc, test_vespo_options);
    tcase_add_test(tc, test_entropy_bonus_value);
    tcase_add_test(tc, test_entropy_bonus_gradient);
    tcase_add_test(tc, test_entropy_adaptive);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
