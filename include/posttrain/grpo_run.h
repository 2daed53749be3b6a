/* libposttrain public API: the parts of a GRPO run a host repeats each round
 * (what `posttrain grpo` does between pt_generate and pt_grpo_step, for any
 * C host or Python's GRPOTrainer):
 *
 *   - pt_rollout_buffer_add_generated: pt_generate's output (prompts,
 *     completions, sampler log-probabilities, finish reasons) into the
 *     rollout buffer, one group per prompt;
 *   - pt_grpo_metrics_row: a round's metrics row (TRL's names, the CLI's
 *     metrics.jsonl row); pt_grpo_progress_line and pt_grpo_eval_line:
 *     the lines the CLI shows for a round and a held-out evaluation;
 *   - pt_prompt_order: the prompt order of a run (a seeded shuffle per pass)
 *     that a checkpoint's pt_run_state records and a resume continues;
 *   - pt_grpo_rollout_round: a round's rollouts (G completions of each
 *     prompt, or episodes with an environment) into the buffer with the
 *     reference log-probabilities and the rewards;
 *   - pt_grpo_run_extra / pt_grpo_run_resume: a GRPO checkpoint's own
 *     fields (batch shape, the adaptive entropy state) and the checks a
 *     resume makes on them;
 *   - pt_grpo_env_request_fn: the round's fields of an environment
 *     process's requests (step, episode, group, row).
 *
 * docs/grpo.md ("A run's round") describes them. */
#ifndef POSTTRAIN_GRPO_RUN_H
#define POSTTRAIN_GRPO_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/episode.h"
#include "posttrain/generate.h"
#include "posttrain/grpo.h"
#include "posttrain/grpo_builtin.h"
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

/* The round's progress line, without a newline (free *line with pt_free):
 * "step S/TOTAL reward R std S zero_std Z clip C kl K len L loss X
 * grad_norm G lr LR gen A tok/s train B tok/s Es" (the first update's
 * reward, reward_std, frac_reward_zero_std and completion_mean_length, the
 * last's clip_ratio_region, kl, grad_norm and lr; E elapsed_seconds) and
 * with episodes " episodes N errors M turns T" (T turns per episode).
 * PT_EINVAL: a NULL first or last. */
PT_API int pt_grpo_progress_line(char **line, const pt_grpo_metrics *metrics, int64_t total_steps,
                                 double elapsed_seconds);

/* A held-out evaluation's line after `step` (pt_grpo_evaluate's sums,
 * their rewards), without a newline (free *line with pt_free): "eval step
 * S: N prompts greedy reward R[ accuracy A]" and, when sampled completions
 * were made, ", sampled (T=temperature, samples each) reward R[ accuracy
 * A]"; accuracy where pt_builtin_rewards_have_accuracy (rewards NULL:
 * none).  PT_EINVAL: a NULL line or sums. */
PT_API int pt_grpo_eval_line(char **line, const pt_grpo_eval_sums *sums, const pt_builtin_rewards *rewards,
                             int samples, double temperature, int64_t step);

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

/* ---- a round's rollouts ------------------------------------------------------ */

typedef struct pt_grpo_round_options {
    size_t size;                      /* sizeof(pt_grpo_round_options) */
    /* The sampling (max_new_tokens >= 1, temperature, top_k, top_p, min_p,
     * stop ids; seed and stream_offset are set by the round).  Required. */
    const pt_generate_options *sampling;
    uint64_t seed;                    /* the run's seed */
    int64_t step;                     /* the round, >= 1: it samples from seed * 1000003 + step */
    int group_size;                   /* completions of each prompt (G), >= 1; default 1 */
    /* This host's first group in the round's whole batch (a data-parallel
     * rank's share): completion i draws from stream first_group * G + i,
     * so the rollouts do not depend on the split.  Default 0. */
    int64_t first_group;
    /* The frozen reference policy's context (PT_ROLLOUT_REF log-probabilities
     * at ref_temperature), or NULL (default): none. */
    pt_context *ref_ctx;
    float ref_temperature;            /* default 1 */
    /* Rewards 0 .. n_reward_funcs-1 scored with `reward` (pt_rollout_buffer_score;
     * e.g. pt_builtin_reward_fn), or reward NULL (default): the host scores. */
    pt_reward_fn reward;
    void *reward_payload;
    int n_reward_funcs;
    /* With an environment: play each completion as an episode (episodes:
     * its options, sampling taken from `sampling` with the round's seed;
     * results: where they go; env and env_payload: pt_episodes_run's) and
     * add the episodes that ended without error with the environment's
     * rewards (`reward` is not called).  NULL (default): pt_generate. */
    const pt_episode_options *episodes;
    pt_episode_results *results;
    pt_env_fn env;
    void *env_payload;
} pt_grpo_round_options;

