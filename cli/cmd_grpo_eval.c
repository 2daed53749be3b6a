/* posttrain grpo --eval: the held-out prompt rows decoded greedily and
 * sampled at the run's temperature, scored by the run's rewards; the mean
 * reward and the accuracy, as a metrics row and a line on stderr. */
#include "cmd_grpo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sampled evaluation's seed: fixed for the run, so every evaluation
 * draws from the same streams (the curves then differ by the model only). */
#define EVAL_SEED_MIX 0x3C6EF372FE94F82Bull

bool grpo_eval_has_accuracy(const grpo_rewards *rw)
{
    for (int k = 0; k < rw->n; k++)
        if (rw->kind[k] != REWARD_LENGTH && rw->weight[k] > 0)
            return true;
    return false;
}

/* Generate for the m rows (prompt ids in `prompts`, lengths in `plens`) and
 * add their scores to s's entries of `kind`.  row_of[i]: item i's row. */
static int score_chunk(grpo_eval_sums *s, int kind, pt_generator *gen, const pt_generate_options *go,
                       const grpo_args *a, const pt_tokenizer *tok, const grpo_row *rows, const int *row_of,
                       const int32_t *prompts, const int32_t *plens, int m, int32_t *tokens, int32_t *ntok,
                       int32_t *ids, int max_seq, pt_reward_item *items, float *vals, double *R, bool *ok)
{
    const int max_new = a->gen.max_new_tokens;
    int st = pt_generate(gen, prompts, plens, m, go, tokens, ntok, NULL, NULL);
    if (st)
        return cli_fail("grpo --eval: generate", st);
    for (int i = 0, off = 0; i < m; i++) {
        int32_t *row_ids = ids + (size_t)i * max_seq;
        memcpy(row_ids, prompts + off, (size_t)plens[i] * sizeof *row_ids);
        memcpy(row_ids + plens[i], tokens + (size_t)i * max_new, (size_t)ntok[i] * sizeof *row_ids);
        off += plens[i];
        items[i] = (pt_reward_item){ .ids = row_ids, .n_ids = plens[i] + ntok[i], .prompt_len = plens[i],
                                     .group = i, .truncated = false };
    }
    /* the built-in reward reads item i's row as rows[row_of[group]] */
    reward_ctx rc = { a, tok, rows, row_of };
    const bool acc = grpo_eval_has_accuracy(&a->rewards);
    for (int i = 0; i < m; i++) {
        R[i] = 0;
        ok[i] = acc;
    }
    for (int k = 0; k < a->rewards.n; k++) {
        pt_reward_batch b = { .size = sizeof b, .n = m, .items = items, .func_index = k,
                              .func_name = a->rewards.name[k] };
        if (grpo_builtin_reward(vals, &b, &rc)) {
            fprintf(stderr, "posttrain grpo: --eval: scoring failed (out of memory)\n");
            return 1;
        }
        for (int i = 0; i < m; i++) {
            R[i] += a->rewards.weight[k] * vals[i];
            s->func[kind][k] += vals[i];
            if (a->rewards.kind[k] != REWARD_LENGTH && a->rewards.weight[k] > 0 && vals[i] < 1)
                ok[i] = false;
        }
    }
    for (int i = 0; i < m; i++) {
        s->n[kind] += 1;
        s->reward[kind] += R[i];
        s->correct[kind] += ok[i];
        s->length[kind] += ntok[i];
    }
    return 0;
}

