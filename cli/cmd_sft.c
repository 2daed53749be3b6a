/* posttrain sft: supervised fine-tuning of a Hugging Face model directory on
 * JSONL data, with checkpoints, exact resume, progress and a metrics file. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void sft_usage(FILE *f)
{
    fprintf(f,
        "usage: posttrain sft --model DIR --data FILE.jsonl --out DIR [options]\n\n"
        "Rows: {\"text\"}, {\"prompt\",\"completion\"}, {\"messages\":[...]} or {\"input_ids\",\"loss_mask\"}.\n"
        "The trained model is saved in Hugging Face layout at --out.\n\n");
    cli_optimizer_usage(f, "1e-4");
    fprintf(f,
        "length:\n"
        "  --steps N | --epochs F  (default: 1 epoch)\n"
        "data:\n"
        "  --batch-size N (8)  --grad-accum N (1)  --max-length N (512)  --pack\n"
        "  --all-tokens (train on prompts too)  --chat-template NAME  --skip-bad-rows\n"
        "  --eval-fraction F (0)  --eval-every N (0: only at the end)  --seed N (0)\n"
        "checkpoints and output:\n"
        "  --save-every N (0: none)  --resume CHECKPOINT_DIR  --metrics FILE (OUT/metrics.jsonl)\n"
        "  --log-every N (progress line interval when not on a terminal; 10)\n"
        "LoRA (the base is frozen; OUT/adapter gets the PEFT adapter, OUT the merged model):\n"
        "  --lora-rank N (0: full fine-tuning)  --lora-alpha F (= rank)\n"
        "  --lora-targets LIST  comma-separated of q,k,v,o,gate,up,down or all (q,v)\n");
}

typedef struct sft_args {
    const char *model, *data, *out, *resume, *metrics, *chat_template;
    pt_optimizer_options opt;
    pt_dataset_options data_opts;
    int64_t steps;
    double epochs;
    int grad_accum, eval_every, save_every, log_every, lora_rank;
    double lora_alpha;
    unsigned lora_targets;
} sft_args;

static int parse_args(sft_args *a, int argc, char **argv)
{
    pt_optimizer_options_init(&a->opt);
    pt_dataset_options_init(&a->data_opts);
    /* Schedules default to constant with no warmup. */
    a->grad_accum = 1;
    a->log_every = 10;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            sft_usage(stdout);
            return -1;
        }
        bool flag = !strcmp(k, "--pack") || !strcmp(k, "--all-tokens") || !strcmp(k, "--skip-bad-rows");
        if (flag) {
            if (!strcmp(k, "--pack"))
                a->data_opts.pack = true;
            else if (!strcmp(k, "--all-tokens"))
                a->data_opts.completion_only = false;
            else
                a->data_opts.skip_bad_rows = true;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error("sft", "%s needs a value", k);
        const char *v = argv[++i];
        long n;
        double x;
#define NUM(opt, lo, hi, dst) CLI_INT_OPTION("sft", opt, lo, hi, dst)
#define REAL(opt, dst)                                                                     \
    if (!strcmp(k, opt)) {                                                                 \
        if (cli_parse_double(v, &x) || !isfinite(x))                                       \
            return cli_usage_error("sft", "%s needs a number, not '%s'", opt, v);          \
        dst = x;                                                                           \
        continue;                                                                          \
    }
        if (!strcmp(k, "--model")) { a->model = v; continue; }
        if (!strcmp(k, "--data")) { a->data = v; continue; }
        if (!strcmp(k, "--out")) { a->out = v; continue; }
        if (!strcmp(k, "--resume")) { a->resume = v; continue; }
        if (!strcmp(k, "--metrics")) { a->metrics = v; continue; }
        if (!strcmp(k, "--chat-template")) { a->data_opts.chat_template = v; continue; }
        if (!strcmp(k, "--lora-targets")) {
            if (cli_parse_lora_targets(&a->lora_targets, v))
                return cli_usage_error("sft", "--lora-targets takes a comma-separated list of q,k,v,o,gate,up,down "
                                              "or all, not '%s'", v);
            continue;
        }
        int orc;
        if (cli_optimizer_option(&a->opt, "sft", k, v, &orc)) {
            if (orc)
                return orc;
            continue;
        }
        REAL("--epochs", a->epochs)
        REAL("--eval-fraction", a->data_opts.eval_fraction)
        REAL("--lora-alpha", a->lora_alpha)
        NUM("--steps", 1, 1000000000L, a->steps)
        NUM("--batch-size", 1, 65536, a->data_opts.batch_size)
        NUM("--grad-accum", 1, 65536, a->grad_accum)
        NUM("--max-length", 2, 1048576, a->data_opts.max_length)
        NUM("--eval-every", 0, 1000000000L, a->eval_every)
        NUM("--save-every", 0, 1000000000L, a->save_every)
        NUM("--log-every", 1, 1000000000L, a->log_every)
        NUM("--lora-rank", 0, 65536, a->lora_rank)
        if (!strcmp(k, "--seed")) {
            if (cli_parse_seed(v, &a->data_opts.seed))
                return cli_usage_error("sft", "--seed needs a non-negative integer, not '%s'", v);
            continue;
        }
        return cli_usage_error("sft", "unknown option '%s'", k);
#undef NUM
#undef REAL
    }
    if (!a->model || !a->data || !a->out)
        return cli_usage_error("sft", "--model, --data and --out are required");
    if (a->steps && a->epochs > 0)
        return cli_usage_error("sft", "give --steps or --epochs, not both");
    if (a->epochs < 0)
        return cli_usage_error("sft", "--epochs must be positive");
    if (a->lora_rank == 0 && (a->lora_alpha != 0 || a->lora_targets))
        return cli_usage_error("sft", "--lora-alpha and --lora-targets need --lora-rank");
    if (a->lora_alpha < 0)
        return cli_usage_error("sft", "--lora-alpha must be positive");
    return 0;
}

