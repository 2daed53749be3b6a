/* posttrain grpo's data and rewards: the prompt rows of the JSONL file (each
 * prompt encoded, or wrapped in a chat template, with its answer) and the
 * built-in rewards exact, contains and length (--reward's parser and the
 * reward function). */
#include "cmd_grpo.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE (16u << 20)

/* ---- data ------------------------------------------------------------------ */

void grpo_free_rows(grpo_row *rows, int n)
{
    for (int i = 0; rows && i < n; i++) {
        free(rows[i].ids);
        free(rows[i].answer);
        cJSON_Delete(rows[i].json);
    }
    free(rows);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* The prompt's ids: the text encoded with the tokenizer's special tokens, or
 * one user message in a chat template with the generation prompt. */
static int prompt_ids(int32_t **out, int *n, const char *text, const pt_tokenizer *tok, const pt_chat_template *t)
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
    *out = malloc((len ? len : 1) * sizeof **out);
    if (!*out) {
        pt_free(ids);
        return PT_ENOMEM;
    }
    if (len)
        memcpy(*out, ids, len * sizeof *ids);
    pt_free(ids);
    *n = (int)len;
    return PT_OK;
}

/* The current row of the library's reader into *r, which is zeroed; 0, or 1
 * after the message (which names the file and line). */
static int read_row(grpo_row *r, pt_jsonl_reader *rd, bool need_answer, bool keep_json, const pt_tokenizer *tok,
                    const pt_chat_template *t, const char *where, const char *what)
{
    const char *prompt, *ans = NULL;
    int st = pt_jsonl_reader_string(&prompt, NULL, rd, "prompt", true);
    if (!st && !keep_json) /* --env: the environment reads the row's fields itself */
        st = pt_jsonl_reader_string(&ans, NULL, rd, "answer", false);
    if (!st && need_answer && !ans) {
        fprintf(stderr, "posttrain grpo: %s: needs a string \"answer\" (the exact and contains rewards)\n",
                where);
        return 1;
    }
    if (st)
        return cli_fail(what, st);
    st = prompt_ids(&r->ids, &r->n_ids, prompt, tok, t);
    if (!st && ans && !(r->answer = dup_str(ans)))
        st = PT_ENOMEM;
    if (st)
        return cli_fail(where, st);
    if (r->n_ids < 1) {
        fprintf(stderr, "posttrain grpo: %s: the prompt encodes to no tokens\n", where);
        return 1;
    }
    /* --env: the row as it was read, sent with every request */
    const char *json;
    if (keep_json) {
        if ((st = pt_jsonl_reader_json(&json, rd)))
            return cli_fail(where, st);
        if (!(r->json = cJSON_Parse(json))) {
            fprintf(stderr, "posttrain grpo: %s: out of memory\n", where);
            return 1;
        }
    }
    return 0;
}

int grpo_load_rows(grpo_row **out, int *n_out, const char *path, const char *opt, const grpo_args *a,
                   const pt_tokenizer *tok, const pt_chat_template *t)
{
    pt_jsonl_reader *rd;
    char what[64];
    snprintf(what, sizeof what, "grpo%s%s", opt ? " " : "", opt ? opt : "");
    int st = pt_jsonl_reader_open(&rd, path, MAX_LINE);
    if (st)
        return cli_fail(what, st);
    grpo_row *rows = NULL;
    int n = 0, cap = 0, rc = 0;
    bool need_answer = false;
    for (int k = 0; k < a->rewards.n && !a->env; k++)
        need_answer |= a->rewards.kind[k] != REWARD_LENGTH;
    while (!rc && (st = pt_jsonl_reader_next(rd)) == 1) {
        if (n == cap) {
            grpo_row *r = realloc(rows, (size_t)(cap ? 2 * cap : 64) * sizeof *r);
            if (!r) {
                fprintf(stderr, "posttrain grpo: out of memory\n");
                rc = 1;
                break;
            }
            rows = r;
            cap = cap ? 2 * cap : 64;
        }
        size_t lineno = 0;
        lineno = pt_jsonl_reader_line_number(rd);
        char where[512];
        snprintf(where, sizeof where, "%s%s%s line %zu", opt ? opt : "", opt ? " " : "", path, lineno);
        memset(&rows[n], 0, sizeof rows[n]);
        rc = read_row(&rows[n++], rd, need_answer, a->env != NULL, tok, t, where, what);
    }
    if (!rc && st < 0) {
        rc = cli_fail(what, st);
    } else if (!rc && n == 0) {
        fprintf(stderr, "posttrain grpo: %s%s%s has no rows\n", opt ? opt : "", opt ? " " : "", path);
        rc = 1;
    }
    pt_jsonl_reader_free(rd);
    if (rc) {
        grpo_free_rows(rows, n);
        return rc;
    }
    *out = rows;
    *n_out = n;
    return 0;
}

