/* GGUF import: files written here the way llama.cpp's converter writes them
 * load into exactly the model of the Hugging Face directory they came from
 * (tests/reference), tokenizers rebuilt from tokenizer.ggml.* encode and
 * decode the reference vectors of ../shared/data, malformed files fail with
 * their status, and save_dir of a GGUF-loaded model is a complete Hugging
 * Face directory. */
#include "gguf_build.h"
#include "stories.h"
#include "testfs.h"

#include "io/path.h"
#include "modelio/gguf_import.h"
#include "posttrain/gguf.h"

/* ---- helpers ------------------------------------------------------------------ */

static pt_model *load_ok(const char *path, bool tok)
{
    pt_model_load_options lo;
    pt_model_load_options_init(&lo);
    lo.load_tokenizer = tok;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, path, &lo));
    return m;
}

static char *ref_dir(const char *name)
{
    return pt__path_join(PT_TEST_SRCDIR "/reference", name);
}

/* path: the model of reference dir `name` as GGUF, broken by `flags`. */
static void write_ref_gguf(const char *path, const char *name, unsigned flags)
{
    char *dir = ref_dir(name);
    pt_model *m = load_ok(dir, false);
    gb_bufs b = { 0 };
    pt_gguf_writer *w = gb_model_writer(m, &b, flags);
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    gb_free(&b);
    pt_model_free(m);
    pt_free(dir);
}

static void assert_same_weights(const pt_model *a, const pt_model *b)
{
    ck_assert_uint_eq(pt_model_tensor_count(a), pt_model_tensor_count(b));
    for (size_t i = 0; i < pt_model_tensor_count(a); i++) {
        const pt_tensor_ref *ta = pt__model_tensor(a, i);
        const pt_tensor_ref *tb = pt__model_find_tensor(b, ta->name);
        ck_assert_msg(tb != NULL, "%s missing", ta->name);
        ck_assert_uint_eq(ta->numel, tb->numel);
        ck_assert_msg(memcmp(ta->data, tb->data, ta->numel * sizeof(float)) == 0,
                      "tensor %s differs", ta->name);
    }
}

/* The largest |difference| of the two models' logits on one row of ids. */
static double logits_diff(pt_model *a, pt_model *b, int vocab)
{
    enum { T = 12 };
    int32_t ids[T];
    for (int i = 0; i < T; i++)
        ids[i] = (int32_t)((i * 7 + 3) % vocab);
    pt_batch bt = pt_test_row_batch(ids, NULL, T);
    float *la = malloc(sizeof(float) * T * (size_t)vocab), *lb = malloc(sizeof(float) * T * (size_t)vocab);
    pt_context *ca = NULL, *cb = NULL;
    ck_assert_ok(pt_context_create(&ca, a, 1, T));
    ck_assert_ok(pt_context_create(&cb, b, 1, T));
    ck_assert_ok(pt_model_forward(ca, &bt, NULL, la));
    ck_assert_ok(pt_model_forward(cb, &bt, NULL, lb));
    double d = 0;
    for (size_t i = 0; i < (size_t)T * (size_t)vocab; i++)
        d = fmax(d, fabs((double)la[i] - lb[i]));
    pt_context_free(ca);
    pt_context_free(cb);
    free(la);
    free(lb);
    return d;
}

static pt_model_config config_of(const pt_model *m)
{
    pt_model_config c;
    pt_model_config_init(&c);
    pt_model_get_config(&c, m);
    return c;
}

/* ---- models ------------------------------------------------------------------ */

/* name's model through GGUF: same config fields, same tensors bit for bit
 * (Q/K un-permuted), and logits within tol of the directory's (0: equal). */
