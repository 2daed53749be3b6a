/* The versioned-struct rule of docs/api.md, for every public function that
 * takes a struct whose first field is `size_t size`, through libposttrain.so
 * as a host sees it:
 *   - a caller built against an older, smaller header passes a smaller size
 *     (cut before the newest field, or earlier where that is observable):
 *     the call succeeds and gives exactly what the full struct with the
 *     missing fields at their defaults gives.  The fields beyond the cut
 *     hold non-default values, so reading them would show;
 *   - NULL options are the defaults;
 *   - size sizeof(T) + 8 and size 3 are PT_EINVAL, and the message names the
 *     function and the _init to call;
 *   - an output struct (stats, info) of a smaller size gets exactly its own
 *     bytes: the fields within are filled as in the full struct, the bytes
 *     beyond (0xA5 canaries) are untouched.
 * Everything runs on one thread, so results are compared bit for bit
 * (files written, such as GGUF exports, byte for byte). */
#include "testutil.h"
#include "testfs.h"

#include <math.h>
#include <stdalign.h>
#include <stddef.h>

#define CANARY 0xA5

/* ---- helpers ------------------------------------------------------------------- */

static void expect_einval(int st, const char *call, const char *func, const char *init,
                          const char *why)
{
    ck_assert_msg(st == PT_EINVAL, "%s with a %s size returned %s, expected PT_EINVAL (%s)", call, why,
                  pt_status_name(st), pt_last_error());
    ck_assert_msg(strstr(pt_last_error(), func) != NULL, "%s (%s size): message '%s' does not name %s",
                  call, why, pt_last_error(), func);
    ck_assert_msg(strstr(pt_last_error(), init) != NULL, "%s (%s size): message '%s' does not name %s",
                  call, why, pt_last_error(), init);
}

/* `call` (which passes `var`) with var.size too large, then too small. */
#define BAD_SIZES(var, call, func, init)                                                      \
    do {                                                                                      \
        size_t keep_ = (var).size;                                                            \
        (var).size = sizeof(var) + 8;                                                         \
        expect_einval((call), #call, func, init, "too large");                                \
        (var).size = 3;                                                                       \
        expect_einval((call), #call, func, init, "too small");                                \
        (var).size = keep_;                                                                   \
    } while (0)

/* An output struct of an older header: only `size` bytes are its own, the
 * rest are canaries. */
static void cut_out(void *p, size_t size, size_t full)
{
    memset((char *)p + size, CANARY, full - size);
    memcpy(p, &size, sizeof size);
}

static void assert_canaries(const void *p, size_t size, size_t full, const char *what)
{
    const unsigned char *b = p;
    size_t have;
    memcpy(&have, p, sizeof have);
    ck_assert_msg(have == size, "%s: the caller's size %zu became %zu", what, size, have);
    for (size_t i = size; i < full; i++)
        ck_assert_msg(b[i] == CANARY, "%s: byte %zu beyond the caller's size %zu was written", what, i,
                      size);
}

/* Field f of a and b equal bit for bit, when f lies within lim bytes. */
#define CMP_FIELD(T, a, b, lim, f)                                                            \
    if (offsetof(T, f) + sizeof((a).f) <= (size_t)(lim))                                      \
        ck_assert_msg(!memcmp(&(a).f, &(b).f, sizeof((a).f)),                                 \
                      #T "." #f " differs from the full struct's (size %zu)", (size_t)(lim));

#define CONFIG_FIELDS(X, ...)                                                                 \
    X(__VA_ARGS__, arch) X(__VA_ARGS__, vocab_size) X(__VA_ARGS__, hidden_size)                \
    X(__VA_ARGS__, intermediate_size) X(__VA_ARGS__, num_hidden_layers)                        \
    X(__VA_ARGS__, num_attention_heads) X(__VA_ARGS__, num_key_value_heads)                    \
    X(__VA_ARGS__, head_dim) X(__VA_ARGS__, max_position_embeddings)                           \
    X(__VA_ARGS__, rms_norm_eps) X(__VA_ARGS__, rope_theta) X(__VA_ARGS__, rope_type)          \
    X(__VA_ARGS__, rope_factor) X(__VA_ARGS__, rope_low_freq_factor)                           \
    X(__VA_ARGS__, rope_high_freq_factor)                                                     \
    X(__VA_ARGS__, rope_original_max_position_embeddings)                                     \
    X(__VA_ARGS__, tie_word_embeddings) X(__VA_ARGS__, attention_bias)                         \
    X(__VA_ARGS__, qk_norm) X(__VA_ARGS__, sliding_window) X(__VA_ARGS__, initializer_range)   \
    X(__VA_ARGS__, bos_token_id) X(__VA_ARGS__, eos_token_id) X(__VA_ARGS__, pad_token_id)

#define STEP_FIELDS(X, ...)                                                                   \
    X(__VA_ARGS__, grad_norm) X(__VA_ARGS__, lr) X(__VA_ARGS__, step) X(__VA_ARGS__, skipped)  \
    X(__VA_ARGS__, skipped_total)

#define SFT_FIELDS(X, ...)                                                                    \
    X(__VA_ARGS__, loss) X(__VA_ARGS__, tokens) X(__VA_ARGS__, grad_norm) X(__VA_ARGS__, lr)   \
    X(__VA_ARGS__, step) X(__VA_ARGS__, skipped) X(__VA_ARGS__, skipped_total)

#define DATASET_STATS_FIELDS(X, ...)                                                          \
    X(__VA_ARGS__, rows) X(__VA_ARGS__, skipped_rows) X(__VA_ARGS__, empty_rows)               \
    X(__VA_ARGS__, truncated_rows) X(__VA_ARGS__, truncated_tokens)                            \
    X(__VA_ARGS__, train_examples) X(__VA_ARGS__, eval_examples) X(__VA_ARGS__, train_tokens)  \
    X(__VA_ARGS__, train_target_tokens) X(__VA_ARGS__, epoch) X(__VA_ARGS__, cursor)

/* train_seconds and tokens_per_second are wall time: never compared. */
#define GRPO_STATS_FIELDS(X, ...)                                                             \
    X(__VA_ARGS__, loss) X(__VA_ARGS__, reward) X(__VA_ARGS__, reward_std)                     \
    X(__VA_ARGS__, n_reward_funcs) X(__VA_ARGS__, reward_func_mean)                            \
    X(__VA_ARGS__, reward_func_std) X(__VA_ARGS__, frac_reward_zero_std) X(__VA_ARGS__, groups) \
    X(__VA_ARGS__, groups_dropped) X(__VA_ARGS__, kl) X(__VA_ARGS__, entropy)                  \
    X(__VA_ARGS__, clip_ratio_low) X(__VA_ARGS__, clip_ratio_high)                             \
    X(__VA_ARGS__, clip_ratio_region) X(__VA_ARGS__, completion_mean_length)                   \
    X(__VA_ARGS__, completion_min_length) X(__VA_ARGS__, completion_max_length)                \
    X(__VA_ARGS__, clipped_ratio) X(__VA_ARGS__, tokens) X(__VA_ARGS__, grad_norm)             \
    X(__VA_ARGS__, lr) X(__VA_ARGS__, step) X(__VA_ARGS__, skipped) X(__VA_ARGS__, skipped_total)    \
    X(__VA_ARGS__, samples_unscored) X(__VA_ARGS__, sampling_logp_difference_mean)              \
    X(__VA_ARGS__, sampling_logp_difference_max) X(__VA_ARGS__, importance_sampling_ratio_min)  \
    X(__VA_ARGS__, importance_sampling_ratio_mean) X(__VA_ARGS__, importance_sampling_ratio_max) \
    X(__VA_ARGS__, importance_sampling_corrected_fraction) X(__VA_ARGS__, cispo_clip_ratio)     \
    X(__VA_ARGS__, entropy_threshold) X(__VA_ARGS__, entropy_kept_fraction) X(__VA_ARGS__, segments)  \
    X(__VA_ARGS__, frac_zero_std_groups) X(__VA_ARGS__, vespo_phi_seq_mean)                    \
    X(__VA_ARGS__, entropy_measured) X(__VA_ARGS__, entropy_coef_next)

#define DIR_INFO_FIELDS(X, ...)                                                               \
    X(__VA_ARGS__, num_params) X(__VA_ARGS__, num_files) X(__VA_ARGS__, num_tensors)           \
    X(__VA_ARGS__, weight_bytes) X(__VA_ARGS__, num_dtypes) X(__VA_ARGS__, dtypes)             \
    X(__VA_ARGS__, sharded) X(__VA_ARGS__, has_tokenizer) X(__VA_ARGS__, has_generation_config) \
    X(__VA_ARGS__, weights_status) X(__VA_ARGS__, weights_problem) X(__VA_ARGS__, gguf_version)       \
    X(__VA_ARGS__, quantised) X(__VA_ARGS__, tokenizer_status) X(__VA_ARGS__, tokenizer_problem)

#define LORA_FIELDS(X, ...)                                                                   \
    X(__VA_ARGS__, rank) X(__VA_ARGS__, alpha) X(__VA_ARGS__, targets) X(__VA_ARGS__, dropout) \
    X(__VA_ARGS__, seed)

#define BATCH_FIELDS(X, ...)                                                                  \
    X(__VA_ARGS__, batch) X(__VA_ARGS__, seq) X(__VA_ARGS__, input_ids) X(__VA_ARGS__, targets) \
    X(__VA_ARGS__, positions) X(__VA_ARGS__, segments) X(__VA_ARGS__, temperature)

#define TENSOR_INFO_FIELDS(X, ...)                                                            \
    X(__VA_ARGS__, name) X(__VA_ARGS__, data) X(__VA_ARGS__, grad) X(__VA_ARGS__, ndim)        \
    X(__VA_ARGS__, shape) X(__VA_ARGS__, numel) X(__VA_ARGS__, trainable)                      \
    X(__VA_ARGS__, adapter) X(__VA_ARGS__, no_decay)

static void assert_same_config(const pt_model_config *a, const pt_model_config *b, size_t lim)
{
    CONFIG_FIELDS(CMP_FIELD, pt_model_config, *a, *b, lim)
}

/* Every tensor of a and b (base and adapters) equal bit for bit. */
static void assert_same_weights(const pt_model *a, const pt_model *b)
{
    size_t na = 0, nb = 0;
    na = pt_model_tensor_count(a);
    nb = pt_model_tensor_count(b);
    ck_assert_uint_eq(na, nb);
    for (size_t i = 0; i < na; i++) {
        pt_tensor_info ta = { .size = sizeof ta }, tb = { .size = sizeof tb };
        ck_assert_ok(pt_model_tensor_info(&ta, a, i));
        ck_assert_ok(pt_model_tensor_info(&tb, b, i));
        ck_assert_str_eq(ta.name, tb.name);
        ck_assert_uint_eq(ta.numel, tb.numel);
        ck_assert_msg(!memcmp(ta.data, tb.data, ta.numel * sizeof(float)), "tensor %s differs", ta.name);
    }
}

static bool same_weights(const pt_model *a, const pt_model *b)
{
    size_t n = 0;
    n = pt_model_tensor_count(a);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info ta = { .size = sizeof ta }, tb = { .size = sizeof tb };
        ck_assert_ok(pt_model_tensor_info(&ta, a, i));
        ck_assert_ok(pt_model_tensor_info(&tb, b, i));
        if (memcmp(ta.data, tb.data, ta.numel * sizeof(float)))
            return false;
    }
    return true;
}

static char *write_file(const char *dir, const char *name, const char *text)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    ck_assert_ptr_nonnull(path);
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/* The bytes of dir/name, or NULL when it does not exist. */
static char *read_all(const char *dir, const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static void assert_same_file(const char *da, const char *db, const char *name)
{
    size_t la = 0, lb = 0;
    char *a = read_all(da, name, &la), *b = read_all(db, name, &lb);
    ck_assert_msg(a && b, "%s missing in %s or %s", name, da, db);
    ck_assert_msg(la == lb && !memcmp(a, b, la), "%s differs between %s and %s", name, da, db);
    free(a);
    free(b);
}

static bool has_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- pt_model_config ---------------------------------------------------------------- */

#define V 37

static void tiny(pt_model_config *c)
{
    pt_test_tiny_config(c, PT_ARCH_LLAMA, V);
    c->tie_word_embeddings = true;
    c->initializer_range = 0.2;
}

START_TEST(test_config_inputs)
{
    pt_model_config full, old;
    tiny(&full);
    pt_model *mf, *mo;
    ck_assert_ok(pt_model_create(&mf, &full, 7));
    char *jf, *jo;
    ck_assert_ok(pt_model_config_to_json(&jf, &full));
    uint64_t pf = 0, po = 0;
    ck_assert_ok(pt_model_config_num_params(&pf, &full));

    /* A header without pad_token_id: its default is -1, not the 5 beyond. */
    old = full;
    old.size = offsetof(pt_model_config, pad_token_id);
    old.pad_token_id = 5;
    ck_assert_ok(pt_model_config_validate(&old));
    ck_assert_ok(pt_model_create(&mo, &old, 7));
    assert_same_weights(mf, mo);
    pt_model_config got;
    ck_assert_ok(pt_model_config_init(&got));
    ck_assert_ok(pt_model_get_config(&got, mo));
    ck_assert_int_eq(got.pad_token_id, -1);
    assert_same_config(&got, &full, sizeof full);
    pt_model_free(mo);
    ck_assert_ok(pt_model_config_to_json(&jo, &old));
    ck_assert_str_eq(jo, jf);
    pt_free(jo);
    ck_assert_ok(pt_model_config_num_params(&po, &old));
    ck_assert_uint_eq(po, pf);

    /* A header ending before initializer_range: the weights are drawn
     * with the default 0.02, not the 0.9 beyond. */
    pt_model_config ref = full;
    ref.initializer_range = 0.02;
    pt_model *mr;
    ck_assert_ok(pt_model_create(&mr, &ref, 7));
    ck_assert_msg(!same_weights(mr, mf), "initializer_range is not observable");
    old = full;
    old.size = offsetof(pt_model_config, initializer_range);
    old.initializer_range = 0.9;
    old.bos_token_id = 1000; /* beyond too: out of the vocabulary if it were read */
    ck_assert_ok(pt_model_config_validate(&old));
    ck_assert_ok(pt_model_create(&mo, &old, 7));
    assert_same_weights(mr, mo);
    pt_model_free(mo);
    pt_model_free(mr);
    ck_assert_ok(pt_model_config_to_json(&jo, &old));
    ck_assert_ptr_nonnull(strstr(jo, "\"initializer_range\": 0.02"));
    pt_free(jo);
    full.bos_token_id = 1000;
    ck_assert_status(pt_model_config_validate(&full), PT_ECONFIG, "bos_token_id");
    full.bos_token_id = -1;

    /* A header ending before tie_word_embeddings: untied by default. */
    ref = full;
    ref.tie_word_embeddings = false;
    uint64_t pu = 0;
    ck_assert_ok(pt_model_config_num_params(&pu, &ref));
    ck_assert_uint_ne(pu, pf);
    old = full;
    old.size = offsetof(pt_model_config, tie_word_embeddings);
    ck_assert_ok(pt_model_config_num_params(&po, &old));
    ck_assert_uint_eq(po, pu);

    BAD_SIZES(full, pt_model_config_validate(&full), "pt_model_config_validate", "pt_model_config_init");
    BAD_SIZES(full, pt_model_create(&mo, &full, 7), "pt_model_create", "pt_model_config_init");
    BAD_SIZES(full, pt_model_config_to_json(&jo, &full), "pt_model_config_to_json", "pt_model_config_init");
    BAD_SIZES(full, pt_model_config_num_params(&po, &full), "pt_model_config_num_params",
              "pt_model_config_init");
    pt_free(jf);
    pt_model_free(mf);
}
END_TEST

/* pt_model_config_from_json and pt_model_config_load fill an older, smaller
 * config as far as its size. */
START_TEST(test_config_outputs)
{
    pt_model_config src;
    tiny(&src);
    src.bos_token_id = 1;
    src.eos_token_id = 2;
    src.pad_token_id = 3;
    char *json;
    ck_assert_ok(pt_model_config_to_json(&json, &src));
    char *dir = pt_test_tmpdir("pt_sizes_cfg");
    char *path = write_file(dir, "config.json", json);
    pt_model_config full;
    ck_assert_ok(pt_model_config_init(&full));
    ck_assert_ok(pt_model_config_from_json(&full, json, strlen(json)));
    ck_assert_int_eq(full.pad_token_id, 3);
    const size_t cuts[] = { offsetof(pt_model_config, pad_token_id),
                            offsetof(pt_model_config, rope_type), sizeof(size_t) };
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        pt_model_config c;
        ck_assert_ok(pt_model_config_init(&c));
        cut_out(&c, cuts[k], sizeof c);
        ck_assert_ok(pt_model_config_from_json(&c, json, strlen(json)));
        assert_canaries(&c, cuts[k], sizeof c, "pt_model_config_from_json");
        assert_same_config(&c, &full, cuts[k]);
        ck_assert_ok(pt_model_config_init(&c));
        cut_out(&c, cuts[k], sizeof c);
        ck_assert_ok(pt_model_config_load(&c, dir));
        assert_canaries(&c, cuts[k], sizeof c, "pt_model_config_load");
        assert_same_config(&c, &full, cuts[k]);
    }
    BAD_SIZES(full, pt_model_config_from_json(&full, json, strlen(json)), "pt_model_config_from_json",
              "pt_model_config_init");
    pt_free(json);
    free(path);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* pt_model_config_load's size message names
 * pt_model_config_from_json (prefixed with the file), not itself. */
START_TEST(test_config_load_message)
{
    pt_model_config src;
    tiny(&src);
    char *json;
    ck_assert_ok(pt_model_config_to_json(&json, &src));
    char *dir = pt_test_tmpdir("pt_sizes_cfgl");
    free(write_file(dir, "config.json", json));
    pt_model_config c;
    ck_assert_ok(pt_model_config_init(&c));
    BAD_SIZES(c, pt_model_config_load(&c, dir), "pt_model_config_load", "pt_model_config_init");
    pt_free(json);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* pt_model_get_config assigns the whole struct
 * (*out = m->cfg) without reading out->size. */
START_TEST(test_get_config)
{
    pt_model_config cfg;
    tiny(&cfg);
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &cfg, 1));
    pt_model_config full, c;
    ck_assert_ok(pt_model_config_init(&full));
    ck_assert_ok(pt_model_get_config(&full, m));
    ck_assert_ok(pt_model_config_init(&c));
    const size_t cut = offsetof(pt_model_config, pad_token_id);
    cut_out(&c, cut, sizeof c);
    ck_assert_ok(pt_model_get_config(&c, m));
    assert_canaries(&c, cut, sizeof c, "pt_model_get_config");
    assert_same_config(&c, &full, cut);
    BAD_SIZES(c, pt_model_get_config(&c, m), "pt_model_get_config", "pt_model_config_init");
    pt_model_free(m);
}
END_TEST

/* pt_model_tensor_info / pt_model_find_tensor_info write
 * the whole pt_tensor_info (fill_tensor_info memsets sizeof *out) whatever
 * the caller's size; there is no pt_tensor_info_init to fill it with. */
START_TEST(test_tensor_info)
{
    pt_model_config cfg;
    tiny(&cfg);
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &cfg, 1));
    pt_tensor_info full, t;
    ck_assert_ok(pt_tensor_info_init(&full));
    ck_assert_ok(pt_model_tensor_info(&full, m, 1));
    const size_t cut = offsetof(pt_tensor_info, no_decay);
    cut_out(&t, cut, sizeof t);
    ck_assert_ok(pt_model_tensor_info(&t, m, 1));
    assert_canaries(&t, cut, sizeof t, "pt_model_tensor_info");
    TENSOR_INFO_FIELDS(CMP_FIELD, pt_tensor_info, t, full, cut)
    cut_out(&t, cut, sizeof t);
    ck_assert_ok(pt_model_find_tensor_info(&t, m, full.name));
    assert_canaries(&t, cut, sizeof t, "pt_model_find_tensor_info");
    TENSOR_INFO_FIELDS(CMP_FIELD, pt_tensor_info, t, full, cut)
    t.size = sizeof t;
    BAD_SIZES(t, pt_model_tensor_info(&t, m, 1), "pt_model_tensor_info", "_init");
    BAD_SIZES(t, pt_model_find_tensor_info(&t, m, full.name), "pt_model_find_tensor_info", "_init");
    pt_model_free(m);
}
END_TEST

