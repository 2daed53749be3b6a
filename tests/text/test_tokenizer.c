/* Tokenizer engine: small committed tokenizers (tests/text/data, see its
 * README for how every expected id follows), split behaviors, Metaspace,
 * normalizers, malformed files, invalid UTF-8, incremental decoding, a 10 MB
 * line, and the built-in byte tokenizer.  Needs no shared data. */
#include "testutil.h"

#include "core/core.h"
#include "io/fileio.h"

#include <pthread.h>

#define DATA PT_TEST_SRCDIR "/text/data/"

static pt_tokenizer *load_data(const char *name)
{
    pt_tokenizer *t = NULL;
    ck_assert_ok(pt_tokenizer_load(&t, name));
    return t;
}

/* Encode and compare with the expected ids. */
static void expect_ids(const pt_tokenizer *t, const char *text, size_t len, unsigned flags, const int32_t *want,
                       size_t n_want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    ck_assert_ok(pt_tokenizer_encode(&ids, &n, t, text, len, flags));
    char got[1024] = "";
    size_t o = 0;
    for (size_t i = 0; i < n && o < 900; i++)
        o += (size_t)snprintf(got + o, sizeof got - o, "%d ", (int)ids[i]);
    ck_assert_msg(n == n_want, "'%s': %zu ids (%s), expected %zu", text, n, got, n_want);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(ids[i] == want[i], "'%s': id[%zu] = %d, expected %d (%s)", text, i, (int)ids[i], (int)want[i],
                      got);
    pt_free(ids);
}

#define EXPECT(t, text, flags, ...)                                                               \
    do {                                                                                          \
        static const int32_t w_[] = {__VA_ARGS__};                                                \
        expect_ids((t), (text), strlen(text), (flags), w_, sizeof w_ / sizeof w_[0]);             \
    } while (0)

static void expect_decode(const pt_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, const char *want)
{
    char *s = NULL;
    size_t len = 0;
    ck_assert_ok(pt_tokenizer_decode(&s, &len, t, ids, n, flags));
    ck_assert_str_eq(s, want);
    ck_assert_uint_eq(len, strlen(want));
    pt_free(s);
}

/* ---- committed tokenizers ------------------------------------------------------- */
START_TEST(test_bytelevel_tiny)
{
    pt_tokenizer *t = load_data(DATA "tiny_bytelevel.json");
    ck_assert_int_eq(pt_tokenizer_vocab_size(t), 265);
    /* "the" -> t + he (no merge "t he"); " thing" -> Ġt, h, in -> ing */
    EXPECT(t, "the thing", 0, 116, 257, 256, 104, 262);
    /* rank-3 "a a" merges left to right, then rank-4 "aa aa" */
    EXPECT(t, "aaaaaaaaa", 0, 260, 260, 97);
    /* added tokens, special or not, are matched in the text; " the" is one merge chain */
    EXPECT(t, "a<|endoftext|>b<tool> the", 0, 97, 263, 98, 264, 258);
    EXPECT(t, "a<|endoftext|>b<tool> the", PT_TOK_ADD_SPECIAL, 97, 263, 98, 264, 258);
    /* three bytes of the euro sign, id == byte value */
    EXPECT(t, "\xE2\x82\xAC", 0, 226, 130, 172);
    expect_ids(t, "", 0, 0, NULL, 0);
    static const int32_t ids[] = {97, 263, 98, 264, 258};
    expect_decode(t, ids, 5, 0, "a<|endoftext|>b<tool> the");
    expect_decode(t, ids, 5, PT_TOK_SKIP_SPECIAL, "ab<tool> the");
    int32_t id;
    ck_assert_ok(pt_tokenizer_token_to_id(&id, t, "\xC4\xA0the"));
    ck_assert_int_eq(id, 258);
    ck_assert_status(pt_tokenizer_token_to_id(&id, t, "nope"), PT_ENOTFOUND, "nope");
    ck_assert_str_eq(pt_tokenizer_id_to_token(t, 262), "ing");
    ck_assert_str_eq(pt_tokenizer_id_to_token(t, 32), "\xC4\xA0");
    ck_assert_ptr_null(pt_tokenizer_id_to_token(t, 265));
    ck_assert_ptr_null(pt_tokenizer_id_to_token(t, -1));
    ck_assert_int_eq(pt_tokenizer_is_special(t, 263), 1);
    ck_assert_int_eq(pt_tokenizer_is_special(t, 264), 0);
    ck_assert_int_eq(pt_tokenizer_is_added(t, 264), 1);
    ck_assert_int_eq(pt_tokenizer_is_added(t, 100), 0);
    ck_assert_int_eq(pt_tokenizer_bos_id(t), -1);
    ck_assert_ptr_null(pt_tokenizer_chat_template(t, NULL));
    pt_tokenizer_free(t);
}
END_TEST