static void check_reference(const char *name, double tol)
{
    char *tmp = pt_test_tmpdir("pt_gguf_imp_");
    char *path = pt__path_join(tmp, "model.gguf"), *dir = ref_dir(name);
    write_ref_gguf(path, name, 0);
    pt_model *hf = load_ok(dir, false), *gg = load_ok(path, true);
    pt_model_config a = config_of(hf), b = config_of(gg);
    ck_assert_int_eq(a.arch, b.arch);
    ck_assert_int_eq(a.vocab_size, b.vocab_size);
    ck_assert_int_eq(a.hidden_size, b.hidden_size);
    ck_assert_int_eq(a.intermediate_size, b.intermediate_size);
    ck_assert_int_eq(a.num_hidden_layers, b.num_hidden_layers);
    ck_assert_int_eq(a.num_attention_heads, b.num_attention_heads);
    ck_assert_int_eq(a.num_key_value_heads, b.num_key_value_heads);
    ck_assert_int_eq(a.head_dim, b.head_dim);
    ck_assert_int_eq(a.max_position_embeddings, b.max_position_embeddings);
    ck_assert_msg(a.rms_norm_eps == b.rms_norm_eps, "eps %.17g vs %.17g", a.rms_norm_eps, b.rms_norm_eps);
    ck_assert(a.rope_theta == b.rope_theta);
    ck_assert_int_eq(a.rope_type, b.rope_type);
    ck_assert_int_eq(a.tie_word_embeddings, b.tie_word_embeddings);
    ck_assert_int_eq(a.attention_bias, b.attention_bias);
    ck_assert_int_eq(a.qk_norm, b.qk_norm);
    ck_assert_ptr_null(pt_model_tokenizer(gg)); /* the file has no tokenizer.ggml.* */
    ck_assert_str_eq(pt_model_source_dir(gg), path);
    assert_same_weights(hf, gg);
    double d = logits_diff(hf, gg, a.vocab_size);
    ck_assert_msg(d <= tol, "%s: logits differ by %g (tolerance %g)", name, d, tol);
    pt_model_free(hf);
    pt_model_free(gg);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
    pt_free(dir);
}

START_TEST(test_llama_gqa_tied)
{
    check_reference("llama_tied_gqa", 0.0);
}
END_TEST

START_TEST(test_qwen2_bias_untied)
{
    check_reference("qwen2_bias_untied", 0.0);
}
END_TEST

START_TEST(test_qwen3_qk_norm)
{
    check_reference("qwen3_qknorm", 0.0);
}
END_TEST

/* llama3 scaling comes back from rope_freqs.weight: the recovered
 * parameters give the same per-frequency factors. */
START_TEST(test_llama3_rope_from_freqs)
{
    check_reference("llama3_rope_scaling", 1e-5);
}
END_TEST

/* rope_freqs.weight of a file, opened, for pt__gguf_rope_from_freqs. */
static int rope_fit(pt_model_config *c, const float *r, int n, const char *tmp)
{
    char *path = pt__path_join(tmp, "rope.gguf");
    pt_gguf_writer *w = NULL;
    ck_assert_ok(pt__gguf_writer_new(&w));
    uint64_t ne = (uint64_t)n;
    ck_assert_ok(pt__gguf_add_tensor_f32(w, "rope_freqs.weight", 1, &ne, PT_GGML_F32, r));
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, path));
    int st = pt__gguf_rope_from_freqs(c, g, pt__gguf_find_tensor(g, "rope_freqs.weight"), path);
    pt__gguf_close(g);
    pt_free(path);
    return st;
}

/* Llama 3.1's real scaling (head_dim 128, theta 500000, factor 8, low 1,
 * high 4, original 8192: 64 factors, many of them blended) comes back as
 * exactly those numbers; factors no llama3 parameters give are refused. */
START_TEST(test_llama31_rope_recovered)
{
    char *tmp = pt_test_tmpdir("pt_gguf_rope_");
    pt_model_config c;
    pt_model_config_init(&c);
    c.head_dim = 128;
    c.rope_theta = 500000.0;
    c.rope_type = PT_ROPE_LLAMA3;
    c.rope_factor = 8.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.rope_original_max_position_embeddings = 8192;
    float *r = gb_rope_freqs(&c);
    int blended = 0;
    for (int j = 0; j < 64; j++)
        blended += r[j] != 1.0f && r[j] != 8.0f;
    ck_assert_int_ge(blended, 2);
    pt_model_config d;
    pt_model_config_init(&d);
    d.head_dim = 128;
    d.rope_theta = 500000.0;
    ck_assert_ok(rope_fit(&d, r, 64, tmp));
    ck_assert_int_eq(d.rope_type, PT_ROPE_LLAMA3);
    ck_assert(d.rope_factor == 8.0);
    ck_assert_msg(d.rope_low_freq_factor == 1.0, "low %.17g", d.rope_low_freq_factor);
    ck_assert_msg(d.rope_high_freq_factor == 4.0, "high %.17g", d.rope_high_freq_factor);
    ck_assert_int_eq(d.rope_original_max_position_embeddings, 8192);
    /* all ones: no scaling */
    for (int j = 0; j < 64; j++)
        r[j] = 1.0f;
    pt_model_config_init(&d);
    d.head_dim = 128;
    ck_assert_ok(rope_fit(&d, r, 64, tmp));
    ck_assert_int_eq(d.rope_type, PT_ROPE_DEFAULT);
    /* rising and falling again: not llama3 */
    for (int j = 0; j < 64; j++)
        r[j] = 1.0f + (float)(j % 7);
    pt_model_config_init(&d);
    d.head_dim = 128;
    ck_assert_status(rope_fit(&d, r, 64, tmp), PT_EUNSUPPORTED, "not those of llama3 rope scaling");
    /* the wrong length */
    pt_model_config_init(&d);
    d.head_dim = 64;
    ck_assert_status(rope_fit(&d, r, 64, tmp), PT_ESHAPE, "rope_freqs.weight");
    free(r);
    pt_test_rm_rf(tmp);
    free(tmp);
}
END_TEST

