/* pt_model_export_gguf (posttrain/gguf.h): a model as the GGUF file
 * llama.cpp's convert_hf_to_gguf.py writes for its Hugging Face directory.
 * The pieces are in gguf_tensors.c, gguf_meta.c, gguf_vocab.c and
 * gguf_special.c (gguf_export_internal.h). */
#include "core/core.h"
#include "io/fileio.h"
#include "io/path.h"
#include "model/model.h"
#include "modelio/gguf_export_internal.h"
#include "modelio/gguf_internal.h"
#include "modelio/modelio_internal.h"
#include "posttrain/modelio.h"

#include <string.h>

static const pt_enum_entry k_ftype_names[] = {
    { PT_GGUF_FTYPE_F32, "f32" },
    { PT_GGUF_FTYPE_F16, "f16" },
    { PT_GGUF_FTYPE_BF16, "bf16" },
};
PT_ENUM_NAME_FUNCS(pt_gguf_ftype, k_ftype_names, "GGUF tensor type")

static const pt_enum_entry k_spm_scores_names[] = {
    { PT_GGUF_SPM_SCORES_CONVERTER, "converter" },
    { PT_GGUF_SPM_SCORES_MERGES, "merges" },
};
PT_ENUM_NAME_FUNCS(pt_gguf_spm_scores, k_spm_scores_names, "SentencePiece score mode")

int pt_gguf_export_options_init(pt_gguf_export_options *o)
{
    PT_CHECK_NULL(o);
    *o = (pt_gguf_export_options){ .size = sizeof *o, .type = PT_GGUF_FTYPE_F32, .name = NULL,
                                   .spm_scores = PT_GGUF_SPM_SCORES_CONVERTER };
    return PT_OK;
}

/* A JSON file of dir, or NULL when absent; a malformed one is an error. */
static int read_json(cJSON **out, const char *dir, const char *name)
{
    *out = NULL;
    if (!dir || !pt__dir_has_file(dir, name))
        return PT_OK;
    char *path = pt__path_join(dir, name), *text = NULL;
    size_t len = 0;
    int st = path ? pt__read_file(&text, &len, path, (size_t)1 << 30) : PT_ENOMEM;
    if (st == PT_OK && !(*out = cJSON_ParseWithLength(text, len)))
        st = pt__err(PT_EFORMAT, "pt_model_export_gguf: %s: not valid JSON", path);
    pt_free(text);
    pt_free(path);
    return st;
}

/* config.json of the source directory, else the one pt_model_save_dir
 * would write for the model's configuration. */
static int load_hparams(gx_ctx *c)
{
    int st = read_json(&c->hparams, c->src_dir, "config.json");
    if (st || c->hparams)
        return st;
    char *text = NULL;
    if ((st = pt__modelio_config_json(&text, &c->cfg, NULL)))
        return st;
    c->hparams = cJSON_Parse(text);
    pt_free(text);
    return c->hparams ? PT_OK : pt__err(PT_ENOMEM, "pt_model_export_gguf: config.json");
}

static int load_inputs(gx_ctx *c)
{
    int st = load_hparams(c);
    if (!st)
        st = read_json(&c->tok_json, c->src_dir, "tokenizer.json");
    if (!st)
        st = read_json(&c->tok_cfg, c->src_dir, "tokenizer_config.json");
    return st;
}

static void ctx_free(gx_ctx *c)
{
    cJSON_Delete(c->hparams);
    cJSON_Delete(c->tok_json);
    cJSON_Delete(c->tok_cfg);
    pt__gguf_writer_free(c->w);
}

