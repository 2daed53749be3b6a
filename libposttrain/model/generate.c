/* Batched generation with a KV cache (posttrain/generate.h).
 *
 * The layers run through the same per-layer code as the training forward
 * (pt__layer_forward_qkv / pt__layer_forward_out in model/forward.c); only the
 * attention differs:
 *  - prefill: one row at a time, all its prompt positions in one pass with
 *    the tiled causal attention of the training forward, keys and values
 *    copied into the cache, the LM head only at the last position;
 *  - decode: every active row together (m = active rows), each new token
 *    attending to its row's cache at its own position.  The projections and
 *    the LM head go row by row through BLIS sgemv (pt_linear.rowwise), which
 *    is faster than sgemm at small m on this machine and makes a row's
 *    results independent of the other rows.
 * KV cache layout: [layer][row][kv head][slot][head_dim], so the keys of
 * one (row, head) are one contiguous [slots, hd] matrix.  Without a sliding
 * window there are max_seq slots and position p is slot p.  With Mistral's
 * window W (token i attends to keys j with i - W < j <= i) shorter than
 * max_seq there are W slots, a ring: position p goes to slot p % W,
 * overwriting position p - W, which no later token can see.  A decode step
 * stores its token's key first, so the ring then holds exactly the W
 * positions it attends to; softmax and the weighted sum do not depend on
 * the order of the slots. */
#include "model/generate_internal.h"
#include "model/generate_rows.h"
#include "model/generate_struct.h"

#include "model/lora.h"
#include "model/transformer.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/vexp.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

/* ---- allocation --------------------------------------------------------------- */

/* Floats of a layer's KV cache rows; times g->slots: one cache (planned with
 * the overflow check). */
static size_t cache_rows(const pt_generator *g)
{
    const pt_model *m = g->model;
    return (size_t)m->cfg.num_hidden_layers * (size_t)g->max_batch * (size_t)m->kv_dim;
}

/* Plan the generator's block with p; with base != NULL point the buffers
 * into it as well (the same plan, run again, gives the same offsets). */
static void lay_out(pt_generator *g, pt_planner *p, float *base)
{
    const pt_model *m = g->model;
    const pt_model_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim, V = (size_t)c->vocab_size;
    const size_t nh = (size_t)c->num_attention_heads, nkv = (size_t)c->num_key_value_heads;
    const size_t hd = (size_t)c->head_dim, R = g->rows, S = (size_t)g->max_seq;
    const size_t B = (size_t)g->max_batch, T = (size_t)g->threads_cap;
    const size_t slots = (size_t)g->slots;
    /* BF16: half the floats hold the values (pt__gen_cache_at's offsets) */
    const size_t ccols = g->kv16 ? (slots + 1) / 2 : slots;
    g->kc = pt__plan_at(p, base, cache_rows(g), ccols);
    g->vc = pt__plan_at(p, base, cache_rows(g), ccols);
    g->x = pt__plan_at(p, base, R, H);
    g->y = pt__plan_at(p, base, R, H);
    g->xmid = pt__plan_at(p, base, R, H);
    g->qkv = pt__plan_at(p, base, R, Q + 2 * KV);
    g->att = pt__plan_at(p, base, R, Q);
    g->gu = pt__plan_at(p, base, R, 2 * I);
    g->r1 = pt__plan_at(p, base, R, 1);
    g->r2 = pt__plan_at(p, base, R, 1);
    if (c->qk_norm) {
        g->qkpre = pt__plan_at(p, base, R, Q + KV);
        g->rq = pt__plan_at(p, base, R, nh);
        g->rk = pt__plan_at(p, base, R, nkv);
    }
    g->xn = pt__plan_at(p, base, R, H);
    g->h = pt__plan_at(p, base, R, I);
    g->cos_t = pt__plan_at(p, base, R, hd / 2);
    g->sin_t = pt__plan_at(p, base, R, hd / 2);
    g->lse = pt__plan_at(p, base, nh, S);
    pt_attn_shape as = pt__model_attn_shape(m, 1, g->max_seq, g->threads_cap);
    g->attn_scratch = pt__plan_at(p, base, pt__attention_scratch_floats(&as, g->threads_cap), 1);
    g->dec_scratch = pt__plan_at(p, base, T, (nh / nkv) * slots); /* group * slots a thread */
    g->logits = pt__plan_at(p, base, B, V);
    /* three int32 arrays of R entries: a step of pt__genrows_step feeds up
     * to R tokens (decoding, pt_generate, uses B), and pos holds the prefill
     * positions too */
    int32_t *ib = (int32_t *)(void *)pt__plan_at(p, base, 3 * R, 1);
    g->ids = ib;
    g->active = ib ? ib + R : NULL;
    g->pos = ib ? ib + 2 * R : NULL;
    g->samp_bytes = pt__sample_scratch_bytes((int)V);
    g->samp = pt__plan_at(p, base, T, g->samp_bytes / sizeof(float) + 16);
}


