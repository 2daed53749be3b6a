/* pt_env_process (posttrain/env.h): an environment process speaking JSON
 * lines, driven by /bin/sh scripts (printf/read only).
 *  - a real pt_episodes_run on a tiny byte-tokenizer model: the script sees
 *    the host's request fields (a tag, its own episode numbers) and the
 *    library's, appends "ok" after turn 0 and is done after turn 1 with a
 *    reward computed from the request: every episode's rewards, turn
 *    rewards and appended ids are the script's;
 *  - a process that exits at once, one that never answers (the deadline),
 *    one that answers an over-long line (the next reply is read in step),
 *    one that closes its stdin: each its own status and message, the later
 *    calls PT_ESTATE; a dead process inside pt_episodes_run is the episode's
 *    error as the engine records it;
 *  - SIGPIPE is left at its default disposition: a write to a closed stdin
 *    would kill this process, it must not happen;
 *  - no child is left to reap, the group (a background sleep) is ended, no
 *    descriptor leaks, a host descriptor without FD_CLOEXEC is not
 *    inherited;
 *  - close's statuses (exit 0, a non-zero exit at the end), bad options;
 *  - 4 threads spawning, calling and freeing processes at once. */
#include "testutil.h"

#include "posttrain/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* No child of this process is left, running or unreaped. */
static void assert_no_children(void)
{
    int st;
    errno = 0;
    pid_t w = waitpid(-1, &st, WNOHANG);
    ck_assert_msg(w == -1 && errno == ECHILD, "waitpid(-1) found a child: %d (errno %d)", (int)w, errno);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static pt_env_process *start(const char *cmd, double timeout, size_t max_line)
{
    pt_env_process_options o;
    ck_assert_ok(pt_env_process_options_init(&o));
    o.command = cmd;
    if (timeout > 0)
        o.timeout = timeout;
    if (max_line)
        o.max_line = max_line;
    pt_env_process *p = NULL;
    ck_assert_ok(pt_env_process_create(&p, &o));
    ck_assert(pt_env_process_pid(p) > 0);
    return p;
}

/* One call with a made-up turn: its return, the reply in *rep. */
static int call(pt_env_reply *rep, pt_env_process *p, int episode, int turn)
{
    pt_env_turn t;
    memset(&t, 0, sizeof t);
    t.size = sizeof t;
    t.episode = episode;
    t.group = episode / 2;
    t.turn = turn;
    t.tokens_left = 10;
    memset(rep, 0, sizeof *rep);
    rep->size = sizeof *rep;
    return pt_env_process_call(rep, &t, p);
}

/* The call fails with status and a reply error containing needle. */
static void assert_fails(pt_env_process *p, int status, const char *needle)
{
    pt_env_reply rep;
    ck_assert_int_eq(call(&rep, p, 0, 0), 1);
    ck_assert_msg(pt_last_status() == status, "status %s, expected %s (%s)", pt_status_name(pt_last_status()),
                  pt_status_name(status), pt_last_error());
    ck_assert_msg(rep.error && strstr(rep.error, needle), "reply error '%s' lacks '%s'",
                  rep.error ? rep.error : "(null)", needle);
    ck_assert(strstr(pt_last_error(), needle));
}

/* ---- a real episode run ------------------------------------------------------------------ */

/* The host's fields: a tag and the episode renumbered from 100. */
typedef struct hook_state {
    char buf[128];
    int calls;
} hook_state;

static int hook(const char **json, const pt_env_turn *turn, void *user)
{
    hook_state *h = user;
    snprintf(h->buf, sizeof h->buf, "{\"tag\":\"hello\",\"episode\":%d}", 100 + turn->episode);
    *json = h->buf;
    h->calls++;
    return 0;
}

/* Turn 0: append "ok" with turn reward 0.25; turn 1: done with reward
 * (episode - 100) + 0.5, the episode read from the request; a request
 * without the host's tag: an error reply. */
static const char k_script[] =
    "while IFS= read -r line; do "
    "  case $line in *'\"tag\":\"hello\"'*) ;; *) echo '{\"error\":\"no tag\"}'; continue;; esac; "
    "  e=${line#*\\\"episode\\\":}; e=${e%%,*}; "
    "  case $line in "
    "    *'\"turn\":0,'*) echo '{\"append\":\"ok\",\"turn_rewards\":[0.25]}';; "
    "    *) printf '{\"done\":true,\"rewards\":[%d.5]}\\n' $((e - 100));; "
    "  esac; "
    "done";

START_TEST(test_episode_run)
{
    const int fds0 = count_fds();
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, PT_BYTE_TOKENIZER_VOCAB);
    c.max_position_embeddings = 128;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 5));
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 3, 64));
    enum { N = 5, PLEN = 3 };
    int32_t prompts[N * PLEN], lens[N];
    for (int i = 0; i < N * PLEN; i++)
        prompts[i] = 'a' + i % 7;
    for (int i = 0; i < N; i++)
        lens[i] = PLEN;
    int32_t *ok_ids;
    size_t n_ok;
    ck_assert_ok(pt_tokenizer_encode(&ok_ids, &n_ok, tok, "ok", 2, 0));
    ck_assert_int_eq((int)n_ok, 2);
    pt_generate_options so;
    ck_assert_ok(pt_generate_options_init(&so));
    so.max_new_tokens = 6;
    so.seed = 11;
    so.n_stop_ids = 0;
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = 2;
    eo.tokenizer = tok;
    hook_state hs = { .calls = 0 };
    pt_env_process_options po;
    ck_assert_ok(pt_env_process_options_init(&po));
    po.command = k_script;
    po.timeout = 20;
    po.request = hook;
    po.request_user = &hs;
    pt_env_process *p = NULL;
    ck_assert_ok(pt_env_process_create(&p, &po));
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, pt_env_process_call, p));
    ck_assert_ptr_null(pt_env_process_failure(p));
    ck_assert_int_eq(hs.calls, 2 * N);
    for (int i = 0; i < N; i++) {
        pt_episode e;
        ck_assert_ok(pt_episode_init(&e));
        ck_assert_ok(pt_episode_results_get(&e, res, i));
        ck_assert_msg(e.end == PT_EPISODE_DONE, "episode %d ended %s: %s", i, pt_episode_end_name(e.end),
                      e.error ? e.error : "");
        ck_assert_int_eq(e.n_turns, 2);
        ck_assert_float_eq(e.rewards[0], (float)i + 0.5f);
        ck_assert_float_eq(e.turn_rewards[0], 0.25f);
        ck_assert(isnan(e.turn_rewards[1]));
        const int after = e.turn_start[0] + e.turn_len[0];
        ck_assert_int_eq(e.turn_start[1], after + 2);
        ck_assert_int_eq(e.ids[after], ok_ids[0]);
        ck_assert_int_eq(e.ids[after + 1], ok_ids[1]);
    }
    ck_assert_ok(pt_env_process_close(p));
    ck_assert_int_eq((int)pt_env_process_pid(p), 0);
    pt_env_process_free(p);
    assert_no_children();

    /* a process that exits at once: each episode's error as the engine
     * records it, the process's failure naming the command and status */
    p = start("exit 3", 5, 0);
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, pt_env_process_call, p));
    ck_assert_str_eq(pt_env_process_failure(p), "env process 'exit 3' exited with status 3");
    for (int i = 0; i < N; i++) {
        pt_episode e;
        ck_assert_ok(pt_episode_init(&e));
        ck_assert_ok(pt_episode_results_get(&e, res, i));
        ck_assert_int_eq(e.end, PT_EPISODE_ERROR);
        ck_assert_int_eq(e.status, PT_ECALLBACK);
        ck_assert_msg(strstr(e.error, "turn 0: the environment returned 1: env process 'exit 3' exited with "
                                      "status 3"), "%s", e.error);
    }
    ck_assert_ok(pt_env_process_close(p)); /* it had failed already: nothing more to say */
    pt_env_process_free(p);
    assert_no_children();
    pt_episode_results_free(res);
    pt_free(ok_ids);
    pt_generator_free(g);
    pt_model_free(m);
    pt_tokenizer_free(tok);
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

