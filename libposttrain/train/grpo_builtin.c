/* The built-in rewards (exact, contains, length; a list with weights, one
 * text, and the pt_reward_fn over a batch) and the prompt rows of a GRPO
 * data file (posttrain/grpo_builtin.h). */
#include "posttrain/grpo_builtin.h"
#include "posttrain/jsonl.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- rewards ----------------------------------------------------------------- */

static const pt_enum_entry k_builtin_rewards[] = {
    { PT_REWARD_EXACT, "exact" },
    { PT_REWARD_CONTAINS, "contains" },
    { PT_REWARD_LENGTH, "length" },
};
PT_ENUM_NAME_FUNCS(pt_builtin_reward, k_builtin_rewards, "built-in reward")

int pt_builtin_rewards_init(pt_builtin_rewards *rewards)
{
    PT_STRUCT_INIT_ZERO(rewards);
    rewards->max_new_tokens = 64;
    return PT_OK;
}

int pt_builtin_rewards_add(pt_builtin_rewards *rewards, int kind, double weight)
{
    PT_CHECK_NULL(rewards);
    PT_CHECK_ARG(pt_builtin_reward_name(kind) != NULL, kind, "%d is not a pt_builtin_reward", kind);
    PT_CHECK_ARG(isfinite(weight), weight, "must be finite");
    if (rewards->n < 0 || rewards->n > PT_GRPO_MAX_REWARD_FUNCS)
        return pt__err_arg(__func__, "rewards", "its n %d is not in 0 .. %d", rewards->n,
                          PT_GRPO_MAX_REWARD_FUNCS);
    for (int k = 0; k < rewards->n; k++)
        if (rewards->kinds[k] == kind)
            return pt__err(PT_EEXIST, "%s: reward '%s' is in the list already", __func__,
                          pt_builtin_reward_name(kind));
    if (rewards->n == PT_GRPO_MAX_REWARD_FUNCS)
        return pt__err(PT_ERANGE, "%s: the list holds %d rewards already, the most there can be", __func__,
                      PT_GRPO_MAX_REWARD_FUNCS);
    rewards->kinds[rewards->n] = kind;
    rewards->weights[rewards->n] = weight;
    rewards->n++;
    return PT_OK;
}

bool pt_builtin_rewards_have_accuracy(const pt_builtin_rewards *rewards)
{
    for (int k = 0; rewards && k < rewards->n && k < PT_GRPO_MAX_REWARD_FUNCS; k++)
        if (rewards->kinds[k] != PT_REWARD_LENGTH && rewards->weights[k] > 0)
            return true;
    return false;
}

static void strip(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)(*s)[0])) {
        (*s)++;
        (*n)--;
    }
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

int pt_builtin_reward_score(float *reward, int kind, const char *text, size_t text_len, const char *answer,
                            int completion_tokens, int max_new_tokens)
{
    PT_CHECK_NULL(reward);
    PT_CHECK_ARG(pt_builtin_reward_name(kind) != NULL, kind, "%d is not a pt_builtin_reward", kind);
    PT_CHECK_ARG(completion_tokens >= 0, completion_tokens, "%d is negative", completion_tokens);
    if (kind == PT_REWARD_LENGTH) {
        PT_CHECK_ARG(max_new_tokens >= 1, max_new_tokens, "%d is below 1", max_new_tokens);
        *reward = -(float)completion_tokens / (float)max_new_tokens;
        return PT_OK;
    }
    PT_CHECK_NULL(text);
    if (!answer)
        return pt__err(PT_EINVAL, "%s: the %s reward needs an answer (answer is NULL)", __func__,
                      pt_builtin_reward_name(kind));
    if (kind == PT_REWARD_EXACT) {
        const char *s = text, *t = answer;
        size_t ns = text_len, nt = strlen(answer);
        strip(&s, &ns);
        strip(&t, &nt);
        *reward = ns == nt && !memcmp(s, t, ns) ? 1.0f : 0.0f;
    } else {
        *reward = answer[0] == '\0' || strstr(text, answer) ? 1.0f : 0.0f;
    }
    return PT_OK;
}

