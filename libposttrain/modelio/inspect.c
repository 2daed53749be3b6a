/* What a model directory holds, from config.json and the safetensors
 * headers alone (pt_model_dir_inspect), and the parameters a configuration
 * implies. */
#include "core/core.h"
#include "io/fileio.h"
#include "model/schema.h"
#include "modelio/gguf_import.h"
#include "modelio/modelio_internal.h"
#include "posttrain/modelio.h"

#include <stdio.h>
#include <string.h>

int pt_model_config_num_params(uint64_t *out, const pt_model_config *cfg)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(cfg);
    pt_model_config c;
    int st = PT_STRUCT_READ(c, cfg, pt_model_config_init);
    if (st == PT_OK)
        st = pt_model_config_validate(&c);
    return st ? st : pt__schema_num_params(out, &c);
}

int pt_model_dir_info_init(pt_model_dir_info *info)
{
    PT_STRUCT_INIT_ZERO(info);
    pt_model_config_init(&info->config);
    return PT_OK;
}

/* The problem of the last failed call into info (and no error left set). */
static void set_problem(pt_model_dir_info *info, int st)
{
    info->weights_status = st;
    snprintf(info->weights_problem, sizeof info->weights_problem, "%s", pt_last_error());
    pt_clear_error();
}

/* Count one tensor of `nbytes` bytes of type `dtype` (NULL: "?") in info's
 * per-dtype table, tensor count and weight bytes. */
void pt__model_info_add_tensor(pt_model_dir_info *info, const char *dtype, uint64_t nbytes)
{
    const char *name = dtype ? dtype : "?";
    int k = 0;
    while (k < info->num_dtypes && strcmp(info->dtypes[k].name, name) != 0)
        k++;
    if (k == info->num_dtypes && k < PT_MODEL_INFO_MAX_DTYPES) {
        snprintf(info->dtypes[k].name, sizeof info->dtypes[k].name, "%s", name);
        info->num_dtypes++;
    }
    if (k < PT_MODEL_INFO_MAX_DTYPES) {
        info->dtypes[k].tensors++;
        info->dtypes[k].bytes += nbytes;
    }
    info->num_tensors++;
    info->weight_bytes += nbytes;
}

/* Count the tensors, bytes and dtypes of the weight files. */
static void count_weights(pt_model_dir_info *info, const pt_weight_files *w)
{
    info->sharded = w->sharded;
    info->num_files = (int)w->nfiles;
    for (size_t i = 0; i < w->n; i++) {
        const pt_st_tensor *t = w->e[i].t;
        pt__model_info_add_tensor(info, pt__st_dtype_name(t->dtype), t->nbytes);
    }
}

static int inspect(pt_model_dir_info *info, const char *dir)
{
    if (pt__gguf_is_file(dir))
        return pt__gguf_inspect(info, dir);
    if (!pt__is_dir(dir))
        return pt__err(PT_ENOTFOUND, pt__is_file(dir) ? "%s: not a directory (and not a GGUF file: no "
                                                      "GGUF magic)"
                                                    : "%s: not a directory", dir);
    int st = pt_model_config_load(&info->config, dir);
    if (st == PT_OK)
        st = pt_model_config_num_params(&info->num_params, &info->config);
    if (st)
        return st;
    info->has_tokenizer = pt__dir_has_file(dir, "tokenizer.json");
    pt_tokenizer *tok = NULL;
    if ((info->tokenizer_status = pt__modelio_dir_tokenizer(&tok, dir, info->config.vocab_size)) != PT_OK) {
        snprintf(info->tokenizer_problem, sizeof info->tokenizer_problem, "%s", pt_last_error());
        pt_clear_error();
    }
    pt_tokenizer_free(tok);
    info->has_generation_config = pt__dir_has_file(dir, "generation_config.json");
    pt_weight_files w;
    if ((st = pt__weight_files_open(&w, dir)) != PT_OK) {
        /* a directory with a config but no weights is still described */
        if (st != PT_ENOTFOUND)
            return st;
        set_problem(info, st);
        return PT_OK;
    }
    count_weights(info, &w);
    if ((st = pt__weights_check(&w, &info->config, dir, NULL)) != PT_OK)
        set_problem(info, st);
    pt__weight_files_close(&w);
    return PT_OK;
}

int pt_model_dir_inspect(pt_model_dir_info *info, const char *dir)
{
    PT_CHECK_NULL(info);
    PT_CHECK_NULL(dir);
    PT_CHECK_STRUCT_OUT(info, pt_model_dir_info, pt_model_dir_info_init);
    pt_model_dir_info full;
    pt_model_dir_info_init(&full);
    int st = inspect(&full, dir);
    pt__struct_write(info, &full);
    return st;
}
