/* Recognising a Jinja chat_template (a tokenizer_config.json's) by its
 * markers: which variant it is, and the defaults written in it. */
#include "text/chat/chat_internal.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static bool has(const char *s, const char *needle)
{
    return strstr(s, needle) != NULL;
}

/* A ChatML template's built-in default system prompt: the literal
 * '<|im_start|>system\n ... <|im_end|>' inside a Jinja string, if the text
 * between is plain (no quotes, concatenation or expressions). */
static int chatml_default_system(char **out, const char *src)
{
    *out = NULL;
    static const char *const heads[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
    for (int h = 0; h < 2; h++) {
        for (const char *p = strstr(src, heads[h]); p; p = strstr(p, heads[h])) {
            p += strlen(heads[h]);
            const char *end = strstr(p, "<|im_end|>");
            if (!end || end == p)
                continue;
            bool plain = true;
            for (const char *q = p; q < end; q++)
                if (*q == '\'' || *q == '"' || *q == '+' || *q == '{' || *q == '}')
                    plain = false;
            if (!plain)
                continue;
            char *s = pt__malloc((size_t)(end - p) + 1);
            if (!s)
                return PT_ENOMEM;
            size_t n = 0;
            for (const char *q = p; q < end; q++) {
                if (q[0] == '\\' && q + 1 < end) {
                    char c = q[1];
                    if (c == 'n' || c == 't' || c == '\\' || c == '\'' || c == '"') {
                        s[n++] = c == 'n' ? '\n' : c == 't' ? '\t' : c;
                        q++;
                        continue;
                    }
                }
                s[n++] = *q;
            }
            s[n] = '\0';
            *out = s;
            return PT_OK;
        }
    }
    return PT_OK;
}

/* The default date of a Llama-3.1 style template: set date_string = "...". */
static int llama31_date(char **out, const char *src)
{
    *out = NULL;
    const char *p = strstr(src, "set date_string = \"");
    if (!p)
        return PT_OK;
    p += strlen("set date_string = \"");
    const char *e = strchr(p, '"');
    if (!e || e - p > 64)
        return PT_OK;
    char *s = pt__malloc((size_t)(e - p) + 1);
    if (!s)
        return PT_ENOMEM;
    memcpy(s, p, (size_t)(e - p));
    s[e - p] = '\0';
    *out = s;
    return PT_OK;
}

static int unrecognised(const char *why)
{
    return pt__err(PT_EUNSUPPORTED,
                  "unrecognised chat_template (%s); choose a template by name with "
                  "pt_chat_template_create() (posttrain --chat-template NAME): " PT_CHAT_NAMES,
                  why);
}

static int detect_variant(int *variant, const char *src)
{
    if (has(src, "<|im_start|>")) {
        if (has(src, "</think>") || has(src, "<think>") || has(src, "reasoning_content")) {
            if (has(src, "last_query_index") && has(src, "<tool_response>")) {
                *variant = PT_CHAT_V_QWEN3;
                return PT_OK;
            }
            return unrecognised("a ChatML template with reasoning markup other than Qwen3's");
        }
        if (has(src, "tool")) {
            /* Qwen2.5-Instruct's: a <tools> block, tool calls as <tool_call> JSON, tool
             * results as <tool_response> user turns */
            if (has(src, "<tool_call>") && has(src, "<tool_response>") && has(src, "# Tools") &&
                has(src, "tool_call.arguments | tojson") && has(src, "message.tool_calls")) {
                *variant = PT_CHAT_V_QWEN25;
                return PT_OK;
            }
            return unrecognised("a ChatML template with tool-call logic other than Qwen2.5's or Qwen3's");
        }
        *variant = PT_CHAT_V_CHATML;
        return PT_OK;
    }
    if (has(src, "<|start_header_id|>")) {
        if (has(src, "Cutting Knowledge Date")) {
            /* Llama-3.2's source takes the date from strftime_now */
            *variant = has(src, "strftime_now") ? PT_CHAT_V_LLAMA32 : PT_CHAT_V_LLAMA31;
            return PT_OK;
        }
        if (!has(src, "| trim") && !has(src, "|trim"))
            return unrecognised("a Llama-3 style template that does not trim message content");
        *variant = has(src, "add_generation_prompt") ? PT_CHAT_V_LLAMA3 : PT_CHAT_V_LLAMA3_GENPROMPT;
        return PT_OK;
    }
    if (has(src, "[INST]")) {
        if (has(src, "<<SYS>>")) {
            if (has(src, "content.strip()") && has(src, "bos_token + '[INST] '")) {
                *variant = PT_CHAT_V_LLAMA2;
                return PT_OK;
            }
            return unrecognised("a [INST] <<SYS>> template other than Llama-2-chat's");
        }
        if (has(src, "[AVAILABLE_TOOLS]") || has(src, "[SYSTEM_PROMPT]"))
            return unrecognised("a Mistral template with system prompt or tool markup (v3/Tekken)");
        if (has(src, "'[INST] ' + message['content'] + ' [/INST]'") &&
            has(src, "message['content'] + eos_token")) {
            *variant = PT_CHAT_V_MISTRAL;
            return PT_OK;
        }
        return unrecognised("an [INST] template other than Llama-2-chat's or Mistral-7B-Instruct v0.1/v0.2's");
    }
    if (has(src, "<|user|>") || has(src, "<|assistant|>") || has(src, "'<|' + message['role'] + '|>'")) {
        if (!has(src, "<|end|>"))
            return unrecognised("a <|user|> template without Phi-3's <|end|> (e.g. Zephyr/TinyLlama)");
        if (has(src, "'<|' + message['role'] + '|>'")) {
            *variant = PT_CHAT_V_PHI3_VISION;
            return PT_OK;
        }
        *variant = PT_CHAT_V_PHI3;
        return PT_OK;
    }
    return unrecognised("none of the markers <|im_start|>, <|start_header_id|>, [INST], <|user|> found");
}

/* What the source adds to the family's defaults: ChatML's built-in system
 * prompt (SmolLM2's makes it the smollm2 variant; Qwen2.5's is whatever its
 * source writes, none if it writes none), Llama-3.1's date. */
static int source_defaults(pt_chat_template *t, const char *source)
{
    int st = PT_OK;
    if (t->variant == PT_CHAT_V_QWEN25) {
        char *sys = NULL;
        st = chatml_default_system(&sys, source);
        if (st == PT_OK) {
            free(t->default_system);
            t->default_system = sys;
        }
    } else if (t->variant == PT_CHAT_V_CHATML) {
        char *sys = NULL;
        st = chatml_default_system(&sys, source);
        if (st == PT_OK && sys) {
            free(t->default_system);
            t->default_system = sys;
            if (strcmp(sys, PT_CHAT_SMOLLM2_SYSTEM) == 0)
                t->variant = PT_CHAT_V_SMOLLM2;
        }
    } else if (t->variant == PT_CHAT_V_LLAMA31) {
        char *date = NULL;
        st = llama31_date(&date, source);
        if (st == PT_OK && date) {
            free(t->date_default);
            t->date_default = date;
        }
    }
    return st;
}

int pt_chat_template_from_source(pt_chat_template **out, const char *source, const char *bos_token,
                                 const char *eos_token)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(source);
    int variant = 0;
    int st = detect_variant(&variant, source);
    if (st != PT_OK)
        return st;
    pt_chat_template *t = NULL;
    st = pt__chat_template_new(&t, variant);
    if (st != PT_OK)
        return st;
    st = source_defaults(t, source);
    /* The file's tokens replace the family defaults; a NULL one keeps them. */
    if (st == PT_OK && bos_token)
        st = pt__chat_replace_token(&t->bos, bos_token);
    if (st == PT_OK && eos_token)
        st = pt__chat_replace_token(&t->eos, eos_token);
    if (st != PT_OK) {
        pt_chat_template_free(t);
        return st;
    }
    *out = t;
    return PT_OK;
}
