/* JSON as the chat templates write it: a strict RFC 8259 parser that
 * re-serialises what it reads exactly as transformers' `tojson` filter does,
 * i.e. Python's json.dumps(json.loads(text), ensure_ascii=False[, indent=N]):
 * key order kept, separators ", " and ": " (with an indent: "," at line ends),
 * strings with only '"', '\\' and control characters escaped (\n \r \t \b \f,
 * the others \u00xx), non-ASCII as UTF-8, integers digit for digit (Python ints
 * are exact; "-0" is 0), other numbers as Python's float repr (the shortest
 * text that reads back as the same double: 10.0, 1e-07, 1e+16, Infinity for an
 * overflow).  What Python would accept but JSON does not (NaN, Infinity, a lone
 * surrogate) and duplicate keys (where parsers disagree) are errors. */
#include "text/chat/chat_internal.h"

#include "core/core.h"
#include "core/utf8.h"
#include "text/tok_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 512
#define PY_INT_MAX_DIGITS 4300 /* Python's int/str conversion limit (json.loads refuses more) */

typedef struct jparser {
    const char *s;
    size_t n, pos;
    pt_strbuf *out; /* NULL: check only */
    int indent;     /* < 0: none */
    pt_chat_json_err *e;
} jparser;

static int jfail(jparser *p, size_t at, const char *fmt, ...) PT_PRINTF(3, 4);
static int jfail(jparser *p, size_t at, const char *fmt, ...)
{
    if (p->e) {
        p->e->at = at;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->e->what, sizeof p->e->what, fmt, ap);
        va_end(ap);
    }
    return PT_EFORMAT;
}

size_t pt__chat_json_ws(const char *s, size_t n, size_t pos)
{
    while (pos < n && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r'))
        pos++;
    return pos;
}

static void emit(jparser *p, const char *s, size_t n)
{
    if (p->out)
        pt__strbuf_put(p->out, s, n);
}

static void emits(jparser *p, const char *s)
{
    if (p->out)
        pt__strbuf_puts(p->out, s);
}

static void newline(jparser *p, int level)
{
    if (!p->out)
        return;
    pt__strbuf_putc(p->out, '\n');
    for (int i = 0; i < p->indent * level; i++)
        pt__strbuf_putc(p->out, ' ');
}

/* "a string", "a number", ... of the value starting with c. */
static const char *kind_of(char c)
{
    switch (c) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    default: return (c == '-' || (c >= '0' && c <= '9')) ? "a number" : "something else";
    }
}

const char *pt__chat_json_kind(char first)
{
    return kind_of(first);
}

/* ---- strings ------------------------------------------------------------- */
static int hex4(uint32_t *v, const char *s)
{
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        x = x * 16 + d;
    }
    *v = x;
    return 0;
}

static void put_cp(pt_strbuf *b, uint32_t cp)
{
    char u[4];
    size_t k = pt__utf8_encode(cp, u);
    pt__strbuf_put(b, u, k);
}

/* One code point of the string as json.dumps(ensure_ascii=False) writes it. */
static void dump_cp(pt_strbuf *b, uint32_t cp)
{
    static const char hex[] = "0123456789abcdef";
    switch (cp) {
    case '"': pt__strbuf_puts(b, "\\\""); return;
    case '\\': pt__strbuf_puts(b, "\\\\"); return;
    case '\n': pt__strbuf_puts(b, "\\n"); return;
    case '\r': pt__strbuf_puts(b, "\\r"); return;
    case '\t': pt__strbuf_puts(b, "\\t"); return;
    case '\b': pt__strbuf_puts(b, "\\b"); return;
    case '\f': pt__strbuf_puts(b, "\\f"); return;
    default: break;
    }
    if (cp < 0x20) {
        char u[6] = {'\\', 'u', '0', '0', hex[cp >> 4], hex[cp & 15]};
        pt__strbuf_put(b, u, sizeof u);
        return;
    }
    put_cp(b, cp);
}

