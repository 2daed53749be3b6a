/* The kernels for the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
 * of kernels/qgemv.h, written once and included by kernels/qgemv_avx2.c
 * and qgemv_avx512.c after they define
 *   QG_TARGET   the function attribute of the path (may be empty)
 *   QG_VNNI     1: integer dots with vpdpbusd (AVX512_VNNI on 256-bit
 *               vectors); 0: AVX2's vpmaddubsw + vpmaddwd.
 *
 * A W row is walked 8 blocks at a time: the 8 blocks are unpacked once into
 * unsigned bytes (Q8_0 on AVX2: |w| and w, for the sign trick; with VNNI:
 * w + 128) and then run against every row of x.  For each x row the 8 dot
 * products become 8 int32 vectors, summed across their lanes into one
 * vector of 8 exact block sums (qg_reduce8), corrected for the weights'
 * offset with the activation block sums (sum (w - o) q = sum w q - o sum q),
 * converted to float and combined lane by lane with the block scales: the
 * operations of kernels/qgemv.h with lane l = block % 8.
 *
 * Integer ranges: x's q are in [-127, 127] and the unsigned weights at most
 * 31 (or |w| <= 128 for Q8_0), so vpmaddubsw's pair sums stay within int16
 * (2 * 128 * 127 = 32512) and nothing saturates; vpdpbusd adds into int32
 * without saturation. */
#include "kernels/qgemv.h"

#include "io/gguf.h"

#include <immintrin.h>
#include <string.h>

#define QG_INLINE static inline __attribute__((always_inline)) QG_TARGET
/* Rows of x per pass over a W row (their accumulators live on the stack). */
#define QX_MAX 16
/* Bytes ahead of the m = 1 kernels' reads that they prefetch W.  Decoding
 * streams W from memory, where one core's bandwidth is bounded by the
 * misses it keeps in flight: 4096 measured 1.13-1.22x faster than 1024 on
 * the Q8_0, Q4_0 and Q4_K_M SmolLM2-135M-shaped files (bench_decode, batch
 * 1 from an empty cache, 2 threads, Sapphire Rapids; 8192 no better).  (On
 * the 49152 x 576 LM head from the last-level cache 1024 had measured
 * 1.1-1.2x faster than none.) */
#define QG_PF 4096

/* Lane e = the sum of the 8 int32 lanes of v[e] (exact). */
QG_INLINE __m256i qg_reduce8(const __m256i v[8])
{
    const __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
    /* per 128-bit half: [v0 v1 v2 v3] partial sums (low half: lanes 0..3) */
    const __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20),
                            _mm256_permute2x128_si256(g0, g1, 0x31));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (values 0..15), then high. */
QG_INLINE __m256i qg_nibbles(const uint8_t *p)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)p), f = _mm_set1_epi8(0xF);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), f), _mm_and_si128(q, f));
}

/* Bit j of the little-endian 32 bits at p -> 0x10 in byte j. */
QG_INLINE __m256i qg_high_bits(const uint8_t *p)
{
    uint32_t h;
    memcpy(&h, p, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Q4_1 and Q5_1: blocks with a min (W's m in kernels/qgemv.h's sum). */
QG_INLINE bool qg_has_min(const int type)
{
    return type == PT_GGML_Q4_1 || type == PT_GGML_Q5_1;
}

typedef struct qg_w32 {
    _Alignas(64) uint8_t q[8 * PT_QK]; /* unsigned weights */
    _Alignas(32) int8_t s[8 * PT_QK];  /* Q8_0 on AVX2: the signed weights */
    _Alignas(32) float d[8], m[8];     /* scale and min of each block */
} qg_w32;

/* Block bp of W into slot e of wb. */
QG_INLINE void qg_unpack32(const int type, const uint8_t *bp, qg_w32 *wb, int e)
{
    __m256i *q = (__m256i *)(void *)(wb->q + e * PT_QK);
    wb->d[e] = pt__q_f16(bp);
    wb->m[e] = qg_has_min(type) ? pt__q_f16(bp + 2) : 0.0f;
    switch (type) {
    case PT_GGML_Q8_0: {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(bp + 2));
#if QG_VNNI
        _mm256_store_si256(q, _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)));
#else
        _mm256_store_si256((__m256i *)(void *)(wb->s + e * PT_QK), w);
        _mm256_store_si256(q, _mm256_abs_epi8(w));
#endif
        break;
    }
    case PT_GGML_Q4_0: _mm256_store_si256(q, qg_nibbles(bp + 2)); break;
    case PT_GGML_Q4_1: _mm256_store_si256(q, qg_nibbles(bp + 4)); break;
    case PT_GGML_Q5_0:
        _mm256_store_si256(q, _mm256_or_si256(qg_nibbles(bp + 6), qg_high_bits(bp + 2)));
        break;
    default: /* PT_GGML_Q5_1 */
        _mm256_store_si256(q, _mm256_or_si256(qg_nibbles(bp + 8), qg_high_bits(bp + 4)));
        break;
    }
}

