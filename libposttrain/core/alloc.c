#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void *pt_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

/* count * size into *total; false (and the error set) when it overflows. */
static bool array_bytes(size_t count, size_t size, size_t *total)
{
    if (pt_mul_size(count, size, total))
        return true;
    pt_err(PT_ENOMEM, "allocation of %zu x %zu bytes overflows", count, size);
    return false;
}

void *pt_calloc(size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", total);
    return p;
}

void *pt_malloc_array(size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    return pt_malloc(total);
}

void *pt_realloc_array(void *p, size_t count, size_t size)
{
    size_t total;
    if (!array_bytes(count, size, &total))
        return NULL;
    void *q = realloc(p, total ? total : 1);
    if (!q)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", total);
    return q;
}

void *pt_grow_array(void *p, size_t *cap, size_t first, size_t size)
{
    size_t c = *cap ? *cap * 2 : first;
    void *q = pt_realloc_array(p, c, size);
    if (q)
        *cap = c;
    return q;
}

void *pt_malloc_aligned(size_t n)
{
    size_t rounded;
    if (!pt_add_size(n, 63, &rounded)) {
        pt_err(PT_ENOMEM, "aligned allocation of %zu bytes overflows", n);
        return NULL;
    }
    rounded &= ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
        pt_err(PT_ENOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void pt_free_aligned(void *p)
{
    free(p);
}

void pt_free(void *ptr)
{
    free(ptr);
}

char *pt_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = pt_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* What a path that is not a regular file is, for the message. */
static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a device";
}

int pt_read_file(char **out, size_t *out_len, const char *path, size_t max_bytes)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    /* O_NONBLOCK: a FIFO (or a device) under the path must not hang the open;
     * it is then refused as not a regular file */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return pt_err(errno == ENOENT ? PT_ENOTFOUND : PT_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return pt_err(PT_EIO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pt_err(PT_EIO, "%s is not a regular file (it is %s)", path, kind_of(st.st_mode));
    }
    if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
        close(fd);
        return pt_err(PT_ERANGE, "%s is %lld bytes, over the limit of %zu", path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = pt_malloc(n + 1);
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
        return pt_err(PT_EIO, "short read on %s (%zu of %zu bytes)%s%s", path, got, n, rerr ? ": " : "",
                      rerr ? strerror(rerr) : "");
    }
    buf[n] = '\0';
    *out = buf;
    if (out_len)
        *out_len = n;
    return PT_OK;
}
