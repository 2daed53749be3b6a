/* bench_qgemv: the products on ggml-quantized weights (pt__qgemv_rows,
 * kernels/qgemv.h) at SmolLM2-135M's shapes, m = 1 and 16, for every
 * supported type on every kernel path this CPU runs, with the FP32 kernel
 * (pt__sgemv_rows) at the same shapes for comparison.
 *
 * Weights are taken in turn from a 512 MiB pool of distinct copies (more
 * than the last-level cache), so every call streams its W from memory as
 * decoding does; x and y stay in cache.  Figures are medians of REPS
 * rounds (each round runs every kernel of a shape once, so they see the
 * same machine); GB/s counts the weight bytes streamed, rows/s the W rows
 * (each against all m rows of x).  The K-quants need k a multiple of 256:
 * their shapes with k = 576 are skipped (and said so); llama.cpp stores
 * such tensors of a Q4_K_M file as Q5_0 and Q8_0.
 *
 *   bench_qgemv [THREADS [REPS]]     (defaults 2 and 7; REPS 1 for a quick
 *                                    functional run) */
#include "bench_util.h"

#include "io/gguf.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"
#include "posttrain/posttrain.h"

#define POOL_BYTES ((size_t)512 << 20)
#define ROUND_BYTES ((size_t)64 << 20) /* weights one round of one kernel streams */
#define MAXREPS 31

typedef struct qtype {
    int type; /* PT_GGML_*, or -1 for FP32 */
    const char *name;
    size_t blk, bytes;
} qtype;

static const qtype types[] = {
    { PT_GGML_Q8_0, "Q8_0", PT_QK, sizeof(pt_block_q8_0) },
    { PT_GGML_Q4_0, "Q4_0", PT_QK, sizeof(pt_block_q4_0) },
    { PT_GGML_Q4_K, "Q4_K", PT_QK_K, sizeof(pt_block_q4_K) },
    { PT_GGML_Q6_K, "Q6_K", PT_QK_K, sizeof(pt_block_q6_K) },
    { PT_GGML_Q5_K, "Q5_K", PT_QK_K, sizeof(pt_block_q5_K) },
    { PT_GGML_Q5_0, "Q5_0", PT_QK, sizeof(pt_block_q5_0) },
    { PT_GGML_Q4_1, "Q4_1", PT_QK, sizeof(pt_block_q4_1) },
    { PT_GGML_Q5_1, "Q5_1", PT_QK, sizeof(pt_block_q5_1) },
    { -1, "FP32", 1, sizeof(float) },
};
#define NTYPES (sizeof types / sizeof types[0])

static const size_t shapes[][2] = { { 576, 576 }, { 1536, 576 }, { 576, 1536 }, { 49152, 576 } };
#define NSHAPES (sizeof shapes / sizeof shapes[0])
static const size_t ms[] = { 1, 16 };

/* Random bytes with sane fp16 scales at every block's scale fields (as
 * ggml stores them: d first, Q6_K's d last). */
static void fill_pool(unsigned char *pool, size_t bytes, const qtype *t)
{
    uint64_t z = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < bytes; i += 8) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        memcpy(pool + i, &z, bytes - i < 8 ? bytes - i : 8);
    }
    if (t->type < 0) {
        float *f = (float *)pool;
        for (size_t i = 0; i < bytes / sizeof(float); i++)
            f[i] = (float)((int)(pool[4 * i] % 17) - 8) * 0.01f;
        return;
    }
    const uint16_t d = 0x1800; /* 2^-9 */
    for (size_t b = 0; b + t->bytes <= bytes; b += t->bytes) {
        if (t->type == PT_GGML_Q6_K)
            memcpy(pool + b + 208, &d, 2);
        else
            memcpy(pool + b, &d, 2);
        if (t->type != PT_GGML_Q8_0 && t->type != PT_GGML_Q4_0 && t->type != PT_GGML_Q5_0 &&
            t->type != PT_GGML_Q6_K)
            memcpy(pool + b + 2, &d, 2);
    }
}

/* Seconds per call, median of reps rounds after a warm-up, for type t on
 * the active path. */
