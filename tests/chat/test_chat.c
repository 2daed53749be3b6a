/* Chat templates: every family's rendering against the strings the real
 * Jinja sources produce (tests/reference/chat/chat_goldens.json, written by
 * gen_chat.py with jinja2), recognition of each source, options, errors, and
 * the ids/mask logic with a toy encoder.  test_chat_tok.c covers real
 * tokenizers. */
#include "testutil.h"

#include <cjson/cJSON.h>

#include "core/core.h"
#include "text/chat/chat_internal.h"

#include "chat_goldens.h"

/* Render every case of one golden template with t; returns the number checked. */
static int check_cases(const pt_chat_template *t, const cJSON *tpl)
{
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(tpl, "cases");
    const cJSON *c;
    int checked = 0;
    cJSON_ArrayForEach(c, cases)
    {
        pt_chat_message m[16];
        const char *conv = jstr(c, "conversation");
        size_t n = conversation(m, 16, conv);
        pt_chat_options o;
        case_options(&o, c);
        char *text = NULL;
        size_t len = 0;
        int st = pt_chat_render(&text, &len, t, m, n, &o);
        const char *expected = jstr(c, "expected");
        if (!pt_chat_template_supports_tools(t) && has_tool_calls(m, n)) {
            /* the Jinja source drops the calls (SmolLM2 writes the empty content
             * instead): libposttrain refuses */
            ck_assert_msg(expected && !strstr(expected, "get_weather\"") && !strstr(expected, "\"ping"),
                          "%s/%s: the template was expected to drop the tool calls", jstr(tpl, "name"), conv);
            ck_assert_status(st, PT_EUNSUPPORTED, "no tool-call format");
            ck_assert(text == NULL);
            checked++;
            continue;
        }
        if (expected) {
            ck_assert_msg(st == PT_OK, "%s/%s gen=%d: %s", jstr(tpl, "name"), conv,
                          o.add_generation_prompt, pt_last_error());
            ck_assert_msg(strcmp(text, expected) == 0 && len == strlen(expected),
                          "%s/%s gen=%d:\n got      '%s'\n expected '%s'", jstr(tpl, "name"), conv,
                          o.add_generation_prompt, text, expected);
        } else {
            ck_assert_msg(st != PT_OK, "%s/%s: the template raises (%s) but rendering succeeded: '%s'",
                          jstr(tpl, "name"), conv, jstr(c, "error"), text);
            ck_assert(text == NULL);
            ck_assert(strlen(pt_last_error()) > 0);
        }
        pt_free(text);
        checked++;
    }
    return checked;
}

START_TEST(test_goldens_from_source)
{
    const cJSON *tpl;
    int total = 0, templates = 0;
    cJSON_ArrayForEach(tpl, cJSON_GetObjectItemCaseSensitive(goldens(), "templates"))
    {
        pt_chat_template *t = NULL;
        if (strcmp(jstr(tpl, "variant"), "plain") == 0) {
            /* "plain" is libposttrain's own definition, not a model's template */
            ck_assert_status(pt_chat_template_from_source(&t, jstr(tpl, "template"), NULL, NULL),
                             PT_EUNSUPPORTED, "plain");
            ck_assert_ok(pt_chat_template_create(&t, "plain"));
            if (jstr(tpl, "eos_token"))
                ck_assert_ok(pt_chat_template_set_tokens(t, NULL, jstr(tpl, "eos_token")));
        } else {
            ck_assert_ok(pt_chat_template_from_source(&t, jstr(tpl, "template"), jstr(tpl, "bos_token"),
                                                      jstr(tpl, "eos_token")));
        }
        ck_assert_str_eq(pt_chat_template_name(t), jstr(tpl, "variant"));
        total += check_cases(t, tpl);
        templates++;
        pt_chat_template_free(t);
    }
    ck_assert_int_eq(templates, 15);
    ck_assert_int_ge(total, 860);
}
END_TEST

