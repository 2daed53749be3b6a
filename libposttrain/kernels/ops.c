#include "kernels/ops.h"

#include "core/core.h"
#include "kernels/vexp.h"

#include <math.h>
#include <string.h>

/* Threads for a loop over `work` scalar operations: one thread for small
 * loops (waking the team costs more than it saves, and on a busy machine a
 * late worker stalls the whole region). */
static int loop_threads(size_t work)
{
    int nt = pt_get_num_threads();
    return (nt > 1 && work >= 262144) ? nt : 1;
}

/* ---- RMSNorm ----------------------------------------------------------------- */

/* RMSNorm over vectors of hd values: row t of x holds nh of them (head h at
 * x + t*ldx + h*hd), each with its own rstd[t*nh + h]. The model's norms are
 * the case nh = 1 (a row is one vector), Qwen3's per-head q/k norms nh > 1. */
static void norm_forward(float *y, size_t ldy, float *rstd, const float *x, size_t ldx, const float *w,
                         size_t n, size_t nh, size_t hd, float eps)
{
    int nt = loop_threads(n * nh * hd);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t t = 0; t < n; t++)
        for (size_t h = 0; h < nh; h++)
            pt__rmsnorm_row(y + t * ldy + h * hd, rstd ? rstd + t * nh + h : NULL, x + t * ldx + h * hd,
                           w, hd, eps);
}

/* Not inlined: the one compiled body of a row, whoever calls it (the
 * quantized products' fused input, kernels/qgemv.c, gives the same bits). */
__attribute__((noinline)) void pt__rmsnorm_row(float *yr, float *rstd, const float *xr, const float *w,
                                               size_t hd, float eps)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (size_t i = 0; i < hd; i++)
        ss += xr[i] * xr[i];
    float rs = 1.0f / sqrtf(ss / (float)hd + eps);
    if (rstd)
        *rstd = rs;
#pragma omp simd
    for (size_t i = 0; i < hd; i++)
        yr[i] = xr[i] * rs * w[i];
}

/* Its backward: dw first (so dx may alias dy), then dx, set or added to. */
static void norm_backward(float *dx, size_t lddx, float *dw, const float *dy, size_t lddy, const float *x,
                          size_t ldx, const float *w, const float *rstd, size_t n, size_t nh, size_t hd,
                          bool accumulate_dx)
{
    int nt = loop_threads(n * nh * hd);
    if (dw) {
        /* dw[i] += sum dy[.,i] * x[.,i] * rs: columns split across threads,
         * vectors in order, so the result does not depend on the thread
         * count. Blocks of 16 columns keep the inner loop vectorised. */
        size_t nblk = (hd + 15) / 16;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t b = 0; b < nblk; b++) {
            size_t j0 = b * 16, j1 = j0 + 16 < hd ? j0 + 16 : hd;
            float acc[16] = { 0 };
            for (size_t t = 0; t < n; t++)
                for (size_t h = 0; h < nh; h++) {
                    const float *xr = x + t * ldx + h * hd, *dyr = dy + t * lddy + h * hd;
                    float rs = rstd[t * nh + h];
#pragma omp simd
                    for (size_t j = j0; j < j1; j++)
                        acc[j - j0] += dyr[j] * xr[j] * rs;
                }
            for (size_t j = j0; j < j1; j++)
                dw[j] += acc[j - j0];
        }
    }
    /* dx = rs * w*dy - rs^3/hd * x * sum(w*dy*x) */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t t = 0; t < n; t++)
        for (size_t h = 0; h < nh; h++) {
            const float *xr = x + t * ldx + h * hd, *dyr = dy + t * lddy + h * hd;
            float *dxr = dx + t * lddx + h * hd;
            float rs = rstd[t * nh + h];
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (size_t i = 0; i < hd; i++)
                dot += w[i] * dyr[i] * xr[i];
            float c = dot * rs * rs * rs / (float)hd;
            if (accumulate_dx) {
#pragma omp simd
                for (size_t i = 0; i < hd; i++)
                    dxr[i] += rs * w[i] * dyr[i] - c * xr[i];
            } else {
#pragma omp simd
                for (size_t i = 0; i < hd; i++)
                    dxr[i] = rs * w[i] * dyr[i] - c * xr[i];
            }
        }
}

void pt__rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, size_t rows,
                        size_t d, float eps)
{
    norm_forward(y, d, rstd, x, d, w, rows, 1, d, eps);
}

void pt__rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                         const float *rstd, size_t rows, size_t d, bool accumulate_dx)
{
    norm_backward(dx, d, dw, dy, d, x, d, w, rstd, rows, 1, d, accumulate_dx);
}

void pt__headnorm_forward(float *y, size_t ldy, float *rstd, const float *x, size_t ldx,
                         const float *w, size_t n, int nheads, int hd, float eps)
{
    norm_forward(y, ldy, rstd, x, ldx, w, n, (size_t)nheads, (size_t)hd, eps);
}

