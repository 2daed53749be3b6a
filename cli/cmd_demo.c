/* posttrain demo: the whole post-training story on a built-in default, with
 * no download and no file from outside the repository.  A tiny
 * Llama-architecture model built from a config, with the built-in byte-level
 * tokenizer, learns multi-digit addition written as text: first by SFT on
 * the traces of a scripted teacher that forgets the carries on a fixed
 * fraction of its traces (so imitation inherits the slip), then by GRPO with
 * a verifiable reward (the exact answer), which takes it past the teacher.
 * Held-out accuracy (greedy decoding, problems never trained on) is measured
 * before training, after SFT and after GRPO.  The task, the teacher's
 * traces, the rollouts and the evaluation are the library's
 * (posttrain/addition.h): this is their host. */
#include "cli.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct demo_opts {
    /* the task (digits), the seed and GRPO's options: parsed into the
     * library's loop options (posttrain/addition.h) */
    pt_addition_grpo_options go;
    /* the model */
    int hidden, layers, heads, tied, threads;
    /* the teacher and SFT */
    double slip;        /* probability that the teacher forgets the carries on a trace */
    int traces, steps, batch;
    double lr;
    const char *save_traces; /* the traces as JSONL, or NULL */
    /* GRPO: its steps and evaluation, and --bf16 */
    int grpo_steps, eval_every;
    bool bf16;
    /* evaluation */
    int eval_n;
    double eval_temperature;
} demo_opts;

/* Accuracy on the held-out problems, and how often the answer was the
 * teacher's slip (the carries forgotten) where that differs from the right one. */
typedef struct demo_score {
    double correct, slipped;
    char shown[512];    /* a few problems with a carry and the answers given */
} demo_score;

/* Everything the demo holds; demo_free releases it. */
typedef struct demo_run {
    demo_opts o;
    pt_tokenizer *tok;
    pt_model *model;
    pt_context *ctx;
    pt_generator *gen;
    pt_dataset *data;
    int64_t (*eval_pairs)[2];
    int n_eval, n_train;
    int plen, alen;         /* prompt tokens (with BOS), answer digits */
    double teacher_wrong;   /* fraction of the SFT traces whose answer is wrong */
} demo_run;

