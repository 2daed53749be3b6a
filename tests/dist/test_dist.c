/* The communication layer and data-parallel SFT, run by every rank of an
 * mpirun job (tests/dist/meson.build runs it at 1, 2 and 3 ranks; 3 ranks
 * share 7 rows unevenly).  Each rank regenerates every rank's data from
 * seeds, so it can compute the exact expected result itself. */
#include "testutil.h"

#include "core/core.h"
#include "dist/dist_internal.h"
#include "train/dist_train.h"

#include <math.h>
#include <stdint.h>

#ifdef PT_HAVE_MPI
#include <mpi.h>
#endif

static pt_dist *g_d;
static int g_rank, g_size;

/* ---- the job -------------------------------------------------------------- */

START_TEST(test_shard)
{
    for (int64_t n = g_size; n < g_size + 9; n++) {
        int64_t b, c;
        ck_assert_ok(pt_dist_shard(&b, &c, g_d, n));
        /* contiguous in rank order, sizes differing by at most one, the
         * first n % size ranks taking one more */
        int64_t expect_b = 0;
        for (int r = 0; r < g_rank; r++)
            expect_b += n / g_size + (r < n % g_size);
        ck_assert_int_eq(b, expect_b);
        ck_assert_int_eq(c, n / g_size + (g_rank < n % g_size));
        double total = (double)c;
        ck_assert_ok(pt_dist_allreduce_sum(g_d, &total, 1));
        ck_assert(total == (double)n);
    }
    int64_t b, c;
    char want[64];
    snprintf(want, sizeof want, "%d items cannot be shared by %d ranks", g_size - 1, g_size);
    ck_assert_status(pt_dist_shard(&b, &c, g_d, g_size - 1), PT_EINVAL, want);
    ck_assert_int_eq(pt_dist_rank(g_d), g_rank);
    ck_assert_int_eq(pt_dist_size(g_d), g_size);
    const char *be = getenv("PT_TEST_DIST_BACKEND");
    ck_assert_int_eq(pt_dist_get_backend(g_d), be && !strcmp(be, "single") ? PT_DIST_SINGLE
                                               : pt_dist_has_mpi() ? PT_DIST_MPI : PT_DIST_SINGLE);
    if (!pt_dist_has_mpi()) {
        /* a build without MPI started as one of several ranks refuses auto */
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        pt_dist *x = NULL;
        ck_assert_status(pt_dist_create(&x, NULL, NULL), PT_EUNSUPPORTED, "one of 2 ranks");
        pt_dist_options o;
        pt_dist_options_init(&o);
        o.backend = PT_DIST_SINGLE;
        ck_assert_ok(pt_dist_create(&x, NULL, &o));
        pt_dist_free(x);
        unsetenv("OMPI_COMM_WORLD_SIZE");
    }
}
END_TEST

/* Rank r's values: wide exponents, so that the order of a sum shows. */
static void rank_values(float *v, size_t n, int r)
{
    pt_rng rng;
    pt__rng_seed(&rng, 1000 + (uint64_t)r);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(pt__rng_normal(&rng) * ldexp(1.0, (int)pt__rng_below(&rng, 40) - 20));
}

START_TEST(test_allreduce_rank_order)
{
    const size_t n = 100003;
    float *mine = malloc(n * sizeof *mine), *other = malloc(n * sizeof *other);
    float *fold = malloc(n * sizeof *fold), *rev = malloc(n * sizeof *rev);
    ck_assert(mine && other && fold && rev);
    /* the serial left fold (r0 + r1) + r2 ... and the reverse order */
    rank_values(fold, n, 0);
    for (int r = 1; r < g_size; r++) {
        rank_values(other, n, r);
        for (size_t i = 0; i < n; i++)
            fold[i] += other[i];
    }
    rank_values(rev, n, g_size - 1);
    for (int r = g_size - 2; r >= 0; r--) {
        rank_values(other, n, r);
        for (size_t i = 0; i < n; i++)
            rev[i] += other[i];
    }
    if (g_size >= 3)
        ck_assert_msg(memcmp(fold, rev, n * sizeof *fold) != 0, "the order of the sum is not visible in the data");
    const size_t buckets[] = { 4096, 65536, (size_t)4 << 20 };
    const size_t saved = g_d->opts.bucket_bytes;
    for (size_t k = 0; k < sizeof buckets / sizeof buckets[0]; k++) {
        g_d->opts.bucket_bytes = buckets[k];
        rank_values(mine, n, g_rank);
        ck_assert_ok(pt__comm_allreduce_f32(g_d, mine, n, "test all-reduce"));
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (memcmp(&mine[i], &fold[i], sizeof *mine))
                bad = i;
        ck_assert_msg(bad == n, "bucket %zu: element %zu is %a, the rank-order fold is %a", buckets[k], bad,
                      bad < n ? (double)mine[bad] : 0.0, bad < n ? (double)fold[bad] : 0.0);
    }
    g_d->opts.bucket_bytes = saved;
    free(mine);
    free(other);
    free(fold);
    free(rev);
}
END_TEST

