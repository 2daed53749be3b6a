/* posttrain/grpo_run.h, a round and a checkpoint's fields:
 *   - pt_grpo_rollout_round gives the samples of the steps it stands for,
 *     made here by hand from the lower calls (the prompts repeated G times,
 *     pt_generate from seed * 1000003 + step = 7000044 and stream
 *     first_group * G, pt_rollout_buffer_add_generated, the reference
 *     log-probabilities, the rewards); a rank's share draws what the whole
 *     batch draws for it; episodes with an environment carry its rewards,
 *     and a round of failed episodes is refused;
 *   - pt_grpo_round_update makes the updates pt_grpo_step makes by hand on
 *     an identical model (losses, stats, the entropy controller carried)
 *     and stops when the host's callback says so;
 *   - pt_grpo_run_extra writes the fields as JSON text written out here;
 *     pt_grpo_run_resume continues the prompt order of the saved run (the
 *     draws of an uninterrupted order) and refuses each fault, naming it,
 *     with the saved and wanted values and the order unchanged;
 *   - pt_grpo_env_request_fn gives the fields written out here (the
 *     round, the episode and group offset by the rank's first, the row's
 *     JSON), and an environment process receives them first in its
 *     request line. */
#include "testfs.h"

#include "train/grpo_internal.h"

#include <math.h>
#include <string.h>

/* ---- pt_grpo_rollout_round ------------------------------------------------- */

enum { G = 3, MAX_NEW = 4 };

static pt_model *tiny_model(void)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, PT_BYTE_TOKENIZER_VOCAB);
    c.max_position_embeddings = 64;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 5));
    return m;
}

static pt_rollout_buffer *new_buffer(int k)
{
    const char *names[] = { "len", "first" };
    pt_rollout_buffer *b;
    pt_rollout_buffer_options o;
    ck_assert_ok(pt_rollout_buffer_options_init(&o));
    o.n_reward_funcs = k;
    o.reward_names = names;
    ck_assert_ok(pt_rollout_buffer_create(&b, &o));
    return b;
}

/* Reward 0: the completion's tokens; reward 1: its first token / 100. */
static int reward_fn(float *rewards, const pt_reward_batch *batch, void *payload)
{
    (void)payload;
    for (int i = 0; i < batch->n; i++) {
        const pt_reward_item *it = &batch->items[i];
        rewards[i] = batch->func_index == 0 ? (float)(it->n_ids - it->prompt_len)
                                            : (float)it->ids[it->prompt_len] / 100.0f;
    }
    return 0;
}

static void same_samples(const pt_rollout_buffer *a, int a0, const pt_rollout_buffer *b, int b0, int n, int k)
{
    for (int i = 0; i < n; i++) {
        const grpo_sample *x = &a->s[a0 + i], *y = &b->s[b0 + i];
        ck_assert_int_eq(x->n_ids, y->n_ids);
        ck_assert_int_eq(x->prompt_len, y->prompt_len);
        ck_assert_mem_eq(x->ids, y->ids, (size_t)x->n_ids * sizeof *x->ids);
        ck_assert_mem_eq(x->samp, y->samp, (size_t)x->n_comp * sizeof *x->samp);
        ck_assert_int_eq(x->has_ref, y->has_ref);
        if (x->has_ref)
            ck_assert_mem_eq(x->ref, y->ref, (size_t)x->n_comp * sizeof *x->ref);
        ck_assert_int_eq(x->truncated, y->truncated);
        ck_assert_mem_eq(x->rewards, y->rewards, (size_t)k * sizeof(float));
    }
}

