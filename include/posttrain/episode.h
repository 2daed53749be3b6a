/*
 * libposttrain public API: multi-turn episodes played from the KV cache (the
 * rollouts of an agent: the model generates an assistant turn, the
 * environment answers with a tool result or an observation, the model goes
 * on, until the environment says the episode is done).
 *
 * The host implements the environment as one callback (pt_env_fn) with its
 * own payload.  pt_episodes_run plays n episodes on a pt_generator: every
 * episode's prompt is prefilled once (identical prompts, as in a GRPO
 * group, once for all of them), then all episodes decode together; when an
 * episode's turn ends (a stop id, a stop string, the per-turn token limit)
 * the environment is called with the episode so far, and the ids it appends
 * are prefilled into that episode's cache row in the next batched step,
 * beside the other episodes' decoding tokens: the conversation is never
 * prefilled again.  Episodes that end leave the batch, and episodes waiting
 * for a row (more episodes than the generator's max_batch) take it.
 *
 * What comes back (pt_episode_results) holds, per episode, the ids exactly
 * as sampled and appended, a loss mask that is 1 exactly on the sampled
 * tokens, their sampling log-probabilities, the rewards, the group and how
 * it ended; pt_rollout_buffer_add_episodes puts them into a GRPO rollout
 * buffer.  See docs/episodes.md.
 */
#ifndef POSTTRAIN_EPISODE_H
#define POSTTRAIN_EPISODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/generate.h"
#include "posttrain/grpo.h"
#include "posttrain/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How one turn (one assistant generation) ended. */
typedef enum pt_turn_end {
    PT_TURN_STOP_ID = 0,     /* it sampled a stop id (kept as its last token) */
    PT_TURN_STOP_STRING = 1, /* its decoded text came to contain a stop string (the token
                              * that completed it is its last, kept as sampled) */
    PT_TURN_LENGTH = 2,      /* it reached the sampling options' max_new_tokens */
    PT_TURN_MAX_TOKENS = 3   /* the episode reached max_total_tokens */
} pt_turn_end;
PT_API const char *pt_turn_end_name(int value);
PT_API int pt_turn_end_from_name(int *out, const char *name);

/* How an episode ended. */
typedef enum pt_episode_end {
    PT_EPISODE_DONE = 0,       /* the environment answered PT_ENV_DONE */
    PT_EPISODE_MAX_TURNS = 1,  /* the environment appended after the max_turns-th turn */
    PT_EPISODE_MAX_TOKENS = 2, /* no room was left: the environment appended after a turn
                                * that reached max_total_tokens, or more ids than fit */
    PT_EPISODE_ERROR = 3,      /* the environment failed or answered malformed output */
    PT_EPISODE_STOPPED = 4     /* the run stopped before the episode ended (an error with
                                * PT_EPISODE_ERROR_STOP, the abort callback, a failure) */
} pt_episode_end;
PT_API const char *pt_episode_end_name(int value);
PT_API int pt_episode_end_from_name(int *out, const char *name);

/* The environment's answer. */
typedef enum pt_env_action {
    PT_ENV_APPEND = 1, /* append ids (or text) to the context, then the model's next turn */
    PT_ENV_DONE = 2,   /* the episode is over */
    PT_ENV_PENDING = 3 /* not ready yet (a tool still running): the episode's row waits
                        * and the environment is called again with the same turn
                        * after the next batched step, while the others decode */
} pt_env_action;
PT_API const char *pt_env_action_name(int value);
PT_API int pt_env_action_from_name(int *out, const char *name);

/* What an environment failure does to the run. */
typedef enum pt_episode_on_error {
    PT_EPISODE_ERROR_CONTINUE = 0, /* that episode ends with its error, the others go on */
    PT_EPISODE_ERROR_STOP = 1      /* the run stops: pt_episodes_run returns the error */
} pt_episode_on_error;
PT_API const char *pt_episode_on_error_name(int value);
PT_API int pt_episode_on_error_from_name(int *out, const char *name);

