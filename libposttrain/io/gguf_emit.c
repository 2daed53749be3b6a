/* Serialising a GGUF writer: the header (metadata and tensor infos in
 * insertion order), padding to the alignment, then each tensor's data at
 * an aligned offset, F32 sources converted to F16/BF16 (round to nearest
 * even) chunk by chunk.  Everything goes through one 1 MiB buffer into an
 * atomic file (io/fileio.h): nothing appears under the final name unless
 * every byte was written and synced. */
#include "io/gguf_internal.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define OUT_BUF ((size_t)1 << 20)

typedef struct out {
    pt_atomic_file af;
    uint8_t *buf;
    size_t len;
    int st;            /* the first failure; later calls do nothing */
} out;

static void flush(out *o)
{
    if (o->st == PT_OK && o->len > 0)
        o->st = pt__atomic_write(&o->af, o->buf, o->len);
    o->len = 0;
}

static void put(out *o, const void *p, size_t n)
{
    if (o->st != PT_OK)
        return;
    if (o->len + n > OUT_BUF)
        flush(o);
    if (n >= OUT_BUF) { /* large: straight through */
        if (o->st == PT_OK)
            o->st = pt__atomic_write(&o->af, p, n);
        return;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

static void put_u32(out *o, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(o, b, 4);
}

static void put_u64(out *o, uint64_t v)
{
    put_u32(o, (uint32_t)v);
    put_u32(o, (uint32_t)(v >> 32));
}

static void put_str(out *o, const char *s, uint64_t len)
{
    put_u64(o, len);
    put(o, s, (size_t)len);
}

/* Zero bytes up to the next multiple of `align` of `*pos`. */
static void pad(out *o, uint64_t *pos, uint32_t align)
{
    static const uint8_t zeros[256];
    uint64_t n = (align - *pos % align) % align;
    *pos += n;
    while (n > 0) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        put(o, zeros, k);
        n -= k;
    }
}

/* n fixed-size values in the file's byte order. */
static void put_values(out *o, const void *v, uint64_t n, size_t size)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    put(o, v, (size_t)(n * size));
#else
    const uint8_t *p = v;
    for (uint64_t i = 0; i < n; i++, p += size) {
        if (size == 1)
            put(o, p, 1);
        else if (size == 2)
            put(o, (uint8_t[2]){(uint8_t)*(const uint16_t *)p, (uint8_t)(*(const uint16_t *)p >> 8)}, 2);
        else if (size == 4)
            put_u32(o, *(const uint32_t *)p);
        else
            put_u64(o, *(const uint64_t *)p);
    }
#endif
}

static void put_kv(out *o, const gguf_wkv *kv)
{
    put_str(o, kv->key, strlen(kv->key));
    put_u32(o, (uint32_t)kv->type);
    pt_gguf_type type = kv->type;
    if (type == PT_GGUF_ARRAY) {
        put_u32(o, (uint32_t)kv->elem_type);
        put_u64(o, kv->n);
        type = kv->elem_type;
    }
    if (type == PT_GGUF_STRING) {
        const pt_gguf_str *s = kv->data;
        for (uint64_t i = 0; i < kv->n; i++)
            put_str(o, s[i].ptr, s[i].len);
    } else {
        put_values(o, kv->data, kv->n, pt__gguf_type_size(type));
    }
}

/* Bytes from the start of the file to the end of the tensor infos. */
static uint64_t header_size(const pt_gguf_writer *w)
{
    uint64_t n = 4 + 4 + 8 + 8;
    for (size_t i = 0; i < w->n_kv; i++) {
        const gguf_wkv *kv = &w->kv[i];
        n += 8 + strlen(kv->key) + 4;
        pt_gguf_type type = kv->type;
        if (type == PT_GGUF_ARRAY) {
            n += 4 + 8;
            type = kv->elem_type;
        }
        if (type == PT_GGUF_STRING)
            for (uint64_t k = 0; k < kv->n; k++)
                n += 8 + ((const pt_gguf_str *)kv->data)[k].len;
        else
            n += kv->n * pt__gguf_type_size(type);
    }
    for (size_t i = 0; i < w->n_t; i++)
        n += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].ndim + 4 + 8;
    return n;
}

/* One F32 tensor converted to F16 or BF16, written through the buffer. */
static void put_converted(out *o, const gguf_wtensor *t)
{
    uint16_t (*conv)(float) = t->type == PT_GGML_F16 ? pt__f32_to_f16 : pt__f32_to_bf16;
    uint64_t done = 0;
    while (done < t->numel && o->st == PT_OK) {
        if (OUT_BUF - o->len < 2)
            flush(o);
        size_t k = (OUT_BUF - o->len) / 2;
        if (k > t->numel - done)
            k = (size_t)(t->numel - done);
        uint8_t *dst = o->buf + o->len;
        const float *src = t->f32 + done;
        for (size_t i = 0; i < k; i++) {
            uint16_t h = conv(src[i]);
            dst[2 * i] = (uint8_t)h;
            dst[2 * i + 1] = (uint8_t)(h >> 8);
        }
        o->len += 2 * k;
        done += k;
    }
}

static void put_tensor_data(out *o, const gguf_wtensor *t)
{
    if (t->raw)
        put(o, t->raw, (size_t)t->nbytes);
    else if (t->type == PT_GGML_F32)
        put_values(o, t->f32, t->numel, 4);
    else
        put_converted(o, t);
}

/* The tensor infos with their offsets: each tensor starts aligned. */
static void put_tensor_infos(out *o, const pt_gguf_writer *w)
{
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const gguf_wtensor *t = &w->t[i];
        put_str(o, t->name, strlen(t->name));
        put_u32(o, t->ndim);
        for (uint32_t d = 0; d < t->ndim; d++)
            put_u64(o, t->ne[d]);
        put_u32(o, (uint32_t)t->type);
        put_u64(o, offset);
        offset += t->nbytes;
        offset += (w->alignment - offset % w->alignment) % w->alignment;
    }
}

static void put_file(out *o, const pt_gguf_writer *w)
{
    put(o, PT_GGUF_MAGIC, 4);
    put_u32(o, PT_GGUF_VERSION);
    put_u64(o, w->n_t);
    put_u64(o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++)
        put_kv(o, &w->kv[i]);
    put_tensor_infos(o, w);
    uint64_t pos = header_size(w);
    pad(o, &pos, w->alignment);
    for (size_t i = 0; i < w->n_t; i++) {
        put_tensor_data(o, &w->t[i]);
        pos = w->t[i].nbytes;
        pad(o, &pos, w->alignment);
    }
    flush(o);
}

int pt__gguf_write(pt_gguf_writer *w, const char *path)
{
    PT_CHECK_NULL(w);
    PT_CHECK_NULL(path);
    out o = {.st = PT_OK};
    if (!(o.buf = pt__malloc(OUT_BUF)))
        return PT_ENOMEM;
    int st = pt__atomic_open(&o.af, path);
    if (st != PT_OK) {
        free(o.buf);
        return pt__err_prefix(st, "gguf %s", path);
    }
    put_file(&o, w);
    free(o.buf);
    if (o.st != PT_OK) {
        pt__atomic_abort(&o.af);
        return pt__err_prefix(o.st, "gguf %s", path);
    }
    if ((st = pt__atomic_commit(&o.af)) != PT_OK)
        return pt__err_prefix(st, "gguf %s", path);
    return PT_OK;
}
