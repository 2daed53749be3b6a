/* The transformer's forward, backward and loss over a pt_context.
 *
 * Activations kept per layer for the backward (N = max_batch * max_seq):
 *   x [N,H] layer input, xmid [N,H] residual after attention, qkv
 *   [N,Q+2KV] (q and k after qk-norm and rope, v), att [N,Q] attention
 *   output, lse [B*nh*T] attention row logsumexp, gu [N,2I] gate|up, r1/r2
 *   [N] RMSNorm rstd, and for qk-norm the pre-norm q|k [N,Q+KV] and their
 *   per-head rstd.  q/k/v (and gate/up) are computed by one fused GEMM each,
 *   since their weights are adjacent in the parameter block.
 * With BF16 activations (model/stash.c) the big ones of every layer but the
 * last are kept as BF16 copies and widened before the layer's backward,
 * which recomputes the attention output and lse from them.
 * The normalised inputs and silu(gate)*up are recomputed in the backward;
 * the attention probabilities are recomputed tile by tile; the logits exist
 * only one chunk of rows at a time. */
#include "model/context_internal.h"

#include "model/lora.h"
#include "core/core.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- forward -------------------------------------------------------------------- */

static pt_linear lin(const pt_model *m, const float *w, const float *b, float *dw, float *db,
                     size_t in, size_t out)
{
    pt_linear l = { .w = w, .w16 = pt__model_w16(m, w), .q = pt__model_wq(m, w, out), .b = b,
                    .dw = dw, .db = db, .in = in, .out = out };
    return l;
}

/* A projection of the forward's first or second half: as io asks, row by
 * row, or through BF16 tiles of a quantized weight. */
static pt_linear lin_io(const pt_model *m, const pt_layer_io *io, const float *w, const float *b,
                        size_t in, size_t out)
{
    pt_linear l = lin(m, w, b, NULL, NULL, in, out);
    l.rowwise = io->rowwise;
    l.q.bf16 = l.q.bf16 || io->tiles_bf16;
    return l;
}

int pt__scratch_threads(void)
{
    int nt = pt_get_num_threads(), procs = omp_get_num_procs();
    nt = nt > procs ? nt : procs;
    return nt < 1 ? 1 : nt;
}

pt_attn_shape pt__model_attn_shape(const pt_model *m, int batch, int seq, int max_threads)
{
    const pt_model_config *c = &m->cfg;
    const size_t qkv = (size_t)m->q_dim + 2 * (size_t)m->kv_dim;
    pt_attn_shape s = {
        .batch = batch, .seq = seq, .nh = c->num_attention_heads,
        .nkv = c->num_key_value_heads, .hd = c->head_dim,
        .scale = (float)(1.0 / sqrt((double)c->head_dim)),
        .ldq = qkv, .ldkv = qkv, .ldo = (size_t)m->q_dim, .max_threads = max_threads,
        .window = c->sliding_window, /* 0: none; Mistral's: token i sees j > i - window */
    };
    return s;
}

static pt_attn_shape attn_shape(const pt_context *ctx)
{
    pt_attn_shape s = pt__model_attn_shape(ctx->model, ctx->B, ctx->T, ctx->attn_threads);
    s.seg = ctx->has_seg ? ctx->seg : NULL;
    s.tile_q = ctx->tile_q;
    s.tile_k = ctx->tile_k;
    /* mixed precision (as autocast): attention's products in BF16 too */
    s.bf16 = ctx->model->bf16_mode != PT_BF16_OFF && pt__cpu_bf16_compute();
    return s;
}

/* The start of every forward: the context holds no forward any more, and
 * the caller's batch `user` is read as a full-size struct into b, checked
 * against the context (func: the public function the messages name). */
