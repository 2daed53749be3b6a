/* libposttrain public API: the Llama-family transformer.
 *
 * A pt_model holds a configuration and its parameters (one FP32 block, with a
 * gradient block allocated on first backward).  It can be built from a
 * configuration alone (seeded random initialisation) or loaded from a Hugging
 * Face directory (posttrain/modelio.h). */
#ifndef POSTTRAIN_MODEL_H
#define POSTTRAIN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pt_arch {
    PT_ARCH_LLAMA = 0,   /* Llama, Llama-3.x, SmolLM2, TinyLlama */
    PT_ARCH_QWEN2 = 1,   /* bias on the q, k and v projections */
    PT_ARCH_QWEN3 = 2,   /* per-head RMSNorm on q and k */
    PT_ARCH_MISTRAL = 3  /* Llama layout with an optional sliding window */
} pt_arch;
/* The lower-case name of a pt_arch value ("llama", ...), or NULL for
 * a value that is not one; and the value of a name (PT_EINVAL listing the
 * accepted names otherwise). */
PT_API const char *pt_arch_name(int value);
PT_API int pt_arch_from_name(int *out, const char *name);
/* The Hugging Face class of an architecture, config.json's "architectures"
 * entry ("LlamaForCausalLM", ...), or NULL for a value that is not one. */
PT_API const char *pt_arch_class_name(int value);


typedef enum pt_rope_type {
    PT_ROPE_DEFAULT = 0,
    PT_ROPE_LLAMA3 = 1,  /* rope_scaling {"rope_type": "llama3", ...} */
    PT_ROPE_LINEAR = 2   /* rope_scaling {"rope_type": "linear", "factor": f} */
} pt_rope_type;
/* The lower-case name of a pt_rope_type value ("default", ...), or NULL for
 * a value that is not one; and the value of a name (PT_EINVAL listing the
 * accepted names otherwise). */
PT_API const char *pt_rope_type_name(int value);
PT_API int pt_rope_type_from_name(int *out, const char *name);


/* The fields of a Hugging Face config.json that decide the computation.
 * Fill with pt_model_config_init() first (an older header's smaller `size` is
 * accepted: the fields it lacks take their defaults; docs/api.md). */
typedef struct pt_model_config {
    size_t size;
    int arch;                      /* pt_arch */
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;       /* divides num_attention_heads (GQA) */
    int head_dim;                  /* may differ from hidden/heads (Qwen3) */
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    int rope_type;                 /* pt_rope_type */
    double rope_factor;            /* llama3 / linear scaling factor */
    double rope_low_freq_factor;   /* llama3 */
    double rope_high_freq_factor;  /* llama3 */
    int rope_original_max_position_embeddings; /* llama3 */
    bool tie_word_embeddings;
    bool attention_bias;           /* bias on q, k, v (qwen2; llama "attention_bias") */
    bool qk_norm;                  /* per-head RMSNorm on q and k (qwen3) */
    int sliding_window;            /* 0: none (mistral may set one) */
    double initializer_range;      /* std of the normal init */
    int bos_token_id;              /* -1 if absent */
    int eos_token_id;              /* -1 if absent (the first one when a list) */
    int pad_token_id;              /* -1 if absent */
} pt_model_config;

/* Defaults: a llama architecture with HF's default rope_theta 10000,
 * rms_norm_eps 1e-6, initializer_range 0.02, no token ids, all sizes 0. */
PT_API int pt_model_config_init(pt_model_config *cfg);
/* Parse a Hugging Face config.json held in memory (len bytes). */
PT_API int pt_model_config_from_json(pt_model_config *cfg, const char *json, size_t len);
/* Check a configuration for consistency (positive sizes, GQA divisibility, ...). */
PT_API int pt_model_config_validate(const pt_model_config *cfg);

typedef struct pt_model pt_model;

/* A model with parameters initialised from `seed` (normal(0, initializer_range)
 * for matrices and embeddings, ones for norms, zeros for biases). */
PT_API int pt_model_create(pt_model **out, const pt_model_config *cfg, uint64_t seed);
PT_API void pt_model_free(pt_model *model);
/* A new model with src's configuration and a copy of its weights: the
 * copy starts with BF16 off, no gradients and no LoRA (e.g. GRPO's frozen
 * reference, then pt_model_set_bf16).  PT_EUNSUPPORTED for a quantized or
 * LoRA-adapted src or one whose base is stored in BF16 only (frozen). */