#if QG_VNNI
/* Lane i of the result: the sum of the 8 int32 lanes of block i, where
 * z[p] holds blocks 2p (low 256 bits) and 2p + 1 (exact). */
QG_INLINE __m256i qg_reduce8x2(const __m512i z[4])
{
    /* per 128-bit lane: [b0 b1 b2 b3] and [b4 b5 b6 b7], 4 partial sums each */
    const __m512i t0 = _mm512_add_epi32(_mm512_shuffle_i32x4(z[0], z[1], 0x88),
                                        _mm512_shuffle_i32x4(z[0], z[1], 0xDD));
    const __m512i t1 = _mm512_add_epi32(_mm512_shuffle_i32x4(z[2], z[3], 0x88),
                                        _mm512_shuffle_i32x4(z[2], z[3], 0xDD));
    __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(t0, t1), _mm512_unpackhi_epi32(t0, t1));
    u = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
    /* 128-bit lane i: [S(b_i), S(b_4+i), ...] */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, u));
}
#endif

/* The 8 blocks' sums of w_j q_j (blocks from nbg on: 0), exact.  AVX2: one
 * block a vector (Q8_0's signed weights by the sign trick); VNNI: two
 * blocks a 512-bit vpdpbusd. */
QG_INLINE __m256i qg_sums8(const int type, const qg_w32 *wb, const int8_t *xq, int nbg)
{
#if QG_VNNI
    (void)type;
    __m512i z[4];
    for (int p = 0; p < 4; p++)
        z[p] = 2 * p < nbg ? _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                 _mm512_load_si512((const void *)(wb->q + 64 * p)),
                                                 _mm512_loadu_si512((const void *)(xq + 64 * p)))
                           : _mm512_setzero_si512();
    return qg_reduce8x2(z);
#else
    __m256i v[8];
    for (int e = 0; e < 8; e++) {
        if (e >= nbg) {
            v[e] = _mm256_setzero_si256();
            continue;
        }
        const __m256i w = _mm256_load_si256((const __m256i *)(const void *)(wb->q + e * PT_QK));
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + e * PT_QK));
        if (type == PT_GGML_Q8_0)
            x = _mm256_sign_epi8(x, _mm256_load_si256((const __m256i *)(const void *)(wb->s + e * PT_QK)));
        v[e] = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
    }
    return qg_reduce8(v);
#endif
}

/* log2 of the offset o subtracted from the unsigned weights (0: none). */
QG_INLINE int qg_offset_shift(const int type)
{
    switch (type) {
    case PT_GGML_Q4_0: return 3;
    case PT_GGML_Q5_0: return 4;
    case PT_GGML_Q8_0: return QG_VNNI ? 7 : 0;
    default: return 0;
    }
}

/* The accumulators of rows i0 .. i0 + mc of x over one W row (wr, nb
 * blocks of `bytes`), then the stores. */
QG_INLINE void qg_row32(const int type, const pt_qact *a, size_t i0, size_t mc, const uint8_t *wr,
                        size_t nb, size_t bytes, qg_w32 *wb, float alpha, float beta, float *y,
                        size_t ldy)
{
    const int sh = qg_offset_shift(type);
    const bool min = qg_has_min(type);
    __m256 acc[QX_MAX];
    for (size_t c = 0; c < mc; c++)
        acc[c] = _mm256_setzero_ps();
    for (size_t g = 0; g < nb; g += 8) {
        const int nbg = nb - g < 8 ? (int)(nb - g) : 8;
        for (int e = 0; e < nbg; e++)
            qg_unpack32(type, wr + (g + (size_t)e) * bytes, wb, e);
        for (int e = nbg; e < 8; e++) /* x is 0 there: only the scales matter */
            wb->d[e] = wb->m[e] = 0.0f;
        const __m256 wd = _mm256_load_ps(wb->d), wm = _mm256_load_ps(wb->m);
        for (size_t c = 0; c < mc; c++) {
            const size_t row = i0 + c, at = row * a->nbp + g;
            const int8_t *xq = a->q + row * a->kp + g * PT_QK;
            __m256i isum = qg_sums8(type, wb, xq, nbg);
            if (sh)
                isum = _mm256_sub_epi32(
                    isum, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(a->sum + at)), sh));
            const __m256 dd = _mm256_mul_ps(wd, _mm256_loadu_ps(a->d + at));
            acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[c]);
            if (min)
                acc[c] = _mm256_fmadd_ps(wm, _mm256_loadu_ps(a->s + at), acc[c]);
        }
    }
    for (size_t c = 0; c < mc; c++) {
        float o[8];
        _mm256_storeu_ps(o, acc[c]);
        pt__qgemv_store(o, alpha, beta, &y[(i0 + c) * ldy]);
    }
}

