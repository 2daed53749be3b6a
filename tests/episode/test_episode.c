/* pt_episodes_run: multi-turn episodes from the KV cache.
 *  - a three-turn episode's recorded log-probabilities (and the logits it
 *    sampled from) equal one pt_model_forward over its final sequence
 *    (llama tied GQA, qwen3 qk-norm, mistral with a window of 5 shorter
 *    than the appended chunks, qwen2 with LoRA; stories260K in
 *    test_episode_stories.c);
 *  - the prefill counter is the distinct prompts plus the appended ids;
 *  - an episode's ids and log-probabilities are bit-identical alone and in
 *    a batch where the others end at different turns, rows are recycled
 *    (more episodes than rows) and appends are split over steps; across
 *    runs and thread counts; a one-turn episode is pt_generate's row;
 *  - the loss mask is 1 exactly on sampled tokens; rewards and per-turn
 *    rewards, text replies, decode_text and stop strings with the byte
 *    tokenizer;
 *  - environment failures and malformed answers end that episode with its
 *    error and the others go on (or stop the run); limits (max_turns,
 *    max_total_tokens, appends that do not fit) recorded; abort; every bad
 *    option PT_EINVAL naming it;
 *  - the results into a rollout buffer, and a GRPO step on them. */
#include "testutil.h"

#include "core/core.h"
#include "model/generate_internal.h"
#include "model/model.h"
#include "posttrain/episode.h"

#include <math.h>

enum { CFG_LLAMA, CFG_QWEN3, CFG_MISTRAL, CFG_QWEN2 };

#define V_TINY 53
#define WINDOW 5
#define MAXE 16   /* episodes a test records */
#define MAXS 96   /* completion tokens a test records per episode */

static void make_config(pt_model_config *c, int kind)
{
    ck_assert_ok(pt_model_config_init(c));
    c->vocab_size = V_TINY;
    c->hidden_size = 24;
    c->intermediate_size = 40;
    c->num_hidden_layers = 3;
    c->num_attention_heads = 6;
    c->num_key_value_heads = 2;
    c->head_dim = 4;
    c->max_position_embeddings = 256;
    c->rms_norm_eps = 1e-5;
    c->initializer_range = 0.2;
    c->tie_word_embeddings = true;
    c->eos_token_id = -1;
    if (kind == CFG_QWEN3) {
        c->arch = PT_ARCH_QWEN3;
        c->qk_norm = true;
        c->tie_word_embeddings = false;
        c->head_dim = 6;
        c->num_attention_heads = 4;
    } else if (kind == CFG_MISTRAL) {
        c->arch = PT_ARCH_MISTRAL;
        c->sliding_window = WINDOW;
        c->tie_word_embeddings = false;
        c->rope_theta = 1000000.0;
    } else if (kind == CFG_QWEN2) {
        c->arch = PT_ARCH_QWEN2;
        c->attention_bias = true;
        c->tie_word_embeddings = false;
        c->num_key_value_heads = 1;
    }
    ck_assert_ok(pt_model_config_validate(c));
}

/* A model whose norms and biases are not at their trivial init. */
static pt_model *make_model(int kind, uint64_t seed)
{
    pt_model_config c;
    make_config(&c, kind);
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, seed));
    pt_rng r;
    pt__rng_seed(&r, seed ^ 77);
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (!t->no_decay)
            continue;
        double base = strstr(t->name, "norm") ? 1.0 : 0.0;
        for (size_t j = 0; j < t->numel; j++)
            t->data[j] = (float)(base + 0.3 * pt__rng_normal(&r));
    }
    return m;
}

static double log_softmax_at(const float *x, int v, int i)
{
    double mx = -INFINITY;
    for (int j = 0; j < v; j++)
        mx = fmax(mx, (double)x[j]);
    double s = 0.0;
    for (int j = 0; j < v; j++)
        s += exp((double)x[j] - mx);
    return (double)x[i] - mx - log(s);
}

/* ---- a scripted environment --------------------------------------------------------- */

enum { FAIL_NONE, FAIL_RETURN, FAIL_BAD_ID, FAIL_ACTION, FAIL_INF, FAIL_BOTH, FAIL_TEXT_NO_TOK,
       FAIL_NEG, FAIL_DONE_IDS, FAIL_PENDING_IDS };

/* Deterministic in the episode's global index (base + view->episode) and
 * the turn: episode g is done after turns_of(g) turns; before that it
 * appends 1 + (g*7 + turn*3) % span ids. */
typedef struct script {
    int base;           /* an episode played alone: its index in the batch */
    int turns;          /* turns of every episode, or 0: 1 + g % 3 */
    int span;           /* appended ids per turn: 1 .. span */
    int vocab;
    int fail_g, fail_turn, fail_kind; /* inject one failure */
    int calls, finals;
    int always_append;  /* never done: the limits end the episodes */
    int respect_room;   /* done when the append would not fit (tokens_left) */
    bool check_text;    /* compare turn_text/text with decoding the ids */
    int pending_g;      /* this episode answers PT_ENV_PENDING pending_n times per turn */
    int pending_n, calls_pending;
    int log[256], n_log; /* episodes in call order; -1 - g for a pending answer */
    const pt_tokenizer *tok;
    int text_reply;     /* append text (for the byte tokenizer) instead of ids */
    int32_t appended[MAXE][8][32]; /* what was appended (episode g, turn) */
    int n_appended[MAXE][8];
} script;

static int turns_of(const script *s, int g)
{
    return s->turns ? s->turns : 1 + g % 3;
}

