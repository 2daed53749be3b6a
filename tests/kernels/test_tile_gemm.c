/* The BF16 tile products (kernels/tile_gemm.h) and attention's use of
 * them: the C emulation of tdpbf16ps against a double-precision loop over
 * BF16-rounded operands (every transpose, odd sizes, k = 0, alpha/beta,
 * beta 0 over NaN); the AVX-512 packing (vcvtne2ps2bf16) equal bit for
 * bit to the plain C one (NaN, Inf, ties, denormals flushed, the largest
 * denormal that would round up), and both equal to the layout's
 * definition; AMX against the same loop and against the emulation, where
 * the CPU has AMX; attention with BF16 tiles against the FP32 attention
 * (forward and backward, segments, windows, odd tiles), 1 and 2 threads
 * bit-identical; and the mode's choice (PT_CPU below avx512bf16: off).
 * The paths that ran and the ones this CPU skipped are printed at the end. */
#include "testutil.h"

#include "core/core.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/tile_gemm.h"

#include <math.h>

static bool ran_emulated, ran_amx, ran_vec_pack, ran_attn_amx;
static long amx_differing = -1;

static bool have_amx(void)
{
    return pt__cpu_has_amx();
}

static void fill(float *x, size_t n, pt_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)pt__rng_normal(r);
}

/* FP32 -> BF16 as the tiles read it: round to nearest even, FP32
 * denormals as signed zeros. */
static pt_bf16 tile_bf16(float x)
{
    if (x != 0.0f && fabsf(x) < 1.17549435e-38f)
        return signbit(x) ? 0x8000 : 0;
    return pt__f32_to_bf16(x);
}

static double rounded(float x)
{
    return pt__bf16_to_f32(tile_bf16(x));
}

typedef struct product {
    bool ta, tb;
    size_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    float *a, *b, *c0; /* c0: C before the product */
} product;

static product make_product(const size_t shape[3], int t, float alpha, float beta, pt_rng *r)
{
    product p = { .ta = t & 1, .tb = t & 2, .m = shape[0], .n = shape[1], .k = shape[2],
                  .alpha = alpha, .beta = beta };
    p.lda = (p.ta ? p.m : p.k) + 3;
    p.ldb = (p.tb ? p.k : p.n) + 2;
    p.ldc = p.n + 1;
    size_t ar = p.ta ? p.k : p.m, br = p.tb ? p.n : p.k;
    p.a = malloc((ar * p.lda + 1) * sizeof *p.a);
    p.b = malloc((br * p.ldb + 1) * sizeof *p.b);
    p.c0 = malloc(p.m * p.ldc * sizeof *p.c0);
    fill(p.a, ar * p.lda, r);
    fill(p.b, br * p.ldb, r);
    fill(p.c0, p.m * p.ldc, r);
    if (beta == 0.0f)
        for (size_t i = 0; i < p.m; i++)
            for (size_t j = 0; j < p.n; j++)
                p.c0[i * p.ldc + j] = NAN; /* beta 0 overwrites, even NaN */
    return p;
}

static void free_product(product *p)
{
    free(p->a), free(p->b), free(p->c0);
}

/* C through mode (a fresh copy of c0). */
static float *run_product(const product *p, pt_tile_mode mode)
{
    float *c = malloc(p->m * p->ldc * sizeof *c);
    memcpy(c, p->c0, p->m * p->ldc * sizeof *c);
    pt_bf16 *pack = malloc(pt__tile_gemm_pack_elems(p->m, p->n, p->k) * sizeof *pack);
    ck_assert(pt__tile_gemm(mode, p->ta, p->tb, p->m, p->n, p->k, p->alpha, p->a, p->lda, p->b,
                            p->ldb, p->beta, c, p->ldc, pack));
    free(pack);
    return c;
}

/* C against the double loop over the rounded operands, within the FP32
 * accumulation's bound; C's padding column untouched. */
