/* BF16 (bfloat16: the top 16 bits of an IEEE binary32) storage and the
 * products that read it.
 *
 * Conversions (the scalar ones are core/half.h's): FP32 -> BF16 rounds to
 * nearest, ties to even (NaN stays a quiet NaN, as vcvtneps2bf16 and PyTorch
 * do); BF16 -> FP32 is exact (a shift). */
#ifndef PT_KERNELS_BF16_H
#define PT_KERNELS_BF16_H

#include "core/half.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t pt_bf16;

/* dst[i] = bf16(src[i]) / float(src[i]) for n values (vectorised; threads
 * for large n). */
void pt__f32_to_bf16_n(pt_bf16 *dst, const float *src, size_t n);
void pt__bf16_to_f32_n(float *dst, const pt_bf16 *src, size_t n);

/* C[m x n] = alpha * op(A) op(B) + beta * C, row-major as pt__sgemm (A is
 * m x k, or k x m when trans_a; B is k x n, or n x k when trans_b), where
 * each of A and B is stored as FP32 or as BF16 (a_bf16, b_bf16).
 * - On a path with BF16 arithmetic (pt__cpu_bf16_compute()): both operands
 *   are rounded to BF16 (where FP32) and multiplied with FP32 accumulation
 *   (vdpbf16ps), as PyTorch's autocast does.  Each element sums k in blocks
 *   of at most 768 (fixed by k), pair by pair as vdpbf16ps does (k = 2p+1,
 *   then 2p; denormals read and flushed as zero), and C = alpha S + beta C
 *   after the first block, C += alpha S after each other (kernels/
 *   gemm_bf16.h; the micro-kernel is vdpbf16ps itself or FP32 FMAs giving
 *   the same bits, whichever is faster on the CPU).  Where the build has
 *   oneDNN and its matmul is not a reference implementation (AMX on
 *   Sapphire Rapids), the product is oneDNN's instead (same rounding of the
 *   operands, FP32 accumulation in oneDNN's order; pt__bf16_gemm_backend()
 *   below).
 * - Otherwise BF16 operands are widened to FP32 (exactly) and the product
 *   is FP32 (BLIS), pt__sgemm's bits on the widened operands; a product
 *   whose FP32 copies would pass 16 MB (a frozen BF16 LM head's gradient,
 *   k = the vocabulary) goes in slices of k, C accumulating (the same
 *   values up to the summation order), so the copies stay small.
 * beta 0 overwrites C.  Threads and determinism as pt__sgemm: every element
 * of C is computed by the same operations whatever the thread count (on
 * oneDNN's backend: the same bits run to run at the same thread count; its
 * work split, and so possibly its summation order, follows the count). */
void pt__gemm_mixed(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16, size_t ldb,
                   float beta, float *c, size_t ldc);

/* A compact BF16 copy (row stride cols) of the rows x cols FP32 matrix at
 * src (row stride ld), rounded as pt__f32_to_bf16, for an operand that
 * several BF16 products read (pt__gemm_mixed rounds an FP32 operand to
 * exactly these values each time it reads one); free() it.  NULL when the
 * path has no BF16 arithmetic (the products would widen it back) or
 * without memory: pass the FP32 operand then. */
pt_bf16 *pt__bf16_operand(const float *src, size_t rows, size_t cols, size_t ld);

/* The backend of pt__gemm_mixed's BF16 products on the active path:
 * "onednn <implementation>" (oneDNN's matmul, e.g. brg:avx512_core_amx_bf16,
 * when the build has oneDNN, its matmul is not a reference implementation
 * and PT_BF16_GEMM is not "own"), "own dpbf16" / "own fma" (gemm_bf16.c),
 * or the FP32 path's "fp32 blis ..." where the path has no BF16 arithmetic.
 * The choice is fixed for the process (never timed; the backends differ in
 * the last bits).  Thread-local buffer. */
const char *pt__bf16_gemm_backend(void);

/* y_i = alpha * W x_i + beta * y_i for the m rows x_i of x (row stride
 * ldx), W [n x k] BF16 row-major (row stride ldw), x and y FP32: the BF16
 * counterpart of pt__sgemv_rows (decoding; W streams from memory once for
 * all m rows, at half the bytes).  W is widened to FP32 in the kernel (a
 * 16-bit shift, exact) and the arithmetic is FP32 on every path, including
 * avx512bf16 (no vdpbf16ps: x is not rounded), so the result equals
 * pt__sgemv_rows on the widened weights bit for bit on the same path, and
 * row i's result does not depend on m, the other rows or the thread count
 * (kernels/gemv.h).  beta is 0 or 1. */
void pt__bgemv_rows(size_t m, size_t n, size_t k, float alpha, const float *x, size_t ldx,
                   const pt_bf16 *w, size_t ldw, float beta, float *y, size_t ldy);

#endif
