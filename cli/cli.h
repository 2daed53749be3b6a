/* The posttrain command-line program: shared helpers for its subcommands. */
#ifndef PT_CLI_H
#define PT_CLI_H

#include "posttrain/posttrain.h"

#include "cli_opts.h"

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
/* A model that has no tokenizer where `cmd` needs one: say why (a GGUF file
 * without tokenizer metadata, a directory without tokenizer.json, or what is
 * wrong with its tokenizer.json: a kind this build cannot run), then `need`
 * (what to do instead).  Returns 1, the exit code. */
int cli_no_tokenizer(const char *cmd, const char *model_dir, const char *need);
/* Print "posttrain CMD: <message> (see 'posttrain CMD --help')" to stderr
 * (without CMD when it is NULL); returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parse a whole decimal number; return 0 on success. */
int cli_parse_double(const char *s, double *out);

/* Monotonic seconds (the library's clock, pt_now). */
#define cli_now() pt_now()

/* ---- shared by the training commands (cli_common.c) ---- */

/* The checkpoint and output options of sft and grpo (--out is the
 * command's own entry): cli_run_opts, offsets into a cli_run_args
 * (cli_out.c).  CLI_RUN_ARGS_FIELDS lets a command's args hold them both
 * as `run` and by their names (an anonymous union). */
#define CLI_RUN_ARGS_FIELDS                                                                                    \
    const char *out, *resume, *metrics; /* --out, --resume (a checkpoint, "auto" or NULL), --metrics */       \
    int save_every, log_every, max_skipped, quantize; /* save_every: steps, 0, or CLI_SAVE_AUTO */           \
    int64_t keep_last, keep_every;                                                                             \
    bool overwrite, bf16, grad_ckpt, fp32_acts, bf16_acts;
typedef struct cli_run_args {
    CLI_RUN_ARGS_FIELDS
} cli_run_args;
#define CLI_N_RUN_OPTS 13
/* The usage error of a command whose run options contradict each other
 * (--fp32-activations with --bf16-activations), 0 otherwise. */
int cli_check_run(const char *cmd, const cli_run_args *r);
/* --gradient-checkpointing, --fp32-activations and --bf16-activations on
 * the run's context; a pt status. */
int cli_run_context(pt_context *ctx, const cli_run_args *r);
extern const cli_opt cli_run_opts[CLI_N_RUN_OPTS];
/* A command's wording of the shared options: tab gets cli_run_opts with
 * the help (and the default, when given) of each entry of `own` in place
 * of those of the entry of its name. */
void cli_run_opts_with(cli_opt tab[CLI_N_RUN_OPTS], const cli_opt *own, size_t n_own);

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

/* --bf16: pt_model_set_bf16(model, mode) with a note of the CPU and the
 * kernel path (whether products are BF16 or widened).  0, or 1 after the
 * message. */
int cli_set_bf16(const char *cmd, pt_model *model, int mode);
/* pt_model_load_dir with pt_model_load_options.bf16 = bf16_mode (a base
 * that will be frozen in BF16 is read straight into BF16) and .quantize =
 * quantize (a pt_quantize; the two are exclusive: PT_EINVAL). */
int cli_load_model(pt_model **out, const char *path, int bf16_mode, int quantize);

/* Back to the weights a run started from (pt_run_reload_model): model_dir
 * loaded again, with the LoRA adapters of l seeded by seed as cli_add_lora
 * made them, and copied into m's tensors (m keeps its contexts and
 * generators).  0, or 1 after the message. */
int cli_reload_start(const char *cmd, pt_model *m, const char *model_dir, const cli_lora_args *l, uint64_t seed);
/* The metrics rows of the run cli_job_out_start opened (rank 0; cli_out.c): a
 * command prints one row (one JSON object) into the stream
 * cli_open_metrics gives, then cli_metrics_row hands it to pt_run_log (which
 * adds "time") and gives *f a fresh stream; when the write failed (a full
 * disk: the file is cut back to its last whole row) it says so naming the
 * file and sets *f to NULL (no later row is written; the run goes on).
 * cli_metrics_close frees the stream.  NULL after the message. */
FILE *cli_open_metrics(const char *cmd);
void cli_metrics_row(const char *cmd, FILE **f);
void cli_metrics_close(FILE **f);
/* Consecutive optimizer updates skipped as non-finite: cli_skip_guard
 * counts an update (pt_run_skip_guard) and, when `max`
 * (--max-skipped-steps; 0: never) of them follow one another, says why the
 * run stops and returns 1; else 0. */
int cli_skip_guard(const char *cmd, pt_run_skips *k, int reason, long long step, int max, double lr);
/* The end of a training command: the metrics file as OUT/metrics.svg (or
 * wherever svg says), then "posttrain CMD: plot: SVG" on stderr; a failure is
 * only a warning line (the run has succeeded).  Returns the status (cmd_plot.c). */
int cli_plot_metrics(const char *cmd, const char *metrics, const char *svg);

