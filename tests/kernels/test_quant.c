/* kernels/quant.c against llama.cpp: dequantization of every supported type
 * bit for bit equal to gguf-py's gguf.quants.dequantize of blocks that
 * llama-quantize wrote (kernels/data/quant, tests/gen/gen_quant.py);
 * pt__quant_row's Q8_0 and Q4_0 blocks byte for byte those llama-quantize
 * wrote from the same FP32 tensor; binary16 rounding as ggml's; the tile
 * helpers equal to the row function; malformed tensors refused. */
#include "testutil.h"

#include "core/core.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/sha256.h"
#include "kernels/bf16.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

#define DATA PT_TEST_SRCDIR "/kernels/data/quant/"

static const struct { int type; const char *file; } k_files[] = {
    {PT_GGML_Q4_0, "q4_0"}, {PT_GGML_Q4_1, "q4_1"}, {PT_GGML_Q5_0, "q5_0"},
    {PT_GGML_Q5_1, "q5_1"}, {PT_GGML_Q8_0, "q8_0"}, {PT_GGML_Q4_K, "q4_k"},
    {PT_GGML_Q5_K, "q5_k"}, {PT_GGML_Q6_K, "q6_k"},
};
#define NFILES (sizeof k_files / sizeof k_files[0])
#define TNAME "blk.0.attn_k.weight"

static const pt_gguf_tensor *open_tensor(pt_gguf **g, const char *suffix)
{
    char path[512];
    snprintf(path, sizeof path, DATA "attn_k.%s.gguf", suffix);
    ck_assert_ok(pt__gguf_open(g, path));
    const pt_gguf_tensor *t = pt__gguf_find_tensor(*g, TNAME);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->ndim, 2);
    return t;
}

/* The reference file: "rows cols sha256\n" then 512 float32 values. */
static void read_ref(const char *suffix, size_t *rows, size_t *cols, char hex[65], float *first)
{
    char path[512];
    snprintf(path, sizeof path, DATA "attn_k.%s.ref", suffix);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fscanf(f, "%zu %zu %64s", rows, cols, hex), 3);
    ck_assert_int_eq(fgetc(f), '\n');
    ck_assert_uint_eq(fread(first, sizeof(float), 512, f), 512);
    fclose(f);
}

