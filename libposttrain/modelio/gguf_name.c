/* gguf-py's naming heuristics (metadata.py Metadata.get_model_id_components,
 * id_to_title; utility.py size_label), which give general.name, basename,
 * finetune, version and size_label from a model id such as the model
 * directory's name.  The regular expressions are matched by hand with
 * their IGNORECASE semantics; character classes (\d, \w, isalpha) are
 * ASCII, a byte >= 0x80 counting as a letter.  The naming keys of a model
 * file (gguf_meta.c) and of a LoRA adapter (gguf_lora.c) both come from
 * gx_names_apply_id and gx_names_write. */
#include "core/core.h"
#include "core/strbuf.h"
#include "io/gguf.h"
#include "modelio/gguf_export_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { T_BASENAME = 1, T_SIZE = 2, T_FINETUNE = 4, T_VERSION = 8, T_TYPE = 16 };
#define MAX_PARTS 64

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alpha(char c) { return isalpha((unsigned char)c) || (unsigned char)c >= 0x80; }
static bool is_word(char c) { return isalnum((unsigned char)c) || c == '_' || (unsigned char)c >= 0x80; }

/* Digits from s: how many (0 when none). */
static size_t digits(const char *s)
{
    size_t n = 0;
    while (is_digit(s[n]))
        n++;
    return n;
}

/* (v|iter)?\d+([.]\d+)* */
static bool match_version(const char *s)
{
    if (strncasecmp(s, "iter", 4) == 0 && is_digit(s[4]))
        s += 4;
    else if ((s[0] == 'v' || s[0] == 'V') && is_digit(s[1]))
        s += 1;
    size_t d = digits(s);
    if (!d)
        return false;
    s += d;
    while (s[0] == '.' && (d = digits(s + 1)))
        s += 1 + d;
    return *s == '\0';
}

/* i?q\d(_\w)*|b?fp?(16|32) */
static bool match_type(const char *s)
{
    const char *p = s;
    if (tolower((unsigned char)*p) == 'i')
        p++;
    if (tolower((unsigned char)p[0]) == 'q' && is_digit(p[1])) {
        p += 2;
        while (p[0] == '_' && p[1] && is_word(p[1]))
            p += 2;
        if (*p == '\0')
            return true;
    }
    p = s;
    if (tolower((unsigned char)*p) == 'b')
        p++;
    if (tolower((unsigned char)*p) != 'f')
        return false;
    p++;
    if (tolower((unsigned char)*p) == 'p')
        p++;
    return strcmp(p, "16") == 0 || strcmp(p, "32") == 0;
}

/* \d+([._]\d+)?[KMBT][\d]? to the end */
static bool match_size_core(const char *s)
{
    size_t d = digits(s);
    if (!d)
        return false;
    s += d;
    if ((s[0] == '.' || s[0] == '_') && (d = digits(s + 1)))
        s += 1 + d;
    if (!strchr("kmbtKMBT", s[0]) || s[0] == '\0')
        return false;
    s++;
    if (is_digit(s[0]))
        s++;
    return *s == '\0';
}

/* (([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl) */
static bool match_size(const char *s)
{
    static const char *const words[] = { "small", "mini", "medium", "large", "xl", "xxl" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(s, words[i]) == 0)
            return true;
    if (match_size_core(s))
        return true;
    if ((s[0] == 'a' || s[0] == 'A') && match_size_core(s + 1))
        return true;
    size_t d = digits(s);
    return d && (s[d] == 'x' || s[d] == 'X') && match_size_core(s + d + 1);
}

static bool match_finetune_word(const char *s)
{
    return strcasecmp(s, "chat") == 0 || strcasecmp(s, "instruct") == 0 ||
           strcasecmp(s, "vision") == 0 || strcasecmp(s, "lora") == 0;
}

/* Python's float(s) for the size parts (digits with at most one '.'). */
static bool parse_float(const char *s, size_t n, double *out)
{
    if (n == 0 || n > 63)
        return false;
    char buf[64];
    memcpy(buf, s, n);
    buf[n] = '\0';
    size_t dots = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '.')
            dots++;
        else if (!is_digit(buf[i]))
            return false;
    }
    if (dots > 1 || (n == 1 && dots == 1))
        return false;
    *out = strtod(buf, NULL);
    return true;
}