/* Where a 4- or 5-bit block's 16 bytes of nibbles start (Q5_0/Q5_1: their
 * 32 fifth bits, little-endian, are the 4 bytes before). */
QG_INLINE int qg_nib_off(const int type)
{
    return type == PT_GGML_Q4_0 ? 2 : type == PT_GGML_Q4_1 ? 4 : type == PT_GGML_Q5_0 ? 6 : 8;
}

/* One block's weights in a register: unsigned (Q8_0: w + 128 with VNNI,
 * the signed w on AVX2).  With VNNI (AVX-512 BW/VL here) the nibbles are
 * broadcast to both 128-bit halves, the high half shifted right by 4, and
 * Q5_0/Q5_1's fifth bits added as 0x10 under the mask they form (Q5_0: 5
 * instructions against 11; 16-row products 5-8% faster on a Zen 5 when
 * that kernel still unpacked Q5_0 row by row with it). */
QG_INLINE __m256i qg_wvec(const int type, const uint8_t *bp)
{
    if (type == PT_GGML_Q8_0) {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(bp + 2));
        return QG_VNNI ? _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)) : w;
    }
    const int o = qg_nib_off(type);
    const bool five = type == PT_GGML_Q5_0 || type == PT_GGML_Q5_1;
#if QG_VNNI
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(bp + o)));
    v = _mm256_and_si256(_mm256_srlv_epi16(v, _mm256_setr_epi64x(0, 0, 0x0004000400040004LL, 0x0004000400040004LL)),
                         _mm256_set1_epi8(0xF));
    if (five) {
        uint32_t h;
        memcpy(&h, bp + o - 4, 4);
        v = _mm256_mask_add_epi8(v, (__mmask32)h, v, _mm256_set1_epi8(0x10));
    }
    return v;
#else
    return five ? _mm256_or_si256(qg_nibbles(bp + o), qg_high_bits(bp + o - 4)) : qg_nibbles(bp + o);
#endif
}

/* 8 int32 lanes summing to the block's sum of w q (w from qg_wvec). */
QG_INLINE __m256i qg_dotw(const int type, __m256i w, __m256i x)
{
#if QG_VNNI
    (void)type;
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#else
    if (type == PT_GGML_Q8_0)
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)),
                                 _mm256_set1_epi16(1));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
#endif
}

#if QG_VNNI
/* Two blocks' weights (qg_wvec) in one 512-bit vector: b0 low, b1 high.
 * Q4_0/Q4_1: each block's 16 bytes of nibbles broadcast to two 128-bit
 * lanes, the second shifted right by 4 (4 instructions for 2 blocks). */
QG_INLINE __m512i qg_wvec2(const int type, const uint8_t *b0, const uint8_t *b1)
{
    if (type == PT_GGML_Q8_0)
        return _mm512_inserti64x4(_mm512_castsi256_si512(qg_wvec(type, b0)), qg_wvec(type, b1), 1);
    const int o = qg_nib_off(type);
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(b0 + o)));
    v = _mm512_mask_broadcast_i32x4(v, 0xFF00, _mm_loadu_si128((const __m128i *)(const void *)(b1 + o)));
    const __m512i sh = _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0,
                                         0x0004000400040004LL, 0x0004000400040004LL);
    v = _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0xF));
    if (type == PT_GGML_Q5_0 || type == PT_GGML_Q5_1) {
        uint32_t h0, h1;
        memcpy(&h0, b0 + o - 4, 4);
        memcpy(&h1, b1 + o - 4, 4);
        v = _mm512_mask_blend_epi8((__mmask64)h0 | (__mmask64)h1 << 32, v,
                                   _mm512_or_si512(v, _mm512_set1_epi8(0x10)));
    }
    return v;
}
#endif

/* One row of x (m = 1, decoding one sequence) against one W row: the same
 * operations as qg_row32, with the weights straight from the blocks into
 * registers (no unpacked copy to share among x rows). */
