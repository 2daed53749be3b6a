/* posttrain tokenize: encode {"text": ...} JSONL lines to {"ids": [...]}, or
 * with --decode, {"ids": [...]} lines to {"text": ...}, in order.
 * Public API only; a small JSON reader is built in for the one key it needs. */
#include "cli.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct tokenize_args {
    const char *path;
    bool add_special, decode, skip_special, jsonl;
} tokenize_args;

#define TOK(field) offsetof(tokenize_args, field)
static const cli_opt k_tokenize_opts[] = {
    { CLI_PATH, "tokenizer", TOK(path), "PATH", .required = true,
      .help = "a tokenizer.json or a model directory holding one" },
    { CLI_FLAG, "add-special-tokens", TOK(add_special), .help = "add the post-processor's special tokens (e.g. BOS)" },
    { CLI_FLAG, "decode", TOK(decode), .help = "decode ids instead of encoding text" },
    { CLI_FLAG, "skip-special-tokens", TOK(skip_special),
      .help = "leave special tokens out of decoded text (default: keep)" },
    { CLI_FLAG, "jsonl", TOK(jsonl), .help = "JSON Lines in and out (the only format)" },
};
#undef TOK

static const cli_command k_tokenize = {
    .name = "tokenize",
    .usage = "--tokenizer PATH [--add-special-tokens] --jsonl < in.jsonl\n"
             "       posttrain tokenize --tokenizer PATH --decode [--skip-special-tokens] --jsonl < in.jsonl",
    .about = "Encode {\"text\": ...} lines read from stdin into {\"ids\": [...]} lines on stdout, in order;\n"
             "with --decode, turn {\"ids\": [...]} lines into {\"text\": ...} lines.",
    .epilog = "A line that cannot be read is reported with its number on stderr (exit 1).",
};

/* ---- a minimal JSON reader ------------------------------------------------------ */
typedef struct jr {
    const char *p, *end;
    const char *err;
} jr;

static void ws(jr *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n'))
        j->p++;
}

/* Skip white space, then take c if it comes next. */
static bool jeat(jr *j, char c)
{
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

static int hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d > 15)
            return -1;
        *v = *v * 16 + d;
    }
    return 0;
}

static void put_utf8(char *o, size_t *n, unsigned cp)
{
    if (cp < 0x80) {
        o[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*n)++] = (char)(0xC0 | (cp >> 6));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xE0 | (cp >> 12));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*n)++] = (char)(0xF0 | (cp >> 18));
        o[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* Parse a string at j->p (at the opening quote).  With out != NULL the
 * unescaped bytes go to out (room for as many bytes as the source). */
static int jstring(jr *j, char *out, size_t *out_n)
{
    size_t n = 0;
    if (j->p >= j->end || *j->p != '"') {
        j->err = "expected a string";
        return -1;
    }
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) {
            j->err = "control character in a string";
            return -1;
        }
        if (c != '\\') {
            if (out)
                out[n] = (char)c;
            n++;
            j->p++;
            continue;
        }
        if (j->end - j->p < 2) {
            j->err = "unterminated string";
            return -1;
        }
        char e = j->p[1];
        j->p += 2;
        char lit = 0;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (j->end - j->p < 4 || hex4(j->p, &cp)) {
                j->err = "bad \\u escape";
                return -1;
            }
            j->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF) {
                    j->err = "unpaired surrogate in a \\u escape";
                    return -1;
                }
                j->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                j->err = "unpaired surrogate in a \\u escape";
                return -1;
            }
            if (out)
                put_utf8(out, &n, cp);
            else
                n += 4;
            continue;
        }
        default:
            j->err = "bad escape in a string";
            return -1;
        }
        if (out)
            out[n] = lit;
        n++;
    }
    if (j->p >= j->end) {
        j->err = "unterminated string";
        return -1;
    }
    j->p++;
    if (out_n)
        *out_n = n;
    return 0;
}

static int jskip(jr *j, int depth);

static int jnumber_skip(jr *j)
{
    const char *s = j->p;
    while (j->p < j->end && strchr("+-0123456789.eE", *j->p))
        j->p++;
    if (j->p == s) {
        j->err = "unexpected character";
        return -1;
    }
    return 0;
}

static int jskip(jr *j, int depth)
{
    if (depth > 64) {
        j->err = "nested too deeply";
        return -1;
    }
    ws(j);
    if (j->p >= j->end) {
        j->err = "unexpected end of line";
        return -1;
    }
    char c = *j->p;
    if (c == '"')
        return jstring(j, NULL, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (jeat(j, close))
            return 0;
        for (;;) {
            if (c == '{') {
                ws(j);
                if (jstring(j, NULL, NULL))
                    return -1;
                if (!jeat(j, ':')) {
                    j->err = "expected ':'";
                    return -1;
                }
            }
            if (jskip(j, depth + 1))
                return -1;
            if (jeat(j, ','))
                continue;
            if (jeat(j, close))
                return 0;
            j->err = "expected ',' or a closing bracket";
            return -1;
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= l && memcmp(j->p, words[i], l) == 0) {
            j->p += l;
            return 0;
        }
    }
    return jnumber_skip(j);
}

/* Find `key` in the top-level object of the line; j->p is left at its value. */
static int jfind(jr *j, const char *key)
{
    if (!jeat(j, '{')) {
        j->err = "the line is not a JSON object";
        return -1;
    }
    if (jeat(j, '}')) {
        j->err = NULL;
        return 1;
    }
    size_t kl = strlen(key);
    for (;;) {
        ws(j);
        const char *ks = j->p;
        if (jstring(j, NULL, NULL))
            return -1;
        int match = (size_t)(j->p - ks) == kl + 2 && memcmp(ks + 1, key, kl) == 0;
        if (!jeat(j, ':')) {
            j->err = "expected ':'";
            return -1;
        }
        ws(j);
        if (match)
            return 0;
        if (jskip(j, 1))
            return -1;
        if (jeat(j, ','))
            continue;
        if (jeat(j, '}'))
            return 1;
        j->err = "expected ',' or '}'";
        return -1;
    }
}

