/* The environment process's side of a turn (posttrain/env.h,
 * docs/episodes.md): one JSON request line out, by the deadline, with
 * MSG_NOSIGNAL (a process that closed its stdin is PT_EIO, never SIGPIPE
 * in the host), one JSON reply line in, by the deadline and of at most
 * max_line bytes, then parsed and checked into the pt_env_reply. */
#include "train/env_process_internal.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Fail this call: the message into p->error (the reply's error, for the
 * episode) and this thread's last error with status.  Returns 1. */
static int fail(pt_env_reply *reply, pt_env_process *p, int status, const char *fmt, ...) PT_PRINTF(4, 5);
static int fail(pt_env_reply *reply, pt_env_process *p, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    reply->error = p->error;
    pt__err(status, "pt_env_process_call: %s", p->error);
    return 1;
}

/* A reply's "rewards" or "turn_rewards": absent or null: NULL (all
 * declined); else an array of n_rewards numbers or nulls. */
static int read_rewards(const float **out, float *dst, const cJSON *v, const char *key, pt_env_reply *reply,
                        pt_env_process *p)
{
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != p->n_rewards)
        return fail(reply, p, PT_EFORMAT, "%s reply: \"%s\" must be an array of %d numbers or nulls (%s)", p->name,
                    key, p->n_rewards, p->hint_rewards);
    int k = 0;
    for (const cJSON *x = v->child; x; x = x->next, k++) {
        if (cJSON_IsNull(x))
            dst[k] = NAN;
        else if (cJSON_IsNumber(x) && isfinite(x->valuedouble))
            dst[k] = (float)x->valuedouble;
        else
            return fail(reply, p, PT_EFORMAT, "%s reply: \"%s\"[%d] is not a finite number or null", p->name, key, k);
    }
    *out = dst;
    return 0;
}

static int parse_reply(pt_env_reply *reply, pt_env_process *p, const cJSON *j)
{
    if (!cJSON_IsObject(j))
        return fail(reply, p, PT_EFORMAT, "%s reply is not a JSON object", p->name);
    const cJSON *append = NULL, *done = NULL, *error = NULL, *rw = NULL, *trw = NULL;
    for (const cJSON *x = j->child; x; x = x->next) {
        const char *k = x->string;
        const cJSON **slot = !strcmp(k, "append") ? &append : !strcmp(k, "done") ? &done
                           : !strcmp(k, "error") ? &error : !strcmp(k, "rewards") ? &rw
                           : !strcmp(k, "turn_rewards") ? &trw : NULL;
        if (!slot)
            return fail(reply, p, PT_EFORMAT, "%s reply: unknown key \"%s\" (append, done, error, rewards, "
                        "turn_rewards)", p->name, k);
        *slot = x;
    }
    if (!!append + !!done + !!error != 1)
        return fail(reply, p, PT_EFORMAT, "%s reply needs exactly one of \"append\", \"done\" and \"error\"",
                    p->name);
    if (error) {
        if (!cJSON_IsString(error))
            return fail(reply, p, PT_EFORMAT, "%s reply: \"error\" must be a string", p->name);
        return fail(reply, p, PT_ECALLBACK, "%s", error->valuestring);
    }
    if (done && !cJSON_IsTrue(done))
        return fail(reply, p, PT_EFORMAT, "%s reply: \"done\" must be true", p->name);
    if (append) {
        if (!cJSON_IsString(append))
            return fail(reply, p, PT_EFORMAT, "%s reply: \"append\" must be a string", p->name);
        size_t n = strlen(append->valuestring) + 1;
        char *t = pt__malloc(n);
        if (!t)
            return fail(reply, p, PT_ENOMEM, "out of memory");
        memcpy(t, append->valuestring, n);
        pt_free(p->text);
        p->text = t;
        reply->action = PT_ENV_APPEND;
        reply->text = n > 1 ? p->text : NULL;
    } else {
        reply->action = PT_ENV_DONE;
    }
    if (read_rewards(&reply->rewards, p->rewards, rw, "rewards", reply, p) ||
        read_rewards(&reply->turn_rewards, p->turn_rewards, trw, "turn_rewards", reply, p)) {
        reply->action = 0;
        return 1;
    }
    return 0;
}

/* The keys the library writes, which the host's fields may not hold (but
 * "episode" and "group", which replace the library's). */
static bool own_key(const char *k)
{
    static const char *const keys[] = { "turn", "attempt", "text", "turn_text", "turn_end", "final", "tokens_left" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(k, keys[i]))
            return true;
    return false;
}

