#!/usr/bin/env python3
"""Compare two safetensors files tensor by tensor (standard library only).

    st_compare.py A.safetensors B.safetensors [REL]

For every tensor the relative L2 difference ||a - b||_2 / ||b||_2 (0 when
both are all zero).  Exits 0 when both files hold the same tensor names,
dtypes and shapes and every tensor's is at most REL (default 1e-5: the bound
docs/distributed.md explains); otherwise 1, naming the worst tensor.  The
worst is printed either way, with the largest elementwise difference
max|a - b| / max|b| beside it.  F32, F16 and BF16 are read.
"""
import json
import math
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
    rel = float(sys.argv[3]) if len(sys.argv) == 4 else 1e-5
    if sorted(a) != sorted(b):
        print("tensor names differ: %s" % sorted(set(a) ^ set(b)))
        return 1
    worst, worst_name, worst_max = 0.0, None, 0.0
    for name in sorted(a):
        da, sa, va = a[name]
        db, sb, vb = b[name]
        if (da, sa) != (db, sb):
            print("%s: %s %s against %s %s" % (name, da, sa, db, sb))
            return 1
        norm = math.sqrt(math.fsum(y * y for y in vb))
        dist = math.sqrt(math.fsum((x - y) * (x - y) for x, y in zip(va, vb)))
        r = dist / norm if norm > 0 else (0.0 if dist == 0 else float("inf"))
        if r > worst or worst_name is None:
            worst, worst_name = r, name
        scale = max((abs(y) for y in vb), default=0.0)
        diff = max((abs(x - y) for x, y in zip(va, vb)), default=0.0)
        worst_max = max(worst_max, diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf")))
    print("relative L2 difference %.3g (%s; largest elementwise %.3g)" % (worst, worst_name, worst_max))
    return 0 if worst <= rel else 1

if __name__ == "__main__":
    sys.exit(main())
