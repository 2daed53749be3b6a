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
#include "kernels/ops.h"

#include <float.h>
#include <omp.h>
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
        if (k_types[i].type == (type & ~PT_QPACK))
            return &k_types[i];
    return NULL;
}

bool pt__qgemv_supported(int type)
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
        d[b] = pt__q_round_f16(dd);
        s[b] = pt__q_round_f16(dd * (float)t);
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

/* The layout of a for m rows of k values in blocks of blk in one zeroed
 * allocation (a->q; free it alone with pt__free_aligned).  Padding (blocks
 * up to a multiple of 8) stays zero. */
static int act_alloc(size_t blk, size_t m, size_t k, pt_qact *a)
{
    const size_t nb = k / blk;
    a->m = m;
    a->nbp = (nb + 7) / 8 * 8;
    a->kp = blk == PT_QK ? a->nbp * PT_QK : k;
    const size_t kp = (a->kp + 63) / 64 * 64; /* keep the arrays after q aligned */
    const size_t bytes = m * kp + m * a->nbp * (2 * sizeof(float) + sizeof(int32_t) + 16 * sizeof(int16_t));
    uint8_t *buf = pt__malloc_aligned(bytes);
    if (!buf)
        return pt__err(PT_ENOMEM, "pt__qgemv_rows: no memory for %zu quantized activations", m * k);
    memset(buf, 0, bytes);
    a->q = (int8_t *)buf;
    a->d = (float *)(buf + m * kp);
    a->s = a->d + m * a->nbp;
    a->sum = (int32_t *)(a->s + m * a->nbp);
    a->bsum = (int16_t *)(a->sum + m * a->nbp);
    return PT_OK;
}

/* Row i of x (k values in blocks of blk) quantized into a (ref: with the
 * scalar code, else AVX2's, the same values).  Rows are independent: any
 * thread may take any row. */
static void act_row(const pt_qact *a, size_t blk, size_t i, size_t k, const float *xi, bool ref)
{
    int8_t *q = a->q + i * a->kp;
    float *d = a->d + i * a->nbp, *s = a->s + i * a->nbp;
    int32_t *sum = a->sum + i * a->nbp;
#if defined(__x86_64__) && defined(__GNUC__)
    if (!ref && blk == PT_QK)
        pt__qgemv_quant32_avx2(xi, k, q, d, s, sum);
    else if (!ref)
        pt_qgemv_quantK_avx2(xi, k, q, d, a->bsum + i * a->nbp * 16);
    else
#else
    (void)ref;
#endif
    if (blk == PT_QK)
        quant_row_32(xi, k, q, d, s, sum);
    else
        quant_row_K(xi, k, q, d, a->bsum + i * a->nbp * 16);
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
    r->dw = pt__q_f16(bp);
    r->mw = pt__q_f16(bp + 2);
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
    r->dw = pt__q_f16(bp + 208);
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
        r.dw = pt__q_f16(bp);
        for (int j = 0; j < PT_QK; j++)
            r.i += (int8_t)bp[2 + j] * q[j];
        break;
    case PT_GGML_Q4_0:
        r.dw = pt__q_f16(bp);
        r.i = ref_small(bp + 2, NULL, 8, q);
        break;
    case PT_GGML_Q4_1:
        r.dw = pt__q_f16(bp), r.mw = pt__q_f16(bp + 2);
        r.i = ref_small(bp + 4, NULL, 0, q);
        break;
    case PT_GGML_Q5_0:
        r.dw = pt__q_f16(bp);
        r.i = ref_small(bp + 6, bp + 2, 16, q);
        break;
    case PT_GGML_Q5_1:
        r.dw = pt__q_f16(bp), r.mw = pt__q_f16(bp + 2);
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
            pt__qgemv_store(acc, alpha, beta, &y[i * ldy + j]);
        }
}

/* ---- dispatch and threads ---- */

/* The kernel for m rows of x. */
static pt_qgemv_fn *pick(int type, size_t m, const char **name)
{
#if defined(__x86_64__) && defined(__GNUC__)
    pt_qgemv_fn *f;
    const bool vnni = pt__cpu_active() >= PT_CPU_AVX512 && pt__cpu_has_vnni();
    if (vnni && m >= PT_QGEMV_M16 && (f = pt__qgemv_vnni16(type))) {
        *name = "avx512vnni16";
        return f;
    }
    if (vnni && (f = pt__qgemv_vnni(type))) {
        *name = "avx512vnni";
        return f;
    }
    if ((f = pt__qgemv_avx2(type))) {
        *name = "avx2";
        return f;
    }
#else
    (void)m;
#endif
    *name = "scalar";
    return qgemv_scalar;
}

