/* posttrain generate: sample completions of one prompt with pt_generate
 * (public API only). */
#include "cli.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: posttrain generate --model DIR (--prompt TEXT | --prompt-ids IDS) [options]\n\n"
            "Complete one prompt with the model (KV-cache decoding, seeded sampling) and print\n"
            "each completion's text on stdout.\n\n"
            "  --model DIR          Hugging Face model directory (with tokenizer.json for text)\n"
            "  --prompt TEXT        prompt text, encoded with the model's tokenizer and its\n"
            "                       special tokens (e.g. BOS)\n"
            "  --prompt-ids IDS     prompt token ids, separated by commas or spaces\n"
            "  --chat               wrap --prompt as one user message in the tokenizer's chat\n"
            "                       template, with the assistant generation prompt\n"
            "  --max-new-tokens N   tokens to generate at most (default 64)\n"
            "  --temperature T      0: greedy (default 1)\n"
            "  --top-k K            keep the K most likely tokens (default 0: off)\n"
            "  --top-p P            nucleus sampling, P in (0, 1] (default 1: off)\n"
            "  --min-p P            keep tokens with p >= P * p_max (default 0: off)\n"
            "  --seed S             sampling seed (default 0); sample i uses stream i\n"
            "  --num-samples G      completions of the prompt (default 1)\n"
            "  --threads N          threads for every kernel\n"
            "  --ignore-eos         do not stop at the end-of-sequence token\n"
            "  --print-ids          print each completion's token ids (one line) after its text\n"
            "  --logprobs           print each token's log-probability (one line) after it\n"
            "Generation stops at max-new-tokens or after the model's eos token (config.json's\n"
            "eos_token_id and the tokenizer's eos_token), which is printed as text when kept\n"
            "(special tokens are left out of the text).  With --num-samples > 1 each\n"
            "completion is preceded by a line '--- sample I: N tokens, stop|length ---'.\n");
}

/* Parse "1,2 3" into ids (malloc'ed). */
static int parse_ids(const char *s, int32_t **out, int *n)
{
    size_t cap = strlen(s) / 2 + 1;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return -1;
    int k = 0;
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < INT32_MIN || v > INT32_MAX || (*end && *end != ',' && *end != ' ' &&
                                                           *end != '\t' && *end != '\n')) {
            free(ids);
            return -1;
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    if (k == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = k;
    return 0;
}

typedef struct gen_args {
    const char *model, *prompt, *prompt_ids;
    bool chat, ignore_eos, print_ids, print_logprobs;
    long max_new, top_k, num_samples, threads;
    double temperature, top_p, min_p;
    unsigned long long seed;
} gen_args;

static int parse_args(gen_args *a, int argc, char **argv)
{
    *a = (gen_args){ .max_new = 64, .num_samples = 1, .temperature = 1.0, .top_p = 1.0 };
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(k, "--chat")) { a->chat = true; continue; }
        if (!strcmp(k, "--ignore-eos")) { a->ignore_eos = true; continue; }
        if (!strcmp(k, "--print-ids")) { a->print_ids = true; continue; }
        if (!strcmp(k, "--logprobs")) { a->print_logprobs = true; continue; }
        if (i + 1 >= argc)
            return cli_usage_error("generate", "unknown argument or missing value: '%s'", k);
        const char *v = argv[++i];
        if (!strcmp(k, "--model")) { a->model = v; continue; }
        if (!strcmp(k, "--prompt")) { a->prompt = v; continue; }
        if (!strcmp(k, "--prompt-ids")) { a->prompt_ids = v; continue; }
        long *lp = !strcmp(k, "--max-new-tokens") ? &a->max_new
                   : !strcmp(k, "--top-k")        ? &a->top_k
                   : !strcmp(k, "--num-samples")  ? &a->num_samples
                   : !strcmp(k, "--threads")      ? &a->threads
                                                  : NULL;
        if (lp) {
            if (cli_parse_long(v, 0, 1L << 30, lp))
                return cli_usage_error("generate", "%s needs a non-negative integer, not '%s'",
                                       k, v);
            continue;
        }
        double *dp = !strcmp(k, "--temperature") ? &a->temperature
                     : !strcmp(k, "--top-p")     ? &a->top_p
                     : !strcmp(k, "--min-p")     ? &a->min_p
                                                 : NULL;
        if (dp) {
            if (cli_parse_double(v, dp))
                return cli_usage_error("generate", "%s needs a number, not '%s'", k, v);
            continue;
        }
        if (!strcmp(k, "--seed")) {
            char *end;
            a->seed = strtoull(v, &end, 10);
            if (!*v || *end || *v == '-')
                return cli_usage_error("generate", "--seed needs a non-negative integer, not "
                                       "'%s'", v);
            continue;
        }
        return cli_usage_error("generate", "unknown argument '%s'", k);
    }
    if (!a->model)
        return cli_usage_error("generate", "needs --model DIR");
    if (!a->prompt == !a->prompt_ids)
        return cli_usage_error("generate", "needs exactly one of --prompt TEXT and --prompt-ids "
                               "IDS");
    if (a->chat && !a->prompt)
        return cli_usage_error("generate", "--chat needs --prompt TEXT");
    if (a->num_samples < 1)
        return cli_usage_error("generate", "--num-samples must be at least 1");
    if (a->threads < 0 || a->threads > 1024)
        return cli_usage_error("generate", "--threads needs an integer in [1, 1024]");
    return -1; /* go on */
}

