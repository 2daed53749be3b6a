/* One call at a time on a handle, and dependents that outlive their model
 * (issue 25).  Two threads on one context, optimizer or generator: every
 * call either does its whole work (its result equals the one of a lone
 * call) or returns PT_EBUSY naming the handle and the function, never PT_OK
 * with a wrong result.  A callback that uses the handle of the call running
 * it gets PT_EBUSY.  pt_model_free before the contexts, optimizers and
 * generators: they keep the model alive (run under ASan in build-asan). */
#include "testfs.h"

#include <pthread.h>
#include <time.h>

#define V 29
#define T 24
#define GEN 8

static int32_t g_ids[T], g_tgt[T];

static pt_batch one_row(void)
{
    for (int i = 0; i < T; i++) {
        g_ids[i] = (int32_t)((i * 7 + 3) % V);
        g_tgt[i] = i + 1 < T ? (int32_t)(((i + 1) * 7 + 3) % V) : -1;
    }
    return pt_test_row_batch(g_ids, g_tgt, T);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What one hammering thread saw. */
typedef struct hammer {
    int kind;                 /* 0: forward on ctx, 1: generate on gen, 2: sft step on opt */
    pt_context *ctx;          /* kind 0: shared; kind 2: the thread's own */
    pt_generator *gen;
    pt_optimizer *opt;
    const float *ref_lp;      /* kind 0: the lone call's log-probabilities */
    const int32_t *ref_tok;   /* kind 1: the lone call's tokens */
    const volatile int *other_busy; /* the other thread's busy count */
    int ok, busy, wrong, other;
    char msg[512];
} hammer;

static int call_once(hammer *h)
{
    pt_batch b = one_row();
    if (h->kind == 0) {
        float lp[T];
        int st = pt_model_forward(h->ctx, &b, lp, NULL);
        if (st == PT_OK && memcmp(lp, h->ref_lp, sizeof lp) != 0)
            h->wrong++;
        return st;
    }
    if (h->kind == 1) {
        pt_generate_options o;
        pt_generate_options_init(&o);
        o.temperature = 0.0f;
        o.max_new_tokens = GEN;
        int32_t prompt[4] = { 1, 2, 3, 4 }, len = 4, tok[GEN], n = 0;
        int st = pt_generate(h->gen, prompt, &len, 1, &o, tok, &n, NULL, NULL);
        if (st == PT_OK && (n != GEN || memcmp(tok, h->ref_tok, sizeof tok) != 0))
            h->wrong++;
        return st;
    }
    pt_sft_stats s;
    pt_sft_stats_init(&s);
    return pt_sft_step(&s, h->opt, h->ctx, &b, NULL, 1);
}

static void *hammer_run(void *arg)
{
    hammer *h = arg;
    double end = now_s() + 20.0;
    /* at least 300 calls, then until one of the threads met a busy handle (or 20 s) */
    for (int i = 0; i < 300 || (h->busy + *h->other_busy == 0 && now_s() < end); i++) {
        int st = call_once(h);
        if (st == PT_OK) {
            h->ok++;
        } else if (st == PT_EBUSY) {
            if (h->busy++ == 0)
                snprintf(h->msg, sizeof h->msg, "%s", pt_last_error());
            __atomic_store_n(&h->busy, h->busy, __ATOMIC_RELAXED);
        } else {
            h->other++;
            snprintf(h->msg, sizeof h->msg, "%s: %s", pt_status_name(st), pt_last_error());
        }
    }
    return NULL;
}

/* Two threads; returns the calls that succeeded. */
static int hammer_two(hammer h[2], const char *fn, const char *kind)
{
    h[0].other_busy = &h[1].busy;
    h[1].other_busy = &h[0].busy;
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, hammer_run, &h[i]), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(h[i].other == 0, "thread %d: %s", i, h[i].msg);
        ck_assert_msg(h[i].wrong == 0, "thread %d: %d calls returned PT_OK with a wrong result", i, h[i].wrong);
    }
    ck_assert_msg(h[0].busy + h[1].busy > 0, "no PT_EBUSY in %d calls", h[0].ok + h[1].ok);
    const char *m = h[0].busy ? h[0].msg : h[1].msg;
    ck_assert_msg(strncmp(m, fn, strlen(fn)) == 0 && strstr(m, kind) && strstr(m, "in use by another call"),
                  "%s", m);
    return h[0].ok + h[1].ok;
}

