/* Core services: errors, logging, cancellation, threads, allocation, RNG,
 * the clock. */
#include "testutil.h"

#include "core/core.h"

#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

START_TEST(test_status_names)
{
    /* Every status from PT_OK down to PT_EEXIST has a distinct name and text. */
    for (int s = PT_OK; s >= PT_EEXIST; s--) {
        ck_assert_str_ne(pt_status_name(s), "PT_E?");
        ck_assert_str_ne(pt_status_str(s), "unknown status");
        for (int t = s - 1; t >= PT_EEXIST; t--)
            ck_assert_str_ne(pt_status_name(s), pt_status_name(t));
    }
    ck_assert_str_eq(pt_status_name(PT_EINVAL), "PT_EINVAL");
    ck_assert_str_eq(pt_status_name(PT_ECHECKSUM), "PT_ECHECKSUM");
    ck_assert_str_eq(pt_status_name(-999), "PT_E?");
    ck_assert_str_eq(pt_status_name(1), "PT_E?");
    ck_assert_str_eq(pt_status_str(-999), "unknown status");
}
END_TEST

START_TEST(test_error_message)
{
    pt_clear_error();
    ck_assert_str_eq(pt_last_error(), "");
    ck_assert_int_eq(pt_last_status(), PT_OK);
    ck_assert_int_eq(pt__err(PT_EFORMAT, "bad byte at %d", 17), PT_EFORMAT);
    ck_assert_str_eq(pt_last_error(), "bad byte at 17");
    ck_assert_int_eq(pt_last_status(), PT_EFORMAT);
    ck_assert_int_eq(pt__err_prefix(PT_EFORMAT, "reading %s", "x.json"), PT_EFORMAT);
    ck_assert_str_eq(pt_last_error(), "reading x.json: bad byte at 17");
    /* A message longer than the buffer is truncated, not overflowed. */
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    pt__err(PT_EINVAL, "%s", big);
    ck_assert_uint_lt(strlen(pt_last_error()), 1024);
    ck_assert_uint_gt(strlen(pt_last_error()), 1000);
    pt_clear_error();
    ck_assert_str_eq(pt_last_error(), "");
}
END_TEST

static void *thread_error(void *arg)
{
    (void)arg;
    /* A fresh thread starts with no error, and its error stays its own. */
    int clean = pt_last_error()[0] == '\0' && pt_last_status() == PT_OK;
    pt__err(PT_EIO, "other thread");
    return (void *)(intptr_t)clean;
}

START_TEST(test_error_thread_local)
{
    pt__err(PT_ENOTFOUND, "main thread");
    pthread_t th;
    void *ret;
    ck_assert_int_eq(pthread_create(&th, NULL, thread_error, NULL), 0);
    ck_assert_int_eq(pthread_join(th, &ret), 0);
    ck_assert_int_eq((int)(intptr_t)ret, 1);
    ck_assert_str_eq(pt_last_error(), "main thread");
    ck_assert_int_eq(pt_last_status(), PT_ENOTFOUND);
}
END_TEST

struct log_capture {
    int count;
    int last_level;
    char last[256];
};

static void capture_log(int level, const char *msg, void *payload)
{
    struct log_capture *c = payload;
    c->count++;
    c->last_level = level;
    snprintf(c->last, sizeof c->last, "%s", msg);
}

START_TEST(test_log_callback)
{
    struct log_capture cap = { 0 };
    ck_assert_ok(pt_set_log_callback(capture_log, PT_LOG_INFO, &cap));
    pt__log(PT_LOG_INFO, "hello %d", 42);
    ck_assert_int_eq(cap.count, 1);
    ck_assert_int_eq(cap.last_level, PT_LOG_INFO);
    ck_assert_str_eq(cap.last, "hello 42");
    pt__log(PT_LOG_DEBUG, "filtered");
    ck_assert_int_eq(cap.count, 1);
    pt__log(PT_LOG_ERROR, "kept");
    ck_assert_int_eq(cap.count, 2);
    /* Errors are logged at debug level when the host asks for it. */
    ck_assert_ok(pt_set_log_callback(capture_log, PT_LOG_DEBUG, &cap));
    pt__err(PT_EIO, "disk gone");
    ck_assert_int_eq(cap.count, 3);
    ck_assert_str_eq(cap.last, "PT_EIO: disk gone");
    ck_assert_status(pt_set_log_callback(capture_log, 7, &cap), PT_EINVAL, "level 7");
    ck_assert_status(pt_set_log_callback(capture_log, -1, &cap), PT_EINVAL, "level");
    /* Both refusals were themselves logged at debug level. */
    ck_assert_int_eq(cap.count, 5);
    ck_assert_ok(pt_set_log_callback(NULL, 0, NULL));
    pt__log(PT_LOG_ERROR, "nobody listens");
    ck_assert_int_eq(cap.count, 5);
    ck_assert_str_eq(pt_log_level_name(PT_LOG_WARN), "warn");
    ck_assert_str_eq(pt_log_level_name(99), "?");
}
END_TEST