QG_INLINE void qg_row32_one(const int type, const pt_qact *a, const uint8_t *wr, size_t nb,
                            size_t bytes, float alpha, float beta, float *y)
{
    const int sh = qg_offset_shift(type);
    const bool min = qg_has_min(type);
    __m256 acc = _mm256_setzero_ps();
    for (size_t g = 0; g < nb; g += 8) {
        const int nbg = nb - g < 8 ? (int)(nb - g) : 8;
        const uint8_t *bp = wr + g * bytes;
        const int8_t *xq = a->q + g * PT_QK;
        for (size_t c = 0; c < 8 * bytes; c += 64) /* W streams in ahead (a hint: never faults) */
            __builtin_prefetch((const void *)((uintptr_t)bp + QG_PF + c), 0, 3);
#if QG_VNNI
        /* the first 4 bytes of each block (d, and Q4_1/Q5_1's m) by one
         * gather; blocks past the row's end: 0 */
        const __m256i dw = _mm256_mmask_i32gather_epi32(
            _mm256_setzero_si256(), (__mmask8)((1u << nbg) - 1), _mm256_mullo_epi32(
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)bytes)), bp, 1);
        const __m128i dhv = _mm256_cvtepi32_epi16(dw), mhv = _mm256_cvtepi32_epi16(_mm256_srli_epi32(dw, 16));
        /* two blocks a 512-bit vpdpbusd (x is 0 past the row's blocks: a
         * missing second block repeats the first, never read past W) */
        __m512i z[4];
        for (int p = 0; p < 4; p++) {
            z[p] = _mm512_setzero_si512();
            if (2 * p >= nbg)
                continue;
            const uint8_t *b0 = bp + (size_t)(2 * p) * bytes;
            z[p] = _mm512_dpbusd_epi32(z[p], qg_wvec2(type, b0, 2 * p + 1 < nbg ? b0 + bytes : b0),
                                       _mm512_loadu_si512((const void *)(xq + 64 * p)));
        }
        __m256i isum = qg_reduce8x2(z);
#else
        uint16_t dh[8], mh[8];
        for (int e = 0; e < 8; e++) {
            dh[e] = mh[e] = 0;
            if (e < nbg)
                memcpy(&dh[e], bp + (size_t)e * bytes, 2);
            if (e < nbg && min)
                memcpy(&mh[e], bp + (size_t)e * bytes + 2, 2);
        }
        const __m128i dhv = _mm_loadu_si128((const __m128i *)(const void *)dh);
        const __m128i mhv = _mm_loadu_si128((const __m128i *)(const void *)mh);
        __m256i v[8];
        for (int e = 0; e < 8; e++)
            v[e] = e < nbg ? qg_dotw(type, qg_wvec(type, bp + (size_t)e * bytes),
                                     _mm256_loadu_si256((const __m256i *)(const void *)(xq + e * PT_QK)))
                           : _mm256_setzero_si256();
        __m256i isum = qg_reduce8(v);
#endif
        if (sh)
            isum = _mm256_sub_epi32(
                isum, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(a->sum + g)), sh));
        const __m256 wd = _mm256_cvtph_ps(dhv);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(wd, _mm256_loadu_ps(a->d + g)), _mm256_cvtepi32_ps(isum), acc);
        if (min)
            acc = _mm256_fmadd_ps(_mm256_cvtph_ps(mhv), _mm256_loadu_ps(a->s + g), acc);
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    pt__qgemv_store(o, alpha, beta, y);
}

/* ---- K-quants ---- */

typedef struct qg_wk {
    _Alignas(64) uint8_t q[8][PT_QK_K]; /* unsigned weights */
    _Alignas(64) int16_t sv[8][8][16];  /* per 32 values: the scale of each 16 */
    _Alignas(32) int16_t mn[8][16];     /* Q4_K/Q5_K: the min of each 16; Q6_K: the scale */
    _Alignas(32) float d[8], dm[8];     /* d and dmin */
} qg_wk;

/* The 8 6-bit scales (bytes 0..7) and mins (8..15) packed in a Q4_K/Q5_K
 * block's 12 bytes, all at once (ggml's get_scale_min_k4 for j = 0..7:
 * j < 4: scale q[j] & 63, min q[j+4] & 63; j >= 4: the low 4 bits from
 * q[j+4] (scale: low nibble, min: high) and the high 2 from the top bits
 * of q[j-4] (scale) or q[j] (min)). */
QG_INLINE __m128i qg_scales_mins(const uint8_t *q)
{
    uint32_t u[3];
    memcpy(u, q, sizeof u);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    return _mm_setr_epi32((int)(u[0] & m6), (int)((u[2] & m4) | ((u[0] >> 6) & m2) << 4),
                          (int)(u[1] & m6), (int)(((u[2] >> 4) & m4) | ((u[1] >> 6) & m2) << 4));
}