static int read_batch(pt_batch *b, const pt_batch *user, pt_context *ctx, const char *func)
{
    ctx->state = ST_EMPTY;
    ctx->api = func;
    pt_batch_init(b);
    int st = pt__struct_read(b, sizeof *b, user, func, "pt_batch_init");
    if (st)
        return st;
    if (b->batch <= 0 || b->seq <= 0 || b->batch > ctx->max_batch || b->seq > ctx->max_seq)
        return pt__err_arg(func, "batch", "of %d x %d tokens does not fit the context's %d x %d",
                          b->batch, b->seq, ctx->max_batch, ctx->max_seq);
    if (!b->input_ids)
        return pt__err_arg(func, "batch", "input_ids is NULL");
    /* as pt_generate's: logits / T must not overflow */
    if (!(isfinite(b->temperature) && b->temperature >= 1e-6f))
        return pt__err_arg(func, "batch", "temperature %g must be finite and >= 1e-6",
                          (double)b->temperature);
    return PT_OK;
}

/* Check a batch's token data (read_batch checked the rest) and copy it
 * into the context. */
static int load_batch(pt_context *ctx, const pt_batch *b)
{
    const pt_model_config *c = &ctx->model->cfg;
    const int B = b->batch, T = b->seq;
    const size_t n = (size_t)B * T;
    for (size_t i = 0; i < n; i++) {
        int32_t id = b->input_ids[i];
        if (id < 0 || id >= c->vocab_size)
            return pt__err(PT_ERANGE, "%s: batch: input id %d at row %zu position %zu is outside the "
                          "vocabulary [0, %d)", ctx->api, id, i / (size_t)T, i % (size_t)T, c->vocab_size);
        int32_t t = b->targets ? b->targets[i] : -1;
        if (t < -1 || t >= c->vocab_size)
            return pt__err(PT_ERANGE, "%s: batch: target %d at row %zu position %zu is outside the "
                          "vocabulary [0, %d) (use -1 for no target)", ctx->api, t, i / (size_t)T,
                          i % (size_t)T, c->vocab_size);
        int32_t p = b->positions ? b->positions[i] : (int32_t)(i % (size_t)T);
        if (p < 0)
            return pt__err(PT_ERANGE, "%s: batch: position %d at row %zu position %zu is negative", ctx->api, p,
                          i / (size_t)T, i % (size_t)T);
        ctx->ids[i] = id;
        ctx->tgt[i] = t;
        ctx->pos[i] = p;
        ctx->seg[i] = b->segments ? b->segments[i] : 0;
    }
    ctx->B = B;
    ctx->T = T;
    ctx->has_seg = b->segments != NULL;
    ctx->temperature = b->temperature;
    return PT_OK;
}

/* LM head over chunks of rows: logits, log-softmax, log p(target), and when
 * dlp is given the gradient (dxn = dlogits W, dW += dlogits^T xn) from the
 * same logits.  xn is the final normalised hidden state.  With a
 * temperature T != 1 the log-softmax is of z = logits / T, and dlogits =
 * dz / T (the products' alpha). */
