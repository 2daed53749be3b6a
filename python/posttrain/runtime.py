"""Process-wide settings: version, features, BLIS, threads, logging, cancellation."""

import atexit
import contextlib
import logging
import threading

from ._lib import ABORT_FN, FEATURES, LOG_FN, lib
from ._lib import has_feature as _has_feature
from .enums import LogLevel
from .errors import check

__all__ = [
    "version", "version_number", "features", "has_feature", "blas_info", "cpu_path",
    "set_cpu_path", "cpu_info", "bf16_info", "set_num_threads",
    "get_num_threads", "set_log_callback", "log_to_python", "set_abort_callback", "check_abort",
    "abort_on", "LOG_ERROR", "LOG_WARN", "LOG_INFO", "LOG_DEBUG",
]

LOG_ERROR, LOG_WARN = LogLevel.ERROR, LogLevel.WARN
LOG_INFO, LOG_DEBUG = LogLevel.INFO, LogLevel.DEBUG
_PY_LEVELS = {LOG_ERROR: logging.ERROR, LOG_WARN: logging.WARNING, LOG_INFO: logging.INFO,
              LOG_DEBUG: logging.DEBUG}


def version():
    """Version string of the loaded library, "MAJOR.MINOR.PATCH"."""
    return lib.pt_version_string().decode()


def version_number():
    """major*10000 + minor*100 + patch of the loaded library."""
    return lib.pt_version_number()


def features():
    """The loaded library's capabilities (pt_features()) as a frozenset of
    words, e.g. {"sft", "lora", "generate", "grpo", ...}."""
    return FEATURES


def has_feature(name):
    """True when the loaded library has a capability (a word of pt_features())."""
    return _has_feature(name)


def blas_info():
    """Which BLIS and which kernel set do the matrix products, and why."""
    return lib.pt_blas_info().decode("utf-8", "replace")


def cpu_path():
    """The kernel path in use: "avx2", "avx512" or "avx512bf16" (chosen at
    run time from the CPU; PT_CPU or set_cpu_path() force a lower one)."""
    return lib.pt_cpu_path().decode()


def set_cpu_path(name=None):
    """Force the kernel path ("avx2", "avx512", "avx512bf16"); None or "auto":
    the highest this CPU runs.  Unsupported (a path above the CPU's) or
    InvalidArgument (an unknown name)."""
    check(lib.pt_set_cpu_path(None if name is None else str(name).encode()), "pt_set_cpu_path")


def cpu_info():
    """The CPU model and the kernel paths, e.g. "AMD EPYC ...; kernels avx2
    (CPU runs up to avx2)"."""
    return lib.pt_cpu_info().decode("utf-8", "replace")


def bf16_info():
    """What does the BF16 products on the path in use, e.g. "onednn
    brg:avx512_core_amx_bf16", "own fma" or "fp32 blis (...)"."""
    return lib.pt_bf16_info().decode("utf-8", "replace")


def set_num_threads(n):
    """Threads every kernel uses (BLIS included, per call)."""
    check(lib.pt_set_num_threads(int(n)), "pt_set_num_threads")


def get_num_threads():
    return lib.pt_get_num_threads()


# ---- logging -----------------------------------------------------------------

_log_lock = threading.Lock()
_log_state = {"cfunc": None, "fn": None}   # keeps the CFUNCTYPE alive


def _level_value(level):
    # Names are case-insensitive here, and "warning" (Python logging's) means "warn".
    if isinstance(level, str):
        level = level.lower()
        if level == "warning":
            level = "warn"
    return LogLevel.coerce(level, "max_level", "set_log_callback")


def set_log_callback(fn, max_level=LOG_INFO):
    """Install fn(level, message) as the library's log callback, or remove it
    with fn=None; level is a LogLevel, message a str.  Messages above
    max_level (a LogLevel, 0 error .. 3 debug, or "error"/"warn"/"info"/
    "debug") are not even formatted.

    The callback runs on whatever thread logs (under the library's lock) and
    must not call libposttrain.  An exception it raises is printed by ctypes
    and otherwise ignored."""
    max_level = _level_value(max_level)
    with _log_lock:
        if fn is None:
            check(lib.pt_set_log_callback(LOG_FN(), max_level, None), "pt_set_log_callback")
            _log_state["cfunc"] = None
            _log_state["fn"] = None
            return

        def bridge(level, message, payload):
            fn(LogLevel.wrap(level), message.decode("utf-8", "replace") if message else "")

        cfunc = LOG_FN(bridge)
        check(lib.pt_set_log_callback(cfunc, max_level, None), "pt_set_log_callback")
        # The old CFUNCTYPE may only be dropped once the library holds the new one.
        _log_state["cfunc"] = cfunc
        _log_state["fn"] = fn


def _remove_log_callback_at_exit():
    # Handles freed while the interpreter shuts down must not call back into
    # Python: drop the callback before module teardown.
    try:
        if _log_state["cfunc"] is not None:
            lib.pt_set_log_callback(LOG_FN(), LOG_ERROR, None)
            _log_state["cfunc"] = None
    except Exception:
        pass


atexit.register(_remove_log_callback_at_exit)


def log_to_python(logger="posttrain", max_level=LOG_INFO):
    """Forward the library's messages to a Python logging.Logger (a name or a
    Logger): error -> ERROR, warn -> WARNING, info -> INFO, debug -> DEBUG.
    Returns the logger."""
    if not isinstance(logger, logging.Logger):
        logger = logging.getLogger(logger)

    def fn(level, message):
        logger.log(_PY_LEVELS.get(level, logging.DEBUG), "%s", message)

    set_log_callback(fn, max_level)
    return logger


# ---- cancellation --------------------------------------------------------------

_abort_lock = threading.Lock()
_abort_cfuncs = {}   # thread ident -> CFUNCTYPE kept alive while installed


def set_abort_callback(fn):
    """Install fn() -> bool as the CALLING THREAD's abort callback (None
    removes it).  Long calls on this thread (forward, backward, SFT steps,
    long encodes) poll it between steps and raise posttrain.Cancelled when it
    returns true.  If fn raises, the call is cancelled too."""
    ident = threading.get_ident()
    with _abort_lock:
        if fn is None:
            check(lib.pt_set_abort_callback(ABORT_FN(), None), "pt_set_abort_callback")
            _abort_cfuncs.pop(ident, None)
            return

        def bridge(payload):
            try:
                return 1 if fn() else 0
            except BaseException:  # noqa: B902 - never let it unwind through C
                return 1

        cfunc = ABORT_FN(bridge)
        check(lib.pt_set_abort_callback(cfunc, None), "pt_set_abort_callback")
        _abort_cfuncs[ident] = cfunc


def check_abort():
    """Poll this thread's abort callback: raises Cancelled if it asks to stop."""
    check(lib.pt_check_abort(), "pt_check_abort")


@contextlib.contextmanager
def abort_on(fn_or_event):
    """with abort_on(event): ...  cancels this thread's library calls once
    event.is_set() (a threading.Event) or fn() is true; the callback is
    removed on exit."""
    fn = fn_or_event.is_set if hasattr(fn_or_event, "is_set") else fn_or_event
    set_abort_callback(fn)
    try:
        yield
    finally:
        set_abort_callback(None)
