/* Chat templates with tools: the JSON re-serialiser against Python's json.dumps
 * (goldens from gen_chat.py), argument and tool-definition errors, the
 * assistant mask over tool calls, parsing tool calls out of generated text
 * (good calls, several, malformed JSON, missing name, unterminated tags), and
 * recognising the tool-calling templates.  The renderings themselves are
 * checked byte for byte by test_chat.c's golden cases. */
#include "testutil.h"

#include <cjson/cJSON.h>

#include "core/core.h"
#include "text/chat/chat_internal.h"

#include "chat_goldens.h"

#define WEATHER "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}]"

static char *render(const char *tname, const pt_chat_message *m, size_t n, const pt_chat_options *o)
{
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_create(&t, tname));
    char *text = NULL;
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, n, o));
    pt_chat_template_free(t);
    return text;
}

static int render_status(const char *tname, const pt_chat_message *m, size_t n, const pt_chat_options *o)
{
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_create(&t, tname));
    char *text = (char *)1;
    int st = pt_chat_render(&text, NULL, t, m, n, o);
    if (st != PT_OK)
        ck_assert_ptr_null(text);
    pt_free(st == PT_OK ? text : NULL);
    pt_chat_template_free(t);
    return st;
}

/* ---- JSON ---------------------------------------------------------------------- */

START_TEST(test_json_goldens)
{
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(goldens(), "json_cases"))
    {
        const char *text = jstr(c, "text");
        static const struct {
            const char *key;
            int indent;
        } forms[] = {{"dumps", -1}, {"dumps_indent4", 4}};
        for (int f = 0; f < 2; f++) {
            pt_strbuf b = PT_STRBUF_INIT;
            pt_chat_json_err e;
            ck_assert_msg(pt__chat_json_dump(&b, text, strlen(text), forms[f].indent, &e) == PT_OK,
                          "case %d: byte %zu: %s", n, e.at, e.what);
            const char *want = jstr(c, forms[f].key);
            if (strcmp(b.p, want) != 0) {
                size_t k = 0;
                while (b.p[k] && b.p[k] == want[k])
                    k++;
                ck_abort_msg("case %d (%s): differs at byte %zu:\n got  ...%.60s\n want ...%.60s", n,
                             forms[f].key, k, b.p + k, want + k);
            }
            pt__strbuf_free(&b);
        }
        n++;
    }
    ck_assert_int_ge(n, 12);
}
END_TEST

