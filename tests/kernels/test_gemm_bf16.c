/* pt__gemm_mixed and its BF16 GEMM (kernels/gemm_bf16.h): the emulated
 * micro-kernel against a double-precision loop over BF16-rounded operands
 * (all transposes, odd k, strides, alpha/beta, BF16/FP32 operand mixes),
 * the emulation of vdpbf16ps against the real instruction lane by lane, the
 * real-instruction GEMM against the emulated one bit for bit, 1 and 2
 * threads bit-identical, and the FP32 path's exact widening.  The paths
 * that ran and the ones this CPU skipped are printed at the end. */
#include "testutil.h"

#include "core/core.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

#include <math.h>

static bool ran_emulated, ran_hw_lanes, ran_hw_gemm, ran_fma_lanes, ran_fma_gemm, ran_f32_path;
static long hw_lanes_differing = -1, fma_lanes_differing = -1;

static bool cpu_has_bf16(void)
{
    return pt__cpu_detected() >= PT_CPU_AVX512BF16;
}

static void fill(float *x, size_t n, pt_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)pt__rng_normal(r);
}

/* An operand of rows x ld values, FP32 or BF16 (from the same normals). */
static void *make_operand(size_t rows, size_t ld, bool bf16, pt_rng *r)
{
    size_t n = rows * ld;
    float *f = malloc(n * sizeof *f);
    fill(f, n, r);
    if (!bf16)
        return f;
    pt_bf16 *h = malloc(n * sizeof *h);
    pt__f32_to_bf16_n(h, f, n);
    free(f);
    return h;
}

/* Element i of an operand, rounded to BF16 (as the BF16 path reads it). */
static double rounded(const void *p, bool bf16, size_t i)
{
    return bf16 ? pt__bf16_to_f32(((const pt_bf16 *)p)[i])
                : pt__bf16_to_f32(pt__f32_to_bf16(((const float *)p)[i]));
}

/* C = alpha op(A) op(B) + beta C in double over the BF16-rounded operands;
 * bound[i] receives the FP32 accumulation's error bound for that element. */
static void naive(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                  bool abf, size_t lda, const void *b, bool bbf, size_t ldb, float beta, float *c,
                  size_t ldc, double *bound)
{
    const double u = ldexp(1.0, -24);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (size_t p = 0; p < k; p++) {
                double x = rounded(a, abf, ta ? p * lda + i : i * lda + p);
                double y = rounded(b, bbf, tb ? j * ldb + p : p * ldb + j);
                s += x * y;
                sa += fabs(x * y);
            }
            double cb = beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j];
            c[i * ldc + j] = (float)(alpha * s + cb);
            bound[i * n + j] =
                2.0 * u * ((double)(k + 4) * fabs(alpha) * sa + 2.0 * fabs(cb)) + 1e-30;
        }
}

typedef void (*gemm_fn)(bool, bool, size_t, size_t, size_t, float, const void *, bool, size_t,
                        const void *, bool, size_t, float, float *, size_t);

/* One product through fn against the double loop, with C's padding columns
 * left untouched. */
static void check_against_naive(gemm_fn fn, const size_t shape[3], int t, int mix, float alpha,
                                float beta, pt_rng *r)
{
    bool ta = t & 1, tb = t & 2, abf = mix & 1, bbf = mix & 2;
    size_t m = shape[0], n = shape[1], k = shape[2];
    size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
    void *a = make_operand(ta ? k : m, lda, abf, r), *b = make_operand(tb ? n : k, ldb, bbf, r);
    float *c = malloc(m * ldc * sizeof *c), *c2 = malloc(m * ldc * sizeof *c2);
    double *bound = malloc(m * n * sizeof *bound);
    fill(c, m * ldc, r);
    if (beta == 0.0f)
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++)
                c[i * ldc + j] = NAN; /* beta 0 overwrites, even NaN */
    memcpy(c2, c, m * ldc * sizeof *c);
    fn(ta, tb, m, n, k, alpha, a, abf, lda, b, bbf, ldb, beta, c, ldc);
    naive(ta, tb, m, n, k, alpha, a, abf, lda, b, bbf, ldb, beta, c2, ldc, bound);
    for (size_t i = 0; i < m; i++) {
        ck_assert_int_eq(memcmp(c + i * ldc + n, c2 + i * ldc + n, sizeof *c), 0);
        for (size_t j = 0; j < n; j++)
            ck_assert_msg(
                fabs((double)c[i * ldc + j] - c2[i * ldc + j]) <= bound[i * n + j],
                "%zux%zux%zu ta=%d tb=%d abf=%d bbf=%d (%zu,%zu): %.9g vs %.9g (bound %g)", m, n, k,
                ta, tb, abf, bbf, i, j, (double)c[i * ldc + j], (double)c2[i * ldc + j],
                bound[i * n + j]);
    }
    free(a); free(b); free(c); free(c2); free(bound);
}

