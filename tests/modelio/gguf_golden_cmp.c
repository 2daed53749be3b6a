/* See gguf_golden_cmp.h.  Assumes a little-endian host (the reader hands
 * out host-order values; the digest hashes the file's little-endian bytes). */
#include "gguf_golden_cmp.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "io/sha256.h"

#define SHORT_STRING 80u   /* gguf_digest.py: longer strings are hashed */

typedef struct diffs {
    pt_golden_diff_fn fn;
    void *ctx;
    int count;
} diffs;

static void differ(diffs *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void differ(diffs *d, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    d->count++;
    d->fn(d->ctx, msg);
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double jnum(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static void hex_of(pt_sha256_ctx *c, char hex[65])
{
    uint8_t dg[32];
    pt__sha256_final(c, dg);
    pt__sha256_hex(dg, hex);
}

static void hash_strings(const pt_gguf_str *s, uint64_t n, char hex[65])
{
    pt_sha256_ctx c;
    pt__sha256_init(&c);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = s[i].len;     /* little-endian host: the file's bytes */
        pt__sha256_update(&c, &len, sizeof len);
        pt__sha256_update(&c, s[i].ptr, (size_t)s[i].len);
    }
    hex_of(&c, hex);
}

/* A numeric scalar as a double (the digest's JSON number). */
static double scalar_value(int type, const void *p)
{
    switch (type) {
    case PT_GGUF_UINT8: return *(const uint8_t *)p;
    case PT_GGUF_INT8: return *(const int8_t *)p;
    case PT_GGUF_UINT16: return *(const uint16_t *)p;
    case PT_GGUF_INT16: return *(const int16_t *)p;
    case PT_GGUF_UINT32: return *(const uint32_t *)p;
    case PT_GGUF_INT32: return *(const int32_t *)p;
    case PT_GGUF_FLOAT32: return *(const float *)p;
    case PT_GGUF_UINT64: return (double)*(const uint64_t *)p;
    case PT_GGUF_INT64: return (double)*(const int64_t *)p;
    case PT_GGUF_FLOAT64: return *(const double *)p;
    default: return -1.0;
    }
}

static void cmp_string(diffs *d, const pt_gguf_kv *kv, const cJSON *e)
{
    const pt_gguf_str *s = kv->data;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "value");
    if (cJSON_IsString(v)) {
        if (s->len != strlen(v->valuestring) || memcmp(s->ptr, v->valuestring, s->len) != 0)
            differ(d, "kv %s: converter \"%s\", ours \"%.*s\"", kv->key, v->valuestring,
                   (int)(s->len > 200 ? 200 : s->len), s->ptr);
        return;
    }
    char hex[65];
    pt_sha256_ctx c;
    pt__sha256_init(&c);
    pt__sha256_update(&c, s->ptr, (size_t)s->len);
    hex_of(&c, hex);
    if ((double)s->len != jnum(e, "len") || strcmp(hex, jstr(e, "sha256")) != 0)
        differ(d, "kv %s: converter a %.0f-byte string sha256 %s, ours %llu bytes sha256 %s%s%.*s",
               kv->key, jnum(e, "len"), jstr(e, "sha256"), (unsigned long long)s->len, hex,
               s->len <= SHORT_STRING ? ": " : "", (int)(s->len <= SHORT_STRING ? s->len : 0),
               s->ptr);
}

static void cmp_scalar(diffs *d, const pt_gguf_kv *kv, const cJSON *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "value");
    if (kv->type == PT_GGUF_STRING) {
        cmp_string(d, kv, e);
    } else if (kv->type == PT_GGUF_BOOL) {
        bool ours = *(const uint8_t *)kv->data != 0;
        if (!cJSON_IsBool(v) || ours != (bool)cJSON_IsTrue(v))
            differ(d, "kv %s: converter %s, ours %s", kv->key, cJSON_IsTrue(v) ? "true" : "false",
                   ours ? "true" : "false");
    } else {
        double ours = scalar_value(kv->type, kv->data);
        if (!cJSON_IsNumber(v) || ours != v->valuedouble)
            differ(d, "kv %s: converter %.17g, ours %.17g", kv->key,
                   cJSON_IsNumber(v) ? v->valuedouble : -1.0, ours);
    }
}

static void cmp_array(diffs *d, const pt_gguf_kv *kv, const cJSON *e)
{
    const char *et = pt__gguf_type_name(kv->elem_type);
    if (strcmp(et ? et : "?", jstr(e, "elem_type")) != 0 || (double)kv->n != jnum(e, "n")) {
        differ(d, "kv %s: converter array of %.0f %s, ours array of %llu %s", kv->key,
               jnum(e, "n"), jstr(e, "elem_type"), (unsigned long long)kv->n, et ? et : "?");
        return;
    }
    char hex[65];
    if (kv->elem_type == PT_GGUF_STRING) {
        hash_strings(kv->data, kv->n, hex);
    } else {
        pt_sha256_ctx c;
        pt__sha256_init(&c);
        pt__sha256_update(&c, kv->data, (size_t)kv->n * pt__gguf_type_size(kv->elem_type));
        hex_of(&c, hex);
    }
    if (strcmp(hex, jstr(e, "sha256")) != 0)
        differ(d, "kv %s: array of %llu %s: converter sha256 %s, ours %s", kv->key,
               (unsigned long long)kv->n, et, jstr(e, "sha256"), hex);
}

