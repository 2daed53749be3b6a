/* The goodput accountant (posttrain/goodput.h): the kind names; exact sums
 * of adds; sections timed on its clock; commit and rollback moving pending
 * time to kept or lost and counting steps; OTHER as the wall's remainder,
 * never negative; the JSON round trip across a restart (pending and
 * lost_seconds become lost); malformed documents refused with nothing
 * changed; Young-Daly against hand-computed values; and every misuse. */
#include "testutil.h"

#include "posttrain/posttrain.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static pt_goodput *make(void)
{
    pt_goodput *gp;
    ck_assert_ok(pt_goodput_create(&gp));
    ck_assert_ptr_nonnull(gp);
    return gp;
}

static pt_goodput_report report(const pt_goodput *gp)
{
    pt_goodput_report r;
    ck_assert_ok(pt_goodput_report_init(&r));
    ck_assert_ok(pt_goodput_get(&r, gp));
    return r;
}

/* Everything but the wall clock's share (wall, OTHER, goodput) bit for bit. */
static void assert_same_totals(const pt_goodput_report *a, const pt_goodput_report *b, const char *what)
{
    for (int k = 0; k < PT_TIME_OTHER; k++)
        ck_assert_msg(a->seconds[k] == b->seconds[k], "%s: seconds[%s] %.17g != %.17g", what,
                      pt_time_kind_name(k), a->seconds[k], b->seconds[k]);
    ck_assert_msg(a->pending == b->pending, "%s: pending %.17g != %.17g", what, a->pending, b->pending);
    ck_assert_msg(a->steps_kept == b->steps_kept && a->steps_lost == b->steps_lost,
                  "%s: steps %lld/%lld != %lld/%lld", what, (long long)a->steps_kept,
                  (long long)a->steps_lost, (long long)b->steps_kept, (long long)b->steps_lost);
}

/* The derived fields of one report agree with its other fields. */
static void assert_consistent(const pt_goodput_report *r)
{
    double rest = r->wall - r->pending;
    for (int k = 0; k < PT_TIME_OTHER; k++)
        rest -= r->seconds[k];
    ck_assert_msg(r->seconds[PT_TIME_OTHER] == (rest > 0 ? rest : 0.0), "other %.17g, wall rest %.17g",
                  r->seconds[PT_TIME_OTHER], rest);
    ck_assert(r->seconds[PT_TIME_OTHER] >= 0);
    ck_assert(r->wall > 0);
    ck_assert(r->goodput == (r->seconds[PT_TIME_STEP] + r->seconds[PT_TIME_GENERATE]) / r->wall);
}

START_TEST(test_names)
{
    static const char *const names[PT_TIME_KINDS] = { "step", "generate", "wait", "save", "load",
                                                      "startup", "eval", "lost", "other" };
    ck_assert_int_eq(PT_TIME_KINDS, 9);
    ck_assert_int_eq(PT_TIME_OTHER, 8);
    for (int k = 0; k < PT_TIME_KINDS; k++) {
        ck_assert_str_eq(pt_time_kind_name(k), names[k]);
        int v = -1;
        ck_assert_ok(pt_time_kind_from_name(&v, names[k]));
        ck_assert_int_eq(v, k);
    }
    ck_assert_ptr_null(pt_time_kind_name(-1));
    ck_assert_ptr_null(pt_time_kind_name(PT_TIME_KINDS));
    int v = 5;
    ck_assert_status(pt_time_kind_from_name(&v, "steps"), PT_EINVAL,
                     "step, generate, wait, save, load, startup, eval, lost, other");
    ck_assert_int_eq(v, 5);
    ck_assert_int_eq(pt_has_feature("goodput"), 1);
}
END_TEST

/* Adds of binary fractions sum exactly; STEP and GENERATE wait in pending
 * until the commit. */
