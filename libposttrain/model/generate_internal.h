/* Internal parts of the generator (model layer): the sampler, exposed so the
 * tests can check its filters and frequencies on known distributions, and a
 * hook that shows the logits of every step. */
#ifndef PT_MODEL_GENERATE_INTERNAL_H
#define PT_MODEL_GENERATE_INTERNAL_H

#include "posttrain/generate.h"
#include "core/core.h"

#include <stdint.h>

typedef struct pt_sampler {
    float temperature;  /* 0: greedy */
    int top_k;          /* 0: off */
    float top_p;        /* 1: off */
    float min_p;        /* 0: off */
} pt_sampler;

/* Working memory of one pt__sample_token call for a vocabulary of v ids. */
typedef struct pt_sample_scratch {
    const float *z; /* [v] logits / temperature (the logits themselves at 1) */
    float *zbuf;    /* [v] where z is written when the temperature is not 1 */
    float *e;       /* [v] exp(z - max z) */
    int32_t *idx;   /* [v] candidate ids */
    uint8_t *keep;  /* [v] 1 for the ids the filters keep */
    double *bs;     /* [v / 256 rounded up] the draw's sums of blocks of ids */
    float zmax;     /* max z, and the sum of e, of the last call */
    float sum;
} pt_sample_scratch;

/* Bytes of scratch for one sampler call (64-byte aligned parts). */
size_t pt__sample_scratch_bytes(int v);
/* Point s's arrays into `mem` (pt__sample_scratch_bytes(v) bytes, 64-byte aligned). */
void pt__sample_scratch_init(pt_sample_scratch *s, void *mem, int v);
/* The id drawn by u in [0, 1) with weights e[0 .. v) (>= 0; bs: v / 256
 * rounded up doubles of scratch): the first id whose running sum of
 * weights passes u times their total (*total), both sums taken by blocks
 * of 256 ids (generate_sample.c); `last` when rounding leaves none. */
int32_t pt__sample_draw(const float *e, int v, double u, int32_t last, double *bs, double *total);

/* The ids the filters of s keep for these logits (temperature > 0): keep[i]
 * is set to 1 or 0; returns how many are kept (>= 1).  Also leaves z and e
 * of the scratch filled. */
int pt__sample_filter(uint8_t *keep, const float *logits, int v, const pt_sampler *s,
                     pt_sample_scratch *sc);

/* Draw one id from logits (v entries) as pt_generate_options describes; the
 * log-probability of the id under the distribution drawn from (softmax of
 * logits / temperature over the ids top-k, top-p and min-p kept,
 * renormalised; over all v ids when nothing is filtered; log_softmax of the
 * logits when greedy) goes to *logprob when non-NULL.  Uses rng only
 * when temperature > 0 (exactly one 53-bit uniform per call). */
int32_t pt__sample_token(float *logprob, const float *logits, int v, const pt_sampler *s,
                        pt_rng *rng, pt_sample_scratch *sc);

/* The RNG stream of a row: xoshiro256** seeded from (seed, stream). */
void pt__sample_rng(pt_rng *r, uint64_t seed, uint64_t stream);

/* KV-cache slots per (layer, row, kv head): max_seq, or the model's
 * sliding window when that is shorter (a ring); and the floats of keys and
 * values together (2 * layers * max_batch * kv_heads * head_dim * slots). */
int pt__generator_cache_slots(const pt_generator *g);
size_t pt__generator_cache_floats(const pt_generator *g);
/* The cache in BF16 (true) or FP32: a new block, the cached rows dropped;
 * on failure (PT_ENOMEM, with the message) the generator is unchanged. */
int pt__generator_set_kv16(pt_generator *g, bool kv16);
bool pt__generator_kv16(const pt_generator *g);

/* Called with the logits of every sampled token of every row, before the
 * draw (row = batch index, step = index of the new token). */
typedef void (*pt_generate_logits_fn)(int row, int step, const float *logits, int vocab,
                                      void *payload);
void pt__generator_set_logits_hook(pt_generator *gen, pt_generate_logits_fn fn, void *payload);

#endif
