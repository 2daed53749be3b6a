/* BF16 activations (pt_context_set_bf16_activations): the forward's losses
 * and log-probabilities are those without the stash bit for bit; the
 * gradients are within 1e-2 relative L2 of FP32's (2e-2 on stories260K,
 * whose peaked attention feels q and k rounded: 1.1e-2 measured) (the backward reads the
 * activations rounded to BF16, and attention recomputed from them) and not
 * equal to them (the stash is read),
 * on tiny Llama and Qwen3 (q/k norms, grouped-query attention) models, full
 * and LoRA, and on the real stories260K (skipped, loudly, without the
 * shared data); the same bits twice; the block shrinks by what the layout
 * computed by hand saves; the default follows the model's BF16 mode. */
#include "testutil.h"
#include "model_testutil.h"
#include "childcap.h"

#include "core/core.h"
#include "posttrain/posttrain.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { V = 40, B = 3, T = 20, N = B * T };

static int32_t ids[N], tgt[N];

typedef struct result {
    float *fwd;  /* loss, then the separate forward's log-probs */
    float *grad; /* the fused loss's gradients, then the separate backward's */
    size_t nf, ng;
} result;

/* One fused pt_model_loss, one without backward, then a separate forward
 * and backward (d log p = a fixed pattern), with the stash `on`, over b (n
 * tokens). */
static result run(pt_model *m, pt_context *ctx, bool on, const pt_batch *b)
{
    ck_assert_ok(pt_context_set_bf16_activations(ctx, on));
    ck_assert(pt_context_get_bf16_activations(ctx) == on);
    const size_t n = (size_t)b->batch * b->seq;
    size_t total = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        if (pt__model_tensor(m, i)->trainable)
            total += pt__model_tensor(m, i)->numel;
    result r = { malloc((n + 2) * sizeof(float)), malloc(2 * total * sizeof(float)), 0, 0 };
    ck_assert_ok(pt_model_loss(ctx, b, NULL, true, &r.fwd[r.nf++]));
    mt_take_grads(m, r.grad, &r.ng);
    ck_assert_ok(pt_model_loss(ctx, b, NULL, false, &r.fwd[r.nf])); /* packs no stash */
    ck_assert(r.fwd[r.nf] == r.fwd[0]);
    r.nf++;
    float *dlp = malloc(n * sizeof *dlp);
    for (size_t i = 0; i < n; i++)
        dlp[i] = (float)((int)(i % 7) - 3) / 8.0f;
    ck_assert_ok(pt_model_forward(ctx, b, r.fwd + r.nf, NULL));
    r.nf += n;
    ck_assert_ok(pt_model_backward(ctx, dlp));
    mt_take_grads(m, r.grad, &r.ng);
    free(dlp);
    return r;
}

static void result_free(result *r)
{
    free(r->fwd);
    free(r->grad);
}

/* ||a - b|| / ||b|| */
static double rel_l2(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    ck_assert_double_gt(s, 0);
    return sqrt(d / s);
}

/* Without, with, and with again: the forwards equal bit for bit, the
 * gradients within tol and not equal, the two stash runs the same bits. */
static double compare(pt_model *m, pt_context *ctx, const pt_batch *b, double tol,
                      const char *what)
{
    result off = run(m, ctx, false, b), on = run(m, ctx, true, b), again = run(m, ctx, true, b);
    ck_assert_uint_eq(off.nf, on.nf);
    ck_assert_uint_eq(off.ng, on.ng);
    for (size_t i = 0; i < off.nf; i++)
        ck_assert_msg(memcmp(&off.fwd[i], &on.fwd[i], sizeof(float)) == 0,
                      "%s: forward value %zu: %a without the stash, %a with", what, i,
                      (double)off.fwd[i], (double)on.fwd[i]);
    double e = rel_l2(on.grad, off.grad, off.ng);
    ck_assert_msg(e <= tol, "%s: gradients %.3e apart (tolerance %.0e)", what, e, tol);
    ck_assert_msg(e > 0, "%s: the stash changed no gradient (not read?)", what);
    ck_assert(memcmp(on.grad, again.grad, on.ng * sizeof(float)) == 0);
    ck_assert(memcmp(on.fwd, again.fwd, on.nf * sizeof(float)) == 0);
    printf("stash %s: forward bit-identical, gradients %.3e relative L2 apart\n", what, e);
    result_free(&off);
    result_free(&on);
    result_free(&again);
    return e;
}