/* The request of this turn: the host's fields, then the library's.  NULL
 * after fail(). */
static cJSON *request(pt_env_reply *reply, pt_env_process *p, const pt_env_turn *turn)
{
    const char *host = NULL;
    if (p->request && p->request(&host, turn, p->request_user))
        return fail(reply, p, PT_ECALLBACK, "%s: the request hook failed", p->name), NULL;
    cJSON *q = host ? cJSON_Parse(host) : cJSON_CreateObject();
    if (!q)
        return fail(reply, p, host ? PT_EFORMAT : PT_ENOMEM, "%s: %s", p->name,
                    host ? "the request hook's fields are not JSON" : "out of memory"), NULL;
    if (!cJSON_IsObject(q)) {
        cJSON_Delete(q);
        return fail(reply, p, PT_EFORMAT, "%s: the request hook's fields are not a JSON object", p->name), NULL;
    }
    for (const cJSON *x = q->child; x; x = x->next)
        if (own_key(x->string)) {
            fail(reply, p, PT_EINVAL, "%s: the request hook's fields hold \"%s\", a key of the library's",
                 p->name, x->string);
            cJSON_Delete(q);
            return NULL;
        }
    const char *final = turn->final ? pt_episode_end_name(turn->final) : NULL;
    const bool has_episode = cJSON_GetObjectItemCaseSensitive(q, "episode") != NULL;
    const bool has_group = cJSON_GetObjectItemCaseSensitive(q, "group") != NULL;
    bool ok = (has_episode || cJSON_AddNumberToObject(q, "episode", turn->episode)) &&
              (has_group || cJSON_AddNumberToObject(q, "group", (double)turn->group)) &&
              cJSON_AddNumberToObject(q, "turn", turn->turn) &&
              cJSON_AddNumberToObject(q, "attempt", turn->attempt) &&
              cJSON_AddStringToObject(q, "text", turn->text ? turn->text : "") &&
              cJSON_AddStringToObject(q, "turn_text", turn->turn_text ? turn->turn_text : "") &&
              cJSON_AddStringToObject(q, "turn_end", pt_turn_end_name(turn->turn_end)) &&
              (final ? cJSON_AddStringToObject(q, "final", final) != NULL
                     : cJSON_AddFalseToObject(q, "final") != NULL) &&
              cJSON_AddNumberToObject(q, "tokens_left", turn->tokens_left);
    if (!ok) {
        cJSON_Delete(q);
        return fail(reply, p, PT_ENOMEM, "out of memory building the %s request", p->name), NULL;
    }
    return q;
}

/* Milliseconds to the deadline (0 when past it). */
static int ms_left(double deadline)
{
    double left = deadline - pt__now();
    return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
}

/* Send n bytes to the process's stdin by the deadline: 0, 1 when the time
 * ran out, -1 when the socket failed (errno set). */
static int send_all(pt_env_process *p, const char *s, size_t n, double deadline)
{
    while (n > 0) {
        ssize_t w = send(p->in, s, n, MSG_NOSIGNAL);
        if (w > 0) {
            s += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        struct pollfd pf = { .fd = p->in, .events = POLLOUT };
        int ms = ms_left(deadline);
        if (ms == 0 || (poll(&pf, 1, ms) == 0 && ms_left(deadline) == 0))
            return 1;
    }
    return 0;
}

/* Room for 64 KiB more in p->buf (capped near max_line): 0, or -1 (ENOMEM). */
static int grow_buf(pt_env_process *p)
{
    if (p->buf_cap - p->buf_len >= 65536)
        return 0;
    size_t cap = p->buf_cap ? 2 * p->buf_cap : 65536;
    if (cap > p->max_line + 131072)
        cap = p->max_line + 131072;
    if (cap <= p->buf_cap)
        return 0;
    char *b = pt__realloc_array(p->buf, cap, 1);
    if (!b)
        return errno = ENOMEM, -1;
    p->buf = b;
    p->buf_cap = cap;
    return 0;
}

/* The next reply line (without its end) into p->line, by the deadline, of
 * at most p->max_line bytes: its length, or -1 for EOF or a failed read
 * (errno set; 0 for EOF), -2 when the time ran out, -3 when the line was
 * longer than the cap (its bytes up to the newline are dropped, by the
 * same deadline). */
static ssize_t read_line(pt_env_process *p, double deadline)
{
    bool too_long = false;
    size_t scanned = 0;
    for (;;) {
        char *nl = p->buf_len > scanned ? memchr(p->buf + scanned, '\n', p->buf_len - scanned) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - p->buf);
            ssize_t rc = too_long || n > p->max_line ? -3 : (ssize_t)n;
            if (rc >= 0) {
                pt_free(p->line);
                if (!(p->line = pt__malloc(n + 1)))
                    return errno = ENOMEM, -1;
                memcpy(p->line, p->buf, n);
                p->line[n] = '\0';
            }
            memmove(p->buf, nl + 1, p->buf_len - n - 1);
            p->buf_len -= n + 1;
            return rc;
        }
        if (p->buf_len > p->max_line) {
            too_long = true; /* drop what came so far, keep reading to its end */
            p->buf_len = 0;
        }
        scanned = p->buf_len;
        if (grow_buf(p))
            return -1;
        ssize_t r = read(p->out, p->buf + p->buf_len, p->buf_cap - p->buf_len);
        if (r > 0) {
            p->buf_len += (size_t)r;
            continue;
        }
        if (r == 0)
            return errno = 0, -1;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        struct pollfd pf = { .fd = p->out, .events = POLLIN };
        int ms = ms_left(deadline);
        if (ms == 0 || (poll(&pf, 1, ms) == 0 && ms_left(deadline) == 0))
            return -2;
    }
}