static int abort_after(void *payload)
{
    int *n = payload;
    return --*n <= 0;
}

START_TEST(test_abort_callback)
{
    ck_assert_ok(pt_check_abort());
    int budget = 3;
    ck_assert_ok(pt_set_abort_callback(abort_after, &budget));
    ck_assert_ok(pt_check_abort());
    ck_assert_ok(pt_check_abort());
    ck_assert_status(pt_check_abort(), PT_ECANCELLED, "abort callback");
    ck_assert_ok(pt_set_abort_callback(NULL, NULL));
    ck_assert_ok(pt_check_abort());
}
END_TEST

START_TEST(test_threads)
{
    int before = pt_get_num_threads();
    ck_assert_int_ge(before, 1);
    ck_assert_ok(pt_set_num_threads(3));
    ck_assert_int_eq(pt_get_num_threads(), 3);
    ck_assert_status(pt_set_num_threads(0), PT_EINVAL, "0");
    ck_assert_status(pt_set_num_threads(-4), PT_EINVAL, "-4");
    ck_assert_status(pt_set_num_threads(100000), PT_EINVAL, "100000");
    ck_assert_int_eq(pt_get_num_threads(), 3);
    ck_assert_ok(pt_set_num_threads(before));
}
END_TEST

START_TEST(test_alloc_overflow)
{
    pt_clear_error();
    void *p = pt__malloc_array(SIZE_MAX / 2, 4);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(pt_last_status(), PT_ENOMEM);
    ck_assert_ptr_nonnull(strstr(pt_last_error(), "overflows"));
    p = pt__calloc(SIZE_MAX / 8, 16);
    ck_assert_ptr_null(p);
    float *a = pt__malloc_aligned(100 * sizeof(float));
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq((uintptr_t)a % 64, 0);
    pt__free_aligned(a);
    size_t r;
    ck_assert(!pt__mul_size(SIZE_MAX, 2, &r));
    ck_assert(pt__mul_size(1000, 1000, &r) && r == 1000000);
    ck_assert(!pt__add_size(SIZE_MAX, 1, &r));
}
END_TEST

START_TEST(test_rng)
{
    pt_rng a, b;
    pt__rng_seed(&a, 1234);
    pt__rng_seed(&b, 1234);
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq(pt__rng_next(&a), pt__rng_next(&b));
    pt__rng_seed(&b, 1235);
    ck_assert_uint_ne(pt__rng_next(&a), pt__rng_next(&b));
    /* xoshiro256** reference: first outputs for state {1,2,3,4}. */
    pt_rng r = { { 1, 2, 3, 4 } };
    ck_assert_uint_eq(pt__rng_next(&r), 11520ull);
    ck_assert_uint_eq(pt__rng_next(&r), 0ull);
    ck_assert_uint_eq(pt__rng_next(&r), 1509978240ull);
    /* Moments of the normal sampler and range of the uniforms. */
    pt__rng_seed(&a, 7);
    double s = 0, s2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = pt__rng_normal(&a);
        s += x;
        s2 += x * x;
    }
    ck_assert_double_lt(fabs(s / n), 0.01);
    ck_assert_double_lt(fabs(s2 / n - 1.0), 0.02);
    int hist[10] = { 0 };
    for (int i = 0; i < n; i++) {
        float u = pt__rng_uniform(&a);
        ck_assert(u >= 0.0f && u < 1.0f);
        hist[(int)(u * 10)]++;
        uint64_t k = pt__rng_below(&a, 7);
        ck_assert_uint_lt(k, 7);
    }
    for (int i = 0; i < 10; i++)
        ck_assert_int_lt(abs(hist[i] - n / 10), n / 100);
}
END_TEST

/* The one splitmix64 (Vigna's reference outputs from state 0: e220a8397b1dcdaf,
 * 6e789e6aa1b965f4, 06c45d188009454f), which seeds pt_rng with its first four
 * values, and the one monotonic clock. */
