/* Model configuration: defaults, Hugging Face config.json parsing, validation.
 *
 * The parser is strict: a field that would change the computation and that
 * this library cannot honour is an error naming the field (PT_EUNSUPPORTED),
 * never a silent misread.  Wrong JSON types, missing required fields and
 * sizes outside sane bounds are PT_ECONFIG; a document that is not JSON is
 * PT_EFORMAT.  JSON null is treated like an absent field throughout, as
 * transformers does for its optional fields. */
#include "core/core.h"
#include "io/json.h"
#include "model/schema.h"
#include "posttrain/model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Bounds on sizes (far above any model this library can train, far below
 * anything that could overflow the products computed from them). */
#define CFG_MAX_VOCAB (4 * 1024 * 1024)
#define CFG_MAX_HIDDEN 65536
#define CFG_MAX_INTERMEDIATE (1024 * 1024)
#define CFG_MAX_LAYERS 1024
#define CFG_MAX_HEADS 1024
#define CFG_MAX_HEAD_DIM 1024
#define CFG_MAX_QDIM (256 * 1024)
#define CFG_MAX_POSITIONS (16 * 1024 * 1024)
/* The parameter count (2^36, about 68.7e9 parameters or 256 GiB of FP32
 * weights alone): sizes that pass each field's bound but multiply to more
 * are a configuration error before anything is allocated, not PT_ENOMEM. */
#define CFG_MAX_PARAMS ((uint64_t)1 << 36)

#define CFG "config.json: "

int pt_model_config_init(pt_model_config *cfg)
{
    PT_CHECK_NULL(cfg);
    *cfg = (pt_model_config){
        .size = sizeof *cfg, .arch = PT_ARCH_LLAMA, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
        .rope_type = PT_ROPE_DEFAULT, .rope_factor = 1.0, .initializer_range = 0.02,
        .bos_token_id = -1, .eos_token_id = -1, .pad_token_id = -1,
    };
    return PT_OK;
}

/* ---- JSON field access (io/json.h) ------------------------------------------ */

/* The document's root, and a nested object of it ("rope_scaling"). */
static const pt_json_ctx k_root = {.file = "config.json", .status = PT_ECONFIG};

static pt_json_ctx sub_ctx(const char *path)
{
    return (pt_json_ctx){.file = "config.json", .path = path, .status = PT_ECONFIG};
}

/* A token id: an integer (-1 meaning none), or a non-empty list of integers
 * (the first is kept, the rest are checked), or absent/null (-1). */
/* A token id, or a list of them (Hugging Face's several end-of-sequence
 * ids): *out gets the first; every entry must be below vocab_size. */
static int get_token_id(int *out, const cJSON *obj, const char *key, int vocab_size)
{
    const cJSON *it = NULL;
    int st = pt__json_field(&it, obj, &k_root, key);
    if (st)
        return st;
    if (!it)
        return PT_OK;
    if (cJSON_IsArray(it)) {
        int n = 0;
        for (const cJSON *c = it->child; c; c = c->next, n++) {
            if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble) ||
                c->valuedouble != floor(c->valuedouble) || c->valuedouble < 0 ||
                c->valuedouble > (double)CFG_MAX_VOCAB)
                return pt__err(PT_ECONFIG, CFG "'%s'[%d] must be a token id (integer >= 0)",
                              key, n);
            if (c->valuedouble >= (double)vocab_size)
                return pt__err(PT_ECONFIG, "model config: '%s'[%d] = %.0f is out of range [0, %d] (the "
                              "vocab_size is %d)", key, n, c->valuedouble, vocab_size - 1, vocab_size);
            if (n == 0)
                *out = (int)c->valuedouble;
        }
        if (n == 0)
            return pt__err(PT_ECONFIG, CFG "'%s' is an empty list", key);
        return PT_OK;
    }
    /* -1 is how some converted checkpoints spell "none" */
    return pt__json_get_int(out, NULL, obj, &k_root, key, false, -1, CFG_MAX_VOCAB);
}

/* ---- architectures ------------------------------------------------------------------ */