PT_ZERO_INIT(pt_builtin_reward_payload_init, pt_builtin_reward_payload, payload)

/* The payload and its rewards read into p and rw (older sizes allowed);
 * the kind of the batch's reward function, or -1 after the message. */
static int batch_kind(pt_builtin_reward_payload *p, pt_builtin_rewards *rw, const pt_reward_batch *batch,
                      const void *payload)
{
    const char *f = "pt_builtin_reward_fn";
    if (!batch || !payload ||
        pt__struct_read(p, sizeof *p, payload, f, "pt_builtin_reward_payload_init") || !p->rewards ||
        !p->tokenizer || p->n_answers < 0 || (p->n_answers > 0 && !p->answers))
        return pt__err(PT_EINVAL, "%s: the payload must be a pt_builtin_reward_payload with rewards, a tokenizer "
                      "and n_answers answers", f), -1;
    if (pt__struct_read(rw, sizeof *rw, p->rewards, f, "pt_builtin_rewards_init"))
        return -1;
    if (batch->func_index < 0 || batch->func_index >= rw->n || batch->func_index >= PT_GRPO_MAX_REWARD_FUNCS)
        return pt__err(PT_EINVAL, "%s: reward function %d is not in the payload's %d rewards", f,
                      batch->func_index, rw->n), -1;
    return rw->kinds[batch->func_index];
}

int pt_builtin_reward_fn(float *rewards, const pt_reward_batch *batch, void *payload)
{
    pt_builtin_reward_payload pl;
    pt_builtin_rewards rw;
    pt_builtin_reward_payload_init(&pl);
    pt_builtin_rewards_init(&rw);
    const pt_builtin_reward_payload *p = &pl;
    const int kind = batch_kind(&pl, &rw, batch, payload);
    if (kind < 0 || !rewards)
        return 1;
    for (int i = 0; i < batch->n; i++) {
        const pt_reward_item *it = &batch->items[i];
        const int n_comp = it->n_ids - it->prompt_len;
        if (kind == PT_REWARD_LENGTH) {
            if (pt_builtin_reward_score(&rewards[i], kind, NULL, 0, NULL, n_comp, rw.max_new_tokens))
                return 1;
            continue;
        }
        const char *answer = it->group >= 0 && it->group < p->n_answers ? p->answers[it->group] : NULL;
        if (!answer) {
            pt__err(PT_EINVAL, "pt_builtin_reward_fn: group %lld has no answer (the %s reward needs one)",
                   (long long)it->group, pt_builtin_reward_name(kind));
            return 1;
        }
        char *text;
        size_t len;
        if (pt_tokenizer_decode(&text, &len, p->tokenizer, it->ids + it->prompt_len, (size_t)n_comp,
                                PT_TOK_SKIP_SPECIAL))
            return 1;
        int st = pt_builtin_reward_score(&rewards[i], kind, text, len, answer, n_comp, rw.max_new_tokens);
        pt_free(text);
        if (st)
            return 1;
    }
    return 0;
}

/* ---- prompt rows ---------------------------------------------------------------- */

typedef struct row_rec {
    int32_t *ids;
    int n_ids;
    char *answer, *json;
} row_rec;

struct pt_prompt_rows {
    row_rec *r;
    size_t n, cap;
    int max_prompt;
};

static const pt_enum_entry k_faults[] = {
    { PT_ROWS_FAULT_NONE, "none" },
    { PT_ROWS_FAULT_READ, "read" },
    { PT_ROWS_FAULT_NO_ANSWER, "no_answer" },
    { PT_ROWS_FAULT_ENCODE, "encode" },
    { PT_ROWS_FAULT_EMPTY_PROMPT, "empty_prompt" },
    { PT_ROWS_FAULT_NO_ROWS, "no_rows" },
};
PT_ENUM_NAME_FUNCS(pt_prompt_rows_fault, k_faults, "prompt rows fault")

