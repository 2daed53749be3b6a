/* posttrain tokenize: encode {"text": ...} JSONL lines to {"ids": [...]}, or
 * with --decode, {"ids": [...]} lines to {"text": ...}, in order.
 * Public API only: rows come from the library's JSONL reader on stdin. */
#include "cli.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct tokenize_args {
    const char *path;
    bool add_special, decode, skip_special, jsonl;
} cli_args; /* CLI_ARG's */

static const cli_opt k_tokenize_opts[] = {
    { CLI_PATH, "tokenizer", CLI_ARG(path), "PATH", .required = true,
      .help = "a tokenizer.json or a model directory holding one" },
    { CLI_FLAG, "add-special-tokens", CLI_ARG(add_special), .help = "add the post-processor's special tokens (e.g. BOS)" },
    { CLI_FLAG, "decode", CLI_ARG(decode), .help = "decode ids instead of encoding text" },
    { CLI_FLAG, "skip-special-tokens", CLI_ARG(skip_special),
      .help = "leave special tokens out of decoded text (default: keep)" },
    { CLI_FLAG, "jsonl", CLI_ARG(jsonl), .help = "JSON Lines in and out (the only format)" },
};

/* Messages name stdin so; a line may hold up to 1 GiB of text. */
#define STDIN_NAME "stdin"
#define MAX_LINE ((size_t)1 << 30)

static const cli_command k_tokenize = {
    .name = "tokenize",
    .usage = "--tokenizer PATH [--add-special-tokens] --jsonl < in.jsonl\n"
             "       posttrain tokenize --tokenizer PATH --decode [--skip-special-tokens] --jsonl < in.jsonl",
    .about = "Encode {\"text\": ...} lines read from stdin into {\"ids\": [...]} lines on stdout, in order;\n"
             "with --decode, turn {\"ids\": [...]} lines into {\"text\": ...} lines.",
    .epilog = "A line that cannot be read is reported with its number on stderr (exit 1).",
};

/* A library call on the row failed: its message, after the line's name. */
static int line_failed(const pt_jsonl_reader *rd, const char *op, int st)
{
    fprintf(stderr, "posttrain tokenize: %s line %zu: %s failed: %s: %s\n", STDIN_NAME,
            pt_jsonl_reader_line_number(rd), op, pt_status_name(st), pt_last_error());
    return 1;
}

/* The reader's own message already starts with "stdin line N: ". */
static int row_failed(void)
{
    fprintf(stderr, "posttrain tokenize: %s\n", pt_last_error());
    return 1;
}

static int encode_row(const pt_tokenizer *tok, const pt_jsonl_reader *rd, unsigned flags)
{
    const char *text;
    size_t tl;
    if (pt_jsonl_reader_string(&text, &tl, rd, "text", true))
        return row_failed();
    int32_t *ids = NULL;
    size_t ni = 0;
    int st = pt_tokenizer_encode(&ids, &ni, tok, text, tl, flags);
    if (st)
        return line_failed(rd, "encode", st);
    fputs("{\"ids\": [", stdout);
    for (size_t i = 0; i < ni; i++)
        printf(i ? ", %d" : "%d", (int)ids[i]);
    fputs("]}\n", stdout);
    pt_free(ids);
    return 0;
}

static int decode_row(const pt_tokenizer *tok, const pt_jsonl_reader *rd, unsigned flags)
{
    int32_t *ids = NULL;
    size_t ni = 0;
    if (pt_jsonl_reader_int_array(&ids, &ni, rd, "ids", true))
        return row_failed();
    char *text = NULL;
    size_t tl = 0;
    char *json = NULL;
    int st = pt_tokenizer_decode(&text, &tl, tok, ids, ni, flags);
    pt_free(ids);
    if (!st && !(st = pt_json_quote(&json, NULL, text, tl, PT_JSON_SHORT_ESCAPES | PT_JSON_ESCAPE_DEL)))
        printf("{\"text\": %s}\n", json);
    pt_free(text);
    pt_free(json);
    return st ? line_failed(rd, "decode", st) : 0;
}

/* Every row of stdin, in order, until the first that fails; the library's
 * JSONL reader (blank lines skipped, one object per line, UTF-8). */
static int run_lines(const pt_tokenizer *tok, const cli_args *a)
{
    pt_jsonl_reader *rd;
    int st = pt_jsonl_reader_open_fd(&rd, 0, STDIN_NAME, MAX_LINE);
    if (st)
        return cli_fail("tokenize: reading stdin", st);
    int rc = 0;
    while (!rc && (st = pt_jsonl_reader_next(rd)) != 0)
        rc = st < 0 ? row_failed()
             : a->decode ? decode_row(tok, rd, a->skip_special ? PT_TOK_SKIP_SPECIAL : 0)
                         : encode_row(tok, rd, a->add_special ? PT_TOK_ADD_SPECIAL : 0);
    pt_jsonl_reader_free(rd);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    cli_args a = { 0 };
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
