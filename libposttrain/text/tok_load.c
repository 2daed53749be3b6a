/* Loading a Hugging Face tokenizer.json (and tokenizer_config.json) into a
 * pt_tokenizer.  Every rejection names the JSON path of the offending value. */
#include "text/tok_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TK_PATH_MAX 256

static char *dup_n(const char *s, size_t n)
{
    char *p = pt_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Optional boolean: absent or null keeps *out. */
static int get_bool(const cJSON *obj, const char *key, bool *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.%s: expected a boolean", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Optional string: absent or null gives NULL. */
static int get_str(const cJSON *obj, const char *key, const char **out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.%s: expected a string", path, key);
    *out = v->valuestring;
    return 0;
}

/* Names of an enum's values in a tokenizer.json, ending with {NULL, -1}. */
typedef struct {
    const char *name;
    int value;
} tk_name;

/* The value named s in tab, or -1. */
static int name_value(const tk_name *tab, const char *s)
{
    for (; tab->name; tab++)
        if (strcmp(tab->name, s) == 0)
            return tab->value;
    return -1;
}

/* A string that must be there unless it has a default (dflt non-NULL). */
static int get_req_str(const cJSON *obj, const char *key, const char *dflt, const char **out, const char *path)
{
    int st = get_str(obj, key, out, path);
    if (st)
        return st;
    if (!*out)
        *out = dflt;
    if (!*out)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.%s: missing", path, key);
    return 0;
}

/* A copy of a string that must be there. */
static int dup_req_str(const cJSON *obj, const char *key, char **out, size_t *len, const char *path)
{
    const char *s;
    int st = get_req_str(obj, key, NULL, &s, path);
    if (st)
        return st;
    *len = strlen(s);
    *out = dup_n(s, *len);
    return *out ? 0 : PT_ENOMEM;
}

/* A non-negative integer id. */
static int get_id(const cJSON *v, int32_t *out, const char *what)
{
    if (!cJSON_IsNumber(v))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s: expected an integer id", what);
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s: id %g is not a non-negative integer", what, d);
    if (d >= (double)TK_MAX_ID)
        return pt_err(PT_ERANGE, "tokenizer.json: %s: id %.0f is out of range (limit %d)", what, d,
                      (int)TK_MAX_ID);
    *out = (int32_t)d;
    return 0;
}

static int get_size(const cJSON *obj, const char *key, size_t *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble > 1e9)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.%s: expected a non-negative integer", path, key);
    *out = (size_t)v->valuedouble;
    return 0;
}

static const char *type_of(const cJSON *obj)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* A one-character string (Metaspace replacement, Strip content). */
static int get_char(const cJSON *obj, const char *key, char *buf, size_t *len, uint32_t *cp,
                    const char *path, const char *dflt)
{
    const char *s = NULL;
    int st = get_req_str(obj, key, dflt, &s, path);
    if (st)
        return st;
    size_t n = strlen(s);
    uint32_t c = 0;
    size_t k = n ? pt_utf8_next((const unsigned char *)s, n, &c) : 0;
    if (n == 0 || k != n || n > 4)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.%s: expected exactly one character", path, key);
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (len)
        *len = n;
    if (cp)
        *cp = c;
    return 0;
}

/* A Replace/Split pattern: {"String": s} or {"Regex": r}. */
static int get_pattern(const cJSON *obj, tk_regex *re, const char *path)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    if (!cJSON_IsObject(p))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    char where[TK_PATH_MAX + 32];
    if (cJSON_IsString(s)) {
        if (s->valuestring[0] == '\0')
            return pt_err(PT_EFORMAT, "tokenizer.json: %s.pattern.String: empty pattern", path);
        snprintf(where, sizeof where, "%s.pattern.String", path);
        return tk_regex_compile(re, s->valuestring, strlen(s->valuestring), true, where);
    }
    if (cJSON_IsString(r)) {
        snprintf(where, sizeof where, "%s.pattern.Regex", path);
        return tk_regex_compile(re, r->valuestring, strlen(r->valuestring), false, where);
    }
    return pt_err(PT_EFORMAT, "tokenizer.json: %s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
}

/* Replace (normalizer and decoder): the "content" it writes and the pattern. */
static int get_replace(const cJSON *obj, char **content, size_t *len, tk_regex *re, const char *path)
{
    int st = dup_req_str(obj, "content", content, len, path);
    return st ? st : get_pattern(obj, re, path);
}

/* arr (n items of size bytes) grown by one zeroed item; NULL when out of
 * memory (arr is then unchanged). */
static void *push_zeroed(void *arr, size_t n, size_t size)
{
    char *v = pt_realloc_array(arr, n + 1, size);
    if (v)
        memset(v + n * size, 0, size);
    return v;
}

/* ---- normalizers --------------------------------------------------------------- */
static int add_norm(pt_tokenizer *t, tk_norm **slot)
{
    tk_norm *v = push_zeroed(t->norm, t->n_norm, sizeof *v);
    if (!v)
        return PT_ENOMEM;
    t->norm = v;
    *slot = &v[t->n_norm++];
    return 0;
}

/* The part every pipeline component shares: a depth limit, an object with a
 * "type", and "Sequence" components whose members (under seq_key) are parsed
 * by the same function.  Returns a status; *ty is NULL when the component
 * was a Sequence and has been handled. */
typedef int (*tk_component_fn)(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg);

static int component_begin(const char **ty, pt_tokenizer *t, const cJSON *n, const char *path, int depth,
                           const char *what, const char *seq_key, tk_component_fn fn, void *arg)
{
    *ty = NULL;
    if (depth > 16)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s: %s nested too deeply", path, what);
    if (!cJSON_IsObject(n))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s: expected an object", path);
    const char *type = type_of(n);
    if (!type)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.type: missing", path);
    if (strcmp(type, "Sequence") != 0) {
        *ty = type;
        return 0;
    }
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, seq_key);
    if (!cJSON_IsArray(arr))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.%s: expected an array", path, seq_key);
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

static int parse_normalizer(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = component_begin(&ty, t, n, path, depth, "normalizers", "normalizers", parse_normalizer, arg);
    if (st || !ty)
        return st;
    static const tk_name no_options[] = {
        {"NFC", TKN_NFC},   {"NFD", TKN_NFD},             {"NFKC", TKN_NFKC},
        {"NFKD", TKN_NFKD}, {"Lowercase", TKN_LOWERCASE}, {"StripAccents", TKN_STRIP_ACCENTS},
        {NULL, -1},
    };
    tk_norm *x = NULL;
    int kind = name_value(no_options, ty);
    if (kind >= 0) {
        if ((st = add_norm(t, &x)))
            return st;
        x->kind = (tk_norm_kind)kind;
        return 0;
    }
    if (strcmp(ty, "Prepend") == 0) {
        if ((st = add_norm(t, &x)))
            return st;
        x->kind = TKN_PREPEND;
        return dup_req_str(n, "prepend", &x->str, &x->str_len, path);
    }
    if (strcmp(ty, "Replace") == 0) {
        if ((st = add_norm(t, &x)))
            return st;
        x->kind = TKN_REPLACE;
        return get_replace(n, &x->str, &x->str_len, &x->re, path);
    }
    if (strcmp(ty, "Strip") == 0) {
        if ((st = add_norm(t, &x)))
            return st;
        x->kind = TKN_STRIP;
        x->left = x->right = true;
        if ((st = get_bool(n, "strip_left", &x->left, path)) || (st = get_bool(n, "strip_right", &x->right, path)))
            return st;
        return 0;
    }
    return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: normalizer \"%s\" is not supported "
                  "(supported: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, Sequence)",
                  path, ty);
}