/* The GGUF permutation is really applied: a file whose Q/K were not
 * permuted gives other weights (so the exact match above is not trivial). */
START_TEST(test_permutation_matters)
{
    char *dir = ref_dir("llama_tied_gqa");
    pt_model *hf = load_ok(dir, false);
    const pt_tensor_ref *q = pt__model_find_tensor(hf, "model.layers.0.self_attn.q_proj.weight");
    float *p = malloc(q->numel * sizeof(float)), *back = malloc(q->numel * sizeof(float));
    pt__gguf_permute_rows(p, q->data, q->shape[0], q->shape[1], 4);
    ck_assert(memcmp(p, q->data, q->numel * sizeof(float)) != 0);
    pt__gguf_unpermute_rows(back, p, q->shape[0], q->shape[1], 4);
    ck_assert(memcmp(back, q->data, q->numel * sizeof(float)) == 0);
    free(p);
    free(back);
    pt_model_free(hf);
    pt_free(dir);
}
END_TEST

/* BF16 tensors load as the BF16 rounding of the originals. */
START_TEST(test_bf16_file)
{
    char *tmp = pt_test_tmpdir("pt_gguf_imp_");
    char *path = pt__path_join(tmp, "m.gguf"), *dir = ref_dir("qwen2_bias_untied");
    write_ref_gguf(path, "qwen2_bias_untied", GB_BF16);
    pt_model *hf = load_ok(dir, false), *gg = load_ok(path, false);
    const pt_tensor_ref *a = pt__model_find_tensor(hf, "model.layers.1.mlp.down_proj.weight");
    const pt_tensor_ref *b = pt__model_find_tensor(gg, "model.layers.1.mlp.down_proj.weight");
    int differ = 0;
    for (size_t i = 0; i < a->numel; i++) {
        uint32_t u;
        memcpy(&u, &a->data[i], 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        float want;
        memcpy(&want, &u, 4);
        ck_assert_msg(b->data[i] == want, "element %zu: %g, want %g", i, b->data[i], want);
        differ += want != a->data[i];
    }
    ck_assert_int_gt(differ, 0);
    {
        pt_model_dir_info info;
        pt_model_dir_info_init(&info);
        ck_assert_ok(pt_model_dir_inspect(&info, path));
        ck_assert_int_eq(info.gguf_version, 3);
        ck_assert(!info.quantised);
        ck_assert_int_eq(info.weights_status, PT_OK);
        ck_assert_int_eq(info.num_dtypes, 2);
        ck_assert_uint_eq(info.num_tensors, pt_model_tensor_count(hf));
    }
    pt_model_free(hf);
    pt_model_free(gg);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
    pt_free(dir);
}
END_TEST

/* ---- malformed files ---------------------------------------------------------- */

static void expect_fail(const char *name, unsigned flags, int status, const char *needle)
{
    char *tmp = pt_test_tmpdir("pt_gguf_imp_");
    char *path = pt__path_join(tmp, "bad.gguf");
    write_ref_gguf(path, name, flags);
    pt_model *m = NULL;
    ck_assert_status(pt_model_load_dir(&m, path, NULL), status, needle);
    ck_assert_ptr_null(m);
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    int st = pt_model_dir_inspect(&info, path);
    /* inspection fails on the same metadata, or describes the same tensor problem */
    if (st == PT_OK) {
        ck_assert_int_eq(info.weights_status, status);
        ck_assert_msg(strstr(info.weights_problem, needle) != NULL, "%s", info.weights_problem);
    } else {
        ck_assert_int_eq(st, status);
    }
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
}

START_TEST(test_malformed_models)
{
    expect_fail("llama_tied_gqa", GB_NO_BLOCK_COUNT, PT_EFORMAT, "llama.block_count");
    expect_fail("llama_tied_gqa", GB_BAD_HEADS, PT_EFORMAT, "head_count_kv");
    expect_fail("llama_tied_gqa", GB_SKIP_TENSOR, PT_ENOTFOUND, "blk.1.ffn_up.weight");
    expect_fail("llama_tied_gqa", GB_BAD_SHAPE, PT_ESHAPE, "blk.0.ffn_down.weight");
    expect_fail("qwen2_bias_untied", GB_EXTRA, PT_EFORMAT, "blk.0.attn_extra.weight");
    expect_fail("llama_tied_gqa", GB_QUANT, PT_EUNSUPPORTED, "blk.0.attn_q.weight' has type IQ4_NL");
    expect_fail("llama_tied_gqa", GB_QUANT, PT_EUNSUPPORTED, "which this library does not read");
}
END_TEST

/* A quantised file is still described (info), as quantised. */
START_TEST(test_inspect_quantised)
{
    char *tmp = pt_test_tmpdir("pt_gguf_imp_");
    char *path = pt__path_join(tmp, "q.gguf");
    write_ref_gguf(path, "llama_tied_gqa", GB_QUANT);
    pt_model_dir_info info;
    pt_model_dir_info_init(&info);
    ck_assert_ok(pt_model_dir_inspect(&info, path));
    ck_assert(info.quantised);
    ck_assert_int_eq(info.config.arch, PT_ARCH_LLAMA);
    ck_assert_int_eq(info.config.hidden_size, 32);
    ck_assert_int_eq(info.config.num_key_value_heads, 2);
    ck_assert(info.config.tie_word_embeddings);
    ck_assert_int_eq(info.num_files, 1);
    bool iq4 = false;
    for (int i = 0; i < info.num_dtypes; i++)
        iq4 = iq4 || (strcmp(info.dtypes[i].name, "IQ4_NL") == 0 && info.dtypes[i].tensors == 1);
    ck_assert(iq4);
    ck_assert_int_eq(info.weights_status, PT_EUNSUPPORTED);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
}
END_TEST

/* Metadata that disagrees with itself, one key at a time. */
static void meta_fail(void (*edit)(pt_gguf_writer *), int status, const char *needle)
{
    char *tmp = pt_test_tmpdir("pt_gguf_imp_");
    char *path = pt__path_join(tmp, "bad.gguf"), *dir = ref_dir("llama_tied_gqa");
    pt_model *m = load_ok(dir, false);
    gb_bufs b = { 0 };
    pt_gguf_writer *w = gb_model_writer(m, &b, 0);
    edit(w);
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    gb_free(&b);
    pt_model_free(m);
    pt_model *out = NULL;
    ck_assert_status(pt_model_load_dir(&out, path, NULL), status, needle);
    ck_assert_ptr_null(out);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
    pt_free(dir);
}

static const char *const k_small_tokens[] = { "a", "b", "ab", "c" };

static void edit_token_count(pt_gguf_writer *w)
{
    /* 4 tokens for a vocabulary of 61 */
    ck_assert_ok(pt__gguf_set_str(w, "tokenizer.ggml.model", "gpt2"));
    ck_assert_ok(pt__gguf_set_arr_str(w, "tokenizer.ggml.tokens", k_small_tokens, NULL, 4));
}

/* 61 tokens, "t0" .. "t59" and "t1t2", plus the given merges. */
static void small_vocab(pt_gguf_writer *w, const char *pre, const char *const *merges, size_t nm)
{
    char *toks[61];
    for (int i = 0; i < 61; i++) {
        toks[i] = malloc(8);
        snprintf(toks[i], 8, i == 60 ? "t1t2" : "t%d", i);
    }
    ck_assert_ok(pt__gguf_set_str(w, "tokenizer.ggml.model", "gpt2"));
    ck_assert_ok(pt__gguf_set_str(w, "tokenizer.ggml.pre", pre));
    ck_assert_ok(pt__gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, 61));
    ck_assert_ok(pt__gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, nm));
    for (int i = 0; i < 61; i++)
        free(toks[i]);
}

