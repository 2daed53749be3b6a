#!/usr/bin/env bash
# posttrain demo on a small budget (1-digit addition, seconds per run): it
# exits 0 and needs no file; every phase runs in order and the last line is
#   held-out accuracy: before A% | after SFT B% | after GRPO C%
# with the greedy accuracies printed above it, and B > A.  The teacher's
# traces (--save-traces) show the error share the demo prints, and its one
# kind of error (the carries forgotten) at about --slip of the traces that
# have a carry; --slip 0 and 1 exactly.  The same seed and thread count give
# the same output and traces (times aside), another seed other ones;
# --grpo-steps 0 leaves the SFT model as it is.  Usage errors exit 2 with a
# message naming the option and print nothing on stdout; an unwritable
# --save-traces exits 1 and leaves nothing behind.
# What holds here holds for this budget and these seeds (the demo is
# deterministic); the claim of the full demo (GRPO adds >= 15 points over 5
# seeds) is measured by bench/demo_seeds.sh, not here.
# Usage: test_cli_demo.sh POSTTRAIN
set -u
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pt_cli_demo.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=1; echo "FAIL $1"; }

small=(--digits 1 --traces 2000 --steps 100 --batch 32 --grpo-steps 10 --prompts 8 --group 4 --eval 20)
# run NAME ARGS...: the demo in an empty directory $tmp/cwd.NAME (with
# --save-traces traces.jsonl there), its output in $tmp/NAME
run() {
    local name=$1
    shift
    mkdir -p "$tmp/cwd.$name"
    (cd "$tmp/cwd.$name" && "$exe" demo "${small[@]}" --save-traces traces.jsonl "$@") >"$tmp/$name" \
        2>"$tmp/$name.err"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        bad "demo $* exits $rc: $(cat "$tmp/$name.err")"
        return 1
    fi
    if [ -s "$tmp/$name.err" ]; then
        bad "demo $* writes to stderr: $(cat "$tmp/$name.err")"
        return 1
    fi
    if [ "$(ls -A "$tmp/cwd.$name")" != traces.jsonl ]; then
        bad "demo $* leaves '$(echo "$tmp/cwd.$name"/* "$tmp/cwd.$name"/.[!.]*)', not just traces.jsonl"
        return 1
    fi
    ok "demo $* exits 0, no stderr, no file but its traces"
}
# The output without its times and speeds.
untimed() {
    sed -E 's/[0-9.]+ tok\/s//; s/  [0-9]+s$//; s/, [0-9]+ s\)/)/; s/^  whole demo: [0-9]+ s$/  whole demo/' "$1"
}
# greedy PHASE FILE: the greedy accuracy (one decimal) on that phase's line
greedy() { grep "^  $1" "$2" | sed -E 's/.*held-out greedy ([0-9.]+)%.*/\1/'; }
# forgotten PHASE FILE: the share of answers with the carries forgotten on that phase's line
forgotten() { grep "^  $1" "$2" | sed -E 's/.*carries forgotten ([0-9.]+)%.*/\1/'; }
# check_traces FILE N DIGITS: every row of the traces file is a problem with
# the right sum or the sum with the carries forgotten (least significant
# digit first); prints "ROWS WRONG CARRY SLIPPED": rows, wrong answers, rows
# whose problem has a carry, and of those the ones answered without it.
check_traces() {
    awk -v digits="$3" '
        function answer(a, b, carries,   s, c, i, d) {
            s = ""; c = 0
            for (i = 0; i <= digits; i++) {
                d = a % 10 + b % 10 + c
                s = s (d % 10)
                c = carries ? int(d / 10) : 0
                a = int(a / 10); b = int(b / 10)
            }
            return s
        }
        {
            if (!match($0, /^\{"prompt": "[0-9]+\+[0-9]+=", "completion": "[0-9]+"\}$/)) { bad = 1; exit }
            split($0, q, "\"")
            split(q[4], ab, /[+=]/)
            right = answer(ab[1] + 0, ab[2] + 0, 1)
            slip = answer(ab[1] + 0, ab[2] + 0, 0)
            if (q[8] != right && q[8] != slip) { bad = 1; exit }
            rows++
            wrong += q[8] != right
            if (right != slip) { carry++; slipped += q[8] == slip }
        }
        END { if (bad) { print "bad row " NR ": " $0; exit 1 } print rows + 0, wrong + 0, carry + 0, slipped + 0 }
    ' "$1"
}

# ---- a whole run: phases, the closing line, the teacher's data ----
run a --seed 3 || exit 1
out=$tmp/a
for needle in "demo: SFT, then GRPO, of a tiny built-in model on 1-digit addition" \
    "  teacher: a scripted policy that forgets the carries in 70% of its traces;" \
    "of its 2000 SFT traces are wrong" "           (written to traces.jsonl)" \
    "  held-out: 10 problems never trained on" "  before training: held-out greedy " \
    "  sft step  100/100  loss " "  after SFT (100 steps, " "  grpo step   10/10  reward " \
    "  after GRPO (10 steps, " "sampled at T=1 " "  whole demo: "; do
    if grep -qF -- "$needle" "$out"; then ok "output has '$needle'"; else bad "no '$needle' in: $(cat "$out")"; fi
