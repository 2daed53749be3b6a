/* The run layer's fault handling and goodput (include/posttrain/run.h,
 * run_fault.c): sections and step times that add up to the wall time, the
 * final report row, the agreement of a job of one, the replica checks'
 * cadence and rollback count, the flip test hook, the skip guard, the
 * library's clock and splitmix.  (A job of several ranks: test cli_dist.) */
#include "testutil.h"
#include "testfs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *g_tmp;

static void setup(void)
{
    g_tmp = pt_test_tmpdir("pt_run_fault_");
}

static void teardown(void)
{
    pt_test_rm_rf(g_tmp);
    free(g_tmp);
}

static void sleep_s(double s)
{
    struct timespec ts = { 0, (long)(s * 1e9) };
    nanosleep(&ts, NULL);
}

static pt_run *open_run(pt_goodput *gp, const char *name, int64_t check_every)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    pt_run_options o;
    ck_assert_ok(pt_run_options_init(&o));
    ck_assert_int_eq(o.on_mismatch, PT_RUN_ROLLBACK);
    ck_assert_int_eq(o.max_rollbacks, 3);
    ck_assert_int_eq(o.test_flip_rank, -1);
    o.dir = dir;
    o.kind = "sft";
    o.goodput = gp;
    o.check_every = check_every;
    o.test_flip_rank = 0;
    o.test_flip_step = 3;
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    return r;
}

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(it), "no number \"%s\"", key);
    return it->valuedouble;
}

/* Sections on the clock and a step's seconds split by kind: every kind's
 * seconds (with "other") add up to the wall time; the report row. */
START_TEST(test_sections_and_report)
{
    pt_goodput *gp;
    ck_assert_ok(pt_goodput_create(&gp));
    pt_run *r = open_run(gp, "run", 0);
    ck_assert_ok(pt_run_section(r, PT_TIME_STARTUP));
    sleep_s(0.03);
    ck_assert_ok(pt_run_section(r, PT_TIME_SAVE)); /* ends startup */
    sleep_s(0.02);
    ck_assert_ok(pt_run_section(r, -1));
    ck_assert_ok(pt_run_section(r, -1)); /* none open: nothing to do */
    ck_assert_status(pt_run_section(r, PT_TIME_OTHER), PT_EINVAL, "other");
    /* 1 s of which 0.25 waiting and 0.125 generating: 0.625 of step */
    ck_assert_ok(pt_run_step_time(r, 1.0, 0.25, 0.125));
    ck_assert_status(pt_run_step_time(r, -1.0, 0, 0), PT_EINVAL, "seconds");
    ck_assert_double_eq(pt_run_mean_step_seconds(r), 1.0);
    char *json = NULL;
    pt_goodput_report g;
    pt_goodput_report_init(&g);
    ck_assert_ok(pt_run_report_json(&json, &g, r, 7));
    ck_assert_double_eq(g.seconds[PT_TIME_STEP], 0.625); /* committed by the report */
    ck_assert_double_eq(g.seconds[PT_TIME_WAIT], 0.25);
    ck_assert_double_eq(g.seconds[PT_TIME_GENERATE], 0.125);
    ck_assert_double_eq(g.pending, 0);
    ck_assert_int_eq(g.steps_kept, 1);
    ck_assert_msg(g.seconds[PT_TIME_STARTUP] >= 0.03 && g.seconds[PT_TIME_SAVE] >= 0.02,
                  "startup %g, save %g", g.seconds[PT_TIME_STARTUP], g.seconds[PT_TIME_SAVE]);
    /* 1 s attributed that the clock did not see: "other" is 0, the wall the clock's */
    ck_assert_double_eq(g.seconds[PT_TIME_OTHER], 0);
    ck_assert_msg(g.wall >= 0.05 && g.wall < 1.0, "wall %g", g.wall);
    ck_assert_double_eq_tol(g.goodput, 0.75 / g.wall, 1e-12);
    ck_assert_msg(!strncmp(json, "{\"step\": 7, \"goodput\": {\"goodput\": ", 35) && !strchr(json, '\n') &&
                  strstr(json, "\"seconds/step\": 0.6250, \"seconds/generate\": 0.1250, \"seconds/wait\": 0.2500, ") &&
                  strstr(json, ", \"pending\": 0.0000, \"steps_kept\": 1, \"steps_lost\": 0, \"ranks\": 1}}"),
                  "%s", json);
    cJSON *row = cJSON_Parse(json);
    const cJSON *gj = cJSON_GetObjectItemCaseSensitive(row, "goodput");
    ck_assert_double_eq(json_num(row, "step"), 7);
    ck_assert_double_eq_tol(json_num(gj, "wall"), g.wall, 5e-5);
    ck_assert_double_eq_tol(json_num(gj, "goodput"), g.goodput, 5e-7);
    ck_assert_double_eq_tol(json_num(gj, "seconds/startup"), g.seconds[PT_TIME_STARTUP], 5e-5);
    cJSON_Delete(row);
    pt_free(json);
    pt_run_close(r);

    /* time on the clock only: the kinds add up to the wall */
    pt_goodput *gp2;
    ck_assert_ok(pt_goodput_create(&gp2));
    r = open_run(gp2, "run2", 0);
    ck_assert_ok(pt_run_section(r, PT_TIME_STARTUP));
    sleep_s(0.02);
    ck_assert_ok(pt_run_section(r, -1));
    double t0 = pt_now();
    sleep_s(0.03);
    const double step = pt_now() - t0;
    ck_assert_msg(step >= 0.03 && step < 5, "pt_now: %g s across a 0.03 s sleep", step);
    ck_assert_ok(pt_run_step_time(r, step, step / 4, 0));
    ck_assert_ok(pt_run_report_json(&json, &g, r, 1));
    double sum = g.pending;
    for (int k = 0; k < PT_TIME_KINDS; k++)
        sum += g.seconds[k];
    ck_assert_double_eq_tol(sum, g.wall, 1e-9);
    ck_assert_double_eq_tol(g.seconds[PT_TIME_STEP], step * 0.75, 1e-12);
    ck_assert_msg(g.seconds[PT_TIME_OTHER] > 0 && g.wall >= g.seconds[PT_TIME_STARTUP] + step, "wall %g", g.wall);
    pt_free(json);
    pt_run_close(r);
    pt_goodput_free(gp2);

    /* no accountant: no report */
    r = open_run(NULL, "run3", 0);
    ck_assert_ok(pt_run_section(r, PT_TIME_STARTUP));
    ck_assert_status(pt_run_report_json(&json, NULL, r, 1), PT_ESTATE, "accountant");
    ck_assert_ptr_null(json);
    pt_run_close(r);
    pt_goodput_free(gp);
}
END_TEST

