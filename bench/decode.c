/* bench_decode: batched generation (pt_generate) with the KV cache on a model
 * of the SmolLM2-135M shape with random weights, against the PyTorch anchor
 * run in the same run.
 *
 *   bench_decode [--batch B[,B...]] [--prompt P] [--new N] [--threads T]
 *                [--reps R] [--precision fp32,bf16] [--no-anchor] [--shared DIR]
 *                [--model DIR] [--twin DIR] [--kv-cache fp32|bf16]
 *
 * Defaults: batches 1 and 16, a 32-token prompt per row (a different one per
 * row), 128 new tokens, 2 threads, 3 repetitions (medians).  For each batch:
 *  - prefill tokens/s: B*P / time of pt_generate with max_new_tokens = 1
 *    (prompts plus one sampled token);
 *  - decode tokens/s (all rows): B*(N-1) / the time of the N-token call's
 *    decode loop, from its first token's sampling to its last's (N-1
 *    samplings and decode steps), read off the library's own polls of the
 *    abort callback (once a prefill layer, once a token: the last N polls
 *    are the loop's); not the call's time minus the prefill's, a small
 *    difference of two large noisy times at long prompts (at 16 x 256
 *    tokens the rounds' steps scattered from 4 to 22 ms that way);
 *  - GB/s of weight streaming: each decode step reads every weight once
 *    (4 bytes per parameter in FP32, 2 in BF16; a quantized GGUF --model:
 *    the bytes of its tensors as stored, blocks and scales, whatever the
 *    precision, since its weights stay in their blocks), as a fraction of
 *    the memory read bandwidth measured at the start of the run (a
 *    streaming sum over 512 MiB in a child process, bench_util.h);
 *  - then the anchor: /usr/bin/python3 SHARED/anchors/torch_llama.py decode
 *    --config smollm2-135m --batch B --steps N --prompt P, and ours/anchor.
 * --precision: fp32 (FP32 weights), bf16 (the same weights frozen in BF16,
 * pt_model_set_bf16(PT_BF16_FROZEN) on a clone: half the bytes streamed;
 * products in BF16 where the CPU has it, else widened), or both (the
 * default), each against the anchor in the same precision (torch_llama.py
 * --bf16: BF16 weights and cache), with the BF16/FP32 ratio of ours.  The
 * two precisions' rounds alternate and the ratio is the median of the
 * rounds' ratios: this machine's bandwidth moves by 20% from minute to
 * minute, which a run of FP32 rounds then BF16 ones turned into the ratio.
 * Peak RSS is the process's (with both precisions, both models).  The CPU and the
 * kernel path (PT_CPU forces a lower one) are printed first.
 * --model DIR: that model instead of the random SmolLM2-135M-shaped one
 * (bench/llamacpp_decode.sh passes the one it exports for llama.cpp).
 * --twin DIR: a quantized --model against the same weights in FP32 (DIR,
 * e.g. the F32 GGUF llama-quantize started from) instead of BF16, rounds
 * alternating, and the quantized/FP32 ratio of each batch as the median of
 * the rounds' ratios (issue 23's "decode 16 sequences >= 3x our FP32");
 * no anchor then.  --kv-cache bf16: the generators' caches in BF16
 * (pt_generator_set_kv_cache; the anchors keep theirs).
 * Sampling at temperature 1 without filters and no stop ids (the anchor
 * samples with torch.multinomial).  The machine is shared: the load average
 * is printed with the figures; compare ratios of one run. */
#include "bench_util.h"

#include "posttrain/posttrain.h"

#include <math.h>
#include <stdint.h>
#include <unistd.h>

static void loadavg(double l[3])
{
    l[0] = l[1] = l[2] = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3)
        l[0] = l[1] = l[2] = NAN;
    fclose(f);
}

/* --kv-cache: what every generator's cache holds */
static int g_kv_cache = PT_KV_CACHE_FP32;

typedef struct figures {
    double decode_tps, prefill_tps;
} figures;

/* One precision's generator and buffers for one batch size, and the times
 * of its rounds. */
