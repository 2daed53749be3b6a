/* BF16 conversions and products (kernels/bf16.h).  The BF16 GEMM and the
 * small-m kernels live in gemm_bf16.c and gemv.c; this file holds the
 * conversions and the portable reference paths. */
#include "kernels/bf16.h"

#include "core/core.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"

#include <stdlib.h>

#define CONVERT_PAR_MIN (1u << 18) /* values: below this one thread */

void pt__f32_to_bf16_n(pt_bf16 *dst, const float *src, size_t n)
{
    int nt = n >= CONVERT_PAR_MIN ? pt_get_num_threads() : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++)
        dst[i] = pt__f32_to_bf16(src[i]);
}

void pt__bf16_to_f32_n(float *dst, const pt_bf16 *src, size_t n)
{
    int nt = n >= CONVERT_PAR_MIN ? pt_get_num_threads() : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (size_t i = 0; i < n; i++)
        dst[i] = pt__bf16_to_f32(src[i]);
}