/* ---- pre-tokenizers ------------------------------------------------------------ */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pre(pt_tokenizer *t, tk_pretok **slot)
{
    if (t->n_pre >= 32)
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: pre_tokenizer: more than 32 stages");
    tk_pretok *v = push_zeroed(t->pre, t->n_pre, sizeof *v);
    if (!v)
        return PT_ENOMEM;
    t->pre = v;
    *slot = &v[t->n_pre++];
    return 0;
}

static int parse_behavior(const cJSON *n, tk_behavior *b, const char *path, const char *dflt)
{
    const char *s;
    int st = get_req_str(n, "behavior", dflt, &s, path);
    if (st)
        return st;
    static const tk_name behaviors[] = {
        {"Removed", TKB_REMOVED},
        {"Isolated", TKB_ISOLATED},
        {"MergedWithPrevious", TKB_MERGED_PREV},
        {"MergedWithNext", TKB_MERGED_NEXT},
        {"Contiguous", TKB_CONTIGUOUS},
        {NULL, -1},
    };
    int v = name_value(behaviors, s);
    if (v < 0)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.behavior: unknown behavior \"%s\"", path, s);
    *b = (tk_behavior)v;
    return 0;
}

static int parse_prepend_scheme(const cJSON *n, tk_prepend_scheme *sc, const char *path)
{
    const char *s;
    int st = get_str(n, "prepend_scheme", &s, path);
    if (st)
        return st;
    if (s) {
        static const tk_name schemes[] = {
            {"always", TK_PREPEND_ALWAYS}, {"first", TK_PREPEND_FIRST}, {"never", TK_PREPEND_NEVER}, {NULL, -1},
        };
        int v = name_value(schemes, s);
        if (v < 0)
            return pt_err(PT_EFORMAT, "tokenizer.json: %s.prepend_scheme: unknown scheme \"%s\"", path, s);
        *sc = (tk_prepend_scheme)v;
        return 0;
    }
    /* Older files: add_prefix_space. */
    bool aps = true;
    if ((st = get_bool(n, "add_prefix_space", &aps, path)))
        return st;
    *sc = aps ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    return 0;
}

