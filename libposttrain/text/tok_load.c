/* Loading a Hugging Face tokenizer.json into a pt_tokenizer: the document
 * and its order of parts, the id table, and freeing.  The parts are read in
 * tok_load_model.c, tok_load_added.c, tok_load_pipeline.c and
 * tok_load_post.c; every rejection names the JSON path of the offending
 * value. */
#include "text/tok_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the id table ------------------------------------------------------------------ */
static int build_ids(pt_tokenizer *t, int32_t max_id)
{
    size_t total = t->vocab.n + t->n_added;
    if (max_id >= 0 && (size_t)max_id > 4 * total + 1024)
        return pt__err(PT_ERANGE, "tokenizer.json: id %d is out of range for %zu tokens", (int)max_id, total);
    t->vocab_size = max_id + 1;
    size_t nv = (size_t)t->vocab_size;
    t->id_str = pt__calloc(nv + 1, sizeof *t->id_str);
    t->id_len = pt__calloc(nv + 1, sizeof *t->id_len);
    t->id_flags = pt__calloc(nv + 1, 1);
    if (!t->id_str || !t->id_len || !t->id_flags)
        return PT_ENOMEM;
    for (size_t i = 0; i < t->vocab.n; i++) {
        size_t len;
        const char *k = tk_strmap_key(&t->vocab, i, &len);
        int32_t id = t->vocab.ent[i].val;
        if (t->id_str[id]) {
            size_t l2 = t->id_len[id];
            return pt__err(PT_EFORMAT, "tokenizer.json: model.vocab: id %d is used by both \"%.*s\" and \"%.*s\"",
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

/* An optional pipeline component: absent or null is none. */
static int parse_component(pt_tokenizer *t, const cJSON *root, const char *key, tk_component_fn fn, void *arg)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (fn == tk_parse_decoder)
        t->has_decoder = true;
    return fn(t, v, key, 0, arg);
}

/* ---- the document ------------------------------------------------------------------- */
static int parse_document(pt_tokenizer *t, const cJSON *root)
{
    if (!cJSON_IsObject(root))
        return pt__err(PT_EFORMAT, "tokenizer.json: the document is not a JSON object");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model)
        return pt__err(PT_EFORMAT, "tokenizer.json: model: missing");
    int32_t max_id = -1;
    int templates = 0;
    int st;
    if ((st = tk_parse_trunc_pad(t, root)) || (st = tk_parse_model(t, model, &max_id)) ||
        (st = tk_parse_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &max_id)) ||
        (st = parse_component(t, root, "normalizer", tk_parse_normalizer, NULL)) ||
        (st = parse_component(t, root, "pre_tokenizer", tk_parse_pretok, NULL)) ||
        (st = parse_component(t, root, "post_processor", tk_parse_post, &templates)) ||
        (st = parse_component(t, root, "decoder", tk_parse_decoder, NULL)))
        return st;
    if (max_id < 0)
        return pt__err(PT_EFORMAT, "tokenizer.json: model.vocab: the vocabulary is empty");
    if ((st = build_ids(t, max_id)) || (st = tk_check_post_ids(t)))
        return st;
    return tk_build_tries(t);
}

int tk_load_json(pt_tokenizer *t, const char *json, size_t len)
{
    /* as the reference (Rust strings), the document must be UTF-8, so every
     * token string and therefore every decoded text is */
    size_t bad = pt__utf8_valid_prefix(json, len);
    if (bad < len)
        return pt__err(PT_EFORMAT, "tokenizer.json: not valid UTF-8 at byte %zu", bad);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t off = ep && ep >= json && ep <= json + len ? (size_t)(ep - json) : 0;
        return pt__err(PT_EFORMAT, "tokenizer.json: not valid JSON (near byte %zu)", off);
    }
    int st = parse_document(t, root);
    cJSON_Delete(root);
    return st;
}

/* ---- freeing ------------------------------------------------------------------------ */
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
