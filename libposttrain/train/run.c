/* The run handle (include/posttrain/run.h, docs/run-directory.md): open and
 * close, checkpoints saved with retention and loaded with the metrics
 * trimmed, and the checkpoint interval (fixed or Young-Daly). */
#include "core/core.h"
#include "io/fileio.h"
#include "posttrain/goodput.h"
#include "run_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char *dup_or(const char *s, const char *def)
{
    return strdup(s ? s : def);
}

void pt__run__note(const pt_run *r, int level, const char *fmt, ...)
{
    if (r->rank != 0 || !r->o.notes)
        return;
    char line[1024] = "", *text = line;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof line && (text = malloc((size_t)n + 1))) { /* a long path */
        va_start(ap, fmt);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    r->o.notes(level, text ? text : line, r->o.notes_user);
    if (text != line)
        free(text);
}

static int copy_options(pt_run *r, const pt_run_options *user)
{
    PT_CHECK_STRUCT_READ(r->o, user, pt_run_options_init);
    const pt_run_options *o = &r->o;
    if (!o->dir || !o->dir[0])
        return pt__err_arg("pt_run_open", "opts->dir", "is required (the run directory)");
    if (!pt__run__kind_ok(o->kind))
        return pt__err_arg("pt_run_open", "opts->kind", "must be 1 to 63 of a-z, 0-9, '_', '.', '-' (got \"%s\")",
                          o->kind ? o->kind : "(null)");
    if (o->start < PT_RUN_NEW || o->start > PT_RUN_RESUME_FROM)
        return pt__err_arg("pt_run_open", "opts->start", "%d is not a pt_run_start", o->start);
    if ((o->start == PT_RUN_RESUME_FROM) != (o->resume_from != NULL))
        return pt__err_arg("pt_run_open", "opts->resume_from", "is given %s PT_RUN_RESUME_FROM",
                          o->resume_from ? "without" : "NULL with");
    if (o->n_inputs && !o->inputs)
        return pt__err_arg("pt_run_open", "opts->inputs", "is NULL with n_inputs %zu", o->n_inputs);
    if (o->keep_last < 0 || o->keep_every < 0 || o->save_every < 0)
        return pt__err_arg("pt_run_open", "opts->keep_last", "keep_last, keep_every and save_every must be >= 0");
    if (o->check_every < 0 || o->max_rollbacks < 0)
        return pt__err_arg("pt_run_open", "opts->check_every", "check_every and max_rollbacks must be >= 0");
    if (o->on_mismatch != PT_RUN_ROLLBACK && o->on_mismatch != PT_RUN_STOP)
        return pt__err_arg("pt_run_open", "opts->on_mismatch", "must be PT_RUN_ROLLBACK or PT_RUN_STOP (got %d)",
                          o->on_mismatch);
    if (o->save_auto && !(isfinite(o->mtbf_seconds) && o->mtbf_seconds > 0))
        return pt__err_arg("pt_run_open", "opts->mtbf_seconds", "must be finite and > 0 with save_auto (got %g)",
                          o->mtbf_seconds);
    r->dir = strdup(o->dir);
    r->kind = strdup(o->kind);
    r->metrics = o->metrics ? strdup(o->metrics) : pt__path_join(o->dir, "metrics.jsonl");
    r->resume_from = o->resume_from ? strdup(o->resume_from) : NULL;
    r->dir_name = dup_or(o->dir_name, "--out");
    r->metrics_name = dup_or(o->metrics_name, "--metrics");
    r->resume_name = dup_or(o->resume_name, "--resume");
    r->save_name = dup_or(o->save_name, "--save-every auto");
    r->mismatch_name = dup_or(o->mismatch_name, "--sdc-action");
    r->ckpt_dir = pt__path_join(o->dir, "checkpoints");
    if (!r->dir || !r->kind || !r->metrics || (o->resume_from && !r->resume_from) || !r->dir_name ||
        !r->metrics_name || !r->resume_name || !r->save_name || !r->mismatch_name || !r->ckpt_dir)
        return pt__err(PT_ENOMEM, "out of memory");
    r->o.dir = r->dir;
    r->o.metrics = r->metrics;
    r->o.kind = r->kind;
    r->o.resume_from = r->resume_from;
    r->o.dir_name = r->dir_name;
    r->o.metrics_name = r->metrics_name;
    r->o.resume_name = r->resume_name;
    r->o.save_name = r->save_name;
    r->o.mismatch_name = r->mismatch_name;
    r->save_every = o->save_auto ? 0 : o->save_every;
    r->dist = o->dist;
    r->gp = o->goodput;
    r->rank = o->dist ? pt_dist_rank(o->dist) : 0;
    r->size = o->dist ? pt_dist_size(o->dist) : 1;
    return PT_OK;
}

