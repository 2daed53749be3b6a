/* The token list of a GGUF export (gguf_export_internal.h), as the
 * converter's set_vocab writes it:
 *
 * - byte-level BPE ("gpt2", TextModel._set_vocab_gpt2 / get_vocab_base):
 *   one token per id below config.json's vocab_size ("[PAD<i>]", type
 *   UNUSED, for ids the tokenizer lacks), added tokens CONTROL when
 *   special or when they look special (<|...|>), else USER_DEFINED with
 *   U+2581 turned into spaces, the rest NORMAL; tokenizer.ggml.pre from the
 *   hash of the ids of a fixed text (get_vocab_base_pre);
 * - SentencePiece-style BPE with byte fallback ("llama", gguf-py's
 *   LlamaHfVocab, taken by llama-type models whose tokenizer.json is BPE
 *   with byte_fallback and a Sequence decoder): the model vocabulary then
 *   the added tokens past it, every score -1000 (or, with spm_scores
 *   "merges", minus the merge rank of the piece), <0xNN> tokens BYTE, the
 *   tokenizer's special tokens (bos/eos/unk/pad/... and
 *   additional_special_tokens of tokenizer_config.json) CONTROL. */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/path.h"
#include "io/sha256.h"
#include "modelio/gguf_export_internal.h"
#include "modelio/gguf_internal.h"
#include "text/tok_export.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The converter's chktxt (get_vocab_base_pre), as UTF-8. */
static const char k_chktxt[] =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\360\237\232\200 (normal) \360\237\230"
    "\266\342\200\215\360\237\214\253\357\270\217 (multiple emojis concatenated) \342\234\205"
    " \360\237\246\231\360\237\246\231 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3"
    " 3...3 \341\236\200\341\236\266\341\236\223\341\237\213\341\236\217\341\237\202\341\236"
    "\226\341\236\267\341\236\237\341\237\201\341\236\237\341\236\242\341\236\266\341\236\205"
    "\360\237\230\201 ?\346\210\221\346\203\263\345\234\250apple\345\267\245\344\275\234131"
    "4151\345\244\251\357\275\236 ------======= \320\275\320\265\321\211\320\276 \320\275\320"
    "\260 \320\221\321\212\320\273\320\263\320\260\321\200\321\201\320\272\320\270 ''''''``"
    "`````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure "
    "I'll make it, 'D you like some tea? We'Ve a'lL";

/* The hashes of get_vocab_base_pre's table this exporter names (the
 * tokenizers of the architectures it writes). */
static const struct { const char *hash, *name; } k_pre[] = {
    { "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5", "llama-bpe" },   /* Meta-Llama-3-8B */
    { "c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d", "smaug-bpe" },   /* Smaug-Llama-3-70B */
    { "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2" },       /* Qwen1.5-7B */
    { "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c", "qwen2" },       /* Qwen3-Embedding-0.6B */
    { "b3f499bb4255f8ca19fccd664443283318f2fd2414d5e0b040fbdd0cc195d6c5", "deepseek-r1-qwen" },
    { "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249", "smollm" },      /* SmolLM-135M */
    { "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2" },       /* openai-community/gpt2 */
    { "0fe1cf6eda062318a1af7270f3331a85c539a01778ff948e24388e949c5282f4", "gpt-2" },       /* ruGPT3XL */
    { "63b97e4253352e6f357cc59ea5b583e3a680eaeaf2632188c2b952de2588485e", "tekken" },      /* Mistral-Nemo */
    { "d353350c764d8c3b39c763113960e4fb4919bea5fbf208a0e3b22e8469dc7406", "llama4" },
};

/* Python's str() of a list of ints: "[1, 2, 3]". */
static char *ids_repr(const int32_t *ids, size_t n)
{
    pt_strbuf b = { 0 };
    pt__strbuf_putc(&b, '[');
    for (size_t i = 0; i < n; i++)
        pt__strbuf_printf(&b, i ? ", %d" : "%d", (int)ids[i]);
    pt__strbuf_putc(&b, ']');
    return pt__strbuf_detach(&b, NULL);
}

