"""The compact digest of a GGUF file that tests/modelio/test_gguf_golden.c
recomputes for libposttrain's exports (our own reader of the format; no
llama.cpp code).

    {"version": 3, "alignment": 32,
     "kv": [{"key": K, "type": T, ...}, ...],          # in file order
     "tensors": [{"name": N, "type": "F32", "ne": [..], "sha256": H}, ...]}

For a metadata pair: a scalar has "value" (numbers, bools; a string whose
UTF-8 is at most SHORT_STRING bytes), a longer string has "len" and
"sha256" of its bytes; an array has "elem_type", "n" and the sha256 of its
serialised elements exactly as in the file (little-endian numbers; strings
as a u64 length then the bytes).  A tensor's sha256 is over its data bytes.
general.alignment is reported as "alignment" (32 when absent).
"""

import hashlib
import json
import struct

SHORT_STRING = 80

TYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
         "string", "array", "uint64", "int64", "float64"]
_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
        10: "<Q", 11: "<q", 12: "<d"}
GGML = {0: "F32", 1: "F16", 30: "BF16", 8: "Q8_0"}
_GGML_SIZE = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34)}


class _Buf:
    def __init__(self, raw):
        self.raw = raw
        self.pos = 0

    def take(self, n):
        b = self.raw[self.pos:self.pos + n]
        if len(b) != n:
            raise ValueError("GGUF truncated at byte %d" % self.pos)
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.unpack("<Q")
        return self.take(n)


def _value(buf, t):
    """(python value, serialised bytes) of one value of type t."""
    start = buf.pos
    if t == 8:
        v = buf.string()
    elif t == 9:
        raise ValueError("nested array")
    else:
        v = buf.unpack(_FMT[t])
    return v, bytes(buf.raw[start:buf.pos])


def _kv(buf):
    key = buf.string().decode("utf-8")
    t = buf.unpack("<I")
    if t != 9:
        v, _ = _value(buf, t)
        e = {"key": key, "type": TYPES[t]}
        if t == 8:
            if len(v) <= SHORT_STRING:
                e["value"] = v.decode("utf-8")
            else:
                e["len"] = len(v)
                e["sha256"] = hashlib.sha256(v).hexdigest()
        else:
            e["value"] = v
        return e, v
    et = buf.unpack("<I")
    n = buf.unpack("<Q")
    h = hashlib.sha256()
    for _ in range(n):
        h.update(_value(buf, et)[1])
    return {"key": key, "type": "array", "elem_type": TYPES[et], "n": n,
            "sha256": h.hexdigest()}, None


def digest(path):
    with open(path, "rb") as f:
        raw = f.read()
    buf = _Buf(raw)
    if buf.take(4) != b"GGUF":
        raise ValueError("%s: not GGUF" % path)
    version = buf.unpack("<I")
    n_tensors = buf.unpack("<Q")
    n_kv = buf.unpack("<Q")
    kvs, align = [], 32
    for _ in range(n_kv):
        e, v = _kv(buf)
        if e["key"] == "general.alignment":
            align = v
        kvs.append(e)
    infos = []
    for _ in range(n_tensors):
        name = buf.string().decode("utf-8")
        nd = buf.unpack("<I")
        ne = [buf.unpack("<Q") for _ in range(nd)]
        t = buf.unpack("<I")
        off = buf.unpack("<Q")
        infos.append((name, ne, t, off))
    data0 = (buf.pos + align - 1) // align * align
    tensors = []
    for name, ne, t, off in infos:
        numel = 1
        for x in ne:
            numel *= x
        be, bb = _GGML_SIZE[t]
        nbytes = numel // be * bb
        data = raw[data0 + off:data0 + off + nbytes]
        if len(data) != nbytes:
            raise ValueError("%s: tensor %s out of the file" % (path, name))
        tensors.append({"name": name, "type": GGML[t], "ne": ne,
                        "sha256": hashlib.sha256(data).hexdigest()})
    return {"version": version, "alignment": align, "kv": kvs, "tensors": tensors}


def write(path, d, extra=None):
    out = dict(extra or {})
    out.update(d)
    lines = ["{"]
    items = list(out.items())
    for i, (k, v) in enumerate(items):
        end = "," if i + 1 < len(items) else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            rows = [" " + json.dumps(r, ensure_ascii=False) for r in v]
            lines.append(" %s: [" % json.dumps(k))
            lines.append(",\n".join(rows))
            lines.append(" ]" + end)
        else:
            lines.append(" %s: %s%s" % (json.dumps(k), json.dumps(v, ensure_ascii=False), end))
    lines.append("}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys
    for p in sys.argv[1:]:
        print(json.dumps(digest(p), indent=1, ensure_ascii=False))
