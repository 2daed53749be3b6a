#!/usr/bin/env python3
"""Copy a model directory with every 2-D F32 tensor of model.safetensors
rounded to BF16 values (kept as F32; round to nearest, ties to even, as
torch's .to(torch.bfloat16)): the base a BF16-stored model holds, in FP32.

round_bf16.py SRC_DIR DST_DIR
"""
import json
import os
import shutil
import struct
import sys


def round_bf16(u):
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF


def main(src, dst):
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    data = bytearray(open(path, "rb").read())
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + hlen])
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32" or len(t["shape"]) != 2:
            continue
        a, b = t["data_offsets"]
        n = (b - a) // 4
        base = 8 + hlen + a
        vals = struct.unpack_from("<%dI" % n, data, base)
        struct.pack_into("<%dI" % n, data, base, *(round_bf16(u) for u in vals))
    open(path, "wb").write(bytes(data))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
