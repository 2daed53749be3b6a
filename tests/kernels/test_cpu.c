/* Run-time kernel dispatch: detection against /proc/cpuinfo, forcing lower
 * paths, refusing higher ones and unknown names, and what pt_features and
 * pt_cpu_info report. */
#include "testutil.h"

#include "kernels/cpu.h"

#include <stdio.h>
#include <string.h>

/* The flags line of /proc/cpuinfo, or "" when there is none. */
static void cpu_flags(char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[8192];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            snprintf(buf, cap, "%s ", strchr(line, ':') ? strchr(line, ':') + 1 : line);
            break;
        }
    fclose(f);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
}

static bool has_flag(const char *flags, const char *name)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", name);
    return strstr(flags, pat) != NULL;
}

START_TEST(test_detect_matches_cpuinfo)
{
    static char flags[16384];
    cpu_flags(flags, sizeof flags);
    if (!flags[0]) {
        printf("test_cpu: no flags line in /proc/cpuinfo; detection not cross-checked\n");
        return;
    }
    bool avx512 = has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") &&
                  has_flag(flags, "avx512dq") && has_flag(flags, "avx512vl");
    bool bf16 = avx512 && has_flag(flags, "avx512_bf16");
    pt_cpu_level want = bf16 ? PT_CPU_AVX512BF16 : avx512 ? PT_CPU_AVX512 : PT_CPU_AVX2;
    printf("test_cpu: %s: detected %s (cpuinfo says %s)\n", pt__cpu_model(),
           pt__cpu_level_str(pt__cpu_detected()), pt__cpu_level_str(want));
    ck_assert_int_eq(pt__cpu_detected(), want);
    ck_assert(strlen(pt__cpu_model()) > 0);
}
END_TEST

START_TEST(test_force_levels)
{
    pt_cpu_level det = pt__cpu_detected();
    for (int l = 0; l < PT_CPU_LEVELS; l++) {
        int st = pt_set_cpu_path(pt__cpu_level_str((pt_cpu_level)l));
        if (l <= (int)det) {
            ck_assert_int_eq(st, PT_OK);
            ck_assert_str_eq(pt_cpu_path(), pt__cpu_level_str((pt_cpu_level)l));
            ck_assert_int_eq(pt__cpu_active(), l);
            char want[64];
            snprintf(want, sizeof want, "cpu-path=%s", pt__cpu_level_str((pt_cpu_level)l));
            ck_assert_int_eq(pt_has_feature(want), 1);
            ck_assert(strstr(pt_cpu_info(), pt__cpu_level_str((pt_cpu_level)l)) != NULL);
        } else {
            ck_assert_int_eq(st, PT_EUNSUPPORTED);
            ck_assert(strstr(pt_last_error(), "above what this CPU runs") != NULL);
            ck_assert_int_ne(pt__cpu_active(), l); /* unchanged */
        }
    }
    ck_assert_int_eq(pt_set_cpu_path("avx9000"), PT_EINVAL);
    ck_assert(strstr(pt_last_error(), "avx9000") != NULL);
    ck_assert_int_eq(pt_set_cpu_path(NULL), PT_OK);
    ck_assert_int_eq(pt__cpu_active(), det);
    ck_assert_int_eq(pt_set_cpu_path("auto"), PT_OK);
    ck_assert_int_eq(pt_has_feature("cpu-dispatch"), 1);
    ck_assert_int_eq(pt_has_feature("bf16"), 1);
    ck_assert_int_eq(pt_has_feature("run"), 1); /* the run layer, posttrain/run.h */
    ck_assert_int_eq(pt_has_feature("cpu-path"), 0); /* whole words only */
}
END_TEST

/* PT_CPU as the test's environment sets it (meson runs this suite twice). */
START_TEST(test_env_choice)
{
    const char *env = getenv("PT_CPU");
    if (!env) {
        printf("test_cpu: PT_CPU unset: the default is the detected path\n");
        return;
    }
    int l = pt__cpu_level_parse(env);
    ck_assert_int_ge(l, 0);
    if (l > (int)pt__cpu_detected()) {
        ck_assert_int_eq(pt__cpu_active(), pt__cpu_detected());
        ck_assert(strstr(pt_cpu_info(), "ignored") != NULL);
        printf("test_cpu: PT_CPU=%s above this CPU: ignored, as it must be\n", env);
    } else {
        ck_assert_int_eq(pt__cpu_active(), l);
        ck_assert(strstr(pt_cpu_info(), "forced by PT_CPU") != NULL);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu");
    TCase *tc = tcase_create("dispatch");
    /* the environment's choice first: the other cases change the path */
    tcase_add_test(tc, test_env_choice);
    tcase_add_test(tc, test_detect_matches_cpuinfo);
    tcase_add_test(tc, test_force_levels);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
