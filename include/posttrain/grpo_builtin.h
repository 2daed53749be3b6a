/* libposttrain public API: what a GRPO host needs around the step besides
 * its own code, as `posttrain grpo` uses it (docs/grpo.md, "Built-in
 * rewards, prompt rows and the held-out evaluation"):
 *
 *   - the built-in rewards exact, contains and length, with weights, as a
 *     pt_reward_fn for pt_rollout_buffer_score or one text at a time;
 *   - the prompt rows of a GRPO data file ({"prompt": str, "answer": str}
 *     per JSONL line), each prompt encoded with the tokenizer or wrapped in
 *     a chat template, a bad row refused naming its file and line;
 *   - the held-out evaluation: greedy and sampled completions of the rows
 *     scored by the rewards (reward mean, accuracy, per-reward means, mean
 *     length) and its metrics row ("eval/..." keys). */
#ifndef POSTTRAIN_GRPO_BUILTIN_H
#define POSTTRAIN_GRPO_BUILTIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/chat.h"
#include "posttrain/generate.h"
#include "posttrain/grpo.h"
#include "posttrain/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- built-in rewards ---------------------------------------------------- */

typedef enum pt_builtin_reward {
    /* 1 if the completion (decoded without special tokens, whitespace
     * stripped at both ends) equals the answer (stripped), else 0 */
    PT_REWARD_EXACT = 0,
    /* 1 if the answer appears in the decoded completion (an empty answer
     * always does), else 0 */
    PT_REWARD_CONTAINS = 1,
    /* -(completion tokens / max_new_tokens): a length penalty, no answer */
    PT_REWARD_LENGTH = 2
} pt_builtin_reward;
/* "exact", "contains", "length" (NULL for another value); and the value of
 * a name (PT_EINVAL listing the accepted names otherwise). */
PT_API const char *pt_builtin_reward_name(int value);
PT_API int pt_builtin_reward_from_name(int *out, const char *name);

/* A list of built-in rewards with their weights: reward function k of a
 * buffer is kinds[k] (the buffer's names should be pt_builtin_reward_name
 * of the kinds, its weights these weights). */
typedef struct pt_builtin_rewards {
    size_t size;                              /* sizeof(pt_builtin_rewards) */
    int n;                                    /* 0 .. PT_GRPO_MAX_REWARD_FUNCS; default 0 */
    int kinds[PT_GRPO_MAX_REWARD_FUNCS];      /* pt_builtin_reward values, each at most once */
    double weights[PT_GRPO_MAX_REWARD_FUNCS]; /* finite */
    int max_new_tokens;                       /* the length reward's denominator, >= 1; default 64 */
} pt_builtin_rewards;

PT_API int pt_builtin_rewards_init(pt_builtin_rewards *rewards);
/* Append reward `kind` with `weight`: PT_EINVAL for a kind that is not one
 * or a weight that is not finite, PT_EEXIST for a kind already in the list,
 * PT_ERANGE when it holds PT_GRPO_MAX_REWARD_FUNCS already.  On error the
 * list is unchanged. */
PT_API int pt_builtin_rewards_add(pt_builtin_rewards *rewards, int kind, double weight);
/* Whether accuracy is defined for the list: some exact or contains reward
 * has a positive weight (false for NULL). */
PT_API bool pt_builtin_rewards_have_accuracy(const pt_builtin_rewards *rewards);

/* One reward of one decoded completion: `text` is the completion decoded
 * without special tokens, text_len bytes followed by a NUL (as
 * pt_tokenizer_decode gives it; exact compares all text_len bytes, contains
 * searches up to the first NUL, as strstr), `answer` the row's answer
 * (NULL only for length), completion_tokens >= 0 its tokens and
 * max_new_tokens >= 1 the length reward's denominator. */
PT_API int pt_builtin_reward_score(float *reward, int kind, const char *text, size_t text_len, const char *answer,
                                   int completion_tokens, int max_new_tokens);

/* The payload of pt_builtin_reward_fn. */
typedef struct pt_builtin_reward_payload {
    size_t size;                         /* sizeof(pt_builtin_reward_payload) */
    const pt_builtin_rewards *rewards;   /* the batch's func_index is an index into it */
    const pt_tokenizer *tokenizer;       /* decodes the completions */
    const char *const *answers;          /* answers[group]: the answer of the item's group */
    int64_t n_answers;                   /* entries of answers (groups 0 .. n_answers-1) */
} pt_builtin_reward_payload;