START_TEST(test_small_collectives)
{
    /* sum, max, min of doubles; the sum in rank order */
    double v[3] = { 0.1 * (g_rank + 1), (double)g_rank, -(double)g_rank }, e = 0;
    for (int r = 0; r < g_size; r++)
        e += 0.1 * (r + 1);
    ck_assert_ok(pt_dist_allreduce_sum(g_d, v, 1));
    ck_assert(v[0] == e);
    ck_assert_ok(pt__comm_allreduce_max_f64(g_d, v + 1, 1, "max"));
    ck_assert(v[1] == g_size - 1);
    ck_assert_ok(pt__comm_allreduce_min_f64(g_d, v + 2, 1, "min"));
    ck_assert(v[2] == -(g_size - 1));
    /* broadcast from the last rank */
    char buf[32];
    snprintf(buf, sizeof buf, "from rank %d", g_rank);
    ck_assert_ok(pt_dist_broadcast(g_d, buf, sizeof buf, g_size - 1));
    char want[32];
    snprintf(want, sizeof want, "from rank %d", g_size - 1);
    ck_assert_str_eq(buf, want);
    ck_assert_status(pt_dist_broadcast(g_d, buf, sizeof buf, g_size), PT_EINVAL, "root");
    /* all-gather of different lengths: rank r gives r + 1 bytes of value r */
    size_t counts[8], displs[8], off = 0;
    for (int r = 0; r < g_size; r++) {
        counts[r] = (size_t)r + 1;
        displs[r] = off;
        off += counts[r];
    }
    unsigned char send[8], recv[64];
    memset(send, g_rank, sizeof send);
    ck_assert_ok(pt__comm_allgatherv(g_d, send, (size_t)g_rank + 1, recv, counts, displs, "gatherv"));
    for (int r = 0; r < g_size; r++)
        for (size_t i = 0; i < counts[r]; i++)
            ck_assert_int_eq(recv[displs[r] + i], r);
    ck_assert_ok(pt_dist_barrier(g_d));
}
END_TEST

START_TEST(test_agree)
{
    int first = 7;
    ck_assert_ok(pt_dist_agree(&first, g_d, PT_OK));
    ck_assert_int_eq(first, -1);
    const int bad = g_size - 1;
    int mine = PT_OK;
    if (g_rank == bad)
        mine = pt__err(PT_ENOMEM, "rank %d ran out of memory in the test", g_rank);
    int st = pt_dist_agree(&first, g_d, mine);
    ck_assert_int_eq(first, bad);
    if (g_rank == bad) {
        ck_assert_int_eq(st, PT_ENOMEM);
        char want[64];
        snprintf(want, sizeof want, "rank %d ran out of memory in the test", bad);
        ck_assert_str_eq(pt_last_error(), want);
    } else {
        char want[64];
        snprintf(want, sizeof want, "rank %d failed (PT_ENOMEM)", bad);
        ck_assert_status(st, PT_EPEER, want);
    }
    ck_assert_status(pt_dist_agree(NULL, g_d, 1), PT_EINVAL, "status");
}
END_TEST

/* A host's own communicator: the job runs on a split of the world. */
START_TEST(test_host_communicator)
{
#ifdef PT_HAVE_MPI
    if (pt_dist_get_backend(g_d) != PT_DIST_MPI)
        return;
    MPI_Comm half;
    ck_assert_int_eq(MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half), MPI_SUCCESS);
    pt_dist *h;
    ck_assert_ok(pt_dist_create(&h, &half, NULL));
    const int hsize = (g_size + (g_rank % 2 == 0)) / 2;
    ck_assert_int_eq(pt_dist_size(h), hsize);
    ck_assert_int_eq(pt_dist_rank(h), g_rank / 2);
    double v = g_rank, want = 0;
    for (int r = g_rank % 2; r < g_size; r += 2)
        want += r;
    ck_assert_ok(pt_dist_allreduce_sum(h, &v, 1));
    ck_assert(v == want);
    pt_dist_free(h);
    MPI_Comm_free(&half);
#else
    pt_dist *h = NULL;
    int dummy = 0;
    ck_assert_status(pt_dist_create(&h, &dummy, NULL), PT_EUNSUPPORTED, "mpi_comm");
#endif
}
END_TEST

/* ---- data-parallel SFT ------------------------------------------------------ */

#define VOCAB 32
#define ROWS 7
#define SEQ 9

/* The global batch of step s: ROWS rows of SEQ ids, targets the next id
 * with about a third masked (-1), and per-token loss weights. */
typedef struct global_batch {
    int32_t ids[ROWS * SEQ], tg[ROWS * SEQ];
    float w[ROWS * SEQ];
} global_batch;

static void make_batch(global_batch *g, int s)
{
    pt_rng rng;
    pt__rng_seed(&rng, 77 + (uint64_t)s);
    for (int i = 0; i < ROWS * SEQ; i++)
        g->ids[i] = (int32_t)pt__rng_below(&rng, VOCAB);
    for (int r = 0; r < ROWS; r++)
        for (int t = 0; t < SEQ; t++) {
            int i = r * SEQ + t;
            g->tg[i] = t + 1 < SEQ && pt__rng_below(&rng, 3) ? g->ids[i + 1] : -1;
            g->w[i] = 0.5f + (float)pt__rng_below(&rng, 4) * 0.25f;
        }
}

/* Rows [lo, lo + n) of g as one micro-batch. */
static pt_batch rows_of(const global_batch *g, int lo, int n)
{
    pt_batch b;
    pt_batch_init(&b);
    b.batch = n;
    b.seq = SEQ;
    b.input_ids = g->ids + lo * SEQ;
    b.targets = g->tg + lo * SEQ;
    return b;
}

static pt_optimizer *make_opt_eps(pt_model *m, double eps)
{
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.eps = eps;
    o.lr = 1e-2;
    o.weight_decay = 0.01;
    o.max_grad_norm = 0.5;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &o));
    return opt;
}

static pt_optimizer *make_opt(pt_model *m)
{
    return make_opt_eps(m, 1e-8);
}

/* STEPS steps; with d, this rank's shard of each global batch, split into
 * n_micro micro-batches when it has rows enough.  *losses: each step's loss. */
