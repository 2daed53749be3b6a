/* The built-in rewards, prompt rows and held-out evaluation of
 * posttrain/grpo_builtin.h: rewards on hand-computed cases (exact,
 * contains, length, weights, accuracy; through a rollout buffer with the
 * byte tokenizer), rows (ids equal to the tokenizer's, answers, JSON, a bad
 * line refused naming it), and on stories260K an evaluation whose greedy
 * sums equal completions generated one by one and scored by hand here, and
 * whose metrics row equals the step-0 row `posttrain grpo --eval` writes
 * for the same rows and options (argv[1]: the posttrain program). */
#include "testfs.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>

static const char *posttrain_exe;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_reward_score)
{
    float r = -9;
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_EXACT, "  42 \n", 6, "42", 6, 64));
    ck_assert_float_eq(r, 1.0f);
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_EXACT, "42", 2, "\t42  ", 2, 64));
    ck_assert_float_eq(r, 1.0f);
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_EXACT, "42x", 3, "42", 3, 64));
    ck_assert_float_eq(r, 0.0f);
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_EXACT, "4 2", 3, "42", 3, 64));
    ck_assert_float_eq(r, 0.0f);
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_CONTAINS, "so it is 42.", 12, "42", 12, 64));
    ck_assert_float_eq(r, 1.0f);
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_CONTAINS, "so it is 4 2", 12, "42", 12, 64));
    ck_assert_float_eq(r, 0.0f);
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_CONTAINS, "anything", 8, "", 8, 64));
    ck_assert_float_eq(r, 1.0f);
    /* length: -(5 / 20) whatever the text */
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_LENGTH, NULL, 0, NULL, 5, 20));
    ck_assert_float_eq(r, -0.25f);
    ck_assert_ok(pt_builtin_reward_score(&r, PT_REWARD_LENGTH, "x", 1, "y", 64, 64));
    ck_assert_float_eq(r, -1.0f);
    ck_assert_status(pt_builtin_reward_score(&r, 7, "x", 1, "x", 1, 64), PT_EINVAL, "kind");
    ck_assert_status(pt_builtin_reward_score(&r, PT_REWARD_EXACT, "x", 1, NULL, 1, 64), PT_EINVAL, "answer");
    ck_assert_status(pt_builtin_reward_score(&r, PT_REWARD_LENGTH, NULL, 0, NULL, 1, 0), PT_EINVAL,
                     "max_new_tokens");
}
END_TEST

START_TEST(test_reward_list)
{
    pt_builtin_rewards rw;
    ck_assert_ok(pt_builtin_rewards_init(&rw));
    ck_assert_int_eq(rw.max_new_tokens, 64);
    ck_assert(!pt_builtin_rewards_have_accuracy(&rw));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_LENGTH, 0.1));
    ck_assert(!pt_builtin_rewards_have_accuracy(&rw)); /* length is no accuracy */
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_EXACT, 0));
    ck_assert(!pt_builtin_rewards_have_accuracy(&rw)); /* weight 0 */
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_CONTAINS, 0.5));
    ck_assert(pt_builtin_rewards_have_accuracy(&rw));
    ck_assert_int_eq(rw.n, 3);
    ck_assert_int_eq(rw.kinds[2], PT_REWARD_CONTAINS);
    ck_assert_double_eq(rw.weights[2], 0.5);
    ck_assert_status(pt_builtin_rewards_add(&rw, PT_REWARD_EXACT, 1), PT_EEXIST, "exact");
    ck_assert_status(pt_builtin_rewards_add(&rw, 3, 1), PT_EINVAL, "kind");
    ck_assert_status(pt_builtin_rewards_add(&rw, PT_REWARD_EXACT, INFINITY), PT_EINVAL, "weight");
    ck_assert_int_eq(rw.n, 3);
    pt_builtin_rewards full;
    ck_assert_ok(pt_builtin_rewards_init(&full));
    full.n = PT_GRPO_MAX_REWARD_FUNCS; /* kinds all exact (0): contains is not among them */
    ck_assert_status(pt_builtin_rewards_add(&full, PT_REWARD_CONTAINS, 1), PT_ERANGE, "holds");
    int k;
    ck_assert_ok(pt_builtin_reward_from_name(&k, "contains"));
    ck_assert_int_eq(k, PT_REWARD_CONTAINS);
    ck_assert_str_eq(pt_builtin_reward_name(PT_REWARD_LENGTH), "length");
    ck_assert_status(pt_builtin_reward_from_name(&k, "bleu"), PT_EINVAL, "exact, contains, length");
}
END_TEST

