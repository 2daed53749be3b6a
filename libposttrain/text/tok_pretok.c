/* Pre-tokenizers: ByteLevel (the GPT-2 byte alphabet, with or without its
 * regex), Split with its behaviors (and the simple splitters expressed as
 * Split), and Metaspace; stage after stage, then the model on each word. */
#include "text/tok_encode.h"

#include <string.h>

/* ---- splitting ------------------------------------------------------------------- */
/* Cover s[0..n) with alternating non-match / match ranges. */
static int re_find_all(tk_ranges *r, tk_ctx *c, const tk_regex *re, const char *s, size_t n)
{
    r->n = 0;
    size_t pos = 0, a, b;
    int st;
    while ((st = tk_regex_next(&c->re, re, s, n, pos, &a, &b)) == 1) {
        if (a > pos && (st = tk_ranges_push(r, pos, a, 0)))
            return st;
        if ((st = tk_ranges_push(r, a, b, 1)))
            return st;
        pos = b;
    }
    if (st < 0)
        return st;
    if (pos < n && (st = tk_ranges_push(r, pos, n, 0)))
        return st;
    return 0;
}

/* Apply a split behavior in place: on return r holds the ranges to keep. */
static void apply_behavior(tk_ranges *r, tk_behavior beh, bool invert)
{
    if (invert)
        for (size_t i = 0; i < r->n; i++)
            r->v[i].match = !r->v[i].match;
    size_t o = 0;
    int prev = 0;
    switch (beh) {
    case TKB_ISOLATED:
        break;
    case TKB_REMOVED:
        for (size_t i = 0; i < r->n; i++)
            if (!r->v[i].match)
                r->v[o++] = r->v[i];
        r->n = o;
        break;
    case TKB_CONTIGUOUS:
    case TKB_MERGED_PREV:
        /* A piece joins the one before it when it continues a run of its
         * kind (Contiguous) or is a match after a non-match (MergedWithPrevious). */
        for (size_t i = 0; i < r->n; i++) {
            int m = r->v[i].match;
            bool join = beh == TKB_CONTIGUOUS ? m == prev : m && !prev;
            if (o > 0 && join)
                r->v[o - 1].b = r->v[i].b;
            else
                r->v[o++] = r->v[i];
            prev = m;
        }
        r->n = o;
        break;
    case TKB_MERGED_NEXT: {
        /* Walk backwards: a match joins the piece after it. */
        size_t w = r->n;
        for (size_t k = r->n; k-- > 0;) {
            tk_range cur = r->v[k];
            if (w < r->n && cur.match && !prev)
                r->v[w].a = cur.a;
            else
                r->v[--w] = cur;
            prev = cur.match;
        }
        memmove(r->v, r->v + w, (r->n - w) * sizeof *r->v);
        r->n -= w;
        break;
    }
    }
}

