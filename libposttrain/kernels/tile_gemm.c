/* BF16 tile products (kernels/tile_gemm.h): packing, the AMX kernel and its
 * C emulation (one body, kernels/tile_gemm_kern.inc). */
#include "kernels/tile_gemm.h"

#include "kernels/cpu.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PT_TILE_AMX_BUILD 1
#endif

static size_t up32(size_t x)
{
    return (x + 31) & ~(size_t)31;
}

size_t pt__tile_gemm_pack_elems(size_t m, size_t n, size_t k)
{
    const size_t kp = up32(k ? k : 1);
    return up32(m) * kp + kp * up32(n);
}

/* ---- mode ---- */

static atomic_int forced = -1;

static bool amx_allowed(void)
{
    const char *e = getenv("PT_AMX");
    return pt__cpu_has_amx() && !(e && strcmp(e, "0") == 0);
}

pt_tile_mode pt__tile_mode(void)
{
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    if (f >= 0)
        return (pt_tile_mode)f;
    return pt__cpu_bf16_compute() && amx_allowed() ? PT_TILE_AMX : PT_TILE_OFF;
}

bool pt__tile_force(int mode)
{
    if (mode == PT_TILE_AMX && !pt__cpu_has_amx())
        return false;
    if (mode < -1 || mode > PT_TILE_AMX)
        return false;
    atomic_store(&forced, mode);
    return true;
}

/* ---- packing ----
 * Both operands are built from 32-bit words of two BF16 values: an A row
 * is k/2 words (A[i][2p], A[i][2p+1]); a B row p is n words (B[2p][j],
 * B[2p+1][j]).  A stored k-major (ta) and B stored n-major (tb) are made
 * from the other kind of word and transposed 16 x 16 words at a time. */

/* FP32 -> BF16 as the tiles read it: round to nearest even (NaN quiet, as
 * pt__f32_to_bf16), FP32 denormals as signed zeros, as vcvtne2ps2bf16
 * does (tdpbf16ps reads BF16 denormals as zero anyway). */
static inline pt_bf16 tile_bf16(float x)
{
    const uint32_t u = pt__f32_bits(x);
    if ((u & 0x7f800000u) == 0)
        return (pt_bf16)((u >> 16) & 0x8000u);
    return pt__f32_to_bf16(x);
}

static inline uint32_t pair_word(float lo, float hi)
{
    return (uint32_t)tile_bf16(lo) | (uint32_t)tile_bf16(hi) << 16;
}

/* w[j] = (r0[j], r1[j]) for j < n, then zero words up to np; r1 NULL: the
 * high halves zero (k odd), r0 NULL: all zero. */
static void pair_row_c(uint32_t *w, const float *r0, const float *r1, size_t n, size_t np)
{
    size_t j = 0;
    if (r0 && r1)
        for (; j < n; j++)
            w[j] = pair_word(r0[j], r1[j]);
    else if (r0)
        for (; j < n; j++)
            w[j] = tile_bf16(r0[j]);
    for (; j < np; j++)
        w[j] = 0;
}

/* w[p] = (r[2p], r[2p+1]) for the k values of r, then zero words up to
 * kp/2 (r NULL: all zero). */
static void word_row_c(uint32_t *w, const float *r, size_t k, size_t kp)
{
    size_t p = 0;
    if (r) {
        for (; 2 * p + 1 < k; p++)
            w[p] = pair_word(r[2 * p], r[2 * p + 1]);
        if (k & 1)
            w[p++] = tile_bf16(r[k - 1]);
    }
    for (; p < kp / 2; p++)
        w[p] = 0;
}

/* dst[c * ldd + r] = t[r][c], a 16 x 16 block of words. */
static void transpose16_c(uint32_t *dst, size_t ldd, const uint32_t t[16][16])
{
    for (int c = 0; c < 16; c++)
        for (int r = 0; r < 16; r++)
            dst[(size_t)c * ldd + (size_t)r] = t[r][c];
}

#ifdef PT_TILE_AMX_BUILD
/* The same three with AVX-512 and AVX512_BF16's vcvtne2ps2bf16 (AMX mode:
 * every AMX CPU has both), bit for bit. */
#define PT_TARGET_V __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