static int parse_architectures(const cJSON *root, const pt_arch_info *arch)
{
    const cJSON *it = NULL;
    int st = pt__json_field(&it, root, &k_root, "architectures");
    if (st || !it)
        return st;
    if (!cJSON_IsArray(it))
        return pt__err(PT_ECONFIG, CFG "'architectures' must be a list of strings, got %s",
                      pt__json_type_name(it));
    int n = 0;
    for (const cJSON *c = it->child; c; c = c->next, n++) {
        if (!cJSON_IsString(c) || !c->valuestring)
            return pt__err(PT_ECONFIG, CFG "'architectures'[%d] must be a string, got %s", n,
                          pt__json_type_name(c));
        if (strcmp(c->valuestring, arch->class_name) == 0)
            continue;
        if (pt__arch_info_by_class(c->valuestring))
            return pt__err(PT_ECONFIG,
                          CFG "'architectures' names %s but model_type is '%s' (expected %s)",
                          c->valuestring, arch->model_type, arch->class_name);
        return pt__err(PT_EUNSUPPORTED,
                      CFG "'architectures' entry '%.64s' is not supported (expected %s)",
                      c->valuestring, arch->class_name);
    }
    return PT_OK;
}

/* rope_scaling (or transformers 5's rope_parameters): null, {"rope_type"
 * or "type": "default" | "linear" | "llama3", ...}.  path is the member's
 * name, for messages. */
static int parse_rope(pt_model_config *cfg, const cJSON *rs, const char *path)
{
    const pt_json_ctx c = sub_ctx(path);
    const char *type = NULL, *type2 = NULL;
    int st;
    if ((st = pt__json_get_string(&type, rs, &c, "rope_type", false)) ||
        (st = pt__json_get_string(&type2, rs, &c, "type", false)))
        return st;
    if (type && type2 && strcmp(type, type2) != 0)
        return pt__err(PT_ECONFIG, CFG "'%s.rope_type' ('%.32s') and '%s.type' ('%.32s') disagree",
                      path, type, path, type2);
    if (!type)
        type = type2;
    if (!type)
        return pt__err(PT_ECONFIG, CFG "'%s.rope_type' is missing", path);
    if (strcmp(type, "default") == 0) {
        cfg->rope_type = PT_ROPE_DEFAULT;
        cfg->rope_factor = 1.0;
    } else if (strcmp(type, "linear") == 0) {
        cfg->rope_type = PT_ROPE_LINEAR;
        if ((st = pt__json_get_double(&cfg->rope_factor, NULL, rs, &c, "factor", true)))
            return st;
    } else if (strcmp(type, "llama3") == 0) {
        cfg->rope_type = PT_ROPE_LLAMA3;
        if ((st = pt__json_get_double(&cfg->rope_factor, NULL, rs, &c, "factor", true)) ||
            (st = pt__json_get_double(&cfg->rope_low_freq_factor, NULL, rs, &c, "low_freq_factor",
                                     true)) ||
            (st = pt__json_get_double(&cfg->rope_high_freq_factor, NULL, rs, &c, "high_freq_factor",
                                     true)) ||
            (st = pt__json_get_int(&cfg->rope_original_max_position_embeddings, NULL, rs, &c,
                                  "original_max_position_embeddings", true, 1, CFG_MAX_POSITIONS)))
            return st;
    } else {
        return pt__err(PT_EUNSUPPORTED,
                      CFG "'%s.rope_type' '%.32s' is not supported (supported: default, linear, "
                          "llama3)",
                      path, type);
    }
    const cJSON *partial;
    if ((st = pt__json_field(&partial, rs, &c, "partial_rotary_factor")))
        return st;
    if (partial && !(cJSON_IsNumber(partial) && partial->valuedouble == 1.0))
        return pt__err(PT_EUNSUPPORTED,
                      CFG "'%s.partial_rotary_factor' other than 1 is not supported", path);
    return PT_OK;
}