#define STEPS 3
static pt_model *train(pt_dist *d, int n_micro, double *losses, double *tokens)
{
    pt_model *m = pt_test_tiny_llama(VOCAB, 5);
    pt_optimizer *opt = make_opt(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, ROWS, SEQ));
    ck_assert_ok(pt_optimizer_set_dist(opt, d));
    int64_t lo = 0, n = ROWS;
    if (d)
        ck_assert_ok(pt_dist_shard(&lo, &n, d, ROWS));
    for (int s = 0; s < STEPS; s++) {
        global_batch g;
        make_batch(&g, s);
        pt_batch mb[2];
        const float *w[2];
        int k = n_micro > 1 && n > 1 ? 2 : 1, first = (int)n / k;
        mb[0] = rows_of(&g, (int)lo, k == 2 ? first : (int)n);
        w[0] = g.w + lo * SEQ;
        if (k == 2) {
            mb[1] = rows_of(&g, (int)lo + first, (int)n - first);
            w[1] = g.w + (lo + first) * SEQ;
        }
        pt_sft_stats st;
        pt_sft_stats_init(&st);
        ck_assert_ok(pt_sft_step(&st, opt, ctx, mb, w, k));
        ck_assert(!st.skipped);
        losses[s] = st.loss;
        tokens[s] = st.tokens;
        if (!d || pt_dist_size(d) == 1)
            ck_assert(st.comm_seconds == 0.0);
    }
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    return m;
}

/* How far two models' weights are apart: *norm_rel receives the worst
 * tensor's ||a - b|| / ||b|| (L2, the relative error of a tensor), and the
 * return value the worst tensor's max |a - b| / max |b| (the worst single
 * weight against the tensor's scale).  Element-wise ratios are meaningless
 * for weights near 0, whose last bits follow the rounding of tiny Adam
 * updates. */
static double max_rel_diff_norm(const pt_model *a, const pt_model *b, double *norm_rel)
{
    size_t n;
    n = pt_model_tensor_count(a);
    double worst = 0, worst_norm = 0;
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info ta, tb;
        pt_tensor_info_init(&ta);
        pt_tensor_info_init(&tb);
        ck_assert_ok(pt_model_tensor_info(&ta, a, i));
        ck_assert_ok(pt_model_tensor_info(&tb, b, i));
        double diff = 0, scale = 0, d2 = 0, b2 = 0;
        for (size_t j = 0; j < ta.numel; j++) {
            double e = (double)ta.data[j] - tb.data[j];
            diff = fmax(diff, fabs(e));
            scale = fmax(scale, fabs((double)tb.data[j]));
            d2 += e * e;
            b2 += (double)tb.data[j] * tb.data[j];
        }
        worst = fmax(worst, scale > 0 ? diff / scale : diff);
        worst_norm = fmax(worst_norm, b2 > 0 ? sqrt(d2 / b2) : sqrt(d2));
    }
    if (norm_rel)
        *norm_rel = worst_norm;
    return worst;
}

static double max_rel_diff(const pt_model *a, const pt_model *b)
{
    return max_rel_diff_norm(a, b, NULL);
}

/* FNV-1a over the bits of every weight. */
static uint64_t weights_hash(const pt_model *m)
{
    size_t n;
    n = pt_model_tensor_count(m);
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, i));
        for (size_t j = 0; j < t.numel; j++) {
            uint32_t u;
            memcpy(&u, &t.data[j], 4);
            x = (x ^ u) * 1099511628211ull;
        }
    }
    return x;
}

static bool same_bits(const pt_model *a, const pt_model *b)
{
    size_t n;
    n = pt_model_tensor_count(a);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info ta, tb;
        pt_tensor_info_init(&ta);
        pt_tensor_info_init(&tb);
        ck_assert_ok(pt_model_tensor_info(&ta, a, i));
        ck_assert_ok(pt_model_tensor_info(&tb, b, i));
        if (memcmp(ta.data, tb.data, ta.numel * sizeof(float)))
            return false;
    }
    return true;
}

START_TEST(test_sft_equals_one_process)
{
    double l1[STEPS], t1[STEPS], ln[STEPS], tn[STEPS];
    pt_model *one = train(NULL, 1, l1, t1);
    for (int n_micro = 1; n_micro <= 2; n_micro++) {
        pt_model *dp = train(g_d, n_micro, ln, tn);
        double norm_rel, rel = max_rel_diff_norm(dp, one, &norm_rel);
        if (g_rank == 0)
            printf("%d ranks, %d micro-batches per rank: weights vs one process: rel %.3g (worst weight %.3g of "
                   "its tensor's scale)\n", g_size, n_micro, norm_rel, rel);
        ck_assert_msg(norm_rel <= 1e-6, "%d ranks, %d micro-batches: weights differ from one process by rel %g",
                      g_size, n_micro, norm_rel);
        ck_assert_msg(rel <= 1e-5, "%d ranks, %d micro-batches: a weight differs by %g of its tensor's scale",
                      g_size, n_micro, rel);
        for (int s = 0; s < STEPS; s++) {
            ck_assert_msg(tn[s] == t1[s], "step %d: global tokens %g, one process %g", s, tn[s], t1[s]);
            ck_assert_msg(fabs(ln[s] - l1[s]) <= 1e-6 * fabs(l1[s]), "step %d: loss %.9g vs %.9g", s, ln[s], l1[s]);
        }
        /* the same on every rank, bit for bit */
        int bad = 0;
        ck_assert_ok(pt_dist_agree(&bad, g_d, PT_OK));
        pt_model_free(dp);
    }
    /* the training moved the weights (the comparison is not vacuous) */
    pt_model *start = pt_test_tiny_llama(VOCAB, 5);
    ck_assert(max_rel_diff(one, start) > 1e-3);
    pt_model_free(start);
    pt_model_free(one);
}
END_TEST

