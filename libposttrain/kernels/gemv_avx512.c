/* The small-m kernels (kernels/gemv.h) for AVX-512 (F, BW, DQ, VL), compiled
 * with a function-level target so the library's baseline stays x86-64-v3:
 * call them only when pt__cpu_active() >= PT_CPU_AVX512.  16 floats a
 * vector, 4 rows of W x 4 rows of x per register block (16 accumulators of
 * the 32 zmm registers).
 *
 * The avx512bf16 path uses these same kernels: the BF16 weights are widened
 * to FP32 and the arithmetic stays FP32 (no vdpbf16ps, which would round x
 * to BF16), so its results are identical to the avx512 path's. */
#include "kernels/gemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define GV_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define GV_VEC __m512
#define GV_VW 16
#define GV_RMAX 4
#define GV_CMAX 6
#define GV_MASK __mmask16
#define GV_NAME_F32 pt_gemv_f32_avx512
#define GV_NAME_BF16 pt_gemv_bf16_avx512

GV_TARGET static inline __m512 gv_zero(void)
{
    return _mm512_setzero_ps();
}

GV_TARGET static inline __m512 gv_load(const float *p)
{
    return _mm512_loadu_ps(p);
}

/* BF16 -> FP32: zero-extend to 32 bits and shift into the high half (exact). */
GV_TARGET static inline __m512 gv_widen(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

GV_TARGET static inline __m512 gv_load_bf16(const uint16_t *p)
{
    return gv_widen(_mm256_loadu_si256((const __m256i *)p));
}

GV_TARGET static inline __mmask16 gv_mask(size_t t)
{
    return (__mmask16)((1u << t) - 1u);
}

GV_TARGET static inline __m512 gv_load_tail(const float *p, __mmask16 mk)
{
    return _mm512_maskz_loadu_ps(mk, p);
}

GV_TARGET static inline __m512 gv_load_bf16_tail(const uint16_t *p, __mmask16 mk, size_t t)
{
    (void)t;
    return gv_widen(_mm256_maskz_loadu_epi16(mk, p));
}

GV_TARGET static inline __m512 gv_fma(__m512 a, __m512 b, __m512 acc)
{
    return _mm512_fmadd_ps(a, b, acc);
}

/* Lanes l + l+8, then l + l+4, l + l+2, l + l+1. */
GV_TARGET static inline float gv_hsum(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

/* The sums of 16 vectors a[e] into out[e], each by the tree of gv_hsum
 * with the same operands in the same order (so the same bits), but for 16
 * vectors at once: level by level, each add serves two vectors' halves.
 * After the last level lane 4 (e % 4) + e / 4 holds vector e's sum. */
GV_TARGET static inline void gv_hsum_vw(const __m512 a[16], float out[16])
{
    __m512 b[8], c[4], d[2];
    for (int p = 0; p < 8; p++) /* lanes l + l+8: [a2p | a2p+1] */
        b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xEE));
    for (int q = 0; q < 4; q++) /* l + l+4: one 128-bit block a vector */
        c[q] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], 0xDD));
    for (int u = 0; u < 2; u++) /* l + l+2 */
        d[u] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * u], c[2 * u + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * u], c[2 * u + 1], 0xEE));
    __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), /* l + l+1 */
                             _mm512_shuffle_ps(d[0], d[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, e));
}

/* Blocks of at least this many accumulators use gv_hsum_vw. */
#define GV_HSUM_MIN 8

#include "kernels/gemv_tmpl.h"

#endif