/* Bytes of one of the two caches (keys or values). */
static size_t cache_bytes(const pt_generator *g)
{
    return cache_rows(g) * (size_t)g->slots * pt__gen_cache_elem(g);
}

/* Plan and allocate g->block (the cache in g->kv16's type and every
 * buffer), point the buffers into it, zero the cache. */
static int gen_alloc(pt_generator *g, const char *fn)
{
    pt_planner p = { 0, false };
    lay_out(g, &p, NULL);
    if (p.overflow)
        return pt__err(PT_ENOMEM, "%s: memory for %d rows of %d tokens overflows", fn,
                      g->max_batch, g->max_seq);
    g->block = pt__malloc_aligned(p.total * sizeof(float));
    if (!g->block)
        return pt__err_prefix(PT_ENOMEM, "%s: %zu MiB for the KV cache and buffers", fn,
                             p.total * sizeof(float) >> 20);
    pt_planner again = { 0, false };
    lay_out(g, &again, g->block);
    /* No stale values in the cache, ever: slots beyond a row's length are
     * never read, but zeroing keeps tools like valgrind quiet. */
    memset(g->kc, 0, cache_bytes(g));
    memset(g->vc, 0, cache_bytes(g));
    return PT_OK;
}

int pt__generator_set_kv16(pt_generator *g, bool kv16)
{
    if (g->kv16 == kv16)
        return PT_OK;
    float *old = g->block;
    g->kv16 = kv16;
    int st = gen_alloc(g, "pt_generator_set_kv_cache");
    if (st != PT_OK) { /* the old block and its layout back */
        g->kv16 = !kv16;
        g->block = old;
        pt_planner again = { 0, false };
        lay_out(g, &again, g->block);
        return st;
    }
    pt__free_aligned(old);
    return PT_OK;
}

bool pt__generator_kv16(const pt_generator *g)
{
    return g->kv16;
}

int pt_generator_create(pt_generator **out, pt_model *model, int max_batch, int max_seq)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(model);
    PT_CHECK_ARG(max_batch > 0 && max_batch <= (1 << 20), max_batch, "%d must be in 1 .. %d",
                 max_batch, 1 << 20);
    PT_CHECK_ARG(max_seq > 0 && max_seq <= (1 << 24), max_seq, "%d must be in 1 .. %d", max_seq,
                 1 << 24);
    int gst = pt__model_check_positions(model, max_seq, "pt_generator_create");
    if (gst)
        return gst;
    pt_generator *g = pt__calloc(1, sizeof *g);
    if (!g)
        return PT_ENOMEM;
    g->model = pt__model_retain(model);
    g->generation = pt__model_generation(model);
    g->max_batch = max_batch;
    g->max_seq = max_seq;
    int w = model->cfg.sliding_window;
    g->slots = w > 0 && w < max_seq ? w : max_seq;
    g->rows = (size_t)(max_seq > max_batch ? max_seq : max_batch);
    g->threads_cap = pt__scratch_threads();
    g->rngs = pt__calloc((size_t)max_batch, sizeof *g->rngs);
    int st = g->rngs ? gen_alloc(g, "pt_generator_create")
                     : pt__err(PT_ENOMEM, "pt_generator_create: no memory for %d rows' random "
                               "streams", max_batch);
    if (st) {
        pt_generator_free(g);
        return st;
    }
    *out = g;
    return PT_OK;
}