/* model_type and architectures: *arch is the architecture's facts. */
static int parse_arch(const pt_arch_info **arch, pt_model_config *cfg, const cJSON *root)
{
    const char *model_type;
    int st = pt__json_get_string(&model_type, root, &k_root, "model_type", true);
    if (st)
        return st;
    *arch = pt__arch_info_by_model_type(model_type);
    if (!*arch) {
        char names[128];
        return pt__err(PT_EUNSUPPORTED, CFG "model_type '%.64s' is not supported (supported: %s)",
                      model_type, pt__arch_list(names, sizeof names, PT_ARCH_LIST_ALL));
    }
    cfg->arch = (*arch)->arch;
    return parse_architectures(root, *arch);
}

/* Options that would change the computation in ways not implemented. */
static int parse_unsupported(const cJSON *root)
{
    const cJSON *it = NULL;
    int st = pt__json_field(&it, root, &k_root, "quantization_config");
    if (st)
        return st;
    if (it)
        return pt__err(PT_EUNSUPPORTED,
                      CFG "'quantization_config' is set: quantized checkpoints are not supported");
    const char *act;
    if ((st = pt__json_get_string(&act, root, &k_root, "hidden_act", false)))
        return st;
    if (act && strcmp(act, "silu") != 0)
        return pt__err(PT_EUNSUPPORTED, CFG "'hidden_act' '%.32s' is not supported (only silu)", act);
    bool mlp_bias = false;
    if ((st = pt__json_get_bool(&mlp_bias, NULL, root, &k_root, "mlp_bias", false)))
        return st;
    if (mlp_bias)
        return pt__err(PT_EUNSUPPORTED, CFG "'mlp_bias' true is not supported");
    if ((st = pt__json_field(&it, root, &k_root, "partial_rotary_factor")))
        return st;
    if (it && !(cJSON_IsNumber(it) && it->valuedouble == 1.0))
        return pt__err(PT_EUNSUPPORTED, CFG "'partial_rotary_factor' other than 1 is not supported");
    return PT_OK;
}

static int parse_sizes(pt_model_config *cfg, const cJSON *root, const pt_arch_info *arch)
{
    int st;
    if ((st = pt__json_get_int(&cfg->vocab_size, NULL, root, &k_root, "vocab_size", true, 1,
                              CFG_MAX_VOCAB)) ||
        (st = pt__json_get_int(&cfg->hidden_size, NULL, root, &k_root, "hidden_size", true, 1,
                              CFG_MAX_HIDDEN)) ||
        (st = pt__json_get_int(&cfg->intermediate_size, NULL, root, &k_root, "intermediate_size",
                              true, 1, CFG_MAX_INTERMEDIATE)) ||
        (st = pt__json_get_int(&cfg->num_hidden_layers, NULL, root, &k_root, "num_hidden_layers",
                              true, 1, CFG_MAX_LAYERS)) ||
        (st = pt__json_get_int(&cfg->num_attention_heads, NULL, root, &k_root, "num_attention_heads",
                              true, 1, CFG_MAX_HEADS)))
        return st;
    bool have_kv = false, have_hd = false, have_mp = false;
    if ((st = pt__json_get_int(&cfg->num_key_value_heads, &have_kv, root, &k_root,
                              "num_key_value_heads", false, 1, CFG_MAX_HEADS)) ||
        (st = pt__json_get_int(&cfg->head_dim, &have_hd, root, &k_root, "head_dim", false, 1,
                              CFG_MAX_HEAD_DIM)) ||
        (st = pt__json_get_int(&cfg->max_position_embeddings, &have_mp, root, &k_root,
                              "max_position_embeddings", false, 1, CFG_MAX_POSITIONS)))
        return st;
    if (!have_kv)
        cfg->num_key_value_heads = cfg->num_attention_heads;
    if (!have_hd) {
        if (cfg->hidden_size % cfg->num_attention_heads != 0)
            return pt__err(PT_ECONFIG,
                          CFG "'num_attention_heads' (%d) does not divide 'hidden_size' (%d) and "
                              "no 'head_dim' is given",
                          cfg->num_attention_heads, cfg->hidden_size);
        cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
    }
    if (!have_mp)
        cfg->max_position_embeddings = arch->default_max_positions;
    return PT_OK;
}

