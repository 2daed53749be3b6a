/* Small-m products on quantized weights (kernels/qgemv.h): the activation
 * quantization, the scalar reference of every type (the arithmetic the
 * SIMD kernels of kernels/qgemv_avx2.c and qgemv_avx512.c reproduce bit for
 * bit), the run-time choice of kernel and the threads.
 *
 * Facts (block layouts, ggml's activation formats and dot-product
 * formulas) from llama.cpp's ggml-quants.c and ggml-cpu-quants.c; the code
 * is ours. */
#include "kernels/qgemv.h"

#include "core/core.h"
#include "io/gguf.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of W a thread takes at a time. */
#define QGEMV_BLOCK 16

typedef struct qtype {
    int type;
    size_t blk, bytes; /* values and bytes of a block */
} qtype;

static const qtype k_types[] = {
    { PT_GGML_Q4_0, PT_QK, sizeof(pt_block_q4_0) },   { PT_GGML_Q4_1, PT_QK, sizeof(pt_block_q4_1) },
    { PT_GGML_Q5_0, PT_QK, sizeof(pt_block_q5_0) },   { PT_GGML_Q5_1, PT_QK, sizeof(pt_block_q5_1) },
    { PT_GGML_Q8_0, PT_QK, sizeof(pt_block_q8_0) },   { PT_GGML_Q4_K, PT_QK_K, sizeof(pt_block_q4_K) },
    { PT_GGML_Q5_K, PT_QK_K, sizeof(pt_block_q5_K) }, { PT_GGML_Q6_K, PT_QK_K, sizeof(pt_block_q6_K) },
};

static const qtype *qtype_of(int type)
{
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].type == type)
            return &k_types[i];
    return NULL;
}

bool pt_qgemv_supported(int type)
{
    return qtype_of(type) != NULL;
}

/* ---- activations ---- */

/* Q8_0 / Q8_1 style, 32 values a block (kernels/qgemv.h). */
static void quant_row_32(const float *x, size_t k, int8_t *q, float *d, float *s, int32_t *sum)
{
    for (size_t b = 0; b < k / PT_QK; b++) {
        const float *xb = x + b * PT_QK;
        int8_t *qb = q + b * PT_QK;
        float amax = 0.0f;
        bool bad = false;
        for (int j = 0; j < PT_QK; j++) {
            float a = fabsf(xb[j]);
            if (!(a <= FLT_MAX))
                bad = true;
            else if (a > amax)
                amax = a;
        }
        if (bad) {
            memset(qb, 0, PT_QK);
            d[b] = s[b] = NAN;
            sum[b] = 0;
            continue;
        }
        const float dd = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int t = 0;
        for (int j = 0; j < PT_QK; j++) {
            float v = rintf(xb[j] * id);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            qb[j] = (int8_t)v;
            t += qb[j];
        }
        d[b] = pt_q_round_f16(dd);
        s[b] = pt_q_round_f16(dd * (float)t);
        sum[b] = t;
    }
}

/* Q8_K style, 256 values a block (kernels/qgemv.h). */
static void quant_row_K(const float *x, size_t k, int8_t *q, float *d, int16_t *bsum)
{
    for (size_t b = 0; b < k / PT_QK_K; b++) {
        const float *xb = x + b * PT_QK_K;
        int8_t *qb = q + b * PT_QK_K;
        float amax = 0.0f, vmax = 0.0f;
        bool bad = false;
        for (int j = 0; j < PT_QK_K; j++) {
            float a = fabsf(xb[j]);
            if (!(a <= FLT_MAX))
                bad = true;
            else if (a > amax)
                amax = a, vmax = xb[j];
        }
        memset(bsum + b * 16, 0, 16 * sizeof *bsum);
        if (bad || amax == 0.0f) {
            memset(qb, 0, PT_QK_K);
            d[b] = bad ? NAN : 0.0f;
            continue;
        }
        const float iscale = -127.0f / vmax;
        for (int j = 0; j < PT_QK_K; j++) {
            float v = rintf(iscale * xb[j]);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            qb[j] = (int8_t)v;
            bsum[b * 16 + j / 16] = (int16_t)(bsum[b * 16 + j / 16] + qb[j]);
        }
        d[b] = 1.0f / iscale;
    }
}