static inline __mmask16 tail_mask(size_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* 32 BF16 values: lo's 16 then hi's 16. */
PT_TARGET_V static inline __m512i cvt32(__m512 lo, __m512 hi)
{
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

PT_TARGET_V static void pair_row_v(uint32_t *w, const float *r0, const float *r1, size_t n, size_t np)
{
    /* (r0[j], r1[j]) pairs: BF16 halves 0-15 from r0, 16-31 from r1, interleaved */
    const __m512i mix = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    size_t j = 0;
    for (; r0 && j < n; j += 16) {
        const __mmask16 k = tail_mask(n - j);
        const __m512 a = _mm512_maskz_loadu_ps(k, r0 + j);
        const __m512 b = r1 ? _mm512_maskz_loadu_ps(k, r1 + j) : _mm512_setzero_ps();
        _mm512_mask_storeu_epi32(w + j, k, _mm512_permutexvar_epi16(mix, cvt32(a, b)));
    }
    for (j = r0 ? n : 0; j < np; j++)
        w[j] = 0;
}

PT_TARGET_V static void word_row_v(uint32_t *w, const float *r, size_t k, size_t kp)
{
    size_t x = 0;
    for (; r && x < k; x += 32) {
        const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(k - x), r + x);
        const __m512 hi = _mm512_maskz_loadu_ps(k - x > 16 ? tail_mask(k - x - 16) : 0, r + x + 16);
        _mm512_storeu_si512(w + x / 2, cvt32(lo, hi));
    }
    for (x = r ? (k + 1) / 2 : 0; x < kp / 2; x++)
        w[x] = 0;
}

PT_TARGET_V static void transpose16_v(uint32_t *dst, size_t ldd, const uint32_t t[16][16])
{
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        const __m512i r0 = _mm512_loadu_si512(t[i]), r1 = _mm512_loadu_si512(t[i + 1]);
        a[i] = _mm512_unpacklo_epi32(r0, r1);
        a[i + 1] = _mm512_unpackhi_epi32(r0, r1);
    }
    /* b[4g + q]: per 128-bit lane L, column 4L + q of rows 4g..4g+3 */
    for (int g = 0; g < 4; g++) {
        const __m512i *x = a + 4 * g;
        b[4 * g + 0] = _mm512_unpacklo_epi64(x[0], x[2]);
        b[4 * g + 1] = _mm512_unpackhi_epi64(x[0], x[2]);
        b[4 * g + 2] = _mm512_unpacklo_epi64(x[1], x[3]);
        b[4 * g + 3] = _mm512_unpackhi_epi64(x[1], x[3]);
    }
    /* a[q], a[4 + q] (q < 4): columns (q, q+8) and (q+4, q+12) of rows 0-7; a[8..15]: rows 8-15 */
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 4; q++) {
            a[8 * h + q] = _mm512_shuffle_i32x4(b[8 * h + q], b[8 * h + 4 + q], 0x88);
            a[8 * h + 4 + q] = _mm512_shuffle_i32x4(b[8 * h + q], b[8 * h + 4 + q], 0xdd);
        }
    for (int c = 0; c < 8; c++) { /* a[c], a[8 + c]: columns c and c + 8 */
        _mm512_storeu_si512(dst + (size_t)c * ldd, _mm512_shuffle_i32x4(a[c], a[8 + c], 0x88));
        _mm512_storeu_si512(dst + (size_t)(c + 8) * ldd, _mm512_shuffle_i32x4(a[c], a[8 + c], 0xdd));
    }
}
#endif

static void pair_row(bool v, uint32_t *w, const float *r0, const float *r1, size_t n, size_t np)
{
#ifdef PT_TILE_AMX_BUILD
    if (v) {
        pair_row_v(w, r0, r1, n, np);
        return;
    }
#endif
    pair_row_c(w, r0, r1, n, np);
}

static void word_row(bool v, uint32_t *w, const float *r, size_t k, size_t kp)
{
#ifdef PT_TILE_AMX_BUILD
    if (v) {
        word_row_v(w, r, k, kp);
        return;
    }
#endif
    word_row_c(w, r, k, kp);
}