/* rms_norm_eps, initializer_range, rope_theta, rope_scaling / rope_parameters. */
static int parse_norm_rope(pt_model_config *cfg, const cJSON *root)
{
    int st;
    if ((st = pt__json_get_double(&cfg->rms_norm_eps, NULL, root, &k_root, "rms_norm_eps", false)) ||
        (st = pt__json_get_double(&cfg->initializer_range, NULL, root, &k_root, "initializer_range",
                                 false)))
        return st;
    const cJSON *rs, *rp;
    if ((st = pt__json_field(&rs, root, &k_root, "rope_scaling")) ||
        (st = pt__json_field(&rp, root, &k_root, "rope_parameters")))
        return st;
    bool have_theta = false;
    if ((st = pt__json_get_double(&cfg->rope_theta, &have_theta, root, &k_root, "rope_theta",
                                 false)))
        return st;
    if (rp) {
        if (!cJSON_IsObject(rp))
            return pt__err(PT_ECONFIG, CFG "'rope_parameters' must be an object, got %s",
                          pt__json_type_name(rp));
        double theta = cfg->rope_theta;
        bool have_theta2 = false;
        const pt_json_ctx c = sub_ctx("rope_parameters");
        if ((st = pt__json_get_double(&theta, &have_theta2, rp, &c, "rope_theta", false)))
            return st;
        if (have_theta2 && have_theta && theta != cfg->rope_theta)
            return pt__err(PT_ECONFIG, CFG "'rope_theta' and 'rope_parameters.rope_theta' disagree");
        cfg->rope_theta = theta;
        if (!rs && (st = parse_rope(cfg, rp, "rope_parameters")))
            return st;
    }
    if (rs) {
        if (!cJSON_IsObject(rs))
            return pt__err(PT_ECONFIG, CFG "'rope_scaling' must be an object or null, got %s",
                          pt__json_type_name(rs));
        if ((st = parse_rope(cfg, rs, "rope_scaling")))
            return st;
    }
    return PT_OK;
}

/* Embeddings, q/k/v biases and norms: what the architecture fixes. */
static int parse_attention(pt_model_config *cfg, const cJSON *root, const pt_arch_info *arch)
{
    cfg->tie_word_embeddings = false; /* transformers' default for all four types */
    int st = pt__json_get_bool(&cfg->tie_word_embeddings, NULL, root, &k_root, "tie_word_embeddings",
                              false);
    if (st)
        return st;
    bool attention_bias = false;
    if ((st = pt__json_get_bool(&attention_bias, NULL, root, &k_root, "attention_bias", false)))
        return st;
    /* An architecture with q/k/v biases always has them (and none on o_proj):
     * the field is not read.  Elsewhere it would add an o_proj bias too. */
    if (!arch->qkv_bias && attention_bias)
        return pt__err(PT_EUNSUPPORTED,
                      CFG "'attention_bias' true is not supported for model_type '%s' (it "
                          "adds a bias to o_proj as well)",
                      arch->model_type);
    cfg->attention_bias = arch->qkv_bias;
    cfg->qk_norm = arch->qk_norm;
    return PT_OK;
}

