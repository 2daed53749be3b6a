/* The built-in addition task of posttrain demo (posttrain/addition.h). */
#include "core/core.h"
#include "posttrain/addition.h"
#include "posttrain/grpo_run.h"
#include "model/generate_struct.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t range_of(int digits)
{
    int64_t n = 1;
    for (int i = 0; i < digits; i++)
        n *= 10;
    return n;
}

#define CHECK_DIGITS(digits)                                                                       \
    PT_CHECK_ARG((digits) >= 1 && (digits) <= PT_ADDITION_MAX_DIGITS, digits, "must be in [1, %d] (got %d)", \
                 PT_ADDITION_MAX_DIGITS, (digits))

int pt_addition_problem(char *prompt, size_t prompt_cap, char *answer, size_t answer_cap, int digits,
                        int64_t a, int64_t b, bool slip)
{
    PT_CHECK_NULL(prompt);
    PT_CHECK_NULL(answer);
    CHECK_DIGITS(digits);
    const int64_t range = range_of(digits);
    PT_CHECK_ARG(a >= 0 && a < range, a, "must be in [0, %" PRId64 ") (got %" PRId64 ")", range, a);
    PT_CHECK_ARG(b >= 0 && b < range, b, "must be in [0, %" PRId64 ") (got %" PRId64 ")", range, b);
    PT_CHECK_ARG(prompt_cap >= (size_t)(2 * digits + 3), prompt_cap, "must be at least %d (got %zu)",
                 2 * digits + 3, prompt_cap);
    PT_CHECK_ARG(answer_cap >= (size_t)(digits + 2), answer_cap, "must be at least %d (got %zu)", digits + 2,
                 answer_cap);
    snprintf(prompt, prompt_cap, "%0*" PRId64 "+%0*" PRId64 "=", digits, a, digits, b);
    /* column i (from the right) of a + b, with or without the carries */
    int carry = 0;
    for (int i = 0; i <= digits; i++) {
        int s = (int)(a % 10) + (int)(b % 10) + carry;
        answer[i] = (char)('0' + s % 10);
        carry = slip ? 0 : s / 10;
        a /= 10;
        b /= 10;
    }
    answer[digits + 1] = '\0';
    return PT_OK;
}

bool pt_addition_held_out(int64_t a, int64_t b)
{
    uint64_t x = (uint64_t)a * 1000003u + (uint64_t)b;
    return (pt__splitmix64(&x) & 7) == 0;
}

int pt_addition_train_pair(int64_t *a, int64_t *b, int digits, uint64_t *rng)
{
    PT_CHECK_NULL(a);
    PT_CHECK_NULL(b);
    PT_CHECK_NULL(rng);
    CHECK_DIGITS(digits);
    const uint64_t range = (uint64_t)range_of(digits);
    do {
        *a = (int64_t)(pt__splitmix64(rng) % range);
        *b = (int64_t)(pt__splitmix64(rng) % range);
    } while (pt_addition_held_out(*a, *b));
    return PT_OK;
}

int pt_addition_teacher_pair(int64_t *a, int64_t *b, bool *slipped, int digits, double slip, uint64_t *rng)
{
    PT_CHECK_NULL(slipped);
    PT_CHECK_ARG(slip >= 0 && slip <= 1, slip, "must be in [0, 1] (got %g)", slip);
    int st = pt_addition_train_pair(a, b, digits, rng);
    if (st)
        return st;
    *slipped = (double)(pt__splitmix64(rng) >> 11) * 0x1.0p-53 < slip;
    return PT_OK;
}

/* Insert key into an open-addressing set of cap slots; false if present. */
static bool seen_insert(uint64_t *set, size_t cap, uint64_t key)
{
    uint64_t h = key + 1, x = key;
    for (size_t i = pt__splitmix64(&x) % cap;; i = (i + 1) % cap) {
        if (set[i] == h)
            return false;
        if (!set[i]) {
            set[i] = h;
            return true;
        }
    }
}

int pt_addition_held_out_pairs(int64_t *pairs, size_t *n_out, size_t n, int digits)
{
    PT_CHECK_NULL(n_out);
    *n_out = 0;
    PT_CHECK_NULL(pairs);
    CHECK_DIGITS(digits);
    PT_CHECK_COUNT(n, (size_t)1 << 28, "pairs");
    const uint64_t range = (uint64_t)range_of(digits);
    size_t cap = 4 * n + 1, got = 0;
    uint64_t *set = calloc(cap, sizeof *set);
    if (!set)
        return pt__err(PT_ENOMEM, "%s: no memory for %zu pairs", __func__, n);
    uint64_t es = 0x5eed0fdeadbeefULL;
    for (uint64_t tries = 0; got < n && tries < 200 * (uint64_t)n; tries++) {
        uint64_t a = pt__splitmix64(&es) % range, b = pt__splitmix64(&es) % range;
        if (!pt_addition_held_out((int64_t)a, (int64_t)b) || !seen_insert(set, cap, a * range + b))
            continue;
        pairs[2 * got] = (int64_t)a;
        pairs[2 * got + 1] = (int64_t)b;
        got++;
    }
    free(set);
    *n_out = got;
    return PT_OK;
}

