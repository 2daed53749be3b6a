/* PyTorch parity: logits, log-probabilities, loss and every parameter's
 * gradient of four tiny configurations against goldens computed in float64 by
 * tests/reference/gen_parity.py (an independent PyTorch re-implementation of
 * Hugging Face's LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM).
 *
 * A fifth, qwen2_packed, packs several sequences per row (segment ids,
 * rotary positions given explicitly, -1 targets at sequence ends).
 * mistral_sliding has a sliding window of 5 over 12 tokens (GQA, untied,
 * head_dim 12 != hidden / heads), and mistral_packed packs segments longer
 * than the window; the generator shows that no window, W+1 or W-1 keys,
 * or a window over position ids miss the bounds by thousands of times.
 *
 * Tolerance: |ours - golden| <= 1e-4 + 1e-3*|golden| for logits, log-probs
 * and gradients; 2e-5 absolute for the loss (about 5.5 nats).  A float32
 * implementation of the same math sits around 1e-6 here; the generator checks
 * that interleaved RoPE, a tiled GQA head mapping, a default rope_theta, a
 * missing bias / q-k norm / llama3 scaling each miss these bounds by hundreds
 * of times. */
#include "parity_util.h"

#include "posttrain/modelio.h"

#define ATOL 1e-4
#define RTOL 1e-3
#define LOSS_ATOL 2e-5

static const char *const cases[] = {
    "llama_tied_gqa",
    "qwen2_bias_untied",
    "qwen3_qknorm",
    "llama3_rope_scaling",
    "qwen2_packed", /* packed rows: segments, irregular positions, -1 targets */
    "mistral_sliding", /* sliding window 5 < T = 12 */
    "mistral_packed",  /* the window inside packed segments */
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct golden_case {
    const char *name;
    char dir[1024];
    pt_model *model;
    pt_model_config cfg;
    pt_st_file *golden;
    int B, T, V;
    int32_t *ids, *targets;
    int32_t *positions, *segments; /* NULL unless the golden has them */
    float *weights, *dlogprobs, *logits, *logprobs;
    float loss;
} golden_case;

static float *golden_f32(pt_st_file *f, const char *name, size_t expect_numel)
{
    const pt_st_tensor *t = pt__st_find(f, name);
    ck_assert_msg(t != NULL, "golden tensor %s missing", name);
    ck_assert_msg(t->dtype == PT_ST_F32, "golden tensor %s is not F32", name);
    ck_assert_msg(t->numel == expect_numel, "golden %s has %zu elements, expected %zu", name,
                  t->numel, expect_numel);
    float *v = malloc(t->numel * sizeof *v);
    ck_assert_ptr_nonnull(v);
    ck_assert_ok(pt__st_read_f32(t, v, t->numel));
    return v;
}

static int32_t *golden_i32(pt_st_file *f, const char *name, size_t expect_numel)
{
    const pt_st_tensor *t = pt__st_find(f, name);
    ck_assert_msg(t != NULL, "golden tensor %s missing", name);
    ck_assert_msg(t->dtype == PT_ST_I32 && t->numel == expect_numel,
                  "golden %s: wrong dtype or size", name);
    int32_t *v = malloc(t->numel * sizeof *v);
    ck_assert_ptr_nonnull(v);
    memcpy(v, t->data, t->numel * sizeof *v);
    return v;
}

static void case_open(golden_case *c, int i)
{
    memset(c, 0, sizeof *c);
    c->name = cases[i];
    snprintf(c->dir, sizeof c->dir, "%s/reference/%s", PT_TEST_SRCDIR, c->name);
    ck_assert_msg(parity_load_model(&c->model, c->dir) == PT_OK, "%s: loading the model: %s",
                  c->name, pt_last_error());
    pt_model_config_init(&c->cfg);
    ck_assert_ok(pt_model_get_config(&c->cfg, c->model));
    char path[1100];
    snprintf(path, sizeof path, "%s/golden.safetensors", c->dir);
    ck_assert_ok(pt__st_open(&c->golden, path));
    const pt_st_tensor *ids = pt__st_find(c->golden, "input_ids");
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(ids->ndim, 2);
    c->B = (int)ids->shape[0];
    c->T = (int)ids->shape[1];
    c->V = c->cfg.vocab_size;
    size_t bt = (size_t)c->B * (size_t)c->T;
    c->ids = golden_i32(c->golden, "input_ids", bt);
    c->targets = golden_i32(c->golden, "targets", bt);
    if (pt__st_find(c->golden, "positions"))
        c->positions = golden_i32(c->golden, "positions", bt);
    if (pt__st_find(c->golden, "segments"))
        c->segments = golden_i32(c->golden, "segments", bt);
    c->weights = golden_f32(c->golden, "weights", bt);
    c->dlogprobs = golden_f32(c->golden, "dlogprobs", bt);
    c->logprobs = golden_f32(c->golden, "logprobs", bt);
    c->logits = golden_f32(c->golden, "logits", bt * (size_t)c->V);
    float *loss = golden_f32(c->golden, "loss", 1);
    c->loss = loss[0];
    free(loss);
}

static void case_close(golden_case *c)
{
    pt_model_free(c->model);
    pt__st_close(c->golden);
    free(c->ids);
    free(c->targets);
    free(c->positions);
    free(c->segments);
    free(c->weights);
    free(c->dlogprobs);
    free(c->logprobs);
    free(c->logits);
}

static pt_batch case_batch(const golden_case *c)
{
    pt_batch b;
    pt_batch_init(&b);
    b.batch = c->B;
    b.seq = c->T;
    b.input_ids = c->ids;
    b.targets = c->targets;
    b.positions = c->positions;
    b.segments = c->segments;
    return b;
}

/* A context for model m sized for the case's batch. */
static pt_context *case_context(const golden_case *c, pt_model *m)
{
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, c->B, c->T));
    return ctx;
}

