/* Products on a quantized weight through dequantized FP32 tiles: the
 * prefill and training path (and, until integer kernels exist, decoding).
 * Dequantizing costs O(n k) against the product's O(m n k).  A tile is the
 * whole matrix when it fits PT_QTILE_BYTES, so the product is then the very
 * pt__sgemm / pt__sgemv_rows call an FP32 model with the dequantized values
 * makes (the same bits); larger matrices go by tiles of rows. */
#include "kernels/quant.h"

#include "core/core.h"
#include "kernels/gemm.h"
#include "kernels/qgemv.h"

#include <stdlib.h>
#include <string.h>

#define PT_QTILE_BYTES ((size_t)32 << 20)

size_t pt__qtile_rows(size_t n, size_t k, size_t elem_bytes)
{
    size_t t = PT_QTILE_BYTES / elem_bytes / (k ? k : 1);
    if (t >= n)
        return n;
    t = t / 16 * 16;
    return t < 16 ? 16 : t;
}

static size_t tile_rows(size_t n, size_t k)
{
    return pt__qtile_rows(n, k, sizeof(float));
}

static void dequant_rows(int type, const void *w, size_t nw, size_t k, size_t r0, size_t r1, float *dst)
{
    int nt = pt_get_num_threads();
    size_t n = r1 - r0;
    if (nt <= 1 || n * k < ((size_t)1 << 16)) {
        pt__dequant_tile(type, w, nw, k, r0, r1, dst, k);
        return;
    }
    /* rows split in nt contiguous parts: each row's values are the same
     * whatever the split */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int p = 0; p < nt; p++) {
        size_t a = r0 + n * (size_t)p / (size_t)nt, b = r0 + n * (size_t)(p + 1) / (size_t)nt;
        pt__dequant_tile(type, w, nw, k, a, b, dst + (a - r0) * k, k);
    }
}

/* Without memory for a tile: one row of W at a time on the stack, in
 * chunks of whole blocks (slow, but correct, and never fails). */
static void xwt_by_row(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                       size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    size_t be = pt__quant_block_elems(type);
    float buf[PT_QK_K];
    uint8_t tmp[PT_QBLOCK_MAX];
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < m; i++) {
            double s = 0;
            for (size_t b = 0; b < k / be; b++) {
                pt__dequant_row(type & ~PT_QPACK, pt__qpack_block(type, w, n, k, j, b, tmp), buf, be);
                for (size_t e = 0; e < be; e++)
                    s += (double)x[i * ldx + b * be + e] * buf[e];
            }
            float *o = &y[i * ldy + j];
            *o = (float)(alpha * s) + (beta != 0.0f ? beta * *o : 0.0f);
        }
}

/* The product through tiles of W's rows dequantized to F32, false without
 * memory for a tile: dyw false, y = alpha x W^T + beta y (a = x, c = y;
 * rowwise, each row of x by pt__sgemv_rows); dyw true, dx = alpha dy W +
 * beta dx (a = dy, c = dx). */
static bool tiled(bool dyw, bool rowwise, int type, size_t m, size_t n, size_t k, float alpha,
                  const float *a, size_t lda, const void *w, float beta, float *c, size_t ldc)
{
    size_t tr = tile_rows(n, k);
    float *t = pt__malloc_aligned(tr * k * sizeof(float));
    if (!t)
        return false;
    for (size_t r0 = 0; r0 < n; r0 += tr) {
        size_t r1 = n - r0 < tr ? n : r0 + tr;
        dequant_rows(type, w, n, k, r0, r1, t);
        if (dyw)
            pt__sgemm(false, false, m, k, r1 - r0, alpha, a + r0, lda, t, k,
                      r0 == 0 ? beta : 1.0f, c, ldc);
        else if (rowwise)
            pt__sgemv_rows(m, r1 - r0, k, alpha, a, lda, t, k, beta, c + r0, ldc);
        else
            pt__sgemm(false, true, m, r1 - r0, k, alpha, a, lda, t, k, beta, c + r0, ldc);
    }
    pt__free_aligned(t);
    return true;
}

