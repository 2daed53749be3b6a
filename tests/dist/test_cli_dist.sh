#!/usr/bin/env bash
# posttrain sft and grpo under mpirun -np N (tests/dist/mpirun.sh: bounded
# time, no process left behind) on the committed tiny model
# (tests/reference/llama_tied_gqa; grpo with the character tokenizer of
# tests/agent/tiny_grpo_model.sh):
# 1. sft at 2 and 3 ranks (3: uneven shares of --batch-size 4) equals 1 rank
#    over the same global batch (weights within relative L2 1e-5 per tensor, tests/dist/st_compare.py);
#    the same run twice is byte-identical; rank 0 alone prints and writes
#    the metrics, which end with a goodput row whose parts add up to the
#    wall time; fewer rows than ranks is an error naming both numbers; a
#    usage error and a skipped non-finite step are reported once;
# 2. elastic: 2 ranks for 4 steps, then 1 or 3 ranks to 8 with --resume
#    auto, equals 2 ranks to 8;
# 3. a rank killed with SIGKILL after a checkpoint exists: the job ends
#    within a bound with mpirun naming the rank; the same command relaunched
#    (--resume auto) ends byte-identical to an uninterrupted run, and its
#    goodput counts every step once;
# 4. a rank stopped with SIGSTOP, --dist-timeout 3: every other rank exits
#    non-zero naming the stopped rank, within a bound, nothing left behind;
# 5. silent data corruption (POSTTRAIN_TEST_FLIP_BIT) at 3 ranks with
#    --sdc-every 2: detected within 2 steps naming the rank and the step,
#    rolled back to the last checkpoint (or the start) and replayed to
#    weights byte-identical to the unflipped run; --sdc-action stop exits
#    non-zero and saves no checkpoint of the corrupted state;
# 6. --save-every auto --mtbf-hours H chooses an interval after timing the
#    first checkpoint;
# 7. grpo at 2 and 3 ranks equals 1 rank and reruns bit-identically; fewer
#    prompts than ranks is an error naming both; elastic 2 -> 3 ranks; a
#    replica mismatch rolled back to byte-identical weights; --eval at 2
#    ranks (uneven shares, a rank with no held-out row) writes the eval rows
#    of 1 rank; --env at 2 and 3 ranks (an environment process per rank)
#    equals 1 rank, its episode counts summed.
# The rank PIDs for kill/stop come from /proc/PID/environ of the posttrain
# processes: this script's PT_TEST_TAG, which mpirun passes on, and
# OMPI_COMM_WORLD_RANK.
# Usage: test_cli_dist.sh POSTTRAIN REF_MODEL_DIR
set -uo pipefail
posttrain=$1 ref=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/pt_cli_dist.XXXXXX)
export PT_TEST_TAG="pt_cli_dist_$$"
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

