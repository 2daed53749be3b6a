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
}
END_TEST

/* Rank r's values: wide exponents, so that the order of a sum shows. */
static void rank_values(float *v, size_t n, int r)
{
    pt_rng rng;
    pt_rng_seed(&rng, 1000 + (uint64_t)r);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(pt_rng_normal(&rng) * ldexp(1.0, (int)pt_rng_below(&rng, 40) - 20));
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
        ck_assert_ok(pt_comm_allreduce_f32(g_d, mine, n, "test all-reduce"));
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
    ck_assert_ok(pt_comm_allreduce_max_f64(g_d, v + 1, 1, "max"));
    ck_assert(v[1] == g_size - 1);
    ck_assert_ok(pt_comm_allreduce_min_f64(g_d, v + 2, 1, "min"));
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
    ck_assert_ok(pt_comm_allgatherv(g_d, send, (size_t)g_rank + 1, recv, counts, displs, "gatherv"));
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
        mine = pt_err(PT_ENOMEM, "rank %d ran out of memory in the test", g_rank);
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
    pt_rng_seed(&rng, 77 + (uint64_t)s);
    for (int i = 0; i < ROWS * SEQ; i++)
        g->ids[i] = (int32_t)pt_rng_below(&rng, VOCAB);
    for (int r = 0; r < ROWS; r++)
        for (int t = 0; t < SEQ; t++) {
            int i = r * SEQ + t;
            g->tg[i] = t + 1 < SEQ && pt_rng_below(&rng, 3) ? g->ids[i + 1] : -1;
            g->w[i] = 0.5f + (float)pt_rng_below(&rng, 4) * 0.25f;
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

static pt_optimizer *make_opt(pt_model *m)
{
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    o.lr = 1e-2;
    o.weight_decay = 0.01;
    o.max_grad_norm = 0.5;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &o));
    return opt;
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

/* The worst tensor's max |a - b| / max |b|: the difference relative to
 * the tensor's scale (an element-wise ratio is meaningless for weights
 * near 0, whose last bits follow the rounding of tiny Adam updates). */
static double max_rel_diff(const pt_model *a, const pt_model *b)
{
    size_t n;
    ck_assert_ok(pt_model_num_tensors(&n, a));
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info ta, tb;
        pt_tensor_info_init(&ta);
        pt_tensor_info_init(&tb);
        ck_assert_ok(pt_model_tensor_info(&ta, a, i));
        ck_assert_ok(pt_model_tensor_info(&tb, b, i));
        double diff = 0, scale = 0;
        for (size_t j = 0; j < ta.numel; j++) {
            diff = fmax(diff, fabs((double)ta.data[j] - tb.data[j]));
            scale = fmax(scale, fabs((double)tb.data[j]));
        }
        worst = fmax(worst, scale > 0 ? diff / scale : diff);
    }
    return worst;
}

/* FNV-1a over the bits of every weight. */
static uint64_t weights_hash(const pt_model *m)
{
    size_t n;
    ck_assert_ok(pt_model_num_tensors(&n, m));
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
    ck_assert_ok(pt_model_num_tensors(&n, a));
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
        double rel = max_rel_diff(dp, one);
        if (g_rank == 0)
            printf("%d ranks, %d micro-batches per rank: weights vs one process: rel %.3g\n", g_size, n_micro, rel);
        ck_assert_msg(rel <= 1e-6, "%d ranks, %d micro-batches: weights differ from one process by rel %g",
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
    ck_assert_ok(pt_comm_allreduce_max_f64(g_d, &mx, 1, "max"));
    ck_assert_ok(pt_comm_allreduce_min_f64(g_d, &mn, 1, "min"));
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
        ck_assert_int_eq(bad, 0);
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

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("dist");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_shard);
    tcase_add_test(tc, test_allreduce_rank_order);
    tcase_add_test(tc, test_small_collectives);
    tcase_add_test(tc, test_agree);
    tcase_add_test(tc, test_sft_equals_one_process);
    tcase_add_test(tc, test_sft_bit_identical_rerun);
    tcase_add_test(tc, test_sft_error_on_one_rank);
    tcase_add_test(tc, test_check_replicas);
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
