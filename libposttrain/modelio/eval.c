/* Mean next-token loss of a model over a JSONL file (posttrain eval). */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/fileio.h"
#include "io/jsonl.h"
#include "model/model.h"
#include "modelio/modelio_internal.h"
#include "posttrain/tokenizer.h"
#include "posttrain/modelio.h"

#include <math.h>
#include <string.h>

/* ---- a tokenizer against a model's vocabulary ---------------------------------- */

int pt__modelio_check_tokenizer(const pt_tokenizer *tok, int32_t model_vocab, const char *what)
{
    const int64_t t = pt_tokenizer_vocab_size(tok), v = model_vocab;
    if (t > v)
        return pt__err(PT_ESHAPE,
                      "%s: the tokenizer's ids go up to %lld (%lld ids) but the model's "
                      "vocab_size is %lld: ids >= %lld have no embedding row",
                      what, (long long)(t - 1), (long long)t, (long long)v, (long long)v);
    /* padding: up to the next multiple of 128 at or above t, or by at most
     * 1% of t (Qwen2.5: 151665 ids, vocab_size 151936), whichever is more */
    int64_t allowed = (t + 127) / 128 * 128;
    if (t + t / 100 > allowed)
        allowed = t + t / 100;
    if (v > allowed)
        return pt__err(PT_ESHAPE,
                      "%s: the model's vocab_size %lld exceeds the tokenizer's %lld ids by more "
                      "than embedding padding (at most %lld): the tokenizer does not belong to "
                      "the model",
                      what, (long long)v, (long long)t, (long long)allowed);
    return PT_OK;
}

/* No tokenizer for a {"text"} row: when the model came from a directory
 * whose tokenizer.json this build could not load, that is the reason
 * (PT_EUNSUPPORTED naming the file and what is unsupported). */
static int no_tokenizer(pt_jsonl *r, const pt_model *model)
{
    const char *dir = pt_model_source_dir(model);
    if (dir && pt__dir_has_file(dir, "tokenizer.json")) {
        pt_tokenizer *t = NULL;
        int st = pt_tokenizer_load(&t, dir);
        pt_tokenizer_free(t);
        if (st)
            return pt__err_prefix(st, "%s line %zu: a {\"text\"} row needs a tokenizer, and the "
                                     "model's was not loaded", pt__jsonl_name(r), pt__jsonl_line(r));
    }
    return pt__jsonl_err(r, PT_EUNSUPPORTED,
                        "a {\"text\"} row needs a tokenizer and the model has none "
                        "(use {\"input_ids\"} rows or add tokenizer.json)");
}

/* Rows are packed into sequences of this many tokens (or the longest row). */
#define EVAL_PACK 512

int pt_eval_options_init(pt_eval_options *o)
{
    PT_CHECK_NULL(o);
    *o = (pt_eval_options){ .size = sizeof *o, .max_length = 0, .add_special = true };
    return PT_OK;
}

void pt_eval_result_free(pt_eval_result *r)
{
    if (!r)
        return;
    pt_free(r->row_loss);
    pt_free(r->row_tokens);
    pt_free(r);
}

typedef struct erow {
    int32_t *ids;
    uint8_t *mask;
    size_t n;
} erow;

static void rows_free(erow *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pt_free(rows[i].ids);
        pt_free(rows[i].mask);
    }
    pt_free(rows);
}

/* A {"text"} row, encoded with tok; every id must be in the vocabulary. */
static int read_text_row(erow *e, pt_jsonl *r, const cJSON *row, const pt_model *model,
                         const pt_tokenizer *tok, int32_t vocab, bool add_special)
{
    const char *text;
    size_t len;
    int st = pt__jsonl_row_string(&text, &len, r, row, "text", 1);
    if (st != PT_OK)
        return st;
    if (!tok)
        return no_tokenizer(r, model);
    if ((st = pt_tokenizer_encode(&e->ids, &e->n, tok, text, len,
                                  add_special ? PT_TOK_ADD_SPECIAL : 0)) != PT_OK)
        return pt__err_prefix(st, "%s line %zu", pt__jsonl_name(r), pt__jsonl_line(r));
    for (size_t i = 0; i < e->n; i++)
        if (e->ids[i] < 0 || e->ids[i] >= vocab) {
            st = pt__jsonl_err(r, PT_ERANGE,
                              "the tokenizer gave id %d, outside the model's vocabulary of %d",
                              (int)e->ids[i], (int)vocab);
            pt_free(e->ids);
            e->ids = NULL;
            return st;
        }
    return PT_OK;
}

static int read_row(erow *e, pt_jsonl *r, const cJSON *row, const pt_model *model,
                    const pt_tokenizer *tok, int32_t vocab, bool add_special)
{
    int kind = pt__jsonl_row_kind(r, row);
    if (kind < 0)
        return kind;
    if (kind == PT_JSONL_IDS)
        return pt__jsonl_row_ids(&e->ids, &e->mask, &e->n, r, row, vocab);
    if (kind == PT_JSONL_TEXT)
        return read_text_row(e, r, row, model, tok, vocab, add_special);
    return pt__jsonl_err(r, PT_EFORMAT, "a row needs \"text\" or \"input_ids\"");
}

