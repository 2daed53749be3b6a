/* The context of forward and backward passes (model/forward.c), laid out
 * and allocated by model/context.c. */
#ifndef PT_MODEL_CONTEXT_INTERNAL_H
#define PT_MODEL_CONTEXT_INTERNAL_H

#include "model/transformer.h"
#include "core/busy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct layer_acts {
    float *x, *xmid, *qkv, *att, *lse, *gu, *r1, *r2;
    float *qkpre, *rq, *rk; /* qk-norm only */
    uint16_t *stash;        /* BF16 stash mode, layers 0..L-2: x|xmid|qkv|gu|qkpre,
                             * each n x its width, rounded to BF16 (else NULL) */
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
    size_t block_bytes;   /* its size */
    layer_acts *acts;     /* num_hidden_layers + 1 (the last holds only x) */
    float *rf, *head_lse, *lp, *dlp;
    float *xn, *hbuf, *dx, *dxn, *dqkv, *datt, *dgu;
    float *chunk;
    float *cos_t, *sin_t;
    float *attn_scratch;
    int32_t *ids, *tgt, *pos, *seg;
    bool has_seg;
    float temperature;    /* the batch's, kept for the backward (1: none) */
    const float *bwd_dent; /* during pt__ctx_backward_entropy: dL/dH per position */
    float *lora_buf;      /* LoRA adapter scratch (pt__lora_scratch), grown on demand */
    size_t lora_cap;
    int num_threads;      /* pt_context_set_num_threads; 0: the process setting */
    bool recompute;       /* gradient checkpointing: of the layers' activations only
                           * their inputs x are kept; layer l's others live in one
                           * shared set, recomputed from x before its backward */
    bool bf16_acts;       /* pt_context_set_bf16_activations (in effect without
                           * recompute): the layers share one FP32 working set
                           * (two alternating inputs x), and each keeps a BF16
                           * copy of its big activations, widened before its
                           * backward (model/stash.c) */
    bool no_backward;     /* during a pt_model_loss without backward: no stash */
};

/* BF16 stash mode in effect. */
static inline bool pt__ctx_stash(const pt_context *ctx)
{
    return ctx->bf16_acts && !ctx->recompute;
}

/* model/stash.c: layer l's working set (n rows) rounded into its stash, and
 * back (widened exactly into the shared working set and acts[l].x). */
void pt__stash_pack(pt_context *ctx, int l, size_t n);
void pt__stash_unpack(pt_context *ctx, int l, size_t n);
/* Layer l's stash width: BF16 values a token. */
size_t pt__stash_width(const pt_context *ctx);

#endif
