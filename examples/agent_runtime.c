/* agent_runtime: how an agent runtime embeds libposttrain to fine-tune the
 * model it serves on its own traces.
 *
 * A toy tool-use task: the user asks for a+b; the assistant must call the
 * runtime's tool with "CALL add a b"; the runtime runs the tool and appends
 * its output as a tool message; the assistant then gives the final answer.
 *
 *   <|im_start|>system\ntool: add<|im_end|>\n
 *   <|im_start|>user\n12+34<|im_end|>\n
 *   <|im_start|>assistant\nCALL add 12 34<|im_end|>    <- sampled (turn 0, in the loss)
 *   \n<|im_start|>tool\n46<|im_end|>\n<|im_start|>assistant\n
 *                                                      <- appended by the runtime (never in the loss)
 *   46<|im_end|>                                       <- sampled (turn 1, in the loss)
 *
 * The policy (a tiny Llama built from a config, byte tokenizer, no
 * download) is warmed up by SFT on the traces of an imperfect scripted
 * teacher (it passes a wrong argument to the tool, or ignores the tool's
 * result, in a fixed share of its traces: like a real agent's logs), each
 * rendered with the chat template (pt_chat_render_ids: mask 1 exactly on the
 * assistant's tokens).  Then GRPO on groups of episodes the policy plays
 * itself with the episode engine (pt_episodes_run): the runtime's
 * environment callback runs the tool and appends the tool message, ends the
 * episode after the answer turn, and rewards each turn: the call turn by
 * whether the call is right, the answer turn by whether the answer is the
 * tool's result.  pt_rollout_buffer_add_episodes turns these into
 * per-segment rewards, so a right call followed by a wrong answer
 * reinforces the call and not the answer.  The loss is on the tokens as
 * sampled, never on re-rendered text.
 *
 * Held-out problems (pairs never trained on, drawn from their own random
 * stream) are evaluated greedily and sampled, before training, after SFT
 * and after GRPO.  The program checks itself and exits non-zero if a token
 * the model did not sample (the tool message, an end-of-turn it did not
 * produce) was ever in a loss mask, or if GRPO made held-out accuracy
 * clearly worse than SFT.
 *
 * With --out DIR the run lives in a run directory of the library's run
 * layer: a metrics row per step, checkpoints every --save-every steps, and
 * --resume auto continues a killed run to exactly the result it would have
 * had (section "the run directory"; docs/agents.md).
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

#define MAX_SEQ 160     /* context and generator length (the longest episode fits) */
#define TURN_MAX 16     /* new tokens per assistant turn */
#define TEXT_MAX 96
#define MAX_ROWS 64     /* the generator's rows */

static const char *const SYSTEM_PROMPT = "tool: add";

typedef struct options {
    int sft_steps, grpo_steps, prompts, group, eval_n, hidden, layers, batch, threads;
    double sft_lr, grpo_lr, temperature, max_drop, slip, habit;
    bool per_turn;      /* --credit turn (per-turn rewards) or episode (one reward) */
    uint64_t seed;
    bool quiet;
    /* The run directory (section "the run directory"): NULL without --out. */
    const char *out, *resume;   /* --out DIR, --resume auto|CHECKPOINT */
    bool overwrite;
    int save_every, keep_last, stop_after;
} options;

typedef struct problem {
    int a, b;
} problem;

/* An SFT trace of the teacher. */
typedef struct episode {
    problem p;
    char call[TEXT_MAX], tool[TEXT_MAX], answer[TEXT_MAX];
} episode;

typedef struct scores {
    double correct, right_call, used_tool;
} scores;

/* The evaluations, in rt->ev: greedy and sampled, before training, after SFT, after GRPO. */
enum { EV_BEFORE = 0, EV_SFT = 2, EV_GRPO = 4, N_EV = 6 };

typedef struct runtime {
    options o;
    pt_tokenizer *tok;
    pt_chat_template *tpl;
    pt_model *model;
    pt_context *ctx;
    pt_generator *gen;
    pt_episode_results *res;
    int32_t im_end;
    long traces_checked, episodes_checked, template_checked, mask_violations;
    scores ev[N_EV];
    /* The run directory (--out), NULL without; what a resume restores. */
    pt_run *run;
    char phase[8];              /* the resumed checkpoint's phase ("sft", "grpo", "done"); "" fresh */
    bool pending;               /* the resumed checkpoint is still to be loaded */
    uint64_t eval_rng, teacher_rng;   /* the streams' states once drawn (checked on resume) */
    double sft_ema, zero_std;   /* running figures the summaries print */
    bool stopped;               /* --stop-after reached */
} runtime;

/* The defaults: what docs/agents.md measured. */
static const options DEFAULTS = { .sft_steps = 400, .grpo_steps = 120, .prompts = 8, .group = 8, .eval_n = 400,
                                  .hidden = 64, .layers = 2, .batch = 16, .threads = 1, .sft_lr = 3e-3,
                                  .grpo_lr = 3e-4, .temperature = 1.0, .max_drop = 0.1, .slip = 0.4,
                                  .habit = 0.7,
                                  .per_turn = true, .seed = 1 };

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
    rt->traces_checked++;
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

/* ---- playing episodes with the episode engine ------------------------------------ */

/* What the environment saw of one episode. */
typedef struct ep_state {
    char call[TEXT_MAX], tool[TEXT_MAX], answer[TEXT_MAX];
    bool call_stop, answer_stop;            /* the turn ended with <|im_end|> */
    bool formed, right_call, used_tool, correct;
    int turns;                              /* turns the environment saw: 1 or 2 */
    int call_end;                           /* n_ids after the call turn: the append starts here */
    int answer_start, answer_end;           /* the answer turn's sampled ids */
} ep_state;

/* The environment's payload: the problems of the run, what it saw, and the
 * reply's storage (it must outlast the callback). */
typedef struct play_state {
    runtime *rt;
    const problem *probs;
    ep_state *st;
    char msg[TEXT_MAX + 64];          /* the tool message: its markup and the tool's output */
    float turn_rewards[2], rewards[2];
} play_state;

static const float NO_REWARD = NAN;

/* A turn's text without its final <|im_end|> (special tokens kept as text,
 * NUL bytes as DEL). */