/* ---- pt_batch: forward, forward_entropy, loss -------------------------------------- */

#define B 2
#define T 6
static const int32_t k_ids[B * T] = { 1, 5, 9, 2, 7, 3, 4, 4, 8, 11, 30, 6 };
static const int32_t k_tgt[B * T] = { 5, 9, 2, 7, 3, -1, 4, 8, 11, 30, 6, -1 };
static const int32_t k_pos[B * T] = { 3, 3, 3, 9, 9, 9, 0, 2, 4, 6, 8, 10 };
static const int32_t k_seg[B * T] = { 0, 0, 1, 1, 2, 2, 0, 1, 1, 1, 2, 2 };

static pt_batch full_batch(void)
{
    pt_batch b;
    ck_assert_ok(pt_batch_init(&b));
    b.batch = B;
    b.seq = T;
    b.input_ids = k_ids;
    b.targets = k_tgt;
    return b;
}

typedef struct {
    float lp[B * T], ent_lp[B * T], ent[B * T], loss;
} fwd_result;

static void run_forward(fwd_result *r, pt_context *ctx, const pt_batch *b)
{
    ck_assert_ok(pt_model_forward(ctx, b, r->lp, NULL));
    ck_assert_ok(pt_model_forward_entropy(ctx, b, r->ent_lp, r->ent));
    ck_assert_ok(pt_model_loss(ctx, b, NULL, false, &r->loss));
}

static void assert_same_fwd(const fwd_result *a, const fwd_result *b, const char *what)
{
    ck_assert_msg(!memcmp(a, b, sizeof *a), "%s: forward results differ", what);
}

START_TEST(test_batch)
{
    pt_model *m = pt_test_tiny_llama(V, 3);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    fwd_result ref, got, with;
    memset(&ref, 0, sizeof ref);
    memset(&got, 0, sizeof got);
    memset(&with, 0, sizeof with);
    pt_batch full = full_batch();
    run_forward(&ref, ctx, &full);

    /* Without temperature: the one beyond is not read (1). */
    pt_batch b = full;
    b.temperature = 0.5f;
    run_forward(&with, ctx, &b);
    ck_assert_msg(memcmp(&with, &ref, sizeof ref), "temperature is not observable");
    b.size = offsetof(pt_batch, temperature);
    run_forward(&got, ctx, &b);
    assert_same_fwd(&got, &ref, "batch without temperature");

    /* Without segments: the packing segments beyond are not read. */
    b = full;
    b.segments = k_seg;
    run_forward(&with, ctx, &b);
    ck_assert_msg(memcmp(&with, &ref, sizeof ref), "segments are not observable");
    b.size = offsetof(pt_batch, segments);
    b.temperature = 0.5f;
    run_forward(&got, ctx, &b);
    assert_same_fwd(&got, &ref, "batch without segments");

    /* Without positions (nor segments). */
    b = full;
    b.positions = k_pos;
    run_forward(&with, ctx, &b);
    ck_assert_msg(memcmp(&with, &ref, sizeof ref), "positions are not observable");
    b.size = offsetof(pt_batch, positions);
    b.segments = k_seg;
    run_forward(&got, ctx, &b);
    assert_same_fwd(&got, &ref, "batch without positions");

    /* Without targets: none (NULL), so no log-probabilities and loss 0. */
    pt_batch nt = full;
    nt.targets = NULL;
    run_forward(&ref, ctx, &nt);
    b = full;
    b.size = offsetof(pt_batch, targets);
    b.positions = k_pos;
    run_forward(&got, ctx, &b);
    assert_same_fwd(&got, &ref, "batch without targets");
    ck_assert_float_eq(got.loss, 0.0f);

    float lp[B * T], ent[B * T], loss;
    BAD_SIZES(b, pt_model_forward(ctx, &b, lp, NULL), "pt_model_forward", "pt_batch_init");
    BAD_SIZES(b, pt_model_forward_entropy(ctx, &b, lp, ent), "pt_model_forward_entropy", "pt_batch_init");
    BAD_SIZES(b, pt_model_loss(ctx, &b, NULL, false, &loss), "pt_model_loss", "pt_batch_init");
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* ---- the optimizer: pt_optimizer_options, pt_step_stats --------------------------- */

/* A fresh model after one backward on the fixed batch and one optimizer
 * step with opts and stats. */
static pt_model *step_once(const pt_optimizer_options *opts, pt_step_stats *stats)
{
    pt_model *m = pt_test_tiny_llama(V, 5);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    pt_batch b = full_batch();
    float loss;
    ck_assert_ok(pt_model_loss(ctx, &b, NULL, true, &loss));
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, opts));
    ck_assert_ok(pt_optimizer_step(stats, opt));
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    return m;
}

