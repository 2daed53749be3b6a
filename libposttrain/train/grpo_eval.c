/* The held-out evaluation of GRPO (posttrain/grpo_builtin.h): rows
 * completed greedily and sampled at the run's settings, scored by the
 * built-in rewards, and the metrics row of the sums. */
#include "posttrain/grpo_builtin.h"

#include "core/core.h"
#include "core/strbuf.h"
#include "model/generate_struct.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sampled evaluation's seed: fixed for the run, so every evaluation
 * draws from the same streams (the curves then differ by the model only). */
#define EVAL_SEED_MIX 0x3C6EF372FE94F82Bull

int pt_grpo_eval_options_init(pt_grpo_eval_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->samples = 1;
    opts->count = -1;
    return PT_OK;
}

/* The work arrays of one evaluation, for C rows per call. */
typedef struct eval_work {
    int32_t *prompts, *plens, *ntok, *tokens, *ids;
    const char **answers;
    pt_reward_item *items;
    float *vals;
    double *R;
    bool *ok;
    int max_new, max_seq;
} eval_work;

static void work_free(eval_work *w)
{
    free(w->prompts); free(w->plens); free(w->ntok); free(w->tokens); free(w->ids); free(w->answers);
    free(w->items); free(w->vals); free(w->R); free(w->ok);
}

static int work_alloc(eval_work *w, size_t C, int max_prompt, int max_new)
{
    w->max_new = max_new;
    w->max_seq = max_prompt + max_new;
    w->prompts = pt__malloc_array(C * (size_t)max_prompt, sizeof *w->prompts);
    w->plens = pt__malloc_array(C, sizeof *w->plens);
    w->ntok = pt__malloc_array(C, sizeof *w->ntok);
    w->tokens = pt__malloc_array(C * (size_t)max_new, sizeof *w->tokens);
    w->ids = pt__malloc_array(C * (size_t)w->max_seq, sizeof *w->ids);
    w->answers = pt__malloc_array(C, sizeof *w->answers);
    w->items = pt__malloc_array(C, sizeof *w->items);
    w->vals = pt__malloc_array(C, sizeof *w->vals);
    w->R = pt__malloc_array(C, sizeof *w->R);
    w->ok = pt__malloc_array(C, sizeof *w->ok);
    if (!w->prompts || !w->plens || !w->ntok || !w->tokens || !w->ids || !w->answers || !w->items || !w->vals ||
        !w->R || !w->ok)
        return pt__err(PT_ENOMEM, "pt_grpo_evaluate: out of memory");
    return PT_OK;
}

/* Generate for the m prompts in w and add their scores to s's entries of
 * `kind`; item i's answer is w->answers[i]. */
static int score_chunk(pt_grpo_eval_sums *s, int kind, eval_work *w, int m, pt_generator *gen,
                       const pt_generate_options *go, const pt_tokenizer *tok, const pt_builtin_rewards *rw)
{
    int st = pt_generate(gen, w->prompts, w->plens, m, go, w->tokens, w->ntok, NULL, NULL);
    if (st)
        return st;
    for (int i = 0, off = 0; i < m; i++) {
        int32_t *row_ids = w->ids + (size_t)i * w->max_seq;
        memcpy(row_ids, w->prompts + off, (size_t)w->plens[i] * sizeof *row_ids);
        memcpy(row_ids + w->plens[i], w->tokens + (size_t)i * w->max_new, (size_t)w->ntok[i] * sizeof *row_ids);
        off += w->plens[i];
        w->items[i] = (pt_reward_item){ .ids = row_ids, .n_ids = w->plens[i] + w->ntok[i],
                                        .prompt_len = w->plens[i], .group = i, .truncated = false };
    }
    pt_builtin_reward_payload p;
    pt_builtin_reward_payload_init(&p);
    p.rewards = rw;
    p.tokenizer = tok;
    p.answers = w->answers;
    p.n_answers = m;
    const bool acc = pt_builtin_rewards_have_accuracy(rw);
    for (int i = 0; i < m; i++) {
        w->R[i] = 0;
        w->ok[i] = acc;
    }
    for (int k = 0; k < rw->n; k++) {
        pt_reward_batch b = { .size = sizeof b, .n = m, .items = w->items, .func_index = k,
                              .func_name = pt_builtin_reward_name(rw->kinds[k]) };
        if (pt_builtin_reward_fn(w->vals, &b, &p))
            return pt__err_prefix(PT_ECALLBACK, "pt_grpo_evaluate: scoring");
        for (int i = 0; i < m; i++) {
            w->R[i] += rw->weights[k] * w->vals[i];
            s->reward_func[kind][k] += w->vals[i];
            if (rw->kinds[k] != PT_REWARD_LENGTH && rw->weights[k] > 0 && w->vals[i] < 1)
                w->ok[i] = false;
        }
    }
    for (int i = 0; i < m; i++) {
        s->completions[kind] += 1;
        s->reward[kind] += w->R[i];
        s->correct[kind] += w->ok[i];
        s->length[kind] += w->ntok[i];
    }
    return PT_OK;
}

