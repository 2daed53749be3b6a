#include "core.h"
#include "busy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define PT_ERRMSG_MAX 1024

static _Thread_local char tl_msg[PT_ERRMSG_MAX];
static _Thread_local int tl_status;

static const struct {
    int status;
    const char *name;
    const char *text;
} status_table[] = {
    { PT_OK, "PT_OK", "success" },
    { PT_EINVAL, "PT_EINVAL", "invalid argument" },
    { PT_ENOMEM, "PT_ENOMEM", "out of memory" },
    { PT_EIO, "PT_EIO", "input/output error" },
    { PT_EFORMAT, "PT_EFORMAT", "malformed file or document" },
    { PT_EUNSUPPORTED, "PT_EUNSUPPORTED", "not supported" },
    { PT_ENOTFOUND, "PT_ENOTFOUND", "not found" },
    { PT_ECANCELLED, "PT_ECANCELLED", "cancelled by the abort callback" },
    { PT_ERANGE, "PT_ERANGE", "value out of range" },
    { PT_ECALLBACK, "PT_ECALLBACK", "a callback reported failure" },
    { PT_ESTATE, "PT_ESTATE", "invalid call in the current state" },
    { PT_ENOSPC, "PT_ENOSPC", "no space left on device" },
    { PT_ECHECKSUM, "PT_ECHECKSUM", "checksum mismatch: data is damaged" },
    { PT_ENONFINITE, "PT_ENONFINITE", "non-finite loss, gradient or weight" },
    { PT_ESHAPE, "PT_ESHAPE", "wrong tensor shape or dtype" },
    { PT_ECONFIG, "PT_ECONFIG", "invalid model configuration" },
    { PT_EINTERNAL, "PT_EINTERNAL", "internal error" },
    { PT_EPEER, "PT_EPEER", "another rank of the distributed job failed" },
    { PT_EBUSY, "PT_EBUSY", "the handle is in use by another call" },
    { PT_EEXIST, "PT_EEXIST", "already exists" },
};

const char *pt_status_name(int status)
{
    for (size_t i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].status == status)
            return status_table[i].name;
    return "PT_E?";
}

const char *pt_status_str(int status)
{
    for (size_t i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].status == status)
            return status_table[i].text;
    return "unknown status";
}

const char *pt_last_error(void)
{
    return tl_msg;
}

int pt_last_status(void)
{
    return tl_status;
}

void pt_clear_error(void)
{
    tl_msg[0] = '\0';
    tl_status = PT_OK;
}

static int set_message(int status, const char *prefix_of, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static int set_message(int status, const char *prefix_of, const char *fmt, va_list ap)
{
    char buf[PT_ERRMSG_MAX];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (prefix_of && prefix_of[0]) {
        char old[PT_ERRMSG_MAX];
        memcpy(old, prefix_of, sizeof old);
        old[PT_ERRMSG_MAX - 1] = '\0';
        snprintf(tl_msg, sizeof tl_msg, "%s: %s", buf, old);
    } else {
        memcpy(tl_msg, buf, sizeof tl_msg);
    }
    tl_status = status;
    pt__log(PT_LOG_DEBUG, "%s: %s", pt_status_name(status), tl_msg);
    return status;
}

int pt__err(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_message(status, NULL, fmt, ap);
    va_end(ap);
    return status;
}

int pt__err_in(const char *func, int status)
{
    if (status == PT_OK)
        return status;
    const char *m = pt_last_error();
    size_t n = strlen(func);
    if (strncmp(m, func, n) == 0 && (m[n] == ':' || m[n] == ' '))
        return status;
    return pt__err_prefix(status, "%s", func);
}

int pt__err_prefix(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_message(status, tl_msg, fmt, ap);
    va_end(ap);
    return status;
}

int pt__busy_error(const char *fn, const char *kind, const void *h, const char *holder)
{
    return pt__err(PT_EBUSY, "%s: the %s %p is in use by another call (%s): a handle serves one call "
                  "at a time, so two threads need two handles, and a callback may not use the handle "
                  "of the call that runs it", fn, kind, h, holder ? holder : "?");
}
