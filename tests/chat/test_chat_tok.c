/* Chat templates with real tokenizers: rendering to ids equals encoding the
 * rendered text, for every golden case of every family, with the shared
 * Qwen3, Llama-3 and Llama-2/Phi-3 SentencePiece tokenizers (skipped loudly
 * without ../shared/data), and the assistant mask covers each assistant span
 * and ends on its end-of-turn token.  The built-in byte tokenizer part needs
 * no shared data. */
#include "testutil.h"

#include <cjson/cJSON.h>

#include "core/core.h"
#include "text/chat/chat_internal.h"

#include "chat_goldens.h"

/* ---- built-in byte tokenizer -------------------------------------------------- */

START_TEST(test_byte_tokenizer)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_chat_template *t = (pt_chat_template *)&t;
    ck_assert_status(pt_chat_template_from_tokenizer(&t, tok), PT_ENOTFOUND, "pt_chat_template_create");
    ck_assert_ptr_null(t);
    ck_assert_ok(pt_chat_template_create(&t, "chatml"));
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "Hi", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "Yo!", NULL, NULL, 0}};
    int32_t *ids = NULL;
    uint8_t *mask = NULL;
    size_t n = 0;
    ck_assert_ok(pt_chat_render_ids(&ids, &mask, &n, t, tok, m, 2, NULL));
    /* <|im_start|> u s e r \n H i <|im_end|> \n <|im_start|> a s s i s t a n t \n Y o ! <|im_end|> \n */
    static const int32_t want[] = {259, 'u', 's', 'e', 'r', '\n', 'H', 'i', 260, '\n', 259, 'a', 's', 's', 'i',
                                   's', 't', 'a', 'n', 't', '\n', 'Y', 'o', '!', 260, '\n'};
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(ids[i], want[i]);
        ck_assert_int_eq(mask[i], i >= 21 && i <= 24);
    }
    pt_free(ids);
    pt_free(mask);

    /* the generation prompt (rollouts): nothing masked after it */
    pt_chat_options o;
    ck_assert_ok(pt_chat_options_init(&o));
    ck_assert_uint_eq(o.size, sizeof o);
    ck_assert_status(pt_chat_options_init(NULL), PT_EINVAL, "opts is NULL");
    o.add_generation_prompt = 1;
    ck_assert_ok(pt_chat_render_ids(&ids, NULL, &n, t, tok, m, 1, &o));
    ck_assert_uint_eq(n, 21);
    ck_assert_int_eq(ids[10], 259);
    ck_assert_int_eq(ids[20], '\n');
    pt_free(ids);

    /* errors propagate, outputs stay NULL */
    m[1].content = NULL;
    ids = (int32_t *)1;
    ck_assert_status(pt_chat_render_ids(&ids, &mask, &n, t, tok, m, 2, NULL), PT_EINVAL, "message 1");
    ck_assert_ptr_null(ids);
    ck_assert_ptr_null(mask);
    ck_assert_uint_eq(n, 0);
    pt_chat_template_free(t);
    pt_tokenizer_free(tok);
}
END_TEST

/* ---- shared tokenizers -------------------------------------------------------- */

static const struct {
    const char *tpl;     /* golden template name */
    const char *tokdir;  /* ../shared/data/tokenizers/<dir> */
    const char *eot;     /* last token of each assistant span */
    int byte_level;
} k_pairs[] = {
    {"qwen3", "qwen3", "<|im_end|>", 1},
    {"qwen3-later", "qwen3", "<|im_end|>", 1},
    {"qwen2.5", "qwen3", "<|im_end|>", 1}, /* Qwen2.5 and Qwen3 share the BPE and its added tokens */
    {"chatml", "qwen3", "<|im_end|>", 1},
    {"smollm2", "qwen3", "<|im_end|>", 1},
    {"plain", "qwen3", NULL, 1},
    {"llama3-shared", "llama3", "<|eot_id|>", 1},
    {"llama3", "llama3", "<|eot_id|>", 1},
    {"llama3.1", "llama3", "<|eot_id|>", 1},
    {"llama3.2", "llama3", "<|eot_id|>", 1},
    {"phi3-vision", "llama-spm", "<|end|>", 0},
    {"phi3", "llama-spm", "<|end|>", 0},
    {"llama2", "llama-spm", "</s>", 0},
    {"mistral", "llama-spm", "</s>", 0},
    {"plain-eos", "llama-spm", "</s>", 0},
};