START_TEST(dequant_bitexact)
{
    int i = _i;
    pt_gguf *g;
    const pt_gguf_tensor *t = open_tensor(&g, k_files[i].file);
    ck_assert_int_eq(t->type, k_files[i].type);
    size_t rows, cols;
    char hex[65], got_hex[65];
    float first[512];
    read_ref(k_files[i].file, &rows, &cols, hex, first);
    ck_assert_uint_eq(cols, t->ne[0]);
    ck_assert_uint_eq(rows, t->ne[1]);
    ck_assert_ok(pt__quant_check(t->type, t->data, t->nbytes, rows, cols, TNAME));

    float *y = malloc(rows * cols * sizeof(float));
    ck_assert_ptr_nonnull(y);
    size_t rb = pt__quant_row_bytes(t->type, cols);
    ck_assert_uint_eq(rb * rows, t->nbytes);
    for (size_t r = 0; r < rows; r++)
        ck_assert_ok(pt__dequant_row(t->type, (const uint8_t *)t->data + r * rb, y + r * cols, cols));
    for (size_t j = 0; j < 512; j++)
        ck_assert_msg(memcmp(&y[j], &first[j], sizeof(float)) == 0,
                      "%s value %zu: %.9g, gguf-py %.9g", k_files[i].file, j, y[j], first[j]);
    uint8_t dg[32];
    pt__sha256(y, rows * cols * sizeof(float), dg);
    pt__sha256_hex(dg, got_hex);
    ck_assert_msg(strcmp(got_hex, hex) == 0, "%s: the dequantized tensor differs from gguf-py's",
                  k_files[i].file);

    /* the tiles: rows [5, 37) into a padded buffer, FP32 and BF16 */
    size_t ld = cols + 3, r0 = 5, r1 = 37;
    float *tile = malloc((r1 - r0) * ld * sizeof(float));
    pt_bf16 *tb = malloc((r1 - r0) * ld * sizeof(pt_bf16));
    ck_assert(tile && tb);
    pt__dequant_tile(t->type, t->data, rows, cols, r0, r1, tile, ld);
    pt__dequant_tile_bf16(t->type, t->data, rows, cols, r0, r1, tb, ld);
    for (size_t r = r0; r < r1; r++)
        for (size_t c = 0; c < cols; c++) {
            float want = y[r * cols + c];
            ck_assert(memcmp(&tile[(r - r0) * ld + c], &want, sizeof want) == 0);
            ck_assert_uint_eq(tb[(r - r0) * ld + c], pt__f32_to_bf16(want));
        }

    /* packed 16 rows to a group (kernels/qpack.c): the first n rows as a
     * matrix whose last group is partial; the same values from the tiles,
     * every block and the rows unpacked again byte for byte */
    const size_t n = rows - 3, pt = t->type | PT_QPACK;
    ck_assert_uint_ge(n, 35);
    uint8_t *pk = malloc(n * rb), *un = malloc(n * rb), tmp[PT_QBLOCK_MAX];
    ck_assert(pk && un);
    memcpy(pk, t->data, n * rb);
    ck_assert_ok(pt__qpack(t->type, pk, n, cols));
    ck_assert(memcmp(pk, t->data, 16 * rb) != 0); /* it did move the bytes */
    ck_assert(memcmp(pk + n / 16 * 16 * rb, (const uint8_t *)t->data + n / 16 * 16 * rb, n % 16 * rb) == 0);
    pt__dequant_tile(pt, pk, n, cols, r0, r1, tile, ld);
    pt__dequant_tile_bf16(pt, pk, n, cols, r0, r1, tb, ld);
    for (size_t r = r0; r < r1; r++)
        for (size_t c = 0; c < cols; c++) {
            float want = y[r * cols + c];
            ck_assert(memcmp(&tile[(r - r0) * ld + c], &want, sizeof want) == 0);
            ck_assert_uint_eq(tb[(r - r0) * ld + c], pt__f32_to_bf16(want));
        }
    const size_t bb = pt__quant_block_bytes(t->type);
    for (size_t r = 0; r < n; r++)
        for (size_t b = 0; b < rb / bb; b++)
            ck_assert(memcmp(pt__qpack_block(pt, pk, n, cols, r, b, tmp),
                             (const uint8_t *)t->data + r * rb + b * bb, bb) == 0);
    pt__qpack_rows(pt, pk, n, cols, 0, n, un);
    ck_assert(memcmp(un, t->data, n * rb) == 0);
    pt__qpack_rows(pt, pk, n, cols, 7, n - 2, un);
    ck_assert(memcmp(un, (const uint8_t *)t->data + 7 * rb, (n - 9) * rb) == 0);
    ck_assert_status(pt__dequant_row(pt, pk, y, cols), PT_EUNSUPPORTED, NULL);
    ck_assert_status(pt__qpack(pt, pk, n, cols), PT_EINVAL, "packed");
    free(pk);
    free(un);
    free(tile);
    free(tb);
    free(y);
    pt__gguf_close(g);
}
END_TEST

