/* Tokenizer regular expressions: tokenizer.json patterns rewritten for PCRE2
 * so that they match as the reference's Oniguruma does, and matching. */
#include "text/tok_regex.h"

#include "text/tok_util.h"

#include <string.h>

/* ---- compiling ------------------------------------------------------------- */
/* Letters and numbers that the reference's regex engine (Oniguruma with
 * Unicode 16.0) puts in \\p{L} / \\p{N} but PCRE2 10.42 (Unicode 14.0) does not:
 * assigned in Unicode 15.0-16.0.  Measured by probing the reference with a
 * Split(\\p{L}, Removed) tokenizer on every code point that is a letter or
 * number in Unicode 17 but not in 14.  With a newer PCRE2 they are redundant. */
static const char L_EXTRA[] =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}"
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
static const char N_EXTRA[] =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

/* The reference runs its patterns on Oniguruma, whose Unicode \s is the
 * White_Space property and whose \w is Alphabetic + marks + Nd + Pc.  PCRE2's
 * UCP \s also matches U+180E and its \w differs, so rewrite those escapes
 * into explicit properties (which work inside and outside classes). */
static int rewrite_pattern(pt_strbuf *out, const char *p, size_t n)
{
    static const char WS[] = "\\p{White_Space}", NWS[] = "\\P{White_Space}";
    static const char W_IN[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
    bool in_class = false;
    size_t class_start = 0;
    int st = 0;
    for (size_t i = 0; i < n && st == 0; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 's')
                st = pt__strbuf_put(out, WS, sizeof WS - 1);
            else if (e == 'S')
                st = in_class ? pt__strbuf_put(out, p + i, 2) : pt__strbuf_put(out, NWS, sizeof NWS - 1);
            else if ((e == 'p' || e == 'P') && i + 2 < n &&
                     (p[i + 2] == 'L' || p[i + 2] == 'N' ||
                      (p[i + 2] == '{' && i + 4 < n && (p[i + 3] == 'L' || p[i + 3] == 'N') && p[i + 4] == '}'))) {
                /* \p{L} \pL \p{N} \pN (and \P outside classes): add the newer ranges */
                char prop = p[i + 2] == '{' ? p[i + 3] : p[i + 2];
                size_t skip = p[i + 2] == '{' ? 5 : 3;
                const char *extra = prop == 'L' ? L_EXTRA : N_EXTRA;
                if (e == 'P' && in_class) {
                    st = pt__strbuf_put(out, p + i, skip);
                } else {
                    if (!in_class)
                        st = pt__strbuf_put(out, e == 'P' ? "[^" : "[", e == 'P' ? 2 : 1);
                    if (st == 0)
                        st = pt__strbuf_put(out, prop == 'L' ? "\\p{L}" : "\\p{N}", 5);
                    if (st == 0)
                        st = pt__strbuf_put(out, extra, strlen(extra));
                    if (st == 0 && !in_class)
                        st = pt__strbuf_putc(out, ']');
                }
                i += skip - 1;
                continue;
            } else if (e == 'w' && in_class)
                st = pt__strbuf_put(out, W_IN, sizeof W_IN - 1);
            else if (e == 'w' || (e == 'W' && !in_class)) {
                st = pt__strbuf_put(out, e == 'w' ? "[" : "[^", e == 'w' ? 1 : 2);
                if (st == 0)
                    st = pt__strbuf_put(out, W_IN, sizeof W_IN - 1);
                if (st == 0)
                    st = pt__strbuf_putc(out, ']');
            } else {
                st = pt__strbuf_put(out, p + i, 2);
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            class_start = i + 1;
            if (class_start < n && p[class_start] == '^')
                class_start++;
        } else if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:name:] inside a class: copy through ":]" */
            size_t k = i + 2;
            while (k + 1 < n && !(p[k] == ':' && p[k + 1] == ']'))
                k++;
            if (k + 1 < n) {
                st = pt__strbuf_put(out, p + i, k + 2 - i);
                i = k + 1;
                continue;
            }
        } else if (in_class && c == ']' && i != class_start) {
            in_class = false;
        }
        st = pt__strbuf_putc(out, c);
    }
    return st;
}