/* ---- checkpoints of the training commands (cli_common.c) ---- */

typedef struct cli_out cli_out;

/* A checkpoint's host JSON is the run state (pt_run_state: step, seed, data
 * position, RNG states) and the command's own fields
 * (docs/run-directory.md).  cli_host_new: those every training host
 * records (pt_run_host_model: the resolved model_dir, m's LoRA options),
 * a JSON object's text to which the command adds its own (free with
 * pt_free).  NULL after the message. */
char *cli_host_new(const char *cmd, const char *model_dir, const pt_model *m);
/* Write the checkpoint OUT/checkpoints/step-NNNNNNNN of state->step with
 * the command's fields `host` (a JSON object's text; pt_run_save: weights,
 * optimizer moments, schedule, the state) and say so.  Rank 0 only.  0, or
 * 1 after the message. */
int cli_checkpoint_save(const char *cmd, cli_out *o, const pt_model *m, pt_optimizer *opt,
                        const pt_run_state *state, const char *host);

/* ---- outputs against inputs and earlier runs (cli_out.c) ---- */

/* Refuse (usage error, 2) an output path that is, or lies inside, or holds,
 * an input path (pt_run_check_output; `tree`: each file of the directory
 * `in` too); the message names both options.  0 when they are apart or
 * either is NULL. */
int cli_check_disjoint(const char *cmd, const char *out_opt, const char *out, const char *in_opt, const char *in,
                       bool tree);

/* A training command's run (pt_run: on every rank of a job, rank 0 holding --out). */
struct cli_out {
    pt_run *run; /* its metrics file (--metrics, or OUT/metrics.jsonl): pt_run_metrics_path */
    int64_t keep_last, keep_every; /* --keep-last, --keep-every (set before cli_job_out_start) */
};
void cli_out_end(cli_out *o);
/* "posttrain CMD: WHAT: MESSAGE" for a failed pt_run call (without "WHAT: "
 * when what is NULL); 1. */
int cli_run_fail(const char *cmd, const char *what);

/* ---- data-parallel runs of the training commands (cli_dist.c) ---- */

/* This process's rank and the job's size (0 and 1 until cli_job_begin):
 * informational messages are printed by rank 0 only (cli_note), errors by
 * the rank that has them (cli_fail names the rank in a job of several). */
extern int cli_rank, cli_nranks;
/* fprintf(stderr, ...) on rank 0 only. */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The options sft and grpo share for data-parallel runs, silent data
 * corruption and goodput: --dist-timeout, --sdc-every, --sdc-action,
 * --mtbf-hours (offsets into cli_dist_args). */
typedef struct cli_dist_args {
    double timeout;     /* --dist-timeout: seconds; 0: no deadline */
    int sdc_every;      /* --sdc-every: steps; 0: off */
    int sdc_action;     /* PT_RUN_ROLLBACK or PT_RUN_STOP */
    double mtbf_hours;  /* --mtbf-hours (with --save-every auto); 0: unset */
} cli_dist_args;
extern const cli_opt cli_dist_opts[];
extern const size_t cli_n_dist_opts;
/* --save-every auto (its parser is cli_run_opts'). */
#define CLI_SAVE_AUTO (-1)
/* The usage errors of --save-every auto without --mtbf-hours and the other
 * way round; 0 when fine. */
int cli_check_dist(const char *cmd, const cli_dist_args *d, int save_every);

/* A training command's job: its ranks (pt_dist, backend auto), its goodput
 * accountant and its run, which holds the checkpoint policy, the rollback
 * point and the replica checks. */
typedef struct cli_job {
    const char *cmd;
    cli_dist_args args;
    pt_dist *dist;
    pt_goodput *gp;
    int rank, size;
    int save_every;           /* steps between checkpoints; 0: none; CLI_SAVE_AUTO until the first */
    pt_run *run;              /* the run (cli_job_out_start) */
    int flip_rank;            /* POSTTRAIN_TEST_FLIP_BIT=RANK:STEP, or -1 */
    long long flip_step;
} cli_job;

/* Start the goodput clock (and its startup section), then join the job
 * (pt_dist_create with --dist-timeout) and set cli_rank / cli_nranks.  0,
 * or 1 after the message. */
int cli_job_begin(cli_job *j, const char *cmd, const cli_dist_args *a, int save_every);
/* Free the job (collective unless it failed) and the accountant. */
void cli_job_end(cli_job *j);
/* End the open goodput section, if any, and open one of `kind` (-1: none). */
#define cli_job_section(j, kind) ((void)pt_goodput_switch((j)->gp, (kind)))
/* Every rank's exit code `rc` (0, 1, 2) after cli_job_out_start
 * (pt_run_agree): 0 when all are 0; else this rank's own code when it
 * failed (it printed why), or the first failed rank's (rank 0 says which
 * rank failed during `what`).  A job that cannot agree (PT_EPEER) is 1
 * after the message. */
