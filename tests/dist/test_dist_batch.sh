#!/usr/bin/env bash
# examples/dist_batch.c (docs/distributed.md): each rank cuts its rows out
# of the global batch with pt_dist_shard; at 1, 2 and 3 ranks the rows
# cover the batch once and the loss of every step equals one process's
# (relative 1e-5).  Without MPI (or mpirun): one process only.
#   test_dist_batch.sh EXAMPLE MPIRUN_SH|-
set -u
exe=$1 mpirun_sh=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
"$exe" >"$work/np1.out" 2>&1 || { cat "$work/np1.out"; echo "FAIL: one process"; exit 1; }
grep -q '^rank 0 of 1: rows \[0, 5) of 5$' "$work/np1.out" || { cat "$work/np1.out"; echo "FAIL: rows at 1"; fail=1; }
[ "$(grep -c '^step ' "$work/np1.out")" = 4 ] || { cat "$work/np1.out"; echo "FAIL: 4 steps at 1"; fail=1; }
[ "$mpirun_sh" = - ] && exit $fail
for np in 2 3; do
    if ! bash "$mpirun_sh" "$np" 60 "$exe" >"$work/np$np.out" 2>&1; then
        cat "$work/np$np.out"; echo "FAIL: $np ranks"; fail=1; continue
    fi
    # the rows of the ranks, in rank order, are [0, 5) cut contiguously
    rows=$(grep '^rank ' "$work/np$np.out" | sort -k2,2n | sed 's/.*rows \[\([0-9]*\), \([0-9]*\)).*/\1 \2/' | tr '\n' ' ')
    want=$([ "$np" = 2 ] && echo "0 3 3 5 " || echo "0 2 2 4 4 5 ")
    [ "$rows" = "$want" ] && echo "ok: $np ranks cut rows $rows" || { cat "$work/np$np.out"; echo "FAIL: rows at $np: $rows"; fail=1; }
    if python3 - "$work/np1.out" "$work/np$np.out" <<'PY'
import re, sys
def losses(p):
    return [float(m.group(1)) for m in re.finditer(r"^step \d+: loss (\S+)", open(p).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("ok: losses of every step within %.2g of one process's" % worst)
sys.exit(0 if worst <= 1e-5 else 1)
PY
    then :; else cat "$work/np1.out" "$work/np$np.out"; echo "FAIL: losses at $np"; fail=1; fi
done
exit $fail
