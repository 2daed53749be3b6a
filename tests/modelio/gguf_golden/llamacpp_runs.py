#!/usr/bin/python3
"""llama.cpp runs our GGUF files: export stories260K with `posttrain export`
(f32, f16; and the LoRA adapter of make_goldens.py), run llama.cpp's
llama-cli greedily on them and on the converter's file, run libposttrain's
greedy generation on the same model, and write the record
llamacpp_runs.json (commit, command lines, prompt, texts, token ids and the
sha256 of every file llama.cpp ran).  test_gguf_golden.c keeps the record
true: our export's sha256 and our generation must still be these.

    /usr/bin/python3 tests/modelio/gguf_golden/llamacpp_runs.py \
        --llama-cpp-bin /work/llamacpp-build/bin \
        --commit c392e5094deaf2d1a7c18683214f007fad3fe42b \
        --posttrain build/cli/posttrain [--out /work/gguf-out]

Run make_goldens.py first (it makes OUT/in/stories260K, the PEFT adapter
OUT/in/stories260K_lora and the converter's files).
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

PROMPT = "Once upon a time"
N = 40


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-3000:])
        raise SystemExit("failed: %s" % " ".join(cmd))
    return r.stdout


def llama_cli(args, model, lora=None):
    cmd = [os.path.join(args.llama_cpp_bin, "llama-cli"), "-m", model]
    if lora:
        cmd += ["--lora", lora]
    cmd += ["-p", PROMPT, "-n", str(N), "--temp", "0", "--top-k", "1", "-no-cnv",
            "--no-display-prompt", "--no-warmup", "-s", "1", "-t", "1"]
    return cmd, run(cmd).rstrip("\n")


def llama_ids(args, model, lora=None):
    """The ids llama-cli evaluates: the prompt, then each sampled token (its
    verbose log's "eval: [ 'piece':id, ... ]" lines).  The last sampled
    token is not evaluated, so this run asks for one more."""
    cmd = [os.path.join(args.llama_cpp_bin, "llama-cli"), "-m", model]
    if lora:
        cmd += ["--lora", lora]
    cmd += ["-p", PROMPT, "-n", str(N + 1), "--temp", "0", "--top-k", "1", "-no-cnv",
            "--no-display-prompt", "--no-warmup", "-s", "1", "-t", "1", "-v"]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       errors="replace")
    evals = [[int(x) for x in re.findall(r":(\d+)(?=, |\s*\])", line)]
             for line in r.stderr.splitlines() if line.startswith("eval: [")]
    prompt, gen = evals[0], [e[0] for e in evals[1:]]
    return prompt, gen[:N]


def llama_tokens(args, model, text):
    """llama.cpp's tokenization (with BOS) of prompt + completion."""
    cmd = [os.path.join(args.llama_cpp_bin, "llama-tokenize"), "-m", model, "-p", text,
           "--ids", "--log-disable"]
    out = run(cmd).strip().splitlines()[-1]
    return json.loads(out)


def ours(model_dir, lora_dir=None):
    from posttrain import Model
    m = Model.load(model_dir)
    if lora_dir:
        m.load_lora(lora_dir)
    ids = m.tokenizer.encode(PROMPT, add_special=True)
    g = m.generate(ids, max_new_tokens=N, temperature=0)
    return ids, list(g.tokens), m.tokenizer.decode(g.tokens, skip_special=True), str(g.finish_reason)


def export(args, model_dir, out, typ, adapter=None):
    cmd = [args.posttrain, "export", "--model", model_dir, "--out", out, "--type", typ]
    if adapter:
        cmd += ["--adapter", adapter]
    run(cmd)
    return cmd


def record(args, name, export_cmd, model, lora, posttrain):
    cmd, text = llama_cli(args, model, lora)
    prompt_ids, gen, our_text, finish = posttrain
    toks = llama_tokens(args, model, PROMPT + text)
    lp, lg = llama_ids(args, model, lora)
    r = {"name": name, "export": export_cmd, "gguf_sha256": sha256(model)}
    if lora:
        r["lora_sha256"] = sha256(lora)
    r.update({"llama_cpp": cmd, "llama_cpp_text": text,
              "llama_cpp_prompt_ids": lp, "llama_cpp_ids": lg,
              "posttrain_prompt_ids": prompt_ids, "posttrain_ids": gen,
              "posttrain_finish": finish, "posttrain_text": our_text,
              "same_text": text == our_text,
              "same_ids": lp == prompt_ids and lg == gen,
              "llama_tokenize_of_prompt_and_text": toks})
    print("%-28s same text %s, same ids %s" % (name, r["same_text"], r["same_ids"]))
    return r


def rel(path, out):
    return os.path.join("$OUT", os.path.relpath(path, out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp-bin", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--posttrain", required=True)
    ap.add_argument("--out", default="/work/gguf-out")
    args = ap.parse_args()
    out = args.out
    base = os.path.join(out, "in", "stories260K")
    lora = os.path.join(out, "in", "stories260K_lora")
    plain, adapted = ours(base), ours(base, lora)
    runs = []
    for typ in ("f32", "f16"):
        f = os.path.join(out, "ours_stories260K_%s.gguf" % typ)
        cmd = export(args, base, f, typ)
        runs.append(record(args, "stories260K_%s" % typ, cmd, f, None, plain))
    conv = os.path.join(out, "conv_c392e50_stories260K_f32.gguf")
    runs.append(record(args, "converter_stories260K_f32", ["convert_hf_to_gguf.py"], conv,
                       None, plain))
    base_gguf = os.path.join(out, "ours_stories260K_f32.gguf")
    for typ in ("f32", "f16"):
        f = os.path.join(out, "ours_stories260K_lora_%s.gguf" % typ)
        cmd = export(args, base, f, typ, adapter=lora)
        runs.append(record(args, "stories260K_lora_%s" % typ, cmd, base_gguf, f, adapted))
    conv_lora = os.path.join(out, "conv_c392e50_stories260K_lora_f32.gguf")
    runs.append(record(args, "converter_stories260K_lora_f32", ["convert_lora_to_gguf.py"],
                       base_gguf, conv_lora, adapted))
    for r in runs:   # paths relative to OUT, so the record does not name this machine
        for k in ("export", "llama_cpp"):
            r[k] = [rel(a, out) if a.startswith(out) else a for a in r[k]]
            r[k] = [os.path.basename(a) if a == args.posttrain else a for a in r[k]]
            r[k] = [("llama-cli" if a.endswith("/llama-cli") else a) for a in r[k]]
    doc = {"llama_cpp_commit": args.commit, "prompt": PROMPT, "n_predict": N,
           "llama_cpp_ids_from": "the same llama-cli command with -n %d -v: its 'eval: [ ... ]' "
                                 "log lines (the prompt, then each sampled token)" % (N + 1),
           "llama_tokenize_note": "llama-tokenize -m FILE -p PROMPT+TEXT --ids: llama.cpp's "
                                  "own tokenization of the text, for information",
           "posttrain_generate": "Model.load(DIR) [load_lora(PEFT)]; generate(tokenizer.encode("
                                 "prompt, add_special=True), max_new_tokens=40, temperature=0)",
           "runs": runs}
    with open(os.path.join(HERE, "llamacpp_runs.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
