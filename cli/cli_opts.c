/* The option engine of cli_opts.h: defaults, parsing, usage errors, --help. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HELP_COLUMN 26
#define MAX_OPTS 128 /* entries of one command, over all its groups */

/* An option of the command and where its value goes. */
typedef struct entry {
    const cli_opt *opt;
    void *dst;
} entry;

/* The groups' options in order into all[MAX_OPTS] (the first MAX_OPTS):
 * their count. */
static size_t flatten(entry *all, const cli_group *groups, size_t n_groups)
{
    size_t n = 0;
    for (size_t g = 0; g < n_groups; g++)
        for (size_t i = 0; i < groups[g].n; i++, n++)
            if (n < MAX_OPTS)
                all[n] = (entry){ &groups[g].opts[i], (char *)groups[g].base + groups[g].opts[i].offset };
    return n;
}

/* The index of the option arg names ("--name" or "-a"), or n. */
static size_t find(const entry *all, size_t n, const char *arg)
{
    for (size_t i = 0; i < n; i++) {
        const cli_opt *o = all[i].opt;
        if (arg[1] == '-' ? !strcmp(arg + 2, o->name) : o->alias && arg[1] == o->alias && !arg[2])
            return i;
    }
    return n;
}

/* ---- values ----------------------------------------------------------------- */

static bool unbounded(const cli_opt *o)
{
    return o->lo == 0 && o->hi == 0;
}

static int bad_integer(const char *cmd, const cli_opt *o, const char *v, long long lo, long long hi)
{
    if (unbounded(o))
        return cli_usage_error(cmd, "--%s needs an integer, not '%s'", o->name, v);
    return cli_usage_error(cmd, "--%s needs an integer in [%lld, %lld], not '%s'", o->name, lo, hi, v);
}

/* A whole decimal integer in the option's range (or [tmin, tmax]). */
static int parse_signed(long long *out, const char *cmd, const cli_opt *o, const char *v,
                        long long tmin, long long tmax)
{
    long long lo = unbounded(o) ? tmin : (long long)o->lo;
    long long hi = unbounded(o) ? tmax : (long long)o->hi;
    char *end;
    errno = 0;
    long long x = *v ? strtoll(v, &end, 10) : 0;
    if (!*v || errno || *end || x < lo || x > hi)
        return bad_integer(cmd, o, v, lo, hi);
    *out = x;
    return 0;
}

static int parse_unsigned(uint64_t *out, const char *cmd, const cli_opt *o, const char *v)
{
    bool digits = *v != '\0';
    for (const char *p = v; *p; p++)
        digits = digits && isdigit((unsigned char)*p);
    char *end;
    errno = 0;
    unsigned long long x = digits ? strtoull(v, &end, 10) : 0;
    bool ok = digits && !errno && (unbounded(o) || ((double)x >= o->lo && (double)x <= o->hi));
    if (ok) {
        *out = x;
        return 0;
    }
    if (unbounded(o))
        return cli_usage_error(cmd, "--%s needs a non-negative integer, not '%s'", o->name, v);
    return bad_integer(cmd, o, v, (long long)o->lo, (long long)o->hi);
}

static int parse_real(double *out, const char *cmd, const cli_opt *o, const char *v, double tmax)
{
    double x;
    bool ok = !cli_parse_double(v, &x) && isfinite(x) && fabs(x) <= tmax;
    if (ok && !unbounded(o))
        ok = x >= o->lo && x <= o->hi;
    if (ok) {
        *out = x;
        return 0;
    }
    if (unbounded(o))
        return cli_usage_error(cmd, "--%s needs a number, not '%s'", o->name, v);
    return cli_usage_error(cmd, "--%s needs a number in [%g, %g], not '%s'", o->name, o->lo, o->hi, v);
}

/* The library's message without its leading "pt_function: ". */
static const char *library_message(void)
{
    const char *m = pt_last_error(), *colon = strstr(m, ": ");
    return !strncmp(m, "pt_", 3) && colon ? colon + 2 : m;
}

static int set_value(const char *cmd, const cli_opt *o, void *dst, const char *v)
{
    long long n = 0;
    double x = 0;
    int rc = 0;
    switch (o->type) {
    case CLI_FLAG: *(bool *)dst = true; break;
    case CLI_FLAG_CLEAR: *(bool *)dst = false; break;
    case CLI_COUNT: ++*(int *)dst; break;
    case CLI_INT:
        if (!(rc = parse_signed(&n, cmd, o, v, INT_MIN, INT_MAX)))
            *(int *)dst = (int)n;
        break;
    case CLI_INT64:
        if (!(rc = parse_signed(&n, cmd, o, v, INT64_MIN, INT64_MAX)))
            *(int64_t *)dst = n;
        break;
    case CLI_UINT64: rc = parse_unsigned(dst, cmd, o, v); break;
    case CLI_FLOAT:
        if (!(rc = parse_real(&x, cmd, o, v, FLT_MAX)))
            *(float *)dst = (float)x;
        break;
    case CLI_DOUBLE: rc = parse_real(dst, cmd, o, v, DBL_MAX); break;
    case CLI_PATH:
        if (!*v)
            return cli_usage_error(cmd, "--%s needs a path, not ''", o->name);
        *(const char **)dst = v;
        break;
    case CLI_STRING: *(const char **)dst = v; break;
    case CLI_ENUM:
        if (!o->from_name(dst, v))
            break;
        return cli_usage_error(cmd, "--%s: %s", o->name, library_message());
    case CLI_CUSTOM: {
        char opt[64];
        snprintf(opt, sizeof opt, "--%s", o->name);
        rc = o->parse(dst, v, cmd, opt);
        break;
    }
    }
    return rc;
}

