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
 *   2. step: one batched forward (pt_genrows_step) over every row in play:
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
 * depend on the schedule (the tests check this bit for bit). */
#include "posttrain/episode.h"

#include "core/core.h"
#include "core/strbuf.h"
#include "model/generate_rows.h"
#include "train/episode_internal.h"
#include "train/grpo_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* One run's state. */
typedef struct run {
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
} run;

/* ---- episodes ending ------------------------------------------------------------------ */

static void free_row(run *r, ep_rec *e)
{
    if (e->row >= 0)
        r->row_ep[e->row] = -1;
    e->row = -1;
}

static void finish(run *r, ep_rec *e, int end)
{
    free_row(r, e);
    e->phase = PH_ENDED;
    e->end = end;
    int last = e->n_turns > 0 ? e->t_end[e->n_turns - 1] : -1;
    e->truncated = end == PT_EPISODE_MAX_TURNS || end == PT_EPISODE_MAX_TOKENS ||
                   ((end == PT_EPISODE_DONE) &&
                    (last == PT_TURN_LENGTH || last == PT_TURN_MAX_TOKENS));
}

/* The environment failed or answered malformed output: the episode ends
 * with the error.  Returns PT_OK to go on, or (PT_EPISODE_ERROR_STOP) the
 * status as the run's error. */
static int env_error(run *r, ep_rec *e, int idx, int status, const char *fmt, ...)
    PT_PRINTF(5, 6);

static int env_error(run *r, ep_rec *e, int idx, int status, const char *fmt, ...)
{
    char what[768], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "episode %d turn %d: %s", idx, e->n_turns - 1, what);
    pt_free(e->error);
    e->error = pt_strdup(msg);
    e->status = status;
    finish(r, e, PT_EPISODE_ERROR);
    e->truncated = false;
    if (r->o->on_error == PT_EPISODE_ERROR_STOP)
        return pt_err(status, "pt_episodes_run: %s", msg);
    pt_log(PT_LOG_WARN, "pt_episodes_run: %s (%s; the other episodes go on)", msg,
           pt_status_name(status));
    return PT_OK;
}

/* ---- text -------------------------------------------------------------------------- */

/* pt_tokenizer_decode of ids[0 .. n), leaving out ids the tokenizer does not
 * have (a model's vocabulary may be padded beyond its tokenizer's). */
static int decode(char **text, size_t *len, run *r, const int32_t *ids, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < r->tok_vocab)
            r->dec[m++] = ids[i];
    return pt_tokenizer_decode(text, len, r->o->tokenizer, r->dec, (size_t)m, 0);
}

/* Feed a sampled token to its row's text; *hit when the turn's text now
 * contains a stop string (searched only where the new piece can complete
 * one). */
static int stop_string_hit(bool *hit, run *r, int row, int32_t tok)
{
    *hit = false;
    if (tok < 0 || tok >= r->tok_vocab)
        return PT_OK;
    const char *piece;
    size_t plen;
    int st = pt_decode_stream_step(&piece, &plen, r->ds[row], tok);
    if (st)
        return st;
    pt_strbuf *b = &r->text[row];
    size_t old = b->len;
    if (plen == 0)
        return PT_OK;
    if ((st = pt_strbuf_put(b, piece, plen)))
        return st;
    for (int s = 0; s < r->o->n_stop_strings && !*hit; s++) {
        size_t sl = r->stop_len[s];
        size_t from = old + 1 > sl ? old + 1 - sl : 0;
        for (size_t i = from; i + sl <= b->len; i++)
            if (memcmp(b->p + i, r->o->stop_strings[s], sl) == 0) {
                *hit = true;
                break;
            }
    }
    return PT_OK;
}

/* ---- sampling and turns ----------------------------------------------------------------- */

static bool is_stop(const run *r, int32_t tok)
{
    for (int i = 0; i < r->n_stop; i++)
        if (r->stop[i] == tok)
            return true;
    return false;
}

