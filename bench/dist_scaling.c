/* bench_dist_scaling: the data-parallel figures of docs/scaling.md, measured
 * with the library's own communication layer under mpirun.
 *
 *   mpirun -np P --bind-to none bench_dist_scaling allreduce [--sizes LIST] [--buckets LIST] [--reps N]
 *   mpirun -np P --bind-to none bench_dist_scaling sft [--batch B] [--seq T] [--steps N] [--threads N]
 *                                                      [--bucket MiB] [--grad-buckets LIST] [--checkpoint DIR]
 *                                                      [--ckpt-reps N] [--config smollm2-135m|tiny]
 *
 * (bench/dist_scaling.sh runs both at 1..4 ranks with the right mpirun
 * switches and prints each command before its output.)
 *
 * allreduce: for every message size (floats; default 1K .. 16M and the
 * 134,515,008 of a SmolLM2-135M gradient) and bucket size (default 1, 4,
 * 16, 64 MiB), the median over --reps of the slowest rank's time of
 *   - ours:  pt__comm_allreduce_f32 (the ordered bucketed all-reduce the SFT
 *            and GRPO steps use: a pairwise reduce-scatter summed in rank
 *            order, then an all-gather, per bucket);
 *   - mpi-b: MPI_Allreduce(MPI_IN_PLACE, MPI_SUM) over the same buckets;
 * and per size once
 *   - mpi-1: one MPI_Allreduce of the whole buffer.
 * Bandwidths: algbw = bytes / t, busbw = algbw * 2 (P-1) / P (the bytes
 * each rank must send and receive, as nccl-tests counts them).  Then the
 * alpha-beta fit of each method at this rank count:
 *   t = alpha * buckets(S) + beta * S   (bucketed: alpha per bucket)
 *   t = alpha + beta * S                (mpi-1)
 * by least squares on the relative error (weights 1/t^2).
 *
 * sft: the data-parallel SFT step of a SmolLM2-135M-shaped model
 * (pt_model_create, seed 1 on every rank) over a fixed global batch
 * (default 4 x 256), each rank taking its rows with pt_dist_shard; AdamW
 * as bench_sft_step.  Per step: wall time (slowest rank), comm_seconds
 * (pt_sft_stats; per rank: transfers and waiting for the slowest rank),
 * compute = wall - comm; tokens/s; peak RSS per rank.  Then the gradient
 * all-reduce alone (the internal pt__dist_allreduce_grads the step calls,
 * every rank idle otherwise), and with --grad-buckets LIST (MiB) the same
 * with other bucket sizes.  --checkpoint DIR: rank 0 times
 * pt_checkpoint_save of the model and its AdamW state into DIR/ckpt-K
 * (removed afterwards) and pt_checkpoint_load of it.
 *
 * Every figure line starts with "figure:" and carries P, the load average
 * and the command; the last line of each mode is "result: key=value ...". */
#include "bench_util.h"

#include "dist/dist_internal.h"
#include "train/dist_train.h"

#include <mpi.h>

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <sys/stat.h>

static int g_rank, g_size;
static char g_cmd[2048];

#define MAXV 32

/* "a,b,c" of numbers with an optional K/M suffix (x1024, x1048576). */
static int parse_list(double *out, int cap, const char *s)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        double v = strtod(s, &end);
        if (end == s)
            return -1;
        if (*end == 'K' || *end == 'k')
            v *= 1024, end++;
        else if (*end == 'M' || *end == 'm')
            v *= 1048576, end++;
        out[n++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return n;
}

/* The slowest rank's value (every rank gets it). */
static double max_over_ranks(double v)
{
    double m = v;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static double min_over_ranks(double v)
{
    double m = v;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    return m;
}

static int cpus_allowed(void)
{
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof s, &s))
        return -1;
    return CPU_COUNT(&s);
}

