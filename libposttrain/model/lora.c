/* LoRA adapters: their parameter and gradient blocks, their entries in the
 * tensor table, the freezing of the base, and merging. */
#include "model/lora.h"

#include "core/core.h"
#include "kernels/gemm.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define LORA_NAME_LEN 96

const char *pt__lora_module_name(int k)
{
    const pt_tensor_row *r = pt__tensor_row_lora(k);
    return r ? r->module : "?";
}

void pt__lora_module_dims(const pt_model *m, int k, size_t *in, size_t *out)
{
    const pt_tensor_row *r = pt__tensor_row_lora(k);
    *in = (size_t)pt__dim_size(r->cols, &m->cfg);
    *out = (size_t)pt__dim_size(r->rows, &m->cfg);
}

static float *base_weight(pt_model *m, int layer, int k)
{
    return *pt__weights_slot(&m->w, layer, pt__tensor_row_lora(k)->id);
}

int pt_lora_options_init(pt_lora_options *o)
{
    PT_CHECK_NULL(o);
    *o = (pt_lora_options){ .size = sizeof *o, .rank = 8, .alpha = 8.0,
                            .targets = PT_LORA_Q | PT_LORA_V, .dropout = 0.0, .seed = 0 };
    return PT_OK;
}

size_t pt__model_base_tensor_count(const pt_model *m)
{
    if (!m)
        return 0;
    return m->lora ? m->lora->nbase : m->ntensors;
}

bool pt_model_has_lora(const pt_model *m)
{
    return m && m->lora;
}

int pt_model_set_lora_enabled(pt_model *m, bool enabled)
{
    PT_CHECK_NULL(m);
    if (!m->lora)
        return pt__err(PT_ESTATE, "pt_model_set_lora_enabled: the model has no LoRA adapters");
    m->lora->disabled = !enabled;
    return PT_OK;
}

bool pt_model_lora_enabled(const pt_model *m)
{
    return m && m->lora && !m->lora->disabled;
}

bool pt__lora_disabled(const pt_model *m)
{
    return m && m->lora && m->lora->disabled;
}

bool pt__lora_active(const pt_model *m)
{
    return m && m->lora && !m->lora->disabled;
}

int pt__lora_check_backward(const pt_model *m, const char *who)
{
    if (pt__lora_disabled(m))
        return pt__err(PT_ESTATE, "%s: the model's LoRA adapters are switched off "
                      "(pt_model_set_lora_enabled) and its base is frozen: nothing would get a "
                      "gradient", who);
    return PT_OK;
}

int pt_model_get_lora(pt_lora_options *out, const pt_model *m)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(m);
    if (!m->lora)
        return pt__err(PT_ESTATE, "pt_model_get_lora: the model has no LoRA adapters");
    return PT_STRUCT_GET(out, &m->lora->opts, pt_lora_options_init);
}

static void lora_free(struct pt_lora *l)
{
    if (!l)
        return;
    pt__free_aligned(l->params);
    pt__free_aligned(l->grads);
    pt_free(l->mods);
    pt_free(l->names);
    pt_free(l->source_dir);
    pt_free(l);
}

void pt__lora_release(pt_model *m)
{
    if (!m)
        return;
    lora_free(m->lora);
    m->lora = NULL;
}

/* Release the base's gradient block (the base is about to be frozen). */
static void drop_base_grads(pt_model *m)
{
    pt__free_aligned(m->grads);
    m->grads = NULL;
    pt_layer_w *gl = m->g.layers;
    memset(gl, 0, (size_t)m->cfg.num_hidden_layers * sizeof *gl);
    memset(&m->g, 0, sizeof m->g);
    m->g.layers = gl;
    for (size_t i = 0; i < m->ntensors; i++)
        m->tensors[i].grad = NULL;
}

/* Lay the adapters out in one block: A then B of each, 16-float aligned.
 * With block == NULL only the size is planned; else the pairs point into
 * block (params) and grads.  Returns the planner's total, 0 on overflow. */
static size_t lay_out_adapters(struct pt_lora *l, const pt_model *m, float *block, float *grads)
{
    const size_t r = (size_t)l->opts.rank;
    pt_planner p = { 0, false };
    for (int layer = 0; layer < m->cfg.num_hidden_layers; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            if (!((l->opts.targets >> k) & 1u))
                continue;
            pt_lora_pair *q = &l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k];
            pt__lora_module_dims(m, k, &q->in, &q->out);
            size_t ao = pt__plan(&p, r, q->in), bo = pt__plan(&p, q->out, r);
            if (block) {
                q->a = block + ao;
                q->da = grads + ao;
                q->b = block + bo;
                q->db = grads + bo;
            }
        }
    return p.overflow ? 0 : p.total + 16;
}

/* A PEFT-initialised adapter pair's two table entries at tab[0], tab[1]:
 * A ~ U(-1/sqrt(in), 1/sqrt(in)) (torch.nn.init.kaiming_uniform_ with
 * a = sqrt(5)), B = 0. */
