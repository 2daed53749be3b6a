/* Test helpers: GGUF files written with the io/gguf writer the way
 * llama.cpp's convert_hf_to_gguf.py lays them out (metadata keys, tensor
 * names, Q/K permuted for llama), from a loaded model, and the
 * tokenizer.ggml.* metadata of a Hugging Face tokenizer.json. */
#ifndef PT_TEST_GGUF_BUILD_H
#define PT_TEST_GGUF_BUILD_H

#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <regex.h>

#include "core/core.h"
#include "io/fileio.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/schema.h"
#include "modelio/gguf_internal.h"
#include "text/tok_gguf.h"

/* Ways to break a model file. */
enum {
    GB_NO_BLOCK_COUNT = 1u << 0,
    GB_BAD_HEADS = 1u << 1,      /* head_count 3 with head_count_kv 2 */
    GB_SKIP_TENSOR = 1u << 2,    /* no blk.1.ffn_up.weight */
    GB_BAD_SHAPE = 1u << 3,      /* blk.0.ffn_down.weight with ne swapped */
    GB_QUANT = 1u << 4,          /* blk.0.attn_q.weight as IQ4_NL (a type the library does not read) */
    GB_EXTRA = 1u << 5,          /* an unexpected blk.0.attn_extra.weight */
    GB_BF16 = 1u << 6,           /* 2-D tensors as BF16 */
};

typedef struct gb_bufs {
    float *p[512];
    size_t n;
} gb_bufs;

static inline float *gb_keep(gb_bufs *b, float *p)
{
    ck_assert(b->n < 512);
    b->p[b->n++] = p;
    return p;
}

static inline void gb_free(gb_bufs *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->p[i]);
    b->n = 0;
}

static inline void gb_key(char *buf, size_t n, const char *arch, const char *k)
{
    snprintf(buf, n, "%s.%s", arch, k);
}

/* The converter's metadata for cfg (general.*, <arch>.*). */
static inline void gb_model_meta(pt_gguf_writer *w, const pt_model_config *c, unsigned flags)
{
    const char *arch = pt__gguf_arch_name(c->arch);
    char k[128];
    ck_assert_ok(pt__gguf_set_str(w, "general.architecture", arch));
    ck_assert_ok(pt__gguf_set_str(w, "general.type", "model"));
    ck_assert_ok(pt__gguf_set_str(w, "general.name", "Test"));
    if (!(flags & GB_NO_BLOCK_COUNT)) {
        gb_key(k, sizeof k, arch, "block_count");
        ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->num_hidden_layers));
    }
    gb_key(k, sizeof k, arch, "context_length");
    ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->max_position_embeddings));
    gb_key(k, sizeof k, arch, "embedding_length");
    ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->hidden_size));
    gb_key(k, sizeof k, arch, "feed_forward_length");
    ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->intermediate_size));
    gb_key(k, sizeof k, arch, "attention.head_count");
    ck_assert_ok(pt__gguf_set_u32(w, k, flags & GB_BAD_HEADS ? 3u : (uint32_t)c->num_attention_heads));
    gb_key(k, sizeof k, arch, "attention.head_count_kv");
    ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->num_key_value_heads));
    gb_key(k, sizeof k, arch, "rope.freq_base");
    ck_assert_ok(pt__gguf_set_f32(w, k, (float)c->rope_theta));
    gb_key(k, sizeof k, arch, "attention.layer_norm_rms_epsilon");
    ck_assert_ok(pt__gguf_set_f32(w, k, (float)c->rms_norm_eps));
    if (c->head_dim * c->num_attention_heads != c->hidden_size) {
        gb_key(k, sizeof k, arch, "attention.key_length");
        ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->head_dim));
        gb_key(k, sizeof k, arch, "attention.value_length");
        ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->head_dim));
    }
    ck_assert_ok(pt__gguf_set_u32(w, "general.file_type", flags & GB_BF16 ? 32u : 0u));
    if (c->arch == PT_ARCH_LLAMA) {
        gb_key(k, sizeof k, arch, "vocab_size");
        ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->vocab_size));
        gb_key(k, sizeof k, arch, "rope.dimension_count");
        ck_assert_ok(pt__gguf_set_u32(w, k, (uint32_t)c->head_dim));
    }
}

