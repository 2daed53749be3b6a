/* posttrain demo: the task (addition written as text, the answer least
 * significant digit first), the scripted teacher whose traces are the SFT
 * data, the held-out problems and their evaluation through pt_generate. */
#include "cmd_demo.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --save-traces: the traces go to PATH.tmp-PID, renamed to PATH once all are
 * written; on failure it is removed and PATH left as it was. */
typedef struct trace_file {
    FILE *f;
    char tmp[PATH_MAX];
} trace_file;

static int traces_open(trace_file *t, const char *path)
{
    if ((size_t)snprintf(t->tmp, sizeof t->tmp, "%s.tmp-%ld", path, (long)getpid()) >= sizeof t->tmp) {
        fprintf(stderr, "posttrain demo: cannot write %s: the path is too long\n", path);
        return 1;
    }
    if (!(t->f = fopen(t->tmp, "w"))) {
        fprintf(stderr, "posttrain demo: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* Close, then rename over path when ok (else remove); 0, or 1 after the message. */
static int traces_close(trace_file *t, const char *path, bool ok)
{
    if (!t->f)
        return !ok;
    bool bad = ferror(t->f) != 0;
    int err = errno;
    if (fclose(t->f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    t->f = NULL;
    if (ok && !bad && rename(t->tmp, path) != 0) {
        bad = true;
        err = errno;
    }
    if (ok && bad)
        fprintf(stderr, "posttrain demo: cannot write %s: %s\n", path, strerror(err ? err : EIO));
    if (!ok || bad)
        unlink(t->tmp);
    return !ok || bad;
}

/* A trace as a {"prompt", "completion"} row (digits, '+' and '=': nothing to escape). */
static int write_row(const char *prompt, const char *completion, void *f)
{
    fprintf(f, "{\"prompt\": \"%s\", \"completion\": \"%s\"}\n", prompt, completion);
    return 0;
}

int demo_build_data(demo_run *r)
{
    const demo_opts *o = &r->o;
    pt_dataset_options dopt;
    pt_dataset_options_init(&dopt);
    dopt.max_length = 64;
    dopt.batch_size = o->batch;
    dopt.seed = o->seed;
    int st;
    if ((st = pt_dataset_create(&r->data, &dopt)))
        return cli_fail("dataset", st);
    /* The teacher's traces: problems drawn from the training pairs, each
     * answered right, or with the carries forgotten with probability slip. */
    uint64_t rs = o->seed * 7919 + 17;
    int64_t wrong = 0;
    trace_file tf = { 0 };
    if (o->save_traces && traces_open(&tf, o->save_traces))
        return 1;
    if ((st = pt_addition_add_traces(r->data, &wrong, r->tok, o->digits, o->slip, o->traces, &rs,
                                     tf.f ? write_row : NULL, tf.f))) {
        cli_fail("teacher", st);
        return traces_close(&tf, o->save_traces, false);
    }
    if (traces_close(&tf, o->save_traces, true))
        return 1;
    r->n_train = o->traces;
    r->teacher_wrong = o->traces ? (double)wrong / o->traces : 0;
    /* The held-out problems: the same for every seed (a fixed stream), distinct. */
    size_t n = 0;
    if (!(r->eval_pairs = calloc((size_t)o->eval_n, sizeof *r->eval_pairs)))
        return cli_fail("data", PT_ENOMEM);
    if ((st = pt_addition_held_out_pairs(r->eval_pairs[0], &n, (size_t)o->eval_n, o->digits)))
        return cli_fail("data", st);
    r->n_eval = (int)n;
    return 0;
}

/* The first `show` problems with a carry and the answers given (tokens:
 * n_eval rows of M, then their lengths) into s->shown. */
static void show_answers(demo_score *s, const demo_run *r, const int32_t *tokens, int show)
{
    const int M = r->alen + 1;
    const int32_t *ntok = tokens + (size_t)r->n_eval * M;
    size_t used = 0;
    for (int i = 0, shown = 0; i < r->n_eval && shown < show; i++) {
        char prompt[64], right[32], slip[32], *text = NULL;
        int64_t a = r->eval_pairs[i][0], b = r->eval_pairs[i][1];
        demo_problem(prompt, right, r->o.digits, a, b, false);
        demo_problem(prompt, slip, r->o.digits, a, b, true);
        if (!strcmp(right, slip))
            continue;
        bool ok, sl;
        size_t len;
        const int32_t *t = tokens + (size_t)i * M;
        (void)pt_addition_score(&ok, &sl, r->tok, t, (size_t)ntok[i], r->o.digits, a, b);
        if (pt_tokenizer_decode(&text, &len, r->tok, t, (size_t)ntok[i], PT_TOK_SKIP_SPECIAL) == PT_OK) {
            int w = snprintf(s->shown + used, sizeof s->shown - used, "    %s%-*s %s%s%s\n", prompt, r->alen, text,
                             ok ? "right" : sl ? "wrong: the carries forgotten" : "wrong", ok ? "" : ", right: ",
                             ok ? "" : right);
            if (w > 0 && (size_t)w < sizeof s->shown - used)
                used += (size_t)w;
        }
        pt_free(text);
        shown++;
    }
}

int demo_evaluate(demo_score *s, demo_run *r, double temperature, uint64_t seed, int show)
{
    /* with `show`, the completions and their lengths */
    int32_t *tokens = show ? malloc((size_t)r->n_eval * (size_t)(r->alen + 2) * sizeof *tokens) : NULL;
    if (show && !tokens)
        return PT_ENOMEM;
    pt_addition_eval_options eo;
    pt_addition_eval_options_init(&eo);
    eo.digits = r->o.digits;
    eo.temperature = temperature;
    eo.seed = seed;
    int64_t correct, slipped;
    int32_t *ntok = tokens ? tokens + (size_t)r->n_eval * (size_t)(r->alen + 1) : NULL;
    int st = pt_addition_evaluate(&correct, &slipped, tokens, ntok, r->gen, r->tok, r->eval_pairs[0],
                                  (size_t)r->n_eval, &eo);
    s->shown[0] = '\0';
    if (!st && show)
        show_answers(s, r, tokens, show);
    free(tokens);
    s->correct = r->n_eval ? (double)correct / r->n_eval : 0;
    s->slipped = r->n_eval ? (double)slipped / r->n_eval : 0;
    return st;
}
