/* The model configuration of a GGUF file from its general.* and <arch>.*
 * metadata, as llama.cpp's converter writes them (gguf_import.h). */
#include "core/core.h"
#include "model/schema.h"
#include "modelio/gguf_import.h"
#include "modelio/gguf_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct meta {
    const pt_gguf *g;
    const char *path;
    char arch[32];     /* general.architecture */
} meta;

/* "<arch>.<name>" */
static const char *akey(char *buf, size_t n, const meta *m, const char *name)
{
    snprintf(buf, n, "%s.%s", m->arch, name);
    return buf;
}

/* A positive int metadata value; absent: *out = def, or PT_EFORMAT when
 * def < 0 (required). */
static int get_int(const meta *m, const char *name, int def, int *out)
{
    char key[128];
    akey(key, sizeof key, m, name);
    if (!pt__gguf_find_kv(m->g, key)) {
        if (def < 0)
            return pt__err(PT_EFORMAT, "%s: metadata key '%s' is missing (required)", m->path, key);
        *out = def;
        return PT_OK;
    }
    uint32_t v;
    int st = pt__gguf_get_u32(m->g, key, &v);
    if (st)
        return pt__err_prefix(st == PT_ERANGE ? PT_EFORMAT : st, "%s", m->path);
    if (v == 0 || v > INT_MAX)
        return pt__err(PT_EFORMAT, "%s: metadata key '%s' = %u is out of range (1 .. %d)", m->path,
                      key, v, INT_MAX);
    *out = (int)v;
    return PT_OK;
}

/* The shortest decimal that reads back as the float32 f (1e-05 for the
 * float32 nearest 1e-5): the value config.json had. */
static double f32_decimal(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f)
            return d;
    }
    return (double)f;
}

static int get_float(const meta *m, const char *name, double def, double *out)
{
    char key[128];
    akey(key, sizeof key, m, name);
    *out = def;
    if (!pt__gguf_find_kv(m->g, key))
        return PT_OK;
    float v;
    int st = pt__gguf_get_f32(m->g, key, &v);
    if (st)
        return pt__err_prefix(st, "%s", m->path);
    *out = f32_decimal(v);
    return PT_OK;
}

static int read_arch(meta *m, pt_model_config *c)
{
    pt_gguf_str s;
    int st = pt__gguf_get_str(m->g, "general.architecture", &s);
    if (st)
        return pt__err_prefix(st == PT_ENOTFOUND ? PT_EFORMAT : st, "%s", m->path);
    snprintf(m->arch, sizeof m->arch, "%.*s", (int)(s.len < 31 ? s.len : 31), s.ptr);
    c->arch = s.len < 31 && !memchr(s.ptr, 0, s.len) ? pt__gguf_arch_from_name(m->arch) : -1;
    if (c->arch < 0)
        return pt__err(PT_EUNSUPPORTED, "%s: general.architecture '%.*s' is not supported (supported: "
                      "llama, qwen2, qwen3)", m->path, (int)(s.len < 64 ? s.len : 64), s.ptr);
    return PT_OK;
}

/* Sizes: layers, widths, heads, head_dim, context. */
static int read_sizes(const meta *m, pt_model_config *c)
{
    const pt_arch_info *ai = pt__arch_info_get(c->arch);
    int st, key_len, val_len, rope_dim;
    if ((st = get_int(m, "block_count", -1, &c->num_hidden_layers)) ||
        (st = get_int(m, "embedding_length", -1, &c->hidden_size)) ||
        (st = get_int(m, "feed_forward_length", -1, &c->intermediate_size)) ||
        (st = get_int(m, "attention.head_count", -1, &c->num_attention_heads)) ||
        (st = get_int(m, "attention.head_count_kv", c->num_attention_heads,
                      &c->num_key_value_heads)) ||
        (st = get_int(m, "context_length", ai->default_max_positions,
                      &c->max_position_embeddings)))
        return st;
    if (c->num_attention_heads % c->num_key_value_heads)
        return pt__err(PT_EFORMAT, "%s: %s.attention.head_count = %d is not a multiple of "
                      "%s.attention.head_count_kv = %d", m->path, m->arch, c->num_attention_heads,
                      m->arch, c->num_key_value_heads);
    char key[128];
    if (!pt__gguf_find_kv(m->g, akey(key, sizeof key, m, "attention.key_length")) &&
        c->hidden_size % c->num_attention_heads)
        return pt__err(PT_EFORMAT, "%s: %s.embedding_length = %d is not a multiple of "
                      "%s.attention.head_count = %d (and %s.attention.key_length is absent)",
                      m->path, m->arch, c->hidden_size, m->arch, c->num_attention_heads, m->arch);
    int def_hd = c->hidden_size / c->num_attention_heads;
    if ((st = get_int(m, "attention.key_length", def_hd, &key_len)) ||
        (st = get_int(m, "attention.value_length", key_len, &val_len)) ||
        (st = get_int(m, "rope.dimension_count", key_len, &rope_dim)))
        return st;
    if (val_len != key_len)
        return pt__err(PT_EUNSUPPORTED, "%s: %s.attention.value_length = %d differs from "
                      "key_length = %d (not supported)", m->path, m->arch, val_len, key_len);
    if (rope_dim != key_len)
        return pt__err(PT_EUNSUPPORTED, "%s: %s.rope.dimension_count = %d differs from the head "
                      "size %d (partial rotary embeddings are not supported)", m->path, m->arch,
                      rope_dim, key_len);
    c->head_dim = key_len;
    return PT_OK;
}

