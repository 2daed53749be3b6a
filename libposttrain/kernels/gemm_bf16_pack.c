/* Packing for the BF16 GEMM (kernels/gemm_bf16.h): a panel of R rows of
 * op(A) or columns of op(B) over a block of k, as k-pair words (the BF16 of
 * k = 2p in the low half, 2p + 1 in the high half), or split for the FMA
 * kernel (per k-pair the R high halves, then the R low halves, each as an
 * FP32 bit pattern).  FP32 operands are rounded as pt__f32_to_bf16 does;
 * rows past rn and the high half of an odd k's last pair are zeros.  The
 * result depends on the operand alone, whichever loop below produced it. */
#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

static inline __attribute__((always_inline)) uint32_t bf16_at(const void *p, bool bf16, size_t i)
{
    return bf16 ? ((const pt_bf16 *)p)[i] : pt__f32_to_bf16(((const float *)p)[i]);
}

/* The pair (lo, hi) of row r, pair q, into dst. */
static inline __attribute__((always_inline)) void put(uint32_t *dst, size_t R, size_t q, size_t r,
                                                      uint32_t lo, uint32_t hi, bool split)
{
    if (split) {
        dst[2 * q * R + r] = hi << 16;
        dst[2 * q * R + R + r] = lo << 16;
    } else {
        dst[q * R + r] = lo | hi << 16;
    }
}

/* Element (r, kk) at p[kk * ld + r]: contiguous along r (vectorised). */
static inline __attribute__((always_inline)) void pack_kmajor(const void *p, size_t ld, bool bf16,
                                                              size_t r0, size_t rn, size_t R,
                                                              size_t k0, size_t kn, uint32_t *dst,
                                                              bool split)
{
    for (size_t q = 0; q < (kn + 1) / 2; q++) {
        size_t kk = k0 + 2 * q;
        if (2 * q + 1 < kn)
            for (size_t r = 0; r < rn; r++)
                put(dst, R, q, r, bf16_at(p, bf16, kk * ld + r0 + r),
                    bf16_at(p, bf16, (kk + 1) * ld + r0 + r), split);
        else
            for (size_t r = 0; r < rn; r++)
                put(dst, R, q, r, bf16_at(p, bf16, kk * ld + r0 + r), 0, split);
        for (size_t r = rn; r < R; r++)
            put(dst, R, q, r, 0, 0, split);
    }
}

/* Element (r, kk) at p[r * ld + kk]: the pairs of rows r .. r+3 from pair
 * q0 on, done by the caller for q < qdone; the rest here. */
static inline __attribute__((always_inline)) void pack_rmajor_tail(const void *p, size_t ld,
                                                                   bool bf16, size_t r0, size_t r,
                                                                   size_t R, size_t k0, size_t kn,
                                                                   size_t qdone, uint32_t *dst,
                                                                   bool split)
{
    size_t np = (kn + 1) / 2, full = kn / 2, base = (r0 + r) * ld + k0;
    for (size_t q = qdone; q < full; q++)
        put(dst, R, q, r, bf16_at(p, bf16, base + 2 * q), bf16_at(p, bf16, base + 2 * q + 1),
            split);
    if (full < np)
        put(dst, R, full, r, bf16_at(p, bf16, base + 2 * full), 0, split);
}

#if defined(__AVX2__)
/* Four pair words from eight values of one row. */
static inline __attribute__((always_inline)) __m128i words4(const void *p, bool bf16, size_t i)
{
    if (bf16)
        return _mm_loadu_si128((const __m128i *)((const pt_bf16 *)p + i));
    __m256i u = _mm256_loadu_si256((const __m256i *)((const float *)p + i));
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rnd = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i h = _mm256_blendv_epi8(rnd, qn, nan);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
    return _mm256_castsi256_si128(packed);
}

