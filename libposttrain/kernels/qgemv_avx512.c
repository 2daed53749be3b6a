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

/* ---- many rows of x: 16 in the lanes (pt__qgemv_vnni16) ----
 *
 * For one W block and 16 rows of x, lane r of isum gathers row r's exact
 * sum: step t adds the 4 weights 4t..4t+3 (broadcast to every lane) times
 * each row's 4 values there (a->qt holds them side by side), so 8
 * vpdpbusd give the 16 block sums with no reduction across lanes; the
 * float operations are kernels/qgemv.h's for each row (lane), block by
 * block, into the accumulator of lane b % 8 (acc[e] below holds that lane
 * for the 16 rows).  The 4 weights of a step reach every lane by one
 * vpermd from the unpacked block's register: through memory (a 256-bit
 * store, then 8 broadcast loads of it) the kernel ran 15-25% slower on a
 * Zen 5 (bench_qgemv, m = 16). */

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

/* 8 consecutive blocks from b (nbg < 8 of them at a row's end) of the W
 * row wr against the 16 rows of group data xq/dx/sx/xs into acc. */
QG_INLINE void qt_group8(const int type, const uint8_t *wr, size_t bytes, size_t b, int nbg,
                         const int32_t *xq, const float *dx, const float *sx, const int32_t *xs,
                         __m512 acc[8])
{
    const int sh = qg_offset_shift(type);
    const bool min = type == PT_GGML_Q4_1 || type == PT_GGML_Q5_1;
#pragma GCC unroll 8
    for (int e = 0; e < 8; e++) {
        if (e >= nbg)
            break;
        const size_t bb = b + (size_t)e;
        const uint8_t *bp = wr + bb * bytes;
        const __m512i w = _mm512_castsi256_si512(qg_wvec(type, bp));
        const int32_t *xb = xq + bb * 128;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int t = 0; t < 8; t += 2) {
            s0 = _mm512_dpbusd_epi32(s0, _mm512_permutexvar_epi32(_mm512_set1_epi32(t), w),
                                     _mm512_load_si512((const void *)(xb + 16 * t)));
            s1 = _mm512_dpbusd_epi32(s1, _mm512_permutexvar_epi32(_mm512_set1_epi32(t + 1), w),
                                     _mm512_load_si512((const void *)(xb + 16 * t + 16)));
        }
        __m512i isum = _mm512_add_epi32(s0, s1);
        if (sh)
            isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(_mm512_load_si512((const void *)(xs + bb * 16)), sh));
        const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(pt__q_f16(bp)), _mm512_load_ps(dx + bb * 16));
        acc[e] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[e]);
        if (min)
            acc[e] = _mm512_fmadd_ps(_mm512_set1_ps(pt__q_f16(bp + 2)), _mm512_load_ps(sx + bb * 16), acc[e]);
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
 * than PT_QGEMV_M16 rows (the last) goes to the kernel for few rows. */
QG_INLINE void qt_rows(const int type, const pt_qact *a, size_t len, const uint8_t *wrow,
                       size_t rb, float alpha, float beta, float *y, size_t ldy)
{
    const bool kq = qg_is_kquant(type);
    const size_t bytes = qg_block_bytes(type);
    const size_t nb = rb / bytes, ng = (a->m + 15) / 16;
    qg_wbuf wb;
    qg_wbuf_init(&wb, type);
    for (size_t j = 0; j < len; j++)
        for (size_t g = 0; g < ng; g++) {
            const size_t at = g * a->nbp * 16, rows = a->m - 16 * g < 16 ? a->m - 16 * g : 16;
            const uint8_t *wr = wrow + j * rb;
            if (rows < PT_QGEMV_M16) {
                if (kq)
                    qg_rowk(type, a, 16 * g, rows, wr, nb, bytes, &wb.wk, alpha, beta, y + j, ldy);
                else
                    qg_row32(type, a, 16 * g, rows, wr, nb, bytes, &wb.w32, alpha, beta, y + j, ldy);
                continue;
            }
            const int32_t *xq = (const int32_t *)(const void *)a->qt + at * (kq ? 64 : 8);
            __m512 acc[8];
            for (int e = 0; e < 8; e++)
                acc[e] = _mm512_setzero_ps();
            if (kq)
                qt_blocksk(type, wr, nb, bytes, &wb.wk, xq, a->bsumt + g * a->nbp * 128, a->dt + at,
                           acc);
            else
                for (size_t b = 0; b < nb; b += 8)
                    qt_group8(type, wr, bytes, b, nb - b < 8 ? (int)(nb - b) : 8, xq, a->dt + at,
                              a->st + at, a->sumt + at, acc);
            qt_store16(acc, rows, alpha, beta, &y[16 * g * ldy + j], ldy);
        }
}

QG_KERNELS(qt, qt_rows)

pt_qgemv_fn *pt__qgemv_vnni16(int type)
{
    return qt_pick(type);
}

pt_qgemv_fn *pt__qgemv_vnni(int type)
{
    return qg_pick(type);
}

#endif
