/* BF16 conversions and products (kernels/bf16.h).  The BF16 GEMM and the
 * small-m kernels live in gemm_bf16.c and gemv.c; this file holds the
 * conversions and the portable reference paths. */
#include "kernels/bf16.h"

#include "core/core.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

#include <stdlib.h>

#define CONVERT_PAR_MIN (1u << 18) /* values: below this one thread */

static void f32_to_bf16_c(pt_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = pt__f32_to_bf16(src[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PT_CONVERT_BF16_ISA 1
/* vcvtne2ps2bf16, 32 values at a time: round to nearest even and NaN
 * quieted as pt__f32_to_bf16, but FP32 denormals become zeros; a block
 * holding one goes through the C loop instead, so the bits are the same. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
f32_to_bf16_v(pt_bf16 *dst, const float *src, size_t n)
{
    const __m512i expo = _mm512_set1_epi32(0x7f800000), mag = _mm512_set1_epi32(0x7fffffff);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        const __m512i ul = _mm512_castps_si512(lo), uh = _mm512_castps_si512(hi);
        /* lanes with a zero exponent and a non-zero magnitude: denormals */
        const __mmask16 dl = _mm512_mask_test_epi32_mask(_mm512_test_epi32_mask(ul, mag), ul, expo) ^
                             _mm512_test_epi32_mask(ul, mag);
        const __mmask16 dh = _mm512_mask_test_epi32_mask(_mm512_test_epi32_mask(uh, mag), uh, expo) ^
                             _mm512_test_epi32_mask(uh, mag);
        if (dl | dh)
            f32_to_bf16_c(dst + i, src + i, 32);
        else
            _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    f32_to_bf16_c(dst + i, src + i, n - i);
}
#endif

void pt__f32_to_bf16_n(pt_bf16 *dst, const float *src, size_t n)
{
    int nt = n >= CONVERT_PAR_MIN ? pt_get_num_threads() : 1;
#ifdef PT_CONVERT_BF16_ISA
    if (pt__cpu_active() >= PT_CPU_AVX512BF16) {
        /* whole 64-byte runs of the destination per thread */
        const size_t chunk = ((n + (size_t)nt - 1) / (size_t)nt + 31) & ~(size_t)31;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
        for (int t = 0; t < nt; t++) {
            size_t a = (size_t)t * chunk, b = a + chunk < n ? a + chunk : n;
            if (a < b)
                f32_to_bf16_v(dst + a, src + a, b - a);
        }
        return;
    }
#endif
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++)
        dst[i] = pt__f32_to_bf16(src[i]);
}

void pt__bf16_to_f32_n(float *dst, const pt_bf16 *src, size_t n)
{
    int nt = n >= CONVERT_PAR_MIN ? pt_get_num_threads() : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++)
        dst[i] = pt__bf16_to_f32(src[i]);
}
