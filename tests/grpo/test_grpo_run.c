/* posttrain/grpo_run.h: pt_rollout_buffer_add_generated builds the samples
 * pt_rollout_buffer_add builds one by one (every field compared), and
 * refuses a bad count leaving the buffer as it was; pt_grpo_metrics_row
 * equals rows written out by hand here (keys, %.6g, null, the optional
 * keys); pt_prompt_order draws the Fisher-Yates shuffles of a splitmix64
 * written here, and a resume through a run state's JSON continues the
 * uninterrupted order (its faults refused, the order unchanged);
 * pt_grpo_progress_line and pt_grpo_eval_line give the lines written out
 * by hand here (the episode note, accuracy only where defined). */
#include "testfs.h"

#include "train/grpo_internal.h"

#include <math.h>
#include <string.h>

/* ---- pt_rollout_buffer_add_generated ----------------------------------------- */

static pt_rollout_buffer *new_buffer(void)
{
    pt_rollout_buffer *b;
    pt_rollout_buffer_options o;
    ck_assert_ok(pt_rollout_buffer_options_init(&o));
    ck_assert_ok(pt_rollout_buffer_create(&b, &o));
    return b;
}

static void same_samples(const pt_rollout_buffer *a, const pt_rollout_buffer *b)
{
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        const grpo_sample *x = &a->s[i], *y = &b->s[i];
        ck_assert_int_eq(x->n_ids, y->n_ids);
        ck_assert_int_eq(x->prompt_len, y->prompt_len);
        ck_assert_int_eq(x->n_comp, y->n_comp);
        ck_assert_mem_eq(x->ids, y->ids, (size_t)x->n_ids * sizeof *x->ids);
        ck_assert_int_eq(x->samp != NULL, y->samp != NULL);
        if (x->samp)
            ck_assert_mem_eq(x->samp, y->samp, (size_t)x->n_comp * sizeof *x->samp);
        ck_assert_int_eq(x->group, y->group);
        ck_assert_int_eq(x->truncated, y->truncated);
        ck_assert_int_eq(x->kind, y->kind);
        ck_assert_int_eq(x->scored, y->scored);
    }
}

START_TEST(test_add_generated)
{
    /* three prompts of 2, 1, 3 ids, two completions each (stride 4) */
    const int32_t prompts[] = { 5, 6, 5, 6, 7, 7, 8, 9, 1, 8, 9, 1 };
    const int32_t plens[] = { 2, 2, 1, 1, 3, 3 };
    const int32_t tokens[6 * 4] = { 10, 11, 12, 0, 13, 0, 0, 0, 14, 15, 16, 17,
                                    18, 19, 0, 0, 20, 21, 22, 0, 23, 0, 0, 0 };
    const int32_t ntok[] = { 3, 1, 4, 2, 3, 1 };
    const int32_t fin[] = { PT_FINISH_STOP, PT_FINISH_STOP, PT_FINISH_LENGTH, PT_FINISH_STOP, PT_FINISH_STOP,
                            PT_FINISH_LENGTH };
    float lps[6 * 4];
    for (int i = 0; i < 6 * 4; i++)
        lps[i] = -0.125f * (float)(i + 1);
    pt_rollout_generated g;
    ck_assert_ok(pt_rollout_generated_init(&g));
    ck_assert_int_eq(g.group_size, 1);
    g.n = 6;
    g.prompts = prompts;
    g.prompt_lens = plens;
    g.tokens = tokens;
    g.n_tokens = ntok;
    g.stride = 4;
    g.logprobs = lps;
    g.finish = fin;
    g.group_size = 2;
    g.first_group = 4;
    pt_rollout_buffer *a = new_buffer(), *b = new_buffer();
    ck_assert_ok(pt_rollout_buffer_add_generated(a, &g));
    for (int i = 0, off = 0; i < 6; i++) {
        int32_t ids[8];
        memcpy(ids, prompts + off, (size_t)plens[i] * sizeof *ids);
        memcpy(ids + plens[i], tokens + i * 4, (size_t)ntok[i] * sizeof *ids);
        off += plens[i];
        pt_rollout_sample s;
        ck_assert_ok(pt_rollout_sample_init(&s));
        s.ids = ids;
        s.n_ids = plens[i] + ntok[i];
        s.prompt_len = plens[i];
        s.sampling_logprobs = lps + i * 4;
        s.group = 4 + i / 2;
        s.truncated = fin[i] == PT_FINISH_LENGTH;
        ck_assert_ok(pt_rollout_buffer_add(b, &s));
    }
    same_samples(a, b);
    /* hand-checked: sample 4 is prompt 8 9 1 then 20 21 22, group 6 */
    const int32_t want4[] = { 8, 9, 1, 20, 21, 22 };
    ck_assert_int_eq(a->s[4].n_ids, 6);
    ck_assert_mem_eq(a->s[4].ids, want4, sizeof want4);
    ck_assert_int_eq(a->s[4].group, 6);
    ck_assert(a->s[5].truncated && !a->s[4].truncated);
    ck_assert_float_eq(a->s[5].samp[0], -0.125f * 21);

    /* without log-probabilities and finish reasons: none, none truncated */
    g.logprobs = NULL;
    g.finish = NULL;
    ck_assert_ok(pt_rollout_buffer_clear(a));
    ck_assert_ok(pt_rollout_buffer_add_generated(a, &g));
    ck_assert_int_eq(a->n, 6);
    for (int i = 0; i < 6; i++)
        ck_assert(a->s[i].samp == NULL && !a->s[i].truncated);

    /* a count out of range: refused naming the completion, nothing added */
    const int32_t bad[] = { 3, 1, 4, 0, 3, 1 };
    g.n_tokens = bad;
    ck_assert_status(pt_rollout_buffer_add_generated(a, &g), PT_EINVAL, "completion 3");
    ck_assert_int_eq(a->n, 6);
    g.n_tokens = ntok;
    g.stride = 3; /* completion 2 has 4 tokens */
    ck_assert_status(pt_rollout_buffer_add_generated(a, &g), PT_EINVAL, "completion 2");
    g.stride = 4;
    g.group_size = 0;
    ck_assert_status(pt_rollout_buffer_add_generated(a, &g), PT_EINVAL, "group_size");
    ck_assert_int_eq(a->n, 6);
    pt_rollout_buffer_free(a);
    pt_rollout_buffer_free(b);
}
END_TEST

