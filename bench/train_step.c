/* bench_train_step: one full training step (forward, backward through
 * pt_model_loss(..., backward = true), and the AdamW update) of a model with
 * random weights, against the PyTorch anchor run in the same process tree.
 *
 *   bench_train_step [--config smollm2-135m|tiny] [--threads N] [--batch B]
 *                    [--seq T] [--steps N] [--warmup W] [--no-optimizer]
 *                    [--no-anchor] [--anchor-reps R] [--rounds K] [--shared DIR]
 *
 * Prints tokens/s, achieved GFLOP/s (6 * parameters * tokens / time), that as a
 * fraction of the BLIS sgemm peak measured in the same run (max of 2048^3 and
 * 1024x1536x576), peak RSS, then runs
 *   /usr/bin/python3 SHARED/anchors/torch_llama.py train --config C --batch B --seq T
 * and prints its figures and the ratios.  The optimizer step is on by default
 * (the anchor includes AdamW); --no-optimizer times forward+backward alone.
 * The AdamW settings match the anchor's torch.optim.AdamW(lr=1e-4):
 * weight decay 0.01 on every tensor, no gradient clipping.
 *
 * Medians of the timed steps; the machine is shared and noisy, so compare the
 * ratios of one run, never a lone absolute time.  --rounds K alternates our
 * steps and the anchor K times and reports the median of the per-round
 * figures and ratios. */
#include "bench_util.h"

#include "posttrain/posttrain.h"
#include "posttrain/train.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct bench_opts {
    const char *config;
    int threads, batch, seq, steps, warmup, anchor_reps, rounds;
    int optimizer, anchor;
    const char *shared;
} bench_opts;

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_train_step [--config smollm2-135m|tiny] [--threads N] [--batch B]\n"
            "                        [--seq T] [--steps N] [--warmup W] [--no-optimizer]\n"
            "                        [--no-anchor] [--anchor-reps R] [--rounds K] [--shared DIR]\n");
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The shared/ folder: --shared, $PT_SHARED_DIR, next to the source tree
 * (from __FILE__ when absolute, or from the executable's build directory),
 * or /work/shared. */
static const char *find_shared(const char *opt)
{
    static char buf[PATH_MAX + 64];
    if (opt)
        return is_dir(opt) ? opt : NULL;
    const char *env = getenv("PT_SHARED_DIR");
    if (env && *env && is_dir(env))
        return env;
    if (__FILE__[0] == '/') {
        snprintf(buf, sizeof buf, "%s", __FILE__);
        char *s = strrchr(buf, '/');
        if (s) {
            snprintf(s, sizeof buf - (size_t)(s - buf), "/../../shared");
            if (is_dir(buf))
                return buf;
        }
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *s = strrchr(exe, '/'); /* .../build-x/bench/bench_train_step */
        if (s) {
            *s = '\0';
            /* build-x/bench -> ../../../shared (source tree is build-x/..) */
            snprintf(buf, sizeof buf, "%s/../../../shared", exe);
            if (is_dir(buf))
                return buf;
            snprintf(buf, sizeof buf, "%s/../../shared", exe);
            if (is_dir(buf))
                return buf;
        }
    }
    return is_dir("/work/shared") ? "/work/shared" : NULL;
}

/* find_shared() made canonical for printing. */
static const char *find_shared_real(const char *opt)
{
    static char real[PATH_MAX];
    const char *p = find_shared(opt);
    if (p && realpath(p, real))
        return real;
    return p;
}

/* Value of `key=` in a key=value line, or NAN. */
static double kv_get(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "%s=", key);
        if (strncmp(line, pat, strlen(pat)) != 0)
            return NAN;
        p = line - 1;
    }
    return strtod(p + strlen(pat), NULL);
}

