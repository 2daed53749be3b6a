/* tokenizer_config.json: the bos/eos/pad/unk token names, add_bos_token /
 * add_eos_token, and the chat_template (a string, or a list of named ones).
 * Informational: none of it changes encode or decode. */
#include "text/tok_internal.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static int config_token(const cJSON *root, const char *key, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v))
        return pt__err(PT_EFORMAT, "tokenizer_config.json: %s: expected a string or {\"content\": ...}", key);
    *out = pt__strdup(v->valuestring);
    return *out ? 0 : PT_ENOMEM;
}

/* The list form of chat_template: [{"name": ..., "template": ...}, ...]. */
static int parse_template_list(pt_tokenizer *t, const cJSON *v)
{
    int n = cJSON_GetArraySize(v);
    t->tmpl_names = pt__calloc((size_t)n + 1, sizeof *t->tmpl_names);
    t->tmpl_texts = pt__calloc((size_t)n + 1, sizeof *t->tmpl_texts);
    if (!t->tmpl_names || !t->tmpl_texts)
        return PT_ENOMEM;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, v) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (!cJSON_IsString(nm) || !cJSON_IsString(tx))
            return pt__err(PT_EFORMAT, "tokenizer_config.json: chat_template[%d]: expected {\"name\": ..., "
                          "\"template\": ...}", i);
        t->tmpl_names[t->n_tmpl] = pt__strdup(nm->valuestring);
        t->tmpl_texts[t->n_tmpl] = pt__strdup(tx->valuestring);
        if (!t->tmpl_names[t->n_tmpl] || !t->tmpl_texts[t->n_tmpl]) {
            free(t->tmpl_names[t->n_tmpl]);
            free(t->tmpl_texts[t->n_tmpl]);
            return PT_ENOMEM;
        }
        t->n_tmpl++;
        i++;
    }
    return 0;
}

static int parse_config(pt_tokenizer *t, const cJSON *root)
{
    if (!cJSON_IsObject(root))
        return pt__err(PT_EFORMAT, "tokenizer_config.json: the document is not a JSON object");
    int st;
    if ((st = config_token(root, "bos_token", &t->bos_token)) || (st = config_token(root, "eos_token", &t->eos_token)) ||
        (st = config_token(root, "pad_token", &t->pad_token)) || (st = config_token(root, "unk_token", &t->unk_token)))
        return st;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "add_bos_token");
    if (cJSON_IsBool(v))
        t->add_bos = cJSON_IsTrue(v);
    v = cJSON_GetObjectItemCaseSensitive(root, "add_eos_token");
    if (cJSON_IsBool(v))
        t->add_eos = cJSON_IsTrue(v);
    v = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsString(v))
        return (t->chat_template = pt__strdup(v->valuestring)) ? 0 : PT_ENOMEM;
    if (cJSON_IsArray(v))
        return parse_template_list(t, v);
    if (v && !cJSON_IsNull(v))
        return pt__err(PT_EFORMAT, "tokenizer_config.json: chat_template: expected a string or a list");
    return 0;
}

int tk_load_config(pt_tokenizer *t, const char *json, size_t len)
{
    size_t bad = pt__utf8_valid_prefix(json, len);
    if (bad < len)
        return pt__err(PT_EFORMAT, "tokenizer_config.json: not valid UTF-8 at byte %zu", bad);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return pt__err(PT_EFORMAT, "tokenizer_config.json: not valid JSON");
    int st = parse_config(t, root);
    cJSON_Delete(root);
    return st;
}
