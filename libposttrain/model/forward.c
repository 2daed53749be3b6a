/* The transformer's forward, backward and loss over a pt_context.
 *
 * Activations kept per layer for the backward (N = max_batch * max_seq):
 *   x [N,H] layer input, xmid [N,H] residual after attention, qkv
 *   [N,Q+2KV] (q and k after qk-norm and rope, v), att [N,Q] attention
 *   output, lse [B*nh*T] attention row logsumexp, gu [N,2I] gate|up, r1/r2
 *   [N] RMSNorm rstd, and for qk-norm the pre-norm q|k [N,Q+KV] and their
 *   per-head rstd.  q/k/v (and gate/up) are computed by one fused GEMM each,
 *   since their weights are adjacent in the parameter block.
 * The normalised inputs and silu(gate)*up are recomputed in the backward;
 * the attention probabilities are recomputed tile by tile; the logits exist
 * only one chunk of rows at a time. */
#include "model/transformer.h"

#include "model/lora.h"
#include "core/core.h"
#include "core/busy.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

#include <math.h>
#include <omp.h>
#include <string.h>

typedef struct layer_acts {
    float *x, *xmid, *qkv, *att, *lse, *gu, *r1, *r2;
    float *qkpre, *rq, *rk; /* qk-norm only */
} layer_acts;

enum { ST_EMPTY = 0, ST_FORWARD = 1, ST_FORWARD_FUSED = 2 };

struct pt_context {
    pt_busy busy;         /* the public function using it (core/busy.h), or NULL */
    pt_model *model;
    uint64_t generation;  /* the model's structure generation at the last forward */
    int max_batch, max_seq;
    int B, T;
    int state;
    const char *api;      /* the public function of the batch being read, for messages */
    size_t chunk_rows, chunk_rows_max;
    int tile_q, tile_k;
    int attn_threads;
    float *block;
    layer_acts *acts;     /* num_hidden_layers + 1 (the last holds only x) */
    float *rf, *head_lse, *lp, *dlp;
    float *xn, *hbuf, *dx, *dxn, *dqkv, *datt, *dgu;
    float *chunk;
    float *cos_t, *sin_t;
    float *attn_scratch;
    int32_t *ids, *tgt, *pos, *seg;
    bool has_seg;
    float temperature;    /* the batch's, kept for the backward (1: none) */
    float *lora_buf;      /* LoRA adapter scratch (pt_lora_scratch), grown on demand */
    size_t lora_cap;
    int num_threads;      /* pt_context_set_num_threads; 0: the process setting */
};

/* ---- allocation --------------------------------------------------------------- */

size_t pt_plan(pt_planner *p, size_t a, size_t b)
{
    size_t n, start = (p->total + 15) & ~(size_t)15, end;
    if (!pt_mul_size(a, b, &n) || !pt_add_size(start, n, &end) ||
        end > ((size_t)1 << 60) / sizeof(float)) {
        p->overflow = true;
        return 0;
    }
    p->total = end;
    return start;
}


float *pt_plan_at(pt_planner *p, float *base, size_t a, size_t b)
{
    size_t off = pt_plan(p, a, b);
    return base ? base + off : NULL;
}

/* Plan the context's block (N tokens) with p; with base != NULL point the
 * buffers into it as well (the same plan, run again, gives the same
 * offsets). */
