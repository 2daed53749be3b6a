/* posttrain sft: supervised fine-tuning of a Hugging Face model directory on
 * JSONL data, with checkpoints, exact resume, progress and a metrics file. */
#include "cli.h"

#include <stddef.h>
#include <string.h>
#include <unistd.h>

typedef struct sft_args {
    const char *model, *data;
    pt_optimizer_options opt;
    pt_dataset_options data_opts;
    int64_t steps;
    double epochs;
    int grad_accum, eval_every;
    cli_run_args run; /* --out, the checkpoint and output options */
    cli_lora_args lora;
    cli_dist_args dist;
} sft_args;

#define SFT(field) offsetof(sft_args, field)
static const cli_opt k_sft_io_opts[] = {
    { CLI_PATH, "model", SFT(model), "DIR", .required = true,
      .help = "Hugging Face model directory, or a GGUF file (F32/F16/BF16, or\nquantized: Q8_0, Q4_0, Q4_K, ... frozen, for LoRA)" },
    { CLI_PATH, "data", SFT(data), "FILE.jsonl", .required = true, .help = "the training rows" },
    { CLI_PATH, "out", SFT(run.out), "DIR", .required = true, .help = "where the trained model is saved" },
};
static const cli_opt k_sft_lr_opt[] = {
    { CLI_DOUBLE, "lr", SFT(opt.lr), "F", .def = "1e-4", .help = "peak learning rate" },
};
static const cli_opt k_sft_length_opts[] = {
    { CLI_INT64, "steps", SFT(steps), "N", .lo = 1, .hi = 1e9, .help = "optimizer steps (default: 1 epoch)" },
    { CLI_DOUBLE, "epochs", SFT(epochs), "F", .lo = 0, .hi = 1e6, .help = "passes over the data instead of --steps" },
};
static const cli_opt k_sft_data_opts[] = {
    { CLI_INT, "batch-size", SFT(data_opts.batch_size), "N", .def = "8", .lo = 1, .hi = 65536,
      .help = "rows per micro-batch (of the whole job: under mpirun each\nrank takes its share)" },
    { CLI_INT, "grad-accum", SFT(grad_accum), "N", .def = "1", .lo = 1, .hi = 65536,
      .help = "micro-batches per optimizer step" },
    { CLI_INT, "max-length", SFT(data_opts.max_length), "N", .def = "512", .lo = 2, .hi = 1048576,
      .help = "tokens per example; longer ones are truncated" },
    { CLI_FLAG, "pack", SFT(data_opts.pack), .help = "pack several examples into each row" },
    { CLI_FLAG_CLEAR, "all-tokens", SFT(data_opts.completion_only), .help = "train on prompts too" },
    { CLI_STRING, "chat-template", SFT(data_opts.chat_template), "NAME",
      .help = "template of {\"messages\"} rows (default: the tokenizer's)" },
    { CLI_FLAG, "skip-bad-rows", SFT(data_opts.skip_bad_rows), .help = "skip and count malformed rows" },
    { CLI_DOUBLE, "eval-fraction", SFT(data_opts.eval_fraction), "F", .def = "0",
      .help = "share of the examples held out for evaluation" },
    { CLI_INT, "eval-every", SFT(eval_every), "N", .def = "0", .lo = 0, .hi = 1e9,
      .help = "evaluate every N steps; 0: only at the end" },
    { CLI_UINT64, "seed", SFT(data_opts.seed), "N", .def = "0", .help = "data order, evaluation split, LoRA init" },
};
#undef SFT

static const cli_command k_sft = {
    .name = "sft",
    .usage = "--model DIR --data FILE.jsonl --out DIR [options]",
    .about = "Rows: {\"text\"}, {\"prompt\",\"completion\"}, {\"messages\":[...]} or {\"input_ids\",\"loss_mask\"}.\n"
             "The trained model is saved in Hugging Face layout at --out.",
};

