#!/usr/bin/env bash
# Mistral with a sliding window (tests/reference/mistral_sliding: window 5)
# through the program: info describes it (the window, the KV-cache ring in
# the estimate), generate runs past the window, and sft trains on rows
# longer than the window and saves a config.json with the window as read.
# Usage: test_cli_mistral.sh POSTTRAIN MISTRAL_DIR
set -uo pipefail
exe=$1 ref=$2
work=$(mktemp -d /tmp/pt_cli_mistral.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
# has NAME FILE NEEDLE: FILE holds NEEDLE (fixed string)
has() { grep -qF -- "$3" "$2" && ok "$1" || bad "$1: no '$3' in: $(cat "$2")"; }

"$exe" info "$ref" >"$work/info" 2>"$work/err" && ok "info exits 0" || bad "info: $(cat "$work/err")"
has "info: architecture" "$work/info" "architecture: mistral (MistralForCausalLM)"
has "info: window" "$work/info" "head_dim 12, sliding window 5"
# 2 x 2 layers x 2 kv heads x 12 x 5 slots x 4 B = 1920 B
has "info: ring estimate" "$work/info" "1.88 KiB KV cache (1 sequence of 128 tokens, a ring of 5"
"$exe" info --json "$ref" >"$work/json" 2>"$work/err" || bad "info --json: $(cat "$work/err")"
has "info --json: window" "$work/json" '"sliding_window": 5,'
has "info --json: ring" "$work/json" '"kv_cache_slots": 5, "weights_bytes": 88960, "kv_cache_bytes": 1920'

# 7 prompt tokens + 20 new ones: four times the window
"$exe" generate --model "$ref" --prompt-ids 1,5,7,9,11,13,15 --temperature 0 \
    --max-new-tokens 20 --ignore-eos --print-ids >"$work/gen" 2>"$work/err"
rc=$?
n=$(tr ' ' '\n' <"$work/gen" | grep -c '^[0-9][0-9]*$')
[ "$rc" -eq 0 ] && [ "$n" -eq 20 ] && ok "generate past the window: 20 ids" ||
    bad "generate: exit $rc, $n ids: $(cat "$work/gen" "$work/err")"

# --kv-cache bf16 through the ring: 20 ids again, and log-probabilities that
# are not the FP32 cache's (the cache is BF16 indeed)
for kv in fp32 bf16; do
    "$exe" generate --model "$ref" --prompt-ids 1,5,7,9,11,13,15 --temperature 0 --max-new-tokens 20 \
        --ignore-eos --print-ids --logprobs --kv-cache $kv >"$work/gen_$kv" 2>"$work/err" ||
        bad "generate --kv-cache $kv: $(cat "$work/err")"
done
n=$(tr ' ' '\n' <"$work/gen_bf16" | grep -c '^[0-9][0-9]*$')
[ "$n" -ge 20 ] && ! cmp -s "$work/gen_fp32" "$work/gen_bf16" && ok "generate --kv-cache bf16" ||
    bad "generate --kv-cache bf16: $n ids, the same output as fp32: $(cat "$work/gen_bf16")"

for i in $(seq 0 7); do
    printf '{"input_ids": [1, %d, %d, %d, %d, %d, %d, %d, %d, %d, 2]}\n' $((i + 3)) $((i * 7 % 50 + 3)) \
        $((i * 3 % 50 + 3)) $((i * 11 % 50 + 3)) 9 10 11 $((i + 20)) $((i + 30))
done >"$work/data.jsonl"
"$exe" sft --model "$ref" --data "$work/data.jsonl" --out "$work/out" --steps 2 --batch-size 4 \
    --lr 1e-3 >"$work/sft" 2>&1 && ok "sft on rows of 11 tokens (window 5)" || bad "sft: $(cat "$work/sft")"
has "saved config.json keeps the window" "$work/out/config.json" '"sliding_window": 5,'
has "saved config.json is mistral" "$work/out/config.json" '"model_type": "mistral",'
"$exe" info "$work/out" >"$work/info2" 2>"$work/err" && has "info on the saved model" "$work/info2" \
    "sliding window 5" || bad "info on the saved model: $(cat "$work/err")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
