#!/usr/bin/env python3
"""A small GGUF v3 reader on the Python standard library, for the CLI tests.

gguf_read.py FILE            prints one line per metadata key
                             ("key<TAB>type<TAB>value"; arrays as
                             "array[elem_type]<TAB>count<TAB>first values")
                             then one per tensor ("tensor<TAB>name<TAB>type<TAB>ne<TAB>offset").
gguf_read.py FILE --json     the same as one JSON object (arrays in full).
"""
import json
import struct
import sys

TYPES = {0: ("uint8", "<B"), 1: ("int8", "<b"), 2: ("uint16", "<H"), 3: ("int16", "<h"),
         4: ("uint32", "<I"), 5: ("int32", "<i"), 6: ("float32", "<f"), 7: ("bool", "<?"),
         8: ("string", None), 9: ("array", None), 10: ("uint64", "<Q"), 11: ("int64", "<q"),
         12: ("float64", "<d")}
GGML = {0: "F32", 1: "F16", 30: "BF16"}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.d[self.p:self.p + n].decode("utf-8")
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return (TYPES[et][0], [self.value(et) for _ in range(n)])
        return self.take(TYPES[t][1])


def read(path):
    with open(path, "rb") as f:
        r = Reader(f.read())
    assert r.d[:4] == b"GGUF", "not a GGUF file"
    r.p = 4
    version, nt, nkv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(nkv):
        k = r.string()
        t = r.take("<I")
        kvs.append((k, TYPES[t][0], r.value(t)))
    tensors = []
    for _ in range(nt):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        tensors.append((name, GGML.get(r.take("<I"), "?"), ne, r.take("<Q")))
    return version, kvs, tensors


def main():
    version, kvs, tensors = read(sys.argv[1])
    if "--json" in sys.argv:
        out = {"version": version, "kv": [], "tensors": []}
        for k, t, v in kvs:
            out["kv"].append([k, t, list(v) if t == "array" else v])
        out["tensors"] = [list(x) for x in tensors]
        print(json.dumps(out, ensure_ascii=False))
        return
    for k, t, v in kvs:
        if t == "array":
            print(f"{k}\tarray[{v[0]}]\t{len(v[1])}\t{v[1][:4]!r}")
        else:
            print(f"{k}\t{t}\t{v!r}"[:300])
    for name, ty, ne, off in tensors:
        print(f"tensor\t{name}\t{ty}\t{ne}\t{off}")


if __name__ == "__main__":
    main()
