/* The template families, each writing exactly what its Jinja source renders
 * under Hugging Face's apply_chat_template (the goldens in
 * tests/reference/chat/ pin that down), with the cuts and assistant spans
 * along the text. */
#include "text/chat/chat_render.h"

#include "core/core.h"
#include "io/json.h"

#include <stdio.h>
#include <string.h>

static const char *role_str(int role)
{
    const char *s = pt_chat_role_name(role);
    return s ? s : "?";
}

/* A message's content ("" for an assistant message with tool calls and none). */
static const char *content_of(const pt_chat_message *m)
{
    return m->content ? m->content : "";
}

/* The tools' instructions of Qwen2.5 and Qwen3, around `tool | tojson` lines. */
#define QWEN_TOOLS_HEAD                                                                        \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"          \
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
#define QWEN_TOOLS_TAIL                                                                         \
    "\n</tools>\n\nFor each function call, return a json object with function name and "        \
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "               \
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"

static int qwen_tools_block(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    CHAT_TRY(chat_emits(r, QWEN_TOOLS_HEAD));
    for (size_t i = 0; i < c->n_tools; i++) {
        CHAT_TRY(chat_emits(r, "\n"));
        CHAT_TRY(chat_emit_tool(c, i, -1));
    }
    return chat_emits(r, QWEN_TOOLS_TAIL);
}

/* <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call> */
static int qwen_tool_call(chat_render_ctx *c, const pt_chat_tool_call *call)
{
    pt_chat_rendering *r = c->r;
    chat_emits(r, "<tool_call>\n{\"name\": \"");
    chat_emits(r, call->name);
    CHAT_TRY(chat_emits(r, "\", \"arguments\": "));
    CHAT_TRY(chat_emit_arguments(c, call));
    return chat_emits(r, "}\n</tool_call>");
}

/* ---- ChatML and Qwen3 ------------------------------------------------------------ */
static int chatml_system(pt_chat_rendering *r, const char *content)
{
    chat_emits(r, "<|im_start|>system\n");
    chat_emits(r, content);
    return chat_emits(r, "<|im_end|>\n");
}

/* <|im_start|>role\ncontent<|im_end|>\n, the assistant's content and
 * <|im_end|> in a span. */
static int chatml_turn(pt_chat_rendering *r, const char *role, const char *content, bool asst)
{
    CHAT_TRY(chat_cut_before(r, "<|im_start|>"));
    chat_emits(r, "<|im_start|>");
    chat_emits(r, role);
    CHAT_TRY(chat_emits(r, "\n"));
    if (asst)
        CHAT_TRY(chat_span_open(r));
    chat_emits(r, content);
    CHAT_TRY(chat_emits(r, "<|im_end|>"));
    if (asst)
        chat_span_close(r);
    return chat_emits(r, "\n");
}

int chat_render_chatml(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    if (c->default_system && c->m[0].role != PT_CHAT_ROLE_SYSTEM)
        CHAT_TRY(chatml_system(r, c->default_system));
    for (size_t i = 0; i < c->n; i++)
        CHAT_TRY(chatml_turn(r, role_str(c->m[i].role), c->m[i].content,
                             c->m[i].role == PT_CHAT_ROLE_ASSISTANT));
    if (c->o->add_generation_prompt) {
        CHAT_TRY(chat_cut_before(r, "<|im_start|>"));
        CHAT_TRY(chat_emits(r, "<|im_start|>assistant\n"));
    }
    return PT_OK;
}

static bool starts_with(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    return n >= k && memcmp(s, p, k) == 0;
}

