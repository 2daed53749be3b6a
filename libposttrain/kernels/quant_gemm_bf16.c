/* Products on quantized weights in BF16 (a quantized base with BF16 on, on
 * a path with BF16 arithmetic): tiles of W dequantized and rounded to BF16
 * (pt__dequant_tile_bf16), multiplied by pt__gemm_mixed (oneDNN's AMX or our
 * vdpbf16ps kernel), FP32 accumulation.  The prefill and training path;
 * decoding stays on the integer kernels. */
#include "kernels/quant.h"

#include "core/core.h"
#include "kernels/bf16.h"

#include <stdbool.h>

static size_t tile_rows16(size_t n, size_t k)
{
    return pt__qtile_rows(n, k, sizeof(pt_bf16));
}

/* W's rows [r0, r1) (type 0: FP32 rows, rounded) as compact BF16 in t;
 * threads take contiguous parts of the rows (each row's values the same
 * whatever the split). */
static void tile16(int type, const void *w, size_t nw, size_t k, size_t r0, size_t r1, pt_bf16 *t)
{
    if (type == 0) {
        pt__f32_to_bf16_n(t, (const float *)w + r0 * k, (r1 - r0) * k);
        return;
    }
    int nt = pt_get_num_threads();
    size_t n = r1 - r0;
    if (nt <= 1 || n * k < ((size_t)1 << 16)) {
        pt__dequant_tile_bf16(type, w, nw, k, r0, r1, t, k);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int p = 0; p < nt; p++) {
        size_t a = r0 + n * (size_t)p / (size_t)nt, b = r0 + n * (size_t)(p + 1) / (size_t)nt;
        pt__dequant_tile_bf16(type, w, nw, k, a, b, t + (a - r0) * k, k);
    }
}

/* The product through BF16 tiles of W's rows, false without memory for a
 * tile: dyw false, y = alpha x W^T + beta y (a = x, c = y); dyw true,
 * dx = alpha dy W + beta dx (a = dy, c = dx). */
static bool tiled16(bool dyw, int type, size_t m, size_t n, size_t k, float alpha, const float *a,
                    size_t lda, const void *w, float beta, float *c, size_t ldc)
{
    size_t tr = tile_rows16(n, k);
    pt_bf16 *t = pt__malloc_aligned(tr * k * sizeof *t);
    if (!t)
        return false;
    for (size_t r0 = 0; r0 < n; r0 += tr) {
        size_t r1 = n - r0 < tr ? n : r0 + tr;
        tile16(type, w, n, k, r0, r1, t);
        if (dyw)
            pt__gemm_mixed(false, false, m, k, r1 - r0, alpha, a + r0, false, lda, t, true, k,
                           r0 == 0 ? beta : 1.0f, c, ldc);
        else
            pt__gemm_mixed(false, true, m, r1 - r0, k, alpha, a, false, lda, t, true, k, beta,
                           c + r0, ldc);
    }
    pt__free_aligned(t);
    return true;
}

bool pt__qgemm_xwt_bf16(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                       size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    if (m == 0 || n == 0)
        return true;
    return tiled16(false, type, m, n, k, alpha, x, ldx, w, beta, y, ldy);
}

bool pt__qgemm_dyw_bf16(int type, size_t m, size_t n, size_t k, float alpha, const float *dy,
                       size_t lddy, const void *w, float beta, float *dx, size_t lddx)
{
    if (m == 0 || k == 0 || n == 0)
        return n != 0; /* n 0: the FP32 path scales dx by beta */
    return tiled16(true, type, m, n, k, alpha, dy, lddy, w, beta, dx, lddx);
}