static void head_chunks(pt_context *ctx, const float *xn, float *logits_out, float *entropy_out,
                        const float *dlp, float *dxn, bool compute_lp)
{
    pt_model *m = ctx->model;
    const size_t H = (size_t)m->cfg.hidden_size, V = (size_t)m->cfg.vocab_size;
    const size_t n = (size_t)ctx->B * ctx->T;
    const float *W = m->w.lm_head;
    const pt_qweight Wq = pt__model_wq(m, W, V);
    const pt_bf16 *W16 = Wq.nseg ? NULL : pt__model_w16(m, W);
    const float temp = ctx->temperature;
    const float gscale = temp == 1.0f ? 1.0f : (float)(1.0 / (double)temp);
    /* Equal chunks (multiples of 16 rows) rather than full ones and a sliver. */
    size_t nchunks = (n + ctx->chunk_rows - 1) / ctx->chunk_rows;
    size_t cr = (n + nchunks - 1) / nchunks;
    cr = (cr + 15) / 16 * 16;
    if (cr > ctx->chunk_rows)
        cr = ctx->chunk_rows;
    for (size_t r0 = 0; r0 < n; r0 += cr) {
        size_t nr = n - r0 < cr ? n - r0 : cr;
        float *lg = ctx->chunk;
        if (Wq.nseg)
            pt__qgemm_segs_xwt(false, Wq.bf16, Wq.seg, Wq.nseg, nr, H, 1.0f, xn + r0 * H, H, 0.0f,
                              lg, V);
        else if (W16)
            pt__gemm_mixed(false, true, nr, V, H, 1.0f, xn + r0 * H, false, H, W16, true, H, 0.0f,
                          lg, V);
        else
            pt__sgemm(false, true, nr, V, H, 1.0f, xn + r0 * H, H, W, H, 0.0f, lg, V);
        if (logits_out)
            memcpy(logits_out + r0 * V, lg, nr * V * sizeof *lg);
        if (temp != 1.0f)
            pt__div_scalar(lg, nr * V, temp);
        if (compute_lp && entropy_out)
            pt__logsoftmax_entropy_rows(ctx->head_lse + r0, ctx->lp + r0, entropy_out + r0, lg,
                                       ctx->tgt + r0, nr, V);
        else if (compute_lp)
            pt__logsoftmax_rows(ctx->head_lse + r0, ctx->lp + r0, lg, ctx->tgt + r0, nr, V);
        if (!dlp)
            continue;
        if (ctx->bwd_dent)
            pt__logsoftmax_entropy_backward_rows(lg, ctx->head_lse + r0, dlp + r0, ctx->bwd_dent + r0,
                                                ctx->tgt + r0, nr, V);
        else
            pt__logsoftmax_backward_rows(lg, ctx->head_lse + r0, dlp + r0, ctx->tgt + r0, nr, V);
        /* dlogits, read by both products, rounded to BF16 once */
        pt_bf16 *lg16 = W16 && m->g.lm_head ? pt__bf16_operand(lg, nr, V, V) : NULL;
        const void *lga = lg16 ? (const void *)lg16 : (const void *)lg;
        if (Wq.nseg)
            pt__qgemm_segs_dyw(Wq.bf16, Wq.seg, Wq.nseg, nr, H, gscale, lg, V, 0.0f, dxn + r0 * H,
                              H);
        else if (W16)
            pt__gemm_mixed(false, false, nr, H, V, gscale, lga, lg16 != NULL, V, W16, true, H, 0.0f,
                          dxn + r0 * H, H);
        else
            pt__sgemm(false, false, nr, H, V, gscale, lg, V, W, H, 0.0f, dxn + r0 * H, H);
        if (m->g.lm_head && W16) /* mixed precision: the gradient's product in BF16 too */
            pt__gemm_mixed(true, false, V, H, nr, gscale, lga, lg16 != NULL, V, xn + r0 * H, false,
                          H, 1.0f, m->g.lm_head, H);
        else if (m->g.lm_head) /* NULL when the base is frozen (LoRA) */
            pt__sgemm(true, false, V, H, nr, gscale, lg, V, xn + r0 * H, H, 1.0f, m->g.lm_head, H);
        free(lg16);
    }
}

void pt__layer_forward_qkv(const pt_model *m, int l, size_t n, const pt_layer_io *io)
{
    const pt_model_config *c = &m->cfg;
    const pt_layer_w *w = &m->w.layers[l];
    const size_t H = (size_t)c->hidden_size, Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    const size_t QKV = Q + 2 * KV;
    const int nh = c->num_attention_heads, nkv = c->num_key_value_heads, hd = c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    /* q|k|v in one product: the three weights (and biases) are adjacent;
     * its input, the norm of x, made within it (pt__linear_forward_pre) */
    pt_linear lqkv = lin_io(m, io, w->wq, w->bq, H, QKV);
    pt__lora_attach(&lqkv, m, l, PT_LORA_Q | PT_LORA_K | PT_LORA_V, io->lora_buf);
    const pt_qpre n1 = { .kind = PT_QPRE_RMSNORM, .w = w->ln1, .eps = eps, .rstd = io->r1, .out = io->xn,
                         .ldo = H };
    pt__linear_forward_pre(&lqkv, io->qkv, QKV, io->x, H, n, false, &n1);
    float *qp = io->qkv, *kp = io->qkv + Q;
    if (c->qk_norm) {
        for (size_t t = 0; t < n; t++)
            memcpy(io->qkpre + t * (Q + KV), io->qkv + t * QKV, (Q + KV) * sizeof(float));
        pt__headnorm_forward(qp, QKV, io->rq, io->qkpre, Q + KV, w->qn, n, nh, hd, eps);
        pt__headnorm_forward(kp, QKV, io->rk, io->qkpre + Q, Q + KV, w->kn, n, nkv, hd, eps);
    }
    /* q's heads then k's, adjacent in each row (q_dim = nh hd): one pass */
    if (!io->rope_later)
        pt__rope_apply(qp, QKV, n, nh + nkv, hd, io->cos_t, io->sin_t, false);
}