/* pt__quant_row from the FP32 tensor: the bytes llama-quantize wrote. */
START_TEST(quant_row_matches_llama_quantize)
{
    pt_gguf *gf;
    const pt_gguf_tensor *tf = open_tensor(&gf, "f32");
    ck_assert_int_eq(tf->type, PT_GGML_F32);
    size_t cols = tf->ne[0], rows = tf->ne[1];
    float *x = malloc(rows * cols * sizeof(float));
    ck_assert_ok(pt__gguf_read_f32(tf, x, rows * cols));
    const struct { int type; const char *file; } q[] = {{PT_GGML_Q8_0, "q8_0"}, {PT_GGML_Q4_0, "q4_0"}};
    for (int i = 0; i < 2; i++) {
        pt_gguf *g;
        const pt_gguf_tensor *t = open_tensor(&g, q[i].file);
        uint8_t *b = malloc(t->nbytes);
        size_t rb = pt__quant_row_bytes(q[i].type, cols);
        for (size_t r = 0; r < rows; r++)
            ck_assert_ok(pt__quant_row(q[i].type, x + r * cols, b + r * rb, cols));
        for (size_t j = 0; j < t->nbytes; j++)
            ck_assert_msg(b[j] == ((const uint8_t *)t->data)[j],
                          "%s byte %zu (row %zu): %u, llama-quantize %u", q[i].file, j, j / rb,
                          b[j], ((const uint8_t *)t->data)[j]);
        free(b);
        pt__gguf_close(g);
    }
    free(x);
    pt__gguf_close(gf);
}
END_TEST

/* binary16: every half round-trips; halfway cases go to even; io's
 * pt__f32_to_f16 (used for F16 GGUF) rounds as the kernels' one; with F16C
 * both equal the instruction ggml uses (vcvtps2ph, round to nearest even). */
START_TEST(f16_rounding)
{
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = pt__q_f16_to_f32((pt_fp16)h);
        ck_assert(pt__q_f16_to_f32((pt_fp16)h) == pt__f16_to_f32((uint16_t)h) || isnan(f));
        if (isnan(f))
            continue;
        ck_assert_uint_eq(pt__q_f32_to_f16(f), h);
    }
    ck_assert_uint_eq(pt__q_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie, 1.0 is even */
    ck_assert_uint_eq(pt__q_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie, up to even */
    ck_assert_uint_eq(pt__q_f32_to_f16(0x1p-25f), 0);                   /* tie below the smallest */
    ck_assert_uint_eq(pt__q_f32_to_f16(3 * 0x1p-25f), 2);
    ck_assert_uint_eq(pt__q_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_uint_eq(pt__q_f32_to_f16(65519.996f), 0x7bff);
    pt_rng r;
    pt__rng_seed(&r, 23);
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)pt__rng_next(&r);
        float f;
        memcpy(&f, &u, sizeof f);
        if (isnan(f))
            continue;
        uint16_t a = pt__q_f32_to_f16(f);
        ck_assert_msg(a == pt__f32_to_f16(f), "0x%08x: %04x vs io %04x", u, a, pt__f32_to_f16(f));
#ifdef __F16C__
        ck_assert_msg(a == (uint16_t)_cvtss_sh(f, 0), "0x%08x: %04x vs F16C", u, a);
#endif
    }
#ifndef __F16C__
    fprintf(stderr, "SKIP f16_rounding: no F16C in this build, compared with io's conversion only\n");
#endif
}
END_TEST

