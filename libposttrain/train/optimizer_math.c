/* The optimizer's element-wise passes (train/optimizer_math.h). */
#include "train/optimizer_math.h"

#include "core/core.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SUMSQ_BLOCK ((size_t)4096)
/* How far ahead (elements) the memory-bound passes prefetch what they read:
 * the hardware prefetchers alone left them at a fraction of the bandwidth
 * (the sum of squares at 3x the time). */
#define OPT_PREFETCH ((size_t)1024)
#define SUMSQ_LANES 16

typedef float pt_v4f __attribute__((vector_size(16)));
typedef int32_t pt_v4i __attribute__((vector_size(16)));
typedef double pt_v4d __attribute__((vector_size(32)));

/* Sum of squares of block b of g in double over SUMSQ_LANES lanes (lane l
 * sums the elements at l mod SUMSQ_LANES), and the block's max |g|.  Written
 * with vector types: GCC leaves the plain loop scalar. */
static double block_sum_squares(const float *g, size_t n, size_t b, float *gmax)
{
    enum { Q = SUMSQ_LANES / 4 };
    const size_t s = b * SUMSQ_BLOCK, e = s + SUMSQ_BLOCK < n ? s + SUMSQ_BLOCK : n;
    const pt_v4i nosign = { INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX };
    pt_v4d acc[Q] = { { 0 } };
    pt_v4i lmax[Q] = { { 0 } }; /* |g| as bits: non-negative floats order as integers */
    size_t i = s;
    for (; i + SUMSQ_LANES <= e; i += SUMSQ_LANES) {
        __builtin_prefetch(g + i + OPT_PREFETCH, 0, 0); /* a hint: never faults */
        for (int q = 0; q < Q; q++) {
            pt_v4f x;
            memcpy(&x, g + i + 4 * q, sizeof x);
            const pt_v4d d = __builtin_convertvector(x, pt_v4d);
            acc[q] += d * d;
            pt_v4i a = (pt_v4i)x & nosign;
            /* a NaN (bits above the infinity's) is left out, as fmaxf does */
            a &= a <= 0x7f800000;
            const pt_v4i gt = a > lmax[q];
            lmax[q] = (a & gt) | (lmax[q] & ~gt);
        }
    }
    double lane[SUMSQ_LANES];
    float mx = 0.0f;
    for (int q = 0; q < Q; q++)
        for (int l = 0; l < 4; l++) {
            lane[4 * q + l] = acc[q][l];
            const int32_t bits = lmax[q][l];
            float f;
            memcpy(&f, &bits, sizeof f);
            mx = pt__maxf(mx, f);
        }
    for (int l = 0; i < e; i++, l++) {
        const double x = (double)g[i];
        lane[l] += x * x;
        mx = pt__maxf(mx, fabsf(g[i]));
    }
    double sum = 0;
    for (int l = 0; l < SUMSQ_LANES; l++)
        sum += lane[l];
    *gmax = mx;
    return sum;
}

double pt__opt_sum_squares(const float *g, size_t n, float *gmax, int threads)
{
    size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double total = 0;
    float mx = 0.0f;
    double *partial = nb > 1 ? malloc(nb * sizeof *partial) : NULL;
    if (partial) {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : mx)
        for (size_t b = 0; b < nb; b++) {
            float bm;
            partial[b] = block_sum_squares(g, n, b, &bm);
            mx = pt__maxf(mx, bm);
        }
        for (size_t b = 0; b < nb; b++)
            total += partial[b];
        free(partial);
    } else {
        for (size_t b = 0; b < nb; b++) {
            float bm;
            total += block_sum_squares(g, n, b, &bm);
            mx = pt__maxf(mx, bm);
        }
    }
    *gmax = mx;
    return total;
}

/* One AdamW element: the new weight, first and second moment.  The check
 * and the update both call it, so the check sees exactly the values the
 * update would write. */
static inline void adamw_elem(float *wo, float *mo, float *vo, float w, float g, float m, float v,
                              float clip, float decay, const pt_adamw_consts *c)
{
    float gj = g * clip;
    float wj = w * decay;
    float mj = c->b1 * m + (1.0f - c->b1) * gj;
    float vj = c->b2 * v + (1.0f - c->b2) * gj * gj;
    *mo = mj;
    *vo = vj;
    *wo = wj - c->step_size * mj / (sqrtf(vj) / c->sqrt_bc2 + c->eps);
}