/* The string token at p->pos (a '"'): decoded into `raw` (if not NULL), and
 * re-escaped into p->out (if not NULL). */
static int jstring(jparser *p, pt_strbuf *raw)
{
    size_t start = p->pos;
    p->pos++;
    if (p->out)
        pt__strbuf_putc(p->out, '"');
    for (;;) {
        if (p->pos >= p->n)
            return jfail(p, start, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        uint32_t cp;
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return jfail(p, p->pos, "control character 0x%02x inside a string (write it as \\u%04x)", c, c);
        if (c == '\\') {
            size_t at = p->pos;
            if (p->pos + 1 >= p->n)
                return jfail(p, start, "unterminated string");
            char k = p->s[p->pos + 1];
            p->pos += 2;
            switch (k) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (p->pos + 4 > p->n || hex4(&cp, p->s + p->pos) != 0)
                    return jfail(p, at, "bad \\u escape (four hex digits expected)");
                p->pos += 4;
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return jfail(p, at, "lone low surrogate \\u%04x", (unsigned)cp);
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t lo;
                    if (p->pos + 6 > p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                        hex4(&lo, p->s + p->pos + 2) != 0 || lo < 0xdc00 || lo > 0xdfff)
                        return jfail(p, at, "lone high surrogate \\u%04x (no low surrogate follows)", (unsigned)cp);
                    p->pos += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                break;
            default: return jfail(p, at, "bad escape '\\%c'", k);
            }
        } else if (c < 0x80) {
            cp = c;
            p->pos++;
        } else {
            size_t k = pt__utf8_next((const unsigned char *)p->s + p->pos, p->n - p->pos, &cp);
            if (k == 0)
                return jfail(p, p->pos, "invalid UTF-8 inside a string");
            p->pos += k;
        }
        if (raw)
            put_cp(raw, cp);
        if (p->out)
            dump_cp(p->out, cp);
    }
    if (p->out)
        pt__strbuf_putc(p->out, '"');
    return PT_OK;
}

int pt__chat_json_string(pt_strbuf *raw, const char *s, size_t n, size_t *pos, pt_chat_json_err *e)
{
    jparser p = {.s = s, .n = n, .pos = *pos, .indent = -1, .e = e};
    if (p.pos >= n || s[p.pos] != '"')
        return jfail(&p, p.pos, "expected a string");
    int st = jstring(&p, raw);
    *pos = p.pos;
    return st;
}

/* ---- numbers ------------------------------------------------------------- */
static bool round_trips(const char *text, double v)
{
    return strtod(text, NULL) == v;
}

/* digits (no sign, no leading zero, ndig of them) x 10^(exp10 - ndig + 1) as
 * "%.Ne" text for strtod. */
static void sci_text(char *buf, size_t cap, bool neg, const char *digits, int ndig, int exp10)
{
    snprintf(buf, cap, "%s%c.%.*se%d", neg ? "-" : "", digits[0], ndig - 1, digits + 1, exp10);
}

/* Add `delta` (+1 or -1) to the last digit of digits[0..ndig); false when the
 * result changes the digit count (carry out of or borrow from the first digit). */
static bool bump(char *digits, int ndig, int delta)
{
    for (int i = ndig - 1; i >= 0; i--) {
        int d = digits[i] - '0' + delta;
        if (d >= 0 && d <= 9) {
            digits[i] = (char)('0' + d);
            return i > 0 || d != 0;
        }
        digits[i] = delta > 0 ? '0' : '9';
    }
    return false;
}

/* The shortest digits d1..dk and exponent (v = 0.d1..dk x 10^decpt) that read
 * back as v, the nearest such when several have k digits (David Gay's mode 0,
 * which Python's repr uses). v finite, non-zero, positive. */