int pt__generator_cache_slots(const pt_generator *g)
{
    return g->slots;
}

size_t pt__generator_cache_floats(const pt_generator *g)
{
    return 2 * cache_rows(g) * (size_t)g->slots;
}

void pt_generator_free(pt_generator *g)
{
    if (!g)
        return;
    pt__free_aligned(g->block);
    pt__free_aligned(g->lora_buf);
    pt_free(g->rngs);
    pt_free(g->stop);
    pt__model_release(g->model);
    pt_free(g);
}

/* ---- the forward pieces -------------------------------------------------------- */

/* The final norm and the LM head for n hidden rows (x, row stride H) into
 * logits (n x V). */
static void head_rows(pt_generator *g, const float *x, size_t n, float *logits)
{
    const pt_model *m = g->model;
    const size_t H = (size_t)m->cfg.hidden_size, V = (size_t)m->cfg.vocab_size;
    pt__rmsnorm_forward(g->xn, NULL, x, m->w.norm, n, H, (float)m->cfg.rms_norm_eps);
    const pt_qweight q = pt__model_wq(m, m->w.lm_head, V);
    const pt_bf16 *w16 = pt__model_w16(m, m->w.lm_head);
    if (q.nseg)
        pt__qgemm_xwt(true, q.seg[0].type, n, V, H, 1.0f, g->xn, H, q.seg[0].w, 0.0f, logits, V);
    else if (w16)
        pt__bgemv_rows(n, V, H, 1.0f, g->xn, H, w16, H, 0.0f, logits, V);
    else
        pt__sgemv_rows(n, V, H, 1.0f, g->xn, H, m->w.lm_head, H, 0.0f, logits, V);
}

static pt_layer_io layer_io(pt_generator *g, const float *x, float *out, bool rowwise)
{
    pt_layer_io io = {
        .x = x, .xmid = g->xmid, .out = out, .qkv = g->qkv, .att = g->att, .gu = g->gu,
        .r1 = g->r1, .r2 = g->r2, .qkpre = g->qkpre, .rq = g->rq, .rk = g->rk, .xn = g->xn,
        .h = g->h, .cos_t = g->cos_t, .sin_t = g->sin_t, .lora_buf = g->lora_buf,
        .rowwise = rowwise,
    };
    return io;
}

/* Prefill cache row `row` with the T prompt ids; logits of the last position
 * into `logits`. */
static int prefill(pt_generator *g, int row, const int32_t *ids, int T, float *logits)
{
    const pt_model *m = g->model;
    const pt_model_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden_size, Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim;
    const size_t n = (size_t)T;
    for (int t = 0; t < T; t++)
        g->pos[t] = t;
    pt__rope_table(g->cos_t, g->sin_t, g->pos, n, m->inv_freq, c->head_dim);
    pt__model_embed(m, g->x, ids, n);
    pt_attn_shape as = pt__model_attn_shape(m, 1, T, g->threads_cap);
    float *x = g->x, *y = g->y;
    /* A short prompt on a quantized model goes through the decoding kernels
     * (integer dots on 8-bit activations, up to 16 rows in one pass over
     * each weight, as llama.cpp computes a prompt) instead of dequantizing
     * every weight into a tile for a product of a few rows. */
    const bool rows = T <= 16 && pt__model_is_quantized(m);
    /* A longer one dequantizes tiles: BF16 ones where the CPU has BF16
     * arithmetic (activations rounded to BF16, finer than the 8 bits the
     * decoding kernels and llama.cpp's prompt products use). */
    const bool tiles16 = !rows && pt__model_is_quantized(m) && pt__cpu_bf16_compute();
    for (int l = 0; l < c->num_hidden_layers; l++) {
        pt_layer_io io = layer_io(g, x, y, rows);
        io.tiles_bf16 = tiles16;
        pt__layer_forward_qkv(m, l, n, &io);
        pt__gen_cache_store(g, l, n, row);
        pt__attention_forward(g->att, g->lse, g->qkv, g->qkv + Q, g->qkv + Q + KV, &as,
                             g->attn_scratch);
        pt__layer_forward_out(m, l, n, &io);
        float *t = x;
        x = y;
        y = t;
        int st = pt_check_abort();
        if (st != PT_OK)
            return st;
    }
    head_rows(g, x + (n - 1) * H, 1, logits);
    return PT_OK;
}

