/*
 * libposttrain public API: batched generation with a KV cache and seeded
 * sampling (the rollout half of GRPO).
 *
 * A pt_generator holds the KV cache and the working memory for up to
 * max_batch rows of up to max_seq tokens (prompt plus completion) of one
 * model, allocated once and reused by every pt_generate call.  The model is
 * only read, so several generators may serve one model from different
 * threads; one generator runs one call at a time.
 *
 * Per call: each prompt is prefilled on its own (identical prompts, as in a
 * GRPO group, are prefilled once and their cache copied), logits are
 * computed only at the last prompt position, then every decode step runs
 * all still-active rows together, each at its own position.  See
 * docs/generate.md for the sampling definitions and determinism guarantees.
 */
#ifndef POSTTRAIN_GENERATE_H
#define POSTTRAIN_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why a row stopped (pt_generate's finish_reasons). */
typedef enum pt_finish_reason {
    PT_FINISH_STOP = 0,    /* it sampled a stop id (kept as its last token) */
    PT_FINISH_LENGTH = 1   /* it reached max_new_tokens */
} pt_finish_reason;
/* The lower-case name of a pt_finish_reason value ("stop", ...), or NULL for
 * a value that is not one; and the value of a name (PT_EINVAL listing the
 * accepted names otherwise). */
PT_API const char *pt_finish_reason_name(int value);
PT_API int pt_finish_reason_from_name(int *out, const char *name);


/* Sampling options.  Fill with pt_generate_options_init() first.
 *
 * Per step and row, with logits l over the vocabulary:
 *  - temperature T == 0: greedy, the argmax of l (ties: the lowest id);
 *    top_k, top_p, min_p and seed are ignored.
 *  - T > 0: z = l / T; then, in this order (as Hugging Face's warpers):
 *    top_k keeps the k largest z (exactly k; ties at the boundary go to the
 *    lower ids), top_p keeps the smallest set of the most probable remaining
 *    tokens whose probability under softmax of the remaining z reaches top_p,
 *    min_p keeps the remaining tokens with p >= min_p * p_max; the token is
 *    drawn from softmax(z) restricted to the kept set.
 *  - the returned log-probability is that of the token under the
 *    distribution it was drawn from: log softmax(z)[token] over the kept set,
 *    renormalised (vLLM's "processed" log-probabilities, which TRL takes as
 *    the sampling log-probabilities); with no filter active that is
 *    log_softmax(z)[token] over the whole vocabulary, and with T == 0
 *    log_softmax(l)[token].  Pass them as pt_rollout_sample.sampling_logprobs
 *    (docs/grpo.md: the step's ratio uses the policy's log_softmax(z) over
 *    the whole vocabulary, which it computes itself). */
typedef struct pt_generate_options {
    size_t size;              /* sizeof(pt_generate_options) */
    int max_new_tokens;       /* >= 1; default 64 */
    float temperature;        /* 0 (greedy) or >= 1e-6; default 1 */
    int top_k;                /* >= 0; 0 (default): off */
    float top_p;              /* in (0, 1]; 1 (default): off */
    float min_p;              /* in [0, 1]; 0 (default): off */
    uint64_t seed;            /* default 0 */
    /* Row b draws from the xoshiro256** stream of (seed, stream_offset + b),
     * so a row's tokens depend only on its prompt, the seed and its stream,
     * never on the other rows or the thread count.  Default 0; set it to b
     * to reproduce row b of a batch with that prompt alone. */
    uint64_t stream_offset;
    /* Stop ids: a row stops after sampling one of them (it is returned as
     * the row's last token).  n_stop_ids < 0 (default): the model config's
     * eos_token_id when it has one; 0: no stop ids; > 0: stop_ids[0..n). */
    const int32_t *stop_ids;
    int n_stop_ids;
} pt_generate_options;

PT_API int pt_generate_options_init(pt_generate_options *opts);

