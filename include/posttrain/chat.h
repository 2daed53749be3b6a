/*
 * libposttrain public API: chat templates.
 *
 * A pt_chat_template turns a conversation (system, user, assistant and tool
 * messages) into the text a chat model was trained on, exactly as the
 * model's Jinja chat_template renders it with Hugging Face's
 * apply_chat_template, and into token ids with a per-token mask of the
 * assistant's own tokens (for assistant-only loss).  The library does not
 * run Jinja: it implements the template families below and recognises a
 * tokenizer_config.json chat_template by its markers.  See docs/chat.md for
 * the exact output of each family, the mask rule and what is not supported.
 *
 * Families (pt_chat_template_family) and the names that select them
 * (pt_chat_template_create; the variant name is pt_chat_template_name):
 *   PT_CHAT_CHATML  "chatml"      <|im_start|>role\n...<|im_end|>\n
 *                   "smollm2"     ChatML with SmolLM2's default system prompt
 *                   "qwen2.5"     Qwen2.5-Instruct: ChatML with Qwen's default
 *                                 system prompt, tools, <tool_call> blocks and
 *                                 <tool_response> user turns
 *   PT_CHAT_QWEN3   "qwen3", "qwen"  Qwen3's ChatML (empty <think> block on the
 *                                 final assistant turn, tool responses as user turns)
 *   PT_CHAT_LLAMA3  "llama3"      Meta-Llama-3-Instruct
 *                   "llama3.1"    Llama-3.1/3.3-Instruct (Cutting Knowledge /
 *                                 Today Date system header; also "llama3.3")
 *                   "llama3.2"    Llama-3.2-Instruct (as llama3.1, today's date)
 *
 * Tools (docs/chat.md): the templates that know them ("qwen2.5", "qwen3",
 * "llama3.1", "llama3.2"; pt_chat_template_supports_tools) render the host's
 * tool definitions (pt_chat_options.tools_json), assistant tool calls
 * (pt_chat_message.tool_calls) and tool results exactly as their Jinja source
 * does, with the JSON re-serialised as transformers' `tojson` writes it; the
 * others ignore tool definitions as their Jinja source does and refuse tool
 * calls (their source would silently drop them).  pt_chat_parse_tool_calls
 * reads the calls back out of generated text.
 *   PT_CHAT_LLAMA2  "llama2"      Llama-2-chat: <s>[INST] <<SYS>>...<</SYS>> ... [/INST] ... </s>
 *                   "mistral"     Mistral-7B-Instruct v0.1/v0.2: <s>[INST] ... [/INST]...</s>
 *   PT_CHAT_PHI3    "phi3"        Phi-3-mini-instruct (ends with eos_token unless
 *                                 the generation prompt is added)
 *                   "phi3-vision" Phi-3-vision (<|role|> for every role)
 *   PT_CHAT_PLAIN   "plain"       message contents concatenated, no markup
 */
#ifndef POSTTRAIN_CHAT_H
#define POSTTRAIN_CHAT_H

#include "posttrain/common.h"
#include "posttrain/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pt_chat_role {
    PT_CHAT_ROLE_SYSTEM = 0,
    PT_CHAT_ROLE_USER = 1,
    PT_CHAT_ROLE_ASSISTANT = 2,
    PT_CHAT_ROLE_TOOL = 3    /* a tool's output, in the context but never in the mask */
} pt_chat_role;

/* One tool call of an assistant message: what the model generated, and what
 * pt_chat_parse_tool_calls returns. */
typedef struct pt_chat_tool_call {
    const char *name;       /* the function's name, UTF-8 (written as it is) */
    const char *arguments;  /* its arguments: a JSON object as text, in any
                             * spacing (the template writes json.dumps of it);
                             * NULL means {} */
} pt_chat_tool_call;

/* One message.  content is UTF-8 and NUL-terminated; NULL is an error except on
 * an assistant message with tool calls, where it means "" (no text before the
 * calls).  name is an optional tool name for PT_CHAT_ROLE_TOOL; no supported
 * template renders it (they identify tool results by position), so it is kept
 * only for the host's bookkeeping.  tool_calls / n_tool_calls: the calls an
 * assistant message makes (n_tool_calls 0: none; other roles must have none). */
