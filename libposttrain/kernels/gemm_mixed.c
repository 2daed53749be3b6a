/* pt__gemm_mixed (kernels/bf16.h): products with BF16 operands.  On a path
 * with BF16 arithmetic, oneDNN's matmul where usable (gemm_dnnl.c), else
 * the BF16 GEMM of gemm_bf16.c; otherwise BF16
 * operands are widened to FP32 block by block and multiplied by BLIS along
 * pt__sgemm_nt's own cut, so the result equals pt__sgemm on widened copies
 * bit for bit (a product whose copies would pass 16 MB goes in slices of
 * k: the same values up to the summation order). */
#include "kernels/bf16.h"

#include "core/core.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

#include <omp.h>
#include <stdlib.h>

/* ---- FP32 arithmetic (paths without BF16): widen, then BLIS ---- */

static inline float elem_f32(const pt_gemm_operand *x, size_t r, size_t kk)
{
    size_t i = x->kmajor ? kk * x->ld + r : r * x->ld + kk;
    return x->bf16 ? pt__bf16_to_f32(((const pt_bf16 *)x->p)[i]) : ((const float *)x->p)[i];
}

/* No memory for FP32 copies: a plain loop (slow; only when allocation fails). */
static void gemm_f32_loop(const pt_gemm_operand *A, const pt_gemm_operand *B, size_t m, size_t n,
                          size_t k, float alpha, float beta, float *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (size_t p = 0; p < k; p++)
                s += elem_f32(A, i, p) * elem_f32(B, j, p);
            float *ci = c + i * ldc + j;
            *ci = beta == 0.0f ? alpha * s : alpha * s + beta * *ci;
        }
}

/* rows r0 .. r0+rn, columns c0 .. c0+cn of a BF16 row-major matrix, as FP32
 * with row stride cn */
static void widen(float *dst, const pt_bf16 *src, size_t ld, size_t r0, size_t rn, size_t c0,
                  size_t cn)
{
    for (size_t i = 0; i < rn; i++)
        for (size_t j = 0; j < cn; j++)
            dst[i * cn + j] = pt__bf16_to_f32(src[(r0 + i) * ld + c0 + j]);
}

/* A row-major operand of rows x cols as FP32: p itself, or widened into w. */
static const float *as_f32(const void *p, bool bf16, size_t ld, size_t r0, size_t rows, size_t c0,
                           size_t cols, float *w, size_t *ldw)
{
    if (!bf16) {
        *ldw = ld;
        return (const float *)p + r0 * ld + c0;
    }
    widen(w, p, ld, r0, rows, c0, cols);
    *ldw = cols;
    return w;
}

/* The blocks of pt__sgemm_nt's cut, with the operand along the cut widened
 * block by block into per-thread scratch and the other one (the smaller:
 * min(m, n) x k) widened once. */
static void mixed_f32_split(int nt, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                            const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16,
                            size_t ldb, float beta, float *c, size_t ldc, bool split_m,
                            size_t blk, size_t nblk)
{
    size_t dim = split_m ? m : n;
    bool cut_bf16 = split_m ? a_bf16 : b_bf16, other_bf16 = split_m ? b_bf16 : a_bf16;
    size_t orows = split_m ? (tb ? n : k) : (ta ? k : m),
           ocols = split_m ? (tb ? k : n) : (ta ? m : k);
    if ((size_t)nt > nblk)
        nt = (int)nblk;
    size_t scratch = cut_bf16 ? blk * k : 0, whole = other_bf16 ? orows * ocols : 0;
    float *w = (scratch || whole) ? malloc(((size_t)nt * scratch + whole) * sizeof *w) : NULL;
    if ((scratch || whole) && !w) {
        pt_gemm_operand A = { a, lda, a_bf16, ta }, B = { b, ldb, b_bf16, !tb };
        gemm_f32_loop(&A, &B, m, n, k, alpha, beta, c, ldc);
        return;
    }
    size_t ldo;
    const float *o = split_m ? as_f32(b, b_bf16, ldb, 0, orows, 0, ocols, w, &ldo)
                             : as_f32(a, a_bf16, lda, 0, orows, 0, ocols, w, &ldo);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (size_t i = 0; i < nblk; i++) {
        float *s = w + whole + (size_t)omp_get_thread_num() * scratch;
        size_t s0 = i * blk, len = dim - s0 < blk ? dim - s0 : blk, ldx;
        if (split_m) {
            const float *ai = ta ? as_f32(a, a_bf16, lda, 0, k, s0, len, s, &ldx)
                                 : as_f32(a, a_bf16, lda, s0, len, 0, k, s, &ldx);
            pt__sgemm_1(ta, tb, len, n, k, alpha, ai, ldx, o, ldo, beta, c + s0 * ldc, ldc);
        } else {
            const float *bi = tb ? as_f32(b, b_bf16, ldb, s0, len, 0, k, s, &ldx)
                                 : as_f32(b, b_bf16, ldb, 0, k, s0, len, s, &ldx);
            pt__sgemm_1(ta, tb, m, len, k, alpha, o, ldo, bi, ldx, beta, c + s0, ldc);
        }
    }
    free(w);
}

#define WIDEN_MAX_BYTES ((size_t)16 << 20) /* FP32 copies of BF16 operands at once */

/* The FP32 bytes the widening of a product (m, n, k cut as pt__sgemm cuts
 * it, on nt threads) holds per value of k. */
