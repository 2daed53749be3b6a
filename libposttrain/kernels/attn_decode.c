/* Attention of one new token (kernels/attention.h, pt__attn_decode) for
 * the query heads that share a key/value head: the keys are fetched from
 * memory once (the other heads read them from cache), and so are the
 * values (each head's pass over them after the first finds them in cache).
 *
 * The arithmetic, the same with AVX2 + FMA and without (the scalar code
 * does each vector lane's operations in the same order; it also serves a
 * head size that is not a multiple of 8):
 *   s_h[j] = scale * dot(K[j], q_h), the dot in 8 lanes (lane l sums
 *     K[j][d] q_h[d] for d = l mod 8, in order), then the lanes added as
 *     ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7));
 *   p_h = exp(s_h - max s_h) (kernels/vexp.h), sum_h their sum;
 *   o_h[d] = (sum over j in order of fma(p_h[j], V[j][d], .)) * (1 / sum_h).
 * So a row's result depends on its own cache only (not on the thread count
 * or the other rows).  A BF16 cache (pt__attn_decode_bf16) is the same
 * with each key and value widened to FP32 (exactly) as it is read. */
#include "kernels/attention.h"
#include "kernels/cpu.h"
#include "kernels/vexp.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#define AD_AVX2 1
#include <immintrin.h>
#else
#define AD_AVX2 0
#endif

#define AD_INLINE static inline __attribute__((always_inline))