typedef struct runner {
    pt_model *model;
    const char *label; /* printed instead of the precision (--twin) */
    pt_generator *g;
    int32_t *prompts, *lens, *tok, *cnt;
    float *lp;
    pt_generate_options o;
    int B, P, N;
    double step_bytes;
    double t_pre[16], t_dec[16];
    double *stamp; /* the last N polls' times (a ring) */
    int polls;
} runner;

/* The abort callback of a timed call: the time of each poll (the call
 * never stops). */
static int poll_stamp(void *payload)
{
    runner *r = payload;
    r->stamp[r->polls++ % r->N] = bench_now();
    return 0;
}

static void runner_close(runner *r)
{
    free(r->prompts);
    free(r->lens);
    free(r->tok);
    free(r->cnt);
    free(r->lp);
    free(r->stamp);
    pt_generator_free(r->g);
    memset(r, 0, sizeof *r);
}

/* A generator for B rows of P-token prompts (the same prompts for every
 * precision) and N new tokens; a warm-up call (page faults of the KV cache,
 * BLIS init). */
static int runner_open(runner *r, pt_model *model, double step_bytes, int B, int P, int N)
{
    memset(r, 0, sizeof *r);
    r->model = model;
    r->B = B;
    r->P = P;
    r->N = N;
    r->step_bytes = step_bytes;
    pt_model_config cfg;
    CHECK(pt_model_config_init(&cfg));
    CHECK(pt_model_get_config(&cfg, model));
    CHECK(pt_generator_create(&r->g, model, B, P + N));
    CHECK(pt_generator_set_kv_cache(r->g, g_kv_cache));
    r->prompts = malloc((size_t)B * P * sizeof *r->prompts);
    r->lens = malloc(B * sizeof *r->lens);
    r->tok = malloc((size_t)B * N * sizeof *r->tok);
    r->cnt = malloc(B * sizeof *r->cnt);
    r->lp = malloc((size_t)B * N * sizeof *r->lp);
    r->stamp = malloc((size_t)N * sizeof *r->stamp);
    if (!r->prompts || !r->lens || !r->tok || !r->cnt || !r->lp || !r->stamp)
        return 1;
    uint64_t s = 99;
    for (int i = 0; i < B * P; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        r->prompts[i] = (int32_t)((s >> 33) % (uint64_t)cfg.vocab_size);
    }
    for (int b = 0; b < B; b++)
        r->lens[b] = P;
    CHECK(pt_generate_options_init(&r->o));
    r->o.temperature = 1.0f;
    r->o.n_stop_ids = 0;
    r->o.seed = 1;
    r->o.max_new_tokens = 2;
    CHECK(pt_generate(r->g, r->prompts, r->lens, B, &r->o, r->tok, r->cnt, NULL, r->lp));
    return 0;
}

/* Round k: the prefill alone (max_new_tokens = 1), then the whole call. */
static int runner_round(runner *r, int k)
{
    r->o.max_new_tokens = 1;
    double t0 = bench_now();
    CHECK(pt_generate(r->g, r->prompts, r->lens, r->B, &r->o, r->tok, r->cnt, NULL, r->lp));
    r->t_pre[k] = bench_now() - t0;
    r->o.max_new_tokens = r->N;
    r->polls = 0;
    CHECK(pt_set_abort_callback(poll_stamp, r));
    int st = pt_generate(r->g, r->prompts, r->lens, r->B, &r->o, r->tok, r->cnt, NULL, r->lp);
    CHECK(pt_set_abort_callback(NULL, NULL));
    CHECK(st);
    if (r->polls < r->N) {
        fprintf(stderr, "%d polls of the abort callback, fewer than the %d tokens\n", r->polls, r->N);
        return 1;
    }
    /* from the loop's first poll to its last: N - 1 samplings and steps */
    r->t_dec[k] = r->stamp[(r->polls - 1) % r->N] - r->stamp[(r->polls - r->N) % r->N];
    for (int b = 0; b < r->B; b++)
        if (r->cnt[b] != r->N) {
            fprintf(stderr, "row %d stopped after %d tokens\n", b, r->cnt[b]);
            return 1;
        }
    return 0;
}

