/* Internal core services: errors, logging, allocation with overflow checks,
 * cancellation, threads, and a deterministic RNG.  Not installed. */
#ifndef PT_CORE_H
#define PT_CORE_H

#include "posttrain/common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define PT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define PT_UNUSED __attribute__((unused))
#else
#define PT_PRINTF(a, b)
#define PT_UNUSED
#endif

/* Record `status` and a formatted message as this thread's last error and
 * return `status`, so a failing path reads `return pt__err(PT_EINVAL, "...")`. */
int pt__err(int status, const char *fmt, ...) PT_PRINTF(2, 3);
/* Like pt__err, but keep the existing message and prefix it with context. */
int pt__err_prefix(int status, const char *fmt, ...) PT_PRINTF(2, 3);
/* A public function's exit: a failed status whose message does not begin
 * with func's name (it came from a call inside) gets "func: " in front, so
 * every message names the function the host called.  Returns status. */
int pt__err_in(const char *func, int status);

/* The index of the first NaN or infinity in x[0..n), or n when there is
 * none (a bit test: exact whatever the floating-point flags; finite.c). */
size_t pt__first_nonfinite(const float *x, size_t n);
/* "NaN", "+inf" or "-inf" (or "a finite value"). */
const char *pt__nonfinite_name(float v);
/* PT_OK when x[0..n) is all finite, else PT_ENONFINITE with the message
 * "holds NaN at element I (the first non-finite value)" for the caller to
 * prefix with the function, file and tensor. */
int pt__err_nonfinite(const float *x, size_t n);

/* Send a message to the host's log callback, if one is installed for `level`. */
void pt__log(int level, const char *fmt, ...) PT_PRINTF(2, 3);
/* Install (fn != NULL) or remove the log callback: pt_set_log_callback after
 * its argument checks. */
void pt__log_install(pt_log_fn fn, int max_level, void *payload);

/* ---- threads ---------------------------------------------------------------
 * pt_get_num_threads() is the count a kernel uses now: 1 inside a parallel
 * region, else the count of the library call running on this host thread
 * (set by pt__threads_enter), else the process setting.  An entry point that
 * runs with a context or a generator brackets its work with
 *     int prev = pt__threads_enter(n);  ...  pt__threads_leave(prev);
 * (n <= 0 keeps the enclosing count), so two host threads each with their own
 * count never share a process-wide value. */
#define PT_MAX_THREADS 1024
int pt__threads_enter(int n);
void pt__threads_leave(int prev);
/* The process setting (pt_set_num_threads, or the default). */
int pt__get_process_num_threads(void);
/* A handle's own setting (contexts, generators): 0 follows the process
 * setting.  pt__thread_setting_check is PT_EINVAL naming `func` outside
 * [0, PT_MAX_THREADS]; pt__thread_setting_count is the count it runs with. */
int pt__thread_setting_check(int n, const char *func);
static inline int pt__thread_setting_count(int n)
{
    return n > 0 ? n : pt__get_process_num_threads();
}

/* fmaxf(a, b) for an `a` that is never NaN (a running maximum): a NaN `b`
 * leaves `a`, as fmaxf does.  GCC calls libm for fmaxf, which keeps a loop
 * scalar; this compiles to vmaxps. */
static inline float pt__maxf(float a, float b)
{
    return b > a ? b : a;
}

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool pt__mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool pt__add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* ---- argument checks -------------------------------------------------------
 * Every public function checks its arguments with these, so each message
 * names the function and the argument the same way:
 *     PT_CHECK_NULL(model);            -> "pt_foo: model is NULL"
 *     PT_CHECK_ARG(n > 0, n, "must be positive (got %d)", n);
 *                                      -> "pt_foo: n must be positive (got 0)"
 * Both return PT_EINVAL from the calling function. */
