/* The scalar conversions between binary32 and the two 16-bit floats, shared
 * by io (safetensors, GGUF) and kernels (ggml blocks, BF16 products):
 *
 * - binary16 (F16): -> F32 exact; F32 -> F16 rounds to nearest, ties to
 *   even, overflow to inf, NaN stays a quiet NaN with its top payload bits
 *   (as ggml's F16C path and numpy);
 * - bfloat16 (BF16, the top 16 bits of a binary32): -> F32 exact (a shift);
 *   F32 -> BF16 rounds to nearest, ties to even, NaN stays a quiet NaN with
 *   its sign (as vcvtneps2bf16 and PyTorch). */
#ifndef PT_CORE_HALF_H
#define PT_CORE_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The float whose bits are u, and the bits of f. */
static inline float pt__f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t pt__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float pt__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: mant x 2^-24, exact in float */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) /* inf or NaN, payload kept */
        return pt__f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return pt__f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t pt__f32_to_f16(float f)
{
    uint32_t u = pt__f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep top payload bits, stay NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf (and inf itself) */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal or zero result */
        float v = pt__f32_from_bits(a) * 0x1p24f; /* |f| x 2^24, exact */
        return (uint16_t)(sign | (uint16_t)nearbyintf(v));
    }
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static inline float pt__bf16_to_f32(uint16_t h)
{
    return pt__f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t pt__f32_to_bf16(float f)
{
    uint32_t u = pt__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN: quiet, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
