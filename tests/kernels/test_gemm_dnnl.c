/* pt__gemm_mixed through oneDNN's matmul (kernels/gemm_dnnl.c), where the
 * build has oneDNN and its matmul is not a reference implementation here:
 * against a double-precision product of the BF16-rounded operands (all four
 * transposes, padded leading dimensions, FP32/BF16 operand mixes, alpha and
 * beta, m = 1 .. 300 with odd sizes), two runs bit-identical, and with
 * PT_BF16_GEMM=own (a run of its own) pt__gemm_mixed is our kernel, bit for
 * bit the emulated one.  Otherwise the test says what it skipped. */
#include "testutil.h"

#include "core/core.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

#include <math.h>
#include <stdlib.h>

static bool ran_dnnl, ran_own;

static bool forced_own(void)
{
    const char *e = getenv("PT_BF16_GEMM");
    return e && strcmp(e, "own") == 0;
}

static bool dnnl_here(void)
{
    return pt__cpu_bf16_compute() && pt__gemm_dnnl_usable();
}

/* rows x ld normals, FP32 or BF16 */
static void *operand(size_t rows, size_t ld, bool bf16, pt_rng *r)
{
    size_t n = rows * ld;
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)pt__rng_normal(r);
    if (!bf16)
        return f;
    pt_bf16 *h = malloc(n * sizeof *h);
    pt__f32_to_bf16_n(h, f, n);
    free(f);
    return h;
}

static double at(const void *p, bool bf16, size_t i)
{
    float f = bf16 ? pt__bf16_to_f32(((const pt_bf16 *)p)[i]) : ((const float *)p)[i];
    return pt__bf16_to_f32(pt__f32_to_bf16(f));
}

typedef struct prod {
    bool ta, tb, abf, bbf;
    size_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    void *a, *b;
} prod;

static void make(prod *p, size_t m, size_t n, size_t k, int t, int mix, pt_rng *r)
{
    p->ta = t & 1, p->tb = t & 2, p->abf = mix & 1, p->bbf = mix & 2;
    p->m = m, p->n = n, p->k = k;
    p->lda = (p->ta ? m : k) + 3, p->ldb = (p->tb ? k : n) + 1, p->ldc = n + 2;
    p->a = operand(p->ta ? k : m, p->lda, p->abf, r);
    p->b = operand(p->tb ? n : k, p->ldb, p->bbf, r);
}

static void run(const prod *p, float *c)
{
    pt__gemm_mixed(p->ta, p->tb, p->m, p->n, p->k, p->alpha, p->a, p->abf, p->lda, p->b, p->bbf,
                  p->ldb, p->beta, c, p->ldc);
}

/* c (from c0) against the double product; padding columns untouched */
static void check(const prod *p, const float *c0, const float *c)
{
    const double u = ldexp(1.0, -24);
    for (size_t i = 0; i < p->m; i++) {
        ck_assert_int_eq(memcmp(c + i * p->ldc + p->n, c0 + i * p->ldc + p->n, 2 * sizeof *c), 0);
        for (size_t j = 0; j < p->n; j++) {
            double s = 0, sa = 0;
            for (size_t q = 0; q < p->k; q++) {
                double x = at(p->a, p->abf, p->ta ? q * p->lda + i : i * p->lda + q);
                double y = at(p->b, p->bbf, p->tb ? j * p->ldb + q : q * p->ldb + j);
                s += x * y;
                sa += fabs(x * y);
            }
            double cb = p->beta == 0.0f ? 0.0 : (double)p->beta * c0[i * p->ldc + j];
            double want = p->alpha * s + cb, got = c[i * p->ldc + j];
            double tol = 2.0 * u * ((double)(p->k + 8) * fabs(p->alpha) * sa + 4.0 * fabs(cb)) + 1e-30;
            ck_assert_msg(fabs(got - want) <= tol,
                          "%zux%zux%zu ta=%d tb=%d abf=%d bbf=%d alpha=%g beta=%g [%zu,%zu]: %.9g, "
                          "want %.9g (tol %.3g)", p->m, p->n, p->k, p->ta, p->tb, p->abf, p->bbf,
                          (double)p->alpha, (double)p->beta, i, j, got, want, tol);
        }
    }
}

START_TEST(test_dnnl_matches_reference)
{
    if (forced_own() || !dnnl_here())
        return;
    static const size_t shapes[][3] = { { 1, 1, 1 },    { 1, 37, 64 },   { 2, 5, 3 },
                                        { 3, 64, 65 },  { 17, 33, 129 }, { 64, 64, 64 },
                                        { 127, 96, 200 }, { 300, 70, 77 } };
    static const float ab[][2] = { { 1.0f, 0.0f }, { 0.5f, 1.0f }, { -1.25f, 0.75f } };
    pt_rng r;
    pt__rng_seed(&r, 11);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int mix = 0; mix < 4; mix++) {
                prod p;
                make(&p, shapes[s][0], shapes[s][1], shapes[s][2], t, mix, &r);
                size_t nc = p.m * p.ldc;
                float *c0 = malloc(nc * sizeof *c0), *c = malloc(nc * sizeof *c);
                for (size_t v = 0; v < sizeof ab / sizeof ab[0]; v++) {
                    p.alpha = ab[v][0], p.beta = ab[v][1];
                    for (size_t i = 0; i < nc; i++)
                        c0[i] = p.beta == 0.0f ? NAN : (float)pt__rng_normal(&r);
                    memcpy(c, c0, nc * sizeof *c);
                    /* through oneDNN itself: it must take the product */
                    ck_assert(pt__gemm_dnnl(pt__gemm_threads(p.m, p.n, p.k), p.ta, p.tb, p.m, p.n,
                                           p.k, p.alpha, p.a, p.abf, p.lda, p.b, p.bbf, p.ldb,
                                           p.beta, c, p.ldc));
                    check(&p, c0, c);
                    memcpy(c, c0, nc * sizeof *c);
                    run(&p, c);
                    check(&p, c0, c);
                }
                free(p.a); free(p.b); free(c0); free(c);
            }
    ran_dnnl = true;
}
END_TEST

