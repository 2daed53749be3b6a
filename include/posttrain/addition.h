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
 * (samples added before a failure stay in buf). */
PT_API int pt_addition_rollouts(pt_rollout_buffer *buf, pt_generator *gen, const pt_tokenizer *tok,
                                const int64_t *pairs, int n, int group, int digits, const pt_generate_options *opts);

#ifdef __cplusplus
}
#endif

#endif
