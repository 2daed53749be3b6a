/* gguf-py's SpecialVocab (vocab.py) over the model directory's
 * tokenizer.json, tokenizer_config.json and config.json: the merges, the
 * special token ids, the add_*_token flags, the chat template and the
 * normalizer flags, in the order add_to_gguf writes them. */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/fileio.h"
#include "io/path.h"
#include "modelio/gguf_export_internal.h"

#include <stdio.h>
#include <string.h>

#define SV_TYPES 9

/* A value of tokenizer_config.json as Python sees it: a string (s), or
 * some other truthy value (a dict), or nothing. */
typedef struct sv_val {
    const char *s;
    bool truthy;
} sv_val;

typedef struct sv {
    const char *types[SV_TYPES];      /* special_token_types, in order */
    size_t ntypes;
    const char *id_typ[SV_TYPES];     /* special_token_ids, insertion order */
    int64_t id_val[SV_TYPES];
    size_t nids;
    const char *add_typ[SV_TYPES];    /* add_special_token, insertion order */
    bool add_val[SV_TYPES];
    size_t nadd;
    /* tokenizer_config.json's <typ>_token entries the post-processor rewrote */
    const char *over_typ[SV_TYPES];
    sv_val over_val[SV_TYPES];
    size_t nover;
    int lowercase, strip_accents;     /* -1 unset */
    int64_t n_vocab;
} sv;

static sv_val json_val(const cJSON *v)
{
    sv_val r = { NULL, false };
    if (cJSON_IsString(v)) {
        r.s = v->valuestring;
        r.truthy = v->valuestring[0] != '\0';
    } else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        r.truthy = cJSON_GetArraySize(v) > 0;
    } else if (cJSON_IsNumber(v)) {
        r.truthy = v->valuedouble != 0;
    } else {
        r.truthy = cJSON_IsTrue(v);
    }
    return r;
}

/* tokenizer_config.json[<key>] with the post-processor's rewrites. */
static sv_val tc_get(const sv *v, const cJSON *tc, const char *key)
{
    for (size_t i = 0; i < v->nover; i++)
        if (!strcmp(v->over_typ[i], key))
            return v->over_val[i];
    return json_val(cJSON_GetObjectItemCaseSensitive(tc, key));
}

static void tc_set(sv *v, const char *key, const char *s)
{
    for (size_t i = 0; i < v->nover; i++)
        if (!strcmp(v->over_typ[i], key)) {
            v->over_val[i] = (sv_val){ s, s && *s };
            return;
        }
    if (v->nover < SV_TYPES) {
        v->over_typ[v->nover] = key;
        v->over_val[v->nover++] = (sv_val){ s, s && *s };
    }
}

static bool val_eq(sv_val a, const char *s)
{
    return a.s && s && !strcmp(a.s, s);
}

static void set_add(sv *v, const char *typ, bool val)
{
    for (size_t i = 0; i < v->nadd; i++)
        if (!strcmp(v->add_typ[i], typ)) {
            v->add_val[i] = val;
            return;
        }
    if (v->nadd < SV_TYPES) {
        v->add_typ[v->nadd] = typ;
        v->add_val[v->nadd++] = val;
    }
}

static void add_type(sv *v, const char *typ)
{
    if (v->ntypes < SV_TYPES)
        v->types[v->ntypes++] = typ;
}

static bool has_type(const sv *v, const char *typ)
{
    for (size_t i = 0; i < v->ntypes; i++)
        if (!strcmp(v->types[i], typ))
            return true;
    return false;
}

/* _set_special_token: ints only; a negative id is the converter's
 * ValueError; an id past n_vocab is skipped; the first one set stays. */