/* Rank 0 prints; a common header for both modes. */
static void header(const char *mode, int threads)
{
    int cpus = cpus_allowed(), min_cpus = (int)min_over_ranks(cpus);
    if (g_rank)
        return;
    printf("argv: %s (mpirun's own switches are not visible here; bench/dist_scaling.sh prints them)\n", g_cmd);
    printf("mode %s: %d rank(s), %ld online CPU(s), CPUs allowed per rank (min) %d, threads per rank %d, "
           "load average %.2f\n", mode, g_size, sysconf(_SC_NPROCESSORS_ONLN), min_cpus, threads, bench_loadavg());
    char model[256] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        fclose(f);
    }
    printf("cpu: %s; matrix products: %s; kernels %s\n", model, pt_blas_info(), pt_cpu_path());
    if (threads > min_cpus)
        printf("warning: %d threads per rank but a rank may run on only %d CPU(s): mpirun binds each rank to a "
               "core when there are at most 2 ranks; pass --bind-to none\n", threads, min_cpus);
    if ((long)g_size * threads > sysconf(_SC_NPROCESSORS_ONLN))
        printf("note: %d ranks x %d threads on %ld CPUs: oversubscribed, the ranks share the cores\n", g_size,
               threads, sysconf(_SC_NPROCESSORS_ONLN));
}

/* ---- allreduce ---------------------------------------------------------------- */

enum { OURS, MPI_B, MPI_1, METHODS };
static const char *const k_method[METHODS] = { "ours", "mpi-b", "mpi-1" };

static void fill(float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)((i + (size_t)g_rank) % 5) * 0.25f;
}

