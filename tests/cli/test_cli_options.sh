#!/bin/sh
# posttrain's option tables and their one engine: generated --help for the
# program and every command, and the usage errors (exit 2, each naming the
# option): unknown option (also as the last argument), missing value, bad
# number, out of range, an enum name the library refuses (its message), a
# required option left out, a stray argument.  No model or file is read.
# Usage: test_cli_options.sh POSTTRAIN
set -u
exe=$1
tmp=${TMPDIR:-/tmp}/pt_cli_opts.$$
mkdir -p "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=1; echo "FAIL $1"; }

# expect CODE NEEDLE ARGS...: exit CODE and NEEDLE (fixed string) on stderr
expect() {
    code=$1 needle=$2
    shift 2
    "$exe" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq "$code" ] && grep -qF -- "$needle" "$tmp/err"; then
        ok "$* -> $code '$needle'"
    else
        bad "$* -> exit $rc: $(cat "$tmp/err")"
    fi
}
# help ARGS... NEEDLE...: ARGS print a help on stdout (exit 0) holding every NEEDLE
help() {
    args=$1
    shift
    # shellcheck disable=SC2086
    if ! "$exe" $args >"$tmp/help" 2>"$tmp/err"; then
        bad "$args: exit $?: $(cat "$tmp/err")"
        return
    fi
    for n in "$@"; do
        if ! grep -qF -- "$n" "$tmp/help"; then
            bad "$args: no '$n' in: $(cat "$tmp/help")"
            return
        fi
    done
    ok "$args lists $*"
}

help "--help" "usage: posttrain [--threads N] [--verbose] <command> [options]" "  version " "  demo " \
    "  info " "  eval " "  tokenize " "  sft " "  generate " "  grpo " "--threads N" "-v, --verbose"
help "-h" "commands:"
help "sft --help" "usage: posttrain sft --model DIR --data FILE.jsonl --out DIR [options]" "--lr F" \
    "(default 1e-4)" "--optimizer adamw|sgd" "--schedule constant|linear|cosine" "--lora-targets LIST" \
    "--grad-accum N" "(required)" "-h, --help"
help "grpo --help" "--reward NAME[:W],..." "(default 1e-6)" "--loss-type grpo|bnpo|dapo|dr_grpo" \
    "(default dapo)" "--scale-rewards group|batch|none|rloo" "--num-generations G" "--mask-truncated"
help "demo --help" "--digits N" "(default 800)" "--tied 0|1" "--seed N"
help "info -h" "usage: posttrain info [options] DIR" "--json" "--lora-rank R" "(default 16)"
help "eval --help" "--max-length N" "--no-special" "--adapter DIR"
help "tokenize --help" "--tokenizer PATH" "--decode" "--skip-special-tokens" "--jsonl"
help "generate --help" "--prompt-ids IDS" "--temperature T" "--num-samples G" "--logprobs" \
    "--kv-cache fp32|bf16"
help "version --help" "usage: posttrain version"
# --help wins wherever it stands, even after an error-free prefix
help "sft --lr 1 --help" "usage: posttrain sft"

