/* Dequantization of ggml's block formats, Q8_0 / Q4_0 quantization, and the
 * checks of a quantized tensor.  The formulas and their order of operations
 * are those of llama.cpp's reference code (ggml-quants.c, dequantize_row_*
 * and quantize_row_{q8_0,q4_0}_ref); the code is ours.  This file is built
 * with -ffp-contract=off so that d * q - m is two roundings, as there.
 *
 * Blocks are read through byte pointers (data from a file may sit at any
 * address): the 16-bit scales with pt__q_half(), offsets from the structs. */
#include "kernels/quant.h"

#include "core/core.h"
#include "core/half.h"
#include "kernels/bf16.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

/* ---- binary16 ------------------------------------------------------------ */

float pt__q_f16_to_f32(pt_fp16 h)
{
    return pt__f16_to_f32(h);
}

pt_fp16 pt__q_f32_to_f16(float f)
{
    return pt__f32_to_f16(f);
}

static inline float half_at(const uint8_t *p)
{
    return pt__f16_to_f32(pt__q_half(p));
}

/* ---- types ---------------------------------------------------------------- */

typedef struct qtype_info {
    int type;
    const char *name;
    size_t elems, bytes;
    size_t scale_off[2]; /* byte offsets of the fp16 scales in a block */
    int nscales;
} qtype_info;

static const qtype_info k_types[] = {
    {2, "Q4_0", PT_QK, sizeof(pt_block_q4_0), {offsetof(pt_block_q4_0, d), 0}, 1},
    {3, "Q4_1", PT_QK, sizeof(pt_block_q4_1), {offsetof(pt_block_q4_1, d), offsetof(pt_block_q4_1, m)}, 2},
    {6, "Q5_0", PT_QK, sizeof(pt_block_q5_0), {offsetof(pt_block_q5_0, d), 0}, 1},
    {7, "Q5_1", PT_QK, sizeof(pt_block_q5_1), {offsetof(pt_block_q5_1, d), offsetof(pt_block_q5_1, m)}, 2},
    {8, "Q8_0", PT_QK, sizeof(pt_block_q8_0), {offsetof(pt_block_q8_0, d), 0}, 1},
    {12, "Q4_K", PT_QK_K, sizeof(pt_block_q4_K),
     {offsetof(pt_block_q4_K, d), offsetof(pt_block_q4_K, dmin)}, 2},
    {13, "Q5_K", PT_QK_K, sizeof(pt_block_q5_K),
     {offsetof(pt_block_q5_K, d), offsetof(pt_block_q5_K, dmin)}, 2},
    {14, "Q6_K", PT_QK_K, sizeof(pt_block_q6_K), {offsetof(pt_block_q6_K, d), 0}, 1},
};

static const qtype_info *info_of(int type)
{
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (k_types[i].type == (type & ~PT_QPACK))
            return &k_types[i];
    return NULL;
}

int pt__quant_supported(int type)
{
    return info_of(type) != NULL;
}

size_t pt__quant_block_elems(int type)
{
    const qtype_info *t = info_of(type);
    return t ? t->elems : 0;
}

size_t pt__quant_block_bytes(int type)
{
    const qtype_info *t = info_of(type);
    return t ? t->bytes : 0;
}

size_t pt__quant_row_bytes(int type, size_t n)
{
    const qtype_info *t = info_of(type);
    if (!t || n % t->elems)
        return 0;
    return n / t->elems * t->bytes;
}

bool pt__quant_fields(int type, pt_qfields *f)
{
    const qtype_info *t = info_of(type);
    if (!t)
        return false;
    /* the fp16 fields are the block's first bytes, or (Q6_K) its last:
     * the rest is one run of whole words */
    *f = (pt_qfields){ t->bytes, t->nscales, { t->scale_off[0], t->scale_off[1] },
                       t->scale_off[0] == 0 ? 2 * (size_t)t->nscales : 0,
                       (t->bytes - 2 * (size_t)t->nscales) / 4 };
    return true;
}

const char *pt__quant_type_name(int type)
{
    const qtype_info *t = info_of(type);
    return t ? t->name : NULL;
}

/* ---- the 32-value formats ------------------------------------------------- */

