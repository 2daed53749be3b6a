/* A GRPO checkpoint's own fields (posttrain/grpo_run.h): the batch shape
 * and the adaptive entropy state in the run state's host_extra, and the
 * checks a resume makes on them, the same for `posttrain grpo` and
 * Python's GRPOTrainer. */
#include "posttrain/grpo_run.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pt_enum_entry k_faults[] = {
    { PT_RESUME_FAULT_NONE, "none" },     { PT_RESUME_FAULT_MISSING, "missing" },
    { PT_RESUME_FAULT_SHAPE, "shape" },   { PT_RESUME_FAULT_ROWS, "rows" },
    { PT_RESUME_FAULT_CURSOR, "cursor" }, { PT_RESUME_FAULT_OPTIMIZER, "optimizer" },
    { PT_RESUME_FAULT_RNG, "rng" },       { PT_RESUME_FAULT_ENTROPY, "entropy" },
};
PT_ENUM_NAME_FUNCS(pt_grpo_resume_fault, k_faults, "GRPO resume fault")

int pt_grpo_run_fields_init(pt_grpo_run_fields *f)
{
    PT_STRUCT_INIT_ZERO(f);
    f->num_generations = 1;
    f->batch_prompts = 1;
    f->num_iterations = 1;
    return PT_OK;
}

int pt_grpo_resume_report_init(pt_grpo_resume_report *rep)
{
    PT_STRUCT_INIT_ZERO(rep);
    rep->num_iterations = -1;
    return PT_OK;
}

/* host_extra parsed (NULL: an empty object); NULL after the message. */
static cJSON *parse_extra(const char *func, const char *text, int *st)
{
    cJSON *h = text ? cJSON_Parse(text) : cJSON_CreateObject();
    *st = PT_OK;
    if (!h)
        *st = text ? pt__err(PT_EINVAL, "%s: host_extra is not JSON", func)
                   : pt__err(PT_ENOMEM, "%s: out of memory", func);
    else if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        h = NULL;
        *st = pt__err(PT_EINVAL, "%s: host_extra is not a JSON object", func);
    }
    return h;
}

static bool set_number(cJSON *h, const char *key, double v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(h, key);
    return cJSON_AddNumberToObject(h, key, v) != NULL;
}

int pt_grpo_run_extra(char **json, const char *host_extra, const pt_grpo_run_fields *f)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    pt_grpo_run_fields o;
    int st = PT_STRUCT_READ(o, f, pt_grpo_run_fields_init);
    if (st)
        return st;
    cJSON *h = parse_extra(__func__, host_extra, &st);
    if (!h)
        return st;
    const pt_grpo_options *g = o.grpo;
    bool ok = set_number(h, "num_generations", o.num_generations) &&
              set_number(h, "batch_prompts", o.batch_prompts) && set_number(h, "num_iterations", o.num_iterations);
    if (ok && g && g->use_adaptive_entropy) {
        /* entropy_last is infinite before the first update: then not written */
        ok = set_number(h, "entropy_coef", g->entropy_coef);
        cJSON_DeleteItemFromObjectCaseSensitive(h, "entropy_last");
        ok = ok && (!isfinite(g->entropy_last) || cJSON_AddNumberToObject(h, "entropy_last", g->entropy_last));
    }
    char *text = ok ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    if (!text)
        return pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    *json = pt__strdup(text);
    cJSON_free(text);
    return *json ? PT_OK : pt__err(PT_ENOMEM, "%s: out of memory", __func__);
}

/* The fault, recorded in rep with its message. */
static int fault(pt_grpo_resume_report *rep, int which, const char *key, int64_t saved, int64_t want,
                 const char *msg)
{
    rep->fault = which;
    rep->key = key;
    rep->saved = saved;
    rep->want = want;
    return pt__err(PT_ESTATE, "pt_grpo_run_resume: %s", msg);
}

/* The recorded integer `key` equal to `want`. */
static int same_shape(pt_grpo_resume_report *rep, const cJSON *h, const char *key, int64_t want)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, key);
    char msg[160];
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9e15) {
        snprintf(msg, sizeof msg, "host_extra does not record \"%s\" (not a checkpoint of a GRPO run)", key);
        return fault(rep, PT_RESUME_FAULT_MISSING, key, 0, want, msg);
    }
    const int64_t saved = (int64_t)v->valuedouble;
    if (saved == want)
        return PT_OK;
    snprintf(msg, sizeof msg, "made with %s %lld, this run has %lld", key, (long long)saved, (long long)want);
    return fault(rep, PT_RESUME_FAULT_SHAPE, key, saved, want, msg);
}

