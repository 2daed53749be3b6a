/* The output side of the training commands, on the library's run layer
 * (include/posttrain/run.h): the checkpoint and output options, the run
 * opened from them and the job's (rank 0's hold on --out, --resume auto's
 * choice broadcast), the run's messages printed as the CLI's, the metrics
 * rows the commands print handed to pt_run_log one at a time, and the end
 * of a run (goodput line and row, plot). */
#include "cli.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The run of this process (rank 0's), for the metrics rows. */
static struct {
    cli_out *out;
    char *buf;   /* the row being printed (open_memstream) */
    size_t len;
} g_rows;

/* pt_last_error() without the "pt_run_xxx: " the library puts in front. */
static const char *run_message(void)
{
    const char *m = pt_last_error();
    if (!strncmp(m, "pt_run_", 7)) {
        const char *colon = strstr(m, ": ");
        if (colon)
            return colon + 2;
    }
    return m;
}

/* The run's notes (rank 0's) as the CLI's lines. */
static void print_note(int level, const char *text, void *cmd)
{
    (void)level;
    fprintf(stderr, "posttrain %s: %s\n", (const char *)cmd, text);
}

/* ---- the checkpoint and output options ------------------------------------------ */

/* --save-every N or auto (CLI_SAVE_AUTO) into an int. */
static int parse_save_every(void *dst, const char *value, const char *cmd, const char *opt)
{
    if (!strcmp(value, "auto")) {
        *(int *)dst = CLI_SAVE_AUTO;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < 0 || v > 1000000000 || !(value[0] >= '0' && value[0] <= '9'))
        return cli_usage_error(cmd, "%s needs an integer in [0, 1000000000] or 'auto', not '%s'", opt, value);
    *(int *)dst = (int)v;
    return 0;
}

int cli_check_run(const char *cmd, const cli_run_args *r)
{
    if (r->fp32_acts && r->bf16_acts)
        return cli_usage_error(cmd, "give --fp32-activations or --bf16-activations, not both");
    return 0;
}

int cli_run_context(pt_context *ctx, const cli_run_args *r)
{
    int st = PT_OK;
    if (r->grad_ckpt)
        st = pt_context_set_gradient_checkpointing(ctx, true);
    if (!st && (r->fp32_acts || r->bf16_acts))
        st = pt_context_set_bf16_activations(ctx, r->bf16_acts);
    return st;
}

#define RA(field) offsetof(cli_run_args, field)
const cli_opt cli_run_opts[CLI_N_RUN_OPTS] = {
    { CLI_CUSTOM, "save-every", RA(save_every), "N|auto", .def = "0", .parse = parse_save_every,
      .help = "checkpoint every N steps into OUT/checkpoints/step-NNNNNNNN;\n0: none; auto: Young-Daly "
              "(--mtbf-hours)" },
    { CLI_INT64, "keep-last", RA(keep_last), "N", .def = "0", .lo = 0, .hi = 1e9,
      .help = "prune the checkpoints but the last N (and those of --keep-every)\nafter each save; 0 with --keep-every 0: keep all" },
    { CLI_INT64, "keep-every", RA(keep_every), "N", .def = "0", .lo = 0, .hi = 1e9,
      .help = "prune the checkpoints but those of every Nth step (and the last\n--keep-last, and the newest); 0: off" },
    { CLI_PATH, "resume", RA(resume), "CHECKPOINT_DIR",
      .help = "continue from a checkpoint, bit-identically; 'auto': from the\nlatest in OUT/checkpoints (a fresh start when OUT is unused)" },
    { CLI_ENUM, "quantize", RA(quantize), "TYPE", .def = "none", .from_name = pt_quantize_from_name,
      .enum_name = pt_quantize_name,
      .help = "quantize the weights on load: q8_0 or q4_0 (as llama-quantize\n--pure; the base is then frozen: LoRA only; docs/gguf.md)" },
    { CLI_FLAG, "bf16", RA(bf16), .help = "BF16: a frozen base (LoRA) stored in BF16, and\nmixed-precision products where the CPU has BF16\narithmetic (docs/bf16.md); checkpoints stay FP32" },
    { CLI_FLAG, "gradient-checkpointing", RA(grad_ckpt), .help = "keep only each layer's input for the backward and recompute\nthe rest (Hugging Face's gradient_checkpointing): a tenth\nof the activation memory for one more forward; the same\nresults (docs/bf16.md, \"Memory\")" },
    { CLI_FLAG, "fp32-activations", RA(fp32_acts), .help = "with --bf16 and LoRA: keep the activations saved for the\nbackward in FP32, not BF16 (more memory; docs/bf16.md,\n\"Memory\")" },
    { CLI_FLAG, "bf16-activations", RA(bf16_acts), .help = "with --bf16 and full fine-tuning: keep the activations saved\nfor the backward in BF16 (less memory, slower; the default\nwith LoRA; docs/bf16.md, \"Memory\")" },
    { CLI_FLAG, "overwrite", RA(overwrite),
      .help = "replace an earlier run in --out (its metrics, checkpoints,\nadapter); without it a used --out is refused" },
    { CLI_PATH, "metrics", RA(metrics), "FILE", .help = "metrics JSON lines (default OUT/metrics.jsonl)" },
    { CLI_INT, "log-every", RA(log_every), "N", .def = "10", .lo = 1, .hi = 1e9,
      .help = "progress line interval when not on a terminal" },
    { CLI_INT, "max-skipped-steps", RA(max_skipped), "N", .def = "10", .lo = 0, .hi = 1e9,
      .help = "stop the run (exit 1, the model not saved) after N steps in a row\n"
              "skipped as non-finite (a runaway learning rate); 0: never" },
};
#undef RA