static void add_entries(pt_tensor_ref *tab, char *names, const struct pt_lora *l,
                        const pt_lora_pair *p, int layer, int k, pt_rng *rng)
{
    const size_t r = (size_t)l->opts.rank;
    double bound = 1.0 / sqrt((double)p->in);
    for (size_t j = 0; j < r * p->in; j++)
        p->a[j] = (float)((2.0 * pt__rng_uniform_double(rng) - 1.0) * bound);
    for (int ab = 0; ab < 2; ab++) {
        char *name = names + (size_t)ab * LORA_NAME_LEN;
        snprintf(name, LORA_NAME_LEN, "model.layers.%d.%s.lora_%c.weight", layer,
                 pt__lora_module_name(k), ab ? 'B' : 'A');
        pt_tensor_ref *t = &tab[ab];
        memset(t, 0, sizeof *t);
        t->name = name;
        t->data = ab ? p->b : p->a;
        t->grad = ab ? p->db : p->da;
        t->ndim = 2;
        t->shape[0] = ab ? (int64_t)p->out : (int64_t)r;
        t->shape[1] = ab ? (int64_t)r : (int64_t)p->in;
        t->numel = r * (ab ? p->out : p->in);
        t->trainable = true;
        t->adapter = true;
        t->id = -1;
        t->layer = layer;
    }
}

/* The adapters' memory for options o (nothing attached yet). */
static int lora_alloc(struct pt_lora **out, const pt_model *m, const pt_lora_options *o)
{
    struct pt_lora *l = pt__calloc(1, sizeof *l);
    if (!l)
        return PT_ENOMEM;
    const size_t L = (size_t)m->cfg.num_hidden_layers;
    size_t per_layer = 0;
    for (int k = 0; k < PT_LORA_NMOD; k++)
        per_layer += (o->targets >> k) & 1u;
    l->opts = *o;
    l->scale = (float)(o->alpha / (double)o->rank);
    l->nbase = m->ntensors;
    l->nadapters = L * per_layer;
    l->mods = pt__calloc(L * PT_LORA_NMOD, sizeof *l->mods);
    l->names = pt__calloc(2 * l->nadapters, LORA_NAME_LEN);
    int st = l->mods && l->names ? PT_OK : PT_ENOMEM;
    if (st == PT_OK && !(l->num_floats = lay_out_adapters(l, m, NULL, NULL)))
        st = pt__err(PT_ENOMEM, "pt_model_add_lora: rank %d adapters are too large", o->rank);
    if (st == PT_OK) {
        l->params = pt__malloc_aligned(l->num_floats * sizeof(float));
        l->grads = pt__malloc_aligned(l->num_floats * sizeof(float));
        if (!l->params || !l->grads)
            st = pt__err_prefix(PT_ENOMEM, "LoRA adapters of rank %d", o->rank);
    }
    if (st != PT_OK) {
        lora_free(l);
        return st;
    }
    memset(l->params, 0, l->num_floats * sizeof(float));
    memset(l->grads, 0, l->num_floats * sizeof(float));
    lay_out_adapters(l, m, l->params, l->grads);
    *out = l;
    return PT_OK;
}

int pt_model_add_lora(pt_model *m, const pt_lora_options *opts)
{
    PT_CHECK_NULL(m);
    pt_lora_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_lora_options_init);
    const int rank = o.rank;
    const double alpha = o.alpha;
    const unsigned targets = o.targets;
    PT_CHECK_ARG(rank >= 1 && rank <= 65536, rank, "%d must be in 1 .. 65536", rank);
    PT_CHECK_ARG(alpha > 0 && isfinite(alpha), alpha, "%g must be positive and finite", alpha);
    if (!(alpha / (double)rank <= (double)FLT_MAX))
        return pt__err(PT_ERANGE, "pt_model_add_lora: alpha %g / rank %d = %g overflows the float LoRA "
                      "scale (at most %g)", alpha, rank, alpha / (double)rank, (double)FLT_MAX);
    PT_CHECK_ARG(targets != 0 && (targets & ~(unsigned)PT_LORA_ALL) == 0, targets,
                 "0x%x must be a non-empty set of PT_LORA_* bits (0x%x)", targets,
                 (unsigned)PT_LORA_ALL);
    if (o.dropout != 0.0)
        return pt__err(PT_EUNSUPPORTED, "pt_model_add_lora: dropout %g is not supported (must be 0)",
                      o.dropout);
    if (m->lora)
        return pt__err(PT_ESTATE, "pt_model_add_lora: the model already has LoRA adapters "
                      "(merge or remove them first)");
    struct pt_lora *l = NULL;
    int st;
    if ((st = lora_alloc(&l, m, &o)) != PT_OK)
        return st;
    pt_tensor_ref *tab = pt__malloc_array(m->ntensors + 2 * l->nadapters, sizeof *tab);
    if (!tab) {
        lora_free(l);
        return PT_ENOMEM;
    }
    memcpy(tab, m->tensors, m->ntensors * sizeof *tab);
    pt_rng rng;
    pt__rng_seed(&rng, o.seed);
    size_t ti = m->ntensors;
    for (int layer = 0; layer < m->cfg.num_hidden_layers; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            const pt_lora_pair *p = &l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k];
            if (!((o.targets >> k) & 1u))
                continue;
            add_entries(tab + ti, l->names + (ti - m->ntensors) * LORA_NAME_LEN, l, p, layer,
                        k, &rng);
            ti += 2;
        }
    /* Freeze the base. */
    drop_base_grads(m);
    for (size_t i = 0; i < m->ntensors; i++) {
        tab[i].trainable = false;
        tab[i].grad = NULL;
    }
    pt_free(m->tensors);
    m->tensors = tab;
    m->ntensors = ti;
    m->lora = l;
    pt__model_bump_generation(m, "LoRA adapters added");
    return PT_OK;
}