/* Whether tokens are `answer` and EOS. */
static int is_answer(bool *yes, const pt_tokenizer *tok, const int32_t *tokens, size_t n, const char *answer)
{
    *yes = false;
    if (n < 2 || tokens[n - 1] != pt_tokenizer_eos_id(tok))
        return PT_OK;
    char *text;
    size_t len;
    int st = pt_tokenizer_decode(&text, &len, tok, tokens, n - 1, 0);
    if (st)
        return st;
    *yes = len == strlen(answer) && memcmp(text, answer, len) == 0;
    pt_free(text);
    return PT_OK;
}

int pt_addition_score(bool *correct, bool *slipped, const pt_tokenizer *tok, const int32_t *tokens, size_t n,
                      int digits, int64_t a, int64_t b)
{
    PT_CHECK_NULL(correct);
    *correct = false;
    if (slipped)
        *slipped = false;
    PT_CHECK_NULL(tok);
    PT_CHECK_ARG(tokens || n == 0, tokens, "is NULL with n = %zu", n);
    PT_CHECK_COUNT(n, PT_MAX_TOKENS, "tokens");
    char prompt[2 * PT_ADDITION_MAX_DIGITS + 3], right[PT_ADDITION_MAX_DIGITS + 2], slip[PT_ADDITION_MAX_DIGITS + 2];
    int st = pt_addition_problem(prompt, sizeof prompt, right, sizeof right, digits, a, b, false);
    if (st || (st = pt_addition_problem(prompt, sizeof prompt, slip, sizeof slip, digits, a, b, true)) ||
        (st = is_answer(correct, tok, tokens, n, right)))
        return st;
    if (slipped && strcmp(right, slip) != 0)
        st = is_answer(slipped, tok, tokens, n, slip);
    return st;
}

int pt_addition_prompt_ids(int32_t *ids, size_t cap, size_t *n, const pt_tokenizer *tok, int digits, int64_t a,
                           int64_t b)
{
    PT_CHECK_NULL(n);
    *n = 0;
    PT_CHECK_NULL(ids);
    PT_CHECK_NULL(tok);
    char prompt[2 * PT_ADDITION_MAX_DIGITS + 3], answer[PT_ADDITION_MAX_DIGITS + 2];
    int32_t *p;
    size_t len;
    int st = pt_addition_problem(prompt, sizeof prompt, answer, sizeof answer, digits, a, b, false);
    if (st || (st = pt_tokenizer_encode(&p, &len, tok, prompt, strlen(prompt), PT_TOK_ADD_SPECIAL)))
        return st;
    if (len > cap)
        st = pt__err(PT_ERANGE, "%s: the prompt of %s is %zu ids, more than cap = %zu", __func__, prompt, len, cap);
    else
        memcpy(ids, p, len * sizeof *ids);
    pt_free(p);
    if (!st)
        *n = len;
    return st;
}

int pt_addition_eval_options_init(pt_addition_eval_options *opts)
{
    PT_STRUCT_INIT_ZERO(opts);
    opts->digits = 2;
    return PT_OK;
}

/* Ids of a prompt at most (its bytes and a few special tokens). */
#define PROMPT_CAP(digits) ((size_t)(2 * (digits) + 3 + 8))

/* One pt_generate call: pairs [first, first + rows) completed into
 * tokens/ntok (rows of M), prompts packed back to back into ids. */
static int eval_batch(int32_t *tokens, int32_t *ntok, int32_t *ids, int32_t *lens, pt_generator *gen,
                      const pt_tokenizer *tok, const int64_t *pairs, int64_t first, int rows,
                      pt_generate_options *go, int digits)
{
    size_t used = 0;
    for (int i = 0; i < rows; i++) {
        size_t len;
        int st = pt_addition_prompt_ids(ids + used, PROMPT_CAP(digits), &len, tok, digits, pairs[2 * (first + i)],
                                        pairs[2 * (first + i) + 1]);
        if (st)
            return st;
        lens[i] = (int32_t)len;
        used += len;
    }
    go->stream_offset = (uint64_t)first; /* each pair draws from its own stream, whatever the batch */
    return pt_generate(gen, ids, lens, rows, go, tokens, ntok, NULL, NULL);
}

