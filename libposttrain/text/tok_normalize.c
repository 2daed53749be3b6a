/* Normalizers: Unicode normalization forms (with the reference's older
 * Unicode data), Lowercase, StripAccents, Strip, Prepend and Replace, run as
 * a chain over one segment of text at a time. */
#include "text/tok_encode.h"

#include <stdlib.h>
#include <utf8proc.h>

static bool is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

/* The reference normalizes with older Unicode data (about 10.0) than
 * utf8proc's: these combining marks, added later, are starters (class 0) for
 * it, and it does not compose U+11935 U+11930.  Measured by probing the
 * reference's NFC on every mark against anchors of known classes.  They are
 * treated as barriers: normalization runs on the text between them. */
static const uint32_t NORM_BARRIER[][2] = {
    {0x07FD, 0x07FD}, {0x0898, 0x089F}, {0x08CA, 0x08D3}, {0x09FE, 0x09FE}, {0x0C3C, 0x0C3C},
    {0x0D3B, 0x0D3C}, {0x0EBA, 0x0EBA}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA},
    {0xA82C, 0xA82C}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85},
    {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x11930, 0x11930},
    {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47},
    {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x16FF0, 0x16FF1},
    {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF},
};

static bool norm_barrier(uint32_t cp)
{
    if (cp < 0x07FD)
        return false;
    size_t lo = 0, hi = sizeof NORM_BARRIER / sizeof NORM_BARRIER[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < NORM_BARRIER[mid][0])
            hi = mid;
        else if (cp > NORM_BARRIER[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* Unicode normalization of the valid UTF-8 runs of s; bad bytes and the
 * barrier marks above pass through unchanged. */
static int norm_unicode(pt_strbuf *out, const char *s, size_t n, utf8proc_option_t opt)
{
    if (is_ascii(s, n))
        return pt__strbuf_put(out, s, n);
    size_t i = 0;
    while (i < n) {
        size_t j = i, bk = 0;
        uint32_t cp;
        while (j < n) {
            size_t k = (unsigned char)s[j] < 0x80 ? 1 : pt__utf8_next((const unsigned char *)s + j, n - j, &cp);
            if (!k)
                break;
            if (k > 1 && norm_barrier(cp)) {
                bk = k;
                break;
            }
            j += k;
        }
        if (j > i) {
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(j - i), &dst,
                                              opt | UTF8PROC_STABLE);
            if (r < 0) {
                free(dst);
                return pt__err(PT_EINTERNAL, "tokenizer: Unicode normalization failed: %s", utf8proc_errmsg(r));
            }
            int st = pt__strbuf_put(out, dst, (size_t)r);
            free(dst);
            if (st)
                return st;
        }
        if (bk) {
            int st = pt__strbuf_put(out, s + j, bk);
            if (st)
                return st;
            j += bk;
        } else if (j < n) {
            int st = pt__strbuf_putc(out, s[j]);
            if (st)
                return st;
            j++;
        }
        i = j;
    }
    return 0;
}

static int norm_map_chars(pt_strbuf *out, const char *s, size_t n, tk_norm_kind kind)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = tk_utf8_unit(s + i, n - i, &cp);
        int st = 0;
        if (cp == TK_BAD_CP) {
            st = pt__strbuf_putc(out, s[i]);
        } else if (kind == TKN_LOWERCASE) {
            if (cp == 0x130) /* İ lowercases to i + combining dot above */
                st = pt__strbuf_put(out, "i\xCC\x87", 3);
            else {
                char u[4];
                size_t len = pt__utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u);
                st = pt__strbuf_put(out, u, len);
            }
        } else { /* strip accents: drop nonspacing marks */
            if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN)
                st = pt__strbuf_put(out, s + i, k);
        }
        if (st)
            return st;
        i += k;
    }
    return 0;
}

static int norm_strip(pt_strbuf *out, const char *s, size_t n, bool left, bool right)
{
    size_t a = 0, b = n;
    uint32_t cp;
    if (left) {
        while (a < b) {
            size_t k = tk_utf8_unit(s + a, b - a, &cp);
            if (!tk_is_white_space(cp))
                break;
            a += k;
        }
    }
    if (right) {
        while (b > a) {
            size_t k = tk_utf8_unit_back(s, a, b, &cp);
            if (!tk_is_white_space(cp))  /* also when the bytes are not one character */
                break;
            b -= k;
        }
    }
    return pt__strbuf_put(out, s + a, b - a);
}

int tk_normalize(const char **res, size_t *res_n, tk_ctx *c, const char *s, size_t n)
{
    const pt_tokenizer *t = c->t;
    const char *cur = s;
    size_t cur_n = n;
    int which = 0;
    for (size_t i = 0; i < t->n_norm; i++) {
        const tk_norm *x = &t->norm[i];
        pt_strbuf *out = &c->nbuf[which];
        pt__strbuf_clear(out);
        int st = 0;
        switch (x->kind) {
        case TKN_NFC:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_COMPOSE);
            break;
        case TKN_NFD:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_DECOMPOSE);
            break;
        case TKN_NFKC:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
            break;
        case TKN_NFKD:
            st = norm_unicode(out, cur, cur_n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
            break;
        case TKN_LOWERCASE:
        case TKN_STRIP_ACCENTS:
            st = norm_map_chars(out, cur, cur_n, x->kind);
            break;
        case TKN_STRIP:
            st = norm_strip(out, cur, cur_n, x->left, x->right);
            break;
        case TKN_PREPEND:
            if (cur_n > 0)
                st = pt__strbuf_put(out, x->str, x->str_len);
            if (st == 0)
                st = pt__strbuf_put(out, cur, cur_n);
            break;
        case TKN_REPLACE:
            st = tk_regex_replace(out, &c->re, &x->re, cur, cur_n, x->str, x->str_len);
            break;
        }
        if (st)
            return st;
        cur = out->p ? out->p : "";
        cur_n = out->len;
        which ^= 1;
    }
    *res = cur;
    *res_n = cur_n;
    return 0;
}