START_TEST(test_json_errors)
{
    static const struct {
        const char *text;
        size_t at;
        const char *what;
    } bad[] = {
        {"", 0, "end of the text"},
        {"{", 0, "unterminated object"},
        {"[1,]", 3, "expected a value"},
        {"[1 2]", 3, "expected ',' or ']'"},
        {"{\"a\" 1}", 5, "expected ':'"},
        {"{\"a\": 1,}", 8, "key string"},
        {"{\"a\": 1, \"a\": 2}", 9, "duplicate key \"a\""},
        {"NaN", 0, "NaN and Infinity"},
        {"-Infinity", 0, "NaN and Infinity"},
        {"01", 0, "leading zeros"},
        {"1.", 0, "must follow '.'"},
        {"1e+", 0, "exponent"},
        {"-", 0, "'-'"},
        {"\"\\ud800\"", 1, "lone high surrogate"},
        {"\"\\udc00x\"", 1, "lone low surrogate"},
        {"\"\\u12g4\"", 1, "four hex digits"},
        {"\"\\x\"", 1, "bad escape"},
        {"\"a\x01\"", 2, "control character 0x01"},
        {"\"\xff\"", 1, "invalid UTF-8"},
        {"\"abc", 0, "unterminated string"},
        {"{} x", 3, "text after the JSON value"},
        {"tru", 0, "expected a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pt_chat_json_err e = {0};
        int st = pt__chat_json_dump(NULL, bad[i].text, strlen(bad[i].text), -1, &e);
        ck_assert_msg(st == PT_EFORMAT, "'%s' was accepted", bad[i].text);
        ck_assert_msg(e.at == bad[i].at && strstr(e.what, bad[i].what), "'%s': byte %zu '%s'", bad[i].text, e.at,
                      e.what);
    }
    /* nesting is bounded */
    char deep[1200];
    memset(deep, '[', 600);
    memset(deep + 600, ']', 600);
    pt_chat_json_err e;
    ck_assert_int_eq(pt__chat_json_dump(NULL, deep, 1200, -1, &e), PT_EFORMAT);
    ck_assert(strstr(e.what, "nested deeper"));
    /* 4300 digits is Python's limit */
    char big[4400];
    memset(big, '7', sizeof big);
    ck_assert_int_eq(pt__chat_json_dump(NULL, big, 4300, -1, &e), PT_OK);
    ck_assert_int_eq(pt__chat_json_dump(NULL, big, 4301, -1, &e), PT_EFORMAT);
    /* a NUL byte inside the text is a control character, not the end */
    ck_assert_int_eq(pt__chat_json_dump(NULL, "\"a\0b\"", 5, -1, &e), PT_EFORMAT);
}
END_TEST

START_TEST(test_py_float)
{
    static const struct {
        double v;
        const char *repr;
    } k[] = {
        {0.0, "0.0"},         {-0.0, "-0.0"},      {1.0, "1.0"},          {0.1, "0.1"},
        {1e15, "1000000000000000.0"}, {1e16, "1e+16"}, {1e-5, "1e-05"},    {0.0001, "0.0001"},
        {5e-324, "5e-324"},   {1.7976931348623157e308, "1.7976931348623157e+308"},
        {0.30000000000000004, "0.30000000000000004"}, {123456789.125, "123456789.125"},
        {1.0 / 0.0, "Infinity"}, {-1.0 / 0.0, "-Infinity"}, {9007199254740993.0, "9007199254740992.0"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        pt_strbuf b = PT_STRBUF_INIT;
        ck_assert_ok(pt__chat_put_py_float(&b, k[i].v));
        ck_assert_str_eq(b.p, k[i].repr);
        pt__strbuf_free(&b);
    }
}
END_TEST

/* ---- rendering: inputs and errors ------------------------------------------------ */

START_TEST(test_render_errors)
{
    pt_chat_tool_call call = {"get_weather", "{\"city\": \"Paris\"}"};
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "Weather?", NULL, NULL, 0},
                           {PT_CHAT_ROLE_ASSISTANT, NULL, NULL, &call, 1},
                           {PT_CHAT_ROLE_TOOL, "21 C", "get_weather", NULL, 0}};
    pt_chat_options o;
    pt_chat_options_init(&o);
    ck_assert_int_eq(o.tools_in_user_message, 1);
    ck_assert_ptr_null(o.tools_json);

    /* NULL content on an assistant message with calls is "" */
    char *text = render("qwen2.5", m, 3, &o);
    ck_assert_str_eq(text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                           "assistant.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"
                           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                           "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response>"
                           "<|im_end|>\n");
    pt_free(text);
    /* NULL arguments are {} */
    call.arguments = NULL;
    text = render("llama3.1", m, 2, &o);
    ck_assert(strstr(text, "{\"name\": \"get_weather\", \"parameters\": {}}<|eot_id|>"));
    pt_free(text);
    call.arguments = "{\"city\": \"Paris\"}";

    /* tools_json */
    o.tools_json = "[{\"a\": 1},]";
    ck_assert_status(render_status("qwen3", m, 1, &o), PT_EFORMAT, "tools_json: malformed JSON at byte 10");
    o.tools_json = "{\"a\": 1}";
    ck_assert_status(render_status("qwen3", m, 1, &o), PT_EINVAL, "must be a JSON array");
    o.tools_json = "[{\"a\": 1}, \"search\"]";
    ck_assert_status(render_status("qwen3", m, 1, &o), PT_EINVAL, "tool 1 is a string");
    /* checked for every template, also those that ignore tools */
    ck_assert_status(render_status("smollm2", m, 1, &o), PT_EINVAL, "tool 1 is a string");
    o.tools_json = NULL;

    /* arguments */
    call.arguments = "{\"city\": Paris}";
    ck_assert_status(render_status("qwen3", m, 2, &o), PT_EFORMAT,
                     "chat message 1, tool call 0 ('get_weather') arguments: malformed JSON at byte 9");
    call.arguments = "[\"Paris\"]";
    ck_assert_status(render_status("qwen3", m, 2, &o), PT_EINVAL, "must be a JSON object, got an array");
    call.arguments = "{\"city\": \"Paris\"}";
    call.name = NULL;
    ck_assert_status(render_status("qwen3", m, 2, &o), PT_EINVAL, "NULL name");
    call.name = "get_weather";

    /* calls only on assistant messages; a count needs its array */
    pt_chat_message bad[] = {{PT_CHAT_ROLE_USER, "x", NULL, &call, 1}};
    ck_assert_status(render_status("qwen3", bad, 1, &o), PT_EINVAL, "user message with tool calls");
    bad[0].role = PT_CHAT_ROLE_ASSISTANT;
    bad[0].tool_calls = NULL;
    ck_assert_status(render_status("qwen3", bad, 1, &o), PT_EINVAL, "NULL tool_calls");
    pt_chat_message nocontent[] = {{PT_CHAT_ROLE_ASSISTANT, NULL, NULL, NULL, 0}};
    ck_assert_status(render_status("qwen3", nocontent, 1, &o), PT_EINVAL, "NULL content");

    /* templates without a tool-call format refuse calls (their source drops them) */
    static const char *const no_tools[] = {"chatml", "smollm2", "llama3", "llama2", "mistral", "phi3", "plain"};
    for (size_t i = 0; i < sizeof no_tools / sizeof no_tools[0]; i++)
        ck_assert_status(render_status(no_tools[i], m, 2, &o), PT_EUNSUPPORTED, "no tool-call format");

    /* ... and ignore tool definitions, as their source does */
    char *plain = render("smollm2", m, 1, &o);
    o.tools_json = WEATHER;
    text = render("smollm2", m, 1, &o);
    ck_assert_str_eq(text, plain);
    pt_free(text);
    pt_free(plain);

    /* Llama-3.1: one call per message; tools need a first user message */
    pt_chat_tool_call two[] = {call, call};
    pt_chat_message m2[] = {{PT_CHAT_ROLE_USER, "Weather?", NULL, NULL, 0},
                            {PT_CHAT_ROLE_ASSISTANT, "", NULL, two, 2}};
    ck_assert_status(render_status("llama3.2", m2, 2, &o), PT_EINVAL, "single tool-calls at once");
    pt_chat_message sys[] = {{PT_CHAT_ROLE_SYSTEM, "S", NULL, NULL, 0}};
    ck_assert_status(render_status("llama3.1", sys, 1, &o), PT_EINVAL, "no first user message");
    o.tools_in_user_message = 0;
    text = render("llama3.1", sys, 1, &o);
    ck_assert(strstr(text, "You have access to the following functions.") != NULL);
    pt_free(text);
    /* the tools' user turn would drop an assistant message's calls */
    o.tools_in_user_message = 1;
    ck_assert_status(render_status("llama3.1", m + 1, 1, &o), PT_EUNSUPPORTED, "would drop its tool calls");
}
END_TEST