static int parse_window(pt_model_config *cfg, const cJSON *root, const pt_arch_info *arch)
{
    int st;
    cfg->sliding_window = 0;
    if (arch->default_sliding_window > 0) {
        const cJSON *sw;
        if ((st = pt__json_field(&sw, root, &k_root, "sliding_window")))
            return st;
        if (!pt__json_has_key(root, "sliding_window"))
            cfg->sliding_window = arch->default_sliding_window;
        else if (sw && (st = pt__json_get_int(&cfg->sliding_window, NULL, root, &k_root,
                                             "sliding_window", false, 1, CFG_MAX_POSITIONS)))
            return st;
    } else if (arch->json_fields & PT_ARCH_JSON_QWEN_WINDOW) {
        bool use_sw = false;
        if ((st = pt__json_get_bool(&use_sw, NULL, root, &k_root, "use_sliding_window", false)))
            return st;
        if (use_sw)
            return pt__err(PT_EUNSUPPORTED,
                          CFG "'use_sliding_window' true is not supported for model_type '%s'",
                          arch->model_type);
    }
    const cJSON *lt;
    if ((st = pt__json_field(&lt, root, &k_root, "layer_types")))
        return st;
    if (!lt)
        return PT_OK;
    if (!cJSON_IsArray(lt))
        return pt__err(PT_ECONFIG, CFG "'layer_types' must be a list, got %s",
                      pt__json_type_name(lt));
    int n = 0;
    for (const cJSON *c = lt->child; c; c = c->next, n++) {
        if (!cJSON_IsString(c) || !c->valuestring)
            return pt__err(PT_ECONFIG, CFG "'layer_types'[%d] must be a string", n);
        if (strcmp(c->valuestring, "full_attention") != 0 &&
            !(strcmp(c->valuestring, "sliding_attention") == 0 && arch->default_sliding_window > 0))
            return pt__err(PT_EUNSUPPORTED, CFG "'layer_types'[%d] '%.32s' is not supported", n,
                          c->valuestring);
    }
    return PT_OK;
}

/* Token ids (lists keep their first entry). */
static int parse_token_ids(pt_model_config *cfg, const cJSON *root, const pt_arch_info *arch)
{
    cfg->bos_token_id = arch->default_bos;
    cfg->eos_token_id = arch->default_eos;
    cfg->pad_token_id = -1;
    if (pt__json_has_key(root, "bos_token_id"))
        cfg->bos_token_id = -1; /* an explicit null means None */
    if (pt__json_has_key(root, "eos_token_id"))
        cfg->eos_token_id = -1;
    int st;
    if ((st = get_token_id(&cfg->bos_token_id, root, "bos_token_id", cfg->vocab_size)) ||
        (st = get_token_id(&cfg->eos_token_id, root, "eos_token_id", cfg->vocab_size)) ||
        (st = get_token_id(&cfg->pad_token_id, root, "pad_token_id", cfg->vocab_size)))
        return st;
    return PT_OK;
}

static int parse_root(pt_model_config *cfg, const cJSON *root)
{
    const pt_arch_info *arch = NULL;
    int st;
    if ((st = parse_arch(&arch, cfg, root)) || (st = parse_unsupported(root)) ||
        (st = parse_sizes(cfg, root, arch)) || (st = parse_norm_rope(cfg, root)) ||
        (st = parse_attention(cfg, root, arch)) || (st = parse_window(cfg, root, arch)) ||
        (st = parse_token_ids(cfg, root, arch)))
        return st;
    return PT_OK;
}

int pt_model_config_from_json(pt_model_config *cfg, const char *json, size_t len)
{
    PT_CHECK_NULL(cfg);
    PT_CHECK_COUNT(len, PT_MAX_TEXT_BYTES, "config.json");
    PT_CHECK_ARG(json || !len, json, "is NULL with len %zu", len);
    PT_CHECK_STRUCT_OUT(cfg, pt_model_config, pt_model_config_init);
    if (len == 0)
        return pt__err(PT_EFORMAT, CFG "empty document");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = (at && at >= json && at <= json + len) ? (size_t)(at - json) : 0;
        return pt__err(PT_EFORMAT, CFG "not valid JSON (near byte %zu)", off);
    }
    /* Only whitespace may follow the document. */
    for (const char *p = end; p && p < json + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return pt__err(PT_EFORMAT, CFG "unexpected data after the JSON document (byte %zu)",
                          (size_t)(p - json));
        }
    }
    if (!cJSON_IsObject(root)) {
        const char *t = pt__json_type_name(root);
        cJSON_Delete(root);
        return pt__err(PT_ECONFIG, CFG "the document must be a JSON object, got %s", t);
    }
    pt_model_config tmp;
    pt_model_config_init(&tmp);
    int st = parse_root(&tmp, root);
    cJSON_Delete(root);
    if (st)
        return st;
    if ((st = pt_model_config_validate(&tmp)))
        return st;
    pt__struct_write(cfg, &tmp);
    return PT_OK;
}

