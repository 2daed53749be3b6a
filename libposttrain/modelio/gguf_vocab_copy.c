/* The vocabulary of a model loaded from a GGUF file, exported again (a
 * quantized file dequantized, issue 23): the source file's tokenizer.*
 * metadata copied as it is, so llama.cpp tokenizes the new file as the old
 * one (rebuilding it from the tokenizer the library derived would need the
 * converter's pre-tokenizer hash, which a rebuilt tokenizer.json lacks). */
#include "core/core.h"
#include "modelio/gguf_export_internal.h"
#include "modelio/gguf_import.h"

#include <string.h>

static int copy_scalar(pt_gguf_writer *w, const pt_gguf_kv *kv)
{
    switch (kv->type) {
    case PT_GGUF_UINT8: return pt__gguf_set_u8(w, kv->key, *(const uint8_t *)kv->data);
    case PT_GGUF_UINT32: return pt__gguf_set_u32(w, kv->key, *(const uint32_t *)kv->data);
    case PT_GGUF_INT32: return pt__gguf_set_i32(w, kv->key, *(const int32_t *)kv->data);
    case PT_GGUF_UINT64: return pt__gguf_set_u64(w, kv->key, *(const uint64_t *)kv->data);
    case PT_GGUF_FLOAT32: return pt__gguf_set_f32(w, kv->key, *(const float *)kv->data);
    case PT_GGUF_BOOL: return pt__gguf_set_bool(w, kv->key, *(const uint8_t *)kv->data != 0);
    case PT_GGUF_STRING: {
        const pt_gguf_str *s = kv->data;
        return pt__gguf_set_str_n(w, kv->key, s->ptr, (size_t)s->len);
    }
    default:
        return pt__err(PT_EUNSUPPORTED, "metadata key '%s' of type %s is not copied", kv->key,
                      pt__gguf_type_name(kv->type) ? pt__gguf_type_name(kv->type) : "?");
    }
}

static int copy_array(pt_gguf_writer *w, const pt_gguf_kv *kv)
{
    if (kv->elem_type != PT_GGUF_STRING)
        return pt__gguf_set_arr(w, kv->key, kv->elem_type, kv->data, kv->n);
    size_t n = (size_t)kv->n;
    const char **p = pt__malloc_array(n ? n : 1, sizeof *p);
    size_t *len = pt__malloc_array(n ? n : 1, sizeof *len);
    int st = p && len ? PT_OK : PT_ENOMEM;
    const pt_gguf_str *s = kv->data;
    for (size_t i = 0; st == PT_OK && i < n; i++) {
        p[i] = s[i].ptr;
        len[i] = (size_t)s[i].len;
    }
    if (st == PT_OK)
        st = pt__gguf_set_arr_str(w, kv->key, p, len, kv->n);
    pt_free(p);
    pt_free(len);
    return st;
}

int gx_copy_gguf_vocab(gx_ctx *c, bool *done)
{
    *done = false;
    if (!c->src_dir || !pt__gguf_is_file(c->src_dir))
        return PT_OK;
    pt_gguf *g = NULL;
    int st = pt__gguf_open(&g, c->src_dir);
    if (st)
        return pt__err_prefix(st, "pt_model_export_gguf: the source file's tokenizer");
    for (size_t i = 0; st == PT_OK && i < pt__gguf_kv_count(g); i++) {
        const pt_gguf_kv *kv = pt__gguf_kv_at(g, i);
        if (strncmp(kv->key, "tokenizer.", 10) != 0)
            continue;
        st = kv->type == PT_GGUF_ARRAY ? copy_array(c->w, kv) : copy_scalar(c->w, kv);
        *done = true;
    }
    pt__gguf_close(g);
    if (st)
        return pt__err_prefix(st, "pt_model_export_gguf: copying %s's tokenizer", c->src_dir);
    return PT_OK;
}
