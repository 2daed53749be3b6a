/* The goodput accountant (include/posttrain/goodput.h, docs/goodput.md): a
 * wall clock, per-kind totals with STEP and GENERATE pending until committed,
 * the totals as JSON across restarts, and the Young-Daly interval. */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/json.h"
#include "posttrain/goodput.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The largest seconds one pt_goodput_add (or lost_seconds) may carry, and
 * the largest total a restored document may hold: 31 700 and 31.7 million
 * years, far beyond any run (a larger value is a unit mistake), and small
 * enough that no sum of them can overflow. */
#define MAX_ADD_SECONDS 1e12
#define MAX_SAVED_SECONDS 1e15
/* Step counts read back from JSON: integers a double holds exactly. */
#define MAX_SAVED_STEPS ((int64_t)1 << 53)

static const pt_enum_entry k_time_kind_names[] = {
    { PT_TIME_STEP, "step" },
    { PT_TIME_GENERATE, "generate" },
    { PT_TIME_WAIT, "wait" },
    { PT_TIME_SAVE, "save" },
    { PT_TIME_LOAD, "load" },
    { PT_TIME_STARTUP, "startup" },
    { PT_TIME_EVAL, "eval" },
    { PT_TIME_LOST, "lost" },
    { PT_TIME_OTHER, "other" },
};
PT_ENUM_NAME_FUNCS(pt_time_kind, k_time_kind_names, "time kind")

struct pt_goodput {
    double start;                 /* pt__now() at pt_goodput_create */
    double restored_wall;         /* a restored document's wall, plus lost_seconds */
    double total[PT_TIME_KINDS];  /* committed STEP and GENERATE, every other kind; [OTHER] unused */
    double pending[2];            /* STEP, GENERATE not yet committed */
    int64_t steps_kept, steps_lost, steps_pending;
    int section;                  /* the open section's kind, or -1 */
    double section_start;         /* pt__now() at pt_goodput_begin */
    bool restored;
};

static bool is_pending_kind(int kind)
{
    return kind == PT_TIME_STEP || kind == PT_TIME_GENERATE;
}

static double seconds_between(double a, double b)
{
    return b - a > 0 ? b - a : 0.0;
}

/* PT_EINVAL naming `func` unless kind is a pt_time_kind that may be added. */
static int check_kind(int kind, const char *func)
{
    if (kind < 0 || kind >= PT_TIME_KINDS)
        return pt__err_arg(func, "kind", "%d is not a pt_time_kind (0 .. %d)", kind, PT_TIME_KINDS - 1);
    if (kind == PT_TIME_OTHER)
        return pt__err_arg(func, "kind", "'other' cannot be added: it is the wall time nothing "
                          "else accounts for, derived by pt_goodput_get");
    return PT_OK;
}

/* Add checked seconds to kind (pending for STEP and GENERATE). */
static void add_seconds(pt_goodput *gp, int kind, double seconds)
{
    if (is_pending_kind(kind))
        gp->pending[kind] += seconds;
    else
        gp->total[kind] += seconds;
}

int pt_goodput_create(pt_goodput **out)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    pt_goodput *gp = pt__calloc(1, sizeof *gp);
    if (!gp)
        return PT_ENOMEM;
    gp->section = -1;
    gp->start = pt__now();
    *out = gp;
    return PT_OK;
}

void pt_goodput_free(pt_goodput *gp)
{
    pt_free(gp);
}

int pt_goodput_add(pt_goodput *gp, int kind, double seconds)
{
    PT_CHECK_NULL(gp);
    int st = check_kind(kind, __func__);
    if (st)
        return st;
    PT_CHECK_ARG(isfinite(seconds) && seconds >= 0 && seconds <= MAX_ADD_SECONDS, seconds,
                 "must be finite and in [0, 1e12] (got %g)", seconds);
    add_seconds(gp, kind, seconds);
    return PT_OK;
}

int pt_goodput_begin(pt_goodput *gp, int kind)
{
    PT_CHECK_NULL(gp);
    int st = check_kind(kind, __func__);
    if (st)
        return st;
    if (gp->section >= 0)
        return pt__err(PT_ESTATE, "%s: the '%s' section is still open (sections do not nest: "
                      "call pt_goodput_end first)", __func__, pt_time_kind_name(gp->section));
    gp->section_start = pt__now();
    gp->section = kind;
    return PT_OK;
}

int pt_goodput_end(pt_goodput *gp)
{
    PT_CHECK_NULL(gp);
    if (gp->section < 0)
        return pt__err(PT_ESTATE, "%s: no section is open (call pt_goodput_begin first)", __func__);
    add_seconds(gp, gp->section, seconds_between(gp->section_start, pt__now()));
    gp->section = -1;
    return PT_OK;
}

