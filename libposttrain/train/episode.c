/* Multi-turn episodes played from the KV cache (posttrain/episode.h,
 * docs/episodes.md).
 *
 * Each episode in play owns one row of the generator's cache, which holds
 * its positions 0 .. cached-1; ids[cached .. n) are its pending tokens:
 * the token it sampled last, and after an environment's answer the ids it
 * appended.  The schedule, repeated until every episode has ended:
 *
 *   1. admit: waiting episodes take the free rows; their prompts are
 *      prefilled (identical prompts of one admission once, the cache
 *      copied), and their first tokens sampled;
 *   2. step: one batched forward (pt__genrows_step) over every row in play:
 *      a decoding row feeds its one pending token, a row whose environment
 *      appended ids feeds them as a chunk of consecutive positions (within
 *      the step's capacity; the rest in later steps), beside the decoding
 *      rows; logits only where a row's pending tokens are all in the cache;
 *   3. sample those rows (each from its episode's stream); a row whose turn
 *      ended (stop id, stop string, per-turn length, max_total_tokens) calls
 *      the environment at once, in episode order: done frees the row, an
 *      append makes the row's next step a chunk;
 *   4. admit again into the rows that were freed.
 *
 * Nothing is ever prefilled twice: the prefill counter is the distinct
 * prompts plus the appended ids.  Every step product runs row by row and
 * every episode samples from its own stream, so an episode's tokens do not
 * depend on the schedule (the tests check this bit for bit).
 *
 * This file is the scheduler; the environment's calls and replies are
 * episode_env.c, stop ids and stop strings episode_stop.c, the options'
 * checks episode_options.c, the results episode_results.c. */
#include "posttrain/episode.h"

#include "core/core.h"
#include "model/generate_rows.h"
#include "train/episode_run.h"

#include <string.h>

/* ---- episodes ending ------------------------------------------------------------------ */

static void free_row(ep_run *r, ep_rec *e)
{
    if (e->row >= 0)
        r->row_ep[e->row] = -1;
    e->row = -1;
}

void pt__episode_finish(ep_run *r, ep_rec *e, int end)
{
    free_row(r, e);
    e->phase = PH_ENDED;
    e->end = end;
    int last = e->n_turns > 0 ? e->t_end[e->n_turns - 1] : -1;
    e->truncated = end == PT_EPISODE_MAX_TURNS || end == PT_EPISODE_MAX_TOKENS ||
                   ((end == PT_EPISODE_DONE) &&
                    (last == PT_TURN_LENGTH || last == PT_TURN_MAX_TOKENS));
}

/* ---- sampling and turns ----------------------------------------------------------------- */

/* A new turn of e (its first token is at position p). */
static int turn_begin(ep_run *r, ep_rec *e, int p)
{
    int st = pt__episode_rec_add_turn(e, r->res->k, p);
    if (st)
        return st;
    e->turn_tokens = 0;
    return pt__episode_stop_turn_reset(r, e->row);
}

/* Record the token episode e sampled; decide whether its turn ended. */
static int after_sample(ep_run *r, ep_rec *e, int32_t tok, float lp)
{
    int p = e->n, st;
    if (e->turn_tokens == 0 && (st = turn_begin(r, e, p)))
        return st;
    e->ids[p] = tok;
    e->mask[p] = 1;
    e->lp[p] = lp;
    e->n++;
    e->turn_tokens++;
    r->st->sampled_tokens++;
    int end = -1;
    bool hit = false;
    if (pt__episode_is_stop_id(r, tok))
        end = PT_TURN_STOP_ID;
    else if (r->o->n_stop_strings > 0 && (st = pt__episode_stop_string_hit(&hit, r, e->row, tok)))
        return st;
    if (end < 0 && hit)
        end = PT_TURN_STOP_STRING;
    else if (end < 0 && e->turn_tokens >= r->max_new)
        end = PT_TURN_LENGTH;
    else if (end < 0 && e->n >= r->L)
        end = PT_TURN_MAX_TOKENS;
    if (end < 0) {
        e->phase = PH_DECODE;
        return PT_OK;
    }
    int t = e->n_turns - 1;
    e->t_len[t] = e->turn_tokens;
    e->t_end[t] = end;
    e->turn_tokens = 0;
    e->phase = PH_ENV;    /* until the environment answers */
    e->attempt = 0;
    return 1;             /* the turn ended */
}

/* Sample the m rows of r->w_* from the generator's logits (row i's at
 * logits + i*V), record the tokens, and call the environment for each
 * episode whose turn ended, in episode order. */
