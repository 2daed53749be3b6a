#!/usr/bin/python3
"""GGUF LoRA adapter goldens for tests/lora/test_gguf_lora.c, written by
llama.cpp's own GGUF writer (gguf-py) the way convert_lora_to_gguf.py drives it.

    git -C LLAMA_CPP_GIT_DIR archive HEAD gguf-py | tar x -C /tmp
    GGUF_PY=/tmp/gguf-py /usr/bin/python3 tests/lora/gen_gguf_lora.py

(needs numpy and PyYAML; no torch, transformers or safetensors).  For each PEFT
adapter of tests/lora/data/<name>/ (written by gen_lora.py) over the base of
tests/reference/<name>/ it writes tests/lora/data/<name>/adapter_{f32,f16,bf16}.gguf
with the converter's steps, re-done here without torch:

  * metadata: GGUFWriter(arch=...) writes general.architecture; then the
    LoraModel's set_type (general.type "adapter", adapter.type "lora"),
    Metadata.set_gguf_meta_model (only general.name here: the adapter
    directory has no model card or config.json, and the name heuristics of
    its directory name give no basename/finetune/version/size label),
    set_gguf_parameters (adapter.lora.alpha as float32), and
    general.quantization_version 2;
  * tensors in the order safetensors hands them over (names sorted), paired
    per base weight, named through gguf-py's tensor name map, lora_a = A
    [r, in] and lora_b = B [out, r]; for llama the converter's
    LlamaModel.permute of q_proj / k_proj reaches B only
    (LoraTorchTensor.permute permutes the output side);
  * types: f32, or gguf.quants.quantize to F16 / BF16 for the 2-D tensors.
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "reference")
sys.path.insert(0, REF)
import gen_parity as gp  # noqa: E402

if not os.environ.get("GGUF_PY"):
    sys.exit("set GGUF_PY to a gguf-py directory of llama.cpp")
sys.path.insert(0, os.environ["GGUF_PY"])
import gguf  # noqa: E402

PREFIX = "base_model.model."
CASES = {"llama_tied_gqa": (gguf.MODEL_ARCH.LLAMA, "Llama_Tied_Gqa", True),
         "qwen2_bias_untied": (gguf.MODEL_ARCH.QWEN2, "Qwen2_Bias_Untied", False)}
TYPES = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
         "bf16": gguf.GGMLQuantizationType.BF16}


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf's LlamaModel.permute, applied to B's rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def pairs(adapter):
    """(base name, A, B) in the converter's order: sorted names, first appearance."""
    order, parts = [], {}
    for name in sorted(adapter):
        base = name.replace(PREFIX, "").replace(".lora_A.weight", ".weight") \
                   .replace(".lora_B.weight", ".weight")
        if base not in parts:
            parts[base] = {}
            order.append(base)
        parts[base]["A" if ".lora_A.weight" in name else "B"] = adapter[name]
    return [(b, parts[b]["A"], parts[b]["B"]) for b in order]


def write(path, arch, name, alpha, tensors, qtype):
    w = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[arch])
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_name(name)
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(alpha))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for tname, data in tensors:
        w.add_tensor(tname, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file(path=path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    for case, (arch, title, llama) in CASES.items():
        d = os.path.join(HERE, "data", case)
        with open(os.path.join(REF, case, "config.json")) as f:
            c = json.load(f)
        with open(os.path.join(d, "adapter_config.json")) as f:
            lp = json.load(f)
        tmap = gguf.get_tensor_name_map(arch, c["num_hidden_layers"])
        tensors = []
        for base, a, b in pairs(gp.read_safetensors(os.path.join(d, "adapter_model.safetensors"))):
            if llama and base.endswith("q_proj.weight"):
                b = permute(b, c["num_attention_heads"], c["num_attention_heads"])
            elif llama and base.endswith("k_proj.weight"):
                b = permute(b, c["num_attention_heads"], c["num_key_value_heads"])
            gname = tmap.get_name(base, try_suffixes=(".weight",))
            tensors.append((gname + ".lora_a", np.ascontiguousarray(a, dtype=np.float32)))
            tensors.append((gname + ".lora_b", np.ascontiguousarray(b, dtype=np.float32)))
        for t, q in TYPES.items():
            path = os.path.join(d, "adapter_%s.gguf" % t)
            write(path, arch, title, lp["lora_alpha"], tensors, q)
            print("%s: %d tensors, %d bytes" % (path, len(tensors), os.path.getsize(path)))


if __name__ == "__main__":
    main()
