/* posttrain grpo --env CMD: the episode engine's environment as a process.
 * CMD is started once (/bin/sh -c CMD, its stdin and stdout piped, stderr
 * inherited) in a process group of its own; every call of the pt_env_fn
 * callback writes one JSON request line to it and reads one JSON reply line
 * back (docs/cli-grpo.md).  Both have a deadline (--env-timeout) and a reply
 * line a cap (--env-max-line): the pipes are non-blocking and polled, so a
 * CMD that stops reading or answering, or answers without end, fails the
 * episode instead of hanging the run or filling memory; the whole group
 * (the shell and what it started) is ended with it. */
#include "cmd_grpo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct grpo_env {
    const char *cmd;
    pid_t pid;           /* the shell, leader of the group; 0 once waited for */
    pid_t pgid;          /* its process group; 0 once ended */
    int in, out;         /* the child's stdin (we write), its stdout (we read): non-blocking */
    int n_rewards;
    double timeout;      /* seconds per request and per reply */
    size_t max_line;     /* bytes of a reply line */
    bool dead;           /* it exited, stalled or a pipe failed: every call fails */
    char dead_msg[512];
    /* bytes read past the last reply line */
    char *buf;
    size_t buf_len, buf_cap;
    /* the reply handed to the library: must outlast the callback */
    char *line;
    char *text;
    float rewards[PT_GRPO_MAX_REWARD_FUNCS], turn_rewards[PT_GRPO_MAX_REWARD_FUNCS];
    char error[1024];
};

static void set_flags(int fd, int fd_flags, int fl_flags)
{
    int f = fcntl(fd, F_GETFD);
    if (f >= 0 && fd_flags)
        (void)fcntl(fd, F_SETFD, f | fd_flags);
    f = fcntl(fd, F_GETFL);
    if (f >= 0 && fl_flags)
        (void)fcntl(fd, F_SETFL, f | fl_flags);
}

static void close_pipes(int to_child[2], int from_child[2])
{
    for (int i = 0; i < 2; i++) {
        if (to_child[i] >= 0)
            close(to_child[i]);
        if (from_child[i] >= 0)
            close(from_child[i]);
    }
}

int grpo_env_start(grpo_env **out, const char *cmd, int n_rewards, double timeout, size_t max_line)
{
    *out = NULL;
    grpo_env *e = calloc(1, sizeof *e);
    int to_child[2] = { -1, -1 }, from_child[2] = { -1, -1 };
    if (!e) {
        fprintf(stderr, "posttrain grpo: out of memory\n");
        return 1;
    }
    e->cmd = cmd;
    e->n_rewards = n_rewards;
    e->timeout = timeout;
    e->max_line = max_line;
    e->in = e->out = -1;
    /* a child that exits while we write must be an error, not SIGPIPE */
    signal(SIGPIPE, SIG_IGN);
    if (pipe(to_child) || pipe(from_child)) {
        fprintf(stderr, "posttrain grpo: --env: pipe: %s\n", strerror(errno));
        close_pipes(to_child, from_child);
        free(e);
        return 1;
    }
    set_flags(to_child[1], FD_CLOEXEC, O_NONBLOCK);
    set_flags(from_child[0], FD_CLOEXEC, O_NONBLOCK);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "posttrain grpo: --env: fork: %s\n", strerror(errno));
        close_pipes(to_child, from_child);
        free(e);
        return 1;
    }
    if (pid == 0) {
        /* its own process group: ending it ends the shell and what it runs */
        setpgid(0, 0);
        if (dup2(to_child[0], 0) < 0 || dup2(from_child[1], 1) < 0)
            _exit(127);
        close(to_child[0]);
        close(from_child[1]);
        signal(SIGPIPE, SIG_DFL);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no race with the first kill */
    e->pid = e->pgid = pid;
    close(to_child[0]);
    close(from_child[1]);
    e->in = to_child[1];
    e->out = from_child[0];
    *out = e;
    return 0;
}

/* "exited with status N" / "was killed by signal N" into buf. */
static void describe_status(char *buf, size_t n, int status)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, n, "ended (wait status %d)", status);
}

static void pause_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

/* Wait for the child up to `seconds`; 1 when it was reaped (*status set). */
static int wait_for(pid_t pid, double seconds, int *status)
{
    const double t_end = cli_now() + seconds;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            return w == pid;
        if (cli_now() >= t_end)
            return 0;
        pause_ms(10);
    }
}

