/* pt_gemm_mixed: products with BF16 operands (kernels/bf16.h).
 * REFERENCE VERSION: widens every operand to FP32 (rounding FP32 operands
 * to BF16 first on a BF16 path) and calls BLIS. */
#include "kernels/bf16.h"

#include "core/core.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

#include <stdlib.h>

/* rows x cols of a row-major operand with stride ld, as FP32 with stride cols */
static float *widen(const void *p, bool bf16, bool round, size_t rows, size_t cols, size_t ld)
{
    float *w = malloc(rows * cols * sizeof *w + 1);
    if (!w)
        return NULL;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            float v = bf16 ? pt_bf16_to_f32(((const pt_bf16 *)p)[i * ld + j])
                           : ((const float *)p)[i * ld + j];
            w[i * cols + j] = round ? pt_bf16_to_f32(pt_f32_to_bf16(v)) : v;
        }
    return w;
}

void pt_gemm_mixed(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16, size_t ldb,
                   float beta, float *c, size_t ldc)
{
    bool round = pt_cpu_bf16_compute();
    size_t ar = trans_a ? k : m, ac = trans_a ? m : k;
    size_t br = trans_b ? n : k, bc = trans_b ? k : n;
    float *wa = widen(a, a_bf16, round, ar, ac, lda);
    float *wb = widen(b, b_bf16, round, br, bc, ldb);
    if (wa && wb)
        pt_sgemm(trans_a, trans_b, m, n, k, alpha, wa, ac, wb, bc, beta, c, ldc);
    free(wa);
    free(wb);
}