/* What the environment sees when a turn of an episode has ended.  Written
 * by the library (size is the library's sizeof); every pointer is valid
 * during the call only. */
typedef struct pt_env_turn {
    size_t size;
    int episode;             /* the episode's index in the run, 0 .. n-1 */
    int64_t group;           /* its group (pt_episodes_run's groups) */
    int turn;                /* the turn that just ended: 0, 1, ... */
    const int32_t *ids;      /* the episode so far: its prompt, then every sampled and
                              * appended id, exactly as sampled and appended */
    int n_ids;
    int prompt_len;
    int turn_start;          /* this turn's sampled ids are ids[turn_start .. n_ids) */
    int turn_end;            /* pt_turn_end: why the turn ended */
    /* 0 when the episode can go on; otherwise the pt_episode_end an
     * PT_ENV_APPEND answer ends it with (PT_EPISODE_MAX_TURNS: this was the
     * max_turns-th turn; PT_EPISODE_MAX_TOKENS: no room for another token):
     * answer PT_ENV_DONE with the episode's rewards. */
    int final;
    int tokens_left;         /* most ids an append may add (the next turn needs room for
                              * at least one sampled token); 0 when final */
    /* With decode_text (and a tokenizer): the turn's sampled ids and the
     * whole completion (ids[prompt_len .. n_ids)) decoded, special tokens
     * included (so pt_chat_parse_tool_calls sees the end-of-turn token);
     * NULL otherwise. */
    const char *turn_text;
    size_t turn_text_len;
    const char *text;
    size_t text_len;
    int attempt;             /* 0 at the first call for this turn; 1, 2, ... when it is
                              * called again after answering PT_ENV_PENDING */
} pt_env_turn;

/* The environment's answer, written by the callback into the reply the
 * library hands it (size is the library's sizeof; every field starts at
 * 0 / NULL).  What it points to must outlast the callback (memory of the
 * payload, or static, not the callback's locals): the library copies it as
 * soon as the callback returns, before it calls the environment again. */
typedef struct pt_env_reply {
    size_t size;
    int action;                /* PT_ENV_APPEND or PT_ENV_DONE (0, unset, is malformed) */
    /* PT_ENV_APPEND: the ids to append (tool results, observations: in the
     * context, never in the loss), or NUL-terminated text, encoded with the
     * options' tokenizer without special tokens added (special tokens
     * written in the text, such as <|im_end|>, are matched).  Not both;
     * none appends nothing (the model's next turn follows at once). */
    const int32_t *ids;
    int n_ids;
    const char *text;
    /* The episode's rewards (n_reward_funcs floats, NaN: declined), read
     * when this answer ends the episode (PT_ENV_DONE, or an append the
     * limits refuse); NULL: all NaN. */
    const float *rewards;
    /* The rewards of the turn that just ended (n_reward_funcs floats), or
     * NULL (NaN). */
    const float *turn_rewards;
    /* With a non-zero return: why, copied into the episode's error. */
    const char *error;
} pt_env_reply;

/* The environment: fill reply and return 0; any other return value is a
 * failure of this episode (PT_ECALLBACK), as is a malformed reply (an
 * unknown action, ids outside the vocabulary, ids and text together, text
 * without a tokenizer, an infinite reward: PT_EINVAL).  The callback runs
 * on the thread that called pt_episodes_run, between batched steps.  An
 * environment whose tools run elsewhere (threads, processes) starts them
 * and answers PT_ENV_PENDING, and gives the result when called again: the
 * other episodes decode meanwhile.  When no episode is left to decode, the
 * pending ones are called again at once (block in the callback then).  The
 * callback may use the library (a tokenizer, the chat parser), but not the
 * run's generator or results. */
typedef int (*pt_env_fn)(pt_env_reply *reply, const pt_env_turn *turn, void *payload);