/* The size part's normalisation and its context-length test (in place). */
static unsigned size_part(char *part, int64_t total)
{
    unsigned t = 0;
    for (char *c = part; *c; c++)
        if (*c == '_')
            *c = '.';
    size_t n = strlen(part);
    if (n >= 2 && is_digit(part[n - 1])) {   /* bloom-7b1: "7b1" -> "7.1b" */
        char a = part[n - 2], b = part[n - 1];
        memmove(part + n - 1, part + n - 2, 1);
        part[n - 2] = '.';
        part[n - 1] = b;
        part[n] = a;
        part[++n] = '\0';
    }
    if (n > 1 && is_digit(part[n - 2]) && strchr("kmbt", part[n - 1]))
        part[n - 1] = (char)toupper((unsigned char)part[n - 1]);
    double v;
    const char *scale = strchr(" KMBT", part[n - 1]);
    if (total != 0 && parse_float(part, n - 1, &v)) {
        double label = v * (scale ? pow(1000, (double)(scale - " KMBT")) : 0.001);
        double at = (double)(total < 0 ? -total : total);
        if ((total < 0 && label < (double)((uint64_t)at / 8)) ||
            (total > 0 && fabs(label - (double)total) > (double)(7 * total / 8))) {
            t |= T_FINETUNE;
            part[n - 1] = (char)tolower((unsigned char)part[n - 1]);
        }
    }
    return t ? t : T_SIZE;
}

static unsigned annotate(char *part, size_t i, int64_t total)
{
    if (match_version(part))
        return T_VERSION;
    if (match_type(part)) {
        for (char *c = part; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        return T_TYPE;
    }
    if (i > 0 && match_size(part))
        return size_part(part, total);
    if (i > 0 && match_finetune_word(part))
        return total < 0 && strcasecmp(part, "lora") == 0 ? T_TYPE : T_FINETUNE;
    return 0;
}

static bool all_alpha(const char *s)
{
    for (; *s; s++)
        if (!is_alpha(*s))
            return false;
    return true;
}

static bool has_digit(const char *s)
{
    for (; *s; s++)
        if (is_digit(*s))
            return true;
    return false;
}

/* The basename and finetune annotations (after the size labels). */
static void mark_basename(char **parts, unsigned *t, size_t n)
{
    bool num_size = false;
    for (size_t i = 0; i < n; i++)
        num_size |= (t[i] & T_SIZE) && has_digit(parts[i]);
    for (size_t i = 0; i < n && num_size; i++)
        if ((t[i] & T_SIZE) && all_alpha(parts[i]))
            t[i] &= ~(unsigned)T_SIZE;
    bool at_start = true;
    for (size_t i = 0; i < n; i++) {
        if (at_start && ((t[i] == 0 && is_alpha(parts[i][0])) || (t[i] & T_VERSION))) {
            t[i] |= T_BASENAME;
        } else {
            at_start = false;
            if (t[i] == 0)
                t[i] |= T_FINETUNE;
        }
    }
    for (size_t i = n; i-- > 0;) {
        if ((t[i] & T_BASENAME) && (t[i] & ~(unsigned)T_BASENAME))
            t[i] &= ~(unsigned)T_BASENAME;
        else
            break;
    }
}

/* "-".join of the parts with `want` (and without `skip`); NULL when empty.
 * unique: each text once (the size labels). */
static char *join(char **parts, const unsigned *t, size_t n, unsigned want, unsigned skip, bool unique)
{
    pt_strbuf b = { 0 };
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!(t[i] & want) || (t[i] & skip))
            continue;
        bool dup = false;
        for (size_t j = 0; unique && j < i; j++)
            dup |= (t[j] & want) && strcmp(parts[j], parts[i]) == 0;
        if (dup)
            continue;
        if (any)
            pt__strbuf_putc(&b, '-');
        pt__strbuf_puts(&b, parts[i]);
        any = true;
    }
    if (!any) {
        pt__strbuf_free(&b);
        return NULL;
    }
    return pt__strbuf_detach(&b, NULL);
}