static void shortest(char *digits, int *ndig, int *decpt, double v)
{
    char buf[64];
    for (int k = 1; k <= 17; k++) {
        snprintf(buf, sizeof buf, "%.*e", k - 1, v);
        /* buf: d[.ddd]e[+-]xx */
        char dig[24];
        int nd = 0;
        const char *q = buf;
        for (; *q && *q != 'e'; q++)
            if (*q >= '0' && *q <= '9')
                dig[nd++] = *q;
        int exp10 = atoi(q + 1);
        if (round_trips(buf, v)) {
            memcpy(digits, dig, (size_t)nd);
            *ndig = nd;
            *decpt = exp10 + 1;
            return;
        }
        /* The nearest k-digit decimal does not read back, but at a power of
         * two the rounding interval is wider on one side: try both neighbours. */
        for (int delta = -1; delta <= 1; delta += 2) {
            char alt[24];
            memcpy(alt, dig, (size_t)nd);
            if (!bump(alt, nd, delta))
                continue;
            char t[64];
            sci_text(t, sizeof t, false, alt, nd, exp10);
            if (round_trips(t, v)) {
                memcpy(digits, alt, (size_t)nd);
                *ndig = nd;
                *decpt = exp10 + 1;
                return;
            }
        }
    }
    /* 17 significant digits always read back */
    snprintf(buf, sizeof buf, "%.16e", v);
    int nd = 0;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[nd++] = *q;
    *ndig = nd;
    *decpt = atoi(q + 1) + 1;
}

