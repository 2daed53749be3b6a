/* What a model is: the one table of architectures and the one table of
 * tensors, read by config parsing and writing, allocation, loading, saving,
 * inspection, parameter counts, LoRA and PEFT (and the GGUF exporter).
 *
 * A tensor row is global (embedding, final norm, LM head) or per layer
 * ("model.layers.{i}." + its name), has a shape that is a function of the
 * configuration, and says when it exists (q/k/v biases, q/k norms, an untied
 * LM head) and which LoRA target bit adapts it.  Rows are listed in the
 * order of the Hugging Face files and of the model's parameter block. */
#ifndef PT_MODEL_SCHEMA_H
#define PT_MODEL_SCHEMA_H

#include "posttrain/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- architectures ------------------------------------------------------------- */

/* config.json fields an architecture writes (pt_arch_info.json_fields). */
enum {
    PT_ARCH_JSON_ATTENTION_BIAS = 1u << 0, /* "attention_bias": false */
    PT_ARCH_JSON_MLP_BIAS = 1u << 1,       /* "mlp_bias": false */
    PT_ARCH_JSON_PRETRAINING_TP = 1u << 2, /* "pretraining_tp": 1 */
    PT_ARCH_JSON_QWEN_WINDOW = 1u << 3     /* "max_window_layers", "sliding_window": null,
                                            * "use_sliding_window": false (read: must be false) */
};

typedef struct pt_arch_info {
    int arch;                    /* pt_arch */
    const char *model_type;      /* config.json model_type: "llama", ... */
    const char *class_name;      /* config.json architectures entry: "LlamaForCausalLM" */
    int default_max_positions;   /* transformers' defaults */
    int default_bos, default_eos; /* -1: None */
    bool qkv_bias;               /* biases on q, k and v (always; attention_bias is not read) */
    bool qk_norm;                /* per-head RMSNorm on q and k */
    int default_sliding_window;  /* > 0: the architecture has a sliding window, this one when
                                  * config.json has no field; 0: it has none */
    unsigned json_fields;        /* PT_ARCH_JSON_* */
} pt_arch_info;

/* The architecture's facts, or NULL for a value that is not a pt_arch. */
const pt_arch_info *pt__arch_info_get(int arch);
/* By config.json model_type, or by architectures entry; NULL when none. */
const pt_arch_info *pt__arch_info_by_model_type(const char *model_type);
const pt_arch_info *pt__arch_info_by_class(const char *class_name);
/* The model_types (or, with `with_qkv_bias` / `with_qk_norm`, those with
 * the feature) joined by ", " into buf: for messages. */
const char *pt__arch_list(char *buf, size_t n, int feature);
enum { PT_ARCH_LIST_ALL = 0, PT_ARCH_LIST_QKV_BIAS = 1, PT_ARCH_LIST_QK_NORM = 2,
       PT_ARCH_LIST_SLIDING = 3 };

/* ---- tensors --------------------------------------------------------------------- */

/* Stable ids of the tensor rows (never renumbered: exporters key on them). */
typedef enum pt_tensor_id {
    PT_T_EMBED = 0,      /* model.embed_tokens.weight          [V, H] */
    PT_T_LN1 = 1,        /* input_layernorm.weight              [H] */
    PT_T_WQ = 2,         /* self_attn.q_proj.weight             [Q, H] */
    PT_T_WK = 3,         /* self_attn.k_proj.weight             [KV, H] */
    PT_T_WV = 4,         /* self_attn.v_proj.weight             [KV, H] */
    PT_T_BQ = 5,         /* self_attn.q_proj.bias               [Q] */
    PT_T_BK = 6,         /* self_attn.k_proj.bias               [KV] */
    PT_T_BV = 7,         /* self_attn.v_proj.bias               [KV] */
    PT_T_QN = 8,         /* self_attn.q_norm.weight             [hd] */
    PT_T_KN = 9,         /* self_attn.k_norm.weight             [hd] */
    PT_T_WO = 10,        /* self_attn.o_proj.weight             [H, Q] */
    PT_T_LN2 = 11,       /* post_attention_layernorm.weight     [H] */
    PT_T_WG = 12,        /* mlp.gate_proj.weight                [I, H] */
    PT_T_WU = 13,        /* mlp.up_proj.weight                  [I, H] */
    PT_T_WD = 14,        /* mlp.down_proj.weight                [H, I] */
    PT_T_NORM = 15,      /* model.norm.weight                   [H] */
    PT_T_LM_HEAD = 16,   /* lm_head.weight                      [V, H] (untied only) */
    PT_T_COUNT = 17
} pt_tensor_id;

