/* The strict safetensors header lexer.
 *
 * cJSON is lenient (raw control characters in strings, any byte <= 0x20 as
 * whitespace, non-UTF-8, "\u0000", numbers through strtod, trailing bytes).
 * This pass enforces strict JSON lexical rules on the raw header and records
 * every number token exactly, in document order (see safetensors_internal.h). */
#include "io/safetensors_internal.h"

#include "core/core.h"
#include "core/utf8.h"

#include <string.h>

static bool is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int lex_push(st_lex_result *lr, st_num_token t)
{
    if (lr->n_nums == lr->cap_nums) {
        st_num_token *p = pt__grow_array(lr->nums, &lr->cap_nums, 64, sizeof *p);
        if (!p)
            return PT_ENOMEM;
        lr->nums = p;
    }
    lr->nums[lr->n_nums++] = t;
    return PT_OK;
}

/* The string opening at h[*pos] (a '"'); *pos moves past its closing quote. */
static int lex_string(const uint8_t *h, size_t n, size_t *pos)
{
    size_t i = *pos + 1;
    for (;;) {
        if (i >= n)
            return pt__err(PT_EFORMAT, "header JSON has an unterminated string");
        uint8_t c = h[i];
        if (c == '"') {
            *pos = i + 1;
            return PT_OK;
        }
        if (c < 0x20)
            return pt__err(PT_EFORMAT,
                          "header has a raw control character 0x%02x in a string at offset %zu", c, i);
        if (c == '\\') {
            if (i + 1 >= n)
                return pt__err(PT_EFORMAT, "header JSON has an unterminated string");
            if (h[i + 1] == 'u' && i + 5 < n && memcmp(h + i + 2, "0000", 4) == 0)
                return pt__err(PT_EFORMAT,
                              "header string contains the escape \\u0000 at offset %zu "
                              "(NUL is not allowed in names or metadata)", i);
            i += 2;
            continue;
        }
        uint32_t cp;
        size_t k = pt__utf8_next(h + i, n - i, &cp);
        if (k == 0)
            return pt__err(PT_EFORMAT, "header is not valid UTF-8 at offset %zu", i);
        i += k;
    }
}

static bool is_number_byte(uint8_t d)
{
    return d == '-' || d == '+' || d == '.' || d == 'e' || d == 'E' || (d >= '0' && d <= '9');
}

/* The number starting at h[*pos]: its token (value exact up to 17 digits, or
 * why it is not a valid size) is recorded; *pos moves past it. */
static int lex_number(st_lex_result *lr, const uint8_t *h, size_t n, size_t *pos)
{
    size_t start = *pos, i = *pos;
    bool neg = false, frac = false, too_long = false;
    size_t digits = 0;
    uint64_t v = 0;
    while (i < n && is_number_byte(h[i])) {
        uint8_t d = h[i];
        if (d == '-' && i == start)
            neg = true;
        else if (d < '0' || d > '9')
            frac = true;
        else if (!frac) {
            digits++;
            if (digits > 17)
                too_long = true;
            else
                v = v * 10 + (uint64_t)(d - '0');
        }
        i++;
    }
    st_num_token t = {.value = v, .pos = (uint32_t)start, .kind = ST_NUM_OK};
    if (neg)
        t.kind = ST_NUM_NEGATIVE;
    else if (frac)
        t.kind = ST_NUM_NOT_INTEGER;
    else if (digits > 1 && h[start] == '0')
        t.kind = ST_NUM_LEADING_ZERO;
    else if (too_long || v > PT_ST_MAX_INT)
        t.kind = ST_NUM_TOO_LARGE;
    *pos = i;
    return lex_push(lr, t);
}

int pt__st_lex_header(st_lex_result *lr, const uint8_t *h, size_t n)
{
    if (n == 0 || h[0] != '{')
        return pt__err(PT_EFORMAT, "header does not start with '{' (the header must be a JSON object)");
    size_t depth = 0;
    size_t i = 0;
    while (i < n) {
        uint8_t c = h[i];
        int st = PT_OK;
        if (depth == 0 && i > 0) {
            /* after the top-level object: only space padding */
            if (c != ' ')
                return pt__err(PT_EFORMAT,
                              "header has trailing byte 0x%02x at offset %zu after the JSON object "
                              "(only space padding is allowed)", c, i);
            i++;
        } else if (c == '"') {
            st = lex_string(h, n, &i);
        } else if (c == '{' || c == '[') {
            depth++;
            i++;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return pt__err(PT_EFORMAT, "header JSON has an unbalanced '%c' at offset %zu", c, i);
            depth--;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            st = lex_number(lr, h, n, &i);
        } else if (c < 0x20 && !is_ws(c)) {
            return pt__err(PT_EFORMAT, "header has a control character 0x%02x at offset %zu", c, i);
        } else if (c >= 0x80) {
            return pt__err(PT_EFORMAT, "header has a non-ASCII byte 0x%02x outside a string at offset %zu",
                          c, i);
        } else {
            i++;
        }
        if (st != PT_OK)
            return st;
    }
    if (depth != 0)
        return pt__err(PT_EFORMAT, "header JSON object is not closed (truncated header?)");
    return PT_OK;
}
