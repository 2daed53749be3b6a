/* oneDNN's matmul as the BF16-product backend of pt__gemm_mixed (kernels/
 * bf16.h), when the library is built with oneDNN (PT_HAVE_DNNL) and its
 * matmul has a non-reference implementation on this CPU (on Sapphire
 * Rapids: brg:avx512_core_amx_bf16).  The choice is fixed per process and
 * per shape (build, implementation, PT_BF16_GEMM=own|onednn), never timed,
 * since the two backends differ in the last bits.
 *
 * A product is src BF16 [m, k] x weights BF16 [k, n] -> dst F32 [m, n]
 * with strided memory descriptors for the transposes and leading
 * dimensions (no transposed copies); FP32 operands are rounded to BF16
 * first (pt__f32_to_bf16_n: RNE, as our packing).  alpha is the output
 * scale; beta != 0 is a sum post-op (C scaled by beta first when beta != 1).
 *
 * Threads: Debian's libdnnl uses OpenMP and sizes its work with
 * omp_get_max_threads(), at primitive creation and at execution.  That ICV
 * belongs to the calling thread (omp_set_num_threads changes it for the
 * caller only), so it is set to pt__gemm_threads() around both and restored;
 * the thread count is part of the primitive cache's key.  Primitives use a
 * user scratchpad allocated per call, and each call has its own stream, so
 * calls from several host threads may run at once. */
#include "kernels/bf16.h"

#include "core/core.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#define CACHE_SIZE 64

typedef struct prim_key {
    size_t m, n, k, lda, ldb, ldc;
    float alpha;
    int nt;
    bool ta, tb, sum;
} prim_key;

typedef struct prim_entry {
    prim_key key;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim; /* NULL: a reference implementation (use ours) */
    size_t scratch;        /* bytes of user scratchpad */
    unsigned long used;    /* LRU clock */
    int refs;              /* calls running it now (never evicted then) */
    bool valid;
} prim_entry;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static bool usable;     /* built, engine made, probe not "ref", not forced off */
static char impl_name[96] = "";
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static prim_entry cache[CACHE_SIZE];
static unsigned long cache_clock;
static int warned;

static bool is_reference(const char *impl)
{
    return !impl || strstr(impl, "ref") != NULL;
}

/* Descriptor, attributes and (unless the implementation is a reference
 * one) primitive for key; false on any oneDNN failure. */
static bool create_prim(const prim_key *q, prim_entry *e)
{
    dnnl_memory_desc_t ma, mb, mc;
    dnnl_dims_t da = { (dnnl_dim_t)q->m, (dnnl_dim_t)q->k }, db = { (dnnl_dim_t)q->k, (dnnl_dim_t)q->n },
                dc = { (dnnl_dim_t)q->m, (dnnl_dim_t)q->n };
    dnnl_dims_t sa = { q->ta ? 1 : (dnnl_dim_t)q->lda, q->ta ? (dnnl_dim_t)q->lda : 1 };
    dnnl_dims_t sb = { q->tb ? 1 : (dnnl_dim_t)q->ldb, q->tb ? (dnnl_dim_t)q->ldb : 1 };
    dnnl_dims_t sc = { (dnnl_dim_t)q->ldc, 1 };
    if (dnnl_memory_desc_init_by_strides(&ma, 2, da, dnnl_bf16, sa) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&mb, 2, db, dnnl_bf16, sb) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&mc, 2, dc, dnnl_f32, sc) != dnnl_success)
        return false;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &ma, &mb, NULL, &mc) != dnnl_success)
        return false;
    dnnl_primitive_attr_t attr;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return false;
    dnnl_post_ops_t po = NULL;
    bool ok = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && q->alpha != 1.0f)
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &q->alpha) == dnnl_success;
    if (ok && q->sum)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po)
        dnnl_post_ops_destroy(po);
    e->pd = NULL;
    e->prim = NULL;
    if (ok)
        ok = dnnl_primitive_desc_create(&e->pd, &desc, attr, engine, NULL) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    if (!ok)
        return false;
    const char *impl = NULL;
    dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, &impl);
    if (is_reference(impl))
        return true; /* recorded: this shape uses our kernel */
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    e->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
    if (dnnl_primitive_create(&e->prim, e->pd) != dnnl_success) {
        dnnl_primitive_desc_destroy(e->pd);
        e->pd = NULL;
        return false;
    }
    return true;
}

static void destroy_prim(prim_entry *e)
{
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    if (e->pd)
        dnnl_primitive_desc_destroy(e->pd);
    e->prim = NULL;
    e->pd = NULL;
}

