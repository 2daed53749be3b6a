#include "kernels/attention.h"

#include "core/core.h"
#include "kernels/gemm.h"
#include "kernels/tile_gemm.h"
#include "kernels/vexp.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#define DEFAULT_TILE_Q 64
#define DEFAULT_TILE_K 128

static int tile_q(const pt_attn_shape *s)
{
    return s->tile_q > 0 ? s->tile_q : DEFAULT_TILE_Q;
}

static int tile_k(const pt_attn_shape *s)
{
    return s->tile_k > 0 ? s->tile_k : DEFAULT_TILE_K;
}

/* Row strides of q, k and v, and out: packed rows when the shape says 0. */
static size_t ld_q(const pt_attn_shape *s)
{
    return s->ldq ? s->ldq : (size_t)s->nh * s->hd;
}

static size_t ld_kv(const pt_attn_shape *s)
{
    return s->ldkv ? s->ldkv : (size_t)s->nkv * s->hd;
}

static size_t ld_o(const pt_attn_shape *s)
{
    return s->ldo ? s->ldo : (size_t)s->nh * s->hd;
}

/* The largest side of any tile product of a pass (the packing space of the
 * BF16 tiles holds operands of d x d). */
static size_t pack_side(int tq, int tk, int hd)
{
    int d = tq > tk ? tq : tk;
    return (size_t)(d > hd ? d : hd);
}

static size_t per_thread_floats(const pt_attn_shape *s)
{
    size_t tq = (size_t)tile_q(s), tk = (size_t)tile_k(s);
    size_t fwd = tq * tk + tq * (size_t)s->hd + 2 * tq;
    size_t bwd = 2 * tq * tk + tq;
    size_t n = fwd > bwd ? fwd : bwd;
    /* BF16 packing space of the tile products (two BF16 values a float) */
    size_t d = pack_side(tile_q(s), tile_k(s), s->hd);
    n += (pt__tile_gemm_pack_elems(d, d, d) + 1) / 2 + 16;
    return (n + 15) & ~(size_t)15; /* keep each thread's slice 64-byte aligned */
}

size_t pt__attention_scratch_floats(const pt_attn_shape *s, int nthreads)
{
    return per_thread_floats(s) * (size_t)(nthreads < 1 ? 1 : nthreads);
}

/* First key index a query tile starting at i0 can see. */
static int key_start(const pt_attn_shape *s, int i0)
{
    if (s->window > 0 && i0 - s->window + 1 > 0)
        return i0 - s->window + 1;
    return 0;
}

/* True when every (i, j) of the tile is visible, so no mask is needed. */
static int tile_unmasked(const pt_attn_shape *s, int i0, int i1, int j0, int j1)
{
    if (s->seg)
        return 0;
    if (j1 - 1 > i0) /* some j > some i */
        return 0;
    if (s->window > 0 && (i1 - 1) - j0 >= s->window)
        return 0;
    return 1;
}

static int visible(const pt_attn_shape *s, const int32_t *seg, int i, int j)
{
    if (j > i)
        return 0;
    if (s->window > 0 && i - j >= s->window)
        return 0;
    if (seg && seg[i] != seg[j])
        return 0;
    return 1;
}

/* Sr[c] = fill for the keys j0 + c (c < nk) that query i does not see: a
 * tail of the row under the causal mask alone, key by key with segments
 * or a window. */
static void mask_row(const pt_attn_shape *s, const int32_t *seg, int i, int j0, float *Sr, int nk,
                     float fill)
{
    if (!seg && s->window <= 0) {
        for (int c = i - j0 + 1 > 0 ? i - j0 + 1 : 0; c < nk; c++)
            Sr[c] = fill;
        return;
    }
    for (int c = 0; c < nk; c++)
        if (!visible(s, seg, i, j0 + c))
            Sr[c] = fill;
}

/* The largest of x[0..n) (NaN skipped; -inf when none), in 16 lanes
 * (vmaxps: a > b ? a : b, the scalar loop's own selection). */