START_TEST(test_optimizer)
{
    pt_optimizer_options full;
    ck_assert_ok(pt_optimizer_options_init(&full));
    pt_step_stats sf, so;
    ck_assert_ok(pt_step_stats_init(&sf));
    pt_model *mf = step_once(&full, &sf);
    pt_model *mo = step_once(NULL, NULL);
    assert_same_weights(mf, mo);
    pt_model_free(mo);

    /* The step stats of an older header, cut before each field. */
    const size_t cuts[] = { offsetof(pt_step_stats, skipped_total), offsetof(pt_step_stats, lr),
                            sizeof(size_t) };
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        ck_assert_ok(pt_step_stats_init(&so));
        cut_out(&so, cuts[k], sizeof so);
        mo = step_once(&full, &so);
        assert_canaries(&so, cuts[k], sizeof so, "pt_optimizer_step");
        STEP_FIELDS(CMP_FIELD, pt_step_stats, so, sf, cuts[k])
        assert_same_weights(mf, mo);
        pt_model_free(mo);
    }
    pt_model_free(mf);

    /* Options without max_grad_norm: clipping at the default 1.0, not at
     * the 1e-3 beyond (SGD, so clipping shows in the weights). */
    pt_optimizer_options ref = full, old;
    ref.type = PT_OPTIMIZER_SGD;
    ref.lr = 0.5;
    mf = step_once(&ref, NULL);
    old = ref;
    old.max_grad_norm = 1e-3;
    mo = step_once(&old, NULL);
    ck_assert_msg(!same_weights(mf, mo), "max_grad_norm is not observable");
    pt_model_free(mo);
    old.size = offsetof(pt_optimizer_options, max_grad_norm);
    mo = step_once(&old, NULL);
    assert_same_weights(mf, mo);
    pt_model_free(mo);
    pt_model_free(mf);

    /* Options without weight_decay and what follows (AdamW). */
    ref = full;
    ref.lr = 0.5;
    mf = step_once(&ref, NULL);
    old = ref;
    old.size = offsetof(pt_optimizer_options, weight_decay);
    old.weight_decay = 0.5;
    old.schedule = PT_SCHEDULE_LINEAR; /* would need total_steps if read */
    old.warmup_steps = 100;
    mo = step_once(&old, NULL);
    assert_same_weights(mf, mo);
    pt_model_free(mo);
    pt_model_free(mf);

    pt_model *m = pt_test_tiny_llama(V, 5);
    pt_optimizer *opt = NULL;
    BAD_SIZES(full, pt_optimizer_create(&opt, m, &full), "pt_optimizer_create", "pt_optimizer_options_init");
    ck_assert_ok(pt_optimizer_create(&opt, m, &full));
    BAD_SIZES(so, pt_optimizer_step(&so, opt), "pt_optimizer_step", "pt_step_stats_init");
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* ---- the SFT step: pt_batch arrays, pt_sft_stats ---------------------------------- */

/* A fresh model after one pt_sft_step over micro (n of them, each `stride`
 * bytes apart as in the caller's array). */
static pt_model *sft_once(const void *micro, int n, pt_sft_stats *stats)
{
    pt_model *m = pt_test_tiny_llama(V, 9);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    pt_optimizer_options o;
    ck_assert_ok(pt_optimizer_options_init(&o));
    o.lr = 0.01;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &o));
    ck_assert_ok(pt_sft_step(stats, opt, ctx, micro, NULL, n));
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    return m;
}

START_TEST(test_sft)
{
    pt_batch full[2] = { full_batch(), full_batch() };
    full[1].batch = 1;
    full[1].input_ids = k_ids + T;
    full[1].targets = k_tgt + T;
    pt_sft_stats sf, so;
    ck_assert_ok(pt_sft_stats_init(&sf));
    pt_model *mf = sft_once(full, 2, &sf);
    ck_assert(sf.tokens > 0 && sf.loss > 0);

    /* An array of older batches (no segments): its stride is their size. */
    const size_t cut = offsetof(pt_batch, segments);
    alignas(16) unsigned char arr[2 * sizeof(pt_batch) + sizeof(void *)];
    memset(arr, 0, sizeof arr);
    for (int i = 0; i < 2; i++) {
        pt_batch b = full[i];
        b.size = cut;
        memcpy(arr + (size_t)i * cut, &b, cut);
    }
    const int32_t *seg = k_seg; /* where the last one's segments would be */
    memcpy(arr + 2 * cut, &seg, sizeof seg);
    const size_t cuts[] = { offsetof(pt_sft_stats, skipped_total), offsetof(pt_sft_stats, grad_norm) };
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        ck_assert_ok(pt_sft_stats_init(&so));
        cut_out(&so, cuts[k], sizeof so);
        pt_model *mo = sft_once(arr, 2, &so);
        assert_canaries(&so, cuts[k], sizeof so, "pt_sft_step");
        SFT_FIELDS(CMP_FIELD, pt_sft_stats, so, sf, cuts[k])
        assert_same_weights(mf, mo);
        pt_model_free(mo);
    }
    pt_model *mo = sft_once(full, 2, NULL);
    assert_same_weights(mf, mo);
    pt_model_free(mo);
    pt_model_free(mf);

    pt_model *m = pt_test_tiny_llama(V, 9);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, NULL));
    BAD_SIZES(full[0], pt_sft_step(NULL, opt, ctx, full, NULL, 2), "pt_sft_step", "pt_batch_init");
    BAD_SIZES(so, pt_sft_step(&so, opt, ctx, full, NULL, 2), "pt_sft_step", "pt_sft_stats_init");
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* pt_sft_step reads the targets of a micro-batch whose
 * size ends before them (check_micro -> batch_weight reads b->targets
 * directly, not a copy read with pt__struct_read). */
START_TEST(test_sft_batch_without_targets)
{
    pt_batch ref = full_batch();
    ref.targets = NULL;
    pt_sft_stats sf, so;
    ck_assert_ok(pt_sft_stats_init(&sf));
    ck_assert_ok(pt_sft_stats_init(&so));
    pt_model *mf = sft_once(&ref, 1, &sf);
    pt_batch old = full_batch(); /* targets beyond its size */
    old.size = offsetof(pt_batch, targets);
    pt_model *mo = sft_once(&old, 1, &so);
    SFT_FIELDS(CMP_FIELD, pt_sft_stats, so, sf, sizeof so)
    assert_same_weights(mf, mo);
    pt_model_free(mo);
    pt_model_free(mf);
}
END_TEST

/* ---- LoRA: pt_lora_options -------------------------------------------------------- */

static pt_model *with_lora(const pt_lora_options *o)
{
    pt_model *m = pt_test_tiny_llama(V, 2);
    ck_assert_ok(pt_model_add_lora(m, o));
    return m;
}

START_TEST(test_lora)
{
    pt_lora_options full, old;
    ck_assert_ok(pt_lora_options_init(&full));
    pt_model *mf = with_lora(&full), *mo = with_lora(NULL);
    assert_same_weights(mf, mo);
    pt_model_free(mo);
    pt_model_free(mf);

    full.rank = 4;
    full.alpha = 16;
    full.targets = PT_LORA_ALL;
    mf = with_lora(&full);
    /* without seed: lora_A drawn from seed 0, not 99 */
    old = full;
    old.seed = 99;
    mo = with_lora(&old);
    ck_assert_msg(!same_weights(mf, mo), "the LoRA seed is not observable");
    pt_model_free(mo);
    old.size = offsetof(pt_lora_options, seed);
    mo = with_lora(&old);
    assert_same_weights(mf, mo);
    pt_model_free(mo);
    /* without dropout (0.5 beyond would be PT_EUNSUPPORTED) */
    old.size = offsetof(pt_lora_options, dropout);
    old.dropout = 0.5;
    mo = with_lora(&old);
    assert_same_weights(mf, mo);
    pt_model_free(mo);
    pt_model_free(mf);

    pt_model *m = pt_test_tiny_llama(V, 2);
    BAD_SIZES(full, pt_model_add_lora(m, &full), "pt_model_add_lora", "pt_lora_options_init");
    ck_assert(!pt_model_has_lora(m));
    pt_model_free(m);
}
END_TEST

/* pt_model_get_lora assigns the whole struct
 * (*out = m->lora->opts) without reading out->size. */
START_TEST(test_get_lora)
{
    pt_lora_options o, full, c;
    ck_assert_ok(pt_lora_options_init(&o));
    o.rank = 4;
    o.seed = 3;
    pt_model *m = with_lora(&o);
    ck_assert_ok(pt_lora_options_init(&full));
    ck_assert_ok(pt_model_get_lora(&full, m));
    ck_assert_int_eq(full.rank, 4);
    ck_assert_ok(pt_lora_options_init(&c));
    const size_t cut = offsetof(pt_lora_options, seed);
    cut_out(&c, cut, sizeof c);
    ck_assert_ok(pt_model_get_lora(&c, m));
    assert_canaries(&c, cut, sizeof c, "pt_model_get_lora");
    LORA_FIELDS(CMP_FIELD, pt_lora_options, c, full, cut)
    BAD_SIZES(c, pt_model_get_lora(&c, m), "pt_model_get_lora", "pt_lora_options_init");
    pt_model_free(m);
}
END_TEST

/* ---- generation: pt_generate_options ---------------------------------------------- */

#define MAXNEW 8
typedef struct {
    int32_t tokens[2 * 64], n[2], finish[2];
    float lp[2 * 64];
} gen_result;

static void gen(gen_result *r, pt_generator *g, const pt_generate_options *o)
{
    static const int32_t prompts[5] = { 1, 2, 3, 4, 5 };
    static const int32_t lens[2] = { 3, 2 };
    memset(r, 0, sizeof *r);
    ck_assert_ok(pt_generate(g, prompts, lens, 2, o, r->tokens, r->n, r->finish, r->lp));
}

static pt_model *gen_model(int eos)
{
    pt_model_config c;
    tiny(&c);
    c.eos_token_id = eos;
    c.max_position_embeddings = 80; /* room for the default 64 new tokens */
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, 21));
    return m;
}

