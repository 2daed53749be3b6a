"""A minimal stand-in for the `safetensors` package (not installable here),
for llama.cpp's converters: safe_open(path, framework="pt") with keys(),
metadata(), get_tensor(name) and get_slice(name) (get_dtype, get_shape,
[...]), and safetensors.torch.load_file.  Reads the format directly: an
8-byte little-endian header length, a JSON header, then the data.  Written
for libposttrain."""

import json
import struct

import numpy as np

__all__ = ["safe_open"]

_NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
       "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    return header, memoryview(raw)[8 + n:]


class _Slice:
    def __init__(self, info, data):
        self._info = info
        self._data = data

    def get_dtype(self):
        return self._info["dtype"]

    def get_shape(self):
        return list(self._info["shape"])

    def _tensor(self):
        import torch
        a, b = self._info["data_offsets"]
        dt = self._info["dtype"]
        if dt == "BF16":
            u = np.frombuffer(self._data[a:b], dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
            return torch.from_numpy(arr.reshape(self._info["shape"]).copy()).to(torch.bfloat16)
        arr = np.frombuffer(self._data[a:b], dtype=_NP[dt]).reshape(self._info["shape"])
        return torch.from_numpy(arr.copy())

    def __getitem__(self, idx):
        return self._tensor()[idx]


class safe_open:
    def __init__(self, path, framework="pt", device="cpu"):
        if framework not in ("pt", "torch"):
            raise ValueError("shim safetensors: only framework='pt'")
        self._header, self._data = _read(str(path))
        self._meta = self._header.pop("__metadata__", None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._header.keys())

    def metadata(self):
        return self._meta

    def get_slice(self, name):
        return _Slice(self._header[name], self._data)

    def get_tensor(self, name):
        return _Slice(self._header[name], self._data)._tensor()