# The posttrain processes of this test (by their environment), e.g. after a failure.
tagged_pids() {
    local p
    for p in $(env -u LD_PRELOAD pgrep -x posttrain); do
        tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "PT_TEST_TAG=$PT_TEST_TAG" && echo "$p"
    done
}
# rank_pid RANK: the PID of this test's posttrain process of that rank.
# Looked for again for up to 5 s: a scan of /proc can miss a process (pgrep
# racing with the ranks' threads starting, an environ read that fails once).
rank_pid() {
    local p i
    for ((i = 0; i < 50; i++)); do
        for p in $(tagged_pids); do
            tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
                { echo "$p"; return 0; }
        done
        sleep 0.1
    done
    return 1
}
cleanup() {
    local p
    for p in $(tagged_pids); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT
[ -n "${PT_KEEP:-}" ] && trap - EXIT

now() { date +%s.%N; }
since() { printf '%.2f' "$(echo "$(now) - $1" | bc)"; }
# run NP NAME ARGS...: posttrain ARGS under mpirun with NP ranks (60 s at
# most), stderr in $work/NAME.log; the exit status.
run() {
    local np=$1 name=$2; shift 2
    bash "$here/mpirun.sh" "$np" 60 "$posttrain" "$@" >"$work/$name.out" 2>"$work/$name.log"
}
compare() { python3 "$here/st_compare.py" "$work/$1/model.safetensors" "$work/$2/model.safetensors"; }
# The steps of the metrics rows (not the goodput row), space-separated.
steps() { grep -v '"goodput"' "$1" | grep -o '"step": [0-9]*' | awk '{printf "%s ", $2}'; }
# goodput_ok METRICS STEPS_KEPT RANKS [LOST]: the last row is the goodput row of a
# run of RANKS ranks with STEPS_KEPT steps kept (and at least LOST lost); its
# parts and pending add up to the wall time, goodput = (step + generate) / wall.
goodput_ok() {
    python3 - "$@" <<'PY'
import json, sys
path, kept, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lost = int(sys.argv[4]) if len(sys.argv) > 4 else 0
rows = [json.loads(l) for l in open(path)]
g = rows[-1]["goodput"]
assert sum("goodput" in r for r in rows) == 1, "one goodput row"
assert rows[-1]["step"] == rows[-2]["step"], rows[-1]
kinds = ["step", "generate", "wait", "save", "load", "startup", "eval", "lost", "other"]
parts = sum(g["seconds/" + k] for k in kinds) + g["pending"]
assert all(g["seconds/" + k] >= 0 for k in kinds), g
assert abs(parts - g["wall"]) <= 2e-3 + 1e-3 * g["wall"], ("parts", parts, g)
good = (g["seconds/step"] + g["seconds/generate"]) / g["wall"]
assert abs(good - g["goodput"]) <= 1e-3 + 1e-4 / g["wall"], ("goodput", good, g)
assert 0 < g["goodput"] < 1 and g["pending"] == 0, g
assert g["steps_kept"] == kept and g["steps_lost"] >= lost and g["ranks"] == ranks, g
PY
}

# ---- sft: 1, 2, 3 ranks ------------------------------------------------------------
for i in $(seq 0 11); do
    printf '{"input_ids": [1, %d, %d, %d, %d, %d, 2], "loss_mask": [0, 0, 1, 1, 1, 1, 1]}\n' \
        $((i % 50 + 3)) $((i * 7 % 50 + 3)) $((i * 3 % 50 + 3)) $((i * 11 % 50 + 3)) $((i * 13 % 50 + 3))
done > "$work/data.jsonl"
sft=(--threads 1 sft --model "$ref" --data "$work/data.jsonl" --optimizer adamw --lr 0.01 --weight-decay 0.1
     --warmup-steps 2 --batch-size 4 --grad-accum 2 --seed 5 --save-every 4)
t0=$(now)
for np in 1 2 3; do
    run "$np" "sft$np" "${sft[@]}" --steps 8 --out "$work/sft$np" || { cat "$work/sft$np.log"; bad "sft at $np ranks failed"; }
done
run 2 sft2b "${sft[@]}" --steps 8 --out "$work/sft2b" || bad "sft at 2 ranks (again) failed"
for np in 2 3; do
    msg=$(compare "sft$np" sft1) && ok "sft: $np ranks equal 1 rank over the same global batch ($msg)" ||
        bad "sft: $np ranks against 1: $msg"
done
cmp -s "$work/sft2/model.safetensors" "$work/sft2b/model.safetensors" &&
    cmp -s "$work/sft2/checkpoints/step-00000004/optimizer.safetensors" \
           "$work/sft2b/checkpoints/step-00000004/optimizer.safetensors" &&
    ok "sft: 2 ranks twice give byte-identical weights and optimizer moments" || bad "sft: 2 ranks are not reproducible"
log=$work/sft3.log
if [ "$(grep -c '^step 8/8 ' "$log")" -eq 1 ] && [ "$(grep -c 'rows: 12 train' "$log")" -eq 1 ] &&
   [ "$(grep -c 'checkpoint .*step-00000004' "$log")" -eq 1 ] && [ "$(grep -c '^posttrain sft: goodput ' "$log")" -eq 1 ] &&
   [ "$(tail -n 1 "$log")" = "posttrain sft: plot: $work/sft3/metrics.svg" ] &&
   [ "$(steps "$work/sft3/metrics.jsonl")" = "1 2 3 4 5 6 7 8 " ]; then
    ok "sft at 3 ranks: rank 0 alone prints the progress, checkpoints and goodput; one metrics row per step"
else
    cat "$log"; bad "sft at 3 ranks: output"
fi
if goodput_ok "$work/sft3/metrics.jsonl" 8 3 && goodput_ok "$work/sft1/metrics.jsonl" 8 1 &&
   grep -q '^posttrain sft: goodput 0\.[0-9]* of [0-9.]* s wall: step [0-9.]*, generate 0.00, wait [0-9.]*, save [0-9.]*, load 0.00, startup [0-9.]*, eval 0.00, lost 0.00, other [0-9.]*; 8 steps kept, 0 lost$' "$log"; then
    ok "sft: the goodput line and the metrics' goodput row (parts add up to the wall time)"
else
    tail -n 1 "$work/sft3/metrics.jsonl"; grep goodput "$log"; bad "sft: goodput"
fi
if ! run 3 few "${sft[@]}" --batch-size 2 --steps 2 --out "$work/few" &&
   [ "$(grep -c -- '--batch-size: 2 cannot be shared by 3 ranks' "$work/few.log")" -eq 1 ] && [ ! -e "$work/few" ]; then
    ok "sft: 2 rows a micro-batch at 3 ranks is an error naming both numbers (printed once), nothing written"
else
    cat "$work/few.log"; bad "sft: fewer rows than ranks"
fi
if ! run 3 usage "${sft[@]}" --steps 2 --out "$work/usage" --frob &&
   [ "$(grep -c "unknown option '--frob'" "$work/usage.log")" -eq 1 ]; then
    ok "a usage error under mpirun is printed once"
else
    cat "$work/usage.log"; bad "usage error under mpirun"
fi
# a step whose update would make the weights non-finite is skipped on every rank, and said once
if run 3 nonfinite "${sft[@]}" --steps 2 --optimizer sgd --lr 1e38 --warmup-steps 0 --max-grad-norm 0 --save-every 0 \
       --out "$work/nonfinite" &&
   [ "$(grep -c '^posttrain sft: step 2 skipped (non-finite loss or gradients)$' "$work/nonfinite.log")" -eq 1 ] &&
   [ "$(grep -c 'optimizer step 2 skipped' "$work/nonfinite.log")" -eq 1 ]; then
    ok "a non-finite step at 3 ranks is skipped everywhere and reported once"
else
    cat "$work/nonfinite.log"; bad "non-finite step at 3 ranks"
fi
echo "  (sft at 1/2/3 ranks: $(since "$t0") s)"

# ---- elastic: 2 ranks for 4 steps, then 1 or 3 ranks to 8 ---------------------------
t0=$(now)
run 2 el "${sft[@]}" --steps 4 --out "$work/el" --resume auto || { cat "$work/el.log"; bad "elastic: the first 4 steps"; }
for np in 1 3; do
    cp -r "$work/el" "$work/el$np"
    if run "$np" "el$np" "${sft[@]}" --steps 8 --out "$work/el$np" --resume auto &&
       grep -q "resumed at step 4 from $work/el$np/checkpoints/step-00000004" "$work/el$np.log" &&
       [ "$(steps "$work/el$np/metrics.jsonl")" = "1 2 3 4 5 6 7 8 " ] && msg=$(compare "el$np" sft2); then
        ok "elastic sft: 2 ranks to step 4, then $np to 8 equals 2 ranks to 8 ($msg)"
    else
        cat "$work/el$np.log"; bad "elastic sft 2 -> $np ranks: ${msg:-}"
    fi
done
echo "  (elastic: $(since "$t0") s)"

# ---- SIGKILL of a rank, relaunch ------------------------------------------------------
t0=$(now)
long=("${sft[@]}" --steps 600 --save-every 40 --resume auto)
run 2 ref600 "${long[@]}" --out "$work/ref600" || { cat "$work/ref600.log"; bad "the uninterrupted 600 steps"; }
bash "$here/mpirun.sh" 2 60 "$posttrain" "${long[@]}" --out "$work/killed" >/dev/null 2>"$work/killed.log" &
job=$!
for ((i = 0; i < 600; i++)); do
    [ -d "$work/killed/checkpoints/step-00000040" ] && break
    sleep 0.02
done
victim=$(rank_pid 1)
if [ -n "$victim" ] && [ -d "$work/killed/checkpoints/step-00000040" ]; then
    tk=$(now)
    kill -KILL "$victim"
    wait "$job"
    rc=$?
    secs=$(since "$tk")
    if [ "$rc" -ne 0 ] && [ "$(echo "$secs < 10" | bc)" = 1 ] &&
       grep -q 'process rank 1 with PID .* exited on signal 9' "$work/killed.log" &&
       ! grep -q 'left behind' "$work/killed.log" && [ -z "$(tagged_pids)" ]; then
        ok "SIGKILL of rank 1: the job ended $secs s later (status $rc), mpirun naming rank 1; nothing left"
    else
        cat "$work/killed.log"; bad "SIGKILL of rank 1: status $rc after $secs s"
    fi
    # the latest complete checkpoint (a half-written one has a .tmp- name)
    last=$(ls -d "$work/killed/checkpoints/step-"* | grep -v '/step-[0-9]*\.tmp-' | tail -n 1)
    n=$(basename "$last" | sed 's/^step-0*//')
    if [ -n "$n" ] && run 2 relaunch "${long[@]}" --out "$work/killed" &&
       grep -q "resumed at step $n from $last" "$work/relaunch.log" &&
       cmp -s "$work/killed/model.safetensors" "$work/ref600/model.safetensors" &&
       [ "$(steps "$work/killed/metrics.jsonl" | wc -w)" -eq 600 ] && goodput_ok "$work/killed/metrics.jsonl" 600 2; then
        ok "relaunched with --resume auto from $(basename "$last"): byte-identical to the uninterrupted run; goodput counts 600 steps"
    else
        cat "$work/relaunch.log"; bad "the relaunch after SIGKILL"
    fi
else
    kill -KILL "$job" 2>/dev/null; wait "$job"
    cat "$work/killed.log"; bad "SIGKILL: no checkpoint or no rank 1 to kill"
fi
echo "  (SIGKILL and relaunch: $(since "$t0") s)"

# ---- SIGSTOP of a rank, --dist-timeout 3 ---------------------------------------------
t0=$(now)
bash "$here/mpirun.sh" 3 60 "$posttrain" "${sft[@]}" --steps 1000000 --save-every 0 --dist-timeout 3 \
    --out "$work/stopped" >/dev/null 2>"$work/stopped.log" &
job=$!
for ((i = 0; i < 600; i++)); do
    [ -f "$work/stopped/metrics.jsonl" ] && [ "$(wc -l <"$work/stopped/metrics.jsonl")" -gt 20 ] && break
    sleep 0.02
done
# Rank R's PT_EPEER names rank 1 among the ranks that did not arrive (a rank
# waiting at the next collective for a rank still stuck waiting for rank 1
# names both: "rank(s) 0, 1").
names_stopped() {
    grep -Eq "^posttrain: rank $1: .*rank $1: .* did not complete within 3 s; rank\(s\) ([0-9]+, )*1(, [0-9]+)* did not arrive" \
        "$work/stopped.log"
}
victim=$(rank_pid 1)
if [ -n "$victim" ]; then
    ts=$(now)
    kill -STOP "$victim"
    wait "$job"
    rc=$?
    secs=$(since "$ts")
    if [ "$rc" -ne 0 ] && [ "$(echo "$secs >= 3 && $secs < 10" | bc)" = 1 ] &&
       names_stopped 0 && names_stopped 2 &&
       ! grep -q 'left behind' "$work/stopped.log" && [ -z "$(tagged_pids)" ]; then
        ok "SIGSTOP of rank 1: ranks 0 and 2 named it and the job ended $secs s later (status $rc); nothing left"
    else
        cat "$work/stopped.log"; bad "SIGSTOP of rank 1: status $rc after $secs s"
    fi
else
    kill -KILL "$job" 2>/dev/null; wait "$job"
    cat "$work/stopped.log"; bad "SIGSTOP: no rank 1 found"
fi
echo "  (SIGSTOP: $(since "$t0") s)"

# ---- silent data corruption ----------------------------------------------------------
t0=$(now)
if POSTTRAIN_TEST_FLIP_BIT=1:5 run 3 sdc "${sft[@]}" --steps 8 --sdc-every 2 --out "$work/sdc" &&
   grep -q 'rank 1: POSTTRAIN_TEST_FLIP_BIT: flipped bit 13 of .* after step 5$' "$work/sdc.log" &&
   grep -q '^posttrain sft: silent data corruption detected after step 6 on rank 1: .*rank(s) 1 (' "$work/sdc.log" &&
   grep -q "rolling every rank back to step 4 ($work/sdc/checkpoints/step-00000004) and replaying" "$work/sdc.log" &&
   cmp -s "$work/sdc/model.safetensors" "$work/sft3/model.safetensors" &&
   [ "$(steps "$work/sdc/metrics.jsonl")" = "1 2 3 4 5 6 7 8 " ] && goodput_ok "$work/sdc/metrics.jsonl" 8 3 2; then
    ok "SDC: a bit flipped on rank 1 after step 5 is caught at step 6, rolled back to step 4 and replayed byte-identically"
else
    cat "$work/sdc.log"; bad "SDC rollback to a checkpoint"
fi
if POSTTRAIN_TEST_FLIP_BIT=2:1 run 3 sdc0 "${sft[@]}" --steps 8 --sdc-every 2 --out "$work/sdc0" &&
   grep -q 'silent data corruption detected after step 2 on rank 2' "$work/sdc0.log" &&
   grep -q 'rolling every rank back to the start (no checkpoint yet)' "$work/sdc0.log" &&
   cmp -s "$work/sdc0/model.safetensors" "$work/sft3/model.safetensors"; then
    ok "SDC: a flip before the first checkpoint rolls back to the start and replays byte-identically"
else
    cat "$work/sdc0.log"; bad "SDC rollback to the start"
fi
if ! POSTTRAIN_TEST_FLIP_BIT=2:3 run 3 sdcstop "${sft[@]}" --steps 8 --sdc-every 2 --sdc-action stop \
        --out "$work/sdcstop" &&
   grep -q '^posttrain sft: silent data corruption detected after step 4 on rank 2: .*at step 4 .*rank(s) 2 (' \
       "$work/sdcstop.log" && grep -q 'stopping (--sdc-action stop)' "$work/sdcstop.log" &&
   [ ! -e "$work/sdcstop/checkpoints/step-00000004" ] && [ ! -e "$work/sdcstop/model.safetensors" ]; then
    ok "SDC with --sdc-action stop: exits non-zero naming rank 2 and step 4; the corrupted state is not saved"
else
    cat "$work/sdcstop.log"; bad "SDC stop"
fi
echo "  (SDC: $(since "$t0") s)"

# ---- --save-every auto ----------------------------------------------------------------
if run 2 auto "${sft[@]}" --steps 40 --save-every auto --mtbf-hours 0.0001 --out "$work/auto" &&
   grep -q '^posttrain sft: --save-every auto: a checkpoint took [0-9.]* s, a step [0-9.]* s; with an MTBF of 0.0001 h, Young-Daly gives [0-9.]* s: a checkpoint every [0-9]* steps$' "$work/auto.log" &&
   [ -d "$work/auto/checkpoints/step-00000001" ] && [ -d "$work/auto/checkpoints/step-00000040" ]; then
    ok "--save-every auto: the first checkpoint after step 1 is timed, then $(grep -o 'every [0-9]* steps' "$work/auto.log")"
else
    cat "$work/auto.log"; bad "--save-every auto"
fi

# ---- grpo ----------------------------------------------------------------------------
t0=$(now)
model=$work/model
# shellcheck source=../agent/tiny_grpo_model.sh
. "$here/../agent/tiny_grpo_model.sh"
tiny_grpo_model "$ref" "$model"
for i in 0 1 2 3 4 5 6; do
    printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $i $((i % 3)) $((i + i % 3))
done > "$work/prompts.jsonl"
grpo=(grpo --model "$model" --data "$work/prompts.jsonl" --reward exact,contains:0.5,length:0.1 --num-generations 4
      --batch-prompts 3 --max-new-tokens 6 --lr 1e-3 --threads 1 --seed 3 --save-every 2)
for np in 1 2 3; do
    run "$np" "grpo$np" "${grpo[@]}" --steps 4 --out "$work/grpo$np" || { cat "$work/grpo$np.log"; bad "grpo at $np ranks failed"; }
done
run 3 grpo3b "${grpo[@]}" --steps 4 --out "$work/grpo3b" || bad "grpo at 3 ranks (again) failed"
for np in 2 3; do
    msg=$(compare "grpo$np" grpo1) && ok "grpo: $np ranks equal 1 rank ($msg)" || bad "grpo: $np ranks against 1: $msg"
done
rewards() { grep -v '"goodput"' "$1" | grep -o '"reward": [-0-9.e]*' | tr '\n' ' '; }
[ "$(rewards "$work/grpo3/metrics.jsonl")" = "$(rewards "$work/grpo1/metrics.jsonl")" ] &&
    ok "grpo: the rewards of every step are those of 1 rank (the samples do not depend on the rank count)" ||
    bad "grpo: rewards differ: $(rewards "$work/grpo3/metrics.jsonl") / $(rewards "$work/grpo1/metrics.jsonl")"
cmp -s "$work/grpo3/model.safetensors" "$work/grpo3b/model.safetensors" &&
    ok "grpo: 3 ranks twice give byte-identical weights" || bad "grpo: 3 ranks are not reproducible"
if [ "$(grep -c '^step [1-4]/4 reward' "$work/grpo3.log")" -eq 4 ] && goodput_ok "$work/grpo3/metrics.jsonl" 4 3 &&
   grep -q '^posttrain grpo: goodput 0\.[0-9]* of .* generate [0-9.]*, wait' "$work/grpo3.log"; then
    ok "grpo at 3 ranks: one progress line per step, the goodput line and row"
else
    cat "$work/grpo3.log"; bad "grpo at 3 ranks: output"
fi
if ! run 3 gfew "${grpo[@]}" --batch-prompts 2 --steps 1 --out "$work/gfew" &&
   [ "$(grep -c -- '--batch-prompts: 2 cannot be shared by 3 ranks' "$work/gfew.log")" -eq 1 ]; then
    ok "grpo: 2 prompts a step at 3 ranks is an error naming both numbers (printed once)"
else
    cat "$work/gfew.log"; bad "grpo: fewer prompts than ranks"
fi
run 2 gel "${grpo[@]}" --steps 2 --out "$work/gel" || bad "elastic grpo: the first 2 steps"
if run 3 gel3 "${grpo[@]}" --steps 4 --out "$work/gel" --resume auto &&
   grep -q "resumed at step 2 from $work/gel/checkpoints/step-00000002" "$work/gel3.log" && msg=$(compare gel grpo2); then
    ok "elastic grpo: 2 ranks to step 2, then 3 to 4 equals 2 ranks to 4 ($msg)"
else
    cat "$work/gel3.log"; bad "elastic grpo: ${msg:-}"
fi
# 2 ranks: no majority, so the headline names no rank (it said "on rank 0"
# when rank 1 was flipped)
if ! POSTTRAIN_TEST_FLIP_BIT=1:1 run 2 sdc2 "${sft[@]}" --steps 4 --sdc-every 2 --sdc-action stop \
        --out "$work/sdc2" &&
   grep -q '^posttrain sft: silent data corruption detected after step 2, on no rank that a majority can name (the 2 ranks disagree): .*no majority agrees: ranks 0 (.*), 1 (' \
       "$work/sdc2.log" && ! grep -q 'detected after step 2 on rank' "$work/sdc2.log"; then
    ok "SDC at 2 ranks: a flip on rank 1 is reported without naming a rank (no majority)"
else
    cat "$work/sdc2.log"; bad "SDC at 2 ranks: the headline"
fi
if POSTTRAIN_TEST_FLIP_BIT=0:3 run 3 gsdc "${grpo[@]}" --steps 4 --sdc-every 1 --out "$work/gsdc" &&
   grep -q 'silent data corruption detected after step 3 on rank 0' "$work/gsdc.log" &&
   grep -q 'rolling every rank back to step 2' "$work/gsdc.log" &&
   cmp -s "$work/gsdc/model.safetensors" "$work/grpo3/model.safetensors"; then
    ok "grpo SDC: a flip on rank 0 after step 3 is caught at once, rolled back to step 2, replayed byte-identically"
else
    cat "$work/gsdc.log"; bad "grpo SDC"
fi
# --eval: every rank evaluates its share of the held-out rows (5 rows at 2
# ranks: 3 and 2; 1 row: rank 1 has none), the sums are added, rank 0
# writes the rows: those of 1 rank, and rank 0 alone prints them
for i in 1 3 5 7 8; do
    printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $((i + 1)) $((i % 2)) $((i + 1 + i % 2))
done > "$work/eval5.jsonl"
head -n 1 "$work/eval5.jsonl" > "$work/eval1.jsonl"
eval_rows() {
    python3 -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "eval/prompts" in r: print(json.dumps(r, sort_keys=True))' "$1"
}
same_eval() { # same_eval A B: the same eval rows, numbers within 1e-6
    python3 -c 'import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 3 and [r["step"] for r in a] == [0, 2, 3], (a, b)
for x, y in zip(a, b):
    assert sorted(x) == sorted(y) and all(abs(x[k] - y[k]) <= 1e-6 for k in x if k != "time"), (x, y)' "$1" "$2"
}
for e in 5 1; do
    for np in 1 2; do
        run "$np" "gev$e-$np" "${grpo[@]}" --steps 3 --eval "$work/eval$e.jsonl" --eval-every 2 --eval-samples 2 \
            --out "$work/gev$e-$np" || { cat "$work/gev$e-$np.log"; bad "grpo --eval at $np ranks failed"; }
        eval_rows "$work/gev$e-$np/metrics.jsonl" > "$work/gev$e-$np.rows"
    done
    if same_eval "$work/gev$e-2.rows" "$work/gev$e-1.rows" &&
       [ "$(grep -c "^eval step [0-9]*: $e prompts greedy" "$work/gev$e-2.log")" -eq 3 ]; then
        ok "grpo --eval with $e held-out rows at 2 ranks: the eval rows of 1 rank at steps 0, 2, 3, printed once each"
    else
        cat "$work/gev$e-2.log"; bad "grpo --eval with $e rows at 2 ranks"
    fi
done
# --env: each rank starts its own environment process and plays its groups'
# episodes; 2 ranks (3 groups a step: 2 and 1) and 3 ranks equal 1 rank,
# and the episode counts of a step are summed over the ranks
envrows() {
    python3 -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "episodes" in r:
        print(r["step"], r["reward"], r["episodes"], r["episodes/errors"], r["episodes/env_calls"],
              r["episodes/appended_tokens"])' "$1"
}
genv=(grpo --model "$model" --data "$work/prompts.jsonl" --num-generations 4 --batch-prompts 3 --max-new-tokens 4
      --lr 1e-3 --threads 1 --seed 3 --steps 2 --max-turns 2)
for np in 1 2 3; do
    run "$np" "genv$np" "${genv[@]}" --env "python3 '$here/../agent/grpo_env.py' '$work/genv$np-\$OMPI_COMM_WORLD_RANK.log' twoturn" \
        --out "$work/genv$np" || { cat "$work/genv$np.log"; bad "grpo --env at $np ranks failed"; }
    envrows "$work/genv$np/metrics.jsonl" > "$work/genv$np.rows"
done
for np in 2 3; do
    if msg=$(compare "genv$np" genv1) && [ "$(wc -l < "$work/genv1.rows")" -eq 2 ] &&
       [ "$(awk '{print $1, $3, $4, $5, $6}' "$work/genv$np.rows")" = "1 12 0 24 48
2 12 0 24 48" ] &&
       [ "$(awk '{print $1, $2}' "$work/genv$np.rows")" = "$(awk '{print $1, $2}' "$work/genv1.rows")" ] &&
       [ "$(cat "$work/genv$np"-*.log | grep -c '"request"')" -eq 48 ]; then
        ok "grpo --env at $np ranks: the weights of 1 rank ($msg), its rewards, 12 episodes and 24 env calls a step summed over the ranks' own environments"
    else
        cat "$work/genv$np.log" "$work/genv$np.rows"; bad "grpo --env at $np ranks: ${msg:-}"
    fi
done
echo "  (grpo: $(since "$t0") s)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
