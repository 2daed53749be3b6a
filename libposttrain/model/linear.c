/* The one linear layer of the transformer: y = x W^T + b on BLIS. */
#include "model/transformer.h"

#include "kernels/gemm.h"
#include "kernels/ops.h"

void pt_linear_forward(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                       size_t rows, bool accumulate)
{
    float beta = 0.0f;
    if (accumulate) {
        beta = 1.0f;
        if (lin->b)
            for (size_t r = 0; r < rows; r++)
                for (size_t j = 0; j < lin->out; j++)
                    y[r * ldy + j] += lin->b[j];
    } else if (lin->b) {
        pt_rows_set(y, lin->b, rows, lin->out, ldy);
        beta = 1.0f;
    }
    pt_sgemm(false, true, rows, lin->out, lin->in, 1.0f, x, ldx, lin->w, lin->in, beta, y, ldy);
}

void pt_linear_backward(const pt_linear *lin, float *dx, size_t lddx, bool accumulate_dx,
                        const float *dy, size_t lddy, const float *x, size_t ldx, size_t rows)
{
    if (lin->dw)
        pt_sgemm(true, false, lin->out, lin->in, rows, 1.0f, dy, lddy, x, ldx, 1.0f, lin->dw,
                 lin->in);
    if (lin->db)
        pt_colsum_add(lin->db, dy, rows, lin->out, lddy);
    if (dx)
        pt_sgemm(false, false, rows, lin->in, lin->out, 1.0f, dy, lddy, lin->w, lin->in,
                 accumulate_dx ? 1.0f : 0.0f, dx, lddx);
}