/* ---- validation ---------------------------------------------------------------- */

static int check_range(const char *name, long v, long lo, long hi)
{
    if (v < lo || v > hi)
        return pt__err(PT_ECONFIG, "model config: '%s' = %ld is out of range [%ld, %ld]", name, v,
                      lo, hi);
    return PT_OK;
}

static int check_positive(const char *name, double v)
{
    if (!isfinite(v) || !(v > 0))
        return pt__err(PT_ECONFIG, "model config: '%s' = %g must be a finite number > 0", name, v);
    return PT_OK;
}

static int check_sizes(const pt_model_config *cfg)
{
    int st;
    if ((st = check_range("vocab_size", cfg->vocab_size, 1, CFG_MAX_VOCAB)) ||
        (st = check_range("hidden_size", cfg->hidden_size, 1, CFG_MAX_HIDDEN)) ||
        (st = check_range("intermediate_size", cfg->intermediate_size, 1, CFG_MAX_INTERMEDIATE)) ||
        (st = check_range("num_hidden_layers", cfg->num_hidden_layers, 1, CFG_MAX_LAYERS)) ||
        (st = check_range("num_attention_heads", cfg->num_attention_heads, 1, CFG_MAX_HEADS)) ||
        (st = check_range("num_key_value_heads", cfg->num_key_value_heads, 1, CFG_MAX_HEADS)) ||
        (st = check_range("head_dim", cfg->head_dim, 1, CFG_MAX_HEAD_DIM)) ||
        (st = check_range("max_position_embeddings", cfg->max_position_embeddings, 1,
                          CFG_MAX_POSITIONS)))
        return st;
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return pt__err(PT_ECONFIG,
                      "model config: 'num_key_value_heads' (%d) does not divide "
                      "'num_attention_heads' (%d)",
                      cfg->num_key_value_heads, cfg->num_attention_heads);
    if (cfg->head_dim % 2 != 0)
        return pt__err(PT_ECONFIG, "model config: 'head_dim' (%d) must be even for rotary embeddings",
                      cfg->head_dim);
    if ((long)cfg->num_attention_heads * cfg->head_dim > CFG_MAX_QDIM)
        return pt__err(PT_ECONFIG,
                      "model config: 'num_attention_heads' x 'head_dim' (%d x %d) exceeds %d",
                      cfg->num_attention_heads, cfg->head_dim, CFG_MAX_QDIM);
    return PT_OK;
}

