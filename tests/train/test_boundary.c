/* The prompt/completion boundary of SFT rows with real tokenizers: the ids
 * of a {"prompt", "completion"} row are those of encoding prompt+completion
 * as one text (then EOS), and the loss mask starts at the completion's first
 * token; a token that straddles the boundary is the completion's.  On
 * stories260K's SentencePiece-style tokenizer a completion written with a
 * leading space gets no second word-boundary marker ("▁", id 410); byte-level
 * BPE tokenizers (GPT-2, Llama-3) keep the ids of encoding prompt and
 * completion apart wherever the boundary falls between pre-tokens. */
#include "testutil.h"

#include "posttrain/train.h"

#include <unistd.h>

static pt_tokenizer *load_tok(const char *who, const char *rel)
{
    const char *data = pt_test_shared_data(who);
    if (!data)
        return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", data, rel);
    pt_tokenizer *t;
    ck_assert_ok(pt_tokenizer_load(&t, path));
    return t;
}

/* Load one JSONL row, draw it as a batch of one, and check its ids and its
 * targets: a target is the next id from position `first - 1` on (the first
 * trained token is `first`), -1 before. */
static void expect_row(const pt_tokenizer *tok, const char *line, bool completion_only, const int32_t *ids,
                       int n, int first)
{
    char path[] = "/tmp/pt_boundary_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, line, strlen(line)), (ssize_t)strlen(line));
    close(fd);
    pt_dataset_options o;
    pt_dataset_options_init(&o);
    o.batch_size = 1;
    o.shuffle = false;
    o.completion_only = completion_only;
    pt_dataset *d;
    ck_assert_ok(pt_dataset_load_jsonl(&d, path, tok, &o));
    unlink(path);
    pt_batch b;
    pt_batch_init(&b);
    const float *w;
    ck_assert_ok(pt_dataset_next_batch(&b, &w, d));
    ck_assert_int_eq(b.batch, 1);
    ck_assert_msg(b.seq == n, "%s: %d ids, expected %d", line, b.seq, n);
    for (int t = 0; t < n; t++) {
        ck_assert_msg(b.input_ids[t] == ids[t], "%s: id %d is %d, expected %d", line, t, b.input_ids[t], ids[t]);
        int32_t et = t + 1 < n && t + 1 >= first ? ids[t + 1] : -1;
        ck_assert_msg(b.targets[t] == et, "%s: target %d is %d, expected %d", line, t, b.targets[t], et);
    }
    pt_dataset_free(d);
}

/* ids equals encoding `text` with the special tokens, then EOS when the
 * tokenizer has one. */
static void expect_whole(const pt_tokenizer *tok, const char *text, const int32_t *ids, int n)
{
    int32_t *w;
    size_t nw;
    ck_assert_ok(pt_tokenizer_encode(&w, &nw, tok, text, strlen(text), PT_TOK_ADD_SPECIAL));
    const int32_t eos = pt_tokenizer_eos_id(tok);
    ck_assert_int_eq((int)nw + (eos >= 0), n);
    for (size_t i = 0; i < nw; i++)
        ck_assert_int_eq(w[i], ids[i]);
    if (eos >= 0)
        ck_assert_int_eq(ids[n - 1], eos);
    pt_free(w);
}

START_TEST(test_sentencepiece_leading_space)
{
    pt_tokenizer *tok = load_tok("test_sentencepiece_leading_space", "models/stories260K/tokenizer.json");
    if (!tok)
        return;
    ck_assert_int_eq(pt_tokenizer_bos_id(tok), 1);
    ck_assert_int_eq(pt_tokenizer_eos_id(tok), 2);
    ck_assert_str_eq(pt_tokenizer_id_to_token(tok, 410), "\xe2\x96\x81");
    /* Apart, " there was" would be 410 383 286: a lone "▁" before "▁there". */
    int32_t *c;
    size_t nc;
    ck_assert_ok(pt_tokenizer_encode(&c, &nc, tok, " there was", 10, 0));
    ck_assert_int_eq(nc, 3);
    ck_assert_int_eq(c[0], 410);
    pt_free(c);
    /* <s> ▁Once ▁upon ▁a ▁time | ▁there ▁was </s> */
    const int32_t ids[] = { 1, 403, 407, 261, 378, 383, 286, 2 };
    expect_whole(tok, "Once upon a time there was", ids, 8);
    expect_row(tok, "{\"prompt\": \"Once upon a time\", \"completion\": \" there was\"}\n", true, ids, 8, 5);
    /* completion_only = false: the same ids, every token after BOS trained. */
    expect_row(tok, "{\"prompt\": \"Once upon a time\", \"completion\": \" there was\"}\n", false, ids, 8, 1);
    /* A completion already ending with the EOS token gets no second one. */
    expect_row(tok, "{\"prompt\": \"Once upon a time\", \"completion\": \" there was</s>\"}\n", true, ids, 8, 5);
    /* An empty prompt: the whole text is " there was", whose encoding does
     * hold the lone "▁" (the normalizer prepends one to the space's). */
    const int32_t e[] = { 1, 410, 383, 286, 2 };
    expect_whole(tok, " there was", e, 5);
    expect_row(tok, "{\"prompt\": \"\", \"completion\": \" there was\"}\n", true, e, 5, 1);
    pt_tokenizer_free(tok);
}
END_TEST

