/* The run layer's options and state (include/posttrain/run.h): the options'
 * defaults, the start modes' names, and the run state to and from the one
 * flat JSON object a checkpoint's host JSON is (docs/run-directory.md). */
#include "core/core.h"
#include "io/json.h"
#include "run_internal.h"

#include "posttrain/lora.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pt_enum_entry k_start_names[] = {
    { PT_RUN_NEW, "new" },
    { PT_RUN_OVERWRITE, "overwrite" },
    { PT_RUN_RESUME_AUTO, "auto" },
    { PT_RUN_RESUME_FROM, "from" },
};
PT_ENUM_NAME_FUNCS(pt_run_start, k_start_names, "run start mode")

int pt_run_options_init(pt_run_options *o)
{
    PT_STRUCT_INIT_ZERO(o);
    o->start = PT_RUN_NEW;
    o->on_mismatch = PT_RUN_ROLLBACK;
    o->max_rollbacks = 3;
    o->test_flip_rank = -1;
    return PT_OK;
}

PT_ZERO_INIT(pt_run_state_init, pt_run_state, s)

bool pt__run__kind_ok(const char *kind)
{
    size_t n = kind ? strlen(kind) : 0;
    if (n < 1 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((kind[i] >= 'a' && kind[i] <= 'z') || (kind[i] >= '0' && kind[i] <= '9') || kind[i] == '_' ||
              kind[i] == '.' || kind[i] == '-'))
            return false;
    return true;
}

/* The state's keys: what a host's own keys may not be.  "prompts" is the
 * older GRPO name of "rows". */
static const char *const k_reserved[] = { "run_format", "command", "step", "optimizer_steps", "epoch", "cursor",
                                          "rows", "prompts", "seed", "order_rng", "rng" };

static bool is_reserved(const char *key)
{
    for (size_t i = 0; i < sizeof k_reserved / sizeof k_reserved[0]; i++)
        if (!strcmp(key, k_reserved[i]))
            return true;
    return false;
}

static bool add_u64(cJSON *o, const char *key, uint64_t v)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRIu64, v);
    return cJSON_AddStringToObject(o, key, s) != NULL;
}

/* Move the members of the host's object `extra` (text) into root. */
static int merge_extra(cJSON *root, const char *extra, const char *func)
{
    if (!extra)
        return PT_OK;
    const char *end = NULL;
    cJSON *e = cJSON_ParseWithOpts(extra, &end, true);
    if (!cJSON_IsObject(e)) {
        cJSON_Delete(e);
        return pt__err(PT_EINVAL, "%s: host_extra is not one JSON object", func);
    }
    int st = PT_OK;
    while (e->child && !st) {
        cJSON *it = cJSON_DetachItemViaPointer(e, e->child);
        if (!it->string || is_reserved(it->string) || cJSON_GetObjectItemCaseSensitive(root, it->string)) {
            st = pt__err(PT_EINVAL, "%s: host_extra's key \"%s\" is %s", func, it->string ? it->string : "",
                        it->string && is_reserved(it->string) ? "one of the run state's (reserved)"
                                                              : "given twice");
            cJSON_Delete(it);
        } else
            cJSON_AddItemToObject(root, it->string, it);
    }
    cJSON_Delete(e);
    return st;
}

int pt_run_state_to_json(char **json, const pt_run_state *state, const char *kind, const char *host_extra)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(state);
    PT_CHECK_ARG(state->size >= sizeof(size_t) && state->size <= sizeof(pt_run_state), state,
                 "has size %zu: fill it with pt_run_state_init", state->size);
    PT_CHECK_ARG(pt__run__kind_ok(kind), kind, "must be 1 to 63 of a-z, 0-9, '_', '.', '-' (got \"%s\")",
                 kind ? kind : "(null)");
    pt_run_state s;
    pt_run_state_init(&s);
    memcpy(&s, state, state->size);
    const int64_t vals[] = { s.step, s.optimizer_steps, s.epoch, s.cursor, s.rows };
    static const char *const names[] = { "step", "optimizer_steps", "epoch", "cursor", "rows" };
    for (size_t i = 0; i < 5; i++)
        if (vals[i] < 0)
            return pt__err(PT_EINVAL, "%s: state->%s is negative (%" PRId64 ")", __func__, names[i], vals[i]);
    if (s.step > ((int64_t)1 << 53))
        return pt__err(PT_ERANGE, "%s: state->step %" PRId64 " is above 2^53", __func__, s.step);
    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddNumberToObject(root, "run_format", PT_RUN_FORMAT) &&
              cJSON_AddStringToObject(root, "command", kind) &&
              cJSON_AddNumberToObject(root, "step", (double)s.step);
    for (size_t i = 1; ok && i < 5; i++)
        ok = add_u64(root, names[i], (uint64_t)vals[i]);
    ok = ok && add_u64(root, "seed", s.seed) && add_u64(root, "order_rng", s.order_rng) &&
         add_u64(root, "rng", s.rng);
    int st = ok ? merge_extra(root, host_extra, __func__) : pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    if (!st && !(*json = pt__json_print(root, false)))
        st = pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    cJSON_Delete(root);
    return st;
}

