/* pt_model: parameters in one aligned block, the tensor table in Hugging Face
 * naming, seeded initialisation, gradients. */
#include "model/transformer.h"

#include "model/lora.h"
#include "model/schema.h"
#include "core/core.h"
#include "kernels/ops.h"

#include <stddef.h>
#include <string.h>

/* Where each tensor row's pointer lives: in pt_weights (global rows) or in
 * pt_layer_w (per-layer rows), by schema id. */
static const size_t k_global_slot[PT_T_COUNT] = {
    [PT_T_EMBED] = offsetof(pt_weights, embed),
    [PT_T_NORM] = offsetof(pt_weights, norm),
    [PT_T_LM_HEAD] = offsetof(pt_weights, lm_head),
};
static const size_t k_layer_slot[PT_T_COUNT] = {
    [PT_T_LN1] = offsetof(pt_layer_w, ln1), [PT_T_WQ] = offsetof(pt_layer_w, wq),
    [PT_T_WK] = offsetof(pt_layer_w, wk),   [PT_T_WV] = offsetof(pt_layer_w, wv),
    [PT_T_BQ] = offsetof(pt_layer_w, bq),   [PT_T_BK] = offsetof(pt_layer_w, bk),
    [PT_T_BV] = offsetof(pt_layer_w, bv),   [PT_T_QN] = offsetof(pt_layer_w, qn),
    [PT_T_KN] = offsetof(pt_layer_w, kn),   [PT_T_WO] = offsetof(pt_layer_w, wo),
    [PT_T_LN2] = offsetof(pt_layer_w, ln2), [PT_T_WG] = offsetof(pt_layer_w, wg),
    [PT_T_WU] = offsetof(pt_layer_w, wu),   [PT_T_WD] = offsetof(pt_layer_w, wd),
};

float **pt__weights_slot(pt_weights *w, int layer, pt_tensor_id id)
{
    if (pt__tensor_row_get(id)->per_layer)
        return (float **)(void *)((char *)&w->layers[layer] + k_layer_slot[id]);
    return (float **)(void *)((char *)w + k_global_slot[id]);
}

/* Point w's slots at the tensors of `block` (the parameters or the
 * gradients); a row that is absent but tied to another uses that one's. */
static void set_pointers(pt_model *m, float *block, pt_weights *w)
{
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++) {
        const pt_schema_tensor *s = &m->layout[i];
        *pt__weights_slot(w, s->layer, s->row->id) = block + m->offsets[i];
    }
    for (int id = 0; id < PT_T_COUNT; id++) {
        const pt_tensor_row *r = pt__tensor_row_get((pt_tensor_id)id);
        if (!r->per_layer && r->tied_to != PT_T_COUNT && !pt__tensor_row_present(r, &m->cfg))
            *pt__weights_slot(w, -1, r->id) = *pt__weights_slot(w, -1, r->tied_to);
    }
}

static void init_params(pt_model *m, uint64_t seed)
{
    pt_rng rng;
    pt__rng_seed(&rng, seed);
    double sd = m->cfg.initializer_range;
    for (size_t i = 0; i < m->ntensors; i++) {
        float *p = m->params + m->offsets[i];
        size_t n = m->tensors[i].numel;
        pt_tensor_init kind = m->layout[i].row->init;
        for (size_t j = 0; j < n; j++)
            p[j] = kind == PT_INIT_NORMAL ? (float)(sd * pt__rng_normal(&rng))
                                          : (kind == PT_INIT_ONES ? 1.0f : 0.0f);
    }
}

/* The tensor table and the offsets of the schema's tensors (a row that
 * follows its predecessor stays adjacent to it, the others start 16-float
 * aligned); sets num_floats and num_params. */
static int lay_out(pt_model *m)
{
    const size_t n = m->ntensors;
    size_t off = 0;
    uint64_t nparams = 0;
    for (size_t i = 0; i < n; i++) {
        const pt_schema_tensor *s = &m->layout[i];
        if (!s->row->follows)
            off = (off + 15) & ~(size_t)15;
        if (!pt__add_size(off, s->numel, &off) || off > ((size_t)1 << 60) / sizeof(float))
            return pt__err(PT_ENOMEM, "model: parameter block size overflows at tensor '%s'",
                          s->name);
        m->offsets[i] = off - s->numel;
        pt_tensor_ref *t = &m->tensors[i];
        t->name = s->name;
        t->ndim = s->ndim;
        t->shape[0] = s->shape[0];
        t->shape[1] = s->shape[1];
        t->numel = s->numel;
        t->no_decay = s->row->init != PT_INIT_NORMAL;
        t->trainable = true;
        t->id = (int)s->row->id;
        t->layer = s->layer;
        nparams += s->numel;
    }
    m->num_floats = (off + 15) & ~(size_t)15;
    m->num_params = nparams;
    return PT_OK;
}

