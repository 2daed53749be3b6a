/* The output side of the training commands: outputs that would hit an input
 * are refused (resolved paths and inodes), --out is locked for the run, a
 * used --out is refused unless the run continues it (--resume) or replaces
 * it (--overwrite), leftovers of a killed run are removed, and a resumed
 * run's metrics keep the rows up to the checkpoint's step. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCK_NAME ".posttrain.lock"

/* The run's metrics file (one a process): its lock, and the write that
 * failed.  good is the offset after its last whole row. */
static struct {
    int lock_fd;
    char path[PATH_MAX];
    long long good, rows;
    int err;
    bool created; /* the lock created the file (removed at the end if still empty) */
} g_metrics = { .lock_fd = -1 };

/* ---- paths -------------------------------------------------------------------- */

/* The absolute, symlink-free form of p, which need not exist: the real path
 * of its longest existing prefix and the rest as given.  0, or -1. */
static int resolve(const char *p, char out[PATH_MAX])
{
    if (realpath(p, out))
        return 0;
    if (errno != ENOENT && errno != ENOTDIR)
        return -1;
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", p) >= (int)sizeof buf)
        return -1;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    const char *base = slash ? slash + 1 : buf;
    char parent[PATH_MAX];
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == buf)
        snprintf(parent, sizeof parent, "/");
    else {
        *slash = '\0';
        snprintf(parent, sizeof parent, "%s", buf);
    }
    char rp[PATH_MAX];
    if (resolve(parent, rp) != 0)
        return -1;
    if (!strcmp(base, ".") || !*base)
        return snprintf(out, PATH_MAX, "%s", rp) >= PATH_MAX ? -1 : 0;
    return snprintf(out, PATH_MAX, "%s%s%s", rp, strcmp(rp, "/") ? "/" : "", base) >= PATH_MAX ? -1 : 0;
}

/* a and b name the same file or directory: the same inode when both exist,
 * else the same resolved path. */
static bool same(const char *ra, const struct stat *sa, bool ea, const char *rb, const struct stat *sb, bool eb)
{
    if (ea && eb)
        return sa->st_dev == sb->st_dev && sa->st_ino == sb->st_ino;
    return !strcmp(ra, rb);
}

/* The resolved path inner lies below the directory outer (ro, so, eo). */
static bool inside(const char *inner, const char *ro, const struct stat *so, bool eo)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", inner);
    for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
        if (slash == buf)
            slash[1] = '\0';
        else
            *slash = '\0';
        struct stat st;
        bool e = stat(buf, &st) == 0;
        if (same(buf, &st, e, ro, so, eo))
            return true;
        if (slash == buf)
            break;
    }
    return false;
}

int cli_check_disjoint(const char *cmd, const char *out_opt, const char *out, const char *in_opt,
                       const char *in, unsigned allow)
{
    if (!out || !in)
        return 0;
    char ro[PATH_MAX], ri[PATH_MAX];
    if (resolve(out, ro) != 0 || resolve(in, ri) != 0) {
        fprintf(stderr, "posttrain %s: cannot resolve %s or %s: %s\n", cmd, out, in, strerror(errno));
        return 1;
    }
    struct stat so, si;
    bool eo = stat(ro, &so) == 0, ei = stat(ri, &si) == 0;
    if (same(ro, &so, eo, ri, &si, ei))
        return cli_usage_error(cmd, "%s %s is the same file as %s %s; writing it would destroy that input",
                               out_opt, out, in_opt, in);
    if (!(allow & CLI_ALLOW_IN_INSIDE_OUT) && inside(ri, ro, &so, eo))
        return cli_usage_error(cmd, "%s %s is inside %s %s; writing there could destroy that input", in_opt, in,
                               out_opt, out);
    if (!(allow & CLI_ALLOW_OUT_INSIDE_IN) && inside(ro, ri, &si, ei))
        return cli_usage_error(cmd, "%s %s is inside %s %s; writing there could destroy that input", out_opt,
                               out, in_opt, in);
    return 0;
}

