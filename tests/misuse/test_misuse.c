/* The misuse suite: each test makes one mistake a host can make with the
 * handles (an optimizer kept across a LoRA merge, a context and an optimizer
 * of different models, an unscored rollout buffer, a missing checkpoint, a
 * context longer than the model's positions, ...) and asserts the status,
 * the message, and that nothing was trained or lost. */
#include "testfs.h"

#include <limits.h>
#include <math.h>
#include <unistd.h>

#define V 29
#define T 8

static int32_t g_ids[T], g_tgt[T];

static pt_batch one_row(void)
{
    for (int i = 0; i < T; i++) {
        g_ids[i] = (int32_t)((i * 7 + 3) % V);
        g_tgt[i] = i + 1 < T ? (int32_t)(((i + 1) * 7 + 3) % V) : -1;
    }
    return pt_test_row_batch(g_ids, g_tgt, T);
}

static pt_optimizer *sgd(pt_model *m)
{
    pt_optimizer_options oo;
    ck_assert_ok(pt_optimizer_options_init(&oo));
    oo.type = PT_OPTIMIZER_SGD;
    oo.lr = 0.1;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    return opt;
}

/* A copy of tensor i's values (freed by the caller). */
static float *copy_tensor(const pt_model *m, size_t i, size_t *n)
{
    pt_tensor_info ti;
    ck_assert_ok(pt_tensor_info_init(&ti));
    ck_assert_ok(pt_model_tensor_info(&ti, m, i));
    float *c = malloc(ti.numel * sizeof *c);
    ck_assert_ptr_nonnull(c);
    memcpy(c, ti.data, ti.numel * sizeof *c);
    *n = ti.numel;
    return c;
}

static bool tensor_equals(const pt_model *m, size_t i, const float *c, size_t n)
{
    pt_tensor_info ti;
    ck_assert_ok(pt_tensor_info_init(&ti));
    ck_assert_ok(pt_model_tensor_info(&ti, m, i));
    return ti.numel == n && memcmp(ti.data, c, n * sizeof *c) == 0;
}

/* ---- structure changes under an optimizer ----------------------------------- */