START_TEST(test_tiny)
{
    const int archs[2] = { PT_ARCH_LLAMA, PT_ARCH_QWEN3 };
    const int arch = archs[_i / 2];
    const bool lora = _i % 2 == 1;
    pt_model *m = mt_tiny(arch, V, 4, 5);
    if (lora)
        mt_add_lora(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    ck_assert(!pt_context_get_bf16_activations(ctx)); /* an FP32 model: off by default */
    pt_batch b = pt_test_batch(B, T, ids, tgt);
    char what[64];
    snprintf(what, sizeof what, "%s%s", arch == PT_ARCH_QWEN3 ? "qwen3 (qk-norm, GQA)" : "llama",
             lora ? " LoRA" : "");
    compare(m, ctx, &b, 1e-2, what);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_stories)
{
    const char *shared = pt_test_shared_data("stash stories260K");
    char dir[4200];
    struct stat sb;
    if (shared)
        snprintf(dir, sizeof dir, "%s/models/stories260K", shared);
    if (!shared || stat(dir, &sb) != 0) {
        printf("test_stories: SKIPPED (stories260K not found under the shared data)\n");
        return;
    }
    pt_model_load_options lo;
    ck_assert_ok(pt_model_load_options_init(&lo));
    lo.load_tokenizer = false;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_load_dir(&m, dir, &lo));
    ck_assert_ok(pt_model_alloc_grads(m));
    enum { SB = 4, ST = 64 };
    int32_t sid[SB * ST], stg[SB * ST];
    pt_rng r;
    pt__rng_seed(&r, 3);
    for (int i = 0; i < SB * ST; i++)
        sid[i] = (int32_t)pt__rng_below(&r, 512);
    for (int i = 0; i < SB * ST; i++)
        stg[i] = (i % ST) + 1 < ST ? sid[i + 1] : -1;
    pt_batch b;
    pt_batch_init(&b);
    b.batch = SB;
    b.seq = ST;
    b.input_ids = sid;
    b.targets = stg;
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, SB, ST));
    compare(m, ctx, &b, 2e-2, "stories260K");
    /* for scale: how far mixed precision's BF16 products alone (no stash)
     * put the gradients, where this CPU has BF16 arithmetic */
    result f32 = run(m, ctx, false, &b);
    pt_context_free(ctx);
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_ON));
    ck_assert_ok(pt_context_create(&ctx, m, SB, ST));
    result mp = run(m, ctx, false, &b);
    printf("stash stories260K: BF16 products without the stash (%s): gradients %.3e relative L2 "
           "from FP32's\n", pt_cpu_path(), rel_l2(mp.grad, f32.grad, f32.ng));
    result_free(&f32);
    result_free(&mp);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* The block's bytes with and without the stash differ by what the layout
 * saves, computed from the shapes: N = 32 tokens, so every array is a
 * multiple of 16 floats (no alignment padding). */
START_TEST(test_bytes)
{
    for (int qk = 0; qk < 2; qk++) {
        enum { L = 5, BB = 2, TT = 16 };
        pt_model *m = mt_tiny(qk ? PT_ARCH_QWEN3 : PT_ARCH_LLAMA, V, L, 1);
        pt_context *ctx;
        ck_assert_ok(pt_context_create(&ctx, m, BB, TT));
        const size_t NN = BB * TT, H = 16, I = 24, Q = 4 * 4, KV = 2 * 4;
        /* per layer, without the stash: xmid qkv att gu (qkpre) lse; r1 r2 (rq rk) */
        const size_t big = H + (Q + 2 * KV) + Q + 2 * I + (qk ? Q + KV : 0) + 4;
        const size_t small = 2 + (qk ? 4 + 2 : 0);
        /* the stash: x xmid qkv gu (qkpre), BF16 (att and lse are recomputed) */
        const size_t sw = 2 * H + (Q + 2 * KV) + 2 * I + (qk ? Q + KV : 0);
        /* without: L inputs + the final state, L big and small sets */
        const size_t off = NN * ((L + 1) * H + L * (big + small));
        /* with: two alternating inputs + the final state, one big set, L
         * small sets, L - 1 stashes (none for the last layer) */
        const size_t on = NN * (3 * H + big + L * small) + (L - 1) * NN * sw / 2;
        size_t b_off = pt__context_block_bytes(ctx);
        ck_assert_ok(pt_context_set_bf16_activations(ctx, true));
        size_t b_on = pt__context_block_bytes(ctx);
        ck_assert_uint_eq(b_off - b_on, (off - on) * sizeof(float));
        printf("stash bytes (%s, %d layers, %zu tokens): %zu -> %zu\n", qk ? "qwen3" : "llama",
               L, NN, b_off, b_on);
        /* under gradient checkpointing the stash changes nothing */
        ck_assert_ok(pt_context_set_gradient_checkpointing(ctx, true));
        size_t b_ck = pt__context_block_bytes(ctx);
        ck_assert_ok(pt_context_set_bf16_activations(ctx, false));
        ck_assert_uint_eq(pt__context_block_bytes(ctx), b_ck);
        ck_assert_uint_lt(b_ck, b_on);
        ck_assert_ok(pt_context_set_bf16_activations(ctx, true));
        ck_assert_ok(pt_context_set_gradient_checkpointing(ctx, false));
        ck_assert_uint_eq(pt__context_block_bytes(ctx), b_on);
        pt_context_free(ctx);
        pt_model_free(m);
    }
}
END_TEST