START_TEST(test_sentencepiece_straddle)
{
    pt_tokenizer *tok = load_tok("test_sentencepiece_straddle", "models/stories260K/tokenizer.json");
    if (!tok)
        return;
    /* "Once upon a time": <s> ▁Once ▁upon ▁a ▁time </s> however it is cut. */
    const int32_t ids[] = { 1, 403, 407, 261, 378, 2 };
    expect_whole(tok, "Once upon a time", ids, 6);
    /* Cut between words: the prompt's own ids (1 403 407 261) are a prefix. */
    expect_row(tok, "{\"prompt\": \"Once upon a\", \"completion\": \" time\"}\n", true, ids, 6, 4);
    /* Cut inside "time" (the prompt alone ends ▁t i, 259 417): ▁time
     * straddles the boundary and is the completion's first token. */
    expect_row(tok, "{\"prompt\": \"Once upon a ti\", \"completion\": \"me\"}\n", true, ids, 6, 4);
    /* The prompt's trailing space (alone: a lone "▁", 410) merges into ▁time. */
    expect_row(tok, "{\"prompt\": \"Once upon a \", \"completion\": \"time\"}\n", true, ids, 6, 4);
    /* Cut inside "upon" (alone: ▁up, 350): ▁upon and all after it train. */
    expect_row(tok, "{\"prompt\": \"Once up\", \"completion\": \"on a time\"}\n", true, ids, 6, 2);
    pt_tokenizer_free(tok);
}
END_TEST

START_TEST(test_byte_level_unchanged)
{
    pt_tokenizer *tok = load_tok("test_byte_level_unchanged", "tokenizers/gpt2/tokenizer.json");
    if (!tok)
        return;
    /* GPT-2's tokenizer.json alone names no EOS and adds no BOS, so rows get
     * neither. */
    ck_assert_int_eq(pt_tokenizer_eos_id(tok), -1);
    /* "Q: 2+2=" is 48 25 362 10 17 28 and " 4" is 604, apart or together. */
    const int32_t ids[] = { 48, 25, 362, 10, 17, 28, 604 };
    expect_whole(tok, "Q: 2+2= 4", ids, 7);
    expect_row(tok, "{\"prompt\": \"Q: 2+2=\", \"completion\": \" 4\"}\n", true, ids, 7, 6);
    /* Cut inside a word: apart "Hello wor" + "ld" would be 15496 476 | 335;
     * the row has the whole text's ids, " world" (995) straddling. */
    const int32_t hw[] = { 15496, 995 };
    expect_whole(tok, "Hello world", hw, 2);
    expect_row(tok, "{\"prompt\": \"Hello wor\", \"completion\": \"ld\"}\n", true, hw, 2, 1);
    pt_tokenizer_free(tok);

    /* Llama-3 (this tokenizer.json's post-processor adds no BOS): the ids of
     * prompt and completion encoded apart, which are the whole text's. */
    tok = load_tok("test_byte_level_unchanged", "tokenizers/llama3/tokenizer.json");
    if (!tok)
        return;
    int32_t *p, *c;
    size_t np, nc;
    ck_assert_ok(pt_tokenizer_encode(&p, &np, tok, "Q: 2+2=", 7, PT_TOK_ADD_SPECIAL));
    ck_assert_ok(pt_tokenizer_encode(&c, &nc, tok, " 4", 2, 0));
    ck_assert_int_eq(nc, 2); /* " 4" is " " and "4" (digits never take a space) */
    int32_t l3[32];
    int n = 0;
    for (size_t i = 0; i < np; i++)
        l3[n++] = p[i];
    for (size_t i = 0; i < nc; i++)
        l3[n++] = c[i];
    l3[n++] = pt_tokenizer_eos_id(tok);
    expect_whole(tok, "Q: 2+2= 4", l3, n);
    expect_row(tok, "{\"prompt\": \"Q: 2+2=\", \"completion\": \" 4\"}\n", true, l3, n, (int)np);
    pt_free(p);
    pt_free(c);
    pt_tokenizer_free(tok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("boundary");
    TCase *tc = tcase_create("boundary");
    tcase_add_test(tc, test_sentencepiece_leading_space);
    tcase_add_test(tc, test_sentencepiece_straddle);
    tcase_add_test(tc, test_byte_level_unchanged);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