static int scripted_env(pt_env_reply *rep, const pt_env_turn *t, void *payload)
{
    script *s = payload;
    static int32_t ids[64];
    static float rw[2], trw[2];
    static char text[64];
    ck_assert_uint_eq(t->size, sizeof(pt_env_turn));
    ck_assert_uint_eq(rep->size, sizeof(pt_env_reply));
    ck_assert_int_eq(rep->action, 0);
    const int g = s->base + t->episode;
    s->calls++;
    if (t->final)
        s->finals++;
    ck_assert(t->turn_start > t->prompt_len - 1 && t->turn_start < t->n_ids);
    if (s->check_text) {
        char *want;
        size_t wl;
        ck_assert_ok(pt_tokenizer_decode(&want, &wl, s->tok, t->ids + t->turn_start,
                                         (size_t)(t->n_ids - t->turn_start), 0));
        ck_assert_ptr_nonnull(t->turn_text);
        ck_assert_uint_eq(t->turn_text_len, wl);
        ck_assert(memcmp(t->turn_text, want, wl) == 0);
        pt_free(want);
        ck_assert_ok(pt_tokenizer_decode(&want, &wl, s->tok, t->ids + t->prompt_len,
                                         (size_t)(t->n_ids - t->prompt_len), 0));
        ck_assert_uint_eq(t->text_len, wl);
        ck_assert(memcmp(t->text, want, wl) == 0);
        pt_free(want);
    } else {
        ck_assert_ptr_null(t->turn_text);
        ck_assert_ptr_null(t->text);
    }
    rw[0] = (float)g + 0.25f * (float)t->turn;
    rw[1] = -1.0f;
    trw[0] = (float)(10 * g + t->turn);
    trw[1] = NAN;
    if (g == s->pending_g && t->attempt < s->pending_n) {
        ck_assert_int_eq(t->attempt, s->calls_pending++ % s->pending_n);
        if (s->n_log < 256)
            s->log[s->n_log++] = -1 - g;
        rep->action = PT_ENV_PENDING;
        return 0;
    }
    if (s->n_log < 256)
        s->log[s->n_log++] = g;
    rep->turn_rewards = trw;
    if (g == s->fail_g && t->turn == s->fail_turn) {
        switch (s->fail_kind) {
        case FAIL_RETURN:
            rep->error = "tool crashed";
            return 7;
        case FAIL_BAD_ID:
            ids[0] = 1;
            ids[1] = s->vocab;
            rep->action = PT_ENV_APPEND;
            rep->ids = ids;
            rep->n_ids = 2;
            return 0;
        case FAIL_ACTION:
            rep->action = 9;
            return 0;
        case FAIL_INF:
            rw[0] = INFINITY;
            rep->action = PT_ENV_DONE;
            rep->rewards = rw;
            return 0;
        case FAIL_BOTH:
            ids[0] = 1;
            rep->action = PT_ENV_APPEND;
            rep->ids = ids;
            rep->n_ids = 1;
            rep->text = "x";
            return 0;
        case FAIL_TEXT_NO_TOK:
            rep->action = PT_ENV_APPEND;
            rep->text = "x";
            return 0;
        case FAIL_NEG:
            rep->action = PT_ENV_APPEND;
            rep->ids = ids;
            rep->n_ids = -2;
            return 0;
        case FAIL_DONE_IDS:
            rep->action = PT_ENV_DONE;
            rep->ids = ids;
            rep->n_ids = 1;
            return 0;
        case FAIL_PENDING_IDS:
            rep->action = PT_ENV_PENDING;
            rep->ids = ids;
            rep->n_ids = 1;
            return 0;
        default:
            break;
        }
    }
    int n = 1 + (g * 7 + t->turn * 3) % s->span;
    if (!s->always_append &&
        (t->turn + 1 >= turns_of(s, g) || t->final || (s->respect_room && n > t->tokens_left))) {
        rep->action = PT_ENV_DONE;
        rep->rewards = rw;
        return 0;
    }
    rep->action = PT_ENV_APPEND;
    if (s->text_reply) {
        /* "<|im_end|>" + n lower-case letters: a special token and bytes */
        int k = snprintf(text, sizeof text, "<|im_end|>");
        for (int j = 0; j < n && k < 60; j++)
            text[k++] = (char)('a' + (g * 5 + t->turn + j) % 26);
        text[k] = '\0';
        rep->text = text;
        if (t->turn < 8 && g < MAXE) {
            int32_t *enc;
            size_t ne;
            ck_assert_ok(pt_tokenizer_encode(&enc, &ne, s->tok, text, strlen(text), 0));
            ck_assert(ne <= 32);
            memcpy(s->appended[g][t->turn], enc, ne * sizeof *enc);
            s->n_appended[g][t->turn] = (int)ne;
            pt_free(enc);
        }
        return 0;
    }
    for (int j = 0; j < n; j++)
        ids[j] = (int32_t)((g * 13 + t->turn * 5 + j * 3) % s->vocab);
    if (t->turn < 8 && g < MAXE && n <= 32) {
        memcpy(s->appended[g][t->turn], ids, (size_t)n * sizeof *ids);
        s->n_appended[g][t->turn] = n;
    }
    rep->ids = ids;
    rep->n_ids = n;
    return 0;
}

static void script_init(script *s, int vocab, int span)
{
    memset(s, 0, sizeof *s);
    s->vocab = vocab;
    s->span = span;
    s->fail_g = -1;
    s->pending_g = -1;
}

static int32_t *make_prompts(const int32_t *lens, int n, int vocab, uint64_t seed)
{
    size_t total = 0;
    for (int b = 0; b < n; b++)
        total += (size_t)lens[b];
    int32_t *ids = malloc(total * sizeof *ids);
    pt_rng r;
    pt__rng_seed(&r, seed);
    for (size_t i = 0; i < total; i++)
        ids[i] = (int32_t)pt__rng_below(&r, (uint64_t)vocab);
    return ids;
}

/* ---- checks shared by the tests --------------------------------------------------------- */

static pt_episode get(const pt_episode_results *res, int i)
{
    pt_episode e;
    ck_assert_ok(pt_episode_init(&e));
    ck_assert_ok(pt_episode_results_get(&e, res, i));
    return e;
}

/* The structure of an ended episode: turns, mask (1 exactly on each turn's
 * sampled ids), appended ids as the script appended them. */
static void check_structure(const pt_episode *e, const script *s, int g)
{
    const int nc = e->n_ids - e->prompt_len;
    ck_assert_int_ge(e->n_turns, 1);
    int sampled = 0;
    uint8_t *want = calloc((size_t)nc + 1, 1);
    for (int t = 0; t < e->n_turns; t++) {
        ck_assert_int_ge(e->turn_len[t], 1);
        for (int j = 0; j < e->turn_len[t]; j++)
            want[e->turn_start[t] - e->prompt_len + j] = 1;
        sampled += e->turn_len[t];
        if (t + 1 < e->n_turns) {
            /* between turns: exactly what the environment appended */
            int a = e->turn_start[t] + e->turn_len[t];
            int len = e->turn_start[t + 1] - a;
            if (s && g < MAXE && t < 8) {
                ck_assert_int_eq(len, s->n_appended[g][t]);
                ck_assert(memcmp(e->ids + a, s->appended[g][t], (size_t)len * sizeof(int32_t)) == 0);
            }
        } else {
            ck_assert_int_eq(e->turn_start[t] + e->turn_len[t], e->n_ids);
        }
    }
    ck_assert_int_eq(e->turn_start[0], e->prompt_len);
    int ones = 0; /* the turns do not overlap: as many mask ones as sampled ids */
    for (int j = 0; j < nc; j++) {
        ones += want[j];
        ck_assert_msg(e->loss_mask[j] == want[j], "episode %d: mask[%d] is %d", e->index, j,
                      e->loss_mask[j]);
        if (!want[j])
            ck_assert(e->logprobs[j] == 0.0f);
        else
            ck_assert(e->logprobs[j] <= 0.0f && isfinite(e->logprobs[j]));
    }
    ck_assert_int_eq(ones, sampled);
    free(want);
}

/* The logits of every sampled token, recorded by the generator's hook
 * (row = episode, step = completion index). */
typedef struct hook_rec {
    int vocab;
    float *logits; /* [MAXE][MAXS][vocab] */
    int calls;
} hook_rec;

static void record_logits(int ep, int step, const float *logits, int vocab, void *payload)
{
    hook_rec *h = payload;
    ck_assert(ep >= 0 && ep < MAXE && step >= 0 && step < MAXS);
    memcpy(h->logits + ((size_t)ep * MAXS + (size_t)step) * (size_t)vocab, logits,
           (size_t)vocab * sizeof(float));
    h->calls++;
}

/* Every sampled token's log-probability (temperature 1) and the logits it
 * was drawn from against pt_model_forward over the final sequence. */