START_TEST(test_generate)
{
    /* eos: a token greedy decoding produces after the first step */
    pt_model *m0 = gen_model(-1);
    pt_generator *g;
    ck_assert_ok(pt_generator_create(&g, m0, 2, 72));
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = MAXNEW;
    o.temperature = 0;
    gen_result r0, ref, got;
    gen(&r0, g, &o);
    pt_generator_free(g);
    int eos = -1;
    for (int j = 1; j < MAXNEW - 1 && eos < 0; j++) {
        bool seen = false;
        for (int i = 0; i < j; i++)
            seen |= r0.tokens[i] == r0.tokens[j];
        if (!seen)
            eos = r0.tokens[j];
    }
    ck_assert_int_ge(eos, 0);
    pt_model *m = gen_model(eos);
    assert_same_weights(m0, m);
    pt_model_free(m0);
    ck_assert_ok(pt_generator_create(&g, m, 2, 72));

    /* NULL options: the defaults */
    pt_generate_options full;
    ck_assert_ok(pt_generate_options_init(&full));
    gen(&ref, g, &full);
    gen(&got, g, NULL);
    ck_assert(!memcmp(&ref, &got, sizeof ref));

    /* without n_stop_ids: -1, the model's eos (not the 0 beyond: no stop) */
    full.max_new_tokens = MAXNEW;
    full.temperature = 0;
    gen(&ref, g, &full);
    ck_assert_int_eq(ref.finish[0], PT_FINISH_STOP);
    ck_assert_int_lt(ref.n[0], MAXNEW);
    pt_generate_options old = full;
    static const int32_t stop = 0;
    old.stop_ids = &stop;
    old.n_stop_ids = 0;
    old.size = offsetof(pt_generate_options, n_stop_ids);
    gen(&got, g, &old);
    ck_assert(!memcmp(&ref, &got, sizeof ref));

    /* without temperature and what follows: sampling at 1 with seed 0 */
    ck_assert_ok(pt_generate_options_init(&full));
    full.max_new_tokens = MAXNEW;
    gen(&ref, g, &full);
    old = full;
    old.size = offsetof(pt_generate_options, temperature);
    old.temperature = 0;
    old.seed = 5;
    gen(&got, g, &old);
    ck_assert(!memcmp(&ref, &got, sizeof ref));
    /* without seed and what follows */
    old = full;
    old.seed = 1234;
    gen(&got, g, &old);
    ck_assert_msg(memcmp(&ref, &got, sizeof ref), "the seed is not observable");
    old.size = offsetof(pt_generate_options, seed);
    gen(&got, g, &old);
    ck_assert(!memcmp(&ref, &got, sizeof ref));

    static const int32_t prompts[2] = { 1, 2 }, lens[1] = { 2 };
    int32_t tok[MAXNEW], n[1];
    BAD_SIZES(full, pt_generate(g, prompts, lens, 1, &full, tok, n, NULL, NULL), "pt_generate",
              "pt_generate_options_init");
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

/* ---- chat: pt_chat_options ---------------------------------------------------------- */

static const pt_chat_message k_msgs[2] = { { .role = PT_CHAT_ROLE_USER, .content = "Hi there" },
                                           { .role = PT_CHAT_ROLE_ASSISTANT, .content = "Hello!" } };

/* Render with opts and assert it equals the rendering with ref, both as
 * text and as ids with their mask. */
static void assert_same_render(const char *tpl_name, const pt_chat_options *opts, const pt_chat_options *ref,
                               size_t n_msgs)
{
    pt_chat_template *t;
    ck_assert_ok(pt_chat_template_create(&t, tpl_name));
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    char *a, *b;
    size_t la, lb;
    ck_assert_ok(pt_chat_render(&a, &la, t, k_msgs, n_msgs, opts));
    ck_assert_ok(pt_chat_render(&b, &lb, t, k_msgs, n_msgs, ref));
    ck_assert_str_eq(a, b);
    ck_assert_uint_eq(la, lb);
    int32_t *ia, *ib;
    uint8_t *ma, *mb;
    size_t na, nb;
    ck_assert_ok(pt_chat_render_ids(&ia, &ma, &na, t, tok, k_msgs, n_msgs, opts));
    ck_assert_ok(pt_chat_render_ids(&ib, &mb, &nb, t, tok, k_msgs, n_msgs, ref));
    ck_assert_uint_eq(na, nb);
    ck_assert(na > 0 && !memcmp(ia, ib, na * sizeof *ia) && !memcmp(ma, mb, na));
    pt_free(a);
    pt_free(b);
    pt_free(ia);
    pt_free(ib);
    pt_free(ma);
    pt_free(mb);
    pt_tokenizer_free(tok);
    pt_chat_template_free(t);
}

static bool renders_differ(const char *tpl_name, const pt_chat_options *x, const pt_chat_options *y,
                           size_t n_msgs)
{
    pt_chat_template *t;
    ck_assert_ok(pt_chat_template_create(&t, tpl_name));
    char *a, *b;
    ck_assert_ok(pt_chat_render(&a, NULL, t, k_msgs, n_msgs, x));
    ck_assert_ok(pt_chat_render(&b, NULL, t, k_msgs, n_msgs, y));
    bool d = strcmp(a, b) != 0;
    pt_free(a);
    pt_free(b);
    pt_chat_template_free(t);
    return d;
}

START_TEST(test_chat)
{
    pt_chat_options full, old;
    ck_assert_ok(pt_chat_options_init(&full));
    assert_same_render("llama3.1", NULL, &full, 2);
    assert_same_render("smollm2", NULL, &full, 2);

    /* without date_string: "26 Jul 2024", not the date beyond */
    old = full;
    old.date_string = "1 Jan 2000";
    ck_assert(renders_differ("llama3.1", &old, &full, 2));
    old.size = offsetof(pt_chat_options, date_string);
    assert_same_render("llama3.1", &old, &full, 2);

    /* without enable_thinking: 1 (no empty think block after the prompt) */
    full.add_generation_prompt = 1;
    old = full;
    old.enable_thinking = 0;
    ck_assert(renders_differ("qwen3", &old, &full, 1));
    old.size = offsetof(pt_chat_options, enable_thinking);
    assert_same_render("qwen3", &old, &full, 1);

    /* without default_system: SmolLM2's own system prompt, not "" */
    old = full;
    old.default_system = "";
    ck_assert(renders_differ("smollm2", &old, &full, 1));
    old.size = offsetof(pt_chat_options, default_system);
    assert_same_render("smollm2", &old, &full, 1);

    /* without bos: the template's */
    old = full;
    old.bos = PT_CHAT_BOS_NONE;
    ck_assert(renders_differ("llama3", &old, &full, 2));
    old.size = offsetof(pt_chat_options, bos);
    assert_same_render("llama3", &old, &full, 2);

    pt_chat_template *t;
    ck_assert_ok(pt_chat_template_create(&t, "chatml"));
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    char *text;
    int32_t *ids;
    size_t n;
    BAD_SIZES(full, pt_chat_render(&text, NULL, t, k_msgs, 2, &full), "pt_chat_render", "pt_chat_options_init");
    BAD_SIZES(full, pt_chat_render_ids(&ids, NULL, &n, t, tok, k_msgs, 2, &full), "pt_chat_render_ids",
              "pt_chat_options_init");
    pt_tokenizer_free(tok);
    pt_chat_template_free(t);
}
END_TEST

/* ---- model directories: load, save, inspect, eval options; pt_model_dir_info ------ */

#define VB PT_BYTE_TOKENIZER_VOCAB

static pt_model *byte_model(void)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, VB);
    c.initializer_range = 0.2;
    c.bos_token_id = PT_BYTE_TOKENIZER_BOS;
    c.eos_token_id = PT_BYTE_TOKENIZER_EOS;
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, 13));
    return m;
}

static char *subdir(const char *root, const char *name)
{
    size_t n = strlen(root) + strlen(name) + 2;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s", root, name);
    return p;
}

