/* posttrain generate: sample completions of one prompt with pt_generate
 * (public API only). */
#include "cli.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen_args {
    const char *model, *adapter, *prompt, *prompt_ids;
    bool chat, ignore_eos, print_ids, print_logprobs, allow_long, bf16;
    int num_samples, threads, quantize, kv_cache;
    pt_generate_options gen;
} cli_args; /* CLI_ARG's */

static const cli_opt k_generate_opts[] = {
    { CLI_PATH, "model", CLI_ARG(model), "DIR", .required = true,
      .help = "Hugging Face model directory (with tokenizer.json for text), or a GGUF file" },
    { CLI_PATH, "adapter", CLI_ARG(adapter), "DIR",
      .help = "apply a PEFT LoRA adapter directory to the model first\n(e.g. OUT/adapter of a LoRA run; on a quantized GGUF too)" },
    { CLI_STRING, "prompt", CLI_ARG(prompt), "TEXT",
      .help = "prompt text, encoded with the model's tokenizer and its\nspecial tokens (e.g. BOS)" },
    { CLI_STRING, "prompt-ids", CLI_ARG(prompt_ids), "IDS", .help = "prompt token ids, separated by commas or spaces" },
    { CLI_FLAG, "chat", CLI_ARG(chat),
      .help = "wrap --prompt as one user message in the tokenizer's chat\n"
              "template, with the assistant generation prompt" },
    { CLI_INT, "max-new-tokens", CLI_ARG(gen.max_new_tokens), "N", .def = "64", .lo = 0, .hi = 1 << 30,
      .help = "tokens to generate at most" },
    { CLI_FLOAT, "temperature", CLI_ARG(gen.temperature), "T", .def = "1", .help = "0: greedy" },
    { CLI_INT, "top-k", CLI_ARG(gen.top_k), "K", .def = "0", .lo = 0, .hi = 1 << 30,
      .help = "keep the K most likely tokens (0: off)" },
    { CLI_FLOAT, "top-p", CLI_ARG(gen.top_p), "P", .def = "1", .help = "nucleus sampling, P in (0, 1] (1: off)" },
    { CLI_FLOAT, "min-p", CLI_ARG(gen.min_p), "P", .def = "0", .help = "keep tokens with p >= P * p_max (0: off)" },
    { CLI_UINT64, "seed", CLI_ARG(gen.seed), "S", .def = "0", .help = "sampling seed; sample i uses stream i" },
    { CLI_INT, "num-samples", CLI_ARG(num_samples), "G", .def = "1", .lo = 1, .hi = 1 << 30,
      .help = "completions of the prompt" },
    { CLI_INT, "threads", CLI_ARG(threads), "N", .lo = 1, .hi = 1024, .help = "threads for every kernel" },
    { CLI_ENUM, "quantize", CLI_ARG(quantize), "TYPE", .def = "none", .from_name = pt_quantize_from_name,
      .enum_name = pt_quantize_name,
      .help = "quantize the weights on load: q8_0 or q4_0 (as llama-quantize\n--pure; the base is then frozen: LoRA only; docs/gguf.md)" },
    { CLI_FLAG, "bf16", CLI_ARG(bf16), .help = "keep the weights in BF16 (half the memory; products\nin BF16 where the CPU has it, else widened to FP32;\ndocs/bf16.md)" },
    { CLI_ENUM, "kv-cache", CLI_ARG(kv_cache), "TYPE", .def = "fp32", .from_name = pt_kv_cache_from_name,
      .enum_name = pt_kv_cache_name,
      .help = "what the KV cache holds: fp32, or bf16 (half the memory,\nkeys and values rounded to BF16; docs/generate.md)" },
    { CLI_FLAG, "ignore-eos", CLI_ARG(ignore_eos), .help = "do not stop at the end-of-sequence token" },
    { CLI_FLAG, "print-ids", CLI_ARG(print_ids), .help = "print each completion's token ids (one line) after its text" },
    { CLI_FLAG, "logprobs", CLI_ARG(print_logprobs), .help = "print each token's log-probability (one line) after it" },
    { CLI_FLAG, "allow-long-context", CLI_ARG(allow_long),
      .help = "allow a prompt plus new tokens beyond the model's\nmax_position_embeddings (rope scaling)" },
};

static const cli_command k_generate = {
    .name = "generate",
    .usage = "--model DIR (--prompt TEXT | --prompt-ids IDS) [options]",
    .about = "Complete one prompt with the model (KV-cache decoding, seeded sampling) and print\n"
             "each completion's text on stdout.",
    .epilog = "Generation stops at max-new-tokens or after the model's eos token (config.json's\n"
              "eos_token_id and the tokenizer's eos_token), which is printed as text when kept\n"
              "(special tokens are left out of the text).  With --num-samples > 1 each\n"
              "completion is preceded by a line '--- sample I: N tokens, stop|length ---'.",
};

/* 0 to go on, CLI_HELP, or the exit code of a usage error. */
static int parse_args(cli_args *a, int argc, char **argv)
{
    *a = (cli_args){ 0 };
    pt_generate_options_init(&a->gen);
    int rc = cli_parse_table(&k_generate, k_generate_opts, CLI_COUNT_OF(k_generate_opts), a, argc, argv, NULL);
    if (rc)
        return rc;
    if (!a->prompt == !a->prompt_ids)
        return cli_usage_error("generate", "needs exactly one of --prompt TEXT and --prompt-ids IDS");
    if (a->chat && !a->prompt)
        return cli_usage_error("generate", "--chat needs --prompt TEXT");
    return 0;
}