static void edit_bad_merge(pt_gguf_writer *w)
{
    static const char *const merges[] = { "t1 t2", "t1 zz" };
    small_vocab(w, "gpt-2", merges, 2);
}

static void edit_merge_result(pt_gguf_writer *w)
{
    static const char *const merges[] = { "t2 t1" }; /* "t2t1" is no token */
    small_vocab(w, "gpt-2", merges, 1);
}

static void edit_unknown_pre(pt_gguf_writer *w)
{
    static const char *const merges[] = { "t1 t2" };
    small_vocab(w, "no-such-pre", merges, 1);
}

START_TEST(test_malformed_metadata)
{
    meta_fail(edit_token_count, PT_EFORMAT, "tokenizer.ggml.tokens has 4 entries");
    meta_fail(edit_bad_merge, PT_EFORMAT, "tokenizer.ggml.merges[1] 't1 zz'");
    meta_fail(edit_merge_result, PT_EFORMAT, "the merged token is not in tokenizer.ggml.tokens");
    /* an unknown pre-tokenizer is a warning: the model loads without a tokenizer */
    char *tmp = pt_test_tmpdir("pt_gguf_imp_");
    char *path = pt__path_join(tmp, "pre.gguf"), *dir = ref_dir("llama_tied_gqa");
    pt_model *m = load_ok(dir, false);
    gb_bufs b = { 0 };
    pt_gguf_writer *w = gb_model_writer(m, &b, 0);
    edit_unknown_pre(w);
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    gb_free(&b);
    pt_model *g = load_ok(path, true);
    ck_assert_ptr_null(pt_model_tokenizer(g));
    assert_same_weights(m, g);
    /* and the internal call names it */
    pt_gguf *gf = NULL;
    ck_assert_ok(pt__gguf_open(&gf, path));
    char *tj = NULL, *tc = NULL;
    ck_assert_status(pt__tok_gguf_texts(&tj, &tc, gf, path, 128), PT_EUNSUPPORTED, "no-such-pre");
    pt__gguf_close(gf);
    pt_model_free(g);
    pt_model_free(m);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
    pt_free(dir);
}
END_TEST