PT_API int pt_model_clone(pt_model **out, const pt_model *src);
/* Copy the model's configuration into *out, filled with pt_model_config_init()
 * first (only its `size` bytes are written). */
PT_API int pt_model_get_config(pt_model_config *out, const pt_model *model);
/* Number of parameters (tied embeddings counted once); 0 for NULL. */
PT_API uint64_t pt_model_param_count(const pt_model *model);
/* Number of parameters the optimizer updates: every base parameter, or with
 * LoRA adapters only the adapters' (the base is frozen); 0 for NULL. */
PT_API uint64_t pt_model_trainable_param_count(const pt_model *model);
/* The same as status and out-parameter (getters that cannot fail return
 * the value: docs/api.md, "Names"). */
PT_API PT_DEPRECATED("pt_model_param_count")
int pt_model_num_params(uint64_t *out, const pt_model *model);
PT_API PT_DEPRECATED("pt_model_trainable_param_count")
int pt_model_num_trainable_params(uint64_t *out, const pt_model *model);

/* ---- the parameter tensors -----------------------------------------------------
 *
 * The model's tensors by index: the base tensors first, in the order of the
 * Hugging Face files, under their Hugging Face names, then any LoRA adapters
 * (PEFT's names without the "base_model.model." prefix).  `data` and `grad`
 * are live, row-major FP32 views into the model: writing `data` changes the
 * weights (do not do it while a forward or backward runs), `grad` is NULL
 * until gradients exist.  The views and names stay valid until the set of
 * tensors changes (LoRA adapters added, merged or removed) or the model is
 * freed. */
typedef struct pt_tensor_info {
    size_t size;            /* set by pt_tensor_info_init (the caller's header) */
    const char *name;
    float *data;            /* numel floats */
    float *grad;            /* numel floats, or NULL before gradients exist */
    int ndim;               /* 1 or 2 */
    int64_t shape[2];       /* shape[1] is 1 when ndim == 1 */
    size_t numel;
    bool trainable;         /* false for a frozen base (LoRA) */
    bool adapter;           /* a LoRA adapter (not in the Hugging Face model files) */
    bool no_decay;          /* norms and biases: no weight decay by default */
} pt_tensor_info;

/* Fill with pt_tensor_info_init() before passing it: the library writes only
 * as many bytes as its size says. */
PT_API int pt_tensor_info_init(pt_tensor_info *info);
/* Number of tensors (base plus adapters); 0 for NULL. */
PT_API size_t pt_model_tensor_count(const pt_model *model);
PT_API PT_DEPRECATED("pt_model_tensor_count")
int pt_model_num_tensors(size_t *out, const pt_model *model);
/* Tensor `index` (0 .. count-1); PT_ERANGE beyond. */
PT_API int pt_model_tensor_info(pt_tensor_info *out, const pt_model *model, size_t index);
/* The tensor called `name`; PT_ENOTFOUND (naming it) if there is none. */
PT_API int pt_model_find_tensor_info(pt_tensor_info *out, const pt_model *model, const char *name);

/* ---- BF16 ----------------------------------------------------------------------
 *
 * pt_model_set_bf16(model, mode):
 * - PT_BF16_OFF: FP32 everywhere (the default).
 * - PT_BF16_ON: every matrix weight (embeddings, projections, LM head) gets
 *   a BF16 copy.  A frozen base (LoRA adapters attached) is then stored
 *   only in BF16: its FP32 memory is returned to the OS and its tensor views
 *   show data == NULL.  Trainable weights stay FP32 masters (the optimizer
 *   and checkpoints see FP32) and, where the CPU has BF16 arithmetic
 *   (pt_cpu_path() "avx512bf16"), the products of the forward and backward
 *   use BF16 copies with FP32 accumulation (mixed precision, as PyTorch's
 *   autocast); norms, softmax, losses and their statistics stay FP32.
 *   Elsewhere BF16 weights are widened to FP32 inside the products.
 * - PT_BF16_FROZEN: as ON, and the whole base is frozen (not trainable) and
 *   stored in BF16: for a generator's or GRPO's reference model.  LoRA
 *   adapters may still be added and trained.
 * Adapters are always FP32.  Saving a model or exporting it writes FP32 (a
 * BF16-stored weight widened exactly), so a run resumes on any CPU.  A host
 * that writes tensor data directly while BF16 is on calls
 * pt_model_weights_changed afterwards so the BF16 copies follow.  Turning
 * BF16 off widens a stored base back (its values keep their BF16
 * rounding).  Changes the model's structure generation when it freezes or
 * unfreezes the base (optimizers made before must be made again). */