static int parse_pretok(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = component_begin(&ty, t, n, path, depth, "pre-tokenizers", "pretokenizers", parse_pretok, arg);
    if (st || !ty)
        return st;
    char sub[TK_PATH_MAX];
    tk_pretok *x = NULL;
    if (strcmp(ty, "ByteLevel") == 0) {
        if ((st = add_pre(t, &x)))
            return st;
        x->kind = TKP_BYTELEVEL;
        x->add_prefix_space = true;
        x->use_regex = true;
        if ((st = get_bool(n, "add_prefix_space", &x->add_prefix_space, path)) ||
            (st = get_bool(n, "use_regex", &x->use_regex, path)))
            return st;
        if (x->use_regex) {
            snprintf(sub, sizeof sub, "%s (GPT-2 pattern)", path);
            x->behavior = TKB_ISOLATED;
            return tk_regex_compile(&x->re, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, sub);
        }
        return 0;
    }
    if (strcmp(ty, "Split") == 0) {
        if ((st = add_pre(t, &x)))
            return st;
        x->kind = TKP_SPLIT;
        if ((st = parse_behavior(n, &x->behavior, path, NULL)) || (st = get_bool(n, "invert", &x->invert, path)))
            return st;
        return get_pattern(n, &x->re, path);
    }
    if (strcmp(ty, "Metaspace") == 0) {
        if ((st = add_pre(t, &x)))
            return st;
        x->kind = TKP_METASPACE;
        x->split = true;
        if ((st = get_char(n, "replacement", x->repl, &x->repl_len, NULL, path, "\xE2\x96\x81")) ||
            (st = parse_prepend_scheme(n, &x->scheme, path)) || (st = get_bool(n, "split", &x->split, path)))
            return st;
        if (x->split)
            return tk_regex_compile(&x->re, x->repl, x->repl_len, true, path);
        return 0;
    }
    /* Simple splitters expressed as Split with a fixed pattern. */
    const char *pat = NULL;
    tk_behavior beh = TKB_ISOLATED;
    bool inv = false;
    if (strcmp(ty, "Whitespace") == 0) {
        pat = "\\w+|[^\\w\\s]+";
        beh = TKB_REMOVED;
        inv = true;
    } else if (strcmp(ty, "WhitespaceSplit") == 0) {
        pat = "\\s+";
        beh = TKB_REMOVED;
    } else if (strcmp(ty, "Digits") == 0) {
        bool individual = false;
        if ((st = get_bool(n, "individual_digits", &individual, path)))
            return st;
        pat = "\\p{N}";
        beh = individual ? TKB_ISOLATED : TKB_CONTIGUOUS;
    } else if (strcmp(ty, "Punctuation") == 0) {
        pat = "[\\p{P}[:punct:]]";
        if ((st = parse_behavior(n, &beh, path, "Isolated")))
            return st;
    }
    if (pat) {
        if ((st = add_pre(t, &x)))
            return st;
        x->kind = TKP_SPLIT;
        x->behavior = beh;
        x->invert = inv;
        return tk_regex_compile(&x->re, pat, strlen(pat), false, path);
    }
    return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: pre-tokenizer \"%s\" is not supported "
                  "(supported: ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits, "
                  "Punctuation, Sequence)", path, ty);
}

/* ---- decoders ---------------------------------------------------------------------- */
static int add_dec(pt_tokenizer *t, tk_dec **slot)
{
    tk_dec *v = push_zeroed(t->dec, t->n_dec, sizeof *v);
    if (!v)
        return PT_ENOMEM;
    t->dec = v;
    *slot = &v[t->n_dec++];
    return 0;
}

static int parse_decoder(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = component_begin(&ty, t, n, path, depth, "decoders", "decoders", parse_decoder, arg);
    if (st || !ty)
        return st;
    static const tk_name no_options[] = {
        {"ByteLevel", TKD_BYTELEVEL}, {"ByteFallback", TKD_BYTEFALLBACK}, {"Fuse", TKD_FUSE}, {NULL, -1},
    };
    tk_dec *x = NULL;
    int kind = name_value(no_options, ty);
    if (kind >= 0) {
        if ((st = add_dec(t, &x)))
            return st;
        x->kind = (tk_dec_kind)kind;
        return 0;
    }
    if (strcmp(ty, "Replace") == 0) {
        if ((st = add_dec(t, &x)))
            return st;
        x->kind = TKD_REPLACE;
        return get_replace(n, &x->content, &x->content_len, &x->re, path);
    }
    if (strcmp(ty, "Strip") == 0) {
        if ((st = add_dec(t, &x)))
            return st;
        x->kind = TKD_STRIP;
        char c[8];
        if ((st = get_char(n, "content", c, NULL, &x->strip_cp, path, NULL)) ||
            (st = get_size(n, "start", &x->strip_start, path)) || (st = get_size(n, "stop", &x->strip_stop, path)))
            return st;
        return 0;
    }
    if (strcmp(ty, "Metaspace") == 0) {
        if ((st = add_dec(t, &x)))
            return st;
        x->kind = TKD_METASPACE;
        tk_prepend_scheme sc;
        if ((st = get_char(n, "replacement", x->repl, &x->repl_len, NULL, path, "\xE2\x96\x81")) ||
            (st = parse_prepend_scheme(n, &sc, path)))
            return st;
        x->prefix = sc != TK_PREPEND_NEVER;
        return 0;
    }
    return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: decoder \"%s\" is not supported "
                  "(supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)", path, ty);
}

