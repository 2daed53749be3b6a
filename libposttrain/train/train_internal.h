/* Pieces shared by the whole train layer.  Not installed. */
#ifndef PT_TRAIN_TRAIN_INTERNAL_H
#define PT_TRAIN_TRAIN_INTERNAL_H

#include "core/core.h"

#include <string.h>

/* The start of every _init of a versioned struct in the train layer: the
 * pointer checked (PT_EINVAL naming the _init), the struct zeroed, its size
 * set.  The caller then sets the non-zero defaults and returns PT_OK. */
#define PT_STRUCT_INIT_ZERO(p)                                                \
    do {                                                                      \
        PT_CHECK_NULL(p);                                                     \
        memset((p), 0, sizeof *(p));                                          \
        (p)->size = sizeof *(p);                                              \
    } while (0)

/* Element i of a caller's array of versioned structs: the caller's stride is
 * its own sizeof, the size its _init wrote into element 0 (checked first). */
static inline const void *pt_struct_at(const void *array, size_t i)
{
    size_t size;
    memcpy(&size, array, sizeof size);
    return (const char *)array + i * size;
}

/* The public pair pt_<stem>_name / pt_<stem>_from_name over one table of
 * pt_enum_entry; `what` names the enum in the from_name message. */
#define PT_ENUM_NAME_FUNCS(stem, table, what)                                 \
    const char *stem##_name(int value)                                        \
    {                                                                         \
        return pt_enum_name(table, PT_ENUM_COUNT(table), value);              \
    }                                                                         \
    int stem##_from_name(int *out, const char *name)                          \
    {                                                                         \
        return pt_enum_from_name(out, table, PT_ENUM_COUNT(table), name,      \
                                 __func__, what);                             \
    }

#endif
