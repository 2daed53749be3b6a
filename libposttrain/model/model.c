/* pt_model: parameters in one aligned block, the tensor table in Hugging Face
 * naming, seeded initialisation, gradients. */
#include "model/transformer.h"

#include "model/lora.h"
#include "core/core.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 96

/* One entry of the layout being built. */
typedef struct spec {
    char name[NAME_MAX_LEN];
    int ndim;
    int64_t rows, cols;
    bool no_decay;
    bool pad;        /* align the start to 16 floats (false keeps it adjacent to the previous one) */
    int kind;        /* 0 matrix/embedding (normal init), 1 norm (ones), 2 bias (zeros) */
    int layer;       /* -1 for global tensors */
    int slot;        /* which pointer of pt_layer_w / pt_weights */
} spec;

enum { G_EMBED, G_NORM, G_HEAD };
enum { L_LN1, L_WQ, L_WK, L_WV, L_BQ, L_BK, L_BV, L_QN, L_KN, L_WO, L_LN2, L_WG, L_WU, L_WD };

static float **layer_slot(pt_layer_w *lw, int slot)
{
    switch (slot) {
    case L_LN1: return &lw->ln1;
    case L_WQ: return &lw->wq;
    case L_WK: return &lw->wk;
    case L_WV: return &lw->wv;
    case L_BQ: return &lw->bq;
    case L_BK: return &lw->bk;
    case L_BV: return &lw->bv;
    case L_QN: return &lw->qn;
    case L_KN: return &lw->kn;
    case L_WO: return &lw->wo;
    case L_LN2: return &lw->ln2;
    case L_WG: return &lw->wg;
    case L_WU: return &lw->wu;
    default: return &lw->wd;
    }
}

static float **global_slot(pt_weights *w, int slot)
{
    switch (slot) {
    case G_EMBED: return &w->embed;
    case G_NORM: return &w->norm;
    default: return &w->lm_head;
    }
}

static void add_spec(spec *s, size_t *n, int layer, int slot, const char *name, int64_t rows,
                     int64_t cols, int kind, bool pad)
{
    spec *e = &s[(*n)++];
    if (layer >= 0)
        snprintf(e->name, sizeof e->name, "model.layers.%d.%s", layer, name);
    else
        snprintf(e->name, sizeof e->name, "%s", name);
    e->ndim = cols > 0 ? 2 : 1;
    e->rows = rows;
    e->cols = cols > 0 ? cols : 1;
    e->kind = kind;
    e->no_decay = kind != 0;
    e->pad = pad;
    e->layer = layer;
    e->slot = slot;
}

/* Checks this file relies on for memory safety (pt_model_config_validate
 * does the full job; this keeps create safe on its own). */