static bool ends_with(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* Last occurrence of needle in s[0..n), or NULL. */
static const char *find_last(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (k > n)
        return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

/* The last user message that is not a wrapped tool response (n - 1 if none). */
static size_t qwen3_last_query(const chat_render_ctx *c)
{
    for (size_t k = c->n; k-- > 0;) {
        const char *s = c->m[k].content;
        size_t len = strlen(s);
        if (c->m[k].role == PT_CHAT_ROLE_USER &&
            !(starts_with(s, len, "<tool_response>") && ends_with(s, len, "</tool_response>")))
            return k;
    }
    return c->n - 1;
}

/* An assistant message split as the template splits
 * "<think>reasoning</think>answer". */
typedef struct qwen3_parts {
    const char *body, *reason;
    size_t body_len, reason_len;
} qwen3_parts;

static void qwen3_split(qwen3_parts *p, const char *content, size_t len)
{
    p->body = content;
    p->body_len = len;
    p->reason = "";
    p->reason_len = 0;
    const char *close = strstr(content, "</think>");
    if (!close)
        return;
    /* the body: after the last </think>, lstrip('\n') */
    p->body = find_last(content, len, "</think>") + strlen("</think>");
    p->body_len = (size_t)(content + len - p->body);
    while (p->body_len > 0 && p->body[0] == '\n') {
        p->body++;
        p->body_len--;
    }
    /* the reasoning: before the first </think>, rstrip('\n'), after the last <think>, lstrip('\n') */
    size_t pre_len = (size_t)(close - content);
    while (pre_len > 0 && content[pre_len - 1] == '\n')
        pre_len--;
    const char *open = find_last(content, pre_len, "<think>");
    p->reason = open ? open + strlen("<think>") : content;
    p->reason_len = (size_t)(content + pre_len - p->reason);
    while (p->reason_len > 0 && p->reason[0] == '\n') {
        p->reason++;
        p->reason_len--;
    }
}

/* Assistant message i; after the last query, the final message and those
 * with reasoning keep a <think> block. */
static int qwen3_assistant(chat_render_ctx *c, size_t i, size_t last_query)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = &c->m[i];
    qwen3_parts p;
    qwen3_split(&p, content_of(m), strlen(content_of(m)));
    CHAT_TRY(chat_cut_before(r, "<|im_start|>"));
    CHAT_TRY(chat_emits(r, "<|im_start|>assistant\n"));
    CHAT_TRY(chat_span_open(r));
    if (i > last_query && (i == c->n - 1 || p.reason_len > 0)) {
        size_t rb = 0, re = p.reason_len;
        while (rb < re && p.reason[rb] == '\n')
            rb++;
        while (re > rb && p.reason[re - 1] == '\n')
            re--;
        size_t bb = 0;
        while (bb < p.body_len && p.body[bb] == '\n')
            bb++;
        chat_emits(r, "<think>\n");
        chat_emit(r, p.reason + rb, re - rb);
        chat_emits(r, "\n</think>\n\n");
        chat_emit(r, p.body + bb, p.body_len - bb);
    } else {
        chat_emit(r, p.body, p.body_len);
    }
    /* the calls, after a newline unless nothing (after any </think>) precedes them */
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        if (k > 0 || p.body_len > 0)
            CHAT_TRY(chat_emits(r, "\n"));
        CHAT_TRY(qwen_tool_call(c, &m->tool_calls[k]));
    }
    CHAT_TRY(chat_emits(r, "<|im_end|>"));
    chat_span_close(r);
    return chat_emits(r, "\n");
}

/* Tool message i: consecutive tool messages share one user turn. */
static int qwen3_tool(chat_render_ctx *c, size_t i)
{
    pt_chat_rendering *r = c->r;
    if (i == 0 || c->m[i - 1].role != PT_CHAT_ROLE_TOOL) {
        CHAT_TRY(chat_cut_before(r, "<|im_start|>"));
        CHAT_TRY(chat_emits(r, "<|im_start|>user"));
    }
    chat_emits(r, "\n<tool_response>\n");
    chat_emits(r, c->m[i].content);
    CHAT_TRY(chat_emits(r, "\n</tool_response>"));
    if (i == c->n - 1 || c->m[i + 1].role != PT_CHAT_ROLE_TOOL)
        return chat_emits(r, "<|im_end|>\n");
    return PT_OK;
}

