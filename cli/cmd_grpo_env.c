/* posttrain grpo --env CMD: the episode engine's environment as a process,
 * a thin user of the library's pt_env_process (posttrain/env.h,
 * docs/cli-grpo.md).  The library starts CMD, exchanges one JSON line per
 * turn with it under --env-timeout and --env-max-line, and ends its process
 * group; this file adds the command's fields to every request (the step,
 * the episode and group numbered across the ranks, the prompt's row) and
 * turns the library's statuses into the command's messages. */
#include "cmd_grpo.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct grpo_env {
    pt_env_process *proc;
    const grpo_env_ctx *ctx; /* the round being played */
    char *fields;            /* the last request's fields (outlive the hook) */
};

/* The request hook: {"step", "episode", "group", "row"} of this turn. */
static int request_fields(const char **json, const pt_env_turn *turn, void *user)
{
    grpo_env *e = user;
    const grpo_env_ctx *c = e->ctx;
    const int local_group = (int)turn->group;
    pt_prompt_row row;
    pt_prompt_row_init(&row);
    pt_prompt_rows_get(&row, c->rows, c->group_row[local_group]);
    cJSON *q = cJSON_CreateObject(), *rj = row.json ? cJSON_Parse(row.json) : NULL;
    bool ok = q && cJSON_AddNumberToObject(q, "step", (double)c->step) &&
              cJSON_AddNumberToObject(q, "episode", (double)(c->first_episode + turn->episode)) &&
              cJSON_AddNumberToObject(q, "group", (double)(c->first_group + local_group)) && rj &&
              cJSON_AddItemToObject(q, "row", rj);
    if (!ok)
        cJSON_Delete(rj);
    free(e->fields);
    e->fields = ok ? cJSON_PrintUnformatted(q) : NULL;
    cJSON_Delete(q);
    *json = e->fields;
    return e->fields ? 0 : 1;
}

int grpo_env_start(grpo_env **out, const char *cmd, int n_rewards, double timeout, size_t max_line)
{
    *out = NULL;
    grpo_env *e = calloc(1, sizeof *e);
    if (!e) {
        fprintf(stderr, "posttrain grpo: out of memory\n");
        return 1;
    }
    /* the library needs no SIGPIPE setting; the command's own output keeps
     * today's behaviour (a closed stdout is a write error, not a signal) */
    signal(SIGPIPE, SIG_IGN);
    pt_env_process_options o;
    pt_env_process_options_init(&o);
    o.command = cmd;
    o.n_rewards = n_rewards;
    o.timeout = timeout;
    o.max_line = max_line;
    o.name = "--env";
    o.request = request_fields;
    o.request_user = e;
    int st = pt_env_process_create(&e->proc, &o);
    if (st) {
        free(e);
        return cli_fail("--env", st);
    }
    *out = e;
    return 0;
}

int grpo_env_stop(grpo_env *e)
{
    if (!e)
        return 0;
    int st = pt_env_process_close(e->proc), rc = 0;
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
    pt_env_process_free(e->proc);
    free(e->fields);
    free(e);
    return rc;
}

const char *grpo_env_failure(const grpo_env *e)
{
    return e ? pt_env_process_failure(e->proc) : NULL;
}

int grpo_env_call(pt_env_reply *reply, const pt_env_turn *turn, void *payload)
{
    const grpo_env_ctx *c = payload;
    c->env->ctx = c;
    return pt_env_process_call(reply, turn, c->env->proc);
}
