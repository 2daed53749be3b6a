/* bench_grpo_step: one GRPO iteration (rollouts with pt_generate, rewards,
 * pt_grpo_step with AdamW) at the SmolLM2-135M shape with random weights,
 * against the PyTorch anchor run in the same run.
 *
 *   bench_grpo_step [--prompts P] [--group G] [--prompt-len L] [--new N]
 *                   [--micro M] [--rounds R] [--threads T] [--no-anchor]
 *                   [--shared DIR]
 *
 * Defaults: 2 prompts x 8 completions (16 rows), 64-token prompts, 64 new
 * tokens (sampled at temperature 1, no stop ids), micro-batches of 4 rows,
 * 2 threads, 3 timed rounds after one warm-up round (medians).  A round:
 *  - generation: pt_generate of the 16 rows with per-token logprobs;
 *  - scoring: a reward (the fraction of even token ids) through
 *    pt_rollout_buffer_score;
 *  - the update: pt_grpo_step (old logprobs from generation, beta 0, loss
 *    "dapo"), whose forward and backward cover the rows' L + N tokens.
 * Printed: generated tokens/s, update tokens/s, update GFLOP/s (6N per
 * token) as a fraction of the sgemm peak measured in the same run, peak RSS.
 * PyTorch has no GRPO step of its own: the anchor is composed of its decode
 * (--batch P*G --steps N --prompt L: prefill and decode tokens/s) and its
 * training step (--batch M --seq L+N), the same work split the same way:
 * anchor time = rows*L/prefill + rows*N/decode + rows*(L+N)/train, and
 * the ratio is that time over ours.  The machine is shared: compare ratios
 * of one run; the load average is printed. */
#include "bench_util.h"

#include "posttrain/posttrain.h"

#include <stdint.h>

typedef struct opts {
    int prompts, group, plen, nnew, micro, rounds, threads, anchor;
    const char *shared;
} opts;

static int even_fraction(float *rewards, const pt_reward_batch *batch, void *payload)
{
    (void)payload;
    for (int i = 0; i < batch->n; i++) {
        const pt_reward_item *it = &batch->items[i];
        int even = 0, n = it->n_ids - it->prompt_len;
        for (int t = it->prompt_len; t < it->n_ids; t++)
            even += it->ids[t] % 2 == 0;
        rewards[i] = n > 0 ? (float)even / (float)n : 0.0f;
    }
    return 0;
}

static int parse(opts *o, int argc, char **argv)
{
    *o = (opts){ .prompts = 2, .group = 8, .plen = 64, .nnew = 64, .micro = 4, .rounds = 3,
                 .threads = 2, .anchor = 1, .shared = NULL };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--prompts") ? &o->prompts : !strcmp(a, "--group") ? &o->group
                 : !strcmp(a, "--prompt-len") ? &o->plen : !strcmp(a, "--new") ? &o->nnew
                 : !strcmp(a, "--micro") ? &o->micro : !strcmp(a, "--rounds") ? &o->rounds
                 : !strcmp(a, "--threads") ? &o->threads : NULL;
        if (dst && i + 1 < argc) {
            *dst = atoi(argv[++i]);
        } else if (!strcmp(a, "--shared") && i + 1 < argc) {
            o->shared = argv[++i];
        } else if (!strcmp(a, "--no-anchor")) {
            o->anchor = 0;
        } else {
            fprintf(stderr, "usage: bench_grpo_step [--prompts P] [--group G] [--prompt-len L] [--new N] "
                            "[--micro M] [--rounds R] [--threads T] [--no-anchor] [--shared DIR]\n");
            return -1;
        }
    }
    if (o->prompts < 1 || o->group < 2 || o->plen < 1 || o->nnew < 1 || o->micro < 1 ||
        o->rounds < 1 || o->rounds > 16 || o->threads < 1) {
        fprintf(stderr, "bench_grpo_step: bad option value\n");
        return -1;
    }
    return 0;
}

