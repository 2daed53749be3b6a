#!/bin/sh
# posttrain on quantized GGUF files (issue 23), data in tests/kernels/data/quant:
# - greedy text on stories260K Q8_0 and Q4_0 equals llama.cpp's on the same
#   files (llama-cli c392e50, -p "Once upon a time" -n 60 --temp 0 -no-cnv
#   -ctk f32 -ctv f32,
#   recorded in llamacpp_greedy.<type>.txt: the prompt, the completion, "\n");
# - the LoRA adapter lora_stories192 (trained by posttrain sft on the Q8_0
#   file) exported as a GGUF adapter has the bytes llama.cpp was given, and
#   llama.cpp applying it with --lora over the Q8_0 and the Q4_0 file
#   (tests/gen/llamacpp_logits.c, LLAMACPP_GREEDY=60) chose the same 60
#   greedy ids as posttrain generate --adapter on those files;
# - export --type f32 and bf16 of a quantized file load; the F32 export
#   generates the same ids as the quantized file (the same values);
# - sft with --lora-rank on Q4_0 and Q4_K trains and writes the adapter
#   (no merged model); a run resumed from its checkpoint (Q4_K_M) ends with
#   the same adapter bytes; without LoRA it is refused, saying how to
#   dequantize.
set -eu
posttrain=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for t in q8_0 q4_0; do
    { printf ' Once upon a time'
      "$posttrain" generate --model "$data/stories192.$t.gguf" --prompt "Once upon a time" \
          --temperature 0 --max-new-tokens 60 2>/dev/null
      echo; } > "$work/ours.$t.txt"
    # the whole text on both: decoding multiplies 8-bit activations with
    # integer dots as llama.cpp does, the same arithmetic; llama.cpp ran with
    # an F32 KV cache (its default F16 rounds keys and values, which turns
    # a near-tie of Q4_0 after 18 tokens the other way)
    n=$(wc -c < "$data/llamacpp_greedy.$t.txt")
    if ! cmp -n "$n" "$work/ours.$t.txt" "$data/llamacpp_greedy.$t.txt"; then
        echo "FAIL: greedy text on $t differs from llama.cpp's"; cat "$work/ours.$t.txt"; exit 1
    fi
done

"$posttrain" export --model "$data/stories192.q8_0.gguf" --adapter "$data/lora_stories192" \
    --out "$work/lora.gguf" 2>/dev/null
if command -v sha256sum > /dev/null; then
    sum=$(sha256sum < "$work/lora.gguf" | cut -d' ' -f1)
    [ "$sum" = "$(cat "$data/llamacpp_lora.sha256")" ] ||
        { echo "FAIL: the exported adapter is not the file llama.cpp was given ($sum)"; exit 1; }
else
    echo "skipped: no sha256sum, the exported adapter's bytes are not checked"
fi
for t in q8_0 q4_0; do
    "$posttrain" generate --model "$data/stories192.$t.gguf" --adapter "$data/lora_stories192" \
        --prompt-ids 1,403,407,261,378 --temperature 0 --max-new-tokens 60 --ignore-eos --print-ids \
        2>/dev/null | tail -n 1 > "$work/lora_ids.$t.txt"
    cmp "$work/lora_ids.$t.txt" "$data/llamacpp_lora_ids.$t.txt" ||
        { echo "FAIL: greedy ids with the adapter on $t differ from llama.cpp's --lora"; exit 1; }
done

"$posttrain" export --model "$data/stories192.q8_0.gguf" --out "$work/f32.gguf" --type f32
"$posttrain" export --model "$data/tiny.q4_k.gguf" --out "$work/bf16.gguf" --type bf16
"$posttrain" info "$work/f32.gguf" | grep -q 'F32/F16/BF16 (loads for training)'
"$posttrain" info "$data/tiny.q4_k.gguf" | grep -q 'quantized (loads frozen'
for m in "$data/stories192.q8_0.gguf" "$work/f32.gguf"; do
    "$posttrain" generate --model "$m" --prompt-ids 1,403,407 --temperature 0 --max-new-tokens 40 \
        2>/dev/null
done > "$work/gen.txt"
n=$(sort -u "$work/gen.txt" | wc -l)
[ "$(wc -l < "$work/gen.txt")" -eq 2 ] && [ "$n" -eq 1 ] || { echo "FAIL: the F32 export generates differently"; cat "$work/gen.txt"; exit 1; }
"$posttrain" generate --model "$work/bf16.gguf" --prompt-ids 1,403 --max-new-tokens 4 > /dev/null 2>&1

printf '%s\n' '{"text":"Once upon a time, there was a little girl named Lily. She loved to play outside."}' \
    '{"text":"One day, a big dog came to the park. The dog was happy and ran around."}' > "$work/d.jsonl"
for t in stories192.q4_0 tiny.q4_k; do
    "$posttrain" sft --model "$data/$t.gguf" --data "$work/d.jsonl" --out "$work/sft.$t" --lora-rank 4 \
        --steps 3 --lr 1e-2 2> "$work/sft.$t.log" || { cat "$work/sft.$t.log"; exit 1; }
    [ -f "$work/sft.$t/adapter/adapter_model.safetensors" ] || { echo "FAIL: no adapter for $t"; exit 1; }
    grep -q 'no merged model is written' "$work/sft.$t.log"
done
# checkpoints and resume on the Q4_K_M mixture: the resumed run ends with the same adapter
"$posttrain" sft --model "$data/tiny.q4_k_m.gguf" --data "$work/d.jsonl" --out "$work/r1" --lora-rank 4 \
    --steps 6 --lr 1e-2 --save-every 3 2> "$work/r1.log" || { cat "$work/r1.log"; exit 1; }
"$posttrain" sft --model "$data/tiny.q4_k_m.gguf" --data "$work/d.jsonl" --out "$work/r2" --lora-rank 4 \
    --steps 6 --lr 1e-2 --resume "$work/r1/checkpoints/step-00000003" 2> "$work/r2.log" ||
    { cat "$work/r2.log"; exit 1; }
cmp "$work/r1/adapter/adapter_model.safetensors" "$work/r2/adapter/adapter_model.safetensors" ||
    { echo "FAIL: the resumed run's adapter differs"; exit 1; }
if "$posttrain" sft --model "$data/stories192.q4_0.gguf" --data "$work/d.jsonl" --out "$work/full" \
        --steps 1 2> "$work/full.log"; then
    echo "FAIL: full fine-tuning of a quantized base was not refused"; exit 1
fi
grep -q 'PT_EUNSUPPORTED.*--type f32' "$work/full.log" || { cat "$work/full.log"; exit 1; }
echo "quantized CLI: all checks passed"
