/* config.json: reading it into a pt_model_config, and writing one in the
 * Hugging Face layout of the configuration's architecture (exact field
 * names of its model_type, sorted keys, torch_dtype "float32"). */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/fileio.h"
#include "io/json.h"
#include "model/schema.h"
#include "modelio/modelio_internal.h"
#include "posttrain/modelio.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

int pt_model_config_load(pt_model_config *cfg, const char *path)
{
    PT_CHECK_NULL(cfg);
    PT_CHECK_NULL(path);
    PT_CHECK_STRUCT_OUT(cfg, pt_model_config, pt_model_config_init);
    char *file = pt__is_dir(path) ? pt__path_join(path, "config.json") : pt__strdup(path);
    if (!file)
        return PT_ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int st = pt__read_file(&text, &len, file, PT_MODELIO_MAX_CONFIG_BYTES);
    if (st == PT_OK) {
        st = pt_model_config_from_json(cfg, text, len);
        if (st != PT_OK)
            pt__err_prefix(st, "%s", file);
    }
    pt_free(text);
    pt_free(file);
    return st;
}

/* ---- writing --------------------------------------------------------------------- */

/* "key": <double>,\n at the given indentation. */
static void put_double_field(pt_strbuf *b, const char *indent, const char *key, double v)
{
    pt__strbuf_printf(b, "%s\"%s\": ", indent, key);
    pt__json_put_double(b, v);
    pt__strbuf_puts(b, ",\n");
}

static void put_token_id(pt_strbuf *b, const char *key, int id)
{
    if (id >= 0)
        pt__strbuf_printf(b, "  \"%s\": %d,\n", key, id);
    else
        pt__strbuf_printf(b, "  \"%s\": null,\n", key);
}

static void put_rope_scaling(pt_strbuf *b, const pt_model_config *c)
{
    pt__strbuf_puts(b, "  \"rope_scaling\": ");
    if (c->rope_type == PT_ROPE_LINEAR) {
        pt__strbuf_puts(b, "{\n");
        put_double_field(b, "    ", "factor", c->rope_factor);
        pt__strbuf_puts(b, "    \"rope_type\": \"linear\",\n    \"type\": \"linear\"\n  },\n");
    } else if (c->rope_type == PT_ROPE_LLAMA3) {
        pt__strbuf_puts(b, "{\n");
        put_double_field(b, "    ", "factor", c->rope_factor);
        put_double_field(b, "    ", "high_freq_factor", c->rope_high_freq_factor);
        put_double_field(b, "    ", "low_freq_factor", c->rope_low_freq_factor);
        pt__strbuf_printf(b, "    \"original_max_position_embeddings\": %d,\n",
                         c->rope_original_max_position_embeddings);
        pt__strbuf_puts(b, "    \"rope_type\": \"llama3\"\n  },\n");
    } else {
        pt__strbuf_puts(b, "null,\n");
    }
}

/* The fields from "architectures" to "num_key_value_heads" (sorted). */
static void put_head(pt_strbuf *b, const pt_model_config *c, const pt_arch_info *a,
                     const char *eos_list)
{
    pt__strbuf_printf(b, "{\n  \"architectures\": [\n    \"%s\"\n  ],\n", a->class_name);
    if (a->json_fields & PT_ARCH_JSON_ATTENTION_BIAS)
        pt__strbuf_puts(b, "  \"attention_bias\": false,\n");
    pt__strbuf_puts(b, "  \"attention_dropout\": 0.0,\n");
    put_token_id(b, "bos_token_id", c->bos_token_id);
    if (eos_list)
        pt__strbuf_printf(b, "  \"eos_token_id\": %s,\n", eos_list);
    else
        put_token_id(b, "eos_token_id", c->eos_token_id);
    pt__strbuf_printf(b, "  \"head_dim\": %d,\n", c->head_dim);
    pt__strbuf_printf(b, "  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n", c->hidden_size);
    put_double_field(b, "  ", "initializer_range", c->initializer_range);
    pt__strbuf_printf(b, "  \"intermediate_size\": %d,\n", c->intermediate_size);
    pt__strbuf_printf(b, "  \"max_position_embeddings\": %d,\n", c->max_position_embeddings);
    if (a->json_fields & PT_ARCH_JSON_QWEN_WINDOW)
        pt__strbuf_printf(b, "  \"max_window_layers\": %d,\n", c->num_hidden_layers);
    if (a->json_fields & PT_ARCH_JSON_MLP_BIAS)
        pt__strbuf_puts(b, "  \"mlp_bias\": false,\n");
    pt__strbuf_printf(b, "  \"model_type\": \"%s\",\n", a->model_type);
    pt__strbuf_printf(b, "  \"num_attention_heads\": %d,\n", c->num_attention_heads);
    pt__strbuf_printf(b, "  \"num_hidden_layers\": %d,\n", c->num_hidden_layers);
    pt__strbuf_printf(b, "  \"num_key_value_heads\": %d,\n", c->num_key_value_heads);
}

