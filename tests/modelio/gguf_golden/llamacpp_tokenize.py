#!/usr/bin/python3
"""llama.cpp tokenizes our stories260K exports: `posttrain export
--spm-scores converter` (every tokenizer.ggml.scores entry -1000, what
llama.cpp's converter writes for a tokenizer.json) and `--spm-scores merges`
(scores from the merge ranks).  Runs llama-tokenize on each text for both
files and libposttrain's tokenizer (Hugging Face's ids on the reference
vectors) on the model directory, and writes the record
llamacpp_tokenize.json (commit, commands, the sha256 of both files, every
text's three id lists, the counts).  test_gguf_golden.c keeps our side of
the record true: our `merges` export's sha256 and our ids.

    /usr/bin/python3 tests/modelio/gguf_golden/llamacpp_tokenize.py \\
        --llama-cpp-bin /work/llamacpp-build/bin \\
        --commit c392e5094deaf2d1a7c18683214f007fad3fe42b \\
        --posttrain build/cli/posttrain [--out /work/gguf-out]

Run make_goldens.py first (it makes OUT/in/stories260K).
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

# Varied English in stories260K's domain (its 512 pieces are children's
# story words), with the leading-space and punctuation cases that separate
# the merge orders.
TEXTS = [
    " little",
    "little",
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her friends.",
    "One day, a big dog came running and barked at the cat.",
    "Tom and Sue went to the store to buy some apples and milk.",
    "The sun was shining and the birds were singing in the trees.",
    "\"Can I have a cookie, please?\" asked the boy.",
    "Mom said, \"Yes, but only one.\"",
    "They were very happy and they laughed together all day.",
    "The little bunny hopped over the fence and found a carrot.",
    "He was sad because his toy was broken.",
    "After dinner, they read a book about a brave knight.",
    "The end.",
    "It was a cold and rainy night; the wind howled outside.",
    "Ben's red ball rolled under the bed!",
    "1, 2, 3... ready or not, here I come!",
    "  two leading spaces and\ttabs",
    "Lines\nwith\n\nnew lines",
    "supercalifragilistic expialidocious",
    "The quick brown fox jumps over the lazy dog.",
    "Why is the sky blue? Because of the light.",
    "Max found a shiny stone near the river and showed it to his mom.",
    "The old man smiled and gave her a flower.",
    "Every morning, the farmer fed the cows, the pigs and the chickens.",
    "\"Let's go!\" shouted Anna, and they ran to the big green tree.",
    "A cat, a dog, and a bird became best friends.",
    "She whispered: I will always remember you.",
    "Don't be scared, it's just a shadow.",
    "The kids built a sandcastle at the beach.",
    "Grandma baked a yummy pie for everyone.",
    "Wow! That is so cool!",
    "Zebras, yaks and xylophones are unusual words here.",
    "Tim looked up at the stars and made a wish.",
    "little little little",
    " a",
    "a",
    "",
    "The boy and the girl shared their toys and were friends forever.",
    "In the end, they all learned that being kind is important.",
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-3000:])
        raise SystemExit("failed: %s" % " ".join(cmd))
    return r.stdout


def llama_tokenize(args, model, text):
    cmd = [os.path.join(args.llama_cpp_bin, "llama-tokenize"), "-m", model, "--stdin",
           "--no-escape", "--ids", "--log-disable"]
    out = run(cmd, stdin=text).strip().splitlines()[-1]
    return cmd, json.loads(out)


def rel(path, out):
    return os.path.join("$OUT", os.path.relpath(path, out)) if path.startswith(out) else path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp-bin", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--posttrain", required=True)
    ap.add_argument("--out", default="/work/gguf-out")
    args = ap.parse_args()
    out = args.out
    base = os.path.join(out, "in", "stories260K")
    from posttrain import Model
    tok = Model.load(base).tokenizer
    files, exports = {}, {}
    for mode in ("converter", "merges"):
        f = os.path.join(out, "ours_stories260K_f32_spm_%s.gguf" % mode)
        cmd = [args.posttrain, "export", "--model", base, "--out", f, "--spm-scores", mode]
        run(cmd)
        files[mode] = f
        exports[mode] = {"export": [os.path.basename(cmd[0])] + [rel(a, out) for a in cmd[1:]],
                         "gguf_sha256": sha256(f)}
    rows, same = [], {"converter": 0, "merges": 0}
    for text in TEXTS:
        ours = list(tok.encode(text, add_special=True))
        row = {"text": text, "posttrain_ids": ours}
        for mode in ("converter", "merges"):
            cmd, ids = llama_tokenize(args, files[mode], text)
            row["llama_cpp_ids_" + mode] = ids
            same[mode] += ids == ours
        rows.append(row)
    little = next(r for r in rows if r["text"] == " little")
    summary = {"texts": len(rows), "same_as_posttrain_merges": same["merges"],
               "same_as_posttrain_converter": same["converter"],
               "little_tokens": {"posttrain": len(little["posttrain_ids"]) - 1,
                                 "llama_cpp_merges": len(little["llama_cpp_ids_merges"]) - 1,
                                 "llama_cpp_converter": len(little["llama_cpp_ids_converter"]) - 1}}
    print(json.dumps(summary))
    doc = {"llama_cpp_commit": args.commit,
           "llama_tokenize": ["llama-tokenize", "-m", "FILE", "--stdin", "--no-escape", "--ids",
                              "--log-disable"],
           "llama_tokenize_note": "the text on standard input; llama.cpp adds BOS (the file's "
                                  "tokenizer.ggml.add_bos_token)",
           "posttrain_tokenize": "Model.load($OUT/in/stories260K).tokenizer.encode(text, "
                                 "add_special=True)",
           "exports": exports, "summary": summary, "texts": rows}
    with open(os.path.join(HERE, "llamacpp_tokenize.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
