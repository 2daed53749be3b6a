/* LoRA adapters: their parameter and gradient blocks, their entries in the
 * tensor table, the freezing of the base, and merging. */
#include "model/lora.h"

#include "core/core.h"
#include "kernels/gemm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LORA_NAME_LEN 96

static const char *const k_modules[PT_LORA_NMOD] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};

const char *pt_lora_module_name(int k)
{
    return k >= 0 && k < PT_LORA_NMOD ? k_modules[k] : "?";
}

void pt_lora_module_dims(const pt_model *m, int k, size_t *in, size_t *out)
{
    const size_t H = (size_t)m->cfg.hidden_size, I = (size_t)m->cfg.intermediate_size;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    static const int kin[PT_LORA_NMOD] = { 0, 0, 0, 1, 0, 0, 2 };   /* 0 H, 1 Q, 2 I */
    static const int kout[PT_LORA_NMOD] = { 1, 3, 3, 0, 2, 2, 0 };  /* 0 H, 1 Q, 2 I, 3 KV */
    const size_t dims[4] = { H, Q, I, KV };
    *in = dims[kin[k]];
    *out = dims[kout[k]];
}

static float *base_weight(pt_model *m, int layer, int k)
{
    pt_layer_w *w = &m->w.layers[layer];
    float *const p[PT_LORA_NMOD] = { w->wq, w->wk, w->wv, w->wo, w->wg, w->wu, w->wd };
    return p[k];
}

int pt_lora_options_init(pt_lora_options *o)
{
    if (!o)
        return pt_err(PT_EINVAL, "pt_lora_options_init: NULL options");
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->rank = 8;
    o->alpha = 8.0;
    o->targets = PT_LORA_Q | PT_LORA_V;
    o->dropout = 0.0;
    o->seed = 0;
    return PT_OK;
}

static int check_options(const pt_lora_options *o)
{
    if (o->size != sizeof(pt_lora_options))
        return pt_err(PT_EINVAL, "LoRA options: size %zu, expected %zu (call "
                      "pt_lora_options_init first)", o->size, sizeof(pt_lora_options));
    if (o->rank < 1 || o->rank > 65536)
        return pt_err(PT_EINVAL, "LoRA options: rank %d must be in 1 .. 65536", o->rank);
    if (!(o->alpha > 0) || !isfinite(o->alpha))
        return pt_err(PT_EINVAL, "LoRA options: alpha %g must be positive and finite", o->alpha);
    if (o->targets == 0 || (o->targets & ~(unsigned)PT_LORA_ALL) != 0)
        return pt_err(PT_EINVAL, "LoRA options: targets 0x%x must be a non-empty set of "
                      "PT_LORA_* bits (0x%x)", o->targets, (unsigned)PT_LORA_ALL);
    if (o->dropout != 0.0)
        return pt_err(PT_EUNSUPPORTED, "LoRA options: dropout %g is not supported (must be 0)",
                      o->dropout);
    return PT_OK;
}

size_t pt_model_base_tensor_count(const pt_model *m)
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
    if (!m)
        return pt_err(PT_EINVAL, "pt_model_set_lora_enabled: NULL model");
    if (!m->lora)
        return pt_err(PT_ESTATE, "pt_model_set_lora_enabled: the model has no LoRA adapters");
    m->lora->disabled = !enabled;
    return PT_OK;
}

bool pt_model_lora_enabled(const pt_model *m)
{
    return m && m->lora && !m->lora->disabled;
}

bool pt_lora_disabled(const pt_model *m)
{
    return m && m->lora && m->lora->disabled;
}

int pt_lora_check_backward(const pt_model *m, const char *who)
{
    if (pt_lora_disabled(m))
        return pt_err(PT_ESTATE, "%s: the model's LoRA adapters are switched off "
                      "(pt_model_set_lora_enabled) and its base is frozen: nothing would get a "
                      "gradient", who);
    return PT_OK;
}

int pt_model_get_lora(pt_lora_options *out, const pt_model *m)
{
    if (!out || !m)
        return pt_err(PT_EINVAL, "pt_model_get_lora: NULL argument");
    if (!m->lora)
        return pt_err(PT_ESTATE, "pt_model_get_lora: the model has no LoRA adapters");
    *out = m->lora->opts;
    return PT_OK;
}

