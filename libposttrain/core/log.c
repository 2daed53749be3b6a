/* The log sink: the host's callback, its level and payload, behind one lock.
 * The lowest piece of core: it calls nothing else in the library, so error
 * reporting (error.c) can log every error without a circle. */
#include "core.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <pthread.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pt_log_fn log_fn;
static void *log_payload;
static atomic_int log_max = -1; /* -1: no callback installed */

void pt__log_install(pt_log_fn fn, int max_level, void *payload)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_payload = payload;
    atomic_store(&log_max, fn ? max_level : -1);
    pthread_mutex_unlock(&log_lock);
}

void pt__log(int level, const char *fmt, ...)
{
    if (level > atomic_load(&log_max))
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    if (log_fn && level <= atomic_load(&log_max))
        log_fn(level, buf, log_payload);
    pthread_mutex_unlock(&log_lock);
}