START_TEST(test_goldens_by_name)
{
    const cJSON *tpl;
    int total = 0;
    cJSON_ArrayForEach(tpl, cJSON_GetObjectItemCaseSensitive(goldens(), "templates"))
    {
        const char *name = jstr(tpl, "name");
        if (strcmp(name, "llama3-shared") == 0)
            continue; /* first Llama-3 revision: only by recognition */
        pt_chat_template *t = NULL;
        ck_assert_ok(pt_chat_template_create(&t, jstr(tpl, "variant")));
        ck_assert_str_eq(pt_chat_template_name(t), jstr(tpl, "variant"));
        /* by-name defaults equal the files' tokens, except plain's eos */
        if (strcmp(name, "plain-eos") == 0)
            ck_assert_ok(pt_chat_template_set_tokens(t, NULL, "</s>"));
        total += check_cases(t, tpl);
        pt_chat_template_free(t);
    }
    ck_assert_int_ge(total, 800);
}
END_TEST

START_TEST(test_families_and_names)
{
    static const struct {
        const char *name;
        int family;
        const char *variant;
    } k[] = {
        {"chatml", PT_CHAT_CHATML, "chatml"},   {"SmolLM2", PT_CHAT_CHATML, "smollm2"},
        {"qwen", PT_CHAT_QWEN3, "qwen3"},       {"qwen3", PT_CHAT_QWEN3, "qwen3"},
        {"llama3", PT_CHAT_LLAMA3, "llama3"},   {"llama3.1", PT_CHAT_LLAMA3, "llama3.1"},
        {"llama2", PT_CHAT_LLAMA2, "llama2"},   {"mistral", PT_CHAT_LLAMA2, "mistral"},
        {"phi3", PT_CHAT_PHI3, "phi3"},         {"phi3-vision", PT_CHAT_PHI3, "phi3-vision"},
        {"plain", PT_CHAT_PLAIN, "plain"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        pt_chat_template *t = NULL;
        ck_assert_ok(pt_chat_template_create(&t, k[i].name));
        ck_assert_int_eq(pt_chat_template_family(t), k[i].family);
        ck_assert_str_eq(pt_chat_template_name(t), k[i].variant);
        pt_chat_template_free(t);
    }
    ck_assert_str_eq(pt_chat_family_name(PT_CHAT_LLAMA2), "llama2");
    ck_assert_ptr_null(pt_chat_family_name(99));
    pt_chat_template *t = (pt_chat_template *)&t;
    ck_assert_status(pt_chat_template_create(&t, "vicuna"), PT_EUNSUPPORTED, "chatml, smollm2");
    ck_assert_ptr_null(t);
    int role = -1;
    ck_assert_ok(pt_chat_role_from_name(&role, "ipython"));
    ck_assert_int_eq(role, PT_CHAT_ROLE_TOOL);
    ck_assert_status(pt_chat_role_from_name(&role, "narrator"), PT_EINVAL, "narrator");
    pt_chat_template_free(NULL);
}
END_TEST

START_TEST(test_unrecognised_sources)
{
    static const char *const bad[] = {
        /* plain Jinja with no family markers */
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
        /* Zephyr / TinyLlama: <|user|> with eos instead of <|end|> */
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + "
        "message['content'] + eos_token }}{% endif %}{% endfor %}",
        /* Qwen2.5-style ChatML with tool-call logic */
        "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- endif %}{%- for message in messages %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
        "{%- if message.tool_calls %}{%- endif %}{%- endfor %}",
        /* Mistral v3 with [AVAILABLE_TOOLS] */
        "{{ bos_token }}{% for message in messages %}{{ '[AVAILABLE_TOOLS]' }}[INST]{% endfor %}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pt_chat_template *t = NULL;
        ck_assert_status(pt_chat_template_from_source(&t, bad[i], NULL, NULL), PT_EUNSUPPORTED,
                         "pt_chat_template_create");
        ck_assert_ptr_null(t);
        ck_assert_msg(strstr(pt_last_error(), "llama3.1") != NULL, "%s", pt_last_error());
    }
    /* a ChatML template's literal default system prompt is picked up */
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_from_source(
        &t,
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nBe brief\\tplease.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
        "{% endfor %}",
        NULL, NULL));
    ck_assert_str_eq(pt_chat_template_name(t), "chatml");
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "Hi", NULL, NULL, 0}};
    char *text = NULL;
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 1, NULL));
    ck_assert_str_eq(text, "<|im_start|>system\nBe brief\tplease.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    pt_free(text);
    pt_chat_template_free(t);
}
END_TEST

