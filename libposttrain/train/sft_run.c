/* What a host's SFT loop needs around pt_sft_step (`posttrain sft` and
 * Python's SFTTrainer share them): the micro-batches of a step copied out
 * of the dataset with a rank's rows of each, the number of steps of a run,
 * the evaluation rule and the metrics row. */
#include "core/core.h"
#include "core/strbuf.h"
#include "train/dataset_internal.h"
#include "posttrain/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the micro-batches of a step ------------------------------------------ */

struct pt_sft_batches {
    int n, rows_cap, seq_cap;  /* micro-batches; rows and tokens per row each can hold */
    int64_t row0, rows;        /* the rows of each micro-batch handed to pt_sft_step */
    int64_t tokens;            /* B*T of the whole job's micro-batches of the last fill */
    pt_batch *shard;
    const float **sw;
    int32_t *ids;              /* 4 arrays per micro-batch: inputs, targets, positions, segments */
    float *w;
};

void pt_sft_batches_free(pt_sft_batches *b)
{
    if (!b)
        return;
    free(b->shard);
    free(b->sw);
    free(b->ids);
    free(b->w);
    free(b);
}

int pt_sft_batches_create(pt_sft_batches **out, const pt_dataset *dataset, int n_micro, int64_t row_begin,
                          int64_t row_count)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(dataset);
    const int B = dataset->opts.batch_size, T = dataset->opts.max_length;
    PT_CHECK_ARG(n_micro >= 1 && n_micro <= 65536, n_micro, "%d is not in [1, 65536]", n_micro);
    PT_CHECK_ARG(row_begin >= 0 && row_begin < B, row_begin, "%lld is not a row of a batch of %d",
                 (long long)row_begin, B);
    if (row_count == 0)
        row_count = B - row_begin;
    PT_CHECK_ARG(row_count >= 1 && row_count <= B - row_begin, row_count,
                 "%lld rows from row %lld do not fit a batch of %d", (long long)row_count, (long long)row_begin, B);
    pt_sft_batches *b = pt__calloc(1, sizeof *b);
    if (!b)
        return PT_ENOMEM;
    const size_t cells = (size_t)B * (size_t)T, n = (size_t)n_micro;
    b->n = n_micro;
    b->rows_cap = B;
    b->seq_cap = T;
    b->row0 = row_begin;
    b->rows = row_count;
    b->shard = pt__calloc(n, sizeof *b->shard);
    b->sw = pt__calloc(n, sizeof *b->sw);
    b->ids = n * 4 <= SIZE_MAX / cells ? pt__malloc_array(n * 4 * cells, sizeof *b->ids) : NULL;
    b->w = pt__malloc_array(n * cells, sizeof *b->w);
    if (!b->shard || !b->sw || !b->ids || !b->w) {
        pt_sft_batches_free(b);
        return pt__err(PT_ENOMEM, "pt_sft_batches_create: out of memory for %d micro-batches of %d x %d",
                       n_micro, B, T);
    }
    *out = b;
    return PT_OK;
}

/* Micro-batch i drawn from the dataset into its own buffers, and its rows
 * [row0, row0 + rows) as shard i. */
static int fill_one(pt_sft_batches *m, int i, pt_dataset *data)
{
    pt_batch b;
    pt_batch_init(&b);
    const float *bw;
    int st = pt_dataset_next_batch(&b, &bw, data);
    if (st)
        return st;
    if (b.batch != m->rows_cap || b.seq > m->seq_cap)
        return pt__err(PT_ESTATE, "pt_sft_batches_fill: a batch of %d x %d does not fit micro-batches of %d x %d "
                       "(a dataset other than the one they were made for?)", b.batch, b.seq, m->rows_cap, m->seq_cap);
    const size_t nc = (size_t)b.batch * (size_t)b.seq, cells = (size_t)m->rows_cap * (size_t)m->seq_cap;
    int32_t *ids = m->ids + (size_t)i * 4 * cells;
    const int32_t *src[4] = { b.input_ids, b.targets, b.positions, b.segments };
    for (int k = 0; k < 4; k++)
        if (src[k])
            memcpy(ids + (size_t)k * cells, src[k], nc * sizeof(int32_t));
    float *w = m->w + (size_t)i * cells;
    memcpy(w, bw, nc * sizeof(float));
    m->tokens += (int64_t)nc;
    const size_t off = (size_t)m->row0 * (size_t)b.seq;
    pt_batch *s = &m->shard[i];
    *s = b;
    s->batch = (int)m->rows;
    s->input_ids = ids + off;
    s->targets = ids + cells + off;
    s->positions = ids + 2 * cells + off;
    s->segments = b.segments ? ids + 3 * cells + off : NULL;
    m->sw[i] = w + off;
    return PT_OK;
}

int pt_sft_batches_fill(pt_sft_batches *batches, pt_dataset *dataset)
{
    PT_CHECK_NULL(batches);
    PT_CHECK_NULL(dataset);
    batches->tokens = 0;
    for (int i = 0; i < batches->n; i++) {
        int st = fill_one(batches, i, dataset);
        if (st)
            return st;
    }
    return PT_OK;
}

