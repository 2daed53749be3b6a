/*
 * libposttrain public API: synchronous data-parallel training over MPI.
 * See docs/distributed.md and docs/scaling.md.
 *
 * Every rank holds the whole model.  The host (or `posttrain sft|grpo`
 * under mpirun) gives each rank its share of the global batch
 * (pt_dist_shard), attaches the job to the optimizer (pt_optimizer_set_dist)
 * and calls pt_sft_step / pt_grpo_step as in one process: loss
 * normalisation uses the global token counts, gradients are summed across
 * ranks in buckets in a fixed order ((rank 0 + rank 1) + rank 2 ...,
 * whatever algorithm MPI would have chosen), so N ranks over a global batch
 * give the weights of one process over the same batch (to rounding), and
 * the same N gives bit-identical weights run after run.  A non-finite
 * gradient on any rank skips the step on every rank; an error on one rank
 * (a bad batch, no memory, the abort callback) makes the step fail on every
 * rank (PT_EPEER on the others, naming the rank), with nothing applied.
 *
 * Faults: Open MPI 4.1 cannot survive a lost rank in place, so every
 * collective has a deadline (timeout_s).  A collective that does not
 * complete in time returns PT_EPEER with "rank R: <what> at step S did not
 * complete within T s; rank(s) L did not arrive" (L: the ranks whose part
 * never came), and the job is unusable from then on (every later call:
 * PT_EPEER); the host exits non-zero, mpirun ends the other ranks, and a
 * relaunch resumes from the last complete checkpoint.  The library itself
 * never exits.  Silent data corruption: pt_dist_check_replicas compares a
 * hash of every rank's parameters and optimizer state.
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

/* Which communication layer a job uses. */
typedef enum pt_dist_backend {
    PT_DIST_AUTO = 0,   /* MPI when the library was built with it and the process was
                         * started by an MPI launcher (mpirun, mpiexec, srun: their
                         * environment), MPI is initialised, or mpi_comm is given;
                         * else single, so one program runs alone or under mpirun */
    PT_DIST_SINGLE = 1, /* one process, no communication (a job of size 1) */
    PT_DIST_MPI = 2     /* MPI (PT_EUNSUPPORTED when built without it) */
} pt_dist_backend;
/* "auto", "single", "mpi"; and the value of a name (PT_EINVAL listing the
 * accepted names otherwise). */
PT_API const char *pt_dist_backend_name(int value);
PT_API int pt_dist_backend_from_name(int *out, const char *name);

typedef struct pt_dist_options {
    size_t size;            /* sizeof(pt_dist_options) */
    int backend;            /* pt_dist_backend; default AUTO */
    double timeout_s;       /* deadline of every collective, seconds; default 60;
                             * 0: none (a lost peer then hangs the job, as MPI does) */
    size_t bucket_bytes;    /* gradient all-reduce bucket; default 4 MiB (docs/scaling.md);
                             * 4 KiB .. 1 GiB */
} pt_dist_options;

PT_API int pt_dist_options_init(pt_dist_options *opts);

/* Whether this library was built with MPI. */
PT_API bool pt_dist_has_mpi(void);
/* The MPI library built in: the first line of its MPI_Get_library_version
 * (callable before MPI_Init), trailing commas and spaces cut ("Open MPI
 * v4.1.4, package: ..."; valid until the calling thread's next call), or
 * NULL when built without MPI. */
PT_API const char *pt_dist_mpi_info(void);
/* The rank an MPI launcher (Open MPI's mpirun, PMIx, PMI: srun, Hydra) gave
 * this process in its environment, or 0: known before the job is joined, so
 * that a host can print a usage error or a note once, on rank 0. */
PT_API int pt_dist_launcher_rank(void);

/* Join the job (collective: every rank calls it).  mpi_comm: NULL for
 * MPI_COMM_WORLD (MPI is initialised if the host has not done it, and then
 * finalised when the last such job is freed: MPI allows one initialisation
 * per process), or a pointer to the host's own MPI_Comm, which is
 * duplicated (the host keeps MPI's lifetime).  With the single backend, or
 * without MPI: a job of size 1, and a non-NULL mpi_comm is
 * PT_EUNSUPPORTED.  Backend auto in a library built without MPI, in a process
 * an MPI launcher started as one of several ranks, is PT_EUNSUPPORTED too:
 * the ranks would otherwise train as separate jobs of one. */
PT_API int pt_dist_create(pt_dist **out, void *mpi_comm, const pt_dist_options *opts);
/* Collective unless the job failed (PT_EPEER): then nothing is finalised,
 * and the host should exit non-zero. */
PT_API void pt_dist_free(pt_dist *d);

/* The backend the job runs on (PT_DIST_SINGLE or PT_DIST_MPI: auto resolved). */
PT_API int pt_dist_get_backend(const pt_dist *d);
PT_API int pt_dist_rank(const pt_dist *d);
PT_API int pt_dist_size(const pt_dist *d);

/* This rank's share of n global items (rows, or GRPO groups): items
 * [*begin, *begin + *count), contiguous in rank order, the first n % size
 * ranks taking one more.  n < size is PT_EINVAL naming both numbers. */
PT_API int pt_dist_shard(int64_t *begin, int64_t *count, const pt_dist *d, int64_t n);

/* Make pt_sft_step / pt_grpo_step on this optimizer data-parallel over d
 * (NULL detaches).  d must outlive its use by the optimizer. */
PT_API int pt_optimizer_set_dist(pt_optimizer *opt, pt_dist *d);

/* Collectives for the host, under the same deadline.  The sum is in rank
 * order and identical on every rank. */
PT_API int pt_dist_allreduce_sum(pt_dist *d, double *values, size_t n);
PT_API int pt_dist_broadcast(pt_dist *d, void *buf, size_t bytes, int root);
PT_API int pt_dist_barrier(pt_dist *d);
/* Every rank's status (0 or a PT_E* code) in: *first_failed receives the
 * lowest rank whose status was not 0, or -1; the return value is PT_OK when
 * every rank succeeded, this rank's own status when it failed, else
 * PT_EPEER naming the failed rank and its status.  For a host that must
 * agree on the outcome of something every rank did (e.g. rank 0 saving a
 * checkpoint). */
PT_API int pt_dist_agree(int *first_failed, pt_dist *d, int status);

/* Seconds this rank has spent inside collectives since the job was created
 * (the transfers, and waiting for the slowest rank). */
PT_API double pt_dist_comm_seconds(const pt_dist *d);

/* Silent data corruption check (collective): every rank hashes its
 * trainable parameters and the optimizer's state (moments and step);
 * PT_ECHECKSUM when they differ, with a message naming the rank(s) whose
 * hash differs from the majority and the optimizer step, or, when no
 * majority agrees (2 ranks that differ), saying so and naming every rank;
 * *bad_rank (may be NULL) gets the first rank that differs from the
 * majority, or -1 (no mismatch, or no majority); *hash (may be NULL) this
 * rank's hash.  The same status on every rank. */
PT_API int pt_dist_check_replicas(int *bad_rank, uint64_t *hash, pt_dist *d, const pt_optimizer *opt);

#ifdef __cplusplus
}
#endif

#endif
