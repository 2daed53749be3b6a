/* Small-m products on quantized weights (decoding from a GGUF file's
 * blocks): y_i = alpha W x_i + beta y_i with W in one of ggml's block
 * formats (kernels/quant.h), by integer dot products as llama.cpp does.
 *
 * The activations x_i are quantized per block first (once per call, each
 * row by one of the threads), as llama.cpp's CPU backend does:
 *   Q8_0-style (for Q4_0, Q5_0, Q8_0 weights) and Q8_1-style (Q4_1, Q5_1):
 *     per 32 values a = max |x|, q = rint(x * (127 / a)) (ties to even, 0
 *     when a = 0), d = fp16(a / 127) read back as a float; Q8_1 also
 *     s = fp16((a / 127) * sum(q));
 *   Q8_K (Q4_K, Q5_K, Q6_K): per 256 values v = the value of largest |x|
 *     (the first one), q = rint((-127 / v) * x) clamped to [-127, 127],
 *     d = 1 / (-127 / v) (a float), and the sums of each 16 q's;
 *   a block holding a NaN or an infinity gets d = NaN (so the products it
 *   touches are NaN, never a silently finite number).
 *
 * Arithmetic of one output element (the same on every path, scalar or
 * SIMD, so every path gives the same bits): with W's row of nb blocks
 * (32 values for Q4_0..Q8_0, 256 for the K-quants),
 *   acc[8] = 0; for each block b, lane l = b % 8:
 *     I = the block's integer dot product (exact, int32; per type below)
 *     acc[l] = fmaf(dw * dx, (float)I, acc[l])
 *     Q4_1, Q5_1:  acc[l] = fmaf(mw, sx, acc[l])          (mw = W's min)
 *     Q4_K, Q5_K:  acc[l] = fmaf(-(dminw * dx), (float)J, acc[l])
 *   s = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7))
 *   y = alpha * s (beta == 0: y not read), else fmaf(beta, y, alpha * s).
 * with dw, mw, dminw W's fp16 scales widened, dx, sx the activation's, and
 *   Q8_0: I = sum w q;  Q4_0: I = sum (w - 8) q;  Q5_0: I = sum (w - 16) q;
 *   Q4_1, Q5_1: I = sum w q (w the unsigned 4- or 5-bit value);
 *   Q4_K, Q5_K: I = sum_s sc_s sum_{32 of s} w q, J = sum_s m_s sum_{32 of s} q
 *               (sc_s, m_s the 6-bit scale and min of sub-block s);
 *   Q6_K: I = sum_s sc_s sum_{16 of s} (w - 32) q (sc_s int8).
 * The integer sums are exact in any order (the SIMD kernels add them in
 * whatever order suits them); the float operations are the ones above in
 * that order, lane by lane (an 8-lane vector holds 8 consecutive blocks).
 * Each output element depends on its row of W and its row of x alone: not
 * on m, the other rows or the thread count. */
#ifndef PT_KERNELS_QGEMV_H
#define PT_KERNELS_QGEMV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y_i = alpha * W x_i + beta * y_i for the m rows x_i of x (FP32, row
 * stride ldx), i < m; W [n x k] in ggml type `type` (PT_GGML_*; rows of
 * k / block blocks back to back, at any alignment); beta 0 overwrites y
 * (not read).  Threads (pt_get_num_threads) share W's rows.  Returns PT_OK,
 * PT_EUNSUPPORTED for a type without a kernel, PT_EINVAL when k is not a
 * multiple of the type's block or a pointer is NULL, PT_ENOMEM (y then
 * untouched); with the message in the thread's last error. */
int pt__qgemv_rows(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                  size_t ldx, const void *w, float beta, float *y, size_t ldy);
/* Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K. */
bool pt__qgemv_supported(int type);
/* The kernel the active path runs for type ("avx512vnni", "avx2",
 * "scalar"), or NULL for an unsupported type. */
const char *pt__qgemv_kernel(int type);
/* The same for m rows of x ("avx512vnni16" for the 32-value types from
 * PT_QGEMV_M16 rows on, where the CPU has AVX512_VNNI). */
const char *pt__qgemv_kernel_rows(int type, size_t m);
/* True when the active path runs the kernels of packed rows
 * (pt__qgemv_vnni16p: AVX512_VNNI) and PT_QPACK is not "0" in the
 * environment: a quantized model's weights are packed on load then. */
bool pt__qgemv_packs(void);
/* The scalar reference of every type (the arithmetic above, computed from
 * the blocks directly), single-threaded: for tests. */
int pt__qgemv_rows_ref(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                      size_t ldx, const void *w, float beta, float *y, size_t ldy);

/* ---- internal to kernels/qgemv*.c ---- */

#include "kernels/quant.h"

/* pt__qgemv_rows over the segments of a fused weight (q|k|v, gate|up; each
 * of its own type, all supported; y's columns follow the segments), with
 * x quantized once and one parallel region for all: the same bits as one
 * pt__qgemv_rows call per segment.  Errors as pt__qgemv_rows', and PT_EINVAL
 * for nseg outside 1..8. */
int pt__qgemv_segs(const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha, const float *x,
                  size_t ldx, float beta, float *y, size_t ldy);

