/* libposttrain public API: optimizers and learning-rate schedules.
 *
 * An optimizer holds the state (moments, step count, schedule position) for the
 * trainable parameters of one model.  The host accumulates gradients with
 * pt_model_loss(..., backward = true) over one or more micro-batches, then
 * calls pt_optimizer_step(), which clips, checks for non-finite values,
 * updates the weights and zeroes the gradients. */
#ifndef POSTTRAIN_TRAIN_H
#define POSTTRAIN_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "posttrain/chat.h"
#include "posttrain/common.h"
#include "posttrain/lora.h"
#include "posttrain/model.h"
#include "posttrain/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pt_optimizer_type {
    PT_OPTIMIZER_ADAMW = 0, /* decoupled weight decay (torch.optim.AdamW) */
    PT_OPTIMIZER_SGD = 1    /* momentum, L2 weight decay (torch.optim.SGD) */
} pt_optimizer_type;
/* The lower-case name of a pt_optimizer_type value ("adamw", ...), or NULL for
 * a value that is not one; and the value of a name (PT_EINVAL listing the
 * accepted names otherwise). */
PT_API const char *pt_optimizer_type_name(int value);
PT_API int pt_optimizer_type_from_name(int *out, const char *name);


typedef enum pt_schedule_type {
    PT_SCHEDULE_CONSTANT = 0, /* lr (after warmup) */
    PT_SCHEDULE_LINEAR = 1,   /* linear decay to 0 at total_steps */
    PT_SCHEDULE_COSINE = 2    /* half cosine to min_lr_ratio * lr at total_steps */
} pt_schedule_type;
/* The lower-case name of a pt_schedule_type value ("constant", ...), or NULL for
 * a value that is not one; and the value of a name (PT_EINVAL listing the
 * accepted names otherwise). */
PT_API const char *pt_schedule_type_name(int value);
PT_API int pt_schedule_type_from_name(int *out, const char *name);


typedef struct pt_optimizer_options {
    size_t size;
    int type;                 /* pt_optimizer_type; default AdamW */
    double lr;                /* peak learning rate; default 1e-4 */
    double beta1, beta2, eps; /* AdamW; defaults 0.9, 0.999, 1e-8 */
    double momentum;          /* SGD; default 0.9 */
    double weight_decay;      /* default 0.0 */
    bool decay_norms_and_biases; /* default false: no decay on norms and biases */
    int schedule;             /* pt_schedule_type; default constant */
    int64_t warmup_steps;     /* linear warmup from 0; default 0 */
    int64_t total_steps;      /* needed by linear and cosine */
    double min_lr_ratio;      /* cosine floor as a fraction of lr; default 0 */
    double max_grad_norm;     /* clip by global L2 norm; 0 = off (default 1.0) */
} pt_optimizer_options;

/* Defaults as commented above (Hugging Face Trainer's defaults for AdamW). */
PT_API int pt_optimizer_options_init(pt_optimizer_options *opts);

typedef struct pt_optimizer pt_optimizer;

/* An optimizer over the trainable parameters of `model` (the model must
 * outlive it).  Moments are allocated here, zeroed.  It belongs to the
 * model's tensors as they are now: after LoRA adapters are added, merged or
 * removed every call with it (pt_optimizer_step, pt_sft_step, pt_grpo_step,
 * checkpoints) is PT_ESTATE: create a new optimizer. */
PT_API int pt_optimizer_create(pt_optimizer **out, pt_model *model, const pt_optimizer_options *opts);
PT_API void pt_optimizer_free(pt_optimizer *opt);

/* Why a step was skipped (pt_step_stats, pt_sft_stats and pt_grpo_stats
 * .skip_reason; PT_SKIP_NONE when the step was applied). */
typedef enum pt_skip_reason {
    PT_SKIP_NONE = 0,
    PT_SKIP_NO_TOKENS = 1,         /* the batch has no target tokens */
    PT_SKIP_NONFINITE_LOSS = 2,    /* the loss is NaN or infinite */
    PT_SKIP_NONFINITE_GRAD = 3,    /* the gradient norm is NaN or infinite */
    PT_SKIP_NONFINITE_UPDATE = 4,  /* the update would make a weight or moment non-finite */
    PT_SKIP_NO_REWARDS = 5         /* GRPO: every reward function declined every sample */
} pt_skip_reason;
/* The lower-case name of a pt_skip_reason value ("none", "no_tokens",
 * "nonfinite_loss", "nonfinite_grad", "nonfinite_update"), or NULL; and the
 * value of a name (PT_EINVAL listing the accepted names otherwise). */
