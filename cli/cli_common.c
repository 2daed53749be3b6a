/* Helpers shared by the commands: the optimizer and LoRA option tables of the training commands (sft, grpo), their output
 * directory, metrics file, checkpoints (host JSON, save, resume) and final
 * save. */
#include "cli.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- optimizer ---------------------------------------------------------------- */

#define OPT(field) offsetof(pt_optimizer_options, field)
const cli_opt cli_optimizer_opts[] = {
    { CLI_ENUM, "optimizer", OPT(type), .def = "adamw", .from_name = pt_optimizer_type_from_name,
      .enum_name = pt_optimizer_type_name, .help = "AdamW (decoupled weight decay) or SGD with momentum" },
    { CLI_DOUBLE, "beta1", OPT(beta1), "F", .def = "0.9", .help = "AdamW first-moment decay" },
    { CLI_DOUBLE, "beta2", OPT(beta2), "F", .def = "0.999", .help = "AdamW second-moment decay" },
    { CLI_DOUBLE, "eps", OPT(eps), "F", .def = "1e-8", .help = "AdamW denominator term" },
    { CLI_DOUBLE, "momentum", OPT(momentum), "F", .def = "0.9", .help = "SGD momentum" },
    { CLI_DOUBLE, "weight-decay", OPT(weight_decay), "F", .def = "0", .help = "weight decay" },
    { CLI_DOUBLE, "max-grad-norm", OPT(max_grad_norm), "F", .def = "1.0",
      .help = "clip the global gradient norm to F; 0 = off" },
    { CLI_ENUM, "schedule", OPT(schedule), .def = "constant", .from_name = pt_schedule_type_from_name,
      .enum_name = pt_schedule_type_name, .help = "learning-rate schedule after the warmup" },
    { CLI_INT64, "warmup-steps", OPT(warmup_steps), "N", .def = "0", .lo = 0, .hi = 1e9,
      .help = "linear warmup from 0" },
    { CLI_DOUBLE, "min-lr-ratio", OPT(min_lr_ratio), "F", .def = "0",
      .help = "cosine floor as a fraction of --lr" },
};
#undef OPT
const size_t cli_n_optimizer_opts = CLI_COUNT_OF(cli_optimizer_opts);

/* ---- LoRA --------------------------------------------------------------------- */

/* q,k,v,o,gate,up,down,all (or the *_proj names), comma-separated. */
static int parse_lora_targets(void *dst, const char *list, const char *cmd, const char *opt)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = { { "q", PT_LORA_Q }, { "k", PT_LORA_K }, { "v", PT_LORA_V }, { "o", PT_LORA_O },
                  { "gate", PT_LORA_GATE }, { "up", PT_LORA_UP }, { "down", PT_LORA_DOWN }, { "all", PT_LORA_ALL },
                  { "q_proj", PT_LORA_Q }, { "k_proj", PT_LORA_K }, { "v_proj", PT_LORA_V },
                  { "o_proj", PT_LORA_O }, { "gate_proj", PT_LORA_GATE }, { "up_proj", PT_LORA_UP },
                  { "down_proj", PT_LORA_DOWN } };
    unsigned bits = 0;
    bool ok = *list != '\0';
    for (const char *p = list; *p && ok;) {
        size_t n = strcspn(p, ",");
        ok = false;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == n && !strncmp(p, names[i].name, n)) {
                bits |= names[i].bit;
                ok = true;
            }
        p += n;
        if (*p == ',')
            p++;
    }
    if (!ok)
        return cli_usage_error(cmd, "%s takes a comma-separated list of q,k,v,o,gate,up,down or all, not '%s'",
                               opt, list);
    *(unsigned *)dst = bits;
    return 0;
}

const cli_opt cli_lora_opts[] = {
    { CLI_INT, "lora-rank", offsetof(cli_lora_args, rank), "N", .def = "0", .lo = 0, .hi = 65536,
      .help = "LoRA rank; 0: full fine-tuning" },
    { CLI_DOUBLE, "lora-alpha", offsetof(cli_lora_args, alpha), "F", .lo = 0, .hi = 1e9,
      .help = "LoRA alpha (default: the rank)" },
    { CLI_CUSTOM, "lora-targets", offsetof(cli_lora_args, targets), "LIST", .parse = parse_lora_targets,
      .help = "comma-separated of q,k,v,o,gate,up,down or all (default q,v)" },
};
const size_t cli_n_lora_opts = CLI_COUNT_OF(cli_lora_opts);