void pt__headnorm_backward(float *dx, size_t lddx, float *dw, const float *dy, size_t lddy,
                          const float *x, size_t ldx, const float *w, const float *rstd,
                          size_t n, int nheads, int hd)
{
    norm_backward(dx, lddx, dw, dy, lddy, x, ldx, w, rstd, n, (size_t)nheads, (size_t)hd, false);
}

/* ---- RoPE ---------------------------------------------------------------------- */

void pt__rope_inv_freq(float *inv_freq, int hd, double theta, int type, double factor,
                      double low_freq_factor, double high_freq_factor, int original_max_pos)
{
    int half = hd / 2;
    for (int j = 0; j < half; j++) {
        /* As Hugging Face: float32 exponent 2j/hd, base ** exponent, 1/that. */
        float expo = (float)(2 * j) / (float)hd;
        float f = (float)(1.0 / pow(theta, (double)expo));
        if (type == 2 && factor > 0) {
            f = (float)((double)f / factor);
        } else if (type == 1 && factor > 0) {
            double old = (double)original_max_pos;
            double low_wl = old / low_freq_factor, high_wl = old / high_freq_factor;
            double wl = 2.0 * M_PI / (double)f;
            double g = wl > low_wl ? (double)f / factor : (double)f;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                double smooth = (old / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
                g = (1.0 - smooth) * g / factor + smooth * g;
            }
            f = (float)g;
        }
        inv_freq[j] = f;
    }
}

void pt__rope_table(float *cos_t, float *sin_t, const int32_t *pos, size_t n, const float *inv_freq,
                   int hd)
{
    size_t half = (size_t)hd / 2;
    int nt = loop_threads(n * half * 8);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t t = 0; t < n; t++) {
        float p = (float)pos[t];
        for (size_t j = 0; j < half; j++) {
            float a = p * inv_freq[j]; /* float32 product, as torch does */
            cos_t[t * half + j] = (float)cos((double)a);
            sin_t[t * half + j] = (float)sin((double)a);
        }
    }
}

void pt__rope_apply(float *x, size_t ld, size_t n, int nheads, int hd, const float *cos_t,
                   const float *sin_t, bool inverse)
{
    const size_t half = (size_t)hd / 2;
    const float sgn = inverse ? -1.0f : 1.0f;
    int nt = loop_threads(n * (size_t)nheads * (size_t)hd);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t t = 0; t < n; t++)
        for (int h = 0; h < nheads; h++)
            pt__rope_head(x + t * ld + (size_t)h * (size_t)hd, half, cos_t + t * half, sin_t + t * half, sgn);
}

/* Not inlined, as pt__rmsnorm_row. */
__attribute__((noinline)) void pt__rope_head(float *x1, size_t half, const float *c, const float *s, float sgn)
{
    float *x2 = x1 + half;
#pragma omp simd
    for (size_t j = 0; j < half; j++) {
        float a = x1[j], b = x2[j], sj = sgn * s[j];
        x1[j] = a * c[j] - b * sj;
        x2[j] = b * c[j] + a * sj;
    }
}

/* ---- SwiGLU ---------------------------------------------------------------------- */

void pt__swiglu_forward(float *h, const float *g, const float *u, size_t rows, size_t n, size_t ld)
{
    int nt = loop_threads(rows * n * 4);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r = 0; r < rows; r++)
        pt__swiglu_row(h + r * n, g + r * ld, u + r * ld, n);
}

/* Not inlined, as pt__rmsnorm_row. */
__attribute__((noinline)) void pt__swiglu_row(float *hr, const float *gr, const float *ur, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float gi = gr[i];
        hr[i] = gi / (1.0f + pt__vexpf(-gi)) * ur[i];
    }
}

void pt__swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u,
                        size_t rows, size_t n, size_t ld)
{
    int nt = loop_threads(rows * n * 4);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *gr = g + r * ld, *ur = u + r * ld, *dhr = dh + r * n;
        float *dgr = dg + r * ld, *dur = du + r * ld;
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float gi = gr[i], d = dhr[i], ui = ur[i];
            float sig = 1.0f / (1.0f + pt__vexpf(-gi));
            dur[i] = d * gi * sig;
            dgr[i] = d * ui * sig * (1.0f + gi * (1.0f - sig));
        }
    }
}

/* ---- Elementwise ------------------------------------------------------------------- */

void pt__colsum_add(float *db, const float *dy, size_t rows, size_t n, size_t ld)
{
    size_t nblk = (n + 15) / 16;
    int nt = loop_threads(rows * n);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b = 0; b < nblk; b++) {
        size_t j0 = b * 16, j1 = j0 + 16 < n ? j0 + 16 : n;
        float acc[16] = { 0 };
        for (size_t r = 0; r < rows; r++) {
            const float *y = dy + r * ld;
#pragma omp simd
            for (size_t j = j0; j < j1; j++)
                acc[j - j0] += y[j];
        }
        for (size_t j = j0; j < j1; j++)
            db[j] += acc[j - j0];
    }
}

