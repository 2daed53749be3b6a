/* bench_episode: a multi-turn GRPO iteration (rollouts of G groups x E
 * episodes x T turns, the rollout buffer, pt_grpo_step) with and without
 * cache continuation, at the SmolLM2-135M shape with random weights.
 *
 *   bench_episode [--model smollm2-135m|tiny] [--groups G] [--group E]
 *                 [--turns T] [--prompt-len L] [--new N] [--tool A]
 *                 [--threads K] [--rounds R] [--no-step]
 *
 * Defaults: 4 groups x 4 episodes, 3 turns, 64-token prompts (one per
 * group), 32 new tokens per turn (temperature 1, no stop ids, so every
 * turn has N tokens and both ways do the same sampling work), A = 24
 * "tool" ids appended after each turn but the last, 2 threads, 1 round.
 * Per round and way:
 *  - with cache continuation: pt_episodes_run, the environment appending
 *    the tool ids and saying done after T turns; the appended ids are
 *    prefilled into each episode's cache row beside the others' decoding;
 *  - without (what a host calling pt_generate does today): one pt_generate
 *    per turn over every episode's conversation so far, so each turn
 *    prefills the whole conversation again (identical prompts once, as
 *    pt_generate does);
 *  then both put their episodes into a rollout buffer (ids, loss mask on the
 *  sampled tokens, sampling log-probabilities, a reward) and run
 *  pt_grpo_step (skipped with --no-step).
 * Printed: rollout seconds, sampled tokens/s, prefilled tokens, step and
 * iteration seconds, and the ratios without/with.  The machine is shared:
 * the load average is printed; compare the ratios of one run. */
#include "bench_util.h"

#include "posttrain/posttrain.h"

#include <stdint.h>

typedef struct opts {
    int groups, group, turns, plen, nnew, tool, threads, rounds, step;
    const char *model;
} opts;

static int parse(opts *o, int argc, char **argv)
{
    *o = (opts){ .groups = 4, .group = 4, .turns = 3, .plen = 64, .nnew = 32, .tool = 24,
                 .threads = 2, .rounds = 1, .step = 1, .model = "smollm2-135m" };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--groups") ? &o->groups : !strcmp(a, "--group") ? &o->group
                 : !strcmp(a, "--turns") ? &o->turns : !strcmp(a, "--prompt-len") ? &o->plen
                 : !strcmp(a, "--new") ? &o->nnew : !strcmp(a, "--tool") ? &o->tool
                 : !strcmp(a, "--threads") ? &o->threads : !strcmp(a, "--rounds") ? &o->rounds
                 : NULL;
        if (dst && i + 1 < argc) {
            *dst = atoi(argv[++i]);
        } else if (!strcmp(a, "--model") && i + 1 < argc) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--no-step")) {
            o->step = 0;
        } else {
            fprintf(stderr, "usage: bench_episode [--model smollm2-135m|tiny] [--groups G] [--group E] "
                            "[--turns T] [--prompt-len L] [--new N] [--tool A] [--threads K] "
                            "[--rounds R] [--no-step]\n");
            return -1;
        }
    }
    if (o->groups < 1 || o->group < 1 || o->turns < 1 || o->plen < 1 || o->nnew < 1 || o->tool < 0 ||
        o->threads < 1 || o->rounds < 1 || o->rounds > 16) {
        fprintf(stderr, "bench_episode: bad option value\n");
        return -1;
    }
    return 0;
}

typedef struct bench {
    opts o;
    int rows, vocab, seqmax;
    int32_t *prompts, *lens;
} bench;

/* The tool ids appended after turn t of episode e. */
static int32_t tool_id(const bench *b, int e, int t, int j)
{
    uint64_t x = (uint64_t)e * 1000003u + (uint64_t)t * 7919u + (uint64_t)j * 104729u + 17;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return (int32_t)((x >> 32) % (uint64_t)b->vocab);
}

static float reward_of(const int32_t *ids, int n)
{
    int even = 0;
    for (int i = 0; i < n; i++)
        even += ids[i] % 2 == 0;
    return (float)even / (float)n;
}

/* ---- with cache continuation ------------------------------------------------------- */

