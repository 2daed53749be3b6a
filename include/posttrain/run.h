/*
 * libposttrain public API: the run layer (docs/run-directory.md).
 *
 * A training run's directory, state, checkpoints and metrics, shared by the
 * CLI (`posttrain sft`, `posttrain grpo`), the Python trainers and any host.
 * These are small objects the host drives: the host keeps its own loop and
 * calls into the run at the points it chooses (after a step: pt_run_log; when
 * pt_run_save_due says so: pt_run_save; once at the start: pt_run_load,
 * then pt_run_resumed).  What the run did that its user wants told comes
 * back as notes (pt_run_options.notes).
 *
 * The run directory DIR holds
 *     DIR/.posttrain.lock            the exclusive lock of the run (flock)
 *     DIR/metrics.jsonl              one JSON object a line (or opts.metrics)
 *     DIR/checkpoints/step-NNNNNNNN  complete checkpoints (pt_checkpoint_save),
 *                                    NNNNNNNN the step, 8 digits or more
 *     DIR/adapter/, DIR/...          what the host saves at the end
 *
 * The run state (pt_run_state) and the host's own fields are saved together
 * as ONE flat JSON object, the checkpoint's host JSON:
 *     "run_format": 1           the schema's version (absent in older checkpoints)
 *     "command":    KIND        the run's kind ("sft", "grpo", or the host's own)
 *     "step":       N           steps done (a JSON number; < 2^53)
 *     "optimizer_steps": "N"    optimizer updates done
 *     "epoch":      "N"         passes over the data started
 *     "cursor":     "N"         position in the pass (rows or prompts consumed)
 *     "rows":       "N"         rows (prompts) in the data set (older GRPO: "prompts")
 *     "seed":       "N"         the run's seed
 *     "order_rng":  "N"         the data-order RNG state at the pass start
 *     "rng":        "N"         the sampling RNG state
 *     ... the host's own keys (e.g. "model", "lora", "goodput", ...)
 * Values shown "N" are written as decimal strings (64-bit exact); a reader
 * accepts a whole JSON number too (older checkpoints, exact below 2^53).
 * The state's keys are reserved: a host key of the same name is PT_EINVAL.
 *
 * With a pt_dist (opts.dist), pt_run_open, pt_run_save, pt_run_load and
 * pt_run_rollback are collective: every rank calls them, rank 0 does the
 * directory's work, every rank gets the same outcome (PT_EPEER on the
 * others when one rank failed); pt_run_log writes on rank 0 only.
 *
 * Statuses: PT_EINVAL a bad argument or option (also: an output that overlaps
 * an input), PT_EBUSY the directory or metrics file is locked by another run,
 * PT_EEXIST the directory holds an earlier run (PT_RUN_NEW) or a checkpoint
 * past the resumed step, PT_ENOTFOUND no checkpoint to resume from, PT_ESTATE
 * a checkpoint of another kind, PT_EFORMAT a host JSON that is not a run
 * state, PT_EIO a failed read, write, lock or rename (naming the file).
 * Every message is in pt_last_error(); what the run does (leftovers removed,
 * the checkpoint resumed, metrics rows dropped) is logged at PT_LOG_INFO.
 *
 * A pt_run is not thread-safe: one host thread at a time.
 */
#ifndef POSTTRAIN_RUN_H
#define POSTTRAIN_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/dist.h"
#include "posttrain/goodput.h"
#include "posttrain/model.h"
#include "posttrain/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a run starts in its directory. */
typedef enum pt_run_start {
    PT_RUN_NEW = 0,         /* a directory holding an earlier run is refused (PT_EEXIST naming what it holds) */
    PT_RUN_OVERWRITE = 1,   /* an earlier run is replaced: DIR/checkpoints and DIR/adapter are removed,
                               the metrics file emptied */
    PT_RUN_RESUME_AUTO = 2, /* continue from the latest complete checkpoint; a fresh start when the
                               directory holds no run; PT_ENOTFOUND when it holds a run but no checkpoint */
    PT_RUN_RESUME_FROM = 3  /* continue from the checkpoint directory opts.resume_from */
} pt_run_start;
/* "new", "overwrite", "auto", "from"; NULL for another value.  from_name:
 * PT_EINVAL listing the names. */