int pt__chat_put_py_float(pt_strbuf *b, double v)
{
    if (isnan(v))
        return pt__strbuf_puts(b, "NaN");
    if (isinf(v))
        return pt__strbuf_puts(b, v < 0 ? "-Infinity" : "Infinity");
    if (signbit(v))
        pt__strbuf_putc(b, '-');
    v = fabs(v);
    if (v == 0)
        return pt__strbuf_puts(b, "0.0");
    char d[24];
    int nd = 0, decpt = 0;
    shortest(d, &nd, &decpt, v);
    while (nd > 1 && d[nd - 1] == '0')
        nd--;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            pt__strbuf_puts(b, "0.");
            for (int i = 0; i < -decpt; i++)
                pt__strbuf_putc(b, '0');
            return pt__strbuf_put(b, d, (size_t)nd);
        }
        if (decpt >= nd) {
            pt__strbuf_put(b, d, (size_t)nd);
            for (int i = nd; i < decpt; i++)
                pt__strbuf_putc(b, '0');
            return pt__strbuf_puts(b, ".0");
        }
        pt__strbuf_put(b, d, (size_t)decpt);
        pt__strbuf_putc(b, '.');
        return pt__strbuf_put(b, d + decpt, (size_t)(nd - decpt));
    }
    /* exponent form: d[.ddd]e+XX, at least two exponent digits */
    pt__strbuf_putc(b, d[0]);
    if (nd > 1) {
        pt__strbuf_putc(b, '.');
        pt__strbuf_put(b, d + 1, (size_t)(nd - 1));
    }
    char e[16];
    int x = decpt - 1;
    snprintf(e, sizeof e, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    return pt__strbuf_puts(b, e);
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int jnumber(jparser *p)
{
    size_t start = p->pos, i = p->pos;
    const char *s = p->s;
    bool neg = false, is_float = false;
    if (i < p->n && s[i] == '-') {
        neg = true;
        i++;
    }
    size_t int_start = i;
    if (i >= p->n || !is_digit(s[i]))
        return jfail(p, start, "bad number (a digit must follow '-')");
    if (s[i] == '0') {
        i++;
        if (i < p->n && is_digit(s[i]))
            return jfail(p, start, "bad number (no leading zeros)");
    } else {
        while (i < p->n && is_digit(s[i]))
            i++;
    }
    size_t int_end = i;
    if (i < p->n && s[i] == '.') {
        is_float = true;
        i++;
        if (i >= p->n || !is_digit(s[i]))
            return jfail(p, start, "bad number (a digit must follow '.')");
        while (i < p->n && is_digit(s[i]))
            i++;
    }
    if (i < p->n && (s[i] == 'e' || s[i] == 'E')) {
        is_float = true;
        i++;
        if (i < p->n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= p->n || !is_digit(s[i]))
            return jfail(p, start, "bad number (a digit must follow the exponent)");
        while (i < p->n && is_digit(s[i]))
            i++;
    }
    p->pos = i;
    if (!is_float) {
        if (int_end - int_start > PY_INT_MAX_DIGITS)
            return jfail(p, start, "integer with more than %d digits", PY_INT_MAX_DIGITS);
        bool zero = int_end - int_start == 1 && s[int_start] == '0';
        if (neg && !zero)
            emit(p, "-", 1);
        emit(p, s + int_start, int_end - int_start);
        return PT_OK;
    }
    if (!p->out)
        return PT_OK;
    char small[64];
    char *text = small;
    size_t len = i - start;
    if (len >= sizeof small && !(text = pt__malloc(len + 1)))
        return PT_ENOMEM;
    memcpy(text, s + start, len);
    text[len] = '\0';
    double v = strtod(text, NULL); /* correctly rounded, as Python's float() */
    if (text != small)
        free(text);
    return pt__chat_put_py_float(p->out, v);
}

/* ---- values ------------------------------------------------------------------ */
static int jvalue(jparser *p, int level);

static bool literal(jparser *p, const char *lit)
{
    size_t k = strlen(lit);
    if (p->n - p->pos < k || memcmp(p->s + p->pos, lit, k) != 0)
        return false;
    p->pos += k;
    emit(p, lit, k);
    return true;
}

/* Keys seen in one object, for the duplicate check (decoded, NUL-separated). */
typedef struct keyset {
    pt_strbuf all;
    size_t *off;
    size_t n, cap;
} keyset;

static int key_seen(keyset *ks, const char *k, size_t len, bool *dup)
{
    *dup = false;
    for (size_t i = 0; i < ks->n; i++) {
        size_t b = ks->off[i], e = i + 1 < ks->n ? ks->off[i + 1] - 1 : ks->all.len - 1;
        if (e - b == len && memcmp(ks->all.p + b, k, len) == 0) {
            *dup = true;
            return PT_OK;
        }
    }
    if (ks->n == ks->cap) {
        size_t *o = pt__grow_array(ks->off, &ks->cap, 8, sizeof *o);
        if (!o)
            return PT_ENOMEM;
        ks->off = o;
    }
    ks->off[ks->n++] = ks->all.len;
    pt__strbuf_put(&ks->all, k, len);
    pt__strbuf_putc(&ks->all, '\0');
    return ks->all.err;
}

static int jobject(jparser *p, int level)
{
    size_t open = p->pos++;
    p->pos = pt__chat_json_ws(p->s, p->n, p->pos);
    if (p->pos < p->n && p->s[p->pos] == '}') {
        p->pos++;
        emits(p, "{}");
        return PT_OK;
    }
    emits(p, "{");
    keyset ks = {0};
    pt_strbuf key = {0};
    int st = PT_OK;
    for (bool first = true;; first = false) {
        p->pos = pt__chat_json_ws(p->s, p->n, p->pos);
        if (p->pos >= p->n) {
            st = jfail(p, open, "unterminated object");
            break;
        }
        if (p->s[p->pos] != '"') {
            st = jfail(p, p->pos, first ? "expected a key string or '}'" : "expected a key string after ','");
            break;
        }
        if (!first)
            emits(p, p->indent >= 0 ? "," : ", ");
        if (p->indent >= 0)
            newline(p, level + 1);
        size_t kat = p->pos;
        tk_strbuf_reuse(&key);
        if ((st = jstring(p, &key)) != PT_OK)
            break;
        bool dup = false;
        if ((st = key_seen(&ks, key.p ? key.p : "", key.len, &dup)) != PT_OK)
            break;
        if (dup) {
            st = jfail(p, kat, "duplicate key \"%.*s\"", (int)(key.len > 40 ? 40 : key.len), key.p);
            break;
        }
        p->pos = pt__chat_json_ws(p->s, p->n, p->pos);
        if (p->pos >= p->n || p->s[p->pos] != ':') {
            st = jfail(p, p->pos, "expected ':' after an object key");
            break;
        }
        p->pos++;
        emits(p, ": ");
        if ((st = jvalue(p, level + 1)) != PT_OK)
            break;
        p->pos = pt__chat_json_ws(p->s, p->n, p->pos);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == '}') {
            p->pos++;
            if (p->indent >= 0)
                newline(p, level);
            emits(p, "}");
            break;
        }
        st = p->pos >= p->n ? jfail(p, open, "unterminated object") : jfail(p, p->pos, "expected ',' or '}' in an object");
        break;
    }
    pt__strbuf_free(&key);
    pt__strbuf_free(&ks.all);
    free(ks.off);
    return st;
}

