/* Gradient checkpointing (pt_context_set_gradient_checkpointing): the
 * backward that recomputes each layer's activations from its input gives
 * the gradients, losses and log-probabilities of the backward that kept
 * them, bit for bit, on Llama, Qwen2 (q/k/v biases) and Qwen3 (q/k norms),
 * full and LoRA, fused (pt_model_loss) and separate (forward, backward). */
#include "testutil.h"
#include "model_testutil.h"
#include "childcap.h"

#include "core/core.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { V = 40, B = 3, T = 20, N = B * T };

static int32_t ids[N], tgt[N];

/* Loss and gradients of one fused pt_model_loss, then of a separate
 * forward and backward (d log p = a fixed pattern), with checkpointing
 * `on`; results appended to out (floats). */
static size_t run(pt_model *m, pt_context *ctx, bool on, float *out)
{
    ck_assert_ok(pt_context_set_gradient_checkpointing(ctx, on));
    ck_assert(pt_context_get_gradient_checkpointing(ctx) == on);
    pt_batch b = pt_test_batch(B, T, ids, tgt);
    size_t k = 0;
    float loss;
    ck_assert_ok(pt_model_loss(ctx, &b, NULL, true, &loss));
    out[k++] = loss;
    mt_take_grads(m, out, &k);
    float lp[N], dlp[N];
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    for (int i = 0; i < N; i++)
        dlp[i] = (float)((i % 7) - 3) / 8.0f;
    ck_assert_ok(pt_model_backward(ctx, dlp));
    memcpy(out + k, lp, sizeof lp);
    k += N;
    mt_take_grads(m, out, &k);
    return k;
}

static void compare(int arch, bool lora)
{
    pt_model *m = mt_tiny(arch, V, 3, 5);
    if (lora)
        mt_add_lora(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    size_t cap = 4 * 1000000;
    float *plain = malloc(cap * sizeof(float)), *ckpt = malloc(cap * sizeof(float));
    size_t a = run(m, ctx, false, plain);
    size_t b = run(m, ctx, true, ckpt);
    ck_assert_uint_eq(a, b);
    ck_assert_uint_gt(a, 2 * N);
    for (size_t i = 0; i < a; i++)
        ck_assert_msg(memcmp(&plain[i], &ckpt[i], sizeof(float)) == 0,
                      "arch %d lora %d value %zu: %a without, %a with checkpointing", arch, lora,
                      i, (double)plain[i], (double)ckpt[i]);
    /* nonzero gradients: the comparison compared something */
    double s = 0;
    for (size_t i = 1; i < a; i++)
        s += (double)plain[i] * plain[i];
    ck_assert_double_gt(s, 0);
    /* switching drops a forward held for a backward */
    pt_batch bt = pt_test_batch(B, T, ids, tgt);
    float lp[N], dlp[N] = { 0 };
    ck_assert_ok(pt_model_forward(ctx, &bt, lp, NULL));
    ck_assert_ok(pt_context_set_gradient_checkpointing(ctx, false));
    ck_assert_int_eq(pt_model_backward(ctx, dlp), PT_ESTATE);
    free(plain);
    free(ckpt);
    pt_context_free(ctx);
    pt_model_free(m);
}

START_TEST(test_same_bits)
{
    const int archs[3] = { PT_ARCH_LLAMA, PT_ARCH_QWEN2, PT_ARCH_QWEN3 };
    compare(archs[_i / 2], _i % 2 == 1);
}
END_TEST

/* In a child: checkpointing on, the address space capped just above what
 * the process uses, then off (it needs the bigger block): PT_ENOMEM, and
 * the context goes on working with its old layout and setting, the same
 * loss as before.  Exit 0 when all held. */
static int enomem_child(void)
{
    pt_model *m = mt_tiny(PT_ARCH_LLAMA, V, 3, 9);
    pt_context *ctx;
    if (pt_context_create(&ctx, m, 64, 60) || pt_context_set_gradient_checkpointing(ctx, true))
        return 1;
    pt_batch b = pt_test_batch(B, T, ids, tgt);
    float l1, l2;
    if (pt_model_loss(ctx, &b, NULL, true, &l1))
        return 2;
    if (tu_cap_address_space(1ul << 20))
        return 3;
    if (pt_context_set_gradient_checkpointing(ctx, false) != PT_ENOMEM)
        return 5;
    if (!pt_context_get_gradient_checkpointing(ctx))
        return 6;
    if (pt_model_loss(ctx, &b, NULL, true, &l2) || memcmp(&l1, &l2, sizeof l1) != 0)
        return 7;
    return 0;
}

START_TEST(test_enomem_keeps_the_context)
{
    tu_run_in_child(enomem_child, "test_enomem_keeps_the_context");
}
END_TEST

START_TEST(test_args)
{
    ck_assert_int_eq(pt_context_set_gradient_checkpointing(NULL, true), PT_EINVAL);
    ck_assert(!pt_context_get_gradient_checkpointing(NULL));
}
END_TEST

int main(void)
{
    pt_rng r;
    pt__rng_seed(&r, 17);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)pt__rng_below(&r, V);
    for (int i = 0; i < N; i++)
        tgt[i] = (i % T) + 1 < T ? ids[i + 1] : -1;
    Suite *s = suite_create("checkpointing");
    TCase *tc = tcase_create("checkpointing");
    tcase_add_loop_test(tc, test_same_bits, 0, 6);
    tcase_add_test(tc, test_args);
    tcase_add_test(tc, test_enomem_keeps_the_context);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