const char *gx_pre_name(const pt_tokenizer *tok, char hash[65], int *status)
{
    int32_t *ids = NULL;
    size_t n = 0;
    hash[0] = '\0';
    *status = pt_tokenizer_encode(&ids, &n, tok, k_chktxt, sizeof k_chktxt - 1, PT_TOK_ADD_SPECIAL);
    if (*status)
        return NULL;
    char *repr = ids_repr(ids, n);
    pt_free(ids);
    if (!repr) {
        *status = PT_ENOMEM;
        return NULL;
    }
    uint8_t d[32];
    pt__sha256(repr, strlen(repr), d);
    pt_free(repr);
    pt__sha256_hex(d, hash);
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (strcmp(hash, k_pre[i].hash) == 0)
            return k_pre[i].name;
    *status = pt__err(PT_EUNSUPPORTED, "pt_model_export_gguf: the tokenizer's pre-tokenizer is not one "
                     "llama.cpp's converter recognises (chkhsh %s; known: llama-bpe, qwen2, smollm, "
                     "gpt-2, ...)", hash);
    return NULL;
}

/* ---- the token list ------------------------------------------------------- */

typedef struct gx_toks {
    char **str;
    int32_t *type;
    size_t n;
} gx_toks;

static void toks_free(gx_toks *t)
{
    for (size_t i = 0; t->str && i < t->n; i++)
        pt_free(t->str[i]);
    pt_free(t->str);
    pt_free(t->type);
}

static int toks_alloc(gx_toks *t, size_t n)
{
    t->n = n;
    t->str = pt__calloc(n ? n : 1, sizeof *t->str);
    t->type = pt__calloc(n ? n : 1, sizeof *t->type);
    return t->str && t->type ? PT_OK : PT_ENOMEM;
}

/* does_token_look_special */
static bool looks_special(const char *s)
{
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]"))
        return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>"))
        return true;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>"))
        return true;
    return n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>';
}

/* s with every U+2581 replaced by a space. */
static char *spaces_for_metaspace(const char *s)
{
    pt_strbuf b = { 0 };
    for (const char *p = s; *p;) {
        if (!strncmp(p, "\xe2\x96\x81", 3)) {
            pt__strbuf_putc(&b, ' ');
            p += 3;
        } else {
            pt__strbuf_putc(&b, *p++);
        }
    }
    char *r = pt__strbuf_detach(&b, NULL);
    return r ? r : pt__strdup("");
}

/* The vocab_size the token list has: config.json's, else the tokenizer's. */
static int64_t hparams_vocab(const gx_ctx *c)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->hparams, "vocab_size");
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : pt_tokenizer_vocab_size(c->tok);
}

static int gpt2_token(gx_toks *t, const pt_tokenizer *tok, int32_t i)
{
    const char *s = pt_tokenizer_id_to_token(tok, i);
    char pad[32];
    if (!s) {
        snprintf(pad, sizeof pad, "[PAD%d]", (int)i);
        t->type[i] = TT_UNUSED;
        t->str[i] = pt__strdup(pad);
    } else if (!pt_tokenizer_is_added(tok, i)) {
        t->type[i] = TT_NORMAL;
        t->str[i] = pt__strdup(s);
    } else if (pt_tokenizer_is_special(tok, i) || looks_special(s)) {
        t->type[i] = TT_CONTROL;
        t->str[i] = pt__strdup(s);
    } else {
        t->type[i] = TT_USER_DEFINED;
        t->str[i] = spaces_for_metaspace(s);
    }
    return t->str[i] ? PT_OK : PT_ENOMEM;
}

static int write_list(gx_ctx *c, const char *model, const char *pre, const gx_toks *t, const float *scores)
{
    int st = pt__gguf_set_str(c->w, "tokenizer.ggml.model", model);
    if (!st)
        st = pt__gguf_set_str(c->w, "tokenizer.ggml.pre", pre);
    if (!st)
        st = pt__gguf_set_arr_str(c->w, "tokenizer.ggml.tokens", (const char *const *)t->str, NULL, t->n);
    if (!st && scores)
        st = pt__gguf_set_arr(c->w, "tokenizer.ggml.scores", PT_GGUF_FLOAT32, scores, t->n);
    return st ? st : pt__gguf_set_arr(c->w, "tokenizer.ggml.token_type", PT_GGUF_INT32, t->type, t->n);
}

static int vocab_gpt2(gx_ctx *c)
{
    int64_t n = hparams_vocab(c);
    if (n < pt_tokenizer_vocab_size(c->tok))
        return pt__err(PT_ESHAPE, "pt_model_export_gguf: the tokenizer has ids up to %d but config.json's "
                      "vocab_size is %lld", (int)pt_tokenizer_vocab_size(c->tok) - 1, (long long)n);
    char hash[65];
    int st;
    const char *pre = gx_pre_name(c->tok, hash, &st);
    if (!pre)
        return st;
    gx_toks t = { 0 };
    st = toks_alloc(&t, (size_t)n);
    for (int64_t i = 0; i < n && !st; i++)
        st = gpt2_token(&t, c->tok, (int32_t)i);
    if (!st)
        st = write_list(c, "gpt2", pre, &t, NULL);
    toks_free(&t);
    return st ? st : gx_add_special(c, true, -1);
}