int grpo_eval_run(grpo_eval_sums *s, pt_generator *gen, int cap, int max_prompt, const grpo_args *a,
                  const pt_tokenizer *tok, const grpo_row *rows, int64_t begin, int64_t count)
{
    memset(s, 0, sizeof *s);
    const int max_new = a->gen.max_new_tokens, max_seq = max_prompt + max_new;
    const size_t C = (size_t)(cap > 0 ? cap : 1);
    int32_t *prompts = malloc(C * (size_t)max_prompt * sizeof *prompts);
    int32_t *plens = malloc(C * sizeof *plens), *ntok = malloc(C * sizeof *ntok);
    int32_t *tokens = malloc(C * (size_t)max_new * sizeof *tokens);
    int32_t *ids = malloc(C * (size_t)max_seq * sizeof *ids);
    int *row_of = malloc(C * sizeof *row_of);
    pt_reward_item *items = malloc(C * sizeof *items);
    float *vals = malloc(C * sizeof *vals);
    double *R = malloc(C * sizeof *R);
    bool *ok = malloc(C * sizeof *ok);
    int rc = 0;
    if (!prompts || !plens || !ntok || !tokens || !ids || !row_of || !items || !vals || !R || !ok) {
        fprintf(stderr, "posttrain grpo: --eval: out of memory\n");
        rc = 1;
    }
    /* kind 0: each row once, greedy; kind 1: each row eval_samples times at
     * the run's sampling settings (not when the run itself is greedy) */
    const int kinds = a->gen.temperature > 0 ? GRPO_EVAL_KINDS : 1;
    for (int kind = 0; !rc && kind < kinds; kind++) {
        const int reps = kind == GRPO_EVAL_GREEDY ? 1 : a->eval_samples;
        pt_generate_options go = a->gen;
        if (kind == GRPO_EVAL_GREEDY) {
            go.temperature = 0;
            go.top_k = 0;
            go.top_p = 1;
        }
        go.seed = a->seed ^ EVAL_SEED_MIX;
        const int64_t total = count * reps;
        for (int64_t i0 = 0; !rc && i0 < total; i0 += (int64_t)C) {
            const int m = (int)(total - i0 < (int64_t)C ? total - i0 : (int64_t)C);
            int off = 0;
            for (int i = 0; i < m; i++) {
                const grpo_row *row = &rows[begin + (i0 + i) / reps];
                row_of[i] = (int)(begin + (i0 + i) / reps);
                memcpy(prompts + off, row->ids, (size_t)row->n_ids * sizeof *prompts);
                plens[i] = row->n_ids;
                off += row->n_ids;
            }
            /* the global index of the chunk's first completion: the same
             * streams whatever the chunking or the number of ranks */
            go.stream_offset = (uint64_t)(begin * reps + i0);
            rc = score_chunk(s, kind, gen, &go, a, tok, rows, row_of, prompts, plens, m, tokens, ntok, ids, max_seq,
                             items, vals, R, ok);
        }
    }
    free(prompts); free(plens); free(ntok); free(tokens); free(ids); free(row_of); free(items); free(vals);
    free(R); free(ok);
    return rc;
}

static void json_num(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ", \"%s\": %.6g", key, v);
    else
        fprintf(f, ", \"%s\": null", key);
}

void grpo_eval_report(FILE *metrics, bool print, const grpo_args *a, int64_t step, const grpo_eval_sums *s)
{
    static const char *const kind_name[GRPO_EVAL_KINDS] = { "greedy", "sampled" };
    const bool acc = grpo_eval_has_accuracy(&a->rewards);
    if (metrics) {
        fprintf(metrics, "{\"step\": %lld", (long long)step);
        for (int kind = 0; kind < GRPO_EVAL_KINDS; kind++) {
            const double n = s->n[kind];
            if (n <= 0)
                continue;
            char key[96];
            snprintf(key, sizeof key, "eval/reward_mean_%s", kind_name[kind]);
            json_num(metrics, key, s->reward[kind] / n);
            if (acc) {
                snprintf(key, sizeof key, "eval/accuracy_%s", kind_name[kind]);
                json_num(metrics, key, s->correct[kind] / n);
            }
            for (int k = 0; k < a->rewards.n; k++) {
                snprintf(key, sizeof key, "eval/rewards/%s/mean_%s", a->rewards.name[k], kind_name[kind]);
                json_num(metrics, key, s->func[kind][k] / n);
            }
            snprintf(key, sizeof key, "eval/mean_length_%s", kind_name[kind]);
            json_num(metrics, key, s->length[kind] / n);
        }
        fprintf(metrics, ", \"eval/prompts\": %.0f, \"eval/samples\": %d}\n", s->n[GRPO_EVAL_GREEDY],
                s->n[GRPO_EVAL_SAMPLED] > 0 ? a->eval_samples : 0);
        fflush(metrics);
    }
    if (!print)
        return;
    fprintf(stderr, "eval step %lld: %.0f prompts greedy reward %.4f", (long long)step, s->n[GRPO_EVAL_GREEDY],
            s->reward[GRPO_EVAL_GREEDY] / s->n[GRPO_EVAL_GREEDY]);
    if (acc)
        fprintf(stderr, " accuracy %.4f", s->correct[GRPO_EVAL_GREEDY] / s->n[GRPO_EVAL_GREEDY]);
    if (s->n[GRPO_EVAL_SAMPLED] > 0) {
        fprintf(stderr, ", sampled (T=%g, %d each) reward %.4f", a->gen.temperature, a->eval_samples,
                s->reward[GRPO_EVAL_SAMPLED] / s->n[GRPO_EVAL_SAMPLED]);
        if (acc)
            fprintf(stderr, " accuracy %.4f", s->correct[GRPO_EVAL_SAMPLED] / s->n[GRPO_EVAL_SAMPLED]);
    }
    fprintf(stderr, "\n");
}
