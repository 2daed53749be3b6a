/* The demo's pieces of the addition task (posttrain/addition.h): its tiny
 * model's shape, the teacher's traces written to a file, the answers shown,
 * and its GRPO loop, so the CLI and a Python host run the same demo. */
#include "core/core.h"
#include "io/fileio.h"
#include "posttrain/addition.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pt_addition_model_config(pt_model_config *cfg, const pt_tokenizer *tok, int hidden, int layers, int heads,
                             bool tied)
{
    PT_CHECK_NULL(cfg);
    PT_CHECK_NULL(tok);
    PT_CHECK_ARG(heads >= 1 && hidden >= heads && hidden % heads == 0, heads,
                 "must divide hidden (got %d heads, hidden %d)", heads, hidden);
    PT_CHECK_ARG(layers >= 1, layers, "must be >= 1 (got %d)", layers);
    pt_model_config_init(cfg);
    cfg->arch = PT_ARCH_LLAMA;
    cfg->vocab_size = pt_tokenizer_vocab_size(tok);
    cfg->hidden_size = hidden;
    cfg->num_hidden_layers = layers;
    cfg->num_attention_heads = heads;
    cfg->num_key_value_heads = heads;
    cfg->head_dim = hidden / heads;
    cfg->intermediate_size = hidden * 3;
    cfg->max_position_embeddings = 64;
    cfg->rms_norm_eps = 1e-5;
    cfg->tie_word_embeddings = tied;
    cfg->initializer_range = 0.02;
    cfg->bos_token_id = pt_tokenizer_bos_id(tok);
    cfg->eos_token_id = pt_tokenizer_eos_id(tok);
    return PT_OK;
}

/* A trace as a {"prompt", "completion"} row (digits, '+' and '=': nothing
 * to escape) appended to the atomic file at payload. */
static int write_row(const char *prompt, const char *completion, void *payload)
{
    char line[3 * PT_ADDITION_MAX_DIGITS + 48];
    int n = snprintf(line, sizeof line, "{\"prompt\": \"%s\", \"completion\": \"%s\"}\n", prompt, completion);
    return pt__atomic_write(payload, line, (size_t)n);
}

/* The file's failure as "cannot write PATH: <strerror>" (err: the errno the
 * io call left, 0: EIO). */
static int write_failed(int st, int err, const char *path)
{
    return pt__err(st == PT_ENOSPC ? PT_ENOSPC : PT_EIO, "cannot write %s: %s", path, strerror(err ? err : EIO));
}

int pt_addition_save_traces(pt_dataset *data, int64_t *wrong, const pt_tokenizer *tok, int digits, double slip,
                            int64_t n, uint64_t *rng, const char *path)
{
    if (!path)
        return pt_addition_add_traces(data, wrong, tok, digits, slip, n, rng, NULL, NULL);
    if (wrong)
        *wrong = 0;
    PT_CHECK_ARG(*path, path, "is empty");
    pt_atomic_file af;
    errno = 0;
    int st = pt__atomic_open(&af, path);
    if (st)
        return write_failed(st, errno, path);
    if ((st = pt_addition_add_traces(data, wrong, tok, digits, slip, n, rng, write_row, &af))) {
        pt__atomic_abort(&af);
        return st;
    }
    errno = 0;
    if ((st = pt__atomic_commit(&af)))
        return write_failed(st, errno, path);
    return PT_OK;
}