static const size_t k_shapes[][3] = { { 1, 1, 1 },   { 3, 5, 7 },    { 13, 33, 1 },
                                      { 12, 32, 2 }, { 25, 70, 65 }, { 40, 100, 300 },
                                      { 17, 45, 1537 }, { 130, 9, 33 } };

START_TEST(test_emulated_matches_naive)
{
    pt_rng r;
    pt__rng_seed(&r, 7);
    static const float ab[][2] = { { 1.0f, 0.0f }, { 0.5f, 2.0f }, { -1.5f, 1.0f } };
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int mix = 0; mix < 4; mix++) {
                const float *x = ab[(s + (size_t)t + (size_t)mix) % 3];
                check_against_naive(pt__gemm_bf16_emulated, k_shapes[s], t, mix, x[0], x[1], &r);
            }
    ran_emulated = true;
}
END_TEST

/* pt__bf16_pack against the definition, element by element: every layout
 * (k-major or not, BF16 or FP32, pair words or split), odd k, partial
 * panels, and FP32 values that round in every way (ties, NaN, Inf,
 * denormals). */
START_TEST(test_pack_matches_definition)
{
    static const float special[] = { NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -3e-39f, 0.0f, -0.0f,
                                     1.00390625f, 1.01171875f, 3.4e38f, -1.0f };
    static const size_t cases[][4] = { { 12, 12, 0, 37 }, { 32, 29, 3, 64 }, { 12, 5, 1, 1 },
                                       { 32, 32, 8, 17 }, { 12, 8, 2, 8 } }; /* R, rn, k0, kn */
    pt_rng r;
    pt__rng_seed(&r, 31);
    for (size_t cs = 0; cs < sizeof cases / sizeof cases[0]; cs++)
        for (int v = 0; v < 8; v++) {
            size_t R = cases[cs][0], rn = cases[cs][1], k0 = cases[cs][2], kn = cases[cs][3];
            bool kmajor = v & 4, bf16 = v & 2, split = v & 1;
            size_t r0 = 2, rows = kmajor ? k0 + kn : r0 + rn, cols = kmajor ? r0 + rn : k0 + kn;
            size_t ld = cols + 3, np = (kn + 1) / 2;
            float *f = malloc(rows * ld * sizeof *f);
            for (size_t i = 0; i < rows * ld; i++)
                f[i] = i % 7 == 3 ? special[pt__rng_below(&r, 12)] : (float)pt__rng_normal(&r);
            pt_bf16 *h = malloc(rows * ld * sizeof *h);
            for (size_t i = 0; i < rows * ld; i++)
                h[i] = pt__f32_to_bf16(f[i]);
            pt_gemm_operand x = { bf16 ? (const void *)h : (const void *)f, ld, bf16, kmajor };
            uint32_t *d = malloc(2 * R * np * sizeof *d);
            pt__bf16_pack(&x, r0, rn, R, k0, kn, d, split);
            for (size_t q = 0; q < np; q++)
                for (size_t i = 0; i < R; i++) {
                    uint32_t lo = 0, hi = 0;
                    for (size_t e = 0; e < 2 && i < rn && 2 * q + e < kn; e++) {
                        size_t kk = k0 + 2 * q + e, at = kmajor ? kk * ld + r0 + i : (r0 + i) * ld + kk;
                        *(e ? &hi : &lo) = h[at];
                    }
                    if (split) {
                        ck_assert_uint_eq(d[2 * q * R + i], hi << 16);
                        ck_assert_uint_eq(d[2 * q * R + R + i], lo << 16);
                    } else {
                        ck_assert_msg(d[q * R + i] == (lo | hi << 16), "case %zu v %d q %zu i %zu", cs,
                                      v, q, i);
                    }
                }
            free(f); free(h); free(d);
        }
}
END_TEST

