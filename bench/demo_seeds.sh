#!/usr/bin/env bash
# The claim of `make demo`, measured: `posttrain demo --seed S` for several
# seeds, one after another, and a table of held-out accuracy before
# training, after SFT and after GRPO (greedy, from the demo's last line, and
# sampled), each run's wall time and the load average before it.  Exits 1
# when the mean GRPO gain over SFT (greedy) is below 15 points, a seed ends
# below its SFT level, or a run takes 180 s or more.
# Usage: bench/demo_seeds.sh [-b BUILD] [-t THREADS] [-s "1 2 3 4 5"] [-- DEMO OPTIONS...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build threads=1 seeds="1 2 3 4 5"
while getopts "b:t:s:" opt; do
    case $opt in
    b) build=$OPTARG ;;
    t) threads=$OPTARG ;;
    s) seeds=$OPTARG ;;
    *) sed -n '2,8p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
exe=$build/cli/posttrain
[ -x "$exe" ] || { echo "no $exe: build first (make build)" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "posttrain demo --threads $threads${*:+ $*}; commit $(git describe --always --dirty 2>/dev/null || echo '?');" \
    "$(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| seed | before | after SFT | after GRPO | gain | sampled after SFT | sampled after GRPO | time | load before |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
n=0 gains="" worst=1000 slowest=0 fail=0
# The greedy and sampled accuracies of the demo's line for one phase.
acc() { grep "^  $1" "$log" | sed -E 's/.*held-out greedy ([0-9.]+)%.*sampled at T=[0-9.]+ ([0-9.]+)%.*/\1 \2/'; }
for s in $seeds; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    if ! "$exe" demo --threads "$threads" --seed "$s" "$@" >"$log" 2>&1; then
        echo "seed $s: the demo failed:" >&2
        cat "$log" >&2
        exit 1
    fi
    t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    grep -qE '^held-out accuracy: before [0-9]+% \| after SFT [0-9]+% \| after GRPO [0-9]+%$' "$log" ||
        { echo "seed $s: no final line" >&2; cat "$log" >&2; exit 1; }
    read -r g0 _ < <(acc "before training")
    read -r g1 s1 < <(acc "after SFT")
    read -r g2 s2 < <(acc "after GRPO")
    gain=$(awk -v a="$g1" -v b="$g2" 'BEGIN { printf "%+.1f", b - a }')
    printf '| %s | %s%% | %s%% | %s%% | %s | %s%% | %s%% | %s s | %s |\n' "$s" "$g0" "$g1" "$g2" "$gain" "$s1" "$s2" \
        "$t" "$load"
    n=$((n + 1))
    gains="$gains $gain"
    awk -v g="$gain" 'BEGIN { exit !(g < 0) }' && fail=1
    [ "$t" -gt "$slowest" ] && slowest=$t
done
read -r mean worst < <(echo "$gains" | awk '{ m = 1e9; for (i = 1; i <= NF; i++) { s += $i; if ($i < m) m = $i }
                                             printf "%.1f %+.1f\n", s / NF, m }')
echo
echo "mean gain of GRPO over SFT (greedy): $mean points, worst seed $worst; slowest run $slowest s;" \
    "load now $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v m="$mean" 'BEGIN { exit !(m < 15) }' && fail=1
[ "$slowest" -ge 180 ] && fail=1
if [ "$fail" -eq 0 ]; then
    echo "claim holds: mean gain >= 15 points, no seed below its SFT level, every run under 180 s"
else
    echo "claim FAILS: mean gain >= 15 points, no seed below its SFT level, every run under 180 s"
fi
exit "$fail"
