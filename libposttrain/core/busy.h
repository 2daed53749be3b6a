/* One call at a time on a handle (issue 25).  A context, optimizer or
 * generator holds a pt_busy: the public function that uses the handle
 * mutably takes it at entry with one compare-and-swap (NULL -> its own name)
 * and gives it back at exit on every path.  A second call meanwhile, from
 * another thread or from a callback of the first call, gets PT_EBUSY naming
 * the handle, its function and the function holding it.  Not installed. */
#ifndef PT_BUSY_H
#define PT_BUSY_H

#include "core/core.h"

#include <stdatomic.h>

typedef _Atomic(const char *) pt_busy;

/* The PT_EBUSY message: "fn: the kind h is in use by holder ...". */
int pt__busy_error(const char *fn, const char *kind, const void *h, const char *holder);

/* Take b for fn (a static string, the public function): PT_OK, or PT_EBUSY. */
static inline int pt__busy_enter(pt_busy *b, const char *fn, const char *kind, const void *h)
{
    const char *holder = NULL;
    if (__builtin_expect(atomic_compare_exchange_strong_explicit(b, &holder, fn, memory_order_acquire,
                                                                 memory_order_relaxed), 1))
        return PT_OK;
    return pt__busy_error(fn, kind, h, holder);
}

static inline void pt__busy_leave(pt_busy *b)
{
    atomic_store_explicit(b, NULL, memory_order_release);
}

#endif
