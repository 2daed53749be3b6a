/* The option tables of the posttrain commands and the one engine that parses
 * argv against them, prints --help from them and reports usage errors.
 *
 * A command declares its options once, as static tables of cli_opt whose
 * destinations are offsets into a struct of its own (offsetof), grouped into
 * help sections by cli_group entries that say where that struct is:
 *
 *     typedef my_args cli_args;
 *     static const cli_opt k_opts[] = {
 *         { CLI_PATH, "model", CLI_ARG(model), "DIR", .required = true,
 *           .help = "Hugging Face model directory" },
 *         { CLI_INT, "steps", CLI_ARG(steps), "N", .def = "100", .lo = 1,
 *           .hi = 1e9, .help = "optimizer steps" },
 *     };
 *     int rc = cli_parse_table(&k_cmd, k_opts, CLI_COUNT_OF(k_opts), &args, argc, argv, NULL);
 *     if (rc)
 *         return cli_exit_code(rc);
 *
 * Arguments are `--name value` (the value is the next argument, whatever it
 * begins with) or `--name` for a flag; `-h`/`--help` prints the help on stdout.
 * Every usage error is printed by cli_usage_error and names the option:
 * unknown option, missing value, a bad number or one out of range, an enum
 * name the library does not accept (the library's pt_<enum>_from_name
 * message), a required option left out. */
#ifndef PT_CLI_OPTS_H
#define PT_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum cli_opt_type {
    CLI_FLAG,       /* bool: true when given */
    CLI_FLAG_CLEAR, /* bool: false when given (--no-special, --all-tokens) */
    CLI_COUNT,      /* int: one more each time it is given (-v -v) */
    CLI_INT,        /* int, whole decimal */
    CLI_INT64,      /* int64_t, whole decimal */
    CLI_UINT64,     /* uint64_t: digits only (seeds) */
    CLI_FLOAT,      /* float, finite */
    CLI_DOUBLE,     /* double, finite */
    CLI_STRING,     /* const char *: the argument itself */
    CLI_PATH,       /* const char *: a file or directory, not empty */
    CLI_ENUM,       /* int: a name the library's from_name accepts */
    CLI_CUSTOM      /* .parse does it (lists; may accumulate when repeated) */
} cli_opt_type;

typedef struct cli_opt {
    cli_opt_type type;
    const char *name;   /* without the leading "--" */
    size_t offset;      /* of the destination in the group's struct */
    const char *meta;   /* the value in --help (N, F, DIR, ...); enums list their names */
    const char *def;    /* the default, written as the argument would be: applied
                           before parsing and shown by --help; NULL keeps what the
                           struct holds (the help text then says what it means) */
    const char *help;   /* "\n" continues in the help column */
    double lo, hi;      /* accepted range of the numeric types; both 0: any value
                           the type holds (for CLI_UINT64: any non-negative) */
    bool required;
    char alias;         /* a one-letter alias (-v), or 0 */
    /* CLI_ENUM: the library's pt_<enum>_from_name and pt_<enum>_name (whose
     * values run from 0 up to the first without a name). */
    int (*from_name)(int *out, const char *name);
    const char *(*enum_name)(int value);
    /* CLI_CUSTOM: parse value into dst; 0, or the exit code of the usage
     * error it printed (naming cmd and opt, "--name"). */
    int (*parse)(void *dst, const char *value, const char *cmd, const char *opt);
} cli_opt;

typedef struct cli_group {
    const char *title;  /* the help section ("optimizer"); NULL continues the last */
    const cli_opt *opts;
    size_t n;
    void *base;         /* the struct the entries' offsets point into */
} cli_group;

typedef struct cli_command {
    const char *name;   /* "sft"; NULL for the program's global options */
    const char *usage;  /* after "usage: posttrain NAME " */
    const char *about;  /* paragraphs after the usage line, or NULL */
    const char *epilog; /* text after the options, or NULL */
    /* printed after `about` (the program's command list), or NULL */
    void (*more_help)(FILE *f);
    int max_args;       /* non-option arguments accepted */
    bool stop_at_arg;   /* stop at the first non-option argument (the program's command) */
} cli_command;

#define CLI_COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))
/* An entry's offset in the command's argument struct, which the command's
 * file names cli_args (typedef my_args cli_args;) before its tables. */
#define CLI_ARG(field) offsetof(cli_args, field)
/* cli_parse's result after printing --help: the command exits 0. */
#define CLI_HELP (-1)

/* Non-option arguments, in order: args points into argv, whose non-option
 * arguments cli_parse moves to the front of argv + 1. */
typedef struct cli_rest {
    char **args;
    int n;
} cli_rest;

/* Apply the defaults, then parse argv[1 .. argc-1] (argv[0] is the command's
 * name).  Non-option arguments go to rest (NULL when max_args is 0); with
 * stop_at_arg, rest->args begins at the first of them and holds the rest of
 * argv.  Returns 0 to go on, CLI_HELP after printing the help on stdout, or
 * the exit code (2) of the usage error it printed. */
int cli_parse(const cli_command *cmd, const cli_group *groups, size_t n_groups, int argc,
              char **argv, cli_rest *rest);
/* cli_parse for a command whose options are one table over one struct. */
static inline int cli_parse_table(const cli_command *cmd, const cli_opt *opts, size_t n, void *base,
                                  int argc, char **argv, cli_rest *rest)
{
    const cli_group group = { "options", opts, n, base };
    return cli_parse(cmd, &group, 1, argc, argv, rest);
}
/* What a command returns for a non-zero cli_parse result. */
static inline int cli_exit_code(int rc)
{
    return rc == CLI_HELP ? 0 : rc;
}
/* The help generated from the tables. */
void cli_print_help(FILE *f, const cli_command *cmd, const cli_group *groups, size_t n_groups);

#endif
