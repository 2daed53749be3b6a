/* The fault handling and goodput of a run (include/posttrain/run.h,
 * docs/distributed.md, docs/goodput.md): goodput sections and step times on
 * the run's accountant, the final report, the ranks' agreement on an
 * outcome, the replica checks' cadence and policy with their test hook, the
 * skip guard, and the library's splitmix for a host's seeded streams. */
#include "core/core.h"
#include "io/path.h"
#include "posttrain/lora.h"
#include "posttrain/modelio.h"
#include "run_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pt_enum_entry k_run_action_names[] = {
    { PT_RUN_CONTINUE, "continue" },
    { PT_RUN_ROLLBACK, "rollback" },
    { PT_RUN_STOP, "stop" },
};
PT_ENUM_NAME_FUNCS(pt_run_action, k_run_action_names, "run action")

int pt_run_section(pt_run *r, int kind)
{
    PT_CHECK_NULL(r);
    return r->gp ? pt_goodput_switch(r->gp, kind) : PT_OK;
}

int pt_run_step_time(pt_run *r, double seconds, double wait, double generate)
{
    PT_CHECK_NULL(r);
    PT_CHECK_ARG(isfinite(seconds) && isfinite(wait) && isfinite(generate) && seconds >= 0 && wait >= 0 &&
                 generate >= 0 && seconds <= 1e12, seconds,
                 "seconds, wait and generate must be finite and >= 0 (got %g, %g, %g)", seconds, wait, generate);
    if (r->gp) {
        double step = seconds - wait - generate;
        pt_goodput_add(r->gp, PT_TIME_STEP, step > 0 ? step : 0);
        if (wait > 0)
            pt_goodput_add(r->gp, PT_TIME_WAIT, wait);
        if (generate > 0)
            pt_goodput_add(r->gp, PT_TIME_GENERATE, generate);
        pt_goodput_step_done(r->gp);
    }
    r->step++;
    return pt_run_note_step(r, seconds);
}

/* ", "KEY": V" with %.4f, or null. */
static int json_secs(char *buf, size_t n, const char *key, double v)
{
    return isfinite(v) ? snprintf(buf, n, ", \"%s\": %.4f", key, v) : snprintf(buf, n, ", \"%s\": null", key);
}

int pt_run_report_json(char **json, pt_goodput_report *report, pt_run *r, int64_t step)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(r);
    if (!r->gp)
        return pt__err(PT_ESTATE, "%s: the run has no goodput accountant (pt_run_options.goodput)", __func__);
    pt_goodput_switch(r->gp, -1);
    pt_goodput_commit(r->gp);
    pt_goodput_report g;
    pt_goodput_report_init(&g);
    int st = pt_goodput_get(&g, r->gp);
    if (st)
        return pt__err_in(__func__, st);
    char buf[1024];
    size_t n = sizeof buf, at = (size_t)snprintf(buf, n, "{\"step\": %lld, \"goodput\": {\"goodput\": ",
                                                (long long)step);
    at += isfinite(g.goodput) ? (size_t)snprintf(buf + at, n - at, "%.6f", g.goodput)
                              : (size_t)snprintf(buf + at, n - at, "null");
    at += (size_t)json_secs(buf + at, n - at, "wall", g.wall);
    for (int k = 0; k < PT_TIME_KINDS; k++) {
        char key[48];
        snprintf(key, sizeof key, "seconds/%s", pt_time_kind_name(k));
        at += (size_t)json_secs(buf + at, n - at, key, g.seconds[k]);
    }
    at += (size_t)json_secs(buf + at, n - at, "pending", g.pending);
    snprintf(buf + at, n - at, ", \"steps_kept\": %lld, \"steps_lost\": %lld, \"ranks\": %d}}",
             (long long)g.steps_kept, (long long)g.steps_lost, r->size);
    if (!(*json = pt__strdup(buf)))
        return PT_ENOMEM;
    if (report)
        pt__struct_write(report, &g);
    return PT_OK;
}

