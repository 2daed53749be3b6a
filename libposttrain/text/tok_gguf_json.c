/* The tokenizer.json text of a GGUF vocabulary (tok_gguf_internal.h): added
 * tokens, normalizer, pre-tokenizer, post-processor, decoder and the BPE
 * model with its vocabulary and merges. */
#include "core/core.h"
#include "io/json.h"
#include "text/tok_gguf_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the pre-tokenizers of the `pre` names -------------------------------------- */

/* The Split regexes of the Hugging Face tokenizer.json files (llama.cpp's
 * llama-vocab.cpp lists the same expressions, adapted to its engine). */
#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| " \
                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef enum { PRE_GPT2, PRE_SPLIT, PRE_DIGITS } pre_kind;

typedef struct pre_def {
    const char *name;
    pre_kind kind;
    const char *regex;     /* PRE_SPLIT */
    bool nfc;              /* an NFC normalizer (Qwen2's tokenizer.json) */
    bool ignore_merges;    /* Llama 3's BPE */
} pre_def;

static const pre_def k_pre[] = {
    { "gpt-2", PRE_GPT2, NULL, false, false },
    { "llama-bpe", PRE_SPLIT, RE_LLAMA3, false, true },
    { "llama3", PRE_SPLIT, RE_LLAMA3, false, true },
    { "llama-v3", PRE_SPLIT, RE_LLAMA3, false, true },
    /* the converter's name for Llama 3 tokenizer.json files hashing like Smaug's */
    { "smaug-bpe", PRE_SPLIT, RE_LLAMA3, false, true },
    { "qwen2", PRE_SPLIT, RE_QWEN2, true, false },
    { "deepseek-r1-qwen", PRE_SPLIT, RE_QWEN2, true, false },
    { "smollm", PRE_DIGITS, NULL, false, false },
};

static int find_pre(const pre_def **out, const gg_vocab *v)
{
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (strcmp(v->pre, k_pre[i].name) == 0) {
            *out = &k_pre[i];
            return PT_OK;
        }
    return pt__err(PT_EUNSUPPORTED, "%s: tokenizer.ggml.pre '%s' has no known Hugging Face "
                  "pre-tokenizer (known: gpt-2, llama-bpe, llama3, llama-v3, smaug-bpe, qwen2, "
                  "deepseek-r1-qwen, smollm)", v->what, *v->pre ? v->pre : "(missing)");
}

#define BYTELEVEL(regex) "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, " \
                         "\"trim_offsets\": true, \"use_regex\": " regex "}"

static void put_pre(pt_strbuf *b, const pre_def *p)
{
    pt__strbuf_puts(b, ",\n  \"pre_tokenizer\": ");
    if (p->kind == PRE_GPT2) {
        pt__strbuf_puts(b, BYTELEVEL("true"));
    } else if (p->kind == PRE_DIGITS) {
        pt__strbuf_puts(b, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                          "\"individual_digits\": true}, " BYTELEVEL("true") "]}");
    } else {
        pt__strbuf_puts(b, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                          "\"pattern\": {\"Regex\": ");
        pt__json_put_string(b, p->regex, strlen(p->regex));
        pt__strbuf_puts(b, "}, \"behavior\": \"Isolated\", \"invert\": false}, "
                          BYTELEVEL("false") "]}");
    }
}

/* ---- added tokens and the post-processor ------------------------------------------- */

static void put_added(pt_strbuf *b, const gg_vocab *v)
{
    pt__strbuf_puts(b, ",\n  \"added_tokens\": [");
    bool first = true;
    for (uint64_t i = 0; i < v->n; i++) {
        int ty = gg_type(v, i);
        if (ty != PT_GGUF_TOKEN_CONTROL && ty != PT_GGUF_TOKEN_USER_DEFINED &&
            ty != PT_GGUF_TOKEN_UNKNOWN)
            continue;
        pt__strbuf_printf(b, "%s\n    {\"id\": %llu, \"content\": ", first ? "" : ",",
                         (unsigned long long)i);
        pt__json_put_string(b, v->tok[i].ptr, v->tok[i].len);
        pt__strbuf_printf(b, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                            "\"normalized\": false, \"special\": %s}",
                         ty == PT_GGUF_TOKEN_USER_DEFINED ? "false" : "true");
        first = false;
    }
    pt__strbuf_puts(b, first ? "]" : "\n  ]");
}

