/*
 * libposttrain public API: tokenizers.
 *
 * A pt_tokenizer is loaded from a Hugging Face `tokenizer.json` (BPE model,
 * byte-level or SentencePiece-style with byte fallback) and encodes and
 * decodes exactly as the Hugging Face `tokenizers` library does.  It is
 * immutable after loading, so one tokenizer may be used from several threads
 * at once.  See docs/tokenizer.md for the supported components.
 */
#ifndef POSTTRAIN_TOKENIZER_H
#define POSTTRAIN_TOKENIZER_H

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_tokenizer pt_tokenizer;

/* Flags for pt_tokenizer_encode. */
#define PT_TOK_ADD_SPECIAL 1u   /* add the post-processor's special tokens (e.g. BOS) */
#define PT_TOK_TRUNCATE 4u      /* apply tokenizer.json's "truncation" and "padding" as the
                                   tokenizers library does (ignored by default, as in
                                   transformers) */
/* Flags for pt_tokenizer_decode and the decode stream. */
#define PT_TOK_SKIP_SPECIAL 2u  /* leave special added tokens out of the text */

/* Load a tokenizer.  `path` is a tokenizer.json file or a directory holding
 * one.  A tokenizer_config.json in the same directory, if present, supplies
 * bos/eos/pad/unk token names, add_bos_token/add_eos_token and chat_template
 * (see the accessors below); it does not change encode or decode.
 * Errors: PT_ENOTFOUND, PT_EIO, PT_EFORMAT (malformed), PT_EUNSUPPORTED (a
 * component this version does not implement; the message names its JSON path). */
PT_API int pt_tokenizer_load(pt_tokenizer **out, const char *path);
/* Load from a tokenizer.json document in memory. */
PT_API int pt_tokenizer_load_memory(pt_tokenizer **out, const char *json, size_t len);
/* Same, with the text of a tokenizer_config.json (config may be NULL). */
PT_API int pt_tokenizer_load_memory_config(pt_tokenizer **out, const char *json, size_t len,
                                           const char *config_json, size_t config_len);

/* The built-in byte tokenizer (no files): ids 0-255 are the bytes 0x00-0xFF
 * (their token strings are the byte-level alphabet of GPT-2, e.g. "\u0120"
 * for a space; bytes that are not UTF-8 decode to U+FFFD),
 * then the special tokens 256 <|bos|>, 257 <|eos|>, 258 <|pad|>,
 * 259 <|im_start|>, 260 <|im_end|> (vocabulary size 261).  Special tokens
 * written in the text are matched; PT_TOK_ADD_SPECIAL prepends <|bos|>.
 * bos = 256, eos = 257, pad = 258. */
#define PT_BYTE_TOKENIZER_BOS 256
#define PT_BYTE_TOKENIZER_EOS 257
#define PT_BYTE_TOKENIZER_PAD 258
#define PT_BYTE_TOKENIZER_IM_START 259
#define PT_BYTE_TOKENIZER_IM_END 260
#define PT_BYTE_TOKENIZER_VOCAB 261
PT_API int pt_tokenizer_create_bytes(pt_tokenizer **out);

PT_API void pt_tokenizer_free(pt_tokenizer *t);

/* Encode `len` bytes of `text` (need not be NUL-terminated; invalid UTF-8 is
 * accepted, see docs/tokenizer.md).  *ids is allocated (free with pt_free);
 * it is NULL with *n_ids == 0 when there are no tokens.  Long inputs poll the
 * abort callback (PT_ECANCELLED). */
PT_API int pt_tokenizer_encode(int32_t **ids, size_t *n_ids, const pt_tokenizer *t,
                               const char *text, size_t len, unsigned flags);

/* Decode ids to UTF-8 text (NUL-terminated; *len excludes the NUL; free with
 * pt_free; len may be NULL).  An id < 0 or >= pt_tokenizer_vocab_size() is an
 * error (PT_ERANGE); an unused id inside that range is skipped, as the
 * reference does.  The text is always valid UTF-8 (bytes that do not form
 * UTF-8 become U+FFFD, as the reference's decoders do). */
