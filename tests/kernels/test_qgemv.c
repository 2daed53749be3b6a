/* pt__qgemv_rows (small-m products on ggml-quantized weights) on every
 * kernel path this CPU runs, for every supported type:
 *   - the SIMD kernels equal the scalar reference (pt__qgemv_rows_ref) bit
 *     for bit, over odd m, n not a multiple of the 16-row task, k with a
 *     partial group of 8 blocks, W at odd addresses, alpha and beta;
 *   - the scalar reference against a double-precision dot of W dequantized
 *     (by this file's own decoding of the block layouts) and x quantized by
 *     this file's own Q8_0 / Q8_1 / Q8_K quantizer then dequantized;
 *   - a row's result alone equals it among 16 rows, and 1 and 2 threads
 *     agree, bit for bit;
 *   - a hand-computed product, errors and NaN activations.
 * Paths above this CPU are reported as skipped. */
#include "testutil.h"

#include "core/core.h"
#include "io/gguf.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>

static const int k_types[] = { PT_GGML_Q8_0, PT_GGML_Q4_0, PT_GGML_Q4_1, PT_GGML_Q5_0,
                               PT_GGML_Q5_1, PT_GGML_Q4_K, PT_GGML_Q5_K, PT_GGML_Q6_K };
#define NTYPES (sizeof k_types / sizeof k_types[0])

static const char *type_name(int t)
{
    switch (t) {
    case PT_GGML_Q8_0: return "Q8_0";
    case PT_GGML_Q4_0: return "Q4_0";
    case PT_GGML_Q4_1: return "Q4_1";
    case PT_GGML_Q5_0: return "Q5_0";
    case PT_GGML_Q5_1: return "Q5_1";
    case PT_GGML_Q4_K: return "Q4_K";
    case PT_GGML_Q5_K: return "Q5_K";
    default: return "Q6_K";
    }
}

static size_t blk_of(int t)
{
    return t == PT_GGML_Q4_K || t == PT_GGML_Q5_K || t == PT_GGML_Q6_K ? 256 : 32;
}

static size_t bytes_of(int t)
{
    switch (t) {
    case PT_GGML_Q8_0: return 34;
    case PT_GGML_Q4_0: return 18;
    case PT_GGML_Q4_1: return 20;
    case PT_GGML_Q5_0: return 22;
    case PT_GGML_Q5_1: return 24;
    case PT_GGML_Q4_K: return 144;
    case PT_GGML_Q5_K: return 176;
    default: return 210;
    }
}

/* ---- fp16, by hand ---- */

static double h2d(const uint8_t *p)
{
    const unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8;
    const int e = (int)(h >> 10 & 31), mant = (int)(h & 1023);
    double v = e == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, e - 25);
    return h >> 15 ? -v : v;
}