START_TEST(test_round)
{
    pt_model *m = tiny_model();
    pt_generator *gen;
    ck_assert_ok(pt_generator_create(&gen, m, 2 * G, 16));
    pt_context *ref;
    ck_assert_ok(pt_context_create(&ref, m, 2, 16));
    const int32_t prompts[] = { 'a', 'b', 'c', 'x', 'y' }, plens[] = { 3, 2 };
    pt_generate_options so;
    ck_assert_ok(pt_generate_options_init(&so));
    so.max_new_tokens = MAX_NEW;
    so.temperature = 0.9f;
    so.seed = 99;          /* replaced by the round's */
    so.stream_offset = 50; /* likewise */
    so.n_stop_ids = 0;
    pt_grpo_round_options o;
    ck_assert_ok(pt_grpo_round_options_init(&o));
    ck_assert_int_eq(o.group_size, 1);
    ck_assert(o.ref_temperature == 1.0f);
    o.sampling = &so;
    o.seed = 7;
    o.step = 23;
    o.group_size = G;
    o.first_group = 1;
    o.ref_ctx = ref;
    o.ref_temperature = 0.9f;
    o.reward = reward_fn;
    o.n_reward_funcs = 2;
    pt_rollout_buffer *a = new_buffer(2), *b = new_buffer(2);
    ck_assert_ok(pt_rollout_buffer_add_generated(a, &(pt_rollout_generated){ .size = sizeof(pt_rollout_generated),
        .n = 1, .prompts = prompts, .prompt_lens = plens, .tokens = prompts, .n_tokens = plens + 1, .stride = 2,
        .group_size = 1 })); /* an old sample: the round clears the buffer */
    pt_grpo_round_result res;
    ck_assert_ok(pt_grpo_round_result_init(&res));
    ck_assert_ok(pt_grpo_rollout_round(&res, gen, a, prompts, plens, 2, &o));
    ck_assert_ptr_null(res.failed);
    ck_assert_int_eq(res.completions, 2 * G);
    ck_assert_int_eq(a->n, 2 * G);

    /* by hand */
    int32_t rep[2 * G * 3], replen[2 * G], toks[2 * G * MAX_NEW], ntok[2 * G], fin[2 * G];
    float lps[2 * G * MAX_NEW];
    for (int i = 0, off = 0; i < 2 * G; i++) {
        const int p = i / G;
        replen[i] = plens[p];
        memcpy(rep + off, prompts + (p ? 3 : 0), (size_t)plens[p] * sizeof *rep);
        off += plens[p];
    }
    pt_generate_options go = so;
    go.seed = 7000044; /* 7 * 1000003 + 23 */
    go.stream_offset = 3; /* first_group 1 * G */
    ck_assert_ok(pt_generate(gen, rep, replen, 2 * G, &go, toks, ntok, fin, lps));
    double tokens = 0;
    for (int i = 0; i < 2 * G; i++)
        tokens += ntok[i];
    ck_assert(res.gen_tokens == tokens && res.gen_seconds > 0);
    ck_assert(res.tokens_per_second == tokens / res.gen_seconds);
    pt_rollout_generated g;
    ck_assert_ok(pt_rollout_generated_init(&g));
    g.n = 2 * G;
    g.prompts = rep;
    g.prompt_lens = replen;
    g.tokens = toks;
    g.n_tokens = ntok;
    g.stride = MAX_NEW;
    g.logprobs = lps;
    g.finish = fin;
    g.group_size = G;
    ck_assert_ok(pt_rollout_buffer_add_generated(b, &g));
    pt_rollout_logprobs_options lo;
    ck_assert_ok(pt_rollout_logprobs_options_init(&lo));
    lo.temperature = 0.9f;
    ck_assert_ok(pt_rollout_buffer_compute_logprobs_with(b, ref, PT_ROLLOUT_REF, &lo));
    ck_assert_ok(pt_rollout_buffer_score(b, 0, reward_fn, NULL));
    ck_assert_ok(pt_rollout_buffer_score(b, 1, reward_fn, NULL));
    same_samples(a, 0, b, 0, 2 * G, 2);
    for (int i = 0; i < 2 * G; i++) {
        ck_assert_int_eq(a->s[i].group, i / G);
        ck_assert_float_eq(a->s[i].rewards[0], (float)ntok[i]);
    }

    /* the second prompt alone as group 2 (a rank's share): the same draws */
    o.first_group = 2;
    ck_assert_ok(pt_grpo_rollout_round(&res, gen, b, prompts + 3, plens + 1, 1, &o));
    ck_assert_int_eq(b->n, G);
    same_samples(b, 0, a, G, G, 2);

    /* no reward, no reference: unscored samples without ref */
    o.reward = NULL;
    o.ref_ctx = NULL;
    ck_assert_ok(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 2, &o));
    ck_assert(!b->s[0].scored && !b->s[0].has_ref);

    /* refused, naming the argument */
    const int32_t zero[] = { 3, 0 };
    ck_assert_status(pt_grpo_rollout_round(&res, gen, b, prompts, zero, 2, &o), PT_EINVAL, "prompt_lens");
    ck_assert_status(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 0, &o), PT_EINVAL, "n_prompts");
    o.group_size = 0;
    ck_assert_status(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 2, &o), PT_EINVAL, "group_size");
    o.group_size = G;
    o.step = 0;
    ck_assert_status(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 2, &o), PT_EINVAL, "step");
    o.step = 1;
    o.sampling = NULL;
    ck_assert_status(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 2, &o), PT_EINVAL, "sampling");
    o.sampling = &so;
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    o.episodes = &eo;
    ck_assert_status(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 2, &o), PT_EINVAL, "results");
    /* more completions than the generator's room: pt_generate's refusal */
    o.episodes = NULL;
    o.group_size = G + 1;
    ck_assert_int_ne(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 2, &o), PT_OK);
    ck_assert_str_eq(res.failed, "generate");
    pt_rollout_buffer_free(a);
    pt_rollout_buffer_free(b);
    pt_context_free(ref);
    pt_generator_free(gen);
    pt_model_free(m);
}
END_TEST