/* rope_freqs.weight as the converter computes it for llama3 scaling (with
 * the config's own original context). */
static inline float *gb_rope_freqs(const pt_model_config *c)
{
    int half = c->head_dim / 2;
    float *r = malloc((size_t)half * sizeof *r);
    double old = c->rope_original_max_position_embeddings;
    double lw = old / c->rope_low_freq_factor, hw = old / c->rope_high_freq_factor;
    for (int j = 0; j < half; j++) {
        float freq = (float)(1.0 / pow(c->rope_theta, (double)(float)(2 * j) / c->head_dim));
        double wl = 2 * M_PI / freq;
        if (wl < hw)
            r[j] = 1.0f;
        else if (wl > lw)
            r[j] = (float)c->rope_factor;
        else {
            double s = (old / wl - c->rope_low_freq_factor) /
                       (c->rope_high_freq_factor - c->rope_low_freq_factor);
            r[j] = (float)(1.0 / ((1 - s) / c->rope_factor + s));
        }
    }
    return r;
}

/* One model tensor under its llama.cpp name (Q/K permuted for llama). */
static inline void gb_tensor(pt_gguf_writer *w, gb_bufs *b, const pt_tensor_ref *r,
                             const pt_model_config *c, unsigned flags)
{
    char name[PT_TENSOR_NAME_MAX];
    ck_assert_ptr_nonnull(pt__tensor_gguf_name(name, sizeof name, pt__tensor_row_get(r->id), r->layer));
    if ((flags & GB_SKIP_TENSOR) && strcmp(name, "blk.1.ffn_up.weight") == 0)
        return;
    uint64_t ne[2] = { (uint64_t)(r->ndim == 2 ? r->shape[1] : r->shape[0]), (uint64_t)r->shape[0] };
    if ((flags & GB_BAD_SHAPE) && strcmp(name, "blk.0.ffn_down.weight") == 0) {
        uint64_t t = ne[0];
        ne[0] = ne[1];
        ne[1] = t;
    }
    if ((flags & GB_QUANT) && strcmp(name, "blk.0.attn_q.weight") == 0) {
        /* IQ4_NL: blocks of 32 values, 18 bytes each (scale + 16 nibbles) */
        size_t nb = r->numel / 32 * 18;
        float *raw = gb_keep(b, calloc(nb / 4 + 1, 4));
        ck_assert_ok(pt__gguf_add_tensor_raw(w, name, 2, ne, PT_GGML_IQ4_NL, raw, nb));
        return;
    }
    const float *src = r->data;
    int heads = !pt__gguf_arch_permutes(c->arch) ? 0 :
                r->id == PT_T_WQ || r->id == PT_T_BQ ? c->num_attention_heads :
                r->id == PT_T_WK || r->id == PT_T_BK ? c->num_key_value_heads : 0;
    if (heads) {
        float *p = gb_keep(b, malloc(r->numel * sizeof(float)));
        pt__gguf_permute_rows(p, r->data, r->shape[0], r->ndim == 2 ? r->shape[1] : 1, heads);
        src = p;
    }
    int type = (flags & GB_BF16) && r->ndim == 2 ? PT_GGML_BF16 : PT_GGML_F32;
    ck_assert_ok(pt__gguf_add_tensor_f32(w, name, (uint32_t)r->ndim, ne, type, src));
}

/* A writer holding model m as the converter writes it (tokenizer not
 * included); free b after pt__gguf_write. */
