/* Matrix products through BLIS, with the thread count passed per call. */
#ifndef PT_KERNELS_GEMM_H
#define PT_KERNELS_GEMM_H

#include <stdbool.h>
#include <stddef.h>

/* C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major.
 * op(A) is m x k (A is k x m when trans_a), op(B) is k x n (B is n x k when
 * trans_b).  lda/ldb/ldc are row strides in elements.  Uses
 * pt__gemm_threads(m, n, k) threads; never call it from inside an OpenMP
 * parallel region of our own (BLIS would nest). */
void pt__sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
              float alpha, const float *a, size_t lda, const float *b, size_t ldb,
              float beta, float *c, size_t ldc);

/* Same with an explicit thread count (1 .. pt_get_num_threads()). */
void pt__sgemm_nt(int nthreads, bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                 float alpha, const float *a, size_t lda, const float *b, size_t ldb,
                 float beta, float *c, size_t ldc);

/* The cut pt__sgemm_nt makes of an m x n x k product (it depends on the
 * shape only): the number of blocks of *blk rows (*split_m) or columns of
 * C, each one single-threaded BLIS call; 1 means one (threaded) BLIS call
 * for the whole product. */
size_t pt__sgemm_split(size_t m, size_t n, size_t k, bool *split_m, size_t *blk);

/* One single-threaded BLIS call for the whole product, uncut (a block of
 * pt__sgemm_nt's cut). */
void pt__sgemm_1(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                size_t ldc);

/* Thread policy for a product of this size: the library's thread count,
 * except for products too small to amortise waking a second thread
 * (bench/gemm.c measures the crossover). */
int pt__gemm_threads(size_t m, size_t n, size_t k);

/* y = alpha * op(A) x + beta * y on one thread (BLIS sgemv), A [m x n]
 * row-major with row stride lda: op(A) = A (y has m entries) or A^T when
 * trans (y has n entries).  beta 0 overwrites y. */
void pt__sgemv(bool trans, size_t m, size_t n, float alpha, const float *a, size_t lda,
              const float *x, float beta, float *y);

/* y_i = alpha * W x_i + beta * y_i for each of the m rows x_i of x (row
 * stride ldx) with W [n x k] row-major (row stride ldw): the product
 * x W^T of pt__sgemm(false, true, ...) for decoding (m = 1 to a few dozen
 * rows).  Our own kernels (kernels/gemv.c; AVX2 + FMA or AVX-512, chosen at
 * run time by pt__cpu_active()) register-block a few rows of W against a few
 * rows of x, so every element of W is read from memory once per call for
 * all m rows.  W is cut into fixed blocks of rows shared dynamically among
 * pt__gemm_threads(m, n, k) threads.  Every element is computed by the same
 * operations whatever m, the other rows and the thread count (the order is
 * fixed by the path: kernels/gemv.h), so row i's result does not depend on
 * the other rows.  beta is 0 (overwrite; y is not read) or 1 (accumulate). */
void pt__sgemv_rows(size_t m, size_t n, size_t k, float alpha, const float *x, size_t ldx,
                   const float *w, size_t ldw, float beta, float *y, size_t ldy);

#endif
