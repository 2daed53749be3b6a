/* Regular expressions of the tokenizer engine (PCRE2, rewritten to match the
 * reference's Oniguruma): compiling a tokenizer.json pattern, and the match
 * state one thread uses to run patterns.  Not installed. */
#ifndef PT_TEXT_TOK_REGEX_H
#define PT_TEXT_TOK_REGEX_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct tk_regex {
    pcre2_code *code;
    bool jit;
} tk_regex;
/* Compile `pattern` (a literal string when `literal`); a failure names `where`
 * (the JSON path of the pattern). */
int tk_regex_compile(tk_regex *r, const char *pattern, size_t len, bool literal, const char *where);
void tk_regex_free(tk_regex *r);

/* Match data (and, for long inputs, a JIT stack of up to 64 MiB), created on
 * first use; zero-initialise, free with tk_matcher_free. */
typedef struct tk_matcher {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
} tk_matcher;
int tk_matcher_ready(tk_matcher *m, bool big_stack);
void tk_matcher_free(tk_matcher *m);

/* Next match of re in s[0..n) at or after `start` that is not empty.
 * Returns 1 with [*a, *b), 0 when there is none, <0 on error. */
int tk_regex_next(tk_matcher *m, const tk_regex *re, const char *s, size_t n, size_t start, size_t *a,
                  size_t *b);
/* Append s[0..n) to out with every non-empty match of re replaced by
 * with[0..with_len). */
int tk_regex_replace(pt_strbuf *out, tk_matcher *m, const tk_regex *re, const char *s, size_t n,
                     const char *with, size_t with_len);

#endif