/* ids 0 and 260: the id range of the byte model (VB), as pt_model_load_dir requires */
static const char k_tok_json[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":260},\"merges\":[]}}";

START_TEST(test_save_load)
{
    char *root = pt_test_tmpdir("pt_sizes_dir");
    char *tokdir = subdir(root, "tok");
    ck_assert_int_eq(mkdir(tokdir, 0700), 0);
    free(write_file(tokdir, "tokenizer.json", k_tok_json));
    pt_model *m = byte_model();

    /* save: without copy_tokenizer it is true (not the false beyond) */
    char *d_full = subdir(root, "full"), *d_old = subdir(root, "old"), *d_off = subdir(root, "off");
    char *d_null = subdir(root, "null"), *d_def = subdir(root, "def");
    pt_model_save_options full, old;
    ck_assert_ok(pt_model_save_options_init(&full));
    ck_assert_ok(pt_model_save_dir(m, d_def, &full));
    ck_assert_ok(pt_model_save_dir(m, d_null, NULL));
    full.tokenizer_dir = tokdir;
    ck_assert_ok(pt_model_save_dir(m, d_full, &full));
    old = full;
    old.copy_tokenizer = false;
    ck_assert_ok(pt_model_save_dir(m, d_off, &old));
    ck_assert(!has_file(d_off, "tokenizer.json"));
    old.size = offsetof(pt_model_save_options, copy_tokenizer);
    ck_assert_ok(pt_model_save_dir(m, d_old, &old));
    const char *files[] = { "config.json", "model.safetensors", "generation_config.json" };
    for (size_t i = 0; i < 3; i++) {
        assert_same_file(d_full, d_old, files[i]);
        assert_same_file(d_def, d_null, files[i]);
    }
    assert_same_file(d_full, d_old, "tokenizer.json");
    ck_assert(!has_file(d_def, "tokenizer.json") && !has_file(d_null, "tokenizer.json"));
    BAD_SIZES(full, pt_model_save_dir(m, d_old, &full), "pt_model_save_dir", "pt_model_save_options_init");

    /* load: without load_tokenizer it is true (not the false beyond) */
    pt_model_load_options lf, lo;
    ck_assert_ok(pt_model_load_options_init(&lf));
    pt_model *a, *b;
    ck_assert_ok(pt_model_load_dir(&a, d_full, &lf));
    ck_assert_ptr_nonnull(pt_model_tokenizer(a));
    lo = lf;
    lo.load_tokenizer = false;
    ck_assert_ok(pt_model_load_dir(&b, d_full, &lo));
    ck_assert_ptr_null(pt_model_tokenizer(b));
    pt_model_free(b);
    lo.size = offsetof(pt_model_load_options, load_tokenizer);
    ck_assert_ok(pt_model_load_dir(&b, d_full, &lo));
    ck_assert_ptr_nonnull(pt_model_tokenizer(b));
    ck_assert_int_eq(pt_tokenizer_vocab_size(pt_model_tokenizer(b)), pt_tokenizer_vocab_size(pt_model_tokenizer(a)));
    assert_same_weights(a, b);
    pt_model_free(b);
    ck_assert_ok(pt_model_load_dir(&b, d_full, NULL));
    ck_assert_ptr_nonnull(pt_model_tokenizer(b));
    assert_same_weights(a, b);
    pt_model_free(b);
    pt_model_free(a);
    BAD_SIZES(lf, pt_model_load_dir(&b, d_full, &lf), "pt_model_load_dir", "pt_model_load_options_init");

    /* inspect: an older pt_model_dir_info gets its own bytes */
    char *d_cfg = subdir(root, "cfgonly");
    ck_assert_int_eq(mkdir(d_cfg, 0700), 0);
    size_t len;
    char *cfg_text = read_all(d_full, "config.json", &len);
    free(write_file(d_cfg, "config.json", cfg_text));
    free(cfg_text);
    const char *dirs[2] = { d_full, d_cfg };
    for (int k = 0; k < 2; k++) {
        pt_model_dir_info fi;
        ck_assert_ok(pt_model_dir_info_init(&fi));
        ck_assert_ok(pt_model_dir_inspect(&fi, dirs[k]));
        ck_assert_int_eq(fi.weights_status, k == 0 ? PT_OK : PT_ENOTFOUND);
        ck_assert_int_eq(fi.has_tokenizer, k == 0);
        const size_t cuts[] = { offsetof(pt_model_dir_info, tokenizer_problem),
                                offsetof(pt_model_dir_info, tokenizer_status),
                                offsetof(pt_model_dir_info, weights_problem),
                                offsetof(pt_model_dir_info, weights_status),
                                offsetof(pt_model_dir_info, dtypes),
                                offsetof(pt_model_dir_info, num_params), sizeof(size_t) };
        for (size_t j = 0; j < sizeof cuts / sizeof *cuts; j++) {
            pt_model_dir_info *ci = malloc(sizeof *ci);
            ck_assert_ptr_nonnull(ci);
            ck_assert_ok(pt_model_dir_info_init(ci));
            cut_out(ci, cuts[j], sizeof *ci);
            ck_assert_ok(pt_model_dir_inspect(ci, dirs[k]));
            assert_canaries(ci, cuts[j], sizeof *ci, "pt_model_dir_inspect");
            if (cuts[j] >= offsetof(pt_model_dir_info, num_params))
                assert_same_config(&ci->config, &fi.config, sizeof fi.config);
            DIR_INFO_FIELDS(CMP_FIELD, pt_model_dir_info, *ci, fi, cuts[j])
            free(ci);
        }
        BAD_SIZES(fi, pt_model_dir_inspect(&fi, dirs[k]), "pt_model_dir_inspect", "pt_model_dir_info_init");
    }

    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
    free(d_cfg);
    free(d_full);
    free(d_old);
    free(d_off);
    free(d_null);
    free(d_def);
    free(tokdir);
    free(root);
}
END_TEST

static void assert_same_eval(const pt_eval_result *a, const pt_eval_result *b)
{
    ck_assert(!memcmp(&a->loss, &b->loss, sizeof a->loss));
    ck_assert_int_eq(a->tokens, b->tokens);
    ck_assert_uint_eq(a->n_rows, b->n_rows);
    ck_assert(!memcmp(a->row_loss, b->row_loss, a->n_rows * sizeof *a->row_loss));
    ck_assert(!memcmp(a->row_tokens, b->row_tokens, a->n_rows * sizeof *a->row_tokens));
}

static const char k_jsonl[] = "{\"text\": \"hello world\"}\n"
                              "{\"text\": \"a longer line of text here\"}\n"
                              "{\"text\": \"xy\"}\n"
                              "{\"text\": \"the quick brown fox\"}\n"
                              "{\"text\": \"jumps over\"}\n";

START_TEST(test_eval)
{
    char *dir = pt_test_tmpdir("pt_sizes_eval");
    char *path = write_file(dir, "data.jsonl", k_jsonl);
    pt_model *m = byte_model();
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_eval_options full, old;
    ck_assert_ok(pt_eval_options_init(&full));
    pt_eval_result *rf, *ro;
    ck_assert_ok(pt_model_eval_jsonl(&rf, m, tok, path, &full));
    ck_assert_ok(pt_model_eval_jsonl(&ro, m, tok, path, NULL));
    assert_same_eval(rf, ro);
    pt_eval_result_free(ro);
    /* without add_special: true (BOS first), not the false beyond */
    old = full;
    old.add_special = false;
    ck_assert_ok(pt_model_eval_jsonl(&ro, m, tok, path, &old));
    ck_assert_int_ne(ro->tokens, rf->tokens);
    pt_eval_result_free(ro);
    old.size = offsetof(pt_eval_options, add_special);
    ck_assert_ok(pt_model_eval_jsonl(&ro, m, tok, path, &old));
    assert_same_eval(rf, ro);
    pt_eval_result_free(ro);
    /* without max_length: the model's maximum, not 3 */
    old.size = offsetof(pt_eval_options, max_length);
    old.max_length = 3;
    ck_assert_ok(pt_model_eval_jsonl(&ro, m, tok, path, &old));
    assert_same_eval(rf, ro);
    pt_eval_result_free(ro);
    BAD_SIZES(full, pt_model_eval_jsonl(&ro, m, tok, path, &full), "pt_model_eval_jsonl",
              "pt_eval_options_init");
    pt_eval_result_free(rf);
    pt_tokenizer_free(tok);
    pt_model_free(m);
    pt_test_rm_rf(dir);
    free(path);
    free(dir);
}
END_TEST

/* ---- datasets: pt_dataset_options, pt_dataset_stats ------------------------------- */

/* The contents of the next n batches of d, back to back (caller frees). */
static char *draw(pt_dataset *d, int n, size_t *len)
{
    size_t cap = 1 << 16, used = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < n; i++) {
        pt_batch b;
        ck_assert_ok(pt_batch_init(&b));
        const float *w;
        ck_assert_ok(pt_dataset_next_batch(&b, &w, d));
        size_t cells = (size_t)b.batch * (size_t)b.seq;
        size_t need = 2 * sizeof(int) + cells * (3 * sizeof(int32_t) + sizeof(float));
        while (used + need > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        memcpy(buf + used, &b.batch, sizeof(int));
        memcpy(buf + used + sizeof(int), &b.seq, sizeof(int));
        used += 2 * sizeof(int);
        memcpy(buf + used, b.input_ids, cells * sizeof(int32_t));
        used += cells * sizeof(int32_t);
        memcpy(buf + used, b.targets, cells * sizeof(int32_t));
        used += cells * sizeof(int32_t);
        memcpy(buf + used, b.positions, cells * sizeof(int32_t));
        used += cells * sizeof(int32_t);
        memcpy(buf + used, w, cells * sizeof(float));
        used += cells * sizeof(float);
    }
    *len = used;
    return buf;
}

static const int32_t k_ex[6][5] = { { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 }, { 11, 12, 13, 14, 15 },
                                    { 16, 17, 18, 19, 20 }, { 21, 22, 23, 24, 25 }, { 26, 27, 28, 29, 30 } };

/* A dataset from the JSONL file (path) or from k_ex (path NULL). */
static pt_dataset *open_ds(const char *path, const pt_tokenizer *tok, const pt_dataset_options *o)
{
    pt_dataset *d;
    if (path) {
        ck_assert_ok(pt_dataset_load_jsonl(&d, path, tok, o));
    } else {
        ck_assert_ok(pt_dataset_create(&d, o));
        for (int i = 0; i < 6; i++)
            ck_assert_ok(pt_dataset_add(d, k_ex[i], NULL, (size_t)(2 + i % 4)));
    }
    return d;
}

static void assert_same_draws(const char *path, const pt_tokenizer *tok, const pt_dataset_options *a,
                              const pt_dataset_options *b, bool same)
{
    pt_dataset *da = open_ds(path, tok, a), *db = open_ds(path, tok, b);
    size_t la, lb;
    char *xa = draw(da, 4, &la), *xb = draw(db, 4, &lb);
    bool eq = la == lb && !memcmp(xa, xb, la);
    ck_assert_msg(eq == same, "%s: batches %s", path ? "pt_dataset_load_jsonl" : "pt_dataset_create",
                  same ? "differ" : "are not observably different");
    free(xa);
    free(xb);
    pt_dataset_free(da);
    pt_dataset_free(db);
}

START_TEST(test_dataset)
{
    char *dir = pt_test_tmpdir("pt_sizes_ds");
    char *path = write_file(dir, "data.jsonl", k_jsonl);
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    const char *paths[2] = { NULL, path };
    for (int k = 0; k < 2; k++) {
        pt_dataset_options full, old;
        ck_assert_ok(pt_dataset_options_init(&full));
        assert_same_draws(paths[k], tok, NULL, &full, true);
        full.max_length = 16;
        full.batch_size = 2;
        /* without seed: 0, not 777 */
        old = full;
        old.seed = 777;
        assert_same_draws(paths[k], tok, &old, &full, false);
        old.size = offsetof(pt_dataset_options, seed);
        assert_same_draws(paths[k], tok, &old, &full, true);
        /* without batch_size and what follows: 8 rows, shuffled, seed 0 */
        pt_dataset_options ref;
        ck_assert_ok(pt_dataset_options_init(&ref));
        ref.max_length = 16;
        old = full;
        old.size = offsetof(pt_dataset_options, batch_size);
        old.batch_size = 3;
        old.shuffle = false;
        old.pack = true;
        old.seed = 5;
        assert_same_draws(paths[k], tok, &old, &ref, true);
        /* without max_length and what follows (NULL chat_template too) */
        ck_assert_ok(pt_dataset_options_init(&ref));
        old = full;
        old.size = offsetof(pt_dataset_options, max_length);
        old.chat_template = "no-such-template";
        old.eval_fraction = 0.5;
        assert_same_draws(paths[k], tok, &old, &ref, true);
    }

    /* stats of an older header */
    pt_dataset_options o;
    ck_assert_ok(pt_dataset_options_init(&o));
    o.max_length = 4; /* truncates, so the counters are not all zero */
    o.batch_size = 2;
    o.eval_fraction = 0.25;
    pt_dataset *d = open_ds(path, tok, &o);
    size_t len;
    free(draw(d, 3, &len));
    pt_dataset_stats full, c;
    ck_assert_ok(pt_dataset_stats_init(&full));
    ck_assert_ok(pt_dataset_get_stats(&full, d));
    ck_assert(full.rows == 5 && full.truncated_rows > 0 && full.eval_examples > 0 && full.cursor > 0);
    const size_t cuts[] = { offsetof(pt_dataset_stats, cursor), offsetof(pt_dataset_stats, train_tokens),
                            offsetof(pt_dataset_stats, skipped_rows), sizeof(size_t) };
    for (size_t j = 0; j < sizeof cuts / sizeof *cuts; j++) {
        ck_assert_ok(pt_dataset_stats_init(&c));
        cut_out(&c, cuts[j], sizeof c);
        ck_assert_ok(pt_dataset_get_stats(&c, d));
        assert_canaries(&c, cuts[j], sizeof c, "pt_dataset_get_stats");
        DATASET_STATS_FIELDS(CMP_FIELD, pt_dataset_stats, c, full, cuts[j])
    }
    BAD_SIZES(c, pt_dataset_get_stats(&c, d), "pt_dataset_get_stats", "pt_dataset_stats_init");
    pt_dataset_free(d);

    pt_dataset *bad = NULL;
    BAD_SIZES(o, pt_dataset_create(&bad, &o), "pt_dataset_create", "pt_dataset_options_init");
    ck_assert_ptr_null(bad);
    pt_tokenizer_free(tok);
    pt_test_rm_rf(dir);
    free(path);
    free(dir);
}
END_TEST

/* pt_dataset_load_jsonl's size message names
 * pt_dataset_create (it calls it with the caller's options). */
START_TEST(test_dataset_load_message)
{
    char *dir = pt_test_tmpdir("pt_sizes_dsl");
    char *path = write_file(dir, "data.jsonl", k_jsonl);
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_dataset_options o;
    ck_assert_ok(pt_dataset_options_init(&o));
    pt_dataset *d = NULL;
    BAD_SIZES(o, pt_dataset_load_jsonl(&d, path, tok, &o), "pt_dataset_load_jsonl", "pt_dataset_options_init");
    pt_tokenizer_free(tok);
    pt_test_rm_rf(dir);
    free(path);
    free(dir);
}
END_TEST

/* pt_dataset_next_batch writes the whole pt_batch
 * (pt_batch_init(batch) and every field) whatever the caller's size. */
START_TEST(test_dataset_next_batch)
{
    pt_dataset_options o;
    ck_assert_ok(pt_dataset_options_init(&o));
    o.max_length = 16;
    o.batch_size = 2;
    o.shuffle = false;
    pt_dataset *d = open_ds(NULL, NULL, &o);
    pt_batch full, c;
    const float *w;
    ck_assert_ok(pt_batch_init(&full));
    ck_assert_ok(pt_dataset_next_batch(&full, &w, d));
    ck_assert_ok(pt_dataset_set_position(d, 0, 0));
    ck_assert_ok(pt_batch_init(&c));
    const size_t cut = offsetof(pt_batch, segments);
    cut_out(&c, cut, sizeof c);
    ck_assert_ok(pt_dataset_next_batch(&c, &w, d));
    assert_canaries(&c, cut, sizeof c, "pt_dataset_next_batch");
    BATCH_FIELDS(CMP_FIELD, pt_batch, c, full, cut)
    BAD_SIZES(c, pt_dataset_next_batch(&c, &w, d), "pt_dataset_next_batch", "pt_batch_init");
    pt_dataset_free(d);
}
END_TEST

/* ---- GRPO: rollout buffer options, samples, grpo options and stats ---------------- */

#define NS 4
#define SL 6
#define PL 3
static const int32_t k_sids[NS][SL] = { { 1, 2, 3, 4, 5, 6 }, { 1, 2, 3, 7, 8, 9 },
                                        { 4, 5, 6, 10, 11, 12 }, { 4, 5, 6, 13, 14, 15 } };
static const float k_rew[NS][2] = { { 1.0f, 0.5f }, { 0.0f, 2.0f }, { 0.25f, 1.0f }, { 2.0f, -1.0f } };

static pt_rollout_sample sample(int i)
{
    pt_rollout_sample s;
    ck_assert_ok(pt_rollout_sample_init(&s));
    s.ids = k_sids[i];
    s.n_ids = SL;
    s.prompt_len = PL;
    s.group = i / 2;
    s.rewards = k_rew[i];
    return s;
}

typedef struct {
    pt_model *m;
    pt_context *ctx;
    pt_optimizer *opt;
    pt_rollout_buffer *buf;
} grpo_env;

static void env_open(grpo_env *e, const pt_rollout_buffer_options *bo)
{
    e->m = pt_test_tiny_llama(V, 17);
    ck_assert_ok(pt_context_create(&e->ctx, e->m, NS, SL));
    pt_optimizer_options o;
    ck_assert_ok(pt_optimizer_options_init(&o));
    o.lr = 0.01;
    ck_assert_ok(pt_optimizer_create(&e->opt, e->m, &o));
    ck_assert_ok(pt_rollout_buffer_create(&e->buf, bo));
}

static void env_close(grpo_env *e)
{
    pt_rollout_buffer_free(e->buf);
    pt_optimizer_free(e->opt);
    pt_context_free(e->ctx);
    pt_model_free(e->m);
}

/* The stats and model after one GRPO step over samples (stride bytes
 * apart) added as one group, or one by one with add_one. */
static void grpo_run(grpo_env *e, const pt_rollout_buffer_options *bo, const void *samples, size_t stride,
                     bool add_one, const pt_grpo_options *go, pt_grpo_stats *stats)
{
    env_open(e, bo);
    if (add_one)
        for (int i = 0; i < NS; i++)
            ck_assert_ok(pt_rollout_buffer_add(e->buf, (const void *)((const char *)samples + (size_t)i * stride)));
    else
        ck_assert_ok(pt_rollout_buffer_add_group(e->buf, samples, NS));
    ck_assert_ok(pt_grpo_step(stats, e->opt, e->ctx, e->buf, go));
}

static void assert_same_grpo(const pt_grpo_stats *a, const grpo_env *ea, const pt_grpo_stats *b,
                             const grpo_env *eb, size_t lim)
{
    GRPO_STATS_FIELDS(CMP_FIELD, pt_grpo_stats, *a, *b, lim)
    assert_same_weights(ea->m, eb->m);
}

static const char *g_names[PT_GRPO_MAX_REWARD_FUNCS];
static size_t g_rb_size;

static int record_names(float *rewards, const pt_reward_batch *batch, void *payload)
{
    (void)payload;
    g_rb_size = batch->size;
    g_names[batch->func_index] = batch->func_name;
    for (int i = 0; i < batch->n; i++)
        rewards[i] = (float)i;
    return 0;
}

START_TEST(test_grpo)
{
    pt_rollout_sample full_s[NS];
    for (int i = 0; i < NS; i++)
        full_s[i] = sample(i);
    pt_rollout_buffer_options bf, bo;
    ck_assert_ok(pt_rollout_buffer_options_init(&bf));
    bf.n_reward_funcs = 2;
    pt_grpo_options gf, go;
    ck_assert_ok(pt_grpo_options_init(&gf));
    pt_grpo_stats sf, so;
    ck_assert_ok(pt_grpo_stats_init(&sf));
    grpo_env ef, eo;
    grpo_run(&ef, &bf, full_s, sizeof *full_s, false, &gf, &sf);
    ck_assert(sf.tokens > 0 && sf.grad_norm > 0 && sf.reward_std > 0);

    /* NULL grpo options; NULL stats */
    grpo_run(&eo, &bf, full_s, sizeof *full_s, false, NULL, NULL);
    assert_same_weights(ef.m, eo.m);
    env_close(&eo);
    /* samples added one at a time */
    ck_assert_ok(pt_grpo_stats_init(&so));
    grpo_run(&eo, &bf, full_s, sizeof *full_s, true, &gf, &so);
    assert_same_grpo(&so, &eo, &sf, &ef, sizeof so);
    env_close(&eo);

    /* grpo options without the fields of the sampler correction and TRL 1.x's
     * loss family (a temperature and an entropy quantile beyond would show),
     * without micro_batch (1 beyond) and without beta and what follows (0.5
     * beyond would need reference log-probabilities) */
    const size_t gcuts[] = { offsetof(pt_grpo_options, vespo_k_pos), offsetof(pt_grpo_options, temperature),
                             offsetof(pt_grpo_options, micro_batch), offsetof(pt_grpo_options, beta),
                             sizeof(size_t) };
    for (size_t k = 0; k < sizeof gcuts / sizeof *gcuts; k++) {
        go = gf;
        go.vespo_k_pos = go.vespo_lambda_neg = -1; /* invalid: must not be read */
        go.entropy_coef = NAN;
        go.entropy_last = NAN;
        go.use_adaptive_entropy = true;
        if (k == 0) { /* only the vespo fields and entropy_coef are cut */
            go.size = gcuts[k];
            ck_assert_ok(pt_grpo_stats_init(&so));
            grpo_run(&eo, &bf, full_s, sizeof *full_s, false, &go, &so);
            assert_same_grpo(&so, &eo, &sf, &ef, sizeof so);
            env_close(&eo);
            continue;
        }
        go.temperature = 0.5;
        go.top_entropy_quantile = 0.5;
        go.importance_sampling_correction = 99; /* invalid: must not be read */
        go.delta = -1;
        if (gcuts[k] <= offsetof(pt_grpo_options, micro_batch))
            go.micro_batch = 1;
        if (gcuts[k] <= offsetof(pt_grpo_options, beta)) {
            go.beta = 0.5;
            go.drop_zero_std_groups = true;
            go.global_tokens = 3;
        }
        go.size = gcuts[k];
        ck_assert_ok(pt_grpo_stats_init(&so));
        grpo_run(&eo, &bf, full_s, sizeof *full_s, false, &go, &so);
        assert_same_grpo(&so, &eo, &sf, &ef, sizeof so);
        env_close(&eo);
    }

    /* the options beyond those cuts are observable */
    go = gf;
    go.temperature = 0.5;
    ck_assert_ok(pt_grpo_stats_init(&so));
    grpo_run(&eo, &bf, full_s, sizeof *full_s, false, &go, &so);
    ck_assert(so.entropy != sf.entropy);
    env_close(&eo);
    go = gf;
    go.top_entropy_quantile = 0.5;
    ck_assert_ok(pt_grpo_stats_init(&so));
    grpo_run(&eo, &bf, full_s, sizeof *full_s, false, &go, &so);
    ck_assert(so.entropy_kept_fraction < 1);
    env_close(&eo);

    /* grpo stats of an older header */
    const size_t scuts[] = { offsetof(pt_grpo_stats, frac_zero_std_groups),
                             offsetof(pt_grpo_stats, sampling_logp_difference_mean),
                             offsetof(pt_grpo_stats, tokens_per_second), offsetof(pt_grpo_stats, train_seconds),
                             offsetof(pt_grpo_stats, kl), offsetof(pt_grpo_stats, reward_func_mean),
                             sizeof(size_t) };
    for (size_t k = 0; k < sizeof scuts / sizeof *scuts; k++) {
        ck_assert_ok(pt_grpo_stats_init(&so));
        cut_out(&so, scuts[k], sizeof so);
        grpo_run(&eo, &bf, full_s, sizeof *full_s, false, &gf, &so);
        assert_canaries(&so, scuts[k], sizeof so, "pt_grpo_step");
        assert_same_grpo(&so, &eo, &sf, &ef, scuts[k]);
        env_close(&eo);
    }

    /* samples of an older header: without truncated (true beyond would
     * count in clipped_ratio), one at a time and as an array whose stride
     * is their size */
    const size_t cut = offsetof(pt_rollout_sample, truncated);
    alignas(16) unsigned char arr[NS * sizeof(pt_rollout_sample)];
    memset(arr, 0, sizeof arr);
    for (int i = 0; i < NS; i++) {
        pt_rollout_sample s = full_s[i];
        s.size = cut;
        memcpy(arr + (size_t)i * cut, &s, cut);
    }
    arr[NS * cut] = 1; /* the last one's `truncated` */
    for (int one = 0; one < 2; one++) {
        ck_assert_ok(pt_grpo_stats_init(&so));
        grpo_run(&eo, &bf, arr, cut, one, &gf, &so);
        assert_same_grpo(&so, &eo, &sf, &ef, sizeof so);
        env_close(&eo);
    }
    pt_rollout_sample tr[NS];
    memcpy(tr, full_s, sizeof tr);
    for (int i = 0; i < NS; i++)
        tr[i].truncated = true;
    ck_assert_ok(pt_grpo_stats_init(&so));
    grpo_run(&eo, &bf, tr, sizeof *tr, false, &gf, &so);
    ck_assert_double_eq(so.clipped_ratio, 1.0);
    env_close(&eo);
    for (int i = 0; i < NS; i++) {
        tr[i].size = cut;
        memcpy(arr, &tr[i], sizeof tr[i]); /* truncated just beyond the size */
        env_open(&eo, &bf);
        ck_assert_ok(pt_rollout_buffer_add(eo.buf, (const pt_rollout_sample *)(const void *)arr));
        ck_assert_ok(pt_grpo_step(&so, eo.opt, eo.ctx, eo.buf, &gf));
        ck_assert_double_eq(so.clipped_ratio, 0.0);
        env_close(&eo);
    }
    /* samples of an older header: without sampling_logprobs and what follows
     * (per-token advantages, segment rewards beyond would change the step) */
    static const float adv[SL - PL] = { 3, -3, 1 }, seg[1] = { 5 }, samp[SL - PL] = { -9, -9, -9 };
    pt_rollout_sample older[NS];
    for (int i = 0; i < NS; i++) {
        older[i] = full_s[i];
        older[i].sampling_logprobs = samp;
        older[i].advantages = i % 2 ? adv : NULL;
        older[i].segment_rewards = i % 2 ? NULL : seg;
        older[i].n_segments = i % 2 ? 0 : 1;
        older[i].size = offsetof(pt_rollout_sample, sampling_logprobs);
    }
    const size_t ocut = offsetof(pt_rollout_sample, sampling_logprobs);
    alignas(16) unsigned char packed[NS * sizeof(pt_rollout_sample)];
    memset(packed, 0, sizeof packed);
    for (int i = 0; i < NS; i++)
        memcpy(packed + (size_t)i * ocut, &older[i], ocut);
    memcpy(packed + (size_t)NS * ocut, &older[0].sampling_logprobs,
           sizeof(pt_rollout_sample) - ocut); /* the last one's fields beyond its size */
    for (int one = 0; one < 3; one++) {
        ck_assert_ok(pt_grpo_stats_init(&so));
        if (one < 2)
            grpo_run(&eo, &bf, packed, ocut, one, &gf, &so);
        else
            grpo_run(&eo, &bf, older, sizeof *older, true, &gf, &so);
        assert_same_grpo(&so, &eo, &sf, &ef, sizeof so);
        ck_assert(isnan(so.sampling_logp_difference_mean) && so.segments == 0);
        env_close(&eo);
    }
    /* ... and those fields are read in a full one (the sampling values only
     * enter the metrics and the weights) */
    for (int i = 0; i < NS; i++) {
        older[i].size = sizeof older[i];
        older[i].advantages = NULL;
        older[i].segment_rewards = NULL;
        older[i].n_segments = 0;
    }
    ck_assert_ok(pt_grpo_stats_init(&so));
    grpo_run(&eo, &bf, older, sizeof *older, false, &gf, &so);
    ck_assert(so.sampling_logp_difference_mean > 1);
    env_close(&eo);

    /* pt_rollout_logprobs_options: NULL, or of an older header (a temperature
     * beyond is not read), are temperature 1 */
    pt_rollout_logprobs_options lf, lo;
    ck_assert_ok(pt_rollout_logprobs_options_init(&lf));
    float lp_full[NS][SL - PL], lp_got[SL - PL];
    env_open(&eo, &bf);
    ck_assert_ok(pt_rollout_buffer_add_group(eo.buf, full_s, NS));
    ck_assert_ok(pt_rollout_buffer_compute_logprobs_with(eo.buf, eo.ctx, PT_ROLLOUT_REF, &lf));
    for (int i = 0; i < NS; i++)
        ck_assert_ok(pt_rollout_buffer_get_logprobs(lp_full[i], eo.buf, i, PT_ROLLOUT_REF));
    lo = lf;
    lo.temperature = 0.25;
    ck_assert_ok(pt_rollout_buffer_compute_logprobs_with(eo.buf, eo.ctx, PT_ROLLOUT_REF, &lo));
    ck_assert_ok(pt_rollout_buffer_get_logprobs(lp_got, eo.buf, 0, PT_ROLLOUT_REF));
    ck_assert(memcmp(lp_got, lp_full[0], sizeof lp_got) != 0);
    const pt_rollout_logprobs_options *lopts[2] = { NULL, &lo };
    for (int k = 0; k < 2; k++) {
        lo.size = offsetof(pt_rollout_logprobs_options, temperature);
        ck_assert_ok(pt_rollout_buffer_compute_logprobs_with(eo.buf, eo.ctx, PT_ROLLOUT_REF, lopts[k]));
        for (int i = 0; i < NS; i++) {
            ck_assert_ok(pt_rollout_buffer_get_logprobs(lp_got, eo.buf, i, PT_ROLLOUT_REF));
            ck_assert(memcmp(lp_got, lp_full[i], sizeof lp_got) == 0);
        }
    }
    lo.size = sizeof lo;
    BAD_SIZES(lo, pt_rollout_buffer_compute_logprobs_with(eo.buf, eo.ctx, PT_ROLLOUT_REF, &lo),
              "pt_rollout_buffer_compute_logprobs_with", "pt_rollout_logprobs_options_init");
    env_close(&eo);

    /* without rewards: NaN (unscored) until set */
    env_open(&eo, &bf);
    pt_rollout_sample s = full_s[0];
    s.size = offsetof(pt_rollout_sample, rewards);
    ck_assert_ok(pt_rollout_buffer_add(eo.buf, &s));
    float r = 0;
    ck_assert_ok(pt_rollout_buffer_get_reward(&r, eo.buf, 0, 1));
    ck_assert(isnan(r));
    env_close(&eo);

    /* buffer options without reward_weights: all 1, not {3, -2} */
    static const double wts[2] = { 3.0, -2.0 };
    bo = bf;
    bo.reward_weights = wts;
    ck_assert_ok(pt_grpo_stats_init(&so));
    grpo_run(&eo, &bo, full_s, sizeof *full_s, false, &gf, &so);
    ck_assert(so.reward != sf.reward);
    env_close(&eo);
    bo.size = offsetof(pt_rollout_buffer_options, reward_weights);
    ck_assert_ok(pt_grpo_stats_init(&so));
    grpo_run(&eo, &bo, full_s, sizeof *full_s, false, &gf, &so);
    assert_same_grpo(&so, &eo, &sf, &ef, sizeof so);
    env_close(&eo);
    /* without reward_names: "reward0", "reward1"; the callback's batch is the
     * library's full pt_reward_batch */
    static const char *const names[2] = { "x", "y" };
    bo = bf;
    bo.reward_names = names;
    bo.size = offsetof(pt_rollout_buffer_options, reward_names);
    env_open(&eo, &bo);
    ck_assert_ok(pt_rollout_buffer_add_group(eo.buf, full_s, NS));
    for (int k = 0; k < 2; k++)
        ck_assert_ok(pt_rollout_buffer_score(eo.buf, k, record_names, NULL));
    ck_assert_str_eq(g_names[0], "reward0");
    ck_assert_str_eq(g_names[1], "reward1");
    ck_assert_uint_eq(g_rb_size, sizeof(pt_reward_batch));
    env_close(&eo);
    /* NULL buffer options: one reward function */
    env_open(&eo, NULL);
    s = full_s[0];
    s.rewards = NULL;
    ck_assert_ok(pt_rollout_buffer_add(eo.buf, &s));
    ck_assert_ok(pt_rollout_buffer_score(eo.buf, 0, record_names, NULL));
    ck_assert_str_eq(g_names[0], "reward0");
    ck_assert_status(pt_rollout_buffer_get_reward(&r, eo.buf, 0, 1), PT_EINVAL, "reward function 1");
    env_close(&eo);

    /* bad sizes */
    pt_rollout_buffer *nb = NULL;
    BAD_SIZES(bf, pt_rollout_buffer_create(&nb, &bf), "pt_rollout_buffer_create",
              "pt_rollout_buffer_options_init");
    ck_assert_ptr_null(nb);
    env_open(&eo, &bf);
    BAD_SIZES(full_s[0], pt_rollout_buffer_add(eo.buf, &full_s[0]), "pt_rollout_buffer_add",
              "pt_rollout_sample_init");
    ck_assert_ok(pt_rollout_buffer_add_group(eo.buf, full_s, NS));
    BAD_SIZES(gf, pt_grpo_step(NULL, eo.opt, eo.ctx, eo.buf, &gf), "pt_grpo_step", "pt_grpo_options_init");
    BAD_SIZES(so, pt_grpo_step(&so, eo.opt, eo.ctx, eo.buf, &gf), "pt_grpo_step", "pt_grpo_stats_init");
    env_close(&eo);
    env_close(&ef);
}
END_TEST

/* pt_rollout_buffer_add_group's size messages name
 * pt_rollout_buffer_add ("pt_rollout_buffer_add: sample 0: struct size
 * ..."; ADD_FUNC in grpo_rollout.c), not pt_rollout_buffer_add_group. */
START_TEST(test_add_group_message)
{
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    pt_rollout_sample s[2] = { sample(0), sample(1) };
    s[0].rewards = s[1].rewards = NULL;
    BAD_SIZES(s[0], pt_rollout_buffer_add_group(buf, s, 2), "pt_rollout_buffer_add_group",
              "pt_rollout_sample_init");
    pt_rollout_buffer_free(buf);
}
END_TEST

/* ---- GGUF export: pt_gguf_export_options -------------------------------------------- */

/* Two files in root equal byte for byte. */
static void same_gguf(const char *root, const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = read_all(root, a, &la), *y = read_all(root, b, &lb);
    ck_assert_msg(x && y && la == lb && !memcmp(x, y, la), "%s and %s differ", a, b);
    free(x);
    free(y);
}

static bool differ_gguf(const char *root, const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = read_all(root, a, &la), *y = read_all(root, b, &lb);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    bool d = la != lb || memcmp(x, y, la) != 0;
    free(x);
    free(y);
    return d;
}

/* A tiny llama with the SentencePiece-style stories260K tokenizer (so that
 * spm_scores shows in the file), saved to root/src and loaded back. */
static pt_model *gguf_model(const char *root)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, 512);
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, 5));
    pt_model_save_options so;
    ck_assert_ok(pt_model_save_options_init(&so));
    so.tokenizer_dir = PT_TEST_SRCDIR "/modelio/data/stories260K";
    char *d = subdir(root, "src");
    ck_assert_ok(pt_model_save_dir(m, d, &so));
    pt_model_free(m);
    ck_assert_ok(pt_model_load_dir(&m, d, NULL));
    free(d);
    return m;
}

