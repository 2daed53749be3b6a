"""Exceptions: one class per libposttrain status, all subclasses of Error."""

from ._lib import lib
from .enums import Status

__all__ = [
    "Error", "InvalidArgument", "OutOfMemory", "IOFailure", "FormatError", "Unsupported",
    "NotFound", "Cancelled", "RangeError", "CallbackError", "StateError", "NoSpace",
    "ChecksumError", "NonFiniteError", "ShapeError", "ConfigError", "InternalError",
    "PeerError", "BusyError", "ExistsError", "ClosedHandleError", "STATUS_CLASSES", "Status", "check", "error_for", "invalid",
    "status_name", "status_str",
]

PT_OK = Status.OK


def _s(b):
    return b.decode("utf-8", "replace") if b is not None else None


def status_name(status):
    """Symbolic name of a status, e.g. "PT_EINVAL" (from pt_status_name)."""
    return _s(lib.pt_status_name(int(status)))


def status_str(status):
    """One-line description of a status (from pt_status_str)."""
    return _s(lib.pt_status_str(int(status)))


class Error(Exception):
    """A libposttrain call failed.

    .status       the C status, a posttrain.Status (an IntEnum: Status.EINVAL
                  == -1); a plain int for a code this library does not name
    .status_name  its symbol, e.g. "PT_EINVAL"
    .message      pt_last_error() right after the failing call (or the
                  binding's own message)
    .function     the C function that failed (or the Python function, for
                  errors the binding detects itself)
    """

    def __init__(self, status, message, function=None):
        self.status = Status.wrap(status)
        self.status_name = status_name(self.status)
        self.message = message
        self.function = function
        text = message if message else status_str(self.status)
        super().__init__("%s: %s" % (self.status_name, text))

    def __reduce__(self):
        return (self.__class__, (self.status, self.message, self.function))


class InvalidArgument(Error, ValueError):
    """PT_EINVAL: an argument is invalid (NULL, out of range, an unknown option)."""


class OutOfMemory(Error, MemoryError):
    """PT_ENOMEM: an allocation failed or a size computation overflowed."""


class IOFailure(Error, OSError):
    """PT_EIO: a read, write, fsync or rename failed (also an OSError)."""


class FormatError(Error, ValueError):
    """PT_EFORMAT: a file or JSON document is malformed."""


class Unsupported(Error):
    """PT_EUNSUPPORTED: valid input that this version does not support."""


class NotFound(Error, LookupError):
    """PT_ENOTFOUND: a file, tensor, token or key does not exist."""


class Cancelled(Error):
    """PT_ECANCELLED: the abort callback asked to stop."""


class RangeError(Error, ValueError):
    """PT_ERANGE: a value is outside what the format or model allows."""


class CallbackError(Error):
    """PT_ECALLBACK: a host callback reported failure."""


class StateError(Error):
    """PT_ESTATE: the call is not valid in the handle's current state."""


class NoSpace(IOFailure):
    """PT_ENOSPC: no space left on the device."""


class ChecksumError(Error):
    """PT_ECHECKSUM: a checksum did not match: the data is damaged."""


class NonFiniteError(Error, ArithmeticError):
    """PT_ENONFINITE: a loss, gradient or weight was NaN or infinite."""


class ShapeError(Error, ValueError):
    """PT_ESHAPE: a tensor has the wrong shape or dtype."""


class ConfigError(Error, ValueError):
    """PT_ECONFIG: a model configuration is missing a field or is inconsistent."""


class InternalError(Error):
    """PT_EINTERNAL: a bug in libposttrain."""


class PeerError(Error):
    """PT_EPEER: another rank of a distributed job failed or did not arrive in time."""


class BusyError(Error):
    """PT_EBUSY: the handle is in use by another call (another thread, or the
    call whose callback made this one)."""


class ExistsError(Error, FileExistsError):
    """PT_EEXIST: a file or directory is in the way (a run directory holding an
    earlier run, a checkpoint past the resumed step)."""


class ClosedHandleError(StateError):
    """A handle was used after close() (status PT_ESTATE, raised by the binding)."""


# The class of each status, by its name (the values come from the library).
_CLASS_OF = {
    "EINVAL": InvalidArgument, "ENOMEM": OutOfMemory, "EIO": IOFailure, "EFORMAT": FormatError,
    "EUNSUPPORTED": Unsupported, "ENOTFOUND": NotFound, "ECANCELLED": Cancelled,
    "ERANGE": RangeError, "ECALLBACK": CallbackError, "ESTATE": StateError, "ENOSPC": NoSpace,
    "ECHECKSUM": ChecksumError, "ENONFINITE": NonFiniteError, "ESHAPE": ShapeError,
    "ECONFIG": ConfigError, "EINTERNAL": InternalError, "EPEER": PeerError,
    "EBUSY": BusyError, "EEXIST": ExistsError,
}
# {Status: exception class} for every failure status the library names.
STATUS_CLASSES = {st: _CLASS_OF.get(st.name, Error) for st in Status if st != Status.OK}


def error_for(status, message, function=None):
    """The exception object for a status (Error itself for unknown codes):
    what the binding raises for the failures it detects itself, e.g.
    error_for(Status.ESTATE, "no forward to run a backward for", "Model.backward")."""
    return STATUS_CLASSES.get(int(status), Error)(status, message, function)


def check(status, function=None):
    """Raise the exception for a non-zero status, with pt_last_error()'s text.

    pt_last_error() is read first, before any other library call, since the
    message is only guaranteed until the next call on this thread."""
    if status == PT_OK:
        return
    message = _s(lib.pt_last_error())
    raise error_for(status, message, function)


def invalid(message, function=None):
    """An InvalidArgument raised by the binding's own argument checks."""
    return InvalidArgument(Status.EINVAL, message, function)
