/* Rendering a conversation: what the family renderers (chat_families.c) are
 * given, and how they write the text (chat_text.c).  Not installed. */
#ifndef PT_CHAT_RENDER_H
#define PT_CHAT_RENDER_H

#include "text/chat/chat_internal.h"

typedef struct chat_render_ctx {
    pt_chat_rendering *r;
    const pt_chat_template *t;
    const pt_chat_message *m;   /* n >= 1 messages, checked */
    size_t n;
    const pt_chat_options *o;   /* complete (defaults filled in) */
    const char *bos;            /* NULL when left out */
    const char *eos;
    const char *default_system; /* NULL when none */
    /* tools_json and its elements (each an object), when tools were given */
    const char *tools_json;     /* NULL: no tools (the template's `tools` is None) */
    const pt_chat_span *tools;  /* n_tools spans of tools_json */
    size_t n_tools;
} chat_render_ctx;

/* Return from the calling function when expr fails. */
#define CHAT_TRY(expr)               \
    do {                             \
        int st_ = (expr);            \
        if (st_ != PT_OK)            \
            return st_;              \
    } while (0)

/* ---- writing the text (chat_text.c) ------------------------------------------------ */
static inline int chat_emit(pt_chat_rendering *r, const char *s, size_t n)
{
    return pt__strbuf_put(&r->text, s, n);
}
static inline int chat_emits(pt_chat_rendering *r, const char *s)
{
    return pt__strbuf_puts(&r->text, s);
}
/* s[0..n) with Python's strip() applied. */
int chat_emit_stripped(pt_chat_rendering *r, const char *s, size_t n);
/* Record a cut at the current end, before the marker that is written next
 * (nothing at the very start, or for a NULL or empty marker). */
int chat_cut_before(pt_chat_rendering *r, const char *marker);
/* Record a cut at the current end, after the marker just written (nothing
 * when the text does not end with it). */
int chat_cut_after(pt_chat_rendering *r, const char *marker);
/* An assistant span from the current end; closing it ends it there. */
int chat_span_open(pt_chat_rendering *r);
void chat_span_close(pt_chat_rendering *r);
/* Tool definition i as `tool | tojson` (indent < 0) or `tojson(indent=N)`. */
int chat_emit_tool(chat_render_ctx *c, size_t i, int indent);
/* A call's arguments as `arguments | tojson` ({} for NULL). */
int chat_emit_arguments(chat_render_ctx *c, const pt_chat_tool_call *call);

/* ---- the families (chat_families.c) ------------------------------------------------ */
int chat_render_chatml(chat_render_ctx *c);
int chat_render_qwen25(chat_render_ctx *c);
int chat_render_qwen3(chat_render_ctx *c);
int chat_render_llama3(chat_render_ctx *c);
int chat_render_llama2(chat_render_ctx *c);
int chat_render_mistral(chat_render_ctx *c);
int chat_render_phi3(chat_render_ctx *c);
int chat_render_plain(chat_render_ctx *c);

#endif