static void check_vs_forward(pt_model *m, const pt_episode *e, const hook_rec *h, double *worst_lp,
                             double *worst_logit)
{
    pt_model_config c;
    pt_model_config_init(&c);
    ck_assert_ok(pt_model_get_config(&c, m));
    const int V = c.vocab_size, T = e->n_ids - 1;
    pt_context *ctx = NULL;
    ck_assert_ok(pt_context_create(&ctx, m, 1, T));
    float *logits = malloc((size_t)T * (size_t)V * sizeof *logits);
    pt_batch b = pt_test_row_batch(e->ids, NULL, T);
    ck_assert_ok(pt_model_forward(ctx, &b, NULL, logits));
    for (int p = e->prompt_len; p < e->n_ids; p++) {
        const int j = p - e->prompt_len;
        if (!e->loss_mask[j])
            continue;
        const float *full = logits + (size_t)(p - 1) * V;
        double ref = log_softmax_at(full, V, e->ids[p]);
        double d = fabs(ref - (double)e->logprobs[j]) / fmax(1.0, fabs(ref));
        *worst_lp = fmax(*worst_lp, d);
        if (h && e->index < MAXE && j < MAXS) {
            const float *cached = h->logits + ((size_t)e->index * MAXS + (size_t)j) * V;
            for (int i = 0; i < V; i++)
                *worst_logit = fmax(*worst_logit, fabs((double)cached[i] - (double)full[i]) /
                                                      fmax(1.0, fabs(full[i])));
        }
    }
    free(logits);
    pt_context_free(ctx);
}

static pt_generate_options sampling(int max_new, float temperature, uint64_t seed)
{
    pt_generate_options o;
    ck_assert_ok(pt_generate_options_init(&o));
    o.max_new_tokens = max_new;
    o.temperature = temperature;
    o.seed = seed;
    o.n_stop_ids = 0;
    return o;
}

/* ---- three turns through the cache equal one forward ------------------------------------------ */

static void three_turns(pt_model *m, const char *what)
{
    pt_model_config c;
    pt_model_config_init(&c);
    ck_assert_ok(pt_model_get_config(&c, m));
    enum { N = 4 };
    const int32_t lens[N] = { 3, 9, 6, 9 };
    int32_t *prompts = make_prompts(lens, N, c.vocab_size, 11);
    /* episode 3 repeats episode 1's prompt: prefilled once */
    memcpy(prompts + 3 + 9 + 6, prompts + 3, 9 * sizeof *prompts);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, N, 80));
    hook_rec h = { c.vocab_size, calloc((size_t)MAXE * MAXS * (size_t)c.vocab_size, sizeof(float)), 0 };
    pt__generator_set_logits_hook(g, record_logits, &h);
    /* two stop ids: turns of different lengths */
    const int32_t stops[2] = { 5, 17 };
    pt_generate_options so = sampling(7, 1.0f, 42);
    so.stop_ids = stops;
    so.n_stop_ids = 2;
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = 3;
    eo.n_reward_funcs = 2;
    script s;
    script_init(&s, c.vocab_size, 8);
    s.turns = 3;
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    int n = 0;
    n = pt_episode_results_size(res);
    ck_assert_int_eq(n, N);
    double worst_lp = 0.0, worst_logit = 0.0;
    int64_t appended = 0, sampled = 0;
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.index, i);
        ck_assert_int_eq(e.group, i);
        ck_assert_int_eq(e.end, PT_EPISODE_DONE);
        ck_assert_int_eq(e.status, PT_OK);
        ck_assert_ptr_null(e.error);
        ck_assert_int_eq(e.n_turns, 3);
        ck_assert_int_eq(e.n_reward_funcs, 2);
        ck_assert(e.rewards[0] == (float)i + 0.5f && e.rewards[1] == -1.0f);
        for (int t = 0; t < 3; t++) {
            ck_assert(e.turn_rewards[2 * t] == (float)(10 * i + t));
            ck_assert(isnan(e.turn_rewards[2 * t + 1]));
            bool stopped = e.turn_end[t] == PT_TURN_STOP_ID;
            int32_t last = e.ids[e.turn_start[t] + e.turn_len[t] - 1];
            ck_assert_int_eq(stopped, last == 5 || last == 17);
            if (!stopped)
                ck_assert_int_eq(e.turn_end[t], PT_TURN_LENGTH);
            if (t == 2)
                ck_assert_int_eq(e.truncated, !stopped);
            sampled += e.turn_len[t];
        }
        check_structure(&e, &s, i);
        appended += e.turn_start[1] - e.turn_start[0] - e.turn_len[0];
        appended += e.turn_start[2] - e.turn_start[1] - e.turn_len[1];
        check_vs_forward(m, &e, &h, &worst_lp, &worst_logit);
    }
    pt_episode_stats st;
    ck_assert_ok(pt_episode_stats_init(&st));
    ck_assert_ok(pt_episode_results_stats(&st, res));
    ck_assert_int_eq(st.episodes, N);
    ck_assert_int_eq(st.done, N);
    ck_assert_int_eq(st.turns, 3 * N);
    ck_assert_int_eq(st.env_calls, 3 * N);
    ck_assert_int_eq(st.appended_tokens, appended);
    ck_assert_int_eq(st.sampled_tokens, sampled);
    ck_assert_int_eq(st.prompt_tokens, 3 + 9 + 6 + 9);
    ck_assert_int_eq(st.prompt_tokens_shared, 9);
    /* nothing prefilled twice: the distinct prompts plus the appended ids */
    ck_assert_int_eq(st.prefill_tokens, 3 + 9 + 6 + appended);
    /* and every sampled token fed back once, but for each episode's last */
    ck_assert_int_eq(st.forward_tokens, st.prefill_tokens + sampled - N);
    ck_assert_int_eq(h.calls, sampled);
    fprintf(stderr, "%s: 3 turns x %d episodes through the cache vs one forward: logprob max rel "
            "%.2g, logits max rel %.2g; prefilled %lld = prompts %d + appended %lld in %lld steps\n",
            what, N, worst_lp, worst_logit, (long long)st.prefill_tokens, 3 + 9 + 6,
            (long long)appended, (long long)st.steps);
    ck_assert_msg(worst_lp <= 1e-5, "%s: logprobs differ by %g", what, worst_lp);
    ck_assert_msg(worst_logit <= 1e-5, "%s: logits differ by %g", what, worst_logit);
    pt_episode_results_free(res);
    free(h.logits);
    free(prompts);
    pt_generator_free(g);
}

START_TEST(test_three_turns_equal_forward)
{
    static const char *names[] = { "llama tied GQA", "qwen3 qk-norm", "mistral window 5" };
    pt_model *m = make_model(_i, 200 + (uint64_t)_i);
    three_turns(m, names[_i]);
    pt_model_free(m);
}
END_TEST

START_TEST(test_three_turns_lora)
{
    pt_model *m = make_model(CFG_QWEN2, 9);
    pt_lora_options lo;
    ck_assert_ok(pt_lora_options_init(&lo));
    lo.rank = 3;
    lo.alpha = 6.0;
    lo.targets = PT_LORA_Q | PT_LORA_K | PT_LORA_V | PT_LORA_O | PT_LORA_GATE | PT_LORA_UP |
                 PT_LORA_DOWN;
    ck_assert_ok(pt_model_add_lora(m, &lo));
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        const pt_tensor_ref *t = pt__model_tensor(m, i);
        if (t->adapter)
            for (size_t j = 0; j < t->numel; j++)
                t->data[j] = 0.2f * (float)sin((double)(i * 31 + j));
    }
    three_turns(m, "qwen2 + LoRA");
    pt_model_free(m);
}
END_TEST

/* ---- batch independence -------------------------------------------------------------------------- */

typedef struct played {
    int32_t ids[MAXE][128];
    float lp[MAXE][128];
    uint8_t mask[MAXE][128];
    int n[MAXE], turns[MAXE], end[MAXE];
} played;