/* ---- pt_grpo_metrics_row -------------------------------------------------- */

static void stats_values(pt_grpo_stats *s, double base)
{
    ck_assert_ok(pt_grpo_stats_init(s));
    s->reward = base + 0.5;
    s->reward_std = 0.25;
    s->n_reward_funcs = 2;
    s->reward_func_mean[0] = 1.0 / 3;
    s->reward_func_std[0] = 2;
    s->reward_func_mean[1] = -0.75;
    s->reward_func_std[1] = NAN;
    s->frac_reward_zero_std = 0.5;
    s->frac_zero_std_groups = 0.5;
    s->kl = base + 0.001;
    s->entropy = 1.5;
    s->clip_ratio_region = 0.125;
    s->clip_ratio_low = 0;
    s->clip_ratio_high = 0.0625;
    s->cispo_clip_ratio = 0.375;
    s->completion_mean_length = 7.5;
    s->completion_min_length = 2;
    s->completion_max_length = 16;
    s->clipped_ratio = 0.25;
    s->grad_norm = 12345678.0;
    s->lr = 1e-5;
    s->tokens = 60;
    s->sampling_logp_difference_mean = 0.01;
    s->sampling_logp_difference_max = INFINITY;
    s->entropy_coef_next = 0.02;
}

START_TEST(test_metrics_row)
{
    pt_grpo_stats first, last;
    stats_values(&first, 0);
    stats_values(&last, 1);
    pt_grpo_options o;
    ck_assert_ok(pt_grpo_options_init(&o));
    o.importance_sampling_correction = PT_GRPO_IS_CORRECTION_NONE;
    const char *names[] = { "exact", "length" };
    pt_grpo_metrics m;
    ck_assert_ok(pt_grpo_metrics_init(&m));
    m.step = 3;
    m.first = &first;
    m.last = &last;
    m.grpo = &o;
    m.n_reward_funcs = 2;
    m.reward_names = names;
    m.loss = -0.0123456789;
    m.gen_tokens_per_s = 1000.25;
    m.train_tokens_per_s = 0;
    m.step_seconds = 2.5;
    char *row;
    ck_assert_ok(pt_grpo_metrics_row(&row, &m));
    ck_assert_str_eq(row,
        "{\"step\": 3, \"reward\": 0.5, \"reward_std\": 0.25, \"rewards/exact/mean\": 0.333333, "
        "\"rewards/exact/std\": 2, \"rewards/length/mean\": -0.75, \"rewards/length/std\": null, "
        "\"frac_reward_zero_std\": 0.5, \"frac_zero_std_groups\": 0.5, \"loss\": -0.0123457, \"kl\": 1.001, "
        "\"entropy\": 1.5, \"clip_ratio/region_mean\": 0.125, \"clip_ratio/low_mean\": 0, "
        "\"clip_ratio/high_mean\": 0.0625, \"sampling/sampling_logp_difference/mean\": 0.01, "
        "\"sampling/sampling_logp_difference/max\": null, \"completions/mean_length\": 7.5, "
        "\"completions/min_length\": 2, \"completions/max_length\": 16, \"completions/clipped_ratio\": 0.25, "
        "\"grad_norm\": 1.23457e+07, \"lr\": 1e-05, \"tokens\": 60, \"gen_tokens_per_s\": 1000.25, "
        "\"train_tokens_per_s\": 0, \"step_seconds\": 2.5, \"skipped\": false}");
    pt_free(row);

    /* cispo, an entropy coefficient, the sampler correction, the entropy
     * mask, a job of several ranks, episodes; a skipped last update */
    o.loss_type = PT_GRPO_LOSS_CISPO;
    o.entropy_coef = 0.01;
    o.importance_sampling_correction = PT_GRPO_IS_TOKEN_TRUNCATE;
    o.top_entropy_quantile = 0.5;
    first.importance_sampling_ratio_min = 0.5;
    first.importance_sampling_ratio_mean = 1;
    first.importance_sampling_ratio_max = 2;
    first.importance_sampling_corrected_fraction = 0.125;
    last.entropy_threshold = 0.75;
    last.entropy_kept_fraction = 0.5;
    last.skipped = true;
    pt_grpo_episode_totals ep = { 8, 1, 5, 2, 20, 96, 12, 0.5 };
    m.n_reward_funcs = 1;
    m.comm = true;
    m.comm_seconds = 0.125;
    m.episodes = &ep;
    ck_assert_ok(pt_grpo_metrics_row(&row, &m));
    ck_assert_str_eq(row,
        "{\"step\": 3, \"reward\": 0.5, \"reward_std\": 0.25, \"rewards/exact/mean\": 0.333333, "
        "\"rewards/exact/std\": 2, "
        "\"frac_reward_zero_std\": 0.5, \"frac_zero_std_groups\": 0.5, \"loss\": -0.0123457, \"kl\": 1.001, "
        "\"entropy\": 1.5, \"clip_ratio/region_mean\": 0.125, \"clip_ratio/low_mean\": 0, "
        "\"clip_ratio/high_mean\": 0.0625, \"cispo_clip_ratio\": 0.375, \"entropy_coef\": 0.02, "
        "\"sampling/sampling_logp_difference/mean\": 0.01, \"sampling/sampling_logp_difference/max\": null, "
        "\"sampling/importance_sampling_ratio/min\": 0.5, \"sampling/importance_sampling_ratio/mean\": 1, "
        "\"sampling/importance_sampling_ratio/max\": 2, "
        "\"sampling/importance_sampling_corrected_fraction\": 0.125, \"entropy_threshold\": 0.75, "
        "\"entropy_kept_fraction\": 0.5, \"completions/mean_length\": 7.5, "
        "\"completions/min_length\": 2, \"completions/max_length\": 16, \"completions/clipped_ratio\": 0.25, "
        "\"grad_norm\": 1.23457e+07, \"lr\": 1e-05, \"tokens\": 60, \"gen_tokens_per_s\": 1000.25, "
        "\"train_tokens_per_s\": 0, \"step_seconds\": 2.5, \"comm_seconds\": 0.125, \"episodes\": 8, "
        "\"episodes/errors\": 1, \"episodes/done\": 5, \"episodes/truncated\": 2, \"episodes/turns_mean\": 2.5, "
        "\"episodes/appended_tokens\": 96, \"episodes/env_calls\": 12, \"env_seconds\": 0.5, \"skipped\": true}");
    pt_free(row);

    m.grpo = NULL;
    ck_assert_status(pt_grpo_metrics_row(&row, &m), PT_EINVAL, "grpo");
    ck_assert_ptr_null(row);
    m.grpo = &o;
    m.n_reward_funcs = PT_GRPO_MAX_REWARD_FUNCS + 1;
    ck_assert_status(pt_grpo_metrics_row(&row, &m), PT_EINVAL, "n_reward_funcs");
}
END_TEST