START_TEST(test_options)
{
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "Hi", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "Yo", NULL, NULL, 0}};
    pt_chat_options o;
    pt_chat_options_init(&o);
    ck_assert_uint_eq(o.size, sizeof o);
    ck_assert_int_eq(o.enable_thinking, 1);
    char *text = NULL;

    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_create(&t, "llama3"));
    o.bos = PT_CHAT_BOS_NONE;
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 2, &o));
    ck_assert_str_eq(text, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>");
    pt_free(text);
    o.bos = 7;
    ck_assert_status(pt_chat_render(&text, NULL, t, m, 2, &o), PT_EINVAL, "bos");
    pt_chat_options_init(&o);
    o.size = 1000;
    ck_assert_status(pt_chat_render(&text, NULL, t, m, 2, &o), PT_EINVAL, "size");
    /* an older, smaller options struct is accepted (fields after it default) */
    pt_chat_options_init(&o);
    o.add_generation_prompt = 1;
    o.size = offsetof(pt_chat_options, bos);
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 1, &o));
    ck_assert_str_eq(text, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    pt_free(text);
    pt_chat_template_free(t);

    /* default system: SmolLM2's own, suppressed with "", or the host's */
    ck_assert_ok(pt_chat_template_create(&t, "smollm2"));
    pt_chat_options_init(&o);
    o.default_system = "";
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 1, &o));
    ck_assert_str_eq(text, "<|im_start|>user\nHi<|im_end|>\n");
    pt_free(text);
    o.default_system = "Be kind.";
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 1, &o));
    ck_assert_str_eq(text, "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    pt_free(text);
    pt_chat_template_free(t);

    /* Llama-3.1 date, and the llama2 BOS per turn */
    ck_assert_ok(pt_chat_template_create(&t, "llama3.1"));
    pt_chat_options_init(&o);
    o.date_string = "01 Jan 2030";
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 1, &o));
    ck_assert_str_eq(text, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                           "Cutting Knowledge Date: December 2023\nToday Date: 01 Jan 2030\n\n<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    pt_free(text);
    pt_chat_template_free(t);

    ck_assert_ok(pt_chat_template_create(&t, "llama2"));
    ck_assert_ok(pt_chat_template_set_tokens(t, "<B>", "<E>"));
    pt_chat_message m3[] = {{PT_CHAT_ROLE_USER, "a", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "b", NULL, NULL, 0},
                            {PT_CHAT_ROLE_USER, "c", NULL, NULL, 0}};
    ck_assert_ok(pt_chat_render(&text, NULL, t, m3, 3, NULL));
    ck_assert_str_eq(text, "<B>[INST] a [/INST] b <E><B>[INST] c [/INST]");
    pt_free(text);
    pt_chat_options_init(&o);
    o.bos = PT_CHAT_BOS_NONE;
    ck_assert_ok(pt_chat_render(&text, NULL, t, m3, 3, &o));
    ck_assert_str_eq(text, "[INST] a [/INST] b <E>[INST] c [/INST]");
    pt_free(text);
    pt_chat_template_free(t);

    /* Qwen3 thinking switch on the generation prompt */
    ck_assert_ok(pt_chat_template_create(&t, "qwen3"));
    pt_chat_options_init(&o);
    o.add_generation_prompt = 1;
    o.enable_thinking = 0;
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 1, &o));
    ck_assert_str_eq(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    pt_free(text);
    pt_chat_template_free(t);
}
END_TEST