static void fmt_eta(char *buf, size_t n, double secs)
{
    if (!isfinite(secs) || secs < 0)
        snprintf(buf, n, "?");
    else if (secs >= 3600)
        snprintf(buf, n, "%dh%02dm", (int)(secs / 3600), (int)fmod(secs / 60, 60));
    else
        snprintf(buf, n, "%dm%02ds", (int)(secs / 60), (int)fmod(secs, 60));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int save_checkpoint(const sft_args *a, pt_model *m, pt_optimizer *o, pt_dataset *d, int64_t step)
{
    char dir[4096], host[256];
    snprintf(dir, sizeof dir, "%s/checkpoints", a->out);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/checkpoints/step-%08lld", a->out, (long long)step);
    int64_t epoch, cursor;
    pt_dataset_get_position(&epoch, &cursor, d);
    snprintf(host, sizeof host, "{\"step\": %lld, \"epoch\": %lld, \"cursor\": %lld, \"seed\": %llu}",
             (long long)step, (long long)epoch, (long long)cursor, (unsigned long long)a->data_opts.seed);
    int st = pt_checkpoint_save(m, o, host, dir);
    if (st)
        return cli_fail("saving a checkpoint", st);
    fprintf(stderr, "posttrain sft: checkpoint %s\n", dir);
    return 0;
}

static int resume_from(int64_t *step, const sft_args *a, pt_model *m, pt_optimizer *o, pt_dataset *d)
{
    char *host = NULL;
    int st = pt_checkpoint_load(&host, m, o, a->resume);
    if (st)
        return cli_fail("--resume", st);
    long long epoch = -1, cursor = -1, steps = -1;
    unsigned long long seed = 0;
    const char *e = host ? strstr(host, "\"epoch\":") : NULL, *c = host ? strstr(host, "\"cursor\":") : NULL,
               *s = host ? strstr(host, "\"seed\":") : NULL;
    const char *sp = host ? strstr(host, "\"step\":") : NULL;
    if (sp)
        steps = strtoll(sp + 7, NULL, 10);
    if (e)
        epoch = strtoll(e + 8, NULL, 10);
    if (c)
        cursor = strtoll(c + 9, NULL, 10);
    if (s)
        seed = strtoull(s + 7, NULL, 10);
    pt_free(host);
    if (epoch < 0 || cursor < 0 || steps < 0) {
        fprintf(stderr, "posttrain sft: --resume: %s has no data position\n", a->resume);
        return 1;
    }
    if (seed != a->data_opts.seed)
        fprintf(stderr, "posttrain sft: warning: the checkpoint was made with --seed %llu, resuming with %llu\n",
                seed, (unsigned long long)a->data_opts.seed);
    st = pt_dataset_set_position(d, epoch, cursor);
    if (st)
        return cli_fail("--resume", st);
    *step = steps;
    return 0;
}

int cmd_sft(int argc, char **argv)
{
    sft_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(&a, argc, argv);
    if (rc)
        return rc < 0 ? 0 : rc;
    pt_model *model = NULL;
    pt_dataset *data = NULL;
    pt_optimizer *opt = NULL;
    pt_context *ctx = NULL;
    FILE *metrics = NULL;
    int st;
    rc = 1;
    if ((st = pt_model_load_dir(&model, a.model, NULL))) {
        cli_fail(a.model, st);
        goto done;
    }
    if (a.lora_rank > 0 &&
        cli_add_lora("sft", model, a.lora_rank, a.lora_alpha, a.lora_targets, a.data_opts.seed))
        goto done;
    const pt_tokenizer *tok = pt_model_tokenizer(model);
    if ((st = pt_dataset_load_jsonl(&data, a.data, tok, &a.data_opts))) {
        cli_fail(a.data, st);
        goto done;
    }
    pt_dataset_stats ds;
    pt_dataset_stats_init(&ds);
    if ((st = pt_dataset_get_stats(&ds, data))) {
        cli_fail(a.data, st);
        goto done;
    }
    if (ds.train_examples == 0) {
        fprintf(stderr, "posttrain sft: %s has no training examples\n", a.data);
        goto done;
    }
    fprintf(stderr, "posttrain sft: %lld rows: %lld train, %lld eval examples; %lld skipped, %lld empty, "
                    "%lld truncated (%lld tokens cut)\n",
            (long long)ds.rows, (long long)ds.train_examples, (long long)ds.eval_examples,
            (long long)ds.skipped_rows, (long long)ds.empty_rows, (long long)ds.truncated_rows,
            (long long)ds.truncated_tokens);
    int64_t rows_per_step = (int64_t)a.data_opts.batch_size * a.grad_accum;
    int64_t total = a.steps;
    if (!total) {
        double ep = a.epochs > 0 ? a.epochs : 1.0;
        double examples_per_row = 1.0;
        if (a.data_opts.pack && ds.train_examples > 0) {
            double mean_len = (double)ds.train_tokens / (double)ds.train_examples;
            examples_per_row = fmax(1.0, floor((double)a.data_opts.max_length / mean_len));
        }
        total = (int64_t)ceil(ep * (double)ds.train_examples / ((double)rows_per_step * examples_per_row));
        if (total < 1)
            total = 1;
    }
    if (a.opt.schedule != PT_SCHEDULE_CONSTANT)
        a.opt.total_steps = total;
    if ((st = pt_optimizer_create(&opt, model, &a.opt))) {
        cli_fail("optimizer", st);
        goto done;
    }
    int max_seq;
    pt_dataset_max_seq(&max_seq, data);
    if ((st = pt_context_create(&ctx, model, a.data_opts.batch_size, max_seq))) {
        cli_fail("context", st);
        goto done;
    }
    if (mkdir(a.out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "posttrain sft: cannot create %s: %s\n", a.out, strerror(errno));
        goto done;
    }
    int64_t step = 0;
    if (a.resume) {
        if (resume_from(&step, &a, model, opt, data))
            goto done;
        fprintf(stderr, "posttrain sft: resumed at step %lld from %s\n", (long long)step, a.resume);
    }
    char mpath[4096];
    if (!a.metrics)
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", a.out);
    metrics = fopen(a.metrics ? a.metrics : mpath, a.resume ? "a" : "w");
    if (!metrics) {
        fprintf(stderr, "posttrain sft: cannot write %s: %s\n", a.metrics ? a.metrics : mpath, strerror(errno));
        goto done;
    }
    const bool tty = isatty(fileno(stderr));
    const double t_start = now_s();
    int64_t first = step;
    double tokens_seen = 0;
    pt_batch *micro = calloc((size_t)a.grad_accum, sizeof *micro);
    const float **w = calloc((size_t)a.grad_accum, sizeof *w);
    int32_t **bufs = calloc((size_t)a.grad_accum * 4, sizeof *bufs);
    float **wbufs = calloc((size_t)a.grad_accum, sizeof *wbufs);
    if (!micro || !w || !bufs || !wbufs) {
        fprintf(stderr, "posttrain sft: out of memory\n");
        free(micro); free(w); free(bufs); free(wbufs);
        goto done;
    }
    size_t cells = (size_t)a.data_opts.batch_size * (size_t)max_seq;
    bool ok = true;
    for (int i = 0; i < a.grad_accum && ok; i++) {
        for (int k = 0; k < 4; k++)
            ok = ok && (bufs[i * 4 + k] = malloc(cells * sizeof(int32_t)));
        ok = ok && (wbufs[i] = malloc(cells * sizeof(float)));
    }
    while (ok && step < total) {
        /* The dataset's batch buffers are reused per call: copy each micro-batch. */
        for (int i = 0; i < a.grad_accum && ok; i++) {
            pt_batch b;
            const float *bw;
            if ((st = pt_dataset_next_batch(&b, &bw, data))) {
                cli_fail("data", st);
                ok = false;
                break;
            }
            size_t nc = (size_t)b.batch * (size_t)b.seq;
            memcpy(bufs[i * 4 + 0], b.input_ids, nc * sizeof(int32_t));
            memcpy(bufs[i * 4 + 1], b.targets, nc * sizeof(int32_t));
            memcpy(bufs[i * 4 + 2], b.positions, nc * sizeof(int32_t));
            if (b.segments)
                memcpy(bufs[i * 4 + 3], b.segments, nc * sizeof(int32_t));
            memcpy(wbufs[i], bw, nc * sizeof(float));
            micro[i] = b;
            micro[i].input_ids = bufs[i * 4 + 0];
            micro[i].targets = bufs[i * 4 + 1];
            micro[i].positions = bufs[i * 4 + 2];
            micro[i].segments = b.segments ? bufs[i * 4 + 3] : NULL;
            w[i] = wbufs[i];
        }
        if (!ok)
            break;
        pt_sft_stats s;
        pt_sft_stats_init(&s);
        double t0 = now_s();
        if ((st = pt_sft_step(&s, opt, ctx, micro, w, a.grad_accum))) {
            cli_fail("sft step", st);
            ok = false;
            break;
        }
        double dt = now_s() - t0;
        step++;
        if (s.skipped)
            fprintf(stderr, "%sposttrain sft: step %lld skipped (non-finite loss or gradients)\n", tty ? "\n" : "",
                    (long long)step);
        size_t step_tokens = 0;
        for (int i = 0; i < a.grad_accum; i++)
            step_tokens += (size_t)micro[i].batch * (size_t)micro[i].seq;
        tokens_seen += (double)step_tokens;
        double elapsed = now_s() - t_start, tps = tokens_seen / elapsed;
        double eta = elapsed / (double)(step - first) * (double)(total - step);
        double eval_loss = NAN;
        bool do_eval = ds.eval_examples > 0 && ((a.eval_every && step % a.eval_every == 0) || step == total);
        if (do_eval) {
            double etok;
            if ((st = pt_dataset_eval_loss(&eval_loss, &etok, data, ctx))) {
                cli_fail("eval", st);
                ok = false;
                break;
            }
        }
        fprintf(metrics, "{\"step\": %lld, \"loss\": %.6f, \"tokens\": %.0f, \"grad_norm\": %.6g, \"lr\": %.6g, "
                         "\"skipped\": %s, \"step_seconds\": %.4f, \"tokens_per_s\": %.1f",
                (long long)step, s.loss, s.tokens, s.grad_norm, s.lr, s.skipped ? "true" : "false", dt,
                (double)step_tokens / dt);
        if (do_eval)
            fprintf(metrics, ", \"eval_loss\": %.6f", eval_loss);
        fprintf(metrics, "}\n");
        fflush(metrics);
        char etas[32];
        fmt_eta(etas, sizeof etas, eta);
        if (tty) {
            int width = 24, filled = (int)((double)width * (double)step / (double)total);
            char bar[32];
            for (int i = 0; i < width; i++)
                bar[i] = i < filled ? '#' : '.';
            bar[width] = '\0';
            fprintf(stderr, "\r[%s] step %lld/%lld loss %.4f %.0f tok/s ETA %s   ", bar, (long long)step,
                    (long long)total, s.loss, tps, etas);
            if (do_eval)
                fprintf(stderr, "\n  eval loss %.4f\n", eval_loss);
        } else if (step % a.log_every == 0 || step == total || do_eval) {
            fprintf(stderr, "step %lld/%lld loss %.4f lr %.3g grad_norm %.3g %.0f tok/s ETA %s%s", (long long)step,
                    (long long)total, s.loss, s.lr, s.grad_norm, tps, etas, do_eval ? "" : "\n");
            if (do_eval)
                fprintf(stderr, " eval_loss %.4f\n", eval_loss);
        }
        if (a.save_every && step % a.save_every == 0 && step < total && save_checkpoint(&a, model, opt, data, step)) {
            ok = false;
            break;
        }
    }
    if (tty)
        fprintf(stderr, "\n");
    for (int i = 0; i < a.grad_accum * 4; i++)
        free(bufs[i]);
    for (int i = 0; i < a.grad_accum; i++)
        free(wbufs[i]);
    free(micro); free(w); free(bufs); free(wbufs);
    if (!ok)
        goto done;
    if (a.save_every && save_checkpoint(&a, model, opt, data, step))
        goto done;
    if (cli_save_trained("sft", model, a.out, a.model, (long long)step))
        goto done;
    rc = 0;
done:
    if (metrics)
        fclose(metrics);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_dataset_free(data);
    pt_model_free(model);
    return rc;
}
