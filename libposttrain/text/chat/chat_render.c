/* Rendering a conversation: options, checks, and the family's renderer;
 * pt_chat_render hands back the text (pt_chat_render_ids, in chat_tok.c,
 * the ids and mask). */
#include "text/chat/chat_render.h"

#include "core/core.h"
#include "text/tok_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pt_chat_options_init(pt_chat_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->bos = PT_CHAT_BOS_TEMPLATE;
    opts->enable_thinking = 1;
    opts->tools_in_user_message = 1;
    return PT_OK;
}

void pt__chat_rendering_clear(pt_chat_rendering *r)
{
    if (!r)
        return;
    pt__strbuf_free(&r->text);
    free(r->cuts);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

/* A JSON error in `what` (a message's tool call, tools_json) as PT_EFORMAT. */
static int json_error(const char *func, const char *what, const pt_chat_json_err *e)
{
    return pt__err(PT_EFORMAT, "%s: %s: malformed JSON at byte %zu: %s", func, what, e->at, e->what);
}

/* A call's arguments: a JSON object (NULL means {}). */
static int check_arguments(const pt_chat_tool_call *call, size_t i, size_t k, const char *func)
{
    if (!call->name)
        return pt__err(PT_EINVAL, "%s: chat message %zu, tool call %zu has a NULL name", func, i, k);
    if (!call->arguments)
        return PT_OK;
    char what[96];
    snprintf(what, sizeof what, "chat message %zu, tool call %zu ('%.32s') arguments", i, k, call->name);
    pt_chat_json_err e;
    size_t len = strlen(call->arguments);
    int st = pt__chat_json_dump(NULL, call->arguments, len, -1, &e);
    if (st == PT_EFORMAT)
        return json_error(func, what, &e);
    if (st != PT_OK)
        return st;
    size_t b = pt__chat_json_ws(call->arguments, len, 0);
    if (call->arguments[b] != '{')
        return pt__err(PT_EINVAL, "%s: %s must be a JSON object, got %s", func, what,
                      pt__chat_json_kind(call->arguments[b]));
    return PT_OK;
}

/* A conversation every family can take: at least one message, each with
 * content and a known role, tool calls only on assistant messages. */
static int check_messages(const pt_chat_message *messages, size_t n_messages, const char *func)
{
    if (n_messages == 0)
        return pt__err_arg(func, "n_messages", "is 0 (the conversation is empty)");
    if (!messages)
        return pt__err_arg(func, "messages", "is NULL");
    for (size_t i = 0; i < n_messages; i++) {
        const pt_chat_message *m = &messages[i];
        if (!pt_chat_role_name(m->role))
            return pt__err(PT_EINVAL, "%s: chat message %zu has unknown role %d", func, i, m->role);
        if (m->n_tool_calls > 0 && m->role != PT_CHAT_ROLE_ASSISTANT)
            return pt__err(PT_EINVAL, "%s: chat message %zu is a %s message with tool calls (only assistant "
                          "messages make them)", func, i, pt_chat_role_name(m->role));
        if (m->n_tool_calls > 0 && !m->tool_calls)
            return pt__err(PT_EINVAL, "%s: chat message %zu has n_tool_calls = %zu and NULL tool_calls", func, i,
                          m->n_tool_calls);
        if (!m->content && m->n_tool_calls == 0)
            return pt__err(PT_EINVAL, "%s: chat message %zu has NULL content", func, i);
        for (size_t k = 0; k < m->n_tool_calls; k++) {
            int st = check_arguments(&m->tool_calls[k], i, k, func);
            if (st != PT_OK)
                return st;
        }
    }
    return PT_OK;
}

/* tools_json: a JSON array of objects; its elements' spans into *tools. */
static int parse_tools(pt_chat_span **tools, size_t *n_tools, const char *json, const char *func)
{
    *tools = NULL;
    *n_tools = 0;
    size_t len = strlen(json), pos = pt__chat_json_ws(json, len, 0);
    pt_chat_json_err e;
    int st = pt__chat_json_dump(NULL, json, len, -1, &e);
    if (st == PT_EFORMAT)
        return json_error(func, "opts->tools_json", &e);
    if (st != PT_OK)
        return st;
    if (json[pos] != '[')
        return pt__err(PT_EINVAL, "%s: opts->tools_json must be a JSON array of tool definitions, got %s", func,
                      pt__chat_json_kind(json[pos]));
    size_t cap = 0;
    pt_chat_span *v = NULL;
    pos = pt__chat_json_ws(json, len, pos + 1);
    while (json[pos] != ']') {
        if (json[pos] != '{') {
            free(v);
            return pt__err(PT_EINVAL, "%s: opts->tools_json: tool %zu is %s, not an object (a JSON schema)", func,
                          *n_tools, pt__chat_json_kind(json[pos]));
        }
        if (*n_tools == cap) {
            pt_chat_span *g = pt__grow_array(v, &cap, 8, sizeof *v);
            if (!g) {
                free(v);
                return PT_ENOMEM;
            }
            v = g;
        }
        size_t b = pos;
        (void)pt__chat_json_value(NULL, json, len, &pos, -1, &e); /* checked above */
        v[(*n_tools)++] = (pt_chat_span){b, pos};
        pos = pt__chat_json_ws(json, len, pos);
        if (json[pos] == ',')
            pos = pt__chat_json_ws(json, len, pos + 1);
    }
    *tools = v;
    return PT_OK;
}

/* A template whose source ignores tool calls would drop them: refuse. */
static int check_tool_support(const pt_chat_template *t, const pt_chat_message *m, size_t n, const char *func)
{
    if (pt__chat_variant_has_tools(t->variant))
        return PT_OK;
    for (size_t i = 0; i < n; i++)
        if (m[i].n_tool_calls > 0)
            return pt__err(PT_EUNSUPPORTED,
                          "%s: chat message %zu has tool calls, but the %s chat template has no tool-call "
                          "format (its Jinja source would silently drop them; templates with tools: qwen2.5, "
                          "qwen3, llama3.1, llama3.2)",
                          func, i, pt_chat_template_name(t));
    return PT_OK;
}

static int render_family(chat_render_ctx *c)
{
    switch (c->t->variant) {
    case PT_CHAT_V_CHATML:
    case PT_CHAT_V_SMOLLM2: return chat_render_chatml(c);
    case PT_CHAT_V_QWEN25: return chat_render_qwen25(c);
    case PT_CHAT_V_QWEN3: return chat_render_qwen3(c);
    case PT_CHAT_V_LLAMA3:
    case PT_CHAT_V_LLAMA3_GENPROMPT:
    case PT_CHAT_V_LLAMA31:
    case PT_CHAT_V_LLAMA32: return chat_render_llama3(c);
    case PT_CHAT_V_LLAMA2: return chat_render_llama2(c);
    case PT_CHAT_V_MISTRAL: return chat_render_mistral(c);
    case PT_CHAT_V_PHI3:
    case PT_CHAT_V_PHI3_VISION: return chat_render_phi3(c);
    case PT_CHAT_V_PLAIN: return chat_render_plain(c);
    default: return pt__err(PT_EINTERNAL, "chat template variant %d", c->t->variant);
    }
}

int pt__chat_render_checked(pt_chat_rendering *r, const pt_chat_template *t, const pt_chat_message *messages,
                           size_t n_messages, const pt_chat_options *opts, const char *func)
{
    pt_chat_options o;
    (void)pt_chat_options_init(&o);
    int st = pt__struct_read(&o, sizeof o, opts, func, "pt_chat_options_init");
    if (st != PT_OK)
        return st;
    if (n_messages > PT_MAX_MESSAGES)
        return pt__err_count(func, "n_messages", n_messages, PT_MAX_MESSAGES, "conversation");
    if (o.bos != PT_CHAT_BOS_TEMPLATE && o.bos != PT_CHAT_BOS_NONE)
        return pt__err_arg(func, "opts->bos", "is %d (expected PT_CHAT_BOS_TEMPLATE or PT_CHAT_BOS_NONE)", o.bos);
    if ((st = check_messages(messages, n_messages, func)) != PT_OK ||
        (st = check_tool_support(t, messages, n_messages, func)) != PT_OK)
        return st;
    pt_chat_span *tools = NULL;
    size_t n_tools = 0;
    if (o.tools_json && (st = parse_tools(&tools, &n_tools, o.tools_json, func)) != PT_OK)
        return st;
    chat_render_ctx c = {
        .r = r,
        .t = t,
        .m = messages,
        .n = n_messages,
        .o = &o,
        .bos = o.bos == PT_CHAT_BOS_NONE ? NULL : t->bos,
        .eos = t->eos,
        .default_system = o.default_system ? o.default_system : t->default_system,
        .tools_json = o.tools_json,
        .tools = tools,
        .n_tools = n_tools,
    };
    if (c.default_system && !*c.default_system)
        c.default_system = NULL;
    if (c.bos && !*c.bos)
        c.bos = NULL;
    tk_strbuf_reuse(&r->text);
    r->n_cuts = r->n_spans = 0;
    if ((st = pt__strbuf_reserve(&r->text, 0)) == PT_OK)
        st = render_family(&c);
    free(tools);
    return st != PT_OK ? st : r->text.err;
}

int pt__chat_render_internal(pt_chat_rendering *r, const pt_chat_template *t, const pt_chat_message *messages,
                            size_t n_messages, const pt_chat_options *opts)
{
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(t);
    return pt__chat_render_checked(r, t, messages, n_messages, opts, __func__);
}

int pt_chat_render(char **text, size_t *len, const pt_chat_template *t, const pt_chat_message *messages,
                   size_t n_messages, const pt_chat_options *opts)
{
    PT_CHECK_NULL(text);
    *text = NULL;
    if (len)
        *len = 0;
    PT_CHECK_NULL(t);
    pt_chat_rendering r;
    memset(&r, 0, sizeof r);
    int st = pt__chat_render_checked(&r, t, messages, n_messages, opts, __func__);
    if (st == PT_OK)
        *text = pt__strbuf_detach(&r.text, len);
    pt__chat_rendering_clear(&r);
    return st;
}
