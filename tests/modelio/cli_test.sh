#!/bin/sh
# posttrain info / eval on the real stories260K model (skipped, exit 77,
# without ../shared/data).  Usage: cli_test.sh POSTTRAIN SOURCE_ROOT
set -eu
exe=$1
src=$2
data=${PT_SHARED_DATA:-$src/../shared/data}
model=$data/models/stories260K
if [ ! -d "$model" ]; then
    echo "SKIP cli: shared data not found at $data (set PT_SHARED_DATA)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# |value of "key" in the first JSON line of file - expected| < tol
check_num() {
    got=$(sed -n 's/.*"'"$2"'": \([-0-9.eE+]*\).*/\1/p' "$1" | head -1)
    [ -n "$got" ] || fail "no $2 in $(cat "$1")"
    awk -v g="$got" -v w="$3" -v t="$4" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d < t) }' ||
        fail "$2 = $got, expected $3 within $4"
    echo "ok: $2 = $got (expected $3)"
}

# info: text and JSON
"$exe" info "$model" > "$tmp/info.txt"
grep -q "architecture: llama (LlamaForCausalLM)" "$tmp/info.txt" || fail "info text: $(cat "$tmp/info.txt")"
grep -q "parameters:   260032" "$tmp/info.txt" || fail "info parameter count"
"$exe" info --json "$model" > "$tmp/info.json"
grep -q '"num_params": 260032' "$tmp/info.json" || fail "info --json: $(cat "$tmp/info.json")"
grep -q '"weights_ok": true' "$tmp/info.json" || fail "info --json weights_ok"
grep -q '"F32": {"tensors": 47, "bytes": 1040128}' "$tmp/info.json" || fail "info --json dtypes"
[ "$(wc -l < "$tmp/info.json")" -ge 1 ] || fail "info --json empty"

# eval: the greedy ids as an {"input_ids"} row; reference/loss.json says 0.4734176614490911
printf '{"input_ids": %s}\n' "$(cat "$model/reference/greedy_200_ids.json")" > "$tmp/greedy.jsonl"
"$exe" eval --json --model "$model" --data "$tmp/greedy.jsonl" > "$tmp/eval.json"
[ "$(wc -l < "$tmp/eval.json")" -eq 1 ] || fail "eval --json prints more than one line"
check_num "$tmp/eval.json" loss 0.4734176614490911 1e-5
grep -q '"tokens": 200, "rows": \[{"loss": ' "$tmp/eval.json" || fail "eval --json shape: $(cat "$tmp/eval.json")"

# eval: story.txt as a {"text"} row (BOS added by the tokenizer): 0.925986813586426
story=$(sed 's/\\/\\\\/g; s/"/\\"/g' "$model/reference/story.txt")
printf '{"text": "%s"}\n' "$story" > "$tmp/story.jsonl"
"$exe" eval --json --model "$model" --data "$tmp/story.jsonl" > "$tmp/story.json"
check_num "$tmp/story.json" loss 0.925986813586426 1e-5
grep -q '"tokens": 102' "$tmp/story.json" || fail "story tokens: $(cat "$tmp/story.json")"

# a bad row: exit 1 and a message naming the line
printf '{"input_ids": [1, 2]}\n{"input_ids": [1, 512]}\n' > "$tmp/bad.jsonl"
if "$exe" eval --model "$model" --data "$tmp/bad.jsonl" > /dev/null 2> "$tmp/err.txt"; then
    fail "eval accepted an out-of-vocabulary id"
fi
grep -q 'line 2: "input_ids"\[1\] = 512 is out of range \[0, 512)' "$tmp/err.txt" || fail "error: $(cat "$tmp/err.txt")"
# usage errors exit 2
set +e
"$exe" eval --model "$model" > /dev/null 2>&1
[ $? -eq 2 ] || fail "eval without --data should exit 2"
set -e
echo "cli: all checks passed"