static int parse_args(sft_args *a, int argc, char **argv)
{
    pt_optimizer_options_init(&a->opt);
    pt_dataset_options_init(&a->data_opts);
    const cli_group groups[] = {
        { "options", k_sft_io_opts, CLI_COUNT_OF(k_sft_io_opts), a },
        { "optimizer", k_sft_lr_opt, CLI_COUNT_OF(k_sft_lr_opt), a },
        { NULL, cli_optimizer_opts, cli_n_optimizer_opts, &a->opt },
        { "length", k_sft_length_opts, CLI_COUNT_OF(k_sft_length_opts), a },
        { "data", k_sft_data_opts, CLI_COUNT_OF(k_sft_data_opts), a },
        { "checkpoints and output", cli_run_opts, CLI_N_RUN_OPTS, &a->run },
        { "LoRA (the base is frozen; OUT/adapter gets the PEFT adapter, OUT the merged model)", cli_lora_opts,
          cli_n_lora_opts, &a->lora },
        { "data-parallel runs (mpirun -np N posttrain sft ...; docs/distributed.md)", cli_dist_opts,
          cli_n_dist_opts, &a->dist },
    };
    int rc = cli_parse(&k_sft, groups, CLI_COUNT_OF(groups), argc, argv, NULL);
    if (rc)
        return rc;
    if (a->steps && a->epochs > 0)
        return cli_usage_error("sft", "give --steps or --epochs, not both");
    if ((rc = cli_check_run("sft", &a->run)) || (rc = cli_check_dist("sft", &a->dist, a->run.save_every)))
        return rc;
    return cli_check_lora("sft", &a->lora);
}

/* Everything a run holds; sft_free releases it. */
typedef struct sft_run {
    sft_args a;
    cli_job job;
    pt_model *model;
    pt_dataset *data;
    pt_optimizer *opt;
    pt_context *ctx;
    FILE *metrics;
    cli_out out;
    int64_t total, step, skipped_total; /* skipped_total: the last step's count */
    pt_run_skips skips;
    int64_t row0, rows;  /* this rank's rows of every micro-batch */
    pt_sft_batches *mb;  /* a step's micro-batches (pt_sft_batches_fill), those rows of each */
} sft_run;

static void sft_free(sft_run *r)
{
    pt_sft_batches_free(r->mb);
    cli_metrics_close(&r->metrics);
    pt_context_free(r->ctx);
    pt_optimizer_free(r->opt);
    pt_dataset_free(r->data);
    pt_model_free(r->model);
    cli_out_end(&r->out);
}

/* A checkpoint after r->step (every rank; rank 0 writes it): the run state
 * and the shared host fields (cli_host_new: base model, LoRA options). */
static int save_checkpoint(void *p)
{
    sft_run *r = p;
    pt_run_state s;
    pt_run_state_init(&s);
    int st = pt_sft_run_state(&s, r->data, r->opt, r->step);
    if (st)
        return cli_fail("checkpoint", st);
    char *h = cli_host_new("sft", r->a.model, r->model);
    int rc = h ? cli_checkpoint_save("sft", &r->out, r->model, r->opt, &s, h) : 1;
    pt_free(h);
    return rc;
}

/* The model (with its LoRA adapters) and the data, with their statistics. */
static int load(sft_run *r)
{
    const sft_args *a = &r->a;
    int st;
    const bool lora16 = a->run.bf16 && a->lora.rank > 0; /* LoRA on a BF16 base: read into BF16, frozen */
    if ((st = cli_load_model(&r->model, a->model, lora16 ? PT_BF16_FROZEN : PT_BF16_OFF, a->run.quantize)))
        return cli_fail(a->model, st);
    if ((a->run.bf16 && !lora16 && cli_set_bf16("sft", r->model, PT_BF16_ON)) ||
        (a->lora.rank > 0 && cli_add_lora("sft", r->model, &a->lora, a->data_opts.seed)) ||
        (lora16 && cli_set_bf16("sft", r->model, PT_BF16_ON)))
        return 1;
    if ((st = pt_dataset_load_jsonl(&r->data, a->data, pt_model_tokenizer(r->model), &a->data_opts))) {
        cli_fail(a->data, st);
        cli_explain_tokenizer("sft", a->model, r->model);
        return 1;
    }
    pt_dataset_stats ds;
    pt_dataset_stats_init(&ds);
    if ((st = pt_dataset_get_stats(&ds, r->data)))
        return cli_fail(a->data, st);
    if (ds.train_examples == 0) {
        fprintf(stderr, "posttrain sft: %s has no training examples\n", a->data);
        return 1;
    }
    cli_note("posttrain sft: %lld rows: %lld train, %lld eval examples; %lld skipped, %lld empty, "
             "%lld truncated (%lld tokens cut)\n",
             (long long)ds.rows, (long long)ds.train_examples, (long long)ds.eval_examples,
             (long long)ds.skipped_rows, (long long)ds.empty_rows, (long long)ds.truncated_rows,
             (long long)ds.truncated_tokens);
    return 0;
}