typedef struct pt_chat_message {
    int role;                /* pt_chat_role */
    const char *content;
    const char *name;
    const pt_chat_tool_call *tool_calls;
    size_t n_tool_calls;
} pt_chat_message;

/* "system", "user", "assistant", "tool" (or NULL for an unknown role). */
PT_API const char *pt_chat_role_name(int role);
/* Parse a role name ("ipython" is accepted as tool).  PT_EINVAL if unknown. */
PT_API int pt_chat_role_from_name(int *out, const char *name);

typedef enum pt_chat_family {
    PT_CHAT_CHATML = 1,
    PT_CHAT_QWEN3 = 2,
    PT_CHAT_LLAMA3 = 3,
    PT_CHAT_LLAMA2 = 4,
    PT_CHAT_PHI3 = 5,
    PT_CHAT_PLAIN = 6
} pt_chat_family;

/* "chatml", "qwen3", "llama3", "llama2", "phi3", "plain", or NULL. */
PT_API const char *pt_chat_family_name(int family);
/* The family of a name pt_chat_family_name returns. */
PT_API int pt_chat_family_from_name(int *out, const char *name);

/* BOS handling (pt_chat_options.bos). */
#define PT_CHAT_BOS_TEMPLATE 0 /* exactly as the template writes it (Llama-3: one
                                  <|begin_of_text|> first; Llama-2: <s> before every
                                  [INST]; Mistral: one <s>; ChatML, Phi-3: none) */
#define PT_CHAT_BOS_NONE 1     /* leave out every BOS the template would write (use
                                  when the host adds BOS itself) */

typedef struct pt_chat_options {
    size_t size;                /* sizeof(pt_chat_options) */
    /* End with the header of an assistant turn, so the model continues with
     * the reply (rollouts).  Default 0. */
    int add_generation_prompt;
    int bos;                    /* PT_CHAT_BOS_*; default PT_CHAT_BOS_TEMPLATE */
    /* System prompt used when the conversation does not start with a system
     * message.  NULL (default): the template's own default (SmolLM2's "You are a
     * helpful AI assistant named SmolLM, ..."; none for the other families).
     * "" : no default system message even where the template has one. */
    const char *default_system;
    /* Qwen3: 0 adds the empty "<think>\n\n</think>\n\n" after the generation
     * prompt (enable_thinking=False).  Default 1. */
    int enable_thinking;
    /* Llama-3.1/3.2: the "Today Date: " line.  NULL (default): the template's
     * ("26 Jul 2024" for Llama-3.1, today's date for Llama-3.2). */
    const char *date_string;
    /* Tool definitions: a JSON array of objects (usually
     * {"type": "function", "function": {"name", "description", "parameters"}}),
     * as transformers' apply_chat_template(tools=...) takes them.  NULL
     * (default): no tools; "[]" is an empty list (Llama-3.1 still writes its
     * "Environment: ipython" line for it, Qwen nothing).  Malformed JSON is
     * PT_EFORMAT naming the byte; templates without tools ignore it. */
    const char *tools_json;
    /* Llama-3.1/3.2 with tools: 1 (default, the template's) lists them in the
     * first user message, 0 in the system header. */
    int tools_in_user_message;
} pt_chat_options;

/* Defaults; PT_EINVAL for NULL (like every other _init). */
PT_API int pt_chat_options_init(pt_chat_options *opts);

typedef struct pt_chat_template pt_chat_template;

/* Create the template of a name (see the table above; case-insensitive).
 * PT_EUNSUPPORTED for an unknown name, listing the known ones. */
PT_API int pt_chat_template_create(pt_chat_template **out, const char *name);

/* Recognise a Jinja chat_template string (a tokenizer_config.json's
 * "chat_template") by its markers.  bos_token / eos_token are that file's
 * tokens (NULL: the family's usual ones).  An unrecognised template is
 * PT_EUNSUPPORTED with a message saying how to choose a family by name. */
PT_API int pt_chat_template_from_source(pt_chat_template **out, const char *source,
                                        const char *bos_token, const char *eos_token);

/* Recognise the chat_template of a loaded tokenizer (its tokenizer_config.json),
 * with its bos/eos tokens.  PT_ENOTFOUND when the tokenizer has no
 * chat_template (choose one with pt_chat_template_create). */
PT_API int pt_chat_template_from_tokenizer(pt_chat_template **out, const pt_tokenizer *tok);