static int sample_and_answer(ep_run *r, int m)
{
    for (int i = 0; i < m; i++) {
        ep_rec *e = &r->res->e[r->w_ep[i]];
        r->w_rng[i] = &e->rng;
        r->w_hrow[i] = r->w_ep[i];
        r->w_hstep[i] = e->n - e->prompt_len;
    }
    pt__genrows_sample(r->g, m, pt__genrows_logits(r->g), &r->sampler, r->w_rng, r->w_tok, r->w_lp,
                      r->w_hrow, r->w_hstep);
    int nq = 0;
    for (int i = 0; i < m; i++) {
        int st = after_sample(r, &r->res->e[r->w_ep[i]], r->w_tok[i], r->w_lp[i]);
        if (st < 0 || st > 1)
            return st;
        if (st == 1) { /* ended a turn: into the queue, kept in episode order */
            int j = nq++;
            while (j > 0 && r->queue[j - 1] > r->w_ep[i]) {
                r->queue[j] = r->queue[j - 1];
                j--;
            }
            r->queue[j] = r->w_ep[i];
        }
    }
    for (int q = 0; q < nq; q++) {
        int st = pt__episode_call_env(r, r->queue[q]);
        if (st)
            return st;
    }
    return PT_OK;
}

/* ---- the schedule ------------------------------------------------------------------ */

/* Waiting episodes into the free rows: prompts prefilled (an identical
 * prompt among those admitted together once), first tokens sampled.
 * *admitted says how many. */
static int admit(ep_run *r, int *admitted)
{
    pt_episode_results *res = r->res;
    int a = 0;
    *admitted = 0;
    for (int row = 0; row < r->B && r->next < res->n; row++)
        if (r->row_ep[row] < 0) {
            int idx = r->next++;
            r->row_ep[row] = idx;
            res->e[idx].row = row;
            r->adm_row[a] = row;
            r->w_ep[a] = idx;
            a++;
        }
    if (a == 0)
        return PT_OK;
    float *logits = pt__genrows_logits(r->g);
    const size_t V = (size_t)r->V;
    for (int j = 0; j < a; j++) {
        ep_rec *e = &res->e[r->w_ep[j]];
        int same = -1;
        for (int k = 0; k < j && same < 0; k++) {
            const ep_rec *f = &res->e[r->w_ep[k]];
            if (f->prompt_len == e->prompt_len &&
                memcmp(f->ids, e->ids, (size_t)e->prompt_len * sizeof *e->ids) == 0)
                same = k;
        }
        if (same >= 0) {
            pt__genrows_copy(r->g, r->adm_row[same], r->adm_row[j], e->prompt_len);
            memcpy(logits + (size_t)j * V, logits + (size_t)same * V, V * sizeof(float));
            r->st->prompt_tokens_shared += e->prompt_len;
        } else {
            int st = pt__genrows_prefill(r->g, r->adm_row[j], e->ids, e->prompt_len,
                                        logits + (size_t)j * V);
            if (st)
                return st;
            r->st->prefill_tokens += e->prompt_len;
            r->st->forward_tokens += e->prompt_len;
        }
        e->cached = e->prompt_len;
        e->phase = PH_DECODE;
    }
    *admitted = a;
    return sample_and_answer(r, a);
}

/* Admit until no row is free or no episode waits (episodes may end at
 * their first turn and free their rows again). */
static int admit_all(ep_run *r)
{
    int a;
    do {
        int st = admit(r, &a);
        if (st)
            return st;
    } while (a > 0);
    return PT_OK;
}

/* One batched forward: every decoding row's token, then as much of the
 * appending rows' pending ids as the step holds; then sampling. *fed: the
 * tokens of the step (0: nothing was in play). */
static int step(ep_run *r, int *fed)
{
    pt_episode_results *res = r->res;
    int k = 0, w = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int row = 0; row < r->B && k < r->C; row++) {
            int idx = r->row_ep[row];
            if (idx < 0)
                continue;
            ep_rec *e = &res->e[idx];
            if (e->phase != (pass == 0 ? PH_DECODE : PH_APPEND))
                continue;
            int pending = e->n - e->cached;
            int chunk = pending < r->C - k ? pending : r->C - k;
            chunk = pt__genrows_chunk_limit(r->g, e->cached, chunk);
            for (int j = 0; j < chunk; j++) {
                int p = e->cached + j;
                r->s_rows[k] = row;
                r->s_ids[k] = e->ids[p];
                r->s_pos[k] = p;
                r->s_want[k] = p == e->n - 1;
                if (r->s_want[k])
                    r->w_ep[w++] = idx;
                if (!e->mask[p])
                    r->st->prefill_tokens++;
                k++;
            }
            e->cached += chunk;
            if (e->cached == e->n)
                e->phase = PH_DECODE;
        }
    *fed = k;
    if (k == 0)
        return PT_OK;
    pt__genrows_step(r->g, k, r->s_rows, r->s_ids, r->s_pos, r->s_want, pt__genrows_logits(r->g));
    r->st->steps++;
    r->st->forward_tokens += k;
    return w ? sample_and_answer(r, w) : PT_OK;
}