void pt__qgemm_xwt(bool rowwise, int type, size_t m, size_t n, size_t k, float alpha,
                  const float *x, size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    if (m == 0 || n == 0)
        return;
    if (type == 0) { /* F32 */
        if (rowwise)
            pt__sgemv_rows(m, n, k, alpha, x, ldx, w, k, beta, y, ldy);
        else
            pt__sgemm(false, true, m, n, k, alpha, x, ldx, w, k, beta, y, ldy);
        return;
    }
    /* decoding: integer dot products on the blocks (kernels/qgemv.h), each
     * row's result independent of the others as pt__sgemv_rows' */
    if (rowwise && pt__qgemv_supported(type) &&
        pt__qgemv_rows(type, m, n, k, alpha, x, ldx, w, beta, y, ldy) == PT_OK)
        return;
    if (!tiled(false, rowwise, type, m, n, k, alpha, x, ldx, w, beta, y, ldy))
        xwt_by_row(type, m, n, k, alpha, x, ldx, w, beta, y, ldy);
}

/* dx = beta dx (beta 0: not read). */
static void scale_rows(float *dx, size_t lddx, size_t m, size_t k, float beta)
{
    for (size_t i = 0; i < m && beta != 1.0f; i++)
        for (size_t c = 0; c < k; c++)
            dx[i * lddx + c] = beta == 0.0f ? 0.0f : beta * dx[i * lddx + c];
}

/* Without memory for a tile: rank-1 updates, a block of W's row at a time. */
static void dyw_by_row(int type, size_t m, size_t n, size_t k, float alpha, const float *dy,
                       size_t lddy, const void *w, float beta, float *dx, size_t lddx)
{
    size_t be = pt__quant_block_elems(type);
    float buf[PT_QK_K];
    uint8_t tmp[PT_QBLOCK_MAX];
    scale_rows(dx, lddx, m, k, beta);
    for (size_t j = 0; j < n; j++)
        for (size_t b = 0; b < k / be; b++) {
            pt__dequant_row(type & ~PT_QPACK, pt__qpack_block(type, w, n, k, j, b, tmp), buf, be);
            for (size_t i = 0; i < m; i++)
                for (size_t e = 0; e < be; e++)
                    dx[i * lddx + b * be + e] += alpha * dy[i * lddy + j] * buf[e];
        }
}

void pt__qgemm_dyw(int type, size_t m, size_t n, size_t k, float alpha, const float *dy,
                  size_t lddy, const void *w, float beta, float *dx, size_t lddx)
{
    if (m == 0 || k == 0)
        return;
    if (type == 0) {
        pt__sgemm(false, false, m, k, n, alpha, dy, lddy, w, k, beta, dx, lddx);
        return;
    }
    if (n == 0) {
        scale_rows(dx, lddx, m, k, beta);
        return;
    }
    if (!tiled(true, false, type, m, n, k, alpha, dy, lddy, w, beta, dx, lddx))
        dyw_by_row(type, m, n, k, alpha, dy, lddy, w, beta, dx, lddx);
}

/* All segments' rows dequantized into one [n x k] tile, or NULL (too large,
 * or no memory). */
static float *segs_tile(const pt_qseg *seg, int nseg, size_t k, size_t *n)
{
    *n = 0;
    for (int s = 0; s < nseg; s++)
        *n += seg[s].rows;
    if (nseg < 2 || *n * k > PT_QTILE_BYTES / sizeof(float))
        return NULL;
    float *t = pt__malloc_aligned(*n * k * sizeof(float));
    if (!t)
        return NULL;
    size_t r = 0;
    for (int s = 0; s < nseg; s++) {
        if (seg[s].type == 0)
            memcpy(t + r * k, seg[s].w, seg[s].rows * k * sizeof(float));
        else
            dequant_rows(seg[s].type, seg[s].w, seg[s].rows, k, 0, seg[s].rows, t + r * k);
        r += seg[s].rows;
    }
    return t;
}