/* Not a GGUF file, or a truncated one. */
START_TEST(test_not_gguf)
{
    char *tmp = pt_test_tmpdir("pt_gguf_imp_");
    char *path = pt__path_join(tmp, "x.gguf");
    ck_assert_ok(pt__write_file_atomic(path, "GGML....", 8));
    pt_model *m = NULL;
    ck_assert_status(pt_model_load_dir(&m, path, NULL), PT_ENOTFOUND,
                     "not a directory (and not a GGUF file: no GGUF magic)");
    ck_assert_ok(pt__write_file_atomic(path, "GGUF\x03\0\0\0", 8));
    int st = pt_model_load_dir(&m, path, NULL);
    ck_assert_msg(st == PT_EFORMAT || st == PT_ERANGE, "%s", pt_status_name(st));
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
}
END_TEST

/* ---- tokenizers ---------------------------------------------------------------- */

/* Whether the text holds an added token of the original with lstrip or
 * rstrip (GGUF has no field for them, so these vectors cannot match). */
static bool uses_strip_token(const gb_tok *t, const char *text)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(t->json, "added_tokens")) {
        bool strip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lstrip")) ||
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "rstrip"));
        if (strip && strstr(text, cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring))
            return true;
    }
    return false;
}

/* Every vector of file: ids and decoded text; returns the number checked. */
static int check_vectors(const pt_tokenizer *tok, const gb_tok *t, const char *file, int *skipped,
                         int *nul)
{
    char *text = NULL;
    size_t len = 0;
    if (pt__read_file(&text, &len, file, (size_t)1 << 26) != PT_OK) {
        pt_clear_error();
        return 0;
    }
    int checked = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\\u0000")) {
            (*nul)++; /* cJSON strings stop at NUL */
            continue;
        }
        cJSON *v = cJSON_Parse(line);
        ck_assert_ptr_nonnull(v);
        const char *s = cJSON_GetObjectItemCaseSensitive(v, "text")->valuestring;
        if (uses_strip_token(t, s)) {
            (*skipped)++;
            cJSON_Delete(v);
            continue;
        }
        int n_ref = 0;
        int32_t *ref = pt_test_json_ids(cJSON_GetObjectItemCaseSensitive(v, "ids"), &n_ref);
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "add_special_tokens"));
        int32_t *ids = NULL;
        size_t n = 0;
        ck_assert_ok(pt_tokenizer_encode(&ids, &n, tok, s, strlen(s), special ? PT_TOK_ADD_SPECIAL : 0));
        ck_assert_msg(n == (size_t)n_ref && (n == 0 || memcmp(ids, ref, n * 4) == 0),
                      "%s: ids of '%s' differ (%zu vs %d)", file, s, n, n_ref);
        char *dec = NULL;
        ck_assert_ok(pt_tokenizer_decode(&dec, NULL, tok, ref, (size_t)n_ref, 0));
        ck_assert_str_eq(dec, cJSON_GetObjectItemCaseSensitive(v, "decoded")->valuestring);
        pt_free(dec);
        pt_free(ids);
        free(ref);
        cJSON_Delete(v);
        checked++;
    }
    pt_free(text);
    return checked;
}