/* A random fp16 of magnitude in [2^(e0-15), 2^(e1-15)), sign random when neg. */
static void rand_half(pt_rng *r, int e0, int e1, bool neg, uint8_t *p)
{
    unsigned e = (unsigned)(e0 + (int)pt__rng_below(r, (uint64_t)(e1 - e0)));
    unsigned h = e << 10 | (unsigned)pt__rng_below(r, 1024);
    if (neg && pt__rng_below(r, 2))
        h |= 0x8000;
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

static float round_f16(float f)
{
    return _cvtsh_ss(_cvtss_sh(f, 0));
}

/* ---- weights ---- */

/* n rows of k values of type t: random bits, scales set to sane fp16s. */
static void make_w(int t, size_t n, size_t k, pt_rng *r, uint8_t *w)
{
    const size_t nbt = n * (k / blk_of(t)), bb = bytes_of(t);
    for (size_t i = 0; i < nbt * bb; i++)
        w[i] = (uint8_t)pt__rng_next(r);
    for (size_t b = 0; b < nbt; b++) {
        uint8_t *p = w + b * bb;
        if (t == PT_GGML_Q6_K) {
            rand_half(r, 4, 10, false, p + 208);
        } else {
            rand_half(r, 4, 10, t == PT_GGML_Q8_0, p); /* d: 2^-11 .. 2^-5 */
            if (t == PT_GGML_Q4_1 || t == PT_GGML_Q5_1 || t == PT_GGML_Q4_K || t == PT_GGML_Q5_K)
                rand_half(r, 4, 12, t == PT_GGML_Q4_1 || t == PT_GGML_Q5_1, p + 2);
        }
    }
}

/* Dequantize one block (from ggml's block layouts) into v (blk values);
 * *mn gets Q4_1/Q5_1's min (0 otherwise), which v includes. */
static void deq_block(int t, const uint8_t *p, double *v, double *mn)
{
    *mn = 0.0;
    if (t == PT_GGML_Q8_0) {
        for (int j = 0; j < 32; j++)
            v[j] = h2d(p) * (int8_t)p[2 + j];
    } else if (t == PT_GGML_Q4_0 || t == PT_GGML_Q4_1 || t == PT_GGML_Q5_0 || t == PT_GGML_Q5_1) {
        const bool one = t == PT_GGML_Q4_1 || t == PT_GGML_Q5_1, five = t == PT_GGML_Q5_0 || t == PT_GGML_Q5_1;
        const uint8_t *qh = p + (one ? 4 : 2), *qs = qh + (five ? 4 : 0);
        const uint32_t h = five ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
        const double d = h2d(p), m = one ? h2d(p + 2) : 0.0;
        const int off = one ? 0 : five ? 16 : 8;
        *mn = m;
        for (int j = 0; j < 16; j++) {
            v[j] = d * (((qs[j] & 15) | (int)((h >> j) & 1) << 4) - off) + m;
            v[j + 16] = d * (((qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4) - off) + m;
        }
    } else if (t == PT_GGML_Q4_K || t == PT_GGML_Q5_K) {
        const bool five = t == PT_GGML_Q5_K;
        const uint8_t *s = p + 4, *qh = p + 16, *qs = p + (five ? 48 : 16);
        for (int sb = 0; sb < 8; sb++) {
            int sc = sb < 4 ? s[sb] & 63 : (s[sb + 4] & 15) | (s[sb - 4] >> 6) << 4;
            int m = sb < 4 ? s[sb + 4] & 63 : (s[sb + 4] >> 4) | (s[sb] >> 6) << 4;
            for (int l = 0; l < 32; l++) {
                int q = (qs[32 * (sb / 2) + l] >> (4 * (sb % 2))) & 15;
                if (five && (qh[l] >> sb & 1))
                    q += 16;
                v[32 * sb + l] = h2d(p) * sc * q - h2d(p + 2) * m;
            }
        }
    } else { /* Q6_K: 128 values a half, 4 runs of 32 */
        for (int n = 0; n < 256; n++) {
            const int h = n / 128, run = n % 128 / 32, l = n % 32;
            const uint8_t lo = p[64 * h + l + 32 * (run % 2)];
            int q = (run < 2 ? lo & 15 : lo >> 4) | ((p[128 + 32 * h + l] >> (2 * run)) & 3) << 4;
            v[n] = h2d(p + 208) * (int8_t)p[192 + n / 16] * (q - 32);
        }
    }
}

/* ---- activations, quantized by this file's own reading of ggml ---- */

typedef struct qx {
    int8_t q[4096];
    double d[128], s[128];
} qx;

static void quant_x(int t, const float *x, size_t k, qx *o)
{
    const size_t blk = blk_of(t);
    for (size_t b = 0; b < k / blk; b++) {
        const float *xb = x + b * blk;
        float amax = 0.0f, vmax = 0.0f;
        for (size_t j = 0; j < blk; j++)
            if (fabsf(xb[j]) > amax)
                amax = fabsf(xb[j]), vmax = xb[j];
        if (blk == 256) { /* Q8_K */
            const float is = amax == 0.0f ? 0.0f : -127.0f / vmax;
            for (size_t j = 0; j < blk; j++)
                o->q[b * blk + j] = (int8_t)fmaxf(-127.0f, fminf(127.0f, rintf(is * xb[j])));
            o->d[b] = amax == 0.0f ? 0.0 : (double)(1.0f / is);
        } else { /* Q8_0 / Q8_1 */
            const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
            int sum = 0;
            for (size_t j = 0; j < blk; j++) {
                o->q[b * blk + j] = (int8_t)rintf(xb[j] * id);
                sum += o->q[b * blk + j];
            }
            o->d[b] = round_f16(amax / 127.0f);
            o->s[b] = round_f16(amax / 127.0f * (float)sum);
        }
    }
}

/* alpha W x + beta y0 in double, and the magnitude of its terms. */
static double ref_dot(int t, const uint8_t *wrow, const float *x, size_t k, double *mag)
{
    static qx a;
    double v[256], s = 0.0, m = 0.0, mn;
    quant_x(t, x, k, &a);
    const size_t blk = blk_of(t);
    for (size_t b = 0; b < k / blk; b++) {
        deq_block(t, wrow + b * bytes_of(t), v, &mn);
        double sq = 0.0;
        for (size_t j = 0; j < blk; j++) {
            double term = v[j] * a.d[b] * a.q[b * blk + j];
            s += term;
            m += fabs(term);
            sq += a.q[b * blk + j];
        }
        /* Q8_1's s is d * sum rounded to fp16: the kernels use it for the
         * min term (as llama.cpp does), so the reference does too. */
        s += mn * (a.s[b] - a.d[b] * sq);
    }
    *mag = m;
    return s;
}

/* ---- cases ---- */

typedef struct qcase {
    int t;
    size_t m, n, k, ldx, ldy, off;
    float *x, *y;
    uint8_t *wbuf, *w; /* w = wbuf + off */
} qcase;

static void case_make(qcase *c, int t, size_t m, size_t n, size_t k, size_t off, pt_rng *r)
{
    c->t = t, c->m = m, c->n = n, c->k = k, c->off = off;
    c->ldx = k + 3, c->ldy = n + 1;
    c->x = malloc(m * c->ldx * sizeof(float));
    c->y = malloc(m * c->ldy * sizeof(float));
    c->wbuf = malloc(n * (k / blk_of(t)) * bytes_of(t) + off + 1);
    ck_assert(c->x && c->y && c->wbuf);
    c->w = c->wbuf + off;
    for (size_t i = 0; i < m * c->ldx; i++)
        c->x[i] = (float)pt__rng_normal(r);
    for (size_t i = 0; i < m * c->ldy; i++)
        c->y[i] = (float)pt__rng_normal(r);
    make_w(t, n, k, r, c->w);
}

static void case_free(qcase *c)
{
    free(c->x); free(c->y); free(c->wbuf);
}

/* out = the product (ref: the scalar reference); beta 0 must not read y. */
static void run(const qcase *c, bool ref, float alpha, float beta, float *out)
{
    memcpy(out, c->y, c->m * c->ldy * sizeof(float));
    if (beta == 0.0f)
        for (size_t i = 0; i < c->m; i++)
            for (size_t j = 0; j < c->n; j++)
                out[i * c->ldy + j] = NAN;
    int st = (ref ? pt__qgemv_rows_ref : pt__qgemv_rows)(c->t, c->m, c->n, c->k, alpha, c->x, c->ldx,
                                                        c->w, beta, out, c->ldy);
    ck_assert_msg(st == PT_OK, "%s: %s", type_name(c->t), pt_last_error());
}

static bool use_path(int l)
{
    if (l > (int)pt__cpu_detected())
        return false;
    ck_assert_ok(pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)l)));
    return true;
}

