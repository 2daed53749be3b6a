/* Durable file writing (temp + fsync + rename + directory fsync), the
 * errno mapping every io failure goes through, and opening a regular file
 * for reading or mapping. */
#include "io/fileio.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int pt__io_errno(int err, const char *what, const char *path)
{
    char buf[256];
    const char *msg = strerror_r(err, buf, sizeof buf); /* GNU variant (_GNU_SOURCE) */
    int status = PT_EIO;
#ifdef EDQUOT
    if (err == EDQUOT)
        status = PT_ENOSPC;
#endif
    if (err == ENOSPC)
        status = PT_ENOSPC;
    return pt__err(status, "%s %s: %s", what, path ? path : "(null)", msg);
}

/* What a path that is not a regular file is, for the message. */
static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a device";
}

int pt__open_regular(int *fd, uint64_t *size, const char *path)
{
    PT_CHECK_NULL(fd);
    PT_CHECK_NULL(path);
    *fd = -1;
    /* O_NONBLOCK: a FIFO or device under a hostile path must not hang the
     * open; it is then refused as not a regular file */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0) {
        if (errno == ENOENT)
            return pt__err(PT_ENOTFOUND, "cannot open %s: %s", path, strerror(ENOENT));
        return pt__io_errno(errno, "cannot open", path);
    }
    struct stat sb;
    int st = PT_OK;
    if (fstat(f, &sb) != 0)
        st = pt__io_errno(errno, "cannot stat", path);
    else if (!S_ISREG(sb.st_mode))
        st = pt__err(PT_EIO, "%s is not a regular file (it is %s)", path, kind_of(sb.st_mode));
    if (st != PT_OK) {
        close(f);
        return st;
    }
    *fd = f;
    if (size)
        *size = (uint64_t)sb.st_size;
    return PT_OK;
}

int pt__map_file(const uint8_t **base, size_t *len, const char *path, const char *kind)
{
    *base = NULL;
    *len = 0;
    int fd = -1;
    uint64_t size = 0;
    int st = pt__open_regular(&fd, &size, path);
    if (st != PT_OK)
        return st;
    if (size > (uint64_t)SIZE_MAX)
        st = pt__err(PT_ERANGE, "%s%s: file too large to map", kind, path);
    else if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            st = pt__io_errno(errno, "mmap", path);
        else {
            *base = p;
            *len = (size_t)size;
        }
    }
    close(fd);
    return st;
}

int pt__read_file(char **out, size_t *out_len, const char *path, size_t max_bytes)
{
    PT_CHECK_NULL(out);
    *out = NULL;
    if (out_len)
        *out_len = 0;
    int fd;
    uint64_t size;
    int st = pt__open_regular(&fd, &size, path);
    if (st)
        return st;
    if (size > (uint64_t)max_bytes) {
        close(fd);
        return pt__err(PT_ERANGE, "%s is %llu bytes, over the limit of %zu", path,
                      (unsigned long long)size, max_bytes);
    }
    size_t n = (size_t)size, got = 0;
    char *buf = pt__malloc(n + 1);
    if (!buf) {
        close(fd);
        return PT_ENOMEM;
    }
    int rerr = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rerr = r < 0 ? errno : 0;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return pt__err(PT_EIO, "short read on %s (%zu of %zu bytes)%s%s", path, got, n, rerr ? ": " : "",
                      rerr ? strerror(rerr) : "");
    }
    buf[n] = '\0';
    *out = buf;
    if (out_len)
        *out_len = n;
    return PT_OK;
}

/* ---- durable writes ------------------------------------------------------------- */

int pt__fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return pt__io_errno(errno, "open directory", dir);
    if (fsync(fd) != 0) {
        int e = errno;
        /* Some file systems cannot fsync a directory; that is not a failure. */
        if (e != EINVAL && e != ENOTSUP) {
            close(fd);
            return pt__io_errno(e, "fsync directory", dir);
        }
    }
    close(fd);
    return PT_OK;
}

/* Split path into a freshly allocated directory part ("." if none). */
static char *parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return pt__strdup(".");
    if (slash == path)
        return pt__strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = pt__malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

