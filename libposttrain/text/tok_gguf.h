/* A Hugging Face tokenizer.json and tokenizer_config.json rebuilt from the
 * tokenizer.ggml.* metadata of a GGUF file: the reverse of what llama.cpp's
 * converter writes.  Internal to libposttrain; see docs/gguf.md, "Import".
 *
 * tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, token_type, merges,
 * pre) becomes a BPE model with the pre-tokenizer of the `pre` name and the
 * ByteLevel decoder; "llama" (SentencePiece-style: tokens, scores,
 * token_type) becomes Llama-2's byte-fallback BPE with the "▁" normalizer
 * and decoder, its merges derived from the scores as Hugging Face's
 * SentencePiece converter derives them (or tokenizer.ggml.merges when the
 * file has them).  Control (3) tokens become special added tokens,
 * user-defined (4) ones non-special added tokens. */
#ifndef PT_TEXT_TOK_GGUF_H
#define PT_TEXT_TOK_GGUF_H

#include "io/gguf.h"

#include <stddef.h>
#include <stdint.h>

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum {
    PT_GGUF_TOKEN_NORMAL = 1,
    PT_GGUF_TOKEN_UNKNOWN = 2,
    PT_GGUF_TOKEN_CONTROL = 3,
    PT_GGUF_TOKEN_USER_DEFINED = 4,
    PT_GGUF_TOKEN_UNUSED = 5,
    PT_GGUF_TOKEN_BYTE = 6
};

/* Whether the file has a tokenizer (tokenizer.ggml.model present and not
 * "none"). */
bool pt__tok_gguf_present(const pt_gguf *g);

/* The two texts (free with pt_free).  `what` names the file in messages;
 * model_max_length (> 0) goes into tokenizer_config.json.  PT_EUNSUPPORTED
 * for a tokenizer model other than gpt2 / llama or a `pre` name without a
 * known pre-tokenizer; PT_EFORMAT (naming the key and entry) for malformed
 * metadata: wrong types, lengths that disagree, a merge whose parts are not
 * tokens, a special token id out of range, invalid UTF-8. */
int pt__tok_gguf_texts(char **tokenizer_json, char **config_json, const pt_gguf *g,
                      const char *what, int model_max_length);

#endif