/* The tokenizer of dir through a vocabulary-only GGUF file. */
static pt_tokenizer *tokenizer_via_gguf(const gb_tok *t, const char *pre, const char *tmp,
                                        char **json_out)
{
    char *path = pt__path_join(tmp, "vocab.gguf");
    pt_gguf_writer *w = NULL;
    ck_assert_ok(pt__gguf_writer_new(&w));
    ck_assert_ok(pt__gguf_set_str(w, "general.architecture", "llama"));
    gb_tok_meta(w, t, pre);
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    pt_gguf *g = NULL;
    ck_assert_ok(pt__gguf_open(&g, path));
    char *tj = NULL, *tc = NULL;
    ck_assert_ok(pt__tok_gguf_texts(&tj, &tc, g, path, 4096));
    pt__gguf_close(g);
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_load_memory_config(&tok, tj, strlen(tj), tc, strlen(tc)));
    if (json_out)
        *json_out = tj;
    else
        pt_free(tj);
    pt_free(tc);
    pt_free(path);
    return tok;
}

static void check_tokenizer(const char *rel, const char *pre, int min_checked)
{
    const char *data = pt_test_shared_data(rel);
    if (!data)
        return;
    char *dir = pt__path_join(data, rel);
    gb_tok t;
    if (!gb_tok_load(&t, dir)) {
        fprintf(stderr, "SKIP %s: no tokenizer.json in %s\n", rel, dir);
        pt_free(dir);
        return;
    }
    char *tmp = pt_test_tmpdir("pt_gguf_tok_");
    pt_tokenizer *tok = tokenizer_via_gguf(&t, pre, tmp, NULL);
    ck_assert_int_eq(pt_tokenizer_vocab_size(tok), (int32_t)t.n);
    if (t.bos >= 0)
        ck_assert_int_eq(pt_tokenizer_bos_id(tok), t.bos);
    if (t.eos >= 0)
        ck_assert_int_eq(pt_tokenizer_eos_id(tok), t.eos);
    if (t.chat)
        ck_assert_str_eq(pt_tokenizer_chat_template(tok, NULL), t.chat);
    int skipped = 0, checked = 0, nul = 0;
    static const char *const files[] = { "vectors.jsonl", "vectors-multilingual.jsonl" };
    for (int i = 0; i < 2; i++) {
        char *f = pt__path_join(dir, files[i]);
        checked += check_vectors(tok, &t, f, &skipped, &nul);
        pt_free(f);
    }
    fprintf(stderr, "%s: %d vectors match through GGUF (skipped: %d with strip flags GGUF "
            "cannot hold, %d with NUL)\n", rel, checked, skipped, nul);
    ck_assert_int_ge(checked, min_checked);
    pt_tokenizer_free(tok);
    gb_tok_free(&t);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(dir);
}

START_TEST(test_tok_gpt2)
{
    check_tokenizer("tokenizers/gpt2", "gpt-2", 56 + 148);
}
END_TEST

START_TEST(test_tok_llama3)
{
    check_tokenizer("tokenizers/llama3", "llama-bpe", 56 + 148);
}
END_TEST

START_TEST(test_tok_qwen3)
{
    check_tokenizer("tokenizers/qwen3", "qwen2", 56 + 148);
}
END_TEST

START_TEST(test_tok_llama_spm)
{
    check_tokenizer("tokenizers/llama-spm", "default", 190);
}
END_TEST

/* The SentencePiece merges derived from the scores are exactly the file's. */
START_TEST(test_spm_merges_derived)
{
    const char *data = pt_test_shared_data("spm merges");
    if (!data)
        return;
    static const char *const rels[] = { "tokenizers/llama-spm", "models/stories260K" };
    for (int k = 0; k < 2; k++) {
        char *dir = pt__path_join(data, rels[k]);
        gb_tok t;
        ck_assert(gb_tok_load(&t, dir));
        char *tmp = pt_test_tmpdir("pt_gguf_tok_"), *json = NULL;
        pt_tokenizer *tok = tokenizer_via_gguf(&t, "default", tmp, &json);
        cJSON *mine = cJSON_Parse(json);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(mine, "model"), "merges");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(t.json, "model"), "merges");
        ck_assert_int_eq(cJSON_GetArraySize(a), cJSON_GetArraySize(b));
        ck_assert_msg(cJSON_Compare(a, b, true), "%s: merges differ", rels[k]);
        cJSON_Delete(mine);
        pt_free(json);
        pt_tokenizer_free(tok);
        gb_tok_free(&t);
        pt_test_rm_rf(tmp);
        free(tmp);
        pt_free(dir);
    }
}
END_TEST

