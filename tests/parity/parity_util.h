/* Helpers shared by the parity suites: load a Hugging Face directory into a
 * pt_model, and compare float arrays against references with a message that
 * names the tensor and its worst element. */
#ifndef PT_PARITY_UTIL_H
#define PT_PARITY_UTIL_H

#include "testutil.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "model/model.h"

#include <math.h>
#include <stdbool.h>

/* Build a model from DIR/config.json (pt_model_config_from_json +
 * pt_model_create) and copy every tensor of DIR/model.safetensors into it by
 * Hugging Face name.  Every model tensor must be in the file and every file
 * tensor in the model, with the same number of elements.  This path uses only
 * the model and io layers, so the parity suites test the math independently
 * of the directory loader (modelio). */
static inline int parity_load_model(pt_model **out, const char *dir)
{
    char path[4096];
    char *json = NULL;
    size_t len = 0;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    int st = pt__read_file(&json, &len, path, 1 << 20);
    if (st != PT_OK)
        return st;
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    st = pt_model_config_from_json(&cfg, json, len);
    free(json);
    if (st != PT_OK)
        return pt__err_prefix(st, "%s", path);
    pt_model *m = NULL;
    st = pt_model_create(&m, &cfg, 1);
    if (st != PT_OK)
        return st;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    pt_st_file *f = NULL;
    st = pt__st_open(&f, path);
    if (st != PT_OK) {
        pt_model_free(m);
        return st;
    }
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        const pt_st_tensor *s = pt__st_find(f, t->name);
        if (!s) {
            st = pt__err(PT_ENOTFOUND, "%s: model tensor %s missing from the file", path, t->name);
            break;
        }
        if (s->numel != t->numel) {
            st = pt__err(PT_ESHAPE, "%s: %s has %zu elements, model wants %zu", path, t->name,
                        s->numel, t->numel);
            break;
        }
        st = pt__st_read_f32(s, t->data, t->numel);
        if (st != PT_OK)
            break;
    }
    for (size_t i = 0; st == PT_OK && i < pt__st_count(f); i++) {
        const pt_st_tensor *s = pt__st_tensor_at(f, i);
        if (!pt__model_find_tensor(m, s->name))
            st = pt__err(PT_EFORMAT, "%s: file tensor %s has no place in the model", path, s->name);
    }
    pt__st_close(f);
    if (st != PT_OK) {
        pt_model_free(m);
        return st;
    }
    *out = m;
    return PT_OK;
}

/* Worst element of |got - ref| against atol + rtol*|ref|. */
typedef struct parity_cmp {
    double worst_ratio;  /* max |got-ref| / (atol + rtol*|ref|): <= 1 passes */
    double max_abs;      /* max |got-ref| */
    size_t worst_index;
    float worst_got, worst_ref;
    bool nonfinite;      /* got holds NaN or Inf where ref is finite */
} parity_cmp;

static inline parity_cmp parity_compare(const float *got, const float *ref, size_t n, double atol,
                                        double rtol)
{
    parity_cmp c = { 0 };
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!isfinite(got[i]) && isfinite(ref[i])) {
            if (!c.nonfinite) {
                c.worst_index = i;
                c.worst_got = got[i];
                c.worst_ref = ref[i];
            }
            c.nonfinite = true;
            c.worst_ratio = INFINITY;
            continue;
        }
        double r = d / (atol + rtol * fabs((double)ref[i]));
        if (d > c.max_abs)
            c.max_abs = d;
        if (!c.nonfinite && r > c.worst_ratio) {
            c.worst_ratio = r;
            c.worst_index = i;
            c.worst_got = got[i];
            c.worst_ref = ref[i];
        }
    }
    return c;
}

/* Format element i of a tensor with this shape as "[a,b,c]". */
static inline void parity_index_str(char *buf, size_t cap, size_t i, const int64_t *shape, int ndim)
{
    size_t idx[PT_ST_MAX_DIMS] = { 0 };
    for (int d = ndim - 1; d >= 0; d--) {
        size_t s = shape[d] > 0 ? (size_t)shape[d] : 1;
        idx[d] = i % s;
        i /= s;
    }
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%zu", d ? "," : "", idx[d]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* Assert got ~ ref; the message names `what`, the worst element and the
 * tolerance.  Returns the comparison for callers that log headroom. */
#define parity_assert_close(what, got, ref, n, shape, ndim, atol, rtol)                          \
    do {                                                                                        \
        parity_cmp c_ = parity_compare((got), (ref), (n), (atol), (rtol));                      \
        char ix_[128];                                                                          \
        parity_index_str(ix_, sizeof ix_, c_.worst_index, (shape), (ndim));                     \
        ck_assert_msg(!c_.nonfinite && c_.worst_ratio <= 1.0,                                   \
                      "%s: element %s is %.9g, golden %.9g (|diff| %.3g > %.1g + %.1g*|golden|;" \
                      " max |diff| %.3g over %zu elements)",                                    \
                      (what), ix_, (double)c_.worst_got, (double)c_.worst_ref,                  \
                      fabs((double)c_.worst_got - (double)c_.worst_ref), (double)(atol),        \
                      (double)(rtol), c_.max_abs, (size_t)(n));                                 \
        parity_worst_seen = c_.worst_ratio > parity_worst_seen ? c_.worst_ratio                 \
                                                                : parity_worst_seen;            \
    } while (0)

/* Largest worst_ratio seen by parity_assert_close in this process (headroom report). */
static double parity_worst_seen PT_UNUSED = 0.0;

#endif
