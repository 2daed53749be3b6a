/* The BF16 GEMM of pt__gemm_mixed's BF16-compute path (kernels/gemm_bf16.h;
 * pt__gemm_mixed itself and the FP32 paths are in gemm_mixed.c).
 *
 * A blocked GEMM of our own.  Packed words hold a k-pair: BF16 of k = 2p in
 * the low half, k = 2p + 1 in the high half, as vdpbf16ps reads them (or,
 * for the FMA kernel, the two halves as FP32 bit patterns); an odd k and the
 * rows and columns past the edges are padded with zeros (gemm_bf16_pack.c).
 * All of A is packed once, in panels of PT_MR rows, by whichever thread
 * first needs a panel; C is cut into items (a chunk of rows x a block of
 * columns) handed out dynamically, and each item packs its block of B in
 * panels of PT_NR columns and runs the micro-kernel over it for every
 * block of k in turn.  The blocks of k depend on k alone and every element
 * of C is summed by one micro-kernel call per k block, in the same order,
 * whatever the thread count, the item it falls in or the kernel:
 * - emulated: gemm_bf16_kern.inc with vdpbf16ps emulated in C (any CPU);
 * - dpbf16: the same source with the real instruction (AVX512_BF16);
 * - fma: vdpbf16ps's arithmetic by FP32 FMAs under DAZ/FTZ (AVX-512F),
 *   which is faster where vdpbf16ps issues slowly (Sapphire Rapids).
 * pt__gemm_mixed uses the faster of dpbf16 and fma, timed once. */
#include "kernels/bf16.h"

#include "core/core.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef float pt_v16f __attribute__((vector_size(64)));
typedef uint32_t pt_v16u __attribute__((vector_size(64)));

#define PT_MR 12
#define PT_NR 32
#define PT_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* k per block at most (even).  The blocks of k depend on k alone and fix
 * the order of the sums: changing KC_MAX changes results in the last bits. */
#define KC_MAX 768
#define A_CHUNK_BYTES ((size_t)8 << 20) /* packed A rows per item at most */
#define A_PACK_MAX ((size_t)64 << 20)   /* packed A at most (taller products in turns) */
#define NB_PANELS_MAX 8                 /* B panels per column block at most */
#define PT_ITEMS_PER_THREAD 4           /* items per thread at least, where the columns allow */

/* ---- the tile epilogue, shared by all kernels ---- */

/* c = alpha t + beta c (first k block; beta 0 overwrites) or c + alpha t,
 * for the mr x nr corner of a tile t of stride PT_NR.  fmaf keeps the
 * rounding the same whatever the compiler's contraction choices. */
static inline __attribute__((always_inline)) void tile_update(const float *t, float *c, size_t ldc,
                                                              size_t mr, size_t nr, float alpha,
                                                              float beta, bool first)
{
    for (size_t i = 0; i < mr; i++) {
        const float *ti = t + i * PT_NR;
        float *ci = c + i * ldc;
        if (!first)
            for (size_t j = 0; j < nr; j++)
                ci[j] = fmaf(alpha, ti[j], ci[j]);
        else if (beta == 0.0f)
            for (size_t j = 0; j < nr; j++)
                ci[j] = alpha * ti[j];
        else
            for (size_t j = 0; j < nr; j++)
                ci[j] = fmaf(alpha, ti[j], beta * ci[j]);
    }
}

/* ---- the micro-kernel source, emulated and with the real instruction ---- */

#define KFN(name) name##_emu
#define KATTR
#define DPBF16(acc, a, b)                                                                          \
    do {                                                                                           \
        for (int l_ = 0; l_ < 16; l_++)                                                            \
            (acc)[l_] = pt__dpbf16_lane((acc)[l_], (a)[l_], (b)[l_]);                               \
    } while (0)
#include "kernels/gemm_bf16_kern.inc"
#undef KFN
#undef KATTR
#undef DPBF16

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PT_HAVE_HW_BF16 1
/* Function-level targets (GCC and clang): the library stays x86-64-v3. */
#define PT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define PT_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define KFN(name) name##_hw
#define KATTR PT_TARGET_BF16
#define DPBF16(acc, a, b)                                                                          \
    ((acc) = (pt_v16f)_mm512_dpbf16_ps((__m512)(acc), (__m512bh)(a), (__m512bh)(b)))