/* The tokenizer of rel through the exporter: a tiny llama with its
 * vocabulary saved with the tokenizer files, loaded, pt_model_export_gguf,
 * loaded back from the GGUF file. */
static void check_exported_tokenizer(const char *rel, int spm_scores, int min_checked)
{
    const char *data = pt_test_shared_data(rel);
    if (!data)
        return;
    char *dir = pt__path_join(data, rel);
    gb_tok t;
    if (!gb_tok_load(&t, dir)) {
        fprintf(stderr, "SKIP %s: no tokenizer.json in %s\n", rel, dir);
        pt_free(dir);
        return;
    }
    char *tmp = pt_test_tmpdir("pt_gguf_exp_");
    char *hf = pt__path_join(tmp, "hf"), *path = pt__path_join(tmp, "m.gguf");
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, (int)t.n);
    c.num_hidden_layers = 1;
    c.tie_word_embeddings = true;
    c.bos_token_id = t.bos;
    c.eos_token_id = t.eos;
    pt_model *m = NULL, *src = NULL, *g = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 7));
    pt_model_save_options so;
    pt_model_save_options_init(&so);
    so.tokenizer_dir = dir;
    ck_assert_ok(pt_model_save_dir(m, hf, &so));
    src = load_ok(hf, true);
    pt_gguf_export_options eo;
    pt_gguf_export_options_init(&eo);
    eo.spm_scores = spm_scores;
    ck_assert_ok(pt_model_export_gguf(src, path, &eo));
    g = load_ok(path, true);
    assert_same_weights(src, g);
    const pt_tokenizer *tok = pt_model_tokenizer(g);
    ck_assert_ptr_nonnull(tok);
    int skipped = 0, checked = 0, nul = 0;
    static const char *const files[] = { "vectors.jsonl", "vectors-multilingual.jsonl" };
    for (int i = 0; i < 2; i++) {
        char *f = pt__path_join(dir, files[i]);
        checked += check_vectors(tok, &t, f, &skipped, &nul);
        pt_free(f);
    }
    fprintf(stderr, "%s: %d vectors match through pt_model_export_gguf (skipped: %d strip, %d NUL)\n",
            rel, checked, skipped, nul);
    ck_assert_int_ge(checked, min_checked);
    pt_model_free(g);
    pt_model_free(src);
    pt_model_free(m);
    gb_tok_free(&t);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(hf);
    pt_free(path);
    pt_free(dir);
}

START_TEST(test_export_round_trip_tokenizers)
{
    check_exported_tokenizer("tokenizers/gpt2", PT_GGUF_SPM_SCORES_CONVERTER, 204);
    check_exported_tokenizer("tokenizers/llama3", PT_GGUF_SPM_SCORES_CONVERTER, 204);
    check_exported_tokenizer("tokenizers/qwen3", PT_GGUF_SPM_SCORES_CONVERTER, 204);
    /* llama-spm only with spm_scores "merges": with the converter's -1000
     * for every score (LlamaHfVocab's placeholder for a tokenizer.json
     * source) the merge order of its whitespace pieces ("\u2581\u2581", ...)
     * is lost and " Hello world" encodes differently. */
    check_exported_tokenizer("tokenizers/llama-spm", PT_GGUF_SPM_SCORES_MERGES, 190);
}
END_TEST

/* ---- the real model: GGUF -> load -> save_dir -> load_dir --------------------- */

/* ta and tb encode (with special tokens) and decode a few texts alike. */
static void same_encodings(const pt_tokenizer *ta, const pt_tokenizer *tb)
{
    static const char *const texts[] = { "Once upon a time, there was a little girl.",
                                         "  Lily\tsaw 3 dogs\n\nand said \"hi!\" \xf0\x9f\xa6\x99", "" };
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_nonnull(tb);
    for (int i = 0; i < 3; i++) {
        int32_t *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        ck_assert_ok(pt_tokenizer_encode(&x, &nx, ta, texts[i], strlen(texts[i]), PT_TOK_ADD_SPECIAL));
        ck_assert_ok(pt_tokenizer_encode(&y, &ny, tb, texts[i], strlen(texts[i]), PT_TOK_ADD_SPECIAL));
        ck_assert_uint_eq(nx, ny);
        ck_assert(nx == 0 || memcmp(x, y, nx * 4) == 0);
        char *da = NULL, *db = NULL;
        ck_assert_ok(pt_tokenizer_decode(&da, NULL, ta, x, nx, 0));
        ck_assert_ok(pt_tokenizer_decode(&db, NULL, tb, y, ny, 0));
        ck_assert_str_eq(da, db);
        pt_free(da);
        pt_free(db);
        pt_free(x);
        pt_free(y);
    }
}