static double time_calls(const qtype *t, size_t m, size_t n, size_t k, const unsigned char *pool,
                         const float *x, float *y, int reps)
{
    const size_t wbytes = n * (k / t->blk) * t->bytes, copies = POOL_BYTES / wbytes;
    size_t calls = ROUND_BYTES / wbytes, at = 0;
    if (calls < 4)
        calls = 4;
    double ts[MAXREPS + 1];
    for (int r = 0; r <= reps; r++) {
        double t0 = bench_now();
        for (size_t c = 0; c < calls; c++, at = (at + 1) % copies) {
            const unsigned char *w = pool + at * wbytes;
            if (t->type < 0)
                pt__sgemv_rows(m, n, k, 1.0f, x, k, (const float *)(const void *)w, k, 0.0f, y, n);
            else if (pt__qgemv_rows(t->type, m, n, k, 1.0f, x, k, w, 0.0f, y, n) != PT_OK) {
                fprintf(stderr, "pt__qgemv_rows: %s\n", pt_last_error());
                exit(1);
            }
        }
        ts[r] = (bench_now() - t0) / (double)calls;
    }
    return bench_median(ts + 1, reps);
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 7;
    if (nt < 1 || reps < 1 || reps > MAXREPS || pt_set_num_threads(nt) != PT_OK) {
        fprintf(stderr, "usage: bench_qgemv [THREADS [REPS (1..%d)]]\n", MAXREPS);
        return 2;
    }
    printf("cpu: %s (AVX512_VNNI: %s)\n", pt_cpu_info(), pt__cpu_has_vnni() ? "yes" : "no");
    printf("threads %d, load average %.2f, median of %d rounds\n", nt, bench_loadavg(), reps);
    unsigned char *pool = aligned_alloc(64, POOL_BYTES);
    float *x = malloc(16 * 1536 * sizeof *x), *y = malloc(16 * 49152 * sizeof *y);
    if (!pool || !x || !y) {
        fprintf(stderr, "bench_qgemv: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < 16 * 1536; i++)
        x[i] = (float)((int)(i % 13) - 6) * 0.1f;
    printf("%-10s %-5s %-11s %12s %3s %9s %8s %10s %12s\n", "path", "type", "kernel", "n x k", "m",
           "us/call", "GB/s", "W rows/s", "products/s");
    const pt_cpu_level det = pt__cpu_detected();
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const qtype *t = &types[ti];
        fill_pool(pool, POOL_BYTES, t);
        /* avx512bf16 runs the avx512 kernels here */
        for (int l = 0; l <= (int)det && l <= (int)PT_CPU_AVX512; l++) {
            CHECK(pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)l)));
            const char *kern = t->type < 0 ? "gemv" : pt__qgemv_kernel(t->type);
            for (size_t si = 0; si < NSHAPES; si++) {
                const size_t n = shapes[si][0], k = shapes[si][1];
                if (k % t->blk) {
                    if (l == 0)
                        printf("%-10s %-5s skipped: %5zu x %4zu (k not a multiple of %zu)\n", "-",
                               t->name, n, k, t->blk);
                    continue;
                }
                for (size_t mi = 0; mi < 2; mi++) {
                    const double sec = time_calls(t, ms[mi], n, k, pool, x, y, reps);
                    const double wb = (double)(n * (k / t->blk) * t->bytes);
                    printf("%-10s %-5s %-11s %5zu x %4zu %3zu %9.1f %8.1f %10.3g %12.3g\n",
                           pt__cpu_level_str((pt_cpu_level)l), t->name, kern, n, k, ms[mi],
                           sec * 1e6, wb / sec / 1e9, (double)n / sec, (double)(n * ms[mi]) / sec);
                    fflush(stdout);
                }
            }
        }
    }
    CHECK(pt_set_cpu_path(NULL));
    if (det >= PT_CPU_AVX512BF16)
        printf("skipped: avx512bf16 (runs the avx512 kernels for these products)\n");
    for (int l = (int)det + 1; l < PT_CPU_LEVELS; l++)
        printf("skipped: %s (this CPU runs up to %s)\n", pt__cpu_level_str((pt_cpu_level)l),
               pt__cpu_level_str(det));
    printf("load average %.2f, peak_rss_mb=%.1f\n", bench_loadavg(), bench_peak_rss_mb());
    free(pool);
    free(x);
    free(y);
    return 0;
}
