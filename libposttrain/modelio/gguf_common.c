/* llama.cpp architecture names and the Q/K permutation (gguf_internal.h). */
#include "modelio/gguf_internal.h"

#include "posttrain/model.h"

#include <string.h>

const char *pt_gguf_arch_name(int arch)
{
    switch (arch) {
    case PT_ARCH_LLAMA:
    case PT_ARCH_MISTRAL: return "llama";
    case PT_ARCH_QWEN2: return "qwen2";
    case PT_ARCH_QWEN3: return "qwen3";
    default: return NULL;
    }
}

int pt_gguf_arch_from_name(const char *name)
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

bool pt_gguf_arch_permutes(int arch)
{
    return arch == PT_ARCH_LLAMA || arch == PT_ARCH_MISTRAL;
}

/* Row r of the ggml layout comes from row src_row(r) of the HF layout. */
static int64_t hf_row(int64_t r, int64_t d)
{
    int64_t h = r / d, k = r % d, half = d / 2;
    return h * d + (k % 2) * half + k / 2;
}

void pt_gguf_permute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int n_head)
{
    int64_t d = rows / n_head;
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * cols, src + hf_row(r, d) * cols, (size_t)cols * sizeof(float));
}

void pt_gguf_unpermute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int n_head)
{
    int64_t d = rows / n_head;
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + hf_row(r, d) * cols, src + r * cols, (size_t)cols * sizeof(float));
}