/* An older pt_chat_options (without tools_json / tools_in_user_message) renders
 * without tools, with the tools in the user message by default. */
START_TEST(test_options_size)
{
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "Hi", NULL, NULL, 0}};
    pt_chat_options full, old;
    pt_chat_options_init(&full);
    char *a = render("llama3.1", m, 1, &full);
    old = full;
    old.tools_json = WEATHER;
    old.tools_in_user_message = 0;
    old.size = offsetof(pt_chat_options, tools_json);
    char *b = render("llama3.1", m, 1, &old);
    ck_assert_str_eq(a, b);
    pt_free(a);
    pt_free(b);
    full.tools_json = WEATHER;
    old.size = offsetof(pt_chat_options, tools_in_user_message);
    a = render("llama3.1", m, 1, &full);
    b = render("llama3.1", m, 1, &old);
    ck_assert_str_eq(a, b);
    ck_assert(strstr(a, "Given the following functions"));
    pt_free(a);
    pt_free(b);
}
END_TEST

/* ---- the assistant mask over tool calls -------------------------------------------- */

/* The masked runs of a rendering with the byte tokenizer, decoded, joined by '|'. */
static void mask_runs(char *out, size_t cap, const char *tname, const pt_chat_message *m, size_t n,
                      const pt_chat_options *o)
{
    pt_tokenizer *tok = NULL;
    ck_assert_ok(pt_tokenizer_create_bytes(&tok));
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_create(&t, tname));
    int32_t *ids = NULL;
    uint8_t *mask = NULL;
    size_t nid = 0;
    ck_assert_ok(pt_chat_render_ids(&ids, &mask, &nid, t, tok, m, n, o));
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < nid;) {
        if (!mask[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < nid && mask[j])
            j++;
        char *dec = NULL;
        size_t dl = 0;
        ck_assert_ok(pt_tokenizer_decode(&dec, &dl, tok, ids + i, j - i, 0));
        ck_assert_uint_lt(k + dl + 2, cap);
        if (k)
            out[k++] = '|';
        memcpy(out + k, dec, dl);
        k += dl;
        out[k] = '\0';
        pt_free(dec);
        i = j;
    }
    pt_free(ids);
    pt_free(mask);
    pt_chat_template_free(t);
    pt_tokenizer_free(tok);
}