/* The documented order of the sums (kernels/bf16.h), element by element:
 * k in blocks of at most 768 fixed by k, pairs through pt__dpbf16_lane, C =
 * alpha S + beta C after the first block and C += alpha S after the others
 * (fmaf).  Every kernel equals it bit for bit. */
static void exact_order(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                        const float *a, size_t lda, const float *b, size_t ldb, float beta,
                        float *c, size_t ldc)
{
    size_t nkb = (k + 767) / 768, kc = ((k + nkb - 1) / nkb + 1) / 2 * 2;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            for (size_t k0 = 0; k0 < k; k0 += kc) {
                size_t kn = k - k0 < kc ? k - k0 : kc;
                float acc = 0.0f;
                for (size_t q = 0; q < (kn + 1) / 2; q++) {
                    uint32_t wa = 0, wb = 0;
                    for (size_t e = 0; e < 2 && 2 * q + e < kn; e++) {
                        size_t kk = k0 + 2 * q + e;
                        wa |= (uint32_t)pt__f32_to_bf16(ta ? a[kk * lda + i] : a[i * lda + kk]) << (16 * e);
                        wb |= (uint32_t)pt__f32_to_bf16(tb ? b[j * ldb + kk] : b[kk * ldb + j]) << (16 * e);
                    }
                    acc = pt__dpbf16_lane(acc, wa, wb);
                }
                float *p = &c[i * ldc + j];
                *p = k0 > 0 ? fmaf(alpha, acc, *p) : beta == 0.0f ? alpha * acc : fmaf(alpha, acc, beta * *p);
            }
}

START_TEST(test_kernels_follow_the_exact_order)
{
    static const size_t shapes[][3] = { { 30, 70, 1600 }, { 13, 40, 7 }, { 25, 33, 769 } };
    static const pt_bf16_kernel kinds[] = { PT_BF16_KERNEL_EMULATED, PT_BF16_KERNEL_DPBF16,
                                            PT_BF16_KERNEL_FMA };
    pt_rng r;
    pt__rng_seed(&r, 41);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            size_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n;
            float *a = malloc((ta ? k : m) * lda * 4), *b = malloc((tb ? n : k) * ldb * 4);
            float *c0 = malloc(m * n * 4), *c1 = malloc(m * n * 4), *ref = malloc(m * n * 4);
            fill(a, (ta ? k : m) * lda, &r);
            fill(b, (tb ? n : k) * ldb, &r);
            fill(c0, m * n, &r);
            memcpy(ref, c0, m * n * 4);
            exact_order(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 1.5f, ref, ldc);
            for (size_t v = 0; v < 3; v++) {
                if (!pt__bf16_kernel_available(kinds[v]))
                    continue;
                memcpy(c1, c0, m * n * 4);
                pt__gemm_bf16_nt(2, kinds[v], ta, tb, m, n, k, 0.5f, a, false, lda, b, false, ldb,
                                1.5f, c1, ldc);
                ck_assert_msg(memcmp(c1, ref, m * n * 4) == 0, "%s %zux%zux%zu t=%d: not the exact order",
                              pt__bf16_kernel_name(kinds[v]), m, n, k, t);
            }
            free(a); free(b); free(c0); free(c1); free(ref);
        }
}
END_TEST

START_TEST(test_k_zero)
{
    float c[4] = { 1, 2, 3, 4 }, a[1] = { 0 }, b[1] = { 0 };
    pt__gemm_bf16_emulated(false, false, 2, 2, 0, 1.0f, a, false, 1, b, false, 2, 3.0f, c, 2);
    ck_assert_float_eq(c[0], 3.0f);
    ck_assert_float_eq(c[3], 12.0f);
    pt__gemm_mixed(false, false, 2, 2, 0, 1.0f, a, true, 1, b, true, 2, 0.0f, c, 2);
    ck_assert_float_eq(c[2], 0.0f);
}
END_TEST

/* A random BF16 value: mostly normals of varied magnitude, some denormals
 * (exponent 0), zeros and large values. */
static uint32_t random_bf16(pt_rng *r)
{
    uint32_t x = (uint32_t)pt__rng_next(r);
    uint32_t sign = x & 0x8000u, man = (x >> 16) & 0x7fu, kind = (x >> 24) % 8;
    uint32_t exp = kind == 0 ? 0 : kind == 1 ? 1 + ((x >> 4) % 12) : 100 + ((x >> 4) % 55);
    return sign | exp << 7 | man;
}