/* The packed rows' kernel of the active path, or NULL (then the groups
 * are unpacked for pick's). */
static pt_qgemv_fn *pick_packed(int type)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (pt__cpu_active() >= PT_CPU_AVX512 && pt__cpu_has_vnni())
        return pt__qgemv_vnni16p(type & ~PT_QPACK);
#else
    (void)type;
#endif
    return NULL;
}

bool pt__qgemv_packs(void)
{
    const char *e = getenv("PT_QPACK");
    return !(e && strcmp(e, "0") == 0) && pick_packed(PT_GGML_Q8_0) != NULL;
}

const char *pt__qgemv_kernel_rows(int type, size_t m)
{
    const char *name = NULL;
    if (!pt__qgemv_supported(type))
        return NULL;
    if ((type & PT_QPACK) && pick_packed(type))
        return "avx512vnni16p";
    pick(type & ~PT_QPACK, m, &name);
    return name;
}

const char *pt__qgemv_kernel(int type)
{
    return pt__qgemv_kernel_rows(type, 1);
}

/* One segment of W (pt__qgemv_segs) and what runs it. */
typedef struct segrun {
    pt_qgemv_fn *fn;
    pt_qgemv_fn *pfn; /* packed rows: the kernel of a full group, or NULL (unpacked first) */
    int type;         /* without PT_QPACK */
    bool packed;
    const uint8_t *w;
    size_t rb, rows, off, blk0; /* bytes a row, rows, first output column, first task */
    int act;                    /* 0: the 32-value activations, 1: Q8_K's */
} segrun;

/* Task b's kernel run: W's rows j0 .. j0 + len of segment r (a full
 * packed group without its kernel unpacked into buf first); with pair,
 * task b + 1's too when both are full packed groups with their kernel
 * (which takes two at once: len 32).  Returns the tasks run. */
static size_t seg_task(const segrun *r, const pt_qact *act, size_t b, float alpha, float beta, float *y,
                       size_t ldy, size_t k, uint8_t *buf, bool pair)
{
    const size_t j0 = (b - r->blk0) * QGEMV_BLOCK;
    size_t len = r->rows - j0 < QGEMV_BLOCK ? r->rows - j0 : QGEMV_BLOCK;
    const uint8_t *w = r->w + j0 * r->rb;
    pt_qgemv_fn *fn = r->fn;
    if (r->packed && len == QGEMV_BLOCK && r->pfn) {
        fn = r->pfn;
        if (pair && r->rows - j0 >= 2 * QGEMV_BLOCK)
            len = 2 * QGEMV_BLOCK;
    } else if (r->packed && len == QGEMV_BLOCK) {
        pt__qpack_rows(r->type | PT_QPACK, r->w, r->rows, k, j0, j0 + len, buf);
        w = buf;
    }
    fn(r->type, &act[r->act], len, w, r->rb, alpha, beta, y + r->off + j0, ldy);
    return len > QGEMV_BLOCK ? 2 : 1;
}

#define SEG_MAX 8

static int seg_check(int type, size_t k, const qtype **t)
{
    if (!(*t = qtype_of(type)))
        return pt__err(PT_EUNSUPPORTED, "pt__qgemv_rows: no quantized kernel for ggml type %d", type);
    if (k % (*t)->blk)
        return pt__err(PT_EINVAL, "pt__qgemv_rows: k = %zu is not a multiple of the type's block of %zu",
                      k, (*t)->blk);
    return PT_OK;
}

/* Row i of pre's output made from x (kernels/qgemv.h); returns it. */
static const float *pre_row(const pt_qpre *pre, const float *x, size_t ldx, size_t i, size_t k)
{
    float *o = pre->out + i * pre->ldo;
    if (pre->kind == PT_QPRE_RMSNORM)
        pt__rmsnorm_row(o, pre->rstd ? pre->rstd + i : NULL, x + i * ldx, pre->w, k, pre->eps);
    else
        pt__swiglu_row(o, x + i * ldx, pre->u + i * ldx, k);
    return o;
}

