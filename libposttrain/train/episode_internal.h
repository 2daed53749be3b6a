/* The episode engine's records, shared by the engine (episode.c) and its
 * results, options and rollout-buffer side (episode_results.c). */
#ifndef PT_TRAIN_EPISODE_INTERNAL_H
#define PT_TRAIN_EPISODE_INTERNAL_H

#include "posttrain/episode.h"

#include "core/core.h"
#include "model/generate_rows.h"
#include "train/grpo_internal.h"

/* waiting for a row; decoding (one pending token); appending (pending
 * ids); waiting for the environment's answer; ended */
enum { PH_WAIT, PH_DECODE, PH_APPEND, PH_ENV, PH_ENDED };

/* One episode: its ids, mask and log-probabilities per position (the
 * prompt's positions 0), its turns, rewards and how it ended. */
typedef struct ep_rec {
    int32_t *ids;
    uint8_t *mask;
    float *lp;
    int n, cap, prompt_len;
    int32_t *t_start, *t_len, *t_end;
    float *t_rew;                 /* t_cap x k */
    int n_turns, t_cap;
    float rewards[PT_GRPO_MAX_REWARD_FUNCS];
    int64_t group;
    int end, status;
    bool truncated;
    char *error;
    /* while playing */
    pt_rng rng;
    int phase, row, cached, turn_tokens, attempt;
    int64_t pending_step;         /* r->st->steps when it answered PT_ENV_PENDING */
} ep_rec;

struct pt_episode_results {
    ep_rec *e;
    int n, alloc;                 /* episodes of the last run; records allocated */
    int k;                        /* reward functions */
    pt_episode_stats stats;
};

/* The options of pt_episodes_run checked against the generator (messages
 * name pt_episodes_run); *limit receives the ids an episode may hold. */
int pt_episode_check_options(const pt_episode_options *o, const pt_generator *g, int *limit);
/* The n prompts (lens[e] ids each, back to back in ids): each 1 .. L-1 ids
 * below V (messages name pt_episodes_run). */
int pt_episode_check_prompts(const int32_t *ids, const int32_t *lens, int n, int V, int L);
/* Room in res for n episodes of up to L ids each, every one reset, k reward
 * functions. */
int pt_episode_results_reset(pt_episode_results *res, int n, int L, int k);

/* pt_episodes_run's work once its arguments are checked and the generator
 * taken (core/busy.h): a callback that uses gen meanwhile gets PT_EBUSY. */
int pt_episodes_run_taken(pt_episode_results *res, pt_generator *gen, const int32_t *prompt_ids,
                          const int32_t *prompt_lens, const int64_t *groups, int n,
                          const pt_episode_options *opts, pt_env_fn env, void *payload);

#endif
