#!/usr/bin/env python3
"""Set one element of a tensor in a safetensors or GGUF file, for the tests.

poke_weight.py FILE TENSOR INDEX VALUE   VALUE is a float ("nan", "inf",
                                         "-inf", "1.5"); the tensor must be
                                         F32.  When FILE's directory holds a
                                         checkpoint's MANIFEST.json, FILE's
                                         entry is re-hashed so that only the
                                         value differs.
"""
import hashlib
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read  # noqa: E402


def safetensors_offset(data, name, index):
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + hlen])
    t = header[name]
    assert t["dtype"] == "F32", t["dtype"]
    return 8 + hlen + t["data_offsets"][0] + 4 * index


def gguf_offset(data, path, name, index):
    _, kvs, tensors = gguf_read.read(path)
    align = next((v for k, _, v in kvs if k == "general.alignment"), 32)
    # the data section starts at the aligned end of the tensor infos
    r = gguf_read.Reader(data)
    r.p = 4
    _, nt, nkv = r.take("<I"), r.take("<Q"), r.take("<Q")
    for _ in range(nkv):
        r.string()
        r.value(r.take("<I"))
    for _ in range(nt):
        r.string()
        nd = r.take("<I")
        r.p += 8 * nd + 4 + 8
    base = (r.p + align - 1) // align * align
    for tname, ty, _, off in tensors:
        if tname == name:
            assert ty == "F32", ty
            return base + off + 4 * index
    raise SystemExit(f"no tensor {name}")


def main():
    path, name, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    data = bytearray(open(path, "rb").read())
    if data[:4] == b"GGUF":
        at = gguf_offset(bytes(data), path, name, index)
    else:
        at = safetensors_offset(bytes(data), name, index)
    struct.pack_into("<f", data, at, value)
    open(path, "wb").write(data)
    manifest = os.path.join(os.path.dirname(path), "MANIFEST.json")
    if os.path.exists(manifest):
        m = json.load(open(manifest))
        m["files"][os.path.basename(path)] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": str(len(data))}
        open(manifest, "w").write(json.dumps(m, indent="\t"))


main()