int pt_goodput_switch(pt_goodput *gp, int kind)
{
    PT_CHECK_NULL(gp);
    if (gp->section >= 0)
        pt_goodput_end(gp);
    return kind == -1 ? PT_OK : pt_goodput_begin(gp, kind);
}

double pt_now(void)
{
    return pt__now();
}

int pt_goodput_step_done(pt_goodput *gp)
{
    PT_CHECK_NULL(gp);
    gp->steps_pending++;
    return PT_OK;
}

int pt_goodput_commit(pt_goodput *gp)
{
    PT_CHECK_NULL(gp);
    gp->total[PT_TIME_STEP] += gp->pending[PT_TIME_STEP];
    gp->total[PT_TIME_GENERATE] += gp->pending[PT_TIME_GENERATE];
    gp->pending[PT_TIME_STEP] = gp->pending[PT_TIME_GENERATE] = 0;
    gp->steps_kept += gp->steps_pending;
    gp->steps_pending = 0;
    return PT_OK;
}

int pt_goodput_rollback(pt_goodput *gp)
{
    PT_CHECK_NULL(gp);
    gp->total[PT_TIME_LOST] += gp->pending[PT_TIME_STEP] + gp->pending[PT_TIME_GENERATE];
    gp->pending[PT_TIME_STEP] = gp->pending[PT_TIME_GENERATE] = 0;
    gp->steps_lost += gp->steps_pending;
    gp->steps_pending = 0;
    return PT_OK;
}

PT_ZERO_INIT(pt_goodput_report_init, pt_goodput_report, r)

/* The totals as of now: an open section counts up to now, OTHER is what
 * the wall has beyond everything else (never negative). */
typedef struct snapshot {
    pt_goodput_report r;
    int64_t steps_pending;
} snapshot;

static void take_snapshot(snapshot *s, const pt_goodput *gp)
{
    double now = pt__now();
    pt_goodput_report *r = &s->r;
    pt_goodput_report_init(r);
    r->wall = gp->restored_wall + seconds_between(gp->start, now);
    for (int k = 0; k < PT_TIME_KINDS; k++)
        r->seconds[k] = gp->total[k];
    r->seconds[PT_TIME_OTHER] = 0;
    double pending[2] = { gp->pending[0], gp->pending[1] };
    if (gp->section >= 0) {
        double open = seconds_between(gp->section_start, now);
        if (is_pending_kind(gp->section))
            pending[gp->section] += open;
        else
            r->seconds[gp->section] += open;
    }
    r->pending = pending[PT_TIME_STEP] + pending[PT_TIME_GENERATE];
    double other = r->wall - r->pending;
    for (int k = 0; k < PT_TIME_OTHER; k++)
        other -= r->seconds[k];
    r->seconds[PT_TIME_OTHER] = other > 0 ? other : 0.0;
    r->goodput = r->wall > 0 ? (r->seconds[PT_TIME_STEP] + r->seconds[PT_TIME_GENERATE]) / r->wall
                             : NAN;
    r->steps_kept = gp->steps_kept;
    r->steps_lost = gp->steps_lost;
    s->steps_pending = gp->steps_pending;
}

int pt_goodput_get(pt_goodput_report *r, const pt_goodput *gp)
{
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(gp);
    PT_CHECK_STRUCT_OUT(r, pt_goodput_report, pt_goodput_report_init);
    snapshot s;
    take_snapshot(&s, gp);
    pt__struct_write(r, &s.r);
    return PT_OK;
}

int pt_goodput_to_json(char **json, const pt_goodput *gp)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(gp);
    snapshot s;
    take_snapshot(&s, gp);
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_puts(&b, "{\"wall\": ");
    pt__json_put_double(&b, s.r.wall);
    for (int k = 0; k < PT_TIME_OTHER; k++) {
        pt__strbuf_printf(&b, ", \"%s\": ", pt_time_kind_name(k));
        pt__json_put_double(&b, s.r.seconds[k]);
    }
    pt__strbuf_puts(&b, ", \"pending\": ");
    pt__json_put_double(&b, s.r.pending);
    pt__strbuf_printf(&b, ", \"steps_kept\": %lld, \"steps_lost\": %lld, \"steps_pending\": %lld}",
                     (long long)s.r.steps_kept, (long long)s.r.steps_lost,
                     (long long)s.steps_pending);
    char *text = pt__strbuf_detach(&b, NULL);
    if (!text)
        return PT_ENOMEM;
    *json = text;
    return PT_OK;
}

/* What a pt_goodput_to_json document holds. */
typedef struct saved {
    double wall, seconds[PT_TIME_OTHER], pending;
    int64_t steps_kept, steps_lost, steps_pending;
} saved;

