/* The episodes of a run (pt_episode_results_*): one record per episode,
 * its ids, mask, log-probabilities, turns and rewards, kept between runs;
 * the names of the episode enums.  The engine that fills them is
 * episode.c. */
#include "train/episode_internal.h"

#include <math.h>
#include <string.h>

/* ---- results --------------------------------------------------------------------- */

PT_ZERO_INIT(pt_episode_init, pt_episode, ep)

PT_ZERO_INIT(pt_episode_stats_init, pt_episode_stats, s)

int pt_episode_results_create(pt_episode_results **out)
{
    PT_CHECK_NULL(out);
    *out = pt__calloc(1, sizeof **out);
    if (!*out)
        return PT_ENOMEM;
    (*out)->k = 1;
    pt_episode_stats_init(&(*out)->stats);
    return PT_OK;
}

static void rec_free(ep_rec *e)
{
    pt_free(e->ids);
    pt_free(e->mask);
    pt_free(e->lp);
    pt_free(e->t_start);
    pt_free(e->t_len);
    pt_free(e->t_end);
    pt_free(e->t_rew);
    pt_free(e->error);
}

void pt_episode_results_free(pt_episode_results *res)
{
    if (!res)
        return;
    for (int i = 0; i < res->alloc; i++)
        rec_free(&res->e[i]);
    pt_free(res->e);
    pt_free(res);
}

int pt__episode_results_reset(pt_episode_results *res, int n, int L, int k)
{
    if (n > res->alloc) {
        ep_rec *e = pt__realloc_array(res->e, (size_t)n, sizeof *e);
        if (!e)
            return PT_ENOMEM;
        memset(e + res->alloc, 0, (size_t)(n - res->alloc) * sizeof *e);
        res->e = e;
        res->alloc = n;
    }
    res->n = n;
    res->k = k;
    pt_episode_stats_init(&res->stats);
    for (int i = 0; i < n; i++) {
        ep_rec *e = &res->e[i];
        if (e->cap < L) {
            pt_free(e->ids);
            pt_free(e->mask);
            pt_free(e->lp);
            e->ids = pt__malloc_array((size_t)L, sizeof *e->ids);
            e->mask = pt__malloc_array((size_t)L, sizeof *e->mask);
            e->lp = pt__malloc_array((size_t)L, sizeof *e->lp);
            e->cap = L;
            if (!e->ids || !e->mask || !e->lp) {
                e->cap = 0;
                return PT_ENOMEM;
            }
        }
        pt_free(e->error);
        e->error = NULL;
        e->n = e->prompt_len = e->n_turns = 0;
        e->status = PT_OK;
        e->end = PT_EPISODE_STOPPED;
        e->truncated = false;
        e->phase = PH_WAIT;
        e->row = -1;
        e->cached = e->turn_tokens = 0;
        for (int j = 0; j < PT_GRPO_MAX_REWARD_FUNCS; j++)
            e->rewards[j] = NAN;
    }
    return PT_OK;
}

int pt__episode_rec_add_turn(ep_rec *e, int k, int p)
{
    if (e->n_turns == e->t_cap) {
        int cap = e->t_cap ? 2 * e->t_cap : 4;
        int32_t *a = pt__realloc_array(e->t_start, (size_t)cap, sizeof *a);
        if (a)
            e->t_start = a;
        int32_t *b = a ? pt__realloc_array(e->t_len, (size_t)cap, sizeof *b) : NULL;
        if (b)
            e->t_len = b;
        int32_t *c = b ? pt__realloc_array(e->t_end, (size_t)cap, sizeof *c) : NULL;
        if (c)
            e->t_end = c;
        float *w = c ? pt__realloc_array(e->t_rew, (size_t)cap * (size_t)k, sizeof *w) : NULL;
        if (!w)
            return PT_ENOMEM;
        e->t_rew = w;
        e->t_cap = cap;
    }
    int t = e->n_turns++;
    e->t_start[t] = p;
    e->t_len[t] = 0;
    e->t_end[t] = PT_TURN_LENGTH;
    for (int j = 0; j < k; j++)
        e->t_rew[(size_t)t * (size_t)k + (size_t)j] = NAN;
    return PT_OK;
}

int pt_episode_results_size(const pt_episode_results *res)
{
    return res ? res->n : 0;
}

PT_DEPRECATED_GETTER(int, pt_episode_results_count, n, pt_episode_results, res, pt_episode_results_size)

int pt_episode_results_get(pt_episode *out, const pt_episode_results *res, int i)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(res);
    PT_CHECK_STRUCT_OUT(out, pt_episode, pt_episode_init);
    PT_CHECK_ARG(i >= 0 && i < res->n, i, "%d is outside 0 .. %d (the episodes of the last run)",
                 i, res->n - 1);
    const ep_rec *e = &res->e[i];
    pt_episode ep;
    pt_episode_init(&ep);
    ep.index = i;
    ep.group = e->group;
    ep.ids = e->ids;
    ep.n_ids = e->n;
    ep.prompt_len = e->prompt_len;
    ep.loss_mask = e->mask + e->prompt_len;
    ep.logprobs = e->lp + e->prompt_len;
    ep.n_turns = e->n_turns;
    ep.turn_start = e->t_start;
    ep.turn_len = e->t_len;
    ep.turn_end = e->t_end;
    ep.n_reward_funcs = res->k;
    ep.rewards = e->rewards;
    ep.turn_rewards = e->t_rew;
    ep.end = e->end;
    ep.truncated = e->truncated;
    ep.status = e->status;
    ep.error = e->error;
    pt__struct_write(out, &ep);
    return PT_OK;
}

int pt_episode_results_stats(pt_episode_stats *stats, const pt_episode_results *res)
{
    PT_CHECK_NULL(stats);
    PT_CHECK_NULL(res);
    return PT_STRUCT_GET(stats, &res->stats, pt_episode_stats_init);
}

/* ---- names ---- */

static const pt_enum_entry k_turn_end_names[] = {
    { PT_TURN_STOP_ID, "stop_id" },
    { PT_TURN_STOP_STRING, "stop_string" },
    { PT_TURN_LENGTH, "length" },
    { PT_TURN_MAX_TOKENS, "max_tokens" },
};
PT_ENUM_NAME_FUNCS(pt_turn_end, k_turn_end_names, "turn end")

static const pt_enum_entry k_episode_end_names[] = {
    { PT_EPISODE_DONE, "done" },
    { PT_EPISODE_MAX_TURNS, "max_turns" },
    { PT_EPISODE_MAX_TOKENS, "max_tokens" },
    { PT_EPISODE_ERROR, "error" },
    { PT_EPISODE_STOPPED, "stopped" },
};
PT_ENUM_NAME_FUNCS(pt_episode_end, k_episode_end_names, "episode end")

static const pt_enum_entry k_env_action_names[] = {
    { PT_ENV_APPEND, "append" },
    { PT_ENV_DONE, "done" },
    { PT_ENV_PENDING, "pending" },
};
PT_ENUM_NAME_FUNCS(pt_env_action, k_env_action_names, "environment action")

static const pt_enum_entry k_on_error_names[] = {
    { PT_EPISODE_ERROR_CONTINUE, "continue" },
    { PT_EPISODE_ERROR_STOP, "stop" },
};
PT_ENUM_NAME_FUNCS(pt_episode_on_error, k_on_error_names, "on-error policy")