static float row_max(const float *x, int n)
{
    float lane[16];
    for (int l = 0; l < 16; l++)
        lane[l] = -INFINITY;
    int c = 0;
    for (; c + 16 <= n; c += 16)
        for (int l = 0; l < 16; l++)
            lane[l] = x[c + l] > lane[l] ? x[c + l] : lane[l];
    float mt = -INFINITY;
    for (int l = 0; l < 16; l++)
        mt = lane[l] > mt ? lane[l] : mt;
    for (; c < n; c++)
        mt = x[c] > mt ? x[c] : mt;
    return mt;
}

static int num_threads_for(const pt_attn_shape *s, size_t tasks)
{
    int nt = pt_get_num_threads();
    /* Below ~4 MFLOP of scores a second thread costs more than it saves. */
    int span = s->window > 0 && s->window < s->seq ? s->window : s->seq;
    double work = (double)s->batch * s->nh * (double)s->seq * span * s->hd;
    if (work < 2e6)
        nt = 1;
    if (s->max_threads > 0 && nt > s->max_threads)
        nt = s->max_threads;
    if ((size_t)nt > tasks)
        nt = (int)tasks;
    return nt < 1 ? 1 : nt;
}

/* What both passes derive from the shape: sizes, tiles, the row strides of
 * q (and dq), k and v (and dk, dv), out (and dout), and each thread's
 * scratch (per floats). */
typedef struct attn_dims {
    int T, nh, hd, group, tq, tk;
    size_t ldq, ldk, ldo, per;
    pt_tile_mode tiles; /* BF16 tile products, or PT_TILE_OFF: FP32 */
} attn_dims;

static attn_dims dims_of(const pt_attn_shape *s)
{
    attn_dims a = { s->seq, s->nh, s->hd, s->nh / s->nkv, tile_q(s), tile_k(s),
                    ld_q(s), ld_kv(s), ld_o(s), per_thread_floats(s),
                    s->bf16 ? pt__tile_mode() : PT_TILE_OFF };
    return a;
}

/* The packing space at the end of a thread's scratch (64-byte aligned). */
static pt_bf16 *tile_pack(const attn_dims *a, float *scratch)
{
    uintptr_t end = (uintptr_t)(scratch + a->per);
    size_t d = pack_side(a->tq, a->tk, a->hd);
    uintptr_t p = end - pt__tile_gemm_pack_elems(d, d, d) * sizeof(pt_bf16);
    return (pt_bf16 *)(p & ~(uintptr_t)63);
}

/* One tile product C = alpha op(A) op(B) + beta C: BF16 tiles when the
 * pass has them, FP32 (one thread of BLIS) otherwise. */
