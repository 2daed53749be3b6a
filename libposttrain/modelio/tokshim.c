/* The tokenizer as modelio uses it.  The tokenizer is another layer's work
 * landing in the same release; until its definitions are linked in, these
 * weak references make the model-directory tokenizer report PT_EUNSUPPORTED
 * instead of breaking the build. */
#include "core/core.h"
#include "modelio/modelio_internal.h"
#include "modelio/tokshim.h"

#pragma weak pt_tokenizer_load
#pragma weak pt_tokenizer_free
#pragma weak pt_tokenizer_encode
#pragma weak pt_tokenizer_vocab_size

int pt_modelio_tokenizer_load(pt_tokenizer **out, const char *dir)
{
    *out = NULL;
    if (!pt_tokenizer_load)
        return pt_err(PT_EUNSUPPORTED, "%s: this build has no tokenizer", dir);
    int st = pt_tokenizer_load(out, dir);
    if (st)
        return pt_err_prefix(st, "%s: tokenizer", dir);
    return PT_OK;
}

void pt_modelio_tokenizer_free(pt_tokenizer *t)
{
    if (t && pt_tokenizer_free)
        pt_tokenizer_free(t);
}

int pt_modelio_encode(int32_t **ids, size_t *n, const pt_tokenizer *t, const char *text,
                      size_t len, unsigned flags)
{
    if (!pt_tokenizer_encode)
        return pt_err(PT_EUNSUPPORTED, "this build has no tokenizer");
    return pt_tokenizer_encode(ids, n, t, text, len, flags);
}

int32_t pt_modelio_tokenizer_vocab(const pt_tokenizer *t)
{
    return pt_tokenizer_vocab_size ? pt_tokenizer_vocab_size(t) : 0;
}
