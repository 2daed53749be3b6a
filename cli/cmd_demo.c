/* posttrain demo: the main job on a built-in default, with no download and no
 * file from outside the repository.  A tiny Llama-architecture model built
 * from a config, with the built-in byte-level tokenizer, is fine-tuned by SFT
 * on multi-digit addition written as text; exact-match accuracy on held-out
 * problems is measured by greedy decoding before and after. */
#include "cli.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct demo_opts {
    int digits, steps, batch, eval_n, hidden, layers, heads, tied;
    double lr;
    uint64_t seed;
} demo_opts;

#define DEMO(field) offsetof(demo_opts, field)
static const cli_opt k_demo_opts[] = {
    { CLI_INT, "digits", DEMO(digits), "N", .def = "2", .lo = 1, .hi = 6, .help = "digits of each operand" },
    { CLI_INT, "steps", DEMO(steps), "N", .def = "800", .lo = 0, .hi = 1000000, .help = "SFT steps" },
    { CLI_INT, "batch", DEMO(batch), "N", .def = "64", .lo = 1, .hi = 64, .help = "problems per step" },
    { CLI_DOUBLE, "lr", DEMO(lr), "F", .def = "3e-3", .lo = 1e-9, .hi = 0.999999,
      .help = "peak learning rate (AdamW, cosine schedule)" },
    { CLI_INT, "hidden", DEMO(hidden), "N", .def = "128", .lo = 16, .hi = 1024,
      .help = "hidden size, a multiple of 16" },
    { CLI_INT, "layers", DEMO(layers), "N", .def = "4", .lo = 1, .hi = 32, .help = "transformer layers" },
    { CLI_INT, "heads", DEMO(heads), "N", .def = "4", .lo = 1, .hi = 64,
      .help = "attention heads (they must divide --hidden)" },
    { CLI_INT, "tied", DEMO(tied), "0|1", .def = "0", .lo = 0, .hi = 1,
      .help = "1: tie the input and output embeddings" },
    { CLI_INT, "eval", DEMO(eval_n), "N", .def = "256", .lo = 1, .hi = 100000,
      .help = "held-out problems to measure" },
    { CLI_UINT64, "seed", DEMO(seed), "N", .def = "1", .lo = 0, .hi = 1 << 30,
      .help = "seed of the model, the data and its order" },
};
#undef DEMO

static const cli_command k_demo = {
    .name = "demo",
    .usage = "[options]",
    .about = "Fine-tunes a tiny built-in model by SFT on addition and prints held-out\n"
             "exact-match accuracy before and after.  Needs no file and no download.",
};

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
    return (cli_splitmix(&x) & 15) == 0;
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

/* Everything the demo holds; demo_free releases it. */
typedef struct demo_run {
    demo_opts o;
    pt_tokenizer *tok;
    pt_model *model;
    pt_context *ctx;
    pt_optimizer *opt;
    pt_dataset *data;
    long (*eval_pairs)[2];
    int n_eval, n_train, vocab;
} demo_run;

static void demo_free(demo_run *r)
{
    free(r->eval_pairs);
    pt_dataset_free(r->data);
    pt_optimizer_free(r->opt);
    pt_context_free(r->ctx);
    pt_model_free(r->model);
    pt_tokenizer_free(r->tok);
}

static int parse_args(demo_opts *o, int argc, char **argv)
{
    int rc = cli_parse_table(&k_demo, k_demo_opts, CLI_COUNT_OF(k_demo_opts), o, argc, argv, NULL);
    if (rc)
        return rc;
    if (o->hidden % 16)
        return cli_usage_error("demo", "--hidden must be a multiple of 16, not %d", o->hidden);
    if (o->hidden % o->heads)
        return cli_usage_error("demo", "--heads must divide --hidden");
    return 0;
}