typedef int (*gguf_export_fn)(const pt_model *, const char *, const pt_gguf_export_options *);

static void export_as(gguf_export_fn fn, const pt_model *m, const char *root, const char *name,
                      const pt_gguf_export_options *o)
{
    char *p = subdir(root, name);
    ck_assert_msg(fn(m, p, o) == PT_OK, "%s: %s", name, pt_last_error());
    free(p);
}

/* Older cuts: before spm_scores (the newest), before name, before type:
 * each equals the full struct with the fields beyond at their defaults,
 * though they hold non-default values; NULL is the defaults. */
static void gguf_cuts(gguf_export_fn fn, const pt_model *m, const char *root, bool spm_shows)
{
    pt_gguf_export_options full, old, def;
    ck_assert_ok(pt_gguf_export_options_init(&def));
    ck_assert_ok(pt_gguf_export_options_init(&full));
    full.type = PT_GGUF_FTYPE_F16;
    full.name = "Full Name";
    full.spm_scores = PT_GGUF_SPM_SCORES_MERGES;
    export_as(fn, m, root, "full.gguf", &full);
    export_as(fn, m, root, "null.gguf", NULL);
    export_as(fn, m, root, "def.gguf", &def);
    same_gguf(root, "null.gguf", "def.gguf");
    static const size_t cuts[] = { offsetof(pt_gguf_export_options, spm_scores),
                                   offsetof(pt_gguf_export_options, name),
                                   offsetof(pt_gguf_export_options, type) };
    for (size_t k = 0; k < 3; k++) {
        pt_gguf_export_options want = def;
        if (cuts[k] > offsetof(pt_gguf_export_options, type))
            want.type = full.type;
        if (cuts[k] > offsetof(pt_gguf_export_options, name))
            want.name = full.name;
        old = full;
        old.size = cuts[k];
        export_as(fn, m, root, "old.gguf", &old);
        export_as(fn, m, root, "want.gguf", &want);
        same_gguf(root, "old.gguf", "want.gguf");
    }
    /* the newest field is read when it is there */
    old = full;
    old.size = offsetof(pt_gguf_export_options, spm_scores);
    export_as(fn, m, root, "old.gguf", &old);
    ck_assert(differ_gguf(root, "full.gguf", "old.gguf") == spm_shows);
    char *p = subdir(root, "bad.gguf");
    BAD_SIZES(full, fn(m, p, &full), fn == pt_model_export_gguf ? "pt_model_export_gguf" : "pt_lora_export_gguf",
              "pt_gguf_export_options_init");
    free(p);
}