static void check_against_naive(const product *p, const float *c)
{
    const double u = ldexp(1.0, -24);
    for (size_t i = 0; i < p->m; i++) {
        ck_assert_int_eq(memcmp(c + i * p->ldc + p->n, p->c0 + i * p->ldc + p->n, sizeof *c), 0);
        for (size_t j = 0; j < p->n; j++) {
            double s = 0, sa = 0;
            for (size_t x = 0; x < p->k; x++) {
                double ax = rounded(p->ta ? p->a[x * p->lda + i] : p->a[i * p->lda + x]);
                double bx = rounded(p->tb ? p->b[j * p->ldb + x] : p->b[x * p->ldb + j]);
                s += ax * bx;
                sa += fabs(ax * bx);
            }
            double cb = p->beta == 0.0f ? 0.0 : (double)p->beta * p->c0[i * p->ldc + j];
            double want = p->alpha * s + cb;
            double bound = 2.0 * u * ((double)(p->k + 4) * fabs(p->alpha) * sa + 2.0 * fabs(cb)) + 1e-30;
            ck_assert_msg(fabs(c[i * p->ldc + j] - want) <= bound,
                          "%zux%zux%zu ta=%d tb=%d (%zu,%zu): %.9g vs %.9g (bound %g)", p->m, p->n,
                          p->k, p->ta, p->tb, i, j, (double)c[i * p->ldc + j], want, bound);
        }
    }
}

static const size_t k_shapes[][3] = { { 1, 1, 1 },    { 3, 5, 7 },      { 13, 33, 1 },
                                      { 12, 32, 2 },  { 40, 70, 65 },   { 64, 128, 64 },
                                      { 17, 45, 100 }, { 130, 9, 33 },  { 5, 6, 0 } };
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

static void naive_cases(pt_tile_mode mode)
{
    pt_rng r;
    pt__rng_seed(&r, 7 + (uint64_t)mode);
    /* alpha 1 with beta 0 or 1: whole 32 x 32 blocks accumulate in C itself */
    static const float ab[][2] = { { 1.0f, 0.0f }, { 0.5f, 2.0f }, { -1.5f, 1.0f }, { 1.0f, 1.0f } };
    for (size_t s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++) {
            const float *x = ab[(s + (size_t)t) % 4];
            product p = make_product(k_shapes[s], t, x[0], x[1], &r);
            float *c = run_product(&p, mode);
            check_against_naive(&p, c);
            free(c);
            free_product(&p);
        }
}

START_TEST(test_emulated_matches_naive)
{
    naive_cases(PT_TILE_EMULATED);
    ran_emulated = true;
}
END_TEST

START_TEST(test_amx_matches_naive)
{
    if (!have_amx())
        return;
    naive_cases(PT_TILE_AMX);
    ran_amx = true;
}
END_TEST

/* AMX against the emulation: the same values up to the instruction's
 * internal additions (counted and printed). */
START_TEST(test_amx_vs_emulated)
{
    if (!have_amx())
        return;
    pt_rng r;
    pt__rng_seed(&r, 99);
    long differing = 0;
    for (size_t s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++) {
            product p = make_product(k_shapes[s], t, 1.0f, 1.0f, &r);
            float *c1 = run_product(&p, PT_TILE_AMX), *c2 = run_product(&p, PT_TILE_EMULATED);
            for (size_t i = 0; i < p.m; i++)
                for (size_t j = 0; j < p.n; j++) {
                    float x = c1[i * p.ldc + j], y = c2[i * p.ldc + j];
                    differing += x != y;
                    ck_assert_msg(fabsf(x - y) <= 1e-5f * (1.0f + fabsf(y) + (float)p.k),
                                  "AMX %.9g vs emulated %.9g", (double)x, (double)y);
                }
            free(c1), free(c2);
            free_product(&p);
        }
    amx_differing = differing;
}
END_TEST

/* The packed layout against its definition, and the AVX-512 packing equal
 * to the plain one bit for bit, over values that round every way. */