/* A new turn of e (its first token is at position p). */
static int turn_begin(run *r, ep_rec *e, int p)
{
    if (e->n_turns == e->t_cap) {
        int cap = e->t_cap ? 2 * e->t_cap : 4;
        int32_t *a = pt_realloc_array(e->t_start, (size_t)cap, sizeof *a);
        if (a)
            e->t_start = a;
        int32_t *b = a ? pt_realloc_array(e->t_len, (size_t)cap, sizeof *b) : NULL;
        if (b)
            e->t_len = b;
        int32_t *c = b ? pt_realloc_array(e->t_end, (size_t)cap, sizeof *c) : NULL;
        if (c)
            e->t_end = c;
        float *w = c ? pt_realloc_array(e->t_rew, (size_t)cap * (size_t)r->res->k, sizeof *w)
                     : NULL;
        if (!w)
            return PT_ENOMEM;
        e->t_rew = w;
        e->t_cap = cap;
    }
    int t = e->n_turns++;
    e->t_start[t] = p;
    e->t_len[t] = 0;
    e->t_end[t] = PT_TURN_LENGTH;
    for (int k = 0; k < r->res->k; k++)
        e->t_rew[(size_t)t * (size_t)r->res->k + (size_t)k] = NAN;
    e->turn_tokens = 0;
    if (r->o->n_stop_strings > 0) {
        const char *rest;
        size_t n;
        int st = pt_decode_stream_flush(&rest, &n, r->ds[e->row]);
        if (st)
            return st;
        pt_strbuf_clear(&r->text[e->row]);
    }
    return PT_OK;
}

/* Record the token episode e sampled; decide whether its turn ended. */
static int after_sample(run *r, ep_rec *e, int32_t tok, float lp)
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
    if (is_stop(r, tok))
        end = PT_TURN_STOP_ID;
    else if (r->o->n_stop_strings > 0 && (st = stop_string_hit(&hit, r, e->row, tok)))
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

/* n floats of a reply: NULL, or finite or NaN each. */
static int check_rewards(const float *v, int n, int *bad)
{
    for (int i = 0; v && i < n; i++)
        if (isinf(v[i])) {
            *bad = i;
            return -1;
        }
    return 0;
}

static void copy_rewards(float *dst, const float *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = src ? src[i] : NAN;
}

/* The ids an append reply adds to episode idx (checked; text encoded into
 * *enc, which the caller frees): *add and *m.  PT_OK, or the episode's
 * error (env_error). */
static int appended_ids(run *r, ep_rec *e, int idx, const pt_env_reply *rp, int32_t **enc, const int32_t **add,
                        int *m)
{
    const pt_episode_options *o = r->o;
    pt_env_reply rep = *rp;
    if (*m < 0)
        return env_error(r, e, idx, PT_EINVAL, "n_ids %d is negative", *m);
    if (*m > 0 && !rep.ids)
        return env_error(r, e, idx, PT_EINVAL, "ids is NULL but n_ids is %d", *m);
    if (*m > 0 && rep.text)
        return env_error(r, e, idx, PT_EINVAL, "the reply has both ids and text: append "
                         "one or the other");
    for (int i = 0; i < *m; i++)
        if (rep.ids[i] < 0 || rep.ids[i] >= r->V)
            return env_error(r, e, idx, PT_EINVAL, "appended id %d (ids[%d]) is outside "
                             "the vocabulary [0, %d)", rep.ids[i], i, r->V);
    if (!rep.text)
        return PT_OK;
    if (!o->tokenizer)
        return env_error(r, e, idx, PT_EINVAL, "the reply appends text but the "
                         "options have no tokenizer to encode it");
    size_t ne = 0;
    int st = pt_tokenizer_encode(enc, &ne, o->tokenizer, rep.text, strlen(rep.text), 0);
    if (st)
        return env_error(r, e, idx, st, "encoding the appended text: %s", pt_last_error());
    for (size_t i = 0; i < ne; i++)
        if ((*enc)[i] >= r->V) {
            int32_t id = (*enc)[i];
            pt_free(*enc);
            *enc = NULL;
            return env_error(r, e, idx, PT_EINVAL, "the appended text encodes to id "
                             "%d, outside the model's vocabulary [0, %d)", id, r->V);
        }
    *add = *enc;
    *m = ne > (size_t)r->L ? r->L : (int)ne; /* beyond L: no room either way */
    return PT_OK;
}

/* Call the environment for episode idx, whose turn just ended, and apply
 * its answer. */
