#!/usr/bin/env bash
# The table of docs/agents.md, measured: examples/agent_runtime --seed S for
# several seeds (defaults: SFT on the imperfect teacher's traces, then GRPO
# with per-turn rewards), and a table of held-out accuracy (400 problems)
# before training, after SFT and after GRPO, greedy and sampled at T=1,
# each run's wall time and the load average before it, then the means.
# Exits 1 when a run fails, or when GRPO does not beat SFT (greedy) on at
# all seeds but one, and by +15 points on average.
# Usage: bench/agent_seeds.sh [-b BUILD] [-t THREADS] [-j JOBS] [-s "1 2 3 4 5"] [-k DIR] [-- AGENT_RUNTIME OPTIONS...]
#   -j runs that many seeds at once (each with -t threads); -k keeps each
#   seed's output in DIR/seed-S.log.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build threads=1 jobs=1 seeds="1 2 3 4 5" keep=""
while getopts "b:t:j:s:k:" opt; do
    case $opt in
    b) build=$OPTARG ;;
    t) threads=$OPTARG ;;
    j) jobs=$OPTARG ;;
    s) seeds=$OPTARG ;;
    k) keep=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
exe=$build/examples/agent_runtime
[ -x "$exe" ] || { echo "no $exe: build first (meson setup $build && ninja -C $build)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "agent_runtime --threads $threads $*; commit $(git describe --always --dirty 2>/dev/null || echo '?');" \
    "$(nproc) CPUs, $jobs run(s) at once; $(date -u '+%Y-%m-%d %H:%M UTC')"
run() {   # seed: runs it, writes $work/S.log, S.time, S.load
    local s=$1 t0
    shift
    cut -d' ' -f1 /proc/loadavg >"$work/$s.load"
    t0=$(date +%s.%N)
    "$exe" --threads "$threads" --seed "$s" --quiet "$@" >"$work/$s.log" 2>&1 || echo "failed" >"$work/$s.failed"
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }' >"$work/$s.time"
}
running=0
for s in $seeds; do
    run "$s" "$@" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    for s in $seeds; do cp "$work/$s.log" "$keep/seed-$s.log"; done
fi
echo
echo "| seed | before (greedy / sampled) | after SFT (greedy / sampled) | after GRPO (greedy / sampled) | gain greedy | gain sampled | time | load before |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
fail=0
for s in $seeds; do
    if [ -f "$work/$s.failed" ]; then
        echo "seed $s: agent_runtime failed:" >&2
        cat "$work/$s.log" >&2
        fail=1
        continue
    fi
    line=$(grep '^\[check\] held-out accuracy' "$work/$s.log")
    read -r g0 g1 g2 s0 s1 s2 < <(echo "$line" | sed -E \
        's/.*greedy ([0-9.]+)% -> ([0-9.]+)% \(SFT\) -> ([0-9.]+)% \(GRPO\), sampled ([0-9.]+)% -> ([0-9.]+)% -> ([0-9.]+)%.*/\1 \2 \3 \4 \5 \6/')
    awk -v s="$s" -v g0="$g0" -v s0="$s0" -v g1="$g1" -v s1="$s1" -v g2="$g2" -v s2="$s2" \
        -v t="$(cat "$work/$s.time")" -v l="$(cat "$work/$s.load")" \
        'BEGIN { printf "| %s | %s%% / %s%% | %s%% / %s%% | %s%% / %s%% | %+.1f | %+.1f | %s s | %s |\n",
                 s, g0, s0, g1, s1, g2, s2, g2 - g1, s2 - s1, t, l }'
    echo "$g0 $s0 $g1 $s1 $g2 $s2" >>"$work/all"
done
[ -f "$work/all" ] || exit 1
awk '{ for (i = 1; i <= 6; i++) m[i] += $i; if ($5 > $3) better++ }
     END { n = NR
           printf "| mean | %.1f%% / %.1f%% | %.1f%% / %.1f%% | %.1f%% / %.1f%% | %+.1f | %+.1f | | |\n",
                  m[1]/n, m[2]/n, m[3]/n, m[4]/n, m[5]/n, m[6]/n, (m[5]-m[3])/n, (m[6]-m[4])/n
           printf "\nGRPO above SFT (greedy) on %d of %d seeds; mean gain %+.1f points greedy, %+.1f sampled\n",
                  better, n, (m[5]-m[3])/n, (m[6]-m[4])/n
           if (better < n - 1 || (m[5]-m[3])/n < 15) exit 1 }' "$work/all" || fail=1
exit "$fail"
