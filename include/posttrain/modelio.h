/*
 * libposttrain public API: Hugging Face model directories in and out, and
 * evaluation of a model on JSONL data.
 *
 * A model directory holds config.json, the weights (model.safetensors, or
 * model.safetensors.index.json with its shards), and usually tokenizer.json,
 * tokenizer_config.json and generation_config.json.  See docs/model-files.md
 * for the exact rules (tensor names per architecture, dtypes, what is an error).
 */
#ifndef POSTTRAIN_MODELIO_H
#define POSTTRAIN_MODELIO_H

#include <stdbool.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/model.h"
#include "posttrain/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read DIR/config.json (or the file itself when `path` is not a directory)
 * into cfg (which must be initialised with pt_model_config_init). */
PT_API int pt_model_config_load(pt_model_config *cfg, const char *path);

/* The Hugging Face config.json text for cfg: exact field names of its
 * model_type, sorted keys, torch_dtype "float32".  Free with pt_free. */
PT_API int pt_model_config_to_json(char **out, const pt_model_config *cfg);

/* Parameters a configuration implies (tied embeddings counted once), the
 * same number pt_model_num_params gives for a model built from it. */
PT_API int pt_model_config_num_params(uint64_t *out, const pt_model_config *cfg);

/* What a model directory holds, read from config.json and the safetensors
 * headers only (no tensor data is read).  A directory without weights files
 * is described too (weights_status PT_ENOTFOUND); a bad config.json or a
 * malformed safetensors header fails the call. */
#define PT_MODEL_INFO_MAX_DTYPES 24
typedef struct pt_model_dir_info {
    size_t size;                  /* sizeof(pt_model_dir_info) */
    pt_model_config config;
    uint64_t num_params;          /* parameters the config implies */
    int num_files;                /* weight files: 1, or the shards of the index */
    uint64_t num_tensors;         /* tensors in the weight files */
    uint64_t weight_bytes;        /* bytes of tensor data in them */
    int num_dtypes;               /* entries used in dtypes[] */
    struct {
        char name[16];            /* safetensors dtype: "F32", "BF16", ... */
        uint64_t tensors;
        uint64_t bytes;
    } dtypes[PT_MODEL_INFO_MAX_DTYPES];
    bool sharded;                 /* weights come from model.safetensors.index.json */
    bool has_tokenizer;           /* tokenizer.json present */
    bool has_generation_config;   /* generation_config.json present */
    /* Whether the weights hold exactly the tensors the config needs, with
     * their shapes and a loadable dtype (checked from the headers alone, by
     * the rules of pt_model_load_dir): PT_OK, or the status the load would
     * fail with and its message. */
    int weights_status;
    char weights_problem[320];
    /* A GGUF file (`dir` is a .gguf file): its version (2 or 3), else 0;
     * dtypes[] then holds ggml type names ("F16", "Q4_K", ...), num_files
     * is 1 and has_tokenizer says whether tokenizer.ggml.* is present. */
    int gguf_version;
    bool quantised;               /* GGUF: some tensor has a quantised (or integer) type */
    /* Whether DIR/tokenizer.json loads as pt_model_load_dir loads it (parsed
     * in full, checked against the config's vocab_size): PT_OK (also when
     * there is none), PT_EUNSUPPORTED (a kind this build cannot run: the
     * model loads without it), or the status the load would fail with (a
     * malformed file, a directory or FIFO of that name, a tokenizer of
     * another vocabulary); and its message.  PT_OK for a GGUF file. */
    int tokenizer_status;
    char tokenizer_problem[320];
} pt_model_dir_info;

PT_API int pt_model_dir_info_init(pt_model_dir_info *info);
PT_API int pt_model_dir_inspect(pt_model_dir_info *info, const char *dir);

/* The memory a configuration needs, estimated (FP32 everywhere; what
 * `posttrain info` prints): inference (weights and one sequence's KV cache),
 * full fine-tuning (weights, gradients and two AdamW moments, 16 B a
 * parameter, and the activations a backward keeps) and LoRA on all seven
 * projections (the frozen weights, the adapter's 16 B a parameter, the
 * activations and the adapters' own).  Fill with
 * pt_memory_estimate_options_init(). */
