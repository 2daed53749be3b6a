/* The text reports beside the JSON ones: a model directory or GGUF file
 * with its memory estimate (pt_model_dir_info_to_text: what `posttrain
 * info` prints) and an evaluation's losses (pt_eval_result_to_text:
 * `posttrain eval`). */
#include "core/core.h"
#include "core/strbuf.h"
#include "modelio/modelio_internal.h"
#include "posttrain/model.h"
#include "posttrain/modelio.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* bytes with a binary unit: "512 B", "1.50 KiB", ... */
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

static void put_text(pt_strbuf *s, const char *dir, const pt_model_dir_info *info, const pt_memory_estimate *e)
{
    const pt_model_config *c = &info->config;
    const char *name = pt_arch_name(c->arch), *cls = pt_arch_class_name(c->arch);
    char a[32], b[32], d[32];
    pt__strbuf_printf(s, "model:        %s\n", dir);
    pt__strbuf_printf(s, "architecture: %s (%s)\n", name ? name : "?", cls ? cls : "?");
    pt__strbuf_printf(s, "sizes:        vocab %d, hidden %d, intermediate %d, layers %d\n", c->vocab_size,
                      c->hidden_size, c->intermediate_size, c->num_hidden_layers);
    pt__strbuf_printf(s, "attention:    %d heads, %d kv heads, head_dim %d%s%s", c->num_attention_heads,
                      c->num_key_value_heads, c->head_dim, c->attention_bias ? ", q/k/v bias" : "",
                      c->qk_norm ? ", q/k norm" : "");
    if (c->sliding_window)
        pt__strbuf_printf(s, ", sliding window %d", c->sliding_window);
    pt__strbuf_printf(s, "\n");
    const char *rope = pt_rope_type_name(c->rope_type);
    pt__strbuf_printf(s, "positions:    %d, rope theta %g", c->max_position_embeddings, c->rope_theta);
    if (c->rope_type != PT_ROPE_DEFAULT)
        pt__strbuf_printf(s, " (%s scaling)", rope ? rope : "?");
    pt__strbuf_printf(s, ", rms_norm_eps %g\n", c->rms_norm_eps);
    pt__strbuf_printf(s, "embeddings:   %s; bos %d, eos %d\n", c->tie_word_embeddings ? "tied" : "untied",
                      c->bos_token_id, c->eos_token_id);
    pt__strbuf_printf(s, "parameters:   %llu (%.2f M)\n", (unsigned long long)info->num_params,
                      (double)info->num_params / 1e6);
    human(a, sizeof a, (double)info->weight_bytes);
    pt__strbuf_printf(s, "on disk:      %d file%s%s, %llu tensors, %s:", info->num_files,
                      info->num_files == 1 ? "" : "s", info->sharded ? " (sharded)" : "",
                      (unsigned long long)info->num_tensors, a);
    for (int i = 0; i < info->num_dtypes && i < PT_MODEL_INFO_MAX_DTYPES; i++) {
        human(a, sizeof a, (double)info->dtypes[i].bytes);
        pt__strbuf_printf(s, "%s %s x %llu (%s)", i ? "," : "", info->dtypes[i].name,
                          (unsigned long long)info->dtypes[i].tensors, a);
    }
    pt__strbuf_printf(s, "\n");
    if (info->gguf_version)
        pt__strbuf_printf(s, "format:       GGUF v%d, %s\n", info->gguf_version,
                          info->quantised
                              ? "quantized (loads frozen: LoRA and generation; export --type f32 to dequantize)"
                              : "F32/F16/BF16 (loads for training)");
    if (info->weights_status == PT_OK)
        pt__strbuf_printf(s, "weights:      every tensor the config needs, with its shape\n");
    else
        pt__strbuf_printf(s, "weights:      WILL NOT LOAD: %s: %s\n", pt_status_name(info->weights_status),
                          info->weights_problem);
    if (info->gguf_version)
        pt__strbuf_printf(s, "tokenizer:    %s\n", info->has_tokenizer ? "tokenizer.ggml.* metadata" : "none");
    else
        pt__strbuf_printf(s, "files:        tokenizer.json %s, generation_config.json %s\n",
                          info->has_tokenizer ? "yes" : "no", info->has_generation_config ? "yes" : "no");
    if (info->tokenizer_status == PT_EUNSUPPORTED)
        pt__strbuf_printf(s, "tokenizer:    not supported, the model loads without it: %s\n", info->tokenizer_problem);
    else if (info->tokenizer_status != PT_OK)
        pt__strbuf_printf(s, "tokenizer:    WILL NOT LOAD: %s: %s\n", pt_status_name(info->tokenizer_status),
                          info->tokenizer_problem);
    pt__strbuf_printf(s, "memory (FP32 in memory, estimates):\n");
    human(a, sizeof a, e->weights_bytes);
    human(b, sizeof b, e->kv_cache_bytes);
    human(d, sizeof d, e->inference_bytes);
    if (e->kv_cache_slots < e->context)
        pt__strbuf_printf(s, "  inference:         %s weights + %s KV cache (1 sequence of %" PRId64 " tokens, a ring "
                          "of %" PRId64 ": the sliding window) = %s\n", a, b, e->context, e->kv_cache_slots, d);
    else
        pt__strbuf_printf(s, "  inference:         %s weights + %s KV cache (1 sequence of %" PRId64 " tokens) = %s\n",
                          a, b, e->context, d);
    human(a, sizeof a, e->full_state_bytes);
    human(b, sizeof b, e->activation_bytes);
    human(d, sizeof d, e->full_finetune_bytes);
    pt__strbuf_printf(s, "  full fine-tuning:  %s weights+grads+AdamW moments (16 B/param) + %s activations "
                      "(batch %" PRId64 " x %" PRId64 ") = %s\n",
                      a, b, e->batch, e->seq, d);
    human(a, sizeof a, e->weights_bytes);
    human(b, sizeof b, e->lora_state_bytes);
    char f[32];
    human(f, sizeof f, e->lora_activation_bytes);
    human(d, sizeof d, e->lora_bytes);
    pt__strbuf_printf(s, "  LoRA rank %" PRId64 ":      %s frozen weights + %s for %.0f adapter params (16 B/param) + "
                      "%s activations (batch %" PRId64 " x %" PRId64 ") = %s\n",
                      e->lora_rank, a, b, e->lora_params, f, e->batch, e->seq, d);
}