/* Every completion of `kind` (greedy, or o->samples per row sampled) of
 * rows [o->begin, o->begin + o->count), C rows per call. */
static int eval_kind(pt_grpo_eval_sums *s, int kind, eval_work *w, size_t C, pt_generator *gen,
                     const pt_prompt_rows *rows, const pt_tokenizer *tok, const pt_builtin_rewards *rw,
                     const pt_grpo_eval_options *o, const pt_generate_options *sampling)
{
    const int reps = kind == PT_GRPO_EVAL_GREEDY ? 1 : o->samples;
    pt_generate_options go = *sampling;
    if (kind == PT_GRPO_EVAL_GREEDY) {
        go.temperature = 0;
        go.top_k = 0;
        go.top_p = 1;
    }
    go.seed = o->seed ^ EVAL_SEED_MIX;
    const int64_t total = o->count * reps;
    int st = PT_OK;
    for (int64_t i0 = 0; !st && i0 < total; i0 += (int64_t)C) {
        const int m = (int)(total - i0 < (int64_t)C ? total - i0 : (int64_t)C);
        int off = 0;
        for (int i = 0; i < m; i++) {
            pt_prompt_row row;
            pt_prompt_row_init(&row);
            pt_prompt_rows_get(&row, rows, o->begin + (i0 + i) / reps);
            memcpy(w->prompts + off, row.ids, (size_t)row.n_ids * sizeof *w->prompts);
            w->plens[i] = row.n_ids;
            w->answers[i] = row.answer;
            off += row.n_ids;
        }
        /* the global index of the chunk's first completion: the same
         * streams whatever the chunking or the split of the rows */
        go.stream_offset = (uint64_t)(o->begin * reps + i0);
        st = score_chunk(s, kind, w, m, gen, &go, tok, rw);
    }
    return st;
}

/* Options and rows checked: 0, or the status after the message. */
static int check_eval(pt_grpo_eval_options *o, const pt_prompt_rows *rows, const pt_builtin_rewards *rw,
                      const pt_generator *gen)
{
    const char *f = "pt_grpo_evaluate";
    const int64_t n = pt_prompt_rows_size(rows);
    if (rw->n < 0 || rw->n > PT_GRPO_MAX_REWARD_FUNCS)
        return pt__err_arg(f, "rewards", "must be a pt_builtin_rewards (pt_builtin_rewards_init) of 0 .. %d "
                          "rewards", PT_GRPO_MAX_REWARD_FUNCS);
    bool need_answer = false;
    for (int k = 0; k < rw->n; k++) {
        if (!pt_builtin_reward_name(rw->kinds[k]) || !isfinite(rw->weights[k]))
            return pt__err_arg(f, "rewards", "reward %d: kind %d, weight %g", k, rw->kinds[k], rw->weights[k]);
        need_answer |= rw->kinds[k] != PT_REWARD_LENGTH;
    }
    if (o->count < 0)
        o->count = n - o->begin;
    if (o->begin < 0 || o->count < 0 || o->begin > n || o->count > n - o->begin)
        return pt__err_arg(f, "opts", "rows [%lld, %lld + %lld) are not within the %lld rows",
                          (long long)o->begin, (long long)o->begin, (long long)o->count, (long long)n);
    if (o->samples < 1)
        return pt__err_arg(f, "opts->samples", "%d is below 1", o->samples);
    if (o->batch < 0 || o->batch > gen->max_batch)
        return pt__err_arg(f, "opts->batch", "%d is not in 0 .. %d (the generator's room)", o->batch,
                          gen->max_batch);
    if (o->batch == 0)
        o->batch = gen->max_batch;
    for (int64_t i = o->begin; need_answer && i < o->begin + o->count; i++) {
        pt_prompt_row row;
        pt_prompt_row_init(&row);
        pt_prompt_rows_get(&row, rows, i);
        if (!row.answer)
            return pt__err(PT_EFORMAT, "%s: row %lld has no answer (the exact and contains rewards need one)", f,
                          (long long)i);
    }
    return PT_OK;
}

