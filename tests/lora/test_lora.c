/* LoRA adapters: options, freezing, gradients (finite differences and
 * PyTorch goldens), training then merging, PEFT files, checkpoints. */
#include "testutil.h"
#include "testfs.h"

#include "core/core.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "train/optimizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <unistd.h>

#define B 2
#define T 7

/* ---- helpers ------------------------------------------------------------------ */

static pt_model *tiny(int arch, uint64_t seed)
{
    pt_model_config c;
    pt_test_tiny_config(&c, arch, 29);
    c.tie_word_embeddings = arch == PT_ARCH_LLAMA;
    c.initializer_range = 0.2;
    pt_model *m;
    ck_assert_ok(pt_model_create(&m, &c, seed));
    if (c.attention_bias) /* non-zero biases so that they matter */
        for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
            const pt_tensor_ref *t = pt__model_tensor(m, i);
            if (strstr(t->name, ".bias"))
                for (size_t j = 0; j < t->numel; j++)
                    t->data[j] = 0.05f * (float)((int)(j % 7) - 3);
        }
    return m;
}

static int32_t g_ids[B * T], g_tgt[B * T];
static float g_w[B * T];

static pt_batch batch_of(int vocab)
{
    pt_rng r;
    pt__rng_seed(&r, 5);
    for (int i = 0; i < B * T; i++)
        g_ids[i] = (int32_t)pt__rng_below(&r, (uint64_t)vocab);
    for (int i = 0; i < B * T; i++) {
        g_tgt[i] = (i % T) + 1 < T ? g_ids[i + 1] : -1;
        g_w[i] = (i % T) >= 2 ? 1.0f : 0.0f;
    }
    return pt_test_batch(B, T, g_ids, g_tgt);
}

static pt_lora_options opts_all(int rank, double alpha)
{
    pt_lora_options o;
    ck_assert_ok(pt_lora_options_init(&o));
    o.rank = rank;
    o.alpha = alpha;
    o.targets = PT_LORA_ALL;
    o.seed = 3;
    return o;
}

/* Give every lora_B random values (a fresh adapter has B = 0). */
static void randomize_b(pt_model *m, uint64_t seed, float sd)
{
    pt_rng r;
    pt__rng_seed(&r, seed);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (t->adapter && strstr(t->name, "lora_B"))
            for (size_t j = 0; j < t->numel; j++)
                t->data[j] = (float)(sd * pt__rng_normal(&r));
    }
}

static float *logits_of(pt_model *m, const pt_batch *b)
{
    const pt_tensor_ref *e = pt__model_find_tensor(m, "model.embed_tokens.weight");
    size_t V = (size_t)e->shape[0];
    float *lg = malloc((size_t)B * T * V * sizeof *lg);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    ck_assert_ok(pt_model_forward(ctx, b, NULL, lg));
    pt_context_free(ctx);
    return lg;
}

static size_t adapter_numel(const pt_model *m)
{
    size_t n = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        if (pt__model_tensor(m, i)->adapter)
            n += pt__model_tensor(m, i)->numel;
    return n;
}