static void turn_content(char *out, size_t cap, const pt_env_turn *t, bool *stopped)
{
    size_t len = t->turn_text_len;
    const char *end_tag = "<|im_end|>";
    const size_t tag = strlen(end_tag);
    *stopped = t->turn_end == PT_TURN_STOP_ID;
    if (*stopped && len >= tag && memcmp(t->turn_text + len - tag, end_tag, tag) == 0)
        len -= tag;
    if (len >= cap)
        len = cap - 1;
    memcpy(out, t->turn_text, len);
    out[len] = '\0';
    for (size_t i = 0; i < len; i++)   /* a sampled NUL byte: kept visible (not printable) */
        if (out[i] == '\0')
            out[i] = '\x7f';
}

/* The runtime's environment.  Turn 0 (the call): run the tool and append the
 * tool message and the next assistant header, or end the episode when the
 * call did not end with <|im_end|> (no end-of-turn token the model did not
 * produce is ever appended).  Turn 1 (the answer): done.  Rewards per turn
 * (call: the call is right; answer: the answer is the tool's result), or
 * with --credit episode one reward for the episode (the answer is right). */
static int environment(pt_env_reply *rep, const pt_env_turn *t, void *payload)
{
    play_state *ps = payload;
    ep_state *e = &ps->st[t->episode];
    const problem p = ps->probs[t->episode];
    const bool per_turn = ps->rt->o.per_turn;
    if (t->turn == 0) {
        turn_content(e->call, sizeof e->call, t, &e->call_stop);
        e->turns = 1;
        e->call_end = t->n_ids;
        e->formed = e->call_stop && run_tool(e->tool, sizeof e->tool, e->call);
        if (!e->call_stop)
            snprintf(e->tool, sizeof e->tool, "error");
        char want[TEXT_MAX];
        snprintf(want, sizeof want, "CALL add %02d %02d", p.a, p.b);
        e->right_call = e->call_stop && strcmp(e->call, want) == 0;
        ps->turn_rewards[0] = e->right_call ? 1.0f : 0.0f;
        ps->turn_rewards[1] = NO_REWARD;
        if (per_turn)
            rep->turn_rewards = ps->turn_rewards;
        if (!e->call_stop || t->final) {
            ps->rewards[0] = per_turn ? ps->turn_rewards[0] : NO_REWARD;
            ps->rewards[1] = 0.0f;
            rep->action = PT_ENV_DONE;
            rep->rewards = ps->rewards;
            return 0;
        }
        snprintf(ps->msg, sizeof ps->msg, "\n<|im_start|>tool\n%s<|im_end|>\n<|im_start|>assistant\n", e->tool);
        rep->action = PT_ENV_APPEND;
        rep->text = ps->msg;
        return 0;
    }
    turn_content(e->answer, sizeof e->answer, t, &e->answer_stop);
    e->turns = 2;
    e->answer_start = t->turn_start;
    e->answer_end = t->n_ids;
    char want[16];
    snprintf(want, sizeof want, "%d", p.a + p.b);
    e->correct = e->answer_stop && strcmp(e->answer, want) == 0;
    e->used_tool = e->answer_stop && e->formed && strcmp(e->answer, e->tool) == 0;
    /* An answer after a malformed call had no result to use: no reward
     * (NaN: its segment gets advantage 0). */
    ps->turn_rewards[0] = NO_REWARD;
    ps->turn_rewards[1] = e->formed ? (e->used_tool ? 1.0f : 0.0f) : NO_REWARD;
    if (per_turn)
        rep->turn_rewards = ps->turn_rewards;
    ps->rewards[0] = per_turn ? (e->right_call ? 1.0f : 0.0f) : NO_REWARD;
    ps->rewards[1] = e->correct ? 1.0f : 0.0f;
    rep->action = PT_ENV_DONE;
    rep->rewards = ps->rewards;
    return 0;
}

/* Printable ASCII, no special token: the text re-encodes to the ids it was
 * decoded from. */
static bool printable(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return false;
    return true;
}

/* Check every episode of a run against what the environment saw of it: the
 * loss mask is 1 exactly on the turns' sampled ids (the prompt and the
 * appended tool message 0; an <|im_end|> in the mask only where a turn
 * ended on it), and, where the texts have no special token, the ids and the
 * mask are the chat template's rendering of the conversation.  A violation
 * is counted (the program then fails). */
static int check_episodes(runtime *rt, const play_state *ps, int n)
{
    for (int i = 0; i < n; i++) {
        pt_episode ep;
        pt_episode_init(&ep);
        int st = pt_episode_results_get(&ep, rt->res, i);
        if (st)
            return st;
        const ep_state *e = &ps->st[i];
        const int end = e->turns == 2 ? e->answer_end : e->call_end;
        bool ok = ep.end == PT_EPISODE_DONE && e->turns >= 1 && ep.n_ids == end && e->call_end > ep.prompt_len;
        for (int q = ep.prompt_len; ok && q < ep.n_ids; q++) {
            const bool sampled = q < e->call_end || (e->turns == 2 && q >= e->answer_start && q < e->answer_end);
            const uint8_t m = ep.loss_mask[q - ep.prompt_len];
            if (m != (sampled ? 1 : 0))
                ok = false;
            if (m && ep.ids[q] == rt->im_end &&
                !((q == e->call_end - 1 && e->call_stop) || (q == e->answer_end - 1 && e->answer_stop)))
                ok = false;
        }
        if (ok && e->turns == 2 && e->call_stop && e->answer_stop && printable(e->call) && printable(e->answer) &&
            !strstr(e->call, "<|") && !strstr(e->answer, "<|")) {
            char user[32];
            snprintf(user, sizeof user, "%02d+%02d", ps->probs[i].a, ps->probs[i].b);
            pt_chat_message m[5];
            int32_t *ids;
            uint8_t *mask;
            size_t nr;
            if ((st = render(&ids, &mask, &nr, rt, m, messages(m, user, e->call, e->tool, e->answer), false)))
                return st;
            ok = nr >= (size_t)ep.n_ids && memcmp(ids, ep.ids, (size_t)ep.n_ids * sizeof *ids) == 0;
            for (int q = 0; ok && q < ep.n_ids; q++)
                ok = mask[q] == (q < ep.prompt_len ? 0 : ep.loss_mask[q - ep.prompt_len]);
            pt_free(ids);
            pt_free(mask);
            rt->template_checked++;
        }
        rt->episodes_checked++;
        if (!ok) {
            rt->mask_violations++;
            fprintf(stderr, "agent_runtime: MASK VIOLATION in episode %d (%d+%d, call '%s', answer '%s')\n", i,
                    ps->probs[i].a, ps->probs[i].b, e->call, e->answer);
        }
    }
    return PT_OK;
}

