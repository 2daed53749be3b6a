/* The public tensor API: pt_model_num_tensors, pt_model_tensor_info,
 * pt_model_find_tensor_info, pt_model_num_trainable_params.
 *  - the table lists every Hugging Face tensor once, with the right shapes,
 *    and its sizes add up to pt_model_num_params;
 *  - `data` is the live weight: zeroing the final norm makes every logit 0,
 *    so every log-probability is -log(V);
 *  - `grad` appears with the gradients and matches a central finite
 *    difference of the loss;
 *  - LoRA adapters are listed after the base, trainable, with the base frozen;
 *  - pt_model_forward_entropy's entropies match the logits' softmax;
 *  - pt_model_clone copies the configuration and every weight bit for bit
 *    into a model of its own, and refuses LoRA and a BF16-only base;
 *  - bad arguments give their statuses and messages. */
#include "testutil.h"

#include "posttrain/lora.h"

#include <math.h>
#include <string.h>

enum { V = 40 };

static pt_model *tiny(bool tied)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, V);
    c.tie_word_embeddings = tied;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 7));
    return m;
}

static const int32_t ids[6] = { 1, 5, 9, 2, 33, 17 };
static const int32_t tgt[6] = { 5, 9, 2, 33, 17, 4 };

START_TEST(test_table)
{
    for (int tied = 0; tied <= 1; tied++) {
        pt_model *m = tiny(tied);
        size_t n = 0;
        n = pt_model_tensor_count(m);
        /* embeddings, 9 per layer (4 attention, 3 MLP, 2 norms), final norm, untied head */
        ck_assert_uint_eq(n, 1 + 2 * 9 + 1 + (tied ? 0 : 1));
        uint64_t sum = 0, params = 0, trainable = 0;
        for (size_t i = 0; i < n; i++) {
            pt_tensor_info t;
            pt_tensor_info_init(&t);
            ck_assert_ok(pt_model_tensor_info(&t, m, i));
            ck_assert_uint_eq(t.size, sizeof t);
            ck_assert_uint_eq(t.numel, (size_t)(t.shape[0] * t.shape[1]));
            ck_assert(t.ndim == 1 ? t.shape[1] == 1 : t.ndim == 2);
            ck_assert(t.trainable && !t.adapter);
            ck_assert_ptr_nonnull(t.data);
            ck_assert_ptr_null(t.grad);
            ck_assert_int_eq(t.no_decay, t.ndim == 1);
            sum += t.numel;
            /* the name finds the same tensor */
            pt_tensor_info u;
            pt_tensor_info_init(&u);
            ck_assert_ok(pt_model_find_tensor_info(&u, m, t.name));
            ck_assert_ptr_eq(u.data, t.data);
        }
        params = pt_model_param_count(m);
        trainable = pt_model_trainable_param_count(m);
        ck_assert_uint_eq(sum, params);
        ck_assert_uint_eq(trainable, params);

        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, 0));
        ck_assert_str_eq(t.name, "model.embed_tokens.weight");
        ck_assert(t.shape[0] == V && t.shape[1] == 16);
        ck_assert_ok(pt_model_find_tensor_info(&t, m, "model.layers.1.self_attn.k_proj.weight"));
        ck_assert(t.ndim == 2 && t.shape[0] == 2 * 4 && t.shape[1] == 16); /* kv heads x head_dim */
        ck_assert_ok(pt_model_find_tensor_info(&t, m, "model.layers.0.mlp.down_proj.weight"));
        ck_assert(t.shape[0] == 16 && t.shape[1] == 24);
        ck_assert_status(pt_model_find_tensor_info(&t, m, "lm_head.weight"),
                         tied ? PT_ENOTFOUND : PT_OK, tied ? "'lm_head.weight'" : NULL);
        pt_model_free(m);
    }
}
END_TEST