START_TEST(test_stories_round_trip)
{
    const char *data = pt_test_shared_data("stories260K GGUF");
    if (!data)
        return;
    char *dir = pt__path_join(data, "models/stories260K");
    char *tmp = pt_test_tmpdir("pt_gguf_rt_");
    char *path = pt__path_join(tmp, "stories.gguf"), *out = pt__path_join(tmp, "hf");
    pt_model *hf = load_ok(dir, true);
    gb_tok t;
    ck_assert(gb_tok_load(&t, dir));
    gb_bufs b = { 0 };
    pt_gguf_writer *w = gb_model_writer(hf, &b, 0);
    gb_tok_meta(w, &t, "default");
    ck_assert_ok(pt__gguf_write(w, path));
    pt__gguf_writer_free(w);
    gb_free(&b);
    pt_model *gg = load_ok(path, true);
    assert_same_weights(hf, gg);
    ck_assert(logits_diff(hf, gg, 512) == 0.0);
    const pt_tokenizer *tok = pt_model_tokenizer(gg);
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_eq(pt_tokenizer_bos_id(tok), 1);
    ck_assert_int_eq(pt_tokenizer_eos_id(tok), 2);
    ck_assert_int_eq(pt_tokenizer_add_bos(tok), 1);
    ck_assert_ok(pt_model_save_dir(gg, out, NULL));
    ck_assert(pt__dir_has_file(out, "tokenizer.json"));
    ck_assert(pt__dir_has_file(out, "tokenizer_config.json"));
    pt_model *back = load_ok(out, true);
    assert_same_weights(hf, back);
    pt_model_config c1 = config_of(hf), c2 = config_of(back);
    ck_assert(memcmp(&c1, &c2, sizeof c1) == 0);
    same_encodings(pt_model_tokenizer(hf), pt_model_tokenizer(back));
    /* and through the exporter */
    char *path2 = pt__path_join(tmp, "exported.gguf");
    ck_assert_ok(pt_model_export_gguf(hf, path2, NULL));
    pt_model *ex = load_ok(path2, true);
    assert_same_weights(hf, ex);
    same_encodings(pt_model_tokenizer(hf), pt_model_tokenizer(ex));
    pt_model_free(ex);
    pt_free(path2);
    pt_model_free(back);
    pt_model_free(gg);
    pt_model_free(hf);
    gb_tok_free(&t);
    pt_test_rm_rf(tmp);
    free(tmp);
    pt_free(path);
    pt_free(out);
    pt_free(dir);
}
END_TEST

static Suite *gguf_import_suite(void)
{
    Suite *s = suite_create("gguf_import");
    TCase *tm = tcase_create("models");
    tcase_set_timeout(tm, 120);
    tcase_add_test(tm, test_llama_gqa_tied);
    tcase_add_test(tm, test_qwen2_bias_untied);
    tcase_add_test(tm, test_qwen3_qk_norm);
    tcase_add_test(tm, test_llama3_rope_from_freqs);
    tcase_add_test(tm, test_llama31_rope_recovered);
    tcase_add_test(tm, test_permutation_matters);
    tcase_add_test(tm, test_bf16_file);
    tcase_add_test(tm, test_malformed_models);
    tcase_add_test(tm, test_inspect_quantised);
    tcase_add_test(tm, test_malformed_metadata);
    tcase_add_test(tm, test_not_gguf);
    suite_add_tcase(s, tm);
    TCase *tt = tcase_create("tokenizers");
    tcase_set_timeout(tt, 300);
    tcase_add_test(tt, test_tok_gpt2);
    tcase_add_test(tt, test_tok_llama3);
    tcase_add_test(tt, test_tok_qwen3);
    tcase_add_test(tt, test_tok_llama_spm);
    tcase_add_test(tt, test_spm_merges_derived);
    tcase_add_test(tt, test_stories_round_trip);
    tcase_add_test(tt, test_export_round_trip_tokenizers);
    suite_add_tcase(s, tt);
    return s;
}

int main(void)
{
    return pt_test_run(gguf_import_suite());
}
