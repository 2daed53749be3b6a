/* Internal layout of a pt_model and the one linear-layer entry point.
 * Only the model layer includes this; other layers use model/model.h's
 * tensor table. */
#ifndef PT_MODEL_TRANSFORMER_H
#define PT_MODEL_TRANSFORMER_H

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"
#include "model/model.h"
#include "model/schema.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* Pointers into the parameter (or gradient) block for one decoder layer.
 * q/k/v weights are adjacent in memory (and so are gate/up, and the q/k/v
 * biases), so [q;k;v] is one [(nh+2*nkv)*hd, H] matrix. */
typedef struct pt_layer_w {
    float *ln1;             /* [H] input_layernorm */
    float *wq, *wk, *wv;    /* [Q,H], [KV,H], [KV,H] */
    float *bq, *bk, *bv;    /* [Q], [KV], [KV] or NULL */
    float *qn, *kn;         /* [hd] q_norm / k_norm (qwen3) or NULL */
    float *wo;              /* [H,Q] */
    float *ln2;             /* [H] post_attention_layernorm */
    float *wg, *wu;         /* [I,H] gate_proj, up_proj */
    float *wd;              /* [H,I] down_proj */
} pt_layer_w;

typedef struct pt_weights {
    float *embed;           /* [V,H] */
    float *norm;            /* [H] */
    float *lm_head;         /* [V,H]; == embed when tied */
    pt_layer_w *layers;     /* num_hidden_layers entries */
} pt_weights;

struct pt_model {
    pt_model_config cfg;
    int q_dim, kv_dim;      /* heads*hd, kv_heads*hd */
    size_t num_floats;      /* floats in the parameter block (with alignment padding) */
    uint64_t num_params;
    float *params;          /* one 64-byte aligned block */
    float *grads;           /* same layout, NULL until allocated */
    pt_weights w, g;        /* g's pointers are NULL until grads exist */
    size_t ntensors;
    pt_tensor_ref *tensors;
    size_t *offsets;        /* offset of each tensor in the blocks */
    pt_schema_tensor *layout; /* the schema's tensors (names, rows), base tensors' order */
    float *inv_freq;        /* [hd/2] rotary frequencies after scaling */
    void *attachment;       /* a higher layer's record (pt__model_set_attachment) */
    void (*attachment_free)(void *);
    struct pt_lora *lora;   /* LoRA adapters (model/lora.h), or NULL */
    uint64_t generation;    /* structure generation: bumped whenever the tensor table is
                             * reallocated (pt__model_bump_generation) */
    const char *last_change;/* what the last bump did ("LoRA merged"), static text */
    bool allow_long_context;/* contexts/generators beyond max_position_embeddings allowed */
    /* BF16 (model/precision.c) */
    int bf16_mode;          /* pt_bf16_mode */
    pt_bf16 *params16;      /* BF16 copies of the 2-D base tensors (offsets as params), or NULL */
    bool bf16_stored;       /* the 2-D base tensors exist only in params16 (FP32 released) */
    uint64_t weights_version; /* bumped whenever the FP32 weights change */
    uint64_t bf16_version;  /* weights_version params16 was converted from */
    pthread_mutex_t bf16_lock; /* one refresh of params16 at a time */
    /* Quantized base (model/qbase.c): a GGUF's quantized 2-D tensors kept
     * in their ggml blocks; their FP32 data is NULL and the base frozen. */
    int *qtype;             /* per base tensor: its ggml type if quantized, else 0; or NULL */
    size_t *qoff;           /* per base tensor: offset of its blocks in qblocks */
    uint8_t *qblocks;       /* every quantized tensor's blocks, in table order */
    size_t qbytes, qused;   /* qblocks' size and the bytes placed so far */
    atomic_int refs;        /* the host's reference and one per dependent (pt__model_retain) */
};

/* After the tensor table changed (pt__model_bump_generation): BF16 copies
 * made or dropped, frozen FP32 released or restored, per the mode. */
