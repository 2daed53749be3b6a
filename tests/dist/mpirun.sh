#!/usr/bin/env bash
# Run a program under mpirun with a bounded time, and leave no process
# behind:  mpirun.sh NP TIMEOUT_S PROGRAM [ARGS...]
# mpirun runs in a session of its own; when it has not ended after
# TIMEOUT_S seconds every process of that session is killed (by PID) and
# the exit status is 124.  Either way, any process of the session still
# alive afterwards is killed and reported (status 125 if the run had
# passed).  Open MPI needs the root and oversubscription switches on a
# 2-core CI machine run as root.
set -u
np=$1 limit=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
# shared memory between the ranks of one machine; no network probing
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader} OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
# Under AddressSanitizer, LeakSanitizer would report Open MPI's own
# allocations at MPI_Init (its components are unloaded at MPI_Finalize, so
# the reports cannot even be suppressed by name): leaks are checked in the
# single-process runs of the same programs (meson.build), memory errors here.
if [ -n "${ASAN_OPTIONS:-}" ]; then
    export ASAN_OPTIONS="${ASAN_OPTIONS//detect_leaks=1/detect_leaks=0}"
fi
mpirun=${MPIRUN:-mpirun}

# (ps without the sanitizer runtimes an ASan test run preloads: ps hangs with them)
session_pids() { env -u LD_PRELOAD ps -e -o pid= -o sid= | awk -v s="$1" '$2 == s && $1 != s { print $1 } $1 == s { print $1 }'; }

setsid "$mpirun" -np "$np" "$@" &
leader=$!
rc=
for ((i = 0; i < limit * 10; i++)); do
    if ! kill -0 "$leader" 2>/dev/null; then
        wait "$leader"
        rc=$?
        break
    fi
    sleep 0.1
done
if [ -z "$rc" ]; then
    echo "mpirun.sh: $* did not finish within $limit s: killing its processes" >&2
    kill -TERM -- -"$leader" 2>/dev/null
    sleep 1
    for p in $(session_pids "$leader"); do kill -KILL "$p" 2>/dev/null; done
    wait "$leader" 2>/dev/null
    rc=124
fi
# ranks may still be exiting when mpirun has: give them 3 s
for ((i = 0; i < 30; i++)); do
    left=$(session_pids "$leader")
    [ -z "$left" ] && break
    sleep 0.1
done
if [ -n "$left" ]; then env -u LD_PRELOAD ps -o pid,stat,etime,args -p "$(echo $left | tr ' ' ',')" >&2; fi
if [ -n "$left" ]; then
    echo "mpirun.sh: processes left behind: $left: killing them" >&2
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
    [ "$rc" -eq 0 ] && rc=125
fi
exit "$rc"