static int env_tool(pt_env_reply *rep, const pt_env_turn *t, void *payload)
{
    const bench *b = payload;
    static int32_t ids[4096];
    static float reward;
    if (t->turn + 1 >= b->o.turns || t->final) {
        reward = reward_of(t->ids + t->prompt_len, t->n_ids - t->prompt_len);
        rep->action = PT_ENV_DONE;
        rep->rewards = &reward;
        return 0;
    }
    for (int j = 0; j < b->o.tool; j++)
        ids[j] = tool_id(b, t->episode, t->turn, j);
    rep->action = PT_ENV_APPEND;
    rep->ids = ids;
    rep->n_ids = b->o.tool;
    return 0;
}

static int rollouts_cached(double *secs, int64_t *prefilled, int64_t *sampled, bench *b, pt_generator *gen,
                           pt_episode_results *res, pt_rollout_buffer *buf, uint64_t seed)
{
    pt_generate_options so;
    CHECK(pt_generate_options_init(&so));
    so.max_new_tokens = b->o.nnew;
    so.n_stop_ids = 0;
    so.seed = seed;
    pt_episode_options eo;
    CHECK(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = b->o.turns;
    int64_t *groups = malloc((size_t)b->rows * sizeof *groups);
    if (!groups)
        return 1;
    for (int r = 0; r < b->rows; r++)
        groups[r] = r / b->o.group;
    double t0 = bench_now();
    int st = pt_episodes_run(res, gen, b->prompts, b->lens, groups, b->rows, &eo, env_tool, b);
    double t1 = bench_now();
    free(groups);
    CHECK(st);
    CHECK(pt_rollout_buffer_clear(buf));
    int added = 0;
    CHECK(pt_rollout_buffer_add_episodes(&added, buf, res));
    pt_episode_stats es;
    CHECK(pt_episode_stats_init(&es));
    CHECK(pt_episode_results_stats(&es, res));
    *secs = t1 - t0;
    *prefilled = es.prefill_tokens;
    *sampled = es.sampled_tokens;
    return added == b->rows ? 0 : 1;
}

/* ---- without: pt_generate per turn over the whole conversation ----------------------------- */

static int rollouts_reprefill(double *secs, int64_t *prefilled, int64_t *sampled, bench *b, pt_generator *gen,
                              pt_rollout_buffer *buf, uint64_t seed)
{
    const int R = b->rows, S = b->seqmax, N = b->o.nnew;
    int32_t *conv = malloc((size_t)R * S * sizeof *conv), *len = malloc((size_t)R * sizeof *len);
    uint8_t *mask = calloc((size_t)R * S, 1);
    float *lps = calloc((size_t)R * S, sizeof *lps);
    int32_t *flat = malloc((size_t)R * S * sizeof *flat), *tok = malloc((size_t)R * N * sizeof *tok);
    int32_t *ntok = malloc((size_t)R * sizeof *ntok);
    float *lp = malloc((size_t)R * N * sizeof *lp);
    if (!conv || !len || !mask || !lps || !flat || !tok || !ntok || !lp)
        return 1;
    for (int r = 0; r < R; r++) {
        memcpy(conv + (size_t)r * S, b->prompts + (size_t)r * b->o.plen, (size_t)b->o.plen * sizeof *conv);
        len[r] = b->o.plen;
    }
    int64_t pre = 0, smp = 0;
    double t0 = bench_now();
    for (int t = 0; t < b->o.turns; t++) {
        size_t off = 0;
        for (int r = 0; r < R; r++) {
            memcpy(flat + off, conv + (size_t)r * S, (size_t)len[r] * sizeof *flat);
            off += (size_t)len[r];
            /* pt_generate prefills a repeated prompt once */
            bool again = false;
            for (int q = 0; q < r && !again; q++)
                again = len[q] == len[r] &&
                        !memcmp(conv + (size_t)q * S, conv + (size_t)r * S, (size_t)len[r] * sizeof *conv);
            if (!again)
                pre += len[r];
        }
        pt_generate_options go;
        CHECK(pt_generate_options_init(&go));
        go.max_new_tokens = N;
        go.n_stop_ids = 0;
        go.seed = seed * 131 + (uint64_t)t;
        CHECK(pt_generate(gen, flat, len, R, &go, tok, ntok, NULL, lp));
        for (int r = 0; r < R; r++) {
            int32_t *c = conv + (size_t)r * S;
            for (int j = 0; j < ntok[r]; j++) {
                c[len[r]] = tok[(size_t)r * N + j];
                mask[(size_t)r * S + len[r]] = 1;
                lps[(size_t)r * S + len[r]] = lp[(size_t)r * N + j];
                len[r]++;
            }
            smp += ntok[r];
            if (t + 1 < b->o.turns)
                for (int j = 0; j < b->o.tool; j++) {
                    c[len[r]] = tool_id(b, r, t, j);
                    mask[(size_t)r * S + len[r]] = 0;
                    lps[(size_t)r * S + len[r]] = 0.0f;
                    len[r]++;
                }
        }
    }
    double t1 = bench_now();
    CHECK(pt_rollout_buffer_clear(buf));
    for (int r = 0; r < R; r++) {
        const int P = b->o.plen;
        float reward = reward_of(conv + (size_t)r * S + P, len[r] - P);
        pt_rollout_sample s;
        CHECK(pt_rollout_sample_init(&s));
        s.ids = conv + (size_t)r * S;
        s.n_ids = len[r];
        s.prompt_len = P;
        s.loss_mask = mask + (size_t)r * S + P;
        s.old_logprobs = lps + (size_t)r * S + P;
        s.group = r / b->o.group;
        s.rewards = &reward;
        s.truncated = true;
        CHECK(pt_rollout_buffer_add(buf, &s));
    }
    *secs = t1 - t0;
    *prefilled = pre;
    *sampled = smp;
    free(conv); free(len); free(mask); free(lps); free(flat); free(tok); free(ntok); free(lp);
    return 0;
}

int main(int argc, char **argv)
{
    bench b;
    memset(&b, 0, sizeof b);
    if (parse(&b.o, argc, argv))
        return 2;
    const opts *o = &b.o;
    CHECK(pt_set_num_threads(o->threads));
    b.rows = o->groups * o->group;
    b.seqmax = o->plen + o->turns * o->nnew + (o->turns - 1) * o->tool;
    pt_model_config cfg;
    if (bench_model_config(&cfg, o->model, b.seqmax)) {
        fprintf(stderr, "bench_episode: unknown model shape '%s'\n", o->model);
        return 2;
    }
    b.vocab = cfg.vocab_size;
    pt_model *model;
    CHECK(pt_model_create(&model, &cfg, 1));
    uint64_t nparams = 0;
    nparams = pt_model_param_count(model);
    pt_optimizer_options oo;
    CHECK(pt_optimizer_options_init(&oo));
    oo.lr = 1e-6;
    pt_optimizer *opt;
    CHECK(pt_optimizer_create(&opt, model, &oo));
    pt_context *ctx;
    CHECK(pt_context_create(&ctx, model, 4, b.seqmax));
    pt_generator *gen;
    CHECK(pt_generator_create(&gen, model, b.rows, b.seqmax));
    pt_rollout_buffer *buf;
    CHECK(pt_rollout_buffer_create(&buf, NULL));
    pt_episode_results *res;
    CHECK(pt_episode_results_create(&res));
    b.prompts = malloc((size_t)b.rows * o->plen * sizeof *b.prompts);
    b.lens = malloc((size_t)b.rows * sizeof *b.lens);
    if (!b.prompts || !b.lens)
        return 1;
    uint64_t x = 12345;
    for (int p = 0; p < o->groups; p++)
        for (int t = 0; t < o->plen; t++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            for (int g = 0; g < o->group; g++)
                b.prompts[((size_t)p * o->group + g) * o->plen + t] = (int32_t)((x >> 33) % (uint64_t)b.vocab);
        }
    for (int r = 0; r < b.rows; r++)
        b.lens[r] = o->plen;
    printf("bench_episode: %s shape, %.2fM parameters, %d groups x %d episodes x %d turns, prompt %d, "
           "%d new tokens per turn, %d tool ids appended between turns (episodes of %d ids), %d threads, "
           "load average %.2f\n", o->model, (double)nparams / 1e6, o->groups, o->group, o->turns, o->plen,
           o->nnew, o->tool, b.seqmax, o->threads, bench_loadavg());
    printf("matrix products: %s\n", pt_blas_info());
    printf("cpu: %s\n", pt_cpu_info());
    fflush(stdout);
    /* warm-up: BLIS, the thread pool, first-touch of the buffers */
    {
        pt_generate_options go;
        CHECK(pt_generate_options_init(&go));
        go.max_new_tokens = 2;
        go.n_stop_ids = 0;
        int32_t tk[2], nt[1];
        CHECK(pt_generate(gen, b.prompts, b.lens, 1, &go, tk, nt, NULL, NULL));
    }
    double roll[2][16], step[2][16];
    int64_t pre[2] = { 0, 0 }, smp[2] = { 0, 0 };
    static const char *const way[2] = { "cache continuation", "re-prefill per turn" };
    for (int round = 0; round < o->rounds; round++)
        for (int w = 0; w < 2; w++) {
            const uint64_t seed = (uint64_t)round + 7;
            int bad = w == 0 ? rollouts_cached(&roll[w][round], &pre[w], &smp[w], &b, gen, res, buf, seed)
                             : rollouts_reprefill(&roll[w][round], &pre[w], &smp[w], &b, gen, buf, seed);
            if (bad) {
                fprintf(stderr, "bench_episode: the %s rollouts failed\n", way[w]);
                return 1;
            }
            step[w][round] = 0.0;
            pt_grpo_stats gs;
            CHECK(pt_grpo_stats_init(&gs));
            if (o->step) {
                double t0 = bench_now();
                CHECK(pt_grpo_step(&gs, opt, ctx, buf, NULL));
                step[w][round] = bench_now() - t0;
            }
            printf("  round %d, %-20s: rollouts %.2f s (%lld sampled tokens, %.1f tokens/s; %lld tokens "
                   "prefilled), GRPO step %.2f s (%.0f loss tokens), iteration %.2f s, load %.2f\n",
                   round + 1, way[w], roll[w][round], (long long)smp[w], (double)smp[w] / roll[w][round],
                   (long long)pre[w], step[w][round], gs.tokens, roll[w][round] + step[w][round],
                   bench_loadavg());
            fflush(stdout);
        }
    double r_roll[2], r_step[2];
    for (int w = 0; w < 2; w++) {
        double it[16];
        for (int k = 0; k < o->rounds; k++)
            it[k] = roll[w][k] + step[w][k];
        r_roll[w] = bench_median(roll[w], o->rounds);
        r_step[w] = bench_median(step[w], o->rounds);
        printf("%-20s (median of %d): rollouts %.2f s = %.1f sampled tokens/s, %lld tokens prefilled; "
               "step %.2f s; iteration %.2f s\n", way[w], o->rounds, r_roll[w], (double)smp[w] / r_roll[w],
               (long long)pre[w], r_step[w], bench_median(it, o->rounds));
    }
    printf("ratio re-prefill / cache continuation: rollouts %.2fx, whole iteration %.2fx "
           "(prefilled tokens %.2fx); peak RSS %.0f MB, load average %.2f\n", r_roll[1] / r_roll[0],
           (r_roll[1] + r_step[1]) / (r_roll[0] + r_step[0]), (double)pre[1] / (double)pre[0],
           bench_peak_rss_mb(), bench_loadavg());
    printf("result: rows=%d turns=%d rollout_cached_s=%.3f rollout_reprefill_s=%.3f step_s=%.3f "
           "rollout_ratio=%.3f iteration_ratio=%.3f\n", b.rows, o->turns, r_roll[0], r_roll[1], r_step[0],
           r_roll[1] / r_roll[0], (r_roll[1] + r_step[1]) / (r_roll[0] + r_step[0]));
    free(b.prompts);
    free(b.lens);
    pt_episode_results_free(res);
    pt_rollout_buffer_free(buf);
    pt_generator_free(gen);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_model_free(model);
    return 0;
}