static double loss_at(pt_context *ctx, const pt_batch *b, bool backward)
{
    float loss;
    ck_assert_ok(pt_model_loss(ctx, b, g_w, backward, &loss));
    return loss;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* ---- options and state ---------------------------------------------------------- */

START_TEST(test_options)
{
    pt_lora_options o;
    ck_assert_ok(pt_lora_options_init(&o));
    ck_assert_int_eq(o.rank, 8);
    ck_assert(o.alpha == 8.0);
    ck_assert_uint_eq(o.targets, PT_LORA_Q | PT_LORA_V);
    ck_assert(o.dropout == 0.0);
    pt_model *m = tiny(PT_ARCH_LLAMA, 1);
    ck_assert(!pt_model_has_lora(m));
    ck_assert(!pt_model_has_lora(NULL));
    o.dropout = 0.1;
    ck_assert_status(pt_model_add_lora(m, &o), PT_EUNSUPPORTED, "dropout");
    o.dropout = 0.0;
    o.rank = 0;
    ck_assert_status(pt_model_add_lora(m, &o), PT_EINVAL, "rank 0");
    o.rank = 4;
    o.targets = 0x80;
    ck_assert_status(pt_model_add_lora(m, &o), PT_EINVAL, "targets");
    o.targets = PT_LORA_Q;
    o.alpha = 0;
    ck_assert_status(pt_model_add_lora(m, &o), PT_EINVAL, "alpha");
    o.alpha = 8;
    o.size = 3;
    ck_assert_status(pt_model_add_lora(m, &o), PT_EINVAL, "size");
    ck_assert_status(pt_model_merge_lora(m), PT_ESTATE, "no LoRA");
    ck_assert_status(pt_lora_save_peft(m, "/nonexistent", NULL), PT_ESTATE, "no LoRA");
    ck_assert(!pt_model_has_lora(m));
    o.size = sizeof o;
    ck_assert_ok(pt_model_add_lora(m, &o));
    ck_assert(pt_model_has_lora(m));
    ck_assert_status(pt_model_add_lora(m, &o), PT_ESTATE, "already");
    pt_lora_options got;
    pt_lora_options_init(&got);
    ck_assert_ok(pt_model_get_lora(&got, m));
    ck_assert_int_eq(got.rank, 4);
    ck_assert_uint_eq(got.targets, PT_LORA_Q);
    /* q only, 2 layers: 4 adapter tensors after the base ones */
    ck_assert_uint_eq(pt_model_tensor_count(m), pt__model_base_tensor_count(m) + 4);
    ck_assert_ok(pt_model_remove_lora(m));
    ck_assert(!pt_model_has_lora(m));
    ck_assert_uint_eq(pt_model_tensor_count(m), pt__model_base_tensor_count(m));
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        ck_assert(pt__model_tensor(m, i)->trainable);
    pt_model_free(m);
}
END_TEST

/* Names, shapes and initialisation of the adapters; the base is frozen. */
START_TEST(test_add_freezes_base)
{
    pt_model *m = tiny(PT_ARCH_LLAMA, 1);
    ck_assert_ok(pt_model_alloc_grads(m)); /* base grads existed before: they are released */
    size_t nbase = pt_model_tensor_count(m);
    pt_lora_options o = opts_all(3, 6);
    ck_assert_ok(pt_model_add_lora(m, &o));
    ck_assert_ptr_null(m->grads);
    ck_assert_uint_eq(pt_model_tensor_count(m), nbase + 2 * 7 * 2);
    for (size_t i = 0; i < nbase; i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        ck_assert(!t->trainable);
        ck_assert(!t->adapter);
        ck_assert_ptr_null(t->grad);
    }
    const pt_tensor_ref *a = pt__model_find_tensor(m, "model.layers.1.self_attn.k_proj.lora_A.weight");
    const pt_tensor_ref *bb = pt__model_find_tensor(m, "model.layers.1.self_attn.k_proj.lora_B.weight");
    const pt_tensor_ref *d = pt__model_find_tensor(m, "model.layers.0.mlp.down_proj.lora_A.weight");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(bb);
    ck_assert_ptr_nonnull(d);
    ck_assert(a->trainable && a->adapter && a->grad);
    ck_assert_int_eq(a->shape[0], 3);
    ck_assert_int_eq(a->shape[1], 16);  /* hidden */
    ck_assert_int_eq(bb->shape[0], 8);  /* kv heads * head_dim */
    ck_assert_int_eq(bb->shape[1], 3);
    ck_assert_int_eq(d->shape[1], 24);  /* intermediate */
    /* A ~ U(-1/sqrt(in), 1/sqrt(in)) and spread over most of it; B = 0 */
    float amax = 0;
    for (size_t j = 0; j < d->numel; j++)
        amax = fmaxf(amax, fabsf(d->data[j]));
    ck_assert_float_le(amax, (float)(1.0 / sqrt(24.0)));
    ck_assert_float_ge(amax, (float)(0.8 / sqrt(24.0)));
    for (size_t j = 0; j < bb->numel; j++)
        ck_assert(bb->data[j] == 0.0f);
    /* the scratch and the backward touch no base gradient */
    pt_batch b = batch_of(29);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    loss_at(ctx, &b, true);
    ck_assert_ptr_null(m->grads);
    for (size_t i = 0; i < nbase; i++)
        ck_assert_ptr_null(pt__model_tensor(m, i)->grad);
    /* with B = 0 only B has a gradient */
    double gb = 0, ga = 0;
    for (size_t j = 0; j < bb->numel; j++)
        gb += fabs(bb->grad[j]);
    for (size_t j = 0; j < a->numel; j++)
        ga += fabs(a->grad[j]);
    ck_assert(gb > 0);
    ck_assert(ga == 0);
    /* the optimizer covers exactly the adapters */
    pt_optimizer_options oo;
    ck_assert_ok(pt_optimizer_options_init(&oo));
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_opt_state_view v;
    pt__optimizer_state_view(&v, opt);
    ck_assert_uint_eq(v.numel_total, adapter_numel(m));
    ck_assert_uint_eq(v.numel_total, 2 * (size_t)(3 * (16 + 16) + 3 * (16 + 8) * 2 +
                                                3 * (16 + 16) + 3 * (16 + 24) * 2 +
                                                3 * (24 + 16)));
    ck_assert_ok(pt_model_zero_grad(m));
    for (size_t j = 0; j < bb->numel; j++)
        ck_assert(bb->grad[j] == 0.0f);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* A fresh adapter (B = 0) leaves the logits bit-identical. */
START_TEST(test_fresh_identity)
{
    for (int arch = 0; arch <= 1; arch++) {
        pt_model *m = tiny(arch == 0 ? PT_ARCH_LLAMA : PT_ARCH_QWEN2, 2);
        pt_batch b = batch_of(29);
        float *l0 = logits_of(m, &b);
        pt_lora_options o = opts_all(4, 8);
        ck_assert_ok(pt_model_add_lora(m, &o));
        float *l1 = logits_of(m, &b);
        ck_assert_int_eq(memcmp(l0, l1, (size_t)B * T * 29 * sizeof *l0), 0);
        randomize_b(m, 9, 0.1f);
        float *l2 = logits_of(m, &b);
        double diff = 0;
        for (size_t i = 0; i < (size_t)B * T * 29; i++)
            diff = fmax(diff, fabs(l2[i] - l0[i]));
        ck_assert_msg(diff > 1e-2, "non-zero adapters change the logits (by %g)", diff);
        free(l0);
        free(l1);
        free(l2);
        pt_model_free(m);
    }
}
END_TEST

/* Finite differences of the loss against the adapter gradients. */
static void fd_check(int arch, unsigned targets)
{
    pt_model *m = tiny(arch, 4);
    pt_lora_options o = opts_all(3, 6);
    o.targets = targets;
    ck_assert_ok(pt_model_add_lora(m, &o));
    randomize_b(m, 10, 0.3f);
    pt_batch b = batch_of(29);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    ck_assert_ok(pt_model_zero_grad(m));
    loss_at(ctx, &b, true);
    size_t checked = 0, nbase = pt__model_base_tensor_count(m);
    double worst = 0;
    for (size_t i = nbase; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        for (size_t j = 0; j < t->numel; j += t->numel / 5 + 1) {
            float keep = t->data[j];
            const float h = 1e-2f;
            t->data[j] = keep + h;
            double lp = loss_at(ctx, &b, false);
            t->data[j] = keep - h;
            double lm = loss_at(ctx, &b, false);
            t->data[j] = keep;
            double fd = (lp - lm) / (2.0 * h), g = t->grad[j];
            double err = fabs(fd - g) / (1e-3 + fabs(g));
            worst = fmax(worst, err);
            ck_assert_msg(fabs(fd - g) <= 2e-3 + 3e-2 * fabs(g),
                          "%s[%zu]: finite difference %g, backward %g", t->name, j, fd, g);
            checked++;
        }
    }
    ck_assert_uint_gt(checked, 20);
    pt_context_free(ctx);
    pt_model_free(m);
}

START_TEST(test_fd_llama_tied)
{
    fd_check(PT_ARCH_LLAMA, PT_LORA_ALL);
}
END_TEST

START_TEST(test_fd_qwen2_bias)
{
    /* k alone in q|k|v and up alone in gate|up: slices at non-zero offsets */
    fd_check(PT_ARCH_QWEN2, PT_LORA_K | PT_LORA_UP | PT_LORA_O);
}
END_TEST

START_TEST(test_fd_qwen3_qknorm)
{
    fd_check(PT_ARCH_QWEN3, PT_LORA_Q | PT_LORA_K | PT_LORA_GATE | PT_LORA_DOWN);
}
END_TEST

/* A context created before the adapters still runs them (its scratch grows). */
START_TEST(test_context_before_add)
{
    pt_model *m = tiny(PT_ARCH_LLAMA, 2);
    pt_batch b = batch_of(29);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    pt_lora_options o = opts_all(5, 5);
    ck_assert_ok(pt_model_add_lora(m, &o));
    randomize_b(m, 9, 0.1f);
    float *ref = logits_of(m, &b), *got = malloc((size_t)B * T * 29 * sizeof *got);
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, got));
    ck_assert_int_eq(memcmp(ref, got, (size_t)B * T * 29 * sizeof *got), 0);
    free(ref);
    free(got);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* ---- PyTorch goldens ---------------------------------------------------------- */

static void golden_check(const char *name)
{
    char base[4096], adir[4096], gpath[4200];
    snprintf(base, sizeof base, "%s/reference/%s", PT_TEST_SRCDIR, name);
    snprintf(adir, sizeof adir, "%s/lora/data/%s", PT_TEST_SRCDIR, name);
    snprintf(gpath, sizeof gpath, "%s/golden.safetensors", adir);
    pt_model_load_options lo;
    ck_assert_ok(pt_model_load_options_init(&lo));
    lo.load_tokenizer = false;
    pt_model *m;
    ck_assert_ok(pt_model_load_dir(&m, base, &lo));
    ck_assert_ok(pt_lora_load_peft(m, adir));
    ck_assert(pt_model_has_lora(m));
    pt_lora_options o;
    pt_lora_options_init(&o);
    ck_assert_ok(pt_model_get_lora(&o, m));
    ck_assert_int_eq(o.rank, 4);
    ck_assert(o.alpha == 8.0);

    pt_st_file *g;
    ck_assert_ok(pt__st_open(&g, gpath));
    const pt_st_tensor *gi = pt__st_find(g, "input_ids"), *gt = pt__st_find(g, "targets");
    const pt_st_tensor *gw = pt__st_find(g, "weights"), *gl = pt__st_find(g, "logits");
    const pt_st_tensor *gloss = pt__st_find(g, "loss");
    ck_assert(gi && gt && gw && gl && gloss);
    int bb = (int)gi->shape[0], tt = (int)gi->shape[1];
    size_t n = (size_t)bb * tt, V = (size_t)gl->shape[2];
    int32_t *ids = malloc(n * sizeof *ids), *tg = malloc(n * sizeof *tg);
    memcpy(ids, gi->data, n * sizeof *ids);
    memcpy(tg, gt->data, n * sizeof *tg);
    float *w = malloc(n * sizeof *w), *ref = malloc(n * V * sizeof *ref);
    float *lg = malloc(n * V * sizeof *lg), refloss;
    ck_assert_ok(pt__st_read_f32(gw, w, n));
    ck_assert_ok(pt__st_read_f32(gl, ref, n * V));
    ck_assert_ok(pt__st_read_f32(gloss, &refloss, 1));
    pt_batch b;
    pt_batch_init(&b);
    b.batch = bb;
    b.seq = tt;
    b.input_ids = ids;
    b.targets = tg;
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, bb, tt));
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, lg));
    for (size_t i = 0; i < n * V; i++)
        ck_assert_msg(fabsf(lg[i] - ref[i]) <= 1e-4f + 1e-3f * fabsf(ref[i]),
                      "%s logits[%zu]: %g, torch %g", name, i, lg[i], ref[i]);
    float loss;
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_loss(ctx, &b, w, true, &loss));
    ck_assert_float_eq_tol(loss, refloss, 1e-4f * (1 + fabsf(refloss)));
    size_t ngrads = 0;
    for (size_t i = pt__model_base_tensor_count(m); i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        char key[200];
        snprintf(key, sizeof key, "grad.base_model.model.%s", t->name);
        const pt_st_tensor *e = pt__st_find(g, key);
        ck_assert_msg(e != NULL, "%s missing from the golden", key);
        float *rg = malloc(t->numel * sizeof *rg);
        ck_assert_ok(pt__st_read_f32(e, rg, t->numel));
        for (size_t j = 0; j < t->numel; j++)
            ck_assert_msg(fabsf(t->grad[j] - rg[j]) <= 1e-5f + 1e-3f * fabsf(rg[j]),
                          "%s grad[%zu]: %g, torch %g", t->name, j, t->grad[j], rg[j]);
        free(rg);
        ngrads++;
    }
    ck_assert_uint_gt(ngrads, 7);
    pt__st_close(g);
    pt_context_free(ctx);
    free(ids);
    free(tg);
    free(w);
    free(ref);
    free(lg);
    pt_model_free(m);
}

