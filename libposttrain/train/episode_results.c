/* The episode engine's options and results (pt_episode_results_*), and its
 * episodes into a rollout buffer (pt_rollout_buffer_add_episodes); the
 * engine itself is episode.c. */
#include "train/episode_internal.h"
#include "model/generate_rows.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- options ------------------------------------------------------------------- */

int pt_episode_options_init(pt_episode_options *o)
{
    PT_STRUCT_INIT_ZERO(o);
    o->max_turns = 4;
    o->n_reward_funcs = 1;
    o->on_error = PT_EPISODE_ERROR_CONTINUE;
    return PT_OK;
}

int pt_episode_init(pt_episode *ep)
{
    PT_STRUCT_INIT_ZERO(ep);
    return PT_OK;
}

int pt_episode_stats_init(pt_episode_stats *s)
{
    PT_STRUCT_INIT_ZERO(s);
    return PT_OK;
}

int pt_episode_check_options(const pt_episode_options *o, const pt_generator *g, int *limit)
{
    static const char fn[] = "pt_episodes_run";
    const int max_seq = pt_genrows_max_seq(g);
    if (o->max_turns < 1)
        return pt_err_arg(fn, "max_turns", "%d must be at least 1", o->max_turns);
    if (o->max_total_tokens < 0 || o->max_total_tokens > max_seq)
        return pt_err_arg(fn, "max_total_tokens", "%d must be in 0 .. the generator's max_seq "
                          "%d (0: max_seq)", o->max_total_tokens, max_seq);
    if (o->max_total_tokens == 1 || (o->max_total_tokens == 0 && max_seq < 2))
        return pt_err_arg(fn, "max_total_tokens", "%d leaves no room for a prompt and a "
                          "sampled token", o->max_total_tokens ? o->max_total_tokens : max_seq);
    *limit = o->max_total_tokens ? o->max_total_tokens : max_seq;
    if (o->n_stop_strings < 0)
        return pt_err_arg(fn, "n_stop_strings", "%d must be >= 0", o->n_stop_strings);
    if (o->n_stop_strings > 0 && !o->stop_strings)
        return pt_err_arg(fn, "stop_strings", "is NULL but n_stop_strings is %d",
                          o->n_stop_strings);
    for (int i = 0; i < o->n_stop_strings; i++)
        if (!o->stop_strings[i] || !o->stop_strings[i][0]) {
            char arg[32];
            snprintf(arg, sizeof arg, "stop_strings[%d]", i);
            return pt_err_arg(fn, arg, "is %s: a stop string needs at least one byte",
                              o->stop_strings[i] ? "empty" : "NULL");
        }
    if (o->n_stop_strings > 0 && !o->tokenizer)
        return pt_err_arg(fn, "tokenizer", "is NULL, but stop strings need one to decode the "
                          "sampled tokens");
    if (o->decode_text && !o->tokenizer)
        return pt_err_arg(fn, "tokenizer", "is NULL, but decode_text needs one");
    if (o->n_reward_funcs < 1 || o->n_reward_funcs > PT_GRPO_MAX_REWARD_FUNCS)
        return pt_err_arg(fn, "n_reward_funcs", "%d must be in 1 .. %d", o->n_reward_funcs,
                          PT_GRPO_MAX_REWARD_FUNCS);
    const int cap = pt_genrows_step_capacity(g), B = pt_genrows_max_batch(g);
    if (o->max_step_tokens != 0 && (o->max_step_tokens < B || o->max_step_tokens > cap))
        return pt_err_arg(fn, "max_step_tokens", "%d must be 0 or in %d (the generator's "
                          "max_batch: every decoding row feeds a token per step) .. %d (what "
                          "a step of this generator holds)", o->max_step_tokens, B, cap);
    if (!pt_episode_on_error_name(o->on_error))
        return pt_err_arg(fn, "on_error", "%d is not a pt_episode_on_error (0 continue, "
                          "1 stop)", o->on_error);
    return PT_OK;
}