const pt_batch *pt_sft_batches_micro(const pt_sft_batches *batches)
{
    return batches ? batches->shard : NULL;
}

const float *const *pt_sft_batches_weights(const pt_sft_batches *batches)
{
    return batches ? batches->sw : NULL;
}

int pt_sft_batches_count(const pt_sft_batches *batches)
{
    return batches ? batches->n : 0;
}

int64_t pt_sft_batches_tokens(const pt_sft_batches *batches)
{
    return batches ? batches->tokens : 0;
}

/* ---- the context ------------------------------------------------------------ */

int pt_sft_context_create(pt_context **out, pt_model *model, const pt_dataset *dataset, int rows)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(dataset);
    const int B = dataset->opts.batch_size;
    PT_CHECK_ARG(rows >= 0 && rows <= B, rows, "%d is not in [0, the batch size %d]", rows, B);
    pt_dataset_stats ds;
    pt_dataset_stats_init(&ds);
    int st = pt_dataset_get_stats(&ds, dataset);
    if (st)
        return st;
    /* batches are as long as their longest row, and no row may exceed the
     * model's positions: neither does the context */
    int seq = dataset->opts.max_length;
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    if (pt_model_get_config(&cfg, model) == PT_OK && seq > cfg.max_position_embeddings)
        seq = cfg.max_position_embeddings;
    return pt_context_create(out, model, ds.eval_examples > 0 || rows == 0 ? B : rows, seq);
}

/* ---- the length of a run and its evaluations ------------------------------- */

int pt_sft_total_steps(int64_t *total, const pt_dataset *dataset, int grad_accum, int64_t steps, double epochs)
{
    PT_CHECK_NULL(total);
    *total = 0;
    PT_CHECK_NULL(dataset);
    PT_CHECK_ARG(grad_accum >= 1, grad_accum, "%d must be >= 1", grad_accum);
    PT_CHECK_ARG(steps >= 0, steps, "%lld must be >= 0", (long long)steps);
    PT_CHECK_ARG(isfinite(epochs) && epochs <= 1e6, epochs, "%g is not a finite number <= 1e6", epochs);
    if (steps > 0) {
        *total = steps;
        return PT_OK;
    }
    pt_dataset_stats ds;
    pt_dataset_stats_init(&ds);
    int st = pt_dataset_get_stats(&ds, dataset);
    if (st)
        return st;
    const pt_dataset_options *o = &dataset->opts;
    double rows_per_step = (double)((int64_t)o->batch_size * grad_accum), ep = epochs > 0 ? epochs : 1.0;
    double examples_per_row = 1.0;
    if (o->pack && ds.train_examples > 0) {
        double mean_len = (double)ds.train_tokens / (double)ds.train_examples;
        examples_per_row = fmax(1.0, floor((double)o->max_length / mean_len));
    }
    int64_t t = (int64_t)ceil(ep * (double)ds.train_examples / (rows_per_step * examples_per_row));
    *total = t < 1 ? 1 : t;
    return PT_OK;
}

bool pt_sft_eval_due(const pt_dataset *dataset, int64_t step, int64_t total, int64_t eval_every)
{
    pt_dataset_stats ds;
    pt_dataset_stats_init(&ds);
    if (!dataset || pt_dataset_get_stats(&ds, dataset) || ds.eval_examples == 0)
        return false;
    return (eval_every > 0 && step % eval_every == 0) || step == total;
}

/* ---- the run state of a checkpoint ------------------------------------------ */

int pt_sft_run_state(pt_run_state *state, const pt_dataset *dataset, const pt_optimizer *opt, int64_t step)
{
    PT_CHECK_NULL(state);
    int st = PT_STRUCT_CHECK_OUT(state, pt_run_state, pt_run_state_init);
    if (st)
        return st;
    PT_CHECK_NULL(dataset);
    PT_CHECK_NULL(opt);
    PT_CHECK_ARG(step >= 0, step, "%lld steps", (long long)step);
    pt_dataset_stats ds;
    pt_dataset_stats_init(&ds);
    if ((st = pt_dataset_get_stats(&ds, dataset)))
        return st;
    pt_run_state s;
    pt_run_state_init(&s);
    pt_dataset_get_position(&s.epoch, &s.cursor, dataset);
    s.optimizer_steps = pt_optimizer_step_count(opt);
    s.step = step;
    s.seed = dataset->opts.seed;
    s.rows = ds.train_examples;
    pt__struct_write(state, &s);
    return PT_OK;
}

/* ---- the metrics row -------------------------------------------------------- */

int pt_sft_row_extra_init(pt_sft_row_extra *extra)
{
    PT_STRUCT_INIT_ZERO(extra);
    extra->eval_loss = NAN;
    return PT_OK;
}

/* ", KEY: V" with V as %.<prec>f (or %.<prec>g when g), or null when it is
 * not finite (JSON has no NaN or infinity). */
