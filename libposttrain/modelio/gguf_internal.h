/* What the GGUF exporter, the LoRA adapter exporter and the importer share:
 * llama.cpp's architecture names and its Q/K row permutation.  Internal.
 * (The container is io/gguf.h; tensor names are model/schema.h's
 * pt__tensor_gguf_name.) */
#ifndef PT_MODELIO_GGUF_INTERNAL_H
#define PT_MODELIO_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* general.architecture for a pt_arch: "llama" (llama and mistral, as the
 * converter writes Mistral), "qwen2", "qwen3"; NULL for an unknown value. */
const char *pt__gguf_arch_name(int arch);
/* The pt_arch of a general.architecture value, or -1. */
int pt__gguf_arch_from_name(const char *name);
/* Whether the converter permutes q_proj / k_proj rows for this arch
 * (llama-type: llama, mistral; not qwen2 / qwen3). */
bool pt__gguf_arch_permutes(int arch);

/* The converter's LlamaModel.permute: for a [rows, cols] row-major matrix
 * (rows = n_head * head_dim), within each head the rows [0, d/2) and
 * [d/2, d) are interleaved: dst row h*d + 2*i + j = src row h*d + j*d/2 + i
 * (i < d/2, j in {0, 1}).  Turns Hugging Face's rotate-half RoPE layout
 * into ggml's adjacent-pair layout.  cols may be 1 (a bias).  dst != src. */
void pt__gguf_permute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int n_head);
/* Its inverse (for import). */
void pt__gguf_unpermute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int n_head);
/* The same for rows of row_bytes bytes (quantized blocks: a row is whole
 * blocks, so the permutation moves rows of blocks). */
void pt__gguf_unpermute_row_bytes(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes,
                                 int n_head);

#endif