static inline pt_gguf_writer *gb_model_writer(const pt_model *m, gb_bufs *b, unsigned flags)
{
    pt_model_config c;
    pt_model_config_init(&c);
    ck_assert_ok(pt_model_get_config(&c, m));
    pt_gguf_writer *w = NULL;
    ck_assert_ok(pt__gguf_writer_new(&w));
    gb_model_meta(w, &c, flags);
    if (c.rope_type == PT_ROPE_LLAMA3) {
        uint64_t ne = (uint64_t)c.head_dim / 2;
        ck_assert_ok(pt__gguf_add_tensor_f32(w, "rope_freqs.weight", 1, &ne, PT_GGML_F32,
                                            gb_keep(b, gb_rope_freqs(&c))));
    }
    for (size_t i = 0; i < pt__model_base_tensor_count(m); i++)
        gb_tensor(w, b, pt__model_tensor(m, i), &c, flags);
    if (flags & GB_EXTRA) {
        uint64_t ne = 4;
        ck_assert_ok(pt__gguf_add_tensor_f32(w, "blk.0.attn_extra.weight", 1, &ne, PT_GGML_F32,
                                            gb_keep(b, calloc(4, sizeof(float)))));
    }
    return w;
}

/* ---- tokenizer metadata from a tokenizer.json ---------------------------------- */

typedef struct gb_tok {
    char **tok;
    int32_t *type;
    float *score;
    char **merges;
    size_t n, nmerges;
    int32_t bos, eos, unk, pad;
    int add_bos;          /* from the tokenizer.json post-processor */
    bool spm;
    char *chat;           /* tokenizer_config.json chat_template */
    cJSON *json;          /* the parsed tokenizer.json (for the strip flags) */
} gb_tok;

static inline int32_t gb_find(const gb_tok *t, const char *s)
{
    for (size_t i = 0; s && i < t->n; i++)
        if (t->tok[i] && strcmp(t->tok[i], s) == 0)
            return (int32_t)i;
    return -1;
}

static inline const char *gb_config_token(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline char *gb_merge_text(const cJSON *it)
{
    if (cJSON_IsString(it))
        return strdup(it->valuestring);
    const char *a = cJSON_GetArrayItem(it, 0)->valuestring, *b = cJSON_GetArrayItem(it, 1)->valuestring;
    char *s = malloc(strlen(a) + strlen(b) + 2);
    sprintf(s, "%s %s", a, b);
    return s;
}

/* Scores that order the merges as the file lists them: minus the rank of
 * the first merge producing the piece (-1e9 for the rest), the way a
 * SentencePiece BPE model scores its pieces. */
static inline void gb_spm_scores(gb_tok *t, const cJSON *merges)
{
    for (size_t i = 0; i < t->n; i++)
        t->score[i] = -1e9f;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        char *s = gb_merge_text(it), *sp = strchr(s, ' ');
        memmove(sp, sp + 1, strlen(sp));
        int32_t id = gb_find(t, s);
        ck_assert_int_ge(id, 0);
        if (t->score[id] == -1e9f)
            t->score[id] = (float)-k;
        k++;
        free(s);
    }
}

