/* posttrain grpo's shared parts: the parsed arguments (cmd_grpo.c parses
 * them and runs), the prompt rows and the built-in rewards (cmd_grpo_data.c). */
#ifndef PT_CLI_CMD_GRPO_H
#define PT_CLI_CMD_GRPO_H

#include "cli.h"

#include <stdbool.h>
#include <stdint.h>

/* The built-in rewards. */
enum { REWARD_EXACT, REWARD_CONTAINS, REWARD_LENGTH };

typedef struct grpo_rewards {
    int n, kind[PT_GRPO_MAX_REWARD_FUNCS];
    double weight[PT_GRPO_MAX_REWARD_FUNCS];
    const char *name[PT_GRPO_MAX_REWARD_FUNCS];
} grpo_rewards;

typedef struct grpo_args {
    const char *model, *data, *out, *metrics, *chat_template;
    const char *resume;      /* --resume: a checkpoint directory, "auto", or NULL */
    bool chat, overwrite;
    pt_optimizer_options opt;
    pt_grpo_options grpo;
    pt_generate_options gen; /* max_new_tokens, temperature, top_k, top_p */
    grpo_rewards rewards;
    int G, batch_prompts, num_iterations, log_every, threads;
    int save_every;          /* steps, 0, or CLI_SAVE_AUTO */
    cli_lora_args lora;
    cli_dist_args dist;
    int64_t steps;
    uint64_t seed;
} grpo_args;

/* One prompt row. */
typedef struct grpo_row {
    int32_t *ids;          /* prompt ids (malloc) */
    int n_ids;
    char *answer;          /* NULL when the row has none */
} grpo_row;

/* The payload of grpo_builtin_reward. */
typedef struct reward_ctx {
    const grpo_args *a;
    const pt_tokenizer *tok;
    const grpo_row *rows;
    const int *group_row;      /* group id (prompt slot in the step) -> row */
} reward_ctx;

/* The parser of --reward NAME[:W][,NAME[:W]...] (a CLI_CUSTOM option into a
 * grpo_rewards), which may be repeated: each item is added. */
int grpo_parse_rewards(void *dst, const char *list, const char *cmd, const char *opt);
void grpo_free_rows(grpo_row *rows, int n);
/* Read every row of a->data; a malformed one is an error naming its line.
 * 0, or 1 after the message. */
int grpo_load_rows(grpo_row **out, int *n_out, const grpo_args *a, const pt_tokenizer *tok,
                   const pt_chat_template *t);
/* A pt_reward_fn for every built-in reward; payload is a reward_ctx. */
int grpo_builtin_reward(float *rewards, const pt_reward_batch *batch, void *payload);

#endif
