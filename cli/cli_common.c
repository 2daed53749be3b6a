/* Helpers shared by the commands: time, the splitmix stream, the optimizer
 * and LoRA option tables of the training commands (sft, grpo), their output
 * directory, metrics file and final save. */
#include "cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t cli_splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

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

int cli_add_lora(const char *cmd, pt_model *model, const cli_lora_args *l, uint64_t seed)
{
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = l->rank;
    lo.alpha = l->alpha > 0 ? l->alpha : (double)l->rank;
    if (l->targets)
        lo.targets = l->targets;
    lo.seed = seed;
    int st = pt_model_add_lora(model, &lo);
    if (st)
        return cli_fail("LoRA", st);
    fprintf(stderr, "posttrain %s: LoRA rank %d, alpha %g; the base model is frozen\n", cmd, lo.rank,
            lo.alpha);
    return 0;
}

/* ---- output ------------------------------------------------------------------- */

int cli_make_out_dir(const char *cmd, const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "posttrain %s: cannot create %s: %s\n", cmd, dir, strerror(errno));
        return 1;
    }
    return 0;
}

FILE *cli_open_metrics(const char *cmd, const char *path, const char *out, const char *mode)
{
    char def[4096];
    snprintf(def, sizeof def, "%s/metrics.jsonl", out);
    const char *file = path ? path : def;
    FILE *f = fopen(file, mode);
    if (!f)
        fprintf(stderr, "posttrain %s: cannot write %s: %s\n", cmd, file, strerror(errno));
    return f;
}

int cli_save_trained(const char *cmd, pt_model *model, const char *out, const char *base_name,
                     long long steps)
{
    int st;
    if (pt_model_has_lora(model)) {
        char adir[4096];
        snprintf(adir, sizeof adir, "%s/adapter", out);
        if ((st = pt_lora_save_peft(model, adir, base_name)))
            return cli_fail("saving the adapter", st);
        fprintf(stderr, "posttrain %s: saved the PEFT adapter to %s\n", cmd, adir);
        if ((st = pt_model_merge_lora(model)))
            return cli_fail("merging the adapter", st);
    }
    pt_model_save_options so;
    pt_model_save_options_init(&so);
    if ((st = pt_model_save_dir(model, out, &so)))
        return cli_fail("saving the model", st);
    fprintf(stderr, "posttrain %s: saved the model to %s after %lld steps\n", cmd, out, steps);
    return 0;
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