/* Random lanes (incl. denormal inputs and accumulators, and products that
 * underflow) through fn against pt__dpbf16_lane: the number of lanes that
 * differ, each by at most 1 ulp; -1 when fn cannot run here. */
static long lanes_vs_emulation(bool (*fn)(float *, const uint32_t *, const uint32_t *, size_t))
{
    enum { N = 1 << 16 };
    pt_rng r;
    pt__rng_seed(&r, 11);
    float *acc = malloc(N * sizeof *acc), *emu = malloc(N * sizeof *emu);
    uint32_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (size_t i = 0; i < N; i++) {
        a[i] = random_bf16(&r) | random_bf16(&r) << 16;
        b[i] = random_bf16(&r) | random_bf16(&r) << 16;
        uint32_t u = (uint32_t)pt__rng_next(&r);
        if (i % 5 == 0)
            u &= 0x807fffffu; /* a denormal accumulator */
        else if (i % 5 == 1)
            u = (u & 0x80ffffffu) | 0x0c000000u; /* tiny: the products' scale */
        else
            u = (u & 0x83ffffffu) | 0x3c000000u;
        memcpy(&acc[i], &u, sizeof u);
        emu[i] = pt__dpbf16_lane(acc[i], a[i], b[i]);
    }
    long diff = -1;
    if (fn(acc, a, b, N)) {
        diff = 0;
        for (size_t i = 0; i < N; i++) {
            uint32_t x, y;
            memcpy(&x, &acc[i], 4);
            memcpy(&y, &emu[i], 4);
            if (x == y)
                continue;
            diff++;
            long d = (long)(int32_t)x - (long)(int32_t)y;
            ck_assert_msg(labs(d) <= 1 || (fabsf(acc[i]) == 0.0f && fabsf(emu[i]) == 0.0f),
                          "lane %zu: a %08x b %08x: got %08x, emulation %08x", i, a[i], b[i], x, y);
        }
    }
    free(acc); free(emu); free(a); free(b);
    return diff;
}

START_TEST(test_lane_emulation_vs_instruction)
{
    if (!cpu_has_bf16()) {
        printf("skipped: the real vdpbf16ps (this CPU has no AVX512_BF16)\n");
        return;
    }
    hw_lanes_differing = lanes_vs_emulation(pt__dpbf16_hw_lanes);
    ck_assert_int_ge(hw_lanes_differing, 0);
    printf("vdpbf16ps emulation vs the real instruction: %ld of %d lanes differ\n",
           hw_lanes_differing, 1 << 16);
    ran_hw_lanes = true;
}
END_TEST

START_TEST(test_lane_fma_vs_emulation)
{
    if (!pt__bf16_kernel_available(PT_BF16_KERNEL_FMA)) {
        printf("skipped: the FMA kernel's lanes (this CPU has no AVX-512)\n");
        return;
    }
    fma_lanes_differing = lanes_vs_emulation(pt__dpbf16_fma_lanes);
    ck_assert_int_ge(fma_lanes_differing, 0);
    printf("vdpbf16ps emulation vs FMAs under DAZ/FTZ: %ld of %d lanes differ\n",
           fma_lanes_differing, 1 << 16);
    ran_fma_lanes = true;
}
END_TEST

/* The product of one shape through pt__gemm_bf16_nt(nt, emulated), on fresh
 * operands from seed (the same seed gives the same inputs). */
static float *run_bf16(int nt, pt_bf16_kernel kind, const size_t shape[3], int t, int mix,
                       uint64_t seed)
{
    pt_rng r;
    pt__rng_seed(&r, seed);
    bool ta = t & 1, tb = t & 2, abf = mix & 1, bbf = mix & 2;
    size_t m = shape[0], n = shape[1], k = shape[2];
    size_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3, ldc = n + 2;
    void *a = make_operand(ta ? k : m, lda, abf, &r), *b = make_operand(tb ? n : k, ldb, bbf, &r);
    float *c = malloc(m * ldc * sizeof *c);
    fill(c, m * ldc, &r);
    pt__gemm_bf16_nt(nt, kind, ta, tb, m, n, k, 0.75f, a, abf, lda, b, bbf, ldb, 1.25f, c, ldc);
    free(a);
    free(b);
    return c;
}

