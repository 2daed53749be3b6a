/* The run directory (include/posttrain/run.h, docs/run-directory.md): its
 * lock, the half-written names a killed run leaves, the start modes, the
 * latest checkpoint and retention. */
#include "core/core.h"
#include "io/fileio.h"
#include "run_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t pt__run__step_of(const char *name)
{
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9')
        return -1;
    char *end;
    errno = 0;
    long long n = strtoll(name + 5, &end, 10);
    return *end || errno || n < 0 ? -1 : (int64_t)n;
}

/* A name pt_checkpoint_save or an atomic file write uses while writing. */
static bool is_temp(const char *name)
{
    return (!strncmp(name, "step-", 5) && strstr(name, ".tmp-")) || (name[0] == '.' && strstr(name, ".tmp."));
}

int pt__run__remove_tree(const char *dir)
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
                rc |= pt__run__remove_tree(p);
            else if (unlink(p) != 0)
                rc = -1;
        }
    closedir(d);
    return rmdir(dir) != 0 ? -1 : rc;
}

/* Remove what a killed run left half-written in dir (logged). */
static void remove_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)))
        if (is_temp(e->d_name)) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) != 0)
                continue;
            if (S_ISDIR(st.st_mode) ? pt__run__remove_tree(p) : unlink(p))
                pt__log(PT_LOG_WARN, "cannot remove the stale %s: %s", p, strerror(errno));
            else
                pt__log(PT_LOG_WARN, "removed %s, left half-written by an earlier run", p);
        }
    closedir(d);
}

int64_t pt__run__latest(const char *ckpt_dir, char **path)
{
    *path = NULL;
    DIR *d = opendir(ckpt_dir);
    if (!d)
        return -1;
    int64_t best = -1;
    char name[NAME_MAX + 1] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = pt__run__step_of(e->d_name);
        if (s > best) {
            best = s;
            snprintf(name, sizeof name, "%s", e->d_name);
        }
    }
    closedir(d);
    if (best >= 0 && !(*path = pt__path_join(ckpt_dir, name)))
        return -2;
    return best;
}

/* What in DIR shows an earlier run ("" when nothing does; an empty metrics
 * file is what the lock of a run that wrote no row leaves). */
static void used_by(const pt_run *r, char *what, size_t n)
{
    what[0] = '\0';
    struct stat st, sm;
    const bool has_m = fstat(r->mfd, &sm) == 0;
    DIR *d = opendir(r->dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, PT_RUN_LOCK_NAME)) {
            snprintf(what, n, "%s/%s", r->dir, e->d_name);
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
        snprintf(what, n, "%s", r->metrics);
}

static int lock_dir(pt_run *r)
{
    if (mkdir(r->dir, 0755) != 0 && errno != EEXIST)
        return pt__io_errno(errno, "cannot create", r->dir);
    char *p = pt__path_join(r->dir, PT_RUN_LOCK_NAME);
    if (!p)
        return PT_ENOMEM;
    int st = PT_OK;
    r->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (r->lock_fd < 0)
        st = pt__io_errno(errno, "cannot create the lock file", p);
    else if (flock(r->lock_fd, LOCK_EX | LOCK_NB) != 0)
        st = errno == EWOULDBLOCK
                 ? pt__err(PT_EBUSY, "%s %s is in use by another posttrain run (%s is locked); wait for it or "
                                    "choose another %s", r->dir_name, r->dir, p, r->dir_name)
                 : pt__io_errno(errno, "cannot lock", p);
    free(p);
    return st;
}