typedef demo_opts cli_args; /* CLI_ARG's */
static const cli_opt k_demo_opts[] = {
    { CLI_INT, "digits", CLI_ARG(go.digits), "N", .def = "2", .lo = 1, .hi = 6, .help = "digits of each operand" },
    { CLI_UINT64, "seed", CLI_ARG(go.seed), "N", .def = "1", .lo = 0, .hi = 1 << 30,
      .help = "seed of the model, the data, its order and the sampling" },
    { CLI_DOUBLE, "slip", CLI_ARG(slip), "F", .def = "0.7", .lo = 0, .hi = 1,
      .help = "share of the teacher's traces in which it forgets the carries" },
    { CLI_INT, "traces", CLI_ARG(traces), "N", .def = "20000", .lo = 1, .hi = 10000000,
      .help = "SFT traces of the teacher" },
    { CLI_PATH, "save-traces", CLI_ARG(save_traces), "FILE",
      .help = "also write the teacher's traces to FILE, one {\"prompt\", \"completion\"}\n"
              "JSONL row each (the data format of posttrain sft), replaced atomically" },
    { CLI_INT, "steps", CLI_ARG(steps), "N", .def = "800", .lo = 0, .hi = 1000000, .help = "SFT steps" },
    { CLI_INT, "batch", CLI_ARG(batch), "N", .def = "64", .lo = 1, .hi = 256, .help = "SFT traces per step" },
    { CLI_DOUBLE, "lr", CLI_ARG(lr), "F", .def = "3e-3", .lo = 1e-9, .hi = 0.999999,
      .help = "SFT peak learning rate (AdamW, cosine schedule)" },
    { CLI_INT, "grpo-steps", CLI_ARG(grpo_steps), "N", .def = "100", .lo = 0, .hi = 1000000, .help = "GRPO steps" },
    { CLI_INT, "prompts", CLI_ARG(go.prompts), "N", .def = "32", .lo = 1, .hi = 256, .help = "GRPO problems per step" },
    { CLI_INT, "group", CLI_ARG(go.group), "G", .def = "4", .lo = 2, .hi = 64, .help = "GRPO samples per problem" },
    { CLI_DOUBLE, "grpo-lr", CLI_ARG(go.lr), "F", .def = "3e-4", .lo = 1e-12, .hi = 0.999999,
      .help = "GRPO learning rate (AdamW, constant)" },
    { CLI_DOUBLE, "beta", CLI_ARG(go.beta), "F", .def = "0", .lo = 0, .hi = 1e6,
      .help = "k3 KL weight against the SFT model" },
    { CLI_DOUBLE, "temperature", CLI_ARG(go.temperature), "F", .def = "1", .lo = 0.05, .hi = 10,
      .help = "GRPO sampling temperature" },
    { CLI_ENUM, "loss-type", CLI_ARG(go.loss_type), .def = "dapo", .from_name = pt_grpo_loss_type_from_name,
      .enum_name = pt_grpo_loss_type_name, .help = "GRPO loss aggregation (docs/grpo.md)" },
    { CLI_ENUM, "scale-rewards", CLI_ARG(go.scale_rewards), .def = "group", .from_name = pt_grpo_scale_from_name,
      .enum_name = pt_grpo_scale_name, .help = "GRPO advantage scaling" },
    { CLI_FLAG, "bf16", CLI_ARG(bf16), .help = "mixed precision where the CPU has BF16 arithmetic\n(docs/bf16.md)" },
    { CLI_FLAG, "drop-zero-std", CLI_ARG(go.drop_zero_std),
      .help = "leave groups whose rewards are all equal out of the GRPO step" },
    { CLI_INT, "eval-every", CLI_ARG(eval_every), "N", .def = "0", .lo = 0, .hi = 1000000,
      .help = "greedy held-out accuracy every N GRPO steps (0: at the end)" },
    { CLI_INT, "eval", CLI_ARG(eval_n), "N", .def = "1000", .lo = 1, .hi = 100000,
      .help = "held-out problems to measure" },
    { CLI_DOUBLE, "eval-temperature", CLI_ARG(eval_temperature), "F", .def = "1", .lo = 0.05, .hi = 10,
      .help = "temperature of the sampled accuracy" },
    { CLI_INT, "hidden", CLI_ARG(hidden), "N", .def = "64", .lo = 16, .hi = 1024,
      .help = "hidden size, a multiple of 16" },
    { CLI_INT, "layers", CLI_ARG(layers), "N", .def = "2", .lo = 1, .hi = 32, .help = "transformer layers" },
    { CLI_INT, "heads", CLI_ARG(heads), "N", .def = "16", .lo = 1, .hi = 64,
      .help = "attention heads (they must divide --hidden)" },
    { CLI_INT, "tied", CLI_ARG(tied), "0|1", .def = "0", .lo = 0, .hi = 1,
      .help = "1: tie the input and output embeddings" },
    { CLI_INT, "threads", CLI_ARG(threads), "N", .def = "1", .lo = 0, .hi = 1024,
      .help = "threads of the demo's model; 0: the program's (posttrain --threads N,\n"
              "PT_NUM_THREADS or every CPU).  The same seed and thread count give\n"
              "the same output (docs/demo.md)" },
};

static const cli_command k_demo = {
    .name = "demo",
    .usage = "[options]",
    .about = "Post-trains a tiny built-in model on addition: SFT on the traces of a teacher\n"
             "that forgets the carries, then GRPO with the exact answer as the reward.\n"
             "Prints held-out accuracy before, after SFT and after GRPO.  Needs no file\n"
             "and no download.",
};

static void demo_free(demo_run *r)
{
    free(r->eval_pairs);
    pt_dataset_free(r->data);
    pt_generator_free(r->gen);
    pt_context_free(r->ctx);
    pt_model_free(r->model);
    pt_tokenizer_free(r->tok);
}

