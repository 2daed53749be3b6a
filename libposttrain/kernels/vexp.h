/* exp for float in a form GCC vectorises inside `#pragma omp simd` loops
 * (glibc's expf is a scalar call there).  Cody-Waite reduction
 * x = n ln2 + r, |r| <= ln2/2, and the Cephes expf polynomial: relative error
 * below 2e-7 for x in [-87, 88].  x < -87 (including -inf) gives 0; x > 88
 * saturates at exp(88) (callers subtract a maximum first); NaN gives NaN.
 * No float-to-int conversion (the exponent is read from the rounding
 * constant's bits), so no undefined behaviour for any input. */
#ifndef PT_KERNELS_VEXP_H
#define PT_KERNELS_VEXP_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

static inline float pt__vexpf(float x)
{
    union {
        uint32_t u;
        float f;
    } s, tb;
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    /* n = round(x / ln2) by the 1.5 * 2^23 trick (round to nearest even) */
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    tb.f = t; /* 12582912 + n: its low mantissa bits hold n */
    s.u = (tb.u - 0x4B400000u + 127u) << 23;
    float y = p * s.f;
    /* (a select, not a branch, so loops stay vectorisable) */
    return x < -87.0f ? 0.0f : y;
}

/* dst[i] = exp(src[i] - shift) for i < n (dst may be src), and their sum:
 * softmax's numerators and denominator once its maximum is known. */
static inline float pt__vexp_sum(float *dst, const float *src, size_t n, float shift)
{
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (size_t i = 0; i < n; i++) {
        float e = pt__vexpf(src[i] - shift);
        dst[i] = e;
        sum += e;
    }
    return sum;
}

/* The largest of x[0 .. n), NaNs skipped (-inf when there is none): the
 * value of the loop m = x[i] > m ? x[i] : m from m = -inf.  With AVX, 16 at
 * a time (its max returns the second operand when either is NaN, so the
 * same value; only the sign of a zero maximum may differ, which nothing
 * that subtracts it sees). */
static inline float pt__vmax(const float *x, size_t n)
{
    float m = -INFINITY;
    size_t i = 0;
#if defined(__AVX__)
    __m256 a = _mm256_set1_ps(-INFINITY), b = a;
    for (; i + 16 <= n; i += 16) {
        a = _mm256_max_ps(_mm256_loadu_ps(x + i), a);
        b = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), b);
    }
    float l[8];
    _mm256_storeu_ps(l, _mm256_max_ps(a, b));
    for (int j = 0; j < 8; j++)
        m = l[j] > m ? l[j] : m;
#endif
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

#endif
