/* pt_model_save_dir: a pt_model into the Hugging Face directory layout
 * (model.safetensors, generation_config.json, the tokenizer files, and
 * config.json last). */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/fileio.h"
#include "model/model.h"
#include "modelio/modelio_internal.h"
#include "posttrain/modelio.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_COPY_BYTES ((size_t)1 << 30)

static const char *const TOKENIZER_FILES[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "tokenizer.model", "added_tokens.json", "vocab.json", "merges.txt",
};

int pt_model_save_options_init(pt_model_save_options *o)
{
    PT_CHECK_NULL(o);
    *o = (pt_model_save_options){ .size = sizeof *o, .copy_tokenizer = true };
    return PT_OK;
}

static bool same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static int copy_file(const char *src_dir, const char *dst_dir, const char *name)
{
    char *src = pt__path_join(src_dir, name), *dst = pt__path_join(dst_dir, name);
    int st = PT_ENOMEM;
    if (src && dst) {
        char *buf = NULL;
        size_t len = 0;
        st = pt__read_file(&buf, &len, src, MAX_COPY_BYTES);
        if (st == PT_OK)
            st = pt__write_file_atomic(dst, buf, len);
        pt_free(buf);
    }
    pt_free(src);
    pt_free(dst);
    return st;
}

/* Write text as dir/name (atomically). */
static int write_text(const char *dir, const char *name, const char *text)
{
    char *path = pt__path_join(dir, name);
    if (!path)
        return PT_ENOMEM;
    int st = pt__write_file_atomic(path, text, strlen(text));
    pt_free(path);
    return st;
}

/* model.safetensors: the base tensors only (F32, metadata format=pt). */
static int write_weights(const pt_model *m, const char *dir, const float *const *vals)
{
    size_t nt = pt__model_base_tensor_count(m);
    if (pt_model_tensor_count(m) != nt)
        pt__log(PT_LOG_WARN,
               "%s: the model's LoRA adapters are not part of model.safetensors (merge them "
               "first with pt_model_merge_lora, or save them with pt_lora_save_peft)",
               dir);
    pt_st_write_tensor *wt = pt__calloc(nt ? nt : 1, sizeof *wt);
    char *path = pt__path_join(dir, "model.safetensors");
    int st = wt && path ? PT_OK : PT_ENOMEM;
    for (size_t i = 0; st == PT_OK && i < nt; i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, i);
        wt[i].name = r->name;
        wt[i].dtype = PT_ST_F32;
        wt[i].ndim = r->ndim;
        wt[i].shape[0] = r->shape[0];
        wt[i].shape[1] = r->ndim == 2 ? r->shape[1] : 0;
        wt[i].data = vals[i];
    }
    static const char *const meta[] = { "format", "pt" };
    if (st == PT_OK)
        st = pt__st_write(path, wt, nt, meta, 1);
    pt_free(wt);
    pt_free(path);
    return st;
}

/* generation_config.json: the source's, else one from the config's ids
 * (unless dir is the source and has one). */
static int write_generation_config(const pt_model *m, const pt_model_config *cfg,
                                   const char *dir, const char *eos_list)
{
    const char *msrc = pt_model_source_dir(m);
    if (msrc && pt__dir_has_file(msrc, "generation_config.json") && !same_dir(msrc, dir))
        return copy_file(msrc, dir, "generation_config.json");
    if (msrc && same_dir(msrc, dir) && pt__dir_has_file(dir, "generation_config.json"))
        return PT_OK;
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_puts(&b, "{\n  \"_from_model_config\": true");
    if (cfg->bos_token_id >= 0)
        pt__strbuf_printf(&b, ",\n  \"bos_token_id\": %d", cfg->bos_token_id);
    if (cfg->eos_token_id >= 0) {
        if (eos_list)
            pt__strbuf_printf(&b, ",\n  \"eos_token_id\": %s", eos_list);
        else
            pt__strbuf_printf(&b, ",\n  \"eos_token_id\": %d", cfg->eos_token_id);
    }
    if (cfg->pad_token_id >= 0)
        pt__strbuf_printf(&b, ",\n  \"pad_token_id\": %d", cfg->pad_token_id);
    pt__strbuf_puts(&b, "\n}\n");
    int st = b.err;
    if (st == PT_OK)
        st = write_text(dir, "generation_config.json", b.p);
    pt__strbuf_free(&b);
    return st;
}

static int copy_tokenizer(const char *src, const char *dir)
{
    for (size_t i = 0; i < sizeof TOKENIZER_FILES / sizeof TOKENIZER_FILES[0]; i++) {
        if (!pt__dir_has_file(src, TOKENIZER_FILES[i]))
            continue;
        int st = copy_file(src, dir, TOKENIZER_FILES[i]);
        if (st != PT_OK)
            return st;
    }
    return PT_OK;
}

/* The tokenizer files of a model loaded from a GGUF file, generated from its
 * metadata when it was loaded. */
static int write_generated_tokenizer(const pt_model *m, const char *dir)
{
    const char *json = pt__modelio_tokenizer_json(m), *config = pt__modelio_tokenizer_config(m);
    int st = json ? write_text(dir, "tokenizer.json", json) : PT_OK;
    if (st == PT_OK && config)
        st = write_text(dir, "tokenizer_config.json", config);
    return st;
}

