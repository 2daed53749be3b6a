#!/usr/bin/env bash
# examples/agent_runtime with small arguments (seconds, also under ASan): it
# must exit 0 (no tool-output token in any loss mask, held-out accuracy not
# worse after training), print every phase, and refuse bad options.  The
# learning itself (default arguments: ~50% held-out accuracy after SFT) is
# too slow for a unit test; docs/agents.md gives the measured figures.
set -uo pipefail
exe=$1
work=$(mktemp -d /tmp/pt_agent_rt.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

start=$(date +%s)
"$exe" --seed 1 --sft-steps 40 --steps 2 --prompts 2 --group 4 --eval 8 >"$work/out.txt" 2>"$work/err.txt"
rc=$?
echo "agent_runtime took $(( $(date +%s) - start )) s"
cat "$work/out.txt"
[ "$rc" -eq 0 ] && ok "agent_runtime exits 0" || { cat "$work/err.txt"; bad "agent_runtime exit status $rc"; }
for pat in '^\[eval\] before ' '^\[sft\]  40 steps' '^\[grpo\] iter   2/2 ' '^\[eval\] after GRPO ' \
           '^\[check\] episodes checked [1-9][0-9]*, tool-output tokens in a loss mask: 0$' \
           '^\[check\] held-out accuracy .*: ok$' '^agent_runtime: passed'; do
    grep -q "$pat" "$work/out.txt" && ok "output has /$pat/" || bad "output lacks /$pat/"
done
"$exe" --seed 1 --sft-steps 0 --steps 0 --eval 4 --quiet >"$work/none.txt" 2>&1
[ $? -eq 0 ] && grep -q "tool-output tokens in a loss mask: 0" "$work/none.txt" &&
    ok "untrained model: random episodes still never put tool output in the mask" || bad "untrained run"
"$exe" --steps many >/dev/null 2>"$work/bad.txt"
[ $? -eq 2 ] && grep -q -- "--steps needs an integer" "$work/bad.txt" && ok "bad value: usage error" || bad "bad value"
"$exe" --frobnicate 1 >/dev/null 2>"$work/bad2.txt"
[ $? -eq 2 ] && grep -q "unknown option '--frobnicate'" "$work/bad2.txt" && ok "unknown option: usage error" ||
    bad "unknown option"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