static void lora_free(struct pt_lora *l)
{
    if (!l)
        return;
    pt_free_aligned(l->params);
    pt_free_aligned(l->grads);
    pt_free(l->mods);
    pt_free(l->names);
    pt_free(l);
}

void pt_lora_release(pt_model *m)
{
    if (!m)
        return;
    lora_free(m->lora);
    m->lora = NULL;
}

/* Release the base's gradient block (the base is about to be frozen). */
static void drop_base_grads(pt_model *m)
{
    pt_free_aligned(m->grads);
    m->grads = NULL;
    pt_layer_w *gl = m->g.layers;
    memset(gl, 0, (size_t)m->cfg.num_hidden_layers * sizeof *gl);
    memset(&m->g, 0, sizeof m->g);
    m->g.layers = gl;
    for (size_t i = 0; i < m->ntensors; i++)
        m->tensors[i].grad = NULL;
}

int pt_model_add_lora(pt_model *m, const pt_lora_options *o)
{
    if (!m || !o)
        return pt_err(PT_EINVAL, "pt_model_add_lora: NULL argument");
    int st = check_options(o);
    if (st != PT_OK)
        return st;
    if (m->lora)
        return pt_err(PT_ESTATE, "pt_model_add_lora: the model already has LoRA adapters "
                      "(merge or remove them first)");
    const int L = m->cfg.num_hidden_layers;
    const size_t r = (size_t)o->rank;
    size_t per_layer = 0;
    for (int k = 0; k < PT_LORA_NMOD; k++)
        per_layer += (o->targets >> k) & 1u;
    const size_t nad = (size_t)L * per_layer;

    struct pt_lora *l = pt_calloc(1, sizeof *l);
    if (!l)
        return PT_ENOMEM;
    l->opts = *o;
    l->scale = (float)(o->alpha / (double)o->rank);
    l->nbase = m->ntensors;
    l->nadapters = nad;
    l->mods = pt_calloc((size_t)L * PT_LORA_NMOD, sizeof *l->mods);
    l->names = pt_calloc(2 * nad, LORA_NAME_LEN);
    pt_tensor_ref *tab = pt_malloc_array(m->ntensors + 2 * nad, sizeof *tab);
    if (!l->mods || !l->names || !tab) {
        pt_free(tab);
        lora_free(l);
        return PT_ENOMEM;
    }
    /* Layout: A then B of each adapter, each 16-float aligned. */
    size_t off = 0;
    bool overflow = false;
    for (int layer = 0; layer < L; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            if (!((o->targets >> k) & 1u))
                continue;
            size_t in, out, na, nb;
            pt_lora_module_dims(m, k, &in, &out);
            if (!pt_mul_size(r, in, &na) || !pt_mul_size(out, r, &nb) ||
                !pt_add_size((off + 15) & ~(size_t)15, na, &off) ||
                !pt_add_size((off + 15) & ~(size_t)15, nb, &off) || off > ((size_t)1 << 58))
                overflow = true;
        }
    if (overflow || off > ((size_t)1 << 60) / sizeof(float)) {
        pt_free(tab);
        lora_free(l);
        return pt_err(PT_ENOMEM, "pt_model_add_lora: rank %d adapters are too large", o->rank);
    }
    l->num_floats = off + 16;
    l->params = pt_malloc_aligned(l->num_floats * sizeof(float));
    l->grads = pt_malloc_aligned(l->num_floats * sizeof(float));
    if (!l->params || !l->grads) {
        pt_free(tab);
        lora_free(l);
        return pt_err_prefix(PT_ENOMEM, "LoRA adapters of rank %d", o->rank);
    }
    memset(l->params, 0, l->num_floats * sizeof(float));
    memset(l->grads, 0, l->num_floats * sizeof(float));

    memcpy(tab, m->tensors, m->ntensors * sizeof *tab);
    pt_rng rng;
    pt_rng_seed(&rng, o->seed);
    size_t pos = 0, ti = m->ntensors;
    for (int layer = 0; layer < L; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            if (!((o->targets >> k) & 1u))
                continue;
            pt_lora_pair *p = &l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k];
            pt_lora_module_dims(m, k, &p->in, &p->out);
            pos = (pos + 15) & ~(size_t)15;
            p->a = l->params + pos;
            p->da = l->grads + pos;
            pos += r * p->in;
            pos = (pos + 15) & ~(size_t)15;
            p->b = l->params + pos;
            p->db = l->grads + pos;
            pos += p->out * r;
            /* torch.nn.init.kaiming_uniform_(A, a=sqrt(5)): bound = 1/sqrt(fan_in). */
            double bound = 1.0 / sqrt((double)p->in);
            for (size_t j = 0; j < r * p->in; j++)
                p->a[j] = (float)((2.0 * pt_rng_uniform_double(&rng) - 1.0) * bound);
            for (int ab = 0; ab < 2; ab++) {
                char *name = l->names + (ti - m->ntensors) * LORA_NAME_LEN;
                snprintf(name, LORA_NAME_LEN, "model.layers.%d.%s.lora_%c.weight", layer,
                         k_modules[k], ab ? 'B' : 'A');
                pt_tensor_ref *t = &tab[ti++];
                memset(t, 0, sizeof *t);
                t->name = name;
                t->data = ab ? p->b : p->a;
                t->grad = ab ? p->db : p->da;
                t->ndim = 2;
                t->shape[0] = ab ? (int64_t)p->out : (int64_t)r;
                t->shape[1] = ab ? (int64_t)r : (int64_t)p->in;
                t->numel = r * (ab ? p->out : p->in);
                t->no_decay = false;
                t->trainable = true;
                t->adapter = true;
            }
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
    return PT_OK;
}

