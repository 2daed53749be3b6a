/* Threads: the per-context and per-generator thread count, the count inside a
 * parallel region, and two models trained in two host threads at once giving
 * the weights and tokens of the same runs done one after the other. */
#include "testutil.h"

#include "core/core.h"
#include "model/model.h"
#include "model/generate_internal.h"

#include <omp.h>
#include <pthread.h>

#define V 53
#define B 3
#define T 12
#define STEPS 4
#define NEW 8

/* ---- argument checks ---- */

START_TEST(test_set_get)
{
    ck_assert_ok(pt_set_num_threads(2));
    pt_model *m = pt_test_tiny_llama(V, 1);
    pt_context *ctx;
    pt_generator *g;
    ck_assert_ok(pt_context_create(&ctx, m, 1, 8));
    ck_assert_ok(pt_generator_create(&g, m, 1, 16));
    ck_assert_int_eq(pt_context_get_num_threads(ctx), 2);   /* default: the process setting */
    ck_assert_int_eq(pt_generator_get_num_threads(g), 2);
    ck_assert_status(pt_context_set_num_threads(ctx, -1), PT_EINVAL,
                     "pt_context_set_num_threads: n -1 is not in [0, 1024]");
    ck_assert_status(pt_context_set_num_threads(ctx, 1025), PT_EINVAL, "1025 is not in [0, 1024]");
    ck_assert_status(pt_context_set_num_threads(NULL, 1), PT_EINVAL,
                     "pt_context_set_num_threads: ctx is NULL");
    ck_assert_status(pt_generator_set_num_threads(g, -3), PT_EINVAL,
                     "pt_generator_set_num_threads: n -3 is not in [0, 1024]");
    ck_assert_status(pt_generator_set_num_threads(NULL, 1), PT_EINVAL,
                     "pt_generator_set_num_threads: gen is NULL");
    ck_assert_status(pt_context_get_num_threads(NULL), PT_EINVAL, "ctx is NULL");
    ck_assert_status(pt_generator_get_num_threads(NULL), PT_EINVAL, "gen is NULL");
    ck_assert_ok(pt_context_set_num_threads(ctx, 3));
    ck_assert_ok(pt_generator_set_num_threads(g, 5));
    ck_assert_int_eq(pt_context_get_num_threads(ctx), 3);
    ck_assert_int_eq(pt_generator_get_num_threads(g), 5);
    ck_assert_int_eq(pt_get_num_threads(), 2);   /* the process setting is untouched */
    ck_assert_ok(pt_context_set_num_threads(ctx, 0));
    ck_assert_ok(pt_set_num_threads(4));
    ck_assert_int_eq(pt_context_get_num_threads(ctx), 4);   /* 0 follows the process setting */
    ck_assert_int_eq(pt_generator_get_num_threads(g), 5);
    ck_assert_ok(pt_set_num_threads(2));
    pt_generator_free(g);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

/* ---- the count in effect during a call ---- */

static int seen_threads[8], n_seen;

static int record_abort(void *payload)
{
    (void)payload;
    if (n_seen < 8)
        seen_threads[n_seen++] = pt_get_num_threads();
    return 0;
}

static void record_hook(int row, int step, const float *logits, int vocab, void *payload)
{
    (void)row, (void)step, (void)logits, (void)vocab, (void)payload;
    if (n_seen < 8)
        seen_threads[n_seen++] = pt_get_num_threads();
}

START_TEST(test_count_in_effect)
{
    ck_assert_ok(pt_set_num_threads(2));
    pt_model *m = pt_test_tiny_llama(V, 2);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, 8));
    ck_assert_ok(pt_context_set_num_threads(ctx, 3));
    int32_t ids[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, tgt[8] = { 2, 3, 4, 5, 6, 7, 8, -1 };
    pt_batch b = pt_test_row_batch(ids, tgt, 8);
    float loss;
    /* The abort callback is polled between layers, inside the call. */
    n_seen = 0;
    ck_assert_ok(pt_set_abort_callback(record_abort, NULL));
    ck_assert_ok(pt_model_loss(ctx, &b, NULL, true, &loss));
    ck_assert_int_eq(n_seen, 2 * 2);   /* 2 layers forward, 2 backward */
    for (int i = 0; i < n_seen; i++)
        ck_assert_int_eq(seen_threads[i], 3);
    ck_assert_int_eq(pt_get_num_threads(), 2);   /* restored after the call */
    /* A failing call restores it too. */
    n_seen = 0;
    ck_assert_ok(pt_context_set_num_threads(ctx, 1));
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, NULL));
    ck_assert_int_eq(n_seen, 2);
    ck_assert_int_eq(seen_threads[0], 1);
    ck_assert_int_eq(pt_get_num_threads(), 2);
    ck_assert_ok(pt_set_abort_callback(NULL, NULL));

    /* The logits hook runs inside pt_generate with the generator's count. */
    pt_generator *g;
    ck_assert_ok(pt_generator_create(&g, m, 1, 16));
    ck_assert_ok(pt_generator_set_num_threads(g, 1));
    pt__generator_set_logits_hook(g, record_hook, NULL);
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = 3;
    o.n_stop_ids = 0;
    int32_t len = 4, tok[3], n, fin;
    n_seen = 0;
    ck_assert_ok(pt_generate(g, ids, &len, 1, &o, tok, &n, &fin, NULL));
    ck_assert_int_eq(n_seen, 3);
    for (int i = 0; i < n_seen; i++)
        ck_assert_int_eq(seen_threads[i], 1);
    ck_assert_int_eq(pt_get_num_threads(), 2);
    pt_generator_free(g);
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_one_thread_inside_parallel_region)
{
    ck_assert_ok(pt_set_num_threads(4));
    int inside[2] = { -1, -1 }, team = 0;
#pragma omp parallel num_threads(2)
    {
        int t = omp_get_thread_num();
        if (t < 2)
            inside[t] = pt_get_num_threads();
#pragma omp single
        team = omp_get_num_threads();
    }
    if (team == 2) {
        ck_assert_int_eq(inside[0], 1);
        ck_assert_int_eq(inside[1], 1);
    }
    ck_assert_int_eq(pt_get_num_threads(), 4);
    ck_assert_ok(pt_set_num_threads(2));
}
END_TEST