/* Episode e of group g: done at once with reward 10 * g + the episode's
 * first sampled token / 1000, or (fail) an error. */
typedef struct env_state {
    bool fail;
    int calls;
} env_state;

static int env_fn(pt_env_reply *reply, const pt_env_turn *turn, void *payload)
{
    env_state *e = payload;
    static float r[1];
    e->calls++;
    if (e->fail) {
        reply->error = "no";
        return 1;
    }
    r[0] = 10.0f * (float)turn->group;
    reply->action = PT_ENV_DONE;
    reply->rewards = r;
    return 0;
}

START_TEST(test_round_episodes)
{
    pt_model *m = tiny_model();
    pt_generator *gen;
    ck_assert_ok(pt_generator_create(&gen, m, 2 * G, 16));
    const int32_t prompts[] = { 'a', 'b', 'c', 'x', 'y' }, plens[] = { 3, 2 };
    pt_generate_options so;
    ck_assert_ok(pt_generate_options_init(&so));
    so.max_new_tokens = MAX_NEW;
    so.n_stop_ids = 0;
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.max_turns = 1;
    eo.n_reward_funcs = 1;
    eo.on_error = PT_EPISODE_ERROR_CONTINUE;
    pt_episode_results *er;
    ck_assert_ok(pt_episode_results_create(&er));
    env_state es = { false, 0 };
    pt_grpo_round_options o;
    ck_assert_ok(pt_grpo_round_options_init(&o));
    o.sampling = &so;
    o.seed = 7;
    o.step = 23;
    o.group_size = G;
    o.reward = reward_fn; /* not called with episodes */
    o.n_reward_funcs = 2;
    o.episodes = &eo;
    o.results = er;
    o.env = env_fn;
    o.env_payload = &es;
    pt_rollout_buffer *a = new_buffer(1);
    pt_grpo_round_result res;
    ck_assert_ok(pt_grpo_round_result_init(&res));
    ck_assert_ok(pt_grpo_rollout_round(&res, gen, a, prompts, plens, 2, &o));
    ck_assert_int_eq(es.calls, 2 * G);
    ck_assert_int_eq(a->n, 2 * G);
    ck_assert(res.episodes.episodes == 2 * G && res.episodes.errors == 0 && res.episodes.done == 2 * G);
    ck_assert(res.episodes.env_calls == 2 * G && res.episodes.turns == 2 * G);
    /* the episodes sampled what pt_generate samples from the round's streams */
    int32_t rep[2 * G * 3], replen[2 * G], toks[2 * G * MAX_NEW], ntok[2 * G], fin[2 * G];
    for (int i = 0, off = 0; i < 2 * G; i++) {
        replen[i] = plens[i / G];
        memcpy(rep + off, prompts + (i / G ? 3 : 0), (size_t)replen[i] * sizeof *rep);
        off += replen[i];
    }
    pt_generate_options go = so;
    go.seed = 7000044;
    ck_assert_ok(pt_generate(gen, rep, replen, 2 * G, &go, toks, ntok, fin, NULL));
    for (int i = 0; i < 2 * G; i++) {
        const grpo_sample *s = &a->s[i];
        ck_assert_int_eq(s->group, i / G);
        ck_assert_int_eq(s->n_comp, ntok[i]);
        ck_assert_mem_eq(s->ids + s->prompt_len, toks + i * MAX_NEW, (size_t)ntok[i] * sizeof *toks);
        ck_assert_float_eq(s->rewards[0], 10.0f * (float)(i / G));
    }
    /* every episode failed: refused, the buffer holds none */
    es.fail = true;
    ck_assert_status(pt_grpo_rollout_round(&res, gen, a, prompts, plens, 2, &o), PT_ECALLBACK,
                     "every episode failed (the first: ");
    ck_assert_str_eq(res.failed, "every episode failed");
    ck_assert_int_eq(a->n, 0);
    pt_rollout_buffer_free(a);
    pt_episode_results_free(er);
    pt_generator_free(gen);
    pt_model_free(m);
}
END_TEST

