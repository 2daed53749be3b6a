/* The MPI backend of pt_dist: a duplicated communicator with errors
 * returned (never MPI's abort), and the one primitive every collective is
 * built on, a point-to-point exchange with every peer, posted non-blocking
 * and polled against the job's deadline.  Polling, rather than a blocking
 * call, is what lets a rank notice that a peer never arrived (killed,
 * stopped, hung) and name it: the peers whose messages did not come.  No
 * MPI_THREAD_MULTIPLE is needed; calls on a job come from one thread at a
 * time. */
#include "dist/dist_internal.h"

#include "core/core.h"

#include <mpi.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pt_backend {
    MPI_Comm comm;
    bool owns_init;          /* this job initialised MPI (mpi_comm NULL) */
    MPI_Request *reqs;
    int *peer;               /* the peer of each request */
    bool *is_recv;
    int *done_idx;
    bool *done;
    size_t cap;
};

/* Jobs created over MPI_COMM_WORLD by this library: MPI is finalised when
 * the last one is freed (MPI allows one initialisation per process). */
static int g_world_jobs;
static bool g_we_initialised;

static int mpi_fail(int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error code %d", rc);
    return pt__err(PT_EPEER, "%s: MPI error: %s", what, s);
}

bool pt__backend_mpi_launched(void)
{
    /* Open MPI, MPICH/Hydra and PMI-1/2, PMIx (Slurm's srun too) */
    static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK",
                                        "MPI_LOCALNRANKS" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return true;
    int init = 0;
    MPI_Initialized(&init);
    return init != 0;
}

