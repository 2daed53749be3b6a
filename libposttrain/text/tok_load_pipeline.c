/* Loading the text pipeline of a tokenizer.json: "normalizer",
 * "pre_tokenizer" and "decoder", each a component or a Sequence of them. */
#include "text/tok_load.h"

#include <stdio.h>
#include <string.h>

/* ---- normalizers --------------------------------------------------------------- */
static const pt_enum_entry NORMALIZERS[] = {
    {TKN_NFC, "NFC"},   {TKN_NFD, "NFD"},             {TKN_NFKC, "NFKC"},
    {TKN_NFKD, "NFKD"}, {TKN_LOWERCASE, "Lowercase"}, {TKN_STRIP_ACCENTS, "StripAccents"},
    {TKN_PREPEND, "Prepend"}, {TKN_REPLACE, "Replace"}, {TKN_STRIP, "Strip"},
};

int tk_parse_normalizer(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = tk_component_begin(&ty, t, n, path, depth, "normalizers", "normalizers", tk_parse_normalizer, arg);
    if (st || !ty)
        return st;
    int kind = TK_NAME_VALUE(NORMALIZERS, ty);
    if (kind < 0)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: normalizer \"%s\" is not supported "
                      "(supported: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, Sequence)",
                      path, ty);
    tk_norm *x;
    if ((st = TK_APPEND(t->norm, t->n_norm, &x)))
        return st;
    x->kind = (tk_norm_kind)kind;
    switch (x->kind) {
    case TKN_PREPEND:
        return tk_json_dup_str(n, "prepend", &x->str, &x->str_len, path);
    case TKN_REPLACE:
        return tk_json_replace(n, &x->str, &x->str_len, &x->re, path);
    case TKN_STRIP:
        x->left = x->right = true;
        if ((st = pt__json_get_bool(&x->left, NULL, n, &TK_JSON_CTX(path), "strip_left", false)))
            return st;
        return pt__json_get_bool(&x->right, NULL, n, &TK_JSON_CTX(path), "strip_right", false);
    default:
        return 0;
    }
}

/* ---- pre-tokenizers ------------------------------------------------------------ */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pre(pt_tokenizer *t, tk_pretok **slot, tk_pretok_kind kind)
{
    if (t->n_pre >= 32)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: pre_tokenizer: more than 32 stages");
    int st = TK_APPEND(t->pre, t->n_pre, slot);
    if (st == 0)
        (*slot)->kind = kind;
    return st;
}

/* Split's "behavior": required unless it has a default (dflt >= 0). */
static int parse_behavior(const cJSON *n, tk_behavior *b, const char *path, int dflt)
{
    static const pt_enum_entry behaviors[] = {
        {TKB_REMOVED, "Removed"},
        {TKB_ISOLATED, "Isolated"},
        {TKB_MERGED_PREV, "MergedWithPrevious"},
        {TKB_MERGED_NEXT, "MergedWithNext"},
        {TKB_CONTIGUOUS, "Contiguous"},
    };
    int v = dflt;
    int st = TK_JSON_ENUM(&v, n, "behavior", behaviors, path);
    if (st)
        return st;
    if (v < 0)
        return pt__err(PT_EFORMAT, "tokenizer.json: %s.behavior: missing", path);
    *b = (tk_behavior)v;
    return 0;
}

/* Metaspace's prepend_scheme (pre-tokenizer and decoder); older files say
 * add_prefix_space instead. */
static int parse_prepend_scheme(const cJSON *n, tk_prepend_scheme *sc, const char *path)
{
    static const pt_enum_entry schemes[] = {
        {TK_PREPEND_ALWAYS, "always"}, {TK_PREPEND_FIRST, "first"}, {TK_PREPEND_NEVER, "never"},
    };
    int v = -1;
    int st = TK_JSON_ENUM(&v, n, "prepend_scheme", schemes, path);
    if (st)
        return st;
    if (v >= 0) {
        *sc = (tk_prepend_scheme)v;
        return 0;
    }
    bool aps = true;
    if ((st = pt__json_get_bool(&aps, NULL, n, &TK_JSON_CTX(path), "add_prefix_space", false)))
        return st;
    *sc = aps ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    return 0;
}

static int parse_bytelevel(pt_tokenizer *t, const cJSON *n, const char *path)
{
    tk_pretok *x;
    int st = add_pre(t, &x, TKP_BYTELEVEL);
    if (st)
        return st;
    x->add_prefix_space = true;
    x->use_regex = true;
    if ((st = pt__json_get_bool(&x->add_prefix_space, NULL, n, &TK_JSON_CTX(path), "add_prefix_space", false)) ||
        (st = pt__json_get_bool(&x->use_regex, NULL, n, &TK_JSON_CTX(path), "use_regex", false)))
        return st;
    if (!x->use_regex)
        return 0;
    char sub[TK_PATH_MAX];
    snprintf(sub, sizeof sub, "%s (GPT-2 pattern)", path);
    x->behavior = TKB_ISOLATED;
    return tk_regex_compile(&x->re, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, sub);
}