static void play(played *out, pt_generator *g, const int32_t *prompts, const int32_t *lens,
                 int n, const pt_episode_options *eo, script *s)
{
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, n, eo, scripted_env, s));
    for (int i = 0; i < n; i++) {
        pt_episode e = get(res, i);
        ck_assert(e.n_ids <= 128);
        check_structure(&e, s, s->base + i);
        const int k = s->base + i;
        out->n[k] = e.n_ids;
        out->turns[k] = e.n_turns;
        out->end[k] = e.end;
        memcpy(out->ids[k], e.ids, (size_t)e.n_ids * sizeof *e.ids);
        memcpy(out->lp[k], e.logprobs, (size_t)(e.n_ids - e.prompt_len) * sizeof *e.logprobs);
        memcpy(out->mask[k], e.loss_mask, (size_t)(e.n_ids - e.prompt_len));
    }
    pt_episode_results_free(res);
}

static void assert_same(const played *a, const played *b, int k, const char *what)
{
    ck_assert_msg(a->n[k] == b->n[k], "%s: episode %d has %d vs %d ids", what, k, a->n[k], b->n[k]);
    ck_assert_msg(memcmp(a->ids[k], b->ids[k], (size_t)a->n[k] * sizeof(int32_t)) == 0,
                  "%s: episode %d ids differ", what, k);
    ck_assert_msg(memcmp(a->lp[k], b->lp[k], (size_t)a->n[k] * sizeof(float)) == 0 ||
                  a->n[k] == 0, "%s: episode %d logprobs are not bit-identical", what, k);
    ck_assert_int_eq(a->turns[k], b->turns[k]);
    ck_assert_int_eq(a->end[k], b->end[k]);
}

static void check_independence(int kind, int span, int step_tokens)
{
    pt_model *m = make_model(kind, 5);
    enum { N = 7 };
    const int32_t lens[N] = { 5, 2, 8, 2, 5, 12, 1 };
    int32_t *prompts = make_prompts(lens, N, V_TINY, 21);
    /* episodes 1 and 3 share a prompt; 0 and 4 too: groups */
    memcpy(prompts + 5 + 2 + 8, prompts + 5, 2 * sizeof *prompts);
    memcpy(prompts + 5 + 2 + 8 + 2, prompts, 5 * sizeof *prompts);
    /* max_seq 48: several rows appending up to `span` ids at once split
     * over steps (a step holds 48 tokens) */
    pt_generator *g4 = NULL, *g1 = NULL, *g7 = NULL;
    ck_assert_ok(pt_generator_create(&g4, m, 4, 48));
    ck_assert_ok(pt_generator_create(&g7, m, N, 48));
    ck_assert_ok(pt_generator_create(&g1, m, 1, 48));
    const int32_t stops[1] = { 3 };
    pt_generate_options so = sampling(6, 0.9f, 1234);
    so.top_k = 30;
    so.stop_ids = stops;
    so.n_stop_ids = 1;
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = 3;
    eo.max_total_tokens = 48;
    eo.max_step_tokens = step_tokens;
    static played batch4, batch7, again, alone, threads1;
    static script s;
    script_init(&s, V_TINY, span);
    play(&batch4, g4, prompts, lens, N, &eo, &s);   /* 4 rows: rows recycled */
    script_init(&s, V_TINY, span);
    play(&again, g4, prompts, lens, N, &eo, &s);
    script_init(&s, V_TINY, span);
    play(&batch7, g7, prompts, lens, N, &eo, &s);   /* every episode its own row */
    pt_set_num_threads(1);
    script_init(&s, V_TINY, span);
    play(&threads1, g4, prompts, lens, N, &eo, &s);
    pt_set_num_threads(2);
    size_t off = 0;
    int turns_seen[4] = { 0 };
    for (int k = 0; k < N; k++) {
        script_init(&s, V_TINY, span);
        s.base = k;
        pt_generate_options one = so;
        one.stream_offset = (uint64_t)k;
        pt_episode_options eo1 = eo;
        eo1.sampling = &one;
        play(&alone, g1, prompts + off, lens + k, 1, &eo1, &s);
        assert_same(&batch4, &alone, k, "4 rows vs alone");
        assert_same(&batch7, &alone, k, "7 rows vs alone");
        assert_same(&batch4, &again, k, "second run");
        assert_same(&batch4, &threads1, k, "2 vs 1 threads");
        turns_seen[batch4.turns[k]]++;
        off += (size_t)lens[k];
    }
    /* episodes ended at different turns */
    ck_assert((turns_seen[1] > 0) + (turns_seen[2] > 0) + (turns_seen[3] > 0) >= 2);
    /* the shared prompts gave different episodes (own streams) */
    int shorter = batch4.n[1] < batch4.n[3] ? batch4.n[1] : batch4.n[3];
    ck_assert(batch4.n[1] != batch4.n[3] ||
              memcmp(batch4.ids[1], batch4.ids[3], (size_t)shorter * sizeof(int32_t)) != 0);
    pt_generator_free(g1);
    pt_generator_free(g4);
    pt_generator_free(g7);
    free(prompts);
    pt_model_free(m);
}

START_TEST(test_batch_independence)
{
    check_independence(CFG_QWEN3, 5, 0);
    check_independence(CFG_LLAMA, 20, 8); /* appends split over steps of 8 tokens */
    check_independence(CFG_MISTRAL, 9, 0); /* chunks limited by the ring */
}
END_TEST

/* A one-turn episode is pt_generate's row, bit for bit. */
START_TEST(test_one_turn_is_generate)
{
    pt_model *m = make_model(CFG_LLAMA, 8);
    enum { N = 3, M = 10 };
    const int32_t lens[N] = { 4, 7, 4 };
    int32_t *prompts = make_prompts(lens, N, V_TINY, 3);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, N, 40));
    const int32_t stops[1] = { 9 };
    pt_generate_options so = sampling(M, 0.8f, 77);
    so.stop_ids = stops;
    so.n_stop_ids = 1;
    int32_t tok[N * M], nt[N], fin[N];
    float lp[N * M];
    ck_assert_ok(pt_generate(g, prompts, lens, N, &so, tok, nt, fin, lp));
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = 1;
    script s;
    script_init(&s, V_TINY, 3);
    s.turns = 1;
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.n_ids - e.prompt_len, nt[i]);
        ck_assert(memcmp(e.ids + e.prompt_len, tok + i * M, (size_t)nt[i] * sizeof *tok) == 0);
        ck_assert(memcmp(e.logprobs, lp + i * M, (size_t)nt[i] * sizeof *lp) == 0);
        ck_assert_int_eq(e.turn_end[0], fin[i] == PT_FINISH_STOP ? PT_TURN_STOP_ID : PT_TURN_LENGTH);
        ck_assert_int_eq(e.truncated, fin[i] == PT_FINISH_LENGTH);
    }
    ck_assert_int_eq(s.finals, N); /* max_turns 1: every call is final */
    pt_episode_results_free(res);
    pt_generator_free(g);
    free(prompts);
    pt_model_free(m);
}
END_TEST

/* ---- failures --------------------------------------------------------------------------------- */