START_TEST(test_default_and_args)
{
    pt_model *m = mt_tiny(PT_ARCH_LLAMA, V, 2, 2);
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_ON));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    ck_assert(!pt_context_get_bf16_activations(ctx)); /* full mixed precision: off by default */
    pt_context_free(ctx);
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_FROZEN));
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    ck_assert(pt_context_get_bf16_activations(ctx)); /* a frozen BF16 base: on */
    pt_context_free(ctx);
    mt_add_lora(m);
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_ON));
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    ck_assert(pt_context_get_bf16_activations(ctx)); /* LoRA on a BF16 base: on */
    /* switching drops a forward held for a backward */
    pt_batch b = pt_test_batch(B, T, ids, tgt);
    float lp[N], dlp[N] = { 0 };
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    ck_assert_ok(pt_context_set_bf16_activations(ctx, false));
    ck_assert_int_eq(pt_model_backward(ctx, dlp), PT_ESTATE);
    ck_assert(!pt_context_get_bf16_activations(ctx));
    pt_context_free(ctx);
    ck_assert_ok(pt_model_set_bf16(m, PT_BF16_OFF));
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    ck_assert(!pt_context_get_bf16_activations(ctx));
    pt_context_free(ctx);
    pt_model_free(m);
    ck_assert_int_eq(pt_context_set_bf16_activations(NULL, true), PT_EINVAL);
    ck_assert(!pt_context_get_bf16_activations(NULL));
}
END_TEST

/* One layer: no stash at all (the last layer's set stays), the same bits. */
START_TEST(test_one_layer)
{
    pt_model *m = mt_tiny(PT_ARCH_QWEN3, V, 1, 4);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, B, T));
    pt_batch b = pt_test_batch(B, T, ids, tgt);
    result off = run(m, ctx, false, &b), on = run(m, ctx, true, &b);
    ck_assert(memcmp(off.fwd, on.fwd, off.nf * sizeof(float)) == 0);
    ck_assert(memcmp(off.grad, on.grad, off.ng * sizeof(float)) == 0);
    result_free(&off);
    result_free(&on);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* In a child: the stash on, the address space capped just above what the
 * process uses, then off (it needs the bigger block): PT_ENOMEM, and the
 * context goes on with its old layout and setting, the same loss.  Exit 0
 * when all held. */
static int enomem_child(void)
{
    pt_model *m = mt_tiny(PT_ARCH_LLAMA, V, 4, 9);
    /* made with the stash (a frozen BF16 base's default); blocks of tens of MB,
     * beyond what earlier tests left free in the heap */
    pt_context *ctx;
    if (pt_model_set_bf16(m, PT_BF16_FROZEN) || pt_context_create(&ctx, m, 512, 60) ||
        !pt_context_get_bf16_activations(ctx))
        return 1;
    pt_batch b = pt_test_batch(B, T, ids, tgt);
    float l1, l2;
    if (pt_model_loss(ctx, &b, NULL, true, &l1))
        return 2;
    if (tu_cap_address_space(1ul << 20))
        return 3;
    size_t before = pt__context_block_bytes(ctx);
    if (pt_context_set_bf16_activations(ctx, false) != PT_ENOMEM ||
        pt__context_block_bytes(ctx) != before)
        return 5;
    if (!pt_context_get_bf16_activations(ctx))
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

int main(void)
{
    pt_rng r;
    pt__rng_seed(&r, 17);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)pt__rng_below(&r, V);
    for (int i = 0; i < N; i++)
        tgt[i] = (i % T) + 1 < T ? ids[i + 1] : -1;
    Suite *s = suite_create("stash");
    TCase *tc = tcase_create("stash");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_tiny, 0, 4);
    tcase_add_test(tc, test_stories);
    tcase_add_test(tc, test_bytes);
    tcase_add_test(tc, test_default_and_args);
    tcase_add_test(tc, test_one_layer);
    tcase_add_test(tc, test_enomem_keeps_the_context);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
