/*
 * libposttrain public API: the built-in addition task of `posttrain demo`.
 *
 * Problems are "a+b=" with both operands written with `digits` digits
 * (leading zeros), answered with the digits + 1 digits of the sum, least
 * significant first ("59+96=" -> "551"), so a model writes each digit after
 * the column that makes it.  The "slip" answer is the one a teacher gives
 * that forgets the carries: each column's digit sum mod 10.  One pair in 8
 * (by a fixed hash, the same for every seed and digit count) is held out:
 * never drawn for training, and the evaluation set is made of them.  Draws
 * come from the splitmix64 stream at *rng, so a host reproduces the demo's
 * data from its seed.
 */
#ifndef POSTTRAIN_ADDITION_H
#define POSTTRAIN_ADDITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/generate.h"
#include "posttrain/grpo.h"
#include "posttrain/tokenizer.h"
#include "posttrain/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Operand digits accepted (1 .. PT_ADDITION_MAX_DIGITS). */
#define PT_ADDITION_MAX_DIGITS 9

/* The prompt "a+b=" (prompt_cap >= 2 * digits + 3 bytes) and the answer
 * (answer_cap >= digits + 2): the right one, or with slip the carries
 * forgotten.  PT_EINVAL for digits out of range, a or b not in
 * [0, 10^digits), or a buffer too small. */
PT_API int pt_addition_problem(char *prompt, size_t prompt_cap, char *answer, size_t answer_cap, int digits,
                               int64_t a, int64_t b, bool slip);
/* Whether the pair is held out (about 1 in 8). */
PT_API bool pt_addition_held_out(int64_t a, int64_t b);
/* A training pair (not held out) of `digits`-digit operands from *rng. */
PT_API int pt_addition_train_pair(int64_t *a, int64_t *b, int digits, uint64_t *rng);
/* A trace of the teacher: a training pair, then whether it slips (forgets
 * the carries), with probability slip in [0, 1], from the same stream. */
PT_API int pt_addition_teacher_pair(int64_t *a, int64_t *b, bool *slipped, int digits, double slip, uint64_t *rng);
/* Up to n distinct held-out pairs into pairs[2 * i], pairs[2 * i + 1], the
 * same for every seed (a fixed stream; they may be fewer than n when
 * `digits` leaves fewer, *n_out says how many). */
PT_API int pt_addition_held_out_pairs(int64_t *pairs, size_t *n_out, size_t n, int digits);
/* Score a completion of a+b: its n tokens (with the EOS that ended it),
 * decoded by tok.  *correct: exactly the answer followed by EOS (the reward
 * of the demo's GRPO); *slipped (may be NULL): exactly the slip answer and
 * EOS where the slip differs from the right answer. */
PT_API int pt_addition_score(bool *correct, bool *slipped, const pt_tokenizer *tok, const int32_t *tokens, size_t n,
                             int digits, int64_t a, int64_t b);

/* The prompt of a+b ("a+b=") encoded by tok with its special tokens (the
 * byte-level tokenizer's BOS first): *n ids into ids, which has room for
 * cap.  pt_addition_problem's PT_EINVAL, the tokenizer's status, PT_ERANGE
 * when the ids do not fit in cap. */
PT_API int pt_addition_prompt_ids(int32_t *ids, size_t cap, size_t *n, const pt_tokenizer *tok, int digits,
                                  int64_t a, int64_t b);

typedef struct pt_addition_eval_options {
    size_t size;        /* sizeof(pt_addition_eval_options) */
    int digits;         /* operand digits; default 2 */
    double temperature; /* 0 (default): greedy; else sampled at it from seed */
    uint64_t seed;      /* the sampling seed: pair i draws from stream i, whatever the batch */
    int batch;          /* pairs per pt_generate call; 0 (default): the generator's room */
} pt_addition_eval_options;

PT_API int pt_addition_eval_options_init(pt_addition_eval_options *opts);