/* The layers over n tokens (the generator's buffers from their first
 * row), from x, ping-ponging with y: the last layer's output is in x for
 * an even number of layers, else in y. */
static void layers_rows(pt_generator *g, int n, float *x, float *y)
{
    const pt_model *m = g->model;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        pt_layer_io io = layer_io(g, x, y, true);
        io.rope_later = true;
        pt__layer_forward_qkv(m, l, (size_t)n, &io);
        pt__gen_decode_attention(g, l, n);
        pt__layer_forward_out(m, l, (size_t)n, &io);
        float *t = x;
        x = y;
        y = t;
    }
}

/* One batched forward of m_rows tokens: token i is g->ids[i] at position
 * g->pos[i] of cache row g->active[i] (one token per row when decoding;
 * consecutive positions of one row when pt__genrows_step continues a row).
 * Logits of the tokens with want[i] (want NULL: all), in order, go to
 * `logits`.  Everything runs row by row, so a token's results do not depend
 * on the other tokens (nor on pt__gen_split_parts). */
static void forward_rows(pt_generator *g, int m_rows, const uint8_t *want, float *logits)
{
    const pt_model *m = g->model;
    const pt_model_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden_size, n = (size_t)m_rows;
    pt__rope_table(g->cos_t, g->sin_t, g->pos, n, m->inv_freq, c->head_dim);
    pt__model_embed(m, g->x, g->ids, n);
    float *x = g->x, *y = g->y;
    const int parts = pt__gen_split_parts(g, m_rows);
    if (parts > 1) {
        int r[PT_GEN_SPLIT_MAX + 1];
        double secs[PT_GEN_SPLIT_MAX] = { 0 };
        pt__gen_split_bounds(g, m_rows, parts, r);
#pragma omp parallel num_threads(parts)
        {
            /* (every part, should the team be smaller) */
            for (int p = omp_get_thread_num(); p < parts; p += omp_get_num_threads()) {
                const double t0 = omp_get_wtime();
                pt_generator v = pt__gen_part_view(g, r[p], p);
                layers_rows(&v, r[p + 1] - r[p], x + (size_t)r[p] * H, y + (size_t)r[p] * H);
                secs[p] = omp_get_wtime() - t0;
            }
        }
        for (int p = 0; p < parts; p++) { /* the speeds, averaged over the last forwards */
            const double s = secs[p] > 0.0 ? (r[p + 1] - r[p]) / secs[p] : 0.0;
            g->split_speed[p] = g->split_speed[p] > 0.0 && s > 0.0 ? 0.5 * (g->split_speed[p] + s) : s;
        }
    } else {
        layers_rows(g, m_rows, x, y);
    }
    if (c->num_hidden_layers % 2) { /* the output in y (layers_rows) */
        x = g->y;
        y = g->x;
    }
    if (!want) {
        head_rows(g, x, n, logits);
        return;
    }
    /* the wanted rows, gathered into the free buffer (the head runs row by
     * row: gathering changes no result) */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (want[i])
            memcpy(y + (k++) * H, x + i * H, H * sizeof(float));
    if (k)
        head_rows(g, y, k, logits);
}

/* One decode step for the m_rows active rows: g->ids / g->pos hold each
 * row's last token and its position; logits (m_rows x V) come out in
 * g->logits. */
static void decode_step(pt_generator *g, int m_rows)
{
    forward_rows(g, m_rows, NULL, g->logits);
}