int pt_run_agree(int *agreed, int *first_failed, pt_run *r, int code)
{
    PT_CHECK_NULL(agreed);
    *agreed = code;
    if (first_failed)
        *first_failed = code ? 0 : -1;
    PT_CHECK_NULL(r);
    if (r->size <= 1)
        return PT_OK;
    double stack[64], *v = r->size <= 64 ? stack : pt__calloc((size_t)r->size, sizeof *v);
    if (!v)
        return PT_ENOMEM;
    memset(v, 0, (size_t)r->size * sizeof *v);
    v[r->rank] = code;
    int st = pt_dist_allreduce_sum(r->dist, v, (size_t)r->size), first = -1;
    for (int q = 0; q < r->size && !st && first < 0; q++)
        if (v[q] != 0)
            first = q;
    int theirs = first < 0 ? 0 : (int)v[first];
    if (v != stack)
        pt_free(v);
    if (st)
        return pt__err_in(__func__, st);
    if (first_failed)
        *first_failed = first;
    *agreed = code ? code : theirs;
    return PT_OK;
}

bool pt_run_check_due(const pt_run *r, int64_t step)
{
    return r && r->size > 1 && r->o.check_every > 0 && step % r->o.check_every == 0;
}

/* The notes of a replica mismatch: where, then what the run does next. */
static void note_mismatch(const pt_run *r, int action, int bad)
{
    const char *why = pt_last_error();
    if (bad >= 0)
        pt__run__note(r, PT_LOG_WARN, "silent data corruption detected after step %" PRId64 " on rank %d: %s",
                      r->step, bad, why);
    else /* 2 ranks that differ: either may be the corrupted one */
        pt__run__note(r, PT_LOG_WARN, "silent data corruption detected after step %" PRId64 ", on no rank that "
                                      "a majority can name (the %d ranks disagree): %s", r->step, r->size, why);
    if (r->o.on_mismatch == PT_RUN_STOP)
        pt__run__note(r, PT_LOG_INFO, "stopping (%s stop); relaunch with %s auto to continue from the last "
                                      "checkpoint", r->mismatch_name, r->resume_name);
    else if (action == PT_RUN_STOP)
        pt__run__note(r, PT_LOG_INFO, "the replicas disagreed again after %d rollbacks: stopping", r->rollbacks);
    else if (r->last_ckpt)
        pt__run__note(r, PT_LOG_INFO, "rolling every rank back to step %" PRId64 " (%s) and replaying",
                      r->last_save, r->last_ckpt);
    else
        pt__run__note(r, PT_LOG_INFO, "rolling every rank back to the start (no checkpoint yet) and replaying");
}

int pt_run_check(int *action, int *bad_rank, pt_run *r, const pt_optimizer *opt)
{
    PT_CHECK_NULL(action);
    *action = PT_RUN_STOP;
    if (bad_rank)
        *bad_rank = -1;
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(opt);
    if (r->size <= 1 || r->o.check_every <= 0) {
        *action = PT_RUN_CONTINUE;
        return PT_OK;
    }
    int bad = -1, st = pt_run_check_replicas(&bad, r, opt);
    if (bad_rank)
        *bad_rank = bad;
    if (st == PT_OK) {
        r->rollbacks = 0;
        *action = PT_RUN_CONTINUE;
        return PT_OK;
    }
    if (st == PT_ECHECKSUM && r->o.on_mismatch == PT_RUN_ROLLBACK && r->rollbacks < r->o.max_rollbacks)
        *action = PT_RUN_ROLLBACK;
    if (st == PT_ECHECKSUM)
        note_mismatch(r, *action, bad);
    return st;
}

int pt_run_rollbacks(const pt_run *r)
{
    return r ? r->rollbacks : 0;
}

int64_t pt_run_last_step(const pt_run *r)
{
    return r ? r->last_save : -1;
}