/* A dimension as a function of the configuration. */
typedef enum pt_dim {
    PT_DIM_NONE = 0,     /* 1-D tensors' second dimension */
    PT_DIM_VOCAB,        /* vocab_size */
    PT_DIM_HIDDEN,       /* hidden_size */
    PT_DIM_INTER,        /* intermediate_size */
    PT_DIM_Q,            /* num_attention_heads * head_dim */
    PT_DIM_KV,           /* num_key_value_heads * head_dim */
    PT_DIM_HEAD          /* head_dim */
} pt_dim;

/* When a row exists. */
typedef enum pt_tensor_when {
    PT_WHEN_ALWAYS = 0,
    PT_WHEN_QKV_BIAS,    /* cfg->attention_bias */
    PT_WHEN_QK_NORM,     /* cfg->qk_norm */
    PT_WHEN_UNTIED       /* !cfg->tie_word_embeddings (tied: the embedding serves) */
} pt_tensor_when;

typedef enum pt_tensor_init {
    PT_INIT_NORMAL = 0,  /* normal(0, initializer_range): matrices, embeddings */
    PT_INIT_ONES,        /* norms */
    PT_INIT_ZEROS        /* biases */
} pt_tensor_init;

typedef struct pt_tensor_row {
    pt_tensor_id id;
    bool per_layer;         /* "model.layers.{i}." + module + "." + param */
    const char *module;     /* Hugging Face module path: "self_attn.q_proj", "lm_head" */
    const char *param;      /* "weight" or "bias" */
    pt_dim rows, cols;      /* cols PT_DIM_NONE: 1-D */
    pt_tensor_when when;
    pt_tensor_init init;    /* also: anything but NORMAL has no weight decay */
    bool follows;           /* stored right after the previous row (fused q|k|v, gate|up,
                             * the q/k/v biases), without alignment padding */
    unsigned lora_target;   /* the PT_LORA_* bit adapting this weight, or 0 */
    pt_tensor_id tied_to;   /* the row that serves when it does not exist (PT_T_COUNT: none) */
} pt_tensor_row;

/* Longest tensor name the schema makes (with a layer index below 10^6). */
#define PT_TENSOR_NAME_MAX 96

/* The rows in file order (PT_T_COUNT of them; index = id). */
const pt_tensor_row *pt__tensor_rows(void);
const pt_tensor_row *pt__tensor_row_get(pt_tensor_id id);
/* llama.cpp's GGUF name of a row ("blk.<layer>.attn_q.weight",
 * "token_embd.weight"; layer ignored for global rows) into buf, or NULL when
 * it does not fit. */
const char *pt__tensor_gguf_name(char *buf, size_t n, const pt_tensor_row *row, int layer);
/* Whether the row exists for this configuration. */
bool pt__tensor_row_present(const pt_tensor_row *row, const pt_model_config *c);
/* A dimension's size for this configuration. */
int64_t pt__dim_size(pt_dim d, const pt_model_config *c);
/* The row whose weight the LoRA target of bit index k (0 .. 6, PT_LORA_*
 * order) adapts, or NULL. */
const pt_tensor_row *pt__tensor_row_lora(int k);

/* One tensor of a configured model. */
typedef struct pt_schema_tensor {
    const pt_tensor_row *row;
    int layer;                      /* -1 for a global tensor */
    char name[PT_TENSOR_NAME_MAX];
    int ndim;                       /* 1 or 2 */
    int64_t shape[2];               /* shape[1] is 1 when ndim == 1 */
    size_t numel;
} pt_schema_tensor;

/* Every tensor a configuration has, in file order (free *out with
 * pt_free).  PT_ENOMEM, or PT_ECONFIG when a size overflows. */
int pt__schema_tensors(pt_schema_tensor **out, size_t *n, const pt_model_config *c);
/* Number of parameters (tied embeddings counted once); PT_ECONFIG when
 * the count overflows 64 bits.  Does not validate the rest of c. */
int pt__schema_num_params(uint64_t *out, const pt_model_config *c);

#endif