/* End every process left in the group: SIGTERM, up to 2 s, then SIGKILL
 * (the shell, if not yet reaped, is reaped into *status).  1 when some
 * process had to be signalled. */
static int end_group(grpo_env *e, int *status)
{
    if (e->pgid <= 0)
        return 0;
    int signalled = 0;
    for (int sig = SIGTERM; e->pgid > 0; sig = SIGKILL) {
        if (kill(-e->pgid, 0) != 0 && errno == ESRCH)
            break;
        kill(-e->pgid, sig);
        signalled = 1;
        const double t_end = cli_now() + (sig == SIGTERM ? 2.0 : 5.0);
        while (cli_now() < t_end) {
            if (e->pid > 0 && waitpid(e->pid, status, WNOHANG) == e->pid)
                e->pid = 0;
            if (kill(-e->pgid, 0) != 0 && errno == ESRCH)
                break;
            pause_ms(10);
        }
        if (sig == SIGKILL)
            break;
    }
    if (e->pid > 0 && wait_for(e->pid, 1.0, status))
        e->pid = 0;
    e->pgid = 0;
    return signalled;
}

/* The child is gone, or misbehaved: with `stalled`, end its group at once;
 * else give it a few seconds to exit first.  Remember why, for every later
 * call. */
static void mark_dead(grpo_env *e, const char *why, bool stalled)
{
    if (e->dead)
        return;
    e->dead = true;
    char how[128] = "";
    int status = 0;
    bool reaped = false;
    if (e->pid > 0 && !stalled && wait_for(e->pid, 2.0, &status)) {
        e->pid = 0;
        reaped = true;
    }
    pid_t shell = e->pid;
    end_group(e, &status);
    if (reaped || (shell > 0 && e->pid == 0))
        describe_status(how, sizeof how, status);
    snprintf(e->dead_msg, sizeof e->dead_msg, "--env '%s' %s%s%s", e->cmd,
             stalled ? "was ended" : how[0] ? how : "stopped answering", why ? " " : "", why ? why : "");
}

int grpo_env_stop(grpo_env *e)
{
    if (!e)
        return 0;
    int rc = 0;
    if (e->in >= 0)
        close(e->in); /* EOF on its stdin: it should exit */
    e->in = -1;
    int status = 0;
    if (e->pid > 0) {
        if (!wait_for(e->pid, 5.0, &status)) {
            fprintf(stderr, "posttrain grpo: --env '%s' did not exit within 5 s of the end of its input: its "
                            "process group is ended\n", e->cmd);
            rc = 1;
        } else {
            e->pid = 0;
            if (!e->dead && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                char how[128];
                describe_status(how, sizeof how, status);
                cli_note("posttrain grpo: warning: --env '%s' %s at the end\n", e->cmd, how);
            }
        }
    }
    /* what the shell started and left running (its group) ends with it */
    if (end_group(e, &status) && !rc)
        cli_note("posttrain grpo: --env '%s': processes of its group were still running after it exited: "
                 "ended\n", e->cmd);
    if (e->out >= 0)
        close(e->out);
    free(e->buf);
    free(e->line);
    free(e->text);
    free(e);
    return rc;
}

const char *grpo_env_failure(const grpo_env *e)
{
    return e && e->dead ? e->dead_msg : NULL;
}

/* Fail this call with a message (returned to the library as the reply's
 * error). */
static int env_error(pt_env_reply *reply, grpo_env *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int env_error(pt_env_reply *reply, grpo_env *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
    reply->error = e->error;
    return 1;
}

/* A reply's "rewards" or "turn_rewards": absent or null: NULL (all
 * declined); else an array of n_rewards numbers or nulls. */
static int read_rewards(const float **out, float *dst, const cJSON *v, int n, const char *key, pt_env_reply *reply,
                        grpo_env *e)
{
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != n)
        return env_error(reply, e, "--env reply: \"%s\" must be an array of %d numbers or nulls (--env-rewards)",
                         key, n);
    int k = 0;
    for (const cJSON *x = v->child; x; x = x->next, k++) {
        if (cJSON_IsNull(x))
            dst[k] = NAN;
        else if (cJSON_IsNumber(x) && isfinite(x->valuedouble))
            dst[k] = (float)x->valuedouble;
        else
            return env_error(reply, e, "--env reply: \"%s\"[%d] is not a finite number or null", key, k);
    }
    *out = dst;
    return 0;
}

