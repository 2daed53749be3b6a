/* The chat golden document (tests/reference/chat/chat_goldens.json, written
 * by gen_chat.py with jinja2) as both chat suites read it. */
#ifndef PT_CHAT_GOLDENS_H
#define PT_CHAT_GOLDENS_H

#include "testutil.h"

#include "io/fileio.h"

#include <cjson/cJSON.h>

static cJSON *g_doc;

/* The parsed document, read on first use; goldens_free() at exit. */
static inline cJSON *goldens(void)
{
    if (g_doc)
        return g_doc;
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/chat/chat_goldens.json", PT_TEST_SRCDIR);
    char *text = NULL;
    size_t len = 0;
    ck_assert_ok(pt__read_file(&text, &len, path, 64u << 20));
    g_doc = cJSON_ParseWithLength(text, len);
    free(text);
    ck_assert_msg(g_doc != NULL, "cannot parse %s", path);
    return g_doc;
}

static inline void goldens_free(void)
{
    cJSON_Delete(g_doc);
    g_doc = NULL;
}

static inline const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Tool calls of the messages conversation() returned last (pointers into the
 * document). */
static pt_chat_tool_call g_calls[64];

/* Messages of a named golden conversation (pointers into the document); an
 * assistant message's tool calls are {name, arguments as JSON text}. */
static inline size_t conversation(pt_chat_message *m, size_t cap, const char *name)
{
    const cJSON *convs = cJSON_GetObjectItemCaseSensitive(goldens(), "conversations");
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(convs, name);
    ck_assert_msg(cJSON_IsArray(conv), "no conversation %s", name);
    size_t n = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, conv)
    {
        ck_assert(n < cap);
        ck_assert_ok(pt_chat_role_from_name(&m[n].role, jstr(msg, "role")));
        m[n].content = jstr(msg, "content");
        m[n].name = NULL;
        m[n].tool_calls = NULL;
        m[n].n_tool_calls = 0;
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        const cJSON *call;
        static size_t used;
        if (n == 0)
            used = 0;
        cJSON_ArrayForEach(call, calls)
        {
            ck_assert(used < sizeof g_calls / sizeof g_calls[0]);
            if (m[n].n_tool_calls == 0)
                m[n].tool_calls = &g_calls[used];
            g_calls[used].name = jstr(call, "name");
            g_calls[used].arguments = jstr(call, "arguments");
            used++;
            m[n].n_tool_calls++;
        }
        n++;
    }
    return n;
}

/* Does any of the n messages make tool calls? */
static inline bool has_tool_calls(const pt_chat_message *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].n_tool_calls > 0)
            return true;
    return false;
}

/* The JSON text of a named golden tool set. */
static inline const char *toolset(const char *name)
{
    const cJSON *sets = cJSON_GetObjectItemCaseSensitive(goldens(), "toolsets");
    const char *s = jstr(sets, name);
    ck_assert_msg(s != NULL, "no tool set %s", name);
    return s;
}

/* The render options a golden case asks for. */
static inline void case_options(pt_chat_options *o, const cJSON *c)
{
    ck_assert_ok(pt_chat_options_init(o));
    o->add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(c, "enable_thinking");
    if (cJSON_IsBool(think))
        o->enable_thinking = cJSON_IsTrue(think);
    const char *date = jstr(c, "date_string");
    if (date)
        o->date_string = date;
    /* the date strftime_now gave the generator (Llama-3.2): today's, for us */
    const char *now = jstr(c, "strftime_now");
    if (now)
        o->date_string = now;
    const char *tools = jstr(c, "tools");
    if (tools)
        o->tools_json = toolset(tools);
    const cJSON *tium = cJSON_GetObjectItemCaseSensitive(c, "tools_in_user_message");
    if (cJSON_IsBool(tium))
        o->tools_in_user_message = cJSON_IsTrue(tium);
}

#endif
