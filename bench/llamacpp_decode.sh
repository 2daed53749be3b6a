#!/usr/bin/env bash
# The generation anchors of the BF16 issue in one run: llama.cpp's
# llama-bench on GGUF exports (F32 and BF16) of a random model of the
# SmolLM2-135M shape (with GPT-2's tokenizer from ../shared/data, so its
# vocabulary is 50257 instead of 49152: GGUF files carry one), then
# bench_decode on the same model (ours, FP32 and BF16, with the PyTorch
# anchor), so every ratio comes from the same minute.
#
#   bench/llamacpp_decode.sh LLAMA_BUILD_BIN [BUILD] [PROMPT] [BATCHES]
#
# LLAMA_BUILD_BIN: the bin/ folder of a llama.cpp build (llama-bench), built
# from its public source as docs/benchmarks.md says (never committed).
# BUILD: this project's meson build (default build).  PROMPT: the prefill
# length for both (default 256; the issue's goal is stated at 1024 too).
# BATCHES: bench_decode's --batch list (default 1,16).
set -euo pipefail
bin=${1:?usage: bench/llamacpp_decode.sh LLAMA_BUILD_BIN [BUILD] [PROMPT]}
build=${2:-build}
prompt=${3:-256}
batches=${4:-1,16}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The model bench_decode makes (pt_model_create, seed 1234), saved and exported.
tok="$here/../shared/data/tokenizers/gpt2/tokenizer.json"
[ -f "$tok" ] || { echo "bench/llamacpp_decode.sh: $tok not found" >&2; exit 1; }
PYTHONPATH="$here/python" POSTTRAIN_LIBRARY="$build/libposttrain/libposttrain.so" python3 - "$tmp" "$tok" <<'PY'
import os, shutil, sys, posttrain as pt
out, tok = sys.argv[1], sys.argv[2]
cfg = dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
           head_dim=64, intermediate_size=1536, vocab_size=50257, tie_word_embeddings=True,
           rms_norm_eps=1e-5, max_position_embeddings=2048, bos_token_id=50256,
           eos_token_id=50256)
m = pt.Model.create(cfg, seed=1234)
m.save(out + "/model", copy_tokenizer=False)
shutil.copy(tok, out + "/model/tokenizer.json")
m.close()
m = pt.Model.load(out + "/model")
for t in ("f32", "bf16"):
    m.export_gguf(out + "/model-%s.gguf" % t, type=t)
PY
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for t in f32 bf16; do
    echo "llama.cpp $t:"
    "$bin/llama-bench" -m "$tmp/model-$t.gguf" -t 2 -p "$prompt" -n 64 -r 3 -o md 2>/dev/null | grep -E "model|gguf|llama|pp|tg"
done
# llama-bench's tg64 decodes 64 tokens from an empty cache: ours on the same
# workload first (a 1-token prompt, then 64 steps: "depth 0"), as
# bench/llamacpp_quant.sh does, then at depth PROMPT with the PyTorch anchor.
echo "ours at depth 0 (tg64's workload):"
"$build/bench/bench_decode" --model "$tmp/model" --batch 1 --prompt 1 --new 65 --reps 5 --no-anchor \
    | grep -E "^ours"
echo "ours at depth $prompt:"
"$build/bench/bench_decode" --model "$tmp/model" --batch "$batches" --prompt "$prompt" --new 64 --reps 3