/* The ids a completion of the model's text ends at, as `posttrain generate`
 * stops: the config's eos_token_id when it has one, then the eos id of the
 * model's tokenizer (pt_model_tokenizer) when that is another id inside the
 * vocabulary.  out[0 .. *n) with *n in 0..2; pass them as stop_ids. */
PT_API int pt_model_stop_ids(int32_t out[2], int *n, const pt_model *model);

typedef struct pt_generator pt_generator;

/* A generator for `model` with room for max_batch rows of max_seq tokens.
 * max_seq beyond the model's max_position_embeddings is PT_ERANGE unless the
 * caller opted in (pt_model_set_allow_long_context).  After LoRA adapters
 * are added, merged or removed, pt_generate with it is PT_ESTATE: create a
 * new generator. */
PT_API int pt_generator_create(pt_generator **out, pt_model *model, int max_batch, int max_seq);
PT_API void pt_generator_free(pt_generator *gen);
/* Threads for pt_generate on this generator: n in [1, 1024], or 0 to follow
 * the process setting (the default); as pt_context_set_num_threads.  The
 * per-row loops use at most max(process setting at creation, online CPUs).
 * pt_generator_get_num_threads: the count its calls use now. */
PT_API int pt_generator_set_num_threads(pt_generator *gen, int n);
PT_API int pt_generator_get_num_threads(const pt_generator *gen);

/* What the KV cache holds (pt_generator_set_kv_cache). */
typedef enum pt_kv_cache {
    PT_KV_CACHE_FP32 = 0, /* FP32 keys and values (the default) */
    PT_KV_CACHE_BF16 = 1  /* BF16: half the memory; keys and values rounded to
                           * BF16 (nearest, ties to even) as they are stored,
                           * widened exactly as attention reads them, as
                           * Hugging Face's cache is for a BF16 model (and
                           * llama.cpp's, in F16, for every model) */
} pt_kv_cache;
/* The cache's type: a new cache (and working memory) in place of the old
 * one, every cached row dropped, so set it before generating.  PT_EINVAL
 * for a type outside pt_kv_cache, PT_ENOMEM (the generator unchanged) when
 * the memory is not there.  Prefill's own attention over a prompt reads the
 * prompt's FP32 keys and values either way; decoding reads the cache.
 * pt_generator_get_kv_cache: the type in use. */
PT_API int pt_generator_set_kv_cache(pt_generator *gen, int type);
PT_API int pt_generator_get_kv_cache(const pt_generator *gen);
/* The name of a pt_kv_cache ("fp32", "bf16"; NULL for another value) and
 * the value of a name (PT_EINVAL listing the names otherwise). */
PT_API const char *pt_kv_cache_name(int type);
PT_API int pt_kv_cache_from_name(int *out, const char *name);

/* Generate for `batch` prompts.  Prompt b is prompt_lens[b] >= 1 ids,
 * stored back to back in prompt_ids (prompt b starts after the ids of
 * prompts 0..b-1).  prompt_lens[b] + opts->max_new_tokens must not exceed
 * the generator's max_seq.
 *
 * Outputs (caller-allocated; M = opts->max_new_tokens):
 *   tokens          [batch * M]: row b's new tokens at tokens[b*M ...],
 *                   -1 after its last one
 *   n_tokens        [batch]: how many new tokens row b has (1 .. M)
 *   finish_reasons  [batch]: pt_finish_reason, may be NULL
 *   logprobs        [batch * M], like tokens (0 after the last one): each
 *                   token's log-probability under the distribution it was
 *                   drawn from (above); may be NULL (not computed then)
 * opts may be NULL for the defaults.  The abort callback is polled once per
 * generated token (and per layer of each prefill); PT_ECANCELLED then, with
 * the outputs undefined. */
PT_API int pt_generate(pt_generator *gen, const int32_t *prompt_ids, const int32_t *prompt_lens,
                       int batch, const pt_generate_options *opts, int32_t *tokens,
                       int32_t *n_tokens, int32_t *finish_reasons, float *logprobs);

#ifdef __cplusplus
}
#endif

#endif