START_TEST(test_data_is_live)
{
    pt_model *m = tiny(false);
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, 6));
    pt_batch b = pt_test_row_batch(ids, tgt, 6);
    float lp[6];
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    for (int i = 0; i < 6; i++)
        ck_assert_double_gt(fabs(lp[i] + log((double)V)), 1e-3); /* not uniform yet */
    pt_tensor_info t;
    pt_tensor_info_init(&t);
    ck_assert_ok(pt_model_find_tensor_info(&t, m, "model.norm.weight"));
    memset(t.data, 0, t.numel * sizeof(float));
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    for (int i = 0; i < 6; i++)
        ck_assert_double_le(fabs(lp[i] + log((double)V)), 1e-6);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_grad_view)
{
    pt_model *m = tiny(false);
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, 6));
    pt_batch b = pt_test_row_batch(ids, tgt, 6);
    float loss;
    ck_assert_ok(pt_model_loss(ctx, &b, NULL, true, &loss));
    pt_tensor_info t;
    pt_tensor_info_init(&t);
    ck_assert_ok(pt_model_find_tensor_info(&t, m, "model.layers.0.self_attn.q_proj.weight"));
    ck_assert_ptr_nonnull(t.grad);
    for (size_t k = 0; k < t.numel; k += t.numel / 5) {
        float keep = t.data[k], lp, lm;
        const float h = 1e-2f;
        t.data[k] = keep + h;
        ck_assert_ok(pt_model_loss(ctx, &b, NULL, false, &lp));
        t.data[k] = keep - h;
        ck_assert_ok(pt_model_loss(ctx, &b, NULL, false, &lm));
        t.data[k] = keep;
        double fd = ((double)lp - (double)lm) / (2.0 * h);
        ck_assert_msg(fabs(fd - t.grad[k]) <= 2e-3 + 2e-2 * fabs(fd), "element %zu: fd %g grad %g", k,
                      fd, (double)t.grad[k]);
    }
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_lora_listed)
{
    pt_model *m = tiny(true);
    size_t base = 0, n = 0;
    uint64_t params = 0, after = 0, trainable = 0, adapters = 0;
    base = pt_model_tensor_count(m);
    params = pt_model_param_count(m);
    pt_lora_options o;
    ck_assert_ok(pt_lora_options_init(&o));
    o.rank = 2;
    o.targets = PT_LORA_Q | PT_LORA_V;
    ck_assert_ok(pt_model_add_lora(m, &o));
    n = pt_model_tensor_count(m);
    ck_assert_uint_eq(n, base + 2 * 2 * 2); /* A and B, q and v, 2 layers */
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, i));
        ck_assert_int_eq(t.adapter, i >= base);
        ck_assert_int_eq(t.trainable, i >= base);
        if (t.adapter) {
            adapters += t.numel;
            ck_assert_ptr_nonnull(strstr(t.name, "lora_"));
            ck_assert(t.shape[0] == 2 || t.shape[1] == 2); /* rank 2 */
        }
    }
    after = pt_model_param_count(m);
    trainable = pt_model_trainable_param_count(m);
    ck_assert_uint_eq(after, params);
    ck_assert_uint_eq(trainable, adapters);
    /* q: A 2x16 + B 16x2; v: A 2x16 + B 8x2; two layers */
    ck_assert_uint_eq(adapters, 2 * (2 * 16 + 16 * 2 + 2 * 16 + 8 * 2));
    pt_model_free(m);
}
END_TEST