static int call_env(run *r, int idx)
{
    ep_rec *e = &r->res->e[idx];
    const pt_episode_options *o = r->o;
    const int K = r->res->k, t = e->n_turns - 1;
    pt_env_turn view;
    memset(&view, 0, sizeof view);
    view.size = sizeof view;
    view.episode = idx;
    view.group = e->group;
    view.turn = t;
    view.ids = e->ids;
    view.n_ids = e->n;
    view.prompt_len = e->prompt_len;
    view.turn_start = e->t_start[t];
    view.turn_end = e->t_end[t];
    const int room = r->L - e->n - 1;
    view.final = e->n >= r->L ? PT_EPISODE_MAX_TOKENS
               : e->n_turns >= o->max_turns ? PT_EPISODE_MAX_TURNS : 0;
    view.tokens_left = view.final ? 0 : room;
    view.attempt = e->attempt;
    char *turn_text = NULL, *text = NULL;
    int st = PT_OK;
    if (o->decode_text) {
        if ((st = decode(&turn_text, &view.turn_text_len, r, e->ids + view.turn_start,
                         e->n - view.turn_start)) ||
            (st = decode(&text, &view.text_len, r, e->ids + e->prompt_len,
                         e->n - e->prompt_len))) {
            pt_free(turn_text);
            return pt_err_prefix(st, "pt_episodes_run: decoding episode %d", idx);
        }
        view.turn_text = turn_text;
        view.text = text;
    }
    pt_env_reply rep;
    memset(&rep, 0, sizeof rep);
    rep.size = sizeof rep;
    double t0 = pt_now();
    int rc = r->env(&rep, &view, r->payload);
    r->env_s += pt_now() - t0;
    r->st->env_calls++;
    pt_free(turn_text);
    pt_free(text);
    if (rc != 0)
        return env_error(r, e, idx, PT_ECALLBACK, "the environment returned %d%s%.600s", rc,
                         rep.error ? ": " : "", rep.error ? rep.error : "");
    /* the answer, checked before anything of it is used */
    int bad;
    if (rep.action != PT_ENV_APPEND && rep.action != PT_ENV_DONE && rep.action != PT_ENV_PENDING)
        return env_error(r, e, idx, PT_EINVAL, "the environment answered action %d, not "
                         "PT_ENV_APPEND (1), PT_ENV_DONE (2) or PT_ENV_PENDING (3)", rep.action);
    if (rep.action == PT_ENV_PENDING) {
        if (rep.ids || rep.n_ids || rep.text || rep.rewards || rep.turn_rewards)
            return env_error(r, e, idx, PT_EINVAL, "the environment answered PT_ENV_PENDING "
                             "with ids, text or rewards: give them with the answer");
        e->attempt++;
        e->phase = PH_ENV;  /* its row waits; called again after the next step */
        e->pending_step = r->st->steps;
        r->st->env_pending++;
        return PT_OK;
    }
    if (check_rewards(rep.rewards, K, &bad))
        return env_error(r, e, idx, PT_EINVAL, "rewards[%d] is %g: a reward must be finite "
                         "(NaN declines)", bad, (double)rep.rewards[bad]);
    if (check_rewards(rep.turn_rewards, K, &bad))
        return env_error(r, e, idx, PT_EINVAL, "turn_rewards[%d] is %g: a reward must be "
                         "finite (NaN declines)", bad, (double)rep.turn_rewards[bad]);
    if (rep.action == PT_ENV_DONE && (rep.ids || rep.n_ids || rep.text))
        return env_error(r, e, idx, PT_EINVAL, "the environment answered PT_ENV_DONE with "
                         "ids or text to append");
    int32_t *enc = NULL;
    const int32_t *add = rep.ids;
    int m = rep.n_ids;
    if (rep.action == PT_ENV_APPEND && (st = appended_ids(r, e, idx, &rep, &enc, &add, &m)))
        return st;
    copy_rewards(e->t_rew + (size_t)t * (size_t)K, rep.turn_rewards, K);
    if (rep.action == PT_ENV_DONE || view.final || m > room) {
        pt_free(enc);
        copy_rewards(e->rewards, rep.rewards, K);
        finish(r, e, rep.action == PT_ENV_DONE ? PT_EPISODE_DONE
                     : view.final ? view.final : PT_EPISODE_MAX_TOKENS);
        return PT_OK;
    }
    if (m > 0) {
        memcpy(e->ids + e->n, add, (size_t)m * sizeof *add);
        memset(e->mask + e->n, 0, (size_t)m);
        for (int i = 0; i < m; i++)
            e->lp[e->n + i] = 0.0f;
        e->n += m;
        r->st->appended_tokens += m;
    }
    pt_free(enc);
    e->phase = PH_APPEND; /* the last sampled token and the appended ids are pending */
    return PT_OK;
}

/* Sample the m rows of r->w_* from the generator's logits (row i's at
 * logits + i*V), record the tokens, and call the environment for each
 * episode whose turn ended, in episode order. */
