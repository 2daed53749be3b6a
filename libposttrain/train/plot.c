/* A metrics JSONL file as an SVG picture (include/posttrain/plot.h): one
 * panel per series present, stacked, written with pt_strbuf and committed
 * atomically. */
#include "core/core.h"
#include "core/strbuf.h"
#include "core/utf8.h"
#include "io/fileio.h"
#include "io/jsonl.h"
#include "posttrain/plot.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define N_SERIES 6
#define DEF_WIDTH 720
#define PANEL_H 170   /* a panel's share of the default height */
#define MIN_PANEL_H 100
#define TITLE_H 40    /* the title band at the top */
#define MARGIN_L 80   /* room for the y tick labels */
#define MARGIN_R 20
#define PAD_T 24      /* above a panel's plot area: its name */
#define PAD_B 30      /* below it: the step labels */

static const struct {
    unsigned bit;
    const char *name;      /* the panel's label */
    const char *key, *alt; /* the row keys: key, else alt (may be NULL) */
    const char *color;
} k_series[N_SERIES] = {
    { PT_PLOT_LOSS, "loss", "loss", NULL, "#1f77b4" },
    { PT_PLOT_EVAL_LOSS, "eval_loss", "eval_loss", NULL, "#ff7f0e" },
    { PT_PLOT_REWARD, "reward", "reward", NULL, "#2ca02c" },
    { PT_PLOT_KL, "kl", "kl", NULL, "#d62728" },
    { PT_PLOT_ACCURACY, "accuracy", "accuracy", "rewards/exact/mean", "#9467bd" },
    { PT_PLOT_LR, "lr", "lr", NULL, "#8c564b" },
};

int pt_plot_options_init(pt_plot_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->width = DEF_WIDTH;
    return PT_OK;
}

/* The rows read: steps[i], and val[s][i] (NAN: no point). */
typedef struct plot_data {
    size_t n, cap;
    double *steps;
    double *val[N_SERIES];
} plot_data;

static void data_free(plot_data *d)
{
    pt_free(d->steps);
    for (int s = 0; s < N_SERIES; s++)
        pt_free(d->val[s]);
}

static int data_grow(plot_data *d)
{
    if (d->n < d->cap)
        return PT_OK;
    size_t cap = d->cap ? d->cap * 2 : 64;
    double *p = pt__realloc_array(d->steps, cap, sizeof *p);
    if (!p)
        return PT_ENOMEM;
    d->steps = p;
    for (int s = 0; s < N_SERIES; s++) {
        if (!(p = pt__realloc_array(d->val[s], cap, sizeof *p)))
            return PT_ENOMEM;
        d->val[s] = p;
    }
    d->cap = cap;
    return PT_OK;
}

static double row_number(const cJSON *row, const char *key, const char *alt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    if (!v && alt)
        v = cJSON_GetObjectItemCaseSensitive(row, alt);
    return v && cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : NAN;
}

static int read_rows(plot_data *d, const char *path)
{
    pt_jsonl *r;
    int st = pt__jsonl_open(&r, path, 0);
    if (st)
        return st;
    const cJSON *row;
    while ((st = pt__jsonl_next(r, &row)) == 1) {
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(row, "step");
        if (!step || !cJSON_IsNumber(step) || !isfinite(step->valuedouble)) {
            st = pt__jsonl_err(r, PT_EFORMAT, "no numeric \"step\"");
            break;
        }
        if ((st = data_grow(d)))
            break;
        d->steps[d->n] = step->valuedouble;
        for (int s = 0; s < N_SERIES; s++)
            d->val[s][d->n] = row_number(row, k_series[s].key, k_series[s].alt);
        d->n++;
    }
    pt__jsonl_close(r);
    return st < 0 ? st : PT_OK;
}

/* Text as XML character data: & < > " ' escaped; control characters (not
 * allowed in XML 1.0) and bytes that are not UTF-8 (a path may hold them)
 * shown as '?'. */
static void put_text(pt_strbuf *b, const char *s)
{
    const size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        size_t k = pt__utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (k > 1) {
            pt__strbuf_put(b, s + i, k);
            i += k;
            continue;
        }
        i++;
        switch (c) {
        case '&': pt__strbuf_puts(b, "&amp;"); break;
        case '<': pt__strbuf_puts(b, "&lt;"); break;
        case '>': pt__strbuf_puts(b, "&gt;"); break;
        case '"': pt__strbuf_puts(b, "&quot;"); break;
        case '\'': pt__strbuf_puts(b, "&apos;"); break;
        default: pt__strbuf_putc(b, k == 0 || c < 0x20 || c == 0x7f ? '?' : (char)c); break;
        }
    }
}

static void label(pt_strbuf *b, double x, double y, const char *anchor, const char *text)
{
    pt__strbuf_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\">", x, y, anchor);
    put_text(b, text);
    pt__strbuf_puts(b, "</text>\n");
}

/* A number as a tick label (%.4g; never "nan" or "inf": callers pass finite values). */
static void fmt_num(char *buf, size_t n, double v)
{
    snprintf(buf, n, "%.4g", v == 0 ? 0.0 : v);
}

/* Where v falls between lo and hi on [a, b] (the middle when lo == hi). */
static double scale(double v, double lo, double hi, double a, double b)
{
    if (!(hi > lo))
        return (a + b) / 2;
    double t = (v - lo) / (hi - lo);
    double r = a + t * (b - a);
    return isfinite(r) ? r : (a + b) / 2;
}