static int mpi_bucketed(float *buf, size_t n, size_t per_bucket)
{
    for (size_t off = 0; off < n; off += per_bucket) {
        size_t k = n - off < per_bucket ? n - off : per_bucket;
        if (MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            return -1;
    }
    return 0;
}

/* Median over reps of the slowest rank's seconds for one method. */
static int time_method(double *out, int method, pt_dist *d, float *buf, size_t n, size_t per_bucket, int reps)
{
    double t[256];
    if (reps > 256)
        reps = 256;
    for (int r = -1; r < reps; r++) { /* one warm-up */
        fill(buf, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        int st = 0;
        if (method == OURS)
            st = pt__comm_allreduce_f32(d, buf, n, "bench all-reduce");
        else if (method == MPI_B)
            st = mpi_bucketed(buf, n, per_bucket);
        else
            st = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS;
        double dt = bench_now() - t0;
        if (st) {
            fprintf(stderr, "rank %d: %s all-reduce failed: %s\n", g_rank, k_method[method], pt_last_error());
            return 1;
        }
        dt = max_over_ranks(dt);
        if (r >= 0)
            t[r] = dt;
    }
    /* every rank checks one element: 0.25 * sum over ranks of ((i + r) % 5) */
    size_t i = n / 2;
    double want = 0;
    for (int q = 0; q < g_size; q++)
        want += (double)((i + (size_t)q) % 5) * 0.25;
    if (buf[i] != (float)want) {
        fprintf(stderr, "rank %d: %s all-reduce gave %g at %zu, want %g\n", g_rank, k_method[method], buf[i], i,
                want);
        return 1;
    }
    *out = bench_median(t, reps);
    return 0;
}

/* Weighted least squares t = a * x + b * S (x = buckets, or 1), weights
 * 1/t^2; returns the relative rms error. */
static double fit(double *a, double *b, const double *x, const double *s, const double *t, int n)
{
    double sxx = 0, sxs = 0, sss = 0, sxt = 0, sst = 0;
    for (int i = 0; i < n; i++) {
        double w = 1.0 / (t[i] * t[i]);
        sxx += w * x[i] * x[i];
        sxs += w * x[i] * s[i];
        sss += w * s[i] * s[i];
        sxt += w * x[i] * t[i];
        sst += w * s[i] * t[i];
    }
    double det = sxx * sss - sxs * sxs;
    *a = (sxt * sss - sst * sxs) / det;
    *b = (sxx * sst - sxs * sxt) / det;
    double e = 0;
    for (int i = 0; i < n; i++) {
        double r = (*a * x[i] + *b * s[i] - t[i]) / t[i];
        e += r * r;
    }
    return sqrt(e / n);
}

static int run_allreduce(int argc, char **argv)
{
    double sizes[MAXV], buckets[MAXV];
    int ns = parse_list(sizes, MAXV, "1K,16K,256K,1M,4M,16M,134515008");
    int nb = parse_list(buckets, MAXV, "1,4,16,64");
    int reps = 5;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
            ns = parse_list(sizes, MAXV, argv[++i]);
        else if (!strcmp(argv[i], "--buckets") && i + 1 < argc)
            nb = parse_list(buckets, MAXV, argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            if (!g_rank)
                fprintf(stderr, "allreduce: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (ns < 1 || nb < 1 || reps < 1) {
        if (!g_rank)
            fprintf(stderr, "allreduce: bad --sizes, --buckets or --reps\n");
        return 2;
    }
    header("allreduce", 1);
    if (g_size == 1) { /* pt__comm_allreduce_f32 returns at once: nothing to measure */
        if (!g_rank)
            printf("result: mode=allreduce np=1 (one rank: nothing is exchanged; run at 2 or more ranks)\n");
        return 0;
    }
    size_t maxn = 0;
    for (int i = 0; i < ns; i++)
        if ((size_t)sizes[i] > maxn)
            maxn = (size_t)sizes[i];
    float *buf = malloc(maxn * sizeof *buf);
    if (!buf)
        return 1;
    fill(buf, maxn); /* touch every page once */
    pt_dist *d[MAXV];
    MPI_Comm world = MPI_COMM_WORLD;
    for (int k = 0; k < nb; k++) {
        pt_dist_options o;
        pt_dist_options_init(&o);
        o.backend = PT_DIST_MPI;
        o.timeout_s = 600;
        o.bucket_bytes = (size_t)(buckets[k] * 1048576.0);
        CHECK(pt_dist_create(&d[k], &world, &o));
    }
    /* t[method][bucket][size] */
    static double t[METHODS][MAXV][MAXV];
    const double P = g_size;
    for (int i = 0; i < ns; i++) {
        size_t n = (size_t)sizes[i];
        double bytes = (double)n * sizeof(float);
        /* small messages: more repetitions, for a stable median */
        int r = bytes <= 1048576 ? reps * 20 : bytes <= 16 * 1048576.0 ? reps * 4 : reps;
        if (time_method(&t[MPI_1][0][i], MPI_1, NULL, buf, n, n, r))
            return 1;
        for (int k = 0; k < nb; k++) {
            size_t per = d[k]->opts.bucket_bytes / sizeof(float);
            if (time_method(&t[OURS][k][i], OURS, d[k], buf, n, per, r) ||
                time_method(&t[MPI_B][k][i], MPI_B, NULL, buf, n, per, r))
                return 1;
            if (g_rank)
                continue;
            double to = t[OURS][k][i], tb = t[MPI_B][k][i], t1 = t[MPI_1][0][i];
            double bus = P > 1 ? 2 * (P - 1) / P : 0;
            printf("figure: allreduce np=%d floats=%zu bytes=%.0f bucket_mib=%g reps=%d ours_s=%.6f "
                   "ours_algbw_gbs=%.3f ours_busbw_gbs=%.3f mpib_s=%.6f mpi1_s=%.6f ours/mpib=%.2f ours/mpi1=%.2f "
                   "load=%.2f\n", g_size, n, bytes, buckets[k], r, to, bytes / to / 1e9, bus * bytes / to / 1e9, tb,
                   t1, to / tb, to / t1, bench_loadavg());
        }
    }
    if (!g_rank) {
        printf("alpha-beta fits, np=%d (t = alpha * buckets + beta * bytes; mpi-1: t = alpha + beta * bytes):\n",
               g_size);
        double x[MAXV], s[MAXV];
        for (int m = 0; m < METHODS; m++)
            for (int k = 0; k < (m == MPI_1 ? 1 : nb); k++) {
                double per = buckets[k] * 1048576.0;
                for (int i = 0; i < ns; i++) {
                    s[i] = sizes[i] * sizeof(float);
                    x[i] = m == MPI_1 ? 1.0 : ceil(s[i] / per);
                }
                double a, b, e = fit(&a, &b, x, s, t[m][k], ns);
                char bk[32];
                snprintf(bk, sizeof bk, m == MPI_1 ? "-" : "%g", buckets[k]);
                printf("figure: fit np=%d method=%s bucket_mib=%s alpha_us=%.1f beta_ns_per_byte=%.4f "
                       "bw_gbs=%.2f busbw_gbs=%.2f rel_rms=%.2f load=%.2f\n", g_size, k_method[m], bk, a * 1e6,
                       b * 1e9, 1 / b / 1e9, 2 * (P - 1) / P / b / 1e9, e, bench_loadavg());
            }
    }
    /* the model's gradient: the largest size, summary line */
    if (!g_rank) {
        printf("result: mode=allreduce np=%d floats=%zu", g_size, maxn);
        int big = 0;
        for (int i = 0; i < ns; i++)
            if ((size_t)sizes[i] == maxn)
                big = i;
        for (int k = 0; k < nb; k++)
            printf(" ours_s@%gMiB=%.4f mpib_s@%gMiB=%.4f", buckets[k], t[OURS][k][big], buckets[k],
                   t[MPI_B][k][big]);
        printf(" mpi1_s=%.4f peak_rss_mb=%.0f load=%.2f\n", t[MPI_1][0][big], bench_peak_rss_mb(), bench_loadavg());
    }
    for (int k = 0; k < nb; k++)
        pt_dist_free(d[k]);
    free(buf);
    return 0;
}

/* ---- sft ------------------------------------------------------------------------ */

static double dir_bytes(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return NAN;
    double total = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(dp))) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode))
            total += (double)st.st_size;
    }
    closedir(dp);
    return total;
}

