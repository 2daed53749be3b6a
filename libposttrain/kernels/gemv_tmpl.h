/* The body of the small-m kernels (kernels/gemv.h), written once and
 * included by each path's file after it has defined:
 *   GV_TARGET            function attribute for the path (may be empty)
 *   GV_VEC, GV_VW        the vector type and its width in floats
 *   GV_RMAX, GV_CMAX     register block: rows of W x rows of x (at most 4 x 6)
 *   GV_NAME_F32/_BF16    the names of the two kernels to define
 *   GV_MASK              the type of a tail mask
 * and the inline functions (all GV_TARGET):
 *   gv_zero(), gv_load(const float *), gv_load_bf16(const uint16_t *),
 *   gv_mask(size_t t) for the first t < GV_VW lanes,
 *   gv_load_tail(const float *, GV_MASK), gv_load_bf16_tail(const uint16_t *,
 *   GV_MASK, size_t t) (other lanes 0), gv_fma(a, b, acc) = a * b + acc,
 *   gv_hsum(v) (the fixed tree of kernels/gemv.h), gv_hsum_vw(a, out) (the
 *   same for GV_VW vectors at once, bit for bit), and GV_HSUM_MIN.
 * Every output element gets its own accumulator and the operations listed
 * in kernels/gemv.h, whatever block it falls in: the block shape only
 * decides how many accumulators run side by side. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GV_INLINE static inline __attribute__((always_inline)) GV_TARGET

/* s[r][c] = row r of W (r < R) . row c of x (c < C), over k values.  R, C
 * and bf16 are constants after inlining, so the loops unroll and the
 * accumulators live in registers. */
GV_INLINE void gv_micro(const int R, const int C, const bool bf16, size_t k, const void *w,
                        size_t ldw, const float *x, size_t ldx, float s[GV_RMAX][GV_CMAX])
{
    const float *wf = (const float *)w;
    const uint16_t *wh = (const uint16_t *)w;
    const size_t esz = bf16 ? sizeof(uint16_t) : sizeof(float);
    GV_VEC acc[GV_RMAX][GV_CMAX];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            acc[r][c] = gv_zero();
    size_t p = 0;
    for (; p + GV_VW <= k; p += GV_VW) {
        GV_VEC xv[GV_CMAX];
        for (int c = 0; c < C; c++)
            xv[c] = gv_load(x + (size_t)c * ldx + p);
        for (int r = 0; r < R; r++) {
            /* The same columns of the next R rows, so they stream in while
             * these are multiplied (the hardware prefetchers alone left
             * BF16 weights at 2/3 of FP32's bytes per second; issuing it
             * only for the first group of x rows measured slower).  Into
             * L2 (the L1 holds the x rows; as fast as into L1, within the
             * noise).  A hint, never a fault, even past the end of W. */
            const char *wr = (const char *)w + ((size_t)r * ldw + p) * esz;
            __builtin_prefetch((const void *)((uintptr_t)wr + (uintptr_t)R * ldw * esz), 0, 2);
            GV_VEC wv = bf16 ? gv_load_bf16((const uint16_t *)wr) : gv_load((const float *)wr);
            for (int c = 0; c < C; c++)
                acc[r][c] = gv_fma(wv, xv[c], acc[r][c]);
        }
    }
    if (p < k) {
        const size_t t = k - p;
        const GV_MASK mk = gv_mask(t);
        GV_VEC xv[GV_CMAX];
        for (int c = 0; c < C; c++)
            xv[c] = gv_load_tail(x + (size_t)c * ldx + p, mk);
        for (int r = 0; r < R; r++) {
            GV_VEC wv = bf16 ? gv_load_bf16_tail(wh + (size_t)r * ldw + p, mk, t)
                             : gv_load_tail(wf + (size_t)r * ldw + p, mk);
            for (int c = 0; c < C; c++)
                acc[r][c] = gv_fma(wv, xv[c], acc[r][c]);
        }
    }
    if (R * C < GV_HSUM_MIN) {
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                s[r][c] = gv_hsum(acc[r][c]);
        return;
    }
    /* GV_VW accumulators at a time (the missing ones 0): same sums. */
    for (int e0 = 0; e0 < R * C; e0 += GV_VW) {
        GV_VEC v[GV_VW];
        float o[GV_VW];
        for (int e = 0; e < GV_VW; e++)
            v[e] = e0 + e < R * C ? acc[(e0 + e) / C][(e0 + e) % C] : gv_zero();
        gv_hsum_vw(v, o);
        for (int e = 0; e < GV_VW && e0 + e < R * C; e++)
            s[(e0 + e) / C][(e0 + e) % C] = o[e];
    }
}

