/* pt_lora_export_gguf: a model's LoRA adapters as a GGUF LoRA adapter, the
 * file llama.cpp's convert_lora_to_gguf.py writes from a PEFT directory and
 * llama.cpp applies with --lora over the base model's GGUF.
 *
 * Metadata, in the converter's order: general.architecture,
 * general.type = "adapter", adapter.type = "lora", the naming keys
 * (general.name, and version / finetune / basename when the PEFT
 * directory's name has them; gguf_name.c), adapter.lora.alpha (float32), general.quantization_version = 2 (the
 * converter's LoRA model writes no general.file_type and no <arch>.* keys).
 *
 * Tensors: per adapted projection "blk.<i>.<tensor>.weight.lora_a" (A, ggml
 * ne = {in, r}) then ".lora_b" (B, ne = {r, out}), in the order of the PEFT
 * tensor names sorted as strings (the order safetensors hands the converter:
 * layer 10 before layer 2, mlp before self_attn).  For llama-type
 * architectures the converter's Q/K permutation reaches only B's rows
 * (LoraTorchTensor.permute permutes the output side), so B of q_proj /
 * k_proj is stored permuted like the base weight and A as it is. */
#include "core/core.h"
#include "io/gguf.h"
#include "model/lora.h"
#include "model/schema.h"
#include "modelio/gguf_export_internal.h"
#include "modelio/gguf_internal.h"
#include "modelio/modelio_internal.h"
#include "posttrain/gguf.h"
#include "posttrain/modelio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGML_QUANT_VERSION 2u
#define LORA_NAME_MAX 128

/* One adapted projection: layer, PT_LORA_* bit index, Hugging Face module
 * path ("model.layers.3.self_attn.q_proj": the sort key). */
typedef struct lora_item {
    int layer, k;
    char hf[PT_TENSOR_NAME_MAX];
} lora_item;

static int ggml_type_of(int ftype)
{
    switch (ftype) {
    case PT_GGUF_FTYPE_F16: return PT_GGML_F16;
    case PT_GGUF_FTYPE_BF16: return PT_GGML_BF16;
    default: return PT_GGML_F32;
    }
}

static int item_cmp(const void *a, const void *b)
{
    return strcmp(((const lora_item *)a)->hf, ((const lora_item *)b)->hf);
}

/* The model's adapters, sorted as the converter sees them. */
static int collect_items(lora_item **out, size_t *n, const pt_model *m)
{
    const struct pt_lora *l = m->lora;
    size_t cap = (size_t)m->cfg.num_hidden_layers * PT_LORA_NMOD, cnt = 0;
    lora_item *it = pt__calloc(cap ? cap : 1, sizeof *it);
    if (!it)
        return pt__err(PT_ENOMEM, "pt_lora_export_gguf: adapter list");
    for (int layer = 0; layer < m->cfg.num_hidden_layers; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            if (!l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k].a)
                continue;
            it[cnt].layer = layer;
            it[cnt].k = k;
            snprintf(it[cnt].hf, sizeof it[cnt].hf, "model.layers.%d.%s", layer,
                     pt__lora_module_name(k));
            cnt++;
        }
    qsort(it, cnt, sizeof *it, item_cmp);
    *out = it;
    *n = cnt;
    return PT_OK;
}

/* Heads of the permutation for projection k, or 0 when B is stored as is. */
static int permute_heads(const pt_model *m, int k)
{
    if (!pt__gguf_arch_permutes(m->cfg.arch))
        return 0;
    if (1u << k == PT_LORA_Q)
        return m->cfg.num_attention_heads;
    if (1u << k == PT_LORA_K)
        return m->cfg.num_key_value_heads;
    return 0;
}

/* Floats of scratch the permuted B matrices need. */
static size_t permuted_floats(const pt_model *m, const lora_item *it, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (permute_heads(m, it[i].k))
            total += m->lora->mods[(size_t)it[i].layer * PT_LORA_NMOD + (size_t)it[i].k].out *
                     (size_t)m->lora->opts.rank;
    return total;
}

/* Add one adapter's lora_a and lora_b; *scratch advances past a permuted B
 * (which must stay valid until the file is written). */
static int add_pair(pt_gguf_writer *w, const pt_model *m, const lora_item *it, int type,
                    float **scratch, const char *path)
{
    const struct pt_lora *l = m->lora;
    const pt_lora_pair *p = &l->mods[(size_t)it->layer * PT_LORA_NMOD + (size_t)it->k];
    const uint64_t r = (uint64_t)l->opts.rank;
    char base[PT_TENSOR_NAME_MAX], name[LORA_NAME_MAX];
    if (!pt__tensor_gguf_name(base, sizeof base, pt__tensor_row_lora(it->k), it->layer))
        return pt__err(PT_ERANGE, "pt_lora_export_gguf: tensor name of layer %d too long",
                      it->layer);
    const float *b = p->b;
    int heads = permute_heads(m, it->k);
    if (heads) {
        pt__gguf_permute_rows(*scratch, p->b, (int64_t)p->out, (int64_t)r, heads);
        b = *scratch;
        *scratch += p->out * r;
    }
    const uint64_t ne_a[2] = { p->in, r }, ne_b[2] = { r, p->out };
    snprintf(name, sizeof name, "%s.lora_a", base);
    int st = gx_check_written(p->a, (size_t)(p->in * r), type, "pt_lora_export_gguf", path, name, "");
    if (st == PT_OK)
        st = pt__gguf_add_tensor_f32(w, name, 2, ne_a, type, p->a);
    if (st != PT_OK)
        return st;
    snprintf(name, sizeof name, "%s.lora_b", base);
    st = gx_check_written(b, (size_t)(p->out * r), type, "pt_lora_export_gguf", path, name, "");
    return st ? st : pt__gguf_add_tensor_f32(w, name, 2, ne_b, type, b);
}

