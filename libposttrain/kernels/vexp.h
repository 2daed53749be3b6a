/* exp for float in a form GCC vectorises inside `#pragma omp simd` loops
 * (glibc's expf is a scalar call there).  Cody-Waite reduction
 * x = n ln2 + r, |r| <= ln2/2, and the Cephes expf polynomial: relative error
 * below 2e-7 for x in [-87, 88].  x < -87 (including -inf) gives 0; x > 88
 * saturates at exp(88) (callers subtract a maximum first); NaN gives NaN.
 * No float-to-int conversion (the exponent is read from the rounding
 * constant's bits), so no undefined behaviour for any input. */
#ifndef PT_KERNELS_VEXP_H
#define PT_KERNELS_VEXP_H

#include <stddef.h>
#include <stdint.h>

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

#endif
