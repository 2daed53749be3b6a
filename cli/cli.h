/* The posttrain command-line program: shared helpers for its subcommands. */
#ifndef PT_CLI_H
#define PT_CLI_H

#include "posttrain/posttrain.h"

#include "cli_opts.h"

#include <cjson/cJSON.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Each subcommand gets argv with argv[0] = its own name; returns an exit code. */
typedef int (*cli_cmd_fn)(int argc, char **argv);

/* Print "posttrain: <what>: <status name>: <last error>" to stderr; returns 1. */
int cli_fail(const char *what, int status);
/* After a failure that needed the model's tokenizer: when the model has none
 * but its directory holds a tokenizer.json, say why that file was not loaded
 * (an unsupported type, a malformed file). */
void cli_explain_tokenizer(const char *cmd, const char *model_dir, const pt_model *model);
/* Print "posttrain CMD: <message> (see 'posttrain CMD --help')" to stderr
 * (without CMD when it is NULL); returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse a whole decimal number; return 0 on success. */
int cli_parse_double(const char *s, double *out);

/* Monotonic seconds. */
double cli_now(void);
/* The next value of the splitmix64 sequence at *state (the demo's problems
 * and the grpo prompt order; seeded streams that must stay as they are). */
uint64_t cli_splitmix(uint64_t *state);

/* ---- shared by the training commands (cli_common.c) ---- */

/* The optimizer options but --lr (whose default differs by command), as
 * offsets into a pt_optimizer_options: --optimizer, --beta1, --beta2, --eps,
 * --momentum, --weight-decay, --max-grad-norm, --schedule, --warmup-steps,
 * --min-lr-ratio. */
extern const cli_opt cli_optimizer_opts[];
extern const size_t cli_n_optimizer_opts;

/* LoRA: --lora-rank, --lora-alpha, --lora-targets, as offsets into cli_lora_args. */
typedef struct cli_lora_args {
    int rank;       /* 0: full fine-tuning */
    double alpha;   /* 0: the rank */
    unsigned targets; /* PT_LORA_* bits; 0: the library's default */
} cli_lora_args;
extern const cli_opt cli_lora_opts[];
extern const size_t cli_n_lora_opts;
/* The usage error of --lora-alpha or --lora-targets without --lora-rank; 0 when fine. */
int cli_check_lora(const char *cmd, const cli_lora_args *l);
/* Add the LoRA adapters of l seeded by seed, and say so naming `cmd`;
 * returns 0, or 1 after printing the failure. */
int cli_add_lora(const char *cmd, pt_model *model, const cli_lora_args *l, uint64_t seed);

/* Create the output directory DIR (it may exist); 0, or 1 after the message. */
int cli_make_out_dir(const char *cmd, const char *dir);
/* Open the metrics file: `path`, or OUT/metrics.jsonl when it is NULL, with
 * fopen's mode; NULL after the message. */
FILE *cli_open_metrics(const char *cmd, const char *path, const char *out, const char *mode);
/* End of a training command: with LoRA, write the PEFT adapter to OUT/adapter
 * and merge it; then save the model in Hugging Face layout to OUT.  Messages
 * name `cmd`; returns 0, or 1 after printing the failure. */
int cli_save_trained(const char *cmd, pt_model *model, const char *out, const char *base_name,
                     long long steps);
/* The end of a training command: the metrics file as OUT/metrics.svg (or
 * wherever svg says), then "posttrain CMD: plot: SVG" on stderr; a failure is
 * only a warning line (the run has succeeded).  Returns the status (cmd_plot.c). */
int cli_plot_metrics(const char *cmd, const char *metrics, const char *svg);

/* ---- checkpoints of the training commands (cli_common.c) ---- */

/* A checkpoint's host JSON (the "host" object of its trainer_state.json):
 * {"command": CMD, "step": STEP, "seed": "SEED" (a decimal string: cJSON
 * keeps numbers as doubles, strings exactly), "model": the resolved path of
 * model_dir, "lora": {"rank", "alpha", "targets"} when m has adapters}, to
 * which the command adds its own fields (what `posttrain export --checkpoint`
 * rebuilds the model from, and what --resume continues from).  NULL after
 * the message. */
cJSON *cli_host_new(const char *cmd, long long step, uint64_t seed, const char *model_dir, const pt_model *m);
/* Write the checkpoint OUT/checkpoints/step-NNNNNNNN of `step` with `host`
 * (pt_checkpoint_save: weights, optimizer moments, schedule) and say so.
 * 0, or 1 after the message. */
