/* What modelio keeps with a loaded model (its source directory and
 * tokenizer): pt_model's struct belongs to the model layer, so this record
 * rides in the model's attachment and is freed with the model. */
#include "core/core.h"
#include "model/model.h"
#include "modelio/modelio_internal.h"
#include "posttrain/modelio.h"

typedef struct mio_rec {
    char *dir;
    pt_tokenizer *tok;
} mio_rec;

static void free_rec(void *p)
{
    mio_rec *r = p;
    if (!r)
        return;
    pt_free(r->dir);
    pt_tokenizer_free(r->tok);
    pt_free(r);
}

int pt_modelio_set_record(pt_model *m, char *dir, pt_tokenizer *tok)
{
    mio_rec *r = pt_calloc(1, sizeof *r);
    if (!r) {
        pt_free(dir);
        pt_tokenizer_free(tok);
        return PT_ENOMEM;
    }
    r->dir = dir;
    r->tok = tok;
    pt_model_set_attachment(m, r, free_rec);
    return PT_OK;
}

const char *pt_model_source_dir(const pt_model *m)
{
    const mio_rec *r = pt_model_attachment(m);
    return r ? r->dir : NULL;
}

const pt_tokenizer *pt_model_tokenizer(const pt_model *m)
{
    const mio_rec *r = pt_model_attachment(m);
    return r ? r->tok : NULL;
}
