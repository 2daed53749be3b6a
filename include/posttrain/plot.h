/*
 * libposttrain public API: a training run's metrics as an SVG picture.
 *
 * pt_plot_metrics_svg reads a metrics JSONL file (the rows `posttrain sft`
 * and `posttrain grpo` write: one object per step with a numeric "step" and
 * numbers or null under keys such as "loss", "lr", "reward", "kl") and writes
 * one SVG 1.1 file that a browser shows: one panel per series present
 * (numeric in at least one row), stacked vertically, each with its name, its
 * minimum and maximum as tick labels, the first and last step on the x axis
 * and a polyline through its values.  A row whose value is null, missing or
 * not a finite number has no point in that series (the line joins its
 * neighbours).  Nothing to install: the library writes the SVG text itself.
 */
#ifndef POSTTRAIN_PLOT_H
#define POSTTRAIN_PLOT_H

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The series, as bits of pt_plot_options.series (0: all of them).  Each is
 * read from its key; accuracy from "accuracy", or, in rows without that key,
 * "rewards/exact/mean" (the exact-match reward of `posttrain grpo`). */
#define PT_PLOT_LOSS      (1u << 0) /* "loss" */
#define PT_PLOT_EVAL_LOSS (1u << 1) /* "eval_loss" */
#define PT_PLOT_REWARD    (1u << 2) /* "reward" */
#define PT_PLOT_KL        (1u << 3) /* "kl" */
#define PT_PLOT_ACCURACY  (1u << 4) /* "accuracy" / "rewards/exact/mean" */
#define PT_PLOT_LR        (1u << 5) /* "lr" */
#define PT_PLOT_ALL       0x3fu

typedef struct pt_plot_options {
    size_t size;
    int width;          /* pixels, 200 .. 10000 (default 720) */
    int height;         /* pixels of the whole picture, 0 (default): 170 per
                           panel plus the title; otherwise at least 100 per
                           panel plus 40, and at most 100000 */
    const char *title;  /* UTF-8 (escaped in the SVG); NULL (default): the
                           metrics file's path */
    unsigned series;    /* PT_PLOT_* bits; 0 (default): every series present */
} pt_plot_options;

PT_API int pt_plot_options_init(pt_plot_options *opts);

/* Read metrics_path and write svg_path atomically (a failure leaves svg_path
 * as it was).  opts NULL: the defaults.  PT_ENOTFOUND: no metrics file.
 * PT_EFORMAT "<path> line N: ...": a row that is not a JSON object, or
 * without a finite numeric "step".  PT_EINVAL "no numeric series in <path>":
 * none of the chosen series has a number; also a bad option (the title not
 * UTF-8, a size out of range).  PT_EIO / PT_ENOSPC writing. */
PT_API int pt_plot_metrics_svg(const char *metrics_path, const char *svg_path, const pt_plot_options *opts);

#ifdef __cplusplus
}
#endif

#endif