static void backend_init(void)
{
    const char *env = getenv("PT_BF16_GEMM");
    if (env && strcmp(env, "own") == 0)
        return;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        return;
    /* the probe: a training-like shape, one thread setting as any call */
    prim_key q = { .m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64, .ldc = 64, .alpha = 1.0f,
                   .nt = 1 };
    prim_entry e = { 0 };
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    bool ok = create_prim(&q, &e);
    omp_set_num_threads(saved);
    if (ok && e.prim) {
        const char *impl = NULL;
        dnnl_primitive_desc_query(e.pd, dnnl_query_impl_info_str, 0, &impl);
        snprintf(impl_name, sizeof impl_name, "%s", impl ? impl : "?");
        usable = true;
    }
    destroy_prim(&e);
}

static bool keys_equal(const prim_key *a, const prim_key *b)
{
    return a->m == b->m && a->n == b->n && a->k == b->k && a->lda == b->lda && a->ldb == b->ldb &&
           a->ldc == b->ldc && memcmp(&a->alpha, &b->alpha, sizeof a->alpha) == 0 &&
           a->nt == b->nt && a->ta == b->ta && a->tb == b->tb && a->sum == b->sum;
}

/* The cached entry for q (created on a miss), its refs taken; NULL on a
 * oneDNN failure.  *own is set when the entry could not be cached (all
 * slots busy): the caller destroys it after use. */
static prim_entry *acquire(const prim_key *q, prim_entry *spare, bool *own)
{
    *own = false;
    pthread_mutex_lock(&cache_mu);
    prim_entry *victim = NULL;
    for (int i = 0; i < CACHE_SIZE; i++) {
        prim_entry *e = &cache[i];
        if (e->valid && keys_equal(&e->key, q)) {
            e->used = ++cache_clock;
            e->refs++;
            pthread_mutex_unlock(&cache_mu);
            return e;
        }
        if (e->refs == 0 && (!victim || !e->valid || (victim->valid && e->used < victim->used)))
            victim = e;
    }
    /* creation (milliseconds) under the lock: concurrent misses are rare */
    prim_entry made = { .key = *q };
    if (!create_prim(q, &made)) {
        pthread_mutex_unlock(&cache_mu);
        return NULL;
    }
    if (!victim) {
        *spare = made;
        *own = true;
        pthread_mutex_unlock(&cache_mu);
        return spare;
    }
    if (victim->valid)
        destroy_prim(victim);
    *victim = made;
    victim->valid = true;
    victim->used = ++cache_clock;
    victim->refs = 1;
    pthread_mutex_unlock(&cache_mu);
    return victim;
}

static void release(prim_entry *e, bool own)
{
    if (own) {
        destroy_prim(e);
        return;
    }
    pthread_mutex_lock(&cache_mu);
    e->refs--;
    pthread_mutex_unlock(&cache_mu);
}

/* Run e on BF16 a, b and FP32 c (descriptors as created). */
static bool execute(const prim_entry *e, const prim_key *q, const void *a, const void *b, float *c)
{
    const dnnl_memory_desc_t *md[3] = { dnnl_primitive_desc_query_md(e->pd, dnnl_query_src_md, 0),
                                        dnnl_primitive_desc_query_md(e->pd, dnnl_query_weights_md, 0),
                                        dnnl_primitive_desc_query_md(e->pd, dnnl_query_dst_md, 0) };
    void *ptr[3] = { (void *)a, (void *)b, c };
    int argid[4] = { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD };
    dnnl_memory_t mem[4] = { NULL, NULL, NULL, NULL };
    dnnl_exec_arg_t args[4];
    void *scratch = e->scratch ? aligned_alloc(64, (e->scratch + 63) / 64 * 64) : NULL;
    dnnl_stream_t stream = NULL;
    bool ok = !e->scratch || scratch;
    int nargs = e->scratch ? 4 : 3;
    for (int i = 0; ok && i < 3; i++)
        ok = md[i] && dnnl_memory_create(&mem[i], md[i], engine, ptr[i]) == dnnl_success;
    if (ok && e->scratch)
        ok = dnnl_memory_create(&mem[3], dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0),
                                engine, scratch) == dnnl_success;
    for (int i = 0; i < nargs; i++)
        args[i] = (dnnl_exec_arg_t){ argid[i], mem[i] };
    ok = ok && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        int saved = omp_get_max_threads();
        omp_set_num_threads(q->nt);
        ok = dnnl_primitive_execute(e->prim, stream, nargs, args) == dnnl_success &&
             dnnl_stream_wait(stream) == dnnl_success;
        omp_set_num_threads(saved);
    }
    if (stream)
        dnnl_stream_destroy(stream);
    for (int i = 0; i < 4; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    free(scratch);
    return ok;
}