int cli_job_agree(cli_job *j, int rc, const char *what);
/* The start of a training command, before anything is written, on every
 * rank (cli_out.c): --resume and --overwrite together are a usage error;
 * then pt_run_open of --out with --metrics, --model and --data as inputs,
 * the job, its goodput accountant and its options (collective: rank 0
 * locks OUT/.posttrain.lock and the metrics file, removes a killed run's
 * leftovers, refuses a used --out unless --resume or --overwrite is given;
 * the others follow).  --resume auto becomes the latest checkpoint in
 * OUT/checkpoints (*resume points into the run) or, when OUT holds no run,
 * NULL (a fresh start), and rank 0 says which.  Rank 0's exit code is
 * every rank's (2 for a usage error); j->run is the run. */
int cli_job_out_start(cli_job *j, cli_out *o, const char *out, const char *metrics, const char *model,
                      const char *data, const char **resume, bool overwrite);
/* This rank's share [*begin, *begin + *count) of n items (rows of a
 * micro-batch, prompt groups); fewer items than ranks is a usage error (2)
 * naming both numbers and `what` ("--batch-size"), printed by rank 0. */
int cli_job_shard(cli_job *j, int64_t *begin, int64_t *count, int64_t n, const char *what);
/* The test hook POSTTRAIN_TEST_FLIP_BIT=RANK:STEP: on that rank, after that
 * step, flip one bit of the first trainable weight (once per process). */
void cli_job_flip_hook(cli_job *j, pt_model *m, long long step);
/* The time of one step: `seconds` in all, `comm` of it at collectives
 * (wait), `gen` of it generating (generate); the rest is step time. */
#define cli_job_step_time(j, seconds, comm, gen) ((void)pt_run_step_time((j)->run, (seconds), (comm), (gen)))
/* How a training command goes back: `restart` to its start (the weights it
 * started from, a new optimizer, the data at its beginning), `apply` to a
 * checkpoint's state (s, the command's host fields as JSON text, its directory);
 * each 0, or 1 after the message. */
typedef struct cli_back {
    void *run;
    int (*restart)(void *run);
    int (*apply)(void *run, const pt_run_state *s, const char *host, const char *dir);
} cli_back;
/* After `step` of `total`: pt_run_step_end with save(b->run) as the
 * checkpoint; after a replica mismatch every rank rolls back
 * (pt_run_rollback, then b->restart or b->apply: the caller's loop goes on
 * from the step it restored).  0, or the exit code after the message. */
int cli_job_step_end(cli_job *j, cli_out *o, pt_model *m, pt_optimizer *opt, const cli_back *b,
                     int (*save)(void *run), long long step, long long total);
/* --resume DIR (cli_common.c): weights, optimizer moments and schedule
 * from the checkpoint (pt_run_load on every rank: a later checkpoint, one
 * of another command or without a step is refused; a different `seed` is
 * a warning naming both), then the command's b->apply with its host
 * fields; rank 0 keeps the metrics rows up to its step (the rows after it
 * are the work this run redoes: lost goodput); the goodput totals it
 * recorded are restored, the lost time noted.  *step gets the
 * checkpoint's step.  0, or 1 after the message. */
int cli_job_resume(cli_job *j, cli_out *o, pt_model *m, pt_optimizer *opt, const char *dir, uint64_t seed,
                   const cli_back *b, int64_t *step);
/* The end of a successful run after `step` (cli_out.c): commit, then on
 * rank 0 the goodput line on stderr and the final metrics row {"step":
 * STEP, "goodput": {"goodput": G, "wall": S, "seconds/KIND": S for every
 * pt_time_kind, "pending", "steps_kept", "steps_lost", "ranks"}} (readers
 * that want the step rows skip it), the plot OUT/metrics.svg, and the
 * failure of a metrics file that lost rows (the model is saved by then).
 * Returns the exit code. */
int cli_job_finish(cli_job *j, const cli_out *o, FILE **metrics, const char *out, long long step);
/* A new optimizer over m in *opt (the old one freed), attached to the job
 * when it has several ranks (a job of one trains exactly as without one).
 * 0, or 1 after the message. */
int cli_job_optimizer(cli_job *j, pt_optimizer **opt, pt_model *m, const pt_optimizer_options *o);
/* The trained model in OUT (pt_run_save_final: with LoRA the PEFT adapter
 * in OUT/adapter, merged; written by rank 0, agreed by every rank) and the
 * messages naming the steps.  0, or 1. */
int cli_job_save_final(cli_job *j, pt_model *m, const char *out, const char *base, long long steps,
                       long long skipped);

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
/* The model of eval, generate and export: cli_load_model (--bf16: frozen in BF16)
 * and cli_set_bf16, then the PEFT adapter when there is one; failures named
 * cmd / load / adapter.  0, or 1 after the message (cmd_generate.c). */
int cli_open_model(pt_model **out, const char *cmd, const char *path, bool bf16, int quantize,
                   const char *adapter, const char *load, const char *adapter_what);

#endif