static size_t widen_bytes_per_k(int nt, size_t m, size_t n, bool a_bf16, bool b_bf16, bool split_m,
                                size_t blk, size_t nblk)
{
    bool cut_bf16 = split_m ? a_bf16 : b_bf16, other_bf16 = split_m ? b_bf16 : a_bf16;
    size_t threads = (size_t)nt < nblk ? (size_t)nt : nblk;
    size_t per = (cut_bf16 ? threads * blk : 0) + (other_bf16 ? (split_m ? n : m) : 0);
    if (nblk <= 1)
        per = (a_bf16 ? m : 0) + (b_bf16 ? n : 0);
    return per * sizeof(float);
}

/* Columns k0.. of op(A) and rows k0.. of op(B): the operands' starts. */
static const void *k_slice(const void *p, bool bf16, bool kmajor, size_t ld, size_t k0)
{
    size_t off = kmajor ? k0 * ld : k0;
    return (const char *)p + off * (bf16 ? sizeof(pt_bf16) : sizeof(float));
}

static void mixed_f32(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                      bool a_bf16, size_t lda, const void *b, bool b_bf16, size_t ldb, float beta,
                      float *c, size_t ldc);

/* A product whose widened operands would pass WIDEN_MAX_BYTES: in slices
 * of k (multiples of 256), C accumulating after the first. */
static void mixed_f32_ksliced(bool ta, bool tb, size_t m, size_t n, size_t k, size_t kc, float alpha,
                              const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16,
                              size_t ldb, float beta, float *c, size_t ldc)
{
    for (size_t k0 = 0; k0 < k; k0 += kc) {
        size_t len = k - k0 < kc ? k - k0 : kc;
        mixed_f32(ta, tb, m, n, len, alpha, k_slice(a, a_bf16, ta, lda, k0), a_bf16, lda,
                  k_slice(b, b_bf16, !tb, ldb, k0), b_bf16, ldb, k0 == 0 ? beta : 1.0f, c, ldc);
    }
}

/* FP32 arithmetic on operands widened exactly: equal bit for bit to
 * pt__sgemm on widened copies (the same cut, the same BLIS calls), unless
 * the copies would pass WIDEN_MAX_BYTES (a frozen BF16 LM head's
 * gradient product: k = the vocabulary): then in slices of k. */
static void mixed_f32(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                      bool a_bf16, size_t lda, const void *b, bool b_bf16, size_t ldb, float beta,
                      float *c, size_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if ((!a_bf16 && !b_bf16) || k == 0) { /* k = 0: C = beta C, the operands unread */
        pt__sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    int nt = pt__gemm_threads(m, n, k);
    bool split_m;
    size_t blk, nblk = pt__sgemm_split(m, n, k, &split_m, &blk);
    const size_t per_k = widen_bytes_per_k(nt, m, n, a_bf16, b_bf16, split_m, blk, nblk);
    if (per_k * k > WIDEN_MAX_BYTES && k > 512) {
        size_t kc = WIDEN_MAX_BYTES / per_k / 256 * 256;
        mixed_f32_ksliced(ta, tb, m, n, k, kc < 256 ? 256 : kc, alpha, a, a_bf16, lda, b, b_bf16,
                          ldb, beta, c, ldc);
        return;
    }
    if (nblk > 1) {
        mixed_f32_split(nt, ta, tb, m, n, k, alpha, a, a_bf16, lda, b, b_bf16, ldb, beta, c, ldc,
                        split_m, blk, nblk);
        return;
    }
    /* one BLIS call (max(m, n) below two blocks): both operands whole */
    size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    size_t wa = a_bf16 ? ar * ac : 0, wb = b_bf16 ? br * bc : 0;
    float *w = malloc((wa + wb) * sizeof *w);
    if (!w) {
        pt_gemm_operand A = { a, lda, a_bf16, ta }, B = { b, ldb, b_bf16, !tb };
        gemm_f32_loop(&A, &B, m, n, k, alpha, beta, c, ldc);
        return;
    }
    size_t la, lb;
    const float *fa = as_f32(a, a_bf16, lda, 0, ar, 0, ac, w, &la);
    const float *fb = as_f32(b, b_bf16, ldb, 0, br, 0, bc, w + wa, &lb);
    pt__sgemm_nt(nt, ta, tb, m, n, k, alpha, fa, la, fb, lb, beta, c, ldc);
    free(w);
}

pt_bf16 *pt__bf16_operand(const float *src, size_t rows, size_t cols, size_t ld)
{
    if (!pt__cpu_bf16_compute() || rows == 0 || cols == 0)
        return NULL;
    pt_bf16 *dst = malloc(rows * cols * sizeof *dst);
    if (!dst)
        return NULL;
    if (ld == cols)
        pt__f32_to_bf16_n(dst, src, rows * cols);
    else
        for (size_t i = 0; i < rows; i++)
            pt__f32_to_bf16_n(dst + i * cols, src + i * ld, cols);
    return dst;
}

void pt__gemm_mixed(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16, size_t ldb,
                   float beta, float *c, size_t ldc)
{
    if (pt__cpu_bf16_compute()) {
        int nt = pt__gemm_threads(m, n, k);
        if (!pt__gemm_dnnl(nt, trans_a, trans_b, m, n, k, alpha, a, a_bf16, lda, b, b_bf16, ldb,
                          beta, c, ldc))
            pt__gemm_bf16_nt(nt, PT_BF16_KERNEL_AUTO, trans_a, trans_b, m, n, k, alpha, a, a_bf16,
                            lda, b, b_bf16, ldb, beta, c, ldc);
    } else
        mixed_f32(trans_a, trans_b, m, n, k, alpha, a, a_bf16, lda, b, b_bf16, ldb, beta, c, ldc);
}