START_TEST(test_merge_then_step_with_old_optimizer)
{
    pt_model *m = pt_test_tiny_llama(V, 1);
    ck_assert_ok(pt_model_add_lora(m, NULL)); /* NULL options: the defaults (rank 8, q|v) */
    pt_lora_options lo;
    ck_assert_ok(pt_lora_options_init(&lo));
    ck_assert_ok(pt_model_get_lora(&lo, m));
    ck_assert_int_eq(lo.rank, 8);
    pt_optimizer *opt = sgd(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    pt_batch b = one_row();
    pt_sft_stats s;
    ck_assert_ok(pt_sft_stats_init(&s));
    ck_assert_ok(pt_sft_step(&s, opt, ctx, &b, NULL, 1));
    ck_assert_int_eq(s.step, 1);

    ck_assert_ok(pt_model_merge_lora(m));
    size_t n0;
    float *w0 = copy_tensor(m, 0, &n0);
    ck_assert_status(pt_sft_step(&s, opt, ctx, &b, NULL, 1), PT_ESTATE,
                     "pt_sft_step: the model's tensors changed (LoRA merged) since this optimizer "
                     "was created: create a new optimizer");
    ck_assert_status(pt_optimizer_step(NULL, opt), PT_ESTATE, "pt_optimizer_step: the model's "
                     "tensors changed (LoRA merged)");
    ck_assert(tensor_equals(m, 0, w0, n0));
    ck_assert_status(pt_checkpoint_save(m, opt, NULL, "/tmp/pt_misuse_never_written"), PT_ESTATE,
                     "pt_checkpoint_save: the model's tensors changed (LoRA merged) since this "
                     "optimizer was created");
    struct stat sb;
    ck_assert_int_ne(stat("/tmp/pt_misuse_never_written", &sb), 0);

    /* the remedy: a new optimizer (the context follows the model) */
    pt_optimizer *opt2 = sgd(m);
    ck_assert_ok(pt_sft_step(&s, opt2, ctx, &b, NULL, 1));
    ck_assert_int_eq(s.step, 1);
    ck_assert(!tensor_equals(m, 0, w0, n0));
    free(w0);
    pt_optimizer_free(opt2);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_add_and_remove_lora_after_optimizer)
{
    pt_model *m = pt_test_tiny_llama(V, 2);
    pt_optimizer *opt = sgd(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    pt_batch b = one_row();
    ck_assert_ok(pt_model_add_lora(m, NULL));
    ck_assert_status(pt_sft_step(NULL, opt, ctx, &b, NULL, 1), PT_ESTATE,
                     "pt_sft_step: the model's tensors changed (LoRA adapters added) since this "
                     "optimizer was created: create a new optimizer");
    pt_optimizer *lopt;
    ck_assert_ok(pt_optimizer_create(&lopt, m, NULL)); /* NULL options: AdamW, lr 1e-4 */
    ck_assert_ok(pt_sft_step(NULL, lopt, ctx, &b, NULL, 1));
    double lr = 0;
    lr = pt_optimizer_lr(lopt);
    ck_assert(lr == 1e-4);
    ck_assert_ok(pt_model_remove_lora(m));
    ck_assert_status(pt_sft_step(NULL, lopt, ctx, &b, NULL, 1), PT_ESTATE,
                     "(LoRA adapters removed) since this optimizer was created");
    pt_optimizer_free(lopt);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_backward_across_lora_add)
{
    pt_model *m = pt_test_tiny_llama(V, 3);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    pt_batch b = one_row();
    float lp[T], dlp[T];
    for (int i = 0; i < T; i++)
        dlp[i] = -0.1f;
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    ck_assert_ok(pt_model_add_lora(m, NULL));
    ck_assert_status(pt_model_backward(ctx, dlp), PT_ESTATE,
                     "pt_model_backward: the model's tensors changed (LoRA adapters added) since "
                     "this context's forward pass: run the forward again");
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    ck_assert_ok(pt_model_backward(ctx, dlp));
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_generator_after_lora_add)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, V);
    c.max_position_embeddings = 128;
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, 4));
    pt_generator *g;
    ck_assert_ok(pt_generator_create(&g, m, 1, 80));
    int32_t prompt[3] = { 1, 2, 3 }, len = 3, toks[64], ntok;
    /* NULL options: the defaults (64 new tokens, temperature 1) */
    ck_assert_ok(pt_generate(g, prompt, &len, 1, NULL, toks, &ntok, NULL, NULL));
    ck_assert_int_ge(ntok, 1);
    ck_assert_int_le(ntok, 64);
    ck_assert_ok(pt_model_add_lora(m, NULL));
    ck_assert_status(pt_generate(g, prompt, &len, 1, NULL, toks, &ntok, NULL, NULL), PT_ESTATE,
                     "pt_generate: the model's tensors changed (LoRA adapters added) since this "
                     "generator was created: create a new generator");
    pt_generator_free(g);
    ck_assert_ok(pt_generator_create(&g, m, 1, 80));
    ck_assert_ok(pt_generate(g, prompt, &len, 1, NULL, toks, &ntok, NULL, NULL));
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

/* ---- handles of different models -------------------------------------------- */

START_TEST(test_sft_context_of_another_model)
{
    pt_model *a = pt_test_tiny_llama(V, 5), *b = pt_test_tiny_llama(V, 6);
    pt_optimizer *opt = sgd(a);
    pt_context *ctx_b;
    ck_assert_ok(pt_context_create(&ctx_b, b, 1, T));
    size_t na, nb;
    float *wa = copy_tensor(a, 0, &na), *wb = copy_tensor(b, 0, &nb);
    pt_batch bt = one_row();
    ck_assert_status(pt_sft_step(NULL, opt, ctx_b, &bt, NULL, 1), PT_EINVAL,
                     "pt_sft_step: ctx and opt belong to different models");
    ck_assert(tensor_equals(a, 0, wa, na));
    ck_assert(tensor_equals(b, 0, wb, nb));
    /* no gradient piled into b */
    pt_tensor_info ti;
    ck_assert_ok(pt_tensor_info_init(&ti));
    ck_assert_ok(pt_model_tensor_info(&ti, b, 0));
    for (size_t j = 0; ti.grad && j < ti.numel; j++)
        ck_assert_float_eq(ti.grad[j], 0.0f);
    int64_t step = -1;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, 0);
    free(wa);
    free(wb);
    pt_optimizer_free(opt);
    pt_context_free(ctx_b);
    pt_model_free(a);
    pt_model_free(b);
}
END_TEST

