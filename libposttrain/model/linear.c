/* The one linear layer of the transformer: y = x W^T + b on BLIS. */
#include "model/transformer.h"

#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

#include <stdlib.h>

/* y = alpha x W^T + beta y with W [n, k] (FP32 w, or BF16 w16 when set):
 * one GEMM, or row by row. */
static void product(bool rowwise, size_t rows, size_t n, size_t k, float alpha, const float *x,
                    size_t ldx, const float *w, const pt_bf16 *w16, float beta, float *y,
                    size_t ldy)
{
    if (w16 && rowwise)
        pt__bgemv_rows(rows, n, k, alpha, x, ldx, w16, k, beta, y, ldy);
    else if (w16)
        pt__gemm_mixed(false, true, rows, n, k, alpha, x, false, ldx, w16, true, k, beta, y, ldy);
    else if (rowwise)
        pt__sgemv_rows(rows, n, k, alpha, x, ldx, w, k, beta, y, ldy);
    else
        pt__sgemm(false, true, rows, n, k, alpha, x, ldx, w, k, beta, y, ldy);
}

/* The bias into y (set, or added when accumulating); the beta of the
 * product that follows. */
static float bias_in(const pt_linear *lin, float *y, size_t ldy, size_t rows, bool accumulate)
{
    float beta = 0.0f;
    if (accumulate) {
        beta = 1.0f;
        if (lin->b)
            for (size_t r = 0; r < rows; r++)
                for (size_t j = 0; j < lin->out; j++)
                    y[r * ldy + j] += lin->b[j];
    } else if (lin->b) {
        pt__rows_set(y, lin->b, rows, lin->out, ldy);
        beta = 1.0f;
    }
    return beta;
}

static void lora_forward(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                         size_t rows);

/* y = x W^T + beta y: the weight's product, quantized or not. */
static void base_product(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                         size_t rows, float beta)
{
    if (lin->q.nseg)
        pt__qgemm_segs_xwt(lin->rowwise, lin->q.bf16, lin->q.seg, lin->q.nseg, rows, lin->in, 1.0f, x, ldx, beta,
                          y, ldy);
    else
        product(lin->rowwise, rows, lin->out, lin->in, 1.0f, x, ldx, lin->w, lin->w16, beta, y,
                ldy);
}

void pt__linear_forward(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                       size_t rows, bool accumulate)
{
    base_product(lin, y, ldy, x, ldx, rows, bias_in(lin, y, ldy, rows, accumulate));
    lora_forward(lin, y, ldy, x, ldx, rows);
}

void pt__linear_forward_pre(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                           size_t rows, bool accumulate, const pt_qpre *pre)
{
    bool fused = lin->rowwise && lin->q.nseg > 0;
    for (int s = 0; s < lin->q.nseg; s++)
        fused = fused && pt__qgemv_supported(lin->q.seg[s].type);
    const float beta = bias_in(lin, y, ldy, rows, accumulate);
    /* unfused, or no memory for the fused product (which then wrote
     * nothing): the input made first */
    if (!fused || pt__qgemv_segs_pre(lin->q.seg, lin->q.nseg, rows, lin->in, 1.0f, x, ldx, pre, beta, y,
                                     ldy) != PT_OK) {
        pt__qpre_apply(pre, x, ldx, rows, lin->in);
        base_product(lin, y, ldy, pre->out, pre->ldo, rows, beta);
    }
    lora_forward(lin, y, ldy, pre->out, pre->ldo, rows);
}

/* LoRA: t = x A^T [rows, r], then y[:, off:off+len] += scale * t B^T. */
static void lora_forward(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                         size_t rows)
{
    for (int k = 0; k < lin->nlora; k++) {
        const pt_lora_slice *s = &lin->lora[k];
        float *t = lin->lora_scratch;
        product(lin->rowwise, rows, s->r, lin->in, 1.0f, x, ldx, s->a, NULL, 0.0f, t, s->r);
        product(lin->rowwise, rows, s->len, s->r, s->scale, t, s->r, s->b, NULL, 1.0f, y + s->off,
                ldy);
    }
}

void pt__linear_backward(const pt_linear *lin, float *dx, size_t lddx, bool accumulate_dx,
                        const float *dy, size_t lddy, const float *x, size_t ldx, size_t rows)
{
    /* LoRA first, while x is intact (dx may overwrite x): per adapter k,
     * t = x A^T (recomputed) and u_k = dy_slice B (both [rows, r]);
     * dB += scale * dy_slice^T t, dA += scale * u_k^T x, and after the base
     * dx, dx += scale * u_k A. */
    for (int k = 0; k < lin->nlora; k++) {
        const pt_lora_slice *s = &lin->lora[k];
        float *t = lin->lora_scratch, *u = t + (size_t)(k + 1) * rows * s->r;
        const float *dys = dy + s->off;
        pt__sgemm(false, false, rows, s->r, s->len, 1.0f, dys, lddy, s->b, s->r, 0.0f, u, s->r);
        if (s->db) {
            pt__sgemm(false, true, rows, s->r, lin->in, 1.0f, x, ldx, s->a, lin->in, 0.0f, t,
                     s->r);
            pt__sgemm(true, false, s->len, s->r, rows, s->scale, dys, lddy, t, s->r, 1.0f, s->db,
                     s->r);
        }
        if (s->da)
            pt__sgemm(true, false, s->r, lin->in, rows, s->scale, u, s->r, x, ldx, 1.0f, s->da,
                     lin->in);
    }
    /* With a BF16 weight on a BF16 path the weight gradient is a BF16
     * product too (mixed precision); a BF16 weight elsewhere is frozen.
     * dy, read by both products, is rounded to BF16 once. */
    pt_bf16 *dy16 = lin->w16 && lin->dw && dx ? pt__bf16_operand(dy, rows, lin->out, lddy) : NULL;
    const void *dya = dy16 ? (const void *)dy16 : (const void *)dy;
    const size_t ldya = dy16 ? lin->out : lddy;
    if (lin->dw && lin->w16)
        pt__gemm_mixed(true, false, lin->out, lin->in, rows, 1.0f, dya, dy16 != NULL, ldya, x,
                      false, ldx, 1.0f, lin->dw, lin->in);
    else if (lin->dw)
        pt__sgemm(true, false, lin->out, lin->in, rows, 1.0f, dy, lddy, x, ldx, 1.0f, lin->dw,
                 lin->in);
    if (lin->db)
        pt__colsum_add(lin->db, dy, rows, lin->out, lddy);
    if (dx && lin->q.nseg)
        pt__qgemm_segs_dyw(lin->q.bf16, lin->q.seg, lin->q.nseg, rows, lin->in, 1.0f, dy, lddy,
                          accumulate_dx ? 1.0f : 0.0f, dx, lddx);
    else if (dx && lin->w16)
        pt__gemm_mixed(false, false, rows, lin->in, lin->out, 1.0f, dya, dy16 != NULL, ldya,
                      lin->w16, true, lin->in, accumulate_dx ? 1.0f : 0.0f, dx, lddx);
    else if (dx)
        pt__sgemm(false, false, rows, lin->in, lin->out, 1.0f, dy, lddy, lin->w, lin->in,
                 accumulate_dx ? 1.0f : 0.0f, dx, lddx);
    free(dy16);
    for (int k = 0; dx && k < lin->nlora; k++) {
        const pt_lora_slice *s = &lin->lora[k];
        const float *u = lin->lora_scratch + (size_t)(k + 1) * rows * s->r;
        pt__sgemm(false, false, rows, lin->in, s->r, s->scale, u, s->r, s->a, lin->in, 1.0f, dx,
                 lddx);
    }
}