int pt_episode_check_prompts(const int32_t *ids, const int32_t *lens, int n, int V, int L)
{
    size_t off = 0;
    for (int e = 0; e < n; e++) {
        int T = lens[e];
        if (T < 1 || T >= L)
            return pt_err(PT_EINVAL, "pt_episodes_run: prompt %d has length %d; it must be in "
                          "1 .. %d (max_total_tokens %d leaves room for a sampled token)",
                          e, T, L - 1, L);
        for (int t = 0; t < T; t++)
            if (ids[off + (size_t)t] < 0 || ids[off + (size_t)t] >= V)
                return pt_err(PT_ERANGE, "pt_episodes_run: prompt %d token %d is id %d, "
                              "outside the vocabulary [0, %d)", e, t, ids[off + (size_t)t], V);
        off += (size_t)T;
    }
    return PT_OK;
}

/* ---- results --------------------------------------------------------------------- */

int pt_episode_results_create(pt_episode_results **out)
{
    PT_CHECK_NULL(out);
    *out = pt_calloc(1, sizeof **out);
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

int pt_episode_results_reset(pt_episode_results *res, int n, int L, int k)
{
    if (n > res->alloc) {
        ep_rec *e = pt_realloc_array(res->e, (size_t)n, sizeof *e);
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
            e->ids = pt_malloc_array((size_t)L, sizeof *e->ids);
            e->mask = pt_malloc_array((size_t)L, sizeof *e->mask);
            e->lp = pt_malloc_array((size_t)L, sizeof *e->lp);
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

int pt_episode_results_count(int *n, const pt_episode_results *res)
{
    PT_CHECK_NULL(n);
    PT_CHECK_NULL(res);
    *n = res->n;
    return PT_OK;
}

int pt_episode_results_get(pt_episode *out, const pt_episode_results *res, int i)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(res);
    int st = PT_STRUCT_CHECK_OUT(out, pt_episode, pt_episode_init);
    if (st)
        return st;
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
    pt_struct_write(out, &ep);
    return PT_OK;
}

int pt_episode_results_stats(pt_episode_stats *stats, const pt_episode_results *res)
{
    PT_CHECK_NULL(stats);
    PT_CHECK_NULL(res);
    int st = PT_STRUCT_CHECK_OUT(stats, pt_episode_stats, pt_episode_stats_init);
    if (st)
        return st;
    pt_struct_write(stats, &res->stats);
    return PT_OK;
}

/* ---- into a rollout buffer ---------------------------------------------------------- */

/* True when the environment gave episode e a reward for at least one turn. */
static bool has_turn_rewards(const ep_rec *e, int k)
{
    for (int i = 0; i < e->n_turns * k; i++)
        if (!isnan(e->t_rew[i]))
            return true;
    return false;
}

/* The mask runs (segments) of e's completion, and into seg (one per run) the
 * combined turn rewards of the turns that sampled into it (NaN where no turn
 * of the run has a reward).  Returns the number of runs. */
static int segment_rewards(float *seg, const ep_rec *e, const double *w, int k)
{
    const uint8_t *m = e->mask + e->prompt_len;
    int c = e->n - e->prompt_len, n_seg = 0;
    for (int j = 0; j < c; j++)
        if (m[j] && (j == 0 || !m[j - 1]))
            seg[n_seg++] = NAN;
    for (int t = 0; t < e->n_turns; t++) {
        if (e->t_len[t] <= 0)
            continue;
        int pos = e->t_start[t] - e->prompt_len, idx = -1;
        for (int j = 0; j <= pos && j < c; j++)
            if (m[j] && (j == 0 || !m[j - 1]))
                idx++;
        const float *r = e->t_rew + (size_t)t * (size_t)k;
        bool any = false;
        for (int f = 0; f < k; f++)
            any |= !isnan(r[f]);
        if (idx < 0 || !any)
            continue;
        double v = pt_grpo_combine_rewards(r, w, k);
        seg[idx] = isnan(seg[idx]) ? (float)v : seg[idx] + (float)v;
    }
    return n_seg;
}

int pt_rollout_buffer_add_episodes(int *n_added, pt_rollout_buffer *buf,
                                   const pt_episode_results *res)
{
    if (n_added)
        *n_added = 0;
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(res);
    int guard = pt_rollout_check_not_scoring(buf, __func__);
    if (guard)
        return guard;
    if (res->k != buf->k)
        return pt_err(PT_EINVAL, "pt_rollout_buffer_add_episodes: the episodes carry %d "
                      "reward%s (n_reward_funcs) but buf has %d reward function%s", res->k,
                      res->k == 1 ? "" : "s", buf->k, buf->k == 1 ? "" : "s");
    int m = 0;
    size_t n_seg_total = 0;
    for (int i = 0; i < res->n; i++)
        if (res->e[i].end != PT_EPISODE_ERROR && res->e[i].end != PT_EPISODE_STOPPED) {
            m++;
            n_seg_total += (size_t)res->e[i].n_turns + 1;
        }
    if (m == 0)
        return PT_OK;
    pt_rollout_sample *s = pt_malloc_array((size_t)m, sizeof *s);
    float *seg = pt_malloc_array(n_seg_total, sizeof *seg);
    if (!s || !seg) {
        pt_free(s);
        pt_free(seg);
        return PT_ENOMEM;
    }
    int j = 0;
    float *sp = seg;
    for (int i = 0; i < res->n; i++) {
        const ep_rec *e = &res->e[i];
        if (e->end == PT_EPISODE_ERROR || e->end == PT_EPISODE_STOPPED)
            continue;
        /* A group one of whose episodes was rewarded per turn trains on
         * segment rewards, every member of it (docs/episodes.md). */
        bool per_turn = false;
        for (int q = 0; q < res->n && !per_turn; q++)
            per_turn = res->e[q].group == e->group && res->e[q].end != PT_EPISODE_ERROR &&
                       res->e[q].end != PT_EPISODE_STOPPED && has_turn_rewards(&res->e[q], res->k);
        pt_rollout_sample_init(&s[j]);
        s[j].ids = e->ids;
        s[j].n_ids = e->n;
        s[j].prompt_len = e->prompt_len;
        s[j].loss_mask = e->mask + e->prompt_len;
        s[j].sampling_logprobs = e->lp + e->prompt_len;
        s[j].group = e->group;
        s[j].rewards = e->rewards;
        s[j].truncated = e->truncated;
        if (per_turn) {
            s[j].n_segments = segment_rewards(sp, e, buf->weights, res->k);
            s[j].segment_rewards = sp;
            sp += s[j].n_segments;
        }
        j++;
    }
    int st = pt_rollout_buffer_add_group(buf, s, m);
    pt_free(s);
    pt_free(seg);
    if (st)
        return pt_err_prefix(st, "pt_rollout_buffer_add_episodes");
    if (n_added)
        *n_added = m;
    return PT_OK;
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

int pt_episodes_run(pt_episode_results *res, pt_generator *gen, const int32_t *prompt_ids,
                    const int32_t *prompt_lens, const int64_t *groups, int n,
                    const pt_episode_options *opts, pt_env_fn env, void *payload)
{
    PT_CHECK_NULL(res);
    PT_CHECK_NULL(gen);
    PT_CHECK_NULL(prompt_ids);
    PT_CHECK_NULL(prompt_lens);
    PT_CHECK_NULL(env);
    PT_CHECK_ARG(n >= 1 && n <= (1 << 24), n, "%d must be in 1 .. %d", n, 1 << 24);
    int st = pt_genrows_take(gen, __func__);
    if (st)
        return st;
    st = pt_episodes_run_taken(res, gen, prompt_ids, prompt_lens, groups, n, opts, env, payload);
    pt_genrows_give(gen);
    return st;
}