/* The weighted mean loss of the case's batch (gradients too when backward). */
static float case_loss(const golden_case *c, pt_context *ctx, bool backward)
{
    pt_batch b = case_batch(c);
    float loss = NAN;
    ck_assert_ok(pt_model_loss(ctx, &b, c->weights, backward, &loss));
    return loss;
}

static void check_loss(const golden_case *c, float loss)
{
    ck_assert_msg(fabs((double)loss - (double)c->loss) <= LOSS_ATOL, "%s: loss %.9g, golden %.9g",
                  c->name, (double)loss, (double)c->loss);
}

/* Forward of the case's batch with materialised logits: logits and log-probs
 * against the goldens (named "<case>: <what_logits>" and "<case>: <what_lp>").
 * Returns the log-probs (free them). */
static float *check_forward(const golden_case *c, pt_context *ctx, const char *what_logits,
                            const char *what_lp)
{
    pt_batch b = case_batch(c);
    size_t bt = (size_t)c->B * (size_t)c->T;
    float *logits = calloc(bt * (size_t)c->V, sizeof *logits);
    float *lp = calloc(bt, sizeof *lp);
    ck_assert_ok(pt_model_forward(ctx, &b, lp, logits));
    int64_t shape3[3] = { c->B, c->T, c->V }, shape2[2] = { c->B, c->T };
    char what[256];
    snprintf(what, sizeof what, "%s: %s", c->name, what_logits);
    parity_assert_close(what, logits, c->logits, bt * (size_t)c->V, shape3, 3, ATOL, RTOL);
    snprintf(what, sizeof what, "%s: %s", c->name, what_lp);
    parity_assert_close(what, lp, c->logprobs, bt, shape2, 2, ATOL, RTOL);
    free(logits);
    return lp;
}

/* Compare every parameter's gradient with scale * the gradients of golden
 * file f. */
static void check_grads_in(const golden_case *c, pt_st_file *f, float scale, const char *how)
{
    size_t n = pt_model_tensor_count(c->model);
    size_t ngolden = 0;
    for (size_t i = 0; i < pt__st_count(f); i++)
        ngolden += strncmp(pt__st_tensor_at(f, i)->name, "grad.", 5) == 0;
    ck_assert_msg(n == ngolden, "%s: model has %zu tensors, golden has %zu gradients", c->name, n,
                  ngolden);
    for (size_t i = 0; i < n; i++) {
        const pt_tensor_ref *t = pt__model_tensor(c->model, i);
        char gname[512], what[700];
        snprintf(gname, sizeof gname, "grad.%s", t->name);
        snprintf(what, sizeof what, "%s: %s: gradient of %s", c->name, how, t->name);
        ck_assert_msg(t->grad != NULL, "%s is NULL", what);
        float *ref = golden_f32(f, gname, t->numel);
        for (size_t k = 0; k < t->numel; k++)
            ref[k] *= scale;
        parity_assert_close(what, t->grad, ref, t->numel, t->shape, t->ndim, ATOL, RTOL);
        free(ref);
    }
}

