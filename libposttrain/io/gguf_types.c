/* The GGUF metadata value types and the ggml tensor types: names and block
 * sizes.  Facts from llama.cpp's ggml/include/ggml.h (the numbers),
 * ggml/src/ggml.c's type_traits (block elements) and ggml-common.h (the
 * block structs' sizes); numbers it marks removed have no entry. */
#include "io/gguf.h"

#include <stddef.h>

typedef struct ggml_type_info {
    const char *name;
    uint16_t block_elems;   /* 0: no such type */
    uint16_t block_bytes;
} ggml_type_info;

static const ggml_type_info ggml_types[PT_GGML_TYPE_END] = {
    [PT_GGML_F32] = {"F32", 1, 4},
    [PT_GGML_F16] = {"F16", 1, 2},
    [PT_GGML_Q4_0] = {"Q4_0", 32, 18},        /* f16 d + 16 nibble bytes */
    [PT_GGML_Q4_1] = {"Q4_1", 32, 20},        /* f16 d, m + 16 */
    [PT_GGML_Q5_0] = {"Q5_0", 32, 22},        /* f16 d + u32 qh + 16 */
    [PT_GGML_Q5_1] = {"Q5_1", 32, 24},
    [PT_GGML_Q8_0] = {"Q8_0", 32, 34},        /* f16 d + 32 */
    [PT_GGML_Q8_1] = {"Q8_1", 32, 36},
    [PT_GGML_Q2_K] = {"Q2_K", 256, 84},       /* 2 f16 + 16 + 64 */
    [PT_GGML_Q3_K] = {"Q3_K", 256, 110},      /* f16 + 64 + 32 + 12 */
    [PT_GGML_Q4_K] = {"Q4_K", 256, 144},      /* 2 f16 + 12 + 128 */
    [PT_GGML_Q5_K] = {"Q5_K", 256, 176},      /* 2 f16 + 12 + 128 + 32 */
    [PT_GGML_Q6_K] = {"Q6_K", 256, 210},      /* f16 + 16 + 192 */
    [PT_GGML_Q8_K] = {"Q8_K", 256, 292},      /* f32 + 256 + 16 i16 */
    [PT_GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [PT_GGML_IQ2_XS] = {"IQ2_XS", 256, 74},
    [PT_GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [PT_GGML_IQ1_S] = {"IQ1_S", 256, 50},
    [PT_GGML_IQ4_NL] = {"IQ4_NL", 32, 18},
    [PT_GGML_IQ3_S] = {"IQ3_S", 256, 110},
    [PT_GGML_IQ2_S] = {"IQ2_S", 256, 82},
    [PT_GGML_IQ4_XS] = {"IQ4_XS", 256, 136},
    [PT_GGML_I8] = {"I8", 1, 1},
    [PT_GGML_I16] = {"I16", 1, 2},
    [PT_GGML_I32] = {"I32", 1, 4},
    [PT_GGML_I64] = {"I64", 1, 8},
    [PT_GGML_F64] = {"F64", 1, 8},
    [PT_GGML_IQ1_M] = {"IQ1_M", 256, 56},
    [PT_GGML_BF16] = {"BF16", 1, 2},
    [PT_GGML_TQ1_0] = {"TQ1_0", 256, 54},     /* f16 + 4 + 48 */
    [PT_GGML_TQ2_0] = {"TQ2_0", 256, 66},     /* f16 + 64 */
    [PT_GGML_MXFP4] = {"MXFP4", 32, 17},      /* e8m0 scale + 16 (ggml 2025-08) */
};

const char *pt__ggml_type_name(int type)
{
    if (type < 0 || type >= PT_GGML_TYPE_END || ggml_types[type].block_elems == 0)
        return NULL;
    return ggml_types[type].name;
}

bool pt__ggml_type_block(int type, uint64_t *block_elems, uint64_t *block_bytes)
{
    if (type < 0 || type >= PT_GGML_TYPE_END || ggml_types[type].block_elems == 0)
        return false;
    if (block_elems)
        *block_elems = ggml_types[type].block_elems;
    if (block_bytes)
        *block_bytes = ggml_types[type].block_bytes;
    return true;
}

bool pt__ggml_type_is_float(int type)
{
    return type == PT_GGML_F32 || type == PT_GGML_F16 || type == PT_GGML_BF16;
}

static const char *const gguf_type_names[PT_GGUF_TYPE_COUNT] = {
    [PT_GGUF_UINT8] = "uint8",     [PT_GGUF_INT8] = "int8",       [PT_GGUF_UINT16] = "uint16",
    [PT_GGUF_INT16] = "int16",     [PT_GGUF_UINT32] = "uint32",   [PT_GGUF_INT32] = "int32",
    [PT_GGUF_FLOAT32] = "float32", [PT_GGUF_BOOL] = "bool",       [PT_GGUF_STRING] = "string",
    [PT_GGUF_ARRAY] = "array",     [PT_GGUF_UINT64] = "uint64",   [PT_GGUF_INT64] = "int64",
    [PT_GGUF_FLOAT64] = "float64",
};

const char *pt__gguf_type_name(int type)
{
    if (type < 0 || type >= PT_GGUF_TYPE_COUNT)
        return NULL;
    return gguf_type_names[type];
}

size_t pt__gguf_type_size(int type)
{
    switch (type) {
    case PT_GGUF_UINT8: case PT_GGUF_INT8: case PT_GGUF_BOOL:
        return 1;
    case PT_GGUF_UINT16: case PT_GGUF_INT16:
        return 2;
    case PT_GGUF_UINT32: case PT_GGUF_INT32: case PT_GGUF_FLOAT32:
        return 4;
    case PT_GGUF_UINT64: case PT_GGUF_INT64: case PT_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}
