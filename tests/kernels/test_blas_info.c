/* Which BLIS kernels do our products: run as the first BLIS user of a fresh
 * process, once with BLIS_ARCH_TYPE unset and once with the user's choice.
 *
 * Without BLIS_ARCH_TYPE, on an AMD CPU with AVX-512 F/DQ/CD/BW/VL and a
 * BLIS before 1.0 (which knows no Zen 4 and falls back to its slow generic
 * kernels), the library must select 'skx' and leave the environment as it
 * found it.  Elsewhere it must leave BLIS's own choice alone.  With
 * BLIS_ARCH_TYPE set, the user's choice wins and the variable stays.  The
 * CPU is read independently here, from /proc/cpuinfo. */
#include "testutil.h"

#include "kernels/gemm.h"

#include <blis.h>
#include <stdlib.h>
#include <string.h>

static char env_at_start[32];
static int env_was_set;

/* 1 if /proc/cpuinfo names an AMD CPU with every AVX-512 subset skx needs,
 * 0 if not, -1 if it cannot be read. */
static int cpu_amd_avx512(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return -1;
    char line[8192];
    int amd = 0, flags_ok = 0, seen_flags = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "vendor_id", 9) && strstr(line, "AuthenticAMD"))
            amd = 1;
        if (!seen_flags && !strncmp(line, "flags", 5)) {
            seen_flags = 1;
            static const char *need[] = { " avx512f ", " avx512dq ", " avx512cd ", " avx512bw ",
                                          " avx512vl " };
            char padded[8200];
            snprintf(padded, sizeof padded, " %s", strchr(line, ':') ? strchr(line, ':') + 1 : line);
            padded[strcspn(padded, "\n")] = ' ';
            flags_ok = 1;
            for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
                if (!strstr(padded, need[i]))
                    flags_ok = 0;
        }
    }
    fclose(f);
    return seen_flags ? (amd && flags_ok) : -1;
}

START_TEST(test_blas_info_choice)
{
    const char *info = pt_blas_info();
    ck_assert_ptr_nonnull(info);
    printf("matrix products: %s\n", info);
    ck_assert_msg(!strncmp(info, "BLIS ", 5), "info: %s", info);
    ck_assert_ptr_eq(info, pt_blas_info()); /* static, computed once */

    char expect[64];
    arch_t arch = bli_arch_query_id();
    snprintf(expect, sizeof expect, "%s kernels", bli_arch_string(arch));
    ck_assert_msg(strstr(info, expect) != NULL, "'%s' does not name '%s'", info, expect);

    const char *ver = bli_info_get_version_str();
    int cpu = cpu_amd_avx512();
    if (env_was_set) {
        /* The user's choice, untouched. */
        ck_assert_int_eq((int)arch, atoi(env_at_start));
        ck_assert_ptr_nonnull(strstr(info, "from BLIS_ARCH_TYPE"));
        ck_assert_ptr_nonnull(getenv("BLIS_ARCH_TYPE"));
        ck_assert_str_eq(getenv("BLIS_ARCH_TYPE"), env_at_start);
    } else {
        ck_assert_ptr_null(getenv("BLIS_ARCH_TYPE")); /* environment as found */
        if (cpu == 1 && ver[0] == '0' && ver[1] == '.') {
            ck_assert_int_eq((int)arch, (int)BLIS_ARCH_SKX);
            ck_assert_ptr_nonnull(strstr(info, "chosen by libposttrain"));
        } else {
            printf("SKIP part: not an AMD AVX-512 CPU with BLIS 0.x (cpu=%d, BLIS %s); "
                   "BLIS's own choice is kept\n", cpu, ver);
            ck_assert_ptr_null(strstr(info, "chosen by libposttrain"));
        }
    }
}
END_TEST

/* The chosen kernels compute correctly: one product against a double loop. */
START_TEST(test_blas_info_product)
{
    enum { M = 67, N = 45, K = 131 };
    static float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((i * 37 % 101) - 50) / 25.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((i * 53 % 89) - 44) / 22.0f;
    pt__sgemm(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int p = 0; p < K; p++)
                s += (double)a[i * K + p] * b[p * N + j];
            ck_assert_double_le(fabs(s - c[i * N + j]), 1e-4 * (1 + fabs(s)));
        }
}
END_TEST

int main(void)
{
    const char *e = getenv("BLIS_ARCH_TYPE");
    env_was_set = e != NULL;
    if (e)
        snprintf(env_at_start, sizeof env_at_start, "%s", e);
    Suite *s = suite_create("blas_info");
    TCase *tc = tcase_create("blas_info");
    tcase_add_test(tc, test_blas_info_choice);
    tcase_add_test(tc, test_blas_info_product);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
