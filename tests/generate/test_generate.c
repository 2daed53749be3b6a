/* pt_generate on tiny random models:
 *  - the KV-cache path (prefill + decode) gives the logits of pt_model_forward
 *    on the whole sequence at every step (llama tied GQA, qwen2 bias, qwen3
 *    qk-norm, llama3 rope scaling, mistral with a sliding window of 5 shorter
 *    than prompts and completions, and with a LoRA adapter), and its returned
 *    log-probabilities are log_softmax(logits / T) of those forward logits;
 *  - with a window the cache is a ring of W slots per (layer, row, kv head);
 *  - a row's tokens and log-probabilities are bit-identical alone and in a
 *    batch (different prompt lengths, a repeated prompt), across runs, and at
 *    1 and 2 threads; different seeds differ;
 *  - the sampler: greedy ties, top_k, top_p, min_p kept sets against
 *    independent computations, and chi-square of empirical frequencies;
 *  - stop ids, the config's eos, max_new_tokens, abort, and every bad input. */
#include "testutil.h"

#include "core/core.h"
#include "model/generate_internal.h"
#include "model/model.h"

#include <math.h>

enum { CFG_LLAMA, CFG_QWEN2, CFG_QWEN3, CFG_LLAMA3, CFG_MISTRAL, CFG_WIDE, CFG_WIDE_MISTRAL };

#define WINDOW 5 /* CFG_MISTRAL's sliding window */

static void make_config(pt_model_config *c, int kind)
{
    ck_assert_ok(pt_model_config_init(c));
    c->vocab_size = 53;
    c->hidden_size = 24;
    c->intermediate_size = 40;
    c->num_hidden_layers = 3;
    c->num_attention_heads = 6;
    c->num_key_value_heads = 2;
    c->head_dim = 4;
    c->max_position_embeddings = 256;
    c->rms_norm_eps = 1e-5;
    /* 0.2: logits of a few units; at 0.3 attention gets so sharp that two
     * correct float32 orders of summation differ by 3e-5 in log-probability */
    c->initializer_range = 0.2;
    c->tie_word_embeddings = true;
    if (kind == CFG_QWEN2) {
        c->arch = PT_ARCH_QWEN2;
        c->attention_bias = true;
        c->tie_word_embeddings = false;
        c->num_key_value_heads = 1;
        c->rope_theta = 1000000.0;
    } else if (kind == CFG_QWEN3) {
        c->arch = PT_ARCH_QWEN3;
        c->qk_norm = true;
        c->tie_word_embeddings = false;
        c->head_dim = 6;
        c->num_attention_heads = 4;
    } else if (kind == CFG_LLAMA3) {
        c->head_dim = 8;
        c->num_attention_heads = 3;
        c->num_key_value_heads = 1;
        c->rope_type = PT_ROPE_LLAMA3;
        c->rope_factor = 8.0;
        c->rope_low_freq_factor = 1.0;
        c->rope_high_freq_factor = 4.0;
        c->rope_original_max_position_embeddings = 16;
    } else if (kind == CFG_MISTRAL) {
        c->arch = PT_ARCH_MISTRAL;
        c->sliding_window = WINDOW;
        c->tie_word_embeddings = false;
        c->rope_theta = 1000000.0;
    } else if (kind == CFG_WIDE || kind == CFG_WIDE_MISTRAL) {
        /* big enough that products, attention and sampling use 2 threads */
        c->vocab_size = 16411;
        c->hidden_size = 256;
        c->intermediate_size = 512;
        c->num_hidden_layers = 2;
        c->num_attention_heads = 8;
        c->num_key_value_heads = 2;
        c->head_dim = 32;
        c->initializer_range = 0.05;
        if (kind == CFG_WIDE_MISTRAL) {
            c->arch = PT_ARCH_MISTRAL;
            c->sliding_window = 48;
        }
    }
    ck_assert_ok(pt_model_config_validate(c));
}

/* A model whose norms and biases are not at their trivial init. */
static pt_model *make_model(int kind, uint64_t seed)
{
    pt_model_config c;
    make_config(&c, kind);
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, seed));
    pt_rng r;
    pt__rng_seed(&r, seed ^ 77);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (!t->no_decay)
            continue;
        double base = strstr(t->name, "norm") ? 1.0 : 0.0;
        for (size_t j = 0; j < t->numel; j++)
            t->data[j] = (float)(base + 0.3 * pt__rng_normal(&r));
    }
    return m;
}

/* log_softmax(x / t)[i] in double. */
static double log_softmax_at(const float *x, int v, double t, int i)
{
    double mx = -INFINITY;
    for (int j = 0; j < v; j++)
        mx = fmax(mx, (double)x[j] / t);
    double s = 0.0;
    for (int j = 0; j < v; j++)
        s += exp((double)x[j] / t - mx);
    return (double)x[i] / t - mx - log(s);
}

/* Prompts: lens[b] ids from a seeded stream, back to back. */
static int32_t *make_prompts(const int32_t *lens, int batch, int vocab, uint64_t seed)
{
    size_t total = 0;
    for (int b = 0; b < batch; b++)
        total += (size_t)lens[b];
    int32_t *ids = malloc(total * sizeof *ids);
    pt_rng r;
    pt__rng_seed(&r, seed);
    for (size_t i = 0; i < total; i++)
        ids[i] = (int32_t)pt__rng_below(&r, (uint64_t)vocab);
    return ids;
}

/* ---- the KV-cache path against the full forward ----------------------------------- */

#define MAXB 4
#define MAXM 16

typedef struct hook_rec {
    int vocab;
    float *logits; /* [MAXB][MAXM][vocab] */
    int calls;
} hook_rec;

static void record_logits(int row, int step, const float *logits, int vocab, void *payload)
{
    hook_rec *h = payload;
    ck_assert_int_eq(vocab, h->vocab);
    ck_assert(row >= 0 && row < MAXB && step >= 0 && step < MAXM);
    memcpy(h->logits + ((size_t)row * MAXM + (size_t)step) * (size_t)vocab, logits,
           (size_t)vocab * sizeof(float));
    h->calls++;
}