static int sample_and_answer(run *r, int m)
{
    for (int i = 0; i < m; i++) {
        ep_rec *e = &r->res->e[r->w_ep[i]];
        r->w_rng[i] = &e->rng;
        r->w_hrow[i] = r->w_ep[i];
        r->w_hstep[i] = e->n - e->prompt_len;
    }
    pt_genrows_sample(r->g, m, pt_genrows_logits(r->g), &r->sampler, r->w_rng, r->w_tok, r->w_lp,
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
        int st = call_env(r, r->queue[q]);
        if (st)
            return st;
    }
    return PT_OK;
}

/* ---- the schedule ------------------------------------------------------------------ */

/* Waiting episodes into the free rows: prompts prefilled (an identical
 * prompt among those admitted together once), first tokens sampled.
 * *admitted says how many. */
static int admit(run *r, int *admitted)
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
    float *logits = pt_genrows_logits(r->g);
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
            pt_genrows_copy(r->g, r->adm_row[same], r->adm_row[j], e->prompt_len);
            memcpy(logits + (size_t)j * V, logits + (size_t)same * V, V * sizeof(float));
            r->st->prompt_tokens_shared += e->prompt_len;
        } else {
            int st = pt_genrows_prefill(r->g, r->adm_row[j], e->ids, e->prompt_len,
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
static int admit_all(run *r)
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
static int step(run *r, int *fed)
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
            chunk = pt_genrows_chunk_limit(r->g, e->cached, chunk);
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
    pt_genrows_step(r->g, k, r->s_rows, r->s_ids, r->s_pos, r->s_want, pt_genrows_logits(r->g));
    r->st->steps++;
    r->st->forward_tokens += k;
    return w ? sample_and_answer(r, w) : PT_OK;
}

/* Call the environment again for the episodes whose answer was pending
 * before the last step (all of them when `now`: nothing else runs), in
 * episode order. */
static int poll_pending(run *r, bool now)
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
        int st = call_env(r, r->queue[i]);
        if (st)
            return st;
    }
    return PT_OK;
}

/* Rows holding an episode. */
static int rows_in_play(const run *r)
{
    int n = 0;
    for (int row = 0; row < r->B; row++)
        n += r->row_ep[row] >= 0;
    return n;
}

/* ---- pt_episodes_run -------------------------------------------------------------- */

static void run_free(run *r)
{
    if (r->ds)
        for (int i = 0; i < r->B; i++)
            pt_decode_stream_free(r->ds[i]);
    if (r->text)
        for (int i = 0; i < r->B; i++)
            pt_strbuf_free(&r->text[i]);
    pt_free(r->ds);
    pt_free(r->text);
    pt_free(r->stop);
    pt_free(r->stop_len);
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

static int run_alloc(run *r, int max_seq)
{
    const size_t B = (size_t)r->B, C = (size_t)r->C;
    r->row_ep = pt_malloc_array(B, sizeof *r->row_ep);
    r->s_rows = pt_malloc_array(C, sizeof *r->s_rows);
    r->s_ids = pt_malloc_array(C, sizeof *r->s_ids);
    r->s_pos = pt_malloc_array(C, sizeof *r->s_pos);
    r->s_want = pt_malloc_array(C, sizeof *r->s_want);
    r->w_ep = pt_malloc_array(B, sizeof *r->w_ep);
    r->w_rng = pt_malloc_array(B, sizeof *r->w_rng);
    r->w_tok = pt_malloc_array(B, sizeof *r->w_tok);
    r->w_hrow = pt_malloc_array(B, sizeof *r->w_hrow);
    r->w_hstep = pt_malloc_array(B, sizeof *r->w_hstep);
    r->w_lp = pt_malloc_array(B, sizeof *r->w_lp);
    r->adm_row = pt_malloc_array(B, sizeof *r->adm_row);
    r->queue = pt_malloc_array(B, sizeof *r->queue);
    if (!r->row_ep || !r->s_rows || !r->s_ids || !r->s_pos || !r->s_want || !r->w_ep ||
        !r->w_rng || !r->w_tok || !r->w_hrow || !r->w_hstep || !r->w_lp || !r->adm_row ||
        !r->queue)
        return PT_ENOMEM;
    for (size_t i = 0; i < B; i++)
        r->row_ep[i] = -1;
    const pt_episode_options *o = r->o;
    if (o->tokenizer) {
        r->tok_vocab = pt_tokenizer_vocab_size(o->tokenizer);
        if (!(r->dec = pt_malloc_array((size_t)max_seq, sizeof *r->dec)))
            return PT_ENOMEM;
    }
    if (o->n_stop_strings > 0) {
        r->stop_len = pt_malloc_array((size_t)o->n_stop_strings, sizeof *r->stop_len);
        r->ds = pt_calloc(B, sizeof *r->ds);
        r->text = pt_calloc(B, sizeof *r->text);
        if (!r->stop_len || !r->ds || !r->text)
            return PT_ENOMEM;
        for (int s = 0; s < o->n_stop_strings; s++)
            r->stop_len[s] = strlen(o->stop_strings[s]);
        for (size_t i = 0; i < B; i++) {
            int st = pt_decode_stream_create(&r->ds[i], o->tokenizer, 0);
            if (st)
                return st;
        }
    }
    return PT_OK;
}

/* The stop ids of the sampling options: theirs, or the config's eos. */
static int set_stop_ids(run *r, const pt_model_config *c)
{
    int n = r->so.n_stop_ids;
    const int32_t *src = r->so.stop_ids;
    int32_t eos = c->eos_token_id;
    if (n < 0) {
        n = eos >= 0 && eos < c->vocab_size ? 1 : 0;
        src = &eos;
    }
    r->n_stop = n;
    if (n == 0)
        return PT_OK;
    if (!(r->stop = pt_malloc_array((size_t)n, sizeof *r->stop)))
        return PT_ENOMEM;
    memcpy(r->stop, src, (size_t)n * sizeof *r->stop);
    return PT_OK;
}

static void final_stats(run *r, double t0)
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
    s->seconds = pt_now() - t0;
    s->env_seconds = r->env_s;
    double gen = s->seconds - s->env_seconds;
    s->tokens_per_second = gen > 0 ? (double)s->sampled_tokens / gen : 0.0;
}