int pt_model_dir_info_to_text(char **text, size_t *len, const char *dir, const pt_model_dir_info *info,
                              const pt_memory_estimate *est)
{
    PT_CHECK_NULL(text);
    return pt__dir_info_report(text, len, dir, info, est, put_text, __func__);
}

int pt_eval_result_to_text(char **text, size_t *len, const pt_eval_result *r)
{
    PT_CHECK_NULL(text);
    *text = NULL;
    if (len)
        *len = 0;
    PT_CHECK_NULL(r);
    PT_CHECK_ARG(r->n_rows == 0 || (r->row_loss && r->row_tokens), r, "has %zu rows but no row arrays",
                 r->n_rows);
    pt_strbuf b = PT_STRBUF_INIT;
    for (size_t i = 0; i < r->n_rows; i++) {
        if (r->row_tokens[i])
            pt__strbuf_printf(&b, "row %zu: loss %.6f nats/token over %lld tokens\n", i + 1, r->row_loss[i],
                              (long long)r->row_tokens[i]);
        else
            pt__strbuf_printf(&b, "row %zu: no tokens to predict\n", i + 1);
    }
    pt__strbuf_printf(&b, "overall: loss %.6f nats/token over %lld tokens in %zu rows (perplexity %.4f)\n", r->loss,
                      (long long)r->tokens, r->n_rows, exp(r->loss));
    int st = b.err;
    *text = pt__strbuf_detach(&b, len);
    return *text ? PT_OK : st ? st : PT_ENOMEM;
}
