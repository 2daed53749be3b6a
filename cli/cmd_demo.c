/* posttrain demo: the main job on a built-in default, with no download and no
 * file from outside the repository.  A tiny Llama-architecture model built
 * from a config, with the built-in byte-level tokenizer, is fine-tuned by SFT
 * on multi-digit addition written as text; exact-match accuracy on held-out
 * problems is measured by greedy decoding before and after. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct demo_opts {
    int digits, steps, batch, eval_n, hidden, layers, heads, tied;
    double lr;
    uint64_t seed;
} demo_opts;

static double demo_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* "a+b=" with both operands zero-padded to `digits`, and the answer written
 * least-significant digit first (the order in which carries propagate, so a
 * left-to-right model can compute it), padded to digits+1. */
static void problem(char *prompt, char *answer, int digits, long a, long b)
{
    snprintf(prompt, 64, "%0*ld+%0*ld=", digits, a, digits, b);
    char fwd[32];
    snprintf(fwd, sizeof fwd, "%0*ld", digits + 1, a + b);
    int n = (int)strlen(fwd);
    for (int i = 0; i < n; i++)
        answer[i] = fwd[n - 1 - i];
    answer[n] = '\0';
}

/* Held-out problems are those whose pair hashes into the top 1/16. */
static int held_out(long a, long b)
{
    uint64_t x = (uint64_t)a * 1000003u + (uint64_t)b;
    return (splitmix(&x) & 15) == 0;
}

static int encode(int32_t **ids, size_t *n, const pt_tokenizer *tok, const char *s, unsigned flags)
{
    return pt_tokenizer_encode(ids, n, tok, s, strlen(s), flags);
}

/* Greedy decoding of every held-out prompt in batches; returns accuracy. */
static int evaluate(double *accuracy, pt_context *ctx, const pt_tokenizer *tok, const demo_opts *o, long (*pairs)[2],
                    int n_pairs, int vocab, bool show)
{
    const int plen = 1 + 2 * o->digits + 2, alen = o->digits + 1, T = plen + alen;
    const int B = o->batch;
    int32_t *ids = malloc((size_t)B * T * sizeof *ids);
    int32_t *gen = ids + (size_t)B * plen; /* B x alen generated ids */
    float *logits = malloc((size_t)B * T * (size_t)vocab * sizeof *logits);
    int correct = 0, st = PT_OK;
    if (!ids || !logits) {
        free(ids);
        free(logits);
        return PT_ENOMEM;
    }
    for (int first = 0; first < n_pairs && !st; first += B) {
        int rows = n_pairs - first < B ? n_pairs - first : B;
        char answers[64][32];
        for (int r = 0; r < rows; r++) {
            char prompt[64];
            problem(prompt, answers[r], o->digits, pairs[first + r][0], pairs[first + r][1]);
            int32_t *p;
            size_t n;
            if ((st = encode(&p, &n, tok, prompt, PT_TOK_ADD_SPECIAL)))
                break;
            memcpy(ids + (size_t)r * plen, p, (size_t)plen * sizeof *ids);
            pt_free(p);
        }
        /* Generate alen tokens, one full forward per token. */
        for (int k = 0; k < alen && !st; k++) {
            int cur = plen + k;
            int32_t *packed = malloc((size_t)rows * cur * sizeof *packed);
            if (!packed) {
                st = PT_ENOMEM;
                break;
            }
            /* Row r: its prompt, then the k tokens generated so far. */
            for (int r = 0; r < rows; r++) {
                memcpy(packed + (size_t)r * cur, ids + (size_t)r * plen, (size_t)plen * sizeof *ids);
                memcpy(packed + (size_t)r * cur + plen, gen + (size_t)r * alen, (size_t)k * sizeof *ids);
            }
            pt_batch b;
            pt_batch_init(&b);
            b.batch = rows;
            b.seq = cur;
            b.input_ids = packed;
            st = pt_model_forward(ctx, &b, NULL, logits);
            free(packed);
            for (int r = 0; r < rows && !st; r++) {
                const float *l = logits + ((size_t)r * cur + (size_t)(cur - 1)) * (size_t)vocab;
                int best = 0;
                for (int v = 1; v < vocab; v++)
                    if (l[v] > l[best])
                        best = v;
                gen[(size_t)r * alen + (size_t)k] = best;
            }
        }
        for (int r = 0; r < rows && !st; r++) {
            char *text;
            size_t len;
            if ((st = pt_tokenizer_decode(&text, &len, tok, gen + (size_t)r * alen, (size_t)alen,
                                          PT_TOK_SKIP_SPECIAL)))
                break;
            int ok = strcmp(text, answers[r]) == 0;
            correct += ok;
            if (show && first == 0 && r < 4) {
                char prompt[64], ans[32];
                problem(prompt, ans, o->digits, pairs[r][0], pairs[r][1]);
                printf("    %s%-6s (expected %s) %s\n", prompt, text, ans, ok ? "right" : "wrong");
            }
            pt_free(text);
        }
    }
    free(ids);
    free(logits);
    *accuracy = (double)correct / (double)n_pairs;
    return st;
}

