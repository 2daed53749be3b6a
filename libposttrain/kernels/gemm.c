#include "kernels/gemm.h"

#include "core/core.h"

#include <blis.h>

int pt_gemm_threads(size_t m, size_t n, size_t k)
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

void pt_sgemm_nt(int nthreads, bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
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

void pt_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
              float alpha, const float *a, size_t lda, const float *b, size_t ldb,
              float beta, float *c, size_t ldc)
{
    pt_sgemm_nt(pt_gemm_threads(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