#define GV_CASE(R_, C_)                                                                  \
    case (R_) * 8 + (C_):                                                                \
        gv_micro((R_), (C_), bf16, k, wj, ldw, xi, ldx, s);                              \
        break;
#if GV_CMAX >= 4
#define GV_CASES_4(R_) GV_CASE(R_, 4)
#else
#define GV_CASES_4(R_)
#endif
#if GV_CMAX >= 6
#define GV_CASES_5_6(R_) GV_CASE(R_, 5) GV_CASE(R_, 6)
#elif GV_CMAX >= 5
#define GV_CASES_5_6(R_) GV_CASE(R_, 5)
#else
#define GV_CASES_5_6(R_)
#endif
#define GV_CASES(R_) GV_CASE(R_, 1) GV_CASE(R_, 2) GV_CASE(R_, 3) GV_CASES_4(R_) GV_CASES_5_6(R_)

/* Rows [j, j + jn) of W (wj) against rows [i, i + C) of x (xi), GV_RMAX
 * rows of W at a time. */
GV_INLINE void gv_panel(const bool bf16, const int C, size_t jn, size_t k, float alpha,
                        const float *xi, size_t ldx, const void *wj, size_t ldw, float beta,
                        float *yi, size_t ldy)
{
    const size_t esz = bf16 ? sizeof(uint16_t) : sizeof(float);
    for (size_t j = 0; j < jn; j += GV_RMAX, wj = (const char *)wj + GV_RMAX * ldw * esz) {
        const int R = jn - j < GV_RMAX ? (int)(jn - j) : GV_RMAX;
        float s[GV_RMAX][GV_CMAX];
        switch (R * 8 + C) {
            GV_CASES(1)
#if GV_RMAX >= 2
            GV_CASES(2)
#endif
#if GV_RMAX >= 3
            GV_CASES(3)
#endif
#if GV_RMAX >= 4
            GV_CASES(4)
#endif
        default:
            __builtin_unreachable();
        }
        for (int c = 0; c < C; c++) {
            float *yc = yi + (size_t)c * ldy + j;
            for (int r = 0; r < R; r++)
                yc[r] = beta == 0.0f ? alpha * s[r][c] : fmaf(beta, yc[r], alpha * s[r][c]);
        }
    }
}

/* Rows of W per panel: a panel (at most GV_PANEL_BYTES) stays in L2 while
 * every group of GV_CMAX rows of x (in L1) runs against it. */
#define GV_PANEL_BYTES (192u << 10)

/* All m rows of x against the len rows of W, a panel of W at a time. */
GV_INLINE void gv_block(const bool bf16, size_t m, size_t len, size_t k, float alpha,
                        const float *x, size_t ldx, const void *w, size_t ldw, float beta,
                        float *y, size_t ldy)
{
    const size_t esz = bf16 ? sizeof(uint16_t) : sizeof(float);
    size_t jb = GV_PANEL_BYTES / (ldw * esz + 1);
    jb = jb < GV_RMAX ? GV_RMAX : jb / GV_RMAX * GV_RMAX;
    for (size_t j = 0; j < len; j += jb) {
        const size_t jn = len - j < jb ? len - j : jb;
        const void *wj = (const char *)w + j * ldw * esz;
        for (size_t i = 0; i < m; i += GV_CMAX) {
            const int C = m - i < GV_CMAX ? (int)(m - i) : GV_CMAX;
            gv_panel(bf16, C, jn, k, alpha, x + i * ldx, ldx, wj, ldw, beta, y + i * ldy + j,
                     ldy);
        }
    }
}

PT_GEMV_DEFINE_KERNELS(GV_TARGET, GV_NAME_F32, GV_NAME_BF16, gv_block)