/* Logits hook for test_window_ring_long: [row][step][vocab] with 40 steps. */
static void record_steps(int row, int step, const float *logits, int vocab, void *payload)
{
    ck_assert(row >= 0 && row < 4 && step >= 0 && step < 40);
    memcpy((float *)payload + ((size_t)row * 40 + (size_t)step) * (size_t)vocab, logits,
           (size_t)vocab * sizeof(float));
}

/* The KV cache of the generators check_against_forward and
 * check_independence create (pt_generator_set_kv_cache). */
static int g_kv = PT_KV_CACHE_FP32;

static pt_generator *new_generator(pt_model *m, int max_batch, int max_seq)
{
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, max_batch, max_seq));
    ck_assert_int_eq(pt_generator_get_kv_cache(g), PT_KV_CACHE_FP32);
    ck_assert_ok(pt_generator_set_kv_cache(g, g_kv));
    ck_assert_int_eq(pt_generator_get_kv_cache(g), g_kv);
    return g;
}

static void check_against_forward(pt_model *m, const char *what, float temperature)
{
    pt_model_config c;
    pt_model_config_init(&c);
    ck_assert_ok(pt_model_get_config(&c, m));
    const int V = c.vocab_size, B = 3, M = 12;
    const int32_t lens[3] = { 3, 9, 6 };
    int32_t *prompts = make_prompts(lens, B, V, 11);
    pt_generator *g = new_generator(m, MAXB, 24);
    hook_rec h = { V, calloc((size_t)MAXB * MAXM * (size_t)V, sizeof(float)), 0 };
    pt__generator_set_logits_hook(g, record_logits, &h);
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = M;
    o.temperature = temperature;
    o.seed = 5;
    o.n_stop_ids = 0;
    int32_t tok[3 * 12], n[3], fin[3];
    float lp[3 * 12];
    ck_assert_ok(pt_generate(g, prompts, lens, B, &o, tok, n, fin, lp));
    ck_assert_int_eq(h.calls, B * M);

    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, 24));
    float *logits = malloc((size_t)24 * V * sizeof *logits);
    double worst_lsm = 0.0, worst_lp = 0.0, worst_rel = 0.0;
    size_t off = 0;
    for (int b = 0; b < B; b++) {
        ck_assert_int_eq(n[b], M);
        ck_assert_int_eq(fin[b], PT_FINISH_LENGTH);
        int32_t seq[24];
        memcpy(seq, prompts + off, (size_t)lens[b] * sizeof *seq);
        memcpy(seq + lens[b], tok + b * M, (size_t)M * sizeof *seq);
        pt_batch bt;
        pt_batch_init(&bt);
        bt.batch = 1;
        bt.seq = lens[b] + M - 1;
        bt.input_ids = seq;
        ck_assert_ok(pt_model_forward(ctx, &bt, NULL, logits));
        for (int s = 0; s < M; s++) {
            const float *full = logits + (size_t)(lens[b] - 1 + s) * V;
            const float *cached = h.logits + ((size_t)b * MAXM + (size_t)s) * V;
            for (int i = 0; i < V; i++) {
                double d = fabs(log_softmax_at(full, V, 1.0, i) - log_softmax_at(cached, V, 1.0, i));
                worst_lsm = fmax(worst_lsm, d);
                /* relative, with logits below 1 in size compared absolutely */
                double r = fabs((double)cached[i] - (double)full[i]) / fmax(1.0, fabs(full[i]));
                worst_rel = fmax(worst_rel, r);
            }
            double ref = log_softmax_at(full, V, temperature > 0 ? temperature : 1.0,
                                        tok[b * M + s]);
            worst_lp = fmax(worst_lp, fabs(ref - (double)lp[b * M + s]));
            if (temperature == 0.0f) { /* greedy picks the forward's argmax */
                int best = 0;
                for (int i = 1; i < V; i++)
                    if (full[i] > full[best])
                        best = i;
                if (g_kv == PT_KV_CACHE_FP32)
                    ck_assert_int_eq(tok[b * M + s], best);
                else /* BF16: the argmax, or a near tie of it */
                    ck_assert_msg(full[tok[b * M + s]] >= full[best] - 5e-2 * fmax(1.0, fabs(full[best])),
                                  "%s: greedy picked %d (logit %g) for the argmax %d (%g)", what,
                                  tok[b * M + s], (double)full[tok[b * M + s]], best,
                                  (double)full[best]);
            }
        }
        off += (size_t)lens[b];
    }
    fprintf(stderr, "%s (T=%g, %s cache): cached vs full forward: logits max rel %.2g, "
            "log_softmax max |diff| %.2g, returned logprob max |diff| %.2g\n", what,
            (double)temperature, pt_kv_cache_name(g_kv), worst_rel, worst_lsm, worst_lp);
    /* A BF16 cache rounds every key and value to 8 bits of mantissa (2^-9
     * relative), and the layers compound it: on these random models the
     * logits and log_softmax moved by up to 0.033 (0.014-0.033 over the 10
     * runs, returned logprobs 0.007-0.022). */
    const double tol = g_kv == PT_KV_CACHE_BF16 ? 5e-2 : 1e-5;
    ck_assert_msg(worst_rel <= tol, "%s: cached logits differ by %g (relative)", what,
                  worst_rel);
    ck_assert_msg(worst_lsm <= tol, "%s: cached log_softmax differs by %g", what, worst_lsm);
    if (g_kv == PT_KV_CACHE_BF16) /* and the cache was BF16 indeed */
        ck_assert_msg(worst_lsm > 1e-5, "%s: a BF16 cache gave the FP32 cache's logits", what);
    ck_assert_msg(worst_lp <= tol, "%s: returned logprobs differ by %g", what, worst_lp);
    free(logits);
    free(h.logits);
    free(prompts);
    pt_context_free(ctx);
    pt_generator_free(g);
}