static void put_special(pt_strbuf *b, const gg_vocab *v, int32_t id, int type_id)
{
    pt__strbuf_puts(b, "{\"SpecialToken\": {\"id\": ");
    pt__json_put_string(b, v->tok[id].ptr, v->tok[id].len);
    pt__strbuf_printf(b, ", \"type_id\": %d}}", type_id);
}

static void put_sequence(pt_strbuf *b, const gg_vocab *v, bool bos, bool eos, const char *seq,
                         int type_id)
{
    if (bos) {
        put_special(b, v, v->bos, type_id);
        pt__strbuf_puts(b, ", ");
    }
    pt__strbuf_printf(b, "{\"Sequence\": {\"id\": \"%s\", \"type_id\": %d}}", seq, type_id);
    if (eos) {
        pt__strbuf_puts(b, ", ");
        put_special(b, v, v->eos, type_id);
    }
}

static void put_special_entry(pt_strbuf *b, const gg_vocab *v, int32_t id, bool comma)
{
    pt__strbuf_puts(b, comma ? ", " : "");
    pt__json_put_string(b, v->tok[id].ptr, v->tok[id].len);
    pt__strbuf_puts(b, ": {\"id\": ");
    pt__json_put_string(b, v->tok[id].ptr, v->tok[id].len);
    pt__strbuf_printf(b, ", \"ids\": [%d], \"tokens\": [", id);
    pt__json_put_string(b, v->tok[id].ptr, v->tok[id].len);
    pt__strbuf_puts(b, "]}");
}

/* TemplateProcessing "<bos> $A <eos>" as transformers' Llama tokenizer builds
 * it from add_bos_token / add_eos_token; else ByteLevel (byte-level) or
 * nothing. */
static void put_post(pt_strbuf *b, const gg_vocab *v)
{
    bool bos = (v->add_bos >= 0 ? v->add_bos : v->spm) && v->bos >= 0;
    bool eos = v->add_eos > 0 && v->eos >= 0;
    pt__strbuf_puts(b, ",\n  \"post_processor\": ");
    if (!bos && !eos) {
        pt__strbuf_puts(b, v->spm ? "null" : "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                                            "\"trim_offsets\": false, \"use_regex\": true}");
        return;
    }
    pt__strbuf_puts(b, "{\"type\": \"TemplateProcessing\", \"single\": [");
    put_sequence(b, v, bos, eos, "A", 0);
    pt__strbuf_puts(b, "], \"pair\": [");
    put_sequence(b, v, bos, eos, "A", 0);
    pt__strbuf_puts(b, ", ");
    put_sequence(b, v, bos, eos, "B", 1);
    pt__strbuf_puts(b, "], \"special_tokens\": {");
    if (bos)
        put_special_entry(b, v, v->bos, false);
    if (eos && !(bos && v->eos == v->bos))
        put_special_entry(b, v, v->eos, bos);
    pt__strbuf_puts(b, "}}");
}

/* ---- normalizer and decoder ---------------------------------------------------------- */

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 */

static void put_norm_decoder(pt_strbuf *b, const gg_vocab *v, const pre_def *p)
{
    pt__strbuf_puts(b, ",\n  \"normalizer\": ");
    if (v->spm) {
        pt__strbuf_puts(b, "{\"type\": \"Sequence\", \"normalizers\": [");
        if (v->space_prefix)
            pt__strbuf_puts(b, "{\"type\": \"Prepend\", \"prepend\": \"" SPACE_MARK "\"}, ");
        pt__strbuf_puts(b, "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
                          "\"content\": \"" SPACE_MARK "\"}]}");
        pt__strbuf_puts(b, ",\n  \"pre_tokenizer\": null");
    } else {
        pt__strbuf_puts(b, p->nfc ? "{\"type\": \"NFC\"}" : "null");
        put_pre(b, p);
    }
    put_post(b, v);
    pt__strbuf_puts(b, ",\n  \"decoder\": ");
    if (!v->spm) {
        pt__strbuf_puts(b, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                          "\"trim_offsets\": true, \"use_regex\": true}");
        return;
    }
    pt__strbuf_puts(b, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
                      "{\"String\": \"" SPACE_MARK "\"}, \"content\": \" \"}, {\"type\": "
                      "\"ByteFallback\"}, {\"type\": \"Fuse\"}");
    if (v->space_prefix)
        pt__strbuf_puts(b, ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}");
    pt__strbuf_puts(b, "]}");
}