START_TEST(test_golden_llama)
{
    golden_check("llama_tied_gqa");
}
END_TEST

START_TEST(test_golden_qwen2)
{
    golden_check("qwen2_bias_untied");
}
END_TEST

/* ---- training, merging, PEFT files, checkpoints -------------------------------- */

static void sft_steps(pt_model *m, pt_optimizer *opt, int steps)
{
    pt_batch b = batch_of(29);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    const float *wp[1] = { g_w };
    for (int s = 0; s < steps; s++) {
        pt_sft_stats st;
        ck_assert_ok(pt_sft_stats_init(&st));
        ck_assert_ok(pt_sft_step(&st, opt, ctx, &b, wp, 1));
        ck_assert(!st.skipped);
    }
    pt_context_free(ctx);
}

static pt_optimizer *adamw(pt_model *m)
{
    pt_optimizer_options oo;
    ck_assert_ok(pt_optimizer_options_init(&oo));
    oo.lr = 1e-2;
    oo.weight_decay = 0.01;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    return opt;
}

START_TEST(test_train_then_merge)
{
    for (int arch = 0; arch <= 1; arch++) {
        pt_model *m = tiny(arch == 0 ? PT_ARCH_LLAMA : PT_ARCH_QWEN2, 6);
        size_t nbase = pt_model_tensor_count(m), total = 0;
        for (size_t i = 0; i < nbase; i++)
            total += pt__model_tensor(m, i)->numel;
        float *snap = malloc(total * sizeof *snap);
        for (size_t i = 0, off = 0; i < nbase; off += pt__model_tensor(m, i)->numel, i++)
            memcpy(snap + off, pt__model_tensor(m, i)->data,
                   pt__model_tensor(m, i)->numel * sizeof *snap);
        pt_lora_options o = opts_all(4, 16);
        ck_assert_ok(pt_model_add_lora(m, &o));
        pt_optimizer *opt = adamw(m);
        sft_steps(m, opt, 4);
        ck_assert_ptr_null(m->grads);
        /* the base is bit-identical; the adapters moved */
        for (size_t i = 0, off = 0; i < nbase; off += pt__model_tensor(m, i)->numel, i++)
            ck_assert_msg(memcmp(snap + off, pt__model_tensor(m, i)->data,
                                 pt__model_tensor(m, i)->numel * sizeof *snap) == 0,
                          "base tensor %s changed", pt__model_tensor(m, i)->name);
        const pt_tensor_ref *lb = pt__model_find_tensor(m, "model.layers.1.mlp.up_proj.lora_B.weight");
        double nb = 0;
        for (size_t j = 0; j < lb->numel; j++)
            nb += fabs(lb->data[j]);
        ck_assert(nb > 1e-3);
        pt_optimizer_free(opt);

        pt_batch b = batch_of(29);
        float *la = logits_of(m, &b);
        ck_assert_ok(pt_model_merge_lora(m));
        ck_assert(!pt_model_has_lora(m));
        ck_assert_uint_eq(pt_model_tensor_count(m), nbase);
        float *lm = logits_of(m, &b);
        double worst = 0, moved = 0;
        for (size_t i = 0, off = 0; i < nbase; off += pt__model_tensor(m, i)->numel, i++) {
            const pt_tensor_ref *t = pt__model_tensor(m, i);
            ck_assert(t->trainable);
            for (size_t j = 0; j < t->numel; j++)
                moved = fmax(moved, fabs(t->data[j] - snap[off + j]));
        }
        for (size_t i = 0; i < (size_t)B * T * 29; i++)
            worst = fmax(worst, fabs(la[i] - lm[i]));
        ck_assert_msg(worst <= 1e-5, "merged logits differ by %g", worst);
        ck_assert_msg(moved > 1e-3, "merging changed the weights by only %g", moved);
        /* the merged model trains in full again */
        opt = adamw(m);
        sft_steps(m, opt, 1);
        ck_assert_ptr_nonnull(m->grads);
        pt_optimizer_free(opt);
        free(la);
        free(lm);
        free(snap);
        pt_model_free(m);
    }
}
END_TEST