static int check_shapes(const pt_model_config *c)
{
    if (c->vocab_size <= 0 || c->hidden_size <= 0 || c->intermediate_size <= 0 ||
        c->num_hidden_layers <= 0 || c->num_attention_heads <= 0 || c->num_key_value_heads <= 0 ||
        c->head_dim <= 0)
        return pt_err(PT_ECONFIG, "model config: sizes must be positive (vocab %d, hidden %d, "
                      "intermediate %d, layers %d, heads %d, kv heads %d, head_dim %d)",
                      c->vocab_size, c->hidden_size, c->intermediate_size, c->num_hidden_layers,
                      c->num_attention_heads, c->num_key_value_heads, c->head_dim);
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return pt_err(PT_ECONFIG, "model config: num_attention_heads %d is not a multiple of "
                      "num_key_value_heads %d", c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim % 2 != 0)
        return pt_err(PT_ECONFIG, "model config: head_dim %d must be even for rotary embeddings",
                      c->head_dim);
    if (c->num_hidden_layers > 100000)
        return pt_err(PT_ECONFIG, "model config: num_hidden_layers %d is too large",
                      c->num_hidden_layers);
    if (c->arch < PT_ARCH_LLAMA || c->arch > PT_ARCH_MISTRAL)
        return pt_err(PT_EUNSUPPORTED, "model config: unknown architecture %d", c->arch);
    if (c->rope_type < PT_ROPE_DEFAULT || c->rope_type > PT_ROPE_LINEAR)
        return pt_err(PT_EUNSUPPORTED, "model config: unknown rope type %d", c->rope_type);
    if (!(c->rope_theta > 0) || !(c->rms_norm_eps >= 0) || !isfinite(c->rms_norm_eps))
        return pt_err(PT_ECONFIG, "model config: rope_theta %g and rms_norm_eps %g must be "
                      "positive", c->rope_theta, c->rms_norm_eps);
    if (c->rope_type != PT_ROPE_DEFAULT && !(c->rope_factor > 0))
        return pt_err(PT_ECONFIG, "model config: rope_scaling factor %g must be positive",
                      c->rope_factor);
    if (c->rope_type == PT_ROPE_LLAMA3 &&
        (!(c->rope_low_freq_factor > 0) || !(c->rope_high_freq_factor > c->rope_low_freq_factor) ||
         c->rope_original_max_position_embeddings <= 0))
        return pt_err(PT_ECONFIG, "model config: llama3 rope_scaling needs 0 < low_freq_factor "
                      "(%g) < high_freq_factor (%g) and original_max_position_embeddings > 0 (%d)",
                      c->rope_low_freq_factor, c->rope_high_freq_factor,
                      c->rope_original_max_position_embeddings);
    if (c->sliding_window < 0)
        return pt_err(PT_ECONFIG, "model config: sliding_window %d is negative", c->sliding_window);
    return PT_OK;
}

static void set_pointers(pt_model *m, float *block, pt_weights *w, pt_layer_w *layers,
                         const spec *specs)
{
    w->layers = layers;
    for (size_t i = 0; i < m->ntensors; i++) {
        float *p = block + m->offsets[i];
        if (specs[i].layer >= 0)
            *layer_slot(&layers[specs[i].layer], specs[i].slot) = p;
        else
            *global_slot(w, specs[i].slot) = p;
    }
    if (m->cfg.tie_word_embeddings)
        w->lm_head = w->embed;
}

static void init_params(pt_model *m, const spec *specs, uint64_t seed)
{
    pt_rng rng;
    pt_rng_seed(&rng, seed);
    double sd = m->cfg.initializer_range;
    for (size_t i = 0; i < m->ntensors; i++) {
        float *p = m->params + m->offsets[i];
        size_t n = m->tensors[i].numel;
        for (size_t j = 0; j < n; j++)
            p[j] = specs[i].kind == 0 ? (float)(sd * pt_rng_normal(&rng))
                                      : (specs[i].kind == 1 ? 1.0f : 0.0f);
    }
}

static int create(pt_model **out, const pt_model_config *cfg, uint64_t seed, bool random_init);

int pt_model_create(pt_model **out, const pt_model_config *cfg, uint64_t seed)
{
    return create(out, cfg, seed, true);
}

int pt_model_create_uninit(pt_model **out, const pt_model_config *cfg)
{
    return create(out, cfg, 0, false);
}