/* ---- LlamaHfVocab --------------------------------------------------------------- */

/* A tokenizer_config.json token entry: a string or {"content": ...}. */
static const char *entry_content(const cJSON *e)
{
    if (cJSON_IsString(e))
        return e->valuestring;
    return cJSON_IsObject(e) ? gx_json_str(e, "content") : NULL;
}

/* transformers' all_special_tokens: the named special tokens of
 * tokenizer_config.json (LlamaTokenizerFast's defaults <s>, </s>, <unk> for
 * a Llama tokenizer that does not name them) and its
 * additional_special_tokens, as ids. */
static size_t special_ids(const gx_ctx *c, int32_t *ids, size_t cap)
{
    static const char *const keys[] = { "bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token" };
    static const char *const defs[] = { "<s>", "</s>", "<unk>", NULL, NULL, NULL, NULL };
    const char *cls = gx_json_str(c->tok_cfg, "tokenizer_class");
    bool llama = !cls || !strncmp(cls, "Llama", 5);
    size_t n = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(c->tok_cfg, keys[k]);
        const char *s = e ? entry_content(e) : llama ? defs[k] : NULL;
        int32_t id;
        if (s && n < cap && pt_tokenizer_token_to_id(&id, c->tok, s) == PT_OK)
            ids[n++] = id;
    }
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(c->tok_cfg, "additional_special_tokens"), *it;
    cJSON_ArrayForEach(it, extra) {
        const char *s = entry_content(it);
        int32_t id;
        if (s && n < cap && pt_tokenizer_token_to_id(&id, c->tok, s) == PT_OK)
            ids[n++] = id;
    }
    pt_clear_error();
    return n;
}

static bool in_ids(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* <0x[0-9A-Fa-f]{2}> */
static bool is_byte_token(const char *s)
{
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && isxdigit((unsigned char)s[3]) &&
           isxdigit((unsigned char)s[4]) && s[5] == '>';
}

/* A tokenizer.json merge ("a b" or ["a", "b"]) as the merged piece. */
static char *merged_piece(const cJSON *it)
{
    if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2) {
        const cJSON *l = cJSON_GetArrayItem(it, 0), *r = cJSON_GetArrayItem(it, 1);
        if (!cJSON_IsString(l) || !cJSON_IsString(r))
            return NULL;
        pt_strbuf b = { 0 };
        pt__strbuf_puts(&b, l->valuestring);
        pt__strbuf_puts(&b, r->valuestring);
        return pt__strbuf_detach(&b, NULL);
    }
    const char *s = cJSON_IsString(it) ? it->valuestring : NULL, *sp = s ? strchr(s, ' ') : NULL;
    if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' '))
        return NULL;
    char *p = pt__strdup(s);
    if (p)
        memmove(p + (sp - s), p + (sp - s) + 1, strlen(sp));
    return p;
}

/* PT_GGUF_SPM_SCORES_MERGES: minus the rank of the first merge producing
 * each piece, GX_SCORE_NONE for the pieces no merge produces.  Ranks are
 * exact in a float up to 2^24 merges. */
#define GX_SCORE_NONE (-1e9f)
static int merge_scores(const gx_ctx *c, float *scores, size_t n)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(c->tok_json, "model"), "merges"), *it;
    if (!cJSON_IsArray(merges))
        return pt__err(PT_EFORMAT, "pt_model_export_gguf: spm_scores \"merges\": tokenizer.json has no "
                      "model.merges list");
    if (cJSON_GetArraySize(merges) > (1 << 24))
        return pt__err(PT_ERANGE, "pt_model_export_gguf: spm_scores \"merges\": %d merges, more than a "
                      "float32 score ranks exactly (2^24)", cJSON_GetArraySize(merges));
    for (size_t i = 0; i < n; i++)
        scores[i] = GX_SCORE_NONE;
    int rank = 0, st = PT_OK;
    cJSON_ArrayForEach(it, merges) {
        char *piece = merged_piece(it);
        int32_t id = -1;
        if (!piece)
            st = pt__err(PT_EFORMAT, "pt_model_export_gguf: tokenizer.json model.merges[%d] is not two "
                        "tokens", rank);
        else if (pt_tokenizer_token_to_id(&id, c->tok, piece) || id < 0 || (size_t)id >= n)
            st = pt__err(PT_EFORMAT, "pt_model_export_gguf: tokenizer.json model.merges[%d] makes '%s', "
                        "which is not in the vocabulary", rank, piece);
        else if (scores[id] == GX_SCORE_NONE)
            scores[id] = rank ? (float)-rank : 0.0f;
        pt_free(piece);
        if (st)
            return st;
        rank++;
    }
    return PT_OK;
}