PT_API int pt_grpo_round_options_init(pt_grpo_round_options *opts);

/* What a round did. */
typedef struct pt_grpo_round_result {
    size_t size;                      /* sizeof(pt_grpo_round_result) */
    int completions;                  /* n_prompts * group_size */
    double gen_tokens, gen_seconds, tokens_per_second; /* the generation (or the episodes') */
    pt_grpo_episode_totals episodes;  /* with an environment, this host's; else zero */
    /* NULL, or the part that failed: "generate", "episodes", "every
     * episode failed", "rollout buffer", "reference log-probabilities",
     * "scoring" */
    const char *failed;
} pt_grpo_round_result;

PT_API int pt_grpo_round_result_init(pt_grpo_round_result *res);

/* One round's rollouts into `buf` (cleared first): prompt p (prompt_lens[p]
 * ids, the prompts one after another in `prompts`) repeated group_size
 * times, sampled with gen (room for n_prompts * group_size rows) from
 * (seed * 1000003 + step, first_group * group_size + i), added as group p
 * (pt_rollout_buffer_add_generated; with an environment
 * pt_rollout_buffer_add_episodes), then the reference log-probabilities
 * and the rewards.  A round whose every episode ended in error or stopped
 * is PT_ECALLBACK ("every episode failed (the first: ...)").  On error
 * res->failed names the part and the status and message are that part's
 * (NULL for a bad argument: PT_EINVAL naming it). */
PT_API int pt_grpo_rollout_round(pt_grpo_round_result *res, pt_generator *gen, pt_rollout_buffer *buf,
                                 const int32_t *prompts, const int32_t *prompt_lens, int n_prompts,
                                 const pt_grpo_round_options *opts);

/* ---- an environment's request fields ------------------------------------------ */

/* What a host adds to every request of an environment process
 * (pt_env_process_options' request hook: pt_grpo_env_request_fn with a
 * pt_grpo_env_request as request_user), as `posttrain grpo --env` sends
 * them.  The host sets step, first_episode, first_group and group_row
 * before each round (rows may stay). */
typedef struct pt_grpo_env_request {
    size_t size;                 /* sizeof(pt_grpo_env_request) */
    int64_t step;                /* the round */
    /* this host's first episode and group in the round's whole batch (a
     * data-parallel rank's share: its first group, and that times G) */
    int64_t first_episode, first_group;
    const pt_prompt_rows *rows;  /* loaded with keep_json */
    const int32_t *group_row;    /* this host's group (pt_env_turn's group) -> its row of rows */
    char *text;                  /* the hook's: the last request's fields (pt_grpo_env_request_clear) */
} pt_grpo_env_request;

PT_API int pt_grpo_env_request_init(pt_grpo_env_request *req);

/* A pt_env_request_fn (request: a pt_grpo_env_request): *json the object
 * {"step": step, "episode": first_episode + turn->episode, "group":
 * first_group + turn->group, "row": the JSON of row group_row[turn->group]},
 * valid until the next call or pt_grpo_env_request_clear.  PT_EINVAL for a
 * NULL argument, rows or group_row, a size that is not
 * sizeof(pt_grpo_env_request), or a row without its JSON; PT_ERANGE for a
 * row or group out of range; PT_ENOMEM. */
PT_API int pt_grpo_env_request_fn(const char **json, const pt_env_turn *turn, void *request);
/* Free the fields' text (the rest is the host's); NULL is fine. */
PT_API void pt_grpo_env_request_clear(pt_grpo_env_request *req);

/* ---- a round's updates --------------------------------------------------------- */

/* Called after each update of pt_grpo_round_update with its stats and
 * index (0-based); nonzero stops the round after this update. */
typedef int (*pt_grpo_update_fn)(const pt_grpo_stats *stats, int iteration, void *user);

/* What a round's updates did. */
typedef struct pt_grpo_round_updates {
    size_t size;                      /* sizeof(pt_grpo_round_updates) */
    pt_grpo_stats first, last;        /* the first update's stats (rewards, lengths, sampler), the last's */
    int updates;                      /* made */
    double loss_sum;                  /* the updates' losses added */
    double train_seconds, comm_seconds; /* added over the updates */
} pt_grpo_round_updates;

PT_API int pt_grpo_round_updates_init(pt_grpo_round_updates *u);