/* ---- pt_grpo_round_update -------------------------------------------------- */

static int stop_after_second(const pt_grpo_stats *s, int it, void *user)
{
    int *calls = user;
    ck_assert_int_eq(it, *calls);
    ck_assert(isfinite(s->loss));
    return ++*calls == 2;
}

/* A round's samples of model m in a new buffer (rewards: reward_fn). */
static pt_rollout_buffer *round_of(pt_model *m)
{
    pt_generator *gen;
    ck_assert_ok(pt_generator_create(&gen, m, 2 * G, 16));
    const int32_t prompts[] = { 'a', 'b', 'c', 'x', 'y' }, plens[] = { 3, 2 };
    pt_generate_options so;
    ck_assert_ok(pt_generate_options_init(&so));
    so.max_new_tokens = MAX_NEW;
    so.n_stop_ids = 0;
    pt_grpo_round_options o;
    ck_assert_ok(pt_grpo_round_options_init(&o));
    o.sampling = &so;
    o.step = 1;
    o.group_size = G;
    o.reward = reward_fn;
    o.n_reward_funcs = 2;
    pt_rollout_buffer *b = new_buffer(2);
    pt_grpo_round_result res;
    ck_assert_ok(pt_grpo_round_result_init(&res));
    ck_assert_ok(pt_grpo_rollout_round(&res, gen, b, prompts, plens, 2, &o));
    pt_generator_free(gen);
    return b;
}

START_TEST(test_round_update)
{
    /* two identical models and optimizers: the library's round on one,
     * pt_grpo_step by hand on the other */
    pt_model *m[2] = { tiny_model(), tiny_model() };
    pt_optimizer *opt[2];
    pt_context *ctx[2];
    pt_rollout_buffer *buf[2];
    pt_grpo_options go[2];
    for (int i = 0; i < 2; i++) {
        pt_optimizer_options oo;
        ck_assert_ok(pt_optimizer_options_init(&oo));
        oo.lr = 1e-2f;
        ck_assert_ok(pt_optimizer_create(&opt[i], m[i], &oo));
        ck_assert_ok(pt_context_create(&ctx[i], m[i], 2 * G, 16));
        buf[i] = round_of(m[i]);
        ck_assert_ok(pt_grpo_options_init(&go[i]));
        go[i].use_adaptive_entropy = true;
        go[i].entropy_coef = 0.1;
    }
    pt_grpo_round_updates u;
    ck_assert_ok(pt_grpo_round_updates_init(&u));
    int calls = 0;
    ck_assert_ok(pt_grpo_round_update(&u, opt[0], ctx[0], buf[0], &go[0], 3, stop_after_second, &calls));
    ck_assert_int_eq(calls, 2);
    ck_assert_int_eq(u.updates, 2);
    pt_grpo_stats s[2];
    for (int it = 0; it < 2; it++) {
        ck_assert_ok(pt_grpo_stats_init(&s[it]));
        ck_assert_ok(pt_grpo_step(&s[it], opt[1], ctx[1], buf[1], &go[1]));
        go[1].entropy_coef = s[it].entropy_coef_next;
        go[1].entropy_last = s[it].entropy_measured;
    }
    ck_assert(u.first.loss == s[0].loss && u.last.loss == s[1].loss && s[0].loss != s[1].loss);
    ck_assert(u.first.reward == s[0].reward && u.last.kl == s[1].kl);
    ck_assert(u.loss_sum == (double)s[0].loss + (double)s[1].loss);
    ck_assert(u.train_seconds > 0);
    /* the controller carried: the coefficient after two updates */
    ck_assert(go[0].entropy_coef == go[1].entropy_coef && go[0].entropy_last == go[1].entropy_last);
    ck_assert(go[0].entropy_coef != 0.1);
    ck_assert_int_eq(pt_optimizer_step_count(opt[0]), 2);
    ck_assert_status(pt_grpo_round_update(&u, opt[0], ctx[0], buf[0], &go[0], 0, NULL, NULL), PT_EINVAL,
                     "iterations");
    for (int i = 0; i < 2; i++) {
        pt_rollout_buffer_free(buf[i]);
        pt_context_free(ctx[i]);
        pt_optimizer_free(opt[i]);
        pt_model_free(m[i]);
    }
}
END_TEST