int pt_addition_evaluate(int64_t *correct, int64_t *slipped, int32_t *tokens, int32_t *n_tokens, pt_generator *gen,
                         const pt_tokenizer *tok, const int64_t *pairs, size_t n,
                         const pt_addition_eval_options *opts)
{
    PT_CHECK_NULL(correct);
    *correct = 0;
    if (slipped)
        *slipped = 0;
    PT_CHECK_NULL(gen);
    PT_CHECK_NULL(tok);
    PT_CHECK_ARG(pairs || n == 0, pairs, "is NULL with n = %zu", n);
    PT_CHECK_ARG(!tokens == !n_tokens, tokens, "and n_tokens must be both NULL or both given");
    PT_CHECK_COUNT(n, (size_t)1 << 28, "pairs");
    pt_addition_eval_options o;
    int st = PT_STRUCT_READ(o, opts, pt_addition_eval_options_init);
    if (st)
        return st;
    CHECK_DIGITS(o.digits);
    PT_CHECK_ARG(o.batch >= 0 && o.batch <= gen->max_batch, opts->batch, "is not in 0 .. %d (got %d)",
                 gen->max_batch, o.batch);
    PT_CHECK_ARG(o.temperature >= 0, opts->temperature, "must be >= 0 (got %g)", o.temperature);
    const int B = o.batch ? o.batch : gen->max_batch, M = o.digits + 2;
    /* one block: the prompts, their lengths, the completions and their lengths */
    int32_t *ids = malloc((size_t)B * (PROMPT_CAP(o.digits) + 2 + (size_t)M) * sizeof *ids);
    if (!ids)
        return pt__err(PT_ENOMEM, "%s: no memory for %d rows", __func__, B);
    int32_t *lens = ids + (size_t)B * PROMPT_CAP(o.digits), *ntok = lens + B, *tok_rows = ntok + B;
    pt_generate_options go;
    pt_generate_options_init(&go);
    go.max_new_tokens = M;
    go.temperature = (float)o.temperature;
    go.seed = o.seed;
    int64_t right = 0, slips = 0;
    for (int64_t first = 0; first < (int64_t)n && !st; first += B) {
        const int rows = (int64_t)n - first < B ? (int)((int64_t)n - first) : B;
        int32_t *t = tokens ? tokens + (size_t)first * M : tok_rows, *nt = tokens ? n_tokens + first : ntok;
        if ((st = eval_batch(t, nt, ids, lens, gen, tok, pairs, first, rows, &go, o.digits)))
            break;
        for (int i = 0; i < rows && !st; i++) {
            bool ok, sl;
            st = pt_addition_score(&ok, &sl, tok, t + (size_t)i * M, (size_t)nt[i], o.digits,
                                   pairs[2 * (first + i)], pairs[2 * (first + i) + 1]);
            right += ok;
            slips += sl;
        }
    }
    free(ids);
    if (!st) {
        *correct = right;
        if (slipped)
            *slipped = slips;
    }
    return st;
}

/* One trace: the prompt's ids, the answer's and EOS into data. */
static int add_trace(pt_dataset *data, const pt_tokenizer *tok, int digits, int64_t a, int64_t b,
                     const char *answer)
{
    int32_t ids[PROMPT_CAP(PT_ADDITION_MAX_DIGITS) + PT_ADDITION_MAX_DIGITS + 2];
    uint8_t mask[sizeof ids / sizeof ids[0]];
    size_t np, na;
    int32_t *ans;
    int st = pt_addition_prompt_ids(ids, PROMPT_CAP(digits), &np, tok, digits, a, b);
    if (st || (st = pt_tokenizer_encode(&ans, &na, tok, answer, strlen(answer), 0)))
        return st;
    if (na > (size_t)digits + 1)
        st = pt__err(PT_ERANGE, "%s: the answer %s is %zu ids", "pt_addition_add_traces", answer, na);
    else {
        memcpy(ids + np, ans, na * sizeof *ids);
        ids[np + na] = pt_tokenizer_eos_id(tok);
        for (size_t i = 0; i <= np + na; i++)
            mask[i] = i >= np;
        st = pt_dataset_add(data, ids, mask, np + na + 1);
    }
    pt_free(ans);
    return st;
}