static int create(pt_model **out, const pt_model_config *cfg, uint64_t seed, bool random_init)
{
    if (!out || !cfg)
        return pt_err(PT_EINVAL, "pt_model_create: NULL argument");
    *out = NULL;
    if (cfg->size != sizeof(pt_model_config))
        return pt_err(PT_EINVAL, "pt_model_create: config size %zu, expected %zu (call "
                      "pt_model_config_init first)", cfg->size, sizeof(pt_model_config));
    int st = pt_model_config_validate(cfg);
    if (st != PT_OK)
        return st;
    st = check_shapes(cfg);
    if (st != PT_OK)
        return st;

    const int L = cfg->num_hidden_layers;
    const int64_t V = cfg->vocab_size, H = cfg->hidden_size, I = cfg->intermediate_size;
    const int64_t hd = cfg->head_dim, Q = (int64_t)cfg->num_attention_heads * hd;
    const int64_t KV = (int64_t)cfg->num_key_value_heads * hd;
    size_t max_specs = 3 + (size_t)L * 14;
    spec *specs = pt_malloc_array(max_specs, sizeof *specs);
    pt_model *m = pt_calloc(1, sizeof *m);
    if (!specs || !m) {
        pt_free(specs);
        pt_free(m);
        return PT_ENOMEM;
    }
    m->cfg = *cfg;
    m->q_dim = (int)Q;
    m->kv_dim = (int)KV;

    size_t n = 0;
    add_spec(specs, &n, -1, G_EMBED, "model.embed_tokens.weight", V, H, 0, true);
    for (int l = 0; l < L; l++) {
        add_spec(specs, &n, l, L_LN1, "input_layernorm.weight", H, 0, 1, true);
        add_spec(specs, &n, l, L_WQ, "self_attn.q_proj.weight", Q, H, 0, true);
        add_spec(specs, &n, l, L_WK, "self_attn.k_proj.weight", KV, H, 0, false);
        add_spec(specs, &n, l, L_WV, "self_attn.v_proj.weight", KV, H, 0, false);
        if (cfg->attention_bias) {
            add_spec(specs, &n, l, L_BQ, "self_attn.q_proj.bias", Q, 0, 2, true);
            add_spec(specs, &n, l, L_BK, "self_attn.k_proj.bias", KV, 0, 2, false);
            add_spec(specs, &n, l, L_BV, "self_attn.v_proj.bias", KV, 0, 2, false);
        }
        if (cfg->qk_norm) {
            add_spec(specs, &n, l, L_QN, "self_attn.q_norm.weight", hd, 0, 1, true);
            add_spec(specs, &n, l, L_KN, "self_attn.k_norm.weight", hd, 0, 1, true);
        }
        add_spec(specs, &n, l, L_WO, "self_attn.o_proj.weight", H, Q, 0, true);
        add_spec(specs, &n, l, L_LN2, "post_attention_layernorm.weight", H, 0, 1, true);
        add_spec(specs, &n, l, L_WG, "mlp.gate_proj.weight", I, H, 0, true);
        add_spec(specs, &n, l, L_WU, "mlp.up_proj.weight", I, H, 0, false);
        add_spec(specs, &n, l, L_WD, "mlp.down_proj.weight", H, I, 0, true);
    }
    add_spec(specs, &n, -1, G_NORM, "model.norm.weight", H, 0, 1, true);
    if (!cfg->tie_word_embeddings)
        add_spec(specs, &n, -1, G_HEAD, "lm_head.weight", V, H, 0, true);

    m->ntensors = n;
    m->tensors = pt_calloc(n, sizeof *m->tensors);
    m->offsets = pt_calloc(n, sizeof *m->offsets);
    m->names = pt_calloc(n, NAME_MAX_LEN);
    m->w.layers = pt_calloc((size_t)L, sizeof(pt_layer_w));
    m->g.layers = pt_calloc((size_t)L, sizeof(pt_layer_w));
    m->inv_freq = pt_calloc((size_t)hd / 2, sizeof(float));
    if (!m->tensors || !m->offsets || !m->names || !m->w.layers || !m->g.layers || !m->inv_freq) {
        pt_free(specs);
        pt_model_free(m);
        return PT_ENOMEM;
    }
    size_t off = 0;
    uint64_t nparams = 0;
    for (size_t i = 0; i < n; i++) {
        size_t numel;
        if (specs[i].pad)
            off = (off + 15) & ~(size_t)15;
        if (!pt_mul_size((size_t)specs[i].rows, (size_t)specs[i].cols, &numel) ||
            !pt_add_size(off, numel, &off) || off > ((size_t)1 << 60) / sizeof(float)) {
            pt_free(specs);
            pt_model_free(m);
            return pt_err(PT_ENOMEM, "model: parameter block size overflows at tensor '%s'",
                          specs[i].name);
        }
        m->offsets[i] = off - numel;
        char *name = m->names + i * NAME_MAX_LEN;
        memcpy(name, specs[i].name, NAME_MAX_LEN);
        pt_tensor_ref *t = &m->tensors[i];
        t->name = name;
        t->ndim = specs[i].ndim;
        t->shape[0] = specs[i].rows;
        t->shape[1] = specs[i].cols;
        t->numel = numel;
        t->no_decay = specs[i].no_decay;
        t->trainable = true;
        nparams += numel;
    }
    m->num_floats = (off + 15) & ~(size_t)15;
    m->num_params = nparams;
    m->params = pt_malloc_aligned(m->num_floats * sizeof(float));
    if (!m->params) {
        pt_free(specs);
        pt_model_free(m);
        return pt_err_prefix(PT_ENOMEM, "model: %zu parameters", (size_t)nparams);
    }
    memset(m->params, 0, m->num_floats * sizeof(float));
    for (size_t i = 0; i < n; i++)
        m->tensors[i].data = m->params + m->offsets[i];
    set_pointers(m, m->params, &m->w, m->w.layers, specs);
    if (random_init)
        init_params(m, specs, seed);
    pt_rope_inv_freq(m->inv_freq, cfg->head_dim, cfg->rope_theta, cfg->rope_type, cfg->rope_factor,
                     cfg->rope_low_freq_factor, cfg->rope_high_freq_factor,
                     cfg->rope_original_max_position_embeddings);
    pt_free(specs);
    *out = m;
    return PT_OK;
}

