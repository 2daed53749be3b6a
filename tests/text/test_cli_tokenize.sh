#!/bin/sh
# posttrain tokenize on a few lines with the committed tiny tokenizers:
# ids in order, decode with and without special tokens, a bad line named by
# its number (exit 1), and a model directory as PATH.
# Usage: test_cli_tokenize.sh POSTTRAIN DATADIR
set -u
exe=$1
data=$2
tmp=${TMPDIR:-/tmp}/pt_cli_tok.$$
mkdir -p "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # name expected actual
    if [ "$2" != "$3" ]; then
        printf 'FAIL %s\n  expected: %s\n  got:      %s\n' "$1" "$2" "$3"
        fail=1
    else
        printf 'ok   %s\n' "$1"
    fi
}

# encode: three lines in order, one with an escaped special token and a \u escape
out=$(printf '%s\n' '{"text": "the thing"}' '{"id": 7, "text": "a<|endoftext|>b<tool> the"}' \
    '{"text": "\u20ac"}' | "$exe" tokenize --tokenizer "$data/tiny_bytelevel.json" --jsonl)
check "encode" '{"ids": [116, 257, 256, 104, 262]}
{"ids": [97, 263, 98, 264, 258]}
{"ids": [226, 130, 172]}' "$out"

# the post-processor adds <s> with --add-special-tokens (SentencePiece style)
out=$(printf '%s\n' '{"text": "hello w\u00e9"}' | "$exe" tokenize --tokenizer "$data/tiny_spm.json" \
    --add-special-tokens --jsonl)
check "encode special" '{"ids": [1, 268, 270, 198, 172]}' "$out"

# decode keeps special tokens unless --skip-special-tokens
out=$(printf '%s\n' '{"ids": [1, 268, 270, 198, 172]}' '{"ids": []}' | "$exe" tokenize --tokenizer "$data/tiny_spm.json" \
    --decode --jsonl)
check "decode" '{"text": "<s> hello wé"}
{"text": ""}' "$out"
out=$(printf '%s\n' '{"ids": [1, 268, 270, 198, 172]}' | "$exe" tokenize --tokenizer "$data/tiny_spm.json" \
    --decode --skip-special-tokens --jsonl)
check "decode skip" '{"text": "hello wé"}' "$out"
out=$(printf '%s\n' '{"ids": [97, 10, 98]}' | "$exe" tokenize --tokenizer "$data/tiny_bytelevel.json" --decode --jsonl)
check "decode escapes" '{"text": "a\nb"}' "$out"

# a model directory as PATH
mkdir -p "$tmp/model" && cp "$data/tiny_spm.json" "$tmp/model/tokenizer.json"
out=$(printf '%s\n' '{"text": "hello"}' | "$exe" tokenize --tokenizer "$tmp/model" --jsonl)
check "directory" '{"ids": [268]}' "$out"

# a bad line: the good line before it is written, the error names line 2, exit 1
printf '%s\n' '{"text": "the"}' '{"txt": "x"}' '{"text": "the"}' | \
    "$exe" tokenize --tokenizer "$data/tiny_bytelevel.json" --jsonl >"$tmp/out" 2>"$tmp/err"
rc=$?
check "bad line exit" 1 "$rc"
check "bad line output" '{"ids": [116, 257]}' "$(cat "$tmp/out")"
if grep -q "line 2" "$tmp/err"; then echo "ok   bad line message"; else echo "FAIL bad line message: $(cat "$tmp/err")"; fail=1; fi
printf '%s\n' '{"ids": [1, 99999]}' | "$exe" tokenize --tokenizer "$data/tiny_spm.json" --decode --jsonl \
    >/dev/null 2>"$tmp/err"
check "bad id exit" 1 "$?"
if grep -q "line 1.*99999" "$tmp/err"; then echo "ok   bad id message"; else echo "FAIL bad id message: $(cat "$tmp/err")"; fail=1; fi
printf '%s\n' '{"text": 3}' | "$exe" tokenize --tokenizer "$data/tiny_spm.json" --jsonl >/dev/null 2>&1
check "text not a string" 1 "$?"
"$exe" tokenize --tokenizer "$tmp/missing.json" --jsonl </dev/null >/dev/null 2>&1
check "missing tokenizer" 1 "$?"
exit $fail
