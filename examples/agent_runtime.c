/* agent_runtime: how an agent runtime embeds libposttrain to fine-tune the
 * model it serves on its own traces.
 *
 * A toy tool-use task: the user asks for a+b; the assistant must call the
 * runtime's tool with "CALL add a b"; the runtime runs the tool and appends
 * its output as a tool message; the assistant then gives the final answer.
 *
 *   <|im_start|>system\nTools: add.<|im_end|>\n
 *   <|im_start|>user\n12+34<|im_end|>\n
 *   <|im_start|>assistant\nCALL add 12 34<|im_end|>\n     <- the model (in the loss)
 *   <|im_start|>tool\n46<|im_end|>\n                      <- the runtime (never in the loss)
 *   <|im_start|>assistant\n46<|im_end|>\n                 <- the model (in the loss)
 *
 * Every episode becomes token ids with a loss mask through the chat template
 * (pt_chat_render_ids: 1 exactly on the assistant's own tokens).  The policy
 * (a tiny Llama built from a config, byte tokenizer, no download) is warmed
 * up by SFT on synthetic successful episodes, then trained with GRPO on
 * groups of episodes it plays itself (pt_generate, seeded sampling), scored
 * by the runtime (correct answer, well-formed tool call).
 *
 * The program checks itself and exits non-zero if a tool-output token was
 * ever in a loss mask, or if training made held-out accuracy clearly worse.
 *
 * Public API only; builds against the installed library with
 *   cc -std=c11 agent_runtime.c $(pkg-config --cflags --libs posttrain) -lm */
#include <posttrain/posttrain.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SEQ 192     /* context and generator length (the longest episode fits) */
#define CALL_MAX 16     /* new tokens for the tool call turn */
#define ANSWER_MAX 8    /* new tokens for the answer turn */
#define TEXT_MAX 96

static const char *const SYSTEM_PROMPT = "tool: add";

typedef struct options {
    int sft_steps, grpo_steps, prompts, group, eval_n, hidden, layers, batch, threads;
    double sft_lr, grpo_lr, temperature, max_drop;
    uint64_t seed;
    bool quiet;
} options;

typedef struct problem {
    int a, b;
} problem;

/* One played episode. */
typedef struct episode {
    problem p;
    char call[TEXT_MAX], tool[TEXT_MAX], answer[TEXT_MAX];
    int32_t g1[CALL_MAX], g2[ANSWER_MAX];   /* the sampled tokens of each assistant turn */
    float lp1[CALL_MAX], lp2[ANSWER_MAX];   /* and their sampling log-probabilities */
    int n1, n2;
    bool stop1, stop2;                      /* the turn ended with <|im_end|> */
    bool wellformed, right_call, correct;   /* the rewards' inputs */
} episode;

typedef struct runtime {
    options o;
    pt_tokenizer *tok;
    pt_chat_template *tpl;
    pt_model *model;
    pt_context *ctx;
    pt_generator *gen;
    int max_rows;
    int32_t im_end;
    long episodes_checked, mask_violations;
} runtime;

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Held-out problems: the pairs whose hash falls in the top 1/8 (never trained on). */
static bool held_out(problem p)
{
    uint64_t x = (uint64_t)p.a * 1000003u + (uint64_t)p.b;
    return (splitmix(&x) & 7) == 0;
}

static problem draw(uint64_t *rng, bool want_held_out)
{
    for (;;) {
        problem p = { (int)(splitmix(rng) % 100), (int)(splitmix(rng) % 100) };
        if (held_out(p) == want_held_out)
            return p;
    }
}

static int fail(const char *what, int st)
{
    fprintf(stderr, "agent_runtime: %s: %s: %s\n", what, pt_status_name(st), pt_last_error());
    return st;
}

/* ---- the tool ------------------------------------------------------------------ */

/* A non-negative decimal of 1..4 digits at *s; advances *s. */
static bool parse_uint(const char **s, long *v)
{
    const char *p = *s;
    long x = 0;
    int n = 0;
    while (*p >= '0' && *p <= '9' && n < 5) {
        x = x * 10 + (*p - '0');
        p++;
        n++;
    }
    if (n == 0 || n > 4)
        return false;
    *s = p;
    *v = x;
    return true;
}

