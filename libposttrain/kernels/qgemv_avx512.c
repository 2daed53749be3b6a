/* The quantized small-m kernels (kernels/qgemv.h) with AVX512_VNNI, on
 * 512-bit vectors: the 32-value block types take two blocks a vpdpbusd (one
 * instruction for AVX2's vpmaddubsw + vpmaddwd + add, and no int16 stage:
 * Q8_0's weights enter as w + 128, the activation sums correcting), the
 * K-quants 64 values a vpmaddubsw + vpdpwssd (the sub-block scales folded
 * into the dot).  Compiled with a function-level target so the library's
 * baseline stays x86-64-v3: call only when pt__cpu_active() >= PT_CPU_AVX512
 * and pt__cpu_has_vnni().  From PT_QGEMV_M16 rows of x on, 16 rows of W in
 * the lanes instead: qw_rows (32-value blocks) and qk_rows (K-quants).
 * Same arithmetic as every path (the integer sums are exact in any order),
 * so the same bits. */
#include "kernels/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define QG_VNNI 1
#include "kernels/qgemv_tmpl.h"

/* ---- 32-value blocks: 16 rows of W in the lanes (qw_rows) ----
 *
 * A task's (up to) 16 W rows are unpacked and transposed block by block
 * (qw_chunk: Q8_0 row by row, the 4- and 5-bit blocks in the lanes), so
 * that lane r of step t's vector holds row r's weights
 * 4t..4t+3; then for each row of x, 8 vpdpbusd against that row's 4
 * values of each step (broadcast from memory) give the 16 W rows' exact
 * block sums, and the float operations of kernels/qgemv.h follow for the
 * 16 outputs at once (into the accumulator of lane b % 8).  The W rows are
 * transposed once for all the rows of x (with no transposed copy of the
 * activations), and nothing crosses lanes until the 16 outputs are stored
 * side by side in y's row. */

/* Blocks of W a transposed chunk holds (a multiple of 8: 48 covers rows of
 * 1536 values; 24 KB of weights and 6 KB of scales, in L1). */
#define QW_NB 48

/* t[s] lane r = dword s of r[r] (a 16 x 8 transpose of 32-bit words). */
QG_INLINE void qw_transpose(const __m256i r[16], __m512i t[8])
{
    __m512i z[8], u[8];
    for (int p = 0; p < 8; p++) /* 128-bit lanes: r[p] low, high; r[p + 8] low, high */
        z[p] = _mm512_inserti64x4(_mm512_castsi256_si512(r[p]), r[p + 8], 1);
    for (int p = 0; p < 8; p += 2) {
        u[p] = _mm512_unpacklo_epi32(z[p], z[p + 1]);
        u[p + 1] = _mm512_unpackhi_epi32(z[p], z[p + 1]);
    }
    /* v[e] (e < 4): per 128-bit lane, word e of z[0..3]; v[4 + e]: of z[4..7] */
    __m512i v[8];
    for (int h = 0; h < 8; h += 4) {
        v[h + 0] = _mm512_unpacklo_epi64(u[h], u[h + 2]);
        v[h + 1] = _mm512_unpackhi_epi64(u[h], u[h + 2]);
        v[h + 2] = _mm512_unpacklo_epi64(u[h + 1], u[h + 3]);
        v[h + 3] = _mm512_unpackhi_epi64(u[h + 1], u[h + 3]);
    }
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    for (int e = 0; e < 4; e++) {
        t[e] = _mm512_permutex2var_epi64(v[e], lo, v[4 + e]);
        t[4 + e] = _mm512_permutex2var_epi64(v[e], hi, v[4 + e]);
    }
}

/* t[s] lane r = dword s of the 16 bytes at p + r * rb (0 for the rows
 * from len on): a 16 x 4 transpose, 128-bit lane L of z[g] holding row
 * 4 L + g, then 4 x 4 within the lanes. */
QG_INLINE void qw_transpose4(const uint8_t *p, size_t rb, size_t len, __m512i t[4])
{
    __m512i z[4];
    for (size_t g = 0; g < 4; g++) {
        __m128i r[4];
        for (size_t l = 0; l < 4; l++) {
            const size_t i = 4 * l + g;
            r[l] = i < len ? _mm_loadu_si128((const __m128i *)(const void *)(p + i * rb)) : _mm_setzero_si128();
        }
        z[g] = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(r[0]),
                                                                        r[1], 1), r[2], 2), r[3], 3);
    }
    const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
    t[0] = _mm512_unpacklo_epi64(a0, a2);
    t[1] = _mm512_unpackhi_epi64(a0, a2);
    t[2] = _mm512_unpacklo_epi64(a1, a3);
    t[3] = _mm512_unpackhi_epi64(a1, a3);
}

/* The fifth bits: lane r of h is row r's 32 bits (bit j: value j), added
 * as 0x10 to the bytes of w (w[t] lane r byte e: value 4 t + e).  Byte q
 * of each lane is copied to the lane's 4 bytes (vpshufb) and tested bit by
 * bit: bits 8q .. 8q + 3 are step 2q's values, the next 4 step 2q + 1's. */