static void transpose16(bool v, uint32_t *dst, size_t ldd, const uint32_t t[16][16])
{
#ifdef PT_TILE_AMX_BUILD
    if (v) {
        transpose16_v(dst, ldd, t);
        return;
    }
#endif
    transpose16_c(dst, ldd, t);
}

/* A (m x k, or k x m when ta) as Mp rows of Kp/2 words. */
static void pack_a(bool v, uint32_t *dst, bool ta, const float *a, size_t lda, size_t m, size_t k)
{
    const size_t Mp = up32(m), Kp = up32(k ? k : 1), W = Kp / 2;
    if (!ta) {
        for (size_t i = 0; i < Mp; i++)
            word_row(v, dst + i * W, i < m ? a + i * lda : NULL, k, Kp);
        return;
    }
    /* A[i][2p], A[i][2p+1] = a[2p][i], a[2p+1][i]: word rows over i, transposed */
    uint32_t t[16][16];
    for (size_t p0 = 0; p0 < W; p0 += 16)
        for (size_t i0 = 0; i0 < Mp; i0 += 16) {
            size_t ni = i0 >= m ? 0 : m - i0 < 16 ? m - i0 : 16;
            for (size_t q = 0; q < 16; q++) {
                size_t x = 2 * (p0 + q);
                const float *r0 = ni && x < k ? a + x * lda + i0 : NULL;
                const float *r1 = r0 && x + 1 < k ? r0 + lda : NULL;
                pair_row(v, t[q], r0, r1, ni, 16);
            }
            transpose16(v, dst + i0 * W + p0, W, t);
        }
}

/* B (k x n, or n x k when tb) as Kp/2 rows of Np words. */
static void pack_b(bool v, uint32_t *dst, bool tb, const float *b, size_t ldb, size_t k, size_t n)
{
    const size_t Np = up32(n), Kp = up32(k ? k : 1), W = Kp / 2;
    if (!tb) {
        for (size_t p = 0; p < W; p++) {
            const float *r0 = 2 * p < k ? b + 2 * p * ldb : NULL;
            const float *r1 = 2 * p + 1 < k ? b + (2 * p + 1) * ldb : NULL;
            pair_row(v, dst + p * Np, r0, r1, n, Np);
        }
        return;
    }
    /* B[2p][j], B[2p+1][j] = b[j][2p], b[j][2p+1]: words of b's rows, transposed */
    uint32_t t[16][16];
    for (size_t j0 = 0; j0 < Np; j0 += 16)
        for (size_t p0 = 0; p0 < W; p0 += 16) {
            size_t x0 = 2 * p0, nx = x0 >= k ? 0 : k - x0 < 32 ? k - x0 : 32;
            for (size_t q = 0; q < 16; q++)
                word_row(v, t[q], j0 + q < n && nx ? b + (j0 + q) * ldb + x0 : NULL, nx, 32);
            transpose16(v, dst + p0 * Np + j0, Np, t);
        }
}

void pt__tile_pack(bool avx512, bool ta, bool tb, size_t m, size_t n, size_t k, const float *a,
                   size_t lda, const float *b, size_t ldb, pt_bf16 *pack)
{
#ifndef PT_TILE_AMX_BUILD
    avx512 = false;
#endif
    pack_a(avx512, (uint32_t *)pack, ta, a, lda, m, k);
    pack_b(avx512, (uint32_t *)(pack + up32(m) * up32(k ? k : 1)), tb, b, ldb, k, n);
}

/* The 32 x 32 block (i0, j0) of the product, from its four 16 x 16 tiles,
 * into C (the rows and columns inside m x n). */
static void tile_block_out(float out[4][256], size_t i0, size_t j0, float alpha, float beta,
                           float *c, size_t ldc, size_t m, size_t n)
{
    for (int t = 0; t < 4; t++) {
        size_t r0 = i0 + 16 * (size_t)(t / 2), c0 = j0 + 16 * (size_t)(t % 2);
        if (r0 >= m || c0 >= n)
            continue;
        size_t nr = m - r0 < 16 ? m - r0 : 16, nc = n - c0 < 16 ? n - c0 : 16;
        for (size_t r = 0; r < nr; r++) {
            float *dst = c + (r0 + r) * ldc + c0;
            const float *src = out[t] + r * 16;
            if (beta == 0.0f)
                for (size_t x = 0; x < nc; x++)
                    dst[x] = alpha * src[x];
            else
                for (size_t x = 0; x < nc; x++)
                    dst[x] = alpha * src[x] + beta * dst[x];
        }
    }
}

