/*
 * The headertest's runtime half.  Compiling this executable is the real test
 * (every public header alone as C11, C++11 and C++17, see meson.build); this
 * program checks that meson.build's list names every header in
 * include/posttrain, says which languages were compiled, and reports the
 * configure-time check of PT_DEPRECATED.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include <posttrain/posttrain.h>

static int listed(const char *name)
{
    const char *list = PT_HT_HEADERS;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n) {
        int starts = p == list || p[-1] == ' ';
        int ends = p[n] == '\0' || p[n] == ' ';
        if (starts && ends)
            return 1;
    }
    return 0;
}

int main(void)
{
    DIR *d = opendir(PT_HT_INCLUDE_DIR);
    if (d == NULL) {
        fprintf(stderr, "headertest: cannot open %s\n", PT_HT_INCLUDE_DIR);
        return 1;
    }
    int bad = 0, seen = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 3 || strcmp(e->d_name + n - 2, ".h") != 0)
            continue;
        seen++;
        if (!listed(e->d_name)) {
            fprintf(stderr, "headertest: include/posttrain/%s is not in "
                            "tests/headertest/meson.build's list\n", e->d_name);
            bad = 1;
        }
    }
    closedir(d);
    if (seen == 0) {
        fprintf(stderr, "headertest: no headers found in %s\n", PT_HT_INCLUDE_DIR);
        return 1;
    }
    printf("headertest: %d headers in include/posttrain plus the generated version.h, "
           "compiled alone as C11%s\n", seen,
           PT_HT_CXX ? ", C++11 and C++17" : " (C++ SKIPPED: no C++ compiler found)");
    printf("headertest: library headers %s\n", PT_VERSION_STRING);
    if (!PT_HT_DEPRECATED_OK) {
        fprintf(stderr, "headertest: a deprecated name (pt_decode_stream_new) either does not "
                        "compile with PT_NO_DEPRECATION_WARNINGS or does not warn without it\n");
        bad = 1;
    } else {
        printf("headertest: deprecated names compile, and warn unless "
               "PT_NO_DEPRECATION_WARNINGS is defined\n");
    }
    return bad;
}
