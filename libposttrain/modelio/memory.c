/* The memory a configuration needs for inference, full fine-tuning and LoRA
 * (pt_model_config_memory_estimate), and the JSON description of a model
 * directory with that estimate (pt_model_dir_info_to_json), as
 * `posttrain info --json` prints it. */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/json.h"
#include "modelio/modelio_internal.h"
#include "posttrain/model.h"
#include "posttrain/modelio.h"

#include <inttypes.h>
#include <string.h>

#define MAX_TOKENS_ARG ((int64_t)1 << 24)

int pt_memory_estimate_options_init(pt_memory_estimate_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->batch = 4;
    opts->lora_rank = 16;
    return PT_OK;
}

PT_ZERO_INIT(pt_memory_estimate_init, pt_memory_estimate, est)

static int64_t at_most(int64_t given, int64_t positions, int64_t cap)
{
    if (given)
        return given;
    return positions < cap ? positions : cap;
}

/* The estimate itself, in bytes (FP32 everywhere). */
static void estimate(pt_memory_estimate *e, const pt_model_config *c, uint64_t n_params)
{
    const double H = c->hidden_size, I = c->intermediate_size, L = c->num_hidden_layers;
    const double hd = c->head_dim, Q = c->num_attention_heads * hd;
    const double KV = c->num_key_value_heads * hd, heads = c->num_attention_heads;
    const double r = (double)e->lora_rank, N = (double)n_params;
    e->weights_bytes = 4 * N;
    /* K and V of every layer for `context` tokens of one sequence; with a
     * sliding window the generator keeps a ring of that many slots */
    e->kv_cache_slots = c->sliding_window > 0 && c->sliding_window < e->context ? c->sliding_window : e->context;
    e->kv_cache_bytes = 2 * L * KV * (double)e->kv_cache_slots * 4;
    e->inference_bytes = e->weights_bytes + e->kv_cache_bytes;
    /* weights + gradients + two Adam moments */
    e->full_state_bytes = 16 * N;
    /* what a backward keeps per token and layer: the residual input, both norm
     * outputs, q, k, v, the attention output and its row statistics, the
     * residual after attention, gate, up and their product; plus the final
     * norm per token (the LM head runs in chunks and holds no full logits) */
    double per_token = L * (4 * H + 2 * Q + 2 * KV + 3 * I + heads) + 2 * H;
    double tokens = (double)e->batch * (double)e->seq;
    e->activation_bytes = 4 * tokens * per_token;
    e->full_finetune_bytes = e->full_state_bytes + e->activation_bytes;
    /* LoRA on q, k, v, o, gate, up, down: A is [r, in], B is [out, r] */
    double per_layer = r * (H + Q) + 2 * r * (H + KV) + r * (Q + H) + 2 * r * (H + I) + r * (I + H);
    e->lora_params = L * per_layer;
    e->lora_state_bytes = 16 * e->lora_params;
    e->lora_activation_bytes = e->activation_bytes + 4 * tokens * L * 7 * r;
    e->lora_bytes = e->weights_bytes + e->lora_state_bytes + e->lora_activation_bytes;
}

