/* pt_model_export_gguf against what llama.cpp's convert_hf_to_gguf.py
 * writes: every key (in order) and value computed here from the exported
 * directory's config.json and tokenizer files, every tensor (un-permuted
 * and compared with the model's), rope_freqs for llama3 scaling, LoRA
 * merged with the model untouched, failures that leave the file alone.
 * The models are the configurations of tests/reference/ with seeded
 * weights and the stories260K tokenizer (tests/modelio/data/stories260K);
 * the byte-level tokenizers of ../shared/data when present. */
#include "testutil.h"
#include "testfs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <unistd.h>

#include "core/core.h"
#include "io/fileio.h"
#include "io/gguf.h"
#include "io/path.h"
#include "posttrain/gguf.h"
#include "posttrain/lora.h"
#include "posttrain/modelio.h"

#define REF PT_TEST_SRCDIR "/reference"
#define FIXTURE PT_TEST_SRCDIR "/modelio/data/stories260K"

/* ---- helpers ------------------------------------------------------------------ */

static cJSON *read_json(const char *dir, const char *name)
{
    char *p = pt__path_join(dir, name), *text = NULL;
    size_t len = 0;
    ck_assert_msg(pt__read_file(&text, &len, p, (size_t)1 << 28) == PT_OK, "%s: %s", p, pt_last_error());
    cJSON *j = cJSON_ParseWithLength(text, len);
    ck_assert_msg(j != NULL, "%s: not JSON", p);
    pt_free(text);
    pt_free(p);
    return j;
}

/* root/name: a model directory with config `ref`'s config.json (vocab_size
 * replaced), weights seeded by `seed` and the tokenizer files of tokdir. */
static char *make_dir(const char *root, const char *name, const char *ref, int vocab, const char *tokdir)
{
    char refdir[4096];
    snprintf(refdir, sizeof refdir, "%s/%s", REF, ref);
    char *cfgp = pt__path_join(refdir, "config.json"), *text = NULL;
    size_t len;
    ck_assert_ok(pt__read_file(&text, &len, cfgp, 1 << 20));
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    ck_assert_ok(pt_model_config_from_json(&cfg, text, len));
    cfg.vocab_size = vocab;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &cfg, 7));
    char *dir = pt__path_join(root, name);
    pt_model_save_options so;
    pt_model_save_options_init(&so);
    so.tokenizer_dir = tokdir;
    ck_assert_ok(pt_model_save_dir(m, dir, &so));
    pt_model_free(m);
    pt_free(text);
    pt_free(cfgp);
    return dir;
}

static pt_model *load(const char *dir)
{
    pt_model *m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, dir, NULL));
    ck_assert_ptr_nonnull(pt_model_tokenizer(m));
    return m;
}

/* A list of the keys the file must hold, in order. */
typedef struct keys {
    const char *k[400];
    char own[400][96];
    int n;
} keys;

static void key(keys *ks, const char *k)
{
    ck_assert_int_lt(ks->n, 400);
    snprintf(ks->own[ks->n], sizeof ks->own[0], "%s", k);
    ks->k[ks->n] = ks->own[ks->n];
    ks->n++;
}

static void check_keys(const pt_gguf *g, const keys *ks)
{
    size_t n = pt__gguf_kv_count(g);
    for (size_t i = 0; i < n && i < (size_t)ks->n; i++)
        ck_assert_msg(!strcmp(pt__gguf_kv_at(g, i)->key, ks->k[i]), "key %zu is %s, expected %s", i,
                      pt__gguf_kv_at(g, i)->key, ks->k[i]);
    ck_assert_msg(n == (size_t)ks->n, "%zu keys, expected %d (first extra/missing at %d: %s)", n, ks->n,
                  (int)(n < (size_t)ks->n ? n : (size_t)ks->n),
                  n > (size_t)ks->n ? pt__gguf_kv_at(g, (size_t)ks->n)->key : ks->k[n]);
}

static uint32_t u32(const pt_gguf *g, const char *k)
{
    uint32_t v = 0;
    ck_assert_msg(pt__gguf_get_u32(g, k, &v) == PT_OK, "%s: %s", k, pt_last_error());
    ck_assert_int_eq(pt__gguf_find_kv(g, k)->type, PT_GGUF_UINT32);
    return v;
}

static float f32(const pt_gguf *g, const char *k)
{
    float v = 0;
    ck_assert_msg(pt__gguf_get_f32(g, k, &v) == PT_OK, "%s: %s", k, pt_last_error());
    ck_assert_int_eq(pt__gguf_find_kv(g, k)->type, PT_GGUF_FLOAT32);
    return v;
}

static bool boolv(const pt_gguf *g, const char *k)
{
    bool v = false;
    ck_assert_msg(pt__gguf_get_bool(g, k, &v) == PT_OK, "%s: %s", k, pt_last_error());
    return v;
}

static void check_str(const pt_gguf *g, const char *k, const char *want)
{
    pt_gguf_str s;
    ck_assert_msg(pt__gguf_get_str(g, k, &s) == PT_OK, "%s: %s", k, pt_last_error());
    ck_assert_msg(s.len == strlen(want) && !memcmp(s.ptr, want, s.len), "%s = '%.*s', expected '%s'", k,
                  (int)s.len, s.ptr, want);
}

static int jint(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    ck_assert_msg(cJSON_IsNumber(v), "config.json %s", k);
    return v->valueint;
}

/* ---- tensors ------------------------------------------------------------------- */

static const char *const k_names[][2] = {
    { "input_layernorm", "attn_norm" }, { "self_attn.q_proj", "attn_q" }, { "self_attn.k_proj", "attn_k" },
    { "self_attn.v_proj", "attn_v" }, { "self_attn.o_proj", "attn_output" },
    { "self_attn.q_norm", "attn_q_norm" }, { "self_attn.k_norm", "attn_k_norm" },
    { "post_attention_layernorm", "ffn_norm" }, { "mlp.gate_proj", "ffn_gate" },
    { "mlp.up_proj", "ffn_up" }, { "mlp.down_proj", "ffn_down" },
};

