#!/usr/bin/env bash
# posttrain plot: a metrics file as an SVG (one polyline per series present,
# exit codes of a missing file, a bad row and no series, the output left as it
# was), and the last line of posttrain sft naming OUT/metrics.svg
# (tests/reference/llama_tied_gqa).
set -euo pipefail
posttrain=$1 model=$2
work=$(mktemp -d /tmp/pt_cli_plot.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

printf '%s\n' '{"step": 1, "loss": 3.0, "lr": 0.001}' '{"step": 2, "loss": 2.5, "lr": 0.001}' \
    '{"step": 3, "loss": null, "lr": 0.001}' '{"step": 4, "loss": 1.5, "lr": 0.001}' > "$work/m.jsonl"
if "$posttrain" plot "$work/m.jsonl" --out "$work/m.svg" --width 400 --height 300 --title 'a & b' \
       2>"$work/plot.log" &&
   grep -q 'posttrain plot: wrote .*/m.svg' "$work/plot.log" &&
   grep -q '<svg xmlns="http://www.w3.org/2000/svg"' "$work/m.svg" &&
   grep -q 'width="400" height="300"' "$work/m.svg" &&
   grep -q '>a &amp; b</text>' "$work/m.svg" &&
   [ "$(grep -c '<polyline' "$work/m.svg")" -eq 2 ] &&
   [ "$(grep -A20 'id="loss"' "$work/m.svg" | grep -m1 '<polyline' | grep -o '[0-9.]*,[0-9.]*' | wc -l)" -eq 3 ] &&
   ! grep -qi 'nan\|inf' "$work/m.svg"; then
    ok "plot draws loss (3 points) and lr"
else
    cat "$work/plot.log"; bad "plot of a small metrics file"
fi

echo keep > "$work/keep.svg"
expect() { # exit code, message, args...
    local code=$1 msg=$2 rc=0
    shift 2
    "$posttrain" plot "$@" --out "$work/keep.svg" 2>"$work/err.log" || rc=$?
    if [ "$rc" -eq "$code" ] && grep -q -- "$msg" "$work/err.log" && [ "$(cat "$work/keep.svg")" = keep ]; then
        ok "plot $* fails with $code ($msg), the output untouched"
    else
        cat "$work/err.log"; bad "plot $*: exit $rc, expected $code with '$msg'"
    fi
}
expect 1 PT_ENOTFOUND "$work/missing.jsonl"
printf '{"step": 1, "loss": 1}\n{"step": 2,\n' > "$work/bad.jsonl"
expect 1 'PT_EFORMAT: .*bad.jsonl line 2' "$work/bad.jsonl"
printf '{"step": 1, "tokens": 5}\n' > "$work/none.jsonl"
expect 1 "PT_EINVAL: no numeric series in $work/none.jsonl" "$work/none.jsonl"
expect 2 'expected one metrics file'
expect 2 'width' "$work/m.jsonl" --width 50

echo '{"input_ids": [1, 5, 9, 33, 17, 2, 40, 7, 7, 12]}' > "$work/one.jsonl"
if "$posttrain" --threads 2 sft --model "$model" --data "$work/one.jsonl" --out "$work/sft" --steps 3 \
       --batch-size 1 2>"$work/sft.log" &&
   [ "$(tail -n 1 "$work/sft.log")" = "posttrain sft: plot: $work/sft/metrics.svg" ] &&
   [ "$(grep -A20 'id="loss"' "$work/sft/metrics.svg" | grep -m1 '<polyline' | grep -o '[0-9.]*,[0-9.]*' | wc -l)" -eq 3 ] &&
   grep -q 'id="lr"' "$work/sft/metrics.svg"; then
    ok "sft ends with 'plot: OUT/metrics.svg' and the plot has its 3 steps"
else
    cat "$work/sft.log"; bad "sft's plot"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