int pt_run_open(pt_run **out, const pt_run_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(opts);
    pt_run *r = pt__calloc(1, sizeof *r);
    if (!r)
        return pt__err_in(__func__, PT_ENOMEM);
    r->lock_fd = r->mfd = -1;
    r->last_save = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->opened_at = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    int st = copy_options(r, opts);
    if (!st) {
        /* rank 0 holds the directory; the other ranks follow its outcome */
        if (r->rank == 0 && !(st = pt__run__check_outputs(r)))
            st = pt__run__open_dir(r);
        st = pt__run__share_open(r, st);
    }
    if (st) {
        pt_run_close(r);
        return pt__err_in(__func__, st);
    }
    if (r->resume)
        pt__log(PT_LOG_INFO, "run %s: continuing from %s", r->dir, r->resume);
    if (r->o.start == PT_RUN_RESUME_AUTO && r->resume)
        pt__run__note(r, PT_LOG_INFO, "%s auto: the latest checkpoint is %s", r->resume_name, r->resume);
    else if (r->o.start == PT_RUN_RESUME_AUTO)
        pt__run__note(r, PT_LOG_INFO, "%s auto: %s holds no run yet; starting at step 0", r->resume_name, r->dir);
    *out = r;
    return PT_OK;
}

void pt_run_close(pt_run *r)
{
    if (!r)
        return;
    pt__run__metrics_close(r);
    if (r->lock_fd >= 0)
        close(r->lock_fd);
    free(r->dir);
    free(r->metrics);
    free(r->kind);
    free(r->resume_from);
    free(r->dir_name);
    free(r->metrics_name);
    free(r->resume_name);
    free(r->save_name);
    free(r->mismatch_name);
    free(r->ckpt_dir);
    free(r->resume);
    free(r->last_ckpt);
    free(r);
}

const char *pt_run_resume_dir(const pt_run *r)
{
    return r ? r->resume : NULL;
}
const char *pt_run_dir(const pt_run *r)
{
    return r ? r->dir : NULL;
}
const char *pt_run_metrics_path(const pt_run *r)
{
    return r ? r->metrics : NULL;
}
const char *pt_run_last_checkpoint(const pt_run *r)
{
    return r ? r->last_ckpt : NULL;
}
double pt_run_lost_seconds(const pt_run *r)
{
    return r ? r->lost_seconds : 0;
}
double pt_run_relaunch_seconds(const pt_run *r)
{
    return r ? r->relaunch_seconds : 0;
}

int64_t pt_run_lost_steps(const pt_run *r)
{
    return r ? r->lost_steps : 0;
}
int64_t pt_run_rows(const pt_run *r)
{
    return r ? r->rows : 0;
}
int64_t pt_run_save_every(const pt_run *r)
{
    return r ? r->save_every : 0;
}
const char *pt_run_metrics_error(const pt_run *r)
{
    return r && r->m_errno ? strerror(r->m_errno) : NULL;
}
double pt_run_last_save_seconds(const pt_run *r)
{
    return r ? r->save_seconds : 0;
}
double pt_run_mean_step_seconds(const pt_run *r)
{
    return r && r->work_steps ? r->work_seconds / (double)r->work_steps : 0;
}