/* Complete the n pairs (pairs[2 * i], pairs[2 * i + 1]) with gen (room for
 * opts->batch rows of a prompt and digits + 2 new tokens), up to digits + 2
 * tokens each, and score each as pt_addition_score does: *correct counts
 * the pairs answered right, *slipped (may be NULL) those answered with the
 * carries forgotten.  tokens (n * (digits + 2) entries) and n_tokens (n)
 * receive the completions as pt_generate gives them (both NULL: not kept).
 * PT_EINVAL for bad options or pairs, the tokenizer's or pt_generate's
 * status (the counts are 0 then). */
PT_API int pt_addition_evaluate(int64_t *correct, int64_t *slipped, int32_t *tokens, int32_t *n_tokens,
                                pt_generator *gen, const pt_tokenizer *tok, const int64_t *pairs, size_t n,
                                const pt_addition_eval_options *opts);

/* Called with each trace's prompt ("a+b=") and completion (the answer
 * given); nonzero stops pt_addition_add_traces with PT_ECALLBACK. */
typedef int (*pt_addition_trace_fn)(const char *prompt, const char *completion, void *payload);

/* n traces of the teacher (pt_addition_teacher_pair from *rng: `digits`
 * digits, slipping with probability slip) appended to data as SFT rows:
 * the prompt's ids as pt_addition_prompt_ids gives them, the answer's ids
 * (the slip when it slipped; encoded without special tokens) and EOS,
 * trained on the answer and EOS only.  *wrong (may be NULL): how many
 * answers differ from the right one.  row (may be NULL) gets each trace
 * after it is added (e.g. to write it as a {"prompt", "completion"} row).
 * PT_EINVAL for bad arguments, the tokenizer's or pt_dataset_add's status,
 * PT_ECALLBACK; the traces added before a failure stay in data. */
PT_API int pt_addition_add_traces(pt_dataset *data, int64_t *wrong, const pt_tokenizer *tok, int digits, double slip,
                                  int64_t n, uint64_t *rng, pt_addition_trace_fn row, void *payload);

/* A GRPO step's rollouts on addition: `group` completions of each of the
 * n pairs (pairs[2 * p], pairs[2 * p + 1]), sampled with gen in one
 * pt_generate call of n * group rows (room for them, each the prompt and
 * opts->max_new_tokens; digits + 2 holds the answer and EOS) at opts (NULL:
 * the defaults), added to buf as group p: reward 1 for exactly the answer
 * and EOS (pt_addition_score), else 0; the sampler's log-probabilities as
 * sampling_logprobs; truncated when the length limit ended it.  PT_EINVAL
 * for bad arguments (more rows than the generator's room, max_new_tokens
 * not below its max_seq), the tokenizer's, pt_generate's or the buffer's status
 * (the samples are added all or none, pt_rollout_buffer_add_generated). */
PT_API int pt_addition_rollouts(pt_rollout_buffer *buf, pt_generator *gen, const pt_tokenizer *tok,
                                const int64_t *pairs, int n, int group, int digits, const pt_generate_options *opts);

/* ---- the demo's pieces: its model, its traces file, its answers shown,
 * its GRPO loop (posttrain demo and Python's posttrain.addition use them) ---- */

/* The demo's tiny Llama for tok (its vocabulary, BOS and EOS): hidden size
 * `hidden` in `heads` heads (head_dim hidden / heads, as many KV heads),
 * `layers` layers, an MLP of 3 * hidden, 64 positions, RMSNorm eps 1e-5,
 * initializer range 0.02, the embeddings tied with tied; into *cfg (filled
 * with pt_model_config_init first), for pt_model_create.  PT_EINVAL when
 * heads does not divide hidden or layers < 1. */
PT_API int pt_addition_model_config(pt_model_config *cfg, const pt_tokenizer *tok, int hidden, int layers,
                                    int heads, bool tied);

