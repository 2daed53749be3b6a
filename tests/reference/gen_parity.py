#!/usr/bin/python3
"""PyTorch parity goldens for libposttrain's transformer (tests/parity/test_parity.c).

Run with Debian's python3-torch (no `transformers` needed):

    /usr/bin/python3 tests/reference/gen_parity.py [--check-only]

For each tiny configuration below it writes a Hugging Face style directory
tests/reference/<name>/ with

  config.json         real Hugging Face field names (LlamaForCausalLM, Qwen2ForCausalLM,
                      Qwen3ForCausalLM)
  model.safetensors   seeded random F32 weights (non-trivial norm weights and biases),
                      Hugging Face tensor names, no lm_head.weight when tied
  golden.safetensors  input_ids I32 [B,T], targets I32 [B,T], weights F32 [B,T] (a loss
                      weight / mask with zeros), logits F32 [B,T,V], logprobs F32 [B,T]
                      (log p(target)), loss F32 [1] = -sum(w*lp)/sum(w), dlogprobs F32 [B,T]
                      (= -w/sum(w), the upstream gradient of that loss), and
                      grad.<hf name> F32 for every parameter (d loss / d parameter)
  golden_temperature.safetensors  (three cases) the same batch through
                      log_softmax(logits / T): temperature F32 [1], logprobs, entropy F32
                      [B,T], loss F32 [1] and grad.<hf name> (pt_batch.temperature)

The model is an independent re-implementation of Hugging Face's LlamaForCausalLM /
Qwen2ForCausalLM / Qwen3ForCausalLM forward (eager attention):
  RMSNorm  x * rsqrt(mean(x^2) + eps) * weight
  RoPE     rotate_half convention, inv_freq = 1/theta^(arange(0,hd,2)/hd), cos/sin of
           cat(freqs, freqs); "llama3" rope_scaling as transformers'
           _compute_llama3_parameters
  GQA      each KV head serves num_heads/num_kv_heads consecutive query heads
           (repeat_interleave along the head axis, as HF's repeat_kv)
  qwen2    bias on q, k, v projections (not on o)
  qwen3    per-head RMSNorm (weight [head_dim]) on q and k after the projection, before
           RoPE; head_dim from the config (heads*head_dim != hidden)
  MLP      down(silu(gate(x)) * up(x));  tied or untied LM head
Everything is computed in float64 from the float32-rounded weights, then stored as F32:
the goldens are the exact math, and any float32 implementation is compared against it.

Before writing, the script checks that the goldens would catch typical mistakes: it
recomputes the logits and gradients with interleaved-pair RoPE, a wrong GQA head
mapping, no llama3 scaling, etc., and requires each to differ from the golden by far
more than the C test's tolerance.  It prints those margins.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

HERE = os.path.dirname(os.path.abspath(__file__))

# The C test's tolerance (tests/parity/test_parity.c): |ours - golden| <= ABS + REL*|golden|.
ABS_TOL = 1e-4
REL_TOL = 1e-3

# ----------------------------------------------------------------------------- configs


def llama_config(**kw):
    c = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 48,
        "max_position_embeddings": 128,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.45.2",
        "use_cache": True,
        "vocab_size": 61,
    }
    c.update(kw)
    return c


def qwen2_config(**kw):
    c = {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 48,
        "initializer_range": 0.02,
        "intermediate_size": 40,
        "max_position_embeddings": 256,
        "max_window_layers": 2,
        "model_type": "qwen2",
        "num_attention_heads": 6,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 256,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.45.2",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 67,
    }
    c.update(kw)
    return c


def qwen3_config(**kw):
    c = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 48,
        "max_position_embeddings": 128,
        "max_window_layers": 2,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 59,
    }
    c.update(kw)
    return c


def mistral_config(**kw):
    # transformers' MistralConfig.to_dict() field set (4.45): no attention_bias /
    # mlp_bias / pretraining_tp; an explicit head_dim (Mistral-Nemo style, here
    # 12 with hidden 32 / 4 heads) and a window shorter than the sequence.
    c = {
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 12,
        "hidden_act": "silu",
        "hidden_size": 32,
        "initializer_range": 0.02,
        "intermediate_size": 48,
        "max_position_embeddings": 128,
        "model_type": "mistral",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "sliding_window": 5,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.45.2",
        "use_cache": True,
        "vocab_size": 57,
    }
    c.update(kw)
    return c


# name -> (config, seed, batch, seq)
CASES = {
    # (a) llama, tied embeddings, GQA 4 query heads / 2 KV heads
    "llama_tied_gqa": (llama_config(), 1001, 2, 9),
    # (b) qwen2: q/k/v biases, untied head, GQA ratio 3, theta 1e6
    "qwen2_bias_untied": (qwen2_config(), 1002, 2, 11),
    # (c) qwen3: q/k norms, head_dim 16 with hidden 32 / 4 heads (4*16 != 32), tied
    "qwen3_qknorm": (qwen3_config(), 1003, 2, 8),
    # (d) llama with "llama3" rope_scaling (all three frequency bands are exercised:
    #     theta 500 and head_dim 8 give wavelengths 6.3, 29.8, 140, 664 against
    #     high/low thresholds 32/4=8 and 32/1=32), MQA (1 KV head), untied head, and a
    #     large rms_norm_eps so a misread eps shows
    "llama3_rope_scaling": (
        llama_config(
            vocab_size=53,
            intermediate_size=40,
            num_key_value_heads=1,
            rope_theta=500.0,
            rms_norm_eps=0.01,
            tie_word_embeddings=False,
            rope_scaling={
                "factor": 4.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 32,
                "rope_type": "llama3",
            },
            max_position_embeddings=128,
        ),
        1004,
        2,
        12,
    ),
    # (e) sequence packing: qwen2 layout (biases), rows holding several sequences
    #     with segment ids, positions restarting per sequence, -1 targets
    "qwen2_packed": (qwen2_config(hidden_size=32, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=47), 1005, 2, 12),
    # (f) mistral: sliding window 5 over 12 tokens (keys j with i - 5 < j <= i),
    #     GQA 4/2, untied head, head_dim 12 != 32/4
    "mistral_sliding": (mistral_config(), 1006, 2, 12),
    # (g) mistral packed: segments longer than the window (7+5, 4+8), so the
    #     window and the segment mask both cut rows
    "mistral_packed": (mistral_config(vocab_size=43, head_dim=8, num_key_value_heads=1),
                       1007, 2, 12),
}

# name -> per-row sequence lengths (each row sums to T)
PACKED = {"qwen2_packed": [[5, 4, 3], [7, 5]], "mistral_packed": [[7, 5], [4, 8]]}

# A second golden, golden_temperature.safetensors, for these cases: the same
# batch through log_softmax(logits / T) (GRPO's training at the sampling
# temperature): temperature F32 [1], logprobs, entropy F32 [B,T], loss and
# grad.<name>; the raw logits are those of golden.safetensors.
TEMPERATURES = {"llama_tied_gqa": 0.7, "qwen2_bias_untied": 0.45, "qwen2_packed": 1.6}

# ----------------------------------------------------------------------------- model


def head_dim_of(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def param_shapes(c):
    """Hugging Face tensor names and shapes, in model order."""
    d, ff, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], head_dim_of(c)
    mt = c["model_type"]
    out = [("model.embed_tokens.weight", (V, d))]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out.append((p + "input_layernorm.weight", (d,)))
        out.append((p + "self_attn.q_proj.weight", (nh * hd, d)))
        if mt == "qwen2":
            out.append((p + "self_attn.q_proj.bias", (nh * hd,)))
        out.append((p + "self_attn.k_proj.weight", (nkv * hd, d)))
        if mt == "qwen2":
            out.append((p + "self_attn.k_proj.bias", (nkv * hd,)))
        out.append((p + "self_attn.v_proj.weight", (nkv * hd, d)))
        if mt == "qwen2":
            out.append((p + "self_attn.v_proj.bias", (nkv * hd,)))
        out.append((p + "self_attn.o_proj.weight", (d, nh * hd)))
        if mt == "qwen3":
            out.append((p + "self_attn.q_norm.weight", (hd,)))
            out.append((p + "self_attn.k_norm.weight", (hd,)))
        out.append((p + "post_attention_layernorm.weight", (d,)))
        out.append((p + "mlp.gate_proj.weight", (ff, d)))
        out.append((p + "mlp.up_proj.weight", (ff, d)))
        out.append((p + "mlp.down_proj.weight", (d, ff)))
    out.append(("model.norm.weight", (d,)))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, d)))
    return out


def init_params(c, rng):
    """Random weights, rounded to float32 (what the file holds)."""
    params = {}
    for name, shape in param_shapes(c):
        if name.endswith("norm.weight"):
            # non-trivial: a wrong norm weight (or none) must show
            v = 1.0 + 0.25 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            v = 0.3 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            v = 0.3 * rng.standard_normal(shape)
        elif name == "lm_head.weight":
            v = 0.25 * rng.standard_normal(shape)
        else:
            fan_in = shape[1]
            v = 1.0 / math.sqrt(fan_in) * rng.standard_normal(shape)
        params[name] = v.astype(np.float32)
    return params


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def rotate_interleaved(x):
    # the WRONG convention for HF checkpoints (llama2.c / Meta): pairs (2j, 2j+1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), -1).flatten(-2)


def inv_freq_of(c, mutant=None):
    hd = head_dim_of(c)
    theta = c["rope_theta"]
    if mutant == "theta_default":
        theta = 10000.0 if theta != 10000.0 else 500000.0
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    rs = c.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3" and mutant != "no_rope_scaling":
        factor = rs["factor"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wavelen = old / low
        high_wavelen = old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def window_mask(c, T, pos, mutant):
    """[B or 1, 1, T, T] True where Mistral's sliding window hides key j from
    query i, or None.  transformers' masking_utils.sliding_window_overlay keeps
    kv_idx > q_idx - sliding_window (W keys including the token itself), over
    token indices (cache positions), not position_ids; packed sequences are
    cut by their segment mask on top.  The mutants are the mistakes to catch:
    no window, W+1 keys (older Mistral code's j >= i - W), W-1 keys, and the
    window measured in position_ids."""
    W = c.get("sliding_window") if c["model_type"] == "mistral" else None
    if not W or mutant == "window_ignored":
        return None
    W += {"window_plus_one": 1, "window_minus_one": -1}.get(mutant, 0)
    if mutant == "window_by_position":
        d = pos.unsqueeze(-1) - pos.unsqueeze(-2)  # [B,T,T] position_ids i - j
        return (d >= W).unsqueeze(1)
    i = torch.arange(T)
    return ((i.unsqueeze(-1) - i.unsqueeze(0)) >= W).expand(1, 1, T, T)


def forward(c, P, ids, mutant=None, positions=None, segments=None):
    """Logits [B,T,V] (float64) of an HF-style causal forward over ids [B,T].
    positions [B,T] (default 0..T-1 per row) are the rotary positions; with
    segments [B,T], a token attends only to earlier tokens of its own segment
    (sequence packing, as HF's position_ids + flattened-batch attention)."""
    B, T = ids.shape
    d = c["hidden_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], head_dim_of(c)
    eps = c["rms_norm_eps"]
    mt = c["model_type"]
    inv = inv_freq_of(c, mutant)
    if positions is None or mutant == "positions_ignored":
        pos = torch.arange(T, dtype=torch.float64).expand(B, T)
    else:
        pos = torch.as_tensor(positions, dtype=torch.float64)
    f = (pos.unsqueeze(-1) * inv).unsqueeze(1)  # [B,1,T,hd/2]: broadcast over heads
    if mutant == "rope_interleaved":
        emb = torch.repeat_interleave(f, 2, dim=-1)
        rot = rotate_interleaved
    else:
        emb = torch.cat((f, f), -1)
        rot = rotate_half
    cos, sin = emb.cos(), emb.sin()

    x = P["model.embed_tokens.weight"][ids]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1).expand(B, 1, T, T)
    if segments is not None and mutant != "segments_ignored":
        sg = torch.as_tensor(segments, dtype=torch.long)
        mask = mask | (sg.unsqueeze(-1) != sg.unsqueeze(-2)).unsqueeze(1)
    wm = window_mask(c, T, pos, mutant)
    if wm is not None:
        mask = mask | wm
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)

        def proj(name):
            y = h @ P[p + "self_attn.%s.weight" % name].T
            if mt == "qwen2" and mutant != "no_bias":
                y = y + P[p + "self_attn.%s.bias" % name]
            return y

        q = proj("q_proj").view(B, T, nh, hd).transpose(1, 2)
        k = proj("k_proj").view(B, T, nkv, hd).transpose(1, 2)
        v = proj("v_proj").view(B, T, nkv, hd).transpose(1, 2)
        if mt == "qwen3" and mutant != "no_qk_norm":
            q = rms_norm(q, P[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, P[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
        rep = nh // nkv
        if mutant == "gqa_tiled":
            # WRONG mapping: query head h uses KV head h % nkv
            k = k.repeat(1, rep, 1, 1)
            v = v.repeat(1, rep, 1, 1)
        else:
            k = k.repeat_interleave(rep, 1)
            v = v.repeat_interleave(rep, 1)
        scale = 1.0 / math.sqrt(hd if mutant != "scale_hidden" else d // nh)
        att = (q @ k.transpose(-1, -2)) * scale
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        a = (att @ v).transpose(1, 2).reshape(B, T, nh * hd)
        x = x + a @ P[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        g = h @ P[p + "mlp.gate_proj.weight"].T
        u = h @ P[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if c["tie_word_embeddings"] else P["lm_head.weight"]
    return x @ head.T


def make_batch(c, rng, B, T):
    V = c["vocab_size"]
    ids = rng.integers(0, V, size=(B, T)).astype(np.int32)
    ids[:, 0] = c["bos_token_id"]
    targets = np.empty_like(ids)
    targets[:, :-1] = ids[:, 1:]
    targets[:, -1] = rng.integers(0, V, size=B)
    # Loss weights: row 0 is "prompt then completion" (prompt masked), row 1 is
    # "text then padding" (tail masked); a few non-unit weights in between.
    w = np.ones((B, T), dtype=np.float32)
    w[0, :3] = 0.0
    w[1, T - 2:] = 0.0
    w[0, T - 1] = 2.0
    w[1, 2] = 0.5
    return dict(input_ids=ids, targets=targets, weights=w)


def make_packed_batch(c, rng, B, T, lengths):
    """Rows packing several sequences: segment ids, positions restarting at 0 in
    each segment (except the very last segment: 3, 5, 7, ...), target -1 ("no
    target") on each segment's last token."""
    V = c["vocab_size"]
    ids = rng.integers(3, V, size=(B, T)).astype(np.int32)
    targets = np.full((B, T), -1, dtype=np.int32)
    positions = np.zeros((B, T), dtype=np.int32)
    segments = np.zeros((B, T), dtype=np.int32)
    for r in range(B):
        assert sum(lengths[r]) == T
        o = 0
        for sgi, n in enumerate(lengths[r]):
            ids[r, o] = c["bos_token_id"]
            positions[r, o:o + n] = np.arange(n)
            if r == B - 1 and sgi == len(lengths[r]) - 1:
                # Within a segment RoPE only sees position differences, so
                # restarting at 0 is indistinguishable from 0..T-1; this last
                # segment uses positions 3, 5, 7, ... so that ignoring
                # `positions` shows.
                positions[r, o:o + n] = 3 + 2 * np.arange(n)
            segments[r, o:o + n] = sgi + 10 * r  # any ids: only equality matters
            targets[r, o:o + n - 1] = ids[r, o + 1:o + n]
            o += n
    w = np.ones((B, T), dtype=np.float32)
    w[0, 1] = 0.0
    w[1, 3] = 0.5
    return dict(input_ids=ids, targets=targets, weights=w, positions=positions,
                segments=segments)


def compute(c, params, batch, mutant=None, temperature=1.0, entropy=None):
    """Logits, log p(target), the weighted loss and every parameter's gradient;
    with a temperature the log-softmax is of logits / temperature (TRL's
    logits.div_(temperature) before selective_log_softmax), and `entropy`, a
    list, receives the entropy of that softmax at every position."""
    ids, targets, w = batch["input_ids"], batch["targets"], batch["weights"]
    has = targets >= 0
    w = np.where(has, w, 0.0)
    P = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in params.items()}
    logits = forward(c, P, torch.tensor(ids, dtype=torch.long), mutant,
                     batch.get("positions"), batch.get("segments"))
    z = logits / temperature if temperature != 1.0 else logits
    if mutant == "temperature_times":
        z = logits * temperature
    lsm = torch.log_softmax(z, -1)
    if entropy is not None:
        entropy.append(-(lsm.exp() * lsm).sum(-1).detach().numpy())
    tg = torch.tensor(np.where(has, targets, 0), dtype=torch.long)
    lp = lsm.gather(-1, tg.unsqueeze(-1)).squeeze(-1) * torch.tensor(has.astype(np.float64))
    wt = torch.tensor(w.astype(np.float64))
    loss = -(wt * lp).sum() / wt.sum()
    loss.backward()
    grads = {k: (P[k].grad.detach().numpy() if P[k].grad is not None
                 else np.zeros(P[k].shape)) for k in P}
    return logits.detach().numpy(), lp.detach().numpy(), float(loss), grads


# ----------------------------------------------------------------------------- files

DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}


def write_safetensors(path, tensors, metadata=None):
    """A safetensors file: u64 LE header length, JSON header padded with spaces to
    a multiple of 8, then the tensors' little-endian bytes in header (sorted) order."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = DTYPES[a.dtype]
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header = dict([("__metadata__", metadata)] + list(header.items()))
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "I32": np.int32}[meta["dtype"]]
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(buf[8 + n + a:8 + n + b], dtype=np.dtype(dt).newbyteorder("<")).reshape(meta["shape"])
    return out


# ----------------------------------------------------------------------------- main


def worst_violation(ref, got):
    """Largest |got-ref| / (ABS + REL*|ref|): > 1 means the C test would fail."""
    return float(np.max(np.abs(got - ref) / (ABS_TOL + REL_TOL * np.abs(ref))))


MUTANTS = {
    "llama_tied_gqa": ["rope_interleaved", "gqa_tiled", "theta_default"],
    "qwen2_bias_untied": ["rope_interleaved", "gqa_tiled", "no_bias", "theta_default"],
    "qwen3_qknorm": ["rope_interleaved", "gqa_tiled", "no_qk_norm", "scale_hidden", "theta_default"],
    "llama3_rope_scaling": ["no_rope_scaling", "rope_interleaved", "theta_default"],
    "qwen2_packed": ["segments_ignored", "positions_ignored", "rope_interleaved", "gqa_tiled"],
    "mistral_sliding": ["window_ignored", "window_plus_one", "window_minus_one",
                        "rope_interleaved", "gqa_tiled", "scale_hidden", "theta_default"],
    "mistral_packed": ["window_ignored", "window_plus_one", "window_minus_one",
                       "window_by_position", "segments_ignored", "positions_ignored"],
}


def check_stories(d):
    """Validate this forward against stories260K's independent references."""
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    W = read_safetensors(os.path.join(d, "model.safetensors"))
    P = {k: torch.tensor(v.astype(np.float64)) for k, v in W.items()}
    with open(os.path.join(d, "reference", "logits.json")) as f:
        ref = json.load(f)
    with torch.no_grad():
        lg = forward(c, P, torch.tensor([ref["input_ids"]]))[0].numpy()
    diff = np.abs(lg - np.array(ref["logits"])).max()
    with open(os.path.join(d, "reference", "loss.json")) as f:
        lj = json.load(f)
    with open(os.path.join(d, "reference", "greedy_200_ids.json")) as f:
        greedy = json.load(f)
    ok = diff < 1e-4
    print("stories260K: logits.json max abs diff %.3g" % diff)
    for key, ids in (("greedy_200", greedy), ("story", lj["story"]["ids"])):
        with torch.no_grad():
            lsm = torch.log_softmax(forward(c, P, torch.tensor([ids[:-1]]))[0], -1)
        loss = -lsm.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).mean().item()
        print("stories260K: loss %s %.12f (reference %.12f)" % (key, loss, lj[key]["loss"]))
        ok = ok and abs(loss - lj[key]["loss"]) < 1e-9
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-only", action="store_true",
                    help="recompute and compare with the committed files instead of writing")
    ap.add_argument("--stories", default=os.path.join(HERE, "..", "..", "..", "shared", "data",
                                                      "models", "stories260K"),
                    help="stories260K directory used to validate the forward (skipped if absent)")
    a = ap.parse_args()
    ok = True
    if os.path.isdir(a.stories):
        if not check_stories(a.stories):
            print("ERROR: the forward does not reproduce stories260K's references")
            sys.exit(1)
    else:
        print("note: %s absent; forward not validated against stories260K" % a.stories)
    for name, (c, seed, B, T) in CASES.items():
        rng = np.random.default_rng(seed)
        params = init_params(c, rng)
        if name in PACKED:
            batch = make_packed_batch(c, rng, B, T, PACKED[name])
        else:
            batch = make_batch(c, rng, B, T)
        w = np.where(batch["targets"] >= 0, batch["weights"], 0.0).astype(np.float32)
        logits, lp, loss, grads = compute(c, params, batch)
        golden = dict(batch)
        golden.update({
            "logits": logits.astype(np.float32),
            "logprobs": lp.astype(np.float32),
            "loss": np.array([loss], dtype=np.float32),
            "dlogprobs": (-w / w.sum()).astype(np.float32),
        })
        for k, g in grads.items():
            golden["grad." + k] = g.astype(np.float32)

        # The goldens must catch the classic mistakes by a wide margin.
        for m in MUTANTS[name]:
            ml, _, _, mg = compute(c, params, batch, mutant=m)
            vl = worst_violation(logits, ml)
            vg = max(worst_violation(grads[k], mg[k]) for k in grads)
            print("  %-20s mutant %-17s worst logit diff %7.1fx tol, worst grad diff %7.1fx tol"
                  % (name, m, vl, vg))
            if vl < 10 or vg < 10:
                print("ERROR: %s: mutant %s is not caught by a wide margin" % (name, m))
                ok = False

        d = os.path.join(HERE, name)
        tgolden = None
        if name in TEMPERATURES:
            t = TEMPERATURES[name]
            ent = []
            _, tlp, tloss, tgrads = compute(c, params, batch, temperature=t, entropy=ent)
            tgolden = {"temperature": np.array([t], dtype=np.float32),
                       "logprobs": tlp.astype(np.float32), "entropy": ent[0].astype(np.float32),
                       "loss": np.array([tloss], dtype=np.float32)}
            for k, g in tgrads.items():
                tgolden["grad." + k] = g.astype(np.float32)
            # temperature 1, or a product instead of the division, must miss by far
            for label, (mlp, mg) in (("temperature_ignored", (lp, grads)),
                                     ("temperature_times", compute(c, params, batch, mutant="temperature_times",
                                                                   temperature=t)[1::2])):
                vl = worst_violation(tlp, mlp)
                vg = max(worst_violation(tgrads[k], mg[k]) for k in tgrads)
                print("  %-20s mutant %-17s worst logprob diff %7.1fx tol, worst grad diff %7.1fx tol"
                      % (name, label, vl, vg))
                if vl < 10 or vg < 10:
                    print("ERROR: %s: mutant %s is not caught by a wide margin" % (name, label))
                    ok = False
        nparam = sum(v.size for v in params.values())
        print("%s: %d params, B=%d T=%d, loss %.9f, |logits| max %.2f, |grad| max %.3g"
              % (name, nparam, B, T, loss, np.abs(logits).max(),
                 max(np.abs(g).max() for g in grads.values())))
        if a.check_only:
            old = read_safetensors(os.path.join(d, "golden.safetensors"))
            oldp = read_safetensors(os.path.join(d, "model.safetensors"))
            for k, v in golden.items():
                if not np.array_equal(old[k], v):
                    print("ERROR: %s: %s differs from the committed file" % (name, k))
                    ok = False
            for k, v in params.items():
                if not np.array_equal(oldp[k], v):
                    print("ERROR: %s: weight %s differs from the committed file" % (name, k))
                    ok = False
            if tgolden is not None:
                oldt = read_safetensors(os.path.join(d, "golden_temperature.safetensors"))
                for k, v in tgolden.items():
                    if not np.array_equal(oldt[k], v):
                        print("ERROR: %s: temperature golden %s differs from the committed file" % (name, k))
                        ok = False
            continue
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
            f.write("\n")
        write_safetensors(os.path.join(d, "model.safetensors"), params, {"format": "pt"})
        write_safetensors(os.path.join(d, "golden.safetensors"), golden,
                          {"generator": "tests/reference/gen_parity.py", "torch": torch.__version__,
                           "precision": "float64 math, stored as float32"})
        # Round trip through our own reader.
        back = read_safetensors(os.path.join(d, "golden.safetensors"))
        assert all(np.array_equal(back[k], golden[k]) for k in golden)
        if tgolden is not None:
            write_safetensors(os.path.join(d, "golden_temperature.safetensors"), tgolden,
                              {"generator": "tests/reference/gen_parity.py", "torch": torch.__version__,
                               "precision": "float64 math, stored as float32"})
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