/* A buffer of one group of three samples (rewards: NULL for none). */
static pt_rollout_buffer *buffer_of(const float *rewards)
{
    static const int32_t ids[3][6] = { { 1, 2, 3, 4, 5, 6 }, { 1, 2, 3, 7, 8, 9 },
                                       { 1, 2, 3, 10, 11, 12 } };
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL)); /* NULL options: one reward function */
    pt_rollout_sample s[3];
    for (int i = 0; i < 3; i++) {
        ck_assert_ok(pt_rollout_sample_init(&s[i]));
        s[i].ids = ids[i];
        s[i].n_ids = 6;
        s[i].prompt_len = 3;
        s[i].group = 0;
        s[i].rewards = rewards ? &rewards[i] : NULL;
    }
    ck_assert_ok(pt_rollout_buffer_add_group(buf, s, 3));
    return buf;
}

START_TEST(test_grpo_context_of_another_model)
{
    pt_model *a = pt_test_tiny_llama(V, 7), *b = pt_test_tiny_llama(V, 8);
    pt_optimizer *opt = sgd(a);
    pt_context *ctx_b;
    ck_assert_ok(pt_context_create(&ctx_b, b, 3, T));
    const float r[3] = { 1.0f, 0.0f, 0.5f };
    pt_rollout_buffer *buf = buffer_of(r);
    size_t na;
    float *wa = copy_tensor(a, 0, &na);
    ck_assert_status(pt_grpo_step(NULL, opt, ctx_b, buf, NULL), PT_EINVAL,
                     "pt_grpo_step: ctx and opt belong to different models");
    ck_assert(tensor_equals(a, 0, wa, na));
    /* the right pair, with NULL options (the defaults) */
    pt_context *ctx_a;
    ck_assert_ok(pt_context_create(&ctx_a, a, 3, T));
    pt_grpo_stats gs;
    ck_assert_ok(pt_grpo_stats_init(&gs));
    ck_assert_ok(pt_grpo_step(&gs, opt, ctx_a, buf, NULL));
    ck_assert_int_eq(gs.step, 1);
    ck_assert_int_eq(gs.samples_unscored, 0);
    ck_assert(gs.train_seconds > 0);
    ck_assert(!tensor_equals(a, 0, wa, na));
    free(wa);
    pt_rollout_buffer_free(buf);
    pt_optimizer_free(opt);
    pt_context_free(ctx_a);
    pt_context_free(ctx_b);
    pt_model_free(a);
    pt_model_free(b);
}
END_TEST

