/* The metrics file of a run (include/posttrain/run.h): locked for the run,
 * one JSON object a line with a wall-clock "time", never a half row (a
 * failed write is cut back to the last whole row and is an error), trimmed
 * to a resumed checkpoint's step atomically. */
#include "core/core.h"
#include "io/fileio.h"
#include "run_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OPEN_FLAGS (O_RDWR | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

int pt__run__lock_metrics(int *fd, bool *created, const char *path, const char *name)
{
    *fd = open(path, OPEN_FLAGS);
    if (*fd < 0 && errno == ENOENT) {
        *fd = open(path, OPEN_FLAGS | O_CREAT | O_EXCL, 0644);
        if (created)
            *created = *fd >= 0;
    }
    if (*fd < 0)
        return pt__io_errno(errno, "cannot open the metrics file", path);
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
        return PT_OK;
    int st = errno == EWOULDBLOCK ? pt__err(PT_EBUSY, "the metrics file %s is in use by another posttrain run (it "
                                                     "is locked); wait for it or choose another %s", path, name)
                                  : pt__io_errno(errno, "cannot lock the metrics file", path);
    close(*fd);
    *fd = -1;
    return st;
}

static bool is_regular(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

int pt__run__metrics_open(pt_run *r, bool fresh)
{
    if (fresh && is_regular(r->mfd) && ftruncate(r->mfd, 0) != 0)
        return pt__io_errno(errno, "cannot empty the metrics file", r->metrics);
    off_t end = lseek(r->mfd, 0, SEEK_END);
    r->good = end < 0 ? 0 : (int64_t)end;
    return PT_OK;
}

void pt__run__metrics_close(pt_run *r)
{
    if (r->mfd < 0)
        return;
    /* a run that ended before its first row leaves no metrics file */
    struct stat sl, sp;
    if (r->m_created && fstat(r->mfd, &sl) == 0 && sl.st_size == 0 && stat(r->metrics, &sp) == 0 &&
        sp.st_dev == sl.st_dev && sp.st_ino == sl.st_ino)
        unlink(r->metrics);
    close(r->mfd);
    r->mfd = -1;
}

int pt_run_log(pt_run *r, const char *row_json)
{
    PT_CHECK_NULL(r);
    PT_CHECK_NULL(row_json);
    if (r->rank != 0)
        return PT_OK; /* rank 0 writes the job's rows */
    if (r->m_errno)
        return pt__err(r->m_errno == ENOSPC || r->m_errno == EDQUOT ? PT_ENOSPC : PT_EIO,
                      "%s: the metrics file %s could not be written (%s) and takes no more rows", __func__,
                      r->metrics, strerror(r->m_errno));
    size_t n = strlen(row_json);
    while (n && (row_json[n - 1] == ' ' || row_json[n - 1] == '\t' || row_json[n - 1] == '\n' ||
                 row_json[n - 1] == '\r'))
        n--;
    const char *end = NULL;
    cJSON *row = cJSON_ParseWithLengthOpts(row_json, n, &end, false);
    bool obj = cJSON_IsObject(row) && end == row_json + n && row_json[n - 1] == '}';
    bool has_time = obj && cJSON_GetObjectItemCaseSensitive(row, "time") != NULL;
    bool empty = obj && !row->child;
    cJSON_Delete(row);
    if (!obj || memchr(row_json, '\n', n))
        return pt__err(PT_EINVAL, "%s: row_json is not one JSON object on one line", __func__);
    if (has_time)
        return pt__err(PT_EINVAL, "%s: row_json holds \"time\", which the run adds", __func__);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char tail[64];
    int tn = snprintf(tail, sizeof tail, "%s\"time\": %.6f}\n", empty ? "" : ", ",
                      (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
    char *line = pt__malloc(n - 1 + (size_t)tn);
    if (!line)
        return pt__err_in(__func__, PT_ENOMEM);
    memcpy(line, row_json, n - 1);
    memcpy(line + n - 1, tail, (size_t)tn);
    size_t len = n - 1 + (size_t)tn, done = 0;
    while (done < len) {
        ssize_t w = write(r->mfd, line + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r->m_errno = w < 0 ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    free(line);
    if (!r->m_errno) {
        r->good += (int64_t)len;
        r->rows++;
        return PT_OK;
    }
    /* no row cut short: back to the end of the last whole one */
    bool cut = !done || ftruncate(r->mfd, (off_t)r->good) == 0;
    int st = pt__io_errno(r->m_errno, "cannot write the metrics file", r->metrics);
    return pt__err(st, "%s: cannot write the metrics file %s: %s; %s", __func__, r->metrics, strerror(r->m_errno),
                  cut ? "it ends with its last whole row" : "its last row may be cut short");
}

/* The row's "step" (-1 when none), whether it has "goodput", its
 * "step_seconds" (0 when none). */
static void row_fields(const char *line, size_t len, int64_t *step, bool *goodput, double *seconds,
                       double *when)
{
    *step = -1;
    *goodput = false;
    *seconds = 0;
    *when = 0;
    cJSON *row = cJSON_ParseWithLength(line, len);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(row, "time");
    if (cJSON_IsNumber(w) && w->valuedouble > 0 && w->valuedouble < 1e11)
        *when = w->valuedouble;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(row, "step");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(row, "step_seconds");
    if (cJSON_IsNumber(s) && s->valuedouble >= 0 && s->valuedouble == floor(s->valuedouble) &&
        s->valuedouble <= 9007199254740992.0)
        *step = (int64_t)s->valuedouble;
    *goodput = cJSON_GetObjectItemCaseSensitive(row, "goodput") != NULL;
    if (cJSON_IsNumber(t) && t->valuedouble >= 0 && t->valuedouble < 1e12)
        *seconds = t->valuedouble;
    cJSON_Delete(row);
}

/* Copy the rows of f up to `step` to fd; counts into kept/dropped. */
static int copy_rows(pt_run *r, FILE *f, int fd, int64_t step, int64_t *kept, int64_t *dropped)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int st = PT_OK;
    while (!st && (len = getline(&line, &cap, f)) > 0) {
        int64_t s;
        bool goodput;
        double secs, t;
        const bool complete = line[len - 1] == '\n';
        row_fields(line, (size_t)len, &s, &goodput, &secs, &t);
        if (complete && t > r->last_row_time)
            r->last_row_time = t;
        /* a row cut by a kill has no newline; rows past the checkpoint are
         * redone; the goodput row of a finished run is written again */
        if (complete && !goodput && s >= 0 && s <= step) {
            if (write(fd, line, (size_t)len) != len)
                st = pt__io_errno(errno ? errno : EIO, "cannot write", r->metrics);
            ++*kept;
        } else {
            ++*dropped;
            if (complete && !goodput && s > step) {
                r->lost_seconds += secs;
                r->lost_steps++;
            }
        }
    }
    free(line);
    return st;
}

int pt__run__metrics_trim(pt_run *r, int64_t step)
{
    r->lost_seconds = 0;
    r->lost_steps = 0;
    r->last_row_time = 0;
    if (!is_regular(r->mfd))
        return PT_OK; /* a device (/dev/null): nothing to keep */
    FILE *f = fopen(r->metrics, "r");
    if (!f)
        return pt__io_errno(errno, "cannot read", r->metrics);
    /* the atomic writer's name pattern, which an open removes as a leftover */
    const char *slash = strrchr(r->metrics, '/');
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%.*s.%s.tmp.%ld", slash ? (int)(slash - r->metrics + 1) : 0, r->metrics,
             slash ? slash + 1 : r->metrics, (long)getpid());
    int fd = open(tmp, OPEN_FLAGS | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fclose(f);
        return pt__io_errno(errno, "cannot write", tmp);
    }
    int64_t kept = 0, dropped = 0;
    int st = flock(fd, LOCK_EX | LOCK_NB) != 0 ? pt__io_errno(errno, "cannot lock", tmp) : PT_OK;
    if (!st)
        st = copy_rows(r, f, fd, step, &kept, &dropped);
    fclose(f);
    if (!st && fsync(fd) != 0)
        st = pt__io_errno(errno, "cannot fsync", tmp);
    if (!st && rename(tmp, r->metrics) != 0)
        st = pt__io_errno(errno, "cannot rename to", r->metrics);
    if (st) {
        close(fd);
        unlink(tmp);
        return st;
    }
    pt__fsync_parent_dir(r->metrics);
    /* the lock was on the file the rename replaced: hold the new one */
    close(r->mfd);
    r->mfd = fd;
    r->m_created = false;
    off_t end = lseek(fd, 0, SEEK_END);
    r->good = end < 0 ? 0 : (int64_t)end;
    if (dropped)
        pt__log(PT_LOG_INFO, "%s: kept %" PRId64 " rows up to step %" PRId64 ", dropped %" PRId64 " after it",
               r->metrics, kept, step, dropped);
    return PT_OK;
}