void pt__layer_forward_out(const pt_model *m, int l, size_t n, const pt_layer_io *io)
{
    const pt_model_config *c = &m->cfg;
    const pt_layer_w *w = &m->w.layers[l];
    const size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)m->q_dim;
    const float eps = (float)c->rms_norm_eps;
    pt__copy(io->xmid, io->x, n * H);
    pt_linear lo = lin_io(m, io, w->wo, NULL, Q, H);
    pt__lora_attach(&lo, m, l, PT_LORA_O, io->lora_buf);
    pt__linear_forward(&lo, io->xmid, H, io->att, Q, n, true);
    pt_linear lgu = lin_io(m, io, w->wg, NULL, H, 2 * I);
    pt__lora_attach(&lgu, m, l, PT_LORA_GATE | PT_LORA_UP, io->lora_buf);
    const pt_qpre n2 = { .kind = PT_QPRE_RMSNORM, .w = w->ln2, .eps = eps, .rstd = io->r2, .out = io->xn,
                         .ldo = H };
    pt__linear_forward_pre(&lgu, io->gu, 2 * I, io->xmid, H, n, false, &n2);
    pt__copy(io->out, io->xmid, n * H);
    pt_linear ld = lin_io(m, io, w->wd, NULL, I, H);
    pt__lora_attach(&ld, m, l, PT_LORA_DOWN, io->lora_buf);
    const pt_qpre sw = { .kind = PT_QPRE_SWIGLU, .u = io->gu + I, .out = io->h, .ldo = I };
    pt__linear_forward_pre(&ld, io->out, H, io->gu, 2 * I, n, true, &sw);
}

/* Layer l over the context's n rows: its input acts[l].x, its output
 * acts[l + 1].x, the activations for the backward in acts[l]. */
static void layer_forward(pt_context *ctx, int l, size_t n, const pt_attn_shape *as)
{
    const pt_model *m = ctx->model;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    layer_acts *a = &ctx->acts[l];
    pt_layer_io io = {
        .x = a->x, .xmid = a->xmid, .out = ctx->acts[l + 1].x, .qkv = a->qkv,
        .att = a->att, .gu = a->gu, .r1 = a->r1, .r2 = a->r2, .qkpre = a->qkpre,
        .rq = a->rq, .rk = a->rk, .xn = ctx->xn, .h = ctx->hbuf, .cos_t = ctx->cos_t,
        .sin_t = ctx->sin_t, .lora_buf = ctx->lora_buf, .rowwise = false,
    };
    pt__layer_forward_qkv(m, l, n, &io);
    pt__attention_forward(a->att, a->lse, a->qkv, a->qkv + Q, a->qkv + Q + KV, as,
                         ctx->attn_scratch);
    pt__layer_forward_out(m, l, n, &io);
}