/* The byte-level tokenizer and a tiny Llama of the options' shape. */
static int build_model(demo_run *r)
{
    const demo_opts *o = &r->o;
    int st;
    if ((st = pt_tokenizer_create_bytes(&r->tok)))
        return cli_fail("tokenizer", st);
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    cfg.arch = PT_ARCH_LLAMA;
    cfg.vocab_size = pt_tokenizer_vocab_size(r->tok);
    cfg.hidden_size = o->hidden;
    cfg.num_hidden_layers = o->layers;
    cfg.num_attention_heads = o->heads;
    cfg.num_key_value_heads = cfg.num_attention_heads;
    cfg.head_dim = o->hidden / cfg.num_attention_heads;
    cfg.intermediate_size = o->hidden * 3;
    cfg.max_position_embeddings = 64;
    cfg.rms_norm_eps = 1e-5;
    cfg.tie_word_embeddings = o->tied != 0;
    cfg.initializer_range = 0.02;
    cfg.bos_token_id = pt_tokenizer_bos_id(r->tok);
    cfg.eos_token_id = pt_tokenizer_eos_id(r->tok);
    if ((st = pt_model_create(&r->model, &cfg, o->seed)))
        return cli_fail("model", st);
    r->vocab = cfg.vocab_size;
    uint64_t nparams = 0;
    pt_model_num_params(&nparams, r->model);
    printf("  model: %s, %d layers, hidden %d, %d heads, vocab %d (byte-level), %.2fM parameters\n",
           pt_arch_name(cfg.arch), o->layers, o->hidden, cfg.num_attention_heads, cfg.vocab_size,
           (double)nparams / 1e6);
    printf("  task: \"%0*d+%0*d=\" -> answer digits least-significant first, then EOS; %d threads\n", o->digits, 0,
           o->digits, 0, pt_get_num_threads());
    return 0;
}

/* One training example: the problem, its answer and EOS, trained on the
 * answer and the EOS after it, not on the prompt. */
static int add_example(demo_run *r, long a, long b)
{
    char prompt[64], answer[32], full[96];
    problem(prompt, answer, r->o.digits, a, b);
    snprintf(full, sizeof full, "%s%s", prompt, answer);
    int32_t *ids;
    size_t n;
    int st;
    if ((st = encode(&ids, &n, r->tok, full, PT_TOK_ADD_SPECIAL)))
        return cli_fail("tokenize", st);
    int32_t buf[96];
    uint8_t mask[96];
    memcpy(buf, ids, n * sizeof *ids);
    buf[n] = pt_tokenizer_eos_id(r->tok);
    for (size_t i = 0; i <= n; i++)
        mask[i] = i >= n - strlen(answer);
    pt_free(ids);
    if ((st = pt_dataset_add(r->data, buf, mask, n + 1)))
        return cli_fail("dataset", st);
    return 0;
}

/* Training examples from the non-held-out pairs, in a seeded order, and up
 * to --eval held-out pairs. */
static int build_data(demo_run *r)
{
    const demo_opts *o = &r->o;
    long range = 1;
    for (int i = 0; i < o->digits; i++)
        range *= 10;
    pt_dataset_options dopt;
    pt_dataset_options_init(&dopt);
    dopt.max_length = 64;
    dopt.batch_size = o->batch;
    dopt.seed = o->seed;
    int st;
    if ((st = pt_dataset_create(&r->data, &dopt)))
        return cli_fail("dataset", st);
    uint64_t rs = o->seed * 7919 + 17;
    int n_train = (int)(range * range < 20000 ? range * range : 20000);
    r->eval_pairs = calloc((size_t)o->eval_n, sizeof *r->eval_pairs);
    if (!r->eval_pairs)
        return 1;
    for (long tries = 0; (r->n_train < n_train || r->n_eval < o->eval_n) && tries < 50L * (n_train + o->eval_n);
         tries++) {
        long a = (long)(cli_splitmix(&rs) % (uint64_t)range), b = (long)(cli_splitmix(&rs) % (uint64_t)range);
        if (held_out(a, b)) {
            if (r->n_eval < o->eval_n) {
                r->eval_pairs[r->n_eval][0] = a;
                r->eval_pairs[r->n_eval][1] = b;
                r->n_eval++;
            }
            continue;
        }
        if (r->n_train >= n_train)
            continue;
        if (add_example(r, a, b))
            return 1;
        r->n_train++;
    }
    printf("  data: %d training problems, %d held-out problems never seen in training\n", r->n_train, r->n_eval);
    return 0;
}