/* Element i of a cache row: FP32, or BF16 (b16) widened exactly. */
AD_INLINE float ad_ld(const void *p, size_t i, bool b16)
{
    if (!b16)
        return ((const float *)p)[i];
    const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

AD_INLINE const void *ad_row(const void *base, size_t j, size_t hd, bool b16)
{
    return (const char *)base + j * hd * (b16 ? 2 : 4);
}

#if AD_AVX2
/* Elements i .. i + 8 of a cache row as 8 floats. */
AD_INLINE __m256 ad_ld8(const void *p, size_t i, bool b16)
{
    if (!b16)
        return _mm256_loadu_ps((const float *)p + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

/* ---- scores ---- */

/* A key's score from its 8 lanes: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). */
static inline float ad_tree8(const float *v)
{
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

#if AD_AVX2
/* Scores of the 8 keys idx[u] (u < 8) of K against q: lane l of key u's
 * vector sums K[d] q[d] for d = l mod 8 in order, then ad_tree8 on its
 * lanes by the horizontal adds. */
AD_INLINE void ad_dots8(float *s, const void *K, const size_t idx[8], const float *q, size_t hd,
                        float scale, bool b16)
{
    __m256 a[8];
    for (int u = 0; u < 8; u++)
        a[u] = _mm256_setzero_ps();
    for (size_t d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++)
            a[u] = _mm256_fmadd_ps(ad_ld8(ad_row(K, idx[u], hd, b16), d, b16), qv, a[u]);
    }
    /* hadd(x, y) = x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, x6+x7, y4+y5, y6+y7 */
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 g0 = _mm256_hadd_ps(h01, h23), g1 = _mm256_hadd_ps(h45, h67);
    const __m256 lo = _mm256_permute2f128_ps(g0, g1, 0x20), hi = _mm256_permute2f128_ps(g0, g1, 0x31);
    _mm256_storeu_ps(s, _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_add_ps(lo, hi)));
}
#endif

/* The same lane by lane, for any hd (lanes past hd add nothing). */
AD_INLINE void ad_dots8_c(float *s, const void *K, const size_t idx[8], const float *q, size_t hd,
                          float scale, bool b16)
{
    for (int u = 0; u < 8; u++) {
        const void *k = ad_row(K, idx[u], hd, b16);
        float a[8] = {0};
        for (size_t d = 0; d < hd; d += 8)
            for (size_t l = 0; l < 8 && d + l < hd; l++)
                a[l] = fmaf(ad_ld(k, d + l, b16), q[d + l], a[l]);
        s[u] = scale * ad_tree8(a);
    }
}

/* S[0 .. len) = scale K q: 8 keys at a time (the last ones repeated to
 * fill the 8, their scores dropped). */
AD_INLINE void ad_scores(float *S, const void *K, size_t len, const float *q, size_t hd,
                         float scale, bool vec, bool fetch, bool b16)
{
    for (size_t j = 0; j < len; j += 8) {
        size_t idx[8];
        float s[8];
        for (size_t u = 0; u < 8; u++)
            idx[u] = j + u < len ? j + u : len - 1;
#if AD_AVX2
        /* the cache streams from memory: keys a block ahead into L1, by
         * the first head only (1.1-1.2x; fetching the values into L2
         * meanwhile, or further ahead, measured no better) */
        const size_t rowb = hd * (b16 ? 2 : 4);
        for (size_t c = 0; c < 8 * rowb && fetch && j + 8 < len; c += 64)
            _mm_prefetch((const char *)ad_row(K, j + 8, hd, b16) + c, _MM_HINT_T0);
        if (vec)
            ad_dots8(s, K, idx, q, hd, scale, b16);
        else
#endif
            ad_dots8_c(s, K, idx, q, hd, scale, b16);
        for (size_t u = 0; u < 8 && j + u < len; u++)
            S[j + u] = s[u];
    }
}

/* ---- o = p V / sum ---- */

#if AD_AVX2
/* o[0 .. 8 ne) of one head: ne (<= 8) vectors of lanes over the keys
 * (V: the rows from column d0). */
AD_INLINE void ad_pv8(float *o, const float *p, const void *V, size_t d0, size_t hd, size_t len,
                      float inv, int ne, bool b16)
{
    __m256 acc[8];
    for (int e = 0; e < 8; e++)
        acc[e] = _mm256_setzero_ps();
    for (size_t j = 0; j < len; j++) {
        const __m256 pj = _mm256_broadcast_ss(p + j);
        const void *v = ad_row(V, j, hd, b16);
#pragma GCC unroll 8
        for (int e = 0; e < ne; e++)
            acc[e] = _mm256_fmadd_ps(pj, ad_ld8(v, d0 + 8 * (size_t)e, b16), acc[e]);
    }
    for (int e = 0; e < ne; e++)
        _mm256_storeu_ps(o + 8 * (size_t)e, _mm256_mul_ps(acc[e], _mm256_set1_ps(inv)));
}
#endif

/* o[d] = (sum over j in order of fma(p[j], V[j][d], .)) * inv. */
AD_INLINE void ad_pv(float *o, const float *p, const void *V, size_t hd, size_t len, float inv,
                     bool vec, bool b16)
{
#if AD_AVX2
    if (vec) {
        for (size_t d0 = 0; d0 < hd; d0 += 64) {
            if (hd - d0 >= 64)
                ad_pv8(o + d0, p, V, d0, hd, len, inv, 8, b16);
            else
                ad_pv8(o + d0, p, V, d0, hd, len, inv, (int)((hd - d0) / 8), b16);
        }
        return;
    }
#endif
    for (size_t d = 0; d < hd; d++) {
        float a = 0.0f;
        for (size_t j = 0; j < len; j++)
            a = fmaf(p[j], ad_ld(ad_row(V, j, hd, b16), d, b16), a);
        o[d] = a * inv;
    }
}

#if AD_AVX2
#define AD512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq")))

/* Elements i .. i + 16 of a cache row as 16 floats (BF16 widened exactly). */
AD512 AD_INLINE __m512 ad_ld16(const void *p, size_t i, bool b16)
{
    if (!b16)
        return _mm512_loadu_ps((const float *)p + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ad_pv for the G heads of a group at once on AVX-512 (hd a multiple of
 * 64): o_h[d] = (sum over j in order of fma(p_h[j], V[j][d], .)) * inv[h],
 * 16 lanes a vector, each value read once for the G heads (the AVX2 code
 * reads them once a head).  Lane d's operations are ad_pv's: the same
 * bits. */
AD512 AD_INLINE void ad_pv512(float *o, const float *S, const void *V, const int G, size_t hd, size_t len,
                              const float *inv, bool b16)
{
    for (size_t d0 = 0; d0 < hd; d0 += 64) {
        __m512 acc[4][4];
        for (int h = 0; h < G; h++)
            for (int e = 0; e < 4; e++)
                acc[h][e] = _mm512_setzero_ps();
        for (size_t j = 0; j < len; j++) {
            const void *v = ad_row(V, j, hd, b16);
            __m512 vv[4];
            for (int e = 0; e < 4; e++)
                vv[e] = ad_ld16(v, d0 + 16 * (size_t)e, b16);
            for (int h = 0; h < G; h++) {
                const __m512 pj = _mm512_set1_ps(S[(size_t)h * len + j]);
                for (int e = 0; e < 4; e++)
                    acc[h][e] = _mm512_fmadd_ps(pj, vv[e], acc[h][e]);
            }
        }
        for (int h = 0; h < G; h++)
            for (int e = 0; e < 4; e++)
                _mm512_storeu_ps(o + (size_t)h * hd + d0 + 16 * (size_t)e,
                                 _mm512_mul_ps(acc[h][e], _mm512_set1_ps(inv[h])));
    }
}

/* ad_pv512 for G = 1 .. 4 written out (the accumulators in registers);
 * group is 1 .. 4 (attn_decode's v512). */
AD512 static void ad_pv_avx512(float *o, const float *S, const void *V, int group, size_t hd, size_t len,
                               const float *inv, bool b16)
{
    switch (group) {
    case 1: ad_pv512(o, S, V, 1, hd, len, inv, b16); break;
    case 2: ad_pv512(o, S, V, 2, hd, len, inv, b16); break;
    case 3: ad_pv512(o, S, V, 3, hd, len, inv, b16); break;
    default: ad_pv512(o, S, V, 4, hd, len, inv, b16); break;
    }
}
#endif

AD_INLINE void attn_decode(float *o, const float *q, int group, size_t hd, const void *K,
                           const void *V, size_t len, float scale, float *S, bool vec, bool b16)
{
    /* every head's scores first (K read from memory once, then from L1 or
     * L2 for the other heads), then their softmax and values */
    for (int h = 0; h < group; h++)
        ad_scores(S + (size_t)h * len, K, len, q + (size_t)h * hd, hd, scale, vec, h == 0, b16);
#if AD_AVX2
    /* AVX-512: every head's values at once, after the softmaxes */
    const bool v512 = vec && group <= 4 && hd % 64 == 0 && pt__cpu_active() >= PT_CPU_AVX512;
#else
    const bool v512 = false;
#endif
    float inv[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int h = 0; h < group; h++) {
        float *Sh = S + (size_t)h * len;
        const float mx = pt__vmax(Sh, len);
        const float r = 1.0f / pt__vexp_sum(Sh, Sh, len, mx);
        if (v512)
            inv[h] = r;
        else
            ad_pv(o + (size_t)h * hd, Sh, V, hd, len, r, vec, b16);
    }
#if AD_AVX2
    if (v512)
        ad_pv_avx512(o, S, V, group, hd, len, inv, b16);
#endif
}

void pt__attn_decode(float *o, const float *q, int group, size_t hd, const float *K, const float *V,
                     size_t len, float scale, float *S)
{
    attn_decode(o, q, group, hd, K, V, len, scale, S, AD_AVX2 && hd % 8 == 0, false);
}

void pt__attn_decode_ref(float *o, const float *q, int group, size_t hd, const float *K,
                         const float *V, size_t len, float scale, float *S)
{
    attn_decode(o, q, group, hd, K, V, len, scale, S, false, false);
}

void pt__attn_decode_bf16(float *o, const float *q, int group, size_t hd, const uint16_t *K,
                          const uint16_t *V, size_t len, float scale, float *S)
{
    attn_decode(o, q, group, hd, K, V, len, scale, S, AD_AVX2 && hd % 8 == 0, true);
}

void pt__attn_decode_bf16_ref(float *o, const float *q, int group, size_t hd, const uint16_t *K,
                              const uint16_t *V, size_t len, float scale, float *S)
{
    attn_decode(o, q, group, hd, K, V, len, scale, S, false, true);
}
