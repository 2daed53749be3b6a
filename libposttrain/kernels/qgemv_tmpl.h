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

typedef struct qg_w32 {
    _Alignas(32) uint8_t q[8 * PT_QK]; /* unsigned weights */
    _Alignas(32) int8_t s[8 * PT_QK];  /* Q8_0 on AVX2: the signed weights */
    _Alignas(32) float d[8], m[8];     /* scale and min of each block */
} qg_w32;

/* Block bp of W into slot e of wb. */
QG_INLINE void qg_unpack32(const int type, const uint8_t *bp, qg_w32 *wb, int e)
{
    __m256i *q = (__m256i *)(void *)(wb->q + e * PT_QK);
    wb->d[e] = pt_q_f16(bp);
    wb->m[e] = type == PT_GGML_Q4_1 || type == PT_GGML_Q5_1 ? pt_q_f16(bp + 2) : 0.0f;
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

/* 8 int32 lanes summing to sum_j w_j q_j over one block (Q8_0 on AVX2: the
 * signed weights by the sign trick). */
QG_INLINE __m256i qg_dot32(const int type, const qg_w32 *wb, int e, const int8_t *xq)
{
    const __m256i w = _mm256_load_si256((const __m256i *)(const void *)(wb->q + e * PT_QK));
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + e * PT_QK));
#if QG_VNNI
    (void)type;
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#else
    if (type == PT_GGML_Q8_0)
        x = _mm256_sign_epi8(x, _mm256_load_si256((const __m256i *)(const void *)(wb->s + e * PT_QK)));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
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
    const bool min = type == PT_GGML_Q4_1 || type == PT_GGML_Q5_1;
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
            __m256i v[8];
            for (int e = 0; e < 8; e++)
                v[e] = qg_dot32(type, wb, e, xq);
            __m256i isum = qg_reduce8(v);
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
        pt_qgemv_store(o, alpha, beta, &y[(i0 + c) * ldy]);
    }
}

QG_INLINE void qg_rows32(const int type, const pt_qact *a, size_t len, const uint8_t *wrow,
                         size_t rb, float alpha, float beta, float *y, size_t ldy)
{
    const size_t bytes = type == PT_GGML_Q8_0 ? sizeof(pt_block_q8_0)
                         : type == PT_GGML_Q4_0 ? sizeof(pt_block_q4_0)
                         : type == PT_GGML_Q4_1 ? sizeof(pt_block_q4_1)
                         : type == PT_GGML_Q5_0 ? sizeof(pt_block_q5_0)
                                                : sizeof(pt_block_q5_1);
    const size_t nb = rb / bytes;
    qg_w32 wb;
    memset(&wb, 0, sizeof wb);
    for (size_t j = 0; j < len; j++)
        for (size_t i0 = 0; i0 < a->m; i0 += QX_MAX) {
            const size_t mc = a->m - i0 < QX_MAX ? a->m - i0 : QX_MAX;
            qg_row32(type, a, i0, mc, wrow + j * rb, nb, bytes, &wb, alpha, beta, y + j, ldy);
        }
}

#define QG_DEFINE32(fn, T)                                                                       \
    QG_TARGET static void fn(int type, const pt_qact *a, size_t len, const uint8_t *wrow,        \
                             size_t rb, float alpha, float beta, float *y, size_t ldy)           \
    {                                                                                            \
        (void)type;                                                                              \
        qg_rows32(T, a, len, wrow, rb, alpha, beta, y, ldy);                                     \
    }

QG_DEFINE32(qg_q8_0, PT_GGML_Q8_0)
QG_DEFINE32(qg_q4_0, PT_GGML_Q4_0)
QG_DEFINE32(qg_q4_1, PT_GGML_Q4_1)
QG_DEFINE32(qg_q5_0, PT_GGML_Q5_0)
QG_DEFINE32(qg_q5_1, PT_GGML_Q5_1)

/* The kernel of a 32-value type, or NULL. */
static pt_qgemv_fn *qg_pick32(int type)
{
    switch (type) {
    case PT_GGML_Q8_0: return qg_q8_0;
    case PT_GGML_Q4_0: return qg_q4_0;
    case PT_GGML_Q4_1: return qg_q4_1;
    case PT_GGML_Q5_0: return qg_q5_0;
    case PT_GGML_Q5_1: return qg_q5_1;
    default: return NULL;
    }
}
