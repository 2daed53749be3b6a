/* posttrain info DIR: what a Hugging Face model directory holds and the
 * memory it needs for inference, full fine-tuning and LoRA. */
#include "cli.h"

#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct info_args {
    bool json, lenient;
    int context, batch, seq, rank;
} info_args;

#define INFO(field) offsetof(info_args, field)
static const cli_opt k_info_opts[] = {
    { CLI_FLAG, "json", INFO(json), .help = "print one JSON object instead of text" },
    { CLI_FLAG, "lenient", INFO(lenient),
      .help = "describe a directory whose weights will not load too (it still\nexits 1 and says it is broken)" },
    { CLI_INT, "context", INFO(context), "T", .lo = 1, .hi = 1 << 24,
      .help = "inference length for the KV-cache estimate (default: min(max\npositions, 2048))" },
    { CLI_INT, "batch", INFO(batch), "B", .def = "4", .lo = 1, .hi = 1 << 24,
      .help = "training batch for the activation estimate" },
    { CLI_INT, "seq", INFO(seq), "T", .lo = 1, .hi = 1 << 24,
      .help = "training sequence length (default: min(max positions, 256))" },
    { CLI_INT, "lora-rank", INFO(rank), "R", .def = "16", .lo = 1, .hi = 1 << 24,
      .help = "LoRA rank on all seven projections" },
};
#undef INFO

static const cli_command k_info = {
    .name = "info",
    .usage = "[options] DIR|FILE.gguf",
    .about = "Describe a Hugging Face model directory (config.json + safetensors) or a GGUF file:\n"
             "architecture, sizes, parameter count, dtypes on disk (GGUF: tensor types, quantised\n"
             "or not; no tensor data is read), and estimated memory for inference, full\n"
             "fine-tuning (AdamW, FP32) and LoRA.  The weights are checked as loading checks\n"
             "them (every shard present; tensor names, shapes and dtypes against config.json):\n"
             "a directory that will not load is an error (exit 1) before anything is printed.",
    .max_args = 1,
};

/* "LlamaForCausalLM" for "llama": the Hugging Face class of the library's
 * architecture name (every one follows the pattern). */
static const char *class_name(char *buf, size_t n, int arch)
{
    const char *name = pt_arch_name(arch);
    if (!name)
        return "?";
    snprintf(buf, n, "%c%sForCausalLM", toupper((unsigned char)name[0]), name + 1);
    return buf;
}

static const char *arch_name(int arch)
{
    const char *name = pt_arch_name(arch);
    return name ? name : "?";
}

static void human(char *buf, size_t n, double bytes)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
}

static void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

typedef struct mem_est {
    long context, kv_slots, batch, seq, rank;
    double weights, kv_cache, infer_total;
    double full_state, activations, full_total;
    double lora_params, lora_state, lora_activations, lora_total;
} mem_est;

/* Estimates, in bytes (FP32 everywhere). */
static void estimate(mem_est *e, const pt_model_config *c, uint64_t n_params)
{
    const double H = c->hidden_size, I = c->intermediate_size, L = c->num_hidden_layers;
    const double hd = c->head_dim, Q = c->num_attention_heads * hd;
    const double KV = c->num_key_value_heads * hd, heads = c->num_attention_heads;
    const double r = (double)e->rank, N = (double)n_params;
    e->weights = 4 * N;
    /* K and V of every layer for `context` tokens of one sequence; with a
     * sliding window the generator keeps a ring of that many slots */
    e->kv_slots = c->sliding_window > 0 && c->sliding_window < e->context ? c->sliding_window
                                                                           : e->context;
    e->kv_cache = 2 * L * KV * (double)e->kv_slots * 4;
    e->infer_total = e->weights + e->kv_cache;
    /* weights + gradients + two Adam moments */
    e->full_state = 16 * N;
    /* what a backward keeps per token and layer: the residual input, both norm
     * outputs, q, k, v, the attention output and its row statistics, the
     * residual after attention, gate, up and their product; plus the final
     * norm per token (the LM head runs in chunks and holds no full logits) */
    double per_token = L * (4 * H + 2 * Q + 2 * KV + 3 * I + heads) + 2 * H;
    double tokens = (double)e->batch * (double)e->seq;
    e->activations = 4 * tokens * per_token;
    e->full_total = e->full_state + e->activations;
    /* LoRA on q, k, v, o, gate, up, down: A is [r, in], B is [out, r] */
    double per_layer = r * (H + Q) + 2 * r * (H + KV) + r * (Q + H) + 2 * r * (H + I) + r * (I + H);
    e->lora_params = L * per_layer;
    e->lora_state = 16 * e->lora_params;
    e->lora_activations = e->activations + 4 * tokens * L * 7 * r;
    e->lora_total = e->weights + e->lora_state + e->lora_activations;
}

