/* The backend of a library built without MPI: only jobs of size 1, which
 * never exchange anything (dist.c returns before calling the backend). */
#include "dist/dist_internal.h"

#include "core/core.h"

bool pt__backend_mpi_launched(void)
{
    return false;
}

int pt__backend_mpi_create(pt_backend **out, int *rank, int *size, void *mpi_comm)
{
    (void)out;
    (void)rank;
    (void)size;
    (void)mpi_comm;
    return pt__err(PT_EUNSUPPORTED, "pt_dist_create: this libposttrain was built without MPI");
}

void pt__backend_mpi_free(pt_backend *be, bool failed)
{
    (void)be;
    (void)failed;
}

int pt__backend_exchange(pt_dist *d, const void *const *send, const size_t *send_bytes, void *const *recv,
                        const size_t *recv_bytes, const char *what)
{
    (void)d;
    (void)send;
    (void)send_bytes;
    (void)recv;
    (void)recv_bytes;
    return pt__err(PT_EINTERNAL, "%s: a job of size 1 exchanged messages", what);
}
