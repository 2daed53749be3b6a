/* What exporters (modelio/gguf_vocab.c) read from a tokenizer beyond the
 * public API.  Internal. */
#ifndef PT_TEXT_TOK_EXPORT_H
#define PT_TEXT_TOK_EXPORT_H

#include "posttrain/tokenizer.h"

#include <stdint.h>

/* The number of entries of the model's vocabulary, added tokens not
 * counted: what Hugging Face's get_vocab_size(with_added_tokens=False)
 * (transformers' tokenizer.vocab_size) returns.  0 for NULL. */
int32_t pt__tok_model_vocab_count(const pt_tokenizer *t);

#endif
