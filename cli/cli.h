/* The posttrain command-line program: shared helpers for its subcommands. */
#ifndef PT_CLI_H
#define PT_CLI_H

#include "posttrain/posttrain.h"

#include <stdio.h>

/* Each subcommand gets argv with argv[0] = its own name; returns an exit code. */
typedef int (*cli_cmd_fn)(int argc, char **argv);

/* Print "posttrain: <what>: <status name>: <last error>" to stderr; returns 1. */
int cli_fail(const char *what, int status);
/* Print a usage error to stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse a whole decimal integer or number; return 0 on success. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *s, double *out);

/* Shared by the training commands (cli_common.c).  cli_optimizer_option
 * handles --optimizer, --schedule, --warmup-steps, --lr, --beta1, --beta2,
 * --eps, --momentum, --weight-decay, --max-grad-norm and --min-lr-ratio:
 * returns 1 when `key` is one of them (*rc is then 0, or the exit code of
 * the usage error it printed), 0 otherwise. */
int cli_optimizer_option(pt_optimizer_options *o, const char *cmd, const char *key, const char *val, int *rc);
void cli_optimizer_usage(FILE *f, const char *default_lr);
/* q,k,v,o,gate,up,down,all (or the *_proj names), comma-separated; 0 on success. */
int cli_parse_lora_targets(unsigned *out, const char *list);
/* A non-negative decimal seed; 0 on success. */
int cli_parse_seed(const char *s, uint64_t *out);
/* Monotonic seconds. */
double cli_now(void);

/* In a command's option loop, with the option name in `k`, its value in `v`
 * and a `long n` in scope: when k is opt, parse an integer in [lo, hi] into
 * dst and continue the loop, or return the usage error naming cmd. */
#define CLI_INT_OPTION(cmd, opt, lo, hi, dst)                                                \
    if (!strcmp(k, opt)) {                                                                 \
        if (cli_parse_long(v, lo, hi, &n))                                                 \
            return cli_usage_error(cmd, "%s needs an integer in [%ld, %ld], not '%s'", opt, \
                                   (long)(lo), (long)(hi), v);                             \
        dst = n;                                                                           \
        continue;                                                                          \
    }
/* Add LoRA adapters of `rank` (alpha: 0 means rank; targets: 0 means the
 * library's default) seeded by seed, and say so naming `cmd`; returns 0, or
 * 1 after printing the failure. */
int cli_add_lora(const char *cmd, pt_model *model, int rank, double alpha, unsigned targets,
                 uint64_t seed);
/* End of a training command: with LoRA, write the PEFT adapter to OUT/adapter
 * and merge it; then save the model in Hugging Face layout to OUT.  Messages
 * name `cmd`; returns 0, or 1 after printing the failure. */
int cli_save_trained(const char *cmd, pt_model *model, const char *out, const char *base_name,
                     long long steps);

int cmd_version(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_sft(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_grpo(int argc, char **argv);

#endif
