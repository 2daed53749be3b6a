/* SFT datasets: JSONL rows to tokenized examples with loss masks, a seeded
 * evaluation split, per-epoch seeded shuffling, and batches with or without
 * packing (packed examples get their own segment id and positions restarting
 * at 0, so they never attend to each other). */
#include "core/core.h"
#include "io/jsonl.h"
#include "posttrain/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct example {
    int32_t *ids;
    uint8_t *mask;
    int len;
} example;

struct pt_dataset {
    pt_dataset_options opts;
    char *chat_template_name;
    example *ex;
    size_t n_ex, cap_ex;
    size_t *train, *eval; /* indices into ex */
    size_t n_train, n_eval;
    bool split_done;
    size_t *order;        /* this epoch's permutation of train */
    int64_t epoch, cursor;
    bool order_valid;
    pt_dataset_stats stats;
    /* batch buffers */
    int32_t *b_ids, *b_tgt, *b_pos, *b_seg;
    float *b_w;
};

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

int pt_dataset_stats_init(pt_dataset_stats *stats)
{
    PT_STRUCT_INIT_ZERO(stats);
    return PT_OK;
}

/* The fields of full options (read with PT_STRUCT_READ). */
static int check_options(const pt_dataset_options *o)
{
    if (o->max_length < 2 || o->max_length > (1 << 20))
        return pt_err(PT_EINVAL, "dataset options: max_length %d is not in [2, 1048576]", o->max_length);
    if (o->batch_size < 1 || o->batch_size > 65536)
        return pt_err(PT_EINVAL, "dataset options: batch_size %d is not in [1, 65536]", o->batch_size);
    if (!(o->eval_fraction >= 0 && o->eval_fraction < 1))
        return pt_err(PT_EINVAL, "dataset options: eval_fraction %g is not in [0, 1)", o->eval_fraction);
    return PT_OK;
}

/* pt_dataset_create for the public function `func` (its messages). */
static int dataset_create(pt_dataset **out, const pt_dataset_options *opts, const char *func)
{
    *out = NULL;
    pt_dataset_options local;
    const pt_dataset_options *o = &local;
    pt_dataset_options_init(&local);
    int st = pt_struct_read(&local, sizeof local, opts, func, "pt_dataset_options_init");
    if (st || (st = check_options(o)))
        return st;
    pt_dataset *d = pt_calloc(1, sizeof *d);
    if (!d)
        return PT_ENOMEM;
    d->opts = *o;
    if (o->chat_template) {
        d->chat_template_name = pt_strdup(o->chat_template);
        if (!d->chat_template_name) {
            free(d);
            return PT_ENOMEM;
        }
    }
    d->opts.chat_template = d->chat_template_name;
    pt_dataset_stats_init(&d->stats);
    size_t cells = (size_t)o->batch_size * (size_t)o->max_length;
    d->b_ids = pt_malloc_array(cells, sizeof(int32_t));
    d->b_tgt = pt_malloc_array(cells, sizeof(int32_t));
    d->b_pos = pt_malloc_array(cells, sizeof(int32_t));
    d->b_seg = pt_malloc_array(cells, sizeof(int32_t));
    d->b_w = pt_malloc_array(cells, sizeof(float));
    if (!d->b_ids || !d->b_tgt || !d->b_pos || !d->b_seg || !d->b_w) {
        pt_dataset_free(d);
        return PT_ENOMEM;
    }
    *out = d;
    return PT_OK;
}

int pt_dataset_create(pt_dataset **out, const pt_dataset_options *opts)
{
    PT_CHECK_NULL(out);
    return dataset_create(out, opts, __func__);
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
    free(d->chat_template_name);
    free(d);
}

/* Take ownership of ids/mask (both allocated with malloc); truncate, count. */
static int add_owned(pt_dataset *d, int32_t *ids, uint8_t *mask, size_t n)
{
    d->stats.rows++;
    if (n > (size_t)d->opts.max_length) {
        d->stats.truncated_rows++;
        d->stats.truncated_tokens += (int64_t)(n - (size_t)d->opts.max_length);
        n = (size_t)d->opts.max_length;
    }
    /* A token is trained on when it is predicted: position 0 never is. */
    size_t targets = 0;
    for (size_t i = 1; i < n; i++)
        targets += mask[i] != 0;
    if (targets == 0) {
        d->stats.empty_rows++;
        free(ids);
        free(mask);
        return PT_OK;
    }
    if (d->n_ex == d->cap_ex) {
        size_t cap = d->cap_ex ? 2 * d->cap_ex : 64;
        example *e = pt_realloc_array(d->ex, cap, sizeof *e);
        if (!e) {
            free(ids);
            free(mask);
            return PT_ENOMEM;
        }
        d->ex = e;
        d->cap_ex = cap;
    }
    d->ex[d->n_ex++] = (example){ ids, mask, (int)n };
    d->split_done = false;
    return PT_OK;
}