int tk_regex_compile(tk_regex *r, const char *pattern, size_t len, bool literal, const char *where)
{
    int errcode = 0;
    PCRE2_SIZE erroff = 0;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    pt_strbuf rw = PT_STRBUF_INIT;
    if (literal) {
        opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_LITERAL;
    } else {
        int st = rewrite_pattern(&rw, pattern, len);
        if (st) {
            pt__strbuf_free(&rw);
            return st;
        }
        pattern = rw.p ? rw.p : "";
        len = rw.len;
    }
    r->code = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &errcode, &erroff, NULL);
    pt__strbuf_free(&rw);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return pt__err(literal ? PT_EFORMAT : PT_EUNSUPPORTED,
                      "tokenizer.json: %s: regex does not compile (at offset %zu after rewriting \\s and \\w): %s",
                      where, (size_t)erroff, (const char *)msg);
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void tk_regex_free(tk_regex *r)
{
    if (r->code)
        pcre2_code_free(r->code);
    r->code = NULL;
}

/* ---- matching ------------------------------------------------------------------- */
int tk_matcher_ready(tk_matcher *m, bool big_stack)
{
    if (m->md)
        return 0;
    m->md = pcre2_match_data_create(1, NULL);
    if (!m->md)
        return pt__err(PT_ENOMEM, "tokenizer: out of memory (regex match data)");
    if (!big_stack)
        return 0;
    m->mctx = pcre2_match_context_create(NULL);
    m->jit = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!m->mctx)
        return pt__err(PT_ENOMEM, "tokenizer: out of memory (regex context)");
    if (m->jit)
        pcre2_jit_stack_assign(m->mctx, NULL, m->jit);
    return 0;
}

void tk_matcher_free(tk_matcher *m)
{
    if (m->md)
        pcre2_match_data_free(m->md);
    if (m->mctx)
        pcre2_match_context_free(m->mctx);
    if (m->jit)
        pcre2_jit_stack_free(m->jit);
    m->md = NULL;
    m->mctx = NULL;
    m->jit = NULL;
}

int tk_regex_next(tk_matcher *m, const tk_regex *re, const char *s, size_t n, size_t start, size_t *a,
                  size_t *b)
{
    int st = tk_matcher_ready(m, true); /* no-op when readied before */
    if (st)
        return st;
    while (start <= n) {
        int rc = re->jit ? pcre2_jit_match(re->code, (PCRE2_SPTR)s, n, start, 0, m->md, m->mctx)
                         : pcre2_match(re->code, (PCRE2_SPTR)s, n, start, 0, m->md, m->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            return 0;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pt__err(PT_ERANGE, "tokenizer: regex matching failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        if (ov[1] > ov[0]) {
            *a = ov[0];
            *b = ov[1];
            return 1;
        }
        /* Empty match: look again one character further. */
        if (ov[0] >= n)
            return 0;
        uint32_t cp;
        start = ov[0] + tk_utf8_unit(s + ov[0], n - ov[0], &cp);
    }
    return 0;
}

int tk_regex_replace(pt_strbuf *out, tk_matcher *m, const tk_regex *re, const char *s, size_t n,
                     const char *with, size_t with_len)
{
    size_t pos = 0, a, b;
    int st;
    while ((st = tk_regex_next(m, re, s, n, pos, &a, &b)) == 1) {
        pt__strbuf_put(out, s + pos, a - pos);
        if ((st = pt__strbuf_put(out, with, with_len)))
            return st;
        pos = b;
    }
    if (st < 0)
        return st;
    return pt__strbuf_put(out, s + pos, n - pos);
}