/* Run the tool call the assistant wrote; the output goes to the next turn. */
static bool run_tool(char *out, size_t cap, const char *call)
{
    const char *s = call;
    long x, y;
    if (strncmp(s, "CALL add ", 9) == 0) {
        s += 9;
        if (parse_uint(&s, &x) && *s == ' ') {
            s++;
            if (parse_uint(&s, &y) && *s == '\0') {
                snprintf(out, cap, "%ld", x + y);
                return true;
            }
        }
    }
    snprintf(out, cap, "error");
    return false;
}

/* ---- episodes as chat messages, ids and masks -------------------------------- */

static void user_text(char *buf, size_t cap, problem p)
{
    snprintf(buf, cap, "%02d+%02d", p.a, p.b);
}

/* The messages of an episode: system, user and, when given, the call, the
 * tool output and the answer. */
static size_t messages(pt_chat_message *m, const char *user, const char *call, const char *tool,
                       const char *answer)
{
    size_t n = 0;
    m[n++] = (pt_chat_message){ .role = PT_CHAT_ROLE_SYSTEM, .content = SYSTEM_PROMPT };
    m[n++] = (pt_chat_message){ .role = PT_CHAT_ROLE_USER, .content = user };
    if (call)
        m[n++] = (pt_chat_message){ .role = PT_CHAT_ROLE_ASSISTANT, .content = call };
    if (tool)
        m[n++] = (pt_chat_message){ .role = PT_CHAT_ROLE_TOOL, .content = tool, .name = "add" };
    if (answer)
        m[n++] = (pt_chat_message){ .role = PT_CHAT_ROLE_ASSISTANT, .content = answer };
    return n;
}

static int render(int32_t **ids, uint8_t **mask, size_t *n, const runtime *rt, const pt_chat_message *m,
                  size_t nm, bool generation_prompt)
{
    pt_chat_options co;
    int st = pt_chat_options_init(&co);
    if (st)
        return st;
    co.add_generation_prompt = generation_prompt;
    return pt_chat_render_ids(ids, mask, n, rt->tpl, rt->tok, m, nm, &co);
}

/* The rendered ids and assistant mask of a whole episode, checked
 * independently of the mask: every token from the end of the first
 * assistant turn to the start of the second (the tool message) and every
 * token of the prompt must have mask 0, and the mask must cover exactly the
 * two assistant turns' tokens.  A violation is counted (the program then
 * fails). *prompt_len is the length of the rollout prompt. */
static int episode_ids(int32_t **ids, uint8_t **mask, size_t *n, size_t *prompt_len, runtime *rt,
                       const episode *e)
{
    char user[32];
    user_text(user, sizeof user, e->p);
    pt_chat_message m[5];
    int32_t *a = NULL, *b = NULL;
    size_t na, nb, np;
    int st;
    *ids = NULL;
    *mask = NULL;
    if ((st = render(ids, mask, n, rt, m, messages(m, user, e->call, e->tool, e->answer), false)))
        return st;
    /* prompt: [system, user] + assistant header; a: up to the end of the
     * first assistant turn; b: up to the end of the tool message. */
    if ((st = render(&a, NULL, &np, rt, m, messages(m, user, NULL, NULL, NULL), true)) != PT_OK)
        goto out;
    pt_free(a);
    a = NULL;
    if ((st = render(&a, NULL, &na, rt, m, messages(m, user, e->call, NULL, NULL), false)) != PT_OK ||
        (st = render(&b, NULL, &nb, rt, m, messages(m, user, e->call, e->tool, NULL), false)) != PT_OK)
        goto out;
    bool ok = np <= na && na < nb && nb < *n && memcmp(a, *ids, na * sizeof *a) == 0 &&
              memcmp(b, *ids, nb * sizeof *b) == 0;
    size_t ones = 0;
    for (size_t i = 0; ok && i < *n; i++) {
        if ((*mask)[i] > 1 || (i < np && (*mask)[i]) || (i >= na && i < nb && (*mask)[i]))
            ok = false;
        ones += (*mask)[i];
    }
    /* Each assistant turn is its content plus <|im_end|>. */
    int32_t *c1 = NULL, *c2 = NULL;
    size_t n1 = 0, n2 = 0;
    if (ok && (st = pt_tokenizer_encode(&c1, &n1, rt->tok, e->call, strlen(e->call), 0)) == PT_OK &&
        (st = pt_tokenizer_encode(&c2, &n2, rt->tok, e->answer, strlen(e->answer), 0)) == PT_OK)
        ok = ones == n1 + 1 + n2 + 1;
    pt_free(c1);
    pt_free(c2);
    if (st)
        goto out;
    rt->episodes_checked++;
    if (!ok) {
        rt->mask_violations++;
        fprintf(stderr, "agent_runtime: MASK VIOLATION in the episode for %d+%d (call '%s', tool '%s')\n",
                e->p.a, e->p.b, e->call, e->tool);
    }
    *prompt_len = np;
out:
    pt_free(a);
    pt_free(b);
    if (st) {
        pt_free(*ids);
        pt_free(*mask);
        *ids = NULL;
        *mask = NULL;
    }
    return st;
}

