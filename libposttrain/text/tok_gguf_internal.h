/* Shared by tok_gguf.c (the metadata and tokenizer_config.json) and
 * tok_gguf_json.c (tokenizer.json, merges). */
#ifndef PT_TEXT_TOK_GGUF_INTERNAL_H
#define PT_TEXT_TOK_GGUF_INTERNAL_H

#include "core/strbuf.h"
#include "text/tok_gguf.h"
#include "text/tok_util.h"

#include <stdbool.h>

/* The tokenizer.ggml.* metadata of one file, checked. */
typedef struct gg_vocab {
    const char *what;             /* the file, for messages */
    const pt_gguf_str *tok;       /* tokenizer.ggml.tokens */
    uint64_t n;
    const int32_t *type;          /* tokenizer.ggml.token_type, or NULL (all normal) */
    const float *score;           /* tokenizer.ggml.scores, or NULL */
    const pt_gguf_str *merges;    /* tokenizer.ggml.merges, or NULL */
    uint64_t nmerges;
    bool spm;                     /* model "llama" (else "gpt2") */
    char pre[64];                 /* tokenizer.ggml.pre ("" when absent) */
    int32_t bos, eos, unk, pad;   /* -1 when absent */
    int add_bos, add_eos;         /* 1, 0, or -1 when absent */
    bool space_prefix;            /* tokenizer.ggml.add_space_prefix (llama; default true) */
    const char *chat_template;    /* tokenizer.chat_template (NUL-terminated copy) or NULL */
    tk_strmap map;                /* token -> first id */
    bool *in_vocab;               /* n flags: the token is in the BPE model's vocab */
} gg_vocab;

/* The type of token i (normal when the file has no types). */
static inline int gg_type(const gg_vocab *v, uint64_t i)
{
    return v->type ? v->type[i] : PT_GGUF_TOKEN_NORMAL;
}

/* The tokenizer.json text of v. */
int gg_tokenizer_json(pt_strbuf *b, const gg_vocab *v);

#endif
