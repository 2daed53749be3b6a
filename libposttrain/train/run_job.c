/* The run layer in a data-parallel job and with a goodput accountant
 * (include/posttrain/run.h, docs/run-directory.md "Jobs"): rank 0 holds the
 * directory and every rank gets its outcome; the accountant's totals travel
 * in the checkpoints; the replica check and the rollback to the last
 * checkpoint. */
#include "core/core.h"
#include "io/json.h"
#include "run_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pt__run__share_open(pt_run *r, int st)
{
    if (r->size <= 1)
        return st;
    struct {
        int32_t st, has_resume;
        char resume[PATH_MAX];
    } m;
    memset(&m, 0, sizeof m);
    if (r->rank == 0) {
        m.st = st;
        if (!st && r->resume) {
            if (strlen(r->resume) >= sizeof m.resume)
                m.st = st = pt__err(PT_ERANGE, "the checkpoint path %s is too long to share", r->resume);
            else {
                m.has_resume = 1;
                memcpy(m.resume, r->resume, strlen(r->resume) + 1);
            }
        }
    }
    int bs = pt_dist_broadcast(r->dist, &m, sizeof m, 0);
    if (r->rank == 0)
        return st ? st : bs;
    if (bs)
        return bs;
    if (m.st)
        return pt__err(PT_EPEER, "rank 0 could not open the run %s (%s; its message says why)", r->dir,
                      pt_status_name(m.st));
    if (m.has_resume && !(r->resume = strdup(m.resume)))
        return pt__err(PT_ENOMEM, "out of memory");
    return PT_OK;
}

int pt__run__agree(pt_run *r, int st)
{
    if (r->size <= 1)
        return st;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st ? pt_last_error() : "");
    int first = -1, a = pt_dist_agree(&first, r->dist, st);
    if (st)
        return pt__err(st, "%s", msg);
    return a;
}

int pt__run__goodput_extra(pt_run *r, const char *host_extra, char **out)
{
    *out = NULL;
    if (!r->gp)
        return PT_OK;
    int st = pt_goodput_commit(r->gp);
    char *g = NULL;
    if (!st)
        st = pt_goodput_to_json(&g, r->gp);
    if (st)
        return st;
    cJSON *e = cJSON_Parse(host_extra ? host_extra : "{}");
    cJSON *gj = cJSON_Parse(g);
    pt_free(g);
    if (!cJSON_IsObject(e) || !gj) {
        cJSON_Delete(e);
        cJSON_Delete(gj);
        return pt__err(PT_EINVAL, "host_extra is not one JSON object");
    }
    if (cJSON_GetObjectItemCaseSensitive(e, "goodput")) {
        cJSON_Delete(e);
        cJSON_Delete(gj);
        return pt__err(PT_EINVAL, "host_extra's key \"goodput\" is the run's own (it has a goodput accountant)");
    }
    cJSON_AddItemToObject(e, "goodput", gj);
    *out = pt__json_print(e, false);
    cJSON_Delete(e);
    return *out ? PT_OK : pt__err(PT_ENOMEM, "out of memory");
}

void pt__run__goodput_restore(pt_run *r, char **extra)
{
    if (!r->gp || !*extra)
        return;
    cJSON *e = cJSON_Parse(*extra);
    cJSON *g = cJSON_DetachItemFromObjectCaseSensitive(e, "goodput");
    if (!cJSON_IsObject(g))
        pt__log(PT_LOG_INFO, "%s records no goodput totals: goodput counts this process only", r->resume);
    else {
        char *text = pt__json_print(g, false);
        int st = text ? pt_goodput_restore(r->gp, text, r->lost_seconds + r->relaunch_seconds, r->lost_steps)
                      : PT_ENOMEM;
        free(text);
        if (st)
            pt__log(PT_LOG_WARN, "the goodput totals of %s were not restored: %s", r->resume, pt_last_error());
        char *rest = pt__json_print(e, false);
        if (rest) {
            pt_free(*extra);
            *extra = rest;
        }
    }
    cJSON_Delete(g);
    cJSON_Delete(e);
}

int pt__run__share_lost(pt_run *r)
{
    if (r->size <= 1)
        return PT_OK;
    double v[3] = { r->lost_seconds, (double)r->lost_steps, r->relaunch_seconds };
    int st = pt_dist_broadcast(r->dist, v, sizeof v, 0);
    r->lost_seconds = v[0];
    r->lost_steps = (int64_t)v[1];
    r->relaunch_seconds = v[2];
    return st;
}

int pt__run__share_interval(pt_run *r)
{
    if (r->size <= 1)
        return PT_OK;
    double n = (double)r->save_every;
    int st = pt_dist_broadcast(r->dist, &n, sizeof n, 0);
    r->save_every = (int64_t)n;
    return st;
}

int pt_run_check_replicas(int *bad_rank, pt_run *r, const pt_optimizer *opt)
{
    if (bad_rank)
        *bad_rank = -1;
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(opt);
    if (r->size <= 1)
        return PT_OK;
    int st = pt_dist_check_replicas(bad_rank, NULL, r->dist, opt);
    return st ? pt__err_in(__func__, st) : PT_OK;
}

int pt_run_rollback(pt_run_state *state, char **host_extra, pt_run *r, pt_model *model, pt_optimizer *opt)
{
    if (host_extra)
        *host_extra = NULL;
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(state);
    if (r->gp)
        pt_goodput_rollback(r->gp);
    r->rollbacks++;
    r->step = 0; /* the start, or below the checkpoint's */
    if (!r->last_ckpt) {
        int st = pt__run__agree(r, r->rank == 0 ? pt__run__metrics_trim(r, 0) : PT_OK);
        return pt__err_in(__func__, st ? st : pt__err(PT_ENOTFOUND, "no checkpoint yet: start again from the "
                                                                  "initial state"));
    }
    char *extra = NULL;
    pt_run_state s;
    pt_run_state_init(&s);
    s.size = state->size < sizeof s ? state->size : sizeof s;
    int st = pt_run_load_checkpoint(&s, &extra, model, opt, r->last_ckpt, r->kind);
    if (!st && r->rank == 0)
        st = pt__run__metrics_trim(r, s.step);
    st = pt__run__agree(r, st);
    if (!st && r->gp && extra) { /* this process's accountant already holds the totals */
        cJSON *e = cJSON_Parse(extra);
        cJSON_DeleteItemFromObjectCaseSensitive(e, "goodput");
        char *rest = e ? pt__json_print(e, false) : NULL;
        cJSON_Delete(e);
        if (rest) {
            pt_free(extra);
            extra = rest;
        }
    }
    if (st || !host_extra)
        pt_free(extra);
    else
        *host_extra = extra;
    if (st)
        return pt__err_in(__func__, st);
    r->last_save = r->step = s.step;
    memcpy(state, &s, s.size); /* the caller's fields only */
    return PT_OK;
}

int pt_run_rank(const pt_run *r)
{
    return r ? r->rank : 0;
}

int pt_run_size(const pt_run *r)
{
    return r ? r->size : 1;
}
