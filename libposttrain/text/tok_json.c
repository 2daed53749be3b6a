/* tokenizer.json values: typed getters, the shape of pipeline components,
 * and the loaders' allocation helpers. */
#include "text/tok_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

char *tk_strndup(const char *s, size_t n)
{
    char *p = pt__malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* A string that must be there unless it has a default (dflt non-NULL). */
int tk_json_req_str(const cJSON *obj, const char *key, const char *dflt, const char **out, const char *path)
{
    int st = pt__json_get_string(out, obj, &TK_JSON_CTX(path), key, dflt == NULL);
    if (!st && !*out)
        *out = dflt;
    return st;
}

/* A copy of a string that must be there. */
int tk_json_dup_str(const cJSON *obj, const char *key, char **out, size_t *len, const char *path)
{
    const char *s;
    int st = tk_json_req_str(obj, key, NULL, &s, path);
    if (st)
        return st;
    *len = strlen(s);
    *out = tk_strndup(s, *len);
    return *out ? 0 : PT_ENOMEM;
}

/* A non-negative integer id. */
int tk_json_id(const cJSON *v, int32_t *out, const char *what)
{
    if (!cJSON_IsNumber(v))
        return pt__err(PT_EFORMAT, "tokenizer.json: %s: expected an integer id", what);
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d))
        return pt__err(PT_EFORMAT, "tokenizer.json: %s: id %g is not a non-negative integer", what, d);
    if (d >= (double)TK_MAX_ID)
        return pt__err(PT_ERANGE, "tokenizer.json: %s: id %.0f is out of range (limit %d)", what, d,
                      (int)TK_MAX_ID);
    *out = (int32_t)d;
    return 0;
}

int tk_json_size(const cJSON *obj, const char *key, size_t *out, const char *path)
{
    int64_t v = 0;
    bool present = false;
    int st = pt__json_get_i64(&v, &present, obj, &TK_JSON_CTX(path), key, false, 0, TK_JSON_SIZE_MAX);
    if (!st && present)
        *out = (size_t)v;
    return st;
}

const char *tk_json_type(const cJSON *obj)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* A one-character string (Metaspace replacement, Strip content). */
int tk_json_char(const cJSON *obj, const char *key, char *buf, size_t *len, uint32_t *cp, const char *path,
                 const char *dflt)
{
    const char *s = NULL;
    int st = tk_json_req_str(obj, key, dflt, &s, path);
    if (st)
        return st;
    size_t n = strlen(s);
    uint32_t c = 0;
    size_t k = n ? pt__utf8_next((const unsigned char *)s, n, &c) : 0;
    if (n == 0 || k != n || n > 4)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.%s: expected exactly one character", path, key);
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (len)
        *len = n;
    if (cp)
        *cp = c;
    return 0;
}

/* A Replace/Split pattern: {"String": s} or {"Regex": r}. */
int tk_json_pattern(const cJSON *obj, tk_regex *re, const char *path)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    if (!cJSON_IsObject(p))
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    char where[TK_PATH_MAX + 32];
    if (cJSON_IsString(s)) {
        if (s->valuestring[0] == '\0')
            return pt__err(PT_EFORMAT, "tokenizer.json: %s.pattern.String: empty pattern", path);
        snprintf(where, sizeof where, "%s.pattern.String", path);
        return tk_regex_compile(re, s->valuestring, strlen(s->valuestring), true, where);
    }
    if (cJSON_IsString(r)) {
        snprintf(where, sizeof where, "%s.pattern.Regex", path);
        return tk_regex_compile(re, r->valuestring, strlen(r->valuestring), false, where);
    }
    return pt__err(PT_EFORMAT, "tokenizer.json: %s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
}

/* Replace (normalizer and decoder): the "content" it writes and the pattern. */
int tk_json_replace(const cJSON *obj, char **content, size_t *len, tk_regex *re, const char *path)
{
    int st = tk_json_dup_str(obj, "content", content, len, path);
    return st ? st : tk_json_pattern(obj, re, path);
}

int tk_name_value(const pt_enum_entry *table, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(table[i].name, s) == 0)
            return table[i].value;
    return -1;
}

int tk_json_enum(int *out, const cJSON *obj, const char *key, const pt_enum_entry *table, size_t n,
                 const char *path)
{
    const char *s;
    int st = pt__json_get_string(&s, obj, &TK_JSON_CTX(path), key, false);
    if (st || !s)
        return st;
    int v = tk_name_value(table, n, s);
    if (v >= 0) {
        *out = v;
        return 0;
    }
    pt_strbuf names = PT_STRBUF_INIT;
    for (size_t i = 0; i < n; i++)
        pt__strbuf_printf(&names, "%s\"%s\"", i ? ", " : "", table[i].name);
    st = pt__err(PT_EFORMAT, "tokenizer.json: %s.%s: unknown value \"%s\" (expected one of %s)", path, key, s,
                names.p ? names.p : "");
    pt__strbuf_free(&names);
    return st;
}

int tk_component_begin(const char **ty, pt_tokenizer *t, const cJSON *n, const char *path, int depth,
                       const char *what, const char *seq_key, tk_component_fn fn, void *arg)
{
    *ty = NULL;
    if (depth > 16)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s: %s nested too deeply", path, what);
    if (!cJSON_IsObject(n))
        return pt__err(PT_EFORMAT, "tokenizer.json: %s: expected an object", path);
    const char *type = tk_json_type(n);
    if (!type)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.type: missing", path);
    if (strcmp(type, "Sequence") != 0) {
        *ty = type;
        return 0;
    }
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, seq_key);
    if (!cJSON_IsArray(arr))
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.%s: expected an array", path, seq_key);
    char sub[TK_PATH_MAX];
    int i = 0, st;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        snprintf(sub, sizeof sub, "%s.%s[%d]", path, seq_key, i++);
        if ((st = fn(t, it, sub, depth + 1, arg)))
            return st;
    }
    return 0;
}

int tk_append_zeroed(void *arr_ptr, size_t *n, size_t size, void *slot_ptr)
{
    /* arr_ptr is the address of a T * for some T: read and write it as bytes */
    char *arr;
    memcpy(&arr, arr_ptr, sizeof arr);
    char *v = pt__realloc_array(arr, *n + 1, size);
    if (!v)
        return PT_ENOMEM;
    memset(v + *n * size, 0, size);
    memcpy(arr_ptr, &v, sizeof v);
    void *item = v + (*n)++ * size;
    memcpy(slot_ptr, &item, sizeof item);
    return 0;
}