int cli_check_disjoint_tree(const char *cmd, const char *out_opt, const char *out, const char *in_opt,
                            const char *in)
{
    int rc = cli_check_disjoint(cmd, out_opt, out, in_opt, in, 0);
    if (rc || !out || !in)
        return rc;
    DIR *d = opendir(in);
    if (!d)
        return 0; /* a file, or missing: the check above was the whole of it */
    struct dirent *e;
    char p[PATH_MAX];
    while (!rc && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            snprintf(p, sizeof p, "%s/%s", in, e->d_name) < (int)sizeof p) {
            struct stat st;
            /* a file the directory links to from elsewhere (a Hugging Face
             * cache's blobs): the output may not be it, nor hold it */
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
                rc = cli_check_disjoint(cmd, out_opt, out, in_opt, p, 0);
        }
    closedir(d);
    return rc;
}

/* ---- the output directory ----------------------------------------------------- */

/* Remove the files of a flat directory and the directory; 0 or -1. */
static int remove_flat(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    return rmdir(dir);
}

/* Remove dir and everything below it (no symlink is followed); 0 or -1. */
static int remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char p[PATH_MAX];
    int rc = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                rc |= remove_tree(p);
            else if (unlink(p) != 0)
                rc = -1;
        }
    closedir(d);
    return rmdir(dir) != 0 ? -1 : rc;
}

/* "step-00000012" -> 12; -1 for any other name (a ".tmp-PID" leftover too). */
static long long step_of(const char *name)
{
    if (strncmp(name, "step-", 5) != 0 || !name[5])
        return -1;
    char *end;
    long long n = strtoll(name + 5, &end, 10);
    return *end || n < 0 ? -1 : n;
}

/* A name pt_checkpoint_save or an atomic file write uses while writing. */
static bool is_temp(const char *name)
{
    return (!strncmp(name, "step-", 5) && strstr(name, ".tmp-")) || (name[0] == '.' && strstr(name, ".tmp."));
}

/* Remove what a killed run left half-written in dir; how many. */
static int remove_temps(const char *cmd, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)))
        if (is_temp(e->d_name)) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) != 0)
                continue;
            if (S_ISDIR(st.st_mode) ? remove_flat(p) : unlink(p))
                fprintf(stderr, "posttrain %s: warning: cannot remove the stale %s: %s\n", cmd, p, strerror(errno));
            else {
                fprintf(stderr, "posttrain %s: removed %s, left half-written by an earlier run\n", cmd, p);
                n++;
            }
        }
    closedir(d);
    return n;
}

/* The highest step of OUT/checkpoints/step-N (its name in name), or -1. */
static long long latest_checkpoint(const char *out, char *name, size_t n)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/checkpoints", out);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    long long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s = step_of(e->d_name);
        if (s > best) {
            best = s;
            snprintf(name, n, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    return best;
}

/* What in OUT shows an earlier run ("" when nothing does; an empty metrics
 * file is what the lock of a run that wrote no row leaves). */
static void used_by(const char *out, const char *metrics, char *what, size_t n)
{
    what[0] = '\0';
    struct stat st, sm;
    const bool has_m = metrics && stat(metrics, &sm) == 0;
    DIR *d = opendir(out);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, LOCK_NAME)) {
            snprintf(what, n, "%s/%s", out, e->d_name);
            if (has_m && stat(what, &st) == 0 && st.st_dev == sm.st_dev && st.st_ino == sm.st_ino &&
                sm.st_size == 0) {
                what[0] = '\0';
                continue;
            }
            break;
        }
    if (d)
        closedir(d);
    if (!what[0] && has_m && S_ISREG(sm.st_mode) && sm.st_size > 0)
        snprintf(what, n, "%s", metrics);
}

/* Lock the metrics file `path` (its own inode: --metrics may lie outside
 * --out, or inside another run's) for the run, as --out is locked.  fd
 * receives the locked descriptor.  0, or 1 after the message. */
