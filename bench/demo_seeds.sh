#!/usr/bin/env bash
# The claim of `make demo`, measured: `posttrain demo` for several seeds, one
# after another, and a table of held-out accuracy before training, after SFT
# and after GRPO (greedy, and sampled), each run's wall time and the load
# average before it.  Exits 1 when the mean GRPO gain over SFT (greedy) is
# below 15 points, a seed ends below its SFT level, or a run takes 180 s or
# more.
# Usage: bench/demo_seeds.sh [-b BUILD] [-t THREADS] [-s "1 2 3 4 5"] [-- DEMO OPTIONS...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build threads=2 seeds="1 2 3 4 5"
while getopts "b:t:s:" opt; do
    case $opt in
    b) build=$OPTARG ;;
    t) threads=$OPTARG ;;
    s) seeds=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
exe=$build/cli/posttrain
[ -x "$exe" ] || { echo "no $exe: build first (make build)" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "posttrain --threads $threads demo $* ; $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| seed | before | after SFT | after GRPO | gain | sampled after SFT | sampled after GRPO | time | load before |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
n=0 sum_gain=0 worst=1000 slowest=0 fail=0
for s in $seeds; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    if ! "$exe" --threads "$threads" demo --seed "$s" "$@" >"$log" 2>&1; then
        echo "seed $s: the demo failed:" >&2
        cat "$log" >&2
        exit 1
    fi
    t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    line=$(grep '^held-out accuracy: ' "$log")
    read -r before sft grpo < <(echo "$line" | sed -E 's/.*before ([0-9]+)% \| after SFT ([0-9]+)% \| after GRPO ([0-9]+)%$/\1 \2 \3/')
    samp_sft=$(grep '  after SFT: ' "$log" | sed -E 's/.*sampled at T=[0-9.]+ ([0-9.]+)%.*/\1/')
    samp_grpo=$(grep '  after GRPO: ' "$log" | sed -E 's/.*sampled at T=[0-9.]+ ([0-9.]+)%.*/\1/')
    gain=$((grpo - sft))
    printf '| %s | %s%% | %s%% | %s%% | %+d | %s%% | %s%% | %.0f s | %s |\n' "$s" "$before" "$sft" "$grpo" "$gain" \
        "$samp_sft" "$samp_grpo" "$t" "$load"
    n=$((n + 1))
    sum_gain=$((sum_gain + gain))
    [ "$gain" -lt "$worst" ] && worst=$gain
    slow=$(printf '%.0f' "$t")
    [ "$slow" -gt "$slowest" ] && slowest=$slow
    [ "$gain" -lt 0 ] && fail=1
    [ "$slow" -ge 180 ] && fail=1
done
mean=$(awk -v s="$sum_gain" -v n="$n" 'BEGIN { printf "%.1f", s / n }')
echo
echo "mean gain of GRPO over SFT: $mean points (worst seed $worst); slowest run ${slowest} s; load now $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$sum_gain" -lt $((15 * n)) ] && fail=1
[ "$fail" -eq 0 ] && echo "claim holds: mean gain >= 15 points, no seed below its SFT level, every run under 180 s" ||
    echo "claim FAILS: mean gain >= 15 points, no seed below its SFT level, every run under 180 s"
exit "$fail"
