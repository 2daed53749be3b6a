/* A pt_context's memory: the activations kept for the backward, laid out
 * in one block (lay_out), and the context's settings. */
#include "model/context_internal.h"

#include "model/lora.h"
#include "core/core.h"
#include "kernels/attention.h"

#include <omp.h>
#include <string.h>

/* ---- allocation --------------------------------------------------------------- */

size_t pt__plan(pt_planner *p, size_t a, size_t b)
{
    size_t n, start = (p->total + 15) & ~(size_t)15, end;
    if (!pt__mul_size(a, b, &n) || !pt__add_size(start, n, &end) ||
        end > ((size_t)1 << 60) / sizeof(float)) {
        p->overflow = true;
        return 0;
    }
    p->total = end;
    return start;
}


float *pt__plan_at(pt_planner *p, float *base, size_t a, size_t b)
{
    size_t off = pt__plan(p, a, b);
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
    const bool stash = pt__ctx_stash(ctx);
    for (int l = 0; l <= L; l++) {
        layer_acts *a = &ctx->acts[l];
        if (stash && l >= 2 && l < L)
            a->x = ctx->acts[l - 2].x; /* two FP32 inputs alternate */
        else
            a->x = pt__plan_at(p, base, N, H);
        a->stash = NULL;
        if (l == L)
            break; /* the last holds only the final hidden state */
        if ((ctx->recompute || stash) && l > 0) { /* one shared set: layer 0's */
            float *x = a->x;
            *a = ctx->acts[0];
            a->x = x;
            a->stash = NULL;
        } else {
            a->xmid = pt__plan_at(p, base, N, H);
            a->qkv = pt__plan_at(p, base, N, Q + 2 * KV);
            a->att = pt__plan_at(p, base, N, Q);
            a->gu = pt__plan_at(p, base, N, 2 * I);
            if (c->qk_norm)
                a->qkpre = pt__plan_at(p, base, N, Q + KV); /* q|k before the norm */
            a->lse = pt__plan_at(p, base, N, nh); /* recomputed with att (stash) */
        }
        if (ctx->recompute && l > 0)
            continue; /* recomputed with the rest */
        /* the norms' statistics: each layer's own (but recompute's) */
        a->r1 = pt__plan_at(p, base, N, 1);
        a->r2 = pt__plan_at(p, base, N, 1);
        if (c->qk_norm) {
            a->rq = pt__plan_at(p, base, N, nh);
            a->rk = pt__plan_at(p, base, N, nkv);
        }
        if (stash && l < L - 1) /* BF16, two to a float slot (model/stash.c) */
            a->stash = (uint16_t *)(void *)pt__plan_at(p, base,
                                                       (pt__stash_width(ctx) * N + 1) / 2, 1);
    }
    ctx->rf = pt__plan_at(p, base, N, 1);
    ctx->head_lse = pt__plan_at(p, base, N, 1);
    ctx->lp = pt__plan_at(p, base, N, 1);
    ctx->dlp = pt__plan_at(p, base, N, 1);
    ctx->xn = pt__plan_at(p, base, N, H);
    ctx->hbuf = pt__plan_at(p, base, N, I);
    ctx->dx = pt__plan_at(p, base, N, H);
    ctx->dxn = pt__plan_at(p, base, N, H);
    ctx->dqkv = pt__plan_at(p, base, N, Q + 2 * KV);
    ctx->datt = pt__plan_at(p, base, N, Q);
    ctx->dgu = pt__plan_at(p, base, N, 2 * I);
    ctx->chunk = pt__plan_at(p, base, ctx->chunk_rows_max, V);
    ctx->cos_t = pt__plan_at(p, base, N, hd / 2);
    ctx->sin_t = pt__plan_at(p, base, N, hd / 2);
    pt_attn_shape as = pt__model_attn_shape(m, ctx->max_batch, ctx->max_seq, ctx->attn_threads);
    ctx->attn_scratch =
        pt__plan_at(p, base, pt__attention_scratch_floats(&as, ctx->attn_threads), 1);
    /* four int32 arrays, stored in float-sized slots */
    int32_t *ib = (int32_t *)(void *)pt__plan_at(p, base, N, 4);
    ctx->ids = ib;
    ctx->tgt = ib ? ib + N : NULL;
    ctx->pos = ib ? ib + 2 * N : NULL;
    ctx->seg = ib ? ib + 3 * N : NULL;
}

static int context_create(pt_context **out, pt_model *model, int max_batch, int max_seq,
                          bool packed, const char *fn);
static int allocate(pt_context *ctx, const char *fn);
static void relay_out(pt_context *ctx);
static void set_chunk_rows(pt_context *ctx);