START_TEST(test_spm_tiny)
{
    char *json, *conf;
    size_t jn, cn;
    ck_assert_ok(pt__read_file(&json, &jn, DATA "tiny_spm.json", 1 << 20));
    ck_assert_ok(pt__read_file(&conf, &cn, DATA "tiny_spm_config.json", 1 << 20));
    pt_tokenizer *t = NULL;
    ck_assert_ok(pt_tokenizer_load_memory_config(&t, json, jn, conf, cn));
    free(json);
    free(conf);
    /* "▁hello": ▁h, ll, ▁he, llo, ▁hello by rank */
    EXPECT(t, "hello", 0, 268);
    EXPECT(t, "hello", PT_TOK_ADD_SPECIAL, 1, 268);
    /* é is not in the vocabulary: byte fallback <0xC3> <0xA9> = 3 + byte */
    EXPECT(t, "hello w\xC3\xA9", PT_TOK_ADD_SPECIAL, 1, 268, 270, 198, 172);
    /* <|user|> has rstrip: the spaces after it are swallowed; the rest gets its own ▁ */
    EXPECT(t, "<|user|>  he", PT_TOK_ADD_SPECIAL, 1, 271, 266);
    EXPECT(t, "hello</s>hello", PT_TOK_ADD_SPECIAL, 1, 268, 2, 268);
    EXPECT(t, "  ", PT_TOK_ADD_SPECIAL, 1, 259, 259, 259);
    EXPECT(t, "x", PT_TOK_ADD_SPECIAL, 1, 259, 123);
    EXPECT(t, "", PT_TOK_ADD_SPECIAL, 1);
    static const int32_t a[] = {1, 268, 270, 198, 172};
    expect_decode(t, a, 5, 0, "<s> hello w\xC3\xA9");
    expect_decode(t, a, 5, PT_TOK_SKIP_SPECIAL, "hello w\xC3\xA9");
    /* byte tokens that are not UTF-8: one U+FFFD per byte */
    static const int32_t b[] = {268, 198, 198};
    expect_decode(t, b, 3, 0, "hello\xEF\xBF\xBD\xEF\xBF\xBD");
    /* tokenizer_config.json */
    ck_assert_int_eq(pt_tokenizer_bos_id(t), 1);
    ck_assert_int_eq(pt_tokenizer_eos_id(t), 2);
    ck_assert_int_eq(pt_tokenizer_unk_id(t), 0);
    ck_assert_int_eq(pt_tokenizer_pad_id(t), -1);
    ck_assert_str_eq(pt_tokenizer_bos_token(t), "<s>");
    ck_assert_str_eq(pt_tokenizer_eos_token(t), "</s>");
    ck_assert_int_eq(pt_tokenizer_add_bos(t), 1);
    ck_assert_int_eq(pt_tokenizer_add_eos(t), 0);
    ck_assert_str_eq(pt_tokenizer_chat_template(t, NULL), "{% for m in messages %}{{ m.content }}{% endfor %}");
    ck_assert_ptr_null(pt_tokenizer_chat_template(t, "tool_use"));
    pt_tokenizer_free(t);
}
END_TEST

START_TEST(test_config_forms)
{
    char *json;
    size_t jn;
    ck_assert_ok(pt__read_file(&json, &jn, DATA "tiny_spm.json", 1 << 20));
    /* AddedToken dict form of the special tokens, list form of chat_template */
    static const char conf[] =
        "{\"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\",\"lstrip\":false},"
        "\"eos_token\":{\"content\":\"</s>\"},\"pad_token\":\"<unk>\","
        "\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},{\"name\":\"tool_use\",\"template\":\"T\"}]}";
    pt_tokenizer *t = NULL;
    ck_assert_ok(pt_tokenizer_load_memory_config(&t, json, jn, conf, sizeof conf - 1));
    ck_assert_int_eq(pt_tokenizer_bos_id(t), 1);
    ck_assert_int_eq(pt_tokenizer_eos_id(t), 2);
    ck_assert_int_eq(pt_tokenizer_pad_id(t), 0);
    ck_assert_int_eq(pt_tokenizer_add_bos(t), -1);
    ck_assert_str_eq(pt_tokenizer_chat_template(t, NULL), "D");
    ck_assert_str_eq(pt_tokenizer_chat_template(t, "tool_use"), "T");
    ck_assert_ptr_null(pt_tokenizer_chat_template(t, "rag"));
    pt_tokenizer_free(t);
    /* a malformed config is an error, not ignored */
    ck_assert_status(pt_tokenizer_load_memory_config(&t, json, jn, "{\"chat_template\":3}", 19), PT_EFORMAT,
                     "tokenizer_config.json: chat_template");
    ck_assert_status(pt_tokenizer_load_memory_config(&t, json, jn, "{\"bos_token\":[1]}", 17), PT_EFORMAT,
                     "tokenizer_config.json: bos_token");
    ck_assert_status(pt_tokenizer_load_memory_config(&t, json, jn, "nope", 4), PT_EFORMAT, "tokenizer_config.json");
    free(json);
}
END_TEST