PT_API const char *pt_run_start_name(int value);
PT_API int pt_run_start_from_name(int *out, const char *name);

/* An input of the run that its outputs (the directory, the metrics file)
 * must not destroy: an output may not be it, hold it, or lie inside it
 * (compared as resolved paths and by device and inode).  `tree`: a
 * directory whose files are checked one by one too (they may be symlinks
 * into elsewhere, as a Hugging Face cache's blobs).  `name` names it in
 * messages ("--model"). */
typedef struct pt_run_input {
    const char *name;
    const char *path;  /* NULL: skipped */
    bool tree;
} pt_run_input;

/* The check pt_run_open makes of its outputs, for another output of the
 * host (an exported model, a plot): PT_EINVAL naming out_name and
 * input->name when `out` is, holds or lies inside input->path (and, with
 * input->tree, any file of that directory).  PT_OK when either path is NULL. */
PT_API int pt_run_check_output(const char *out_name, const char *out, const pt_run_input *input);

/* A run's notes (pt_run_options.notes): `level` a pt_log_level (PT_LOG_INFO,
 * PT_LOG_WARN), `text` one line without a newline (valid during the call),
 * `user` the options' notes_user. */
typedef void (*pt_run_notes_fn)(int level, const char *text, void *user);

typedef struct pt_run_options {
    size_t size;                /* sizeof(pt_run_options) */
    const char *dir;            /* the run directory (created if missing; its parent must exist); required */
    const char *metrics;        /* the metrics file; NULL: DIR/metrics.jsonl */
    int start;                  /* pt_run_start; default PT_RUN_NEW */
    const char *resume_from;    /* PT_RUN_RESUME_FROM: the checkpoint directory (may lie inside dir) */
    const char *kind;           /* the run's kind, "sft", "grpo" or the host's own (1..63 of [a-z0-9_.-]);
                                   required.  A checkpoint of another kind is refused on resume */
    const pt_run_input *inputs; /* n_inputs inputs the outputs must not overlap */
    size_t n_inputs;
    const char *dir_name;       /* how messages name dir, metrics, resume_from: default "--out", */
    const char *metrics_name;   /*   "--metrics", "--resume" (the CLI's option names) */
    const char *resume_name;
    int64_t keep_last;          /* retention: keep the last K checkpoints ... */
    int64_t keep_every;         /* ... and those whose step is a multiple of N; the others are deleted
                                   after each successful save.  0 and 0 (default): keep all */
    int64_t save_every;         /* pt_run_save_due: a checkpoint every N steps (and at the last);
                                   0 (default): none */
    bool save_auto;             /* pt_run_save_due: the interval chosen by Young-Daly from the first
                                   checkpoint's cost and the steps' mean time (pt_run_note_step) */
    double mtbf_seconds;        /* with save_auto: the mean time between failures, > 0 */
    /* A data-parallel job (optional; docs/run-directory.md, "Jobs"): every
     * rank opens the run with the same options and the same `dist`; rank 0
     * holds the directory, the others follow.  Borrowed: it must outlive
     * the run. */
    pt_dist *dist;
    /* A goodput accountant (optional, borrowed): pt_run_save commits it and
     * records its totals as the host JSON's "goodput" (then a reserved key),
     * pt_run_load restores them with the lost seconds and steps,
     * pt_run_rollback rolls it back. */
    pt_goodput *goodput;
    /* Fault handling of a job (pt_run_check_due, pt_run_check): a replica
     * check every check_every steps (0, the default: none; nothing to check
     * in a job of one); on a mismatch, on_mismatch (a pt_run_action:
     * PT_RUN_ROLLBACK, the default, or PT_RUN_STOP); after max_rollbacks
     * rollbacks with no passing check between them (default 3) a mismatch
     * stops the run. */
    int64_t check_every;
    int on_mismatch;
    int max_rollbacks;
    /* A test hook of the replica checks (pt_run_test_flip): on rank
     * test_flip_rank after step test_flip_step; -1 (default): off. */
    int test_flip_rank;
    int64_t test_flip_step;
    /* The run's notes to its user (optional): on rank 0, during the call
     * that did it, each thing the run did that a user wants told, as the
     * CLI prints it after "posttrain CMD: " (docs/run-directory.md,
     * "Notes"): pt_run_open's choice of PT_RUN_RESUME_AUTO, pt_run_resumed's
     * step and lost goodput, pt_run_save's checkpoint and save_auto's
     * interval, pt_run_check's mismatch (after the step pt_run_step_time
     * counted) and what the run does next.  save_name names save_auto in
     * them (default "--save-every auto"), mismatch_name on_mismatch
     * (default "--sdc-action"). */
    pt_run_notes_fn notes;
    void *notes_user;
    const char *save_name;
    const char *mismatch_name;
} pt_run_options;
PT_API int pt_run_options_init(pt_run_options *o);

