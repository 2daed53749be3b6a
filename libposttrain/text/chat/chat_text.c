/* Writing a rendering: the text, the cuts and assistant spans recorded
 * along it, and the Python str.strip the Jinja sources rely on (their
 * json.dumps is io/json.h's pt__json_put_string_ex). */
#include "text/chat/chat_render.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* ---- cuts and spans ------------------------------------------------------------ */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return PT_OK;
    void *p = pt__grow_array(*arr, cap, 16, elem);
    if (!p)
        return PT_ENOMEM;
    *arr = p;
    return PT_OK;
}

int chat_cut_before(pt_chat_rendering *r, const char *marker)
{
    if (!marker || !*marker || r->text.len == 0)
        return PT_OK;
    int st = grow((void **)&r->cuts, &r->cap_cuts, r->n_cuts, sizeof *r->cuts);
    if (st != PT_OK)
        return st;
    r->cuts[r->n_cuts++] = (pt_chat_cut){r->text.len, r->text.len, strlen(marker)};
    return PT_OK;
}

int chat_cut_after(pt_chat_rendering *r, const char *marker)
{
    if (!marker || !*marker)
        return PT_OK;
    size_t n = strlen(marker);
    if (r->text.len < n || memcmp(r->text.p + r->text.len - n, marker, n) != 0)
        return PT_OK;
    int st = grow((void **)&r->cuts, &r->cap_cuts, r->n_cuts, sizeof *r->cuts);
    if (st != PT_OK)
        return st;
    r->cuts[r->n_cuts++] = (pt_chat_cut){r->text.len, r->text.len - n, n};
    return PT_OK;
}

int chat_span_open(pt_chat_rendering *r)
{
    int st = grow((void **)&r->spans, &r->cap_spans, r->n_spans, sizeof *r->spans);
    if (st != PT_OK)
        return st;
    r->spans[r->n_spans++] = (pt_chat_span){r->text.len, r->text.len};
    return PT_OK;
}

void chat_span_close(pt_chat_rendering *r)
{
    r->spans[r->n_spans - 1].end = r->text.len;
}

/* ---- Python string semantics --------------------------------------------- */

/* Length of the UTF-8 whitespace character (Python str.isspace) at s[0..n), or 0. */
static size_t space_len(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80)
        return ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) ? 1 : 0;
    if (c == 0xc2 && n >= 2)
        return (s[1] == 0x85 || s[1] == 0xa0) ? 2 : 0;
    if (n >= 3) {
        unsigned cp;
        if (c == 0xe1 && s[1] == 0x9a && s[2] == 0x80)
            return 3; /* U+1680 */
        if (c == 0xe2 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80) {
            cp = 0x2000u | ((unsigned)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
            if ((cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
                cp == 0x205f)
                return 3;
        }
        if (c == 0xe3 && s[1] == 0x80 && s[2] == 0x80)
            return 3; /* U+3000 */
    }
    return 0;
}

/* Length of the whitespace character ending at s[e) (not before s[b]), or 0. */
static size_t space_len_back(const unsigned char *s, size_t b, size_t e)
{
    for (size_t k = 1; k <= 3 && k <= e - b; k++)
        if (space_len(s + e - k, k) == k)
            return k;
    return 0;
}

void pt__chat_py_strip(const char *s, size_t *b, size_t *e, bool left, bool right)
{
    const unsigned char *u = (const unsigned char *)s;
    if (left) {
        size_t l;
        while (*b < *e && (l = space_len(u + *b, *e - *b)) > 0)
            *b += l;
    }
    if (right) {
        size_t l;
        while (*e > *b && (l = space_len_back(u, *b, *e)) > 0)
            *e -= l;
    }
}

int chat_emit_stripped(pt_chat_rendering *r, const char *s, size_t n)
{
    size_t b = 0, e = n;
    pt__chat_py_strip(s, &b, &e, true, true);
    return chat_emit(r, s + b, e - b);
}

/* ---- tools ------------------------------------------------------------------ */
int chat_emit_tool(chat_render_ctx *c, size_t i, int indent)
{
    const pt_chat_span *t = &c->tools[i];
    pt_chat_json_err e;
    return pt__chat_json_dump(&c->r->text, c->tools_json + t->begin, t->end - t->begin, indent, &e);
}

int chat_emit_arguments(chat_render_ctx *c, const pt_chat_tool_call *call)
{
    if (!call->arguments)
        return chat_emits(c->r, "{}");
    pt_chat_json_err e;
    return pt__chat_json_dump(&c->r->text, call->arguments, strlen(call->arguments), -1, &e);
}