START_TEST(test_invalid_utf8)
{
    pt_tokenizer *bl = load_data(DATA "tiny_bytelevel.json");
    /* byte-level: raw bytes map like any byte (id == byte); the regex never
     * matches a bad byte, so it is a pre-token of its own */
    static const char in1[] = "a\xFF" "b\xC3";
    EXPECT(bl, in1, 0, 97, 255, 98, 195);
    static const int32_t ids1[] = {97, 255, 98, 195};
    expect_decode(bl, ids1, 4, 0, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
    /* a truncated 4-byte sequence is one maximal invalid subpart: one U+FFFD */
    static const int32_t ids2[] = {240, 159, 166};
    expect_decode(bl, ids2, 3, 0, "\xEF\xBF\xBD");
    pt_tokenizer *spm = load_data(DATA "tiny_spm.json");
    /* byte fallback: the bad byte becomes <0xFF> */
    EXPECT(spm, "h\xFFo", 0, 264, 258, 263);
    static const int32_t ids3[] = {264, 258, 263};
    expect_decode(spm, ids3, 3, 0, "h\xEF\xBF\xBDo");
    /* random bytes never crash; valid UTF-8 round-trips exactly */
    pt_rng r;
    pt__rng_seed(&r, 7);
    char buf[64];
    for (int it = 0; it < 3000; it++) {
        size_t n = (size_t)pt__rng_below(&r, sizeof buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = (char)(it % 2 ? pt__rng_below(&r, 256) : 32 + pt__rng_below(&r, 95));
        for (int k = 0; k < 2; k++) {
            const pt_tokenizer *t = k ? spm : bl;
            int32_t *ids;
            size_t ni;
            ck_assert_ok(pt_tokenizer_encode(&ids, &ni, t, buf, n, PT_TOK_ADD_SPECIAL));
            char *s;
            size_t sl;
            ck_assert_ok(pt_tokenizer_decode(&s, &sl, t, ids, ni, PT_TOK_SKIP_SPECIAL));
            if (it % 2 == 0) {
                /* printable ASCII: both tokenizers give the text back (SPM's Strip
                 * removes the one space that Prepend added) */
                ck_assert_uint_eq(sl, n);
                ck_assert(memcmp(s, buf, n) == 0);
            }
            pt_free(s);
            pt_free(ids);
        }
    }
    pt_tokenizer_free(bl);
    pt_tokenizer_free(spm);
}
END_TEST

/* ---- inline tokenizers: char vocabulary ' '..'~' (id = c - 32) plus extras ---- */
static pt_tokenizer *char_tokenizer(const char *normalizer, const char *pre, const char *decoder, const char *added)
{
    char json[16384];
    size_t o = 0;
    o += (size_t)snprintf(json + o, sizeof json - o,
                          "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":%s,\"pre_tokenizer\":%s,"
                          "\"post_processor\":null,\"decoder\":%s,\"model\":{\"type\":\"BPE\",\"vocab\":{",
                          added ? added : "", normalizer ? normalizer : "null", pre ? pre : "null",
                          decoder ? decoder : "null");
    for (int c = 32; c < 127; c++) {
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(json + o, sizeof json - o, "\"\\%c\":%d,", c, c - 32);
        else
            o += (size_t)snprintf(json + o, sizeof json - o, "\"%c\":%d,", c, c - 32);
    }
    o += (size_t)snprintf(json + o, sizeof json - o,
                          "\"a-\":95,\"-b\":96,\"--\":97,\"\xE2\x96\x81\":98,\"\xE2\x96\x81" "a\":99,"
                          "\"\xE2\x96\x81" "b\":100,\"\xC3\xA9\":101,\"<x>\":102},"
                          "\"merges\":[\"a -\",\"- b\",\"- -\",\"\xE2\x96\x81 a\",\"\xE2\x96\x81 b\"]}}");
    pt_tokenizer *t = NULL;
    ck_assert_ok(pt_tokenizer_load_memory(&t, json, o));
    return t;
}

#define SPLIT(beh, inv) "{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"" beh "\",\"invert\":" inv "}"

START_TEST(test_split_behaviors)
{
    /* a=65, b=66, '-'=13, "a-"=95, "-b"=96, "--"=97; merge ranks a- < -b < -- */
    pt_tokenizer *t = char_tokenizer(NULL, NULL, NULL, NULL);
    EXPECT(t, "a-b", 0, 95, 66);  /* one word: "a -" has the best rank */
    pt_tokenizer_free(t);
    t = char_tokenizer(NULL, SPLIT("Isolated", "false"), NULL, NULL);
    EXPECT(t, "a-b", 0, 65, 13, 66);
    EXPECT(t, "a--b", 0, 65, 13, 13, 66);
    pt_tokenizer_free(t);
    t = char_tokenizer(NULL, SPLIT("Removed", "false"), NULL, NULL);
    EXPECT(t, "a-b", 0, 65, 66);
    pt_tokenizer_free(t);
    t = char_tokenizer(NULL, SPLIT("MergedWithPrevious", "false"), NULL, NULL);
    EXPECT(t, "a-b", 0, 95, 66);
    pt_tokenizer_free(t);
    t = char_tokenizer(NULL, SPLIT("MergedWithNext", "false"), NULL, NULL);
    EXPECT(t, "a-b", 0, 65, 96);
    pt_tokenizer_free(t);
    t = char_tokenizer(NULL, SPLIT("Contiguous", "false"), NULL, NULL);
    EXPECT(t, "a--b", 0, 65, 97, 66);
    pt_tokenizer_free(t);
    t = char_tokenizer(NULL, SPLIT("Removed", "true"), NULL, NULL);
    EXPECT(t, "a-b", 0, 13);  /* inverted: the non-matches are removed */
    pt_tokenizer_free(t);
    /* a Sequence of pre-tokenizers runs every stage on every piece */
    t = char_tokenizer(NULL,
                       "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"}," SPLIT("Isolated", "false")
                       "]}", NULL, NULL);
    EXPECT(t, "a-b  b", 0, 65, 13, 66, 66);
    pt_tokenizer_free(t);
}
END_TEST

START_TEST(test_metaspace_and_normalizers)
{
    const char *added = "{\"id\":102,\"content\":\"<x>\",\"special\":true,\"normalized\":false}";
    const char *dec = "{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true}";
    pt_tokenizer *t = char_tokenizer(NULL,
                                     "{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"always\","
                                     "\"split\":true}", dec, added);
    EXPECT(t, "a b", 0, 99, 100);
    EXPECT(t, "<x>a", 0, 102, 99);
    static const int32_t ids[] = {99, 100};
    expect_decode(t, ids, 2, 0, "a b");  /* the first token loses its ▁ */
    pt_tokenizer_free(t);
    t = char_tokenizer(NULL,
                       "{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"first\","
                       "\"split\":true}", dec, added);
    EXPECT(t, "a", 0, 99);
    EXPECT(t, "<x>a", 0, 102, 65);  /* not at the start of the text: no ▁ */
    pt_tokenizer_free(t);
    t = char_tokenizer("{\"type\":\"NFC\"}", NULL, NULL, NULL);
    EXPECT(t, "e\xCC\x81", 0, 101);  /* e + combining acute composes to é */
    pt_tokenizer_free(t);
    t = char_tokenizer("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},"
                       "{\"type\":\"Lowercase\"},{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}]}",
                       NULL, NULL, NULL);
    EXPECT(t, "  \xC3\x89" "A ", 0, 69, 65);  /* "  ÉA " -> "ea" */
    pt_tokenizer_free(t);
    t = char_tokenizer("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"[0-9]+\"},\"content\":\"#\"}", NULL, NULL, NULL);
    EXPECT(t, "a12b3", 0, 65, 3, 66, 3);
    pt_tokenizer_free(t);
    /* no decoder: tokens joined with spaces */
    t = char_tokenizer(NULL, NULL, NULL, NULL);
    static const int32_t ids2[] = {65, 66};
    expect_decode(t, ids2, 2, 0, "a b");
    pt_tokenizer_free(t);
}
END_TEST

/* ---- malformed files --------------------------------------------------------------- */
static const char *bpe(const char *model_extra, const char *vocab, const char *merges, const char *rest)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "{\"model\":{\"type\":\"BPE\",%s\"vocab\":%s,\"merges\":%s}%s}", model_extra, vocab, merges,
             rest);
    return buf;
}

