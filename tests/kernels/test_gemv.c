/* pt__sgemv_rows and pt__bgemv_rows (the small-m decode products) on every
 * kernel path this CPU runs: against a double-precision loop over many
 * shapes, strides, alpha and beta; row i's result independent of the other
 * rows and of the thread count (bit for bit); the BF16 kernel equal to the
 * FP32 kernel on the widened weights (bit for bit); avx512bf16 equal to
 * avx512.  Paths above this CPU are reported as skipped. */
#include "testutil.h"

#include "core/core.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

#include <math.h>
#include <stdio.h>

/* ---- operands ---- */

typedef struct gemv_case {
    size_t m, n, k, ldx, ldw, ldy;
    float *x, *wf, *y;  /* x [m x ldx], W widened to FP32 [n x ldw], y [m x ldy] */
    pt_bf16 *wh;        /* W as BF16 [n x ldw] */
} gemv_case;

/* Random x, W (BF16-representable, so both kernels see the same weights)
 * and y; strides pad each row by the given amounts. */
static void case_make(gemv_case *c, size_t m, size_t n, size_t k, size_t px, size_t pw,
                      size_t py, pt_rng *r)
{
    c->m = m, c->n = n, c->k = k;
    c->ldx = k + px, c->ldw = k + pw, c->ldy = n + py;
    c->x = malloc(m * c->ldx * sizeof(float) + 4);
    c->wf = malloc(n * c->ldw * sizeof(float) + 4);
    c->wh = malloc(n * c->ldw * sizeof(pt_bf16) + 4);
    c->y = malloc(m * c->ldy * sizeof(float) + 4);
    ck_assert(c->x && c->wf && c->wh && c->y);
    for (size_t i = 0; i < m * c->ldx; i++)
        c->x[i] = (float)pt__rng_normal(r);
    for (size_t i = 0; i < n * c->ldw; i++) {
        c->wh[i] = pt__f32_to_bf16((float)pt__rng_normal(r) * 0.25f);
        c->wf[i] = pt__bf16_to_f32(c->wh[i]);
    }
    for (size_t i = 0; i < m * c->ldy; i++)
        c->y[i] = (float)pt__rng_normal(r);
}

static void case_free(gemv_case *c)
{
    free(c->x); free(c->wf); free(c->wh); free(c->y);
}

/* out = alpha W x_i + beta y_i with the kernel (bf16 or not) on a copy of y. */
static void run(const gemv_case *c, bool bf16, float alpha, float beta, float *out)
{
    memcpy(out, c->y, c->m * c->ldy * sizeof(float));
    if (beta == 0.0f) /* beta 0 must not read y, not even a NaN */
        for (size_t i = 0; i < c->m; i++)
            for (size_t j = 0; j < c->n; j++)
                out[i * c->ldy + j] = NAN;
    if (bf16)
        pt__bgemv_rows(c->m, c->n, c->k, alpha, c->x, c->ldx, c->wh, c->ldw, beta, out, c->ldy);
    else
        pt__sgemv_rows(c->m, c->n, c->k, alpha, c->x, c->ldx, c->wf, c->ldw, beta, out, c->ldy);
}

/* out against the double-precision product, with a bound from k: (k + 8)
 * roundings of the largest partial sum. */
static void check_reference(const gemv_case *c, float alpha, float beta, const float *out,
                            const char *what)
{
    const double u = 1.0 / 16777216.0;
    for (size_t i = 0; i < c->m; i++) {
        for (size_t j = 0; j < c->n; j++) {
            double s = 0, mag = 0;
            for (size_t p = 0; p < c->k; p++) {
                double t = (double)c->wf[j * c->ldw + p] * c->x[i * c->ldx + p];
                s += t;
                mag += fabs(t);
            }
            double yo = beta == 0.0f ? 0.0 : (double)c->y[i * c->ldy + j];
            double want = alpha * s + beta * yo;
            double tol = (double)(c->k + 8) * u * (fabs(alpha) * mag + fabs(beta * yo)) + 1e-30;
            double got = out[i * c->ldy + j];
            ck_assert_msg(fabs(got - want) <= tol,
                          "%s on %s: m=%zu n=%zu k=%zu alpha=%g beta=%g (%zu,%zu): %.9g vs %.9g",
                          what, pt_cpu_path(), c->m, c->n, c->k, (double)alpha, (double)beta, i,
                          j, got, want);
        }
        /* padding columns untouched */
        for (size_t j = c->n; j < c->ldy; j++)
            ck_assert(memcmp(&out[i * c->ldy + j], &c->y[i * c->ldy + j], sizeof(float)) == 0);
    }
}

/* ---- paths ---- */