START_TEST(test_cache_equals_forward)
{
    static const char *names[] = { "llama tied GQA", "qwen2 bias", "qwen3 qk-norm",
                                   "llama3 rope scaling", "mistral window 5" };
    pt_model *m = make_model(_i, 100 + (uint64_t)_i);
    check_against_forward(m, names[_i], 0.7f);
    check_against_forward(m, names[_i], 0.0f);
    pt_model_free(m);
}
END_TEST

/* The same with the cache in BF16: the forward's tokens within BF16's
 * rounding (the greedy runs must still pick the forward's argmax). */
START_TEST(test_cache_bf16_near_forward)
{
    static const char *names[] = { "llama tied GQA", "qwen2 bias", "qwen3 qk-norm",
                                   "llama3 rope scaling", "mistral window 5" };
    pt_model *m = make_model(_i, 100 + (uint64_t)_i);
    g_kv = PT_KV_CACHE_BF16;
    check_against_forward(m, names[_i], 0.7f);
    check_against_forward(m, names[_i], 0.0f);
    g_kv = PT_KV_CACHE_FP32;
    pt_model_free(m);
}
END_TEST

START_TEST(test_cache_equals_forward_lora)
{
    pt_model *m = make_model(CFG_QWEN2, 9);
    pt_lora_options lo;
    ck_assert_ok(pt_lora_options_init(&lo));
    lo.rank = 3;
    lo.alpha = 6.0;
    lo.targets = PT_LORA_Q | PT_LORA_K | PT_LORA_V | PT_LORA_O | PT_LORA_GATE | PT_LORA_UP |
                 PT_LORA_DOWN;
    lo.seed = 4;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    /* B starts at zero: make the adapters do something */
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (t->adapter)
            for (size_t j = 0; j < t->numel; j++)
                t->data[j] = 0.2f * (float)sin((double)(i * 31 + j));
    }
    check_against_forward(m, "qwen2 + LoRA", 1.0f);
    pt_model_free(m);
}
END_TEST

/* ---- determinism and batch independence ------------------------------------------- */

typedef struct run_out {
    int32_t tok[MAXB * 20], n[MAXB], fin[MAXB];
    float lp[MAXB * 20];
} run_out;

static void run(run_out *r, pt_generator *g, const int32_t *prompts, const int32_t *lens, int B,
                const pt_generate_options *o)
{
    memset(r, 0x5a, sizeof *r);
    ck_assert_ok(pt_generate(g, prompts, lens, B, o, r->tok, r->n, r->fin, r->lp));
}

static void assert_row_equal(const run_out *a, int ra, const run_out *b, int rb, int M,
                             const char *what)
{
    ck_assert_msg(a->n[ra] == b->n[rb], "%s: %d vs %d tokens", what, a->n[ra], b->n[rb]);
    ck_assert_msg(memcmp(a->tok + ra * M, b->tok + rb * M, (size_t)M * sizeof(int32_t)) == 0,
                  "%s: tokens differ", what);
    ck_assert_msg(memcmp(a->lp + ra * M, b->lp + rb * M, (size_t)M * sizeof(float)) == 0,
                  "%s: logprobs are not bit-identical", what);
    ck_assert_int_eq(a->fin[ra], b->fin[rb]);
}

static void check_independence(int kind, const int32_t *lens, int max_seq, int M, int threads)
{
    pt_model *m = make_model(kind, 3);
    pt_model_config c;
    pt_model_config_init(&c);
    pt_model_get_config(&c, m);
    const int B = 4;
    int32_t *prompts = make_prompts(lens, B, c.vocab_size, 21);
    /* row 3 repeats row 1's prompt (a GRPO group): prefilled once */
    if (lens[3] == lens[1]) {
        size_t o1 = (size_t)lens[0], o3 = (size_t)lens[0] + lens[1] + lens[2];
        memcpy(prompts + o3, prompts + o1, (size_t)lens[1] * sizeof *prompts);
    }
    pt_generator *g = new_generator(m, B, max_seq), *g1 = new_generator(m, 1, max_seq);
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = M;
    o.n_stop_ids = 0;
    o.seed = 1234;
    static run_out a, b, alone, t1;
    for (int mode = 0; mode < 2; mode++) {
        o.temperature = mode == 0 ? 0.0f : 0.9f;
        o.top_k = mode == 0 ? 0 : 40;
        o.top_p = mode == 0 ? 1.0f : 0.95f;
        o.stream_offset = 0;
        pt_set_num_threads(threads);
        run(&a, g, prompts, lens, B, &o);
        run(&b, g, prompts, lens, B, &o);
        for (int r = 0; r < B; r++)
            assert_row_equal(&a, r, &b, r, M, "same seed, second run");
        size_t off = 0;
        for (int r = 0; r < B; r++) {
            o.stream_offset = (uint64_t)r;
            run(&alone, g1, prompts + off, lens + r, 1, &o);
            assert_row_equal(&a, r, &alone, 0, M, mode ? "sampled: batch vs alone"
                                                      : "greedy: batch vs alone");
            off += (size_t)lens[r];
        }
        o.stream_offset = 0;
        pt_set_num_threads(threads == 1 ? 2 : 1);
        run(&t1, g, prompts, lens, B, &o);
        pt_set_num_threads(2);
        for (int r = 0; r < B; r++)
            assert_row_equal(&a, r, &t1, r, M, "1 vs 2 threads");
        if (mode == 1) {
            /* the repeated prompt gave two different samples (own streams) */
            if (lens[3] == lens[1])
                ck_assert(memcmp(a.tok + M, a.tok + 3 * M, (size_t)M * sizeof(int32_t)) != 0);
            o.seed = 1235;
            run(&b, g, prompts, lens, B, &o);
            int differ = 0;
            for (int r = 0; r < B; r++)
                differ += memcmp(a.tok + r * M, b.tok + r * M, (size_t)M * sizeof(int32_t)) != 0;
            ck_assert_msg(differ >= 3, "seeds 1234 and 1235 gave the same tokens in %d of 4 "
                          "rows", B - differ);
            o.seed = 1234;
        }
    }
    free(prompts);
    pt_generator_free(g);
    pt_generator_free(g1);
    pt_model_free(m);
}