PT_ZERO_INIT(pt_prompt_row_init, pt_prompt_row, row)

int pt_prompt_rows_options_init(pt_prompt_rows_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->read_answer = true;
    return PT_OK;
}

PT_ZERO_INIT(pt_prompt_rows_report_init, pt_prompt_rows_report, report)

int pt_prompt_rows_create(pt_prompt_rows **out)
{
    PT_CHECK_NULL(out);
    *out = calloc(1, sizeof **out);
    return *out ? PT_OK : pt__err(PT_ENOMEM, "pt_prompt_rows_create: out of memory");
}

void pt_prompt_rows_free(pt_prompt_rows *rows)
{
    for (size_t i = 0; rows && i < rows->n; i++) {
        free(rows->r[i].ids);
        free(rows->r[i].answer);
        free(rows->r[i].json);
    }
    if (rows)
        free(rows->r);
    free(rows);
}

int64_t pt_prompt_rows_size(const pt_prompt_rows *rows)
{
    return rows ? (int64_t)rows->n : 0;
}

int pt_prompt_rows_max_prompt_len(const pt_prompt_rows *rows)
{
    return rows ? rows->max_prompt : 0;
}

int pt_prompt_rows_get(pt_prompt_row *row, const pt_prompt_rows *rows, int64_t i)
{
    PT_CHECK_NULL(rows);
    PT_CHECK_STRUCT_OUT(row, pt_prompt_row, pt_prompt_row_init);
    PT_CHECK_NULL(row);
    if (i < 0 || (uint64_t)i >= rows->n)
        return pt__err(PT_ERANGE, "%s: row %lld is not in 0 .. %lld", __func__, (long long)i,
                      (long long)rows->n - 1);
    const row_rec *r = &rows->r[i];
    pt_prompt_row full = { .size = sizeof full, .ids = r->ids, .n_ids = r->n_ids, .answer = r->answer,
                           .json = r->json };
    pt__struct_write(row, &full);
    return PT_OK;
}

/* A new zeroed record at the end (not counted yet), or NULL. */
static row_rec *grow(pt_prompt_rows *rows)
{
    if (rows->n == rows->cap) {
        row_rec *r = pt__grow_array(rows->r, &rows->cap, 64, sizeof *r);
        if (!r)
            return NULL;
        rows->r = r;
    }
    memset(&rows->r[rows->n], 0, sizeof rows->r[rows->n]);
    return &rows->r[rows->n];
}

static void commit(pt_prompt_rows *rows)
{
    const int n = rows->r[rows->n].n_ids;
    rows->max_prompt = n > rows->max_prompt ? n : rows->max_prompt;
    rows->n++;
}

static void drop(row_rec *r)
{
    free(r->ids);
    free(r->answer);
    free(r->json);
    memset(r, 0, sizeof *r);
}

int pt_prompt_rows_add(pt_prompt_rows *rows, const int32_t *ids, int n_ids, const char *answer)
{
    PT_CHECK_NULL(rows);
    PT_CHECK_NULL(ids);
    PT_CHECK_ARG(n_ids >= 1, n_ids, "%d is below 1", n_ids);
    for (int i = 0; i < n_ids; i++)
        PT_CHECK_ARG(ids[i] >= 0, ids, "id %d at %d is negative", ids[i], i);
    row_rec *r = grow(rows);
    if (!r)
        return PT_ENOMEM;
    r->ids = pt__malloc_array((size_t)n_ids, sizeof *r->ids);
    r->answer = answer ? pt__strdup(answer) : NULL;
    if (!r->ids || (answer && !r->answer)) {
        drop(r);
        return pt__err(PT_ENOMEM, "%s: out of memory", __func__);
    }
    memcpy(r->ids, ids, (size_t)n_ids * sizeof *ids);
    r->n_ids = n_ids;
    commit(rows);
    return PT_OK;
}

/* The prompt's ids: the text encoded with the tokenizer's special tokens, or
 * one user message in a chat template with the generation prompt. */