int pt_addition_show_answers(char *buf, size_t cap, const pt_tokenizer *tok, const int32_t *tokens,
                             const int32_t *n_tokens, const int64_t *pairs, size_t n, int digits, int show)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_ARG(cap >= 1, cap, "must be >= 1");
    buf[0] = '\0';
    PT_CHECK_NULL(tok);
    PT_CHECK_ARG(n == 0 || (tokens && n_tokens && pairs), tokens, "n_tokens and pairs must be set for %zu pairs", n);
    size_t used = 0;
    for (size_t i = 0; i < n && show > 0; i++) {
        char prompt[2 * PT_ADDITION_MAX_DIGITS + 3], right[PT_ADDITION_MAX_DIGITS + 2], slip[sizeof right];
        const int64_t a = pairs[2 * i], b = pairs[2 * i + 1];
        int st = pt_addition_problem(prompt, sizeof prompt, right, sizeof right, digits, a, b, false);
        if (st || (st = pt_addition_problem(prompt, sizeof prompt, slip, sizeof slip, digits, a, b, true)))
            return st;
        if (!strcmp(right, slip))
            continue;
        bool ok, sl;
        char *text = NULL;
        size_t len;
        const int32_t *t = tokens + i * (size_t)(digits + 2);
        (void)pt_addition_score(&ok, &sl, tok, t, (size_t)n_tokens[i], digits, a, b);
        if (pt_tokenizer_decode(&text, &len, tok, t, (size_t)n_tokens[i], PT_TOK_SKIP_SPECIAL) == PT_OK) {
            int w = snprintf(buf + used, cap - used, "    %s%-*s %s%s%s\n", prompt, digits + 1, text,
                             ok ? "right" : sl ? "wrong: the carries forgotten" : "wrong", ok ? "" : ", right: ",
                             ok ? "" : right);
            if (w > 0 && (size_t)w < cap - used)
                used += (size_t)w;
            buf[used] = '\0';
        }
        pt_free(text);
        show--;
    }
    return PT_OK;
}

int pt_addition_grpo_options_init(pt_addition_grpo_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->digits = 2;
    opts->prompts = 32;
    opts->group = 4;
    opts->lr = 3e-4;
    opts->temperature = 1;
    opts->loss_type = PT_GRPO_LOSS_DAPO;
    opts->scale_rewards = PT_GRPO_SCALE_GROUP;
    opts->seed = 1;
    return PT_OK;
}

struct pt_addition_grpo {
    pt_addition_grpo_options o;
    const pt_tokenizer *tok;
    pt_rollout_buffer *buf;
    pt_optimizer *opt;
    pt_model *ref;
    pt_context *ref_ctx;
    pt_grpo_options go;
    pt_rollout_logprobs_options lo;
    pt_generate_options gen;
    uint64_t rng;
    int64_t steps;
};

void pt_addition_grpo_free(pt_addition_grpo *g)
{
    if (!g)
        return;
    pt_context_free(g->ref_ctx);
    pt_model_free(g->ref);
    pt_optimizer_free(g->opt);
    pt_rollout_buffer_free(g->buf);
    free(g);
}

/* The step's options: GRPO, the reference's log-probs and sampling (M: the
 * most tokens of a completion: the answer and EOS). */
static void grpo_step_options(pt_addition_grpo *g, int M)
{
    const pt_addition_grpo_options *o = &g->o;
    pt_grpo_options_init(&g->go);
    g->go.loss_type = o->loss_type;
    if (g->go.loss_type == PT_GRPO_LOSS_VESPO) /* TRL's rule: vespo takes a per-token correction */
        g->go.importance_sampling_correction = PT_GRPO_IS_TOKEN_MASK;
    g->go.scale_rewards = o->scale_rewards;
    g->go.beta = o->beta;
    g->go.max_completion_length = M;
    g->go.drop_zero_std_groups = o->drop_zero_std;
    g->go.temperature = o->temperature; /* the step scores at the sampling temperature */
    pt_rollout_logprobs_options_init(&g->lo);
    g->lo.temperature = o->temperature;
    pt_generate_options_init(&g->gen);
    g->gen.max_new_tokens = M;
    g->gen.temperature = (float)o->temperature;
}