/* c: a full-size copy of the caller's configuration. */
static int create(pt_model **out, const pt_model_config *cfg, uint64_t seed, bool random_init)
{
    const pt_model_config c = *cfg;
    int st = pt_model_config_validate(&c);
    if (st != PT_OK)
        return st;
    pt_model *m = pt__calloc(1, sizeof *m);
    if (!m)
        return PT_ENOMEM;
    m->cfg = c;
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->bf16_lock, NULL);
    m->q_dim = (int)pt__dim_size(PT_DIM_Q, &c);
    m->kv_dim = (int)pt__dim_size(PT_DIM_KV, &c);
    const size_t L = (size_t)c.num_hidden_layers;
    if ((st = pt__schema_tensors(&m->layout, &m->ntensors, &c)) != PT_OK) {
        pt_model_free(m);
        return st;
    }
    m->tensors = pt__calloc(m->ntensors, sizeof *m->tensors);
    m->offsets = pt__calloc(m->ntensors, sizeof *m->offsets);
    m->w.layers = pt__calloc(L, sizeof(pt_layer_w));
    m->g.layers = pt__calloc(L, sizeof(pt_layer_w));
    m->inv_freq = pt__calloc((size_t)c.head_dim / 2, sizeof(float));
    if (!m->tensors || !m->offsets || !m->w.layers || !m->g.layers || !m->inv_freq)
        st = PT_ENOMEM;
    if (st == PT_OK)
        st = lay_out(m);
    if (st == PT_OK && !(m->params = pt__malloc_aligned(m->num_floats * sizeof(float))))
        st = pt__err_prefix(PT_ENOMEM, "model: %zu parameters", (size_t)m->num_params);
    if (st != PT_OK) {
        pt_model_free(m);
        return st;
    }
    pt__model_zero(m->params, m->num_floats);
    for (size_t i = 0; i < m->ntensors; i++)
        m->tensors[i].data = m->params + m->offsets[i];
    set_pointers(m, m->params, &m->w);
    if (random_init)
        init_params(m, seed);
    pt__rope_inv_freq(m->inv_freq, c.head_dim, c.rope_theta, c.rope_type, c.rope_factor,
                     c.rope_low_freq_factor, c.rope_high_freq_factor,
                     c.rope_original_max_position_embeddings);
    *out = m;
    return PT_OK;
}

int pt_model_create(pt_model **out, const pt_model_config *cfg, uint64_t seed)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(cfg);
    pt_model_config c;
    PT_CHECK_STRUCT_READ(c, cfg, pt_model_config_init);
    return create(out, &c, seed, true);
}

int pt__model_create_uninit(pt_model **out, const pt_model_config *cfg)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(cfg);
    pt_model_config c;
    PT_CHECK_STRUCT_READ(c, cfg, pt_model_config_init);
    return create(out, &c, 0, false);
}

pt_model *pt__model_retain(pt_model *m)
{
    if (m)
        atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

/* The host's pt_model_free is a release: the last reference frees. */
void pt__model_release(pt_model *m)
{
    if (!m || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    pt__free_aligned(m->params);
    pt__free_aligned(m->params16);
    pt_free(m->qtype);
    pt_free(m->qoff);
    pt__free_aligned(m->qblocks);
    pthread_mutex_destroy(&m->bf16_lock);
    pt__free_aligned(m->grads);
    pt_free(m->tensors);
    pt_free(m->offsets);
    pt_free(m->layout);
    pt_free(m->w.layers);
    pt_free(m->g.layers);
    pt_free(m->inv_freq);
    pt__lora_release(m);
    if (m->attachment_free)
        m->attachment_free(m->attachment);
    pt_free(m);
}

void pt_model_free(pt_model *m)
{
    pt__model_release(m);
}

int pt_model_clone(pt_model **out, const pt_model *src)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(src);
    if (pt__model_is_quantized(src) || src->lora || src->bf16_stored)
        return pt__err(PT_EUNSUPPORTED, "%s: the model's weights are %s: only a base in FP32 is cloned", __func__,
                       pt__model_is_quantized(src) ? "quantized" : src->lora ? "LoRA-adapted" : "stored in BF16");
    int st = create(out, &src->cfg, 0, false);
    if (!st)
        memcpy((*out)->params, src->params, src->num_floats * sizeof *src->params);
    return st;
}

void pt__model_set_attachment(pt_model *m, void *data, void (*free_fn)(void *))
{
    if (m->attachment_free && m->attachment != data)
        m->attachment_free(m->attachment);
    m->attachment = data;
    m->attachment_free = free_fn;
}

void *pt__model_attachment(const pt_model *m)
{
    return m ? m->attachment : NULL;
}

int pt_model_get_config(pt_model_config *out, const pt_model *m)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(m);
    return PT_STRUCT_GET(out, &m->cfg, pt_model_config_init);
}

uint64_t pt_model_param_count(const pt_model *m)
{
    return m ? m->num_params : 0;
}

uint64_t pt_model_trainable_param_count(const pt_model *m)
{
    uint64_t n = 0;
    for (size_t i = 0; m && i < m->ntensors; i++)
        if (m->tensors[i].trainable)
            n += m->tensors[i].numel;
    return n;
}

PT_DEPRECATED_GETTER(uint64_t, pt_model_num_params, out, pt_model, m, pt_model_param_count)

