/* The generator's fields, shared by generate.c and generate_api.c (the
 * public entry points that take the generator, core/busy.h).  Not installed. */
#ifndef PT_MODEL_GENERATE_STRUCT_H
#define PT_MODEL_GENERATE_STRUCT_H

#include "model/generate_internal.h"
#include "model/transformer.h"
#include "core/busy.h"

/* Threads a decoding forward's tokens are split between at most. */
#define PT_GEN_SPLIT_MAX 8

struct pt_generator {
    pt_busy busy;              /* the public function using it (core/busy.h), or NULL */
    pt_model *model;
    uint64_t generation;       /* the model's structure generation it was created for */
    int max_batch, max_seq;
    int slots;                 /* cache slots per (layer, row, kv head): max_seq, or the
                                * sliding window when shorter (a ring) */
    int threads_cap;           /* threads the per-thread scratch was sized for */
    size_t rows;               /* work-buffer rows: max(max_seq, max_batch) */
    float *block;
    float *kc, *vc;            /* KV cache (FP32, or BF16 values when kv16) */
    bool kv16;                 /* pt_generator_set_kv_cache(PT_KV_CACHE_BF16) */
    float *x, *y, *xmid, *qkv, *att, *gu, *r1, *r2, *qkpre, *rq, *rk, *xn, *h;
    float *cos_t, *sin_t, *lse, *attn_scratch, *dec_scratch, *logits;
    void *samp;                /* threads_cap sampler scratches */
    size_t samp_bytes;
    int32_t *ids, *pos, *active;
    pt_rng *rngs;
    int32_t *stop;             /* copy of the stop ids of the current call */
    float *lora_buf;
    size_t lora_cap;
    pt_generate_logits_fn hook;
    void *hook_payload;
    int num_threads;           /* pt_generator_set_num_threads; 0: the process setting */
    double split_speed[PT_GEN_SPLIT_MAX]; /* tokens a second of each thread over its part of
                                           * a split forward (model/generate_split.c,
                                           * pt__gen_split_parts); 0: not measured yet */
};

/* The KV cache (model/generate_cache.c): bytes of a cached value; where
 * (layer l, cache row, kv head)'s slots start in the keys or values `base`;
 * the keys and values of a prompt's n tokens stored in cache row `row`;
 * the slots a token at pos sees; and a decode step's attention for layer l
 * (q and k rotated, keys and values stored, then attended). */
size_t pt__gen_cache_elem(const pt_generator *g);
void *pt__gen_cache_at(const pt_generator *g, float *base, int l, int row, int kvh);
void pt__gen_cache_store(pt_generator *g, int l, size_t n, int row);
size_t pt__gen_visible_slots(const pt_generator *g, int pos);
void pt__gen_decode_attention(pt_generator *g, int l, int m_rows);

/* Split decoding (model/generate_split.c): the threads a forward of m_rows
 * tokens is split between (1: not split); each thread's first token
 * (r[parts] = m_rows), from their measured speeds; the generator seen from
 * token r0 on by thread `part`. */
int pt__gen_split_parts(const pt_generator *g, int m_rows);
void pt__gen_split_bounds(const pt_generator *g, int m_rows, int parts, int *r);
pt_generator pt__gen_part_view(const pt_generator *g, int r0, int part);

/* pt_generate's work, the generator taken by the caller; messages name
 * pt_generate. */
int pt__generator_run(pt_generator *g, const int32_t *prompt_ids, const int32_t *prompt_lens, int batch,
                     const pt_generate_options *opts, int32_t *tokens, int32_t *n_tokens,
                     int32_t *finish_reasons, float *logprobs);

#endif