typedef struct pt_memory_estimate_options {
    size_t size;          /* sizeof(pt_memory_estimate_options) */
    int64_t context;      /* inference tokens; 0 (default): min(max positions, 2048) */
    int64_t batch;        /* training sequences a step (default 4) */
    int64_t seq;          /* training sequence length; 0 (default): min(max positions, 256) */
    int64_t lora_rank;    /* default 16 */
} pt_memory_estimate_options;

/* The estimate, in bytes (or counts). */
typedef struct pt_memory_estimate {
    size_t size;                          /* sizeof(pt_memory_estimate) */
    int64_t context, kv_cache_slots;      /* slots: the sliding window when shorter */
    int64_t batch, seq, lora_rank;        /* the options, defaults applied */
    double weights_bytes, kv_cache_bytes, inference_bytes;
    double full_state_bytes, activation_bytes, full_finetune_bytes;
    double lora_params, lora_state_bytes, lora_activation_bytes, lora_bytes;
} pt_memory_estimate;

PT_API int pt_memory_estimate_options_init(pt_memory_estimate_options *opts);
PT_API int pt_memory_estimate_init(pt_memory_estimate *est);
/* The estimate of cfg (validated as pt_model_config_num_params does; opts
 * NULL: the defaults); PT_EINVAL for options out of range. */
PT_API int pt_model_config_memory_estimate(pt_memory_estimate *est, const pt_model_config *cfg,
                                           const pt_memory_estimate_options *opts);
/* One JSON object describing a model directory or GGUF file `dir` (as
 * named), its info and est: the document `posttrain info --json` prints,
 * ending in a newline.  *json is freed with pt_free; len may be NULL. */
PT_API int pt_model_dir_info_to_json(char **json, size_t *len, const char *dir, const pt_model_dir_info *info,
                                     const pt_memory_estimate *est);
/* The same as text, one "field:  value" line each and the memory estimate:
 * what `posttrain info` prints.  *text is freed with pt_free; len may be
 * NULL. */
PT_API int pt_model_dir_info_to_text(char **text, size_t *len, const char *dir, const pt_model_dir_info *info,
                                     const pt_memory_estimate *est);

/* Options of pt_model_load_dir.  Fill with pt_model_load_options_init(). */
typedef struct pt_model_load_options {
    size_t size;             /* sizeof(pt_model_load_options) */
    bool load_tokenizer;     /* load DIR/tokenizer.json when present, so that
                              * pt_model_tokenizer() returns it (default true);
                              * a malformed tokenizer fails the call, one that
                              * this build does not support (PT_EUNSUPPORTED)
                              * is logged as a warning and left out */
    int bf16;                /* pt_bf16_mode (default PT_BF16_OFF): as
                              * pt_model_set_bf16 after the load, except that
                              * PT_BF16_FROZEN reads each matrix of a model
                              * directory straight into BF16, so the whole
                              * FP32 copy never exists (peak memory about the
                              * BF16 size plus the embedding in FP32); the
                              * way to load a base for LoRA on BF16 */
    int quantize;            /* pt_quantize: quantize the 2-D weights on load,
                              * as llama.cpp's llama-quantize --pure does (rows
                              * whose length is not a multiple of 32 stay
                              * FP32); the base is then frozen as a quantized
                              * GGUF's (docs/gguf.md).  Default PT_QUANTIZE_NONE */
} pt_model_load_options;

/* pt_model_load_options.quantize (ggml's type numbers). */
typedef enum pt_quantize {
    PT_QUANTIZE_NONE = 0,
    PT_QUANTIZE_Q4_0 = 2,
    PT_QUANTIZE_Q8_0 = 8
} pt_quantize;
/* "none", "q8_0", "q4_0"; NULL for other values. */
PT_API const char *pt_quantize_name(int value);
/* The pt_quantize of a name; PT_EINVAL listing the names otherwise. */
PT_API int pt_quantize_from_name(int *out, const char *name);

PT_API int pt_model_load_options_init(pt_model_load_options *opts);

/* Load a model directory (opts may be NULL for the defaults), or a GGUF
 * model file (a file starting with the magic "GGUF": configuration from its
 * metadata, F32/F16/BF16 tensors, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K
 * and Q6_K tensors kept quantized (the base frozen), the tokenizer rebuilt
 * from tokenizer.ggml.*; other quantized types are PT_EUNSUPPORTED;
 * docs/gguf.md).  Every tensor
 * of the model must be in the weights with its exact shape; a missing
 * tensor is PT_ENOTFOUND, an unexpected one PT_EFORMAT, a mis-shaped one
 * PT_ESHAPE, each naming the tensor.  F32, F16 and BF16 are converted to
 * F32; other dtypes are PT_EUNSUPPORTED.  Rotary "inv_freq" buffers are
 * ignored; "lm_head.weight" with tied embeddings is accepted only when it
 * equals "model.embed_tokens.weight". */
