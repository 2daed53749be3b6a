/* The architecture and tensor tables (model/schema.h). */
#include "model/schema.h"

#include "core/core.h"
#include "posttrain/lora.h"

#include <stdio.h>
#include <string.h>

/* ---- architectures ------------------------------------------------------------- */

/* Each architecture's pt_arch value and config.json model_type, which is
 * its pt_arch name: written once, for k_arch_names and k_archs. */
#define ARCH_LLAMA PT_ARCH_LLAMA, "llama"
#define ARCH_QWEN2 PT_ARCH_QWEN2, "qwen2"
#define ARCH_QWEN3 PT_ARCH_QWEN3, "qwen3"
#define ARCH_MISTRAL PT_ARCH_MISTRAL, "mistral"

static const pt_enum_entry k_arch_names[] = {
    { ARCH_LLAMA }, { ARCH_QWEN2 }, { ARCH_QWEN3 }, { ARCH_MISTRAL },
};

static const pt_arch_info k_archs[] = {
    { ARCH_LLAMA, "LlamaForCausalLM", 2048, 1, 2, false, false, 0,
      PT_ARCH_JSON_ATTENTION_BIAS | PT_ARCH_JSON_MLP_BIAS | PT_ARCH_JSON_PRETRAINING_TP },
    { ARCH_QWEN2, "Qwen2ForCausalLM", 32768, -1, -1, true, false, 0, PT_ARCH_JSON_QWEN_WINDOW },
    { ARCH_QWEN3, "Qwen3ForCausalLM", 32768, -1, -1, false, true, 0,
      PT_ARCH_JSON_ATTENTION_BIAS | PT_ARCH_JSON_QWEN_WINDOW },
    /* transformers' MistralConfig: 4096 * 32 positions, a 4096-token window */
    { ARCH_MISTRAL, "MistralForCausalLM", 4096 * 32, 1, 2, false, false, 4096, 0 },
};
#define N_ARCHS (sizeof k_archs / sizeof k_archs[0])
_Static_assert(PT_ENUM_COUNT(k_arch_names) == N_ARCHS, "one name per architecture");

const pt_arch_info *pt__arch_info_get(int arch)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (k_archs[i].arch == arch)
            return &k_archs[i];
    return NULL;
}

const char *pt_arch_class_name(int arch)
{
    const pt_arch_info *a = pt__arch_info_get(arch);
    return a ? a->class_name : NULL;
}

const pt_arch_info *pt__arch_info_by_model_type(const char *model_type)
{
    for (size_t i = 0; model_type && i < N_ARCHS; i++)
        if (strcmp(k_archs[i].model_type, model_type) == 0)
            return &k_archs[i];
    return NULL;
}

const pt_arch_info *pt__arch_info_by_class(const char *class_name)
{
    for (size_t i = 0; class_name && i < N_ARCHS; i++)
        if (strcmp(k_archs[i].class_name, class_name) == 0)
            return &k_archs[i];
    return NULL;
}

/* pt_arch's names are the model_types. */
PT_ENUM_NAME_FUNCS(pt_arch, k_arch_names, "architecture")

static bool has_feature(const pt_arch_info *a, int feature)
{
    switch (feature) {
    case PT_ARCH_LIST_QKV_BIAS: return a->qkv_bias;
    case PT_ARCH_LIST_QK_NORM: return a->qk_norm;
    case PT_ARCH_LIST_SLIDING: return a->default_sliding_window > 0;
    default: return true;
    }
}

