#!/usr/bin/env bash
# The generation anchors of the quantized-GGUF issue (23) in one run: a
# random model of the SmolLM2-135M shape (GPT-2's tokenizer from
# ../shared/data, as bench/llamacpp_decode.sh) exported to F32 GGUF and
# quantized by llama.cpp's own llama-quantize to each TYPE; then for each
# file llama-bench (pp PROMPT, tg 64, and pg PROMPT,64) and bench_decode on
# the very same file (ours: prefill through dequantized tiles, decoding with
# the integer kernels of kernels/qgemv.h), so every ratio comes from the same
# minute (and bench_decode --twin: 16 sequences on the file against the
# F32 file it was quantized from, rounds alternating: issue 23's "3x our
# FP32").  llama-bench's tg64 decodes 64 tokens from an empty cache: ours is
# measured on the same workload (a 1-token prompt, then 64 steps: "depth
# 0"), and at depth PROMPT (64 steps after a PROMPT-token prompt) against
# llama.cpp's decode at that depth, which pg gives: PROMPT + 64 tokens in
# t_pg seconds, of which PROMPT / pp are the prefill, so
# tg@PROMPT = 64 / (t_pg - PROMPT / pp).
#
#   bench/llamacpp_quant.sh LLAMA_BUILD_BIN [BUILD] [PROMPT] [TYPES]
#
# LLAMA_BUILD_BIN: the bin/ folder of a llama.cpp build (llama-bench,
# llama-quantize; built from its public source as docs/benchmarks.md says,
# never committed).  BUILD: this project's meson build (default build).
# PROMPT: the prefill length (default 256).  TYPES: llama-quantize's names
# (default "Q8_0 Q4_0 Q4_K_M").
set -euo pipefail
bin=${1:?usage: bench/llamacpp_quant.sh LLAMA_BUILD_BIN [BUILD] [PROMPT] [TYPES]}
build=${2:-build}
prompt=${3:-256}
types=${4:-Q8_0 Q4_0 Q4_K_M}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tok="$here/../shared/data/tokenizers/gpt2/tokenizer.json"
[ -f "$tok" ] || { echo "bench/llamacpp_quant.sh: $tok not found" >&2; exit 1; }
PYTHONPATH="$here/python" POSTTRAIN_LIBRARY="$build/libposttrain/libposttrain.so" python3 - "$tmp" "$tok" <<'PY'
import shutil, sys, posttrain as pt
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
m.export_gguf(out + "/model-f32.gguf", type="f32")
PY
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for t in $types; do
    "$bin/llama-quantize" "$tmp/model-f32.gguf" "$tmp/model-$t.gguf" "$t" >/dev/null 2>&1
    echo "== $t ($(du -m "$tmp/model-$t.gguf" | cut -f1) MB)"
    "$bin/llama-bench" -m "$tmp/model-$t.gguf" -t 2 -p "$prompt" -n 64 -pg "$prompt,64" -r 3 -o md \
        2>/dev/null | grep -E "pp|tg"
    echo "ours at depth 0 (tg64's workload):"
    "$build/bench/bench_decode" --model "$tmp/model-$t.gguf" --batch 1 --prompt 1 --new 65 --reps 3 \
        --no-anchor --precision fp32 | grep -E "^ours"
    echo "ours at depth $prompt:"
    "$build/bench/bench_decode" --model "$tmp/model-$t.gguf" --batch 1,16 --prompt "$prompt" \
        --new 65 --reps 3 --no-anchor --precision fp32,bf16 | grep -vE "^(matrix|anchor)"
    echo "ours against the same weights in FP32, 16 sequences, rounds alternating:"
    "$build/bench/bench_decode" --model "$tmp/model-$t.gguf" --twin "$tmp/model-f32.gguf" \
        --batch 16 --prompt "$prompt" --new 33 --reps 5 | grep -E "^(ours|rounds)"
done
echo "== FP32 (ours, the same weights unquantized)"
"$build/bench/bench_decode" --model "$tmp/model" --batch 1,16 --prompt "$prompt" --new 64 --reps 3 \
    --no-anchor | grep -vE "^(matrix|anchor)"
