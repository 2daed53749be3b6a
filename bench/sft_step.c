/* bench_sft_step: the SFT step as `posttrain sft` runs it (pt_sft_step:
 * forward, backward, AdamW) at the SmolLM2-135M shape, batch 4 x seq 256, for
 * full fine-tuning and for LoRA rank 16 on every projection, in FP32 and with
 * BF16 (pt_model_set_bf16(PT_BF16_ON): mixed precision where the CPU has
 * BF16 arithmetic, the LoRA base frozen in BF16), each in its own child
 * process (so each peak RSS is its own), then the PyTorch anchor (full
 * fine-tuning with AdamW, FP32 and --bf16 autocast) in the same run.
 *
 *   bench_sft_step [--threads N] [--steps N] [--lora-rank R] [--no-anchor] [--no-bf16]
 *                  [--shared DIR]
 *
 * Prints tokens/s, GFLOP/s (6 * all parameters * tokens / time for full
 * fine-tuning; the same count for LoRA, so the two are comparable as
 * "model FLOPs"), that as a fraction of the sgemm peak measured in the same
 * run, peak RSS, and the ratios against the anchor. */
#include "bench_util.h"

#include "posttrain/posttrain.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct result {
    double tokens_per_s, gflops, rss_mb;
} result;

static bool grad_ckpt; /* --gradient-checkpointing: every context of the runs */
static int lora_targets = PT_LORA_ALL; /* --lora-targets all|qv (PEFT's default: q, v) */
static char model_dir[4096]; /* --lora-only: the runs load this saved model; --model: a user's path */

/* In a child (no OpenMP in the parent before it forks): the random model of
 * the shape, saved to model_dir. */
static int save_model(int T)
{
    pt_model_config c;
    bench_model_config(&c, "smollm2-135m", T);
    pt_model *m;
    if (pt_model_create(&m, &c, 1) || pt_model_save_dir(m, model_dir, NULL))
        return 1;
    pt_model_free(m);
    return 0;
}

/* The run's model: created (random), or loaded from model_dir, where a
 * BF16 LoRA base is read straight into BF16 as a user loads it. */
static int make_model(pt_model **m, int lora_rank, bool bf16, int T)
{
    if (!model_dir[0]) {
        pt_model_config c;
        bench_model_config(&c, "smollm2-135m", T);
        return pt_model_create(m, &c, 1) || (bf16 && pt_model_set_bf16(*m, PT_BF16_ON));
    }
    pt_model_load_options lo;
    pt_model_load_options_init(&lo);
    lo.load_tokenizer = false;
    lo.bf16 = bf16 ? (lora_rank > 0 ? PT_BF16_FROZEN : PT_BF16_ON) : PT_BF16_OFF;
    if (pt_model_load_dir(m, model_dir, &lo) == PT_OK)
        return 0;
    /* a quantized GGUF base keeps its blocks: BF16 is set after the adapters
     * (BF16 tiles of the dequantized weights where the CPU has BF16 arithmetic) */
    lo.bf16 = PT_BF16_OFF;
    return pt_model_load_dir(m, model_dir, &lo) != PT_OK;
}

/* Runs in a child: writes one result to fd. */
static int run_mode(int fd, int lora_rank, bool bf16, int steps, int B, int T)
{
    pt_model_config c;
    bench_model_config(&c, "smollm2-135m", T);
    pt_model *m;
    pt_context *ctx;
    pt_optimizer *opt;
    if (make_model(&m, lora_rank, bf16, T))
        return 1;
    uint64_t n;
    n = pt_model_param_count(m);
    if (lora_rank > 0) {
        pt_lora_options lo;
        pt_lora_options_init(&lo);
        lo.rank = lora_rank;
        lo.alpha = 2.0 * lora_rank;
        lo.targets = lora_targets;
        if (pt_model_add_lora(m, &lo) || (bf16 && pt_model_set_bf16(m, PT_BF16_ON)))
            return 1;
    }
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 1e-4;
    oo.weight_decay = 0.01;
    oo.max_grad_norm = 0; /* as the anchor: no clipping */
    if (pt_optimizer_create(&opt, m, &oo) || pt_context_create(&ctx, m, B, T) ||
        (grad_ckpt && pt_context_set_gradient_checkpointing(ctx, true)))
        return 1;
    pt_batch b;
    if (bench_random_batch(&b, B, T, c.vocab_size, 12345))
        return 1;
    double t[64];
    if (steps > 64)
        steps = 64;
    for (int s = -1; s < steps; s++) { /* one warm-up step */
        pt_sft_stats st;
        pt_sft_stats_init(&st);
        double t0 = bench_now();
        if (pt_sft_step(&st, opt, ctx, &b, NULL, 1)) {
            fprintf(stderr, "sft step: %s\n", pt_last_error());
            return 1;
        }
        if (s >= 0)
            t[s] = bench_now() - t0;
    }
    double med = bench_median(t, steps);
    result r = { (double)B * T / med, 6.0 * (double)n * B * T / med / 1e9, bench_peak_rss_mb() };
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
        return 1;
    return 0;
}