START_TEST(test_adds_exact)
{
    pt_goodput *gp = make();
    pt_goodput_report r = report(gp);
    for (int k = 0; k < PT_TIME_OTHER; k++)
        ck_assert(r.seconds[k] == 0);
    ck_assert(r.pending == 0 && r.steps_kept == 0 && r.steps_lost == 0);

    const double add[PT_TIME_OTHER] = { 1.5, 0.25, 0.5, 2, 0.125, 3, 0.75, 1 };
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < PT_TIME_OTHER; k++)
            ck_assert_ok(pt_goodput_add(gp, k, add[k]));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_SAVE, 0));
    r = report(gp);
    ck_assert(r.seconds[PT_TIME_STEP] == 0 && r.seconds[PT_TIME_GENERATE] == 0);
    ck_assert(r.pending == 3.5);
    for (int k = PT_TIME_WAIT; k < PT_TIME_OTHER; k++)
        ck_assert_msg(r.seconds[k] == 2 * add[k], "%s: %.17g", pt_time_kind_name(k), r.seconds[k]);
    ck_assert(r.goodput == 0);
    ck_assert_ok(pt_goodput_commit(gp));
    r = report(gp);
    ck_assert(r.seconds[PT_TIME_STEP] == 3 && r.seconds[PT_TIME_GENERATE] == 0.5);
    ck_assert(r.pending == 0);
    ck_assert(r.seconds[PT_TIME_LOST] == 2);   /* a commit leaves LOST alone */
    /* wall time is far below what was added here: OTHER stays 0 */
    ck_assert(r.seconds[PT_TIME_OTHER] == 0);
    assert_consistent(&r);
    ck_assert(r.goodput == 3.5 / r.wall);
    ck_assert(r.goodput > 1);   /* more attributed than the wall: the host's business */
    pt_goodput_free(gp);
}
END_TEST

/* begin/end time a section on the accountant's clock; an open section counts
 * up to now in the report. */
START_TEST(test_sections)
{
    pt_goodput *gp = make();
    ck_assert_ok(pt_goodput_begin(gp, PT_TIME_SAVE));
    sleep_ms(30);
    pt_goodput_report mid = report(gp);
    ck_assert_msg(mid.seconds[PT_TIME_SAVE] >= 0.03, "open section so far %g", mid.seconds[PT_TIME_SAVE]);
    ck_assert(mid.seconds[PT_TIME_SAVE] <= mid.wall);
    ck_assert_ok(pt_goodput_end(gp));
    pt_goodput_report r = report(gp);
    ck_assert(r.seconds[PT_TIME_SAVE] >= mid.seconds[PT_TIME_SAVE]);
    ck_assert(r.seconds[PT_TIME_SAVE] <= r.wall);
    ck_assert(r.wall >= mid.wall);
    double save = r.seconds[PT_TIME_SAVE];
    sleep_ms(10);
    r = report(gp);
    ck_assert(r.seconds[PT_TIME_SAVE] == save);   /* closed: it no longer grows */
    ck_assert(r.seconds[PT_TIME_OTHER] >= 0.01);

    /* a STEP section goes to pending, and the rollback makes it LOST */
    ck_assert_ok(pt_goodput_begin(gp, PT_TIME_STEP));
    sleep_ms(20);
    mid = report(gp);
    ck_assert(mid.pending >= 0.02 && mid.seconds[PT_TIME_STEP] == 0);
    ck_assert_ok(pt_goodput_end(gp));
    r = report(gp);
    double step = r.pending;
    ck_assert(step >= mid.pending);
    ck_assert_ok(pt_goodput_rollback(gp));
    r = report(gp);
    ck_assert(r.pending == 0 && r.seconds[PT_TIME_LOST] == step && r.seconds[PT_TIME_STEP] == 0);
    assert_consistent(&r);

    /* a commit while a STEP section is open commits what was pending before
     * it; the section's time is pending when it ends */
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 0.5));
    ck_assert_ok(pt_goodput_begin(gp, PT_TIME_STEP));
    ck_assert_ok(pt_goodput_commit(gp));
    sleep_ms(5);
    ck_assert_ok(pt_goodput_end(gp));
    r = report(gp);
    ck_assert(r.seconds[PT_TIME_STEP] == 0.5 && r.pending >= 0.005);
    pt_goodput_free(gp);
}
END_TEST

