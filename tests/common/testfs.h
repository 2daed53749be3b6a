/* Temporary directories for the Check suites that write files. */
#ifndef PT_TESTFS_H
#define PT_TESTFS_H

#include "testutil.h"

#include <ftw.h>

/* A fresh directory $TMPDIR/<prefix>XXXXXX (/tmp without TMPDIR); the caller
 * frees the returned path. */
static inline char *pt_test_tmpdir(const char *prefix)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/%sXXXXXX", base && *base ? base : "/tmp", prefix);
    char *d = mkdtemp(tmpl);
    ck_assert_msg(d != NULL, "mkdtemp failed");
    return strdup(d);
}

static inline int pt_test_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Remove dir and everything below it; 0 when all of it is gone. */
static inline int pt_test_rm_rf(const char *dir)
{
    return nftw(dir, pt_test_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