START_TEST(test_masks)
{
    char runs[4096];
    pt_chat_tool_call w = {"get_weather", "{ \"city\" : \"Paris\" }"};
    pt_chat_tool_call p = {"ping", NULL};
    pt_chat_tool_call wp[] = {w, p};
    pt_chat_message m[] = {{PT_CHAT_ROLE_SYSTEM, "Be brief.", NULL, NULL, 0},
                           {PT_CHAT_ROLE_USER, "Weather?", NULL, NULL, 0},
                           {PT_CHAT_ROLE_ASSISTANT, "Let me check.", NULL, wp, 2},
                           {PT_CHAT_ROLE_TOOL, "21 C", NULL, NULL, 0},
                           {PT_CHAT_ROLE_TOOL, "pong", NULL, NULL, 0},
                           {PT_CHAT_ROLE_ASSISTANT, "21 C.", NULL, NULL, 0}};
    pt_chat_options o;
    pt_chat_options_init(&o);
    o.tools_json = WEATHER;
    /* the calls are what the model generates; the tools block and the results are not */
    mask_runs(runs, sizeof runs, "qwen2.5", m, 6, &o);
    ck_assert_str_eq(runs, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                           "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n"
                           "</tool_call><|im_end|>|21 C.<|im_end|>");
    mask_runs(runs, sizeof runs, "qwen3", m, 6, &o);
    ck_assert_str_eq(runs, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                           "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n"
                           "</tool_call><|im_end|>|<think>\n\n</think>\n\n21 C.<|im_end|>");
    /* no content: the span starts right after the header's newline */
    m[2].content = "";
    mask_runs(runs, sizeof runs, "qwen2.5", m, 6, &o);
    ck_assert(strncmp(runs, "<tool_call>\n{\"name\": \"get_weather\"", 34) == 0);
    /* Llama: one call; the tools' user turn and the ipython results are not masked */
    m[2].n_tool_calls = 1;
    mask_runs(runs, sizeof runs, "llama3.1", m, 6, &o);
    ck_assert_str_eq(runs, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>|"
                           "21 C.<|eot_id|>");
    /* with the generation prompt after a tool result: nothing after the last assistant */
    o.add_generation_prompt = 1;
    mask_runs(runs, sizeof runs, "llama3.2", m, 4, &o);
    ck_assert_str_eq(runs, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>");
}
END_TEST

/* ---- parsing tool calls ------------------------------------------------------------ */

static pt_chat_template *tpl(const char *name)
{
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_create(&t, name));
    return t;
}

