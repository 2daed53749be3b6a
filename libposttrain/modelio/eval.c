/* Mean next-token loss of a model over a JSONL file (posttrain eval). */
#include "core/core.h"
#include "modelio/jsonl.h"
#include "posttrain/tokenizer.h"
#include "posttrain/modelio.h"

#include <math.h>
#include <string.h>

/* Rows are packed into sequences of this many tokens (or the longest row). */
#define EVAL_PACK 512

int pt_eval_options_init(pt_eval_options *o)
{
    PT_CHECK_NULL(o);
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->max_length = 0;
    o->add_special = true;
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

/* Read every row of the file as token ids (and optional mask). */
static int read_rows(erow **out, size_t *out_n, const char *path, const pt_tokenizer *tok,
                     int32_t vocab, size_t max_len, bool add_special)
{
    pt_jsonl *r;
    int st = pt_jsonl_open(&r, path, 0);
    if (st)
        return st;
    erow *rows = NULL;
    size_t n = 0, cap = 0, cut = 0;
    const cJSON *row;
    while ((st = pt_jsonl_next(r, &row)) == 1) {
        if (n == cap) {
            erow *nr = pt_grow_array(rows, &cap, 64, sizeof *nr);
            if (!nr) {
                st = PT_ENOMEM;
                break;
            }
            rows = nr;
        }
        erow e = { 0 };
        int kind = pt_jsonl_row_kind(r, row);
        if (kind < 0) {
            st = kind;
            break;
        }
        if (kind == PT_JSONL_IDS) {
            if ((st = pt_jsonl_row_ids(&e.ids, &e.mask, &e.n, r, row, vocab)) != PT_OK)
                break;
        } else if (kind == PT_JSONL_TEXT) {
            const char *text;
            size_t len;
            if ((st = pt_jsonl_row_string(&text, &len, r, row, "text", 1)) != PT_OK)
                break;
            if (!tok) {
                st = pt_jsonl_err(r, PT_EUNSUPPORTED,
                                  "a {\"text\"} row needs a tokenizer and the model has none "
                                  "(use {\"input_ids\"} rows or add tokenizer.json)");
                break;
            }
            if ((st = pt_tokenizer_encode(&e.ids, &e.n, tok, text, len,
                                        add_special ? PT_TOK_ADD_SPECIAL : 0)) != PT_OK) {
                pt_err_prefix(st, "%s line %zu", pt_jsonl_name(r), pt_jsonl_line(r));
                break;
            }
            for (size_t i = 0; i < e.n; i++)
                if (e.ids[i] < 0 || e.ids[i] >= vocab) {
                    st = pt_jsonl_err(r, PT_ERANGE,
                                      "the tokenizer gave id %d, outside the model's vocabulary "
                                      "of %d",
                                      (int)e.ids[i], (int)vocab);
                    break;
                }
            if (st) {
                pt_free(e.ids);
                break;
            }
        } else {
            st = pt_jsonl_err(r, PT_EFORMAT, "a row needs \"text\" or \"input_ids\"");
            break;
        }
        if (e.n > max_len) {
            e.n = max_len;
            cut++;
        }
        rows[n++] = e;
    }
    if (st == 0 && cut)
        pt_log(PT_LOG_WARN, "%s: %zu row(s) longer than %zu tokens were cut to their first %zu",
               path, cut, max_len, max_len);
    pt_jsonl_close(r);
    if (st < 0) {
        rows_free(rows, n);
        return st;
    }
    *out = rows;
    *out_n = n;
    return PT_OK;
}

int pt_model_eval_jsonl(pt_eval_result **out, pt_model *model, const pt_tokenizer *tok,
                        const char *path, const pt_eval_options *opts)
{
    PT_CHECK_NULL(out);
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(path);
    *out = NULL;
    pt_eval_options def;
    pt_eval_options_init(&def);
    if (!opts)
        opts = &def;
    if (opts->size != sizeof *opts)
        return pt_err(PT_EINVAL, "pt_model_eval_jsonl: options size %zu, expected %zu",
                      opts->size, sizeof *opts);
    if (opts->max_length < 0)
        return pt_err(PT_EINVAL, "pt_model_eval_jsonl: max_length %d < 0", opts->max_length);
    pt_model_config cfg;
    int st = pt_model_get_config(&cfg, model);
    if (st)
        return st;
    size_t max_len = (size_t)(opts->max_length ? opts->max_length : cfg.max_position_embeddings);
    erow *rows = NULL;
    size_t n = 0;
    if ((st = read_rows(&rows, &n, path, tok, cfg.vocab_size, max_len, opts->add_special)))
        return st;

    /* Rows are packed, in order, into sequences of up to P tokens: each row
     * keeps its own positions (0..n-1) and segment, so attention never
     * crosses rows and the result equals one forward per row, while the
     * products run on P rows at a time. */
    pt_eval_result *res = pt_calloc(1, sizeof *res);
    size_t longest = 1;
    for (size_t i = 0; i < n; i++)
        if (rows[i].n > longest)
            longest = rows[i].n;
    size_t P = longest > EVAL_PACK ? longest : EVAL_PACK;
    int32_t *ids = pt_malloc_array(P, sizeof *ids), *targets = pt_malloc_array(P, sizeof *targets);
    int32_t *pos = pt_malloc_array(P, sizeof *pos), *seg = pt_malloc_array(P, sizeof *seg);
    size_t *owner = pt_malloc_array(P, sizeof *owner);
    float *lp = pt_malloc_array(P, sizeof *lp);
    double *sums = pt_calloc(n ? n : 1, sizeof *sums);
    if (res) {
        res->n_rows = n;
        res->row_loss = pt_calloc(n ? n : 1, sizeof *res->row_loss);
        res->row_tokens = pt_calloc(n ? n : 1, sizeof *res->row_tokens);
    }
    pt_context *ctx = NULL;
    if (!res || !ids || !targets || !pos || !seg || !owner || !lp || !sums || !res->row_loss ||
        !res->row_tokens) {
        st = PT_ENOMEM;
        goto done;
    }
    /* Count each row's predicted tokens (every position predicts the next;
     * a mask of 0 drops that token as a target). */
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        const erow *e = &rows[i];
        int64_t cnt = 0;
        for (size_t t = 1; t < e->n; t++)
            cnt += !e->mask || e->mask[t];
        res->row_tokens[i] = cnt;
        any |= cnt > 0;
    }
    if (any) {
        size_t ctx_len = 0;
        /* the longest pack actually needed */
        for (size_t i = 0, used = 0; i < n; i++) {
            if (!res->row_tokens[i])
                continue;
            used = used + rows[i].n <= P ? used + rows[i].n : rows[i].n;
            if (used > ctx_len)
                ctx_len = used;
        }
        if ((st = pt_context_create(&ctx, model, 1, (int)ctx_len)) != PT_OK)
            goto done;
    }
    for (size_t i = 0; i < n;) {
        size_t used = 0;
        int nseg = 0;
        while (i < n && (res->row_tokens[i] == 0 || used + rows[i].n <= P)) {
            const erow *e = &rows[i];
            if (res->row_tokens[i]) {
                for (size_t t = 0; t < e->n; t++) {
                    bool has = t + 1 < e->n && (!e->mask || e->mask[t + 1]);
                    ids[used + t] = e->ids[t];
                    targets[used + t] = has ? e->ids[t + 1] : -1;
                    pos[used + t] = (int32_t)t;
                    seg[used + t] = nseg;
                    owner[used + t] = i;
                }
                used += e->n;
                nseg++;
            }
            i++;
        }
        if (used == 0)
            continue;
        if ((st = pt_check_abort()) != PT_OK)
            goto done;
        pt_batch b;
        pt_batch_init(&b);
        b.batch = 1;
        b.seq = (int)used;
        b.input_ids = ids;
        b.targets = targets;
        b.positions = pos;
        b.segments = seg;
        if ((st = pt_model_forward(ctx, &b, lp, NULL)) != PT_OK) {
            pt_err_prefix(st, "%s: rows up to %zu", path, i);
            goto done;
        }
        for (size_t t = 0; t < used; t++)
            if (targets[t] >= 0)
                sums[owner[t]] -= (double)lp[t];
    }
    double total = 0;
    int64_t total_tokens = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t cnt = res->row_tokens[i];
        res->row_loss[i] = cnt ? sums[i] / (double)cnt : NAN;
        total += sums[i];
        total_tokens += cnt;
    }
    res->tokens = total_tokens;
    res->loss = total_tokens ? total / (double)total_tokens : 0.0;
    st = PT_OK;
done:
    pt_context_free(ctx);
    pt_free(ids);
    pt_free(targets);
    pt_free(pos);
    pt_free(seg);
    pt_free(owner);
    pt_free(lp);
    pt_free(sums);
    rows_free(rows, n);
    if (st) {
        pt_eval_result_free(res);
        return st;
    }
    *out = res;
    return PT_OK;
}