START_TEST(test_sft_bit_identical_rerun)
{
    double l[STEPS], t[STEPS];
    pt_model *a = train(g_d, 2, l, t), *b = train(g_d, 2, l, t);
    ck_assert_msg(same_bits(a, b), "two runs on %d ranks differ", g_size);
    /* every rank holds the same weights: hash them all */
    double h[1];
    pt_tensor_info ti;
    pt_tensor_info_init(&ti);
    ck_assert_ok(pt_model_tensor_info(&ti, a, 0));
    uint64_t x = 1469598103934665603ull;
    for (size_t j = 0; j < ti.numel; j++) {
        uint32_t u;
        memcpy(&u, &ti.data[j], 4);
        x = (x ^ u) * 1099511628211ull;
    }
    h[0] = (double)(x >> 12);
    double mx = h[0], mn = h[0];
    ck_assert_ok(pt__comm_allreduce_max_f64(g_d, &mx, 1, "max"));
    ck_assert_ok(pt__comm_allreduce_min_f64(g_d, &mn, 1, "min"));
    ck_assert(mx == mn);
    pt_model_free(a);
    pt_model_free(b);
}
END_TEST

/* An error on one rank fails the step everywhere and changes nothing; the
 * next step works. */
START_TEST(test_sft_error_on_one_rank)
{
    pt_model *m = pt_test_tiny_llama(VOCAB, 5);
    pt_optimizer *opt = make_opt(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, ROWS, SEQ));
    ck_assert_ok(pt_optimizer_set_dist(opt, g_d));
    int64_t lo, n;
    ck_assert_ok(pt_dist_shard(&lo, &n, g_d, ROWS));
    global_batch g;
    make_batch(&g, 0);
    pt_batch b = rows_of(&g, (int)lo, (int)n);
    const float *w = g.w + lo * SEQ;
    const int bad = g_size - 1;
    uint64_t h0 = weights_hash(m);
    pt_batch broken = b;
    if (g_rank == bad)
        broken.batch = 0;
    int st = pt_sft_step(NULL, opt, ctx, &broken, &w, 1);
    if (g_rank == bad) {
        ck_assert_status(st, PT_EINVAL, "micro-batch 0 is not an initialised pt_batch");
    } else {
        char want[64];
        snprintf(want, sizeof want, "pt_sft_step: rank %d failed (PT_EINVAL)", bad);
        ck_assert_status(st, PT_EPEER, want);
    }
    ck_assert(weights_hash(m) == h0);
    /* an overflowing activation on one rank (its copy of one embedding
     * row): a non-finite loss there skips the step on every rank */
    pt_tensor_info emb;
    pt_tensor_info_init(&emb);
    ck_assert_ok(pt_model_find_tensor_info(&emb, m, "model.embed_tokens.weight"));
    const int64_t hidden = emb.shape[1];
    float *row = emb.data + (size_t)b.input_ids[0] * (size_t)hidden, saved[64];
    ck_assert(hidden <= 64);
    memcpy(saved, row, (size_t)hidden * sizeof *row);
    if (g_rank == bad)
        for (int64_t i = 0; i < hidden; i++)
            row[i] = 3e38f;
    pt_sft_stats s;
    pt_sft_stats_init(&s);
    ck_assert_ok(pt_sft_step(&s, opt, ctx, &b, &w, 1));
    ck_assert(s.skipped);
    ck_assert_int_eq(s.skip_reason, PT_SKIP_NONFINITE_LOSS);
    ck_assert_int_eq(s.step, 0);
    memcpy(row, saved, (size_t)hidden * sizeof *row);
    ck_assert(weights_hash(m) == h0);
    /* and then a good step everywhere */
    pt_sft_stats_init(&s);
    ck_assert_ok(pt_sft_step(&s, opt, ctx, &b, &w, 1));
    ck_assert(!s.skipped);
    ck_assert_int_eq(s.step, 1);
    ck_assert(weights_hash(m) != h0);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* pt_optimizer_step on a job sums the ranks' gradients: a host's own
 * backward (normalised by the global batch) then the step gives the
 * weights of pt_sft_step, the same on every rank. */
START_TEST(test_optimizer_step_sums)
{
    double l[STEPS], t[STEPS];
    pt_model *ref = train(g_d, 1, l, t);
    pt_model *m = pt_test_tiny_llama(VOCAB, 5);
    pt_optimizer *opt = make_opt(m);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, ROWS, SEQ));
    ck_assert_ok(pt_optimizer_set_dist(opt, g_d));
    int64_t lo, n;
    ck_assert_ok(pt_dist_shard(&lo, &n, g_d, ROWS));
    float lp[ROWS * SEQ], dlp[ROWS * SEQ];
    for (int s = 0; s < STEPS; s++) {
        global_batch g;
        make_batch(&g, s);
        double total = 0;
        for (int i = 0; i < ROWS * SEQ; i++)
            total += g.tg[i] >= 0 ? g.w[i] : 0.0;
        pt_batch b = rows_of(&g, (int)lo, (int)n);
        ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
        for (int i = 0; i < (int)n * SEQ; i++) {
            int gi = (int)lo * SEQ + i;
            dlp[i] = g.tg[gi] >= 0 ? (float)(-(double)g.w[gi] / total) : 0.0f;
        }
        ck_assert_ok(pt_model_backward(ctx, dlp));
        pt_step_stats st;
        pt_step_stats_init(&st);
        ck_assert_ok(pt_optimizer_step(&st, opt));
        ck_assert(!st.skipped);
    }
    double norm_rel, rel = max_rel_diff_norm(m, ref, &norm_rel);
    ck_assert_msg(norm_rel <= 1e-6 && rel <= 1e-5, "pt_optimizer_step on %d ranks: rel %g (worst %g)", g_size,
                  norm_rel, rel);
    double h = (double)(weights_hash(m) >> 12), mx = h, mn = h;
    ck_assert_ok(pt__comm_allreduce_max_f64(g_d, &mx, 1, "max"));
    ck_assert_ok(pt__comm_allreduce_min_f64(g_d, &mn, 1, "min"));
    ck_assert(mx == mn);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_model_free(m);
    pt_model_free(ref);
}
END_TEST

/* ---- silent data corruption ---------------------------------------------------- */