void gx_name_parts_free(gx_name_parts *p)
{
    pt_free(p->full);
    pt_free(p->org);
    pt_free(p->basename);
    pt_free(p->finetune);
    pt_free(p->version);
    pt_free(p->size_label);
    *p = (gx_name_parts){ 0 };
}

/* Copies of full's '-'-separated parts (empty ones dropped), each with a
 * spare byte for the "7b1" -> "7.1b" growth; the count, or -1. */
static int split_parts(const char *full, char **parts)
{
    int n = 0;
    for (const char *p = full; *p;) {
        const char *s = p;
        while (*p && *p != '-')
            p++;
        size_t k = (size_t)(p - s);
        if (*p)
            p++;
        if (k == 0 || n == MAX_PARTS)
            continue;
        if (!(parts[n] = pt__malloc(k + 2))) {
            while (n > 0)
                pt_free(parts[--n]);
            return -1;
        }
        memcpy(parts[n], s, k);
        parts[n++][k] = '\0';
    }
    return n;
}

/* The fields of the annotated parts (basename dropped when nothing else
 * is known: "too ambiguous"). */
static void fill_fields(gx_name_parts *out, char **parts, unsigned *t, size_t n)
{
    mark_basename(parts, t, n);
    out->basename = join(parts, t, n, T_BASENAME, 0, false);
    out->size_label = join(parts, t, n, T_SIZE, 0, true);
    out->finetune = join(parts, t, n, T_FINETUNE, 0, false);
    out->version = join(parts, t, n, T_VERSION, T_BASENAME, false);
    if (!out->size_label && !out->finetune && !out->version) {
        pt_free(out->basename);
        out->basename = NULL;
    }
}

/* org/full of a Hugging Face style id ("org/name"; an org starting with
 * '.' is a relative path, dropped). */
static int split_org(gx_name_parts *out, const char *id)
{
    const char *slash = strchr(id, '/');
    out->full = pt__strdup(slash ? slash + 1 : id);
    if (!out->full)
        return PT_ENOMEM;
    if (slash && !(slash > id && id[0] == '.')) {
        if (!(out->org = pt__malloc((size_t)(slash - id) + 1)))
            return PT_ENOMEM;
        memcpy(out->org, id, (size_t)(slash - id));
        out->org[slash - id] = '\0';
    }
    return PT_OK;
}

int gx_model_id_components(gx_name_parts *out, const char *id, int64_t total)
{
    *out = (gx_name_parts){ 0 };
    if (!id)
        return PT_OK;
    if (strchr(id, ' ')) {   /* a sentence: the name only */
        out->full = pt__strdup(id);
        return out->full ? PT_OK : PT_ENOMEM;
    }
    int st = split_org(out, id);
    char *parts[MAX_PARTS];
    unsigned t[MAX_PARTS] = { 0 };
    int n = st ? 0 : split_parts(out->full, parts);
    if (n < 0)
        st = PT_ENOMEM;
    for (int i = 0; i < n && st == PT_OK; i++)
        t[i] = annotate(parts[i], (size_t)i, total);
    if (st == PT_OK)
        fill_fields(out, parts, t, (size_t)n);
    for (int i = 0; i < n; i++)
        pt_free(parts[i]);
    if (st)
        gx_name_parts_free(out);
    return st;
}

/* ^(v\d+(?:\.\d+)*|\d.*)$ */
static bool title_exempt(const char *w)
{
    if (is_digit(w[0]))
        return true;
    return w[0] == 'v' && match_version(w) && is_digit(w[1]);
}

static bool is_lower_word(const char *w)
{
    bool cased = false;
    for (; *w; w++) {
        if (isupper((unsigned char)*w))
            return false;
        cased |= islower((unsigned char)*w) != 0;
    }
    return cased;
}

/* str.title(): a letter after a letter is lower case, any other upper. */
static void title_case(char *w)
{
    bool prev_cased = false;
    for (; *w; w++) {
        bool cased = isalpha((unsigned char)*w) != 0;
        if (cased)
            *w = prev_cased ? (char)tolower((unsigned char)*w) : (char)toupper((unsigned char)*w);
        prev_cased = cased;
    }
}