/* A sample of prompt "Q" and completion `text` (bytes = ids) in `group`. */
static void add_sample(pt_rollout_buffer *buf, const char *text, int64_t group)
{
    int32_t ids[64];
    int n = 0;
    ids[n++] = 'Q';
    for (const char *p = text; *p; p++)
        ids[n++] = (unsigned char)*p;
    pt_rollout_sample s;
    pt_rollout_sample_init(&s);
    s.ids = ids;
    s.n_ids = n;
    s.prompt_len = 1;
    s.group = group;
    ck_assert_ok(pt_rollout_buffer_add(buf, &s));
}

START_TEST(test_reward_fn)
{
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_builtin_rewards rw;
    pt_builtin_rewards_init(&rw);
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_EXACT, 1));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_CONTAINS, 0.5));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_LENGTH, 0.1));
    rw.max_new_tokens = 8;
    const char *names[3] = { "exact", "contains", "length" };
    pt_rollout_buffer_options bo;
    pt_rollout_buffer_options_init(&bo);
    bo.n_reward_funcs = 3;
    bo.reward_names = names;
    bo.reward_weights = rw.weights;
    pt_rollout_buffer *buf;
    ck_assert_ok(pt_rollout_buffer_create(&buf, &bo));
    add_sample(buf, " 12\n", 0);   /* exact 1, contains 1, length -4/8 */
    add_sample(buf, "x12y", 0);    /* 0, 1, -4/8 */
    add_sample(buf, "7", 1);       /* 1, 1, -1/8 */
    add_sample(buf, "1 2 7 1", 1); /* 0, 1, -7/8 */
    add_sample(buf, "nope", 1);    /* 0, 0, -4/8 */
    const char *answers[2] = { "12", "7" };
    pt_builtin_reward_payload p;
    ck_assert_ok(pt_builtin_reward_payload_init(&p));
    p.rewards = &rw;
    p.tokenizer = tok;
    p.answers = answers;
    p.n_answers = 2;
    for (int k = 0; k < 3; k++)
        ck_assert_ok(pt_rollout_buffer_score(buf, k, pt_builtin_reward_fn, &p));
    const float want[5][3] = { { 1, 1, -0.5f }, { 0, 1, -0.5f }, { 1, 1, -0.125f }, { 0, 1, -0.875f },
                               { 0, 0, -0.5f } };
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 3; k++) {
            float v;
            ck_assert_ok(pt_rollout_buffer_get_reward(&v, buf, i, k));
            ck_assert_msg(v == want[i][k], "sample %d reward %d: %g, want %g", i, k, v, want[i][k]);
        }
    /* a pt_builtin_rewards of an older header without max_new_tokens: its
     * default, 64 */
    rw.size = offsetof(pt_builtin_rewards, max_new_tokens);
    ck_assert_ok(pt_rollout_buffer_score(buf, 2, pt_builtin_reward_fn, &p));
    float v;
    ck_assert_ok(pt_rollout_buffer_get_reward(&v, buf, 3, 2));
    ck_assert_float_eq(v, -7.0f / 64.0f);
    rw.size = sizeof rw;
    /* a group without an answer: the function fails, the buffer says so */
    p.n_answers = 1;
    ck_assert_status(pt_rollout_buffer_score(buf, 0, pt_builtin_reward_fn, &p), PT_ECALLBACK, "returned 1");
    p.n_answers = 2;
    ck_assert_status(pt_rollout_buffer_score(buf, 0, pt_builtin_reward_fn, NULL), PT_ECALLBACK, "returned 1");
    pt_rollout_buffer_free(buf);
    pt_tokenizer_free(tok);
}
END_TEST

