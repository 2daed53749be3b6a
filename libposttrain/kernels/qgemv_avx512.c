/* The quantized small-m kernels (kernels/qgemv.h) with AVX512_VNNI, on
 * 512-bit vectors: the 32-value block types take two blocks a vpdpbusd (one
 * instruction for AVX2's vpmaddubsw + vpmaddwd + add, and no int16 stage:
 * Q8_0's weights enter as w + 128, the activation sums correcting), the
 * K-quants 64 values a vpmaddubsw + vpdpwssd (the sub-block scales folded
 * into the dot).  Compiled with a function-level target so the library's
 * baseline stays x86-64-v3: call only when pt_cpu_active() >= PT_CPU_AVX512
 * and pt_cpu_has_vnni().  Same arithmetic as every path (the integer sums
 * are exact in any order), so the same bits. */
#include "kernels/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define QG_VNNI 1
#include "kernels/qgemv_tmpl.h"

pt_qgemv_fn *pt_qgemv_vnni(int type)
{
    switch (type) {
    case PT_GGML_Q4_K: return qg_q4_k;
    case PT_GGML_Q5_K: return qg_q5_k;
    case PT_GGML_Q6_K: return qg_q6_k;
    default: return qg_pick32(type);
    }
}

#endif