static inline cJSON *gb_read_json(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    if (pt__read_file(&text, &len, path, (size_t)1 << 28) != PT_OK) {
        pt_clear_error();
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    pt_free(text);
    return j;
}

static inline void gb_tok_types(gb_tok *t, const cJSON *added, const char *unk)
{
    static const char *byte_re = "^<0x[0-9A-Fa-f][0-9A-Fa-f]>$";
    regex_t re;
    ck_assert_int_eq(regcomp(&re, byte_re, REG_EXTENDED | REG_NOSUB), 0);
    for (size_t i = 0; i < t->n; i++)
        t->type[i] = t->spm && regexec(&re, t->tok[i], 0, NULL, 0) == 0 ? 6 : 1;
    regfree(&re);
    const cJSON *a;
    cJSON_ArrayForEach(a, added) {
        int id = cJSON_GetObjectItemCaseSensitive(a, "id")->valueint;
        t->type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special")) ? 3 : 4;
    }
    int32_t u = gb_find(t, unk);
    if (u >= 0)
        t->type[u] = 2;
}

/* The metadata of dir/tokenizer.json (and tokenizer_config.json). */
static inline bool gb_tok_load(gb_tok *t, const char *dir)
{
    memset(t, 0, sizeof *t);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!(t->json = gb_read_json(path)))
        return false;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(t->json, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(t->json, "added_tokens");
    t->spm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const cJSON *it;
    int max = -1;
    cJSON_ArrayForEach(it, vocab) max = it->valueint > max ? it->valueint : max;
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        max = id > max ? id : max;
    }
    t->n = (size_t)max + 1;
    t->tok = calloc(t->n, sizeof *t->tok);
    t->type = calloc(t->n, sizeof *t->type);
    t->score = calloc(t->n, sizeof *t->score);
    cJSON_ArrayForEach(it, vocab) t->tok[it->valueint] = strdup(it->string);
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        if (!t->tok[id])
            t->tok[id] = strdup(cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring);
    }
    for (size_t i = 0; i < t->n; i++)
        ck_assert_msg(t->tok[i] != NULL, "id %zu unused", i);
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    gb_tok_types(t, added, cJSON_IsString(unk) ? unk->valuestring : NULL);
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (t->spm) {
        gb_spm_scores(t, merges);
    } else {
        t->nmerges = (size_t)cJSON_GetArraySize(merges);
        t->merges = calloc(t->nmerges, sizeof *t->merges);
        size_t k = 0;
        cJSON_ArrayForEach(it, merges) t->merges[k++] = gb_merge_text(it);
    }
    const cJSON *post = cJSON_GetObjectItemCaseSensitive(t->json, "post_processor");
    const cJSON *pty = post ? cJSON_GetObjectItemCaseSensitive(post, "type") : NULL;
    t->add_bos = cJSON_IsString(pty) && strcmp(pty->valuestring, "TemplateProcessing") == 0;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    cJSON *cfg = gb_read_json(path);
    t->bos = gb_find(t, gb_config_token(cfg, "bos_token"));
    t->eos = gb_find(t, gb_config_token(cfg, "eos_token"));
    t->unk = gb_find(t, gb_config_token(cfg, "unk_token"));
    t->pad = gb_find(t, gb_config_token(cfg, "pad_token"));
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    t->chat = cJSON_IsString(ct) ? strdup(ct->valuestring) : NULL;
    if (t->add_bos && t->bos < 0)
        t->bos = 1;
    cJSON_Delete(cfg);
    return true;
}

static inline void gb_tok_free(gb_tok *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->tok[i]);
    for (size_t i = 0; i < t->nmerges; i++)
        free(t->merges[i]);
    free(t->tok);
    free(t->type);
    free(t->score);
    free(t->merges);
    free(t->chat);
    cJSON_Delete(t->json);
    memset(t, 0, sizeof *t);
}

/* The tokenizer.ggml.* keys as the converter writes them. */
static inline void gb_tok_meta(pt_gguf_writer *w, const gb_tok *t, const char *pre)
{
    ck_assert_ok(pt__gguf_set_str(w, "tokenizer.ggml.model", t->spm ? "llama" : "gpt2"));
    ck_assert_ok(pt__gguf_set_str(w, "tokenizer.ggml.pre", t->spm ? "default" : pre));
    ck_assert_ok(pt__gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)t->tok, NULL, t->n));
    if (t->spm)
        ck_assert_ok(pt__gguf_set_arr(w, "tokenizer.ggml.scores", PT_GGUF_FLOAT32, t->score, t->n));
    ck_assert_ok(pt__gguf_set_arr(w, "tokenizer.ggml.token_type", PT_GGUF_INT32, t->type, t->n));
    if (t->nmerges)
        ck_assert_ok(pt__gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)t->merges,
                                         NULL, t->nmerges));
    if (t->bos >= 0)
        ck_assert_ok(pt__gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos));
    if (t->eos >= 0)
        ck_assert_ok(pt__gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos));
    if (t->unk >= 0)
        ck_assert_ok(pt__gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk));
    if (t->pad >= 0)
        ck_assert_ok(pt__gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad));
    ck_assert_ok(pt__gguf_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos));
    ck_assert_ok(pt__gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false));
    if (t->chat)
        ck_assert_ok(pt__gguf_set_str(w, "tokenizer.chat_template", t->chat));
}

#endif
