/* The quantized small-m kernels (kernels/qgemv.h) with AVX512_VNNI: the
 * 32-value block types of kernels/qgemv_tmpl.h with vpdpbusd on 256-bit
 * vectors (one instruction for AVX2's vpmaddubsw + vpmaddwd + add, and no
 * int16 stage: Q8_0's weights enter as w + 128 with the activation sums
 * correcting).  Compiled with a function-level target so the library's
 * baseline stays x86-64-v3: call only when pt_cpu_active() >= PT_CPU_AVX512
 * and pt_cpu_has_vnni().  The K-quants run the AVX2 kernels on this path.
 * Same arithmetic as every path, so the same bits. */
#include "kernels/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define QG_VNNI 1
#include "kernels/qgemv_tmpl.h"

pt_qgemv_fn *pt_qgemv_vnni(int type)
{
    return qg_pick32(type);
}

#endif