/* ---- post-processors ------------------------------------------------------------ */
static int post_push(pt_tokenizer *t, bool is_seq, const int32_t *ids, size_t n)
{
    tk_post_item *v = push_zeroed(t->post, t->n_post, sizeof *v);
    if (!v)
        return PT_ENOMEM;
    t->post = v;
    tk_post_item *it = &v[t->n_post];
    it->is_seq = is_seq;
    if (n) {
        it->ids = pt_malloc_array(n, sizeof *ids);
        if (!it->ids)
            return PT_ENOMEM;
        memcpy(it->ids, ids, n * sizeof *ids);
        it->n_ids = n;
    }
    t->n_post++;
    return 0;
}

static int parse_template(pt_tokenizer *t, const cJSON *n, const char *path)
{
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(n, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(n, "special_tokens");
    if (!cJSON_IsArray(single))
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s.single: expected an array of template items", path);
    if (specials && !cJSON_IsNull(specials) && !cJSON_IsObject(specials))
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.special_tokens: expected an object", path);
    int i = 0, nseq = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        int st;
        if (cJSON_IsObject(sq)) {
            const cJSON *sid = cJSON_GetObjectItemCaseSensitive(sq, "id");
            if (!cJSON_IsString(sid) || strcmp(sid->valuestring, "A") != 0)
                return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s.single[%d].Sequence.id: only \"A\" is "
                              "supported in the single template", path, i);
            if ((st = post_push(t, true, NULL, 0)))
                return st;
            nseq++;
        } else if (cJSON_IsObject(sp)) {
            const cJSON *sid = cJSON_GetObjectItemCaseSensitive(sp, "id");
            if (!cJSON_IsString(sid))
                return pt_err(PT_EFORMAT, "tokenizer.json: %s.single[%d].SpecialToken.id: expected a string", path, i);
            const cJSON *def = specials ? cJSON_GetObjectItemCaseSensitive(specials, sid->valuestring) : NULL;
            const cJSON *ids = def ? cJSON_GetObjectItemCaseSensitive(def, "ids") : NULL;
            if (!cJSON_IsArray(ids))
                return pt_err(PT_EFORMAT, "tokenizer.json: %s.special_tokens: \"%s\" used in the template is "
                              "missing or has no ids array", path, sid->valuestring);
            int nid = cJSON_GetArraySize(ids);
            if (nid > 64)
                return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s.special_tokens.%s.ids: more than 64 ids", path,
                              sid->valuestring);
            int32_t buf[64];
            int k = 0;
            const cJSON *idv;
            cJSON_ArrayForEach(idv, ids) {
                char what[TK_PATH_MAX];
                snprintf(what, sizeof what, "%s.special_tokens.%s.ids[%d]", path, sid->valuestring, k);
                if ((st = get_id(idv, &buf[k], what)))
                    return st;
                k++;
            }
            if ((st = post_push(t, false, buf, (size_t)k)))
                return st;
        } else {
            return pt_err(PT_EFORMAT, "tokenizer.json: %s.single[%d]: expected {\"SpecialToken\": ...} or "
                          "{\"Sequence\": ...}", path, i);
        }
        i++;
    }
    if (nseq != 1)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.single: the template must hold $A exactly once", path);
    return 0;
}

static int parse_pair_token(const cJSON *n, const char *key, int32_t *id, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(n, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.%s: expected [token, id]", path, key);
    char what[TK_PATH_MAX];
    snprintf(what, sizeof what, "%s.%s[1]", path, key);
    return get_id(cJSON_GetArrayItem(v, 1), id, what);
}

static int parse_post(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = component_begin(&ty, t, n, path, depth, "post-processors", "processors", parse_post, arg);
    if (st || !ty)
        return st;
    int *templates = arg;
    if (strcmp(ty, "ByteLevel") == 0)
        return 0;  /* only changes offsets */
    if (*templates)
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s: more than one template post-processor", path);
    (*templates)++;
    if (strcmp(ty, "TemplateProcessing") == 0)
        return parse_template(t, n, path);
    if (strcmp(ty, "RobertaProcessing") == 0 || strcmp(ty, "BertProcessing") == 0) {
        int32_t cls = 0, sep = 0;
        if ((st = parse_pair_token(n, "cls", &cls, path)) || (st = parse_pair_token(n, "sep", &sep, path)))
            return st;
        if ((st = post_push(t, false, &cls, 1)) || (st = post_push(t, true, NULL, 0)) ||
            (st = post_push(t, false, &sep, 1)))
            return st;
        return 0;
    }
    return pt_err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: post-processor \"%s\" is not supported "
                  "(supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)",
                  path, ty);
}