/* ---- the naming keys --------------------------------------------------------------- */

/* gguf-py's get_total_parameter_count for an adapter: minus the elements of
 * the base weights adapted (out * in per lora_a / lora_b pair). */
static int64_t adapter_total(const pt_model *m, const lora_item *it, size_t n)
{
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const pt_lora_pair *p = &m->lora->mods[(size_t)it[i].layer * PT_LORA_NMOD + (size_t)it[i].k];
        total += (int64_t)(p->out * p->in);
    }
    return -total;
}

/* One directory's name through the id heuristics (nothing for "" or "."). */
static int apply_dir(gx_names *n, const char *dir, int64_t total)
{
    char *id = gx_path_name(dir);
    if (!id)
        return PT_ENOMEM;
    int st = *id ? gx_names_apply_id(n, id, total) : PT_OK;
    pt_free(id);
    return st;
}

/* The naming keys as convert_lora_to_gguf.py derives them: Metadata.load
 * with the PEFT directory as the model-card directory (its name through
 * the id heuristics), else, for adapters not loaded from a PEFT directory,
 * the base model's directory, else its model_type; opts->name replaces
 * general.name. */
static int adapter_names(gx_names *n, const pt_model *m, const char *name, int64_t total)
{
    const char *peft = m->lora->source_dir, *base = pt_model_source_dir(m);
    int st = peft ? apply_dir(n, peft, total) : PT_OK;
    if (st == PT_OK && !n->name && base)
        st = apply_dir(n, base, total);
    if (st == PT_OK && !n->name) {
        const pt_arch_info *a = pt__arch_info_get(m->cfg.arch);
        st = gx_names_apply_id(n, a ? a->model_type : "model", total);
    }
    if (st == PT_OK && name) {
        pt_free(n->name);
        if (!(n->name = pt__strdup(name)))
            st = PT_ENOMEM;
    }
    return st;
}

/* ---- the file ------------------------------------------------------------------------ */

static int add_metadata(pt_gguf_writer *w, const pt_model *m, const gx_names *names)
{
    int st = pt__gguf_set_str(w, "general.architecture", pt__gguf_arch_name(m->cfg.arch));
    if (st == PT_OK)
        st = pt__gguf_set_str(w, "general.type", "adapter");
    if (st == PT_OK)
        st = pt__gguf_set_str(w, "adapter.type", "lora");
    if (st == PT_OK)
        st = gx_names_write(w, names);
    if (st == PT_OK)
        st = pt__gguf_set_f32(w, "adapter.lora.alpha", (float)m->lora->opts.alpha);
    if (st == PT_OK)
        st = pt__gguf_set_u32(w, "general.quantization_version", GGML_QUANT_VERSION);
    return st;
}

static int add_tensors(pt_gguf_writer *w, const pt_model *m, const lora_item *it, size_t n,
                       int type, float *scratch, const char *path)
{
    for (size_t i = 0; i < n; i++) {
        int st = add_pair(w, m, &it[i], type, &scratch, path);
        if (st != PT_OK)
            return st;
    }
    return PT_OK;
}

static int check_model(const pt_model *m, const pt_gguf_export_options *o)
{
    if (!m->lora)
        return pt__err(PT_ESTATE, "pt_lora_export_gguf: the model has no LoRA adapters (add them "
                                 "with pt_model_add_lora or pt_lora_load_peft; export a model "
                                 "without adapters with pt_model_export_gguf)");
    if (!pt__gguf_arch_name(m->cfg.arch))
        return pt__err(PT_EUNSUPPORTED, "pt_lora_export_gguf: architecture %d has no llama.cpp name",
                      m->cfg.arch);
    if (o->type < PT_GGUF_FTYPE_F32 || o->type > PT_GGUF_FTYPE_BF16)
        return pt__err_arg("pt_lora_export_gguf", "opts->type",
                          "must be a pt_gguf_ftype (f32, f16 or bf16; got %d)", o->type);
    return PT_OK;
}

int pt_lora_export_gguf(const pt_model *model, const char *path,
                        const pt_gguf_export_options *opts)
{
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(path);
    pt_gguf_export_options o;
    int st = PT_STRUCT_READ(o, opts, pt_gguf_export_options_init);
    if (st == PT_OK)
        st = check_model(model, &o);
    if (st == PT_OK)
        st = pt__modelio_check_finite(model, model->lora->nbase, pt_model_tensor_count(model), "pt_lora_export_gguf",
                                     path, "a non-finite adapter is not exported");
    if (st != PT_OK)
        return st;
    lora_item *items = NULL;
    size_t n = 0;
    float *scratch = NULL;
    pt_gguf_writer *w = NULL;
    gx_names names = { 0 };
    if ((st = collect_items(&items, &n, model)) != PT_OK)
        goto done;
    size_t nf = permuted_floats(model, items, n);
    if (!(scratch = pt__malloc((nf ? nf : 1) * sizeof *scratch))) {
        st = pt__err(PT_ENOMEM, "pt_lora_export_gguf: permuted lora_b (%zu floats)", nf);
        goto done;
    }
    st = adapter_names(&names, model, o.name, adapter_total(model, items, n));
    if (st == PT_OK)
        st = pt__gguf_writer_new(&w);
    if (st == PT_OK)
        st = add_metadata(w, model, &names);
    if (st == PT_OK)
        st = add_tensors(w, model, items, n, ggml_type_of(o.type), scratch, path);
    if (st == PT_OK)
        st = pt__gguf_write(w, path);
done:
    pt__gguf_writer_free(w);
    gx_names_free(&names);
    pt_free(scratch);
    pt_free(items);
    return st;
}