static int parse_args(demo_opts *o, int argc, char **argv)
{
    pt_addition_grpo_options_init(&o->go);
    int rc = cli_parse_table(&k_demo, k_demo_opts, CLI_COUNT_OF(k_demo_opts), o, argc, argv, NULL);
    if (rc)
        return rc;
    o->go.bf16_reference = o->bf16; /* with --bf16 the reference is frozen in BF16 too */
    if (o->hidden % 16)
        return cli_usage_error("demo", "--hidden must be a multiple of 16, not %d", o->hidden);
    if (o->hidden % o->heads)
        return cli_usage_error("demo", "--heads must divide --hidden");
    return 0;
}

static int64_t r_range(int digits)
{
    int64_t n = 1;
    for (int i = 0; i < digits; i++)
        n *= 10;
    return n;
}

/* The byte-level tokenizer and a tiny Llama of the options' shape. */
static int build_model(demo_run *r)
{
    const demo_opts *o = &r->o;
    int st;
    if ((st = pt_tokenizer_create_bytes(&r->tok)))
        return cli_fail("tokenizer", st);
    pt_model_config cfg;
    if ((st = pt_addition_model_config(&cfg, r->tok, o->hidden, o->layers, o->heads, o->tied != 0)))
        return cli_fail("model", st);
    if ((st = pt_model_create(&r->model, &cfg, o->go.seed)))
        return cli_fail("model", st);
    if (o->bf16 && cli_set_bf16("demo", r->model, PT_BF16_ON))
        return 1;
    r->plen = 1 + 2 * o->go.digits + 2;
    r->alen = o->go.digits + 1;
    printf("  model: %s, %d layers, hidden %d, %d heads, vocab %d (byte-level), %.2fM parameters\n",
           pt_arch_name(cfg.arch), o->layers, o->hidden, cfg.num_attention_heads, cfg.vocab_size,
           (double)pt_model_param_count(r->model) / 1e6);
    char prompt[64], answer[32];
    (void)pt_addition_problem(prompt, sizeof prompt, answer, sizeof answer, o->go.digits, 59 % r_range(o->go.digits),
                              96 % r_range(o->go.digits), false);
    printf("  task: \"%s\" -> \"%s\" and EOS (the sum's digits least significant first)\n", prompt, answer);
    return 0;
}

/* The SFT traces of the teacher, and the held-out problems. */
static int demo_build_data(demo_run *r)
{
    const demo_opts *o = &r->o;
    pt_dataset_options dopt;
    pt_dataset_options_init(&dopt);
    dopt.max_length = 64;
    dopt.batch_size = o->batch;
    dopt.seed = o->go.seed;
    int st;
    if ((st = pt_dataset_create(&r->data, &dopt)))
        return cli_fail("dataset", st);
    /* The teacher's traces: problems drawn from the training pairs, each
     * answered right, or with the carries forgotten with probability slip. */
    uint64_t rs = o->go.seed * 7919 + 17;
    int64_t wrong = 0;
    if ((st = pt_addition_save_traces(r->data, &wrong, r->tok, o->go.digits, o->slip, o->traces, &rs, o->save_traces))) {
        /* --save-traces that cannot be written: the library's "cannot write PATH: ..." */
        if (o->save_traces && (st == PT_EIO || st == PT_ENOSPC)) {
            fprintf(stderr, "posttrain demo: %s\n", pt_last_error());
            return 1;
        }
        return cli_fail("teacher", st);
    }
    r->n_train = o->traces;
    r->teacher_wrong = o->traces ? (double)wrong / o->traces : 0;
    /* The held-out problems: the same for every seed (a fixed stream), distinct. */
    size_t n = 0;
    if (!(r->eval_pairs = calloc((size_t)o->eval_n, sizeof *r->eval_pairs)))
        return cli_fail("data", PT_ENOMEM);
    if ((st = pt_addition_held_out_pairs(r->eval_pairs[0], &n, (size_t)o->eval_n, o->go.digits)))
        return cli_fail("data", st);
    r->n_eval = (int)n;
    return 0;
}

/* Held-out accuracy, greedy (temperature 0) or sampled (seeded); the
 * first `show` problems with a carry are written into s->shown. */