/* Bit `bit` of each byte of h -> 0x10. */
QG_INLINE __m256i qg_bit16(__m256i h, int bit)
{
    const __m256i m = _mm256_set1_epi8((char)(1 << bit));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, m), m), _mm256_set1_epi8(0x10));
}

/* The 256 unsigned values of a Q4_K (five false) or Q5_K super-block bp,
 * in order, into q. */
QG_INLINE void qg_values_q45k(const uint8_t *bp, bool five, uint8_t *q)
{
    const uint8_t *qs = bp + (five ? 48 : 16);
    const __m256i f = _mm256_set1_epi8(0xF);
    const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(bp + 16)) : _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        __m256i lo = _mm256_and_si256(v, f), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), f);
        if (five) {
            lo = _mm256_or_si256(lo, qg_bit16(qh, 2 * j));
            hi = _mm256_or_si256(hi, qg_bit16(qh, 2 * j + 1));
        }
        _mm256_store_si256((__m256i *)(void *)&q[64 * j], lo);
        _mm256_store_si256((__m256i *)(void *)&q[64 * j + 32], hi);
    }
}

/* The 256 unsigned 6-bit values of a Q6_K super-block bp, in order, into q. */
QG_INLINE void qg_values_q6k(const uint8_t *bp, uint8_t *q)
{
    const __m256i f = _mm256_set1_epi8(0xF);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = bp + 64 * h;
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(bp + 128 + 32 * h));
        /* bits 2t, 2t+1 of hb are bits 4, 5 of the values 32 t + l */
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x03)), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x0C)), 2);
        const __m256i h2 = _mm256_and_si256(hb, _mm256_set1_epi8(0x30));
        const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8((char)0xC0)), 2);
        uint8_t *qq = q + 128 * h;
        _mm256_store_si256((__m256i *)(void *)qq, _mm256_or_si256(_mm256_and_si256(l0, f), h0));
        _mm256_store_si256((__m256i *)(void *)(qq + 32), _mm256_or_si256(_mm256_and_si256(l1, f), h1));
        _mm256_store_si256((__m256i *)(void *)(qq + 64),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), f), h2));
        _mm256_store_si256((__m256i *)(void *)(qq + 96),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), f), h3));
    }
}

/* Q4_K (five false) or Q5_K super-block bp into slot e. */
QG_INLINE void qg_unpack_q45k(const uint8_t *bp, bool five, qg_wk *wb, int e)
{
    wb->d[e] = pt__q_f16(bp);
    wb->dm[e] = pt__q_f16(bp + 2);
    const __m128i sm = qg_scales_mins(bp + 4);
    _Alignas(32) int16_t s16[16];
    _mm256_store_si256((__m256i *)(void *)s16, _mm256_cvtepu8_epi16(sm));
    for (int s = 0; s < 8; s++)
        _mm256_store_si256((__m256i *)(void *)wb->sv[e][s], _mm256_set1_epi16(s16[s]));
    /* the min of each 16: m0 m0 m1 m1 ... */
    _mm256_store_si256((__m256i *)(void *)wb->mn[e], _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)));
    qg_values_q45k(bp, five, wb->q[e]);
}

QG_INLINE void qg_unpack_q6k(const uint8_t *bp, qg_wk *wb, int e)
{
    const __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)(bp + 192));
    wb->d[e] = pt__q_f16(bp + 208);
    wb->dm[e] = 0.0f;
    for (int t = 0; t < 8; t++) { /* [sc 2t x 8, sc 2t+1 x 8] */
        const __m128i pick = _mm_setr_epi8((char)(2 * t), (char)(2 * t), (char)(2 * t), (char)(2 * t),
                                           (char)(2 * t), (char)(2 * t), (char)(2 * t), (char)(2 * t),
                                           (char)(2 * t + 1), (char)(2 * t + 1), (char)(2 * t + 1),
                                           (char)(2 * t + 1), (char)(2 * t + 1), (char)(2 * t + 1),
                                           (char)(2 * t + 1), (char)(2 * t + 1));
        _mm256_store_si256((__m256i *)(void *)wb->sv[e][t], _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, pick)));
    }
    _mm256_store_si256((__m256i *)(void *)wb->mn[e], _mm256_cvtepi8_epi16(sc));
    qg_values_q6k(bp, wb->q[e]);
}

/* Super-block e against x's block at xq (bs: its sums of 16): I's and J's
 * lanes (J only for Q4_K/Q5_K). */