START_TEST(test_batch_independence_tiny)
{
    const int32_t lens[4] = { 5, 2, 8, 2 };
    check_independence(CFG_QWEN3, lens, 28, 20, 2);
}
END_TEST

START_TEST(test_batch_independence_wide)
{
    /* long enough prompts that attention, products and the sampler run on
     * two threads */
    const int32_t lens[4] = { 70, 96, 41, 96 };
    check_independence(CFG_WIDE, lens, 120, 10, 2);
}
END_TEST

/* With a BF16 cache, the same independence of batch, threads and runs. */
START_TEST(test_batch_independence_bf16_cache)
{
    const int32_t lens[4] = { 70, 96, 41, 96 };
    g_kv = PT_KV_CACHE_BF16;
    check_independence(CFG_WIDE, lens, 120, 10, 2);
    g_kv = PT_KV_CACHE_FP32;
}
END_TEST

START_TEST(test_batch_independence_window)
{
    /* row 3 repeats row 1's 9-token prompt, longer than the window 5: its
     * ring is copied; the wide model's window 48 is shorter than 96 + 10 */
    const int32_t lens[4] = { 3, 9, 6, 9 };
    check_independence(CFG_MISTRAL, lens, 30, 20, 2);
    const int32_t wide[4] = { 70, 96, 41, 96 };
    check_independence(CFG_WIDE_MISTRAL, wide, 120, 10, 2);
}
END_TEST

/* pt_generator_set_kv_cache: its errors (the generator still usable),
 * the names, and a switch back and forth giving the FP32 cache's results
 * again. */
START_TEST(test_kv_cache_api)
{
    pt_model *m = make_model(CFG_LLAMA, 7);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 2, 16));
    ck_assert_int_eq(pt_generator_set_kv_cache(g, 2), PT_EINVAL);
    ck_assert_ptr_nonnull(strstr(pt_last_error(), "pt_kv_cache"));
    ck_assert_int_eq(pt_generator_set_kv_cache(g, -1), PT_EINVAL);
    ck_assert_int_eq(pt_generator_set_kv_cache(NULL, PT_KV_CACHE_BF16), PT_EINVAL);
    ck_assert_int_eq(pt_generator_get_kv_cache(NULL), PT_EINVAL);
    ck_assert_int_eq(pt_generator_get_kv_cache(g), PT_KV_CACHE_FP32);
    ck_assert_str_eq(pt_kv_cache_name(PT_KV_CACHE_BF16), "bf16");
    ck_assert_str_eq(pt_kv_cache_name(PT_KV_CACHE_FP32), "fp32");
    ck_assert_ptr_null(pt_kv_cache_name(5));
    int v = -1;
    ck_assert_ok(pt_kv_cache_from_name(&v, "bf16"));
    ck_assert_int_eq(v, PT_KV_CACHE_BF16);
    ck_assert_int_eq(pt_kv_cache_from_name(&v, "f16"), PT_EINVAL);
    ck_assert_ptr_nonnull(strstr(pt_last_error(), "fp32"));
    pt_model_config c;
    pt_model_config_init(&c);
    ck_assert_ok(pt_model_get_config(&c, m));
    const int32_t lens[2] = { 4, 6 };
    int32_t *prompts = make_prompts(lens, 2, c.vocab_size, 3);
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = 8;
    o.temperature = 0.0f;
    o.n_stop_ids = 0;
    int32_t t32[16], t16[16], tb[16], n[2];
    float l32[16], l16[16], lb[16];
    ck_assert_ok(pt_generate(g, prompts, lens, 2, &o, t32, n, NULL, l32));
    ck_assert_ok(pt_generator_set_kv_cache(g, PT_KV_CACHE_BF16));
    ck_assert_ok(pt_generator_set_kv_cache(g, PT_KV_CACHE_BF16)); /* again: nothing to do */
    ck_assert_ok(pt_generate(g, prompts, lens, 2, &o, t16, n, NULL, l16));
    ck_assert_ok(pt_generator_set_kv_cache(g, PT_KV_CACHE_FP32));
    ck_assert_ok(pt_generate(g, prompts, lens, 2, &o, tb, n, NULL, lb));
    ck_assert(memcmp(t32, tb, sizeof t32) == 0 && memcmp(l32, lb, sizeof l32) == 0);
    ck_assert_msg(memcmp(l32, l16, sizeof l32) != 0, "the BF16 cache changed no log-probability");
    free(prompts);
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

/* ---- the sliding-window ring ------------------------------------------------------ */

/* The cache holds W slots per (layer, row, kv head) with a window shorter
 * than max_seq, max_seq slots otherwise. */