START_TEST(test_two_threads_one_context)
{
    pt_model *m = pt_test_tiny_llama(V, 3);
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    ck_assert_ok(pt_context_set_num_threads(ctx, 1));
    pt_batch b = one_row();
    float ref[T];
    ck_assert_ok(pt_model_forward(ctx, &b, ref, NULL));
    hammer h[2] = { { .kind = 0, .ctx = ctx, .ref_lp = ref }, { .kind = 0, .ctx = ctx, .ref_lp = ref } };
    hammer_two(h, "pt_model_forward: the context", "context");
    pt_context_free(ctx);
    pt_model_free(m);
}
END_TEST

START_TEST(test_two_threads_one_generator)
{
    pt_model *m = pt_test_tiny_llama(V, 5);
    pt_generator *g;
    ck_assert_ok(pt_generator_create(&g, m, 1, 16));
    ck_assert_ok(pt_generator_set_num_threads(g, 1));
    hammer h[2] = { { .kind = 1, .gen = g }, { .kind = 1, .gen = g } };
    int32_t ref[GEN];
    h[0].ref_tok = h[1].ref_tok = ref;
    {
        pt_generate_options o;
        pt_generate_options_init(&o);
        o.temperature = 0.0f;
        o.max_new_tokens = GEN;
        int32_t prompt[4] = { 1, 2, 3, 4 }, len = 4, n = 0;
        ck_assert_ok(pt_generate(g, prompt, &len, 1, &o, ref, &n, NULL, NULL));
        ck_assert_int_eq(n, GEN);
    }
    hammer_two(h, "pt_generate: the generator", "generator");
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

START_TEST(test_two_threads_one_optimizer)
{
    pt_model *m = pt_test_tiny_llama(V, 7);
    pt_optimizer_options oo;
    ck_assert_ok(pt_optimizer_options_init(&oo));
    oo.type = PT_OPTIMIZER_SGD;
    oo.lr = 1e-3;
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_context *c0, *c1;
    ck_assert_ok(pt_context_create(&c0, m, 1, T));
    ck_assert_ok(pt_context_create(&c1, m, 1, T));
    ck_assert_ok(pt_context_set_num_threads(c0, 1));
    ck_assert_ok(pt_context_set_num_threads(c1, 1));
    hammer h[2] = { { .kind = 2, .opt = opt, .ctx = c0 }, { .kind = 2, .opt = opt, .ctx = c1 } };
    int ok = hammer_two(h, "pt_sft_step: the optimizer", "optimizer");
    /* every step that returned PT_OK counted, and only those */
    int64_t step = -1;
    step = pt_optimizer_step_count(opt);
    ck_assert_int_eq(step, ok);
    pt_context_free(c0);
    pt_context_free(c1);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* ---- a callback using the handle of its own call ------------------------------ */

typedef struct reentry {
    pt_generator *gen;
    pt_context *ctx;
    int calls, status;
    char msg[512];
} reentry;

static int env_generates(pt_env_reply *rep, const pt_env_turn *t, void *payload)
{
    (void)t;
    reentry *r = payload;
    int32_t prompt[2] = { 1, 2 }, len = 2, tok[4], n = 0;
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.max_new_tokens = 4;
    r->status = pt_generate(r->gen, prompt, &len, 1, &o, tok, &n, NULL, NULL);
    snprintf(r->msg, sizeof r->msg, "%s", pt_last_error());
    r->calls++;
    rep->action = PT_ENV_DONE;
    return 0;
}

static int abort_forwards(void *payload)
{
    reentry *r = payload;
    pt_batch b = one_row();
    float lp[T];
    r->status = pt_model_forward(r->ctx, &b, lp, NULL);
    snprintf(r->msg, sizeof r->msg, "%s", pt_last_error());
    r->calls++;
    return 0;
}

START_TEST(test_callback_uses_its_own_handle)
{
    pt_model *m = pt_test_tiny_llama(V, 9);
    pt_generator *g;
    ck_assert_ok(pt_generator_create(&g, m, 2, 32));
    pt_episode_results *res;
    ck_assert_ok(pt_episode_results_create(&res));
    reentry r = { .gen = g, .status = 1 };
    const int32_t ids[4] = { 1, 2, 3, 4 }, lens[2] = { 2, 2 };
    ck_assert_ok(pt_episodes_run(res, g, ids, lens, NULL, 2, NULL, env_generates, &r));
    ck_assert_int_eq(r.calls, 2);
    ck_assert_int_eq(r.status, PT_EBUSY);
    ck_assert_msg(strstr(r.msg, "pt_generate: the generator") && strstr(r.msg, "(pt_episodes_run)"), "%s", r.msg);
    /* afterwards the generator is free again */
    int32_t len = 2, tok[4], n = 0;
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.max_new_tokens = 4;
    ck_assert_ok(pt_generate(g, ids, &len, 1, &o, tok, &n, NULL, NULL));

    /* the abort callback, polled between micro-batches of pt_sft_step */
    pt_context *ctx;
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    pt_optimizer_options oo;
    ck_assert_ok(pt_optimizer_options_init(&oo));
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    reentry a = { .ctx = ctx, .status = 1 };
    ck_assert_ok(pt_set_abort_callback(abort_forwards, &a));
    pt_batch two[2] = { one_row(), one_row() };
    pt_sft_stats s;
    ck_assert_ok(pt_sft_stats_init(&s));
    int st = pt_sft_step(&s, opt, ctx, two, NULL, 2);
    ck_assert_ok(pt_set_abort_callback(NULL, NULL));
    ck_assert_ok(st);
    ck_assert_int_ge(a.calls, 1);
    ck_assert_int_eq(a.status, PT_EBUSY);
    ck_assert_msg(strstr(a.msg, "pt_model_forward: the context") && strstr(a.msg, "(pt_sft_step)"), "%s", a.msg);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_episode_results_free(res);
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

/* ---- pt_model_free before its dependents -------------------------------------- */

START_TEST(test_model_freed_before_dependents)
{
    pt_model *m = pt_test_tiny_llama(V, 11), *twin = pt_test_tiny_llama(V, 11);
    pt_context *ctx, *ctx2;
    pt_generator *g, *g2;
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    ck_assert_ok(pt_generator_create(&g, m, 1, 16));
    pt_optimizer_options oo;
    ck_assert_ok(pt_optimizer_options_init(&oo));
    oo.type = PT_OPTIMIZER_SGD;
    oo.lr = 0.1;
    pt_optimizer *opt, *opt2;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    ck_assert_ok(pt_context_create(&ctx2, twin, 1, T));
    ck_assert_ok(pt_generator_create(&g2, twin, 1, 16));
    ck_assert_ok(pt_optimizer_create(&opt2, twin, &oo));
    pt_model_free(m); /* the host's reference: the dependents keep the model */

    pt_batch b = one_row();
    pt_sft_stats s, s2;
    ck_assert_ok(pt_sft_stats_init(&s));
    ck_assert_ok(pt_sft_stats_init(&s2));
    ck_assert_ok(pt_sft_step(&s, opt, ctx, &b, NULL, 1));
    ck_assert_ok(pt_sft_step(&s2, opt2, ctx2, &b, NULL, 1));
    ck_assert(s.loss == s2.loss); /* the same as with a model the host kept */
    float lp[T], lp2[T];
    ck_assert_ok(pt_model_forward(ctx, &b, lp, NULL));
    ck_assert_ok(pt_model_forward(ctx2, &b, lp2, NULL));
    ck_assert(memcmp(lp, lp2, sizeof lp) == 0);
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.temperature = 0.0f;
    o.max_new_tokens = GEN;
    int32_t prompt[3] = { 1, 2, 3 }, len = 3, tok[GEN], tok2[GEN], n = 0, n2 = 0;
    ck_assert_ok(pt_generate(g, prompt, &len, 1, &o, tok, &n, NULL, NULL));
    ck_assert_ok(pt_generate(g2, prompt, &len, 1, &o, tok2, &n2, NULL, NULL));
    ck_assert_int_eq(n, n2);
    ck_assert(memcmp(tok, tok2, (size_t)n * sizeof *tok) == 0);
    /* freed in every order: the last dependent frees the model */
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_generator_free(g);
    pt_generator_free(g2);
    pt_model_free(twin);
    pt_optimizer_free(opt2);
    pt_context_free(ctx2);
}
END_TEST

static Suite *handles_suite(void)
{
    Suite *s = suite_create("handles");
    TCase *tc = tcase_create("handles");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_two_threads_one_context);
    tcase_add_test(tc, test_two_threads_one_generator);
    tcase_add_test(tc, test_two_threads_one_optimizer);
    tcase_add_test(tc, test_callback_uses_its_own_handle);
    tcase_add_test(tc, test_model_freed_before_dependents);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(handles_suite());
}