START_TEST(test_forward_entropy)
{
    /* pt_model_forward_entropy: per position -sum p log p of the softmax of
     * the logits pt_model_forward returns (recomputed in double here), the
     * same log-probabilities, and the same gradients after a backward. */
    pt_model *m = tiny(false);
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, 6));
    pt_batch b = pt_test_row_batch(ids, tgt, 6);
    float lp[6], lp2[6], ent[6], logits[6 * V];
    ck_assert_ok(pt_model_forward(ctx, &b, lp, logits));
    ck_assert_ok(pt_model_forward_entropy(ctx, &b, lp2, ent));
    for (int t = 0; t < 6; t++) {
        const float *z = logits + t * V;
        double mx = z[0], s = 0, h = 0;
        for (int v = 1; v < V; v++)
            mx = fmax(mx, z[v]);
        for (int v = 0; v < V; v++)
            s += exp(z[v] - mx);
        double lse = mx + log(s);
        for (int v = 0; v < V; v++)
            h -= exp(z[v] - lse) * (z[v] - lse);
        ck_assert_msg(fabs(h - ent[t]) <= 1e-5, "position %d: entropy %g, expected %g", t,
                      (double)ent[t], h);
        ck_assert(h > 0.1 && h < log((double)V));
        ck_assert_float_eq_tol(lp2[t], lp[t], 1e-6f);
    }
    /* the backward of a forward_entropy equals that of a forward */
    pt_tensor_info w;
    pt_tensor_info_init(&w);
    ck_assert_ok(pt_model_find_tensor_info(&w, m, "model.layers.1.mlp.up_proj.weight"));
    float dl[6] = { -1, 0.5f, 0, 2, -0.25f, 1 };
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, NULL));
    ck_assert_ok(pt_model_backward(ctx, dl));
    ck_assert_ok(pt_model_find_tensor_info(&w, m, "model.layers.1.mlp.up_proj.weight"));
    float *g1 = malloc(w.numel * sizeof *g1);
    memcpy(g1, w.grad, w.numel * sizeof *g1);
    ck_assert_ok(pt_model_zero_grad(m));
    ck_assert_ok(pt_model_forward_entropy(ctx, &b, NULL, ent));
    ck_assert_ok(pt_model_backward(ctx, dl));
    for (size_t i = 0; i < w.numel; i++)
        ck_assert_float_eq_tol(w.grad[i], g1[i], 1e-6f * (1.0f + fabsf(g1[i])));
    free(g1);
    ck_assert_status(pt_model_forward_entropy(ctx, &b, NULL, NULL), PT_EINVAL, "NULL");
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_clone)
{
    for (int tied = 0; tied <= 1; tied++) {
        pt_model *m = tiny(tied), *c = NULL;
        ck_assert_ok(pt_model_clone(&c, m));
        pt_model_config cm, cc;
        pt_model_config_init(&cm);
        pt_model_config_init(&cc);
        ck_assert_ok(pt_model_get_config(&cm, m));
        ck_assert_ok(pt_model_get_config(&cc, c));
        ck_assert_int_eq(cc.tie_word_embeddings, tied);
        ck_assert_int_eq(cc.hidden_size, cm.hidden_size);
        ck_assert_uint_eq(pt_model_tensor_count(c), pt_model_tensor_count(m));
        ck_assert_uint_eq(pt_model_param_count(c), pt_model_param_count(m));
        for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
            pt_tensor_info a, b;
            pt_tensor_info_init(&a);
            pt_tensor_info_init(&b);
            ck_assert_ok(pt_model_tensor_info(&a, m, i));
            ck_assert_ok(pt_model_tensor_info(&b, c, i));
            ck_assert_str_eq(a.name, b.name);
            ck_assert_uint_eq(a.numel, b.numel);
            ck_assert_ptr_ne(a.data, b.data);
            ck_assert_int_eq(memcmp(a.data, b.data, a.numel * sizeof *a.data), 0);
            /* its own weights: a write into the copy leaves the source */
            float was = a.data[0];
            b.data[0] = was + 1.0f;
            ck_assert(a.data[0] == was);
        }
        pt_model_free(c);
        pt_model_free(m);
    }
    pt_model *m = tiny(false), *c = (pt_model *)1;
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_FROZEN));
    ck_assert_status(pt_model_clone(&c, m), PT_EUNSUPPORTED, "stored in BF16");
    ck_assert_ptr_null(c);
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_OFF));
    pt_lora_options o;
    ck_assert_ok(pt_lora_options_init(&o));
    ck_assert_ok(pt_model_add_lora(m, &o));
    ck_assert_status(pt_model_clone(&c, m), PT_EUNSUPPORTED, "LoRA");
    ck_assert_status(pt_model_clone(&c, NULL), PT_EINVAL, "src");
    ck_assert_status(pt_model_clone(NULL, m), PT_EINVAL, "out");
    pt_model_free(m);
}
END_TEST

START_TEST(test_bad_arguments)
{
    pt_model *m = tiny(true);
    size_t n = 0;
    pt_tensor_info t;
    pt_tensor_info_init(&t);
    uint64_t u;
    n = pt_model_tensor_count(m);
    ck_assert_status(pt_model_tensor_info(&t, m, n), PT_ERANGE, "is not below");
    ck_assert_status(pt_model_tensor_info(NULL, m, 0), PT_EINVAL, "NULL");
    ck_assert_status(pt_model_tensor_info(&t, NULL, 0), PT_EINVAL, "NULL");
    ck_assert_status(pt_model_find_tensor_info(&t, m, "no.such.weight"), PT_ENOTFOUND,
                     "'no.such.weight'");
    ck_assert_status(pt_model_find_tensor_info(&t, m, NULL), PT_EINVAL, "NULL");
    /* the getters that cannot fail return the value, 0 for NULL ... */
    ck_assert_uint_eq(pt_model_tensor_count(NULL), 0);
    ck_assert_uint_eq(pt_model_param_count(NULL), 0);
    ck_assert_uint_eq(pt_model_trainable_param_count(NULL), 0);
    /* ... and their deprecated status forms still work, and still refuse NULL */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    ck_assert_status(pt_model_num_tensors(NULL, m), PT_EINVAL, "NULL");
    ck_assert_status(pt_model_num_trainable_params(&u, NULL), PT_EINVAL, "NULL");
    size_t n2 = 0;
    ck_assert_ok(pt_model_num_tensors(&n2, m));
    ck_assert_uint_eq(n2, n);
    ck_assert_ok(pt_model_num_params(&u, m));
    ck_assert_uint_eq(u, pt_model_param_count(m));
    ck_assert_ok(pt_model_num_trainable_params(&u, m));
    ck_assert_uint_eq(u, pt_model_trainable_param_count(m));
#pragma GCC diagnostic pop
    pt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tensors");
    TCase *tc = tcase_create("tensors");
    tcase_add_test(tc, test_table);
    tcase_add_test(tc, test_data_is_live);
    tcase_add_test(tc, test_grad_view);
    tcase_add_test(tc, test_lora_listed);
    tcase_add_test(tc, test_forward_entropy);
    tcase_add_test(tc, test_clone);
    tcase_add_test(tc, test_bad_arguments);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