void cli_run_opts_with(cli_opt tab[CLI_N_RUN_OPTS], const cli_opt *own, size_t n_own)
{
    for (size_t i = 0; i < CLI_N_RUN_OPTS; i++) {
        tab[i] = cli_run_opts[i];
        for (size_t k = 0; k < n_own; k++)
            if (!strcmp(own[k].name, tab[i].name)) {
                tab[i].help = own[k].help;
                tab[i].def = own[k].def ? own[k].def : tab[i].def;
            }
    }
}

int cli_check_disjoint(const char *cmd, const char *out_opt, const char *out, const char *in_opt, const char *in,
                       bool tree)
{
    pt_run_input input = { in_opt, in, tree };
    int st = pt_run_check_output(out_opt, out, &input);
    if (st == PT_EINVAL)
        return cli_usage_error(cmd, "%s", run_message());
    if (st)
        fprintf(stderr, "posttrain %s: %s\n", cmd, run_message());
    return st ? 1 : 0;
}

int cli_job_out_start(cli_job *j, cli_out *o, const char *out, const char *metrics, const char *model,
                      const char *data, const char **resume, bool overwrite)
{
    o->run = NULL;
    const char *cmd = j->cmd;
    const bool auto_resume = *resume && !strcmp(*resume, "auto");
    const pt_run_input inputs[] = { { "--model", model, false }, { "--data", data, false } };
    pt_run_options ro;
    pt_run_options_init(&ro);
    ro.dir = out;
    ro.metrics = metrics;
    ro.kind = cmd;
    ro.start = overwrite ? PT_RUN_OVERWRITE : auto_resume ? PT_RUN_RESUME_AUTO
                                        : *resume ? PT_RUN_RESUME_FROM : PT_RUN_NEW;
    ro.resume_from = *resume && !auto_resume ? *resume : NULL;
    ro.dist = j->size > 1 ? j->dist : NULL;
    ro.goodput = j->gp;
    ro.save_every = j->save_every > 0 ? j->save_every : 0;
    ro.save_auto = j->save_every == CLI_SAVE_AUTO;
    ro.mtbf_seconds = j->args.mtbf_hours * 3600.0;
    ro.keep_last = o->keep_last;
    ro.keep_every = o->keep_every;
    ro.check_every = j->args.sdc_every;
    ro.on_mismatch = j->args.sdc_action ? j->args.sdc_action : PT_RUN_ROLLBACK;
    ro.test_flip_rank = j->flip_rank;
    ro.test_flip_step = j->flip_step;
    ro.inputs = inputs;
    ro.n_inputs = 2;
    ro.notes = print_note;
    ro.notes_user = (void *)cmd;
    int st = PT_OK, rc = 0;
    if (overwrite && *resume)
        rc = cli_usage_error(cmd, "give --resume or --overwrite, not both");
    else if ((st = pt_run_open(&o->run, &ro)) == PT_EINVAL)
        rc = cli_usage_error(cmd, "%s", run_message());
    else if (st == PT_EEXIST)
        rc = cli_usage_error(cmd, "%s: give --resume auto to continue it or --overwrite to replace it",
                             run_message());
    else if (st == PT_ENOTFOUND)
        rc = cli_usage_error(cmd, "--resume auto: %s; give --overwrite to start again", run_message());
    else if (st) { /* PT_EPEER: rank 0 failed and said why */
        if (st != PT_EPEER)
            fprintf(stderr, "posttrain %s: %s\n", cmd, run_message());
        rc = 1;
    } else if (!rc) {
        if (auto_resume) /* the run noted its choice: a checkpoint, or NULL (a fresh start) */
            *resume = pt_run_resume_dir(o->run);
        if (pt_run_rank(o->run) == 0)
            g_rows.out = o;
    }
    if (j->size > 1) {
        /* every rank took part in the open; rank 0's exit code is the job's */
        int code = rc;
        if ((st = pt_dist_broadcast(j->dist, &code, sizeof code, 0)))
            return rc ? rc : cli_fail("sharing --out's state", st);
        rc = code;
    }
    if (!rc)
        j->run = o->run;
    return rc;
}