/* Play n episodes of the problems (groups: every `group` consecutive
 * episodes, or NULL) at the temperature (0: greedy) with the engine, then
 * check them.  The results stay in rt->res, what the environment saw in
 * ps->st. */
static int play(runtime *rt, play_state *ps, const problem *probs, int n, int group, double temperature,
                uint64_t seed)
{
    int32_t *prompts = malloc((size_t)n * MAX_SEQ * sizeof *prompts);
    int32_t *lens = malloc((size_t)n * sizeof *lens);
    int64_t *groups = malloc((size_t)n * sizeof *groups);
    int st = PT_ENOMEM;
    if (!prompts || !lens || !groups)
        goto out;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        char user[32];
        snprintf(user, sizeof user, "%02d+%02d", probs[i].a, probs[i].b);
        pt_chat_message m[2];
        int32_t *ids;
        size_t nid;
        if ((st = render(&ids, NULL, &nid, rt, m, messages(m, user, NULL, NULL, NULL), true)))
            goto out;
        memcpy(prompts + off, ids, nid * sizeof *ids);
        pt_free(ids);
        lens[i] = (int32_t)nid;
        groups[i] = group > 0 ? i / group : i;
        off += nid;
    }
    memset(ps->st, 0, (size_t)n * sizeof *ps->st);
    ps->rt = rt;
    ps->probs = probs;
    pt_generate_options so;
    pt_generate_options_init(&so);
    so.max_new_tokens = TURN_MAX;
    so.temperature = (float)temperature;
    so.seed = seed;
    so.stop_ids = &rt->im_end;
    so.n_stop_ids = 1;
    pt_episode_options eo;
    pt_episode_options_init(&eo);
    eo.sampling = &so;
    eo.max_turns = 2;
    eo.max_total_tokens = MAX_SEQ;
    eo.tokenizer = rt->tok;
    eo.decode_text = true;
    eo.n_reward_funcs = 2;
    eo.on_error = PT_EPISODE_ERROR_STOP;
    if ((st = pt_episodes_run(rt->res, rt->gen, prompts, lens, groups, n, &eo, environment, ps)))
        fail("pt_episodes_run", st);
    else
        st = check_episodes(rt, ps, n);
out:
    if (st == PT_ENOMEM)
        fprintf(stderr, "agent_runtime: out of memory\n");
    free(prompts);
    free(lens);
    free(groups);
    return st;
}

static scores score(const play_state *ps, int n)
{
    scores s = { 0, 0, 0 };
    for (int i = 0; i < n; i++) {
        s.correct += ps->st[i].correct;
        s.right_call += ps->st[i].right_call;
        s.used_tool += ps->st[i].used_tool;
    }
    s.correct /= n;
    s.right_call /= n;
    s.used_tool /= n;
    return s;
}

/* Held-out accuracy, greedy and sampled at the training temperature. */
static int evaluate(scores *greedy, scores *sampled, runtime *rt, play_state *ps, const problem *probs,
                    const char *label, bool show)
{
    const int n = rt->o.eval_n;
    int st = play(rt, ps, probs, n, 0, 0.0, 0);
    if (st)
        return st;
    *greedy = score(ps, n);
    for (int i = 0; show && i < 2; i++)
        printf("[eval]   %02d+%02d -> call '%s' -> tool '%s' -> answer '%s' (%s)\n", probs[i].a, probs[i].b,
               ps->st[i].call, ps->st[i].tool, ps->st[i].answer, ps->st[i].correct ? "right" : "wrong");
    if ((st = play(rt, ps, probs, n, 0, rt->o.temperature, 0xE5A1 + rt->o.seed)))
        return st;
    *sampled = score(ps, n);
    printf("[eval] %-10s held-out (%d): greedy %5.1f%% (calls right %5.1f%%, answers from the tool %5.1f%%); "
           "sampled at T=%.2g %5.1f%% (%5.1f%%, %5.1f%%)\n",
           label, n, 100 * greedy->correct, 100 * greedy->right_call, 100 * greedy->used_tool, rt->o.temperature,
           100 * sampled->correct, 100 * sampled->right_call, 100 * sampled->used_tool);
    return PT_OK;
}

/* ---- the run directory (--out): checkpoints, metrics rows and resume ---------- */

/* With --out DIR the runtime keeps its training run in a run directory of
 * the library's run layer (posttrain/run.h, docs/run-directory.md): DIR is
 * locked while the run holds it, every SFT step, GRPO iteration and
 * evaluation appends one metrics row (pt_run_log), a checkpoint is saved
 * every --save-every steps (pt_run_save: the weights, the optimizer and the
 * run state), and --resume auto continues from the latest one to exactly
 * the result of an uninterrupted run (same options, same threads).
 *
 * Steps are numbered through both phases: SFT steps 1..S, then GRPO
 * iterations S+1..S+G.  What a checkpoint must hold for that:
 *   - the step, the optimizer's steps, the SFT data position (epoch, cursor;
 *     the order of epoch e is a function of the seed and e);
 *   - every random stream: the training problems' stream (state.rng; SFT
 *     draws its traces up front, GRPO draws each iteration's problems from
 *     it), the teacher's and the held-out problems' streams (drawn up front:
 *     recorded, and checked when they are drawn again on resume); the
 *     sampling seeds are functions of the seed and the iteration, no state;
 *   - the phase, the evaluations already made and the counters the final
 *     checks print (host fields, below).
 * A phase boundary's checkpoint is saved after the boundary's evaluation
 * (the one at step S with the GRPO optimizer and phase "grpo", the last with
 * phase "done"), so a resume never evaluates, or logs, anything twice. */

static const char *const RUN_KIND = "agent_runtime";

/* The options that decide the run's results: a resumed run must be given
 * the same (--eval and --max-drop included: their results are checkpointed). */
static void options_text(char *buf, size_t cap, const options *o)
{
    snprintf(buf, cap,
             "sft_steps=%d steps=%d prompts=%d group=%d eval=%d hidden=%d layers=%d batch=%d threads=%d "
             "sft_lr=%.17g grpo_lr=%.17g temperature=%.17g max_drop=%.17g slip=%.17g habit=%.17g credit=%s "
             "seed=%llu",
             o->sft_steps, o->grpo_steps, o->prompts, o->group, o->eval_n, o->hidden, o->layers, o->batch,
             o->threads, o->sft_lr, o->grpo_lr, o->temperature, o->max_drop, o->slip, o->habit,
             o->per_turn ? "turn" : "episode", (unsigned long long)o->seed);
}