START_TEST(test_commit_rollback_steps)
{
    pt_goodput *gp = make();
    for (int i = 0; i < 3; i++)
        ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 2));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_GENERATE, 1));
    ck_assert_ok(pt_goodput_rollback(gp));
    pt_goodput_report r = report(gp);
    ck_assert_int_eq(r.steps_kept, 0);
    ck_assert_int_eq(r.steps_lost, 3);
    ck_assert(r.seconds[PT_TIME_LOST] == 3 && r.pending == 0);
    ck_assert(r.seconds[PT_TIME_STEP] == 0 && r.seconds[PT_TIME_GENERATE] == 0);

    for (int i = 0; i < 2; i++)
        ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 4));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_GENERATE, 0.5));
    ck_assert_ok(pt_goodput_commit(gp));
    r = report(gp);
    ck_assert_int_eq(r.steps_kept, 2);
    ck_assert_int_eq(r.steps_lost, 3);
    ck_assert(r.seconds[PT_TIME_STEP] == 4 && r.seconds[PT_TIME_GENERATE] == 0.5);
    ck_assert(r.seconds[PT_TIME_LOST] == 3 && r.pending == 0);

    /* nothing pending: commit and rollback change nothing */
    pt_goodput_report before = report(gp);
    ck_assert_ok(pt_goodput_commit(gp));
    ck_assert_ok(pt_goodput_rollback(gp));
    r = report(gp);
    assert_same_totals(&r, &before, "empty commit and rollback");

    /* a rollback never touches what was committed */
    ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 1));
    ck_assert_ok(pt_goodput_rollback(gp));
    r = report(gp);
    ck_assert(r.seconds[PT_TIME_STEP] == 4 && r.seconds[PT_TIME_LOST] == 4);
    ck_assert_int_eq(r.steps_kept, 2);
    ck_assert_int_eq(r.steps_lost, 4);
    pt_goodput_free(gp);
}
END_TEST

/* OTHER is the wall's remainder and never negative. */
START_TEST(test_other)
{
    pt_goodput *gp = make();
    sleep_ms(20);
    pt_goodput_report r = report(gp);
    ck_assert(r.seconds[PT_TIME_OTHER] == r.wall);   /* nothing attributed */
    ck_assert(r.wall >= 0.02);
    ck_assert(r.goodput == 0);
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_EVAL, 0.001));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 0.002));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_GENERATE, 0.004));
    ck_assert_ok(pt_goodput_commit(gp));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 0.008));
    r = report(gp);
    assert_consistent(&r);
    ck_assert(fabs(r.seconds[PT_TIME_OTHER] - (r.wall - 0.015)) < 1e-12);
    double sum = r.pending;
    for (int k = 0; k < PT_TIME_KINDS; k++)
        sum += r.seconds[k];
    ck_assert(fabs(sum - r.wall) < 1e-12);          /* every second accounted once */
    ck_assert(fabs(r.goodput - 0.006 / r.wall) < 1e-15);
    /* more attributed than the wall: OTHER is 0, not negative */
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_WAIT, 1e6));
    r = report(gp);
    ck_assert(r.seconds[PT_TIME_OTHER] == 0);
    assert_consistent(&r);
    pt_goodput_free(gp);
}
END_TEST

static double json_number(const cJSON *root, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    ck_assert_msg(cJSON_IsNumber(it), "key '%s' is not a number", key);
    return it->valuedouble;
}

/* The keys of pt_goodput_to_json, in its order. */
static const char *const k_keys[] = { "wall", "step", "generate", "wait", "save", "load", "startup",
                                      "eval", "lost", "pending", "steps_kept", "steps_lost",
                                      "steps_pending" };
#define N_KEYS (sizeof k_keys / sizeof *k_keys)

/* An accountant with every kind, kept and lost steps, and 2 pending steps
 * of 0.5 s. */
static pt_goodput *sample(void)
{
    pt_goodput *gp = make();
    const double add[PT_TIME_OTHER] = { 1.5, 0.25, 0.5, 2, 0.125, 3, 0.75, 1 };
    for (int k = 0; k < PT_TIME_OTHER; k++)
        ck_assert_ok(pt_goodput_add(gp, k, add[k]));
    for (int i = 0; i < 3; i++)
        ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_commit(gp));
    ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_rollback(gp));
    for (int i = 0; i < 2; i++)
        ck_assert_ok(pt_goodput_step_done(gp));
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 0.5));
    return gp;
}

