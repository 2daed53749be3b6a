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
 * 16-bit scales with pt__q_half() (memcpy), never through a pointer cast. */
#ifndef PT_KERNELS_QUANT_H
#define PT_KERNELS_QUANT_H

#include <stdbool.h>
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
static inline pt_fp16 pt__q_half(const void *p)
{
    pt_fp16 h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* ---- conversion (kernels/quant.c) -------------------------------------------
 * Types are ggml's numbers (PT_GGML_* in io/gguf.h): Q4_0 2, Q4_1 3, Q5_0 6,
 * Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14 are the ones supported here.
 * These files are compiled with -ffp-contract=off: every value is computed
 * with the roundings of llama.cpp's reference C code (and of gguf-py). */

/* binary16 <-> binary32, round to nearest even (as ggml's F16C path):
 * core/half.h's pt__f16_to_f32 and pt__f32_to_f16. */
float pt__q_f16_to_f32(pt_fp16 h);
pt_fp16 pt__q_f32_to_f16(float f);

/* True for a type pt__dequant_row handles. */
int pt__quant_supported(int type);
/* Values per block (32 or 256) and bytes per block; 0 for an unsupported type. */
size_t pt__quant_block_elems(int type);
size_t pt__quant_block_bytes(int type);
/* Bytes of a row of n values; 0 if the type is unsupported or n is not a
 * multiple of its block. */
size_t pt__quant_row_bytes(int type, size_t n);
/* The name llama.cpp gives the type ("Q4_K"), or NULL. */
const char *pt__quant_type_name(int type);

/* dst[0 .. n) = the n values the blocks hold (n a multiple of the block;
 * PT_EINVAL / PT_EUNSUPPORTED otherwise, dst untouched). */
int pt__dequant_row(int type, const void *blocks, float *dst, size_t n);

/* Quantize n values into blocks exactly as llama.cpp's
 * quantize_row_{q8_0,q4_0}_ref: Q8_0 and Q4_0 only (PT_EUNSUPPORTED else). */
int pt__quant_row(int type, const float *src, void *dst, size_t n);

/* A tensor of rows x n values of the type held in nbytes bytes: the size
 * must be exact (PT_EFORMAT otherwise) and every fp16 scale finite
 * (PT_EFORMAT naming the row and block).  `name` labels the messages. */
int pt__quant_check(int type, const void *data, size_t nbytes, size_t rows, size_t n,
                   const char *name);

/* Rows [r0, r1) of a quantized [n x k] matrix (the file's layout, rows
 * back to back, or packed: type | PT_QPACK) dequantized into dst (row
 * i - r0 at dst + (i - r0) * ldd).  The caller checked the tensor
 * (pt__quant_check); the type must be supported. */
void pt__dequant_tile(int type, const void *w, size_t n, size_t k, size_t r0, size_t r1, float *dst,
                     size_t ldd);
/* The same rounded to BF16 (round to nearest even, as pt__f32_to_bf16). */
void pt__dequant_tile_bf16(int type, const void *w, size_t n, size_t k, size_t r0, size_t r1,
                          uint16_t *dst, size_t ldd);

/* ---- rows packed 16 to a group (kernels/qpack.c) ------------------------------
 * type | PT_QPACK: an [n x k] matrix whose full groups of 16 rows hold the
 * same bytes rearranged for the 16-row VNNI kernels (each fp16 field and
 * each 32-bit word of a block column as 16 consecutive values, one per
 * row; kernels/qpack.c), the rows of a last group of fewer than 16 as in
 * the file.  Sizes (pt__quant_row_bytes, ...) and names are the type's. */
#define PT_QPACK 0x100
/* Bytes of the largest block. */
#define PT_QBLOCK_MAX 256
/* A block as packing sees it: its nh fp16 fields (d; m or dmin) at hoff,
 * then the rest of its bytes, nwords 32-bit words from woff. */
typedef struct pt_qfields {
    size_t bytes;
    int nh;
    size_t hoff[2];
    size_t woff, nwords;
} pt_qfields;
/* The fields of type's block (PT_QPACK ignored); false for an unsupported
 * type. */
bool pt__quant_fields(int type, pt_qfields *f);
/* Pack W [n x k] of `type` (the file's layout) in place: PT_OK,
 * PT_EINVAL (a type or k that cannot be), PT_ENOMEM (W untouched). */
int pt__qpack(int type, void *w, size_t n, size_t k);
/* Block b of row i of W (type, packed or not) in the file's layout: a
 * pointer into W, or tmp holding a copy. */
const uint8_t *pt__qpack_block(int type, const void *w, size_t n, size_t k, size_t i, size_t b,
                               uint8_t tmp[PT_QBLOCK_MAX]);
/* Rows [r0, r1) of W (packed or not) in the file's layout into dst. */
void pt__qpack_rows(int type, const void *w, size_t n, size_t k, size_t r0, size_t r1, void *dst);

/* ---- products (kernels/quant_gemm.c) ------------------------------------------
 * W is [n x k] of `type` (0: plain FP32 rows of k floats), rows back to back,
 * checked (pt__quant_check).  Through dequantized FP32 tiles of W: one tile
 * (the very FP32 call) when W fits 32 MiB, else tiles of rows. */

/* Rows per tile of a product for rows of k elements of elem_bytes: the
 * whole matrix when it fits 32 MiB, else a multiple of 16 rows (at least
 * 16). */
size_t pt__qtile_rows(size_t n, size_t k, size_t elem_bytes);

/* y[m x n] = alpha x W^T + beta y (beta 0: y not read): pt__sgemm, or with
 * rowwise pt__sgemv_rows (each row's result independent of the others). */
void pt__qgemm_xwt(bool rowwise, int type, size_t m, size_t n, size_t k, float alpha,
                  const float *x, size_t ldx, const void *w, float beta, float *y, size_t ldy);
/* A weight made of segments of rows, each of its own type (0: FP32 rows):
 * q|k|v or gate|up of a file whose tensors differ in type. */
typedef struct pt_qseg {
    int type;
    const void *w;    /* blocks (or floats) of rows x k values */
    size_t rows;
} pt_qseg;
/* pt__qgemm_xwt over the rows of all segments: dequantized into one tile
 * when they fit (then one product, as the FP32 model's), else by segment;
 * with bf16 (and not rowwise) pt__qgemm_xwt_bf16 segment by segment. */
void pt__qgemm_segs_xwt(bool rowwise, bool bf16, const pt_qseg *seg, int nseg, size_t m, size_t k,
                       float alpha, const float *x, size_t ldx, float beta, float *y, size_t ldy);

/* BF16 products (kernels/quant_gemm_bf16.c): pt__qgemm_xwt (not rowwise) and
 * pt__qgemm_dyw with W's tiles dequantized and rounded to BF16 and the
 * products pt__gemm_mixed's (FP32 accumulation); false, nothing done,
 * without memory for a tile.  For a path with BF16 arithmetic. */
bool pt__qgemm_xwt_bf16(int type, size_t m, size_t n, size_t k, float alpha, const float *x,
                       size_t ldx, const void *w, float beta, float *y, size_t ldy);
bool pt__qgemm_dyw_bf16(int type, size_t m, size_t n, size_t k, float alpha, const float *dy,
                       size_t lddy, const void *w, float beta, float *dx, size_t lddx);

/* dx[m x k] = alpha dy W + beta dx, dy [m x n]. */
void pt__qgemm_dyw(int type, size_t m, size_t n, size_t k, float alpha, const float *dy,
                  size_t lddy, const void *w, float beta, float *dx, size_t lddx);
/* The same over segments (dy's columns follow the segments' rows). */
void pt__qgemm_segs_dyw(bool bf16, const pt_qseg *seg, int nseg, size_t m, size_t k, float alpha,
                       const float *dy, size_t lddy, float beta, float *dx, size_t lddx);

#endif