START_TEST(test_gguf_export)
{
    char *root = pt_test_tmpdir("pt_sizes_gguf");
    pt_model *m = gguf_model(root);
    gguf_cuts(pt_model_export_gguf, m, root, true);
    pt_lora_options lo;
    ck_assert_ok(pt_lora_options_init(&lo));
    lo.rank = 2;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    gguf_cuts(pt_lora_export_gguf, m, root, false);   /* an adapter has no vocabulary */
    pt_model_free(m);
    pt_test_rm_rf(root);
    free(root);
}
END_TEST

/* pt_goodput_get writes an older, smaller report up to its size.  wall,
 * seconds[PT_TIME_OTHER] and goodput follow the wall clock: compared only
 * for being filled, never bit for bit. */
#define GOODPUT_FIELDS(X, ...) X(__VA_ARGS__, pending) X(__VA_ARGS__, steps_kept) X(__VA_ARGS__, steps_lost)

START_TEST(test_goodput)
{
    pt_goodput *gp;
    ck_assert_ok(pt_goodput_create(&gp));
    for (int k = 0; k < PT_TIME_OTHER; k++)
        ck_assert_ok(pt_goodput_add(gp, k, 0.5 * (k + 1)));
    ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_commit(gp));
    ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_rollback(gp));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 0.25));
    pt_goodput_report full, c;
    ck_assert_ok(pt_goodput_report_init(&full));
    ck_assert_ok(pt_goodput_get(&full, gp));
    ck_assert(full.pending == 0.25 && full.steps_kept == 1 && full.steps_lost == 1);
    const size_t cuts[] = { offsetof(pt_goodput_report, steps_lost), offsetof(pt_goodput_report, goodput),
                            offsetof(pt_goodput_report, pending), offsetof(pt_goodput_report, seconds),
                            sizeof(size_t) };
    for (size_t j = 0; j < sizeof cuts / sizeof *cuts; j++) {
        ck_assert_ok(pt_goodput_report_init(&c));
        cut_out(&c, cuts[j], sizeof c);
        ck_assert_ok(pt_goodput_get(&c, gp));
        assert_canaries(&c, cuts[j], sizeof c, "pt_goodput_get");
        GOODPUT_FIELDS(CMP_FIELD, pt_goodput_report, c, full, cuts[j])
        if (offsetof(pt_goodput_report, seconds) + sizeof c.seconds <= cuts[j]) {
            ck_assert(!memcmp(c.seconds, full.seconds, PT_TIME_OTHER * sizeof *c.seconds));
            ck_assert(c.seconds[PT_TIME_OTHER] >= 0);
        }
        if (offsetof(pt_goodput_report, wall) + sizeof c.wall <= cuts[j])
            ck_assert(c.wall >= full.wall);
        if (offsetof(pt_goodput_report, goodput) + sizeof c.goodput <= cuts[j])
            ck_assert(c.goodput == (c.seconds[PT_TIME_STEP] + c.seconds[PT_TIME_GENERATE]) / c.wall);
    }
    BAD_SIZES(c, pt_goodput_get(&c, gp), "pt_goodput_get", "pt_goodput_report_init");
    pt_goodput_free(gp);
}
END_TEST