/* A job of one agrees with itself; checks are never due and pass; the
 * rollback count and the rollback point. */
START_TEST(test_agree_and_checks)
{
    pt_model *m = pt_test_tiny_llama(37, 7);
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &oo));
    pt_run *r = open_run(NULL, "run", 2);
    int agreed = 9, first = 9;
    ck_assert_ok(pt_run_agree(&agreed, &first, r, 0));
    ck_assert_int_eq(agreed, 0);
    ck_assert_int_eq(first, -1);
    ck_assert_ok(pt_run_agree(&agreed, &first, r, 2));
    ck_assert_int_eq(agreed, 2);
    ck_assert_int_eq(first, 0);
    ck_assert_ok(pt_run_agree(&agreed, NULL, r, PT_EIO));
    ck_assert_int_eq(agreed, PT_EIO);
    ck_assert_status(pt_run_agree(NULL, NULL, r, 0), PT_EINVAL, "agreed");
    /* one rank: nothing to compare */
    ck_assert(!pt_run_check_due(r, 2));
    ck_assert(!pt_run_check_due(r, 3));
    int action = -1, bad = 5;
    ck_assert_ok(pt_run_check(&action, &bad, r, opt));
    ck_assert_int_eq(action, PT_RUN_CONTINUE);
    ck_assert_int_eq(bad, -1);
    ck_assert_int_eq(pt_run_last_step(r), -1);
    pt_run_state s;
    pt_run_state_init(&s);
    ck_assert_status(pt_run_rollback(&s, NULL, r, m, opt), PT_ENOTFOUND, "no checkpoint");
    ck_assert_int_eq(pt_run_rollbacks(r), 1);
    s.step = 4;
    ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    ck_assert_int_eq(pt_run_last_step(r), 4);
    ck_assert_ok(pt_run_rollback(&s, NULL, r, m, opt));
    ck_assert_int_eq(pt_run_rollbacks(r), 2);
    ck_assert_int_eq(pt_run_last_step(r), 4);
    ck_assert_ok(pt_run_check(&action, NULL, r, opt)); /* nothing compared: the count stays */
    ck_assert_int_eq(pt_run_rollbacks(r), 2);
    pt_run_close(r);
    /* the options' checks; the action names */
    pt_run_options o;
    pt_run_options_init(&o);
    o.dir = g_tmp;
    o.kind = "sft";
    o.on_mismatch = PT_RUN_CONTINUE;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "on_mismatch");
    o.on_mismatch = PT_RUN_STOP;
    o.check_every = -1;
    ck_assert_status(pt_run_open(&r, &o), PT_EINVAL, "check_every");
    ck_assert_str_eq(pt_run_action_name(PT_RUN_ROLLBACK), "rollback");
    int v = -1;
    ck_assert_ok(pt_run_action_from_name(&v, "stop"));
    ck_assert_int_eq(v, PT_RUN_STOP);
    ck_assert_status(pt_run_action_from_name(&v, "retry"), PT_EINVAL, "continue");
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* The flip hook: bit 13 of the first trainable value, on its step, once. */
START_TEST(test_flip)
{
    pt_model *m = pt_test_tiny_llama(37, 8);
    pt_run *r = open_run(NULL, "run", 0);
    pt_tensor_info ti;
    pt_tensor_info_init(&ti);
    size_t i = 0;
    for (; i < pt_model_tensor_count(m); i++) {
        ck_assert_ok(pt_model_tensor_info(&ti, m, i));
        if (ti.trainable && ti.numel)
            break;
    }
    uint32_t before, after;
    memcpy(&before, ti.data, 4);
    const char *name = "x";
    ck_assert_ok(pt_run_test_flip(&name, r, m, 2));
    ck_assert_ptr_null(name);
    ck_assert_ok(pt_run_test_flip(&name, r, m, 3));
    ck_assert_str_eq(name, ti.name);
    memcpy(&after, ti.data, 4);
    ck_assert_uint_eq(before ^ after, 1u << 13);
    ck_assert_ok(pt_run_test_flip(&name, r, m, 3)); /* once */
    ck_assert_ptr_null(name);
    memcpy(&after, ti.data, 4);
    ck_assert_uint_eq(before ^ after, 1u << 13);
    pt_run_close(r);
    pt_model_free(m);
}
END_TEST