START_TEST(test_malformed)
{
    static const char V[] = "{\"a\":0,\"b\":1,\"ab\":2}";
    struct {
        char json[1024];
        int status;
        const char *fragment;
    } cases[32];
    int n = 0;
#define CASE(j, st, frag)                                                  \
    do {                                                                   \
        snprintf(cases[n].json, sizeof cases[n].json, "%s", (j));          \
        cases[n].status = (st);                                            \
        cases[n].fragment = (frag);                                        \
        n++;                                                               \
    } while (0)
    CASE("{\"model\":", PT_EFORMAT, "not valid JSON");
    CASE("[1,2]", PT_EFORMAT, "not a JSON object");
    CASE("{\"normalizer\":null}", PT_EFORMAT, "model: missing");
    CASE("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", PT_EUNSUPPORTED, "WordPiece");
    CASE(bpe("", "{\"a\":-1}", "[]", ""), PT_EFORMAT, "model.vocab[\"a\"]");
    CASE(bpe("", "{\"a\":\"0\"}", "[]", ""), PT_EFORMAT, "expected an integer id");
    CASE(bpe("", "{\"a\":0,\"b\":0}", "[]", ""), PT_EFORMAT, "id 0 is used by both");
    CASE(bpe("", V, "[\"a c\"]", ""), PT_EFORMAT, "model.merges[0]: token \"c\" is not in the vocabulary");
    CASE(bpe("", "{\"a\":0,\"b\":1}", "[\"a b\"]", ""), PT_EFORMAT, "token \"ab\" is not in the vocabulary");
    CASE(bpe("", V, "[\"a b\",\"ab\"]", ""), PT_EFORMAT, "model.merges[1]");
    CASE(bpe("", V, "[[\"a\"]]", ""), PT_EFORMAT, "model.merges[0]: expected");
    CASE(bpe("", V, "{}", ""), PT_EFORMAT, "model.merges: expected an array");
    CASE(bpe("\"dropout\":0.1,", V, "[]", ""), PT_EUNSUPPORTED, "model.dropout");
    CASE(bpe("\"continuing_subword_prefix\":\"##\",", V, "[]", ""), PT_EUNSUPPORTED, "continuing_subword_prefix");
    CASE(bpe("\"byte_fallback\":\"yes\",", V, "[]", ""), PT_EFORMAT, "'model.byte_fallback' must be true or false, got a string");
    CASE(bpe("\"unk_token\":\"<unk>\",", V, "[]", ""), PT_EFORMAT, "model.unk_token");
    CASE(bpe("", "{\"a\":1e12}", "[]", ""), PT_ERANGE, "out of range");
    CASE(bpe("", "{\"a\":0,\"b\":9000000}", "[]", ""), PT_ERANGE, "out of range");
    CASE(bpe("", V, "[]", ",\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"\"}"), PT_EUNSUPPORTED,
         "normalizer.type: normalizer \"Precompiled\"");
    CASE(bpe("", V, "[]", ",\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"BertPreTokenizer\"}]}"),
         PT_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0].type");
    CASE(bpe("", V, "[]", ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}"),
         PT_EUNSUPPORTED, "pre_tokenizer.pattern.Regex: regex does not compile");
    CASE(bpe("", V, "[]", ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}"),
         PT_EFORMAT, "pre_tokenizer.behavior");
    CASE(bpe("", V, "[]", ",\"decoder\":{\"type\":\"WordPiece\"}"), PT_EUNSUPPORTED, "decoder.type: decoder \"WordPiece\"");
    CASE(bpe("", V, "[]", ",\"added_tokens\":{}"), PT_EFORMAT, "added_tokens: expected an array");
    CASE(bpe("", V, "[]", ",\"added_tokens\":[{\"id\":5,\"content\":\"x\"},{\"id\":5,\"content\":\"y\"}]"), PT_EFORMAT,
         "added_tokens[1].id: id 5 is already used");
    CASE(bpe("", V, "[]", ",\"added_tokens\":[{\"id\":3}]"), PT_EFORMAT, "added_tokens[0].content");
    CASE(bpe("", V, "[]",
             ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
             "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{}}"),
         PT_EFORMAT, "\"<s>\" used in the template is missing");
    CASE(bpe("", V, "[]",
             ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
             "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[7]}}}"),
         PT_EFORMAT, "special token id 7 is not in the vocabulary");
    CASE(bpe("", V, "[]", ",\"post_processor\":{\"type\":\"Madeup\"}"), PT_EUNSUPPORTED, "post-processor \"Madeup\"");
    CASE(bpe("", "{}", "[]", ""), PT_EFORMAT, "vocabulary is empty");
    CASE(bpe("", "{\"a\xFF\":0}", "[]", ""), PT_EFORMAT, "not valid UTF-8 at byte 34");
#undef CASE
    ck_assert_int_ge(n, 10);
    for (int i = 0; i < n; i++) {
        pt_tokenizer *t = (pt_tokenizer *)1;
        int st = pt_tokenizer_load_memory(&t, cases[i].json, strlen(cases[i].json));
        ck_assert_msg(st == cases[i].status, "case %d (%s): %s, expected %s: %s", i, cases[i].json, pt_status_name(st),
                      pt_status_name(cases[i].status), pt_last_error());
        ck_assert_msg(strstr(pt_last_error(), cases[i].fragment) != NULL, "case %d: message '%s' lacks '%s'", i,
                      pt_last_error(), cases[i].fragment);
        ck_assert_ptr_null(t);
    }
    /* files */
    pt_tokenizer *t = NULL;
    ck_assert_status(pt_tokenizer_load(&t, DATA "does-not-exist.json"), PT_ENOTFOUND, "does-not-exist.json");
    ck_assert_status(pt_tokenizer_load(&t, PT_TEST_SRCDIR "/text"), PT_ENOTFOUND, "tokenizer.json");
}
END_TEST