static void print_json(const char *dir, const pt_model_dir_info *info, const mem_est *e)
{
    const pt_model_config *c = &info->config;
    char cls[64];
    printf("{\"dir\": ");
    json_string(dir);
    printf(", \"model_type\": \"%s\", \"architecture\": \"%s\",\n", arch_name(c->arch),
           class_name(cls, sizeof cls, c->arch));
    printf(" \"config\": {\"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
           "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": "
           "%d, \"head_dim\": %d, \"max_position_embeddings\": %d, \"rope_theta\": %.17g, "
           "\"rms_norm_eps\": %.17g, \"tie_word_embeddings\": %s, \"attention_bias\": %s, "
           "\"qk_norm\": %s, \"sliding_window\": %d, \"bos_token_id\": %d, \"eos_token_id\": "
           "%d},\n",
           c->vocab_size, c->hidden_size, c->intermediate_size, c->num_hidden_layers,
           c->num_attention_heads, c->num_key_value_heads, c->head_dim,
           c->max_position_embeddings, c->rope_theta, c->rms_norm_eps,
           c->tie_word_embeddings ? "true" : "false", c->attention_bias ? "true" : "false",
           c->qk_norm ? "true" : "false", c->sliding_window, c->bos_token_id,
           c->eos_token_id);
    printf(" \"num_params\": %llu, \"files\": %d, \"sharded\": %s, \"tensors\": %llu, "
           "\"weight_bytes\": %llu,\n \"dtypes\": {",
           (unsigned long long)info->num_params, info->num_files, info->sharded ? "true" : "false",
           (unsigned long long)info->num_tensors, (unsigned long long)info->weight_bytes);
    for (int i = 0; i < info->num_dtypes; i++)
        printf("%s\"%s\": {\"tensors\": %llu, \"bytes\": %llu}", i ? ", " : "",
               info->dtypes[i].name, (unsigned long long)info->dtypes[i].tensors,
               (unsigned long long)info->dtypes[i].bytes);
    printf("},\n \"format\": \"%s\", \"gguf_version\": %d, \"quantised\": %s,\n",
           info->gguf_version ? "gguf" : "safetensors", info->gguf_version,
           info->quantised ? "true" : "false");
    printf(" \"has_tokenizer\": %s, \"has_generation_config\": %s,\n",
           info->has_tokenizer ? "true" : "false", info->has_generation_config ? "true" : "false");
    printf(" \"weights_ok\": %s, \"weights_problem\": ",
           info->weights_status == PT_OK ? "true" : "false");
    if (info->weights_status == PT_OK)
        printf("null,\n");
    else {
        json_string(info->weights_problem);
        printf(",\n");
    }
    printf(" \"tokenizer_status\": \"%s\", \"tokenizer_problem\": ", pt_status_name(info->tokenizer_status));
    if (info->tokenizer_status == PT_OK)
        printf("null,\n");
    else {
        json_string(info->tokenizer_problem);
        printf(",\n");
    }
    printf(" \"memory\": {\"inference\": {\"context\": %ld, \"kv_cache_slots\": %ld, "
           "\"weights_bytes\": %.0f, \"kv_cache_bytes\": %.0f, \"total_bytes\": %.0f},\n",
           e->context, e->kv_slots, e->weights, e->kv_cache, e->infer_total);
    printf("  \"full_finetune\": {\"batch\": %ld, \"seq\": %ld, \"state_bytes\": %.0f, "
           "\"activation_bytes\": %.0f, \"total_bytes\": %.0f},\n",
           e->batch, e->seq, e->full_state, e->activations, e->full_total);
    printf("  \"lora\": {\"rank\": %ld, \"batch\": %ld, \"seq\": %ld, \"adapter_params\": %.0f, "
           "\"frozen_weights_bytes\": %.0f, \"adapter_state_bytes\": %.0f, "
           "\"activation_bytes\": %.0f, \"total_bytes\": %.0f}}}\n",
           e->rank, e->batch, e->seq, e->lora_params, e->weights, e->lora_state, e->lora_activations,
           e->lora_total);
}

