"""Conversions between Python sequences (or numpy arrays) and C arrays."""

import array
import ctypes
import os

from ._lib import lib
from .errors import invalid

try:  # numpy is optional: used for outputs when present, never required
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the interpreter
    _np = None

_settings = {"numpy": _np is not None}


def numpy_available():
    """True when numpy could be imported."""
    return _np is not None


def use_numpy(flag=True):
    """Return results as numpy arrays (flag true; needs numpy) or as nested
    lists (false).  The default is numpy when it is importable."""
    if flag and _np is None:
        raise ImportError("posttrain.use_numpy(True): numpy is not installed")
    _settings["numpy"] = bool(flag)


def want_numpy(numpy):
    if numpy is None:
        return _settings["numpy"]
    if numpy and _np is None:
        raise ImportError("numpy=True but numpy is not installed")
    return bool(numpy)


def fspath(p, what="path"):
    """A filesystem path as bytes for a const char * argument."""
    try:
        b = os.fsencode(p)
    except TypeError:
        raise invalid("%s must be a str or bytes path, not %s" % (what, type(p).__name__)) from None
    if b"\0" in b:
        raise invalid("%s contains a NUL byte" % what)
    return b


def cstr(s, what="string", allow_none=True):
    """A str as NUL-terminated UTF-8 bytes (None stays None when allowed)."""
    if s is None:
        if allow_none:
            return None
        raise invalid("%s must not be None" % what)
    if isinstance(s, str):
        b = s.encode("utf-8")
    elif isinstance(s, (bytes, bytearray)):
        b = bytes(s)
    else:
        raise invalid("%s must be a str, not %s" % (what, type(s).__name__))
    if b"\0" in b:
        raise invalid("%s contains a NUL character, which a C string cannot hold" % what)
    return b


def text(b):
    """A const char * result as str (None stays None)."""
    return b.decode("utf-8", "replace") if b is not None else None


def take_string(ptr, n):
    """Copy n bytes of a pt_free-able buffer (a c_void_p) into a str and free it."""
    try:
        return ctypes.string_at(ptr.value, n.value).decode("utf-8") if ptr.value else ""
    finally:
        lib.pt_free(ptr)


def is_numpy(x):
    return _np is not None and isinstance(x, _np.ndarray)


def as_rows(x, what):
    """A rectangular int matrix as (rows: list of sequences, squeezed: bool).
    A flat sequence is one row (squeezed=True)."""
    if is_numpy(x):
        if x.ndim == 1:
            return [x], True
        if x.ndim == 2:
            return list(x), False
        raise invalid("%s: expected 1 or 2 dimensions, got %d" % (what, x.ndim))
    try:
        seq = list(x)
    except TypeError:
        raise invalid("%s must be a sequence of token ids or of rows of them" % what) from None
    if not seq:
        raise invalid("%s is empty" % what)
    if all(not isinstance(v, (list, tuple, array.array)) and not is_numpy(v) for v in seq):
        return [seq], True
    return seq, False


def flat_int32(rows, B, T, what):
    """Row-major c_int32 array of B x T values from rows of ints."""
    if len(rows) != B:
        raise invalid("%s has %d rows, expected %d" % (what, len(rows), B))
    if _np is not None and any(is_numpy(r) for r in rows):
        a = _np.ascontiguousarray(_np.asarray(rows), dtype=_np.int64)
        if a.shape != (B, T):
            raise invalid("%s has shape %r, expected (%d, %d)" % (what, a.shape, B, T))
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise invalid("%s: a value does not fit in int32" % what)
        return (ctypes.c_int32 * (B * T)).from_buffer_copy(a.astype(_np.int32).tobytes())
    buf = array.array("i")
    for i, r in enumerate(rows):
        r = list(r)
        if len(r) != T:
            raise invalid("%s row %d has %d entries, expected %d (rows must have equal length)"
                          % (what, i, len(r), T))
        try:
            buf.extend(int(v) for v in r)
        except (OverflowError, TypeError, ValueError) as e:
            raise invalid("%s row %d: %s" % (what, i, e)) from None
    assert buf.itemsize == 4
    return (ctypes.c_int32 * (B * T)).from_buffer_copy(buf)


def int32_array(values, what):
    """A c_int32 array (and its length) from a flat sequence of ints."""
    if is_numpy(values):
        a = _np.ascontiguousarray(values, dtype=_np.int64).ravel()
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise invalid("%s: a value does not fit in int32" % what)
        n = int(a.size)
        return (ctypes.c_int32 * max(n, 1)).from_buffer_copy(
            a.astype(_np.int32).tobytes() or b"\0\0\0\0"), n
    buf = array.array("i")
    try:
        buf.extend(int(v) for v in values)
    except (OverflowError, TypeError, ValueError) as e:
        raise invalid("%s: %s" % (what, e)) from None
    n = len(buf)
    if n == 0:
        return (ctypes.c_int32 * 1)(), 0
    return (ctypes.c_int32 * n).from_buffer_copy(buf), n


def flat_float(values, n, what):
    """A c_float array of n values from a flat or nested sequence (or numpy)."""
    if is_numpy(values):
        a = _np.ascontiguousarray(values, dtype=_np.float32).ravel()
        if a.size != n:
            raise invalid("%s has %d values, expected %d" % (what, a.size, n))
        return (ctypes.c_float * n).from_buffer_copy(a.tobytes())
    buf = array.array("f")

    def add(v):
        if isinstance(v, (list, tuple, array.array)) or is_numpy(v):
            for u in v:
                add(u)
        else:
            buf.append(float(v))
    try:
        add(values)
    except (TypeError, ValueError) as e:
        raise invalid("%s: %s" % (what, e)) from None
    if len(buf) != n:
        raise invalid("%s has %d values, expected %d" % (what, len(buf), n))
    return (ctypes.c_float * n).from_buffer_copy(buf)


def shaped(carr, shape, numpy, kind="f"):
    """A C array as a numpy array of `shape` (sharing its memory) or nested lists."""
    if want_numpy(numpy):
        dt = {"f": _np.float32, "i": _np.int32, "d": _np.float64, "q": _np.int64,
              "B": _np.uint8}[kind]
        if not len(carr):
            return _np.zeros(shape, dtype=dt)
        return _np.frombuffer(carr, dtype=dt).reshape(shape)
    flat = list(carr)
    for dim in reversed(shape[1:]):
        flat = [flat[i:i + dim] for i in range(0, len(flat), dim)]
    return flat