/* pt_addition_add_traces, with each trace also written to path (NULL: not
 * written) as a {"prompt": "a+b=", "completion": "<answer>"} JSONL row (the
 * data format of posttrain sft), atomically: the rows go to a temporary
 * file beside path, renamed over it once all are written; on any failure it
 * is removed and path left as it was.  The file's failures are PT_EIO (or
 * PT_ENOSPC) "cannot write <path>: <strerror>", checked before any trace is
 * added for a file that cannot be created; else pt_addition_add_traces' statuses. */
PT_API int pt_addition_save_traces(pt_dataset *data, int64_t *wrong, const pt_tokenizer *tok, int digits,
                                   double slip, int64_t n, uint64_t *rng, const char *path);

/* The first `show` of the n evaluated pairs that have a carry (whose slip
 * answer differs from the right one), as pt_addition_evaluate left their
 * completions in tokens (rows of digits + 2) and n_tokens: one line each,
 * "    <prompt><answer given, padded to digits + 1> <verdict>\n", the verdict
 * "right", "wrong: the carries forgotten, right: <answer>" or "wrong, right:
 * <answer>" (a completion that does not decode is counted, not shown); into
 * buf (cap bytes, NUL-terminated; lines that do not fit are left out).
 * PT_EINVAL for bad arguments or pairs. */
PT_API int pt_addition_show_answers(char *buf, size_t cap, const pt_tokenizer *tok, const int32_t *tokens,
                                    const int32_t *n_tokens, const int64_t *pairs, size_t n, int digits, int show);

/* Problems per GRPO step at most. */
#define PT_ADDITION_GRPO_MAX_PROMPTS 256

typedef struct pt_addition_grpo_options {
    size_t size;         /* sizeof(pt_addition_grpo_options) */
    int digits;          /* operand digits; default 2 */
    int prompts;         /* training problems per step (1 .. PT_ADDITION_GRPO_MAX_PROMPTS); default 32 */
    int group;           /* completions sampled per problem (>= 2); default 4 */
    double lr;           /* AdamW learning rate, constant; default 3e-4 */
    double beta;         /* k3 KL weight against a frozen copy of the model at create; default 0 (no copy) */
    double temperature;  /* sampling temperature, also the step's; default 1 */
    int loss_type;       /* pt_grpo_loss_type; default PT_GRPO_LOSS_DAPO (vespo: per-token IS mask) */
    int scale_rewards;   /* pt_grpo_scale; default PT_GRPO_SCALE_GROUP */
    bool drop_zero_std;  /* leave groups with equal rewards out of the step */
    bool bf16_reference; /* the reference frozen in BF16 (PT_BF16_FROZEN) */
    uint64_t seed;       /* the problems' stream and the sampling seeds; default 1 */
} pt_addition_grpo_options;

PT_API int pt_addition_grpo_options_init(pt_addition_grpo_options *opts);

/* The demo's GRPO loop on addition: each step draws `prompts` training
 * problems from the stream seed * 104729 + 3 (pt_addition_train_pair),
 * samples `group` completions of each (pt_addition_rollouts, sampling seed
 * seed * 1000003 + step, step counted from 1), scores the reference's
 * log-probs when beta > 0, and makes one pt_grpo_step update of the model
 * (AdamW, lr).  It borrows model and tok (they outlive it). */
typedef struct pt_addition_grpo pt_addition_grpo;

PT_API int pt_addition_grpo_create(pt_addition_grpo **out, pt_model *model, const pt_tokenizer *tok,
                                   const pt_addition_grpo_options *opts);
/* One step with ctx (a training context of the model, room for prompts *
 * group rows of the prompt and digits + 2 tokens) and gen (a generator of
 * the model with room for them); its statistics into *stats.  PT_EINVAL for
 * too little room, else the rollouts', reference's or pt_grpo_step's status
 * (the step is not counted then). */
PT_API int pt_addition_grpo_step(pt_grpo_stats *stats, pt_addition_grpo *g, pt_context *ctx, pt_generator *gen);
/* Steps made so far. */
PT_API int64_t pt_addition_grpo_steps(const pt_addition_grpo *g);
PT_API void pt_addition_grpo_free(pt_addition_grpo *g);

#ifdef __cplusplus
}
#endif

#endif