static void print_text(const char *dir, const pt_model_dir_info *info, const mem_est *e)
{
    const pt_model_config *c = &info->config;
    char cls[64];
    char a[32], b[32], d[32];
    printf("model:        %s\n", dir);
    printf("architecture: %s (%s)\n", arch_name(c->arch), class_name(cls, sizeof cls, c->arch));
    printf("sizes:        vocab %d, hidden %d, intermediate %d, layers %d\n", c->vocab_size,
           c->hidden_size, c->intermediate_size, c->num_hidden_layers);
    printf("attention:    %d heads, %d kv heads, head_dim %d%s%s", c->num_attention_heads,
           c->num_key_value_heads, c->head_dim, c->attention_bias ? ", q/k/v bias" : "",
           c->qk_norm ? ", q/k norm" : "");
    if (c->sliding_window)
        printf(", sliding window %d", c->sliding_window);
    printf("\n");
    const char *rope = pt_rope_type_name(c->rope_type);
    printf("positions:    %d, rope theta %g", c->max_position_embeddings, c->rope_theta);
    if (c->rope_type != PT_ROPE_DEFAULT)
        printf(" (%s scaling)", rope ? rope : "?");
    printf(", rms_norm_eps %g\n", c->rms_norm_eps);
    printf("embeddings:   %s; bos %d, eos %d\n", c->tie_word_embeddings ? "tied" : "untied",
           c->bos_token_id, c->eos_token_id);
    printf("parameters:   %llu (%.2f M)\n", (unsigned long long)info->num_params,
           (double)info->num_params / 1e6);
    human(a, sizeof a, (double)info->weight_bytes);
    printf("on disk:      %d file%s%s, %llu tensors, %s:", info->num_files,
           info->num_files == 1 ? "" : "s", info->sharded ? " (sharded)" : "",
           (unsigned long long)info->num_tensors, a);
    for (int i = 0; i < info->num_dtypes; i++) {
        human(a, sizeof a, (double)info->dtypes[i].bytes);
        printf("%s %s x %llu (%s)", i ? "," : "", info->dtypes[i].name,
               (unsigned long long)info->dtypes[i].tensors, a);
    }
    printf("\n");
    if (info->gguf_version)
        printf("format:       GGUF v%d, %s\n", info->gguf_version,
               info->quantised ? "quantized (loads frozen: LoRA and generation; export --type f32 to dequantize)"
                               : "F32/F16/BF16 (loads for training)");
    if (info->weights_status == PT_OK)
        printf("weights:      every tensor the config needs, with its shape\n");
    else
        printf("weights:      WILL NOT LOAD: %s: %s\n", pt_status_name(info->weights_status),
               info->weights_problem);
    if (info->gguf_version)
        printf("tokenizer:    %s\n", info->has_tokenizer ? "tokenizer.ggml.* metadata" : "none");
    else
        printf("files:        tokenizer.json %s, generation_config.json %s\n",
               info->has_tokenizer ? "yes" : "no", info->has_generation_config ? "yes" : "no");
    if (info->tokenizer_status == PT_EUNSUPPORTED)
        printf("tokenizer:    not supported, the model loads without it: %s\n", info->tokenizer_problem);
    else if (info->tokenizer_status != PT_OK)
        printf("tokenizer:    WILL NOT LOAD: %s: %s\n", pt_status_name(info->tokenizer_status),
               info->tokenizer_problem);
    printf("memory (FP32 in memory, estimates):\n");
    human(a, sizeof a, e->weights);
    human(b, sizeof b, e->kv_cache);
    human(d, sizeof d, e->infer_total);
    if (e->kv_slots < e->context)
        printf("  inference:         %s weights + %s KV cache (1 sequence of %ld tokens, a ring "
               "of %ld: the sliding window) = %s\n", a, b, e->context, e->kv_slots, d);
    else
        printf("  inference:         %s weights + %s KV cache (1 sequence of %ld tokens) = %s\n",
               a, b, e->context, d);
    human(a, sizeof a, e->full_state);
    human(b, sizeof b, e->activations);
    human(d, sizeof d, e->full_total);
    printf("  full fine-tuning:  %s weights+grads+AdamW moments (16 B/param) + %s activations "
           "(batch %ld x %ld) = %s\n",
           a, b, e->batch, e->seq, d);
    human(a, sizeof a, e->weights);
    human(b, sizeof b, e->lora_state);
    char f[32];
    human(f, sizeof f, e->lora_activations);
    human(d, sizeof d, e->lora_total);
    printf("  LoRA rank %ld:      %s frozen weights + %s for %.0f adapter params (16 B/param) + "
           "%s activations (batch %ld x %ld) = %s\n",
           e->rank, a, b, e->lora_params, f, e->batch, e->seq, d);
}