/* Switch to path l when this CPU runs it (false otherwise). */
static bool use_path(int l)
{
    if (l > (int)pt__cpu_detected())
        return false;
    ck_assert_ok(pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)l)));
    return true;
}

/* ---- tests ---- */

START_TEST(test_gemv_matches_reference)
{
    static const size_t ks[] = { 1, 5, 8, 16, 17, 31, 576 };
    static const size_t ms[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17 };
    static const size_t ns[] = { 1, 2, 3, 5, 33, 100 };
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        pt_rng r;
        pt__rng_seed(&r, 11);
        for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
            for (size_t b = 0; b < sizeof ms / sizeof ms[0]; b++)
                for (size_t d = 0; d < sizeof ns / sizeof ns[0]; d++) {
                    gemv_case c;
                    size_t pad = (a + b + d) % 3; /* strides k, k + 1 (odd k: odd), k + 2 */
                    case_make(&c, ms[b], ns[d], ks[a], pad, (pad + 1) % 3, pad + 1, &r);
                    float *out = malloc(c.m * c.ldy * sizeof(float));
                    for (int bf = 0; bf < 2; bf++)
                        for (int ab = 0; ab < 3; ab++) {
                            float alpha = ab == 2 ? -0.5f : 1.0f, beta = ab == 1 ? 1.0f : 0.0f;
                            run(&c, bf, alpha, beta, out);
                            check_reference(&c, alpha, beta, out, bf ? "bgemv" : "sgemv");
                        }
                    free(out);
                    case_free(&c);
                }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

START_TEST(test_gemv_large_shapes)
{
    /* The model's shapes: k = 576 and 1536, n = 1536, and m up to 17. */
    static const size_t shapes[][3] = { { 1, 1536, 576 }, { 16, 1536, 576 }, { 17, 576, 1536 },
                                        { 4, 1536, 1536 }, { 1, 100, 1536 } };
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        pt_rng r;
        pt__rng_seed(&r, 12);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            gemv_case c;
            case_make(&c, shapes[s][0], shapes[s][1], shapes[s][2], 3, 1, 2, &r);
            float *out = malloc(c.m * c.ldy * sizeof(float));
            for (int bf = 0; bf < 2; bf++) {
                run(&c, bf, 1.0f, 1.0f, out);
                check_reference(&c, 1.0f, 1.0f, out, bf ? "bgemv" : "sgemv");
                run(&c, bf, 0.5f, 0.0f, out);
                check_reference(&c, 0.5f, 0.0f, out, bf ? "bgemv" : "sgemv");
            }
            free(out);
            case_free(&c);
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

/* Row i of a 16-row product equals row i computed alone (m = 1) and among
 * the rows i..i+2 (m = 3), and 1 and 2 threads agree, bit for bit. */
static void check_rows_independent(const gemv_case *c, bool bf16)
{
    size_t m = c->m, ldy = c->ldy;
    float *all = malloc(m * ldy * sizeof(float)), *one = malloc(m * ldy * sizeof(float));
    float *t1 = malloc(m * ldy * sizeof(float));
    for (int beta = 0; beta < 2; beta++) {
        ck_assert_ok(pt_set_num_threads(2));
        run(c, bf16, 0.75f, (float)beta, all);
        ck_assert_ok(pt_set_num_threads(1));
        run(c, bf16, 0.75f, (float)beta, t1);
        ck_assert_ok(pt_set_num_threads(2));
        ck_assert_msg(memcmp(all, t1, m * ldy * sizeof(float)) == 0,
                      "%s on %s: 1 and 2 threads differ (m=%zu n=%zu k=%zu)",
                      bf16 ? "bgemv" : "sgemv", pt_cpu_path(), m, c->n, c->k);
        for (size_t g = 1; g <= 3; g += 2)
            for (size_t i = 0; i + g <= m; i++) {
                gemv_case sub = *c;
                sub.m = g;
                sub.x = c->x + i * c->ldx;
                sub.y = c->y + i * ldy;
                run(&sub, bf16, 0.75f, (float)beta, one);
                ck_assert_msg(memcmp(one, all + i * ldy, g * ldy * sizeof(float)) == 0,
                              "%s on %s: rows %zu..%zu alone differ from among %zu rows (n=%zu k=%zu)",
                              bf16 ? "bgemv" : "sgemv", pt_cpu_path(), i, i + g - 1, m, c->n, c->k);
            }
    }
    free(all); free(one); free(t1);
}

START_TEST(test_gemv_rows_independent)
{
    static const size_t shapes[][3] = { { 16, 1536, 576 }, { 16, 577, 1536 }, { 16, 37, 17 },
                                        { 17, 100, 1 } };
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        pt_rng r;
        pt__rng_seed(&r, 13);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            gemv_case c;
            case_make(&c, shapes[s][0], shapes[s][1], shapes[s][2], 1, 0, 1, &r);
            if (s == 0) /* the product is large enough for 2 threads */
                ck_assert_int_eq(pt__gemm_threads(c.m, c.n, c.k), 2);
            check_rows_independent(&c, false);
            check_rows_independent(&c, true);
            case_free(&c);
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

START_TEST(test_gemv_bf16_equals_widened)
{
    /* Same path: pt__bgemv_rows on BF16 W is pt__sgemv_rows on W widened. */
    static const size_t shapes[][3] = { { 1, 1536, 576 }, { 16, 960, 576 }, { 5, 77, 1536 },
                                        { 3, 9, 17 }, { 2, 3, 1 }, { 7, 40, 33 } };
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (!use_path(l))
            continue;
        pt_rng r;
        pt__rng_seed(&r, 14);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            gemv_case c;
            case_make(&c, shapes[s][0], shapes[s][1], shapes[s][2], 2, 1, 0, &r);
            size_t sz = c.m * c.ldy * sizeof(float);
            float *a = malloc(sz), *b = malloc(sz);
            for (int beta = 0; beta < 2; beta++) {
                run(&c, false, 1.0f, (float)beta, a);
                run(&c, true, 1.0f, (float)beta, b);
                ck_assert_msg(memcmp(a, b, sz) == 0, "bgemv != sgemv on widened W on %s (shape %zu)",
                              pt_cpu_path(), s);
            }
            free(a); free(b);
            case_free(&c);
        }
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
}
END_TEST

START_TEST(test_gemv_avx512bf16_equals_avx512)
{
    /* The avx512bf16 path runs the AVX-512 kernels (FP32 arithmetic). */
    if (pt__cpu_detected() < PT_CPU_AVX512BF16) {
        printf("test_gemv: skipped: avx512bf16 = avx512 comparison (this CPU runs up to %s)\n",
               pt__cpu_level_str(pt__cpu_detected()));
        return;
    }
    pt_rng r;
    pt__rng_seed(&r, 15);
    gemv_case c;
    case_make(&c, 9, 300, 577, 1, 1, 1, &r);
    size_t sz = c.m * c.ldy * sizeof(float);
    float *a = malloc(sz), *b = malloc(sz);
    for (int bf = 0; bf < 2; bf++) {
        ck_assert_ok(pt_set_cpu_path("avx512"));
        run(&c, bf, 1.0f, 1.0f, a);
        ck_assert_ok(pt_set_cpu_path("avx512bf16"));
        run(&c, bf, 1.0f, 1.0f, b);
        ck_assert(memcmp(a, b, sz) == 0);
    }
    ck_assert_ok(pt_set_cpu_path(NULL));
    free(a); free(b);
    case_free(&c);
}
END_TEST

START_TEST(test_gemv_empty)
{
    /* m = 0 or n = 0: nothing written; k = 0: y = beta y. */
    float y[4] = { 1, 2, 3, 4 }, x[1] = { 5 }, w[1] = { 6 };
    pt_bf16 wh[1] = { 0 };
    pt__sgemv_rows(0, 2, 1, 1.0f, x, 1, w, 1, 0.0f, y, 2);
    pt__bgemv_rows(2, 0, 1, 1.0f, x, 1, wh, 1, 0.0f, y, 2);
    ck_assert_float_eq(y[0], 1.0f);
    pt__sgemv_rows(2, 2, 0, 1.0f, x, 1, w, 1, 1.0f, y, 2);
    ck_assert_float_eq(y[3], 4.0f);
    pt__bgemv_rows(2, 2, 0, 1.0f, x, 1, wh, 1, 0.0f, y, 2);
    ck_assert_float_eq(y[3], 0.0f);
}
END_TEST

int main(void)
{
    /* Which paths the tests above run on this machine. */
    pt_cpu_level det = pt__cpu_detected();
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        if (l <= (int)det)
            printf("test_gemv: path %s: run\n", pt__cpu_level_str((pt_cpu_level)l));
        else
            printf("test_gemv: skipped: %s (this CPU runs up to %s)\n",
                   pt__cpu_level_str((pt_cpu_level)l), pt__cpu_level_str(det));
    }
    printf("test_gemv: %s\n", pt_cpu_info());
    fflush(stdout);
    Suite *s = suite_create("gemv");
    TCase *tc = tcase_create("gemv");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gemv_matches_reference);
    tcase_add_test(tc, test_gemv_large_shapes);
    tcase_add_test(tc, test_gemv_rows_independent);
    tcase_add_test(tc, test_gemv_bf16_equals_widened);
    tcase_add_test(tc, test_gemv_avx512bf16_equals_avx512);
    tcase_add_test(tc, test_gemv_empty);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