START_TEST(test_checkpoint_optimizer_of_another_model)
{
    pt_model *a = pt_test_tiny_llama(V, 9), *b = pt_test_tiny_llama(V, 10);
    pt_optimizer *opt = sgd(a);
    char dir[] = "/tmp/pt_misuse_ckpt_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[sizeof dir + 16];
    snprintf(path, sizeof path, "%s/ck", dir);
    ck_assert_status(pt_checkpoint_save(b, opt, NULL, path), PT_EINVAL,
                     "pt_checkpoint_save: opt was created for another model");
    struct stat sb;
    ck_assert_int_ne(stat(path, &sb), 0); /* nothing written */
    ck_assert_ok(pt_checkpoint_save(a, opt, NULL, path));
    ck_assert_status(pt_checkpoint_load(NULL, b, opt, path), PT_EINVAL,
                     "pt_checkpoint_load: opt was created for another model");
    ck_assert_ok(pt_checkpoint_load(NULL, a, opt, path));
    char cmd[sizeof dir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    pt_optimizer_free(opt);
    pt_model_free(a);
    pt_model_free(b);
}
END_TEST

START_TEST(test_checkpoint_missing_directory)
{
    pt_model *m = pt_test_tiny_llama(V, 11);
    pt_optimizer *opt = sgd(m);
    char *host = (char *)1;
    ck_assert_status(pt_checkpoint_load(&host, m, opt, "/tmp/pt_misuse_no_such_checkpoint/ck"),
                     PT_ENOTFOUND, "/tmp/pt_misuse_no_such_checkpoint/ck does not exist");
    ck_assert_ptr_null(host);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* ---- rollout buffers without rewards ------------------------------------------ */

static void grpo_refused(const float *rewards)
{
    pt_model *m = pt_test_tiny_llama(V, 12);
    pt_optimizer *opt = sgd(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 3, T));
    pt_rollout_buffer *buf = buffer_of(rewards);
    size_t n;
    float *w = copy_tensor(m, 0, &n);
    ck_assert_status(pt_grpo_step(NULL, opt, ctx, buf, NULL), PT_ESTATE,
                     "pt_grpo_step: no sample has a reward: score the buffer first");
    ck_assert(tensor_equals(m, 0, w, n));
    int64_t step = -1;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, 0);
    free(w);
    pt_rollout_buffer_free(buf);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}

START_TEST(test_grpo_unscored_buffer)
{
    grpo_refused(NULL);
}
END_TEST

/* Every reward function declined every sample (TRL's all-None step): the
 * step is skipped with PT_SKIP_NO_REWARDS, counted, nothing changed. */
START_TEST(test_grpo_all_declined_buffer)
{
    pt_model *m = pt_test_tiny_llama(V, 12);
    pt_optimizer *opt = sgd(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 3, T));
    const float r[3] = { NAN, NAN, NAN };
    pt_rollout_buffer *buf = buffer_of(r);
    size_t n;
    float *w = copy_tensor(m, 0, &n);
    pt_grpo_stats gs;
    ck_assert_ok(pt_grpo_stats_init(&gs));
    ck_assert_ok(pt_grpo_step(&gs, opt, ctx, buf, NULL));
    ck_assert(gs.skipped);
    ck_assert_int_eq(gs.skip_reason, PT_SKIP_NO_REWARDS);
    ck_assert_str_eq(pt_skip_reason_name(gs.skip_reason), "no_rewards");
    ck_assert_int_eq(gs.skipped_total, 1);
    ck_assert_int_eq(gs.samples_unscored, 3);
    ck_assert(isnan(gs.reward));
    ck_assert(gs.tokens == 0);
    ck_assert(tensor_equals(m, 0, w, n));
    int64_t step = -1;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, 0);
    /* one declined sample scored later: the step trains */
    ck_assert_ok(pt_rollout_buffer_set_reward(buf, 0, 0, 1.0f));
    ck_assert_ok(pt_grpo_step(&gs, opt, ctx, buf, NULL));
    ck_assert(!gs.skipped);
    ck_assert_int_eq(gs.samples_unscored, 2);
    free(w);
    pt_rollout_buffer_free(buf);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_grpo_some_declined_counted)
{
    pt_model *m = pt_test_tiny_llama(V, 13);
    pt_optimizer *opt = sgd(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 3, T));
    const float r[3] = { 1.0f, NAN, 0.0f };
    pt_rollout_buffer *buf = buffer_of(r);
    pt_grpo_stats gs;
    ck_assert_ok(pt_grpo_stats_init(&gs));
    ck_assert_ok(pt_grpo_step(&gs, opt, ctx, buf, NULL));
    ck_assert_int_eq(gs.samples_unscored, 1);
    ck_assert_int_eq(gs.step, 1);
    pt_rollout_buffer_free(buf);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* ---- lengths beyond the model's positions ------------------------------------- */

