/* The run's notes (pt_run_options.notes, docs/run-directory.md "Notes"):
 * the exact texts of --resume auto's choice, a checkpoint, a resume with
 * the goodput its relaunch lost, and save_auto's interval; rank 0's only,
 * none without a callback, pt_run_resumed's misuse. */
#include "testutil.h"
#include "testfs.h"
#include "run_testutil.h"

#include <math.h>

static char *g_tmp;
static char g_notes[8192];

static void collect(int level, const char *text, void *user)
{
    ck_assert_ptr_eq(user, g_notes);
    size_t n = strlen(g_notes);
    snprintf(g_notes + n, sizeof g_notes - n, "%s|%s\n", pt_log_level_name(level), text);
}

static void setup(void)
{
    g_tmp = pt_test_tmpdir("pt_run_notes_");
    g_notes[0] = '\0';
}

static void teardown(void)
{
    pt_test_rm_rf(g_tmp);
    free(g_tmp);
}

static void opts_for(pt_run_options *o, const char *dir, int start)
{
    ck_assert_ok(pt_run_options_init(o));
    o->dir = dir;
    o->kind = "sft";
    o->start = start;
    o->notes = collect;
    o->notes_user = g_notes;
}

START_TEST(test_resume_notes)
{
    char dir[4096], want[8192];
    snprintf(dir, sizeof dir, "%s/run", g_tmp);
    pt_model *m = pt_test_tiny_llama(37, 5);
    pt_optimizer *opt = rt_adamw(m);
    pt_run_options o;
    opts_for(&o, dir, PT_RUN_RESUME_AUTO);
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    snprintf(want, sizeof want, "info|--resume auto: %s holds no run yet; starting at step 0\n", dir);
    ck_assert_str_eq(g_notes, want);
    ck_assert_status(pt_run_resumed(r, 0), PT_ESTATE, "starts fresh");
    ck_assert_status(pt_run_resumed(NULL, 0), PT_EINVAL, "pt_run_resumed: r is NULL");
    /* a checkpoint of step 2, then steps 3 and 4 (0.5 s and 0.25 s) the
     * run dies after, 100 s before its relaunch */
    g_notes[0] = '\0';
    pt_run_state s;
    pt_run_state_init(&s);
    s.step = 2;
    ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    snprintf(want, sizeof want, "info|checkpoint %s/checkpoints/step-00000002\n", dir);
    ck_assert_str_eq(g_notes, want);
    ck_assert_ok(pt_run_log(r, "{\"step\": 3, \"step_seconds\": 0.5}"));
    ck_assert_ok(pt_run_log(r, "{\"step\": 4, \"step_seconds\": 0.25}"));
    pt_run_close(r);
    char metrics[4200];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    rt_age_rows(metrics, 100.0);
    /* the relaunch, named as Python names its options */
    g_notes[0] = '\0';
    opts_for(&o, dir, PT_RUN_RESUME_AUTO);
    o.resume_name = "resume_from_checkpoint";
    ck_assert_ok(pt_run_open(&r, &o));
    snprintf(want, sizeof want, "info|resume_from_checkpoint auto: the latest checkpoint is "
                                "%s/checkpoints/step-00000002\n", dir);
    ck_assert_str_eq(g_notes, want);
    g_notes[0] = '\0';
    pt_run_state_init(&s);
    ck_assert_ok(pt_run_load(&s, NULL, r, m, opt));
    ck_assert_str_eq(g_notes, ""); /* the host applies the state first */
    ck_assert_ok(pt_run_resumed(r, s.step));
    double gap = 0;
    char head[4400], tail[256];
    snprintf(head, sizeof head, "info|resumed at step 2 from %s/checkpoints/step-00000002\n"
                                "info|goodput: ", dir);
    ck_assert_msg(!strncmp(g_notes, head, strlen(head)), "%s", g_notes);
    ck_assert_int_eq(sscanf(g_notes + strlen(head), "%lf s from the earlier run's last metrics row to this "
                                                    "relaunch are lost\n%255[^\n]", &gap, tail), 2);
    ck_assert_msg(gap >= 100.0 && gap < 160.0, "relaunch gap %g", gap);
    ck_assert_str_eq(tail, "info|goodput: 2 steps (0.750 s) of the earlier run after step 2 are lost");
    pt_run_close(r);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

START_TEST(test_save_auto_note)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/auto", g_tmp);
    pt_model *m = pt_test_tiny_llama(37, 4);
    pt_optimizer *opt = rt_adamw(m);
    pt_run_options o;
    opts_for(&o, dir, PT_RUN_NEW);
    o.save_auto = true;
    o.mtbf_seconds = 5400; /* 1.5 h */
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_str_eq(g_notes, "");
    ck_assert_ok(pt_run_note_step(r, 0.25));
    ck_assert_ok(pt_run_note_step(r, 0.75));
    pt_run_state s;
    pt_run_state_init(&s);
    s.step = 1;
    ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    char head[4400];
    snprintf(head, sizeof head, "info|checkpoint %s/checkpoints/step-00000001\n"
                                "info|--save-every auto: a checkpoint took ", dir);
    ck_assert_msg(!strncmp(g_notes, head, strlen(head)), "%s", g_notes);
    double cost = 0, interval = 0;
    long long every = 0;
    char end[8] = "";
    ck_assert_int_eq(sscanf(g_notes + strlen(head), "%lf s, a step 0.5000 s; with an MTBF of 1.5 h, Young-Daly "
                                                    "gives %lf s: a checkpoint every %lld steps%7s", &cost,
                            &interval, &every, end), 3);
    /* Young-Daly by hand: sqrt(2 * cost * MTBF), then that many 0.5 s steps */
    const double c = pt_run_last_save_seconds(r);
    ck_assert_double_eq_tol(cost, c, 0.0005 + 1e-12);
    ck_assert_double_eq_tol(interval, sqrt(2.0 * c * 5400.0), 0.05 + 1e-12);
    ck_assert_int_eq(every, (long long)fmax(1.0, round(sqrt(2.0 * c * 5400.0) / 0.5)));
    ck_assert_int_eq(every, pt_run_save_every(r));
    pt_run_close(r);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

/* Without a callback the run says nothing (and works). */
START_TEST(test_no_callback)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/quiet", g_tmp);
    pt_model *m = pt_test_tiny_llama(37, 4);
    pt_optimizer *opt = rt_adamw(m);
    pt_run_options o;
    opts_for(&o, dir, PT_RUN_RESUME_AUTO);
    o.notes = NULL;
    pt_run *r;
    ck_assert_ok(pt_run_open(&r, &o));
    pt_run_state s;
    pt_run_state_init(&s);
    s.step = 1;
    ck_assert_ok(pt_run_save(r, m, opt, &s, NULL));
    pt_run_close(r);
    opts_for(&o, dir, PT_RUN_RESUME_AUTO);
    o.notes = NULL;
    ck_assert_ok(pt_run_open(&r, &o));
    ck_assert_ok(pt_run_load(&s, NULL, r, m, opt));
    ck_assert_ok(pt_run_resumed(r, s.step));
    ck_assert_str_eq(g_notes, "");
    pt_run_close(r);
    pt_optimizer_free(opt);
    pt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("run_notes");
    TCase *tc = tcase_create("notes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_resume_notes);
    tcase_add_test(tc, test_save_auto_note);
    tcase_add_test(tc, test_no_callback);
    suite_add_tcase(su, tc);
    return pt_test_run(su);
}