int pt__fsync_parent_dir(const char *path)
{
    char *dir = parent_dir(path);
    if (!dir)
        return PT_ENOMEM;
    int st = pt__fsync_dir(dir);
    free(dir);
    return st;
}

int pt__atomic_open(pt_atomic_file *af, const char *path)
{
    PT_CHECK_NULL(af);
    PT_CHECK_ARG(path && *path, path, "is NULL or empty");
    af->fd = -1;
    af->path = NULL;
    af->tmp_path = NULL;
    af->written = 0;
    size_t len = strlen(path);
    PT_CHECK_ARG(path[len - 1] != '/', path, "'%s' names a directory", path);
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    /* "<dir>/.<base>.tmp.XXXXXX" */
    size_t tmp_len = dir_len + 1 + strlen(base) + sizeof ".tmp.XXXXXX";
    af->path = pt__strdup(path);
    af->tmp_path = pt__malloc(tmp_len);
    if (!af->path || !af->tmp_path) {
        free(af->path);
        free(af->tmp_path);
        af->path = af->tmp_path = NULL;
        return PT_ENOMEM;
    }
    snprintf(af->tmp_path, tmp_len, "%.*s.%s.tmp.XXXXXX", (int)dir_len, path, base);
    int fd = mkostemp(af->tmp_path, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        int st = pt__io_errno(e, "create temporary file for", path);
        free(af->path);
        free(af->tmp_path);
        af->path = af->tmp_path = NULL;
        return st;
    }
    af->fd = fd;
    return PT_OK;
}

int pt__atomic_write(pt_atomic_file *af, const void *buf, size_t len)
{
    if (!af || af->fd < 0)
        return pt__err(PT_ESTATE, "atomic write: file is not open");
    const unsigned char *p = buf;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(af->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return pt__io_errno(errno, "write", af->tmp_path);
        }
        if (w == 0)
            return pt__io_errno(ENOSPC, "write", af->tmp_path);
        p += w;
        len -= (size_t)w;
        af->written += (uint64_t)w;
    }
    return PT_OK;
}

void pt__atomic_abort(pt_atomic_file *af)
{
    if (!af)
        return;
    if (af->fd >= 0) {
        close(af->fd);
        af->fd = -1;
    }
    if (af->tmp_path) {
        unlink(af->tmp_path);
        free(af->tmp_path);
        af->tmp_path = NULL;
    }
    free(af->path);
    af->path = NULL;
}

int pt__atomic_commit(pt_atomic_file *af)
{
    if (!af || af->fd < 0 || !af->tmp_path)
        return pt__err(PT_ESTATE, "atomic write: file is not open");
    int st = PT_OK;
    if (fsync(af->fd) != 0) {
        st = pt__io_errno(errno, "fsync", af->tmp_path);
        pt__atomic_abort(af);
        return st;
    }
    /* mkstemp makes 0600; a model file is meant to be shared like any other. */
    if (fchmod(af->fd, 0644) != 0) {
        st = pt__io_errno(errno, "chmod", af->tmp_path);
        pt__atomic_abort(af);
        return st;
    }
    int fd = af->fd;
    af->fd = -1;
    if (close(fd) != 0) {
        st = pt__io_errno(errno, "close", af->tmp_path);
        pt__atomic_abort(af);
        return st;
    }
    if (rename(af->tmp_path, af->path) != 0) {
        st = pt__io_errno(errno, "rename temporary file to", af->path);
        pt__atomic_abort(af);
        return st;
    }
    free(af->tmp_path);
    af->tmp_path = NULL;
    st = pt__fsync_parent_dir(af->path);
    free(af->path);
    af->path = NULL;
    return st;
}

int pt__write_file_atomic(const char *path, const void *buf, size_t len)
{
    PT_CHECK_ARG(buf || len == 0, buf, "is NULL with len = %zu (writing %s)", len,
                 path ? path : "(null)");
    pt_atomic_file af;
    int st = pt__atomic_open(&af, path);
    if (st != PT_OK)
        return st;
    if (len > 0 && (st = pt__atomic_write(&af, buf, len)) != PT_OK) {
        pt__atomic_abort(&af);
        return st;
    }
    return pt__atomic_commit(&af);
}
