/* The quantized small-m kernels (kernels/qgemv.h) with AVX512_VNNI, on
 * 512-bit vectors: the 32-value block types take two blocks a vpdpbusd (one
 * instruction for AVX2's vpmaddubsw + vpmaddwd + add, and no int16 stage:
 * Q8_0's weights enter as w + 128, the activation sums correcting), the
 * K-quants 64 values a vpmaddubsw + vpdpwssd (the sub-block scales folded
 * into the dot).  Compiled with a function-level target so the library's
 * baseline stays x86-64-v3: call only when pt__cpu_active() >= PT_CPU_AVX512
 * and pt__cpu_has_vnni().  Same arithmetic as every path (the integer sums
 * are exact in any order), so the same bits. */
#include "kernels/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define QG_VNNI 1
#include "kernels/qgemv_tmpl.h"

/* ---- many rows of x, K-quants: 16 rows of x in the lanes (qt_rows) ----
 *
 * For one W super-block and 16 rows of x, lane r of isum gathers row r's
 * exact sum: step t adds the 4 weights 4t..4t+3 (broadcast to every lane
 * from the unpacked super-block in memory) times each row's 4 values there
 * (a->qt holds them side by side), with no reduction across lanes; the
 * float operations are kernels/qgemv.h's for each row (lane), block by
 * block, into the accumulator of lane b % 8 (acc[e] below holds that lane
 * for the 16 rows).  The 32-value blocks have W's rows in the lanes
 * instead (qw_rows, below). */

/* The 8 accumulators of 16 rows summed in a fixed order, times alpha, into
 * y's column (row r at y[r * ldy]; beta as pt_qgemv_rows). */
QG_INLINE void qt_store16(const __m512 acc[8], size_t rows, float alpha, float beta, float *y,
                                        size_t ldy)
{
    const __m512 s = _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
        _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
    float o[16];
    _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_set1_ps(alpha), s));
    for (size_t r = 0; r < rows; r++) {
        float *yy = &y[r * ldy];
        *yy = beta == 0.0f ? o[r] : __builtin_fmaf(beta, *yy, o[r]);
    }
}

/* K-quants the same way: a super-block unpacked (qg_unpack_q45k / q6k,
 * slot 0 of wb), then per 32 values (Q4_K, Q5_K) or 16 (Q6_K) the exact
 * sums of each row in the lanes, times the sub-block's scale (vpmulld: the
 * same integers as kernels/qgemv.h's I); the mins' term J (Q6_K: its
 * offset 32) from the pairs of sums of 16 by vpmaddwd. */
QG_INLINE void qt_superblock(const int type, const uint8_t *bp, qg_wk *wb, const int32_t *xb,
                             const int32_t *bs, __m512i *vi, __m512i *vj)
{
    const bool six = type == PT_GGML_Q6_K;
    if (six)
        qg_unpack_q6k(bp, wb, 0);
    else
        qg_unpack_q45k(bp, type == PT_GGML_Q5_K, wb, 0);
    const int32_t *u = (const int32_t *)(const void *)wb->q[0];
    const int per = six ? 4 : 8; /* 4-value steps a sub-block */
    __m512i isum = _mm512_setzero_si512();
    for (int sb = 0; sb < 64 / per; sb++) {
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int t = 0; t < per; t += 2) {
            const int st = sb * per + t;
            s0 = _mm512_dpbusd_epi32(s0, _mm512_set1_epi32(u[st]), _mm512_load_si512((const void *)(xb + 16 * st)));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_set1_epi32(u[st + 1]),
                                     _mm512_load_si512((const void *)(xb + 16 * st + 16)));
        }
        const int sc = six ? wb->mn[0][sb] : wb->sv[0][sb][0];
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(sc)));
    }
    const int32_t *mp = (const int32_t *)(const void *)wb->mn[0];
    __m512i j = _mm512_setzero_si512();
    for (int p = 0; p < 8; p++)
        j = _mm512_add_epi32(j, _mm512_madd_epi16(_mm512_set1_epi32(mp[p]), _mm512_load_si512((const void *)(bs + 16 * p))));
    if (six) {
        *vi = _mm512_sub_epi32(isum, _mm512_slli_epi32(j, 5));
        *vj = _mm512_setzero_si512();
    } else {
        *vi = isum;
        *vj = j;
    }
}

/* The super-blocks of the W row wr against the 16 rows of group data
 * xq/dt/bsumt into acc (super-block b into acc[b % 8]). */
QG_INLINE void qt_blocksk(const int type, const uint8_t *wr, size_t nb, size_t bytes, qg_wk *wb,
                          const int32_t *xq, const int32_t *bsumt, const float *dt, __m512 acc[8])
{
    for (size_t b = 0; b < nb; b++) {
        __m512i vi, vj;
        qt_superblock(type, wr + b * bytes, wb, xq + b * 1024, bsumt + b * 128, &vi, &vj);
        const __m512 dx = _mm512_load_ps(dt + b * 16);
        __m512 *ac = &acc[b % 8];
        *ac = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(wb->d[0]), dx), _mm512_cvtepi32_ps(vi), *ac);
        if (type != PT_GGML_Q6_K) {
            const __m512 nm = _mm512_xor_ps(_mm512_mul_ps(_mm512_set1_ps(wb->dm[0]), dx),
                                            _mm512_set1_ps(-0.0f));
            *ac = _mm512_fmadd_ps(nm, _mm512_cvtepi32_ps(vj), *ac);
        }
    }
}

/* len W rows against every row of x, 16 rows at a time; a group of fewer
 * than PT_QGEMV_M16 rows (the last) goes to the kernel for few rows.
 * K-quants (the 32-value blocks go to qw_rows). */