QG_INLINE void qw_fifth(__m512i h, __m512i w[8])
{
    const __m512i lo = _mm512_set1_epi32(0x08040201), hi = _mm512_set1_epi32((int)0x80402010u);
    const __m512i x10 = _mm512_set1_epi8(0x10), base = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0);
    for (int q = 0; q < 4; q++) {
        const __m512i b = _mm512_shuffle_epi8(h, _mm512_add_epi8(base, _mm512_set1_epi8((char)q)));
        w[2 * q] = _mm512_mask_add_epi8(w[2 * q], _mm512_test_epi8_mask(b, lo), w[2 * q], x10);
        w[2 * q + 1] = _mm512_mask_add_epi8(w[2 * q + 1], _mm512_test_epi8_mask(b, hi), w[2 * q + 1], x10);
    }
}

/* Word j of a packed block column's 16 rows (kernels/qpack.c): lane r is
 * row r's. */
QG_INLINE __m512i qp_word(const uint8_t *gd, size_t j)
{
    return _mm512_loadu_si512((const void *)(gd + 64 * j));
}

/* A packed block column g (16 rows of a 32-value type) into wt's 8
 * vectors and wd, wm, as qw_chunk's transposition gives them: no
 * transposition and no gather, its fields being 16 rows wide already. */
QG_INLINE void qp_block(const int type, const uint8_t *g, __m512i *wt, float *wd, float *wm)
{
    const bool min = qg_has_min(type), five = type == PT_GGML_Q5_0 || type == PT_GGML_Q5_1;
    _mm512_store_ps(wd, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)g)));
    if (min)
        _mm512_store_ps(wm, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(g + 32))));
    const uint8_t *gd = g + (min ? 64 : 32);
    if (type == PT_GGML_Q8_0) { /* w + 128, as qg_wvec */
        for (size_t t = 0; t < 8; t++)
            _mm512_store_si512((void *)(wt + t), _mm512_xor_si512(qp_word(gd, t), _mm512_set1_epi8((char)0x80)));
        return;
    }
    const __m512i f = _mm512_set1_epi8(0xF);
    __m512i u[8];
    for (size_t s = 0; s < 4; s++) { /* values 4s .. : low nibbles; 16 + 4s .. : high */
        const __m512i v = qp_word(gd, s + five);
        u[s] = _mm512_and_si512(v, f);
        u[s + 4] = _mm512_and_si512(_mm512_srli_epi32(v, 4), f);
    }
    if (five)
        qw_fifth(qp_word(gd, 0), u);
    for (int s = 0; s < 8; s++)
        _mm512_store_si512((void *)(wt + s), u[s]);
}

/* Blocks b0 .. b0 + nbc of the len (<= 16) W rows from wrow, unpacked and
 * transposed into wt (8 vectors a block), their scales (and Q4_1/Q5_1's
 * mins) into wd, wm (16 a block; 0 in the lanes past len).  Q8_0's blocks
 * row by row (their bytes are the weights: qg_wvec, then transposed); the
 * 4- and 5-bit blocks' 16 bytes of nibbles transposed as they are and
 * taken apart in the lanes, their fp16 scales (and fifth bits) gathered
 * 16 rows at a time (m = 16, 2 threads, Zen 5: Q4_0 and Q5_1 1.05x
 * faster than unpacking row by row, Q5_0 the same; Q8_0 no faster that
 * way).  Scalar stores of the scales read back as one vector were slower:
 * the load waits for the 16 stores. */
QG_INLINE void qw_chunk(const int type, const uint8_t *wrow, size_t rb, size_t len,
                        size_t bytes, size_t b0, size_t nbc, __m512i *wt, float *wd, float *wm)
{
    const bool min = qg_has_min(type), five = type == PT_GGML_Q5_0 || type == PT_GGML_Q5_1;
    const __mmask16 k = (__mmask16)((1u << len) - 1u);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)rb));
    for (size_t b = 0; b < nbc; b++) {
        const uint8_t *bp = wrow + (b0 + b) * bytes;
        if (type == PT_GGML_Q8_0) {
            __m256i r[16];
            for (size_t i = 0; i < 16; i++) {
                r[i] = i < len ? qg_wvec(type, bp + i * rb) : _mm256_setzero_si256();
                wd[b * 16 + i] = i < len ? pt__q_f16(bp + i * rb) : 0.0f;
            }
            qw_transpose(r, wt + b * 8);
            continue;
        }
        /* the first 4 bytes of each row's block: d, and Q4_1/Q5_1's m */
        const __m512i dw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, bp, 1);
        _mm512_store_ps(wd + b * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dw)));
        if (min)
            _mm512_store_ps(wm + b * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dw, 16))));
        __m512i v[4], u[8];
        qw_transpose4(bp + qg_nib_off(type), rb, len, v);
        const __m512i f = _mm512_set1_epi8(0xF);
        for (int s = 0; s < 4; s++) { /* values 4s .. : low nibbles; 16 + 4s .. : high */
            u[s] = _mm512_and_si512(v[s], f);
            u[s + 4] = _mm512_and_si512(_mm512_srli_epi32(v[s], 4), f);
        }
        if (five)
            qw_fifth(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, bp + qg_nib_off(type) - 4, 1), u);
        for (int s = 0; s < 8; s++)
            _mm512_store_si512((void *)(wt + b * 8 + s), u[s]);
    }
}