/* The run state: the same for SFT and GRPO, the CLI and Python. */
typedef struct pt_run_state {
    size_t size;              /* sizeof(pt_run_state) */
    int64_t step;             /* steps done */
    int64_t optimizer_steps;  /* optimizer updates done */
    int64_t epoch;            /* passes over the data started */
    int64_t cursor;           /* position in the pass */
    int64_t rows;             /* rows (prompts) of the data */
    uint64_t seed;            /* the run's seed */
    uint64_t order_rng;       /* the data-order RNG state at the pass start */
    uint64_t rng;             /* the sampling RNG state */
} pt_run_state;
/* All zero (a key missing from an older checkpoint reads as this). */
PT_API int pt_run_state_init(pt_run_state *s);

/* The host JSON of a checkpoint (the schema above) from a state, its kind
 * and the host's own fields (`host_extra`: a JSON object text, or NULL);
 * free *json with pt_free.  PT_EINVAL: a bad kind, host_extra not an object
 * or using a reserved key. */
PT_API int pt_run_state_to_json(char **json, const pt_run_state *state, const char *kind,
                                const char *host_extra);
/* The other way: *state (init first), *kind (may be NULL; free with pt_free;
 * "" when the JSON names none) and *host_extra (may be NULL; the object of
 * the keys that are not the state's, "{}" when none; free with pt_free).
 * Reads what the CLI wrote before the run layer too ("prompts" for "rows").
 * PT_EFORMAT: not a JSON object, no "step", or a state key that is not a
 * non-negative integer. */
PT_API int pt_run_state_from_json(pt_run_state *state, char **kind, char **host_extra, const char *json);
/* The host fields every trainer (the CLI's sft and grpo, Python's
 * SFTTrainer and GRPOTrainer) records of the model it trains, what
 * `posttrain export --checkpoint` rebuilds the model from: the JSON object
 * text {"model": model_dir resolved (realpath; as given when that fails;
 * "" for NULL), "lora": {"rank", "alpha", "targets": the PT_LORA_* bits}
 * when model has adapters}; free *json with pt_free.  A host adds its own
 * fields and passes it as pt_run_save's host_extra. */
PT_API int pt_run_host_model(char **json, const char *model_dir, const pt_model *model);

typedef struct pt_run pt_run;

/* Open a run: check the outputs against the inputs (and resume_from), create
 * dir, take the locks (DIR/.posttrain.lock and the metrics file: a second
 * open of either is PT_EBUSY), remove a killed run's half-written names
 * (DIR/.*.tmp.*, checkpoints/step-*.tmp-*, adapter/...), then apply
 * opts.start (above) and resolve PT_RUN_RESUME_AUTO.  Nothing of an earlier
 * run is changed on error.  Without resuming, the metrics file is emptied. */