/* ---- playing episodes ------------------------------------------------------------ */

/* Decode a turn's sampled tokens (without the final <|im_end|>) to text. */
static int turn_text(char *out, size_t cap, const runtime *rt, const int32_t *g, int n, bool stopped)
{
    char *text;
    size_t len;
    int st = pt_tokenizer_decode(&text, &len, rt->tok, g, (size_t)(stopped ? n - 1 : n), 0);
    if (st)
        return st;
    snprintf(out, cap, "%s", text);
    pt_free(text);
    return PT_OK;
}

/* One generation turn for n episodes: the prompt of each is the rendering
 * of its messages so far with the assistant header. */
static int generate_turn(runtime *rt, episode *ep, int n, int turn, double temperature, uint64_t seed)
{
    int32_t *prompts = NULL, *lens = NULL, *tokens = NULL, *ntok = NULL, *fin = NULL;
    float *lps = NULL;
    const int max_new = turn == 1 ? CALL_MAX : ANSWER_MAX;
    int st = PT_ENOMEM;
    prompts = malloc((size_t)n * MAX_SEQ * sizeof *prompts);
    lens = malloc((size_t)n * sizeof *lens);
    ntok = malloc((size_t)n * sizeof *ntok);
    fin = malloc((size_t)n * sizeof *fin);
    tokens = malloc((size_t)n * (size_t)max_new * sizeof *tokens);
    lps = malloc((size_t)n * (size_t)max_new * sizeof *lps);
    if (!prompts || !lens || !ntok || !fin || !tokens || !lps)
        goto out;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        char user[32];
        user_text(user, sizeof user, ep[i].p);
        pt_chat_message m[5];
        size_t nm = turn == 1 ? messages(m, user, NULL, NULL, NULL) : messages(m, user, ep[i].call, ep[i].tool, NULL);
        int32_t *ids;
        size_t nid;
        if ((st = render(&ids, NULL, &nid, rt, m, nm, true)))
            goto out;
        if (nid + (size_t)max_new > MAX_SEQ) {
            pt_free(ids);
            st = PT_ERANGE;
            fprintf(stderr, "agent_runtime: a prompt of %zu tokens does not fit\n", nid);
            goto out;
        }
        memcpy(prompts + off, ids, nid * sizeof *ids);
        pt_free(ids);
        lens[i] = (int32_t)nid;
        off += nid;
    }
    pt_generate_options go;
    pt_generate_options_init(&go);
    go.max_new_tokens = max_new;
    go.temperature = (float)temperature;
    go.seed = seed;
    go.stop_ids = &rt->im_end;
    go.n_stop_ids = 1;
    if ((st = pt_generate(rt->gen, prompts, lens, n, &go, tokens, ntok, fin, lps)))
        goto out;
    for (int i = 0; i < n; i++) {
        episode *e = &ep[i];
        const int32_t *t = tokens + (size_t)i * max_new;
        const float *l = lps + (size_t)i * max_new;
        bool stopped = fin[i] == PT_FINISH_STOP;
        if (turn == 1) {
            e->n1 = ntok[i];
            e->stop1 = stopped;
            memcpy(e->g1, t, (size_t)ntok[i] * sizeof *t);
            memcpy(e->lp1, l, (size_t)ntok[i] * sizeof *l);
            if ((st = turn_text(e->call, sizeof e->call, rt, t, ntok[i], stopped)))
                goto out;
            e->wellformed = run_tool(e->tool, sizeof e->tool, e->call);
            char want[TEXT_MAX];
            snprintf(want, sizeof want, "CALL add %02d %02d", e->p.a, e->p.b);
            e->right_call = strcmp(e->call, want) == 0;
        } else {
            e->n2 = ntok[i];
            e->stop2 = stopped;
            memcpy(e->g2, t, (size_t)ntok[i] * sizeof *t);
            memcpy(e->lp2, l, (size_t)ntok[i] * sizeof *l);
            if ((st = turn_text(e->answer, sizeof e->answer, rt, t, ntok[i], stopped)))
                goto out;
            char want[16];
            snprintf(want, sizeof want, "%d", e->p.a + e->p.b);
            e->correct = strcmp(e->answer, want) == 0;
        }
    }
    st = PT_OK;