typedef enum pt_bf16_mode {
    PT_BF16_OFF = 0,
    PT_BF16_ON = 1,
    PT_BF16_FROZEN = 2
} pt_bf16_mode;
PT_API int pt_model_set_bf16(pt_model *model, int mode);
/* The mode (PT_BF16_OFF for NULL). */
PT_API int pt_model_get_bf16(const pt_model *model);
/* The FP32 weights were written by the host: refresh the BF16 copies
 * before the next product.  No-op for NULL. */
PT_API void pt_model_weights_changed(pt_model *model);
/* Copy the FP32 values of the tensor called name into dst (n floats, the
 * tensor's numel): its data, or a base stored in BF16 widened exactly.
 * PT_ENOTFOUND for no such tensor, PT_ESHAPE when n is not its numel. */
PT_API int pt_model_copy_tensor(float *dst, size_t n, const pt_model *model, const char *name);

/* ---- forward, backward, loss ------------------------------------------------
 *
 * A pt_context holds the activations of one forward pass (and what its
 * backward needs) for up to max_batch x max_seq tokens, allocated once.  The
 * model itself is only read by a forward, so several contexts may run
 * forwards on one model from different threads; a backward accumulates into
 * the model's single gradient block, so backwards on one model must not run
 * concurrently. */
typedef struct pt_context pt_context;

/* A context for `model`.  max_seq beyond the model's
 * max_position_embeddings is PT_ERANGE (naming both numbers) unless the
 * caller opted in with pt_model_set_allow_long_context.  A context follows
 * the model's tensors (adding, merging or removing LoRA adapters needs no
 * new context), but a pt_model_backward across such a change, after the
 * forward it differentiates, is PT_ESTATE. */
PT_API int pt_context_create(pt_context **out, pt_model *model, int max_batch, int max_seq);
PT_API void pt_context_free(pt_context *ctx);
/* Threads for every call on this context (forward, backward, loss, and the
 * SFT/GRPO steps and evaluation that run on it, optimizer update included):
 * n in [1, 1024], or 0 to follow the process setting (pt_set_num_threads; the
 * default).  Attention uses at most max(process setting when the context was
 * created, online CPUs).  Results are bit-identical for the same count.
 * Give each host thread that trains its own context a share of the cores
 * (docs/api.md, "Threads").  pt_context_get_num_threads: the count its calls
 * use now (the process setting when 0 was set). */
PT_API int pt_context_set_num_threads(pt_context *ctx, int n);
PT_API int pt_context_get_num_threads(const pt_context *ctx);

/* Gradient checkpointing (Hugging Face's gradient_checkpointing=True): off
 * by default.  On, a forward keeps of each layer only its input (hidden_size
 * floats a token) and the backward recomputes the layer's other activations
 * from it just before differentiating it, so activation memory falls from
 * about 23 KB to 2.3 KB a token and layer (SmolLM2-135M) for one more
 * forward's work, and the LM head's logits go in chunks of 64 rows (at
 * most 12 MiB at vocabulary 49152, instead of 64 MiB).  Losses,
 * log-probabilities and gradients are those without it bit for bit, except
 * the LM head's (embedding's, when tied) weight gradient, whose sum over the
 * rows follows the chunks (rounding: relative 1e-7).
 * The context's memory is reallocated (PT_ENOMEM keeps the old one and the
 * old setting); a forward held for a backward is dropped. */
PT_API int pt_context_set_gradient_checkpointing(pt_context *ctx, bool on);
PT_API bool pt_context_get_gradient_checkpointing(const pt_context *ctx);