/* rope.scaling.type "linear" / "none", and rope_freqs.weight (llama3). */
static int read_rope(const meta *m, pt_model_config *c)
{
    char key[128];
    int st = get_float(m, "rope.freq_base", 10000.0, &c->rope_theta);
    if (st || (st = get_float(m, "attention.layer_norm_rms_epsilon", 1e-6, &c->rms_norm_eps)))
        return st;
    if (pt__gguf_find_kv(m->g, akey(key, sizeof key, m, "rope.scaling.type"))) {
        pt_gguf_str s;
        if ((st = pt__gguf_get_str(m->g, key, &s)))
            return pt__err_prefix(st, "%s", m->path);
        if (s.len == 6 && memcmp(s.ptr, "linear", 6) == 0) {
            c->rope_type = PT_ROPE_LINEAR;
            if ((st = get_float(m, "rope.scaling.factor", 1.0, &c->rope_factor)))
                return st;
        } else if (!(s.len == 4 && memcmp(s.ptr, "none", 4) == 0)) {
            return pt__err(PT_EUNSUPPORTED, "%s: %s = '%.*s' is not supported (linear, none, or "
                          "llama3 through rope_freqs.weight)", m->path, key,
                          (int)(s.len < 32 ? s.len : 32), s.ptr);
        }
    }
    const pt_gguf_tensor *t = pt__gguf_find_tensor(m->g, "rope_freqs.weight");
    if (t && c->rope_type != PT_ROPE_DEFAULT)
        return pt__err(PT_EUNSUPPORTED, "%s: both %s.rope.scaling.type and rope_freqs.weight are "
                      "set", m->path, m->arch);
    return t ? pt__gguf_rope_from_freqs(c, m->g, t, m->path) : PT_OK;
}

/* An optional tokenizer.ggml.<name>_token_id below vocab_size, or -1. */
static int token_id(const meta *m, const char *name, int vocab, int *out)
{
    char key[128];
    snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", name);
    *out = -1;
    if (!pt__gguf_find_kv(m->g, key))
        return PT_OK;
    uint32_t v;
    int st = pt__gguf_get_u32(m->g, key, &v);
    if (st)
        return pt__err_prefix(st, "%s", m->path);
    if (v >= (uint32_t)vocab)
        return pt__err(PT_EFORMAT, "%s: %s = %u is not below the vocabulary size %d", m->path, key,
                      v, vocab);
    *out = (int)v;
    return PT_OK;
}

/* vocab_size: <arch>.vocab_size, else the embedding's rows; the token list
 * must have as many entries. */
static int read_vocab(const meta *m, pt_model_config *c)
{
    const pt_gguf_tensor *e = pt__gguf_find_tensor(m->g, "token_embd.weight");
    int def = e && e->ndim == 2 && e->ne[1] <= INT_MAX ? (int)e->ne[1] : -1;
    int st = get_int(m, "vocab_size", def, &c->vocab_size);
    if (st == PT_EFORMAT && def < 0 && !e)
        return pt__err(PT_ENOTFOUND, "%s: tensor 'token_embd.weight' is missing (and there is no "
                      "%s.vocab_size)", m->path, m->arch);
    if (st)
        return st;
    const pt_gguf_kv *kv = pt__gguf_find_kv(m->g, "tokenizer.ggml.tokens");
    if (kv && kv->type == PT_GGUF_ARRAY && kv->n != (uint64_t)c->vocab_size)
        return pt__err(PT_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries but the model's "
                      "vocabulary has %d", m->path, (unsigned long long)kv->n, c->vocab_size);
    if ((st = token_id(m, "bos", c->vocab_size, &c->bos_token_id)) ||
        (st = token_id(m, "eos", c->vocab_size, &c->eos_token_id)))
        return st;
    return token_id(m, "padding", c->vocab_size, &c->pad_token_id);
}

int pt__gguf_model_config(pt_model_config *cfg, const pt_gguf *g, const char *path)
{
    meta m = { .g = g, .path = path };
    pt_model_config c;
    pt_model_config_init(&c);
    int st = read_arch(&m, &c);
    if (st || (st = read_sizes(&m, &c)) || (st = read_vocab(&m, &c)) || (st = read_rope(&m, &c)))
        return st;
    const pt_arch_info *ai = pt__arch_info_get(c.arch);
    c.tie_word_embeddings = pt__gguf_find_tensor(g, "output.weight") == NULL;
    c.attention_bias = ai->qkv_bias || pt__gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    c.qk_norm = ai->qk_norm;
    c.sliding_window = 0;
    if ((st = pt_model_config_validate(&c)))
        return pt__err_prefix(st, "%s", path);
    *cfg = c;
    return PT_OK;
}
