#include "kernels/gemm.h"

#include "core/core.h"

#include <blis.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Kernel selection --------------------------------------------------
 * BLIS picks its micro-kernels from the CPU it detects on first use.  BLIS
 * releases before 1.0 (Debian 12 ships 0.9.0) know no AMD Zen 4 or later:
 * they fall back to the portable 'generic' kernels there, measured at a
 * fifth of the speed of the AVX-512 'skx' kernels they also ship
 * (bench_gemm: 41 against 195 GFLOP/s per core at 1024x576x1536).  Before
 * our first BLIS call we therefore ask for 'skx' on an AMD CPU with the
 * AVX-512 subsets skx needs, through the one switch BLIS offers
 * (BLIS_ARCH_TYPE, read once while BLIS initialises), and remove the
 * variable again straight away.  A BLIS_ARCH_TYPE the user set is never
 * touched, nor is a BLIS 1.0 or later, which detects these CPUs itself. */
static pthread_once_t blis_once = PTHREAD_ONCE_INIT;
static char blis_info[160];

static bool amd_avx512_without_blis_config(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const char *ver = bli_info_get_version_str();
    if (!ver || ver[0] != '0' || ver[1] != '.')
        return false;
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

static void blis_setup(void)
{
    const char *why = "detected by BLIS";
    if (getenv("BLIS_ARCH_TYPE") != NULL) {
        why = "from BLIS_ARCH_TYPE";
        bli_init();
    } else if (amd_avx512_without_blis_config()) {
        char id[16];
        snprintf(id, sizeof id, "%d", (int)BLIS_ARCH_SKX);
        why = "chosen by libposttrain for this AMD AVX-512 CPU";
        if (setenv("BLIS_ARCH_TYPE", id, 0) == 0) {
            bli_init();
            unsetenv("BLIS_ARCH_TYPE");
        } else {
            bli_init();
        }
    } else {
        bli_init();
    }
    arch_t arch = bli_arch_query_id();
    const char *name = bli_arch_string(arch);
    if (arch == BLIS_ARCH_GENERIC)
        why = "portable fallback, slow: BLIS knows no optimised kernels for this CPU";
    snprintf(blis_info, sizeof blis_info, "BLIS %s, %s kernels (%s)",
             bli_info_get_version_str(), name ? name : "?", why);
}

const char *pt_blas_info(void)
{
    pthread_once(&blis_once, blis_setup);
    return blis_info;
}

int pt__gemm_threads(size_t m, size_t n, size_t k)
{
    int nt = pt_get_num_threads();
    if (nt <= 1)
        return 1;
    /* Below ~0.25 MFLOP waking a second thread costs more than it gives.
     * Measured on this machine kind with bench_gemm: even m = 1..8 decode
     * shapes (576 x 1536) gain from 2 threads, so m alone does not decide. */
    double flops = 2.0 * (double)m * (double)n * (double)k;
    if (flops < 262144.0)
        return 1;
    return nt;
}

/* One BLIS call on nthreads threads. */
static void blis_call(int nthreads, bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                      float alpha, const float *a, size_t lda, const float *b, size_t ldb,
                      float beta, float *c, size_t ldc)
{
    pthread_once(&blis_once, blis_setup);
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_init(&rntm);
    bli_rntm_set_num_threads(nthreads < 1 ? 1 : nthreads, &rntm);
    float al = alpha, be = beta;
    /* Row-major storage: row stride ld, column stride 1. */
    bli_sgemm_ex(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                 trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                 (dim_t)m, (dim_t)n, (dim_t)k, &al,
                 (float *)a, (inc_t)lda, 1, (float *)b, (inc_t)ldb, 1,
                 &be, c, (inc_t)ldc, 1, NULL, &rntm);
}

/* Large products are cut into independent blocks of rows (or columns) of C,
 * each computed by a single-threaded BLIS call, and the blocks are shared
 * among the threads dynamically.  Compared with BLIS's own threading this
 * has one join instead of a spin barrier per packed panel, so a thread the
 * OS preempts (shared, oversubscribed machines) delays only its own block,
 * and the cut depends only on the shape, so every element of C is computed
 * by the same sequence of operations whatever the thread count. */
#define SPLIT_MIN 256   /* rows/columns per block at least (packing amortised) */
#define SPLIT_MAX 16    /* blocks at most */
#define SPLIT_MIN_HALF 96 /* a half at least this long (mid-sized products) */
#define SPLIT_ALIGN 96  /* multiple of the micro-kernels' MR and NR: 6x16 (haswell, zen), 32x12 (skx) */

size_t pt__sgemm_split(size_t m, size_t n, size_t k, bool *split_m, size_t *blk)
{
    *split_m = m >= n;
    size_t dim = *split_m ? m : n;
    size_t nblk = dim / SPLIT_MIN;
    if (nblk > SPLIT_MAX)
        nblk = SPLIT_MAX;
    if (nblk == 1 && dim >= 2 * SPLIT_MIN_HALF && 2.0 * (double)m * (double)n * (double)k >= 4e6)
        nblk = 2; /* mid-sized products: two halves rather than BLIS's own threads */
    if (nblk <= 1) {
        *blk = dim;
        return 1;
    }
    size_t b = (dim + nblk - 1) / nblk;
    b = (b + SPLIT_ALIGN - 1) / SPLIT_ALIGN * SPLIT_ALIGN;
    *blk = b;
    return (dim + b - 1) / b;
}

void pt__sgemm_1(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                size_t ldc)
{
    blis_call(1, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void pt__sgemm_nt(int nthreads, bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                 float alpha, const float *a, size_t lda, const float *b, size_t ldb,
                 float beta, float *c, size_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    bool split_m;
    size_t blk;
    size_t nblk = pt__sgemm_split(m, n, k, &split_m, &blk);
    size_t dim = split_m ? m : n;
    if (nblk <= 1) {
        blis_call(nthreads, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    int nt = nthreads < 1 ? 1 : nthreads;
    if ((size_t)nt > nblk)
        nt = (int)nblk;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (size_t i = 0; i < nblk; i++) {
        size_t s0 = i * blk, len = dim - s0 < blk ? dim - s0 : blk;
        if (split_m) {
            const float *ai = trans_a ? a + s0 : a + s0 * lda;
            blis_call(1, trans_a, trans_b, len, n, k, alpha, ai, lda, b, ldb, beta, c + s0 * ldc,
                      ldc);
        } else {
            const float *bi = trans_b ? b + s0 * ldb : b + s0;
            blis_call(1, trans_a, trans_b, m, len, k, alpha, a, lda, bi, ldb, beta, c + s0, ldc);
        }
    }
}

void pt__sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
              float alpha, const float *a, size_t lda, const float *b, size_t ldb,
              float beta, float *c, size_t ldc)
{
    pt__sgemm_nt(pt__gemm_threads(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void pt__sgemv(bool trans, size_t m, size_t n, float alpha, const float *a, size_t lda,
              const float *x, float beta, float *y)
{
    pthread_once(&blis_once, blis_setup);
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_init(&rntm);
    bli_rntm_set_num_threads(1, &rntm);
    float al = alpha, be = beta;
    bli_sgemv_ex(trans ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, BLIS_NO_CONJUGATE, (dim_t)m,
                 (dim_t)n, &al, (float *)a, (inc_t)lda, 1, (float *)x, 1, &be, y, 1, NULL,
                 &rntm);
}