/* The checks up to the optimizer's; the order loaded (or *order_fault RNG). */
static int check_state(pt_grpo_resume_report *rep, const cJSON *h, const pt_run_state *s, pt_prompt_order *order,
                       int64_t optimizer_steps, const pt_grpo_run_fields *f, int *order_fault)
{
    char msg[160];
    int st = same_shape(rep, h, "num_generations", f->num_generations);
    if (!st)
        st = same_shape(rep, h, "batch_prompts", f->batch_prompts);
    if (st)
        return st;
    pt_run_state before;
    pt_run_state_init(&before);
    pt_prompt_order_save(&before, order);
    *order_fault = PT_ORDER_FAULT_NONE;
    st = pt_prompt_order_load(order, s, order_fault);
    if (st && *order_fault == PT_ORDER_FAULT_ROWS) {
        snprintf(msg, sizeof msg, "the prompt order was made with %lld rows, this run has %lld", (long long)s->rows,
                 (long long)before.rows);
        return fault(rep, PT_RESUME_FAULT_ROWS, NULL, s->rows, before.rows, msg);
    }
    if (st && *order_fault == PT_ORDER_FAULT_CURSOR) {
        snprintf(msg, sizeof msg, "no prompt order (its cursor %lld is past the %lld rows)", (long long)s->cursor,
                 (long long)before.rows);
        return fault(rep, PT_RESUME_FAULT_CURSOR, NULL, s->cursor, before.rows, msg);
    }
    if (st && *order_fault != PT_ORDER_FAULT_RNG)
        return st;
    if (s->optimizer_steps != optimizer_steps) {
        if (!st)
            pt_prompt_order_load(order, &before, NULL);
        snprintf(msg, sizeof msg, "the optimizer's step count %lld does not match the recorded %lld",
                 (long long)optimizer_steps, (long long)s->optimizer_steps);
        return fault(rep, PT_RESUME_FAULT_OPTIMIZER, NULL, s->optimizer_steps, optimizer_steps, msg);
    }
    return PT_OK;
}

int pt_grpo_run_resume(pt_grpo_resume_report *rep, const char *host_extra, const pt_run_state *state,
                       pt_prompt_order *order, int64_t optimizer_steps, const pt_grpo_run_fields *f)
{
    PT_CHECK_NULL(rep);
    PT_CHECK_NULL(state);
    PT_CHECK_NULL(order);
    PT_CHECK_NULL(f);
    pt_grpo_resume_report r;
    pt_grpo_resume_report_init(&r);
    pt_grpo_run_fields o;
    int st = PT_STRUCT_CHECK_OUT(rep, pt_grpo_resume_report, pt_grpo_resume_report_init);
    if (!st)
        st = PT_STRUCT_READ(o, f, pt_grpo_run_fields_init);
    cJSON *h = st ? NULL : parse_extra(__func__, host_extra, &st);
    if (!h)
        return st;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(h, "num_iterations");
    if (cJSON_IsNumber(it))
        r.num_iterations = (int64_t)it->valuedouble;
    int order_fault = PT_ORDER_FAULT_NONE;
    st = check_state(&r, h, state, order, optimizer_steps, &o, &order_fault);
    if (!st && order_fault == PT_ORDER_FAULT_RNG)
        st = fault(&r, PT_RESUME_FAULT_RNG, NULL, 0, 0, "the prompt order state is inconsistent (order_rng does "
                                                        "not lead to rng)");
    pt_grpo_options *g = o.grpo;
    if (!st && g && g->use_adaptive_entropy) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(h, "entropy_coef");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(h, "entropy_last");
        if (!cJSON_IsNumber(c)) {
            st = fault(&r, PT_RESUME_FAULT_ENTROPY, "entropy_coef", 0, 0,
                       "no entropy_coef (made without use_adaptive_entropy)");
        } else {
            g->entropy_coef = c->valuedouble;
            g->entropy_last = cJSON_IsNumber(l) ? l->valuedouble : INFINITY;
        }
    }
    cJSON_Delete(h);
    pt__struct_write(rep, &r);
    return st;
}
