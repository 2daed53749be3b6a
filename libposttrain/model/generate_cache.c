/* The KV cache of a pt_generator (layout: model/generate.c's header) and
 * the decoding attention over it. */
#include "model/generate_struct.h"

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/ops.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Bytes of one cached value: FP32, or BF16 (pt_generator_set_kv_cache). */
size_t pt__gen_cache_elem(const pt_generator *g)
{
    return g->kv16 ? sizeof(pt_bf16) : sizeof(float);
}

void *pt__gen_cache_at(const pt_generator *g, float *base, int l, int row, int kvh)
{
    const pt_model *m = g->model;
    size_t nkv = (size_t)m->cfg.num_key_value_heads, hd = (size_t)m->cfg.head_dim;
    const size_t at = ((((size_t)l * (size_t)g->max_batch + (size_t)row) * nkv + (size_t)kvh) *
                       (size_t)g->slots) * hd;
    return (char *)base + at * pt__gen_cache_elem(g);
}

/* n values (a head's key or value) into the cache at dst: copied, or
 * rounded to BF16. */
static void cache_put(const pt_generator *g, void *dst, size_t p, const float *src, size_t n)
{
    if (g->kv16) { /* (not pt__f32_to_bf16_n: its parallel region costs more than a head) */
        pt_bf16 *d = (pt_bf16 *)dst + p * n;
        for (size_t i = 0; i < n; i++)
            d[i] = pt__f32_to_bf16(src[i]);
    } else
        memcpy((float *)dst + p * n, src, n * sizeof(float));
}

/* Copy the keys and values of n prompt tokens (qkv rows) of layer l into
 * cache row `row`, token i at position i (only the last g->slots positions,
 * the ones a later token can see).  Position p is slot p % g->slots. */
void pt__gen_cache_store(pt_generator *g, int l, size_t n, int row)
{
    const pt_model *m = g->model;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim, QKV = Q + 2 * KV;
    const int nkv = m->cfg.num_key_value_heads;
    const size_t hd = (size_t)m->cfg.head_dim, slots = (size_t)g->slots;
    for (size_t i = n > slots ? n - slots : 0; i < n; i++) {
        const float *k = g->qkv + i * QKV + Q, *v = k + KV;
        for (int h = 0; h < nkv; h++) {
            cache_put(g, pt__gen_cache_at(g, g->kc, l, row, h), i % slots, k + (size_t)h * hd, hd);
            cache_put(g, pt__gen_cache_at(g, g->vc, l, row, h), i % slots, v + (size_t)h * hd, hd);
        }
    }
}

/* Keys a token at position pos attends to, all in the cache: pos + 1, or
 * the full ring. */
size_t pt__gen_visible_slots(const pt_generator *g, int pos)
{
    size_t len = (size_t)pos + 1;
    return len < (size_t)g->slots ? len : (size_t)g->slots;
}

static void rope_store_task(pt_generator *g, size_t t, int l);
static void attend_task(pt_generator *g, size_t t, int l, float scale, int thread);

/* Attention of the step's tokens over their rows' cached positions
 * (0..pos[i], or the ring's pos[i]-W+1..pos[i] in slot order), in one
 * parallel region: first each token's q and k heads rotated (RoPE, left
 * undone by the layer: pt_layer_io.rope_later) and its key and value
 * stored, then one task per (token, kv head) for the `group` query heads
 * that share it, each cached key and value read once for them all
 * (kernels/attention.h's pt__attn_decode): s = K q * scale, softmax,
 * o = V^T s. */