void pt__qpre_apply(const pt_qpre *pre, const float *x, size_t ldx, size_t m, size_t k)
{
    if (pre->kind == PT_QPRE_RMSNORM && ldx == k && pre->ldo == k) {
        pt__rmsnorm_forward(pre->out, pre->rstd, x, pre->w, m, k, pre->eps);
    } else if (pre->kind == PT_QPRE_SWIGLU && pre->ldo == k) {
        pt__swiglu_forward(pre->out, x, pre->u, m, k, ldx);
    } else {
        for (size_t i = 0; i < m; i++)
            pre_row(pre, x, ldx, i, k);
    }
}

/* What the threads of pt__qgemv_segs share. */
typedef struct segs_ctx {
    bool ref;
    const segrun *run;
    int nseg;
    size_t m, k;
    float alpha;
    const float *x;
    size_t ldx;
    const pt_qpre *pre;
    float beta;
    float *y;
    size_t ldy;
    const pt_qact *act;
    uint8_t *buf; /* a group of 16 rows a thread, or NULL */
    size_t bufrb;
    int fam[2], nf; /* the activation kinds needed */
} segs_ctx;

/* Step i of the activations: with pre, row i made (into pre->out) then
 * quantized to every kind; else row i % m quantized to kind i / m. */
static void segs_quant(const segs_ctx *c, size_t i)
{
    static const size_t blks[2] = { PT_QK, PT_QK_K };
    if (c->pre) {
        const float *xi = pre_row(c->pre, c->x, c->ldx, i, c->k);
        for (int f = 0; f < c->nf; f++)
            act_row(&c->act[c->fam[f]], blks[c->fam[f]], i, c->k, xi, c->ref);
        return;
    }
    const int f = c->fam[i / c->m];
    act_row(&c->act[f], blks[f], i % c->m, c->k, c->x + (i % c->m) * c->ldx, c->ref);
}

/* Task b (QGEMV_BLOCK rows of W) on thread t, and b + 1 with pair when
 * seg_task can take both at once; returns the tasks run. */
static size_t segs_task(const segs_ctx *c, size_t b, int t, bool pair)
{
    int s = 0;
    while (s + 1 < c->nseg && c->run[s + 1].blk0 <= b)
        s++;
    return seg_task(&c->run[s], c->act, b, c->alpha, c->beta, c->y, c->ldy, c->k,
                    c->buf ? c->buf + (size_t)t * QGEMV_BLOCK * c->bufrb : NULL, pair);
}

/* y[:, seg s's columns] = alpha W_s x + beta y for the segments one after
 * the other (the columns of y follow them): the activations quantized once
 * per block size, then one parallel region in which the threads first
 * quantize the rows of x (made by pre first, when given), then share the
 * tasks (QGEMV_BLOCK rows of W) of all segments; on one thread the same
 * loops without a region, full packed groups two at a time. */