START_TEST(test_check_replicas)
{
    double l[STEPS], t[STEPS];
    pt_model *m = train(g_d, 1, l, t);
    pt_optimizer *opt = make_opt(m);
    int bad = 5;
    uint64_t h = 0;
    ck_assert_ok(pt_dist_check_replicas(&bad, &h, g_d, opt));
    ck_assert_int_eq(bad, -1);
    ck_assert(h != 0);
    /* one bit of one weight of the last rank */
    pt_tensor_info ti;
    pt_tensor_info_init(&ti);
    ck_assert_ok(pt_model_tensor_info(&ti, m, 3));
    uint32_t u;
    memcpy(&u, &ti.data[5], 4);
    if (g_rank == g_size - 1) {
        u ^= 1u << 3;
        memcpy(&ti.data[5], &u, 4);
    }
    int st = pt_dist_check_replicas(&bad, &h, g_d, opt);
    if (g_size == 1) {
        ck_assert_ok(st);
    } else if (g_size == 2) {
        ck_assert_status(st, PT_ECHECKSUM, "no majority agrees: ranks 0 (");
        ck_assert_int_eq(bad, -1); /* no rank named: either may be the corrupted one */
    } else {
        char want[64];
        snprintf(want, sizeof want, "rank(s) %d (", g_size - 1);
        ck_assert_status(st, PT_ECHECKSUM, want);
        ck_assert_status(st, PT_ECHECKSUM, "silent data corruption");
        ck_assert_int_eq(bad, g_size - 1);
    }
    if (g_rank == g_size - 1) {
        u ^= 1u << 3;
        memcpy(&ti.data[5], &u, 4);
    }
    ck_assert_ok(pt_dist_check_replicas(&bad, NULL, g_d, opt));
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST


/* ---- data-parallel GRPO -------------------------------------------------------- */

#define GROUPS 5
#define GSIZE 3
#define GMAXLEN 8

/* Sample j of group g at round `round`: 2-3 prompt ids, 2-5 completion ids
 * (the last a tool token out of the loss now and then), old and reference
 * logprobs, two rewards (the second declined now and then; group 1 all
 * equal: a zero-std group), truncation. */
typedef struct gsample {
    int32_t ids[GMAXLEN];
    uint8_t mask[GMAXLEN];
    float old[GMAXLEN], ref[GMAXLEN], samp[GMAXLEN], adv[GMAXLEN], rewards[2], seg[GMAXLEN];
    int n_ids, prompt_len, n_seg;
    bool truncated;
} gsample;

static void make_sample(gsample *x, int round, int g, int j)
{
    pt_rng rng;
    pt__rng_seed(&rng, 5000 + (uint64_t)round * 1000 + (uint64_t)g * 10 + (uint64_t)j);
    x->prompt_len = 2 + (int)pt__rng_below(&rng, 2);
    int nc = 2 + (int)pt__rng_below(&rng, 4);
    x->n_ids = x->prompt_len + nc;
    for (int t = 0; t < x->n_ids; t++)
        x->ids[t] = (int32_t)pt__rng_below(&rng, VOCAB);
    for (int t = 0; t < nc; t++) {
        x->mask[t] = t == 0 || pt__rng_below(&rng, 5) != 0;
        x->old[t] = -0.5f - (float)pt__rng_uniform(&rng) * 3.0f;
        x->ref[t] = x->old[t] - 0.2f + (float)pt__rng_uniform(&rng) * 0.4f;
    }
    x->rewards[0] = g == 1 ? 0.5f : (float)pt__rng_below(&rng, 3) * 0.5f;
    x->rewards[1] = pt__rng_below(&rng, 4) == 0 ? NAN : (float)pt__rng_uniform(&rng);
    x->truncated = pt__rng_below(&rng, 4) == 0;
    /* the sampler's values, per-token advantages, a reward per segment */
    x->n_seg = 0;
    for (int t = 0; t < nc; t++) {
        x->samp[t] = x->old[t] - 0.1f + (float)pt__rng_uniform(&rng) * 0.2f;
        x->adv[t] = (float)pt__rng_uniform(&rng) * 2.0f - 1.0f;
        if (x->mask[t] && (t == 0 || !x->mask[t - 1])) {
            x->seg[x->n_seg] = g == 1 ? 1.0f : pt__rng_below(&rng, 6) == 0 ? NAN : (float)pt__rng_below(&rng, 3);
            x->n_seg++;
        }
    }
}

/* Where the samples of a case take their advantages from. */
enum { ADV_REWARDS, ADV_SEGMENTS, ADV_TOKENS };

/* The buffer of groups [g0, g0 + ng) of a round, with group ids numbered
 * from `id_base` (ranks number their own groups from 0: ids are local). */
static pt_rollout_buffer *make_buffer_as(int round, int g0, int ng, int64_t id_base, bool with_old, bool with_ref,
                                         bool with_samp, int adv);

static pt_rollout_buffer *make_buffer(int round, int g0, int ng, int64_t id_base, bool with_old, bool with_ref)
{
    return make_buffer_as(round, g0, ng, id_base, with_old, with_ref, false, ADV_REWARDS);
}

/* make_buffer with the sampler's log-probabilities, and advantages from
 * rewards, segment rewards or given per token */
static pt_rollout_buffer *make_buffer_as(int round, int g0, int ng, int64_t id_base, bool with_old, bool with_ref,
                                         bool with_samp, int adv)
{
    pt_rollout_buffer_options bo;
    pt_rollout_buffer_options_init(&bo);
    bo.n_reward_funcs = 2;
    const double weights[2] = { 1.0, 0.5 };
    bo.reward_weights = weights;
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, &bo));
    for (int g = g0; g < g0 + ng; g++)
        for (int j = 0; j < GSIZE; j++) {
            gsample x;
            make_sample(&x, round, g, j);
            pt_rollout_sample s;
            pt_rollout_sample_init(&s);
            s.ids = x.ids;
            s.n_ids = x.n_ids;
            s.prompt_len = x.prompt_len;
            s.loss_mask = x.mask;
            s.old_logprobs = with_old ? x.old : NULL;
            s.ref_logprobs = with_ref ? x.ref : NULL;
            s.group = id_base + (g - g0);
            s.rewards = x.rewards;
            s.truncated = x.truncated;
            s.sampling_logprobs = with_samp ? x.samp : NULL;
            if (adv == ADV_SEGMENTS) {
                s.segment_rewards = x.seg;
                s.n_segments = x.n_seg;
            } else if (adv == ADV_TOKENS) {
                s.advantages = x.adv;
            }
            ck_assert_ok(pt_rollout_buffer_add(buf, &s));
        }
    return buf;
}