/* tokenizer.ggml.scores of the n tokens written (c->spm_scores). */
static int spm_scores(const gx_ctx *c, float *scores, size_t n)
{
    if (c->spm_scores == PT_GGUF_SPM_SCORES_MERGES)
        return merge_scores(c, scores, n);
    for (size_t i = 0; i < n; i++)
        scores[i] = -1000.0f;   /* LlamaHfVocab's placeholder */
    return PT_OK;
}

#define GX_MAX_SPECIAL 4096

static int vocab_llama_hf(gx_ctx *c)
{
    int32_t base = pt__tok_model_vocab_count(c->tok), top = pt_tokenizer_vocab_size(c->tok);
    int32_t *sp = pt__malloc_array(GX_MAX_SPECIAL, sizeof *sp);
    if (!sp)
        return PT_ENOMEM;
    size_t nsp = special_ids(c, sp, GX_MAX_SPECIAL), n = (size_t)base;
    for (int32_t i = base; i < top; i++)
        n += pt_tokenizer_is_added(c->tok, i) && pt_tokenizer_id_to_token(c->tok, i);
    gx_toks t = { 0 };
    int st = toks_alloc(&t, n);
    size_t k = 0;
    for (int32_t i = 0; i < top && !st; i++) {
        const char *s = pt_tokenizer_id_to_token(c->tok, i);
        if (i >= base && !(s && pt_tokenizer_is_added(c->tok, i)))
            continue;
        if (!s)
            st = pt__err(PT_EFORMAT, "pt_model_export_gguf: the tokenizer has no token %d below its "
                        "vocabulary size %d", (int)i, (int)base);
        else if (!(t.str[k] = pt__strdup(s)))
            st = PT_ENOMEM;
        else if (i < base)
            t.type[k++] = is_byte_token(s) ? TT_BYTE : in_ids(sp, nsp, i) ? TT_CONTROL : TT_NORMAL;
        else
            t.type[k++] = in_ids(sp, nsp, i) ? TT_CONTROL : TT_USER_DEFINED;
    }
    pt_free(sp);
    float *scores = st ? NULL : pt__malloc_array(n ? n : 1, sizeof *scores);
    if (!st && !scores)
        st = PT_ENOMEM;
    if (!st)
        st = spm_scores(c, scores, n);
    if (!st)
        st = write_list(c, "llama", "default", &t, scores);
    pt_free(scores);
    toks_free(&t);
    return st ? st : gx_add_special(c, false, (int64_t)n);
}

/* LlamaHfVocab takes tokenizer.json when its model is BPE with byte
 * fallback (and not Llama 3's ignore_merges without it) and its decoder a
 * Sequence; anything else goes the gpt2 way. */
static bool takes_llama_hf(const cJSON *tj)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const char *type = gx_json_str(m, "type");
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(m, "ignore_merges");
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(m, "byte_fallback");
    bool ignore_merges = cJSON_IsTrue(im), byte_fallback_or_true = !bf || cJSON_IsTrue(bf);
    if (!type || strcmp(type, "BPE") != 0 || (ignore_merges && !byte_fallback_or_true))
        return false;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(tj, "decoder");
    const char *dt = cJSON_IsObject(dec) ? gx_json_str(dec, "type") : NULL;
    return cJSON_IsTrue(bf) && dt && strcmp(dt, "Sequence") == 0;
}

static void warn_sentencepiece(const gx_ctx *c)
{
    if (c->src_dir && pt__dir_has_file(c->src_dir, "tokenizer.model"))
        pt__log(PT_LOG_WARN, "%s/tokenizer.model: the converter would take the vocabulary from this "
               "SentencePiece model (its scores); the export takes tokenizer.json", c->src_dir);
}

int gx_add_vocab(gx_ctx *c)
{
    bool copied;
    int cst = gx_copy_gguf_vocab(c, &copied);
    if (cst || copied)
        return cst;
    warn_sentencepiece(c);
    if (!pt__gguf_arch_permutes(c->cfg.arch))
        return vocab_gpt2(c);
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(c->tok_cfg, "add_prefix_space");
    int st = cJSON_IsBool(aps) ? pt__gguf_set_bool(c->w, "tokenizer.ggml.add_space_prefix", cJSON_IsTrue(aps))
                               : PT_OK;
    if (st)
        return st;
    return c->tok_json && takes_llama_hf(c->tok_json) ? vocab_llama_hf(c) : vocab_gpt2(c);
}