/* llama.cpp's name of a Hugging Face tensor name. */
static void gguf_name(char *out, size_t n, const char *hf)
{
    if (!strcmp(hf, "model.embed_tokens.weight")) {
        snprintf(out, n, "token_embd.weight");
        return;
    }
    if (!strcmp(hf, "model.norm.weight") || !strcmp(hf, "lm_head.weight")) {
        snprintf(out, n, "%s", hf[0] == 'l' ? "output.weight" : "output_norm.weight");
        return;
    }
    int layer = -1, off = 0;
    ck_assert_int_eq(sscanf(hf, "model.layers.%d.%n", &layer, &off), 1);
    const char *rest = hf + off, *dot = strrchr(rest, '.');
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (strlen(k_names[i][0]) == (size_t)(dot - rest) && !strncmp(rest, k_names[i][0], (size_t)(dot - rest))) {
            snprintf(out, n, "blk.%d.%s%s", layer, k_names[i][1], dot);
            return;
        }
    ck_abort_msg("no llama.cpp name for %s", hf);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Undo the converter's permute: ggml row r holds HF row h*d + (r%2)*d/2 + (r%d)/2. */
static void unpermute(float *hf, const float *gg, int64_t rows, int64_t cols, int heads)
{
    int64_t d = rows / heads;
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r / d, k = r % d, src = h * d + (k % 2) * (d / 2) + k / 2;
        memcpy(hf + src * cols, gg + r * cols, (size_t)cols * sizeof(float));
    }
}

/* The file's tensors against the model's: order (sorted HF names, rope_freqs
 * first), shapes, types, values. */
static void check_tensors(const pt_gguf *g, const pt_model *m, int type, bool permuted, bool rope_freqs)
{
    size_t n = 0;
    n = pt_model_tensor_count(m);
    const char **names = calloc(n, sizeof *names);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info ti;
        pt_tensor_info_init(&ti);
        ck_assert_ok(pt_model_tensor_info(&ti, m, i));
        names[i] = ti.name;
    }
    qsort(names, n, sizeof *names, cmp_str);
    size_t off = rope_freqs ? 1 : 0;
    ck_assert_uint_eq(pt__gguf_tensor_count(g), n + off);
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    pt_model_get_config(&cfg, m);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info ti;
        pt_tensor_info_init(&ti);
        ck_assert_ok(pt_model_find_tensor_info(&ti, m, names[i]));
        char want[128];
        gguf_name(want, sizeof want, names[i]);
        const pt_gguf_tensor *t = pt__gguf_tensor_at(g, i + off);
        ck_assert_msg(!strcmp(t->name, want), "tensor %zu is %s, expected %s", i + off, t->name, want);
        ck_assert_uint_eq(t->ndim, (uint32_t)ti.ndim);
        ck_assert_uint_eq(t->ne[0], (uint64_t)(ti.ndim == 2 ? ti.shape[1] : ti.shape[0]));
        if (ti.ndim == 2)
            ck_assert_uint_eq(t->ne[1], (uint64_t)ti.shape[0]);
        int want_type = ti.ndim == 1 ? PT_GGML_F32 : type;
        ck_assert_msg(t->type == want_type, "%s has type %d, expected %d", t->name, t->type, want_type);
        float *v = malloc(ti.numel * sizeof *v), *hf = malloc(ti.numel * sizeof *hf);
        ck_assert_ok(pt__gguf_read_f32(t, v, ti.numel));
        bool q = strstr(names[i], "q_proj") != NULL, k = strstr(names[i], "k_proj") != NULL;
        if (permuted && (q || k))
            unpermute(hf, v, ti.shape[0], ti.ndim == 2 ? ti.shape[1] : 1,
                      q ? cfg.num_attention_heads : cfg.num_key_value_heads);
        else
            memcpy(hf, v, ti.numel * sizeof *v);
        double tol = want_type == PT_GGML_F16 ? 1.0 / 2048 : want_type == PT_GGML_BF16 ? 1.0 / 256 : 0;
        for (size_t e = 0; e < ti.numel; e++) {
            double a = hf[e], b = ti.data[e];
            ck_assert_msg(fabs(a - b) <= tol * fabs(b) + (tol ? 1e-7 : 0), "%s[%zu] = %.9g, model %.9g",
                          t->name, e, a, b);
        }
        free(v);
        free(hf);
    }
    ck_assert_ptr_null(cfg.tie_word_embeddings ? pt__gguf_find_tensor(g, "output.weight") : NULL);
    if (!cfg.tie_word_embeddings)
        ck_assert_ptr_nonnull(pt__gguf_find_tensor(g, "output.weight"));
    free(names);
}

static uint64_t file_params(const pt_gguf *g)
{
    uint64_t n = 0;
    for (size_t i = 0; i < pt__gguf_tensor_count(g); i++)
        n += pt__gguf_tensor_at(g, i)->numel;
    return n;
}

/* utility.py size_label for the sizes here (below 10^9). */
static void size_label(char *buf, size_t n, uint64_t p)
{
    double s = p > 1000000 ? p * 1e-6 : p * 1e-3;
    const char *suffix = p > 1000000 ? "M" : "K";
    long r = lrint(s);
    int digits = r == 0 ? 0 : r < 10 ? 1 : r < 100 ? 2 : 3;
    snprintf(buf, n, "%.*f%s", digits >= 2 ? 0 : 2 - digits, s, suffix);
}

/* ---- metadata ------------------------------------------------------------------- */

/* TextModel/LlamaModel set_gguf_parameters' keys for config.json cj. */
static void expect_meta(keys *ks, const cJSON *cj, const char *arch, bool named_parts)
{
    static const char *const gen[] = { "general.architecture", "general.type", "general.name",
                                       "general.size_label" };
    static const char *const params[] = { "block_count", "context_length", "embedding_length",
                                          "feed_forward_length", "attention.head_count",
                                          "attention.head_count_kv", "rope.freq_base",
                                          "attention.layer_norm_rms_epsilon" };
    char k[128];
    for (size_t i = 0; i < 3; i++)
        key(ks, gen[i]);
    if (named_parts) {
        key(ks, "general.finetune");
        key(ks, "general.basename");
    }
    key(ks, gen[3]);
    for (size_t i = 0; i < 8; i++) {
        snprintf(k, sizeof k, "%s.%s", arch, params[i]);
        key(ks, k);
    }
    if (cJSON_GetObjectItemCaseSensitive(cj, "head_dim")) {
        snprintf(k, sizeof k, "%s.attention.key_length", arch);
        key(ks, k);
        snprintf(k, sizeof k, "%s.attention.value_length", arch);
        key(ks, k);
    }
    key(ks, "general.file_type");
    if (!strcmp(arch, "llama")) {
        key(ks, "llama.vocab_size");
        key(ks, "llama.rope.dimension_count");
    }
    key(ks, "general.quantization_version");
}