static void cmp_kv(diffs *d, const pt_gguf_kv *kv, const cJSON *e)
{
    const char *t = kv->type == PT_GGUF_ARRAY ? "array" : pt__gguf_type_name(kv->type);
    if (strcmp(t ? t : "?", jstr(e, "type")) != 0)
        differ(d, "kv %s: converter type %s, ours %s", kv->key, jstr(e, "type"), t ? t : "?");
    else if (kv->type == PT_GGUF_ARRAY)
        cmp_array(d, kv, e);
    else
        cmp_scalar(d, kv, e);
}

static void cmp_tensor(diffs *d, const pt_gguf_tensor *t, const cJSON *e)
{
    const char *tn = pt__ggml_type_name(t->type);
    if (strcmp(tn ? tn : "?", jstr(e, "type")) != 0) {
        differ(d, "tensor %s: converter type %s, ours %s", t->name, jstr(e, "type"), tn);
        return;
    }
    const cJSON *ne = cJSON_GetObjectItemCaseSensitive(e, "ne");
    bool same = cJSON_GetArraySize(ne) == (int)t->ndim;
    for (uint32_t i = 0; same && i < t->ndim; i++)
        same = cJSON_GetArrayItem(ne, (int)i)->valuedouble == (double)t->ne[i];
    if (!same) {
        char *g = cJSON_PrintUnformatted(ne);
        differ(d, "tensor %s: converter ne %s, ours ne [%llu, %llu, ...] (%u dims)", t->name, g,
               (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], t->ndim);
        cJSON_free(g);
        return;
    }
    uint8_t dg[32];
    char hex[65];
    pt__sha256(t->data, (size_t)t->nbytes, dg);
    pt__sha256_hex(dg, hex);
    if (strcmp(hex, jstr(e, "sha256")) != 0)
        differ(d, "tensor %s (%s): data differs: converter sha256 %s, ours %s", t->name, tn,
               jstr(e, "sha256"), hex);
}

/* Metadata: by name, then what is missing or extra, then the order. */
static void cmp_kvs(diffs *d, const pt_gguf *g, const cJSON *arr)
{
    size_t n = pt__gguf_kv_count(g), pos = 0;
    bool order_reported = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const char *key = jstr(e, "key");
        const pt_gguf_kv *kv = pt__gguf_find_kv(g, key);
        if (!kv) {
            differ(d, "kv %s: in the converter's file, missing from ours", key);
            pos++;
            continue;
        }
        cmp_kv(d, kv, e);
        if (!order_reported && pos < n && strcmp(pt__gguf_kv_at(g, pos)->key, key) != 0) {
            differ(d, "kv order: converter has %s at position %zu, ours %s", key, pos,
                   pt__gguf_kv_at(g, pos)->key);
            order_reported = true;
        }
        pos++;
    }
    for (size_t i = 0; i < n; i++) {
        const char *key = pt__gguf_kv_at(g, i)->key;
        bool found = false;
        cJSON_ArrayForEach(e, arr) found = found || strcmp(jstr(e, "key"), key) == 0;
        if (!found)
            differ(d, "kv %s: in ours, not in the converter's file", key);
    }
}

static void cmp_tensors(diffs *d, const pt_gguf *g, const cJSON *arr)
{
    size_t n = pt__gguf_tensor_count(g), pos = 0;
    bool order_reported = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const char *name = jstr(e, "name");
        const pt_gguf_tensor *t = pt__gguf_find_tensor(g, name);
        if (!t) {
            differ(d, "tensor %s: in the converter's file, missing from ours", name);
            pos++;
            continue;
        }
        cmp_tensor(d, t, e);
        if (!order_reported && pos < n && strcmp(pt__gguf_tensor_at(g, pos)->name, name) != 0) {
            differ(d, "tensor order: converter has %s at position %zu, ours %s", name, pos,
                   pt__gguf_tensor_at(g, pos)->name);
            order_reported = true;
        }
        pos++;
    }
    if ((int)n != cJSON_GetArraySize(arr))
        differ(d, "tensor count: converter %d, ours %zu", cJSON_GetArraySize(arr), n);
}

int pt_golden_compare(const pt_gguf *g, const cJSON *digest, pt_golden_diff_fn fn, void *ctx)
{
    diffs d = { fn, ctx, 0 };
    if ((double)pt__gguf_version(g) != jnum(digest, "version"))
        differ(&d, "version: converter %.0f, ours %u", jnum(digest, "version"), pt__gguf_version(g));
    if ((double)pt__gguf_alignment(g) != jnum(digest, "alignment"))
        differ(&d, "alignment: converter %.0f, ours %u", jnum(digest, "alignment"),
               pt__gguf_alignment(g));
    cmp_kvs(&d, g, cJSON_GetObjectItemCaseSensitive(digest, "kv"));
    cmp_tensors(&d, g, cJSON_GetObjectItemCaseSensitive(digest, "tensors"));
    return d.count;
}
