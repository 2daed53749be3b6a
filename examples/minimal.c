/* The smallest libposttrain host, built against the installed copy as
 * README.md ("Installing") says, e.g. with PREFIX=$HOME/.local:
 *   export PKG_CONFIG_PATH=$HOME/.local/lib/x86_64-linux-gnu/pkgconfig
 *   cc -std=c11 examples/minimal.c -o minimal $(pkg-config --cflags --libs posttrain) \
 *      -Wl,-rpath,$(pkg-config --variable=libdir posttrain)
 * (scripts/install_test.sh runs exactly those commands).  It checks the
 * header/library versions, shows the error convention, and installs a log
 * callback. */
#include <posttrain/posttrain.h>

#include <stdio.h>

static void on_log(int level, const char *message, void *payload)
{
    (void)payload;
    fprintf(stderr, "[libposttrain %s] %s\n", pt_log_level_name(level), message);
}

int main(void)
{
    if (pt_version_number() != PT_VERSION_NUMBER) {
        fprintf(stderr, "header %s but library %s\n", PT_VERSION_STRING, pt_version_string());
        return 1;
    }
    printf("libposttrain %s\n", pt_version_string());
    pt_set_log_callback(on_log, PT_LOG_WARN, NULL);

    /* Every call returns a status; the detail is in pt_last_error(). */
    int st = pt_set_num_threads(0);
    if (st != PT_EINVAL) {
        fprintf(stderr, "expected PT_EINVAL, got %s\n", pt_status_name(st));
        return 1;
    }
    printf("pt_set_num_threads(0) -> %s: %s\n", pt_status_name(st), pt_last_error());

    st = pt_set_num_threads(2);
    if (st != PT_OK)
        return 1;
    printf("threads: %d\n", pt_get_num_threads());
    return 0;
}