PT_API int pt_run_open(pt_run **out, const pt_run_options *opts);
/* Release the locks; an empty metrics file the run created is removed.
 * Accepts NULL. */
PT_API void pt_run_close(pt_run *run);

/* The checkpoint the run continues from, or NULL for a fresh start
 * (PT_RUN_RESUME_AUTO resolved). */
PT_API const char *pt_run_resume_dir(const pt_run *run);
/* The run directory and the metrics file's path. */
PT_API const char *pt_run_dir(const pt_run *run);
PT_API const char *pt_run_metrics_path(const pt_run *run);
/* The last complete checkpoint (resumed or saved by this run), or NULL. */
PT_API const char *pt_run_last_checkpoint(const pt_run *run);

/* Resume: load pt_run_resume_dir into model and opt (pt_checkpoint_load),
 * *state from its host JSON (pt_run_state_init it first) and *host_extra
 * (may be NULL; free with pt_free).  PT_ESTATE when there is nothing to
 * resume or the checkpoint is of another kind (naming both); PT_EEXIST when
 * DIR/checkpoints holds a checkpoint past its step (it would be
 * overwritten).  Then the metrics file keeps its rows up to the step (rows
 * past it, a row cut short, and a finished run's "goodput" row are dropped;
 * rewritten atomically, still locked); the dropped step rows' "step_seconds"
 * sum and count are pt_run_lost_seconds and pt_run_lost_steps. */
PT_API int pt_run_load(pt_run_state *state, char **host_extra, pt_run *run, pt_model *model,
                       pt_optimizer *opt);
/* The same without a pt_run: load the checkpoint `dir` of kind `kind` (NULL:
 * any).  For the ranks of a job other than the one holding the run, and for
 * a rollback. */
PT_API int pt_run_load_checkpoint(pt_run_state *state, char **host_extra, pt_model *model, pt_optimizer *opt,
                                  const char *dir, const char *kind);
/* The host has applied the state pt_run_load gave (its data position, its
 * own fields): the notes of the resume, "resumed at step STEP from DIR" and
 * the goodput the relaunch lost (pt_run_relaunch_seconds,
 * pt_run_lost_steps).  PT_ESTATE when the run starts fresh. */
PT_API int pt_run_resumed(pt_run *run, int64_t step);
/* Keep the metrics rows up to `step` as pt_run_load does (after a rollback
 * to the checkpoint of `step`); the lost getters then count the rows
 * dropped. */
PT_API int pt_run_trim_metrics(pt_run *run, int64_t step);
PT_API double pt_run_lost_seconds(const pt_run *run);
PT_API int64_t pt_run_lost_steps(const pt_run *run);
/* After pt_run_load: the wall time from the replaced run's last metrics row
 * (its latest "time") to this run's pt_run_open: the stall before it died
 * (a watchdog's deadline, a hung peer) and the gap before the relaunch, which
 * no row records.  0 when the file holds no timed row (or the clocks went
 * backwards).  With a goodput accountant the run adds it, with the lost
 * seconds, to the restored totals as PT_TIME_LOST (and wall time). */
PT_API double pt_run_relaunch_seconds(const pt_run *run);

/* Save: the checkpoint DIR/checkpoints/step-NNNNNNNN of state->step
 * (pt_checkpoint_save, atomic; PT_ESTATE if it exists), then retention
 * (keep_last / keep_every), then fsync of the metrics file.  host_extra: the
 * host's own fields (a JSON object text, or NULL).  Its duration is the
 * checkpoint cost save_auto uses. */
PT_API int pt_run_save(pt_run *run, const pt_model *model, pt_optimizer *opt, const pt_run_state *state,
                       const char *host_extra);