START_TEST(test_pack_definition_and_vector)
{
    static const float special[] = { NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -3e-39f, 0.0f, -0.0f,
                                     1.00390625f, 1.01171875f, 3.4e38f, 1.1754942e-38f };
    static const size_t cases[][3] = { { 1, 1, 1 }, { 17, 33, 31 }, { 32, 32, 32 }, { 64, 128, 64 },
                                       { 5, 40, 67 } };
    pt_rng r;
    pt__rng_seed(&r, 31);
    bool vec = pt__cpu_detected() >= PT_CPU_AVX512BF16;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int t = 0; t < 4; t++) {
            product p = make_product(cases[ci], t, 1.0f, 0.0f, &r);
            size_t na = (p.ta ? p.k : p.m) * p.lda, nb = (p.tb ? p.n : p.k) * p.ldb;
            for (size_t i = 0; i < na; i += 5)
                p.a[i] = special[(i / 5) % 12];
            for (size_t i = 0; i < nb; i += 7)
                p.b[i] = special[(i / 7) % 12];
            size_t ne = pt__tile_gemm_pack_elems(p.m, p.n, p.k);
            pt_bf16 *x = malloc(ne * sizeof *x), *y = malloc(ne * sizeof *y);
            memset(x, 0xa5, ne * sizeof *x);
            pt__tile_pack(false, p.ta, p.tb, p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, x);
            size_t Mp = (p.m + 31) & ~(size_t)31, Np = (p.n + 31) & ~(size_t)31;
            size_t Kp = (p.k + 31) & ~(size_t)31;
            const pt_bf16 *pa = x, *pb = x + Mp * Kp;
            for (size_t i = 0; i < Mp; i++)
                for (size_t q = 0; q < Kp; q++) {
                    pt_bf16 want = i < p.m && q < p.k
                                       ? tile_bf16(p.ta ? p.a[q * p.lda + i] : p.a[i * p.lda + q])
                                       : 0;
                    ck_assert_uint_eq(pa[i * Kp + q], want);
                }
            for (size_t q = 0; q < Kp; q++)
                for (size_t j = 0; j < Np; j++) {
                    pt_bf16 want = j < p.n && q < p.k
                                       ? tile_bf16(p.tb ? p.b[j * p.ldb + q] : p.b[q * p.ldb + j])
                                       : 0;
                    ck_assert_uint_eq(pb[(q / 2) * 2 * Np + 2 * j + (q & 1)], want);
                }
            if (vec) {
                memset(y, 0x5a, ne * sizeof *y);
                pt__tile_pack(true, p.ta, p.tb, p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, y);
                ck_assert_int_eq(memcmp(x, y, ne * sizeof *x), 0);
                ran_vec_pack = true;
            }
            free(x), free(y);
            free_product(&p);
        }
}
END_TEST

/* pt__f32_to_bf16_n (vcvtne2ps2bf16 where the path has AVX512_BF16, blocks
 * with an FP32 denormal in C) against pt__f32_to_bf16 value by value, on
 * every path the CPU runs: lengths around the 32-value blocks, and one
 * long enough to be split between threads. */
START_TEST(test_convert_n_exact)
{
    static const float special[] = { NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -3e-39f, 0.0f, -0.0f,
                                     1.00390625f, 1.01171875f, 3.4028235e38f, 1.1754942e-38f };
    const size_t big = (1u << 19) + 45;
    float *x = malloc((big + 2) * sizeof *x); /* starts at offsets 0-2 */
    pt_bf16 *y = malloc(big * sizeof *y);
    pt_rng r;
    pt__rng_seed(&r, 5);
    for (size_t i = 0; i < big + 2; i++)
        x[i] = (float)(pt__rng_normal(&r) * 100.0);
    for (size_t i = 0; i < big; i += 97)
        x[i] = special[(i / 97) % 12];
    for (int l = 0; l <= (int)pt__cpu_detected(); l++) {
        ck_assert_ok(pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)l)));
        static const size_t lens[] = { 0, 1, 31, 32, 33, 64, 95, 100 };
        for (size_t c = 0; c < sizeof lens / sizeof lens[0] + 1; c++) {
            size_t n = c < sizeof lens / sizeof lens[0] ? lens[c] : big;
            size_t off = c % 3; /* unaligned starts too */
            memset(y, 0x5a, big * sizeof *y);
            pt__f32_to_bf16_n(y, x + off, n);
            for (size_t i = 0; i < n; i++)
                ck_assert_msg(y[i] == pt__f32_to_bf16(x[off + i]), "path %s n %zu [%zu]: %04x vs %04x",
                              pt_cpu_path(), n, i, y[i], pt__f32_to_bf16(x[off + i]));
            if (n < big)
                ck_assert_uint_eq(y[n], 0x5a5a);
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
    free(x), free(y);
}
END_TEST