START_TEST(test_window_ring_slots)
{
    pt_model *mw = make_model(CFG_MISTRAL, 1), *ml = make_model(CFG_LLAMA, 1);
    pt_model_config c;
    make_config(&c, CFG_MISTRAL);
    const size_t per_slot = 2 * (size_t)c.num_hidden_layers * (size_t)c.num_key_value_heads *
                            (size_t)c.head_dim;
    const struct { pt_model *m; int max_seq, slots; } cases[] = {
        { mw, 24, WINDOW }, { mw, 200, WINDOW }, { mw, WINDOW, WINDOW }, { mw, 3, 3 },
        { ml, 24, 24 }, { ml, 200, 200 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pt_generator *g = NULL;
        ck_assert_ok(pt_generator_create(&g, cases[i].m, 3, cases[i].max_seq));
        ck_assert_int_eq(pt__generator_cache_slots(g), cases[i].slots);
        ck_assert_uint_eq(pt__generator_cache_floats(g), per_slot * 3 * (size_t)cases[i].slots);
        pt_generator_free(g);
    }
    pt_model_free(mw);
    pt_model_free(ml);
}
END_TEST

/* The ring over many turns: greedy decoding of 40 tokens with W = 5 (the
 * ring wraps 8 times) after prompts of 1, 4, 6 and 23 tokens (shorter than,
 * about, and much longer than the window), batched; every step's logits
 * against pt_model_forward over the whole final sequence (teacher forced,
 * the window as a mask). */
START_TEST(test_window_ring_long)
{
    pt_model *m = make_model(CFG_MISTRAL, 17);
    pt_model_config c;
    make_config(&c, CFG_MISTRAL);
    enum { B = 4, M = 40, S = 64 };
    const int V = c.vocab_size;
    const int32_t lens[B] = { 1, 4, 6, 23 };
    int32_t *prompts = make_prompts(lens, B, V, 41);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, B, S));
    ck_assert_int_eq(pt__generator_cache_slots(g), WINDOW);
    float *steps = calloc((size_t)B * M * (size_t)V, sizeof(float));
    pt__generator_set_logits_hook(g, record_steps, steps);
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = M;
    o.temperature = 0.0f;
    o.n_stop_ids = 0;
    int32_t tok[B * M], n[B];
    ck_assert_ok(pt_generate(g, prompts, lens, B, &o, tok, n, NULL, NULL));
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, S));
    float *logits = malloc((size_t)S * V * sizeof *logits);
    double worst = 0.0;
    size_t off = 0;
    for (int b = 0; b < B; b++) {
        int32_t seq[S];
        memcpy(seq, prompts + off, (size_t)lens[b] * sizeof *seq);
        memcpy(seq + lens[b], tok + b * M, (size_t)M * sizeof *seq);
        pt_batch bt;
        pt_batch_init(&bt);
        bt.batch = 1;
        bt.seq = lens[b] + M - 1;
        bt.input_ids = seq;
        ck_assert_ok(pt_model_forward(ctx, &bt, NULL, logits));
        for (int s = 0; s < M; s++) {
            const float *full = logits + (size_t)(lens[b] - 1 + s) * V;
            const float *cached = steps + ((size_t)b * M + (size_t)s) * V;
            for (int i = 0; i < V; i++)
                worst = fmax(worst, fabs((double)cached[i] - (double)full[i]) /
                                        fmax(1.0, fabs(full[i])));
        }
        off += (size_t)lens[b];
    }
    fprintf(stderr, "mistral window 5, 40 greedy steps, prompts 1/4/6/23: cached vs full "
            "forward logits max rel %.2g\n", worst);
    ck_assert_msg(worst <= 1e-5, "ring logits differ from the full forward by %g", worst);
    free(logits);
    free(steps);
    free(prompts);
    pt_context_free(ctx);
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

/* ---- the sampler ---------------------------------------------------------------------- */

typedef struct samp_env {
    void *mem;
    pt_sample_scratch sc;
} samp_env;

static void samp_open(samp_env *e, int v)
{
    e->mem = pt__malloc_aligned(pt__sample_scratch_bytes(v));
    pt__sample_scratch_init(&e->sc, e->mem, v);
}

static const float LG[10] = { 1.0f, 2.5f, -0.5f, 2.5f, 0.3f, 1.7f, -2.0f, 0.9f, 2.0f, 0.0f };
/* ids by logit, best first (the tie 1/3 goes to the lower id) */
static const int RANK[10] = { 1, 3, 8, 5, 0, 7, 4, 9, 2, 6 };

static void probs(double *p, const float *lg, int v, double t)
{
    for (int i = 0; i < v; i++)
        p[i] = exp(log_softmax_at(lg, v, t, i));
}

START_TEST(test_sampler_greedy)
{
    samp_env e;
    samp_open(&e, 10);
    pt_sampler s = { .temperature = 0.0f, .top_p = 1.0f };
    float lp = 0.0f;
    ck_assert_int_eq(pt__sample_token(&lp, LG, 10, &s, NULL, &e.sc), 1); /* tie 1/3: lower id */
    ck_assert(fabs(lp - log_softmax_at(LG, 10, 1.0, 1)) < 1e-6);
    pt__free_aligned(e.mem);
}
END_TEST

START_TEST(test_sampler_top_k)
{
    samp_env e;
    samp_open(&e, 10);
    uint8_t keep[10];
    for (int k = 1; k <= 10; k++) {
        pt_sampler s = { .temperature = 0.8f, .top_k = k, .top_p = 1.0f };
        ck_assert_int_eq(pt__sample_filter(keep, LG, 10, &s, &e.sc), k);
        for (int r = 0; r < 10; r++)
            ck_assert_msg(keep[RANK[r]] == (r < k), "top_k %d: id %d (rank %d) kept %d", k,
                          RANK[r], r, keep[RANK[r]]);
    }
    /* a large vocabulary: exactly the k largest */
    enum { BV = 5000 };
    float *big = malloc(BV * sizeof *big);
    pt_rng r;
    pt__rng_seed(&r, 8);
    for (int i = 0; i < BV; i++)
        big[i] = (float)pt__rng_normal(&r);
    samp_env e2;
    samp_open(&e2, BV);
    uint8_t *kb = malloc(BV);
    pt_sampler s = { .temperature = 1.3f, .top_k = 137, .top_p = 1.0f };
    ck_assert_int_eq(pt__sample_filter(kb, big, BV, &s, &e2.sc), 137);
    float least_kept = INFINITY, best_dropped = -INFINITY;
    for (int i = 0; i < BV; i++) {
        if (kb[i])
            least_kept = fminf(least_kept, big[i]);
        else
            best_dropped = fmaxf(best_dropped, big[i]);
    }
    ck_assert(least_kept > best_dropped);
    free(kb);
    free(big);
    pt__free_aligned(e2.mem);
    pt__free_aligned(e.mem);
}
END_TEST

