/* The output side of the training commands, on the library's run layer
 * (include/posttrain/run.h): the CLI's options become pt_run_options, the
 * run's messages are printed as the CLI's, and the metrics rows the
 * commands print are handed to pt_run_log one at a time. */
#include "cli.h"

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

int cli_out_start(cli_out *o, const char *cmd, const char *out, const char *metrics, const char *model,
                  const char *data, const char **resume, bool overwrite)
{
    o->run = NULL;
    o->resume[0] = '\0';
    if (overwrite && *resume)
        return cli_usage_error(cmd, "give --resume or --overwrite, not both");
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
    ro.dist = o->dist;
    ro.goodput = o->goodput;
    ro.save_every = o->save_every > 0 ? o->save_every : 0;
    ro.save_auto = o->save_auto;
    ro.mtbf_seconds = o->mtbf_seconds;
    ro.keep_last = o->keep_last;
    ro.keep_every = o->keep_every;
    ro.check_every = o->check_every;
    ro.on_mismatch = o->on_mismatch ? o->on_mismatch : PT_RUN_ROLLBACK;
    ro.test_flip_rank = o->flip_rank;
    ro.test_flip_step = o->flip_step;
    ro.inputs = inputs;
    ro.n_inputs = 2;
    int st = pt_run_open(&o->run, &ro);
    if (st == PT_EINVAL)
        return cli_usage_error(cmd, "%s", run_message());
    if (st == PT_EEXIST)
        return cli_usage_error(cmd, "%s: give --resume auto to continue it or --overwrite to replace it",
                               run_message());
    if (st == PT_ENOTFOUND)
        return cli_usage_error(cmd, "--resume auto: %s; give --overwrite to start again", run_message());
    if (st) { /* PT_EPEER: rank 0 failed and said why */
        if (st != PT_EPEER)
            fprintf(stderr, "posttrain %s: %s\n", cmd, run_message());
        return 1;
    }
    snprintf(o->metrics, sizeof o->metrics, "%s", pt_run_metrics_path(o->run));
    if (auto_resume) {
        const char *dir = pt_run_resume_dir(o->run);
        if (dir) {
            snprintf(o->resume, sizeof o->resume, "%s", dir);
            *resume = o->resume;
            cli_note("posttrain %s: --resume auto: the latest checkpoint is %s\n", cmd, o->resume);
        } else {
            *resume = NULL;
            cli_note("posttrain %s: --resume auto: %s holds no run yet; starting at step 0\n", cmd, out);
        }
    }
    if (pt_run_rank(o->run) == 0)
        g_rows.out = o;
    return 0;
}

void cli_out_end(cli_out *o)
{
    if (g_rows.out == o)
        g_rows.out = NULL;
    pt_run_close(o->run);
    o->run = NULL;
}

int cli_run_fail(const char *cmd, const char *what, int status)
{
    (void)status;
    fprintf(stderr, "posttrain %s: %s: %s\n", cmd, what, run_message());
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

int cli_metrics_failed(const char *cmd, const char *out)
{
    const char *why = g_rows.out ? pt_run_metrics_error(g_rows.out->run) : NULL;
    if (!why)
        return 0;
    fprintf(stderr, "posttrain %s: failed: the metrics file %s could not be written (%s), so it lacks the rows "
                    "after the failure; the model was saved to %s\n", cmd, g_rows.out->metrics, why, out);
    return 1;
}

int cli_metrics_trim(const char *cmd, long long step)
{
    if (!g_rows.out || pt_run_trim_metrics(g_rows.out->run, step) == PT_OK)
        return 0;
    fprintf(stderr, "posttrain %s: %s\n", cmd, run_message());
    return 1;
}