/* The accumulators of rows 0 .. mc of x that no block of a row of nb
 * reaches (lanes nb .. 8), zeroed: the kernels start each lane at its
 * first block (b < 8) by an FMA into 0 instead of zeroing it first (the
 * same operation, one store and one load less). */
QG_INLINE void qw_acc_zero(__m512 acc[16][8], size_t mc, size_t nb)
{
    for (size_t c = 0; c < mc; c++)
        for (size_t e = nb; e < 8; e++)
            acc[c][e] = _mm512_setzero_ps();
}

/* acc, or 0 for block b's lane at its first block. */
QG_INLINE __m512 qw_acc_in(const __m512 *acc, size_t b)
{
    return b < 8 ? _mm512_setzero_ps() : *acc;
}

/* *acc = vpdpbusd(*acc, w, the 4 bytes at x in every lane), the broadcast
 * by the instruction's own memory operand ({1to16}); GCC 12 loads it with
 * a separate vpbroadcastd (8 more instructions a block and row). */
QG_INLINE void qw_dpbusd_bcast(__m512i *acc, __m512i w, const int32_t *x)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(*acc) : "v"(w), "m"(*x));
}

/* Block bb's float operations for row at / nbp of x on the 16 W rows'
 * exact sums isum (before the offset's term), into *acc (kernels/qgemv.h's
 * order): the offset's term, then fma(dw * dx, I, acc), then Q4_1/Q5_1's
 * fma(mw, sx, acc). */
QG_INLINE void qw_block_acc(const int type, const pt_qact *a, size_t at, size_t bb, __m512i isum,
                            __m512 wdv, __m512 wmv, __m512 *acc)
{
    const int sh = qg_offset_shift(type);
    if (sh)
        isum = _mm512_sub_epi32(isum, _mm512_set1_epi32((int32_t)((uint32_t)a->sum[at] << sh)));
    const __m512 dd = _mm512_mul_ps(wdv, _mm512_set1_ps(a->d[at]));
    *acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), qw_acc_in(acc, bb));
    if (qg_has_min(type))
        *acc = _mm512_fmadd_ps(wmv, _mm512_set1_ps(a->s[at]), *acc);
}

/* Block bb of the 16 W rows (w, wdv, wmv: its weights, scales, mins) against
 * rows i0 .. i0 + mc of x, into their accumulators acc[c][bb % 8]: the 8
 * vpdpbusd in four chains (two were 2-4% slower in the step), x's 4 bytes
 * broadcast by each from memory. */
QG_INLINE void qw_block_xrows(const int type, const pt_qact *a, size_t i0, size_t mc, size_t bb,
                              const __m512i w[8], __m512 wdv, __m512 wmv, __m512 acc[16][8])
{
    for (size_t c = 0; c < mc; c++) {
        const size_t i = i0 + c;
        const int32_t *xb = (const int32_t *)(const void *)(a->q + i * a->kp + bb * PT_QK);
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        __m512i s2 = _mm512_setzero_si512(), s3 = _mm512_setzero_si512();
        for (int t = 0; t < 8; t += 4) {
            qw_dpbusd_bcast(&s0, w[t], xb + t);
            qw_dpbusd_bcast(&s1, w[t + 1], xb + t + 1);
            qw_dpbusd_bcast(&s2, w[t + 2], xb + t + 2);
            qw_dpbusd_bcast(&s3, w[t + 3], xb + t + 3);
        }
        const __m512i isum = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
        qw_block_acc(type, a, i * a->nbp + bb, bb, isum, wdv, wmv, &acc[c][bb % 8]);
    }
}

/* Block b's share of fetching next .. next + nbytes (the next task's rows)
 * while a task runs: `per` lines a block. */
QG_INLINE void qw_fetch_share(const uint8_t *next, size_t nbytes, size_t per, size_t b)
{
    for (size_t o = b * per * 64; o < (b + 1) * per * 64 && o < nbytes; o += 64)
        _mm_prefetch((const char *)(next + o), _MM_HINT_T0);
}

/* Rows i0 .. i0 + mc (<= 16) of x against a chunk's blocks b0 .. b0 + nbc
 * (transposed in wt, wd, wm) into their accumulators acc[c][b % 8]: each
 * block's 8 weight vectors stay in registers for all the rows (whose 4
 * values a step are broadcast from memory by the vpdpbusd itself). */
