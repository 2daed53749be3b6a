/* bench_gemv: the small-m decode products (pt__sgemv_rows, pt__bgemv_rows) at
 * SmolLM2-135M's shapes, against the memory read bandwidth measured in the
 * same run and against the code they replaced (BLIS sgemv per row per
 * 32-row block of W, copied below), on every kernel path this CPU runs.
 *
 * Weights are taken in turn from a 1 GiB pool of distinct copies (more than
 * the last-level cache), so every call streams its W from memory as decoding
 * a 135M model does; x and y stay in cache.  Figures are medians of 7
 * rounds; each round runs every kernel on every path in turn (128 MiB of
 * weights each), so the kernels compared see the same machine.
 *
 *   bench_gemv [THREADS]        (default 2) */
#include "bench_util.h"

#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "posttrain/posttrain.h"

#include <omp.h>

#define POOL_BYTES ((size_t)1 << 30)
#define ROUND_BYTES ((size_t)128 << 20) /* weights one round of one kernel streams */
#define REPS 7
#define LAYERS 30

enum { V_OLD, V_F32, V_BF16, NVAR };
static const char *const var_names[NVAR] = { "old BLIS/row", "new FP32", "new BF16" };

typedef struct shape {
    size_t n, k;
    const char *what;
    int per_step; /* how many times one decode step runs it */
} shape;

/* SmolLM2-135M (576 hidden, 1536 ffn, 9/3 heads of 64, 49152 vocab): fused
 * q|k|v, o, one of gate/up, fused gate|up, down, and the LM head. */
static const shape shapes[] = {
    { 960, 576, "qkv", LAYERS },      { 576, 576, "o", LAYERS },     { 1536, 576, "gate or up", 0 },
    { 3072, 576, "gate|up", LAYERS }, { 576, 1536, "down", LAYERS }, { 49152, 576, "lm head", 1 },
};
#define NSHAPE (sizeof shapes / sizeof shapes[0])
static const size_t ms[] = { 1, 4, 16 };
#define NM (sizeof ms / sizeof ms[0])

/* ---- the code pt__sgemv_rows ran before kernels/gemv.c, for comparison ---- */

#define OLD_BLOCK 32

static void old_sgemv_rows(size_t m, size_t n, size_t k, float alpha, const float *x, size_t ldx,
                           const float *w, size_t ldw, float beta, float *y, size_t ldy)
{
    size_t nblk = (n + OLD_BLOCK - 1) / OLD_BLOCK;
    int nt = pt__gemm_threads(m, n, k);
    if ((size_t)nt > nblk)
        nt = (int)nblk;
    size_t chunk = nblk / ((size_t)nt * 8);
    int grab = chunk < 1 ? 1 : (int)chunk;
#pragma omp parallel for num_threads(nt) schedule(dynamic, grab) if (nt > 1)
    for (size_t b = 0; b < nblk; b++) {
        size_t j0 = b * OLD_BLOCK, len = n - j0 < OLD_BLOCK ? n - j0 : OLD_BLOCK;
        for (size_t i = 0; i < m; i++)
            pt__sgemv(false, len, k, alpha, w + j0 * ldw, ldw, x + i * ldx, beta,
                     y + i * ldy + j0);
    }
}

/* ---- timing the products side by side ---- */

/* One kernel on one path for the shape being timed; calls take their
 * weights from the pool in turn, continuing where the last round stopped. */
typedef struct entry {
    int v, level;      /* variant; path (ignored for V_OLD) */
    size_t bytes;      /* of one W */
    size_t copies, at; /* W copies in the pool; the next one */
    double t[REPS];    /* seconds per call, each round */
} entry;