/* The host fields of a checkpoint: one flat JSON object of strings (exact
 * 64-bit and double values; none holds a quote or a backslash). */
static void run_extra(char *buf, size_t cap, const runtime *rt, const char *phase)
{
    char opts[512], sc[N_EV * 3 * 26];
    options_text(opts, sizeof opts, &rt->o);
    size_t n = 0;
    sc[0] = '\0';
    for (int i = 0; i < N_EV; i++)
        n += (size_t)snprintf(sc + n, sizeof sc - n, "%s%.17g %.17g %.17g", i ? " " : "", rt->ev[i].correct,
                              rt->ev[i].right_call, rt->ev[i].used_tool);
    snprintf(buf, cap,
             "{\"phase\":\"%s\",\"options\":\"%s\",\"teacher_rng\":\"%llu\",\"eval_rng\":\"%llu\","
             "\"sft_loss_ema\":\"%.17g\",\"zero_std_sum\":\"%.17g\",\"scores\":\"%s\",\"checked\":\"%ld %ld %ld %ld\"}",
             phase, opts, (unsigned long long)rt->teacher_rng, (unsigned long long)rt->eval_rng, rt->sft_ema,
             rt->zero_std, sc, rt->traces_checked, rt->episodes_checked, rt->template_checked, rt->mask_violations);
}

/* The string value of `key` in host fields run_extra wrote. */
static bool extra_get(char *out, size_t cap, const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat), *e;
    if (!p)
        return false;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':')
        p++;
    if (*p++ != '"' || !(e = strchr(p, '"')) || (size_t)(e - p) >= cap)
        return false;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return true;
}

/* The run's notes (the checkpoint resumed, the goodput lost, each
 * checkpoint): the library's texts, the lines `posttrain sft` prints. */
static void print_note(int level, const char *text, void *user)
{
    (void)level, (void)user;
    fprintf(stderr, "agent_runtime: %s\n", text);
}

/* Open the run directory (nothing without --out).  On resume, read the
 * checkpoint's phase first (it decides which phase's optimizer loads it)
 * and refuse other options. */
static int run_open(runtime *rt)
{
    const options *o = &rt->o;
    if (!o->out)
        return PT_OK;
    pt_run_options ro;
    pt_run_options_init(&ro);
    ro.dir = o->out;
    ro.kind = RUN_KIND;
    ro.start = o->resume ? (strcmp(o->resume, "auto") ? PT_RUN_RESUME_FROM : PT_RUN_RESUME_AUTO)
                         : o->overwrite ? PT_RUN_OVERWRITE : PT_RUN_NEW;
    ro.resume_from = ro.start == PT_RUN_RESUME_FROM ? o->resume : NULL;
    ro.save_every = o->save_every;
    ro.keep_last = o->keep_last;
    ro.notes = print_note;
    int st = pt_run_open(&rt->run, &ro);
    if (st)
        return fail("pt_run_open", st);
    const char *ck = pt_run_resume_dir(rt->run);
    if (!ck) {
        if (o->save_every)
            printf("agent_runtime: run directory %s, a fresh start (checkpoints every %d steps)\n", o->out,
                   o->save_every);
        else
            printf("agent_runtime: run directory %s, a fresh start (no checkpoints: --save-every)\n", o->out);
        return PT_OK;
    }
    char *host = NULL, *extra = NULL, opts[512], want[512];
    pt_run_state s;
    pt_run_state_init(&s);
    if ((st = pt_checkpoint_read_host(&host, ck)) || (st = pt_run_state_from_json(&s, NULL, &extra, host ? host : ""))) {
        pt_free(host);
        return fail("reading the checkpoint", st);
    }
    pt_free(host);
    options_text(want, sizeof want, o);
    st = PT_EFORMAT;
    if (!extra_get(rt->phase, sizeof rt->phase, extra, "phase") || !extra_get(opts, sizeof opts, extra, "options"))
        fprintf(stderr, "agent_runtime: %s has no phase or options: not an agent_runtime checkpoint\n", ck);
    else if ((st = strcmp(opts, want) ? PT_EINVAL : PT_OK))
        fprintf(stderr, "agent_runtime: %s was saved by a run with other options:\n  %s\nnot\n  %s\n", ck, opts, want);
    pt_free(extra);
    if (st)
        return st;
    rt->pending = true;
    printf("agent_runtime: run directory %s, resuming from %s (step %lld, phase %s)\n", o->out, ck,
           (long long)s.step, rt->phase);
    return PT_OK;
}

/* Load the resumed checkpoint into the model and `opt` (the phase's
 * optimizer): *state gets its run state, *train_rng the training problems'
 * stream (in SFT, drawn again up front: checked instead), rt the host
 * fields.  Also trims the metrics rows past its step. */
static int run_load(runtime *rt, pt_optimizer *opt, pt_run_state *state, uint64_t *train_rng, bool in_sft)
{
    char *extra = NULL, v[N_EV * 3 * 26];
    pt_run_state_init(state);
    int st = pt_run_load(state, &extra, rt->run, rt->model, opt);
    if (st)
        return fail("pt_run_load", st);
    rt->pending = false;
    st = PT_EFORMAT;
    const char *bad = NULL;
    uint64_t x;
    if (!extra_get(v, sizeof v, extra, "eval_rng") || (x = strtoull(v, NULL, 10)) != rt->eval_rng)
        bad = "held-out problem stream differs";
    else if (!extra_get(v, sizeof v, extra, "teacher_rng") ||
             ((x = strtoull(v, NULL, 10)) != rt->teacher_rng && in_sft))
        bad = "teacher's stream differs";
    else if (in_sft && state->rng != *train_rng)
        bad = "training problem stream differs";
    else if (!extra_get(v, sizeof v, extra, "checked") ||
             sscanf(v, "%ld %ld %ld %ld", &rt->traces_checked, &rt->episodes_checked, &rt->template_checked,
                    &rt->mask_violations) != 4)
        bad = "counters are missing";
    else {
        rt->teacher_rng = x;
        *train_rng = state->rng;
        st = PT_OK;
        if (extra_get(v, sizeof v, extra, "sft_loss_ema"))
            rt->sft_ema = strtod(v, NULL);
        if (extra_get(v, sizeof v, extra, "zero_std_sum"))
            rt->zero_std = strtod(v, NULL);
        char *p = v;
        if (extra_get(v, sizeof v, extra, "scores"))
            for (int i = 0; i < N_EV; i++) {
                rt->ev[i].correct = strtod(p, &p);
                rt->ev[i].right_call = strtod(p, &p);
                rt->ev[i].used_tool = strtod(p, &p);
            }
    }
    if (bad)
        fprintf(stderr, "agent_runtime: %s: the checkpoint's %s from this run's\n", pt_run_resume_dir(rt->run), bad);
    pt_free(extra);
    return st ? st : pt_run_resumed(rt->run, state->step);
}