static int prompt_ids(row_rec *r, const char *text, const pt_tokenizer *tok, const pt_chat_template *t)
{
    int32_t *ids = NULL;
    size_t len = 0;
    int st;
    if (t) {
        pt_chat_message m = { .role = PT_CHAT_ROLE_USER, .content = text };
        pt_chat_options co;
        (void)pt_chat_options_init(&co);
        co.add_generation_prompt = 1;
        st = pt_chat_render_ids(&ids, NULL, &len, t, tok, &m, 1, &co);
    } else {
        st = pt_tokenizer_encode(&ids, &len, tok, text, strlen(text), PT_TOK_ADD_SPECIAL);
    }
    if (st)
        return st;
    if (len > (size_t)INT32_MAX) {
        pt_free(ids);
        return pt__err(PT_ERANGE, "the prompt has %zu tokens", len);
    }
    r->ids = pt__malloc_array(len ? len : 1, sizeof *r->ids);
    if (r->ids && len)
        memcpy(r->ids, ids, len * sizeof *ids);
    pt_free(ids);
    r->n_ids = (int)len;
    return r->ids ? PT_OK : PT_ENOMEM;
}

/* With opts->messages, the row's "messages" rendered with the template and
 * the generation prompt into r; 0 or a status naming the line. */
static int messages_ids(row_rec *r, pt_jsonl_reader *rd, const pt_tokenizer *tok, const pt_chat_template *t,
                        const char *path, size_t line)
{
    const char *json;
    int st = pt_jsonl_reader_json(&json, rd);
    cJSON *row = st ? NULL : cJSON_Parse(json);
    if (!row)
        return st ? st : pt__err(PT_ENOMEM, "%s line %zu: out of memory", path, line);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(row, "messages"), *it;
    const int count = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : 0;
    pt_chat_message *m = count > 0 ? pt__calloc((size_t)count, sizeof *m) : NULL;
    if (!msgs)
        st = pt__err(PT_ENOTFOUND, "%s line %zu: the row has no \"prompt\" or \"messages\"", path, line);
    else if (count < 1)
        st = pt__err(PT_EFORMAT, "%s line %zu: \"messages\" must be a non-empty array", path, line);
    else if (!m)
        st = PT_ENOMEM;
    int i = 0;
    const cJSON *list = st ? NULL : msgs;
    cJSON_ArrayForEach(it, list)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content) || pt_chat_role_from_name(&m[i].role,
                                                                                         role->valuestring)) {
            st = pt__err(PT_EFORMAT, "%s line %zu: messages[%d] needs a \"role\" (system, user, assistant, tool) "
                        "and a string \"content\"", path, line, i);
            break;
        }
        m[i++].content = content->valuestring;
    }
    int32_t *ids = NULL;
    size_t len = 0;
    if (!st) {
        pt_chat_options co;
        (void)pt_chat_options_init(&co);
        co.add_generation_prompt = 1;
        if ((st = pt_chat_render_ids(&ids, NULL, &len, t, tok, m, (size_t)count, &co)))
            st = pt__err_prefix(st, "%s line %zu: messages", path, line);
    }
    if (!st && len > (size_t)INT32_MAX)
        st = pt__err(PT_ERANGE, "%s line %zu: the prompt has %zu tokens", path, line, len);
    if (!st && !(r->ids = pt__malloc_array(len ? len : 1, sizeof *r->ids)))
        st = PT_ENOMEM;
    if (!st && len)
        memcpy(r->ids, ids, len * sizeof *ids);
    r->n_ids = st ? 0 : (int)len;
    pt_free(ids);
    free(m);
    cJSON_Delete(row);
    return st;
}

/* The reader's current row into r: 0, or a status with *fault set and the
 * message naming the line. */