static int set_special(sv *v, const char *typ, const cJSON *tid)
{
    if (!cJSON_IsNumber(tid) || tid->valuedouble != (double)(int64_t)tid->valuedouble)
        return PT_OK;
    int64_t id = (int64_t)tid->valuedouble;
    if (id < 0)
        return pt__err(PT_EFORMAT, "pt_model_export_gguf: invalid value for special token type %s: %lld "
                      "(llama.cpp's converter refuses it too)", typ, (long long)id);
    if (v->n_vocab >= 0 && id >= v->n_vocab)
        return PT_OK;
    for (size_t i = 0; i < v->nids; i++)
        if (!strcmp(v->id_typ[i], typ))
            return PT_OK;
    if (v->nids < SV_TYPES) {
        v->id_typ[v->nids] = typ;
        v->id_val[v->nids++] = id;
    }
    return PT_OK;
}

static void parse_normalizer(sv *v, const cJSON *n)
{
    const char *t = gx_json_str(n, "type");
    if (!t)
        return;
    if (!strcmp(t, "Lowercase"))
        v->lowercase = 1;
    else if (!strcmp(t, "StripAccents"))
        v->strip_accents = 1;
    else if (!strcmp(t, "BertNormalizer")) {
        const cJSON *lc = cJSON_GetObjectItemCaseSensitive(n, "lowercase");
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(n, "strip_accents");
        if (lc)
            v->lowercase = cJSON_IsTrue(lc);
        if (sa && cJSON_IsBool(sa))
            v->strip_accents = cJSON_IsTrue(sa);
    } else if (!strcmp(t, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
            parse_normalizer(v, it);
    }
}

/* ---- the post-processor (crude TemplateProcessing parsing, as gguf-py) ---- */

static const char *special_id(const cJSON *item)
{
    return gx_json_str(cJSON_GetObjectItemCaseSensitive(item, "SpecialToken"), "id");
}

static const char *seq_id(const cJSON *item)
{
    return gx_json_str(cJSON_GetObjectItemCaseSensitive(item, "Sequence"), "id");
}

typedef struct sv_ctx {
    sv_val bos, cls, eos, sep;
    bool have_tc;
} sv_ctx;

static const char *template_first(sv *v, sv_ctx *x, const cJSON *single)
{
    const char *first = special_id(cJSON_GetArrayItem(single, 0));
    if (!first || !*first)
        return NULL;
    if (!x->have_tc) {
        x->bos = (sv_val){ first, true };
    } else if (!val_eq(x->bos, first) && !val_eq(x->cls, first)) {
        if (!x->bos.truthy) {
            tc_set(v, "bos_token", first);
            x->bos = (sv_val){ first, true };
        }
        if (!x->cls.truthy) {
            tc_set(v, "cls_token", first);
            x->cls = (sv_val){ first, true };
        }
    }
    set_add(v, "bos", val_eq(x->bos, first) || val_eq(x->cls, first));
    return first;
}

static const char *template_last(sv *v, sv_ctx *x, const cJSON *single)
{
    const char *last = special_id(cJSON_GetArrayItem(single, cJSON_GetArraySize(single) - 1));
    if (!last || !*last)
        return NULL;
    if (!x->have_tc) {
        x->eos = (sv_val){ last, true };
    } else if (!val_eq(x->eos, last)) {
        const char *keep = x->eos.s;
        if (!has_type(v, "eot")) {
            add_type(v, "eot");
            tc_set(v, "eot_token", keep);
        } else if (!has_type(v, "eom")) {
            add_type(v, "eom");
            tc_set(v, "eom_token", keep);
        }
        tc_set(v, "eos_token", last);
        x->eos = (sv_val){ last, true };
    }
    set_add(v, "eos", val_eq(x->eos, last));
    return last;
}

/* The pair template: whether a separator goes between A and B. */
static void template_pair(sv *v, const sv_ctx *x, const cJSON *pair, const char *first, const char *last)
{
    int np = cJSON_GetArraySize(pair);
    if (np == 0)
        return;
    int start = first && val_eq((sv_val){ special_id(cJSON_GetArrayItem(pair, 0)), true }, first) ? 1 : 0;
    int stop = last && val_eq((sv_val){ special_id(cJSON_GetArrayItem(pair, np - 1)), true }, last) ? np - 1 : np;
    if (stop - start <= 0)
        return;
    const char *a = seq_id(cJSON_GetArrayItem(pair, start)), *b = seq_id(cJSON_GetArrayItem(pair, stop - 1));
    if (!a || !b || strcmp(a, "A") || strcmp(b, "B") || stop - start - 2 <= 0)
        return;
    int mid = stop - start - 2;
    bool add_sep = false;
    const char *e = special_id(cJSON_GetArrayItem(pair, start + 1));
    if (e && *e && (val_eq(x->sep, e) || val_eq(x->eos, e)) && !last)
        add_sep = true;
    if (mid == 2) {
        e = special_id(cJSON_GetArrayItem(pair, start + 2));
        if (e && *e && (val_eq(x->sep, e) || val_eq(x->eos, e)))
            add_sep = true;
    }
    set_add(v, "sep", add_sep);
    if (add_sep && !x->sep.truthy && x->have_tc)
        tc_set(v, "sep_token", x->eos.s);
}

static void post_processor(sv *v, sv_ctx *x, const cJSON *pp)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors"), *it;
    bool one = !cJSON_IsArray(list);
    for (it = one ? pp : list->child; it; it = one ? NULL : it->next) {
        const char *t = gx_json_str(it, "type");
        if (t && !strcmp(t, "RobertaProcessing")) {
            set_add(v, "bos", true);
            set_add(v, "eos", true);
            set_add(v, "sep", true);
        } else if (t && !strcmp(t, "TemplateProcessing")) {
            const cJSON *single = cJSON_GetObjectItemCaseSensitive(it, "single");
            const char *first = NULL, *last = NULL;
            if (cJSON_GetArraySize(single) > 1) {
                first = template_first(v, x, single);
                last = template_last(v, x, single);
            }
            template_pair(v, x, cJSON_GetObjectItemCaseSensitive(it, "pair"), first, last);
        }
    }
}

