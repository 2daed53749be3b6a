/* The episode engine's records, shared by the engine (episode.c and the
 * files of episode_run.h), its options' checks (episode_options.c), its
 * results (episode_results.c) and the way into a rollout buffer
 * (grpo_rollout_episodes.c). */
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

/* ---- the options' checks (episode_options.c) ---- */

/* The options of pt_episodes_run checked against the generator (messages
 * name pt_episodes_run); *limit receives the ids an episode may hold. */
int pt__episode_check_options(const pt_episode_options *o, const pt_generator *g, int *limit);
/* The n prompts (lens[e] ids each, back to back in ids): each 1 .. L-1 ids
 * below V (messages name pt_episodes_run). */
int pt__episode_check_prompts(const int32_t *ids, const int32_t *lens, int n, int V, int L);

/* ---- the results (episode_results.c) ---- */

/* Room in res for n episodes of up to L ids each, every one reset, k reward
 * functions. */
int pt__episode_results_reset(pt_episode_results *res, int n, int L, int k);
/* A new turn of e, its first token at position p, with k rewards (NaN):
 * PT_OK, or PT_ENOMEM with no turn added. */
int pt__episode_rec_add_turn(ep_rec *e, int k, int p);

#endif