PT_API int pt_builtin_reward_payload_init(pt_builtin_reward_payload *payload);
/* A pt_reward_fn scoring reward function batch->func_index with
 * rewards->kinds[func_index] (payload: a pt_builtin_reward_payload).
 * Returns 1 (pt_rollout_buffer_score: PT_ECALLBACK) for a bad payload, a
 * group without an answer the kind needs, or a failed decode, with the
 * reason in the last error. */
PT_API int pt_builtin_reward_fn(float *rewards, const pt_reward_batch *batch, void *payload);

/* ---- prompt rows ----------------------------------------------------------- */

typedef struct pt_prompt_rows pt_prompt_rows;

/* One row (pointers into the rows, valid until they are freed). */
typedef struct pt_prompt_row {
    size_t size;           /* sizeof(pt_prompt_row) */
    const int32_t *ids;    /* the prompt's ids */
    int n_ids;             /* >= 1 */
    const char *answer;    /* NULL when the row has none (or it was not read) */
    const char *json;      /* the whole row as compact JSON with keep_json, else NULL */
} pt_prompt_row;

PT_API int pt_prompt_row_init(pt_prompt_row *row);

typedef struct pt_prompt_rows_options {
    size_t size;                           /* sizeof(pt_prompt_rows_options) */
    /* NULL (default): each prompt encoded with the tokenizer's special tokens
     * (e.g. BOS); else wrapped as one user message with the generation prompt */
    const pt_chat_template *chat_template;
    bool read_answer;                      /* read "answer" (a string, if present); default true */
    bool require_answer;                   /* a row without a string "answer" is an error; default false */
    bool keep_json;                        /* keep each row's JSON text; default false */
    size_t max_line;                       /* bytes of a line; 0 (default): 16 MiB */
    /* A row without "prompt" may give "messages" instead: a non-empty array
     * of {"role": "system"|"user"|"assistant"|"tool", "content": str},
     * rendered with chat_template (required then) and the generation
     * prompt.  Default false (posttrain grpo: "prompt" only). */
    bool messages;
} pt_prompt_rows_options;

PT_API int pt_prompt_rows_options_init(pt_prompt_rows_options *opts);

/* Why pt_prompt_rows_load failed. */
typedef enum pt_prompt_rows_fault {
    PT_ROWS_FAULT_NONE = 0,
    PT_ROWS_FAULT_READ = 1,         /* the file or a row could not be read (no "prompt" string, bad JSON) */
    PT_ROWS_FAULT_NO_ANSWER = 2,    /* require_answer and a row without a string "answer" */
    PT_ROWS_FAULT_ENCODE = 3,       /* the prompt could not be encoded or rendered */
    PT_ROWS_FAULT_EMPTY_PROMPT = 4, /* the prompt encodes to no tokens */
    PT_ROWS_FAULT_NO_ROWS = 5       /* the file has no rows */
} pt_prompt_rows_fault;
PT_API const char *pt_prompt_rows_fault_name(int value);
PT_API int pt_prompt_rows_fault_from_name(int *out, const char *name);

/* Where a load failed: the fault and the 1-based line of the row (0 when
 * no row is to blame). */
typedef struct pt_prompt_rows_report {
    size_t size;                 /* sizeof(pt_prompt_rows_report) */
    int fault;                   /* pt_prompt_rows_fault */
    size_t line;
} pt_prompt_rows_report;

PT_API int pt_prompt_rows_report_init(pt_prompt_rows_report *report);

/* Read every row of the JSONL file `path` (blank lines skipped): a string
 * "prompt" (or with opts->messages "messages"), encoded (opts), and, with read_answer, a string "answer" if
 * there is one.  Every message names the file and, for a row, its line
 * ("FILE line 3: needs a string \"answer\""): the reader's status for a row
 * that cannot be read, PT_EFORMAT for a missing answer or a prompt of no
 * tokens, the tokenizer's or template's status for one that cannot be
 * encoded, PT_EFORMAT for a file with no rows.  report (may be NULL) says
 * which and where.  On error *out is NULL. */
PT_API int pt_prompt_rows_load(pt_prompt_rows **out, pt_prompt_rows_report *report, const char *path,
                               const pt_tokenizer *tok, const pt_prompt_rows_options *opts);
