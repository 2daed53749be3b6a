/* The quantized small-m kernels (kernels/qgemv.h) on AVX2, the build's
 * floor: the 32-value block types from kernels/qgemv_tmpl.h, and the
 * K-quants (Q4_K, Q5_K, Q6_K), which the avx512 path runs too.
 *
 * K-quants: a W row is walked 8 super-blocks (of 256) at a time, each
 * unpacked once into unsigned bytes (4, 5 or 6 bits) with its sub-block
 * scales as int16 vectors, then run against every row of x: per 32 values
 * vpmaddubsw (unsigned weight x signed q: pairs at most 2 * 63 * 127, no
 * saturation) and vpmaddwd by the sub-block's scale, added in int32 (exact:
 * |I| < 2^28).  Q4_K/Q5_K's mins enter through Q8_K's sums of 16 (J =
 * sum m_(t/2) bsum_t, one vpmaddwd), Q6_K's offset 32 the same way
 * (I = sum sc w q - 32 sum sc_t bsum_t). */
#include "kernels/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define QG_TARGET
#define QG_VNNI 0
#include "kernels/qgemv_tmpl.h"

/* ---- K-quants ---- */

typedef struct qg_wk {
    _Alignas(32) uint8_t q[8][PT_QK_K]; /* unsigned weights */
    _Alignas(32) int16_t sv[8][8][16];  /* per 32 values: the scale of each 16 */
    _Alignas(32) int16_t mn[8][16];     /* Q4_K/Q5_K: the min of each 16; Q6_K: the scale */
    _Alignas(32) float d[8], dm[8];     /* d and dmin */
} qg_wk;

/* The 6-bit scale and min of sub-block j (ggml's get_scale_min_k4). */
static inline void qg_scale_min(int j, const uint8_t *q, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Bit `bit` of each byte of h -> 0x10. */
static inline __m256i qg_bit16(__m256i h, int bit)
{
    const __m256i m = _mm256_set1_epi8((char)(1 << bit));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, m), m), _mm256_set1_epi8(0x10));
}

/* Q4_K (five false) or Q5_K super-block bp into slot e. */
static inline void qg_unpack_q45k(const uint8_t *bp, bool five, qg_wk *wb, int e)
{
    wb->d[e] = pt_q_f16(bp);
    wb->dm[e] = pt_q_f16(bp + 2);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        qg_scale_min(s, bp + 4, &sc, &mn);
        for (int l = 0; l < 16; l++)
            wb->sv[e][s][l] = (int16_t)sc;
        wb->mn[e][2 * s] = wb->mn[e][2 * s + 1] = (int16_t)mn;
    }
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
        _mm256_store_si256((__m256i *)(void *)&wb->q[e][64 * j], lo);
        _mm256_store_si256((__m256i *)(void *)&wb->q[e][64 * j + 32], hi);
    }
}

static inline void qg_unpack_q6k(const uint8_t *bp, qg_wk *wb, int e)
{
    const int8_t *sc = (const int8_t *)(bp + 192);
    wb->d[e] = pt_q_f16(bp + 208);
    wb->dm[e] = 0.0f;
    for (int t = 0; t < 8; t++)
        for (int l = 0; l < 16; l++)
            wb->sv[e][t][l] = sc[2 * t + l / 8];
    for (int s = 0; s < 16; s++)
        wb->mn[e][s] = sc[s];
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
        uint8_t *q = &wb->q[e][128 * h];
        _mm256_store_si256((__m256i *)(void *)q, _mm256_or_si256(_mm256_and_si256(l0, f), h0));
        _mm256_store_si256((__m256i *)(void *)(q + 32), _mm256_or_si256(_mm256_and_si256(l1, f), h1));
        _mm256_store_si256((__m256i *)(void *)(q + 64),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), f), h2));
        _mm256_store_si256((__m256i *)(void *)(q + 96),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), f), h3));
    }
}

/* Super-block e against x's block at xq (bs: its sums of 16): I's and J's
 * lanes (J only for Q4_K/Q5_K). */
static inline __attribute__((always_inline)) void qg_dotk(const int type, const qg_wk *wb, int e,
                                                          const int8_t *xq, const int16_t *bs,
                                                          __m256i *vi, __m256i *vj)
{
    __m256i s = _mm256_setzero_si256();
    for (int t = 0; t < 8; t++) {
        const __m256i w = _mm256_load_si256((const __m256i *)(const void *)&wb->q[e][32 * t]);
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * t));
        const __m256i sc = _mm256_load_si256((const __m256i *)(const void *)wb->sv[e][t]);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), sc));
    }
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
static inline __attribute__((always_inline)) void qg_rowk(const int type, const pt_qact *a,
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
        pt_qgemv_store(o, alpha, beta, &y[(i0 + c) * ldy]);
    }
}

static inline __attribute__((always_inline)) void qg_rowsk(const int type, const pt_qact *a,
                                                           size_t len, const uint8_t *wrow,
                                                           size_t rb, float alpha, float beta,
                                                           float *y, size_t ldy)
{
    const size_t bytes = type == PT_GGML_Q4_K   ? sizeof(pt_block_q4_K)
                         : type == PT_GGML_Q5_K ? sizeof(pt_block_q5_K)
                                                : sizeof(pt_block_q6_K);
    const size_t nb = rb / bytes;
    qg_wk wb;
    memset(&wb, 0, sizeof wb);
    for (size_t j = 0; j < len; j++)
        for (size_t i0 = 0; i0 < a->m; i0 += QX_MAX) {
            const size_t mc = a->m - i0 < QX_MAX ? a->m - i0 : QX_MAX;
            qg_rowk(type, a, i0, mc, wrow + j * rb, nb, bytes, &wb, alpha, beta, y + j, ldy);
        }
}

#define QG_DEFINEK(fn, T)                                                                        \
    static void fn(int type, const pt_qact *a, size_t len, const uint8_t *wrow, size_t rb,       \
                   float alpha, float beta, float *y, size_t ldy)                                \
    {                                                                                            \
        (void)type;                                                                              \
        qg_rowsk(T, a, len, wrow, rb, alpha, beta, y, ldy);                                      \
    }

QG_DEFINEK(qg_q4_k, PT_GGML_Q4_K)
QG_DEFINEK(qg_q5_k, PT_GGML_Q5_K)
QG_DEFINEK(qg_q6_k, PT_GGML_Q6_K)

pt_qgemv_fn *pt_qgemv_avx2(int type)
{
    switch (type) {
    case PT_GGML_Q4_K: return qg_q4_k;
    case PT_GGML_Q5_K: return qg_q5_k;
    case PT_GGML_Q6_K: return qg_q6_k;
    default: return qg_pick32(type);
    }
}

#endif
