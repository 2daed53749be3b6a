#!/usr/bin/env python3
"""Write a Hugging Face model directory (F32 model.safetensors, config.json,
and a SentencePiece-style tokenizer.json if present) as a GGUF file laid out
as llama.cpp's convert_hf_to_gguf.py lays it out: <arch>.* metadata, tensor
names, Q/K rows permuted (llama), tokenizer.ggml.* with scores that order the
merges.  Standard library only; for the CLI tests.

usage: make_gguf.py HF_DIR OUT.gguf"""

import array
import json
import os
import struct
import sys

U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}
GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}


def gguf_name(hf):
    if hf in GLOBAL:
        return GLOBAL[hf]
    _, _, layer, rest = hf.split(".", 3)
    return "blk.%s.%s" % (layer, NAMES[rest])


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        a, b = t["data_offsets"]
        out[name] = (t["shape"], array.array("f", data[a:b]))
    return out


def permute(data, rows, cols, n_head):
    d = rows // n_head
    out = array.array("f", bytes(4 * rows * cols))
    for r in range(rows):
        h, k = divmod(r, d)
        src = h * d + (k % 2) * (d // 2) + k // 2
        out[r * cols:(r + 1) * cols] = data[src * cols:(src + 1) * cols]
    return out


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def value(ty, v):
    if ty == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return {U32: lambda: struct.pack("<I", v), I32: lambda: struct.pack("<i", v),
            F32: lambda: struct.pack("<f", v), BOOL: lambda: struct.pack("<B", v),
            STRING: lambda: gstr(v)}[ty]()


def tokenizer_kv(d):
    j = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    m = j["model"]
    assert m.get("byte_fallback"), "only SentencePiece-style tokenizers here"
    n = 1 + max(max(m["vocab"].values()), max(a["id"] for a in j["added_tokens"]))
    tokens = [None] * n
    for t, i in m["vocab"].items():
        tokens[i] = t
    types = [6 if t.startswith("<0x") and len(t) == 6 else 1 for t in tokens]
    for a in j["added_tokens"]:
        types[a["id"]] = 3 if a["special"] else 4
    types[m["vocab"][m["unk_token"]]] = 2
    ids = {t: i for i, t in enumerate(tokens)}
    scores = [-1e9] * n
    for k, mg in enumerate(m["merges"]):
        i = ids["".join(mg.split(" ") if isinstance(mg, str) else mg)]
        if scores[i] == -1e9:
            scores[i] = float(-k)
    return [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.pre", STRING, "default"),
            ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
            ("tokenizer.ggml.scores", ARRAY, (F32, scores)),
            ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
            ("tokenizer.ggml.add_bos_token", BOOL, 1), ("tokenizer.ggml.add_eos_token", BOOL, 0)]


def main(src, out_path):
    c = json.load(open(os.path.join(src, "config.json")))
    assert c["model_type"] == "llama"
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    tensors = []
    for name, (shape, data) in read_safetensors(os.path.join(src, "model.safetensors")).items():
        if name.endswith("q_proj.weight"):
            data = permute(data, shape[0], shape[1], nh)
        elif name.endswith("k_proj.weight"):
            data = permute(data, shape[0], shape[1], nkv)
        tensors.append((gguf_name(name), tuple(reversed(shape)), data))
    kv = [("general.architecture", STRING, "llama"), ("general.name", STRING, os.path.basename(src)),
          ("llama.vocab_size", U32, c["vocab_size"]),
          ("llama.context_length", U32, c["max_position_embeddings"]),
          ("llama.embedding_length", U32, c["hidden_size"]),
          ("llama.block_count", U32, c["num_hidden_layers"]),
          ("llama.feed_forward_length", U32, c["intermediate_size"]),
          ("llama.rope.dimension_count", U32, c["hidden_size"] // nh),
          ("llama.attention.head_count", U32, nh), ("llama.attention.head_count_kv", U32, nkv),
          ("llama.rope.freq_base", F32, c.get("rope_theta", 10000.0)),
          ("llama.attention.layer_norm_rms_epsilon", F32, c["rms_norm_eps"]),
          ("general.file_type", U32, 0),
          ("tokenizer.ggml.bos_token_id", U32, c["bos_token_id"]),
          ("tokenizer.ggml.eos_token_id", U32, c["eos_token_id"])]
    if os.path.exists(os.path.join(src, "tokenizer.json")):
        kv += tokenizer_kv(src)
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, ty, v in kv:
        out += gstr(key) + struct.pack("<I", ty) + value(ty, v)
    offset, blobs = 0, []
    for name, ne, data in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", 0, offset)
        blob = data.tobytes() + bytes(-len(data.tobytes()) % 32)
        blobs.append(blob)
        offset += len(blob)
    out += bytes(-len(out) % 32)
    with open(out_path, "wb") as f:
        f.write(out + b"".join(blobs))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