/* ---- pt_grpo_run_extra and pt_grpo_run_resume ------------------------------- */

START_TEST(test_run_extra)
{
    pt_grpo_options go;
    ck_assert_ok(pt_grpo_options_init(&go));
    pt_grpo_run_fields f;
    ck_assert_ok(pt_grpo_run_fields_init(&f));
    f.num_generations = 4;
    f.batch_prompts = 2;
    f.num_iterations = 3;
    char *json;
    ck_assert_ok(pt_grpo_run_extra(&json, NULL, &f));
    ck_assert_str_eq(json, "{\"num_generations\":4,\"batch_prompts\":2,\"num_iterations\":3}");
    pt_free(json);
    go.use_adaptive_entropy = true;
    go.entropy_coef = 0.25;
    go.entropy_last = INFINITY;
    f.grpo = &go;
    ck_assert_ok(pt_grpo_run_extra(&json, "{\"model\":\"m\",\"num_generations\":9,\"entropy_last\":1}", &f));
    ck_assert_str_eq(json, "{\"model\":\"m\",\"num_generations\":4,\"batch_prompts\":2,\"num_iterations\":3,"
                           "\"entropy_coef\":0.25}");
    pt_free(json);
    go.entropy_last = 1.5;
    ck_assert_ok(pt_grpo_run_extra(&json, "{}", &f));
    ck_assert_str_eq(json, "{\"num_generations\":4,\"batch_prompts\":2,\"num_iterations\":3,\"entropy_coef\":0.25,"
                           "\"entropy_last\":1.5}");
    pt_free(json);
    ck_assert_status(pt_grpo_run_extra(&json, "[1]", &f), PT_EINVAL, "not a JSON object");
    ck_assert_ptr_null(json);
    ck_assert_status(pt_grpo_run_extra(&json, "{", &f), PT_EINVAL, "not JSON");
}
END_TEST

static pt_prompt_order *new_order(int64_t rows)
{
    pt_prompt_order_options oo;
    ck_assert_ok(pt_prompt_order_options_init(&oo));
    oo.rows = rows;
    oo.seed = 42;
    pt_prompt_order *o;
    ck_assert_ok(pt_prompt_order_create(&o, &oo));
    return o;
}

/* The next n draws of o equal those of want. */
static void same_draws(pt_prompt_order *o, pt_prompt_order *want, int n)
{
    int32_t x[16], y[16];
    ck_assert_ok(pt_prompt_order_next(o, x, n));
    ck_assert_ok(pt_prompt_order_next(want, y, n));
    ck_assert_mem_eq(x, y, (size_t)n * sizeof *x);
}

/* A refused resume: the fault, its values, and the order untouched. */
static void refused(const char *extra, const pt_run_state *s, int64_t rows, int64_t opt_steps,
                    const pt_grpo_run_fields *f, int fault, int64_t saved, int64_t want, const char *msg)
{
    pt_prompt_order *o = new_order(rows), *fresh = new_order(rows);
    pt_grpo_resume_report rep;
    ck_assert_ok(pt_grpo_resume_report_init(&rep));
    ck_assert_status(pt_grpo_run_resume(&rep, extra, s, o, opt_steps, f), PT_ESTATE, msg);
    ck_assert_int_eq(rep.fault, fault);
    ck_assert(rep.saved == saved && rep.want == want);
    same_draws(o, fresh, 5);
    pt_prompt_order_free(o);
    pt_prompt_order_free(fresh);
}

