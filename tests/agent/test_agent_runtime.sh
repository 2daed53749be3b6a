#!/usr/bin/env bash
# examples/agent_runtime with small arguments (seconds, also under ASan): it
# must exit 0 (no token the model did not sample in any loss mask, held-out
# accuracy not worse after GRPO), print every phase, check every SFT trace
# and every episode it plays, turn per-turn rewards into segment rewards,
# keep its training data independent of the evaluation size, and refuse
# bad options.  The learning itself (400 SFT steps and 120 GRPO iterations,
# 30 s to 2 minutes) is too slow for a unit test: bench/agent_seeds.sh
# measures it and docs/agents.md gives the figures.
set -uo pipefail
exe=$1
work=$(mktemp -d /tmp/pt_agent_rt.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

small=(--seed 1 --sft-steps 40 --steps 2 --prompts 2 --group 4 --threads 1)
start=$(date +%s)
"$exe" "${small[@]}" --eval 8 >"$work/out.txt" 2>"$work/err.txt"
rc=$?
echo "agent_runtime took $(( $(date +%s) - start )) s"
cat "$work/out.txt"
[ "$rc" -eq 0 ] && ok "agent_runtime exits 0" || { cat "$work/err.txt"; bad "agent_runtime exit status $rc"; }
# 40 steps x batch 16 = 640 SFT traces; 3 evaluations x (greedy + sampled) x 8 + 2 x 2 x 4 episodes = 64
for pat in '^\[eval\] before  *held-out \(8\): greedy .* sampled at T=1 ' '^\[sft\]  40 steps on 640 teacher traces' \
           '^\[grpo\] iter   2/2 .* segments 1[0-6] ' '^\[grpo\] 2 iterations of 2 prompts x 4 episodes \(per-turn rewards\)' \
           '^\[eval\] after GRPO ' \
           '^\[check\] SFT traces checked 640, episodes played and checked 64 \([1-9][0-9]* also .*\), tokens in a loss mask the model did not sample: 0$' \
           '^\[check\] held-out accuracy .*: ok$' '^agent_runtime: passed'; do
    grep -Eq "$pat" "$work/out.txt" && ok "output has /$pat/" || bad "output lacks /$pat/"
done
# The evaluation problems come from their own stream: another --eval leaves
# the training (the SFT loss, the GRPO iterations) exactly as it was.
"$exe" "${small[@]}" --eval 24 >"$work/out24.txt" 2>&1
train_lines() { grep -E '^\[(sft|grpo)\] (step|iter|[0-9]+ steps)' "$1" | sed -E 's/ *(gen|train|[0-9]+ trained) [0-9]+ tok.*//; s/ in [0-9.]+ s//'; }
if [ -n "$(train_lines "$work/out.txt")" ] && [ "$(train_lines "$work/out.txt")" = "$(train_lines "$work/out24.txt")" ] &&
   grep -q 'held-out (24)' "$work/out24.txt"; then
    ok "--eval 24 trains exactly as --eval 8 (separate problem streams)"
else
    diff <(train_lines "$work/out.txt") <(train_lines "$work/out24.txt"); bad "--eval changed the training"
fi
"$exe" "${small[@]}" --eval 8 --credit episode >"$work/ep.txt" 2>&1
[ $? -eq 0 ] && grep -q '^\[grpo\] iter   2/2 .* segments 0 ' "$work/ep.txt" &&
    grep -q '(per-episode rewards)' "$work/ep.txt" &&
    ok "--credit episode: one reward per episode, no segment rewards" || { cat "$work/ep.txt"; bad "--credit episode"; }
"$exe" --seed 1 --sft-steps 0 --steps 0 --eval 32 --quiet >"$work/none.txt" 2>&1
[ $? -eq 0 ] && grep -q "episodes played and checked 192 .*did not sample: 0$" "$work/none.txt" &&
    ok "untrained model: random episodes still never put an unsampled token in the mask" ||
    { cat "$work/none.txt"; bad "untrained run"; }
# --out: the run layer (include/posttrain/run.h; test_agent_runtime_resume.sh
# checks it in depth).  Steps are numbered through both phases (SFT 1-200,
# GRPO 201-206).  A run stopped after step 203 and resumed with --resume
# auto continues from the checkpoint of step 200 (the SFT/GRPO boundary: SFT
# is not redone): the same iterations 4-6 as an uninterrupted run,
# byte-identical weights (which GRPO changed), GRPO rows 201-206 once.
runargs=(--seed 1 --sft-steps 200 --prompts 2 --group 4 --threads 1 --eval 8 --save-every 100 --steps 6)
"$exe" "${runargs[@]}" --out "$work/r1" >"$work/r1.txt" 2>&1 &&
"$exe" "${runargs[@]}" --out "$work/r2" --stop-after 203 >"$work/r2a.txt" 2>&1 &&
"$exe" "${runargs[@]}" --out "$work/r2" --resume auto >"$work/r2b.txt" 2>&1
rc=$?
iters() { grep -E '^\[grpo\] iter' "$1" | sed -E 's/ *gen [0-9]+ tok.*//'; }
if [ "$rc" -eq 0 ] && grep -q "resuming from $work/r2/checkpoints/step-00000200 (step 200, phase grpo)" "$work/r2b.txt" &&
   ! grep -q '^\[sft\]' "$work/r2b.txt" &&
   [ "$(iters "$work/r1.txt" | tail -n 3)" = "$(iters "$work/r2b.txt" | tail -n 3)" ] &&
   cmp -s "$work/r1/checkpoints/step-00000206/model.safetensors" "$work/r2/checkpoints/step-00000206/model.safetensors" &&
   ! cmp -s "$work/r1/checkpoints/step-00000200/model.safetensors" "$work/r1/checkpoints/step-00000206/model.safetensors" &&
   [ "$(grep -o '"step":2[0-9][0-9],"phase":"grpo"' "$work/r2/metrics.jsonl" | grep -o '2[0-9][0-9]' | tr '\n' ' ')" = "201 202 203 204 205 206 " ]; then
    ok "--out: a resume continues GRPO at the checkpoint: the same iterations, byte-identical weights, rows 201-206 once"
else
    cat "$work/r2b.txt"; bad "--out resume"
fi
"$exe" --steps many >/dev/null 2>"$work/bad.txt"
[ $? -eq 2 ] && grep -q -- "--steps needs an integer" "$work/bad.txt" && ok "bad value: usage error" || bad "bad value"
"$exe" --credit both >/dev/null 2>"$work/bad3.txt"
[ $? -eq 2 ] && grep -q -- "--credit needs 'turn' or 'episode', not 'both'" "$work/bad3.txt" && ok "bad --credit: usage error" ||
    bad "bad --credit"
"$exe" --frobnicate 1 >/dev/null 2>"$work/bad2.txt"
[ $? -eq 2 ] && grep -q "unknown option '--frobnicate'" "$work/bad2.txt" && ok "unknown option: usage error" ||
    bad "unknown option"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