/* _try_load_from_tokenizer_json up to the post-processor. */
static void from_tokenizer_json(sv *v, sv_ctx *x, const cJSON *tj, const cJSON *tc)
{
    x->have_tc = cJSON_IsObject(tc) && tc->child;
    x->bos = tc_get(v, tc, "bos_token");
    x->cls = tc_get(v, tc, "cls_token");
    x->eos = tc_get(v, tc, "eos_token");
    x->sep = tc_get(v, tc, "sep_token");
    if (!x->bos.truthy && x->cls.truthy && x->have_tc) {
        tc_set(v, "bos_token", x->cls.s);
        x->bos = x->cls;
    }
    if (!x->eos.truthy && x->sep.truthy && x->have_tc) {
        tc_set(v, "eos_token", x->sep.s);
        x->eos = x->sep;
    }
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tj, "post_processor");
    if (cJSON_IsObject(pp) && pp->child)
        post_processor(v, x, pp);
}

/* The first added token of tokenizer.json whose content is s. */
static const cJSON *added_id(const cJSON *tj, const char *s)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
        const char *content = gx_json_str(it, "content");
        if (content && !strcmp(content, s))
            return cJSON_GetObjectItemCaseSensitive(it, "id");
    }
    return NULL;
}

/* The special token entries and add_<typ>_token flags of tokenizer_config.json. */
static int from_tokenizer_config(sv *v, const cJSON *tj, const cJSON *tc)
{
    int st = PT_OK;
    for (size_t i = 0; i < v->ntypes && !st; i++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", v->types[i]);
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(tc, key);
        if (cJSON_IsBool(add))
            set_add(v, v->types[i], cJSON_IsTrue(add));
        snprintf(key, sizeof key, "%s_token", v->types[i]);
        sv_val e = tc_get(v, tc, key);
        const cJSON *raw = cJSON_GetObjectItemCaseSensitive(tc, key);
        const char *content = e.s;
        bool overridden = false;
        for (size_t k = 0; k < v->nover; k++)
            overridden |= !strcmp(v->over_typ[k], key);
        if (!content && !overridden && cJSON_IsObject(raw))
            content = gx_json_str(raw, "content");
        if (content)
            st = set_special(v, v->types[i], added_id(tj, content));
    }
    return st;
}

