/* The optimizer's element-wise passes over one parameter array: the
 * gradient's sum of squares, AdamW's and SGD's check and update (used by
 * train/optimizer.c; formulas as torch.optim.AdamW/SGD). */
#ifndef PT_TRAIN_OPTIMIZER_MATH_H
#define PT_TRAIN_OPTIMIZER_MATH_H

#include "kernels/bf16.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct pt_adamw_consts {
    float b1, b2, eps, step_size, sqrt_bc2;
} pt_adamw_consts;

/* The largest |w|, |m| and v a pass wrote (reductions: order-free). */
typedef struct pt_opt_maxima {
    float w, m, v;
} pt_opt_maxima;

/* Sum of the squares of g[0 .. n) in double: blocks of 4096 summed in
 * parallel, each over 16 fixed lanes (element i into lane i mod 16, lanes
 * added in order), block sums added left to right, so the result does not
 * depend on the thread count.  *gmax receives max |g[i]| (NaN ignored: the
 * sum shows it). */
double pt__opt_sum_squares(const float *g, size_t n, float *gmax, int threads);

/* Would the AdamW update of these n elements write a non-finite weight or
 * moment?  Nothing is written. */
bool pt__adamw_span_bad(const float *w, const float *g, const float *m, const float *v, size_t n,
                       float clip, float decay, const pt_adamw_consts *c, int threads);
/* The AdamW update of n elements: w, m, v rewritten, g zeroed (the step
 * consumed it), w16 (when not NULL) set to the new w rounded to BF16 as
 * pt__f32_to_bf16 does; the maxima of what was written folded into *mx. */
void pt__adamw_span_update(float *w, float *g, float *m, float *v, pt_bf16 *w16, size_t n,
                          float clip, float decay, const pt_adamw_consts *c, pt_opt_maxima *mx,
                          int threads);

/* AdamW cannot write a non-finite value when g is finite with |g| <= gmax,
 * |w| <= mx->w, |m| <= mx->m, 0 <= v <= mx->v and eps > 0: a bound on every
 * intermediate (with a factor 4 of room for rounding), computed in double.
 * decay_max is the largest |decay| of any parameter. */
bool pt__adamw_bounded(const pt_opt_maxima *mx, float gmax, float clip, float decay_max,
                      const pt_adamw_consts *c);

/* SGD with momentum: as the AdamW pair (buf is the momentum buffer). */
bool pt__sgd_span_bad(const float *w, const float *g, const float *buf, size_t n, float clip,
                     float wd, float mom, bool first, float lr, int threads);
void pt__sgd_span_update(float *w, const float *g, float *buf, size_t n, float clip, float wd,
                        float mom, bool first, float lr, int threads);

#endif