static void check_grads(const golden_case *c, float scale, const char *how)
{
    check_grads_in(c, c->golden, scale, how);
}

/* Forward: logits, log-probs (with and without materialised logits), loss. */
START_TEST(test_forward)
{
    golden_case c;
    case_open(&c, _i);
    pt_context *ctx = case_context(&c, c.model);
    float *lp = check_forward(&c, ctx, "logits", "logprobs (with logits)");

    /* Without logits the LM head runs in chunks: same log-probs. */
    pt_batch b = case_batch(&c);
    size_t bt = (size_t)c.B * (size_t)c.T;
    int64_t shape2[2] = { c.B, c.T };
    char what[256];
    memset(lp, 0, bt * sizeof *lp);
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    snprintf(what, sizeof what, "%s: logprobs (no logits)", c.name);
    parity_assert_close(what, lp, c.logprobs, bt, shape2, 2, ATOL, RTOL);

    check_loss(&c, case_loss(&c, ctx, false));
    free(lp);
    pt_context_free(ctx);
    case_close(&c);
}
END_TEST

/* Each row alone, and a prefix of it, gives the golden rows: no leakage
 * across the batch, and the attention is causal. */
START_TEST(test_rows_and_prefix)
{
    golden_case c;
    case_open(&c, _i);
    pt_context *ctx = case_context(&c, c.model);
    int tp = c.T - 3;
    float *logits = calloc((size_t)c.T * (size_t)c.V, sizeof *logits);
    for (int r = 0; r < c.B; r++) {
        for (int pass = 0; pass < 2; pass++) {
            int t = pass == 0 ? c.T : tp;
            pt_batch b = pt_test_row_batch(c.ids + (size_t)r * (size_t)c.T,
                                           c.targets + (size_t)r * (size_t)c.T, t);
            if (c.positions)
                b.positions = c.positions + (size_t)r * (size_t)c.T;
            if (c.segments)
                b.segments = c.segments + (size_t)r * (size_t)c.T;
            ck_assert_ok(pt_model_forward(ctx, &b, NULL, logits));
            int64_t shape[2] = { t, c.V };
            char what[256];
            snprintf(what, sizeof what, "%s: logits of row %d alone, first %d positions", c.name,
                     r, t);
            parity_assert_close(what, logits, c.logits + (size_t)r * (size_t)c.T * (size_t)c.V,
                                (size_t)t * (size_t)c.V, shape, 2, ATOL, RTOL);
        }
    }
    free(logits);
    pt_context_free(ctx);
    case_close(&c);
}
END_TEST

/* Gradients of the weighted mean loss through pt_model_loss(backward=true). */
START_TEST(test_loss_backward)
{
    golden_case c;
    case_open(&c, _i);
    pt_context *ctx = case_context(&c, c.model);
    ck_assert_ok(pt_model_zero_grad(c.model));
    check_loss(&c, case_loss(&c, ctx, true));
    check_grads(&c, 1.0f, "pt_model_loss");
    pt_context_free(ctx);
    case_close(&c);
}
END_TEST

/* The same gradients through forward + backward(dlogprobs = -w/sum(w)); a
 * second pass without zeroing accumulates (2x), and zero_grad clears. */
START_TEST(test_forward_backward)
{
    golden_case c;
    case_open(&c, _i);
    pt_context *ctx = case_context(&c, c.model);
    pt_batch b = case_batch(&c);
    size_t bt = (size_t)c.B * (size_t)c.T;
    float *lp = calloc(bt, sizeof *lp);
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    ck_assert_ok(pt_model_backward(ctx, c.dlogprobs));
    check_grads(&c, 1.0f, "forward+backward");

    case_loss(&c, ctx, true);
    check_grads(&c, 2.0f, "accumulated twice");

    ck_assert_ok(pt_model_zero_grad(c.model));
    for (size_t i = 0; i < pt_model_tensor_count(c.model); i++) {
        const pt_tensor_ref *t = pt__model_tensor(c.model, i);
        for (size_t k = 0; k < t->numel; k++)
            ck_assert_msg(t->grad[k] == 0.0f, "%s: %s[%zu] not zero after zero_grad", c.name,
                          t->name, k);
    }
    free(lp);
    pt_context_free(ctx);
    case_close(&c);
}
END_TEST

/* pt_model_load_dir (the modelio path) reads the same tensors bit for bit as
 * the suite's own loader, and its model gives the golden loss and gradients
 * of the embedding. */
