/* An environment of pt_episodes_run as a child process (posttrain/env.h):
 * its options, its spawn (/bin/sh -c COMMAND by posix_spawn, in a process
 * group of its own, its stdin a socket, its stdout a pipe, no other
 * descriptor of the host), waiting for it and ending its group, and its
 * close.  The request and reply lines are env_process_io.c's.
 *
 * Nothing here changes a signal disposition of the host: the child gets
 * SIGPIPE at its default and an empty signal mask (posix_spawn's
 * SETSIGDEF and SETSIGMASK), the host's own stay as they are. */
#include "train/env_process_internal.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int pt_env_process_options_init(pt_env_process_options *o)
{
    PT_STRUCT_INIT_ZERO(o);
    o->n_rewards = 1;
    o->timeout = 60;
    o->max_line = (size_t)4 << 20;
    return PT_OK;
}

static void pause_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000 * 1000 };
    nanosleep(&ts, NULL);
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

/* Wait for the child up to `seconds`; true when it was reaped (*status set). */
static bool wait_for(pid_t pid, double seconds, int *status)
{
    const double t_end = pt__now() + seconds;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            return w == pid;
        if (pt__now() >= t_end)
            return false;
        pause_ms(10);
    }
}

static bool group_gone(pid_t pgid)
{
    return kill(-pgid, 0) != 0 && errno == ESRCH;
}

/* End every process left in the group: SIGTERM, up to 2 s, then SIGKILL
 * (the shell, if not yet reaped, is reaped into *status).  True when some
 * process had to be signalled. */
static bool end_group(pt_env_process *p, int *status)
{
    if (p->pgid <= 0)
        return false;
    bool signalled = false;
    for (int sig = SIGTERM;; sig = SIGKILL) {
        if (group_gone(p->pgid))
            break;
        kill(-p->pgid, sig);
        signalled = true;
        const double t_end = pt__now() + (sig == SIGTERM ? 2.0 : 5.0);
        while (pt__now() < t_end) {
            if (p->pid > 0 && waitpid(p->pid, status, WNOHANG) == p->pid)
                p->pid = 0;
            if (group_gone(p->pgid))
                break;
            pause_ms(10);
        }
        if (sig == SIGKILL)
            break;
    }
    if (p->pid > 0 && wait_for(p->pid, 1.0, status))
        p->pid = 0;
    p->pgid = 0;
    return signalled;
}

void pt__env_process_mark_dead(pt_env_process *p, const char *why, bool stalled, int status)
{
    if (p->dead)
        return;
    p->dead = true;
    p->dead_status = status;
    char how[128] = "";
    int ws = 0;
    bool reaped = false;
    if (p->pid > 0 && !stalled && wait_for(p->pid, 2.0, &ws)) {
        p->pid = 0;
        reaped = true;
    }
    pid_t shell = p->pid;
    end_group(p, &ws);
    if (reaped || (shell > 0 && p->pid == 0))
        describe_status(how, sizeof how, ws);
    snprintf(p->dead_msg, sizeof p->dead_msg, "%s '%s' %s%s%s", p->name, p->cmd,
             stalled ? "was ended" : how[0] ? how : "stopped answering", why ? " " : "", why ? why : "");
}

/* fd moved to >= 3 (close-on-exec), so that the spawn's dup2 onto 0 and 1
 * cannot overwrite it (a host that closed its stdin or stdout). */
static int above_stdio(int fd)
{
    if (fd > 2)
        return fd;
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return d;
}

static void set_nonblock(int fd)
{
    int f = fcntl(fd, F_GETFL);
    if (f >= 0)
        (void)fcntl(fd, F_SETFL, f | O_NONBLOCK);
}

/* posix_spawn /bin/sh -c cmd with stdin sin and stdout sout, in a group of
 * its own: 0 or an errno value. */
static int spawn(pid_t *pid, const char *cmd, int sin, int sout)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t def, none;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc)
        return rc;
    if ((rc = posix_spawnattr_init(&at))) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    sigemptyset(&none);
    rc = posix_spawn_file_actions_adddup2(&fa, sin, 0);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, sout, 1);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* descriptors of the host without FD_CLOEXEC stay out of the child */
    if (!rc)
        rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    if (!rc)
        rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                               POSIX_SPAWN_SETSIGMASK);
    if (!rc)
        rc = posix_spawnattr_setpgroup(&at, 0);
    if (!rc)
        rc = posix_spawnattr_setsigdefault(&at, &def);
    if (!rc)
        rc = posix_spawnattr_setsigmask(&at, &none);
    if (!rc) {
        char *argv[] = { (char *)"sh", (char *)"-c", (char *)cmd, NULL };
        rc = posix_spawn(pid, "/bin/sh", &fa, &at, argv, environ);
    }
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

