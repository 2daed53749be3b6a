/* Internal LoRA state of a pt_model (model layer; read by modelio/peft.c). */
#ifndef PT_MODEL_LORA_H
#define PT_MODEL_LORA_H

#include "model/transformer.h"
#include "posttrain/lora.h"

#define PT_LORA_NMOD 7

/* One adapter: A [r, in], B [out, r] and their gradients. */
typedef struct pt_lora_pair {
    float *a, *b, *da, *db;
    size_t in, out;
} pt_lora_pair;

struct pt_lora {
    pt_lora_options opts;
    float scale;            /* alpha / r */
    bool disabled;          /* pt_model_set_lora_enabled(false): forwards skip the adapters */
    size_t nbase;           /* base tensors at the start of the tensor table */
    size_t nadapters;       /* adapters (two table entries each) */
    size_t num_floats;      /* floats in each of params / grads */
    float *params, *grads;  /* 64-byte aligned blocks */
    pt_lora_pair *mods;     /* [num_hidden_layers * PT_LORA_NMOD]; a == NULL: no adapter */
    char *names;            /* storage for the adapter tensor names */
    char *source_dir;       /* the PEFT directory pt_lora_load_peft read them from, or NULL */
};

/* PEFT / Hugging Face module name of projection k (0 .. 6): "self_attn.q_proj", ... */
const char *pt__lora_module_name(int k);
/* Input and output features of projection k. */
void pt__lora_module_dims(const pt_model *m, int k, size_t *in, size_t *out);

/* Attach the adapters of the projections in `mask` of layer `layer` to a
 * linear whose output is those projections side by side in PT_LORA_* bit
 * order (one bit for a plain projection, Q|K|V for a fused one). */
void pt__lora_attach(pt_linear *lin, const pt_model *m, int layer, unsigned mask, float *scratch);
/* Make *buf (capacity *cap floats, 64-byte aligned) hold the adapter scratch
 * (4 * rows * r floats) for `rows` rows; a no-op without adapters. */
int pt__lora_scratch(float **buf, size_t *cap, const pt_model *m, size_t rows);
/* True when the model has adapters and they are switched off. */
bool pt__lora_disabled(const pt_model *m);
/* True when the model has adapters switched on (its forward uses them). */
bool pt__lora_active(const pt_model *m);
/* PT_ESTATE (naming `who`) when a backward would reach nothing trainable
 * because the adapters are switched off; PT_OK otherwise. */
int pt__lora_check_backward(const pt_model *m, const char *who);
/* Zero the adapters' gradients (no-op without adapters). */
void pt__lora_zero_grads(pt_model *m);
/* Free the adapters' memory (for pt_model_free; the table is not touched). */
void pt__lora_release(pt_model *m);

#endif
