/* The built-in addition task (posttrain/addition.h) against hand answers and
 * an independent Python splitmix64 (the published constants): the held-out
 * rule, the held-out set and the teacher's draws of posttrain demo; the
 * evaluation on a hand-built bigram model whose every answer is "70" and
 * EOS (so 3+4 and 0+7 are right, 8+9 is its slip, 2+2 is wrong). */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

START_TEST(test_problem)
{
    char p[64], a[32];
    ck_assert_ok(pt_addition_problem(p, sizeof p, a, sizeof a, 2, 59, 96, false));
    ck_assert_str_eq(p, "59+96=");
    ck_assert_str_eq(a, "551"); /* 155, least significant digit first */
    ck_assert_ok(pt_addition_problem(p, sizeof p, a, sizeof a, 2, 59, 96, true));
    ck_assert_str_eq(a, "540"); /* 9+6 -> 5, 5+9 -> 4, no carry out */
    ck_assert_ok(pt_addition_problem(p, sizeof p, a, sizeof a, 3, 7, 5, false));
    ck_assert_str_eq(p, "007+005=");
    ck_assert_str_eq(a, "2100");
    ck_assert_ok(pt_addition_problem(p, 9, a, 5, 3, 999, 999, false));
    ck_assert_str_eq(a, "8991");
    ck_assert_status(pt_addition_problem(p, 8, a, 5, 3, 1, 1, false), PT_EINVAL, "prompt_cap");
    ck_assert_status(pt_addition_problem(p, 9, a, 4, 3, 1, 1, false), PT_EINVAL, "answer_cap");
    ck_assert_status(pt_addition_problem(p, 64, a, 32, 2, 100, 1, false), PT_EINVAL, "a");
    ck_assert_status(pt_addition_problem(p, 64, a, 32, 2, 1, -1, false), PT_EINVAL, "b");
    ck_assert_status(pt_addition_problem(p, 64, a, 32, 0, 1, 1, false), PT_EINVAL, "digits");
    ck_assert_status(pt_addition_problem(p, 64, a, 32, 10, 1, 1, false), PT_EINVAL, "digits");
}
END_TEST

START_TEST(test_held_out)
{
    int n = 0;
    for (int a = 0; a < 100; a++)
        for (int b = 0; b < 100; b++)
            n += pt_addition_held_out(a, b);
    ck_assert_int_eq(n, 1249); /* Python's count */
    int64_t pairs[10];
    size_t got = 0;
    ck_assert_ok(pt_addition_held_out_pairs(pairs, &got, 5, 2));
    ck_assert_uint_eq(got, 5);
    const int64_t want[10] = { 18, 48, 68, 71, 65, 64, 5, 36, 17, 1 };
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(pairs[i], want[i]);
    /* one digit: only 10 of the 100 pairs are held out */
    int64_t all[200];
    ck_assert_ok(pt_addition_held_out_pairs(all, &got, 100, 1));
    ck_assert_uint_eq(got, 10);
    for (size_t i = 0; i < got; i++)
        ck_assert(pt_addition_held_out(all[2 * i], all[2 * i + 1]));
    ck_assert_status(pt_addition_held_out_pairs(NULL, &got, 1, 1), PT_EINVAL, "pairs");
}
END_TEST

START_TEST(test_teacher)
{
    uint64_t rng = 1 * 7919 + 17; /* the demo's stream for seed 1 */
    const int64_t want[3][3] = { { 23, 33, 1 }, { 74, 89, 1 }, { 97, 83, 0 } };
    for (int i = 0; i < 3; i++) {
        int64_t a, b;
        bool slipped;
        ck_assert_ok(pt_addition_teacher_pair(&a, &b, &slipped, 2, 0.5, &rng));
        ck_assert_int_eq(a, want[i][0]);
        ck_assert_int_eq(b, want[i][1]);
        ck_assert_int_eq(slipped, want[i][2]);
        ck_assert(!pt_addition_held_out(a, b));
    }
    ck_assert_uint_eq(rng, 10372713005361036221ull);
    int64_t a, b;
    bool s;
    ck_assert_status(pt_addition_teacher_pair(&a, &b, &s, 2, 1.5, &rng), PT_EINVAL, "slip");
    ck_assert_status(pt_addition_train_pair(&a, &b, 2, NULL), PT_EINVAL, "rng");
}
END_TEST

