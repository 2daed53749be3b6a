/* Durable file writing, and the errno mapping of every io failure.
 * Internal to libposttrain.  (Paths are io/path.h, SHA-256 io/sha256.h;
 * both are included here for the callers that reach them through this
 * header.)
 *
 * The atomic writer creates "<dir>/.<name>.tmp.XXXXXX" next to the final path,
 * writes to it, fsyncs it, renames it over the final name and fsyncs the
 * directory.  Until the rename nothing under the final name changes; on any
 * failure (or pt__atomic_abort) the temporary file is removed.  ENOSPC and
 * EDQUOT map to PT_ENOSPC, every other I/O failure to PT_EIO, with the path
 * and strerror in the message. */
#ifndef PT_IO_FILEIO_H
#define PT_IO_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/path.h"
#include "io/sha256.h"

/* Map an errno value from operation `what` ("write", "fsync", ...) on `path`
 * to PT_ENOSPC (ENOSPC, EDQUOT) or PT_EIO (anything else), record the message
 * "<what> <path>: <strerror>" and return the status. */
int pt__io_errno(int err, const char *what, const char *path);

/* Open `path` read-only (O_CLOEXEC, O_NOCTTY, O_NONBLOCK so a FIFO or a
 * device cannot hang the open) and check that it is a regular file: *fd,
 * and its size into *size (may be NULL).  PT_ENOTFOUND "cannot open <path>:
 * No such file or directory", PT_EIO "<path> is not a regular file (it is a
 * FIFO)" (a directory, a socket, a device), or the errno mapping above
 * ("cannot open <path>: ...", "cannot stat <path>: ..."). */
int pt__open_regular(int *fd, uint64_t *size, const char *path);

/* Open `path` with pt__open_regular and map the whole file read-only and
 * private: *base (NULL for an empty file, which is not mapped) and *len;
 * the caller unmaps a non-NULL *base with munmap(*base, *len).  PT_ERANGE
 * "<kind><path>: file too large to map" (kind: "gguf " or ""), or mmap's
 * failure as pt__io_errno's "mmap <path>: ...". */
int pt__map_file(const uint8_t **base, size_t *len, const char *path, const char *kind);

/* Read a whole regular file into a NUL-terminated buffer (the NUL is not
 * counted), opened with pt__open_regular, so a FIFO under the path is refused
 * at once instead of waiting for a writer.  PT_ERANGE for a file over
 * max_bytes, PT_EIO for a short read. */
int pt__read_file(char **out, size_t *out_len, const char *path, size_t max_bytes);

/* fsync a directory (open O_RDONLY|O_DIRECTORY, fsync, close). */
int pt__fsync_dir(const char *dir);
/* fsync the directory holding `path` ("." if it has no slash). */
int pt__fsync_parent_dir(const char *path);

/* Streaming atomic writer.  Usage:
 *     pt_atomic_file af;
 *     if ((st = pt__atomic_open(&af, path)) != 0) return st;
 *     if ((st = pt__atomic_write(&af, buf, n)) != 0) { pt__atomic_abort(&af); return st; }
 *     return pt__atomic_commit(&af);   // also cleans up on failure
 * pt__atomic_abort is safe to call after a failed or successful commit. */
typedef struct pt_atomic_file {
    int fd;                 /* -1 when closed */
    char *path;             /* final path */
    char *tmp_path;         /* temporary path, NULL once renamed or removed */
    uint64_t written;
} pt_atomic_file;

int pt__atomic_open(pt_atomic_file *af, const char *path);
int pt__atomic_write(pt_atomic_file *af, const void *buf, size_t len);
/* fsync + close + chmod 0644 + rename + directory fsync.  On failure the
 * temporary file is removed and the final path is untouched. */
int pt__atomic_commit(pt_atomic_file *af);
/* Close and remove the temporary file (if any); free the paths. */
void pt__atomic_abort(pt_atomic_file *af);

/* Write a whole buffer to `path` atomically (the above in one call). */
int pt__write_file_atomic(const char *path, const void *buf, size_t len);

#endif