static void entry_round(entry *e, int rep, size_t m, size_t n, size_t k,
                        const unsigned char *pool, const float *x, float *y)
{
    if (e->v != V_OLD)
        pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)e->level));
    size_t calls = ROUND_BYTES / e->bytes;
    if (calls < 4)
        calls = 4;
    double t0 = bench_now();
    for (size_t c = 0; c < calls; c++, e->at = (e->at + 1) % e->copies) {
        const void *w = pool + e->at * e->bytes;
        if (e->v == V_OLD)
            old_sgemv_rows(m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
        else if (e->v == V_F32)
            pt__sgemv_rows(m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
        else
            pt__bgemv_rows(m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
    }
    if (rep >= 0)
        e->t[rep] = (bench_now() - t0) / (double)calls;
}

/* Median seconds per call of every entry: REPS rounds after a warm-up
 * round, each round running every entry once, so all see the same machine
 * (it is shared: other load comes and goes). */
static void time_entries(entry *e, int ne, size_t m, size_t n, size_t k,
                         const unsigned char *pool, const float *x, float *y, double *med,
                         double *best)
{
    for (int i = 0; i < ne; i++) {
        e[i].bytes = n * k * (e[i].v == V_BF16 ? sizeof(pt_bf16) : sizeof(float));
        e[i].copies = POOL_BYTES / e[i].bytes;
        e[i].at = 0;
    }
    for (int r = -1; r < REPS; r++)
        for (int i = 0; i < ne; i++)
            entry_round(&e[i], r, m, n, k, pool, x, y);
    pt_set_cpu_path(NULL);
    for (int i = 0; i < ne; i++) {
        best[i] = e[i].t[0];
        for (int r = 1; r < REPS; r++)
            best[i] = e[i].t[r] < best[i] ? e[i].t[r] : best[i];
        med[i] = bench_median(e[i].t, REPS);
    }
}

/* ---- tables ---- */

static void print_row(const char *path, int v, const shape *s, size_t m, double sec, double best,
                      double bw, double old_sec)
{
    double bytes = (double)(s->n * s->k) * (v == V_BF16 ? 2.0 : 4.0);
    double gbs = bytes / sec / 1e9;
    double gflops = 2.0 * (double)m * (double)(s->n * s->k) / sec / 1e9;
    printf("%-10s %-10s %5zu x %4zu %3zu  %-12s %9.1f %9.1f %7.1f %5.0f%% %8.1f %7.2fx\n", path,
           s->what, s->n, s->k, m, var_names[v], sec * 1e6, best * 1e6, gbs, 100.0 * gbs / bw,
           gflops, old_sec / sec);
}

/* The decode step: every layer's products and the LM head, from the
 * per-shape times t[shape][m index]. */
static double step_seconds(double t[NSHAPE][NM], size_t mi)
{
    double s = 0.0;
    for (size_t i = 0; i < NSHAPE; i++)
        s += shapes[i].per_step * t[i][mi];
    return s;
}

static double step_weight_bytes(int v)
{
    double p = 0.0;
    for (size_t i = 0; i < NSHAPE; i++)
        p += shapes[i].per_step * (double)(shapes[i].n * shapes[i].k);
    return p * (v == V_BF16 ? 2.0 : 4.0);
}

static void print_model(const char *path, int v, double t[NSHAPE][NM], double bw)
{
    for (size_t mi = 0; mi < NM; mi++) {
        if (ms[mi] == 4)
            continue;
        double sec = step_seconds(t, mi), bytes = step_weight_bytes(v);
        printf("%-10s %-12s m=%-3zu %8.2f ms %8.1f steps/s %8.1f tokens/s %7.1f GB/s %5.0f%%  "
               "(bandwidth limit %.1f steps/s)\n",
               path, var_names[v], ms[mi], sec * 1e3, 1.0 / sec, (double)ms[mi] / sec,
               bytes / sec / 1e9, 100.0 * bytes / sec / 1e9 / bw, bw * 1e9 / bytes);
    }
}

/* Random BF16 values N(0, 0.05) in every 16-bit half: read as BF16 they are
 * weights, read as FP32 the high half makes a normal float of the same size. */
static void fill_pool(unsigned char *pool, int nt)
{
    size_t n = POOL_BYTES / sizeof(pt_bf16);
    pt_bf16 *h = (pt_bf16 *)pool;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
        double u = (double)((z >> 11) & 0xfffff) / 1048576.0 - 0.5; /* uniform, sd 0.29 */
        h[i] = pt__f32_to_bf16((float)(u * 0.17));
    }
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    if (nt < 1 || pt_set_num_threads(nt) != PT_OK) {
        fprintf(stderr, "usage: bench_gemv [THREADS]\n");
        return 2;
    }
    printf("cpu: %s\n", pt_cpu_info());
    printf("matrix products (old code): %s\n", pt_blas_info());
    printf("threads %d, load average %.2f\n", nt, bench_loadavg());
    double bw_best = 0.0, bw = bench_stream_gbs(nt, REPS, &bw_best);
    printf("memory read bandwidth: %.1f GB/s median, %.1f best of %d (streaming sum over 512 MiB, "
           "%d threads)\n", bw, bw_best, REPS, nt);

    unsigned char *pool = aligned_alloc(64, POOL_BYTES);
    size_t mmax = ms[NM - 1], kmax = 1536, nmax = 49152;
    float *x = malloc(mmax * kmax * sizeof *x), *y = malloc(mmax * nmax * sizeof *y);
    if (!pool || !x || !y) {
        fprintf(stderr, "bench_gemv: out of memory\n");
        return 1;
    }
    fill_pool(pool, nt);
    for (size_t i = 0; i < mmax * kmax; i++)
        x[i] = (float)((int)(i % 13) - 6) * 0.1f;

    /* t[statistic][path][variant][shape][m]; the old code is BLIS's (no path
     * of ours). */
    static double t[2][PT_CPU_LEVELS][NVAR][NSHAPE][NM]; /* [median, best] */
    pt_cpu_level det = pt__cpu_detected();
    printf("\n(us/call: median of %d rounds, and the best round; GB/s, of bw, GFLOP/s and vs old "
           "from the median)\n", REPS);
    printf("%-10s %-10s %12s %3s  %-12s %9s %9s %7s %6s %8s %8s\n", "path", "product", "n x k", "m",
           "kernel", "us/call", "best", "GB/s", "of bw", "GFLOP/s", "vs old");
    entry e[1 + 2 * PT_CPU_LEVELS];
    int ne = 0;
    e[ne++] = (entry){ .v = V_OLD };
    for (int l = 0; l <= (int)det; l++)
        for (int v = V_F32; v < NVAR; v++)
            e[ne++] = (entry){ .v = v, .level = l };
    for (size_t si = 0; si < NSHAPE; si++)
        for (size_t mi = 0; mi < NM; mi++) {
            double med[1 + 2 * PT_CPU_LEVELS], best[1 + 2 * PT_CPU_LEVELS];
            time_entries(e, ne, ms[mi], shapes[si].n, shapes[si].k, pool, x, y, med, best);
            for (int i = 0; i < ne; i++) {
                const char *path = e[i].v == V_OLD ? "BLIS" : pt__cpu_level_str((pt_cpu_level)e[i].level);
                print_row(path, e[i].v, &shapes[si], ms[mi], med[i], best[i], bw, med[0]);
                for (int l = 0; l < PT_CPU_LEVELS; l++)
                    if (e[i].v == V_OLD || l == e[i].level) {
                        t[0][l][e[i].v][si][mi] = med[i];
                        t[1][l][e[i].v][si][mi] = best[i];
                    }
            }
            fflush(stdout);
        }
    CHECK(pt_set_cpu_path(NULL));
    for (int l = (int)det + 1; l < PT_CPU_LEVELS; l++)
        printf("skipped: %s (this CPU runs up to %s)\n", pt__cpu_level_str((pt_cpu_level)l),
               pt__cpu_level_str(det));

    for (int st = 0; st < 2; st++) {
        printf("\nwhole model, one decode step (30 layers: qkv, o, gate|up, down; and the LM head), "
               "from the %s times and bandwidth:\n", st ? "best" : "median");
        print_model("BLIS", V_OLD, t[st][0][V_OLD], st ? bw_best : bw);
        for (int l = 0; l <= (int)det; l++)
            for (int v = V_F32; v < NVAR; v++)
                print_model(pt__cpu_level_str((pt_cpu_level)l), v, t[st][l][v], st ? bw_best : bw);
    }
    printf("load average %.2f, peak_rss_mb=%.1f\n", bench_loadavg(), bench_peak_rss_mb());
    free(pool);
    free(x);
    free(y);
    return 0;
}
