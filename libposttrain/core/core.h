/* Internal core services: errors, logging, allocation with overflow checks,
 * cancellation, threads, and a deterministic RNG.  Not installed. */
#ifndef PT_CORE_H
#define PT_CORE_H

#include "posttrain/common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define PT_UNUSED __attribute__((unused))
#else
#define PT_PRINTF(a, b)
#define PT_UNUSED
#endif

/* Record `status` and a formatted message as this thread's last error and
 * return `status`, so a failing path reads `return pt_err(PT_EINVAL, "...")`. */
int pt_err(int status, const char *fmt, ...) PT_PRINTF(2, 3);
/* Like pt_err, but keep the existing message and prefix it with context. */
int pt_err_prefix(int status, const char *fmt, ...) PT_PRINTF(2, 3);

/* Send a message to the host's log callback, if one is installed for `level`. */
void pt_log(int level, const char *fmt, ...) PT_PRINTF(2, 3);

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool pt_mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool pt_add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Allocation helpers.  They set PT_ENOMEM with a message on failure. */
void *pt_malloc(size_t n);
void *pt_calloc(size_t count, size_t size);
void *pt_malloc_array(size_t count, size_t size);
void *pt_realloc_array(void *p, size_t count, size_t size);
/* p (*cap items of size bytes) reallocated to twice as many items, or to
 * `first` when *cap is 0, and *cap updated: the growth of an array filled
 * one item at a time.  NULL when out of memory (p and *cap unchanged). */
void *pt_grow_array(void *p, size_t *cap, size_t first, size_t size);
/* 64-byte aligned allocation (free with pt_free_aligned). */
void *pt_malloc_aligned(size_t n);
void pt_free_aligned(void *p);
char *pt_strdup(const char *s);

/* Read a whole file into a NUL-terminated buffer (the NUL is not counted).
 * Refuses files larger than max_bytes with PT_ERANGE. */
int pt_read_file(char **out, size_t *out_len, const char *path, size_t max_bytes);

/* Deterministic RNG: splitmix64-seeded xoshiro256** (state is plain data, so it
 * can be checkpointed).  Normal samples use Box-Muller on two uniforms. */
typedef struct pt_rng {
    uint64_t s[4];
} pt_rng;
void pt_rng_seed(pt_rng *r, uint64_t seed);
uint64_t pt_rng_next(pt_rng *r);
/* Uniform in [0, 1) with 24 bits (float) or 53 bits (double). */
float pt_rng_uniform(pt_rng *r);
double pt_rng_uniform_double(pt_rng *r);
/* Standard normal sample. */
double pt_rng_normal(pt_rng *r);
/* Uniform integer in [0, n) without modulo bias (n > 0). */
uint64_t pt_rng_below(pt_rng *r, uint64_t n);

#endif