static void check_meta(const pt_gguf *g, const cJSON *cj, const char *arch, const char *name, uint32_t ftype)
{
    char k[128], label[32];
    check_str(g, "general.architecture", arch);
    check_str(g, "general.type", "model");
    check_str(g, "general.name", name);
    size_label(label, sizeof label, file_params(g));
    check_str(g, "general.size_label", label);
#define AK(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    ck_assert_uint_eq(u32(g, AK("block_count")), (uint32_t)jint(cj, "num_hidden_layers"));
    ck_assert_uint_eq(u32(g, AK("context_length")), (uint32_t)jint(cj, "max_position_embeddings"));
    ck_assert_uint_eq(u32(g, AK("embedding_length")), (uint32_t)jint(cj, "hidden_size"));
    ck_assert_uint_eq(u32(g, AK("feed_forward_length")), (uint32_t)jint(cj, "intermediate_size"));
    ck_assert_uint_eq(u32(g, AK("attention.head_count")), (uint32_t)jint(cj, "num_attention_heads"));
    ck_assert_uint_eq(u32(g, AK("attention.head_count_kv")), (uint32_t)jint(cj, "num_key_value_heads"));
    ck_assert(f32(g, AK("rope.freq_base")) ==
              (float)cJSON_GetObjectItemCaseSensitive(cj, "rope_theta")->valuedouble);
    ck_assert(f32(g, AK("attention.layer_norm_rms_epsilon")) ==
              (float)cJSON_GetObjectItemCaseSensitive(cj, "rms_norm_eps")->valuedouble);
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(cj, "head_dim");
    int head_dim = hd ? hd->valueint : jint(cj, "hidden_size") / jint(cj, "num_attention_heads");
    if (hd) {
        ck_assert_uint_eq(u32(g, AK("attention.key_length")), (uint32_t)head_dim);
        ck_assert_uint_eq(u32(g, AK("attention.value_length")), (uint32_t)head_dim);
    }
    ck_assert_uint_eq(u32(g, "general.file_type"), ftype);
    if (!strcmp(arch, "llama")) {
        ck_assert_uint_eq(u32(g, "llama.vocab_size"), (uint32_t)jint(cj, "vocab_size"));
        ck_assert_uint_eq(u32(g, "llama.rope.dimension_count"), (uint32_t)head_dim);
    }
    ck_assert_uint_eq(u32(g, "general.quantization_version"), 2);
#undef AK
}

/* The stories260K tokenizer as LlamaHfVocab + SpecialVocab write it: every
 * token of tokenizer.json's vocab in id order, score -1000, <0xNN> BYTE,
 * <unk> <s> </s> CONTROL (tokenizer_config.json's special tokens), the rest
 * NORMAL; ids from tokenizer_config.json; add_bos from it, add_sep false
 * (the TemplateProcessing pair "<s> A <s> B"), add_eos false. */
static void expect_stories_vocab(keys *ks)
{
    static const char *const k[] = {
        "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
        "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_sep_token",
        "tokenizer.ggml.add_eos_token",
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        key(ks, k[i]);
}

static void check_stories_vocab(const pt_gguf *g)
{
    cJSON *tj = read_json(FIXTURE, "tokenizer.json");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "vocab");
    int n = cJSON_GetArraySize(vocab);
    ck_assert_int_eq(n, 512);
    const char **by_id = calloc((size_t)n, sizeof *by_id);
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) by_id[it->valueint] = it->string;
    check_str(g, "tokenizer.ggml.model", "llama");
    check_str(g, "tokenizer.ggml.pre", "default");
    const void *d;
    uint64_t cnt;
    ck_assert_ok(pt__gguf_get_arr(g, "tokenizer.ggml.tokens", PT_GGUF_STRING, &d, &cnt));
    ck_assert_uint_eq(cnt, (uint64_t)n);
    const pt_gguf_str *toks = d;
    for (int i = 0; i < n; i++)
        ck_assert_msg(toks[i].len == strlen(by_id[i]) && !memcmp(toks[i].ptr, by_id[i], toks[i].len),
                      "token %d", i);
    ck_assert_ok(pt__gguf_get_arr(g, "tokenizer.ggml.scores", PT_GGUF_FLOAT32, &d, &cnt));
    for (int i = 0; i < n; i++)
        ck_assert(((const float *)d)[i] == -1000.0f);
    ck_assert_ok(pt__gguf_get_arr(g, "tokenizer.ggml.token_type", PT_GGUF_INT32, &d, &cnt));
    for (int i = 0; i < n; i++) {
        const char *s = by_id[i];
        int want = i < 3 ? 3 : (strlen(s) == 6 && !strncmp(s, "<0x", 3)) ? 6 : 1;
        ck_assert_msg(((const int32_t *)d)[i] == want, "type of %d (%s)", i, s);
    }
    ck_assert_uint_eq(u32(g, "tokenizer.ggml.bos_token_id"), 1);
    ck_assert_uint_eq(u32(g, "tokenizer.ggml.eos_token_id"), 2);
    ck_assert_uint_eq(u32(g, "tokenizer.ggml.unknown_token_id"), 0);
    ck_assert(boolv(g, "tokenizer.ggml.add_bos_token"));
    ck_assert(!boolv(g, "tokenizer.ggml.add_sep_token"));
    ck_assert(!boolv(g, "tokenizer.ggml.add_eos_token"));
    free(by_id);
    cJSON_Delete(tj);
}

/* Export `ref`'s configuration with the stories tokenizer and check it all. */
/* rope_freqs for config.json's llama3 rope_scaling, computed here in
 * double from transformers' formula: 1 for high frequencies, `factor` for
 * low ones, the smooth blend between; all three bands must occur. */
static void check_rope_freqs(const pt_gguf *g, const cJSON *cj)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cj, "rope_scaling");
    double factor = cJSON_GetObjectItemCaseSensitive(rs, "factor")->valuedouble;
    double low = cJSON_GetObjectItemCaseSensitive(rs, "low_freq_factor")->valuedouble;
    double high = cJSON_GetObjectItemCaseSensitive(rs, "high_freq_factor")->valuedouble;
    double old = cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings")->valuedouble;
    double theta = cJSON_GetObjectItemCaseSensitive(cj, "rope_theta")->valuedouble;
    int dim = jint(cj, "hidden_size") / jint(cj, "num_attention_heads");
    const pt_gguf_tensor *t = pt__gguf_tensor_at(g, 0);
    ck_assert_str_eq(t->name, "rope_freqs.weight");
    ck_assert_int_eq(t->type, PT_GGML_F32);
    ck_assert_uint_eq(t->numel, (uint64_t)dim / 2);
    float v[64];
    ck_assert_ok(pt__gguf_read_f32(t, v, t->numel));
    int bands[3] = { 0, 0, 0 };
    for (int i = 0; i < dim / 2; i++) {
        double wavelen = 2 * M_PI * pow(theta, 2.0 * i / dim), want;
        if (wavelen < old / high) {
            want = 1;
            bands[0]++;
        } else if (wavelen > old / low) {
            want = factor;
            bands[2]++;
        } else {
            double smooth = (old / wavelen - low) / (high - low);
            want = 1 / ((1 - smooth) / factor + smooth);
            bands[1]++;
        }
        ck_assert_msg(fabs(v[i] - want) <= 1e-6 * want, "rope_freqs[%d] = %.9g, expected %.9g", i, v[i], want);
    }
    ck_assert_msg(bands[0] && bands[1] && bands[2], "bands %d %d %d", bands[0], bands[1], bands[2]);
}