/* Completions scored through the byte tokenizer: the answer and EOS, the
 * slip and EOS, no EOS, and a problem without a carry (no slip to find). */
START_TEST(test_score)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    const int32_t eos = pt_tokenizer_eos_id(tok);
    struct {
        const char *text;
        bool eos;
        int64_t a, b;
        bool correct, slipped;
    } cases[] = {
        { "551", true, 59, 96, true, false }, { "540", true, 59, 96, false, true },
        { "551", false, 59, 96, false, false }, { "5510", true, 59, 96, false, false },
        { "640", true, 12, 34, true, false }, /* 12+34: no carry, the slip is the answer */
        { "", true, 59, 96, false, false },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t *ids = NULL, buf[16];
        size_t n = 0;
        ck_assert_ok(pt_tokenizer_encode(&ids, &n, tok, cases[c].text, strlen(cases[c].text), 0));
        if (n)
            memcpy(buf, ids, n * sizeof *ids);
        pt_free(ids);
        if (cases[c].eos)
            buf[n++] = eos;
        bool ok = !cases[c].correct, sl = !cases[c].slipped;
        ck_assert_ok(pt_addition_score(&ok, &sl, tok, buf, n, 2, cases[c].a, cases[c].b));
        ck_assert_msg(ok == cases[c].correct && sl == cases[c].slipped, "case %zu: correct %d slipped %d", c, ok,
                      sl);
    }
    bool ok;
    ck_assert_status(pt_addition_score(&ok, NULL, NULL, &eos, 1, 2, 1, 1), PT_EINVAL, "tok");
    ck_assert_status(pt_addition_score(&ok, NULL, tok, &eos, 1, 2, 100, 1), PT_EINVAL, "a");
    pt_tokenizer_free(tok);
}
END_TEST

/* The byte id of character ch. */
static int32_t byte_id(const pt_tokenizer *tok, char ch)
{
    int32_t *ids = NULL;
    size_t n = 0;
    ck_assert_ok(pt_tokenizer_encode(&ids, &n, tok, &ch, 1, 0));
    ck_assert_uint_eq(n, 1);
    int32_t id = ids[0];
    pt_free(ids);
    return id;
}

/* A llama whose layers add nothing (every projection 0) and whose
 * embeddings are one-hot, so the next token is a function of the last one:
 * '=' -> '7' -> '0' -> EOS, each by a logit margin of 40. */
static pt_model *bigram_model(const pt_tokenizer *tok)
{
    pt_model_config c;
    pt_test_tiny_config(&c, PT_ARCH_LLAMA, pt_tokenizer_vocab_size(tok));
    c.tie_word_embeddings = false;
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 1));
    const int H = c.hidden_size;
    for (size_t i = 0; i < pt_model_tensor_count(m); i++) {
        pt_tensor_info t;
        pt_tensor_info_init(&t);
        ck_assert_ok(pt_model_tensor_info(&t, m, i));
        bool norm = strcmp(t.name, "model.norm.weight") == 0;
        for (size_t k = 0; k < t.numel; k++)
            t.data[k] = norm ? 1.0f : 0.0f;
        if (!strcmp(t.name, "model.embed_tokens.weight")) {
            const char *chars = "0123456789+=";
            for (int k = 0; chars[k]; k++)
                t.data[(size_t)byte_id(tok, chars[k]) * H + k] = 1.0f;
            t.data[(size_t)pt_tokenizer_bos_id(tok) * H + 12] = 1.0f;
        }
        if (!strcmp(t.name, "lm_head.weight")) {
            t.data[(size_t)byte_id(tok, '7') * H + 11] = 10.0f; /* '=' (basis 11) -> '7' */
            t.data[(size_t)byte_id(tok, '0') * H + 7] = 10.0f;  /* '7' -> '0' */
            t.data[(size_t)pt_tokenizer_eos_id(tok) * H + 0] = 10.0f; /* '0' -> EOS */
        }
    }
    pt_model_weights_changed(m);
    return m;
}