int cmd_info(int argc, char **argv)
{
    info_args a = { 0 };
    cli_rest rest;
    int rc = cli_parse_table(&k_info, k_info_opts, CLI_COUNT_OF(k_info_opts), &a, argc, argv, &rest);
    if (rc)
        return cli_exit_code(rc);
    if (rest.n == 0)
        return cli_usage_error("info", "needs a model directory");
    const char *dir = rest.args[0];
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    int st = pt_model_dir_inspect(&info, dir);
    if (st)
        return cli_fail("info", st);
    /* the same checks as loading, before anything is reported: the weights,
     * then the tokenizer (one this build cannot run is left out, not fatal) */
    int why = info.weights_status;
    const char *problem = info.weights_problem;
    if (why == PT_OK && info.tokenizer_status != PT_OK && info.tokenizer_status != PT_EUNSUPPORTED) {
        why = info.tokenizer_status;
        problem = info.tokenizer_problem;
    }
    const bool broken = why != PT_OK;
    if (broken && !a.lenient) {
        fprintf(stderr, "posttrain info: %s is broken and will not load: %s: %s (--lenient describes it anyway)\n",
                dir, pt_status_name(why), problem);
        return 1;
    }
    const pt_model_config *c = &info.config;
    mem_est e = { 0 };
    e.context = a.context ? a.context : (c->max_position_embeddings < 2048 ? c->max_position_embeddings : 2048);
    e.batch = a.batch;
    e.seq = a.seq ? a.seq : (c->max_position_embeddings < 256 ? c->max_position_embeddings : 256);
    e.rank = a.rank;
    estimate(&e, c, info.num_params);
    if (a.json)
        print_json(dir, &info, &e);
    else
        print_text(dir, &info, &e);
    if (broken) {
        fflush(stdout);
        fprintf(stderr, "posttrain info: %s is broken and will not load: %s: %s\n", dir, pt_status_name(why),
                problem);
        return 1;
    }
    return 0;
}