static void deq_q4_0(const uint8_t *b, float *y)
{
    float d = half_at(b + offsetof(pt_block_q4_0, d));
    const uint8_t *qs = b + offsetof(pt_block_q4_0, qs);
    for (int j = 0; j < PT_QK / 2; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + PT_QK / 2] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const uint8_t *b, float *y)
{
    float d = half_at(b + offsetof(pt_block_q4_1, d));
    float m = half_at(b + offsetof(pt_block_q4_1, m));
    const uint8_t *qs = b + offsetof(pt_block_q4_1, qs);
    for (int j = 0; j < PT_QK / 2; j++) {
        y[j] = (float)(qs[j] & 0x0f) * d + m;
        y[j + PT_QK / 2] = (float)(qs[j] >> 4) * d + m;
    }
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 32 five-bit values of a Q5_0 / Q5_1 block. */
static void q5_values(const uint8_t *qs, uint32_t qh, int *q)
{
    for (int j = 0; j < PT_QK / 2; j++) {
        q[j] = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
        q[j + PT_QK / 2] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
    }
}

static void deq_q5_0(const uint8_t *b, float *y)
{
    float d = half_at(b + offsetof(pt_block_q5_0, d));
    int q[PT_QK];
    q5_values(b + offsetof(pt_block_q5_0, qs), le32(b + offsetof(pt_block_q5_0, qh)), q);
    for (int j = 0; j < PT_QK; j++)
        y[j] = (float)(q[j] - 16) * d;
}

static void deq_q5_1(const uint8_t *b, float *y)
{
    float d = half_at(b + offsetof(pt_block_q5_1, d));
    float m = half_at(b + offsetof(pt_block_q5_1, m));
    int q[PT_QK];
    q5_values(b + offsetof(pt_block_q5_1, qs), le32(b + offsetof(pt_block_q5_1, qh)), q);
    for (int j = 0; j < PT_QK; j++)
        y[j] = (float)q[j] * d + m;
}

static void deq_q8_0(const uint8_t *b, float *y)
{
    float d = half_at(b + offsetof(pt_block_q8_0, d));
    const int8_t *qs = (const int8_t *)(b + offsetof(pt_block_q8_0, qs));
    for (int j = 0; j < PT_QK; j++)
        y[j] = (float)qs[j] * d;
}

/* ---- the K-quants ----------------------------------------------------------- */

/* Scale and min of sub-block j (0..7) from the 12 packed bytes: 6 bits each;
 * j < 4 in the low 6 bits of bytes j and j + 4, else split between the
 * nibbles of byte j + 4 and the top 2 bits of bytes j - 4 and j. */
static inline void k4_scale_min(int j, const uint8_t *s, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K and Q5_K: 8 sub-blocks of 32 values, each with a 6-bit scale and
 * min; 4-bit values, and for Q5_K (qh not NULL) a fifth bit from qh.  The
 * two blocks agree up to scales, so d, dmin and scales are read the same. */
_Static_assert(offsetof(pt_block_q4_K, d) == offsetof(pt_block_q5_K, d) &&
                   offsetof(pt_block_q4_K, dmin) == offsetof(pt_block_q5_K, dmin) &&
                   offsetof(pt_block_q4_K, scales) == offsetof(pt_block_q5_K, scales),
               "Q4_K and Q5_K share the layout of their scales");

static void deq_k45(const uint8_t *b, const uint8_t *qh, const uint8_t *q, float *y)
{
    float d = half_at(b + offsetof(pt_block_q4_K, d));
    float dmin = half_at(b + offsetof(pt_block_q4_K, dmin));
    const uint8_t *sc = b + offsetof(pt_block_q4_K, scales);
    for (int g = 0; g < 4; g++, q += 32) { /* 64 values: low nibbles then high */
        int s0, m0, s1, m1;
        k4_scale_min(2 * g, sc, &s0, &m0);
        k4_scale_min(2 * g + 1, sc, &s1, &m1);
        float d0 = d * (float)s0, n0 = dmin * (float)m0;
        float d1 = d * (float)s1, n1 = dmin * (float)m1;
        for (int l = 0; l < 32; l++) {
            int lo = q[l] & 0x0f, hi = q[l] >> 4;
            if (qh) {
                lo += ((qh[l] >> (2 * g)) & 1) << 4;
                hi += ((qh[l] >> (2 * g + 1)) & 1) << 4;
            }
            y[64 * g + l] = d0 * (float)lo - n0;
            y[64 * g + 32 + l] = d1 * (float)hi - n1;
        }
    }
}

static void deq_q4_k(const uint8_t *b, float *y)
{
    deq_k45(b, NULL, b + offsetof(pt_block_q4_K, qs), y);
}

static void deq_q5_k(const uint8_t *b, float *y)
{
    deq_k45(b, b + offsetof(pt_block_q5_K, qh), b + offsetof(pt_block_q5_K, qs), y);
}

static void deq_q6_k(const uint8_t *b, float *y)
{
    float d = half_at(b + offsetof(pt_block_q6_K, d));
    const uint8_t *ql = b + offsetof(pt_block_q6_K, ql);
    const uint8_t *qh = b + offsetof(pt_block_q6_K, qh);
    const int8_t *sc = (const int8_t *)(b + offsetof(pt_block_q6_K, scales));
    for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

typedef void (*deq_fn)(const uint8_t *b, float *y);

static deq_fn deq_of(int type)
{
    switch (type & ~PT_QPACK) {
    case 2: return deq_q4_0;
    case 3: return deq_q4_1;
    case 6: return deq_q5_0;
    case 7: return deq_q5_1;
    case 8: return deq_q8_0;
    case 12: return deq_q4_k;
    case 13: return deq_q5_k;
    case 14: return deq_q6_k;
    default: return NULL;
    }
}

/* n values from blocks (type known supported, n a multiple of its block). */
static void deq_row(const qtype_info *t, deq_fn f, const uint8_t *b, float *dst, size_t n)
{
    for (size_t i = 0; i < n / t->elems; i++)
        f(b + i * t->bytes, dst + i * t->elems);
}

/* The argument checks of FN on a row of n values from src (named
 * src_name) to dst, as PT_CHECK_ARG and PT_CHECK_NULL would make them: n a
 * multiple of t's block, the pointers read only when n > 0. */
static int check_row(const char *fn, const qtype_info *t, size_t n, const void *src,
                     const char *src_name, const void *dst)
{
    if (n % t->elems != 0)
        return pt__err_arg(fn, "n", "must be a multiple of %s's block of %zu (got %zu)", t->name,
                           t->elems, n);
    if (n > 0 && !src)
        return pt__err(PT_EINVAL, "%s: %s is NULL", fn, src_name);
    if (n > 0 && !dst)
        return pt__err(PT_EINVAL, "%s: %s is NULL", fn, "dst");
    return PT_OK;
}

int pt__dequant_row(int type, const void *blocks, float *dst, size_t n)
{
    const qtype_info *t = (type & PT_QPACK) ? NULL : info_of(type);
    if (!t)
        return pt__err(PT_EUNSUPPORTED, "pt__dequant_row: ggml type %d is not a supported "
                      "quantized type", type);
    int st = check_row(__func__, t, n, blocks, "blocks", dst);
    if (st || n == 0)
        return st;
    deq_row(t, deq_of(type), blocks, dst, n);
    return PT_OK;
}

/* ---- quantization (Q8_0, Q4_0) --------------------------------------------- */

static void quant_q8_0(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < PT_QK; j++)
        amax = pt__maxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    pt_fp16 h = pt__q_f32_to_f16(d);
    memcpy(b + offsetof(pt_block_q8_0, d), &h, sizeof h);
    int8_t *qs = (int8_t *)(b + offsetof(pt_block_q8_0, qs));
    for (int j = 0; j < PT_QK; j++)
        qs[j] = (int8_t)roundf(x[j] * id);
}

static void quant_q4_0(const float *x, uint8_t *b)
{
    float amax = 0.0f, max = 0.0f; /* the value of largest magnitude, first one */
    for (int j = 0; j < PT_QK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    float d = max / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    pt_fp16 h = pt__q_f32_to_f16(d);
    memcpy(b + offsetof(pt_block_q4_0, d), &h, sizeof h);
    uint8_t *qs = b + offsetof(pt_block_q4_0, qs);
    for (int j = 0; j < PT_QK / 2; j++) {
        /* truncation toward zero of v + 8.5 (in [0.5, 16.5]), capped at 15 */
        int q0 = (int)(int8_t)(x[j] * id + 8.5f);
        int q1 = (int)(int8_t)(x[j + PT_QK / 2] * id + 8.5f);
        q0 = q0 < 15 ? q0 : 15;
        q1 = q1 < 15 ? q1 : 15;
        qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

int pt__quant_row(int type, const float *src, void *dst, size_t n)
{
    if (type != 8 && type != 2)
        return pt__err(PT_EUNSUPPORTED, "pt__quant_row: quantizing to %s is not supported "
                      "(Q8_0 and Q4_0 are)", pt__quant_type_name(type) ? pt__quant_type_name(type) : "?");
    const qtype_info *t = info_of(type);
    int st = check_row(__func__, t, n, src, "src", dst);
    if (st || n == 0)
        return st;
    for (size_t i = 0; i < n / PT_QK; i++) {
        const float *x = src + i * PT_QK;
        for (int j = 0; j < PT_QK; j++)
            if (!isfinite(x[j]))
                return pt__err(PT_ENONFINITE, "pt__quant_row: value %zu is not finite",
                              i * PT_QK + (size_t)j);
    }
    uint8_t *b = dst;
    for (size_t i = 0; i < n / PT_QK; i++) {
        if (type == 8)
            quant_q8_0(src + i * PT_QK, b + i * t->bytes);
        else
            quant_q4_0(src + i * PT_QK, b + i * t->bytes);
    }
    return PT_OK;
}

/* ---- checks and tiles ------------------------------------------------------ */

int pt__quant_check(int type, const void *data, size_t nbytes, size_t rows, size_t n,
                   const char *name)
{
    const char *nm = name ? name : "?";
    const qtype_info *t = info_of(type);
    if (!t)
        return pt__err(PT_EUNSUPPORTED, "tensor '%s': ggml type %d is not a supported quantized "
                      "type", nm, type);
    if (n % t->elems)
        return pt__err(PT_EFORMAT, "tensor '%s' (%s): its rows of %zu values are not a multiple "
                      "of the block of %zu", nm, t->name, n, t->elems);
    size_t per_row = n / t->elems;
    if (rows && per_row > SIZE_MAX / t->bytes / rows)
        return pt__err(PT_EFORMAT, "tensor '%s' (%s): %zu x %zu values overflow", nm, t->name,
                      rows, n);
    if (per_row * rows * t->bytes != nbytes)
        return pt__err(PT_EFORMAT, "tensor '%s' (%s): %zu bytes of data where %zu x %zu values "
                      "take %zu", nm, t->name, nbytes, rows, n, per_row * rows * t->bytes);
    if (nbytes)
        PT_CHECK_NULL(data);
    const uint8_t *b = data;
    for (size_t i = 0; i < rows * per_row; i++)
        for (int s = 0; s < t->nscales; s++) {
            float v = half_at(b + i * t->bytes + t->scale_off[s]);
            if (!isfinite(v))
                return pt__err(PT_EFORMAT, "tensor '%s' (%s): row %zu, block %zu has a "
                              "non-finite scale", nm, t->name, i / per_row, i % per_row);
        }
    return PT_OK;
}

/* Rows r0..r1 of W ([n x k], packed or not) into FP32 (f32) or BF16
 * (bf16), row i at (i - r0) * ldd. */
static void dequant_tile(int type, const void *w, size_t n, size_t k, size_t r0, size_t r1,
                         float *f32, uint16_t *bf16, size_t ldd)
{
    const qtype_info *t = info_of(type);
    deq_fn f = deq_of(type);
    if (!t || !f || k % t->elems)
        return;
    size_t rb = k / t->elems * t->bytes;
    const uint8_t *b = w;
    /* packed rows: each row unpacked into the file's layout first (one
     * block at a time without memory for a row) */
    const bool packed = (type & PT_QPACK) != 0;
    uint8_t *row = packed ? malloc(rb) : NULL;
    const bool by_block = packed && !row;
    float buf[PT_QK_K];
    uint8_t tmp[PT_QBLOCK_MAX];
    for (size_t i = r0; i < r1; i++) {
        const uint8_t *src = b + i * rb;
        if (row) {
            pt__qpack_rows(type, w, n, k, i, i + 1, row);
            src = row;
        }
        if (f32 && !by_block) {
            deq_row(t, f, src, f32 + (i - r0) * ldd, k);
            continue;
        }
        for (size_t j = 0; j < k / t->elems; j++) {
            const uint8_t *blk = by_block ? pt__qpack_block(type, w, n, k, i, j, tmp) : src + j * t->bytes;
            if (f32) {
                f(blk, f32 + (i - r0) * ldd + j * t->elems);
                continue;
            }
            f(blk, buf);
            uint16_t *d = bf16 + (i - r0) * ldd + j * t->elems;
            for (size_t e = 0; e < t->elems; e++) /* inline: a call per block costs more */
                d[e] = pt__f32_to_bf16(buf[e]);
        }
    }
    free(row);
}

void pt__dequant_tile(int type, const void *w, size_t n, size_t k, size_t r0, size_t r1, float *dst,
                     size_t ldd)
{
    dequant_tile(type, w, n, k, r0, r1, dst, NULL, ldd);
}

void pt__dequant_tile_bf16(int type, const void *w, size_t n, size_t k, size_t r0, size_t r1,
                          uint16_t *dst, size_t ldd)
{
    dequant_tile(type, w, n, k, r0, r1, NULL, dst, ldd);
}