static int check_norm_rope(const pt_model_config *cfg)
{
    int st;
    if ((st = check_positive("rms_norm_eps", cfg->rms_norm_eps)) ||
        (st = check_positive("rope_theta", cfg->rope_theta)))
        return st;
    if (cfg->rms_norm_eps >= 1.0)
        return pt__err(PT_ECONFIG, "model config: 'rms_norm_eps' = %g must be < 1",
                      cfg->rms_norm_eps);
    if (!isfinite(cfg->initializer_range) || cfg->initializer_range < 0)
        return pt__err(PT_ECONFIG, "model config: 'initializer_range' = %g must be finite and >= 0",
                      cfg->initializer_range);
    switch (cfg->rope_type) {
    case PT_ROPE_DEFAULT:
        return PT_OK;
    case PT_ROPE_LINEAR:
        return check_positive("rope_scaling.factor", cfg->rope_factor);
    case PT_ROPE_LLAMA3:
        if ((st = check_positive("rope_scaling.factor", cfg->rope_factor)) ||
            (st = check_positive("rope_scaling.low_freq_factor", cfg->rope_low_freq_factor)) ||
            (st = check_positive("rope_scaling.high_freq_factor", cfg->rope_high_freq_factor)) ||
            (st = check_range("rope_scaling.original_max_position_embeddings",
                              cfg->rope_original_max_position_embeddings, 1, CFG_MAX_POSITIONS)))
            return st;
        if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
            return pt__err(PT_ECONFIG,
                          "model config: 'rope_scaling.high_freq_factor' (%g) must exceed "
                          "'low_freq_factor' (%g)",
                          cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
        return PT_OK;
    default:
        return pt__err(PT_EUNSUPPORTED, "model config: rope_type %d is not a known pt_rope_type",
                      cfg->rope_type);
    }
}

/* A feature (q/k/v biases, q/k norms) is present exactly when the
 * architecture has it: what a Hugging Face config.json can express. */
static int check_feature(const char *what, bool set, bool arch_has, int list)
{
    if (set == arch_has)
        return PT_OK;
    char names[64];
    pt__arch_list(names, sizeof names, list);
    return pt__err(set ? PT_EUNSUPPORTED : PT_ECONFIG, "model config: %s %s %s", what,
                  set ? "is only supported for" : "is required for", names);
}

static int check_arch_features(const pt_model_config *cfg, const pt_arch_info *arch)
{
    int st;
    if ((st = check_feature("'attention_bias' (q/k/v biases)", cfg->attention_bias,
                            arch->qkv_bias, PT_ARCH_LIST_QKV_BIAS)) ||
        (st = check_feature("'qk_norm'", cfg->qk_norm, arch->qk_norm, PT_ARCH_LIST_QK_NORM)))
        return st;
    if (cfg->sliding_window < 0)
        return pt__err(PT_ECONFIG, "model config: 'sliding_window' = %d must be >= 0",
                      cfg->sliding_window);
    if (cfg->sliding_window > 0 && arch->default_sliding_window == 0) {
        char names[64];
        return pt__err(PT_EUNSUPPORTED, "model config: 'sliding_window' is only supported for %s",
                      pt__arch_list(names, sizeof names, PT_ARCH_LIST_SLIDING));
    }
    return PT_OK;
}

int pt_model_config_validate(const pt_model_config *cfg)
{
    PT_CHECK_NULL(cfg);
    pt_model_config c;
    PT_CHECK_STRUCT_READ(c, cfg, pt_model_config_init);
    const pt_arch_info *arch = pt__arch_info_get(c.arch);
    if (!arch)
        return pt__err(PT_EUNSUPPORTED, "model config: arch %d is not a known pt_arch", c.arch);
    int st;
    if ((st = check_sizes(&c)) || (st = check_norm_rope(&c)) ||
        (st = check_arch_features(&c, arch)))
        return st;
    if ((st = check_range("bos_token_id", c.bos_token_id, -1, c.vocab_size - 1)) ||
        (st = check_range("eos_token_id", c.eos_token_id, -1, c.vocab_size - 1)) ||
        (st = check_range("pad_token_id", c.pad_token_id, -1, c.vocab_size - 1)))
        return st;
    /* The parameter count and its byte sizes must not overflow (16 bytes per
     * parameter for full fine-tuning). */
    uint64_t params, bytes;
    if ((st = pt__schema_num_params(&params, &c)))
        return st;
    bool ok = !__builtin_mul_overflow(params, (uint64_t)16, &bytes);
#if SIZE_MAX < UINT64_MAX
    ok &= bytes <= (uint64_t)SIZE_MAX;
#endif
    if (!ok)
        return pt__err(PT_ECONFIG, "model config: the parameter count overflows (sizes too large)");
    if (params > CFG_MAX_PARAMS)
        return pt__err(PT_ECONFIG,
                      "model config: the parameter count %llu exceeds the limit of 2^36 "
                      "(%llu): 'vocab_size' %d, 'hidden_size' %d, 'intermediate_size' %d, "
                      "'num_hidden_layers' %d",
                      (unsigned long long)params, (unsigned long long)CFG_MAX_PARAMS,
                      c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers);
    return PT_OK;
}

/* ---- pt_rope_type names ---- */

static const pt_enum_entry k_rope_type_names[] = {
    { PT_ROPE_DEFAULT, "default" },
    { PT_ROPE_LLAMA3, "llama3" },
    { PT_ROPE_LINEAR, "linear" },
};

PT_ENUM_NAME_FUNCS(pt_rope_type, k_rope_type_names, "rope type")