START_TEST(test_context_longer_than_positions)
{
    pt_model *m = pt_test_tiny_llama(V, 14); /* max_position_embeddings 64 */
    pt_context *ctx = NULL;
    ck_assert_status(pt_context_create(&ctx, m, 1, 65), PT_ERANGE,
                     "pt_context_create: max_seq 65 exceeds the model's max_position_embeddings 64");
    ck_assert_ptr_null(ctx);
    pt_generator *g = NULL;
    ck_assert_status(pt_generator_create(&g, m, 1, 100), PT_ERANGE,
                     "pt_generator_create: max_seq 100 exceeds the model's "
                     "max_position_embeddings 64");
    ck_assert_ptr_null(g);
    ck_assert_ok(pt_context_create(&ctx, m, 1, 64)); /* exactly the positions: fine */
    pt_context_free(ctx);

    ck_assert(!pt_model_allow_long_context(m));
    ck_assert_ok(pt_model_set_allow_long_context(m, true));
    ck_assert(pt_model_allow_long_context(m));
    ck_assert_ok(pt_context_create(&ctx, m, 1, 65));
    ck_assert_ok(pt_generator_create(&g, m, 1, 100));
    /* the opted-in context really runs positions beyond 64 */
    int32_t ids[65], tgt[65];
    for (int i = 0; i < 65; i++) {
        ids[i] = (int32_t)(i % V);
        tgt[i] = -1;
    }
    pt_batch b = pt_test_row_batch(ids, tgt, 65);
    float lp[65];
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    pt_generator_free(g);
    pt_context_free(ctx);
    ck_assert_status(pt_model_set_allow_long_context(NULL, true), PT_EINVAL, "model is NULL");
    pt_model_free(m);
}
END_TEST

/* ---- non-finite weights are never loaded, saved or exported ---------------------- */

/* Element `at` of the F32 tensor `name` in the safetensors file `path` := v;
 * the value it held. */
static float poke_st(const char *path, const char *name, size_t at, float v)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    unsigned char len8[8];
    ck_assert_int_eq(fread(len8, 1, 8, f), 8);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    char *h = calloc(1, hlen + 1);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(fread(h, 1, hlen, f), hlen);
    char key[256];
    snprintf(key, sizeof key, "\"%s\"", name);
    const char *t = strstr(h, key);
    ck_assert_msg(t != NULL, "no tensor %s in %s", name, path);
    const char *o = strchr(strstr(t, "data_offsets"), '[');
    unsigned long long off = strtoull(o + 1, NULL, 10);
    free(h);
    float old;
    ck_assert_int_eq(fseek(f, (long)(8 + hlen + off + 4 * at), SEEK_SET), 0);
    ck_assert_int_eq(fread(&old, 4, 1, f), 1);
    ck_assert_int_eq(fseek(f, (long)(8 + hlen + off + 4 * at), SEEK_SET), 0);
    ck_assert_int_eq(fwrite(&v, 4, 1, f), 1);
    ck_assert_int_eq(fclose(f), 0);
    return old;
}

