/* pt_dist: the job (options, rank, size, shards) and every collective,
 * built on one backend primitive, the point-to-point exchange with a
 * deadline (dist_internal.h).  Sums are computed here, in rank order, so
 * their rounding never depends on MPI's choice of algorithm. */
#include "dist/dist_internal.h"

#include "core/core.h"

#ifdef PT_HAVE_MPI
#include <mpi.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pt_enum_entry k_backends[] = {
    { PT_DIST_AUTO, "auto" },
    { PT_DIST_SINGLE, "single" },
    { PT_DIST_MPI, "mpi" },
};
PT_ENUM_NAME_FUNCS(pt_dist_backend, k_backends, "dist backend")

#define MIN_BUCKET ((size_t)4096)
#define MAX_BUCKET ((size_t)1 << 30)

int pt_dist_options_init(pt_dist_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->backend = PT_DIST_AUTO;
    opts->timeout_s = 60.0;
    opts->bucket_bytes = (size_t)4 << 20;
    return PT_OK;
}

bool pt_dist_has_mpi(void)
{
#ifdef PT_HAVE_MPI
    return true;
#else
    return false;
#endif
}

const char *pt_dist_mpi_info(void)
{
#ifdef PT_HAVE_MPI
    /* callable before MPI_Init; a buffer per thread, as pt_last_error */
    static _Thread_local char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS)
        snprintf(v, sizeof v, "(MPI_Get_library_version failed)");
    v[strcspn(v, "\r\n")] = '\0';
    len = (int)strlen(v);
    while (len > 0 && (v[len - 1] == ',' || v[len - 1] == ' '))
        v[--len] = '\0';
    return v;
#else
    return NULL;
#endif
}

/* The job size an MPI launcher announced in the environment, or 0. */
static long launcher_size(void)
{
    static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return strtol(v, NULL, 10);
    }
    return 0;
}