int chat_render_qwen3(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = c->m;
    const char *sys = m[0].role == PT_CHAT_ROLE_SYSTEM ? m[0].content : c->default_system;
    if (c->n_tools > 0) {
        /* `if tools`: the system message (if any), then the tools */
        CHAT_TRY(chat_emits(r, "<|im_start|>system\n"));
        if (sys) {
            CHAT_TRY(chat_emits(r, sys));
            CHAT_TRY(chat_emits(r, "\n\n"));
        }
        CHAT_TRY(qwen_tools_block(c));
    } else if (sys) {
        CHAT_TRY(chatml_system(r, sys));
    }
    size_t last_query = qwen3_last_query(c);
    for (size_t i = 0; i < c->n; i++) {
        int role = m[i].role;
        if (role == PT_CHAT_ROLE_USER || (role == PT_CHAT_ROLE_SYSTEM && i != 0))
            CHAT_TRY(chatml_turn(r, role_str(role), m[i].content, false));
        else if (role == PT_CHAT_ROLE_ASSISTANT)
            CHAT_TRY(qwen3_assistant(c, i, last_query));
        else if (role == PT_CHAT_ROLE_TOOL)
            CHAT_TRY(qwen3_tool(c, i));
    }
    if (c->o->add_generation_prompt) {
        CHAT_TRY(chat_cut_before(r, "<|im_start|>"));
        CHAT_TRY(chat_emits(r, "<|im_start|>assistant\n"));
        if (!c->o->enable_thinking)
            CHAT_TRY(chat_emits(r, "<think>\n\n</think>\n\n"));
    }
    return PT_OK;
}

/* ---- Qwen2.5 ------------------------------------------------------------------------ */
/* Assistant message i with tool calls: <|im_start|>assistant, "\n" + content if
 * any, "\n<tool_call>...</tool_call>" per call, <|im_end|>.  The span starts
 * after the first "\n", where the generation prompt ends. */
static int qwen25_calls(chat_render_ctx *c, size_t i)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = &c->m[i];
    CHAT_TRY(chat_cut_before(r, "<|im_start|>"));
    CHAT_TRY(chat_emits(r, "<|im_start|>assistant"));
    CHAT_TRY(chat_span_open(r));
    r->spans[r->n_spans - 1].begin++;
    if (*content_of(m)) {
        chat_emits(r, "\n");
        chat_emits(r, m->content);
    }
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        CHAT_TRY(chat_emits(r, "\n"));
        CHAT_TRY(qwen_tool_call(c, &m->tool_calls[k]));
    }
    CHAT_TRY(chat_emits(r, "<|im_end|>"));
    chat_span_close(r);
    return chat_emits(r, "\n");
}

int chat_render_qwen25(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = c->m;
    const char *sys = m[0].role == PT_CHAT_ROLE_SYSTEM ? m[0].content : c->default_system;
    if (c->n_tools > 0) {
        /* `if tools`: the system message or the default, then the tools */
        CHAT_TRY(chat_emits(r, "<|im_start|>system\n"));
        if (sys)
            CHAT_TRY(chat_emits(r, sys));
        CHAT_TRY(chat_emits(r, "\n\n"));
        CHAT_TRY(qwen_tools_block(c));
    } else if (sys) {
        CHAT_TRY(chatml_system(r, sys));
    }
    for (size_t i = 0; i < c->n; i++) {
        int role = m[i].role;
        if (role == PT_CHAT_ROLE_SYSTEM && i == 0)
            continue;
        if (role == PT_CHAT_ROLE_TOOL)
            CHAT_TRY(qwen3_tool(c, i));
        else if (role == PT_CHAT_ROLE_ASSISTANT && m[i].n_tool_calls > 0)
            CHAT_TRY(qwen25_calls(c, i));
        else
            CHAT_TRY(chatml_turn(r, role_str(role), m[i].content, role == PT_CHAT_ROLE_ASSISTANT));
    }
    if (c->o->add_generation_prompt) {
        CHAT_TRY(chat_cut_before(r, "<|im_start|>"));
        CHAT_TRY(chat_emits(r, "<|im_start|>assistant\n"));
    }
    return PT_OK;
}

/* ---- Llama-3 ------------------------------------------------------------------------- */
static int llama3_turn(chat_render_ctx *c, const char *role, const char *content, bool asst)
{
    pt_chat_rendering *r = c->r;
    CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
    CHAT_TRY(chat_emits(r, "<|start_header_id|>"));
    CHAT_TRY(chat_emits(r, role));
    CHAT_TRY(chat_emits(r, "<|end_header_id|>\n\n"));
    if (asst)
        CHAT_TRY(chat_span_open(r));
    CHAT_TRY(chat_emit_stripped(r, content, strlen(content)));
    CHAT_TRY(chat_emits(r, "<|eot_id|>"));
    if (asst)
        chat_span_close(r);
    return PT_OK;
}