static int check_args(const pt_model *m, const char *path, const pt_gguf_export_options *o)
{
    static const char fn[] = "pt_model_export_gguf";
    if (!pt_gguf_ftype_name(o->type))
        return pt__err_arg(fn, "opts->type", "%d is not a pt_gguf_ftype (f32 0, f16 1, bf16 2)", o->type);
    if (!pt_gguf_spm_scores_name(o->spm_scores))
        return pt__err_arg(fn, "opts->spm_scores", "%d is not a pt_gguf_spm_scores (converter 0, merges 1)",
                          o->spm_scores);
    if (*path == '\0')
        return pt__err_arg(fn, "path", "is empty");
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    pt_model_get_config(&cfg, m);
    if (!pt__gguf_arch_name(cfg.arch))
        return pt__err(PT_EUNSUPPORTED, "pt_model_export_gguf: architecture %d has no llama.cpp name", cfg.arch);
    if (!pt_model_tokenizer(m))
        return pt__err(PT_ESTATE, "pt_model_export_gguf: the model has no tokenizer (load it from a "
                      "directory holding tokenizer.json): a GGUF model file carries its vocabulary");
    return pt__modelio_check_finite(m, 0, pt_model_tensor_count(m), fn, path, "a non-finite model is not exported");
}

/* llama.cpp's "llama" architecture, which the converter writes for
 * MistralForCausalLM (no converter writes a sliding-window key for it),
 * attends to the whole context: outputs agree with the model's only while
 * the context fits the window. */
static void warn_sliding_window(const gx_ctx *c)
{
    int w = c->cfg.sliding_window, n_ctx = c->cfg.max_position_embeddings;
    if (w > 0 && w < n_ctx)
        pt__log(PT_LOG_WARN, "pt_model_export_gguf: %s: the model attends within a sliding window of %d "
               "tokens, shorter than its context length %d, but llama.cpp's %s architecture has no "
               "sliding window (it attends to the whole context): llama.cpp's outputs agree with the "
               "model's only for contexts of at most %d tokens", c->out_path, w, n_ctx,
               pt__gguf_arch_name(c->cfg.arch), w);
}

/* Everything into the writer, then the file. */
static int export(gx_ctx *c, gx_bufs *bufs)
{
    int st = load_inputs(c);
    if (!st)
        st = pt__gguf_writer_new(&c->w);
    if (!st)
        st = gx_add_tensors(c, bufs);
    if (!st)
        st = gx_add_meta(c);
    if (!st)
        st = gx_add_vocab(c);
    if (!st)
        st = pt__gguf_write(c->w, c->out_path);
    if (!st)
        warn_sliding_window(c);
    return st;
}

int pt_model_export_gguf(const pt_model *model, const char *path, const pt_gguf_export_options *opts)
{
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(path);
    pt_gguf_export_options o;
    int st = PT_STRUCT_READ(o, opts, pt_gguf_export_options_init);
    if (st || (st = check_args(model, path, &o)))
        return st;
    gx_ctx c = { .m = model, .type = o.type, .name = o.name, .spm_scores = o.spm_scores, .out_path = path,
                 .tok = pt_model_tokenizer(model), .src_dir = pt_model_source_dir(model) };
    pt_model_config_init(&c.cfg);
    pt_model_get_config(&c.cfg, model);
    gx_bufs bufs = { 0 };
    st = export(&c, &bufs);
    gx_tensors_free(&bufs);
    ctx_free(&c);
    if (st && !strstr(pt_last_error(), path))
        pt__err_prefix(st, "pt_model_export_gguf: %s", path);
    return st;
}

int pt_gguf_file_counts(int *version, int64_t *n_tensors, int64_t *n_kv, const char *path)
{
    PT_CHECK_NULL(version);
    *version = 0;
    PT_CHECK_NULL(n_tensors);
    *n_tensors = 0;
    PT_CHECK_NULL(n_kv);
    *n_kv = 0;
    PT_CHECK_NULL(path);
    pt_gguf *g = NULL;
    int st = pt__gguf_open(&g, path);
    if (st)
        return st;
    *version = (int)pt__gguf_version(g);
    *n_tensors = (int64_t)pt__gguf_tensor_count(g);
    *n_kv = (int64_t)pt__gguf_kv_count(g);
    pt__gguf_close(g);
    return PT_OK;
}