static int demo_evaluate(demo_score *s, demo_run *r, double temperature, uint64_t seed, int show)
{
    /* with `show`, the completions and their lengths */
    int32_t *tokens = show ? malloc((size_t)r->n_eval * (size_t)(r->alen + 2) * sizeof *tokens) : NULL;
    if (show && !tokens)
        return PT_ENOMEM;
    pt_addition_eval_options eo;
    pt_addition_eval_options_init(&eo);
    eo.digits = r->o.go.digits;
    eo.temperature = temperature;
    eo.seed = seed;
    int64_t correct, slipped;
    int32_t *ntok = tokens ? tokens + (size_t)r->n_eval * (size_t)(r->alen + 1) : NULL;
    int st = pt_addition_evaluate(&correct, &slipped, tokens, ntok, r->gen, r->tok, r->eval_pairs[0],
                                  (size_t)r->n_eval, &eo);
    s->shown[0] = '\0';
    if (!st && show)
        (void)pt_addition_show_answers(s->shown, sizeof s->shown, r->tok, tokens, ntok, r->eval_pairs[0],
                                       (size_t)r->n_eval, r->o.go.digits, show);
    free(tokens);
    s->correct = r->n_eval ? (double)correct / r->n_eval : 0;
    s->slipped = r->n_eval ? (double)slipped / r->n_eval : 0;
    return st;
}

/* The SFT context (also GRPO's) and the generator of evaluation and
 * rollouts, on --threads threads. */
static int setup(demo_run *r)
{
    const demo_opts *o = &r->o;
    const int seq = r->plen + r->alen + 1;
    const int n = o->go.prompts * o->go.group, rows = n > 256 ? n : 256;
    int st;
    if ((st = pt_context_create(&r->ctx, r->model, o->batch, seq)) ||
        (st = pt_generator_create(&r->gen, r->model, rows, seq)) ||
        (st = pt_context_set_num_threads(r->ctx, o->threads)) ||
        (st = pt_generator_set_num_threads(r->gen, o->threads)))
        return cli_fail("setup", st);
    return 0;
}

/* SFT: AdamW with a cosine schedule over --steps; a progress line every 50
 * steps (every 5 on a terminal, redrawn in place). */
static int sft(demo_run *r)
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
    pt_optimizer *opt = NULL;
    int st;
    if ((st = pt_optimizer_create(&opt, r->model, &oo)))
        return cli_fail("optimizer", st);
    double tokens = 0, ema = NAN, t0 = cli_now();
    const bool tty = isatty(fileno(stdout));
    for (int s = 1; s <= o->steps; s++) {
        pt_batch b;
        pt_batch_init(&b);
        const float *w;
        pt_sft_stats ss;
        pt_sft_stats_init(&ss);
        if ((st = pt_dataset_next_batch(&b, &w, r->data)) || (st = pt_sft_step(&ss, opt, r->ctx, &b, &w, 1))) {
            pt_optimizer_free(opt);
            return cli_fail("sft step", st);
        }
        tokens += (double)b.batch * b.seq;
        ema = isnan(ema) ? ss.loss : 0.95 * ema + 0.05 * ss.loss;
        if (s % 100 == 0 || s == o->steps || (tty && s % 5 == 0)) {
            double el = cli_now() - t0;
            printf("%s  sft step %4d/%d  loss %.4f  lr %.2e  %.0f tok/s  %.0fs%s", tty ? "\r" : "", s, o->steps,
                   ema, ss.lr, tokens / el, el, tty && s % 100 ? "" : "\n");
            fflush(stdout);
        }
    }
    pt_optimizer_free(opt);
    return 0;
}

/* GRPO: each step samples --group answers to each of --prompts training
 * problems, scored by the verifiable reward (1 for the exact answer
 * followed by EOS, else 0: pt_addition_rollouts), and pt_grpo_step makes
 * one update from the group advantages. */
