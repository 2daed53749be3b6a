/* bench_gemm: BLIS sgemm through pt__sgemm at the shapes a training step and
 * decoding use, with 1 and N threads and the library's own thread policy. */
#include "bench_util.h"

#include "posttrain/posttrain.h"

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    if (nt < 1 || pt_set_num_threads(nt) != PT_OK) {
        fprintf(stderr, "usage: bench_gemm [THREADS]\n");
        return 2;
    }
    static const size_t shapes[][3] = {
        { 2048, 2048, 2048 }, { 1024, 1536, 576 }, { 1024, 576, 1536 }, { 1024, 576, 576 },
        { 256, 49152, 576 }, { 16, 1536, 576 }, { 8, 576, 1536 }, { 1, 576, 576 },
    };
    printf("matrix products: %s\n", pt_blas_info());
    printf("cpu: %s\n", pt_cpu_info());
    printf("%6s %6s %6s  %10s %10s %10s (GFLOP/s, median of 5)\n", "m", "n", "k", "1 thread",
           "threads", "policy");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        double g1 = bench_gemm_peak(1, m, n, k, 5);
        double gn = bench_gemm_peak(nt, m, n, k, 5);
        double gp = bench_gemm_peak(pt__gemm_threads(m, n, k), m, n, k, 5);
        printf("%6zu %6zu %6zu  %10.1f %10.1f %10.1f\n", m, n, k, g1, gn, gp);
    }
    printf("peak_rss_mb=%.1f\n", bench_peak_rss_mb());
    return 0;
}