int cli_check_lora(const char *cmd, const cli_lora_args *l)
{
    if (l->rank == 0 && (l->alpha != 0 || l->targets))
        return cli_usage_error(cmd, "--lora-alpha and --lora-targets need --lora-rank");
    return 0;
}

static void lora_options(pt_lora_options *lo, const cli_lora_args *l, uint64_t seed)
{
    pt_lora_options_init(lo);
    lo->rank = l->rank;
    lo->alpha = l->alpha > 0 ? l->alpha : (double)l->rank;
    if (l->targets)
        lo->targets = l->targets;
    lo->seed = seed;
}

int cli_add_lora(const char *cmd, pt_model *model, const cli_lora_args *l, uint64_t seed)
{
    pt_lora_options lo;
    lora_options(&lo, l, seed);
    int st = pt_model_add_lora(model, &lo);
    if (st)
        return cli_fail("LoRA", st);
    cli_note("posttrain %s: LoRA rank %d, alpha %g; the base model is frozen\n", cmd, lo.rank, lo.alpha);
    return 0;
}

int cli_load_model(pt_model **out, const char *path, int bf16_mode, int quantize)
{
    pt_model_load_options lo;
    pt_model_load_options_init(&lo);
    lo.bf16 = bf16_mode;
    lo.quantize = quantize;
    return pt_model_load_dir(out, path, &lo);
}

int cli_set_bf16(const char *cmd, pt_model *model, int mode)
{
    int st = pt_model_set_bf16(model, mode);
    if (st)
        return cli_fail("--bf16", st);
    bool compute = strcmp(pt_cpu_path(), "avx512bf16") == 0;
    cli_note("posttrain %s: BF16 %s; kernels %s: %s\n", cmd,
             mode == PT_BF16_FROZEN ? "weights" : "on",
             pt_cpu_path(), compute ? "BF16 products with FP32 accumulation"
                                    : "BF16 weights widened to FP32 in the products");
    return 0;
}

int cli_reload_start(const char *cmd, pt_model *m, const char *model_dir, const cli_lora_args *l, uint64_t seed)
{
    pt_lora_options lo;
    lora_options(&lo, l, seed);
    int st = pt_run_reload_model(m, model_dir, l->rank > 0 ? &lo : NULL);
    if (st == PT_ESTATE) /* "MODEL_DIR no longer matches the model being trained" */
        return cli_run_fail(cmd, NULL);
    return st ? cli_fail(model_dir, st) : 0;
}

/* ---- checkpoints -------------------------------------------------------------- */

char *cli_host_new(const char *cmd, const char *model_dir, const pt_model *m)
{
    char *text = NULL;
    if (pt_run_host_model(&text, model_dir, m) != PT_OK)
        fprintf(stderr, "posttrain %s: out of memory building a checkpoint's host JSON\n", cmd);
    return text;
}

int cli_checkpoint_save(const char *cmd, cli_out *o, const pt_model *m, pt_optimizer *opt,
                        const pt_run_state *state, const char *host)
{
    int st = pt_run_save(o->run, m, opt, state, host);
    if (st == PT_EPEER) /* another rank failed and said why */
        return 1;
    return st ? cli_run_fail(cmd, "saving a checkpoint") : 0; /* the run notes the checkpoint */
}

/* After a failed load: when the checkpoint's recorded LoRA options are not
 * the run's (the usual cause of missing tensors), say which options to give. */
static void explain_lora(const char *cmd, const pt_model *m, const char *dir)
{
    char *text = NULL, *model = NULL;
    if (pt_checkpoint_read_host(&text, dir) != PT_OK || !text)
        return;
    pt_lora_options saved, lo;
    bool was_lora = false, readable = pt_checkpoint_host_model(&model, &saved, &was_lora, text) == PT_OK;
    pt_free(text);
    pt_free(model);
    pt_lora_options_init(&lo);
    bool have = pt_model_get_lora(&lo, m) == PT_OK;
    if (was_lora && (!have || lo.rank != saved.rank || lo.targets != saved.targets))
        fprintf(stderr, "posttrain %s: --resume: %s is of a LoRA run (rank %d): give that run's --lora-rank, "
                        "--lora-alpha and --lora-targets\n", cmd, dir, saved.rank);
    else if (readable && !was_lora && have)
        fprintf(stderr, "posttrain %s: --resume: %s is of a full fine-tune: resume it without --lora-rank\n", cmd,
                dir);
}