START_TEST(malformed_refused)
{
    pt_gguf *g;
    const pt_gguf_tensor *t = open_tensor(&g, "q4_k");
    size_t cols = t->ne[0], rows = t->ne[1];
    uint8_t *b = malloc(t->nbytes);
    memcpy(b, t->data, t->nbytes);
    ck_assert_status(pt__quant_check(PT_GGML_Q4_K, b, t->nbytes - 1, rows, cols, "w"),
                     PT_EFORMAT, "'w'");
    ck_assert_status(pt__quant_check(PT_GGML_Q4_K, b, t->nbytes, rows + 1, cols, "w"),
                     PT_EFORMAT, "bytes");
    ck_assert_status(pt__quant_check(PT_GGML_Q4_K, b, t->nbytes, rows * 2, cols / 2, "w"),
                     PT_EFORMAT, "multiple");
    ck_assert_status(pt__quant_check(PT_GGML_Q2_K, b, t->nbytes, rows, cols, "w"),
                     PT_EUNSUPPORTED, "'w'");
    ck_assert_status(pt__quant_check(99, b, t->nbytes, rows, cols, "w"), PT_EUNSUPPORTED, "99");
    /* a NaN dmin in row 3, block 0 (cols = 256: one block per row) */
    size_t bb = pt__quant_block_bytes(PT_GGML_Q4_K);
    pt_fp16 nan16 = 0x7e00;
    memcpy(b + 3 * bb + offsetof(pt_block_q4_K, dmin), &nan16, 2);
    ck_assert_status(pt__quant_check(PT_GGML_Q4_K, b, t->nbytes, rows, cols, "w"), PT_EFORMAT,
                     "row 3, block 0");
    pt_fp16 inf16 = 0xfc00;
    memcpy(b + 3 * bb, (const uint8_t *)t->data + 3 * bb, bb);
    memcpy(b + 7 * bb + offsetof(pt_block_q4_K, d), &inf16, 2);
    ck_assert_status(pt__quant_check(PT_GGML_Q4_K, b, t->nbytes, rows, cols, "w"), PT_EFORMAT,
                     "row 7, block 0");
    /* the row functions */
    float y[256], x[64] = {0};
    ck_assert_status(pt__dequant_row(PT_GGML_Q4_K, b, y, 128), PT_EINVAL, "multiple");
    ck_assert_status(pt__dequant_row(PT_GGML_IQ4_NL, b, y, 32), PT_EUNSUPPORTED, NULL);
    ck_assert_status(pt__quant_row(PT_GGML_Q4_K, x, b, 64), PT_EUNSUPPORTED, "Q4_K");
    ck_assert_status(pt__quant_row(PT_GGML_Q8_0, x, b, 48), PT_EINVAL, "multiple");
    x[40] = NAN;
    ck_assert_status(pt__quant_row(PT_GGML_Q8_0, x, b, 64), PT_ENONFINITE, "40");
    ck_assert_uint_eq(pt__quant_row_bytes(PT_GGML_Q8_0, 48), 0);
    ck_assert_uint_eq(pt__quant_row_bytes(PT_GGML_Q6_K, 512), 2 * 210);
    free(b);
    pt__gguf_close(g);
}
END_TEST

/* Hand-computed blocks: Q8_0 of [-127 .. ] with d = 1; Q4_0 of a row whose
 * largest magnitude is negative; all-zero input gives zero blocks. */
START_TEST(hand_blocks)
{
    float x[32], y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    x[0] = -127.0f;
    pt_block_q8_0 q8;
    ck_assert_ok(pt__quant_row(PT_GGML_Q8_0, x, &q8, 32));
    ck_assert_uint_eq(q8.d, 0x3c00); /* 127 / 127 = 1.0 */
    ck_assert_int_eq(q8.qs[0], -127);
    ck_assert_int_eq(q8.qs[20], 4);
    ck_assert_ok(pt__dequant_row(PT_GGML_Q8_0, &q8, y, 32));
    for (int j = 0; j < 32; j++)
        ck_assert(y[j] == x[j]);
    pt_block_q4_0 q4;
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j % 8) - 4.0f; /* -4 .. 3; the first -4 sets d = -4 / -8 = 0.5 */
    ck_assert_ok(pt__quant_row(PT_GGML_Q4_0, x, &q4, 32));
    ck_assert_uint_eq(q4.d, 0x3800); /* 0.5 */
    ck_assert_ok(pt__dequant_row(PT_GGML_Q4_0, &q4, y, 32));
    for (int j = 0; j < 32; j++)
        ck_assert_msg(y[j] == x[j], "%d: %g vs %g", j, y[j], x[j]);
    memset(x, 0, sizeof x);
    ck_assert_ok(pt__quant_row(PT_GGML_Q4_0, x, &q4, 32));
    ck_assert_uint_eq(q4.d, 0x8000); /* d = 0 / -8 = -0, as llama.cpp writes it */
    ck_assert_uint_eq(q4.qs[3], 0x88);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, dequant_bitexact, 0, (int)NFILES);
    tcase_add_test(tc, quant_row_matches_llama_quantize);
    tcase_add_test(tc, f16_rounding);
    tcase_add_test(tc, malformed_refused);
    tcase_add_test(tc, hand_blocks);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