static int qgemv_segs_run(bool ref, const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha,
                          const float *x, size_t ldx, const pt_qpre *pre, float beta, float *y,
                          size_t ldy)
{
    if (nseg < 1 || nseg > SEG_MAX)
        return pt__err(PT_EINVAL, "pt__qgemv_segs: %d segments (1 to %d)", nseg, SEG_MAX);
    segrun run[SEG_MAX];
    bool need[2] = { false, false };
    size_t n = 0, nblk = 0, bufrb = 0; /* bufrb: a row of the widest packed segment to unpack */
    for (int i = 0; i < nseg; i++) {
        const qtype *t;
        int st = seg_check(seg[i].type, k, &t);
        if (st != PT_OK)
            return st;
        if (!seg[i].w && seg[i].rows)
            return pt__err(PT_EINVAL, "pt__qgemv_rows: w is NULL");
        const char *name;
        const int ty = seg[i].type & ~PT_QPACK;
        const bool packed = (seg[i].type & PT_QPACK) != 0;
        run[i] = (segrun){ ref ? qgemv_scalar : pick(ty, m, &name), packed && !ref ? pick_packed(ty) : NULL,
                           ty, packed, seg[i].w, k / t->blk * t->bytes, seg[i].rows, n, nblk,
                           t->blk == PT_QK ? 0 : 1 };
        if (packed && !run[i].pfn && run[i].rb > bufrb)
            bufrb = run[i].rb;
        need[run[i].act] = true;
        n += seg[i].rows;
        nblk += (seg[i].rows + QGEMV_BLOCK - 1) / QGEMV_BLOCK;
    }
    if (!x || !y)
        return pt__err(PT_EINVAL, "pt__qgemv_rows: x, w or y is NULL");
    if (m == 0 || n == 0 || k == 0) {
        if (pre)
            pt__qpre_apply(pre, x, ldx, m, k);
        if (m == 0 || n == 0)
            return PT_OK;
    }
    if (k == 0) { /* an empty sum */
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                const float acc[8] = { 0 };
                pt__qgemv_store(acc, alpha, beta, &y[i * ldy + j]);
            }
        return PT_OK;
    }
    pt_qact act[2];
    memset(act, 0, sizeof act);
    const size_t blks[2] = { PT_QK, PT_QK_K };
    for (int f = 0; f < 2; f++) {
        int st = need[f] ? act_alloc(blks[f], m, k, &act[f]) : PT_OK;
        if (st != PT_OK) {
            pt__free_aligned(act[0].q);
            return st;
        }
    }
    int nt = ref ? 1 : pt__gemm_threads(m, n, k);
    if ((size_t)nt > nblk)
        nt = (int)nblk;
    uint8_t *buf = NULL; /* a group of 16 rows a thread */
    if (bufrb && !(buf = pt__malloc_aligned((size_t)nt * QGEMV_BLOCK * bufrb))) {
        pt__free_aligned(act[0].q);
        pt__free_aligned(act[1].q);
        return pt__err(PT_ENOMEM, "pt__qgemv_rows: no memory to unpack %d groups of rows", nt);
    }
    segs_ctx c = { ref, run, nseg, m, k, alpha, x, ldx, pre, beta, y, ldy, act, buf, bufrb, { 0, 0 }, 0 };
    for (int f = 0; f < 2; f++) /* the activation kinds needed */
        if (need[f])
            c.fam[c.nf++] = f;
    /* the rows to make or quantize: each row once with pre (then all its
     * kinds), else each row of each kind */
    const size_t nq = pre ? m : (size_t)c.nf * m;
    if (nt <= 1) {
        /* one thread: no OpenMP region (libgomp ends a team of one's
         * loops and region with a futex wake each, a system call: about a
         * microsecond on the VM, three a product) */
        for (size_t i = 0; i < nq; i++)
            segs_quant(&c, i);
        for (size_t b = 0; b < nblk;) /* two packed groups at a time where they can */
            b += segs_task(&c, b, 0, true);
    } else {
#pragma omp parallel num_threads(nt)
        {
#pragma omp for schedule(static)
            for (size_t i = 0; i < nq; i++)
                segs_quant(&c, i);
            /* guided: long runs of adjacent tasks first (the kernels
             * prefetch the next task's rows), shrinking to 4 at the end, so
             * that a core slowed by its neighbours on the host does not
             * keep the other waiting.  16-row decoding, 2 threads, Zen 5
             * VM: 1.08x faster than dynamic with nblk / 8 nt tasks a grab;
             * dynamic with 4 or 8 a grab was no faster (an atomic on a
             * shared line a grab). */
#pragma omp for schedule(guided, 4)
            for (size_t b = 0; b < nblk; b++)
                segs_task(&c, b, omp_get_thread_num(), false);
        }
    }
    pt__free_aligned(buf);
    pt__free_aligned(act[0].q);
    pt__free_aligned(act[1].q);
    return PT_OK;
}

static int qgemv_run(bool ref, int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                     size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    const qtype *t;
    if (m == 0 || n == 0) /* nothing to compute: only the type must make sense */
        return qtype_of(type) ? PT_OK : seg_check(type, k, &t);
    if (!w)
        return pt__err(PT_EINVAL, "pt__qgemv_rows: x, w or y is NULL");
    const pt_qseg seg = { type, w, n };
    return qgemv_segs_run(ref, &seg, 1, m, k, alpha, x, ldx, NULL, beta, y, ldy);
}

int pt__qgemv_segs(const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha, const float *x,
                  size_t ldx, float beta, float *y, size_t ldy)
{
    return qgemv_segs_run(false, seg, nseg, m, k, alpha, x, ldx, NULL, beta, y, ldy);
}

int pt__qgemv_segs_pre(const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha, const float *x,
                      size_t ldx, const pt_qpre *pre, float beta, float *y, size_t ldy)
{
    return qgemv_segs_run(false, seg, nseg, m, k, alpha, x, ldx, pre, beta, y, ldy);
}

int pt__qgemv_rows(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                  size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    return qgemv_run(false, type, m, n, k, alpha, x, ldx, w, beta, y, ldy);
}

int pt__qgemv_rows_ref(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                      size_t ldx, const void *w, float beta, float *y, size_t ldy)
{
    return qgemv_run(true, type, m, n, k, alpha, x, ldx, w, beta, y, ldy);
}