START_TEST(test_parse_good)
{
    pt_chat_template *q = tpl("qwen2.5");
    pt_chat_tool_call *calls = NULL;
    size_t n = 9, content = 9;

    /* no call: everything is content */
    const char *plain = "It is sunny.\n";
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, &content, q, plain, strlen(plain)));
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(calls);
    ck_assert_uint_eq(content, strlen(plain));

    /* one call after some text; the arguments come back as json.dumps */
    const char *one = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\":\"Z\\u00fcrich\",\"days\":3.0,\"x\":[1e2]}}\n</tool_call>";
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, &content, q, one, strlen(one)));
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(content, strlen("Let me check."));
    ck_assert_str_eq(calls[0].name, "get_weather");
    ck_assert_str_eq(calls[0].arguments, "{\"city\": \"Z\xc3\xbcrich\", \"days\": 3.0, \"x\": [100.0]}");
    pt_free(calls);

    /* several calls, loose whitespace, the key order of the object, no arguments, a trailing <|im_end|> */
    const char *three = "<tool_call>{\"arguments\": {}, \"name\": \"a\"}</tool_call>\n\n"
                        "<tool_call>\n  {\"name\": \"b\"}  \n</tool_call><tool_call>\n{\"name\": \"c\\n\", "
                        "\"arguments\": {\"k\": {\"n\": null}}}\n</tool_call>\n<|im_end|>";
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, NULL, q, three, strlen(three)));
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(calls[0].name, "a");
    ck_assert_str_eq(calls[0].arguments, "{}");
    ck_assert_str_eq(calls[1].name, "b");
    ck_assert_str_eq(calls[1].arguments, "{}");
    ck_assert_str_eq(calls[2].name, "c\n");
    ck_assert_str_eq(calls[2].arguments, "{\"k\": {\"n\": null}}");
    pt_free(calls);

    /* round trip: the parsed calls on an assistant message render the generated text */
    pt_chat_template *q3 = tpl("qwen3");
    const char *gen = "<think>\nweather\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
                      "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", "
                      "\"arguments\": {}}\n</tool_call>";
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, &content, q3, gen, strlen(gen)));
    ck_assert_uint_eq(n, 2);
    char body[256];
    snprintf(body, sizeof body, "%.*s", (int)content, gen);
    ck_assert_str_eq(body, "<think>\nweather\n</think>\n\nChecking.");
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "Weather?", NULL, NULL, 0},
                           {PT_CHAT_ROLE_ASSISTANT, body, NULL, calls, n}};
    char *text = NULL;
    ck_assert_ok(pt_chat_render(&text, NULL, q3, m, 2, NULL));
    char want[1024];
    snprintf(want, sizeof want, "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n", gen);
    ck_assert_str_eq(text, want);
    pt_free(text);
    pt_free(calls);
    pt_chat_template_free(q3);
    pt_chat_template_free(q);

    /* Llama-3.1/3.2: the whole reply is one object */
    pt_chat_template *l = tpl("llama3.2");
    const char *lc = "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>";
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, &content, l, lc, strlen(lc)));
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(content, 0);
    ck_assert_str_eq(calls[0].name, "get_weather");
    ck_assert_str_eq(calls[0].arguments, "{\"city\": \"Paris\"}");
    pt_free(calls);
    const char *answer = "It is 21 C in Paris.";
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, &content, l, answer, strlen(answer)));
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(content, strlen(answer));
    /* only len bytes are read */
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, &content, l, lc, 2));
    ck_assert_uint_eq(n, 0);
    ck_assert_ok(pt_chat_parse_tool_calls(&calls, &n, &content, l, NULL, 0));
    pt_chat_template_free(l);
}
END_TEST

static void parse_fails(const char *tname, const char *text, int status, const char *needle)
{
    pt_chat_template *t = tpl(tname);
    pt_chat_tool_call *calls = (pt_chat_tool_call *)1;
    size_t n = 7, content = 7;
    int st = pt_chat_parse_tool_calls(&calls, &n, &content, t, text, strlen(text));
    ck_assert_msg(st == status, "%s: '%s': %s", tname, text, pt_status_name(st));
    ck_assert_msg(strstr(pt_last_error(), needle) != NULL, "'%s': message '%s' lacks '%s'", text, pt_last_error(),
                  needle);
    ck_assert_ptr_null(calls);
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(content, 0);
    pt_chat_template_free(t);
}