/* The process is dead: fail the call with why. */
static int dead(pt_env_reply *reply, pt_env_process *p, const char *why, bool stalled, int status)
{
    pt__env_process_mark_dead(p, why, stalled, status);
    return fail(reply, p, p->dead_status, "%s", p->dead_msg);
}

/* One request line out and its reply line in, by p->timeout each: the
 * reply's length (p->line), or -1 after fail(). */
static ssize_t exchange(pt_env_reply *reply, pt_env_process *p, const char *req)
{
    char why[160];
    int w = send_all(p, req, strlen(req), pt__now() + p->timeout);
    if (w == 0)
        w = send_all(p, "\n", 1, pt__now() + p->timeout);
    if (w > 0) {
        snprintf(why, sizeof why, "(it did not take a request within %g s, %s)", p->timeout, p->hint_timeout);
        return dead(reply, p, why, true, PT_EPEER), -1;
    }
    if (w < 0)
        return dead(reply, p, NULL, false, PT_EIO), -1;
    ssize_t n = read_line(p, pt__now() + p->timeout);
    if (n == -3)
        return fail(reply, p, PT_ERANGE, "%s reply line is longer than %zu bytes (%s)", p->name, p->max_line,
                    p->hint_max_line), -1;
    if (n == -2) {
        snprintf(why, sizeof why, "(it gave no reply line within %g s, %s)", p->timeout, p->hint_timeout);
        return dead(reply, p, why, true, PT_EPEER), -1;
    }
    if (n < 0 && errno == ENOMEM)
        return fail(reply, p, PT_ENOMEM, "out of memory reading the %s reply", p->name), -1;
    if (n < 0)
        return dead(reply, p, errno ? "(reading its reply failed)" : NULL, false, PT_EIO), -1;
    return n;
}

int pt_env_process_call(pt_env_reply *reply, const pt_env_turn *turn, void *process)
{
    pt_env_process *p = process;
    if (!reply || !turn || !p)
        return pt__err(PT_EINVAL, "pt_env_process_call: %s is NULL", !reply ? "reply" : !turn ? "turn" : "process"),
               1;
    if (p->closed)
        return fail(reply, p, PT_ESTATE, "%s '%s' was closed", p->name, p->cmd);
    if (p->dead)
        return fail(reply, p, PT_ESTATE, "%s", p->dead_msg);
    cJSON *q = request(reply, p, turn);
    if (!q)
        return 1;
    char *s = cJSON_PrintUnformatted(q);
    cJSON_Delete(q);
    if (!s)
        return fail(reply, p, PT_ENOMEM, "out of memory building the %s request", p->name);
    ssize_t n = exchange(reply, p, s);
    cJSON_free(s);
    if (n < 0)
        return 1;
    while (n > 0 && p->line[n - 1] == '\r')
        p->line[--n] = '\0';
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(p->line, (size_t)n, &end, false);
    while (j && end && (*end == ' ' || *end == '\t'))
        end++;
    if (!j || (size_t)(end - p->line) != (size_t)n) {
        cJSON_Delete(j);
        return fail(reply, p, PT_EFORMAT, "%s reply is not one JSON value on a line: '%.200s'", p->name, p->line);
    }
    int rc = parse_reply(reply, p, j);
    cJSON_Delete(j);
    return rc;
}
