/* pt_lora_export_gguf: a model's LoRA adapters as a GGUF LoRA adapter, the
 * file llama.cpp's convert_lora_to_gguf.py writes from a PEFT directory and
 * llama.cpp applies with --lora over the base model's GGUF.
 *
 * Metadata, in the converter's order: general.architecture,
 * general.type = "adapter", adapter.type = "lora", general.name,
 * adapter.lora.alpha (float32), general.quantization_version = 2 (the
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
#include "core/strbuf.h"
#include "io/gguf.h"
#include "model/lora.h"
#include "model/schema.h"
#include "modelio/gguf_internal.h"
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
    lora_item *it = pt_calloc(cap ? cap : 1, sizeof *it);
    if (!it)
        return pt_err(PT_ENOMEM, "pt_lora_export_gguf: adapter list");
    for (int layer = 0; layer < m->cfg.num_hidden_layers; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            if (!l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k].a)
                continue;
            it[cnt].layer = layer;
            it[cnt].k = k;
            snprintf(it[cnt].hf, sizeof it[cnt].hf, "model.layers.%d.%s", layer,
                     pt_lora_module_name(k));
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
    if (!pt_gguf_arch_permutes(m->cfg.arch))
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
                    float **scratch)
{
    const struct pt_lora *l = m->lora;
    const pt_lora_pair *p = &l->mods[(size_t)it->layer * PT_LORA_NMOD + (size_t)it->k];
    const uint64_t r = (uint64_t)l->opts.rank;
    char base[PT_TENSOR_NAME_MAX], name[LORA_NAME_MAX];
    if (!pt_tensor_gguf_name(base, sizeof base, pt_tensor_row_lora(it->k), it->layer))
        return pt_err(PT_ERANGE, "pt_lora_export_gguf: tensor name of layer %d too long",
                      it->layer);
    const float *b = p->b;
    int heads = permute_heads(m, it->k);
    if (heads) {
        pt_gguf_permute_rows(*scratch, p->b, (int64_t)p->out, (int64_t)r, heads);
        b = *scratch;
        *scratch += p->out * r;
    }
    const uint64_t ne_a[2] = { p->in, r }, ne_b[2] = { r, p->out };
    snprintf(name, sizeof name, "%s.lora_a", base);
    int st = pt_gguf_add_tensor_f32(w, name, 2, ne_a, type, p->a);
    if (st != PT_OK)
        return st;
    snprintf(name, sizeof name, "%s.lora_b", base);
    return pt_gguf_add_tensor_f32(w, name, 2, ne_b, type, b);
}

/* ---- general.name ---------------------------------------------------------------- */

static bool is_lower_ascii_word(const char *w, size_t n)
{
    bool cased = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)w[i];
        if (c >= 0x80 || (c >= 'A' && c <= 'Z'))
            return false;
        cased |= c >= 'a' && c <= 'z';
    }
    return cased;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* ^v\d+(\.\d+)*$ or ^\d.*$: the words gguf-py's id_to_title keeps as they are. */