static int lock_metrics(int *fd, const char *cmd, const char *path)
{
    *fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (*fd < 0 && errno == ENOENT) {
        *fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
        g_metrics.created = *fd >= 0;
    }
    if (*fd < 0) {
        fprintf(stderr, "posttrain %s: cannot open the metrics file %s: %s\n", cmd, path, strerror(errno));
        return 1;
    }
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    if (errno == EWOULDBLOCK)
        fprintf(stderr, "posttrain %s: the metrics file %s is in use by another posttrain run (it is locked); "
                        "wait for it or choose another --metrics\n", cmd, path);
    else
        fprintf(stderr, "posttrain %s: cannot lock the metrics file %s: %s\n", cmd, path, strerror(errno));
    close(*fd);
    *fd = -1;
    return 1;
}

static int begin_out(cli_out *o, const char *cmd, const char *out, const char *metrics, unsigned flags);

int cli_out_begin(cli_out *o, const char *cmd, const char *out, const char *metrics, unsigned flags)
{
    int rc = begin_out(o, cmd, out, metrics, flags);
    if (rc || !metrics)
        return rc;
    if (g_metrics.lock_fd >= 0)
        close(g_metrics.lock_fd);
    g_metrics.lock_fd = -1;
    g_metrics.err = 0;
    g_metrics.created = false;
    snprintf(g_metrics.path, sizeof g_metrics.path, "%s", metrics);
    return lock_metrics(&g_metrics.lock_fd, cmd, metrics);
}