/* b: a batch read by read_batch. */
static int forward_run(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits,
                        float *entropy, const float *fused_dlp)
{
    pt_model *m = ctx->model;
    const pt_model_config *c = &m->cfg;
    int st = load_batch(ctx, b);
    if (st != PT_OK)
        return st;
    if (fused_dlp && (st = pt_model_alloc_grads(m)) != PT_OK)
        return st;
    if ((st = pt__lora_scratch(&ctx->lora_buf, &ctx->lora_cap, m,
                              (size_t)ctx->B * ctx->T)) != PT_OK)
        return st;
    pt__model_bf16_prepare(m);
    const int L = c->num_hidden_layers;
    const size_t n = (size_t)ctx->B * ctx->T;
    const size_t H = (size_t)c->hidden_size;
    const int hd = c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    pt_attn_shape as = attn_shape(ctx);

    pt__rope_table(ctx->cos_t, ctx->sin_t, ctx->pos, n, m->inv_freq, hd);
    pt__model_embed(m, ctx->acts[0].x, ctx->ids, n);
    for (int l = 0; l < L; l++) {
        layer_forward(ctx, l, n, &as);
        if (ctx->acts[l].stash && !ctx->no_backward) /* the copy the backward reads */
            pt__stash_pack(ctx, l, n);
        if ((st = pt_check_abort()) != PT_OK)
            return st;
    }
    pt__rmsnorm_forward(ctx->xn, ctx->rf, ctx->acts[L].x, m->w.norm, n, H, eps);
    head_chunks(ctx, ctx->xn, logits, entropy, fused_dlp, ctx->dxn, true);
    if (logprobs)
        memcpy(logprobs, ctx->lp, n * sizeof *logprobs);
    ctx->state = fused_dlp ? ST_FORWARD_FUSED : ST_FORWARD;
    ctx->generation = pt__model_generation(m);
    return PT_OK;
}

/* forward_run with the context's thread count. */
static int forward_impl(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits,
                        float *entropy, const float *fused_dlp)
{
    int prev = pt__threads_enter(ctx->num_threads);
    int st = forward_run(ctx, b, logprobs, logits, entropy, fused_dlp);
    pt__threads_leave(prev);
    return st;
}

int pt__ctx_forward(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits)
{
    pt_batch lb;
    int st = read_batch(&lb, b, ctx, "pt_model_forward");
    return st ? st : forward_impl(ctx, &lb, logprobs, logits, NULL, NULL);
}

int pt__ctx_forward_entropy(pt_context *ctx, const pt_batch *b, float *logprobs, float *entropy)
{
    pt_batch lb;
    int st = read_batch(&lb, b, ctx, "pt_model_forward_entropy");
    return st ? st : forward_impl(ctx, &lb, logprobs, NULL, entropy, NULL);
}

int pt_model_forward(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits)
{
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(b);
    int st = pt__busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt__ctx_forward(ctx, b, logprobs, logits);
    pt__busy_leave(&ctx->busy);
    return st;
}

int pt_model_forward_entropy(pt_context *ctx, const pt_batch *b, float *logprobs, float *entropy)
{
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(b);
    PT_CHECK_NULL(entropy);
    int st = pt__busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt__ctx_forward_entropy(ctx, b, logprobs, entropy);
    pt__busy_leave(&ctx->busy);
    return st;
}

/* ---- backward ------------------------------------------------------------------- */