static void lay_out(pt_context *ctx, pt_planner *p, float *base, size_t N)
{
    const pt_model *m = ctx->model;
    const pt_model_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim, V = (size_t)c->vocab_size;
    const size_t nh = (size_t)c->num_attention_heads, nkv = (size_t)c->num_key_value_heads;
    const size_t hd = (size_t)c->head_dim;
    const int L = c->num_hidden_layers;
    for (int l = 0; l <= L; l++) {
        layer_acts *a = &ctx->acts[l];
        a->x = pt_plan_at(p, base, N, H);
        if (l == L)
            break; /* the last holds only the final hidden state */
        a->xmid = pt_plan_at(p, base, N, H);
        a->qkv = pt_plan_at(p, base, N, Q + 2 * KV);
        a->att = pt_plan_at(p, base, N, Q);
        a->lse = pt_plan_at(p, base, N, nh);
        a->gu = pt_plan_at(p, base, N, 2 * I);
        a->r1 = pt_plan_at(p, base, N, 1);
        a->r2 = pt_plan_at(p, base, N, 1);
        if (c->qk_norm) {
            a->qkpre = pt_plan_at(p, base, N, Q + KV); /* q|k before the norm */
            a->rq = pt_plan_at(p, base, N, nh);
            a->rk = pt_plan_at(p, base, N, nkv);
        }
    }
    ctx->rf = pt_plan_at(p, base, N, 1);
    ctx->head_lse = pt_plan_at(p, base, N, 1);
    ctx->lp = pt_plan_at(p, base, N, 1);
    ctx->dlp = pt_plan_at(p, base, N, 1);
    ctx->xn = pt_plan_at(p, base, N, H);
    ctx->hbuf = pt_plan_at(p, base, N, I);
    ctx->dx = pt_plan_at(p, base, N, H);
    ctx->dxn = pt_plan_at(p, base, N, H);
    ctx->dqkv = pt_plan_at(p, base, N, Q + 2 * KV);
    ctx->datt = pt_plan_at(p, base, N, Q);
    ctx->dgu = pt_plan_at(p, base, N, 2 * I);
    ctx->chunk = pt_plan_at(p, base, ctx->chunk_rows, V);
    ctx->cos_t = pt_plan_at(p, base, N, hd / 2);
    ctx->sin_t = pt_plan_at(p, base, N, hd / 2);
    pt_attn_shape as = pt_model_attn_shape(m, ctx->max_batch, ctx->max_seq, ctx->attn_threads);
    ctx->attn_scratch =
        pt_plan_at(p, base, pt_attention_scratch_floats(&as, ctx->attn_threads), 1);
    /* four int32 arrays, stored in float-sized slots */
    int32_t *ib = (int32_t *)(void *)pt_plan_at(p, base, N, 4);
    ctx->ids = ib;
    ctx->tgt = ib ? ib + N : NULL;
    ctx->pos = ib ? ib + 2 * N : NULL;
    ctx->seg = ib ? ib + 3 * N : NULL;
}

static int context_create(pt_context **out, pt_model *model, int max_batch, int max_seq,
                          bool packed, const char *fn);

int pt_context_create(pt_context **out, pt_model *model, int max_batch, int max_seq)
{
    return context_create(out, model, max_batch, max_seq, false, __func__);
}

int pt_context_create_packed(pt_context **out, pt_model *model, int max_batch, int max_seq)
{
    return context_create(out, model, max_batch, max_seq, true, __func__);
}

/* The checks name fn, the public function the host called. */
static int context_create(pt_context **out, pt_model *model, int max_batch, int max_seq,
                          bool packed, const char *fn)
{
    if (!out)
        return pt_err(PT_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!model)
        return pt_err(PT_EINVAL, "%s: model is NULL", fn);
    if (max_batch <= 0)
        return pt_err_arg(fn, "max_batch", "%d must be positive", max_batch);
    if (max_seq <= 0)
        return pt_err_arg(fn, "max_seq", "%d must be positive", max_seq);
    int st = packed ? PT_OK : pt_model_check_positions(model, max_seq, fn);
    if (st)
        return st;
    size_t N;
    if (!pt_mul_size((size_t)max_batch, (size_t)max_seq, &N) || N > (size_t)INT32_MAX)
        return pt_err(PT_ENOMEM, "%s: %d x %d tokens is too many", fn, max_batch, max_seq);
    pt_context *ctx = pt_calloc(1, sizeof *ctx);
    if (!ctx)
        return PT_ENOMEM;
    ctx->model = pt_model_retain(model);
    ctx->generation = pt_model_generation(model);
    ctx->max_batch = max_batch;
    ctx->max_seq = max_seq;
    ctx->acts = pt_calloc((size_t)model->cfg.num_hidden_layers + 1, sizeof *ctx->acts);
    if (!ctx->acts) {
        pt_context_free(ctx);
        return PT_ENOMEM;
    }
    /* Logit chunk: about 64 MiB of floats (336 rows at vocab 49152: few passes
     * over the LM head weight), at least 16 rows, at most N. */
    size_t cr = ((size_t)1 << 24) / (size_t)model->cfg.vocab_size;
    cr = cr < 16 ? 16 : (cr / 16) * 16;
    ctx->chunk_rows = cr > N ? N : cr;
    ctx->chunk_rows_max = ctx->chunk_rows;
    ctx->attn_threads = pt_scratch_threads();
    pt_planner p = { 0, false };
    lay_out(ctx, &p, NULL, N);
    if (p.overflow)
        st = pt_err(PT_ENOMEM, "%s: activation memory for %d x %d tokens overflows", fn, max_batch, max_seq);
    else if (!(ctx->block = pt_malloc_aligned(p.total * sizeof(float))))
        st = pt_err_prefix(PT_ENOMEM, "%s: %zu MiB of activations", fn, p.total * sizeof(float) >> 20);
    if (st) {
        pt_context_free(ctx);
        return st;
    }
    pt_planner again = { 0, false };
    lay_out(ctx, &again, ctx->block, N);
    *out = ctx;
    return PT_OK;
}