/* An empty set of rows, for pt_prompt_rows_add. */
PT_API int pt_prompt_rows_create(pt_prompt_rows **out);
/* Append a row of n_ids >= 1 ids (copied) and an answer (copied; may be
 * NULL).  On error nothing is added. */
PT_API int pt_prompt_rows_add(pt_prompt_rows *rows, const int32_t *ids, int n_ids, const char *answer);
/* NULL is fine. */
PT_API void pt_prompt_rows_free(pt_prompt_rows *rows);
/* The rows held (0 for NULL) and the longest prompt's ids (0 for NULL or none). */
PT_API int64_t pt_prompt_rows_size(const pt_prompt_rows *rows);
PT_API int pt_prompt_rows_max_prompt_len(const pt_prompt_rows *rows);
/* Row i (PT_ERANGE outside 0 .. size-1). */
PT_API int pt_prompt_rows_get(pt_prompt_row *row, const pt_prompt_rows *rows, int64_t i);

/* ---- held-out evaluation ----------------------------------------------------- */

/* Index of the sums: greedy decoding, and sampled at the run's settings. */
enum { PT_GRPO_EVAL_GREEDY = 0, PT_GRPO_EVAL_SAMPLED = 1, PT_GRPO_EVAL_KINDS = 2 };

/* Sums over the evaluated completions, doubles only (so a data-parallel
 * host adds them over its ranks as one array of sizeof / sizeof(double)):
 * completions, the weighted reward R, the correct ones, completion
 * tokens, and each reward's unweighted value. */
typedef struct pt_grpo_eval_sums {
    double completions[PT_GRPO_EVAL_KINDS], reward[PT_GRPO_EVAL_KINDS];
    double correct[PT_GRPO_EVAL_KINDS], length[PT_GRPO_EVAL_KINDS];
    double reward_func[PT_GRPO_EVAL_KINDS][PT_GRPO_MAX_REWARD_FUNCS];
} pt_grpo_eval_sums;

typedef struct pt_grpo_eval_options {
    size_t size;                         /* sizeof(pt_grpo_eval_options) */
    /* The run's sampling: max_new_tokens, temperature, top_k, top_p, min_p,
     * stop ids (seed and stream_offset are ignored).  NULL: the defaults. */
    const pt_generate_options *sampling;
    int samples;                         /* sampled completions of each row, >= 1; default 1 */
    uint64_t seed;                       /* the run's seed (mixed with a constant); default 0 */
    int batch;                           /* rows per pt_generate call; 0 (default): the generator's room */
    int64_t begin, count;                /* rows [begin, begin + count); count -1 (default): to the end */
} pt_grpo_eval_options;

PT_API int pt_grpo_eval_options_init(pt_grpo_eval_options *opts);

/* Evaluate rows [begin, begin + count) with gen (room for `batch` rows of
 * the longest prompt plus max_new_tokens): one greedy completion of each
 * row and, when the sampling temperature is > 0, `samples` completions of
 * each at the sampling settings from the seed (seed ^ a constant), sample
 * k of row i from stream i * samples + k (row indices of the whole file:
 * the same numbers for any split of the rows).  Each completion is scored
 * by every reward of `rewards` (rows need the answers of exact and
 * contains); it is correct when every exact or contains reward with a
 * positive weight gives 1.  *sums is zeroed first.  PT_EINVAL for bad
 * options or a range outside the rows, PT_EFORMAT for a row without an
 * answer its rewards need, pt_generate's status. */
PT_API int pt_grpo_evaluate(pt_grpo_eval_sums *sums, pt_generator *gen, const pt_prompt_rows *rows,
                            const pt_tokenizer *tok, const pt_builtin_rewards *rewards,
                            const pt_grpo_eval_options *opts);

/* The metrics row of sums (of the whole job) after `step`, one line of
 * JSON without the newline, allocated (pt_free): {"step": STEP, and for
 * greedy and, when there are sampled completions, sampled:
 * "eval/reward_mean_K", "eval/accuracy_K" (when rewards have accuracy),
 * "eval/rewards/NAME/mean_K" per reward, "eval/mean_length_K"; then
 * "eval/prompts" and "eval/samples" (samples, or 0 without sampled
 * completions)}; numbers as %.6g, null when not finite. */
PT_API int pt_grpo_eval_row(char **json, const pt_grpo_eval_sums *sums, const pt_builtin_rewards *rewards,
                            int samples, int64_t step);

#ifdef __cplusplus
}
#endif

#endif