/* ---- the C emulation of the tiles ---- */

typedef struct etile {
    unsigned char b[16][64];
} etile;

static void et_load(etile *t, const void *p, size_t stride)
{
    for (int r = 0; r < 16; r++)
        memcpy(t->b[r], (const unsigned char *)p + (size_t)r * stride, 64);
}

static void et_store(const etile *t, void *p, size_t stride)
{
    for (int r = 0; r < 16; r++)
        memcpy((unsigned char *)p + (size_t)r * stride, t->b[r], 64);
}

static float et_bf16(const etile *t, int r, int i)
{
    pt_bf16 h;
    memcpy(&h, t->b[r] + 2 * i, sizeof h);
    return pt__bf16_to_f32(h);
}

/* tdpbf16ps: c[m][n] += a[m][2p] b[p][2n] + a[m][2p+1] b[p][2n+1], pair by
 * pair in p, each product exact in FP32, each sum rounded. */
static void et_dp(etile *c, const etile *a, const etile *b)
{
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 16; j++) {
            float acc;
            memcpy(&acc, c->b[r] + 4 * j, sizeof acc);
            for (int p = 0; p < 16; p++) {
                acc += et_bf16(a, r, 2 * p) * et_bf16(b, p, 2 * j);
                acc += et_bf16(a, r, 2 * p + 1) * et_bf16(b, p, 2 * j + 1);
            }
            memcpy(c->b[r] + 4 * j, &acc, sizeof acc);
        }
}

#define TILE_KERNEL static void kernel_emulated
#define TILE_BEGIN etile tl_[8]
#define TILE_ZERO(t) memset(&tl_[t], 0, sizeof tl_[t])
#define TILE_LOAD(t, p, stride) et_load(&tl_[t], (p), (stride))
#define TILE_DP(c, a, b) et_dp(&tl_[c], &tl_[a], &tl_[b])
#define TILE_STORE(t, p, stride) et_store(&tl_[t], (p), (stride))
#define TILE_END (void)0
#include "kernels/tile_gemm_kern.inc"
#undef TILE_KERNEL
#undef TILE_BEGIN
#undef TILE_ZERO
#undef TILE_LOAD
#undef TILE_DP
#undef TILE_STORE
#undef TILE_END

/* ---- AMX ---- */

#ifdef PT_TILE_AMX_BUILD
/* ldtilecfg's 64 bytes: palette 1, eight tiles of 16 rows of 64 bytes. */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static const tile_config k_config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

#define TILE_KERNEL __attribute__((target("amx-tile,amx-bf16"))) static void kernel_amx
#define TILE_BEGIN _tile_loadconfig(&k_config)
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_LOAD(t, p, stride) _tile_loadd(t, (p), (long)(stride))
#define TILE_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#define TILE_STORE(t, p, stride) _tile_stored(t, (p), (long)(stride))
#define TILE_END _tile_release()
#include "kernels/tile_gemm_kern.inc"
#endif

bool pt__tile_gemm(pt_tile_mode mode, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                   const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                   size_t ldc, pt_bf16 *pack)
{
    if (m == 0 || n == 0)
        return true;
    if (mode != PT_TILE_EMULATED && !(mode == PT_TILE_AMX && pt__cpu_has_amx()))
        return false;
    const size_t Mp = up32(m), Np = up32(n), Kp = up32(k ? k : 1);
    pt_bf16 *ap = pack, *bp = pack + Mp * Kp;
    pt__tile_pack(mode == PT_TILE_AMX, ta, tb, m, n, k, a, lda, b, ldb, pack);
#ifdef PT_TILE_AMX_BUILD
    if (mode == PT_TILE_AMX) {
        kernel_amx(ap, bp, Mp, Np, Kp, alpha, beta, c, ldc, m, n);
        return true;
    }
#endif
    kernel_emulated(ap, bp, Mp, Np, Kp, alpha, beta, c, ldc, m, n);
    return true;
}