static int demo_grpo(demo_run *r)
{
    const demo_opts *o = &r->o;
    pt_addition_grpo *g = NULL;
    int st = pt_addition_grpo_create(&g, r->model, r->tok, &o->go);
    int rc = st ? cli_fail("grpo", st) : 0;
    double t0 = cli_now(), zero_std = 0, reward_sum = 0;
    int since = 0;
    for (int step = 1; !rc && step <= o->grpo_steps; step++) {
        pt_grpo_stats gs;
        if ((st = pt_addition_grpo_step(&gs, g, r->ctx, r->gen))) {
            rc = cli_fail("grpo step", st);
            break;
        }
        zero_std += gs.frac_reward_zero_std;
        reward_sum += gs.reward;
        since++;
        const int every = o->eval_every > 0 ? o->eval_every : 25;
        if (step % every == 0 || step == o->grpo_steps) {
            printf("  grpo step %4d/%d  reward %.3f  zero-std groups %.2f  entropy %.3f  kl %.4f  %.0fs", step,
                   o->grpo_steps, reward_sum / since, zero_std / since, gs.entropy, gs.kl, cli_now() - t0);
            reward_sum = zero_std = 0;
            since = 0;
            if (o->eval_every > 0) {
                demo_score e;
                if ((st = demo_evaluate(&e, r, 0, 0, 0))) {
                    rc = cli_fail("evaluate", st);
                    break;
                }
                printf("  held-out greedy %.1f%% (slipped %.1f%%)", 100 * e.correct, 100 * e.slipped);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    pt_addition_grpo_free(g);
    return rc;
}

/* Greedy and sampled held-out accuracy; prints a line, keeps the greedy one. */
static int measure(double *greedy, demo_run *r, const char *when, uint64_t salt, bool show)
{
    demo_score g, s;
    int st;
    if ((st = demo_evaluate(&g, r, 0, 0, show ? 3 : 0)) ||
        (st = demo_evaluate(&s, r, r->o.eval_temperature, r->o.go.seed * 31 + salt, 0)))
        return cli_fail("evaluate", st);
    printf("  %s: held-out greedy %.1f%% (carries forgotten %.1f%%), sampled at T=%g %.1f%%\n", when,
           100 * g.correct, 100 * g.slipped, r->o.eval_temperature, 100 * s.correct);
    if (show)
        fputs(g.shown, stdout);
    *greedy = g.correct;
    return 0;
}

/* A training phase (SFT or GRPO) of `steps` steps, timed, then measured. */
static int phase(double *greedy, demo_run *r, int (*train)(demo_run *), const char *name, int steps, uint64_t salt)
{
    double t1 = cli_now();
    if (train(r))
        return 1;
    char when[96];
    snprintf(when, sizeof when, "after %s (%d steps, %.0f s)", name, steps, cli_now() - t1);
    return measure(greedy, r, when, salt, true);
}

int cmd_demo(int argc, char **argv)
{
    demo_run r = { 0 };
    int rc = parse_args(&r.o, argc, argv);
    if (rc)
        return cli_exit_code(rc);
    printf("libposttrain %s demo: SFT, then GRPO, of a tiny built-in model on %d-digit addition\n",
           pt_version_string(), r.o.go.digits);
    double acc[3], t0 = cli_now();
    rc = 1;
    if (build_model(&r) || demo_build_data(&r) || setup(&r))
        goto done;
    printf("  teacher: a scripted policy that forgets the carries in %.0f%% of its traces;\n"
           "           %.1f%% of its %d SFT traces are wrong\n",
           100 * r.o.slip, 100 * r.teacher_wrong, r.n_train);
    if (r.o.save_traces)
        printf("           (written to %s)\n", r.o.save_traces);
    printf("  held-out: %d problems never trained on (standard error of an accuracy <= %.1f points); "
           "%d thread%s\n", r.n_eval, 50 / sqrt(r.n_eval), pt_context_get_num_threads(r.ctx),
           pt_context_get_num_threads(r.ctx) == 1 ? "" : "s");
    if (measure(&acc[0], &r, "before training", 1, false) || phase(&acc[1], &r, sft, "SFT", r.o.steps, 2) ||
        phase(&acc[2], &r, demo_grpo, "GRPO", r.o.grpo_steps, 3))
        goto done;
    printf("  whole demo: %.0f s\n", cli_now() - t0);
    printf("held-out accuracy: before %d%% | after SFT %d%% | after GRPO %d%%\n", (int)lround(100 * acc[0]),
           (int)lround(100 * acc[1]), (int)lround(100 * acc[2]));
    rc = 0;
done:
    demo_free(&r);
    return rc;
}