out:
    if (st == PT_ENOMEM && !(prompts && lens && ntok && fin && tokens && lps))
        fprintf(stderr, "agent_runtime: out of memory\n");
    free(prompts);
    free(lens);
    free(tokens);
    free(ntok);
    free(fin);
    free(lps);
    return st;
}

/* Play n episodes: call turn, tool, answer turn. */
static int play(runtime *rt, episode *ep, int n, double temperature, uint64_t seed)
{
    int st;
    for (int start = 0; start < n; start += rt->max_rows) {
        int rows = n - start < rt->max_rows ? n - start : rt->max_rows;
        if ((st = generate_turn(rt, ep + start, rows, 1, temperature, seed * 2 + (uint64_t)start)) ||
            (st = generate_turn(rt, ep + start, rows, 2, temperature, seed * 2 + 1 + (uint64_t)start)))
            return st;
    }
    return PT_OK;
}

/* Greedy episodes on the held-out problems: fraction answered correctly and
 * fraction with a well-formed tool call. */
static int evaluate(double *acc, double *formed, runtime *rt, const problem *probs, int n, const char *label,
                    bool show)
{
    episode *ep = calloc((size_t)n, sizeof *ep);
    if (!ep)
        return PT_ENOMEM;
    for (int i = 0; i < n; i++)
        ep[i].p = probs[i];
    int st = play(rt, ep, n, 0.0, 0);
    int c = 0, f = 0;
    for (int i = 0; !st && i < n; i++) {
        c += ep[i].correct;
        f += ep[i].wellformed;
        /* Every evaluated episode goes through the mask check too. */
        int32_t *ids;
        uint8_t *mask;
        size_t nid, np;
        if ((st = episode_ids(&ids, &mask, &nid, &np, rt, &ep[i])))
            break;
        pt_free(ids);
        pt_free(mask);
    }
    if (!st) {
        *acc = (double)c / n;
        *formed = (double)f / n;
        printf("[eval] %-12s held-out accuracy %5.1f%% (%d/%d), well-formed tool calls %5.1f%%\n", label,
               100 * *acc, c, n, 100 * *formed);
        for (int i = 0; show && i < 2 && i < n; i++)
            printf("[eval]   %d+%d -> call '%s' -> tool '%s' -> answer '%s' (%s)\n", ep[i].p.a, ep[i].p.b,
                   ep[i].call, ep[i].tool, ep[i].answer, ep[i].correct ? "right" : "wrong");
    }
    free(ep);
    return st;
}

/* ---- phase 1: SFT on synthetic successful episodes ------------------------ */