static int parse_reply(pt_env_reply *reply, grpo_env *e, const cJSON *j)
{
    if (!cJSON_IsObject(j))
        return env_error(reply, e, "--env reply is not a JSON object");
    const cJSON *append = NULL, *done = NULL, *error = NULL, *rw = NULL, *trw = NULL;
    for (const cJSON *x = j->child; x; x = x->next) {
        const char *k = x->string;
        if (!strcmp(k, "append"))
            append = x;
        else if (!strcmp(k, "done"))
            done = x;
        else if (!strcmp(k, "error"))
            error = x;
        else if (!strcmp(k, "rewards"))
            rw = x;
        else if (!strcmp(k, "turn_rewards"))
            trw = x;
        else
            return env_error(reply, e, "--env reply: unknown key \"%s\" (append, done, error, rewards, "
                                       "turn_rewards)", k);
    }
    if (!!append + !!done + !!error != 1)
        return env_error(reply, e, "--env reply needs exactly one of \"append\", \"done\" and \"error\"");
    if (error) {
        if (!cJSON_IsString(error))
            return env_error(reply, e, "--env reply: \"error\" must be a string");
        return env_error(reply, e, "%s", error->valuestring);
    }
    if (done && !cJSON_IsTrue(done))
        return env_error(reply, e, "--env reply: \"done\" must be true");
    if (append) {
        if (!cJSON_IsString(append))
            return env_error(reply, e, "--env reply: \"append\" must be a string");
        size_t n = strlen(append->valuestring) + 1;
        char *t = realloc(e->text, n);
        if (!t)
            return env_error(reply, e, "out of memory");
        memcpy(t, append->valuestring, n);
        e->text = t;
        reply->action = PT_ENV_APPEND;
        reply->text = n > 1 ? e->text : NULL;
    } else {
        reply->action = PT_ENV_DONE;
    }
    if (read_rewards(&reply->rewards, e->rewards, rw, e->n_rewards, "rewards", reply, e) ||
        read_rewards(&reply->turn_rewards, e->turn_rewards, trw, e->n_rewards, "turn_rewards", reply, e)) {
        reply->action = 0;
        return 1;
    }
    return 0;
}

/* The request line of this turn. */
static cJSON *request(const pt_env_turn *turn, const grpo_env_ctx *c)
{
    const int local_group = (int)turn->group;
    cJSON *q = cJSON_CreateObject();
    if (!q)
        return NULL;
    const grpo_row *row = &c->rows[c->group_row[local_group]];
    const char *final = turn->final ? pt_episode_end_name(turn->final) : NULL;
    bool ok = cJSON_AddNumberToObject(q, "step", (double)c->step) &&
              cJSON_AddNumberToObject(q, "episode", (double)(c->first_episode + turn->episode)) &&
              cJSON_AddNumberToObject(q, "group", (double)(c->first_group + local_group)) &&
              cJSON_AddNumberToObject(q, "turn", turn->turn) && cJSON_AddNumberToObject(q, "attempt", turn->attempt) &&
              cJSON_AddItemReferenceToObject(q, "row", row->json) &&
              cJSON_AddStringToObject(q, "text", turn->text ? turn->text : "") &&
              cJSON_AddStringToObject(q, "turn_text", turn->turn_text ? turn->turn_text : "") &&
              cJSON_AddStringToObject(q, "turn_end", pt_turn_end_name(turn->turn_end)) &&
              (final ? cJSON_AddStringToObject(q, "final", final) != NULL : cJSON_AddFalseToObject(q, "final") != NULL) &&
              cJSON_AddNumberToObject(q, "tokens_left", turn->tokens_left);
    if (!ok) {
        cJSON_Delete(q);
        return NULL;
    }
    return q;
}

/* Milliseconds to the deadline (0 when past it). */
static int ms_left(double deadline)
{
    double left = deadline - cli_now();
    return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
}

/* Write n bytes to the child's stdin by the deadline: 0, 1 when the time
 * ran out, -1 when the pipe failed (errno set). */
