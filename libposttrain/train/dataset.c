/* SFT datasets: creation, options and free; a seeded evaluation split,
 * per-epoch seeded shuffling, and batches with or without packing (packed
 * examples get their own segment id and positions restarting at 0, so they
 * never attend to each other); the evaluation loss and the position.  The
 * examples come from dataset_load.c. */
#include "dataset_internal.h"

#include "core/core.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int pt_dataset_options_init(pt_dataset_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->max_length = 512;
    opts->completion_only = true;
    opts->add_eos = true;
    opts->batch_size = 8;
    opts->shuffle = true;
    return PT_OK;
}

PT_ZERO_INIT(pt_dataset_stats_init, pt_dataset_stats, stats)

/* The fields of full options (read with PT_STRUCT_READ). */
static int check_options(const pt_dataset_options *o)
{
    if (o->max_length < 2 || o->max_length > (1 << 20))
        return pt__err(PT_EINVAL, "dataset options: max_length %d is not in [2, 1048576]", o->max_length);
    if (o->batch_size < 1 || o->batch_size > 65536)
        return pt__err(PT_EINVAL, "dataset options: batch_size %d is not in [1, 65536]", o->batch_size);
    if (!(o->eval_fraction >= 0 && o->eval_fraction < 1))
        return pt__err(PT_EINVAL, "dataset options: eval_fraction %g is not in [0, 1)", o->eval_fraction);
    return PT_OK;
}

int pt__dataset_create_for(pt_dataset **out, const pt_dataset_options *opts, const char *func)
{
    *out = NULL;
    pt_dataset_options local;
    const pt_dataset_options *o = &local;
    pt_dataset_options_init(&local);
    int st = pt__struct_read(&local, sizeof local, opts, func, "pt_dataset_options_init");
    if (st || (st = check_options(o)))
        return st;
    pt_dataset *d = pt__calloc(1, sizeof *d);
    if (!d)
        return PT_ENOMEM;
    d->opts = *o;
    if (o->chat_template) {
        d->chat_template_name = pt__strdup(o->chat_template);
        if (!d->chat_template_name) {
            free(d);
            return PT_ENOMEM;
        }
    }
    d->opts.chat_template = d->chat_template_name;
    pt_dataset_stats_init(&d->stats);
    size_t cells = (size_t)o->batch_size * (size_t)o->max_length;
    d->b_ids = pt__malloc_array(cells, sizeof(int32_t));
    d->b_tgt = pt__malloc_array(cells, sizeof(int32_t));
    d->b_pos = pt__malloc_array(cells, sizeof(int32_t));
    d->b_seg = pt__malloc_array(cells, sizeof(int32_t));
    d->b_w = pt__malloc_array(cells, sizeof(float));
    d->b_rows = pt__malloc_array((size_t)o->batch_size, sizeof *d->b_rows);
    if (!d->b_ids || !d->b_tgt || !d->b_pos || !d->b_seg || !d->b_w || !d->b_rows) {
        pt_dataset_free(d);
        return PT_ENOMEM;
    }
    *out = d;
    return PT_OK;
}

int pt_dataset_create(pt_dataset **out, const pt_dataset_options *opts)
{
    PT_CHECK_NULL(out);
    return pt__dataset_create_for(out, opts, __func__);
}

void pt_dataset_free(pt_dataset *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_ex; i++) {
        free(d->ex[i].ids);
        free(d->ex[i].mask);
    }
    free(d->ex);
    free(d->train);
    free(d->eval);
    free(d->order);
    free(d->b_ids);
    free(d->b_tgt);
    free(d->b_pos);
    free(d->b_seg);
    free(d->b_w);
    free(d->b_rows);
    free(d->chat_template_name);
    free(d);
}

static void shuffle(size_t *v, size_t n, uint64_t seed)
{
    pt_rng r;
    pt__rng_seed(&r, seed);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)pt__rng_below(&r, i);
        size_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* Split (once per change of the example set) with the seed: a seeded
 * permutation, the first eval_fraction of it held out. */