static int sft_phase(runtime *rt, uint64_t *rng)
{
    const options *o = &rt->o;
    if (o->sft_steps == 0)
        return PT_OK;
    pt_dataset_options dopt;
    pt_dataset_options_init(&dopt);
    dopt.max_length = MAX_SEQ;
    dopt.batch_size = o->batch;
    dopt.seed = o->seed;
    pt_dataset *data = NULL;
    pt_optimizer *opt = NULL;
    int st = pt_dataset_create(&data, &dopt);
    if (st)
        return fail("dataset", st);
    /* Enough synthetic episodes for the steps asked for (one epoch), at most 2000. */
    const int n_examples = o->sft_steps * o->batch < 2000 ? o->sft_steps * o->batch : 2000;
    for (int i = 0; i < n_examples; i++) {
        episode e;
        memset(&e, 0, sizeof e);
        e.p = draw(rng, false);
        snprintf(e.call, sizeof e.call, "CALL add %02d %02d", e.p.a, e.p.b);
        run_tool(e.tool, sizeof e.tool, e.call);
        snprintf(e.answer, sizeof e.answer, "%d", e.p.a + e.p.b);
        int32_t *ids;
        uint8_t *mask;
        size_t n, np;
        if ((st = episode_ids(&ids, &mask, &n, &np, rt, &e))) {
            fail("episode", st);
            goto out;
        }
        st = pt_dataset_add(data, ids, mask, n);   /* the mask: assistant tokens only */
        pt_free(ids);
        pt_free(mask);
        if (st) {
            fail("pt_dataset_add", st);
            goto out;
        }
    }
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = o->sft_lr;
    oo.weight_decay = 0.01;
    oo.schedule = PT_SCHEDULE_COSINE;
    oo.warmup_steps = o->sft_steps / 10;
    oo.total_steps = o->sft_steps > 0 ? o->sft_steps : 1;
    oo.min_lr_ratio = 0.1;
    if ((st = pt_optimizer_create(&opt, rt->model, &oo))) {
        fail("optimizer", st);
        goto out;
    }
    double t0 = now_s(), tokens = 0, ema = NAN;
    for (int s = 1; s <= o->sft_steps; s++) {
        pt_batch b;
        pt_batch_init(&b);
        const float *w;
        pt_sft_stats ss;
        pt_sft_stats_init(&ss);
        if ((st = pt_dataset_next_batch(&b, &w, data)) || (st = pt_sft_step(&ss, opt, rt->ctx, &b, &w, 1))) {
            fail("sft step", st);
            goto out;
        }
        tokens += ss.tokens;
        ema = isnan(ema) ? ss.loss : 0.9 * ema + 0.1 * ss.loss;
        if (!o->quiet && (s % 50 == 0 || s == o->sft_steps))
            printf("[sft]  step %4d/%d  loss %.4f  lr %.2e  grad_norm %.3f  %.0f trained tokens/s\n", s,
                   o->sft_steps, ema, ss.lr, ss.grad_norm, tokens / (now_s() - t0));
    }
    printf("[sft]  %d steps on %d synthetic episodes in %.1f s, final loss %.4f\n", o->sft_steps, n_examples,
           now_s() - t0, ema);
out:
    pt_optimizer_free(opt);
    pt_dataset_free(data);
    return st;
}

/* ---- phase 2: GRPO on the policy's own episodes ----------------------------- */

/* The runtime's rewards: the final answer is right (1); the tool call is
 * well-formed (0.1) and passes the user's operands (0.4 more). */
static const char *const REWARD_NAMES[3] = { "correct", "tool_call", "call_args" };
static const double REWARD_WEIGHTS[3] = { 1.0, 0.1, 0.4 };