/* Append one row to the metrics file: `row_json` is one JSON object (no
 * newline inside; it must not hold "time"); the row written is that object
 * with "time" (Unix seconds, a double) added at its end, and a newline.  A
 * failed write is PT_EIO naming the file, the file cut back to its last
 * whole row (PT_ENOSPC for a full disk); later calls then fail at once. */
PT_API int pt_run_log(pt_run *run, const char *row_json);
/* The rows written by this run so far. */
PT_API int64_t pt_run_rows(const pt_run *run);
/* Why the metrics file could not be written (strerror's text, e.g. "No
 * space left on device"), or NULL while every row was written. */
PT_API const char *pt_run_metrics_error(const pt_run *run);

/* The fault handling of a job (with opts.dist; with none, or one rank,
 * pt_run_check_replicas is PT_OK).  pt_run_check_replicas (collective):
 * pt_dist_check_replicas of every rank's parameters and optimizer state,
 * PT_ECHECKSUM naming the rank(s) that differ (*bad_rank: the first, or -1
 * when no majority agrees).  pt_run_rollback (collective): back to the last
 * complete checkpoint (pt_run_last_checkpoint): the goodput accountant's
 * pending steps become lost, every rank loads the checkpoint into model and
 * opt and *state, *host_extra (may be NULL) as pt_run_load, and rank 0 drops
 * the metrics rows after its step.  With no checkpoint yet the metrics rows
 * are all dropped and the status is PT_ENOTFOUND: the host starts again
 * from its initial state. */
PT_API int pt_run_check_replicas(int *bad_rank, pt_run *run, const pt_optimizer *opt);
PT_API int pt_run_rollback(pt_run_state *state, char **host_extra, pt_run *run, pt_model *model,
                           pt_optimizer *opt);
/* This process's rank in the job and the job's size (0 and 1 without one). */
PT_API int pt_run_rank(const pt_run *run);
PT_API int pt_run_size(const pt_run *run);

/* The checkpoint interval.  pt_run_note_step: a step took `seconds` of work
 * (the mean is save_auto's step time).  pt_run_save_due: whether a
 * checkpoint is due after `step` of `total`: with save_every, every N steps
 * and at total; with save_auto, at the first step after the process's first
 * (which times the interval), then every chosen interval, and at total.
 * pt_run_save_every: the interval in steps (save_auto: 0 until chosen). */
PT_API int pt_run_note_step(pt_run *run, double seconds);
PT_API bool pt_run_save_due(const pt_run *run, int64_t step, int64_t total);
PT_API int64_t pt_run_save_every(const pt_run *run);
/* The last pt_run_save's duration and the mean of pt_run_note_step's
 * seconds (0 before any): what save_auto's interval came from. */
PT_API double pt_run_last_save_seconds(const pt_run *run);
PT_API double pt_run_mean_step_seconds(const pt_run *run);

/* ---- fault handling and goodput of a job (run_fault.c; docs/goodput.md,
 * docs/distributed.md).  Every host of a job (the CLI, Python, a C agent
 * runtime) drives the same calls; with no job they act for one process. */

/* What a host does next after pt_run_check: go on, roll back to the last
 * checkpoint (pt_run_rollback) and replay, or stop.  Names: "continue",
 * "rollback", "stop". */
typedef enum pt_run_action {
    PT_RUN_CONTINUE = 0,
    PT_RUN_ROLLBACK = 1,
    PT_RUN_STOP = 2
} pt_run_action;
PT_API const char *pt_run_action_name(int value);
PT_API int pt_run_action_from_name(int *out, const char *name);

/* Goodput sections on the run's accountant (opts.goodput): end the open
 * section, open one of `kind` (a pt_time_kind; -1: none), as
 * pt_goodput_switch.  PT_OK and nothing done without an accountant. */
