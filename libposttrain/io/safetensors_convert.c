/* safetensors dtypes: the closed set with names and sizes, and reading a
 * tensor as F32 (the scalar F16/BF16 conversions are core/half.h's). */
#include "io/safetensors.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

/* ---- dtypes -------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bits;
} dtype_info[PT_ST_DTYPE_COUNT] = {
    [PT_ST_F32] = {"F32", 32},         [PT_ST_F16] = {"F16", 16},
    [PT_ST_BF16] = {"BF16", 16},       [PT_ST_F64] = {"F64", 64},
    [PT_ST_I64] = {"I64", 64},         [PT_ST_I32] = {"I32", 32},
    [PT_ST_I16] = {"I16", 16},         [PT_ST_I8] = {"I8", 8},
    [PT_ST_U8] = {"U8", 8},            [PT_ST_BOOL] = {"BOOL", 8},
    [PT_ST_U16] = {"U16", 16},         [PT_ST_U32] = {"U32", 32},
    [PT_ST_U64] = {"U64", 64},         [PT_ST_F8_E5M2] = {"F8_E5M2", 8},
    [PT_ST_F8_E4M3] = {"F8_E4M3", 8},  [PT_ST_F8_E8M0] = {"F8_E8M0", 8},
    [PT_ST_C64] = {"C64", 64},         [PT_ST_F4] = {"F4", 4},
    [PT_ST_F6_E2M3] = {"F6_E2M3", 6},  [PT_ST_F6_E3M2] = {"F6_E3M2", 6},
};

const char *pt__st_dtype_name(int dtype)
{
    if (dtype < 0 || dtype >= PT_ST_DTYPE_COUNT)
        return NULL;
    return dtype_info[dtype].name;
}

int pt__st_dtype_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < PT_ST_DTYPE_COUNT; i++)
        if (strcmp(dtype_info[i].name, name) == 0)
            return i;
    return -1;
}

unsigned pt__st_dtype_bits(int dtype)
{
    if (dtype < 0 || dtype >= PT_ST_DTYPE_COUNT)
        return 0;
    return dtype_info[dtype].bits;
}

/* ---- reading as float ---------------------------------------------------- */

static inline uint16_t load_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
static inline uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
#endif

int pt__st_read_f32(const pt_st_tensor *tensor, float *dst, size_t numel)
{
    PT_CHECK_NULL(tensor);
    const pt_st_tensor *t = tensor;
    if (numel != t->numel)
        return pt__err(PT_ESHAPE, "tensor '%s' has %zu elements, the caller expects %zu", t->name,
                      t->numel, numel);
    if (t->dtype != PT_ST_F32 && t->dtype != PT_ST_F16 && t->dtype != PT_ST_BF16)
        return pt__err(PT_EUNSUPPORTED, "tensor '%s' has dtype %s; only F32, F16 and BF16 load as float",
                      t->name, pt__st_dtype_name(t->dtype) ? pt__st_dtype_name(t->dtype) : "?");
    if (numel == 0)
        return PT_OK;
    PT_CHECK_ARG(dst, dst, "is NULL (the destination for tensor '%s')", t->name);
    const uint8_t *src = t->data;
    long long n = (long long)numel;
    int nt = numel >= ((size_t)1 << 16) ? pt_get_num_threads() : 1;
    switch (t->dtype) {
    case PT_ST_F32:
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(dst, src, numel * sizeof(float));
#else
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = pt__f32_from_bits(load_u32(src + 4 * i));
#endif
        break;
    case PT_ST_F16:
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = pt__f16_to_f32(load_u16(src + 2 * i));
        break;
    default:
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = pt__bf16_to_f32(load_u16(src + 2 * i));
        break;
    }
    if (t->mapped)
        pt__release_pages(t->data, t->nbytes);
    return PT_OK;
}