/* AdamW with a cosine schedule over --steps; a progress line every 50 steps
 * (every 5 on a terminal, redrawn in place). */
static int setup_training(demo_run *r)
{
    const demo_opts *o = &r->o;
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = o->lr;
    oo.weight_decay = 0.01;
    oo.schedule = PT_SCHEDULE_COSINE;
    oo.warmup_steps = o->steps / 20;
    oo.total_steps = o->steps > 0 ? o->steps : 1;
    oo.min_lr_ratio = 0.1;
    int st;
    if ((st = pt_optimizer_create(&r->opt, r->model, &oo)) || (st = pt_context_create(&r->ctx, r->model, o->batch, 64)))
        return cli_fail("setup", st);
    return 0;
}

static int train_loop(demo_run *r, double *t0)
{
    const demo_opts *o = &r->o;
    double tokens = 0, ema = NAN;
    const bool tty = isatty(fileno(stdout));
    int st;
    *t0 = cli_now();
    for (int s = 1; s <= o->steps; s++) {
        pt_batch b;
        pt_batch_init(&b);
        const float *w;
        if ((st = pt_dataset_next_batch(&b, &w, r->data)))
            return cli_fail("data", st);
        pt_sft_stats ss;
        pt_sft_stats_init(&ss);
        if ((st = pt_sft_step(&ss, r->opt, r->ctx, &b, &w, 1)))
            return cli_fail("sft step", st);
        tokens += (double)b.batch * b.seq;
        ema = isnan(ema) ? ss.loss : 0.95 * ema + 0.05 * ss.loss;
        if (s % 50 == 0 || s == o->steps || (tty && s % 5 == 0)) {
            double el = cli_now() - *t0;
            printf("%s  step %4d/%d  loss %.4f  lr %.2e  %.0f tok/s  %.0fs%s", tty ? "\r" : "", s, o->steps, ema,
                   ss.lr, tokens / el, el, tty && s % 50 ? "" : "\n");
            fflush(stdout);
        }
    }
    return 0;
}

int cmd_demo(int argc, char **argv)
{
    demo_run r = { 0 };
    int rc = parse_args(&r.o, argc, argv);
    if (rc)
        return cli_exit_code(rc);
    printf("libposttrain %s demo: SFT of a tiny built-in model on %d-digit addition\n", pt_version_string(),
           r.o.digits);
    double acc0, acc1, t0;
    int st;
    rc = 1;
    if (build_model(&r) || build_data(&r) || setup_training(&r))
        goto done;
    printf("  before training:\n");
    if ((st = evaluate(&acc0, r.ctx, r.tok, &r.o, r.eval_pairs, r.n_eval, r.vocab, true))) {
        cli_fail("evaluate", st);
        goto done;
    }
    printf("  held-out exact match before: %.1f%% (%d problems)\n", 100 * acc0, r.n_eval);
    if (train_loop(&r, &t0))
        goto done;
    printf("  after %d steps (%.0f s):\n", r.o.steps, cli_now() - t0);
    if ((st = evaluate(&acc1, r.ctx, r.tok, &r.o, r.eval_pairs, r.n_eval, r.vocab, true))) {
        cli_fail("evaluate", st);
        goto done;
    }
    printf("  held-out exact match: %.1f%% before -> %.1f%% after\n", 100 * acc0, 100 * acc1);
    rc = 0;
done:
    demo_free(&r);
    return rc;
}
