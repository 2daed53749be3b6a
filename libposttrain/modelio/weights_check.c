/* Whether a directory's weights hold exactly the tensors the model schema
 * gives a configuration (names, shapes, a dtype that loads), from the
 * safetensors headers alone: shared by pt_model_load_dir and
 * pt_model_dir_inspect, so both report the same problem. */
#include "core/core.h"
#include "model/schema.h"
#include "modelio/modelio_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ignorable_tensor(const char *name)
{
    size_t n = strlen(name);
    static const char suffix[] = ".rotary_emb.inv_freq";
    return n >= sizeof suffix - 1 && strcmp(name + n - (sizeof suffix - 1), suffix) == 0;
}

static bool shape_matches(const pt_st_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return false;
    return true;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* Schema tensor e is in w with its shape and a dtype that converts to F32. */
static int check_present(const pt_weight_files *w, const pt_schema_tensor *e, const char *dir)
{
    const pt_weight_entry *f = pt__weight_files_find(w, e->name);
    if (!f)
        return pt__err(PT_ENOTFOUND, "%s: tensor '%s' is missing from the weights", dir, e->name);
    if (!shape_matches(f->t, e->ndim, e->shape)) {
        char want[64], got[160];
        shape_str(want, sizeof want, e->ndim, e->shape);
        shape_str(got, sizeof got, f->t->ndim, f->t->shape);
        return pt__err(PT_ESHAPE, "%s: tensor '%s' has shape %s in %s, the config needs %s", dir,
                      e->name, got, w->file_names[f->shard], want);
    }
    if (f->t->dtype != PT_ST_F32 && f->t->dtype != PT_ST_F16 && f->t->dtype != PT_ST_BF16)
        return pt__err(PT_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (only F32, F16, BF16 load)",
                      dir, e->name, pt__st_dtype_name(f->t->dtype));
    return PT_OK;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(((const pt_schema_tensor *)a)->name, ((const pt_schema_tensor *)b)->name);
}

/* The schema tensor that serves for an absent tied row called `name` (the
 * embedding for "lm_head.weight" when tied), or NULL. */
static const pt_schema_tensor *tied_partner(const char *name, const pt_schema_tensor *e,
                                            size_t n, const pt_model_config *c)
{
    const pt_tensor_row *rows = pt__tensor_rows();
    for (int i = 0; i < PT_T_COUNT; i++) {
        const pt_tensor_row *r = &rows[i];
        if (r->per_layer || r->tied_to == PT_T_COUNT || pt__tensor_row_present(r, c))
            continue;
        size_t ml = strlen(r->module);
        if (strncmp(name, r->module, ml) != 0 || name[ml] != '.' || strcmp(name + ml + 1, r->param))
            continue;
        for (size_t k = 0; k < n; k++)
            if (e[k].row->id == r->tied_to)
                return &e[k];
    }
    return NULL;
}

/* Every tensor of w is one of e (sorted by name), an ignorable buffer, or a
 * tied row's left-over copy of its partner. */
static int check_unexpected(const pt_weight_files *w, const pt_schema_tensor *e, size_t n,
                            const pt_model_config *c, const char *dir,
                            const pt_weight_entry **tied_head)
{
    for (size_t i = 0; i < w->n; i++) {
        const pt_weight_entry *we = &w->e[i];
        pt_schema_tensor key;
        snprintf(key.name, sizeof key.name, "%s", we->name);
        if ((strlen(we->name) < sizeof key.name && bsearch(&key, e, n, sizeof *e, name_cmp)) ||
            ignorable_tensor(we->name))
            continue;
        const pt_schema_tensor *partner = tied_partner(we->name, e, n, c);
        if (partner) {
            if (!shape_matches(we->t, partner->ndim, partner->shape))
                return pt__err(PT_ESHAPE, "%s: '%s' is present with tie_word_embeddings true and "
                                         "its shape differs from the embedding's",
                              dir, we->name);
            if (tied_head)
                *tied_head = we;
            continue;
        }
        return pt__err(PT_EFORMAT,
                      "%s: unexpected tensor '%s' in %s (not part of a %s model with this config)",
                      dir, we->name, w->file_names[we->shard], pt_arch_name(c->arch));
    }
    return PT_OK;
}

int pt__weights_check(const pt_weight_files *w, const pt_model_config *c, const char *dir,
                     const pt_weight_entry **tied_head)
{
    if (tied_head)
        *tied_head = NULL;
    pt_schema_tensor *e = NULL;
    size_t n = 0;
    int st = pt__schema_tensors(&e, &n, c);
    for (size_t i = 0; st == PT_OK && i < n; i++)
        st = check_present(w, &e[i], dir);
    /* Every schema tensor was found, so as many entries (names being
     * unique) leave no other one; else look for the extra ones. */
    if (st == PT_OK && w->n != n) {
        qsort(e, n, sizeof *e, name_cmp);
        st = check_unexpected(w, e, n, c, dir, tied_head);
    }
    pt_free(e);
    return st;
}