/* Call the environment again for the episodes whose answer was pending
 * before the last step (all of them when `now`: nothing else runs), in
 * episode order. */
static int poll_pending(ep_run *r, bool now)
{
    int n = 0;
    for (int row = 0; row < r->B; row++) {
        int idx = r->row_ep[row];
        if (idx >= 0 && r->res->e[idx].phase == PH_ENV &&
            (now || r->res->e[idx].pending_step < r->st->steps))
            r->queue[n++] = idx;
    }
    for (int i = 1; i < n; i++) /* episode order */
        for (int j = i; j > 0 && r->queue[j - 1] > r->queue[j]; j--) {
            int t = r->queue[j];
            r->queue[j] = r->queue[j - 1];
            r->queue[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        int st = pt__episode_call_env(r, r->queue[i]);
        if (st)
            return st;
    }
    return PT_OK;
}

/* Rows holding an episode. */
static int rows_in_play(const ep_run *r)
{
    int n = 0;
    for (int row = 0; row < r->B; row++)
        n += r->row_ep[row] >= 0;
    return n;
}

/* ---- pt_episodes_run -------------------------------------------------------------- */

static void run_free(ep_run *r)
{
    pt__episode_stop_free(r);
    pt_free(r->row_ep);
    pt_free(r->s_rows);
    pt_free(r->s_ids);
    pt_free(r->s_pos);
    pt_free(r->s_want);
    pt_free(r->w_ep);
    pt_free(r->w_rng);
    pt_free(r->w_tok);
    pt_free(r->w_hrow);
    pt_free(r->w_hstep);
    pt_free(r->w_lp);
    pt_free(r->adm_row);
    pt_free(r->queue);
    pt_free(r->dec);
}

static int run_alloc(ep_run *r, int max_seq)
{
    const size_t B = (size_t)r->B, C = (size_t)r->C;
    r->row_ep = pt__malloc_array(B, sizeof *r->row_ep);
    r->s_rows = pt__malloc_array(C, sizeof *r->s_rows);
    r->s_ids = pt__malloc_array(C, sizeof *r->s_ids);
    r->s_pos = pt__malloc_array(C, sizeof *r->s_pos);
    r->s_want = pt__malloc_array(C, sizeof *r->s_want);
    r->w_ep = pt__malloc_array(B, sizeof *r->w_ep);
    r->w_rng = pt__malloc_array(B, sizeof *r->w_rng);
    r->w_tok = pt__malloc_array(B, sizeof *r->w_tok);
    r->w_hrow = pt__malloc_array(B, sizeof *r->w_hrow);
    r->w_hstep = pt__malloc_array(B, sizeof *r->w_hstep);
    r->w_lp = pt__malloc_array(B, sizeof *r->w_lp);
    r->adm_row = pt__malloc_array(B, sizeof *r->adm_row);
    r->queue = pt__malloc_array(B, sizeof *r->queue);
    if (!r->row_ep || !r->s_rows || !r->s_ids || !r->s_pos || !r->s_want || !r->w_ep ||
        !r->w_rng || !r->w_tok || !r->w_hrow || !r->w_hstep || !r->w_lp || !r->adm_row ||
        !r->queue)
        return PT_ENOMEM;
    for (size_t i = 0; i < B; i++)
        r->row_ep[i] = -1;
    const pt_episode_options *o = r->o;
    if (o->tokenizer) {
        r->tok_vocab = pt_tokenizer_vocab_size(o->tokenizer);
        if (!(r->dec = pt__malloc_array((size_t)max_seq, sizeof *r->dec)))
            return PT_ENOMEM;
    }
    return PT_OK;
}

static void final_stats(ep_run *r, double t0)
{
    pt_episode_results *res = r->res;
    pt_episode_stats *s = r->st;
    s->episodes = res->n;
    for (int i = 0; i < res->n; i++) {
        const ep_rec *e = &res->e[i];
        s->prompt_tokens += e->prompt_len;
        s->turns += e->n_turns;
        s->truncated += e->truncated;
        switch (e->end) {
        case PT_EPISODE_DONE: s->done++; break;
        case PT_EPISODE_MAX_TURNS: s->max_turns++; break;
        case PT_EPISODE_MAX_TOKENS: s->max_tokens++; break;
        case PT_EPISODE_ERROR: s->errors++; break;
        default: s->stopped++; break;
        }
    }
    s->seconds = pt__now() - t0;
    s->env_seconds = r->env_s;
    double gen = s->seconds - s->env_seconds;
    s->tokens_per_second = gen > 0 ? (double)s->sampled_tokens / gen : 0.0;
}

/* pt_episodes_run's work once its arguments are checked and the generator
 * taken (core/busy.h): a callback that uses gen meanwhile gets PT_EBUSY. */
static int run_taken(pt_episode_results *res, pt_generator *gen, const int32_t *prompt_ids,
                     const int32_t *prompt_lens, const int64_t *groups, int n,
                     const pt_episode_options *opts, pt_env_fn env, void *payload)
{
    double t0 = pt__now();
    pt_episode_options o;
    pt_episode_options_init(&o);
    int st = pt__struct_read(&o, sizeof o, opts, "pt_episodes_run", "pt_episode_options_init");
    if (st)
        return st;
    ep_run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.g = gen;
    r.res = res;
    r.env = env;
    r.payload = payload;
    if ((st = pt__genrows_begin(gen, "pt_episodes_run")))
        return st;
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    if ((st = pt_model_get_config(&cfg, pt__genrows_model(gen))))
        return st;
    /* the nested sampling options: a versioned struct of their own */
    pt_generate_options_init(&r.so);
    if ((st = pt__struct_read(&r.so, sizeof r.so, o.sampling, "pt_episodes_run",
                             "pt_generate_options_init")) ||
        (st = pt__genrows_check_options(&r.so, &cfg, "pt_episodes_run", "sampling.")) ||
        (st = pt__episode_check_options(&o, gen, &r.L)) ||
        (st = pt__episode_check_prompts(prompt_ids, prompt_lens, n, cfg.vocab_size, r.L)))
        return st;
    r.V = cfg.vocab_size;
    r.B = pt__genrows_max_batch(gen);
    r.C = o.max_step_tokens ? o.max_step_tokens : pt__genrows_step_capacity(gen);
    r.max_new = r.so.max_new_tokens;
    pt__genrows_sampler(&r.sampler, &r.so);
    if ((st = pt__episode_results_reset(res, n, r.L, o.n_reward_funcs)) || (st = pt__episode_stop_alloc(&r, &cfg)) ||
        (st = run_alloc(&r, pt__genrows_max_seq(gen)))) {
        run_free(&r);
        res->n = 0;
        return st;
    }
    r.st = &res->stats;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        ep_rec *e = &res->e[i];
        e->prompt_len = e->n = prompt_lens[i];
        memcpy(e->ids, prompt_ids + off, (size_t)e->n * sizeof *e->ids);
        memset(e->mask, 0, (size_t)e->n);
        for (int j = 0; j < e->n; j++)
            e->lp[j] = 0.0f;
        e->group = groups ? groups[i] : i;
        pt__sample_rng(&e->rng, r.so.seed, r.so.stream_offset + (uint64_t)i);
        off += (size_t)prompt_lens[i];
    }
    int prev = pt__threads_enter(pt__genrows_thread_setting(gen));
    st = admit_all(&r);
    while (!st && rows_in_play(&r) > 0) {
        if ((st = pt_check_abort()))
            break;
        int fed = 0;
        /* a step; then the answers that were pending (at once when no row
         * decodes), then rows freed by episodes that ended */
        if ((st = step(&r, &fed)) || (st = poll_pending(&r, fed == 0)) || (st = admit_all(&r)))
            break;
    }
    pt__threads_leave(prev);
    if (st) /* the run stopped: what had not ended is marked so */
        for (int i = 0; i < n; i++) {
            ep_rec *e = &res->e[i];
            if (e->phase == PH_ENDED)
                continue;
            pt__episode_finish(&r, e, PT_EPISODE_STOPPED);
            e->truncated = false;
            e->status = PT_ECANCELLED;
            e->error = pt__strdup("the run stopped before this episode ended");
        }
    final_stats(&r, t0);
    run_free(&r);
    return st;
}

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
    int st = pt__genrows_take(gen, __func__);
    if (st)
        return st;
    st = run_taken(res, gen, prompt_ids, prompt_lens, groups, n, opts, env, payload);
    pt__genrows_give(gen);
    return st;
}