int pt_grpo_evaluate(pt_grpo_eval_sums *sums, pt_generator *gen, const pt_prompt_rows *rows,
                     const pt_tokenizer *tok, const pt_builtin_rewards *rewards, const pt_grpo_eval_options *opts)
{
    PT_CHECK_NULL(sums);
    PT_CHECK_NULL(gen);
    PT_CHECK_NULL(rows);
    PT_CHECK_NULL(tok);
    PT_CHECK_NULL(rewards);
    memset(sums, 0, sizeof *sums);
    pt_grpo_eval_options o;
    pt_generate_options go;
    int st = PT_STRUCT_READ(o, opts, pt_grpo_eval_options_init);
    if (!st)
        st = pt__struct_read(&go, sizeof go, o.sampling, __func__, "pt_generate_options_init");
    if (st)
        return st;
    if (!o.sampling)
        pt_generate_options_init(&go);
    pt_builtin_rewards rw;
    if ((st = PT_STRUCT_READ(rw, rewards, pt_builtin_rewards_init)) || (st = check_eval(&o, rows, &rw, gen)))
        return st;
    eval_work w;
    memset(&w, 0, sizeof w);
    const size_t C = (size_t)o.batch;
    const int max_prompt = pt_prompt_rows_max_prompt_len(rows);
    st = work_alloc(&w, C, max_prompt > 0 ? max_prompt : 1, go.max_new_tokens > 0 ? go.max_new_tokens : 1);
    /* kind 0: each row once, greedy; kind 1: each row `samples` times at the
     * sampling settings (not when they are greedy) */
    const int kinds = go.temperature > 0 ? PT_GRPO_EVAL_KINDS : 1;
    for (int kind = 0; !st && kind < kinds; kind++)
        st = eval_kind(sums, kind, &w, C, gen, rows, tok, &rw, &o, &go);
    work_free(&w);
    return st;
}

int pt_grpo_eval_row(char **json, const pt_grpo_eval_sums *sums, const pt_builtin_rewards *rewards, int samples,
                     int64_t step)
{
    static const char *const kind_name[PT_GRPO_EVAL_KINDS] = { "greedy", "sampled" };
    PT_CHECK_NULL(json);
    *json = NULL;
    PT_CHECK_NULL(sums);
    PT_CHECK_NULL(rewards);
    pt_builtin_rewards rw;
    PT_CHECK_STRUCT_READ(rw, rewards, pt_builtin_rewards_init);
    rewards = &rw;
    PT_CHECK_ARG(rewards->n >= 0 && rewards->n <= PT_GRPO_MAX_REWARD_FUNCS, rewards, "has %d rewards",
                 rewards->n);
    for (int k = 0; k < rewards->n; k++)
        PT_CHECK_ARG(pt_builtin_reward_name(rewards->kinds[k]) != NULL, rewards, "reward %d has kind %d", k,
                     rewards->kinds[k]);
    const bool acc = pt_builtin_rewards_have_accuracy(rewards);
    pt_strbuf b = PT_STRBUF_INIT;
    pt__strbuf_printf(&b, "{\"step\": %lld", (long long)step);
    for (int kind = 0; kind < PT_GRPO_EVAL_KINDS; kind++) {
        const double n = sums->completions[kind];
        if (n <= 0)
            continue;
        char key[96];
        snprintf(key, sizeof key, "eval/reward_mean_%s", kind_name[kind]);
        pt__json_num(&b, key, sums->reward[kind] / n);
        if (acc) {
            snprintf(key, sizeof key, "eval/accuracy_%s", kind_name[kind]);
            pt__json_num(&b, key, sums->correct[kind] / n);
        }
        for (int k = 0; k < rewards->n; k++) {
            snprintf(key, sizeof key, "eval/rewards/%s/mean_%s", pt_builtin_reward_name(rewards->kinds[k]),
                     kind_name[kind]);
            pt__json_num(&b, key, sums->reward_func[kind][k] / n);
        }
        snprintf(key, sizeof key, "eval/mean_length_%s", kind_name[kind]);
        pt__json_num(&b, key, sums->length[kind] / n);
    }
    pt__strbuf_printf(&b, ", \"eval/prompts\": %.0f, \"eval/samples\": %d}", sums->completions[PT_GRPO_EVAL_GREEDY],
                     sums->completions[PT_GRPO_EVAL_SAMPLED] > 0 ? samples : 0);
    *json = pt__strbuf_detach(&b, NULL);
    return *json ? PT_OK : PT_ENOMEM;
}
