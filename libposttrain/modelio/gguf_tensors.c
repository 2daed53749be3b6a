/* The tensors of a GGUF export, in the converter's order and types
 * (gguf_export_internal.h).
 *
 * Order: the converter yields generate_extra_tensors() (rope_freqs) first,
 * then the safetensors tensors sorted by name (gguf-py's SafetensorsLocal
 * sorts, as the safetensors library does), so blk.1 comes before blk.10
 * and "lm_head.weight" first of all.  Types: 1-D tensors and names ending
 * in "_norm.weight" are F32, the other ".weight" tensors the chosen type. */
#include "core/core.h"
#include "kernels/gemm.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/schema.h"
#include "modelio/gguf_export_internal.h"
#include "modelio/gguf_internal.h"

#include <math.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

typedef struct gx_entry {
    const pt_tensor_ref *ref;
} gx_entry;

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const gx_entry *)a)->ref->name, ((const gx_entry *)b)->ref->name);
}

void gx_tensors_free(gx_bufs *b)
{
    for (size_t i = 0; i < b->n; i++)
        pt_free(b->p[i]);
    pt_free(b->p);
    *b = (gx_bufs){ 0 };
}

/* b owns f from now on (freed by gx_tensors_free; at once on failure). */
static float *buf_keep(gx_bufs *b, float *f)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 16;
        float **p = pt__realloc_array(b->p, cap, sizeof *p);
        if (!p) {
            pt_free(f);
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    b->p[b->n++] = f;
    return f;
}

/* A buffer of n floats owned by b until gx_tensors_free. */
static float *buf_new(gx_bufs *b, size_t n)
{
    float *f = pt__malloc_array(n ? n : 1, sizeof(float));
    return f ? buf_keep(b, f) : NULL;
}

