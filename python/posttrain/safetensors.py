"""A small pure-Python safetensors reader and writer (F32, F16, BF16 read;
F32 written), used for tensor access: the C API exposes no tensor table, so
Model.state_dict() saves the model and reads model.safetensors back.
Failures raise posttrain errors like the rest of the binding: FormatError
(a malformed file), Unsupported (a dtype not read here), InvalidArgument (a
tensor whose values do not fill its shape), IOFailure (the file system)."""

import array
import collections
import errno
import json
import struct
import sys

from .enums import Status
from .errors import error_for

__all__ = ["Tensor", "Contents", "read", "write"]

# What read() returns.
Contents = collections.namedtuple("Contents", ["tensors", "metadata"])

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the interpreter
    _np = None


class Tensor:
    """shape (tuple) and data: a flat array.array('f') in row-major order,
    or a numpy array of that shape when numpy was asked for."""

    __slots__ = ("shape", "data")

    def __init__(self, shape, data):
        self.shape = tuple(shape)
        self.data = data

    def __len__(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def numpy(self):
        """The values as a float32 numpy array of this shape (ImportError
        without numpy, as everywhere in the binding)."""
        if _np is None:
            raise ImportError("numpy is not installed")
        return _np.asarray(self.data, dtype=_np.float32).reshape(self.shape)

    def __repr__(self):
        return "Tensor(shape=%r)" % (self.shape,)


def _f16_to_f32(raw):
    out = array.array("f")
    for (h,) in struct.iter_unpack("<e", raw):
        out.append(h)
    return out


def _bf16_to_f32(raw):
    u16 = array.array("H")
    u16.frombytes(raw)
    if sys.byteorder != "little":
        u16.byteswap()
    u32 = array.array("I", (v << 16 for v in u16))
    out = array.array("f")
    out.frombytes(u32.tobytes())
    return out


def _io(e, path, function):
    st = Status.ENOSPC if e.errno == errno.ENOSPC else Status.EIO
    return error_for(st, "%s: %s" % (path, e.strerror or e), function)


def read(path):
    """Contents(tensors, metadata) of a .safetensors file: {name: Tensor}
    converted to float32, and the "__metadata__" dict ({} when absent)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        raise error_for(Status.ENOTFOUND, "%s: no such file" % path, "safetensors.read") from None
    except OSError as e:
        raise _io(e, path, "safetensors.read") from None
    if len(blob) < 8:
        raise error_for(Status.EFORMAT, "%s: too short for a safetensors file" % path,
                        "safetensors.read")
    (hlen,) = struct.unpack_from("<Q", blob, 0)
    try:
        header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    except ValueError as e:
        raise error_for(Status.EFORMAT, "%s: the header is not valid JSON (%s)" % (path, e),
                        "safetensors.read") from None
    base = 8 + hlen
    meta = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, d in header.items():
        a, b = d["data_offsets"]
        raw = blob[base + a:base + b]
        dt = d["dtype"]
        if dt == "F32":
            data = array.array("f")
            data.frombytes(raw)
            if sys.byteorder != "little":
                data.byteswap()
        elif dt == "F16":
            data = _f16_to_f32(raw)
        elif dt == "BF16":
            data = _bf16_to_f32(raw)
        else:
            raise error_for(Status.EUNSUPPORTED, "%s: tensor %r has dtype %s (only F32/F16/BF16 "
                            "read here)" % (path, name, dt), "safetensors.read")
        tensors[name] = Tensor(d["shape"], data)
    return Contents(tensors, meta)


def write(path, tensors, metadata=None):
    """Write {name: Tensor, numpy array or (shape, flat floats)} as F32,
    names sorted."""
    header = {}
    chunks = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, Tensor):
            shape, data = t.shape, t.data
        elif _np is not None and isinstance(t, _np.ndarray):
            shape, data = t.shape, t
        else:
            shape, data = t
        if _np is not None and isinstance(data, _np.ndarray):
            raw = _np.ascontiguousarray(data, dtype="<f4").tobytes()
        else:
            arr = data if isinstance(data, array.array) and data.typecode == "f" \
                else array.array("f", data)
            if sys.byteorder != "little":
                arr = array.array("f", arr)
                arr.byteswap()
            raw = arr.tobytes()
        n = 1
        for s in shape:
            n *= s
        if len(raw) != 4 * n:
            raise error_for(Status.EINVAL, "tensor %r: %d values for shape %r"
                            % (name, len(raw) // 4, shape), "safetensors.write")
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    try:
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for c in chunks:
                f.write(c)
    except OSError as e:
        raise _io(e, path, "safetensors.write") from None