#include "kernels/gemm_bf16_kern.inc"
#undef KFN
#undef KATTR
#undef DPBF16

PT_TARGET_BF16 bool pt__dpbf16_hw_lanes(float *acc, const uint32_t *a, const uint32_t *b, size_t n)
{
    if (pt__cpu_detected() < PT_CPU_AVX512BF16)
        return false;
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 s = _mm512_maskz_loadu_ps(k, acc + i);
        __m512i x = _mm512_maskz_loadu_epi32(k, a + i), y = _mm512_maskz_loadu_epi32(k, b + i);
        s = _mm512_dpbf16_ps(s, (__m512bh)x, (__m512bh)y);
        _mm512_mask_storeu_ps(acc + i, k, s);
    }
    return true;
}

/* ---- vdpbf16ps's arithmetic through FP32 FMAs ----
 * Each step of vdpbf16ps is an FMA with denormal inputs read as zero and
 * denormal results flushed (the product of two BF16 values is exact in
 * FP32), so vfmadd231ps on the widened halves, hi then lo, under
 * MXCSR = round to nearest + DAZ + FTZ computes the same bits.  On CPUs
 * where vdpbf16ps issues at a quarter of the FMA rate (measured on Sapphire
 * Rapids: bench_gemm_bf16) this is the faster of the two.  The panels hold
 * per k-pair the R high halves, then the R low halves, as FP32 bit
 * patterns. */
#define PT_MXCSR_DPBF16 (0x1f80u | 0x8000u | 0x0040u) /* exceptions masked, RNE, FTZ, DAZ */

/* The 12 x 32 tile over np k-pairs in inline assembly (with intrinsics
 * GCC copies registers inside the loop, and the copies take FMA ports):
 * row i accumulates in zmm(2i) and zmm(2i+1), B's halves are loaded into
 * zmm24/25, A's values broadcast into zmm26..31.  noinline: a call is a
 * wall the compiler moves no arithmetic across, so all of it runs under the
 * MXCSR set around the call. */
#define UA_ROW(i, h, x, ra, rb)                                                                    \
    "vbroadcastss 4*(12*" #h "+" #i ")(%[pa]), %%zmm" #x "\n\t"                                   \
    "vfmadd231ps %%zmm24, %%zmm" #x ", %%zmm" #ra "\n\t"                                          \
    "vfmadd231ps %%zmm25, %%zmm" #x ", %%zmm" #rb "\n\t"
#define UA_HALF(h, off)                                                                            \
    "vmovaps " #off "(%[pb]), %%zmm24\n\t"                                                        \
    "vmovaps 64+" #off "(%[pb]), %%zmm25\n\t" UA_ROW(0, h, 26, 0, 1) UA_ROW(1, h, 27, 2, 3)      \
    UA_ROW(2, h, 28, 4, 5) UA_ROW(3, h, 29, 6, 7) UA_ROW(4, h, 30, 8, 9) UA_ROW(5, h, 31, 10, 11) \
    UA_ROW(6, h, 26, 12, 13) UA_ROW(7, h, 27, 14, 15) UA_ROW(8, h, 28, 16, 17)                    \
    UA_ROW(9, h, 29, 18, 19) UA_ROW(10, h, 30, 20, 21) UA_ROW(11, h, 31, 22, 23)
#define UA_ZERO(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define UA_STORE(r) "vmovaps %%zmm" #r ", 64*" #r "(%[t])\n\t"
#define UA_ALL(X)                                                                                  \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)    \
    X(17) X(18) X(19) X(20) X(21) X(22) X(23)
static PT_TARGET_AVX512 __attribute__((noinline)) void
ukr_fma(size_t np, const uint32_t *restrict pa, const uint32_t *restrict pb, float *restrict t)
{
    __asm__ volatile(UA_ALL(UA_ZERO) "test %[n], %[n]\n\t"
                                     "jz 2f\n\t"
                                     "1:\n\t" UA_HALF(0, 0) UA_HALF(1, 128)
                                     "add $96, %[pa]\n\t"
                                     "add $256, %[pb]\n\t"
                                     "dec %[n]\n\t"
                                     "jnz 1b\n\t"
                                     "2:\n\t" UA_ALL(UA_STORE)
                     : [pa] "+r"(pa), [pb] "+r"(pb), [n] "+r"(np)
                     : [t] "r"(t)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16",
                       "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",
                       "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "cc",
                       "memory");
}
#undef UA_ROW
#undef UA_HALF
#undef UA_ZERO
#undef UA_STORE
#undef UA_ALL

