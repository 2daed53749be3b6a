/* libposttrain public API: the parts of a GRPO run a host repeats each round
 * (what `posttrain grpo` does between pt_generate and pt_grpo_step, for any
 * C host or Python's GRPOTrainer):
 *
 *   - pt_rollout_buffer_add_generated: pt_generate's output (prompts,
 *     completions, sampler log-probabilities, finish reasons) into the
 *     rollout buffer, one group per prompt;
 *   - pt_grpo_metrics_row: a round's metrics row (TRL's names, the CLI's
 *     metrics.jsonl row);
 *   - pt_prompt_order: the prompt order of a run (a seeded shuffle per pass)
 *     that a checkpoint's pt_run_state records and a resume continues.
 *
 * docs/grpo.md ("A run's round") describes them. */
#ifndef POSTTRAIN_GRPO_RUN_H
#define POSTTRAIN_GRPO_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/grpo.h"
#include "posttrain/run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- generated completions into the rollout buffer ------------------------ */

/* n completions as pt_generate returns them: completion i has prompt
 * prompt_lens[i] ids (the prompts one after another in `prompts`) and
 * n_tokens[i] tokens at tokens + i * stride, with the sampler's
 * log-probabilities at logprobs + i * stride (or none) and its finish reason
 * (pt_finish_reason; PT_FINISH_LENGTH: truncated). */
typedef struct pt_rollout_generated {
    size_t size;                /* sizeof(pt_rollout_generated) */
    int n;                      /* completions, >= 1 */
    const int32_t *prompts;     /* the n prompts' ids, one after another */
    const int32_t *prompt_lens; /* n lengths >= 1 */
    const int32_t *tokens;      /* completion i: tokens[i * stride .. + n_tokens[i]) */
    const int32_t *n_tokens;    /* n counts, 1 .. stride */
    int stride;                 /* >= 1: pt_generate's max_new_tokens */
    const float *logprobs;      /* the sampler's, laid out as tokens, or NULL */
    const int32_t *finish;      /* n finish reasons, or NULL: none truncated */
    int group_size;             /* completion i is in group first_group + i / group_size; default 1 */
    int64_t first_group;
} pt_rollout_generated;

PT_API int pt_rollout_generated_init(pt_rollout_generated *g);

/* Add the n completions as n samples (ids: the prompt then the completion;
 * prompt_len; sampling_logprobs; group; truncated), all or nothing.  The
 * same samples as pt_rollout_buffer_add of each in turn.  PT_EINVAL: a
 * count out of range (naming the completion), or a sample
 * pt_rollout_buffer_add refuses. */
PT_API int pt_rollout_buffer_add_generated(pt_rollout_buffer *buf, const pt_rollout_generated *g);

/* ---- a round's metrics row --------------------------------------------------- */

/* The episode totals of a round with an environment (all doubles, so a
 * data-parallel job can add them over ranks with pt_dist_allreduce_sum). */
typedef struct pt_grpo_episode_totals {
    double episodes, errors, done, truncated, turns, appended_tokens, env_calls, env_seconds;
} pt_grpo_episode_totals;

typedef struct pt_grpo_metrics {
    size_t size;                   /* sizeof(pt_grpo_metrics) */
    int64_t step;                  /* the round */
    const pt_grpo_stats *first;    /* the round's first update (rewards, lengths, sampler) */
    const pt_grpo_stats *last;     /* its last (loss terms, clipping, kl, grad norm, lr) */
    const pt_grpo_options *grpo;   /* the options of the updates: which optional keys */
    int n_reward_funcs;            /* 0 .. PT_GRPO_MAX_REWARD_FUNCS */
    const char *const *reward_names; /* n_reward_funcs names */
    double loss;                   /* the mean loss over the round's updates */
    double gen_tokens_per_s, train_tokens_per_s, step_seconds;
    bool comm;                     /* a data-parallel job: "comm_seconds" */
    double comm_seconds;
    const pt_grpo_episode_totals *episodes; /* NULL: no "episodes..." keys */
} pt_grpo_metrics;