/* The medians of `reps` rounds, printed, then the anchor's run in the same
 * precision and ours / anchor. */
static void runner_report(figures *out, const runner *r, int reps, double bw, int threads,
                          const char *anchor_script)
{
    const bool bf16 = pt_model_get_bf16(r->model) != PT_BF16_OFF;
    const char *prec = r->label ? r->label : bf16 ? "bf16" : "fp32";
    const int B = r->B;
    double t_pre[16], t_dec[16];
    memcpy(t_pre, r->t_pre, sizeof t_pre);
    memcpy(t_dec, r->t_dec, sizeof t_dec);
    double pre = bench_median(t_pre, reps), dec = bench_median(t_dec, reps);
    double prefill_tps = (double)B * r->P / pre;
    double steps_s = (double)(r->N - 1) / dec;
    double decode_tps = (double)B * steps_s;
    double gbs = steps_s * r->step_bytes / 1e9;
    out->decode_tps = decode_tps;
    out->prefill_tps = prefill_tps;
    double la[3];
    loadavg(la);
    printf("ours %s batch %d: decode %.1f tokens/s (%.1f steps/s, %.1f ms/step), prefill %.1f "
           "tokens/s, weight streaming %.1f GB/s = %.0f%% of the %.1f GB/s measured, peak RSS "
           "%.0f MB (median of %d; load average %.2f %.2f %.2f)\n",
           prec, B, decode_tps, steps_s, 1e3 / steps_s, prefill_tps, gbs,
           bw > 0.0 ? 100.0 * gbs / bw : NAN, bw, bench_peak_rss_mb(), reps, la[0], la[1], la[2]);
    fflush(stdout);
    if (!anchor_script)
        return;
    char cmd[4096], line[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' decode --config smollm2-135m --batch %d "
             "--steps %d --prompt %d --threads %d%s 2>&1", anchor_script, B, r->N, r->P, threads,
             bf16 ? " --bf16" : "");
    printf("anchor: %s\n", cmd);
    fflush(stdout);
    if (bench_run_capture(cmd, "mode=decode", line, sizeof line) != 0) {
        printf("anchor: no result line (mode=decode ...) in its output\n");
        fflush(stdout);
        return;
    }
    /* "mode=decode[_bf16] tokens_per_s=X prefill_tokens_per_s=Y ..." */
    double a_tps = NAN, a_pre = NAN;
    const char *f = strstr(line, "tokens_per_s=");
    if (!f || sscanf(f, "tokens_per_s=%lf prefill_tokens_per_s=%lf", &a_tps, &a_pre) != 2)
        printf("anchor: unexpected result line: %s", line);
    loadavg(la);
    printf("anchor %s batch %d (PyTorch): decode %.1f tokens/s, prefill %.1f tokens/s; "
           "ratio ours/anchor: decode %.2fx, prefill %.2fx (load average %.2f)\n",
           prec, B, a_tps, a_pre, decode_tps / a_tps, prefill_tps / a_pre, la[0]);
    printf("result: precision=%s batch=%d decode_tokens_per_s=%.2f prefill_tokens_per_s=%.2f "
           "gb_per_s=%.2f anchor_decode=%.2f anchor_prefill=%.2f decode_ratio=%.3f "
           "prefill_ratio=%.3f\n", prec, B, decode_tps, prefill_tps, gbs, a_tps, a_pre,
           decode_tps / a_tps, prefill_tps / a_pre);
    fflush(stdout);
}

/* The median over rounds of a / b (rounds of a and b alternate). */
static double median_ratio(const double *a, const double *b, int reps)
{
    double q[16];
    for (int k = 0; k < reps; k++)
        q[k] = a[k] / b[k];
    return bench_median(q, reps);
}

/* One batch size: FP32 and BF16 rounds alternate (fp32, bf16, fp32, ...),
 * so a change in the machine's load or bandwidth hits both; then each
 * precision's medians and anchor, and the BF16/FP32 ratios as the median of
 * the rounds' ratios. */