/* opts.start against what the directory holds. */
static int apply_start(pt_run *r, const char *what)
{
    if (r->o.start == PT_RUN_RESUME_FROM) {
        if (!(r->resume = strdup(r->resume_from)))
            return pt__err(PT_ENOMEM, "out of memory");
        return PT_OK;
    }
    if (r->o.start == PT_RUN_RESUME_AUTO) {
        int64_t s = pt__run__latest(r->ckpt_dir, &r->resume);
        if (s == -2)
            return PT_ENOMEM;
        if (s >= 0 || !what[0])
            return PT_OK;
        return pt__err(PT_ENOTFOUND, "%s %s holds an earlier run (%s) but no checkpoint in %s to continue from",
                      r->dir_name, r->dir, what, r->ckpt_dir);
    }
    if (!what[0])
        return PT_OK;
    if (r->o.start == PT_RUN_NEW)
        return pt__err(PT_EEXIST, "%s %s already holds a run (%s)", r->dir_name, r->dir, what);
    static const char *const trees[] = { "checkpoints", "adapter" };
    for (size_t i = 0; i < 2; i++) {
        char *p = pt__path_join(r->dir, trees[i]);
        if (!p)
            return PT_ENOMEM;
        int st = pt__run__remove_tree(p) != 0 ? pt__io_errno(errno, "cannot remove", p) : PT_OK;
        free(p);
        if (st)
            return st;
    }
    pt__log(PT_LOG_WARN, "%s: replacing the earlier run in %s", pt_run_start_name(r->o.start), r->dir);
    return PT_OK;
}

int pt__run__open_dir(pt_run *r)
{
    int st = lock_dir(r);
    if (!st)
        st = pt__run__lock_metrics(&r->mfd, &r->m_created, r->metrics, r->metrics_name);
    if (st)
        return st;
    /* We hold the locks: a half-written name is a killed run's. */
    remove_temps(r->dir);
    remove_temps(r->ckpt_dir);
    char *p = pt__path_join(r->dir, "adapter");
    if (!p)
        return PT_ENOMEM;
    remove_temps(p);
    free(p);
    char what[PATH_MAX + 8];
    used_by(r, what, sizeof what);
    if ((st = apply_start(r, what)))
        return st;
    return pt__run__metrics_open(r, r->resume == NULL);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The steps of the complete checkpoints, ascending; *n of them. */
static int list_steps(int64_t **steps, size_t *n, const char *ckpt_dir)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(ckpt_dir);
    if (!d)
        return pt__io_errno(errno, "cannot list", ckpt_dir);
    size_t cap = 0;
    struct dirent *e;
    int st = PT_OK;
    while (!st && (e = readdir(d))) {
        int64_t s = pt__run__step_of(e->d_name);
        if (s < 0)
            continue;
        if (*n == cap) {
            int64_t *g = pt__grow_array(*steps, &cap, 16, sizeof **steps);
            if (!g) {
                st = PT_ENOMEM;
                break;
            }
            *steps = g;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (!st)
        qsort(*steps, *n, sizeof **steps, cmp_i64);
    return st;
}

int pt__run__retain(pt_run *r)
{
    const int64_t K = r->o.keep_last, N = r->o.keep_every;
    if (K <= 0 && N <= 0)
        return PT_OK;
    int64_t *steps;
    size_t n;
    int st = list_steps(&steps, &n, r->ckpt_dir);
    for (size_t i = 0; !st && i < n; i++) {
        /* the newest always stays (it is what a resume continues from) */
        bool keep = i + 1 == n || (K > 0 && (int64_t)(n - i) <= K) || (N > 0 && steps[i] % N == 0);
        if (keep)
            continue;
        char base[40], gone[64];
        snprintf(base, sizeof base, "step-%08" PRId64, steps[i]);
        char *path = pt__path_join(r->ckpt_dir, base);
        if (!path) {
            st = PT_ENOMEM;
            break;
        }
        /* renamed to a half-written name first: a crash part way leaves
         * what the next open removes, never a damaged checkpoint */
        snprintf(gone, sizeof gone, "%s.tmp-%ld", base, (long)getpid());
        char *tmp = pt__path_join(r->ckpt_dir, gone);
        if (!tmp)
            st = PT_ENOMEM;
        else if (rename(path, tmp) != 0 || pt__run__remove_tree(tmp) != 0)
            st = pt__io_errno(errno, "cannot remove the old checkpoint", path);
        else
            pt__log(PT_LOG_INFO, "removed the old checkpoint %s (keep_last %" PRId64 ", keep_every %" PRId64 ")",
                   path, K, N);
        free(tmp);
        free(path);
    }
    free(steps);
    return st;
}
