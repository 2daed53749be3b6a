/* Run-time choice of kernels: what the CPU (and the OS) can run, and which
 * path the library uses.  Detected once (cpuid, with the OS's xgetbv check
 * that the vector registers are saved on context switches); the path in use
 * may be forced lower with PT_CPU=avx2|avx512|avx512bf16 (read once) or
 * pt_set_cpu_path(), so one machine can test every path it can run.  The
 * library itself is built for x86-64-v3 (AVX2 + FMA): that is the floor, and
 * the AVX-512 kernels are compiled with function-level target attributes,
 * never with the build machine's -march. */
#ifndef PT_KERNELS_CPU_H
#define PT_KERNELS_CPU_H

#include <stdbool.h>

typedef enum pt_cpu_level {
    PT_CPU_AVX2 = 0,       /* AVX2 + FMA (the build's floor on x86-64) */
    PT_CPU_AVX512 = 1,     /* AVX-512 F, BW, DQ, VL */
    PT_CPU_AVX512BF16 = 2, /* and AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16) */
    PT_CPU_LEVELS = 3
} pt_cpu_level;

/* The highest level the CPU and the OS support. */
pt_cpu_level pt__cpu_detected(void);
/* The level the kernels use now (PT_CPU or pt_set_cpu_path; by default the
 * detected one).  Kernels read it once per call. */
pt_cpu_level pt__cpu_active(void);
/* Use level l (PT_EUNSUPPORTED above what the CPU has). */
int pt__cpu_force(pt_cpu_level l);
/* "avx2", "avx512", "avx512bf16"; NULL for another value. */
const char *pt__cpu_level_str(pt_cpu_level l);
/* The level named s, or -1. */
int pt__cpu_level_parse(const char *s);
/* True when the CPU has AVX512_VNNI (vpdpbusd) besides the avx512 level;
 * kernels use it when the active path is avx512 or above. */
bool pt__cpu_has_vnni(void);
/* AMX-TILE and AMX-BF16 (tdpbf16ps), enabled by the OS and granted to this
 * process (arch_prctl), on a CPU of level avx512bf16: what the CPU has,
 * whatever path is active (kernels/tile_gemm.h decides whether to use it). */
bool pt__cpu_has_amx(void);
/* The CPU's brand string ("AMD EPYC 9R14 96-Core Processor"). */
const char *pt__cpu_model(void);
/* True when products may use BF16 arithmetic (the active path has it). */
static inline bool pt__cpu_bf16_compute(void)
{
    return pt__cpu_active() >= PT_CPU_AVX512BF16;
}

#endif