static int begin_out(cli_out *o, const char *cmd, const char *out, const char *metrics, unsigned flags)
{
    o->lock_fd = -1;
    o->resume[0] = '\0';
    if (cli_make_out_dir(cmd, out))
        return 1;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", out, LOCK_NAME);
    o->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (o->lock_fd < 0) {
        fprintf(stderr, "posttrain %s: cannot create the lock file %s: %s\n", cmd, p, strerror(errno));
        return 1;
    }
    if (flock(o->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            fprintf(stderr, "posttrain %s: --out %s is in use by another posttrain run (%s is locked); "
                            "wait for it or choose another --out\n", cmd, out, p);
        else
            fprintf(stderr, "posttrain %s: cannot lock %s: %s\n", cmd, p, strerror(errno));
        return 1;
    }
    /* We hold the lock: a half-written name is a killed run's. */
    remove_temps(cmd, out);
    snprintf(p, sizeof p, "%s/checkpoints", out);
    remove_temps(cmd, p);
    snprintf(p, sizeof p, "%s/adapter", out);
    remove_temps(cmd, p);
    char what[PATH_MAX + 8];
    used_by(out, metrics, what, sizeof what);
    if (!what[0] || (flags & CLI_OUT_CONTINUE))
        return 0;
    if (flags & CLI_OUT_OVERWRITE) {
        static const char *const trees[] = { "checkpoints", "adapter" };
        for (size_t i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/%s", out, trees[i]);
            if (remove_tree(p) != 0) {
                fprintf(stderr, "posttrain %s: --overwrite: cannot remove %s: %s\n", cmd, p, strerror(errno));
                return 1;
            }
        }
        fprintf(stderr, "posttrain %s: --overwrite: replacing the earlier run in %s\n", cmd, out);
        return 0;
    }
    if (flags & CLI_OUT_AUTO) {
        long long s = latest_checkpoint(out, o->resume, sizeof o->resume);
        if (s >= 0)
            return 0;
        fprintf(stderr, "posttrain %s: --resume auto: --out %s holds an earlier run (%s) but no checkpoint "
                        "in %s/checkpoints to continue from; give --overwrite to start again\n",
                cmd, out, what, out);
        return 2;
    }
    if (flags & CLI_OUT_CAN_RESUME)
        return cli_usage_error(cmd, "--out %s already holds a run (%s): give --resume auto to continue it or "
                                    "--overwrite to replace it", out, what);
    return cli_usage_error(cmd, "--out %s already holds a run (%s): give --overwrite to replace it or choose "
                                "another --out", out, what);
}

void cli_out_end(cli_out *o)
{
    if (o->lock_fd >= 0)
        close(o->lock_fd);
    o->lock_fd = -1;
    if (g_metrics.lock_fd < 0)
        return;
    /* a run that ended before its first row leaves no metrics file */
    struct stat sl, sp;
    if (g_metrics.created && fstat(g_metrics.lock_fd, &sl) == 0 && sl.st_size == 0 &&
        stat(g_metrics.path, &sp) == 0 && sp.st_dev == sl.st_dev && sp.st_ino == sl.st_ino)
        unlink(g_metrics.path);
    close(g_metrics.lock_fd);
    g_metrics.lock_fd = -1;
}

int cli_out_check_later(const char *cmd, const char *out, long long step)
{
    char name[PATH_MAX];
    long long s = latest_checkpoint(out, name, sizeof name);
    if (s > step) {
        fprintf(stderr, "posttrain %s: --resume: %s is past the resumed step %lld and would be overwritten; "
                        "resume from it (--resume auto) or remove it\n", cmd, name, step);
        return 1;
    }
    return 0;
}

int cli_out_start(cli_out *o, const char *cmd, const char *out, const char *metrics, const char *model,
                  const char *data, const char **resume, bool overwrite)
{
    o->lock_fd = -1;
    o->resume[0] = '\0';
    if (overwrite && *resume)
        return cli_usage_error(cmd, "give --resume or --overwrite, not both");
    const bool auto_resume = *resume && !strcmp(*resume, "auto");
    const char *dir = auto_resume ? NULL : *resume;
    int rc;
    if ((rc = cli_check_disjoint(cmd, "--out", out, "--model", model, 0)) ||
        (rc = cli_check_disjoint(cmd, "--out", out, "--data", data, 0)) ||
        (rc = cli_check_disjoint(cmd, "--out", out, "--resume", dir, CLI_ALLOW_IN_INSIDE_OUT)) ||
        (rc = cli_check_disjoint(cmd, "--metrics", metrics, "--model", model, 0)) ||
        (rc = cli_check_disjoint(cmd, "--metrics", metrics, "--data", data, 0)) ||
        (rc = cli_check_disjoint(cmd, "--metrics", metrics, "--resume", dir, 0)) ||
        (rc = cli_check_disjoint(cmd, "--metrics", metrics, "--out", out, CLI_ALLOW_OUT_INSIDE_IN)))
        return rc;
    if (metrics)
        snprintf(o->metrics, sizeof o->metrics, "%s", metrics);
    else
        snprintf(o->metrics, sizeof o->metrics, "%s/metrics.jsonl", out);
    unsigned flags = CLI_OUT_CAN_RESUME | (overwrite ? CLI_OUT_OVERWRITE : 0) |
                     (auto_resume ? CLI_OUT_AUTO : dir ? CLI_OUT_CONTINUE : 0);
    if ((rc = cli_out_begin(o, cmd, out, o->metrics, flags)))
        return rc;
    if (auto_resume) {
        if (o->resume[0]) {
            *resume = o->resume;
            fprintf(stderr, "posttrain %s: --resume auto: the latest checkpoint is %s\n", cmd, o->resume);
        } else {
            *resume = NULL;
            fprintf(stderr, "posttrain %s: --resume auto: %s holds no run yet; starting at step 0\n", cmd, out);
        }
    }
    return 0;
}

int cli_out_resumed(const cli_out *o, const char *cmd, const char *out, long long step, double *lost_seconds,
                    long long *lost_steps)
{
    return cli_out_check_later(cmd, out, step) ||
           cli_metrics_trim(cmd, o->metrics, step, lost_seconds, lost_steps);
}

/* ---- metrics ------------------------------------------------------------------ */

/* The "step" of a metrics row, or -1. */
static long long row_step(const char *line)
{
    const char *s = strstr(line, "\"step\":");
    if (!s)
        return -1;
    char *end;
    long long n = strtoll(s + 7, &end, 10);
    return end == s + 7 ? -1 : n;
}

/* The "step_seconds" of a metrics row, or 0. */
static double row_seconds(const char *line)
{
    const char *s = strstr(line, "\"step_seconds\":");
    if (!s)
        return 0;
    char *end;
    double v = strtod(s + 15, &end);
    return end == s + 15 || !(v >= 0 && v < 1e12) ? 0 : v;
}

int cli_metrics_trim(const char *cmd, const char *path, long long step, double *lost_seconds,
                     long long *lost_steps)
{
    if (lost_seconds)
        *lost_seconds = 0;
    if (lost_steps)
        *lost_steps = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : (fprintf(stderr, "posttrain %s: cannot read %s: %s\n", cmd, path,
                                              strerror(errno)), 1);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *w = fopen(tmp, "w");
    if (!w) {
        fprintf(stderr, "posttrain %s: cannot write %s: %s\n", cmd, tmp, strerror(errno));
        fclose(f);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long long kept = 0, dropped = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        long long s = row_step(line);
        const bool complete = line[len - 1] == '\n', goodput = strstr(line, "\"goodput\":") != NULL;
        /* a row cut by a kill has no newline; rows past the checkpoint are
         * redone; the goodput row of a finished run is written again at the
         * end of this one */
        if (complete && !goodput && s >= 0 && s <= step) {
            fwrite(line, 1, (size_t)len, w);
            kept++;
        } else {
            dropped++;
            if (complete && !goodput && s > step) {
                if (lost_seconds)
                    *lost_seconds += row_seconds(line);
                if (lost_steps)
                    ++*lost_steps;
            }
        }
    }
    free(line);
    fclose(f);
    bool ok = fflush(w) == 0 && fsync(fileno(w)) == 0;
    ok = fclose(w) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "posttrain %s: cannot rewrite %s: %s\n", cmd, path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    /* the lock was on the file the rename replaced: hold the new one */
    if (g_metrics.lock_fd >= 0 && !strcmp(path, g_metrics.path)) {
        int fd;
        if (lock_metrics(&fd, cmd, path))
            return 1;
        close(g_metrics.lock_fd);
        g_metrics.lock_fd = fd;
    }
    if (dropped)
        fprintf(stderr, "posttrain %s: %s: kept %lld rows up to step %lld, dropped %lld after it\n", cmd, path,
                kept, step, dropped);
    return 0;
}

FILE *cli_open_metrics(const char *cmd, const char *path, const char *out, const char *mode)
{
    char def[PATH_MAX];
    snprintf(def, sizeof def, "%s/metrics.jsonl", out);
    const char *file = path ? path : def;
    FILE *f = fopen(file, mode);
    if (!f) {
        fprintf(stderr, "posttrain %s: cannot write %s: %s\n", cmd, file, strerror(errno));
        return NULL;
    }
    if (strcmp(file, g_metrics.path)) {
        snprintf(g_metrics.path, sizeof g_metrics.path, "%s", file);
        g_metrics.err = 0;
    }
    g_metrics.good = fseeko(f, 0, SEEK_END) == 0 ? (long long)ftello(f) : -1;
    return f;
}

void cli_metrics_row(const char *cmd, FILE **f)
{
    if (!*f)
        return;
    errno = 0;
    if (fflush(*f) == 0 && !ferror(*f)) {
        g_metrics.good = (long long)ftello(*f);
        g_metrics.rows++;
        return;
    }
    g_metrics.err = errno ? errno : EIO;
    /* no row cut short: back to the end of the last whole one */
    if (g_metrics.good >= 0 && ftruncate(fileno(*f), (off_t)g_metrics.good) != 0)
        g_metrics.good = -1;
    fclose(*f);
    *f = NULL;
    fprintf(stderr, "posttrain %s: error: cannot write the metrics file %s: %s; %s; no more rows are written, "
                    "the run goes on to save the model and then fails\n", cmd, g_metrics.path,
            strerror(g_metrics.err),
            g_metrics.good >= 0 ? "it ends with the last whole row" : "its last row may be cut short");
}

int cli_metrics_failed(const char *cmd, const char *out)
{
    if (!g_metrics.err)
        return 0;
    fprintf(stderr, "posttrain %s: failed: the metrics file %s could not be written (%s), so it lacks the rows "
                    "after the failure; the model was saved to %s\n", cmd, g_metrics.path,
            strerror(g_metrics.err), out);
    return 1;
}