typedef struct grpo_case {
    const char *name;
    int scale, loss, level;
    double beta;
    bool drop_zero_std, mask_truncated, with_old, lora;
    int micro_batch, iterations;
    /* the sampler correction and TRL 1.x's loss family; where the
     * advantages come from */
    bool with_samp;
    int is_mode, adv;
    double temperature, delta, quantile;
    double entropy_coef; /* TRL's entropy bonus */
} grpo_case;

static const grpo_case k_grpo_cases[] = {
    { "group/dapo", PT_GRPO_SCALE_GROUP, PT_GRPO_LOSS_DAPO, PT_GRPO_IS_TOKEN, 0, false, false, true, false, 0, 1,
      false, 0, ADV_REWARDS, 1, 0, 1, 0 },
    { "batch/grpo/kl", PT_GRPO_SCALE_BATCH, PT_GRPO_LOSS_GRPO, PT_GRPO_IS_TOKEN, 0.05, false, false, true, false, 2, 1,
      false, 0, ADV_REWARDS, 1, 0, 1, 0 },
    { "none/bnpo/drop", PT_GRPO_SCALE_NONE, PT_GRPO_LOSS_BNPO, PT_GRPO_IS_TOKEN, 0, true, true, false, false, 0, 2,
      false, 0, ADV_REWARDS, 1, 0, 1, 0 },
    { "rloo/dr_grpo/gspo", PT_GRPO_SCALE_RLOO, PT_GRPO_LOSS_DR_GRPO, PT_GRPO_IS_SEQUENCE, 0, false, false, true, false,
      1, 1, false, 0, ADV_REWARDS, 1, 0, 1, 0 },
    { "lora/base-ref", PT_GRPO_SCALE_GROUP, PT_GRPO_LOSS_DAPO, PT_GRPO_IS_TOKEN, 0.1, false, true, false, true, 0, 2,
      false, 0, ADV_REWARDS, 1, 0, 1, 0 },
    { "segments/seq-mask/T0.8/q0.6", PT_GRPO_SCALE_GROUP, PT_GRPO_LOSS_DAPO, PT_GRPO_IS_TOKEN, 0, false, false, true,
      false, 2, 1, true, PT_GRPO_IS_SEQUENCE_MASK, ADV_SEGMENTS, 0.8, 0, 0.6, 0 },
    { "segments-batch/drop/recorded-old", PT_GRPO_SCALE_BATCH, PT_GRPO_LOSS_GRPO, PT_GRPO_IS_TOKEN, 0, true, false,
      false, false, 0, 2, true, PT_GRPO_IS_TOKEN_TRUNCATE, ADV_SEGMENTS, 1.3, 1.5, 1, 0 },
    { "tokens/cispo/q0.3", PT_GRPO_SCALE_GROUP, PT_GRPO_LOSS_CISPO, PT_GRPO_IS_TOKEN, 0, false, false, true, false, 1,
      1, true, PT_GRPO_IS_TOKEN_MASK, ADV_TOKENS, 1, 0, 0.3, 0 },
    { "vespo/token-mask/q0.6/entropy-bonus", PT_GRPO_SCALE_BATCH, PT_GRPO_LOSS_VESPO, PT_GRPO_IS_TOKEN, 0, false,
      true, true, false, 1, 2, true, PT_GRPO_IS_TOKEN_MASK, ADV_REWARDS, 1, 0, 0.6, 0.05 },
    { "grpo/gspo/entropy-bonus", PT_GRPO_SCALE_GROUP, PT_GRPO_LOSS_GRPO, PT_GRPO_IS_SEQUENCE, 0, false, true, true,
      false, 2, 1, false, 0, ADV_REWARDS, 1, 0, 1, 0.1 },
};

