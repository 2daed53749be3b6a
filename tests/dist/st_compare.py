#!/usr/bin/env python3
"""Compare two safetensors files tensor by tensor (standard library only).

    st_compare.py A.safetensors B.safetensors [REL]

For every tensor: max|a - b| / max|b| (0 when both are all zero).  Exits 0
when both files hold the same tensor names, dtypes and shapes and every
ratio is at most REL (default 1e-6); otherwise 1, naming the worst tensor.
F32, F16 and BF16 are read; the worst ratio is printed either way.
"""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        raw = data[base + lo:base + hi]
        dtype = info["dtype"]
        if dtype == "F32":
            vals = struct.unpack("<%df" % (len(raw) // 4), raw)
        elif dtype == "F16":
            vals = struct.unpack("<%de" % (len(raw) // 2), raw)
        elif dtype == "BF16":
            vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            raise SystemExit("%s: tensor %s: dtype %s is not read" % (path, name, dtype))
        out[name] = (dtype, tuple(info["shape"]), vals)
    return out


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    a, b = read(sys.argv[1]), read(sys.argv[2])
    rel = float(sys.argv[3]) if len(sys.argv) == 4 else 1e-6
    if sorted(a) != sorted(b):
        print("tensor names differ: %s" % sorted(set(a) ^ set(b)))
        return 1
    worst, worst_name = 0.0, None
    for name in sorted(a):
        da, sa, va = a[name]
        db, sb, vb = b[name]
        if (da, sa) != (db, sb):
            print("%s: %s %s against %s %s" % (name, da, sa, db, sb))
            return 1
        scale = max((abs(x) for x in vb), default=0.0)
        diff = max((abs(x - y) for x, y in zip(va, vb)), default=0.0)
        r = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        if r > worst or worst_name is None:
            worst, worst_name = r, name
    print("max relative difference %.3g (%s)" % (worst, worst_name))
    return 0 if worst <= rel else 1


if __name__ == "__main__":
    sys.exit(main())