int pt_model_remove_lora(pt_model *m)
{
    PT_CHECK_NULL(m);
    if (!m->lora)
        return pt__err(PT_ESTATE, "pt_model_remove_lora: the model has no LoRA adapters");
    m->ntensors = m->lora->nbase;
    bool frozen = pt__model_is_quantized(m); /* a quantized base stays frozen */
    for (size_t i = 0; i < m->ntensors; i++) {
        m->tensors[i].trainable = !frozen;
        m->tensors[i].grad = NULL;
    }
    pt__lora_release(m);
    pt__model_bump_generation(m, "LoRA adapters removed");
    return PT_OK;
}

int pt_model_merge_lora(pt_model *m)
{
    PT_CHECK_NULL(m);
    struct pt_lora *l = m->lora;
    if (!l)
        return pt__err(PT_ESTATE, "pt_model_merge_lora: the model has no LoRA adapters");
    int qst = pt__model_check_not_quantized(m, "pt_model_merge_lora", "the adapters cannot be "
                                           "merged into its blocks; export them with `posttrain "
                                           "export --adapter` (llama.cpp applies them to the same "
                                           "file with --lora), or dequantize the base first");
    if (qst)
        return qst;
    const size_t r = (size_t)l->opts.rank;
    pt__model_bf16_unstore(m); /* merge into FP32 (a BF16 base is widened first) */
    for (int layer = 0; layer < m->cfg.num_hidden_layers; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            const pt_lora_pair *p = &l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k];
            if (!p->a)
                continue;
            /* W [out, in] += scale * B [out, r] A [r, in] */
            pt__sgemm(false, false, p->out, p->in, r, l->scale, p->b, r, p->a, p->in, 1.0f,
                     base_weight(m, layer, k), p->in);
        }
    pt_model_weights_changed(m); /* BF16 copies follow the merged weights */
    int st = pt_model_remove_lora(m);
    if (st == PT_OK)
        pt__model_bump_generation(m, "LoRA merged");
    return st;
}

void pt__lora_attach(pt_linear *lin, const pt_model *m, int layer, unsigned mask, float *scratch)
{
    const struct pt_lora *l = m->lora;
    if (!l || l->disabled)
        return;
    size_t off = 0;
    for (int k = 0; k < PT_LORA_NMOD; k++) {
        if (!((mask >> k) & 1u))
            continue;
        const pt_lora_pair *p = &l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k];
        if (p->a && lin->nlora < 3) {
            pt_lora_slice *s = &lin->lora[lin->nlora++];
            s->a = p->a;
            s->b = p->b;
            s->da = p->da;
            s->db = p->db;
            s->off = off;
            s->len = p->out;
            s->r = (size_t)l->opts.rank;
            s->scale = l->scale;
            lin->lora_scratch = scratch;
        }
        size_t in, out;
        pt__lora_module_dims(m, k, &in, &out);
        off += out;
    }
}

int pt__lora_scratch(float **buf, size_t *cap, const pt_model *m, size_t rows)
{
    if (!m->lora)
        return PT_OK;
    size_t need;
    if (!pt__mul_size(rows, 4 * (size_t)m->lora->opts.rank, &need))
        return pt__err(PT_ENOMEM, "LoRA scratch for %zu rows overflows", rows);
    if (*cap >= need && *buf)
        return PT_OK;
    float *p = pt__malloc_aligned(need * sizeof(float));
    if (!p)
        return pt__err_prefix(PT_ENOMEM, "LoRA scratch for %zu rows", rows);
    pt__free_aligned(*buf);
    *buf = p;
    *cap = need;
    return PT_OK;
}

void pt__lora_zero_grads(pt_model *m)
{
    if (m && m->lora)
        memset(m->lora->grads, 0, m->lora->num_floats * sizeof(float));
}