static void run_llama_case(const char *ref, const char *dirname, const char *name, int type, int ggml,
                           uint32_t ftype)
{
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, dirname, ref, 512, FIXTURE);
    pt_model *m = load(dir);
    char *out = pt__path_join(root, "model.gguf");
    pt_gguf_export_options o;
    pt_gguf_export_options_init(&o);
    o.type = type;
    ck_assert_ok(pt_model_export_gguf(m, out, &o));
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, out));
    cJSON *cj = read_json(dir, "config.json");
    keys ks = { .n = 0 };
    expect_meta(&ks, cj, "llama", strchr(dirname, 'M') != NULL);
    expect_stories_vocab(&ks);
    check_keys(g, &ks);
    check_meta(g, cj, "llama", name, ftype);
    check_stories_vocab(g);
    bool llama3 = cJSON_GetObjectItemCaseSensitive(cj, "rope_scaling") &&
                  cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cj, "rope_scaling"));
    check_tensors(g, m, ggml, true, llama3);
    if (llama3)
        check_rope_freqs(g, cj);
    pt__gguf_close(g);
    cJSON_Delete(cj);
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(out);
}

START_TEST(test_llama_tied_f32)
{
    /* id_to_title("llama_tied_gqa"): one lower-case word, title-cased. */
    run_llama_case("llama_tied_gqa", "llama_tied_gqa", "Llama_Tied_Gqa", PT_GGUF_FTYPE_F32, PT_GGML_F32, 0);
}
END_TEST

START_TEST(test_llama_tied_f16)
{
    run_llama_case("llama_tied_gqa", "tiny-llama", "Tiny Llama", PT_GGUF_FTYPE_F16, PT_GGML_F16, 1);
}
END_TEST

START_TEST(test_llama3_bf16)
{
    run_llama_case("llama3_rope_scaling", "llama3_rope_scaling", "Llama3_Rope_Scaling", PT_GGUF_FTYPE_BF16,
                   PT_GGML_BF16, 32);
}
END_TEST

START_TEST(test_name_heuristics)
{
    /* get_model_id_components("SmolLM2-135M-Instruct") for a model far
     * smaller than 135M: "135m" is taken for a context length (finetune),
     * SmolLM2 is the basename; the words keep their case. */
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, "SmolLM2-135M-Instruct", "llama_tied_gqa", 512, FIXTURE);
    pt_model *m = load(dir);
    char *out = pt__path_join(root, "m.gguf");
    ck_assert_ok(pt_model_export_gguf(m, out, NULL));
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, out));
    check_str(g, "general.name", "SmolLM2 135M Instruct");
    check_str(g, "general.finetune", "135m-Instruct");
    check_str(g, "general.basename", "SmolLM2");
    ck_assert_str_eq(pt__gguf_kv_at(g, 3)->key, "general.finetune");
    ck_assert_str_eq(pt__gguf_kv_at(g, 4)->key, "general.basename");
    pt__gguf_close(g);
    /* --name replaces general.name only */
    pt_gguf_export_options o;
    pt_gguf_export_options_init(&o);
    o.name = "My Model";
    ck_assert_ok(pt_model_export_gguf(m, out, &o));
    ck_assert_ok(pt__gguf_open(&g, out));
    check_str(g, "general.name", "My Model");
    check_str(g, "general.basename", "SmolLM2");
    pt__gguf_close(g);
    /* an older caller's struct without `name`: what lies past its size is not read */
    o.size = offsetof(pt_gguf_export_options, name);
    o.type = PT_GGUF_FTYPE_F16;
    ck_assert_ok(pt_model_export_gguf(m, out, &o));
    ck_assert_ok(pt__gguf_open(&g, out));
    check_str(g, "general.name", "SmolLM2 135M Instruct");
    ck_assert_uint_eq(u32(g, "general.file_type"), 1);
    pt__gguf_close(g);
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(out);
}
END_TEST

static char *slurp(const char *path, size_t *len)
{
    char *t = NULL;
    ck_assert_ok(pt__read_file(&t, len, path, (size_t)1 << 30));
    return t;
}

START_TEST(test_deterministic)
{
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, "llama3_rope_scaling", "llama3_rope_scaling", 512, FIXTURE);
    pt_model *m = load(dir);
    char *a = pt__path_join(root, "a.gguf"), *b = pt__path_join(root, "b.gguf");
    ck_assert_ok(pt_model_export_gguf(m, a, NULL));
    ck_assert_ok(pt_model_export_gguf(m, b, NULL));
    size_t na, nb;
    char *ta = slurp(a, &na), *tb = slurp(b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(ta, tb, na) == 0);
    pt_free(ta);
    pt_free(tb);
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(a);
    pt_free(b);
}
END_TEST

