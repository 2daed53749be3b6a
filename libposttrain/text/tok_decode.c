/* Decoding: ids -> token strings -> the decoder chain -> text, as the Hugging
 * Face tokenizers library does it (each decoder maps a list of strings to a
 * list of strings; the result is their concatenation). */
#include "text/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct tk_list {
    tk_buf data;
    tk_ranges r;
} tk_list;

static void list_clear(tk_list *l)
{
    l->data.n = 0;
    l->r.n = 0;
}

static void list_free(tk_list *l)
{
    tk_buf_free(&l->data);
    free(l->r.v);
}

/* Append a new item that holds s[0..n). */
static int list_push(tk_list *l, const char *s, size_t n)
{
    size_t a = l->data.n;
    int st = tk_buf_put(&l->data, s, n);
    if (st == 0)
        st = tk_ranges_push(&l->r, a, l->data.n, 0);
    return st;
}

/* Open an item; append bytes with tk_buf_put(&l->data, ...); close it. */
static size_t list_open(tk_list *l)
{
    return l->data.n;
}

static int list_close(tk_list *l, size_t a)
{
    return tk_ranges_push(&l->r, a, l->data.n, 0);
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

static int dec_bytelevel(const tk_list *in, tk_list *out, tk_buf *tmp)
{
    tmp->n = 0;
    for (size_t i = 0; i < in->r.n; i++) {
        const char *s = ITEM(in, i);
        size_t n = ITEM_LEN(in, i), start = tmp->n, j = 0;
        bool ok = true;
        while (j < n) {
            uint32_t cp;
            size_t k = tk_utf8_unit(s + j, n - j, &cp);
            int b = cp == 0xFFFFFFFFu ? -1 : bytelevel_byte(cp);
            if (b < 0) {
                ok = false;
                break;
            }
            int st = tk_buf_putc(tmp, (char)b);
            if (st)
                return st;
            j += k;
        }
        if (!ok) {
            tmp->n = start;
            int st = tk_buf_put(tmp, s, n);
            if (st)
                return st;
        }
    }
    size_t a = list_open(out);
    int st = tk_utf8_lossy(&out->data, tmp->p ? tmp->p : "", tmp->n);
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

static int flush_bytes(tk_list *out, tk_buf *pend)
{
    if (pend->n == 0)
        return 0;
    int st;
    if (tk_utf8_valid(pend->p, pend->n)) {
        st = list_push(out, pend->p, pend->n);
    } else {
        st = 0;
        for (size_t k = 0; k < pend->n && st == 0; k++)
            st = list_push(out, "\xEF\xBF\xBD", 3);
    }
    pend->n = 0;
    return st;
}

static int dec_bytefallback(const tk_list *in, tk_list *out, tk_buf *pend)
{
    pend->n = 0;
    int st;
    for (size_t i = 0; i < in->r.n; i++) {
        int b = fallback_byte(ITEM(in, i), ITEM_LEN(in, i));
        if (b >= 0) {
            if ((st = tk_buf_putc(pend, (char)b)))
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
        int st = tk_buf_put(&out->data, ITEM(in, i), ITEM_LEN(in, i));
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
            size_t p = b - 1;
            while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80 && b - p < 4)
                p--;
            size_t len = tk_utf8_unit(s + p, b - p, &cp);
            if (p + len != b || cp != d->strip_cp)
                break;
            b = p;
        }
        int st = list_push(out, s + a, b - a);
        if (st)
            return st;
    }
    return 0;
}

static int dec_replace(const tk_dec *d, const tk_list *in, tk_list *out, pcre2_match_data *md)
{
    for (size_t i = 0; i < in->r.n; i++) {
        const char *s = ITEM(in, i);
        size_t n = ITEM_LEN(in, i), pos = 0, a0 = list_open(out);
        int st;
        while (pos <= n) {
            int rc = d->re.jit ? pcre2_jit_match(d->re.code, (PCRE2_SPTR)s, n, pos, 0, md, NULL)
                               : pcre2_match(d->re.code, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0)
                return pt_err(PT_ERANGE, "tokenizer: decoder regex matching failed (%d)", rc);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) {
                /* empty match: keep one character and go on */
                if (ov[0] >= n)
                    break;
                uint32_t cp;
                size_t k = tk_utf8_unit(s + ov[0], n - ov[0], &cp);
                if ((st = tk_buf_put(&out->data, s + pos, ov[0] + k - pos)))
                    return st;
                pos = ov[0] + k;
                continue;
            }
            if ((st = tk_buf_put(&out->data, s + pos, ov[0] - pos)) ||
                (st = tk_buf_put(&out->data, d->content, d->content_len)))
                return st;
            pos = ov[1];
        }
        if (pos < n && (st = tk_buf_put(&out->data, s + pos, n - pos)))
            return st;
        if ((st = list_close(out, a0)))
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
                if ((st = tk_buf_put(&out->data, s + run, j - run)))
                    return st;
                if (!(i == 0 && d->prefix) && (st = tk_buf_putc(&out->data, ' ')))
                    return st;
                j += d->repl_len;
                run = j;
            } else {
                uint32_t cp;
                j += tk_utf8_unit(s + j, n - j, &cp);
            }
        }
        if ((st = tk_buf_put(&out->data, s + run, n - run)) || (st = list_close(out, a0)))
            return st;
    }
    return 0;
}