START_TEST(test_peft_roundtrip)
{
    char root[] = "/tmp/pt_lora_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/adapter", root);
    pt_model *m = tiny(PT_ARCH_QWEN2, 7);
    pt_lora_options o = opts_all(2, 5);
    o.targets = PT_LORA_Q | PT_LORA_V | PT_LORA_DOWN;
    ck_assert_ok(pt_model_add_lora(m, &o));
    pt_optimizer *opt = adamw(m);
    sft_steps(m, opt, 2);
    pt_optimizer_free(opt);
    ck_assert_ok(pt_lora_save_peft(m, dir, "org/tiny-qwen2"));

    /* the exact names, shapes and dtype PEFT writes and expects */
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    pt_st_file *f;
    ck_assert_ok(pt__st_open(&f, path));
    ck_assert_uint_eq(pt__st_count(f), 2 * 3 * 2);
    const pt_st_tensor *t =
        pt__st_find(f, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, PT_ST_F32);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 16);
    t = pt__st_find(f, "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->shape[0], 8);
    ck_assert_int_eq(t->shape[1], 2);
    t = pt__st_find(f, "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 24);
    for (size_t i = 0; i < pt__st_count(f); i++) {
        const char *n = pt__st_tensor_at(f, i)->name;
        ck_assert_msg(strncmp(n, "base_model.model.model.layers.", 30) == 0 &&
                          strstr(n, ".default") == NULL,
                      "unexpected tensor name %s", n);
    }
    ck_assert_str_eq(pt__st_metadata(f, "format"), "pt");
    pt__st_close(f);

    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text;
    size_t len;
    ck_assert_ok(pt__read_file(&text, &len, path, 1 << 20));
    cJSON *j = cJSON_Parse(text);
    pt_free(text);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "peft_type")->valuestring, "LORA");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "task_type")->valuestring, "CAUSAL_LM");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "bias")->valuestring, "none");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "base_model_name_or_path")->valuestring,
                     "org/tiny-qwen2");
    ck_assert(cJSON_GetObjectItem(j, "r")->valuedouble == 2);
    ck_assert(cJSON_GetObjectItem(j, "lora_alpha")->valuedouble == 5);
    ck_assert(cJSON_GetObjectItem(j, "lora_dropout")->valuedouble == 0);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "fan_in_fan_out")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "use_rslora")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "use_dora")));
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "inference_mode")));
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "init_lora_weights")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "modules_to_save")));
    cJSON *tm = cJSON_GetObjectItem(j, "target_modules");
    ck_assert_int_eq(cJSON_GetArraySize(tm), 3);
    ck_assert_str_eq(cJSON_GetArrayItem(tm, 0)->valuestring, "q_proj");
    ck_assert_str_eq(cJSON_GetArrayItem(tm, 1)->valuestring, "v_proj");
    ck_assert_str_eq(cJSON_GetArrayItem(tm, 2)->valuestring, "down_proj");
    cJSON_Delete(j);

    /* load into the same base: bit-identical adapters and logits */
    pt_model *m2 = tiny(PT_ARCH_QWEN2, 7);
    ck_assert_ok(pt_lora_load_peft(m2, dir));
    ck_assert_uint_eq(pt_model_tensor_count(m2), pt_model_tensor_count(m));
    for (size_t i = pt__model_base_tensor_count(m); i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *a = pt__model_tensor(m, i), *b2 = pt__model_tensor(m2, i);
        ck_assert_str_eq(a->name, b2->name);
        ck_assert_int_eq(memcmp(a->data, b2->data, a->numel * sizeof(float)), 0);
    }
    pt_lora_options o2;
    pt_lora_options_init(&o2);
    ck_assert_ok(pt_model_get_lora(&o2, m2));
    ck_assert_int_eq(o2.rank, 2);
    ck_assert(o2.alpha == 5.0);
    ck_assert_uint_eq(o2.targets, o.targets);
    pt_batch b = batch_of(29);
    float *l1 = logits_of(m, &b), *l2 = logits_of(m2, &b);
    ck_assert_int_eq(memcmp(l1, l2, (size_t)B * T * 29 * sizeof *l1), 0);
    ck_assert_status(pt_lora_load_peft(m2, dir), PT_ESTATE, "already");
    free(l1);
    free(l2);

    /* pt_model_save_dir of a model with adapters writes the base only */
    snprintf(path, sizeof path, "%s/base", root);
    pt_model_save_options so;
    ck_assert_ok(pt_model_save_options_init(&so));
    ck_assert_ok(pt_model_save_dir(m, path, &so));
    pt_model *m3;
    pt_model_load_options lo;
    ck_assert_ok(pt_model_load_options_init(&lo));
    lo.load_tokenizer = false;
    ck_assert_ok(pt_model_load_dir(&m3, path, &lo));
    ck_assert(!pt_model_has_lora(m3));
    ck_assert_uint_eq(pt_model_tensor_count(m3), pt__model_base_tensor_count(m));
    pt_model_free(m3);

    pt_model_free(m);
    pt_model_free(m2);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
}
END_TEST