QG_INLINE void qw_xrows(const int type, const pt_qact *a, size_t i0, size_t mc, size_t b0,
                        size_t nbc, const __m512i *wt, const float *wd, const float *wm,
                        __m512 acc[16][8], const uint8_t *next, size_t nbytes)
{
    /* next .. next + nbytes prefetched, spread over the chunk's blocks */
    const size_t per = (nbytes / 64 + nbc) / nbc;
    const bool min = qg_has_min(type);
    for (size_t b = 0; b < nbc; b++) {
        const size_t bb = b0 + b;
        qw_fetch_share(next, nbytes, per, b);
        __m512i w[8];
        for (int t = 0; t < 8; t++)
            w[t] = _mm512_load_si512((const void *)(wt + b * 8 + (size_t)t));
        const __m512 wdv = _mm512_load_ps(wd + b * 16);
        const __m512 wmv = min ? _mm512_load_ps(wm + b * 16) : _mm512_setzero_ps();
        qw_block_xrows(type, a, i0, mc, bb, w, wdv, wmv, acc);
    }
}

/* Row i's 16 outputs (lanes past len not stored): the 8 accumulators
 * summed in kernels/qgemv.h's order, times alpha (beta as pt_qgemv_rows). */
QG_INLINE void qw_store(const __m512 acc[8], size_t len, float alpha, float beta, float *y)
{
    const __m512 s = _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
        _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
    const __mmask16 k = (__mmask16)((1u << len) - 1u);
    __m512 o = _mm512_mul_ps(_mm512_set1_ps(alpha), s);
    if (beta != 0.0f)
        o = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(k, y), o);
    _mm512_mask_storeu_ps(y, k, o);
}

/* ---- K-quants: 16 rows of W in the lanes (qk_rows) ----
 *
 * qw_rows' layout for the super-blocks: a chunk of the task's (up to) 16 W
 * rows unpacked (the 256 unsigned values of a super-block, its sub-blocks'
 * scales as int32 and the pairs of int16 that J's vpdpwssd takes) and
 * transposed, lane r of every vector being W row r.  Then for each row of
 * x and each sub-block (32 values; Q6_K 16) the exact sum of w q by
 * vpdpbusd against x's 4 values a step (broadcast from memory), times the
 * sub-block's scale (vpmulld) into I; J (for Q6_K the term of its offset
 * 32, sum_s sc_s (sum of 16 q)) from the row's sums of 16 in pairs by
 * vpdpwssd; then the float operations of kernels/qgemv.h for the 16
 * outputs at once.  The integers are kernels/qgemv.h's I and J exactly
 * (no overflow: |I| < 2^29), so the same bits as every path.  No
 * transposed copy of x (the 32-value blocks' qw_rows neither). */

/* Super-blocks a transposed chunk holds (16 KB of weights). */
#define QK_NB 4

typedef struct qk_chunk {
    __m512i w[QK_NB][64];  /* step t: the values 4t .. 4t + 3 of each row */
    __m512i sc[QK_NB][16]; /* the sub-blocks' scales (Q4_K/Q5_K: 8 of 32 values) */
    __m512i pr[QK_NB][8];  /* int16 pairs: (m_s, m_s); Q6_K: (sc_2p, sc_2p+1) */
    _Alignas(64) float d[QK_NB][16], dm[QK_NB][16];
} qk_chunk;

/* Row buffers of one super-block before the transposition. */
typedef struct qk_rowbuf {
    _Alignas(64) uint8_t q[16][PT_QK_K];
    _Alignas(64) int32_t sc[16][16], pr[16][8];
} qk_rowbuf;

/* Super-block bp (one W row) into row i of rb: values, scales, pairs, and
 * its d, dmin. */
QG_INLINE void qk_unpack(const int type, const uint8_t *bp, qk_rowbuf *rb, size_t i, float *d,
                         float *dm)
{
    if (type == PT_GGML_Q6_K) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)(bp + 192));
        *d = pt__q_f16(bp + 208);
        *dm = 0.0f;
        _mm256_store_si256((__m256i *)(void *)rb->sc[i], _mm256_cvtepi8_epi32(sc));
        _mm256_store_si256((__m256i *)(void *)(rb->sc[i] + 8), _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc)));
        _mm256_store_si256((__m256i *)(void *)rb->pr[i], _mm256_cvtepi8_epi16(sc));
        qg_values_q6k(bp, rb->q[i]);
        return;
    }
    *d = pt__q_f16(bp);
    *dm = pt__q_f16(bp + 2);
    const __m128i sm = qg_scales_mins(bp + 4);
    _mm256_store_si256((__m256i *)(void *)rb->sc[i], _mm256_cvtepu8_epi32(sm));
    _mm256_store_si256((__m256i *)(void *)rb->pr[i], _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)));
    qg_values_q45k(bp, type == PT_GGML_Q5_K, rb->q[i]);
}

/* 8 dwords at each row's p + 32 o (row stride `stride` bytes) transposed
 * into t[0 .. 8). */