PT_API const char *pt_skip_reason_name(int value);
PT_API int pt_skip_reason_from_name(int *out, const char *name);

typedef struct pt_step_stats {
    size_t size;
    double grad_norm;   /* global L2 norm before clipping (NaN/Inf when skipped for that) */
    double lr;          /* learning rate used for this step */
    int64_t step;       /* optimizer steps applied so far, after this one */
    bool skipped;       /* true: non-finite gradients, nothing changed */
    int64_t skipped_total; /* steps skipped since creation */
    int skip_reason;    /* pt_skip_reason: why this step was skipped */
} pt_step_stats;

PT_API int pt_step_stats_init(pt_step_stats *stats);

/* Apply one update from the gradients accumulated in the model, then zero them.
 * Non-finite gradients, or an update that would make any weight or moment
 * non-finite (checked before anything is written), skip the update (weights,
 * moments and step count unchanged, the skip counter raised, the reason
 * logged and in stats->skip_reason) and the call still
 * returns PT_OK with stats->skipped set.  `stats` may be NULL.
 * With a data-parallel job of several ranks attached (pt_optimizer_set_dist),
 * the gradients are first summed over the ranks (in rank order, so every
 * rank applies the same update): each rank's backward must then be
 * normalised by the whole global batch, as pt_sft_step does by itself.  An
 * error on one rank fails the call on every rank (PT_EPEER on the others). */
PT_API int pt_optimizer_step(pt_step_stats *stats, pt_optimizer *opt);

/* The learning rate the next step will use (0 for NULL). */
PT_API double pt_optimizer_lr(const pt_optimizer *opt);
/* Steps applied so far (0 for NULL). */
PT_API int64_t pt_optimizer_step_count(const pt_optimizer *opt);
/* The same as status and out-parameter. */
PT_API PT_DEPRECATED("pt_optimizer_lr")
int pt_optimizer_get_lr(double *lr, const pt_optimizer *opt);
PT_API PT_DEPRECATED("pt_optimizer_step_count")
int pt_optimizer_get_step(int64_t *step, const pt_optimizer *opt);

/* Supervised fine-tuning step. */
typedef struct pt_sft_stats {
    size_t size;
    double loss;          /* mean weighted next-token loss over all micro-batches (nats) */
    double tokens;        /* sum of the loss weights (the number of target tokens for 0/1 masks) */
    double grad_norm;     /* global gradient norm before clipping */
    double lr;            /* learning rate used */
    int64_t step;         /* optimizer steps applied so far */
    bool skipped;         /* non-finite loss or gradients: nothing changed */
    int64_t skipped_total;
    int skip_reason;      /* pt_skip_reason: why this step was skipped */
    double comm_seconds;  /* spent in collectives (data-parallel jobs: transfers and waiting
                           * for the slowest rank); 0 in one process */
} pt_sft_stats;

PT_API int pt_sft_stats_init(pt_sft_stats *stats);

/* One optimizer step over n_micro micro-batches (gradient accumulation): the
 * loss is -sum(w * log p(target)) / sum(w) over every target token of every
 * micro-batch, where weights[i] (B*T per micro-batch; the array or any entry
 * may be NULL for 1 on every token with a target) are loss weights, e.g. 0/1
 * completion-only masks.  Gradients of the whole accumulated batch equal
 * those of one big batch.  A non-finite loss or gradient skips the step
 * (weights and moments unchanged, stats->skipped set, PT_OK returned).  The
 * abort callback is polled between micro-batches (PT_ECANCELLED; gradients
 * are dropped, weights untouched).  ctx and opt must belong to the same model
 * (PT_EINVAL naming both), and opt must predate no LoRA add, merge or removal
 * (PT_ESTATE).
 * With a data-parallel job attached (pt_optimizer_set_dist, posttrain/dist.h)
 * each rank passes its own share of the global batch: the loss is normalised
 * by the weight of the whole global batch, the gradients are summed over the
 * ranks before the update, and the stats (loss, tokens) are global.  An
 * error on any rank fails the step on every rank (PT_EPEER on the others),
 * with nothing applied. */
PT_API int pt_sft_step(pt_sft_stats *stats, pt_optimizer *opt, pt_context *ctx, const pt_batch *micro,
                       const float *const *weights, int n_micro);