#define LLAMA_TOOLS_FORMAT                                                                        \
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name " \
    "and its value}.Do not use variables.\n\n"

/* Each tool as tojson(indent=4), then "\n\n". */
static int llama3_tools(chat_render_ctx *c)
{
    for (size_t i = 0; i < c->n_tools; i++) {
        CHAT_TRY(chat_emit_tool(c, i, 4));
        CHAT_TRY(chat_emits(c->r, "\n\n"));
    }
    return PT_OK;
}

/* The Llama-3.1/3.2 system header (with tools: "Environment: ipython" and,
 * unless they go to the user message, the tools) and, with tools in the user
 * message, that message; *first is the first message left to render. */
static int llama31_head(chat_render_ctx *c, size_t *first)
{
    pt_chat_rendering *r = c->r;
    bool tools = c->tools_json != NULL; /* `tools is not none`: an empty list counts */
    const char *sys = "";
    if (c->m[0].role == PT_CHAT_ROLE_SYSTEM) {
        sys = c->m[0].content;
        *first = 1;
    } else if (c->default_system) {
        sys = c->default_system;
    }
    const char *date = c->o->date_string ? c->o->date_string
                                         : (c->t->date_default ? c->t->date_default : PT_CHAT_LLAMA31_DATE);
    CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
    CHAT_TRY(chat_emits(r, "<|start_header_id|>system<|end_header_id|>\n\n"));
    if (tools)
        CHAT_TRY(chat_emits(r, "Environment: ipython\n"));
    CHAT_TRY(chat_emits(r, "Cutting Knowledge Date: December 2023\nToday Date: "));
    CHAT_TRY(chat_emits(r, date));
    CHAT_TRY(chat_emits(r, "\n\n"));
    if (tools && !c->o->tools_in_user_message) {
        CHAT_TRY(chat_emits(r, "You have access to the following functions. To call a function, please "
                               "respond with JSON for a function call." LLAMA_TOOLS_FORMAT));
        CHAT_TRY(llama3_tools(c));
    }
    CHAT_TRY(chat_emit_stripped(r, sys, strlen(sys)));
    CHAT_TRY(chat_emits(r, "<|eot_id|>"));
    if (!tools || !c->o->tools_in_user_message)
        return PT_OK;
    /* the first message after the system message becomes the tools' user turn */
    if (*first >= c->n)
        return pt__err(PT_EINVAL, "Cannot put tools in the first user message when there's no first user "
                                 "message! (the %s template with tools and tools_in_user_message)",
                      pt_chat_template_name(c->t));
    const pt_chat_message *u = &c->m[*first];
    if (u->n_tool_calls > 0)
        return pt__err(PT_EUNSUPPORTED,
                      "chat message %zu: the %s template puts the first message after the system message "
                      "into the tools' user turn and would drop its tool calls",
                      *first, pt_chat_template_name(c->t));
    CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
    CHAT_TRY(chat_emits(r, "<|start_header_id|>user<|end_header_id|>\n\n"
                           "Given the following functions, please respond with a JSON for a function call "
                           "with its proper arguments that best answers the given prompt.\n\n" LLAMA_TOOLS_FORMAT));
    CHAT_TRY(llama3_tools(c));
    CHAT_TRY(chat_emit_stripped(r, content_of(u), strlen(content_of(u))));
    CHAT_TRY(chat_emits(r, "<|eot_id|>"));
    (*first)++;
    return PT_OK;
}

/* An assistant message with its one tool call:
 * {"name": "NAME", "parameters": ARGS}<|eot_id|>, all in the span. */
