/* Added tokens in the text: where they match, with their single_word,
 * lstrip and rstrip flags, as the reference's AddedVocabulary::find_matches
 * splits a text. */
#include "text/tok_encode.h"

#include <utf8proc.h>

static bool is_word_cp(uint32_t cp)
{
    if (cp == '_')
        return true;
    if (cp == TK_BAD_CP)
        return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    /* Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation */
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* A single_word token matches only between non-word characters. */
static bool single_word_ok(const char *s, size_t n, size_t start, size_t stop)
{
    uint32_t cp;
    bool start_space = start == 0 || (tk_utf8_unit_back(s, 0, start, &cp), !is_word_cp(cp));
    bool stop_space = stop == n || (tk_utf8_unit(s + stop, n - stop, &cp), !is_word_cp(cp));
    return start_space && stop_space;
}

/* lstrip: the match takes the white space before it (not before `floor`). */
static size_t strip_left(const char *s, size_t start, size_t floor)
{
    size_t ns = start;
    while (ns > 0) {
        uint32_t cp;
        size_t k = tk_utf8_unit_back(s, 0, ns, &cp);
        if (!tk_is_white_space(cp))
            break;
        ns -= k;
    }
    return ns > floor ? ns : floor;
}

/* rstrip: the match takes the white space after it. */
static size_t strip_right(const char *s, size_t n, size_t stop)
{
    while (stop < n) {
        uint32_t cp;
        size_t k = tk_utf8_unit(s + stop, n - stop, &cp);
        if (!tk_is_white_space(cp))
            break;
        stop += k;
    }
    return stop;
}

int tk_split_added(tk_ranges *out, const pt_tokenizer *t, const tk_trie *tr, const char *s, size_t n)
{
    out->n = 0;
    size_t start_offset = 0, pos = 0;
    int st;
    while (pos < n) {
        size_t start = 0, mlen = 0;
        int32_t mtok = tk_trie_find(tr, s, n, pos, &start, &mlen);
        if (mtok < 0)
            break;
        size_t stop = start + mlen;
        pos = stop;
        const tk_added *a = &t->added[mtok];
        if (a->single_word && !single_word_ok(s, n, start, stop))
            continue;
        if (a->lstrip)
            start = strip_left(s, start, start_offset);
        if (a->rstrip)
            stop = strip_right(s, n, stop);
        if (start > start_offset && (st = tk_ranges_push(out, start_offset, start, 0)))
            return st;
        if ((st = tk_ranges_push(out, start, stop, mtok + 1)))
            return st;
        start_offset = stop;
        if (pos < stop)
            pos = stop;
    }
    if (start_offset < n && (st = tk_ranges_push(out, start_offset, n, 0)))
        return st;
    return 0;
}