static int backward_run(pt_context *ctx, const float *dlp)
{
    pt_model *m = ctx->model;
    const pt_model_config *c = &m->cfg;
    int st = pt_model_alloc_grads(m);
    if (st != PT_OK)
        return st;
    const int L = c->num_hidden_layers;
    const size_t n = (size_t)ctx->B * ctx->T;
    const size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    const int nh = c->num_attention_heads, nkv = c->num_key_value_heads, hd = c->head_dim;
    const size_t QKV = Q + 2 * KV;
    const float eps = (float)c->rms_norm_eps;
    pt_attn_shape as = attn_shape(ctx);
    float *xn = ctx->xn, *dx = ctx->dx, *dxn = ctx->dxn;

    if (ctx->state == ST_FORWARD) {
        pt__rmsnorm_forward(xn, NULL, ctx->acts[L].x, m->w.norm, n, H, eps);
        head_chunks(ctx, xn, NULL, NULL, dlp, dxn, false);
    }
    ctx->state = ST_EMPTY;
    pt__rmsnorm_backward(dx, m->g.norm, dxn, ctx->acts[L].x, m->w.norm, ctx->rf, n, H, false);

    for (int l = L - 1; l >= 0; l--) {
        layer_acts *a = &ctx->acts[l];
        /* gradient checkpointing: the layer's activations again, from its
         * input (its output, rewritten, comes out the same bits) */
        if (ctx->recompute && l < L - 1) /* the last layer's are still there */
            layer_forward(ctx, l, n, &as);
        else if (a->stash) { /* BF16 stash (none for the last layer) */
            pt__stash_unpack(ctx, l, n);
            /* attention consistent with the rounded q|k|v (model/stash.c) */
            pt__attention_forward(a->att, a->lse, a->qkv, a->qkv + Q, a->qkv + Q + KV, &as,
                                 ctx->attn_scratch);
        }
        const pt_layer_w *w = &m->w.layers[l];
        pt_layer_w *g = &m->g.layers[l];
        /* MLP: dx holds dLoss/d(layer output) = d(xmid) through the residual. */
        pt__rmsnorm_forward(xn, NULL, a->xmid, w->ln2, n, H, eps);
        pt__swiglu_forward(ctx->hbuf, a->gu, a->gu + I, n, I, 2 * I);
        pt_linear ld = lin(m, w->wd, NULL, g->wd, NULL, I, H);
        pt__lora_attach(&ld, m, l, PT_LORA_DOWN, ctx->lora_buf);
        /* dh overwrites h: the weight gradient is taken first */
        pt__linear_backward(&ld, ctx->hbuf, I, false, dx, H, ctx->hbuf, I, n);
        pt__swiglu_backward(ctx->dgu, ctx->dgu + I, ctx->hbuf, a->gu, a->gu + I, n, I, 2 * I);
        pt_linear lgu = lin(m, w->wg, NULL, g->wg, NULL, H, 2 * I);
        pt__lora_attach(&lgu, m, l, PT_LORA_GATE | PT_LORA_UP, ctx->lora_buf);
        pt__linear_backward(&lgu, dxn, H, false, ctx->dgu, 2 * I, xn, H, n);
        pt__rmsnorm_backward(dx, g->ln2, dxn, a->xmid, w->ln2, a->r2, n, H, true);
        /* Attention. */
        pt_linear lo = lin(m, w->wo, NULL, g->wo, NULL, Q, H);
        pt__lora_attach(&lo, m, l, PT_LORA_O, ctx->lora_buf);
        pt__linear_backward(&lo, ctx->datt, Q, false, dx, H, a->att, Q, n);
        float *dq = ctx->dqkv, *dk = ctx->dqkv + Q, *dv = ctx->dqkv + Q + KV;
        pt__attention_backward(dq, dk, dv, ctx->datt, a->qkv, a->qkv + Q, a->qkv + Q + KV,
                              a->att, a->lse, &as, ctx->attn_scratch);
        pt__rope_apply(dq, QKV, n, nh + nkv, hd, ctx->cos_t, ctx->sin_t, true); /* dq | dk */
        if (c->qk_norm) {
            pt__headnorm_backward(dq, QKV, g->qn, dq, QKV, a->qkpre, Q + KV, w->qn, a->rq, n, nh,
                                 hd);
            pt__headnorm_backward(dk, QKV, g->kn, dk, QKV, a->qkpre + Q, Q + KV, w->kn, a->rk, n,
                                 nkv, hd);
        }
        pt__rmsnorm_forward(xn, NULL, a->x, w->ln1, n, H, eps);
        pt_linear lqkv = lin(m, w->wq, w->bq, g->wq, g->bq, H, QKV);
        pt__lora_attach(&lqkv, m, l, PT_LORA_Q | PT_LORA_K | PT_LORA_V, ctx->lora_buf);
        pt__linear_backward(&lqkv, dxn, H, false, ctx->dqkv, QKV, xn, H, n);
        pt__rmsnorm_backward(dx, g->ln1, dxn, a->x, w->ln1, a->r1, n, H, true);
        if ((st = pt_check_abort()) != PT_OK)
            return st;
    }
    if (m->g.embed) /* NULL when the base is frozen (LoRA) */
        pt__embedding_backward(m->g.embed, dx, ctx->ids, n, H);
    return PT_OK;
}

/* backward_run with the context's thread count. */
static int backward_impl(pt_context *ctx, const float *dlp)
{
    int prev = pt__threads_enter(ctx->num_threads);
    int st = backward_run(ctx, dlp);
    pt__threads_leave(prev);
    return st;
}