/* Read every row of the file as token ids (and optional mask). */
static int read_rows(erow **out, size_t *out_n, const char *path, const pt_model *model,
                     const pt_tokenizer *tok, int32_t vocab, size_t max_len, bool add_special)
{
    pt_jsonl *r;
    int st = pt__jsonl_open(&r, path, 0);
    if (st)
        return st;
    erow *rows = NULL;
    size_t n = 0, cap = 0, cut = 0;
    const cJSON *row;
    while ((st = pt__jsonl_next(r, &row)) == 1) {
        if (n == cap) {
            erow *nr = pt__grow_array(rows, &cap, 64, sizeof *nr);
            if (!nr) {
                st = PT_ENOMEM;
                break;
            }
            rows = nr;
        }
        erow e = { 0 };
        if ((st = read_row(&e, r, row, model, tok, vocab, add_special)) != PT_OK)
            break;
        if (e.n > max_len) {
            e.n = max_len;
            cut++;
        }
        rows[n++] = e;
    }
    if (st == 0 && cut)
        pt__log(PT_LOG_WARN, "%s: %zu row(s) longer than %zu tokens were cut to their first %zu",
               path, cut, max_len, max_len);
    pt__jsonl_close(r);
    if (st < 0) {
        rows_free(rows, n);
        return st;
    }
    *out = rows;
    *out_n = n;
    return PT_OK;
}

/* ---- packing and the forwards ------------------------------------------------------
 *
 * Rows are packed, in order, into sequences of up to P tokens: each row
 * keeps its own positions (0..n-1) and segment, so attention never crosses
 * rows and the result equals one forward per row, while the products run on
 * P rows at a time. */

typedef struct pack {
    size_t P;
    int32_t *ids, *targets, *pos, *seg;
    size_t *owner;          /* the row of each packed token */
    float *lp;
} pack;

static void pack_free(pack *p)
{
    pt_free(p->ids);
    pt_free(p->targets);
    pt_free(p->pos);
    pt_free(p->seg);
    pt_free(p->owner);
    pt_free(p->lp);
}

static int pack_alloc(pack *p, const erow *rows, size_t n)
{
    size_t longest = 1;
    for (size_t i = 0; i < n; i++)
        if (rows[i].n > longest)
            longest = rows[i].n;
    size_t P = longest > EVAL_PACK ? longest : EVAL_PACK;
    *p = (pack){ .P = P };
    p->ids = pt__malloc_array(P, sizeof *p->ids);
    p->targets = pt__malloc_array(P, sizeof *p->targets);
    p->pos = pt__malloc_array(P, sizeof *p->pos);
    p->seg = pt__malloc_array(P, sizeof *p->seg);
    p->owner = pt__malloc_array(P, sizeof *p->owner);
    p->lp = pt__malloc_array(P, sizeof *p->lp);
    return p->ids && p->targets && p->pos && p->seg && p->owner && p->lp ? PT_OK : PT_ENOMEM;
}

/* Each row's predicted tokens (every position predicts the next; a mask of
 * 0 drops that token as a target) into row_tokens; the longest pack the
 * rows with any need (0 when none has). */
static size_t count_targets(int64_t *row_tokens, const erow *rows, size_t n, size_t P)
{
    size_t ctx_len = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        const erow *e = &rows[i];
        int64_t cnt = 0;
        for (size_t t = 1; t < e->n; t++)
            cnt += !e->mask || e->mask[t];
        row_tokens[i] = cnt;
        if (!cnt)
            continue;
        used = used + e->n <= P ? used + e->n : e->n;
        if (used > ctx_len)
            ctx_len = used;
    }
    return ctx_len;
}

/* Pack rows from *i on into p (skipping rows without targets); the count. */
static size_t pack_rows(pack *p, const erow *rows, size_t n, const int64_t *row_tokens, size_t *i)
{
    size_t used = 0;
    int nseg = 0;
    for (; *i < n && (row_tokens[*i] == 0 || used + rows[*i].n <= p->P); (*i)++) {
        const erow *e = &rows[*i];
        if (!row_tokens[*i])
            continue;
        for (size_t t = 0; t < e->n; t++) {
            bool has = t + 1 < e->n && (!e->mask || e->mask[t + 1]);
            p->ids[used + t] = e->ids[t];
            p->targets[used + t] = has ? e->ids[t + 1] : -1;
            p->pos[used + t] = (int32_t)t;
            p->seg[used + t] = nseg;
            p->owner[used + t] = *i;
        }
        used += e->n;
        nseg++;
    }
    return used;
}

