/* The GGUF writer's lists: metadata pairs and tensors in insertion order,
 * every argument checked (keys and names valid UTF-8, no duplicates, shapes
 * and types known, limits) when added, so pt__gguf_write only serialises. */
#include "io/gguf_internal.h"

#include "core/core.h"
#include "core/utf8.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp keeps tensor names in char[GGML_MAX_NAME = 64] with the NUL. */
#define MAX_TENSOR_NAME 63u

int pt__gguf_writer_new(pt_gguf_writer **out)
{
    PT_CHECK_NULL(out);
    *out = pt__calloc(1, sizeof **out);
    if (!*out)
        return PT_ENOMEM;
    (*out)->alignment = PT_GGUF_DEFAULT_ALIGNMENT;
    return PT_OK;
}

void pt__gguf_writer_free(pt_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].data);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* ---- metadata ----------------------------------------------------------------- */

static int check_key(const pt_gguf_writer *w, const char *key, const char *func)
{
    if (!w)
        return pt__err(PT_EINVAL, "%s: w is NULL", func);
    if (!key)
        return pt__err(PT_EINVAL, "%s: key is NULL", func);
    size_t len = strlen(key);
    if (len == 0)
        return pt__err(PT_EINVAL, "%s: key is empty", func);
    if (len > PT_GGUF_MAX_KEY)
        return pt__err(PT_EINVAL, "%s: key of %zu bytes exceeds the limit of %u", func, len,
                      PT_GGUF_MAX_KEY);
    if (!pt__utf8_valid(key, len))
        return pt__err(PT_EINVAL, "%s: key '%.200s' is not valid UTF-8", func, key);
    if (w->n_kv >= PT_GGUF_MAX_KV)
        return pt__err(PT_ERANGE, "%s: more than %" PRIu64 " metadata pairs", func, PT_GGUF_MAX_KV);
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0)
            return pt__err(PT_EINVAL, "%s: key '%.200s' was already added", func, key);
    return PT_OK;
}

/* Append a pair owning `data` (freed on failure). */
static int push_kv(pt_gguf_writer *w, const char *key, pt_gguf_type type, pt_gguf_type elem_type,
                   uint64_t n, void *data)
{
    char *k = pt__strdup(key);
    if (k && w->n_kv == w->cap_kv) {
        gguf_wkv *grown = pt__grow_array(w->kv, &w->cap_kv, 16, sizeof *w->kv);
        if (!grown) {
            free(k);
            k = NULL;
        } else {
            w->kv = grown;
        }
    }
    if (!k) {
        free(data);
        return PT_ENOMEM;
    }
    w->kv[w->n_kv++] = (gguf_wkv){k, type, elem_type, n, data};
    return PT_OK;
}

/* A fixed-size scalar or array of `type`, copied. */
static int add_fixed(pt_gguf_writer *w, const char *key, pt_gguf_type type, pt_gguf_type elem,
                     const void *v, uint64_t n, const char *func)
{
    int st = check_key(w, key, func);
    if (st != PT_OK)
        return st;
    if (strcmp(key, "general.alignment") == 0 && !(type == PT_GGUF_UINT32 && n == 1))
        return pt__err(PT_EINVAL, "%s: general.alignment must be set with pt__gguf_set_u32", func);
    size_t size = pt__gguf_type_size(type == PT_GGUF_ARRAY ? elem : type);
    void *copy = pt__malloc(n ? (size_t)n * size : 1);
    if (!copy)
        return PT_ENOMEM;
    if (n)
        memcpy(copy, v, (size_t)n * size);
    return push_kv(w, key, type, elem, type == PT_GGUF_ARRAY ? n : 1, copy);
}

int pt__gguf_set_u8(pt_gguf_writer *w, const char *key, uint8_t v)
{
    return add_fixed(w, key, PT_GGUF_UINT8, PT_GGUF_UINT8, &v, 1, __func__);
}

int pt__gguf_set_u32(pt_gguf_writer *w, const char *key, uint32_t v)
{
    if (key && strcmp(key, "general.alignment") == 0 && (v == 0 || (v & (v - 1)) != 0))
        return pt__err(PT_EINVAL, "%s: general.alignment %" PRIu32 " is not a nonzero power of two",
                      __func__, v);
    int st = add_fixed(w, key, PT_GGUF_UINT32, PT_GGUF_UINT32, &v, 1, __func__);
    if (st == PT_OK && strcmp(key, "general.alignment") == 0)
        w->alignment = v;
    return st;
}

int pt__gguf_set_i32(pt_gguf_writer *w, const char *key, int32_t v)
{
    return add_fixed(w, key, PT_GGUF_INT32, PT_GGUF_INT32, &v, 1, __func__);
}

int pt__gguf_set_u64(pt_gguf_writer *w, const char *key, uint64_t v)
{
    return add_fixed(w, key, PT_GGUF_UINT64, PT_GGUF_UINT64, &v, 1, __func__);
}

int pt__gguf_set_f32(pt_gguf_writer *w, const char *key, float v)
{
    return add_fixed(w, key, PT_GGUF_FLOAT32, PT_GGUF_FLOAT32, &v, 1, __func__);
}