int cli_job_resume(cli_job *j, cli_out *o, pt_model *m, pt_optimizer *opt, const char *dir, uint64_t seed,
                   const cli_back *b, int64_t *step)
{
    const char *cmd = j->cmd;
    char *text = NULL;
    pt_run_state s;
    pt_run_state_init(&s);
    cli_job_section(j, PT_TIME_LOAD);
    int st = pt_run_load(&s, &text, o->run, m, opt), rc = 1;
    if (st == PT_ESTATE || st == PT_EEXIST || st == PT_EFORMAT)
        cli_run_fail(cmd, "--resume");
    else if (st && st != PT_EPEER) /* PT_EPEER: another rank failed and said why */
        cli_fail("--resume", st);
    else if (!st && !text)
        fprintf(stderr, "posttrain %s: out of memory reading a checkpoint's host JSON\n", cmd);
    if (st && st != PT_EPEER)
        explain_lora(cmd, m, dir);
    if (!st && text && s.seed != seed)
        cli_note("posttrain %s: warning: the checkpoint was made with --seed %" PRIu64 ", resuming with %" PRIu64
                 "\n", cmd, s.seed, seed);
    if (!st && text && !(rc = b->apply(b->run, &s, text, dir))) {
        *step = s.step; /* the run notes the step and the goodput lost */
        pt_run_resumed(o->run, s.step);
    }
    pt_free(text);
    cli_job_section(j, PT_TIME_STARTUP);
    return rc;
}

/* ---- output ------------------------------------------------------------------- */

int cli_skip_guard(const char *cmd, pt_run_skips *k, int reason, long long step, int max, double lr)
{
    if (pt_run_skip_guard(k, reason, step, max) == PT_OK)
        return 0;
    fprintf(stderr, "posttrain %s: stopped at step %lld: %lld optimizer updates in a row were skipped as non-finite "
                    "(steps %lld to %lld; the last: %s at learning rate %g): the weights or the learning rate have "
                    "run away and no later step would be applied; the model is not saved.  Lower --lr, or give "
                    "--max-skipped-steps 0 to never stop\n", cmd, step, (long long)k->in_a_row,
            (long long)k->first, step, pt_skip_reason_name(reason), lr);
    return 1;
}

int cli_no_tokenizer(const char *cmd, const char *model_dir, const char *need)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    struct stat sb;
    pt_tokenizer *tok = NULL;
    if (stat(model_dir, &sb) == 0 && S_ISREG(sb.st_mode))
        fprintf(stderr, "posttrain %s: the GGUF file %s carries no tokenizer (no tokenizer.ggml.* metadata); %s\n",
                cmd, model_dir, need);
    else if (lstat(path, &sb) != 0)
        fprintf(stderr, "posttrain %s: the model directory %s has no tokenizer.json; %s\n", cmd, model_dir, need);
    else {
        int st = pt_tokenizer_load(&tok, model_dir);
        fprintf(stderr, "posttrain %s: the model's tokenizer was not loaded: %s: %s; %s\n", cmd,
                pt_status_name(st), st ? pt_last_error() : "(it loads now)", need);
        pt_tokenizer_free(tok);
    }
    return 1;
}

void cli_explain_tokenizer(const char *cmd, const char *model_dir, const pt_model *model)
{
    if (pt_model_tokenizer(model))
        return;
    size_t n = strlen(model_dir) + sizeof "/tokenizer.json";
    char *path = malloc(n);
    if (!path)
        return;
    snprintf(path, n, "%s/tokenizer.json", model_dir);
    struct stat sb;
    pt_tokenizer *tok = NULL;
    int st = stat(path, &sb) == 0 ? pt_tokenizer_load(&tok, path) : PT_OK;
    if (st)
        fprintf(stderr, "posttrain %s: the model's tokenizer was not loaded: %s: %s\n", cmd,
                pt_status_name(st), pt_last_error());
    pt_tokenizer_free(tok);
    free(path);
}
