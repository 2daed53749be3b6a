/* The data-parallel side of the training commands (sft, grpo) as the CLI's
 * options and messages over the run layer (include/posttrain/run.h, which
 * owns the fault handling: goodput sections, the ranks' agreement, the
 * replica checks and rollbacks, the checkpoint interval): the job (pt_dist,
 * backend auto: MPI under mpirun/mpiexec/srun, else one process), shares
 * of a batch, the checks, saves and rollbacks after a step
 * (docs/distributed.md); rank 0's hold on --out is cli_out.c's. */
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_rank = 0, cli_nranks = 1;

void cli_note(const char *fmt, ...)
{
    if (cli_rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* ---- options ------------------------------------------------------------------ */

static int parse_sdc_action(void *dst, const char *value, const char *cmd, const char *opt)
{
    if (!strcmp(value, "rollback"))
        *(int *)dst = PT_RUN_ROLLBACK;
    else if (!strcmp(value, "stop"))
        *(int *)dst = PT_RUN_STOP;
    else
        return cli_usage_error(cmd, "%s takes rollback or stop, not '%s'", opt, value);
    return 0;
}

#define DA(field) offsetof(cli_dist_args, field)
const cli_opt cli_dist_opts[] = {
    { CLI_DOUBLE, "dist-timeout", DA(timeout), "S", .def = "60", .lo = 0, .hi = 1e9,
      .help = "under mpirun: a collective that does not complete within S\nseconds fails the job, naming the ranks "
              "that did not arrive;\n0: no deadline" },
    { CLI_INT, "sdc-every", DA(sdc_every), "K", .def = "100", .lo = 0, .hi = 1e9,
      .help = "under mpirun: compare the replicas' hashes every K steps and\nbefore every save; 0: off" },
    { CLI_CUSTOM, "sdc-action", DA(sdc_action), "rollback|stop", .def = "rollback", .parse = parse_sdc_action,
      .help = "on a replica mismatch: roll back to the last checkpoint and\nreplay, or stop" },
    { CLI_DOUBLE, "mtbf-hours", DA(mtbf_hours), "H", .lo = 0, .hi = 1e9,
      .help = "mean time between failures of the job (with --save-every auto)" },
};
#undef DA
const size_t cli_n_dist_opts = CLI_COUNT_OF(cli_dist_opts);

int cli_check_dist(const char *cmd, const cli_dist_args *d, int save_every)
{
    if (save_every == CLI_SAVE_AUTO && !(d->mtbf_hours > 0))
        return cli_usage_error(cmd, "--save-every auto needs --mtbf-hours H (H > 0)");
    if (save_every != CLI_SAVE_AUTO && d->mtbf_hours != 0)
        return cli_usage_error(cmd, "--mtbf-hours is used by --save-every auto only");
    return 0;
}

/* ---- the job ------------------------------------------------------------------ */

/* POSTTRAIN_TEST_FLIP_BIT=RANK:STEP (a test hook, docs/distributed.md). */
static void read_flip_hook(cli_job *j)
{
    j->flip_rank = -1;
    const char *v = getenv("POSTTRAIN_TEST_FLIP_BIT");
    int rank;
    long long step;
    char tail;
    if (!v || !*v)
        return;
    if (sscanf(v, "%d:%lld%c", &rank, &step, &tail) != 2 || rank < 0 || step < 1) {
        cli_note("posttrain %s: warning: POSTTRAIN_TEST_FLIP_BIT=%s is not RANK:STEP; ignored\n", j->cmd, v);
        return;
    }
    j->flip_rank = rank;
    j->flip_step = step;
}

int cli_job_begin(cli_job *j, const char *cmd, const cli_dist_args *a, int save_every)
{
    memset(j, 0, sizeof *j);
    j->cmd = cmd;
    j->args = *a;
    j->size = 1;
    j->save_every = save_every;
    int st;
    if ((st = pt_goodput_create(&j->gp)))
        return cli_fail("goodput", st);
    cli_job_section(j, PT_TIME_STARTUP);
    const char *launched = getenv("OMPI_COMM_WORLD_SIZE");
    if (!launched)
        launched = getenv("PMI_SIZE");
    if (!pt_dist_has_mpi() && launched && atoi(launched) > 1) {
        fprintf(stderr, "posttrain %s: this libposttrain was built without MPI, so under an MPI launcher of %s "
                        "processes each would train alone: rebuild with MPI (meson -Dmpi=enabled) or run one "
                        "process\n", cmd, launched);
        return 1;
    }
    pt_dist_options o;
    pt_dist_options_init(&o);
    o.timeout_s = a->timeout;
    if ((st = pt_dist_create(&j->dist, NULL, &o)))
        return cli_fail("joining the data-parallel job", st);
    cli_rank = j->rank = pt_dist_rank(j->dist);
    cli_nranks = j->size = pt_dist_size(j->dist);
    read_flip_hook(j);
    if (j->size > 1)
        cli_note("posttrain %s: data-parallel over %d ranks (MPI); collectives' deadline: %g s%s\n", cmd,
                 j->size, a->timeout, a->timeout > 0 ? "" : " (none)");
    return 0;
}

void cli_job_end(cli_job *j)
{
    pt_dist_free(j->dist);
    j->dist = NULL;
    pt_goodput_free(j->gp);
    j->gp = NULL;
}

int cli_job_agree(cli_job *j, int rc, const char *what)
{
    int out = rc, first = -1, st = pt_run_agree(&out, &first, j->run, rc);
    if (st)
        return rc ? rc : cli_fail(what, st);
    if (!rc && first >= 0 && j->rank == 0)
        fprintf(stderr, "posttrain %s: rank %d failed while %s (its message says why); stopping every rank\n",
                j->cmd, first, what);
    return out;
}

int cli_job_shard(cli_job *j, int64_t *begin, int64_t *count, int64_t n, const char *what)
{
    if (n < j->size) {
        if (j->rank == 0)
            cli_usage_error(j->cmd, "%s: %lld cannot be shared by %d ranks (each needs at least one): give at "
                                    "least %d, or run at most %lld ranks", what, (long long)n, j->size, j->size,
                            (long long)n);
        return 2;
    }
    int st = pt_dist_shard(begin, count, j->dist, n);
    return st ? cli_fail(what, st) : 0;
}

void cli_job_flip_hook(cli_job *j, pt_model *m, long long step)
{
    const char *name = NULL;
    if (j->run && pt_run_test_flip(&name, j->run, m, step) == PT_OK && name)
        fprintf(stderr, "posttrain %s: rank %d: POSTTRAIN_TEST_FLIP_BIT: flipped bit 13 of %s[0] after step %lld\n",
                j->cmd, j->rank, name, step);
}

/* After a replica mismatch: every rank goes back to the last complete
 * checkpoint (or the start) and the steps after it are replayed; their
 * time is lost, their metrics rows are dropped (pt_run_rollback).  0, or 1
 * after the message. */
static int job_rollback(cli_job *j, cli_out *o, pt_model *m, pt_optimizer *opt, const cli_back *b)
{
    cli_job_section(j, PT_TIME_LOAD);
    pt_run_state s;
    pt_run_state_init(&s);
    char *extra = NULL;
    int st = pt_run_rollback(&s, &extra, o->run, m, opt), rc;
    if (st == PT_ENOTFOUND)
        rc = b->restart(b->run);
    else if (st)
        rc = cli_run_fail(j->cmd, "rolling back");
    else
        rc = extra ? b->apply(b->run, &s, extra, pt_run_last_checkpoint(o->run)) : cli_fail("rolling back", PT_ENOMEM);
    pt_free(extra);
    rc = cli_job_agree(j, rc, "rolling back");
    cli_job_section(j, -1);
    return rc;
}

int cli_job_step_end(cli_job *j, cli_out *o, pt_model *m, pt_optimizer *opt, const cli_back *b,
                     int (*save)(void *run), long long step, long long total)
{
    int action = PT_RUN_CONTINUE, st = pt_run_step_end(&action, j->run, opt, step, total, save, b->run);
    if (st == PT_ECHECKSUM && action == PT_RUN_ROLLBACK) /* rank 0 noted the mismatch */
        return job_rollback(j, o, m, opt, b);
    if (st < 0 && st != PT_ECHECKSUM)
        return cli_fail("replica check", st);
    return st == PT_ECHECKSUM ? 1 : st; /* a mismatch that stops the run, or save's exit code */
}

int cli_job_optimizer(cli_job *j, pt_optimizer **opt, pt_model *m, const pt_optimizer_options *o)
{
    int st;
    pt_optimizer_free(*opt);
    *opt = NULL;
    if ((st = pt_optimizer_create(opt, m, o)))
        return cli_fail("optimizer", st);
    if (j->size > 1 && (st = pt_optimizer_set_dist(*opt, j->dist)))
        return cli_fail("optimizer", st);
    return 0;
}

int cli_job_save_final(cli_job *j, pt_model *m, const char *out, const char *base, long long steps,
                       long long skipped)
{
    cli_job_section(j, PT_TIME_SAVE);
    unsigned saved = 0;
    const bool lora = pt_model_has_lora(m);
    int st = pt_run_save_final(&saved, j->run, m, base), rc = st != PT_OK;
    if ((saved & PT_RUN_SAVED_ADAPTER) && j->rank == 0)
        fprintf(stderr, "posttrain %s: saved the PEFT adapter to %s/adapter\n", j->cmd, out);
    if (st && st != PT_EPEER)
        cli_fail(!lora || (saved & PT_RUN_SAVED_MERGED) ? "saving the model" : saved ? "merging the adapter"
                                                                                     : "saving the adapter", st);
    else if (!st && !(saved & PT_RUN_SAVED_MODEL) && j->rank == 0) /* a quantized base: the adapter is the result */
        fprintf(stderr, "posttrain %s: %s\nposttrain %s: the adapter in %s/adapter is the result of the %lld steps "
                        "(%lld optimizer updates skipped); no merged model is written\n", j->cmd, pt_last_error(),
                j->cmd, out, steps, skipped);
    else if (!st && j->rank == 0)
        fprintf(stderr, "posttrain %s: saved the model to %s after %lld steps (%lld optimizer updates skipped)\n",
                j->cmd, out, steps, skipped);
    cli_job_section(j, -1);
    return rc;
}