/* ---- attention ---- */

typedef struct attn_run {
    float *out, *lse, *dq, *dk, *dv;
} attn_run;

static attn_run attention(const pt_attn_shape *s, const float *q, const float *k, const float *v,
                          const float *d)
{
    size_t nq = (size_t)s->batch * s->seq * s->nh * s->hd;
    size_t nk = (size_t)s->batch * s->seq * s->nkv * s->hd;
    attn_run r = { malloc(nq * 4), malloc((size_t)s->batch * s->nh * s->seq * 4), malloc(nq * 4),
                   malloc(nk * 4), malloc(nk * 4) };
    float *scratch = malloc(pt__attention_scratch_floats(s, pt_get_num_threads()) * 4);
    pt__attention_forward(r.out, r.lse, q, k, v, s, scratch);
    pt__attention_backward(r.dq, r.dk, r.dv, d, q, k, v, r.out, r.lse, s, scratch);
    free(scratch);
    return r;
}

static void free_run(attn_run *r)
{
    free(r->out), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
}

/* Relative L2 distance of x from y. */
static double rel_l2(const float *x, const float *y, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += (double)y[i] * y[i];
    }
    return sqrt(num / (den + 1e-300));
}

static bool same(const float *x, const float *y, size_t n)
{
    return memcmp(x, y, n * sizeof *x) == 0;
}

/* BF16 tiles in mode against FP32, for one shape: every output within 1e-2
 * relative L2 and not equal (the tiles ran); 1 and 2 threads the same bits. */
static void attention_case(pt_tile_mode mode, int B, int T, int nh, int nkv, int hd, bool segs,
                           int window, int tq, int tk)
{
    pt_rng rng;
    pt__rng_seed(&rng, (uint64_t)(B * 1000 + T * 10 + nh + window + tq));
    size_t nq = (size_t)B * T * nh * hd, nk = (size_t)B * T * nkv * hd;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *d = malloc(nq * 4);
    int32_t *seg = malloc((size_t)B * T * 4);
    fill(q, nq, &rng), fill(k, nk, &rng), fill(v, nk, &rng), fill(d, nq, &rng);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            seg[b * T + t] = (t * 3) / T + b;
    pt_attn_shape s = { .batch = B, .seq = T, .nh = nh, .nkv = nkv, .hd = hd,
                        .scale = (float)(1.0 / sqrt(hd)), .seg = segs ? seg : NULL,
                        .window = window, .tile_q = tq, .tile_k = tk };
    attn_run f = attention(&s, q, k, v, d);
    ck_assert(pt__tile_force(mode));
    s.bf16 = true;
    attn_run h = attention(&s, q, k, v, d);
    pt_set_num_threads(1);
    attn_run h1 = attention(&s, q, k, v, d);
    pt_set_num_threads(2);
    ck_assert(pt__tile_force(-1));
    const float *fx[] = { f.out, f.dq, f.dk, f.dv }, *hx[] = { h.out, h.dq, h.dk, h.dv };
    const float *h1x[] = { h1.out, h1.dq, h1.dk, h1.dv };
    const size_t n[] = { nq, nq, nk, nk };
    for (int i = 0; i < 4; i++) {
        double e = rel_l2(hx[i], fx[i], n[i]);
        ck_assert_msg(e < 1e-2 && e > 1e-6, "mode %d T=%d output %d: relative L2 %g", (int)mode, T,
                      i, e);
        ck_assert(same(hx[i], h1x[i], n[i]));
    }
    ck_assert(rel_l2(h.lse, f.lse, (size_t)B * nh * T) < 1e-2);
    free_run(&f), free_run(&h), free_run(&h1);
    free(q), free(k), free(v), free(d), free(seg);
}

