/* Paths and directories: joining, tests for a directory or a file, mkdir -p. */
#include "io/path.h"

#include "core/core.h"
#include "io/fileio.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

char *pt__path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name), n;
    if (!pt__add_size(a, b, &n) || !pt__add_size(n, 2, &n)) {
        pt__err(PT_ENOMEM, "path too long");
        return NULL;
    }
    char *p = pt__malloc(n);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

bool pt__is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool pt__is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool pt__dir_has_file(const char *dir, const char *name)
{
    char *p = pt__path_join(dir, name);
    bool r = p && pt__is_file(p);
    pt_free(p);
    return r;
}

int pt__mkdir_p(const char *dir)
{
    char *p = pt__strdup(dir);
    if (!p)
        return PT_ENOMEM;
    size_t n = strlen(p);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int st = pt__io_errno(errno, "mkdir", p);
            pt_free(p);
            return st;
        }
        p[i] = c;
    }
    pt_free(p);
    if (!pt__is_dir(dir))
        return pt__err(PT_EIO, "%s exists and is not a directory", dir);
    return PT_OK;
}
