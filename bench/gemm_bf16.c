/* bench_gemm_bf16 [THREADS [OP]]: our BF16 GEMM and pt__gemm_mixed (BF16
 * weights, FP32 activations; through oneDNN when that is its backend)
 * against BLIS FP32 (pt__sgemm) and, when the build has oneDNN, oneDNN's BF16
 * matmul called directly, at the shapes of a SmolLM2-135M training step: GFLOP/s, median of
 * 5, at THREADS threads (default 2).  The CPU, the kernel path and oneDNN's
 * implementation name are printed; compare only figures of the same run. */
#include "bench_util.h"

#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "posttrain/posttrain.h"

#include <omp.h>

#ifdef PT_BENCH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#define REPS 5

typedef struct shape {
    bool ta, tb;
    size_t m, n, k;
    const char *what;
} shape;

typedef struct operands {
    float *a, *b, *c;
    pt_bf16 *ab, *bb;
} operands;

static void fill(float *x, size_t n, unsigned seed)
{
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((int)(s >> 9) - (1 << 22)) / (float)(1 << 22);
    }
}

static int make_operands(operands *o, const shape *s)
{
    size_t na = s->m * s->k, nb = s->k * s->n;
    o->a = malloc(na * sizeof *o->a);
    o->b = malloc(nb * sizeof *o->b);
    o->c = malloc(s->m * s->n * sizeof *o->c);
    o->ab = malloc(na * sizeof *o->ab);
    o->bb = malloc(nb * sizeof *o->bb);
    if (!o->a || !o->b || !o->c || !o->ab || !o->bb)
        return -1;
    fill(o->a, na, 1);
    fill(o->b, nb, 2);
    pt__f32_to_bf16_n(o->ab, o->a, na);
    pt__f32_to_bf16_n(o->bb, o->b, nb);
    return 0;
}

static void free_operands(operands *o)
{
    free(o->a); free(o->b); free(o->c); free(o->ab); free(o->bb);
}

enum { RUN_BLIS, RUN_OURS, RUN_MIXED, RUN_DPBF16 };

static void run_once(int which, int nt, const shape *s, const operands *o)
{
    size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (which == RUN_BLIS)
        pt__sgemm_nt(nt, s->ta, s->tb, s->m, s->n, s->k, 1.0f, o->a, lda, o->b, ldb, 0.0f, o->c,
                    s->n);
    else if (which == RUN_OURS)
        pt__gemm_bf16_nt(pt__gemm_threads(s->m, s->n, s->k), PT_BF16_KERNEL_AUTO, s->ta, s->tb,
                        s->m, s->n, s->k, 1.0f, o->a, false, lda, o->bb, true, ldb, 0.0f, o->c,
                        s->n);
    else if (which == RUN_MIXED)
        pt__gemm_mixed(s->ta, s->tb, s->m, s->n, s->k, 1.0f, o->a, false, lda, o->bb, true, ldb,
                      0.0f, o->c, s->n);
    else
        pt__gemm_bf16_nt(pt__gemm_threads(s->m, s->n, s->k), PT_BF16_KERNEL_DPBF16, s->ta, s->tb,
                        s->m, s->n, s->k, 1.0f, o->a, false, lda, o->bb, true, ldb, 0.0f, o->c,
                        s->n);
}

static double gflops(const shape *s, double sec)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / sec / 1e9;
}

#ifdef PT_BENCH_DNNL
static dnnl_engine_t dnnl_eng;
static dnnl_stream_t dnnl_str;
static char dnnl_impl[128] = "";

typedef struct dnnl_job {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t mem[3];
    dnnl_exec_arg_t args[3];
} dnnl_job;

/* oneDNN's matmul of the same product, both operands BF16, FP32 output;
 * false when it cannot run. */
static bool dnnl_prepare(dnnl_job *j, const shape *s, const operands *o)
{
    dnnl_memory_desc_t md_a, md_b, md_c;
    dnnl_dims_t da = { (dnnl_dim_t)s->m, (dnnl_dim_t)s->k },
                db = { (dnnl_dim_t)s->k, (dnnl_dim_t)s->n };
    dnnl_dims_t dc = { (dnnl_dim_t)s->m, (dnnl_dim_t)s->n };
    if (dnnl_memory_desc_init_by_tag(&md_a, 2, da, dnnl_bf16, s->ta ? dnnl_ba : dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&md_b, 2, db, dnnl_bf16, s->tb ? dnnl_ba : dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&md_c, 2, dc, dnnl_f32, dnnl_ab))
        return false;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &md_a, &md_b, NULL, &md_c) ||
        dnnl_primitive_desc_create(&j->pd, &desc, NULL, dnnl_eng, NULL))
        return false;
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(j->pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl)
        snprintf(dnnl_impl, sizeof dnnl_impl, "%s", impl);
    if (dnnl_primitive_create(&j->prim, j->pd)) {
        dnnl_primitive_desc_destroy(j->pd);
        return false;
    }
    dnnl_memory_create(&j->mem[0], &md_a, dnnl_eng, o->ab);
    dnnl_memory_create(&j->mem[1], &md_b, dnnl_eng, o->bb);
    dnnl_memory_create(&j->mem[2], &md_c, dnnl_eng, o->c);
    j->args[0] = (dnnl_exec_arg_t){ DNNL_ARG_SRC, j->mem[0] };
    j->args[1] = (dnnl_exec_arg_t){ DNNL_ARG_WEIGHTS, j->mem[1] };
    j->args[2] = (dnnl_exec_arg_t){ DNNL_ARG_DST, j->mem[2] };
    return true;
}

