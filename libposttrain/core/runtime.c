/* Process-wide settings (the log callback and its levels, threads, the
 * version and feature list), per-thread cancellation and the thread count of
 * the call running on a host thread, and the monotonic clock. */
#include "core.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <omp.h>

int pt_set_log_callback(pt_log_fn fn, int max_level, void *payload)
{
    PT_CHECK_ARG(!fn || (max_level >= PT_LOG_ERROR && max_level <= PT_LOG_DEBUG), max_level,
                 "%d is not a pt_log_level", max_level);
    pt__log_install(fn, max_level, payload);
    return PT_OK;
}

static const pt_enum_entry k_log_level_names[] = {
    { PT_LOG_ERROR, "error" },
    { PT_LOG_WARN, "warn" },
    { PT_LOG_INFO, "info" },
    { PT_LOG_DEBUG, "debug" },
};

/* pt_log_level_name is "?" for a value that is no level (it names the levels
 * of log lines, where NULL would not print). */
PT_ENUM_NAME_FUNCS_OR(pt_log_level, k_log_level_names, "log level", "?")

static _Thread_local pt_abort_fn tl_abort_fn;
static _Thread_local void *tl_abort_payload;

int pt_set_abort_callback(pt_abort_fn fn, void *payload)
{
    tl_abort_fn = fn;
    tl_abort_payload = fn ? payload : NULL;
    return PT_OK;
}

int pt_check_abort(void)
{
    if (tl_abort_fn && tl_abort_fn(tl_abort_payload))
        return pt__err(PT_ECANCELLED, "cancelled by the host's abort callback");
    return PT_OK;
}

static atomic_int num_threads; /* 0: not decided yet */
/* The count of the library call running on this host thread (a context's or a
 * generator's, set by pt__threads_enter); 0 outside such a call. */
static _Thread_local int tl_call_threads;

static int default_threads(void)
{
    const char *env = getenv("PT_NUM_THREADS");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 1 && v <= PT_MAX_THREADS)
            return (int)v;
        pt__log(PT_LOG_WARN, "PT_NUM_THREADS=%s ignored: not an integer in [1, %d]", env, PT_MAX_THREADS);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    /* the CPUs this process may run on (an MPI launcher binding a rank to
     * one core, taskset, cgroups' cpusets), when fewer */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1 && CPU_COUNT(&set) < n)
        n = CPU_COUNT(&set);
    if (n < 1)
        n = 1;
    if (n > PT_MAX_THREADS)
        n = PT_MAX_THREADS;
    return (int)n;
}

int pt_set_num_threads(int n)
{
    if (n < 1 || n > PT_MAX_THREADS)
        return pt__err(PT_EINVAL, "pt_set_num_threads: %d is not in [1, %d]", n, PT_MAX_THREADS);
    atomic_store(&num_threads, n);
    return PT_OK;
}

int pt__threads_enter(int n)
{
    int prev = tl_call_threads;
    if (n > 0)
        tl_call_threads = n > PT_MAX_THREADS ? PT_MAX_THREADS : n;
    return prev;
}

void pt__threads_leave(int prev)
{
    tl_call_threads = prev;
}

int pt__thread_setting_check(int n, const char *func)
{
    if (n < 0 || n > PT_MAX_THREADS)
        return pt__err_arg(func, "n", "%d is not in [0, %d] (0: the process setting)", n, PT_MAX_THREADS);
    return PT_OK;
}

int pt__get_process_num_threads(void)
{
    int n = atomic_load(&num_threads);
    if (n == 0) {
        n = default_threads();
        int expected = 0;
        if (!atomic_compare_exchange_strong(&num_threads, &expected, n))
            n = expected;
    }
    return n;
}

int pt_get_num_threads(void)
{
    /* Inside a parallel region (ours, or the host's own OpenMP team) another
     * team would fight the running one for the same cores: one thread. */
    if (omp_in_parallel())
        return 1;
    return tl_call_threads > 0 ? tl_call_threads : pt__get_process_num_threads();
}

/* ---- version ---- */

int pt_version_number(void)
{
    return PT_VERSION_NUMBER;
}

const char *pt_version_string(void)
{
    return PT_VERSION_STRING;
}

double pt__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