START_TEST(test_lora_merged_model_unchanged)
{
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, "llama_tied_gqa", "llama_tied_gqa", 512, FIXTURE);
    pt_model *m = load(dir), *merged = load(dir);
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 4;
    lo.alpha = 8;
    lo.targets = PT_LORA_Q | PT_LORA_K | PT_LORA_V | PT_LORA_DOWN;
    lo.seed = 3;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    ck_assert_ok(pt_model_add_lora(merged, &lo));
    /* B starts at zero: give both models the same non-zero B */
    size_t n = 0;
    n = pt_model_tensor_count(m);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info a, b;
        pt_tensor_info_init(&a);
        pt_tensor_info_init(&b);
        ck_assert_ok(pt_model_tensor_info(&a, m, i));
        ck_assert_ok(pt_model_tensor_info(&b, merged, i));
        if (a.adapter && strstr(a.name, "lora_B"))
            for (size_t e = 0; e < a.numel; e++)
                a.data[e] = b.data[e] = 0.01f * (float)((e * 7 + i) % 13) - 0.06f;
    }
    /* a snapshot of every tensor of m */
    float **before = calloc(n, sizeof *before);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info a;
        pt_tensor_info_init(&a);
        ck_assert_ok(pt_model_tensor_info(&a, m, i));
        before[i] = malloc(a.numel * sizeof(float));
        memcpy(before[i], a.data, a.numel * sizeof(float));
    }
    char *out = pt__path_join(root, "m.gguf");
    ck_assert_ok(pt_model_export_gguf(m, out, NULL));
    size_t n2 = 0;
    n2 = pt_model_tensor_count(m);
    ck_assert_uint_eq(n2, n);
    ck_assert(pt_model_has_lora(m));
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info a;
        pt_tensor_info_init(&a);
        ck_assert_ok(pt_model_tensor_info(&a, m, i));
        ck_assert_msg(memcmp(before[i], a.data, a.numel * sizeof(float)) == 0, "%s changed", a.name);
        free(before[i]);
    }
    free(before);
    ck_assert_ok(pt_model_merge_lora(merged));
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, out));
    check_tensors(g, merged, PT_GGML_F32, true, false);   /* exactly the merged weights */
    /* and they differ from the base's */
    pt_model *base = load(dir);
    const pt_gguf_tensor *t = pt__gguf_find_tensor(g, "blk.0.attn_v.weight");
    pt_tensor_info bv;
    pt_tensor_info_init(&bv);
    ck_assert_ok(pt_model_find_tensor_info(&bv, base, "model.layers.0.self_attn.v_proj.weight"));
    float *v = malloc(bv.numel * sizeof *v);
    ck_assert_ok(pt__gguf_read_f32(t, v, bv.numel));
    ck_assert(memcmp(v, bv.data, bv.numel * sizeof *v) != 0);
    free(v);
    pt__gguf_close(g);
    pt_model_free(base);
    pt_model_free(m);
    pt_model_free(merged);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(out);
}
END_TEST

/* ---- failures ------------------------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    ck_assert_ok(pt__write_file_atomic(path, text, strlen(text)));
}

static void assert_text(const char *path, const char *text)
{
    size_t len;
    char *t = slurp(path, &len);
    ck_assert_uint_eq(len, strlen(text));
    ck_assert(memcmp(t, text, len) == 0);
    pt_free(t);
}

START_TEST(test_no_tokenizer_estate)
{
    char *root = pt_test_tmpdir("gguf_exp_");
    pt_model *m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, REF "/llama_tied_gqa", NULL));
    ck_assert_ptr_null(pt_model_tokenizer(m));
    char *out = pt__path_join(root, "m.gguf");
    ck_assert_status(pt_model_export_gguf(m, out, NULL), PT_ESTATE, "no tokenizer");
    ck_assert(!pt__is_file(out));
    write_text(out, "old");
    ck_assert_status(pt_model_export_gguf(m, out, NULL), PT_ESTATE, "no tokenizer");
    assert_text(out, "old");
    pt_model *created = NULL;
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 32);
    ck_assert_ok(pt_model_create(&created, &c, 1));
    ck_assert_status(pt_model_export_gguf(created, out, NULL), PT_ESTATE, "no tokenizer");
    pt_model_free(created);
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(out);
}
END_TEST

START_TEST(test_bad_arguments)
{
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, "llama_tied_gqa", "llama_tied_gqa", 512, FIXTURE);
    pt_model *m = load(dir);
    char *out = pt__path_join(root, "m.gguf");
    pt_gguf_export_options o;
    pt_gguf_export_options_init(&o);
    o.type = 7;
    ck_assert_status(pt_model_export_gguf(m, out, &o), PT_EINVAL, "pt_gguf_ftype");
    ck_assert_status(pt_model_export_gguf(NULL, out, NULL), PT_EINVAL, "model");
    ck_assert_status(pt_model_export_gguf(m, NULL, NULL), PT_EINVAL, "path");
    ck_assert_status(pt_model_export_gguf(m, "", NULL), PT_EINVAL, "empty");
    /* a directory that cannot hold the file: its parent is a regular file */
    char *file = pt__path_join(root, "plain");
    write_text(file, "x");
    char *bad = pt__path_join(file, "m.gguf");
    ck_assert_int_ne(pt_model_export_gguf(m, bad, NULL), PT_OK);
    ck_assert_msg(strstr(pt_last_error(), bad) != NULL, "message names the path: %s", pt_last_error());
    assert_text(file, "x");
    ck_assert(!pt__is_file(out));
    /* names */
    int v = -1;
    ck_assert_ok(pt_gguf_ftype_from_name(&v, "bf16"));
    ck_assert_int_eq(v, PT_GGUF_FTYPE_BF16);
    ck_assert_str_eq(pt_gguf_ftype_name(PT_GGUF_FTYPE_F16), "f16");
    ck_assert_ptr_null(pt_gguf_ftype_name(3));
    ck_assert_status(pt_gguf_ftype_from_name(&v, "q8_0"), PT_EINVAL, "f32");
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(out);
    pt_free(file);
    pt_free(bad);
}
END_TEST

/* The merged piece of a tokenizer.json merge ("a b" or ["a", "b"]). */
static void merge_piece(char *buf, size_t n, const cJSON *it)
{
    if (cJSON_IsArray(it)) {
        snprintf(buf, n, "%s%s", cJSON_GetArrayItem(it, 0)->valuestring, cJSON_GetArrayItem(it, 1)->valuestring);
        return;
    }
    const char *s = it->valuestring, *sp = strchr(s, ' ');
    ck_assert_ptr_nonnull(sp);
    snprintf(buf, n, "%.*s%s", (int)(sp - s), s, sp + 1);
}

/* spm_scores "merges": token i's score is minus the index of the first
 * merge of tokenizer.json making it, -1e9 for the tokens no merge makes;
 * the importer rebuilds exactly tokenizer.json's merges from them; the rest
 * of the file is the converter-parity export's. */