static int run_batch(pt_model *m32, pt_model *m16, double bytes32, double bytes16, int B, int P,
                     int N, int reps, double bw, int threads, const char *anchor_script,
                     bool twin)
{
    runner r32, r16;
    memset(&r32, 0, sizeof r32);
    memset(&r16, 0, sizeof r16);
    int rc = 1;
    if ((m32 && runner_open(&r32, m32, bytes32, B, P, N)) ||
        (m16 && runner_open(&r16, m16, bytes16, B, P, N)))
        goto done;
    if (twin) { /* m32: the quantized --model, m16: its FP32 twin */
        r32.label = "quantized";
        r16.label = "fp32 twin";
    }
    for (int k = 0; k < reps; k++)
        if ((m32 && runner_round(&r32, k)) || (m16 && runner_round(&r16, k)))
            goto done;
    figures f;
    if (m32)
        runner_report(&f, &r32, reps, bw, threads, anchor_script);
    if (m16)
        runner_report(&f, &r16, reps, bw, threads, anchor_script);
    if (m32 && m16)
        printf("ours %s batch %d (kernels %s): decode %.2fx, prefill %.2fx (medians of %d "
               "alternating rounds' ratios)\n", twin ? "quantized/fp32-twin" : "bf16/fp32", B,
               pt_cpu_path(), twin ? median_ratio(r16.t_dec, r32.t_dec, reps)
                                   : median_ratio(r32.t_dec, r16.t_dec, reps),
               twin ? median_ratio(r16.t_pre, r32.t_pre, reps)
                    : median_ratio(r32.t_pre, r16.t_pre, reps), reps);
    if (twin) { /* each round's step times: the ratio is their median, not the medians' ratio */
        printf("rounds (ms a decode step, quantized / fp32 twin):");
        for (int k = 0; k < reps; k++)
            printf(" %.2f/%.2f", 1e3 * r32.t_dec[k] / (N - 1), 1e3 * r16.t_dec[k] / (N - 1));
        printf("\n");
    }
    rc = 0;
done:
    runner_close(&r32);
    runner_close(&r16);
    return rc;
}