static PT_TARGET_AVX512 void block_fma(size_t mc, size_t nc, size_t np, const uint32_t *apack,
                      const uint32_t *bpack, float *c, size_t ldc, float alpha, float beta,
                      bool first)
{
    float t[PT_MR * PT_NR] __attribute__((aligned(64)));
    unsigned int csr = _mm_getcsr();
    for (size_t ir = 0; ir < mc; ir += PT_MR) {
        size_t mr = mc - ir < PT_MR ? mc - ir : PT_MR;
        for (size_t jr = 0; jr < nc; jr += PT_NR) {
            size_t nr = nc - jr < PT_NR ? nc - jr : PT_NR;
            _mm_setcsr(PT_MXCSR_DPBF16);
            ukr_fma(np, apack + 2 * ir * np, bpack + 2 * jr * np, t);
            _mm_setcsr(csr); /* the epilogue as in the other variants */
            tile_update(t, c + ir * ldc + jr, ldc, mr, nr, alpha, beta, first);
        }
    }
}

static PT_TARGET_AVX512 __attribute__((noinline)) void fma_lanes(float *acc, const uint32_t *a,
                                                                 const uint32_t *b, size_t n)
{
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 s = _mm512_maskz_loadu_ps(k, acc + i);
        __m512i x = _mm512_maskz_loadu_epi32(k, a + i), y = _mm512_maskz_loadu_epi32(k, b + i);
        s = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(x, hi)),
                            _mm512_castsi512_ps(_mm512_and_si512(y, hi)), s);
        s = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                            _mm512_castsi512_ps(_mm512_slli_epi32(y, 16)), s);
        _mm512_mask_storeu_ps(acc + i, k, s);
    }
}

bool pt__dpbf16_fma_lanes(float *acc, const uint32_t *a, const uint32_t *b, size_t n)
{
    if (pt__cpu_detected() < PT_CPU_AVX512)
        return false;
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(PT_MXCSR_DPBF16);
    fma_lanes(acc, a, b, n);
    _mm_setcsr(csr);
    return true;
}
#else
bool pt__dpbf16_hw_lanes(float *acc, const uint32_t *a, const uint32_t *b, size_t n)
{
    return false;
}

bool pt__dpbf16_fma_lanes(float *acc, const uint32_t *a, const uint32_t *b, size_t n)
{
    return false;
}
#endif

typedef void (*block_fn)(size_t mc, size_t nc, size_t np, const uint32_t *apack,
                         const uint32_t *bpack, float *c, size_t ldc, float alpha, float beta,
                         bool first);

/* ---- blocking ---- */

/* The blocks of k: *kc (even) per block, the last one shorter. */
static size_t k_blocks(size_t k, size_t *kc)
{
    size_t nkb = (k + KC_MAX - 1) / KC_MAX;
    size_t b = (k + nkb - 1) / nkb;
    *kc = (b + 1) / 2 * 2;
    return (k + *kc - 1) / *kc;
}

