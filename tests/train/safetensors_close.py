#!/usr/bin/env python3
"""Relative L2 distance between the F32 tensors of two safetensors files
(the same names and shapes), all tensors together; exit 0 when it is at
most TOL and above 0 (the files differ), 1 otherwise.

safetensors_close.py A B TOL
"""
import json
import math
import struct
import sys


def tensors(path):
    data = open(path, "rb").read()
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + hlen])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit("%s: %s is %s, not F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        out[name] = struct.unpack_from("<%df" % ((b - a) // 4), data, 8 + hlen + a)
    return out


def main(a, b, tol):
    ta, tb = tensors(a), tensors(b)
    if sorted(ta) != sorted(tb):
        print("tensor names differ")
        return 1
    d = s = 0.0
    for name in ta:
        if len(ta[name]) != len(tb[name]):
            print("%s: sizes differ" % name)
            return 1
        for x, y in zip(ta[name], tb[name]):
            d += (x - y) * (x - y)
            s += y * y
    e = math.sqrt(d / s) if s > 0 else float("inf")
    print("relative L2 %.3e (tolerance %s)" % (e, tol))
    return 0 if 0 < e <= float(tol) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