void cli_out_end(cli_out *o)
{
    if (g_rows.out == o)
        g_rows.out = NULL;
    pt_run_close(o->run);
    o->run = NULL;
}

int cli_run_fail(const char *cmd, const char *what)
{
    fprintf(stderr, "posttrain %s: %s%s%s\n", cmd, what ? what : "", what ? ": " : "", run_message());
    return 1;
}

/* ---- metrics ------------------------------------------------------------------ */

FILE *cli_open_metrics(const char *cmd)
{
    free(g_rows.buf);
    g_rows.buf = NULL;
    FILE *f = open_memstream(&g_rows.buf, &g_rows.len);
    if (!f)
        fprintf(stderr, "posttrain %s: out of memory\n", cmd);
    return f;
}

void cli_metrics_row(const char *cmd, FILE **f)
{
    if (!*f)
        return;
    bool ok = fclose(*f) == 0;
    *f = NULL;
    int st = ok && g_rows.out && g_rows.len ? pt_run_log(g_rows.out->run, g_rows.buf) : ok ? PT_OK : PT_ENOMEM;
    if (st)
        fprintf(stderr, "posttrain %s: error: %s; no more rows are written, the run goes on to save the model and "
                        "then fails\n", cmd, run_message());
    else
        *f = cli_open_metrics(cmd);
}

void cli_metrics_close(FILE **f)
{
    if (*f)
        fclose(*f);
    *f = NULL;
    free(g_rows.buf);
    g_rows.buf = NULL;
}

/* ---- the end of a run ----------------------------------------------------------- */

static void job_report(cli_job *j, FILE *f, long long step)
{
    char *json = NULL;
    pt_goodput_report r;
    pt_goodput_report_init(&r);
    if (j->run && pt_run_report_json(&json, &r, j->run, step) == PT_OK && j->rank == 0) {
        fprintf(stderr, "posttrain %s: goodput %.3f of %.2f s wall:", j->cmd, r.goodput, r.wall);
        for (int k = 0; k < PT_TIME_KINDS; k++)
            fprintf(stderr, "%s %s %.2f", k ? "," : "", pt_time_kind_name(k), r.seconds[k]);
        fprintf(stderr, "; %lld steps kept, %lld lost\n", (long long)r.steps_kept, (long long)r.steps_lost);
        if (f && fprintf(f, "%s\n", json) > 0)
            fflush(f);
    }
    pt_free(json);
}

int cli_job_finish(cli_job *j, const cli_out *o, FILE **metrics, const char *out, long long step)
{
    job_report(j, *metrics, step);
    cli_metrics_row(j->cmd, metrics);
    if (*metrics) {
        char svg[4096 + 16];
        snprintf(svg, sizeof svg, "%s/metrics.svg", out);
        cli_plot_metrics(j->cmd, pt_run_metrics_path(o->run), svg);
    }
    /* the model is saved; a metrics file that lost rows fails the run */
    const char *why = j->rank == 0 && g_rows.out ? pt_run_metrics_error(g_rows.out->run) : NULL;
    if (why)
        fprintf(stderr, "posttrain %s: failed: the metrics file %s could not be written (%s), so it lacks the "
                        "rows after the failure; the model was saved to %s\n", j->cmd, pt_run_metrics_path(g_rows.out->run),
                why, out);
    return why != NULL;
}
