/* Transformer building blocks in the llm.c style: one forward and one
 * backward function per operation, plain float pointers, explicit sizes,
 * row-major.  Backward functions ACCUMULATE parameter gradients (dw, db) and
 * either overwrite or accumulate input gradients as documented.  All loops
 * honour pt_get_num_threads(); reductions run in a fixed order, so results do
 * not depend on scheduling (and parameter-gradient reductions not even on the
 * thread count).  Nothing here knows about models. */
#ifndef PT_KERNELS_OPS_H
#define PT_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w, over rows of length d ---- */
/* y may alias x.  rstd (rows) receives rsqrt(mean(x^2)+eps) when non-NULL. */
void pt__rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, size_t rows,
                        size_t d, float eps);
/* One vector of hd values (y may alias x; rstd: where its rstd goes, or
 * NULL): what pt__rmsnorm_forward computes for each row, bit for bit. */
void pt__rmsnorm_row(float *y, float *rstd, const float *x, const float *w, size_t hd, float eps);
/* dx (+)= d/dx, dw += d/dw.  x is the forward input, rstd its saved value.
 * accumulate_dx: add into dx instead of overwriting it.  dw may be NULL. */
void pt__rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                         const float *rstd, size_t rows, size_t d, bool accumulate_dx);

/* Per-head RMSNorm (Qwen3's q_norm / k_norm): for each of n tokens and each
 * of nheads heads, the hd floats at x[t*ldx + h*hd] are normalised with the
 * shared weight w [hd] into y[t*ldy + h*hd]; rstd gets n*nheads values. */
void pt__headnorm_forward(float *y, size_t ldy, float *rstd, const float *x, size_t ldx,
                         const float *w, size_t n, int nheads, int hd, float eps);
/* dx (row stride lddx, overwritten; may alias dy when lddx == lddy), dw += . */
void pt__headnorm_backward(float *dx, size_t lddx, float *dw, const float *dy, size_t lddy,
                          const float *x, size_t ldx, const float *w, const float *rstd,
                          size_t n, int nheads, int hd);

/* ---- Rotary embeddings, Hugging Face rotate_half convention ---------------- */
/* inv_freq (hd/2) for head_dim hd: 1/theta^(2j/hd), then the rope scaling:
 * type 0 none, 1 "llama3" (factor, low/high freq factor, original max
 * positions), 2 "linear" (divide by factor). */
void pt__rope_inv_freq(float *inv_freq, int hd, double theta, int type, double factor,
                      double low_freq_factor, double high_freq_factor, int original_max_pos);
/* cos/sin tables (n x hd/2) for n positions. */
void pt__rope_table(float *cos_t, float *sin_t, const int32_t *pos, size_t n, const float *inv_freq,
                   int hd);
/* Rotate x (n tokens x nheads heads x hd, row stride ld floats) in place with
 * the tables of each token.  inverse = true applies the transposed rotation
 * (which is the backward of the forward rotation). */
void pt__rope_apply(float *x, size_t ld, size_t n, int nheads, int hd, const float *cos_t,
                   const float *sin_t, bool inverse);
/* One head (2 half values) with one token's tables, sgn -1 for the inverse:
 * what pt__rope_apply computes for each head, bit for bit. */
void pt__rope_head(float *x, size_t half, const float *cos_t, const float *sin_t, float sgn);

/* ---- SwiGLU: h = silu(g) * u ---------------------------------------------- */
/* rows x n: h is contiguous (row stride n); g and u have row stride ld (so
 * they can be the two halves of one [rows, 2n] gate|up buffer). */
void pt__swiglu_forward(float *h, const float *g, const float *u, size_t rows, size_t n, size_t ld);
/* One row of n: what pt__swiglu_forward computes for each row, bit for bit. */
void pt__swiglu_row(float *h, const float *g, const float *u, size_t n);
/* From dh (contiguous rows x n): dg and du (row stride ld), overwritten. */
void pt__swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u,
                        size_t rows, size_t n, size_t ld);

/* ---- Elementwise helpers --------------------------------------------------- */
/* db[j] += sum over rows of dy[r*ld + j], j < n; fixed order per column. */
void pt__colsum_add(float *db, const float *dy, size_t rows, size_t n, size_t ld);
/* y[r*ld + j] = b[j] for every row (bias broadcast before a beta=1 GEMM). */
void pt__rows_set(float *y, const float *b, size_t rows, size_t n, size_t ld);
/* y = x (n floats). */
void pt__copy(float *y, const float *x, size_t n);
/* x[i] /= d in place (n floats): logits / temperature, rounded as the
 * sampler's division. */
void pt__div_scalar(float *x, size_t n, float d);

/* ---- Embedding -------------------------------------------------------------- */
/* out[t] = table[ids[t]] (d floats per row); ids must be in range. */
void pt__embedding_forward(float *out, const float *table, const int32_t *ids, size_t n, size_t d);
/* dtable[ids[t]] += dout[t]; deterministic (columns split across threads,
 * tokens in order). */
void pt__embedding_backward(float *dtable, const float *dout, const int32_t *ids, size_t n,
                           size_t d);

/* ---- Log-softmax / cross-entropy on a chunk of logits rows ------------------ */
/* For each row r of logits (rows x v, row stride v): lse[r] = logsumexp, and
 * lp[r] = logits[target[r]] - lse[r] (0 when target[r] < 0). */
void pt__logsoftmax_rows(float *lse, float *lp, const float *logits, const int32_t *target,
                        size_t rows, size_t v);
/* Same, and ent[r] = the entropy -sum p log p of row r's softmax (nats). */
void pt__logsoftmax_entropy_rows(float *lse, float *lp, float *ent, const float *logits,
                                const int32_t *target, size_t rows, size_t v);
/* In place: logits row r becomes dlp[r] * (onehot(target[r]) - softmax(row));
 * rows with target < 0 or dlp == 0 become zero. */
void pt__logsoftmax_backward_rows(float *logits, const float *lse, const float *dlp,
                                 const int32_t *target, size_t rows, size_t v);
/* The same plus an entropy term: row r becomes dlp[r] * (onehot(target[r])
 * - p) + dent[r] * dH/dx, dH/dx_i = -p_i (log p_i + H), H = -sum p log p;
 * dlp counts only where target[r] >= 0, dent everywhere; a row where both
 * are 0 becomes zero. */
void pt__logsoftmax_entropy_backward_rows(float *logits, const float *lse, const float *dlp,
                                         const float *dent, const int32_t *target, size_t rows,
                                         size_t v);

#endif
