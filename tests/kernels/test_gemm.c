/* pt__sgemm against a plain triple loop in double precision, all transposes,
 * strided operands, beta accumulation, and thread-count determinism. */
#include "testutil.h"

#include "core/core.h"
#include "kernels/gemm.h"

#include <math.h>

static void naive(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a,
                  size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (size_t p = 0; p < k; p++) {
                double x = ta ? a[p * lda + i] : a[i * lda + p];
                double y = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += x * y;
            }
            c[i * ldc + j] = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j]));
        }
}

static void fill(float *x, size_t n, pt_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)pt__rng_normal(r);
}

START_TEST(test_gemm_matches_naive)
{
    static const size_t shapes[][3] = { { 1, 1, 1 }, { 3, 5, 7 }, { 17, 33, 65 }, { 64, 48, 300 }, { 130, 70, 9 } };
    pt_rng r;
    pt__rng_seed(&r, 99);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            size_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
            size_t arows = ta ? k : m, brows = tb ? n : k;
            float *a = malloc(arows * lda * sizeof *a), *b = malloc(brows * ldb * sizeof *b);
            float *c = malloc(m * ldc * sizeof *c), *c2 = malloc(m * ldc * sizeof *c2);
            fill(a, arows * lda, &r);
            fill(b, brows * ldb, &r);
            fill(c, m * ldc, &r);
            memcpy(c2, c, m * ldc * sizeof *c);
            pt__sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 2.0f, c, ldc);
            naive(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 2.0f, c2, ldc);
            for (size_t i = 0; i < m; i++)
                for (size_t j = 0; j < n; j++)
                    ck_assert_msg(fabsf(c[i * ldc + j] - c2[i * ldc + j]) <= 1e-4f * (1.0f + sqrtf((float)k)),
                                  "shape %zu ta=%d tb=%d (%zu,%zu): %g vs %g", s, ta, tb, i, j,
                                  (double)c[i * ldc + j], (double)c2[i * ldc + j]);
            /* beta = 0 ignores whatever C held, even NaN. */
            for (size_t i = 0; i < m * ldc; i++)
                c[i] = NAN;
            pt__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
            naive(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c2, ldc);
            for (size_t i = 0; i < m; i++)
                for (size_t j = 0; j < n; j++)
                    ck_assert(fabsf(c[i * ldc + j] - c2[i * ldc + j]) <= 1e-4f * (1.0f + sqrtf((float)k)));
            free(a); free(b); free(c); free(c2);
        }
}
END_TEST

START_TEST(test_gemm_k_zero)
{
    float c[4] = { 1, 2, 3, 4 }, a[1] = { 0 }, b[1] = { 0 };
    pt__sgemm(false, false, 2, 2, 0, 1.0f, a, 1, b, 2, 3.0f, c, 2);
    ck_assert_float_eq(c[0], 3.0f);
    ck_assert_float_eq(c[3], 12.0f);
    pt__sgemm(false, false, 2, 2, 0, 1.0f, a, 1, b, 2, 0.0f, c, 2);
    ck_assert_float_eq(c[2], 0.0f);
}
END_TEST

START_TEST(test_gemm_thread_policy)
{
    ck_assert_ok(pt_set_num_threads(2));
    ck_assert_int_eq(pt__gemm_threads(4, 4, 4), 1);       /* too small to split */
    ck_assert_int_eq(pt__gemm_threads(1, 64, 64), 1);
    ck_assert_int_eq(pt__gemm_threads(8, 576, 1536), 2);  /* decode shapes still gain */
    ck_assert_int_eq(pt__gemm_threads(1024, 576, 1536), 2);
    ck_assert_ok(pt_set_num_threads(1));
    ck_assert_int_eq(pt__gemm_threads(1024, 576, 1536), 1);
    ck_assert_ok(pt_set_num_threads(2));
}
END_TEST

START_TEST(test_gemm_deterministic)
{
    /* The same thread count gives bit-identical results run after run. */
    size_t m = 200, n = 300, k = 400;
    pt_rng r;
    pt__rng_seed(&r, 5);
    float *a = malloc(m * k * 4), *b = malloc(k * n * 4), *c1 = malloc(m * n * 4), *c2 = malloc(m * n * 4);
    fill(a, m * k, &r);
    fill(b, k * n, &r);
    pt__sgemm_nt(2, false, true, m, n / 2, k, 1.0f, a, k, b, k, 0.0f, c1, n);
    pt__sgemm_nt(2, false, true, m, n / 2, k, 1.0f, a, k, b, k, 0.0f, c2, n);
    for (size_t i = 0; i < m; i++)
        ck_assert_int_eq(memcmp(c1 + i * n, c2 + i * n, n / 2 * 4), 0);
    free(a); free(b); free(c1); free(c2);
}
END_TEST

START_TEST(test_gemm_split_blocks)
{
    /* Products large enough to be cut into blocks of rows (m >= n) or of
     * columns (n > m), every transpose, strided operands and beta: equal to
     * the double-precision loop, and bit-identical for 1 and 2 threads (the
     * cut depends on the shape only). */
    static const size_t shapes[][3] = { { 700, 40, 30 }, { 30, 650, 20 }, { 1100, 300, 17 },
                                        { 300, 20, 400 } };
    pt_rng r;
    pt__rng_seed(&r, 17);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            size_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3, ldc = n + 2;
            size_t arows = ta ? k : m, brows = tb ? n : k;
            float *a = malloc(arows * lda * 4), *b = malloc(brows * ldb * 4);
            float *c = malloc(m * ldc * 4), *c1 = malloc(m * ldc * 4), *c2 = malloc(m * ldc * 4);
            fill(a, arows * lda, &r);
            fill(b, brows * ldb, &r);
            fill(c, m * ldc, &r);
            memcpy(c1, c, m * ldc * 4);
            memcpy(c2, c, m * ldc * 4);
            pt__sgemm_nt(2, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 1.5f, c1, ldc);
            pt__sgemm_nt(1, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 1.5f, c2, ldc);
            naive(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 1.5f, c, ldc);
            for (size_t i = 0; i < m; i++) {
                ck_assert_int_eq(memcmp(c1 + i * ldc, c2 + i * ldc, n * 4), 0);
                /* padding columns untouched */
                ck_assert_int_eq(memcmp(c1 + i * ldc + n, c + i * ldc + n, 2 * 4), 0);
                for (size_t j = 0; j < n; j++)
                    ck_assert_msg(fabsf(c1[i * ldc + j] - c[i * ldc + j]) <= 1e-4f * (1.0f + sqrtf((float)k)),
                                  "shape %zu ta=%d tb=%d (%zu,%zu): %g vs %g", s, ta, tb, i, j,
                                  (double)c1[i * ldc + j], (double)c[i * ldc + j]);
            }
            free(a); free(b); free(c); free(c1); free(c2);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gemm_matches_naive);
    tcase_add_test(tc, test_gemm_k_zero);
    tcase_add_test(tc, test_gemm_thread_policy);
    tcase_add_test(tc, test_gemm_deterministic);
    tcase_add_test(tc, test_gemm_split_blocks);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
