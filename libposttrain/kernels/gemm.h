/* Matrix products through BLIS, with the thread count passed per call. */
#ifndef PT_KERNELS_GEMM_H
#define PT_KERNELS_GEMM_H

#include <stdbool.h>
#include <stddef.h>

/* C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major.
 * op(A) is m x k (A is k x m when trans_a), op(B) is k x n (B is n x k when
 * trans_b).  lda/ldb/ldc are row strides in elements.  Uses
 * pt_gemm_threads(m, n, k) threads; never call it from inside an OpenMP
 * parallel region of our own (BLIS would nest). */
void pt_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
              float alpha, const float *a, size_t lda, const float *b, size_t ldb,
              float beta, float *c, size_t ldc);

/* Same with an explicit thread count (1 .. pt_get_num_threads()). */
void pt_sgemm_nt(int nthreads, bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                 float alpha, const float *a, size_t lda, const float *b, size_t ldb,
                 float beta, float *c, size_t ldc);

/* Thread policy for a product of this size: the library's thread count,
 * except for products too small to amortise waking a second thread
 * (bench/gemm.c measures the crossover). */
int pt_gemm_threads(size_t m, size_t n, size_t k);

#endif