int pt_episodes_run_taken(pt_episode_results *res, pt_generator *gen, const int32_t *prompt_ids,
                          const int32_t *prompt_lens, const int64_t *groups, int n,
                          const pt_episode_options *opts, pt_env_fn env, void *payload)
{
    double t0 = pt_now();
    pt_episode_options o;
    pt_episode_options_init(&o);
    int st = pt_struct_read(&o, sizeof o, opts, "pt_episodes_run", "pt_episode_options_init");
    if (st)
        return st;
    run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.g = gen;
    r.res = res;
    r.env = env;
    r.payload = payload;
    if ((st = pt_genrows_begin(gen, "pt_episodes_run")))
        return st;
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    if ((st = pt_model_get_config(&cfg, pt_genrows_model(gen))))
        return st;
    /* the nested sampling options: a versioned struct of their own */
    pt_generate_options_init(&r.so);
    if ((st = pt_struct_read(&r.so, sizeof r.so, o.sampling, "pt_episodes_run",
                             "pt_generate_options_init")) ||
        (st = pt_genrows_check_options(&r.so, &cfg, "pt_episodes_run", "sampling.")) ||
        (st = pt_episode_check_options(&o, gen, &r.L)) ||
        (st = pt_episode_check_prompts(prompt_ids, prompt_lens, n, cfg.vocab_size, r.L)))
        return st;
    r.V = cfg.vocab_size;
    r.B = pt_genrows_max_batch(gen);
    r.C = o.max_step_tokens ? o.max_step_tokens : pt_genrows_step_capacity(gen);
    r.max_new = r.so.max_new_tokens;
    pt_genrows_sampler(&r.sampler, &r.so);
    if ((st = pt_episode_results_reset(res, n, r.L, o.n_reward_funcs)) || (st = set_stop_ids(&r, &cfg)) ||
        (st = run_alloc(&r, pt_genrows_max_seq(gen)))) {
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
        pt_sample_rng(&e->rng, r.so.seed, r.so.stream_offset + (uint64_t)i);
        off += (size_t)prompt_lens[i];
    }
    int prev = pt_threads_enter(pt_genrows_thread_setting(gen));
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
    pt_threads_leave(prev);
    if (st) /* the run stopped: what had not ended is marked so */
        for (int i = 0; i < n; i++) {
            ep_rec *e = &res->e[i];
            if (e->phase == PH_ENDED)
                continue;
            finish(&r, e, PT_EPISODE_STOPPED);
            e->truncated = false;
            e->status = PT_ECANCELLED;
            e->error = pt_strdup("the run stopped before this episode ended");
        }
    final_stats(&r, t0);
    run_free(&r);
    return st;
}