START_TEST(test_evaluate)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    int32_t ids[8];
    size_t n = 0;
    ck_assert_ok(pt_addition_prompt_ids(ids, 8, &n, tok, 1, 3, 4));
    ck_assert_uint_eq(n, 5); /* BOS "3+4=" */
    ck_assert_int_eq(ids[0], pt_tokenizer_bos_id(tok));
    ck_assert_int_eq(ids[1], byte_id(tok, '3'));
    ck_assert_int_eq(ids[4], byte_id(tok, '='));
    ck_assert_status(pt_addition_prompt_ids(ids, 4, &n, tok, 1, 3, 4), PT_ERANGE, "cap");
    ck_assert_uint_eq(n, 0);

    pt_model *m = bigram_model(tok);
    pt_generator *gen = NULL;
    ck_assert_ok(pt_generator_create(&gen, m, 4, 16));
    const int64_t pairs[8] = { 3, 4, 8, 9, 2, 2, 0, 7 };
    const int32_t answer[3] = { byte_id(tok, '7'), byte_id(tok, '0'), pt_tokenizer_eos_id(tok) };
    pt_addition_eval_options o;
    ck_assert_ok(pt_addition_eval_options_init(&o));
    o.digits = 1;
    o.batch = 3; /* two calls: 3 pairs, then 1 */
    for (int sampled = 0; sampled <= 1; sampled++) {
        o.temperature = sampled ? 1.0 : 0.0;
        o.seed = 5;
        int64_t correct = -1, slipped = -1;
        int32_t tokens[4 * 3], ntok[4];
        ck_assert_ok(pt_addition_evaluate(&correct, &slipped, tokens, ntok, gen, tok, pairs, 4, &o));
        ck_assert_int_eq(correct, 2);
        ck_assert_int_eq(slipped, 1);
        for (int i = 0; i < 4; i++) {
            ck_assert_int_eq(ntok[i], 3);
            for (int k = 0; k < 3; k++)
                ck_assert_int_eq(tokens[3 * i + k], answer[k]);
        }
    }
    int64_t correct = -1;
    ck_assert_ok(pt_addition_evaluate(&correct, NULL, NULL, NULL, gen, tok, pairs + 2, 3, NULL)); /* 2 digits */
    ck_assert_int_eq(correct, 0); /* "70" is never a 2-digit answer (3 digits) */
    int32_t tokens[12];
    ck_assert_status(pt_addition_evaluate(&correct, NULL, tokens, NULL, gen, tok, pairs, 4, &o), PT_EINVAL,
                     "n_tokens");
    o.batch = 5;
    ck_assert_status(pt_addition_evaluate(&correct, NULL, NULL, NULL, gen, tok, pairs, 4, &o), PT_EINVAL, "batch");
    o.batch = 0;
    o.digits = 0;
    ck_assert_status(pt_addition_evaluate(&correct, NULL, NULL, NULL, gen, tok, pairs, 4, &o), PT_EINVAL, "digits");
    ck_assert_status(pt_addition_evaluate(&correct, NULL, NULL, NULL, gen, tok, NULL, 4, NULL), PT_EINVAL, "pairs");
    pt_generator_free(gen);
    pt_model_free(m);
    pt_tokenizer_free(tok);
}
END_TEST

/* Rows seen by the trace callback. */
typedef struct rows_seen {
    int n;
    char text[4][32];
} rows_seen;

static int see_row(const char *prompt, const char *completion, void *payload)
{
    rows_seen *r = payload;
    snprintf(r->text[r->n++], sizeof r->text[0], "%s%s", prompt, completion);
    return r->n >= 4; /* the fourth row stops the traces */
}