base="--model m --data d --out o"
# unknown option, also as the last argument (not "needs a value")
expect 2 "unknown option '--frob'" sft $base --frob
expect 2 "unknown option '--frob'" grpo $base --reward exact --frob 1
expect 2 "unknown option '--frob'" demo --frob
expect 2 "unknown option '--frob'" eval --model m --data d --frob
expect 2 "unknown option '--frob'" tokenize --tokenizer t --frob
expect 2 "unknown option '--frob'" generate --model m --prompt hi --frob
expect 2 "unknown option '--frob'" info --frob d
expect 2 "unknown option '--frob'" --frob version
expect 2 "unknown option '--lr=1'" sft $base --lr=1
# a known option without its value
expect 2 "--steps needs a value" sft $base --steps
expect 2 "--tokenizer needs a value" tokenize --tokenizer
expect 2 "--threads needs a value" --threads
# bad numbers and ranges
expect 2 "--lr needs a number, not 'fast'" sft $base --lr fast
expect 2 "--lr needs a number, not 'inf'" sft $base --lr inf
expect 2 "--batch-size needs an integer in [1, 65536], not '0'" sft $base --batch-size 0
expect 2 "--batch-size needs an integer in [1, 65536], not '2x'" sft $base --batch-size 2x
expect 2 "--epsilon needs a number in [0, 0.999999], not '1'" grpo $base --reward exact --epsilon 1
expect 2 "--seed needs a non-negative integer, not '-1'" sft $base --seed -1
expect 2 "--seed needs an integer in [0, 1073741824], not '2000000000'" demo --seed 2000000000
expect 2 "--digits needs an integer in [1, 6], not '7'" demo --digits 7
expect 2 "--threads needs an integer in [1, 1024], not '0'" --threads 0 version
expect 2 "--context needs an integer in [1, 16777216], not '0'" info --context 0 d
# enum names through the library's pt_<enum>_from_name
expect 2 "--optimizer: unknown optimizer type 'adam' (one of: adamw, sgd)" sft $base --optimizer adam
expect 2 "--schedule: unknown schedule 'step' (one of: constant, linear, cosine)" grpo $base --reward exact \
    --schedule step
expect 2 "--loss-type: unknown loss type 'ppo' (one of: grpo, bnpo, dapo, dr_grpo, cispo, vespo)" grpo $base --reward exact \
    --loss-type ppo
expect 2 "--importance-sampling-correction: unknown importance sampling correction 'vllm' (one of: none, \
token_truncate, token_mask, sequence_truncate, sequence_mask)" grpo $base --reward exact \
    --importance-sampling-correction vllm
expect 2 "--kv-cache: unknown KV-cache type 'f16' (one of: fp32, bf16)" generate --model m --prompt hi \
    --kv-cache f16
# required options, paths, stray arguments
expect 2 "--model, --data and --out are required" sft
expect 2 "--data and --out are required" sft --model m
expect 2 "--reward is required" grpo $base
expect 2 "--tokenizer is required" tokenize --jsonl
expect 2 "--model needs a path, not ''" eval --model "" --data d
expect 2 "unexpected argument 'x'" eval --model m --data d x
expect 2 "unexpected argument 'b'" info a b
expect 2 "needs a model directory" info --json
expect 2 "unexpected argument 'x'" version x
# checks after the table
expect 2 "give --steps or --epochs, not both" sft $base --steps 2 --epochs 1
expect 2 "--lora-alpha and --lora-targets need --lora-rank" sft $base --lora-targets all
expect 2 "--lora-targets takes a comma-separated list" grpo $base --reward exact --lora-rank 2 --lora-targets qq
expect 2 "--hidden must be a multiple of 16, not 40" demo --hidden 40
expect 2 "--heads must divide --hidden" demo --hidden 48 --heads 5
expect 2 "unknown reward 'bleu'" grpo $base --reward exact --reward bleu
expect 2 "reward 'exact' is given twice" grpo $base --reward exact --reward exact
# the program: no command, an unknown one; -v and --version
expect 2 "usage: posttrain" 
expect 2 "unknown command 'frob'" frob
if "$exe" -v -v version >"$tmp/out" 2>&1 && grep -q "^posttrain " "$tmp/out"; then ok "-v -v version"; else bad "-v -v version"; fi
if "$exe" --version | grep -q "^posttrain "; then ok "--version"; else bad "--version"; fi
# the MPI line: the library's MPI_Get_library_version, or "not compiled in"
"$exe" version >"$tmp/ver" 2>&1
if grep -Eq '^mpi: (not compiled in \(one process|.*MPI.* \(data-parallel training under mpirun\)$)' "$tmp/ver" &&
   [ "$(grep -c '^mpi: ' "$tmp/ver")" = 1 ] && grep -q '^matrix products: ' "$tmp/ver" && grep -q '^cpu: ' "$tmp/ver"; then
    ok "version: $(grep '^mpi: ' "$tmp/ver")"
else
    cat "$tmp/ver"; bad "version: the mpi line"
fi
echo "$pass passed"
exit $fail