START_TEST(test_spm_scores_merges)
{
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, "llama_tied_gqa", "llama_tied_gqa", 512, FIXTURE);
    pt_model *m = load(dir);
    char *conv = pt__path_join(root, "conv.gguf"), *mer = pt__path_join(root, "merges.gguf");
    pt_gguf_export_options o;
    pt_gguf_export_options_init(&o);
    ck_assert_int_eq(o.spm_scores, PT_GGUF_SPM_SCORES_CONVERTER);
    ck_assert_ok(pt_model_export_gguf(m, conv, &o));
    o.spm_scores = PT_GGUF_SPM_SCORES_MERGES;
    ck_assert_ok(pt_model_export_gguf(m, mer, &o));
    cJSON *tj = read_json(FIXTURE, "tokenizer.json");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges"), *it;
    float want[512];
    for (int i = 0; i < 512; i++)
        want[i] = -1e9f;
    int k = 0, made = 0;
    cJSON_ArrayForEach(it, merges) {
        char piece[256];
        merge_piece(piece, sizeof piece, it);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(vocab, piece);
        ck_assert_msg(cJSON_IsNumber(id), "merge %d makes %s", k, piece);
        if (want[id->valueint] == -1e9f) {
            want[id->valueint] = (float)-k;
            made++;
        }
        k++;
    }
    ck_assert_int_eq(k, 165);
    ck_assert_int_eq(made, 151);   /* distinct pieces the 165 merges make */
    pt_gguf *g = NULL, *gc = NULL;
    ck_assert_ok(pt__gguf_open(&g, mer));
    ck_assert_ok(pt__gguf_open(&gc, conv));
    const void *d;
    uint64_t cnt;
    ck_assert_ok(pt__gguf_get_arr(g, "tokenizer.ggml.scores", PT_GGUF_FLOAT32, &d, &cnt));
    ck_assert_uint_eq(cnt, 512);
    int none = 0;
    for (int i = 0; i < 512; i++) {
        ck_assert_msg(((const float *)d)[i] == want[i], "score of %d: %g, want %g", i,
                      (double)((const float *)d)[i], (double)want[i]);
        none += want[i] == -1e9f;
    }
    fprintf(stderr, "spm_scores merges: %d merges, %d pieces scored by rank, %d at -1e9\n", k, made, none);
    /* only the scores differ: same keys, same tensors */
    ck_assert_uint_eq(pt__gguf_kv_count(g), pt__gguf_kv_count(gc));
    ck_assert_uint_eq(pt__gguf_tensor_count(g), pt__gguf_tensor_count(gc));
    size_t na, nb;
    char *ta = slurp(conv, &na), *tb = slurp(mer, &nb);
    ck_assert_uint_eq(na, nb);
    size_t ndiff = 0;
    for (size_t i = 0; i < na; i++)
        ndiff += ta[i] != tb[i];
    ck_assert_uint_gt(ndiff, 0);
    ck_assert_uint_le(ndiff, 512 * 4);
    pt_free(ta);
    pt_free(tb);
    pt__gguf_close(g);
    pt__gguf_close(gc);
    /* the importer: exactly tokenizer.json's merges, Hugging Face's ids */
    pt_model *back = load(mer);
    const pt_tokenizer *tb_tok = pt_model_tokenizer(back), *ta_tok = pt_model_tokenizer(m);
    static const char *const texts[] = { " little", "Once upon a time, there was a little girl.",
                                         "  two  spaces\tand a tab" };
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        int32_t *ia = NULL, *ib = NULL;
        size_t nia = 0, nib = 0;
        ck_assert_ok(pt_tokenizer_encode(&ia, &nia, ta_tok, texts[t], strlen(texts[t]), PT_TOK_ADD_SPECIAL));
        ck_assert_ok(pt_tokenizer_encode(&ib, &nib, tb_tok, texts[t], strlen(texts[t]), PT_TOK_ADD_SPECIAL));
        ck_assert_uint_eq(nia, nib);
        ck_assert(memcmp(ia, ib, nia * sizeof *ia) == 0);
        pt_free(ia);
        pt_free(ib);
    }
    pt_model_free(back);
    /* a bad value, and the names */
    o.spm_scores = 2;
    ck_assert_status(pt_model_export_gguf(m, mer, &o), PT_EINVAL, "opts->spm_scores");
    int v = -1;
    ck_assert_ok(pt_gguf_spm_scores_from_name(&v, "merges"));
    ck_assert_int_eq(v, PT_GGUF_SPM_SCORES_MERGES);
    ck_assert_str_eq(pt_gguf_spm_scores_name(PT_GGUF_SPM_SCORES_CONVERTER), "converter");
    ck_assert_status(pt_gguf_spm_scores_from_name(&v, "sentencepiece"), PT_EINVAL, "converter");
    cJSON_Delete(tj);
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(conv);
    pt_free(mer);
}
END_TEST

typedef struct log_capture {
    int warnings;
    char last[1024];
} log_capture;

static void capture_log(int level, const char *msg, void *payload)
{
    log_capture *c = payload;
    if (level == PT_LOG_WARN && strstr(msg, "sliding window")) {
        c->warnings++;
        snprintf(c->last, sizeof c->last, "%s", msg);
    }
}

/* No key of g names a sliding window. */
static void assert_no_sliding_key(const pt_gguf *g)
{
    for (size_t i = 0; i < pt__gguf_kv_count(g); i++)
        ck_assert_msg(!strstr(pt__gguf_kv_at(g, i)->key, "sliding"), "%s", pt__gguf_kv_at(g, i)->key);
}

/* Mistral as the converters write MistralForCausalLM: architecture "llama"
 * and no sliding-window key; a window shorter than the context is warned
 * about (once, through the log), a window covering it is not. */
START_TEST(test_mistral_sliding_window)
{
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, "mistral_sliding", "mistral_sliding", 512, FIXTURE);
    char *out = pt__path_join(root, "m.gguf");
    log_capture cap = { 0 };
    ck_assert_ok(pt_set_log_callback(capture_log, PT_LOG_WARN, &cap));
    pt_model *m = load(dir);
    ck_assert_ok(pt_model_export_gguf(m, out, NULL));
    ck_assert_int_eq(cap.warnings, 1);
    ck_assert_msg(strstr(cap.last, "sliding window of 5 tokens") && strstr(cap.last, "context length 128") &&
                  strstr(cap.last, "llama architecture has no sliding window") &&
                  strstr(cap.last, "at most 5 tokens"), "%s", cap.last);
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, out));
    check_str(g, "general.architecture", "llama");
    ck_assert_uint_eq(u32(g, "llama.context_length"), 128);
    assert_no_sliding_key(g);
    pt__gguf_close(g);
    pt_model_free(m);
    /* a window as long as the context: nothing to warn about */
    cJSON *cj = read_json(dir, "config.json");
    cJSON_ReplaceItemInObject(cj, "sliding_window", cJSON_CreateNumber(128));
    char *text = cJSON_Print(cj), *cfg = pt__path_join(dir, "config.json");
    ck_assert_ok(pt__write_file_atomic(cfg, text, strlen(text)));
    cap.warnings = 0;
    m = load(dir);
    ck_assert_ok(pt_model_export_gguf(m, out, NULL));
    ck_assert_int_eq(cap.warnings, 0);
    ck_assert_ok(pt_set_log_callback(NULL, 0, NULL));
    pt_model_free(m);
    cJSON_free(text);
    cJSON_Delete(cj);
    pt_free(cfg);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(out);
}
END_TEST