/* Non-finite updates in a row stop the run at `max`; others neither count nor reset. */
START_TEST(test_skip_guard)
{
    pt_run_skips k;
    memset(&k, 0, sizeof k);
    ck_assert_ok(pt_run_skip_guard(&k, PT_SKIP_NONFINITE_LOSS, 5, 3));
    ck_assert_ok(pt_run_skip_guard(&k, PT_SKIP_NO_TOKENS, 6, 3));
    ck_assert_ok(pt_run_skip_guard(&k, PT_SKIP_NONFINITE_GRAD, 7, 3));
    ck_assert_int_eq(k.in_a_row, 2);
    ck_assert_status(pt_run_skip_guard(&k, PT_SKIP_NONFINITE_UPDATE, 8, 3), PT_ERANGE,
                     "3 optimizer updates in a row were skipped as non-finite (steps 5 to 8; the last: "
                     "nonfinite_update)");
    ck_assert_int_eq(k.first, 5);
    ck_assert_ok(pt_run_skip_guard(&k, PT_SKIP_NONE, 9, 3));
    ck_assert_int_eq(k.in_a_row, 0);
    for (int s = 10; s < 20; s++) /* max 0: never */
        ck_assert_ok(pt_run_skip_guard(&k, PT_SKIP_NONFINITE_LOSS, s, 0));
    ck_assert_int_eq(k.in_a_row, 10);
    ck_assert_int_eq(k.first, 10);
}
END_TEST

/* The final save: the model in the run directory; with LoRA the adapter
 * first, then merged; the merged weights are the base plus the update. */
START_TEST(test_save_final)
{
    char path[4096];
    pt_model *m = pt_test_tiny_llama(37, 9);
    pt_run *r = open_run(NULL, "plain", 0);
    unsigned saved = 99;
    ck_assert_ok(pt_run_save_final(&saved, r, m, "base"));
    ck_assert_uint_eq(saved, PT_RUN_SAVED_MODEL);
    snprintf(path, sizeof path, "%s/config.json", pt_run_dir(r));
    ck_assert_int_eq(access(path, F_OK), 0);
    pt_model *back = NULL;
    ck_assert_ok(pt_model_load_dir(&back, pt_run_dir(r), NULL));
    ck_assert_uint_eq(pt_model_tensor_count(back), pt_model_tensor_count(m));
    pt_model_free(back);
    pt_run_close(r);

    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = 2;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    r = open_run(NULL, "lora", 0);
    ck_assert_ok(pt_run_save_final(&saved, r, m, "base"));
    ck_assert_uint_eq(saved, PT_RUN_SAVED_ADAPTER | PT_RUN_SAVED_MERGED | PT_RUN_SAVED_MODEL);
    snprintf(path, sizeof path, "%s/adapter/adapter_config.json", pt_run_dir(r));
    ck_assert_int_eq(access(path, F_OK), 0);
    ck_assert(!pt_model_has_lora(m));
    ck_assert_status(pt_run_save_final(&saved, r, NULL, "base"), PT_EINVAL, "model");
    ck_assert_uint_eq(saved, 0);
    pt_run_close(r);
    pt_model_free(m);
}
END_TEST

/* splitmix64 of 0: the reference sequence (Vigna's splitmix64.c). */
START_TEST(test_splitmix)
{
    uint64_t s = 0;
    ck_assert_uint_eq(pt_splitmix64(&s), 0xE220A8397B1DCDAFull);
    ck_assert_uint_eq(s, 0x9E3779B97F4A7C15ull);
    ck_assert_uint_eq(pt_splitmix64(&s), 0x6E789E6AA1B965F4ull);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("run_fault");
    TCase *tc = tcase_create("run_fault");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_sections_and_report);
    tcase_add_test(tc, test_agree_and_checks);
    tcase_add_test(tc, test_flip);
    tcase_add_test(tc, test_skip_guard);
    tcase_add_test(tc, test_save_final);
    tcase_add_test(tc, test_splitmix);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
