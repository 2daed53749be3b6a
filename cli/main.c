/* posttrain: the command-line face of libposttrain, built on its public API. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    cli_cmd_fn fn;
    const char *summary;
} commands[] = {
    { "version", cmd_version, "print the library and program versions" },
    { "demo", cmd_demo, "run the built-in demonstration job" },
    { "info", cmd_info, "describe a Hugging Face model directory" },
    { "eval", cmd_eval, "mean next-token loss of a model on JSONL data" },
    { "tokenize", cmd_tokenize, "encode or decode JSONL lines with a tokenizer" },
    { "sft", cmd_sft, "supervised fine-tuning on JSONL data" },
    { "generate", cmd_generate, "sample completions of a prompt (KV cache, seeded)" },
    { "grpo", cmd_grpo, "GRPO on JSONL prompts with built-in rewards" },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: posttrain [--threads N] [--verbose] <command> [options]\n\n"
               "Post-training of small Llama-family language models on CPUs.\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nglobal options:\n"
               "  --threads N   threads for every kernel (default: PT_NUM_THREADS or all CPUs)\n"
               "  --verbose     log library messages (info level; twice for debug) to stderr\n"
               "  -h, --help    this help; 'posttrain <command> --help' for a command's options\n");
}

int cli_fail(const char *what, int status)
{
    const char *detail = pt_last_error();
    fprintf(stderr, "posttrain: %s: %s%s%s\n", what, pt_status_name(status),
            detail[0] ? ": " : "", detail);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "posttrain %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'posttrain %s --help')\n", cmd);
    return 2;
}

int cli_parse_long(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static void stderr_logger(int level, const char *msg, void *payload)
{
    (void)payload;
    fprintf(stderr, "[%s] %s\n", pt_log_level_name(level), msg);
}

int cmd_version(int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return cli_usage_error("version", "takes no arguments");
    printf("posttrain %s (libposttrain %s)\n", PT_VERSION_STRING, pt_version_string());
    printf("matrix products: %s\n", pt_blas_info());
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1, verbose = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            return cmd_version(1, argv);
        } else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) {
            verbose++;
        } else if (!strcmp(argv[i], "--threads")) {
            long n;
            if (i + 1 >= argc || cli_parse_long(argv[i + 1], 1, 1024, &n)) {
                fprintf(stderr, "posttrain: --threads needs an integer in [1, 1024]\n");
                return 2;
            }
            int st = pt_set_num_threads((int)n);
            if (st)
                return cli_fail("--threads", st);
            i++;
        } else {
            fprintf(stderr, "posttrain: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (verbose)
        pt_set_log_callback(stderr_logger, verbose > 1 ? PT_LOG_DEBUG : PT_LOG_INFO, NULL);
    else
        pt_set_log_callback(stderr_logger, PT_LOG_WARN, NULL);
    for (size_t c = 0; c < N_COMMANDS; c++)
        if (!strcmp(argv[i], commands[c].name))
            return commands[c].fn(argc - i, argv + i);
    fprintf(stderr, "posttrain: unknown command '%s'\n", argv[i]);
    usage(stderr);
    return 2;
}