/* ---- model ------------------------------------------------------------------------- */
static int parse_model(pt_tokenizer *t, const cJSON *m, int32_t *max_id)
{
    if (!cJSON_IsObject(m))
        return pt_err(PT_EFORMAT, "tokenizer.json: model: expected an object");
    const char *ty = type_of(m);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (ty && strcmp(ty, "BPE") != 0)
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: model.type: model \"%s\" is not supported (only BPE)", ty);
    if (!ty && !merges)
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: model.type: missing, and the model has no merges (only BPE "
                      "is supported)");
    int st;
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: model.dropout: BPE dropout is not supported (must be null)");
    const char *csp, *eows;
    if ((st = get_str(m, "continuing_subword_prefix", &csp, "model")) ||
        (st = get_str(m, "end_of_word_suffix", &eows, "model")))
        return st;
    if (csp && *csp)
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: model.continuing_subword_prefix: \"%s\" is not supported "
                      "(must be null)", csp);
    if (eows && *eows)
        return pt_err(PT_EUNSUPPORTED, "tokenizer.json: model.end_of_word_suffix: \"%s\" is not supported "
                      "(must be null)", eows);
    if ((st = get_bool(m, "fuse_unk", &t->fuse_unk, "model")) ||
        (st = get_bool(m, "byte_fallback", &t->byte_fallback, "model")) ||
        (st = get_bool(m, "ignore_merges", &t->ignore_merges, "model")))
        return st;
    if (!cJSON_IsObject(vocab))
        return pt_err(PT_EFORMAT, "tokenizer.json: model.vocab: expected an object of token -> id");
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = 0;
        char what[TK_PATH_MAX];
        snprintf(what, sizeof what, "model.vocab[\"%.64s\"]", it->string ? it->string : "");
        if ((st = get_id(it, &id, what)))
            return st;
        st = tk_strmap_put(&t->vocab, it->string, strlen(it->string), id);
        if (st < 0)
            return st;
        if (st == 1)
            return pt_err(PT_EFORMAT, "tokenizer.json: %s: duplicate token", what);
        if (id > *max_id)
            *max_id = id;
    }
    /* unk token */
    const char *unk;
    if ((st = get_str(m, "unk_token", &unk, "model")))
        return st;
    t->unk_id = -1;
    if (unk) {
        t->unk_id = tk_strmap_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0)
            return pt_err(PT_EFORMAT, "tokenizer.json: model.unk_token: \"%s\" is not in the vocabulary", unk);
    }
    /* merges */
    if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
        return pt_err(PT_EFORMAT, "tokenizer.json: model.merges: expected an array");
    int nm = merges ? cJSON_GetArraySize(merges) : 0;
    if ((st = tk_pairmap_init(&t->merges, (size_t)nm)))
        return st;
    t->merge_newid = pt_malloc_array((size_t)nm + 1, sizeof *t->merge_newid);
    if (!t->merge_newid)
        return PT_ENOMEM;
    pt_strbuf cat = PT_STRBUF_INIT;
    uint32_t rank = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t na, nb;
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                pt_strbuf_free(&cat);
                return pt_err(PT_EFORMAT, "tokenizer.json: model.merges[%u]: \"%.64s\" is not two tokens "
                              "separated by one space", rank, s);
            }
            a = s;
            na = (size_t)(sp - s);
            b = sp + 1;
            nb = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring;
            b = cJSON_GetArrayItem(it, 1)->valuestring;
            na = strlen(a);
            nb = strlen(b);
        } else {
            pt_strbuf_free(&cat);
            return pt_err(PT_EFORMAT, "tokenizer.json: model.merges[%u]: expected \"a b\" or [\"a\", \"b\"]", rank);
        }
        int32_t ia = tk_strmap_get(&t->vocab, a, na), ib = tk_strmap_get(&t->vocab, b, nb);
        pt_strbuf_clear(&cat);
        pt_strbuf_put(&cat, a, na);
        if ((st = pt_strbuf_put(&cat, b, nb))) {
            pt_strbuf_free(&cat);
            return st;
        }
        int32_t ic = tk_strmap_get(&t->vocab, cat.p ? cat.p : "", cat.len);
        if (ia < 0 || ib < 0 || ic < 0) {
            const char *bad = ia < 0 ? a : ib < 0 ? b : NULL;
            int len = (int)(ia < 0 ? na : ib < 0 ? nb : cat.len);
            if (!bad)
                bad = cat.p;
            st = pt_err(PT_EFORMAT, "tokenizer.json: model.merges[%u]: token \"%.*s\" is not in the vocabulary",
                        rank, len > 64 ? 64 : len, bad);
            pt_strbuf_free(&cat);
            return st;
        }
        tk_pairmap_put(&t->merges, ia, ib, rank, ic);
        t->merge_newid[rank] = ic;
        rank++;
    }
    pt_strbuf_free(&cat);
    t->n_merges = rank;
    return 0;
}