/* Shapes with several row chunks, k blocks and column blocks. */
static const size_t big_shapes[][3] = { { 1030, 70, 1540 }, { 50, 700, 801 }, { 16, 1536, 576 } };

/* Bits equal, or both NaN (the NaN a product yields is not specified). */
static bool same_or_nan(const float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof *x) != 0 && !(isnan(x[i]) && isnan(y[i])))
            return false;
    return true;
}

/* C = A B with kernel kind where A and B hold some Inf, NaN, denormal
 * (read as zero), huge and tiny values (products that overflow or
 * underflow, sums flushed to zero). */
static float *run_special(pt_bf16_kernel kind, bool bf16)
{
    enum { M = 30, N = 70, K = 45 };
    static const float special[] = { INFINITY, -INFINITY, NAN, 1e-39f, -2e-40f, 3e38f, -1e30f,
                                     1e-20f, -3e-19f, 0.0f };
    pt_rng r;
    pt__rng_seed(&r, 77);
    float *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b), *c = malloc(M * N * sizeof *c);
    for (size_t i = 0; i < M * K; i++)
        a[i] = pt__rng_below(&r, 20) == 0 ? special[pt__rng_below(&r, 10)] : (float)pt__rng_normal(&r);
    for (size_t i = 0; i < K * N; i++)
        b[i] = pt__rng_below(&r, 20) == 0 ? special[pt__rng_below(&r, 10)] : (float)pt__rng_normal(&r);
    pt_bf16 *hb = malloc(K * N * sizeof *hb);
    pt__f32_to_bf16_n(hb, b, K * N);
    pt__gemm_bf16_nt(1, kind, false, false, M, N, K, 1.0f, a, false, K, bf16 ? (void *)hb : (void *)b,
                    bf16, N, 0.0f, c, N);
    free(a); free(b); free(hb);
    return c;
}

/* The GEMM with kernel kind equal bit for bit to the emulated one. */
static void gemm_equals_emulated(pt_bf16_kernel kind)
{
    for (int bf = 0; bf < 2; bf++) {
        float *x = run_special(kind, bf), *y = run_special(PT_BF16_KERNEL_EMULATED, bf);
        ck_assert_msg(same_or_nan(x, y, 30 * 70), "%s: special values differ", pt__bf16_kernel_name(kind));
        free(x);
        free(y);
    }
    for (size_t s = 0; s < sizeof big_shapes / sizeof big_shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            const size_t *sh = big_shapes[s];
            int mix = (int)(s + (size_t)t) % 4;
            float *x = run_bf16(2, kind, sh, t, mix, 100 + s);
            float *y = run_bf16(2, PT_BF16_KERNEL_EMULATED, sh, t, mix, 100 + s);
            ck_assert_msg(memcmp(x, y, sh[0] * (sh[1] + 2) * sizeof *x) == 0,
                          "shape %zu t=%d: %s and emulation differ", s, t,
                          pt__bf16_kernel_name(kind));
            free(x);
            free(y);
        }
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++)
        for (int mix = 0; mix < 4; mix++) {
            const size_t *sh = k_shapes[s];
            float *x = run_bf16(2, kind, sh, mix, mix, 200 + s);
            float *y = run_bf16(2, PT_BF16_KERNEL_EMULATED, sh, mix, mix, 200 + s);
            ck_assert_int_eq(memcmp(x, y, sh[0] * (sh[1] + 2) * sizeof *x), 0);
            free(x);
            free(y);
        }
}

START_TEST(test_instruction_gemm_equals_emulated)
{
    if (!cpu_has_bf16()) {
        printf("skipped: the real-instruction GEMM (this CPU has no AVX512_BF16)\n");
        return;
    }
    gemm_equals_emulated(PT_BF16_KERNEL_DPBF16);
    ran_hw_gemm = true;
}
END_TEST

START_TEST(test_fma_gemm_equals_emulated)
{
    if (!pt__bf16_kernel_available(PT_BF16_KERNEL_FMA)) {
        printf("skipped: the FMA kernel's GEMM (this CPU has no AVX-512)\n");
        return;
    }
    gemm_equals_emulated(PT_BF16_KERNEL_FMA);
    ran_fma_gemm = true;
}
END_TEST