void pt__gen_decode_attention(pt_generator *g, int l, int m_rows)
{
    const pt_model_config *c = &g->model->cfg;
    const int nkv = c->num_key_value_heads;
    const size_t hd = (size_t)c->head_dim;
    const float scale = (float)(1.0 / sqrt((double)c->head_dim));
    const size_t tasks = (size_t)m_rows * (size_t)nkv;
    double work = 0.0;
    for (int i = 0; i < m_rows; i++)
        work += (double)pt__gen_visible_slots(g, g->pos[i]);
    work *= (double)c->num_attention_heads * (double)hd * 4.0;
    int nt = pt_get_num_threads();
    if (work < 262144.0)
        nt = 1;
    if (nt > g->threads_cap)
        nt = g->threads_cap;
    if ((size_t)nt > tasks)
        nt = (int)tasks;
    if (nt <= 1) { /* no OpenMP region (libgomp: a futex wake a loop) */
        for (size_t t = 0; t < tasks; t++)
            rope_store_task(g, t, l);
        for (size_t t = 0; t < tasks; t++)
            attend_task(g, t, l, scale, 0);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        /* first every token's q and k heads rotated and its key and value
         * stored (a token may see the others' of its row: continued rows) */
#pragma omp for schedule(static)
        for (size_t t = 0; t < tasks; t++)
            rope_store_task(g, t, l);
#pragma omp for schedule(dynamic, 1)
        for (size_t t = 0; t < tasks; t++)
            attend_task(g, t, l, scale, omp_get_thread_num());
    }
}

/* Task t of pt__gen_decode_attention's first loop: token t / nkv's query
 * heads of kv head t % nkv and that key head rotated, its key and value
 * stored. */
static void rope_store_task(pt_generator *g, size_t t, int l)
{
    const pt_model *m = g->model;
    const pt_model_config *c = &m->cfg;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim, QKV = Q + 2 * KV;
    const int nkv = c->num_key_value_heads, group = c->num_attention_heads / nkv;
    const size_t hd = (size_t)c->head_dim, ls = (size_t)g->slots, half = hd / 2;
    const int i = (int)(t / (size_t)nkv), kvh = (int)(t % (size_t)nkv);
    float *qk = g->qkv + (size_t)i * QKV;
    const float *ct = g->cos_t + (size_t)i * half, *st = g->sin_t + (size_t)i * half;
    for (int h = kvh * group; h < (kvh + 1) * group; h++)
        pt__rope_head(qk + (size_t)h * hd, half, ct, st, 1.0f);
    pt__rope_head(qk + Q + (size_t)kvh * hd, half, ct, st, 1.0f);
    const size_t p = (size_t)g->pos[i] % ls;
    cache_put(g, pt__gen_cache_at(g, g->kc, l, g->active[i], kvh), p, qk + Q + (size_t)kvh * hd, hd);
    cache_put(g, pt__gen_cache_at(g, g->vc, l, g->active[i], kvh), p, qk + Q + KV + (size_t)kvh * hd, hd);
}

/* Task t of pt__gen_decode_attention: token t / nkv's query heads of kv head
 * t % nkv against its row's cache, in the scratch of team thread `thread`. */
static void attend_task(pt_generator *g, size_t t, int l, float scale, int thread)
{
    const pt_model *m = g->model;
    const pt_model_config *c = &m->cfg;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim, QKV = Q + 2 * KV;
    const int nkv = c->num_key_value_heads, group = c->num_attention_heads / nkv;
    const size_t hd = (size_t)c->head_dim, ls = (size_t)g->slots;
    const int i = (int)(t / (size_t)nkv), kvh = (int)(t % (size_t)nkv), row = g->active[i];
    const size_t len = pt__gen_visible_slots(g, g->pos[i]);
    float *S = g->dec_scratch + (size_t)thread * (size_t)group * ls;
    const float *q = g->qkv + (size_t)i * QKV + (size_t)kvh * group * hd;
    const void *K = pt__gen_cache_at(g, g->kc, l, row, kvh), *Vc = pt__gen_cache_at(g, g->vc, l, row, kvh);
    float *o = g->att + (size_t)i * Q + (size_t)kvh * group * hd;
    if (g->kv16)
        pt__attn_decode_bf16(o, q, group, hd, K, Vc, len, scale, S);
    else
        pt__attn_decode(o, q, group, hd, K, Vc, len, scale, S);
}
