/* The environment protocol of pt_episodes_run (posttrain/episode.h,
 * docs/episodes.md): what an environment callback is shown when an
 * episode's turn ends (pt_env_turn), and its reply (pt_env_reply) checked
 * before any of it is used and applied: append ids or text, done with
 * rewards and per-turn rewards, or pending.  A failed call or a malformed
 * reply ends the episode with the error, or stops the run
 * (PT_EPISODE_ERROR_STOP). */
#include "train/episode_run.h"

#include "core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The environment failed or answered malformed output: the episode ends
 * with the error.  Returns PT_OK to go on, or (PT_EPISODE_ERROR_STOP) the
 * status as the run's error. */
static int env_error(ep_run *r, ep_rec *e, int idx, int status, const char *fmt, ...)
    PT_PRINTF(5, 6);

static int env_error(ep_run *r, ep_rec *e, int idx, int status, const char *fmt, ...)
{
    char what[768], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "episode %d turn %d: %s", idx, e->n_turns - 1, what);
    pt_free(e->error);
    e->error = pt__strdup(msg);
    e->status = status;
    pt__episode_finish(r, e, PT_EPISODE_ERROR);
    e->truncated = false;
    if (r->o->on_error == PT_EPISODE_ERROR_STOP)
        return pt__err(status, "pt_episodes_run: %s", msg);
    pt__log(PT_LOG_WARN, "pt_episodes_run: %s (%s; the other episodes go on)", msg,
           pt_status_name(status));
    return PT_OK;
}

/* pt_tokenizer_decode of ids[0 .. n), leaving out ids the tokenizer does not
 * have (a model's vocabulary may be padded beyond its tokenizer's). */
static int decode(char **text, size_t *len, ep_run *r, const int32_t *ids, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < r->tok_vocab)
            r->dec[m++] = ids[i];
    return pt_tokenizer_decode(text, len, r->o->tokenizer, r->dec, (size_t)m, 0);
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
static int appended_ids(ep_run *r, ep_rec *e, int idx, const pt_env_reply *rp, int32_t **enc, const int32_t **add,
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

int pt__episode_call_env(ep_run *r, int idx)
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
            return pt__err_prefix(st, "pt_episodes_run: decoding episode %d", idx);
        }
        view.turn_text = turn_text;
        view.text = text;
    }
    pt_env_reply rep;
    memset(&rep, 0, sizeof rep);
    rep.size = sizeof rep;
    double t0 = pt__now();
    int rc = r->env(&rep, &view, r->payload);
    r->env_s += pt__now() - t0;
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
        pt__episode_finish(r, e, rep.action == PT_ENV_DONE ? PT_EPISODE_DONE
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
