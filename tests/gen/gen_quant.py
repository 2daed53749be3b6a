#!/usr/bin/python3
"""Test data for quantized GGUF bases (issue 23): tests/kernels/data/quant/.

Run from the source root with /usr/bin/python3 (numpy) and llama.cpp built
(llama-quantize, gguf-py):

    /usr/bin/python3 tests/gen/gen_quant.py build/cli/posttrain /tmp/llama

1. A tiny random Llama (hidden 256, so every type's blocks fit its rows) as a
   Hugging Face directory, exported to an F32 GGUF with `posttrain export`,
   quantized with `llama-quantize --pure` to each supported type.  Of each,
   only blk.0.attn_k.weight (128 rows of 256) is kept, in a small GGUF
   `attn_k.<type>.gguf` (the block bytes exactly as llama-quantize wrote
   them), together with `attn_k.f32.gguf` (its FP32 source), and the
   reference: gguf-py's gguf.quants.dequantize of those bytes, as a SHA-256
   of the float32 little-endian bytes and its first 512 values
   (`attn_k.<type>.ref`: a text line "rows cols sha256", then the values
   as raw float32).
2. The whole tiny model in Q4_K (`tiny.q4_k.gguf`), and in llama.cpp's
   Q4_K_M mixture (`tiny.q4_k_m.gguf`: some tensors Q6_K), for loading.
3. stories260K (../shared/data) with its ffn zero-padded from 172 to 192
   (the same model: gate and up rows of zeros give silu(0) * 0 = 0, down's
   zero columns add nothing), exported to F32 and quantized to Q8_0 and
   Q4_0 (`stories192.q8_0.gguf`, `stories192.q4_0.gguf`).
"""
import json, os, shutil, struct, subprocess, sys, tempfile, hashlib
import numpy as np

posttrain, llama = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(llama, "gguf-py"))
try:
    import sentencepiece  # noqa: F401  (gguf-py's vocab imports it; unused here)
except ImportError:
    import types
    sys.modules["sentencepiece"] = types.SimpleNamespace(SentencePieceProcessor=None)
import gguf  # noqa: E402
from gguf import quants  # noqa: E402

OUT = "tests/kernels/data/quant"
QUANTIZE = os.path.join(llama, "build/bin/llama-quantize")
STORIES = "../shared/data/models/stories260K"
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32"
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(e["shape"]).copy()
    return out


def tiny_model(d):
    rng = np.random.default_rng(23)
    cfg = json.load(open(os.path.join(STORIES, "config.json")))
    cfg.update(hidden_size=256, intermediate_size=256, num_attention_heads=2,
               num_key_value_heads=1, head_dim=128, num_hidden_layers=1)
    H, F, V, KV = 256, 256, cfg["vocab_size"], 128
    t = {"model.embed_tokens.weight": rng.normal(0, 0.5, (V, H)),
         "model.norm.weight": 1 + 0.1 * rng.normal(size=H)}
    p = "model.layers.0."
    # rows of varied scale (and a few outliers) so the scales and mins vary
    def mat(r, c):
        m = rng.normal(0, 1, (r, c)) * np.exp(rng.normal(0, 1, (r, 1))) * 0.05
        m[rng.random((r, c)) < 0.002] *= 8
        m[:, :32] += 0.02 * rng.random((r, 1))  # some blocks off-centre (Q4_1/K mins)
        return m
    t[p + "self_attn.q_proj.weight"] = mat(H, H)
    t[p + "self_attn.k_proj.weight"] = mat(KV, H)
    t[p + "self_attn.v_proj.weight"] = mat(KV, H)
    t[p + "self_attn.o_proj.weight"] = mat(H, H)
    t[p + "mlp.gate_proj.weight"] = mat(F, H)
    t[p + "mlp.up_proj.weight"] = mat(F, H)
    t[p + "mlp.down_proj.weight"] = mat(H, F)
    t[p + "input_layernorm.weight"] = 1 + 0.1 * rng.normal(size=H)
    t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.normal(size=H)
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(STORIES, f), d)


def stories_padded(d):
    cfg = json.load(open(os.path.join(STORIES, "config.json")))
    t = read_safetensors(os.path.join(STORIES, "model.safetensors"))
    F = cfg["intermediate_size"]
    cfg["intermediate_size"] = 192
    for name in list(t):
        a = t[name]
        if name.endswith(("gate_proj.weight", "up_proj.weight")):
            t[name] = np.concatenate([a, np.zeros((192 - F, a.shape[1]), a.dtype)], 0)
        elif name.endswith("down_proj.weight"):
            t[name] = np.concatenate([a, np.zeros((a.shape[0], 192 - F), a.dtype)], 1)
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(STORIES, f), d)


def run(*args):
    subprocess.run(list(args), check=True, stdout=subprocess.DEVNULL)


def export(d, gguf_path):
    run(posttrain, "export", "--model", d, "--out", gguf_path, "--type", "f32", "--spm-scores", "merges")


def quantize(src, dst, t, pure=True):
    run(QUANTIZE, *(["--pure"] if pure else []), src, dst, t)


def one_tensor(src, name, dst):
    r = gguf.GGUFReader(src)
    t = next(x for x in r.tensors if x.name == name)
    w = gguf.GGUFWriter(dst, "llama")
    raw = np.asarray(t.data)
    w.add_tensor(name, raw, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return t


def main():
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp()
    tiny = os.path.join(tmp, "tiny")
    tiny_model(tiny)
    f32 = os.path.join(tmp, "tiny.f32.gguf")
    export(tiny, f32)
    name = "blk.0.attn_k.weight"
    one_tensor(f32, name, os.path.join(OUT, "attn_k.f32.gguf"))
    for ty in TYPES:
        q = os.path.join(tmp, "tiny.%s.gguf" % ty)
        quantize(f32, q, ty)
        dst = os.path.join(OUT, "attn_k.%s.gguf" % ty.lower())
        t = one_tensor(q, name, dst)
        assert t.tensor_type == gguf.GGMLQuantizationType[ty], (ty, t.tensor_type)
        deq = quants.dequantize(np.asarray(t.data), t.tensor_type).astype("<f4")
        rows, cols = deq.shape
        with open(os.path.join(OUT, "attn_k.%s.ref" % ty.lower()), "wb") as f:
            f.write(("%d %d %s\n" % (rows, cols, hashlib.sha256(deq.tobytes()).hexdigest())).encode())
            f.write(deq.reshape(-1)[:512].tobytes())
        if ty == "Q4_K":
            shutil.copy(q, os.path.join(OUT, "tiny.q4_k.gguf"))
    # llama.cpp's Q4_K_M mixture (attn_v, ffn_down and the embedding in Q6_K)
    quantize(f32, os.path.join(OUT, "tiny.q4_k_m.gguf"), "Q4_K_M", pure=False)
    st = os.path.join(tmp, "stories192")
    stories_padded(st)
    sf32 = os.path.join(tmp, "stories192.f32.gguf")
    export(st, sf32)
    for ty in ("Q8_0", "Q4_0"):
        quantize(sf32, os.path.join(OUT, "stories192.%s.gguf" % ty.lower()), ty)
    shutil.rmtree(tmp)


main()