static int ggml_type_of(int ftype)
{
    return ftype == PT_GGUF_FTYPE_F16 ? PT_GGML_F16 : ftype == PT_GGUF_FTYPE_BF16 ? PT_GGML_BF16 : PT_GGML_F32;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* The LoRA pair adapting tensor r, when the model has enabled adapters on it. */
static const pt_lora_pair *lora_pair(const pt_model *m, const pt_tensor_ref *r)
{
    const struct pt_lora *l = m->lora;
    if (!l || l->disabled || r->id < 0 || r->layer < 0)
        return NULL;
    unsigned bit = pt__tensor_row_get((pt_tensor_id)r->id)->lora_target;
    if (!bit)
        return NULL;
    int k = __builtin_ctz(bit);
    const pt_lora_pair *p = &l->mods[(size_t)r->layer * PT_LORA_NMOD + (size_t)k];
    return p->a ? p : NULL;
}

/* The values to write for r: the model's own, or a copy with the LoRA
 * update merged (W + scale * B A, the arithmetic of pt_model_merge_lora)
 * and the rows permuted for llama-type Q and K. */
static int tensor_values(const float **out, gx_ctx *c, gx_bufs *bufs, const pt_tensor_ref *r)
{
    float *wide = NULL;
    const float *src = pt__tensor_values(c->m, r, &wide);
    if (!src)
        return pt_last_status();
    if (wide && !buf_keep(bufs, wide))
        return PT_ENOMEM;
    const pt_lora_pair *p = lora_pair(c->m, r);
    if (p) {
        float *w = buf_new(bufs, r->numel);
        if (!w)
            return PT_ENOMEM;
        memcpy(w, src, r->numel * sizeof(float));
        const struct pt_lora *l = c->m->lora;
        pt__sgemm(false, false, p->out, p->in, (size_t)l->opts.rank, l->scale, p->b,
                 (size_t)l->opts.rank, p->a, p->in, 1.0f, w, p->in);
        src = w;
    }
    bool q = r->id == PT_T_WQ || r->id == PT_T_BQ, k = r->id == PT_T_WK || r->id == PT_T_BK;
    if ((q || k) && pt__gguf_arch_permutes(c->cfg.arch)) {
        float *d = buf_new(bufs, r->numel);
        if (!d)
            return PT_ENOMEM;
        int heads = q ? c->cfg.num_attention_heads : c->cfg.num_key_value_heads;
        pt__gguf_permute_rows(d, src, r->shape[0], r->ndim == 2 ? r->shape[1] : 1, heads);
        src = d;
    }
    *out = src;
    return PT_OK;
}

static int add_one(gx_ctx *c, gx_bufs *bufs, const pt_tensor_ref *r)
{
    char name[PT_TENSOR_NAME_MAX];
    if (!pt__tensor_gguf_name(name, sizeof name, pt__tensor_row_get((pt_tensor_id)r->id), r->layer))
        return pt__err(PT_EINVAL, "pt_model_export_gguf: tensor '%s' has no llama.cpp name", r->name);
    const float *src = NULL;
    int st = tensor_values(&src, c, bufs, r);
    if (st)
        return st;
    uint64_t ne[2] = { (uint64_t)(r->ndim == 2 ? r->shape[1] : r->shape[0]), (uint64_t)r->shape[0] };
    int type = r->ndim <= 1 || ends_with(name, "_norm.weight") ? PT_GGML_F32 : ggml_type_of(c->type);
    if ((st = gx_check_written(src, r->numel, type, "pt_model_export_gguf", c->out_path, r->name,
                               lora_pair(c->m, r) ? " with the LoRA update merged" : "")))
        return st;
    c->total_params += r->numel;
    return pt__gguf_add_tensor_f32(c->w, name, (uint32_t)r->ndim, ne, type, src);
}

static int add_rope_freqs(gx_ctx *c, gx_bufs *bufs)
{
    size_t n = (size_t)c->cfg.head_dim / 2;
    float tmp[1];
    if (!gx_rope_freqs(c->hparams, tmp, 0))
        return PT_OK;
    float *f = buf_new(bufs, n);
    if (!f)
        return PT_ENOMEM;
    gx_rope_freqs(c->hparams, f, n);
    uint64_t ne[1] = { n };
    c->total_params += n;
    return pt__gguf_add_tensor_f32(c->w, "rope_freqs.weight", 1, ne, PT_GGML_F32, f);
}

int gx_add_tensors(gx_ctx *c, gx_bufs *bufs)
{
    int st = add_rope_freqs(c, bufs);
    if (st)
        return st;
    size_t n = pt__model_base_tensor_count(c->m);
    gx_entry *e = pt__malloc_array(n, sizeof *e);
    if (!e)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        e[i].ref = pt__model_tensor(c->m, i);
    qsort(e, n, sizeof *e, cmp_entry);
    for (size_t i = 0; i < n && st == PT_OK; i++)
        st = add_one(c, bufs, e[i].ref);
    pt_free(e);
    return st;
}

/* ---- llama3 rope factors ------------------------------------------------------ */

/* key of the converter's rope parameters r (gx_rope_params), else def;
 * rope_theta and original_max_position_embeddings are mirrored from the top
 * level hp when r lacks them (TextModel.__init__). */
static double rope_num(const cJSON *hp, const cJSON *r, const char *key, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    if (!cJSON_IsNumber(v) && (strcmp(key, "rope_theta") == 0 ||
                               strcmp(key, "original_max_position_embeddings") == 0))
        v = cJSON_GetObjectItemCaseSensitive(hp, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static bool is_llama3(const cJSON *r)
{
    const char *t = gx_json_str(r, "rope_type");
    if (!t)
        t = gx_json_str(r, "type");
    return t && strcasecmp(t, "llama3") == 0;
}

/* One factor, in torch's float32 arithmetic: `2*math.pi / freq` is
 * freq.reciprocal() * 2pi, the scalars are rounded to float32 first, and
 * every operation rounds on its own (the volatile stores keep the compiler
 * from fusing a multiply and an add). */
static float rope_factor(float freq, double factor, double low, double high, double old)
{
    volatile float recip = 1.0f / freq;
    volatile float wavelen = recip * (float)(2.0 * M_PI);
    if (wavelen < (float)(old / high))
        return 1.0f;
    if (wavelen > (float)(old / low))
        return (float)factor;
    volatile float inv = 1.0f / wavelen;
    volatile float scaled = inv * (float)old;
    volatile float smooth = (scaled - (float)low) / (float)(high - low);
    volatile float part = (1.0f - smooth) / (float)factor;
    volatile float sum = part + smooth;
    return 1.0f / sum;
}

bool gx_rope_freqs(const cJSON *hp, float *out, size_t n)
{
    const cJSON *r = gx_rope_params(hp);
    if (!r || !is_llama3(r))
        return false;
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(hp, "head_dim");
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(hp, "hidden_size");
    const cJSON *nh = cJSON_GetObjectItemCaseSensitive(hp, "num_attention_heads");
    int dim = cJSON_IsNumber(hd) ? hd->valueint
              : (cJSON_IsNumber(hs) && cJSON_IsNumber(nh) && nh->valueint > 0)
                  ? hs->valueint / nh->valueint : 0;
    double base = rope_num(hp, r, "rope_theta", 10000.0), factor = rope_num(hp, r, "factor", 8.0);
    double low = rope_num(hp, r, "low_freq_factor", 1.0), high = rope_num(hp, r, "high_freq_factor", 4.0);
    double old = rope_num(hp, r, "original_max_position_embeddings", 8192);
    for (size_t i = 0; i < n && 2 * i < (size_t)dim; i++) {
        float e = (float)(2 * i) / (float)dim;
        float freq = 1.0f / powf((float)base, e);
        out[i] = rope_factor(freq, factor, low, high, old);
    }
    return true;
}