int pt__err_arg(const char *func, const char *arg, const char *fmt, ...) PT_PRINTF(3, 4);
#define PT_CHECK_NULL(p)                                                      \
    do {                                                                      \
        if (!(p))                                                             \
            return pt__err(PT_EINVAL, "%s: %s is NULL", __func__, #p);         \
    } while (0)
#define PT_CHECK_ARG(cond, arg, ...)                                          \
    do {                                                                      \
        if (!(cond))                                                          \
            return pt__err_arg(__func__, #arg, __VA_ARGS__);                   \
    } while (0)

/* Counts beyond any possible input (a negative count cast to size_t, an
 * uninitialised one): a public call given one returns PT_ERANGE naming
 * itself before it reads the caller's array. */
#define PT_MAX_TOKENS ((size_t)1 << 28)      /* token ids in one call (1 GiB of int32) */
#define PT_MAX_TEXT_BYTES ((size_t)1 << 31)  /* a text or JSON document in memory */
#define PT_MAX_MESSAGES ((size_t)1 << 24)    /* messages of one conversation */
#define PT_MAX_VALUES ((size_t)1 << 36)      /* values of a host's reduction (the parameter limit) */
int pt__err_count(const char *func, const char *arg, size_t n, size_t max, const char *what);
#define PT_CHECK_COUNT(n, max, what)                                          \
    do {                                                                      \
        if ((size_t)(n) > (size_t)(max))                                      \
            return pt__err_count(__func__, #n, (size_t)(n), (max), (what));    \
    } while (0)

/* ---- versioned structs -----------------------------------------------------
 * Options, configurations and stats begin with `size_t size`, set by their
 * _init to sizeof the struct in the caller's header.  A caller built against
 * an older, smaller header passes a smaller size; the library accepts any
 * size from sizeof(size_t) up to its own and treats the fields the caller
 * did not have as their defaults.
 *
 * pt__struct_read: `dst` (full_size bytes) already holds the defaults; copy
 * the caller's `src` over its first src->size bytes and set dst->size to
 * full_size.  NULL src means "all defaults".  A size outside the range is
 * PT_EINVAL naming the function and the _init to call. */
int pt__struct_read(void *dst, size_t full_size, const void *src, const char *func,
                   const char *init_name);
/* Check that a caller's output struct (stats) has a size in range; NULL is
 * allowed (the caller does not want it). */
int pt__struct_check_out(const void *user, size_t full_size, const char *func,
                        const char *init_name);
/* Copy a filled struct `full` into the caller's `user` (NULL: nothing),
 * as many bytes as the caller's size says, keeping the caller's size. */
void pt__struct_write(void *user, const void *full);
/* A getter's copy: pt__struct_check_out, then pt__struct_write. */
int pt__struct_get(void *user, const void *full, size_t full_size, const char *func,
                   const char *init_name);

/* opts_local = defaults from init(), then the caller's fields over them. */
#define PT_STRUCT_READ(local, user, init)                                     \
    ((void)init(&(local)), pt__struct_read(&(local), sizeof(local), (user), __func__, #init))
#define PT_STRUCT_CHECK_OUT(user, type, init)                                 \
    pt__struct_check_out((user), sizeof(type), __func__, #init)
/* The same two, returning their status (PT_EINVAL: a size out of range)
 * from the calling function when it is not PT_OK, as PT_CHECK_ARG does. */
#define PT_CHECK_STRUCT_READ(local, user, init)                               \
    do {                                                                      \
        int st_ = PT_STRUCT_READ(local, user, init);                          \
        if (st_)                                                              \
            return st_;                                                       \
    } while (0)
#define PT_CHECK_STRUCT_OUT(user, type, init)                                 \
    do {                                                                      \
        int st_ = PT_STRUCT_CHECK_OUT(user, type, init);                      \
        if (st_)                                                              \
            return st_;                                                       \
    } while (0)
/* The caller's `user` gets a copy of the library's `full` (a pointer to
 * the whole struct), PT_EINVAL when user's size is out of range. */
#define PT_STRUCT_GET(user, full, init)                                       \
    pt__struct_get((user), (full), sizeof *(full), __func__, #init)

/* The start of every _init that zeroes its struct: the pointer checked
 * (PT_EINVAL naming the _init), the struct zeroed, its size set.  The _init
 * then sets its non-zero defaults and returns PT_OK.  (An _init may instead
 * assign one designated initializer of its defaults.) */
#define PT_STRUCT_INIT_ZERO(p)                                                \
    do {                                                                      \
        PT_CHECK_NULL(p);                                                     \
        memset((p), 0, sizeof *(p));                                          \
        (p)->size = sizeof *(p);                                              \
    } while (0)
/* Define `int name(type *param)`, an _init whose defaults are all zero:
 * PT_STRUCT_INIT_ZERO(param), then PT_OK. */
#define PT_ZERO_INIT(name, type, param)                                       \
    int name(type *param)                                                     \
    {                                                                         \
        PT_STRUCT_INIT_ZERO(param);                                           \
        return PT_OK;                                                         \
    }

/* Element i of a caller's array of versioned structs: the stride is the
 * caller's own sizeof, the size its _init wrote into element 0 (which the
 * caller checks first). */
const void *pt__struct_at(const void *array, size_t i);

/* ---- enums with names ------------------------------------------------------
 * Each public enum has a table of {value, name}; the public
 * pt_<enum>_name / pt_<enum>_from_name functions are built on these. */
typedef struct pt_enum_entry {
    int value;
    const char *name;
} pt_enum_entry;
/* The name of `value`, or NULL when the table has none. */
const char *pt__enum_name(const pt_enum_entry *table, size_t n, int value);
/* The value named `name` (exact match) into *out; PT_EINVAL naming `func`,
 * `what` and every accepted name otherwise. */
int pt__enum_from_name(int *out, const pt_enum_entry *table, size_t n, const char *name,
                      const char *func, const char *what);
#define PT_ENUM_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* Define the public pair pt_<stem>_name / pt_<stem>_from_name over one
 * table of pt_enum_entry; `what` names the enum in from_name's message.
 * A value listed twice is named by its first entry; the later names are
 * aliases that from_name accepts too.  _name returns NULL for a value the
 * table lacks, or `unknown` with PT_ENUM_NAME_FUNCS_OR. */
#define PT_ENUM_NAME_FUNCS(stem, table, what) PT_ENUM_NAME_FUNCS_OR(stem, table, what, NULL)
#define PT_ENUM_NAME_FUNCS_OR(stem, table, what, unknown)                     \
    const char *stem##_name(int value)                                        \
    {                                                                         \
        const char *name_ = pt__enum_name(table, PT_ENUM_COUNT(table), value); \
        return name_ ? name_ : (unknown);                                     \
    }                                                                         \
    int stem##_from_name(int *out, const char *name)                          \
    {                                                                         \
        return pt__enum_from_name(out, table, PT_ENUM_COUNT(table), name,      \
                                 __func__, what);                             \
    }

/* Define `type name(const handle *h)`, a handle's getter of one field:
 * h->field, or `none` when h is NULL. */
#define PT_GETTER(type, name, handle, field, none)                            \
    type name(const handle *h_)                                               \
    {                                                                         \
        return h_ ? h_->field : (none);                                       \
    }

/* Define `int name(type *out, const handle *h)`, the deprecated
 * out-parameter form of a value getter: *out = getter(h), PT_EINVAL when
 * out or h is NULL (the messages name the parameters out and h). */
#define PT_DEPRECATED_GETTER(type, name, out, handle, h, getter)              \
    int name(type *out, const handle *h)                                      \
    {                                                                         \
        PT_CHECK_NULL(out);                                                   \
        PT_CHECK_NULL(h);                                                     \
        *out = getter(h);                                                     \
        return PT_OK;                                                         \
    }

/* Allocation helpers.  They set PT_ENOMEM with a message on failure. */
void *pt__malloc(size_t n);
void *pt__calloc(size_t count, size_t size);
void *pt__malloc_array(size_t count, size_t size);
void *pt__realloc_array(void *p, size_t count, size_t size);
/* p (*cap items of size bytes) reallocated to twice as many items, or to
 * `first` when *cap is 0, and *cap updated: the growth of an array filled
 * one item at a time.  NULL when out of memory (p and *cap unchanged). */
void *pt__grow_array(void *p, size_t *cap, size_t first, size_t size);
/* 64-byte aligned allocation (free with pt__free_aligned). */
void *pt__malloc_aligned(size_t n);
void pt__free_aligned(void *p);
/* Give the whole pages inside [p, p + n) back to the OS (madvise
 * MADV_DONTNEED): anonymous memory reads as zeros until written again, a
 * read-only file mapping reads the file again.  An optimisation of memory
 * only: a failure leaves the pages as they are. */
void pt__release_pages(const void *p, size_t n);
char *pt__strdup(const char *s);

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): the one clock every
 * duration in the library is measured with. */
double pt__now(void);

/* The next value of the splitmix64 sequence at *state (adds the golden
 * gamma, then mixes): the one splitmix of the library, which seeds pt_rng. */
uint64_t pt__splitmix64(uint64_t *state);

/* Deterministic RNG: splitmix64-seeded xoshiro256** (state is plain data, so it
 * can be checkpointed).  Normal samples use Box-Muller on two uniforms. */
typedef struct pt_rng {
    uint64_t s[4];
} pt_rng;
void pt__rng_seed(pt_rng *r, uint64_t seed);
uint64_t pt__rng_next(pt_rng *r);
/* Uniform in [0, 1) with 24 bits (float) or 53 bits (double). */
float pt__rng_uniform(pt_rng *r);
double pt__rng_uniform_double(pt_rng *r);
/* Standard normal sample. */
double pt__rng_normal(pt_rng *r);
/* Uniform integer in [0, n) without modulo bias (n > 0). */
uint64_t pt__rng_below(pt_rng *r, uint64_t n);

#endif