int pt_context_take(pt_context *ctx, const char *fn)
{
    return pt_busy_enter(&ctx->busy, fn, "context", ctx);
}

void pt_context_give(pt_context *ctx)
{
    pt_busy_leave(&ctx->busy);
}

pt_model *pt_context_model(const pt_context *ctx)
{
    return ctx ? ctx->model : NULL;
}

int pt_context_check_current(const pt_context *ctx, const char *who)
{
    if (pt_model_generation(ctx->model) == ctx->generation)
        return PT_OK;
    return pt_err(PT_ESTATE, "%s: the model's tensors changed (%s) since this context's forward "
                  "pass: run the forward again", who, pt_model_last_change(ctx->model));
}

void pt_context_free(pt_context *ctx)
{
    if (!ctx)
        return;
    pt_free_aligned(ctx->block);
    pt_free_aligned(ctx->lora_buf);
    pt_free(ctx->acts);
    pt_model_release(ctx->model);
    pt_free(ctx);
}

int pt_context_set_num_threads(pt_context *ctx, int n)
{
    PT_CHECK_NULL(ctx);
    int st = pt_thread_setting_check(n, __func__);
    if (!st && !(st = pt_busy_enter(&ctx->busy, __func__, "context", ctx))) {
        ctx->num_threads = n;
        pt_busy_leave(&ctx->busy);
    }
    return st;
}

int pt_context_get_num_threads(const pt_context *ctx)
{
    if (!ctx)
        return pt_err(PT_EINVAL, "pt_context_get_num_threads: ctx is NULL");
    return pt_thread_setting_count(ctx->num_threads);
}

int pt_batch_init(pt_batch *b)
{
    PT_STRUCT_INIT_ZERO(b);
    b->temperature = 1.0f;
    return PT_OK;
}

int pt_context_set_tiling(pt_context *ctx, size_t chunk_rows, int tile_q, int tile_k)
{
    PT_CHECK_NULL(ctx);
    pt_attn_shape def = { .hd = ctx->model->cfg.head_dim };
    size_t have = pt_attention_scratch_floats(&def, 1);
    pt_attn_shape want = { .hd = ctx->model->cfg.head_dim, .tile_q = tile_q, .tile_k = tile_k };
    if (chunk_rows > ctx->chunk_rows_max || tile_q < 0 || tile_k < 0 ||
        pt_attention_scratch_floats(&want, 1) > have)
        return pt_err(PT_EINVAL, "pt_context_set_tiling: chunk %zu (max %zu) or tiles %d x %d "
                      "exceed what the context was sized for", chunk_rows, ctx->chunk_rows_max,
                      tile_q, tile_k);
    ctx->chunk_rows = chunk_rows ? chunk_rows : ctx->chunk_rows_max;
    ctx->tile_q = tile_q;
    ctx->tile_k = tile_k;
    return PT_OK;
}

/* ---- forward -------------------------------------------------------------------- */

static pt_linear lin(const pt_model *m, const float *w, const float *b, float *dw, float *db,
                     size_t in, size_t out)
{
    pt_linear l = { .w = w, .w16 = pt_model_w16(m, w), .q = pt_model_wq(m, w, out), .b = b,
                    .dw = dw, .db = db, .in = in, .out = out };
    return l;
}

int pt_scratch_threads(void)
{
    int nt = pt_get_num_threads(), procs = omp_get_num_procs();
    nt = nt > procs ? nt : procs;
    return nt < 1 ? 1 : nt;
}

