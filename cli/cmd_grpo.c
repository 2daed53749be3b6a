/* posttrain grpo: GRPO of a Hugging Face model directory on JSONL prompts
 * with built-in reward functions: pt_generate rollouts, pt_rollout_buffer,
 * pt_grpo_step; a progress line per step, a metrics file, the trained model
 * saved in Hugging Face layout. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_LINE (16u << 20)

static void grpo_usage(FILE *f)
{
    fprintf(f,
        "usage: posttrain grpo --model DIR --data FILE.jsonl --out DIR --reward NAME[:W][,NAME[:W]...] [options]\n\n"
        "Rows: {\"prompt\": str, \"answer\": str, ...} (other fields are ignored).  Each step\n"
        "samples --num-generations completions for each of --batch-prompts prompts, scores\n"
        "them, and applies --num-iterations GRPO updates.  The trained model is saved in\n"
        "Hugging Face layout at --out, with OUT/metrics.jsonl.\n\n"
        "rewards (weights W default to 1; R = sum of W * reward):\n"
        "  exact      1 if the completion, stripped of surrounding whitespace, equals the answer, else 0\n"
        "  contains   1 if the answer appears in the completion, else 0\n"
        "  length     -(completion tokens / --max-new-tokens): a length penalty (e.g. length:0.1)\n\n"
        "generation:\n"
        "  --num-generations G (8)  --max-new-tokens N (64)  --temperature F (1.0)\n"
        "  --top-p F (1.0)  --top-k N (0: off)  --chat (wrap prompts in the tokenizer's chat template)\n"
        "  --chat-template NAME (wrap prompts in that template, e.g. chatml)\n"
        "length and batch:\n"
        "  --steps N (default: one pass over the prompts)  --batch-prompts N (4)\n");
    cli_optimizer_usage(f, "1e-6");
    fprintf(f,
        "GRPO (docs/grpo.md):\n"
        "  --beta F (0: no reference model; > 0 loads --model again as the reference)\n"
        "  --epsilon F (0.2)  --epsilon-high F (= --epsilon)  --num-iterations N (1)\n"
        "  --loss-type grpo|bnpo|dapo|dr_grpo (dapo)  --scale-rewards group|batch|none|rloo (group)\n"
        "  --mask-truncated (no loss on completions cut at --max-new-tokens)\n"
        "other:\n"
        "  --lora-rank N (0: full)  --lora-alpha F (= rank)  --lora-targets LIST (q,v)\n"
        "  --seed N (0)  --threads N  --metrics FILE (OUT/metrics.jsonl)  --log-every N (1)\n");
}

enum { REWARD_EXACT, REWARD_CONTAINS, REWARD_LENGTH };
static const char *const reward_kind_names[] = { "exact", "contains", "length" };

typedef struct grpo_args {
    const char *model, *data, *out, *metrics, *chat_template;
    bool chat, mask_truncated;
    pt_optimizer_options opt;
    pt_grpo_options grpo;
    int n_rewards, reward_kind[PT_GRPO_MAX_REWARD_FUNCS];
    double reward_weight[PT_GRPO_MAX_REWARD_FUNCS];
    const char *reward_name[PT_GRPO_MAX_REWARD_FUNCS];
    int G, max_new, top_k, batch_prompts, num_iterations, lora_rank, log_every, threads;
    double temperature, top_p, epsilon, epsilon_high, lora_alpha;
    bool epsilon_high_set;
    unsigned lora_targets;
    int64_t steps;
    uint64_t seed;
} grpo_args;

static int parse_rewards(grpo_args *a, const char *list)
{
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ",");
        char item[64];
        if (n == 0 || n >= sizeof item)
            return cli_usage_error("grpo", "--reward takes NAME[:WEIGHT] items separated by commas, not '%s'", list);
        memcpy(item, p, n);
        item[n] = '\0';
        char *colon = strchr(item, ':');
        double w = 1.0;
        if (colon) {
            *colon = '\0';
            if (cli_parse_double(colon + 1, &w) || !isfinite(w))
                return cli_usage_error("grpo", "--reward %s: the weight '%s' is not a number", item, colon + 1);
        }
        int kind = -1;
        for (int k = 0; k < 3; k++)
            if (!strcmp(item, reward_kind_names[k]))
                kind = k;
        if (kind < 0)
            return cli_usage_error("grpo", "unknown reward '%s' (the built-in rewards are exact, contains, length)",
                                   item);
        for (int k = 0; k < a->n_rewards; k++)
            if (a->reward_kind[k] == kind)
                return cli_usage_error("grpo", "reward '%s' is given twice", item);
        if (a->n_rewards >= PT_GRPO_MAX_REWARD_FUNCS)
            return cli_usage_error("grpo", "at most %d rewards", PT_GRPO_MAX_REWARD_FUNCS);
        a->reward_kind[a->n_rewards] = kind;
        a->reward_name[a->n_rewards] = reward_kind_names[kind];
        a->reward_weight[a->n_rewards] = w;
        a->n_rewards++;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int parse_args(grpo_args *a, int argc, char **argv)
{
    pt_optimizer_options_init(&a->opt);
    a->opt.lr = 1e-6;
    pt_grpo_options_init(&a->grpo);
    a->G = 8;
    a->max_new = 64;
    a->temperature = 1.0;
    a->top_p = 1.0;
    a->batch_prompts = 4;
    a->num_iterations = 1;
    a->log_every = 1;
    a->epsilon = 0.2;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            grpo_usage(stdout);
            return -1;
        }
        if (!strcmp(k, "--chat")) { a->chat = true; continue; }
        if (!strcmp(k, "--mask-truncated")) { a->mask_truncated = true; continue; }
        if (i + 1 >= argc)
            return cli_usage_error("grpo", "%s needs a value", k);
        const char *v = argv[++i];
        long n;
        double x;
#define NUM(opt, lo, hi, dst) CLI_INT_OPTION("grpo", opt, lo, hi, dst)
#define REAL(opt, lo, hi, dst)                                                              \
    if (!strcmp(k, opt)) {                                                                  \
        if (cli_parse_double(v, &x) || !isfinite(x) || x < (lo) || x > (hi))                \
            return cli_usage_error("grpo", "%s needs a number in [%g, %g], not '%s'", opt,   \
                                   (double)(lo), (double)(hi), v);                          \
        dst = x;                                                                            \
        continue;                                                                           \
    }
        if (!strcmp(k, "--model")) { a->model = v; continue; }
        if (!strcmp(k, "--data")) { a->data = v; continue; }
        if (!strcmp(k, "--out")) { a->out = v; continue; }
        if (!strcmp(k, "--metrics")) { a->metrics = v; continue; }
        if (!strcmp(k, "--chat-template")) { a->chat_template = v; continue; }
        if (!strcmp(k, "--reward")) {
            int rc = parse_rewards(a, v);
            if (rc)
                return rc;
            continue;
        }
        if (!strcmp(k, "--lora-targets")) {
            if (cli_parse_lora_targets(&a->lora_targets, v))
                return cli_usage_error("grpo", "--lora-targets takes a comma-separated list of q,k,v,o,gate,up,down "
                                               "or all, not '%s'", v);
            continue;
        }
        if (!strcmp(k, "--loss-type")) {
            static const char *const names[] = { "grpo", "bnpo", "dapo", "dr_grpo" };
            int t = -1;
            for (int j = 0; j < 4; j++)
                if (!strcmp(v, names[j]))
                    t = j;
            if (t < 0)
                return cli_usage_error("grpo", "--loss-type is grpo, bnpo, dapo or dr_grpo, not '%s'", v);
            a->grpo.loss_type = t == 0 ? PT_GRPO_LOSS_GRPO : t == 1 ? PT_GRPO_LOSS_BNPO
                              : t == 2 ? PT_GRPO_LOSS_DAPO : PT_GRPO_LOSS_DR_GRPO;
            continue;
        }
        if (!strcmp(k, "--scale-rewards")) {
            if (!strcmp(v, "group"))
                a->grpo.scale_rewards = PT_GRPO_SCALE_GROUP;
            else if (!strcmp(v, "batch"))
                a->grpo.scale_rewards = PT_GRPO_SCALE_BATCH;
            else if (!strcmp(v, "none"))
                a->grpo.scale_rewards = PT_GRPO_SCALE_NONE;
            else if (!strcmp(v, "rloo"))
                a->grpo.scale_rewards = PT_GRPO_SCALE_RLOO;
            else
                return cli_usage_error("grpo", "--scale-rewards is group, batch, none or rloo, not '%s'", v);
            continue;
        }
        if (!strcmp(k, "--seed")) {
            if (cli_parse_seed(v, &a->seed) || v[0] == '-')
                return cli_usage_error("grpo", "--seed needs a non-negative integer, not '%s'", v);
            continue;
        }
        int orc;
        if (cli_optimizer_option(&a->opt, "grpo", k, v, &orc)) {
            if (orc)
                return orc;
            continue;
        }
        if (!strcmp(k, "--epsilon-high")) {
            if (cli_parse_double(v, &x) || !isfinite(x) || x < 0 || x > 10)
                return cli_usage_error("grpo", "--epsilon-high needs a number in [0, 10], not '%s'", v);
            a->epsilon_high = x;
            a->epsilon_high_set = true;
            continue;
        }
        REAL("--temperature", 0, 100, a->temperature)
        REAL("--top-p", 1e-9, 1, a->top_p)
        REAL("--beta", 0, 1e6, a->grpo.beta)
        REAL("--epsilon", 0, 0.999999, a->epsilon)
        REAL("--lora-alpha", 1e-9, 1e9, a->lora_alpha)
        NUM("--num-generations", 2, 1024, a->G)
        NUM("--max-new-tokens", 1, 1000000, a->max_new)
        NUM("--top-k", 0, 100000000, a->top_k)
        NUM("--steps", 1, 1000000000L, a->steps)
        NUM("--batch-prompts", 1, 65536, a->batch_prompts)
        NUM("--num-iterations", 1, 1000, a->num_iterations)
        NUM("--lora-rank", 0, 65536, a->lora_rank)
        NUM("--log-every", 1, 1000000000L, a->log_every)
        NUM("--threads", 1, 1024, a->threads)
        return cli_usage_error("grpo", "unknown option '%s'", k);
#undef NUM
#undef REAL
    }
    if (!a->model || !a->data || !a->out)
        return cli_usage_error("grpo", "--model, --data and --out are required");
    if (a->n_rewards == 0)
        return cli_usage_error("grpo", "--reward is required (exact, contains or length; e.g. --reward exact,length:0.1)");
    if (a->temperature > 0 && a->temperature < 1e-6)
        return cli_usage_error("grpo", "--temperature must be 0 (greedy) or at least 1e-6");
    if (a->chat && a->chat_template)
        return cli_usage_error("grpo", "give --chat or --chat-template, not both");
    if (a->lora_rank == 0 && (a->lora_alpha != 0 || a->lora_targets))
        return cli_usage_error("grpo", "--lora-alpha and --lora-targets need --lora-rank");
    if (a->G * (int64_t)a->batch_prompts > 65536)
        return cli_usage_error("grpo", "--num-generations x --batch-prompts is too large");
    a->grpo.epsilon_low = a->epsilon;
    a->grpo.epsilon_high = a->epsilon_high_set ? a->epsilon_high : a->epsilon;
    a->grpo.mask_truncated_completions = a->mask_truncated;
    a->grpo.max_completion_length = a->max_new;
    return 0;
}

/* ---- data ------------------------------------------------------------------ */

