/* The run layer's path checks (include/posttrain/run.h): a run's outputs
 * (its directory and metrics file) against its inputs, compared as
 * resolved paths and by device and inode, so that no output is, holds or
 * lies inside an input (a checkpoint to resume may lie inside the run
 * directory). */
#include "core/core.h"
#include "run_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ALLOW_IN_INSIDE_OUT 1u /* the input may lie inside the output directory */
#define ALLOW_OUT_INSIDE_IN 2u /* the output may lie inside the input directory */

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

/* PT_EINVAL naming both when the output `out` (option out_opt) is, holds or
 * lies inside the input `in` (in_opt), but for the allowances. */
static int disjoint(const char *out_opt, const char *out, const char *in_opt, const char *in, unsigned allow)
{
    if (!out || !in)
        return PT_OK;
    char ro[PATH_MAX], ri[PATH_MAX];
    if (resolve(out, ro) != 0 || resolve(in, ri) != 0)
        return pt__err(PT_EIO, "cannot resolve %s or %s: %s", out, in, strerror(errno));
    struct stat so, si;
    bool eo = stat(ro, &so) == 0, ei = stat(ri, &si) == 0;
    if (same(ro, &so, eo, ri, &si, ei))
        return pt__err(PT_EINVAL, "%s %s is the same file as %s %s; writing it would destroy that input", out_opt,
                      out, in_opt, in);
    if (!(allow & ALLOW_IN_INSIDE_OUT) && inside(ri, ro, &so, eo))
        return pt__err(PT_EINVAL, "%s %s is inside %s %s; writing there could destroy that input", in_opt, in,
                      out_opt, out);
    if (!(allow & ALLOW_OUT_INSIDE_IN) && inside(ro, ri, &si, ei))
        return pt__err(PT_EINVAL, "%s %s is inside %s %s; writing there could destroy that input", out_opt, out,
                      in_opt, in);
    return PT_OK;
}

/* disjoint without allowances, and when `in` is a directory, for each file
 * in it too (resolved through symlinks: a Hugging Face cache's blobs). */
static int disjoint_tree(const char *out_opt, const char *out, const char *in_opt, const char *in)
{
    int st = disjoint(out_opt, out, in_opt, in, 0);
    if (st || !out || !in)
        return st;
    DIR *d = opendir(in);
    if (!d)
        return PT_OK; /* a file, or missing: the check above was the whole of it */
    struct dirent *e;
    char p[PATH_MAX];
    while (!st && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            snprintf(p, sizeof p, "%s/%s", in, e->d_name) < (int)sizeof p) {
            struct stat sb;
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
                st = disjoint(out_opt, out, in_opt, p, 0);
        }
    closedir(d);
    return st;
}

int pt__run__check_outputs(const pt_run *r)
{
    int st = PT_OK;
    const char *outs[2] = { r->dir, r->metrics };
    const char *names[2] = { r->dir_name, r->metrics_name };
    for (size_t i = 0; i < r->o.n_inputs && !st; i++) {
        const pt_run_input *in = &r->o.inputs[i];
        const char *nm = in->name ? in->name : "an input";
        for (int k = 0; k < 2 && !st; k++)
            st = in->tree ? disjoint_tree(names[k], outs[k], nm, in->path)
                          : disjoint(names[k], outs[k], nm, in->path, 0);
    }
    if (!st && r->resume_from) {
        st = disjoint(r->dir_name, r->dir, r->resume_name, r->resume_from, ALLOW_IN_INSIDE_OUT);
        if (!st)
            st = disjoint(r->metrics_name, r->metrics, r->resume_name, r->resume_from, 0);
    }
    if (!st)
        st = disjoint(r->metrics_name, r->metrics, r->dir_name, r->dir, ALLOW_OUT_INSIDE_IN);
    return st;
}

int pt_run_check_output(const char *out_name, const char *out, const pt_run_input *input)
{
    PT_CHECK_NULL(input);
    const char *on = out_name ? out_name : "the output", *in = input->name ? input->name : "an input";
    int st = input->tree ? disjoint_tree(on, out, in, input->path) : disjoint(on, out, in, input->path, 0);
    return st ? pt__err_in(__func__, st) : PT_OK;
}