/* `iterations` >= 1 pt_grpo_step calls on buf (TRL's num_iterations),
 * stopping early when `after` (may be NULL) says so.  With
 * use_adaptive_entropy, grpo's entropy_coef and entropy_last carry the
 * controller from update to update (and to the next round).  On error
 * (pt_grpo_step's status) u holds the updates made before it. */
PT_API int pt_grpo_round_update(pt_grpo_round_updates *u, pt_optimizer *opt, pt_context *ctx,
                                pt_rollout_buffer *buf, pt_grpo_options *grpo, int iterations,
                                pt_grpo_update_fn after, void *user);

/* ---- a GRPO checkpoint's own fields ------------------------------------------ */

/* What a GRPO run records beside pt_run_state (host_extra) and a resume
 * must find again. */
typedef struct pt_grpo_run_fields {
    size_t size;                      /* sizeof(pt_grpo_run_fields) */
    int num_generations;              /* G, >= 1 */
    int batch_prompts;                /* prompts per round, >= 1 */
    int num_iterations;               /* updates per round (a change is allowed) */
    /* The options of the updates: with use_adaptive_entropy, entropy_coef
     * and entropy_last are written and read back.  NULL: none. */
    pt_grpo_options *grpo;
} pt_grpo_run_fields;

PT_API int pt_grpo_run_fields_init(pt_grpo_run_fields *f);

/* host_extra (a JSON object text, or NULL: {}) with "num_generations",
 * "batch_prompts", "num_iterations" and, with use_adaptive_entropy,
 * "entropy_coef" and "entropy_last" (left out while infinite, before the
 * first update) added or replaced; free *json with pt_free. */
PT_API int pt_grpo_run_extra(char **json, const char *host_extra, const pt_grpo_run_fields *f);

/* Why pt_grpo_run_resume refused a checkpoint. */
typedef enum pt_grpo_resume_fault {
    PT_RESUME_FAULT_NONE = 0,
    PT_RESUME_FAULT_MISSING = 1,   /* host_extra lacks `key` (not a checkpoint of a GRPO run) */
    PT_RESUME_FAULT_SHAPE = 2,     /* `key` (num_generations, batch_prompts) was `saved`, the run has `want` */
    PT_RESUME_FAULT_ROWS = 3,      /* the prompt order was made with `saved` rows, the run has `want` */
    PT_RESUME_FAULT_CURSOR = 4,    /* the order's cursor `saved` is past the `want` rows */
    PT_RESUME_FAULT_OPTIMIZER = 5, /* the optimizer's step count `want` is not the recorded `saved` */
    PT_RESUME_FAULT_RNG = 6,       /* the order's order_rng does not lead to its rng */
    PT_RESUME_FAULT_ENTROPY = 7    /* use_adaptive_entropy and no "entropy_coef" */
} pt_grpo_resume_fault;
/* "none", "missing", "shape", "rows", "cursor", "optimizer", "rng",
 * "entropy"; NULL for another value.  from_name: PT_EINVAL listing them. */
PT_API const char *pt_grpo_resume_fault_name(int value);
PT_API int pt_grpo_resume_fault_from_name(int *out, const char *name);

typedef struct pt_grpo_resume_report {
    size_t size;                      /* sizeof(pt_grpo_resume_report) */
    int fault;                        /* pt_grpo_resume_fault */
    const char *key;                  /* the host_extra key of MISSING and SHAPE (static), else NULL */
    int64_t saved, want;
    int64_t num_iterations;           /* the recorded num_iterations, -1 when absent */
} pt_grpo_resume_report;

PT_API int pt_grpo_resume_report_init(pt_grpo_resume_report *rep);

/* Check a loaded checkpoint (its state and host_extra) against this run
 * and continue from it: num_generations and batch_prompts equal (in that
 * order), the prompt order loaded into `order` (pt_prompt_order_load: rows,
 * cursor), the optimizer's step count `optimizer_steps` the recorded one,
 * then the order's rng, then (use_adaptive_entropy) entropy_coef and
 * entropy_last read into f->grpo.  PT_ESTATE with the report's fault (and
 * a message) when one fails; the order and f->grpo are then unchanged but
 * for RNG and ENTROPY, after which the host restarts or gives up.  The
 * report's num_iterations is filled either way. */
PT_API int pt_grpo_run_resume(pt_grpo_resume_report *rep, const char *host_extra, const pt_run_state *state,
                              pt_prompt_order *order, int64_t optimizer_steps, const pt_grpo_run_fields *f);

#ifdef __cplusplus
}
#endif

#endif