/* A product's input made row by row from x as the rows are quantized (in
 * the product's parallel region, instead of an operation and a region of
 * its own before it): RMSNorm of x's rows (weight w, eps; each row's rstd
 * into rstd unless NULL), or SwiGLU of x's rows (the gate) and u's (the
 * up, row stride ldx as x's).  The rows made go to out (row stride ldo),
 * bit for bit what pt__rmsnorm_forward / pt__swiglu_forward write there. */
enum { PT_QPRE_RMSNORM = 1, PT_QPRE_SWIGLU = 2 };
typedef struct pt_qpre {
    int kind;
    const float *w;
    float eps;
    float *rstd;
    const float *u;
    float *out;
    size_t ldo;
} pt_qpre;
/* pt__qgemv_segs on the rows pre makes of x (m rows of k values); pre->out
 * holds them after.  On an error nothing is written (the caller may make
 * them with pt__qpre_apply and run the product another way). */
int pt__qgemv_segs_pre(const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha, const float *x,
                      size_t ldx, const pt_qpre *pre, float beta, float *y, size_t ldy);
/* pre's rows of x made alone (m rows of k values) into pre->out. */
void pt__qpre_apply(const pt_qpre *pre, const float *x, size_t ldx, size_t m, size_t k);

#if defined(__x86_64__) && defined(__F16C__)
#include <immintrin.h>
/* fp16 <-> float, IEEE (round to nearest even), as ggml's F16C path. */
static inline float pt__q_f16(const void *p)
{
    return _cvtsh_ss(pt__q_half(p));
}
static inline float pt__q_round_f16(float f)
{
    return _cvtsh_ss(_cvtss_sh(f, 0));
}
#else
static inline float pt__q_f16(const void *p)
{
    return (float)*(const _Float16 *)(const void *)&(pt_fp16){ pt__q_half(p) };
}
static inline float pt__q_round_f16(float f)
{
    return (float)(_Float16)f;
}
#endif

/* x quantized: m rows, each padded with zeros to a whole number of groups
 * of 8 blocks (kp values, nbp = kp / block blocks). */
typedef struct pt_qact {
    size_t m, kp, nbp;
    int8_t *q;      /* [m][kp] */
    float *d;       /* [m][nbp] */
    float *s;       /* [m][nbp]: Q8_1's s (32-value blocks) */
    int32_t *sum;   /* [m][nbp]: sum of the block's q (32-value blocks) */
    int16_t *bsum;  /* [m][nbp * 16]: sums of 16 q's (Q8_K) */
} pt_qact;

/* Rows 0 .. len of W (wrow: the first one; rb bytes a row) of type `type`
 * against all rows of a, into y[i * ldy + j]. */
typedef void pt_qgemv_fn(int type, const pt_qact *a, size_t len, const uint8_t *wrow, size_t rb,
                         float alpha, float beta, float *y, size_t ldy);

/* The final sum of the 8 lanes and the store (kernels/qgemv.h's last two
 * lines). */
static inline void pt__qgemv_store(const float acc[8], float alpha, float beta, float *y)
{
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    float as = alpha * s;
    *y = beta == 0.0f ? as : __builtin_fmaf(beta, *y, as);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* kernels/qgemv_avx2.c; NULL for a type it lacks. */
pt_qgemv_fn *pt__qgemv_avx2(int type);
/* kernels/qgemv_avx512.c (AVX512_VNNI on 256-bit vectors): call only when
 * pt__cpu_active() >= PT_CPU_AVX512 and pt__cpu_has_vnni(); NULL for a type
 * it lacks (the AVX2 kernel runs then). */
pt_qgemv_fn *pt__qgemv_vnni(int type);
/* kernels/qgemv_avx512.c: every type for m >= PT_QGEMV_M16 rows, 16 rows
 * of W in the lanes of one vector (unpacked and transposed once for all
 * the rows of x), each row of x broadcast 4 bytes at a time (no reduction
 * across lanes; a last group of fewer than PT_QGEMV_M16 rows goes to
 * pt__qgemv_vnni's kernel); same conditions as pt__qgemv_vnni; NULL for a
 * type it lacks.  From 8 rows on: single-threaded on Q5_0 576 x 1536, m = 8
 * measured 1.09x faster than the kernel for few rows, m = 4 1.26x slower. */
pt_qgemv_fn *pt__qgemv_vnni16(int type);
#define PT_QGEMV_M16 8
/* The same kernels on a full group of 16 rows packed (type | PT_QPACK,
 * kernels/quant.h): wrow is the group, len 16, any number of rows of x;
 * or len 32, two full groups one after the other (the 32-value types then
 * broadcast each 4 bytes of x once for both groups). */
pt_qgemv_fn *pt__qgemv_vnni16p(int type);
/* kernels/qgemv_act.c: the activation quantizers on AVX2 (the same values
 * as the scalar ones in kernels/qgemv.c). */
void pt__qgemv_quant32_avx2(const float *x, size_t k, int8_t *q, float *d, float *s, int32_t *sum);
void pt_qgemv_quantK_avx2(const float *x, size_t k, int8_t *q, float *d, int16_t *bsum);
#endif

#endif