QG_INLINE void qk_transpose(const void *p, size_t stride, size_t o, __m512i t[8])
{
    __m256i r[16];
    for (size_t i = 0; i < 16; i++)
        r[i] = _mm256_load_si256((const __m256i *)(const void *)((const uint8_t *)p + i * stride + 32 * o));
    qw_transpose(r, t);
}

/* Super-blocks b0 .. b0 + nbc of the len (<= 16) W rows into ch (rows from
 * len on: zero). */
QG_INLINE void qk_chunk_fill(const int type, const uint8_t *wrow, size_t rbytes, size_t len,
                             size_t bytes, size_t b0, size_t nbc, qk_chunk *ch, qk_rowbuf *rb)
{
    const bool six = type == PT_GGML_Q6_K;
    for (size_t b = 0; b < nbc; b++) {
        for (size_t i = 0; i < 16; i++) {
            if (i < len) {
                qk_unpack(type, wrow + i * rbytes + (b0 + b) * bytes, rb, i, &ch->d[b][i], &ch->dm[b][i]);
                continue;
            }
            memset(rb->q[i], 0, sizeof rb->q[i]);
            memset(rb->sc[i], 0, sizeof rb->sc[i]);
            memset(rb->pr[i], 0, sizeof rb->pr[i]);
            ch->d[b][i] = ch->dm[b][i] = 0.0f;
        }
        for (size_t o = 0; o < 8; o++)
            qk_transpose(rb->q, sizeof rb->q[0], o, &ch->w[b][8 * o]);
        qk_transpose(rb->sc, sizeof rb->sc[0], 0, ch->sc[b]);
        if (six)
            qk_transpose(rb->sc, sizeof rb->sc[0], 1, ch->sc[b] + 8);
        qk_transpose(rb->pr, sizeof rb->pr[0], 0, ch->pr[b]);
    }
}

/* (w >> sh) & 0xFF, the byte sh / 8 of each lane as an int32. */
QG_INLINE __m512i qp_byte(__m512i w, int sh)
{
    return _mm512_and_si512(_mm512_srli_epi32(w, (unsigned)sh), _mm512_set1_epi32(0xFF));
}

/* Super-blocks b0 .. b0 + nbc of a packed group of 16 rows into ch, as
 * qk_chunk_fill gives them, taken apart in the lanes: the values from
 * their words of nibbles (and fifth or high bits), the 6-bit scales and
 * mins (Q4_K/Q5_K, as ggml's get_scale_min_k4) or the int8 scales (Q6_K)
 * from their words. */
QG_INLINE void qk_chunk_packed(const int type, const uint8_t *wrow, size_t bytes, size_t b0,
                               size_t nbc, qk_chunk *ch)
{
    const __m512i f = _mm512_set1_epi8(0xF);
    for (size_t b = 0; b < nbc; b++) {
        const uint8_t *g = wrow + (b0 + b) * 16 * bytes;
        _mm512_store_ps(ch->d[b], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)g)));
        if (type == PT_GGML_Q6_K) {
            const uint8_t *gd = g + 32; /* ql: words 0-31, qh: 32-47, scales: 48-51 */
            _mm512_store_ps(ch->dm[b], _mm512_setzero_ps());
#pragma GCC unroll 64
            for (size_t st = 0; st < 64; st++) {
                const size_t v = 4 * st, h = v / 128, q = v % 128 / 32, l = v % 32;
                const __m512i ql = qp_word(gd, (64 * h + 32 * (q % 2) + l) / 4);
                const __m512i qh = qp_word(gd, 32 + (32 * h + l) / 4);
                const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(ql, (unsigned)(4 * (q / 2))), f);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(qh, (unsigned)(2 * q)), _mm512_set1_epi8(3));
                ch->w[b][st] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4));
            }
            for (unsigned s = 0; s < 16; s++)
                ch->sc[b][s] = _mm512_srai_epi32(_mm512_slli_epi32(qp_word(gd, 48 + s / 4), 24 - 8 * (s % 4)), 24);
            for (unsigned p = 0; p < 8; p++) {
                const __m512i w = qp_word(gd, 48 + p / 2);
                const __m512i lo = _mm512_srai_epi32(_mm512_slli_epi32(w, 24 - 16 * (p % 2)), 24);
                const __m512i hi = _mm512_srai_epi32(_mm512_slli_epi32(w, 16 - 16 * (p % 2)), 24);
                ch->pr[b][p] = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)),
                                               _mm512_slli_epi32(hi, 16));
            }
            continue;
        }
        _mm512_store_ps(ch->dm[b], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(g + 32))));
        const uint8_t *gd = g + 64; /* scales: words 0-2; Q5_K qh: 3-10; qs: the rest */
        const bool five = type == PT_GGML_Q5_K;
        const size_t qs0 = five ? 11 : 3;
        const __m512i s0 = qp_word(gd, 0), s1 = qp_word(gd, 1), s2 = qp_word(gd, 2);
        const __m512i m6 = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30);
        const __m512i sc[2] = { _mm512_and_si512(s0, m6),
                                _mm512_or_si512(_mm512_and_si512(s2, f),
                                                _mm512_and_si512(_mm512_srli_epi32(s0, 2), m30)) };
        const __m512i mn[2] = { _mm512_and_si512(s1, m6),
                                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), f),
                                                _mm512_and_si512(_mm512_srli_epi32(s1, 2), m30)) };
        for (int s = 0; s < 8; s++) {
            ch->sc[b][s] = qp_byte(sc[s / 4], 8 * (s % 4));
            const __m512i m = qp_byte(mn[s / 4], 8 * (s % 4));
            ch->pr[b][s] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
        }
