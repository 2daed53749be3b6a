/* Quantized weights packed 16 rows to a group (kernels/quant.h, PT_QPACK):
 * the same bytes as the file's blocks, rearranged so that the 16-row VNNI
 * kernels (kernels/qgemv_avx512.c) load what they need for 16 rows with
 * one vector load instead of transposing and gathering them at every
 * product.
 *
 * Layout.  Rows go in groups of 16 (row 16 g .. 16 g + 15); the rows of a
 * last group of fewer than 16 stay as they are, back to back.  A full
 * group takes the 16 rows' bytes (16 rb) and holds, for each block column
 * b, the 16 rows' blocks b in 16 * bytes bytes:
 *   the block's fp16 fields (d; Q4_1/Q5_1's m, Q4_K/Q5_K's dmin), each as
 *   16 halves (row r's at 2 r), then
 *   the block's other bytes as nd 32-bit words, word j as 16 words (row
 *   r's at 4 r), so that word j of the 16 rows is one 64-byte vector whose
 *   lane r is row r's.
 * Every type's block is its fp16 fields plus a whole number of words
 * (pt__quant_fields, from kernels/quant.c's table of types), so a group
 * takes exactly its 16 rows' bytes. */
#include "kernels/quant.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* dir 0: the 16 rows at src (rb bytes a row) packed into the group at
 * dst; dir 1: the group at src unpacked into the 16 rows at dst. */
static void group_move(const pt_qfields *L, size_t rb, const uint8_t *src, uint8_t *dst, int dir)
{
    const size_t nb = rb / L->bytes;
    for (size_t b = 0; b < nb; b++) {
        const size_t g = b * 16 * L->bytes, gd = g + (size_t)L->nh * 32;
        for (size_t r = 0; r < 16; r++) {
            const size_t blk = r * rb + b * L->bytes;
            for (int h = 0; h < L->nh; h++) {
                const size_t go = g + (size_t)h * 32 + r * 2, ro = blk + L->hoff[h];
                memcpy(dst + (dir ? ro : go), src + (dir ? go : ro), 2);
            }
            for (size_t j = 0; j < L->nwords; j++) {
                const size_t go = gd + (j * 16 + r) * 4, ro = blk + L->woff + 4 * j;
                memcpy(dst + (dir ? ro : go), src + (dir ? go : ro), 4);
            }
        }
    }
}

int pt__qpack(int type, void *w, size_t n, size_t k)
{
    pt_qfields L;
    if (!pt__quant_fields(type, &L) || (type & PT_QPACK))
        return pt__err(PT_EINVAL, "pt__qpack: ggml type %d cannot be packed (or is packed already)", type);
    const size_t rb = pt__quant_row_bytes(type, k);
    if (rb == 0)
        return pt__err(PT_EINVAL, "pt__qpack: rows of %zu values are not whole blocks", k);
    if (n < 16)
        return PT_OK;
    uint8_t *tmp = malloc(16 * rb);
    if (!tmp)
        return pt__err(PT_ENOMEM, "pt__qpack: %zu bytes", 16 * rb);
    for (size_t g = 0; g + 16 <= n; g += 16) {
        uint8_t *grp = (uint8_t *)w + g * rb;
        memcpy(tmp, grp, 16 * rb);
        group_move(&L, rb, tmp, grp, 0);
    }
    free(tmp);
    return PT_OK;
}

/* Block b of row r of the full group at grp (rows of rb bytes) into blk. */
static void block_get(const pt_qfields *L, const uint8_t *grp, size_t r, size_t b, uint8_t *blk)
{
    const uint8_t *g = grp + b * 16 * L->bytes, *gd = g + (size_t)L->nh * 32 + r * 4;
    for (int h = 0; h < L->nh; h++)
        memcpy(blk + L->hoff[h], g + (size_t)h * 32 + r * 2, 2);
    for (size_t j = 0; j < L->nwords; j++)
        memcpy(blk + L->woff + 4 * j, gd + j * 64, 4);
}

const uint8_t *pt__qpack_block(int type, const void *w, size_t n, size_t k, size_t i, size_t b,
                               uint8_t tmp[PT_QBLOCK_MAX])
{
    pt_qfields L;
    pt__quant_fields(type, &L);
    const size_t rb = pt__quant_row_bytes(type, k);
    if (!(type & PT_QPACK) || i >= n / 16 * 16)
        return (const uint8_t *)w + i * rb + b * L.bytes;
    block_get(&L, (const uint8_t *)w + (i - i % 16) * rb, i % 16, b, tmp);
    return tmp;
}

void pt__qpack_rows(int type, const void *w, size_t n, size_t k, size_t r0, size_t r1, void *dst)
{
    pt_qfields L;
    pt__quant_fields(type, &L);
    const size_t rb = pt__quant_row_bytes(type, k), full = n / 16 * 16;
    uint8_t *d = dst;
    for (size_t i = r0; i < r1;) {
        const uint8_t *grp = (const uint8_t *)w + (i - i % 16) * rb;
        if (!(type & PT_QPACK) || i >= full) { /* as the file has them */
            memcpy(d + (i - r0) * rb, (const uint8_t *)w + i * rb, (r1 - i) * rb);
            return;
        }
        if (i % 16 == 0 && i + 16 <= r1) { /* a whole group */
            group_move(&L, rb, grp, d + (i - r0) * rb, 1);
            i += 16;
            continue;
        }
        for (size_t b = 0; b < rb / L.bytes; b++)
            block_get(&L, grp, i % 16, b, d + (i - r0) * rb + b * L.bytes);
        i++;
    }
}