/* Quantize the m rows of x for weights of type t into a (one allocation:
 * a->q; free it alone); ref: with the scalar code (else AVX2's, the same
 * values).  Padding (blocks up to a multiple of 8) is zero. */
static int act_make(const qtype *t, size_t m, size_t k, const float *x, size_t ldx, bool ref,
                    pt_qact *a)
{
    const size_t nb = k / t->blk;
    a->m = m;
    a->nbp = (nb + 7) / 8 * 8;
    a->kp = t->blk == PT_QK ? a->nbp * PT_QK : k;
    const size_t kp = (a->kp + 63) / 64 * 64; /* keep the arrays after q aligned */
    size_t bytes = m * kp + m * a->nbp * (2 * sizeof(float) + sizeof(int32_t) + 16 * sizeof(int16_t));
    uint8_t *buf = calloc(1, bytes + 64);
    if (!buf)
        return pt_err(PT_ENOMEM, "pt_qgemv_rows: no memory for %zu quantized activations", m * k);
    a->q = (int8_t *)buf;
    a->d = (float *)(buf + m * kp);
    a->s = a->d + m * a->nbp;
    a->sum = (int32_t *)(a->s + m * a->nbp);
    a->bsum = (int16_t *)(a->sum + m * a->nbp);
    const size_t ldq = a->kp;
    for (size_t i = 0; i < m; i++) {
#if defined(__x86_64__) && defined(__GNUC__)
        if (!ref && t->blk == PT_QK)
            pt_qgemv_quant32_avx2(x + i * ldx, k, a->q + i * ldq, a->d + i * a->nbp,
                                  a->s + i * a->nbp, a->sum + i * a->nbp);
        else if (!ref)
            pt_qgemv_quantK_avx2(x + i * ldx, k, a->q + i * ldq, a->d + i * a->nbp,
                                 a->bsum + i * a->nbp * 16);
        else
#else
        (void)ref;
#endif
        if (t->blk == PT_QK)
            quant_row_32(x + i * ldx, k, a->q + i * ldq, a->d + i * a->nbp, a->s + i * a->nbp,
                         a->sum + i * a->nbp);
        else
            quant_row_K(x + i * ldx, k, a->q + i * ldq, a->d + i * a->nbp, a->bsum + i * a->nbp * 16);
    }
    return PT_OK;
}

/* ---- the scalar reference ---- */

typedef struct refblk {
    int32_t i, j;  /* the block's integer sums I and J */
    float dw, mw;  /* W's scale, and its min (Q4_1, Q5_1) or dmin (Q4_K, Q5_K) */
} refblk;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j. */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Blocks of 32: nibbles (Q4_0, Q4_1) or 5-bit values (Q5_0, Q5_1, qh set),
 * minus off, against q. */
