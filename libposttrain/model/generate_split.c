/* Split decoding (docs/generate.md): a decode step's tokens split between
 * the threads, each running the layers over its share alone (used by
 * model/generate.c's forward_rows). */
#include "model/generate_struct.h"

#include "model/lora.h"
#include "model/model.h"

#include <math.h>
#include <stdbool.h>

/* Rows a thread has at least for the tokens to be split between the
 * threads (pt__gen_split_parts). */
#define SPLIT_MIN_ROWS 8
/* Rows a part takes at least once split (pt__gen_split_bounds): fewer than
 * SPLIT_MIN_ROWS, so that a thread slower by a fifth or more gets fewer
 * tokens (16 rows: 7 and 9 instead of 8 and 8; one thread's share was 33%
 * slower than the other's in one run, 9% in another). */
#define SPLIT_PART_MIN 6

/* Parts the tokens of a forward are split into, one a thread, each thread
 * running the layers over its part alone (every product and attention of
 * it on one thread), instead of every product and attention split between
 * the threads: on a quantized model, whose products are short (25-90 us a
 * layer for 16 tokens of the SmolLM2-135M shape), a thread then waits for
 * the other once a step instead of at each of the 150 joins (the LM head
 * still runs split between them: its 50257 rows are the longest product).
 * Q4_K_M, 2 threads, decoding: 32 rows 1572-1593 -> 1704-1736 tokens/s,
 * 16 rows 11.15 -> 10.95 ms a step (8 alternating rounds); 8 rows (4 a
 * thread) were slower, hence SPLIT_MIN_ROWS.  Not on FP32/BF16 weights
 * (each thread streams all the weights: the FP32 twin, 16 rows, 34 -> 42
 * ms a step), not with LoRA adapters switched on (their scratch is
 * shared), not when a row has several tokens (a continued row's tokens
 * read each other's keys).  The same results: every kernel computes a
 * token alone (kernels/qgemv.h, kernels/attention.h). */
int pt__gen_split_parts(const pt_generator *g, int m_rows)
{
    int nt = pt_get_num_threads();
    if (nt > g->threads_cap)
        nt = g->threads_cap;
    if (nt > PT_GEN_SPLIT_MAX)
        nt = PT_GEN_SPLIT_MAX;
    if (nt < 2 || m_rows < SPLIT_MIN_ROWS * nt || !pt__model_is_quantized(g->model) ||
        pt__lora_active(g->model))
        return 1;
    for (int i = 1; i < m_rows; i++)
        for (int j = 0; j < i; j++)
            if (g->active[i] == g->active[j])
                return 1;
    return nt;
}

/* The first token of each of the `parts` threads' parts (r[parts] =
 * m_rows): in proportion to the threads' speeds in the last split forwards
 * (equal shares until measured), SPLIT_PART_MIN tokens a part at least.  A
 * VM's cores can differ by a third in speed, the slower one changing
 * within minutes, and a thread cannot take over another's part. */
void pt__gen_split_bounds(const pt_generator *g, int m_rows, int parts, int *r)
{
    double tot = 0.0;
    bool known = true;
    for (int p = 0; p < parts; p++) {
        known = known && g->split_speed[p] > 0.0;
        tot += g->split_speed[p];
    }
    double at = 0.0;
    r[0] = 0;
    for (int p = 0; p < parts; p++) {
        at += known ? g->split_speed[p] / tot : 1.0 / parts;
        int e = p == parts - 1 ? m_rows : (int)lround(at * m_rows);
        if (e < r[p] + SPLIT_PART_MIN)
            e = r[p] + SPLIT_PART_MIN;
        if (e > m_rows - (parts - 1 - p) * SPLIT_PART_MIN)
            e = m_rows - (parts - 1 - p) * SPLIT_PART_MIN;
        r[p + 1] = e;
    }
}

/* The generator seen from token r0 on, for the thread `part` (its own
 * decoding scratch): its buffers' rows r0.. become rows 0... */
pt_generator pt__gen_part_view(const pt_generator *g, int r0, int part)
{
    const pt_model *m = g->model;
    const pt_model_config *c = &m->cfg;
    const size_t r = (size_t)r0, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)m->q_dim, KV = (size_t)m->kv_dim, half = (size_t)c->head_dim / 2;
    const size_t nh = (size_t)c->num_attention_heads, nkv = (size_t)c->num_key_value_heads;
    pt_generator v = *g;
    v.xmid += r * H, v.qkv += r * (Q + 2 * KV), v.att += r * Q, v.gu += r * 2 * I;
    v.r1 += r, v.r2 += r, v.xn += r * H, v.h += r * I;
    if (c->qk_norm)
        v.qkpre += r * (Q + KV), v.rq += r * nh, v.rk += r * nkv;
    v.cos_t += r * half, v.sin_t += r * half;
    v.ids += r, v.pos += r, v.active += r;
    v.dec_scratch += (size_t)part * (nh / nkv) * (size_t)g->slots;
    return v;
}
