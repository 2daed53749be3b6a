/* Durable file writing and checksums.  Internal to libposttrain.
 *
 * The atomic writer creates "<dir>/.<name>.tmp.XXXXXX" next to the final path,
 * writes to it, fsyncs it, renames it over the final name and fsyncs the
 * directory.  Until the rename nothing under the final name changes; on any
 * failure (or pt_atomic_abort) the temporary file is removed.  ENOSPC and
 * EDQUOT map to PT_ENOSPC, every other I/O failure to PT_EIO, with the path
 * and strerror in the message. */
#ifndef PT_IO_FILEIO_H
#define PT_IO_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Map an errno value from operation `what` ("write", "fsync", ...) on `path`
 * to PT_ENOSPC (ENOSPC, EDQUOT) or PT_EIO (anything else), record the message
 * "<what> <path>: <strerror>" and return the status. */
int pt_io_errno(int err, const char *what, const char *path);

/* "<dir>/<name>" (no doubled slash), or NULL with PT_ENOMEM recorded. */
char *pt_path_join(const char *dir, const char *name);
/* Is `path` an existing directory / regular file (following links)? */
bool pt_is_dir(const char *path);
bool pt_is_file(const char *path);
/* Does directory `dir` hold a regular file `name`? */
bool pt_dir_has_file(const char *dir, const char *name);
/* mkdir -p: create `dir` and its missing parents (mode 0755).  PT_EIO (or
 * PT_ENOSPC) naming the component that failed, or `dir` when it exists but
 * is not a directory. */
int pt_mkdir_p(const char *dir);

/* fsync a directory (open O_RDONLY|O_DIRECTORY, fsync, close). */
int pt_fsync_dir(const char *dir);
/* fsync the directory holding `path` ("." if it has no slash). */
int pt_fsync_parent_dir(const char *path);

/* Streaming atomic writer.  Usage:
 *     pt_atomic_file af;
 *     if ((st = pt_atomic_open(&af, path)) != 0) return st;
 *     if ((st = pt_atomic_write(&af, buf, n)) != 0) { pt_atomic_abort(&af); return st; }
 *     return pt_atomic_commit(&af);   // also cleans up on failure
 * pt_atomic_abort is safe to call after a failed or successful commit. */
typedef struct pt_atomic_file {
    int fd;                 /* -1 when closed */
    char *path;             /* final path */
    char *tmp_path;         /* temporary path, NULL once renamed or removed */
    uint64_t written;
} pt_atomic_file;

int pt_atomic_open(pt_atomic_file *af, const char *path);
int pt_atomic_write(pt_atomic_file *af, const void *buf, size_t len);
/* fsync + close + chmod 0644 + rename + directory fsync.  On failure the
 * temporary file is removed and the final path is untouched. */
int pt_atomic_commit(pt_atomic_file *af);
/* Close and remove the temporary file (if any); free the paths. */
void pt_atomic_abort(pt_atomic_file *af);

/* Write a whole buffer to `path` atomically (the above in one call). */
int pt_write_file_atomic(const char *path, const void *buf, size_t len);

/* SHA-256 (FIPS 180-4). */
typedef struct pt_sha256_ctx {
    uint32_t h[8];
    uint64_t total;         /* bytes hashed so far */
    uint8_t buf[64];
    size_t buf_len;
} pt_sha256_ctx;

void pt_sha256_init(pt_sha256_ctx *c);
void pt_sha256_update(pt_sha256_ctx *c, const void *data, size_t len);
void pt_sha256_final(pt_sha256_ctx *c, uint8_t digest[32]);
void pt_sha256(const void *data, size_t len, uint8_t digest[32]);
/* Hash a file by streaming it: PT_ENOTFOUND if absent, PT_EIO on read errors. */
int pt_sha256_file(const char *path, uint8_t digest[32]);
/* Lower-case hex of a digest into hex[65] (NUL-terminated). */
void pt_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