PT_API int pt_run_section(pt_run *run, int kind);
/* One step done: `seconds` in all, `wait` of it at collectives
 * (PT_TIME_WAIT), `generate` of it generating (PT_TIME_GENERATE), the rest
 * PT_TIME_STEP (pending until a checkpoint commits it); the step is counted
 * (pt_goodput_step_done) and its seconds noted (pt_run_note_step).  PT_EINVAL
 * for negative or non-finite seconds. */
PT_API int pt_run_step_time(pt_run *run, double seconds, double wait, double generate);
/* The end of a run after `step`: the open section ended, the pending time
 * committed, then the report as *json (free with pt_free), one JSON object
 * without newline: {"step": STEP, "goodput": {"goodput": G (%.6f or null),
 * "wall": S, "seconds/KIND": S for every pt_time_kind, "pending": S (each
 * %.4f or null), "steps_kept": N, "steps_lost": N, "ranks": the job's size}};
 * *report (may be NULL) the same totals.  PT_ESTATE without an accountant. */
PT_API int pt_run_report_json(char **json, pt_goodput_report *report, pt_run *run, int64_t step);

/* The agreement of the ranks on an outcome (collective; every rank calls it
 * with its own `code`: 0 for success, any other int a failure, such as an
 * exit code or a PT_E* status).  *agreed: this rank's code when it is not
 * 0, else the code of the lowest rank that failed, else 0; *first_failed
 * (may be NULL): that rank, or -1.  A run without a job of several ranks
 * agrees with itself: *agreed = code.  Returns PT_OK, or the status of a
 * collective that failed (PT_EPEER; *agreed then code). */
PT_API int pt_run_agree(int *agreed, int *first_failed, pt_run *run, int code);

/* Whether a replica check is due after `step` (every opts.check_every steps,
 * in a job of several ranks). */
PT_API bool pt_run_check_due(const pt_run *run, int64_t step);
/* The replica check (collective; pt_run_check_replicas) when the run has
 * check_every and several ranks, with its policy: *action PT_RUN_CONTINUE
 * and PT_OK when the replicas agree (or there is nothing to check);
 * PT_ECHECKSUM naming the rank(s) (*bad_rank, may be NULL: the first, or -1
 * when no majority agrees) with *action PT_RUN_ROLLBACK, or PT_RUN_STOP
 * when on_mismatch says so or max_rollbacks rollbacks (pt_run_rollbacks)
 * came before; another status (a lost peer) with PT_RUN_STOP. */
PT_API int pt_run_check(int *action, int *bad_rank, pt_run *run, const pt_optimizer *opt);
/* Rollbacks (pt_run_rollback) since the last replica check that passed. */
PT_API int pt_run_rollbacks(const pt_run *run);
/* The step of the last complete checkpoint (resumed, saved or rolled back
 * to), or -1. */
PT_API int64_t pt_run_last_step(const pt_run *run);

/* The test hook of the replica checks (opts.test_flip_rank and
 * test_flip_step): on that rank, called after that step, flip bit 13 of the
 * first value of model's first trainable tensor, once per run (the replay
 * after a rollback is clean), *tensor its name; *tensor NULL when nothing
 * was flipped. */
PT_API int pt_run_test_flip(const char **tensor, pt_run *run, pt_model *model, int64_t step);

/* The run's result in its directory DIR (collective: rank 0 writes, every
 * rank gets the outcome): with LoRA adapters, the PEFT adapter in
 * DIR/adapter (pt_lora_save_peft, base_name its base model) merged into
 * the model (pt_model_merge_lora); then the model in Hugging Face layout in
 * DIR (pt_model_save_dir).  A base that cannot be merged (quantized:
 * PT_EUNSUPPORTED) leaves the adapter as the result: PT_OK without the
 * model, pt_last_error() saying why.  *saved (may be NULL): the
 * PT_RUN_SAVED_* bits of what rank 0 did.  A failure is the failed call's
 * status and message (PT_EPEER on the other ranks). */