static bool is_version_word(const char *w, size_t n)
{
    if (n > 0 && is_digit(w[0]))
        return true;
    if (n < 2 || w[0] != 'v' || !is_digit(w[1]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_digit(w[i]) && !(w[i] == '.' && i + 1 < n && is_digit(w[i + 1]) &&
                                 is_digit(w[i - 1])))
            return false;
    return true;
}

/* One word in Python's str.title() form (the word is lowercase ASCII):
 * a letter after a non-letter is capitalised. */
static void append_title_word(pt_strbuf *sb, const char *w, size_t n)
{
    bool title = is_lower_ascii_word(w, n) && !is_version_word(w, n);
    for (size_t i = 0; i < n; i++) {
        char c = w[i];
        bool after_letter = i > 0 && w[i - 1] >= 'a' && w[i - 1] <= 'z';
        if (title && c >= 'a' && c <= 'z' && !after_letter)
            c = (char)(c - 'a' + 'A');
        pt_strbuf_putc(sb, c);
    }
}

/* gguf-py's Metadata.id_to_title: '-' becomes a space, words split on
 * whitespace, lowercase words title-cased unless they are versions or start
 * with a digit, joined by single spaces.  (Words with non-ASCII bytes are
 * kept as they are.) */
static int id_to_title(pt_strbuf *sb, const char *id, size_t len)
{
    size_t i = 0;
    bool first = true;
    while (i < len) {
        while (i < len && (id[i] == '-' || id[i] == ' ' || (id[i] >= '\t' && id[i] <= '\r')))
            i++;
        size_t s = i;
        while (i < len && !(id[i] == '-' || id[i] == ' ' || (id[i] >= '\t' && id[i] <= '\r')))
            i++;
        if (i == s)
            break;
        if (!first)
            pt_strbuf_putc(sb, ' ');
        first = false;
        append_title_word(sb, id + s, i - s);
    }
    return sb->err;
}

/* The default general.name: the title form of the base model's source
 * directory name (the converter's fallback for a directory without a model
 * card), else of its model_type. */
static int default_name(pt_strbuf *sb, const pt_model *m)
{
    const char *dir = pt_model_source_dir(m);
    size_t len = dir ? strlen(dir) : 0;
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t s = len;
    while (s > 0 && dir[s - 1] != '/')
        s--;
    bool usable = len > s && !(len - s == 1 && dir[s] == '.') &&
                  !(len - s == 2 && dir[s] == '.' && dir[s + 1] == '.');
    if (usable)
        return id_to_title(sb, dir + s, len - s);
    const pt_arch_info *a = pt_arch_info_get(m->cfg.arch);
    const char *mt = a ? a->model_type : "model";
    return id_to_title(sb, mt, strlen(mt));
}

/* ---- the file ------------------------------------------------------------------------ */

static int add_metadata(pt_gguf_writer *w, const pt_model *m, const char *name)
{
    int st = pt_gguf_set_str(w, "general.architecture", pt_gguf_arch_name(m->cfg.arch));
    if (st == PT_OK)
        st = pt_gguf_set_str(w, "general.type", "adapter");
    if (st == PT_OK)
        st = pt_gguf_set_str(w, "adapter.type", "lora");
    if (st == PT_OK)
        st = pt_gguf_set_str(w, "general.name", name);
    if (st == PT_OK)
        st = pt_gguf_set_f32(w, "adapter.lora.alpha", (float)m->lora->opts.alpha);
    if (st == PT_OK)
        st = pt_gguf_set_u32(w, "general.quantization_version", GGML_QUANT_VERSION);
    return st;
}

static int add_tensors(pt_gguf_writer *w, const pt_model *m, const lora_item *it, size_t n,
                       int type, float *scratch)
{
    for (size_t i = 0; i < n; i++) {
        int st = add_pair(w, m, &it[i], type, &scratch);
        if (st != PT_OK)
            return st;
    }
    return PT_OK;
}

static int check_model(const pt_model *m, const pt_gguf_export_options *o)
{
    if (!m->lora)
        return pt_err(PT_ESTATE, "pt_lora_export_gguf: the model has no LoRA adapters (add them "
                                 "with pt_model_add_lora or pt_lora_load_peft; export a model "
                                 "without adapters with pt_model_export_gguf)");
    if (!pt_gguf_arch_name(m->cfg.arch))
        return pt_err(PT_EUNSUPPORTED, "pt_lora_export_gguf: architecture %d has no llama.cpp name",
                      m->cfg.arch);
    if (o->type < PT_GGUF_FTYPE_F32 || o->type > PT_GGUF_FTYPE_BF16)
        return pt_err_arg("pt_lora_export_gguf", "opts->type",
                          "must be a pt_gguf_ftype (f32, f16 or bf16; got %d)", o->type);
    return PT_OK;
}

int pt_lora_export_gguf(const pt_model *model, const char *path,
                        const pt_gguf_export_options *opts)
{
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(path);
    pt_gguf_export_options o = { .size = sizeof o, .type = PT_GGUF_FTYPE_F32, .name = NULL };
    int st = pt_struct_read(&o, sizeof o, opts, __func__, "pt_gguf_export_options_init");
    if (st == PT_OK)
        st = check_model(model, &o);
    if (st != PT_OK)
        return st;
    lora_item *items = NULL;
    size_t n = 0;
    float *scratch = NULL;
    pt_gguf_writer *w = NULL;
    pt_strbuf name = PT_STRBUF_INIT;
    if ((st = collect_items(&items, &n, model)) != PT_OK)
        goto done;
    size_t nf = permuted_floats(model, items, n);
    if (!(scratch = pt_malloc((nf ? nf : 1) * sizeof *scratch))) {
        st = pt_err(PT_ENOMEM, "pt_lora_export_gguf: permuted lora_b (%zu floats)", nf);
        goto done;
    }
    st = o.name ? pt_strbuf_puts(&name, o.name) : default_name(&name, model);
    if (st == PT_OK)
        st = pt_gguf_writer_new(&w);
    if (st == PT_OK)
        st = add_metadata(w, model, name.p ? name.p : "");
    if (st == PT_OK)
        st = add_tensors(w, model, items, n, ggml_type_of(o.type), scratch);
    if (st == PT_OK)
        st = pt_gguf_write(w, path);
done:
    pt_gguf_writer_free(w);
    pt_strbuf_free(&name);
    pt_free(scratch);
    pt_free(items);
    return st;
}