/* ---- added tokens -------------------------------------------------------------- */
static int parse_added(pt_tokenizer *t, const cJSON *arr, int32_t *max_id)
{
    if (!arr || cJSON_IsNull(arr))
        return 0;
    if (!cJSON_IsArray(arr))
        return pt_err(PT_EFORMAT, "tokenizer.json: added_tokens: expected an array");
    int n = cJSON_GetArraySize(arr);
    t->added = pt_calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added)
        return PT_ENOMEM;
    const cJSON *it;
    int i = 0, st;
    cJSON_ArrayForEach(it, arr) {
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%d]", i);
        if (!cJSON_IsObject(it))
            return pt_err(PT_EFORMAT, "tokenizer.json: %s: expected an object", path);
        tk_added *a = &t->added[t->n_added];
        char what[96];
        snprintf(what, sizeof what, "%s.id", path);
        const char *content;
        if ((st = get_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &a->id, what)) ||
            (st = get_str(it, "content", &content, path)))
            return st;
        if (!content || !*content)
            return pt_err(PT_EFORMAT, "tokenizer.json: %s.content: missing or empty", path);
        a->normalized = true;
        if ((st = get_bool(it, "special", &a->special, path)))
            return st;
        a->normalized = !a->special;
        if ((st = get_bool(it, "lstrip", &a->lstrip, path)) || (st = get_bool(it, "rstrip", &a->rstrip, path)) ||
            (st = get_bool(it, "single_word", &a->single_word, path)) ||
            (st = get_bool(it, "normalized", &a->normalized, path)))
            return st;
        a->len = strlen(content);
        a->content = dup_n(content, a->len);
        if (!a->content)
            return PT_ENOMEM;
        t->n_added++;
        st = tk_strmap_put(&t->added_map, content, a->len, a->id);
        if (st < 0)
            return st;
        if (st == 1)
            return pt_err(PT_EFORMAT, "tokenizer.json: %s.content: duplicate added token \"%.64s\"", path, content);
        for (size_t k = 0; k + 1 < t->n_added; k++)
            if (t->added[k].id == a->id)
                return pt_err(PT_EFORMAT, "tokenizer.json: %s.id: id %d is already used by added token \"%.64s\"",
                              path, (int)a->id, t->added[k].content);
        if (a->id > *max_id)
            *max_id = a->id;
        i++;
    }
    return 0;
}

/* ---- id table ---------------------------------------------------------------------- */
static int build_ids(pt_tokenizer *t, int32_t max_id)
{
    size_t total = t->vocab.n + t->n_added;
    if (max_id >= 0 && (size_t)max_id > 4 * total + 1024)
        return pt_err(PT_ERANGE, "tokenizer.json: id %d is out of range for %zu tokens", (int)max_id, total);
    t->vocab_size = max_id + 1;
    size_t nv = (size_t)t->vocab_size;
    t->id_str = pt_calloc(nv + 1, sizeof *t->id_str);
    t->id_len = pt_calloc(nv + 1, sizeof *t->id_len);
    t->id_flags = pt_calloc(nv + 1, 1);
    if (!t->id_str || !t->id_len || !t->id_flags)
        return PT_ENOMEM;
    for (size_t i = 0; i < t->vocab.n; i++) {
        size_t len;
        const char *k = tk_strmap_key(&t->vocab, i, &len);
        int32_t id = t->vocab.ent[i].val;
        if (t->id_str[id]) {
            size_t l2 = t->id_len[id];
            return pt_err(PT_EFORMAT, "tokenizer.json: model.vocab: id %d is used by both \"%.*s\" and \"%.*s\"",
                          (int)id, (int)(l2 > 64 ? 64 : l2), t->id_str[id], (int)(len > 64 ? 64 : len), k);
        }
        t->id_str[id] = k;
        t->id_len[id] = (uint32_t)len;
    }
    for (size_t i = 0; i < t->n_added; i++) {
        const tk_added *a = &t->added[i];
        t->id_str[a->id] = a->content;
        t->id_len[a->id] = (uint32_t)a->len;
        t->id_flags[a->id] = (uint8_t)(1 | (a->special ? 2 : 0));
    }
    /* Fast paths for the model. */
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = tk_strmap_get(&t->vocab, name, 6);
    }
    for (int c = 0; c < 128; c++) {
        char ch = (char)c;
        t->char1_ids[c] = tk_strmap_get(&t->vocab, &ch, 1);
    }
    return 0;
}

static int check_post_ids(pt_tokenizer *t)
{
    if (t->has_pad && t->pad_id_json >= t->vocab_size)
        return pt_err(PT_EFORMAT, "tokenizer.json: padding.pad_id: id %d is not in the vocabulary", (int)t->pad_id_json);
    for (size_t i = 0; i < t->n_post; i++)
        for (size_t k = 0; k < t->post[i].n_ids; k++)
            if (t->post[i].ids[k] >= t->vocab_size || !t->id_str[t->post[i].ids[k]])
                return pt_err(PT_EFORMAT, "tokenizer.json: post_processor: special token id %d is not in the "
                              "vocabulary", (int)t->post[i].ids[k]);
    return 0;
}

static int build_tries(pt_tokenizer *t)
{
    pt_strbuf nb = PT_STRBUF_INIT;
    int st = 0;
    for (size_t i = 0; i < t->n_added && st == 0; i++) {
        tk_added *a = &t->added[i];
        if (a->normalized && t->n_norm) {
            pt_strbuf_clear(&nb);
            st = tk_normalize_string(&nb, t, a->content, a->len);
            if (st)
                break;
            if (nb.len == 0)
                continue;  /* normalizes to nothing: can never match */
            a->norm = dup_n(nb.p, nb.len);
            if (!a->norm) {
                st = PT_ENOMEM;
                break;
            }
            a->norm_len = nb.len;
            st = tk_trie_add(&t->trie_norm, a->norm, a->norm_len, (int32_t)i);
        } else if (a->normalized) {
            st = tk_trie_add(&t->trie_norm, a->content, a->len, (int32_t)i);
        } else {
            st = tk_trie_add(&t->trie_raw, a->content, a->len, (int32_t)i);
        }
    }
    pt_strbuf_free(&nb);
    return st;
}

