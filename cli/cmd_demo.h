/* posttrain demo: shared between cmd_demo.c (options, the model, SFT, the
 * run), cmd_demo_task.c (the task, the teacher, the data, evaluation) and
 * cmd_demo_grpo.c (GRPO with the verifiable reward). */
#ifndef PT_CMD_DEMO_H
#define PT_CMD_DEMO_H

#include "cli.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct demo_opts {
    /* task and model */
    int digits, hidden, layers, heads, tied, threads;
    uint64_t seed;
    /* the teacher and SFT */
    double slip;        /* probability that the teacher forgets the carries on a trace */
    int traces, steps, batch;
    double lr;
    const char *save_traces; /* the traces as JSONL, or NULL */
    /* GRPO */
    int grpo_steps, prompts, group, loss_type, scale, eval_every;
    bool drop_zero_std, bf16;
    double grpo_lr, beta, temperature;
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

/* ---- cmd_demo_task.c ---- */

/* "a+b=" and the answer (the slip with slip) into prompt[64] and answer[32]
 * (pt_addition_problem: the operands are in range). */
static inline void demo_problem(char *prompt, char *answer, int digits, int64_t a, int64_t b, bool slip)
{
    (void)pt_addition_problem(prompt, 64, answer, 32, digits, a, b, slip);
}
/* The SFT traces of the teacher, and the held-out problems. */
int demo_build_data(demo_run *r);
/* Held-out accuracy, greedy (temperature 0) or sampled (seeded); the
 * first `show` problems with a carry are written into s->shown. */
int demo_evaluate(demo_score *s, demo_run *r, double temperature, uint64_t seed, int show);

/* ---- cmd_demo_grpo.c ---- */

int demo_grpo(demo_run *r);

#endif