START_TEST(test_peft_bad_dirs)
{
    char root[] = "/tmp/pt_lora_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char dir[4096], cfg[4200], path[4200];
    snprintf(dir, sizeof dir, "%s/a", root);
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dir);
    pt_model *m = tiny(PT_ARCH_LLAMA, 8);
    pt_lora_options o = opts_all(4, 8);
    o.targets = PT_LORA_Q | PT_LORA_V;
    ck_assert_ok(pt_model_add_lora(m, &o));
    ck_assert_ok(pt_lora_save_peft(m, dir, NULL));
    pt_model *f = tiny(PT_ARCH_LLAMA, 8);
    ck_assert_ok(pt_lora_load_peft(f, dir));
    ck_assert_ok(pt_model_remove_lora(f));

    static const char *const head = "{\"peft_type\": \"LORA\", \"task_type\": \"CAUSAL_LM\", ";
    struct {
        const char *rest;
        int status;
        const char *needle;
    } cases[] = {
        /* a target whose tensors the file lacks */
        { "\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\", "
          "\"o_proj\"]}", PT_ENOTFOUND,
          "'base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight' is missing" },
        /* wrong rank */
        { "\"r\": 8, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"]}",
          PT_ESHAPE, "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has "
          "shape [4, 16], expected [8, 16]" },
        /* fewer targets than the file holds */
        { "\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", PT_EFORMAT,
          "unexpected tensor 'base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight'" },
        { "\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"qkv_proj\"]}", PT_EUNSUPPORTED,
          "'qkv_proj'" },
        { "\"r\": 4, \"lora_alpha\": 8, \"target_modules\": \".*proj\"}", PT_EUNSUPPORTED,
          "target_modules" },
        { "\"r\": 4, \"target_modules\": [\"q_proj\"]}", PT_EFORMAT, "lora_alpha" },
        { "\"r\": 0, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", PT_EFORMAT, "\"r\"" },
        { "\"r\": 4, \"lora_alpha\": 8, \"use_dora\": true, \"target_modules\": [\"q_proj\"]}",
          PT_EUNSUPPORTED, "use_dora" },
        { "\"r\": 4, \"lora_alpha\": 8, \"use_rslora\": true, \"target_modules\": [\"q_proj\"]}",
          PT_EUNSUPPORTED, "use_rslora" },
        { "\"r\": 4, \"lora_alpha\": 8, \"bias\": \"all\", \"target_modules\": [\"q_proj\"]}",
          PT_EUNSUPPORTED, "bias" },
        { "\"r\": 4, \"lora_alpha\": 8, \"modules_to_save\": [\"lm_head\"], "
          "\"target_modules\": [\"q_proj\"]}", PT_EUNSUPPORTED, "modules_to_save" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", head, cases[i].rest);
        write_text(cfg, text);
        ck_assert_status(pt_lora_load_peft(f, dir), cases[i].status, cases[i].needle);
        ck_assert(!pt_model_has_lora(f));
        ck_assert_uint_eq(pt_model_tensor_count(f), pt__model_base_tensor_count(f));
    }
    write_text(cfg, "{\"peft_type\": \"PREFIX_TUNING\"}");
    ck_assert_status(pt_lora_load_peft(f, dir), PT_EUNSUPPORTED, "LORA");
    write_text(cfg, "not json");
    ck_assert_status(pt_lora_load_peft(f, dir), PT_EFORMAT, "adapter_config.json");
    /* no weights file */
    write_text(cfg, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, "
                    "\"target_modules\": [\"q_proj\", \"v_proj\"], \"lora_dropout\": 0.05}");
    ck_assert_ok(pt_lora_load_peft(f, dir)); /* dropout is accepted (and ignored) when loading */
    ck_assert_ok(pt_model_remove_lora(f));
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_status(pt_lora_load_peft(f, dir), PT_ENOTFOUND, "adapter_model.safetensors");
    snprintf(path, sizeof path, "%s/adapter_model.bin", dir);
    write_text(path, "pickle");
    ck_assert_status(pt_lora_load_peft(f, dir), PT_EUNSUPPORTED, "adapter_model.bin");
    ck_assert_status(pt_lora_load_peft(f, root), PT_ENOTFOUND, "adapter_config.json");
    ck_assert(!pt_model_has_lora(f));
    pt_model_free(f);
    pt_model_free(m);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
}
END_TEST

