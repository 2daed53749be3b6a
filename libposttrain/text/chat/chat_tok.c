/* Chat templates with a tokenizer: recognition from its tokenizer_config.json
 * and rendering to ids with the assistant mask. */
#include "text/chat/chat_internal.h"

#include "core/core.h"

#include <stdlib.h>

static int tok_encode(int32_t **ids, size_t *n, const char *text, size_t len, void *payload)
{
    return pt_tokenizer_encode(ids, n, (const pt_tokenizer *)payload, text, len, 0);
}

static int tok_is_marker(const char *text, size_t len, void *payload)
{
    const pt_tokenizer *tok = payload;
    int32_t *ids = NULL;
    size_t n = 0;
    int st = pt_tokenizer_encode(&ids, &n, tok, text, len, 0);
    if (st != PT_OK)
        return st;
    int ok = n == 1 && pt_tokenizer_is_added(tok, ids[0]);
    free(ids);
    return ok;
}

int pt_chat_render_ids(int32_t **ids, uint8_t **mask, size_t *n, const pt_chat_template *t,
                       const pt_tokenizer *tok, const pt_chat_message *messages, size_t n_messages,
                       const pt_chat_options *opts)
{
    PT_CHECK_NULL(ids);
    PT_CHECK_NULL(n);
    *ids = NULL;
    *n = 0;
    if (mask)
        *mask = NULL;
    PT_CHECK_NULL(t);
    PT_CHECK_NULL(tok);
    pt_chat_rendering r = {0};
    int st = pt__chat_render_checked(&r, t, messages, n_messages, opts, __func__);
    if (st == PT_OK)
        st = pt__chat_ids_from_rendering(ids, mask, n, &r, tok_encode, tok_is_marker, (void *)tok);
    pt__chat_rendering_clear(&r);
    return st;
}

int pt_chat_template_from_tokenizer(pt_chat_template **out, const pt_tokenizer *tok)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(tok);
    const char *src = pt_tokenizer_chat_template(tok, NULL);
    if (!src)
        return pt__err(PT_ENOTFOUND,
                      "the tokenizer has no chat_template (tokenizer_config.json); choose a template "
                      "by name with pt_chat_template_create()");
    return pt_chat_template_from_source(out, src, pt_tokenizer_bos_token(tok), pt_tokenizer_eos_token(tok));
}
