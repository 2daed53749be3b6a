/* Decoding: ids -> token strings -> the decoder chain -> text, as the Hugging
 * Face tokenizers library does it (each decoder maps a list of strings to a
 * list of strings; the result is their concatenation). */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct tk_list {
    pt_strbuf data;
    tk_ranges r;
} tk_list;

static void list_clear(tk_list *l)
{
    pt__strbuf_clear(&l->data);
    l->r.n = 0;
}

static void list_free(tk_list *l)
{
    pt__strbuf_free(&l->data);
    free(l->r.v);
}

/* Append a new item that holds s[0..n). */
static int list_push(tk_list *l, const char *s, size_t n)
{
    size_t a = l->data.len;
    int st = pt__strbuf_put(&l->data, s, n);
    return st ? st : tk_ranges_push(&l->r, a, l->data.len, 0);
}

/* Open an item; append bytes with pt__strbuf_put(&l->data, ...); close it. */
static size_t list_open(tk_list *l)
{
    return l->data.len;
}

static int list_close(tk_list *l, size_t a)
{
    int st = l->data.err;
    return st ? st : tk_ranges_push(&l->r, a, l->data.len, 0);
}

#define ITEM(l, i) ((l)->data.p + (l)->r.v[i].a)
#define ITEM_LEN(l, i) ((l)->r.v[i].b - (l)->r.v[i].a)

/* Byte-level alphabet, reversed: code point -> byte, or -1. */
static int bytelevel_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp < 256 + 33)
        return (int)(cp - 256);
    if (cp >= 256 + 33 && cp < 256 + 67)
        return (int)(127 + cp - 256 - 33);
    if (cp == 256 + 67)
        return 173;
    return -1;
}

static int dec_bytelevel(const tk_list *in, tk_list *out, pt_strbuf *tmp)
{
    pt__strbuf_clear(tmp);
    for (size_t i = 0; i < in->r.n; i++) {
        const char *s = ITEM(in, i);
        size_t n = ITEM_LEN(in, i), start = tmp->len, j = 0;
        bool ok = true;
        while (j < n) {
            uint32_t cp;
            size_t k = tk_utf8_unit(s + j, n - j, &cp);
            int b = cp == TK_BAD_CP ? -1 : bytelevel_byte(cp);
            if (b < 0) {
                ok = false;
                break;
            }
            int st = pt__strbuf_putc(tmp, (char)b);
            if (st)
                return st;
            j += k;
        }
        if (!ok) {
            tmp->len = start;
            int st = pt__strbuf_put(tmp, s, n);
            if (st)
                return st;
        }
    }
    size_t a = list_open(out);
    int st = tk_utf8_lossy(&out->data, tmp->p ? tmp->p : "", tmp->len);
    return st ? st : list_close(out, a);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "<0xHH>" -> byte (u8::from_str_radix semantics, which also accept "+H"). */
static int fallback_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    if (s[3] == '+' && lo >= 0)
        return lo;
    if (hi < 0 || lo < 0)
        return -1;
    return hi * 16 + lo;
}

static int flush_bytes(tk_list *out, pt_strbuf *pend)
{
    if (pend->len == 0)
        return 0;
    int st;
    if (pt__utf8_valid(pend->p, pend->len)) {
        st = list_push(out, pend->p, pend->len);
    } else {
        st = 0;
        for (size_t k = 0; k < pend->len && st == 0; k++)
            st = list_push(out, "\xEF\xBF\xBD", 3);
    }
    pt__strbuf_clear(pend);
    return st;
}

static int dec_bytefallback(const tk_list *in, tk_list *out, pt_strbuf *pend)
{
    pt__strbuf_clear(pend);
    int st;
    for (size_t i = 0; i < in->r.n; i++) {
        int b = fallback_byte(ITEM(in, i), ITEM_LEN(in, i));
        if (b >= 0) {
            if ((st = pt__strbuf_putc(pend, (char)b)))
                return st;
            continue;
        }
        if ((st = flush_bytes(out, pend)) || (st = list_push(out, ITEM(in, i), ITEM_LEN(in, i))))
            return st;
    }
    return flush_bytes(out, pend);
}

static int dec_fuse(const tk_list *in, tk_list *out)
{
    size_t a = list_open(out);
    for (size_t i = 0; i < in->r.n; i++) {
        int st = pt__strbuf_put(&out->data, ITEM(in, i), ITEM_LEN(in, i));
        if (st)
            return st;
    }
    return list_close(out, a);
}

