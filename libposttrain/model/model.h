/* Internal view of a pt_model, shared with the modelio and train layers.
 *
 * CONTRACT (relied on by modelio/ and train/; extend, do not change):
 * the parameters are exposed as a table of named tensors in Hugging Face
 * naming and layout ("model.layers.3.self_attn.q_proj.weight" is
 * [out_features, in_features], row-major FP32).  With tied embeddings there is
 * no "lm_head.weight" entry. */
#ifndef PT_MODEL_MODEL_H
#define PT_MODEL_MODEL_H

#include "posttrain/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pt_tensor_ref {
    const char *name;   /* Hugging Face tensor name */
    float *data;        /* values, numel floats inside the model's parameter block */
    float *grad;        /* matching gradient, or NULL before gradients exist */
    int ndim;           /* 1 or 2 */
    int64_t shape[2];   /* shape[1] is 1 when ndim == 1 */
    size_t numel;
    bool no_decay;      /* norms and biases: no weight decay by default */
    bool trainable;     /* false for a frozen base (LoRA) */
    bool adapter;       /* a LoRA adapter (after all base tensors; not in the HF model files) */
    int id;             /* base tensors: the schema row (pt_tensor_id, model/schema.h); -1 adapters */
    int layer;          /* its layer, or -1 for a global tensor (and adapters: their layer) */
} pt_tensor_ref;

const pt_tensor_ref *pt__model_tensor(const pt_model *m, size_t i);
/* Number of base (non-adapter) tensors: they are entries 0 .. count-1. */
size_t pt__model_base_tensor_count(const pt_model *m);
/* NULL (without setting an error) when no tensor has that name. */
const pt_tensor_ref *pt__model_find_tensor(const pt_model *m, const char *name);

/* Tuning and tests: use at most chunk_rows rows per LM-head chunk and
 * tile_q x tile_k attention tiles on this context (0 keeps the default; values
 * can only shrink what the context was sized for, else PT_EINVAL). */
int pt__context_set_tiling(pt_context *ctx, size_t chunk_rows, int tile_q, int tile_k);

/* One opaque record a higher layer (modelio: source directory, tokenizer)
 * keeps with a model; free_fn runs in pt_model_free or when replaced. */
void pt__model_set_attachment(pt_model *m, void *data, void (*free_fn)(void *));
void *pt__model_attachment(const pt_model *m);

/* The model's structure generation.  Everything that reallocates or
 * reshapes the tensor table (LoRA add, merge, remove) calls
 * pt__model_bump_generation with what it did ("LoRA merged"); optimizers and
 * generators remember the generation they were made for and refuse to work
 * once it changed; a context remembers its last forward's (a backward
 * across a change is refused). */
uint64_t pt__model_generation(const pt_model *m);
void pt__model_bump_generation(pt_model *m, const char *what);
/* PT_ESTATE when m's generation is no longer gen: "<who>: the model's
 * tensors changed (<what>) since this <handle> was created: create a new
 * <handle>"; PT_OK otherwise. */
int pt__model_check_generation(const pt_model *m, uint64_t gen, const char *who, const char *handle);

/* The weights' version: bumped by every change of the FP32 weights
 * (pt_model_weights_changed). */
uint64_t pt__model_weights_version(const pt_model *m);
/* Mixed precision's BF16 copies kept current by the optimizer
 * (model/precision.c): true when products use BF16 copies of the trainable
 * base matrices and those copies are current, so an update that writes
 * each matrix's copy (pt__model_bf16_copy: the copy of tensor i, NULL for
 * tensors without one) as it writes the FP32 master leaves them current;
 * after such an update and pt_model_weights_changed,
 * pt__model_bf16_followed records that. */
bool pt__model_bf16_following(const pt_model *m);
/* Loading straight into BF16 (pt_model_load_options.bf16 = PT_BF16_FROZEN):
 * begin puts an uninitialised model in PT_BF16_FROZEN with its base stored
 * in BF16 (PT_ENOMEM for the BF16 block); then, as the loader fills base
 * tensor i in FP32, stream_tensor moves it into BF16 and gives its FP32
 * pages back (a no-op for 1-D tensors, or when begin was not called). */
int pt__model_bf16_stream_begin(pt_model *m);
void pt__model_bf16_stream_tensor(pt_model *m, size_t i);
uint16_t *pt__model_bf16_copy(pt_model *m, size_t i);
void pt__model_bf16_followed(pt_model *m);