START_TEST(test_errors)
{
    pt_chat_template *t = NULL;
    char *text = (char *)1;
    ck_assert_ok(pt_chat_template_create(&t, "chatml"));
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, NULL, NULL, NULL, 0}};
    ck_assert_status(pt_chat_render(&text, NULL, t, m, 1, NULL), PT_EINVAL, "message 0");
    ck_assert_ptr_null(text);
    m[0].content = "x";
    m[0].role = 9;
    ck_assert_status(pt_chat_render(&text, NULL, t, m, 1, NULL), PT_EINVAL, "role 9");
    ck_assert_status(pt_chat_render(&text, NULL, t, m, 0, NULL), PT_EINVAL, "empty");
    ck_assert_status(pt_chat_render(&text, NULL, NULL, m, 1, NULL), PT_EINVAL, "t is NULL");
    pt_chat_template_free(t);

    pt_chat_message tool[] = {{PT_CHAT_ROLE_USER, "q", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "a", NULL, NULL, 0},
                              {PT_CHAT_ROLE_TOOL, "r", "search", NULL, 0}};
    ck_assert_ok(pt_chat_template_create(&t, "phi3"));
    ck_assert_status(pt_chat_render(&text, NULL, t, tool, 3, NULL), PT_EUNSUPPORTED, "message 2");
    pt_chat_template_free(t);
    ck_assert_ok(pt_chat_template_create(&t, "llama2"));
    pt_chat_message user_tool[] = {{PT_CHAT_ROLE_USER, "q", NULL, NULL, 0}, {PT_CHAT_ROLE_TOOL, "r", NULL, NULL, 0}};
    ck_assert_status(pt_chat_render(&text, NULL, t, user_tool, 2, NULL), PT_EUNSUPPORTED, "no tool turn");
    ck_assert_status(pt_chat_render(&text, NULL, t, tool, 3, NULL), PT_EINVAL, "message 2 is tool");
    ck_assert_status(pt_chat_render(&text, NULL, t, tool + 1, 2, NULL), PT_EINVAL, "alternate");
    pt_chat_template_free(t);
    ck_assert_ok(pt_chat_template_create(&t, "mistral"));
    pt_chat_message sys[] = {{PT_CHAT_ROLE_SYSTEM, "s", NULL, NULL, 0}};
    ck_assert_status(pt_chat_render(&text, NULL, t, sys, 1, NULL), PT_EINVAL, "alternate");
    ck_assert_status(pt_chat_render(&text, NULL, t, user_tool, 2, NULL), PT_EUNSUPPORTED,
                     "Only user and assistant");
    pt_chat_template_free(t);
}
END_TEST

START_TEST(test_py_strip)
{
    /* Python str.strip(): ASCII and Unicode whitespace, never other bytes */
    const char *s = "\xc2\xa0\t x\xe3\x80\x80y \xe2\x80\xa8\xe3\x80\x80\n";
    size_t b = 0, e = strlen(s);
    pt__chat_py_strip(s, &b, &e, true, true);
    ck_assert_uint_eq(e - b, 5);
    ck_assert(memcmp(s + b, "x\xe3\x80\x80y", 5) == 0);
    /* U+200B (zero width space) is not whitespace; a lone continuation byte is not either */
    const char *z = "\xe2\x80\x8b a \x80";
    b = 0;
    e = strlen(z);
    pt__chat_py_strip(z, &b, &e, true, true);
    ck_assert_uint_eq(b, 0);
    ck_assert_uint_eq(e, strlen(z));
    const char *w = " \x1f\x85";
    b = 0;
    e = strlen(w);
    pt__chat_py_strip(w, &b, &e, true, false);
    ck_assert_uint_eq(b, 2); /* \x85 alone is not U+0085 (that is \xc2\x85) */
}
END_TEST