START_TEST(test_qwen_spm_tokenizer_refused)
{
    /* Qwen2Model.set_vocab takes _set_vocab_gpt2, whose pre-tokenizer hash of
     * a SentencePiece tokenizer is in no table: the converter stops, so do
     * we, leaving an existing file as it was. */
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, "qwen2_bias_untied", "qwen2_bias_untied", 512, FIXTURE);
    pt_model *m = load(dir);
    char *out = pt__path_join(root, "m.gguf");
    write_text(out, "previous");
    ck_assert_status(pt_model_export_gguf(m, out, NULL), PT_EUNSUPPORTED, "pre-tokenizer");
    assert_text(out, "previous");
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(out);
}
END_TEST

/* ---- byte-level BPE tokenizers (../shared/data) ------------------------------ */

typedef struct special_kv {
    const char *key;
    int64_t value;   /* an id, or 0 / 1 for the add_* flags */
} special_kv;

/* The gpt2 token list get_vocab_base writes, checked against tokenizer.json. */
static void check_bpe_tokens(const pt_gguf *g, const cJSON *tj, int vocab)
{
    const char **by_id = calloc((size_t)vocab, sizeof *by_id);
    int *type = calloc((size_t)vocab, sizeof *type);
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "vocab")) {
        by_id[it->valueint] = it->string;
        type[it->valueint] = 1;
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        const char *s = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        size_t n = strlen(s);
        bool looks = n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
        by_id[id] = s;
        type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) || looks ? 3 : 4;
    }
    const void *d;
    uint64_t cnt;
    ck_assert_ok(pt__gguf_get_arr(g, "tokenizer.ggml.tokens", PT_GGUF_STRING, &d, &cnt));
    ck_assert_uint_eq(cnt, (uint64_t)vocab);
    const pt_gguf_str *toks = d;
    const void *td;
    ck_assert_ok(pt__gguf_get_arr(g, "tokenizer.ggml.token_type", PT_GGUF_INT32, &td, &cnt));
    for (int i = 0; i < vocab; i++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", i);
        const char *want = by_id[i] ? by_id[i] : pad;
        ck_assert_msg(toks[i].len == strlen(want) && !memcmp(toks[i].ptr, want, toks[i].len), "token %d", i);
        ck_assert_msg(((const int32_t *)td)[i] == (by_id[i] ? type[i] : 5), "type of token %d", i);
    }
    /* merges: "a b" as in the file, ["a", "b"] joined by a space */
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
    ck_assert_ok(pt__gguf_get_arr(g, "tokenizer.ggml.merges", PT_GGUF_STRING, &d, &cnt));
    ck_assert_uint_eq(cnt, (uint64_t)cJSON_GetArraySize(merges));
    size_t i = 0;
    cJSON_ArrayForEach(it, merges) {
        char want[512];
        if (cJSON_IsString(it))
            snprintf(want, sizeof want, "%s", it->valuestring);
        else
            snprintf(want, sizeof want, "%s %s", cJSON_GetArrayItem(it, 0)->valuestring,
                     cJSON_GetArrayItem(it, 1)->valuestring);
        const pt_gguf_str *s = (const pt_gguf_str *)d + i++;
        ck_assert_msg(s->len == strlen(want) && !memcmp(s->ptr, want, s->len), "merge %zu", i - 1);
    }
    free(by_id);
    free(type);
}

/* tokdir: a folder of ../shared/data/tokenizers, or an absolute path. */
static void run_bpe_case(const char *tok, const char *ref, const char *name, int vocab, const char *arch,
                         const char *pre, const special_kv *sp, size_t nsp, bool chat)
{
    const char *shared = pt_test_shared_data("test_gguf_export byte-level tokenizers");
    if (!shared)
        return;
    char tokdir[4096];
    if (tok[0] == '/')
        snprintf(tokdir, sizeof tokdir, "%s", tok);
    else
        snprintf(tokdir, sizeof tokdir, "%s/tokenizers/%s", shared, tok);
    char *root = pt_test_tmpdir("gguf_exp_");
    char *dir = make_dir(root, ref, ref, vocab, tokdir);
    pt_model *m = load(dir);
    char *out = pt__path_join(root, "m.gguf");
    ck_assert_ok(pt_model_export_gguf(m, out, NULL));
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, out));
    cJSON *cj = read_json(dir, "config.json"), *tj = read_json(tokdir, "tokenizer.json");
    keys ks = { .n = 0 };
    expect_meta(&ks, cj, arch, false);
    key(&ks, "tokenizer.ggml.model");
    key(&ks, "tokenizer.ggml.pre");
    key(&ks, "tokenizer.ggml.tokens");
    key(&ks, "tokenizer.ggml.token_type");
    key(&ks, "tokenizer.ggml.merges");
    for (size_t i = 0; i < nsp; i++)
        key(&ks, sp[i].key);
    if (chat)
        key(&ks, "tokenizer.chat_template");
    check_keys(g, &ks);
    check_meta(g, cj, arch, name, 0);
    check_str(g, "tokenizer.ggml.model", "gpt2");
    check_str(g, "tokenizer.ggml.pre", pre);
    check_bpe_tokens(g, tj, vocab);
    for (size_t i = 0; i < nsp; i++) {
        if (strstr(sp[i].key, "add_"))
            ck_assert_int_eq(boolv(g, sp[i].key), sp[i].value);
        else
            ck_assert_uint_eq(u32(g, sp[i].key), (uint32_t)sp[i].value);
    }
    if (chat) {
        cJSON *tc = read_json(tokdir, "tokenizer_config.json");
        check_str(g, "tokenizer.chat_template", cJSON_GetObjectItemCaseSensitive(tc, "chat_template")->valuestring);
        cJSON_Delete(tc);
    }
    bool llama3 = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cj, "rope_scaling"));
    check_tensors(g, m, PT_GGML_F32, !strcmp(arch, "llama"), llama3);
    if (llama3)
        check_rope_freqs(g, cj);
    pt__gguf_close(g);
    cJSON_Delete(cj);
    cJSON_Delete(tj);
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(dir);
    pt_free(out);
}

/* The ids and flags below follow SpecialVocab by hand: tokenizer_config.json's
 * tokens first (looked up among tokenizer.json's added tokens), then
 * config.json's *_token_id for the types still unset. */
