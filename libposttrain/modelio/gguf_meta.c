/* general.* and <arch>.* metadata of a GGUF export, in the converter's
 * order: general.architecture (GGUFWriter.__init__), general.type
 * (set_type), the naming keys (Metadata.set_gguf_meta_model), the
 * hyperparameters (TextModel.set_gguf_parameters, then LlamaModel's
 * vocab_size and rope.dimension_count), general.quantization_version. */
#include "core/core.h"
#include "io/fileio.h"
#include "io/path.h"
#include "modelio/gguf_export_internal.h"
#include "modelio/gguf_internal.h"

#include <stdio.h>
#include <string.h>

#define GX_QUANT_VERSION 2u   /* gguf-py GGML_QUANT_VERSION */

const char *gx_json_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* find_hparam: the first of keys present in hparams, as a number. */
static const cJSON *find_num(const cJSON *hp, const char *const *keys)
{
    for (; *keys; keys++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(hp, *keys);
        if (v)
            return cJSON_IsNumber(v) ? v : NULL;
    }
    return NULL;
}

static int arch_key(char *buf, size_t n, const gx_ctx *c, const char *suffix)
{
    int k = snprintf(buf, n, "%s.%s", pt__gguf_arch_name(c->cfg.arch), suffix);
    return k > 0 && (size_t)k < n ? PT_OK : pt__err(PT_EINVAL, "GGUF key too long");
}

static int put_u32(gx_ctx *c, const char *suffix, const cJSON *v)
{
    char key[128];
    int st = arch_key(key, sizeof key, c, suffix);
    if (st || !v)
        return st;
    if (v->valuedouble < 0 || v->valuedouble > 4294967295.0)
        return pt__err(PT_ERANGE, "pt_model_export_gguf: %s = %g does not fit a uint32", key, v->valuedouble);
    return pt__gguf_set_u32(c->w, key, (uint32_t)v->valuedouble);
}

static int put_f32(gx_ctx *c, const char *suffix, const cJSON *v)
{
    char key[128];
    int st = arch_key(key, sizeof key, c, suffix);
    return st || !v ? st : pt__gguf_set_f32(c->w, key, (float)v->valuedouble);
}

/* ---- naming ------------------------------------------------------------------ */

/* The model id of the directory: its name, or with no source directory
 * the output file's name without ".gguf". */
static char *dir_id(const gx_ctx *c)
{
    if (c->src_dir)
        return gx_path_name(c->src_dir);
    char *n = gx_path_name(c->out_path);
    size_t k = n ? strlen(n) : 0;
    if (k > 5 && strcmp(n + k - 5, ".gguf") == 0)
        n[k - 5] = '\0';
    return n;
}

static void warn_model_card(const gx_ctx *c)
{
    if (!c->src_dir)
        return;
    char *readme = pt__path_join(c->src_dir, "README.md"), *text = NULL;
    size_t len = 0;
    if (readme && pt__read_file(&text, &len, readme, (size_t)1 << 24) == PT_OK && strncmp(text, "---\n", 4) == 0)
        pt__log(PT_LOG_WARN, "%s: the YAML model card is not read: general.* keys the converter takes "
               "from it (license, tags, base models, ...) are not written", readme);
    pt_clear_error();
    pt_free(text);
    pt_free(readme);
}

static int derive_names(gx_names *n, gx_ctx *c)
{
    const int64_t total = (int64_t)c->total_params;
    const char *nop = gx_json_str(c->hparams, "_name_or_path");
    int st = PT_OK, slashes = 0;
    for (const char *s = nop; s && *s; s++)
        slashes += *s == '/';
    if (nop && slashes <= 1)
        st = gx_names_apply_id(n, nop, total);
    char *id = st ? NULL : dir_id(c);
    if (!st && !id)
        st = PT_ENOMEM;
    if (!st)
        st = gx_names_apply_id(n, id, total);
    if (!st && !n->name && !(n->name = pt__strdup(id)))
        st = PT_ENOMEM;
    pt_free(id);
    if (!st && c->name) {
        pt_free(n->name);
        if (!(n->name = pt__strdup(c->name)))
            st = PT_ENOMEM;
    }
    char label[64];
    if (!st && !n->size_label && total > 0) {
        gx_size_label(label, sizeof label, (uint64_t)total);
        if (!(n->size_label = pt__strdup(label)))
            st = PT_ENOMEM;
    }
    return st;
}

static int add_names(gx_ctx *c)
{
    warn_model_card(c);
    gx_names n = { 0 };
    int st = derive_names(&n, c);
    if (!st)
        st = gx_names_write(c->w, &n);
    gx_names_free(&n);
    return st;
}

/* ---- hyperparameters ------------------------------------------------------ */

static const char *const k_ctx[] = { "max_position_embeddings", "n_ctx", "n_positions", "max_length",
                                     "max_sequence_length", "model_max_length", NULL };
static const char *const k_embd[] = { "hidden_size", "n_embd", "dim", NULL };
static const char *const k_ff[] = { "prefix_dense_intermediate_size", "dense_intermediate_size",
                                    "intermediate_size", "n_inner", "hidden_dim", NULL };
