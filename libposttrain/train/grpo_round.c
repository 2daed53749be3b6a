/* A GRPO run's round of rollouts (posttrain/grpo_run.h): the round's
 * prompts sampled G times each (or played as episodes with an
 * environment) into the rollout buffer, with the reference
 * log-probabilities and the rewards: what `posttrain grpo` does between
 * choosing a round's prompts and its updates. */
#include "posttrain/grpo_run.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

int pt_grpo_round_options_init(pt_grpo_round_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->group_size = 1;
    opts->ref_temperature = 1.0f;
    return PT_OK;
}

PT_ZERO_INIT(pt_grpo_round_result_init, pt_grpo_round_result, res)

/* The round's work: the prompts repeated G times, and pt_generate's output. */
typedef struct round_work {
    int32_t *prompts, *plens, *tokens, *ntok, *fin;
    int64_t *groups;
    float *lps;
} round_work;

static void work_free(round_work *w)
{
    free(w->prompts); free(w->plens); free(w->tokens); free(w->ntok); free(w->fin); free(w->groups);
    free(w->lps);
}

/* Each prompt repeated G times; for pt_generate the outputs, for episodes
 * the groups. */
static int work_alloc(round_work *w, const int32_t *prompts, const int32_t *plens, int n_prompts, int G,
                      int max_new, bool episodes)
{
    const size_t N = (size_t)n_prompts * (size_t)G;
    size_t ids = 0;
    for (int p = 0; p < n_prompts; p++)
        ids += (size_t)plens[p];
    w->prompts = malloc(ids * (size_t)G * sizeof *w->prompts);
    w->plens = malloc(N * sizeof *w->plens);
    if (episodes)
        w->groups = malloc(N * sizeof *w->groups);
    else {
        w->tokens = malloc(N * (size_t)max_new * sizeof *w->tokens);
        w->lps = malloc(N * (size_t)max_new * sizeof *w->lps);
        w->ntok = malloc(N * sizeof *w->ntok);
        w->fin = malloc(N * sizeof *w->fin);
    }
    if (!w->prompts || !w->plens || (episodes ? !w->groups : !w->tokens || !w->lps || !w->ntok || !w->fin))
        return pt__err(PT_ENOMEM, "pt_grpo_rollout_round: out of memory");
    size_t off = 0, in = 0;
    for (int p = 0; p < n_prompts; p++) {
        for (int g = 0; g < G; g++) {
            memcpy(w->prompts + off, prompts + in, (size_t)plens[p] * sizeof *w->prompts);
            off += (size_t)plens[p];
            w->plens[p * G + g] = plens[p];
            if (episodes)
                w->groups[p * G + g] = p;
        }
        in += (size_t)plens[p];
    }
    return PT_OK;
}

/* pt_generate's completions into the buffer. */
static int generate(pt_grpo_round_result *res, pt_generator *gen, pt_rollout_buffer *buf, round_work *w,
                    int N, const pt_generate_options *go, int G)
{
    const double t0 = pt__now();
    int st = pt_generate(gen, w->prompts, w->plens, N, go, w->tokens, w->ntok, w->fin, w->lps);
    if (st) {
        res->failed = "generate";
        return st;
    }
    res->gen_seconds = pt__now() - t0;
    for (int i = 0; i < N; i++)
        res->gen_tokens += w->ntok[i];
    res->tokens_per_second = res->gen_tokens / res->gen_seconds;
    /* pt_generate's log-probabilities are the sampler's; pi_old is the
     * trainer's, recorded by the first update (docs/grpo.md) */
    pt_rollout_generated g;
    pt_rollout_generated_init(&g);
    g.n = N;
    g.prompts = w->prompts;
    g.prompt_lens = w->plens;
    g.tokens = w->tokens;
    g.n_tokens = w->ntok;
    g.stride = go->max_new_tokens;
    g.logprobs = w->lps;
    g.finish = w->fin;
    g.group_size = G;
    if ((st = pt_rollout_buffer_add_generated(buf, &g)))
        res->failed = "rollout buffer";
    return st;
}

