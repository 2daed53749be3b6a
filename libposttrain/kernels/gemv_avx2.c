/* The small-m kernels (kernels/gemv.h) for AVX2 + FMA, the build's floor:
 * 8 floats a vector, 4 rows of W x 3 rows of x per register block (12
 * accumulators, 3 x vectors and one W vector: all 16 ymm registers). */
#include "kernels/gemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define GV_TARGET
#define GV_VEC __m256
#define GV_VW 8
#define GV_RMAX 4
#define GV_CMAX 3
#define GV_MASK __m256i
#define GV_NAME_F32 pt_gemv_f32_avx2
#define GV_NAME_BF16 pt_gemv_bf16_avx2

static inline __m256 gv_zero(void)
{
    return _mm256_setzero_ps();
}

static inline __m256 gv_load(const float *p)
{
    return _mm256_loadu_ps(p);
}

/* BF16 -> FP32: zero-extend to 32 bits and shift into the high half (exact). */
static inline __m256 gv_widen(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __m256 gv_load_bf16(const uint16_t *p)
{
    return gv_widen(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256i gv_mask(size_t t)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)t), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 gv_load_tail(const float *p, __m256i mk)
{
    return _mm256_maskload_ps(p, mk);
}

static inline __m256 gv_load_bf16_tail(const uint16_t *p, __m256i mk, size_t t)
{
    (void)mk;
    uint16_t b[8] = { 0 };
    memcpy(b, p, t * sizeof *p);
    return gv_widen(_mm_loadu_si128((const __m128i *)b));
}

static inline __m256 gv_fma(__m256 a, __m256 b, __m256 acc)
{
    return _mm256_fmadd_ps(a, b, acc);
}

/* Lanes l + l+4, then l + l+2, then l + l+1. */
static inline float gv_hsum(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

/* The sums of 8 vectors a[e] into out[e], each by the tree of gv_hsum
 * with the same operands in the same order (so the same bits), but for 8
 * vectors at once.  After the last level lane 4 (e % 2) + e / 2 holds
 * vector e's sum. */
static inline void gv_hsum_vw(const __m256 a[8], float out[8])
{
    __m256 b[4], c[2];
    for (int p = 0; p < 4; p++) /* lanes l + l+4: [a2p | a2p+1] */
        b[p] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x31));
    for (int q = 0; q < 2; q++) /* l + l+2 */
        c[q] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * q], b[2 * q + 1], 0x44),
                             _mm256_shuffle_ps(b[2 * q], b[2 * q + 1], 0xEE));
    __m256 e = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], 0x88), /* l + l+1 */
                             _mm256_shuffle_ps(c[0], c[1], 0xDD));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(e, order));
}

/* Blocks of at least this many accumulators use gv_hsum_vw. */
#define GV_HSUM_MIN 6

#include "kernels/gemv_tmpl.h"

#endif