/* Options.  Fill with pt_episode_options_init() first. */
typedef struct pt_episode_options {
    size_t size;                  /* sizeof(pt_episode_options) */
    /* Sampling, per turn (NULL: pt_generate_options_init's): max_new_tokens
     * is the limit of one turn, the stop ids end a turn (n_stop_ids < 0:
     * the config's eos id), temperature, top_k, top_p and min_p as in
     * pt_generate.  Episode e samples every one of its turns from the
     * stream (seed, stream_offset + e), so its tokens depend only on its
     * prompt, the environment's answers, the options and e: never on the
     * other episodes, the schedule or the thread count. */
    const pt_generate_options *sampling;
    int max_turns;                /* turns (assistant generations) per episode, >= 1;
                                   * default 4 */
    int max_total_tokens;         /* ids per episode, prompt included; 0 (default): the
                                   * generator's max_seq, the most allowed */
    /* A turn also ends once its decoded text contains one of these
     * (e.g. "</tool_call>"); needs tokenizer. */
    const char *const *stop_strings;
    int n_stop_strings;
    const pt_tokenizer *tokenizer;/* for stop strings, decode_text and text replies */
    bool decode_text;             /* fill pt_env_turn's text (needs tokenizer); default false */
    int n_reward_funcs;           /* floats in a reply's rewards and turn_rewards,
                                   * 1 .. PT_GRPO_MAX_REWARD_FUNCS; default 1 */
    int on_error;                 /* pt_episode_on_error; default CONTINUE */
    /* Tokens one batched step may feed (every decoding row's one token,
     * then appended ids; an append longer than what is left goes on in the
     * next steps): bounds how long the decoding rows wait for a long
     * append.  0 (default): max(max_seq, max_batch) of the generator, the
     * most a step holds; otherwise from its max_batch to that. */
    int max_step_tokens;
} pt_episode_options;

PT_API int pt_episode_options_init(pt_episode_options *opts);

/* The episodes of a run, kept by the library until the next run on the
 * same results or pt_episode_results_free. */
typedef struct pt_episode_results pt_episode_results;

PT_API int pt_episode_results_create(pt_episode_results **out);
PT_API void pt_episode_results_free(pt_episode_results *res);

/* Play n episodes.  Episode e's prompt is prompt_lens[e] >= 1 ids, stored
 * back to back in prompt_ids, shorter than max_total_tokens; groups[e] is
 * its group (NULL: e).  n may exceed the generator's max_batch: waiting
 * episodes take the rows of those that end.  env is called once each time
 * a turn ends, with payload.
 *
 * Returns PT_OK when every episode ended (with PT_EPISODE_ERROR_CONTINUE,
 * episodes whose environment failed are among them, with their error).
 * Otherwise the error: bad arguments and options (PT_EINVAL naming them,
 * PT_ERANGE for an id outside the vocabulary, PT_ESTATE for a generator
 * older than the model's LoRA change; nothing is played then), an episode's
 * error with PT_EPISODE_ERROR_STOP, PT_ECANCELLED from the abort callback
 * (polled once per batched step and per layer of a prefill), PT_ENOMEM; the
 * results then hold every episode, those that had not ended marked
 * PT_EPISODE_STOPPED. */
PT_API int pt_episodes_run(pt_episode_results *res, pt_generator *gen, const int32_t *prompt_ids,
                           const int32_t *prompt_lens, const int64_t *groups, int n,
                           const pt_episode_options *opts, pt_env_fn env, void *payload);

/* One episode of the results: pointers into the results, valid until the
 * next run on them or their free. */