/* ---- SFT data --------------------------------------------------------------
 *
 * A dataset holds tokenized examples (ids plus a per-token loss mask: 1 = the
 * model is trained to predict this token) split into a training and an
 * evaluation part, and hands out batches.  Rows come from JSONL files:
 *   {"text": str}                       every token is trained on
 *   {"prompt": str, "completion": str}  the completion (and EOS) only, by default
 *   {"messages": [{"role","content"}...]}  the assistant turns only, by default
 *   {"input_ids": [...], "loss_mask": [...]}  as given (no mask: every token)
 * or from the host (pt_dataset_add), e.g. an agent's own traces. */
typedef struct pt_dataset_options {
    size_t size;
    int max_length;        /* tokens per example; longer ones are truncated (default 512) */
    bool completion_only;  /* loss on completions / assistant turns only (default true) */
    bool skip_bad_rows;    /* a malformed row is skipped and counted (default false: error) */
    bool add_eos;          /* EOS after a completion (default true, when the tokenizer has one);
                            * "text" rows are taken as they are */
    const char *chat_template; /* template name for "messages" rows (NULL: the tokenizer's) */
    double eval_fraction;  /* share of examples held out for evaluation (default 0) */
    int batch_size;        /* rows per batch (default 8) */
    bool pack;             /* pack several examples into each row (default false) */
    bool shuffle;          /* reshuffle the training examples every epoch (default true) */
    uint64_t seed;         /* shuffling and the evaluation split (default 0) */
} pt_dataset_options;

PT_API int pt_dataset_options_init(pt_dataset_options *opts);

typedef struct pt_dataset pt_dataset;

/* An empty dataset; add examples with pt_dataset_add. */
PT_API int pt_dataset_create(pt_dataset **out, const pt_dataset_options *opts);
/* Read every row of a JSONL file, tokenizing with `tok` (may be NULL when
 * every row is pre-tokenized).  A malformed row is an error naming its line
 * (or skipped and counted with skip_bad_rows). */
PT_API int pt_dataset_load_jsonl(pt_dataset **out, const char *path, const pt_tokenizer *tok,
                                 const pt_dataset_options *opts);
/* Add one tokenized example (loss_mask may be NULL: every token).  Examples
 * added after the first batch was drawn join at the next epoch. */
PT_API int pt_dataset_add(pt_dataset *dataset, const int32_t *ids, const uint8_t *loss_mask, size_t n);
PT_API void pt_dataset_free(pt_dataset *dataset);

typedef struct pt_dataset_stats {
    size_t size;
    int64_t rows;              /* rows read */
    int64_t skipped_rows;      /* malformed rows skipped */
    int64_t empty_rows;        /* rows left with no trained-on token (dropped) */
    int64_t truncated_rows;    /* examples cut to max_length */
    int64_t truncated_tokens;  /* tokens cut */
    int64_t train_examples, eval_examples;
    int64_t train_tokens, train_target_tokens;
    int64_t epoch;             /* current training epoch (0-based) */
    int64_t cursor;            /* next example of the epoch */
} pt_dataset_stats;

PT_API int pt_dataset_stats_init(pt_dataset_stats *stats);
PT_API int pt_dataset_get_stats(pt_dataset_stats *stats, const pt_dataset *dataset);

/* The next training batch: rows of examples (packed or one per row, padded),
 * targets -1 where nothing is trained, and loss weights (1 on every target).
 * The pointers in *batch and *weights stay valid until the next call.
 * Epochs wrap around (reshuffled with seed + epoch). */
PT_API int pt_dataset_next_batch(pt_batch *batch, const float **weights, pt_dataset *dataset);
/* Mean loss over the evaluation split, in batches of batch_size (no gradient
 * is touched).  PT_ESTATE when the split is empty. */
PT_API int pt_dataset_eval_loss(double *loss, double *tokens, pt_dataset *dataset, pt_context *ctx);
/* Longest row a batch can hold (what a context must be sized for). */
PT_API int pt_dataset_max_seq(int *seq, const pt_dataset *dataset);
/* Position in the training stream, for checkpoints: set it back to resume
 * the same data order. */
PT_API int pt_dataset_get_position(int64_t *epoch, int64_t *cursor, const pt_dataset *dataset);
PT_API int pt_dataset_set_position(pt_dataset *dataset, int64_t epoch, int64_t cursor);