START_TEST(test_dnnl_runs_bit_identical)
{
    if (forced_own() || !dnnl_here())
        return;
    pt_rng r;
    pt__rng_seed(&r, 12);
    for (int t = 0; t < 4; t++) {
        prod p;
        make(&p, 257, 190, 333, t, 2, &r);
        p.alpha = 0.75f, p.beta = 1.0f;
        size_t nc = p.m * p.ldc;
        float *c1 = malloc(nc * sizeof *c1), *c2 = malloc(nc * sizeof *c2);
        for (size_t i = 0; i < nc; i++)
            c1[i] = (float)pt__rng_normal(&r);
        memcpy(c2, c1, nc * sizeof *c1);
        run(&p, c1);
        run(&p, c2);
        ck_assert_msg(memcmp(c1, c2, nc * sizeof *c1) == 0, "t=%d: two runs differ", t);
        free(p.a); free(p.b); free(c1); free(c2);
    }
}
END_TEST

START_TEST(test_own_when_forced)
{
    if (!forced_own() || !pt__cpu_bf16_compute())
        return;
    ck_assert(!pt__gemm_dnnl_usable());
    ck_assert_msg(strncmp(pt__bf16_gemm_backend(), "own ", 4) == 0, "%s", pt__bf16_gemm_backend());
    pt_rng r;
    pt__rng_seed(&r, 13);
    for (int t = 0; t < 4; t++) {
        prod p;
        make(&p, 65, 47, 99, t, 2, &r);
        p.alpha = 0.5f, p.beta = 1.5f;
        size_t nc = p.m * p.ldc;
        float *c1 = malloc(nc * sizeof *c1), *c2 = malloc(nc * sizeof *c2);
        for (size_t i = 0; i < nc; i++)
            c1[i] = (float)pt__rng_normal(&r);
        memcpy(c2, c1, nc * sizeof *c1);
        run(&p, c1);
        pt__gemm_bf16_emulated(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a, p.abf, p.lda, p.b, p.bbf,
                              p.ldb, p.beta, c2, p.ldc);
        ck_assert_msg(memcmp(c1, c2, nc * sizeof *c1) == 0, "t=%d: not the emulated kernel", t);
        free(p.a); free(p.b); free(c1); free(c2);
    }
    ran_own = true;
}
END_TEST

START_TEST(test_operand_rounded_once)
{
    /* An FP32 operand rounded once by pt__bf16_operand (the backward's dy,
     * read by two products) gives the product of the FP32 operand bit for
     * bit, on whichever backend runs (oneDNN, or ours with
     * PT_BF16_GEMM=own); NULL where the path has no BF16 arithmetic. */
    pt_rng r;
    pt__rng_seed(&r, 14);
    float *x = operand(70, 131, false, &r);
    pt_bf16 *x16 = pt__bf16_operand(x, 70, 129, 131);
    if (!pt__cpu_bf16_compute()) {
        ck_assert_ptr_null(x16);
        free(x);
        return;
    }
    ck_assert_ptr_nonnull(x16);
    for (size_t i = 0; i < 70; i++)
        for (size_t j = 0; j < 129; j++)
            ck_assert_uint_eq(x16[i * 129 + j], pt__f32_to_bf16(x[i * 131 + j]));
    for (int t = 0; t < 2; t++) { /* x as A (70 x 129), or as A^T */
        bool ta = t == 1;
        size_t m = ta ? 129 : 70, k = ta ? 70 : 129, n = 33;
        float *b = operand(n, k, false, &r);
        float *c1 = calloc(m * n, sizeof *c1), *c2 = calloc(m * n, sizeof *c2);
        pt__gemm_mixed(ta, true, m, n, k, 1.0f, x, false, 131, b, false, k, 0.0f, c1, n);
        pt__gemm_mixed(ta, true, m, n, k, 1.0f, x16, true, 129, b, false, k, 0.0f, c2, n);
        ck_assert_msg(memcmp(c1, c2, m * n * sizeof *c1) == 0, "ta=%d: %s differs", t,
                      pt__bf16_gemm_backend());
        free(b); free(c1); free(c2);
    }
    free(x);
    free(x16);
}
END_TEST

int main(void)
{
    if (pt_set_num_threads(2) != PT_OK)
        return EXIT_FAILURE;
    Suite *s = suite_create("gemm_dnnl");
    TCase *tc = tcase_create("gemm_dnnl");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_dnnl_matches_reference);
    tcase_add_test(tc, test_dnnl_runs_bit_identical);
    tcase_add_test(tc, test_own_when_forced);
    tcase_add_test(tc, test_operand_rounded_once);
    suite_add_tcase(s, tc);
    int rc = pt_test_run(s);
    printf("bf16 products: %s\n", pt__bf16_gemm_backend());
    if (forced_own())
        printf("PT_BF16_GEMM=own: %s\n", ran_own ? "our kernel, bit-equal to the emulated one"
                                                 : "skipped (no BF16 arithmetic on this path)");
    else if (ran_dnnl)
        printf("oneDNN backend: ran (reference within tolerance, runs bit-identical)\n");
    else
        printf("skipped: oneDNN backend (not built / reference impl only)\n");
    return rc;
}