/* The prompt's ids (malloc'ed or pt_free'd: *owned_by_lib says which). */
static int prompt_tokens(const gen_args *a, const pt_tokenizer *tok, int32_t **ids, int *n,
                         bool *lib)
{
    *lib = false;
    if (a->prompt_ids) {
        if (parse_ids(a->prompt_ids, ids, n))
            return cli_usage_error("generate", "--prompt-ids needs integers separated by commas "
                                   "or spaces, not '%s'", a->prompt_ids);
        return 0;
    }
    if (!tok) {
        fprintf(stderr, "posttrain generate: the model directory has no tokenizer.json; use "
                        "--prompt-ids\n");
        return 1;
    }
    size_t len = 0;
    int st;
    if (a->chat) {
        pt_chat_template *t = NULL;
        if ((st = pt_chat_template_from_tokenizer(&t, tok)) != PT_OK)
            return cli_fail("generate --chat", st);
        pt_chat_message msg = { PT_CHAT_ROLE_USER, a->prompt, NULL };
        pt_chat_options co;
        (void)pt_chat_options_init(&co); /* cannot fail: &co is not NULL */
        co.add_generation_prompt = 1;
        st = pt_chat_render_ids(ids, NULL, &len, t, tok, &msg, 1, &co);
        pt_chat_template_free(t);
    } else {
        st = pt_tokenizer_encode(ids, &len, tok, a->prompt, strlen(a->prompt),
                                 PT_TOK_ADD_SPECIAL);
    }
    if (st != PT_OK)
        return cli_fail("generate: encoding the prompt", st);
    if (len == 0) {
        fprintf(stderr, "posttrain generate: the prompt encodes to no tokens\n");
        return 1;
    }
    *n = (int)len;
    *lib = true;
    return 0;
}