/* The episodes into the buffer: PT_ECALLBACK when every one failed. */
static int episodes(pt_grpo_round_result *res, pt_generator *gen, pt_rollout_buffer *buf, round_work *w, int N,
                    const pt_generate_options *go, const pt_grpo_round_options *o)
{
    pt_episode_options eo = *o->episodes;
    eo.sampling = go;
    int st = pt_episodes_run(o->results, gen, w->prompts, w->plens, w->groups, N, &eo, o->env, o->env_payload);
    if (st) {
        res->failed = "episodes";
        return st;
    }
    pt_episode_stats es;
    pt_episode_stats_init(&es);
    pt_episode_results_stats(&es, o->results);
    if (es.errors + es.stopped == es.episodes) {
        pt_episode ep;
        pt_episode_init(&ep);
        pt_episode_results_get(&ep, o->results, 0);
        res->failed = "every episode failed";
        return pt__err(PT_ECALLBACK, "every episode failed (the first: %s)", ep.error ? ep.error : "?");
    }
    res->gen_seconds = es.seconds;
    res->gen_tokens = (double)es.sampled_tokens;
    res->tokens_per_second = es.tokens_per_second;
    res->episodes = (pt_grpo_episode_totals){ es.episodes, es.errors + es.stopped, es.done, es.truncated,
                                              (double)es.turns, (double)es.appended_tokens, (double)es.env_calls,
                                              es.env_seconds };
    if ((st = pt_rollout_buffer_add_episodes(NULL, buf, o->results)))
        res->failed = "rollout buffer";
    return st;
}

static int check_round(const pt_grpo_round_options *o, const pt_generate_options *go, const int32_t *prompts,
                       const int32_t *plens, int n_prompts)
{
    const char *f = "pt_grpo_rollout_round";
    if (n_prompts < 1)
        return pt__err_arg(f, "n_prompts", "%d must be >= 1", n_prompts);
    if (!prompts || !plens)
        return pt__err_arg(f, prompts ? "prompt_lens" : "prompts", "is NULL");
    for (int p = 0; p < n_prompts; p++)
        if (plens[p] < 1)
            return pt__err_arg(f, "prompt_lens", "[%d] is %d, must be >= 1", p, plens[p]);
    if (o->group_size < 1 || (int64_t)o->group_size * n_prompts > INT32_MAX)
        return pt__err_arg(f, "opts->group_size", "%d must be >= 1 (and n_prompts * group_size an int)",
                           o->group_size);
    if (o->step < 1 || o->first_group < 0)
        return pt__err_arg(f, o->step < 1 ? "opts->step" : "opts->first_group", "%lld is out of range",
                           (long long)(o->step < 1 ? o->step : o->first_group));
    if (go->max_new_tokens < 1)
        return pt__err_arg(f, "opts->sampling->max_new_tokens", "%d must be >= 1", go->max_new_tokens);
    if (o->episodes && (!o->results || !o->env))
        return pt__err_arg(f, o->results ? "opts->env" : "opts->results", "is NULL (opts->episodes is given)");
    if (o->reward && (o->n_reward_funcs < 0 || o->n_reward_funcs > PT_GRPO_MAX_REWARD_FUNCS))
        return pt__err_arg(f, "opts->n_reward_funcs", "%d is not in 0 .. %d", o->n_reward_funcs,
                           PT_GRPO_MAX_REWARD_FUNCS);
    return PT_OK;
}

