#!/bin/bash
# Differential check of `posttrain tokenize` against the reference implementation
# (Hugging Face tokenizers, Node binding) on random strings: ids with and
# without special tokens, decode with and without skipping special tokens.
# Not part of `meson test` (it needs node and the npm package):
#   (mkdir -p build-node && cd build-node && npm install @anush008/tokenizers@0.6.0)
#   tests/text/refdiff/run.sh build-node/node_modules build/cli/posttrain [MODE SEED COUNT]
# MODE: mix (default), uni, long (see gen.py).  Exit status 1 if anything differs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
nm=$(cd "$1" && pwd); exe=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
mode=${3:-mix}; seed=${4:-1}; count=${5:-500}
shared=${PT_SHARED_DATA:-$here/../../../../shared/data}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/gen.py" "$mode" "$seed" "$count" > "$tmp/in.jsonl"
status=0
for t in gpt2 llama3 qwen3 llama-spm; do
  p=$shared/tokenizers/$t/tokenizer.json
  for add in 0 1; do
    NODE_PATH=$nm node "$here/ref.js" "$p" $add < "$tmp/in.jsonl" > "$tmp/ref.jsonl" || exit 2
    flag=""; [ $add = 1 ] && flag=--add-special-tokens
    "$exe" tokenize --tokenizer "$p" $flag --jsonl < "$tmp/in.jsonl" > "$tmp/ours.jsonl" || exit 2
    /usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    print(json.dumps({"ids": json.loads(l)["ids"]}))' "$tmp/ref.jsonl" > "$tmp/refids.jsonl"
    "$exe" tokenize --tokenizer "$p" --decode --jsonl < "$tmp/refids.jsonl" > "$tmp/dec.jsonl" || exit 2
    "$exe" tokenize --tokenizer "$p" --decode --skip-special-tokens --jsonl < "$tmp/refids.jsonl" > "$tmp/dec2.jsonl" || exit 2
    /usr/bin/python3 - "$tmp" "$t" "$add" <<'PY' || status=1
import json, sys
tmp, t, add = sys.argv[1:]
ins = [json.loads(l)["text"] for l in open(tmp + "/in.jsonl")]
ref = [json.loads(l) for l in open(tmp + "/ref.jsonl")]
ours = [json.loads(l)["ids"] for l in open(tmp + "/ours.jsonl")]
dec = [json.loads(l)["text"] for l in open(tmp + "/dec.jsonl")]
dec2 = [json.loads(l)["text"] for l in open(tmp + "/dec2.jsonl")]
bad = 0
for i, r in enumerate(ref):
    for what, got, want in (("ids", ours[i], r["ids"]), ("decode", dec[i], r["text"]), ("decode skip", dec2[i], r["skip"])):
        if got != want:
            bad += 1
            if bad <= 3:
                print("%s add=%s %s differs for %r\n  ours %r\n  ref  %r" % (t, add, what, ins[i], got, want))
print("%-9s add=%s: %d lines, %d differences" % (t, add, len(ref), bad))
sys.exit(1 if bad else 0)
PY
  done
done
exit $status