QG_INLINE void qt_rows(const int type, const pt_qact *a, size_t len, const uint8_t *wrow,
                       size_t rb, float alpha, float beta, float *y, size_t ldy)
{
    const size_t bytes = qg_block_bytes(type);
    const size_t nb = rb / bytes, ng = (a->m + 15) / 16;
    qg_wbuf wb;
    qg_wbuf_init(&wb, type);
    for (size_t j = 0; j < len; j++)
        for (size_t g = 0; g < ng; g++) {
            const size_t at = g * a->nbp * 16, rows = a->m - 16 * g < 16 ? a->m - 16 * g : 16;
            const uint8_t *wr = wrow + j * rb;
            if (rows < PT_QGEMV_M16) {
                qg_rowk(type, a, 16 * g, rows, wr, nb, bytes, &wb.wk, alpha, beta, y + j, ldy);
                continue;
            }
            const int32_t *xq = (const int32_t *)(const void *)a->qt + at * 64;
            __m512 acc[8];
            for (int e = 0; e < 8; e++)
                acc[e] = _mm512_setzero_ps();
            qt_blocksk(type, wr, nb, bytes, &wb.wk, xq, a->bsumt + g * a->nbp * 128, a->dt + at, acc);
            qt_store16(acc, rows, alpha, beta, &y[16 * g * ldy + j], ldy);
        }
}

/* ---- 32-value blocks: 16 rows of W in the lanes (qw_rows) ----
 *
 * A task's (up to) 16 W rows are unpacked block by block (qg_wvec) and
 * transposed so that lane r of step t's vector holds row r's weights
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

/* Blocks b0 .. b0 + nbc of the len (<= 16) W rows from wrow, unpacked and
 * transposed into wt (8 vectors a block), their scales (and Q4_1/Q5_1's
 * mins) into wd, wm (16 a block; 0 in the lanes past len). */
QG_INLINE void qw_chunk(const int type, const uint8_t *wrow, size_t rb, size_t len, size_t bytes,
                        size_t b0, size_t nbc, __m512i *wt, float *wd, float *wm)
{
    const bool min = qg_has_min(type);
    for (size_t b = 0; b < nbc; b++) {
        __m256i r[16];
        for (size_t i = 0; i < 16; i++) {
            const uint8_t *bp = wrow + i * rb + (b0 + b) * bytes;
            r[i] = i < len ? qg_wvec(type, bp) : _mm256_setzero_si256();
            wd[b * 16 + i] = i < len ? pt__q_f16(bp) : 0.0f;
            if (min)
                wm[b * 16 + i] = i < len ? pt__q_f16(bp + 2) : 0.0f;
        }
        qw_transpose(r, wt + b * 8);
    }
}

/* *acc = vpdpbusd(*acc, w, the 4 bytes at x in every lane), the broadcast
 * by the instruction's own memory operand ({1to16}); GCC 12 loads it with
 * a separate vpbroadcastd (8 more instructions a block and row). */
QG_INLINE void qw_dpbusd_bcast(__m512i *acc, __m512i w, const int32_t *x)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(*acc) : "v"(w), "m"(*x));
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
    const int sh = qg_offset_shift(type);
    const bool min = qg_has_min(type);
    for (size_t b = 0; b < nbc; b++) {
        const size_t bb = b0 + b, e = b % 8;
        for (size_t o = b * per * 64; o < (b + 1) * per * 64 && o < nbytes; o += 64)
            _mm_prefetch((const char *)(next + o), _MM_HINT_T0);
        __m512i w[8];
        for (int t = 0; t < 8; t++)
            w[t] = _mm512_load_si512((const void *)(wt + b * 8 + (size_t)t));
        const __m512 wdv = _mm512_load_ps(wd + b * 16);
        const __m512 wmv = min ? _mm512_load_ps(wm + b * 16) : _mm512_setzero_ps();
        for (size_t c = 0; c < mc; c++) {
            const size_t i = i0 + c, at = i * a->nbp + bb;
            const int32_t *xb = (const int32_t *)(const void *)(a->q + i * a->kp + bb * PT_QK);
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int t = 0; t < 8; t += 2) {
                qw_dpbusd_bcast(&s0, w[t], xb + t);
                qw_dpbusd_bcast(&s1, w[t + 1], xb + t + 1);
            }
            __m512i isum = _mm512_add_epi32(s0, s1);
            if (sh)
                isum = _mm512_sub_epi32(isum, _mm512_set1_epi32((int32_t)((uint32_t)a->sum[at] << sh)));
            const __m512 dd = _mm512_mul_ps(wdv, _mm512_set1_ps(a->d[at]));
            acc[c][e] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[c][e]);
            if (min)
                acc[c][e] = _mm512_fmadd_ps(wmv, _mm512_set1_ps(a->s[at]), acc[c][e]);
        }
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

/* len (<= 16) W rows against every row of x: W in chunks of QW_NB blocks
 * (transposed once when the row fits in one), x in groups of 16 rows. */
QG_INLINE void qw_rows(const int type, const pt_qact *a, size_t len, const uint8_t *wrow,
                       size_t rb, float alpha, float beta, float *y, size_t ldy)
{
    if (qg_is_kquant(type)) {
        qt_rows(type, a, len, wrow, rb, alpha, beta, y, ldy);
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
        for (size_t c = 0; c < mc; c++)
            for (int e = 0; e < 8; e++)
                acc[c][e] = _mm512_setzero_ps();
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

QG_KERNELS(qw, qw_rows)

pt_qgemv_fn *pt__qgemv_vnni16(int type)
{
    return qw_pick(type);
}

pt_qgemv_fn *pt__qgemv_vnni(int type)
{
    return qg_pick(type);
}

#endif