pt_attn_shape pt_model_attn_shape(const pt_model *m, int batch, int seq, int max_threads)
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
    pt_attn_shape s = pt_model_attn_shape(ctx->model, ctx->B, ctx->T, ctx->attn_threads);
    s.seg = ctx->has_seg ? ctx->seg : NULL;
    s.tile_q = ctx->tile_q;
    s.tile_k = ctx->tile_k;
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
    int st = pt_struct_read(b, sizeof *b, user, func, "pt_batch_init");
    if (st)
        return st;
    if (b->batch <= 0 || b->seq <= 0 || b->batch > ctx->max_batch || b->seq > ctx->max_seq)
        return pt_err_arg(func, "batch", "of %d x %d tokens does not fit the context's %d x %d",
                          b->batch, b->seq, ctx->max_batch, ctx->max_seq);
    if (!b->input_ids)
        return pt_err_arg(func, "batch", "input_ids is NULL");
    /* as pt_generate's: logits / T must not overflow */
    if (!(isfinite(b->temperature) && b->temperature >= 1e-6f))
        return pt_err_arg(func, "batch", "temperature %g must be finite and >= 1e-6",
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
            return pt_err(PT_ERANGE, "%s: batch: input id %d at row %zu position %zu is outside the "
                          "vocabulary [0, %d)", ctx->api, id, i / (size_t)T, i % (size_t)T, c->vocab_size);
        int32_t t = b->targets ? b->targets[i] : -1;
        if (t < -1 || t >= c->vocab_size)
            return pt_err(PT_ERANGE, "%s: batch: target %d at row %zu position %zu is outside the "
                          "vocabulary [0, %d) (use -1 for no target)", ctx->api, t, i / (size_t)T,
                          i % (size_t)T, c->vocab_size);
        int32_t p = b->positions ? b->positions[i] : (int32_t)(i % (size_t)T);
        if (p < 0)
            return pt_err(PT_ERANGE, "%s: batch: position %d at row %zu position %zu is negative", ctx->api, p,
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
    const pt_qweight Wq = pt_model_wq(m, W, V);
    const pt_bf16 *W16 = Wq.nseg ? NULL : pt_model_w16(m, W);
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
            pt_qgemm_xwt(false, Wq.seg[0].type, nr, V, H, 1.0f, xn + r0 * H, H, Wq.seg[0].w, 0.0f,
                         lg, V);
        else if (W16)
            pt_gemm_mixed(false, true, nr, V, H, 1.0f, xn + r0 * H, false, H, W16, true, H, 0.0f,
                          lg, V);
        else
            pt_sgemm(false, true, nr, V, H, 1.0f, xn + r0 * H, H, W, H, 0.0f, lg, V);
        if (logits_out)
            memcpy(logits_out + r0 * V, lg, nr * V * sizeof *lg);
        if (temp != 1.0f)
            pt_div_scalar(lg, nr * V, temp);
        if (compute_lp && entropy_out)
            pt_logsoftmax_entropy_rows(ctx->head_lse + r0, ctx->lp + r0, entropy_out + r0, lg,
                                       ctx->tgt + r0, nr, V);
        else if (compute_lp)
            pt_logsoftmax_rows(ctx->head_lse + r0, ctx->lp + r0, lg, ctx->tgt + r0, nr, V);
        if (!dlp)
            continue;
        pt_logsoftmax_backward_rows(lg, ctx->head_lse + r0, dlp + r0, ctx->tgt + r0, nr, V);
        if (Wq.nseg)
            pt_qgemm_dyw(Wq.seg[0].type, nr, V, H, gscale, lg, V, Wq.seg[0].w, 0.0f, dxn + r0 * H,
                         H);
        else if (W16)
            pt_gemm_mixed(false, false, nr, H, V, gscale, lg, false, V, W16, true, H, 0.0f,
                          dxn + r0 * H, H);
        else
            pt_sgemm(false, false, nr, H, V, gscale, lg, V, W, H, 0.0f, dxn + r0 * H, H);
        if (m->g.lm_head && W16) /* mixed precision: the gradient's product in BF16 too */
            pt_gemm_mixed(true, false, V, H, nr, gscale, lg, false, V, xn + r0 * H, false, H, 1.0f,
                          m->g.lm_head, H);
        else if (m->g.lm_head) /* NULL when the base is frozen (LoRA) */
            pt_sgemm(true, false, V, H, nr, gscale, lg, V, xn + r0 * H, H, 1.0f, m->g.lm_head, H);
    }
}