int pt_dataset_add(pt_dataset *dataset, const int32_t *ids, const uint8_t *loss_mask, size_t n)
{
    PT_CHECK_NULL(dataset);
    PT_CHECK_ARG(ids || !n, ids, "is NULL (n is %zu)", n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return pt_err(PT_ERANGE, "pt_dataset_add: token %zu has negative id %d", i, ids[i]);
    int32_t *ci = pt_malloc_array(n ? n : 1, sizeof *ci);
    uint8_t *cm = pt_malloc(n ? n : 1);
    if (!ci || !cm) {
        free(ci);
        free(cm);
        return PT_ENOMEM;
    }
    if (n)
        memcpy(ci, ids, n * sizeof *ci);
    for (size_t i = 0; i < n; i++)
        cm[i] = loss_mask ? (loss_mask[i] != 0) : 1;
    return add_owned(dataset, ci, cm, n);
}

/* Append src (n ids) to a growing id/mask pair with mask value m. */
static int append(int32_t **ids, uint8_t **mask, size_t *len, const int32_t *src, size_t n, uint8_t m)
{
    int32_t *ni = pt_realloc_array(*ids, *len + n + 1, sizeof *ni);
    if (!ni)
        return PT_ENOMEM;
    *ids = ni;
    uint8_t *nm = pt_realloc_array(*mask, *len + n + 1, 1);
    if (!nm)
        return PT_ENOMEM;
    *mask = nm;
    if (n)
        memcpy(ni + *len, src, n * sizeof *src);
    memset(nm + *len, m, n);
    *len += n;
    return PT_OK;
}

static int encode_into(int32_t **ids, uint8_t **mask, size_t *len, const pt_tokenizer *tok, const char *text,
                       size_t tlen, int flags, uint8_t m)
{
    int32_t *t;
    size_t n;
    int st = pt_tokenizer_encode(&t, &n, tok, text, tlen, flags);
    if (st)
        return st;
    st = append(ids, mask, len, t, n, m);
    pt_free(t);
    return st;
}

static int row_messages(int32_t **ids, uint8_t **mask, size_t *n, const pt_jsonl *r, const cJSON *msgs,
                        const pt_tokenizer *tok, const pt_chat_template *tpl)
{
    int count = cJSON_GetArraySize(msgs);
    if (count < 1)
        return pt_jsonl_err(r, PT_EFORMAT, "\"messages\" is empty");
    pt_chat_message *m = pt_calloc((size_t)count, sizeof *m);
    if (!m)
        return PT_ENOMEM;
    int st = PT_OK, i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsObject(it) || !cJSON_IsString(role) || !cJSON_IsString(content)) {
            st = pt_jsonl_err(r, PT_EFORMAT, "messages[%d] needs string \"role\" and \"content\"", i);
            break;
        }
        if (pt_chat_role_from_name(&m[i].role, role->valuestring)) {
            st = pt_jsonl_err(r, PT_EFORMAT, "messages[%d]: unknown role \"%s\"", i, role->valuestring);
            break;
        }
        m[i].content = content->valuestring;
        i++;
    }
    if (!st) {
        st = pt_chat_render_ids(ids, mask, n, tpl, tok, m, (size_t)count, NULL);
        if (st)
            st = pt_jsonl_err(r, st, "messages: %s", pt_last_error());
    }
    free(m);
    return st;
}