int pt_dist_launcher_rank(void)
{
    static const char *const vars[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

int pt_dist_create(pt_dist **out, void *mpi_comm, const pt_dist_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    pt_dist_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_dist_options_init);
    if (!pt_dist_backend_name(o.backend))
        return pt__err(PT_EINVAL, "pt_dist_create: unknown backend %d (auto, single or mpi)", o.backend);
    if (!(o.timeout_s >= 0) || !isfinite(o.timeout_s))
        return pt__err(PT_EINVAL, "pt_dist_create: timeout_s %g must be finite and >= 0 (0: no deadline)",
                      o.timeout_s);
    if (o.bucket_bytes < MIN_BUCKET || o.bucket_bytes > MAX_BUCKET)
        return pt__err(PT_EINVAL, "pt_dist_create: bucket_bytes %zu is not in [%zu, %zu]", o.bucket_bytes,
                      MIN_BUCKET, MAX_BUCKET);
    int backend = o.backend == PT_DIST_AUTO ? (pt_dist_has_mpi() && (mpi_comm || pt__backend_mpi_launched())
                                                   ? PT_DIST_MPI : PT_DIST_SINGLE)
                                           : o.backend;
    if (o.backend == PT_DIST_AUTO && !pt_dist_has_mpi() && launcher_size() > 1)
        return pt__err(PT_EUNSUPPORTED, "pt_dist_create: this process was started by an MPI launcher as one of %ld "
                      "ranks, but this libposttrain was built without MPI: each rank would train alone (rebuild "
                      "with meson -Dmpi=enabled, or choose backend single to run alone on purpose)",
                      launcher_size());
    if (backend == PT_DIST_MPI && !pt_dist_has_mpi())
        return pt__err(PT_EUNSUPPORTED, "pt_dist_create: this libposttrain was built without MPI "
                      "(meson -Dmpi=enabled with an MPI installed, e.g. Debian's libopenmpi-dev)");
    if (backend == PT_DIST_SINGLE && mpi_comm)
        return pt__err(PT_EUNSUPPORTED, "pt_dist_create: mpi_comm is given but the backend is single "
                      "(a job of size 1 has no communicator)");
    pt_dist *d = pt__calloc(1, sizeof *d);
    if (!d)
        return PT_ENOMEM;
    d->opts = o;
    d->opts.backend = backend;
    d->size = 1;
    d->step = -1;
    int st;
    if (backend == PT_DIST_MPI && (st = pt__backend_mpi_create(&d->be, &d->rank, &d->size, mpi_comm))) {
        free(d);
        return st;
    }
    *out = d;
    return PT_OK;
}

void pt_dist_free(pt_dist *d)
{
    if (!d)
        return;
    if (d->be)
        pt__backend_mpi_free(d->be, d->failed);
    free(d->scratch);
    free(d);
}

PT_GETTER(int, pt_dist_get_backend, pt_dist, opts.backend, PT_DIST_SINGLE)
PT_GETTER(int, pt_dist_rank, pt_dist, rank, 0)
PT_GETTER(int, pt_dist_size, pt_dist, size, 1)
PT_GETTER(double, pt_dist_comm_seconds, pt_dist, comm_seconds, 0.0)
void pt__dist_set_step(pt_dist *d, int64_t step)
{
    if (d)
        d->step = step;
}

int pt_dist_shard(int64_t *begin, int64_t *count, const pt_dist *d, int64_t n)
{
    PT_CHECK_NULL(begin);
    PT_CHECK_NULL(count);
    PT_CHECK_NULL(d);
    if (n < d->size)
        return pt__err(PT_EINVAL, "pt_dist_shard: %lld items cannot be shared by %d ranks (every rank needs at "
                      "least one: give at least %d, or run fewer ranks)", (long long)n, d->size, d->size);
    int64_t base = n / d->size, extra = n % d->size, r = d->rank;
    *begin = r * base + (r < extra ? r : extra);
    *count = base + (r < extra ? 1 : 0);
    return PT_OK;
}

/* ---- collectives ----------------------------------------------------------- */

/* PT_EPEER with the stored message when the job already failed. */
static int check_alive(const pt_dist *d, const char *what)
{
    if (d->failed)
        return pt__err(PT_EPEER, "%s: the distributed job failed earlier: %s", what, d->failure);
    return PT_OK;
}

/* The end of a collective: its time counted, a failure remembered. */
static int finish(pt_dist *d, double t0, int st)
{
    d->comm_seconds += pt__now() - t0;
    d->seq++;
    if (st == PT_EPEER && !d->failed) {
        d->failed = true;
        snprintf(d->failure, sizeof d->failure, "%s", pt_last_error());
    }
    return st;
}

/* Per-peer arrays of the exchange, on the stack for small jobs. */
#define PEERS_STACK 64
#define PT_COUNT_OF_STACK(a) (sizeof(a) / sizeof((a)[0]))
typedef struct peer_io {
    const void **send;
    size_t *send_bytes;
    void **recv;
    size_t *recv_bytes;
    void *heap;
    const void *s_send[PEERS_STACK];
    size_t s_sb[PEERS_STACK];
    void *s_recv[PEERS_STACK];
    size_t s_rb[PEERS_STACK];
} peer_io;

static int peer_io_init(peer_io *p, int size)
{
    memset(p, 0, sizeof *p);
    if (size <= PEERS_STACK) {
        p->send = p->s_send;
        p->send_bytes = p->s_sb;
        p->recv = p->s_recv;
        p->recv_bytes = p->s_rb;
        return PT_OK;
    }
    size_t n = (size_t)size;
    char *h = pt__calloc(n, 2 * sizeof(void *) + 2 * sizeof(size_t));
    if (!h)
        return PT_ENOMEM;
    p->heap = h;
    p->send = (const void **)(void *)h;
    p->recv = (void **)(void *)(h + n * sizeof(void *));
    p->send_bytes = (size_t *)(void *)(h + 2 * n * sizeof(void *));
    p->recv_bytes = p->send_bytes + n;
    return PT_OK;
}

static void peer_io_free(peer_io *p)
{
    free(p->heap);
}

static int exchange(pt_dist *d, peer_io *p, const char *what)
{
    return pt__backend_exchange(d, (const void *const *)p->send, p->send_bytes, (void *const *)p->recv,
                               p->recv_bytes, what);
}

int pt__comm_allgatherv(pt_dist *d, const void *send, size_t send_bytes, void *recv, const size_t *recv_counts,
                       const size_t *displs, const char *what)
{
    int st = check_alive(d, what);
    if (st)
        return st;
    char *r = recv;
    if (send_bytes)
        memmove(r + displs[d->rank], send, send_bytes);
    if (d->size == 1)
        return PT_OK;
    double t0 = pt__now();
    peer_io p;
    if ((st = peer_io_init(&p, d->size)))
        return st;
    for (int q = 0; q < d->size; q++) {
        if (q == d->rank)
            continue;
        p.send[q] = send;
        p.send_bytes[q] = send_bytes;
        p.recv[q] = r + displs[q];
        p.recv_bytes[q] = recv_counts[q];
    }
    st = exchange(d, &p, what);
    peer_io_free(&p);
    return finish(d, t0, st);
}

int pt__comm_allgather(pt_dist *d, const void *send, size_t bytes, void *recv, const char *what)
{
    size_t stack_c[PEERS_STACK] = { 0 }, stack_d[PEERS_STACK] = { 0 };
    size_t *c = stack_c, *ds = stack_d;
    if (d->size > PEERS_STACK) {
        c = pt__malloc_array((size_t)d->size * 2, sizeof *c);
        if (!c)
            return PT_ENOMEM;
        ds = c + d->size;
    }
    for (int q = 0; q < d->size; q++) {
        c[q] = bytes;
        ds[q] = (size_t)q * bytes;
    }
    int st = pt__comm_allgatherv(d, send, bytes, recv, c, ds, what);
    if (c != stack_c)
        free(c);
    return st;
}

int pt__comm_bcast(pt_dist *d, void *buf, size_t bytes, int root, const char *what)
{
    int st = check_alive(d, what);
    if (st || d->size == 1)
        return st;
    double t0 = pt__now();
    peer_io p;
    if ((st = peer_io_init(&p, d->size)))
        return st;
    for (int q = 0; q < d->size; q++) {
        if (d->rank == root && q != root) {
            p.send[q] = buf;
            p.send_bytes[q] = bytes;
        }
    }
    if (d->rank != root) {
        p.recv[root] = buf;
        p.recv_bytes[root] = bytes;
    }
    st = exchange(d, &p, what);
    peer_io_free(&p);
    return finish(d, t0, st);
}

/* Small vectors: every rank gathers every rank's values and folds them in
 * rank order itself, so the result is the same bits everywhere. */
typedef enum { FOLD_SUM, FOLD_MAX, FOLD_MIN } fold_op;

static int allreduce_small_f64(pt_dist *d, double *buf, size_t n, fold_op op, const char *what)
{
    int st = check_alive(d, what);
    if (st || d->size == 1 || n == 0)
        return st;
    size_t total;
    if (!pt__mul_size(n, (size_t)d->size, &total))
        return pt__err(PT_ENOMEM, "%s: %zu values x %d ranks overflow", what, n, d->size);
    double *all = pt__malloc_array(total, sizeof *all);
    if (!all)
        return PT_ENOMEM;
    if ((st = pt__comm_allgather(d, buf, n * sizeof *buf, all, what)) == PT_OK) {
        for (size_t i = 0; i < n; i++) {
            double acc = all[i];
            for (int q = 1; q < d->size; q++) {
                double v = all[(size_t)q * n + i];
                acc = op == FOLD_SUM ? acc + v : op == FOLD_MAX ? (v > acc || isnan(v) ? v : acc)
                                                                : (v < acc || isnan(v) ? v : acc);
            }
            buf[i] = acc;
        }
    }
    free(all);
    return st;
}

int pt__comm_allreduce_max_f64(pt_dist *d, double *buf, size_t n, const char *what)
{
    return allreduce_small_f64(d, buf, n, FOLD_MAX, what);
}

int pt__comm_allreduce_min_f64(pt_dist *d, double *buf, size_t n, const char *what)
{
    return allreduce_small_f64(d, buf, n, FOLD_MIN, what);
}

/* Shard q of a bucket of n elements: [lo, hi). */
static void shard_of(size_t *lo, size_t *hi, size_t n, int size, int q)
{
    size_t base = n / (size_t)size, extra = n % (size_t)size, uq = (size_t)q;
    *lo = uq * base + (uq < extra ? uq : extra);
    *hi = *lo + base + (uq < extra ? 1 : 0);
}

/* One bucket of floats: send shard q to rank q, receive every rank's copy
 * of this rank's shard, sum them in rank order, then send the sum to every
 * rank and receive theirs. */
static int allreduce_bucket_f32(pt_dist *d, float *buf, size_t n, float *scratch, peer_io *p, const char *what)
{
    const int size = d->size, me = d->rank;
    size_t mlo, mhi;
    shard_of(&mlo, &mhi, n, size, me);
    const size_t mine = mhi - mlo;
    for (int q = 0; q < size; q++) {
        p->send[q] = NULL;
        p->send_bytes[q] = p->recv_bytes[q] = 0;
        p->recv[q] = NULL;
        if (q == me)
            continue;
        size_t lo, hi;
        shard_of(&lo, &hi, n, size, q);
        p->send[q] = buf + lo;
        p->send_bytes[q] = (hi - lo) * sizeof(float);
        p->recv[q] = scratch + (size_t)q * mine;
        p->recv_bytes[q] = mine * sizeof(float);
    }
    int st = exchange(d, p, what);
    if (st)
        return st;
    /* rank order: ((r0 + r1) + r2) ..., this rank's own values in their place */
    float *own = buf + mlo;
    /* one pass per rank over the shard (vectorised), accumulating in rank
     * order: acc = r0, acc += r1, acc += r2, ...  The accumulator is this
     * rank's own values when it is rank 0, else scratch's unused slot. */
    float *restrict acc = me == 0 ? own : scratch + (size_t)me * mine;
    if (me != 0)
        memcpy(acc, scratch, mine * sizeof *acc);
    for (int q = 1; q < size; q++) {
        const float *restrict src = q == me ? own : scratch + (size_t)q * mine;
        for (size_t i = 0; i < mine; i++)
            acc[i] += src[i];
    }
    if (me != 0)
        memcpy(own, acc, mine * sizeof *own);
    for (int q = 0; q < size; q++) {
        if (q == me)
            continue;
        size_t lo, hi;
        shard_of(&lo, &hi, n, size, q);
        p->send[q] = own;
        p->send_bytes[q] = mine * sizeof(float);
        p->recv[q] = buf + lo;
        p->recv_bytes[q] = (hi - lo) * sizeof(float);
    }
    return exchange(d, p, what);
}

int pt__comm_allreduce_f32(pt_dist *d, float *buf, size_t n, const char *what)
{
    int st = check_alive(d, what);
    if (st || d->size == 1 || n == 0)
        return st;
    const size_t per_bucket = d->opts.bucket_bytes / sizeof(float);
    /* scratch: every rank's copy of this rank's shard of a bucket */
    const size_t need = ((per_bucket + (size_t)d->size - 1) / (size_t)d->size + 1) * (size_t)d->size;
    if (d->scratch_n < need) {
        float *s = pt__malloc_array(need, sizeof *s);
        if (!s)
            return PT_ENOMEM;
        free(d->scratch);
        d->scratch = s;
        d->scratch_n = need;
    }
    double t0 = pt__now();
    peer_io p;
    if ((st = peer_io_init(&p, d->size)))
        return st;
    for (size_t off = 0; off < n && !st; off += per_bucket)
        st = allreduce_bucket_f32(d, buf + off, n - off < per_bucket ? n - off : per_bucket, d->scratch, &p, what);
    peer_io_free(&p);
    return finish(d, t0, st);
}

int pt__comm_allreduce_f64(pt_dist *d, double *buf, size_t n, const char *what)
{
    return allreduce_small_f64(d, buf, n, FOLD_SUM, what);
}

int pt__comm_agree_sum(int *first_failed, pt_dist *d, int status, double *vals, size_t n, const char *what)
{
    if (first_failed)
        *first_failed = -1;
    /* keep this rank's own message: the exchange must not overwrite it */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", pt_last_error());
    const size_t rec = 1 + n, size = (size_t)d->size;
    size_t total;
    if (!pt__mul_size(rec, size, &total))
        return pt__err(PT_ENOMEM, "%s: %zu values x %d ranks overflow", what, n, d->size);
    double stack[4 * PEERS_STACK], *all = total <= PT_COUNT_OF_STACK(stack) ? stack
                                                                             : pt__malloc_array(total, sizeof *all);
    if (!all)
        return PT_ENOMEM;
    /* a status is a small negative integer: exact in a double */
    all[(size_t)d->rank * rec] = (double)status;
    if (n)
        memcpy(all + (size_t)d->rank * rec + 1, vals, n * sizeof *vals);
    int st = pt__comm_allgather(d, all + (size_t)d->rank * rec, rec * sizeof *all, all, what);
    int bad = -1, bad_status = 0;
    for (int q = 0; q < d->size && !st; q++)
        if (all[(size_t)q * rec] != 0 && bad < 0) {
            bad = q;
            bad_status = (int)all[(size_t)q * rec];
        }
    for (size_t i = 0; i < n && !st; i++) {
        double acc = all[1 + i];
        for (int q = 1; q < d->size; q++)
            acc += all[(size_t)q * rec + 1 + i];
        vals[i] = acc;
    }
    if (all != stack)
        free(all);
    if (st)
        return st;
    if (first_failed)
        *first_failed = bad;
    if (status != 0)
        return pt__err(status, "%s", msg);
    if (bad >= 0)
        return pt__err(PT_EPEER, "%s: rank %d failed (%s); its own message says why", what, bad,
                      pt_status_name(bad_status));
    return PT_OK;
}

int pt__comm_agree(int *first_failed, pt_dist *d, int status, const char *what)
{
    return pt__comm_agree_sum(first_failed, d, status, NULL, 0, what);
}

/* ---- the public collectives ------------------------------------------------ */

int pt_dist_allreduce_sum(pt_dist *d, double *values, size_t n)
{
    PT_CHECK_NULL(d);
    PT_CHECK_COUNT(n, PT_MAX_VALUES, "reduction");
    PT_CHECK_ARG(values || n == 0, values, "is NULL (n is %zu)", n);
    return pt__comm_allreduce_f64(d, values, n, "pt_dist_allreduce_sum");
}

int pt_dist_broadcast(pt_dist *d, void *buf, size_t bytes, int root)
{
    PT_CHECK_NULL(d);
    PT_CHECK_COUNT(bytes, PT_MAX_VALUES * sizeof(double), "broadcast");
    PT_CHECK_ARG(buf || bytes == 0, buf, "is NULL (bytes is %zu)", bytes);
    PT_CHECK_ARG(root >= 0 && root < d->size, root, "%d is not a rank of this job of %d", root, d->size);
    return pt__comm_bcast(d, buf, bytes, root, "pt_dist_broadcast");
}

int pt_dist_barrier(pt_dist *d)
{
    PT_CHECK_NULL(d);
    int st = check_alive(d, "pt_dist_barrier");
    if (st || d->size == 1)
        return st;
    size_t n = (size_t)d->size;
    char stack[PEERS_STACK], *all = n <= PEERS_STACK ? stack : pt__malloc(n);
    if (!all)
        return PT_ENOMEM;
    char one = 1;
    st = pt__comm_allgather(d, &one, 1, all, "pt_dist_barrier");
    if (all != stack)
        free(all);
    return st;
}

int pt_dist_agree(int *first_failed, pt_dist *d, int status)
{
    PT_CHECK_NULL(d);
    PT_CHECK_ARG(status <= 0, status, "%d is not 0 or a PT_E* status", status);
    return pt__comm_agree(first_failed, d, status, "pt_dist_agree");
}