void pt_layer_forward_qkv(const pt_model *m, int l, size_t n, const pt_layer_io *io)
{
    const pt_model_config *c = &m->cfg;
    const pt_layer_w *w = &m->w.layers[l];
    const size_t H = (size_t)c->hidden_size, Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    const size_t QKV = Q + 2 * KV;
    const int nh = c->num_attention_heads, nkv = c->num_key_value_heads, hd = c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    pt_rmsnorm_forward(io->xn, io->r1, io->x, w->ln1, n, H, eps);
    /* q|k|v in one product: the three weights (and biases) are adjacent. */
    pt_linear lqkv = lin(m, w->wq, w->bq, NULL, NULL, H, QKV);
    lqkv.rowwise = io->rowwise;
    pt_lora_attach(&lqkv, m, l, PT_LORA_Q | PT_LORA_K | PT_LORA_V, io->lora_buf);
    pt_linear_forward(&lqkv, io->qkv, QKV, io->xn, H, n, false);
    float *qp = io->qkv, *kp = io->qkv + Q;
    if (c->qk_norm) {
        for (size_t t = 0; t < n; t++)
            memcpy(io->qkpre + t * (Q + KV), io->qkv + t * QKV, (Q + KV) * sizeof(float));
        pt_headnorm_forward(qp, QKV, io->rq, io->qkpre, Q + KV, w->qn, n, nh, hd, eps);
        pt_headnorm_forward(kp, QKV, io->rk, io->qkpre + Q, Q + KV, w->kn, n, nkv, hd, eps);
    }
    pt_rope_apply(qp, QKV, n, nh, hd, io->cos_t, io->sin_t, false);
    pt_rope_apply(kp, QKV, n, nkv, hd, io->cos_t, io->sin_t, false);
}

void pt_layer_forward_out(const pt_model *m, int l, size_t n, const pt_layer_io *io)
{
    const pt_model_config *c = &m->cfg;
    const pt_layer_w *w = &m->w.layers[l];
    const size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)m->q_dim;
    const float eps = (float)c->rms_norm_eps;
    pt_copy(io->xmid, io->x, n * H);
    pt_linear lo = lin(m, w->wo, NULL, NULL, NULL, Q, H);
    lo.rowwise = io->rowwise;
    pt_lora_attach(&lo, m, l, PT_LORA_O, io->lora_buf);
    pt_linear_forward(&lo, io->xmid, H, io->att, Q, n, true);
    pt_rmsnorm_forward(io->xn, io->r2, io->xmid, w->ln2, n, H, eps);
    pt_linear lgu = lin(m, w->wg, NULL, NULL, NULL, H, 2 * I);
    lgu.rowwise = io->rowwise;
    pt_lora_attach(&lgu, m, l, PT_LORA_GATE | PT_LORA_UP, io->lora_buf);
    pt_linear_forward(&lgu, io->gu, 2 * I, io->xn, H, n, false);
    pt_swiglu_forward(io->h, io->gu, io->gu + I, n, I, 2 * I);
    pt_copy(io->out, io->xmid, n * H);
    pt_linear ld = lin(m, w->wd, NULL, NULL, NULL, I, H);
    ld.rowwise = io->rowwise;
    pt_lora_attach(&ld, m, l, PT_LORA_DOWN, io->lora_buf);
    pt_linear_forward(&ld, io->out, H, io->h, I, n, true);
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
    if ((st = pt_lora_scratch(&ctx->lora_buf, &ctx->lora_cap, m,
                              (size_t)ctx->B * ctx->T)) != PT_OK)
        return st;
    pt_model_bf16_prepare(m);
    const int L = c->num_hidden_layers;
    const size_t n = (size_t)ctx->B * ctx->T;
    const size_t H = (size_t)c->hidden_size;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    const int hd = c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    pt_attn_shape as = attn_shape(ctx);

    pt_rope_table(ctx->cos_t, ctx->sin_t, ctx->pos, n, m->inv_freq, hd);
    pt_model_embed(m, ctx->acts[0].x, ctx->ids, n);
    for (int l = 0; l < L; l++) {
        layer_acts *a = &ctx->acts[l];
        pt_layer_io io = {
            .x = a->x, .xmid = a->xmid, .out = ctx->acts[l + 1].x, .qkv = a->qkv,
            .att = a->att, .gu = a->gu, .r1 = a->r1, .r2 = a->r2, .qkpre = a->qkpre,
            .rq = a->rq, .rk = a->rk, .xn = ctx->xn, .h = ctx->hbuf, .cos_t = ctx->cos_t,
            .sin_t = ctx->sin_t, .lora_buf = ctx->lora_buf, .rowwise = false,
        };
        pt_layer_forward_qkv(m, l, n, &io);
        pt_attention_forward(a->att, a->lse, a->qkv, a->qkv + Q, a->qkv + Q + KV, &as,
                             ctx->attn_scratch);
        pt_layer_forward_out(m, l, n, &io);
        if ((st = pt_check_abort()) != PT_OK)
            return st;
    }
    pt_rmsnorm_forward(ctx->xn, ctx->rf, ctx->acts[L].x, m->w.norm, n, H, eps);
    head_chunks(ctx, ctx->xn, logits, entropy, fused_dlp, ctx->dxn, true);
    if (logprobs)
        memcpy(logprobs, ctx->lp, n * sizeof *logprobs);
    ctx->state = fused_dlp ? ST_FORWARD_FUSED : ST_FORWARD;
    ctx->generation = pt_model_generation(m);
    return PT_OK;
}