int pt__gguf_set_bool(pt_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return add_fixed(w, key, PT_GGUF_BOOL, PT_GGUF_BOOL, &b, 1, __func__);
}

int pt__gguf_set_arr(pt_gguf_writer *w, const char *key, pt_gguf_type elem_type,
                    const void *data, uint64_t n)
{
    if (elem_type < 0 || elem_type >= PT_GGUF_TYPE_COUNT || elem_type == PT_GGUF_STRING ||
        elem_type == PT_GGUF_ARRAY)
        return pt__err(PT_EINVAL, "%s: elem_type %d is not a numeric or bool type", __func__,
                      (int)elem_type);
    if (n > PT_GGUF_MAX_ARRAY)
        return pt__err(PT_ERANGE, "%s: %" PRIu64 " elements exceed the limit of %" PRIu64, __func__,
                      n, PT_GGUF_MAX_ARRAY);
    if (n && !data)
        return pt__err(PT_EINVAL, "%s: data is NULL with n = %" PRIu64, __func__, n);
    if (elem_type == PT_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return pt__err(PT_EINVAL, "%s: bool element %" PRIu64 " is %u, not 0 or 1", __func__,
                              i, ((const uint8_t *)data)[i]);
    return add_fixed(w, key, PT_GGUF_ARRAY, elem_type, data, n, __func__);
}

/* n strings as one block: pt_gguf_str[n], then the bytes they point to. */
static int copy_strings(const char *const *strs, const size_t *lens, uint64_t n, void **out,
                        const char *func)
{
    size_t total = (size_t)n * sizeof(pt_gguf_str);
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i])
            return pt__err(PT_EINVAL, "%s: string %" PRIu64 " is NULL", func, i);
        size_t len = lens ? lens[i] : strlen(strs[i]);
        if (len > PT_GGUF_MAX_STRING)
            return pt__err(PT_ERANGE, "%s: string %" PRIu64 " of %zu bytes exceeds the limit of %"
                          PRIu64, func, i, len, PT_GGUF_MAX_STRING);
        if (!pt__add_size(total, len, &total))
            return pt__err(PT_ENOMEM, "%s: the strings' total size overflows", func);
    }
    pt_gguf_str *s = pt__malloc(total ? total : 1);
    if (!s)
        return PT_ENOMEM;
    char *bytes = (char *)(s + n);
    for (uint64_t i = 0; i < n; i++) {
        size_t len = lens ? lens[i] : strlen(strs[i]);
        memcpy(bytes, strs[i], len);
        s[i] = (pt_gguf_str){bytes, len};
        bytes += len;
    }
    *out = s;
    return PT_OK;
}

int pt__gguf_set_str_n(pt_gguf_writer *w, const char *key, const char *v, size_t len)
{
    int st = check_key(w, key, __func__);
    if (st != PT_OK)
        return st;
    if (!v && len)
        return pt__err(PT_EINVAL, "%s: v is NULL (key '%.200s')", __func__, key);
    if (strcmp(key, "general.alignment") == 0)
        return pt__err(PT_EINVAL, "%s: general.alignment must be set with pt__gguf_set_u32", __func__);
    const char *one = v ? v : "";
    void *data = NULL;
    if ((st = copy_strings(&one, &len, 1, &data, __func__)) != PT_OK)
        return st;
    return push_kv(w, key, PT_GGUF_STRING, PT_GGUF_STRING, 1, data);
}

int pt__gguf_set_str(pt_gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return pt__err(PT_EINVAL, "%s: v is NULL (key '%.200s')", __func__, key ? key : "(null)");
    return pt__gguf_set_str_n(w, key, v, strlen(v));
}

int pt__gguf_set_arr_str(pt_gguf_writer *w, const char *key, const char *const *strs,
                        const size_t *lens, uint64_t n)
{
    int st = check_key(w, key, __func__);
    if (st != PT_OK)
        return st;
    if (n > PT_GGUF_MAX_ARRAY)
        return pt__err(PT_ERANGE, "%s: %" PRIu64 " strings exceed the limit of %" PRIu64, __func__,
                      n, PT_GGUF_MAX_ARRAY);
    if (n && !strs)
        return pt__err(PT_EINVAL, "%s: strs is NULL with n = %" PRIu64, __func__, n);
    if (strcmp(key, "general.alignment") == 0)
        return pt__err(PT_EINVAL, "%s: general.alignment must be set with pt__gguf_set_u32", __func__);
    void *data = NULL;
    if ((st = copy_strings(strs, lens, n, &data, __func__)) != PT_OK)
        return st;
    return push_kv(w, key, PT_GGUF_ARRAY, PT_GGUF_STRING, n, data);
}

/* ---- tensors ------------------------------------------------------------------ */