/* ---- tests ---- */

START_TEST(test_qgemv_hand)
{
    /* One Q8_0 block of 1s (d = 1) and one Q4_0 block of nibbles 9 (w = 1),
     * x all 1: q = 127, dx = fp16(1/127) = 1032 / 2^17, so y = 32 * 127 *
     * 1032 / 2^17 = 31.998046875 exactly, on every path. */
    uint8_t w8[1 + 34], w4[1 + 18];
    w8[1] = 0x00, w8[2] = 0x3C;
    memset(w8 + 3, 1, 32);
    w4[1] = 0x00, w4[2] = 0x3C;
    memset(w4 + 3, 0x99, 16);
    float x[32], y = 0.0f;
    for (int i = 0; i < 32; i++)
        x[i] = 1.0f;
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        ck_assert_ok(pt__qgemv_rows(PT_GGML_Q8_0, 1, 1, 32, 1.0f, x, 32, w8 + 1, 0.0f, &y, 1));
        ck_assert_float_eq(y, 31.998046875f);
        ck_assert_ok(pt__qgemv_rows(PT_GGML_Q4_0, 1, 1, 32, 2.0f, x, 32, w4 + 1, 1.0f, &y, 1));
        ck_assert_float_eq(y, 3.0f * 31.998046875f);
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

START_TEST(test_qgemv_ref_vs_double)
{
    pt_rng r;
    pt__rng_seed(&r, 21);
    const double u = 1.0 / 16777216.0;
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const int t = k_types[ti];
        const size_t blk = blk_of(t), ks[] = { blk, 9 * blk, blk == 32 ? 576 : 1536 };
        for (size_t ki = 0; ki < 3; ki++) {
            qcase c;
            case_make(&c, t, 3, 21, ks[ki], ki, &r);
            float *out = malloc(c.m * c.ldy * sizeof(float));
            for (int ab = 0; ab < 2; ab++) {
                const float alpha = ab ? -0.5f : 1.0f, beta = ab ? 0.75f : 0.0f;
                run(&c, true, alpha, beta, out);
                const size_t rb = c.k / blk * bytes_of(t);
                for (size_t i = 0; i < c.m; i++)
                    for (size_t j = 0; j < c.n; j++) {
                        double mag, s = ref_dot(t, c.w + j * rb, c.x + i * c.ldx, c.k, &mag);
                        double y0 = beta == 0.0f ? 0.0 : c.y[i * c.ldy + j];
                        double want = alpha * s + beta * y0;
                        double tol = (double)(c.k / blk + 8) * 2 * u * (fabs(alpha) * mag) +
                                     2 * u * fabs(beta * y0) + 1e-30;
                        double got = out[i * c.ldy + j];
                        ck_assert_msg(fabs(got - want) <= tol,
                                      "%s k=%zu (%zu,%zu): %.9g vs %.9g (tol %.3g)", type_name(t),
                                      c.k, i, j, got, want, tol);
                    }
            }
            free(out);
            case_free(&c);
        }
    }
}
END_TEST