/* forward_run with the context's thread count. */
static int forward_impl(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits,
                        float *entropy, const float *fused_dlp)
{
    int prev = pt_threads_enter(ctx->num_threads);
    int st = forward_run(ctx, b, logprobs, logits, entropy, fused_dlp);
    pt_threads_leave(prev);
    return st;
}

int pt_ctx_forward(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits)
{
    pt_batch lb;
    int st = read_batch(&lb, b, ctx, "pt_model_forward");
    return st ? st : forward_impl(ctx, &lb, logprobs, logits, NULL, NULL);
}

int pt_ctx_forward_entropy(pt_context *ctx, const pt_batch *b, float *logprobs, float *entropy)
{
    pt_batch lb;
    int st = read_batch(&lb, b, ctx, "pt_model_forward_entropy");
    return st ? st : forward_impl(ctx, &lb, logprobs, NULL, entropy, NULL);
}

int pt_model_forward(pt_context *ctx, const pt_batch *b, float *logprobs, float *logits)
{
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(b);
    int st = pt_busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt_ctx_forward(ctx, b, logprobs, logits);
    pt_busy_leave(&ctx->busy);
    return st;
}

int pt_model_forward_entropy(pt_context *ctx, const pt_batch *b, float *logprobs, float *entropy)
{
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(b);
    PT_CHECK_NULL(entropy);
    int st = pt_busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt_ctx_forward_entropy(ctx, b, logprobs, entropy);
    pt_busy_leave(&ctx->busy);
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
        pt_rmsnorm_forward(xn, NULL, ctx->acts[L].x, m->w.norm, n, H, eps);
        head_chunks(ctx, xn, NULL, NULL, dlp, dxn, false);
    }
    ctx->state = ST_EMPTY;
    pt_rmsnorm_backward(dx, m->g.norm, dxn, ctx->acts[L].x, m->w.norm, ctx->rf, n, H, false);

    for (int l = L - 1; l >= 0; l--) {
        layer_acts *a = &ctx->acts[l];
        const pt_layer_w *w = &m->w.layers[l];
        pt_layer_w *g = &m->g.layers[l];
        /* MLP: dx holds dLoss/d(layer output) = d(xmid) through the residual. */
        pt_rmsnorm_forward(xn, NULL, a->xmid, w->ln2, n, H, eps);
        pt_swiglu_forward(ctx->hbuf, a->gu, a->gu + I, n, I, 2 * I);
        pt_linear ld = lin(m, w->wd, NULL, g->wd, NULL, I, H);
        pt_lora_attach(&ld, m, l, PT_LORA_DOWN, ctx->lora_buf);
        /* dh overwrites h: the weight gradient is taken first */
        pt_linear_backward(&ld, ctx->hbuf, I, false, dx, H, ctx->hbuf, I, n);
        pt_swiglu_backward(ctx->dgu, ctx->dgu + I, ctx->hbuf, a->gu, a->gu + I, n, I, 2 * I);
        pt_linear lgu = lin(m, w->wg, NULL, g->wg, NULL, H, 2 * I);
        pt_lora_attach(&lgu, m, l, PT_LORA_GATE | PT_LORA_UP, ctx->lora_buf);
        pt_linear_backward(&lgu, dxn, H, false, ctx->dgu, 2 * I, xn, H, n);
        pt_rmsnorm_backward(dx, g->ln2, dxn, a->xmid, w->ln2, a->r2, n, H, true);
        /* Attention. */
        pt_linear lo = lin(m, w->wo, NULL, g->wo, NULL, Q, H);
        pt_lora_attach(&lo, m, l, PT_LORA_O, ctx->lora_buf);
        pt_linear_backward(&lo, ctx->datt, Q, false, dx, H, a->att, Q, n);
        float *dq = ctx->dqkv, *dk = ctx->dqkv + Q, *dv = ctx->dqkv + Q + KV;
        pt_attention_backward(dq, dk, dv, ctx->datt, a->qkv, a->qkv + Q, a->qkv + Q + KV,
                              a->att, a->lse, &as, ctx->attn_scratch);
        pt_rope_apply(dq, QKV, n, nh, hd, ctx->cos_t, ctx->sin_t, true);
        pt_rope_apply(dk, QKV, n, nkv, hd, ctx->cos_t, ctx->sin_t, true);
        if (c->qk_norm) {
            pt_headnorm_backward(dq, QKV, g->qn, dq, QKV, a->qkpre, Q + KV, w->qn, a->rq, n, nh,
                                 hd);
            pt_headnorm_backward(dk, QKV, g->kn, dk, QKV, a->qkpre + Q, Q + KV, w->kn, a->rk, n,
                                 nkv, hd);
        }
        pt_rmsnorm_forward(xn, NULL, a->x, w->ln1, n, H, eps);
        pt_linear lqkv = lin(m, w->wq, w->bq, g->wq, g->bq, H, QKV);
        pt_lora_attach(&lqkv, m, l, PT_LORA_Q | PT_LORA_K | PT_LORA_V, ctx->lora_buf);
        pt_linear_backward(&lqkv, dxn, H, false, ctx->dqkv, QKV, xn, H, n);
        pt_rmsnorm_backward(dx, g->ln1, dxn, a->x, w->ln1, a->r1, n, H, true);
        if ((st = pt_check_abort()) != PT_OK)
            return st;
    }
    if (m->g.embed) /* NULL when the base is frozen (LoRA) */
        pt_embedding_backward(m->g.embed, dx, ctx->ids, n, H);
    return PT_OK;
}