START_TEST(test_json_round_trip)
{
    pt_goodput *a = sample();
    char *json;
    ck_assert_ok(pt_goodput_to_json(&json, a));
    pt_goodput_report ra = report(a);
    cJSON *doc = cJSON_Parse(json);
    ck_assert_msg(cJSON_IsObject(doc), "not an object: %s", json);
    int n = 0;
    for (const cJSON *m = doc->child; m; m = m->next, n++) {
        ck_assert_msg((size_t)n < N_KEYS && !strcmp(m->string, k_keys[n]), "key %d '%s' in %s", n,
                      m->string, json);
    }
    ck_assert_int_eq(n, N_KEYS);
    double wall = json_number(doc, "wall");
    ck_assert(wall > 0 && wall <= ra.wall);
    for (int k = 0; k < PT_TIME_OTHER; k++)
        ck_assert(json_number(doc, pt_time_kind_name(k)) == ra.seconds[k]);
    ck_assert(json_number(doc, "pending") == 0.5);
    ck_assert(json_number(doc, "steps_kept") == 3);
    ck_assert(json_number(doc, "steps_lost") == 1);
    ck_assert(json_number(doc, "steps_pending") == 2);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(doc, "other"));   /* derived, not stored */
    cJSON_Delete(doc);

    /* the resumed process: its own startup, then the restore */
    pt_goodput *b = make();
    ck_assert_ok(pt_goodput_add(b, PT_TIME_STARTUP, 0.25));
    ck_assert_ok(pt_goodput_step_done(b));   /* stays pending */
    ck_assert_ok(pt_goodput_restore(b, json, 10, 4));
    pt_goodput_report rb = report(b);
    ck_assert(rb.wall >= wall + 10);
    for (int k = 0; k < PT_TIME_OTHER; k++) {
        double want = ra.seconds[k];
        if (k == PT_TIME_STARTUP)
            want += 0.25;
        if (k == PT_TIME_LOST)
            want += 0.5 + 10;   /* the saved pending time and lost_seconds */
        ck_assert_msg(rb.seconds[k] == want, "%s: %.17g, want %.17g", pt_time_kind_name(k),
                      rb.seconds[k], want);
    }
    ck_assert(rb.pending == 0);
    ck_assert_int_eq(rb.steps_kept, 3);
    ck_assert_int_eq(rb.steps_lost, 1 + 2 + 4);
    assert_consistent(&rb);
    /* b's own pending step is still pending: kept at the commit */
    ck_assert_ok(pt_goodput_commit(b));
    ck_assert_int_eq(report(b).steps_kept, 4);

    /* restore once */
    pt_goodput_report before = report(b);
    ck_assert_status(pt_goodput_restore(b, json, 0, 0), PT_ESTATE, "already restored");
    pt_goodput_report after = report(b);
    assert_same_totals(&after, &before, "second restore");
    ck_assert(after.wall < before.wall + 1);

    /* a checkpoint's JSON after its commit: nothing pending, so nothing
     * becomes lost; the totals carry over exactly */
    char *json2;
    ck_assert_ok(pt_goodput_to_json(&json2, b));
    pt_goodput *c = make();
    ck_assert_ok(pt_goodput_restore(c, json2, 0, 0));
    pt_goodput_report rc = report(c), rb2 = report(b);
    assert_same_totals(&rc, &rb2, "restored after commit");
    ck_assert(rc.wall >= before.wall);
    pt_free(json2);
    pt_free(json);
    pt_goodput_free(a);
    pt_goodput_free(b);
    pt_goodput_free(c);
}
END_TEST

/* Restore `text` into gp: the status, the key in the message, and nothing
 * changed. */
static void expect_bad(pt_goodput *gp, const char *text, int status, const char *needle)
{
    pt_goodput_report before = report(gp);
    int st = pt_goodput_restore(gp, text, 1, 1);
    ck_assert_msg(st == status, "restore of %s returned %s (%s), expected %s", text,
                  pt_status_name(st), pt_last_error(), pt_status_name(status));
    ck_assert_msg(strstr(pt_last_error(), needle) != NULL, "restore of %s: message '%s' lacks '%s'",
                  text, pt_last_error(), needle);
    ck_assert_msg(strncmp(pt_last_error(), "pt_goodput_restore: ", 20) == 0, "message '%s'",
                  pt_last_error());
    pt_goodput_report after = report(gp);
    assert_same_totals(&after, &before, text);
    ck_assert(after.wall - before.wall < 1);   /* lost_seconds was not added */
}

/* The valid document with `key` replaced by `value` (NULL: removed). */
static char *with_key(const char *json, const char *key, cJSON *value)
{
    cJSON *doc = cJSON_Parse(json);
    ck_assert_ptr_nonnull(doc);
    if (value)
        ck_assert(cJSON_ReplaceItemInObjectCaseSensitive(doc, key, value));
    else
        cJSON_DeleteItemFromObjectCaseSensitive(doc, key);
    char *s = cJSON_PrintUnformatted(doc);
    ck_assert_ptr_nonnull(s);
    cJSON_Delete(doc);
    return s;
}

