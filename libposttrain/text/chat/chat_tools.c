/* Tool calls parsed out of generated text, in the format the template renders
 * them: Qwen/ChatML <tool_call>{"name": ..., "arguments": {...}}</tool_call>
 * blocks, Llama-3.1/3.2's one {"name": ..., "parameters": {...}} object.  The
 * arguments come back as json.dumps of the object, so a parsed call put on an
 * assistant message renders as the template writes it. */
#include "text/chat/chat_internal.h"

#include "core/core.h"
#include "text/tok_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FN "pt_chat_parse_tool_calls"

#define TRY(expr)                    \
    do {                             \
        int st_ = (expr);            \
        if (st_ != PT_OK)            \
            return st_;              \
    } while (0)

typedef struct parsed_call {
    size_t name_off, name_len; /* into the names buffer */
    size_t args_off, args_len; /* into the arguments buffer */
} parsed_call;

typedef struct parse_ctx {
    const char *text;
    size_t len;
    const char *args_key; /* "arguments" or "parameters" */
    pt_strbuf names, args;
    parsed_call *calls;
    size_t n, cap;
} parse_ctx;

static bool starts(const parse_ctx *p, size_t pos, const char *lit)
{
    size_t k = strlen(lit);
    return pos <= p->len && p->len - pos >= k && memcmp(p->text + pos, lit, k) == 0;
}

/* Offset of lit in text[from, len), or len. */
static size_t find(const parse_ctx *p, size_t from, const char *lit)
{
    size_t k = strlen(lit);
    for (size_t i = from; i + k <= p->len; i++)
        if (memcmp(p->text + i, lit, k) == 0)
            return i;
    return p->len;
}