void pt_model_free(pt_model *m)
{
    if (!m)
        return;
    pt_free_aligned(m->params);
    pt_free_aligned(m->grads);
    pt_free(m->tensors);
    pt_free(m->offsets);
    pt_free(m->names);
    pt_free(m->w.layers);
    pt_free(m->g.layers);
    pt_free(m->inv_freq);
    pt_lora_release(m);
    if (m->attachment_free)
        m->attachment_free(m->attachment);
    pt_free(m);
}

void pt_model_set_attachment(pt_model *m, void *data, void (*free_fn)(void *))
{
    if (m->attachment_free && m->attachment != data)
        m->attachment_free(m->attachment);
    m->attachment = data;
    m->attachment_free = free_fn;
}

void *pt_model_attachment(const pt_model *m)
{
    return m ? m->attachment : NULL;
}

int pt_model_get_config(pt_model_config *out, const pt_model *m)
{
    if (!out || !m)
        return pt_err(PT_EINVAL, "pt_model_get_config: NULL argument");
    *out = m->cfg;
    return PT_OK;
}

int pt_model_num_params(uint64_t *out, const pt_model *m)
{
    if (!out || !m)
        return pt_err(PT_EINVAL, "pt_model_num_params: NULL argument");
    *out = m->num_params;
    return PT_OK;
}

int pt_model_num_trainable_params(uint64_t *out, const pt_model *m)
{
    if (!out || !m)
        return pt_err(PT_EINVAL, "pt_model_num_trainable_params: NULL argument");
    uint64_t n = 0;
    for (size_t i = 0; i < m->ntensors; i++)
        if (m->tensors[i].trainable)
            n += m->tensors[i].numel;
    *out = n;
    return PT_OK;
}

static void fill_tensor_info(pt_tensor_info *out, const pt_tensor_ref *t)
{
    memset(out, 0, sizeof *out);
    out->size = sizeof *out;
    out->name = t->name;
    out->data = t->data;
    out->grad = t->grad;
    out->ndim = t->ndim;
    out->shape[0] = t->shape[0];
    out->shape[1] = t->shape[1];
    out->numel = t->numel;
    out->trainable = t->trainable;
    out->adapter = t->adapter;
    out->no_decay = t->no_decay;
}

