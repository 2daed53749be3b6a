"""Loaded by Python at start-up when this shim directory is on PYTHONPATH.
Debian's python3-torch is 1.13, which lacks the float8 dtypes that
llama.cpp's convert_hf_to_gguf.py names in a class-level table (it never
meets them in our F32 inputs): give the missing names a placeholder so the
converter imports.  Nothing else is changed."""

try:
    import torch as _torch
    for _n in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(_torch, _n):
            setattr(_torch, _n, _torch.uint8)
except ImportError:
    pass