/* ---- failures, one by one ------------------------------------------------------------------ */

START_TEST(test_failures)
{
    /* SIGPIPE stays at its default: a write to a closed stdin would end
     * this test with the signal */
    signal(SIGPIPE, SIG_DFL);
    const int fds0 = count_fds();

    /* exits early */
    pt_env_process *p = start("exit 3", 5, 0);
    assert_fails(p, PT_EIO, "env process 'exit 3' exited with status 3");
    ck_assert_int_eq((int)pt_env_process_pid(p), 0);
    assert_fails(p, PT_ESTATE, "exited with status 3");
    pt_env_process_free(p);
    assert_no_children();

    /* never answers: the deadline, the group ended (a background sleep of
     * its shell) */
    p = start("sleep 300 & cat > /dev/null", 0.3, 0);
    const pid_t pgid = (pid_t)pt_env_process_pid(p);
    const double t0 = (double)time(NULL);
    assert_fails(p, PT_EPEER, "env process 'sleep 300 & cat > /dev/null' was ended (it gave no reply line "
                              "within 0.3 s, timeout)");
    ck_assert((double)time(NULL) - t0 < 10);
    ck_assert_int_eq((int)pt_env_process_pid(p), 0);
    ck_assert(kill(-pgid, 0) != 0 && errno == ESRCH);
    assert_fails(p, PT_ESTATE, "was ended");
    pt_env_process_free(p);
    assert_no_children();

    /* an over-long line: that call fails, the next reply is read in step */
    p = start("read l; printf '%0100d\\n' 7; read l; echo '{\"done\": true, \"rewards\": [2]}'", 5, 64);
    assert_fails(p, PT_ERANGE, "env process reply line is longer than 64 bytes (max_line)");
    pt_env_reply rep;
    ck_assert_int_eq(call(&rep, p, 1, 0), 0);
    ck_assert_int_eq(rep.action, PT_ENV_DONE);
    ck_assert_float_eq(rep.rewards[0], 2.0f);
    ck_assert_ptr_null(pt_env_process_failure(p));
    ck_assert_ok(pt_env_process_close(p));
    pt_env_process_free(p);
    assert_no_children();

    /* closes its stdin, then exits 4: the request cannot be sent (EPIPE,
     * no SIGPIPE) or its reply never comes (EOF) */
    p = start("exec 0<&-; sleep 1; exit 4", 5, 0);
    sleep_ms(300);
    assert_fails(p, PT_EIO, "env process 'exec 0<&-; sleep 1; exit 4' exited with status 4");
    pt_env_process_free(p);
    assert_no_children();

    /* malformed replies and an error reply */
    p = start("read l; echo 'not json'; read l; echo '{\"done\": true, \"x\": 1}'; read l; "
              "echo '{\"error\": \"tool broke\"}'; read l; echo '{\"done\": true, \"rewards\": [1, 2]}'", 5, 0);
    assert_fails(p, PT_EFORMAT, "env process reply is not one JSON value on a line: 'not json'");
    assert_fails(p, PT_EFORMAT, "env process reply: unknown key \"x\"");
    assert_fails(p, PT_ECALLBACK, "tool broke");
    assert_fails(p, PT_EFORMAT, "\"rewards\" must be an array of 1 numbers or nulls (n_rewards)");
    ck_assert_ok(pt_env_process_close(p));
    pt_env_process_free(p);
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

/* ---- descriptors, the group, close --------------------------------------------------------- */

START_TEST(test_fds_group_close)
{
    const int fds0 = count_fds();
    /* a descriptor of the host without FD_CLOEXEC: not in the child */
    int fd = open("/dev/null", O_RDONLY);
    ck_assert(fd > 2);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "read l; if [ -e /proc/$$/fd/%d ]; then r=1; else r=0; fi; "
             "echo \"{\\\"done\\\": true, \\\"rewards\\\": [$r]}\"; read l; true", fd);
    pt_env_process *p = start(cmd, 5, 0);
    pt_env_reply rep;
    ck_assert_int_eq(call(&rep, p, 0, 0), 0);
    ck_assert_int_eq(rep.action, PT_ENV_DONE);
    ck_assert_msg(rep.rewards[0] == 0.0f, "the child holds the host's fd %d", fd);
    ck_assert_ok(pt_env_process_close(p));
    pt_env_process_free(p);
    close(fd);

    /* a background process of its shell is ended with the group at close */
    p = start("sleep 300 & while read l; do echo '{\"done\": true}'; done", 5, 0);
    const pid_t pgid = (pid_t)pt_env_process_pid(p);
    ck_assert_int_eq(call(&rep, p, 0, 0), 0);
    ck_assert_status(pt_env_process_close(p), PT_ECALLBACK, "processes of its group were still running");
    ck_assert(kill(-pgid, 0) != 0 && errno == ESRCH);
    ck_assert_ok(pt_env_process_close(p)); /* once */
    assert_fails(p, PT_ESTATE, "was closed");
    pt_env_process_free(p);
    assert_no_children();

    /* a non-zero exit at the end */
    p = start("read l; echo '{\"append\": \"\"}'; read l; exit 5", 5, 0);
    ck_assert_int_eq(call(&rep, p, 0, 0), 0);
    ck_assert_int_eq(rep.action, PT_ENV_APPEND);
    ck_assert_ptr_null(rep.text);
    ck_assert_status(pt_env_process_close(p), PT_ECALLBACK, "env process 'read l; echo '{\"append\": \"\"}'; "
                     "read l; exit 5' exited with status 5 at the end");
    pt_env_process_free(p);
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

static int bad_hook(const char **json, const pt_env_turn *turn, void *user)
{
    (void)turn;
    *json = user;
    return 0;
}

START_TEST(test_bad_options)
{
    pt_env_process_options o;
    ck_assert_ok(pt_env_process_options_init(&o));
    ck_assert_int_eq(o.n_rewards, 1);
    ck_assert(o.timeout == 60 && o.max_line == ((size_t)4 << 20));
    pt_env_process *p = (pt_env_process *)&o;
    ck_assert_status(pt_env_process_create(&p, &o), PT_EINVAL, "pt_env_process_create: command is NULL");
    ck_assert_ptr_null(p);
    ck_assert_status(pt_env_process_create(NULL, &o), PT_EINVAL, "out is NULL");
    o.command = "cat";
    o.n_rewards = PT_GRPO_MAX_REWARD_FUNCS + 1;
    ck_assert_status(pt_env_process_create(&p, &o), PT_EINVAL, "n_rewards");
    o.n_rewards = 1;
    o.timeout = 0;
    ck_assert_status(pt_env_process_create(&p, &o), PT_EINVAL, "timeout");
    o.timeout = 1;
    o.max_line = 15;
    ck_assert_status(pt_env_process_create(&p, &o), PT_EINVAL, "max_line");
    o.max_line = 100;
    /* a caller of an older, smaller struct: the fields past its size are
     * the defaults (max_line 15 would be refused); a size below size_t's */
    o.size = offsetof(pt_env_process_options, max_line);
    o.max_line = 15;
    ck_assert_ok(pt_env_process_create(&p, &o));
    pt_env_process_free(p);
    o.size = 3;
    ck_assert_status(pt_env_process_create(&p, &o), PT_EINVAL, "pt_env_process_options_init");
    o.size = sizeof o;
    o.max_line = 100;
    /* the CLI's naming; a hook that writes a key of the library's */
    o.name = "--env";
    o.request = bad_hook;
    o.request_user = (void *)"{\"turn\": 3}";
    ck_assert_ok(pt_env_process_create(&p, &o));
    assert_fails(p, PT_EINVAL, "--env: the request hook's fields hold \"turn\"");
    pt_env_process_free(p);
    o.request_user = (void *)"[1]";
    ck_assert_ok(pt_env_process_create(&p, &o));
    assert_fails(p, PT_EFORMAT, "--env: the request hook's fields are not a JSON object");
    pt_env_process_free(p);
    o.request = NULL;
    o.command = "read l; echo '{\"done\": true, \"rewards\": [1, 2]}'";
    ck_assert_ok(pt_env_process_create(&p, &o));
    assert_fails(p, PT_EFORMAT, "--env reply: \"rewards\" must be an array of 1 numbers or nulls (--env-rewards)");
    pt_env_process_free(p);
    assert_no_children();
    /* NULL arguments */
    pt_env_process_free(NULL);
    ck_assert_ptr_null(pt_env_process_failure(NULL));
    ck_assert_int_eq((int)pt_env_process_pid(NULL), 0);
    ck_assert_status(pt_env_process_close(NULL), PT_EINVAL, "pt_env_process_close: proc is NULL");
    pt_env_reply rep;
    memset(&rep, 0, sizeof rep);
    rep.size = sizeof rep;
    ck_assert_int_eq(pt_env_process_call(&rep, NULL, NULL), 1);
    ck_assert_status(pt_last_status(), PT_EINVAL, "pt_env_process_call: turn is NULL");
    ck_assert_status(pt_env_process_options_init(NULL), PT_EINVAL, "pt_env_process_options_init");
}
END_TEST

/* ---- a multi-threaded host ------------------------------------------------------------------ */

typedef struct thread_job {
    int k;
    int ok;
} thread_job;

/* Each thread spawns, calls and frees its own process 5 times while the
 * others do the same (posix_spawn in a multi-threaded host). */
static void *thread_main(void *arg)
{
    thread_job *j = arg;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "read l; echo '{\"done\": true, \"rewards\": [%d]}'", j->k);
    for (int r = 0; r < 5; r++) {
        pt_env_process_options o;
        pt_env_process_options_init(&o);
        o.command = cmd;
        o.timeout = 20;
        pt_env_process *p = NULL;
        if (pt_env_process_create(&p, &o))
            return NULL;
        pt_env_turn t;
        memset(&t, 0, sizeof t);
        t.size = sizeof t;
        pt_env_reply rep;
        memset(&rep, 0, sizeof rep);
        rep.size = sizeof rep;
        int rc = pt_env_process_call(&rep, &t, p);
        j->ok += rc == 0 && rep.action == PT_ENV_DONE && rep.rewards && rep.rewards[0] == (float)j->k &&
                 pt_env_process_close(p) == PT_OK;
        pt_env_process_free(p);
    }
    return NULL;
}

START_TEST(test_threads)
{
    const int fds0 = count_fds();
    enum { T = 4 };
    pthread_t th[T];
    thread_job jobs[T];
    for (int i = 0; i < T; i++) {
        jobs[i].k = i + 1;
        jobs[i].ok = 0;
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(jobs[i].ok == 5, "thread %d: %d of 5 exchanges right", i, jobs[i].ok);
    }
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds0);
}
END_TEST

static Suite *env_process_suite(void)
{
    Suite *s = suite_create("env_process");
    TCase *tc = tcase_create("env_process");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_episode_run);
    tcase_add_test(tc, test_failures);
    tcase_add_test(tc, test_fds_group_close);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (access("/bin/sh", X_OK) != 0) {
        fprintf(stderr, "SKIP env_process: no /bin/sh\n");
        return 77;
    }
    return pt_test_run(env_process_suite());
}