static int ensure_split(pt_dataset *d)
{
    if (d->split_done)
        return PT_OK;
    size_t n = d->n_ex;
    size_t *perm = pt__malloc_array(n ? n : 1, sizeof *perm);
    size_t *train = pt__malloc_array(n ? n : 1, sizeof *train);
    size_t *order = pt__malloc_array(n ? n : 1, sizeof *order);
    size_t *eval = pt__malloc_array(n ? n : 1, sizeof *eval);
    if (!perm || !train || !order || !eval) {
        free(perm); free(train); free(order); free(eval);
        return PT_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    shuffle(perm, n, d->opts.seed ^ 0x5EED5EED5EED5EEDull);
    size_t n_eval = (size_t)floor(d->opts.eval_fraction * (double)n + 0.5);
    if (d->opts.eval_fraction > 0 && n_eval == 0 && n > 1)
        n_eval = 1;
    if (n_eval >= n && n > 0)
        n_eval = n - 1;
    /* Keep file order inside each split; shuffling happens per epoch. */
    size_t ne = 0, nt = 0;
    bool *is_eval = pt__calloc(n ? n : 1, 1);
    if (!is_eval) {
        free(perm); free(train); free(order); free(eval);
        return PT_ENOMEM;
    }
    for (size_t i = 0; i < n_eval; i++)
        is_eval[perm[i]] = true;
    for (size_t i = 0; i < n; i++) {
        if (is_eval[i])
            eval[ne++] = i;
        else
            train[nt++] = i;
    }
    free(is_eval);
    free(perm);
    free(d->train);
    free(d->eval);
    free(d->order);
    d->train = train;
    d->eval = eval;
    d->order = order;
    d->n_train = nt;
    d->n_eval = ne;
    d->split_done = true;
    d->order_valid = false;
    d->stats.train_examples = (int64_t)nt;
    d->stats.eval_examples = (int64_t)ne;
    d->stats.train_tokens = d->stats.train_target_tokens = 0;
    for (size_t i = 0; i < nt; i++) {
        const example *e = &d->ex[train[i]];
        d->stats.train_tokens += e->len;
        for (int t = 1; t < e->len; t++)
            d->stats.train_target_tokens += e->mask[t] != 0;
    }
    return PT_OK;
}

/* ensure_split, then PT_ESTATE naming func when the training (or with
 * eval the evaluation) part is empty. */
static int ensure_part(pt_dataset *d, bool eval, const char *func)
{
    int st = ensure_split(d);
    if (st)
        return st;
    if ((eval ? d->n_eval : d->n_train) == 0)
        return pt__err(PT_ESTATE, "%s: the dataset has no %s", func,
                      eval ? "evaluation split (set eval_fraction)" : "training examples");
    return PT_OK;
}

static void make_order(pt_dataset *d)
{
    for (size_t i = 0; i < d->n_train; i++)
        d->order[i] = d->train[i];
    if (d->opts.shuffle)
        shuffle(d->order, d->n_train, d->opts.seed + 0x9E3779B97F4A7C15ull * (uint64_t)(d->epoch + 1));
    d->order_valid = true;
}

/* Place example e at row r, column c (with segment seg); return columns used. */
static void place(pt_dataset *d, int T, int r, int c, const example *e, int seg)
{
    for (int t = 0; t < e->len; t++) {
        size_t i = (size_t)r * T + (size_t)(c + t);
        d->b_ids[i] = e->ids[t];
        d->b_pos[i] = t;
        d->b_seg[i] = seg;
        bool trained = t + 1 < e->len && e->mask[t + 1];
        d->b_tgt[i] = trained ? e->ids[t + 1] : -1;
        d->b_w[i] = trained ? 1.0f : 0.0f;
    }
}

static void clear_rows(pt_dataset *d, size_t cells)
{
    for (size_t i = 0; i < cells; i++) {
        d->b_ids[i] = 0;
        d->b_tgt[i] = -1;
        d->b_pos[i] = 0;
        d->b_seg[i] = -1;
        d->b_w[i] = 0.0f;
    }
}

/* A batch of B rows of T over the dataset's token and target buffers (the
 * caller adds positions and segments when the rows carry them). */
static void batch_view(pt_batch *b, const pt_dataset *d, int B, int T)
{
    pt_batch_init(b);
    b->batch = B;
    b->seq = T;
    b->input_ids = d->b_ids;
    b->targets = d->b_tgt;
}

/* Next training example, wrapping into a new (reshuffled) epoch. */
static const example *next_example(pt_dataset *d)
{
    if (!d->order_valid || d->cursor >= (int64_t)d->n_train) {
        if (d->order_valid && d->cursor >= (int64_t)d->n_train) {
            d->epoch++;
            d->cursor = 0;
        }
        make_order(d);
    }
    return &d->ex[d->order[d->cursor++]];
}

static const example *peek_example(pt_dataset *d)
{
    if (!d->order_valid || d->cursor >= (int64_t)d->n_train)
        return NULL; /* packing never spans an epoch boundary */
    return &d->ex[d->order[d->cursor]];
}

int pt_dataset_next_batch(pt_batch *batch, const float **weights, pt_dataset *dataset)
{
    PT_CHECK_NULL(batch);
    PT_CHECK_NULL(weights);
    *weights = NULL;
    PT_CHECK_NULL(dataset);
    int st = PT_STRUCT_CHECK_OUT(batch, pt_batch, pt_batch_init);
    if (!st)
        st = ensure_part(dataset, false, __func__);
    if (st)
        return st;
    const int B = dataset->opts.batch_size;
    int T = dataset->opts.max_length;
    if (dataset->opts.pack) {
        clear_rows(dataset, (size_t)B * T);
        for (int r = 0; r < B; r++) {
            const example *e = next_example(dataset);
            int c = 0, seg = 0;
            place(dataset, T, r, c, e, seg++);
            c += e->len;
            const example *p;
            while ((p = peek_example(dataset)) && c + p->len <= T) {
                dataset->cursor++;
                place(dataset, T, r, c, p, seg++);
                c += p->len;
            }
        }
    } else {
        const example **rows = dataset->b_rows;
        int longest = 1;
        for (int r = 0; r < B; r++) {
            rows[r] = next_example(dataset);
            if (rows[r]->len > longest)
                longest = rows[r]->len;
        }
        T = longest;
        clear_rows(dataset, (size_t)B * T);
        for (int r = 0; r < B; r++)
            place(dataset, T, r, 0, rows[r], 0);
    }
    dataset->stats.epoch = dataset->epoch;
    dataset->stats.cursor = dataset->cursor;
    pt_batch full;
    batch_view(&full, dataset, B, T);
    full.positions = dataset->b_pos;
    full.segments = dataset->opts.pack ? dataset->b_seg : NULL;
    pt__struct_write(batch, &full);
    *weights = dataset->b_w;
    return PT_OK;
}

int pt_dataset_eval_loss(double *loss, double *tokens, pt_dataset *dataset, pt_context *ctx)
{
    PT_CHECK_NULL(loss);
    PT_CHECK_NULL(dataset);
    PT_CHECK_NULL(ctx);
    int st = ensure_part(dataset, true, __func__);
    if (st)
        return st;
    const int B = dataset->opts.batch_size;
    double sum = 0, count = 0;
    float *lp = pt__malloc_array((size_t)B * (size_t)dataset->opts.max_length, sizeof *lp);
    if (!lp || (st = pt__context_take(ctx, __func__))) {
        free(lp);
        return lp ? st : PT_ENOMEM;
    }
    for (size_t first = 0; first < dataset->n_eval && !st; first += (size_t)B) {
        int rows = (int)(dataset->n_eval - first < (size_t)B ? dataset->n_eval - first : (size_t)B);
        int T = 1;
        for (int r = 0; r < rows; r++)
            if (dataset->ex[dataset->eval[first + (size_t)r]].len > T)
                T = dataset->ex[dataset->eval[first + (size_t)r]].len;
        clear_rows(dataset, (size_t)rows * T);
        for (int r = 0; r < rows; r++)
            place(dataset, T, r, 0, &dataset->ex[dataset->eval[first + (size_t)r]], 0);
        pt_batch b;
        batch_view(&b, dataset, rows, T);
        if ((st = pt__ctx_forward(ctx, &b, lp, NULL)))
            break;
        for (size_t i = 0; i < (size_t)rows * (size_t)T; i++)
            if (dataset->b_w[i] > 0) {
                sum -= (double)dataset->b_w[i] * lp[i];
                count += dataset->b_w[i];
            }
    }
    pt__context_give(ctx);
    free(lp);
    if (st)
        return pt__err_in(__func__, st);
    *loss = count > 0 ? sum / count : 0.0;
    if (tokens)
        *tokens = count;
    return PT_OK;
}

int pt_dataset_max_seq(int *seq, const pt_dataset *dataset)
{
    PT_CHECK_NULL(seq);
    PT_CHECK_NULL(dataset);
    *seq = dataset->opts.max_length;
    return PT_OK;
}

int pt_dataset_get_stats(pt_dataset_stats *stats, const pt_dataset *dataset)
{
    PT_CHECK_NULL(stats);
    PT_CHECK_NULL(dataset);
    int st = PT_STRUCT_CHECK_OUT(stats, pt_dataset_stats, pt_dataset_stats_init);
    if (st || (st = ensure_split((pt_dataset *)dataset)))
        return st;
    pt_dataset_stats local = dataset->stats;
    local.epoch = dataset->epoch;
    local.cursor = dataset->cursor;
    pt__struct_write(stats, &local);
    return PT_OK;
}

int pt_dataset_get_position(int64_t *epoch, int64_t *cursor, const pt_dataset *dataset)
{
    PT_CHECK_NULL(epoch);
    PT_CHECK_NULL(cursor);
    PT_CHECK_NULL(dataset);
    *epoch = dataset->epoch;
    *cursor = dataset->order_valid ? dataset->cursor : 0;
    return PT_OK;
}

int pt_dataset_set_position(pt_dataset *dataset, int64_t epoch, int64_t cursor)
{
    PT_CHECK_NULL(dataset);
    int st = ensure_split(dataset);
    if (st)
        return st;
    if (epoch < 0 || cursor < 0 || cursor > (int64_t)dataset->n_train)
        return pt__err(PT_ERANGE, "pt_dataset_set_position: epoch %lld cursor %lld out of range (%zu training examples)",
                      (long long)epoch, (long long)cursor, dataset->n_train);
    dataset->epoch = epoch;
    make_order(dataset);
    dataset->cursor = cursor;
    return PT_OK;
}