/* ---- ids and mask with a toy encoder --------------------------------------- */

/* Toy tokenizer: the specials below are single tokens; a run of ASCII letters
 * is one token (numbered by first appearance), any other byte is itself. */
static const char *const k_specials[] = {"<|im_start|>", "<|im_end|>", "</s>", "<|assistant|>", "<|end|>"};
static char g_words[256][32];
static int g_nwords;

static int32_t word_id(const char *s, size_t n)
{
    for (int i = 0; i < g_nwords; i++)
        if (strlen(g_words[i]) == n && memcmp(g_words[i], s, n) == 0)
            return 10000 + i;
    ck_assert(g_nwords < 256 && n < 32);
    memcpy(g_words[g_nwords], s, n);
    g_words[g_nwords][n] = '\0';
    return 10000 + g_nwords++;
}

static int toy_encode(int32_t **ids, size_t *n, const char *text, size_t len, void *payload)
{
    int *calls = payload;
    (*calls)++;
    int32_t *out = pt__malloc_array(len + 1, sizeof *out);
    size_t k = 0, i = 0;
    while (i < len) {
        size_t sp;
        for (sp = 0; sp < sizeof k_specials / sizeof k_specials[0]; sp++) {
            size_t l = strlen(k_specials[sp]);
            if (l <= len - i && memcmp(text + i, k_specials[sp], l) == 0) {
                out[k++] = 1000 + (int32_t)sp;
                i += l;
                break;
            }
        }
        if (sp < sizeof k_specials / sizeof k_specials[0])
            continue;
        unsigned char c = (unsigned char)text[i];
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
            size_t j = i;
            while (j < len && ((text[j] | 0x20) >= 'a' && (text[j] | 0x20) <= 'z'))
                j++;
            out[k++] = word_id(text + i, j - i);
            i = j;
        } else {
            out[k++] = c;
            i++;
        }
    }
    *ids = out;
    *n = k;
    return PT_OK;
}

static int toy_marker(const char *text, size_t len, void *payload)
{
    for (size_t sp = 0; sp < sizeof k_specials / sizeof k_specials[0]; sp++)
        if (strlen(k_specials[sp]) == len && memcmp(text, k_specials[sp], len) == 0)
            return 1;
    return 0;
}

/* Render with the toy encoder; check ids == encoding the whole text; return
 * the mask as a string of '0'/'1'. */
static void toy_ids(char *maskstr, size_t cap, int *encodes, const char *tname, const pt_chat_message *m,
                    size_t n, int gen)
{
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_create(&t, tname));
    pt_chat_options o;
    pt_chat_options_init(&o);
    o.add_generation_prompt = gen;
    pt_chat_rendering r;
    memset(&r, 0, sizeof r);
    ck_assert_ok(pt__chat_render_internal(&r, t, m, n, &o));
    int calls = 0;
    int32_t *ids = NULL, *whole = NULL;
    uint8_t *mask = NULL;
    size_t nid = 0, nwhole = 0;
    ck_assert_ok(pt__chat_ids_from_rendering(&ids, &mask, &nid, &r, toy_encode, toy_marker, &calls));
    *encodes = calls;
    ck_assert_ok(toy_encode(&whole, &nwhole, r.text.p, r.text.len, &calls));
    ck_assert_uint_eq(nid, nwhole);
    ck_assert(memcmp(ids, whole, nid * sizeof *ids) == 0);
    ck_assert_uint_lt(nid, cap);
    for (size_t i = 0; i < nid; i++)
        maskstr[i] = mask[i] ? '1' : '0';
    maskstr[nid] = '\0';
    pt_free(ids);
    pt_free(mask);
    pt_free(whole);
    pt__chat_rendering_clear(&r);
    pt_chat_template_free(t);
}