/* The rows x cols rectangle of an FP32 matrix (row stride ld) as compact
 * BF16 (row stride cols). */
static void round_rect(pt_bf16 *dst, const float *src, size_t ld, size_t rows, size_t cols)
{
    if (ld == cols) {
        pt__f32_to_bf16_n(dst, src, rows * cols);
        return;
    }
    for (size_t i = 0; i < rows; i++)
        pt__f32_to_bf16_n(dst + i * cols, src + i * ld, cols);
}

static void warn_once(const char *what)
{
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        pt__log(PT_LOG_WARN, "pt__gemm_mixed: oneDNN %s failed; this product (and any other that "
               "fails) uses the library's own BF16 kernel", what);
}

bool pt__gemm_dnnl_usable(void)
{
    pthread_once(&init_once, backend_init);
    return usable;
}

bool pt__gemm_dnnl(int nt, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                  bool a_bf16, size_t lda, const void *b, bool b_bf16, size_t ldb, float beta,
                  float *c, size_t ldc)
{
    if (!pt__gemm_dnnl_usable() || m == 0 || n == 0 || k == 0)
        return false;
    size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    prim_key q = { .m = m, .n = n, .k = k, .lda = a_bf16 ? lda : ac, .ldb = b_bf16 ? ldb : bc,
                   .ldc = ldc, .alpha = alpha, .nt = nt < 1 ? 1 : nt, .ta = ta, .tb = tb,
                   .sum = beta != 0.0f };
    prim_entry spare, *e;
    bool own;
    int saved = omp_get_max_threads();
    omp_set_num_threads(q.nt);
    e = acquire(&q, &spare, &own);
    omp_set_num_threads(saved);
    if (!e) {
        warn_once("primitive creation");
        return false;
    }
    if (!e->prim) { /* a reference implementation for this shape: ours */
        release(e, own);
        return false;
    }
    size_t wa = a_bf16 ? 0 : ar * ac, wb = b_bf16 ? 0 : br * bc;
    pt_bf16 *w = (wa + wb) ? malloc((wa + wb) * sizeof *w) : NULL;
    bool ok = !(wa + wb) || w, scaled = false;
    if (ok) {
        if (wa)
            round_rect(w, a, lda, ar, ac);
        if (wb)
            round_rect(w + wa, b, ldb, br, bc);
        if (q.sum && beta != 1.0f) {
            for (size_t i = 0; i < m; i++)
                for (size_t j = 0; j < n; j++)
                    c[i * ldc + j] *= beta;
            scaled = true;
        }
        ok = execute(e, &q, wa ? (const void *)w : a, wb ? (const void *)(w + wa) : b, c);
    }
    free(w);
    release(e, own);
    if (ok)
        return true;
    warn_once("matmul execution");
    if (!scaled)
        return false;
    /* C already holds beta C: our kernel adds alpha op(A) op(B) to it */
    pt__gemm_bf16_nt(q.nt, PT_BF16_KERNEL_AUTO, ta, tb, m, n, k, alpha, a, a_bf16, lda, b, b_bf16,
                    ldb, 1.0f, c, ldc);
    return true;
}

const char *pt__gemm_dnnl_impl(void)
{
    return pt__gemm_dnnl_usable() ? impl_name : NULL;
}

#else /* no oneDNN in this build */

bool pt__gemm_dnnl_usable(void)
{
    return false;
}

bool pt__gemm_dnnl(int nt, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const void *a,
                  bool a_bf16, size_t lda, const void *b, bool b_bf16, size_t ldb, float beta,
                  float *c, size_t ldc)
{
    (void)nt, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)a_bf16;
    (void)lda, (void)b, (void)b_bf16, (void)ldb, (void)beta, (void)c, (void)ldc;
    return false;
}

const char *pt__gemm_dnnl_impl(void)
{
    return NULL;
}

#endif

static _Thread_local char backend_text[128];

const char *pt__bf16_gemm_backend(void)
{
    if (!pt__cpu_bf16_compute())
        return "fp32 blis (BF16 operands widened; no BF16 arithmetic on this path)";
    const char *impl = pt__gemm_dnnl_impl();
    if (impl)
        snprintf(backend_text, sizeof backend_text, "onednn %s", impl);
    else
        snprintf(backend_text, sizeof backend_text, "own %s",
                 pt__bf16_kernel_name(pt__bf16_kernel_auto()));
    return backend_text;
}

const char *pt_bf16_info(void)
{
    return pt__bf16_gemm_backend();
}
