#!/usr/bin/python3
"""Make the GGUF goldens: run llama.cpp's own converters on small Hugging
Face models and write a digest of each file they produce
(CASE.digest.json, see gguf_digest.py).  tests/modelio/test_gguf_golden.c
builds the same models with libposttrain, exports them with
pt_model_export_gguf / pt_lora_export_gguf and compares the digests.

    /usr/bin/python3 tests/modelio/gguf_golden/make_goldens.py \
        --llama-cpp /work/llamacpp-src --commit c392e5094deaf2d1a7c18683214f007fad3fe42b \
        [--out /work/gguf-out] [CASE ...]

writes gguf_golden/<first 7 digits of the commit>/CASE.digest.json; a case
whose architecture the converter does not know (Qwen3 before April 2025) is
skipped.

Needs numpy and torch (Debian python3-numpy, python3-torch), tqdm, and the
libposttrain library (POSTTRAIN_LIBRARY or --lib).  `transformers` and
`safetensors` are replaced by our shims in shim/ (see README.md).  The
converted .gguf files and the Hugging Face inputs stay under --out.

The synthetic models are made by libposttrain itself so that the C test can
make them again: pt_model_create(config, SEED) with the config of a
tests/reference model whose vocab_size is the tokenizer's, then every 1-D
tensor (norms, biases) set to perturb_1d() so that they are not all ones or
zeros.  The LoRA adapter is pt_model_add_lora on stories260K with B set to
perturb_lora_b().  test_gguf_golden.c implements the same two formulas.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared", "data"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import gguf_digest  # noqa: E402

SEED = 20250222
LORA = {"rank": 4, "alpha": 8.0, "targets": ("q", "k", "v", "o", "down"), "seed": 5}

# case -> how to make the Hugging Face input
SYNTHETIC = {
    # name: (tests/reference config, tokenizer dir, vocab_size, bos, eos)
    "tiny_llama3": ("llama_tied_gqa", "llama3", 128256, 128000, 128001),
    "tiny_qwen2": ("qwen2_bias_untied", "qwen3", 151936, 151643, 151645),
    "tiny_qwen3": ("qwen3_qknorm", "qwen3", 151936, 151643, 151645),
    # MistralForCausalLM with sliding_window 5 < max_position_embeddings 128
    "tiny_mistral": ("mistral_sliding", "llama-spm", 32045, 1, 2),
}
CASES = {
    # case: (input, converter, outtype)
    "stories260K_f32": ("stories260K", "hf", "f32"),
    "stories260K_f16": ("stories260K", "hf", "f16"),
    "tiny_llama3_f32": ("tiny_llama3", "hf", "f32"),
    "tiny_qwen2_f32": ("tiny_qwen2", "hf", "f32"),
    "tiny_qwen2_f16": ("tiny_qwen2", "hf", "f16"),
    "tiny_qwen3_f32": ("tiny_qwen3", "hf", "f32"),
    "tiny_mistral_f32": ("tiny_mistral", "hf", "f32"),
    "stories260K_lora_f32": ("stories260K_lora", "lora", "f32"),
    "stories260K_lora_f16": ("stories260K_lora", "lora", "f16"),
}


def perturb_1d(i, j):
    """Value j of the model's i-th tensor (in pt_model_tensor_info order)
    when that tensor is 1-D; exact in float32."""
    return 1.0 + ((i * 31 + j * 7) % 17 - 8) / 64.0


def perturb_lora_b(i, j):
    """Value j of the i-th tensor (table order) when it is a lora_B."""
    return ((i * 13 + j * 5) % 23 - 11) / 256.0


def _set_1d(model):
    for i, t in enumerate(model.tensors()):
        if len(t["shape"]) == 1 and not t["adapter"]:
            model.set_tensor(t["name"], [perturb_1d(i, j) for j in range(t["numel"])])


def make_synthetic(name, out):
    from posttrain import Model, load_config
    ref, tok, vocab, bos, eos = SYNTHETIC[name]
    cfg = load_config(os.path.join(ROOT, "tests", "reference", ref, "config.json"))
    cfg.update(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos)
    m = Model.create(cfg, seed=SEED)
    _set_1d(m)
    d = os.path.join(out, "in", name)
    shutil.rmtree(d, ignore_errors=True)
    m.save(d, tokenizer_dir=os.path.join(SHARED, "tokenizers", tok))
    return d


def make_stories(out):
    d = os.path.join(out, "in", "stories260K")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    # config, weights and tokenizer only: the converter would also read a
    # README.md model card into general.* keys.
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(SHARED, "models", "stories260K", f), d)
    return d


def make_lora(out):
    from posttrain import Model
    base = make_stories(out)
    m = Model.load(base)
    m.add_lora(rank=LORA["rank"], alpha=LORA["alpha"], targets=LORA["targets"],
               seed=LORA["seed"])
    for i, t in enumerate(m.tensors()):
        if t["adapter"] and ".lora_B." in t["name"]:
            m.set_tensor(t["name"], [perturb_lora_b(i, j) for j in range(t["numel"])])
    d = os.path.join(out, "in", "stories260K_lora")
    shutil.rmtree(d, ignore_errors=True)
    m.save_lora(d)
    return base, d


def converter_env(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "shim"),
                                         os.path.join(ROOT, "python")])
    if args.lib:
        env["POSTTRAIN_LIBRARY"] = args.lib
    return env


def run(cmd, env):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stdout.write(r.stdout[-4000:])
        raise SystemExit("converter failed: %s" % " ".join(cmd))


def knows_arch(src, inp):
    """Whether the tree's converter has a class for the input's architecture."""
    cls = {"tiny_qwen3": "Qwen3ForCausalLM"}.get(inp)
    if cls is None:
        return True
    files = [os.path.join(src, "convert_hf_to_gguf.py")]
    pkg = os.path.join(src, "conversion")       # newer trees split the model classes out
    if os.path.isdir(pkg):
        files += [os.path.join(pkg, f) for f in sorted(os.listdir(pkg)) if f.endswith(".py")]
    for path in files:
        with open(path, encoding="utf-8") as f:
            if '"%s"' % cls in f.read():
                return True
    return False


def convert(case, args, env):
    inp, kind, outtype = CASES[case]
    src, commit = args.llama_cpp, args.commit
    if not knows_arch(src, inp):
        print("skip %s: this converter does not know its architecture" % case)
        return None
    outfile = os.path.join(args.out, "conv_%s_%s.gguf" % (commit[:7], case))
    if kind == "lora":
        base, d = make_lora(args.out)
        script = "convert_lora_to_gguf.py"
        cmd = [sys.executable, os.path.join(src, script), d, "--base", base,
               "--outtype", outtype, "--outfile", outfile]
    else:
        d = make_stories(args.out) if inp == "stories260K" else make_synthetic(inp, args.out)
        script = "convert_hf_to_gguf.py"
        cmd = [sys.executable, os.path.join(src, script), d, "--outtype", outtype,
               "--outfile", outfile]
    # gguf-py of the same llama.cpp tree
    env = dict(env, PYTHONPATH=env["PYTHONPATH"] + os.pathsep + os.path.join(src, "gguf-py"))
    run(cmd, env)
    return {"case": case, "converter": script, "llama_cpp_commit": commit,
            "outtype": outtype, "input": inp}, outfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", default=os.environ.get("LLAMA_CPP_SRC"),
                    help="llama.cpp source tree (env LLAMA_CPP_SRC)")
    ap.add_argument("--commit", default=os.environ.get("LLAMA_CPP_COMMIT", "unknown"))
    ap.add_argument("--out", default="/work/gguf-out")
    ap.add_argument("--lib", default=os.environ.get("POSTTRAIN_LIBRARY"))
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    if not args.llama_cpp:
        ap.error("--llama-cpp (or LLAMA_CPP_SRC) is required")
    if not os.path.isdir(SHARED):
        raise SystemExit("%s is missing (the reference data)" % SHARED)
    if args.lib:
        os.environ["POSTTRAIN_LIBRARY"] = args.lib
    os.makedirs(args.out, exist_ok=True)
    env = converter_env(args)
    for case in args.cases or list(CASES):
        r = convert(case, args, env)
        if r is None:
            continue
        head, outfile = r
        os.makedirs(os.path.join(HERE, args.commit[:7]), exist_ok=True)
        path = os.path.join(HERE, args.commit[:7], "%s.digest.json" % case)
        gguf_digest.write(path, gguf_digest.digest(outfile), head)
        print("wrote", path)


if __name__ == "__main__":
    main()