int pt_model_backward(pt_context *ctx, const float *dlogprobs)
{
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(dlogprobs);
    int st = pt__busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt__ctx_backward(ctx, dlogprobs);
    pt__busy_leave(&ctx->busy);
    return st;
}

int pt__ctx_backward(pt_context *ctx, const float *dlogprobs)
{
    int gst = pt__context_check_current(ctx, "pt_model_backward");
    if (gst)
        return gst;
    if (ctx->state != ST_FORWARD)
        return pt__err(PT_ESTATE, "pt_model_backward: no forward pass to differentiate on this "
                      "context (call pt_model_forward first; one backward per forward)");
    int st = pt__lora_check_backward(ctx->model, "pt_model_backward");
    if (st)
        return st;
    const size_t n = (size_t)ctx->B * ctx->T;
    memcpy(ctx->dlp, dlogprobs, n * sizeof *ctx->dlp);
    return backward_impl(ctx, ctx->dlp);
}

int pt__ctx_backward_entropy(pt_context *ctx, const float *dlogprobs, const float *dentropy)
{
    ctx->bwd_dent = dentropy; /* read where the backward recomputes the head's chunks */
    int st = pt__ctx_backward(ctx, dlogprobs);
    ctx->bwd_dent = NULL;
    return st;
}

/* Fill dlp (B*T) with -w/sum(w) for the tokens with a target (w: weights,
 * or 1) and *wsum with sum(w); PT_EINVAL naming the first bad weight. */
static int loss_weights(float *dlp, double *wsum, const pt_batch *b, const float *weights)
{
    const size_t n = (size_t)b->batch * b->seq;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        bool has = b->targets && b->targets[i] >= 0;
        float w = weights ? weights[i] : 1.0f;
        if (weights && !(w >= 0.0f && isfinite(w)))
            return pt__err_arg("pt_model_loss", "weight", "%g at token %zu must be finite and >= 0",
                              (double)w, i);
        if (has)
            sum += w;
    }
    if (sum > 0.0)
        for (size_t i = 0; i < n; i++) {
            bool has = b->targets && b->targets[i] >= 0;
            dlp[i] = has ? (float)(-(weights ? weights[i] : 1.0f) / sum) : 0.0f;
        }
    *wsum = sum;
    return PT_OK;
}

int pt_model_loss(pt_context *ctx, const pt_batch *b, const float *weights, bool backward,
                  float *loss)
{
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(b);
    PT_CHECK_NULL(loss);
    int st = pt__busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt__ctx_loss(ctx, b, weights, backward, loss);
    pt__busy_leave(&ctx->busy);
    return st;
}

int pt__ctx_loss(pt_context *ctx, const pt_batch *b, const float *weights, bool backward, float *loss)
{
    *loss = 0.0f;
    pt_batch lb;
    int st = read_batch(&lb, b, ctx, "pt_model_loss");
    if (st == PT_OK && backward)
        st = pt__lora_check_backward(ctx->model, "pt_model_loss");
    double wsum = 0.0;
    if (st == PT_OK)
        st = loss_weights(ctx->dlp, &wsum, &lb, weights);
    bool fused = backward && wsum > 0.0;
    ctx->no_backward = !fused; /* the forward is consumed here: no stash to keep */
    if (st == PT_OK)
        st = forward_impl(ctx, &lb, NULL, NULL, NULL, fused ? ctx->dlp : NULL);
    ctx->no_backward = false;
    if (st != PT_OK)
        return st;
    if (wsum > 0.0) {
        const size_t n = (size_t)lb.batch * lb.seq;
        double s = 0.0;
        for (size_t i = 0; i < n; i++)
            if (ctx->tgt[i] >= 0)
                s += (double)(weights ? weights[i] : 1.0f) * (double)ctx->lp[i];
        *loss = (float)(-s / wsum);
    }
    if (!fused) {
        if (backward)
            ctx->state = ST_EMPTY; /* nothing to accumulate; the forward is consumed */
        return PT_OK;
    }
    return backward_impl(ctx, ctx->dlp);
}