/* The public forward, backward and loss without taking the context
 * (core/busy.h): for library functions that already hold it.  Messages name
 * the public function (pt_model_forward, ...); the pointers are not NULL. */
int pt__ctx_forward(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits);
int pt__ctx_forward_entropy(pt_context *ctx, const pt_batch *b, float *logprobs, float *entropy);
int pt__ctx_backward(pt_context *ctx, const float *dlogprobs);
/* pt__ctx_backward plus an entropy term: dentropy[B*T] is dL/dH of each
 * position's entropy (at the forward's temperature); NULL: none. */
int pt__ctx_backward_entropy(pt_context *ctx, const float *dlogprobs, const float *dentropy);
int pt__ctx_loss(pt_context *ctx, const pt_batch *b, const float *weights, bool backward, float *loss);

/* Take the context for the public function fn (PT_EBUSY when another call
 * has it: core/busy.h); give it back on every path. */
int pt__context_take(pt_context *ctx, const char *fn);
void pt__context_give(pt_context *ctx);

/* A dependent (context, optimizer, generator) keeps its model alive: retain
 * when created, release when freed; pt_model_free drops the host's
 * reference and the memory goes with the last one.  Retain returns m. */
pt_model *pt__model_retain(pt_model *m);
void pt__model_release(pt_model *m);

/* The model a context was created for. */
pt_model *pt__context_model(const pt_context *ctx);
/* The bytes of the context's activation block (the layout's, for tests). */
size_t pt__context_block_bytes(const pt_context *ctx);
/* What the last generation bump did ("LoRA merged"), or "nothing". */
const char *pt__model_last_change(const pt_model *m);
/* PT_ESTATE (naming `who`) when ctx's model changed structure since ctx's
 * last forward (a context itself follows the model: its adapter scratch
 * grows on demand, so only a backward across a change is refused). */
int pt__context_check_current(const pt_context *ctx, const char *who);

/* pt_context_create without the max_position_embeddings check, for rows
 * packed side by side whose positions restart in each segment (each
 * segment within the model's positions: the caller's duty). */
int pt__context_create_packed(pt_context **out, pt_model *model, int max_batch, int max_seq);

/* PT_ERANGE (naming `who`) when seq exceeds the model's
 * max_position_embeddings and the caller did not opt in with
 * pt_model_set_allow_long_context. */
int pt__model_check_positions(const pt_model *m, int seq, const char *who);

/* A tensor's values as FP32: t->data, or (a frozen BF16 base tensor, whose
 * data is NULL) a widened copy in *tmp, which the caller frees with
 * pt_free; NULL with the error set when that allocation fails. */
const float *pt__tensor_values(const pt_model *m, const pt_tensor_ref *t, float **tmp);

/* Like pt_model_create, but every parameter starts at zero (no random init):
 * for loaders that overwrite every tensor anyway. */
int pt__model_create_uninit(pt_model **out, const pt_model_config *cfg);

/* ---- quantized base (model/qbase.c) ----------------------------------------
 * A loader keeps 2-D base tensors quantized: reserve the bytes of all of
 * them, place each (in table order; the loader copies its blocks to the
 * returned address), then finish: those tensors' data becomes NULL (FP32
 * pages released) and the whole base is frozen (LoRA only). */
int pt__model_quant_reserve(pt_model *m, size_t bytes);
uint8_t *pt__model_quant_place(pt_model *m, size_t i, int type, size_t nbytes);
void pt__model_quant_finish(pt_model *m);
/* Quantize the 2-D base tensors whose rows are whole blocks to type (Q8_0
 * or Q4_0, as llama-quantize --pure), freezing the base; PT_ESTATE with
 * adapters, gradients or BF16 weights; the model unchanged on error. */
int pt__model_quantize(pt_model *m, int type);
/* Whether any base tensor is stored quantized. */
bool pt__model_is_quantized(const pt_model *m);
/* Base tensor i's ggml type when stored quantized, else 0. */
int pt__model_tensor_qtype(const pt_model *m, size_t i);
/* PT_EUNSUPPORTED naming `what` ("pt_model_save_dir") when the base is
 * quantized: "<what>: the base model is quantized (<type> ...): <advice>". */
#define PT_QUANT_FULL_FT_ADVICE                                                          \
    "full fine-tuning needs FP32 weights: train LoRA adapters on it, or dequantize it first " \
    "with `posttrain export --model Q.gguf --out F.gguf --type f32`"
int pt__model_check_not_quantized(const pt_model *m, const char *what, const char *advice);

#endif
