/* The tokenizer as modelio uses it: thin wrappers that put the model
 * directory in front of a tokenizer error. */
#include "core/core.h"
#include "modelio/modelio_internal.h"
#include "modelio/tokshim.h"

int pt_modelio_tokenizer_load(pt_tokenizer **out, const char *dir)
{
    *out = NULL;
    int st = pt_tokenizer_load(out, dir);
    if (st)
        return pt_err_prefix(st, "%s: tokenizer", dir);
    return PT_OK;
}

void pt_modelio_tokenizer_free(pt_tokenizer *t)
{
    pt_tokenizer_free(t);
}

int pt_modelio_encode(int32_t **ids, size_t *n, const pt_tokenizer *t, const char *text,
                      size_t len, unsigned flags)
{
    return pt_tokenizer_encode(ids, n, t, text, len, flags);
}

int32_t pt_modelio_tokenizer_vocab(const pt_tokenizer *t)
{
    return pt_tokenizer_vocab_size(t);
}