PT_API int pt_grpo_metrics_init(pt_grpo_metrics *m);

/* The round's row, one JSON object without a newline (free *json with
 * pt_free): "step", "reward", "reward_std", "rewards/NAME/mean" and "/std",
 * "frac_reward_zero_std", "frac_zero_std_groups", "loss", "kl", "entropy",
 * "clip_ratio/region_mean", "/low_mean", "/high_mean", then by the options
 * "cispo_clip_ratio", "entropy_coef", "vespo/phi_seq_mean", the
 * "sampling/..." keys, "entropy_threshold" and "entropy_kept_fraction",
 * "completions/mean_length", "/min_length", "/max_length",
 * "/clipped_ratio", "grad_norm", "lr", "tokens", "gen_tokens_per_s",
 * "train_tokens_per_s", "step_seconds", ["comm_seconds"], the episode keys,
 * and "skipped".  Numbers as %.6g, null when not finite.  PT_EINVAL: a NULL
 * first, last, grpo or name, or n_reward_funcs out of range. */
PT_API int pt_grpo_metrics_row(char **json, const pt_grpo_metrics *m);

/* ---- the prompt order -------------------------------------------------------- */

typedef struct pt_prompt_order_options {
    size_t size;       /* sizeof(pt_prompt_order_options) */
    int64_t rows;      /* the data's rows, 1 .. INT32_MAX */
    uint64_t seed;     /* the run's seed */
    bool no_shuffle;   /* every pass in row order (the RNG state unchanged) */
    bool drop_last;    /* a pass's last batch smaller than the request starts a new pass (TRL) */
} pt_prompt_order_options;

PT_API int pt_prompt_order_options_init(pt_prompt_order_options *opts);

typedef struct pt_prompt_order pt_prompt_order;

/* The order at the start of a run: the RNG state seed ^ 0x6A09E667F3BCC908
 * and no pass begun; each pass is a Fisher-Yates shuffle of the rows drawn
 * from splitmix64 (j = next % (i + 1) for i = rows-1 .. 1). */
PT_API int pt_prompt_order_create(pt_prompt_order **out, const pt_prompt_order_options *opts);
PT_API void pt_prompt_order_free(pt_prompt_order *order);
/* Back to the start of the run. */
PT_API int pt_prompt_order_restart(pt_prompt_order *order);
/* The next n rows (a new pass begun when the current one is done). */
PT_API int pt_prompt_order_next(pt_prompt_order *order, int32_t *rows, int n);
/* Passes begun since the start. */
PT_API int64_t pt_prompt_order_passes(const pt_prompt_order *order);

/* Record the order in a run state: rng, order_rng, cursor and rows (the
 * other fields untouched; a host that records passes sets state->epoch). */
PT_API int pt_prompt_order_save(pt_run_state *state, const pt_prompt_order *order);

/* Why pt_prompt_order_load refused a state. */
typedef enum pt_prompt_order_fault {
    PT_ORDER_FAULT_NONE = 0,
    PT_ORDER_FAULT_ROWS = 1,   /* made with another number of rows */
    PT_ORDER_FAULT_CURSOR = 2, /* its cursor is past the rows */
    PT_ORDER_FAULT_RNG = 3     /* its order_rng does not lead to its rng */
} pt_prompt_order_fault;
/* "none", "rows", "cursor", "rng"; NULL for another value.  from_name:
 * PT_EINVAL listing the names. */
PT_API const char *pt_prompt_order_fault_name(int value);
PT_API int pt_prompt_order_fault_from_name(int *out, const char *name);

/* Continue the order a state recorded: the pass rebuilt from order_rng and
 * continued at cursor (passes: state->epoch); a state where no pass has
 * begun (cursor == rows, rng == order_rng) as it is.  PT_ESTATE (the order
 * unchanged, *fault saying why when fault is not NULL) when the state does
 * not fit; the checks are made in the enum's order. */
PT_API int pt_prompt_order_load(pt_prompt_order *order, const pt_run_state *state, int *fault);

#ifdef __cplusplus
}
#endif

#endif