START_TEST(test_malformed)
{
    pt_goodput *src = sample();
    char *json;
    ck_assert_ok(pt_goodput_to_json(&json, src));
    pt_goodput *gp = make();
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_STEP, 0.25));
    ck_assert_ok(pt_goodput_step_done(gp));

    for (size_t i = 0; i < N_KEYS; i++) {
        const char *key = k_keys[i];
        bool count = !strncmp(key, "steps_", 6);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", key);
        char *s = with_key(json, key, NULL);
        expect_bad(gp, s, PT_EFORMAT, "required field");
        expect_bad(gp, s, PT_EFORMAT, quoted);
        free(s);
        s = with_key(json, key, cJSON_CreateNull());   /* null is absent */
        expect_bad(gp, s, PT_EFORMAT, quoted);
        free(s);
        s = with_key(json, key, cJSON_CreateString("1"));
        expect_bad(gp, s, PT_EFORMAT, quoted);
        expect_bad(gp, s, PT_EFORMAT, "got a string");
        free(s);
        s = with_key(json, key, cJSON_CreateTrue());
        expect_bad(gp, s, PT_EFORMAT, quoted);
        free(s);
        s = with_key(json, key, cJSON_CreateNumber(-1));
        expect_bad(gp, s, PT_EFORMAT, quoted);
        free(s);
        s = with_key(json, key, cJSON_CreateNumber(count ? 1e17 : 1e300));
        expect_bad(gp, s, PT_EFORMAT, quoted);
        free(s);
        if (count) {
            s = with_key(json, key, cJSON_CreateNumber(1.5));
            expect_bad(gp, s, PT_EFORMAT, quoted);
            free(s);
        }
    }
    expect_bad(gp, "", PT_EFORMAT, "not valid JSON");
    expect_bad(gp, "{\"wall\": ", PT_EFORMAT, "not valid JSON");
    expect_bad(gp, "[1, 2]", PT_EFORMAT, "must be a JSON object, got an array");
    expect_bad(gp, "0.5", PT_EFORMAT, "must be a JSON object, got a number");
    char *trail = malloc(strlen(json) + 8);
    ck_assert_ptr_nonnull(trail);
    strcpy(trail, json);
    strcat(trail, " {}");
    expect_bad(gp, trail, PT_EFORMAT, "after its JSON value");
    /* a key given twice */
    strcpy(trail, "{\"wall\": 1, ");
    char *dup = malloc(strlen(json) + 16);
    ck_assert_ptr_nonnull(dup);
    sprintf(dup, "%s%s", trail, json + 1);
    expect_bad(gp, dup, PT_EFORMAT, "duplicate key 'wall'");
    free(dup);
    free(trail);

    /* bad arguments: PT_EINVAL naming them, nothing changed */
    pt_goodput_report before = report(gp);
    ck_assert_status(pt_goodput_restore(NULL, json, 0, 0), PT_EINVAL, "pt_goodput_restore: gp is NULL");
    ck_assert_status(pt_goodput_restore(gp, NULL, 0, 0), PT_EINVAL, "pt_goodput_restore: json is NULL");
    const double bad_s[] = { -1, NAN, INFINITY, -INFINITY, 2e12 };
    for (size_t i = 0; i < sizeof bad_s / sizeof *bad_s; i++)
        ck_assert_status(pt_goodput_restore(gp, json, bad_s[i], 0), PT_EINVAL,
                         "pt_goodput_restore: lost_seconds must be finite");
    ck_assert_status(pt_goodput_restore(gp, json, 0, -1), PT_EINVAL, "pt_goodput_restore: lost_steps");
    ck_assert_status(pt_goodput_restore(gp, json, 0, INT64_MAX), PT_EINVAL, "lost_steps");
    pt_goodput_report after = report(gp);
    assert_same_totals(&after, &before, "bad arguments");

    /* unknown keys are ignored; and after all those failures the accountant
     * still takes its one restore */
    char *extra = with_key(json, "steps_kept", NULL);
    cJSON *doc = cJSON_Parse(extra);
    cJSON_AddNumberToObject(doc, "steps_kept", 3);
    cJSON_AddStringToObject(doc, "comment", "from a newer library");
    cJSON_AddNumberToObject(doc, "other", 12345);
    char *s = cJSON_Print(doc);   /* formatted: whitespace everywhere */
    cJSON_Delete(doc);
    free(extra);
    ck_assert_ok(pt_goodput_restore(gp, s, 0, 0));
    pt_goodput_report r = report(gp), rs = report(src);
    ck_assert_int_eq(r.steps_kept, 3);
    ck_assert_int_eq(r.steps_lost, 1 + 2);
    ck_assert(r.pending == 0.25);   /* its own */
    ck_assert(r.seconds[PT_TIME_LOST] == rs.seconds[PT_TIME_LOST] + 0.5);
    free(s);
    pt_free(json);
    pt_goodput_free(gp);
    pt_goodput_free(src);
}
END_TEST

