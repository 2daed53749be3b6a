/* libposttrain public API: LoRA adapters (low-rank adaptation).
 *
 * pt_model_add_lora() attaches to chosen projections of every decoder layer a
 * pair of matrices A [r, in] and B [out, r]; the projection then computes
 *     y = x W^T + b + scaling * (x A^T) B^T,    scaling = alpha / r.
 * The base model is frozen: its tensors become non-trainable, it has no
 * gradient memory, and an optimizer created afterwards (pt_optimizer_create)
 * covers the adapters only; checkpoints (pt_checkpoint_save) hold only them.
 *
 * Adapters appear in the model's tensor table (after the base tensors) under
 * "model.layers.{i}.self_attn.q_proj.lora_A.weight" and ".lora_B.weight";
 * the PEFT files use the same names prefixed with "base_model.model.".
 * Initialisation follows PEFT: A ~ U(-1/sqrt(in), 1/sqrt(in)) (torch's
 * kaiming_uniform_ with a = sqrt(5)), B = 0, so a fresh adapter does not
 * change the model's output.
 *
 * Adding adapters (or merging them) reallocates the tensor table: pointers
 * obtained from it before are invalid afterwards, and contexts and optimizers
 * must be created after pt_model_add_lora / pt_lora_load_peft. */
#ifndef POSTTRAIN_LORA_H
#define POSTTRAIN_LORA_H

#include <stdbool.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Projections that can carry an adapter (bitmask for pt_lora_options.targets). */
enum {
    PT_LORA_Q = 1u << 0,     /* self_attn.q_proj */
    PT_LORA_K = 1u << 1,     /* self_attn.k_proj */
    PT_LORA_V = 1u << 2,     /* self_attn.v_proj */
    PT_LORA_O = 1u << 3,     /* self_attn.o_proj */
    PT_LORA_GATE = 1u << 4,  /* mlp.gate_proj */
    PT_LORA_UP = 1u << 5,    /* mlp.up_proj */
    PT_LORA_DOWN = 1u << 6,  /* mlp.down_proj */
    PT_LORA_ALL_ATTN = 0x0fu,
    PT_LORA_ALL = 0x7fu
};

typedef struct pt_lora_options {
    size_t size;        /* sizeof(pt_lora_options) */
    int rank;           /* r, 1 .. 65536; default 8 (PEFT's default) */
    double alpha;       /* lora_alpha, > 0; default 8 (PEFT's default); scaling = alpha / r */
    unsigned targets;   /* PT_LORA_* bits; default PT_LORA_Q | PT_LORA_V (PEFT's Llama default) */
    double dropout;     /* must be 0 (LoRA dropout is not implemented) */
    uint64_t seed;      /* seed of lora_A's initialisation; default 0 */
} pt_lora_options;

PT_API int pt_lora_options_init(pt_lora_options *o);

/* Attach adapters to every layer's target projections and freeze the base
 * (any base gradients are released).  PT_ESTATE if the model already has
 * adapters. */
PT_API int pt_model_add_lora(pt_model *model, const pt_lora_options *opts);
/* True when the model carries adapters (false for NULL). */
PT_API bool pt_model_has_lora(const pt_model *model);
/* Switch the adapters off (false) or on again (true): while off, forwards and
 * generation compute the frozen base model alone, e.g. the reference policy
 * of GRPO's KL term, with no second copy of the weights; a backward is then
 * refused with PT_ESTATE (nothing trainable would get a gradient).  The
 * switch is the model's: it affects every context and generator of it, so
 * do not flip it while another thread runs one.  PT_ESTATE without adapters. */
PT_API int pt_model_set_lora_enabled(pt_model *model, bool enabled);
/* True when the model has adapters and they are switched on. */
PT_API bool pt_model_lora_enabled(const pt_model *model);
/* Copy the model's adapter settings into *out, filled with
 * pt_lora_options_init() first (PT_ESTATE if it has none). */
PT_API int pt_model_get_lora(pt_lora_options *out, const pt_model *model);
/* Fold the adapters into the base, W += scaling * B A, then remove them and
 * make the base trainable again (for export with pt_model_save_dir). */
PT_API int pt_model_merge_lora(pt_model *model);
/* Remove the adapters without merging (the base is unchanged and trainable). */
PT_API int pt_model_remove_lora(pt_model *model);

/* Write a PEFT adapter directory (created if missing): adapter_config.json and
 * adapter_model.safetensors (F32).  base_model_name_or_path may be NULL (then
 * written as null). */
PT_API int pt_lora_save_peft(const pt_model *model, const char *dir,
                             const char *base_model_name_or_path);
/* Read a PEFT LoRA adapter directory written by PEFT or pt_lora_save_peft into
 * a model without adapters: adds adapters as its adapter_config.json says and
 * loads every tensor (F32, F16 or BF16).  Strict: a missing, unexpected or
 * mis-shaped tensor, or a setting this library does not implement (rslora,
 * DoRA, biases, fan_in_fan_out, per-layer patterns, modules_to_save), is an
 * error naming the tensor or field; on failure the model is left without
 * adapters. */
PT_API int pt_lora_load_peft(pt_model *model, const char *dir);

#ifdef __cplusplus
}
#endif

#endif