int pt_context_create(pt_context **out, pt_model *model, int max_batch, int max_seq)
{
    return context_create(out, model, max_batch, max_seq, false, __func__);
}

int pt__context_create_packed(pt_context **out, pt_model *model, int max_batch, int max_seq)
{
    return context_create(out, model, max_batch, max_seq, true, __func__);
}

/* The checks name fn, the public function the host called. */
static int context_create(pt_context **out, pt_model *model, int max_batch, int max_seq,
                          bool packed, const char *fn)
{
    if (!out)
        return pt__err(PT_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!model)
        return pt__err(PT_EINVAL, "%s: model is NULL", fn);
    if (max_batch <= 0)
        return pt__err_arg(fn, "max_batch", "%d must be positive", max_batch);
    if (max_seq <= 0)
        return pt__err_arg(fn, "max_seq", "%d must be positive", max_seq);
    int st = packed ? PT_OK : pt__model_check_positions(model, max_seq, fn);
    if (st)
        return st;
    size_t N;
    if (!pt__mul_size((size_t)max_batch, (size_t)max_seq, &N) || N > (size_t)INT32_MAX)
        return pt__err(PT_ENOMEM, "%s: %d x %d tokens is too many", fn, max_batch, max_seq);
    pt_context *ctx = pt__calloc(1, sizeof *ctx);
    if (!ctx)
        return PT_ENOMEM;
    ctx->model = pt__model_retain(model);
    ctx->generation = pt__model_generation(model);
    ctx->max_batch = max_batch;
    ctx->max_seq = max_seq;
    ctx->acts = pt__calloc((size_t)model->cfg.num_hidden_layers + 1, sizeof *ctx->acts);
    if (!ctx->acts) {
        pt_context_free(ctx);
        return PT_ENOMEM;
    }
    /* BF16 activations by default for a frozen BF16 base (LoRA, or
     * PT_BF16_FROZEN), where they are most of the memory; full mixed
     * precision keeps them FP32 (faster: no rounding and widening passes). */
    ctx->bf16_acts = pt_model_get_bf16(model) == PT_BF16_FROZEN ||
                     (pt_model_get_bf16(model) == PT_BF16_ON && pt_model_has_lora(model));
    set_chunk_rows(ctx);
    ctx->attn_threads = pt__scratch_threads();
    if ((st = allocate(ctx, fn)) != PT_OK) {
        pt_context_free(ctx);
        return st;
    }
    *out = ctx;
    return PT_OK;
}

/* The context's block for its current settings, laid out; the old block
 * (if any) is freed on success, and kept on failure with the buffers
 * pointing into it again (the caller restores the settings it was laid out
 * for and calls relay_out). */
static int allocate(pt_context *ctx, const char *fn)
{
    const size_t N = (size_t)ctx->max_batch * (size_t)ctx->max_seq;
    pt_planner p = { 0, false };
    lay_out(ctx, &p, NULL, N); /* sizes only: the buffer pointers are NULL now */
    if (p.overflow)
        return pt__err(PT_ENOMEM, "%s: activation memory for %d x %d tokens overflows", fn,
                      ctx->max_batch, ctx->max_seq);
    float *block = pt__malloc_aligned(p.total * sizeof(float));
    if (!block)
        return pt__err_prefix(PT_ENOMEM, "%s: %zu MiB of activations", fn,
                             p.total * sizeof(float) >> 20);
    pt__free_aligned(ctx->block);
    ctx->block = block;
    ctx->block_bytes = p.total * sizeof(float);
    relay_out(ctx);
    return PT_OK;
}

/* The buffers pointed into ctx->block for the current settings. */
static void relay_out(pt_context *ctx)
{
    pt_planner again = { 0, false };
    lay_out(ctx, &again, ctx->block, (size_t)ctx->max_batch * (size_t)ctx->max_seq);
}

/* Logit chunk: about 64 MiB of floats (336 rows at vocab 49152: few passes
 * over the LM head weight), or with gradient checkpointing 64 rows (12 MiB
 * there); at least 16 rows, at most N. */
static void set_chunk_rows(pt_context *ctx)
{
    const size_t N = (size_t)ctx->max_batch * (size_t)ctx->max_seq;
    size_t cr = ((size_t)1 << 24) / (size_t)ctx->model->cfg.vocab_size;
    cr = cr < 16 ? 16 : (cr / 16) * 16;
    if (ctx->recompute && cr > 64)
        cr = 64;
    ctx->chunk_rows = cr > N ? N : cr;
    ctx->chunk_rows_max = ctx->chunk_rows;
}