/* ---- merges ------------------------------------------------------------------------- */

/* The vocabulary id of s[0..n), or -1. */
static int32_t vocab_id(const gg_vocab *v, const char *s, size_t n)
{
    int32_t id = tk_strmap_get(&v->map, s, n);
    return id >= 0 && v->in_vocab[id] ? id : -1;
}

static void put_merge(pt_strbuf *b, const char *l, size_t nl, const char *r, size_t nr, bool first)
{
    pt__strbuf_puts(b, first ? "\n      " : ",\n      ");
    if (!memchr(l, ' ', nl) && !memchr(r, ' ', nr)) {
        /* "l" then "r", without the quotes between them: "l r" */
        pt__json_put_string(b, l, nl);
        if (b->err)
            return;
        b->p[--b->len] = 0;
        pt__strbuf_putc(b, ' ');
        size_t at = b->len;
        pt__json_put_string(b, r, nr);
        if (!b->err) {
            memmove(b->p + at, b->p + at + 1, b->len - at);
            b->len--;
        }
        return;
    }
    pt__strbuf_putc(b, '[');
    pt__json_put_string(b, l, nl);
    pt__strbuf_puts(b, ", ");
    pt__json_put_string(b, r, nr);
    pt__strbuf_putc(b, ']');
}

/* tokenizer.ggml.merges, each "a b" with a, b and ab in the vocabulary. */
static int put_file_merges(pt_strbuf *b, const gg_vocab *v)
{
    char *cat = NULL;
    size_t cap = 0;
    int st = PT_OK;
    for (uint64_t i = 0; st == PT_OK && i < v->nmerges; i++) {
        const pt_gguf_str *m = &v->merges[i];
        const char *sp = memchr(m->ptr, ' ', m->len);
        size_t nl = sp ? (size_t)(sp - m->ptr) : 0, nr = sp ? m->len - nl - 1 : 0;
        if (!sp || nl == 0 || nr == 0 || memchr(sp + 1, ' ', nr)) {
            st = pt__err(PT_EFORMAT, "%s: tokenizer.ggml.merges[%llu] '%.*s' is not two tokens "
                        "separated by one space", v->what, (unsigned long long)i,
                        (int)(m->len < 64 ? m->len : 64), m->ptr);
            break;
        }
        if (nl + nr > cap) {
            char *c = pt__realloc_array(cat, 2 * (nl + nr), 1);
            if (!c) {
                st = PT_ENOMEM;
                break;
            }
            cat = c;
            cap = 2 * (nl + nr);
        }
        memcpy(cat, m->ptr, nl);
        memcpy(cat + nl, sp + 1, nr);
        const char *bad = vocab_id(v, m->ptr, nl) < 0 ? "its left part" :
                          vocab_id(v, sp + 1, nr) < 0 ? "its right part" :
                          vocab_id(v, cat, nl + nr) < 0 ? "the merged token" : NULL;
        if (bad)
            st = pt__err(PT_EFORMAT, "%s: tokenizer.ggml.merges[%llu] '%.*s': %s is not in "
                        "tokenizer.ggml.tokens", v->what, (unsigned long long)i,
                        (int)(m->len < 64 ? m->len : 64), m->ptr, bad);
        else
            put_merge(b, m->ptr, nl, sp + 1, nr, i == 0);
    }
    pt_free(cat);
    return st;
}

typedef struct gg_cand {
    float score;
    int32_t piece, l, r;
} gg_cand;

static int cand_cmp(const void *pa, const void *pb)
{
    const gg_cand *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    if (a->piece != b->piece)
        return a->piece < b->piece ? -1 : 1;
    if (a->l != b->l)
        return a->l < b->l ? -1 : 1;
    return a->r < b->r ? -1 : a->r > b->r;
}

/* Every split of piece i into two vocabulary tokens, appended to *c. */
static int piece_splits(gg_cand **c, size_t *n, size_t *cap, const gg_vocab *v, int32_t i)
{
    const char *s = v->tok[i].ptr;
    size_t len = v->tok[i].len;
    for (size_t k = 1; k < len; k++) {
        if (((unsigned char)s[k] & 0xC0) == 0x80)
            continue; /* inside a character */
        int32_t l = vocab_id(v, s, k), r = vocab_id(v, s + k, len - k);
        if (l < 0 || r < 0)
            continue;
        if (*n == *cap) {
            gg_cand *g = pt__grow_array(*c, cap, 1024, sizeof **c);
            if (!g)
                return PT_ENOMEM;
            *c = g;
        }
        (*c)[(*n)++] = (gg_cand){ v->score[i], i, l, r };
    }
    return PT_OK;
}