/* Two rounds of a case; with d, this rank's share of the groups. */
static pt_model *grpo_train(pt_dist *d, const grpo_case *c, pt_grpo_stats *last)
{
    pt_model *m = pt_test_tiny_llama(VOCAB, 9);
    if (c->lora) {
        pt_lora_options lo;
        pt_lora_options_init(&lo);
        lo.rank = 2;
        lo.seed = 3;
        ck_assert_ok(pt_model_add_lora(m, &lo));
    }
    /* With LoRA, B starts at 0, so the first gradients of A are tiny and
     * AdamW's update of them is in its eps regime, where a gradient's
     * rounding of 1e-7 (its summation order) becomes 1e-6 in the weights:
     * one process with another micro-batching moves by as much.  eps 1e-6
     * keeps this case out of that regime; the other cases use 1e-8. */
    pt_optimizer *opt = make_opt_eps(m, c->lora ? 1e-6 : 1e-8);
    ck_assert_ok(pt_optimizer_set_dist(opt, d));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, GROUPS * GSIZE, GMAXLEN));
    int64_t g0 = 0, ng = GROUPS;
    if (d)
        ck_assert_ok(pt_dist_shard(&g0, &ng, d, GROUPS));
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.scale_rewards = c->scale;
    o.loss_type = c->loss;
    o.importance_sampling_level = c->level;
    o.beta = c->beta;
    o.epsilon_high = 0.28;
    o.drop_zero_std_groups = c->drop_zero_std;
    o.mask_truncated_completions = c->mask_truncated;
    o.max_completion_length = 6;
    o.micro_batch = c->micro_batch;
    o.entropy_coef = c->entropy_coef;
    if (c->with_samp) {
        o.temperature = c->temperature;
        o.importance_sampling_correction = c->is_mode;
        bool seq = c->is_mode == PT_GRPO_IS_SEQUENCE_MASK || c->is_mode == PT_GRPO_IS_SEQUENCE_TRUNCATE;
        o.importance_sampling_clip_min = seq ? 0.8 : 0.95;
        o.importance_sampling_clip_max = seq ? 1.25 : 1.05;
        o.delta = c->delta;
        o.top_entropy_quantile = c->quantile;
        if (c->loss == PT_GRPO_LOSS_CISPO)
            o.epsilon_high = 1.1;
    }
    for (int round = 0; round < 2; round++) {
        pt_rollout_buffer *buf = make_buffer_as(round, (int)g0, (int)ng, d ? 0 : 100, c->with_old,
                                                c->beta > 0 && !c->lora, c->with_samp, c->adv);
        for (int it = 0; it < c->iterations; it++) {
            pt_grpo_stats_init(last);
            ck_assert_ok(pt_grpo_step(last, opt, ctx, buf, &o));
            ck_assert(!last->skipped);
        }
        pt_rollout_buffer_free(buf);
    }
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    return m;
}

START_TEST(test_grpo_equals_one_process)
{
    for (size_t k = 0; k < sizeof k_grpo_cases / sizeof k_grpo_cases[0]; k++) {
        const grpo_case *c = &k_grpo_cases[k];
        pt_grpo_stats s1, sn, again;
        pt_model *one = grpo_train(NULL, c, &s1);
        pt_model *dp = grpo_train(g_d, c, &sn);
        pt_model *fresh = pt_test_tiny_llama(VOCAB, 9);
        ck_assert_msg(weights_hash(one) != weights_hash(fresh), "%s: the weights did not move", c->name);
        pt_model_free(fresh);
        double norm_rel, rel = max_rel_diff_norm(dp, one, &norm_rel);
        if (g_rank == 0)
            printf("grpo %s, %d ranks: weights vs one process: rel %.3g (worst weight %.3g of its tensor's "
                   "scale)\n", c->name, g_size, norm_rel, rel);
        ck_assert_msg(norm_rel <= 1e-6, "%s: %d ranks differ from one process by rel %g", c->name, g_size, norm_rel);
        ck_assert_msg(rel <= 1e-5, "%s: %d ranks: a weight differs by %g of its tensor's scale", c->name, g_size, rel);
        /* the statistics of the whole global batch: the reward side is
         * computed from the same values in the same order, bit for bit */
        ck_assert(sn.reward == s1.reward && sn.reward_std == s1.reward_std);
        ck_assert(sn.reward_func_mean[1] == s1.reward_func_mean[1]);
        ck_assert(sn.frac_reward_zero_std == s1.frac_reward_zero_std && sn.groups == s1.groups);
        ck_assert(sn.frac_zero_std_groups == s1.frac_zero_std_groups);
        ck_assert_int_eq(sn.groups, c->adv == ADV_TOKENS ? 0 : GROUPS);
        ck_assert(sn.segments == s1.segments && (sn.segments > 0) == (c->adv == ADV_SEGMENTS));
        ck_assert(sn.groups_dropped == s1.groups_dropped && sn.samples_unscored == s1.samples_unscored);
        ck_assert(sn.completion_mean_length == s1.completion_mean_length);
        ck_assert(sn.clipped_ratio == s1.clipped_ratio);
        ck_assert(sn.tokens == s1.tokens);
        const double pairs[][2] = { { sn.loss, s1.loss }, { sn.kl, s1.kl }, { sn.entropy, s1.entropy },
                                    { sn.clip_ratio_region, s1.clip_ratio_region }, { sn.grad_norm, s1.grad_norm },
                                    { sn.cispo_clip_ratio, s1.cispo_clip_ratio },
                                    { sn.entropy_kept_fraction, s1.entropy_kept_fraction },
                                    { c->loss == PT_GRPO_LOSS_VESPO ? sn.vespo_phi_seq_mean : 0,
                                      c->loss == PT_GRPO_LOSS_VESPO ? s1.vespo_phi_seq_mean : 0 },
                                    { sn.clip_ratio_high, s1.clip_ratio_high } };
        if (c->with_samp) {
            /* the sampler's side: over every rank's tokens, the extremes too */
            const double sp[][2] = { { sn.sampling_logp_difference_mean, s1.sampling_logp_difference_mean },
                                     { sn.sampling_logp_difference_max, s1.sampling_logp_difference_max },
                                     { sn.importance_sampling_ratio_min, s1.importance_sampling_ratio_min },
                                     { sn.importance_sampling_ratio_mean, s1.importance_sampling_ratio_mean },
                                     { sn.importance_sampling_ratio_max, s1.importance_sampling_ratio_max },
                                     { sn.importance_sampling_corrected_fraction,
                                       s1.importance_sampling_corrected_fraction } };
            for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
                ck_assert_msg(fabs(sp[i][0] - sp[i][1]) <= 1e-5 * fabs(sp[i][1]) + 1e-12,
                              "%s: sampler statistic %zu: %.9g vs one process %.9g", c->name, i, sp[i][0], sp[i][1]);
            ck_assert(s1.sampling_logp_difference_mean > 0 && s1.importance_sampling_ratio_mean > 0);
            if (c->quantile < 1)
                ck_assert_msg(fabs(sn.entropy_threshold - s1.entropy_threshold) <= 1e-5 * s1.entropy_threshold,
                              "%s: entropy threshold %.9g vs one process %.9g", c->name, sn.entropy_threshold,
                              s1.entropy_threshold);
        }
        /* these follow the weights of the last step, already apart by the
         * rounding above */
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
            ck_assert_msg(fabs(pairs[i][0] - pairs[i][1]) <= 1e-5 * fabs(pairs[i][1]) + 1e-12,
                          "%s: statistic %zu: %.9g vs one process %.9g", c->name, i, pairs[i][0], pairs[i][1]);
        /* bit-identical on a rerun, and the same weights on every rank */
        pt_model *dp2 = grpo_train(g_d, c, &again);
        ck_assert_msg(same_bits(dp, dp2), "%s: a rerun on %d ranks differs", c->name, g_size);
        double h = (double)(weights_hash(dp) >> 12), mx = h, mn = h;
        ck_assert_ok(pt__comm_allreduce_max_f64(g_d, &mx, 1, "max"));
        ck_assert_ok(pt__comm_allreduce_min_f64(g_d, &mn, 1, "min"));
        ck_assert(mx == mn);
        if (g_size > 1)
            ck_assert(sn.comm_seconds > 0);
        pt_model_free(dp2);
        pt_model_free(dp);
        pt_model_free(one);
    }
}
END_TEST