START_TEST(test_nonfinite_model_and_adapter_refused)
{
    char root[] = "/tmp/pt_misuse_nonfin_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char dir[128], adir[128], adir2[128], gguf[128], path[256], want[512];
    snprintf(dir, sizeof dir, "%s/model", root);
    snprintf(adir, sizeof adir, "%s/adapter", root);
    snprintf(adir2, sizeof adir2, "%s/adapter2", root);
    snprintf(gguf, sizeof gguf, "%s/adapter.gguf", root);
    pt_model *m = pt_test_tiny_llama(V, 3);
    ck_assert_ok(pt_model_save_dir(m, dir, NULL));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *up = "model.layers.1.mlp.up_proj.weight";
    float keep = poke_st(path, up, 5, NAN);
    pt_model *m2 = (pt_model *)&keep; /* must come back NULL */
    snprintf(want, sizeof want, "pt_model_load_dir: %s: tensor '%s': holds NaN at element 5", dir, up);
    ck_assert_status(pt_model_load_dir(&m2, dir, NULL), PT_ENONFINITE, want);
    ck_assert_ptr_null(m2);
    poke_st(path, up, 5, -INFINITY);
    snprintf(want, sizeof want, "pt_model_load_dir: %s: tensor '%s': holds -inf at element 5", dir, up);
    ck_assert_status(pt_model_load_dir(&m2, dir, NULL), PT_ENONFINITE, want);
    poke_st(path, up, 5, keep);
    ck_assert_ok(pt_model_load_dir(&m2, dir, NULL));

    /* a PEFT adapter with an infinity: refused, the model left without adapters */
    ck_assert_ok(pt_model_add_lora(m, NULL));
    ck_assert_ok(pt_lora_save_peft(m, adir, NULL));
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", adir);
    const char *lb = "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight";
    poke_st(path, lb, 7, INFINITY);
    snprintf(want, sizeof want, "pt_lora_load_peft: %s: tensor '%s': holds +inf at element 7", path, lb);
    ck_assert_status(pt_lora_load_peft(m2, adir), PT_ENONFINITE, want);
    ck_assert(!pt_model_has_lora(m2));
    poke_st(path, lb, 7, 0.5f);
    ck_assert_ok(pt_lora_load_peft(m2, adir));
    ck_assert(pt_model_has_lora(m2));

    /* an adapter that went non-finite in memory is neither saved nor exported */
    size_t nt = 0;
    nt = pt_model_tensor_count(m);
    pt_tensor_info ti;
    ck_assert_ok(pt_tensor_info_init(&ti));
    ck_assert_ok(pt_model_tensor_info(&ti, m, nt - 1));
    ck_assert(ti.adapter);
    ti.data[ti.numel - 1] = NAN;
    snprintf(want, sizeof want, "pt_lora_save_peft: %s: tensor '%s' holds NaN at element %zu", adir2, ti.name,
             ti.numel - 1);
    ck_assert_status(pt_lora_save_peft(m, adir2, NULL), PT_ENONFINITE, want);
    struct stat sb;
    ck_assert_int_ne(stat(adir2, &sb), 0);
    snprintf(want, sizeof want, "pt_lora_export_gguf: %s: tensor '%s' holds NaN at element %zu", gguf, ti.name,
             ti.numel - 1);
    ck_assert_status(pt_lora_export_gguf(m, gguf, NULL), PT_ENONFINITE, want);
    ck_assert_int_ne(stat(gguf, &sb), 0);
    pt_model_free(m2);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
}
END_TEST

/* ---- counts beyond any possible input ----------------------------------------- */

/* A count no array can have ((size_t)-1: a -1 cast) is PT_ERANGE naming the
 * call before anything is read (ASan would report the read otherwise). */
