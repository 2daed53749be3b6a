/* Chat templates, internal side: a rendering is the text plus where the
 * assistant spans are and where the text may be cut for tokenization.  Not
 * installed. */
#ifndef PT_CHAT_INTERNAL_H
#define PT_CHAT_INTERNAL_H

#include "posttrain/chat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    char *text;
    size_t len, cap;
    pt_chat_cut *cuts;
    size_t n_cuts, cap_cuts;
    pt_chat_span *spans;
    size_t n_spans, cap_spans;
} pt_chat_rendering;

/* Render into `r` (zero it first; free with pt_chat_rendering_clear). */
int pt_chat_render_internal(pt_chat_rendering *r, const pt_chat_template *t,
                            const pt_chat_message *messages, size_t n_messages,
                            const pt_chat_options *opts);
void pt_chat_rendering_clear(pt_chat_rendering *r);

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

/* Python's str.strip() / lstrip() / rstrip() whitespace (str.isspace) on UTF-8:
 * narrows [*b, *e) of s.  Exposed for the tests. */
void pt_chat_py_strip(const char *s, size_t *b, size_t *e, bool left, bool right);

#endif
