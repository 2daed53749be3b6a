/* Loading "added_tokens": each token's content, id and flags, and the tries
 * encode matches them with (normalized tokens by their normalized form). */
#include "text/tok_load.h"

#include <stdio.h>
#include <string.h>

/* One entry of added_tokens into *a (its content copied). */
static int parse_one(tk_added *a, const cJSON *it, const char *path)
{
    if (!cJSON_IsObject(it))
        return pt__err(PT_EFORMAT, "tokenizer.json: %s: expected an object", path);
    char what[96];
    snprintf(what, sizeof what, "%s.id", path);
    const pt_json_ctx c = TK_JSON_CTX(path);
    const char *content;
    int st;
    if ((st = tk_json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &a->id, what)) ||
        (st = pt__json_get_string(&content, it, &c, "content", false)))
        return st;
    if (!content || !*content)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.content: missing or empty", path);
    if ((st = pt__json_get_bool(&a->special, NULL, it, &c, "special", false)))
        return st;
    a->normalized = !a->special;
    if ((st = pt__json_get_bool(&a->lstrip, NULL, it, &c, "lstrip", false)) ||
        (st = pt__json_get_bool(&a->rstrip, NULL, it, &c, "rstrip", false)) ||
        (st = pt__json_get_bool(&a->single_word, NULL, it, &c, "single_word", false)) ||
        (st = pt__json_get_bool(&a->normalized, NULL, it, &c, "normalized", false)))
        return st;
    a->len = strlen(content);
    a->content = tk_strndup(content, a->len);
    return a->content ? 0 : PT_ENOMEM;
}

/* Add the token just parsed, t->added[t->n_added], to the map; its content
 * and its id must both be new. */
static int register_added(pt_tokenizer *t, const char *path)
{
    const tk_added *a = &t->added[t->n_added++];
    int st = tk_strmap_put(&t->added_map, a->content, a->len, a->id);
    if (st < 0)
        return st;
    if (st == 1)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.content: duplicate added token \"%.64s\"", path, a->content);
    for (size_t k = 0; k + 1 < t->n_added; k++)
        if (t->added[k].id == a->id)
            return pt__err(PT_EFORMAT, "tokenizer.json: %s.id: id %d is already used by added token \"%.64s\"",
                          path, (int)a->id, t->added[k].content);
    return 0;
}

int tk_parse_added(pt_tokenizer *t, const cJSON *arr, int32_t *max_id)
{
    if (!arr || cJSON_IsNull(arr))
        return 0;
    if (!cJSON_IsArray(arr))
        return pt__err(PT_EFORMAT, "tokenizer.json: added_tokens: expected an array");
    int n = cJSON_GetArraySize(arr);
    t->added = pt__calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added)
        return PT_ENOMEM;
    const cJSON *it;
    int i = 0, st;
    cJSON_ArrayForEach(it, arr) {
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%d]", i++);
        tk_added *a = &t->added[t->n_added];
        if ((st = parse_one(a, it, path)))
            return st;
        if ((st = register_added(t, path)))
            return st;
        if (a->id > *max_id)
            *max_id = a->id;
    }
    return 0;
}

int tk_build_tries(pt_tokenizer *t)
{
    pt_strbuf nb = PT_STRBUF_INIT;
    int st = 0;
    for (size_t i = 0; i < t->n_added && st == 0; i++) {
        tk_added *a = &t->added[i];
        if (a->normalized && t->n_norm) {
            pt__strbuf_clear(&nb);
            st = tk_normalize_string(&nb, t, a->content, a->len);
            if (st)
                break;
            if (nb.len == 0)
                continue;  /* normalizes to nothing: can never match */
            a->norm = tk_strndup(nb.p, nb.len);
            if (!a->norm) {
                st = PT_ENOMEM;
                break;
            }
            a->norm_len = nb.len;
            st = tk_trie_add(&t->trie_norm, a->norm, a->norm_len, (int32_t)i);
        } else {
            st = tk_trie_add(a->normalized ? &t->trie_norm : &t->trie_raw, a->content, a->len, (int32_t)i);
        }
    }
    pt__strbuf_free(&nb);
    return st;
}