/* A checkpoint of `step` is due (never at step 0: nothing done). */
static bool run_due(const runtime *rt, int64_t step)
{
    return rt->run && step > 0 && pt_run_save_due(rt->run, step, rt->o.sft_steps + rt->o.grpo_steps);
}

/* Save the checkpoint of `step` in `phase` (data: the SFT dataset, or NULL). */
static int run_save(runtime *rt, pt_optimizer *opt, int64_t step, const char *phase, uint64_t train_rng,
                    const pt_dataset *data)
{
    pt_run_state s;
    pt_run_state_init(&s);
    s.step = step;
    s.seed = rt->o.seed;
    s.order_rng = rt->o.seed;   /* the dataset's shuffle seed: epoch e's order is a function of it and e */
    s.rng = train_rng;
    s.optimizer_steps = pt_optimizer_step_count(opt);
    int st = PT_OK;
    pt_dataset_stats ds;
    pt_dataset_stats_init(&ds);
    if (data && !(st = pt_dataset_get_position(&s.epoch, &s.cursor, data)) &&
        !(st = pt_dataset_get_stats(&ds, data)))
        s.rows = ds.train_examples;
    char extra[2048];
    run_extra(extra, sizeof extra, rt, phase);
    if (st || (st = pt_run_save(rt->run, rt->model, opt, &s, extra)))
        return fail("pt_run_save", st);
    return PT_OK;
}

/* A metrics row: {"step":N,"phase":P, then the fields added}. */
typedef struct row {
    char s[1024];
    size_t n;
} row;

static void row_start(row *r, int64_t step, const char *phase)
{
    r->n = (size_t)snprintf(r->s, sizeof r->s, "{\"step\":%lld,\"phase\":\"%s\"", (long long)step, phase);
}

static void row_num(row *r, const char *key, double v)
{
    if (r->n < sizeof r->s)
        r->n += (size_t)snprintf(r->s + r->n, sizeof r->s - r->n, isfinite(v) ? ",\"%s\":%.17g" : ",\"%s\":null",
                                 key, v);
}

/* Close the row and append it to the metrics file (nothing without --out). */
static int row_log(runtime *rt, row *r)
{
    if (!rt->run)
        return PT_OK;
    if (r->n + 2 > sizeof r->s) {
        fprintf(stderr, "agent_runtime: a metrics row is too long\n");
        return PT_EINVAL;
    }
    memcpy(r->s + r->n, "}", 2);
    int st = pt_run_log(rt->run, r->s);
    return st ? fail("pt_run_log", st) : PT_OK;
}

/* The metrics row of an evaluation (greedy and sampled held-out scores). */
static int log_eval(runtime *rt, int64_t step, int which)
{
    static const char *const LABELS[3] = { "before", "after_sft", "after_grpo" };
    row r;
    row_start(&r, step, "eval");
    r.n += (size_t)snprintf(r.s + r.n, sizeof r.s - r.n, ",\"label\":\"%s\"", LABELS[which / 2]);
    const scores *g = &rt->ev[which], *sm = &rt->ev[which + 1];
    row_num(&r, "greedy_correct", g->correct);
    row_num(&r, "greedy_right_call", g->right_call);
    row_num(&r, "greedy_used_tool", g->used_tool);
    row_num(&r, "sampled_correct", sm->correct);
    row_num(&r, "sampled_right_call", sm->right_call);
    row_num(&r, "sampled_used_tool", sm->used_tool);
    return row_log(rt, &r);
}

/* The metrics row of an SFT step. */
static int log_sft(runtime *rt, int64_t step, const pt_sft_stats *ss, double seconds)
{
    row r;
    row_start(&r, step, "sft");
    row_num(&r, "loss", ss->loss);
    row_num(&r, "loss_ema", rt->sft_ema);
    row_num(&r, "lr", ss->lr);
    row_num(&r, "grad_norm", ss->grad_norm);
    row_num(&r, "tokens", ss->tokens);
    row_num(&r, "skipped", ss->skipped);
    row_num(&r, "step_seconds", seconds);
    return row_log(rt, &r);
}

/* The metrics row of a GRPO iteration. */
static int log_grpo(runtime *rt, int64_t step, int it, const scores *sc, const pt_grpo_stats *gs, int episodes,
                    double seconds)
{
    row r;
    row_start(&r, step, "grpo");
    row_num(&r, "iteration", it);
    row_num(&r, "correct", sc->correct);
    row_num(&r, "right_call", sc->right_call);
    row_num(&r, "used_tool", sc->used_tool);
    row_num(&r, "reward", gs->reward);
    row_num(&r, "reward_std", gs->reward_std);
    row_num(&r, "zero_std", gs->frac_reward_zero_std);
    row_num(&r, "segments", (double)gs->segments);
    row_num(&r, "clip", gs->clip_ratio_region);
    row_num(&r, "completion_length", gs->completion_mean_length);
    row_num(&r, "loss", gs->loss);
    row_num(&r, "grad_norm", gs->grad_norm);
    row_num(&r, "episodes", episodes);
    row_num(&r, "skipped", gs->skipped);
    row_num(&r, "step_seconds", seconds);
    return row_log(rt, &r);
}

/* ---- phase 1: SFT on the traces of an imperfect teacher ---------------------- */

/* The teacher's trace of a problem, like a real agent's log.  A habit: in
 * a share `habit` of the problems with an operand below 20 it reads that
 * operand's digits the wrong way round ("05" -> "50", "17" -> "71") in the
 * call, and answers with the tool's (wrong) result.  Slips, in a share `slip` of the
 * other traces: half of them a wrong argument (the second operand's digits
 * swapped) answered with the tool's result, half a right call whose result
 * it ignores (it answers 10 off).  Returns whether the trace is right. */
