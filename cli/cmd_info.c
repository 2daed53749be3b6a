/* posttrain info DIR: what a Hugging Face model directory holds and the
 * memory it needs for inference, full fine-tuning and LoRA. */
#include "cli.h"

#include <stdbool.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct info_args {
    bool json, lenient;
    pt_memory_estimate_options mo;
} cli_args; /* CLI_ARG's */

static const cli_opt k_info_opts[] = {
    { CLI_FLAG, "json", CLI_ARG(json), .help = "print one JSON object instead of text" },
    { CLI_FLAG, "lenient", CLI_ARG(lenient),
      .help = "describe a directory whose weights will not load too (it still\nexits 1 and says it is broken)" },
    { CLI_INT64, "context", CLI_ARG(mo.context), "T", .lo = 1, .hi = 1 << 24,
      .help = "inference length for the KV-cache estimate (default: min(max\npositions, 2048))" },
    { CLI_INT64, "batch", CLI_ARG(mo.batch), "B", .def = "4", .lo = 1, .hi = 1 << 24,
      .help = "training batch for the activation estimate" },
    { CLI_INT64, "seq", CLI_ARG(mo.seq), "T", .lo = 1, .hi = 1 << 24,
      .help = "training sequence length (default: min(max positions, 256))" },
    { CLI_INT64, "lora-rank", CLI_ARG(mo.lora_rank), "R", .def = "16", .lo = 1, .hi = 1 << 24,
      .help = "LoRA rank on all seven projections" },
};

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

static void print_text(const char *dir, const pt_model_dir_info *info, const pt_memory_estimate *e)
{
    const pt_model_config *c = &info->config;
    const char *name = pt_arch_name(c->arch), *cls = pt_arch_class_name(c->arch);
    char a[32], b[32], d[32];
    printf("model:        %s\n", dir);
    printf("architecture: %s (%s)\n", name ? name : "?", cls ? cls : "?");
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
    human(a, sizeof a, e->weights_bytes);
    human(b, sizeof b, e->kv_cache_bytes);
    human(d, sizeof d, e->inference_bytes);
    if (e->kv_cache_slots < e->context)
        printf("  inference:         %s weights + %s KV cache (1 sequence of %" PRId64 " tokens, a ring "
               "of %" PRId64 ": the sliding window) = %s\n", a, b, e->context, e->kv_cache_slots, d);
    else
        printf("  inference:         %s weights + %s KV cache (1 sequence of %" PRId64 " tokens) = %s\n",
               a, b, e->context, d);
    human(a, sizeof a, e->full_state_bytes);
    human(b, sizeof b, e->activation_bytes);
    human(d, sizeof d, e->full_finetune_bytes);
    printf("  full fine-tuning:  %s weights+grads+AdamW moments (16 B/param) + %s activations "
           "(batch %" PRId64 " x %" PRId64 ") = %s\n",
           a, b, e->batch, e->seq, d);
    human(a, sizeof a, e->weights_bytes);
    human(b, sizeof b, e->lora_state_bytes);
    char f[32];
    human(f, sizeof f, e->lora_activation_bytes);
    human(d, sizeof d, e->lora_bytes);
    printf("  LoRA rank %" PRId64 ":      %s frozen weights + %s for %.0f adapter params (16 B/param) + "
           "%s activations (batch %" PRId64 " x %" PRId64 ") = %s\n",
           e->lora_rank, a, b, e->lora_params, f, e->batch, e->seq, d);
}

int cmd_info(int argc, char **argv)
{
    cli_args a = { 0 };
    pt_memory_estimate_options_init(&a.mo);
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
    pt_memory_estimate e;
    pt_memory_estimate_init(&e);
    char *json = NULL;
    if ((st = pt_model_config_memory_estimate(&e, &info.config, &a.mo)) ||
        (a.json && (st = pt_model_dir_info_to_json(&json, NULL, dir, &info, &e))))
        return cli_fail("info", st);
    if (a.json)
        fputs(json, stdout);
    else
        print_text(dir, &info, &e);
    pt_free(json);
    if (broken) {
        fflush(stdout);
        fprintf(stderr, "posttrain info: %s is broken and will not load: %s: %s\n", dir, pt_status_name(why),
                problem);
        return 1;
    }
    return 0;
}