static int jarray(jparser *p, int level)
{
    size_t open = p->pos++;
    p->pos = pt__chat_json_ws(p->s, p->n, p->pos);
    if (p->pos < p->n && p->s[p->pos] == ']') {
        p->pos++;
        emits(p, "[]");
        return PT_OK;
    }
    emits(p, "[");
    for (bool first = true;; first = false) {
        if (!first)
            emits(p, p->indent >= 0 ? "," : ", ");
        if (p->indent >= 0)
            newline(p, level + 1);
        int st = jvalue(p, level + 1);
        if (st != PT_OK)
            return st;
        p->pos = pt__chat_json_ws(p->s, p->n, p->pos);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == ']') {
            p->pos++;
            if (p->indent >= 0)
                newline(p, level);
            emits(p, "]");
            return PT_OK;
        }
        return p->pos >= p->n ? jfail(p, open, "unterminated array") : jfail(p, p->pos, "expected ',' or ']' in an array");
    }
}

static int jvalue(jparser *p, int level)
{
    if (level > JSON_MAX_DEPTH)
        return jfail(p, p->pos, "nested deeper than %d levels", JSON_MAX_DEPTH);
    p->pos = pt__chat_json_ws(p->s, p->n, p->pos);
    if (p->pos >= p->n)
        return jfail(p, p->pos, "expected a value, found the end of the text");
    char c = p->s[p->pos];
    switch (c) {
    case '{': return jobject(p, level);
    case '[': return jarray(p, level);
    case '"': return jstring(p, NULL);
    case 't':
        if (literal(p, "true"))
            return PT_OK;
        break;
    case 'f':
        if (literal(p, "false"))
            return PT_OK;
        break;
    case 'n':
        if (literal(p, "null"))
            return PT_OK;
        break;
    default:
        if ((c == '-' && !(p->pos + 1 < p->n && p->s[p->pos + 1] == 'I')) || is_digit(c))
            return jnumber(p);
        break;
    }
    if (c == 'N' || c == 'I' || (c == '-' && p->pos + 1 < p->n && p->s[p->pos + 1] == 'I'))
        return jfail(p, p->pos, "NaN and Infinity are not JSON");
    return jfail(p, p->pos, "expected a value");
}

int pt__chat_json_value(pt_strbuf *out, const char *s, size_t n, size_t *pos, int indent, pt_chat_json_err *e)
{
    jparser p = {.s = s, .n = n, .pos = *pos, .out = out, .indent = indent, .e = e};
    int st = jvalue(&p, 0);
    *pos = p.pos;
    if (st == PT_OK && out && out->err)
        st = out->err;
    return st;
}

int pt__chat_json_dump(pt_strbuf *out, const char *s, size_t n, int indent, pt_chat_json_err *e)
{
    size_t pos = 0;
    int st = pt__chat_json_value(out, s, n, &pos, indent, e);
    if (st != PT_OK)
        return st;
    pos = pt__chat_json_ws(s, n, pos);
    if (pos < n) {
        jparser p = {.e = e};
        return jfail(&p, pos, "text after the JSON value");
    }
    return PT_OK;
}