int pt_addition_add_traces(pt_dataset *data, int64_t *wrong, const pt_tokenizer *tok, int digits, double slip,
                           int64_t n, uint64_t *rng, pt_addition_trace_fn row, void *payload)
{
    if (wrong)
        *wrong = 0;
    PT_CHECK_NULL(data);
    PT_CHECK_NULL(tok);
    PT_CHECK_NULL(rng);
    PT_CHECK_ARG(n >= 0, n, "must be >= 0 (got %lld)", (long long)n);
    int64_t w = 0;
    int st = PT_OK;
    for (int64_t i = 0; i < n && !st; i++) {
        int64_t a, b;
        bool slipped;
        char prompt[2 * PT_ADDITION_MAX_DIGITS + 3], right[PT_ADDITION_MAX_DIGITS + 2],
            given[PT_ADDITION_MAX_DIGITS + 2];
        if ((st = pt_addition_teacher_pair(&a, &b, &slipped, digits, slip, rng)) ||
            (st = pt_addition_problem(prompt, sizeof prompt, right, sizeof right, digits, a, b, false)) ||
            (st = pt_addition_problem(prompt, sizeof prompt, given, sizeof given, digits, a, b, slipped)) ||
            (st = add_trace(data, tok, digits, a, b, given)))
            break;
        w += strcmp(right, given) != 0;
        if (row && row(prompt, given, payload))
            st = pt__err(PT_ECALLBACK, "%s: the row callback failed at trace %lld", __func__, (long long)i);
    }
    if (wrong)
        *wrong = w;
    return st;
}

int pt_addition_rollouts(pt_rollout_buffer *buf, pt_generator *gen, const pt_tokenizer *tok, const int64_t *pairs,
                         int n, int group, int digits, const pt_generate_options *opts)
{
    PT_CHECK_NULL(buf);
    PT_CHECK_NULL(gen);
    PT_CHECK_NULL(tok);
    PT_CHECK_NULL(pairs);
    CHECK_DIGITS(digits);
    PT_CHECK_ARG(n >= 1 && group >= 1 && (int64_t)n * group <= gen->max_batch, n,
                 "* group must be in 1 .. %d, the generator's room (got %d * %d)", gen->max_batch, n, group);
    pt_generate_options go;
    int st = PT_STRUCT_READ(go, opts, pt_generate_options_init);
    if (st)
        return st;
    PT_CHECK_ARG(go.max_new_tokens >= 1 && go.max_new_tokens < gen->max_seq, opts->max_new_tokens,
                 "must be in 1 .. %d, below the generator's max_seq (got %d)", gen->max_seq - 1, go.max_new_tokens);
    const size_t N = (size_t)n * (size_t)group, M = (size_t)go.max_new_tokens, P = PROMPT_CAP(digits);
    /* one block: the prompts, their lengths, the completions, their lengths
     * and finish reasons, then the log-probabilities */
    int32_t *prompts = malloc(N * (P + 3 + M) * sizeof(int32_t) + N * M * sizeof(float));
    if (!prompts)
        return pt__err(PT_ENOMEM, "%s: no memory for %zu rollouts", __func__, N);
    int32_t *lens = prompts + N * P, *ntok = lens + N, *fin = ntok + N, *tokens = fin + N;
    float *lps = (float *)(tokens + N * M);
    size_t used = 0, len = 0;
    for (size_t i = 0; i < N && !st; i++, used += len) {
        st = pt_addition_prompt_ids(prompts + used, P, &len, tok, digits, pairs[2 * (i / (size_t)group)],
                                    pairs[2 * (i / (size_t)group) + 1]);
        lens[i] = (int32_t)len;
    }
    if (!st)
        st = pt_generate(gen, prompts, lens, (int)N, &go, tokens, ntok, fin, lps);
    /* the samples (group p: pair p; truncated when the length limit ended
     * them), then each one's reward: 1 for exactly the answer and EOS */
    pt_rollout_generated g;
    pt_rollout_generated_init(&g);
    g.n = (int)N;
    g.prompts = prompts;
    g.prompt_lens = lens;
    g.tokens = tokens;
    g.n_tokens = ntok;
    g.stride = (int)M;
    g.logprobs = lps; /* the sampler's; pi_old, the trainer's, is recorded by the step (docs/grpo.md) */
    g.finish = fin;
    g.group_size = group;
    const int first = pt_rollout_buffer_size(buf);
    if (!st)
        st = pt_rollout_buffer_add_generated(buf, &g);
    for (size_t i = 0; i < N && !st; i++) {
        bool ok; /* a completion that does not decode is wrong */
        const int64_t *pair = pairs + 2 * (i / (size_t)group);
        (void)pt_addition_score(&ok, NULL, tok, tokens + i * M, (size_t)ntok[i], digits, pair[0], pair[1]);
        st = pt_rollout_buffer_set_reward(buf, first + (int)i, 0, ok ? 1.0f : 0.0f);
    }
    free(prompts);
    return st;
}
