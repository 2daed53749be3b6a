#include "kernels/cpu.h"

#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define PT_X86 1
#endif
#if defined(PT_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define PT_ARCH_REQ_XCOMP_PERM 0x1023
#define PT_XFEATURE_XTILEDATA 18
#endif

static const char *const k_level_names[PT_CPU_LEVELS] = { "avx2", "avx512", "avx512bf16" };

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static pt_cpu_level detected = PT_CPU_AVX2;
static bool vnni; /* AVX512_VNNI, on a CPU of level avx512 or above */
static bool amx;  /* AMX-TILE and AMX-BF16, enabled by the OS, tile data granted */
static atomic_int active = -1; /* -1: not decided yet */
static char model[64] = "unknown CPU";
static char env_note[96];

#ifdef PT_X86
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void read_brand(void)
{
    unsigned int r[12];
    if ((unsigned int)__get_cpuid_max(0x80000000u, NULL) < 0x80000004u)
        return;
    for (unsigned int i = 0; i < 3; i++)
        __cpuid(0x80000002u + i, r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
    char b[49];
    memcpy(b, r, 48);
    b[48] = '\0';
    const char *s = b;
    while (*s == ' ')
        s++;
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == ' ')
        n--;
    if (n > 0)
        snprintf(model, sizeof model, "%.*s", (int)n, s);
}

static pt_cpu_level probe(void)
{
    unsigned int a, b, c, d;
    read_brand();
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return PT_CPU_AVX2;
    const bool osxsave = c & (1u << 27);
    if (!osxsave)
        return PT_CPU_AVX2;
    const uint64_t xcr0 = read_xcr0();
    /* XMM|YMM state (bits 1, 2) for AVX; opmask|ZMM_Hi256|Hi16_ZMM (5, 6, 7) for AVX-512 */
    const bool os_zmm = (xcr0 & 0xe6) == 0xe6;
    if (__get_cpuid_max(0, NULL) < 7)
        return PT_CPU_AVX2;
    __cpuid_count(7, 0, a, b, c, d);
    const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    if (!(os_zmm && f && dq && bw && vl))
        return PT_CPU_AVX2;
    vnni = c & (1u << 11);
    const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
    __cpuid_count(7, 1, a, b, c, d);
    const bool bf16 = a & (1u << 5);
    /* AMX: XTILECFG and XTILEDATA state (XCR0 bits 17, 18) enabled, and
     * Linux's permission for this process to use the tile data. */
    amx = bf16 && amx_bf16 && amx_tile && (xcr0 & (3u << 17)) == (3u << 17);
#ifdef PT_ARCH_REQ_XCOMP_PERM
    if (amx)
        amx = syscall(SYS_arch_prctl, PT_ARCH_REQ_XCOMP_PERM, PT_XFEATURE_XTILEDATA) == 0;
#else
    amx = false;
#endif
    return bf16 ? PT_CPU_AVX512BF16 : PT_CPU_AVX512;
}
#else
static pt_cpu_level probe(void)
{
    return PT_CPU_AVX2;
}
#endif

static void detect(void)
{
    detected = probe();
    pt_cpu_level use = detected;
    const char *env = getenv("PT_CPU");
    if (env && *env) {
        int l = pt__cpu_level_parse(env);
        if (l < 0)
            snprintf(env_note, sizeof env_note, "PT_CPU=%.40s ignored: not a path", env);
        else if (l > (int)detected)
            snprintf(env_note, sizeof env_note, "PT_CPU=%s ignored: above this CPU's %s", env,
                     k_level_names[detected]);
        else {
            use = (pt_cpu_level)l;
            snprintf(env_note, sizeof env_note, "forced by PT_CPU=%s", env);
        }
    }
    int expected = -1;
    atomic_compare_exchange_strong(&active, &expected, (int)use);
}

pt_cpu_level pt__cpu_detected(void)
{
    pthread_once(&detect_once, detect);
    return detected;
}

pt_cpu_level pt__cpu_active(void)
{
    int l = atomic_load_explicit(&active, memory_order_relaxed);
    if (l < 0) {
        pthread_once(&detect_once, detect);
        l = atomic_load(&active);
    }
    return (pt_cpu_level)l;
}

