/* Helpers shared by the run layer's tests (test_run.c, test_run_notes.c). */
#ifndef PT_RUN_TESTUTIL_H
#define PT_RUN_TESTUTIL_H

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An AdamW optimizer with the default options over m. */
static inline pt_optimizer *rt_adamw(pt_model *m)
{
    pt_optimizer_options o;
    pt_optimizer_options_init(&o);
    pt_optimizer *opt;
    ck_assert_ok(pt_optimizer_create(&opt, m, &o));
    return opt;
}

/* Move the "time" of every row of the metrics file `path` `secs` into the
 * past (the run that wrote them died that long before the relaunch). */
static inline void rt_age_rows(const char *path, double secs)
{
    FILE *f = fopen(path, "r");
    ck_assert(f != NULL);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    ck_assert((f = fopen(path, "w")) != NULL);
    const char *at = buf;
    for (char *q = strstr(buf, "\"time\": "); q; q = strstr(q + 1, "\"time\": ")) {
        char *end;
        double when = strtod(q + 8, &end);
        fprintf(f, "%.*s\"time\": %.6f", (int)(q - at), at, when - secs);
        at = end;
    }
    fputs(at, f);
    ck_assert_int_eq(fclose(f), 0);
}

#endif