static void attention_cases(pt_tile_mode mode)
{
    attention_case(mode, 2, 64, 4, 2, 16, false, 0, 0, 0);
    attention_case(mode, 1, 37, 6, 2, 8, true, 0, 5, 7);   /* odd tiles, segments */
    attention_case(mode, 2, 40, 4, 2, 8, true, 6, 0, 0);   /* window inside segments */
    attention_case(mode, 1, 150, 2, 1, 16, false, 37, 0, 0); /* window across tiles */
}

START_TEST(test_attention_emulated)
{
    attention_cases(PT_TILE_EMULATED);
}
END_TEST

START_TEST(test_attention_amx)
{
    if (!have_amx())
        return;
    attention_cases(PT_TILE_AMX);
    attention_case(PT_TILE_AMX, 2, 256, 9, 3, 64, false, 0, 0, 0); /* SmolLM2's heads */
    ran_attn_amx = true;
}
END_TEST

/* The automatic mode: AMX only on the avx512bf16 path of an AMX CPU, and
 * not with PT_AMX=0; off on a lower forced path. */
START_TEST(test_mode_choice)
{
    ck_assert(pt__tile_force(-1));
    ck_assert_int_eq(pt__tile_mode(), pt__cpu_bf16_compute() && have_amx() ? PT_TILE_AMX : PT_TILE_OFF);
    if (pt__cpu_detected() >= PT_CPU_AVX512) {
        ck_assert_ok(pt_set_cpu_path("avx512"));
        ck_assert_int_eq(pt__tile_mode(), PT_TILE_OFF);
        ck_assert_ok(pt_set_cpu_path(NULL));
    }
    if (have_amx()) {
        setenv("PT_AMX", "0", 1);
        ck_assert_int_eq(pt__tile_mode(), PT_TILE_OFF);
        unsetenv("PT_AMX");
        ck_assert_int_eq(pt__tile_mode(), PT_TILE_AMX);
        ck_assert(strstr(pt_cpu_info(), "AMX") != NULL);
    } else {
        ck_assert(!pt__tile_force(PT_TILE_AMX));
    }
}
END_TEST

int main(void)
{
    if (pt_set_num_threads(2) != PT_OK)
        return EXIT_FAILURE;
    Suite *s = suite_create("tile_gemm");
    TCase *tc = tcase_create("tile_gemm");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_emulated_matches_naive);
    tcase_add_test(tc, test_amx_matches_naive);
    tcase_add_test(tc, test_amx_vs_emulated);
    tcase_add_test(tc, test_pack_definition_and_vector);
    tcase_add_test(tc, test_convert_n_exact);
    tcase_add_test(tc, test_attention_emulated);
    tcase_add_test(tc, test_attention_amx);
    tcase_add_test(tc, test_mode_choice);
    suite_add_tcase(s, tc);
    int rc = pt_test_run(s);
    printf("paths: emulated tiles %s; AVX-512 packing %s; AMX tiles %s, attention on AMX %s "
           "(%s)\n",
           ran_emulated ? "ran" : "did not run", ran_vec_pack ? "ran" : "skipped (no AVX512_BF16)",
           ran_amx ? "ran" : "skipped (no AMX)", ran_attn_amx ? "ran" : "skipped (no AMX)",
           pt_cpu_info());
    printf("AMX results differing from the emulation in their last bits: %ld (-1: not run)\n",
           amx_differing);
    return rc;
}
