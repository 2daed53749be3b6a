/* The typed metadata getters and reading a GGUF tensor as F32. */
#include "io/gguf_internal.h"

#include "core/core.h"
#include "io/safetensors.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- metadata ----------------------------------------------------------------- */

static int lookup(const pt_gguf *g, const char *key, const pt_gguf_kv **kv)
{
    if (!g)
        return pt__err(PT_EINVAL, "gguf getter: the handle is NULL");
    if (!key)
        return pt__err(PT_EINVAL, "gguf getter: key is NULL");
    *kv = pt__gguf_find_kv(g, key);
    if (!*kv)
        return pt__err(PT_ENOTFOUND, "%s: missing", key);
    return PT_OK;
}

/* "expected X, found Y" where Y is "string" or "array of uint32". */
static int wrong_type(const pt_gguf_kv *kv, const char *expected)
{
    if (kv->type == PT_GGUF_ARRAY)
        return pt__err(PT_EFORMAT, "%s: expected %s, found array of %s", kv->key, expected,
                      pt__gguf_type_name(kv->elem_type));
    return pt__err(PT_EFORMAT, "%s: expected %s, found %s", kv->key, expected,
                  pt__gguf_type_name(kv->type));
}

/* An integer scalar as sign and magnitude; false for any other type. */
static bool int_value(const pt_gguf_kv *kv, bool *neg, uint64_t *mag)
{
    int64_t s;
    *neg = false;
    switch (kv->type) {
    case PT_GGUF_UINT8: *mag = *(const uint8_t *)kv->data; return true;
    case PT_GGUF_UINT16: *mag = *(const uint16_t *)kv->data; return true;
    case PT_GGUF_UINT32: *mag = *(const uint32_t *)kv->data; return true;
    case PT_GGUF_UINT64: *mag = *(const uint64_t *)kv->data; return true;
    case PT_GGUF_INT8: s = *(const int8_t *)kv->data; break;
    case PT_GGUF_INT16: s = *(const int16_t *)kv->data; break;
    case PT_GGUF_INT32: s = *(const int32_t *)kv->data; break;
    case PT_GGUF_INT64: s = *(const int64_t *)kv->data; break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

static int out_of_range(const pt_gguf_kv *kv, bool neg, uint64_t mag, const char *what)
{
    return pt__err(PT_ERANGE, "%s: value %s%" PRIu64 " (%s) is out of range for %s", kv->key,
                  neg ? "-" : "", mag, pt__gguf_type_name(kv->type), what);
}

/* The integer at key, checked to lie in [-neg_max, pos_max]. */
static int get_int(const pt_gguf *g, const char *key, uint64_t neg_max, uint64_t pos_max,
                   const char *what, bool *neg, uint64_t *mag)
{
    const pt_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st != PT_OK)
        return st;
    if (!int_value(kv, neg, mag))
        return wrong_type(kv, what);
    if (*neg ? *mag > neg_max : *mag > pos_max)
        return out_of_range(kv, *neg, *mag, what);
    return PT_OK;
}

int pt__gguf_get_u32(const pt_gguf *g, const char *key, uint32_t *out)
{
    PT_CHECK_NULL(out);
    bool neg = false;
    uint64_t mag = 0;
    int st = get_int(g, key, 0, UINT32_MAX, "uint32", &neg, &mag);
    if (st == PT_OK)
        *out = (uint32_t)mag;
    return st;
}

int pt__gguf_get_u64(const pt_gguf *g, const char *key, uint64_t *out)
{
    PT_CHECK_NULL(out);
    bool neg = false;
    uint64_t mag = 0;
    int st = get_int(g, key, 0, UINT64_MAX, "uint64", &neg, &mag);
    if (st == PT_OK)
        *out = mag;
    return st;
}

int pt__gguf_get_i64(const pt_gguf *g, const char *key, int64_t *out)
{
    PT_CHECK_NULL(out);
    bool neg = false;
    uint64_t mag = 0;
    int st = get_int(g, key, (uint64_t)INT64_MAX + 1, INT64_MAX, "int64", &neg, &mag);
    if (st == PT_OK)
        *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    return st;
}

int pt__gguf_get_f32(const pt_gguf *g, const char *key, float *out)
{
    PT_CHECK_NULL(out);
    const pt_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st != PT_OK)
        return st;
    if (kv->type == PT_GGUF_FLOAT32) {
        *out = *(const float *)kv->data;
        return PT_OK;
    }
    if (kv->type != PT_GGUF_FLOAT64)
        return wrong_type(kv, "float32");
    double v = *(const double *)kv->data;
    if (isfinite(v) && fabs(v) > FLT_MAX)
        return pt__err(PT_ERANGE, "%s: value %g (float64) is out of range for float32", key, v);
    *out = (float)v;
    return PT_OK;
}