static int grpo_phase(runtime *rt, uint64_t *rng)
{
    const options *o = &rt->o;
    const int n = o->prompts * o->group;
    pt_rollout_buffer_options bo;
    pt_rollout_buffer_options_init(&bo);
    bo.n_reward_funcs = 3;
    bo.reward_names = REWARD_NAMES;
    bo.reward_weights = REWARD_WEIGHTS;
    pt_rollout_buffer *buf = NULL;
    pt_optimizer *opt = NULL;
    episode *ep = calloc((size_t)n, sizeof *ep);
    float *old_lp = malloc(MAX_SEQ * sizeof *old_lp);
    int st = PT_ENOMEM;
    if (!ep || !old_lp) {
        fprintf(stderr, "agent_runtime: out of memory\n");
        goto out;
    }
    if ((st = pt_rollout_buffer_create(&buf, &bo))) {
        fail("rollout buffer", st);
        goto out;
    }
    pt_optimizer_options oo;
    pt_optimizer_options_init(&oo);
    oo.lr = o->grpo_lr;
    if ((st = pt_optimizer_create(&opt, rt->model, &oo))) {
        fail("optimizer", st);
        goto out;
    }
    pt_grpo_options go;
    pt_grpo_options_init(&go);   /* DAPO loss, group-scaled advantages, beta 0 */
    double t_all = now_s();
    for (int it = 1; it <= o->grpo_steps; it++) {
        double t0 = now_s();
        for (int p = 0; p < o->prompts; p++) {
            problem pr = draw(rng, false);
            for (int g = 0; g < o->group; g++) {
                memset(&ep[p * o->group + g], 0, sizeof *ep);
                ep[p * o->group + g].p = pr;
            }
        }
        if ((st = play(rt, ep, n, o->temperature, o->seed * 1000003u + (uint64_t)it))) {
            fail("generate", st);
            goto out;
        }
        double t_gen = now_s() - t0, gen_tokens = 0;
        int aligned = 0;
        for (int i = 0; i < n; i++) {
            const episode *e = &ep[i];
            int32_t *ids;
            uint8_t *mask;
            size_t nid, np;
            gen_tokens += e->n1 + e->n2;
            if ((st = episode_ids(&ids, &mask, &nid, &np, rt, e))) {
                fail("episode", st);
                goto out;
            }
            /* The sampling log-probabilities line up with the completion's
             * mask runs when each turn ended with <|im_end|> and its text
             * re-encodes to the sampled tokens; otherwise the step records
             * the policy's own (NULL), which at mu = 1 are the same values. */
            const int ncomp = (int)(nid - np);
            bool ok = e->stop1 && e->stop2;
            int run = 0, j1 = 0, j2 = 0;
            for (int j = 0; ok && j < ncomp; j++) {
                uint8_t mk = mask[np + (size_t)j];
                int32_t id = ids[np + (size_t)j];
                old_lp[j] = 0.0f;
                if (mk && (j == 0 || !mask[np + (size_t)j - 1]))
                    run++;
                if (!mk)
                    continue;
                if (run == 1 && j1 < e->n1 && e->g1[j1] == id)
                    old_lp[j] = e->lp1[j1++];
                else if (run == 2 && j2 < e->n2 && e->g2[j2] == id)
                    old_lp[j] = e->lp2[j2++];
                else
                    ok = false;
            }
            ok = ok && run == 2 && j1 == e->n1 && j2 == e->n2;
            aligned += ok;
            const float rewards[3] = { e->correct ? 1.0f : 0.0f, e->wellformed ? 1.0f : 0.0f,
                                       e->right_call ? 1.0f : 0.0f };
            pt_rollout_sample s;
            pt_rollout_sample_init(&s);
            s.ids = ids;
            s.n_ids = (int)nid;
            s.prompt_len = (int)np;
            s.loss_mask = mask + np;        /* assistant tokens 1, tool output 0 */
            s.old_logprobs = ok ? old_lp : NULL;
            s.group = i / o->group;
            s.rewards = rewards;
            s.truncated = !e->stop1 || !e->stop2;
            st = pt_rollout_buffer_add(buf, &s);
            pt_free(ids);
            pt_free(mask);
            if (st) {
                fail("pt_rollout_buffer_add", st);
                goto out;
            }
        }
        pt_grpo_stats gs;
        pt_grpo_stats_init(&gs);
        if ((st = pt_grpo_step(&gs, opt, rt->ctx, buf, &go))) {
            fail("pt_grpo_step", st);
            goto out;
        }
        pt_rollout_buffer_clear(buf);
        if (!o->quiet)
            printf("[grpo] iter %3d/%d  reward %.3f +- %.3f  correct %.2f  tool_call %.2f  call_args %.2f  zero_std %.2f  "
                   "clip %.3f  len %.1f  loss %+.4f  grad_norm %.3f  logprobs from sampling %d/%d  "
                   "gen %.0f tok/s  train %.0f tok/s%s\n",
                   it, o->grpo_steps, gs.reward, gs.reward_std, gs.reward_func_mean[0], gs.reward_func_mean[1],
                   gs.reward_func_mean[2], gs.frac_reward_zero_std, gs.clip_ratio_region, gs.completion_mean_length, gs.loss,
                   gs.grad_norm, aligned, n, gen_tokens / t_gen, gs.tokens_per_second,
                   gs.skipped ? "  (skipped)" : "");
    }
    printf("[grpo] %d iterations of %d prompts x %d episodes in %.1f s\n", o->grpo_steps, o->prompts, o->group,
           now_s() - t_all);
    st = PT_OK;
out:
    free(ep);
    free(old_lp);
    pt_optimizer_free(opt);
    pt_rollout_buffer_free(buf);
    return st;
}