static int parse_direction(const cJSON *obj, bool *left, const char *path)
{
    const char *d;
    int st = get_str(obj, "direction", &d, path);
    if (st)
        return st;
    if (!d || strcmp(d, "Right") == 0)
        *left = false;
    else if (strcmp(d, "Left") == 0)
        *left = true;
    else
        return pt_err(PT_EFORMAT, "tokenizer.json: %s.direction: expected \"Right\" or \"Left\"", path);
    return 0;
}

/* "truncation" and "padding": kept, and applied only on request
 * (PT_TOK_TRUNCATE), since transformers ignores them when it loads a file. */
static int parse_trunc_pad(pt_tokenizer *t, const cJSON *root)
{
    int st;
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (tr && !cJSON_IsNull(tr)) {
        if (!cJSON_IsObject(tr))
            return pt_err(PT_EFORMAT, "tokenizer.json: truncation: expected an object or null");
        const cJSON *ml = cJSON_GetObjectItemCaseSensitive(tr, "max_length");
        if (!ml)
            return pt_err(PT_EFORMAT, "tokenizer.json: truncation.max_length: missing");
        if ((st = get_size(tr, "max_length", &t->trunc_max, "truncation")) ||
            (st = parse_direction(tr, &t->trunc_left, "truncation")))
            return st;
        const char *strat;
        if ((st = get_str(tr, "strategy", &strat, "truncation")))
            return st;
        if (strat && strcmp(strat, "LongestFirst") != 0 && strcmp(strat, "OnlyFirst") != 0 &&
            strcmp(strat, "OnlySecond") != 0)
            return pt_err(PT_EFORMAT, "tokenizer.json: truncation.strategy: unknown strategy \"%s\"", strat);
        t->trunc_only_second = strat && strcmp(strat, "OnlySecond") == 0;
        t->has_trunc = true;
    }
    const cJSON *pd = cJSON_GetObjectItemCaseSensitive(root, "padding");
    if (pd && !cJSON_IsNull(pd)) {
        if (!cJSON_IsObject(pd))
            return pt_err(PT_EFORMAT, "tokenizer.json: padding: expected an object or null");
        const cJSON *sg = cJSON_GetObjectItemCaseSensitive(pd, "strategy");
        if (cJSON_IsObject(sg)) {
            if ((st = get_size(sg, "Fixed", &t->pad_fixed, "padding.strategy")))
                return st;
            if (!cJSON_GetObjectItemCaseSensitive(sg, "Fixed"))
                return pt_err(PT_EFORMAT, "tokenizer.json: padding.strategy: expected \"BatchLongest\" or {\"Fixed\": n}");
        } else if (!(cJSON_IsString(sg) && strcmp(sg->valuestring, "BatchLongest") == 0) && sg && !cJSON_IsNull(sg)) {
            return pt_err(PT_EFORMAT, "tokenizer.json: padding.strategy: expected \"BatchLongest\" or {\"Fixed\": n}");
        }
        if ((st = parse_direction(pd, &t->pad_left, "padding")) ||
            (st = get_size(pd, "pad_to_multiple_of", &t->pad_multiple, "padding")))
            return st;
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(pd, "pad_id");
        t->pad_id_json = 0;
        if (pid && (st = get_id(pid, &t->pad_id_json, "padding.pad_id")))
            return st;
        t->has_pad = true;
    }
    return 0;
}

/* Offset of the first byte that is not part of valid UTF-8, or len. */
static size_t utf8_bad_offset(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = (unsigned char)s[i] < 0x80 ? 1 : pt_utf8_next((const unsigned char *)s + i, len - i, &cp);
        if (!k)
            return i;
        i += k;
    }
    return len;
}

int tk_load_json(pt_tokenizer *t, const char *json, size_t len)
{
    /* as the reference (Rust strings), the document must be UTF-8, so every
     * token string and therefore every decoded text is */
    size_t bad = utf8_bad_offset(json, len);
    if (bad < len)
        return pt_err(PT_EFORMAT, "tokenizer.json: not valid UTF-8 at byte %zu", bad);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t off = ep && ep >= json && ep <= json + len ? (size_t)(ep - json) : 0;
        return pt_err(PT_EFORMAT, "tokenizer.json: not valid JSON (near byte %zu)", off);
    }
    int st = 0;
    int32_t max_id = -1;
    int templates = 0;
    if (!cJSON_IsObject(root)) {
        st = pt_err(PT_EFORMAT, "tokenizer.json: the document is not a JSON object");
        goto done;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model) {
        st = pt_err(PT_EFORMAT, "tokenizer.json: model: missing");
        goto done;
    }
    if ((st = parse_trunc_pad(t, root)))
        goto done;
    if ((st = parse_model(t, model, &max_id)))
        goto done;
    if ((st = parse_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &max_id)))
        goto done;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (v && !cJSON_IsNull(v) && (st = parse_normalizer(t, v, "normalizer", 0, NULL)))
        goto done;
    v = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (v && !cJSON_IsNull(v) && (st = parse_pretok(t, v, "pre_tokenizer", 0, NULL)))
        goto done;
    v = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (v && !cJSON_IsNull(v) && (st = parse_post(t, v, "post_processor", 0, &templates)))
        goto done;
    v = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (v && !cJSON_IsNull(v)) {
        t->has_decoder = true;
        if ((st = parse_decoder(t, v, "decoder", 0, NULL)))
            goto done;
    }
    if (max_id < 0) {
        st = pt_err(PT_EFORMAT, "tokenizer.json: model.vocab: the vocabulary is empty");
        goto done;
    }
    if ((st = build_ids(t, max_id)) || (st = check_post_ids(t)) || (st = build_tries(t)))
        goto done;