int pt__model_bf16_sync(pt_model *m);
/* The frozen base's FP32 back (before writing it, as a LoRA merge does). */
void pt__model_bf16_unstore(pt_model *m);
/* Before a forward: the BF16 copies refreshed if the weights changed and
 * products use them (mixed precision). */
void pt__model_bf16_prepare(pt_model *m);
/* The BF16 weight the products should use for the base matrix at w (a
 * pointer into m->params), or NULL for FP32 products. */
const pt_bf16 *pt__model_w16(const pt_model *m, const float *w);
/* x[i] = embedding row ids[i] (FP32 or widened BF16), n rows. */
void pt__model_embed(const pt_model *m, float *x, const int32_t *ids, size_t n);

/* Give the whole pages inside [p, p + n) back to the OS (model/precision.c). */
/* n zeros at p without touching its whole pages (given back to the OS,
 * which reads them as zeros: a block a loader leaves partly unwritten, as
 * for quantized tensors, costs no memory there); memset if that fails. */
void pt__model_zero(float *p, size_t n);
void pt__model_release_pages(float *p, size_t n);

/* A weight's storage for the products: up to 3 segments of rows (q|k|v,
 * gate|up may differ in type), each of a ggml type (0: FP32 rows). */
typedef struct pt_qweight {
    int nseg;         /* 0: the weight is not quantized */
    pt_qseg seg[3];
    bool bf16;        /* BF16 products (the model's BF16 mode on a path with BF16
                       * arithmetic): prefill and training through BF16 tiles */
} pt_qweight;
/* The quantized storage of the base matrix at w (a pointer into m->params
 * where the tensor(s) of `rows` rows start); nseg 0 when none is quantized.
 * Adjacent tensors of one type are one segment. */
pt_qweight pt__model_wq(const pt_model *m, const float *w, size_t rows);

/* Base tensor i's dequantized values into dst (PT_ENOTFOUND if it is not
 * quantized). */
int pt__model_quant_values(const pt_model *m, size_t i, float *dst);
/* x[r] = the dequantized embedding row ids[r]; false (nothing done) when
 * the embedding is not quantized. */
bool pt__model_quant_embed(const pt_model *m, float *x, const int32_t *ids, size_t n);

/* The slot of w (pt_weights, or pt_layer_w of `layer` for a per-layer
 * row) that points at schema tensor `id`. */
float **pt__weights_slot(pt_weights *w, int layer, pt_tensor_id id);

/* A LoRA adapter on the output columns [off, off+len) of a linear:
 * y[:, off:off+len] += scale * (x A^T) B^T (attached by pt__lora_attach). */
typedef struct pt_lora_slice {
    const float *a;   /* [r, in] */
    const float *b;   /* [len, r] */
    float *da, *db;   /* their gradients */
    size_t off, len, r;
    float scale;
} pt_lora_slice;

/* One projection y = x W^T + b with W [out, in] (Hugging Face Linear).
 * Every projection of the transformer goes through these two functions, so
 * adapters (LoRA) can hook here. */
typedef struct pt_linear {
    const float *w;   /* [out, in] */
    const pt_bf16 *w16; /* the same in BF16 when products use it (pt__model_w16), else NULL */
    pt_qweight q;     /* quantized storage (nseg > 0): used instead of w / w16 */
    const float *b;   /* [out] or NULL */
    float *dw;        /* gradient of w, or NULL (frozen) */
    float *db;        /* gradient of b, or NULL */
    size_t in, out;
    pt_lora_slice lora[3]; /* nlora adapters over output ranges */
    int nlora;
    float *lora_scratch;   /* (1 + nlora) * rows * r floats when nlora > 0 */
    bool rowwise;          /* forward row by row (pt__sgemv_rows): decoding, where a
                            * row's result must not depend on the other rows */
} pt_linear;