START_TEST(test_api_errors)
{
    pt_tokenizer *t = load_data(DATA "tiny_bytelevel.json");
    int32_t *ids = (int32_t *)1;
    size_t n = 5;
    ck_assert_status(pt_tokenizer_encode(&ids, &n, NULL, "a", 1, 0), PT_EINVAL, "");
    ck_assert_ptr_null(ids);
    ck_assert_uint_eq(n, 0);
    ck_assert_status(pt_tokenizer_encode(&ids, &n, t, NULL, 1, 0), PT_EINVAL, "");
    ck_assert_ok(pt_tokenizer_encode(&ids, &n, t, NULL, 0, 0));
    ck_assert_ptr_null(ids);
    char *s = NULL;
    static const int32_t bad[] = {97, 265};
    ck_assert_status(pt_tokenizer_decode(&s, NULL, t, bad, 2, 0), PT_ERANGE, "id 265 at position 1");
    static const int32_t neg[] = {-3};
    ck_assert_status(pt_tokenizer_decode(&s, NULL, t, neg, 1, 0), PT_ERANGE, "id -3");
    ck_assert_ok(pt_tokenizer_decode(&s, NULL, t, NULL, 0, 0));
    ck_assert_str_eq(s, "");
    pt_free(s);
    ck_assert_status(pt_tokenizer_load(NULL, "x"), PT_EINVAL, "");
    ck_assert_status(pt_tokenizer_load_memory(NULL, "{}", 2), PT_EINVAL, "");
    pt_decode_stream *ds = NULL;
    ck_assert_ok(pt_decode_stream_create(&ds, t, 0));
    const char *p;
    size_t pl;
    ck_assert_status(pt_decode_stream_step(&p, &pl, ds, 999), PT_ERANGE, "999");
    pt_decode_stream_free(ds);
    pt_decode_stream_free(NULL);
    pt_tokenizer_free(NULL);
    pt_tokenizer_free(t);
}
END_TEST

