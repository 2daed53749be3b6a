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
    qwen3_parts p;
    qwen3_split(&p, c->m[i].content, strlen(c->m[i].content));
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
    if (m[0].role == PT_CHAT_ROLE_SYSTEM)
        CHAT_TRY(chatml_system(r, m[0].content));
    else if (c->default_system)
        CHAT_TRY(chatml_system(r, c->default_system));
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

int chat_render_llama3(chat_render_ctx *c)
{
    pt_chat_rendering *r = c->r;
    size_t first = 0;
    if (c->bos)
        CHAT_TRY(chat_emits(r, c->bos));
    if (c->t->variant == PT_CHAT_V_LLAMA31) {
        const char *sys = "";
        if (c->m[0].role == PT_CHAT_ROLE_SYSTEM) {
            sys = c->m[0].content;
            first = 1;
        } else if (c->default_system) {
            sys = c->default_system;
        }
        const char *date = c->o->date_string ? c->o->date_string
                                             : (c->t->date_default ? c->t->date_default : PT_CHAT_LLAMA31_DATE);
        CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
        CHAT_TRY(chat_emits(r, "<|start_header_id|>system<|end_header_id|>\n\n"));
        CHAT_TRY(chat_emits(r, "Cutting Knowledge Date: December 2023\nToday Date: "));
        CHAT_TRY(chat_emits(r, date));
        CHAT_TRY(chat_emits(r, "\n\n"));
        CHAT_TRY(chat_emit_stripped(r, sys, strlen(sys)));
        CHAT_TRY(chat_emits(r, "<|eot_id|>"));
    } else if (c->default_system && c->m[0].role != PT_CHAT_ROLE_SYSTEM) {
        CHAT_TRY(llama3_turn(c, "system", c->default_system, false));
    }
    for (size_t i = first; i < c->n; i++) {
        int role = c->m[i].role;
        if (c->t->variant == PT_CHAT_V_LLAMA31 && role == PT_CHAT_ROLE_TOOL) {
            CHAT_TRY(chat_cut_before(r, "<|start_header_id|>"));
            CHAT_TRY(chat_emits(r, "<|start_header_id|>ipython<|end_header_id|>\n\n"));
            /* json.dumps(content, ensure_ascii=False) */
            const char *s = c->m[i].content;
            CHAT_TRY(pt_json_put_string_ex(&r->text, s, strlen(s), PT_JSON_SHORT_ESCAPES));
            CHAT_TRY(chat_emits(r, "<|eot_id|>"));
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
    return pt_err(PT_EINVAL,
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
                pt_chat_py_strip(r->text.p, &b, &e, false, true);
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
            return pt_err(PT_EUNSUPPORTED,
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
            return pt_err(PT_EUNSUPPORTED,
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
            return pt_err(PT_EUNSUPPORTED,
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
