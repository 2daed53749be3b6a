/* SFT examples from JSONL rows: prompt/completion, messages through a chat
 * template, text, or input_ids; the loss masks (completion_only), EOS,
 * truncation to max_length and the row counts; pt_dataset_add. */
#include "dataset_internal.h"

#include "core/core.h"
#include "io/jsonl.h"

#include <stdlib.h>
#include <string.h>

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
        example *e = pt__realloc_array(d->ex, cap, sizeof *e);
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
    PT_CHECK_COUNT(n, PT_MAX_TOKENS, "example");
    PT_CHECK_ARG(ids || !n, ids, "is NULL (n is %zu)", n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return pt__err(PT_ERANGE, "pt_dataset_add: token %zu has negative id %d", i, ids[i]);
    int32_t *ci = pt__malloc_array(n ? n : 1, sizeof *ci);
    uint8_t *cm = pt__malloc(n ? n : 1);
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
    int32_t *ni = pt__realloc_array(*ids, *len + n + 1, sizeof *ni);
    if (!ni)
        return PT_ENOMEM;
    *ids = ni;
    uint8_t *nm = pt__realloc_array(*mask, *len + n + 1, 1);
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

/* A prompt/completion row: the ids of encoding prompt + completion as one
 * text (with the post-processor's special tokens), never the two encoded
 * apart, so a SentencePiece-style tokenizer prepends its word-boundary marker
 * once, at the start, and not again before the completion.  The completion
 * (mask 1) starts at the first id where the whole text's ids depart from the
 * prompt's own ids: when the prompt's ids are a prefix of the whole text's,
 * exactly after them; when a token straddles the boundary (a merge joins the
 * prompt's last characters with the completion's first), that token and
 * everything after it are the completion's.  With mask_prompt false the
 * prompt is trained on too. */
static int prompt_completion(int32_t **ids, uint8_t **mask, size_t *n, const pt_tokenizer *tok, const char *prompt,
                             size_t plen, const char *completion, size_t clen, bool mask_prompt)
{
    if (plen > SIZE_MAX - 1 - clen)
        return pt__err(PT_ERANGE, "prompt and completion are too long");
    char *whole = pt__malloc(plen + clen + 1);
    if (!whole)
        return PT_ENOMEM;
    if (plen)
        memcpy(whole, prompt, plen);
    if (clen)
        memcpy(whole + plen, completion, clen);
    whole[plen + clen] = 0;
    int32_t *w = NULL, *p = NULL;
    size_t nw = 0, np = 0;
    int st = pt_tokenizer_encode(&w, &nw, tok, whole, plen + clen, PT_TOK_ADD_SPECIAL);
    pt_free(whole);
    if (!st)
        st = pt_tokenizer_encode(&p, &np, tok, prompt, plen, PT_TOK_ADD_SPECIAL);
    size_t k = 0;
    while (!st && k < nw && k < np && w[k] == p[k])
        k++;
    if (!st)
        st = append(ids, mask, n, w, k, mask_prompt ? 0 : 1);
    if (!st)
        st = append(ids, mask, n, w + k, nw - k, 1);
    pt_free(w);
    pt_free(p);
    return st;
}

static int row_messages(int32_t **ids, uint8_t **mask, size_t *n, const pt_jsonl *r, const cJSON *msgs,
                        const pt_tokenizer *tok, const pt_chat_template *tpl)
{
    int count = cJSON_GetArraySize(msgs);
    if (count < 1)
        return pt__jsonl_err(r, PT_EFORMAT, "\"messages\" is empty");
    pt_chat_message *m = pt__calloc((size_t)count, sizeof *m);
    if (!m)
        return PT_ENOMEM;
    int st = PT_OK, i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsObject(it) || !cJSON_IsString(role) || !cJSON_IsString(content)) {
            st = pt__jsonl_err(r, PT_EFORMAT, "messages[%d] needs string \"role\" and \"content\"", i);
            break;
        }
        if (pt_chat_role_from_name(&m[i].role, role->valuestring)) {
            st = pt__jsonl_err(r, PT_EFORMAT, "messages[%d]: unknown role \"%s\"", i, role->valuestring);
            break;
        }
        m[i].content = content->valuestring;
        i++;
    }
    if (!st) {
        st = pt_chat_render_ids(ids, mask, n, tpl, tok, m, (size_t)count, NULL);
        if (st)
            st = pt__jsonl_err(r, st, "messages: %s", pt_last_error());
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
    int kind = pt__jsonl_row_kind(r, row);
    if (kind < 0)
        return kind;
    if (kind == PT_JSONL_IDS) {
        int32_t vocab = tok ? pt_tokenizer_vocab_size(tok) : INT32_MAX;
        int st = pt__jsonl_row_ids(ids, mask, n, r, row, vocab);
        if (st)
            return st;
        if (!*mask && *n) {
            *mask = pt__malloc(*n);
            if (!*mask)
                return PT_ENOMEM;
            memset(*mask, 1, *n);
        }
        return PT_OK;
    }
    if (!tok)
        return pt__jsonl_err(r, PT_EINVAL, "text rows need a tokenizer");
    int st;
    if (kind == PT_JSONL_TEXT) {
        const char *s;
        size_t len;
        if ((st = pt__jsonl_row_string(&s, &len, r, row, "text", 1)))
            return st;
        /* Taken as is (like `posttrain eval`): special tokens per the
         * post-processor, no EOS appended. */
        return encode_into(ids, mask, n, tok, s, len, PT_TOK_ADD_SPECIAL, 1);
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(row, "messages");
    if (msgs) {
        if (!cJSON_IsArray(msgs))
            return pt__jsonl_err(r, PT_EFORMAT, "\"messages\" must be an array");
        if (!*tpl) {
            st = d->opts.chat_template ? pt_chat_template_create(tpl, d->opts.chat_template)
                                       : pt_chat_template_from_tokenizer(tpl, tok);
            if (st)
                return pt__jsonl_err(r, st, "%s", pt_last_error());
        }
        if ((st = row_messages(ids, mask, n, r, msgs, tok, *tpl)))
            return st;
        if (!co)
            memset(*mask, 1, *n);
        return PT_OK;
    }
    const char *prompt, *completion;
    size_t plen, clen;
    if ((st = pt__jsonl_row_string(&prompt, &plen, r, row, "prompt", 0)))
        return st;
    if (!prompt)
        return pt__jsonl_err(r, PT_EFORMAT, "a row needs \"text\", \"prompt\"+\"completion\", \"messages\" or \"input_ids\"");
    if ((st = pt__jsonl_row_string(&completion, &clen, r, row, "completion", 1)))
        return st;
    st = prompt_completion(ids, mask, n, tok, prompt, plen, completion, clen, co);
    if (!st && add_eos && !(*n > 0 && (*ids)[*n - 1] == eos))
        st = append(ids, mask, n, &eos, 1, 1);
    return st;
}

int pt_dataset_load_jsonl(pt_dataset **out, const char *path, const pt_tokenizer *tok, const pt_dataset_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(path);
    pt_dataset *d;
    int st = pt__dataset_create_for(&d, opts, __func__);
    if (st)
        return st;
    pt_jsonl *r;
    if ((st = pt__jsonl_open(&r, path, 0))) {
        pt_dataset_free(d);
        return st;
    }
    pt_chat_template *tpl = NULL;
    for (;;) {
        const cJSON *row;
        int got = pt__jsonl_next(r, &row);
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
            pt__log(PT_LOG_WARN, "skipping row: %s", pt_last_error());
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
    pt__jsonl_close(r);
    if (st) {
        pt_dataset_free(d);
        return st;
    }
    pt__log(PT_LOG_INFO, "%s: %lld rows, %zu examples, %lld skipped, %lld empty, %lld truncated (%lld tokens cut)",
           path, (long long)d->stats.rows, d->n_ex, (long long)d->stats.skipped_rows, (long long)d->stats.empty_rows,
           (long long)d->stats.truncated_rows, (long long)d->stats.truncated_tokens);
    *out = d;
    return PT_OK;
}
