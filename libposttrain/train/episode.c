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
#include "train/grpo_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

static int check_options(const pt_episode_options *o, const pt_generator *g, int *limit)
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

/* Room for n episodes of up to L ids each, every one reset. */
static int results_reset(pt_episode_results *res, int n, int L, int k)
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
    double t0 = now_s();
    int rc = r->env(&rep, &view, r->payload);
    r->env_s += now_s() - t0;
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
    if (rep.action == PT_ENV_APPEND) {
        if (m < 0)
            return env_error(r, e, idx, PT_EINVAL, "n_ids %d is negative", m);
        if (m > 0 && !rep.ids)
            return env_error(r, e, idx, PT_EINVAL, "ids is NULL but n_ids is %d", m);
        if (m > 0 && rep.text)
            return env_error(r, e, idx, PT_EINVAL, "the reply has both ids and text: append "
                             "one or the other");
        for (int i = 0; i < m; i++)
            if (rep.ids[i] < 0 || rep.ids[i] >= r->V)
                return env_error(r, e, idx, PT_EINVAL, "appended id %d (ids[%d]) is outside "
                                 "the vocabulary [0, %d)", rep.ids[i], i, r->V);
        if (rep.text) {
            if (!o->tokenizer)
                return env_error(r, e, idx, PT_EINVAL, "the reply appends text but the "
                                 "options have no tokenizer to encode it");
            size_t ne = 0;
            st = pt_tokenizer_encode(&enc, &ne, o->tokenizer, rep.text, strlen(rep.text), 0);
            if (st)
                return env_error(r, e, idx, st, "encoding the appended text: %s",
                                 pt_last_error());
            for (size_t i = 0; i < ne; i++)
                if (enc[i] >= r->V) {
                    int32_t id = enc[i];
                    pt_free(enc);
                    return env_error(r, e, idx, PT_EINVAL, "the appended text encodes to id "
                                     "%d, outside the model's vocabulary [0, %d)", id, r->V);
                }
            add = enc;
            m = ne > (size_t)r->L ? r->L : (int)ne; /* beyond L: no room either way */
        }
    }
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
            int st = pt_decode_stream_new(&r->ds[i], o->tokenizer, 0);
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

static int check_prompts(const int32_t *ids, const int32_t *lens, int n, int V, int L)
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
    s->seconds = now_s() - t0;
    s->env_seconds = r->env_s;
    double gen = s->seconds - s->env_seconds;
    s->tokens_per_second = gen > 0 ? (double)s->sampled_tokens / gen : 0.0;
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
    double t0 = now_s();
    pt_episode_options o;
    int st = PT_STRUCT_READ(o, opts, pt_episode_options_init);
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
        (st = check_options(&o, gen, &r.L)) ||
        (st = check_prompts(prompt_ids, prompt_lens, n, cfg.vocab_size, r.L)))
        return st;
    r.V = cfg.vocab_size;
    r.B = pt_genrows_max_batch(gen);
    r.C = o.max_step_tokens ? o.max_step_tokens : pt_genrows_step_capacity(gen);
    r.max_new = r.so.max_new_tokens;
    pt_genrows_sampler(&r.sampler, &r.so);
    if ((st = results_reset(res, n, r.L, o.n_reward_funcs)) || (st = set_stop_ids(&r, &cfg)) ||
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