/* ---- rewards ------------------------------------------------------------------ */

static const char *const reward_kind_names[] = { "exact", "contains", "length" };

/* --reward NAME[:W][,NAME[:W]...], which may be repeated: each item is added. */
int grpo_parse_rewards(void *dst, const char *list, const char *cmd, const char *opt)
{
    grpo_rewards *r = dst;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        char item[64];
        if (n == 0 || n >= sizeof item)
            return cli_usage_error(cmd, "%s takes NAME[:WEIGHT] items separated by commas, not '%s'", opt, list);
        memcpy(item, p, n);
        item[n] = '\0';
        char *colon = strchr(item, ':');
        double w = 1.0;
        if (colon) {
            *colon = '\0';
            if (cli_parse_double(colon + 1, &w) || !isfinite(w))
                return cli_usage_error(cmd, "%s %s: the weight '%s' is not a number", opt, item, colon + 1);
        }
        int kind = -1;
        for (int k = 0; k < 3; k++)
            if (!strcmp(item, reward_kind_names[k]))
                kind = k;
        if (kind < 0)
            return cli_usage_error(cmd, "unknown reward '%s' (the built-in rewards are exact, contains, length)",
                                   item);
        for (int k = 0; k < r->n; k++)
            if (r->kind[k] == kind)
                return cli_usage_error(cmd, "reward '%s' is given twice", item);
        if (r->n >= PT_GRPO_MAX_REWARD_FUNCS)
            return cli_usage_error(cmd, "at most %d rewards", PT_GRPO_MAX_REWARD_FUNCS);
        r->kind[r->n] = kind;
        r->name[r->n] = reward_kind_names[kind];
        r->weight[r->n] = w;
        r->n++;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
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

int grpo_builtin_reward(float *rewards, const pt_reward_batch *batch, void *payload)
{
    const reward_ctx *rc = payload;
    const int kind = rc->a->rewards.kind[batch->func_index];
    for (int i = 0; i < batch->n; i++) {
        const pt_reward_item *it = &batch->items[i];
        const int n_comp = it->n_ids - it->prompt_len;
        if (kind == REWARD_LENGTH) {
            rewards[i] = -(float)n_comp / (float)rc->a->gen.max_new_tokens;
            continue;
        }
        const char *answer = rc->rows[rc->group_row[it->group]].answer;
        char *text;
        size_t len;
        if (pt_tokenizer_decode(&text, &len, rc->tok, it->ids + it->prompt_len, (size_t)n_comp,
                                PT_TOK_SKIP_SPECIAL))
            return 1;
        if (kind == REWARD_EXACT) {
            const char *s = text, *t = answer;
            size_t ns = len, nt = strlen(answer);
            strip(&s, &ns);
            strip(&t, &nt);
            rewards[i] = ns == nt && !memcmp(s, t, ns) ? 1.0f : 0.0f;
        } else {
            rewards[i] = answer[0] == '\0' || strstr(text, answer) ? 1.0f : 0.0f;
        }
        pt_free(text);
    }
    return 0;
}