static void scale_c(size_t m, size_t n, float beta, float *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

/* No memory for the panels: the same sums element by element, with the
 * emulated instruction (slow; only when allocation fails). */
static void gemm_bf16_scalar(const pt_gemm_operand *A, const pt_gemm_operand *B, size_t m, size_t n,
                             size_t k, float alpha, float beta, float *c, size_t ldc)
{
    size_t kc, nkb = k_blocks(k, &kc);
    uint32_t wa[2] __attribute__((aligned(64))), wb[2] __attribute__((aligned(64)));
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            for (size_t kb = 0; kb < nkb; kb++) {
                size_t k0 = kb * kc, kn = k - k0 < kc ? k - k0 : kc;
                float acc = 0.0f, t[PT_NR];
                for (size_t q = 0; q < (kn + 1) / 2; q++) {
                    size_t kq = k0 + 2 * q, kl = kn - 2 * q < 2 ? kn - 2 * q : 2;
                    pt__bf16_pack(A, i, 1, 1, kq, kl, wa, false);
                    pt__bf16_pack(B, j, 1, 1, kq, kl, wb, false);
                    acc = pt__dpbf16_lane(acc, wa[0], wb[0]);
                }
                t[0] = acc;
                tile_update(t, c + i * ldc + j, ldc, 1, 1, alpha, beta, kb == 0);
            }
}

/* How a product is cut: k blocks of kc (kc/2 pairs), the whole of A packed
 * once for all threads (f words per k-pair and row: 2 in the FMA kernel's
 * layout), then independent items of chunk x column block, each packing its
 * own B block (per thread buffers of bwords). */
typedef struct bf16_plan {
    size_t kc, nkb, f, mpan, cpan, nchunks, nbp, ncb, awords, bwords;
    int nt;
} bf16_plan;

static void plan_bf16(bf16_plan *p, int nt, bool split, size_t m, size_t n, size_t k)
{
    p->nkb = k_blocks(k, &p->kc);
    p->f = split ? 2 : 1;
    size_t npm = p->kc / 2;
    /* columns per block: about 4 items per thread; when the columns give
     * fewer, the rows are cut into chunks as well */
    nt = nt < 1 ? 1 : nt;
    p->mpan = (m + PT_MR - 1) / PT_MR;
    size_t npan = (n + PT_NR - 1) / PT_NR, want = PT_ITEMS_PER_THREAD * (size_t)nt;
    size_t nbp = (npan + want - 1) / want;
    p->nbp = nbp < 1 ? 1 : nbp > NB_PANELS_MAX ? NB_PANELS_MAX : nbp;
    p->ncb = (npan + p->nbp - 1) / p->nbp;
    size_t nch = p->ncb >= want ? 1 : (want + p->ncb - 1) / p->ncb;
    size_t cmax = A_CHUNK_BYTES / (npm * 4 * p->f * PT_MR); /* bound the A read per item */
    cmax = cmax < 1 ? 1 : cmax;
    if (nch < (p->mpan + cmax - 1) / cmax)
        nch = (p->mpan + cmax - 1) / cmax;
    nch = nch > p->mpan ? p->mpan : nch;
    p->cpan = (p->mpan + nch - 1) / nch;
    p->nchunks = (p->mpan + p->cpan - 1) / p->cpan;
    size_t items = p->nchunks * p->ncb;
    p->nt = (size_t)nt > items ? (int)items : nt;
    /* all of A; B blocks 64-byte aligned (the kernel's vector loads) */
    p->awords = (p->mpan * PT_MR * p->f * ((k + 1) / 2) + 15) / 16 * 16;
    p->bwords = p->nbp * PT_NR * npm * p->f;
}

/* The packed A of k block kb: panels of PT_MR rows, each np * PT_MR * f words. */
static size_t a_offset(const bf16_plan *p, size_t kb)
{
    return p->mpan * PT_MR * p->f * kb * (p->kc / 2);
}

/* What the threads of one product share: the plan, the operands, all of A
 * packed and a state per A panel and k block (0 free, 1 being packed, 2
 * packed).  Whichever thread first needs a panel packs it, so no thread
 * waits at a barrier for one the OS has preempted; a thread only waits for
 * a panel another thread is packing at that moment. */
typedef struct bf16_shared {
    bf16_plan p;
    const pt_gemm_operand *A, *B;
    size_t m, k;
    bool split;
    uint32_t *apack;
    atomic_uchar *state;
} bf16_shared;

/* The A panels of rows i0 .. i0+mc for k block kb: pack those no thread has
 * claimed (claim), or wait until all are packed (!claim). */
static void a_panels(const bf16_shared *x, size_t kb, size_t i0, size_t mc, bool claim)
{
    size_t k0 = kb * x->p.kc, kn = x->k - k0 < x->p.kc ? x->k - k0 : x->p.kc, np = (kn + 1) / 2;
    for (size_t r = i0; r < i0 + mc; r += PT_MR) {
        atomic_uchar *st = &x->state[kb * x->p.mpan + r / PT_MR];
        if (claim) {
            unsigned char free_ = 0;
            if (atomic_load_explicit(st, memory_order_relaxed) != 0 ||
                !atomic_compare_exchange_strong(st, &free_, 1))
                continue;
            size_t rn = x->m - r < PT_MR ? x->m - r : PT_MR;
            pt__bf16_pack(x->A, r, rn, PT_MR, k0, kn,
                         x->apack + a_offset(&x->p, kb) + r * np * x->p.f, x->split);
            atomic_store_explicit(st, 2, memory_order_release);
        } else {
            for (unsigned spins = 0; atomic_load_explicit(st, memory_order_acquire) != 2; spins++)
                if (spins >= 64)
                    sched_yield();
        }
    }
}

/* The BF16 product with the micro-kernel variant blk (split: the FMA
 * kernel's panels) on nt threads.  Each item computes its tile of C over
 * all k blocks in order, so no item depends on another. */
static void gemm_bf16_run(int nt, block_fn blk, bool split, const pt_gemm_operand *A,
                          const pt_gemm_operand *B, size_t m, size_t n, size_t k, float alpha,
                          float beta, float *c, size_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        scale_c(m, n, beta, c, ldc);
        return;
    }
    bf16_shared x = { .A = A, .B = B, .m = m, .k = k, .split = split };
    plan_bf16(&x.p, nt, split, m, n, k);
    const bf16_plan *p = &x.p;
    size_t kc = p->kc, f = p->f, tw = p->bwords;
    x.apack = aligned_alloc(64, (p->awords + (size_t)p->nt * tw) * sizeof *x.apack);
    x.state = calloc(p->nkb * p->mpan, sizeof *x.state);
    if (!x.apack || !x.state) {
        free(x.apack);
        free(x.state);
        gemm_bf16_scalar(A, B, m, n, k, alpha, beta, c, ldc);
        return;
    }
#pragma omp parallel for num_threads(p->nt) schedule(dynamic, 1) if (p->nt > 1)
    for (size_t it = 0; it < p->nchunks * p->ncb; it++) {
        uint32_t *bpack = x.apack + p->awords + (size_t)omp_get_thread_num() * tw;
        size_t i0 = it / p->ncb * p->cpan * PT_MR, j0 = it % p->ncb * p->nbp * PT_NR;
        size_t mc = m - i0 < p->cpan * PT_MR ? m - i0 : p->cpan * PT_MR;
        size_t nc = n - j0 < p->nbp * PT_NR ? n - j0 : p->nbp * PT_NR;
        for (size_t kb = 0; kb < p->nkb; kb++) {
            size_t k0 = kb * kc, kn = k - k0 < kc ? k - k0 : kc, np = (kn + 1) / 2;
            a_panels(&x, kb, i0, mc, true);
            for (size_t r = 0; r < nc; r += PT_NR)
                pt__bf16_pack(B, j0 + r, nc - r < PT_NR ? nc - r : PT_NR, PT_NR, k0, kn,
                             bpack + r * np * f, split);
            a_panels(&x, kb, i0, mc, false);
            blk(mc, nc, np, x.apack + a_offset(p, kb) + i0 * np * f, bpack, c + i0 * ldc + j0,
                ldc, alpha, beta, kb == 0);
        }
    }
    free(x.apack);
    free((void *)x.state);
}