/* A bad sample on one rank fails the step on every rank, nothing applied;
 * a rank whose buffer has no reward at all takes part (the global batch
 * has rewards). */
START_TEST(test_grpo_error_on_one_rank)
{
    pt_model *m = pt_test_tiny_llama(VOCAB, 9);
    pt_optimizer *opt = make_opt(m);
    ck_assert_ok(pt_optimizer_set_dist(opt, g_d));
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, GROUPS * GSIZE, GMAXLEN));
    int64_t g0, ng;
    ck_assert_ok(pt_dist_shard(&g0, &ng, g_d, GROUPS));
    pt_grpo_options o;
    pt_grpo_options_init(&o);
    o.beta = 0.1; /* the last rank's buffer lacks reference logprobs: an error there */
    const int bad = g_size - 1;
    pt_rollout_buffer *buf = make_buffer(0, (int)g0, (int)ng, 0, true, g_rank != bad);
    uint64_t h0 = weights_hash(m);
    int st = pt_grpo_step(NULL, opt, ctx, buf, &o);
    if (g_rank == bad) {
        ck_assert_status(st, PT_EINVAL, "has no ref_logprobs");
    } else {
        char want[64];
        snprintf(want, sizeof want, "pt_grpo_step: rank %d failed (PT_EINVAL)", bad);
        ck_assert_status(st, PT_EPEER, want);
    }
    ck_assert(weights_hash(m) == h0);
    pt_rollout_buffer_free(buf);
    /* unscored samples on one rank only: counted, and the step runs; with
     * the zero-std groups dropped that rank has nothing to train on, and
     * still takes part in the entropy quantile's pass */
    o.beta = 0;
    o.drop_zero_std_groups = true;
    o.top_entropy_quantile = 0.5;
    buf = make_buffer(0, (int)g0, (int)ng, 0, true, false);
    if (g_rank == bad && g_size > 1)
        for (int i = 0; i < (int)ng * GSIZE; i++)
            for (int k = 0; k < 2; k++)
                ck_assert_ok(pt_rollout_buffer_set_reward(buf, i, k, NAN));
    pt_grpo_stats s;
    pt_grpo_stats_init(&s);
    ck_assert_ok(pt_grpo_step(&s, opt, ctx, buf, &o));
    ck_assert(!s.skipped);
    if (g_size > 1) {
        int64_t b2, n2;
        pt_dist_shard(&b2, &n2, g_d, GROUPS);
        double mine = g_rank == bad ? (double)n2 * GSIZE : 0;
        ck_assert_ok(pt_dist_allreduce_sum(g_d, &mine, 1));
        ck_assert_int_eq(s.samples_unscored, (int64_t)mine);
    }
    ck_assert(weights_hash(m) != h0);
    pt_rollout_buffer_free(buf);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("dist");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_shard);
    tcase_add_test(tc, test_allreduce_rank_order);
    tcase_add_test(tc, test_small_collectives);
    tcase_add_test(tc, test_agree);
    tcase_add_test(tc, test_host_communicator);
    tcase_add_test(tc, test_sft_equals_one_process);
    tcase_add_test(tc, test_sft_bit_identical_rerun);
    tcase_add_test(tc, test_sft_error_on_one_rank);
    tcase_add_test(tc, test_optimizer_step_sums);
    tcase_add_test(tc, test_check_replicas);
    tcase_add_test(tc, test_grpo_equals_one_process);
    tcase_add_test(tc, test_grpo_error_on_one_rank);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    pt_dist_options o;
    pt_dist_options_init(&o);
    o.timeout_s = 60;
    /* PT_TEST_DIST_BACKEND=single: the same tests as a job of one process
     * without MPI (tests/dist/meson.build: leak-checked under ASan) */
    const char *be = getenv("PT_TEST_DIST_BACKEND");
    if (be && pt_dist_backend_from_name(&o.backend, be)) {
        fprintf(stderr, "PT_TEST_DIST_BACKEND: %s\n", pt_last_error());
        return 1;
    }
    if (pt_dist_create(&g_d, NULL, &o)) {
        fprintf(stderr, "pt_dist_create: %s\n", pt_last_error());
        return 1;
    }
    g_rank = pt_dist_rank(g_d);
    g_size = pt_dist_size(g_d);
    pt_set_num_threads(1);
    int rc = pt_test_run(dist_suite());
    /* every rank exits with the job's verdict */
    double failed = rc != 0;
    if (pt_dist_allreduce_sum(g_d, &failed, 1))
        failed = 1;
    printf("rank %d of %d: %s\n", g_rank, g_size, failed ? "FAILED" : "passed");
    pt_dist_free(g_d);
    return failed ? 1 : 0;
}
