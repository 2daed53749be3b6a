/* Loading the "model" of a tokenizer.json: a BPE model's options, its
 * vocabulary and its merges. */
#include "text/tok_load.h"

#include <stdio.h>
#include <string.h>

/* The type and the options that must be off (dropout, subword prefix and
 * suffix), then the flags. */
static int parse_options(pt_tokenizer *t, const cJSON *m)
{
    const char *ty = tk_json_type(m);
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (ty && strcmp(ty, "BPE") != 0)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: model.type: model \"%s\" is not supported (only BPE)", ty);
    if (!ty && !merges)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: model.type: missing, and the model has no merges (only BPE "
                      "is supported)");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: model.dropout: BPE dropout is not supported (must be null)");
    const pt_json_ctx c = TK_JSON_CTX("model");
    const char *csp, *eows;
    int st;
    if ((st = pt__json_get_string(&csp, m, &c, "continuing_subword_prefix", false)) ||
        (st = pt__json_get_string(&eows, m, &c, "end_of_word_suffix", false)))
        return st;
    if (csp && *csp)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: model.continuing_subword_prefix: \"%s\" is not supported "
                      "(must be null)", csp);
    if (eows && *eows)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: model.end_of_word_suffix: \"%s\" is not supported "
                      "(must be null)", eows);
    if ((st = pt__json_get_bool(&t->fuse_unk, NULL, m, &c, "fuse_unk", false)) ||
        (st = pt__json_get_bool(&t->byte_fallback, NULL, m, &c, "byte_fallback", false)))
        return st;
    return pt__json_get_bool(&t->ignore_merges, NULL, m, &c, "ignore_merges", false);
}

/* "vocab" (token -> id) and "unk_token". */
static int parse_vocab(pt_tokenizer *t, const cJSON *m, int32_t *max_id)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    if (!cJSON_IsObject(vocab))
        return pt__err(PT_EFORMAT, "tokenizer.json: model.vocab: expected an object of token -> id");
    const cJSON *it;
    int st;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = 0;
        char what[TK_PATH_MAX];
        snprintf(what, sizeof what, "model.vocab[\"%.64s\"]", it->string ? it->string : "");
        if ((st = tk_json_id(it, &id, what)))
            return st;
        st = tk_strmap_put(&t->vocab, it->string, strlen(it->string), id);
        if (st < 0)
            return st;
        if (st == 1)
            return pt__err(PT_EFORMAT, "tokenizer.json: %s: duplicate token", what);
        if (id > *max_id)
            *max_id = id;
    }
    const char *unk;
    const pt_json_ctx c = TK_JSON_CTX("model");
    if ((st = pt__json_get_string(&unk, m, &c, "unk_token", false)))
        return st;
    t->unk_id = -1;
    if (unk) {
        t->unk_id = tk_strmap_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0)
            return pt__err(PT_EFORMAT, "tokenizer.json: model.unk_token: \"%s\" is not in the vocabulary", unk);
    }
    return 0;
}

/* The two tokens of merge `rank`: "a b" or ["a", "b"]. */
static int merge_pair(const cJSON *it, uint32_t rank, const char **a, size_t *na, const char **b, size_t *nb)
{
    if (cJSON_IsString(it)) {
        const char *s = it->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return pt__err(PT_EFORMAT, "tokenizer.json: model.merges[%u]: \"%.64s\" is not two tokens "
                          "separated by one space", rank, s);
        *a = s;
        *na = (size_t)(sp - s);
        *b = sp + 1;
        *nb = strlen(*b);
        return 0;
    }
    if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
        cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
        *a = cJSON_GetArrayItem(it, 0)->valuestring;
        *b = cJSON_GetArrayItem(it, 1)->valuestring;
        *na = strlen(*a);
        *nb = strlen(*b);
        return 0;
    }
    return pt__err(PT_EFORMAT, "tokenizer.json: model.merges[%u]: expected \"a b\" or [\"a\", \"b\"]", rank);
}

/* Record merge `rank` of tokens a and b (cat: scratch for a + b). */
static int add_merge(pt_tokenizer *t, uint32_t rank, const char *a, size_t na, const char *b, size_t nb,
                     pt_strbuf *cat)
{
    int32_t ia = tk_strmap_get(&t->vocab, a, na), ib = tk_strmap_get(&t->vocab, b, nb);
    pt__strbuf_clear(cat);
    pt__strbuf_put(cat, a, na);
    int st = pt__strbuf_put(cat, b, nb);
    if (st)
        return st;
    int32_t ic = tk_strmap_get(&t->vocab, cat->p, cat->len);
    if (ia < 0 || ib < 0 || ic < 0) {
        const char *bad = ia < 0 ? a : ib < 0 ? b : cat->p;
        int len = (int)(ia < 0 ? na : ib < 0 ? nb : cat->len);
        return pt__err(PT_EFORMAT, "tokenizer.json: model.merges[%u]: token \"%.*s\" is not in the vocabulary",
                      rank, len > 64 ? 64 : len, bad);
    }
    tk_pairmap_put(&t->merges, ia, ib, rank, ic);
    t->merge_newid[rank] = ic;
    return 0;
}

static int parse_merges(pt_tokenizer *t, const cJSON *m)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
        return pt__err(PT_EFORMAT, "tokenizer.json: model.merges: expected an array");
    int nm = merges ? cJSON_GetArraySize(merges) : 0;
    int st = tk_pairmap_init(&t->merges, (size_t)nm);
    if (st)
        return st;
    t->merge_newid = pt__malloc_array((size_t)nm + 1, sizeof *t->merge_newid);
    if (!t->merge_newid)
        return PT_ENOMEM;
    pt_strbuf cat = PT_STRBUF_INIT;
    uint32_t rank = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((st = merge_pair(it, rank, &a, &na, &b, &nb)) || (st = add_merge(t, rank, a, na, b, nb, &cat)))
            break;
        rank++;
    }
    pt__strbuf_free(&cat);
    t->n_merges = rank;
    return st;
}

int tk_parse_model(pt_tokenizer *t, const cJSON *m, int32_t *max_id)
{
    if (!cJSON_IsObject(m))
        return pt__err(PT_EFORMAT, "tokenizer.json: model: expected an object");
    int st = parse_options(t, m);
    if (st == 0)
        st = parse_vocab(t, m, max_id);
    return st ? st : parse_merges(t, m);
}
