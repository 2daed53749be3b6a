/*
 * libposttrain: conventions shared by every call of the public API.
 *
 *  - Every call that can fail returns an int status: PT_OK (0) or a negative
 *    PT_E* code.  pt_status_name() names a status, pt_status_str() describes it,
 *    and pt_last_error() gives the detail of the last failure on this thread.
 *  - Out-parameters come first.  Callbacks take a trailing `void *payload`.
 *  - Options are transparent structs whose first field is `size`; fill one with
 *    its pt_xxx_options_init() before changing fields.
 *  - Handles are opaque; each type has its own pt_xxx_free(), which accepts NULL.
 *  - No call exits, aborts or writes to stdout; diagnostics go to the log
 *    callback the host installs (none by default).
 */
#ifndef POSTTRAIN_COMMON_H
#define POSTTRAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PT_BUILDING_LIBRARY) && defined(__GNUC__)
#define PT_API __attribute__((visibility("default")))
#else
#define PT_API
#endif

/* A deprecated name: still declared and exported, so hosts written against
 * it compile and link, but the compiler warns at each use and names the
 * replacement (docs/api.md, "Names").  Define PT_NO_DEPRECATION_WARNINGS
 * before including a posttrain header to silence the warnings. */
#if defined(PT_BUILDING_LIBRARY) || defined(PT_NO_DEPRECATION_WARNINGS)
#define PT_DEPRECATED(replacement)
#elif defined(__GNUC__) || defined(__clang__)
#define PT_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#else
#define PT_DEPRECATED(replacement)
#endif

#include "posttrain/version.h"   /* PT_VERSION_MAJOR/MINOR/PATCH/NUMBER/STRING */

/* Status codes.  Values are part of the ABI: new ones are only appended. */
typedef enum pt_status {
    PT_OK = 0,
    PT_EINVAL = -1,        /* an argument is invalid (NULL, out of range, bad option) */
    PT_ENOMEM = -2,        /* an allocation failed or a size overflowed */
    PT_EIO = -3,           /* a read, write, fsync or rename failed */
    PT_EFORMAT = -4,       /* a file or JSON document is malformed */
    PT_EUNSUPPORTED = -5,  /* valid input that this version does not support */
    PT_ENOTFOUND = -6,     /* a file, tensor, token or key does not exist */
    PT_ECANCELLED = -7,    /* the abort callback asked to stop */
    PT_ERANGE = -8,        /* a value is outside what the format or model allows */
    PT_ECALLBACK = -9,     /* a host callback reported failure */
    PT_ESTATE = -10,       /* the call is not valid in the handle's current state */
    PT_ENOSPC = -11,       /* no space left on the device */
    PT_ECHECKSUM = -12,    /* a checksum did not match: the data is damaged */
    PT_ENONFINITE = -13,   /* a loss, gradient or weight was NaN or infinite */
    PT_ESHAPE = -14,       /* a tensor has the wrong shape or dtype */
    PT_ECONFIG = -15,      /* a model configuration is missing a field or is inconsistent */
    PT_EINTERNAL = -16,    /* a bug in libposttrain: please report it */
    PT_EPEER = -17,        /* another rank of a distributed job failed or did not arrive in time */
    PT_EBUSY = -18,        /* the handle is in use by another call (another thread, or a callback
                            * of the call using it), or a run directory is locked by another run */
    PT_EEXIST = -19        /* a file or directory is in the way: it already exists (an earlier run) */
} pt_status;

/* Symbolic name of a status ("PT_EINVAL"), or "PT_E?" for an unknown code. */
PT_API const char *pt_status_name(int status);
/* One-line English description of a status. */
PT_API const char *pt_status_str(int status);

/* Detail of the last failure on the calling thread ("" if none).  The string
 * stays valid until the next libposttrain call on the same thread. */
PT_API const char *pt_last_error(void);
/* Status of the last failure on the calling thread (PT_OK if none). */
PT_API int pt_last_status(void);
/* Forget the calling thread's last error. */
PT_API void pt_clear_error(void);

/* Free memory that a libposttrain call allocated and handed to the caller
 * (token id arrays, strings).  Accepts NULL. */
PT_API void pt_free(void *ptr);

/* Runtime version; compare with PT_VERSION_NUMBER to detect a header/library mismatch. */
PT_API int pt_version_number(void);
PT_API const char *pt_version_string(void);