static int parse_metaspace(pt_tokenizer *t, const cJSON *n, const char *path)
{
    tk_pretok *x;
    int st = add_pre(t, &x, TKP_METASPACE);
    if (st)
        return st;
    x->split = true;
    if ((st = tk_json_char(n, "replacement", x->repl, &x->repl_len, NULL, path, "\xE2\x96\x81")) ||
        (st = parse_prepend_scheme(n, &x->scheme, path)) ||
        (st = pt__json_get_bool(&x->split, NULL, n, &TK_JSON_CTX(path), "split", false)))
        return st;
    if (x->split)
        return tk_regex_compile(&x->re, x->repl, x->repl_len, true, path);
    return 0;
}

/* Split, and the simple splitters expressed as Split with a fixed pattern;
 * 1 when ty is none of them. */
static int parse_split(pt_tokenizer *t, const cJSON *n, const char *path, const char *ty)
{
    const char *pat = NULL;
    tk_behavior beh = TKB_ISOLATED;
    bool inv = false, individual = false;
    int st = 0;
    if (strcmp(ty, "Split") == 0) {
        if ((st = parse_behavior(n, &beh, path, -1)) ||
            (st = pt__json_get_bool(&inv, NULL, n, &TK_JSON_CTX(path), "invert", false)))
            return st;
    } else if (strcmp(ty, "Whitespace") == 0) {
        pat = "\\w+|[^\\w\\s]+";
        beh = TKB_REMOVED;
        inv = true;
    } else if (strcmp(ty, "WhitespaceSplit") == 0) {
        pat = "\\s+";
        beh = TKB_REMOVED;
    } else if (strcmp(ty, "Digits") == 0) {
        if ((st = pt__json_get_bool(&individual, NULL, n, &TK_JSON_CTX(path), "individual_digits", false)))
            return st;
        pat = "\\p{N}";
        beh = individual ? TKB_ISOLATED : TKB_CONTIGUOUS;
    } else if (strcmp(ty, "Punctuation") == 0) {
        pat = "[\\p{P}[:punct:]]";
        if ((st = parse_behavior(n, &beh, path, TKB_ISOLATED)))
            return st;
    } else {
        return 1;
    }
    tk_pretok *x;
    if ((st = add_pre(t, &x, TKP_SPLIT)))
        return st;
    x->behavior = beh;
    x->invert = inv;
    if (!pat)
        return tk_json_pattern(n, &x->re, path);
    return tk_regex_compile(&x->re, pat, strlen(pat), false, path);
}

int tk_parse_pretok(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = tk_component_begin(&ty, t, n, path, depth, "pre-tokenizers", "pretokenizers", tk_parse_pretok, arg);
    if (st || !ty)
        return st;
    if (strcmp(ty, "ByteLevel") == 0)
        return parse_bytelevel(t, n, path);
    if (strcmp(ty, "Metaspace") == 0)
        return parse_metaspace(t, n, path);
    st = parse_split(t, n, path, ty);
    if (st != 1)
        return st;
    return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: pre-tokenizer \"%s\" is not supported "
                  "(supported: ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits, "
                  "Punctuation, Sequence)", path, ty);
}

/* ---- decoders ---------------------------------------------------------------------- */
static const pt_enum_entry DECODERS[] = {
    {TKD_BYTELEVEL, "ByteLevel"}, {TKD_BYTEFALLBACK, "ByteFallback"}, {TKD_FUSE, "Fuse"},
    {TKD_REPLACE, "Replace"},     {TKD_STRIP, "Strip"},               {TKD_METASPACE, "Metaspace"},
};

int tk_parse_decoder(pt_tokenizer *t, const cJSON *n, const char *path, int depth, void *arg)
{
    const char *ty;
    int st = tk_component_begin(&ty, t, n, path, depth, "decoders", "decoders", tk_parse_decoder, arg);
    if (st || !ty)
        return st;
    int kind = TK_NAME_VALUE(DECODERS, ty);
    if (kind < 0)
        return pt__err(PT_EUNSUPPORTED, "tokenizer.json: %s.type: decoder \"%s\" is not supported "
                      "(supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)", path, ty);
    tk_dec *x;
    if ((st = TK_APPEND(t->dec, t->n_dec, &x)))
        return st;
    x->kind = (tk_dec_kind)kind;
    char c[8];
    tk_prepend_scheme sc;
    switch (x->kind) {
    case TKD_REPLACE:
        return tk_json_replace(n, &x->content, &x->content_len, &x->re, path);
    case TKD_STRIP:
        if ((st = tk_json_char(n, "content", c, NULL, &x->strip_cp, path, NULL)) ||
            (st = tk_json_size(n, "start", &x->strip_start, path)))
            return st;
        return tk_json_size(n, "stop", &x->strip_stop, path);
    case TKD_METASPACE:
        if ((st = tk_json_char(n, "replacement", x->repl, &x->repl_len, NULL, path, "\xE2\x96\x81")) ||
            (st = parse_prepend_scheme(n, &sc, path)))
            return st;
        x->prefix = sc != TK_PREPEND_NEVER;
        return 0;
    default:
        return 0;
    }
}