START_TEST(test_checkpoint)
{
    char root[] = "/tmp/pt_lora_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ckpt", root);
    pt_model *m = tiny(PT_ARCH_LLAMA, 9);
    pt_lora_options o = opts_all(4, 8);
    ck_assert_ok(pt_model_add_lora(m, &o));
    pt_optimizer *opt = adamw(m);
    sft_steps(m, opt, 2);
    ck_assert_ok(pt_checkpoint_save(m, opt, "{\"x\": 1}", dir));
    size_t na = adapter_numel(m), nbase = pt__model_base_tensor_count(m);
    float *saved = malloc(na * sizeof *saved);
    for (size_t i = nbase, off = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(saved + off, t->data, t->numel * sizeof *saved);
        off += t->numel;
    }
    sft_steps(m, opt, 2); /* move away */
    /* resume into a fresh model with fresh adapters */
    pt_model *m2 = tiny(PT_ARCH_LLAMA, 9);
    o.seed = 77;
    ck_assert_ok(pt_model_add_lora(m2, &o));
    pt_optimizer *opt2 = adamw(m2);
    char *host = NULL;
    ck_assert_ok(pt_checkpoint_load(&host, m2, opt2, dir));
    pt_free(host);
    for (size_t i = nbase, off = 0; i < pt_model_tensor_count(m2); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m2, i);
        ck_assert_msg(memcmp(saved + off, t->data, t->numel * sizeof *saved) == 0,
                      "%s differs after the checkpoint load", t->name);
        off += t->numel;
    }
    int64_t step;
    step = pt_optimizer_step_count(opt2);
    ck_assert_int_eq(step, 2);
    /* the same two further steps give the same adapters as the first run */
    sft_steps(m2, opt2, 2);
    for (size_t i = nbase; i < pt_model_tensor_count(m2); i++)
        ck_assert_int_eq(memcmp(pt__model_tensor(m, i)->data, pt__model_tensor(m2, i)->data,
                                pt__model_tensor(m, i)->numel * sizeof(float)), 0);
    /* a model without adapters does not take the checkpoint */
    pt_model *m3 = tiny(PT_ARCH_LLAMA, 9);
    pt_optimizer *opt3 = adamw(m3);
    host = NULL;
    ck_assert_int_ne(pt_checkpoint_load(&host, m3, opt3, dir), PT_OK);
    pt_free(host);
    pt_optimizer_free(opt3);
    pt_model_free(m3);
    pt_optimizer_free(opt);
    pt_optimizer_free(opt2);
    pt_model_free(m);
    pt_model_free(m2);
    free(saved);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
}
END_TEST

