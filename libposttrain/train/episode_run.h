/* One pt_episodes_run in progress: the state shared by the scheduler
 * (episode.c), the environment protocol (episode_env.c) and the stop ids
 * and stop strings (episode_stop.c). */
#ifndef PT_TRAIN_EPISODE_RUN_H
#define PT_TRAIN_EPISODE_RUN_H

#include "core/strbuf.h"
#include "train/episode_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ep_run {
    pt_episode_results *res;
    pt_generator *g;
    const pt_episode_options *o;
    pt_generate_options so;
    pt_sampler sampler;
    int V, L, B, C, max_new;
    int32_t *stop;
    int n_stop;
    size_t *stop_len;
    pt_env_fn env;
    void *payload;
    int next;                     /* the next waiting episode */
    int *row_ep;                  /* [B] the episode in each row, -1: free */
    pt_decode_stream **ds;        /* [B] per row, with stop strings */
    pt_strbuf *text;              /* [B] the current turn's text, with stop strings */
    int32_t *s_rows, *s_ids, *s_pos; /* [C] the step's tokens */
    uint8_t *s_want;
    int *w_ep;                    /* [B] rows to sample: their episodes */
    pt_rng **w_rng;
    int32_t *w_tok, *w_hrow, *w_hstep;
    float *w_lp;
    int *adm_row, *queue;         /* [B] */
    int32_t tok_vocab;            /* the tokenizer's ids (decoding skips others) */
    int32_t *dec;                 /* scratch for decoding: max_seq ids */
    double env_s;
    pt_episode_stats *st;
} ep_run;

/* ---- the scheduler (episode.c) ---- */

/* Episode e ends (end: a PT_EPISODE_*): its row is freed for a waiting
 * episode, truncated set from how it and its last turn ended. */
void pt__episode_finish(ep_run *r, ep_rec *e, int end);

/* ---- the environment protocol (episode_env.c) ---- */

/* Call the environment for episode idx, whose turn just ended (or whose
 * answer was pending), check its reply and apply it: the episode ends,
 * appends ids (its row's next step feeds them) or waits.  A malformed
 * reply or a failed call ends the episode with the error (PT_OK), or with
 * PT_EPISODE_ERROR_STOP returns it as the run's error. */
int pt__episode_call_env(ep_run *r, int idx);

/* ---- stop ids and stop strings (episode_stop.c) ---- */

/* The stop ids (the sampling options', or the config's eos) and, with
 * stop strings, their lengths and a decode stream and text per row. */
int pt__episode_stop_alloc(ep_run *r, const pt_model_config *c);
void pt__episode_stop_free(ep_run *r);
/* tok is one of the stop ids. */
bool pt__episode_is_stop_id(const ep_run *r, int32_t tok);
/* Feed a sampled token to its row's text; *hit when the turn's text now
 * contains a stop string. */
int pt__episode_stop_string_hit(bool *hit, ep_run *r, int row, int32_t tok);
/* A new turn on row: its text starts empty. */
int pt__episode_stop_turn_reset(ep_run *r, int row);

#endif
