/* posttrain grpo's shared parts: the parsed arguments (cmd_grpo.c parses
 * them and runs), the prompt rows and the rewards' list (cmd_grpo_data.c). */
#ifndef PT_CLI_CMD_GRPO_H
#define PT_CLI_CMD_GRPO_H

#include "cli.h"

#include <stdbool.h>
#include <stdint.h>

/* --stop-string, repeatable. */
#define GRPO_MAX_STOP_STRINGS 16

typedef struct grpo_args {
    const char *env;         /* --env CMD, or NULL */
    int env_rewards, max_turns, max_total_tokens;
    double env_timeout;      /* --env-timeout seconds (-1: unset) */
    int64_t env_max_line;    /* --env-max-line bytes (-1: unset) */
    const char *stop_strings[GRPO_MAX_STOP_STRINGS];
    int n_stop_strings;
    const char *model, *data, *chat_template;
    union { /* --out, the checkpoint and output options: a->run, or a->out, a->resume, ... */
        cli_run_args run;
        struct {
            CLI_RUN_ARGS_FIELDS
        };
    };
    const char *eval;        /* --eval: held-out prompt rows, or NULL */
    bool chat;
    pt_optimizer_options opt;
    pt_grpo_options grpo;
    pt_generate_options gen; /* max_new_tokens, temperature, top_k, top_p */
    /* --reward's list (max_new_tokens: --max-new-tokens), or --env's
     * env0 .. env<N-1>; their names */
    pt_builtin_rewards rewards;
    const char *reward_names[PT_GRPO_MAX_REWARD_FUNCS];
    int G, batch_prompts, num_iterations, threads;
    int eval_every, eval_samples; /* --eval-every (0: at the start and the end only), --eval-samples */
    cli_lora_args lora;
    cli_dist_args dist;
    int64_t steps;
    uint64_t seed;
} grpo_args;

/* The parser of --reward NAME[:W][,NAME[:W]...] (a CLI_CUSTOM option into
 * grpo_args' rewards and reward_names), which may be repeated: each item
 * is added. */
int grpo_parse_rewards(void *dst, const char *list, const char *cmd, const char *opt);
/* Read every row of `path` (--data when opt is NULL, else the option that
 * names it in messages, "--eval"); a malformed one is an error naming its
 * file and line.  0, or 1 after the message. */
int grpo_load_rows(pt_prompt_rows **out, const char *path, const char *opt, const grpo_args *a,
                   const pt_tokenizer *tok, const pt_chat_template *t);

/* Parse and check posttrain grpo's arguments into a (cmd_grpo_args.c): 0,
 * or the exit code of the usage error it printed (for cli_exit_code). */
int grpo_parse_args(grpo_args *a, int argc, char **argv);

/* ---- --env (cmd_grpo_env.c) ------------------------------------------------ */

/* The environment process of --env (the library's pt_env_process named
 * "--env"): /bin/sh -c CMD, stdin and stdout connected, stderr inherited,
 * in a process group of its own; SIGPIPE is ignored from then on (for the
 * command's own output).  Every request must be taken and every reply line
 * given within --env-timeout seconds, a reply line may hold at most
 * --env-max-line bytes, and every request has req's fields.  0, or 1 after
 * the message. */
int grpo_env_start(pt_env_process **out, const grpo_args *a, pt_grpo_env_request *req);
/* Close its stdin and wait for it (killed after 5 s), then end what is left
 * of its process group; frees e (may be NULL).  0, or 1 when it had to be
 * killed. */
int grpo_env_stop(pt_env_process *e);

#endif
