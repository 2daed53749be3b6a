/* Internal helpers of the modelio layer, shared by its files (and by the
 * train layer's loaders). */
#ifndef PT_MODELIO_INTERNAL_H
#define PT_MODELIO_INTERNAL_H

#include "posttrain/model.h"
#include "posttrain/tokenizer.h"

#include <stdbool.h>

/* dir + "/" + name (pt_free); NULL with PT_ENOMEM set on failure. */
char *pt_path_join(const char *dir, const char *name);
/* Whether dir/name exists and is a regular file. */
bool pt_dir_has_file(const char *dir, const char *name);

/* "llama", "qwen2", ... and "LlamaForCausalLM", ... for a pt_arch. */
const char *pt_arch_model_type(int arch);
const char *pt_arch_class_name(int arch);

/* Forget what modelio remembers about a model (source directory, tokenizer)
 * and free it; call before pt_model_free when the model came from
 * pt_model_load_dir and will not be used again. */
void pt_modelio_forget(const pt_model *m);

/* Load dir's tokenizer (errors prefixed with the directory). */
int pt_modelio_tokenizer_load(pt_tokenizer **out, const char *dir);

#endif
