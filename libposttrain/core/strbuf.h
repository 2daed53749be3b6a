/* A growable byte string, always NUL-terminated, with a sticky error.
 * Internal to libposttrain.
 *
 *     pt_strbuf b = PT_STRBUF_INIT;
 *     pt__strbuf_puts(&b, "{");
 *     pt__strbuf_printf(&b, "\"n\":%d", n);
 *     char *s = pt__strbuf_detach(&b, &len);   // NULL if any call above failed
 *
 * Every call returns PT_OK or the first error (PT_ENOMEM, with the message
 * already recorded); after an error every later call does nothing and returns
 * that error again, so a builder may check once at the end. */
#ifndef PT_CORE_STRBUF_H
#define PT_CORE_STRBUF_H

#include "core.h"

#include <stddef.h>

typedef struct pt_strbuf {
    char *p;        /* NULL until the first byte; then p[len] == '\0' */
    size_t len, cap;
    int err;        /* PT_OK, or the first failure */
} pt_strbuf;

#define PT_STRBUF_INIT { NULL, 0, 0, 0 }

/* Room for `extra` more bytes (plus the NUL). */
int pt__strbuf_reserve(pt_strbuf *b, size_t extra);
int pt__strbuf_put(pt_strbuf *b, const void *s, size_t n);
int pt__strbuf_puts(pt_strbuf *b, const char *s);
int pt__strbuf_printf(pt_strbuf *b, const char *fmt, ...) PT_PRINTF(2, 3);
static inline int pt__strbuf_putc(pt_strbuf *b, char c)
{
    if (b->err || b->len + 1 >= b->cap) {
        int st = pt__strbuf_reserve(b, 1);
        if (st)
            return st;
    }
    b->p[b->len++] = c;
    b->p[b->len] = '\0';
    return PT_OK;
}
/* Forget the contents, keep the memory (and clear no error). */
static inline void pt__strbuf_clear(pt_strbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}
/* The string (free with pt_free; "" when nothing was added) and its length,
 * or NULL after an earlier failure; either way the buffer is left empty. */
char *pt__strbuf_detach(pt_strbuf *b, size_t *len);
/* ', "KEY": V' of a JSON metrics row: V as %.6g, or null when not finite. */
int pt__json_num(pt_strbuf *b, const char *key, double v);
void pt__strbuf_free(pt_strbuf *b);

#endif
