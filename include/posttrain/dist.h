/*
 * libposttrain public API: synchronous data-parallel training over MPI.
 * See docs/distributed.md and docs/scaling.md.
 *
 * Every rank holds the whole model.  The host (or `posttrain sft|grpo`
 * under mpirun) gives each rank its share of the global batch
 * (pt_dist_shard), attaches the job to the optimizer (pt_optimizer_set_dist)
 * and calls pt_sft_step / pt_grpo_step as in one process: loss
 * normalisation uses the global token counts, gradients are summed across
 * ranks in buckets in a fixed order (rank 0 + rank 1 + ..., whatever MPI's
 * own reduction algorithm would do), so N ranks over a global batch give
 * the weights of one process over the same batch (to rounding), and the
 * same N gives bit-identical weights run after run.  A non-finite gradient
 * on any rank skips the step on every rank.
 *
 * Faults: Open MPI 4.1 cannot survive a lost rank in place, so a watchdog
 * bounds every collective: if one does not complete within `timeout_s`, the
 * process writes "posttrain: rank R: collective <what> at step S did not
 * complete within T s; rank(s) L did not arrive" to stderr and exits with
 * status 124 (the only place the library ends the host, and only when the
 * host asked for a watchdog).  Relaunching the same command resumes from the
 * last complete checkpoint.  Silent data corruption: pt_dist_check_replicas
 * compares a hash of every rank's parameters and optimizer state.
 *
 * Built without MPI (meson -Dmpi=disabled, or no MPI found), the library
 * offers the same calls for a job of size 1.
 */
#ifndef POSTTRAIN_DIST_H
#define POSTTRAIN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"
#include "posttrain/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pt_dist pt_dist;

typedef struct pt_dist_options {
    size_t size;            /* sizeof(pt_dist_options) */
    double timeout_s;       /* watchdog deadline per collective, seconds; default 60;
                             * 0: no watchdog (a lost peer then hangs, as MPI does) */
    size_t bucket_bytes;    /* gradient all-reduce bucket; default 4 MiB (docs/scaling.md) */
    const char *heartbeat_dir; /* where ranks record their progress so that the
                             * watchdog can name the rank that did not arrive; NULL:
                             * a per-job directory under /dev/shm (or TMPDIR) */
} pt_dist_options;

PT_API int pt_dist_options_init(pt_dist_options *opts);

/* Whether this library was built with MPI. */
PT_API bool pt_dist_has_mpi(void);

/* Join the job.  mpi_comm: NULL for MPI_COMM_WORLD (MPI is initialised if
 * the host has not done it, and then finalised by pt_dist_free), or a
 * pointer to the host's own MPI_Comm (duplicated; the host keeps MPI's
 * lifetime).  Without MPI: a job of size 1, and a non-NULL mpi_comm is
 * PT_EUNSUPPORTED. */
PT_API int pt_dist_create(pt_dist **out, void *mpi_comm, const pt_dist_options *opts);
PT_API void pt_dist_free(pt_dist *d);

PT_API int pt_dist_rank(const pt_dist *d);
PT_API int pt_dist_size(const pt_dist *d);

/* This rank's share of n global items (rows, or GRPO groups): items
 * [*begin, *begin + *count), the first n % size ranks taking one more.
 * n < size is PT_EINVAL naming both numbers. */
PT_API int pt_dist_shard(int64_t *begin, int64_t *count, const pt_dist *d, int64_t n);

/* Make pt_sft_step / pt_grpo_step on this optimizer data-parallel over d
 * (NULL detaches).  d must outlive its use by the optimizer. */
PT_API int pt_optimizer_set_dist(pt_optimizer *opt, pt_dist *d);

/* Collectives for the host, under the same watchdog.  The sum is in rank
 * order and identical on every rank. */
PT_API int pt_dist_allreduce_sum(pt_dist *d, double *values, size_t n);
PT_API int pt_dist_broadcast(pt_dist *d, void *buf, size_t bytes, int root);
PT_API int pt_dist_barrier(pt_dist *d);

/* Silent data corruption check: every rank hashes its trainable parameters
 * and the optimizer's state; PT_ECHECKSUM when they differ, with a message
 * naming the rank(s) whose hash differs from the majority (with 2 ranks:
 * both) and the step; *bad_rank (may be NULL) gets the first such rank or
 * -1.  The same status on every rank. */
PT_API int pt_dist_check_replicas(int *bad_rank, pt_dist *d, const pt_optimizer *opt);

#ifdef __cplusplus
}
#endif

#endif