static int read_row(row_rec *r, int *fault, pt_jsonl_reader *rd, const pt_tokenizer *tok,
                    const pt_prompt_rows_options *o, const char *path)
{
    const size_t line = pt_jsonl_reader_line_number(rd);
    const char *prompt, *ans = NULL, *json;
    int st = pt_jsonl_reader_string(&prompt, NULL, rd, "prompt", !o->messages);
    if (!st && o->read_answer)
        st = pt_jsonl_reader_string(&ans, NULL, rd, "answer", false);
    *fault = PT_ROWS_FAULT_READ;
    if (st)
        return st;
    if (o->require_answer && !ans) {
        *fault = PT_ROWS_FAULT_NO_ANSWER;
        return pt__err(PT_EFORMAT, "%s line %zu: needs a string \"answer\"", path, line);
    }
    *fault = PT_ROWS_FAULT_ENCODE;
    if ((st = prompt ? prompt_ids(r, prompt, tok, o->chat_template)
                     : messages_ids(r, rd, tok, o->chat_template, path, line)))
        return st;
    if (ans && !(r->answer = pt__strdup(ans)))
        return PT_ENOMEM;
    if (r->n_ids < 1) {
        *fault = PT_ROWS_FAULT_EMPTY_PROMPT;
        return pt__err(PT_EFORMAT, "%s line %zu: the prompt encodes to no tokens", path, line);
    }
    *fault = PT_ROWS_FAULT_READ;
    if (o->keep_json && ((st = pt_jsonl_reader_json(&json, rd)) || !(r->json = pt__strdup(json))))
        return st ? st : PT_ENOMEM;
    *fault = PT_ROWS_FAULT_NONE;
    return PT_OK;
}

/* Every row of rd into rows; 0, or a status with the report filled. */
static int read_all(pt_prompt_rows *rows, pt_prompt_rows_report *rep, pt_jsonl_reader *rd,
                    const pt_tokenizer *tok, const pt_prompt_rows_options *o, const char *path)
{
    int st;
    while ((st = pt_jsonl_reader_next(rd)) == 1) {
        row_rec *r = grow(rows);
        if (!r) {
            rep->fault = PT_ROWS_FAULT_READ;
            return PT_ENOMEM;
        }
        if ((st = read_row(r, &rep->fault, rd, tok, o, path))) {
            rep->line = pt_jsonl_reader_line_number(rd);
            drop(r);
            return st;
        }
        commit(rows);
    }
    if (st < 0) {
        rep->fault = PT_ROWS_FAULT_READ;
        rep->line = pt_jsonl_reader_line_number(rd);
        return st;
    }
    if (rows->n == 0) {
        rep->fault = PT_ROWS_FAULT_NO_ROWS;
        return pt__err(PT_EFORMAT, "%s has no rows", path);
    }
    return PT_OK;
}

int pt_prompt_rows_load(pt_prompt_rows **out, pt_prompt_rows_report *report, const char *path,
                        const pt_tokenizer *tok, const pt_prompt_rows_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(path);
    PT_CHECK_NULL(tok);
    pt_prompt_rows_options o;
    pt_prompt_rows_report rep;
    pt_prompt_rows_report_init(&rep);
    PT_CHECK_STRUCT_READ(o, opts, pt_prompt_rows_options_init);
    PT_CHECK_STRUCT_OUT(report, pt_prompt_rows_report, pt_prompt_rows_report_init);
    PT_CHECK_ARG(!o.messages || o.chat_template, opts, "messages needs a chat_template to render them");
    pt_jsonl_reader *rd;
    pt_prompt_rows *rows = NULL;
    rep.fault = PT_ROWS_FAULT_READ;
    int st = pt_jsonl_reader_open(&rd, path, o.max_line ? o.max_line : (size_t)16 << 20);
    if (!st) {
        if (!(st = pt_prompt_rows_create(&rows)))
            st = read_all(rows, &rep, rd, tok, &o, path);
        pt_jsonl_reader_free(rd);
    }
    if (st) {
        pt_prompt_rows_free(rows);
        rows = NULL;
    } else {
        rep.fault = PT_ROWS_FAULT_NONE;
    }
    pt__struct_write(report, &rep);
    *out = rows;
    return st;
}