START_TEST(test_mixed_uses_the_bf16_kernel)
{
    /* pt__gemm_mixed on a BF16 path is the kernel AUTO picks; MXCSR is left
     * as it was. */
    if (!pt__cpu_bf16_compute()) {
        printf("skipped: pt__gemm_mixed's BF16 path (the active path, %s, has no BF16 "
               "arithmetic)\n", pt__cpu_level_str(pt__cpu_active()));
        return;
    }
    pt_rng r;
    pt__rng_seed(&r, 3);
    float a[6 * 40], b[40 * 5], c1[30], c2[30];
    fill(a, 240, &r);
    fill(b, 200, &r);
    unsigned int csr = __builtin_ia32_stmxcsr();
    pt__gemm_mixed(false, false, 6, 5, 40, 1.0f, a, false, 40, b, false, 5, 0.0f, c1, 5);
    ck_assert_uint_eq(csr, __builtin_ia32_stmxcsr());
    pt__gemm_bf16_nt(1, PT_BF16_KERNEL_EMULATED, false, false, 6, 5, 40, 1.0f, a, false, 40, b,
                    false, 5, 0.0f, c2, 5);
    ck_assert_int_eq(memcmp(c1, c2, sizeof c1), 0);
}
END_TEST

START_TEST(test_threads_bit_identical)
{
    static const pt_bf16_kernel kinds[] = { PT_BF16_KERNEL_EMULATED, PT_BF16_KERNEL_DPBF16,
                                            PT_BF16_KERNEL_FMA };
    for (size_t s = 0; s < sizeof big_shapes / sizeof big_shapes[0]; s++)
        for (size_t v = 0; v < 3; v++) {
            if (!pt__bf16_kernel_available(kinds[v]))
                continue;
            const size_t *sh = big_shapes[s];
            int t = (int)s % 4, mix = 3 - (int)s % 4;
            float *x = run_bf16(1, kinds[v], sh, t, mix, 300 + s),
                  *y = run_bf16(2, kinds[v], sh, t, mix, 300 + s);
            ck_assert_msg(memcmp(x, y, sh[0] * (sh[1] + 2) * sizeof *x) == 0,
                          "shape %zu %s: 1 and 2 threads differ", s, pt__bf16_kernel_name(kinds[v]));
            free(x);
            free(y);
        }
}
END_TEST

/* An FP32 copy of rows x ld values stored as BF16 (bf16) or FP32. */
static float *widened(const void *p, bool bf16, size_t n)
{
    float *w = malloc(n * sizeof *w);
    if (bf16)
        pt__bf16_to_f32_n(w, p, n);
    else
        memcpy(w, p, n * sizeof *w);
    return w;
}

START_TEST(test_f32_path_widens_exactly)
{
    ck_assert_ok(pt_set_cpu_path("avx2"));
    ck_assert(!pt__cpu_bf16_compute());
    /* one BLIS call, row and column cuts, small products */
    static const size_t shapes[][3] = { { 3, 5, 7 }, { 200, 150, 64 }, { 700, 40, 30 },
                                        { 30, 650, 20 }, { 1100, 300, 17 }, { 64, 1000, 130 } };
    pt_rng r;
    pt__rng_seed(&r, 23);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int mix = 1; mix < 4; mix++) {
                bool ta = t & 1, tb = t & 2, abf = mix & 1, bbf = mix & 2;
                size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                size_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
                size_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb;
                void *a = make_operand(ta ? k : m, lda, abf, &r),
                     *b = make_operand(tb ? n : k, ldb, bbf, &r);
                float *wa = widened(a, abf, na), *wb = widened(b, bbf, nb);
                float *c1 = malloc(m * ldc * sizeof *c1), *c2 = malloc(m * ldc * sizeof *c2);
                fill(c1, m * ldc, &r);
                memcpy(c2, c1, m * ldc * sizeof *c1);
                pt__gemm_mixed(ta, tb, m, n, k, 0.5f, a, abf, lda, b, bbf, ldb, 1.5f, c1, ldc);
                pt__sgemm(ta, tb, m, n, k, 0.5f, wa, lda, wb, ldb, 1.5f, c2, ldc);
                ck_assert_msg(memcmp(c1, c2, m * ldc * sizeof *c1) == 0,
                              "%zux%zux%zu ta=%d tb=%d abf=%d bbf=%d: not pt__sgemm's bits", m, n, k,
                              ta, tb, abf, bbf);
                free(a); free(b); free(wa); free(wb); free(c1); free(c2);
            }
    ck_assert_ok(pt_set_cpu_path(NULL));
    ran_f32_path = true;
}
END_TEST