int pt_run_host_model(char **json, const char *model_dir, const pt_model *model)
{
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(model);
    char *abs = model_dir ? realpath(model_dir, NULL) : NULL;
    cJSON *h = cJSON_CreateObject();
    bool ok = h && cJSON_AddStringToObject(h, "model", abs ? abs : model_dir ? model_dir : "");
    free(abs);
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    if (ok && pt_model_has_lora(model) && pt_model_get_lora(&lo, model) == PT_OK) {
        cJSON *l = cJSON_AddObjectToObject(h, "lora");
        ok = l && cJSON_AddNumberToObject(l, "rank", lo.rank) && cJSON_AddNumberToObject(l, "alpha", lo.alpha) &&
             cJSON_AddNumberToObject(l, "targets", lo.targets);
    }
    if (ok)
        *json = pt__json_print(h, false);
    cJSON_Delete(h);
    return *json ? PT_OK : pt__err(PT_ENOMEM, "%s: out of memory", __func__);
}

/* A non-negative integer member: a whole JSON number (exact below 2^53) or a
 * string of decimal digits.  1 when absent, 0 when read, -1 when bad. */
static int get_u64(uint64_t *v, const cJSON *obj, const char *key, uint64_t max)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j)
        return 1;
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (!(d >= 0 && d == floor(d) && d <= 9007199254740992.0) || (uint64_t)d > max)
            return -1;
        *v = (uint64_t)d;
        return 0;
    }
    if (!cJSON_IsString(j) || j->valuestring[0] < '0' || j->valuestring[0] > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(j->valuestring, &end, 10);
    if (errno || *end || n > max)
        return -1;
    *v = n;
    return 0;
}

static int read_state(pt_run_state *s, const cJSON *root, const char *func)
{
    static const char *const i64_keys[] = { "step", "optimizer_steps", "epoch", "cursor", "rows" };
    int64_t *i64_dst[] = { &s->step, &s->optimizer_steps, &s->epoch, &s->cursor, &s->rows };
    static const char *const u64_keys[] = { "seed", "order_rng", "rng" };
    uint64_t *u64_dst[] = { &s->seed, &s->order_rng, &s->rng };
    uint64_t v = 0;
    for (size_t i = 0; i < 5; i++) {
        int r = get_u64(&v, root, i64_keys[i], INT64_MAX);
        if (r > 0 && i == 4) /* older GRPO checkpoints: "prompts" */
            r = get_u64(&v, root, "prompts", INT64_MAX);
        if (r < 0 || (r > 0 && i == 0))
            return pt__err(PT_EFORMAT, "%s: \"%s\" is %s (not a run state)", func, i64_keys[i],
                          r > 0 ? "missing" : "not a non-negative integer");
        if (r == 0)
            *i64_dst[i] = (int64_t)v;
    }
    for (size_t i = 0; i < 3; i++) {
        int r = get_u64(&v, root, u64_keys[i], UINT64_MAX);
        if (r < 0)
            return pt__err(PT_EFORMAT, "%s: \"%s\" is not a non-negative 64-bit integer", func, u64_keys[i]);
        if (r == 0)
            *u64_dst[i] = v;
    }
    return PT_OK;
}

/* The members of root that are not the state's, as an object's text. */
static int extra_of(char **out, const cJSON *root, const char *func)
{
    cJSON *e = cJSON_CreateObject();
    bool ok = e != NULL;
    for (const cJSON *it = root->child; ok && it; it = it->next)
        if (it->string && !is_reserved(it->string)) {
            cJSON *c = cJSON_Duplicate(it, true);
            ok = c && cJSON_AddItemToObject(e, it->string, c);
        }
    if (ok)
        ok = (*out = pt__json_print(e, false)) != NULL;
    cJSON_Delete(e);
    return ok ? PT_OK : pt__err(PT_ENOMEM, "%s: out of memory", func);
}

int pt_run_state_from_json(pt_run_state *state, char **kind, char **host_extra, const char *json)
{
    if (kind)
        *kind = NULL;
    if (host_extra)
        *host_extra = NULL;
    PT_CHECK_NULL(state);
    PT_CHECK_ARG(state->size >= sizeof(size_t) && state->size <= sizeof(pt_run_state), state,
                 "has size %zu: fill it with pt_run_state_init", state->size);
    PT_CHECK_NULL(json);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, true);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pt__err(PT_EFORMAT, "%s: the host JSON is not one JSON object (not a run state)", __func__);
    }
    pt_run_state s;
    pt_run_state_init(&s);
    memcpy(&s, state, state->size);
    s.size = sizeof s;
    const cJSON *jf = cJSON_GetObjectItemCaseSensitive(root, "run_format");
    const cJSON *jc = cJSON_GetObjectItemCaseSensitive(root, "command");
    int st = PT_OK;
    if (jf && !(cJSON_IsNumber(jf) && jf->valuedouble >= 1 && jf->valuedouble <= PT_RUN_FORMAT))
        st = pt__err(PT_EUNSUPPORTED, "%s: \"run_format\" %s is not one this version reads (1 .. %d)", __func__,
                    cJSON_IsNumber(jf) ? "value" : "field", PT_RUN_FORMAT);
    else if (jc && !cJSON_IsString(jc))
        st = pt__err(PT_EFORMAT, "%s: \"command\" is not a string", __func__);
    else
        st = read_state(&s, root, __func__);
    if (!st && kind && !(*kind = strdup(jc ? jc->valuestring : "")))
        st = pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    if (!st && host_extra)
        st = extra_of(host_extra, root, __func__);
    cJSON_Delete(root);
    if (st) {
        if (kind) {
            free(*kind);
            *kind = NULL;
        }
        return st;
    }
    size_t n = state->size;
    memcpy(state, &s, n);
    state->size = n;
    return PT_OK;
}
