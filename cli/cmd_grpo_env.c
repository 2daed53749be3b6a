/* posttrain grpo --env CMD: the episode engine's environment as a process,
 * a thin user of the library's pt_env_process (posttrain/env.h,
 * docs/cli-grpo.md).  The library starts CMD, exchanges one JSON line per
 * turn with it under --env-timeout and --env-max-line, adds the command's
 * fields to every request (pt_grpo_env_request_fn: the step, the episode
 * and group numbered across the ranks, the prompt's row), and ends its
 * process group; this file turns the library's statuses into the
 * command's messages. */
#include "cmd_grpo.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

int grpo_env_start(pt_env_process **out, const grpo_args *a, pt_grpo_env_request *req)
{
    /* the library needs no SIGPIPE setting; the command's own output keeps
     * today's behaviour (a closed stdout is a write error, not a signal) */
    signal(SIGPIPE, SIG_IGN);
    pt_env_process_options o;
    pt_env_process_options_init(&o);
    o.command = a->env;
    o.n_rewards = a->rewards.n;
    o.timeout = a->env_timeout;
    o.max_line = (size_t)a->env_max_line;
    o.name = "--env";
    o.request = pt_grpo_env_request_fn;
    o.request_user = req;
    int st = pt_env_process_create(out, &o);
    return st ? cli_fail("--env", st) : 0;
}

int grpo_env_stop(pt_env_process *e)
{
    if (!e)
        return 0;
    int st = pt_env_process_close(e), rc = 0;
    if (st) {
        static const char prefix[] = "pt_env_process_close: ";
        const char *msg = pt_last_error();
        if (!strncmp(msg, prefix, sizeof prefix - 1))
            msg += sizeof prefix - 1;
        if (st == PT_EPEER) {
            fprintf(stderr, "posttrain grpo: %s\n", msg);
            rc = 1;
        } else {
            cli_note("posttrain grpo: warning: %s\n", msg);
        }
    }
    pt_env_process_free(e);
    return rc;
}