bool pt__adamw_span_bad(const float *w, const float *g, const float *m, const float *v, size_t n,
                       float clip, float decay, const pt_adamw_consts *c, int threads)
{
    int bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : bad)
    for (size_t j = 0; j < n; j++) {
        float wj, mj, vj;
        adamw_elem(&wj, &mj, &vj, w[j], g[j], m[j], v[j], clip, decay, c);
        bad |= !isfinite(wj) || !isfinite(mj) || !isfinite(vj);
    }
    return bad != 0;
}

void pt__adamw_span_update(float *w, float *g, float *m, float *v, pt_bf16 *w16, size_t n,
                          float clip, float decay, const pt_adamw_consts *c, pt_opt_maxima *mx,
                          int threads)
{
    float xw = 0.0f, xm = 0.0f, xv = 0.0f;
    if (w16) {
#pragma omp parallel for simd num_threads(threads) schedule(static) \
    reduction(max : xw, xm, xv)
        for (size_t j = 0; j < n; j++) {
            adamw_elem(&w[j], &m[j], &v[j], w[j], g[j], m[j], v[j], clip, decay, c);
            g[j] = 0.0f;
            w16[j] = pt__f32_to_bf16(w[j]);
            xw = pt__maxf(xw, fabsf(w[j]));
            xm = pt__maxf(xm, fabsf(m[j]));
            xv = pt__maxf(xv, v[j]);
        }
    } else {
#pragma omp parallel for simd num_threads(threads) schedule(static) \
    reduction(max : xw, xm, xv)
        for (size_t j = 0; j < n; j++) {
            adamw_elem(&w[j], &m[j], &v[j], w[j], g[j], m[j], v[j], clip, decay, c);
            g[j] = 0.0f;
            xw = pt__maxf(xw, fabsf(w[j]));
            xm = pt__maxf(xm, fabsf(m[j]));
            xv = pt__maxf(xv, v[j]);
        }
    }
    mx->w = pt__maxf(mx->w, xw);
    mx->m = pt__maxf(mx->m, xm);
    mx->v = pt__maxf(mx->v, xv);
}

bool pt__adamw_bounded(const pt_opt_maxima *mx, float gmax, float clip, float decay_max,
                      const pt_adamw_consts *c)
{
    const double big = (double)FLT_MAX / 4;
    if (!(c->eps > 0) || !(c->sqrt_bc2 > 0) || !isfinite(c->step_size) || !(c->b1 >= 0) ||
        !(c->b1 <= 1) || !(c->b2 >= 0) || !(c->b2 <= 1))
        return false;
    const double g = (double)gmax * fabs((double)clip);
    const double mbound = fmax((double)mx->m, g);             /* |m'| */
    const double vbound = fmax((double)mx->v, g * g);         /* v' */
    const double step = fabs((double)c->step_size) * mbound / (double)c->eps;
    const double wbound = (double)mx->w * fabs((double)decay_max) + step; /* |w'| */
    return g * g < big && mbound < big && vbound < big && wbound < big && step < big;
}

/* One SGD element: the new weight and momentum buffer. */
static inline void sgd_elem(float *wo, float *bo, float w, float g, float buf, float clip, float wd,
                            float mom, bool first, float flr)
{
    float gj = g * clip + wd * w;
    float bj = mom == 0.0f ? gj : (first ? gj : mom * buf + gj);
    *bo = bj;
    *wo = w - flr * bj;
}

bool pt__sgd_span_bad(const float *w, const float *g, const float *buf, size_t n, float clip,
                     float wd, float mom, bool first, float lr, int threads)
{
    int bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : bad)
    for (size_t j = 0; j < n; j++) {
        float wj, bj;
        sgd_elem(&wj, &bj, w[j], g[j], buf[j], clip, wd, mom, first, lr);
        bad |= !isfinite(wj) || !isfinite(bj);
    }
    return bad != 0;
}

void pt__sgd_span_update(float *w, const float *g, float *buf, size_t n, float clip, float wd,
                        float mom, bool first, float lr, int threads)
{
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (size_t j = 0; j < n; j++)
        sgd_elem(&w[j], &buf[j], w[j], g[j], buf[j], clip, wd, mom, first, lr);
}