static bool teacher(episode *e, uint64_t *trng, double slip, double habit)
{
    const double u = (double)(splitmix(trng) >> 11) * 0x1p-53;
    const double h = (double)(splitmix(trng) >> 11) * 0x1p-53;
    const int a = e->p.a, b = e->p.b;
    int a_written = a, b_written = b;
    bool ignore = false;
    if ((a < 20 || b < 20) && h < habit) {
        if (a < 20)
            a_written = (a % 10) * 10 + a / 10;
        if (b < 20)
            b_written = (b % 10) * 10 + b / 10;
    } else if (u < slip / 2) {
        b_written = (b % 10) * 10 + b / 10;
        if (b_written == b)
            b_written = (b + 1) % 100;
    } else if (u < slip) {
        ignore = true;
    }
    snprintf(e->call, sizeof e->call, "CALL add %02d %02d", a_written, b_written);
    run_tool(e->tool, sizeof e->tool, e->call);
    if (ignore)
        snprintf(e->answer, sizeof e->answer, "%d", a + b >= 10 ? a + b - 10 : a + b + 10);
    else
        snprintf(e->answer, sizeof e->answer, "%s", e->tool);
    char want[16];
    snprintf(want, sizeof want, "%d", a + b);
    return strcmp(e->answer, want) == 0;
}

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
    /* Enough traces for the steps asked for (one epoch), at most 2000. */
    const int n_examples = o->sft_steps * o->batch < 2000 ? o->sft_steps * o->batch : 2000;
    uint64_t trng = o->seed * 0xD1B54A32D192ED03ull + 11;   /* the teacher's own stream */
    int right = 0;
    for (int i = 0; i < n_examples; i++) {
        episode e;
        memset(&e, 0, sizeof e);
        e.p = draw(rng, false);
        right += teacher(&e, &trng, o->slip, o->habit);
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
    rt->teacher_rng = trng;
    /* Resuming in SFT: the traces were drawn again above (the streams
     * checked), the weights, the optimizer and the data position come back. */
    int first = 1;
    if (rt->pending) {
        pt_run_state rs;
        if ((st = run_load(rt, opt, &rs, rng, true)))
            goto out;
        if ((st = pt_dataset_set_position(data, rs.epoch, rs.cursor))) {
            fail("pt_dataset_set_position", st);
            goto out;
        }
        first = (int)rs.step + 1;
    }
    double t0 = now_s(), tokens = 0;
    double *ema = &rt->sft_ema;
    for (int s = first; s <= o->sft_steps; s++) {
        const double t_step = now_s();
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
        *ema = isnan(*ema) ? ss.loss : 0.9 * *ema + 0.1 * ss.loss;
        if (!o->quiet && (s % 50 == 0 || s == o->sft_steps))
            printf("[sft]  step %4d/%d  loss %.4f  lr %.2e  grad_norm %.3f  %.0f trained tokens/s\n", s,
                   o->sft_steps, *ema, ss.lr, ss.grad_norm, tokens / (now_s() - t0));
        /* the run directory: a row per step, a checkpoint when due (the last one: after the evaluation) */
        if ((st = log_sft(rt, s, &ss, now_s() - t_step)) ||
            (s < o->sft_steps && run_due(rt, s) && (st = run_save(rt, opt, s, "sft", *rng, data))))
            goto out;
        if (s == o->stop_after) {
            rt->stopped = true;
            goto out;
        }
    }
    printf("[sft]  %d steps on %d teacher traces (%.1f%% of them right) in %.1f s, final loss %.4f\n", o->sft_steps,
           n_examples, 100.0 * right / n_examples, now_s() - t0, *ema);
out:
    pt_optimizer_free(opt);
    pt_dataset_free(data);
    return st;
}


/* ---- phase 2: GRPO on the policy's own episodes ----------------------------- */

/* Two reward functions.  Per turn: "call" for the call turn, "answer" for
 * the answer turn (pt_rollout_buffer_add_episodes makes each its segment's
 * reward); per episode: "answer" only, the final answer being right. */
static const char *const REWARD_NAMES[2] = { "call", "answer" };
static const double REWARD_WEIGHTS[2] = { 1.0, 1.0 };