done
last=$(tail -n 1 "$out")
re='^held-out accuracy: before ([0-9]+)% \| after SFT ([0-9]+)% \| after GRPO ([0-9]+)%$'
if [[ $last =~ $re ]]; then
    ok "last line: $last"
    acc=("${BASH_REMATCH[@]:1}")
    i=0
    for phase in "before training" "after SFT" "after GRPO"; do
        g=$(greedy "$phase" "$out")
        want=$(awk -v g="$g" 'BEGIN { printf "%.0f", g }')
        if [ -n "$g" ] && [ "${acc[$i]}" = "$want" ]; then
            ok "$phase: greedy $g% is the line's ${acc[$i]}%"
        else
            bad "$phase: the line says ${acc[$i]}%, the greedy accuracy is '$g'"
        fi
        i=$((i + 1))
    done
    if [ "${acc[1]}" -gt "${acc[0]}" ]; then ok "SFT learns: ${acc[0]}% -> ${acc[1]}%"; else
        bad "after SFT ${acc[1]}% is not above before ${acc[0]}%"; fi
else
    bad "last line is not the accuracy line: '$last'"
fi
# Imitation inherits the teacher's error: after SFT some held-out answers are
# the carries forgotten (none before training).
f0=$(forgotten "before training" "$out") f1=$(forgotten "after SFT" "$out")
if [ "$f0" = "0.0" ] && awk -v f="$f1" 'BEGIN { exit !(f > 0) }'; then
    ok "carries forgotten: $f0% before training, $f1% after SFT"
else
    bad "carries forgotten: '$f0'% before training, '$f1'% after SFT"
fi
order=$(grep -E '^  (before training|sft step|after SFT|grpo step|after GRPO)' "$out" | sed -E 's/^  //; s/ .*//' |
    uniq | tr '\n' ' ')
if [ "$order" = "before sft after grpo after " ]; then ok "phases in order"; else bad "phases: '$order'"; fi

# The teacher's error share is the one its traces show, its only error the
# carries forgotten, on about 70% of the traces with a carry (2000 traces,
# a fixed seed: 0.6 .. 0.8 is many standard errors wide, and deterministic).
if stats=$(check_traces "$tmp/cwd.a/traces.jsonl" 2000 1); then
    read -r rows wrong carry slipped <<<"$stats"
    shown=$(sed -nE 's/^ +([0-9.]+)% of its ([0-9]+) SFT traces are wrong$/\1 \2/p' "$out")
    want="$(awk -v w="$wrong" -v n="$rows" 'BEGIN { printf "%.1f", 100 * w / n }') $rows"
    if [ "$rows" -eq 2000 ] && [ "$shown" = "$want" ]; then
        ok "traces: $rows rows, $wrong wrong: the demo says $shown"
    else
        bad "traces: $rows rows, $wrong wrong (want '$want'), the demo says '$shown'"
    fi
    if awk -v s="$slipped" -v c="$carry" 'BEGIN { exit !(c > 0 && s / c > 0.6 && s / c < 0.8 ) }' &&
        [ "$slipped" -eq "$wrong" ]; then
        ok "traces: the carries forgotten on $slipped of the $carry with a carry, the only error"
    else
        bad "traces: $slipped of $carry with a carry slipped, $wrong wrong"
    fi
else
    bad "traces: $stats"
fi
for slip in 0 1; do
    mkdir -p "$tmp/slip$slip"
    if (cd "$tmp/slip$slip" && "$exe" demo --digits 1 --traces 500 --steps 0 --grpo-steps 0 --eval 10 --slip $slip \
        --save-traces t.jsonl >out 2>&1) && stats=$(check_traces "$tmp/slip$slip/t.jsonl" 500 1); then
        read -r rows wrong carry slipped <<<"$stats"
        want=$([ $slip = 0 ] && echo 0 || echo "$carry")
        pct=$(awk -v w="$want" 'BEGIN { printf "%.1f", w / 5 }')
        if [ "$rows" -eq 500 ] && [ "$carry" -gt 0 ] && [ "$wrong" -eq "$want" ] &&
            grep -qF "$pct% of its 500 SFT traces are wrong" "$tmp/slip$slip/out"; then
            ok "--slip $slip: $wrong of 500 traces wrong ($carry with a carry), the demo says $pct%"
        else
            bad "--slip $slip: $rows rows, $wrong wrong, $carry with a carry: $(cat "$tmp/slip$slip/out")"
        fi
    else
        bad "--slip $slip: $(cat "$tmp/slip$slip/out") ${stats:-}"
    fi
