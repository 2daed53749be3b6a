#include "strbuf.h"

#include <math.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pt__strbuf_reserve(pt_strbuf *b, size_t extra)
{
    if (b->err)
        return b->err;
    size_t need;
    if (!pt__add_size(b->len, extra, &need) || !pt__add_size(need, 1, &need))
        return b->err = pt__err(PT_ENOMEM, "string of %zu + %zu bytes is too long", b->len, extra);
    if (need <= b->cap)
        return PT_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *np = pt__realloc_array(b->p, cap, 1);
    if (!np)
        return b->err = PT_ENOMEM;
    b->p = np;
    b->cap = cap;
    return PT_OK;
}

int pt__strbuf_put(pt_strbuf *b, const void *s, size_t n)
{
    int st = pt__strbuf_reserve(b, n);
    if (st)
        return st;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return PT_OK;
}

int pt__strbuf_puts(pt_strbuf *b, const char *s)
{
    return pt__strbuf_put(b, s, strlen(s));
}

int pt__strbuf_printf(pt_strbuf *b, const char *fmt, ...)
{
    if (b->err)
        return b->err;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return b->err = pt__err(PT_EINTERNAL, "string formatting failed");
    int st = pt__strbuf_reserve(b, (size_t)n);
    if (st)
        return st;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return PT_OK;
}

char *pt__strbuf_detach(pt_strbuf *b, size_t *len)
{
    char *s = NULL;
    if (!b->err)
        s = b->p ? b->p : pt__strdup("");
    else
        pt_free(b->p);
    if (len)
        *len = s ? b->len : 0;
    b->p = NULL;
    b->len = b->cap = 0;
    b->err = PT_OK;
    return s;
}

void pt__strbuf_free(pt_strbuf *b)
{
    pt_free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->err = PT_OK;
}

int pt__json_num(pt_strbuf *b, const char *key, double v)
{
    if (isfinite(v))
        return pt__strbuf_printf(b, ", \"%s\": %.6g", key, v);
    return pt__strbuf_printf(b, ", \"%s\": null", key);
}
