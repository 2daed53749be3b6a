/* The quantized small-m kernels (kernels/qgemv.h) on AVX2, the build's
 * floor: the 32-value block types from kernels/qgemv_tmpl.h, and the
 * K-quants (Q4_K, Q5_K, Q6_K), which the avx512 path runs too.
 *
 * K-quants: a W row is walked 8 super-blocks (of 256) at a time, each
 * unpacked once into unsigned bytes (4, 5 or 6 bits) with its sub-block
 * scales as int16 vectors, then run against every row of x: per 32 values
 * vpmaddubsw (unsigned weight x signed q: pairs at most 2 * 63 * 127, no
 * saturation) and vpmaddwd by the sub-block's scale, added in int32 (exact:
 * |I| < 2^28).  Q4_K/Q5_K's mins enter through Q8_K's sums of 16 (J =
 * sum m_(t/2) bsum_t, one vpmaddwd), Q6_K's offset 32 the same way
 * (I = sum sc w q - 32 sum sc_t bsum_t). */
#include "kernels/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define QG_TARGET
#define QG_VNNI 0
#include "kernels/qgemv_tmpl.h"

pt_qgemv_fn *pt__qgemv_avx2(int type)
{
    return qg_pick(type);
}

#endif
