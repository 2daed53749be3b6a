/* posttrain demo: GRPO after the SFT warm-up.  Each step samples --group
 * answers to each of --prompts training problems (pt_generate, seeded), the
 * verifiable reward scores them (1 for the exact answer followed by EOS,
 * else 0), and pt_grpo_step makes one update from the group advantages. */
#include "cmd_demo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The arrays of a step, in one allocation (block). */
typedef struct grpo_mem {
    int32_t *prompts, *lens, *tokens, *ntok, *fin, *ids;
    float *lps;
    void *block;
} grpo_mem;

/* The step's N completions scored (1 for the right answer) into buf. */
static int fill_buffer(pt_rollout_buffer *buf, demo_run *r, grpo_mem *m, int64_t (*pairs)[2], int N, int M)
{
    const int G = r->o.group;
    for (int i = 0; i < N; i++) {
        const int32_t *t = m->tokens + (size_t)i * M;
        bool ok; /* a completion that does not decode is wrong */
        (void)pt_addition_score(&ok, NULL, r->tok, t, (size_t)m->ntok[i], r->o.digits, pairs[i / G][0],
                                pairs[i / G][1]);
        float reward = ok ? 1.0f : 0.0f;
        memcpy(m->ids, m->prompts + (size_t)i * r->plen, (size_t)r->plen * sizeof *m->ids);
        memcpy(m->ids + r->plen, t, (size_t)m->ntok[i] * sizeof *m->ids);
        pt_rollout_sample s;
        pt_rollout_sample_init(&s);
        s.ids = m->ids;
        s.n_ids = r->plen + m->ntok[i];
        s.prompt_len = r->plen;
        /* pt_generate's are the sampler's; pi_old, the trainer's, is
         * recorded by the step (docs/grpo.md) */
        s.sampling_logprobs = m->lps + (size_t)i * M;
        s.group = i / G;
        s.rewards = &reward;
        s.truncated = m->fin[i] == PT_FINISH_LENGTH;
        int st = pt_rollout_buffer_add(buf, &s);
        if (st)
            return st;
    }
    return PT_OK;
}

/* The GRPO phase's objects and options. */
typedef struct grpo_loop {
    grpo_mem m;
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
    free(l->m.block);
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

/* Memory for N completions of up to M tokens, the buffer, the optimizer and
 * (beta > 0) the frozen reference; 0, or 1 with the failure reported. */
static int loop_open(grpo_loop *l, demo_run *r, int N, int M)
{
    const demo_opts *o = &r->o;
    grpo_mem *m = &l->m;
    const size_t NM = (size_t)N * (size_t)M;
    const size_t n32 = (size_t)N * (size_t)r->plen + 3 * (size_t)N + NM + (size_t)(r->plen + M);
    int st = PT_ENOMEM;
    if (!(m->block = malloc(n32 * sizeof(int32_t) + NM * sizeof(float)))) {
        cli_fail("grpo", st);
        return 1;
    }
    m->prompts = m->block;
    m->lens = m->prompts + (size_t)N * (size_t)r->plen;
    m->ntok = m->lens + N;
    m->fin = m->ntok + N;
    m->tokens = m->fin + N;
    m->ids = m->tokens + NM;
    m->lps = (float *)(m->ids + r->plen + M);
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
    const int P = o->prompts, G = o->group, N = P * G, M = r->alen + 1;
    grpo_mem *m = &l->m;
    int64_t pairs[256][2];
    int st;
    for (int p = 0; p < P; p++) {
        pt_addition_train_pair(&pairs[p][0], &pairs[p][1], o->digits, rng);
        for (int g = 0; g < G; g++) {
            int i = p * G + g;
            m->lens[i] = r->plen;
            size_t n;
            if ((st = pt_addition_prompt_ids(m->prompts + (size_t)i * r->plen, (size_t)r->plen, &n, r->tok, o->digits,
                                             pairs[p][0], pairs[p][1]))) {
                cli_fail("tokenize", st);
                return 1;
            }
        }
    }
    l->gen.seed = o->seed * 1000003u + (uint64_t)step;
    if ((st = pt_generate(r->gen, m->prompts, m->lens, N, &l->gen, m->tokens, m->ntok, m->fin, m->lps))) {
        cli_fail("generate", st);
        return 1;
    }
    if ((st = fill_buffer(l->buf, r, m, pairs, N, M))) {
        cli_fail("rollout buffer", st);
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