static int write_all(grpo_env *e, const char *s, size_t n, double deadline)
{
    while (n > 0) {
        ssize_t w = write(e->in, s, n);
        if (w > 0) {
            s += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        struct pollfd p = { .fd = e->in, .events = POLLOUT };
        int ms = ms_left(deadline);
        if (ms == 0 || (poll(&p, 1, ms) == 0 && ms_left(deadline) == 0))
            return 1;
    }
    return 0;
}

/* The next reply line (without its end) into e->line, by the deadline, of
 * at most e->max_line bytes: its length, or -1 for EOF or a failed read
 * (errno set; 0 for EOF), -2 when the time ran out, -3 when the line was
 * longer than the cap (its bytes up to the newline are dropped, by the
 * same deadline). */
static ssize_t read_line(grpo_env *e, double deadline)
{
    bool too_long = false;
    size_t scanned = 0;
    for (;;) {
        char *nl = e->buf_len > scanned ? memchr(e->buf + scanned, '\n', e->buf_len - scanned) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - e->buf);
            ssize_t rc = too_long || n > e->max_line ? -3 : (ssize_t)n;
            if (rc >= 0) {
                free(e->line);
                if (!(e->line = malloc(n + 1)))
                    return errno = ENOMEM, -1;
                memcpy(e->line, e->buf, n);
                e->line[n] = '\0';
            }
            memmove(e->buf, nl + 1, e->buf_len - n - 1);
            e->buf_len -= n + 1;
            return rc;
        }
        if (e->buf_len > e->max_line) {
            too_long = true; /* drop what came so far, keep reading to its end */
            e->buf_len = 0;
        }
        scanned = e->buf_len;
        if (e->buf_cap - e->buf_len < 65536) {
            size_t cap = e->buf_cap ? 2 * e->buf_cap : 65536;
            if (cap > e->max_line + 131072)
                cap = e->max_line + 131072;
            char *b = cap > e->buf_cap ? realloc(e->buf, cap) : e->buf;
            if (!b)
                return errno = ENOMEM, -1;
            e->buf = b;
            e->buf_cap = cap;
        }
        ssize_t r = read(e->out, e->buf + e->buf_len, e->buf_cap - e->buf_len);
        if (r > 0) {
            e->buf_len += (size_t)r;
            continue;
        }
        if (r == 0)
            return errno = 0, -1;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        struct pollfd p = { .fd = e->out, .events = POLLIN };
        int ms = ms_left(deadline);
        if (ms == 0 || (poll(&p, 1, ms) == 0 && ms_left(deadline) == 0))
            return -2;
    }
}

/* One request line out and its reply line in, by e->timeout each: the
 * reply's length (e->line), or -1 after the call's error was set. */
static ssize_t exchange(pt_env_reply *reply, grpo_env *e, const char *req)
{
    char why[160];
    int w = write_all(e, req, strlen(req), cli_now() + e->timeout);
    if (w == 0)
        w = write_all(e, "\n", 1, cli_now() + e->timeout);
    if (w) {
        if (w > 0)
            snprintf(why, sizeof why, "(it did not take a request within %g s, --env-timeout)", e->timeout);
        mark_dead(e, w > 0 ? why : NULL, w > 0);
        return env_error(reply, e, "%s", e->dead_msg), -1;
    }
    ssize_t n = read_line(e, cli_now() + e->timeout);
    if (n == -3)
        return env_error(reply, e, "--env reply line is longer than %zu bytes (--env-max-line)", e->max_line), -1;
    if (n == -2) {
        snprintf(why, sizeof why, "(it gave no reply line within %g s, --env-timeout)", e->timeout);
        mark_dead(e, why, true);
        return env_error(reply, e, "%s", e->dead_msg), -1;
    }
    if (n < 0) {
        mark_dead(e, errno ? "(reading its reply failed)" : NULL, false);
        return env_error(reply, e, "%s", e->dead_msg), -1;
    }
    return n;
}

int grpo_env_call(pt_env_reply *reply, const pt_env_turn *turn, void *payload)
{
    const grpo_env_ctx *c = payload;
    grpo_env *e = c->env;
    if (e->dead)
        return env_error(reply, e, "%s", e->dead_msg);
    cJSON *q = request(turn, c);
    char *s = q ? cJSON_PrintUnformatted(q) : NULL;
    cJSON_Delete(q);
    if (!s)
        return env_error(reply, e, "out of memory building the --env request");
    ssize_t n = exchange(reply, e, s);
    free(s);
    if (n < 0)
        return 1;
    while (n > 0 && e->line[n - 1] == '\r')
        e->line[--n] = '\0';
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(e->line, (size_t)n, &end, false);
    while (j && end && (*end == ' ' || *end == '\t'))
        end++;
    if (!j || (size_t)(end - e->line) != (size_t)n) {
        cJSON_Delete(j);
        return env_error(reply, e, "--env reply is not one JSON value on a line: '%.200s'", e->line);
    }
    int rc = parse_reply(reply, e, j);
    cJSON_Delete(j);
    return rc;
}