PT_API int pt_model_load_dir(pt_model **out, const char *dir, const pt_model_load_options *opts);

/* The directory the model was loaded from, or NULL (pt_model_create). */
PT_API const char *pt_model_source_dir(const pt_model *model);
/* The tokenizer loaded with the model, or NULL.  Owned by the model's
 * modelio record: valid until pt_model_free of the model. */
PT_API const pt_tokenizer *pt_model_tokenizer(const pt_model *model);

/* Options of pt_model_save_dir.  Fill with pt_model_save_options_init(). */
typedef struct pt_model_save_options {
    size_t size;               /* sizeof(pt_model_save_options) */
    const char *tokenizer_dir; /* copy the tokenizer files from here; NULL: the
                                * directory the model was loaded from, if any */
    bool copy_tokenizer;       /* default true */
} pt_model_save_options;

PT_API int pt_model_save_options_init(pt_model_save_options *opts);

/* Write the Hugging Face layout into dir (created if absent; existing files
 * of the same names are replaced): config.json, model.safetensors (F32,
 * metadata {"format": "pt"}), generation_config.json (copied from the
 * source directory when it has one, else written from the config's token
 * ids), and the tokenizer files present in the tokenizer directory
 * (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * chat_template.jinja, tokenizer.model, added_tokens.json, vocab.json,
 * merges.txt).  Each file is written to a temporary name, fsynced and
 * renamed into place. */
PT_API int pt_model_save_dir(const pt_model *model, const char *dir,
                             const pt_model_save_options *opts);

/* ---- evaluation -------------------------------------------------------------- */

typedef struct pt_eval_options {
    size_t size;          /* sizeof(pt_eval_options) */
    int max_length;       /* rows longer than this are cut to their first
                           * max_length tokens (a warning is logged); 0: the
                           * model's max_position_embeddings */
    bool add_special;     /* {"text"} rows: add the tokenizer's special tokens
                           * (its post-processor, e.g. BOS); default true */
} pt_eval_options;

PT_API int pt_eval_options_init(pt_eval_options *opts);

/* Result of pt_model_eval_jsonl: loss in nats per predicted token. */
typedef struct pt_eval_result {
    double loss;          /* mean over all predicted tokens (0 when tokens == 0) */
    int64_t tokens;       /* predicted tokens in all rows */
    size_t n_rows;
    double *row_loss;     /* per row: mean over its tokens (NaN when it has none) */
    int64_t *row_tokens;  /* per row: predicted tokens */
} pt_eval_result;

/* Mean next-token loss of model over a JSONL file: every position predicts
 * the next one.  Rows are {"text": str} (encoded with tok, which may be NULL
 * when no row has text) or {"input_ids": [ids], "loss_mask": [0/1, ...]}
 * (optional; loss_mask[i] == 0 leaves token i out of the loss as a target).
 * Blank lines are skipped.  Free the result with pt_eval_result_free. */
PT_API int pt_model_eval_jsonl(pt_eval_result **out, pt_model *model, const pt_tokenizer *tok,
                               const char *path, const pt_eval_options *opts);
PT_API void pt_eval_result_free(pt_eval_result *r);
/* r as one JSON object, as `posttrain eval --json` prints it: {"loss": L,
 * "tokens": N, "rows": [{"loss": L, "tokens": N}, ...]}, each loss in
 * "%.17g" (reads back exactly) or null when it is not finite (a row without
 * tokens); no newline.  *json allocated (free with pt_free; len may be NULL). */
PT_API int pt_eval_result_to_json(char **json, size_t *len, const pt_eval_result *r);
/* r as the text `posttrain eval` prints: "row I: loss L nats/token over N
 * tokens" (or "row I: no tokens to predict") a line each, then "overall:
 * loss L nats/token over N tokens in R rows (perplexity P)", each ending in
 * a newline.  *text allocated (free with pt_free; len may be NULL). */
PT_API int pt_eval_result_to_text(char **text, size_t *len, const pt_eval_result *r);

#ifdef __cplusplus
}
#endif

#endif