/* Rows r .. r+3 (of r0 + ...), pairs q .. q+3: a 4 x 4 transpose of words. */
static inline __attribute__((always_inline)) void rows4_pairs4(const void *p, size_t ld, bool bf16,
                                                               size_t r0, size_t r, size_t R,
                                                               size_t k0, size_t q, uint32_t *dst,
                                                               bool split)
{
    __m128 w0 = _mm_castsi128_ps(words4(p, bf16, (r0 + r) * ld + k0 + 2 * q));
    __m128 w1 = _mm_castsi128_ps(words4(p, bf16, (r0 + r + 1) * ld + k0 + 2 * q));
    __m128 w2 = _mm_castsi128_ps(words4(p, bf16, (r0 + r + 2) * ld + k0 + 2 * q));
    __m128 w3 = _mm_castsi128_ps(words4(p, bf16, (r0 + r + 3) * ld + k0 + 2 * q));
    _MM_TRANSPOSE4_PS(w0, w1, w2, w3);
    __m128i t[4] = { _mm_castps_si128(w0), _mm_castps_si128(w1), _mm_castps_si128(w2),
                     _mm_castps_si128(w3) };
    for (int j = 0; j < 4; j++) {
        if (split) {
            __m128i hi = _mm_and_si128(t[j], _mm_set1_epi32((int)0xffff0000u));
            _mm_storeu_si128((__m128i *)(dst + 2 * (q + j) * R + r), hi);
            _mm_storeu_si128((__m128i *)(dst + 2 * (q + j) * R + R + r), _mm_slli_epi32(t[j], 16));
        } else {
            _mm_storeu_si128((__m128i *)(dst + (q + j) * R + r), t[j]);
        }
    }
}
#endif

static inline __attribute__((always_inline)) void pack_rmajor(const void *p, size_t ld, bool bf16,
                                                              size_t r0, size_t rn, size_t R,
                                                              size_t k0, size_t kn, uint32_t *dst,
                                                              bool split)
{
    size_t np = (kn + 1) / 2, r = 0;
#if defined(__AVX2__)
    size_t q4 = kn / 8 * 4; /* whole groups of 4 pairs */
    for (; r + 4 <= rn; r += 4) {
        for (size_t q = 0; q < q4; q += 4)
            rows4_pairs4(p, ld, bf16, r0, r, R, k0, q, dst, split);
        for (size_t i = 0; i < 4; i++)
            pack_rmajor_tail(p, ld, bf16, r0, r + i, R, k0, kn, q4, dst, split);
    }
#endif
    for (; r < rn; r++)
        pack_rmajor_tail(p, ld, bf16, r0, r, R, k0, kn, 0, dst, split);
    for (size_t q = 0; q < np; q++)
        for (r = rn; r < R; r++)
            put(dst, R, q, r, 0, 0, split);
}

void pt__bf16_pack(const pt_gemm_operand *x, size_t r0, size_t rn, size_t R, size_t k0, size_t kn,
                  uint32_t *dst, bool split)
{
    /* each combination its own loop, the flags constant in it */
    int v = (x->kmajor ? 4 : 0) | (x->bf16 ? 2 : 0) | (split ? 1 : 0);
    switch (v) {
    case 0: pack_rmajor(x->p, x->ld, false, r0, rn, R, k0, kn, dst, false); break;
    case 1: pack_rmajor(x->p, x->ld, false, r0, rn, R, k0, kn, dst, true); break;
    case 2: pack_rmajor(x->p, x->ld, true, r0, rn, R, k0, kn, dst, false); break;
    case 3: pack_rmajor(x->p, x->ld, true, r0, rn, R, k0, kn, dst, true); break;
    case 4: pack_kmajor(x->p, x->ld, false, r0, rn, R, k0, kn, dst, false); break;
    case 5: pack_kmajor(x->p, x->ld, false, r0, rn, R, k0, kn, dst, true); break;
    case 6: pack_kmajor(x->p, x->ld, true, r0, rn, R, k0, kn, dst, false); break;
    default: pack_kmajor(x->p, x->ld, true, r0, rn, R, k0, kn, dst, true); break;
    }
}