START_TEST(test_young_daly)
{
    double t = -1;
    ck_assert_ok(pt_checkpoint_interval_young_daly(&t, 60, 86400));
    ck_assert_msg(fabs(t - 3219.937887599697) < 1e-9, "%.17g", t);   /* sqrt(10368000) */
    ck_assert(round(t * 100) / 100 == 3219.94);
    ck_assert_ok(pt_checkpoint_interval_young_daly(&t, 1, 2));
    ck_assert(t == 2);
    ck_assert_ok(pt_checkpoint_interval_young_daly(&t, 300, 7 * 86400));
    ck_assert_msg(fabs(t - 19049.40943966505) < 1e-8, "%.17g", t);   /* sqrt(362880000) */
    ck_assert_ok(pt_checkpoint_interval_young_daly(&t, 30, 3600));
    ck_assert_msg(fabs(t - 464.75800154489) < 1e-9, "%.17g", t);     /* sqrt(216000) */
    /* beyond the product's range, the square roots apart */
    ck_assert_ok(pt_checkpoint_interval_young_daly(&t, 1e300, 1e300));
    ck_assert_msg(fabs(t / 1.4142135623730951e300 - 1) < 1e-15, "%.17g", t);
    ck_assert_ok(pt_checkpoint_interval_young_daly(&t, 1e-300, 1e-300));
    ck_assert_msg(fabs(t / 1.4142135623730951e-300 - 1) < 1e-15, "%.17g", t);
    t = 7;
    ck_assert_status(pt_checkpoint_interval_young_daly(&t, DBL_MAX, DBL_MAX), PT_ERANGE, "not a finite");
    ck_assert(t == 7);

    const double bad[] = { 0, -0.0, -60, NAN, INFINITY, -INFINITY };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_status(pt_checkpoint_interval_young_daly(&t, bad[i], 86400), PT_EINVAL,
                         "pt_checkpoint_interval_young_daly: checkpoint_seconds must be finite and > 0");
        ck_assert_status(pt_checkpoint_interval_young_daly(&t, 60, bad[i]), PT_EINVAL,
                         "pt_checkpoint_interval_young_daly: mtbf_seconds must be finite and > 0");
        ck_assert(t == 7);
    }
    ck_assert_status(pt_checkpoint_interval_young_daly(NULL, 60, 86400), PT_EINVAL,
                     "interval_seconds is NULL");
}
END_TEST