static void dnnl_run(dnnl_job *j)
{
    dnnl_primitive_execute(j->prim, dnnl_str, 3, j->args);
    dnnl_stream_wait(dnnl_str);
}

static void dnnl_release(dnnl_job *j)
{
    for (int i = 0; i < 3; i++)
        dnnl_memory_destroy(j->mem[i]);
    dnnl_primitive_destroy(j->prim);
    dnnl_primitive_desc_destroy(j->pd);
}
#endif

enum { NMETHODS = 5 }; /* BLIS, ours, pt__gemm_mixed, vdpbf16ps, oneDNN */

/* GFLOP/s of each method (0: not run), the methods taking turns in each of
 * the REPS rounds so that a change in the machine's load hits them all. */
static void time_all(int nt, const shape *s, const operands *o, bool dp, bool dnnl,
                     double g[NMETHODS])
{
    double t[NMETHODS][REPS];
    bool run[NMETHODS] = { true, true, true, dp, dnnl };
#ifdef PT_BENCH_DNNL
    dnnl_job job;
    if (run[4] && !dnnl_prepare(&job, s, o))
        run[4] = false;
#endif
    for (int r = -1; r < REPS; r++) /* round -1: warm-up */
        for (int w = 0; w < NMETHODS; w++) {
            if (!run[w])
                continue;
            double t0 = bench_now();
#ifdef PT_BENCH_DNNL
            if (w == 4)
                dnnl_run(&job);
            else
#endif
                run_once(w, nt, s, o);
            if (r >= 0)
                t[w][r] = bench_now() - t0;
        }
#ifdef PT_BENCH_DNNL
    if (run[4])
        dnnl_release(&job);
#endif
    for (int w = 0; w < NMETHODS; w++)
        g[w] = run[w] ? gflops(s, bench_median(t[w], REPS)) : 0.0;
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    if (nt < 1 || pt_set_num_threads(nt) != PT_OK) {
        fprintf(stderr, "usage: bench_gemm_bf16 [THREADS [OP]] (OP: only the rows whose name "
                        "contains it, e.g. decode)\n");
        return 2;
    }
    omp_set_num_threads(nt); /* oneDNN's OpenMP runtime */
    static const shape shapes[] = {
        { false, false, 1024, 1536, 576, "NN" },
        { false, false, 1024, 576, 1536, "NN" },
        { false, false, 1024, 576, 576, "NN" },
        { false, false, 1024, 49152, 576, "NN lm head" },
        { false, false, 16, 1536, 576, "NN decode" },
        { false, true, 1024, 1536, 576, "NT fwd x W^T" },
        { false, true, 1024, 49152, 576, "NT lm head" },
        { true, false, 576, 1536, 1024, "TN dW = X^T dY" },
    };
    printf("cpu: %s\nload average (1 min): %.2f\n", pt_cpu_info(), bench_loadavg());
    printf("fp32: %s\n", pt_blas_info());
    if (pt__cpu_bf16_compute())
        printf("bf16 path: own 12x32 micro-kernel, %s (chosen by timing vdpbf16ps against FP32 "
               "FMAs under DAZ/FTZ: the same bits)\n", pt__bf16_kernel_name(pt__bf16_kernel_auto()));
    else
        printf("bf16 path: none on this path: BF16 widened to FP32, BLIS\n");
    printf("bf16 products: %s\n", pt__bf16_gemm_backend());
    bool dp = pt__bf16_kernel_available(PT_BF16_KERNEL_DPBF16);
#ifdef PT_BENCH_DNNL
    bool have_dnnl = dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) == dnnl_success &&
        dnnl_stream_create(&dnnl_str, dnnl_eng, dnnl_stream_default_flags) == dnnl_success;
#else
    bool have_dnnl = false;
#endif
    printf("GFLOP/s at %d threads, median of %d rounds (methods in turns); ours: our BF16 GEMM, A "
           "FP32 (rounded), B BF16; mixed: pt__gemm_mixed on the same operands (its backend "
           "above); vdpbf16ps: our kernel forced to the instruction; oneDNN: direct, both BF16\n",
           nt, REPS);
    printf("%-16s %6s %6s %6s %9s %9s %9s %9s %9s %9s\n", "op", "M", "N", "K", "BLIS fp32",
           "ours", "mixed", "vdpbf16ps", "oneDNN", "mixed/BLIS");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        if (argc > 2 && !strstr(s->what, argv[2]))
            continue;
        operands o;
        if (make_operands(&o, s) != 0) {
            free_operands(&o);
            printf("%-16s out of memory\n", s->what);
            continue;
        }
        double g[NMETHODS];
        time_all(nt, s, &o, dp, have_dnnl, g);
        printf("%-16s %6zu %6zu %6zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.2f", s->what, s->m, s->n,
               s->k, g[0], g[1], g[2], g[3], g[4], g[2] / g[0]);
#ifdef PT_BENCH_DNNL
        printf("  %s", g[4] > 0 ? dnnl_impl : "");
#endif
        printf("\n");
        fflush(stdout);
        free_operands(&o);
    }
    printf("load average (1 min): %.2f\n", bench_loadavg());
#ifdef PT_BENCH_DNNL
    if (!have_dnnl)
        printf("oneDNN: engine failed\n");
#else
    printf("oneDNN: not built in (no libdnnl found)\n");
#endif
    return 0;
}