/* ---- an SFT run's loop -------------------------------------------------------
 *
 * What a host's loop needs around pt_sft_step (`posttrain sft` and Python's
 * SFTTrainer use them; docs/training.md, "An SFT loop"):
 *
 *     pt_sft_total_steps(&total, data, grad_accum, steps, epochs);
 *     pt_sft_batches_create(&mb, data, grad_accum, 0, 0);
 *     for (step = 1; step <= total; step++) {
 *         pt_sft_batches_fill(mb, data);
 *         pt_sft_step(&s, opt, ctx, pt_sft_batches_micro(mb), pt_sft_batches_weights(mb),
 *                     pt_sft_batches_count(mb));
 *         if (pt_sft_eval_due(data, step, total, eval_every)) ... pt_dataset_eval_loss ...
 *         pt_sft_metrics_row(&row, &s, &extra); pt_run_log(run, row); pt_free(row);
 *     }
 *
 * The micro-batches of one optimizer step: pt_dataset_next_batch's buffers
 * are reused by every call, so each micro-batch is copied into buffers of
 * its own.  `row_begin` and `row_count` (0: every row from row_begin) are
 * the rows of each micro-batch this process trains on: all of them in one
 * process, a rank's share in a data-parallel job (every rank fills the same
 * micro-batches: the job's whole batch, the same data order).  Sized for the
 * dataset's batch_size rows of max_length tokens; PT_EINVAL for a range
 * outside the batch or n_micro outside [1, 65536]. */
typedef struct pt_sft_batches pt_sft_batches;
PT_API int pt_sft_batches_create(pt_sft_batches **out, const pt_dataset *dataset, int n_micro, int64_t row_begin,
                                 int64_t row_count);
PT_API void pt_sft_batches_free(pt_sft_batches *batches);
/* The next n_micro batches of the dataset (pt_dataset_next_batch; PT_ESTATE
 * for a batch larger than the dataset `batches` was made for). */
PT_API int pt_sft_batches_fill(pt_sft_batches *batches, pt_dataset *dataset);
/* After a fill: this process's rows of each micro-batch and their loss
 * weights, as pt_sft_step takes them (valid until the next fill or the
 * free); their number (n_micro); and the tokens (B*T, padding included)
 * of the whole job's micro-batches, the step's tokens for a throughput.
 * NULL or 0 for NULL. */
PT_API const pt_batch *pt_sft_batches_micro(const pt_sft_batches *batches);
PT_API const float *const *pt_sft_batches_weights(const pt_sft_batches *batches);
PT_API int pt_sft_batches_count(const pt_sft_batches *batches);
PT_API int64_t pt_sft_batches_tokens(const pt_sft_batches *batches);

/* A context for a run's steps on `dataset`: `rows` rows (this process's
 * rows of a micro-batch, as given to pt_sft_batches_create; 0: a whole
 * batch), or a whole batch when the dataset has an evaluation split
 * (pt_dataset_eval_loss takes whole batches); max_length tokens, or the
 * model's max_position_embeddings when fewer. */
PT_API int pt_sft_context_create(pt_context **out, pt_model *model, const pt_dataset *dataset, int rows);

/* The optimizer steps of a run: `steps` when > 0; otherwise `epochs` (<= 0:
 * 1) passes over the training examples, ceil(epochs * train_examples /
 * (batch_size * grad_accum * per_row)) and at least 1, where per_row is 1,
 * or with packing max(1, floor(max_length / mean example length)).  What
 * `posttrain sft --steps/--epochs` runs. */
PT_API int pt_sft_total_steps(int64_t *total, const pt_dataset *dataset, int grad_accum, int64_t steps,
                              double epochs);
/* Whether the run evaluates after step `step` (1-based) of `total`: the
 * dataset has an evaluation split, and step is a multiple of eval_every
 * (> 0; 0: never) or the last (false for NULL). */
PT_API bool pt_sft_eval_due(const pt_dataset *dataset, int64_t step, int64_t total, int64_t eval_every);

/* What a step's metrics row has beside its pt_sft_stats. */
typedef struct pt_sft_row_extra {
    size_t size;
    int64_t step;          /* the step's number, 1-based */
    double step_seconds;   /* the step's time (pt_sft_step) */
    int64_t step_tokens;   /* the step's tokens (pt_sft_batches_tokens): tokens_per_s */
    bool comm;             /* with "comm_seconds" (a data-parallel job) */
    bool eval;             /* with "eval_loss" (an evaluation after the step) */
    double eval_loss;      /* default NaN */
} pt_sft_row_extra;

PT_API int pt_sft_row_extra_init(pt_sft_row_extra *extra);
/* The metrics row of an SFT step, as `posttrain sft` writes it: one JSON
 * object, no newline (free with pt_free), keys in this order:
 *   {"step": N, "loss": %.6f, "tokens": %.0f, "grad_norm": %.6g, "lr": %.6g,
 *    "skipped": true|false, "step_seconds": %.4f[, "comm_seconds": %.4f],
 *    "tokens_per_s": %.1f[, "eval_loss": %.6f]}
 * every number that is not finite written as null (extra may be NULL: the
 * defaults). */
