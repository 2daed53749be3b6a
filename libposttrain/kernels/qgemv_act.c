/* The activation quantizers of kernels/qgemv.h on AVX2: the same values as
 * the scalar ones in kernels/qgemv.c (max |x| and the products are exact
 * or rounded by the same IEEE operations, vroundps to nearest even is
 * rintf, the sums are integers), 8 values an instruction.  The scalar ones
 * run for pt__qgemv_rows_ref, so test_qgemv's bit-for-bit comparison of
 * every kernel against the reference covers these too. */
#include "kernels/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <float.h>
#include <math.h>

/* |x| of 8 values; *bad |= lanes that are NaN or infinite. */
static inline __m256 act_abs(__m256 v, __m256 *bad)
{
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    *bad = _mm256_or_ps(*bad, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
    return a;
}

static inline float act_hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 values times s, rounded to nearest even, clamped to [-127, 127], as
 * bytes in order at q; returns their sum. */
static inline int act_round32(const __m256 v[4], float s, int8_t *q)
{
    const __m256 sv = _mm256_set1_ps(s), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    __m256i i[4];
    for (int j = 0; j < 4; j++) {
        __m256 r = _mm256_round_ps(_mm256_mul_ps(v[j], sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        i[j] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, hi), lo));
    }
    /* packs interleave 128-bit halves: 0..3 8..11 4..7 12..15 ... ; undo */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256((__m256i *)(void *)q,
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m256i t = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4E));
    u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xB1));
    return _mm_cvtsi128_si32(u);
}

void pt__qgemv_quant32_avx2(const float *x, size_t k, int8_t *q, float *d, float *s, int32_t *sum)
{
    for (size_t b = 0; b < k / PT_QK; b++) {
        const float *xb = x + b * PT_QK;
        __m256 v[4], bad = _mm256_setzero_ps(), m = _mm256_setzero_ps();
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(xb + 8 * j);
            m = _mm256_max_ps(m, act_abs(v[j], &bad)); /* a NaN lane: bad says so */
        }
        if (_mm256_movemask_ps(bad)) {
            memset(q + b * PT_QK, 0, PT_QK);
            d[b] = s[b] = NAN;
            sum[b] = 0;
            continue;
        }
        const float amax = act_hmax(m);
        const float dd = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const int t = act_round32(v, id, q + b * PT_QK);
        d[b] = pt__q_round_f16(dd);
        s[b] = pt__q_round_f16(dd * (float)t);
        sum[b] = t;
    }
}

void pt_qgemv_quantK_avx2(const float *x, size_t k, int8_t *q, float *d, int16_t *bsum)
{
    for (size_t b = 0; b < k / PT_QK_K; b++) {
        const float *xb = x + b * PT_QK_K;
        int8_t *qb = q + b * PT_QK_K;
        __m256 bad = _mm256_setzero_ps(), m = _mm256_setzero_ps();
        for (int j = 0; j < PT_QK_K / 8; j++)
            m = _mm256_max_ps(m, act_abs(_mm256_loadu_ps(xb + 8 * j), &bad));
        memset(bsum + b * 16, 0, 16 * sizeof *bsum);
        const float amax = act_hmax(m);
        if (_mm256_movemask_ps(bad) || amax == 0.0f) {
            memset(qb, 0, PT_QK_K);
            d[b] = _mm256_movemask_ps(bad) ? NAN : 0.0f;
            continue;
        }
        /* the first value of largest magnitude (its sign matters) */
        float vmax = 0.0f;
        for (int j = 0; j < PT_QK_K / 8; j++) {
            const __m256 v = _mm256_loadu_ps(xb + 8 * j);
            const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (hit) {
                vmax = xb[8 * j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / vmax;
        for (int c = 0; c < PT_QK_K / 32; c++) {
            __m256 v[4];
            for (int j = 0; j < 4; j++)
                v[j] = _mm256_loadu_ps(xb + 32 * c + 8 * j);
            act_round32(v, iscale, qb + 32 * c);
            /* sums of each 16: pairs by vpmaddubsw with 1s, then 4 at a time */
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(qb + 32 * c));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qv), _mm256_set1_epi16(1));
            __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            h = _mm_hadd_epi32(h, h); /* [sum 0..15, sum 16..31, ...] */
            bsum[b * 16 + 2 * c] = (int16_t)_mm_cvtsi128_si32(h);
            bsum[b * 16 + 2 * c + 1] = (int16_t)_mm_extract_epi32(h, 1);
        }
        d[b] = 1.0f / iscale;
    }
}

#endif