START_TEST(test_sampler_top_p_min_p)
{
    samp_env e;
    samp_open(&e, 10);
    uint8_t keep[10];
    const double T = 0.7;
    double p[10];
    probs(p, LG, 10, T);
    /* the nucleus of size k has mass c_k: top_p just below c_k keeps k
     * tokens, just above keeps k + 1 */
    double c = 0.0;
    for (int k = 1; k < 10; k++) {
        c += p[RANK[k - 1]];
        for (int side = 0; side < 2; side++) {
            float tp = (float)(side == 0 ? c - 1e-4 : c + 1e-4);
            if (tp > 1.0f)
                continue;
            int want = side == 0 ? k : k + 1;
            pt_sampler s = { .temperature = (float)T, .top_p = tp };
            ck_assert_int_eq(pt__sample_filter(keep, LG, 10, &s, &e.sc), want);
            for (int r = 0; r < 10; r++)
                ck_assert_msg(keep[RANK[r]] == (r < want), "top_p %g: rank %d", (double)tp, r);
        }
    }
    /* top_k then top_p on the renormalised top-k distribution */
    double q[3], qs = p[RANK[0]] + p[RANK[1]] + p[RANK[2]];
    for (int r = 0; r < 3; r++)
        q[r] = p[RANK[r]] / qs;
    pt_sampler s = { .temperature = (float)T, .top_k = 3, .top_p = (float)(q[0] + q[1] - 1e-4) };
    ck_assert_int_eq(pt__sample_filter(keep, LG, 10, &s, &e.sc), 2);
    ck_assert(keep[RANK[0]] && keep[RANK[1]] && !keep[RANK[2]]);
    /* min_p: p >= min_p * p_max */
    for (int t = 1; t < 10; t++) {
        double ratio = p[RANK[t]] / p[RANK[0]];
        for (int side = 0; side < 2; side++) {
            float mp = (float)(side == 0 ? ratio - 1e-5 : ratio + 1e-5);
            pt_sampler sm = { .temperature = (float)T, .top_p = 1.0f, .min_p = mp };
            int n = pt__sample_filter(keep, LG, 10, &sm, &e.sc);
            int want = 0;
            for (int i = 0; i < 10; i++) {
                int in = p[i] >= (double)mp * p[RANK[0]];
                want += in;
                ck_assert_msg(keep[i] == in, "min_p %g: id %d", (double)mp, i);
            }
            ck_assert_int_eq(n, want);
        }
    }
    pt__free_aligned(e.mem);
}
END_TEST

/* The draw by blocks of ids against the plain definition, a running sum
 * in order: over a vocabulary of 50001 ids (a partial last block), a
 * third of them of weight 0 (filtered), the same id for 2000 random u
 * (they could differ only where u times the total falls within rounding
 * of a boundary), and the ends: u = 0 gives the first id of positive
 * weight, u just under 1 the last. */
START_TEST(test_sampler_draw_blocks)
{
    enum { V = 50001 };
    float *e = malloc(V * sizeof *e);
    double *bs = malloc((V / 256 + 1) * sizeof *bs), *cum = malloc(V * sizeof *cum);
    ck_assert(e && bs && cum);
    pt_rng rng;
    pt__sample_rng(&rng, 7, 3);
    double run = 0.0;
    int32_t first = -1, last = -1;
    for (int i = 0; i < V; i++) {
        const double r = pt__rng_uniform_double(&rng);
        e[i] = r < 1.0 / 3.0 ? 0.0f : (float)exp(-20.0 * pt__rng_uniform_double(&rng));
        if (e[i] > 0.0f) {
            first = first < 0 ? i : first;
            last = i;
        }
        run += (double)e[i];
        cum[i] = run;
    }
    for (int d = 0; d < 2002; d++) {
        const double u = d == 0 ? 0.0 : d == 1 ? 1.0 - 0x1p-53 : pt__rng_uniform_double(&rng);
        double total = 0.0;
        const int32_t got = pt__sample_draw(e, V, u, last, bs, &total);
        ck_assert_msg(fabs(total - run) <= 1e-12 * run, "total %.17g, in order %.17g", total, run);
        int32_t want = last;
        for (int i = 0; i < V; i++)
            if (u * run < cum[i]) {
                want = i;
                break;
            }
        ck_assert_msg(got == want, "u = %.17g: drew %d, the running sum gives %d", u, got, want);
        ck_assert(e[got] > 0.0f);
        if (d == 0)
            ck_assert_int_eq(got, first);
        if (d == 1)
            ck_assert_int_eq(got, last);
    }
    free(cum);
    free(bs);
    free(e);
}
END_TEST

/* Chi-square of N draws against the expected probabilities (0 outside the
 * kept set, where no draw may land). */
static void check_frequencies(const pt_sampler *s, const double *expect, int v, int N,
                              const char *what)
{
    samp_env e;
    samp_open(&e, v);
    pt_rng rng;
    pt__sample_rng(&rng, 42, 0);
    long count[16] = { 0 };
    for (int d = 0; d < N; d++) {
        float lp;
        int32_t t = pt__sample_token(&lp, LG, v, s, &rng, &e.sc);
        ck_assert(t >= 0 && t < v);
        count[t]++;
        if (d < 50) /* the log-probability under the distribution drawn from */
            ck_assert_msg(fabs((double)lp - log(expect[t])) < 2e-6, "%s: logprob of %d is %.8g, want %.8g",
                          what, t, (double)lp, log(expect[t]));
    }
    double chi2 = 0.0;
    int df = -1;
    for (int i = 0; i < v; i++) {
        if (expect[i] == 0.0) {
            ck_assert_msg(count[i] == 0, "%s: id %d drawn %ld times but filtered", what, i,
                          count[i]);
            continue;
        }
        double ex = expect[i] * N;
        chi2 += (count[i] - ex) * (count[i] - ex) / ex;
        df++;
    }
    /* 99.9% quantiles of chi-square for df 1..9 */
    static const double q999[10] = { 0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12,
                                     27.88 };
    fprintf(stderr, "%s: chi-square %.2f with %d degrees of freedom (limit %.2f)\n", what, chi2,
            df, q999[df]);
    ck_assert_msg(chi2 < q999[df], "%s: chi-square %.2f >= %.2f", what, chi2, q999[df]);
    pt__free_aligned(e.mem);
}

