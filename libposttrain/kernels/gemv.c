/* Small-m products that stream the weight once for all rows (decoding).
 * REFERENCE VERSION of pt_bgemv_rows: scalar FP32 arithmetic on widened
 * BF16 weights. */
#include "kernels/bf16.h"

#include "core/core.h"
#include "kernels/gemm.h"

void pt_bgemv_rows(size_t m, size_t n, size_t k, float alpha, const float *x, size_t ldx,
                   const pt_bf16 *w, size_t ldw, float beta, float *y, size_t ldy)
{
    int nt = pt_gemm_threads(m, n, k);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            float s = 0.0f;
            for (size_t p = 0; p < k; p++)
                s += x[i * ldx + p] * pt_bf16_to_f32(w[j * ldw + p]);
            y[i * ldy + j] = alpha * s + (beta == 0.0f ? 0.0f : y[i * ldy + j]);
        }
}