typedef struct grpo_row {
    int32_t *ids;          /* prompt ids (malloc) */
    int n_ids;
    char *answer;          /* NULL when the row has none */
} grpo_row;

static void free_rows(grpo_row *rows, int n)
{
    for (int i = 0; rows && i < n; i++) {
        free(rows[i].ids);
        free(rows[i].answer);
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
        pt_chat_message m = { PT_CHAT_ROLE_USER, text, NULL };
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

/* Read every row; a malformed one is an error naming its line. */
static int load_rows(grpo_row **out, int *n_out, const grpo_args *a, const pt_tokenizer *tok,
                     const pt_chat_template *t)
{
    FILE *f = fopen(a->data, "r");
    if (!f) {
        fprintf(stderr, "posttrain grpo: cannot open %s: %s\n", a->data, strerror(errno));
        return 1;
    }
    grpo_row *rows = NULL;
    int n = 0, cap = 0, rc = 1;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    long lineno = 0;
    bool need_answer = false;
    for (int k = 0; k < a->n_rewards; k++)
        need_answer |= a->reward_kind[k] != REWARD_LENGTH;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t s = 0;
        while (s < (size_t)len && isspace((unsigned char)line[s]))
            s++;
        if (s == (size_t)len)
            continue;   /* blank line */
        if ((size_t)len > MAX_LINE || strlen(line) != (size_t)len) {
            fprintf(stderr, "posttrain grpo: %s line %ld: too long or holds a NUL byte\n", a->data, lineno);
            goto out;
        }
        cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
        const cJSON *p = j ? cJSON_GetObjectItemCaseSensitive(j, "prompt") : NULL;
        const cJSON *ans = j ? cJSON_GetObjectItemCaseSensitive(j, "answer") : NULL;
        const char *why = !j || !cJSON_IsObject(j)        ? "not a JSON object"
                          : !cJSON_IsString(p)            ? "needs a string \"prompt\""
                          : ans && !cJSON_IsString(ans)   ? "\"answer\" must be a string"
                          : need_answer && !ans           ? "needs a string \"answer\" (the exact and contains rewards)"
                          : NULL;
        if (why) {
            fprintf(stderr, "posttrain grpo: %s line %ld: %s\n", a->data, lineno, why);
            cJSON_Delete(j);
            goto out;
        }
        if (n == cap) {
            int nc = cap ? 2 * cap : 64;
            grpo_row *r = realloc(rows, (size_t)nc * sizeof *r);
            if (!r) {
                cJSON_Delete(j);
                fprintf(stderr, "posttrain grpo: out of memory\n");
                goto out;
            }
            rows = r;
            cap = nc;
        }
        grpo_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        int st = prompt_ids(&r->ids, &r->n_ids, p->valuestring, tok, t);
        if (!st && ans && !(r->answer = dup_str(ans->valuestring)))
            st = PT_ENOMEM;
        cJSON_Delete(j);
        n++;
        if (st) {
            char what[512];
            snprintf(what, sizeof what, "%s line %ld", a->data, lineno);
            cli_fail(what, st);
            goto out;
        }
        if (r->n_ids < 1) {
            fprintf(stderr, "posttrain grpo: %s line %ld: the prompt encodes to no tokens\n", a->data, lineno);
            goto out;
        }
    }
    if (ferror(f)) {
        fprintf(stderr, "posttrain grpo: reading %s: %s\n", a->data, strerror(errno));
        goto out;
    }
    if (n == 0) {
        fprintf(stderr, "posttrain grpo: %s has no rows\n", a->data);
        goto out;
    }
    rc = 0;
out:
    free(line);
    fclose(f);
    if (rc) {
        free_rows(rows, n);
        return rc;
    }
    *out = rows;
    *n_out = n;
    return 0;
}

/* ---- rewards ------------------------------------------------------------------ */

typedef struct reward_ctx {
    const grpo_args *a;
    const pt_tokenizer *tok;
    const grpo_row *rows;
    const int *group_row;      /* group id (prompt slot in the step) -> row */
} reward_ctx;

static void strip(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)(*s)[0])) {
        (*s)++;
        (*n)--;
    }
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