/* ---- incremental decoding ------------------------------------------------------------ */
static void stream_expect(pt_decode_stream *ds, int32_t id, const char *want)
{
    const char *p;
    size_t n;
    ck_assert_ok(pt_decode_stream_step(&p, &n, ds, id));
    ck_assert_uint_eq(n, strlen(want));
    ck_assert(memcmp(p, want, n) == 0);
}

START_TEST(test_stream)
{
    pt_tokenizer *t = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&t));
    pt_decode_stream *ds = NULL;
    ck_assert_ok(pt_decode_stream_create(&ds, t, 0));
    stream_expect(ds, 'h', "h");
    stream_expect(ds, 0xC3, "");           /* first byte of é: held back */
    stream_expect(ds, 0xA9, "\xC3\xA9");   /* complete */
    stream_expect(ds, 0xF0, "");           /* 🦙 = F0 9F A6 99 */
    stream_expect(ds, 0x9F, "");
    stream_expect(ds, 0xA6, "");
    stream_expect(ds, 0x99, "\xF0\x9F\xA6\x99");
    stream_expect(ds, PT_BYTE_TOKENIZER_IM_END, "<|im_end|>");
    stream_expect(ds, 0xE2, "");
    const char *p;
    size_t n;
    ck_assert_ok(pt_decode_stream_flush(&p, &n, ds));  /* a lone lead byte: U+FFFD */
    ck_assert_str_eq(p, "\xEF\xBF\xBD");
    stream_expect(ds, 'x', "x");  /* the stream starts over */
    pt_decode_stream_free(ds);
    /* skipping specials */
    ck_assert_ok(pt_decode_stream_create(&ds, t, PT_TOK_SKIP_SPECIAL));
    stream_expect(ds, PT_BYTE_TOKENIZER_BOS, "");
    stream_expect(ds, 'o', "o");
    stream_expect(ds, 'k', "k");
    pt_decode_stream_free(ds);
    pt_tokenizer_free(t);
    /* byte-level BPE: the three byte tokens of € */
    t = load_data(DATA "tiny_bytelevel.json");
    ck_assert_ok(pt_decode_stream_create(&ds, t, 0));
    stream_expect(ds, 256, " t");
    stream_expect(ds, 226, "");
    stream_expect(ds, 130, "");
    stream_expect(ds, 172, "\xE2\x82\xAC");
    pt_decode_stream_free(ds);
    pt_tokenizer_free(t);
    /* SentencePiece style: Strip removes the leading space only once */
    t = load_data(DATA "tiny_spm.json");
    ck_assert_ok(pt_decode_stream_create(&ds, t, 0));
    stream_expect(ds, 268, "hello");
    stream_expect(ds, 270, " w");
    stream_expect(ds, 198, "");
    stream_expect(ds, 172, "\xC3\xA9");
    stream_expect(ds, 268, " hello");
    pt_decode_stream_free(ds);
    pt_tokenizer_free(t);
}
END_TEST

/* ---- long lines: O(n log n) merging of one huge word ----------------------------- */
START_TEST(test_long_line)
{
    pt_tokenizer *t = load_data(DATA "tiny_bytelevel.json");
    size_t n = 10u << 20;  /* 10 MiB of 'a': one pre-token, merged to "aaaa" */
    char *s = malloc(n);
    ck_assert_ptr_nonnull(s);
    memset(s, 'a', n);
    int32_t *ids;
    size_t ni;
    ck_assert_ok(pt_tokenizer_encode(&ids, &ni, t, s, n, 0));
    ck_assert_uint_eq(ni, n / 4);
    for (size_t i = 0; i < ni; i++)
        if (ids[i] != 260)
            ck_abort_msg("id[%zu] = %d", i, (int)ids[i]);
    pt_free(ids);
    /* 1 MiB of spaces: \s+(?!\S) keeps them in one pre-token, no merges */
    memset(s, ' ', 1u << 20);
    ck_assert_ok(pt_tokenizer_encode(&ids, &ni, t, s, 1u << 20, 0));
    ck_assert_uint_eq(ni, 1u << 20);
    ck_assert_int_eq(ids[0], 32);
    pt_free(ids);
    pt_tokenizer_free(t);
    /* SentencePiece style: the whole text is one word "▁lll..." */
    t = load_data(DATA "tiny_spm.json");
    memset(s, 'l', 1u << 20);
    ck_assert_ok(pt_tokenizer_encode(&ids, &ni, t, s, 1u << 20, 0));
    ck_assert_uint_eq(ni, 1 + (1u << 19));
    ck_assert_int_eq(ids[0], 259);
    ck_assert_int_eq(ids[1], 265);
    ck_assert_int_eq(ids[ni - 1], 265);
    pt_free(ids);
    pt_tokenizer_free(t);
    free(s);
}
END_TEST

static int abort_now(void *payload)
{
    (void)payload;
    return 1;
}