/* ---- pt_prompt_order ---------------------------------------------------------- */

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The documented order written out: passes of Fisher-Yates shuffles. */
static void reference_order(int32_t *out, int n_out, int rows, uint64_t seed)
{
    uint64_t x = seed ^ 0x6A09E667F3BCC908ull;
    int32_t perm[64];
    for (int k = 0; k < n_out; k++) {
        if (k % rows == 0) {
            for (int i = 0; i < rows; i++)
                perm[i] = i;
            for (int i = rows - 1; i > 0; i--) {
                int j = (int)(splitmix(&x) % (uint64_t)(i + 1));
                int32_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        out[k] = perm[k % rows];
    }
}

static pt_prompt_order *new_order(int64_t rows, uint64_t seed)
{
    pt_prompt_order_options oo;
    ck_assert_ok(pt_prompt_order_options_init(&oo));
    oo.rows = rows;
    oo.seed = seed;
    pt_prompt_order *o;
    ck_assert_ok(pt_prompt_order_create(&o, &oo));
    return o;
}

START_TEST(test_prompt_order)
{
    enum { ROWS = 7, DRAWS = 40, BATCH = 4 };
    int32_t want[DRAWS], got[DRAWS];
    reference_order(want, DRAWS, ROWS, 42);
    pt_prompt_order *o = new_order(ROWS, 42);
    for (int k = 0; k < DRAWS; k += BATCH)
        ck_assert_ok(pt_prompt_order_next(o, got + k, BATCH));
    ck_assert_mem_eq(got, want, sizeof want);
    ck_assert_int_eq(pt_prompt_order_passes(o), (DRAWS + ROWS - 1) / ROWS);
    /* every pass is a permutation */
    int seen[ROWS] = { 0 };
    for (int k = 0; k < ROWS; k++)
        seen[got[k]]++;
    for (int i = 0; i < ROWS; i++)
        ck_assert_int_eq(seen[i], 1);

    /* interrupted after 3 batches (12 draws: mid pass 2): through the run
     * state's JSON into a new order, which continues the same */
    ck_assert_ok(pt_prompt_order_restart(o));
    for (int k = 0; k < 3 * BATCH; k += BATCH)
        ck_assert_ok(pt_prompt_order_next(o, got + k, BATCH));
    pt_run_state s;
    ck_assert_ok(pt_run_state_init(&s));
    s.step = 3;
    s.epoch = pt_prompt_order_passes(o);
    ck_assert_ok(pt_prompt_order_save(&s, o));
    ck_assert_int_eq(s.cursor, 3 * BATCH - ROWS);
    ck_assert_int_eq(s.rows, ROWS);
    char *json;
    ck_assert_ok(pt_run_state_to_json(&json, &s, "grpo", NULL));
    pt_run_state back;
    ck_assert_ok(pt_run_state_init(&back));
    ck_assert_ok(pt_run_state_from_json(&back, NULL, NULL, json));
    pt_free(json);
    pt_prompt_order *r = new_order(ROWS, 42);
    int fault = -1;
    ck_assert_ok(pt_prompt_order_load(r, &back, &fault));
    ck_assert_int_eq(fault, PT_ORDER_FAULT_NONE);
    ck_assert_int_eq(pt_prompt_order_passes(r), 2);
    for (int k = 3 * BATCH; k < DRAWS; k += BATCH)
        ck_assert_ok(pt_prompt_order_next(r, got + k, BATCH));
    ck_assert_mem_eq(got, want, sizeof want);

    /* states that do not fit: refused, the order unchanged */
    pt_run_state bad = back;
    bad.rows = ROWS + 1;
    ck_assert_status(pt_prompt_order_load(r, &bad, &fault), PT_ESTATE, "rows");
    ck_assert_int_eq(fault, PT_ORDER_FAULT_ROWS);
    bad = back;
    bad.cursor = ROWS + 1;
    ck_assert_status(pt_prompt_order_load(r, &bad, &fault), PT_ESTATE, "cursor");
    ck_assert_int_eq(fault, PT_ORDER_FAULT_CURSOR);
    bad = back;
    bad.rng ^= 1;
    ck_assert_status(pt_prompt_order_load(r, &bad, &fault), PT_ESTATE, "inconsistent");
    ck_assert_int_eq(fault, PT_ORDER_FAULT_RNG);
    ck_assert_str_eq(pt_prompt_order_fault_name(fault), "rng");
    ck_assert_ok(pt_prompt_order_fault_from_name(&fault, "cursor"));
    ck_assert_int_eq(fault, PT_ORDER_FAULT_CURSOR);
    ck_assert_status(pt_prompt_order_fault_from_name(&fault, "x"), PT_EINVAL, "rows");
    ck_assert_ok(pt_prompt_order_load(r, &back, NULL));
    int32_t again[DRAWS];
    for (int k = 3 * BATCH; k < DRAWS; k += BATCH)
        ck_assert_ok(pt_prompt_order_next(r, again + k, BATCH));
    ck_assert_mem_eq(again + 3 * BATCH, want + 3 * BATCH, sizeof(int32_t) * (DRAWS - 3 * BATCH));
    pt_prompt_order_free(r);
    pt_prompt_order_free(o);
}
END_TEST

START_TEST(test_prompt_order_options)
{
    /* no shuffle: row order, the RNG state kept */
    pt_prompt_order_options oo;
    ck_assert_ok(pt_prompt_order_options_init(&oo));
    oo.rows = 5;
    oo.seed = 1;
    oo.no_shuffle = true;
    oo.drop_last = true;
    pt_prompt_order *o;
    ck_assert_ok(pt_prompt_order_create(&o, &oo));
    int32_t got[6];
    /* drop_last, batches of 2: 0 1, 2 3, then (one row left) a new pass 0 1 */
    for (int k = 0; k < 6; k += 2)
        ck_assert_ok(pt_prompt_order_next(o, got + k, 2));
    const int32_t want[] = { 0, 1, 2, 3, 0, 1 };
    ck_assert_mem_eq(got, want, sizeof want);
    pt_run_state s;
    ck_assert_ok(pt_run_state_init(&s));
    ck_assert_ok(pt_prompt_order_save(&s, o));
    ck_assert(s.rng == (1 ^ 0x6A09E667F3BCC908ull) && s.order_rng == s.rng);
    ck_assert_int_eq(s.cursor, 2);
    pt_prompt_order_free(o);

    /* a state saved before the first draw continues as the start does */
    pt_prompt_order *a = new_order(5, 9), *b = new_order(5, 9);
    ck_assert_ok(pt_run_state_init(&s));
    ck_assert_ok(pt_prompt_order_save(&s, a));
    ck_assert_int_eq(s.cursor, 5);
    ck_assert_ok(pt_prompt_order_next(b, got, 3)); /* b elsewhere first */
    ck_assert_ok(pt_prompt_order_load(b, &s, NULL));
    int32_t x[12], y[12];
    ck_assert_ok(pt_prompt_order_next(a, x, 12));
    ck_assert_ok(pt_prompt_order_next(b, y, 12));
    ck_assert_mem_eq(x, y, sizeof x);
    reference_order(y, 12, 5, 9);
    ck_assert_mem_eq(x, y, sizeof x);
    pt_prompt_order_free(a);
    pt_prompt_order_free(b);
    oo.rows = 0;
    ck_assert_status(pt_prompt_order_create(&o, &oo), PT_EINVAL, "rows");
    ck_assert_ptr_null(o);
}
END_TEST

/* ---- the progress lines ----------------------------------------------------- */

START_TEST(test_progress_lines)
{
    pt_grpo_stats f, l;
    ck_assert_ok(pt_grpo_stats_init(&f));
    ck_assert_ok(pt_grpo_stats_init(&l));
    f.reward = 0.53125;
    f.reward_std = 0.25;
    f.frac_reward_zero_std = 0.5;
    f.completion_mean_length = 12.25;
    l.clip_ratio_region = 0.0625;
    l.kl = 0.000123456;
    l.grad_norm = 1.23456;
    l.lr = 0.0003;
    pt_grpo_metrics m;
    ck_assert_ok(pt_grpo_metrics_init(&m));
    m.step = 3;
    m.first = &f;
    m.last = &l;
    m.loss = -0.0421875;
    m.gen_tokens_per_s = 1234.4;
    m.train_tokens_per_s = 99.5;
    char *line = NULL;
    ck_assert_ok(pt_grpo_progress_line(&line, &m, 10, 7.25));
    ck_assert_str_eq(line, "step 3/10 reward 0.5312 std 0.2500 zero_std 0.50 clip 0.0625 kl 0.0001235 len 12.2 "
                           "loss -0.04219 grad_norm 1.23 lr 0.0003 gen 1234 tok/s train 100 tok/s 7.2s");
    pt_free(line);
    pt_grpo_episode_totals e = { .episodes = 8, .errors = 1, .turns = 19 };
    m.episodes = &e;
    ck_assert_ok(pt_grpo_progress_line(&line, &m, 10, 0.04));
    ck_assert_str_eq(line, "step 3/10 reward 0.5312 std 0.2500 zero_std 0.50 clip 0.0625 kl 0.0001235 len 12.2 "
                           "loss -0.04219 grad_norm 1.23 lr 0.0003 gen 1234 tok/s train 100 tok/s 0.0s episodes 8 "
                           "errors 1 turns 2.38");
    pt_free(line);
    m.last = NULL;
    ck_assert_status(pt_grpo_progress_line(&line, &m, 10, 0), PT_EINVAL, "last is NULL");
    ck_assert_ptr_null(line);

    /* the evaluation's: 4 prompts, 2 samples each; exact (accuracy) and length */
    pt_builtin_rewards rw;
    ck_assert_ok(pt_builtin_rewards_init(&rw));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_EXACT, 1.0));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_LENGTH, 0.5));
    pt_grpo_eval_sums s;
    memset(&s, 0, sizeof s);
    s.completions[PT_GRPO_EVAL_GREEDY] = 4;
    s.reward[PT_GRPO_EVAL_GREEDY] = 1.5;   /* mean 0.375 */
    s.correct[PT_GRPO_EVAL_GREEDY] = 2;    /* 0.5 */
    ck_assert_ok(pt_grpo_eval_line(&line, &s, &rw, 2, 0.7, 5));
    ck_assert_str_eq(line, "eval step 5: 4 prompts greedy reward 0.3750 accuracy 0.5000");
    pt_free(line);
    s.completions[PT_GRPO_EVAL_SAMPLED] = 8;
    s.reward[PT_GRPO_EVAL_SAMPLED] = 1;    /* 0.125 */
    s.correct[PT_GRPO_EVAL_SAMPLED] = 3;   /* 0.375 */
    ck_assert_ok(pt_grpo_eval_line(&line, &s, &rw, 2, 0.7, 5));
    ck_assert_str_eq(line, "eval step 5: 4 prompts greedy reward 0.3750 accuracy 0.5000, sampled (T=0.7, 2 each) "
                           "reward 0.1250 accuracy 0.3750");
    pt_free(line);
    /* a length reward alone: no accuracy */
    ck_assert_ok(pt_builtin_rewards_init(&rw));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_LENGTH, 1.0));
    ck_assert_ok(pt_grpo_eval_line(&line, &s, &rw, 2, 1, 0));
    ck_assert_str_eq(line, "eval step 0: 4 prompts greedy reward 0.3750, sampled (T=1, 2 each) reward 0.1250");
    pt_free(line);
    ck_assert_ok(pt_grpo_eval_line(&line, &s, NULL, 2, 1, 0));
    ck_assert_str_eq(line, "eval step 0: 4 prompts greedy reward 0.3750, sampled (T=1, 2 each) reward 0.1250");
    pt_free(line);
    ck_assert_status(pt_grpo_eval_line(&line, NULL, &rw, 2, 1, 0), PT_EINVAL, "sums is NULL");
    ck_assert_status(pt_grpo_progress_line(&line, NULL, 10, 0), PT_EINVAL, "pt_grpo_progress_line: metrics is NULL");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grpo_run");
    TCase *tc = tcase_create("run");
    tcase_add_test(tc, test_add_generated);
    tcase_add_test(tc, test_metrics_row);
    tcase_add_test(tc, test_prompt_order);
    tcase_add_test(tc, test_prompt_order_options);
    tcase_add_test(tc, test_progress_lines);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