/* The demo's first three traces for seed 1 at slip 0.5 (test_teacher's
 * draws): 23+33 (no carry, slipped: the same answer), 74+89 slipped ("350",
 * right "361"), 97+83 right ("081"); the rows and the SFT example of the
 * first by hand. */
START_TEST(test_traces)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_dataset_options dopt;
    ck_assert_ok(pt_dataset_options_init(&dopt));
    dopt.batch_size = 1;
    dopt.shuffle = false;
    pt_dataset *data = NULL;
    ck_assert_ok(pt_dataset_create(&data, &dopt));
    uint64_t rng = 1 * 7919 + 17;
    int64_t wrong = -1;
    rows_seen seen = { 0 };
    ck_assert_ok(pt_addition_add_traces(data, &wrong, tok, 2, 0.5, 3, &rng, see_row, &seen));
    ck_assert_int_eq(wrong, 1);
    ck_assert_uint_eq(rng, 10372713005361036221ull); /* the stream where test_teacher leaves it */
    ck_assert_int_eq(seen.n, 3);
    ck_assert_str_eq(seen.text[0], "23+33=650");
    ck_assert_str_eq(seen.text[1], "74+89=350");
    ck_assert_str_eq(seen.text[2], "97+83=081");
    pt_dataset_stats st;
    pt_dataset_stats_init(&st);
    ck_assert_ok(pt_dataset_get_stats(&st, data));
    ck_assert_int_eq(st.train_examples + st.eval_examples, 3);
    ck_assert_int_eq(st.train_target_tokens, 3 * 4); /* 3 digits and EOS each */
    pt_batch b;
    pt_batch_init(&b);
    const float *w;
    ck_assert_ok(pt_dataset_next_batch(&b, &w, data));
    const char *text = "23+33=650";
    ck_assert_int_ge(b.seq, 11); /* BOS, 9 characters, EOS */
    for (int t = 0; t < 11; t++) {
        int32_t id = t == 0 ? pt_tokenizer_bos_id(tok) : t < 10 ? byte_id(tok, text[t - 1]) : pt_tokenizer_eos_id(tok);
        int32_t next = t < 9 ? byte_id(tok, text[t]) : pt_tokenizer_eos_id(tok);
        ck_assert_int_eq(b.input_ids[t], id);
        ck_assert_int_eq(b.targets[t], t < 6 || t == 10 ? -1 : next); /* trained on "650" and EOS */
    }
    /* the callback stops the fourth trace, after it was added */
    ck_assert_status(pt_addition_add_traces(data, &wrong, tok, 2, 0.5, 5, &rng, see_row, &seen), PT_ECALLBACK,
                     "callback");
    ck_assert_int_eq(seen.n, 4);
    ck_assert_status(pt_addition_add_traces(data, NULL, tok, 2, 1.5, 1, &rng, NULL, NULL), PT_EINVAL, "slip");
    ck_assert_status(pt_addition_add_traces(data, NULL, tok, 2, 0.5, 1, NULL, NULL, NULL), PT_EINVAL, "rng");
    pt_dataset_free(data);
    pt_tokenizer_free(tok);
}
END_TEST

/* Rollouts on the bigram model: every completion is "70" and EOS (reward 1
 * for 3+4, 0 for 2+2); two tokens cut it before the EOS (reward 0). */