START_TEST(test_parse_malformed)
{
    /* malformed JSON: where, and what */
    parse_fails("qwen2.5", "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,}}\n</tool_call>", PT_EFORMAT,
                "tool call 1 (at byte 3): malformed JSON at byte 50: expected a key string after ','");
    parse_fails("qwen3", "<tool_call>\n{\"name\" \"f\"}\n</tool_call>", PT_EFORMAT,
                "malformed JSON at byte 20: expected ':'");
    parse_fails("qwen3", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>", PT_EFORMAT,
                "malformed JSON at byte 45: expected a value");
    /* the second of two calls is named */
    parse_fails("qwen3",
                "<tool_call>\n{\"name\": \"f\"}\n</tool_call>\n<tool_call>\n{\"name\": 7}\n</tool_call>",
                PT_EFORMAT, "tool call 2 (at byte 39): \"name\" must be a string, got a number");
    /* missing name, wrong types, unknown keys */
    parse_fails("qwen2.5", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", PT_EFORMAT, "has no \"name\"");
    parse_fails("qwen2.5", "<tool_call>\n{}\n</tool_call>", PT_EFORMAT, "has no \"name\"");
    parse_fails("qwen2.5", "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>", PT_EFORMAT,
                "\"arguments\" (byte 39) must be a JSON object, got a string");
    parse_fails("qwen2.5", "<tool_call>\n{\"name\": \"f\", \"parameters\": {}}\n</tool_call>", PT_EFORMAT,
                "unknown key \"parameters\" at byte 26 (a call has \"name\" and \"arguments\")");
    parse_fails("qwen2.5", "<tool_call>\n{\"name\": \"f\", \"name\": \"g\"}\n</tool_call>", PT_EFORMAT,
                "duplicate key \"name\"");
    /* tags */
    parse_fails("qwen2.5", "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", PT_EFORMAT,
                "tool call 1 (at byte 6): unterminated <tool_call> (no </tool_call>)");
    parse_fails("qwen2.5", "<tool_call>\n", PT_EFORMAT, "unterminated <tool_call>: the text ends");
    parse_fails("qwen2.5", "<tool_call>\n{\"name\": \"f\"", PT_EFORMAT, "unterminated object");
    parse_fails("qwen2.5", "<tool_call>\nget_weather(city=Paris)\n</tool_call>", PT_EFORMAT,
                "expected a JSON object after <tool_call>, found 'get_weather(city' at byte 12");
    parse_fails("qwen2.5", "<tool_call>{\"name\": \"f\"} extra</tool_call>", PT_EFORMAT,
                "expected </tool_call> after its JSON object, found 'extra</tool_call' at byte 25");
    parse_fails("chatml", "done </tool_call>", PT_EFORMAT, "</tool_call> at byte 5 without an opening <tool_call>");
    parse_fails("smollm2", "<tool_call>{\"name\": \"f\"}</tool_call>\nI called f.", PT_EFORMAT,
                "text at byte 37 after the last </tool_call>: 'I called f.'");
    /* Llama */
    parse_fails("llama3.1", "{\"name\": \"f\", \"arguments\": {}}", PT_EFORMAT,
                "unknown key \"arguments\" at byte 14 (a call has \"name\" and \"parameters\")");
    parse_fails("llama3.1", "{\"parameters\": {}}", PT_EFORMAT, "has no \"name\"");
    parse_fails("llama3.1", "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}", PT_EFORMAT,
                "a second tool call at byte 31");
    parse_fails("llama3.2", "{\"name\": \"f\", \"parameters\": {}} Done.", PT_EFORMAT,
                "text at byte 32 after the tool call: 'Done.'");
    /* no format */
    parse_fails("llama3", "{\"name\": \"f\"}", PT_EUNSUPPORTED, "no tool-call format");
    parse_fails("phi3", "x", PT_EUNSUPPORTED, "no tool-call format");
    /* arguments */
    pt_chat_template *t = tpl("qwen3");
    pt_chat_tool_call *calls = NULL;
    size_t n = 0;
    ck_assert_status(pt_chat_parse_tool_calls(NULL, &n, NULL, t, "x", 1), PT_EINVAL, "calls is NULL");
    ck_assert_status(pt_chat_parse_tool_calls(&calls, NULL, NULL, t, "x", 1), PT_EINVAL, "n_calls is NULL");
    ck_assert_status(pt_chat_parse_tool_calls(&calls, &n, NULL, NULL, "x", 1), PT_EINVAL, "t is NULL");
    ck_assert_status(pt_chat_parse_tool_calls(&calls, &n, NULL, t, NULL, 3), PT_EINVAL, "text is NULL");
    pt_chat_template_free(t);
}
END_TEST