done

# ---- determinism per seed and thread count; another seed differs ----
run b --seed 3 || exit 1
if diff <(untimed "$tmp/a") <(untimed "$tmp/b") >"$tmp/diff" &&
    cmp -s "$tmp/cwd.a/traces.jsonl" "$tmp/cwd.b/traces.jsonl"; then
    ok "seed 3 twice: same output, same traces"
else
    bad "seed 3 twice differs: $(cat "$tmp/diff")"
fi
run e --seed 4 || exit 1
if ! diff -q <(untimed "$tmp/a") <(untimed "$tmp/e") >/dev/null &&
    ! cmp -s "$tmp/cwd.a/traces.jsonl" "$tmp/cwd.e/traces.jsonl"; then
    ok "seed 4: other output, other traces"
else
    bad "seed 4 gives seed 3's output or traces"
fi
# No GRPO step: after GRPO is after SFT.
run f --seed 3 --grpo-steps 0 || exit 1
g1=$(greedy "after SFT" "$tmp/f") g2=$(greedy "after GRPO" "$tmp/f")
if [ -n "$g1" ] && [ "$g1" = "$g2" ] && [ "$g1" = "$(greedy "after SFT" "$tmp/a")" ] &&
    [ "$(forgotten "after SFT" "$tmp/f")" = "$(forgotten "after GRPO" "$tmp/f")" ]; then
    ok "--grpo-steps 0: after GRPO = after SFT (${g1}%, as in the whole run)"
else
    bad "--grpo-steps 0 changed the model: $(cat "$tmp/f")"
fi
# Two threads: a shorter budget, and threads that sleep while they wait (on
# a machine busy with other jobs, spinning OpenMP threads made this run take
# 1 to 11 s instead of 0.4 s; the output does not depend on it).
export OMP_WAIT_POLICY=passive
small=(--digits 1 --traces 2000 --steps 20 --batch 32 --grpo-steps 3 --prompts 8 --group 4 --eval 20)
run c --seed 3 --threads 2 && run d --seed 3 --threads 2 || exit 1
if diff <(untimed "$tmp/c") <(untimed "$tmp/d") >"$tmp/diff"; then ok "seed 3 twice on 2 threads: same output"; else
    bad "seed 3 twice on 2 threads differs: $(cat "$tmp/diff")"; fi

# ---- usage errors: exit 2, the option named, nothing on stdout ----
# expect CODE NEEDLE ARGS...
expect() {
    local code=$1 needle=$2
    shift 2
    (cd "$tmp/cwd.err" && "$exe" demo "$@") >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -eq "$code" ] && grep -qF -- "$needle" "$tmp/err" && { [ "$code" -ne 2 ] || [ ! -s "$tmp/out" ]; } &&
        [ -z "$(ls -A "$tmp/cwd.err")" ]; then
        ok "demo $* -> $code '$needle'"
    else
        bad "demo $* -> exit $rc (want $code '$needle'): $(cat "$tmp/err") $(ls -A "$tmp/cwd.err")"
    fi
}
mkdir -p "$tmp/cwd.err"
expect 2 "posttrain demo: --slip needs a number in [0, 1], not '1.5'" --slip 1.5
expect 2 "posttrain demo: --group needs an integer in [2, 64], not '1'" --group 1
expect 2 "posttrain demo: --steps needs an integer in [0, 1000000], not '-1'" --steps -1
expect 2 "posttrain demo: --hidden must be a multiple of 16, not 40" --hidden 40
expect 2 "posttrain demo: --heads must divide --hidden" --heads 5
expect 2 "posttrain demo: --loss-type: unknown loss type 'frob'" --loss-type frob
expect 2 "posttrain demo: --save-traces needs a path, not ''" --save-traces ''
expect 2 "posttrain demo: --traces needs a value" --traces
expect 2 "posttrain demo: unknown option '--frob'" --frob
# Traces that cannot be written: exit 1 before any training, no file left
# (a directory in the way: the temporary file was written, then removed).
expect 1 "posttrain demo: cannot write no/such/dir/t.jsonl: No such file or directory" --digits 1 \
    --save-traces no/such/dir/t.jsonl
mkdir "$tmp/adir"
expect 1 "posttrain demo: cannot write $tmp/adir: Is a directory" --digits 1 --save-traces "$tmp/adir"
if grep -q '^  sft step\|^held-out accuracy' "$tmp/out"; then
    bad "the demo trained without its traces: $(cat "$tmp/out")"
fi
if [ -n "$(ls -A "$tmp/adir")" ] || compgen -G "$tmp/adir.tmp*" >/dev/null; then
    bad "left behind: $(ls "$tmp" "$tmp/adir")"
else
    ok "nothing left behind"
fi
echo "$pass passed"
exit $fail