/* Run the anchor command and read "key=value" numbers from its result line. */
static int anchor_run(const char *cmd, const char *mode, const char *key, double *val,
                      const char *key2, double *val2)
{
    char line[4096];
    printf("anchor: %s\n", cmd);
    fflush(stdout);
    if (bench_run_capture(cmd, mode, line, sizeof line) != 0)
        return -1;
    const char *p = strstr(line, key);
    if (!p || sscanf(p + strlen(key), "%lf", val) != 1)
        return -1;
    if (key2) {
        p = strstr(line, key2);
        if (!p || sscanf(p + strlen(key2), "%lf", val2) != 1)
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(&o, argc, argv))
        return 2;
    CHECK(pt_set_num_threads(o.threads));
    const int rows = o.prompts * o.group, L = o.plen, N = o.nnew, S = L + N;
    pt_model_config cfg;
    bench_model_config(&cfg, "smollm2-135m", S);
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
    CHECK(pt_context_create(&ctx, model, o.micro, S));
    pt_generator *gen;
    CHECK(pt_generator_create(&gen, model, rows, S));
    pt_rollout_buffer *buf;
    CHECK(pt_rollout_buffer_create(&buf, NULL));

    int32_t *prompts = malloc((size_t)rows * L * sizeof *prompts), *lens = malloc((size_t)rows * sizeof *lens);
    int32_t *tok = malloc((size_t)rows * N * sizeof *tok), *ntok = malloc((size_t)rows * sizeof *ntok);
    int32_t *fin = malloc((size_t)rows * sizeof *fin), *ids = malloc((size_t)S * sizeof *ids);
    float *lp = malloc((size_t)rows * N * sizeof *lp);
    if (!prompts || !lens || !tok || !ntok || !fin || !ids || !lp) {
        fprintf(stderr, "bench_grpo_step: out of memory\n");
        return 1;
    }
    uint64_t x = 12345;
    for (int p = 0; p < o.prompts; p++)
        for (int t = 0; t < L; t++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            for (int g = 0; g < o.group; g++)
                prompts[((size_t)p * o.group + g) * L + t] = (int32_t)((x >> 33) % (uint64_t)cfg.vocab_size);
        }
    for (int r = 0; r < rows; r++)
        lens[r] = L;

    printf("bench_grpo_step: SmolLM2-135M shape, %.2fM parameters, %d prompts x %d completions, "
           "prompt %d + %d new tokens, micro-batches of %d rows, %d threads, load average %.2f\n",
           (double)nparams / 1e6, o.prompts, o.group, L, N, o.micro, o.threads, bench_loadavg());
    printf("matrix products: %s\n", pt_blas_info());
    printf("cpu: %s\n", pt_cpu_info());
    fflush(stdout);

    double t_gen[16], t_step[16], t_total[16];
    pt_grpo_stats st;
    for (int round = -1; round < o.rounds; round++) {
        pt_generate_options go;
        CHECK(pt_generate_options_init(&go));
        go.max_new_tokens = N;
        go.n_stop_ids = 0;
        go.seed = (uint64_t)(round + 2);
        double t0 = bench_now();
        CHECK(pt_generate(gen, prompts, lens, rows, &go, tok, ntok, fin, lp));
        double t1 = bench_now();
        CHECK(pt_rollout_buffer_clear(buf));
        for (int r = 0; r < rows; r++) {
            memcpy(ids, prompts + (size_t)r * L, (size_t)L * sizeof *ids);
            memcpy(ids + L, tok + (size_t)r * N, (size_t)ntok[r] * sizeof *ids);
            pt_rollout_sample smp;
            CHECK(pt_rollout_sample_init(&smp));
            smp.ids = ids;
            smp.n_ids = L + ntok[r];
            smp.prompt_len = L;
            smp.old_logprobs = lp + (size_t)r * N;
            smp.group = r / o.group;
            smp.truncated = fin[r] == PT_FINISH_LENGTH;
            CHECK(pt_rollout_buffer_add(buf, &smp));
        }
        CHECK(pt_rollout_buffer_score(buf, 0, even_fraction, NULL));
        pt_grpo_options gopt;
        CHECK(pt_grpo_options_init(&gopt));
        gopt.micro_batch = o.micro;
        CHECK(pt_grpo_stats_init(&st));
        double t2 = bench_now();
        CHECK(pt_grpo_step(&st, opt, ctx, buf, &gopt));
        double t3 = bench_now();
        if (round < 0)
            continue; /* warm-up */
        t_gen[round] = t1 - t0;
        t_step[round] = t3 - t2;
        t_total[round] = t3 - t0;
        printf("  round %d: generation %.2f s, scoring+buffer %.3f s, update %.2f s; reward %.3f, "
               "entropy %.3f, kl %.2g, clip %.3f, grad norm %.3g\n", round + 1, t1 - t0, t2 - t1,
               t3 - t2, st.reward, st.entropy, st.kl, st.clip_ratio_region, st.grad_norm);
        fflush(stdout);
    }
    double rss = bench_peak_rss_mb();
    double tg = bench_median(t_gen, o.rounds), ts = bench_median(t_step, o.rounds);
    double tt = bench_median(t_total, o.rounds);
    double gen_tps = (double)rows * N / tg, upd_tps = (double)rows * S / ts;
    double gflops = 6.0 * (double)nparams * (double)rows * S / ts / 1e9;
    double peak = fmax(bench_gemm_peak(o.threads, 2048, 2048, 2048, 3),
                       bench_gemm_peak(o.threads, 1024, 1536, 576, 5));
    printf("ours (median of %d rounds): generation %.1f new tokens/s (%.2f s), update %.1f tokens/s "
           "(%.2f s), %.1f GFLOP/s (6N) = %.0f%% of the sgemm peak (%.1f GFLOP/s), whole iteration "
           "%.2f s, peak RSS %.0f MB\n", o.rounds, gen_tps, tg, upd_tps, ts, gflops,
           100.0 * gflops / peak, peak, tt, rss);
    fflush(stdout);

    char script[4096];
    const char *anchor = o.anchor ? bench_find_anchor(script, sizeof script, o.shared) : NULL;
    if (o.anchor && !anchor)
        printf("anchor: skipped (anchors/torch_llama.py not found; use --shared DIR)\n");
    if (anchor) {
        char cmd[8192];
        double a_dec = NAN, a_pre = NAN, a_train = NAN;
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' decode --config smollm2-135m --batch %d "
                 "--steps %d --prompt %d --threads %d 2>&1", anchor, rows, N, L, o.threads);
        int bad = anchor_run(cmd, "mode=decode", "tokens_per_s=", &a_dec, "prefill_tokens_per_s=", &a_pre);
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' train --config smollm2-135m --batch %d "
                 "--seq %d --threads %d 2>&1", anchor, o.micro, S, o.threads);
        bad = bad || anchor_run(cmd, "mode=train", "tokens_per_s=", &a_train, NULL, NULL);
        if (bad) {
            printf("anchor: no usable result line\n");
        } else {
            double a_gen = (double)rows * L / a_pre + (double)rows * N / a_dec;
            double a_upd = (double)rows * S / a_train;
            printf("anchor (PyTorch, composed): generation %.2f s (prefill %.1f, decode %.1f tokens/s), "
                   "update %.2f s (train step %.1f tokens/s), iteration %.2f s\n", a_gen, a_pre,
                   a_dec, a_upd, a_train, a_gen + a_upd);
            printf("ratio ours/anchor: generation %.2fx, update %.2fx, whole iteration %.2fx "
                   "(load average %.2f)\n", a_gen / tg, a_upd / ts, (a_gen + a_upd) / (tg + ts),
                   bench_loadavg());
            printf("result: rows=%d prompt=%d new=%d gen_tokens_per_s=%.2f update_tokens_per_s=%.2f "
                   "peak_frac=%.3f rss_mb=%.0f gen_ratio=%.3f update_ratio=%.3f iteration_ratio=%.3f\n",
                   rows, L, N, gen_tps, upd_tps, gflops / peak, rss, a_gen / tg, a_upd / ts,
                   (a_gen + a_upd) / (tg + ts));
        }
    }
    free(prompts); free(lens); free(tok); free(ntok); free(fin); free(ids); free(lp);
    pt_rollout_buffer_free(buf);
    pt_generator_free(gen);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_model_free(model);
    return 0;
}