typedef struct pt_episode {
    size_t size;                  /* sizeof(pt_episode) */
    int index;                    /* its index in the run */
    int64_t group;
    const int32_t *ids;           /* prompt, then every sampled and appended id */
    int n_ids;
    int prompt_len;
    /* Per completion token (n_ids - prompt_len entries, entry j for
     * ids[prompt_len + j], as pt_rollout_sample): 1 exactly on the sampled
     * tokens (never an appended one, never an end-of-turn token the model
     * did not produce itself), and their sampling log-probabilities (as
     * pt_generate's; 0 where the mask is 0). */
    const uint8_t *loss_mask;
    const float *logprobs;
    int n_turns;
    const int32_t *turn_start;    /* per turn: index in ids of its first sampled id */
    const int32_t *turn_len;      /* per turn: its sampled ids */
    const int32_t *turn_end;      /* per turn: pt_turn_end */
    int n_reward_funcs;
    const float *rewards;         /* n_reward_funcs (NaN: declined, or never given) */
    const float *turn_rewards;    /* n_turns x n_reward_funcs: turn t's at t*n_reward_funcs */
    int end;                      /* pt_episode_end */
    /* It ended at a limit (PT_EPISODE_MAX_TURNS, PT_EPISODE_MAX_TOKENS), or
     * its last turn did (PT_TURN_LENGTH, PT_TURN_MAX_TOKENS). */
    bool truncated;
    int status;                   /* PT_OK; the error's status for PT_EPISODE_ERROR;
                                   * PT_ECANCELLED for PT_EPISODE_STOPPED */
    const char *error;            /* NULL, or what went wrong (ERROR, STOPPED) */
} pt_episode;

PT_API int pt_episode_init(pt_episode *ep);
/* The episodes in res (0 for NULL). */
PT_API int pt_episode_results_size(const pt_episode_results *res);
PT_API PT_DEPRECATED("pt_episode_results_size")
int pt_episode_results_count(int *n, const pt_episode_results *res);
PT_API int pt_episode_results_get(pt_episode *out, const pt_episode_results *res, int i);

/* Counters of the last run. */
typedef struct pt_episode_stats {
    size_t size;                  /* sizeof(pt_episode_stats) */
    int episodes;
    int done, max_turns, max_tokens, errors, stopped; /* episodes by pt_episode_end */
    int truncated;
    int64_t turns;
    int64_t sampled_tokens;       /* the loss-mask tokens */
    int64_t appended_tokens;      /* by the environment */
    int64_t prompt_tokens;        /* of every episode */
    /* Tokens the model was run on other than its own sampled ones: the
     * prompts (an identical prompt of several episodes once) plus the
     * appended ids.  Cache continuation makes this prompt + appended; a
     * host re-prefilling each turn runs every turn's whole conversation. */
    int64_t prefill_tokens;
    int64_t prompt_tokens_shared; /* prompt tokens copied from an identical prompt's cache */
    int64_t forward_tokens;       /* every token through the model: prefill + sampled ones fed back */
    int64_t steps;                /* batched forwards after the prompts' prefill */
    int64_t env_calls;
    double seconds;               /* wall time of the run */
    double env_seconds;           /* of it, in the environment */
    double tokens_per_second;     /* sampled tokens per second outside the environment */
    int64_t env_pending;          /* of env_calls, those answered PT_ENV_PENDING */
} pt_episode_stats;

PT_API int pt_episode_stats_init(pt_episode_stats *stats);
PT_API int pt_episode_results_stats(pt_episode_stats *stats, const pt_episode_results *res);

/* Add every episode of the results that ended without error (not
 * PT_EPISODE_ERROR or PT_EPISODE_STOPPED) to buf as one pt_rollout_sample
 * each: ids, loss mask, the sampling log-probabilities as
 * sampling_logprobs (pi_old is then recorded by the first pt_grpo_step, and
 * the step compares and corrects the two), group, rewards, truncated.  In
 * a group one of whose episodes got a reward for a turn (turn_rewards),
 * every member trains on segment rewards: segment k (the k-th run of
 * sampled tokens) gets the buffer-weighted sum of the turn rewards of the
 * turns that sampled into it (NaN, advantage 0, when none has one); the
 * episode rewards are then only reported.  The results' n_reward_funcs
 * must be the buffer's (PT_EINVAL naming both).  All or nothing; *n_added (may be NULL)
 * says how many went in. */
PT_API int pt_rollout_buffer_add_episodes(int *n_added, pt_rollout_buffer *buf,
                                          const pt_episode_results *res);

#ifdef __cplusplus
}
#endif

#endif