/* ---- recognition ------------------------------------------------------------------- */

static char *read_template(const char *file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/chat/templates/%s", PT_TEST_SRCDIR, file);
    char *text = NULL;
    size_t len = 0;
    ck_assert_ok(pt__read_file(&text, &len, path, 1u << 20));
    return text;
}

static char *replace(const char *s, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to), n = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + nf, from))
        n++;
    char *out = pt__malloc(strlen(s) + n * nt + 1), *o = out;
    for (const char *p = s, *q; (q = strstr(p, from)); p = q + nf) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, nt);
        o += nt;
        s = q + nf;
    }
    strcpy(o, s);
    return out;
}

START_TEST(test_recognition)
{
    static const struct {
        const char *file, *variant;
        int tools;
    } k[] = {{"qwen2.5-instruct.jinja", "qwen2.5", 1}, {"qwen3.jinja", "qwen3", 1},
             {"qwen3-later.jinja", "qwen3", 1},       {"llama3.1-instruct.jinja", "llama3.1", 1},
             {"llama3.2-instruct.jinja", "llama3.2", 1}, {"smollm2-instruct.jinja", "smollm2", 0}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *src = read_template(k[i].file);
        pt_chat_template *t = NULL;
        ck_assert_ok(pt_chat_template_from_source(&t, src, NULL, NULL));
        ck_assert_str_eq(pt_chat_template_name(t), k[i].variant);
        ck_assert_int_eq(pt_chat_template_supports_tools(t), k[i].tools);
        pt_chat_template_free(t);
        pt_free(src);
    }
    ck_assert_int_eq(pt_chat_template_supports_tools(NULL), 0);

    /* a Qwen2.5-style template with another default system prompt (as Qwen2.5-Math's) */
    char *src = read_template("qwen2.5-instruct.jinja");
    char *math = replace(src, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                         "Please reason step by step.");
    pt_chat_template *t = NULL;
    ck_assert_ok(pt_chat_template_from_source(&t, math, NULL, "<|im_end|>"));
    ck_assert_str_eq(pt_chat_template_name(t), "qwen2.5");
    pt_chat_message m[] = {{PT_CHAT_ROLE_USER, "1+1?", NULL, NULL, 0}};
    char *text = NULL;
    ck_assert_ok(pt_chat_render(&text, NULL, t, m, 1, NULL));
    ck_assert_str_eq(text, "<|im_start|>system\nPlease reason step by step.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n");
    pt_free(text);
    pt_chat_template_free(t);
    pt_free(math);
    pt_free(src);

    /* by name: Llama-3.2's date is today's unless given */
    ck_assert_ok(pt_chat_template_create(&t, "Llama-3.2"));
    ck_assert_int_eq(pt_chat_template_family(t), PT_CHAT_LLAMA3);
    ck_assert_ptr_nonnull(t->date_default);
    ck_assert_str_ne(t->date_default, "26 Jul 2024");
    pt_chat_template_free(t);
    ck_assert_ok(pt_chat_template_create(&t, "qwen2.5"));
    ck_assert_int_eq(pt_chat_template_family(t), PT_CHAT_CHATML);
    pt_chat_template_free(t);
}
END_TEST

static Suite *chat_tools_suite(void)
{
    Suite *s = suite_create("chat_tools");
    TCase *tc = tcase_create("tools");
    tcase_add_test(tc, test_json_goldens);
    tcase_add_test(tc, test_json_errors);
    tcase_add_test(tc, test_py_float);
    tcase_add_test(tc, test_render_errors);
    tcase_add_test(tc, test_options_size);
    tcase_add_test(tc, test_masks);
    tcase_add_test(tc, test_parse_good);
    tcase_add_test(tc, test_parse_malformed);
    tcase_add_test(tc, test_recognition);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int rc = pt_test_run(chat_tools_suite());
    goldens_free();
    return rc;
}
