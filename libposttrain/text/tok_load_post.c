/* Loading what is done to the ids after the model: the "post_processor"
 * (template, Roberta and Bert processing), and "truncation" and "padding". */
#include "text/tok_load.h"

#include <stdio.h>
#include <string.h>

/* ---- post-processors ------------------------------------------------------------ */
/* Append a template item: the sequence, or special ids. */
static int post_push(pt_tokenizer *t, bool is_seq, const int32_t *ids, size_t n)
{
    tk_post_item *it;
    int st = TK_APPEND(t->post, t->n_post, &it);
    if (st)
        return st;
    it->is_seq = is_seq;
    if (n) {
        it->ids = pt__malloc_array(n, sizeof *ids);
        if (!it->ids)
            return PT_ENOMEM;
        memcpy(it->ids, ids, n * sizeof *ids);
        it->n_ids = n;
    }
    return 0;
}

static int parse_template(pt_tokenizer *t, const cJSON *n, const char *path)
{
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(n, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(n, "special_tokens");
    if (!cJSON_IsArray(single))
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s.single: expected an array of template items", path);
    if (specials && !cJSON_IsNull(specials) && !cJSON_IsObject(specials))
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.special_tokens: expected an object", path);
    int i = 0, nseq = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        int st;
        if (cJSON_IsObject(sq)) {
            const cJSON *sid = cJSON_GetObjectItemCaseSensitive(sq, "id");
            if (!cJSON_IsString(sid) || strcmp(sid->valuestring, "A") != 0)
                return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s.single[%d].Sequence.id: only \"A\" is "
                              "supported in the single template", path, i);
            if ((st = post_push(t, true, NULL, 0)))
                return st;
            nseq++;
        } else if (cJSON_IsObject(sp)) {
            const cJSON *sid = cJSON_GetObjectItemCaseSensitive(sp, "id");
            if (!cJSON_IsString(sid))
                return pt__err(PT_EFORMAT, "tokenizer.json: %s.single[%d].SpecialToken.id: expected a string", path, i);
            const cJSON *def = specials ? cJSON_GetObjectItemCaseSensitive(specials, sid->valuestring) : NULL;
            const cJSON *ids = def ? cJSON_GetObjectItemCaseSensitive(def, "ids") : NULL;
            if (!cJSON_IsArray(ids))
                return pt__err(PT_EFORMAT, "tokenizer.json: %s.special_tokens: \"%s\" used in the template is "
                              "missing or has no ids array", path, sid->valuestring);
            int nid = cJSON_GetArraySize(ids);
            if (nid > 64)
                return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s.special_tokens.%s.ids: more than 64 ids", path,
                              sid->valuestring);
            int32_t buf[64];
            int k = 0;
            const cJSON *idv;
            cJSON_ArrayForEach(idv, ids) {
                char what[TK_PATH_MAX];
                snprintf(what, sizeof what, "%s.special_tokens.%s.ids[%d]", path, sid->valuestring, k);
                if ((st = tk_json_id(idv, &buf[k], what)))
                    return st;
                k++;
            }
            if ((st = post_push(t, false, buf, (size_t)k)))
                return st;
        } else {
            return pt__err(PT_EFORMAT, "tokenizer.json: %s.single[%d]: expected {\"SpecialToken\": ...} or "
                          "{\"Sequence\": ...}", path, i);
        }
        i++;
    }
    if (nseq != 1)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.single: the template must hold $A exactly once", path);
    return 0;
}

static int parse_pair_token(const cJSON *n, const char *key, int32_t *id, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(n, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.%s: expected [token, id]", path, key);
    char what[TK_PATH_MAX];
    snprintf(what, sizeof what, "%s.%s[1]", path, key);
    return tk_json_id(cJSON_GetArrayItem(v, 1), id, what);
}

int tk_parse_post(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = tk_component_begin(&ty, t, n, path, depth, "post-processors", "processors", tk_parse_post, arg);
    if (st || !ty)
        return st;
    int *templates = arg;
    if (strcmp(ty, "ByteLevel") == 0)
        return 0;  /* only changes offsets */
    if (*templates)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s: more than one template post-processor", path);
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
    return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: post-processor \"%s\" is not supported "
                  "(supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)",
                  path, ty);
}

