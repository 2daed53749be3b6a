#!/usr/bin/env bash
# GGUF files on the command line: `posttrain info FILE.gguf` describes one
# (format, tensor types), `posttrain sft --model FILE.gguf` trains from one
# and saves a Hugging Face directory that loads again.  The files are made by
# make_gguf.py as llama.cpp's converter lays them out, from
# tests/reference/llama_tied_gqa and (when ../shared/data is present) the
# real stories260K with its tokenizer in tokenizer.ggml.*.
set -euo pipefail
posttrain=$1 ref=$2 shared=$3
here=$(dirname "$0")
work=$(mktemp -d /tmp/pt_cli_gguf.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

python3 "$here/make_gguf.py" "$ref" "$work/tiny.gguf"
if "$posttrain" info "$work/tiny.gguf" >"$work/info.txt" 2>&1 &&
   grep -q '^format:       GGUF v3, F32/F16/BF16' "$work/info.txt" &&
   grep -q 'attention:    4 heads, 2 kv heads, head_dim 8' "$work/info.txt" &&
   grep -q 'on disk:      1 file, 20 tensors, .*F32 x 20' "$work/info.txt" &&
   "$posttrain" info --json "$work/tiny.gguf" | grep -q '"format": "gguf", "gguf_version": 3, "quantised": false'; then
    ok "info describes the GGUF file"
else
    cat "$work/info.txt"; bad "info FILE.gguf"
fi

echo '{"input_ids": [1, 5, 9, 33, 17, 2, 40, 7, 7, 12]}' > "$work/ids.jsonl"
if "$posttrain" --threads 2 sft --model "$work/tiny.gguf" --data "$work/ids.jsonl" --out "$work/sft" \
       --steps 1 --batch-size 1 2>"$work/sft.log" &&
   grep -q 'step 1/1 loss' "$work/sft.log" &&
   "$posttrain" info "$work/sft" >/dev/null 2>&1; then
    ok "sft trains one step from a GGUF file and saves a loadable directory"
else
    cat "$work/sft.log"; bad "sft --model FILE.gguf"
fi

stories=$shared/models/stories260K
if [ -d "$stories" ]; then
    python3 "$here/make_gguf.py" "$stories" "$work/stories.gguf"
    echo '{"text": "Once upon a time there was a little cat."}' > "$work/text.jsonl"
    if "$posttrain" --threads 2 sft --model "$work/stories.gguf" --data "$work/text.jsonl" \
           --out "$work/sft2" --steps 1 --batch-size 1 2>"$work/sft2.log" &&
       grep -q 'step 1/1 loss' "$work/sft2.log" &&
       [ -f "$work/sft2/tokenizer.json" ] && grep -q '"bos_token": "<s>"' "$work/sft2/tokenizer_config.json" &&
       printf '%s\n' '{"text": "Once upon a time, Lily saw 3 dogs."}' '{"text": " caf\u00e9 \ud83e\udd99\n"}' \
           > "$work/texts.jsonl" &&
       "$posttrain" tokenize --tokenizer "$work/sft2" --add-special-tokens --jsonl \
           <"$work/texts.jsonl" >"$work/tok1.txt" &&
       "$posttrain" tokenize --tokenizer "$stories" --add-special-tokens --jsonl \
           <"$work/texts.jsonl" >"$work/tok2.txt" &&
       [ "$(wc -l <"$work/tok1.txt")" -eq 2 ] && cmp -s "$work/tok1.txt" "$work/tok2.txt"; then
        ok "sft on text rows from stories260K.gguf; the saved tokenizer encodes as the original"
    else
        cat "$work/sft2.log" "$work/tok1.txt" "$work/tok2.txt" 2>/dev/null; bad "sft of stories260K.gguf"
    fi
else
    echo "SKIP stories260K GGUF: shared data not found at $shared"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
