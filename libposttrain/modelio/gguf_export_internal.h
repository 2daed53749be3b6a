/* The pieces of pt_model_export_gguf (gguf_export.c), shared by its files:
 * the tensors (gguf_tensors.c), the general.* and <arch>.* metadata
 * (gguf_meta.c, with the converter's naming heuristics in gguf_name.c), the
 * token list (gguf_vocab.c) and what gguf-py's SpecialVocab adds after it
 * (gguf_special.c).  Internal.
 *
 * The reference is llama.cpp's convert_hf_to_gguf.py as of the Aug 2026
 * tree (conversion/base.py TextModel, conversion/llama.py LlamaModel,
 * conversion/qwen.py Qwen2Model / Qwen3Model, gguf-py): the converter reads
 * the model directory's config.json ("hparams"), tokenizer.json and
 * tokenizer_config.json, so the exporter reads the same files from the
 * directory the model was loaded from (config.json is regenerated from the
 * model's configuration when that directory has none). */
#ifndef PT_MODELIO_GGUF_EXPORT_INTERNAL_H
#define PT_MODELIO_GGUF_EXPORT_INTERNAL_H

#include "io/gguf.h"
#include "posttrain/gguf.h"
#include "posttrain/model.h"
#include "posttrain/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gx_ctx {
    const pt_model *m;
    pt_model_config cfg;
    int type;                   /* pt_gguf_ftype */
    const char *name;           /* general.name override, or NULL */
    int spm_scores;             /* pt_gguf_spm_scores */
    const char *out_path;
    const pt_tokenizer *tok;
    const char *src_dir;        /* NULL: none */
    cJSON *hparams;             /* config.json */
    cJSON *tok_json;            /* tokenizer.json, or NULL */
    cJSON *tok_cfg;             /* tokenizer_config.json, or NULL */
    pt_gguf_writer *w;
    uint64_t total_params;      /* elements of every tensor written */
} gx_ctx;

/* gguf_tensors.c: the tensors as the converter writes them (rope_freqs
 * first for llama3 scaling, then the Hugging Face names in sorted order,
 * Q/K permuted for llama-type architectures, LoRA merged, 1-D tensors F32)
 * into c->w, and c->total_params.  The buffers they point into are kept in
 * *bufs until pt__gguf_write has run (free with gx_tensors_free). */
typedef struct gx_bufs {
    float **p;
    size_t n, cap;
} gx_bufs;
int gx_add_tensors(gx_ctx *c, gx_bufs *bufs);
/* PT_ENONFINITE naming fn, path and the tensor when the n values v would be
 * written as a NaN or an infinity in ggml type `type`: as they are in F32;
 * in F16 and BF16 after rounding too, which makes a finite value beyond
 * their range an infinity.  `how` ("" or " with the LoRA update merged")
 * says what made the values.  PT_OK otherwise (gguf_common.c). */
int gx_check_written(const float *v, size_t n, int type, const char *fn, const char *path, const char *name,
                     const char *how);
void gx_tensors_free(gx_bufs *bufs);
/* The converter's llama3 rope factors (LlamaModel.generate_extra_tensors,
 * float32 arithmetic as torch does it) for head_dim/2 entries; false when
 * the hparams have no llama3 rope scaling. */
bool gx_rope_freqs(const cJSON *hparams, float *out, size_t n);

/* gguf_meta.c: general.architecture, general.type, the general.* naming
 * keys, then the <arch>.* keys and general.file_type (TextModel /
 * LlamaModel set_gguf_parameters), then general.quantization_version. */
int gx_add_meta(gx_ctx *c);

/* gguf_name.c: gguf-py's Metadata heuristics for a model id (the
 * directory's name or config.json's _name_or_path). */
typedef struct gx_name_parts {
    char *full, *org, *basename, *finetune, *version, *size_label;
} gx_name_parts;
int gx_model_id_components(gx_name_parts *out, const char *model_id, int64_t total_params);
void gx_name_parts_free(gx_name_parts *p);
/* The naming keys Metadata.set_gguf_meta_model writes (NULL: not written). */
typedef struct gx_names {
    char *name, *organization, *basename, *finetune, *version, *size_label;
} gx_names;
void gx_names_free(gx_names *n);
/* One model id's heuristics into the fields of *n still unset (the name is
 * id_to_title of the id's full name).  total: the parameter count, negative
 * for a LoRA adapter (gguf-py's get_total_parameter_count). */
int gx_names_apply_id(gx_names *n, const char *id, int64_t total);
/* general.name, version, organization, finetune, basename, size_label, in
 * that order, each when set and not empty. */
int gx_names_write(pt_gguf_writer *w, const gx_names *n);
/* Metadata.id_to_title. */
char *gx_id_to_title(const char *s);
/* gguf.size_label for a dense model ("260K", "1.2B"). */
void gx_size_label(char *buf, size_t n, uint64_t total_params);
/* pathlib's Path(dir).name (the last component, "" for "." or "/"). */
char *gx_path_name(const char *dir);

/* gguf_vocab.c: set_vocab (tokenizer.ggml.add_space_prefix for llama,
 * model, pre, tokens, scores, token_type, then gx_add_special). */
int gx_add_vocab(gx_ctx *c);
/* The pre-tokenizer name of the converter's chkhsh table for tok, or NULL
 * (PT_EUNSUPPORTED set, naming the hash) when the hash is not one of
 * them; *hash receives the hex digest. */
const char *gx_pre_name(const pt_tokenizer *tok, char hash[65], int *status);

/* gguf_special.c: SpecialVocab(dir, load_merges, n_vocab).add_to_gguf:
 * merges (when load_merges), the special token ids, add_*_token, the chat
 * template, the normalizer flags.  n_vocab < 0: no bound. */
int gx_add_special(gx_ctx *c, bool load_merges, int64_t n_vocab);

/* A string from a JSON object (NULL when absent or not a string). */
const char *gx_json_str(const cJSON *obj, const char *key);
/* The converter's rope parameters in config.json's object hp:
 * rope_parameters, else rope_scaling (its "full_attention" entry when it has
 * one), or NULL when neither is an object. */
const cJSON *gx_rope_params(const cJSON *hp);

/* gguf_vocab_copy.c: when the model was loaded from a GGUF file, its
 * tokenizer.* metadata copied into c->w as it is (*done set); else nothing. */
int gx_copy_gguf_vocab(gx_ctx *c, bool *done);

#endif