/* The weights alone (pt_checkpoint_read_host / pt_checkpoint_load_weights):
 * the host JSON back, the saved adapters into a fresh model without any
 * optimizer, and the failures. */
START_TEST(test_checkpoint_weights_only)
{
    char root[] = "/tmp/pt_lora_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", root);
    pt_model *m = tiny(PT_ARCH_LLAMA, 9);
    pt_lora_options o = opts_all(4, 8);
    ck_assert_ok(pt_model_add_lora(m, &o));
    pt_optimizer *opt = adamw(m);
    sft_steps(m, opt, 2);
    ck_assert_ok(pt_checkpoint_save(m, opt, "{\"model\": \"/base\", \"lora\": {\"rank\": 4}}", dir));
    char *host = (char *)"x";
    ck_assert_ok(pt_checkpoint_read_host(&host, dir));
    ck_assert_str_eq(host, "{\"model\":\"/base\",\"lora\":{\"rank\":4}}");
    pt_free(host);
    pt_model *m2 = tiny(PT_ARCH_LLAMA, 9);
    o.seed = 77;
    ck_assert_ok(pt_model_add_lora(m2, &o));
    ck_assert_ok(pt_checkpoint_load_weights(m2, dir));
    size_t nbase = pt__model_base_tensor_count(m);
    for (size_t i = 0; i < pt_model_tensor_count(m2); i++)
        ck_assert_msg(memcmp(pt__model_tensor(m, i)->data, pt__model_tensor(m2, i)->data,
                             pt__model_tensor(m, i)->numel * sizeof(float)) == 0,
                      "%s (%s) differs", pt__model_tensor(m2, i)->name, i < nbase ? "base" : "adapter");
    /* the wrong trainable tensors: a model without adapters */
    pt_model *m3 = tiny(PT_ARCH_LLAMA, 9);
    ck_assert_status(pt_checkpoint_load_weights(m3, dir), PT_ENOTFOUND, "pt_checkpoint_load_weights");
    pt_model_free(m3);
    /* arguments, a missing directory, a damaged file */
    ck_assert_status(pt_checkpoint_read_host(NULL, dir), PT_EINVAL, "host_json");
    ck_assert_status(pt_checkpoint_load_weights(NULL, dir), PT_EINVAL, "model");
    snprintf(path, sizeof path, "%s/missing", root);
    ck_assert_status(pt_checkpoint_read_host(&host, path), PT_ENOTFOUND, "does not exist");
    ck_assert_ptr_null(host);
    ck_assert_status(pt_checkpoint_load_weights(m2, path), PT_ENOTFOUND, "does not exist");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, -1, SEEK_END);
    fputc(0x5a, f);
    fclose(f);
    ck_assert_status(pt_checkpoint_load_weights(m2, dir), PT_ECHECKSUM, "model.safetensors");
    ck_assert_status(pt_checkpoint_read_host(&host, dir), PT_ECHECKSUM, "model.safetensors");
    pt_optimizer_free(opt);
    pt_model_free(m);
    pt_model_free(m2);
    ck_assert_int_eq(pt_test_rm_rf(root), 0);
}
END_TEST

static Suite *lora_suite(void)
{
    Suite *s = suite_create("lora");
    TCase *tc = tcase_create("lora");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_options);
    tcase_add_test(tc, test_add_freezes_base);
    tcase_add_test(tc, test_fresh_identity);
    tcase_add_test(tc, test_fd_llama_tied);
    tcase_add_test(tc, test_fd_qwen2_bias);
    tcase_add_test(tc, test_fd_qwen3_qknorm);
    tcase_add_test(tc, test_context_before_add);
    tcase_add_test(tc, test_golden_llama);
    tcase_add_test(tc, test_golden_qwen2);
    tcase_add_test(tc, test_train_then_merge);
    tcase_add_test(tc, test_peft_roundtrip);
    tcase_add_test(tc, test_peft_bad_dirs);
    tcase_add_test(tc, test_checkpoint);
    tcase_add_test(tc, test_checkpoint_weights_only);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(lora_suite());
}
