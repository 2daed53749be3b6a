/* Internal: the BF16 GEMM of pt__gemm_mixed (kernels/bf16.h), for tests and
 * benchmarks.
 *
 * The BF16-compute path is a blocked GEMM of our own: both operands packed
 * into BF16 panels with k-pairs interleaved (one 32-bit word holds the BF16
 * values of k = 2p in its low half and k = 2p + 1 in its high half), then a
 * register-blocked micro-kernel built on one instruction, vdpbf16ps.  The
 * micro-kernel source (gemm_bf16_kern.inc) is compiled twice: once with
 * AVX512_BF16 (the real instruction) and once with pt__dpbf16_lane below, a
 * C emulation of the instruction's documented semantics, so the packing,
 * blocking and edge logic run and are tested on any CPU. */
#ifndef PT_KERNELS_GEMM_BF16_H
#define PT_KERNELS_GEMM_BF16_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A denormal FP32 value becomes a zero of the same sign (DAZ / FTZ). */
static inline float pt__flush_denormal(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float pt__bf16_word_f32(uint32_t w, int half)
{
    uint32_t u = half ? (w & 0xffff0000u) : (w << 16);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One FP32 lane of VDPBF16PS (Intel SDM): a and b each hold two BF16
 * values (element 2j in the low half, 2j+1 in the high half);
 *   acc += a.hi * b.hi, then acc += a.lo * b.lo,
 * each step an FMA rounded to nearest even, with denormal inputs read as
 * zero and denormal results flushed to zero; MXCSR is ignored. */
static inline float pt__dpbf16_lane(float acc, uint32_t a, uint32_t b)
{
    acc = pt__flush_denormal(acc);
    acc = pt__flush_denormal(fmaf(pt__flush_denormal(pt__bf16_word_f32(a, 1)),
                                 pt__flush_denormal(pt__bf16_word_f32(b, 1)), acc));
    acc = pt__flush_denormal(fmaf(pt__flush_denormal(pt__bf16_word_f32(a, 0)),
                                 pt__flush_denormal(pt__bf16_word_f32(b, 0)), acc));
    return acc;
}

/* acc[j] = vdpbf16ps(acc, a, b) lane by lane for j < n, with the real
 * instruction (16 lanes at a time); false, and nothing done, when the CPU
 * has no AVX512_BF16. */
bool pt__dpbf16_hw_lanes(float *acc, const uint32_t *a, const uint32_t *b, size_t n);

/* The same through two FP32 FMAs per lane (high halves, then low) under
 * MXCSR round-to-nearest + DAZ + FTZ: the arithmetic of the FMA kernel;
 * false without AVX-512. */
bool pt__dpbf16_fma_lanes(float *acc, const uint32_t *a, const uint32_t *b, size_t n);

/* One operand as the packing reads it: element (r, kk) of the panel
 * dimension r (rows of op(A), columns of op(B)) and k. */
typedef struct pt_gemm_operand {
    const void *p;
    size_t ld;
    bool bf16;   /* BF16 values, otherwise FP32 (rounded to BF16 when packed) */
    bool kmajor; /* element (r, kk) at p[kk * ld + r]; otherwise p[r * ld + kk] */
} pt_gemm_operand;

/* Pack rows r0 .. r0+rn of x (rn <= R; the rest zeros) over k0 .. k0+kn
 * into a panel of R words per k-pair (np = ceil(kn/2) pairs, an odd kn's
 * last high half zero), or split: per k-pair the R high halves then the R
 * low halves, each as an FP32 bit pattern (2 R words). */
void pt__bf16_pack(const pt_gemm_operand *x, size_t r0, size_t rn, size_t R, size_t k0, size_t kn,
                  uint32_t *dst, bool split);

/* The micro-kernels of the BF16 product, all computing the same bits. */
typedef enum pt_bf16_kernel {
    PT_BF16_KERNEL_AUTO = 0, /* the faster of DPBF16 and FMA on this CPU (timed once) */
    PT_BF16_KERNEL_EMULATED, /* vdpbf16ps emulated in C: any CPU */
    PT_BF16_KERNEL_DPBF16,   /* the real vdpbf16ps: AVX512_BF16 */
    PT_BF16_KERNEL_FMA,      /* vdpbf16ps's arithmetic by FP32 FMAs under DAZ/FTZ: AVX-512 */
} pt_bf16_kernel;

/* True when this CPU runs kernel kind. */
bool pt__bf16_kernel_available(pt_bf16_kernel kind);
/* The kernel AUTO picks on this CPU (DPBF16 or FMA; EMULATED without
 * AVX-512), and its name ("emulated", "dpbf16", "fma"). */
pt_bf16_kernel pt__bf16_kernel_auto(void);
const char *pt__bf16_kernel_name(pt_bf16_kernel kind);

/* pt__gemm_mixed's BF16-compute path with the emulated micro-kernel, on any
 * CPU: the same packing, blocking, thread split and order of operations as
 * the real-instruction path, so the two agree bit for bit wherever the
 * emulation matches the hardware. */
void pt__gemm_bf16_emulated(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                           const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16,
                           size_t ldb, float beta, float *c, size_t ldc);

/* The same with an explicit thread count (1 .. pt_get_num_threads()) and
 * micro-kernel (one the CPU lacks falls back to the emulated one): for
 * tests of determinism and benchmarks. */
void pt__gemm_bf16_nt(int nthreads, pt_bf16_kernel kind, bool trans_a, bool trans_b, size_t m,
                     size_t n, size_t k, float alpha, const void *a, bool a_bf16, size_t lda,
                     const void *b, bool b_bf16, size_t ldb, float beta, float *c, size_t ldc);

/* oneDNN's matmul for pt__gemm_mixed's BF16 products (gemm_dnnl.c): true
 * when it computed C with nthreads threads, false when the caller must use
 * pt__gemm_bf16_nt (no oneDNN in the build, PT_BF16_GEMM=own, a reference
 * implementation for this shape, an empty product, or a oneDNN failure,
 * logged once).  Same contract as pt__gemm_mixed; results are identical run
 * to run at the same thread count. */
bool pt__gemm_dnnl(int nthreads, bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                  float alpha, const void *a, bool a_bf16, size_t lda, const void *b, bool b_bf16,
                  size_t ldb, float beta, float *c, size_t ldc);
/* Whether pt__gemm_dnnl may be used in this process (decided once). */
bool pt__gemm_dnnl_usable(void);
/* Its implementation's name ("brg:avx512_core_amx_bf16"), or NULL. */
const char *pt__gemm_dnnl_impl(void);

#endif