PT_API int pt_sft_metrics_row(char **json, const pt_sft_stats *stats, const pt_sft_row_extra *extra);
/* A step's progress as `posttrain sft` shows it on stderr (SFTTrainer logs
 * the line), *text freed with pt_free: extra->step of `total` (>= 1), the
 * loss, the throughput tokens_per_s (%.0f) and the time left eta_seconds
 * ("XmYYs", from an hour "XhYYm", "?" when negative or not finite).
 * PT_SFT_PROGRESS_LINE: "step S/T loss %.4f lr %.3g grad_norm %.3g N tok/s
 * ETA E" with " eval_loss %.4f" after an evaluation (extra->eval), and a
 * newline.  PT_SFT_PROGRESS_BAR, a terminal's bar redrawn in place:
 * "\r[" 24 cells ('#' for the share of the steps done, else '.') "] step S/T
 * loss %.4f N tok/s ETA E" and three spaces, then after an evaluation
 * "\n  eval loss %.4f\n".  PT_EINVAL for another style. */
#define PT_SFT_PROGRESS_LINE 0
#define PT_SFT_PROGRESS_BAR 1
PT_API int pt_sft_progress(char **text, const pt_sft_stats *stats, const pt_sft_row_extra *extra, int64_t total,
                           double tokens_per_s, double eta_seconds, int style);

/* Checkpoints.  pt_checkpoint_save writes the model's trainable tensors, the
 * optimizer's moments and counters, and `host_json` (any JSON value the host
 * wants back on resume, e.g. its data position; may be NULL) into a new
 * directory `dir`: under a temporary name, every file fsynced and listed with
 * its SHA-256 in MANIFEST.json (written last), then renamed into place.  An
 * existing `dir` is never overwritten (PT_ESTATE).  A crash at any moment
 * leaves earlier checkpoints intact.
 * pt_checkpoint_load verifies every checksum (PT_ECHECKSUM names a damaged
 * file) before reading anything into `model` and `opt`, which must have the
 * same trainable tensors and optimizer type as when saved; *host_json (may be
 * NULL) receives the host's JSON, to free with pt_free().  A `dir` that does
 * not exist is PT_ENOTFOUND.  Both calls need `opt` to be an optimizer of
 * `model` (PT_EINVAL otherwise, nothing written or read).
 * Like every function here: out-parameters first, then the objects acted
 * upon, then the rest (pt_model_save_dir(model, dir) likewise). */
PT_API int pt_checkpoint_save(const pt_model *model, pt_optimizer *opt, const char *host_json, const char *dir);
PT_API int pt_checkpoint_load(char **host_json, pt_model *model, pt_optimizer *opt, const char *dir);
/* A checkpoint's trained weights without its optimizer state (to export or
 * evaluate it).  pt_checkpoint_read_host verifies every checksum, as
 * pt_checkpoint_load does, and returns the host's JSON in *host_json (NULL
 * when none was saved; free with pt_free()).  pt_checkpoint_load_weights
 * verifies them and reads the saved tensors into `model`, which must have
 * the trainable tensors it had when saved (a LoRA run's base with adapters
 * added with the same rank and targets); a failure part way leaves the
 * model partly loaded.  A `dir` that does not exist is PT_ENOTFOUND. */
PT_API int pt_checkpoint_read_host(char **host_json, const char *dir);
PT_API int pt_checkpoint_load_weights(pt_model *model, const char *dir);
/* What a checkpoint's host JSON (pt_checkpoint_read_host) records of its
 * model, as `posttrain sft`, `posttrain grpo` and the Python trainers write
 * it: the base model's path ("model": *model allocated, free with pt_free;
 * NULL when not recorded) and, for a LoRA run, the adapters' options ("lora":
 * {"rank", "alpha", "targets"}: *has_lora true and *lora filled), which is
 * what rebuilding the trained model takes (load the base, pt_model_add_lora,
 * pt_checkpoint_load_weights).  JSON that is not an object records nothing.
 * PT_EFORMAT: text that is not JSON, or a "lora" without rank, alpha or
 * targets as numbers. */
PT_API int pt_checkpoint_host_model(char **model, pt_lora_options *lora, bool *has_lora, const char *host_json);

/* Learning-rate multiplier of a schedule at a given step (0-based), as
 * Hugging Face's get_*_schedule_with_warmup compute it. */
PT_API int pt_schedule_factor(double *factor, int schedule, int64_t step, int64_t warmup_steps,
                              int64_t total_steps, double min_lr_ratio);

#ifdef __cplusplus
}
#endif

#endif