START_TEST(test_load_dir)
{
    golden_case c;
    case_open(&c, _i);
    pt_model_load_options lo;
    ck_assert_ok(pt_model_load_options_init(&lo));
    lo.load_tokenizer = false;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, c.dir, &lo));
    ck_assert_uint_eq(pt_model_tensor_count(m), pt_model_tensor_count(c.model));
    for (size_t i = 0; i < pt_model_tensor_count(c.model); i++) {
        const pt_tensor_ref *a = pt__model_tensor(c.model, i);
        const pt_tensor_ref *t = pt__model_find_tensor(m, a->name);
        ck_assert_msg(t != NULL, "%s: pt_model_load_dir has no %s", c.name, a->name);
        ck_assert_uint_eq(t->numel, a->numel);
        ck_assert_msg(memcmp(t->data, a->data, a->numel * sizeof(float)) == 0,
                      "%s: %s differs between pt_model_load_dir and the file", c.name, a->name);
    }
    pt_context *ctx = case_context(&c, m);
    check_loss(&c, case_loss(&c, ctx, true));
    const pt_tensor_ref *e = pt__model_find_tensor(m, "model.embed_tokens.weight");
    ck_assert_ptr_nonnull(e);
    float *ref = golden_f32(c.golden, "grad.model.embed_tokens.weight", e->numel);
    char what[256];
    snprintf(what, sizeof what, "%s: pt_model_load_dir model: gradient of %s", c.name, e->name);
    parity_assert_close(what, e->grad, ref, e->numel, e->shape, e->ndim, ATOL, RTOL);
    free(ref);
    pt_context_free(ctx);
    pt_model_free(m);
    case_close(&c);
}
END_TEST

/* One thread gives the golden gradients too (other GEMM splits and loops). */
START_TEST(test_one_thread)
{
    golden_case c;
    case_open(&c, _i);
    int saved = pt_get_num_threads();
    ck_assert_ok(pt_set_num_threads(1));
    pt_context *ctx = case_context(&c, c.model);
    float loss = case_loss(&c, ctx, true);
    ck_assert_ok(pt_set_num_threads(saved));
    check_loss(&c, loss);
    check_grads(&c, 1.0f, "1 thread");
    pt_context_free(ctx);
    case_close(&c);
}
END_TEST

/* Small LM-head chunks and attention tiles that do not divide T: chunk
 * boundaries, partial tiles and the running softmax across key tiles (the
 * goldens' rows otherwise fit in one chunk and one tile). */
START_TEST(test_small_tiles)
{
    golden_case c;
    case_open(&c, _i);
    pt_context *ctx = case_context(&c, c.model);
    ck_assert_ok(pt__context_set_tiling(ctx, 5, 3, 2));
    float *lp = check_forward(&c, ctx, "small tiles: logits", "small tiles: logprobs");
    ck_assert_ok(pt_model_backward(ctx, c.dlogprobs));
    check_grads(&c, 1.0f, "small tiles");
    free(lp);
    pt_context_free(ctx);
    case_close(&c);
}
END_TEST

/* The cases of gen_parity.py's TEMPERATURES: the batch through
 * log_softmax(logits / T) (pt_batch.temperature): log-probs, entropies, the
 * raw logits unchanged, the loss and its gradients through pt_model_loss,
 * forward + backward and small LM-head chunks; a later batch at T = 1 on the
 * same context is the plain model again. */
static const char *const temperature_cases[] = { "llama_tied_gqa", "qwen2_bias_untied", "qwen2_packed" };