/* A product whose FP32 copies would pass 16 MB (a frozen BF16 LM head's
 * gradient: k = the vocabulary) goes in slices of k: pt__sgemm's values on
 * the widened operands up to the summation order (1e-5 of the sum of
 * magnitudes), every transpose, beta 0 over NaN and beta 1.5. */
START_TEST(test_f32_path_large_k_in_slices)
{
    ck_assert_ok(pt_set_cpu_path("avx2"));
    pt_rng r;
    pt__rng_seed(&r, 29);
    const size_t m = 40, n = 600, k = 6000; /* 19 MB of copies: two slices */
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2, abf = t != 1, bbf = true;
        size_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
        size_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb;
        void *a = make_operand(ta ? k : m, lda, abf, &r), *b = make_operand(tb ? n : k, ldb, bbf, &r);
        float *wa = widened(a, abf, na), *wb = widened(b, bbf, nb);
        float *c1 = malloc(m * ldc * sizeof *c1), *c2 = malloc(m * ldc * sizeof *c2);
        float beta = t == 2 ? 0.0f : 1.5f;
        fill(c1, m * ldc, &r);
        if (beta == 0.0f)
            for (size_t i = 0; i < m * ldc; i++)
                c1[i] = NAN;
        memcpy(c2, c1, m * ldc * sizeof *c1);
        pt__gemm_mixed(ta, tb, m, n, k, 0.5f, a, abf, lda, b, bbf, ldb, beta, c1, ldc);
        pt__sgemm(ta, tb, m, n, k, 0.5f, wa, lda, wb, ldb, beta, c2, ldc);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double sa = 0;
                for (size_t p = 0; p < k; p++)
                    sa += fabs((double)wa[ta ? p * lda + i : i * lda + p] *
                               wb[tb ? j * ldb + p : p * ldb + j]);
                ck_assert_msg(fabs((double)c1[i * ldc + j] - c2[i * ldc + j]) <= 1e-5 * sa + 1e-6,
                              "t=%d (%zu,%zu): %.9g vs %.9g", t, i, j, (double)c1[i * ldc + j],
                              (double)c2[i * ldc + j]);
            }
        free(a); free(b); free(wa); free(wb); free(c1); free(c2);
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

int main(void)
{
    if (pt_set_num_threads(2) != PT_OK)
        return EXIT_FAILURE;
    Suite *s = suite_create("gemm_bf16");
    TCase *tc = tcase_create("gemm_bf16");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_emulated_matches_naive);
    tcase_add_test(tc, test_kernels_follow_the_exact_order);
    tcase_add_test(tc, test_k_zero);
    tcase_add_test(tc, test_pack_matches_definition);
    tcase_add_test(tc, test_lane_emulation_vs_instruction);
    tcase_add_test(tc, test_lane_fma_vs_emulation);
    tcase_add_test(tc, test_instruction_gemm_equals_emulated);
    tcase_add_test(tc, test_fma_gemm_equals_emulated);
    tcase_add_test(tc, test_mixed_uses_the_bf16_kernel);
    tcase_add_test(tc, test_threads_bit_identical);
    tcase_add_test(tc, test_f32_path_widens_exactly);
    tcase_add_test(tc, test_f32_path_large_k_in_slices);
    suite_add_tcase(s, tc);
    int rc = pt_test_run(s);
    printf("paths: emulated BF16 GEMM %s; real vdpbf16ps lanes %s, GEMM %s; FMA kernel lanes %s, "
           "GEMM %s; FP32 path (avx2) %s\n",
           ran_emulated ? "ran" : "did not run",
           ran_hw_lanes ? "ran" : "skipped (no AVX512_BF16)",
           ran_hw_gemm ? "ran" : "skipped (no AVX512_BF16)",
           ran_fma_lanes ? "ran" : "skipped (no AVX-512)",
           ran_fma_gemm ? "ran" : "skipped (no AVX-512)",
           ran_f32_path ? "ran" : "did not run");
    printf("lanes differing from the emulation (of 65536): instruction %ld, FMA kernel %ld "
           "(-1: not run); pt__gemm_mixed's BF16 kernel here: %s\n",
           hw_lanes_differing, fma_lanes_differing, pt__bf16_kernel_name(pt__bf16_kernel_auto()));
    return rc;
}
