/* pt_plot_metrics_svg: the SVG of a metrics file (one polyline per series
 * present with one point per number, drawn in the values' order, min/max
 * labels, escaped text, only finite coordinates) and its errors (nothing
 * written on failure). */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "posttrain/posttrain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char *g_dir;

static char *path_in(const char *name)
{
    static char p[4][4096];
    static int k;
    char *s = p[k++ % 4];
    snprintf(s, 4096, "%s/%s", g_dir, name);
    return s;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    fclose(f);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *buf = calloc(1, 1 << 20);
    ck_assert_ptr_nonnull(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    ck_assert(feof(f));
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void before(const char *svg, const char *a, const char *b)
{
    const char *pa = strstr(svg, a), *pb = strstr(svg, b);
    ck_assert_msg(pa && pb && pa < pb, "%s is not before %s", a, b);
}

static size_t count(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The points of the polyline in the panel with id `name`: x and y arrays. */
static size_t points_of(const char *svg, const char *name, double *x, double *y, size_t max)
{
    char id[64];
    snprintf(id, sizeof id, "id=\"%s\"", name);
    const char *g = strstr(svg, id);
    ck_assert_msg(g != NULL, "no panel %s", name);
    const char *end = strstr(g, "</g>");
    const char *pl = strstr(g, "<polyline");
    ck_assert_msg(pl && pl < end, "panel %s has no polyline", name);
    ck_assert_int_eq(count(g, "<polyline") - count(end, "<polyline"), 1);
    const char *p = strstr(pl, "points=\"") + strlen("points=\"");
    size_t n = 0;
    while (*p != '"') {
        char *e;
        ck_assert_uint_lt(n, max);
        x[n] = strtod(p, &e);
        ck_assert_int_eq(*e, ',');
        y[n] = strtod(e + 1, &e);
        ck_assert(isfinite(x[n]) && isfinite(y[n]));
        n++;
        p = e;
        while (*p == ' ')
            p++;
    }
    return n;
}

/* The text of the panel with id `name` up to its end. */
static char *panel_text(const char *svg, const char *name)
{
    char id[64];
    snprintf(id, sizeof id, "id=\"%s\"", name);
    const char *g = strstr(svg, id);
    ck_assert_ptr_nonnull(g);
    const char *end = strstr(g, "</g>");
    return strndup(g, (size_t)(end - g));
}

START_TEST(test_svg)
{
    const char *m = path_in("m.jsonl"), *out = path_in("m.svg");
    write_text(m, "{\"step\": 1, \"loss\": 3.0, \"lr\": 0.001, \"reward\": null}\n"
                  "{\"step\": 2, \"loss\": 2.5, \"lr\": 0.001, \"reward\": null}\n"
                  "\n"
                  "{\"step\": 3, \"loss\": null, \"lr\": 0.001, \"reward\": null}\n"
                  "{\"step\": 4, \"loss\": 1.5, \"lr\": 0.001, \"skipped\": false}\n");
    pt_plot_options o;
    ck_assert_ok(pt_plot_options_init(&o));
    ck_assert_int_eq(o.width, 720);
    ck_assert_int_eq(o.height, 0);
    ck_assert_ptr_null(o.title);
    ck_assert_uint_eq(o.series, 0);
    o.title = "run <a> & \"b\"";
    ck_assert_ok(pt_plot_metrics_svg(m, out, &o));
    char *svg = read_text(out);
    ck_assert_msg(!strncmp(svg, "<?xml", 5) || !strncmp(svg, "<svg", 4), "starts with %.20s", svg);
    const char *root = strstr(svg, "<svg");
    ck_assert_ptr_nonnull(root);
    ck_assert_ptr_nonnull(strstr(root, "xmlns=\"http://www.w3.org/2000/svg\""));
    ck_assert_ptr_nonnull(strstr(svg, "width=\"720\" height=\"380\"")); /* 40 + 2 panels of 170 */
    ck_assert_ptr_nonnull(strstr(svg, "</svg>\n"));
    /* loss and lr, not the all-null reward nor the absent series */
    ck_assert_uint_eq(count(svg, "<polyline"), 2);
    ck_assert_ptr_null(strstr(svg, "id=\"reward\""));
    ck_assert_ptr_null(strstr(svg, "id=\"kl\""));
    ck_assert_ptr_null(strstr(svg, "nan"));
    ck_assert_ptr_null(strstr(svg, "inf"));
    ck_assert_ptr_null(strstr(svg, "NaN"));
    /* the title escaped, never raw */
    ck_assert_ptr_nonnull(strstr(svg, "run &lt;a&gt; &amp; &quot;b&quot;"));
    ck_assert_ptr_null(strstr(svg, "<a>"));

    double x[8], y[8];
    ck_assert_uint_eq(points_of(svg, "loss", x, y, 8), 3); /* steps 1, 2, 4 */
    ck_assert(x[0] < x[1] && x[1] < x[2]);
    /* step 2 is a third of the way from step 1 to step 4 */
    ck_assert_double_eq_tol((x[1] - x[0]) / (x[2] - x[0]), 1.0 / 3, 1e-3);
    /* higher loss is higher up: smaller y; 3.0 at the top, 1.5 at the bottom */
    ck_assert(y[0] < y[1] && y[1] < y[2]);
    ck_assert_double_eq_tol((y[1] - y[0]) / (y[2] - y[0]), 1.0 / 3, 1e-3);
    char *lp = panel_text(svg, "loss");
    ck_assert_ptr_nonnull(strstr(lp, ">3</text>"));
    ck_assert_ptr_nonnull(strstr(lp, ">1.5</text>"));
    ck_assert_ptr_nonnull(strstr(lp, ">loss</text>"));
    ck_assert_ptr_nonnull(strstr(lp, ">step</text>"));
    ck_assert_ptr_nonnull(strstr(lp, ">1</text>"));
    ck_assert_ptr_nonnull(strstr(lp, ">4</text>"));
    free(lp);
    ck_assert_uint_eq(points_of(svg, "lr", x, y, 8), 4);
    ck_assert(y[0] == y[1] && y[1] == y[2] && y[2] == y[3]); /* constant: one flat line */
    char *rp = panel_text(svg, "lr");
    ck_assert_uint_eq(count(rp, ">0.001</text>"), 2);
    free(rp);
    /* the loss panel above the lr panel */
    before(svg, "id=\"loss\"", "id=\"lr\"");
    free(svg);

    /* one series chosen, a given size, NULL options */
    o.series = PT_PLOT_LR;
    o.width = 400;
    o.height = 300;
    ck_assert_ok(pt_plot_metrics_svg(m, out, &o));
    svg = read_text(out);
    ck_assert_uint_eq(count(svg, "<polyline"), 1);
    ck_assert_ptr_nonnull(strstr(svg, "id=\"lr\""));
    ck_assert_ptr_nonnull(strstr(svg, "width=\"400\" height=\"300\""));
    free(svg);
    ck_assert_ok(pt_plot_metrics_svg(m, out, NULL));
    svg = read_text(out);
    ck_assert_uint_eq(count(svg, "<polyline"), 2);
    ck_assert_ptr_nonnull(strstr(svg, m)); /* the default title is the path */
    free(svg);
}
END_TEST

START_TEST(test_grpo_rows)
{
    const char *m = path_in("g.jsonl"), *out = path_in("g.svg");
    write_text(m, "{\"step\": 1, \"reward\": 0.25, \"rewards/exact/mean\": 0.25, \"loss\": 0.1, \"kl\": 0, "
                  "\"lr\": 1e-06}\n"
                  "{\"step\": 2, \"reward\": 0.75, \"rewards/exact/mean\": 0.5, \"loss\": -0.2, \"kl\": 0.02, "
                  "\"lr\": 1e-06}\n");
    ck_assert_ok(pt_plot_metrics_svg(m, out, NULL));
    char *svg = read_text(out);
    ck_assert_uint_eq(count(svg, "<polyline"), 5); /* loss reward kl accuracy lr */
    double x[4], y[4];
    ck_assert_uint_eq(points_of(svg, "accuracy", x, y, 4), 2);
    ck_assert(y[0] > y[1]); /* 0.25 below 0.5 */
    ck_assert_uint_eq(points_of(svg, "loss", x, y, 4), 2);
    ck_assert(y[0] < y[1]); /* 0.1 above -0.2 */
    char *lp = panel_text(svg, "loss");
    ck_assert_ptr_nonnull(strstr(lp, ">-0.2</text>"));
    free(lp);
    ck_assert_ptr_null(strstr(svg, "nan"));
    ck_assert_ptr_null(strstr(svg, "inf"));
    /* the order of the panels: loss, reward, kl, accuracy, lr */
    before(svg, "id=\"loss\"", "id=\"reward\"");
    before(svg, "id=\"kl\"", "id=\"accuracy\"");
    free(svg);

    /* one point: a dot as well as the polyline */
    write_text(m, "{\"step\": 7, \"loss\": 2}\n");
    ck_assert_ok(pt_plot_metrics_svg(m, out, NULL));
    svg = read_text(out);
    ck_assert_uint_eq(count(svg, "<polyline"), 1);
    ck_assert_uint_eq(count(svg, "<circle"), 1);
    ck_assert_uint_eq(points_of(svg, "loss", x, y, 4), 1);
    free(svg);
}
END_TEST

/* out holds "keep" before the call and after it. */
static void expect_untouched(const char *out)
{
    char *s = read_text(out);
    ck_assert_str_eq(s, "keep");
    free(s);
}

START_TEST(test_errors)
{
    const char *m = path_in("e.jsonl"), *out = path_in("e.svg");
    write_text(out, "keep");
    ck_assert_status(pt_plot_metrics_svg(path_in("missing.jsonl"), out, NULL), PT_ENOTFOUND, "missing.jsonl");
    expect_untouched(out);

    write_text(m, "{\"step\": 1, \"loss\": 1}\n{\"step\": 2, \"loss\": \n");
    ck_assert_status(pt_plot_metrics_svg(m, out, NULL), PT_EFORMAT, "line 2");
    expect_untouched(out);

    write_text(m, "{\"step\": 1, \"loss\": 1}\n\n{\"loss\": 2}\n");
    ck_assert_status(pt_plot_metrics_svg(m, out, NULL), PT_EFORMAT, "line 3: no numeric \"step\"");
    expect_untouched(out);
    write_text(m, "{\"step\": \"1\", \"loss\": 1}\n");
    ck_assert_status(pt_plot_metrics_svg(m, out, NULL), PT_EFORMAT, "line 1: no numeric \"step\"");

    write_text(m, "{\"step\": 1, \"loss\": null, \"tokens\": 5}\n{\"step\": 2, \"loss\": \"x\"}\n");
    char want[4200];
    snprintf(want, sizeof want, "no numeric series in %s", m);
    ck_assert_status(pt_plot_metrics_svg(m, out, NULL), PT_EINVAL, want);
    expect_untouched(out);
    write_text(m, "");
    ck_assert_status(pt_plot_metrics_svg(m, out, NULL), PT_EINVAL, want);
    /* a series chosen that the file does not have */
    write_text(m, "{\"step\": 1, \"loss\": 1}\n");
    pt_plot_options o;
    pt_plot_options_init(&o);
    o.series = PT_PLOT_KL;
    ck_assert_status(pt_plot_metrics_svg(m, out, &o), PT_EINVAL, want);
    expect_untouched(out);

    /* options and arguments */
    pt_plot_options_init(&o);
    o.width = 10;
    ck_assert_status(pt_plot_metrics_svg(m, out, &o), PT_EINVAL, "pt_plot_metrics_svg: width 10");
    pt_plot_options_init(&o);
    o.height = 50;
    ck_assert_status(pt_plot_metrics_svg(m, out, &o), PT_EINVAL, "pt_plot_metrics_svg: height 50");
    pt_plot_options_init(&o);
    o.series = 1u << 20;
    ck_assert_status(pt_plot_metrics_svg(m, out, &o), PT_EINVAL, "series");
    pt_plot_options_init(&o);
    o.title = "\xff";
    ck_assert_status(pt_plot_metrics_svg(m, out, &o), PT_EINVAL, "title is not valid UTF-8");
    pt_plot_options_init(&o);
    o.size = sizeof o + 8;
    ck_assert_status(pt_plot_metrics_svg(m, out, &o), PT_EINVAL, "pt_plot_options_init");
    /* two panels need more than 140 pixels */
    write_text(m, "{\"step\": 1, \"loss\": 1, \"lr\": 1}\n");
    pt_plot_options_init(&o);
    o.height = 200;
    ck_assert_status(pt_plot_metrics_svg(m, out, &o), PT_EINVAL, "2 panels");
    ck_assert_status(pt_plot_metrics_svg(NULL, out, NULL), PT_EINVAL, "metrics_path is NULL");
    ck_assert_status(pt_plot_metrics_svg(m, NULL, NULL), PT_EINVAL, "svg_path is NULL");
    ck_assert_status(pt_plot_metrics_svg(m, path_in("no/such/dir.svg"), NULL), PT_EIO, "no/such");
    expect_untouched(out);
    ck_assert_int_eq(pt_has_feature("plot"), 1);
}
END_TEST

int main(void)
{
    /* (pt_test_tmpdir asserts, which Check allows only inside a test) */
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/pt_plot_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl))
        return EXIT_FAILURE;
    g_dir = strdup(tmpl);
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("plot");
    tcase_add_test(tc, test_svg);
    tcase_add_test(tc, test_grpo_rows);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    int rc = pt_test_run(s);
    pt_test_rm_rf(g_dir);
    free(g_dir);
    return rc;
}