/* Turn one row into ids + mask (allocated) or an error naming the line. */
static int parse_row(int32_t **ids, uint8_t **mask, size_t *n, pt_dataset *d, const pt_jsonl *r,
                     const cJSON *row, const pt_tokenizer *tok, pt_chat_template **tpl)
{
    *ids = NULL;
    *mask = NULL;
    *n = 0;
    const bool co = d->opts.completion_only;
    const int32_t eos = tok ? pt_tokenizer_eos_id(tok) : -1;
    const bool add_eos = d->opts.add_eos && eos >= 0;
    int kind = pt_jsonl_row_kind(r, row);
    if (kind < 0)
        return kind;
    if (kind == PT_JSONL_IDS) {
        int32_t vocab = tok ? pt_tokenizer_vocab_size(tok) : INT32_MAX;
        int st = pt_jsonl_row_ids(ids, mask, n, r, row, vocab);
        if (st)
            return st;
        if (!*mask && *n) {
            *mask = pt_malloc(*n);
            if (!*mask)
                return PT_ENOMEM;
            memset(*mask, 1, *n);
        }
        return PT_OK;
    }
    if (!tok)
        return pt_jsonl_err(r, PT_EINVAL, "text rows need a tokenizer");
    int st;
    if (kind == PT_JSONL_TEXT) {
        const char *s;
        size_t len;
        if ((st = pt_jsonl_row_string(&s, &len, r, row, "text", 1)))
            return st;
        /* Taken as is (like `posttrain eval`): special tokens per the
         * post-processor, no EOS appended. */
        return encode_into(ids, mask, n, tok, s, len, PT_TOK_ADD_SPECIAL, 1);
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(row, "messages");
    if (msgs) {
        if (!cJSON_IsArray(msgs))
            return pt_jsonl_err(r, PT_EFORMAT, "\"messages\" must be an array");
        if (!*tpl) {
            st = d->opts.chat_template ? pt_chat_template_from_name(tpl, d->opts.chat_template)
                                       : pt_chat_template_from_tokenizer(tpl, tok);
            if (st)
                return pt_jsonl_err(r, st, "%s", pt_last_error());
        }
        if ((st = row_messages(ids, mask, n, r, msgs, tok, *tpl)))
            return st;
        if (!co)
            memset(*mask, 1, *n);
        return PT_OK;
    }
    const char *prompt, *completion;
    size_t plen, clen;
    if ((st = pt_jsonl_row_string(&prompt, &plen, r, row, "prompt", 0)))
        return st;
    if (!prompt)
        return pt_jsonl_err(r, PT_EFORMAT, "a row needs \"text\", \"prompt\"+\"completion\", \"messages\" or \"input_ids\"");
    if ((st = pt_jsonl_row_string(&completion, &clen, r, row, "completion", 1)))
        return st;
    st = encode_into(ids, mask, n, tok, prompt, plen, PT_TOK_ADD_SPECIAL, co ? 0 : 1);
    if (!st)
        st = encode_into(ids, mask, n, tok, completion, clen, 0, 1);
    if (!st && add_eos)
        st = append(ids, mask, n, &eos, 1, 1);
    return st;
}

int pt_dataset_load_jsonl(pt_dataset **out, const char *path, const pt_tokenizer *tok, const pt_dataset_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(path);
    pt_dataset *d;
    int st = dataset_create(&d, opts, __func__);
    if (st)
        return st;
    pt_jsonl *r;
    if ((st = pt_jsonl_open(&r, path, 0))) {
        pt_dataset_free(d);
        return st;
    }
    pt_chat_template *tpl = NULL;
    for (;;) {
        const cJSON *row;
        int got = pt_jsonl_next(r, &row);
        if (got == 0)
            break;
        int32_t *ids = NULL;
        uint8_t *mask = NULL;
        size_t n = 0;
        st = got < 0 ? got : parse_row(&ids, &mask, &n, d, r, row, tok, &tpl);
        if (st == PT_ENOMEM || st == PT_EIO || (st && !d->opts.skip_bad_rows)) {
            free(ids);
            free(mask);
            break;
        }
        if (st) {
            pt_log(PT_LOG_WARN, "skipping row: %s", pt_last_error());
            d->stats.skipped_rows++;
            free(ids);
            free(mask);
            st = PT_OK;
            continue;
        }
        if ((st = add_owned(d, ids, mask, n)))
            break;
    }
    pt_chat_template_free(tpl);
    pt_jsonl_close(r);
    if (st) {
        pt_dataset_free(d);
        return st;
    }
    pt_log(PT_LOG_INFO, "%s: %lld rows, %zu examples, %lld skipped, %lld empty, %lld truncated (%lld tokens cut)",
           path, (long long)d->stats.rows, d->n_ex, (long long)d->stats.skipped_rows, (long long)d->stats.empty_rows,
           (long long)d->stats.truncated_rows, (long long)d->stats.truncated_tokens);
    *out = d;
    return PT_OK;
}

static void shuffle(size_t *v, size_t n, uint64_t seed)
{
    pt_rng r;
    pt_rng_seed(&r, seed);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)pt_rng_below(&r, i);
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
    size_t *perm = pt_malloc_array(n ? n : 1, sizeof *perm);
    size_t *train = pt_malloc_array(n ? n : 1, sizeof *train);
    size_t *order = pt_malloc_array(n ? n : 1, sizeof *order);
    size_t *eval = pt_malloc_array(n ? n : 1, sizeof *eval);
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
    bool *is_eval = pt_calloc(n ? n : 1, 1);
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
        return pt_err(PT_ESTATE, "%s: the dataset has no %s", func,
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
        const example *rows[65536];
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
    pt_batch_init(&full);
    full.batch = B;
    full.seq = T;
    full.input_ids = dataset->b_ids;
    full.targets = dataset->b_tgt;
    full.positions = dataset->b_pos;
    full.segments = dataset->opts.pack ? dataset->b_seg : NULL;
    pt_struct_write(batch, &full);
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
    float *lp = pt_malloc_array((size_t)B * (size_t)dataset->opts.max_length, sizeof *lp);
    if (!lp)
        return PT_ENOMEM;
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
        pt_batch_init(&b);
        b.batch = rows;
        b.seq = T;
        b.input_ids = dataset->b_ids;
        b.targets = dataset->b_tgt;
        if ((st = pt_model_forward(ctx, &b, lp, NULL)))
            break;
        for (size_t i = 0; i < (size_t)rows * (size_t)T; i++)
            if (dataset->b_w[i] > 0) {
                sum -= (double)dataset->b_w[i] * lp[i];
                count += dataset->b_w[i];
            }
    }
    free(lp);
    if (st)
        return st;
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
    pt_struct_write(stats, &local);
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
        return pt_err(PT_ERANGE, "pt_dataset_set_position: epoch %lld cursor %lld out of range (%zu training examples)",
                      (long long)epoch, (long long)cursor, dataset->n_train);
    dataset->epoch = epoch;
    make_order(dataset);
    dataset->cursor = cursor;
    return PT_OK;
}