START_TEST(test_ids_mask_toy)
{
    char mask[256];
    int encodes = 0;
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "Hi", NULL, NULL, 0},
                           {PT_CHAT_ROLE_ASSISTANT, "Hello there", NULL, NULL, 0},
                           {PT_CHAT_ROLE_USER, "Bye", NULL, NULL, 0},
                           {PT_CHAT_ROLE_ASSISTANT, "Ciao", NULL, NULL, 0}};
    /* <|im_start|> user \n Hi <|im_end|> \n | <|im_start|> assistant \n [Hello ' ' there <|im_end|>] \n | ... */
    toy_ids(mask, sizeof mask, &encodes, "chatml", m, 4, 0);
    ck_assert_str_eq(mask, "000000" "000" "1111" "0" "000000" "000" "11" "0");
    /* 4 pieces, plus two prefix encodes per assistant span */
    ck_assert_int_eq(encodes, 4 + 4);
    /* the generation prompt is never in the mask */
    toy_ids(mask, sizeof mask, &encodes, "chatml", m, 3, 1);
    ck_assert_str_eq(mask, "000000" "000" "1111" "0" "000000" "000");

    /* Mistral: one piece per exchange, cut after </s>; the span is the content and </s> */
    toy_ids(mask, sizeof mask, &encodes, "mistral", m, 4, 0);
    /* <s> is not a toy special: '<' 's' '>' then [ INST ] ' ' Hi ' ' [ / INST ] */
    ck_assert_str_eq(mask, "000" "0000000000" "1111" "0000000000" "11");

    /* plain: completion glued to the prompt merges into one token, which is
     * then in the mask (it contains assistant text) */
    pt_chat_message pc[] = {{PT_CHAT_ROLE_USER, "abc", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "def", NULL, NULL, 0}};
    toy_ids(mask, sizeof mask, &encodes, "plain", pc, 2, 0);
    ck_assert_str_eq(mask, "1");
    pc[1].content = " def";
    toy_ids(mask, sizeof mask, &encodes, "plain", pc, 2, 0);
    ck_assert_str_eq(mask, "011");
    /* the end straddles: "de" + user "f" merge into one token "def" */
    pt_chat_message pe[] = {{PT_CHAT_ROLE_USER, "1 ", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "de", NULL, NULL, 0},
                            {PT_CHAT_ROLE_USER, "f 2", NULL, NULL, 0}};
    toy_ids(mask, sizeof mask, &encodes, "plain", pe, 3, 0);
    ck_assert_str_eq(mask, "00100");

    /* phi3-vision: a tool turn writes <|tool|>, which is not one token here,
     * so no cut is made before it; ids still equal the whole encoding */
    pt_chat_message pt[] = {{PT_CHAT_ROLE_USER, "q", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "a", NULL, NULL, 0},
                            {PT_CHAT_ROLE_TOOL, "r", NULL, NULL, 0}, {PT_CHAT_ROLE_ASSISTANT, "b", NULL, NULL, 0}};
    toy_ids(mask, sizeof mask, &encodes, "phi3-vision", pt, 4, 0);
    /* < | user | > \n q <|end|> \n, <|assistant|> \n [a <|end|>] \n, < | tool | > \n r <|end|> \n, ... */
    ck_assert_str_eq(mask, "000000000" "00" "11" "0" "000000000" "00" "11" "0");
}
END_TEST

static Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("templates");
    tcase_add_test(tc, test_goldens_from_source);
    tcase_add_test(tc, test_goldens_by_name);
    tcase_add_test(tc, test_families_and_names);
    tcase_add_test(tc, test_unrecognised_sources);
    tcase_add_test(tc, test_options);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_py_strip);
    tcase_add_test(tc, test_ids_mask_toy);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int rc = pt_test_run(chat_suite());
    goldens_free();
    return rc;
}