static int32_t ref_small(const uint8_t *qs, const uint8_t *qh, int off, const int8_t *q)
{
    const uint32_t h = qh ? le32(qh) : 0;
    int32_t s = 0;
    for (int j = 0; j < 16; j++) {
        int v0 = (qs[j] & 0xF) | (int)((h >> j) & 1) << 4;
        int v1 = (qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
        s += (v0 - off) * q[j] + (v1 - off) * q[j + 16];
    }
    return s;
}

/* Q4_K (qh NULL) and Q5_K. */
static void ref_q45k(const uint8_t *bp, bool five, const int8_t *q, const int16_t *bs, refblk *r)
{
    const uint8_t *sc = bp + 4, *qh = bp + 16, *qs = bp + (five ? 48 : 16);
    r->dw = pt_q_f16(bp);
    r->mw = pt_q_f16(bp + 2);
    for (int s = 0; s < 8; s++) {
        int scale, mn;
        scale_min_k4(s, sc, &scale, &mn);
        int32_t sub = 0;
        for (int l = 0; l < 32; l++) {
            const uint8_t byte = qs[32 * (s / 2) + l];
            int v = s % 2 ? byte >> 4 : byte & 0xF;
            if (five)
                v |= ((qh[l] >> s) & 1) << 4;
            sub += v * q[32 * s + l];
        }
        r->i += scale * sub;
        r->j += mn * (bs[2 * s] + bs[2 * s + 1]);
    }
}

static void ref_q6k(const uint8_t *bp, const int8_t *q, refblk *r)
{
    const uint8_t *ql = bp, *qh = bp + 128;
    const int8_t *sc = (const int8_t *)(bp + 192);
    r->dw = pt_q_f16(bp + 208);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *L = ql + 64 * h, hb = qh[32 * h + l];
            const int v[4] = { (L[l] & 0xF) | ((hb >> 0) & 3) << 4, (L[l + 32] & 0xF) | ((hb >> 2) & 3) << 4,
                               (L[l] >> 4) | ((hb >> 4) & 3) << 4, (L[l + 32] >> 4) | ((hb >> 6) & 3) << 4 };
            for (int t = 0; t < 4; t++) {
                const int n = 128 * h + 32 * t + l;
                r->i += sc[n / 16] * (v[t] - 32) * q[n];
            }
        }
}

/* Block bp of W against the activation block at q (bs: its sums of 16). */
static refblk ref_block(int type, const uint8_t *bp, const int8_t *q, const int16_t *bs)
{
    refblk r = { 0, 0, 0.0f, 0.0f };
    switch (type) {
    case PT_GGML_Q8_0:
        r.dw = pt_q_f16(bp);
        for (int j = 0; j < PT_QK; j++)
            r.i += (int8_t)bp[2 + j] * q[j];
        break;
    case PT_GGML_Q4_0:
        r.dw = pt_q_f16(bp);
        r.i = ref_small(bp + 2, NULL, 8, q);
        break;
    case PT_GGML_Q4_1:
        r.dw = pt_q_f16(bp), r.mw = pt_q_f16(bp + 2);
        r.i = ref_small(bp + 4, NULL, 0, q);
        break;
    case PT_GGML_Q5_0:
        r.dw = pt_q_f16(bp);
        r.i = ref_small(bp + 6, bp + 2, 16, q);
        break;
    case PT_GGML_Q5_1:
        r.dw = pt_q_f16(bp), r.mw = pt_q_f16(bp + 2);
        r.i = ref_small(bp + 8, bp + 4, 0, q);
        break;
    case PT_GGML_Q4_K:
    case PT_GGML_Q5_K:
        ref_q45k(bp, type == PT_GGML_Q5_K, q, bs, &r);
        break;
    default: /* PT_GGML_Q6_K */
        ref_q6k(bp, q, &r);
        break;
    }
    return r;
}

/* The reference kernel: the arithmetic of kernels/qgemv.h, element by
 * element. */
static void qgemv_scalar(int type, const pt_qact *a, size_t len, const uint8_t *wrow, size_t rb,
                         float alpha, float beta, float *y, size_t ldy)
{
    const qtype *t = qtype_of(type);
    const size_t nb = rb / t->bytes;
    for (size_t j = 0; j < len; j++)
        for (size_t i = 0; i < a->m; i++) {
            float acc[8] = { 0 };
            const int8_t *q = a->q + i * a->kp;
            const float *dx = a->d + i * a->nbp, *sx = a->s + i * a->nbp;
            for (size_t b = 0; b < nb; b++) {
                refblk r = ref_block(type, wrow + j * rb + b * t->bytes, q + b * t->blk,
                                     a->bsum + (i * a->nbp + b) * 16);
                float *l = &acc[b % 8];
                *l = fmaf(r.dw * dx[b], (float)r.i, *l);
                if (type == PT_GGML_Q4_1 || type == PT_GGML_Q5_1)
                    *l = fmaf(r.mw, sx[b], *l);
                else if (type == PT_GGML_Q4_K || type == PT_GGML_Q5_K)
                    *l = fmaf(-(r.mw * dx[b]), (float)r.j, *l);
            }
            pt_qgemv_store(acc, alpha, beta, &y[i * ldy + j]);
        }
}

