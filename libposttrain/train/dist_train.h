/* Training over a pt_dist job (dist_train.c).  Internal. */
#ifndef PT_TRAIN_DIST_TRAIN_H
#define PT_TRAIN_DIST_TRAIN_H

#include "dist/dist_internal.h"
#include "posttrain/train.h"

#include <stdint.h>

/* Sum the gradients of opt's parameters over the ranks of d (in place, in
 * rank order, in buckets; small tensors share a staging bucket).  Nothing
 * to do for NULL d or one rank. */
int pt__dist_allreduce_grads(pt_dist *d, pt_optimizer *opt);

/* The hash pt_dist_check_replicas compares: trainable parameters, moments,
 * step and skip counters, independent of the thread count. */
uint64_t pt__optimizer_state_hash(pt_optimizer *opt);

#endif