int pt_run_load_checkpoint(pt_run_state *state, char **host_extra, pt_model *model, pt_optimizer *opt,
                           const char *dir, const char *kind)
{
    if (host_extra)
        *host_extra = NULL;
    PT_CHECK_NULL(state);
    PT_CHECK_NULL(dir);
    PT_CHECK_STRUCT_OUT(state, pt_run_state, pt_run_state_init);
    pt_run_state s; /* written to *state on success only */
    pt_run_state_init(&s);
    char *text = NULL, *saved_kind = NULL;
    int st = pt_checkpoint_load(&text, model, opt, dir);
    if (st)
        return pt__err_in(__func__, st);
    if (!text)
        return pt__err(PT_EFORMAT, "%s: %s records no training step (not a checkpoint of a run)", __func__, dir);
    st = pt_run_state_from_json(&s, &saved_kind, host_extra, text);
    pt_free(text);
    if (st == PT_EFORMAT)
        return pt__err(PT_EFORMAT, "%s: %s records no training step (not a checkpoint of a run): %s", __func__, dir,
                      pt_last_error());
    if (!st && kind && saved_kind[0] && strcmp(saved_kind, kind))
        st = pt__err(PT_ESTATE, "%s: %s is a checkpoint of %s, not of %s", __func__, dir, saved_kind, kind);
    free(saved_kind);
    if (st && host_extra) {
        pt_free(*host_extra);
        *host_extra = NULL;
    }
    if (st)
        return pt__err_in(__func__, st);
    pt__struct_write(state, &s);
    return PT_OK;
}

int pt_run_load(pt_run_state *state, char **host_extra, pt_run *r, pt_model *model, pt_optimizer *opt)
{
    if (host_extra)
        *host_extra = NULL;
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(state);
    if (!r->resume)
        return pt__err(PT_ESTATE, "%s: the run %s starts fresh: there is no checkpoint to load", __func__, r->dir);
    PT_CHECK_STRUCT_OUT(state, pt_run_state, pt_run_state_init);
    pt_run_state s; /* written to *state on success only */
    pt_run_state_init(&s);
    char *extra = NULL;
    int st = pt_run_load_checkpoint(&s, &extra, model, opt, r->resume, r->kind);
    if (!st && r->rank == 0) {
        char *later = NULL;
        if (pt__run__latest(r->ckpt_dir, &later) > s.step)
            st = pt__err(PT_EEXIST, "%s is past the resumed step %" PRId64 " and would be overwritten; resume "
                                   "from it or remove it", later, s.step);
        free(later);
        if (!st)
            st = pt__run__metrics_trim(r, s.step);
        /* the replaced run's last sign of life to this open: the stall
         * before it died (a watchdog's deadline) and the relaunch */
        if (!st && r->last_row_time > 0 && r->opened_at > r->last_row_time)
            r->relaunch_seconds = r->opened_at - r->last_row_time;
    }
    st = pt__run__agree(r, st);
    if (!st)
        st = pt__run__share_lost(r);
    if (!st && !(r->last_ckpt = strdup(r->resume)))
        st = pt__err(PT_ENOMEM, "out of memory");
    if (st) {
        pt_free(extra);
        return pt__err_in(__func__, st);
    }
    pt__run__goodput_restore(r, &extra);
    if (host_extra)
        *host_extra = extra;
    else
        pt_free(extra);
    r->last_save = r->step = s.step;
    pt__struct_write(state, &s);
    return PT_OK;
}

int pt_run_resumed(pt_run *r, int64_t step)
{
    PT_CHECK_NULL(r);
    if (!r->resume)
        return pt__err(PT_ESTATE, "%s: the run %s starts fresh: nothing was resumed", __func__, r->dir);
    pt__run__note(r, PT_LOG_INFO, "resumed at step %" PRId64 " from %s", step, r->resume);
    if (r->relaunch_seconds > 0)
        pt__run__note(r, PT_LOG_INFO, "goodput: %.3f s from the earlier run's last metrics row to this relaunch "
                                      "are lost", r->relaunch_seconds);
    if (r->lost_steps)
        pt__run__note(r, PT_LOG_INFO, "goodput: %" PRId64 " steps (%.3f s) of the earlier run after step %" PRId64
                                      " are lost", r->lost_steps, r->lost_seconds, step);
    return PT_OK;
}

int pt_run_trim_metrics(pt_run *r, int64_t step)
{
    PT_CHECK_NULL(r);
    PT_CHECK_ARG(step >= 0, step, "must be >= 0 (got %" PRId64 ")", step);
    int st = pt__run__metrics_trim(r, step);
    return st ? pt__err_in(__func__, st) : PT_OK;
}

