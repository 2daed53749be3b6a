/* The environment process (posttrain/env.h): the object shared by
 * env_process.c (spawning, waiting, ending its group) and env_process_io.c
 * (the request and reply lines).  Not installed. */
#ifndef PT_ENV_PROCESS_INTERNAL_H
#define PT_ENV_PROCESS_INTERNAL_H

#include "posttrain/env.h"

#include <stdbool.h>
#include <sys/types.h>

struct pt_env_process {
    char *cmd;
    int n_rewards;
    double timeout;      /* seconds per request and per reply */
    size_t max_line;     /* bytes of a reply line */
    pt_env_request_fn request;
    void *request_user;
    /* how messages name it and its limits ("--env", "(--env-timeout)") */
    char name[64], hint_timeout[80], hint_max_line[80], hint_rewards[80];
    pid_t pid;           /* the shell, leader of the group; 0 once reaped */
    pid_t pgid;          /* its process group; 0 once ended */
    int in, out;         /* its stdin (a socket: we send), its stdout (a pipe: we read): non-blocking */
    bool dead;           /* it exited, stalled or a pipe failed: every call fails */
    bool closed;         /* pt_env_process_close ran */
    int dead_status;     /* PT_EIO or PT_EPEER */
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

/* The process is gone, or misbehaved: with `stalled`, end its group at
 * once; else give it 2 s to exit first.  Remembers why (with `status`) for
 * every later call. */
void pt__env_process_mark_dead(pt_env_process *p, const char *why, bool stalled, int status);

#endif