const char *pt__arch_list(char *buf, size_t n, int feature)
{
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_ARCHS; i++) {
        if (!has_feature(&k_archs[i], feature) || k >= n)
            continue;
        int w = snprintf(buf + k, n - k, "%s%s", k ? ", " : "", k_archs[i].model_type);
        k += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* ---- tensors --------------------------------------------------------------------- */

#define ROW(id, layer, module, param, r, c, when, init, follows, lora, tied)                    \
    { id, layer, module, param, r, c, when, init, follows, lora, tied }

static const pt_tensor_row k_rows[PT_T_COUNT] = {
    ROW(PT_T_EMBED, false, "model.embed_tokens", "weight", PT_DIM_VOCAB, PT_DIM_HIDDEN,
        PT_WHEN_ALWAYS, PT_INIT_NORMAL, false, 0, PT_T_COUNT),
    ROW(PT_T_LN1, true, "input_layernorm", "weight", PT_DIM_HIDDEN, PT_DIM_NONE, PT_WHEN_ALWAYS,
        PT_INIT_ONES, false, 0, PT_T_COUNT),
    ROW(PT_T_WQ, true, "self_attn.q_proj", "weight", PT_DIM_Q, PT_DIM_HIDDEN, PT_WHEN_ALWAYS,
        PT_INIT_NORMAL, false, PT_LORA_Q, PT_T_COUNT),
    ROW(PT_T_WK, true, "self_attn.k_proj", "weight", PT_DIM_KV, PT_DIM_HIDDEN, PT_WHEN_ALWAYS,
        PT_INIT_NORMAL, true, PT_LORA_K, PT_T_COUNT),
    ROW(PT_T_WV, true, "self_attn.v_proj", "weight", PT_DIM_KV, PT_DIM_HIDDEN, PT_WHEN_ALWAYS,
        PT_INIT_NORMAL, true, PT_LORA_V, PT_T_COUNT),
    ROW(PT_T_BQ, true, "self_attn.q_proj", "bias", PT_DIM_Q, PT_DIM_NONE, PT_WHEN_QKV_BIAS,
        PT_INIT_ZEROS, false, 0, PT_T_COUNT),
    ROW(PT_T_BK, true, "self_attn.k_proj", "bias", PT_DIM_KV, PT_DIM_NONE, PT_WHEN_QKV_BIAS,
        PT_INIT_ZEROS, true, 0, PT_T_COUNT),
    ROW(PT_T_BV, true, "self_attn.v_proj", "bias", PT_DIM_KV, PT_DIM_NONE, PT_WHEN_QKV_BIAS,
        PT_INIT_ZEROS, true, 0, PT_T_COUNT),
    ROW(PT_T_QN, true, "self_attn.q_norm", "weight", PT_DIM_HEAD, PT_DIM_NONE, PT_WHEN_QK_NORM,
        PT_INIT_ONES, false, 0, PT_T_COUNT),
    ROW(PT_T_KN, true, "self_attn.k_norm", "weight", PT_DIM_HEAD, PT_DIM_NONE, PT_WHEN_QK_NORM,
        PT_INIT_ONES, false, 0, PT_T_COUNT),
    ROW(PT_T_WO, true, "self_attn.o_proj", "weight", PT_DIM_HIDDEN, PT_DIM_Q, PT_WHEN_ALWAYS,
        PT_INIT_NORMAL, false, PT_LORA_O, PT_T_COUNT),
    ROW(PT_T_LN2, true, "post_attention_layernorm", "weight", PT_DIM_HIDDEN, PT_DIM_NONE,
        PT_WHEN_ALWAYS, PT_INIT_ONES, false, 0, PT_T_COUNT),
    ROW(PT_T_WG, true, "mlp.gate_proj", "weight", PT_DIM_INTER, PT_DIM_HIDDEN, PT_WHEN_ALWAYS,
        PT_INIT_NORMAL, false, PT_LORA_GATE, PT_T_COUNT),
    ROW(PT_T_WU, true, "mlp.up_proj", "weight", PT_DIM_INTER, PT_DIM_HIDDEN, PT_WHEN_ALWAYS,
        PT_INIT_NORMAL, true, PT_LORA_UP, PT_T_COUNT),
    ROW(PT_T_WD, true, "mlp.down_proj", "weight", PT_DIM_HIDDEN, PT_DIM_INTER, PT_WHEN_ALWAYS,
        PT_INIT_NORMAL, false, PT_LORA_DOWN, PT_T_COUNT),
    ROW(PT_T_NORM, false, "model.norm", "weight", PT_DIM_HIDDEN, PT_DIM_NONE, PT_WHEN_ALWAYS,
        PT_INIT_ONES, false, 0, PT_T_COUNT),
    ROW(PT_T_LM_HEAD, false, "lm_head", "weight", PT_DIM_VOCAB, PT_DIM_HIDDEN, PT_WHEN_UNTIED,
        PT_INIT_NORMAL, false, 0, PT_T_EMBED),
};

/* llama.cpp's tensor names (gguf-py's constants.py, MODEL_TENSOR), index = id. */
static const char *const k_gguf_names[PT_T_COUNT] = {
    "token_embd.weight", "attn_norm.weight", "attn_q.weight", "attn_k.weight",
    "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_q_norm.weight",
    "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
    "ffn_up.weight", "ffn_down.weight", "output_norm.weight", "output.weight",
};

const char *pt__tensor_gguf_name(char *buf, size_t n, const pt_tensor_row *row, int layer)
{
    if (!row || (int)row->id < 0 || row->id >= PT_T_COUNT || n == 0)
        return NULL;
    int len = row->per_layer ? snprintf(buf, n, "blk.%d.%s", layer, k_gguf_names[row->id])
                             : snprintf(buf, n, "%s", k_gguf_names[row->id]);
    return len < 0 || (size_t)len >= n ? NULL : buf;
}

const pt_tensor_row *pt__tensor_rows(void)
{
    return k_rows;
}

const pt_tensor_row *pt__tensor_row_get(pt_tensor_id id)
{
    return (int)id >= 0 && id < PT_T_COUNT ? &k_rows[id] : NULL;
}

const pt_tensor_row *pt__tensor_row_lora(int k)
{
    for (int i = 0; k >= 0 && k < 32 && i < PT_T_COUNT; i++)
        if (k_rows[i].lora_target == 1u << k)
            return &k_rows[i];
    return NULL;
}

bool pt__tensor_row_present(const pt_tensor_row *row, const pt_model_config *c)
{
    switch (row->when) {
    case PT_WHEN_QKV_BIAS: return c->attention_bias;
    case PT_WHEN_QK_NORM: return c->qk_norm;
    case PT_WHEN_UNTIED: return !c->tie_word_embeddings;
    default: return true;
    }
}

int64_t pt__dim_size(pt_dim d, const pt_model_config *c)
{
    switch (d) {
    case PT_DIM_VOCAB: return c->vocab_size;
    case PT_DIM_HIDDEN: return c->hidden_size;
    case PT_DIM_INTER: return c->intermediate_size;
    case PT_DIM_Q: return (int64_t)c->num_attention_heads * c->head_dim;
    case PT_DIM_KV: return (int64_t)c->num_key_value_heads * c->head_dim;
    case PT_DIM_HEAD: return c->head_dim;
    default: return 1;
    }
}

/* Fill t for row at layer; false when the element count overflows. */
static bool make_tensor(pt_schema_tensor *t, const pt_tensor_row *row, int layer,
                        const pt_model_config *c)
{
    t->row = row;
    t->layer = row->per_layer ? layer : -1;
    if (row->per_layer)
        snprintf(t->name, sizeof t->name, "model.layers.%d.%s.%s", layer, row->module, row->param);
    else
        snprintf(t->name, sizeof t->name, "%s.%s", row->module, row->param);
    t->ndim = row->cols == PT_DIM_NONE ? 1 : 2;
    t->shape[0] = pt__dim_size(row->rows, c);
    t->shape[1] = pt__dim_size(row->cols, c);
    return t->shape[0] > 0 && t->shape[1] > 0 &&
           pt__mul_size((size_t)t->shape[0], (size_t)t->shape[1], &t->numel);
}

/* Tensor n of the walk, when out is given. */
static void emit(pt_schema_tensor *out, size_t *n, int i, int layer, const pt_model_config *c,
                 bool *overflow)
{
    if (!pt__tensor_row_present(&k_rows[i], c))
        return;
    if (out && !make_tensor(&out[*n], &k_rows[i], layer, c))
        *overflow = true;
    (*n)++;
}

/* Visit the tensors in file order: a global row once, a run of per-layer
 * rows for layer 0, then layer 1, ...; returns the count. */
static size_t walk(pt_schema_tensor *out, const pt_model_config *c, bool *overflow)
{
    size_t n = 0;
    for (int i = 0; i < PT_T_COUNT;) {
        if (!k_rows[i].per_layer) {
            emit(out, &n, i++, -1, c, overflow);
            continue;
        }
        int end = i;
        while (end < PT_T_COUNT && k_rows[end].per_layer)
            end++;
        for (int l = 0; l < c->num_hidden_layers; l++)
            for (int j = i; j < end; j++)
                emit(out, &n, j, l, c, overflow);
        i = end;
    }
    return n;
}

int pt__schema_tensors(pt_schema_tensor **out, size_t *n, const pt_model_config *c)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(n);
    PT_CHECK_NULL(c);
    *out = NULL;
    *n = 0;
    bool overflow = false;
    size_t count = walk(NULL, c, &overflow);
    pt_schema_tensor *t = pt__malloc_array(count ? count : 1, sizeof *t);
    if (!t)
        return PT_ENOMEM;
    walk(t, c, &overflow);
    if (overflow) {
        pt_free(t);
        return pt__err(PT_ECONFIG, "model config: a tensor's size overflows (sizes too large)");
    }
    *out = t;
    *n = count;
    return PT_OK;
}

int pt__schema_num_params(uint64_t *out, const pt_model_config *c)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(c);
    uint64_t global = 0, layer = 0;
    bool ok = true;
    for (int i = 0; i < PT_T_COUNT; i++) {
        const pt_tensor_row *r = &k_rows[i];
        if (!pt__tensor_row_present(r, c))
            continue;
        uint64_t a = (uint64_t)pt__dim_size(r->rows, c), b = (uint64_t)pt__dim_size(r->cols, c), p;
        ok &= !__builtin_mul_overflow(a, b, &p);
        ok &= !__builtin_add_overflow(r->per_layer ? layer : global, p,
                                      r->per_layer ? &layer : &global);
    }
    uint64_t total;
    ok &= !__builtin_mul_overflow(layer, (uint64_t)c->num_hidden_layers, &total);
    ok &= !__builtin_add_overflow(total, global, &total);
    if (!ok)
        return pt__err(PT_ECONFIG, "model config: the parameter count overflows (sizes too large)");
    *out = total;
    return PT_OK;
}