/* backward_run with the context's thread count. */
static int backward_impl(pt_context *ctx, const float *dlp)
{
    int prev = pt_threads_enter(ctx->num_threads);
    int st = backward_run(ctx, dlp);
    pt_threads_leave(prev);
    return st;
}

int pt_model_backward(pt_context *ctx, const float *dlogprobs)
{
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(dlogprobs);
    int st = pt_busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt_ctx_backward(ctx, dlogprobs);
    pt_busy_leave(&ctx->busy);
    return st;
}

int pt_ctx_backward(pt_context *ctx, const float *dlogprobs)
{
    int gst = pt_context_check_current(ctx, "pt_model_backward");
    if (gst)
        return gst;
    if (ctx->state != ST_FORWARD)
        return pt_err(PT_ESTATE, "pt_model_backward: no forward pass to differentiate on this "
                      "context (call pt_model_forward first; one backward per forward)");
    int st = pt_lora_check_backward(ctx->model, "pt_model_backward");
    if (st)
        return st;
    const size_t n = (size_t)ctx->B * ctx->T;
    memcpy(ctx->dlp, dlogprobs, n * sizeof *ctx->dlp);
    return backward_impl(ctx, ctx->dlp);
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
            return pt_err_arg("pt_model_loss", "weight", "%g at token %zu must be finite and >= 0",
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
    int st = pt_busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st)
        return st;
    st = pt_ctx_loss(ctx, b, weights, backward, loss);
    pt_busy_leave(&ctx->busy);
    return st;
}

int pt_ctx_loss(pt_context *ctx, const pt_batch *b, const float *weights, bool backward, float *loss)
{
    *loss = 0.0f;
    pt_batch lb;
    int st = read_batch(&lb, b, ctx, "pt_model_loss");
    if (st == PT_OK && backward)
        st = pt_lora_check_backward(ctx->model, "pt_model_loss");
    double wsum = 0.0;
    if (st == PT_OK)
        st = loss_weights(ctx->dlp, &wsum, &lb, weights);
    bool fused = backward && wsum > 0.0;
    if (st == PT_OK)
        st = forward_impl(ctx, &lb, NULL, NULL, NULL, fused ? ctx->dlp : NULL);
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