START_TEST(test_misuse)
{
    pt_goodput *gp = make();
    ck_assert_ok(pt_goodput_add(gp, PT_TIME_WAIT, 0.5));
    pt_goodput_report before = report(gp), after;

    ck_assert_status(pt_goodput_end(gp), PT_ESTATE, "pt_goodput_end: no section is open");
    const int bad_kinds[] = { -1, PT_TIME_KINDS, 100 };
    for (size_t i = 0; i < sizeof bad_kinds / sizeof *bad_kinds; i++) {
        ck_assert_status(pt_goodput_add(gp, bad_kinds[i], 1), PT_EINVAL,
                         "pt_goodput_add: kind");
        ck_assert_status(pt_goodput_add(gp, bad_kinds[i], 1), PT_EINVAL, "is not a pt_time_kind");
        ck_assert_status(pt_goodput_begin(gp, bad_kinds[i]), PT_EINVAL,
                         "pt_goodput_begin: kind");
    }
    ck_assert_status(pt_goodput_add(gp, PT_TIME_OTHER, 1), PT_EINVAL, "pt_goodput_add: kind 'other'");
    ck_assert_status(pt_goodput_begin(gp, PT_TIME_OTHER), PT_EINVAL, "pt_goodput_begin: kind 'other'");
    const double bad_s[] = { -1, -1e-300, NAN, INFINITY, -INFINITY, 1.5e12 };
    for (size_t i = 0; i < sizeof bad_s / sizeof *bad_s; i++)
        for (int k = 0; k < PT_TIME_OTHER; k++)
            ck_assert_status(pt_goodput_add(gp, k, bad_s[i]), PT_EINVAL,
                             "pt_goodput_add: seconds must be finite and in [0, 1e12]");
    after = report(gp);
    assert_same_totals(&after, &before, "refused adds");

    /* sections do not nest; a refused begin leaves the open section alone */
    ck_assert_ok(pt_goodput_begin(gp, PT_TIME_SAVE));
    ck_assert_status(pt_goodput_begin(gp, PT_TIME_SAVE), PT_ESTATE,
                     "pt_goodput_begin: the 'save' section is still open");
    ck_assert_status(pt_goodput_begin(gp, PT_TIME_EVAL), PT_ESTATE, "'save' section");
    ck_assert_status(pt_goodput_begin(gp, PT_TIME_OTHER), PT_EINVAL, "kind 'other'");
    ck_assert_ok(pt_goodput_end(gp));
    ck_assert_status(pt_goodput_end(gp), PT_ESTATE, "no section is open");
    after = report(gp);
    ck_assert(after.seconds[PT_TIME_SAVE] > 0 && after.seconds[PT_TIME_EVAL] == 0);
    ck_assert(after.seconds[PT_TIME_WAIT] == 0.5);

    /* NULL everywhere */
    pt_goodput_report r;
    ck_assert_ok(pt_goodput_report_init(&r));
    char *json = (char *)"unchanged";
    ck_assert_status(pt_goodput_create(NULL), PT_EINVAL, "pt_goodput_create: out is NULL");
    ck_assert_status(pt_goodput_add(NULL, PT_TIME_STEP, 1), PT_EINVAL, "pt_goodput_add: gp is NULL");
    ck_assert_status(pt_goodput_begin(NULL, PT_TIME_STEP), PT_EINVAL, "pt_goodput_begin: gp is NULL");
    ck_assert_status(pt_goodput_end(NULL), PT_EINVAL, "pt_goodput_end: gp is NULL");
    ck_assert_status(pt_goodput_step_done(NULL), PT_EINVAL, "pt_goodput_step_done: gp is NULL");
    ck_assert_status(pt_goodput_commit(NULL), PT_EINVAL, "pt_goodput_commit: gp is NULL");
    ck_assert_status(pt_goodput_rollback(NULL), PT_EINVAL, "pt_goodput_rollback: gp is NULL");
    ck_assert_status(pt_goodput_get(&r, NULL), PT_EINVAL, "pt_goodput_get: gp is NULL");
    ck_assert_status(pt_goodput_get(NULL, gp), PT_EINVAL, "pt_goodput_get: r is NULL");
    ck_assert_status(pt_goodput_report_init(NULL), PT_EINVAL, "pt_goodput_report_init: r is NULL");
    ck_assert_status(pt_goodput_to_json(&json, NULL), PT_EINVAL, "pt_goodput_to_json: gp is NULL");
    ck_assert_ptr_null(json);
    ck_assert_status(pt_goodput_to_json(NULL, gp), PT_EINVAL, "pt_goodput_to_json: json is NULL");
    pt_goodput_free(NULL);
    pt_goodput_free(gp);

    /* the largest add; totals of many of them stay finite */
    gp = make();
    for (int i = 0; i < 1000; i++)
        ck_assert_ok(pt_goodput_add(gp, PT_TIME_WAIT, 1e12));
    r = report(gp);
    ck_assert(r.seconds[PT_TIME_WAIT] == 1e15 && r.seconds[PT_TIME_OTHER] == 0);
    ck_assert_ok(pt_goodput_to_json(&json, gp));
    ck_assert_msg(strstr(json, "\"wait\": 1e+15") != NULL, "%s", json);
    pt_free(json);
    pt_goodput_free(gp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("goodput");
    TCase *tc = tcase_create("goodput");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_adds_exact);
    tcase_add_test(tc, test_sections);
    tcase_add_test(tc, test_commit_rollback_steps);
    tcase_add_test(tc, test_other);
    tcase_add_test(tc, test_json_round_trip);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_young_daly);
    tcase_add_test(tc, test_misuse);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