/* ---- the choice of micro-kernel ---- */

bool pt__bf16_kernel_available(pt_bf16_kernel kind)
{
#ifdef PT_HAVE_HW_BF16
    if (kind == PT_BF16_KERNEL_DPBF16)
        return pt__cpu_detected() >= PT_CPU_AVX512BF16;
    if (kind == PT_BF16_KERNEL_FMA)
        return pt__cpu_detected() >= PT_CPU_AVX512;
#endif
    return kind == PT_BF16_KERNEL_EMULATED || kind == PT_BF16_KERNEL_AUTO;
}

const char *pt__bf16_kernel_name(pt_bf16_kernel kind)
{
    static const char *const names[] = { "auto", "emulated", "dpbf16", "fma" };
    return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

static pthread_once_t auto_once = PTHREAD_ONCE_INIT;
static pt_bf16_kernel auto_kind = PT_BF16_KERNEL_EMULATED;

#ifdef PT_HAVE_HW_BF16
#define CAL_NP 96 /* k-pairs of the timed tiles (panels in L1) */

/* The faster of vdpbf16ps and the FMA kernel on this CPU: the best of 15
 * timings of 8 tiles each, taken in turns.  Both compute the same bits, so
 * the choice changes only the speed. */
static void choose_auto(void)
{
    if (pt__cpu_detected() < PT_CPU_AVX512BF16) {
        auto_kind =
            pt__cpu_detected() >= PT_CPU_AVX512 ? PT_BF16_KERNEL_FMA : PT_BF16_KERNEL_EMULATED;
        return;
    }
    enum { AW = PT_MR * CAL_NP, BW = PT_NR * CAL_NP };
    uint32_t *w = aligned_alloc(64, (3 * (AW + BW) + PT_MR * PT_NR) * sizeof *w);
    if (!w) {
        auto_kind = PT_BF16_KERNEL_DPBF16;
        return;
    }
    uint32_t *pa = w, *pb = w + AW, *sa = pb + BW, *sb = sa + 2 * AW;
    float *t = (float *)(sb + 2 * BW);
    for (size_t i = 0; i < AW + BW; i++)
        w[i] = 0x3f803f80u + (uint32_t)(i % 61) * 0x00010001u; /* BF16 pairs near 1 */
    for (size_t q = 0; q < CAL_NP; q++) {
        for (size_t r = 0; r < PT_MR; r++) {
            sa[2 * q * PT_MR + r] = pa[q * PT_MR + r] & 0xffff0000u;
            sa[2 * q * PT_MR + PT_MR + r] = pa[q * PT_MR + r] << 16;
        }
        for (size_t r = 0; r < PT_NR; r++) {
            sb[2 * q * PT_NR + r] = pb[q * PT_NR + r] & 0xffff0000u;
            sb[2 * q * PT_NR + PT_NR + r] = pb[q * PT_NR + r] << 16;
        }
    }
    double best[2] = { 1e9, 1e9 };
    for (int rep = 0; rep < 15; rep++)
        for (int v = 0; v < 2; v++) {
            double t0 = pt__now();
            for (int i = 0; i < 8; i++) {
                if (v == 0)
                    ukr_hw(CAL_NP, pa, pb, t);
                else
                    ukr_fma(CAL_NP, sa, sb, t);
            }
            double dt = pt__now() - t0;
            best[v] = dt < best[v] ? dt : best[v];
        }
    free(w);
    auto_kind = best[1] < best[0] ? PT_BF16_KERNEL_FMA : PT_BF16_KERNEL_DPBF16;
}
#else
static void choose_auto(void)
{
}
#endif

pt_bf16_kernel pt__bf16_kernel_auto(void)
{
    pthread_once(&auto_once, choose_auto);
    return auto_kind;
}

void pt__gemm_bf16_nt(int nthreads, pt_bf16_kernel kind, bool trans_a, bool trans_b, size_t m,
                     size_t n, size_t k, float alpha, const void *a, bool a_bf16, size_t lda,
                     const void *b, bool b_bf16, size_t ldb, float beta, float *c, size_t ldc)
{
    pt_gemm_operand A = { a, lda, a_bf16, trans_a }, B = { b, ldb, b_bf16, !trans_b };
    if (kind == PT_BF16_KERNEL_AUTO)
        kind = pt__bf16_kernel_auto();
    if (!pt__bf16_kernel_available(kind))
        kind = PT_BF16_KERNEL_EMULATED;
    block_fn f = block_emu;
#ifdef PT_HAVE_HW_BF16
    if (kind == PT_BF16_KERNEL_DPBF16)
        f = block_hw;
    else if (kind == PT_BF16_KERNEL_FMA)
        f = block_fma;
#endif
    /* Packed A in at most A_PACK_MAX bytes: tall products run as several of
     * rows (each element's sums do not depend on it). */
    bool split = kind == PT_BF16_KERNEL_FMA;
    size_t row_bytes = ((k + 1) / 2) * 4 * (split ? 2 : 1) + 1;
    size_t rows = A_PACK_MAX / row_bytes / PT_MR * PT_MR;
    rows = rows < PT_MR ? PT_MR : rows;
    size_t esz = a_bf16 ? sizeof(pt_bf16) : sizeof(float);
    for (size_t i0 = 0; i0 < m; i0 += rows) {
        size_t mi = m - i0 < rows ? m - i0 : rows;
        A.p = (const char *)a + (trans_a ? i0 : i0 * lda) * esz;
        gemm_bf16_run(nthreads, f, split, &A, &B, mi, n, k, alpha, beta, c + i0 * ldc, ldc);
    }
}

void pt__gemm_bf16_emulated(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                           const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16,
                           size_t ldb, float beta, float *c, size_t ldc)
{
    pt__gemm_bf16_nt(pt__gemm_threads(m, n, k), PT_BF16_KERNEL_EMULATED, trans_a, trans_b, m, n, k,
                    alpha, a, a_bf16, lda, b, b_bf16, ldb, beta, c, ldc);
}
