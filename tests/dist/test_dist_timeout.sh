#!/usr/bin/env bash
# The collective deadline at NP ranks: test_dist_timeout.c's last rank is
# 4 s late at a barrier, the timeout is 1 s.  Every other rank reports
# PT_EPEER within 2.5 s naming the late rank; later calls fail at once; the
# whole job ends within a bound and leaves no process behind (mpirun.sh).
set -uo pipefail
here=$(dirname "$0")
prog=$1 np=$2
out=$(mktemp /tmp/pt_dist_timeout.XXXXXX)
trap 'rm -f "$out"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

start=$(date +%s.%N)
bash "$here/mpirun.sh" "$np" 60 "$prog" 4 > "$out" 2>&1
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$out"
late=$((np - 1))
[ "$rc" -ne 124 ] && [ "$rc" -ne 125 ] && ok "the job ended by itself (mpirun status $rc) with no process left" ||
    bad "mpirun.sh status $rc"
for ((r = 0; r < late; r++)); do
    line=$(grep "^rank $r: PT_EPEER after" "$out")
    secs=$(echo "$line" | sed -n 's/^rank [0-9]*: PT_EPEER after \([0-9.]*\) s: .*/\1/p')
    if [ -n "$secs" ] && [ "$(echo "$secs >= 0.9 && $secs <= 2.5" | bc)" = 1 ] &&
       echo "$line" | grep -q "rank $r: pt_dist_barrier at step -1 did not complete within 1 s; rank(s) $late did not arrive"; then
        ok "rank $r: PT_EPEER after $secs s naming rank $late"
    else
        bad "rank $r: expected PT_EPEER within 0.9-2.5 s naming rank $late: '$line'"
    fi
    if grep -q "^rank $r: then PT_EPEER after 0.00 s: pt_dist_allreduce_sum: the distributed job failed earlier: rank $r: pt_dist_barrier" "$out"; then
        ok "rank $r: the next call fails at once, repeating the first failure"
    else
        bad "rank $r: the next call"
    fi
done
if [ "$(echo "$elapsed < 30" | bc)" = 1 ]; then ok "the run took $elapsed s"; else bad "the run took $elapsed s"; fi
echo "passed $pass, failed $fail"
[ "$fail" -eq 0 ]