static void remove_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(dp)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(dp);
    rmdir(dir);
}

/* Rank 0 saves (and loads) reps checkpoints; the others wait. */
static int checkpoint_figures(pt_dist *d, pt_model *m, pt_optimizer *opt, const char *root, int reps)
{
    double ts[16], tl[16], bytes = 0;
    int st = PT_OK;
    if (reps > 16)
        reps = 16;
    if (!g_rank) {
        mkdir(root, 0755);
        for (int r = 0; r < reps && !st; r++) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/ckpt-%d-%d", root, (int)getpid(), r);
            double t0 = bench_now();
            st = pt_checkpoint_save(m, opt, "{\"bench\":true}", dir);
            ts[r] = bench_now() - t0;
            if (!st) {
                bytes = dir_bytes(dir);
                t0 = bench_now();
                char *host = NULL;
                st = pt_checkpoint_load(&host, m, opt, dir);
                tl[r] = bench_now() - t0;
                pt_free(host);
            }
            remove_dir(dir);
        }
        if (st)
            fprintf(stderr, "checkpoint: %s: %s\n", pt_status_name(st), pt_last_error());
    }
    int first = -1;
    CHECK(pt_dist_agree(&first, d, st));
    if (!g_rank) {
        double ms = bench_median(ts, reps), ml = bench_median(tl, reps);
        printf("figure: checkpoint np=%d dir=%s reps=%d bytes=%.0f save_s=%.2f save_gbs=%.2f load_s=%.2f "
               "load_gbs=%.2f (save: files fsynced, MANIFEST with SHA-256; load: checksums verified) load=%.2f\n",
               g_size, root, reps, bytes, ms, bytes / ms / 1e9, ml, bytes / ml / 1e9, bench_loadavg());
    }
    return 0;
}

/* Median over 3 runs (after one warm-up) of the slowest rank's time of the
 * gradient all-reduce the step calls, pt__dist_allreduce_grads. */
static int time_grads(double *out, pt_dist *d, pt_optimizer *opt)
{
    double ar[3];
    for (int r = -1; r < 3; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        CHECK(pt__dist_allreduce_grads(d, opt));
        double dt = max_over_ranks(bench_now() - t0);
        if (r >= 0)
            ar[r] = dt;
    }
    *out = bench_median(ar, 3);
    return 0;
}