int pt_model_config_memory_estimate(pt_memory_estimate *est, const pt_model_config *cfg,
                                    const pt_memory_estimate_options *opts)
{
    PT_CHECK_NULL(est);
    PT_CHECK_NULL(cfg);
    PT_CHECK_STRUCT_OUT(est, pt_memory_estimate, pt_memory_estimate_init);
    pt_memory_estimate_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_memory_estimate_options_init);
    PT_CHECK_ARG(o.context >= 0 && o.context <= MAX_TOKENS_ARG, opts->context,
                 "must be in [0, %" PRId64 "] (got %" PRId64 ")", MAX_TOKENS_ARG, o.context);
    PT_CHECK_ARG(o.seq >= 0 && o.seq <= MAX_TOKENS_ARG, opts->seq,
                 "must be in [0, %" PRId64 "] (got %" PRId64 ")", MAX_TOKENS_ARG, o.seq);
    PT_CHECK_ARG(o.batch >= 1 && o.batch <= MAX_TOKENS_ARG, opts->batch,
                 "must be in [1, %" PRId64 "] (got %" PRId64 ")", MAX_TOKENS_ARG, o.batch);
    PT_CHECK_ARG(o.lora_rank >= 1 && o.lora_rank <= MAX_TOKENS_ARG, opts->lora_rank,
                 "must be in [1, %" PRId64 "] (got %" PRId64 ")", MAX_TOKENS_ARG, o.lora_rank);
    pt_model_config c;
    uint64_t n_params = 0;
    PT_CHECK_STRUCT_READ(c, cfg, pt_model_config_init);
    int st = pt_model_config_num_params(&n_params, &c);
    if (st)
        return st;
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    e.context = at_most(o.context, c.max_position_embeddings, 2048);
    e.seq = at_most(o.seq, c.max_position_embeddings, 256);
    e.batch = o.batch;
    e.lora_rank = o.lora_rank;
    estimate(&e, &c, n_params);
    pt__struct_write(est, &e);
    return PT_OK;
}

/* ---- JSON ----------------------------------------------------------------- */

static const char *json_bool(bool v)
{
    return v ? "true" : "false";
}

/* A status and its problem: "null" for PT_OK, else the message. */
static void json_problem(pt_strbuf *b, int status, const char *problem)
{
    if (status == PT_OK)
        pt__strbuf_puts(b, "null");
    else
        pt__json_put_string(b, problem, strlen(problem));
    pt__strbuf_puts(b, ",\n");
}

static void json_config(pt_strbuf *b, const pt_model_config *c)
{
    const char *name = pt_arch_name(c->arch), *cls = pt_arch_class_name(c->arch);
    pt__strbuf_printf(b, ", \"model_type\": \"%s\", \"architecture\": \"%s", name ? name : "?",
                      cls ? cls : "?");
    pt__strbuf_printf(b, "\",\n \"config\": {\"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
                      "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": "
                      "%d, \"head_dim\": %d, \"max_position_embeddings\": %d, \"rope_theta\": %.17g, "
                      "\"rms_norm_eps\": %.17g, \"tie_word_embeddings\": %s, \"attention_bias\": %s, "
                      "\"qk_norm\": %s, \"sliding_window\": %d, \"bos_token_id\": %d, \"eos_token_id\": "
                      "%d},\n",
                      c->vocab_size, c->hidden_size, c->intermediate_size, c->num_hidden_layers,
                      c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->max_position_embeddings,
                      c->rope_theta, c->rms_norm_eps, json_bool(c->tie_word_embeddings),
                      json_bool(c->attention_bias), json_bool(c->qk_norm), c->sliding_window, c->bos_token_id,
                      c->eos_token_id);
}

static void json_files(pt_strbuf *b, const pt_model_dir_info *info)
{
    pt__strbuf_printf(b, " \"num_params\": %" PRIu64 ", \"files\": %d, \"sharded\": %s, \"tensors\": %" PRIu64
                      ", \"weight_bytes\": %" PRIu64 ",\n \"dtypes\": {",
                      info->num_params, info->num_files, json_bool(info->sharded), info->num_tensors,
                      info->weight_bytes);
    for (int i = 0; i < info->num_dtypes && i < PT_MODEL_INFO_MAX_DTYPES; i++)
        pt__strbuf_printf(b, "%s\"%s\": {\"tensors\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", i ? ", " : "",
                          info->dtypes[i].name, info->dtypes[i].tensors, info->dtypes[i].bytes);
    pt__strbuf_printf(b, "},\n \"format\": \"%s\", \"gguf_version\": %d, \"quantised\": %s,\n",
                      info->gguf_version ? "gguf" : "safetensors", info->gguf_version, json_bool(info->quantised));
    pt__strbuf_printf(b, " \"has_tokenizer\": %s, \"has_generation_config\": %s,\n",
                      json_bool(info->has_tokenizer), json_bool(info->has_generation_config));
    pt__strbuf_printf(b, " \"weights_ok\": %s, \"weights_problem\": ", json_bool(info->weights_status == PT_OK));
    json_problem(b, info->weights_status, info->weights_problem);
    pt__strbuf_printf(b, " \"tokenizer_status\": \"%s\", \"tokenizer_problem\": ",
                      pt_status_name(info->tokenizer_status));
    json_problem(b, info->tokenizer_status, info->tokenizer_problem);
}