/* ---- main --------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: agent_runtime [options]\n\n"
        "Plays a toy tool-use task (the assistant calls 'CALL add a b', the runtime\n"
        "answers as a tool message, the assistant answers), then fine-tunes a tiny\n"
        "model on its episodes: SFT warm-up, then GRPO.  Exits 1 if a tool-output\n"
        "token was ever in a loss mask or training made held-out accuracy worse.\n\n"
        "  --sft-steps N (350)   --sft-lr F (3e-3)    --batch N (16)\n"
        "  --steps N (8)         GRPO iterations      --grpo-lr F (1e-4)\n"
        "  --prompts N (8)       --group N (8)        --temperature F (1.0)\n"
        "  --eval N (48)         held-out problems    --max-drop F (0.2)\n"
        "  --hidden N (64)       --layers N (2)       --seed N (1)   --threads N (2)\n"
        "  --quiet               only the phase summaries\n");
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int parse_options(options *o, int argc, char **argv)
{
    *o = (options){ .sft_steps = 350, .grpo_steps = 8, .prompts = 8, .group = 8, .eval_n = 48, .hidden = 64,
                    .layers = 2, .batch = 16, .threads = 2, .sft_lr = 3e-3, .grpo_lr = 1e-4,
                    .temperature = 1.0, .max_drop = 0.2, .seed = 1 };
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(k, "--quiet")) {
            o->quiet = true;
            continue;
        }
        double v;
        if (i + 1 >= argc) {
            fprintf(stderr, "agent_runtime: %s needs a value\n", k);
            return 2;
        }
        const char *val = argv[++i];
        struct {
            const char *name;
            double lo, hi;
            bool integer;
        } spec[] = { { "--sft-steps", 0, 100000, true }, { "--steps", 0, 100000, true },
                     { "--prompts", 1, 64, true }, { "--group", 2, 64, true }, { "--eval", 1, 4096, true },
                     { "--hidden", 16, 1024, true }, { "--layers", 1, 32, true }, { "--batch", 1, 256, true },
                     { "--threads", 1, 256, true }, { "--seed", 0, 4294967295.0, true },
                     { "--sft-lr", 1e-7, 1, false }, { "--grpo-lr", 1e-8, 1, false },
                     { "--temperature", 0.05, 10, false }, { "--max-drop", 0, 1, false } };
        size_t which = sizeof spec / sizeof spec[0];
        for (size_t s = 0; s < sizeof spec / sizeof spec[0]; s++)
            if (!strcmp(k, spec[s].name))
                which = s;
        if (which == sizeof spec / sizeof spec[0]) {
            fprintf(stderr, "agent_runtime: unknown option '%s' (see --help)\n", k);
            return 2;
        }
        if (parse_num(val, spec[which].lo, spec[which].hi, &v) || (spec[which].integer && v != floor(v))) {
            fprintf(stderr, "agent_runtime: %s needs %s in [%g, %g], not '%s'\n", k,
                    spec[which].integer ? "an integer" : "a number", spec[which].lo, spec[which].hi, val);
            return 2;
        }
        switch (which) {
        case 0: o->sft_steps = (int)v; break;
        case 1: o->grpo_steps = (int)v; break;
        case 2: o->prompts = (int)v; break;
        case 3: o->group = (int)v; break;
        case 4: o->eval_n = (int)v; break;
        case 5: o->hidden = (int)v; break;
        case 6: o->layers = (int)v; break;
        case 7: o->batch = (int)v; break;
        case 8: o->threads = (int)v; break;
        case 9: o->seed = (uint64_t)v; break;
        case 10: o->sft_lr = v; break;
        case 11: o->grpo_lr = v; break;
        case 12: o->temperature = v; break;
        default: o->max_drop = v; break;
        }
    }
    if (o->hidden % 16) {
        fprintf(stderr, "agent_runtime: --hidden must be a multiple of 16\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    runtime rt;
    memset(&rt, 0, sizeof rt);
    int rc = parse_options(&rt.o, argc, argv);
    if (rc)
        return rc == 1 ? 0 : rc;
    const options *o = &rt.o;
    const double t_start = now_s();
    problem *eval = NULL;
    int st;
    rc = 1;
    if ((st = pt_set_num_threads(o->threads))) {
        fail("threads", st);
        return 1;
    }
    if ((st = pt_tokenizer_create_bytes(&rt.tok)) || (st = pt_chat_template_from_name(&rt.tpl, "chatml"))) {
        fail("tokenizer and chat template", st);
        goto done;
    }
    if ((st = pt_tokenizer_token_to_id(&rt.im_end, rt.tok, "<|im_end|>"))) {
        fail("<|im_end|>", st);
        goto done;
    }
    pt_model_config cfg;
    pt_model_config_init(&cfg);
    cfg.arch = PT_ARCH_LLAMA;
    cfg.vocab_size = pt_tokenizer_vocab_size(rt.tok);
    cfg.hidden_size = o->hidden;
    cfg.intermediate_size = 3 * o->hidden;
    cfg.num_hidden_layers = o->layers;
    cfg.num_attention_heads = o->hidden / 16;
    cfg.num_key_value_heads = cfg.num_attention_heads;
    cfg.head_dim = 16;
    cfg.max_position_embeddings = MAX_SEQ;
    cfg.rms_norm_eps = 1e-5;
    cfg.bos_token_id = pt_tokenizer_bos_id(rt.tok);
    cfg.eos_token_id = rt.im_end;
    rt.max_rows = o->prompts * o->group > o->eval_n ? o->prompts * o->group : o->eval_n;
    if (rt.max_rows > 64)
        rt.max_rows = 64;
    int ctx_rows = o->batch > rt.max_rows ? o->batch : rt.max_rows;
    if ((st = pt_model_create(&rt.model, &cfg, o->seed)) ||
        (st = pt_context_create(&rt.ctx, rt.model, ctx_rows, MAX_SEQ)) ||
        (st = pt_generator_create(&rt.gen, rt.model, rt.max_rows, MAX_SEQ))) {
        fail("model", st);
        goto done;
    }
    uint64_t params = 0;
    pt_model_num_params(&params, rt.model);
    printf("agent_runtime: libposttrain %s, llama %d layers x hidden %d (%.2fM parameters), byte tokenizer, "
           "%s template, seed %llu, %d threads\n",
           pt_version_string(), o->layers, o->hidden, (double)params / 1e6, pt_chat_template_name(rt.tpl),
           (unsigned long long)o->seed, pt_get_num_threads());

    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 7;
    eval = malloc((size_t)o->eval_n * sizeof *eval);
    if (!eval)
        goto done;
    for (int i = 0; i < o->eval_n; i++)
        eval[i] = draw(&rng, true);
    double acc0, acc1, acc2, f0, f1, f2;
    if ((st = evaluate(&acc0, &f0, &rt, eval, o->eval_n, "before", false)))
        goto fail_st;
    if ((st = sft_phase(&rt, &rng)))
        goto done;
    if ((st = evaluate(&acc1, &f1, &rt, eval, o->eval_n, "after SFT", true)))
        goto fail_st;
    if ((st = grpo_phase(&rt, &rng)))
        goto done;
    if ((st = evaluate(&acc2, &f2, &rt, eval, o->eval_n, "after GRPO", true)))
        goto fail_st;

    rc = 0;
    printf("[check] episodes checked %ld, tool-output tokens in a loss mask: %ld\n", rt.episodes_checked,
           rt.mask_violations);
    if (rt.mask_violations || rt.episodes_checked == 0) {
        printf("[check] FAIL: the loss mask covered a non-assistant token\n");
        rc = 1;
    }
    bool worse = acc2 < acc0 - o->max_drop || (o->grpo_steps > 0 && acc2 < acc1 - o->max_drop);
    printf("[check] held-out accuracy %.1f%% -> %.1f%% (SFT) -> %.1f%% (GRPO), allowed drop %.0f points: %s\n",
           100 * acc0, 100 * acc1, 100 * acc2, 100 * o->max_drop, worse ? "FAIL" : "ok");
    if (worse)
        rc = 1;
    printf("agent_runtime: %s in %.1f s\n", rc ? "FAILED" : "passed", now_s() - t_start);
    goto done;
fail_st:
    fail("evaluate", st);
done:
    free(eval);
    pt_generator_free(rt.gen);
    pt_context_free(rt.ctx);
    pt_model_free(rt.model);
    pt_chat_template_free(rt.tpl);
    pt_tokenizer_free(rt.tok);
    return rc;
}