static int child(result *out, int lora_rank, bool bf16, int steps, int B, int T)
{
    int p[2];
    if (pipe(p))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        _exit(run_mode(p[1], lora_rank, bf16, steps, B, T));
    }
    close(p[1]);
    ssize_t got = read(p[0], out, sizeof *out);
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    return got == (ssize_t)sizeof *out && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static double field(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    return p ? atof(p + strlen(key)) : NAN;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int threads = 2, steps = 3, lora_rank = 16, anchor = 1, B = 4, T = 256, bf16 = 1, lora_only = 0;
    const char *shared = NULL, *user_model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lora-rank") && i + 1 < argc)
            lora_rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shared") && i + 1 < argc)
            shared = argv[++i];
        else if (!strcmp(argv[i], "--no-anchor"))
            anchor = 0;
        else if (!strcmp(argv[i], "--no-bf16"))
            bf16 = 0;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc)
            T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gradient-checkpointing"))
            grad_ckpt = true;
        else if (!strcmp(argv[i], "--lora-only"))
            lora_only = 1;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            user_model = argv[++i], lora_only = 1;
        else if (!strcmp(argv[i], "--lora-targets") && i + 1 < argc && !strcmp(argv[i + 1], "qv"))
            lora_targets = PT_LORA_Q | PT_LORA_V, i++;
        else if (!strcmp(argv[i], "--lora-targets") && i + 1 < argc && !strcmp(argv[i + 1], "all"))
            lora_targets = PT_LORA_ALL, i++;
        else {
            fprintf(stderr, "usage: bench_sft_step [--threads N] [--steps N] [--lora-rank R] [--no-anchor] "
                            "[--no-bf16] [--batch B] [--seq T]\n"
                            "       [--gradient-checkpointing] [--lora-only] [--lora-targets all|qv] [--shared DIR]\n"
                            "       [--model DIR|FILE.gguf]  (LoRA runs only, on that model: e.g. a quantized GGUF)\n");
            return 2;
        }
    }
    if (threads < 1 || steps < 1 || lora_rank < 1 || B < 1 || T < 2 || pt_set_num_threads(threads)) {
        fprintf(stderr, "bench_sft_step: bad option value\n");
        return 2;
    }
    /* The children run first: a process that has started OpenMP threads must
     * not fork (libgomp's pool does not survive it). */
    result full = { 0 }, lora, fullb = { 0 }, lorab = { 0 };
    if (user_model)
        snprintf(model_dir, sizeof model_dir, "%s", user_model);
    else if (lora_only) { /* the LoRA runs load a saved model, as a user does */
        snprintf(model_dir, sizeof model_dir, "/tmp/bench_sft_model.XXXXXX");
        int status = 0;
        pid_t pid = mkdtemp(model_dir) ? fork() : -1;
        if (pid == 0)
            _exit(save_model(T));
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "bench_sft_step: saving the model failed\n");
            return 1;
        }
    }
    if ((!lora_only && child(&full, 0, false, steps, B, T)) ||
        child(&lora, lora_rank, false, steps, B, T) ||
        (bf16 && ((!lora_only && child(&fullb, 0, true, steps, B, T)) ||
                  child(&lorab, lora_rank, true, steps, B, T)))) {
        fprintf(stderr, "bench_sft_step: a run failed\n");
        return 1;
    }
    if (lora_only) {
        char rm[4200];
        snprintf(rm, sizeof rm, "rm -rf '%s'", model_dir);
        if (!user_model && system(rm) != 0)
            fprintf(stderr, "bench_sft_step: could not remove %s\n", model_dir);
        printf("cpu: %s\nbf16 products: %s\n", pt_cpu_info(), pt_bf16_info());
        if (user_model)
            printf("model %s (a quantized base stays in its blocks; \"BF16 base\" then means BF16 tiles)\n",
                   user_model);
        else
            printf("models loaded from a saved directory; the BF16 base read straight into BF16 "
                   "(pt_model_load_options.bf16 = PT_BF16_FROZEN)\n");
        printf("LoRA r%d (%s) SFT step, batch %d x seq %d%s: FP32 base %.1f tokens/s, peak RSS %.0f MB\n",
               lora_rank, lora_targets == PT_LORA_ALL ? "all projections" : "q, v", B, T, grad_ckpt ? ", gradient checkpointing" : "", lora.tokens_per_s,
               lora.rss_mb);
        if (bf16)
            printf("on a BF16 base: %.1f tokens/s (step time %.2fx FP32's), peak RSS %.0f MB "
                   "(%.2fx FP32's)\n", lorab.tokens_per_s, lora.tokens_per_s / lorab.tokens_per_s,
                   lorab.rss_mb, lorab.rss_mb / lora.rss_mb);
        return 0;
    }
    double peak = fmax(bench_gemm_peak(threads, 2048, 2048, 2048, 3), bench_gemm_peak(threads, 1024, 1536, 576, 5));
    printf("matrix products: %s\n", pt_blas_info());
    printf("cpu: %s\n", pt_cpu_info());
    printf("bf16 products: %s\n", pt_bf16_info());
    printf("sgemm peak (%d threads, measured after the runs): %.1f GFLOP/s\n", threads, peak);
    if (grad_ckpt)
        printf("gradient checkpointing: on\n");
    printf("full SFT step     (SmolLM2-135M shape, batch %d x seq %d): %.1f tokens/s, %.1f GFLOP/s (%.0f%% of peak), "
           "peak RSS %.0f MB\n", B, T, full.tokens_per_s, full.gflops, 100 * full.gflops / peak, full.rss_mb);
    printf("LoRA r%-2d SFT step (same shape, all projections):         %.1f tokens/s (%.2fx the full step), "
           "peak RSS %.0f MB\n", lora_rank, lora.tokens_per_s, lora.tokens_per_s / full.tokens_per_s, lora.rss_mb);
    if (bf16) {
        printf("full SFT step BF16 (mixed precision on %s): %.1f tokens/s (%.2fx FP32), peak RSS %.0f MB\n",
               pt_cpu_path(), fullb.tokens_per_s, fullb.tokens_per_s / full.tokens_per_s, fullb.rss_mb);
        printf("LoRA r%-2d SFT step on a BF16 base:       %.1f tokens/s (step time %.2fx FP32's), "
               "peak RSS %.0f MB (%.2fx FP32's)\n", lora_rank, lorab.tokens_per_s,
               lora.tokens_per_s / lorab.tokens_per_s, lorab.rss_mb, lorab.rss_mb / lora.rss_mb);
    }
    if (!anchor)
        return 0;
    char path[4096], cmd[8192], line[4096];
    if (!bench_find_anchor(path, sizeof path, shared))
        path[0] = '\0';
    if (!path[0] || system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
        printf("anchor: skipped (%s)\n", path[0] ? "/usr/bin/python3 has no torch: apt-get install python3-torch"
                                                  : "anchors/torch_llama.py not found; pass --shared DIR");
        return 0;
    }
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s train --config smollm2-135m --batch %d --seq %d --threads %d",
             path, B, T, threads);
    printf("anchor: %s\n", cmd);
    if (bench_run_capture(cmd, "mode=train", line, sizeof line)) {
        printf("anchor: no result line\n");
        return 1;
    }
    double atps = field(line, "tokens_per_s="), arss = field(line, "peak_rss_mb=");
    printf("ratio vs PyTorch (full): %.2fx tokens/s, RSS %.2fx the anchor's (%.0f MB)\n", full.tokens_per_s / atps,
           full.rss_mb / arss, arss);
    printf("ratio vs PyTorch (LoRA r%d): %.2fx tokens/s\n", lora_rank, lora.tokens_per_s / atps);
    if (!bf16)
        return 0;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s train --bf16 --config smollm2-135m --batch %d --seq %d "
             "--threads %d", path, B, T, threads);
    printf("anchor: %s\n", cmd);
    if (bench_run_capture(cmd, "mode=train", line, sizeof line)) {
        printf("anchor: no result line\n");
        return 1;
    }
    double btps = field(line, "tokens_per_s="), brss = field(line, "peak_rss_mb=");
    printf("anchor --bf16: %.1f tokens/s, peak RSS %.0f MB\n", btps, brss);
    printf("ratio vs PyTorch --bf16 (full, ours BF16): %.2fx tokens/s; ours FP32 vs it: %.2fx\n",
           fullb.tokens_per_s / btps, full.tokens_per_s / btps);
    return 0;
}