QG_INLINE void qg_dotk(const int type, const qg_wk *wb, int e, const int8_t *xq, const int16_t *bs,
                       __m256i *vi, __m256i *vj)
{
#if QG_VNNI
    /* 64 values a step: vpmaddubsw pairs, then vpdpwssd by the scales (in
     * sv: 16 int16 per 32 values, so two rows of sv cover 64). */
    __m512i z = _mm512_setzero_si512();
    for (int c = 0; c < 4; c++) {
        const __m512i w = _mm512_load_si512((const void *)&wb->q[e][64 * c]);
        const __m512i x = _mm512_loadu_si512((const void *)(xq + 64 * c));
        const __m512i sc = _mm512_load_si512((const void *)wb->sv[e][2 * c]);
        z = _mm512_dpwssd_epi32(z, _mm512_maddubs_epi16(w, x), sc);
    }
    __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));
#else
    __m256i s = _mm256_setzero_si256();
    for (int t = 0; t < 8; t++) {
        const __m256i w = _mm256_load_si256((const __m256i *)(const void *)&wb->q[e][32 * t]);
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * t));
        const __m256i sc = _mm256_load_si256((const __m256i *)(const void *)wb->sv[e][t]);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), sc));
    }
#endif
    const __m256i b = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(const void *)wb->mn[e]),
                                        _mm256_loadu_si256((const __m256i *)(const void *)bs));
    if (type == PT_GGML_Q6_K) {
        *vi = _mm256_sub_epi32(s, _mm256_slli_epi32(b, 5));
        *vj = _mm256_setzero_si256();
    } else {
        *vi = s;
        *vj = b;
    }
}

/* Rows i0 .. i0 + mc of x against one W row (wr, nb super-blocks). */
QG_INLINE void qg_rowk(const int type, const pt_qact *a,
                                                          size_t i0, size_t mc, const uint8_t *wr,
                                                          size_t nb, size_t bytes, qg_wk *wb,
                                                          float alpha, float beta, float *y,
                                                          size_t ldy)
{
    __m256 acc[QX_MAX];
    for (size_t c = 0; c < mc; c++)
        acc[c] = _mm256_setzero_ps();
    for (size_t g = 0; g < nb; g += 8) {
        const int nbg = nb - g < 8 ? (int)(nb - g) : 8;
        for (int e = 0; e < nbg; e++) {
            if (type == PT_GGML_Q6_K)
                qg_unpack_q6k(wr + (g + (size_t)e) * bytes, wb, e);
            else
                qg_unpack_q45k(wr + (g + (size_t)e) * bytes, type == PT_GGML_Q5_K, wb, e);
        }
        for (int e = nbg; e < 8; e++)
            wb->d[e] = wb->dm[e] = 0.0f;
        const __m256 wd = _mm256_load_ps(wb->d), wdm = _mm256_load_ps(wb->dm);
        for (size_t c = 0; c < mc; c++) {
            const size_t row = i0 + c, at = row * a->nbp + g;
            const int8_t *xq = a->q + row * a->kp + g * PT_QK_K;
            __m256i vi[8], vj[8];
            for (int e = 0; e < 8; e++) {
                if (e < nbg)
                    qg_dotk(type, wb, e, xq + (size_t)e * PT_QK_K, a->bsum + (at + (size_t)e) * 16,
                            &vi[e], &vj[e]);
                else
                    vi[e] = vj[e] = _mm256_setzero_si256();
            }
            const __m256 dx = _mm256_loadu_ps(a->d + at);
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(wd, dx), _mm256_cvtepi32_ps(qg_reduce8(vi)), acc[c]);
            if (type != PT_GGML_Q6_K) {
                const __m256 nm = _mm256_xor_ps(_mm256_mul_ps(wdm, dx), _mm256_set1_ps(-0.0f));
                acc[c] = _mm256_fmadd_ps(nm, _mm256_cvtepi32_ps(qg_reduce8(vj)), acc[c]);
            }
        }
    }
    for (size_t c = 0; c < mc; c++) {
        float o[8];
        _mm256_storeu_ps(o, acc[c]);
        pt__qgemv_store(o, alpha, beta, &y[(i0 + c) * ldy]);
    }
}

/* Q4_K (five false) or Q5_K super-block bp against x's block at xq (bs:
 * its sums of 16) straight from the block (m = 1): I's and J's lanes, as
 * qg_unpack_q45k + qg_dotk give them. */