static void json_memory(pt_strbuf *b, const pt_memory_estimate *e)
{
    pt__strbuf_printf(b, " \"memory\": {\"inference\": {\"context\": %" PRId64 ", \"kv_cache_slots\": %" PRId64
                      ", \"weights_bytes\": %.0f, \"kv_cache_bytes\": %.0f, \"total_bytes\": %.0f},\n",
                      e->context, e->kv_cache_slots, e->weights_bytes, e->kv_cache_bytes, e->inference_bytes);
    pt__strbuf_printf(b, "  \"full_finetune\": {\"batch\": %" PRId64 ", \"seq\": %" PRId64 ", \"state_bytes\": %.0f, "
                      "\"activation_bytes\": %.0f, \"total_bytes\": %.0f},\n",
                      e->batch, e->seq, e->full_state_bytes, e->activation_bytes, e->full_finetune_bytes);
    pt__strbuf_printf(b, "  \"lora\": {\"rank\": %" PRId64 ", \"batch\": %" PRId64 ", \"seq\": %" PRId64
                      ", \"adapter_params\": %.0f, \"frozen_weights_bytes\": %.0f, \"adapter_state_bytes\": %.0f, "
                      "\"activation_bytes\": %.0f, \"total_bytes\": %.0f}}}\n",
                      e->lora_rank, e->batch, e->seq, e->lora_params, e->weights_bytes, e->lora_state_bytes,
                      e->lora_activation_bytes, e->lora_bytes);
}

/* The JSON document: the directory's name, its config, files and memory. */
static void json_put(pt_strbuf *b, const char *dir, const pt_model_dir_info *info, const pt_memory_estimate *est)
{
    pt__strbuf_puts(b, "{\"dir\": ");
    pt__json_put_string(b, dir, strlen(dir));
    json_config(b, &info->config);
    json_files(b, info);
    json_memory(b, est);
}

int pt__dir_info_report(char **out, size_t *len, const char *dir, const pt_model_dir_info *info,
                        const pt_memory_estimate *est, pt_dir_info_put put, const char *func)
{
    *out = NULL;
    if (len)
        *len = 0;
    const char *null = !dir ? "dir" : !info ? "info" : !est ? "est" : NULL;
    if (null)
        return pt__err(PT_EINVAL, "%s: %s is NULL", func, null);
    pt_model_dir_info i;
    pt_memory_estimate e;
    pt_model_dir_info_init(&i);
    pt_memory_estimate_init(&e);
    int st = pt__struct_read(&i, sizeof i, info, func, "pt_model_dir_info_init");
    if (st || (st = pt__struct_read(&e, sizeof e, est, func, "pt_memory_estimate_init")))
        return st;
    /* the caller's fixed-size strings, terminated whatever they hold */
    i.weights_problem[sizeof i.weights_problem - 1] = '\0';
    i.tokenizer_problem[sizeof i.tokenizer_problem - 1] = '\0';
    for (int k = 0; k < PT_MODEL_INFO_MAX_DTYPES; k++)
        i.dtypes[k].name[sizeof i.dtypes[k].name - 1] = '\0';
    pt_strbuf b = PT_STRBUF_INIT;
    put(&b, dir, &i, &e);
    st = b.err;
    *out = pt__strbuf_detach(&b, len);
    return *out ? PT_OK : st ? st : PT_ENOMEM;
}

int pt_model_dir_info_to_json(char **json, size_t *len, const char *dir, const pt_model_dir_info *info,
                              const pt_memory_estimate *est)
{
    PT_CHECK_NULL(json);
    return pt__dir_info_report(json, len, dir, info, est, json_put, __func__);
}
