/* A GGUF file's tokenizer.ggml.* metadata, read and checked, and the
 * tokenizer_config.json it implies (tok_gguf.h).  tokenizer.json itself is
 * written by tok_gguf_json.c. */
#include "core/core.h"
#include "core/utf8.h"
#include "io/json.h"
#include "text/tok_gguf_internal.h"

#include <stdio.h>
#include <string.h>

#define KEY "tokenizer.ggml."

bool pt__tok_gguf_present(const pt_gguf *g)
{
    pt_gguf_str s;
    const pt_gguf_kv *kv = pt__gguf_find_kv(g, KEY "model");
    if (!kv || pt__gguf_get_str(g, KEY "model", &s) != PT_OK) {
        pt_clear_error();
        return kv != NULL; /* present but malformed: reported by the reader */
    }
    return !(s.len == 4 && memcmp(s.ptr, "none", 4) == 0);
}

/* An optional token id: -1 when absent, else below the token count. */
static int opt_id(const pt_gguf *g, const gg_vocab *v, const char *key, int32_t *out)
{
    *out = -1;
    if (!pt__gguf_find_kv(g, key))
        return PT_OK;
    uint32_t id;
    int st = pt__gguf_get_u32(g, key, &id);
    if (st)
        return pt__err_prefix(st, "%s", v->what);
    if (id >= v->n)
        return pt__err(PT_EFORMAT, "%s: %s = %u is not a token id (the file has %llu tokens)",
                      v->what, key, id, (unsigned long long)v->n);
    *out = (int32_t)id;
    return PT_OK;
}

static int opt_bool(const pt_gguf *g, const gg_vocab *v, const char *key, int *out)
{
    *out = -1;
    if (!pt__gguf_find_kv(g, key))
        return PT_OK;
    bool b;
    int st = pt__gguf_get_bool(g, key, &b);
    if (st)
        return pt__err_prefix(st, "%s", v->what);
    *out = b;
    return PT_OK;
}

/* An optional array of n elements of type ty. */
static int opt_arr(const pt_gguf *g, const gg_vocab *v, const char *key, pt_gguf_type ty,
                   const void **out)
{
    *out = NULL;
    if (!pt__gguf_find_kv(g, key))
        return PT_OK;
    uint64_t n;
    int st = pt__gguf_get_arr(g, key, ty, out, &n);
    if (st)
        return pt__err_prefix(st, "%s", v->what);
    if (n != v->n)
        return pt__err(PT_EFORMAT, "%s: %s has %llu entries but tokenizer.ggml.tokens has %llu",
                      v->what, key, (unsigned long long)n, (unsigned long long)v->n);
    return PT_OK;
}

