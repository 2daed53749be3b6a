/* libFuzzer harness for the GGUF reader: open the input from memory and, if
 * it validates, check it is self-consistent (lookups, spans inside the
 * buffer, aligned offsets, no overlap), read every metadata value through
 * the typed getters and every float tensor of up to 1M elements as F32;
 * other tensor types must be refused with PT_EUNSUPPORTED.  Tensors of a
 * quantized type the library reads (Q4_0 .. Q6_K) go through the block
 * check and, when it passes, are dequantized row by row (values finite). */
#include "core/core.h"
#include "io/gguf.h"
#include "kernels/quant.h"

#include <math.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

/* Touch every byte of a pair's value and call its getter. */
static void read_kv(const pt_gguf *g, const pt_gguf_kv *kv)
{
    if (pt__gguf_find_kv(g, kv->key) != kv)
        abort();
    pt_gguf_type t = kv->type == PT_GGUF_ARRAY ? kv->elem_type : kv->type;
    if (t == PT_GGUF_STRING) {
        const pt_gguf_str *s = kv->data;
        for (uint64_t i = 0; i < kv->n; i++)
            for (uint64_t k = 0; k < s[i].len; k++)
                sink += (uint8_t)s[i].ptr[k];
    } else {
        const uint8_t *b = kv->data;
        for (uint64_t i = 0; i < kv->n * pt__gguf_type_size(t); i++)
            sink += b[i];
    }
    uint32_t u;
    int64_t i64;
    float f;
    bool b;
    pt_gguf_str s;
    const void *d;
    uint64_t n;
    int st = pt__gguf_get_u32(g, kv->key, &u) | pt__gguf_get_i64(g, kv->key, &i64) |
             pt__gguf_get_f32(g, kv->key, &f) | pt__gguf_get_bool(g, kv->key, &b) |
             pt__gguf_get_str(g, kv->key, &s);
    (void)st;
    if (kv->type == PT_GGUF_ARRAY &&
        (pt__gguf_get_arr(g, kv->key, kv->elem_type, &d, &n) != PT_OK || n != kv->n || d != kv->data))
        abort();
}

/* A quantized tensor: the check passes or fails cleanly; blocks that pass
 * dequantize to finite values (finite fp16 scales times small integers). */
static void read_quant(const pt_gguf_tensor *t)
{
    size_t cols = (size_t)t->ne[0], rows = cols ? (size_t)(t->numel / cols) : 0;
    int st = pt__quant_check(t->type, t->data, (size_t)t->nbytes, rows, cols, t->name);
    if (st != PT_OK) {
        if (st != PT_EFORMAT || pt_last_error()[0] == '\0')
            abort();
        return;
    }
    if (t->numel > ((uint64_t)1 << 20))
        return;
    float *out = malloc((cols ? cols : 1) * sizeof *out);
    if (!out)
        abort();
    size_t rb = pt__quant_row_bytes(t->type, cols);
    for (size_t r = 0; r < rows; r++) {
        if (pt__dequant_row(t->type, (const uint8_t *)t->data + r * rb, out, cols) != PT_OK)
            abort();
        for (size_t j = 0; j < cols; j++)
            if (!isfinite(out[j]))
                abort();
    }
    free(out);
}

static void read_tensor(const pt_gguf *g, const pt_gguf_tensor *t, const uint8_t *buf, size_t size)
{
    if (pt__gguf_find_tensor(g, t->name) != t)
        abort();
    const uint8_t *d = t->data;
    if (d < buf + pt__gguf_data_offset(g) || t->nbytes > (size_t)(buf + size - d) ||
        t->offset % pt__gguf_alignment(g) != 0 || t->ndim < 1 || t->ndim > 4)
        abort();
    uint64_t numel = 1;
    for (int k = 0; k < 4; k++)
        numel *= t->ne[k];
    if (numel != t->numel)
        abort();
    if (!pt__ggml_type_is_float(t->type)) {
        if (pt__gguf_read_f32(t, NULL, (size_t)numel) != PT_EUNSUPPORTED)
            abort();
        if (pt__quant_supported(t->type))
            read_quant(t);
        return;
    }
    if (numel > ((uint64_t)1 << 20))
        return;
    float *out = malloc((size_t)numel * sizeof *out);
    if (!out)
        abort();
    if (pt__gguf_read_f32(t, out, (size_t)numel) != PT_OK)
        abort();
    free(out);
}

/* No two tensors' spans overlap (quadratic: inputs are small). */
static void check_overlap(const pt_gguf *g)
{
    size_t n = pt__gguf_tensor_count(g);
    for (size_t i = 0; i < n && i < 256; i++)
        for (size_t j = i + 1; j < n && j < 256; j++) {
            const pt_gguf_tensor *a = pt__gguf_tensor_at(g, i), *b = pt__gguf_tensor_at(g, j);
            if (a->offset < b->offset + b->nbytes && b->offset < a->offset + a->nbytes)
                abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy of exactly `size` bytes so ASan flags any overread. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    pt_gguf *g = NULL;
    int st = pt__gguf_open_memory(&g, size ? buf : NULL, size);
    if (st != PT_OK) {
        if (g != NULL || st >= 0 || pt_last_error()[0] == '\0')
            abort(); /* a failure must be clean and explained */
        free(buf);
        return 0;
    }
    for (size_t i = 0; i < pt__gguf_kv_count(g); i++)
        read_kv(g, pt__gguf_kv_at(g, i));
    for (size_t i = 0; i < pt__gguf_tensor_count(g); i++)
        read_tensor(g, pt__gguf_tensor_at(g, i), buf, size);
    check_overlap(g);
    pt__gguf_close(g);
    free(buf);
    return 0;
}