int pt_model_num_tensors(size_t *out, const pt_model *m)
{
    if (!out || !m)
        return pt_err(PT_EINVAL, "pt_model_num_tensors: NULL argument");
    *out = m->ntensors;
    return PT_OK;
}

int pt_model_tensor_info(pt_tensor_info *out, const pt_model *m, size_t index)
{
    if (!out || !m)
        return pt_err(PT_EINVAL, "pt_model_tensor_info: NULL argument");
    if (index >= m->ntensors)
        return pt_err(PT_ERANGE, "pt_model_tensor_info: index %zu is not below the %zu tensors",
                      index, m->ntensors);
    fill_tensor_info(out, &m->tensors[index]);
    return PT_OK;
}

int pt_model_find_tensor_info(pt_tensor_info *out, const pt_model *m, const char *name)
{
    if (!out || !m || !name)
        return pt_err(PT_EINVAL, "pt_model_find_tensor_info: NULL argument");
    const pt_tensor_ref *t = pt_model_find_tensor(m, name);
    if (!t)
        return pt_err(PT_ENOTFOUND, "pt_model_find_tensor_info: the model has no tensor '%s'", name);
    fill_tensor_info(out, t);
    return PT_OK;
}

size_t pt_model_tensor_count(const pt_model *m)
{
    return m ? m->ntensors : 0;
}

const pt_tensor_ref *pt_model_tensor(const pt_model *m, size_t i)
{
    if (!m || i >= m->ntensors)
        return NULL;
    return &m->tensors[i];
}

const pt_tensor_ref *pt_model_find_tensor(const pt_model *m, const char *name)
{
    if (!m || !name)
        return NULL;
    for (size_t i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

/* Map a pointer into the parameter block to the same place in the gradient block. */
static float *to_grad(const pt_model *m, const float *p)
{
    return p ? m->grads + (p - m->params) : NULL;
}

int pt_model_alloc_grads(pt_model *m)
{
    if (!m)
        return pt_err(PT_EINVAL, "pt_model_alloc_grads: NULL model");
    if (m->grads || m->lora)
        return PT_OK; /* with LoRA the base is frozen: only the adapters have gradients */
    m->grads = pt_malloc_aligned(m->num_floats * sizeof(float));
    if (!m->grads)
        return pt_err_prefix(PT_ENOMEM, "model gradients");
    memset(m->grads, 0, m->num_floats * sizeof(float));
    for (size_t i = 0; i < m->ntensors; i++)
        m->tensors[i].grad = m->grads + m->offsets[i];
    m->g.embed = to_grad(m, m->w.embed);
    m->g.norm = to_grad(m, m->w.norm);
    m->g.lm_head = to_grad(m, m->w.lm_head);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const pt_layer_w *a = &m->w.layers[l];
        pt_layer_w *b = &m->g.layers[l];
        b->ln1 = to_grad(m, a->ln1);
        b->wq = to_grad(m, a->wq);
        b->wk = to_grad(m, a->wk);
        b->wv = to_grad(m, a->wv);
        b->bq = to_grad(m, a->bq);
        b->bk = to_grad(m, a->bk);
        b->bv = to_grad(m, a->bv);
        b->qn = to_grad(m, a->qn);
        b->kn = to_grad(m, a->kn);
        b->wo = to_grad(m, a->wo);
        b->ln2 = to_grad(m, a->ln2);
        b->wg = to_grad(m, a->wg);
        b->wu = to_grad(m, a->wu);
        b->wd = to_grad(m, a->wd);
    }
    return PT_OK;
}

int pt_model_zero_grad(pt_model *m)
{
    if (!m)
        return pt_err(PT_EINVAL, "pt_model_zero_grad: NULL model");
    if (m->grads)
        memset(m->grads, 0, m->num_floats * sizeof(float));
    pt_lora_zero_grads(m);
    return PT_OK;
}