static void json_num(pt_strbuf *b, const char *key, bool g, int prec, double v)
{
    pt__strbuf_printf(b, ", \"%s\": ", key);
    if (!isfinite(v))
        pt__strbuf_puts(b, "null");
    else
        pt__strbuf_printf(b, g ? "%.*g" : "%.*f", prec, v);
}

/* A step's stats and row extra from the caller's structs (of any size
 * their _init stamped; extra NULL: the defaults), for `func`. */
static int read_step(pt_sft_stats *s, pt_sft_row_extra *x, const pt_sft_stats *stats, const pt_sft_row_extra *extra,
                     const char *func)
{
    pt_sft_stats_init(s);
    pt_sft_row_extra_init(x);
    int st = pt__struct_read(s, sizeof *s, stats, func, "pt_sft_stats_init");
    return st ? st : pt__struct_read(x, sizeof *x, extra, func, "pt_sft_row_extra_init");
}

int pt_sft_metrics_row(char **json, const pt_sft_stats *stats, const pt_sft_row_extra *extra)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(stats);
    pt_sft_stats s;
    pt_sft_row_extra x;
    int st = read_step(&s, &x, stats, extra, __func__);
    if (st)
        return st;
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_printf(&b, "{\"step\": %lld", (long long)x.step);
    json_num(&b, "loss", false, 6, s.loss);
    json_num(&b, "tokens", false, 0, s.tokens);
    json_num(&b, "grad_norm", true, 6, s.grad_norm);
    json_num(&b, "lr", true, 6, s.lr);
    pt__strbuf_printf(&b, ", \"skipped\": %s", s.skipped ? "true" : "false");
    json_num(&b, "step_seconds", false, 4, x.step_seconds);
    if (x.comm)
        json_num(&b, "comm_seconds", false, 4, s.comm_seconds);
    json_num(&b, "tokens_per_s", false, 1, (double)x.step_tokens / x.step_seconds);
    if (x.eval)
        json_num(&b, "eval_loss", false, 6, x.eval_loss);
    pt__strbuf_putc(&b, '}');
    *json = pt__strbuf_detach(&b, NULL);
    return *json ? PT_OK : b.err;
}

/* ---- the progress of a run -------------------------------------------------- */

/* The time left as "?" (not known), "XmYYs", or from an hour "XhYYm". */
static void put_eta(pt_strbuf *b, double secs)
{
    if (!isfinite(secs) || secs < 0)
        pt__strbuf_puts(b, "?");
    else if (secs >= 3600)
        pt__strbuf_printf(b, "%dh%02dm", (int)(secs / 3600), (int)fmod(secs / 60, 60));
    else
        pt__strbuf_printf(b, "%dm%02ds", (int)(secs / 60), (int)fmod(secs, 60));
}

int pt_sft_progress(char **text, const pt_sft_stats *stats, const pt_sft_row_extra *extra, int64_t total,
                    double tokens_per_s, double eta_seconds, int style)
{
    PT_CHECK_NULL(text);
    *text = NULL;
    PT_CHECK_NULL(stats);
    PT_CHECK_ARG(style == PT_SFT_PROGRESS_LINE || style == PT_SFT_PROGRESS_BAR, style,
                 "%d is not PT_SFT_PROGRESS_LINE or PT_SFT_PROGRESS_BAR", style);
    PT_CHECK_ARG(total >= 1, total, "%lld is not a number of steps", (long long)total);
    pt_sft_stats s;
    pt_sft_row_extra x;
    int st = read_step(&s, &x, stats, extra, __func__);
    if (st)
        return st;
    const long long step = (long long)x.step;
    pt_strbuf b = PT_STRBUF_INIT;
    if (style == PT_SFT_PROGRESS_BAR) {
        const int width = 24, filled = (int)((double)width * (double)step / (double)total);
        pt__strbuf_puts(&b, "\r[");
        for (int i = 0; i < width; i++)
            pt__strbuf_putc(&b, i < filled ? '#' : '.');
        pt__strbuf_printf(&b, "] step %lld/%lld loss %.4f %.0f tok/s ETA ", step, (long long)total, s.loss,
                          tokens_per_s);
        put_eta(&b, eta_seconds);
        pt__strbuf_puts(&b, "   ");
        if (x.eval)
            pt__strbuf_printf(&b, "\n  eval loss %.4f\n", x.eval_loss);
    } else {
        pt__strbuf_printf(&b, "step %lld/%lld loss %.4f lr %.3g grad_norm %.3g %.0f tok/s ETA ", step,
                          (long long)total, s.loss, s.lr, s.grad_norm, tokens_per_s);
        put_eta(&b, eta_seconds);
        if (x.eval)
            pt__strbuf_printf(&b, " eval_loss %.4f", x.eval_loss);
        pt__strbuf_putc(&b, '\n');
    }
    *text = pt__strbuf_detach(&b, NULL);
    return *text ? PT_OK : b.err;
}