#define PT_RUN_SAVED_ADAPTER 1u
#define PT_RUN_SAVED_MERGED 2u
#define PT_RUN_SAVED_MODEL 4u
PT_API int pt_run_save_final(unsigned *saved, pt_run *run, pt_model *model, const char *base_name);

/* The skip guard: optimizer updates skipped as non-finite (a loss, gradient
 * or update that is NaN or infinite: the weights or the learning rate ran
 * away) in a row.  Plain data, all zero at the start. */
typedef struct pt_run_skips {
    int64_t in_a_row;  /* consecutive non-finite updates so far */
    int64_t first;     /* the step of the first of them */
} pt_run_skips;
/* Count one update of `step` by its pt_skip_reason (PT_SKIP_NONE resets;
 * updates skipped for no tokens or no rewards neither count nor reset):
 * PT_ERANGE with the message when `max` (> 0; 0: never) non-finite updates
 * followed one another (the run should stop: no later step would be
 * applied), else PT_OK. */
PT_API int pt_run_skip_guard(pt_run_skips *k, int reason, int64_t step, int64_t max);

/* ---- a host's loop (run_host.c) ---- */

/* The host's checkpoint of the step just done (its state and fields to
 * pt_run_save): 0, or its own non-zero result (a PT_E* status, or a host's
 * code such as an exit code), which pt_run_step_end returns unchanged. */
typedef int (*pt_run_save_fn)(void *user);
/* The end of step `step` (1 .. total) of `total`, on every rank of a job:
 * when a checkpoint is due (pt_run_save_due), a replica check is due
 * (pt_run_check_due) or the step is the last, the replicas are compared
 * first (pt_run_check: no corrupted state is ever saved), then, when they
 * agree and a checkpoint is due, save(user) saves it; the goodput section
 * is PT_TIME_SAVE around both when a checkpoint is due, else PT_TIME_WAIT
 * (none is open after).  *action: PT_RUN_CONTINUE, or after a mismatch
 * pt_run_check's PT_RUN_ROLLBACK (the host goes back: pt_run_rollback,
 * then its own state, and replays) or PT_RUN_STOP.  Returns PT_OK,
 * pt_run_check's status (PT_ECHECKSUM for a mismatch, which the run
 * noted), or save's non-zero result. */
PT_API int pt_run_step_end(int *action, pt_run *run, const pt_optimizer *opt, int64_t step, int64_t total,
                           pt_run_save_fn save, void *user);
/* The run state of an SFT host's checkpoint after `step` steps (sft_run.c;
 * `posttrain sft` and SFTTrainer): the dataset's position (epoch, cursor),
 * seed and training examples (rows), the optimizer's step count, into a
 * state the caller initialised (pt_run_state_init; order_rng and rng 0). */
PT_API int pt_sft_run_state(pt_run_state *state, const pt_dataset *dataset, const pt_optimizer *opt, int64_t step);
/* Back to the weights a run started from (a rollback with no checkpoint
 * yet, PT_ENOTFOUND from pt_run_rollback): model_dir loaded again
 * (pt_model_load_dir, default options) with the adapters of `lora` when it
 * is not NULL (the options, seed included, the run's model got at its
 * start: the same initial adapters), its tensors copied into model's (model
 * keeps its contexts; a frozen base kept in BF16 is left as it is, no step
 * changes it).  PT_ESTATE naming model_dir when its tensors no longer match
 * model's by name and size; a failed load or pt_model_add_lora is its own
 * status; model is unchanged on error. */
PT_API int pt_run_reload_model(pt_model *model, const char *model_dir, const pt_lora_options *lora);

/* The next value of the splitmix64 sequence at *state (adds the golden
 * gamma 0x9E3779B97F4A7C15, then mixes): the library's one splitmix, for
 * seeded streams of a host (a data order, generated problems). */
PT_API uint64_t pt_splitmix64(uint64_t *state);

#ifdef __cplusplus
}
#endif

#endif