START_TEST(test_rollouts)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_model *m = bigram_model(tok);
    pt_generator *gen = NULL;
    ck_assert_ok(pt_generator_create(&gen, m, 4, 16));
    pt_rollout_buffer *buf = NULL;
    ck_assert_ok(pt_rollout_buffer_create(&buf, NULL));
    const int64_t pairs[4] = { 3, 4, 2, 2 };
    pt_generate_options go;
    ck_assert_ok(pt_generate_options_init(&go));
    go.max_new_tokens = 3;
    go.seed = 9;
    for (int cut = 0; cut <= 1; cut++) {
        go.max_new_tokens = cut ? 2 : 3;
        ck_assert_ok(pt_addition_rollouts(buf, gen, tok, pairs, 2, 2, 1, &go));
        ck_assert_int_eq(pt_rollout_buffer_size(buf), 4);
        for (int i = 0; i < 4; i++) {
            float r = -1;
            ck_assert_ok(pt_rollout_buffer_get_reward(&r, buf, i, 0));
            ck_assert_msg(r == (!cut && i < 2 ? 1.0f : 0.0f), "cut %d sample %d: reward %g", cut, i, r);
        }
        ck_assert_ok(pt_rollout_buffer_clear(buf));
    }
    ck_assert_status(pt_addition_rollouts(buf, gen, tok, pairs, 2, 3, 1, &go), PT_EINVAL, "room");
    ck_assert_status(pt_addition_rollouts(buf, gen, tok, pairs, 2, 2, 0, &go), PT_EINVAL, "digits");
    ck_assert_status(pt_addition_rollouts(buf, gen, tok, NULL, 2, 2, 1, &go), PT_EINVAL, "pairs");
    go.max_new_tokens = 16;
    ck_assert_status(pt_addition_rollouts(buf, gen, tok, pairs, 2, 2, 1, &go), PT_EINVAL, "max_seq");
    ck_assert_int_eq(pt_rollout_buffer_size(buf), 0);
    pt_rollout_buffer_free(buf);
    pt_generator_free(gen);
    pt_model_free(m);
    pt_tokenizer_free(tok);
}
END_TEST

/* The demo's model: hidden 64 in 16 heads, 2 layers, by hand. */
START_TEST(test_model_config)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_model_config c;
    ck_assert_ok(pt_addition_model_config(&c, tok, 64, 2, 16, true));
    ck_assert_int_eq(c.arch, PT_ARCH_LLAMA);
    ck_assert_int_eq(c.vocab_size, 261); /* 256 bytes and 5 special tokens */
    ck_assert_int_eq(c.hidden_size, 64);
    ck_assert_int_eq(c.num_hidden_layers, 2);
    ck_assert_int_eq(c.num_attention_heads, 16);
    ck_assert_int_eq(c.num_key_value_heads, 16);
    ck_assert_int_eq(c.head_dim, 4);
    ck_assert_int_eq(c.intermediate_size, 192);
    ck_assert_int_eq(c.max_position_embeddings, 64);
    ck_assert(c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_token_id, pt_tokenizer_bos_id(tok));
    ck_assert_int_eq(c.eos_token_id, pt_tokenizer_eos_id(tok));
    pt_model *m = NULL;
    ck_assert_ok(pt_model_create(&m, &c, 1));
    /* embeddings 259 * 64, per layer 4 * 64^2 attention, 3 * 64 * 192 MLP, 2 * 64 norms; the final norm */
    ck_assert_int_eq(pt_model_param_count(m), 261 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 192 + 2 * 64) + 64);
    pt_model_free(m);
    ck_assert_status(pt_addition_model_config(&c, tok, 64, 2, 5, false), PT_EINVAL, "heads");
    ck_assert_status(pt_addition_model_config(&c, tok, 64, 0, 16, false), PT_EINVAL, "layers");
    pt_tokenizer_free(tok);
}
END_TEST

/* A whole file read into buf (cap bytes); its length, -1 if it cannot be read. */
static long read_all(char *buf, size_t cap, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (long)n;
}

/* test_traces' three traces written to a file; a file that cannot be
 * written adds no trace and leaves nothing behind. */