static pt_chat_template *golden_template(const cJSON *tpl)
{
    pt_chat_template *t = NULL;
    if (strcmp(jstr(tpl, "variant"), "plain") == 0) {
        ck_assert_ok(pt_chat_template_create(&t, "plain"));
        if (jstr(tpl, "eos_token"))
            ck_assert_ok(pt_chat_template_set_tokens(t, NULL, jstr(tpl, "eos_token")));
    } else {
        ck_assert_ok(pt_chat_template_from_source(&t, jstr(tpl, "template"), jstr(tpl, "bos_token"),
                                                  jstr(tpl, "eos_token")));
    }
    return t;
}

static bool ends_with(const char *s, size_t n, const char *suffix, size_t k)
{
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* One golden case: ids == encode(expected); the mask has one run per
 * non-empty assistant span, ending on the end-of-turn token, and the decoded
 * run ends with the span's text. */
static void check_case(const pt_tokenizer *tok, const pt_chat_template *t, const cJSON *c, int32_t eot,
                       int byte_level, const char *tname)
{
    pt_chat_message m[16];
    size_t nm = conversation(m, 16, jstr(c, "conversation"));
    pt_chat_options o;
    case_options(&o, c);
    const char *expected = jstr(c, "expected");

    int32_t *ids = NULL, *ref = NULL;
    uint8_t *mask = NULL;
    size_t n = 0, nref = 0;
    ck_assert_ok(pt_chat_render_ids(&ids, &mask, &n, t, tok, m, nm, &o));
    ck_assert_ok(pt_tokenizer_encode(&ref, &nref, tok, expected, strlen(expected), 0));
    ck_assert_msg(n == nref && (n == 0 || memcmp(ids, ref, n * sizeof *ids) == 0),
                  "%s/%s gen=%d: piecewise ids differ from encoding the whole text (%zu vs %zu ids)", tname,
                  jstr(c, "conversation"), o.add_generation_prompt, n, nref);

    pt_chat_rendering r;
    memset(&r, 0, sizeof r);
    ck_assert_ok(pt__chat_render_internal(&r, t, m, nm, &o));
    ck_assert_str_eq(r.text.p, expected);
    size_t span = 0;
    for (size_t i = 0; i < n;) {
        if (!mask[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && mask[j])
            j++;
        while (span < r.n_spans && r.spans[span].end == r.spans[span].begin)
            span++;
        ck_assert_msg(span < r.n_spans, "%s/%s: more mask runs than assistant spans", tname,
                      jstr(c, "conversation"));
        if (eot >= 0)
            ck_assert_int_eq(ids[j - 1], eot);
        char *dec = NULL;
        size_t dlen = 0;
        ck_assert_ok(pt_tokenizer_decode(&dec, &dlen, tok, ids + i, j - i, 0));
        const char *st = r.text.p + r.spans[span].begin;
        size_t sl = r.spans[span].end - r.spans[span].begin;
        if (!byte_level) {
            /* SentencePiece: the decoder adds or strips the leading "▁" space */
            size_t b = 0, e = sl;
            pt__chat_py_strip(st, &b, &e, true, false);
            st += b;
            sl = e - b;
        }
        if (eot >= 0)
            ck_assert_msg(ends_with(dec, dlen, st, sl), "%s/%s: mask run decodes to '%s', span is '%.*s'",
                          tname, jstr(c, "conversation"), dec, (int)sl, st);
        else /* plain: the completion may merge with the text after it too */
            ck_assert_msg(memmem(dec, dlen, st, sl) != NULL, "%s/%s: mask run decodes to '%s', span is '%.*s'",
                          tname, jstr(c, "conversation"), dec, (int)sl, st);
        /* a straddling first token adds at most a few bytes of markup */
        ck_assert_msg(dlen <= sl + (eot >= 0 ? 4 : 8), "%s/%s: mask run '%s' is longer than the span '%.*s'", tname,
                      jstr(c, "conversation"), dec, (int)sl, st);
        pt_free(dec);
        span++;
        i = j;
    }
    while (span < r.n_spans && r.spans[span].end == r.spans[span].begin)
        span++;
    ck_assert_msg(span == r.n_spans, "%s/%s: %zu assistant spans have no masked tokens", tname,
                  jstr(c, "conversation"), r.n_spans - span);
    pt__chat_rendering_clear(&r);
    pt_free(ids);
    pt_free(mask);
    pt_free(ref);
}

START_TEST(test_shared_tokenizers)
{
    const char *shared = pt_test_shared_data("chat ids with real tokenizers");
    if (!shared)
        return;
    int cases = 0;
    static const char *const dirs[] = {"qwen3", "llama3", "llama-spm"};
    pt_tokenizer *toks[3] = {NULL, NULL, NULL};
    for (int d = 0; d < 3; d++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizers/%s", shared, dirs[d]);
        ck_assert_ok(pt_tokenizer_load(&toks[d], path));
    }
    for (size_t p = 0; p < sizeof k_pairs / sizeof k_pairs[0]; p++) {
        pt_tokenizer *tok = NULL;
        for (int d = 0; d < 3; d++)
            if (strcmp(dirs[d], k_pairs[p].tokdir) == 0)
                tok = toks[d];
        ck_assert_ptr_nonnull(tok);
        int32_t eot = -1;
        if (k_pairs[p].eot)
            ck_assert_ok(pt_tokenizer_token_to_id(&eot, tok, k_pairs[p].eot));
        const cJSON *tpl;
        int found = 0;
        cJSON_ArrayForEach(tpl, cJSON_GetObjectItemCaseSensitive(goldens(), "templates"))
        {
            if (strcmp(jstr(tpl, "name"), k_pairs[p].tpl) != 0)
                continue;
            found = 1;
            pt_chat_template *t = golden_template(tpl);
            const cJSON *c;
            cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(tpl, "cases"))
            {
                if (!jstr(c, "expected"))
                    continue;
                pt_chat_message cm[16];
                size_t ncm = conversation(cm, 16, jstr(c, "conversation"));
                if (!pt_chat_template_supports_tools(t) && has_tool_calls(cm, ncm))
                    continue; /* refused (test_chat.c) */
                check_case(tok, t, c, eot, k_pairs[p].byte_level, k_pairs[p].tpl);
                cases++;
            }
            pt_chat_template_free(t);
        }
        ck_assert_msg(found, "no golden template %s", k_pairs[p].tpl);
    }
    for (int d = 0; d < 3; d++)
        pt_tokenizer_free(toks[d]);
    ck_assert_int_ge(cases, 800);
}
END_TEST

/* The shared tokenizer_config.json files are recognised through the tokenizer. */
START_TEST(test_from_tokenizer)
{
    const char *shared = pt_test_shared_data("chat template from tokenizer_config.json");
    if (!shared)
        return;
    static const struct {
        const char *dir, *variant;
    } k[] = {{"qwen3", "qwen3"}, {"llama3", "llama3-genprompt"}, {"llama-spm", "phi3-vision"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizers/%s", shared, k[i].dir);
        pt_tokenizer *tok = NULL;
        ck_assert_ok(pt_tokenizer_load(&tok, path));
        pt_chat_template *t = NULL;
        ck_assert_ok(pt_chat_template_from_tokenizer(&t, tok));
        ck_assert_str_eq(pt_chat_template_name(t), k[i].variant);
        pt_chat_template_free(t);
        pt_tokenizer_free(tok);
    }
    /* gpt2 has no tokenizer_config.json, so no chat_template */
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizers/gpt2", shared);
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_load(&tok, path));
    pt_chat_template *t = NULL;
    ck_assert_status(pt_chat_template_from_tokenizer(&t, tok), PT_ENOTFOUND, "by name");
    pt_tokenizer_free(tok);
}
END_TEST

static Suite *chat_tok_suite(void)
{
    Suite *s = suite_create("chat_tok");
    TCase *tc = tcase_create("ids");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_byte_tokenizer);
    tcase_add_test(tc, test_shared_tokenizers);
    tcase_add_test(tc, test_from_tokenizer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int rc = pt_test_run(chat_tok_suite());
    goldens_free();
    return rc;
}
