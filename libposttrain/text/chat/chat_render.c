/* Rendering a conversation: options, checks, and the family's renderer;
 * pt_chat_render hands back the text (pt_chat_render_ids, in chat_tok.c,
 * the ids and mask). */
#include "text/chat/chat_render.h"

#include "core/core.h"
#include "text/tok_util.h"

#include <stdlib.h>
#include <string.h>

int pt_chat_options_init(pt_chat_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->bos = PT_CHAT_BOS_TEMPLATE;
    opts->enable_thinking = 1;
    return PT_OK;
}

void pt_chat_rendering_clear(pt_chat_rendering *r)
{
    if (!r)
        return;
    pt_strbuf_free(&r->text);
    free(r->cuts);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

/* A conversation every family can take: at least one message, each with
 * content and a known role. */
static int check_messages(const pt_chat_message *messages, size_t n_messages, const char *func)
{
    if (n_messages == 0)
        return pt_err_arg(func, "n_messages", "is 0 (the conversation is empty)");
    if (!messages)
        return pt_err_arg(func, "messages", "is NULL");
    for (size_t i = 0; i < n_messages; i++) {
        if (!messages[i].content)
            return pt_err(PT_EINVAL, "%s: chat message %zu has NULL content", func, i);
        if (!pt_chat_role_name(messages[i].role))
            return pt_err(PT_EINVAL, "%s: chat message %zu has unknown role %d", func, i, messages[i].role);
    }
    return PT_OK;
}

static int render_family(chat_render_ctx *c)
{
    switch (c->t->variant) {
    case PT_CHAT_V_CHATML:
    case PT_CHAT_V_SMOLLM2: return chat_render_chatml(c);
    case PT_CHAT_V_QWEN3: return chat_render_qwen3(c);
    case PT_CHAT_V_LLAMA3:
    case PT_CHAT_V_LLAMA3_GENPROMPT:
    case PT_CHAT_V_LLAMA31: return chat_render_llama3(c);
    case PT_CHAT_V_LLAMA2: return chat_render_llama2(c);
    case PT_CHAT_V_MISTRAL: return chat_render_mistral(c);
    case PT_CHAT_V_PHI3:
    case PT_CHAT_V_PHI3_VISION: return chat_render_phi3(c);
    case PT_CHAT_V_PLAIN: return chat_render_plain(c);
    default: return pt_err(PT_EINTERNAL, "chat template variant %d", c->t->variant);
    }
}

int pt_chat_render_checked(pt_chat_rendering *r, const pt_chat_template *t, const pt_chat_message *messages,
                           size_t n_messages, const pt_chat_options *opts, const char *func)
{
    pt_chat_options o;
    (void)pt_chat_options_init(&o);
    int st = pt_struct_read(&o, sizeof o, opts, func, "pt_chat_options_init");
    if (st != PT_OK)
        return st;
    if (o.bos != PT_CHAT_BOS_TEMPLATE && o.bos != PT_CHAT_BOS_NONE)
        return pt_err_arg(func, "opts->bos", "is %d (expected PT_CHAT_BOS_TEMPLATE or PT_CHAT_BOS_NONE)", o.bos);
    if ((st = check_messages(messages, n_messages, func)) != PT_OK)
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
    };
    if (c.default_system && !*c.default_system)
        c.default_system = NULL;
    if (c.bos && !*c.bos)
        c.bos = NULL;
    tk_strbuf_reuse(&r->text);
    r->n_cuts = r->n_spans = 0;
    if ((st = pt_strbuf_reserve(&r->text, 0)) != PT_OK)
        return st;
    st = render_family(&c);
    return st != PT_OK ? st : r->text.err;
}

int pt_chat_render_internal(pt_chat_rendering *r, const pt_chat_template *t, const pt_chat_message *messages,
                            size_t n_messages, const pt_chat_options *opts)
{
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(t);
    return pt_chat_render_checked(r, t, messages, n_messages, opts, __func__);
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
    int st = pt_chat_render_checked(&r, t, messages, n_messages, opts, __func__);
    if (st == PT_OK)
        *text = pt_strbuf_detach(&r.text, len);
    pt_chat_rendering_clear(&r);
    return st;
}