#pragma GCC unroll 64
        for (size_t st = 0; st < 64; st++) { /* sub-block st / 8, its step st % 8 */
            const size_t sb = st / 8, t = st % 8;
            const __m512i q = qp_word(gd, qs0 + 8 * (sb / 2) + t);
            __m512i w = _mm512_and_si512(sb % 2 ? _mm512_srli_epi32(q, 4) : q, f);
            if (five) {
                const __m512i h = _mm512_and_si512(_mm512_srli_epi32(qp_word(gd, 3 + t), (unsigned)sb),
                                                   _mm512_set1_epi8(1));
                w = _mm512_or_si512(w, _mm512_slli_epi32(h, 4));
            }
            ch->w[b][st] = w;
        }
    }
}

/* Rows 0 .. mc of x (<= 16) against a chunk's super-blocks b0 .. b0 + nbc
 * into acc[c][b % 8]. */
QG_INLINE void qk_xrows_n(const int type, const pt_qact *a, size_t mc, size_t b0, size_t nbc,
                          const qk_chunk *ch, __m512 acc[16][8])
{
    const bool six = type == PT_GGML_Q6_K;
    const int nsub = six ? 16 : 8, steps = six ? 4 : 8; /* sub-blocks, 4-value steps of each */
    for (size_t b = 0; b < nbc; b++) {
        const size_t bb = b0 + b, e = bb % 8;
        __m512i is[16];
#pragma GCC unroll 16
        for (size_t c = 0; c < 16; c++) /* (all 16: no warning on the ones past mc) */
            is[c] = _mm512_setzero_si512();
        for (int sb = 0; sb < nsub; sb++) {
            __m512i w[8];
            for (int t = 0; t < steps; t++)
                w[t] = _mm512_load_si512((const void *)&ch->w[b][sb * steps + t]);
            const __m512i scv = _mm512_load_si512((const void *)&ch->sc[b][sb]);
#pragma GCC unroll 16
            for (size_t c = 0; c < mc; c++) {
                const int32_t *xb = (const int32_t *)(const void *)(a->q + c * a->kp + bb * PT_QK_K) + sb * steps;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                for (int t = 0; t < steps; t += 2) {
                    qw_dpbusd_bcast(&s0, w[t], xb + t);
                    qw_dpbusd_bcast(&s1, w[t + 1], xb + t + 1);
                }
                is[c] = _mm512_add_epi32(is[c], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), scv));
            }
        }
        __m512i pr[8];
        for (int p = 0; p < 8; p++)
            pr[p] = _mm512_load_si512((const void *)&ch->pr[b][p]);
        const __m512 dv = _mm512_load_ps(ch->d[b]), dmv = _mm512_load_ps(ch->dm[b]);
#pragma GCC unroll 16
        for (size_t c = 0; c < mc; c++) {
            const size_t at = c * a->nbp + bb;
            const int32_t *bs = (const int32_t *)(const void *)(a->bsum + at * 16);
            __m512i j = _mm512_setzero_si512();
            for (int p = 0; p < 8; p++)
                j = _mm512_dpwssd_epi32(j, pr[p], _mm512_set1_epi32(bs[p]));
            const __m512 dx = _mm512_set1_ps(a->d[at]);
            if (six) {
                const __m512i vi = _mm512_sub_epi32(is[c], _mm512_slli_epi32(j, 5));
                acc[c][e] = _mm512_fmadd_ps(_mm512_mul_ps(dv, dx), _mm512_cvtepi32_ps(vi), qw_acc_in(&acc[c][e], bb));
                continue;
            }
            acc[c][e] = _mm512_fmadd_ps(_mm512_mul_ps(dv, dx), _mm512_cvtepi32_ps(is[c]), qw_acc_in(&acc[c][e], bb));
            const __m512 nm = _mm512_xor_ps(_mm512_mul_ps(dmv, dx), _mm512_set1_ps(-0.0f));
            acc[c][e] = _mm512_fmadd_ps(nm, _mm512_cvtepi32_ps(j), acc[c][e]);
        }
    }
}

/* qk_xrows_n, its loops over the rows of x unrolled for 16 (their integer
 * sums in registers, not on the stack) when mc is 16. */