/* ---- byte level ------------------------------------------------------------------ */
static const char *const BYTE_CHARS[256] = {
#define TKB2(x) x
    TKB2("\xC4\x80"), "\xC4\x81", "\xC4\x82", "\xC4\x83", "\xC4\x84", "\xC4\x85", "\xC4\x86", "\xC4\x87",
    "\xC4\x88", "\xC4\x89", "\xC4\x8A", "\xC4\x8B", "\xC4\x8C", "\xC4\x8D", "\xC4\x8E", "\xC4\x8F",
    "\xC4\x90", "\xC4\x91", "\xC4\x92", "\xC4\x93", "\xC4\x94", "\xC4\x95", "\xC4\x96", "\xC4\x97",
    "\xC4\x98", "\xC4\x99", "\xC4\x9A", "\xC4\x9B", "\xC4\x9C", "\xC4\x9D", "\xC4\x9E", "\xC4\x9F",
    "\xC4\xA0", "!", "\"", "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ":", ";", "<", "=", ">", "?",
    "@", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O",
    "P", "Q", "R", "S", "T", "U", "V", "W", "X", "Y", "Z", "[", "\\", "]", "^", "_",
    "`", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o",
    "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "{", "|", "}", "~", "\xC4\xA1",
    "\xC4\xA2", "\xC4\xA3", "\xC4\xA4", "\xC4\xA5", "\xC4\xA6", "\xC4\xA7", "\xC4\xA8", "\xC4\xA9",
    "\xC4\xAA", "\xC4\xAB", "\xC4\xAC", "\xC4\xAD", "\xC4\xAE", "\xC4\xAF", "\xC4\xB0", "\xC4\xB1",
    "\xC4\xB2", "\xC4\xB3", "\xC4\xB4", "\xC4\xB5", "\xC4\xB6", "\xC4\xB7", "\xC4\xB8", "\xC4\xB9",
    "\xC4\xBA", "\xC4\xBB", "\xC4\xBC", "\xC4\xBD", "\xC4\xBE", "\xC4\xBF", "\xC5\x80", "\xC5\x81",
    "\xC5\x82", "\xC2\xA1", "\xC2\xA2", "\xC2\xA3", "\xC2\xA4", "\xC2\xA5", "\xC2\xA6", "\xC2\xA7",
    "\xC2\xA8", "\xC2\xA9", "\xC2\xAA", "\xC2\xAB", "\xC2\xAC", "\xC5\x83", "\xC2\xAE", "\xC2\xAF",
    "\xC2\xB0", "\xC2\xB1", "\xC2\xB2", "\xC2\xB3", "\xC2\xB4", "\xC2\xB5", "\xC2\xB6", "\xC2\xB7",
    "\xC2\xB8", "\xC2\xB9", "\xC2\xBA", "\xC2\xBB", "\xC2\xBC", "\xC2\xBD", "\xC2\xBE", "\xC2\xBF",
    "\xC3\x80", "\xC3\x81", "\xC3\x82", "\xC3\x83", "\xC3\x84", "\xC3\x85", "\xC3\x86", "\xC3\x87",
    "\xC3\x88", "\xC3\x89", "\xC3\x8A", "\xC3\x8B", "\xC3\x8C", "\xC3\x8D", "\xC3\x8E", "\xC3\x8F",
    "\xC3\x90", "\xC3\x91", "\xC3\x92", "\xC3\x93", "\xC3\x94", "\xC3\x95", "\xC3\x96", "\xC3\x97",
    "\xC3\x98", "\xC3\x99", "\xC3\x9A", "\xC3\x9B", "\xC3\x9C", "\xC3\x9D", "\xC3\x9E", "\xC3\x9F",
    "\xC3\xA0", "\xC3\xA1", "\xC3\xA2", "\xC3\xA3", "\xC3\xA4", "\xC3\xA5", "\xC3\xA6", "\xC3\xA7",
    "\xC3\xA8", "\xC3\xA9", "\xC3\xAA", "\xC3\xAB", "\xC3\xAC", "\xC3\xAD", "\xC3\xAE", "\xC3\xAF",
    "\xC3\xB0", "\xC3\xB1", "\xC3\xB2", "\xC3\xB3", "\xC3\xB4", "\xC3\xB5", "\xC3\xB6", "\xC3\xB7",
    "\xC3\xB8", "\xC3\xB9", "\xC3\xBA", "\xC3\xBB", "\xC3\xBC", "\xC3\xBD", "\xC3\xBE", "\xC3\xBF",
#undef TKB2
};

const char *tk_byte_char(unsigned b, size_t *len)
{
    const char *s = BYTE_CHARS[b & 0xFF];
    *len = (unsigned char)s[0] < 0x80 ? 1 : 2;
    return s;
}