int tk_check_post_ids(pt_tokenizer *t)
{
    if (t->has_pad && t->pad_id_json >= t->vocab_size)
        return pt__err(PT_EFORMAT, "tokenizer.json: padding.pad_id: id %d is not in the vocabulary", (int)t->pad_id_json);
    for (size_t i = 0; i < t->n_post; i++)
        for (size_t k = 0; k < t->post[i].n_ids; k++)
            if (t->post[i].ids[k] >= t->vocab_size || !t->id_str[t->post[i].ids[k]])
                return pt__err(PT_EFORMAT, "tokenizer.json: post_processor: special token id %d is not in the "
                              "vocabulary", (int)t->post[i].ids[k]);
    return 0;
}

/* ---- truncation and padding -------------------------------------------------------- */
/* "direction": "Right" (the default) or "Left". */
static int parse_direction(const cJSON *obj, bool *left, const char *path)
{
    static const pt_enum_entry directions[] = {{0, "Right"}, {1, "Left"}};
    int v = 0;
    int st = TK_JSON_ENUM(&v, obj, "direction", directions, path);
    *left = v == 1;
    return st;
}

/* "truncation" and "padding": kept, and applied only on request
 * (PT_TOK_TRUNCATE), since transformers ignores them when it loads a file. */
int tk_parse_trunc_pad(pt_tokenizer *t, const cJSON *root)
{
    int st;
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (tr && !cJSON_IsNull(tr)) {
        if (!cJSON_IsObject(tr))
            return pt__err(PT_EFORMAT, "tokenizer.json: truncation: expected an object or null");
        const cJSON *ml = cJSON_GetObjectItemCaseSensitive(tr, "max_length");
        if (!ml)
            return pt__err(PT_EFORMAT, "tokenizer.json: truncation.max_length: missing");
        if ((st = tk_json_size(tr, "max_length", &t->trunc_max, "truncation")) ||
            (st = parse_direction(tr, &t->trunc_left, "truncation")))
            return st;
        /* a single sequence: LongestFirst and OnlyFirst truncate it alike */
        static const pt_enum_entry strategies[] = {{0, "LongestFirst"}, {0, "OnlyFirst"}, {1, "OnlySecond"}};
        int only_second = 0;
        if ((st = TK_JSON_ENUM(&only_second, tr, "strategy", strategies, "truncation")))
            return st;
        t->trunc_only_second = only_second == 1;
        t->has_trunc = true;
    }
    const cJSON *pd = cJSON_GetObjectItemCaseSensitive(root, "padding");
    if (pd && !cJSON_IsNull(pd)) {
        if (!cJSON_IsObject(pd))
            return pt__err(PT_EFORMAT, "tokenizer.json: padding: expected an object or null");
        const cJSON *sg = cJSON_GetObjectItemCaseSensitive(pd, "strategy");
        if (cJSON_IsObject(sg)) {
            if ((st = tk_json_size(sg, "Fixed", &t->pad_fixed, "padding.strategy")))
                return st;
            if (!cJSON_GetObjectItemCaseSensitive(sg, "Fixed"))
                return pt__err(PT_EFORMAT, "tokenizer.json: padding.strategy: expected \"BatchLongest\" or {\"Fixed\": n}");
        } else if (!(cJSON_IsString(sg) && strcmp(sg->valuestring, "BatchLongest") == 0) && sg && !cJSON_IsNull(sg)) {
            return pt__err(PT_EFORMAT, "tokenizer.json: padding.strategy: expected \"BatchLongest\" or {\"Fixed\": n}");
        }
        if ((st = parse_direction(pd, &t->pad_left, "padding")) ||
            (st = tk_json_size(pd, "pad_to_multiple_of", &t->pad_multiple, "padding")))
            return st;
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(pd, "pad_id");
        t->pad_id_json = 0;
        if (pid && (st = tk_json_id(pid, &t->pad_id_json, "padding.pad_id")))
            return st;
        t->has_pad = true;
    }
    return 0;
}