int pt__cpu_force(pt_cpu_level l)
{
    pthread_once(&detect_once, detect);
    if ((int)l < 0 || l >= PT_CPU_LEVELS)
        return pt__err(PT_EINVAL, "cpu path %d is not a level", (int)l);
    if (l > detected)
        return pt__err(PT_EUNSUPPORTED, "cpu path %s is above what this CPU runs (%s: %s)",
                      k_level_names[l], model, k_level_names[detected]);
    atomic_store(&active, (int)l);
    env_note[0] = '\0';
    return PT_OK;
}

const char *pt__cpu_level_str(pt_cpu_level l)
{
    return (int)l >= 0 && l < PT_CPU_LEVELS ? k_level_names[l] : NULL;
}

int pt__cpu_level_parse(const char *s)
{
    for (int i = 0; s && i < PT_CPU_LEVELS; i++)
        if (strcmp(s, k_level_names[i]) == 0)
            return i;
    return -1;
}

bool pt__cpu_has_vnni(void)
{
    pthread_once(&detect_once, detect);
    return vnni;
}

bool pt__cpu_has_amx(void)
{
    pthread_once(&detect_once, detect);
    return amx;
}

const char *pt__cpu_model(void)
{
    pthread_once(&detect_once, detect);
    return model;
}

/* ---- public ---- */

int pt_set_cpu_path(const char *name)
{
    if (!name || !*name || strcmp(name, "auto") == 0)
        return pt__cpu_force(pt__cpu_detected());
    int l = pt__cpu_level_parse(name);
    if (l < 0)
        return pt__err(PT_EINVAL, "pt_set_cpu_path: \"%s\" is not a path (avx2, avx512, "
                      "avx512bf16 or auto)", name);
    int st = pt__cpu_force((pt_cpu_level)l);
    return st == PT_OK ? st : pt__err_prefix(st, "pt_set_cpu_path");
}

const char *pt_cpu_path(void)
{
    return k_level_names[pt__cpu_active()];
}

static _Thread_local char tl_info[256];

const char *pt_cpu_info(void)
{
    pt_cpu_level det = pt__cpu_detected(), act = pt__cpu_active();
    const char *e = getenv("PT_AMX");
    const char *amx_note = !amx ? "" : act < PT_CPU_AVX512BF16 ? "; AMX not used on this path"
                                   : e && strcmp(e, "0") == 0 ? "; AMX off (PT_AMX=0)"
                                   : "; AMX tiles for attention";
    snprintf(tl_info, sizeof tl_info, "%s; kernels %s (CPU runs up to %s%s%s)%s", model,
             k_level_names[act], k_level_names[det], env_note[0] ? "; " : "", env_note, amx_note);
    return tl_info;
}

/* ---- features: the build's capabilities, and the kernel path in use ---- */

#define PT_FEATURE_WORDS                                                                           \
    "sft lora lora-switch peft checkpoint chat tensor-info generate entropy grpo context-threads " \
    "long-context jsonl plot gguf goodput dist chat-tools temperature grpo-sampling "            \
    "grpo-segments episodes cpu-dispatch bf16 run env-process grpo-builtin" PT_FEATURE_MPI
#ifdef PT_HAVE_MPI
#define PT_FEATURE_MPI " mpi"
#else
#define PT_FEATURE_MPI ""
#endif

/* One static string per path, so the answer needs no buffer. */
static const char *const k_features[PT_CPU_LEVELS] = {
    PT_FEATURE_WORDS " cpu-path=avx2",
    PT_FEATURE_WORDS " cpu-path=avx512",
    PT_FEATURE_WORDS " cpu-path=avx512bf16",
};

const char *pt_features(void)
{
    return k_features[pt__cpu_active()];
}

int pt_has_feature(const char *name)
{
    if (!name || !*name)
        return 0;
    const char *all = pt_features();
    size_t n = strlen(name);
    for (const char *p = all; (p = strstr(p, name)); p += n)
        if ((p == all || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}