START_TEST(test_abort)
{
    pt_tokenizer *t = load_data(DATA "tiny_bytelevel.json");
    size_t n = 1u << 20;
    char *s = malloc(n);
    for (size_t i = 0; i < n; i++)
        s[i] = i % 3 == 2 ? ' ' : 'a';  /* many short words */
    int32_t *ids;
    size_t ni;
    ck_assert_ok(pt_set_abort_callback(abort_now, NULL));
    ck_assert_status(pt_tokenizer_encode(&ids, &ni, t, s, n, 0), PT_ECANCELLED, "");
    ck_assert_ptr_null(ids);
    ck_assert_ok(pt_set_abort_callback(NULL, NULL));
    ck_assert_ok(pt_tokenizer_encode(&ids, &ni, t, s, n, 0));
    ck_assert_uint_gt(ni, n / 3);
    pt_free(ids);
    /* short texts are not polled */
    ck_assert_ok(pt_set_abort_callback(abort_now, NULL));
    EXPECT(t, "the thing", 0, 116, 257, 256, 104, 262);
    ck_assert_ok(pt_set_abort_callback(NULL, NULL));
    free(s);
    pt_tokenizer_free(t);
}
END_TEST

/* ---- built-in byte tokenizer ---------------------------------------------------------- */
START_TEST(test_byte_tokenizer)
{
    pt_tokenizer *t = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&t));
    ck_assert_int_eq(pt_tokenizer_vocab_size(t), PT_BYTE_TOKENIZER_VOCAB);
    ck_assert_int_eq(pt_tokenizer_bos_id(t), PT_BYTE_TOKENIZER_BOS);
    ck_assert_int_eq(pt_tokenizer_eos_id(t), PT_BYTE_TOKENIZER_EOS);
    ck_assert_int_eq(pt_tokenizer_pad_id(t), PT_BYTE_TOKENIZER_PAD);
    ck_assert_int_eq(pt_tokenizer_is_special(t, PT_BYTE_TOKENIZER_IM_START), 1);
    ck_assert_int_eq(pt_tokenizer_is_special(t, 'A'), 0);
    ck_assert_str_eq(pt_tokenizer_id_to_token(t, 'A'), "A");
    ck_assert_str_eq(pt_tokenizer_id_to_token(t, ' '), "\xC4\xA0");
    ck_assert_str_eq(pt_tokenizer_id_to_token(t, PT_BYTE_TOKENIZER_IM_END), "<|im_end|>");
    int32_t id;
    ck_assert_ok(pt_tokenizer_token_to_id(&id, t, "<|im_start|>"));
    ck_assert_int_eq(id, 259);
    static const char text[] = "<|im_start|>hi\xFF";
    EXPECT(t, text, 0, 259, 'h', 'i', 255);
    EXPECT(t, text, PT_TOK_ADD_SPECIAL, 256, 259, 'h', 'i', 255);
    static const int32_t ids[] = {256, 259, 'h', 'i', 255};
    expect_decode(t, ids, 5, PT_TOK_SKIP_SPECIAL, "hi\xEF\xBF\xBD");
    expect_decode(t, ids, 5, 0, "<|bos|><|im_start|>hi\xEF\xBF\xBD");
    /* every valid UTF-8 text round-trips, one id per byte */
    static const char u[] = "na\xC3\xAFve caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\xA6\x99\n\t\x01";
    int32_t *v;
    size_t n;
    ck_assert_ok(pt_tokenizer_encode(&v, &n, t, u, sizeof u - 1, 0));
    ck_assert_uint_eq(n, sizeof u - 1);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(v[i], (unsigned char)u[i]);
    char *s;
    size_t sl;
    ck_assert_ok(pt_tokenizer_decode(&s, &sl, t, v, n, 0));
    ck_assert_uint_eq(sl, sizeof u - 1);
    ck_assert(memcmp(s, u, sl) == 0);
    pt_free(s);
    pt_free(v);
    pt_tokenizer_free(t);
}
END_TEST

/* ---- truncation and padding (only with PT_TOK_TRUNCATE) --------------------------- */
static pt_tokenizer *spm_variant(const char *trunc, const char *pad)
{
    char *json;
    size_t n;
    ck_assert_ok(pt__read_file(&json, &n, DATA "tiny_spm.json", 1 << 20));
    char *buf = malloc(n + 1024);
    const char *a = strstr(json, "\"truncation\": null");
    const char *b = strstr(json, "\"padding\": null");
    ck_assert(a && b && a < b);
    int o = sprintf(buf, "%.*s\"truncation\": %s%.*s\"padding\": %s%s", (int)(a - json), json, trunc,
                    (int)(b - (a + 18)), a + 18, pad, b + 15);
    pt_tokenizer *t = NULL;
    ck_assert_ok(pt_tokenizer_load_memory(&t, buf, (size_t)o));
    free(buf);
    free(json);
    return t;
}