static int print_samples(const gen_args *a, const pt_tokenizer *tok, const int32_t *toks,
                         const int32_t *cnt, const int32_t *fin, const float *lps, int G, int M)
{
    for (int s = 0; s < G; s++) {
        const int32_t *t = toks + (size_t)s * M;
        if (G > 1)
            printf("--- sample %d: %d tokens, %s ---\n", s, cnt[s],
                   fin[s] == PT_FINISH_STOP ? "stop" : "length");
        if (tok) {
            char *text = NULL;
            size_t len = 0;
            int st = pt_tokenizer_decode(&text, &len, tok, t, (size_t)cnt[s], PT_TOK_SKIP_SPECIAL);
            if (st != PT_OK)
                return cli_fail("generate: decoding", st);
            fwrite(text, 1, len, stdout);
            putchar('\n');
            pt_free(text);
        }
        if (a->print_ids || !tok) {
            for (int i = 0; i < cnt[s]; i++)
                printf("%s%d", i ? " " : "", t[i]);
            putchar('\n');
        }
        if (a->print_logprobs) {
            for (int i = 0; i < cnt[s]; i++)
                printf("%s%.6f", i ? " " : "", (double)lps[(size_t)s * M + (size_t)i]);
            putchar('\n');
        }
    }
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    gen_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0)
        return rc;
    int st;
    if (a.threads > 0 && (st = pt_set_num_threads((int)a.threads)) != PT_OK)
        return cli_fail("generate --threads", st);
    pt_model *m = NULL;
    if ((st = pt_model_load_dir(&m, a.model, NULL)) != PT_OK)
        return cli_fail("generate: loading the model", st);
    const pt_tokenizer *tok = pt_model_tokenizer(m);
    int32_t *prompt = NULL;
    int n_prompt = 0;
    bool lib_owned = false;
    if ((rc = prompt_tokens(&a, tok, &prompt, &n_prompt, &lib_owned)) != 0) {
        pt_model_free(m);
        return rc;
    }
    const int G = (int)a.num_samples, M = (int)(a.max_new < 1 ? 1 : a.max_new);
    int32_t *prompts = malloc((size_t)G * (size_t)n_prompt * sizeof *prompts);
    int32_t *lens = malloc((size_t)G * sizeof *lens), *cnt = malloc((size_t)G * sizeof *cnt);
    int32_t *fin = malloc((size_t)G * sizeof *fin);
    int32_t *toks = malloc((size_t)G * (size_t)M * sizeof *toks);
    float *lps = malloc((size_t)G * (size_t)M * sizeof *lps);
    pt_generator *g = NULL;
    rc = 1;
    if (!prompts || !lens || !cnt || !fin || !toks || !lps) {
        fprintf(stderr, "posttrain generate: out of memory\n");
        goto done;
    }
    for (int s = 0; s < G; s++) {
        memcpy(prompts + (size_t)s * n_prompt, prompt, (size_t)n_prompt * sizeof *prompt);
        lens[s] = n_prompt;
    }
    pt_model_config cfg;
    pt_model_get_config(&cfg, m);
    int32_t stop[2];
    int n_stop = 0;
    if (!a.ignore_eos) {
        if (cfg.eos_token_id >= 0)
            stop[n_stop++] = cfg.eos_token_id;
        int32_t te = tok ? pt_tokenizer_eos_id(tok) : -1;
        if (te >= 0 && te < cfg.vocab_size && (n_stop == 0 || stop[0] != te))
            stop[n_stop++] = te;
    }
    pt_generate_options o;
    pt_generate_options_init(&o);
    o.max_new_tokens = (int)a.max_new;
    o.temperature = (float)a.temperature;
    o.top_k = (int)a.top_k;
    o.top_p = (float)a.top_p;
    o.min_p = (float)a.min_p;
    o.seed = a.seed;
    o.stop_ids = stop;
    o.n_stop_ids = n_stop;
    int64_t max_seq = (int64_t)n_prompt + (a.max_new > 0 ? a.max_new : 1);
    if (max_seq > INT32_MAX / 2) {
        fprintf(stderr, "posttrain generate: prompt plus --max-new-tokens is too long\n");
        goto done;
    }
    if ((st = pt_generator_create(&g, m, G, (int)max_seq)) != PT_OK) {
        rc = cli_fail("generate", st);
        goto done;
    }
    if ((st = pt_generate(g, prompts, lens, G, &o, toks, cnt, fin, lps)) != PT_OK) {
        rc = cli_fail("generate", st);
        goto done;
    }
    rc = print_samples(&a, tok, toks, cnt, fin, lps, G, M);
done:
    pt_generator_free(g);
    if (lib_owned)
        pt_free(prompt);
    else
        free(prompt);
    free(prompts);
    free(lens);
    free(cnt);
    free(fin);
    free(toks);
    free(lps);
    pt_model_free(m);
    return rc;
}