/* A few bytes of text at pos, for messages. */
static void excerpt(char *buf, size_t cap, const parse_ctx *p, size_t pos)
{
    if (pos >= p->len) {
        snprintf(buf, cap, "the end of the text");
        return;
    }
    size_t k = p->len - pos < 16 ? p->len - pos : 16;
    char tmp[17];
    for (size_t i = 0; i < k; i++) {
        char c = p->text[pos + i];
        tmp[i] = (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
    }
    tmp[k] = '\0';
    snprintf(buf, cap, "'%s'", tmp);
}

static int bad_call(const parse_ctx *p, size_t at, const char *fmt, ...) PT_PRINTF(3, 4);
static int bad_call(const parse_ctx *p, size_t at, const char *fmt, ...)
{
    char what[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pt__err(PT_EFORMAT, FN ": tool call %zu (at byte %zu): %s", p->n + 1, at, what);
}

/* The call object at *pos ('{'): its "name" (string) and arguments (object,
 * absent: {}), nothing else. */
static int parse_object(parse_ctx *p, size_t *pos, size_t call_at)
{
    pt_chat_json_err e;
    size_t open = *pos;
    size_t i = pt__chat_json_ws(p->text, p->len, open + 1);
    pt_strbuf key = PT_STRBUF_INIT;
    bool have_name = false, have_args = false;
    parsed_call c = {0};
    int st = PT_OK;
    if (i < p->len && p->text[i] == '}')
        i++;
    else
        for (;;) {
            if (i >= p->len) {
                st = bad_call(p, call_at, "malformed JSON at byte %zu: unterminated object", open);
                break;
            }
            if (p->text[i] != '"') {
                st = bad_call(p, call_at, "malformed JSON at byte %zu: expected a key string", i);
                break;
            }
            size_t kat = i;
            tk_strbuf_reuse(&key);
            if ((st = pt__chat_json_string(&key, p->text, p->len, &i, &e)) != PT_OK) {
                st = st == PT_EFORMAT ? bad_call(p, call_at, "malformed JSON at byte %zu: %s", e.at, e.what) : st;
                break;
            }
            i = pt__chat_json_ws(p->text, p->len, i);
            if (i >= p->len || p->text[i] != ':') {
                st = bad_call(p, call_at, "malformed JSON at byte %zu: expected ':' after an object key", i);
                break;
            }
            i = pt__chat_json_ws(p->text, p->len, i + 1);
            const char *k = key.p ? key.p : "";
            bool is_name = strcmp(k, "name") == 0, is_args = strcmp(k, p->args_key) == 0;
            if (!is_name && !is_args) {
                st = bad_call(p, call_at, "unknown key \"%.40s\" at byte %zu (a call has \"name\" and \"%s\")", k,
                              kat, p->args_key);
                break;
            }
            if ((is_name && have_name) || (is_args && have_args)) {
                st = bad_call(p, call_at, "duplicate key \"%s\" at byte %zu", k, kat);
                break;
            }
            size_t vat = i;
            char first = i < p->len ? p->text[i] : '\0';
            if (is_name) {
                if (first != '"') {
                    /* check the JSON first: a syntax error is the better message */
                    size_t j = i;
                    if ((st = pt__chat_json_value(NULL, p->text, p->len, &j, -1, &e)) == PT_EFORMAT)
                        st = bad_call(p, call_at, "malformed JSON at byte %zu: %s", e.at, e.what);
                    else if (st == PT_OK)
                        st = bad_call(p, call_at, "\"name\" must be a string, got %s", pt__chat_json_kind(first));
                    break;
                }
                c.name_off = p->names.len;
                if ((st = pt__chat_json_string(&p->names, p->text, p->len, &i, &e)) != PT_OK) {
                    st = st == PT_EFORMAT ? bad_call(p, call_at, "malformed JSON at byte %zu: %s", e.at, e.what) : st;
                    break;
                }
                c.name_len = p->names.len - c.name_off;
                pt__strbuf_putc(&p->names, '\0');
                have_name = true;
            } else {
                c.args_off = p->args.len;
                if ((st = pt__chat_json_value(&p->args, p->text, p->len, &i, -1, &e)) != PT_OK) {
                    st = st == PT_EFORMAT ? bad_call(p, call_at, "malformed JSON at byte %zu: %s", e.at, e.what) : st;
                    break;
                }
                if (first != '{') {
                    st = bad_call(p, call_at, "\"%s\" (byte %zu) must be a JSON object, got %s", p->args_key, vat,
                                  pt__chat_json_kind(first));
                    break;
                }
                c.args_len = p->args.len - c.args_off;
                pt__strbuf_putc(&p->args, '\0');
                have_args = true;
            }
            i = pt__chat_json_ws(p->text, p->len, i);
            if (i < p->len && p->text[i] == ',') {
                i = pt__chat_json_ws(p->text, p->len, i + 1);
                continue;
            }
            if (i < p->len && p->text[i] == '}') {
                i++;
                break;
            }
            st = i >= p->len ? bad_call(p, call_at, "malformed JSON at byte %zu: unterminated object", open)
                             : bad_call(p, call_at, "malformed JSON at byte %zu: expected ',' or '}' in an object", i);
            break;
        }
    pt__strbuf_free(&key);
    if (st != PT_OK)
        return st;
    if (!have_name)
        return bad_call(p, call_at, "the call has no \"name\"");
    if (!have_args) {
        c.args_off = p->args.len;
        pt__strbuf_puts(&p->args, "{}");
        c.args_len = 2;
        pt__strbuf_putc(&p->args, '\0');
    }
    if (p->names.err || p->args.err)
        return p->names.err ? p->names.err : p->args.err;
    if (p->n == p->cap) {
        parsed_call *g = pt__grow_array(p->calls, &p->cap, 4, sizeof *g);
        if (!g)
            return PT_ENOMEM;
        p->calls = g;
    }
    p->calls[p->n++] = c;
    *pos = i;
    return PT_OK;
}

/* After the calls: whitespace, then optionally the end-of-turn token, then the end. */
static int check_tail(const parse_ctx *p, size_t pos, const char *eos, const char *what)
{
    pos = pt__chat_json_ws(p->text, p->len, pos);
    if (eos && *eos && starts(p, pos, eos) && pos + strlen(eos) == p->len)
        return PT_OK;
    if (pos >= p->len)
        return PT_OK;
    char ex[48];
    excerpt(ex, sizeof ex, p, pos);
    return pt__err(PT_EFORMAT, FN ": text at byte %zu after %s: %s (only whitespace may follow a tool call)", pos,
                  what, ex);
}

/* Qwen / ChatML: <tool_call> JSON </tool_call> blocks after the content. */
static int parse_qwen(parse_ctx *p, size_t *content_end, const char *eos)
{
    static const char open_tag[] = "<tool_call>", close_tag[] = "</tool_call>";
    size_t pos = find(p, 0, open_tag);
    size_t stray = find(p, 0, close_tag);
    if (stray < pos)
        return pt__err(PT_EFORMAT, FN ": </tool_call> at byte %zu without an opening <tool_call>", stray);
    *content_end = pos;
    while (pos < p->len) {
        size_t at = pos;
        size_t i = pt__chat_json_ws(p->text, p->len, pos + strlen(open_tag));
        if (i >= p->len)
            return bad_call(p, at, "unterminated <tool_call>: the text ends before its JSON object");
        if (p->text[i] != '{') {
            char ex[48];
            excerpt(ex, sizeof ex, p, i);
            return bad_call(p, at, "expected a JSON object after <tool_call>, found %s at byte %zu", ex, i);
        }
        TRY(parse_object(p, &i, at));
        i = pt__chat_json_ws(p->text, p->len, i);
        if (!starts(p, i, close_tag)) {
            if (i >= p->len)
                return pt__err(PT_EFORMAT, FN ": tool call %zu (at byte %zu): unterminated <tool_call> (no </tool_call>)",
                              p->n, at);
            char ex[48];
            excerpt(ex, sizeof ex, p, i);
            return pt__err(PT_EFORMAT, FN ": tool call %zu (at byte %zu): expected </tool_call> after its JSON object, "
                                         "found %s at byte %zu",
                          p->n, at, ex, i);
        }
        pos = pt__chat_json_ws(p->text, p->len, i + strlen(close_tag));
        if (starts(p, pos, open_tag))
            continue;
        return check_tail(p, pos, eos, "the last </tool_call>");
    }
    return PT_OK;
}

/* Llama-3.1/3.2: a reply starting with '{' is one {"name", "parameters"} call. */
static int parse_llama(parse_ctx *p, size_t *content_end, const char *eos)
{
    size_t i = pt__chat_json_ws(p->text, p->len, 0);
    if (i >= p->len || p->text[i] != '{') {
        *content_end = p->len;
        return PT_OK;
    }
    *content_end = 0;
    size_t at = i;
    TRY(parse_object(p, &i, at));
    int st = check_tail(p, i, eos, "the tool call");
    if (st == PT_OK)
        return PT_OK;
    /* the template allows one call per message: say so when a second follows */
    size_t j = pt__chat_json_ws(p->text, p->len, i);
    if (j < p->len && (p->text[j] == '{' || p->text[j] == ';'))
        return pt__err(PT_EFORMAT,
                      FN ": a second tool call at byte %zu: Llama-3.1/3.2 templates take one call per message", j);
    return st;
}

/* One allocation: the array, then the names and arguments. */
static int pack(pt_chat_tool_call **out, const parse_ctx *p)
{
    size_t head = p->n * sizeof(pt_chat_tool_call);
    size_t total = head + p->names.len + p->args.len;
    char *block = pt__malloc(total ? total : 1);
    if (!block)
        return PT_ENOMEM;
    pt_chat_tool_call *calls = (pt_chat_tool_call *)(void *)block;
    char *names = block + head, *args = names + p->names.len;
    if (p->names.len)
        memcpy(names, p->names.p, p->names.len);
    if (p->args.len)
        memcpy(args, p->args.p, p->args.len);
    for (size_t k = 0; k < p->n; k++) {
        calls[k].name = names + p->calls[k].name_off;
        calls[k].arguments = args + p->calls[k].args_off;
    }
    *out = calls;
    return PT_OK;
}

int pt_chat_parse_tool_calls(pt_chat_tool_call **calls, size_t *n_calls, size_t *content_len,
                             const pt_chat_template *t, const char *text, size_t len)
{
    PT_CHECK_NULL(calls);
    PT_CHECK_NULL(n_calls);
    *calls = NULL;
    *n_calls = 0;
    if (content_len)
        *content_len = 0;
    PT_CHECK_NULL(t);
    PT_CHECK_COUNT(len, PT_MAX_TEXT_BYTES, "text");
    PT_CHECK_ARG(text || len == 0, text, "is NULL with len = %zu", len);
    bool qwen = t->variant == PT_CHAT_V_QWEN25 || t->variant == PT_CHAT_V_QWEN3 ||
                t->variant == PT_CHAT_V_CHATML || t->variant == PT_CHAT_V_SMOLLM2;
    bool llama = t->variant == PT_CHAT_V_LLAMA31 || t->variant == PT_CHAT_V_LLAMA32;
    if (!qwen && !llama)
        return pt__err(PT_EUNSUPPORTED,
                      FN ": the %s chat template has no tool-call format (qwen2.5, qwen3, chatml and smollm2 "
                         "use <tool_call> blocks, llama3.1 and llama3.2 a JSON object)",
                      pt_chat_template_name(t));
    parse_ctx p = {.text = text ? text : "", .len = len, .args_key = qwen ? "arguments" : "parameters"};
    size_t content_end = 0;
    int st = qwen ? parse_qwen(&p, &content_end, t->eos) : parse_llama(&p, &content_end, t->eos);
    if (st == PT_OK && p.n > 0)
        st = pack(calls, &p);
    if (st == PT_OK) {
        *n_calls = p.n;
        if (content_len) {
            size_t b = 0, e = content_end;
            if (p.n > 0)
                pt__chat_py_strip(p.text, &b, &e, false, true);
            *content_len = e;
        }
    }
    pt__strbuf_free(&p.names);
    pt__strbuf_free(&p.args);
    free(p.calls);
    return st;
}