static int check_options(const pt_env_process_options *o)
{
    static const char fn[] = "pt_env_process_create";
    if (!o->command || !o->command[0])
        return pt__err_arg(fn, "command", "is %s: give the environment's command", o->command ? "empty" : "NULL");
    if (o->n_rewards < 1 || o->n_rewards > PT_GRPO_MAX_REWARD_FUNCS)
        return pt__err_arg(fn, "n_rewards", "%d must be in 1 .. %d", o->n_rewards, PT_GRPO_MAX_REWARD_FUNCS);
    if (!(o->timeout >= 0.001 && o->timeout <= 1e6))
        return pt__err_arg(fn, "timeout", "%g must be in 0.001 .. 1e6 seconds", o->timeout);
    if (o->max_line < 16 || o->max_line > ((size_t)1 << 30))
        return pt__err_arg(fn, "max_line", "%zu must be in 16 .. 2^30 bytes", o->max_line);
    if (o->name && (!o->name[0] || strlen(o->name) > 40))
        return pt__err_arg(fn, "name", "must be 1 .. 40 bytes");
    return PT_OK;
}

/* The names and limit hints of the messages. */
static void set_names(pt_env_process *p, const char *name)
{
    snprintf(p->name, sizeof p->name, "%s", name ? name : "env process");
    snprintf(p->hint_timeout, sizeof p->hint_timeout, "%s%s", name ? name : "timeout", name ? "-timeout" : "");
    snprintf(p->hint_max_line, sizeof p->hint_max_line, "%s%s", name ? name : "max_line", name ? "-max-line" : "");
    snprintf(p->hint_rewards, sizeof p->hint_rewards, "%s%s", name ? name : "n_rewards", name ? "-rewards" : "");
}

int pt_env_process_create(pt_env_process **out, const pt_env_process_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    pt_env_process_options o;
    int st = PT_STRUCT_READ(o, opts, pt_env_process_options_init);
    if (st || (st = check_options(&o)))
        return st;
    pt_env_process *p = pt__calloc(1, sizeof *p);
    if (!p || !(p->cmd = pt__strdup(o.command))) {
        pt_free(p);
        return pt__err(PT_ENOMEM, "pt_env_process_create: out of memory");
    }
    p->n_rewards = o.n_rewards;
    p->timeout = o.timeout;
    p->max_line = o.max_line;
    p->request = o.request;
    p->request_user = o.request_user;
    set_names(p, o.name);
    p->in = p->out = -1;
    int sv[2] = { -1, -1 }, pf[2] = { -1, -1 };
    const char *what = "socketpair";
    int rc = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ||
        (what = "pipe", pipe2(pf, O_CLOEXEC)))
        rc = errno;
    for (int i = 0; i < 2 && !rc; i++)
        if ((sv[i] = above_stdio(sv[i])) < 0 || (pf[i] = above_stdio(pf[i])) < 0)
            rc = errno, what = "fcntl";
    if (!rc && (rc = spawn(&p->pid, p->cmd, sv[1], pf[1])))
        what = "posix_spawn of /bin/sh";
    for (int i = 0; i < 2; i++) {
        if (sv[i] >= 0 && (rc || i == 1))
            close(sv[i]);
        if (pf[i] >= 0 && (rc || i == 1))
            close(pf[i]);
    }
    if (rc) {
        pt_free(p->cmd);
        pt_free(p);
        return pt__err(PT_EIO, "pt_env_process_create: %s '%s': %s: %s", o.name ? o.name : "env process",
                      o.command, what, strerror(rc));
    }
    p->pgid = p->pid;
    p->in = sv[0];
    p->out = pf[0];
    set_nonblock(p->in);
    set_nonblock(p->out);
    *out = p;
    return PT_OK;
}

const char *pt_env_process_failure(const pt_env_process *p)
{
    return p && p->dead ? p->dead_msg : NULL;
}

int64_t pt_env_process_pid(const pt_env_process *p)
{
    return p ? (int64_t)p->pid : 0;
}

int pt_env_process_close(pt_env_process *proc)
{
    PT_CHECK_NULL(proc);
    pt_env_process *p = proc;
    if (p->closed)
        return PT_OK;
    p->closed = true;
    if (p->in >= 0)
        close(p->in); /* the end of its input: it should exit */
    p->in = -1;
    int st = PT_OK, status = 0;
    char msg[600] = "";
    if (p->pid > 0) {
        if (!wait_for(p->pid, 5.0, &status)) {
            st = PT_EPEER;
            snprintf(msg, sizeof msg, "%s '%s' did not exit within 5 s of the end of its input: its process "
                     "group is ended", p->name, p->cmd);
        } else {
            p->pid = 0;
            if (!p->dead && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                char how[128];
                describe_status(how, sizeof how, status);
                st = PT_ECALLBACK;
                snprintf(msg, sizeof msg, "%s '%s' %s at the end", p->name, p->cmd, how);
            }
        }
    }
    /* what the shell started and left running (its group) ends with it */
    if (end_group(p, &status) && st != PT_EPEER) {
        size_t n = strlen(msg);
        snprintf(msg + n, sizeof msg - n, "%s%s '%s': processes of its group were still running after it "
                 "exited: ended", n ? "; " : "", p->name, p->cmd);
        st = PT_ECALLBACK;
    }
    if (p->pid > 0 && wait_for(p->pid, 1.0, &status)) /* reaped in any case */
        p->pid = 0;
    if (p->out >= 0)
        close(p->out);
    p->out = -1;
    return st ? pt__err(st, "pt_env_process_close: %s", msg) : PT_OK;
}

void pt_env_process_free(pt_env_process *p)
{
    if (!p)
        return;
    pt_env_process_close(p);
    pt_free(p->buf);
    pt_free(p->line);
    pt_free(p->text);
    pt_free(p->cmd);
    pt_free(p);
}