/* Back to the start of the run (a rollback with no checkpoint): the weights
 * of --model (the LoRA adapters as at the start), a new optimizer, the first
 * data position. */
static int restart_run(void *p)
{
    sft_run *r = p;
    int st, rc = cli_reload_start("sft", r->model, r->a.model, &r->a.lora, r->a.data_opts.seed);
    if (!rc)
        rc = cli_job_optimizer(&r->job, &r->opt, r->model, &r->a.opt);
    if (!rc && (st = pt_dataset_set_position(r->data, 0, 0)))
        rc = cli_fail("data", st);
    r->step = 0;
    return rc;
}

/* A loaded checkpoint's state into the run: the data position and the step. */
static int apply_run(void *p, const pt_run_state *s, const char *h, const char *dir)
{
    sft_run *r = p;
    int st = pt_dataset_set_position(r->data, s->epoch, s->cursor);
    if (st)
        return cli_fail("--resume", st);
    r->step = s->step;
    return 0;
}

/* The optimizer, the context, the --resume state, the metrics file (rank
 * 0) and the micro-batches. */
static int setup(sft_run *r)
{
    sft_args *a = &r->a;
    int st;
    if ((st = pt_sft_total_steps(&r->total, r->data, a->grad_accum, a->steps, a->epochs)))
        return cli_fail("--steps", st);
    if (a->opt.schedule != PT_SCHEDULE_CONSTANT)
        a->opt.total_steps = r->total;
    if (cli_job_optimizer(&r->job, &r->opt, r->model, &a->opt))
        return 1;
    if ((st = pt_sft_context_create(&r->ctx, r->model, r->data, (int)r->rows)) ||
        (st = cli_run_context(r->ctx, &a->run)))
        return cli_fail("context", st);
    const cli_back b = { r, restart_run, apply_run };
    if (a->run.resume &&
        cli_job_resume(&r->job, &r->out, r->model, r->opt, a->run.resume, a->data_opts.seed, &b, &r->step))
        return 1;
    if (r->job.rank == 0 && !(r->metrics = cli_open_metrics("sft")))
        return 1;
    if (pt_sft_batches_create(&r->mb, r->data, a->grad_accum, r->row0, r->rows)) {
        fprintf(stderr, "posttrain sft: out of memory\n");
        return 1;
    }
    return 0;
}

/* A progress bar on a terminal, otherwise a line every --log-every steps
 * (pt_sft_progress). */
static void show_progress(const sft_run *r, const pt_sft_stats *s, double tps, double eta, bool tty,
                          const pt_sft_row_extra *x)
{
    char *text = NULL;
    if ((tty || r->step % r->a.run.log_every == 0 || r->step == r->total || x->eval) &&
        !pt_sft_progress(&text, s, x, r->total, tps, eta, tty ? PT_SFT_PROGRESS_BAR : PT_SFT_PROGRESS_LINE))
        fputs(text, stderr);
    pt_free(text);
}

/* One step: the micro-batches, pt_sft_step, the evaluation when due (every
 * rank, the whole split) and the metrics row (rank 0).  *x gets the row's
 * extra fields, *t_done the time before the evaluation, *runaway whether
 * --max-skipped-steps stops the run. */