/* The prompt's ids (pt_free them). */
static int prompt_tokens(const cli_args *a, const pt_tokenizer *tok, int32_t **ids, int *n)
{
    size_t len = 0;
    if (a->prompt_ids) {
        if (pt_ids_parse(ids, &len, a->prompt_ids))
            return cli_usage_error("generate", "--prompt-ids needs integers separated by commas "
                                   "or spaces, not '%s'", a->prompt_ids);
        *n = (int)len;
        return 0;
    }
    if (!tok)
        return cli_no_tokenizer("generate", a->model, "a text prompt needs it: give --prompt-ids");
    int st;
    if (a->chat) {
        pt_chat_template *t = NULL;
        if ((st = pt_chat_template_from_tokenizer(&t, tok)) != PT_OK)
            return cli_fail("generate --chat", st);
        pt_chat_message msg = { .role = PT_CHAT_ROLE_USER, .content = a->prompt };
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
    return 0;
}

static int print_samples(const cli_args *a, const pt_tokenizer *tok, const int32_t *toks,
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

/* The prompt repeated for every sample, generated and printed. */
static int generate(cli_args *a, pt_model *m, const pt_tokenizer *tok, const int32_t *prompt, int n_prompt)
{
    const int G = a->num_samples, M = a->gen.max_new_tokens < 1 ? 1 : a->gen.max_new_tokens;
    /* positions past max_position_embeddings are outside what the model was made for */
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    pt_model_get_config(&cfg, m);
    if (a->allow_long) {
        int st = pt_model_set_allow_long_context(m, true);
        if (st)
            return cli_fail("--allow-long-context", st);
    } else if (cfg.max_position_embeddings > 0 && (int64_t)n_prompt + M > cfg.max_position_embeddings) {
        fprintf(stderr, "posttrain generate: the prompt (%d tokens) plus --max-new-tokens %d exceeds the model's "
                        "max_position_embeddings %d (--allow-long-context to go beyond it)\n", n_prompt, M,
                cfg.max_position_embeddings);
        return 1;
    }
    /* one block: the prompts, their lengths, the completions' counts, finish
     * reasons, tokens and log-probabilities */
    const size_t GM = (size_t)G * (size_t)M;
    int32_t *prompts = malloc(((size_t)G * ((size_t)n_prompt + 3) + GM) * sizeof *prompts + GM * sizeof(float));
    if (!prompts) {
        fprintf(stderr, "posttrain generate: out of memory\n");
        return 1;
    }
    int32_t *lens = prompts + (size_t)G * (size_t)n_prompt, *cnt = lens + G, *fin = cnt + G, *toks = fin + G;
    float *lps = (float *)(toks + GM);
    pt_generator *g = NULL;
    int32_t stop[2];
    int st, rc = 1;
    for (int s = 0; s < G; s++) {
        memcpy(prompts + (size_t)s * n_prompt, prompt, (size_t)n_prompt * sizeof *prompt);
        lens[s] = n_prompt;
    }
    a->gen.n_stop_ids = 0; /* --ignore-eos: none */
    if (!a->ignore_eos)
        (void)pt_model_stop_ids(stop, &a->gen.n_stop_ids, m); /* cannot fail: m is not NULL */
    a->gen.stop_ids = stop;
    int64_t max_seq = (int64_t)n_prompt + M;
    if (max_seq > INT32_MAX / 2) {
        fprintf(stderr, "posttrain generate: prompt plus --max-new-tokens is too long\n");
        goto done;
    }
    if ((st = pt_generator_create(&g, m, G, (int)max_seq)) != PT_OK ||
        (st = pt_generator_set_kv_cache(g, a->kv_cache)) != PT_OK ||
        (st = pt_generate(g, prompts, lens, G, &a->gen, toks, cnt, fin, lps)) != PT_OK) {
        rc = cli_fail("generate", st);
        goto done;
    }
    rc = print_samples(a, tok, toks, cnt, fin, lps, G, M);
done:
    pt_generator_free(g);
    free(prompts);
    return rc;
}

int cli_open_model(pt_model **out, const char *cmd, const char *path, bool bf16, int quantize,
                   const char *adapter, const char *load, const char *adapter_what)
{
    int st = cli_load_model(out, path, bf16 ? PT_BF16_FROZEN : PT_BF16_OFF, quantize);
    if (st)
        return cli_fail(load, st);
    if ((bf16 && cli_set_bf16(cmd, *out, PT_BF16_FROZEN)) ||
        (adapter && (st = pt_lora_load_peft(*out, adapter)) != PT_OK)) {
        pt_model_free(*out);
        *out = NULL;
        return st ? cli_fail(adapter_what, st) : 1;
    }
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    cli_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc)
        return cli_exit_code(rc);
    int st;
    if (a.threads > 0 && (st = pt_set_num_threads(a.threads)) != PT_OK)
        return cli_fail("generate --threads", st);
    pt_model *m = NULL;
    if (cli_open_model(&m, "generate", a.model, a.bf16, a.quantize, a.adapter, "generate: loading the model",
                       "generate: loading the adapter"))
        return 1;
    const pt_tokenizer *tok = pt_model_tokenizer(m);
    int32_t *prompt = NULL;
    int n_prompt = 0;
    if ((rc = prompt_tokens(&a, tok, &prompt, &n_prompt)) == 0)
        rc = generate(&a, m, tok, prompt, n_prompt);
    pt_free(prompt);
    pt_model_free(m);
    return rc;
}