/* ---- output ---------------------------------------------------------------------- */
static void write_json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (c < 0x20 || c == 0x7F)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
    }
    fputc('"', f);
}

static int line_error(long lineno, const char *what)
{
    fprintf(stderr, "posttrain tokenize: stdin line %ld: %s\n", lineno, what);
    return 1;
}

/* A library call on the line failed. */
static int line_failed(long lineno, const char *op, int st)
{
    char what[512];
    snprintf(what, sizeof what, "%s failed: %s: %s", op, pt_status_name(st), pt_last_error());
    return line_error(lineno, what);
}

/* Position j on the value of key, which must begin with `open` (the JSON
 * `kind` named in the error); 0, or the line's error. */
static int line_value(jr *j, const char *key, char open, const char *kind, long lineno)
{
    char what[64];
    int r = jfind(j, key);
    if (r < 0)
        return line_error(lineno, j->err);
    if (r > 0) {
        snprintf(what, sizeof what, "no \"%s\" key", key);
        return line_error(lineno, what);
    }
    if (j->p >= j->end || *j->p != open) {
        snprintf(what, sizeof what, "\"%s\" is not %s", key, kind);
        return line_error(lineno, what);
    }
    return 0;
}

static int encode_line(const pt_tokenizer *tok, const char *line, size_t n, unsigned flags, long lineno)
{
    jr j = {line, line + n, NULL};
    if (line_value(&j, "text", '"', "a string", lineno))
        return 1;
    char *buf = malloc(n + 1);
    if (!buf)
        return line_error(lineno, "out of memory");
    size_t tl = 0;
    if (jstring(&j, buf, &tl)) {
        free(buf);
        return line_error(lineno, j.err);
    }
    int32_t *ids = NULL;
    size_t ni = 0;
    int st = pt_tokenizer_encode(&ids, &ni, tok, buf, tl, flags);
    free(buf);
    if (st)
        return line_failed(lineno, "encode", st);
    fputs("{\"ids\": [", stdout);
    for (size_t i = 0; i < ni; i++)
        printf(i ? ", %d" : "%d", (int)ids[i]);
    fputs("]}\n", stdout);
    pt_free(ids);
    return 0;
}

static int decode_line(const pt_tokenizer *tok, const char *line, size_t n, unsigned flags, long lineno)
{
    jr j = {line, line + n, NULL};
    if (line_value(&j, "ids", '[', "an array", lineno))
        return 1;
    j.p++;
    size_t cap = 64, ni = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return line_error(lineno, "out of memory");
    if (!jeat(&j, ']')) {
        for (;;) {
            ws(&j);
            char *e;
            long v = j.p < j.end ? strtol(j.p, &e, 10) : 0;
            if (j.p >= j.end || e == j.p || v < INT32_MIN || v > INT32_MAX || (e < j.end && (*e == '.' || *e == 'e' || *e == 'E'))) {
                free(ids);
                return line_error(lineno, "\"ids\" must hold integers");
            }
            j.p = e;
            if (ni == cap) {
                cap *= 2;
                int32_t *v2 = realloc(ids, cap * sizeof *ids);
                if (!v2) {
                    free(ids);
                    return line_error(lineno, "out of memory");
                }
                ids = v2;
            }
            ids[ni++] = (int32_t)v;
            if (jeat(&j, ','))
                continue;
            if (jeat(&j, ']'))
                break;
            free(ids);
            return line_error(lineno, "expected ',' or ']' in \"ids\"");
        }
    }
    char *text = NULL;
    size_t tl = 0;
    int st = pt_tokenizer_decode(&text, &tl, tok, ids, ni, flags);
    free(ids);
    if (st)
        return line_failed(lineno, "decode", st);
    fputs("{\"text\": ", stdout);
    write_json_string(stdout, text, tl);
    fputs("}\n", stdout);
    pt_free(text);
    return 0;
}

/* Every line of stdin, in order, until the first that fails. */
static int run_lines(const pt_tokenizer *tok, const tokenize_args *a)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n')
            len--;
        if (len && line[len - 1] == '\r')
            len--;
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t'))
            k++;
        if (k == len)
            continue;  /* blank line */
        rc = a->decode ? decode_line(tok, line, len, a->skip_special ? PT_TOK_SKIP_SPECIAL : 0, lineno)
                       : encode_line(tok, line, len, a->add_special ? PT_TOK_ADD_SPECIAL : 0, lineno);
        if (rc)
            break;
    }
    free(line);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    tokenize_args a = { 0 };
    int rc = cli_parse_table(&k_tokenize, k_tokenize_opts, CLI_COUNT_OF(k_tokenize_opts), &a, argc, argv, NULL);
    if (rc)
        return cli_exit_code(rc);
    if (a.decode && a.add_special)
        return cli_usage_error("tokenize", "--add-special-tokens applies to encoding, not --decode");
    if (!a.decode && a.skip_special)
        return cli_usage_error("tokenize", "--skip-special-tokens applies to --decode");
    pt_tokenizer *tok = NULL;
    int st = pt_tokenizer_load(&tok, a.path);
    if (st)
        return cli_fail("tokenize: loading the tokenizer", st);
    rc = run_lines(tok, &a);
    pt_tokenizer_free(tok);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "posttrain tokenize: writing stdout failed\n");
        rc = 1;
    }
    return rc;
}
