#!/usr/bin/python3
"""Golden F32 -> F16 (numpy) and F32 -> BF16 (torch) conversions for
test_safetensors.c.  Run with Debian's python: /usr/bin/python3 tests/io/make_convert_golden.py
Output tests/io/golden/convert.bin: uint32 count, then count records of
(uint32 f32 bits, uint16 f16 bits, uint16 bf16 bits), little-endian."""
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261130)
special = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000,
           0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x38800000, 0x387FFFFF,
           0x33000000, 0x33000001, 0x33800000, 0x00000001, 0x7F7FFFFF, 0x3F808000,
           0x3F818000, 0x3F80FFFF, 0x3F7FFFFF, 0x3F801000, 0x3F803000, 0x3F802000]
bits = list(special)
bits += [int(x) for x in rng.integers(0, 2**32, size=2048, dtype=np.uint64)]
# values around the F16 range, where rounding and subnormals matter
e = rng.integers(-27, 17, size=2048)
m = rng.random(2048) + 1.0
s = np.where(rng.random(2048) < 0.5, -1.0, 1.0)
vals = (s * m * np.exp2(e)).astype(np.float32)
bits += [int(x) for x in vals.view(np.uint32)]
f32 = np.array(bits, dtype=np.uint32).view(np.float32)
keep = ~np.isnan(f32)          # NaN payload rules differ by library; the C test checks NaN-ness itself
f32 = f32[keep]
with np.errstate(all="ignore"):
    f16 = f32.astype(np.float16).view(np.uint16)
bf16 = torch.from_numpy(f32.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
os.makedirs(os.path.join(HERE, "golden"), exist_ok=True)
with open(os.path.join(HERE, "golden", "convert.bin"), "wb") as f:
    f.write(struct.pack("<I", len(f32)))
    for a, b, c in zip(f32.view(np.uint32), f16, bf16):
        f.write(struct.pack("<IHH", int(a), int(b), int(c)))
print(len(f32), "records")