START_TEST(test_env_failures)
{
    pt_model *m = make_model(CFG_LLAMA, 12);
    enum { N = 5 };
    const int32_t lens[N] = { 3, 4, 5, 6, 7 };
    int32_t *prompts = make_prompts(lens, N, V_TINY, 9);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 3, 64));
    pt_generate_options so = sampling(4, 1.0f, 5);
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = 3;
    static played ok_run, bad_run;
    static script s;
    script_init(&s, V_TINY, 4);
    s.turns = 3;
    play(&ok_run, g, prompts, lens, N, &eo, &s);
    static const struct {
        int kind, status;
        const char *msg;
    } cases[] = {
        { FAIL_RETURN, PT_ECALLBACK, "episode 2 turn 1: the environment returned 7: tool crashed" },
        { FAIL_BAD_ID, PT_EINVAL, "episode 2 turn 1: appended id 53 (ids[1]) is outside the vocabulary [0, 53)" },
        { FAIL_ACTION, PT_EINVAL, "episode 2 turn 1: the environment answered action 9, not "
                                  "PT_ENV_APPEND (1), PT_ENV_DONE (2) or PT_ENV_PENDING (3)" },
        { FAIL_INF, PT_EINVAL, "episode 2 turn 1: rewards[0] is inf" },
        { FAIL_BOTH, PT_EINVAL, "both ids and text" },
        { FAIL_TEXT_NO_TOK, PT_EINVAL, "no tokenizer" },
        { FAIL_NEG, PT_EINVAL, "n_ids -2 is negative" },
        { FAIL_DONE_IDS, PT_EINVAL, "PT_ENV_DONE with ids or text" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int stop = 0; stop < 2; stop++) {
            script_init(&s, V_TINY, 4);
            s.turns = 3;
            s.fail_g = 2;
            s.fail_turn = 1;
            s.fail_kind = cases[c].kind;
            eo.on_error = stop ? PT_EPISODE_ERROR_STOP : PT_EPISODE_ERROR_CONTINUE;
            pt_episode_results *res = NULL;
            ck_assert_ok(pt_episode_results_create(&res));
            if (stop) {
                ck_assert_status(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s),
                                 cases[c].status, cases[c].msg);
                ck_assert(strncmp(pt_last_error(), "pt_episodes_run: episode 2 turn 1", 33) == 0);
            } else {
                ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
            }
            pt_episode_stats st;
            pt_episode_stats_init(&st);
            ck_assert_ok(pt_episode_results_stats(&st, res));
            ck_assert_int_eq(st.errors, 1);
            for (int i = 0; i < N; i++) {
                pt_episode e = get(res, i);
                if (i == 2) {
                    ck_assert_int_eq(e.end, PT_EPISODE_ERROR);
                    ck_assert_int_eq(e.status, cases[c].status);
                    ck_assert_ptr_nonnull(e.error);
                    ck_assert_msg(strstr(e.error, cases[c].msg) != NULL, "error '%s' lacks '%s'",
                                  e.error, cases[c].msg);
                    ck_assert(strncmp(e.error, "episode 2 turn 1: ", 18) == 0);
                    ck_assert_int_eq(e.n_turns, 2);
                    ck_assert(isnan(e.rewards[0]));
                    ck_assert(!e.truncated);
                } else if (!stop) {
                    /* the others go on, unaffected */
                    ck_assert_int_eq(e.end, PT_EPISODE_DONE);
                    ck_assert_int_eq(e.status, PT_OK);
                    ck_assert_int_eq(e.n_ids, ok_run.n[i]);
                    ck_assert(memcmp(e.ids, ok_run.ids[i], (size_t)e.n_ids * sizeof *e.ids) == 0);
                } else {
                    /* the run stopped: those not ended are marked */
                    ck_assert(e.end == PT_EPISODE_DONE || e.end == PT_EPISODE_STOPPED);
                    if (e.end == PT_EPISODE_STOPPED) {
                        ck_assert_int_eq(e.status, PT_ECANCELLED);
                        ck_assert_ptr_nonnull(e.error);
                    }
                }
            }
            if (stop)
                ck_assert_int_ge(st.stopped, 1);
            pt_episode_results_free(res);
        }
    }
    (void)bad_run;
    eo.on_error = PT_EPISODE_ERROR_CONTINUE;
    pt_generator_free(g);
    free(prompts);
    pt_model_free(m);
}
END_TEST

/* An environment whose answer is pending (a tool running elsewhere): the
 * episode's row waits, the others decode, and the episodes come out as
 * with an environment that answers at once. */
START_TEST(test_pending_answers)
{
    pt_model *m = make_model(CFG_LLAMA, 16);
    enum { N = 4 };
    const int32_t lens[N] = { 3, 4, 5, 6 };
    int32_t *prompts = make_prompts(lens, N, V_TINY, 23);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, N, 64));
    pt_generate_options so = sampling(4, 1.0f, 8);
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = 3;
    static played at_once, later, alone_pending;
    static script s;
    script_init(&s, V_TINY, 3);
    s.turns = 3;
    play(&at_once, g, prompts, lens, N, &eo, &s);
    /* episode 1 keeps the environment busy 12 steps at each of its turns */
    script_init(&s, V_TINY, 3);
    s.turns = 3;
    s.pending_g = 1;
    s.pending_n = 12;
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.end, PT_EPISODE_DONE);
        ck_assert_int_eq(e.n_ids, at_once.n[i]);
        ck_assert(memcmp(e.ids, at_once.ids[i], (size_t)e.n_ids * sizeof *e.ids) == 0);
        ck_assert(memcmp(e.logprobs, at_once.lp[i], (size_t)(e.n_ids - e.prompt_len) * sizeof(float)) == 0);
    }
    pt_episode_stats st;
    pt_episode_stats_init(&st);
    ck_assert_ok(pt_episode_results_stats(&st, res));
    ck_assert_int_eq(st.env_pending, 3 * 12);
    ck_assert_int_eq(st.env_calls, 4 * 3 + 3 * 12);
    /* the others went on meanwhile: they were done before episode 1's first answer */
    int first_answer = -1, others_done = 0;
    for (int i = 0; i < s.n_log && first_answer < 0; i++) {
        if (s.log[i] == 1)
            first_answer = i;
        else if (s.log[i] >= 0)
            others_done++;
    }
    ck_assert_int_eq(others_done, 3 * 3);
    /* one episode alone, always pending: called again at once (nothing decodes) */
    script_init(&s, V_TINY, 3);
    s.turns = 3;
    s.pending_g = 0;
    s.pending_n = 5;
    pt_generate_options one = so;
    pt_episode_options eo1 = eo;
    eo1.sampling = &one;
    play(&alone_pending, g, prompts, lens, 1, &eo1, &s);
    ck_assert_int_eq(alone_pending.n[0], at_once.n[0]);
    ck_assert(memcmp(alone_pending.ids[0], at_once.ids[0], (size_t)at_once.n[0] * sizeof(int32_t)) == 0);
    (void)later;
    /* a pending answer that carries ids is malformed */
    script_init(&s, V_TINY, 3);
    s.turns = 3;
    s.fail_g = 2;
    s.fail_turn = 0;
    s.fail_kind = FAIL_PENDING_IDS;
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    pt_episode e2 = get(res, 2);
    ck_assert_int_eq(e2.end, PT_EPISODE_ERROR);
    ck_assert_ptr_nonnull(strstr(e2.error, "PT_ENV_PENDING with ids, text or rewards"));
    pt_episode_results_free(res);
    pt_generator_free(g);
    free(prompts);
    pt_model_free(m);
}
END_TEST