static int run_sft(int argc, char **argv)
{
    int G = 4, T = 256, steps = 3, threads = 0, ckpt_reps = 3;
    double bucket_mib = 4;
    const char *ckpt = NULL, *config = "smollm2-135m";
    double gbuckets[MAXV];
    int ngb = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            G = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc)
            T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bucket") && i + 1 < argc)
            bucket_mib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc)
            ckpt = argv[++i];
        else if (!strcmp(argv[i], "--ckpt-reps") && i + 1 < argc)
            ckpt_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "--grad-buckets") && i + 1 < argc)
            ngb = parse_list(gbuckets, MAXV, argv[++i]);
        else {
            if (!g_rank)
                fprintf(stderr, "sft: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0) /* the cores shared out, at least one thread per rank */
        threads = cpus / g_size > 1 ? (int)(cpus / g_size) : 1;
    if (G < g_size || T < 2 || steps < 1 || steps > 64 || ckpt_reps < 1 || ngb < 0 || pt_set_num_threads(threads)) {
        if (!g_rank)
            fprintf(stderr, "sft: bad option value (the global batch must have a row per rank)\n");
        return 2;
    }
    header("sft", threads);
    pt_dist_options o;
    pt_dist_options_init(&o);
    o.backend = PT_DIST_MPI;
    o.timeout_s = 600;
    o.bucket_bytes = (size_t)(bucket_mib * 1048576.0);
    MPI_Comm world = MPI_COMM_WORLD;
    pt_dist *d;
    CHECK(pt_dist_create(&d, &world, &o));
    int64_t begin, count;
    CHECK(pt_dist_shard(&begin, &count, d, G));

    pt_model_config c;
    if (bench_model_config(&c, config, T)) {
        fprintf(stderr, "sft: unknown --config %s (smollm2-135m or tiny)\n", config);
        return 2;
    }
    pt_model *m;
    pt_context *ctx;
    pt_optimizer *opt;
    CHECK(pt_model_create(&m, &c, 1));
    uint64_t nparams;
    nparams = pt_model_param_count(m);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 1e-4;
    oo.weight_decay = 0.01;
    oo.max_grad_norm = 0;
    CHECK(pt_optimizer_create(&opt, m, &oo));
    CHECK(pt_context_create(&ctx, m, (int)count, T));
    CHECK(pt_optimizer_set_dist(opt, d));
    pt_batch global, b;
    if (bench_random_batch(&global, G, T, c.vocab_size, 12345))
        return 1;
    pt_batch_init(&b);
    b.batch = (int)count;
    b.seq = T;
    b.input_ids = global.input_ids + begin * T;
    b.targets = global.targets + begin * T;

    double wall[64], comm[64], comm_min[64], comm_max[64], comp[64], comp_max[64];
    double loss = NAN;
    for (int s = -1; s < steps; s++) { /* one warm-up step */
        pt_sft_stats st;
        pt_sft_stats_init(&st);
        double t0 = bench_now();
        if (pt_sft_step(&st, opt, ctx, &b, NULL, 1)) {
            fprintf(stderr, "rank %d: sft step: %s\n", g_rank, pt_last_error());
            return 1;
        }
        double dt = bench_now() - t0;
        loss = st.loss;
        double w = max_over_ranks(dt), cm = st.comm_seconds;
        double cmin = min_over_ranks(cm), cmax = max_over_ranks(cm), cp = max_over_ranks(dt - cm);
        if (s < 0)
            continue;
        wall[s] = w;
        comm[s] = cm; /* rank 0's */
        comm_min[s] = cmin;
        comm_max[s] = cmax;
        comp[s] = dt - cm;
        comp_max[s] = cp;
    }
    double w = bench_median(wall, steps), c0 = bench_median(comm, steps), cmin = bench_median(comm_min, steps),
           cmax = bench_median(comm_max, steps), cp0 = bench_median(comp, steps),
           cpmax = bench_median(comp_max, steps);
    double rss = bench_peak_rss_mb(), rss_max = max_over_ranks(rss), rss_min = min_over_ranks(rss);

    /* the gradient all-reduce alone, every rank idle otherwise */
    double arm;
    if (time_grads(&arm, d, opt))
        return 1;
    if (!g_rank) {
        double tok = (double)G * T;
        printf("figure: sft np=%d threads=%d global_batch=%dx%d rows_rank0=%lld bucket_mib=%g params=%llu steps=%d "
               "step_s=%.3f tokens_per_s=%.1f compute_s_rank0=%.3f compute_s_max=%.3f comm_s_rank0=%.3f "
               "comm_s_min=%.3f comm_s_max=%.3f comm_frac=%.3f loss=%.4f peak_rss_mb_max=%.0f peak_rss_mb_min=%.0f "
               "load=%.2f\n", g_size, threads, G, T, (long long)count, bucket_mib, (unsigned long long)nparams, steps,
               w, tok / w, cp0, cpmax, c0, cmin, cmax, c0 / w, loss, rss_max, rss_min, bench_loadavg());
        printf("figure: grad_allreduce np=%d bucket_mib=%g bytes=%.0f isolated_s=%.4f algbw_gbs=%.2f "
               "(pt__dist_allreduce_grads alone; in the step comm_s_min=%.3f) load=%.2f\n", g_size, bucket_mib,
               (double)nparams * 4, arm, (double)nparams * 4 / arm / 1e9, cmin, bench_loadavg());
    }
    /* --grad-buckets: the same all-reduce with other bucket sizes */
    for (int k = 0; k < ngb && g_size > 1; k++) {
        pt_dist *d2;
        o.bucket_bytes = (size_t)(gbuckets[k] * 1048576.0);
        CHECK(pt_dist_create(&d2, &world, &o));
        CHECK(pt_optimizer_set_dist(opt, d2));
        double t2;
        if (time_grads(&t2, d2, opt))
            return 1;
        CHECK(pt_optimizer_set_dist(opt, d));
        pt_dist_free(d2);
        if (!g_rank)
            printf("figure: grad_allreduce np=%d bucket_mib=%g bytes=%.0f isolated_s=%.4f algbw_gbs=%.2f "
                   "(pt__dist_allreduce_grads alone, --grad-buckets) load=%.2f\n", g_size, gbuckets[k],
                   (double)nparams * 4, t2, (double)nparams * 4 / t2 / 1e9, bench_loadavg());
    }
    if (ckpt && checkpoint_figures(d, m, opt, ckpt, ckpt_reps))
        return 1;
    if (!g_rank)
        printf("result: mode=sft np=%d threads=%d batch=%d seq=%d step_s=%.3f tokens_per_s=%.1f compute_s=%.3f "
               "comm_s=%.3f grad_allreduce_s=%.4f peak_rss_mb=%.0f load=%.2f\n", g_size, threads, G, T, w,
               (double)G * T / w, cp0, c0, arm, rss_max, bench_loadavg());
    bench_batch_free(&global);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_model_free(m);
    pt_dist_free(d);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int provided;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    size_t len = (size_t)snprintf(g_cmd, sizeof g_cmd, "[%d rank(s)]", g_size);
    for (int i = 0; i < argc && len < sizeof g_cmd; i++)
        len += (size_t)snprintf(g_cmd + len, sizeof g_cmd - len, " %s", argv[i]);
    int rc = 2;
    if (argc >= 2 && !strcmp(argv[1], "allreduce"))
        rc = run_allreduce(argc - 2, argv + 2);
    else if (argc >= 2 && !strcmp(argv[1], "sft"))
        rc = run_sft(argc - 2, argv + 2);
    else if (!g_rank)
        fprintf(stderr, "usage: mpirun -np P --bind-to none bench_dist_scaling allreduce|sft [options] "
                        "(see the comment at the top of bench/dist_scaling.c)\n");
    if (rc) {
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    MPI_Finalize();
    return 0;
}