int pt_addition_grpo_create(pt_addition_grpo **out, pt_model *model, const pt_tokenizer *tok,
                            const pt_addition_grpo_options *opts)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    PT_CHECK_NULL(model);
    PT_CHECK_NULL(tok);
    pt_addition_grpo_options o;
    PT_CHECK_STRUCT_READ(o, opts, pt_addition_grpo_options_init);
    PT_CHECK_ARG(o.digits >= 1 && o.digits <= PT_ADDITION_MAX_DIGITS, opts->digits, "must be in [1, %d] (got %d)",
                 PT_ADDITION_MAX_DIGITS, o.digits);
    PT_CHECK_ARG(o.prompts >= 1 && o.prompts <= PT_ADDITION_GRPO_MAX_PROMPTS, opts->prompts,
                 "must be in [1, %d] (got %d)", PT_ADDITION_GRPO_MAX_PROMPTS, o.prompts);
    PT_CHECK_ARG(o.group >= 2, opts->group, "must be >= 2 (got %d)", o.group);
    PT_CHECK_ARG(o.beta >= 0, opts->beta, "must be >= 0 (got %g)", o.beta);
    int32_t ids[2 * PT_ADDITION_MAX_DIGITS + 11];
    size_t plen;
    int st = pt_addition_prompt_ids(ids, sizeof ids / sizeof ids[0], &plen, tok, o.digits, 0, 0);
    if (st)
        return st;
    pt_addition_grpo *g = pt__calloc(1, sizeof *g);
    if (!g)
        return pt__err(PT_ENOMEM, "%s: no memory", __func__);
    g->o = o;
    g->tok = tok;
    g->rng = o.seed * 104729 + 3;
    const int M = o.digits + 2;
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = o.lr;
    if ((st = pt_rollout_buffer_create(&g->buf, NULL)) || (st = pt_optimizer_create(&g->opt, model, &oo)))
        goto fail;
    /* the reference: a frozen copy of the model (with bf16_reference frozen in BF16) */
    if (o.beta > 0 && ((st = pt_model_clone(&g->ref, model)) ||
                       (o.bf16_reference && (st = pt_model_set_bf16(g->ref, PT_BF16_FROZEN))) ||
                       (st = pt_context_create(&g->ref_ctx, g->ref, o.prompts * o.group, (int)plen + M))))
        goto fail;
    grpo_step_options(g, M);
    *out = g;
    return PT_OK;
fail:
    pt_addition_grpo_free(g);
    return st;
}

int pt_addition_grpo_step(pt_grpo_stats *stats, pt_addition_grpo *g, pt_context *ctx, pt_generator *gen)
{
    PT_CHECK_NULL(stats);
    PT_CHECK_NULL(g);
    PT_CHECK_NULL(ctx);
    PT_CHECK_NULL(gen);
    const pt_addition_grpo_options *o = &g->o;
    int64_t pairs[2 * PT_ADDITION_GRPO_MAX_PROMPTS];
    int st = PT_OK;
    for (int p = 0; p < o->prompts && !st; p++)
        st = pt_addition_train_pair(&pairs[2 * p], &pairs[2 * p + 1], o->digits, &g->rng);
    g->gen.seed = o->seed * 1000003u + (uint64_t)(g->steps + 1);
    pt_grpo_stats_init(stats);
    if (st || (st = pt_addition_rollouts(g->buf, gen, g->tok, pairs, o->prompts, o->group, o->digits, &g->gen)) ||
        (g->ref_ctx &&
         (st = pt_rollout_buffer_compute_logprobs_with(g->buf, g->ref_ctx, PT_ROLLOUT_REF, &g->lo))) ||
        (st = pt_grpo_step(stats, g->opt, ctx, g->buf, &g->go))) {
        pt_rollout_buffer_clear(g->buf);
        return st;
    }
    pt_rollout_buffer_clear(g->buf);
    g->steps++;
    return PT_OK;
}

int64_t pt_addition_grpo_steps(const pt_addition_grpo *g)
{
    return g ? g->steps : 0;
}