/* The tokenizer files: from the tokenizer directory given, else those
 * generated for a GGUF source, else the source directory's. */
static int save_tokenizer(const pt_model *m, const char *dir, const char *src, bool from_opts)
{
    if (!from_opts && pt__modelio_tokenizer_json(m))
        return write_generated_tokenizer(m, dir);
    if (!src || same_dir(src, dir))
        return PT_OK;
    return copy_tokenizer(src, dir);
}

static int write_config(const pt_model_config *cfg, const char *dir, const char *eos_list)
{
    char *json = NULL;
    int st = pt__modelio_config_json(&json, cfg, eos_list);
    if (st == PT_OK)
        st = write_text(dir, "config.json", json);
    pt_free(json);
    return st;
}

/* PT_ENONFINITE naming the first base tensor (and element) that holds a NaN or
 * an infinity: such a model is never written. */
static int check_finite(const pt_model *m, const char *dir, const float *const *vals)
{
    size_t nt = pt__model_base_tensor_count(m);
    for (size_t i = 0; i < nt; i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, i);
        for (size_t j = 0; j < r->numel; j++)
            if (!isfinite(vals[i][j]))
                return pt__err(PT_ENONFINITE, "pt_model_save_dir: %s: tensor '%s' holds %s at element %zu; "
                              "a non-finite model is not saved (nothing was written)",
                              dir, r->name, isnan(vals[i][j]) ? "NaN" : "an infinity", j);
    }
    return PT_OK;
}

/* The base tensors' FP32 values: views, or widened copies (in tmps, freed
 * by free_values) of a base stored in BF16. */
static int get_values(const pt_model *m, const float ***vals, float ***tmps)
{
    size_t nt = pt__model_base_tensor_count(m);
    *vals = pt__calloc(nt ? nt : 1, sizeof **vals);
    *tmps = pt__calloc(nt ? nt : 1, sizeof **tmps);
    if (!*vals || !*tmps)
        return PT_ENOMEM;
    for (size_t i = 0; i < nt; i++)
        if (!((*vals)[i] = pt__tensor_values(m, pt__model_tensor(m, i), &(*tmps)[i])))
            return pt_last_status();
    return PT_OK;
}

static void free_values(const pt_model *m, const float **vals, float **tmps)
{
    for (size_t i = 0; tmps && i < pt__model_base_tensor_count(m); i++)
        pt_free(tmps[i]);
    pt_free(tmps);
    pt_free((void *)vals);
}

/* Every file in order; config.json last: a config next to weights it does
 * not describe would be the worst state an interrupted save could leave. */
static int save(const pt_model *m, const pt_model_config *cfg, const char *dir, const char *src,
                bool copy_tok, bool src_from_opts)
{
    const float **vals = NULL;
    float **tmps = NULL;
    int st = get_values(m, &vals, &tmps);
    if (st == PT_OK)
        st = check_finite(m, dir, vals);
    if (st != PT_OK || (st = pt__mkdir_p(dir)) != PT_OK) {
        free_values(m, vals, tmps);
        return st;
    }
    char *eos_list = pt__modelio_source_eos_list(pt_model_source_dir(m), cfg->eos_token_id);
    if ((st = write_weights(m, dir, vals)) == PT_OK &&
        (st = write_generation_config(m, cfg, dir, eos_list)) == PT_OK &&
        (!copy_tok || (st = save_tokenizer(m, dir, src, src_from_opts)) == PT_OK))
        st = write_config(cfg, dir, eos_list);
    pt_free(eos_list);
    free_values(m, vals, tmps);
    if (st == PT_OK && pt__dir_has_file(dir, "model.safetensors.index.json"))
        pt__log(PT_LOG_WARN,
               "%s: model.safetensors.index.json and its shards are stale now (model.safetensors "
               "takes precedence when loading); remove them to save space",
               dir);
    return st;
}

int pt_model_save_dir(const pt_model *m, const char *dir, const pt_model_save_options *opts)
{
    PT_CHECK_NULL(m);
    PT_CHECK_NULL(dir);
    pt_model_save_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_model_save_options_init);
    int st;
    if ((st = pt__model_check_not_quantized(m, "pt_model_save_dir", "a Hugging Face directory "
                                           "would hold it dequantized; write that with `posttrain "
                                           "export --type f32` (a GGUF), or save the LoRA adapters "
                                           "(pt_lora_save_peft, posttrain export --adapter)")))
        return st;
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    if ((st = pt_model_get_config(&cfg, m)) || (st = pt_model_config_validate(&cfg)))
        return st;
    /* Copy the source directory's name now: the record may change meanwhile. */
    const char *s = o.tokenizer_dir ? o.tokenizer_dir : pt_model_source_dir(m);
    char *src = s ? pt__strdup(s) : NULL;
    if (s && !src)
        return PT_ENOMEM;
    st = save(m, &cfg, dir, src, o.copy_tokenizer, o.tokenizer_dir != NULL);
    pt_free(src);
    return st;
}
