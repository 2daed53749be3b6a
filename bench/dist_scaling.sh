#!/usr/bin/env bash
# Run bench_dist_scaling at several local rank counts, printing each exact
# command and the load average before it (the figures docs/scaling.md quotes):
#
#   bench/dist_scaling.sh [BUILD_DIR] [allreduce|sft|all] [NP_LIST] [-- EXTRA_ARGS...]
#
#   bench/dist_scaling.sh build all "1 2 3 4"
#   bench/dist_scaling.sh build sft "1 2" -- --steps 5 --checkpoint /tmp/ckpt
#
# Every run goes through tests/dist/mpirun.sh (a bounded time, no process
# left behind; it sets Open MPI's root, oversubscription, yield-when-idle
# and shared-memory transport switches) with --bind-to none: at 1 or 2
# ranks Open MPI otherwise binds each rank to one core, and a 1-rank job
# with 2 threads then runs both on one core.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
what=${2:-all}
nps=${3:-1 2 3 4}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
extra=("$@")
prog=$build/bench/bench_dist_scaling
limit=${PT_BENCH_LIMIT:-1800}
if [ ! -x "$prog" ]; then
    echo "dist_scaling.sh: $prog not found (build with MPI: meson setup $build && ninja -C $build)" >&2
    exit 2
fi
rc=0
run() {
    local np=$1
    shift
    echo "== $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/')"
    echo "== command: bash tests/dist/mpirun.sh $np $limit --bind-to none $prog $*"
    bash "$here/../tests/dist/mpirun.sh" "$np" "$limit" --bind-to none "$prog" "$@" || rc=1
}
for np in $nps; do
    case $what in
        allreduce|all) [ "$np" -gt 1 ] && run "$np" allreduce "${extra[@]}" ;;
    esac
    case $what in
        sft|all) run "$np" sft "${extra[@]}" ;;
    esac
done
exit $rc
