/* posttrain demo: GRPO after the SFT warm-up.  Each step samples --group
 * answers to each of --prompts training problems, scored by the verifiable
 * reward (1 for the exact answer followed by EOS, else 0:
 * pt_addition_rollouts), and pt_grpo_step makes one update from the group
 * advantages. */
#include "cmd_demo.h"

#include <string.h>

/* The GRPO phase's objects and options. */
typedef struct grpo_loop {
    pt_rollout_buffer *buf;
    pt_optimizer *opt;
    pt_model *ref;
    pt_context *ref_ctx;
    pt_grpo_options go;
    pt_rollout_logprobs_options lo;
    pt_generate_options gen;
} grpo_loop;

static void loop_free(grpo_loop *l)
{
    pt_context_free(l->ref_ctx);
    pt_model_free(l->ref);
    pt_optimizer_free(l->opt);
    pt_rollout_buffer_free(l->buf);
}

/* The step's options from the demo's: GRPO, the reference's log-probs and
 * sampling (M: the most tokens of a completion). */
static void loop_options(grpo_loop *l, const demo_opts *o, int M)
{
    pt_grpo_options_init(&l->go);
    l->go.loss_type = o->loss_type;
    if (l->go.loss_type == PT_GRPO_LOSS_VESPO) /* TRL's rule: vespo takes a per-token correction */
        l->go.importance_sampling_correction = PT_GRPO_IS_TOKEN_MASK;
    l->go.scale_rewards = o->scale;
    l->go.beta = o->beta;
    l->go.max_completion_length = M;
    l->go.drop_zero_std_groups = o->drop_zero_std;
    l->go.temperature = o->temperature; /* the step scores at the sampling temperature */
    pt_rollout_logprobs_options_init(&l->lo);
    l->lo.temperature = o->temperature;
    pt_generate_options_init(&l->gen);
    l->gen.max_new_tokens = M;
    l->gen.temperature = (float)o->temperature;
}

/* The buffer, the optimizer and (beta > 0) the frozen reference for N
 * completions of up to M tokens; 0, or 1 with the failure reported. */
static int loop_open(grpo_loop *l, demo_run *r, int N, int M)
{
    const demo_opts *o = &r->o;
    int st;
    if ((st = pt_rollout_buffer_create(&l->buf, NULL))) {
        cli_fail("rollout buffer", st);
        return 1;
    }
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = o->grpo_lr;
    if ((st = pt_optimizer_create(&l->opt, r->model, &oo))) {
        cli_fail("optimizer", st);
        return 1;
    }
    /* the reference: a frozen copy of the model (with --bf16 frozen in BF16 too) */
    if (o->beta > 0 && ((st = pt_model_clone(&l->ref, r->model)) ||
                        (o->bf16 && (st = pt_model_set_bf16(l->ref, PT_BF16_FROZEN))) ||
                        (st = pt_context_create(&l->ref_ctx, l->ref, N, r->plen + M)))) {
        cli_fail("reference model", st);
        return 1;
    }
    loop_options(l, o, M);
    return 0;
}

/* GRPO step `step`: P training problems drawn from *rng, G completions of
 * each sampled and scored, one update; its statistics into *gs.  0, or 1
 * with the failure reported. */
static int loop_step(pt_grpo_stats *gs, grpo_loop *l, demo_run *r, int step, uint64_t *rng)
{
    const demo_opts *o = &r->o;
    int64_t pairs[256][2];
    int st;
    for (int p = 0; p < o->prompts; p++)
        pt_addition_train_pair(&pairs[p][0], &pairs[p][1], o->digits, rng);
    l->gen.seed = o->seed * 1000003u + (uint64_t)step;
    if ((st = pt_addition_rollouts(l->buf, r->gen, r->tok, pairs[0], o->prompts, o->group, o->digits, &l->gen))) {
        cli_fail("rollouts", st);
        return 1;
    }
    if (l->ref_ctx && (st = pt_rollout_buffer_compute_logprobs_with(l->buf, l->ref_ctx, PT_ROLLOUT_REF, &l->lo))) {
        cli_fail("reference", st);
        return 1;
    }
    pt_grpo_stats_init(gs);
    if ((st = pt_grpo_step(gs, l->opt, r->ctx, l->buf, &l->go))) {
        cli_fail("grpo step", st);
        return 1;
    }
    pt_rollout_buffer_clear(l->buf);
    return 0;
}

int demo_grpo(demo_run *r)
{
    const demo_opts *o = &r->o;
    const int N = o->prompts * o->group, M = r->alen + 1;
    grpo_loop l;
    memset(&l, 0, sizeof l);
    int rc = loop_open(&l, r, N, M);
    uint64_t rng = o->seed * 104729 + 3;
    double t0 = cli_now(), zero_std = 0, reward_sum = 0;
    int since = 0;
    for (int step = 1; !rc && step <= o->grpo_steps; step++) {
        pt_grpo_stats gs;
        if ((rc = loop_step(&gs, &l, r, step, &rng)))
            break;
        zero_std += gs.frac_reward_zero_std;
        reward_sum += gs.reward;
        since++;
        const int every = o->eval_every > 0 ? o->eval_every : 25;
        if (step % every == 0 || step == o->grpo_steps) {
            printf("  grpo step %4d/%d  reward %.3f  zero-std groups %.2f  entropy %.3f  kl %.4f  %.0fs", step,
                   o->grpo_steps, reward_sum / since, zero_std / since, gs.entropy, gs.kl, cli_now() - t0);
            reward_sum = zero_std = 0;
            since = 0;
            if (o->eval_every > 0) {
                demo_score g;
                int st = demo_evaluate(&g, r, 0, 0, 0);
                if (st) {
                    cli_fail("evaluate", st);
                    rc = 1;
                    break;
                }
                printf("  held-out greedy %.1f%% (slipped %.1f%%)", 100 * g.correct, 100 * g.slipped);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    loop_free(&l);
    return rc;
}