static void demo_usage(FILE *f)
{
    fprintf(f, "usage: posttrain demo [--digits N (2)] [--steps N (800)] [--batch N (64)] [--lr F (3e-3)]\n"
               "                      [--hidden N (128)] [--layers N (4)] [--heads N (4)] [--tied 0|1 (0)]\n"
               "                      [--eval N (256)] [--seed N (1)]\n\n"
               "Fine-tunes a tiny built-in model by SFT on addition and prints held-out\n"
               "exact-match accuracy before and after.  Needs no file and no download.\n");
}

int cmd_demo(int argc, char **argv)
{
    demo_opts o = { 2, 800, 64, 256, 128, 4, 4, 0, 3e-3, 1 };
    for (int i = 1; i < argc; i++) {
        long v;
        double x;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            demo_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc)
            return cli_usage_error("demo", "%s needs a value", argv[i]);
        const char *k = argv[i], *val = argv[++i];
        if (!strcmp(k, "--lr") && !cli_parse_double(val, &x) && x > 0 && x < 1)
            o.lr = x;
        else if (!strcmp(k, "--digits") && !cli_parse_long(val, 1, 6, &v))
            o.digits = (int)v;
        else if (!strcmp(k, "--steps") && !cli_parse_long(val, 0, 1000000, &v))
            o.steps = (int)v;
        else if (!strcmp(k, "--batch") && !cli_parse_long(val, 1, 64, &v))
            o.batch = (int)v;
        else if (!strcmp(k, "--eval") && !cli_parse_long(val, 1, 100000, &v))
            o.eval_n = (int)v;
        else if (!strcmp(k, "--hidden") && !cli_parse_long(val, 16, 1024, &v) && v % 16 == 0)
            o.hidden = (int)v;
        else if (!strcmp(k, "--layers") && !cli_parse_long(val, 1, 32, &v))
            o.layers = (int)v;
        else if (!strcmp(k, "--heads") && !cli_parse_long(val, 1, 64, &v))
            o.heads = (int)v;
        else if (!strcmp(k, "--tied") && !cli_parse_long(val, 0, 1, &v))
            o.tied = (int)v;
        else if (!strcmp(k, "--seed") && !cli_parse_long(val, 0, 1L << 30, &v))
            o.seed = (uint64_t)v;
        else
            return cli_usage_error("demo", "bad option or value: %s %s", k, val);
    }
    printf("libposttrain %s demo: SFT of a tiny built-in model on %d-digit addition\n", pt_version_string(),
           o.digits);
    pt_tokenizer *tok = NULL;
    pt_model *model = NULL;
    pt_context *ctx = NULL;
    pt_optimizer *opt = NULL;
    pt_dataset *data = NULL;
    long(*eval_pairs)[2] = NULL;
    int st, rc = 1;
    if ((st = pt_tokenizer_create_bytes(&tok)))
        return cli_fail("tokenizer", st);
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    cfg.arch = PT_ARCH_LLAMA;
    cfg.vocab_size = pt_tokenizer_vocab_size(tok);
    cfg.hidden_size = o.hidden;
    cfg.num_hidden_layers = o.layers;
    if (o.hidden % o.heads) {
        fprintf(stderr, "posttrain demo: --heads must divide --hidden\n");
        goto done;
    }
    cfg.num_attention_heads = o.heads;
    cfg.num_key_value_heads = cfg.num_attention_heads;
    cfg.head_dim = o.hidden / cfg.num_attention_heads;
    cfg.intermediate_size = o.hidden * 3;
    cfg.max_position_embeddings = 64;
    cfg.rms_norm_eps = 1e-5;
    cfg.tie_word_embeddings = o.tied != 0;
    cfg.initializer_range = 0.02;
    cfg.bos_token_id = pt_tokenizer_bos_id(tok);
    cfg.eos_token_id = pt_tokenizer_eos_id(tok);
    if ((st = pt_model_create(&model, &cfg, o.seed))) {
        cli_fail("model", st);
        goto done;
    }
    uint64_t nparams = 0;
    pt_model_num_params(&nparams, model);
    printf("  model: llama, %d layers, hidden %d, %d heads, vocab %d (byte-level), %.2fM parameters\n", o.layers,
           o.hidden, cfg.num_attention_heads, cfg.vocab_size, (double)nparams / 1e6);
    printf("  task: \"%0*d+%0*d=\" -> answer digits least-significant first, then EOS; %d threads\n", o.digits, 0,
           o.digits, 0, pt_get_num_threads());

    /* Training examples from the non-held-out pairs, in a seeded order. */
    long range = 1;
    for (int i = 0; i < o.digits; i++)
        range *= 10;
    pt_dataset_options dopt;
    pt_dataset_options_init(&dopt);
    dopt.max_length = 64;
    dopt.batch_size = o.batch;
    dopt.seed = o.seed;
    if ((st = pt_dataset_create(&data, &dopt))) {
        cli_fail("dataset", st);
        goto done;
    }
    uint64_t rs = o.seed * 7919 + 17;
    int n_train = (int)(range * range < 20000 ? range * range : 20000);
    eval_pairs = calloc((size_t)o.eval_n, sizeof *eval_pairs);
    if (!eval_pairs)
        goto done;
    int n_eval = 0, added = 0;
    for (long tries = 0; (added < n_train || n_eval < o.eval_n) && tries < 50L * (n_train + o.eval_n); tries++) {
        long a = (long)(splitmix(&rs) % (uint64_t)range), b = (long)(splitmix(&rs) % (uint64_t)range);
        if (held_out(a, b)) {
            if (n_eval < o.eval_n) {
                eval_pairs[n_eval][0] = a;
                eval_pairs[n_eval][1] = b;
                n_eval++;
            }
            continue;
        }
        if (added >= n_train)
            continue;
        char prompt[64], answer[32], full[96];
        problem(prompt, answer, o.digits, a, b);
        snprintf(full, sizeof full, "%s%s", prompt, answer);
        int32_t *ids;
        size_t n;
        if ((st = encode(&ids, &n, tok, full, PT_TOK_ADD_SPECIAL))) {
            cli_fail("tokenize", st);
            goto done;
        }
        /* Train on the answer and the EOS after it, not on the prompt. */
        int32_t buf[96];
        uint8_t mask[96];
        memcpy(buf, ids, n * sizeof *ids);
        buf[n] = pt_tokenizer_eos_id(tok);
        for (size_t i = 0; i <= n; i++)
            mask[i] = i >= n - strlen(answer);
        pt_free(ids);
        if ((st = pt_dataset_add(data, buf, mask, n + 1))) {
            cli_fail("dataset", st);
            goto done;
        }
        added++;
    }
    printf("  data: %d training problems, %d held-out problems never seen in training\n", added, n_eval);

    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = o.lr;
    oo.weight_decay = 0.01;
    oo.schedule = PT_SCHEDULE_COSINE;
    oo.warmup_steps = o.steps / 20;
    oo.total_steps = o.steps > 0 ? o.steps : 1;
    oo.min_lr_ratio = 0.1;
    if ((st = pt_optimizer_create(&opt, model, &oo)) || (st = pt_context_create(&ctx, model, o.batch, 64))) {
        cli_fail("setup", st);
        goto done;
    }
    double acc0, acc1;
    printf("  before training:\n");
    if ((st = evaluate(&acc0, ctx, tok, &o, eval_pairs, n_eval, cfg.vocab_size, true))) {
        cli_fail("evaluate", st);
        goto done;
    }
    printf("  held-out exact match before: %.1f%% (%d problems)\n", 100 * acc0, n_eval);
    double t0 = demo_now(), tokens = 0, ema = NAN;
    const bool tty = isatty(fileno(stdout));
    for (int s = 1; s <= o.steps; s++) {
        pt_batch b;
        const float *w;
        if ((st = pt_dataset_next_batch(&b, &w, data))) {
            cli_fail("data", st);
            goto done;
        }
        pt_sft_stats ss;
        pt_sft_stats_init(&ss);
        if ((st = pt_sft_step(&ss, opt, ctx, &b, &w, 1))) {
            cli_fail("sft step", st);
            goto done;
        }
        tokens += (double)b.batch * b.seq;
        ema = isnan(ema) ? ss.loss : 0.95 * ema + 0.05 * ss.loss;
        if (s % 50 == 0 || s == o.steps || (tty && s % 5 == 0)) {
            double el = demo_now() - t0;
            printf("%s  step %4d/%d  loss %.4f  lr %.2e  %.0f tok/s  %.0fs%s", tty ? "\r" : "", s, o.steps, ema,
                   ss.lr, tokens / el, el, tty && s % 50 ? "" : "\n");
            fflush(stdout);
        }
    }
    printf("  after %d steps (%.0f s):\n", o.steps, demo_now() - t0);
    if ((st = evaluate(&acc1, ctx, tok, &o, eval_pairs, n_eval, cfg.vocab_size, true))) {
        cli_fail("evaluate", st);
        goto done;
    }
    printf("  held-out exact match: %.1f%% before -> %.1f%% after\n", 100 * acc0, 100 * acc1);
    rc = 0;
done:
    free(eval_pairs);
    pt_dataset_free(data);
    pt_optimizer_free(opt);
    pt_context_free(ctx);
    pt_model_free(model);
    pt_tokenizer_free(tok);
    return rc;
}