int cli_checkpoint_save(const char *cmd, const char *out, const pt_model *m, pt_optimizer *o, const cJSON *host,
                        long long step);
/* Load the checkpoint `dir` into m (whose LoRA adapters, if any, are added
 * already) and o: *host gets its host JSON (free with cJSON_Delete), *step
 * its step.  A checkpoint of another command or without a step is refused;
 * a different seed is a warning naming both.  0, or 1 after the message. */
int cli_checkpoint_resume(cJSON **host, long long *step, const char *cmd, pt_model *m, pt_optimizer *o,
                          const char *dir, uint64_t seed);
/* An integer field of a host JSON object: a whole JSON number (exact below
 * 2^53; older checkpoints) or a string of decimal digits (exact).  0 with *v
 * set, or -1 when it is missing or not such a value. */
int cli_json_i64(long long *v, const cJSON *obj, const char *key);
int cli_json_u64(uint64_t *v, const cJSON *obj, const char *key);

/* ---- outputs against inputs and earlier runs (cli_out.c) ---- */

/* Refuse (usage error, 2) an output path that is, or lies inside, or holds,
 * an input path: compared as resolved paths and by st_dev/st_ino; the
 * message names both options.  0 when they are apart or either is NULL. */
#define CLI_ALLOW_IN_INSIDE_OUT 1u /* the input may lie inside the output directory */
#define CLI_ALLOW_OUT_INSIDE_IN 2u /* the output may lie inside the input directory */
int cli_check_disjoint(const char *cmd, const char *out_opt, const char *out, const char *in_opt,
                       const char *in, unsigned allow);

/* A training command's hold on its --out directory. */
typedef struct cli_out {
    int lock_fd;
    char resume[4096];  /* --resume auto: the latest OUT/checkpoints/step-N, or "" */
    char metrics[4096]; /* cli_out_start: --metrics, or OUT/metrics.jsonl */
} cli_out;
#define CLI_OUT_CONTINUE 1u   /* --resume DIR: the run continues what OUT holds */
#define CLI_OUT_OVERWRITE 2u  /* --overwrite: replace an earlier run */
#define CLI_OUT_AUTO 4u       /* --resume auto: continue from the latest checkpoint */
#define CLI_OUT_CAN_RESUME 8u /* the command has --resume (for the message) */
/* Create OUT, lock OUT/.posttrain.lock for the run (a second run on it
 * fails), remove half-written checkpoint and file names a killed run left,
 * and refuse an OUT (or a non-empty `metrics` file) an earlier run used
 * unless `flags` continue or replace it (--overwrite removes OUT/checkpoints
 * and OUT/adapter).  0, else the exit code after the message. */
int cli_out_begin(cli_out *o, const char *cmd, const char *out, const char *metrics, unsigned flags);
void cli_out_end(cli_out *o);
/* A checkpoint in OUT/checkpoints past `step` (a resumed run would collide
 * with it): 1 after the message, else 0. */
int cli_out_check_later(const char *cmd, const char *out, long long step);
/* Keep the rows of the metrics file at `path` up to `step` (dropping later
 * ones and a row a kill cut short), rewritten atomically; a missing file is
 * fine.  0, or 1 after the message. */
int cli_metrics_trim(const char *cmd, const char *path, long long step);
/* The start of a training command with --resume and --overwrite, before
 * anything is written: --resume and --overwrite together are a usage error;
 * --out and --metrics may not be, hold or lie inside --model, --data or
 * --resume (cli_check_disjoint; --resume may lie inside --out); then
 * cli_out_begin, with o->metrics set to the metrics path.  --resume auto
 * becomes the latest checkpoint in OUT/checkpoints (*resume points to
 * o->resume) or, when OUT holds no run, NULL (a fresh start), and says
 * which.  0, else the exit code after the message. */
int cli_out_start(cli_out *o, const char *cmd, const char *out, const char *metrics, const char *model,
                  const char *data, const char **resume, bool overwrite);
/* A run resumed at `step`: refuse a later checkpoint in OUT/checkpoints
 * (cli_out_check_later), keep the metrics rows up to `step`
 * (cli_metrics_trim of o->metrics).  0, or 1 after the message. */
int cli_out_resumed(const cli_out *o, const char *cmd, const char *out, long long step);

int cmd_version(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_sft(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_grpo(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_export(int argc, char **argv);

#endif