START_TEST(test_sampler_frequencies)
{
    double p[10];
    pt_sampler s = { .temperature = 0.8f, .top_p = 1.0f };
    probs(p, LG, 10, 0.8);
    check_frequencies(&s, p, 10, 200000, "softmax(logits/0.8)");
    /* top_k 4 at T = 1.5: the renormalised top 4 */
    probs(p, LG, 10, 1.5);
    double q[10] = { 0 }, z = 0.0;
    for (int r = 0; r < 4; r++)
        z += p[RANK[r]];
    for (int r = 0; r < 4; r++)
        q[RANK[r]] = p[RANK[r]] / z;
    pt_sampler sk = { .temperature = 1.5f, .top_k = 4, .top_p = 1.0f };
    check_frequencies(&sk, q, 10, 200000, "top_k 4 at T=1.5");
    /* min_p 0.3 at T = 1 */
    probs(p, LG, 10, 1.0);
    double pmax = p[RANK[0]], w[10], ws = 0.0;
    for (int i = 0; i < 10; i++) {
        w[i] = p[i] >= 0.3 * pmax ? p[i] : 0.0;
        ws += w[i];
    }
    for (int i = 0; i < 10; i++)
        w[i] /= ws;
    pt_sampler sm = { .temperature = 1.0f, .top_p = 1.0f, .min_p = 0.3f };
    check_frequencies(&sm, w, 10, 200000, "min_p 0.3");
    /* top_p 0.8 at T = 0.9: the renormalised nucleus */
    probs(p, LG, 10, 0.9);
    double c = 0.0, u[10] = { 0 };
    int nk = 0;
    while (c < 0.8)
        c += p[RANK[nk++]];
    for (int r = 0; r < nk; r++)
        u[RANK[r]] = p[RANK[r]] / c;
    pt_sampler sp = { .temperature = 0.9f, .top_p = 0.8f };
    check_frequencies(&sp, u, 10, 200000, "top_p 0.8 at T=0.9");
}
END_TEST

/* ---- stop ids, max_new_tokens, abort, bad inputs ------------------------------------ */

START_TEST(test_stop_and_length)
{
    pt_model *m = make_model(CFG_LLAMA, 31);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 2, 40));
    const int32_t lens[2] = { 4, 6 };
    int32_t *prompts = make_prompts(lens, 2, 53, 4);
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.temperature = 0.0f;
    o.max_new_tokens = 30;
    o.n_stop_ids = 0;
    int32_t tok[60], n[2], fin[2], tok2[60], n2[2], fin2[2];
    float lp[60];
    ck_assert_ok(pt_generate(g, prompts, lens, 2, &o, tok, n, fin, lp));
    ck_assert(n[0] == 30 && n[1] == 30 && fin[0] == PT_FINISH_LENGTH);
    /* stop at the first occurrence of row 0's 5th token (row 1 may stop too) */
    int32_t stop[2] = { 52, tok[4] };
    o.stop_ids = stop;
    o.n_stop_ids = 2;
    ck_assert_ok(pt_generate(g, prompts, lens, 2, &o, tok2, n2, fin2, NULL));
    for (int b = 0; b < 2; b++) {
        int first = -1;
        for (int i = 0; i < 30 && first < 0; i++)
            if (tok[b * 30 + i] == 52 || tok[b * 30 + i] == stop[1])
                first = i;
        int want = first < 0 ? 30 : first + 1;
        ck_assert_int_eq(n2[b], want);
        ck_assert_int_eq(fin2[b], first < 0 ? PT_FINISH_LENGTH : PT_FINISH_STOP);
        ck_assert_mem_eq(tok2 + b * 30, tok + b * 30, (size_t)want * sizeof(int32_t));
        for (int i = want; i < 30; i++)
            ck_assert_int_eq(tok2[b * 30 + i], -1);
    }
    ck_assert_int_le(n2[0], 5);
    /* max_new_tokens: exactly that many, a prefix of the longer run */
    o.n_stop_ids = 0;
    o.max_new_tokens = 7;
    ck_assert_ok(pt_generate(g, prompts, lens, 2, &o, tok2, n2, fin2, NULL));
    for (int b = 0; b < 2; b++) {
        ck_assert_int_eq(n2[b], 7);
        ck_assert_int_eq(fin2[b], PT_FINISH_LENGTH);
        ck_assert_mem_eq(tok2 + b * 7, tok + b * 30, 7 * sizeof(int32_t));
    }
    pt_generator_free(g);
    pt_model_free(m);

    /* default stop ids: the config's eos_token_id */
    pt_model_config c;
    make_config(&c, CFG_LLAMA);
    c.eos_token_id = tok[2];
    ck_assert_ok(pt_model_create(&m, &c, 31));
    pt_model *ref = make_model(CFG_LLAMA, 31); /* same weights as before */
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        memcpy(pt__model_tensor(m, i)->data, pt__model_tensor(ref, i)->data,
               pt__model_tensor(m, i)->numel * sizeof(float));
    pt_model_free(ref);
    ck_assert_ok(pt_generator_create(&g, m, 2, 40));
    o.max_new_tokens = 30;
    o.n_stop_ids = -1;
    ck_assert_ok(pt_generate(g, prompts, lens, 2, &o, tok2, n2, fin2, NULL));
    int first = 0;
    while (tok[first] != tok[2])
        first++;
    ck_assert_int_eq(n2[0], first + 1);
    ck_assert_int_eq(fin2[0], PT_FINISH_STOP);
    ck_assert_int_eq(tok2[first], tok[2]);
    free(prompts);
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

static int polls;
static int abort_after(void *payload)
{
    return ++polls > *(int *)payload;
}

START_TEST(test_abort)
{
    pt_model *m = make_model(CFG_LLAMA, 2);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 1, 40));
    const int32_t len = 3, ids[3] = { 1, 2, 3 };
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.max_new_tokens = 20;
    o.n_stop_ids = 0;
    int32_t tok[20], n[1];
    /* 3 layer polls in the prefill, then one per token: stop at token 5 */
    int limit = 3 + 5;
    polls = 0;
    pt_set_abort_callback(abort_after, &limit);
    ck_assert_status(pt_generate(g, ids, &len, 1, &o, tok, n, NULL, NULL), PT_ECANCELLED, NULL);
    pt_set_abort_callback(NULL, NULL);
    ck_assert_int_eq(polls, limit + 1);
    ck_assert_int_eq(n[0], 5);
    ck_assert_ok(pt_generate(g, ids, &len, 1, &o, tok, n, NULL, NULL));
    ck_assert_int_eq(n[0], 20);
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

