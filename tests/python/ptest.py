"""Helpers shared by the Python binding tests (run by meson test with
POSTTRAIN_LIBRARY and PYTHONPATH set; see tests/python/meson.build)."""

import math
import os
import sys
import unittest

import posttrain as pt

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))

# Results as plain lists everywhere except the numpy-specific tests.
pt.use_numpy(False)

# A tiny Llama: GQA (2 heads, 1 KV head), untied embeddings, byte-tokenizer vocab.
TINY = dict(vocab_size=261, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
            rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=256, eos_token_id=257)


def shared_data(who):
    """../shared/data next to the project, or $PT_SHARED_DATA; None (and a
    SKIP line on stderr) when absent."""
    path = os.environ.get("PT_SHARED_DATA") or os.path.join(SOURCE_ROOT, "..", "shared", "data")
    path = os.path.normpath(path)
    if not os.path.isdir(path):
        print("SKIP %s: shared data not found at %s (set PT_SHARED_DATA)" % (who, path),
              file=sys.stderr)
        return None
    return path


def log_softmax_row(row):
    mx = max(row)
    lse = mx + math.log(sum(math.exp(x - mx) for x in row))
    return [x - lse for x in row]


def flat(t):
    """Flatten nested lists (or numpy arrays) to a list of floats."""
    if hasattr(t, "tolist"):
        t = t.tolist()
    out = []

    def rec(v):
        if isinstance(v, (list, tuple)):
            for u in v:
                rec(u)
        else:
            out.append(float(v))
    rec(t)
    return out


def tensors_flat(sd):
    """{name: list of floats} of a state dict."""
    return {k: list(v.data) for k, v in sd.items()}


def main():
    unittest.main(verbosity=2)