static int from_config_json(sv *v, const cJSON *hp)
{
    int st = PT_OK;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(hp, "text_config");
    for (size_t i = 0; i < v->ntypes && !st; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", v->types[i]);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(hp, key);
        if ((!id || cJSON_IsNull(id)) && cJSON_IsObject(text))
            id = cJSON_GetObjectItemCaseSensitive(text, key);
        st = set_special(v, v->types[i], id);
    }
    return st;
}

/* ---- writing ---------------------------------------------------------------- */

/* The merges as gguf-py writes them: "a b" strings as they are, [a, b]
 * pairs joined by a space after each space inside a part became U+0120. */
static int add_merges(gx_ctx *c)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->tok_json, "model"), "merges");
    size_t n = (size_t)cJSON_GetArraySize(merges), i = 0;
    if (!cJSON_IsArray(merges) || n == 0)
        return PT_OK;
    char **s = pt__calloc(n, sizeof *s);
    int st = s ? PT_OK : PT_ENOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        if (st)
            break;
        pt_strbuf b = { 0 };
        if (cJSON_IsString(it))
            pt__strbuf_puts(&b, it->valuestring);
        for (int k = 0; cJSON_IsArray(it) && k < 2; k++) {
            const char *part = cJSON_GetStringValue(cJSON_GetArrayItem(it, k));
            if (k)
                pt__strbuf_putc(&b, ' ');
            for (const char *p = part ? part : ""; *p; p++)
                p[0] == ' ' ? pt__strbuf_puts(&b, "\xc4\xa0") : pt__strbuf_putc(&b, *p);
        }
        if (!(s[i++] = pt__strbuf_detach(&b, NULL)))
            st = PT_ENOMEM;
    }
    if (!st)
        st = pt__gguf_set_arr_str(c->w, "tokenizer.ggml.merges", (const char *const *)s, NULL, n);
    for (size_t k = 0; s && k < n; k++)
        pt_free(s[k]);
    pt_free(s);
    return st;
}

static const char *id_key(const char *typ)
{
    static const char *const map[][2] = {
        { "bos", "tokenizer.ggml.bos_token_id" }, { "eos", "tokenizer.ggml.eos_token_id" },
        { "unk", "tokenizer.ggml.unknown_token_id" }, { "sep", "tokenizer.ggml.seperator_token_id" },
        { "pad", "tokenizer.ggml.padding_token_id" }, { "mask", "tokenizer.ggml.mask_token_id" },
        { "eot", "tokenizer.ggml.eot_token_id" }, { "eom", "tokenizer.ggml.eom_token_id" },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], typ))
            return map[i][1];
    return NULL;   /* cls: gguf-py has no handler and skips it */
}

static const char *add_key(const char *typ)
{
    return !strcmp(typ, "bos") ? "tokenizer.ggml.add_bos_token"
           : !strcmp(typ, "eos") ? "tokenizer.ggml.add_eos_token"
           : !strcmp(typ, "sep") ? "tokenizer.ggml.add_sep_token" : NULL;
}

/* The list form: tokenizer.chat_template.<name> for each named entry (the
 * name's characters other than ASCII letters and digits made '_'), the
 * names as tokenizer.chat_templates (in list order: gguf-py's comes from a
 * set, whose order varies from run to run), then the "default" entry. */