int pt__backend_mpi_create(pt_backend **out, int *rank, int *size, void *mpi_comm)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin)
        return pt__err(PT_ESTATE, "pt_dist_create: MPI was already finalised in this process (MPI can be "
                      "initialised once per process: keep one job for the whole run)");
    if (!init && mpi_comm)
        return pt__err(PT_ESTATE, "pt_dist_create: mpi_comm is given but MPI is not initialised (call "
                      "MPI_Init first, or pass NULL to let the library do it)");
    pt_backend *be = pt__calloc(1, sizeof *be);
    if (!be)
        return PT_ENOMEM;
    if (!init) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            free(be);
            return mpi_fail(rc, "pt_dist_create: MPI_Init_thread");
        }
        g_we_initialised = true;
    }
    be->owns_init = mpi_comm == NULL;
    MPI_Comm parent = mpi_comm ? *(MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
    int rc = MPI_Comm_dup(parent, &be->comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_set_errhandler(be->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(be->comm, rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(be->comm, size);
    if (rc != MPI_SUCCESS) {
        free(be);
        return mpi_fail(rc, "pt_dist_create: MPI_Comm_dup");
    }
    if (be->owns_init)
        g_world_jobs++;
    *out = be;
    return PT_OK;
}

void pt__backend_mpi_free(pt_backend *be, bool failed)
{
    if (!be)
        return;
    if (!failed) {
        MPI_Comm_free(&be->comm);
        if (be->owns_init && --g_world_jobs == 0 && g_we_initialised) {
            int fin = 0;
            MPI_Finalized(&fin);
            if (!fin)
                MPI_Finalize();
        }
    }
    free(be->reqs);
    free(be->peer);
    free(be->is_recv);
    free(be->done_idx);
    free(be->done);
    free(be);
}

/* Requests of one exchange: messages of at most CHUNK bytes. */
#define CHUNK ((size_t)1 << 30)

static size_t chunks_of(size_t bytes)
{
    return bytes ? (bytes + CHUNK - 1) / CHUNK : 0;
}

static int reserve(pt_backend *be, size_t n)
{
    if (n <= be->cap)
        return PT_OK;
    MPI_Request *r = realloc(be->reqs, n * sizeof *r);
    if (r)
        be->reqs = r;
    int *p = realloc(be->peer, n * sizeof *p);
    if (p)
        be->peer = p;
    bool *ir = realloc(be->is_recv, n * sizeof *ir);
    if (ir)
        be->is_recv = ir;
    int *di = realloc(be->done_idx, n * sizeof *di);
    if (di)
        be->done_idx = di;
    bool *dn = realloc(be->done, n * sizeof *dn);
    if (dn)
        be->done = dn;
    if (!r || !p || !ir || !di || !dn)
        return pt__err(PT_ENOMEM, "pt_dist: out of memory for %zu requests", n);
    be->cap = n;
    return PT_OK;
}

/* After a failure: the pending requests are cancelled and released so that
 * nothing writes into the caller's buffers later. */
static void abandon(pt_backend *be, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!be->done[i] && be->reqs[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&be->reqs[i]);
            MPI_Request_free(&be->reqs[i]);
        }
}

/* "1, 3": the peers with a pending receive (or, when none, a pending send). */
static void missing_peers(char *out, size_t cap, const pt_backend *be, size_t n)
{
    out[0] = '\0';
    size_t len = 0;
    int last = -1;
    for (int pass = 0; pass < 2 && !out[0]; pass++)
        for (size_t i = 0; i < n; i++) {
            if (be->done[i] || be->is_recv[i] != (pass == 0) || be->peer[i] == last)
                continue;
            last = be->peer[i];
            int k = snprintf(out + len, cap - len, "%s%d", len ? ", " : "", last);
            if (k < 0 || (size_t)k >= cap - len)
                return;
            len += (size_t)k;
        }
}

int pt__backend_exchange(pt_dist *d, const void *const *send, const size_t *send_bytes, void *const *recv,
                        const size_t *recv_bytes, const char *what)
{
    pt_backend *be = d->be;
    size_t n = 0;
    for (int q = 0; q < d->size; q++)
        if (q != d->rank)
            n += chunks_of(recv_bytes[q]) + chunks_of(send_bytes[q]);
    int st = reserve(be, n ? n : 1);
    if (st)
        return st;
    size_t k = 0;
    int rc = MPI_SUCCESS;
    /* receives first, so a peer's message finds its buffer posted */
    for (int q = 0; q < d->size && rc == MPI_SUCCESS; q++) {
        if (q == d->rank)
            continue;
        for (size_t off = 0; off < recv_bytes[q] && rc == MPI_SUCCESS; off += CHUNK) {
            size_t len = recv_bytes[q] - off < CHUNK ? recv_bytes[q] - off : CHUNK;
            be->peer[k] = q;
            be->is_recv[k] = true;
            be->done[k] = false;
            rc = MPI_Irecv((char *)recv[q] + off, (int)len, MPI_BYTE, q, 0, be->comm, &be->reqs[k++]);
        }
    }
    for (int q = 0; q < d->size && rc == MPI_SUCCESS; q++) {
        if (q == d->rank)
            continue;
        for (size_t off = 0; off < send_bytes[q] && rc == MPI_SUCCESS; off += CHUNK) {
            size_t len = send_bytes[q] - off < CHUNK ? send_bytes[q] - off : CHUNK;
            be->peer[k] = q;
            be->is_recv[k] = false;
            be->done[k] = false;
            rc = MPI_Isend((const char *)send[q] + off, (int)len, MPI_BYTE, q, 0, be->comm, &be->reqs[k++]);
        }
    }
    if (rc != MPI_SUCCESS) {
        abandon(be, k);
        return mpi_fail(rc, what);
    }
    const double timeout = d->opts.timeout_s, t0 = pt__now();
    size_t left = n;
    long polls = 0;
    while (left > 0) {
        int outcount = 0;
        rc = MPI_Testsome((int)n, be->reqs, &outcount, be->done_idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            abandon(be, n);
            return mpi_fail(rc, what);
        }
        if (outcount != MPI_UNDEFINED)
            for (int i = 0; i < outcount; i++) {
                be->done[be->done_idx[i]] = true;
                left--;
            }
        if (left == 0)
            break;
        if (timeout > 0 && pt__now() - t0 > timeout) {
            char peers[256];
            missing_peers(peers, sizeof peers, be, n);
            abandon(be, n);
            return pt__err(PT_EPEER, "rank %d: %s at step %lld did not complete within %g s; rank(s) %s did "
                          "not arrive", d->rank, what, (long long)d->step, timeout, peers[0] ? peers : "?");
        }
        /* spin briefly (small messages), then sleep so that waiting ranks
         * leave the cores to the ranks still computing */
        if (++polls > 64) {
            long us = polls < 1000 ? 20 : 200;
            struct timespec ts = { 0, us * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    return PT_OK;
}
