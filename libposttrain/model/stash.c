/* The BF16 stash of a context's activations (pt_context_set_bf16_activations;
 * the layout is model/context.c's lay_out): after layer l's forward its
 * working set (x, xmid, qkv, gu, and for qk-norm the pre-norm q|k) is
 * rounded to BF16 (nearest, ties to even) into layer l's stash; before its
 * backward the stash is widened back, and the backward recomputes the
 * attention output and row logsumexp from the rounded q|k|v
 * (model/forward.c).  The forward itself reads only FP32 (its results are
 * those without the stash, bit for bit); the backward reads the rounded
 * values, as a PyTorch autocast run's saved BF16 tensors.
 * Why attention is recomputed: probabilities recomputed from rounded q and k
 * against the FP32 forward's logsumexp no longer sum to one (a score's
 * rounding error grows with the score), which on stories260K put the
 * gradients 3.7e-2 (relative L2) from FP32's; made consistent, 5e-3.
 * The last layer keeps no stash: its working set is still there. */
#include "model/context_internal.h"

#include "kernels/bf16.h"

/* The arrays of layer l's stash in order: FP32 source/destination and the
 * width of a row; returns how many (4, or 5 with qk-norm). */
static int stash_items(const pt_context *ctx, int l, float **src, size_t *w)
{
    const pt_model *m = ctx->model;
    const size_t H = (size_t)m->cfg.hidden_size, I = (size_t)m->cfg.intermediate_size;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    const layer_acts *a = &ctx->acts[l];
    int k = 0;
    src[k] = a->x, w[k++] = H;
    src[k] = a->xmid, w[k++] = H;
    src[k] = a->qkv, w[k++] = Q + 2 * KV;
    src[k] = a->gu, w[k++] = 2 * I;
    if (m->cfg.qk_norm)
        src[k] = a->qkpre, w[k++] = Q + KV;
    return k;
}

size_t pt__stash_width(const pt_context *ctx)
{
    float *src[5];
    size_t w[5], total = 0;
    int k = stash_items(ctx, 0, src, w);
    for (int i = 0; i < k; i++)
        total += w[i];
    return total;
}

/* The arrays sit one after another in the stash, each max_batch x max_seq
 * rows long (a forward of n rows fills the first n of each). */
static void stash_move(pt_context *ctx, int l, size_t n, bool pack)
{
    const size_t N = (size_t)ctx->max_batch * (size_t)ctx->max_seq;
    float *src[5];
    size_t w[5];
    int k = stash_items(ctx, l, src, w);
    pt_bf16 *s = ctx->acts[l].stash;
    for (int i = 0; i < k; i++) {
        if (pack)
            pt__f32_to_bf16_n(s, src[i], n * w[i]);
        else
            pt__bf16_to_f32_n(src[i], s, n * w[i]);
        s += N * w[i];
    }
}

void pt__stash_pack(pt_context *ctx, int l, size_t n)
{
    stash_move(ctx, l, n, true);
}

void pt__stash_unpack(pt_context *ctx, int l, size_t n)
{
    stash_move(ctx, l, n, false);
}
