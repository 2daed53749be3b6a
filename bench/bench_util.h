/* Shared helpers for the benchmark programs in bench/: wall time, peak RSS,
 * the BLIS sgemm peak measured in the same run, and running the PyTorch
 * anchor script.  Benchmarks print figures; they never assert on time. */
#ifndef PT_BENCH_UTIL_H
#define PT_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <math.h>
#include <unistd.h>

#include "core/core.h"
#include "kernels/gemm.h"
#include "posttrain/posttrain.h"

/* Run a libposttrain call; on failure print it with its status and message
 * and return 1 from the calling function. */
#define CHECK(expr)                                                                              \
    do {                                                                                         \
        int st_ = (expr);                                                                        \
        if (st_ != PT_OK) {                                                                      \
            fprintf(stderr, "%s failed: %s: %s\n", #expr, pt_status_name(st_), pt_last_error()); \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

/* The library's monotonic clock (core's pt__now). */
static inline double bench_now(void)
{
    return pt__now();
}

/* Peak resident set size of this process in MB. */
static inline double bench_peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- memory read bandwidth: a streaming sum over 512 MiB ---- */

#define BENCH_STREAM_BYTES ((size_t)512 << 20)
#define BENCH_STREAM_PIECE (((size_t)1 << 20) / sizeof(uint64_t))

/* The sum of one 1 MiB piece, read as 4 interleaved streams (its quarters)
 * in 8 independent lanes (vectorised).  The decode kernels read 4 rows of W
 * at a time; one stream a thread measured about 30% less on these
 * machines. */
static inline uint64_t bench_sum_piece(const uint64_t *a)
{
    const size_t q = BENCH_STREAM_PIECE / 4;
    uint64_t s[8] = { 0 };
    for (size_t i = 0; i < q; i += 8)
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < 8; j++)
                s[j] += a[(size_t)t * q + i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* The memory read bandwidth of `nt` threads in GB/s: the median of `reps`
 * streaming sums over 512 MiB after a warm-up one (the best in *best); 0 if
 * the buffer cannot be had.  The peak a decode benchmark's weight streaming
 * is a fraction of, measured in the same run. */
static inline double bench_stream_gbs(int nt, int reps, double *best)
{
    size_t n = BENCH_STREAM_BYTES / sizeof(uint64_t);
    uint64_t *a = aligned_alloc(64, BENCH_STREAM_BYTES);
    double t[65];
    *best = 0.0;
    if (!a || reps < 1 || reps > 64) {
        free(a);
        return 0.0;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        a[i] = i * 0x9e3779b97f4a7c15ull;
    volatile uint64_t sink = 0;
    for (int r = 0; r <= reps; r++) {
        uint64_t s = 0;
        double t0 = bench_now();
        /* In 1 MiB pieces shared dynamically, as the kernels share their
         * blocks: a thread the OS preempts does not hold the other up. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) reduction(+ : s)
        for (size_t c = 0; c < n; c += BENCH_STREAM_PIECE)
            s += bench_sum_piece(a + c);
        t[r] = bench_now() - t0;
        sink += s;
    }
    (void)sink;
    free(a);
    double tmin = t[1];
    for (int r = 2; r <= reps; r++)
        tmin = t[r] < tmin ? t[r] : tmin;
    *best = (double)BENCH_STREAM_BYTES / tmin / 1e9;
    return (double)BENCH_STREAM_BYTES / bench_median(t + 1, reps) / 1e9; /* t[0]: warm-up */
}

/* bench_stream_gbs in a child process, so that its buffer stays out of the
 * caller's peak RSS; call it before the caller's first OpenMP region (a
 * child of a process with a thread pool cannot start one).  0 on failure. */
static inline double bench_stream_gbs_child(int nt, int reps, double *best)
{
    int fd[2];
    double r[2] = { 0.0, 0.0 };
    *best = 0.0;
    if (pipe(fd) != 0)
        return 0.0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        r[0] = bench_stream_gbs(nt, reps, &r[1]);
        ssize_t w = write(fd[1], r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    if (pid < 0 || read(fd[0], r, sizeof r) != (ssize_t)sizeof r)
        r[0] = r[1] = 0.0;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    *best = r[1];
    return r[0];
}

/* Median GFLOP/s of a row-major sgemm m x n x k through pt__sgemm_nt with
 * `threads` threads (the peak the figures are compared with). */
static inline double bench_gemm_peak(int threads, size_t m, size_t n, size_t k, int reps)
{
    float *a = malloc(m * k * sizeof *a), *b = malloc(k * n * sizeof *b), *c = malloc(m * n * sizeof *c);
    if (!a || !b || !c) {
        free(a); free(b); free(c);
        return 0.0;
    }
    for (size_t i = 0; i < m * k; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < k * n; i++) b[i] = (float)(i % 5) * 0.1f;
    double t[16];
    if (reps > 16) reps = 16;
    pt__sgemm_nt(threads, false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        pt__sgemm_nt(threads, false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
        t[r] = bench_now() - t0;
    }
    double med = bench_median(t, reps);
    free(a); free(b); free(c);
    return 2.0 * (double)m * (double)n * (double)k / med / 1e9;
}

/* Run a shell command and copy the first line that starts with `key` into
 * `line`; returns 0 when found. */
static inline int bench_run_capture(const char *cmd, const char *key, char *line, size_t cap)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char buf[4096];
    int found = -1;
    while (fgets(buf, sizeof buf, p)) {
        fputs(buf, stdout);
        if (found != 0 && strncmp(buf, key, strlen(key)) == 0) {
            snprintf(line, cap, "%s", buf);
            found = 0;
        }
    }
    pclose(p);
    return found;
}

/* The PyTorch anchor script: anchors/torch_llama.py under `shared` (may be
 * NULL), the ../shared beside the source tree, or /work/shared.  Returns
 * path, or NULL when none is readable. */
static inline const char *bench_find_anchor(char *path, size_t cap, const char *shared)
{
    const char *dirs[3] = { shared, PT_BENCH_SHARED, "/work/shared" };
    for (int d = 0; d < 3; d++) {
        if (!dirs[d])
            continue;
        snprintf(path, cap, "%s/anchors/torch_llama.py", dirs[d]);
        if (access(path, R_OK) == 0)
            return path;
    }
    return NULL;
}

/* The 1-minute load average (NaN if unreadable). */
static inline double bench_loadavg(void)
{
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = NAN;
        fclose(f);
    }
    return l;
}

/* The model shapes the benchmarks time: "smollm2-135m" (SmolLM2-135M) or
 * "tiny", with positions for at least seq tokens; -1 for another name. */
static inline int bench_model_config(pt_model_config *c, const char *name, int seq)
{
    pt_model_config_init(c);
    c->arch = PT_ARCH_LLAMA;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 10000.0;
    c->tie_word_embeddings = true;
    c->max_position_embeddings = seq > 2048 ? seq : 2048;
    if (strcmp(name, "smollm2-135m") == 0) {
        c->hidden_size = 576;
        c->num_hidden_layers = 30;
        c->num_attention_heads = 9;
        c->num_key_value_heads = 3;
        c->intermediate_size = 1536;
        c->vocab_size = 49152;
    } else if (strcmp(name, "tiny") == 0) {
        c->hidden_size = 256;
        c->num_hidden_layers = 4;
        c->num_attention_heads = 4;
        c->num_key_value_heads = 2;
        c->intermediate_size = 704;
        c->vocab_size = 8192;
    } else {
        return -1;
    }
    c->head_dim = c->hidden_size / c->num_attention_heads;
    return 0;
}

/* A B x T batch of ids and targets drawn below vocab by a fixed LCG from
 * seed; bench_batch_free() after.  -1 when out of memory. */
static inline int bench_random_batch(pt_batch *b, int B, int T, int vocab, uint64_t seed)
{
    size_t ntok = (size_t)B * (size_t)T;
    int32_t *ids = malloc(ntok * sizeof *ids), *tgt = malloc(ntok * sizeof *tgt);
    if (!ids || !tgt) {
        free(ids);
        free(tgt);
        return -1;
    }
    uint64_t x = seed;
    for (size_t i = 0; i < ntok; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tgt[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
    }
    pt_batch_init(b);
    b->batch = B;
    b->seq = T;
    b->input_ids = ids;
    b->targets = tgt;
    return 0;
}

static inline void bench_batch_free(pt_batch *b)
{
    free((void *)b->input_ids);
    free((void *)b->targets);
}

#endif