static int bytelevel_map_run(tk_ctx *c, size_t stage, const char *s, size_t n, bool first)
{
    pt_strbuf *m = &c->mbuf[stage];
    pt__strbuf_clear(m);
    int st = pt__strbuf_reserve(m, 2 * n);
    if (st)
        return st;
    char *o = m->p;
    for (size_t i = 0; i < n; i++) {
        const char *bc = BYTE_CHARS[(unsigned char)s[i]];
        o[0] = bc[0];
        if ((unsigned char)bc[0] >= 0x80) {
            o[1] = bc[1];
            o += 2;
        } else {
            o += 1;
        }
    }
    *o = '\0';
    m->len = (size_t)(o - m->p);
    return tk_pretokenize(c, stage + 1, m->p, m->len, first);
}

static int split_run(tk_ctx *c, size_t stage, const tk_regex *re, tk_behavior beh, bool invert, const char *s,
                     size_t n, bool first, bool bytelevel)
{
    tk_ranges *r = &c->rng[stage];
    int st = re_find_all(r, c, re, s, n);
    if (st)
        return st;
    apply_behavior(r, beh, invert);
    /* r is owned by this stage; deeper stages use their own. */
    for (size_t i = 0; i < r->n; i++) {
        size_t a = r->v[i].a, b = r->v[i].b;
        if (b <= a)
            continue;
        bool f = first && a == 0;
        st = bytelevel ? bytelevel_map_run(c, stage, s + a, b - a, f) : tk_pretokenize(c, stage + 1, s + a, b - a, f);
        if (st)
            return st;
    }
    return 0;
}

/* Metaspace: spaces become the replacement, which is prepended by scheme. */
static int metaspace_run(tk_ctx *c, size_t stage, const char *s, size_t n, bool first)
{
    const tk_pretok *p = &c->t->pre[stage];
    pt_strbuf *b = &c->sbuf[stage];
    pt__strbuf_clear(b);
    bool starts = n >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0;
    bool prepend = false;
    /* ' ' becomes the replacement first, so a leading space counts as one */
    if (s[0] == ' ')
        starts = true;
    if (p->scheme == TK_PREPEND_ALWAYS)
        prepend = !starts;
    else if (p->scheme == TK_PREPEND_FIRST)
        prepend = !starts && first;
    if (prepend)
        pt__strbuf_put(b, p->repl, p->repl_len);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            pt__strbuf_put(b, s + run, i - run);
            pt__strbuf_put(b, p->repl, p->repl_len);
            run = i + 1;
        }
    }
    int st = pt__strbuf_put(b, s + run, n - run);
    if (st)
        return st;
    if (p->split)
        return split_run(c, stage, &p->re, TKB_MERGED_NEXT, false, b->p, b->len, first, false);
    return tk_pretokenize(c, stage + 1, b->p, b->len, first);
}

/* ---- stages ---------------------------------------------------------------------- */
int tk_pretokenize(tk_ctx *c, size_t stage, const char *s, size_t n, bool first)
{
    const pt_tokenizer *t = c->t;
    if (n == 0)
        return 0;
    if (stage == t->n_pre) {
        /* long inputs honour the host's abort callback */
        if (++c->words >= 4096) {
            c->words = 0;
            int ab = pt_check_abort();
            if (ab)
                return ab;
        }
        return tk_bpe_word(c, s, n);
    }
    const tk_pretok *p = &t->pre[stage];
    pt_strbuf *b = &c->sbuf[stage];
    int st;
    switch (p->kind) {
    case TKP_BYTELEVEL:
        if (p->add_prefix_space && s[0] != ' ') {
            pt__strbuf_clear(b);
            pt__strbuf_putc(b, ' ');
            if ((st = pt__strbuf_put(b, s, n)))
                return st;
            s = b->p;
            n = b->len;
        }
        if (p->use_regex)
            return split_run(c, stage, &p->re, TKB_ISOLATED, false, s, n, first, true);
        return bytelevel_map_run(c, stage, s, n, first);
    case TKP_SPLIT:
        return split_run(c, stage, &p->re, p->behavior, p->invert, s, n, first, false);
    case TKP_METASPACE:
        return metaspace_run(c, stage, s, n, first);
    }
    return pt__err(PT_EINTERNAL, "tokenizer: unknown pre-tokenizer kind");
}
