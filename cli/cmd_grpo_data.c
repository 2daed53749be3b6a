/* posttrain grpo's data and rewards on the library's
 * (posttrain/grpo_builtin.h): the prompt rows of the JSONL files
 * (pt_prompt_rows_load, kept as the library holds them) and --reward's
 * parser into the list of built-in rewards. */
#include "cmd_grpo.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- data ------------------------------------------------------------------ */

/* The message of a failed load (what: "grpo" or "grpo --eval"). */
static int load_failed(int st, const pt_prompt_rows_report *rep, const char *path, const char *opt,
                       const char *what)
{
    const char *sp = opt ? " " : "", *o = opt ? opt : "";
    switch (rep->fault) {
    case PT_ROWS_FAULT_NO_ANSWER:
        fprintf(stderr, "posttrain grpo: %s%s%s (the exact and contains rewards)\n", o, sp, pt_last_error());
        return 1;
    case PT_ROWS_FAULT_EMPTY_PROMPT:
    case PT_ROWS_FAULT_NO_ROWS:
        fprintf(stderr, "posttrain grpo: %s%s%s\n", o, sp, pt_last_error());
        return 1;
    case PT_ROWS_FAULT_ENCODE: {
        char where[512];
        snprintf(where, sizeof where, "%s%s%s line %zu", o, sp, path, rep->line);
        return cli_fail(where, st);
    }
    default:
        if (st == PT_ENOMEM && !pt_last_error()[0]) {
            fprintf(stderr, "posttrain grpo: out of memory\n");
            return 1;
        }
        return cli_fail(what, st);
    }
}

int grpo_load_rows(pt_prompt_rows **out, const char *path, const char *opt, const grpo_args *a,
                   const pt_tokenizer *tok, const pt_chat_template *t)
{
    char what[64];
    snprintf(what, sizeof what, "grpo%s%s", opt ? " " : "", opt ? opt : "");
    pt_prompt_rows_options o;
    pt_prompt_rows_options_init(&o);
    o.chat_template = t;
    o.read_answer = !a->env;   /* --env: the environment reads the row's fields itself */
    o.keep_json = a->env != NULL;
    for (int k = 0; k < a->rewards.n && !a->env; k++)
        o.require_answer |= a->rewards.kinds[k] != PT_REWARD_LENGTH;
    pt_prompt_rows_report rep;
    pt_prompt_rows_report_init(&rep);
    int st = pt_prompt_rows_load(out, &rep, path, tok, &o);
    if (st)
        return load_failed(st, &rep, path, opt, what);
    if (pt_prompt_rows_size(*out) > INT32_MAX) {
        fprintf(stderr, "posttrain grpo: out of memory\n");
        return 1;
    }
    return 0;
}

/* ---- rewards ------------------------------------------------------------------ */

/* --reward NAME[:W][,NAME[:W]...], which may be repeated: each item is added. */
int grpo_parse_rewards(void *dst, const char *list, const char *cmd, const char *opt)
{
    grpo_args *a = (grpo_args *)((char *)dst - offsetof(grpo_args, rewards));
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
        int kind;
        if (pt_builtin_reward_from_name(&kind, item))
            return cli_usage_error(cmd, "unknown reward '%s' (the built-in rewards are exact, contains, length)",
                                   item);
        int st = pt_builtin_rewards_add(&a->rewards, kind, w);
        if (st == PT_EEXIST)
            return cli_usage_error(cmd, "reward '%s' is given twice", item);
        if (st)
            return cli_usage_error(cmd, "at most %d rewards", PT_GRPO_MAX_REWARD_FUNCS);
        a->reward_names[a->rewards.n - 1] = pt_builtin_reward_name(kind);
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}