/* Copy the prefilled cache of row `from` (T positions) to row `to`. */
static void cache_copy_row(pt_generator *g, int from, int to, int T)
{
    const pt_model_config *c = &g->model->cfg;
    const size_t bytes = pt__gen_visible_slots(g, T - 1) * (size_t)c->head_dim * pt__gen_cache_elem(g);
    for (int l = 0; l < c->num_hidden_layers; l++)
        for (int h = 0; h < c->num_key_value_heads; h++) {
            memcpy(pt__gen_cache_at(g, g->kc, l, to, h), pt__gen_cache_at(g, g->kc, l, from, h), bytes);
            memcpy(pt__gen_cache_at(g, g->vc, l, to, h), pt__gen_cache_at(g, g->vc, l, from, h), bytes);
        }
}

/* ---- pt_generate ------------------------------------------------------------------ */

/* The checks of pt_generate's options; the messages name fn and each field
 * as prefix + its name ("pt_generate: top_k ...", "pt_episodes_run:
 * sampling.top_k ..."). */
int pt__genrows_check_options(const pt_generate_options *o, const pt_model_config *c,
                             const char *fn, const char *prefix)
{
    char arg[64];
#define ARG(name) (snprintf(arg, sizeof arg, "%s%s", prefix, name), arg)
    if (o->max_new_tokens < 1)
        return pt__err_arg(fn, ARG("max_new_tokens"), "%d must be at least 1", o->max_new_tokens);
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return pt__err_arg(fn, ARG("temperature"), "%g must be finite and >= 0 (0: greedy)",
                          (double)o->temperature);
    if (o->temperature > 0.0f && o->temperature < 1e-6f) /* logits / T would overflow */
        return pt__err_arg(fn, ARG("temperature"), "%g is below 1e-6; use 0 for greedy",
                          (double)o->temperature);
    if (o->top_k < 0)
        return pt__err_arg(fn, ARG("top_k"), "%d must be >= 0 (0: off)", o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return pt__err_arg(fn, ARG("top_p"), "%g must be in (0, 1] (1: off)", (double)o->top_p);
    if (!(o->min_p >= 0.0f && o->min_p <= 1.0f))
        return pt__err_arg(fn, ARG("min_p"), "%g must be in [0, 1] (0: off)", (double)o->min_p);
    if (o->n_stop_ids > 0 && !o->stop_ids)
        return pt__err_arg(fn, ARG("stop_ids"), "is NULL but n_stop_ids is %d", o->n_stop_ids);
#undef ARG
    for (int i = 0; i < o->n_stop_ids; i++)
        if (o->stop_ids[i] < 0 || o->stop_ids[i] >= c->vocab_size)
            return pt__err(PT_ERANGE, "%s: stop id %d (%sstop_ids[%d]) is outside the "
                          "vocabulary [0, %d)", fn, o->stop_ids[i], prefix, i, c->vocab_size);
    return PT_OK;
}

static int check_options(const pt_generate_options *o, const pt_model_config *c)
{
    return pt__genrows_check_options(o, c, "pt_generate", "");
}

/* Every prompt has 1 .. max_seq - M ids in the vocabulary. */
static int check_prompts(const pt_generator *g, const int32_t *prompt_ids,
                         const int32_t *prompt_lens, int batch, int M)
{
    const pt_model_config *c = &g->model->cfg;
    const int V = c->vocab_size;
    size_t total = 0;
    for (int b = 0; b < batch; b++) {
        int T = prompt_lens[b];
        if (T < 1)
            return pt__err(PT_EINVAL, "pt_generate: prompt %d has length %d; a prompt needs at "
                          "least one token", b, T);
        if ((int64_t)T + M > g->max_seq)
            return pt__err(PT_EINVAL, "pt_generate: prompt %d (%d tokens) plus max_new_tokens "
                          "%d exceeds the generator's max_seq %d", b, T, M, g->max_seq);
        for (int t = 0; t < T; t++) {
            int32_t id = prompt_ids[total + (size_t)t];
            if (id < 0 || id >= V)
                return pt__err(PT_ERANGE, "pt_generate: prompt %d token %d is id %d, outside "
                              "the vocabulary [0, %d)", b, t, id, V);
        }
        total += (size_t)T;
    }
    return PT_OK;
}

/* The call's stop ids into g->stop: the options' list, or the model's eos
 * id; *n_stop their count. */
static int set_stop_ids(pt_generator *g, const pt_generate_options *o, int *n_stop)
{
    const pt_model_config *c = &g->model->cfg;
    int n = o->n_stop_ids;
    const int32_t *src = o->stop_ids;
    int32_t eos = c->eos_token_id;
    if (n < 0) {
        n = eos >= 0 && eos < c->vocab_size ? 1 : 0;
        src = &eos;
    }
    pt_free(g->stop);
    g->stop = NULL;
    *n_stop = n;
    if (n == 0)
        return PT_OK;
    g->stop = pt__malloc_array((size_t)n, sizeof *g->stop);
    if (!g->stop)
        return PT_ENOMEM;
    memcpy(g->stop, src, (size_t)n * sizeof *g->stop);
    return PT_OK;
}

static bool is_stop(const int32_t *stop, int n, int32_t tok)
{
    for (int i = 0; i < n; i++)
        if (stop[i] == tok)
            return true;
    return false;
}

/* Sample the next token of active rows 0..m_rows-1 from logits (row i at
 * logits + i*V); record it for batch row active[i]. */
static void sample_rows(pt_generator *g, int m_rows, const float *logits, const pt_sampler *s,
                        int32_t *tokens, float *logprobs, int32_t *n_tokens, int M)
{
    const int V = g->model->cfg.vocab_size;
    int nt = pt_get_num_threads();
    if (nt > g->threads_cap)
        nt = g->threads_cap;
    if (nt > m_rows)
        nt = m_rows;
    if ((size_t)m_rows * (size_t)V < 65536)
        nt = 1;
    if (g->hook)
        for (int i = 0; i < m_rows; i++)
            g->hook(g->active[i], n_tokens[g->active[i]], logits + (size_t)i * V, V,
                    g->hook_payload);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (int i = 0; i < m_rows; i++) {
        pt_sample_scratch sc;
        pt__sample_scratch_init(&sc, (char *)g->samp + (size_t)omp_get_thread_num() *
                                                          (g->samp_bytes + 64), V);
        int b = g->active[i];
        float lp = 0.0f;
        int32_t tok = pt__sample_token(logprobs ? &lp : NULL, logits + (size_t)i * V, V, s,
                                      &g->rngs[b], &sc);
        size_t at = (size_t)b * (size_t)M + (size_t)n_tokens[b];
        tokens[at] = tok;
        if (logprobs)
            logprobs[at] = lp;
        n_tokens[b]++;
    }
}

/* Seed every row's stream and set its outputs to "nothing yet". */
static void reset_rows(pt_generator *g, const pt_generate_options *o, int batch, int32_t *tokens,
                       int32_t *n_tokens, int32_t *finish_reasons, float *logprobs)
{
    const size_t M = (size_t)o->max_new_tokens;
    for (int b = 0; b < batch; b++) {
        pt__sample_rng(&g->rngs[b], o->seed, o->stream_offset + (uint64_t)b);
        n_tokens[b] = 0;
        if (finish_reasons)
            finish_reasons[b] = PT_FINISH_LENGTH;
        for (size_t i = 0; i < M; i++) {
            tokens[(size_t)b * M + i] = -1;
            if (logprobs)
                logprobs[(size_t)b * M + i] = 0.0f;
        }
    }
}

/* Prefill each distinct prompt once (a repeated one copies the cache of its
 * first occurrence); logits of row b into g->logits + b*V. */
static int prefill_all(pt_generator *g, const int32_t *prompt_ids, const int32_t *prompt_lens,
                       int batch)
{
    const size_t V = (size_t)g->model->cfg.vocab_size;
    size_t off = 0;
    for (int b = 0; b < batch; b++) {
        const int32_t *ids = prompt_ids + off;
        int T = prompt_lens[b], same = -1;
        size_t off2 = 0;
        for (int a = 0; a < b && same < 0; a++) {
            if (prompt_lens[a] == T && memcmp(prompt_ids + off2, ids, (size_t)T * sizeof *ids) == 0)
                same = a;
            off2 += (size_t)prompt_lens[a];
        }
        if (same >= 0) {
            cache_copy_row(g, same, b, T);
            memcpy(g->logits + (size_t)b * V, g->logits + (size_t)same * V, V * sizeof(float));
        } else {
            int st = prefill(g, b, ids, T, g->logits + (size_t)b * V);
            if (st != PT_OK)
                return st;
        }
        off += (size_t)T;
    }
    return PT_OK;
}

/* Sample, retire the rows that stopped, decode the others; until none is left. */
static int decode_all(pt_generator *g, const pt_sampler *s, int batch, int M, int n_stop,
                      const int32_t *prompt_lens, int32_t *tokens, int32_t *n_tokens,
                      int32_t *finish_reasons, float *logprobs)
{
    int n_active = batch;
    for (int b = 0; b < batch; b++)
        g->active[b] = b;
    for (;;) {
        int st = pt_check_abort();
        if (st != PT_OK)
            return st;
        sample_rows(g, n_active, g->logits, s, tokens, logprobs, n_tokens, M);
        /* Retire the rows that stopped; the others keep their order. */
        int kept = 0;
        for (int i = 0; i < n_active; i++) {
            int b = g->active[i];
            int32_t last = tokens[(size_t)b * M + (size_t)n_tokens[b] - 1];
            if (is_stop(g->stop, n_stop, last)) {
                if (finish_reasons)
                    finish_reasons[b] = PT_FINISH_STOP;
            } else if (n_tokens[b] < M) {
                g->active[kept++] = b;
            }
        }
        n_active = kept;
        if (n_active == 0)
            return PT_OK;
        for (int i = 0; i < n_active; i++) {
            int b = g->active[i];
            g->ids[i] = tokens[(size_t)b * M + (size_t)n_tokens[b] - 1];
            g->pos[i] = prompt_lens[b] + n_tokens[b] - 1;
        }
        decode_step(g, n_active);
    }
}

int pt__generator_run(pt_generator *g, const int32_t *prompt_ids, const int32_t *prompt_lens, int batch,
                     const pt_generate_options *opts, int32_t *tokens, int32_t *n_tokens,
                     int32_t *finish_reasons, float *logprobs)
{
    int st = pt__model_check_generation(g->model, g->generation, "pt_generate", "generator");
    if (st)
        return st;
    pt_generate_options o;
    pt_generate_options_init(&o);
    st = pt__struct_read(&o, sizeof o, opts, "pt_generate", "pt_generate_options_init");
    if (st != PT_OK || (st = check_options(&o, &g->model->cfg)) != PT_OK)
        return st;
    if (batch < 1 || batch > g->max_batch)
        return pt__err_arg("pt_generate", "batch", "%d is outside 1 .. the generator's max_batch %d", batch,
                          g->max_batch);
    const int M = o.max_new_tokens;
    int n_stop = 0;
    if ((st = check_prompts(g, prompt_ids, prompt_lens, batch, M)) != PT_OK ||
        (st = set_stop_ids(g, &o, &n_stop)) != PT_OK ||
        (st = pt__lora_scratch(&g->lora_buf, &g->lora_cap, g->model, g->rows)) != PT_OK)
        return st;
    pt_sampler s;
    pt__genrows_sampler(&s, &o);
    reset_rows(g, &o, batch, tokens, n_tokens, finish_reasons, logprobs);
    int prev = pt__threads_enter(g->num_threads);
    pt__model_bf16_prepare(g->model);
    if ((st = prefill_all(g, prompt_ids, prompt_lens, batch)) == PT_OK)
        st = decode_all(g, &s, batch, M, n_stop, prompt_lens, tokens, n_tokens, finish_reasons,
                        logprobs);
    pt__threads_leave(prev);
    return st;
}

/* ---- rows: sequences kept in the cache (model/generate_rows.h) ---------------------- */

int pt__genrows_begin(pt_generator *g, const char *fn)
{
    int st = pt__model_check_generation(g->model, g->generation, fn, "generator");
    if (st)
        return st;
    pt__model_bf16_prepare(g->model);
    return pt__lora_scratch(&g->lora_buf, &g->lora_cap, g->model, g->rows);
}

pt_model *pt__genrows_model(const pt_generator *g)
{
    return g->model;
}

int pt__genrows_max_batch(const pt_generator *g)
{
    return g->max_batch;
}

int pt__genrows_max_seq(const pt_generator *g)
{
    return g->max_seq;
}

int pt__genrows_thread_setting(const pt_generator *g)
{
    return g->num_threads;
}

int pt__genrows_step_capacity(const pt_generator *g)
{
    return (int)g->rows;
}

int pt__genrows_chunk_limit(const pt_generator *g, int pos, int n)
{
    /* Without a ring, or within the ring's first pass, a chunk's keys go to
     * slots no token of the chunk needs.  Past it, a later token's key
     * would overwrite a position an earlier token of the chunk still sees:
     * one token at a time, as decoding. */
    if (g->slots >= g->max_seq || (int64_t)pos + n <= g->slots)
        return n;
    if (pos < g->slots)
        return g->slots - pos;
    return 1;
}

int pt__genrows_prefill(pt_generator *g, int row, const int32_t *ids, int n, float *logits)
{
    return prefill(g, row, ids, n, logits);
}

void pt__genrows_copy(pt_generator *g, int from, int to, int n)
{
    cache_copy_row(g, from, to, n);
}

void pt__genrows_step(pt_generator *g, int n, const int32_t *rows, const int32_t *ids,
                     const int32_t *pos, const uint8_t *want, float *logits)
{
    memcpy(g->active, rows, (size_t)n * sizeof *rows);
    memcpy(g->ids, ids, (size_t)n * sizeof *ids);
    memcpy(g->pos, pos, (size_t)n * sizeof *pos);
    forward_rows(g, n, want, logits);
}

float *pt__genrows_logits(pt_generator *g)
{
    return g->logits;
}

void pt__genrows_sampler(pt_sampler *s, const pt_generate_options *o)
{
    *s = (pt_sampler){ .temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p,
                       .min_p = o->min_p };
}

void pt__genrows_sample(pt_generator *g, int m, const float *logits, const pt_sampler *s,
                       pt_rng *const *rngs, int32_t *tok, float *lp, const int32_t *hook_row,
                       const int32_t *hook_step)
{
    const int V = g->model->cfg.vocab_size;
    int nt = pt_get_num_threads();
    if (nt > g->threads_cap)
        nt = g->threads_cap;
    if (nt > m)
        nt = m;
    if ((size_t)m * (size_t)V < 65536)
        nt = 1;
    if (g->hook)
        for (int i = 0; i < m; i++)
            g->hook(hook_row[i], hook_step[i], logits + (size_t)i * V, V, g->hook_payload);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
    for (int i = 0; i < m; i++) {
        pt_sample_scratch sc;
        pt__sample_scratch_init(&sc, (char *)g->samp + (size_t)omp_get_thread_num() *
                                                          (g->samp_bytes + 64), V);
        float l = 0.0f;
        tok[i] = pt__sample_token(lp ? &l : NULL, logits + (size_t)i * V, V, s, rngs[i], &sc);
        if (lp)
            lp[i] = l;
    }
}

/* ---- pt_finish_reason names ---- */

static const pt_enum_entry k_finish_reason_names[] = {
    { PT_FINISH_STOP, "stop" },
    { PT_FINISH_LENGTH, "length" },
};

PT_ENUM_NAME_FUNCS(pt_finish_reason, k_finish_reason_names, "finish reason")