/* ---- dispatch and threads ---- */

static pt_qgemv_fn *pick(int type, const char **name)
{
#if defined(__x86_64__) && defined(__GNUC__)
    pt_qgemv_fn *f;
    if (pt_cpu_active() >= PT_CPU_AVX512 && pt_cpu_has_vnni() && (f = pt_qgemv_vnni(type))) {
        *name = "avx512vnni";
        return f;
    }
    if ((f = pt_qgemv_avx2(type))) {
        *name = "avx2";
        return f;
    }
#endif
    *name = "scalar";
    return qgemv_scalar;
}

const char *pt_qgemv_kernel(int type)
{
    const char *name = NULL;
    if (pt_qgemv_supported(type))
        pick(type, &name);
    return name;
}

static int qgemv_check(int type, size_t k, const float *x, const void *w, const float *y,
                       const qtype **t)
{
    if (!(*t = qtype_of(type)))
        return pt_err(PT_EUNSUPPORTED, "pt_qgemv_rows: no quantized kernel for ggml type %d", type);
    if (k % (*t)->blk)
        return pt_err(PT_EINVAL, "pt_qgemv_rows: k = %zu is not a multiple of the type's block of %zu",
                      k, (*t)->blk);
    if (!x || !w || !y)
        return pt_err(PT_EINVAL, "pt_qgemv_rows: x, w or y is NULL");
    return PT_OK;
}

static int qgemv_run(bool ref, int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                     size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    const qtype *t;
    if (m == 0 || n == 0) /* nothing to compute: only the type must make sense */
        return qtype_of(type) ? PT_OK : qgemv_check(type, k, x, w, y, &t);
    int st = qgemv_check(type, k, x, w, y, &t);
    if (st != PT_OK)
        return st;
    if (k == 0) { /* an empty sum */
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                const float acc[8] = { 0 };
                pt_qgemv_store(acc, alpha, beta, &y[i * ldy + j]);
            }
        return PT_OK;
    }
    pt_qact a;
    if ((st = act_make(t, m, k, x, ldx, ref, &a)) != PT_OK)
        return st;
    const char *name;
    pt_qgemv_fn *fn = ref ? qgemv_scalar : pick(type, &name);
    const size_t rb = k / t->blk * t->bytes;
    const uint8_t *wb = w;
    size_t nblk = (n + QGEMV_BLOCK - 1) / QGEMV_BLOCK;
    int nt = ref ? 1 : pt_gemm_threads(m, n, k);
    if ((size_t)nt > nblk)
        nt = (int)nblk;
    size_t chunk = nblk / ((size_t)nt * 8);
    int grab = chunk < 1 ? 1 : (int)chunk;
#pragma omp parallel for num_threads(nt) schedule(dynamic, grab) if (nt > 1)
    for (size_t b = 0; b < nblk; b++) {
        size_t j0 = b * QGEMV_BLOCK, len = n - j0 < QGEMV_BLOCK ? n - j0 : QGEMV_BLOCK;
        fn(type, &a, len, wb + j0 * rb, rb, alpha, beta, y + j0, ldy);
    }
    free(a.q);
    return PT_OK;
}

int pt_qgemv_rows(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                  size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    return qgemv_run(false, type, m, n, k, alpha, x, ldx, w, beta, y, ldy);
}

int pt_qgemv_rows_ref(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                      size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    return qgemv_run(true, type, m, n, k, alpha, x, ldx, w, beta, y, ldy);
}