static int read_seconds(double *out, const cJSON *root, const pt_json_ctx *c, const char *key)
{
    int st = pt__json_get_double(out, NULL, root, c, key, true);
    if (st)
        return st;
    if (!(*out >= 0 && *out <= MAX_SAVED_SECONDS))
        return pt__err(PT_EFORMAT, "%s: '%s' = %g must be in [0, 1e15]", c->file, key, *out);
    return PT_OK;
}

static int read_saved(saved *s, const char *json, const char *func)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, false);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t n = strlen(json);
        size_t off = at && at >= json && at <= json + n ? (size_t)(at - json) : 0;
        return pt__err(PT_EFORMAT, "%s: json is not valid JSON (near byte %zu)", func, off);
    }
    int st = PT_OK;
    for (const char *p = end; p && *p; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = pt__err(PT_EFORMAT, "%s: json has data after its JSON value (byte %zu)", func,
                        (size_t)(p - json));
            break;
        }
    }
    if (!st && !cJSON_IsObject(root))
        st = pt__err(PT_EFORMAT, "%s: json must be a JSON object, got %s", func,
                    pt__json_type_name(root));
    const pt_json_ctx c = { func, NULL, PT_EFORMAT, false };
    if (!st)
        st = read_seconds(&s->wall, root, &c, "wall");
    for (int k = 0; k < PT_TIME_OTHER && !st; k++)
        st = read_seconds(&s->seconds[k], root, &c, pt_time_kind_name(k));
    if (!st)
        st = read_seconds(&s->pending, root, &c, "pending");
    if (!st)
        st = pt__json_get_i64(&s->steps_kept, NULL, root, &c, "steps_kept", true, 0, MAX_SAVED_STEPS);
    if (!st)
        st = pt__json_get_i64(&s->steps_lost, NULL, root, &c, "steps_lost", true, 0, MAX_SAVED_STEPS);
    if (!st)
        st = pt__json_get_i64(&s->steps_pending, NULL, root, &c, "steps_pending", true, 0,
                             MAX_SAVED_STEPS);
    cJSON_Delete(root);
    return st;
}

int pt_goodput_restore(pt_goodput *gp, const char *json, double lost_seconds, int64_t lost_steps)
{
    PT_CHECK_NULL(gp);
    PT_CHECK_NULL(json);
    PT_CHECK_ARG(isfinite(lost_seconds) && lost_seconds >= 0 && lost_seconds <= MAX_ADD_SECONDS,
                 lost_seconds, "must be finite and in [0, 1e12] (got %g)", lost_seconds);
    PT_CHECK_ARG(lost_steps >= 0 && lost_steps <= MAX_SAVED_STEPS, lost_steps,
                 "must be in [0, 2^53] (got %lld)", (long long)lost_steps);
    if (gp->restored)
        return pt__err(PT_ESTATE, "%s: this accountant was already restored (restore once, into "
                      "a new accountant)", __func__);
    saved s;
    int st = read_saved(&s, json, __func__);
    if (st)
        return st;
    gp->restored_wall += s.wall + lost_seconds;
    for (int k = 0; k < PT_TIME_OTHER; k++)
        gp->total[k] += s.seconds[k];
    gp->total[PT_TIME_LOST] += s.pending + lost_seconds;
    gp->steps_kept += s.steps_kept;
    gp->steps_lost += s.steps_lost + s.steps_pending + lost_steps;
    gp->restored = true;
    return PT_OK;
}

int pt_checkpoint_interval_young_daly(double *interval_seconds, double checkpoint_seconds,
                                      double mtbf_seconds)
{
    PT_CHECK_NULL(interval_seconds);
    PT_CHECK_ARG(isfinite(checkpoint_seconds) && checkpoint_seconds > 0, checkpoint_seconds,
                 "must be finite and > 0 (got %g)", checkpoint_seconds);
    PT_CHECK_ARG(isfinite(mtbf_seconds) && mtbf_seconds > 0, mtbf_seconds,
                 "must be finite and > 0 (got %g)", mtbf_seconds);
    /* One rounding of the product where it is a normal number; the square
     * roots apart where it would overflow or underflow. */
    double p = 2.0 * checkpoint_seconds * mtbf_seconds;
    double t = isfinite(p) && p >= 0x1p-1022 ? sqrt(p)
                                              : sqrt(2.0) * sqrt(checkpoint_seconds) * sqrt(mtbf_seconds);
    if (!isfinite(t))
        return pt__err(PT_ERANGE, "%s: sqrt(2 * %g * %g) is not a finite number", __func__,
                      checkpoint_seconds, mtbf_seconds);
    *interval_seconds = t;
    return PT_OK;
}