static int add_named_templates(gx_ctx *c, const cJSON *ct)
{
    const cJSON *it, *def = NULL;
    const char *names[64];
    char keys[64][256];
    size_t n = 0;
    int st = PT_OK;
    cJSON_ArrayForEach(it, ct) {
        const char *name = gx_json_str(it, "name"), *tmpl = gx_json_str(it, "template");
        if (!name || !*name || !tmpl)
            continue;
        if (!strcmp(name, "default")) {
            def = it;
            continue;
        }
        if (n == 64)
            break;
        snprintf(keys[n], sizeof keys[n], "tokenizer.chat_template.%s", name);
        for (char *k = keys[n] + 24; *k; k++)
            if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9')))
                *k = '_';
        names[n] = keys[n] + 24;
        if (!st && *tmpl)
            st = pt__gguf_set_str(c->w, keys[n], tmpl);
        n++;
    }
    if (!st && n)
        st = pt__gguf_set_arr_str(c->w, "tokenizer.chat_templates", names, NULL, n);
    const char *dt = def ? gx_json_str(def, "template") : NULL;
    return st || !dt || !*dt ? st : pt__gguf_set_str(c->w, "tokenizer.chat_template", dt);
}

/* chat_template of tokenizer_config.json, else chat_template.jinja, else
 * chat_template.json's; a list form writes its named entries first. */
static int add_chat_template(gx_ctx *c)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(c->tok_cfg, "chat_template");
    char *alt = NULL;
    int st = PT_OK;
    if (!ct && c->src_dir) {
        char *p = pt__path_join(c->src_dir, "chat_template.jinja");
        size_t len;
        if (p && pt__is_file(p))
            st = pt__read_file(&alt, &len, p, (size_t)1 << 26);
        pt_free(p);
    }
    if (cJSON_IsString(ct) || alt) {
        const char *s = alt ? alt : ct->valuestring;
        st = st || !*s ? st : pt__gguf_set_str(c->w, "tokenizer.chat_template", s);
    } else if (cJSON_IsArray(ct)) {
        st = add_named_templates(c, ct);
    }
    pt_free(alt);
    return st;
}

static int write_sv(gx_ctx *c, const sv *v, bool load_merges)
{
    int st = load_merges ? add_merges(c) : PT_OK;
    for (size_t i = 0; i < v->nids && !st; i++)
        if (id_key(v->id_typ[i]))
            st = pt__gguf_set_u32(c->w, id_key(v->id_typ[i]), (uint32_t)v->id_val[i]);
    for (size_t i = 0; i < v->nadd && !st; i++)
        if (add_key(v->add_typ[i]))
            st = pt__gguf_set_bool(c->w, add_key(v->add_typ[i]), v->add_val[i]);
    if (!st && cJSON_IsObject(c->tok_cfg) && c->tok_cfg->child)
        st = add_chat_template(c);
    if (!st && v->lowercase >= 0)
        st = pt__gguf_set_bool(c->w, "tokenizer.ggml.normalizer.lowercase", v->lowercase);
    if (!st && v->strip_accents >= 0)
        st = pt__gguf_set_bool(c->w, "tokenizer.ggml.normalizer.strip_accents", v->strip_accents);
    return st;
}

int gx_add_special(gx_ctx *c, bool load_merges, int64_t n_vocab)
{
    sv v = { .ntypes = 0, .lowercase = -1, .strip_accents = -1, .n_vocab = n_vocab };
    static const char *const types[] = { "bos", "eos", "unk", "sep", "pad", "cls", "mask" };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        add_type(&v, types[i]);
    sv_ctx x = { 0 };
    if (c->tok_json) {
        parse_normalizer(&v, cJSON_GetObjectItemCaseSensitive(c->tok_json, "normalizer"));
        from_tokenizer_json(&v, &x, c->tok_json, c->tok_cfg);
    }
    int st = PT_OK;
    if (cJSON_IsObject(c->tok_cfg) && c->tok_cfg->child)
        st = from_tokenizer_config(&v, c->tok_json, c->tok_cfg);
    if (!st)
        st = from_config_json(&v, c->hparams);
    return st ? st : write_sv(c, &v, load_merges);
}