START_TEST(test_save_traces)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_dataset_options dopt;
    ck_assert_ok(pt_dataset_options_init(&dopt));
    pt_dataset *data = NULL;
    ck_assert_ok(pt_dataset_create(&data, &dopt));
    char dir[] = "/tmp/pt_addition.XXXXXX", path[64], buf[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    uint64_t rng = 1 * 7919 + 17;
    int64_t wrong = -1;
    ck_assert_ok(pt_addition_save_traces(data, &wrong, tok, 2, 0.5, 3, &rng, path));
    ck_assert_int_eq(wrong, 1);
    ck_assert_int_ge(read_all(buf, sizeof buf, path), 0);
    ck_assert_str_eq(buf, "{\"prompt\": \"23+33=\", \"completion\": \"650\"}\n"
                          "{\"prompt\": \"74+89=\", \"completion\": \"350\"}\n"
                          "{\"prompt\": \"97+83=\", \"completion\": \"081\"}\n");
    /* no path: the traces only */
    rng = 1 * 7919 + 17;
    ck_assert_ok(pt_addition_save_traces(data, &wrong, tok, 2, 0.5, 3, &rng, NULL));
    ck_assert_int_eq(wrong, 1);
    char bad[96];
    snprintf(bad, sizeof bad, "%s/no/t.jsonl", dir);
    ck_assert_int_eq(pt_addition_save_traces(data, &wrong, tok, 2, 0.5, 3, &rng, bad), PT_EIO);
    snprintf(buf, sizeof buf, "cannot write %s: No such file or directory", bad);
    ck_assert_str_eq(pt_last_error(), buf);
    ck_assert_int_eq(mkdir(bad, 0700) == 0 ? 0 : errno, ENOENT); /* its directory is not there */
    snprintf(bad, sizeof bad, "%s/adir", dir);
    ck_assert_int_eq(mkdir(bad, 0700), 0);
    ck_assert_int_eq(pt_addition_save_traces(data, &wrong, tok, 2, 0.5, 3, &rng, bad), PT_EIO);
    snprintf(buf, sizeof buf, "cannot write %s: Is a directory", bad);
    ck_assert_str_eq(pt_last_error(), buf);
    pt_dataset_stats st;
    pt_dataset_stats_init(&st);
    ck_assert_ok(pt_dataset_get_stats(&st, data));
    ck_assert_int_eq(st.train_examples + st.eval_examples, 6 + 3); /* the last call's traces were added */
    /* nothing left but t.jsonl and the empty directory */
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            ck_assert_msg(!strcmp(e->d_name, "t.jsonl") || !strcmp(e->d_name, "adir"), "left: %s", e->d_name),
                entries++;
    closedir(d);
    ck_assert_int_eq(entries, 2);
    rmdir(bad);
    unlink(path);
    rmdir(dir);
    pt_dataset_free(data);
    pt_tokenizer_free(tok);
}
END_TEST

/* The ids of text and EOS into ids; their number. */
static int32_t answer_ids(int32_t *ids, const pt_tokenizer *tok, const char *text)
{
    int32_t n = 0;
    for (; text[n]; n++)
        ids[n] = byte_id(tok, text[n]);
    ids[n++] = pt_tokenizer_eos_id(tok);
    return n;
}

/* The answers shown, by hand: 3+4 has no carry (not shown); 9+8 answered
 * right, 8+9 with its slip, 5+5 wrong otherwise; show 2 stops at two. */
START_TEST(test_show_answers)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    const int64_t pairs[8] = { 3, 4, 9, 8, 8, 9, 5, 5 };
    int32_t tokens[4 * 3], ntok[4];
    const char *given[4] = { "70", "71", "70", "3" };
    for (int i = 0; i < 4; i++)
        ntok[i] = answer_ids(tokens + 3 * i, tok, given[i]);
    char buf[256];
    ck_assert_ok(pt_addition_show_answers(buf, sizeof buf, tok, tokens, ntok, pairs, 4, 1, 3));
    ck_assert_str_eq(buf, "    9+8=71 right\n"
                          "    8+9=70 wrong: the carries forgotten, right: 71\n"
                          "    5+5=3  wrong, right: 01\n");
    ck_assert_ok(pt_addition_show_answers(buf, sizeof buf, tok, tokens, ntok, pairs, 4, 1, 2));
    ck_assert_str_eq(buf, "    9+8=71 right\n    8+9=70 wrong: the carries forgotten, right: 71\n");
    ck_assert_ok(pt_addition_show_answers(buf, 48, tok, tokens, ntok, pairs, 4, 1, 3)); /* 17 + 51 > 47: not the second */
    ck_assert_str_eq(buf, "    9+8=71 right\n    5+5=3  wrong, right: 01\n");
    ck_assert_status(pt_addition_show_answers(buf, sizeof buf, tok, tokens, ntok, pairs, 4, 0, 3), PT_EINVAL,
                     "digits");
    ck_assert_status(pt_addition_show_answers(buf, sizeof buf, tok, NULL, ntok, pairs, 4, 1, 3), PT_EINVAL, "tokens");
    pt_tokenizer_free(tok);
}
END_TEST

