/* The communication layer under pt_dist: one interface (the collectives
 * below, in dist.c) over a backend: MPI (comm_mpi.c, built when meson finds
 * MPI) or a single process (comm_single.c).  Training code (train/) calls
 * only these functions, never MPI.  Internal. */
#ifndef PT_DIST_INTERNAL_H
#define PT_DIST_INTERNAL_H

#include "posttrain/dist.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the collectives (dist.c) -----------------------------------------------
 * Every one returns PT_OK or an error with the last error set: PT_EPEER when
 * a peer did not arrive before the deadline (the job is then failed: every
 * later collective is PT_EPEER at once) or MPI reported an error.  `what`
 * names the collective in messages ("gradient all-reduce"). */

/* In-place sum of n floats over all ranks, in rank order ((r0 + r1) + r2
 * ...), bit-identical on every rank and independent of the bucket size and
 * of MPI's algorithms: a reduce-scatter in which each rank sums its shard of
 * the bucket in rank order, then an all-gather.  Split into buckets of
 * opts.bucket_bytes. */
int pt__comm_allreduce_f32(pt_dist *d, float *buf, size_t n, const char *what);
/* The same for doubles (small vectors: counts, losses, metrics). */
int pt__comm_allreduce_f64(pt_dist *d, double *buf, size_t n, const char *what);
/* Maximum / minimum of n doubles over all ranks, in place. */
int pt__comm_allreduce_max_f64(pt_dist *d, double *buf, size_t n, const char *what);
int pt__comm_allreduce_min_f64(pt_dist *d, double *buf, size_t n, const char *what);
int pt__comm_bcast(pt_dist *d, void *buf, size_t bytes, int root, const char *what);
/* Every rank's `bytes` bytes, concatenated in rank order into recv
 * (size * bytes; send may not overlap recv). */
int pt__comm_allgather(pt_dist *d, const void *send, size_t bytes, void *recv, const char *what);
/* Ranks contribute different byte counts: recv_counts[r] bytes of rank r
 * land at recv + displs[r] (every rank passes the same counts). */
int pt__comm_allgatherv(pt_dist *d, const void *send, size_t send_bytes, void *recv, const size_t *recv_counts,
                       const size_t *displs, const char *what);
/* The status agreement of pt_dist_agree, with `what` naming the operation
 * in the PT_EPEER message ("pt_sft_step"). */
int pt__comm_agree(int *first_failed, pt_dist *d, int status, const char *what);
/* The same, and in the same collective the sum of n doubles in rank order
 * (vals in place; the sum is computed even when a rank failed).  A rank
 * that failed keeps its own status and message. */
int pt__comm_agree_sum(int *first_failed, pt_dist *d, int status, double *vals, size_t n, const char *what);

/* The optimizer step the training code is in, for messages (-1: none). */
void pt__dist_set_step(pt_dist *d, int64_t step);

/* The job an optimizer is attached to, or NULL (train/optimizer.c). */
pt_dist *pt__optimizer_dist(const pt_optimizer *opt);

/* ---- the backends -----------------------------------------------------------
 * Point-to-point exchanges are the one primitive: pt__backend_exchange posts,
 * for every peer p != rank, a send of send_bytes[p] bytes from send[p] and a
 * receive of recv_bytes[p] bytes into recv[p] (NULL / 0: nothing with that
 * peer), then waits for all of them until the deadline.  On a timeout it
 * names the peers whose receive had not completed. */
typedef struct pt_backend pt_backend;

struct pt_dist {
    pt_dist_options opts;
    int rank, size;
    pt_backend *be;          /* NULL for a single process */
    bool failed;             /* a collective failed: the job is unusable */
    char failure[512];       /* its message, repeated by later calls */
    int64_t step;            /* for messages */
    double comm_seconds;     /* inside collectives since create */
    uint64_t seq;            /* collectives run (tags, messages) */
    float *scratch;          /* a bucket's received shards (f32) */
    size_t scratch_n;
};

/* Whether this process was started by an MPI launcher (mpirun, mpiexec,
 * srun: their environment variables), or MPI is already initialised. */
bool pt__backend_mpi_launched(void);
int pt__backend_mpi_create(pt_backend **out, int *rank, int *size, void *mpi_comm);
void pt__backend_mpi_free(pt_backend *be, bool failed);
int pt__backend_exchange(pt_dist *d, const void *const *send, const size_t *send_bytes, void *const *recv,
                        const size_t *recv_bytes, const char *what);

#endif