/* BF16 activations (as PyTorch autocast's saved tensors): on by default for
 * a context created for a model whose base is frozen in BF16
 * (pt_model_get_bf16 PT_BF16_FROZEN, or PT_BF16_ON with LoRA adapters),
 * off otherwise, full mixed-precision training included (FP32 activations
 * are faster there and its memory is mostly weights and AdamW state); the
 * default is taken at creation (a later pt_model_set_bf16 or
 * pt_model_add_lora does not change it).  On, the layers share one FP32 working set for
 * their big activations, and each layer but the last keeps a BF16 copy of
 * them (its input, the residual after attention, q|k|v, gate|up, and for
 * q/k-norm models q|k before the norm) for its backward, which recomputes
 * the attention output from the rounded q|k|v; the norms' rstd stay FP32.
 * Activation memory falls to about half (docs/bf16.md, "BF16
 * activations").  The forward reads only FP32: losses, log-probabilities,
 * logits and entropies are those without it bit for bit; the gradients are
 * those of the rounded activations (relative L2 3e-3 to 1.1e-2 from FP32's
 * in tests/model/test_stash.c).  No effect while
 * gradient checkpointing is on (it keeps less); the getter returns the
 * setting.  The context's memory is reallocated (PT_ENOMEM keeps the old
 * one and the old setting); a forward held for a backward is dropped. */
PT_API int pt_context_set_bf16_activations(pt_context *ctx, bool on);
PT_API bool pt_context_get_bf16_activations(const pt_context *ctx);

/* Opt in to contexts and generators longer than the model's
 * max_position_embeddings (off by default): for a model whose RoPE is scaled
 * (or will be fine-tuned) to positions it was not trained for.  Handles
 * already created are not affected. */
PT_API int pt_model_set_allow_long_context(pt_model *model, bool allow);
PT_API bool pt_model_allow_long_context(const pt_model *model);

/* One batch of B rows of T tokens.  Fill with pt_batch_init() first. */
typedef struct pt_batch {
    size_t size;                /* sizeof(pt_batch) */
    int batch;                  /* B, 1 .. the context's max_batch */
    int seq;                    /* T, 1 .. the context's max_seq */
    const int32_t *input_ids;   /* B*T token ids in [0, vocab_size) */
    const int32_t *targets;     /* B*T target ids, or -1 for "no target" (NULL: all -1) */
    const int32_t *positions;   /* optional B*T rotary positions >= 0 (NULL: 0..T-1 per row) */
    const int32_t *segments;    /* optional B*T segment ids: attention only between
                                 * tokens of one row with equal segment id (packing) */
    /* Logits are divided by it before the log-softmax: the log-probabilities,
     * entropies, loss and backward are those of softmax(logits / temperature)
     * (GRPO's training at the sampling temperature; docs/model.md).  Finite
     * and >= 1e-6; default 1 (bit for bit the plain model).  Returned logits
     * stay raw. */
    float temperature;
} pt_batch;

PT_API int pt_batch_init(pt_batch *b);

/* Forward pass.  logprobs (B*T, may be NULL) receives log p(target) for each
 * token (p = softmax(logits / b->temperature)), 0 where the target is -1.
 * logits (B*T*vocab, may be NULL) receives the raw logits (not divided by
 * the temperature); when NULL they are never held in full (the LM head runs in
 * chunks of rows).  The activations stay in ctx for one pt_model_backward. */
PT_API int pt_model_forward(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits);

/* pt_model_forward that also writes entropy (B*T): the entropy in nats of
 * the model's next-token distribution at every position, -sum_v p_v log p_v,
 * computed from the same chunks of logits (GRPO's entropy metric).  Same
 * logprobs, and the same backward afterwards, as pt_model_forward. */
PT_API int pt_model_forward_entropy(pt_context *ctx, const pt_batch *b, float *logprobs,
                                    float *entropy);

/* Backward pass of the last forward on ctx, starting from dlogprobs (B*T:
 * dLoss/dlogprob for each token; entries without a target are ignored).
 * ACCUMULATES into the model's gradients (allocated, zeroed, on first use).
 * One backward per forward: a second call returns PT_ESTATE. */
PT_API int pt_model_backward(pt_context *ctx, const float *dlogprobs);

/* Set the model's gradients to zero (no-op before they exist). */
PT_API int pt_model_zero_grad(pt_model *model);
/* Allocate the gradient block now (zeroed) instead of on the first backward. */
PT_API int pt_model_alloc_grads(pt_model *model);

/* Mean cross-entropy -sum(w*lp)/sum(w) over the tokens with a target, where
 * w is `weights` (B*T, >= 0; NULL: 1 for every token with a target).  With
 * backward = true it also runs the backward with dlogprobs = -w/sum(w) (fused
 * with the LM head, so the logits are computed once).  When sum(w) is 0 the
 * loss is 0 and the gradients are unchanged. */
PT_API int pt_model_loss(pt_context *ctx, const pt_batch *b, const float *weights, bool backward,
                         float *loss);

#ifdef __cplusplus
}
#endif

#endif
