/* The small-m product kernels behind pt__sgemv_rows and pt__bgemv_rows
 * (kernels/gemm.h, kernels/bf16.h), one set per run-time path.  Internal to
 * kernels/gemv*.c.
 *
 * Each computes, on the calling thread, y_i[j] = alpha * (W x_i)[j] +
 * beta * y_i[j] for the m rows x_i and the len rows j of W it is given
 * (W [len x k] row-major, row stride ldw; y_i[j] at y[i * ldy + j]).  It
 * walks W a few rows at a time and runs every group of x rows against those
 * rows while they are in L1, so W is read from memory once for all m rows.
 *
 * The order of operations of one output element is fixed by the path alone
 * (not by m, len, the element's place in its register block or the thread):
 * with V the path's vector width (8 floats for AVX2, 16 for AVX-512),
 *   acc = 0 (V lanes); for p = 0, V, 2V, ... with p + V <= k:
 *       acc = fma(W[j][p..p+V), x_i[p..p+V), acc)         (lane by lane)
 *   if k % V: one more fma on the last k % V values, other lanes 0;
 *   s = the lanes of acc summed as a fixed tree (halves added, then halves
 *       of the halves, ...: lane l + lane l + V/2 first);
 *   y = alpha * s                       when beta == 0 (y is not read),
 *       fmaf(beta, y, alpha * s)        otherwise.
 * The BF16 kernels widen W to FP32 exactly (a 16-bit shift) and then do the
 * same FP32 operations, so they equal the FP32 kernels on the widened
 * weights bit for bit. */
#ifndef PT_KERNELS_GEMV_H
#define PT_KERNELS_GEMV_H

#include <stddef.h>
#include <stdint.h>

typedef void pt_gemv_f32_fn(size_t m, size_t len, size_t k, float alpha, const float *x,
                            size_t ldx, const float *w, size_t ldw, float beta, float *y,
                            size_t ldy);
typedef void pt_gemv_bf16_fn(size_t m, size_t len, size_t k, float alpha, const float *x,
                             size_t ldx, const uint16_t *w, size_t ldw, float beta, float *y,
                             size_t ldy);

/* Defines a path's two kernels, F32 and BF16, as BLOCK(bf16, m, len, k,
 * alpha, x, ldx, w, ldw, beta, y, ldy) with bf16 a constant, so each is
 * compiled for its type of W; ATTR is their linkage and target. */
#define PT_GEMV_DEFINE_KERNELS(attr, name_f32, name_bf16, block)                               \
    attr void name_f32(size_t m, size_t len, size_t k, float alpha, const float *x, size_t ldx, \
                       const float *w, size_t ldw, float beta, float *y, size_t ldy)            \
    {                                                                                          \
        block(false, m, len, k, alpha, x, ldx, w, ldw, beta, y, ldy);                          \
    }                                                                                          \
    attr void name_bf16(size_t m, size_t len, size_t k, float alpha, const float *x,           \
                        size_t ldx, const uint16_t *w, size_t ldw, float beta, float *y,       \
                        size_t ldy)                                                            \
    {                                                                                          \
        block(true, m, len, k, alpha, x, ldx, w, ldw, beta, y, ldy);                           \
    }

#if defined(__x86_64__) && defined(__GNUC__)
/* AVX2 + FMA (kernels/gemv_avx2.c): the build's floor. */
pt_gemv_f32_fn pt_gemv_f32_avx2;
pt_gemv_bf16_fn pt_gemv_bf16_avx2;
/* AVX-512 F/BW/DQ/VL (kernels/gemv_avx512.c, compiled with a function-level
 * target): call only when pt__cpu_active() >= PT_CPU_AVX512. */
pt_gemv_f32_fn pt_gemv_f32_avx512;
pt_gemv_bf16_fn pt_gemv_bf16_avx512;
#endif

#endif
