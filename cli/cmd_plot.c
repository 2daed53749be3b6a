/* posttrain plot METRICS.jsonl --out FILE.svg: the metrics of a run as an SVG. */
#include "cli.h"

#include <stddef.h>
#include <string.h>

typedef struct plot_args {
    const char *out;
    pt_plot_options o;
} cli_args; /* CLI_ARG's */

static const cli_opt k_plot_opts[] = {
    { CLI_PATH, "out", CLI_ARG(out), "FILE.svg", .required = true, .help = "the SVG to write (replaced atomically)" },
    { CLI_INT, "width", CLI_ARG(o.width), "W", .def = "720", .lo = 200, .hi = 10000, .help = "width in pixels" },
    { CLI_INT, "height", CLI_ARG(o.height), "H", .lo = 140, .hi = 100000,
      .help = "height in pixels (default: 170 per panel and 40 for the title)" },
    { CLI_STRING, "title", CLI_ARG(o.title), "T", .help = "the title (default: the metrics file's path)" },
};

static const cli_command k_plot = {
    .name = "plot",
    .usage = "METRICS.jsonl --out FILE.svg [--width W] [--height H] [--title T]",
    .about = "Draw the metrics JSON lines of 'posttrain sft' or 'posttrain grpo' as an SVG that a\n"
             "browser shows: one panel per series the file has (loss, eval_loss, reward, kl,\n"
             "accuracy, lr) against \"step\", with its minimum and maximum; null values are\n"
             "left out.",
    .max_args = 1,
};

int cli_plot_metrics(const char *cmd, const char *metrics, const char *svg)
{
    int st = pt_plot_metrics_svg(metrics, svg, NULL);
    if (st) {
        fprintf(stderr, "posttrain %s: warning: no plot: %s: %s\n", cmd, pt_status_name(st), pt_last_error());
        return st;
    }
    fprintf(stderr, "posttrain %s: plot: %s\n", cmd, svg);
    return 0;
}

int cmd_plot(int argc, char **argv)
{
    cli_args a = { 0 };
    pt_plot_options_init(&a.o);
    cli_rest rest = { 0 };
    int rc = cli_parse_table(&k_plot, k_plot_opts, CLI_COUNT_OF(k_plot_opts), &a, argc, argv, &rest);
    if (rc)
        return cli_exit_code(rc);
    if (rest.n != 1)
        return cli_usage_error("plot", "expected one metrics file");
    if ((rc = cli_check_disjoint("plot", "--out", a.out, "the metrics file", rest.args[0], false)))
        return rc;
    int st = pt_plot_metrics_svg(rest.args[0], a.out, &a.o);
    if (st)
        return cli_fail("plot", st);
    fprintf(stderr, "posttrain plot: wrote %s\n", a.out);
    return 0;
}
