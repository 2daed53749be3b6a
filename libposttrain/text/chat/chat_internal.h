/* Chat templates, internal side: the template object and its variants, and
 * a rendering (the text plus where the assistant spans are and where the
 * text may be cut for tokenization).  Not installed. */
#ifndef PT_CHAT_INTERNAL_H
#define PT_CHAT_INTERNAL_H

#include "core/strbuf.h"
#include "posttrain/chat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- templates -------------------------------------------------------------------- */
/* The templates a family covers (pt_chat_template_name names them). */
enum pt_chat_variant {
    PT_CHAT_V_CHATML,
    PT_CHAT_V_SMOLLM2,
    PT_CHAT_V_QWEN3,
    PT_CHAT_V_LLAMA3,
    PT_CHAT_V_LLAMA3_GENPROMPT,
    PT_CHAT_V_LLAMA31,
    PT_CHAT_V_LLAMA2,
    PT_CHAT_V_MISTRAL,
    PT_CHAT_V_PHI3,
    PT_CHAT_V_PHI3_VISION,
    PT_CHAT_V_PLAIN
};

struct pt_chat_template {
    int family;
    int variant;
    char *bos;            /* NULL: none */
    char *eos;            /* NULL: none */
    char *default_system; /* NULL: none */
    char *date_default;   /* Llama-3.1 "Today Date" */
};

#define PT_CHAT_SMOLLM2_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
#define PT_CHAT_LLAMA31_DATE "26 Jul 2024"
/* The names pt_chat_template_from_name knows, for messages. */
#define PT_CHAT_NAMES                                                                        \
    "chatml, smollm2, qwen3 (or qwen), llama3, llama3.1, llama2, mistral, phi3, phi3-vision, " \
    "plain"

/* chat_template.c: a template of `variant` with its family's tokens and
 * defaults; replace a token string (NULL: keep, "": none). */
int pt_chat_template_new(pt_chat_template **out, int variant);
int pt_chat_replace_token(char **slot, const char *val);

/* ---- renderings ------------------------------------------------------------------- */
/* A place where tokenization may restart: `pos` is the cut, and the marker
 * text [marker, marker + marker_len) (starting at the cut, or ending at it) is
 * expected to be one added token, which the tokenizer never merges with its
 * neighbours.  A cut whose marker is not one added token is ignored. */
typedef struct pt_chat_cut {
    size_t pos;
    size_t marker;
    size_t marker_len;
} pt_chat_cut;

/* Bytes [begin, end) of the text written by the assistant (mask = 1). */
typedef struct pt_chat_span {
    size_t begin;
    size_t end;
} pt_chat_span;

typedef struct pt_chat_rendering {
    pt_strbuf text;
    pt_chat_cut *cuts;
    size_t n_cuts, cap_cuts;
    pt_chat_span *spans;
    size_t n_spans, cap_spans;
} pt_chat_rendering;

/* chat_render.c: render into `r` (zero it first; free with
 * pt_chat_rendering_clear).  opts may be NULL (defaults) or from an older,
 * smaller header. */
int pt_chat_render_internal(pt_chat_rendering *r, const pt_chat_template *t,
                            const pt_chat_message *messages, size_t n_messages,
                            const pt_chat_options *opts);
/* The same with r and t not NULL, its messages naming the public function
 * `func` that was called. */
int pt_chat_render_checked(pt_chat_rendering *r, const pt_chat_template *t,
                           const pt_chat_message *messages, size_t n_messages,
                           const pt_chat_options *opts, const char *func);
void pt_chat_rendering_clear(pt_chat_rendering *r);

/* ---- ids and mask (chat_ids.c) ---------------------------------------------------- */
/* Tokenization callbacks, so the id/mask logic can be tested with any encoder.
 * encode: ids of text[0, len) without post-processor specials (*ids allocated
 * with pt_malloc or NULL when *n == 0).  is_marker: 1 if text[0, len) is
 * exactly one added token, 0 if not, negative status on failure. */
typedef int (*pt_chat_encode_fn)(int32_t **ids, size_t *n, const char *text, size_t len,
                                 void *payload);
typedef int (*pt_chat_marker_fn)(const char *text, size_t len, void *payload);

/* Token ids and mask of a rendering: the text is cut at the valid cuts, each
 * piece is encoded whole, and each assistant span's token range is found by
 * encoding the piece's prefix up to the span's start and end and comparing it
 * with the piece's ids (see docs/chat.md). */
int pt_chat_ids_from_rendering(int32_t **ids, uint8_t **mask, size_t *n, const pt_chat_rendering *r,
                               pt_chat_encode_fn encode, pt_chat_marker_fn is_marker, void *payload);

/* chat_text.c: Python's str.strip() / lstrip() / rstrip() whitespace
 * (str.isspace) on UTF-8: narrows [*b, *e) of s.  Exposed for the tests. */
void pt_chat_py_strip(const char *s, size_t *b, size_t *e, bool left, bool right);

#endif
