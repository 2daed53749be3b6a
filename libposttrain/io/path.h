/* Paths and directories.  Internal to libposttrain. */
#ifndef PT_IO_PATH_H
#define PT_IO_PATH_H

#include <stdbool.h>

/* "<dir>/<name>" (no doubled slash), or NULL with PT_ENOMEM recorded. */
char *pt__path_join(const char *dir, const char *name);
/* Is `path` an existing directory / regular file (following links)? */
bool pt__is_dir(const char *path);
bool pt__is_file(const char *path);
/* Does directory `dir` hold a regular file `name`? */
bool pt__dir_has_file(const char *dir, const char *name);
/* mkdir -p: create `dir` and its missing parents (mode 0755).  PT_EIO (or
 * PT_ENOSPC) naming the component that failed, or `dir` when it exists but
 * is not a directory. */
int pt__mkdir_p(const char *dir);

#endif