/* y[rows x out] (row stride ldy) = x W^T + b, or += when accumulate. */
void pt__linear_forward(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                       size_t rows, bool accumulate);
/* The same on the rows pre makes of x (kernels/qgemv.h: RMSNorm or SwiGLU,
 * written to pre->out, the input the LoRA adapters and the backward read):
 * made within the product's parallel region when the product runs on the
 * quantized decoding kernels (rowwise), else made first (pt__qpre_apply)
 * and the product run on them.  The same bits either way. */
void pt__linear_forward_pre(const pt_linear *lin, float *y, size_t ldy, const float *x, size_t ldx,
                           size_t rows, bool accumulate, const pt_qpre *pre);
/* dW += dy^T x, db += colsum(dy), and dx = dy W (or += when accumulate_dx;
 * dx may be NULL).  The weight gradient is taken before dx is written, so dx
 * may alias x (not dy). */
void pt__linear_backward(const pt_linear *lin, float *dx, size_t lddx, bool accumulate_dx,
                        const float *dy, size_t lddy, const float *x, size_t ldx, size_t rows);

/* Lays out one allocation of floats: each pt__plan call reserves a x b floats
 * at a 64-byte aligned offset (returned) and sets `overflow` when the size
 * overflows (then nothing is allocated). */
typedef struct pt_planner {
    size_t total;   /* floats so far */
    bool overflow;
} pt_planner;
size_t pt__plan(pt_planner *p, size_t a, size_t b);
/* pt__plan's reservation as a pointer into base, or NULL when base is NULL
 * (a first pass that only sizes the block). */
float *pt__plan_at(pt_planner *p, float *base, size_t a, size_t b);

/* Threads that per-thread scratch is sized for: the larger of the
 * configured thread count and the processors (at least 1). */
int pt__scratch_threads(void);
/* Causal attention of model m over batch x seq tokens in the layers'
 * layout (q|k|v rows of Q+2KV floats, output rows of Q), with the model's
 * sliding window (0: none) but without segments or tiles, with scratch for
 * max_threads threads. */
pt_attn_shape pt__model_attn_shape(const pt_model *m, int batch, int seq, int max_threads);

/* One decoder layer's forward over n tokens, shared by the training forward
 * (model/forward.c) and the KV-cache generator (model/generate.c): they differ
 * only in the attention between the two halves.  Buffers are row-major with
 * n rows. */
typedef struct pt_layer_io {
    const float *x;         /* [n,H] layer input */
    float *xmid;            /* [n,H] written: x + attention projection */
    float *out;             /* [n,H] written: layer output */
    float *qkv;             /* [n,Q+2KV] written: q, k after qk-norm and rope, v */
    const float *att;       /* [n,Q] attention output (read by the second half) */
    float *gu;              /* [n,2I] written: gate|up */
    float *r1, *r2;         /* [n] RMSNorm rstd (may be NULL) */
    float *qkpre;           /* qk-norm: [n,Q+KV] q|k before the norm (written) */
    float *rq, *rk;         /* qk-norm: [n*nh], [n*nkv] per-head rstd (written) */
    float *xn;              /* [n,H] scratch */
    float *h;               /* [n,I] scratch: silu(gate)*up */
    const float *cos_t, *sin_t; /* [n, hd/2] rotary tables */
    float *lora_buf;        /* pt__lora_scratch for n rows */
    bool rowwise;           /* projections row by row (decoding) */
    bool rope_later;        /* q and k left unrotated: the decoding attention
                             * rotates them (model/generate.c) */
    bool tiles_bf16;        /* a quantized weight's products through BF16 tiles
                             * (set only where the CPU has BF16 arithmetic) */
} pt_layer_io;

/* First half of layer l: xn = RMSNorm(x), q|k|v projection, qk-norm, rope. */
void pt__layer_forward_qkv(const pt_model *m, int l, size_t n, const pt_layer_io *io);
/* Second half: xmid = x + att Wo^T, out = xmid + MLP(RMSNorm(xmid)). */
void pt__layer_forward_out(const pt_model *m, int l, size_t n, const pt_layer_io *io);

#endif