static int grpo_phase(runtime *rt, play_state *ps, uint64_t *rng, const problem *eval)
{
    const options *o = &rt->o;
    const int n = o->prompts * o->group;
    pt_rollout_buffer_options bo;
    pt_rollout_buffer_options_init(&bo);
    bo.n_reward_funcs = 2;
    bo.reward_names = REWARD_NAMES;
    bo.reward_weights = REWARD_WEIGHTS;
    pt_rollout_buffer *buf = NULL;
    pt_optimizer *opt = NULL;
    problem *probs = malloc((size_t)n * sizeof *probs);
    int st = PT_ENOMEM;
    if (!probs) {
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
    go.temperature = o->temperature;
    /* The run directory: resume here (phase "grpo" or "done"), or save the
     * SFT boundary's checkpoint (after its evaluation, with this optimizer). */
    const int64_t S = o->sft_steps, total = S + o->grpo_steps;
    int first = 1;
    if (rt->pending) {
        pt_run_state rs;
        if ((st = run_load(rt, opt, &rs, rng, false)))
            goto out;
        first = (int)(rs.step - S) + 1;
    } else if (o->grpo_steps > 0 && run_due(rt, S) && (st = run_save(rt, opt, S, "grpo", *rng, NULL))) {
        goto out;
    }
    double t_all = now_s();
    for (int it = first; it <= o->grpo_steps; it++) {
        const double t_step = now_s();
        for (int p = 0; p < o->prompts; p++) {
            problem pr = draw(rng, false);
            for (int g = 0; g < o->group; g++)
                probs[p * o->group + g] = pr;
        }
        if ((st = play(rt, ps, probs, n, o->group, o->temperature, o->seed * 1000003u + (uint64_t)it)))
            goto out;
        scores sc = score(ps, n);
        pt_episode_stats es;
        pt_episode_stats_init(&es);
        pt_episode_results_stats(&es, rt->res);
        int added = 0;
        if ((st = pt_rollout_buffer_add_episodes(&added, buf, rt->res))) {
            fail("pt_rollout_buffer_add_episodes", st);
            goto out;
        }
        pt_grpo_stats gs;
        pt_grpo_stats_init(&gs);
        if ((st = pt_grpo_step(&gs, opt, rt->ctx, buf, &go))) {
            fail("pt_grpo_step", st);
            goto out;
        }
        pt_rollout_buffer_clear(buf);
        rt->zero_std += gs.frac_reward_zero_std;
        if (!o->quiet)
            printf("[grpo] iter %3d/%d  correct %.2f  calls right %.2f  answers from the tool %.2f  "
                   "reward %.3f +- %.3f  zero_std %.2f  segments %lld  clip %.3f  len %.1f  loss %+.4f  "
                   "grad_norm %.3f  episodes %d  gen %.0f tok/s  train %.0f tok/s%s\n",
                   it, o->grpo_steps, sc.correct, sc.right_call, sc.used_tool, gs.reward, gs.reward_std,
                   gs.frac_reward_zero_std, (long long)gs.segments, gs.clip_ratio_region, gs.completion_mean_length,
                   gs.loss, gs.grad_norm, added, es.tokens_per_second, gs.tokens_per_second,
                   gs.skipped ? "  (skipped)" : "");
        /* the run directory: a row per iteration, a checkpoint when due (the last: below) */
        if ((st = log_grpo(rt, S + it, it, &sc, &gs, added, now_s() - t_step)) ||
            (it < o->grpo_steps && run_due(rt, S + it) && (st = run_save(rt, opt, S + it, "grpo", *rng, NULL))))
            goto out;
        if (S + it == o->stop_after) {
            rt->stopped = true;
            goto out;
        }
    }
    printf("[grpo] %d iterations of %d prompts x %d episodes (%s rewards) in %.1f s, zero-std groups %.2f\n",
           o->grpo_steps, o->prompts, o->group, o->per_turn ? "per-turn" : "per-episode", now_s() - t_all,
           o->grpo_steps ? rt->zero_std / o->grpo_steps : 0.0);
    /* The evaluation after GRPO, then the last checkpoint (phase "done":
     * a resume from it has nothing left to do). */
    if (strcmp(rt->phase, "done")) {
        if ((st = evaluate(&rt->ev[EV_GRPO], &rt->ev[EV_GRPO + 1], rt, ps, eval, "after GRPO", true))) {
            fail("evaluate", st);
            goto out;
        }
        if ((st = log_eval(rt, total, EV_GRPO)) || (run_due(rt, total) && (st = run_save(rt, opt, total, "done", *rng, NULL))))
            goto out;
    }
    st = PT_OK;
out:
    free(probs);
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
        "answers as a tool message, the assistant answers) with the episode engine,\n"
        "and fine-tunes a tiny model on its episodes: SFT on an imperfect teacher's\n"
        "traces, then GRPO with per-turn rewards.  Exits 1 if a token the model did\n"
        "not sample was ever in a loss mask or GRPO made held-out accuracy worse.\n\n"
        "  --sft-steps N (%d)   --sft-lr F (%g)    --batch N (%d)\n"
        "  --slip F (%g)       the share of the teacher's traces with a random slip\n"
        "  --habit F (%g)      the share of problems with an operand below 20 whose\n"
        "                        call the teacher gets wrong (\"17\" read as \"71\")\n"
        "  --steps N (%d)       GRPO iterations      --grpo-lr F (%g)\n"
        "  --prompts N (%d)      --group N (%d)        --temperature F (%g)\n"
        "  --credit turn|episode (turn): rewards per turn, or one per episode\n"
        "  --eval N (%d)        held-out problems    --max-drop F (%g)\n"
        "  --hidden N (%d)      --layers N (%d)       --seed N (1)   --threads N (%d)\n"
        "  --quiet               only the phase summaries\n\n"
        "A run directory (checkpoints, metrics rows, resume; steps are numbered\n"
        "through both phases: SFT 1..N, then GRPO):\n"
        "  --out DIR             keep the run in DIR (DIR/metrics.jsonl, DIR/checkpoints)\n"
        "  --save-every N (0)    a checkpoint every N steps and at the end\n"
        "  --keep-last K (0)     keep the last K checkpoints (0: all)\n"
        "  --resume auto|CKPT    continue from DIR's latest checkpoint, or CKPT\n"
        "  --overwrite           replace the run DIR holds\n"
        "  --stop-after K        stop after step K (as if killed there)\n",
        DEFAULTS.sft_steps, DEFAULTS.sft_lr, DEFAULTS.batch, DEFAULTS.slip, DEFAULTS.habit, DEFAULTS.grpo_steps, DEFAULTS.grpo_lr,
        DEFAULTS.prompts, DEFAULTS.group, DEFAULTS.temperature, DEFAULTS.eval_n, DEFAULTS.max_drop,
        DEFAULTS.hidden, DEFAULTS.layers, DEFAULTS.threads);
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
    *o = DEFAULTS;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(k, "--quiet") || !strcmp(k, "--overwrite")) {
            *(k[2] == 'q' ? &o->quiet : &o->overwrite) = true;
            continue;
        }
        double v;
        if (i + 1 >= argc) {
            fprintf(stderr, "agent_runtime: %s needs a value\n", k);
            return 2;
        }
        const char *val = argv[++i];
        if (!strcmp(k, "--credit")) {
            if (strcmp(val, "turn") && strcmp(val, "episode")) {
                fprintf(stderr, "agent_runtime: --credit needs 'turn' or 'episode', not '%s'\n", val);
                return 2;
            }
            o->per_turn = !strcmp(val, "turn");
            continue;
        }
        if (!strcmp(k, "--out") || !strcmp(k, "--resume")) {
            *(k[2] == 'o' ? &o->out : &o->resume) = val;
            continue;
        }
        struct {
            const char *name;
            double lo, hi;
            bool integer;
        } spec[] = { { "--sft-steps", 0, 100000, true }, { "--steps", 0, 100000, true },
                     { "--prompts", 1, 64, true }, { "--group", 2, 64, true }, { "--eval", 1, 4096, true },
                     { "--hidden", 16, 1024, true }, { "--layers", 1, 32, true }, { "--batch", 1, 256, true },
                     { "--threads", 1, 256, true }, { "--seed", 0, 4294967295.0, true },
                     { "--sft-lr", 1e-7, 1, false }, { "--grpo-lr", 1e-8, 1, false },
                     { "--temperature", 0.05, 10, false }, { "--max-drop", 0, 1, false },
                     { "--slip", 0, 1, false }, { "--habit", 0, 1, false },
                     { "--save-every", 0, 1e6, true }, { "--keep-last", 0, 1e6, true },
                     { "--stop-after", 1, 1e6, true } };
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
        case 13: o->max_drop = v; break;
        case 14: o->slip = v; break;
        case 15: o->habit = v; break;
        case 16: o->save_every = (int)v; break;
        case 17: o->keep_last = (int)v; break;
        default: o->stop_after = (int)v; break;
        }
    }
    if (!o->out && (o->resume || o->overwrite || o->save_every || o->keep_last)) {
        fprintf(stderr, "agent_runtime: --resume, --overwrite, --save-every and --keep-last need --out\n");
        return 2;
    }
    if (o->resume && o->overwrite) {
        fprintf(stderr, "agent_runtime: --resume and --overwrite exclude each other\n");
        return 2;
    }
    if (o->hidden % 16) {
        fprintf(stderr, "agent_runtime: --hidden must be a multiple of 16\n");
        return 2;
    }
    return 0;
}