int pt__gguf_get_bool(const pt_gguf *g, const char *key, bool *out)
{
    PT_CHECK_NULL(out);
    const pt_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st != PT_OK)
        return st;
    if (kv->type != PT_GGUF_BOOL)
        return wrong_type(kv, "bool");
    *out = *(const uint8_t *)kv->data != 0;
    return PT_OK;
}

int pt__gguf_get_str(const pt_gguf *g, const char *key, pt_gguf_str *out)
{
    PT_CHECK_NULL(out);
    const pt_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st != PT_OK)
        return st;
    if (kv->type != PT_GGUF_STRING)
        return wrong_type(kv, "string");
    *out = *(const pt_gguf_str *)kv->data;
    return PT_OK;
}

int pt__gguf_get_arr(const pt_gguf *g, const char *key, pt_gguf_type elem_type,
                    const void **data, uint64_t *n)
{
    PT_CHECK_NULL(data);
    PT_CHECK_NULL(n);
    PT_CHECK_ARG(elem_type >= 0 && elem_type < PT_GGUF_TYPE_COUNT && elem_type != PT_GGUF_ARRAY,
                 elem_type, "= %d is not an array element type", (int)elem_type);
    const pt_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st != PT_OK)
        return st;
    if (kv->type != PT_GGUF_ARRAY || kv->elem_type != elem_type) {
        char expected[32];
        snprintf(expected, sizeof expected, "array of %s", pt__gguf_type_name(elem_type));
        return wrong_type(kv, expected);
    }
    *data = kv->data;
    *n = kv->n;
    return PT_OK;
}

/* ---- tensors ------------------------------------------------------------------ */

static int refuse_type(const pt_gguf_tensor *t)
{
    const char *name = pt__ggml_type_name(t->type) ? pt__ggml_type_name(t->type) : "?";
    uint64_t be = 0;
    pt__ggml_type_block(t->type, &be, NULL);
    if (be > 1)
        return pt__err(PT_EUNSUPPORTED,
                      "tensor %s has type %s: quantised GGUF tensors cannot be trained; convert "
                      "the model to F32, F16 or BF16", t->name, name);
    return pt__err(PT_EUNSUPPORTED, "tensor %s has type %s: only F32, F16 and BF16 GGUF tensors "
                  "load as float", t->name, name);
}

int pt__gguf_read_f32(const pt_gguf_tensor *t, float *dst, size_t numel)
{
    PT_CHECK_NULL(t);
    if (!pt__ggml_type_is_float(t->type))
        return refuse_type(t);
    if ((uint64_t)numel != t->numel)
        return pt__err(PT_ESHAPE, "tensor %s has %" PRIu64 " elements, the caller expects %zu",
                      t->name, t->numel, numel);
    PT_CHECK_ARG(dst, dst, "is NULL (the destination for tensor %s)", t->name);
    const uint8_t *src = t->data;
    long long n = (long long)numel;
    int nt = numel >= ((size_t)1 << 16) ? pt_get_num_threads() : 1;
    if (t->type == PT_GGML_F32) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(dst, src, numel * sizeof(float));
#else
        for (long long i = 0; i < n; i++) {
            uint32_t u = pt__gguf_le32(src + 4 * i);
            memcpy(&dst[i], &u, 4);
        }
#endif
    } else if (t->type == PT_GGML_F16) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = pt__f16_to_f32(pt__gguf_le16(src + 2 * i));
    } else {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (long long i = 0; i < n; i++)
            dst[i] = pt__bf16_to_f32(pt__gguf_le16(src + 2 * i));
    }
    return PT_OK;
}