/* The merges of a SentencePiece vocabulary as transformers'
 * SentencePieceExtractor derives them: every split of every piece into two
 * pieces, ordered by the merged piece's score (highest first), then the
 * piece's id, then the ids of the two parts. */
static int put_score_merges(pt_strbuf *b, const gg_vocab *v)
{
    if (!v->score)
        return pt__err(PT_EFORMAT, "%s: the llama tokenizer has neither tokenizer.ggml.merges nor "
                      "tokenizer.ggml.scores to derive its merges from", v->what);
    gg_cand *c = NULL;
    size_t n = 0, cap = 0;
    int st = PT_OK;
    for (uint64_t i = 0; st == PT_OK && i < v->n; i++) {
        if (isnan(v->score[i]))
            st = pt__err(PT_EFORMAT, "%s: tokenizer.ggml.scores[%llu] is NaN", v->what,
                        (unsigned long long)i);
        else if (v->in_vocab[i])
            st = piece_splits(&c, &n, &cap, v, (int32_t)i);
    }
    if (st == PT_OK && n > 1)
        qsort(c, n, sizeof *c, cand_cmp);
    if (st == PT_OK && n > 1 && c[0].score == c[n - 1].score)
        pt__log(PT_LOG_WARN, "%s: tokenizer.ggml.scores are all %g (the converter's placeholder for a "
               "tokenizer.json source), so the merge order is lost: the merges are ordered by token "
               "id, which is right only for vocabularies listed in merge order (otherwise some texts "
               "tokenize differently from Hugging Face, here and in llama.cpp). To keep the order, "
               "load the Hugging Face directory (tokenizer.json) instead, or write the GGUF file "
               "with scores from the merges: posttrain export --spm-scores merges "
               "(pt_gguf_export_options.spm_scores = PT_GGUF_SPM_SCORES_MERGES)",
               v->what, (double)c[0].score);
    for (size_t i = 0; st == PT_OK && i < n; i++)
        put_merge(b, v->tok[c[i].l].ptr, v->tok[c[i].l].len, v->tok[c[i].r].ptr,
                  v->tok[c[i].r].len, i == 0);
    pt_free(c);
    return st;
}

/* ---- the model ----------------------------------------------------------------------- */

static int put_model(pt_strbuf *b, const gg_vocab *v, const pre_def *p)
{
    pt__strbuf_puts(b, ",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
                      "    \"unk_token\": ");
    if (v->spm && v->unk >= 0)
        pt__json_put_string(b, v->tok[v->unk].ptr, v->tok[v->unk].len);
    else
        pt__strbuf_puts(b, "null");
    pt__strbuf_printf(b, ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": "
                        "null,\n    \"fuse_unk\": %s,\n    \"byte_fallback\": %s,\n    "
                        "\"ignore_merges\": %s,\n    \"vocab\": {",
                     v->spm ? "true" : "false", v->spm ? "true" : "false",
                     p && p->ignore_merges ? "true" : "false");
    bool first = true;
    for (uint64_t i = 0; i < v->n; i++) {
        if (!v->in_vocab[i])
            continue;
        pt__strbuf_puts(b, first ? "\n      " : ",\n      ");
        pt__json_put_string(b, v->tok[i].ptr, v->tok[i].len);
        pt__strbuf_printf(b, ": %llu", (unsigned long long)i);
        first = false;
    }
    pt__strbuf_puts(b, "\n    },\n    \"merges\": [");
    int st;
    if (v->merges)
        st = put_file_merges(b, v);
    else if (v->spm)
        st = put_score_merges(b, v);
    else
        st = pt__err(PT_EFORMAT, "%s: tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its "
                    "merges)", v->what);
    pt__strbuf_puts(b, "\n    ]\n  }\n}\n");
    return st ? st : b->err;
}

int gg_tokenizer_json(pt_strbuf *b, const gg_vocab *v)
{
    const pre_def *p = NULL;
    int st = v->spm ? PT_OK : find_pre(&p, v);
    if (st)
        return st;
    pt__strbuf_puts(b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null");
    put_added(b, v);
    put_norm_decoder(b, v, p);
    return put_model(b, v, p);
}