static int builtin_reward(float *rewards, const pt_reward_batch *batch, void *payload)
{
    const reward_ctx *rc = payload;
    const int kind = rc->a->reward_kind[batch->func_index];
    for (int i = 0; i < batch->n; i++) {
        const pt_reward_item *it = &batch->items[i];
        const int n_comp = it->n_ids - it->prompt_len;
        if (kind == REWARD_LENGTH) {
            rewards[i] = -(float)n_comp / (float)rc->a->max_new;
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

/* ---- the run ------------------------------------------------------------------ */

static void json_num(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ", \"%s\": %.6g", key, v);
    else
        fprintf(f, ", \"%s\": null", key);
}

int cmd_grpo(int argc, char **argv)
{
    grpo_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(&a, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    int st;
    if (a.threads && (st = pt_set_num_threads(a.threads)))
        return cli_fail("--threads", st);
    pt_model *model = NULL, *ref = NULL;
    pt_chat_template *tpl = NULL;
    pt_optimizer *opt = NULL;
    pt_context *ctx = NULL, *rctx = NULL;
    pt_generator *gen = NULL;
    pt_rollout_buffer *buf = NULL;
    grpo_row *rows = NULL;
    int n_rows = 0;
    FILE *metrics = NULL;
    int32_t *prompts = NULL, *plens = NULL, *tokens = NULL, *ntok = NULL, *fin = NULL, *ids = NULL,
            *order = NULL, *group_row = NULL;
    float *lps = NULL;
    rc = 1;
    if ((st = pt_model_load_dir(&model, a.model, NULL))) {
        cli_fail(a.model, st);
        goto done;
    }
    const pt_tokenizer *tok = pt_model_tokenizer(model);
    if (!tok) {
        fprintf(stderr, "posttrain grpo: %s has no tokenizer.json (needed to encode prompts and score answers)\n",
                a.model);
        goto done;
    }
    if (a.chat_template && (st = pt_chat_template_from_name(&tpl, a.chat_template))) {
        cli_fail("--chat-template", st);
        goto done;
    }
    if (a.chat && (st = pt_chat_template_from_tokenizer(&tpl, tok))) {
        cli_fail("--chat", st);
        goto done;
    }
    if (load_rows(&rows, &n_rows, &a, tok, tpl))
        goto done;
    int max_prompt = 0;
    for (int i = 0; i < n_rows; i++)
        max_prompt = rows[i].n_ids > max_prompt ? rows[i].n_ids : max_prompt;
    const int max_seq = max_prompt + a.max_new;
    pt_model_config cfg;
    pt_model_get_config(&cfg, model);
    if (cfg.max_position_embeddings > 0 && max_seq > cfg.max_position_embeddings) {
        fprintf(stderr, "posttrain grpo: the longest prompt (%d tokens) plus --max-new-tokens %d exceeds the model's "
                        "max_position_embeddings %d\n", max_prompt, a.max_new, cfg.max_position_embeddings);
        goto done;
    }
    const int P = a.batch_prompts < n_rows ? a.batch_prompts : n_rows, N = P * a.G;
    if (a.grpo.beta > 0) {
        /* The reference policy: the starting model, frozen. */
        if ((st = pt_model_load_dir(&ref, a.model, NULL)) ||
            (st = pt_context_create(&rctx, ref, N < 8 ? N : 8, max_seq))) {
            cli_fail("the reference model", st);
            goto done;
        }
    }
    if (a.lora_rank > 0 && cli_add_lora("grpo", model, a.lora_rank, a.lora_alpha, a.lora_targets, a.seed))
        goto done;
    const int64_t total = a.steps ? a.steps : (n_rows + P - 1) / P;
    if (a.opt.schedule != PT_SCHEDULE_CONSTANT)
        a.opt.total_steps = total * a.num_iterations;
    if ((st = pt_optimizer_create(&opt, model, &a.opt))) {
        cli_fail("optimizer", st);
        goto done;
    }
    if ((st = pt_context_create(&ctx, model, N < 8 ? N : 8, max_seq)) ||
        (st = pt_generator_create(&gen, model, N, max_seq))) {
        cli_fail("context", st);
        goto done;
    }
    pt_rollout_buffer_options bo;
    pt_rollout_buffer_options_init(&bo);
    bo.n_reward_funcs = a.n_rewards;
    bo.reward_names = a.reward_name;
    bo.reward_weights = a.reward_weight;
    if ((st = pt_rollout_buffer_create(&buf, &bo))) {
        cli_fail("rollout buffer", st);
        goto done;
    }
    prompts = malloc((size_t)N * (size_t)max_prompt * sizeof *prompts);
    plens = malloc((size_t)N * sizeof *plens);
    tokens = malloc((size_t)N * (size_t)a.max_new * sizeof *tokens);
    ntok = malloc((size_t)N * sizeof *ntok);
    fin = malloc((size_t)N * sizeof *fin);
    lps = malloc((size_t)N * (size_t)a.max_new * sizeof *lps);
    ids = malloc((size_t)max_seq * sizeof *ids);
    order = malloc((size_t)n_rows * sizeof *order);
    group_row = malloc((size_t)P * sizeof *group_row);
    if (!prompts || !plens || !tokens || !ntok || !fin || !lps || !ids || !order ||
        !group_row) {
        fprintf(stderr, "posttrain grpo: out of memory\n");
        goto done;
    }
    if (mkdir(a.out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "posttrain grpo: cannot create %s: %s\n", a.out, strerror(errno));
        goto done;
    }
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", a.out);
    const char *mfile = a.metrics ? a.metrics : mpath;
    if (!(metrics = fopen(mfile, "w"))) {
        fprintf(stderr, "posttrain grpo: cannot write %s: %s\n", mfile, strerror(errno));
        goto done;
    }
    fprintf(stderr, "posttrain grpo: %d prompts, %lld steps of %d prompts x %d generations, rewards", n_rows,
            (long long)total, P, a.G);
    for (int k = 0; k < a.n_rewards; k++)
        fprintf(stderr, " %s:%g", a.reward_name[k], a.reward_weight[k]);
    fprintf(stderr, "\n");

    /* The prompt order: a seeded shuffle per pass over the rows. */
    uint64_t rng = a.seed ^ 0x6A09E667F3BCC908ull;
    int cursor = n_rows;
    reward_ctx rctx_s = { &a, tok, rows, group_row };
    const double t_start = cli_now();
    for (int64_t step = 1; step <= total; step++) {
        int off = 0;
        for (int p = 0; p < P; p++) {
            if (cursor == n_rows) {
                for (int i = 0; i < n_rows; i++)
                    order[i] = i;
                for (int i = n_rows - 1; i > 0; i--) {
                    rng += 0x9E3779B97F4A7C15ull;
                    uint64_t z = rng;
                    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
                    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
                    z ^= z >> 31;
                    int j = (int)(z % (uint64_t)(i + 1));
                    int32_t tmp = order[i];
                    order[i] = order[j];
                    order[j] = tmp;
                }
                cursor = 0;
            }
            group_row[p] = order[cursor++];
            const grpo_row *r = &rows[group_row[p]];
            for (int g = 0; g < a.G; g++) {
                memcpy(prompts + off, r->ids, (size_t)r->n_ids * sizeof *prompts);
                plens[p * a.G + g] = r->n_ids;
                off += r->n_ids;
            }
        }
        pt_generate_options go;
        pt_generate_options_init(&go);
        go.max_new_tokens = a.max_new;
        go.temperature = (float)a.temperature;
        go.top_k = a.top_k;
        go.top_p = (float)a.top_p;
        go.seed = a.seed * 1000003u + (uint64_t)step;
        double t0 = cli_now();
        if ((st = pt_generate(gen, prompts, plens, N, &go, tokens, ntok, fin, lps))) {
            cli_fail("generate", st);
            goto done;
        }
        double gen_s = cli_now() - t0, gen_tokens = 0;
        pt_rollout_buffer_clear(buf);
        off = 0;
        for (int i = 0; i < N; i++) {
            const int pl = plens[i], nt = ntok[i];
            memcpy(ids, prompts + off, (size_t)pl * sizeof *ids);
            memcpy(ids + pl, tokens + (size_t)i * a.max_new, (size_t)nt * sizeof *ids);
            off += pl;
            gen_tokens += nt;
            pt_rollout_sample s;
            pt_rollout_sample_init(&s);
            s.ids = ids;
            s.n_ids = pl + nt;
            s.prompt_len = pl;
            s.old_logprobs = lps + (size_t)i * a.max_new;
            s.group = i / a.G;
            s.truncated = fin[i] == PT_FINISH_LENGTH;
            if ((st = pt_rollout_buffer_add(buf, &s))) {
                cli_fail("rollout buffer", st);
                goto done;
            }
        }
        if (rctx && (st = pt_rollout_buffer_compute_logprobs(buf, rctx, PT_ROLLOUT_REF))) {
            cli_fail("reference log-probabilities", st);
            goto done;
        }
        for (int k = 0; k < a.n_rewards; k++)
            if ((st = pt_rollout_buffer_score(buf, k, builtin_reward, &rctx_s))) {
                cli_fail("scoring", st);
                goto done;
            }
        pt_grpo_stats gs, first;
        pt_grpo_stats_init(&gs);
        pt_grpo_stats_init(&first);
        double train_s = 0, loss_sum = 0;
        for (int it = 0; it < a.num_iterations; it++) {
            pt_grpo_stats_init(&gs);
            if ((st = pt_grpo_step(&gs, opt, ctx, buf, &a.grpo))) {
                cli_fail("grpo step", st);
                goto done;
            }
            if (it == 0)
                first = gs;
            train_s += gs.train_seconds;
            loss_sum += gs.loss;
            if (gs.skipped)
                fprintf(stderr, "posttrain grpo: step %lld iteration %d skipped (%s)\n", (long long)step, it + 1,
                        gs.tokens > 0 ? "non-finite loss or gradients" : "no loss token");
        }
        /* Rewards and lengths come from the rollouts (the same for every
         * iteration); loss, clipping, kl and grad norm from the last one. */
        const double step_s = cli_now() - t0, gen_tps = gen_tokens / gen_s;
        const double train_tps = train_s > 0 ? first.tokens_per_second : 0;
        fprintf(metrics, "{\"step\": %lld", (long long)step);
        json_num(metrics, "reward", first.reward);
        json_num(metrics, "reward_std", first.reward_std);
        for (int k = 0; k < a.n_rewards; k++) {
            char key[64];
            snprintf(key, sizeof key, "rewards/%s/mean", a.reward_name[k]);
            json_num(metrics, key, first.reward_func_mean[k]);
            snprintf(key, sizeof key, "rewards/%s/std", a.reward_name[k]);
            json_num(metrics, key, first.reward_func_std[k]);
        }
        json_num(metrics, "frac_reward_zero_std", first.frac_reward_zero_std);
        json_num(metrics, "loss", loss_sum / a.num_iterations);
        json_num(metrics, "kl", gs.kl);
        json_num(metrics, "entropy", gs.entropy);
        json_num(metrics, "clip_ratio/region_mean", gs.clip_ratio_region);
        json_num(metrics, "clip_ratio/low_mean", gs.clip_ratio_low);
        json_num(metrics, "clip_ratio/high_mean", gs.clip_ratio_high);
        json_num(metrics, "completions/mean_length", first.completion_mean_length);
        json_num(metrics, "completions/min_length", first.completion_min_length);
        json_num(metrics, "completions/max_length", first.completion_max_length);
        json_num(metrics, "completions/clipped_ratio", first.clipped_ratio);
        json_num(metrics, "grad_norm", gs.grad_norm);
        json_num(metrics, "lr", gs.lr);
        json_num(metrics, "tokens", gs.tokens);
        json_num(metrics, "gen_tokens_per_s", gen_tps);
        json_num(metrics, "train_tokens_per_s", train_tps);
        json_num(metrics, "step_seconds", step_s);
        fprintf(metrics, ", \"skipped\": %s}\n", gs.skipped ? "true" : "false");
        fflush(metrics);
        if (step % a.log_every == 0 || step == total)
            fprintf(stderr, "step %lld/%lld reward %.4f std %.4f zero_std %.2f clip %.4f kl %.4g len %.1f loss %.4g "
                            "grad_norm %.3g lr %.3g gen %.0f tok/s train %.0f tok/s %.1fs\n",
                    (long long)step, (long long)total, first.reward, first.reward_std, first.frac_reward_zero_std,
                    gs.clip_ratio_region, gs.kl, first.completion_mean_length, loss_sum / a.num_iterations,
                    gs.grad_norm, gs.lr, gen_tps, train_tps, cli_now() - t_start);
    }
    if (cli_save_trained("grpo", model, a.out, a.model, (long long)total))
        goto done;
    rc = 0;
done:
    if (metrics)
        fclose(metrics);
    free(prompts); free(plens); free(tokens); free(ntok); free(fin); free(lps); free(ids); free(order); free(group_row);
    free_rows(rows, n_rows);
    pt_rollout_buffer_free(buf);
    pt_generator_free(gen);
    pt_context_free(ctx);
    pt_context_free(rctx);
    pt_optimizer_free(opt);
    pt_chat_template_free(tpl);
    pt_model_free(ref);
    pt_model_free(model);
    return rc;
}
