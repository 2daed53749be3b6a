/* Option parsing shared by the training commands (sft, grpo). */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cli_optimizer_usage(FILE *f, const char *default_lr)
{
    fprintf(f,
        "optimizer:\n"
        "  --optimizer adamw|sgd   (adamw)       --lr F (%s)\n"
        "  --beta1 F (0.9)  --beta2 F (0.999)  --eps F (1e-8)  --momentum F (sgd, 0.9)\n"
        "  --weight-decay F (0)    --max-grad-norm F (1.0; 0 = off)\n"
        "  --schedule constant|linear|cosine (constant)  --warmup-steps N (0)  --min-lr-ratio F (0)\n",
        default_lr);
}

int cli_optimizer_option(pt_optimizer_options *o, const char *cmd, const char *k, const char *v, int *rc)
{
    long n;
    double x;
    *rc = 0;
    if (!strcmp(k, "--optimizer")) {
        if (!strcmp(v, "adamw"))
            o->type = PT_OPTIMIZER_ADAMW;
        else if (!strcmp(v, "sgd"))
            o->type = PT_OPTIMIZER_SGD;
        else
            *rc = cli_usage_error(cmd, "--optimizer is adamw or sgd, not '%s'", v);
        return 1;
    }
    if (!strcmp(k, "--schedule")) {
        if (!strcmp(v, "constant"))
            o->schedule = PT_SCHEDULE_CONSTANT;
        else if (!strcmp(v, "linear"))
            o->schedule = PT_SCHEDULE_LINEAR;
        else if (!strcmp(v, "cosine"))
            o->schedule = PT_SCHEDULE_COSINE;
        else
            *rc = cli_usage_error(cmd, "--schedule is constant, linear or cosine, not '%s'", v);
        return 1;
    }
    if (!strcmp(k, "--warmup-steps")) {
        if (cli_parse_long(v, 0, 1000000000L, &n))
            *rc = cli_usage_error(cmd, "%s needs an integer in [%ld, %ld], not '%s'", k, 0L, 1000000000L, v);
        else
            o->warmup_steps = n;
        return 1;
    }
    static const char *const reals[] = { "--lr", "--beta1", "--beta2", "--eps", "--momentum",
                                         "--weight-decay", "--max-grad-norm", "--min-lr-ratio" };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        if (strcmp(k, reals[i]))
            continue;
        if (cli_parse_double(v, &x) || !isfinite(x)) {
            *rc = cli_usage_error(cmd, "%s needs a number, not '%s'", k, v);
            return 1;
        }
        double *dst[] = { &o->lr, &o->beta1, &o->beta2, &o->eps, &o->momentum, &o->weight_decay,
                          &o->max_grad_norm, &o->min_lr_ratio };
        *dst[i] = x;
        return 1;
    }
    return 0;
}

int cli_parse_lora_targets(unsigned *out, const char *list)
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
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == n && !strncmp(p, names[i].name, n)) {
                bits |= names[i].bit;
                found = true;
            }
        if (!found || n == 0)
            return -1;
        p += n;
        if (*p == ',')
            p++;
    }
    *out = bits;
    return bits ? 0 : -1;
}

int cli_parse_seed(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || !*s)
        return -1;
    *out = v;
    return 0;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

int cli_add_lora(const char *cmd, pt_model *model, int rank, double alpha, unsigned targets,
                 uint64_t seed)
{
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    lo.rank = rank;
    lo.alpha = alpha > 0 ? alpha : (double)rank;
    if (targets)
        lo.targets = targets;
    lo.seed = seed;
    int st = pt_model_add_lora(model, &lo);
    if (st)
        return cli_fail("LoRA", st);
    fprintf(stderr, "posttrain %s: LoRA rank %d, alpha %g; the base model is frozen\n", cmd, lo.rank,
            lo.alpha);
    return 0;
}