int pt_run_test_flip(const char **tensor, pt_run *r, pt_model *model, int64_t step)
{
    PT_CHECK_NULL(tensor);
    *tensor = NULL;
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(model);
    if (r->o.test_flip_rank != r->rank || r->o.test_flip_step != step)
        return PT_OK;
    r->o.test_flip_rank = -1; /* once per run: the replay after a rollback is clean */
    size_t n = pt_model_tensor_count(model);
    for (size_t i = 0; i < n; i++) {
        pt_tensor_info ti;
        pt_tensor_info_init(&ti);
        if (pt_model_tensor_info(&ti, model, i) != PT_OK || !ti.trainable || !ti.numel || !ti.data)
            continue;
        uint32_t bits;
        memcpy(&bits, ti.data, sizeof bits);
        bits ^= 1u << 13;
        memcpy(ti.data, &bits, sizeof bits);
        *tensor = ti.name;
        return PT_OK;
    }
    return PT_OK;
}

/* Rank 0's part of pt_run_save_final. */
static int save_final(unsigned *saved, pt_run *r, pt_model *model, const char *base_name, bool *unmerged)
{
    int st;
    if (pt_model_has_lora(model)) {
        char *adir = pt__path_join(r->dir, "adapter");
        st = adir ? pt_lora_save_peft(model, adir, base_name) : PT_ENOMEM;
        free(adir);
        if (st)
            return st;
        *saved |= PT_RUN_SAVED_ADAPTER;
        if ((st = pt_model_merge_lora(model)) == PT_EUNSUPPORTED) {
            *unmerged = true; /* a quantized base: the adapter is the result */
            return PT_OK;
        }
        if (st)
            return st;
        *saved |= PT_RUN_SAVED_MERGED;
    }
    pt_model_save_options so;
    pt_model_save_options_init(&so);
    if ((st = pt_model_save_dir(model, r->dir, &so)))
        return st;
    *saved |= PT_RUN_SAVED_MODEL;
    return PT_OK;
}

int pt_run_save_final(unsigned *saved, pt_run *r, pt_model *model, const char *base_name)
{
    unsigned s = 0;
    if (saved)
        *saved = 0;
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(model);
    bool unmerged = false;
    int st = r->rank == 0 ? save_final(&s, r, model, base_name, &unmerged) : PT_OK;
    char why[1024] = "";
    if (unmerged)
        snprintf(why, sizeof why, "%s", pt_last_error());
    st = pt__run__agree(r, st);
    double bits = s;
    if (!st && r->size > 1)
        st = pt_dist_broadcast(r->dist, &bits, sizeof bits, 0);
    if (saved)
        *saved = (unsigned)bits;
    if (!st && unmerged)
        pt__err(PT_EUNSUPPORTED, "%s", why); /* the message of the result, the status PT_OK */
    return st;
}

int pt_run_skip_guard(pt_run_skips *k, int reason, int64_t step, int64_t max)
{
    PT_CHECK_NULL(k);
    if (reason == PT_SKIP_NONE) {
        k->in_a_row = 0;
        return PT_OK;
    }
    if (reason != PT_SKIP_NONFINITE_LOSS && reason != PT_SKIP_NONFINITE_GRAD && reason != PT_SKIP_NONFINITE_UPDATE)
        return PT_OK;
    if (k->in_a_row++ == 0)
        k->first = step;
    if (max <= 0 || k->in_a_row < max)
        return PT_OK;
    return pt__err(PT_ERANGE, "%s: %lld optimizer updates in a row were skipped as non-finite (steps %lld to "
                  "%lld; the last: %s)", __func__, (long long)k->in_a_row, (long long)k->first, (long long)step,
                  pt_skip_reason_name(reason));
}

uint64_t pt_splitmix64(uint64_t *state)
{
    return state ? pt__splitmix64(state) : 0;
}