char *gx_id_to_title(const char *s)
{
    char *buf = pt__strdup(s);
    if (!buf)
        return NULL;
    for (char *c = buf; *c; c++)
        if (*c == '-')
            *c = ' ';
    pt_strbuf b = { 0 };
    bool first = true;
    for (char *w = strtok(buf, " \t\n\r\v\f"); w; w = strtok(NULL, " \t\n\r\v\f")) {
        if (is_lower_word(w) && !title_exempt(w))
            title_case(w);
        if (!first)
            pt__strbuf_putc(&b, ' ');
        pt__strbuf_puts(&b, w);
        first = false;
    }
    pt_free(buf);
    char *r = pt__strbuf_detach(&b, NULL);
    return r ? r : pt__strdup("");
}

void gx_size_label(char *buf, size_t n, uint64_t total)
{
    double c = (double)total, scaled;
    const char *suffix;
    if (c > 1e12) {
        scaled = c * 1e-12;
        suffix = "T";
    } else if (c > 1e9) {
        scaled = c * 1e-9;
        suffix = "B";
    } else if (c > 1e6) {
        scaled = c * 1e-6;
        suffix = "M";
    } else {
        scaled = c * 1e-3;
        suffix = "K";
    }
    char r[64];
    snprintf(r, sizeof r, "%.0f", rint(scaled));   /* Python's round(): half to even */
    const char *d = r;
    while (*d == '0')
        d++;
    int fix = 2 - (int)strlen(d);
    snprintf(buf, n, "%.*f%s", fix > 0 ? fix : 0, scaled, suffix);
}

char *gx_path_name(const char *dir)
{
    const char *best = "";
    size_t best_len = 0;
    for (const char *p = dir; *p;) {
        while (*p == '/')
            p++;
        const char *s = p;
        while (*p && *p != '/')
            p++;
        size_t k = (size_t)(p - s);
        if (k > 0 && !(k == 1 && s[0] == '.')) {
            best = s;
            best_len = k;
        }
    }
    char *r = pt__malloc(best_len + 1);
    if (r) {
        memcpy(r, best, best_len);
        r[best_len] = '\0';
    }
    return r;
}

/* ---- the naming keys -------------------------------------------------------------- */

void gx_names_free(gx_names *n)
{
    pt_free(n->name);
    pt_free(n->organization);
    pt_free(n->basename);
    pt_free(n->finetune);
    pt_free(n->version);
    pt_free(n->size_label);
    *n = (gx_names){ 0 };
}

/* Take *src into *dst when *dst is still unset. */
static void take(char **dst, char **src)
{
    if (!*dst) {
        *dst = *src;
        *src = NULL;
    }
}

int gx_names_apply_id(gx_names *n, const char *id, int64_t total)
{
    gx_name_parts p;
    int st = gx_model_id_components(&p, id, total);
    if (st || !p.full)
        return st;
    if (!n->name && !(n->name = gx_id_to_title(p.full)))
        st = PT_ENOMEM;
    if (p.org && !n->organization && !(n->organization = gx_id_to_title(p.org)))
        st = PT_ENOMEM;
    take(&n->basename, &p.basename);
    take(&n->finetune, &p.finetune);
    take(&n->version, &p.version);
    take(&n->size_label, &p.size_label);
    gx_name_parts_free(&p);
    return st;
}

static int set_str(pt_gguf_writer *w, const char *key, const char *v)
{
    return v && *v ? pt__gguf_set_str(w, key, v) : PT_OK;   /* add_string skips "" */
}

int gx_names_write(pt_gguf_writer *w, const gx_names *n)
{
    int st = set_str(w, "general.name", n->name);
    if (!st)
        st = set_str(w, "general.version", n->version);
    if (!st)
        st = set_str(w, "general.organization", n->organization);
    if (!st)
        st = set_str(w, "general.finetune", n->finetune);
    if (!st)
        st = set_str(w, "general.basename", n->basename);
    if (!st)
        st = set_str(w, "general.size_label", n->size_label);
    return st;
}