START_TEST(test_temperature)
{
    int ci = 0;
    while (strcmp(cases[ci], temperature_cases[_i]))
        ci++;
    golden_case c;
    case_open(&c, ci);
    char path[1200];
    snprintf(path, sizeof path, "%s/golden_temperature.safetensors", c.dir);
    pt_st_file *tg = NULL;
    ck_assert_ok(pt__st_open(&tg, path));
    size_t bt = (size_t)c.B * (size_t)c.T;
    float *temp = golden_f32(tg, "temperature", 1), *want_lp = golden_f32(tg, "logprobs", bt);
    float *want_ent = golden_f32(tg, "entropy", bt), *want_loss = golden_f32(tg, "loss", 1);
    int64_t shape2[2] = { c.B, c.T }, shape3[3] = { c.B, c.T, c.V };
    char what[256];
    pt_context *ctx = case_context(&c, c.model);
    pt_batch b = case_batch(&c);
    b.temperature = temp[0];
    float *lp = calloc(bt, sizeof *lp), *ent = calloc(bt, sizeof *ent);
    float *logits = calloc(bt * (size_t)c.V, sizeof *logits);
    ck_assert_ok(pt_model_forward(ctx, &b, lp, logits));
    snprintf(what, sizeof what, "%s: T=%g: logprobs", c.name, (double)temp[0]);
    parity_assert_close(what, lp, want_lp, bt, shape2, 2, ATOL, RTOL);
    snprintf(what, sizeof what, "%s: T=%g: raw logits", c.name, (double)temp[0]);
    parity_assert_close(what, logits, c.logits, bt * (size_t)c.V, shape3, 3, ATOL, RTOL);
    memset(lp, 0, bt * sizeof *lp);
    ck_assert_ok(pt_model_forward_entropy(ctx, &b, lp, ent));
    snprintf(what, sizeof what, "%s: T=%g: logprobs (entropy pass)", c.name, (double)temp[0]);
    parity_assert_close(what, lp, want_lp, bt, shape2, 2, ATOL, RTOL);
    snprintf(what, sizeof what, "%s: T=%g: entropy", c.name, (double)temp[0]);
    parity_assert_close(what, ent, want_ent, bt, shape2, 2, ATOL, RTOL);
    /* the backward of that forward (the LM head recomputed at T) */
    ck_assert_ok(pt_model_zero_grad(c.model));
    ck_assert_ok(pt_model_backward(ctx, c.dlogprobs));
    check_grads_in(&c, tg, 1.0f, "T: forward+backward");
    /* the fused loss */
    float loss = NAN;
    ck_assert_ok(pt_model_zero_grad(c.model));
    ck_assert_ok(pt_model_loss(ctx, &b, c.weights, true, &loss));
    ck_assert_msg(fabs((double)loss - (double)want_loss[0]) <= LOSS_ATOL, "%s: T loss %.9g, golden %.9g", c.name,
                  (double)loss, (double)want_loss[0]);
    check_grads_in(&c, tg, 1.0f, "T: pt_model_loss");
    /* small chunks of the LM head */
    ck_assert_ok(pt__context_set_tiling(ctx, 5, 3, 2));
    ck_assert_ok(pt_model_zero_grad(c.model));
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    snprintf(what, sizeof what, "%s: T=%g: logprobs (small chunks)", c.name, (double)temp[0]);
    parity_assert_close(what, lp, want_lp, bt, shape2, 2, ATOL, RTOL);
    ck_assert_ok(pt_model_backward(ctx, c.dlogprobs));
    check_grads_in(&c, tg, 1.0f, "T: small chunks");
    /* T = 1 again on the same context: the plain golden */
    b.temperature = 1.0f;
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    snprintf(what, sizeof what, "%s: T=1 after T=%g: logprobs", c.name, (double)temp[0]);
    parity_assert_close(what, lp, c.logprobs, bt, shape2, 2, ATOL, RTOL);
    /* a temperature outside (0, inf) is refused, naming it */
    for (int k = 0; k < 3; k++) {
        const float badt[3] = { 0.0f, -1.0f, INFINITY };
        b.temperature = badt[k];
        ck_assert_status(pt_model_forward(ctx, &b, lp, NULL), PT_EINVAL, "temperature");
        ck_assert_status(pt_model_loss(ctx, &b, c.weights, true, &loss), PT_EINVAL, "temperature");
    }
    free(lp);
    free(ent);
    free(logits);
    free(temp);
    free(want_lp);
    free(want_ent);
    free(want_loss);
    pt__st_close(tg);
    pt_context_free(ctx);
    case_close(&c);
}
END_TEST

static Suite *parity_suite(void)
{
    Suite *s = suite_create("parity");
    TCase *tc = tcase_create("pytorch");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_forward, 0, NCASES);
    tcase_add_loop_test(tc, test_rows_and_prefix, 0, NCASES);
    tcase_add_loop_test(tc, test_loss_backward, 0, NCASES);
    tcase_add_loop_test(tc, test_forward_backward, 0, NCASES);
    tcase_add_loop_test(tc, test_one_thread, 0, NCASES);
    tcase_add_loop_test(tc, test_small_tiles, 0, NCASES);
    tcase_add_loop_test(tc, test_load_dir, 0, NCASES);
    tcase_add_loop_test(tc, test_temperature, 0,
                        (int)(sizeof temperature_cases / sizeof temperature_cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int rc = pt_test_run(parity_suite());
    fprintf(stderr, "\nparity: worst |diff| / tolerance over all comparisons: %.3g\n",
            parity_worst_seen);
    return rc;
}