int pt_model_remove_lora(pt_model *m)
{
    if (!m)
        return pt_err(PT_EINVAL, "pt_model_remove_lora: NULL model");
    if (!m->lora)
        return pt_err(PT_ESTATE, "pt_model_remove_lora: the model has no LoRA adapters");
    m->ntensors = m->lora->nbase;
    for (size_t i = 0; i < m->ntensors; i++) {
        m->tensors[i].trainable = true;
        m->tensors[i].grad = NULL;
    }
    pt_lora_release(m);
    return PT_OK;
}

int pt_model_merge_lora(pt_model *m)
{
    if (!m)
        return pt_err(PT_EINVAL, "pt_model_merge_lora: NULL model");
    struct pt_lora *l = m->lora;
    if (!l)
        return pt_err(PT_ESTATE, "pt_model_merge_lora: the model has no LoRA adapters");
    const size_t r = (size_t)l->opts.rank;
    for (int layer = 0; layer < m->cfg.num_hidden_layers; layer++)
        for (int k = 0; k < PT_LORA_NMOD; k++) {
            const pt_lora_pair *p = &l->mods[(size_t)layer * PT_LORA_NMOD + (size_t)k];
            if (!p->a)
                continue;
            /* W [out, in] += scale * B [out, r] A [r, in] */
            pt_sgemm(false, false, p->out, p->in, r, l->scale, p->b, r, p->a, p->in, 1.0f,
                     base_weight(m, layer, k), p->in);
        }
    return pt_model_remove_lora(m);
}

void pt_lora_attach(pt_linear *lin, const pt_model *m, int layer, unsigned mask, float *scratch)
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
        pt_lora_module_dims(m, k, &in, &out);
        off += out;
    }
}

int pt_lora_scratch(float **buf, size_t *cap, const pt_model *m, size_t rows)
{
    if (!m->lora)
        return PT_OK;
    size_t need;
    if (!pt_mul_size(rows, 4 * (size_t)m->lora->opts.rank, &need))
        return pt_err(PT_ENOMEM, "LoRA scratch for %zu rows overflows", rows);
    if (*cap >= need && *buf)
        return PT_OK;
    float *p = pt_malloc_aligned(need * sizeof(float));
    if (!p)
        return pt_err_prefix(PT_ENOMEM, "LoRA scratch for %zu rows", rows);
    pt_free_aligned(*buf);
    *buf = p;
    *cap = need;
    return PT_OK;
}

void pt_lora_zero_grads(pt_model *m)
{
    if (m && m->lora)
        memset(m->lora->grads, 0, m->lora->num_floats * sizeof(float));
}
