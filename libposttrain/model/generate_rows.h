/* Row-level access to a pt_generator for engines that keep sequences in the
 * KV cache across calls (the multi-turn episode engine, train/episode.c).
 *
 * A row of the cache holds one sequence: positions 0 .. len-1 of it are in
 * the cache.  pt__genrows_prefill fills a row with a prompt (positions from
 * 0, the same code as pt_generate's prefill); pt__genrows_step then feeds any
 * number of tokens to any rows in one batched forward: a decoding row gives
 * one token, a row continuing after text an environment appended gives a
 * chunk of consecutive positions.  Every product of a step runs row by row
 * (pt__sgemv_rows, as pt_generate's decode), and each token's attention reads
 * only its own row's cache up to its own position, so a token's keys,
 * values and logits do not depend on the other tokens of the step, on how a
 * row's tokens are split into steps, or on the thread count.
 *
 * The caller owns the schedule: it must feed a row's positions in order,
 * each exactly once after the row's prefill, and keep each step within
 * pt__genrows_step_capacity tokens and each row's chunk within
 * pt__genrows_chunk_limit (with a sliding-window ring, a chunk must not wrap
 * the ring).  Nothing here checks ids or positions: the engine does. */
#ifndef PT_MODEL_GENERATE_ROWS_H
#define PT_MODEL_GENERATE_ROWS_H

#include "model/generate_internal.h"

#include <stdint.h>

/* Check that the generator still matches its model (PT_ESTATE after a LoRA
 * change, the message naming `fn`) and size its LoRA scratch for a full
 * step.  Call once before the other functions of a run. */
int pt__genrows_begin(pt_generator *g, const char *fn);

/* Take the generator for the public function fn (PT_EBUSY when another
 * call has it: core/busy.h) and give it back on every path. */
int pt__genrows_take(pt_generator *g, const char *fn);
void pt__genrows_give(pt_generator *g);

pt_model *pt__genrows_model(const pt_generator *g);
int pt__genrows_max_batch(const pt_generator *g);
int pt__genrows_max_seq(const pt_generator *g);
/* The generator's own thread setting (pt_generator_set_num_threads; 0: the
 * process setting), for pt__threads_enter. */
int pt__genrows_thread_setting(const pt_generator *g);
/* Most tokens one pt__genrows_step can take (its work buffers' rows). */
int pt__genrows_step_capacity(const pt_generator *g);
/* How many of n consecutive tokens starting at position pos one step may
 * take for one row (n, or fewer when the chunk would wrap a sliding-window
 * ring; at least 1). */
int pt__genrows_chunk_limit(const pt_generator *g, int pos, int n);

/* Prefill row `row` with ids[0 .. n) at positions 0 .. n-1 (n >= 1); the
 * logits of the last position go to logits (vocab floats).  Polls the abort
 * callback per layer (PT_ECANCELLED). */
int pt__genrows_prefill(pt_generator *g, int row, const int32_t *ids, int n, float *logits);
/* Copy the first n positions of row `from`'s cache to row `to` (a repeated
 * prompt: bit-identical to prefilling it).  `from` must not have wrapped a
 * sliding-window ring past them. */
void pt__genrows_copy(pt_generator *g, int from, int to, int n);

/* One batched forward of n tokens: token i is ids[i] at position pos[i] of
 * row rows[i].  Its key and value go to the cache; for the tokens with
 * want[i] != 0 (want NULL: all), in order, the next-token logits go to
 * logits (one row of vocab floats each, at most max_batch of them). */
void pt__genrows_step(pt_generator *g, int n, const int32_t *rows, const int32_t *ids,
                     const int32_t *pos, const uint8_t *want, float *logits);

/* The generator's logits buffer: max_batch rows of vocab floats. */
float *pt__genrows_logits(pt_generator *g);

/* pt_generate's checks of sampling options, the messages naming fn and the
 * fields as prefix + name (PT_EINVAL; PT_ERANGE for a stop id). */
int pt__genrows_check_options(const pt_generate_options *o, const pt_model_config *c,
                             const char *fn, const char *prefix);

/* The sampler of pt_generate for these options. */
void pt__genrows_sampler(pt_sampler *s, const pt_generate_options *o);

/* Sample one token for each of m logit rows (row i at logits + i*vocab)
 * from its own stream rngs[i] (in parallel over rows, one row per thread,
 * as pt_generate does): tok[i], and the log-probability lp[i] when lp is
 * not NULL.  A logits hook set on the generator sees each row with
 * (hook_row[i], hook_step[i]). */
void pt__genrows_sample(pt_generator *g, int m, const float *logits, const pt_sampler *s,
                       pt_rng *const *rngs, int32_t *tok, float *lp, const int32_t *hook_row,
                       const int32_t *hook_step);

#endif
