/* Internal helpers of the modelio layer, shared by its files (and by the
 * train layer's loaders). */
#ifndef PT_MODELIO_INTERNAL_H
#define PT_MODELIO_INTERNAL_H

#include "io/fileio.h"
#include "posttrain/model.h"
#include "posttrain/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* "llama", "qwen2", ... and "LlamaForCausalLM", ... for a pt_arch. */
const char *pt_arch_model_type(int arch);
const char *pt_arch_class_name(int arch);

/* The tensors a config needs (Hugging Face names and shapes, in the model
 * layer's order); out must hold 3 + 14 * num_hidden_layers entries.  Returns
 * the count.  Used to check weights against a config without building the
 * model (pt_model_dir_inspect). */
typedef struct exp_tensor {
    char name[80];
    int ndim;
    int64_t shape[2];
} exp_tensor;
size_t pt_modelio_expected_tensors(exp_tensor *out, const pt_model_config *c);

/* Load dir's tokenizer (errors prefixed with the directory). */
int pt_modelio_tokenizer_load(pt_tokenizer **out, const char *dir);

#endif