static int llama31_call(chat_render_ctx *c, size_t i)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = &c->m[i];
    if (m->n_tool_calls != 1)
        return pt__err(PT_EINVAL, "This model only supports single tool-calls at once! (the %s template; chat "
                                 "message %zu has %zu)",
                      pt_chat_template_name(c->t), i, m->n_tool_calls);
    CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
    CHAT_TRY(chat_emits(r, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    CHAT_TRY(chat_span_open(r));
    chat_emits(r, "{\"name\": \"");
    chat_emits(r, m->tool_calls[0].name);
    CHAT_TRY(chat_emits(r, "\", \"parameters\": "));
    CHAT_TRY(chat_emit_arguments(c, &m->tool_calls[0]));
    CHAT_TRY(chat_emits(r, "}<|eot_id|>"));
    chat_span_close(r);
    return PT_OK;
}

int chat_render_llama3(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    size_t first = 0;
    bool v31 = c->t->variant == PT_CHAT_V_LLAMA31 || c->t->variant == PT_CHAT_V_LLAMA32;
    if (c->bos)
        CHAT_TRY(chat_emits(r, c->bos));
    if (v31)
        CHAT_TRY(llama31_head(c, &first));
    else if (c->default_system && c->m[0].role != PT_CHAT_ROLE_SYSTEM)
        CHAT_TRY(llama3_turn(c, "system", c->default_system, false));
    for (size_t i = first; i < c->n; i++) {
        int role = c->m[i].role;
        if (v31 && role == PT_CHAT_ROLE_TOOL) {
            CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
            CHAT_TRY(chat_emits(r, "<|start_header_id|>ipython<|end_header_id|>\n\n"));
            /* json.dumps(content, ensure_ascii=False) */
            const char *s = c->m[i].content;
            CHAT_TRY(pt__json_put_string_ex(&r->text, s, strlen(s), PT_JSON_SHORT_ESCAPES));
            CHAT_TRY(chat_emits(r, "<|eot_id|>"));
            continue;
        }
        if (v31 && c->m[i].n_tool_calls > 0) {
            CHAT_TRY(llama31_call(c, i));
            continue;
        }
        CHAT_TRY(llama3_turn(c, role_str(role), c->m[i].content, role == PT_CHAT_ROLE_ASSISTANT));
    }
    if (c->o->add_generation_prompt || c->t->variant == PT_CHAT_V_LLAMA3_GENPROMPT) {
        CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
        CHAT_TRY(chat_emits(r, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    }
    return PT_OK;
}

/* ---- Llama-2 and Mistral ------------------------------------------------------------ */
static int alternation_error(size_t i, int role)
{
    return pt__err(PT_EINVAL,
                  "Conversation roles must alternate user/assistant/user/assistant/... "
                  "(message %zu is %s)",
                  i, role_str(role));
}

int chat_render_llama2(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    const pt_chat_message *m = c->m;
    size_t first = 0;
    const char *sys = NULL;
    if (m[0].role == PT_CHAT_ROLE_SYSTEM) {
        sys = m[0].content;
        first = 1;
    } else if (c->default_system) {
        sys = c->default_system;
    }
    for (size_t i = first; i < c->n; i++) {
        size_t j = i - first;
        int role = m[i].role;
        if ((role == PT_CHAT_ROLE_USER) != (j % 2 == 0))
            return alternation_error(i, role);
        if (role == PT_CHAT_ROLE_USER) {
            if (c->bos) {
                CHAT_TRY(chat_cut_before(r, c->bos));
                CHAT_TRY(chat_emits(r, c->bos));
            }
            CHAT_TRY(chat_emits(r, "[INST] "));
            if (j == 0 && sys) {
                /* strip() applies to "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content. */
                size_t start = r->text.len;
                CHAT_TRY(chat_emits(r, "<<SYS>>\n"));
                CHAT_TRY(chat_emits(r, sys));
                CHAT_TRY(chat_emits(r, "\n<</SYS>>\n\n"));
                CHAT_TRY(chat_emits(r, m[i].content));
                size_t b = start, e = r->text.len;
                pt__chat_py_strip(r->text.p, &b, &e, false, true);
                r->text.len = e;
                r->text.p[e] = '\0';
            } else {
                CHAT_TRY(chat_emit_stripped(r, m[i].content, strlen(m[i].content)));
            }
            CHAT_TRY(chat_emits(r, " [/INST]"));
        } else if (role == PT_CHAT_ROLE_ASSISTANT) {
            CHAT_TRY(chat_span_open(r));
            CHAT_TRY(chat_emits(r, " "));
            CHAT_TRY(chat_emit_stripped(r, m[i].content, strlen(m[i].content)));
            CHAT_TRY(chat_emits(r, " "));
            if (c->eos)
                CHAT_TRY(chat_emits(r, c->eos));
            chat_span_close(r);
        } else {
            return pt__err(PT_EUNSUPPORTED,
                          "the llama2 chat template has no %s turn (message %zu); its Jinja source "
                          "silently drops such messages",
                          role_str(role), i);
        }
    }
    return PT_OK;
}

int chat_render_mistral(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    if (c->bos)
        CHAT_TRY(chat_emits(r, c->bos));
    for (size_t i = 0; i < c->n; i++) {
        int role = c->m[i].role;
        if ((role == PT_CHAT_ROLE_USER) != (i % 2 == 0))
            return alternation_error(i, role);
        if (role == PT_CHAT_ROLE_USER) {
            CHAT_TRY(chat_emits(r, "[INST] "));
            CHAT_TRY(chat_emits(r, c->m[i].content));
            CHAT_TRY(chat_emits(r, " [/INST]"));
        } else if (role == PT_CHAT_ROLE_ASSISTANT) {
            CHAT_TRY(chat_span_open(r));
            CHAT_TRY(chat_emits(r, c->m[i].content));
            if (c->eos)
                CHAT_TRY(chat_emits(r, c->eos));
            chat_span_close(r);
            CHAT_TRY(chat_cut_after(r, c->eos));
        } else {
            return pt__err(PT_EUNSUPPORTED,
                          "Only user and assistant roles are supported! (the mistral template; "
                          "message %zu is %s)",
                          i, role_str(role));
        }
    }
    return PT_OK;
}

/* ---- Phi-3 and plain ----------------------------------------------------------------- */
int chat_render_phi3(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    bool vision = c->t->variant == PT_CHAT_V_PHI3_VISION;
    if (c->default_system && c->m[0].role != PT_CHAT_ROLE_SYSTEM) {
        CHAT_TRY(chat_emits(r, "<|system|>\n"));
        CHAT_TRY(chat_emits(r, c->default_system));
        CHAT_TRY(chat_emits(r, "<|end|>\n"));
    }
    for (size_t i = 0; i < c->n; i++) {
        int role = c->m[i].role;
        if (!vision && role == PT_CHAT_ROLE_TOOL)
            return pt__err(PT_EUNSUPPORTED,
                          "the phi3 chat template has no tool turn (message %zu); its Jinja source "
                          "silently drops such messages (phi3-vision writes <|tool|>)",
                          i);
        char marker[32];
        snprintf(marker, sizeof marker, "<|%s|>", role_str(role));
        bool asst = role == PT_CHAT_ROLE_ASSISTANT;
        CHAT_TRY(chat_cut_before(r, marker));
        CHAT_TRY(chat_emits(r, marker));
        CHAT_TRY(chat_emits(r, "\n"));
        if (asst)
            CHAT_TRY(chat_span_open(r));
        CHAT_TRY(chat_emits(r, c->m[i].content));
        CHAT_TRY(chat_emits(r, "<|end|>"));
        if (asst)
            chat_span_close(r);
        CHAT_TRY(chat_emits(r, "\n"));
    }
    if (vision) {
        if (c->o->add_generation_prompt && c->m[c->n - 1].role != PT_CHAT_ROLE_ASSISTANT) {
            CHAT_TRY(chat_cut_before(r, "<|assistant|>"));
            CHAT_TRY(chat_emits(r, "<|assistant|>\n"));
        }
    } else if (c->o->add_generation_prompt) {
        CHAT_TRY(chat_cut_before(r, "<|assistant|>"));
        CHAT_TRY(chat_emits(r, "<|assistant|>\n"));
    } else if (c->eos) {
        CHAT_TRY(chat_cut_before(r, c->eos));
        CHAT_TRY(chat_emits(r, c->eos));
    }
    return PT_OK;
}

int chat_render_plain(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    for (size_t i = 0; i < c->n; i++) {
        bool asst = c->m[i].role == PT_CHAT_ROLE_ASSISTANT;
        if (asst)
            CHAT_TRY(chat_span_open(r));
        CHAT_TRY(chat_emits(r, c->m[i].content));
        if (asst) {
            if (c->eos)
                CHAT_TRY(chat_emits(r, c->eos));
            chat_span_close(r);
            CHAT_TRY(chat_cut_after(r, c->eos));
        }
    }
    return PT_OK;
}