/* save_auto's first checkpoint sets the interval from its cost and the
 * mean step time. */
static void choose_interval(pt_run *r)
{
    double per_step = pt_run_mean_step_seconds(r), interval = 0, n = 1;
    if (per_step > 0 && r->save_seconds > 0 &&
        pt_checkpoint_interval_young_daly(&interval, r->save_seconds, r->o.mtbf_seconds) == PT_OK)
        n = fmin(1e9, fmax(1.0, round(interval / per_step)));
    r->save_every = (int64_t)n;
    pt__run__note(r, PT_LOG_INFO, "%s: a checkpoint took %.3f s, a step %.4f s; with an MTBF of %g h, Young-Daly "
                                  "gives %.1f s: a checkpoint every %" PRId64 " steps", r->save_name, r->save_seconds,
                  per_step, r->o.mtbf_seconds / 3600.0, interval, r->save_every);
    if (r->rank == 0)
        pt__log(PT_LOG_INFO, "save_auto: a checkpoint took %.3f s, a step %.4f s; with an MTBF of %g s, "
                            "Young-Daly gives %.1f s: a checkpoint every %" PRId64 " steps",
               r->save_seconds, per_step, r->o.mtbf_seconds, interval, r->save_every);
}

/* Rank 0's part of pt_run_save: the checkpoint `dir`, retention, the
 * metrics file's fsync. */
static int write_checkpoint(pt_run *r, const pt_model *model, pt_optimizer *opt, const pt_run_state *state,
                            const char *extra, const char *dir)
{
    char *json = NULL;
    int st = pt_run_state_to_json(&json, state, r->kind, extra);
    if (st)
        return st;
    if (mkdir(r->ckpt_dir, 0755) != 0 && errno != EEXIST)
        st = pt__io_errno(errno, "cannot create", r->ckpt_dir);
    else
        st = pt_checkpoint_save(model, opt, json, dir);
    free(json);
    if (!st)
        st = pt__run__retain(r);
    if (!st && r->mfd >= 0 && !r->m_errno) {
        struct stat sb;
        if (fstat(r->mfd, &sb) == 0 && S_ISREG(sb.st_mode) && fsync(r->mfd) != 0)
            st = pt__io_errno(errno, "cannot fsync the metrics file", r->metrics);
    }
    return st;
}

int pt_run_save(pt_run *r, const pt_model *model, pt_optimizer *opt, const pt_run_state *state,
                const char *host_extra)
{
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(state);
    const double t0 = pt__now();
    char *with_goodput = NULL, base[40];
    snprintf(base, sizeof base, "step-%08" PRId64, state->step);
    char *dir = pt__path_join(r->ckpt_dir, base);
    int st = dir ? pt__run__goodput_extra(r, host_extra, &with_goodput) : PT_ENOMEM;
    if (!st && r->rank == 0)
        st = write_checkpoint(r, model, opt, state, r->gp ? with_goodput : host_extra, dir);
    free(with_goodput);
    st = pt__run__agree(r, st);
    if (st) {
        free(dir);
        return pt__err_in(__func__, st);
    }
    free(r->last_ckpt);
    r->last_ckpt = dir;
    r->last_save = state->step;
    r->save_seconds = pt__now() - t0;
    pt__run__note(r, PT_LOG_INFO, "checkpoint %s", dir);
    if (r->o.save_auto && r->save_every == 0) {
        choose_interval(r);
        if ((st = pt__run__share_interval(r)))
            return pt__err_in(__func__, st);
    }
    return PT_OK;
}

int pt_run_note_step(pt_run *r, double seconds)
{
    PT_CHECK_NULL(r);
    PT_CHECK_ARG(isfinite(seconds) && seconds >= 0 && seconds <= 1e12, seconds,
                 "must be finite and in [0, 1e12] (got %g)", seconds);
    r->work_seconds += seconds;
    r->work_steps++;
    return PT_OK;
}

bool pt_run_save_due(const pt_run *r, int64_t step, int64_t total)
{
    if (!r)
        return false;
    if (r->o.save_auto)
        /* the first checkpoint after this process's first step times the interval */
        return step == total || r->save_every == 0 || step - r->last_save >= r->save_every;
    return r->save_every > 0 && (step % r->save_every == 0 || step == total);
}
