"""The base of every handle class: deterministic release, use-after-close checks,
and dependent handles that close before the handle they need."""

import ctypes
import weakref

from ._lib import lib
from .errors import ClosedHandleError, Status


class Handle:
    """An owned C handle.

    close() (or leaving a `with` block) frees it at once; __del__ frees it too
    if the program forgets, but relying on the garbage collector is not
    deterministic.  Using a closed handle raises ClosedHandleError.  Handles
    that the C library requires to die first (a context or an optimizer on a
    model) are registered as dependents and closed before their parent."""

    _free_fn = None          # name of the C free function
    _kind = "handle"

    def __init__(self, ptr, owned=True):
        self._p = ptr if ptr else None
        self._owned = owned
        self._closed_reason = None
        self._dependents = weakref.WeakSet()

    # -- lifetime ---------------------------------------------------------------
    @property
    def _ptr(self):
        p = self._p
        if p is None:
            why = self._closed_reason or "it was closed"
            raise ClosedHandleError(Status.ESTATE, "%s is closed: %s" % (self._kind, why),
                                    type(self).__name__)
        return p

    @property
    def closed(self):
        """True once close() ran (or the parent handle closed it)."""
        return self._p is None

    def _add_dependent(self, h):
        self._dependents.add(h)

    def _close_dependents(self, reason):
        for d in list(self._dependents):
            d._close(reason)
        self._dependents = weakref.WeakSet()

    def _close(self, reason):
        if self._p is None:
            return
        self._close_dependents("its %s was closed" % self._kind)
        p, self._p = self._p, None
        self._closed_reason = reason
        if self._owned and self._free_fn is not None:
            getattr(lib, self._free_fn)(p)

    def close(self):
        """Free the C object now (idempotent).  Dependent handles close first."""
        self._close("close() was called")

    def __enter__(self):
        self._ptr  # raises if already closed
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self._close("garbage collected")
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __repr__(self):
        state = "closed" if self._p is None else "0x%x" % self._p
        return "<posttrain.%s %s>" % (type(self).__name__, state)


def out_handle():
    """A c_void_p to receive a handle from a pt_xxx_create(&out, ...) call."""
    return ctypes.c_void_p()