static void panel(pt_strbuf *b, const plot_data *d, int s, double top, double ph, int width, double smin,
                  double smax)
{
    double vmin = INFINITY, vmax = -INFINITY;
    for (size_t i = 0; i < d->n; i++) {
        double v = d->val[s][i];
        if (isnan(v))
            continue;
        vmin = v < vmin ? v : vmin;
        vmax = v > vmax ? v : vmax;
    }
    const double x0 = MARGIN_L, x1 = width - MARGIN_R;
    const double y0 = top + PAD_T, y1 = top + ph - PAD_B; /* plot area: y0 at the top */
    char lo[32], hi[32], s0[32], s1[32];
    fmt_num(lo, sizeof lo, vmin);
    fmt_num(hi, sizeof hi, vmax);
    fmt_num(s0, sizeof s0, smin);
    fmt_num(s1, sizeof s1, smax);
    pt__strbuf_printf(b, "<g class=\"panel\" id=\"%s\">\n", k_series[s].name);
    pt__strbuf_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#fafafa\" "
                        "stroke=\"#999\"/>\n", x0, y0, x1 - x0, y1 - y0);
    pt__strbuf_printf(b, "<text x=\"%.2f\" y=\"%.2f\" font-weight=\"bold\">", x0, y0 - 8);
    put_text(b, k_series[s].name);
    pt__strbuf_puts(b, "</text>\n");
    /* y ticks: the maximum at the top, the minimum at the bottom */
    pt__strbuf_printf(b, "<path d=\"M%.2f %.2fH%.2fM%.2f %.2fH%.2f\" stroke=\"#999\"/>\n", x0 - 4, y0, x0, x0 - 4,
                     y1, x0);
    label(b, x0 - 6, y0 + 4, "end", hi);
    label(b, x0 - 6, y1 + 4, "end", lo);
    /* x axis: the first and the last step */
    label(b, x0, y1 + 16, "start", s0);
    label(b, x1, y1 + 16, "end", s1);
    label(b, (x0 + x1) / 2, y1 + 16, "middle", "step");
    pt__strbuf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", k_series[s].color);
    size_t points = 0;
    double px = 0, py = 0;
    for (size_t i = 0; i < d->n; i++) {
        double v = d->val[s][i];
        if (isnan(v))
            continue;
        px = scale(d->steps[i], smin, smax, x0, x1);
        py = scale(v, vmin, vmax, y1, y0);
        pt__strbuf_printf(b, "%s%.2f,%.2f", points++ ? " " : "", px, py);
    }
    pt__strbuf_puts(b, "\"/>\n");
    if (points == 1) /* a line of one point is not drawn: a dot */
        pt__strbuf_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n", px, py,
                         k_series[s].color);
    pt__strbuf_puts(b, "</g>\n");
}

int pt_plot_metrics_svg(const char *metrics_path, const char *svg_path, const pt_plot_options *opts)
{
    PT_CHECK_NULL(metrics_path);
    PT_CHECK_NULL(svg_path);
    pt_plot_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_plot_options_init);
    PT_CHECK_ARG(o.width >= 200 && o.width <= 10000, width, "%d must be in 200 .. 10000", o.width);
    PT_CHECK_ARG(o.height == 0 || (o.height >= MIN_PANEL_H + TITLE_H && o.height <= 100000), height,
                 "%d must be 0 or in %d .. 100000", o.height, MIN_PANEL_H + TITLE_H);
    PT_CHECK_ARG(!(o.series & ~PT_PLOT_ALL), series, "0x%x has bits that are no PT_PLOT_* series", o.series);
    PT_CHECK_ARG(!o.title || pt__utf8_valid(o.title, strlen(o.title)), title, "is not valid UTF-8");
    const unsigned want = o.series ? o.series : PT_PLOT_ALL;

    plot_data d;
    memset(&d, 0, sizeof d);
    int st;
    if ((st = read_rows(&d, metrics_path))) {
        data_free(&d);
        return st;
    }
    bool present[N_SERIES] = { false };
    int n_panels = 0;
    double smin = INFINITY, smax = -INFINITY;
    for (size_t i = 0; i < d.n; i++) {
        smin = d.steps[i] < smin ? d.steps[i] : smin;
        smax = d.steps[i] > smax ? d.steps[i] : smax;
    }
    for (int s = 0; s < N_SERIES; s++) {
        if (!(want & k_series[s].bit))
            continue;
        for (size_t i = 0; i < d.n && !present[s]; i++)
            present[s] = !isnan(d.val[s][i]);
        n_panels += present[s];
    }
    if (!n_panels) {
        data_free(&d);
        return pt__err(PT_EINVAL, "no numeric series in %s", metrics_path);
    }
    int height = o.height ? o.height : TITLE_H + PANEL_H * n_panels;
    double ph = (double)(height - TITLE_H) / n_panels;
    if (ph < MIN_PANEL_H) {
        data_free(&d);
        return pt__err_arg(__func__, "height", "%d leaves less than %d pixels to each of %d panels", o.height,
                          MIN_PANEL_H, n_panels);
    }

    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                         "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
                         "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
                     o.width, height, o.width, height);
    pt__strbuf_puts(&b, "<title>");
    put_text(&b, o.title ? o.title : metrics_path);
    pt__strbuf_puts(&b, "</title>\n");
    pt__strbuf_printf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", o.width, height);
    pt__strbuf_printf(&b, "<text x=\"%.2f\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">", o.width / 2.0);
    put_text(&b, o.title ? o.title : metrics_path);
    pt__strbuf_puts(&b, "</text>\n");
    int k = 0;
    for (int s = 0; s < N_SERIES; s++)
        if (present[s])
            panel(&b, &d, s, TITLE_H + ph * k++, ph, o.width, smin, smax);
    pt__strbuf_puts(&b, "</svg>\n");
    data_free(&d);
    size_t len;
    char *svg = pt__strbuf_detach(&b, &len);
    if (!svg)
        return PT_ENOMEM;
    st = pt__write_file_atomic(svg_path, svg, len);
    pt_free(svg);
    return st;
}