/* ---- episodes: pt_episode_options (and its nested pt_generate_options), the
 * pt_episode and pt_episode_stats outputs ----------------------------------- */

static int ep_env(pt_env_reply *rep, const pt_env_turn *t, void *payload)
{
    static const int32_t add[3] = { 4, 5, 6 };
    static float reward[2];
    (void)payload;
    reward[0] = (float)t->episode;
    reward[1] = (float)t->turn;
    if (t->turn >= 1 || t->final) {
        rep->action = PT_ENV_DONE;
        rep->rewards = reward;
    } else {
        rep->action = PT_ENV_APPEND;
        rep->ids = add;
        rep->n_ids = 3;
    }
    return 0;
}

static void ep_run(pt_episode_stats *st, pt_episode_results *res, pt_generator *g, const pt_episode_options *o)
{
    static const int32_t prompts[5] = { 1, 2, 3, 4, 5 }, lens[2] = { 3, 2 };
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, 2, o, ep_env, NULL));
    ck_assert_ok(pt_episode_stats_init(st));
    ck_assert_ok(pt_episode_results_stats(st, res));
}

#define EP_STATS_FIELDS(X, ...)                                                               \
    X(__VA_ARGS__, episodes) X(__VA_ARGS__, done) X(__VA_ARGS__, turns)                        \
    X(__VA_ARGS__, sampled_tokens) X(__VA_ARGS__, appended_tokens) X(__VA_ARGS__, prefill_tokens) \
    X(__VA_ARGS__, forward_tokens) X(__VA_ARGS__, steps) X(__VA_ARGS__, env_calls)                \
    X(__VA_ARGS__, env_pending)

START_TEST(test_episodes)
{
    pt_model *m = gen_model(-1);
    pt_generator *g;
    ck_assert_ok(pt_generator_create(&g, m, 2, 72));
    pt_episode_results *res, *res2;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episode_results_create(&res2));
    pt_episode_options full, old;
    pt_episode_stats ref, got;
    /* NULL options: the defaults */
    ck_assert_ok(pt_episode_options_init(&full));
    ep_run(&ref, res, g, &full);
    ep_run(&got, res2, g, NULL);
    ck_assert(ref.sampled_tokens == got.sampled_tokens && ref.steps == got.steps);
    /* without max_step_tokens: 0, the whole step (2 would split the appends) */
    full.max_step_tokens = 2;
    ep_run(&ref, res, g, &full);
    full.max_step_tokens = 0;
    ep_run(&got, res, g, &full);
    ck_assert_msg(ref.steps != got.steps, "max_step_tokens is not observable");
    old = full;
    old.max_step_tokens = 2;
    old.size = offsetof(pt_episode_options, max_step_tokens);
    ep_run(&ref, res, g, &old);
    EP_STATS_FIELDS(CMP_FIELD, pt_episode_stats, ref, got, sizeof ref)
    /* without n_reward_funcs and what follows: one reward function */
    old = full;
    old.n_reward_funcs = 2;
    ep_run(&ref, res, g, &old);
    pt_episode e;
    ck_assert_ok(pt_episode_init(&e));
    ck_assert_ok(pt_episode_results_get(&e, res, 1));
    ck_assert_int_eq(e.n_reward_funcs, 2);
    old.size = offsetof(pt_episode_options, n_reward_funcs);
    ep_run(&ref, res, g, &old);
    ck_assert_ok(pt_episode_results_get(&e, res, 1));
    ck_assert_int_eq(e.n_reward_funcs, 1);
    /* the nested sampling options of an older header: their defaults beyond */
    pt_generate_options so, so_old;
    ck_assert_ok(pt_generate_options_init(&so));
    so.max_new_tokens = 5;
    full.sampling = &so;
    ep_run(&ref, res, g, &full);
    so_old = so;
    so_old.seed = 99;
    so_old.size = offsetof(pt_generate_options, seed);
    full.sampling = &so_old;
    ep_run(&got, res2, g, &full);
    EP_STATS_FIELDS(CMP_FIELD, pt_episode_stats, ref, got, sizeof ref)
    pt_episode a, b;
    ck_assert_ok(pt_episode_init(&a));
    ck_assert_ok(pt_episode_init(&b));
    ck_assert_ok(pt_episode_results_get(&a, res, 0));
    ck_assert_ok(pt_episode_results_get(&b, res2, 0));
    ck_assert(a.n_ids == b.n_ids && !memcmp(a.ids, b.ids, (size_t)a.n_ids * sizeof *a.ids));
    BAD_SIZES(so_old, pt_episodes_run(res, g, (const int32_t[]){ 1 }, (const int32_t[]){ 1 }, NULL, 1, &full,
                                      ep_env, NULL), "pt_episodes_run", "pt_generate_options_init");
    full.sampling = NULL;
    BAD_SIZES(full, pt_episodes_run(res, g, (const int32_t[]){ 1 }, (const int32_t[]){ 1 }, NULL, 1, &full,
                                    ep_env, NULL), "pt_episodes_run", "pt_episode_options_init");
    /* outputs of an older header: their own bytes only */
    ep_run(&ref, res, g, NULL);
    pt_episode ef;
    ck_assert_ok(pt_episode_init(&ef));
    ck_assert_ok(pt_episode_results_get(&ef, res, 1));
    const size_t ecuts[] = { offsetof(pt_episode, error), offsetof(pt_episode, turn_rewards),
                             offsetof(pt_episode, n_turns), sizeof(size_t) };
    for (size_t j = 0; j < sizeof ecuts / sizeof *ecuts; j++) {
        pt_episode c;
        ck_assert_ok(pt_episode_init(&c));
        cut_out(&c, ecuts[j], sizeof c);
        ck_assert_ok(pt_episode_results_get(&c, res, 1));
        assert_canaries(&c, ecuts[j], sizeof c, "pt_episode_results_get");
        CMP_FIELD(pt_episode, c, ef, ecuts[j], n_ids)
        CMP_FIELD(pt_episode, c, ef, ecuts[j], ids)
        CMP_FIELD(pt_episode, c, ef, ecuts[j], n_turns)
        CMP_FIELD(pt_episode, c, ef, ecuts[j], rewards)
    }
    BAD_SIZES(ef, pt_episode_results_get(&ef, res, 0), "pt_episode_results_get", "pt_episode_init");
    const size_t scuts[] = { offsetof(pt_episode_stats, env_pending), offsetof(pt_episode_stats, tokens_per_second),
                             offsetof(pt_episode_stats, steps),
                             offsetof(pt_episode_stats, turns), sizeof(size_t) };
    for (size_t j = 0; j < sizeof scuts / sizeof *scuts; j++) {
        pt_episode_stats c;
        ck_assert_ok(pt_episode_stats_init(&c));
        cut_out(&c, scuts[j], sizeof c);
        ck_assert_ok(pt_episode_results_stats(&c, res));
        assert_canaries(&c, scuts[j], sizeof c, "pt_episode_results_stats");
        EP_STATS_FIELDS(CMP_FIELD, pt_episode_stats, c, ref, scuts[j])
    }
    BAD_SIZES(ref, pt_episode_results_stats(&ref, res), "pt_episode_results_stats", "pt_episode_stats_init");
    pt_episode_results_free(res);
    pt_episode_results_free(res2);
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

/* ---- every _init: NULL is PT_EINVAL, and it sets size to the header's sizeof ----- */

#define INIT_CASE(T, init)                                                                    \
    do {                                                                                      \
        T x_;                                                                                 \
        memset(&x_, CANARY, sizeof x_);                                                       \
        ck_assert_ok(init(&x_));                                                              \
        ck_assert_uint_eq(x_.size, sizeof(T));                                                \
        ck_assert_status(init(NULL), PT_EINVAL, #init);                                       \
    } while (0)

START_TEST(test_inits)
{
    INIT_CASE(pt_model_config, pt_model_config_init);
    INIT_CASE(pt_batch, pt_batch_init);
    INIT_CASE(pt_model_dir_info, pt_model_dir_info_init);
    INIT_CASE(pt_model_load_options, pt_model_load_options_init);
    INIT_CASE(pt_model_save_options, pt_model_save_options_init);
    INIT_CASE(pt_eval_options, pt_eval_options_init);
    INIT_CASE(pt_chat_options, pt_chat_options_init);
    INIT_CASE(pt_lora_options, pt_lora_options_init);
    INIT_CASE(pt_optimizer_options, pt_optimizer_options_init);
    INIT_CASE(pt_step_stats, pt_step_stats_init);
    INIT_CASE(pt_sft_stats, pt_sft_stats_init);
    INIT_CASE(pt_dataset_options, pt_dataset_options_init);
    INIT_CASE(pt_dataset_stats, pt_dataset_stats_init);
    INIT_CASE(pt_generate_options, pt_generate_options_init);
    INIT_CASE(pt_rollout_buffer_options, pt_rollout_buffer_options_init);
    INIT_CASE(pt_rollout_sample, pt_rollout_sample_init);
    INIT_CASE(pt_grpo_options, pt_grpo_options_init);
    INIT_CASE(pt_grpo_stats, pt_grpo_stats_init);
    INIT_CASE(pt_tensor_info, pt_tensor_info_init);
    INIT_CASE(pt_plot_options, pt_plot_options_init);
    INIT_CASE(pt_gguf_export_options, pt_gguf_export_options_init);
    INIT_CASE(pt_goodput_report, pt_goodput_report_init);
    INIT_CASE(pt_episode_options, pt_episode_options_init);
    INIT_CASE(pt_episode, pt_episode_init);
    INIT_CASE(pt_episode_stats, pt_episode_stats_init);
}
END_TEST

int main(void)
{
    pt_set_num_threads(1);
    Suite *s = suite_create("struct_sizes");
    TCase *tc = tcase_create("struct_sizes");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_inits);
    tcase_add_test(tc, test_config_inputs);
    tcase_add_test(tc, test_config_outputs);
    tcase_add_test(tc, test_batch);
    tcase_add_test(tc, test_optimizer);
    tcase_add_test(tc, test_sft);
    tcase_add_test(tc, test_lora);
    tcase_add_test(tc, test_generate);
    tcase_add_test(tc, test_chat);
    tcase_add_test(tc, test_save_load);
    tcase_add_test(tc, test_eval);
    tcase_add_test(tc, test_dataset);
    tcase_add_test(tc, test_grpo);
    tcase_add_test(tc, test_config_load_message);
    tcase_add_test(tc, test_get_config);
    tcase_add_test(tc, test_tensor_info);
    tcase_add_test(tc, test_sft_batch_without_targets);
    tcase_add_test(tc, test_get_lora);
    tcase_add_test(tc, test_dataset_load_message);
    tcase_add_test(tc, test_dataset_next_batch);
    tcase_add_test(tc, test_add_group_message);
    tcase_add_test(tc, test_gguf_export);
    tcase_add_test(tc, test_goodput);
    tcase_add_test(tc, test_episodes);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