/* tokenizer.ggml.model: "gpt2" or "llama". */
static int read_model(const pt_gguf *g, gg_vocab *v)
{
    pt_gguf_str s;
    int st = pt__gguf_get_str(g, KEY "model", &s);
    if (st)
        return pt__err_prefix(st == PT_ENOTFOUND ? PT_EFORMAT : st, "%s", v->what);
    if (s.len == 5 && memcmp(s.ptr, "llama", 5) == 0)
        v->spm = true;
    else if (!(s.len == 4 && memcmp(s.ptr, "gpt2", 4) == 0))
        return pt__err(PT_EUNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported (only "
                      "'gpt2', byte-level BPE, and 'llama', SentencePiece-style BPE)",
                      v->what, (int)(s.len < 64 ? s.len : 64), s.ptr);
    if (!pt__gguf_find_kv(g, KEY "pre"))
        return PT_OK;
    if ((st = pt__gguf_get_str(g, KEY "pre", &s)))
        return pt__err_prefix(st, "%s", v->what);
    if (s.len >= sizeof v->pre || memchr(s.ptr, 0, s.len))
        return pt__err(PT_EUNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not a known pre-tokenizer",
                      v->what, (int)(s.len < 64 ? s.len : 64), s.ptr);
    memcpy(v->pre, s.ptr, s.len);
    v->pre[s.len] = 0;
    return PT_OK;
}

/* Every token valid UTF-8 without NUL, its type known; the first id of each
 * string in v->map and whether it joins the BPE vocabulary (user-defined
 * tokens and repeated strings do not). */
static int index_tokens(gg_vocab *v)
{
    if (!(v->in_vocab = pt__calloc(v->n ? v->n : 1, sizeof *v->in_vocab)))
        return PT_ENOMEM;
    for (uint64_t i = 0; i < v->n; i++) {
        const pt_gguf_str *t = &v->tok[i];
        if (t->len == 0 || memchr(t->ptr, 0, t->len) || !pt__utf8_valid(t->ptr, t->len))
            return pt__err(PT_EFORMAT, "%s: tokenizer.ggml.tokens[%llu] is %s", v->what,
                          (unsigned long long)i, t->len ? "not valid UTF-8 without NUL" : "empty");
        int ty = gg_type(v, i);
        if (ty < 0 || ty > PT_GGUF_TOKEN_BYTE)
            return pt__err(PT_EFORMAT, "%s: tokenizer.ggml.token_type[%llu] = %d is not a token type "
                          "(0-6)", v->what, (unsigned long long)i, ty);
        int st = tk_strmap_put(&v->map, t->ptr, t->len, (int32_t)i);
        if (st < 0)
            return st;
        v->in_vocab[i] = st == 0 && ty != PT_GGUF_TOKEN_USER_DEFINED;
    }
    return PT_OK;
}

static int read_ids(const pt_gguf *g, gg_vocab *v)
{
    int st;
    if ((st = opt_id(g, v, KEY "bos_token_id", &v->bos)) ||
        (st = opt_id(g, v, KEY "eos_token_id", &v->eos)) ||
        (st = opt_id(g, v, KEY "unknown_token_id", &v->unk)) ||
        (st = opt_id(g, v, KEY "padding_token_id", &v->pad)) ||
        (st = opt_bool(g, v, KEY "add_bos_token", &v->add_bos)) ||
        (st = opt_bool(g, v, KEY "add_eos_token", &v->add_eos)))
        return st;
    int sp;
    if ((st = opt_bool(g, v, KEY "add_space_prefix", &sp)))
        return st;
    v->space_prefix = sp != 0;
    if (v->spm && v->unk < 0 && v->n > 0 && gg_type(v, 0) == PT_GGUF_TOKEN_UNKNOWN)
        v->unk = 0;
    return PT_OK;
}

static int read_template(const pt_gguf *g, gg_vocab *v, char **copy)
{
    *copy = NULL;
    if (!pt__gguf_find_kv(g, "tokenizer.chat_template"))
        return PT_OK;
    pt_gguf_str s;
    int st = pt__gguf_get_str(g, "tokenizer.chat_template", &s);
    if (st)
        return pt__err_prefix(st, "%s", v->what);
    if (memchr(s.ptr, 0, s.len) || !pt__utf8_valid(s.ptr, s.len))
        return pt__err(PT_EFORMAT, "%s: tokenizer.chat_template is not valid UTF-8 without NUL",
                      v->what);
    if (!(*copy = pt__malloc(s.len + 1)))
        return PT_ENOMEM;
    memcpy(*copy, s.ptr, s.len);
    (*copy)[s.len] = 0;
    v->chat_template = *copy;
    return PT_OK;
}

static int read_vocab(const pt_gguf *g, gg_vocab *v, char **tmpl)
{
    int st = read_model(g, v);
    const void *p;
    if (st == PT_OK && (st = pt__gguf_get_arr(g, KEY "tokens", PT_GGUF_STRING, &p, &v->n)))
        st = pt__err_prefix(st == PT_ENOTFOUND ? PT_EFORMAT : st, "%s", v->what);
    if (st)
        return st;
    v->tok = p;
    if (v->n == 0 || v->n > INT32_MAX)
        return pt__err(PT_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries", v->what,
                      (unsigned long long)v->n);
    if ((st = opt_arr(g, v, KEY "token_type", PT_GGUF_INT32, &p)))
        return st;
    v->type = p;
    if ((st = opt_arr(g, v, KEY "scores", PT_GGUF_FLOAT32, &p)))
        return st;
    v->score = p;
    if (pt__gguf_find_kv(g, KEY "merges")) {
        if ((st = pt__gguf_get_arr(g, KEY "merges", PT_GGUF_STRING, &p, &v->nmerges)))
            return pt__err_prefix(st, "%s", v->what);
        v->merges = p;
    }
    if ((st = index_tokens(v)) || (st = read_ids(g, v)))
        return st;
    return read_template(g, v, tmpl);
}

/* "key": "token text" (or null for -1). */
static void put_token(pt_strbuf *b, const gg_vocab *v, const char *key, int32_t id)
{
    pt__strbuf_printf(b, ",\n  \"%s\": ", key);
    if (id < 0)
        pt__strbuf_puts(b, "null");
    else
        pt__json_put_string(b, v->tok[id].ptr, v->tok[id].len);
}

/* tokenizer_config.json: the special tokens, add_bos / add_eos (as the
 * tokenizer.json post-processor applies them) and the chat template. */
static int config_json(pt_strbuf *b, const gg_vocab *v, int model_max_length)
{
    bool add_bos = v->add_bos >= 0 ? v->add_bos : v->spm;
    pt__strbuf_printf(b, "{\n  \"add_bos_token\": %s,\n  \"add_eos_token\": %s",
                     add_bos && v->bos >= 0 ? "true" : "false",
                     v->add_eos > 0 && v->eos >= 0 ? "true" : "false");
    put_token(b, v, "bos_token", v->bos);
    pt__strbuf_puts(b, ",\n  \"clean_up_tokenization_spaces\": false");
    put_token(b, v, "eos_token", v->eos);
    if (v->spm)
        pt__strbuf_puts(b, ",\n  \"legacy\": true");
    pt__strbuf_printf(b, ",\n  \"model_max_length\": %d", model_max_length);
    put_token(b, v, "pad_token", v->pad);
    pt__strbuf_printf(b, ",\n  \"tokenizer_class\": \"%s\"",
                     v->spm ? "LlamaTokenizerFast" : "PreTrainedTokenizerFast");
    put_token(b, v, "unk_token", v->unk);
    if (v->chat_template) {
        pt__strbuf_puts(b, ",\n  \"chat_template\": ");
        pt__json_put_string(b, v->chat_template, strlen(v->chat_template));
    }
    return pt__strbuf_puts(b, "\n}\n");
}

int pt__tok_gguf_texts(char **tokenizer_json, char **config_json_out, const pt_gguf *g,
                      const char *what, int model_max_length)
{
    *tokenizer_json = *config_json_out = NULL;
    gg_vocab v = { .what = what };
    char *tmpl = NULL;
    pt_strbuf tj = PT_STRBUF_INIT, cj = PT_STRBUF_INIT;
    int st = read_vocab(g, &v, &tmpl);
    if (st == PT_OK)
        st = gg_tokenizer_json(&tj, &v);
    if (st == PT_OK)
        st = config_json(&cj, &v, model_max_length);
    if (st == PT_OK && !(st = tj.err ? tj.err : cj.err)) {
        *tokenizer_json = pt__strbuf_detach(&tj, NULL);
        *config_json_out = pt__strbuf_detach(&cj, NULL);
    }
    pt__strbuf_free(&tj);
    pt__strbuf_free(&cj);
    tk_strmap_free(&v.map);
    pt_free(v.in_vocab);
    pt_free(tmpl);
    return st;
}
