/* posttrain grpo --env CMD: the episode engine's environment as a process.
 * CMD is started once (/bin/sh -c CMD, its stdin and stdout piped, stderr
 * inherited); every call of the pt_env_fn callback writes one JSON request
 * line to it and reads one JSON reply line back (docs/cli-grpo.md). */
#include "cmd_grpo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
    pid_t pid;           /* 0 once waited for */
    FILE *in, *out;      /* the child's stdin (we write), its stdout (we read) */
    int n_rewards;
    bool dead;           /* it exited (or a pipe failed): every call fails */
    char dead_msg[512];
    /* the reply handed to the library: must outlast the callback */
    char *line;
    size_t line_cap;
    char *text;
    float rewards[PT_GRPO_MAX_REWARD_FUNCS], turn_rewards[PT_GRPO_MAX_REWARD_FUNCS];
    char error[1024];
};

static void set_cloexec(int fd)
{
    int f = fcntl(fd, F_GETFD);
    if (f >= 0)
        (void)fcntl(fd, F_SETFD, f | FD_CLOEXEC);
}

int grpo_env_start(grpo_env **out, const char *cmd, int n_rewards)
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
    /* a child that exits while we write must be an error, not SIGPIPE */
    signal(SIGPIPE, SIG_IGN);
    if (pipe(to_child) || pipe(from_child)) {
        fprintf(stderr, "posttrain grpo: --env: pipe: %s\n", strerror(errno));
        goto fail;
    }
    set_cloexec(to_child[1]);
    set_cloexec(from_child[0]);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "posttrain grpo: --env: fork: %s\n", strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        if (dup2(to_child[0], 0) < 0 || dup2(from_child[1], 1) < 0)
            _exit(127);
        close(to_child[0]);
        close(from_child[1]);
        signal(SIGPIPE, SIG_DFL);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    e->pid = pid;
    close(to_child[0]);
    close(from_child[1]);
    to_child[0] = from_child[1] = -1;
    if (!(e->in = fdopen(to_child[1], "w")) || !(e->out = fdopen(from_child[0], "r"))) {
        fprintf(stderr, "posttrain grpo: --env: fdopen: %s\n", strerror(errno));
        if (!e->in)
            close(to_child[1]);
        if (!e->out)
            close(from_child[0]);
        grpo_env_stop(e);
        return 1;
    }
    *out = e;
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (to_child[i] >= 0)
            close(to_child[i]);
        if (from_child[i] >= 0)
            close(from_child[i]);
    }
    free(e);
    return 1;
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
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

/* The child is gone, or misbehaved: reap it (a few seconds' grace, then
 * SIGTERM, then SIGKILL) and remember why, for every later call. */
static void mark_dead(grpo_env *e, const char *why)
{
    if (e->dead)
        return;
    e->dead = true;
    char how[128] = "";
    int status = 0;
    if (e->pid > 0) {
        if (wait_for(e->pid, 2.0, &status) ||
            (kill(e->pid, SIGTERM) == 0 && wait_for(e->pid, 2.0, &status)) ||
            (kill(e->pid, SIGKILL) == 0 && wait_for(e->pid, 5.0, &status)))
            describe_status(how, sizeof how, status);
        e->pid = 0;
    }
    snprintf(e->dead_msg, sizeof e->dead_msg, "--env '%s' %s%s%s", e->cmd, how[0] ? how : "stopped answering",
             why ? " " : "", why ? why : "");
}

int grpo_env_stop(grpo_env *e)
{
    if (!e)
        return 0;
    int rc = 0;
    if (e->in)
        fclose(e->in); /* EOF on its stdin: it should exit */
    e->in = NULL;
    if (e->pid > 0) {
        int status = 0;
        if (!wait_for(e->pid, 5.0, &status)) {
            fprintf(stderr, "posttrain grpo: --env '%s' did not exit within 5 s of the end of its input: killed\n",
                    e->cmd);
            kill(e->pid, SIGKILL);
            wait_for(e->pid, 5.0, &status);
            rc = 1;
        } else if (!e->dead && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            char how[128];
            describe_status(how, sizeof how, status);
            cli_note("posttrain grpo: warning: --env '%s' %s at the end\n", e->cmd, how);
        }
        e->pid = 0;
    }
    if (e->out)
        fclose(e->out);
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
    int w = fputs(s, e->in) < 0 || fputc('\n', e->in) == EOF || fflush(e->in);
    free(s);
    if (w) {
        mark_dead(e, NULL);
        return env_error(reply, e, "%s", e->dead_msg);
    }
    errno = 0;
    ssize_t n = getline(&e->line, &e->line_cap, e->out);
    if (n < 0) {
        mark_dead(e, errno ? "(reading its reply failed)" : NULL);
        return env_error(reply, e, "%s", e->dead_msg);
    }
    while (n > 0 && (e->line[n - 1] == '\n' || e->line[n - 1] == '\r'))
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