int pt_grpo_rollout_round(pt_grpo_round_result *res, pt_generator *gen, pt_rollout_buffer *buf,
                          const int32_t *prompts, const int32_t *prompt_lens, int n_prompts,
                          const pt_grpo_round_options *opts)
{
    PT_CHECK_NULL(res);
    PT_CHECK_NULL(gen);
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(opts);
    int st = PT_STRUCT_CHECK_OUT(res, pt_grpo_round_result, pt_grpo_round_result_init);
    pt_grpo_round_options o;
    pt_generate_options go;
    if (!st)
        st = PT_STRUCT_READ(o, opts, pt_grpo_round_options_init);
    if (!st && !o.sampling)
        st = pt__err_arg(__func__, "opts->sampling", "is NULL");
    if (!st)
        st = pt__struct_read(&go, sizeof go, o.sampling, __func__, "pt_generate_options_init");
    if (!st)
        st = check_round(&o, &go, prompts, prompt_lens, n_prompts);
    if (st)
        return st;
    pt_grpo_round_result r;
    pt_grpo_round_result_init(&r);
    const int G = o.group_size, N = n_prompts * G;
    r.completions = N;
    /* completion i of the round's whole batch draws from the stream (seed,
     * i): the rollouts depend on the seed, the round and the completion's
     * index in the whole batch, not on how it is split */
    go.seed = o.seed * 1000003u + (uint64_t)o.step;
    go.stream_offset = (uint64_t)o.first_group * (uint64_t)G;
    round_work w = { 0 };
    st = work_alloc(&w, prompts, prompt_lens, n_prompts, G, go.max_new_tokens, o.episodes != NULL);
    if (!st)
        st = pt_rollout_buffer_clear(buf);
    if (!st)
        st = o.episodes ? episodes(&r, gen, buf, &w, N, &go, &o) : generate(&r, gen, buf, &w, N, &go, G);
    work_free(&w);
    pt_rollout_logprobs_options lo;
    pt_rollout_logprobs_options_init(&lo);
    lo.temperature = o.ref_temperature;
    if (!st && o.ref_ctx && (st = pt_rollout_buffer_compute_logprobs_with(buf, o.ref_ctx, PT_ROLLOUT_REF, &lo)))
        r.failed = "reference log-probabilities";
    for (int k = 0; !st && o.reward && !o.episodes && k < o.n_reward_funcs; k++)
        if ((st = pt_rollout_buffer_score(buf, k, o.reward, o.reward_payload)))
            r.failed = "scoring";
    pt__struct_write(res, &r);
    return st;
}

/* ---- a round's updates ------------------------------------------------------- */

int pt_grpo_round_updates_init(pt_grpo_round_updates *u)
{
    PT_STRUCT_INIT_ZERO(u);
    pt_grpo_stats_init(&u->first);
    pt_grpo_stats_init(&u->last);
    return PT_OK;
}

int pt_grpo_round_update(pt_grpo_round_updates *u, pt_optimizer *opt, pt_context *ctx, pt_rollout_buffer *buf,
                         pt_grpo_options *grpo, int iterations, pt_grpo_update_fn after, void *user)
{
    PT_CHECK_NULL(u);
    PT_CHECK_NULL(grpo);
    PT_CHECK_ARG(iterations >= 1, iterations, "%d must be >= 1", iterations);
    int st = PT_STRUCT_CHECK_OUT(u, pt_grpo_round_updates, pt_grpo_round_updates_init);
    if (st)
        return st;
    pt_grpo_round_updates r;
    pt_grpo_round_updates_init(&r);
    for (int it = 0; !st && it < iterations; it++) {
        pt_grpo_stats_init(&r.last);
        if ((st = pt_grpo_step(&r.last, opt, ctx, buf, grpo)))
            break;
        if (it == 0)
            r.first = r.last;
        if (grpo->use_adaptive_entropy) { /* TRL's controller state, for the next update */
            grpo->entropy_coef = r.last.entropy_coef_next;
            grpo->entropy_last = r.last.entropy_measured;
        }
        r.updates++;
        r.loss_sum += r.last.loss;
        r.train_seconds += r.last.train_seconds;
        r.comm_seconds += r.last.comm_seconds;
        if (after && after(&r.last, it, user))
            break;
    }
    pt__struct_write(u, &r);
    return st;
}