static void tile_product(const attn_dims *d, float *scratch, bool ta, bool tb, int m, int n, int k,
                         float alpha, const float *a, size_t lda, const float *b, size_t ldb,
                         float beta, float *c, size_t ldc)
{
    if (d->tiles != PT_TILE_OFF &&
        pt__tile_gemm(d->tiles, ta, tb, (size_t)m, (size_t)n, (size_t)k, alpha, a, lda, b, ldb,
                      beta, c, ldc, tile_pack(d, scratch)))
        return;
    pt__sgemm_nt(1, ta, tb, (size_t)m, (size_t)n, (size_t)k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Offsets of query (or output) head h and of kv head g of sequence b. */
static size_t q_at(const attn_dims *a, int b, int h)
{
    return (size_t)b * a->T * a->ldq + (size_t)h * a->hd;
}

static size_t o_at(const attn_dims *a, int b, int h)
{
    return (size_t)b * a->T * a->ldo + (size_t)h * a->hd;
}

static size_t kv_at(const attn_dims *a, int b, int g)
{
    return (size_t)b * a->T * a->ldk + (size_t)g * a->hd;
}

/* The scratch of the calling thread. */
static float *thread_scratch(float *scratch, const attn_dims *a)
{
    return scratch + a->per * (size_t)omp_get_thread_num();
}

/* The scores of query rows i0..i1 of a head against keys j0..j1 of its kv
 * head: S = scale Q K^T (rows of tile_k floats); returns whether the tile
 * is all visible (no mask needed). */
static int tile_scores(float *S, const float *Q, const float *K, const pt_attn_shape *s,
                       const attn_dims *dims, int i0, int i1, int j0, int j1)
{
    tile_product(dims, S, false, true, i1 - i0, j1 - j0, dims->hd, s->scale,
                 Q + (size_t)i0 * dims->ldq, dims->ldq, K + (size_t)j0 * dims->ldk, dims->ldk, 0.0f,
                 S, (size_t)dims->tk);
    return tile_unmasked(s, i0, i1, j0, j1);
}

/* The forward pass of query head h of sequence b. */
static void forward_head(float *out, float *lse, const float *q, const float *k, const float *v,
                         const pt_attn_shape *s, const attn_dims *dims, int b, int h, float *S)
{
    const int T = dims->T, hd = dims->hd, tq = dims->tq, tk = dims->tk;
    const size_t ldk = dims->ldk, ldo = dims->ldo;
    const int g = h / dims->group;
    float *O = S + (size_t)tq * tk, *m = O + (size_t)tq * hd, *l = m + tq;
    const float *Q = q + q_at(dims, b, h), *K = k + kv_at(dims, b, g), *V = v + kv_at(dims, b, g);
    const int32_t *seg = s->seg ? s->seg + (size_t)b * T : NULL;
    float *Out = out + o_at(dims, b, h);
    float *Lse = lse + ((size_t)b * dims->nh + h) * T;

    for (int i0 = 0; i0 < T; i0 += tq) {
        int i1 = i0 + tq < T ? i0 + tq : T, nq = i1 - i0;
        memset(O, 0, (size_t)nq * hd * sizeof *O);
        for (int r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        for (int j0 = key_start(s, i0); j0 < i1; j0 += tk) {
            int j1 = j0 + tk < i1 ? j0 + tk : i1, nk = j1 - j0;
            int full = tile_scores(S, Q, K, s, dims, i0, i1, j0, j1);
            for (int r = 0; r < nq; r++) {
                float *Sr = S + (size_t)r * tk;
                int i = i0 + r;
                if (!full)
                    mask_row(s, seg, i, j0, Sr, nk, -INFINITY);
                float mt = row_max(Sr, nk);
                float mn = mt > m[r] ? mt : m[r];
                if (mn == -INFINITY) {
                    memset(Sr, 0, (size_t)nk * sizeof *Sr);
                    continue;
                }
                float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mn); /* scalar: once per row */
                float sum = pt__vexp_sum(Sr, Sr, (size_t)nk, mn);
                l[r] = l[r] * alpha + sum;
                m[r] = mn;
                if (alpha != 1.0f) {
                    float *Or = O + (size_t)r * hd;
#pragma omp simd
                    for (int d = 0; d < hd; d++)
                        Or[d] *= alpha;
                }
            }
            tile_product(dims, S, false, false, nq, hd, nk, 1.0f, S, (size_t)tk,
                         V + (size_t)j0 * ldk, ldk, 1.0f, O, (size_t)hd);
        }
        for (int r = 0; r < nq; r++) {
            float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            float *dst = Out + (size_t)(i0 + r) * ldo;
            const float *Or = O + (size_t)r * hd;
#pragma omp simd
            for (int d = 0; d < hd; d++)
                dst[d] = Or[d] * inv;
            Lse[i0 + r] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
        }
    }
}

void pt__attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                          const pt_attn_shape *s, float *scratch)
{
    const attn_dims a = dims_of(s);
    const size_t tasks = (size_t)s->batch * a.nh;
    int nt = num_threads_for(s, tasks);

#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t task = 0; task < tasks; task++)
        forward_head(out, lse, q, k, v, s, &a, (int)(task / (size_t)a.nh),
                     (int)(task % (size_t)a.nh), thread_scratch(scratch, &a));
}

/* The backward pass of kv head g of sequence b: it owns dk and dv of that
 * head and dq of the query heads that read it. */
static void backward_kv_head(float *dq, float *dk, float *dv, const float *dout, const float *q,
                             const float *k, const float *v, const float *out, const float *lse,
                             const pt_attn_shape *s, const attn_dims *dims, int b, int g, float *P)
{
    const int T = dims->T, nh = dims->nh, hd = dims->hd, tq = dims->tq, tk = dims->tk;
    const int group = dims->group;
    const size_t ldq = dims->ldq, ldk = dims->ldk, ldo = dims->ldo;
    float *dP = P + (size_t)tq * tk, *D = dP + (size_t)tq * tk;
    const float *K = k + kv_at(dims, b, g), *V = v + kv_at(dims, b, g);
    float *dK = dk + kv_at(dims, b, g), *dV = dv + kv_at(dims, b, g);
    const int32_t *seg = s->seg ? s->seg + (size_t)b * T : NULL;
    for (int t = 0; t < T; t++) {
        memset(dK + (size_t)t * ldk, 0, (size_t)hd * sizeof *dK);
        memset(dV + (size_t)t * ldk, 0, (size_t)hd * sizeof *dV);
    }
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *Q = q + q_at(dims, b, h), *O = out + o_at(dims, b, h);
        const float *dO = dout + o_at(dims, b, h);
        float *dQ = dq + q_at(dims, b, h);
        const float *Lse = lse + ((size_t)b * nh + h) * T;
        for (int t = 0; t < T; t++)
            memset(dQ + (size_t)t * ldq, 0, (size_t)hd * sizeof *dQ);
        for (int i0 = 0; i0 < T; i0 += tq) {
            int i1 = i0 + tq < T ? i0 + tq : T, nq = i1 - i0;
            for (int r = 0; r < nq; r++) {
                const float *a = dO + (size_t)(i0 + r) * ldo, *o = O + (size_t)(i0 + r) * ldo;
                float d = 0.0f;
#pragma omp simd reduction(+ : d)
                for (int x = 0; x < hd; x++)
                    d += a[x] * o[x];
                D[r] = d;
            }
            for (int j0 = key_start(s, i0); j0 < i1; j0 += tk) {
                int j1 = j0 + tk < i1 ? j0 + tk : i1, nk = j1 - j0;
                int full = tile_scores(P, Q, K, s, dims, i0, i1, j0, j1);
                for (int r = 0; r < nq; r++) {
                    float *Pr = P + (size_t)r * tk;
                    float L = Lse[i0 + r];
#pragma omp simd
                    for (int c = 0; c < nk; c++)
                        Pr[c] = pt__vexpf(Pr[c] - L);
                    if (!full)
                        mask_row(s, seg, i0 + r, j0, Pr, nk, 0.0f);
                }
                /* dV += P^T dO */
                tile_product(dims, P, true, false, nk, hd, nq, 1.0f, P, (size_t)tk,
                             dO + (size_t)i0 * ldo, ldo, 1.0f, dV + (size_t)j0 * ldk, ldk);
                /* dP = dO V^T */
                tile_product(dims, P, false, true, nq, nk, hd, 1.0f, dO + (size_t)i0 * ldo, ldo,
                             V + (size_t)j0 * ldk, ldk, 0.0f, dP, (size_t)tk);
                /* dS = P * (dP - D) * scale, into dP */
                for (int r = 0; r < nq; r++) {
                    float *Pr = P + (size_t)r * tk, *dPr = dP + (size_t)r * tk;
                    float Dr = D[r], sc = s->scale;
#pragma omp simd
                    for (int c = 0; c < nk; c++)
                        dPr[c] = Pr[c] * (dPr[c] - Dr) * sc;
                }
                /* dQ += dS K ; dK += dS^T Q */
                tile_product(dims, P, false, false, nq, hd, nk, 1.0f, dP, (size_t)tk,
                             K + (size_t)j0 * ldk, ldk, 1.0f, dQ + (size_t)i0 * ldq, ldq);
                tile_product(dims, P, true, false, nk, hd, nq, 1.0f, dP, (size_t)tk,
                             Q + (size_t)i0 * ldq, ldq, 1.0f, dK + (size_t)j0 * ldk, ldk);
            }
        }
    }
}

void pt__attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, const float *lse,
                           const pt_attn_shape *s, float *scratch)
{
    const attn_dims a = dims_of(s);
    /* One task per (batch, kv head), so no two threads write the same float. */
    const int nkv = s->nkv;
    const size_t tasks = (size_t)s->batch * nkv;
    int nt = num_threads_for(s, tasks);

#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t task = 0; task < tasks; task++)
        backward_kv_head(dq, dk, dv, dout, q, k, v, out, lse, s, &a, (int)(task / (size_t)nkv),
                         (int)(task % (size_t)nkv), thread_scratch(scratch, &a));
}