START_TEST(test_run_resume)
{
    /* the run: 7 rows, 3 rounds of 2 prompts drawn, 6 optimizer steps */
    pt_prompt_order *run = new_order(7);
    int32_t drawn[6];
    ck_assert_ok(pt_prompt_order_next(run, drawn, 6));
    pt_run_state s;
    ck_assert_ok(pt_run_state_init(&s));
    ck_assert_ok(pt_prompt_order_save(&s, run));
    s.optimizer_steps = 6;
    s.step = 3;
    pt_grpo_options go;
    ck_assert_ok(pt_grpo_options_init(&go));
    pt_grpo_run_fields f;
    ck_assert_ok(pt_grpo_run_fields_init(&f));
    f.num_generations = 4;
    f.batch_prompts = 2;
    f.grpo = &go;
    const char *extra = "{\"num_generations\":4,\"batch_prompts\":2,\"num_iterations\":2,\"entropy_coef\":0.5}";

    pt_prompt_order *o = new_order(7);
    pt_grpo_resume_report rep;
    ck_assert_ok(pt_grpo_resume_report_init(&rep));
    ck_assert_int_eq(rep.num_iterations, -1);
    ck_assert_ok(pt_grpo_run_resume(&rep, extra, &s, o, 6, &f));
    ck_assert_int_eq(rep.fault, PT_RESUME_FAULT_NONE);
    ck_assert_int_eq(rep.num_iterations, 2);
    same_draws(o, run, 12); /* across the end of the pass */
    /* use_adaptive_entropy: the controller's state read back */
    go.use_adaptive_entropy = true;
    go.entropy_last = 3;
    ck_assert_ok(pt_grpo_run_resume(&rep, extra, &s, o = (pt_prompt_order_free(o), new_order(7)), 6, &f));
    ck_assert(go.entropy_coef == 0.5f && isinf(go.entropy_last));
    pt_prompt_order_free(o);

    /* each fault in turn */
    refused("{\"batch_prompts\":2}", &s, 7, 6, &f, PT_RESUME_FAULT_MISSING, 0, 4,
            "does not record \"num_generations\"");
    refused("{\"num_generations\":4,\"batch_prompts\":3}", &s, 7, 6, &f, PT_RESUME_FAULT_SHAPE, 3, 2,
            "made with batch_prompts 3, this run has 2");
    refused(extra, &s, 8, 6, &f, PT_RESUME_FAULT_ROWS, 7, 8, "made with 7 rows, this run has 8");
    refused(extra, &s, 7, 5, &f, PT_RESUME_FAULT_OPTIMIZER, 6, 5, "step count 5 does not match the recorded 6");
    pt_run_state bad = s;
    bad.cursor = 9;
    refused(extra, &bad, 7, 6, &f, PT_RESUME_FAULT_CURSOR, 9, 7, "its cursor 9 is past the 7 rows");
    bad = s;
    bad.order_rng ^= 1;
    refused(extra, &bad, 7, 6, &f, PT_RESUME_FAULT_RNG, 0, 0, "order_rng does not lead to rng");
    go.entropy_coef = 0.125;
    o = new_order(7);
    ck_assert_status(pt_grpo_run_resume(&rep, "{\"num_generations\":4,\"batch_prompts\":2}", &s, o, 6, &f),
                     PT_ESTATE, "no entropy_coef");
    ck_assert_int_eq(rep.fault, PT_RESUME_FAULT_ENTROPY);
    ck_assert(go.entropy_coef == 0.125f);
    ck_assert_str_eq(pt_grpo_resume_fault_name(PT_RESUME_FAULT_OPTIMIZER), "optimizer");
    int v;
    ck_assert_ok(pt_grpo_resume_fault_from_name(&v, "entropy"));
    ck_assert_int_eq(v, PT_RESUME_FAULT_ENTROPY);
    ck_assert_ptr_null(pt_grpo_resume_fault_name(8));
    pt_prompt_order_free(o);
    pt_prompt_order_free(run);
}
END_TEST

/* ---- pt_grpo_env_request_fn --------------------------------------------------- */

