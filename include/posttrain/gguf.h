/*
 * libposttrain public API: GGUF files, the format llama.cpp (and ollama,
 * LM Studio, llama-cpp-python) serves.  See docs/gguf.md.
 *
 * Export writes what llama.cpp's own converter (convert_hf_to_gguf.py)
 * writes for the same Hugging Face model: GGUF v3, the general.* and
 * <arch>.* metadata, the tokenizer (byte-level BPE as "gpt2" with its
 * pre-tokenizer name, SentencePiece-style BPE as "llama" with scores), the
 * chat template, and the tensors under llama.cpp's names with Q and K
 * permuted for llama-type architectures.
 *
 * Import: pt_model_load_dir (posttrain/modelio.h) also accepts a .gguf
 * file holding F32, F16 or BF16 tensors, with its tokenizer rebuilt from
 * the metadata; quantised files are refused with PT_EUNSUPPORTED.
 */
#ifndef POSTTRAIN_GGUF_H
#define POSTTRAIN_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor type of an export ("f32", "f16", "bf16"; general.file_type 0, 1,
 * 32).  As the converter does, 1-D tensors (norms, biases) stay F32. */
typedef enum pt_gguf_ftype {
    PT_GGUF_FTYPE_F32 = 0,
    PT_GGUF_FTYPE_F16 = 1,
    PT_GGUF_FTYPE_BF16 = 2
} pt_gguf_ftype;

PT_API const char *pt_gguf_ftype_name(int value);
PT_API int pt_gguf_ftype_from_name(int *out, const char *name);

/* tokenizer.ggml.scores of a SentencePiece-style tokenizer.json (BPE with
 * byte fallback, written as tokenizer.ggml.model "llama"; "converter",
 * "merges").  llama.cpp tokenizes such a vocabulary by the scores alone
 * (the highest-scoring adjacent pair is merged first), so:
 *
 * - PT_GGUF_SPM_SCORES_CONVERTER (the default): every score -1000, what
 *   convert_hf_to_gguf.py (gguf-py's LlamaHfVocab) writes for a directory
 *   without tokenizer.model.  llama.cpp then merges in token-id order, which
 *   is not Hugging Face's merge order: stories260K's " little" is 1 token in
 *   Hugging Face and 4 in llama.cpp.
 * - PT_GGUF_SPM_SCORES_MERGES: a piece's score is minus the rank of the
 *   first merge of tokenizer.json producing it (0 for the first merge),
 *   every other token -1e9, as a SentencePiece BPE model scores its pieces;
 *   llama.cpp then merges in Hugging Face's order, and pt_model_load_dir
 *   rebuilds exactly the tokenizer.json merges from the scores.
 *
 * Byte-level ("gpt2") vocabularies carry their merges and no scores: the
 * option does not change them. */
typedef enum pt_gguf_spm_scores {
    PT_GGUF_SPM_SCORES_CONVERTER = 0,
    PT_GGUF_SPM_SCORES_MERGES = 1
} pt_gguf_spm_scores;

PT_API const char *pt_gguf_spm_scores_name(int value);
PT_API int pt_gguf_spm_scores_from_name(int *out, const char *name);

typedef struct pt_gguf_export_options {
    size_t size;          /* sizeof(pt_gguf_export_options) */
    int type;             /* pt_gguf_ftype; default PT_GGUF_FTYPE_F32 */
    const char *name;     /* general.name; NULL: derived as the converter
                           * derives it (a model: from its source directory's
                           * name; an adapter: from the PEFT directory
                           * pt_lora_load_peft read, else the model's) */
    int spm_scores;       /* pt_gguf_spm_scores; default
                           * PT_GGUF_SPM_SCORES_CONVERTER (a struct of the
                           * older size without it gets the default) */
} pt_gguf_export_options;

PT_API int pt_gguf_export_options_init(pt_gguf_export_options *opts);

/* Write the model as a GGUF model file (written to a temporary name,
 * fsynced and renamed: nothing under `path` changes on failure).  LoRA
 * adapters, if the model has them, are merged into the written weights
 * (the model itself is unchanged).  The tokenizer is the model's
 * (pt_model_tokenizer); a model without one is PT_ESTATE. */
PT_API int pt_model_export_gguf(const pt_model *model, const char *path,
                                const pt_gguf_export_options *opts);

/* Write the model's LoRA adapters as a GGUF LoRA adapter, as llama.cpp's
 * convert_lora_to_gguf.py does (general.type "adapter", adapter.type
 * "lora", adapter.lora.alpha, tensors "<name>.weight.lora_a" / ".lora_b"),
 * which llama.cpp applies with --lora over the base model's GGUF.  opts
 * may be NULL; opts->type applies to the adapter matrices.  A model
 * without adapters is PT_ESTATE. */
PT_API int pt_lora_export_gguf(const pt_model *model, const char *path,
                               const pt_gguf_export_options *opts);

/* The counts of a GGUF file (a model, an adapter, any GGUF), read and checked
 * as loading reads its header, metadata and tensor infos (no tensor data is
 * read): the format version, the tensors and the metadata keys.  PT_EFORMAT
 * (naming what is wrong) for a file that is not valid GGUF. */
PT_API int pt_gguf_file_counts(int *version, int64_t *n_tensors, int64_t *n_kv, const char *path);

#ifdef __cplusplus
}
#endif

#endif
