"""safetensors.torch.load_file for the shim (see __init__.py)."""

from . import safe_open


def load_file(path, device="cpu"):
    with safe_open(path, framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}
