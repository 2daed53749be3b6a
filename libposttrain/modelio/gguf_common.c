/* llama.cpp architecture names and the Q/K permutation (gguf_internal.h);
 * the check that an export writes no NaN or infinity. */
#include "modelio/gguf_internal.h"

#include "core/core.h"
#include "io/safetensors.h"
#include "modelio/gguf_export_internal.h"
#include "posttrain/model.h"

#include <stdio.h>
#include <string.h>

const char *pt__gguf_arch_name(int arch)
{
    switch (arch) {
    case PT_ARCH_LLAMA:
    case PT_ARCH_MISTRAL: return "llama";
    case PT_ARCH_QWEN2: return "qwen2";
    case PT_ARCH_QWEN3: return "qwen3";
    default: return NULL;
    }
}

int pt__gguf_arch_from_name(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "llama") == 0)
        return PT_ARCH_LLAMA;
    if (strcmp(name, "qwen2") == 0)
        return PT_ARCH_QWEN2;
    if (strcmp(name, "qwen3") == 0)
        return PT_ARCH_QWEN3;
    return -1;
}

bool pt__gguf_arch_permutes(int arch)
{
    return arch == PT_ARCH_LLAMA || arch == PT_ARCH_MISTRAL;
}

/* Row r of the ggml layout comes from row src_row(r) of the HF layout. */
static int64_t hf_row(int64_t r, int64_t d)
{
    int64_t h = r / d, k = r % d, half = d / 2;
    return h * d + (k % 2) * half + k / 2;
}

void pt__gguf_permute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int n_head)
{
    int64_t d = rows / n_head;
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * cols, src + hf_row(r, d) * cols, (size_t)cols * sizeof(float));
}

void pt__gguf_unpermute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int n_head)
{
    int64_t d = rows / n_head;
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + hf_row(r, d) * cols, src + r * cols, (size_t)cols * sizeof(float));
}

void pt__gguf_unpermute_row_bytes(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes,
                                 int n_head)
{
    int64_t d = rows / n_head;
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + (size_t)hf_row(r, d) * row_bytes, src + (size_t)r * row_bytes, row_bytes);
}

int gx_check_written(const float *v, size_t n, int type, const char *fn, const char *path, const char *name,
                     const char *how)
{
    size_t at = pt__first_nonfinite(v, n);
    char what[64] = "";
    if (at < n)
        snprintf(what, sizeof what, "%s", pt__nonfinite_name(v[at]));
    else if (type == PT_GGML_F16 || type == PT_GGML_BF16) {
        const bool f16 = type == PT_GGML_F16;
        for (at = 0; at < n; at++) {
            uint16_t h = f16 ? pt__f32_to_f16(v[at]) : pt__f32_to_bf16(v[at]);
            if ((h & (f16 ? 0x7c00u : 0x7f80u)) == (f16 ? 0x7c00u : 0x7f80u))
                break;
        }
        if (at < n)
            snprintf(what, sizeof what, "%s in %s (%g is beyond its range)", v[at] > 0 ? "+inf" : "-inf",
                     f16 ? "F16" : "BF16", (double)v[at]);
    }
    if (!what[0])
        return PT_OK;
    return pt__err(PT_ENONFINITE, "%s: %s: tensor '%s' would hold %s at element %zu%s; a non-finite model is not "
                  "exported (nothing was written)", fn, path, name, what, at, how);
}