/* Forward every pack; sums[row] accumulates the row's negative log-probs. */
static int run_packs(double *sums, pack *p, pt_context *ctx, const erow *rows, size_t n,
                     const int64_t *row_tokens, const char *path)
{
    for (size_t i = 0; i < n;) {
        size_t used = pack_rows(p, rows, n, row_tokens, &i);
        if (used == 0)
            continue;
        int st = pt_check_abort();
        if (st != PT_OK)
            return st;
        pt_batch b;
        pt_batch_init(&b);
        b.batch = 1;
        b.seq = (int)used;
        b.input_ids = p->ids;
        b.targets = p->targets;
        b.positions = p->pos;
        b.segments = p->seg;
        if ((st = pt_model_forward(ctx, &b, p->lp, NULL)) != PT_OK)
            return pt__err_prefix(st, "%s: rows up to %zu", path, i);
        for (size_t t = 0; t < used; t++)
            if (p->targets[t] >= 0)
                sums[p->owner[t]] -= (double)p->lp[t];
    }
    return PT_OK;
}

static pt_eval_result *result_alloc(size_t n)
{
    pt_eval_result *res = pt__calloc(1, sizeof *res);
    if (!res)
        return NULL;
    res->n_rows = n;
    res->row_loss = pt__calloc(n ? n : 1, sizeof *res->row_loss);
    res->row_tokens = pt__calloc(n ? n : 1, sizeof *res->row_tokens);
    if (!res->row_loss || !res->row_tokens) {
        pt_eval_result_free(res);
        return NULL;
    }
    return res;
}

/* The losses of the rows' packed forwards into res. */
static int evaluate(pt_eval_result *res, pt_model *model, const erow *rows, size_t n,
                    const char *path)
{
    pack p;
    double *sums = pt__calloc(n ? n : 1, sizeof *sums);
    int st = pack_alloc(&p, rows, n);
    if (!sums)
        st = PT_ENOMEM;
    pt_context *ctx = NULL;
    size_t ctx_len = st == PT_OK ? count_targets(res->row_tokens, rows, n, p.P) : 0;
    if (st == PT_OK && ctx_len)
        st = pt__context_create_packed(&ctx, model, 1, (int)ctx_len); /* packed rows */
    if (st == PT_OK)
        st = run_packs(sums, &p, ctx, rows, n, res->row_tokens, path);
    double total = 0;
    int64_t total_tokens = 0;
    for (size_t i = 0; st == PT_OK && i < n; i++) {
        int64_t cnt = res->row_tokens[i];
        res->row_loss[i] = cnt ? sums[i] / (double)cnt : NAN;
        total += sums[i];
        total_tokens += cnt;
    }
    res->tokens = total_tokens;
    res->loss = total_tokens ? total / (double)total_tokens : 0.0;
    pt_context_free(ctx);
    pack_free(&p);
    pt_free(sums);
    return st;
}

int pt_model_eval_jsonl(pt_eval_result **out, pt_model *model, const pt_tokenizer *tok,
                        const char *path, const pt_eval_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(path);
    pt_eval_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_eval_options_init);
    const int max_length = o.max_length;
    PT_CHECK_ARG(max_length >= 0, max_length, "%d must be >= 0 (0: the model's maximum)",
                 max_length);
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    int st;
    if ((st = pt_model_get_config(&cfg, model)))
        return st;
    size_t max_len = (size_t)(max_length ? max_length : cfg.max_position_embeddings);
    erow *rows = NULL;
    size_t n = 0;
    if (tok && (st = pt__modelio_check_tokenizer(tok, cfg.vocab_size, "pt_model_eval_jsonl")))
        return st;
    if ((st = read_rows(&rows, &n, path, model, tok, cfg.vocab_size, max_len, o.add_special)))
        return st;
    pt_eval_result *res = result_alloc(n);
    st = res ? evaluate(res, model, rows, n, path) : PT_ENOMEM;
    rows_free(rows, n);
    if (st) {
        pt_eval_result_free(res);
        return st;
    }
    *out = res;
    return PT_OK;
}

/* %.17g (reads back exactly), or null for NaN and infinities. */
static void put_loss(pt_strbuf *b, double v)
{
    if (isfinite(v))
        pt__strbuf_printf(b, "%.17g", v);
    else
        pt__strbuf_puts(b, "null");
}

int pt_eval_result_to_json(char **json, size_t *len, const pt_eval_result *r)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    if (len)
        *len = 0;
    PT_CHECK_NULL(r);
    PT_CHECK_ARG(r->n_rows == 0 || (r->row_loss && r->row_tokens), r, "has %zu rows but no row arrays",
                 r->n_rows);
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_puts(&b, "{\"loss\": ");
    put_loss(&b, r->loss);
    pt__strbuf_printf(&b, ", \"tokens\": %lld, \"rows\": [", (long long)r->tokens);
    for (size_t i = 0; i < r->n_rows; i++) {
        pt__strbuf_puts(&b, i ? ", {\"loss\": " : "{\"loss\": ");
        put_loss(&b, r->row_loss[i]);
        pt__strbuf_printf(&b, ", \"tokens\": %lld}", (long long)r->row_tokens[i]);
    }
    pt__strbuf_puts(&b, "]}");
    int st = b.err;
    *json = pt__strbuf_detach(&b, len);
    return st;
}
