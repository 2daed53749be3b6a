/* The communication layer under pt_dist: one interface, an MPI
 * implementation (comm_mpi.c, built when meson finds MPI) and a
 * single-process one (comm_single.c).  Training code (train/) calls only
 * these functions, never MPI.  Internal. */
#ifndef PT_DIST_INTERNAL_H
#define PT_DIST_INTERNAL_H

#include "posttrain/dist.h"

#include <stddef.h>
#include <stdint.h>

/* Every collective.  All return PT_OK or an error status (with the last
 * error set); a collective that does not complete before the watchdog's
 * deadline never returns (see posttrain/dist.h). */

/* In-place sum of n floats over all ranks, in rank order ((r0 + r1) + r2 ...),
 * bit-identical on every rank and independent of the bucket size and of MPI's
 * algorithm choice.  Split into buckets of opts.bucket_bytes. */
int pt_comm_allreduce_f32(pt_dist *d, float *buf, size_t n);
/* The same for doubles (small vectors: counts, losses, metrics). */
int pt_comm_allreduce_f64(pt_dist *d, double *buf, size_t n);
/* Maximum of n doubles over all ranks, in place. */
int pt_comm_allreduce_max_f64(pt_dist *d, double *buf, size_t n);
int pt_comm_bcast(pt_dist *d, void *buf, size_t bytes, int root);
/* Every rank's `bytes` bytes, concatenated in rank order into recv
 * (size * bytes). */
int pt_comm_allgather(pt_dist *d, const void *send, size_t bytes, void *recv);
int pt_comm_barrier(pt_dist *d);

/* The watchdog (dist/watchdog.c): the collectives above bracket their MPI
 * calls with enter/leave; `what` names the collective ("gradient
 * all-reduce"), `step` is the optimizer step (or -1). */
void pt_watchdog_enter(pt_dist *d, const char *what);
void pt_watchdog_leave(pt_dist *d);
/* The step the training code is in, for the watchdog's message and the
 * heartbeat. */
void pt_dist_set_step(pt_dist *d, int64_t step);

/* Seconds this rank has spent inside collectives since pt_dist_create
 * (waiting for stragglers included): goodput accounting. */
double pt_dist_wait_seconds(const pt_dist *d);

/* The job an optimizer is attached to, or NULL (train/optimizer.c). */
pt_dist *pt_optimizer_dist(const pt_optimizer *opt);

#endif