static int dec_strip(const tk_dec *d, const tk_list *in, tk_list *out)
{
    for (size_t i = 0; i < in->r.n; i++) {
        const char *s = ITEM(in, i);
        size_t n = ITEM_LEN(in, i), a = 0, b = n;
        uint32_t cp;
        for (size_t k = 0; k < d->strip_start && a < n; k++) {
            size_t len = tk_utf8_unit(s + a, n - a, &cp);
            if (cp != d->strip_cp)
                break;
            a += len;
        }
        for (size_t k = 0; k < d->strip_stop && b > a; k++) {
            size_t len = tk_utf8_unit_back(s, a, b, &cp);
            if (cp != d->strip_cp)
                break;
            b -= len;
        }
        int st = list_push(out, s + a, b - a);
        if (st)
            return st;
    }
    return 0;
}

static int dec_replace(const tk_dec *d, const tk_list *in, tk_list *out, tk_matcher *m)
{
    for (size_t i = 0; i < in->r.n; i++) {
        size_t a0 = list_open(out);
        int st = tk_regex_replace(&out->data, m, &d->re, ITEM(in, i), ITEM_LEN(in, i), d->content,
                                  d->content_len);
        if (st || (st = list_close(out, a0)))
            return st;
    }
    return 0;
}

static int dec_metaspace(const tk_dec *d, const tk_list *in, tk_list *out)
{
    for (size_t i = 0; i < in->r.n; i++) {
        const char *s = ITEM(in, i);
        size_t n = ITEM_LEN(in, i), a0 = list_open(out), j = 0, run = 0;
        int st;
        while (j < n) {
            if (n - j >= d->repl_len && memcmp(s + j, d->repl, d->repl_len) == 0) {
                pt__strbuf_put(&out->data, s + run, j - run);
                if (!(i == 0 && d->prefix))
                    pt__strbuf_putc(&out->data, ' ');
                j += d->repl_len;
                run = j;
            } else {
                uint32_t cp;
                j += tk_utf8_unit(s + j, n - j, &cp);
            }
        }
        pt__strbuf_put(&out->data, s + run, n - run);
        if ((st = list_close(out, a0)))
            return st;
    }
    return 0;
}

/* The token strings of ids into l (unused ids and, with SKIP_SPECIAL, special
 * tokens left out). */
static int gather_tokens(tk_list *l, const pt_tokenizer *t, const int32_t *ids, size_t n, unsigned flags)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size)
            return pt__err(PT_ERANGE, "tokenizer: decode: id %d at position %zu is outside the vocabulary (size %d)",
                          (int)id, i, (int)t->vocab_size);
        if (!t->id_str[id])
            continue;  /* unused id: skipped, as the reference does */
        if ((flags & PT_TOK_SKIP_SPECIAL) && (t->id_flags[id] & 2))
            continue;
        int st = list_push(l, t->id_str[id], t->id_len[id]);
        if (st)
            return st;
    }
    return 0;
}

/* One decoder from in to out (emptied first). */
static int run_decoder(const tk_dec *d, const tk_list *in, tk_list *out, pt_strbuf *tmp, tk_matcher *m)
{
    list_clear(out);
    switch (d->kind) {
    case TKD_BYTELEVEL:
        return dec_bytelevel(in, out, tmp);
    case TKD_BYTEFALLBACK:
        return dec_bytefallback(in, out, tmp);
    case TKD_FUSE:
        return dec_fuse(in, out);
    case TKD_STRIP:
        return dec_strip(d, in, out);
    case TKD_REPLACE: {
        int st = tk_matcher_ready(m, false);
        return st ? st : dec_replace(d, in, out, m);
    }
    case TKD_METASPACE:
        return dec_metaspace(d, in, out);
    }
    return pt__err(PT_EINTERNAL, "tokenizer: unknown decoder kind");
}

int tk_decode(pt_strbuf *out, const pt_tokenizer *t, const int32_t *ids, size_t n, unsigned flags)
{
    tk_list L[2];
    memset(L, 0, sizeof L);
    pt_strbuf tmp = PT_STRBUF_INIT;
    tk_matcher m = {0};
    int cur = 0;
    int st = gather_tokens(&L[0], t, ids, n, flags);
    if (st == 0 && !t->has_decoder) {
        /* no decoder: the tokens joined by spaces */
        for (size_t i = 0; i < L[0].r.n; i++) {
            if (i > 0)
                pt__strbuf_putc(out, ' ');
            st = pt__strbuf_put(out, ITEM(&L[0], i), ITEM_LEN(&L[0], i));
        }
        goto done;
    }
    for (size_t k = 0; k < t->n_dec && st == 0; k++) {
        st = run_decoder(&t->dec[k], &L[cur], &L[cur ^ 1], &tmp, &m);
        cur ^= 1;
    }
    for (size_t i = 0; i < L[cur].r.n && st == 0; i++)
        st = pt__strbuf_put(out, ITEM(&L[cur], i), ITEM_LEN(&L[cur], i));
done:
    list_free(&L[0]);
    list_free(&L[1]);
    pt__strbuf_free(&tmp);
    tk_matcher_free(&m);
    return st;
}