START_TEST(test_impossible_counts)
{
    pt_dataset *d;
    ck_assert_ok(pt_dataset_create(&d, NULL));
    int32_t ids[4] = { 1, 2, 3, 4 };
    ck_assert_status(pt_dataset_add(d, ids, NULL, (size_t)-1), PT_ERANGE,
                     "pt_dataset_add: n = 18446744073709551615 is beyond any possible example");
    ck_assert_status(pt_dataset_add(d, ids, NULL, ((size_t)1 << 28) + 1), PT_ERANGE, "pt_dataset_add: n = ");
    pt_dataset_stats ds;
    ck_assert_ok(pt_dataset_stats_init(&ds));
    ck_assert_ok(pt_dataset_get_stats(&ds, d));
    ck_assert_int_eq(ds.rows, 0);
    ck_assert_ok(pt_dataset_add(d, ids, NULL, 4)); /* the same array with its count */
    ck_assert_ok(pt_dataset_get_stats(&ds, d));
    ck_assert_int_eq(ds.rows, 1);
    pt_dataset_free(d);

    const char *json = "{}";
    pt_model_config c;
    ck_assert_ok(pt_model_config_init(&c));
    ck_assert_status(pt_model_config_from_json(&c, json, (size_t)-1), PT_ERANGE,
                     "pt_model_config_from_json: len = 18446744073709551615 is beyond any possible config.json");
    pt_tokenizer *tok = NULL;
    ck_assert_status(pt_tokenizer_load_memory(&tok, json, (size_t)-1), PT_ERANGE, "pt_tokenizer_load_memory: len");
    ck_assert_status(pt_tokenizer_load_memory_config(&tok, json, 2, json, (size_t)-1), PT_ERANGE,
                     "pt_tokenizer_load_memory_config: config_len");
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_create(&t, "chatml"));
    pt_chat_message msg = { .role = PT_CHAT_ROLE_USER, .content = "hi" };
    char *text = NULL;
    ck_assert_status(pt_chat_render(&text, NULL, t, &msg, (size_t)-1, NULL), PT_ERANGE,
                     "pt_chat_render: n_messages = 18446744073709551615 is beyond any possible conversation");
    pt_chat_tool_call *calls = NULL;
    size_t n_calls = 0;
    ck_assert_status(pt_chat_parse_tool_calls(&calls, &n_calls, NULL, t, "x", (size_t)-1), PT_ERANGE,
                     "pt_chat_parse_tool_calls: len");
    pt_chat_template_free(t);

    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    pt_rollout_sample s;
    ck_assert_ok(pt_rollout_sample_init(&s));
    ck_assert_status(pt_rollout_buffer_add_group(buf, &s, INT_MAX), PT_ERANGE,
                     "pt_rollout_buffer_add_group: n = 2147483647 is beyond any possible group");
    int32_t six[6] = { 1, 2, 3, 4, 5, 6 };
    s.ids = six;
    s.prompt_len = 3;
    s.n_ids = INT_MAX;
    ck_assert_status(pt_rollout_buffer_add(buf, &s), PT_ERANGE,
                     "pt_rollout_buffer_add: sample 0: n_ids = 2147483647 is beyond any possible sample");
    int n = -1;
    n = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(n, 0);
    pt_rollout_buffer_free(buf);
}
END_TEST

/* ---- a reward function that changes the buffer it scores ---------------------- */

typedef struct meddler {
    pt_rollout_buffer *buf;
    int what;        /* 0: add, 1: clear, 2: set_reward, 3: score again, 4: free */
    int status;      /* what the refused call returned */
    char msg[512];
} meddler;

static int meddle(float *rewards, const pt_reward_batch *b, void *payload)
{
    meddler *md = payload;
    static const int32_t more[6] = { 1, 2, 3, 4, 5, 6 };
    pt_rollout_sample s;
    pt_rollout_sample_init(&s);
    s.ids = more;
    s.n_ids = 6;
    s.prompt_len = 3;
    switch (md->what) {
    case 0: md->status = pt_rollout_buffer_add(md->buf, &s); break;
    case 1: md->status = pt_rollout_buffer_clear(md->buf); break;
    case 2: md->status = pt_rollout_buffer_set_reward(md->buf, 0, 0, 5.0f); break;
    case 3: md->status = pt_rollout_buffer_score(md->buf, 0, meddle, md); break;
    default: pt_rollout_buffer_free(md->buf); md->status = PT_OK; break;
    }
    snprintf(md->msg, sizeof md->msg, "%s", pt_last_error());
    for (int i = 0; i < b->n; i++)
        rewards[i] = (float)(i + 1);
    return 0;
}

