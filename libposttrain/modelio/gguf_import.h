/* Loading a GGUF model file (posttrain/gguf.h, "Import"; docs/gguf.md):
 * the configuration from the metadata (gguf_config.c), llama3 rope scaling
 * from rope_freqs.weight (gguf_rope.c), the tensors checked against the
 * schema and read to F32 (gguf_import.c), and the description for
 * pt_model_dir_inspect (gguf_import.c).  Internal to modelio. */
#ifndef PT_MODELIO_GGUF_IMPORT_H
#define PT_MODELIO_GGUF_IMPORT_H

#include "io/gguf.h"
#include "posttrain/modelio.h"

#include <stdbool.h>

/* Whether path is a regular file that starts with the GGUF magic. */
bool pt__gguf_is_file(const char *path);

/* The configuration the file's metadata describes (cfg initialised by
 * pt_model_config_init), validated.  PT_EFORMAT naming the key for a
 * missing or malformed required key or sizes that disagree,
 * PT_EUNSUPPORTED for an architecture or rope scaling the library does not
 * implement. */
int pt__gguf_model_config(pt_model_config *cfg, const pt_gguf *g, const char *path);

/* llama3 rope scaling recovered from the per-frequency factors of
 * rope_freqs.weight (cfg holds head_dim and rope_theta): sets rope_type,
 * rope_factor, the low/high frequency factors and the original context, so
 * that the library's llama3 formula gives the same factors.  PT_EUNSUPPORTED
 * when no llama3 parameters give them. */
int pt__gguf_rope_from_freqs(pt_model_config *cfg, const pt_gguf *g, const pt_gguf_tensor *t,
                            const char *path);

/* The first problem loading g's tensors for cfg would meet, from the
 * directory alone: a missing tensor (PT_ENOTFOUND), a wrong shape
 * (PT_ESHAPE), a quantised or non-float type (PT_EUNSUPPORTED), an
 * unexpected tensor (PT_EFORMAT), each naming the tensor. */
int pt__gguf_weights_check(const pt_gguf *g, const pt_model_config *cfg, const char *path);

/* pt_model_load_dir and pt_model_dir_inspect of a GGUF file. */
int pt__gguf_load_model(pt_model **out, const char *path, const pt_model_load_options *o);
int pt__gguf_inspect(pt_model_dir_info *info, const char *path);

#endif