static const char *const k_head[] = { "num_attention_heads", "n_head", "n_heads", NULL };
static const char *const k_kv[] = { "num_key_value_heads", "n_kv_heads", NULL };
static const char *const k_theta[] = { "global_rope_theta", "rope_global_theta", "rope_theta_global",
                                       "rope_theta", "rotary_emb_base", NULL };
static const char *const k_rms[] = { "rms_norm_eps", "norm_eps", NULL };
static const char *const k_ln[] = { "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", NULL };

const cJSON *gx_rope_params(const cJSON *hp)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(hp, "rope_parameters");
    if (!cJSON_IsObject(r))
        r = cJSON_GetObjectItemCaseSensitive(hp, "rope_scaling");
    if (!cJSON_IsObject(r))
        return NULL;
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(r, "full_attention");
    return cJSON_IsObject(full) ? full : r;
}

/* The rope scaling keys (linear; llama3 is the rope_freqs tensor). */
static int add_rope_scaling(gx_ctx *c, const cJSON *rp)
{
    const char *type = gx_json_str(rp, "rope_type");
    if (!type)
        type = gx_json_str(rp, "type");
    const cJSON *factor = cJSON_GetObjectItemCaseSensitive(rp, "factor");
    if (!type || strcmp(type, "linear") != 0 || !cJSON_IsNumber(factor))
        return PT_OK;
    char key[128];
    int st = arch_key(key, sizeof key, c, "rope.scaling.type");
    if (!st)
        st = pt__gguf_set_str(c->w, key, "linear");
    return st ? st : put_f32(c, "rope.scaling.factor", factor);
}

/* rope_theta: the rope parameters' own, else the top level's. */
static const cJSON *rope_theta(const cJSON *hp, const cJSON *rp)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    return cJSON_IsNumber(v) ? v : find_num(hp, k_theta);
}

static int add_causal(gx_ctx *c)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->hparams, "is_causal");
    char key[128];
    if (!cJSON_IsFalse(v))
        return PT_OK;
    int st = arch_key(key, sizeof key, c, "attention.causal");
    return st ? st : pt__gguf_set_bool(c->w, key, false);
}

static int add_text_params(gx_ctx *c)
{
    const cJSON *hp = c->hparams, *rp = gx_rope_params(hp);
    cJSON layers = { .type = cJSON_Number, .valuedouble = c->cfg.num_hidden_layers };
    int st = put_u32(c, "block_count", &layers);
    if (!st)
        st = put_u32(c, "context_length", find_num(hp, k_ctx));
    if (!st)
        st = put_u32(c, "embedding_length", find_num(hp, k_embd));
    if (!st)
        st = put_u32(c, "feed_forward_length", find_num(hp, k_ff));
    if (!st)
        st = put_u32(c, "attention.head_count", find_num(hp, k_head));
    if (!st)
        st = put_u32(c, "attention.head_count_kv", find_num(hp, k_kv));
    if (!st)
        st = add_causal(c);
    if (!st && rp)
        st = add_rope_scaling(c, rp);
    if (!st)
        st = put_f32(c, "rope.freq_base", rope_theta(hp, rp));
    if (!st)
        st = put_f32(c, "attention.layer_norm_rms_epsilon", find_num(hp, k_rms));
    if (!st)
        st = put_f32(c, "attention.layer_norm_epsilon", find_num(hp, k_ln));
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(hp, "head_dim");
    if (!st && cJSON_IsNumber(hd))
        st = put_u32(c, "attention.key_length", hd);
    if (!st && cJSON_IsNumber(hd))
        st = put_u32(c, "attention.value_length", hd);
    static const uint32_t ftype_ids[] = { 0, 1, 32 };   /* LlamaFileType ALL_F32, MOSTLY_F16, MOSTLY_BF16 */
    return st ? st : pt__gguf_set_u32(c->w, "general.file_type", ftype_ids[c->type]);
}

/* LlamaModel.set_gguf_parameters after TextModel's. */
static int add_llama_params(gx_ctx *c)
{
    if (!pt__gguf_arch_permutes(c->cfg.arch))
        return PT_OK;
    int st = put_u32(c, "vocab_size", cJSON_GetObjectItemCaseSensitive(c->hparams, "vocab_size"));
    cJSON dim = { .type = cJSON_Number, .valuedouble = c->cfg.head_dim };
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(c->hparams, "head_dim");
    return st ? st : put_u32(c, "rope.dimension_count", cJSON_IsNumber(hd) ? hd : &dim);
}

int gx_add_meta(gx_ctx *c)
{
    int st = pt__gguf_set_str(c->w, "general.architecture", pt__gguf_arch_name(c->cfg.arch));
    if (!st)
        st = pt__gguf_set_str(c->w, "general.type", "model");
    if (!st)
        st = add_names(c);
    if (!st)
        st = add_text_params(c);
    if (!st)
        st = add_llama_params(c);
    return st ? st : pt__gguf_set_u32(c->w, "general.quantization_version", GX_QUANT_VERSION);
}