/* The fields from "pad_token_id" to "vocab_size". */
static void put_tail(pt_strbuf *b, const pt_model_config *c, const pt_arch_info *a)
{
    if (c->pad_token_id >= 0)
        pt__strbuf_printf(b, "  \"pad_token_id\": %d,\n", c->pad_token_id);
    if (a->json_fields & PT_ARCH_JSON_PRETRAINING_TP)
        pt__strbuf_puts(b, "  \"pretraining_tp\": 1,\n");
    put_double_field(b, "  ", "rms_norm_eps", c->rms_norm_eps);
    put_rope_scaling(b, c);
    put_double_field(b, "  ", "rope_theta", c->rope_theta);
    if (a->default_sliding_window > 0 && c->sliding_window > 0)
        pt__strbuf_printf(b, "  \"sliding_window\": %d,\n", c->sliding_window);
    else if (a->default_sliding_window > 0 || (a->json_fields & PT_ARCH_JSON_QWEN_WINDOW))
        pt__strbuf_puts(b, "  \"sliding_window\": null,\n");
    pt__strbuf_printf(b, "  \"tie_word_embeddings\": %s,\n",
                     c->tie_word_embeddings ? "true" : "false");
    pt__strbuf_puts(b, "  \"torch_dtype\": \"float32\",\n  \"use_cache\": true,\n");
    if (a->json_fields & PT_ARCH_JSON_QWEN_WINDOW)
        pt__strbuf_puts(b, "  \"use_sliding_window\": false,\n");
    pt__strbuf_printf(b, "  \"vocab_size\": %d\n}\n", c->vocab_size);
}

int pt__modelio_config_json(char **out, const pt_model_config *c, const char *eos_list)
{
    int st = pt_model_config_validate(c);
    if (st)
        return st;
    const pt_arch_info *a = pt__arch_info_get(c->arch);
    pt_strbuf b = PT_STRBUF_INIT;
    put_head(&b, c, a, eos_list);
    put_tail(&b, c, a);
    if (b.err) {
        st = b.err;
        pt__strbuf_free(&b);
        return st;
    }
    *out = pt__strbuf_detach(&b, NULL);
    return PT_OK;
}

int pt_model_config_to_json(char **out, const pt_model_config *cfg)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(cfg);
    pt_model_config c;
    PT_CHECK_STRUCT_READ(c, cfg, pt_model_config_init);
    return pt__modelio_config_json(out, &c, NULL);
}

/* ---- the source's eos list ------------------------------------------------------- */

static char *eos_list_text(const cJSON *e)
{
    pt_strbuf b = PT_STRBUF_INIT;
    bool ok = true;
    pt__strbuf_putc(&b, '[');
    for (const cJSON *c = e->child; c; c = c->next) {
        if (!cJSON_IsNumber(c) || c->valuedouble < 0 || c->valuedouble > INT_MAX)
            ok = false;
        pt__strbuf_printf(&b, "%s%d", c == e->child ? "" : ", ", (int)c->valuedouble);
    }
    pt__strbuf_putc(&b, ']');
    if (!ok) {
        pt__strbuf_free(&b);
        return NULL;
    }
    return pt__strbuf_detach(&b, NULL);
}

char *pt__modelio_source_eos_list(const char *src_dir, int eos)
{
    if (!src_dir || eos < 0)
        return NULL;
    char *path = pt__path_join(src_dir, "config.json");
    char *text = NULL;
    size_t len = 0;
    char *res = NULL;
    if (path && pt__read_file(&text, &len, path, PT_MODELIO_MAX_CONFIG_BYTES) == PT_OK) {
        cJSON *root = cJSON_ParseWithLength(text, len);
        const cJSON *e = root ? cJSON_GetObjectItemCaseSensitive(root, "eos_token_id") : NULL;
        if (cJSON_IsArray(e) && e->child && cJSON_IsNumber(e->child) &&
            e->child->valuedouble == (double)eos)
            res = eos_list_text(e);
        cJSON_Delete(root);
    }
    pt_clear_error();
    pt_free(text);
    pt_free(path);
    return res;
}