int pt_context_set_gradient_checkpointing(pt_context *ctx, bool on)
{
    PT_CHECK_NULL(ctx);
    int st = pt__busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st || ctx->recompute == on) {
        if (!st)
            pt__busy_leave(&ctx->busy);
        return st;
    }
    const size_t rows = ctx->chunk_rows, rows_max = ctx->chunk_rows_max;
    ctx->recompute = on;
    set_chunk_rows(ctx);
    if ((st = allocate(ctx, __func__)) != PT_OK) {
        ctx->recompute = !on; /* as it was: the old block is kept */
        ctx->chunk_rows = rows;
        ctx->chunk_rows_max = rows_max;
        relay_out(ctx);
    } else {
        ctx->state = ST_EMPTY; /* the activations are gone */
    }
    pt__busy_leave(&ctx->busy);
    return st;
}

bool pt_context_get_gradient_checkpointing(const pt_context *ctx)
{
    return ctx && ctx->recompute;
}

int pt_context_set_bf16_activations(pt_context *ctx, bool on)
{
    PT_CHECK_NULL(ctx);
    int st = pt__busy_enter(&ctx->busy, __func__, "context", ctx);
    if (st || ctx->bf16_acts == on) {
        if (!st)
            pt__busy_leave(&ctx->busy);
        return st;
    }
    ctx->bf16_acts = on;
    if (ctx->recompute) {
        /* no effect while checkpointing keeps less: the same layout */
    } else if ((st = allocate(ctx, __func__)) != PT_OK) {
        ctx->bf16_acts = !on; /* as it was: the old block is kept */
        relay_out(ctx);
    } else {
        ctx->state = ST_EMPTY; /* the activations are gone */
    }
    pt__busy_leave(&ctx->busy);
    return st;
}

bool pt_context_get_bf16_activations(const pt_context *ctx)
{
    return ctx && ctx->bf16_acts;
}

size_t pt__context_block_bytes(const pt_context *ctx)
{
    return ctx ? ctx->block_bytes : 0;
}

int pt__context_take(pt_context *ctx, const char *fn)
{
    return pt__busy_enter(&ctx->busy, fn, "context", ctx);
}

void pt__context_give(pt_context *ctx)
{
    pt__busy_leave(&ctx->busy);
}

pt_model *pt__context_model(const pt_context *ctx)
{
    return ctx ? ctx->model : NULL;
}

int pt__context_check_current(const pt_context *ctx, const char *who)
{
    if (pt__model_generation(ctx->model) == ctx->generation)
        return PT_OK;
    return pt__err(PT_ESTATE, "%s: the model's tensors changed (%s) since this context's forward "
                  "pass: run the forward again", who, pt__model_last_change(ctx->model));
}

void pt_context_free(pt_context *ctx)
{
    if (!ctx)
        return;
    pt__free_aligned(ctx->block);
    pt__free_aligned(ctx->lora_buf);
    pt_free(ctx->acts);
    pt__model_release(ctx->model);
    pt_free(ctx);
}

int pt_context_set_num_threads(pt_context *ctx, int n)
{
    PT_CHECK_NULL(ctx);
    int st = pt__thread_setting_check(n, __func__);
    if (!st && !(st = pt__busy_enter(&ctx->busy, __func__, "context", ctx))) {
        ctx->num_threads = n;
        pt__busy_leave(&ctx->busy);
    }
    return st;
}

int pt_context_get_num_threads(const pt_context *ctx)
{
    if (!ctx)
        return pt__err(PT_EINVAL, "pt_context_get_num_threads: ctx is NULL");
    return pt__thread_setting_count(ctx->num_threads);
}

int pt_batch_init(pt_batch *b)
{
    PT_STRUCT_INIT_ZERO(b);
    b->temperature = 1.0f;
    return PT_OK;
}

int pt__context_set_tiling(pt_context *ctx, size_t chunk_rows, int tile_q, int tile_k)
{
    PT_CHECK_NULL(ctx);
    pt_attn_shape def = { .hd = ctx->model->cfg.head_dim };
    size_t have = pt__attention_scratch_floats(&def, 1);
    pt_attn_shape want = { .hd = ctx->model->cfg.head_dim, .tile_q = tile_q, .tile_k = tile_k };
    if (chunk_rows > ctx->chunk_rows_max || tile_q < 0 || tile_k < 0 ||
        pt__attention_scratch_floats(&want, 1) > have)
        return pt__err(PT_EINVAL, "pt__context_set_tiling: chunk %zu (max %zu) or tiles %d x %d "
                      "exceed what the context was sized for", chunk_rows, ctx->chunk_rows_max,
                      tile_q, tile_k);
    ctx->chunk_rows = chunk_rows ? chunk_rows : ctx->chunk_rows_max;
    ctx->tile_q = tile_q;
    ctx->tile_k = tile_k;
    return PT_OK;
}
