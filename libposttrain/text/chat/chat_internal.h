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
    PT_CHAT_V_PLAIN,
    PT_CHAT_V_QWEN25,
    PT_CHAT_V_LLAMA32
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
#define PT_CHAT_QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#define PT_CHAT_LLAMA31_DATE "26 Jul 2024"
/* The names pt_chat_template_create knows, for messages. */
#define PT_CHAT_NAMES                                                                          \
    "chatml, smollm2, qwen2.5, qwen3 (or qwen), llama3, llama3.1, llama3.2, llama2, mistral, " \
    "phi3, phi3-vision, plain"

/* chat_template.c: a template of `variant` with its family's tokens and
 * defaults; replace a token string (NULL: keep, "": none). */
int pt__chat_template_new(pt_chat_template **out, int variant);
int pt__chat_replace_token(char **slot, const char *val);
/* Does the variant render tools and tool calls? */
bool pt__chat_variant_has_tools(int variant);
/* Today's date as Llama-3.2's template writes it (strftime "%d %b %Y"), into
 * t->date_default. */
int pt__chat_set_today(pt_chat_template *t);

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
 * pt__chat_rendering_clear).  opts may be NULL (defaults) or from an older,
 * smaller header. */
int pt__chat_render_internal(pt_chat_rendering *r, const pt_chat_template *t,
                            const pt_chat_message *messages, size_t n_messages,
                            const pt_chat_options *opts);
/* The same with r and t not NULL, its messages naming the public function
 * `func` that was called. */
int pt__chat_render_checked(pt_chat_rendering *r, const pt_chat_template *t,
                           const pt_chat_message *messages, size_t n_messages,
                           const pt_chat_options *opts, const char *func);
void pt__chat_rendering_clear(pt_chat_rendering *r);

/* ---- ids and mask (chat_ids.c) ---------------------------------------------------- */
/* Tokenization callbacks, so the id/mask logic can be tested with any encoder.
 * encode: ids of text[0, len) without post-processor specials (*ids allocated
 * with pt__malloc or NULL when *n == 0).  is_marker: 1 if text[0, len) is
 * exactly one added token, 0 if not, negative status on failure. */
typedef int (*pt_chat_encode_fn)(int32_t **ids, size_t *n, const char *text, size_t len,
                                 void *payload);
typedef int (*pt_chat_marker_fn)(const char *text, size_t len, void *payload);

/* Token ids and mask of a rendering: the text is cut at the valid cuts, each
 * piece is encoded whole, and each assistant span's token range is found by
 * encoding the piece's prefix up to the span's start and end and comparing it
 * with the piece's ids (see docs/chat.md). */
int pt__chat_ids_from_rendering(int32_t **ids, uint8_t **mask, size_t *n, const pt_chat_rendering *r,
                               pt_chat_encode_fn encode, pt_chat_marker_fn is_marker, void *payload);

/* ---- JSON as `tojson` writes it (chat_json.c) -------------------------------------- */
/* Where and why a JSON text is malformed. */
typedef struct pt_chat_json_err {
    size_t at;       /* byte offset in the text */
    char what[128];
} pt_chat_json_err;

/* One JSON value at s[*pos, n) (leading whitespace skipped; *pos is left just
 * after it), appended to out as Python's json.dumps(json.loads(value),
 * ensure_ascii=False, indent=indent) writes it (indent < 0: none); out NULL
 * only checks it.  PT_EFORMAT with *e filled for malformed JSON. */
int pt__chat_json_value(pt_strbuf *out, const char *s, size_t n, size_t *pos, int indent, pt_chat_json_err *e);
/* The same for a text that is exactly one value (whitespace around it). */
int pt__chat_json_dump(pt_strbuf *out, const char *s, size_t n, int indent, pt_chat_json_err *e);
/* The JSON string token at s[*pos] decoded (UTF-8) into raw. */
int pt__chat_json_string(pt_strbuf *raw, const char *s, size_t n, size_t *pos, pt_chat_json_err *e);
/* The first position at or after pos that is not JSON whitespace. */
size_t pt__chat_json_ws(const char *s, size_t n, size_t pos);
/* "an object", "a string", ... for a value starting with `first`. */
const char *pt__chat_json_kind(char first);
/* v as Python's repr(float) (json.dumps' float form: 1.0, 1e-07, 1e+16, Infinity). */
int pt__chat_put_py_float(pt_strbuf *b, double v);

/* chat_text.c: Python's str.strip() / lstrip() / rstrip() whitespace
 * (str.isspace) on UTF-8: narrows [*b, *e) of s.  Exposed for the tests. */
void pt__chat_py_strip(const char *s, size_t *b, size_t *e, bool left, bool right);

#endif
