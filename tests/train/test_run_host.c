/* What every host of the run layer does the same way (run_host.c): the end
 * of a step (pt_run_step_end: checkpoints when due, the host's own code
 * passed through, goodput sections) and the weights a run started from
 * (pt_run_reload_model).  A replica mismatch needs a job of several ranks:
 * test cli_dist rolls back through pt_run_step_end. */
#include "testutil.h"
#include "testfs.h"
#include "run_testutil.h"

#include <string.h>
#include <time.h>

static char *g_tmp;

static void setup(void)
{
    g_tmp = pt_test_tmpdir("pt_run_host_");
}

static void teardown(void)
{
    pt_test_rm_rf(g_tmp);
    free(g_tmp);
}

/* The host of test_step_end: its checkpoints through pt_run_save. */
typedef struct host {
    pt_run *run;
    pt_model *m;
    pt_optimizer *opt;
    int64_t step;
    int saves, code;
    int64_t saved[8];
} host;

static int host_save(void *user)
{
    host *h = user;
    if (h->code)
        return h->code;
    struct timespec ts = { 0, 20 * 1000 * 1000 }; /* 20 ms in the save section */
    nanosleep(&ts, NULL);
    pt_run_state s;
    pt_run_state_init(&s);
    s.step = h->step;
    h->saved[h->saves++] = h->step;
    return pt_run_save(h->run, h->m, h->opt, &s, NULL);
}

START_TEST(test_step_end)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/run", g_tmp);
    pt_goodput *gp;
    ck_assert_ok(pt_goodput_create(&gp));
    pt_run_options o;
    pt_run_options_init(&o);
    o.dir = dir;
    o.kind = "sft";
    o.save_every = 3;
    o.check_every = 1; /* one rank: nothing to compare */
    o.goodput = gp;
    host h = { 0 };
    ck_assert_ok(pt_run_open(&h.run, &o));
    h.m = pt_test_tiny_llama(37, 3);
    h.opt = rt_adamw(h.m);
    int action = -1;
    for (h.step = 1; h.step <= 7; h.step++) {
        ck_assert_ok(pt_run_step_end(&action, h.run, h.opt, h.step, 7, host_save, &h));
        ck_assert_int_eq(action, PT_RUN_CONTINUE);
    }
    /* every 3 steps and the last */
    ck_assert_int_eq(h.saves, 3);
    ck_assert_int_eq(h.saved[0], 3);
    ck_assert_int_eq(h.saved[1], 6);
    ck_assert_int_eq(h.saved[2], 7);
    ck_assert_int_eq(pt_run_last_step(h.run), 7);
    /* the saves' time is PT_TIME_SAVE, and no section is left open */
    pt_goodput_report r;
    pt_goodput_report_init(&r);
    ck_assert_ok(pt_goodput_get(&r, gp));
    ck_assert(r.seconds[PT_TIME_SAVE] >= 0.06);
    struct timespec ts = { 0, 30 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    pt_goodput_report r2;
    pt_goodput_report_init(&r2);
    ck_assert_ok(pt_goodput_get(&r2, gp));
    ck_assert(r2.seconds[PT_TIME_SAVE] == r.seconds[PT_TIME_SAVE]);
    /* the host's own code comes back unchanged */
    h.code = 42;
    h.step = 3;
    ck_assert_int_eq(pt_run_step_end(&action, h.run, h.opt, 3, 7, host_save, &h), 42);
    ck_assert_int_eq(action, PT_RUN_CONTINUE);
    ck_assert_int_eq(h.saves, 3);
    /* nothing due: save is not called */
    ck_assert_ok(pt_run_step_end(&action, h.run, h.opt, 4, 7, host_save, &h));
    ck_assert_status(pt_run_step_end(&action, h.run, h.opt, 8, 7, host_save, &h), PT_EINVAL, "step");
    ck_assert_int_eq(action, PT_RUN_STOP);
    ck_assert_status(pt_run_step_end(&action, h.run, h.opt, 1, 7, NULL, &h), PT_EINVAL, "save");
    ck_assert_status(pt_run_step_end(NULL, h.run, h.opt, 1, 7, host_save, &h), PT_EINVAL, "action");
    pt_run_close(h.run);
    pt_optimizer_free(h.opt);
    pt_model_free(h.m);
    pt_goodput_free(gp);
}
END_TEST

/* A copy of every trainable tensor's values, in order. */
static float *snapshot(const pt_model *m, size_t *n_out)
{
    size_t n = 0;
    pt_tensor_info ti;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        pt_tensor_info_init(&ti);
        ck_assert_ok(pt_model_tensor_info(&ti, m, i));
        n += ti.data ? ti.numel : 0;
    }
    float *v = malloc(n * sizeof *v), *p = v;
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        pt_tensor_info_init(&ti);
        ck_assert_ok(pt_model_tensor_info(&ti, m, i));
        if (ti.data) {
            memcpy(p, ti.data, ti.numel * sizeof *p);
            p += ti.numel;
        }
    }
    *n_out = n;
    return v;
}

/* Every value of m set to `v` (training that moved the weights). */
static void fill(pt_model *m, float v)
{
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        pt_tensor_info ti;
        pt_tensor_info_init(&ti);
        ck_assert_ok(pt_model_tensor_info(&ti, m, i));
        for (size_t k = 0; ti.data && k < ti.numel; k++)
            ti.data[k] = v;
    }
}

START_TEST(test_reload_model)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/base", g_tmp);
    pt_model *m = pt_test_tiny_llama(37, 11);
    ck_assert_ok(pt_model_save_dir(m, dir, NULL));
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 2;
    lo.seed = 77;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    size_t n0, n1;
    float *start = snapshot(m, &n0);
    fill(m, 0.5f);
    ck_assert_ok(pt_run_reload_model(m, dir, &lo));
    float *back = snapshot(m, &n1);
    ck_assert_uint_eq(n0, n1);
    ck_assert_int_eq(memcmp(start, back, n0 * sizeof *start), 0); /* base and initial adapters, bit for bit */
    free(back);
    /* other adapters (targets) no longer match: m unchanged */
    fill(m, 0.25f);
    float *moved = snapshot(m, &n1);
    pt_lora_options other = lo;
    other.targets = PT_LORA_ALL;
    ck_assert_status(pt_run_reload_model(m, dir, &other), PT_ESTATE,
                     "base no longer matches the model being trained");
    ck_assert_status(pt_run_reload_model(m, dir, NULL), PT_ESTATE, "no longer matches");
    back = snapshot(m, &n1);
    ck_assert_int_eq(memcmp(moved, back, n1 * sizeof *back), 0);
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/none", g_tmp);
    ck_assert_int_ne(pt_run_reload_model(m, missing, &lo), PT_OK);
    ck_assert_status(pt_run_reload_model(NULL, dir, &lo), PT_EINVAL, "model");
    free(start);
    free(moved);
    free(back);
    pt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("run_host");
    TCase *tc = tcase_create("run_host");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_step_end);
    tcase_add_test(tc, test_reload_model);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