static int parse_args(bench_opts *o, int argc, char **argv)
{
    *o = (bench_opts){ .config = "smollm2-135m", .threads = 2, .batch = 4, .seq = 256,
                       .steps = 5, .warmup = 1, .anchor_reps = 3, .rounds = 1, .optimizer = 1, .anchor = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define INTOPT(flag, field)                                                                      \
    if (strcmp(a, flag) == 0) {                                                                  \
        if (!v)                                                                                  \
            return -1;                                                                           \
        o->field = atoi(v);                                                                      \
        i++;                                                                                     \
        continue;                                                                                \
    }
        INTOPT("--threads", threads)
        INTOPT("--batch", batch)
        INTOPT("--seq", seq)
        INTOPT("--steps", steps)
        INTOPT("--warmup", warmup)
        INTOPT("--anchor-reps", anchor_reps)
        INTOPT("--rounds", rounds)
#undef INTOPT
        if (strcmp(a, "--config") == 0 && v) {
            o->config = v;
            i++;
        } else if (strcmp(a, "--shared") == 0 && v) {
            o->shared = v;
            i++;
        } else if (strcmp(a, "--no-optimizer") == 0) {
            o->optimizer = 0;
        } else if (strcmp(a, "--no-anchor") == 0) {
            o->anchor = 0;
        } else {
            return -1;
        }
    }
    if (o->threads < 1 || o->batch < 1 || o->seq < 2 || o->steps < 1 || o->steps > 64 ||
        o->warmup < 0 || o->anchor_reps < 1 || o->rounds < 1 || o->rounds > 16)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o;
    pt_model_config cfg;
    if (parse_args(&o, argc, argv) != 0 || bench_model_config(&cfg, o.config, o.seq) != 0) {
        usage();
        return 2;
    }
    CHECK(pt_set_num_threads(o.threads));

    pt_model *model = NULL;
    pt_context *ctx = NULL;
    pt_optimizer *opt = NULL;
    double t0 = bench_now();
    CHECK(pt_model_create(&model, &cfg, 1234));
    uint64_t nparams = 0;
    nparams = pt_model_param_count(model);
    CHECK(pt_context_create(&ctx, model, o.batch, o.seq));
    CHECK(pt_model_alloc_grads(model));
    if (o.optimizer) {
        pt_optimizer_options oo;
        CHECK(pt_optimizer_options_init(&oo));
        oo.type = PT_OPTIMIZER_ADAMW;
        oo.lr = 1e-4;
        oo.weight_decay = 0.01;           /* torch.optim.AdamW's default */
        oo.decay_norms_and_biases = true; /* the anchor decays every tensor */
        oo.max_grad_norm = 0.0;           /* the anchor does not clip */
        CHECK(pt_optimizer_create(&opt, model, &oo));
    }
    double t_setup = bench_now() - t0;

    size_t ntok = (size_t)o.batch * (size_t)o.seq;
    pt_batch b;
    if (bench_random_batch(&b, o.batch, o.seq, cfg.vocab_size, 42))
        return 1;

    printf("bench_train_step: config %s, %.2fM parameters, batch %d x seq %d, %d threads, "
           "optimizer %s, setup %.2f s, load average %.2f\n",
           o.config, (double)nparams / 1e6, o.batch, o.seq, o.threads,
           o.optimizer ? "AdamW" : "none", t_setup, bench_loadavg());
    fflush(stdout);

    char anchor_cmd[2 * PATH_MAX + 256];
    anchor_cmd[0] = '\0';
    if (o.anchor) {
        const char *shared = find_shared_real(o.shared);
        char script[PATH_MAX + 64];
        if (shared)
            snprintf(script, sizeof script, "%s/anchors/torch_llama.py", shared);
        if (!shared || access(script, R_OK) != 0)
            printf("anchor: skipped (shared/anchors/torch_llama.py not found; use --shared DIR)\n");
        else if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
            printf("anchor: skipped (/usr/bin/python3 cannot import torch: apt-get install "
                   "python3-torch)\n");
        else
            snprintf(anchor_cmd, sizeof anchor_cmd,
                     "/usr/bin/python3 '%s' train --config %s --batch %d --seq %d --threads %d "
                     "--reps %d 2>&1",
                     script, o.config, o.batch, o.seq, o.threads, o.anchor_reps);
    }

    printf("matrix products: %s\n", pt_blas_info());
    printf("cpu: %s\n", pt_cpu_info());
    /* Rounds: our timed steps, the sgemm peak, then the anchor; the figures
     * of one round are measured side by side, and the summary takes medians
     * over rounds. */
    double r_tps[16], r_gf[16], r_frac[16], r_peak[16], r_atps[16], r_agf[16], r_ratio[16];
    double rss = NAN, a_rss = NAN;
    int n_anchor = 0;
    float loss = 0.0f;
    for (int round = 0; round < o.rounds; round++) {
        double t_step[64], t_fb[64], t_opt[64];
        int warm = round == 0 ? o.warmup : 0;
        /* The sgemm peak before (from round 1 on) and after our steps, the
         * max of the two: a neighbour's burst should not lower the yardstick.
         * Not before round 0: its buffers and the allocator's raised mmap
         * threshold would add ~45 MB to the peak RSS we report. */
        double pre1 = round > 0 ? bench_gemm_peak(o.threads, 2048, 2048, 2048, 3) : 0.0;
        double pre2 = round > 0 ? bench_gemm_peak(o.threads, 1024, 1536, 576, 3) : 0.0;
        for (int r = -warm; r < o.steps; r++) {
            double a = bench_now();
            if (!o.optimizer)
                CHECK(pt_model_zero_grad(model));
            CHECK(pt_model_loss(ctx, &b, NULL, true, &loss));
            double m = bench_now();
            if (o.optimizer)
                CHECK(pt_optimizer_step(NULL, opt));
            double e = bench_now();
            if (r >= 0) {
                t_step[r] = e - a;
                t_fb[r] = m - a;
                t_opt[r] = e - m;
            }
            printf("  %s %d: loss %.4f, %.3f s (forward+backward %.3f s, optimizer %.3f s)\n",
                   r < 0 ? "warm-up" : "step", r < 0 ? r + warm : r, (double)loss, e - a,
                   m - a, e - m);
            fflush(stdout);
        }
        double step = bench_median(t_step, o.steps);
        double fb = bench_median(t_fb, o.steps);
        double to = bench_median(t_opt, o.steps);
        if (round == 0)
            rss = bench_peak_rss_mb();

        /* GEMM peak measured now, in the same run (after the first RSS
         * reading: its buffers would otherwise count in a small config's peak). */
        double peak1 = bench_gemm_peak(o.threads, 2048, 2048, 2048, 5);
        double peak2 = bench_gemm_peak(o.threads, 1024, 1536, 576, 5);
        peak1 = pre1 > peak1 ? pre1 : peak1;
        peak2 = pre2 > peak2 ? pre2 : peak2;
        double peak = peak1 > peak2 ? peak1 : peak2;

        double tps = (double)ntok / step;
        double gflops = 6.0 * (double)nparams * (double)ntok / step / 1e9;
        double gflops_fb = 6.0 * (double)nparams * (double)ntok / fb / 1e9;
        r_tps[round] = tps;
        r_gf[round] = gflops;
        r_peak[round] = peak;
        r_frac[round] = gflops / peak;
        printf("round %d ours: step %.3f s (median of %d; forward+backward %.3f s, optimizer "
               "%.3f s)\n", round, step, o.steps, fb, to);
        printf("round %d ours: %.1f tokens/s, %.1f GFLOP/s (6N; forward+backward alone %.1f), "
               "%.1f%% of the sgemm peak, peak RSS %.0f MB\n",
               round, tps, gflops, gflops_fb, 100.0 * gflops / peak, rss);
        printf("round %d sgemm peak (%d threads, best of before/after): %.1f GFLOP/s at 2048^3, "
               "%.1f at 1024x1536x576; "
               "load average %.2f\n", round, o.threads, peak1, peak2, bench_loadavg());
        fflush(stdout);

        if (anchor_cmd[0]) {
            char line[4096];
            printf("round %d anchor: %s\n", round, anchor_cmd);
            fflush(stdout);
            if (bench_run_capture(anchor_cmd, "mode=train", line, sizeof line) == 0) {
                double a_tps = kv_get(line, "tokens_per_s");
                double a_gf = kv_get(line, "gflops_6n");
                double ar = kv_get(line, "peak_rss_mb");
                if (isnan(a_rss) || ar > a_rss)
                    a_rss = ar;
                r_atps[n_anchor] = a_tps;
                r_agf[n_anchor] = a_gf;
                r_ratio[n_anchor] = tps / a_tps;
                n_anchor++;
                printf("round %d anchor (PyTorch): %.1f tokens/s, %.1f GFLOP/s (6N), %.1f%% of "
                       "the sgemm peak, peak RSS %.0f MB; ratio ours/anchor %.2fx; load average "
                       "%.2f\n", round, a_tps, a_gf, 100.0 * a_gf / peak, ar, tps / a_tps,
                       bench_loadavg());
            } else {
                printf("round %d anchor: no result line (mode=train ...) in its output\n", round);
            }
            fflush(stdout);
        }
    }

    double tps = bench_median(r_tps, o.rounds), gflops = bench_median(r_gf, o.rounds);
    double frac = bench_median(r_frac, o.rounds), peak = bench_median(r_peak, o.rounds);
    printf("ours (median of %d rounds): %.1f tokens/s, %.1f GFLOP/s (6N), %.1f%% of the sgemm "
           "peak (median peak %.1f GFLOP/s), peak RSS %.0f MB\n",
           o.rounds, tps, gflops, 100.0 * frac, peak, rss);
    double a_tps = NAN, ratio = NAN;
    if (n_anchor > 0) {
        a_tps = bench_median(r_atps, n_anchor);
        double a_gf = bench_median(r_agf, n_anchor);
        ratio = bench_median(r_ratio, n_anchor);
        printf("anchor (median of %d runs): %.1f tokens/s, %.1f GFLOP/s (6N), peak RSS %.0f MB\n",
               n_anchor, a_tps, a_gf, a_rss);
        printf("ratio: tokens/s ours/anchor %.2fx (median of per-round ratios); peak RSS "
               "ours/anchor %.2f\n", ratio, rss / a_rss);
    }
    printf("result: config=%s threads=%d batch=%d seq=%d optimizer=%d rounds=%d tokens_per_s=%.2f "
           "gflops_6n=%.2f gemm_peak=%.1f peak_frac=%.3f rss_mb=%.0f anchor_tokens_per_s=%.2f "
           "anchor_rss_mb=%.0f speed_ratio=%.3f rss_ratio=%.3f\n",
           o.config, o.threads, o.batch, o.seq, o.optimizer, o.rounds, tps, gflops, peak, frac,
           rss, a_tps, a_rss, ratio, rss / a_rss);

    bench_batch_free(&b);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(model);
    return 0;
}