void pt__rows_set(float *y, const float *b, size_t rows, size_t n, size_t ld)
{
    for (size_t r = 0; r < rows; r++)
        memcpy(y + r * ld, b, n * sizeof *y);
}

void pt__copy(float *y, const float *x, size_t n)
{
    if (y != x)
        memcpy(y, x, n * sizeof *y);
}

void pt__div_scalar(float *x, size_t n, float d)
{
    int nt = loop_threads(n);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] /= d;
}

/* ---- Embedding ------------------------------------------------------------------------ */

void pt__embedding_forward(float *out, const float *table, const int32_t *ids, size_t n, size_t d)
{
    for (size_t t = 0; t < n; t++)
        memcpy(out + t * d, table + (size_t)ids[t] * d, d * sizeof *out);
}

void pt__embedding_backward(float *dtable, const float *dout, const int32_t *ids, size_t n,
                           size_t d)
{
    size_t nblk = (d + 63) / 64;
    int nt = loop_threads(n * d);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b = 0; b < nblk; b++) {
        size_t j0 = b * 64, j1 = j0 + 64 < d ? j0 + 64 : d;
        for (size_t t = 0; t < n; t++) {
            float *dst = dtable + (size_t)ids[t] * d;
            const float *src = dout + t * d;
#pragma omp simd
            for (size_t j = j0; j < j1; j++)
                dst[j] += src[j];
        }
    }
}

/* ---- Log-softmax ------------------------------------------------------------------------ */

static float row_max(const float *x, size_t v)
{
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (size_t i = 0; i < v; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

void pt__logsoftmax_rows(float *lse, float *lp, const float *logits, const int32_t *target,
                        size_t rows, size_t v)
{
    int nt = loop_threads(rows * v);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * v;
        float m = row_max(x, v);
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (size_t i = 0; i < v; i++)
            s += pt__vexpf(x[i] - m);
        float l = m + logf(s);
        lse[r] = l;
        if (lp)
            lp[r] = target[r] >= 0 ? x[target[r]] - l : 0.0f;
    }
}

/* One pass per row: s = sum e_i and t = sum e_i (x_i - m) with
 * e_i = exp(x_i - m); H = -sum p_i (x_i - lse) = log s - t / s. */
void pt__logsoftmax_entropy_rows(float *lse, float *lp, float *ent, const float *logits,
                                const int32_t *target, size_t rows, size_t v)
{
    int nt = loop_threads(rows * v);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * v;
        float m = row_max(x, v);
        float s = 0.0f, t = 0.0f;
#pragma omp simd reduction(+ : s, t)
        for (size_t i = 0; i < v; i++) {
            float d = x[i] - m, e = pt__vexpf(d);
            s += e;
            t += e * d;
        }
        float ls = logf(s), l = m + ls;
        lse[r] = l;
        ent[r] = ls - t / s;
        if (lp)
            lp[r] = target[r] >= 0 ? x[target[r]] - l : 0.0f;
    }
}

void pt__logsoftmax_backward_rows(float *logits, const float *lse, const float *dlp,
                                 const int32_t *target, size_t rows, size_t v)
{
    int nt = loop_threads(rows * v);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float *x = logits + r * v;
        float g = target[r] >= 0 ? dlp[r] : 0.0f;
        if (g == 0.0f) {
            memset(x, 0, v * sizeof *x);
            continue;
        }
        float l = lse[r], ng = -g;
#pragma omp simd
        for (size_t i = 0; i < v; i++)
            x[i] = ng * pt__vexpf(x[i] - l);
        x[target[r]] += g;
    }
}

void pt__logsoftmax_entropy_backward_rows(float *logits, const float *lse, const float *dlp,
                                         const float *dent, const int32_t *target, size_t rows,
                                         size_t v)
{
    int nt = loop_threads(rows * v);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float *x = logits + r * v;
        float g = target[r] >= 0 ? dlp[r] : 0.0f, e = dent[r];
        if (g == 0.0f && e == 0.0f) {
            memset(x, 0, v * sizeof *x);
            continue;
        }
        const float l = lse[r];
        double h = 0.0; /* H = -sum p_i (x_i - l) */
        for (size_t i = 0; i < v; i++)
            h -= (double)pt__vexpf(x[i] - l) * (double)(x[i] - l);
        const float hf = (float)h, ng = -g;
#pragma omp simd
        for (size_t i = 0; i < v; i++) {
            float lp = x[i] - l, p = pt__vexpf(lp);
            x[i] = ng * p - e * p * (lp + hf);
        }
        if (target[r] >= 0)
            x[target[r]] += g;
    }
}