done:
    cJSON_Delete(root);
    return st;
}

/* ---- tokenizer_config.json ------------------------------------------------------- */
static int config_token(const cJSON *root, const char *key, char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v))
        return pt_err(PT_EFORMAT, "tokenizer_config.json: %s: expected a string or {\"content\": ...}", key);
    *out = pt_strdup(v->valuestring);
    return *out ? 0 : PT_ENOMEM;
}

int tk_load_config(pt_tokenizer *t, const char *json, size_t len)
{
    size_t bad = utf8_bad_offset(json, len);
    if (bad < len)
        return pt_err(PT_EFORMAT, "tokenizer_config.json: not valid UTF-8 at byte %zu", bad);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return pt_err(PT_EFORMAT, "tokenizer_config.json: not valid JSON");
    int st = 0;
    if (!cJSON_IsObject(root)) {
        st = pt_err(PT_EFORMAT, "tokenizer_config.json: the document is not a JSON object");
        goto done;
    }
    if ((st = config_token(root, "bos_token", &t->bos_token)) || (st = config_token(root, "eos_token", &t->eos_token)) ||
        (st = config_token(root, "pad_token", &t->pad_token)) || (st = config_token(root, "unk_token", &t->unk_token)))
        goto done;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "add_bos_token");
    if (cJSON_IsBool(v))
        t->add_bos = cJSON_IsTrue(v);
    v = cJSON_GetObjectItemCaseSensitive(root, "add_eos_token");
    if (cJSON_IsBool(v))
        t->add_eos = cJSON_IsTrue(v);
    v = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsString(v)) {
        if (!(t->chat_template = pt_strdup(v->valuestring)))
            st = PT_ENOMEM;
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        t->tmpl_names = pt_calloc((size_t)n + 1, sizeof *t->tmpl_names);
        t->tmpl_texts = pt_calloc((size_t)n + 1, sizeof *t->tmpl_texts);
        if (!t->tmpl_names || !t->tmpl_texts) {
            st = PT_ENOMEM;
            goto done;
        }
        const cJSON *it;
        int i = 0;
        cJSON_ArrayForEach(it, v) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *tx = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (!cJSON_IsString(nm) || !cJSON_IsString(tx)) {
                st = pt_err(PT_EFORMAT, "tokenizer_config.json: chat_template[%d]: expected {\"name\": ..., "
                            "\"template\": ...}", i);
                goto done;
            }
            t->tmpl_names[t->n_tmpl] = pt_strdup(nm->valuestring);
            t->tmpl_texts[t->n_tmpl] = pt_strdup(tx->valuestring);
            if (!t->tmpl_names[t->n_tmpl] || !t->tmpl_texts[t->n_tmpl]) {
                free(t->tmpl_names[t->n_tmpl]);
                free(t->tmpl_texts[t->n_tmpl]);
                st = PT_ENOMEM;
                goto done;
            }
            t->n_tmpl++;
            i++;
        }
    } else if (v && !cJSON_IsNull(v)) {
        st = pt_err(PT_EFORMAT, "tokenizer_config.json: chat_template: expected a string or a list");
    }
done:
    cJSON_Delete(root);
    return st;
}

void tk_destroy(pt_tokenizer *t)
{
    tk_strmap_free(&t->vocab);
    tk_pairmap_free(&t->merges);
    free(t->merge_newid);
    free(t->id_str);
    free(t->id_len);
    free(t->id_flags);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].norm);
    }
    free(t->added);
    tk_strmap_free(&t->added_map);
    tk_trie_free(&t->trie_raw);
    tk_trie_free(&t->trie_norm);
    for (size_t i = 0; i < t->n_norm; i++) {
        free(t->norm[i].str);
        tk_regex_free(&t->norm[i].re);
    }
    free(t->norm);
    for (size_t i = 0; i < t->n_pre; i++)
        tk_regex_free(&t->pre[i].re);
    free(t->pre);
    for (size_t i = 0; i < t->n_dec; i++) {
        free(t->dec[i].content);
        tk_regex_free(&t->dec[i].re);
    }
    free(t->dec);
    for (size_t i = 0; i < t->n_post; i++)
        free(t->post[i].ids);
    free(t->post);
    free(t->bos_token);
    free(t->eos_token);
    free(t->pad_token);
    free(t->unk_token);
    free(t->chat_template);
    for (size_t i = 0; i < t->n_tmpl; i++) {
        free(t->tmpl_names[i]);
        free(t->tmpl_texts[i]);
    }
    free(t->tmpl_names);
    free(t->tmpl_texts);
}
