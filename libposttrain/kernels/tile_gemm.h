/* BF16 tile products for small matrices (attention's tiles): C[m x n] =
 * alpha * op(A) op(B) + beta * C with FP32 A, B and C in row-major storage
 * (A m x k, or k x m when ta; B k x n, or n x k when tb), both operands
 * rounded to BF16 (RNE, as pt__f32_to_bf16, with FP32 denormals read as
 * signed zeros, as vcvtne2ps2bf16 does) and multiplied with FP32
 * accumulation in 16 x 16 tiles of C, 32 values of k at a time, pair by pair
 * (the semantics of AMX's tdpbf16ps).
 *
 * The operands are packed into the caller's scratch (pt__tile_gemm_pack_
 * elems() BF16 values): A as rows of k padded to a multiple of 32, B in
 * pairs of k ("VNNI" layout), both padded with zeros to multiples of 32
 * rows and columns, so any m, n, k is exact.  Every element of C is the
 * same sum in the same order whatever the thread that computes it.
 *
 * Two implementations of the same blocking and packing: AMX (tileloadd,
 * tdpbf16ps; Sapphire Rapids and later, with the kernel's permission for
 * the tile data) and a C emulation of the instruction's documented
 * semantics, which any CPU runs, so the packing and blocking are tested on
 * every machine.  The two may differ in the last bits (the instruction's
 * internal additions); the tests compare each with a double-precision
 * reference. */
#ifndef PT_KERNELS_TILE_GEMM_H
#define PT_KERNELS_TILE_GEMM_H

#include "kernels/bf16.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum pt_tile_mode {
    PT_TILE_OFF = 0,  /* no tile products: callers use FP32 (BLIS) */
    PT_TILE_EMULATED, /* the C emulation (tests) */
    PT_TILE_AMX,      /* AMX tiles */
} pt_tile_mode;

/* The mode BF16 tile products use now: AMX where the CPU has AMX-BF16, the
 * OS granted the tile data, the active path is avx512bf16 and PT_AMX is not
 * "0"; otherwise off.  pt__tile_force() overrides it (tests): AMX only
 * where the CPU runs it (false otherwise); PT_TILE_OFF/EMULATED anywhere;
 * -1 returns to the automatic choice. */
pt_tile_mode pt__tile_mode(void);
bool pt__tile_force(int mode);

/* BF16 values of scratch the product needs for these sizes. */
size_t pt__tile_gemm_pack_elems(size_t m, size_t n, size_t k);

/* The product, in mode (PT_TILE_EMULATED or PT_TILE_AMX; anything else
 * does nothing and returns false), one thread; beta 0 overwrites C
 * (never read). */
bool pt__tile_gemm(pt_tile_mode mode, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha,
                   const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                   size_t ldc, pt_bf16 *pack);

/* The packing alone (tests): A's Mp x Kp BF16 values, then B's Kp/2 x Np
 * pairs, at pack (Mp, Np, Kp: m, n, k up to multiples of 32, k at least
 * 32), with AVX-512 and AVX512_BF16 (only where the CPU has them) or plain
 * C: the same bits. */
void pt__tile_pack(bool avx512, bool ta, bool tb, size_t m, size_t n, size_t k, const float *a,
                   size_t lda, const float *b, size_t ldb, pt_bf16 *pack);

#endif