START_TEST(test_gpt2_tokenizer)
{
    /* no tokenizer_config.json: config.json's bos 1 / eos 2 */
    static const special_kv sp[] = { { "tokenizer.ggml.bos_token_id", 1 }, { "tokenizer.ggml.eos_token_id", 2 } };
    run_bpe_case("gpt2", "llama_tied_gqa", "Llama_Tied_Gqa", 50257, "llama", "gpt-2", sp, 2, false);
}
END_TEST

START_TEST(test_llama3_tokenizer)
{
    /* This tokenizer.json's post-processor adds no <|begin_of_text|>, so the
     * ids of chktxt hash to the table's Smaug-Llama-3 entry (the Llama 3
     * vocabulary without BOS), as they would in the converter. */
    static const special_kv sp[] = { { "tokenizer.ggml.bos_token_id", 128000 },
                                     { "tokenizer.ggml.eos_token_id", 128001 } };
    run_bpe_case("llama3", "llama3_rope_scaling", "Llama3_Rope_Scaling", 128256, "llama", "smaug-bpe", sp, 2, true);
}
END_TEST

START_TEST(test_llama3_bos_tokenizer)
{
    /* Meta's later tokenizer.json: TemplateProcessing "<|begin_of_text|> $A"
     * (pair "<|begin_of_text|> $A <|begin_of_text|> $B"): the hash is
     * Meta-Llama-3-8B's "llama-bpe", add_bos_token true, add_sep_token false. */
    const char *shared = pt_test_shared_data("test_gguf_export llama3 with BOS");
    if (!shared)
        return;
    char src[4096];
    snprintf(src, sizeof src, "%s/tokenizers/llama3", shared);
    char *root = pt_test_tmpdir("gguf_tok_");
    cJSON *tj = read_json(src, "tokenizer.json");
    cJSON *pp = cJSON_Parse(
        "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\","
        "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\","
        "\"type_id\":1}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{\"<|begin_of_text|>\":"
        "{\"id\":\"<|begin_of_text|>\",\"ids\":[128000],\"tokens\":[\"<|begin_of_text|>\"]}}}");
    ck_assert_ptr_nonnull(pp);
    cJSON_ReplaceItemInObjectCaseSensitive(tj, "post_processor", pp);
    char *text = cJSON_PrintUnformatted(tj), *p = pt__path_join(root, "tokenizer.json");
    write_text(p, text);
    free(text);
    pt_free(p);
    cJSON_Delete(tj);
    cJSON *tc = read_json(src, "tokenizer_config.json");
    text = cJSON_PrintUnformatted(tc);
    p = pt__path_join(root, "tokenizer_config.json");
    write_text(p, text);
    free(text);
    pt_free(p);
    cJSON_Delete(tc);
    static const special_kv sp[] = { { "tokenizer.ggml.bos_token_id", 128000 },
                                     { "tokenizer.ggml.eos_token_id", 128001 },
                                     { "tokenizer.ggml.add_bos_token", 1 },
                                     { "tokenizer.ggml.add_sep_token", 0 } };
    run_bpe_case(root, "llama_tied_gqa", "Llama_Tied_Gqa", 128256, "llama", "llama-bpe", sp, 4, true);
    pt_test_rm_rf(root);
    free(root);
}
END_TEST

START_TEST(test_qwen3_tokenizer)
{
    /* eos <|im_end|> and pad <|endoftext|> from tokenizer_config.json, bos 1
     * from config.json (bos_token is null there), add_bos_token false;
     * ids 151669 .. 151935 are [PAD<i>] */
    static const special_kv sp[] = { { "tokenizer.ggml.eos_token_id", 151645 },
                                     { "tokenizer.ggml.padding_token_id", 151643 },
                                     { "tokenizer.ggml.bos_token_id", 1 },
                                     { "tokenizer.ggml.add_bos_token", 0 } };
    run_bpe_case("qwen3", "qwen3_qknorm", "Qwen3_Qknorm", 151936, "qwen3", "qwen2", sp, 4, true);
}
END_TEST

START_TEST(test_qwen2_tokenizer)
{
    static const special_kv sp[] = { { "tokenizer.ggml.eos_token_id", 151645 },
                                     { "tokenizer.ggml.padding_token_id", 151643 },
                                     { "tokenizer.ggml.bos_token_id", 1 },
                                     { "tokenizer.ggml.add_bos_token", 0 } };
    run_bpe_case("qwen3", "qwen2_bias_untied", "Qwen2_Bias_Untied", 151936, "qwen2", "qwen2", sp, 4, true);
}
END_TEST

START_TEST(test_stories260K)
{
    const char *shared = pt_test_shared_data("test_gguf_export stories260K");
    if (!shared)
        return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/stories260K", shared);
    pt_model *m = load(dir);
    char *root = pt_test_tmpdir("gguf_exp_"), *out = pt__path_join(root, "s.gguf");
    pt_gguf_export_options o;
    pt_gguf_export_options_init(&o);
    o.type = PT_GGUF_FTYPE_F16;
    ck_assert_ok(pt_model_export_gguf(m, out, &o));
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, out));
    cJSON *cj = read_json(dir, "config.json");
    keys ks = { .n = 0 };
    expect_meta(&ks, cj, "llama", false);
    expect_stories_vocab(&ks);
    check_keys(g, &ks);
    check_meta(g, cj, "llama", "stories260K", 1);
    check_str(g, "general.size_label", "260K");
    check_stories_vocab(g);
    check_tensors(g, m, PT_GGML_F16, true, false);
    pt__gguf_close(g);
    cJSON_Delete(cj);
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
    pt_free(out);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gguf_export");
    TCase *t = tcase_create("export");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, test_llama_tied_f32);
    tcase_add_test(t, test_llama_tied_f16);
    tcase_add_test(t, test_llama3_bf16);
    tcase_add_test(t, test_name_heuristics);
    tcase_add_test(t, test_deterministic);
    tcase_add_test(t, test_lora_merged_model_unchanged);
    tcase_add_test(t, test_no_tokenizer_estate);
    tcase_add_test(t, test_bad_arguments);
    tcase_add_test(t, test_qwen_spm_tokenizer_refused);
    tcase_add_test(t, test_spm_scores_merges);
    tcase_add_test(t, test_mistral_sliding_window);
    tcase_add_test(t, test_stories260K);
    tcase_add_test(t, test_gpt2_tokenizer);
    tcase_add_test(t, test_llama3_tokenizer);
    tcase_add_test(t, test_llama3_bos_tokenizer);
    tcase_add_test(t, test_qwen3_tokenizer);
    tcase_add_test(t, test_qwen2_tokenizer);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return pt_test_run(suite());
}