/* Which BLIS and which of its kernel sets do the matrix products, and why,
 * e.g. "BLIS 0.9.0, skx kernels (chosen by libposttrain for this AMD AVX-512
 * CPU)".  Initialises BLIS on first call; the string is static. */
PT_API const char *pt_blas_info(void);
/* The kernel path: which vector instructions the library's own kernels use,
 * chosen at run time from what the CPU and the OS support.  Paths, lowest
 * first: "avx2" (AVX2 + FMA, the floor), "avx512" (AVX-512 F/BW/DQ/VL),
 * "avx512bf16" (AVX512_BF16: BF16 products with FP32 accumulation).  The
 * default is the highest the CPU runs; the environment variable PT_CPU (read
 * once, on first use) or pt_set_cpu_path() forces a lower one, so one machine
 * can test every path it can run.  pt_set_cpu_path(NULL or "auto") goes back
 * to the highest; a path above the CPU's is PT_EUNSUPPORTED, an unknown name
 * PT_EINVAL.  Process-wide: call it between library calls, not during one. */
PT_API int pt_set_cpu_path(const char *name);
/* The path in use ("avx2", "avx512" or "avx512bf16"); static string. */
PT_API const char *pt_cpu_path(void);
/* The CPU and the paths, e.g. "Intel(R) Xeon(R) Processor; kernels avx512
 * (CPU runs up to avx512bf16; forced by PT_CPU=avx512)".  Valid until the
 * next call on the same thread. */
PT_API const char *pt_cpu_info(void);
/* The backend of BF16 matrix products on the path in use, e.g. "onednn
 * brg:avx512_core_amx_bf16", "own fma" or "own dpbf16" (or the FP32 path's
 * "fp32 blis ..." where the path has no BF16 arithmetic); PT_BF16_GEMM=own
 * forces the library's own kernel.  Valid until the next call on the same
 * thread. */
PT_API const char *pt_bf16_info(void);
/* The capabilities of this build, as space-separated words (for example
 * "sft lora generate grpo ..."): what a binding checks once, instead of
 * probing for symbols.  Words are only ever added. */
PT_API const char *pt_features(void);
/* 1 when pt_features() lists `name`, else 0 (NULL: 0). */
PT_API int pt_has_feature(const char *name);

/* Logging.  The library never prints; it hands messages to this callback. */
typedef enum pt_log_level {
    PT_LOG_ERROR = 0,
    PT_LOG_WARN = 1,
    PT_LOG_INFO = 2,
    PT_LOG_DEBUG = 3
} pt_log_level;

typedef void (*pt_log_fn)(int level, const char *message, void *payload);

/* Install (or with fn == NULL remove) the process-wide log callback.  Messages
 * above max_level are not formatted at all. */
PT_API int pt_set_log_callback(pt_log_fn fn, int max_level, void *payload);
/* Name of a log level ("error", "warn", "info", "debug"; "?" for a value
 * that is not a pt_log_level). */
PT_API const char *pt_log_level_name(int level);
/* The level named "error", "warn", "info" or "debug". */
PT_API int pt_log_level_from_name(int *out, const char *name);

/* Cancellation.  The callback returns non-zero to ask the library to stop; it
 * is polled by long-running calls between steps (layers, batches, tokens) on
 * the thread that installed it, and the call then returns PT_ECANCELLED. */
typedef int (*pt_abort_fn)(void *payload);
PT_API int pt_set_abort_callback(pt_abort_fn fn, void *payload);
/* Poll the calling thread's abort callback: PT_ECANCELLED (with a message) if
 * it asks to stop, PT_OK otherwise.  Hosts may call it from their own loops. */
PT_API int pt_check_abort(void);

/* Threads.  pt_set_num_threads sets the process setting: the count every
 * kernel (BLIS GEMMs included, through per-call settings, and the library's
 * own OpenMP loops) uses in a call whose context or generator has no count of
 * its own (pt_context_set_num_threads, pt_generator_set_num_threads), and in
 * calls without either (pt_optimizer_step, model loading).  The default is the
 * PT_NUM_THREADS environment variable if set, else the number of online CPUs.
 * n must be in [1, 1024].
 * pt_get_num_threads is the count in effect on the calling thread: 1 inside an
 * OpenMP parallel region, else the count of the library call running on this
 * thread (from a callback), else the process setting. */
PT_API int pt_set_num_threads(int n);
PT_API int pt_get_num_threads(void);

#ifdef __cplusplus
}
#endif

#endif
