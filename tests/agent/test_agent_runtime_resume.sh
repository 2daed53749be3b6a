#!/usr/bin/env bash
# examples/agent_runtime --out: the run directory of the run layer
# (include/posttrain/run.h).  An uninterrupted run A against a run B stopped
# three times (--stop-after, as if killed: in SFT past the data's epoch
# wrap, just after the SFT/GRPO boundary, and inside GRPO after iterations
# with non-zero gradients, so the Adam moments matter) and continued each
# time with --resume auto: B's final checkpoint must equal A's file for
# file, bit for bit (weights, optimizer, run state), and B's metrics rows
# must be A's (apart from "time" and "step_seconds"), each step once.  Also:
# a finished run resumed does nothing, retention keeps the last 2, a second
# run on a held directory fails with PT_EBUSY, a new run on an old directory
# with PT_EEXIST, a resume with other options is refused, and the run
# options need --out.
set -uo pipefail
exe=$1
work=$(mktemp -d /tmp/pt_agent_rs.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

# 200 SFT steps x batch 16 = 3200 > 2000 traces: the data wraps into a
# second epoch at step 125; GRPO steps 201..208 (after 200 SFT steps most
# have a non-zero gradient, in the release and the ASan build: checked
# below).  Checkpoints every 4 steps: ..., 120, 124, ..., 200 (the
# boundary), 204, 208 (the last).
# The program's own held-out check is not this test's (it is the demo
# test's): with 8 held-out problems one problem is 12.5 points, more than
# the default allowed drop of 10, and the ASan build on a Zen 5 lost one
# (37.5% -> 25%, greedy) where the release build and a Sapphire Rapids did
# not, so it is off here (--max-drop 1).
cfg=(--seed 1 --sft-steps 200 --batch 16 --sft-lr 1e-2 --hidden 32 --layers 2 --slip 0 --habit 0
     --steps 8 --prompts 2 --group 8 --eval 8 --max-drop 1 --threads 1 --quiet --save-every 4
     --keep-last 2)
start=$(date +%s)
"$exe" "${cfg[@]}" --out "$work/A" >"$work/a.txt" 2>&1 || { cat "$work/a.txt"; bad "run A failed"; }
# rows without their timing fields
strip() { sed -E 's/, *"(time|step_seconds)": *[^,}]*//g' "$1"; }
steps=$(strip "$work/A/metrics.jsonl" | sed -E 's/^\{"step":([0-9]+),"phase":"([a-z]+)".*/\1\2/' | tr '\n' ' ')
want="0eval $(for s in $(seq 1 200); do printf '%dsft ' "$s"; done)200eval $(for s in $(seq 201 208); do printf '%dgrpo ' "$s"; done)208eval "
[ "$steps" = "$want" ] && ok "run A: one row per step and evaluation (0 eval, 1..200 sft, 200 eval, 201..208 grpo, 208 eval)" ||
    { echo "$steps"; bad "run A's rows"; }
nonzero=$(grep '"phase":"grpo"' "$work/A/metrics.jsonl" | grep -vc '"grad_norm":0[,}]')
[ "$nonzero" -ge 3 ] && ok "GRPO iterations with a non-zero gradient: $nonzero of 8" || bad "GRPO never updated ($nonzero)"
[ "$(ls "$work/A/checkpoints")" = "$(printf 'step-00000204\nstep-00000208')" ] && ok "--keep-last 2 keeps steps 204 and 208" ||
    { ls "$work/A/checkpoints"; bad "retention"; }

# B: stopped after 123 (resumes from 120, SFT, across the epoch wrap),
# after 202 (from 200, the boundary) and after 206 (from 204, in GRPO).
"$exe" "${cfg[@]}" --out "$work/B" --stop-after 123 >"$work/b0.txt" 2>&1 && grep -q "stopped after step 123" "$work/b0.txt" ||
    { cat "$work/b0.txt"; bad "run B to 123"; }
i=1
for stop in 202 206 0; do
    extra=(--stop-after "$stop")
    [ "$stop" = 0 ] && extra=()
    "$exe" "${cfg[@]}" --out "$work/B" --resume auto "${extra[@]}" >"$work/b$i.txt" 2>&1 || { cat "$work/b$i.txt"; bad "resume $i"; }
    i=$((i + 1))
done
grep -q "resuming from .*step-00000120 (step 120, phase sft)" "$work/b1.txt" &&
    grep -q "resuming from .*step-00000200 (step 200, phase grpo)" "$work/b2.txt" &&
    grep -q "resuming from .*step-00000204 (step 204, phase grpo)" "$work/b3.txt" &&
    grep -q "^agent_runtime: passed" "$work/b3.txt" && ok "run B resumed from 120 (sft), 200 (grpo), 204 (grpo) and passed" ||
    { cat "$work"/b?.txt; bad "run B's resumes"; }
same=1
for f in "$work"/A/checkpoints/step-00000208/*; do
    cmp -s "$f" "$work/B/checkpoints/step-00000208/${f##*/}" || { echo "differs: ${f##*/}"; same=0; }
done
[ "$same" = 1 ] && [ -s "$work/A/checkpoints/step-00000208/model.safetensors" ] &&
    ok "B's final checkpoint equals A's bit for bit ($(ls "$work/A/checkpoints/step-00000208" | tr '\n' ' '))" ||
    bad "B's final checkpoint differs from A's"
if [ "$(strip "$work/A/metrics.jsonl")" = "$(strip "$work/B/metrics.jsonl")" ]; then
    ok "B's metrics rows are A's ($(wc -l <"$work/B/metrics.jsonl") rows, each step once)"
else
    diff <(strip "$work/A/metrics.jsonl") <(strip "$work/B/metrics.jsonl") | head; bad "B's metrics rows differ"
fi
grep -q '"time": *[0-9]' "$work/B/metrics.jsonl" && ok 'rows carry "time"' || bad 'no "time"'
# The final summaries agree too (counters and evaluations restored).
summ() { grep -E '^\[(check|grpo)\] ' "$1" | sed -E 's/ in [0-9.]+ s//'; }
[ "$(summ "$work/a.txt")" = "$(summ "$work/b3.txt")" ] && ok "B's final checks print A's" ||
    { diff <(summ "$work/a.txt") <(summ "$work/b3.txt"); bad "final checks differ"; }

# A finished run resumed: nothing redone, rows and checkpoints unchanged.
cp "$work/A/metrics.jsonl" "$work/a_rows"
"$exe" "${cfg[@]}" --out "$work/A" --resume auto >"$work/a2.txt" 2>&1 && grep -q "phase done" "$work/a2.txt" &&
    grep -q "^agent_runtime: passed" "$work/a2.txt" && cmp -s "$work/A/metrics.jsonl" "$work/a_rows" &&
    [ "$(ls "$work/A/checkpoints" | wc -l)" = 2 ] && ok "a finished run resumed: nothing redone" ||
    { cat "$work/a2.txt"; bad "finished run resumed"; }
# A second run on a directory another holds (flock(1) holds the lock).
flock "$work/A/.posttrain.lock" "$exe" "${cfg[@]}" --out "$work/A" --resume auto >"$work/busy.txt" 2>&1
[ $? -ne 0 ] && grep -q "PT_EBUSY" "$work/busy.txt" && ok "a held directory: PT_EBUSY" || { cat "$work/busy.txt"; bad "PT_EBUSY"; }
"$exe" "${cfg[@]}" --out "$work/A" >"$work/exist.txt" 2>&1
[ $? -ne 0 ] && grep -q "PT_EEXIST" "$work/exist.txt" && ok "a new run on an old directory: PT_EEXIST" ||
    { cat "$work/exist.txt"; bad "PT_EEXIST"; }
"$exe" "${cfg[@]}" --grpo-lr 1e-3 --out "$work/A" --resume auto >"$work/other.txt" 2>&1
[ $? -ne 0 ] && grep -q "saved by a run with other options" "$work/other.txt" && ok "a resume with other options: refused" ||
    { cat "$work/other.txt"; bad "other options"; }
"$exe" --resume auto >/dev/null 2>"$work/noout.txt"
[ $? -eq 2 ] && grep -q -- "need --out" "$work/noout.txt" && ok "--resume without --out: usage error" || bad "--resume without --out"
echo "took $(( $(date +%s) - start )) s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