QG_INLINE void qk_xrows(const int type, const pt_qact *a, size_t mc, size_t b0, size_t nbc,
                        const qk_chunk *ch, __m512 acc[16][8])
{
    if (mc == 16)
        qk_xrows_n(type, a, 16, b0, nbc, ch, acc);
    else
        qk_xrows_n(type, a, mc, b0, nbc, ch, acc);
}

/* len (<= 16) W rows of super-blocks against every row of x, 16 rows of x
 * at a time (the chunk unpacked once when the row fits in one). */
QG_INLINE void qk_rows(const int type, const bool packed, const pt_qact *a, size_t len,
                       const uint8_t *wrow, size_t rbytes, float alpha, float beta, float *y,
                       size_t ldy)
{
    const size_t bytes = qg_block_bytes(type), nb = rbytes / bytes;
    /* the task's rows, one contiguous region, fetched now */
    for (size_t o = 0; o < len * rbytes; o += 64)
        _mm_prefetch((const char *)(wrow + o), _MM_HINT_T0);
    qk_chunk ch;
    qk_rowbuf rb;
    __m512 acc[16][8];
    for (size_t i0 = 0; i0 < a->m; i0 += 16) {
        const size_t mc = a->m - i0 < 16 ? a->m - i0 : 16;
        pt_qact ai = *a; /* rows i0 .. of x */
        ai.q += i0 * a->kp, ai.d += i0 * a->nbp, ai.bsum += i0 * a->nbp * 16;
        qw_acc_zero(acc, mc, nb);
        for (size_t b0 = 0; b0 < nb; b0 += QK_NB) {
            const size_t nbc = nb - b0 < QK_NB ? nb - b0 : QK_NB;
            if ((i0 == 0 || nb > QK_NB) && packed)
                qk_chunk_packed(type, wrow, bytes, b0, nbc, &ch);
            else if (i0 == 0 || nb > QK_NB)
                qk_chunk_fill(type, wrow, rbytes, len, bytes, b0, nbc, &ch, &rb);
            qk_xrows(type, &ai, mc, b0, nbc, &ch, acc);
        }
        for (size_t c = 0; c < mc; c++)
            qw_store(acc[c], len, alpha, beta, y + (i0 + c) * ldy);
    }
}

/* vpdpbusd with both sources in registers (the broadcast of x's 4 bytes
 * made once for two groups of W rows, not folded into each instruction as
 * a memory operand: on Zen 5 0.126 ns a register vpdpbusd, 0.169 with
 * {1to16}). */
QG_INLINE void qw_dpbusd_reg(__m512i *acc, __m512i w, __m512i x)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(*acc) : "v"(w), "v"(x));
}

/* Block bb of two packed groups (16 W rows each: w[0], w[1], their scales
 * and mins wd, wm) against rows i0 .. i0 + mc of x, into acc[g][c][bb % 8]:
 * each 4 bytes of x broadcast once into a register for both groups, each
 * group's block in two chains.  Each group's operations are
 * qw_block_xrows': the same bits. */
QG_INLINE void qw_block_xrows2(const int type, const pt_qact *a, size_t i0, size_t mc, size_t bb,
                               const __m512i w[2][8], const __m512 wd[2], const __m512 wm[2],
                               __m512 acc[2][16][8])
{
    for (size_t c = 0; c < mc; c++) {
        const size_t i = i0 + c;
        const int32_t *xb = (const int32_t *)(const void *)(a->q + i * a->kp + bb * PT_QK);
        __m512i s[2][2];
        for (int g = 0; g < 2; g++)
            for (int u = 0; u < 2; u++)
                s[g][u] = _mm512_setzero_si512();
        for (int t = 0; t < 8; t++) {
            const __m512i xv = _mm512_set1_epi32(xb[t]);
            qw_dpbusd_reg(&s[0][t % 2], w[0][t], xv);
            qw_dpbusd_reg(&s[1][t % 2], w[1][t], xv);
        }
        for (int g = 0; g < 2; g++)
            qw_block_acc(type, a, i * a->nbp + bb, bb, _mm512_add_epi32(s[g][0], s[g][1]), wd[g], wm[g],
                         &acc[g][c][bb % 8]);
    }
}

/* G (1 or 2) full packed groups of 16 W rows (32-value blocks; the second
 * right after the first) against every row of x: each block unpacked into
 * registers just before its rows of x (qw_block_xrows; two groups at once
 * by qw_block_xrows2, x's bytes broadcast once for both). */
