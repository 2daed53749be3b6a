/* The deadline of a collective (run by test_dist_timeout.sh under mpirun at
 * 2 and 3 ranks): the last rank arrives DELAY seconds late at a barrier
 * while the job's timeout is 1 s.  Every other rank must return PT_EPEER
 * within about a second, naming the late rank; the job is then failed
 * (every later call PT_EPEER at once, pt_dist_free without finalising).
 * Each rank prints one line "rank R: STATUS after S s: MESSAGE" for the
 * script to check, then exits 0 without MPI_Finalize (as a host whose job
 * failed does; mpirun then reports the job as failed). */
#include "posttrain/posttrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const double delay = argc > 1 ? atof(argv[1]) : 4.0;
    pt_dist_options o;
    pt_dist_options_init(&o);
    o.timeout_s = 1.0;
    pt_dist *d;
    if (pt_dist_create(&d, NULL, &o)) {
        fprintf(stderr, "pt_dist_create: %s\n", pt_last_error());
        return 1;
    }
    const int rank = pt_dist_rank(d), size = pt_dist_size(d);
    /* everyone present once */
    if (pt_dist_barrier(d)) {
        fprintf(stderr, "rank %d: first barrier: %s\n", rank, pt_last_error());
        return 1;
    }
    if (rank == size - 1)
        usleep((useconds_t)(delay * 1e6));
    double t0 = now();
    int st = pt_dist_barrier(d);
    double dt = now() - t0;
    printf("rank %d: %s after %.2f s: %s\n", rank, pt_status_name(st), dt, st ? pt_last_error() : "");
    /* the job is failed from now on: at once, with the first message */
    t0 = now();
    double v = 1;
    int st2 = pt_dist_allreduce_sum(d, &v, 1);
    printf("rank %d: then %s after %.2f s: %s\n", rank, pt_status_name(st2), now() - t0,
           st2 ? pt_last_error() : "");
    fflush(stdout);
    pt_dist_free(d);
    return 0;
}