QG_INLINE void qg_dotk45_one(const uint8_t *bp, bool five, const int8_t *xq, const int16_t *bs,
                             __m256i *vi, __m256i *vj)
{
    const __m128i sm = qg_scales_mins(bp + 4);
    /* the 8 scales as int16 in both halves; sub-block s picks bytes 2s, 2s+1 */
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    *vj = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)),
                            _mm256_loadu_si256((const __m256i *)(const void *)bs));
    const uint8_t *qs = bp + (five ? 48 : 16);
    const __m256i f = _mm256_set1_epi8(0xF);
    const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(const void *)(bp + 16))
                            : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * j));
        __m256i lo = _mm256_and_si256(v, f), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), f);
        if (five) {
            lo = _mm256_or_si256(lo, qg_bit16(qh, 2 * j));
            hi = _mm256_or_si256(hi, qg_bit16(qh, 2 * j + 1));
        }
        const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)((4 * j + 1) << 8 | 4 * j)));
        const __m256i shi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)((4 * j + 3) << 8 | (4 * j + 2))));
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 64 * j));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 64 * j + 32));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), slo));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), shi));
    }
    *vi = acc;
}

/* Q6_K the same way (qg_unpack_q6k + qg_dotk). */
QG_INLINE void qg_dotk6_one(const uint8_t *bp, const int8_t *xq, const int16_t *bs, __m256i *vi)
{
    const __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)(bp + 192));
    const __m256i corr = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc),
                                           _mm256_loadu_si256((const __m256i *)(const void *)bs));
    const __m256i f = _mm256_set1_epi8(0xF);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = bp + 64 * h;
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)ql);
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(bp + 128 + 32 * h));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, f),
                               _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x03)), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, f),
                               _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x0C)), 2));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), f),
                               _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), f),
                               _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8((char)0xC0)), 2));
        for (int r = 0; r < 4; r++) {
            const int t = 4 * h + r; /* values 32 t .. 32 t + 31: scales 2t, 2t + 1 */
            const __m128i pick = _mm_unpacklo_epi64(_mm_set1_epi8((char)(2 * t)), _mm_set1_epi8((char)(2 * t + 1)));
            const __m256i scv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, pick));
            const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * t));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], x), scv));
        }
    }
    *vi = _mm256_sub_epi32(acc, _mm256_slli_epi32(corr, 5));
}

/* One row of x (m = 1) against one W row of super-blocks: qg_rowk's
 * operations with the weights straight from the blocks. */
QG_INLINE void qg_rowk_one(const int type, const pt_qact *a, const uint8_t *wr, size_t nb,
                           size_t bytes, float alpha, float beta, float *y)
{
    __m256 acc = _mm256_setzero_ps();
    for (size_t g = 0; g < nb; g += 8) {
        const int nbg = nb - g < 8 ? (int)(nb - g) : 8;
        _Alignas(32) float d[8], dm[8];
        __m256i vi[8], vj[8];
        for (int e = 0; e < 8; e++) {
            vi[e] = vj[e] = _mm256_setzero_si256();
            d[e] = dm[e] = 0.0f;
            if (e >= nbg)
                continue;
            const uint8_t *bp = wr + (g + (size_t)e) * bytes;
            for (size_t c = 0; c < bytes; c += 64)
                __builtin_prefetch((const void *)((uintptr_t)bp + QG_PF + c), 0, 3);
            const int8_t *xq = a->q + (g + (size_t)e) * PT_QK_K;
            const int16_t *bs = a->bsum + (g + (size_t)e) * 16;
            if (type == PT_GGML_Q6_K) {
                d[e] = pt__q_f16(bp + 208);
                qg_dotk6_one(bp, xq, bs, &vi[e]);
            } else {
                d[e] = pt__q_f16(bp);
                dm[e] = pt__q_f16(bp + 2);
                qg_dotk45_one(bp, type == PT_GGML_Q5_K, xq, bs, &vi[e], &vj[e]);
            }
        }
        const __m256 dx = _mm256_loadu_ps(a->d + g);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(d), dx), _mm256_cvtepi32_ps(qg_reduce8(vi)), acc);
        if (type != PT_GGML_Q6_K) {
            const __m256 nm = _mm256_xor_ps(_mm256_mul_ps(_mm256_load_ps(dm), dx), _mm256_set1_ps(-0.0f));
            acc = _mm256_fmadd_ps(nm, _mm256_cvtepi32_ps(qg_reduce8(vj)), acc);
        }
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    pt__qgemv_store(o, alpha, beta, y);
}

/* The bytes of one block of a type these kernels compute. */
QG_INLINE size_t qg_block_bytes(const int type)
{
    switch (type) {
    case PT_GGML_Q8_0: return sizeof(pt_block_q8_0);
    case PT_GGML_Q4_0: return sizeof(pt_block_q4_0);
    case PT_GGML_Q4_1: return sizeof(pt_block_q4_1);
    case PT_GGML_Q5_0: return sizeof(pt_block_q5_0);
    case PT_GGML_Q5_1: return sizeof(pt_block_q5_1);
    case PT_GGML_Q4_K: return sizeof(pt_block_q4_K);
    case PT_GGML_Q5_K: return sizeof(pt_block_q5_K);
    default: return sizeof(pt_block_q6_K);
    }
}