PT_API int pt_tokenizer_decode(char **text, size_t *len, const pt_tokenizer *t,
                               const int32_t *ids, size_t n, unsigned flags);

/* Ids written as text, "1,2 3": decimal int32 values separated by commas,
 * spaces, tabs or newlines (as `posttrain generate --prompt-ids` takes
 * them).  *ids allocated (free with pt_free), *n >= 1.  PT_EINVAL for a
 * string with no ids, or anything but an int32 between separators. */
PT_API int pt_ids_parse(int32_t **ids, size_t *n, const char *s);

/* Vocabulary. */
PT_API int32_t pt_tokenizer_vocab_size(const pt_tokenizer *t);  /* max id + 1 */
/* PT_ENOTFOUND when the token is not in the vocabulary (added tokens first). */
PT_API int pt_tokenizer_token_to_id(int32_t *id, const pt_tokenizer *t, const char *token);
/* The token's vocabulary string (e.g. "\u0120the" for byte-level BPE), or NULL
 * when id is out of range or unused.  Valid while the tokenizer lives. */
PT_API const char *pt_tokenizer_id_to_token(const pt_tokenizer *t, int32_t id);
/* 1 if id is a special added token, else 0. */
PT_API int pt_tokenizer_is_special(const pt_tokenizer *t, int32_t id);
/* 1 if id is an added token (special or not), else 0. */
PT_API int pt_tokenizer_is_added(const pt_tokenizer *t, int32_t id);

/* Well-known tokens from tokenizer_config.json (bos_token, eos_token,
 * pad_token, unk_token; for unk also the model's unk_token), or -1 / NULL
 * when unknown. */
PT_API int32_t pt_tokenizer_bos_id(const pt_tokenizer *t);
PT_API int32_t pt_tokenizer_eos_id(const pt_tokenizer *t);
PT_API int32_t pt_tokenizer_pad_id(const pt_tokenizer *t);
PT_API int32_t pt_tokenizer_unk_id(const pt_tokenizer *t);
PT_API const char *pt_tokenizer_bos_token(const pt_tokenizer *t);
PT_API const char *pt_tokenizer_eos_token(const pt_tokenizer *t);
PT_API const char *pt_tokenizer_pad_token(const pt_tokenizer *t);
/* add_bos_token / add_eos_token from tokenizer_config.json: 1, 0, or -1 when
 * absent.  Informational: encode follows the tokenizer.json post-processor. */
PT_API int pt_tokenizer_add_bos(const pt_tokenizer *t);
PT_API int pt_tokenizer_add_eos(const pt_tokenizer *t);
/* chat_template from tokenizer_config.json, or NULL.  name == NULL gives the
 * plain string form or the entry named "default"; otherwise the entry of the
 * list form with that name. */
PT_API const char *pt_tokenizer_chat_template(const pt_tokenizer *t, const char *name);

/* Incremental decoding: feed one id at a time, get back only text that is
 * complete (never half a UTF-8 character; decoders such as Strip see the
 * whole context, so the concatenation of all pieces plus the final flush
 * equals pt_tokenizer_decode of all ids). */
typedef struct pt_decode_stream pt_decode_stream;
PT_API int pt_decode_stream_create(pt_decode_stream **out, const pt_tokenizer *t, unsigned flags);
/* *text points into the stream (valid until its next call); *len may be 0. */
PT_API int pt_decode_stream_step(const char **text, size_t *len, pt_decode_stream *s, int32_t id);
/* Emit what is still held back (an incomplete character becomes U+FFFD) and
 * reset the stream for a new sequence. */
PT_API int pt_decode_stream_flush(const char **text, size_t *len, pt_decode_stream *s);
PT_API void pt_decode_stream_free(pt_decode_stream *s);

/* Deprecated: the old name of pt_decode_stream_create (one verb for creation). */
PT_API PT_DEPRECATED("pt_decode_stream_create")
int pt_decode_stream_new(pt_decode_stream **out, const pt_tokenizer *t, unsigned flags);

#ifdef __cplusplus
}
#endif

#endif