/* ---- limits -------------------------------------------------------------------------------------------- */

START_TEST(test_limits)
{
    pt_model *m = make_model(CFG_LLAMA, 14);
    enum { N = 3 };
    const int32_t lens[N] = { 3, 4, 5 };
    int32_t *prompts = make_prompts(lens, N, V_TINY, 19);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, N, 64));
    pt_generate_options so = sampling(4, 1.0f, 6);
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    script s;
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));

    /* max_turns: an environment that never says done */
    script_init(&s, V_TINY, 3);
    s.always_append = 1;
    eo.max_turns = 2;
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    ck_assert_int_eq(s.finals, N);
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.end, PT_EPISODE_MAX_TURNS);
        ck_assert(e.truncated);
        ck_assert_int_eq(e.n_turns, 2);
        ck_assert_int_eq(e.turn_start[1] + e.turn_len[1], e.n_ids); /* the refused append is not in */
        check_structure(&e, &s, i);
    }
    pt_episode_stats st;
    pt_episode_stats_init(&st);
    ck_assert_ok(pt_episode_results_stats(&st, res));
    ck_assert_int_eq(st.max_turns, N);
    ck_assert_int_eq(st.truncated, N);

    /* max_total_tokens: 16 ids per episode, turns of 4 and appends of 1..3:
     * the limit cuts a turn or refuses an append */
    script_init(&s, V_TINY, 3);
    s.always_append = 1;
    eo.max_turns = 100;
    eo.max_total_tokens = 16;
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.end, PT_EPISODE_MAX_TOKENS);
        ck_assert(e.truncated);
        ck_assert_int_le(e.n_ids, 16);
        int last = e.turn_end[e.n_turns - 1];
        ck_assert(last == PT_TURN_MAX_TOKENS ? e.n_ids == 16 : last == PT_TURN_LENGTH);
        check_structure(&e, &s, i);
    }
    ck_assert_ok(pt_episode_results_stats(&st, res));
    ck_assert_int_eq(st.max_tokens, N);

    /* the environment answers done when told the episode is final: not a
     * truncation by the episode's limits (the last turn was cut, though) */
    script_init(&s, V_TINY, 3);
    s.turns = 100;
    s.respect_room = 1;
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.end, PT_EPISODE_DONE);
        ck_assert(!isnan(e.rewards[0]));
        ck_assert_int_eq(e.truncated, e.turn_end[e.n_turns - 1] != PT_TURN_STOP_ID);
    }
    pt_episode_results_free(res);
    pt_generator_free(g);
    free(prompts);
    pt_model_free(m);
}
END_TEST

static int abort_after(void *payload)
{
    int *n = payload;
    return --*n < 0;
}

START_TEST(test_abort)
{
    pt_model *m = make_model(CFG_LLAMA, 15);
    enum { N = 3 };
    const int32_t lens[N] = { 3, 4, 5 };
    int32_t *prompts = make_prompts(lens, N, V_TINY, 19);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, N, 64));
    pt_generate_options so = sampling(8, 1.0f, 6);
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    script s;
    script_init(&s, V_TINY, 3);
    s.turns = 3;
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    int budget = 15; /* polls: the three prefills' layers (9), then a few steps */
    ck_assert_ok(pt_set_abort_callback(abort_after, &budget));
    ck_assert_status(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s),
                     PT_ECANCELLED, NULL);
    pt_set_abort_callback(NULL, NULL);
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.end, PT_EPISODE_STOPPED);
        ck_assert_int_eq(e.status, PT_ECANCELLED);
    }
    /* and the results and generator work again */
    script_init(&s, V_TINY, 3);
    s.turns = 3;
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    pt_episode_results_free(res);
    pt_generator_free(g);
    free(prompts);
    pt_model_free(m);
}
END_TEST

/* ---- text: the byte tokenizer -------------------------------------------------------------------------- */

START_TEST(test_text_and_stop_strings)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, PT_BYTE_TOKENIZER_VOCAB);
    c.max_position_embeddings = 256;
    c.initializer_range = 0.2;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 3));
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 4, 200));
    int32_t *prompt;
    size_t plen;
    const char *ptext = "<|im_start|>user\nhi<|im_end|>\n";
    ck_assert_ok(pt_tokenizer_encode(&prompt, &plen, tok, ptext, strlen(ptext), 0));
    enum { N = 4 };
    int32_t lens[N], *prompts = malloc(N * plen * sizeof *prompts);
    for (int i = 0; i < N; i++) {
        lens[i] = (int32_t)plen;
        memcpy(prompts + (size_t)i * plen, prompt, plen * sizeof *prompt);
    }
    const int32_t im_end = PT_BYTE_TOKENIZER_IM_END;
    pt_generate_options so = sampling(30, 1.0f, 99);
    so.stop_ids = &im_end;
    so.n_stop_ids = 1;
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.max_turns = 3;
    eo.tokenizer = tok;
    eo.decode_text = true;
    static script s;
    script_init(&s, PT_BYTE_TOKENIZER_VOCAB, 6);
    s.turns = 3;
    s.text_reply = 1;
    s.check_text = true;
    s.tok = tok;
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    /* the text replies went in as their encoding (a special token and bytes) */
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        ck_assert_int_eq(e.n_turns, 3);
        check_structure(&e, &s, i);
        ck_assert_int_eq(e.ids[e.turn_start[0] + e.turn_len[0]], PT_BYTE_TOKENIZER_IM_END);
    }
    /* a stop string: two printable bytes the first run sampled in episode
     * 0's first turn; the same seed now ends that turn right after them */
    pt_episode e0 = get(res, 0);
    char stop[3] = { 0 };
    int at = -1;
    for (int j = e0.turn_start[0] + 1; j < e0.turn_start[0] + e0.turn_len[0] && at < 0; j++)
        if (e0.ids[j - 1] >= 'a' && e0.ids[j - 1] <= 'z' && e0.ids[j] >= 32 && e0.ids[j] < 127 &&
            e0.ids[j] != '<') {
            char pair[3] = { (char)e0.ids[j - 1], (char)e0.ids[j], 0 };
            /* not inside the text of a special token the turn may hold */
            if (strstr("<|bos|><|eos|><|pad|><|im_start|><|im_end|>", pair))
                continue;
            memcpy(stop, pair, 3);
            at = j;
        }
    ck_assert_msg(at >= 0, "no two printable bytes in the first turn");
    /* the first occurrence may be earlier than `at` */
    int first = -1;
    for (int j = e0.turn_start[0] + 1; j <= at && first < 0; j++)
        if (e0.ids[j - 1] == stop[0] && e0.ids[j] == stop[1])
            first = j;
    const char *stops[2] = { "never-sampled\x01", stop };
    eo.stop_strings = stops;
    eo.n_stop_strings = 2;
    script_init(&s, PT_BYTE_TOKENIZER_VOCAB, 6);
    s.turns = 3;
    s.text_reply = 1;
    s.check_text = true;
    s.tok = tok;
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, NULL, N, &eo, scripted_env, &s));
    pt_episode e1 = get(res, 0);
    ck_assert_int_eq(e1.turn_end[0], PT_TURN_STOP_STRING);
    ck_assert_int_eq(e1.turn_start[0] + e1.turn_len[0], first + 1);
    ck_assert(memcmp(e1.ids, e0.ids, (size_t)(first + 1) * sizeof *e0.ids) == 0);
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        for (int t = 0; t < e.n_turns; t++)
            if (e.turn_end[t] == PT_TURN_STOP_STRING) {
                const int32_t *x = e.ids + e.turn_start[t];
                int n = e.turn_len[t];
                ck_assert(n >= 2 && x[n - 2] == stop[0] && x[n - 1] == stop[1]);
            }
        check_structure(&e, &s, i);
    }
    pt_episode_results_free(res);
    pt_free(prompt);
    free(prompts);
    pt_generator_free(g);
    pt_model_free(m);
    pt_tokenizer_free(tok);
}
END_TEST

