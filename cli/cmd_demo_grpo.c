/* posttrain demo: GRPO after the SFT warm-up.  Each step samples --group
 * answers to each of --prompts training problems (pt_generate, seeded), the
 * verifiable reward scores them (1 for the exact answer followed by EOS,
 * else 0), and pt_grpo_step makes one update from the group advantages. */
#include "cmd_demo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct grpo_mem {
    int32_t *prompts, *lens, *tokens, *ntok, *fin, *ids;
    float *lps;
    float *rewards;
} grpo_mem;

static void mem_free(grpo_mem *m)
{
    free(m->prompts);
    free(m->lens);
    free(m->tokens);
    free(m->ntok);
    free(m->fin);
    free(m->ids);
    free(m->lps);
    free(m->rewards);
}

/* A frozen copy of the model's weights, the reference of the KL term. */
static int copy_model(pt_model **out, pt_model *src)
{
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    int st = pt_model_get_config(&cfg, src);
    if (st || (st = pt_model_create(out, &cfg, 0)))
        return st;
    size_t n = 0;
    pt_model_num_tensors(&n, src);
    for (size_t i = 0; i < n && !st; i++) {
        pt_tensor_info a, b;
        pt_tensor_info_init(&a);
        pt_tensor_info_init(&b);
        if (!(st = pt_model_tensor_info(&a, src, i)) && !(st = pt_model_tensor_info(&b, *out, i)))
            memcpy(b.data, a.data, a.numel * sizeof *a.data);
    }
    /* with --bf16 the reference is frozen in BF16 too */
    if (!st && pt_model_get_bf16(src) != PT_BF16_OFF)
        st = pt_model_set_bf16(*out, PT_BF16_FROZEN);
    return st;
}

/* The step's N completions scored (1 for the right answer) into buf. */
static int fill_buffer(pt_rollout_buffer *buf, demo_run *r, grpo_mem *m, long (*pairs)[2], int N, int M)
{
    const int G = r->o.group;
    for (int i = 0; i < N; i++) {
        char prompt[64], right[32];
        demo_problem(prompt, right, r->o.digits, pairs[i / G][0], pairs[i / G][1], false);
        const int32_t *t = m->tokens + (size_t)i * M;
        float reward = demo_is_answer(r, t, m->ntok[i], right) ? 1.0f : 0.0f;
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

int demo_grpo(demo_run *r)
{
    const demo_opts *o = &r->o;
    const int P = o->prompts, G = o->group, N = P * G, M = r->alen + 1;
    grpo_mem m = { 0 };
    m.prompts = malloc((size_t)N * (size_t)r->plen * sizeof *m.prompts);
    m.lens = malloc((size_t)N * sizeof *m.lens);
    m.tokens = malloc((size_t)N * (size_t)M * sizeof *m.tokens);
    m.ntok = malloc((size_t)N * sizeof *m.ntok);
    m.fin = malloc((size_t)N * sizeof *m.fin);
    m.ids = malloc((size_t)(r->plen + M) * sizeof *m.ids);
    m.lps = malloc((size_t)N * (size_t)M * sizeof *m.lps);
    m.rewards = malloc((size_t)N * sizeof *m.rewards);
    pt_rollout_buffer *buf = NULL;
    pt_optimizer *opt = NULL;
    pt_model *ref = NULL;
    pt_context *ref_ctx = NULL;
    int st = PT_ENOMEM, rc = 1;
    if (!m.prompts || !m.lens || !m.tokens || !m.ntok || !m.fin || !m.ids || !m.lps || !m.rewards) {
        cli_fail("grpo", st);
        goto out;
    }
    if ((st = pt_rollout_buffer_create(&buf, NULL))) {
        cli_fail("rollout buffer", st);
        goto out;
    }
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = o->grpo_lr;
    if ((st = pt_optimizer_create(&opt, r->model, &oo))) {
        cli_fail("optimizer", st);
        goto out;
    }
    if (o->beta > 0 && ((st = copy_model(&ref, r->model)) || (st = pt_context_create(&ref_ctx, ref, N, r->plen + M)))) {
        cli_fail("reference model", st);
        goto out;
    }
    pt_grpo_options go;
    pt_grpo_options_init(&go);
    go.loss_type = o->loss_type;
    if (go.loss_type == PT_GRPO_LOSS_VESPO) /* TRL's rule: vespo takes a per-token correction */
        go.importance_sampling_correction = PT_GRPO_IS_TOKEN_MASK;
    go.scale_rewards = o->scale;
    go.beta = o->beta;
    go.max_completion_length = M;
    go.drop_zero_std_groups = o->drop_zero_std;
    go.temperature = o->temperature; /* the step scores at the sampling temperature */
    pt_rollout_logprobs_options lo;
    pt_rollout_logprobs_options_init(&lo);
    lo.temperature = o->temperature;
    pt_generate_options gen;
    pt_generate_options_init(&gen);
    gen.max_new_tokens = M;
    gen.temperature = (float)o->temperature;
    uint64_t rng = o->seed * 104729 + 3;
    double t0 = cli_now(), zero_std = 0, reward_sum = 0;
    int since = 0;
    for (int step = 1; step <= o->grpo_steps; step++) {
        long pairs[256][2];
        for (int p = 0; p < P; p++) {
            demo_draw_train(&pairs[p][0], &pairs[p][1], r, &rng);
            for (int g = 0; g < G; g++) {
                int i = p * G + g;
                m.lens[i] = r->plen;
                if ((st = demo_prompt_ids(m.prompts + (size_t)i * r->plen, r, pairs[p][0], pairs[p][1]))) {
                    cli_fail("tokenize", st);
                    goto out;
                }
            }
        }
        gen.seed = o->seed * 1000003u + (uint64_t)step;
        if ((st = pt_generate(r->gen, m.prompts, m.lens, N, &gen, m.tokens, m.ntok, m.fin, m.lps))) {
            cli_fail("generate", st);
            goto out;
        }
        if ((st = fill_buffer(buf, r, &m, pairs, N, M))) {
            cli_fail("rollout buffer", st);
            goto out;
        }
        if (ref_ctx && (st = pt_rollout_buffer_compute_logprobs_with(buf, ref_ctx, PT_ROLLOUT_REF, &lo))) {
            cli_fail("reference", st);
            goto out;
        }
        pt_grpo_stats gs;
        pt_grpo_stats_init(&gs);
        if ((st = pt_grpo_step(&gs, opt, r->ctx, buf, &go))) {
            cli_fail("grpo step", st);
            goto out;
        }
        pt_rollout_buffer_clear(buf);
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
                if ((st = demo_evaluate(&g, r, 0, 0, 0))) {
                    cli_fail("evaluate", st);
                    goto out;
                }
                printf("  held-out greedy %.1f%% (slipped %.1f%%)", 100 * g.correct, 100 * g.slipped);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    rc = 0;
out:
    mem_free(&m);
    pt_context_free(ref_ctx);
    pt_model_free(ref);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    return rc;
}
