/* Argument checks, versioned structs and named enums (core.h). */
#include "core.h"
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pt__err_arg(const char *func, const char *arg, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return pt__err(PT_EINVAL, "%s: %s %s", func, arg, detail);
}

int pt__err_count(const char *func, const char *arg, size_t n, size_t max, const char *what)
{
    return pt__err(PT_ERANGE, "%s: %s = %zu is beyond any possible %s (at most %zu): a negative or uninitialised "
                  "count? nothing was read", func, arg, n, what, max);
}

static int struct_size_ok(size_t size, size_t full_size, const char *func,
                          const char *init_name)
{
    if (size < sizeof(size_t) || size > full_size)
        return pt__err(PT_EINVAL,
                      "%s: struct size %zu is not between %zu and %zu (fill it with %s first)",
                      func, size, sizeof(size_t), full_size, init_name);
    return PT_OK;
}

int pt__struct_read(void *dst, size_t full_size, const void *src, const char *func,
                   const char *init_name)
{
    if (!src)
        return PT_OK;
    size_t size;
    memcpy(&size, src, sizeof size);
    int st = struct_size_ok(size, full_size, func, init_name);
    if (st)
        return st;
    memcpy(dst, src, size);
    memcpy(dst, &full_size, sizeof full_size);
    return PT_OK;
}

int pt__struct_check_out(const void *user, size_t full_size, const char *func,
                        const char *init_name)
{
    if (!user)
        return PT_OK;
    size_t size;
    memcpy(&size, user, sizeof size);
    return struct_size_ok(size, full_size, func, init_name);
}

void pt__struct_write(void *user, const void *full)
{
    if (!user)
        return;
    size_t size;
    memcpy(&size, user, sizeof size);
    memcpy(user, full, size);
    memcpy(user, &size, sizeof size);
}

int pt__struct_get(void *user, const void *full, size_t full_size, const char *func,
                   const char *init_name)
{
    int st = pt__struct_check_out(user, full_size, func, init_name);
    if (st == PT_OK)
        pt__struct_write(user, full);
    return st;
}

const void *pt__struct_at(const void *array, size_t i)
{
    size_t size;
    memcpy(&size, array, sizeof size);
    return (const char *)array + i * size;
}

const char *pt__enum_name(const pt_enum_entry *table, size_t n, int value)
{
    for (size_t i = 0; i < n; i++)
        if (table[i].value == value)
            return table[i].name;
    return NULL;
}

int pt__enum_from_name(int *out, const pt_enum_entry *table, size_t n, const char *name,
                      const char *func, const char *what)
{
    if (!out || !name)
        return pt__err(PT_EINVAL, "%s: %s is NULL", func, out ? "name" : "out");
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(table[i].name, name)) {
            *out = table[i].value;
            return PT_OK;
        }
    }
    pt_strbuf b = PT_STRBUF_INIT;
    for (size_t i = 0; i < n; i++)
        pt__strbuf_printf(&b, "%s%s", i ? ", " : "", table[i].name);
    int st = pt__err(PT_EINVAL, "%s: unknown %s '%s' (one of: %s)", func, what, name,
                    b.p ? b.p : "");
    pt__strbuf_free(&b);
    return st;
}