/* The program's own checks: no unsampled token in a loss mask, held-out
 * accuracy not clearly worse after GRPO.  1 when one fails. */
static int final_checks(const runtime *rt)
{
    const scores g0 = rt->ev[0], s0 = rt->ev[1], g1 = rt->ev[2], s1 = rt->ev[3], g2 = rt->ev[4], s2 = rt->ev[5];
    int rc = 0;
    printf("[check] SFT traces checked %ld, episodes played and checked %ld (%ld also against the template's "
           "rendering), tokens in a loss mask the model did not sample: %ld\n",
           rt->traces_checked, rt->episodes_checked, rt->template_checked, rt->mask_violations);
    if (rt->mask_violations || rt->episodes_checked == 0) {
        printf("[check] FAIL: the loss mask covered a token the model did not sample\n");
        rc = 1;
    }
    bool worse = rt->o.grpo_steps > 0 &&
                 (g2.correct < g1.correct - rt->o.max_drop || s2.correct < s1.correct - rt->o.max_drop);
    printf("[check] held-out accuracy greedy %.1f%% -> %.1f%% (SFT) -> %.1f%% (GRPO), sampled %.1f%% -> %.1f%% -> "
           "%.1f%%, allowed drop %.0f points: %s\n",
           100 * g0.correct, 100 * g1.correct, 100 * g2.correct, 100 * s0.correct, 100 * s1.correct,
           100 * s2.correct, 100 * rt->o.max_drop, worse ? "FAIL" : "ok");
    if (worse)
        rc = 1;
    return rc;
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
    play_state ps;
    memset(&ps, 0, sizeof ps);
    int st;
    rc = 1;
    if ((st = pt_set_num_threads(o->threads))) {
        fail("threads", st);
        return 1;
    }
    if ((st = pt_tokenizer_create_bytes(&rt.tok)) || (st = pt_chat_template_create(&rt.tpl, "chatml"))) {
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
    const int n_play = o->prompts * o->group > o->eval_n ? o->prompts * o->group : o->eval_n;
    const int rows = n_play < MAX_ROWS ? n_play : MAX_ROWS;
    const int ctx_rows = o->batch > rows ? o->batch : rows;
    if ((st = pt_model_create(&rt.model, &cfg, o->seed)) ||
        (st = pt_context_create(&rt.ctx, rt.model, ctx_rows, MAX_SEQ)) ||
        (st = pt_generator_create(&rt.gen, rt.model, rows, MAX_SEQ)) ||
        (st = pt_episode_results_create(&rt.res))) {
        fail("model", st);
        goto done;
    }
    uint64_t params = 0;
    params = pt_model_param_count(rt.model);
    printf("agent_runtime: libposttrain %s, llama %d layers x hidden %d (%.2fM parameters), byte tokenizer, "
           "%s template, seed %llu, %d threads\n",
           pt_version_string(), o->layers, o->hidden, (double)params / 1e6, pt_chat_template_name(rt.tpl),
           (unsigned long long)o->seed, pt_get_num_threads());

    /* Two streams: the training problems (SFT traces, then GRPO prompts)
     * and the held-out evaluation problems, so --eval never changes what
     * is trained on. */
    uint64_t train_rng = o->seed * 0x9E3779B97F4A7C15ull + 7;
    uint64_t eval_rng = o->seed * 0xBF58476D1CE4E5B9ull + 0xE7A1;
    eval = malloc((size_t)o->eval_n * sizeof *eval);
    ps.st = calloc((size_t)n_play, sizeof *ps.st);
    if (!eval || !ps.st) {
        fprintf(stderr, "agent_runtime: out of memory\n");
        goto done;
    }
    for (int i = 0; i < o->eval_n; i++)
        eval[i] = draw(&eval_rng, true);
    rt.eval_rng = eval_rng;
    rt.sft_ema = NAN;
    /* With --out: the run directory (a resume skips what the checkpoint's
     * phases did; their results are in it). */
    if ((st = run_open(&rt)))
        goto done;
    const bool in_grpo = rt.pending && strcmp(rt.phase, "sft") != 0;
    if (!rt.pending) {
        if ((st = evaluate(&rt.ev[EV_BEFORE], &rt.ev[EV_BEFORE + 1], &rt, &ps, eval, "before", false)))
            goto fail_st;
        if ((st = log_eval(&rt, 0, EV_BEFORE)))
            goto done;
    }
    if (!in_grpo) {
        if ((st = sft_phase(&rt, &train_rng)))
            goto done;
        if (rt.stopped)
            goto stopped;
        if ((st = evaluate(&rt.ev[EV_SFT], &rt.ev[EV_SFT + 1], &rt, &ps, eval, "after SFT", true)))
            goto fail_st;
        if ((st = log_eval(&rt, o->sft_steps, EV_SFT)))
            goto done;
    }
    if ((st = grpo_phase(&rt, &ps, &train_rng, eval)))
        goto done;
    if (rt.stopped)
        goto stopped;

    rc = final_checks(&rt);
    printf("agent_runtime: %s in %.1f s\n", rc ? "FAILED" : "passed", now_s() - t_start);
    goto done;
stopped:
    printf("agent_runtime: stopped after step %d (--stop-after)%s\n", o->stop_after,
           o->out ? "; --resume auto continues the run" : "");
    rc = 0;
    goto done;
fail_st:
    fail("evaluate", st);
done:
    pt_run_close(rt.run);
    free(eval);
    free(ps.st);
    pt_episode_results_free(rt.res);
    pt_generator_free(rt.gen);
    pt_context_free(rt.ctx);
    pt_model_free(rt.model);
    pt_chat_template_free(rt.tpl);
    pt_tokenizer_free(rt.tok);
    return rc;
}