static int check_name(const pt_gguf_writer *w, const char *name, const char *func)
{
    if (!w)
        return pt__err(PT_EINVAL, "%s: w is NULL", func);
    if (!name)
        return pt__err(PT_EINVAL, "%s: name is NULL", func);
    size_t len = strlen(name);
    if (len == 0 || len > MAX_TENSOR_NAME)
        return pt__err(PT_EINVAL, "%s: tensor name '%.200s' has %zu bytes (1 to %u: llama.cpp's "
                      "limit)", func, name, len, MAX_TENSOR_NAME);
    if (!pt__utf8_valid(name, len))
        return pt__err(PT_EINVAL, "%s: tensor name '%s' is not valid UTF-8", func, name);
    if (w->n_t >= PT_GGUF_MAX_TENSORS)
        return pt__err(PT_ERANGE, "%s: more than %" PRIu64 " tensors", func, PT_GGUF_MAX_TENSORS);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return pt__err(PT_EINVAL, "%s: tensor '%s' was already added", func, name);
    return PT_OK;
}

/* The shape and type of t (name already checked): numel and nbytes. */
static int check_shape(gguf_wtensor *t, const char *func)
{
    uint64_t be, bb;
    if (!pt__ggml_type_block(t->type, &be, &bb))
        return pt__err(PT_EINVAL, "%s: tensor '%s': unknown ggml type %d", func, t->name, t->type);
    if (t->ndim < 1 || t->ndim > PT_GGUF_MAX_DIMS)
        return pt__err(PT_EINVAL, "%s: tensor '%s': ndim %" PRIu32 " is not in 1..4", func, t->name,
                      t->ndim);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX ||
            __builtin_mul_overflow(numel, t->ne[d], &numel) || numel > (uint64_t)INT64_MAX)
            return pt__err(PT_ESHAPE, "%s: tensor '%s': ne[%" PRIu32 "] = %" PRIu64 " is 0 or makes "
                          "the element count overflow", func, t->name, d, t->ne[d]);
    }
    if (t->ne[0] % be != 0)
        return pt__err(PT_ESHAPE, "%s: tensor '%s': ne[0] = %" PRIu64 " is not a multiple of the %s "
                      "block size %" PRIu64, func, t->name, t->ne[0], pt__ggml_type_name(t->type), be);
    if (__builtin_mul_overflow(numel / be, bb, &t->nbytes) || t->nbytes > SIZE_MAX)
        return pt__err(PT_ESHAPE, "%s: tensor '%s': the byte size overflows", func, t->name);
    t->numel = numel;
    return PT_OK;
}

/* Check and append a tensor described by `t` (name borrowed until copied). */
static int push_tensor(pt_gguf_writer *w, gguf_wtensor t, const uint64_t *ne, const char *func)
{
    int st = check_name(w, t.name, func);
    if (st != PT_OK)
        return st;
    if (!ne)
        return pt__err(PT_EINVAL, "%s: tensor '%s': ne is NULL", func, t.name);
    for (uint32_t d = 0; d < PT_GGUF_MAX_DIMS; d++)
        t.ne[d] = d < t.ndim ? ne[d] : 1;
    if ((st = check_shape(&t, func)) != PT_OK)
        return st;
    if (w->n_t == w->cap_t) {
        gguf_wtensor *grown = pt__grow_array(w->t, &w->cap_t, 64, sizeof *w->t);
        if (!grown)
            return PT_ENOMEM;
        w->t = grown;
    }
    if (!(t.name = pt__strdup(t.name)))
        return PT_ENOMEM;
    w->t[w->n_t++] = t;
    return PT_OK;
}

int pt__gguf_add_tensor_f32(pt_gguf_writer *w, const char *name, uint32_t ndim,
                           const uint64_t *ne, int type, const float *src)
{
    if (!pt__ggml_type_is_float(type))
        return pt__err(PT_EINVAL, "%s: tensor '%s': type %s cannot be written from F32 values "
                      "(F32, F16 or BF16)", __func__, name ? name : "(null)",
                      pt__ggml_type_name(type) ? pt__ggml_type_name(type) : "unknown");
    if (!src)
        return pt__err(PT_EINVAL, "%s: tensor '%s': src is NULL", __func__, name ? name : "(null)");
    gguf_wtensor t = {.name = (char *)name, .ndim = ndim, .type = type, .f32 = src};
    return push_tensor(w, t, ne, __func__);
}

int pt__gguf_add_tensor_raw(pt_gguf_writer *w, const char *name, uint32_t ndim,
                           const uint64_t *ne, int type, const void *bytes, uint64_t nbytes)
{
    if (!bytes)
        return pt__err(PT_EINVAL, "%s: tensor '%s': bytes is NULL", __func__, name ? name : "(null)");
    gguf_wtensor t = {.name = (char *)name, .ndim = ndim, .type = type, .raw = bytes};
    int st = push_tensor(w, t, ne, __func__);
    if (st != PT_OK)
        return st;
    if (w->t[w->n_t - 1].nbytes != nbytes) {
        uint64_t expect = w->t[w->n_t - 1].nbytes;
        free(w->t[--w->n_t].name);
        return pt__err(PT_ESHAPE, "%s: tensor '%s': %" PRIu64 " bytes given, its shape and type %s "
                      "need %" PRIu64, __func__, name, nbytes, pt__ggml_type_name(type), expect);
    }
    return PT_OK;
}
