/* A GRPO run's fields of an environment's requests (posttrain/grpo_run.h):
 * the request hook of a pt_env_process (posttrain/env.h) that adds the
 * round, the episode and group numbered in the round's whole batch, and
 * the prompt's row, as `posttrain grpo --env` sends them. */
#include "posttrain/grpo_run.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

PT_ZERO_INIT(pt_grpo_env_request_init, pt_grpo_env_request, req)

int pt_grpo_env_request_fn(const char **json, const pt_env_turn *turn, void *request)
{
    pt_grpo_env_request *q = request;
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(turn);
    PT_CHECK_NULL(q);
    if (q->size != sizeof *q)
        return pt__err(PT_EINVAL, "%s: request->size %zu is not sizeof(pt_grpo_env_request) %zu (call "
                       "pt_grpo_env_request_init)", __func__, q->size, sizeof *q);
    PT_CHECK_NULL(q->rows);
    PT_CHECK_NULL(q->group_row);
    if (turn->group < 0 || turn->group > INT32_MAX)
        return pt__err(PT_ERANGE, "%s: turn->group %lld is out of range", __func__, (long long)turn->group);
    pt_prompt_row row;
    pt_prompt_row_init(&row);
    int st = pt_prompt_rows_get(&row, q->rows, q->group_row[turn->group]);
    if (st)
        return st;
    if (!row.json)
        return pt__err(PT_EINVAL, "%s: row %d has no JSON text (load the rows with keep_json)", __func__,
                       (int)q->group_row[turn->group]);
    cJSON *o = cJSON_CreateObject(), *rj = cJSON_Parse(row.json);
    bool ok = o && cJSON_AddNumberToObject(o, "step", (double)q->step) &&
              cJSON_AddNumberToObject(o, "episode", (double)(q->first_episode + turn->episode)) &&
              cJSON_AddNumberToObject(o, "group", (double)(q->first_group + turn->group)) && rj &&
              cJSON_AddItemToObject(o, "row", rj);
    if (!ok)
        cJSON_Delete(rj);
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    free(q->text);
    q->text = text ? pt__strdup(text) : NULL;
    cJSON_free(text);
    if (!q->text)
        return pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    *json = q->text;
    return PT_OK;
}

void pt_grpo_env_request_clear(pt_grpo_env_request *req)
{
    if (!req || req->size != sizeof *req)
        return;
    free(req->text);
    req->text = NULL;
}