START_TEST(test_bad_inputs)
{
    pt_model *m = make_model(CFG_LLAMA, 2);
    pt_generator *g = NULL;
    ck_assert_status(pt_generator_create(NULL, m, 1, 8), PT_EINVAL, "NULL");
    ck_assert_status(pt_generator_create(&g, NULL, 1, 8), PT_EINVAL, "NULL");
    ck_assert_status(pt_generator_create(&g, m, 0, 8), PT_EINVAL, "max_batch 0");
    ck_assert_status(pt_generator_create(&g, m, 2, -1), PT_EINVAL, "max_seq -1");
    ck_assert_status(pt_generate_options_init(NULL), PT_EINVAL, "NULL");
    ck_assert_ok(pt_generator_create(&g, m, 2, 70));
    const int32_t ids[4] = { 1, 2, 3, 4 }, lens[2] = { 2, 2 };
    int32_t tok[128], n[2]; /* room for the default 64 new tokens */
    float lp[128];
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.max_new_tokens = 5;
    ck_assert_ok(pt_generate(g, ids, lens, 2, &o, tok, n, NULL, lp));
    ck_assert_ok(pt_generate(g, ids, lens, 1, NULL, tok, n, NULL, NULL)); /* defaults: 64 new */
    ck_assert_status(pt_generate(g, ids, lens, 2, &o, NULL, n, NULL, lp), PT_EINVAL, "NULL");
    ck_assert_status(pt_generate(g, ids, lens, 2, &o, tok, NULL, NULL, lp), PT_EINVAL, "NULL");
    ck_assert_status(pt_generate(NULL, ids, lens, 2, &o, tok, n, NULL, lp), PT_EINVAL, "NULL");
    ck_assert_status(pt_generate(g, NULL, lens, 2, &o, tok, n, NULL, lp), PT_EINVAL, "NULL");
    ck_assert_status(pt_generate(g, ids, NULL, 2, &o, tok, n, NULL, lp), PT_EINVAL, "NULL");
    ck_assert_status(pt_generate(g, ids, lens, 0, &o, tok, n, NULL, lp), PT_EINVAL, "batch 0");
    ck_assert_status(pt_generate(g, ids, lens, 3, &o, tok, n, NULL, lp), PT_EINVAL,
                     "max_batch 2");
    const int32_t zero[2] = { 0, 2 }, longp[2] = { 2, 66 };
    ck_assert_status(pt_generate(g, ids, zero, 2, &o, tok, n, NULL, lp), PT_EINVAL, "length 0");
    ck_assert_status(pt_generate(g, ids, longp, 2, &o, tok, n, NULL, lp), PT_EINVAL,
                     "prompt 1 (66 tokens) plus max_new_tokens 5 exceeds the generator's max_seq 70");
    const int32_t bad_ids[4] = { 1, 2, 53, 4 }, neg_ids[4] = { -1, 2, 3, 4 };
    ck_assert_status(pt_generate(g, bad_ids, lens, 2, &o, tok, n, NULL, lp), PT_ERANGE,
                     "id 53, outside the vocabulary");
    ck_assert_status(pt_generate(g, neg_ids, lens, 2, &o, tok, n, NULL, lp), PT_ERANGE,
                     "id -1");
    pt_generate_options b = o;
    b.size = 3; /* smaller than any version of the struct */
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL,
                     "struct size 3");
    b = o;
    b.max_new_tokens = 0;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL,
                     "max_new_tokens 0");
    b = o;
    b.temperature = -0.5f;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL,
                     "temperature -0.5");
    b.temperature = NAN;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL,
                     "temperature");
    b.temperature = 1e-9f;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL,
                     "use 0 for greedy");
    b = o;
    b.top_k = -1;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL, "top_k -1");
    b = o;
    b.top_p = 0.0f;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL,
                     "top_p 0 must be in (0, 1]");
    b.top_p = 1.5f;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL, "top_p 1.5");
    b = o;
    b.min_p = -0.1f;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL, "min_p");
    b.min_p = 2.0f;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL, "min_p 2");
    b = o;
    b.n_stop_ids = 2;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_EINVAL,
                     "stop_ids is NULL");
    const int32_t bad_stop[2] = { 3, 99 };
    b.stop_ids = bad_stop;
    ck_assert_status(pt_generate(g, ids, lens, 2, &b, tok, n, NULL, lp), PT_ERANGE,
                     "stop id 99 (stop_ids[1])");
    pt_generator_free(g);
    pt_generator_free(NULL);
    pt_model_free(m);
}
END_TEST

static Suite *generate_suite(void)
{
    Suite *s = suite_create("generate");
    TCase *tc = tcase_create("generate");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_cache_equals_forward, CFG_LLAMA, CFG_MISTRAL + 1);
    tcase_add_loop_test(tc, test_cache_bf16_near_forward, CFG_LLAMA, CFG_MISTRAL + 1);
    tcase_add_test(tc, test_kv_cache_api);
    tcase_add_test(tc, test_window_ring_slots);
    tcase_add_test(tc, test_window_ring_long);
    tcase_add_test(tc, test_cache_equals_forward_lora);
    tcase_add_test(tc, test_batch_independence_tiny);
    tcase_add_test(tc, test_batch_independence_wide);
    tcase_add_test(tc, test_batch_independence_bf16_cache);
    tcase_add_test(tc, test_batch_independence_window);
    tcase_add_test(tc, test_sampler_greedy);
    tcase_add_test(tc, test_sampler_top_k);
    tcase_add_test(tc, test_sampler_top_p_min_p);
    tcase_add_test(tc, test_sampler_frequencies);
    tcase_add_test(tc, test_sampler_draw_blocks);
    tcase_add_test(tc, test_stop_and_length);
    tcase_add_test(tc, test_abort);
    tcase_add_test(tc, test_bad_inputs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(generate_suite());
}
