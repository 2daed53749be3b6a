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
    char *tok_json, *tok_config;  /* generated tokenizer files (a GGUF source), or NULL */
} mio_rec;

static void free_rec(void *p)
{
    mio_rec *r = p;
    if (!r)
        return;
    pt_free(r->dir);
    pt_tokenizer_free(r->tok);
    pt_free(r->tok_json);
    pt_free(r->tok_config);
    pt_free(r);
}

int pt__modelio_check_finite(const pt_model *m, size_t from, size_t to, const char *fn, const char *path,
                            const char *not_done)
{
    for (size_t i = from; i < to; i++) {
        const pt_tensor_ref *r = pt__model_tensor(m, i);
        if (!r->data) /* frozen BF16 or quantized blocks: checked when they were made */
            continue;
        size_t at = pt__first_nonfinite(r->data, r->numel);
        if (at < r->numel)
            return pt__err(PT_ENONFINITE, "%s: %s: tensor '%s' holds %s at element %zu; %s (nothing was written)",
                          fn, path, r->name, pt__nonfinite_name(r->data[at]), at, not_done);
    }
    return PT_OK;
}

/* The model's record, or one with every field NULL when it has none. */
static const mio_rec *record_of(const pt_model *m)
{
    static const mio_rec none;
    const mio_rec *r = pt__model_attachment(m);
    return r ? r : &none;
}

int pt__modelio_set_record(pt_model *m, char *dir, pt_tokenizer *tok)
{
    mio_rec *r = pt__calloc(1, sizeof *r);
    if (!r) {
        pt_free(dir);
        pt_tokenizer_free(tok);
        return PT_ENOMEM;
    }
    r->dir = dir;
    r->tok = tok;
    pt__model_set_attachment(m, r, free_rec);
    return PT_OK;
}

const char *pt_model_source_dir(const pt_model *m)
{
    return record_of(m)->dir;
}

const pt_tokenizer *pt_model_tokenizer(const pt_model *m)
{
    return record_of(m)->tok;
}

int pt__modelio_set_tokenizer_texts(pt_model *m, char *tok_json, char *tok_config)
{
    mio_rec *r = pt__model_attachment(m);
    if (!r) {
        pt_free(tok_json);
        pt_free(tok_config);
        return pt__err(PT_ESTATE, "model record: no record to attach tokenizer files to");
    }
    pt_free(r->tok_json);
    pt_free(r->tok_config);
    r->tok_json = tok_json;
    r->tok_config = tok_config;
    return PT_OK;
}

const char *pt__modelio_tokenizer_json(const pt_model *m)
{
    return record_of(m)->tok_json;
}

const char *pt__modelio_tokenizer_config(const pt_model *m)
{
    return record_of(m)->tok_config;
}
