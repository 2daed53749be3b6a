/* Small-m products that stream the weight once for all rows (decoding):
 * pt__sgemv_rows (kernels/gemm.h) and pt__bgemv_rows (kernels/bf16.h).
 *
 * W is cut into blocks of about GEMV_BYTES handed out to the threads
 * dynamically; each block is computed by the kernel of the path in use
 * (kernels/gemv.h: AVX2 + FMA, or AVX-512, chosen at run time) for all m
 * rows of x, a few W rows at a time, so every W element is read from memory
 * once per call.  The order of operations of each output element is fixed
 * by the path (kernels/gemv.h), so row i's result does not depend on m, the
 * other rows or the thread count. */
#include "kernels/gemv.h"

#include "core/core.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

#include <math.h>

/* Bytes of W per block (at least GEMV_BLOCK rows, a multiple of 8): each
 * block is one stream from memory that the prefetchers (and the kernels'
 * prefetch of the next rows) have to pick up again, so blocks are sized in
 * bytes, not rows.  Blocks of 32 rows (37 KB of BF16 at k = 576) left the
 * BF16 kernels at 0.73-0.77 of the FP32 ones' bytes per second on a Zen 5;
 * 128 KB blocks give 0.81-0.84, and both types gain (FP32 +8-10%, BF16
 * +19%, bench_gemv, 2026-12-04), while a block is still some microseconds
 * of work, so a thread the OS preempts holds up little. */
#define GEMV_BYTES ((size_t)128 << 10)
#define GEMV_BLOCK 32

#if !(defined(__x86_64__) && defined(__GNUC__))
/* Portable kernels for other architectures: the operations of kernels/gemv.h
 * with an 8-lane accumulator. */
static void gemv_portable(bool bf16, size_t m, size_t len, size_t k, float alpha, const float *x,
                          size_t ldx, const void *w, size_t ldw, float beta, float *y, size_t ldy)
{
    for (size_t j = 0; j < len; j++)
        for (size_t i = 0; i < m; i++) {
            float acc[8] = { 0 };
            for (size_t p = 0; p < k; p++) {
                float wv = bf16 ? pt__bf16_to_f32(((const pt_bf16 *)w)[j * ldw + p])
                                : ((const float *)w)[j * ldw + p];
                acc[p % 8] = fmaf(wv, x[i * ldx + p], acc[p % 8]);
            }
            float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
            float *yy = &y[i * ldy + j];
            *yy = beta == 0.0f ? alpha * s : fmaf(beta, *yy, alpha * s);
        }
}

PT_GEMV_DEFINE_KERNELS(static, gemv_f32_portable, gemv_bf16_portable, gemv_portable)
#endif

/* The kernels of the path in use (read once per call). */
static void gemv_kernels(pt_gemv_f32_fn **f32, pt_gemv_bf16_fn **bf16)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* avx512bf16 runs the AVX-512 kernels: FP32 arithmetic on widened
     * weights, identical results to the avx512 path. */
    if (pt__cpu_active() >= PT_CPU_AVX512) {
        *f32 = pt_gemv_f32_avx512;
        *bf16 = pt_gemv_bf16_avx512;
    } else {
        *f32 = pt_gemv_f32_avx2;
        *bf16 = pt_gemv_bf16_avx2;
    }
#else
    *f32 = gemv_f32_portable;
    *bf16 = gemv_bf16_portable;
#endif
}

/* The blocks of W shared among the threads; w is FP32 or BF16 (bf16). */
static void gemv_rows(bool bf16, size_t m, size_t n, size_t k, float alpha, const float *x,
                      size_t ldx, const void *w, size_t ldw, float beta, float *y, size_t ldy)
{
    if (m == 0 || n == 0)
        return;
    pt_gemv_f32_fn *kf32;
    pt_gemv_bf16_fn *kbf16;
    gemv_kernels(&kf32, &kbf16);
    const size_t rowb = k * (bf16 ? sizeof(pt_bf16) : sizeof(float));
    size_t brows = GEMV_BYTES / (rowb ? rowb : 1);
    brows = brows < GEMV_BLOCK ? GEMV_BLOCK : brows / 8 * 8;
    size_t nblk = (n + brows - 1) / brows;
    int nt = pt__gemm_threads(m, n, k);
    if ((size_t)nt > nblk)
        nt = (int)nblk;
    /* Blocks handed out dynamically, one at a time: a thread the OS
     * preempts holds up only the block it has taken. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (size_t b = 0; b < nblk; b++) {
        size_t j0 = b * brows, len = n - j0 < brows ? n - j0 : brows;
        if (bf16)
            kbf16(m, len, k, alpha, x, ldx, (const pt_bf16 *)w + j0 * ldw, ldw, beta, y + j0, ldy);
        else
            kf32(m, len, k, alpha, x, ldx, (const float *)w + j0 * ldw, ldw, beta, y + j0, ldy);
    }
}

void pt__sgemv_rows(size_t m, size_t n, size_t k, float alpha, const float *x, size_t ldx,
                   const float *w, size_t ldw, float beta, float *y, size_t ldy)
{
    gemv_rows(false, m, n, k, alpha, x, ldx, w, ldw, beta, y, ldy);
}

void pt__bgemv_rows(size_t m, size_t n, size_t k, float alpha, const float *x, size_t ldx,
                   const pt_bf16 *w, size_t ldw, float beta, float *y, size_t ldy)
{
    gemv_rows(true, m, n, k, alpha, x, ldx, w, ldw, beta, y, ldy);
}
