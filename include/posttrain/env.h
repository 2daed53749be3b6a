/*
 * libposttrain public API: an environment of pt_episodes_run as a child
 * process speaking JSON lines (the protocol of `posttrain grpo --env`,
 * docs/episodes.md).
 *
 * pt_env_process_create starts /bin/sh -c COMMAND in a process group of its
 * own (its stdin a socket, its stdout a pipe, its stderr the host's; no
 * other descriptor of the host).  pt_env_process_call is a pt_env_fn whose
 * payload is the pt_env_process: for every turn it writes one JSON request
 * line ({"episode", "group", "turn", "attempt", "text", "turn_text",
 * "turn_end", "final", "tokens_left"}, after the host's own fields) and
 * reads one JSON reply line ({"append": TEXT} or {"done": true}, with
 * optional "rewards" and "turn_rewards" arrays, or {"error": MESSAGE}).
 * Writing and reading have a deadline and the reply line a cap, so a
 * process that stops reading or answering, or answers without end, fails
 * the episode instead of hanging the run or filling memory.  When it exits
 * early or misses a deadline, its whole group is ended and every later call
 * fails with why.
 *
 * The library never changes a signal disposition of the host: the request
 * is sent with MSG_NOSIGNAL, so a process that closed its stdin is an
 * error (not SIGPIPE).  The process is spawned with posix_spawn (safe in a
 * multi-threaded host), reaped, and ended with its group by
 * pt_env_process_close or pt_env_process_free; no call blocks for longer
 * than its deadline (closing: at most 5 s for it to exit, then 2 s after
 * SIGTERM and 5 s after SIGKILL).  A process object serves one call at a
 * time (one pt_episodes_run).  POSIX only.
 */
#ifndef POSTTRAIN_ENV_H
#define POSTTRAIN_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/episode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The environment process. */
typedef struct pt_env_process pt_env_process;

/* The host's part of a request line (optional): set *json to the text of a
 * JSON object (NUL-terminated) whose members come first in the line (e.g.
 * {"step": 3, "row": {...}}), or leave it NULL for none; the text must
 * stay valid until the hook is called again or the process is freed.  Its
 * "episode" and "group" replace the library's (turn->episode, turn->group:
 * a host numbering them across calls); the library's other keys may not
 * appear.  A non-zero return fails the turn. */
typedef int (*pt_env_request_fn)(const char **json, const pt_env_turn *turn, void *user);

/* Options.  Fill with pt_env_process_options_init() first. */
typedef struct pt_env_process_options {
    size_t size;                 /* sizeof(pt_env_process_options) */
    const char *command;         /* required: run as /bin/sh -c command */
    int n_rewards;               /* floats in a reply's "rewards" and "turn_rewards": the
                                  * episode options' n_reward_funcs, 1 .. PT_GRPO_MAX_REWARD_FUNCS;
                                  * default 1 */
    double timeout;              /* seconds to take a request and seconds to give its reply
                                  * line (each); default 60 */
    size_t max_line;             /* bytes of a reply line, >= 16; default 4 MiB */
    /* How messages name the process: NULL (default): "env process 'CMD'
     * exited with status 3", "env process reply: ...", the limits by these
     * fields' names ("(timeout)"); a command-line option such as "--env":
     * "--env 'CMD' ...", "--env reply: ...", "(--env-timeout)",
     * "(--env-max-line)", "(--env-rewards)". */
    const char *name;
    pt_env_request_fn request;   /* the host's fields of each request; NULL: none */
    void *request_user;
} pt_env_process_options;

PT_API int pt_env_process_options_init(pt_env_process_options *opts);

/* Start the process.  PT_EINVAL for bad options, PT_EIO when the socket,
 * the pipe or the spawn failed (the message names the command), PT_ENOMEM.
 * Free with pt_env_process_free. */
PT_API int pt_env_process_create(pt_env_process **out, const pt_env_process_options *opts);

/* The pt_env_fn: pass it to pt_episodes_run with the pt_env_process as its
 * payload.  Returns 0 with the reply filled (what it points to lives in the
 * process object until its next call), or 1 with reply->error saying what
 * went wrong, also recorded as this thread's last error with its status:
 * PT_EFORMAT for a reply line that is not one JSON object of the protocol,
 * PT_ERANGE for one longer than max_line (its bytes are skipped: the next
 * reply is read in step), PT_ECALLBACK for an {"error": ...} reply,
 * PT_EIO when the process exited, closed its stdin or stdout, or a read or
 * write failed, PT_EPEER when it took no request or gave no reply line
 * within timeout (its group is then ended), PT_ESTATE for every call after
 * one of these two (the process is dead: pt_env_process_failure says why),
 * PT_ENOMEM. */
PT_API int pt_env_process_call(pt_env_reply *reply, const pt_env_turn *turn, void *process);

/* NULL while the process is alive and answering; else why not, naming the
 * command and its exit status or the deadline it missed ("--env 'exit 3'
 * exited with status 3"). */
PT_API const char *pt_env_process_failure(const pt_env_process *proc);

/* The process id of the shell (the leader of the group), or 0 once it was
 * reaped. */
PT_API int64_t pt_env_process_pid(const pt_env_process *proc);

/* The end of the run: close the process's stdin (its end of input), wait
 * up to 5 s for it to exit, then end what is left of its group.  PT_OK
 * when it exited with status 0 (or had already failed) and left nothing
 * running; PT_EPEER when it did not exit within 5 s (its group was ended);
 * PT_ECALLBACK when it exited with another status, or processes of its
 * group were still running (ended): the message says which.  The process
 * is reaped either way; a second close returns PT_OK.  Then free it. */
PT_API int pt_env_process_close(pt_env_process *proc);

/* Close (if not yet) and free; NULL is fine. */
PT_API void pt_env_process_free(pt_env_process *proc);

#ifdef __cplusplus
}
#endif

#endif