/* ---- two models in two host threads ---- */

typedef struct job {
    pt_model *model;
    uint64_t seed;
    int status;
    char error[256];
    int32_t tok[B * NEW], n[B], fin[B];
    float lp[B * NEW];
    float loss[STEPS];
} job;

static int run_job(job *j)
{
    int32_t ids[B * T], tgt[B * T];
    pt_rng r;
    pt__rng_seed(&r, j->seed);
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)pt__rng_below(&r, V);
    for (int i = 0; i < B * T; i++)
        tgt[i] = (i % T) + 1 < T ? ids[i + 1] : -1;
    pt_batch b;
    pt_batch_init(&b);
    b.batch = B;
    b.seq = T;
    b.input_ids = ids;
    b.targets = tgt;
    pt_context *ctx = NULL;
    pt_generator *g = NULL;
    pt_optimizer *opt = NULL;
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = 1e-2;
    int st = pt_context_create(&ctx, j->model, B, T);
    if (!st)
        st = pt_context_set_num_threads(ctx, 1);
    if (!st)
        st = pt_optimizer_create(&opt, j->model, &oo);
    for (int s = 0; s < STEPS && !st; s++) {
        pt_sft_stats ss;
        pt_sft_stats_init(&ss);
        st = pt_sft_step(&ss, opt, ctx, &b, NULL, 1);
        j->loss[s] = (float)ss.loss;
    }
    if (!st)
        st = pt_generator_create(&g, j->model, B, T + NEW);
    if (!st)
        st = pt_generator_set_num_threads(g, 1);
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.max_new_tokens = NEW;
    o.n_stop_ids = 0;
    o.seed = j->seed;
    int32_t lens[B] = { 3, 5, 7 };
    if (!st)
        st = pt_generate(g, ids, lens, B, &o, j->tok, j->n, j->fin, j->lp);
    if (st)
        snprintf(j->error, sizeof j->error, "%s", pt_last_error());
    pt_generator_free(g);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    return st;
}

static void *job_thread(void *arg)
{
    job *j = arg;
    j->status = run_job(j);
    return NULL;
}

static size_t weights(const pt_model *m, float **out)
{
    size_t total = 0, off = 0;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++)
        total += pt__model_tensor(m, i)->numel;
    *out = malloc(total * sizeof **out);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        memcpy(*out + off, t->data, t->numel * sizeof **out);
        off += t->numel;
    }
    return total;
}

START_TEST(test_two_models_two_threads)
{
    ck_assert_ok(pt_set_num_threads(2));
    job seq[2], con[2];
    memset(seq, 0, sizeof seq);
    memset(con, 0, sizeof con);
    for (int k = 0; k < 2; k++) {
        seq[k].seed = con[k].seed = 100 + (uint64_t)k;
        seq[k].model = pt_test_tiny_llama(V, 7 + (uint64_t)k);
        con[k].model = pt_test_tiny_llama(V, 7 + (uint64_t)k);
    }
    for (int k = 0; k < 2; k++) {
        seq[k].status = run_job(&seq[k]);
        ck_assert_msg(seq[k].status == PT_OK, "sequential %d: %s", k, seq[k].error);
    }
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(pthread_create(&th[k], NULL, job_thread, &con[k]), 0);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(pthread_join(th[k], NULL), 0);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(con[k].status == PT_OK, "concurrent %d: %s", k, con[k].error);
        float *ws, *wc;
        size_t n = weights(seq[k].model, &ws);
        ck_assert_uint_eq(weights(con[k].model, &wc), n);
        ck_assert_msg(memcmp(ws, wc, n * sizeof *ws) == 0, "model %d: weights differ", k);
        ck_assert_mem_eq(seq[k].loss, con[k].loss, sizeof seq[k].loss);
        ck_assert(seq[k].loss[STEPS - 1] < seq[k].loss[0]);   /* training moved the model */
        ck_assert_mem_eq(seq[k].tok, con[k].tok, sizeof seq[k].tok);
        ck_assert_mem_eq(seq[k].n, con[k].n, sizeof seq[k].n);
        ck_assert_mem_eq(seq[k].lp, con[k].lp, sizeof seq[k].lp);
        ck_assert_int_eq(seq[k].n[0], NEW);
        free(ws);
        free(wc);
    }
    /* The two models really differ, so equality above is per model. */
    ck_assert(memcmp(seq[0].loss, seq[1].loss, sizeof seq[0].loss) != 0);
    for (int k = 0; k < 2; k++) {
        pt_model_free(seq[k].model);
        pt_model_free(con[k].model);
    }
}
END_TEST

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_set_get);
    tcase_add_test(tc, test_count_in_effect);
    tcase_add_test(tc, test_one_thread_inside_parallel_region);
    tcase_add_test(tc, test_two_models_two_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(threads_suite());
}