static int step(sft_run *r, pt_sft_stats *s, pt_sft_row_extra *x, double *t_done, bool *runaway, bool tty)
{
    cli_job *j = &r->job;
    double t_fill = cli_now(), etok;
    int st = pt_sft_batches_fill(r->mb, r->data);
    if (st)
        return cli_fail("data", st);
    pt_sft_stats_init(s);
    double t0 = cli_now();
    if ((st = pt_sft_step(s, r->opt, r->ctx, pt_sft_batches_micro(r->mb), pt_sft_batches_weights(r->mb),
                          r->a.grad_accum)))
        return cli_fail("sft step", st);
    pt_sft_row_extra_init(x);
    x->step_seconds = cli_now() - t0;
    cli_job_step_time(j, cli_now() - t_fill, s->comm_seconds, 0);
    x->step = ++r->step;
    cli_job_flip_hook(j, r->model, (long long)r->step);
    if (s->skipped)
        cli_note("%sposttrain sft: step %lld skipped (non-finite loss or gradients)\n", tty ? "\n" : "",
                 (long long)r->step);
    r->skipped_total = s->skipped_total;
    *runaway = cli_skip_guard("sft", &r->skips, s->skip_reason, (long long)r->step, r->a.run.max_skipped, s->lr);
    x->step_tokens = pt_sft_batches_tokens(r->mb);
    x->comm = j->size > 1;
    *t_done = cli_now();
    if ((x->eval = pt_sft_eval_due(r->data, r->step, r->total, r->a.eval_every))) {
        cli_job_section(j, PT_TIME_EVAL);
        st = pt_dataset_eval_loss(&x->eval_loss, &etok, r->data, r->ctx);
        cli_job_section(j, -1);
        if (st)
            return cli_fail("eval", st);
    }
    char *row = NULL;
    if (r->metrics && (st = pt_sft_metrics_row(&row, s, x)))
        return cli_fail("metrics", st);
    if (row) {
        fprintf(r->metrics, "%s\n", row);
        pt_free(row);
        cli_metrics_row("sft", &r->metrics);
    }
    return 0;
}

/* Steps until --steps or the epochs are done, with progress (rank 0),
 * replica checks, checkpoints, and a rollback when the replicas disagree. */
static int train(sft_run *r)
{
    cli_job *j = &r->job;
    const bool tty = j->rank == 0 && isatty(fileno(stderr));
    const double t_start = cli_now();
    const int64_t first = r->step;
    double tokens_seen = 0;
    int rc = 0;
    cli_job_section(j, -1);
    while (!rc && r->step < r->total) {
        pt_sft_stats s;
        pt_sft_row_extra x;
        bool runaway = false;
        double t_done = 0;
        if ((rc = step(r, &s, &x, &t_done, &runaway, tty)))
            break;
        tokens_seen += (double)x.step_tokens;
        double elapsed = t_done - t_start;
        if (j->rank == 0)
            show_progress(r, &s, tokens_seen / elapsed,
                          elapsed / (double)(r->step - first) * (double)(r->total - r->step), tty, &x);
        if (runaway) {
            rc = 1;
            break;
        }
        const cli_back b = { r, restart_run, apply_run };
        rc = cli_job_step_end(j, &r->out, r->model, r->opt, &b, save_checkpoint, (long long)r->step,
                              (long long)r->total);
    }
    if (tty)
        fprintf(stderr, "\n");
    return rc;
}

int cmd_sft(int argc, char **argv)
{
    sft_run r;
    memset(&r, 0, sizeof r);
    int rc = parse_args(&r.a, argc, argv);
    if (rc)
        return cli_exit_code(rc);
    /* the job (one process, or every rank under mpirun), this rank's rows
     * of every micro-batch, then before anything is written the hold on
     * --out (rank 0: its lock, an earlier run, --resume auto's checkpoint) */
    if (!(rc = cli_job_begin(&r.job, "sft", &r.a.dist, r.a.run.save_every)))
        rc = cli_job_shard(&r.job, &r.row0, &r.rows, r.a.data_opts.batch_size, "--batch-size");
    r.out.keep_last = r.a.run.keep_last;
    r.out.keep_every = r.a.run.keep_every;
    if (!rc)
        rc = cli_job_out_start(&r.job, &r.out, r.a.run.out, r.a.run.metrics, r.a.model, r.a.data,
                               &r.a.run.resume, r.a.run.overwrite);
    if (!rc)
        rc = cli_job_agree(&r.job, load(&r) || setup(&r), "starting");
    if (!rc)
        rc = train(&r) || cli_job_save_final(&r.job, r.model, r.a.run.out, r.a.model, (long long)r.step,
                                             (long long)r.skipped_total);
    if (!rc)
        rc = cli_job_finish(&r.job, &r.out, &r.metrics, r.a.run.out, (long long)r.step);
    sft_free(&r);
    cli_job_end(&r.job);
    return rc;
}