PT_DEPRECATED_GETTER(uint64_t, pt_model_num_trainable_params, out, pt_model, m, pt_model_trainable_param_count)

PT_ZERO_INIT(pt_tensor_info_init, pt_tensor_info, info)

/* The caller's info (its own size) filled from t. */
static void fill_tensor_info(pt_tensor_info *out, const pt_tensor_ref *t)
{
    pt_tensor_info full;
    pt_tensor_info_init(&full);
    full.name = t->name;
    full.data = t->data;
    full.grad = t->grad;
    full.ndim = t->ndim;
    full.shape[0] = t->shape[0];
    full.shape[1] = t->shape[1];
    full.numel = t->numel;
    full.trainable = t->trainable;
    full.adapter = t->adapter;
    full.no_decay = t->no_decay;
    pt__struct_write(out, &full);
}

PT_DEPRECATED_GETTER(size_t, pt_model_num_tensors, out, pt_model, m, pt_model_tensor_count)

int pt_model_tensor_info(pt_tensor_info *out, const pt_model *m, size_t index)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(m);
    PT_CHECK_STRUCT_OUT(out, pt_tensor_info, pt_tensor_info_init);
    if (index >= m->ntensors)
        return pt__err(PT_ERANGE, "pt_model_tensor_info: index %zu is not below the %zu tensors",
                      index, m->ntensors);
    fill_tensor_info(out, &m->tensors[index]);
    return PT_OK;
}

int pt_model_find_tensor_info(pt_tensor_info *out, const pt_model *m, const char *name)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(m);
    PT_CHECK_NULL(name);
    PT_CHECK_STRUCT_OUT(out, pt_tensor_info, pt_tensor_info_init);
    const pt_tensor_ref *t = pt__model_find_tensor(m, name);
    if (!t)
        return pt__err(PT_ENOTFOUND, "pt_model_find_tensor_info: the model has no tensor '%s'", name);
    fill_tensor_info(out, t);
    return PT_OK;
}

size_t pt_model_tensor_count(const pt_model *m)
{
    return m ? m->ntensors : 0;
}

const pt_tensor_ref *pt__model_tensor(const pt_model *m, size_t i)
{
    if (!m || i >= m->ntensors)
        return NULL;
    return &m->tensors[i];
}

const pt_tensor_ref *pt__model_find_tensor(const pt_model *m, const char *name)
{
    if (!m || !name)
        return NULL;
    for (size_t i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

int pt_model_alloc_grads(pt_model *m)
{
    PT_CHECK_NULL(m);
    if (m->grads || m->lora)
        return PT_OK; /* with LoRA the base is frozen: only the adapters have gradients */
    if (pt__model_is_quantized(m))
        return pt__model_check_not_quantized(m, "pt_model_alloc_grads", PT_QUANT_FULL_FT_ADVICE);
    m->grads = pt__malloc_aligned(m->num_floats * sizeof(float));
    if (!m->grads)
        return pt__err_prefix(PT_ENOMEM, "model gradients");
    memset(m->grads, 0, m->num_floats * sizeof(float));
    for (size_t i = 0; i < m->ntensors; i++)
        m->tensors[i].grad = m->grads + m->offsets[i];
    set_pointers(m, m->grads, &m->g);
    return PT_OK;
}

int pt_model_zero_grad(pt_model *m)
{
    PT_CHECK_NULL(m);
    if (m->grads)
        memset(m->grads, 0, m->num_floats * sizeof(float));
    pt__lora_zero_grads(m);
    return PT_OK;
}

uint64_t pt__model_generation(const pt_model *m)
{
    return m ? m->generation : 0;
}

void pt__model_bump_generation(pt_model *m, const char *what)
{
    m->generation++;
    m->last_change = what;
    /* BF16 copies follow the tensor table (a frozen base stored in BF16);
     * the copies exist already, so nothing here allocates. */
    (void)pt__model_bf16_sync(m);
}

const char *pt__model_last_change(const pt_model *m)
{
    return m->last_change ? m->last_change : "nothing";
}

int pt__model_check_generation(const pt_model *m, uint64_t gen, const char *who, const char *handle)
{
    if (m->generation == gen)
        return PT_OK;
    return pt__err(PT_ESTATE, "%s: the model's tensors changed (%s) since this %s was created: "
                  "create a new %s", who, m->last_change ? m->last_change : "restructured", handle,
                  handle);
}

int pt_model_set_allow_long_context(pt_model *model, bool allow)
{
    PT_CHECK_NULL(model);
    model->allow_long_context = allow;
    return PT_OK;
}

bool pt_model_allow_long_context(const pt_model *m)
{
    return m && m->allow_long_context;
}

int pt__model_check_positions(const pt_model *m, int seq, const char *who)
{
    const int maxp = m->cfg.max_position_embeddings;
    if (seq <= maxp || m->allow_long_context)
        return PT_OK;
    return pt__err(PT_ERANGE, "%s: max_seq %d exceeds the model's max_position_embeddings %d "
                  "(call pt_model_set_allow_long_context(model, true) to use positions the model "
                  "was not trained for, e.g. with rope scaling)", who, seq, maxp);
}