START_TEST(test_splitmix_and_clock)
{
    uint64_t x = 0;
    ck_assert_uint_eq(pt__splitmix64(&x), 0xE220A8397B1DCDAFull);
    ck_assert_uint_eq(pt__splitmix64(&x), 0x6E789E6AA1B965F4ull);
    ck_assert_uint_eq(pt__splitmix64(&x), 0x06C45D188009454Full);
    ck_assert_uint_eq(x, 3 * 0x9E3779B97F4A7C15ull);
    pt_rng r;
    pt__rng_seed(&r, 0);
    x = 0;
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(r.s[i], pt__splitmix64(&x));
    double t0 = pt__now(), t1 = pt__now();
    ck_assert(t0 > 0 && t1 >= t0);
    struct timespec ts = { 0, 20 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    ck_assert_double_ge(pt__now() - t1, 0.019); /* a lower bound only: sleeps never end early */
}
END_TEST

/* The versioned-struct macros of core.h on a struct of the test's own:
 * version 1 had `a` and `a2` (16 bytes); version 2 (the library's, 24
 * bytes) adds `b`, default 7. */
typedef struct vs_opts {
    size_t size;
    int a, a2;
    int b;
} vs_opts;
typedef struct vs_opts_v1 {
    size_t size;
    int a, a2;
} vs_opts_v1;

static int vs_opts_init(vs_opts *o)
{
    PT_STRUCT_INIT_ZERO(o);
    o->b = 7;
    return PT_OK;
}

int vs_zero_init(vs_opts *opts);
PT_ZERO_INIT(vs_zero_init, vs_opts, opts)

/* reads the caller's options; -1 in *a and *b unless the read succeeded */
static int vs_read(int *a, int *b, const void *user)
{
    *a = *b = -1;
    vs_opts o;
    PT_CHECK_STRUCT_READ(o, user, vs_opts_init);
    *a = o.a;
    *b = o.b;
    return PT_OK;
}

/* 42 once the caller's output struct passes the check */
static int vs_out(void *user)
{
    PT_CHECK_STRUCT_OUT(user, vs_opts, vs_opts_init);
    return 42;
}

static int vs_get(void *user)
{
    const vs_opts full = { sizeof full, 3, 0, 4 };
    return PT_STRUCT_GET(user, &full, vs_opts_init);
}

START_TEST(test_struct_macros)
{
    vs_opts z;
    memset(&z, 0xAB, sizeof z);
    ck_assert_int_eq(vs_zero_init(&z), PT_OK);
    ck_assert_uint_eq(z.size, sizeof(vs_opts));
    ck_assert_int_eq(z.a, 0);
    ck_assert_int_eq(z.b, 0);
    ck_assert_int_eq(vs_zero_init(NULL), PT_EINVAL);
    ck_assert_str_eq(pt_last_error(), "vs_zero_init: opts is NULL");

    /* an older caller's fields are read, the rest are the defaults */
    int a, b;
    vs_opts_v1 v1 = { sizeof v1, 5, 0 };
    ck_assert_int_eq(vs_read(&a, &b, &v1), PT_OK);
    ck_assert_int_eq(a, 5);
    ck_assert_int_eq(b, 7);
    ck_assert_int_eq(vs_read(&a, &b, NULL), PT_OK);
    ck_assert_int_eq(a, 0);
    ck_assert_int_eq(b, 7);
    vs_opts_v1 bad = { 3, 5, 0 };
    ck_assert_int_eq(vs_read(&a, &b, &bad), PT_EINVAL);
    ck_assert_int_eq(a, -1); /* returned before the rest of the function */
    ck_assert_str_eq(pt_last_error(), "vs_read: struct size 3 is not between 8 and 24 (fill it with "
                                      "vs_opts_init first)");

    ck_assert_int_eq(vs_out(NULL), 42);
    ck_assert_int_eq(vs_out(&v1), 42);
    ck_assert_int_eq(vs_out(&bad), PT_EINVAL);
    ck_assert_str_eq(pt_last_error(), "vs_out: struct size 3 is not between 8 and 24 (fill it with "
                                      "vs_opts_init first)");

    /* a getter writes the caller's size only: the bytes after it stay */
    struct {
        vs_opts_v1 v;
        char canary[8];
    } older;
    memset(&older, 0x5A, sizeof older);
    older.v.size = sizeof older.v;
    ck_assert_int_eq(vs_get(&older.v), PT_OK);
    ck_assert_uint_eq(older.v.size, sizeof(vs_opts_v1));
    ck_assert_int_eq(older.v.a, 3);
    for (size_t i = sizeof older.v; i < sizeof older; i++)
        ck_assert_int_eq(((const unsigned char *)&older)[i], 0x5A);
    vs_opts full;
    vs_opts_init(&full);
    ck_assert_int_eq(vs_get(&full), PT_OK);
    ck_assert_int_eq(full.a, 3);
    ck_assert_int_eq(full.b, 4);
    ck_assert_int_eq(vs_get(&bad), PT_EINVAL);
    ck_assert_str_eq(pt_last_error(), "vs_get: struct size 3 is not between 8 and 24 (fill it with "
                                      "vs_opts_init first)");
    ck_assert_int_eq(bad.a, 5);
}
END_TEST

static Suite *core_suite(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_status_names);
    tcase_add_test(tc, test_error_message);
    tcase_add_test(tc, test_error_thread_local);
    tcase_add_test(tc, test_log_callback);
    tcase_add_test(tc, test_abort_callback);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_alloc_overflow);
    tcase_add_test(tc, test_rng);
    tcase_add_test(tc, test_splitmix_and_clock);
    tcase_add_test(tc, test_struct_macros);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(core_suite());
}