START_TEST(test_qgemv_paths_equal_ref)
{
    static const size_t ms[] = { 1, 2, 3, 5, 9, 16, 17, 25 }, ns[] = { 1, 7, 33 };
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        pt_rng r;
        pt__rng_seed(&r, 22);
        for (size_t ti = 0; ti < NTYPES; ti++) {
            const int t = k_types[ti];
            /* 57 blocks of 32: more than the 48 that the 16-row kernel
             * transposes at a time (two chunks, the second ending in a
             * partial group of 8) */
            const size_t blk = blk_of(t), ks[] = { blk, 9 * blk, 16 * blk, 57 * blk };
            const size_t nk = blk == 32 ? 4 : 3;
            printf("test_qgemv: %s on path %s: kernel %s (m = 1), %s (m = 16)\n", type_name(t),
                   pt_cpu_path(), pt__qgemv_kernel(t), pt__qgemv_kernel_rows(t, 16));
            for (size_t ki = 0; ki < nk; ki++)
                for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                        qcase c;
                        case_make(&c, t, ms[mi], ns[ni], ks[ki], (ki + mi + ni) % 4, &r);
                        const size_t sz = c.m * c.ldy * sizeof(float);
                        float *a = malloc(sz), *b = malloc(sz);
                        for (int ab = 0; ab < 3; ab++) {
                            const float alpha = ab == 2 ? -0.5f : 1.0f, beta = ab == 1 ? 1.0f : 0.0f;
                            run(&c, false, alpha, beta, a);
                            run(&c, true, alpha, beta, b);
                            ck_assert_msg(memcmp(a, b, sz) == 0,
                                          "%s on %s (%s): m=%zu n=%zu k=%zu off=%zu: differs from "
                                          "the scalar reference", type_name(t), pt_cpu_path(),
                                          pt__qgemv_kernel_rows(t, c.m), c.m, c.n, c.k, c.off);
                        }
                        free(a); free(b);
                        case_free(&c);
                    }
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

/* Row i among 16 (or 17) equals row i alone and among rows i..i+2; 1 and 2
 * threads agree. */
START_TEST(test_qgemv_rows_independent)
{
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        pt_rng r;
        pt__rng_seed(&r, 23);
        for (size_t ti = 0; ti < NTYPES; ti++) {
            const int t = k_types[ti];
            qcase c;
            case_make(&c, t, 17, blk_of(t) == 32 ? 1536 : 576, blk_of(t) == 32 ? 576 : 1536, 1, &r);
            ck_assert_int_eq(pt__gemm_threads(c.m, c.n, c.k), 2);
            const size_t sz = c.m * c.ldy * sizeof(float);
            float *all = malloc(sz), *t1 = malloc(sz), *one = malloc(sz);
            ck_assert_ok(pt_set_num_threads(2));
            run(&c, false, 0.75f, 1.0f, all);
            ck_assert_ok(pt_set_num_threads(1));
            run(&c, false, 0.75f, 1.0f, t1);
            ck_assert_ok(pt_set_num_threads(2));
            ck_assert_msg(memcmp(all, t1, sz) == 0, "%s on %s: 1 and 2 threads differ",
                          type_name(t), pt_cpu_path());
            for (size_t g = 1; g <= 3; g += 2)
                for (size_t i = 0; i + g <= c.m; i += 3) {
                    qcase sub = c;
                    sub.m = g, sub.x = c.x + i * c.ldx, sub.y = c.y + i * c.ldy;
                    run(&sub, false, 0.75f, 1.0f, one);
                    ck_assert_msg(memcmp(one, all + i * c.ldy, g * c.ldy * sizeof(float)) == 0,
                                  "%s on %s: rows %zu..%zu alone differ from among %zu",
                                  type_name(t), pt_cpu_path(), i, i + g - 1, c.m);
                }
            free(all); free(t1); free(one);
            case_free(&c);
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

/* pt__qgemv_segs over segments of mixed types (as a Q4_K_M file's q|k|v:
 * Q5_0, Q5_0, Q8_0; with a K-quant among them) gives, column for column,
 * the scalar reference of each segment alone, on every path, m = 1 .. 17
 * (both the m = 1 and the 16-row kernels), 1 and 2 threads.  Packed, every
 * segment has two full groups and more rows: one thread runs the two
 * groups at once (len 32, kernels/qgemv.c's seg_task), every type so. */
START_TEST(test_qgemv_segs)
{
    static const int mix[][3] = { { PT_GGML_Q5_0, PT_GGML_Q5_0, PT_GGML_Q8_0 },
                                  { PT_GGML_Q4_0, PT_GGML_Q6_K, PT_GGML_Q4_1 },
                                  { PT_GGML_Q4_K, PT_GGML_Q5_1, PT_GGML_Q5_K } };
    static const size_t rows[3] = { 37, 33, 35 }, ms[] = { 1, 4, 9, 16, 17 };
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        pt_rng r;
        pt__rng_seed(&r, 25);
        /* pk: the segments packed 16 rows to a group (kernels/qpack.c; 37
         * rows: two groups and 5 rows as the file has them), k = 2048 for
         * more blocks than the 16-row kernels take a chunk */
        for (size_t mi = 0; mi < 6; mi++) {
            const bool pk = mi >= 3;
            const size_t k = pk ? 2048 : 512, ldx = k + 1, ldy = 107;
            pt_qseg seg[3];
            uint8_t *w[3], *wp[3];
            for (int s = 0; s < 3; s++) {
                const int t = mix[mi % 3][s];
                const size_t sz = rows[s] * (k / blk_of(t)) * bytes_of(t);
                w[s] = malloc(sz), wp[s] = malloc(sz);
                make_w(t, rows[s], k, &r, w[s]);
                memcpy(wp[s], w[s], sz);
                if (pk)
                    ck_assert_ok(pt__qpack(t, wp[s], rows[s], k));
                seg[s] = (pt_qseg){ pk ? t | PT_QPACK : t, wp[s], rows[s] };
            }
            if (pk)
                printf("test_qgemv: packed %s|%s|%s on path %s: kernel %s\n", type_name(mix[mi % 3][0]),
                       type_name(mix[mi % 3][1]), type_name(mix[mi % 3][2]), pt_cpu_path(),
                       pt__qgemv_kernel_rows(seg[0].type, 16));
            for (size_t mj = 0; mj < sizeof ms / sizeof ms[0]; mj++) {
                const size_t m = ms[mj];
                float *x = malloc(m * ldx * sizeof(float)), *a = malloc(m * ldy * sizeof(float));
                float *b = malloc(m * ldy * sizeof(float));
                for (size_t i = 0; i < m * ldx; i++)
                    x[i] = (float)pt__rng_normal(&r);
                for (size_t i = 0; i < m * ldy; i++)
                    a[i] = b[i] = (float)pt__rng_normal(&r);
                for (int nt = 1; nt <= 2; nt++) {
                    ck_assert_ok(pt_set_num_threads(nt));
                    float *a2 = malloc(m * ldy * sizeof(float));
                    memcpy(a2, a, m * ldy * sizeof(float));
                    ck_assert_ok(pt__qgemv_segs(seg, 3, m, k, 0.5f, x, ldx, 1.0f, a2, ldy));
                    size_t off = 0;
                    float *b2 = malloc(m * ldy * sizeof(float));
                    memcpy(b2, b, m * ldy * sizeof(float));
                    for (int s = 0; s < 3; s++) {
                        ck_assert_ok(pt__qgemv_rows_ref(mix[mi % 3][s], m, rows[s], k, 0.5f, x, ldx, w[s],
                                                       1.0f, b2 + off, ldy));
                        off += rows[s];
                    }
                    ck_assert_msg(memcmp(a2, b2, m * ldy * sizeof(float)) == 0,
                                  "segments %zu on %s, m = %zu, %d threads: differ from the "
                                  "reference of each segment", mi, pt_cpu_path(), m, nt);
                    if (pk) { /* the reference reads packed rows too */
                        memcpy(a2, b, m * ldy * sizeof(float));
                        ck_assert_ok(pt__qgemv_rows_ref(seg[0].type, m, rows[0], k, 0.5f, x, ldx, wp[0],
                                                       1.0f, a2, ldy));
                        for (size_t i = 0; i < m; i++)
                            ck_assert(memcmp(a2 + i * ldy, b2 + i * ldy, rows[0] * sizeof(float)) == 0);
                    }
                    free(a2); free(b2);
                }
                free(x); free(a); free(b);
            }
            for (int s = 0; s < 3; s++)
                free(w[s]), free(wp[s]);
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
    ck_assert_ok(pt_set_num_threads(2));
    float x[32] = { 0 }, y[4];
    const pt_qseg bad[2] = { { PT_GGML_Q8_0, y, 1 }, { PT_GGML_Q2_K, y, 1 } };
    ck_assert_int_eq(pt__qgemv_segs(bad, 0, 1, 32, 1.0f, x, 32, 0.0f, y, 4), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "segments"));
    ck_assert_int_eq(pt__qgemv_segs(bad, 2, 1, 32, 1.0f, x, 32, 0.0f, y, 4), PT_EUNSUPPORTED);
}
END_TEST

/* pt__qgemv_segs_pre: the product's input made from x within the product
 * (RMSNorm of x's rows; SwiGLU of a gate|up buffer's halves) gives, bit
 * for bit, the rows pt__rmsnorm_forward / pt__swiglu_forward make (and
 * the norm's rstd) and the product pt__qgemv_segs computes on them, on
 * every path, m = 1 .. 17, 1 and 2 threads, packed segments of a 32-value
 * and a K-quant type (both kinds of quantized activations). */
START_TEST(test_qgemv_segs_pre)
{
    const size_t k = 512, ldy = 40, ms[] = { 1, 5, 16, 17 };
    const int types[2] = { PT_GGML_Q5_0, PT_GGML_Q4_K };
    const size_t rows[2] = { 21, 16 };
    pt_rng r;
    pt__rng_seed(&r, 31);
    pt_qseg seg[2];
    uint8_t *w[2];
    for (int s = 0; s < 2; s++) {
        const size_t sz = rows[s] * (k / blk_of(types[s])) * bytes_of(types[s]);
        w[s] = malloc(sz);
        make_w(types[s], rows[s], k, &r, w[s]);
        ck_assert_ok(pt__qpack(types[s], w[s], rows[s], k));
        seg[s] = (pt_qseg){ types[s] | PT_QPACK, w[s], rows[s] };
    }
    float *nw = malloc(k * sizeof(float));
    for (size_t i = 0; i < k; i++)
        nw[i] = (float)(1.0 + 0.3 * pt__rng_normal(&r));
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        for (size_t mj = 0; mj < sizeof ms / sizeof ms[0]; mj++) {
            const size_t m = ms[mj];
            /* x: m rows of 2k (a gate|up buffer; its first half the norm's input) */
            float *x = malloc(m * 2 * k * sizeof(float));
            for (size_t i = 0; i < m * 2 * k; i++)
                x[i] = (float)(2.0 * pt__rng_normal(&r));
            for (int kind = PT_QPRE_RMSNORM; kind <= PT_QPRE_SWIGLU; kind++)
                for (int nt = 1; nt <= 2; nt++) {
                    ck_assert_ok(pt_set_num_threads(nt));
                    float *o1 = malloc(m * k * sizeof(float)), *o2 = malloc(m * k * sizeof(float));
                    float rs1[17], rs2[17], y1[17 * 40], y2[17 * 40];
                    for (size_t i = 0; i < m * ldy; i++)
                        y1[i] = y2[i] = (float)i;
                    pt_qpre pre = { .kind = kind, .w = nw, .eps = 1e-5f, .rstd = rs1, .u = x + k,
                                    .out = o1, .ldo = k };
                    ck_assert_ok(pt__qgemv_segs_pre(seg, 2, m, k, 0.5f, x, 2 * k, &pre, 1.0f, y1, ldy));
                    if (kind == PT_QPRE_RMSNORM)
                        for (size_t i = 0; i < m; i++) /* rows of stride 2k: one at a time */
                            pt__rmsnorm_forward(o2 + i * k, rs2 + i, x + i * 2 * k, nw, 1, k, 1e-5f);
                    else
                        pt__swiglu_forward(o2, x, x + k, m, k, 2 * k);
                    ck_assert_ok(pt__qgemv_segs(seg, 2, m, k, 0.5f, o2, k, 1.0f, y2, ldy));
                    ck_assert_msg(memcmp(o1, o2, m * k * sizeof(float)) == 0,
                                  "%s rows on %s, m = %zu: differ from the op's", kind == 1 ? "norm" : "swiglu",
                                  pt_cpu_path(), m);
                    if (kind == PT_QPRE_RMSNORM)
                        ck_assert(memcmp(rs1, rs2, m * sizeof(float)) == 0);
                    ck_assert_msg(memcmp(y1, y2, m * ldy * sizeof(float)) == 0,
                                  "%s product on %s, m = %zu, %d threads: differs", kind == 1 ? "norm" : "swiglu",
                                  pt_cpu_path(), m, nt);
                    /* the input made alone (the unfused path) is the same too */
                    memset(o1, 0, m * k * sizeof(float));
                    pt__qpre_apply(&pre, x, 2 * k, m, k);
                    ck_assert(memcmp(o1, o2, m * k * sizeof(float)) == 0);
                    free(o1);
                    free(o2);
                }
            free(x);
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
    ck_assert_ok(pt_set_num_threads(2));
    free(nw);
    free(w[0]);
    free(w[1]);
}
END_TEST

START_TEST(test_qgemv_errors)
{
    float x[256] = { 0 }, y[2] = { 0 };
    uint8_t w[2 * 8 * 34] = { 0 };
    ck_assert(!pt__qgemv_supported(PT_GGML_Q2_K) && !pt__qgemv_supported(PT_GGML_F32));
    ck_assert(pt__qgemv_kernel(PT_GGML_Q3_K) == NULL);
    ck_assert_int_eq(pt__qgemv_rows(PT_GGML_Q2_K, 1, 1, 256, 1.0f, x, 256, w, 0.0f, y, 1),
                     PT_EUNSUPPORTED);
    ck_assert(strstr(pt_last_error(), "type 10"));
    ck_assert_int_eq(pt__qgemv_rows(PT_GGML_Q4_K, 1, 1, 32, 1.0f, x, 32, w, 0.0f, y, 1), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "multiple"));
    ck_assert_int_eq(pt__qgemv_rows(PT_GGML_Q8_0, 1, 1, 32, 1.0f, NULL, 32, w, 0.0f, y, 1), PT_EINVAL);
    /* nothing to do */
    ck_assert_ok(pt__qgemv_rows(PT_GGML_Q8_0, 0, 1, 32, 1.0f, NULL, 32, NULL, 0.0f, NULL, 1));
    /* a NaN or an infinity in x makes its block's products NaN */
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const int t = k_types[ti];
        pt_rng r;
        pt__rng_seed(&r, 24);
        make_w(t, 2, 256, &r, w);
        for (int i = 0; i < 256; i++)
            x[i] = 0.5f;
        x[7] = ti % 2 ? INFINITY : NAN;
        ck_assert_ok(pt__qgemv_rows(t, 1, 2, 256, 1.0f, x, 256, w, 0.0f, y, 1));
        ck_assert_msg(isnan(y[0]) && isnan(y[1]), "%s: %g %g", type_name(t), (double)y[0], (double)y[1]);
    }
}
END_TEST

int main(void)
{
    pt_cpu_level det = pt__cpu_detected();
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (l <= (int)det)
            printf("test_qgemv: path %s: run\n", pt__cpu_level_str((pt_cpu_level)l));
        else
            printf("test_qgemv: skipped: %s (this CPU runs up to %s)\n",
                   pt__cpu_level_str((pt_cpu_level)l), pt__cpu_level_str(det));
    }
    if (det >= PT_CPU_AVX512 && !pt__cpu_has_vnni())
        printf("test_qgemv: skipped: avx512vnni kernels (this CPU lacks AVX512_VNNI; avx512 runs "
               "the avx2 ones)\n");
    printf("test_qgemv: %s\n", pt_cpu_info());
    fflush(stdout);
    Suite *s = suite_create("qgemv");
    TCase *tc = tcase_create("qgemv");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_qgemv_hand);
    tcase_add_test(tc, test_qgemv_ref_vs_double);
    tcase_add_test(tc, test_qgemv_paths_equal_ref);
    tcase_add_test(tc, test_qgemv_rows_independent);
    tcase_add_test(tc, test_qgemv_segs);
    tcase_add_test(tc, test_qgemv_segs_pre);
    tcase_add_test(tc, test_qgemv_errors);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