START_TEST(test_reward_fn_changing_its_buffer)
{
    static const char *const calls[4] = { "pt_rollout_buffer_add", "pt_rollout_buffer_clear",
                                          "pt_rollout_buffer_set_reward", "pt_rollout_buffer_score" };
    for (int what = 0; what < 4; what++) {
        pt_rollout_buffer *buf = buffer_of(NULL);
        meddler md = { .buf = buf, .what = what };
        ck_assert_ok(pt_rollout_buffer_score(buf, 0, meddle, &md));
        ck_assert_int_eq(md.status, PT_ESTATE);
        char want[256];
        snprintf(want, sizeof want, "%s: the buffer is being scored", calls[what]);
        ck_assert_msg(strstr(md.msg, want) == md.msg, "%s: '%s'", calls[what], md.msg);
        /* the scoring went on over the samples it was given */
        int n = 0;
        n = pt_rollout_buffer_size(buf);
        ck_assert_int_eq(n, 3);
        for (int i = 0; i < 3; i++) {
            float r = 0;
            ck_assert_ok(pt_rollout_buffer_get_reward(&r, buf, i, 0));
            ck_assert_float_eq(r, (float)(i + 1));
        }
        /* and the buffer takes changes again afterwards */
        ck_assert_ok(pt_rollout_buffer_set_reward(buf, 0, 0, 9.0f));
        ck_assert_ok(pt_rollout_buffer_clear(buf));
        pt_rollout_buffer_free(buf);
    }
    /* a reward function that frees the buffer: freed once it returns */
    pt_rollout_buffer *buf = buffer_of(NULL);
    meddler md = { .buf = buf, .what = 4 };
    ck_assert_status(pt_rollout_buffer_score(buf, 0, meddle, &md), PT_ESTATE,
                     "pt_rollout_buffer_score: reward function 0 freed the buffer it was scoring");
}
END_TEST

/* ---- messages name the function the host called ------------------------------- */

START_TEST(test_messages_name_the_public_call)
{
    pt_model *m = pt_test_tiny_llama(V, 21);
    pt_context *ctx = NULL;
    ck_assert_status(pt_context_create(&ctx, m, 0, T), PT_EINVAL, "pt_context_create: max_batch 0 must be positive");
    ck_assert(strncmp(pt_last_error(), "pt_context_create:", 18) == 0);
    ck_assert_status(pt_context_create(&ctx, m, 1, -3), PT_EINVAL, "pt_context_create: max_seq -3 must be positive");
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    int32_t bad[T];
    for (int i = 0; i < T; i++)
        bad[i] = i == 5 ? V + 7 : 1;
    pt_batch b = pt_test_row_batch(bad, NULL, T);
    float lp[T];
    ck_assert_status(pt_model_forward(ctx, &b, lp, NULL), PT_ERANGE,
                     "input id 36 at row 0 position 5 is outside the vocabulary [0, 29)");
    ck_assert(strncmp(pt_last_error(), "pt_model_forward: batch: input id 36", 36) == 0);
    pt_optimizer *opt = sgd(m);
    int32_t tg[T];
    for (int i = 0; i < T; i++)
        tg[i] = 1;
    b = pt_test_row_batch(bad, tg, T);
    pt_sft_stats s;
    ck_assert_ok(pt_sft_stats_init(&s));
    ck_assert_status(pt_sft_step(&s, opt, ctx, &b, NULL, 1), PT_ERANGE, "input id 36 at row 0 position 5");
    ck_assert_msg(strncmp(pt_last_error(), "pt_sft_step: ", 13) == 0, "%s", pt_last_error());
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

static Suite *misuse_suite(void)
{
    Suite *s = suite_create("misuse");
    TCase *tc = tcase_create("misuse");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_merge_then_step_with_old_optimizer);
    tcase_add_test(tc, test_add_and_remove_lora_after_optimizer);
    tcase_add_test(tc, test_backward_across_lora_add);
    tcase_add_test(tc, test_generator_after_lora_add);
    tcase_add_test(tc, test_sft_context_of_another_model);
    tcase_add_test(tc, test_grpo_context_of_another_model);
    tcase_add_test(tc, test_checkpoint_optimizer_of_another_model);
    tcase_add_test(tc, test_checkpoint_missing_directory);
    tcase_add_test(tc, test_grpo_unscored_buffer);
    tcase_add_test(tc, test_grpo_all_declined_buffer);
    tcase_add_test(tc, test_grpo_some_declined_counted);
    tcase_add_test(tc, test_context_longer_than_positions);
    tcase_add_test(tc, test_nonfinite_model_and_adapter_refused);
    tcase_add_test(tc, test_impossible_counts);
    tcase_add_test(tc, test_reward_fn_changing_its_buffer);
    tcase_add_test(tc, test_messages_name_the_public_call);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(misuse_suite());
}