static bool takes_value(const cli_opt *o)
{
    return o->type != CLI_FLAG && o->type != CLI_FLAG_CLEAR && o->type != CLI_COUNT;
}

/* ---- parsing ---------------------------------------------------------------- */

/* "--a is required", "--a and --b are required", "--a, --b and --c are required". */
static int check_required(const char *cmd, const entry *all, size_t n_all, const bool *given)
{
    const char *missing[MAX_OPTS];
    int n = 0;
    for (size_t i = 0; i < n_all; i++)
        if (all[i].opt->required && !given[i])
            missing[n++] = all[i].opt->name;
    if (n == 0)
        return 0;
    char list[1024];
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s--%s",
                                i == 0 ? "" : i == n - 1 ? " and " : ", ", missing[i]);
    return cli_usage_error(cmd, "%s %s required", list, n == 1 ? "is" : "are");
}

static int add_rest(const cli_command *cmd, cli_rest *rest, char *arg)
{
    if (!rest || rest->n >= cmd->max_args)
        return cli_usage_error(cmd->name, "unexpected argument '%s'", arg);
    rest->args[rest->n++] = arg;
    return 0;
}

int cli_parse(const cli_command *cmd, const cli_group *groups, size_t n_groups, int argc,
              char **argv, cli_rest *rest)
{
    entry all[MAX_OPTS];
    bool given[MAX_OPTS] = { false };
    size_t n = flatten(all, groups, n_groups);
    int rc = 0;
    if (n > MAX_OPTS)
        return cli_usage_error(cmd->name, "has more options than the engine's %d", MAX_OPTS);
    for (size_t i = 0; i < n && !rc; i++) /* the defaults; an error is a table's mistake */
        rc = all[i].opt->def ? set_value(cmd->name, all[i].opt, all[i].dst, all[i].opt->def) : 0;
    if (rest)
        *rest = (cli_rest){ argv + 1, 0 };
    for (int i = 1; i < argc && !rc; i++) {
        char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            cli_print_help(stdout, cmd, groups, n_groups);
            return CLI_HELP;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (cmd->stop_at_arg) {
                *rest = (cli_rest){ argv + i, argc - i };
                break;
            }
            rc = add_rest(cmd, rest, arg);
            continue;
        }
        size_t k = find(all, n, arg);
        if (k == n)
            return cli_usage_error(cmd->name, "unknown option '%s'", arg);
        const cli_opt *o = all[k].opt;
        if (takes_value(o) && i + 1 >= argc)
            return cli_usage_error(cmd->name, "--%s needs a value", o->name);
        rc = set_value(cmd->name, o, all[k].dst, takes_value(o) ? argv[++i] : NULL);
        given[k] = true;
    }
    return rc ? rc : check_required(cmd->name, all, n, given);
}

/* ---- help ------------------------------------------------------------------- */

/* "adamw|sgd": the names of values 0, 1, ... up to the first without one. */
static void enum_names(char *buf, size_t n, const cli_opt *o)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int v = 0; o->enum_name(v) && len < n; v++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", v ? "|" : "", o->enum_name(v));
}

static void print_help_text(FILE *f, const char *text)
{
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n')
            fprintf(f, "%*s", HELP_COLUMN, "");
    }
}

static void print_opt(FILE *f, const cli_opt *o)
{
    char names[160], meta[128];
    if (o->type == CLI_ENUM)
        enum_names(meta, sizeof meta, o);
    else
        snprintf(meta, sizeof meta, "%s", o->meta ? o->meta : "");
    int n = o->alias ? snprintf(names, sizeof names, "  -%c, --%s", o->alias, o->name)
                     : snprintf(names, sizeof names, "  --%s", o->name);
    if (takes_value(o))
        n += snprintf(names + n, sizeof names - (size_t)n, " %s", meta);
    if (n >= HELP_COLUMN - 1)
        fprintf(f, "%s\n%*s", names, HELP_COLUMN, "");
    else
        fprintf(f, "%-*s", HELP_COLUMN, names);
    print_help_text(f, o->help ? o->help : "");
    if (o->def && takes_value(o))
        fprintf(f, " (default %s)", o->def);
    if (o->required)
        fprintf(f, " (required)");
    fputc('\n', f);
}

void cli_print_help(FILE *f, const cli_command *cmd, const cli_group *groups, size_t n_groups)
{
    fprintf(f, "usage: posttrain%s%s%s%s\n", cmd->name ? " " : "", cmd->name ? cmd->name : "",
            *cmd->usage ? " " : "", cmd->usage);
    if (cmd->about)
        fprintf(f, "\n%s\n", cmd->about);
    if (cmd->more_help)
        cmd->more_help(f);
    bool titled = false;
    for (size_t g = 0; g < n_groups; g++) {
        if (groups[g].title) {
            fprintf(f, "\n%s:\n", groups[g].title);
            titled = true;
        }
        for (size_t i = 0; i < groups[g].n; i++)
            print_opt(f, &groups[g].opts[i]);
    }
    if (!titled)
        fprintf(f, "\noptions:\n");
    fprintf(f, "%-*s%s\n", HELP_COLUMN, "  -h, --help", "this help");
    if (cmd->epilog)
        fprintf(f, "%s\n", cmd->epilog);
}