/* ---- into the rollout buffer, and a GRPO step ------------------------------------------------------------- */

START_TEST(test_rollout_buffer)
{
    pt_model *m = pt_test_tiny_llama(V_TINY, 4);
    enum { N = 6 };
    const int32_t lens[N] = { 4, 4, 4, 5, 5, 5 };
    int32_t *prompts = make_prompts(lens, N, V_TINY, 2);
    memcpy(prompts + 4, prompts, 4 * sizeof *prompts);
    memcpy(prompts + 8, prompts, 4 * sizeof *prompts);
    memcpy(prompts + 17, prompts + 12, 5 * sizeof *prompts);
    memcpy(prompts + 22, prompts + 12, 5 * sizeof *prompts);
    const int64_t groups[N] = { 0, 0, 0, 1, 1, 1 };
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, N, 64));
    pt_generate_options so = sampling(5, 1.0f, 3);
    const int32_t stop = 7;
    so.stop_ids = &stop;
    so.n_stop_ids = 1;
    pt_episode_options eo;
    ck_assert_ok(pt_episode_options_init(&eo));
    eo.sampling = &so;
    eo.n_reward_funcs = 2;
    script s;
    script_init(&s, V_TINY, 4);
    s.fail_g = 4; /* one episode fails: left out of the buffer */
    s.fail_turn = 0;
    s.fail_kind = FAIL_RETURN;
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    ck_assert_ok(pt_episodes_run(res, g, prompts, lens, groups, N, &eo, scripted_env, &s));

    pt_rollout_buffer *one = NULL, *buf = NULL;
    ck_assert_ok(pt_rollout_buffer_create(&one, NULL));
    int added = -1;
    ck_assert_status(pt_rollout_buffer_add_episodes(&added, one, res), PT_EINVAL,
                     "the episodes carry 2 rewards (n_reward_funcs) but buf has 1 reward function");
    ck_assert_int_eq(added, 0);
    pt_rollout_buffer_options bo;
    ck_assert_ok(pt_rollout_buffer_options_init(&bo));
    bo.n_reward_funcs = 2;
    ck_assert_ok(pt_rollout_buffer_create(&buf, &bo));
    ck_assert_ok(pt_rollout_buffer_add_episodes(&added, buf, res));
    ck_assert_int_eq(added, N - 1);
    int count = 0;
    count = pt_rollout_buffer_size(buf);
    ck_assert_int_eq(count, N - 1);
    int j = 0;
    for (int i = 0; i < N; i++) {
        pt_episode e = get(res, i);
        if (i == 4) {
            ck_assert_int_eq(e.end, PT_EPISODE_ERROR);
            continue;
        }
        float lp[128], r;
        /* the sampler's values go in as sampling_logprobs: pi_old is the
         * step's to record */
        ck_assert_ok(pt_rollout_buffer_get_logprobs(lp, buf, j, PT_ROLLOUT_SAMPLING));
        ck_assert(memcmp(lp, e.logprobs, (size_t)(e.n_ids - e.prompt_len) * sizeof *lp) == 0);
        ck_assert_status(pt_rollout_buffer_get_logprobs(lp, buf, j, PT_ROLLOUT_OLD), PT_ESTATE, "");
        ck_assert_ok(pt_rollout_buffer_get_reward(&r, buf, j, 0));
        ck_assert(r == e.rewards[0]);
        /* the environment rewarded every turn: one segment reward per turn
         * (each turn is a run of the mask: the script appends between
         * them), the buffer-weighted sum of the turn's rewards (weights 1,
         * the NaN one declined) */
        for (int t = 0; t < e.n_turns; t++) {
            float sr;
            ck_assert_ok(pt_rollout_buffer_get_segment_reward(&sr, buf, j, t));
            ck_assert(sr == e.turn_rewards[2 * t]);
        }
        float sr;
        ck_assert_status(pt_rollout_buffer_get_segment_reward(&sr, buf, j, e.n_turns), PT_EINVAL, "");
        j++;
    }
    /* a GRPO step trains on them (the masked ids are the sampled ones) */
    pt_optimizer *opt = NULL;
    pt_context *ctx = NULL;
    ck_assert_ok(pt_optimizer_create(&opt, m, NULL));
    ck_assert_ok(pt_context_create(&ctx, m, 4, 64));
    pt_grpo_stats gs;
    ck_assert_ok(pt_grpo_stats_init(&gs));
    ck_assert_ok(pt_grpo_step(&gs, opt, ctx, buf, NULL));
    pt_episode_stats st;
    pt_episode_stats_init(&st);
    ck_assert_ok(pt_episode_results_stats(&st, res));
    ck_assert(gs.tokens == (double)(st.sampled_tokens - (get(res, 4).n_ids - get(res, 4).prompt_len)));
    ck_assert(!gs.skipped);
    pt_context_free(ctx);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(one);
    pt_rollout_buffer_free(buf);
    pt_episode_results_free(res);
    pt_generator_free(g);
    free(prompts);
    pt_model_free(m);
}
END_TEST

/* ---- bad arguments and options ----------------------------------------------------------------------------------- */

static int never_env(pt_env_reply *rep, const pt_env_turn *t, void *payload)
{
    (void)t;
    (void)payload;
    rep->action = PT_ENV_DONE;
    return 0;
}