/* Segment by segment in BF16; a segment whose tile finds no memory, and
 * those after it, the FP32 way. */
static void segs_xwt_bf16(const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha,
                          const float *x, size_t ldx, float beta, float *y, size_t ldy)
{
    size_t off = 0;
    for (int s = 0; s < nseg; s++) {
        if (!pt__qgemm_xwt_bf16(seg[s].type, m, seg[s].rows, k, alpha, x, ldx, seg[s].w, beta,
                               y + off, ldy)) {
            /* the segments before are done: the rest the FP32 way */
            for (; s < nseg; off += seg[s].rows, s++)
                pt__qgemm_xwt(false, seg[s].type, m, seg[s].rows, k, alpha, x, ldx, seg[s].w, beta,
                             y + off, ldy);
            return;
        }
        off += seg[s].rows;
    }
}

void pt__qgemm_segs_xwt(bool rowwise, bool bf16, const pt_qseg *seg, int nseg, size_t m, size_t k,
                       float alpha, const float *x, size_t ldx, float beta, float *y, size_t ldy)
{
    if (bf16 && !rowwise) {
        segs_xwt_bf16(seg, nseg, m, k, alpha, x, ldx, beta, y, ldy);
        return;
    }
    if (rowwise) { /* decoding: all segments' blocks in one call (x quantized once) */
        bool q = true;
        for (int s = 0; s < nseg; s++)
            q = q && pt__qgemv_supported(seg[s].type);
        if (q && pt__qgemv_segs(seg, nseg, m, k, alpha, x, ldx, beta, y, ldy) == PT_OK)
            return;
    }
    size_t n;
    /* decoding without the integer kernels reads the blocks segment by
     * segment (no tile) */
    float *t = rowwise ? NULL : segs_tile(seg, nseg, k, &n);
    if (t) {
        pt__qgemm_xwt(rowwise, 0, m, n, k, alpha, x, ldx, t, beta, y, ldy);
        pt__free_aligned(t);
        return;
    }
    size_t off = 0;
    for (int s = 0; s < nseg; s++) {
        pt__qgemm_xwt(rowwise, seg[s].type, m, seg[s].rows, k, alpha, x, ldx, seg[s].w, beta,
                     y + off, ldy);
        off += seg[s].rows;
    }
}

void pt__qgemm_segs_dyw(bool bf16, const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha,
                       const float *dy, size_t lddy, float beta, float *dx, size_t lddx)
{
    if (bf16) { /* segment by segment, each its own BF16 product when it has memory */
        size_t off = 0;
        for (int s = 0; s < nseg; s++) {
            float b = s > 0 ? 1.0f : beta;
            if (!pt__qgemm_dyw_bf16(seg[s].type, m, seg[s].rows, k, alpha, dy + off, lddy,
                                   seg[s].w, b, dx, lddx))
                pt__qgemm_dyw(seg[s].type, m, seg[s].rows, k, alpha, dy + off, lddy, seg[s].w, b, dx,
                             lddx);
            off += seg[s].rows;
        }
        return;
    }
    size_t n;
    float *t = segs_tile(seg, nseg, k, &n);
    if (t) {
        pt__qgemm_dyw(0, m, n, k, alpha, dy, lddy, t, beta, dx, lddx);
        pt__free_aligned(t);
        return;
    }
    size_t off = 0;
    for (int s = 0; s < nseg; s++) {
        pt__qgemm_dyw(seg[s].type, m, seg[s].rows, k, alpha, dy + off, lddy, seg[s].w,
                     s > 0 ? 1.0f : beta, dx, lddx);
        off += seg[s].rows;
    }
}