PT_API void pt_chat_template_free(pt_chat_template *t);

/* Deprecated: the old name of pt_chat_template_create (`_from_name` is kept
 * for the enum parsers). */
PT_API PT_DEPRECATED("pt_chat_template_create")
int pt_chat_template_from_name(pt_chat_template **out, const char *name);

PT_API int pt_chat_template_family(const pt_chat_template *t);
/* Variant name: "chatml", "smollm2", "qwen2.5", "qwen3", "llama3",
 * "llama3-genprompt" (the first Llama-3 template revision, which always ends
 * with the assistant header), "llama3.1", "llama3.2", "llama2", "mistral",
 * "phi3", "phi3-vision", "plain". */
PT_API const char *pt_chat_template_name(const pt_chat_template *t);

/* 1 if the template renders tool definitions and assistant tool calls
 * ("qwen2.5", "qwen3", "llama3.1", "llama3.2"), else 0 (also for NULL). */
PT_API int pt_chat_template_supports_tools(const pt_chat_template *t);

/* Replace the bos/eos token strings the template writes (NULL leaves one
 * unchanged, "" removes it).  For "plain", an eos token is written after each
 * assistant message (none by default). */
PT_API int pt_chat_template_set_tokens(pt_chat_template *t, const char *bos_token,
                                       const char *eos_token);

/* Render to text.  *text is NUL-terminated (free with pt_free); *len excludes
 * the NUL.  opts may be NULL for the defaults.  Conversations a template
 * rejects (roles that do not alternate for Llama-2/Mistral, a system message
 * for Mistral, tool messages where the family has no tool turn) give
 * PT_EINVAL or PT_EUNSUPPORTED naming the message. */
PT_API int pt_chat_render(char **text, size_t *len, const pt_chat_template *t,
                          const pt_chat_message *messages, size_t n_messages,
                          const pt_chat_options *opts);

/* Render to token ids with `tok` (no post-processor specials: the template
 * writes BOS itself, as apply_chat_template(tokenize=True) does) and a mask
 * with 1 on the assistant's own tokens: each assistant message's content and
 * its end-of-turn marker (<|im_end|>, <|eot_id|>, <|end|>, </s>; for Qwen3 the
 * <think> block the template writes too), never the role header, the newline
 * after the end-of-turn marker, or the generation prompt.  The ids equal
 * pt_tokenizer_encode() of the rendered text.  A token that straddles the
 * start or end of an assistant span (possible only when content begins or ends
 * with characters a BPE merge joins with the markup) is in the mask.
 * *ids and *mask are allocated (free with pt_free); mask may be NULL when not
 * wanted.  *n may be 0 (with NULL arrays). */
PT_API int pt_chat_render_ids(int32_t **ids, uint8_t **mask, size_t *n, const pt_chat_template *t,
                              const pt_tokenizer *tok, const pt_chat_message *messages,
                              size_t n_messages, const pt_chat_options *opts);

/* The tool calls in text[0, len) that a model generated after the assistant
 * header, in the template's format:
 *   "qwen2.5", "qwen3", "chatml", "smollm2": <tool_call>{"name": ..., "arguments": {...}}</tool_call>
 *       blocks (whitespace around the JSON allowed), any number, after the
 *       assistant's text;
 *   "llama3.1", "llama3.2": the whole reply is one {"name": ..., "parameters": {...}}
 *       object (a reply that does not start with '{' has no call).
 * *calls gets *n_calls calls (one allocation holding the array and its strings:
 * free with pt_free; NULL when there are none); each call's arguments are
 * json.dumps of the object, so the calls can be put on an assistant message
 * as they are.  content_len (may be NULL) gets the length of the text before
 * the first call without the whitespace that ends it: the message's content.
 * Only whitespace may separate or follow the calls (and, at the very end, the
 * template's end-of-turn token).  A malformed call is PT_EFORMAT naming the
 * call, its byte offset and what is wrong (bad JSON and where, no "name",
 * arguments that are not an object, an unknown key, an unterminated
 * <tool_call>); a template with no tool-call format is PT_EUNSUPPORTED. */
PT_API int pt_chat_parse_tool_calls(pt_chat_tool_call **calls, size_t *n_calls, size_t *content_len,
                                    const pt_chat_template *t, const char *text, size_t len);

#ifdef __cplusplus
}
#endif

#endif