START_TEST(test_truncation_padding)
{
    /* expected ids from the reference (tokenizers 0.22.2) on the same files */
    static const char T[] = "hello w\xC3\xA9 hello";
    const unsigned TR = PT_TOK_TRUNCATE, SP = PT_TOK_ADD_SPECIAL;
    pt_tokenizer *t = spm_variant("{\"direction\":\"Right\",\"max_length\":3,\"strategy\":\"LongestFirst\",\"stride\":0}",
                                  "null");
    EXPECT(t, T, 0, 268, 270, 198, 172, 268);  /* not applied by default */
    EXPECT(t, T, TR, 268, 270, 198);
    EXPECT(t, T, TR | SP, 1, 268, 270);        /* room kept for <s> */
    EXPECT(t, "x", TR | SP, 1, 259, 123);
    pt_tokenizer_free(t);
    t = spm_variant("{\"direction\":\"Left\",\"max_length\":3,\"strategy\":\"LongestFirst\",\"stride\":0}", "null");
    EXPECT(t, T, TR, 198, 172, 268);
    EXPECT(t, T, TR | SP, 1, 172, 268);
    pt_tokenizer_free(t);
    t = spm_variant("null", "{\"strategy\":{\"Fixed\":6},\"direction\":\"Right\",\"pad_to_multiple_of\":null,"
                            "\"pad_id\":2,\"pad_type_id\":0,\"pad_token\":\"</s>\"}");
    EXPECT(t, T, TR, 268, 270, 198, 172, 268, 2);
    EXPECT(t, "x", TR, 259, 123, 2, 2, 2, 2);
    EXPECT(t, "", TR | SP, 1, 2, 2, 2, 2, 2);
    EXPECT(t, "x", SP, 1, 259, 123);
    pt_tokenizer_free(t);
    t = spm_variant("{\"direction\":\"Right\",\"max_length\":5,\"strategy\":\"LongestFirst\",\"stride\":0}",
                    "{\"strategy\":\"BatchLongest\",\"direction\":\"Left\",\"pad_to_multiple_of\":4,\"pad_id\":0,"
                    "\"pad_type_id\":0,\"pad_token\":\"<unk>\"}");
    EXPECT(t, T, TR, 0, 0, 0, 268, 270, 198, 172, 268);
    EXPECT(t, T, TR | SP, 0, 0, 0, 1, 268, 270, 198, 172);
    EXPECT(t, "x", TR, 0, 0, 259, 123);
    EXPECT(t, "", TR | SP, 0, 0, 0, 1);
    expect_ids(t, "", 0, TR, NULL, 0);
    pt_tokenizer_free(t);
}
END_TEST

/* ---- one tokenizer, several threads (per-thread scratch and word cache) ---------- */
typedef struct thread_job {
    const pt_tokenizer *a, *b;
    int seed;
    int ok;
} thread_job;

static const char *const THREAD_TEXTS[] = {"the thing", "aaaaaaaaa", "hello w\xC3\xA9", "a<|endoftext|>b<tool> the",
                                           "<|user|>  he", "thing thing the the"};

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->ok = 1;
    for (int it = 0; it < 2000 && j->ok; it++) {
        size_t k = (size_t)(it + j->seed) % 6;
        /* alternate tokenizers so the per-thread cache must tell them apart */
        const pt_tokenizer *t = (it + j->seed) % 2 ? j->a : j->b;
        int32_t *x, *y;
        size_t nx, ny;
        if (pt_tokenizer_encode(&x, &nx, t, THREAD_TEXTS[k], strlen(THREAD_TEXTS[k]), 0) ||
            pt_tokenizer_encode(&y, &ny, t, THREAD_TEXTS[k], strlen(THREAD_TEXTS[k]), 0)) {
            j->ok = 0;
            break;
        }
        if (nx != ny || (nx && memcmp(x, y, nx * sizeof *x) != 0))
            j->ok = 0;
        /* "the thing" differs between the two tokenizers */
        if (k == 0 && t == j->a && !(nx == 5 && x[0] == 116 && x[4] == 262))
            j->ok = 0;
        if (k == 0 && t == j->b && !(nx == 10 && x[0] == 259 && x[9] == 106))
            j->ok = 0;
        pt_free(x);
        pt_free(y);
    }
    return NULL;
}

START_TEST(test_threads)
{
    pt_tokenizer *a = load_data(DATA "tiny_bytelevel.json");
    pt_tokenizer *b = load_data(DATA "tiny_spm.json");
    /* SentencePiece: "▁the▁thing" has no merges but ▁h: ▁ t h e ▁ t h i n g */
    EXPECT(b, "the thing", 0, 259, 119, 260, 261, 259, 119, 260, 108, 113, 106);
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].a = a;
        jobs[i].b = b;
        jobs[i].seed = i;
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(jobs[i].ok, "thread %d saw a wrong or unstable encoding", i);
    }
    pt_tokenizer_free(a);
    pt_tokenizer_free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("tokenizer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_bytelevel_tiny);
    tcase_add_test(tc, test_spm_tiny);
    tcase_add_test(tc, test_config_forms);
    tcase_add_test(tc, test_invalid_utf8);
    tcase_add_test(tc, test_split_behaviors);
    tcase_add_test(tc, test_metaspace_and_normalizers);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_api_errors);
    tcase_add_test(tc, test_stream);
    tcase_add_test(tc, test_long_line);
    tcase_add_test(tc, test_byte_tokenizer);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_truncation_padding);
    tcase_add_test(tc, test_abort);
    suite_add_tcase(s, tc);
    return pt_test_run(s);
}