QG_INLINE bool qg_is_kquant(const int type)
{
    return type == PT_GGML_Q4_K || type == PT_GGML_Q5_K || type == PT_GGML_Q6_K;
}

/* The unpacked weights of one kind of type: a 32-value type's zeroed
 * once; a K-quant's slots from nbg on are never read (their scales are
 * zeroed). */
typedef union qg_wbuf {
    qg_w32 w32;
    qg_wk wk;
} qg_wbuf;

QG_INLINE void qg_wbuf_init(qg_wbuf *wb, const int type)
{
    if (!qg_is_kquant(type))
        memset(&wb->w32, 0, sizeof wb->w32);
}

/* len W rows against every row of x: one row of x by the one-row kernels,
 * more QX_MAX rows at a time. */
QG_INLINE void qg_rows(const int type, const pt_qact *a, size_t len, const uint8_t *wrow,
                       size_t rb, float alpha, float beta, float *y, size_t ldy)
{
    const bool kq = qg_is_kquant(type);
    const size_t bytes = qg_block_bytes(type);
    const size_t nb = rb / bytes;
    if (a->m == 1) {
        for (size_t j = 0; j < len; j++) {
            if (kq)
                qg_rowk_one(type, a, wrow + j * rb, nb, bytes, alpha, beta, y + j);
            else
                qg_row32_one(type, a, wrow + j * rb, nb, bytes, alpha, beta, y + j);
        }
        return;
    }
    qg_wbuf wb;
    qg_wbuf_init(&wb, type);
    for (size_t j = 0; j < len; j++)
        for (size_t i0 = 0; i0 < a->m; i0 += QX_MAX) {
            const size_t mc = a->m - i0 < QX_MAX ? a->m - i0 : QX_MAX;
            if (kq)
                qg_rowk(type, a, i0, mc, wrow + j * rb, nb, bytes, &wb.wk, alpha, beta, y + j, ldy);
            else
                qg_row32(type, a, i0, mc, wrow + j * rb, nb, bytes, &wb.w32, alpha, beta, y + j, ldy);
        }
}

/* One kernel a type, each compiled with its type a constant (ROWS(type,
 * ...) is inlined into it), and PREFIX_pick(type): the kernel of a type,
 * or NULL.  QG_KERNELS(qg, qg_rows) defines qg_q8_0 ... qg_q6_k and
 * qg_pick. */
#define QG_KERNEL(fn, rows, T)                                                                   \
    QG_TARGET static void fn(int type, const pt_qact *a, size_t len, const uint8_t *wrow,        \
                             size_t rb, float alpha, float beta, float *y, size_t ldy)           \
    {                                                                                            \
        (void)type;                                                                              \
        rows(T, a, len, wrow, rb, alpha, beta, y, ldy);                                          \
    }
#define QG_KERNELS(prefix, rows)                                                                 \
    QG_KERNEL(prefix##_q8_0, rows, PT_GGML_Q8_0)                                                 \
    QG_KERNEL(prefix##_q4_0, rows, PT_GGML_Q4_0)                                                 \
    QG_KERNEL(prefix##_q4_1, rows, PT_GGML_Q4_1)                                                 \
    QG_KERNEL(prefix##_q5_0, rows, PT_GGML_Q5_0)                                                 \
    QG_KERNEL(prefix##_q5_1, rows, PT_GGML_Q5_1)                                                 \
    QG_KERNEL(prefix##_q4_k, rows, PT_GGML_Q4_K)                                                 \
    QG_KERNEL(prefix##_q5_k, rows, PT_GGML_Q5_K)                                                 \
    QG_KERNEL(prefix##_q6_k, rows, PT_GGML_Q6_K)                                                 \
    static pt_qgemv_fn *prefix##_pick(int type)                                                  \
    {                                                                                            \
        switch (type) {                                                                          \
        case PT_GGML_Q8_0: return prefix##_q8_0;                                                 \
        case PT_GGML_Q4_0: return prefix##_q4_0;                                                 \
        case PT_GGML_Q4_1: return prefix##_q4_1;                                                 \
        case PT_GGML_Q5_0: return prefix##_q5_0;                                                 \
        case PT_GGML_Q5_1: return prefix##_q5_1;                                                 \
        case PT_GGML_Q4_K: return prefix##_q4_k;                                                 \
        case PT_GGML_Q5_K: return prefix##_q5_k;                                                 \
        case PT_GGML_Q6_K: return prefix##_q6_k;                                                 \
        default: return NULL;                                                                    \
        }                                                                                        \
    }

QG_KERNELS(qg, qg_rows)