int main(int argc, char **argv)
{
    int batches[8] = { 1, 16 }, nb = 2, P = 32, N = 128, threads = 2, reps = 3, anchor = 1;
    bool want_fp32 = true, want_bf16 = true;
    const char *shared = NULL, *model_dir = NULL, *twin_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-anchor")) {
            anchor = 0;
            continue;
        }
        if (!v) {
            fprintf(stderr, "usage: bench_decode [--batch B[,B...]] [--prompt P] [--new N] "
                            "[--threads T] [--reps R] [--precision fp32,bf16] [--no-anchor] "
                            "[--shared DIR] [--model DIR] [--twin DIR] [--kv-cache fp32|bf16]\n");
            return 2;
        }
        i++;
        if (!strcmp(a, "--batch")) {
            nb = 0;
            for (char *p = (char *)v; *p && nb < 8;) {
                batches[nb++] = (int)strtol(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (!strcmp(a, "--prompt")) {
            P = atoi(v);
        } else if (!strcmp(a, "--new")) {
            N = atoi(v);
        } else if (!strcmp(a, "--threads")) {
            threads = atoi(v);
        } else if (!strcmp(a, "--reps")) {
            reps = atoi(v);
        } else if (!strcmp(a, "--precision")) {
            want_fp32 = strstr(v, "fp32") != NULL;
            want_bf16 = strstr(v, "bf16") != NULL;
        } else if (!strcmp(a, "--model")) {
            model_dir = v;
        } else if (!strcmp(a, "--twin")) {
            twin_dir = v;
        } else if (!strcmp(a, "--kv-cache")) {
            if (pt_kv_cache_from_name(&g_kv_cache, v) != PT_OK) {
                fprintf(stderr, "bench_decode: %s\n", pt_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--shared")) {
            shared = v;
        } else {
            fprintf(stderr, "bench_decode: unknown option %s\n", a);
            return 2;
        }
    }
    if (P < 1 || N < 2 || threads < 1 || reps < 1 || !(want_fp32 || want_bf16))
        return 2;
    if (reps > 16)
        reps = 16;
    /* the bandwidth first, in a child process: its 512 MiB buffer stays out
     * of this process's peak RSS */
    double bw_best = 0.0, bw = bench_stream_gbs_child(threads, 5, &bw_best);
    CHECK(pt_set_num_threads(threads));
    pt_model_config cfg;
    CHECK(pt_model_config_init(&cfg));
    cfg.hidden_size = 576;
    cfg.num_hidden_layers = 30;
    cfg.num_attention_heads = 9;
    cfg.num_key_value_heads = 3;
    cfg.head_dim = 64;
    cfg.intermediate_size = 1536;
    cfg.vocab_size = 49152;
    cfg.tie_word_embeddings = true;
    cfg.rms_norm_eps = 1e-5;
    cfg.max_position_embeddings = 2048;
    pt_model *model = NULL;
    if (model_dir)
        CHECK(pt_model_load_dir(&model, model_dir, NULL));
    else
        CHECK(pt_model_create(&model, &cfg, 1234));
    uint64_t nparams = 0;
    nparams = pt_model_param_count(model);
    /* bytes a decode step streams: a quantized file's tensor bytes (its
     * embedding table is the tied LM head in the SmolLM2 shape; an untied
     * one would be counted though a step reads one row of it) */
    double qbytes = 0.0;
    if (model_dir) {
        pt_model_dir_info info;
        CHECK(pt_model_dir_info_init(&info));
        if (pt_model_dir_inspect(&info, model_dir) == PT_OK && info.quantised)
            qbytes = (double)info.weight_bytes;
    }
    double la[3];
    loadavg(la);
    printf("bench_decode: SmolLM2-135M shape, %.2fM parameters (%.0f MB FP32), KV cache %s, "
           "prompt %d, %d new tokens, %d threads, load average %.2f %.2f %.2f\n",
           (double)nparams / 1e6, (double)nparams * 4 / 1e6, pt_kv_cache_name(g_kv_cache), P, N,
           threads, la[0], la[1], la[2]);
    if (qbytes > 0.0)
        printf("quantized weights: %.1f MB streamed a decode step (%.2f bits a parameter)\n",
               qbytes / 1e6, 8.0 * qbytes / (double)nparams);
    printf("matrix products: %s\n", pt_blas_info());
    printf("cpu: %s\n", pt_cpu_info());
    printf("bf16 products: %s\n", pt_bf16_info());
    fflush(stdout);

    char script[4096];
    const char *anchor_script = NULL;
    if (anchor) {
        anchor_script = bench_find_anchor(script, sizeof script, shared);
        if (!anchor_script)
            printf("anchor: skipped (anchors/torch_llama.py not found; use --shared DIR)\n");
    }
    /* The BF16 model: the same weights (loaded again from --model, which
     * may be quantized and so not cloned; else a clone), frozen in BF16. */
    pt_model *m16 = NULL;
    if (twin_dir) { /* in the second slot, instead of the BF16 model */
        CHECK(pt_model_load_dir(&m16, twin_dir, NULL));
        want_fp32 = true;
    } else if (want_bf16) {
        if (model_dir)
            CHECK(pt_model_load_dir(&m16, model_dir, NULL));
        else
            CHECK(pt_model_clone(&m16, model));
        CHECK(pt_model_set_bf16(m16, PT_BF16_FROZEN));
    }
    printf("memory read bandwidth: %.1f GB/s (median of 5 streaming sums over 512 MiB, %d "
           "threads; best %.1f)\n", bw, threads, bw_best);
    fflush(stdout);
    for (int i = 0; i < nb; i++)
        if (run_batch(want_fp32 ? model : NULL, m16, qbytes > 0.0 ? qbytes : 4.0 * (double)nparams,
                      twin_dir ? 4.0 * (double)nparams : qbytes > 0.0 ? qbytes : 2.0 * (double)nparams,
                      batches[i], P, N, reps, bw, threads, twin_dir ? NULL : anchor_script,
                      twin_dir != NULL))
            return 1;
    pt_model_free(m16);
    pt_model_free(model);
    return 0;
}
