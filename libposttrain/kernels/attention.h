/* Causal multi-head attention with grouped-query heads, tiled in the
 * FlashAttention-2 manner: scores are computed one (query tile x key tile)
 * block at a time with a running row maximum and sum, only the per-row
 * logsumexp is kept, and the backward recomputes the probabilities from it.
 * Memory beyond the inputs and outputs is O(threads x tile^2).
 *
 * Layouts (token-major, as the projections produce them):
 *   q, dq : [B*T, nh*hd]   (row stride ldq, default nh*hd)
 *   k, v, dk, dv : [B*T, nkv*hd] (row stride ldkv, default nkv*hd)
 *   out, dout : [B*T, nh*hd] (row stride ldo, default nh*hd)
 *   lse : [B, nh, T]
 * (so q, k and v may be column blocks of one fused [B*T, (nh+2*nkv)*hd] buffer)
 * Query head h reads key/value head h / (nh/nkv).  Token i attends to j when
 * j <= i, seg[i] == seg[j] (when seg is given) and i - j < window (window 0:
 * unlimited).  Scores are scaled by `scale` (1/sqrt(hd)). */
#ifndef PT_KERNELS_ATTENTION_H
#define PT_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pt_attn_shape {
    int batch, seq, nh, nkv, hd;
    float scale;
    const int32_t *seg;   /* B*T segment ids, or NULL */
    int window;           /* 0: unlimited */
    int tile_q, tile_k;   /* 0: defaults */
    size_t ldq, ldkv, ldo; /* row strides, 0: defaults */
    int max_threads;      /* threads the scratch was sized for (0: pt_get_num_threads()) */
    bool bf16;            /* mixed precision: the tile products in BF16 where
                           * pt__tile_mode() has tiles (AMX), FP32 otherwise */
} pt_attn_shape;

/* Floats of scratch the calls below need for `nthreads` threads. */
size_t pt__attention_scratch_floats(const pt_attn_shape *s, int nthreads);

/* out and lse are overwritten. */
void pt__attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                          const pt_attn_shape *s, float *scratch);

/* dq, dk, dv are overwritten (dq with stride ldq, dk/dv with ldkv).  out/lse are the forward's results. */
void pt__attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, const float *lse,
                           const pt_attn_shape *s, float *scratch);

/* Decoding (kernels/attn_decode.c): one new token's `group` query heads q
 * (group x hd, contiguous) that share one key/value head, against its len
 * cached keys and values K, V (len x hd each, contiguous): o (group x hd) =
 * softmax(scale K q_h) V for each head h.  S: group * len floats of scratch.
 * Each key and value is read once for all the group's heads. */
void pt__attn_decode(float *o, const float *q, int group, size_t hd, const float *K, const float *V,
                     size_t len, float scale, float *S);
/* The same by the plain C code alone (the bits pt__attn_decode gives on
 * every path): for tests. */
void pt__attn_decode_ref(float *o, const float *q, int group, size_t hd, const float *K,
                         const float *V, size_t len, float scale, float *S);
/* The same on a cache held in BF16 (each value widened exactly), and its
 * plain C code. */
void pt__attn_decode_bf16(float *o, const float *q, int group, size_t hd, const uint16_t *K,
                          const uint16_t *V, size_t len, float scale, float *S);
void pt__attn_decode_bf16_ref(float *o, const float *q, int group, size_t hd, const uint16_t *K,
                              const uint16_t *V, size_t len, float scale, float *S);

#endif