/* The demo's GRPO on the bigram model: every completion is "70" and EOS at
 * any temperature (a margin of 40), so each group's rewards are equal (all
 * groups zero-std) and the mean reward is the share of the stream's
 * problems whose sum is 7; with beta the reference is the model: KL 0. */
START_TEST(test_grpo)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_model *m = bigram_model(tok);
    pt_generator *gen = NULL;
    pt_context *ctx = NULL;
    ck_assert_ok(pt_generator_create(&gen, m, 16, 16));
    ck_assert_ok(pt_context_create(&ctx, m, 16, 16));
    pt_addition_grpo_options o;
    ck_assert_ok(pt_addition_grpo_options_init(&o));
    ck_assert_int_eq(o.prompts, 32);
    o.digits = 1;
    o.prompts = 8;
    o.group = 2;
    o.seed = 3;
    o.beta = 0.5;
    pt_addition_grpo *g = NULL;
    ck_assert_ok(pt_addition_grpo_create(&g, m, tok, &o));
    uint64_t rng = 3 * 104729 + 3; /* the problems' stream, drawn here too */
    for (int step = 1; step <= 2; step++) {
        int sevens = 0;
        for (int p = 0; p < 8; p++) {
            int64_t a, b;
            ck_assert_ok(pt_addition_train_pair(&a, &b, 1, &rng));
            sevens += a + b == 7;
        }
        pt_grpo_stats gs;
        ck_assert_ok(pt_addition_grpo_step(&gs, g, ctx, gen));
        ck_assert_msg(fabs(gs.reward - sevens / 8.0) < 1e-12, "step %d: reward %g, %d sevens", step, gs.reward,
                      sevens);
        ck_assert_double_eq(gs.frac_reward_zero_std, 1.0);
        ck_assert_msg(fabs(gs.kl) < 1e-6, "kl %g", gs.kl);
        ck_assert_int_eq(pt_addition_grpo_steps(g), step);
    }
    pt_addition_grpo_free(g);
    o.group = 4; /* 32 rows: more than the generator's 16 */
    ck_assert_ok(pt_addition_grpo_create(&g, m, tok, &o));
    pt_grpo_stats gs;
    ck_assert_status(pt_addition_grpo_step(&gs, g, ctx, gen), PT_EINVAL, "room");
    ck_assert_int_eq(pt_addition_grpo_steps(g), 0);
    pt_addition_grpo_free(g);
    o.group = 1;
    ck_assert_status(pt_addition_grpo_create(&g, m, tok, &o), PT_EINVAL, "group");
    ck_assert_ptr_null(g);
    o.group = 2;
    o.prompts = PT_ADDITION_GRPO_MAX_PROMPTS + 1;
    ck_assert_status(pt_addition_grpo_create(&g, m, tok, &o), PT_EINVAL, "prompts");
    pt_context_free(ctx);
    pt_generator_free(gen);
    pt_model_free(m);
    pt_tokenizer_free(tok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("addition");
    TCase *tc = tcase_create("addition");
    tcase_add_test(tc, test_problem);
    tcase_add_test(tc, test_held_out);
    tcase_add_test(tc, test_teacher);
    tcase_add_test(tc, test_score);
    tcase_add_test(tc, test_evaluate);
    tcase_add_test(tc, test_traces);
    tcase_add_test(tc, test_rollouts);
    tcase_add_test(tc, test_model_config);
    tcase_add_test(tc, test_save_traces);
    tcase_add_test(tc, test_show_answers);
    tcase_add_test(tc, test_grpo);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
