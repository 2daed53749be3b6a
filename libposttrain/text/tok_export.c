/* Tokenizer facts for exporters (tok_export.h). */
#include "text/tok_export.h"

#include "text/tok_internal.h"

int32_t pt__tok_model_vocab_count(const pt_tokenizer *t)
{
    return t ? (int32_t)t->vocab.n : 0;
}
