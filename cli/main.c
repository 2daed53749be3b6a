/* posttrain: the command-line face of libposttrain, built on its public API. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *name;
    cli_cmd_fn fn;
    const char *summary;
} commands[] = {
    { "version", cmd_version, "print the library and program versions" },
    { "demo", cmd_demo, "SFT, then GRPO, of a tiny built-in model (make demo)" },
    { "info", cmd_info, "describe a Hugging Face model directory or GGUF file" },
    { "eval", cmd_eval, "mean next-token loss of a model on JSONL data" },
    { "tokenize", cmd_tokenize, "encode or decode JSONL lines with a tokenizer" },
    { "sft", cmd_sft, "supervised fine-tuning on JSONL data" },
    { "generate", cmd_generate, "sample completions of a prompt (KV cache, seeded)" },
    { "grpo", cmd_grpo, "GRPO on JSONL prompts with built-in rewards" },
    { "plot", cmd_plot, "draw a run's metrics JSONL as an SVG" },
    { "export", cmd_export, "write a model or a LoRA adapter as a GGUF file for llama.cpp" },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

int cli_fail(const char *what, int status)
{
    const char *detail = pt_last_error();
    char rank[32] = "";
    if (cli_nranks > 1)
        snprintf(rank, sizeof rank, "rank %d: ", cli_rank);
    fprintf(stderr, "posttrain: %s%s: %s%s%s\n", rank, what, pt_status_name(status),
            detail[0] ? ": " : "", detail);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    /* under mpirun every rank has the same usage error: rank 0 says it.
     * The others wait a moment before exiting: mpirun kills the job at the
     * first non-zero exit, which could otherwise come before rank 0 has
     * printed (seen once under a loaded CI). */
    if (cli_rank != 0) {
        nanosleep(&(struct timespec){ .tv_sec = 2 }, NULL);
        return 2;
    }
    va_list ap;
    fprintf(stderr, "posttrain%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'posttrain%s%s --help')\n", cmd ? " " : "", cmd ? cmd : "");
    return 2;
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
    if (cli_nranks > 1)
        fprintf(stderr, "[%s] rank %d: %s\n", pt_log_level_name(level), cli_rank, msg);
    else
        fprintf(stderr, "[%s] %s\n", pt_log_level_name(level), msg);
}

static const cli_command k_version = {
    .name = "version",
    .usage = "",
    .about = "Print the library and program versions and the matrix-product backend.",
};

int cmd_version(int argc, char **argv)
{
    int rc = cli_parse(&k_version, NULL, 0, argc, argv, NULL);
    if (rc)
        return cli_exit_code(rc);
    printf("posttrain %s (libposttrain %s)\n", PT_VERSION_STRING, pt_version_string());
    printf("matrix products: %s\n", pt_blas_info());
    printf("cpu: %s\n", pt_cpu_info());
    printf("bf16 products: %s\n", pt_bf16_info());
    const char *mpi = pt_dist_mpi_info();
    if (mpi)
        printf("mpi: %s (data-parallel training under mpirun)\n", mpi);
    else
        printf("mpi: not compiled in (one process; rebuild with MPI found for data-parallel training)\n");
    return 0;
}

/* ---- the program's global options ---- */

typedef struct global_args {
    int threads, verbose;
    bool version;
} global_args;

static const cli_opt k_global_opts[] = {
    { CLI_INT, "threads", offsetof(global_args, threads), "N", .lo = 1, .hi = 1024,
      .help = "threads for every kernel (default: PT_NUM_THREADS or all CPUs)" },
    { CLI_COUNT, "verbose", offsetof(global_args, verbose), .alias = 'v',
      .help = "log library messages (info level; twice for debug) to stderr" },
    { CLI_FLAG, "version", offsetof(global_args, version), .help = "the same as 'posttrain version'" },
};

static void list_commands(FILE *f)
{
    fprintf(f, "\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

static const cli_command k_program = {
    .usage = "[--threads N] [--verbose] <command> [options]",
    .about = "Post-training of small Llama-family language models on CPUs.",
    .more_help = list_commands,
    .epilog = "\n'posttrain <command> --help' lists a command's options.",
    .stop_at_arg = true,
};

int main(int argc, char **argv)
{
    /* usage errors and notes are printed once before the job is joined
     * (cli_job_begin sets the rank the job has) */
    cli_rank = pt_dist_launcher_rank();
    global_args g = { 0 };
    cli_group groups[] = { { "global options", k_global_opts, CLI_COUNT_OF(k_global_opts), &g } };
    cli_rest rest;
    int rc = cli_parse(&k_program, groups, CLI_COUNT_OF(groups), argc, argv, &rest);
    if (rc)
        return cli_exit_code(rc);
    if (g.version)
        return cmd_version(1, argv);
    if (rest.n == 0) {
        cli_print_help(stderr, &k_program, groups, CLI_COUNT_OF(groups));
        return 2;
    }
    int st;
    if (g.threads && (st = pt_set_num_threads(g.threads)))
        return cli_fail("--threads", st);
    /* under mpirun the ranks' warnings are the same (a skipped step): rank 0
     * logs them, the others only errors unless --verbose */
    pt_set_log_callback(stderr_logger, g.verbose > 1 ? PT_LOG_DEBUG : g.verbose ? PT_LOG_INFO
                                       : cli_rank == 0 ? PT_LOG_WARN : PT_LOG_ERROR, NULL);
    for (size_t c = 0; c < N_COMMANDS; c++)
        if (!strcmp(rest.args[0], commands[c].name))
            return commands[c].fn(rest.n, rest.args);
    return cli_usage_error(NULL, "unknown command '%s'", rest.args[0]);
}