START_TEST(test_rows)
{
    char *dir = pt_test_tmpdir("pt_rows_");
    char good[4200], bad[4200], noans[4200], empty[4200];
    snprintf(good, sizeof good, "%s/good.jsonl", dir);
    snprintf(bad, sizeof bad, "%s/bad.jsonl", dir);
    snprintf(noans, sizeof noans, "%s/noans.jsonl", dir);
    snprintf(empty, sizeof empty, "%s/empty.jsonl", dir);
    write_file(good, "{\"prompt\": \"1+1=\", \"answer\": \"2\", \"x\": 5}\n\n{\"prompt\": \"hello\"}\n");
    write_file(bad, "{\"prompt\": \"a\", \"answer\": \"b\"}\n\n{\"prompt\": \"c\", \"answer\": \"d\"} junk\n");
    write_file(noans, "{\"prompt\": \"a\", \"answer\": \"b\"}\n{\"prompt\": \"c\", \"answer\": 3}\n");
    write_file(empty, "\n");
    pt_tokenizer *tok;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_prompt_rows_options o;
    ck_assert_ok(pt_prompt_rows_options_init(&o));
    ck_assert(o.read_answer && !o.require_answer && !o.keep_json);
    o.keep_json = true;
    pt_prompt_rows_report rep;
    pt_prompt_rows_report_init(&rep);
    pt_prompt_rows *rows;
    ck_assert_ok(pt_prompt_rows_load(&rows, &rep, good, tok, &o));
    ck_assert_int_eq(rep.fault, PT_ROWS_FAULT_NONE);
    ck_assert_int_eq(pt_prompt_rows_size(rows), 2);
    /* the byte tokenizer: BOS then the bytes */
    ck_assert_int_eq(pt_prompt_rows_max_prompt_len(rows), 6);
    pt_prompt_row r;
    pt_prompt_row_init(&r);
    ck_assert_ok(pt_prompt_rows_get(&r, rows, 0));
    const int32_t want0[5] = { PT_BYTE_TOKENIZER_BOS, '1', '+', '1', '=' };
    ck_assert_int_eq(r.n_ids, 5);
    ck_assert_mem_eq(r.ids, want0, sizeof want0);
    ck_assert_str_eq(r.answer, "2");
    ck_assert_str_eq(r.json, "{\"prompt\":\"1+1=\",\"answer\":\"2\",\"x\":5}");
    ck_assert_ok(pt_prompt_rows_get(&r, rows, 1));
    ck_assert_int_eq(r.n_ids, 6);
    ck_assert_ptr_null(r.answer);
    ck_assert_status(pt_prompt_rows_get(&r, rows, 2), PT_ERANGE, "row 2");
    pt_prompt_rows_free(rows);

    /* a bad line is refused naming the file and the line */
    ck_assert_status(pt_prompt_rows_load(&rows, &rep, bad, tok, NULL), PT_EFORMAT, "bad.jsonl line 3");
    ck_assert_ptr_null(rows);
    ck_assert_int_eq(rep.fault, PT_ROWS_FAULT_READ);
    ck_assert_uint_eq(rep.line, 3);
    o.require_answer = true;
    ck_assert_status(pt_prompt_rows_load(&rows, &rep, good, tok, &o), PT_EFORMAT,
                     "good.jsonl line 3: needs a string \"answer\"");
    ck_assert_int_eq(rep.fault, PT_ROWS_FAULT_NO_ANSWER);
    ck_assert_uint_eq(rep.line, 3);
    /* an answer that is not a string is the reader's error */
    ck_assert_status(pt_prompt_rows_load(&rows, &rep, noans, tok, &o), PT_EFORMAT, "noans.jsonl line 2");
    ck_assert_int_eq(rep.fault, PT_ROWS_FAULT_READ);
    ck_assert_uint_eq(rep.line, 2);
    ck_assert_status(pt_prompt_rows_load(&rows, &rep, empty, tok, &o), PT_EFORMAT, "has no rows");
    ck_assert_int_eq(rep.fault, PT_ROWS_FAULT_NO_ROWS);
    ck_assert_str_eq(pt_prompt_rows_fault_name(PT_ROWS_FAULT_NO_ROWS), "no_rows");
    snprintf(empty, sizeof empty, "%s/missing.jsonl", dir);
    ck_assert_status(pt_prompt_rows_load(&rows, NULL, empty, tok, &o), PT_ENOTFOUND, "missing.jsonl");

    /* "messages" rows (opt-in), rendered with the template and the
     * generation prompt as pt_chat_render_ids renders them */
    char msgs[4200];
    snprintf(msgs, sizeof msgs, "%s/msgs.jsonl", dir);
    write_file(msgs, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                     "{\"role\": \"user\", \"content\": \"2+2?\"}], \"answer\": \"4\"}\n"
                     "{\"prompt\": \"3+3?\", \"answer\": \"6\"}\n"
                     "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}], \"answer\": \"1\"}\n");
    pt_chat_template *tpl;
    ck_assert_ok(pt_chat_template_create(&tpl, "chatml"));
    pt_prompt_rows_options mo;
    pt_prompt_rows_options_init(&mo);
    mo.messages = true;
    ck_assert_status(pt_prompt_rows_load(&rows, &rep, msgs, tok, &mo), PT_EINVAL, "chat_template");
    mo.chat_template = tpl;
    ck_assert_status(pt_prompt_rows_load(&rows, &rep, msgs, tok, &mo), PT_EFORMAT,
                     "msgs.jsonl line 3: messages[0] needs a \"role\"");
    ck_assert_int_eq(rep.fault, PT_ROWS_FAULT_ENCODE);
    ck_assert_uint_eq(rep.line, 3);
    write_file(msgs, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                     "{\"role\": \"user\", \"content\": \"2+2?\"}], \"answer\": \"4\"}\n"
                     "{\"prompt\": \"3+3?\", \"answer\": \"6\"}\n");
    ck_assert_ok(pt_prompt_rows_load(&rows, &rep, msgs, tok, &mo));
    ck_assert_int_eq(pt_prompt_rows_size(rows), 2);
    pt_chat_message cm[2] = { { .role = PT_CHAT_ROLE_SYSTEM, .content = "Be brief." },
                              { .role = PT_CHAT_ROLE_USER, .content = "2+2?" } };
    pt_chat_options co;
    pt_chat_options_init(&co);
    co.add_generation_prompt = 1;
    for (int i = 0; i < 2; i++) {
        int32_t *want;
        size_t nw;
        ck_assert_ok(pt_chat_render_ids(&want, NULL, &nw, tpl, tok, i == 0 ? cm : &(pt_chat_message){
                                            .role = PT_CHAT_ROLE_USER, .content = "3+3?" }, i == 0 ? 2 : 1, &co));
        ck_assert_ok(pt_prompt_rows_get(&r, rows, i));
        ck_assert_int_eq(r.n_ids, (int)nw);
        ck_assert_mem_eq(r.ids, want, nw * sizeof *want);
        ck_assert_str_eq(r.answer, i == 0 ? "4" : "6");
        pt_free(want);
    }
    pt_prompt_rows_free(rows);
    /* without the option a "messages" row is the reader's missing "prompt" */
    ck_assert_status(pt_prompt_rows_load(&rows, &rep, msgs, tok, NULL), PT_ENOTFOUND, "line 1");
    pt_chat_template_free(tpl);

    /* rows made by hand */
    ck_assert_ok(pt_prompt_rows_create(&rows));
    const int32_t ids[3] = { 5, 6, 7 };
    ck_assert_ok(pt_prompt_rows_add(rows, ids, 3, "ans"));
    ck_assert_status(pt_prompt_rows_add(rows, ids, 0, NULL), PT_EINVAL, "n_ids");
    ck_assert_int_eq(pt_prompt_rows_size(rows), 1);
    ck_assert_ok(pt_prompt_rows_get(&r, rows, 0));
    ck_assert_str_eq(r.answer, "ans");
    ck_assert_ptr_null(r.json);
    pt_prompt_rows_free(rows);
    pt_tokenizer_free(tok);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- stories260K ---------------------------------------------------------------- */

static char model_dir[4096];

static const char *const k_rows[] = {
    "{\"prompt\": \"Once upon a time\", \"answer\": \"there\"}",
    "{\"prompt\": \"Lily and Tom\", \"answer\": \"Lily\"}",
    "{\"prompt\": \"The cat sat\", \"answer\": \"on the mat\"}",
    "{\"prompt\": \"One day, a little\", \"answer\": \"girl\"}",
    "{\"prompt\": \"Tim had a red\", \"answer\": \"zzz\"}",
};
#define N_ROWS 5

static void strip_copy(char *out, const char *s, size_t n)
{
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    memcpy(out, s, n);
    out[n] = '\0';
}

START_TEST(test_eval_stories)
{
    char *dir = pt_test_tmpdir("pt_eval_");
    char rows_path[4200];
    snprintf(rows_path, sizeof rows_path, "%s/rows.jsonl", dir);
    FILE *f = fopen(rows_path, "w");
    for (int i = 0; i < N_ROWS; i++)
        fprintf(f, "%s\n", k_rows[i]);
    fclose(f);
    pt_model *m;
    ck_assert_ok(pt_model_load_dir(&m, model_dir, NULL));
    const pt_tokenizer *tok = pt_model_tokenizer(m);
    ck_assert_ptr_nonnull(tok);
    pt_prompt_rows *rows;
    ck_assert_ok(pt_prompt_rows_load(&rows, NULL, rows_path, tok, NULL));
    const int max_new = 12;
    pt_builtin_rewards rw;
    pt_builtin_rewards_init(&rw);
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_CONTAINS, 1));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_EXACT, 0.5));
    ck_assert_ok(pt_builtin_rewards_add(&rw, PT_REWARD_LENGTH, 0.1));
    rw.max_new_tokens = max_new;
    pt_generate_options go;
    pt_generate_options_init(&go);
    go.max_new_tokens = max_new;
    go.temperature = 0.8f;
    go.top_k = 20;
    pt_grpo_eval_options eo;
    ck_assert_ok(pt_grpo_eval_options_init(&eo));
    eo.sampling = &go;
    eo.samples = 3;
    eo.seed = 11;
    const int max_seq = pt_prompt_rows_max_prompt_len(rows) + max_new;
    pt_generator *gen;
    ck_assert_ok(pt_generator_create(&gen, m, 4, max_seq)); /* 4 rows per call: chunks of 4 */
    pt_grpo_eval_sums s;
    ck_assert_ok(pt_grpo_evaluate(&s, gen, rows, tok, &rw, &eo));
    ck_assert_double_eq(s.completions[PT_GRPO_EVAL_GREEDY], N_ROWS);
    ck_assert_double_eq(s.completions[PT_GRPO_EVAL_SAMPLED], N_ROWS * 3);

    /* greedy, by hand: each row alone, decoded, scored here */
    double reward = 0, correct = 0, length = 0, func[3] = { 0, 0, 0 };
    pt_generate_options g1 = go;
    g1.temperature = 0;
    g1.top_k = 0;
    for (int i = 0; i < N_ROWS; i++) {
        pt_prompt_row r;
        pt_prompt_row_init(&r);
        ck_assert_ok(pt_prompt_rows_get(&r, rows, i));
        int32_t toks[12], nt;
        ck_assert_ok(pt_generate(gen, r.ids, &r.n_ids, 1, &g1, toks, &nt, NULL, NULL));
        char *text, stripped[512], ans[64];
        size_t len;
        ck_assert_ok(pt_tokenizer_decode(&text, &len, tok, toks, (size_t)nt, PT_TOK_SKIP_SPECIAL));
        strip_copy(stripped, text, len);
        strip_copy(ans, r.answer, strlen(r.answer));
        const double v[3] = { strstr(text, r.answer) ? 1 : 0, strcmp(stripped, ans) == 0 ? 1 : 0,
                              -(double)(float)((float)nt / (float)max_new) };
        pt_free(text);
        double R = 0;
        for (int k = 0; k < 3; k++) {
            R += rw.weights[k] * v[k];
            func[k] += v[k];
        }
        reward += R;
        correct += v[0] >= 1 && v[1] >= 1;
        length += nt;
    }
    ck_assert_double_eq_tol(s.reward[PT_GRPO_EVAL_GREEDY], reward, 1e-12);
    ck_assert_double_eq(s.correct[PT_GRPO_EVAL_GREEDY], correct);
    ck_assert_double_eq(s.length[PT_GRPO_EVAL_GREEDY], length);
    for (int k = 0; k < 3; k++)
        ck_assert_double_eq_tol(s.reward_func[PT_GRPO_EVAL_GREEDY][k], func[k], 1e-12);
    fprintf(stderr, "stories260K eval: greedy reward %.4f, contains %.0f of %d, mean length %.2f\n",
            reward / N_ROWS, func[0], N_ROWS, length / N_ROWS);
    ck_assert_msg(func[0] > 0 && func[0] < N_ROWS, "the rows should be neither all right nor all wrong");

    /* the same evaluation split in two (rows 0-1 and 2-4) adds up */
    pt_grpo_eval_sums a, b;
    eo.count = 2;
    ck_assert_ok(pt_grpo_evaluate(&a, gen, rows, tok, &rw, &eo));
    eo.begin = 2;
    eo.count = -1;
    eo.batch = 1;
    ck_assert_ok(pt_grpo_evaluate(&b, gen, rows, tok, &rw, &eo));
    for (int kind = 0; kind < PT_GRPO_EVAL_KINDS; kind++) {
        ck_assert_double_eq(a.completions[kind] + b.completions[kind], s.completions[kind]);
        ck_assert_double_eq(a.length[kind] + b.length[kind], s.length[kind]);
        ck_assert_double_eq(a.correct[kind] + b.correct[kind], s.correct[kind]);
    }
    eo.begin = 4;
    eo.count = 2;
    ck_assert_status(pt_grpo_evaluate(&a, gen, rows, tok, &rw, &eo), PT_EINVAL, "not within the 5 rows");

    /* the metrics row against posttrain grpo --eval's step-0 row */
    char *row;
    ck_assert_ok(pt_grpo_eval_row(&row, &s, &rw, 3, 0));
    if (!posttrain_exe) {
        fprintf(stderr, "SKIP the comparison with posttrain grpo --eval: no program given\n");
    } else {
        char cmd[16384], line[8192], metrics[4300];
        snprintf(cmd, sizeof cmd, "'%s' grpo --model '%s' --data '%s' --eval '%s' --out '%s/out' --reward "
                 "contains,exact:0.5,length:0.1 --max-new-tokens %d --temperature 0.8 --top-k 20 --eval-samples 3 "
                 "--seed 11 --steps 1 --num-generations 2 --batch-prompts 2 --threads 1 2>'%s/log'",
                 posttrain_exe, model_dir, rows_path, rows_path, dir, max_new, dir);
        ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
        snprintf(metrics, sizeof metrics, "%s/out/metrics.jsonl", dir);
        f = fopen(metrics, "r");
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f)); /* the first row: the step-0 evaluation */
        fclose(f);
        line[strcspn(line, "\n")] = '\0';
        char *time = strstr(line, ", \"time\": "); /* the run layer's wall-clock stamp */
        ck_assert_ptr_nonnull(time);
        strcpy(time, "}");
        ck_assert_str_eq(line, row);
    }
    pt_free(row);
    pt_generator_free(gen);
    pt_prompt_rows_free(rows);
    pt_model_free(m);
    pt_test_rm_rf(dir);
    free(dir);
}
END_TEST

int main(int argc, char **argv)
{
    posttrain_exe = argc > 1 ? argv[1] : NULL;
    Suite *s = suite_create("grpo_builtin");
    TCase *tc = tcase_create("builtin");
    tcase_add_test(tc, test_reward_score);
    tcase_add_test(tc, test_reward_list);
    tcase_add_test(tc, test_reward_fn);
    tcase_add_test(tc, test_rows);
    suite_add_tcase(s, tc);
    const char *shared = pt_test_shared_data("grpo_builtin (the stories260K evaluation)");
    struct stat st;
    if (shared)
        snprintf(model_dir, sizeof model_dir, "%s/models/stories260K", shared);
    if (shared && stat(model_dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        TCase *ts = tcase_create("stories260K");
        tcase_set_timeout(ts, 300);
        tcase_add_test(ts, test_eval_stories);
        suite_add_tcase(s, ts);
    } else {
        fprintf(stderr, "SKIP grpo_builtin: the stories260K evaluation (no %s)\n",
                shared ? model_dir : "shared data");
    }
    return pt_test_run(s);
}
