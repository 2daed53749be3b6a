/* Quantized weight blocks: ggml's block formats, byte for byte as a GGUF
 * file stores them (facts from ggml-common.h's block structs and
 * ggml-quants.c's reference code; the code here is ours).
 *
 * Every block holds a fixed number of consecutive values of one row:
 * 32 (Q4_0 .. Q8_1) or PT_QK_K = 256 (the K-quants).  Scales are IEEE
 * binary16 (fp16) except Q8_K's (binary32).  A row of n values is n / block
 * elements blocks, back to back; a tensor's rows are back to back.
 *
 * The structs carry no padding (every member is a byte array or a 16-bit
 * value at an even offset), so sizeof matches the file; the static asserts
 * below hold it.  Data read from a file may be at any alignment: read the
 * 16-bit scales with pt_q_half() (memcpy), never through a pointer cast. */
#ifndef PT_KERNELS_QUANT_H
#define PT_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PT_QK 32     /* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 */
#define PT_QK_K 256  /* Q4_K, Q5_K, Q6_K, Q8_K */
#define PT_K_SCALE_SIZE 12

typedef uint16_t pt_fp16;

/* x = d * (q - 8), q a nibble: qs[j] holds value j (low nibble) and value
 * j + 16 (high nibble). */
typedef struct pt_block_q4_0 {
    pt_fp16 d;
    uint8_t qs[PT_QK / 2];
} pt_block_q4_0;

/* x = d * q + m, q a nibble (same order as Q4_0). */
typedef struct pt_block_q4_1 {
    pt_fp16 d, m;
    uint8_t qs[PT_QK / 2];
} pt_block_q4_1;

/* x = d * (q - 16), q = nibble | (bit j of qh) << 4 (qh a little-endian
 * uint32: bit j for value j, bit j + 16 for value j + 16). */
typedef struct pt_block_q5_0 {
    pt_fp16 d;
    uint8_t qh[4];
    uint8_t qs[PT_QK / 2];
} pt_block_q5_0;

/* x = d * q + m, q 5 bits as Q5_0. */
typedef struct pt_block_q5_1 {
    pt_fp16 d, m;
    uint8_t qh[4];
    uint8_t qs[PT_QK / 2];
} pt_block_q5_1;

/* x = d * q, q int8. */
typedef struct pt_block_q8_0 {
    pt_fp16 d;
    int8_t qs[PT_QK];
} pt_block_q8_0;

/* Q8_0 plus s = d * sum(qs) (ggml's activation format for Q4_1/Q5_1). */
typedef struct pt_block_q8_1 {
    pt_fp16 d, s;
    int8_t qs[PT_QK];
} pt_block_q8_1;

/* 8 sub-blocks of 32, 6-bit scale and min each (packed in scales[12] as
 * ggml's get_scale_min_k4), x = d * sc * q - dmin * m, q a nibble. */
typedef struct pt_block_q4_K {
    pt_fp16 d, dmin;
    uint8_t scales[PT_K_SCALE_SIZE];
    uint8_t qs[PT_QK_K / 2];
} pt_block_q4_K;

/* Q4_K's layout plus a fifth bit per value in qh. */
typedef struct pt_block_q5_K {
    pt_fp16 d, dmin;
    uint8_t scales[PT_K_SCALE_SIZE];
    uint8_t qh[PT_QK_K / 8];
    uint8_t qs[PT_QK_K / 2];
} pt_block_q5_K;

/* 16 sub-blocks of 16, int8 scale each, x = d * sc * (q - 32), q 6 bits
 * (low 4 in ql, high 2 in qh). */
typedef struct pt_block_q6_K {
    uint8_t ql[PT_QK_K / 2];
    uint8_t qh[PT_QK_K / 4];
    int8_t scales[PT_QK_K / 16];
    pt_fp16 d;
} pt_block_q6_K;

/* ggml's activation format for the K-quants: binary32 d, int8 values and
 * the sums of each 16 of them. */
typedef struct pt_block_q8_K {
    float d;
    int8_t qs[PT_QK_K];
    int16_t bsums[PT_QK_K / 16];
} pt_block_q8_K;

_Static_assert(sizeof(pt_block_q4_0) == 18, "Q4_0 block");
_Static_assert(sizeof(pt_block_q4_1) == 20, "Q4_1 block");
_Static_assert(sizeof(pt_block_q5_0) == 22, "Q5_0 block");
_Static_assert(sizeof(pt_block_q5_1) == 24, "Q5_1 block");
_Static_assert(sizeof(pt_block_q8_0) == 34, "Q8_0 block");
_Static_assert(sizeof(pt_block_q8_1) == 36, "Q8_1 block");
_Static_assert(sizeof(pt_block_q4_K) == 144, "Q4_K block");
_Static_assert(sizeof(pt_block_q5_K) == 176, "Q5_K block");
_Static_assert(sizeof(pt_block_q6_K) == 210, "Q6_K block");
_Static_assert(sizeof(pt_block_q8_K) == 292, "Q8_K block");

/* The 16-bit value at p (any alignment). */
static inline pt_fp16 pt_q_half(const void *p)
{
    pt_fp16 h;
    memcpy(&h, p, sizeof h);
    return h;
}

#endif