START_TEST(test_bad_options)
{
    pt_model *m = make_model(CFG_LLAMA, 1);
    pt_generator *g = NULL;
    ck_assert_ok(pt_generator_create(&g, m, 2, 40));
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_episode_results *res = NULL;
    ck_assert_ok(pt_episode_results_create(&res));
    const int32_t ids[4] = { 1, 2, 3, 4 }, lens[2] = { 2, 2 };
    pt_episode_options o;
    ck_assert_ok(pt_episode_options_init(&o));
    ck_assert_int_eq(o.max_turns, 4);
    ck_assert_int_eq(o.n_reward_funcs, 1);
    ck_assert_int_eq(o.max_total_tokens, 0);
#define RUN(opts) pt_episodes_run(res, g, ids, lens, NULL, 2, (opts), never_env, NULL)
    ck_assert_ok(RUN(NULL));
    ck_assert_ok(RUN(&o));
    ck_assert_status(pt_episodes_run(NULL, g, ids, lens, NULL, 2, &o, never_env, NULL), PT_EINVAL,
                     "pt_episodes_run: res is NULL");
    ck_assert_status(pt_episodes_run(res, NULL, ids, lens, NULL, 2, &o, never_env, NULL), PT_EINVAL,
                     "gen is NULL");
    ck_assert_status(pt_episodes_run(res, g, ids, lens, NULL, 2, &o, NULL, NULL), PT_EINVAL,
                     "env is NULL");
    ck_assert_status(pt_episodes_run(res, g, ids, lens, NULL, 0, &o, never_env, NULL), PT_EINVAL,
                     "pt_episodes_run: n 0 must be in 1");
    pt_episode_options b = o;
    b.size = 3;
    ck_assert_status(RUN(&b), PT_EINVAL, "pt_episode_options_init");
    b = o;
    b.max_turns = 0;
    ck_assert_status(RUN(&b), PT_EINVAL, "pt_episodes_run: max_turns 0 must be at least 1");
    b = o;
    b.max_total_tokens = 41;
    ck_assert_status(RUN(&b), PT_EINVAL, "max_total_tokens 41 must be in 0 .. the generator's max_seq 40");
    b.max_total_tokens = -1;
    ck_assert_status(RUN(&b), PT_EINVAL, "max_total_tokens -1");
    b.max_total_tokens = 2;
    ck_assert_status(RUN(&b), PT_EINVAL, "prompt 0 has length 2; it must be in 1 .. 1");
    b = o;
    b.n_stop_strings = 1;
    ck_assert_status(RUN(&b), PT_EINVAL, "stop_strings is NULL but n_stop_strings is 1");
    const char *empty[1] = { "" };
    b.stop_strings = empty;
    ck_assert_status(RUN(&b), PT_EINVAL, "stop_strings[0] is empty");
    const char *fine[1] = { "x" };
    b.stop_strings = fine;
    ck_assert_status(RUN(&b), PT_EINVAL, "tokenizer is NULL, but stop strings need one");
    b.n_stop_strings = -1;
    ck_assert_status(RUN(&b), PT_EINVAL, "n_stop_strings -1");
    b = o;
    b.decode_text = true;
    ck_assert_status(RUN(&b), PT_EINVAL, "tokenizer is NULL, but decode_text needs one");
    b.tokenizer = tok;
    ck_assert_ok(RUN(&b));
    b = o;
    b.n_reward_funcs = 0;
    ck_assert_status(RUN(&b), PT_EINVAL, "n_reward_funcs 0 must be in 1 .. 8");
    b.n_reward_funcs = 9;
    ck_assert_status(RUN(&b), PT_EINVAL, "n_reward_funcs 9");
    b = o;
    b.max_step_tokens = 1;
    ck_assert_status(RUN(&b), PT_EINVAL, "max_step_tokens 1 must be 0 or in 2 (the generator's max_batch");
    b.max_step_tokens = 41;
    ck_assert_status(RUN(&b), PT_EINVAL, ".. 40 (what a step of this generator holds)");
    b.max_step_tokens = 2;
    ck_assert_ok(RUN(&b));
    b = o;
    b.on_error = 2;
    ck_assert_status(RUN(&b), PT_EINVAL, "on_error 2 is not a pt_episode_on_error");
    pt_generate_options so;
    ck_assert_ok(pt_generate_options_init(&so));
    b = o;
    b.sampling = &so;
    so.max_new_tokens = 0;
    ck_assert_status(RUN(&b), PT_EINVAL, "pt_episodes_run: sampling.max_new_tokens 0 must be at least 1");
    so.max_new_tokens = 4;
    so.top_p = 2.0f;
    ck_assert_status(RUN(&b), PT_EINVAL, "sampling.top_p 2");
    so.top_p = 1.0f;
    so.temperature = -1.0f;
    ck_assert_status(RUN(&b), PT_EINVAL, "sampling.temperature -1");
    so.temperature = 1.0f;
    const int32_t bad_stop[1] = { 99 };
    so.stop_ids = bad_stop;
    so.n_stop_ids = 1;
    ck_assert_status(RUN(&b), PT_ERANGE, "stop id 99 (sampling.stop_ids[0])");
    so.n_stop_ids = 0;
    so.size = 5;
    ck_assert_status(RUN(&b), PT_EINVAL, "pt_generate_options_init");
    /* an older pt_generate_options without the stop ids: their default */
    so.size = offsetof(pt_generate_options, stop_ids);
    ck_assert_ok(RUN(&b));
    so.size = sizeof so;
    const int32_t bad_ids[4] = { 1, 2, 53, 4 }, zero[2] = { 0, 4 };
    ck_assert_status(pt_episodes_run(res, g, bad_ids, lens, NULL, 2, &o, never_env, NULL), PT_ERANGE,
                     "prompt 1 token 0 is id 53, outside the vocabulary [0, 53)");
    ck_assert_status(pt_episodes_run(res, g, ids, zero, NULL, 2, &o, never_env, NULL), PT_EINVAL,
                     "prompt 0 has length 0");
    /* results: reading them */
    pt_episode e;
    ck_assert_ok(pt_episode_init(&e));
    ck_assert_status(pt_episode_results_get(&e, res, 2), PT_EINVAL, "i 2 is outside 0 .. 1");
    ck_assert_status(pt_episode_results_get(NULL, res, 0), PT_EINVAL, "out is NULL");
    e.size = 2;
    ck_assert_status(pt_episode_results_get(&e, res, 0), PT_EINVAL, "pt_episode_init");
    pt_episode_stats st;
    pt_episode_stats_init(&st);
    st.size = 1;
    ck_assert_status(pt_episode_results_stats(&st, res), PT_EINVAL, "pt_episode_stats_init");
    ck_assert_status(pt_episode_results_create(NULL), PT_EINVAL, "out is NULL");
    ck_assert_status(pt_rollout_buffer_add_episodes(NULL, NULL, res), PT_EINVAL, "buf is NULL");
    /* names */
    ck_assert_str_eq(pt_turn_end_name(PT_TURN_STOP_STRING), "stop_string");
    ck_assert_str_eq(pt_episode_end_name(PT_EPISODE_MAX_TURNS), "max_turns");
    ck_assert_str_eq(pt_env_action_name(PT_ENV_DONE), "done");
    ck_assert_str_eq(pt_env_action_name(PT_ENV_PENDING), "pending");
    ck_assert_str_eq(pt_episode_on_error_name(PT_EPISODE_ERROR_STOP), "stop");
    ck_assert_ptr_null(pt_env_action_name(0));
    int v = -1;
    ck_assert_ok(pt_episode_end_from_name(&v, "stopped"));
    ck_assert_int_eq(v, PT_EPISODE_STOPPED);
    ck_assert_status(pt_turn_end_from_name(&v, "eos"), PT_EINVAL, "stop_id");
    ck_assert(pt_has_feature("episodes"));
    /* a generator made before a LoRA change */
    pt_lora_options lo;
    pt_lora_options_init(&lo);
    ck_assert_ok(pt_model_add_lora(m, &lo));
    ck_assert_status(RUN(&o), PT_ESTATE, "pt_episodes_run");
#undef RUN
    pt_episode_results_free(res);
    pt_episode_results_free(NULL);
    pt_tokenizer_free(tok);
    pt_generator_free(g);
    pt_model_free(m);
}
END_TEST

static Suite *episode_suite(void)
{
    Suite *s = suite_create("episode");
    TCase *tc = tcase_create("episode");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_three_turns_equal_forward, CFG_LLAMA, CFG_MISTRAL + 1);
    tcase_add_test(tc, test_three_turns_lora);
    tcase_add_test(tc, test_batch_independence);
    tcase_add_test(tc, test_one_turn_is_generate);
    tcase_add_test(tc, test_env_failures);
    tcase_add_test(tc, test_pending_answers);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_abort);
    tcase_add_test(tc, test_text_and_stop_strings);
    tcase_add_test(tc, test_rollout_buffer);
    tcase_add_test(tc, test_bad_options);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pt_test_run(episode_suite());
}