int tk_decode(tk_buf *out, const pt_tokenizer *t, const int32_t *ids, size_t n, unsigned flags)
{
    tk_list L[2];
    memset(L, 0, sizeof L);
    tk_buf tmp = {0};
    pcre2_match_data *md = NULL;
    int st = 0, cur = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size) {
            st = pt_err(PT_ERANGE, "tokenizer: decode: id %d at position %zu is outside the vocabulary (size %d)",
                        (int)id, i, (int)t->vocab_size);
            goto done;
        }
        if (!t->id_str[id])
            continue;  /* unused id: skipped, as the reference does */
        if ((flags & PT_TOK_SKIP_SPECIAL) && (t->id_flags[id] & 2))
            continue;
        if ((st = list_push(&L[0], t->id_str[id], t->id_len[id])))
            goto done;
    }
    if (!t->has_decoder) {
        for (size_t i = 0; i < L[0].r.n; i++) {
            if ((i > 0 && (st = tk_buf_putc(out, ' '))) || (st = tk_buf_put(out, ITEM(&L[0], i), ITEM_LEN(&L[0], i))))
                goto done;
        }
        goto done;
    }
    for (size_t k = 0; k < t->n_dec; k++) {
        const tk_dec *d = &t->dec[k];
        tk_list *in = &L[cur], *o = &L[cur ^ 1];
        list_clear(o);
        switch (d->kind) {
        case TKD_BYTELEVEL:
            st = dec_bytelevel(in, o, &tmp);
            break;
        case TKD_BYTEFALLBACK:
            st = dec_bytefallback(in, o, &tmp);
            break;
        case TKD_FUSE:
            st = dec_fuse(in, o);
            break;
        case TKD_STRIP:
            st = dec_strip(d, in, o);
            break;
        case TKD_REPLACE:
            if (!md && !(md = pcre2_match_data_create(1, NULL))) {
                st = pt_err(PT_ENOMEM, "tokenizer: out of memory (regex match data)");
                break;
            }
            st = dec_replace(d, in, o, md);
            break;
        case TKD_METASPACE:
            st = dec_metaspace(d, in, o);
            break;
        }
        if (st)
            goto done;
        cur ^= 1;
    }
    for (size_t i = 0; i < L[cur].r.n; i++)
        if ((st = tk_buf_put(out, ITEM(&L[cur], i), ITEM_LEN(&L[cur], i))))
            goto done;
done:
    list_free(&L[0]);
    list_free(&L[1]);
    tk_buf_free(&tmp);
    if (md)
        pcre2_match_data_free(md);
    return st;
}