QG_INLINE void qp_rows_fused(const int type, const int G, const pt_qact *a, const uint8_t *wrow,
                             size_t rb, float alpha, float beta, float *y, size_t ldy)
{
    const size_t bytes = qg_block_bytes(type), nb = rb / bytes, gb = 16 * rb; /* a group's bytes */
    const bool min = qg_has_min(type);
    const uint8_t *next = wrow + (size_t)G * gb;
    const size_t per = ((size_t)G * gb / 64 + nb) / nb;
    __m512 acc[2][16][8];
    for (size_t i0 = 0; i0 < a->m; i0 += 16) {
        const size_t mc = a->m - i0 < 16 ? a->m - i0 : 16;
        for (int g = 0; g < G; g++)
            qw_acc_zero(acc[g], mc, nb);
        for (size_t b = 0; b < nb; b++) {
            if (i0 == 0)
                qw_fetch_share(next, (size_t)G * gb, per, b);
            __m512i w[2][8];
            __attribute__((aligned(64))) float d[2][16], mn[2][16];
            __m512 wd[2], wm[2];
            for (int g = 0; g < G; g++) {
                qp_block(type, wrow + (size_t)g * gb + b * 16 * bytes, w[g], d[g], mn[g]);
                wd[g] = _mm512_load_ps(d[g]);
                wm[g] = min ? _mm512_load_ps(mn[g]) : _mm512_setzero_ps();
            }
            if (G == 1)
                qw_block_xrows(type, a, i0, mc, b, w[0], wd[0], wm[0], acc[0]);
            else
                qw_block_xrows2(type, a, i0, mc, b, w, wd, wm, acc);
        }
        for (size_t c = 0; c < mc; c++)
            for (int g = 0; g < G; g++)
                qw_store(acc[g][c], 16, alpha, beta, y + (i0 + c) * ldy + 16 * (size_t)g);
    }
}

/* len (<= 16) W rows against every row of x: W in chunks of QW_NB blocks
 * (transposed once when the row fits in one), x in groups of 16 rows. */
QG_INLINE void qw_rows_any(const int type, const bool packed, const pt_qact *a, size_t len,
                           const uint8_t *wrow, size_t rb, float alpha, float beta, float *y,
                           size_t ldy)
{
    if (qg_is_kquant(type)) {
        for (size_t g = 0; g < len; g += 16) /* (len 32: two packed groups) */
            qk_rows(type, packed, a, len - g < 16 ? len - g : 16, wrow + g * rb, rb, alpha, beta, y + g, ldy);
        return;
    }
    if (packed) { /* full groups: one, or two (len 32) */
        if (len == 32)
            qp_rows_fused(type, 2, a, wrow, rb, alpha, beta, y, ldy);
        else
            qp_rows_fused(type, 1, a, wrow, rb, alpha, beta, y, ldy);
        return;
    }
    const size_t bytes = qg_block_bytes(type), nb = rb / bytes;
    /* The task's W rows are one contiguous region that the unpacking reads
     * 16 rows at a time: fetch it all now (the hardware prefetcher follows
     * one row at a time); the next task's rows (usually the next 16) are
     * fetched a few lines a block while the first chunk runs (qw_xrows). */
    for (size_t o = 0; o < len * rb; o += 64)
        _mm_prefetch((const char *)(wrow + o), _MM_HINT_T0);
    __m512i wt[QW_NB * 8];
    __attribute__((aligned(64))) float wd[QW_NB * 16], wm[QW_NB * 16];
    __m512 acc[16][8];
    for (size_t i0 = 0; i0 < a->m; i0 += 16) {
        const size_t mc = a->m - i0 < 16 ? a->m - i0 : 16;
        qw_acc_zero(acc, mc, nb);
        for (size_t b0 = 0; b0 < nb; b0 += QW_NB) {
            const size_t nbc = nb - b0 < QW_NB ? nb - b0 : QW_NB;
            if (i0 == 0 || nb > QW_NB)
                qw_chunk(type, wrow, rb, len, bytes, b0, nbc, wt, wd, wm);
            qw_xrows(type, a, i0, mc, b0, nbc, wt, wd, wm, acc, wrow + len * rb,
                     i0 == 0 && b0 == 0 ? 16 * rb : 0);
        }
        for (size_t c = 0; c < mc; c++)
            qw_store(acc[c], len, alpha, beta, y + (i0 + c) * ldy);
    }
}

/* W's rows as the file has them; 16 rows packed (kernels/qpack.c). */
QG_INLINE void qw_rows(const int type, const pt_qact *a, size_t len, const uint8_t *wrow, size_t rb,
                       float alpha, float beta, float *y, size_t ldy)
{
    qw_rows_any(type, false, a, len, wrow, rb, alpha, beta, y, ldy);
}

QG_INLINE void qp_rows(const int type, const pt_qact *a, size_t len, const uint8_t *wrow, size_t rb,
                       float alpha, float beta, float *y, size_t ldy)
{
    qw_rows_any(type, true, a, len, wrow, rb, alpha, beta, y, ldy);
}

QG_KERNELS(qw, qw_rows)
QG_KERNELS(qp, qp_rows)

pt_qgemv_fn *pt__qgemv_vnni16(int type)
{
    return qw_pick(type);
}

pt_qgemv_fn *pt__qgemv_vnni16p(int type)
{
    return qp_pick(type);
}

pt_qgemv_fn *pt__qgemv_vnni(int type)
{
    return qg_pick(type);
}

#endif