START_TEST(test_env_request)
{
    char *dir = pt_test_tmpdir("pt_envreq_");
    char path[4200], seen[4200], cmd[9000];
    snprintf(path, sizeof path, "%s/rows.jsonl", dir);
    snprintf(seen, sizeof seen, "%s/seen.txt", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"prompt\": \"a\", \"answer\": \"1\"}\n{\"prompt\": \"b\", \"k\": [2, 3]}\n", f);
    fclose(f);
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_prompt_rows_options ro;
    ck_assert_ok(pt_prompt_rows_options_init(&ro));
    ro.keep_json = true;
    pt_prompt_rows *rows;
    ck_assert_ok(pt_prompt_rows_load(&rows, NULL, path, tok, &ro));
    /* this rank's groups 0 and 1 are rows 1 and 0 (group 2: a row that is
     * not there); its first group is 4 of the whole batch, G = 3: its first
     * episode 12 */
    const int32_t group_row[3] = { 1, 0, 5 };
    pt_grpo_env_request q;
    ck_assert_ok(pt_grpo_env_request_init(&q));
    ck_assert_uint_eq(q.size, sizeof q);
    q.step = 7;
    q.first_episode = 12;
    q.first_group = 4;
    q.rows = rows;
    q.group_row = group_row;
    pt_env_turn t;
    memset(&t, 0, sizeof t);
    t.size = sizeof t;
    t.episode = 2;
    t.group = 0;
    const char *json = NULL;
    ck_assert_ok(pt_grpo_env_request_fn(&json, &t, &q));
    ck_assert_str_eq(json, "{\"step\":7,\"episode\":14,\"group\":4,\"row\":{\"prompt\":\"b\",\"k\":[2,3]}}");
    t.episode = 4;
    t.group = 1;
    ck_assert_ok(pt_grpo_env_request_fn(&json, &t, &q));
    ck_assert_str_eq(json, "{\"step\":7,\"episode\":16,\"group\":5,\"row\":{\"prompt\":\"a\",\"answer\":\"1\"}}");
    /* refusals */
    t.group = 2;
    ck_assert_status(pt_grpo_env_request_fn(&json, &t, &q), PT_ERANGE, "5");
    ck_assert_ptr_null(json);
    t.group = 0;
    ck_assert_status(pt_grpo_env_request_fn(&json, &t, NULL), PT_EINVAL, "is NULL");
    q.size = 8;
    ck_assert_status(pt_grpo_env_request_fn(&json, &t, &q), PT_EINVAL, "pt_grpo_env_request_init");
    q.size = sizeof q;
    pt_prompt_rows *bare;
    const int32_t ids[2] = { 5, 6 };
    ck_assert_ok(pt_prompt_rows_create(&bare));
    ck_assert_ok(pt_prompt_rows_add(bare, ids, 2, "x"));
    q.rows = bare;
    t.group = 1; /* row 0 */
    ck_assert_status(pt_grpo_env_request_fn(&json, &t, &q), PT_EINVAL, "keep_json");
    q.rows = rows;

    /* through an environment process: the fields come first in its line */
    snprintf(cmd, sizeof cmd, "read l; printf '%%s\\n' \"$l\" > '%s'; echo '{\"done\": true, \"rewards\": [1]}'",
             seen);
    pt_env_process_options po;
    ck_assert_ok(pt_env_process_options_init(&po));
    po.command = cmd;
    po.request = pt_grpo_env_request_fn;
    po.request_user = &q;
    pt_env_process *p;
    ck_assert_ok(pt_env_process_create(&p, &po));
    t.episode = 1;
    t.group = 1;
    pt_env_reply rep;
    memset(&rep, 0, sizeof rep);
    rep.size = sizeof rep;
    ck_assert_int_eq(pt_env_process_call(&rep, &t, p), 0);
    ck_assert_int_eq(rep.action, PT_ENV_DONE);
    ck_assert_ok(pt_env_process_close(p));
    pt_env_process_free(p);
    char line[512] = "";
    f = fopen(seen, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    const char *want = "{\"step\":7,\"episode\":13,\"group\":5,\"row\":{\"prompt\":\"a\",\"answer\":\"1\"},";
    ck_assert_msg(!strncmp(line, want, strlen(want)), "request line %s", line);
    pt_grpo_env_request_clear(&q);
    ck_assert_ptr_null(q.text);
    pt_grpo_env_request_clear(NULL);
    pt_prompt_rows_free(bare);
    pt_prompt_rows_free(rows);
    pt_tokenizer_free(tok);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grpo_round");
    TCase *tc = tcase_create("round");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_round);
    tcase_add_test(tc, test_round_episodes);
    tcase_add_test(tc, test_round_update);
    tcase_add_test(tc, test_run_extra);
    tcase_add_test(tc, test_run_resume);
    tcase_add_test(tc, test_env_request);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
