#!/usr/bin/env bash
# posttrain grpo --eval: the held-out rows are evaluated before the first
# step, every --eval-every steps and after the last, as metrics rows with
# the right steps and fields; evaluating does not change the training (the
# same weights without --eval, also with longer held-out prompts); a resumed
# run gives the same eval rows; the errors.  On stories260K (when
# ../shared/data has it): the greedy eval reward and length equal those
# computed apart with `posttrain generate --temperature 0` and the same
# reward, before and after training, and training changed them.
set -uo pipefail
posttrain=$1 ref=$2
shared=${PT_SHARED_DATA:-$(dirname "$0")/../../../shared/data}
work=$(mktemp -d /tmp/pt_grpo_eval.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

model=$work/model
# shellcheck source=tiny_grpo_model.sh
. "$(dirname "$0")/tiny_grpo_model.sh"
tiny_grpo_model "$ref" "$model"

for i in $(seq 0 7); do
    printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $i $((i % 3)) $((i + i % 3))
done > "$work/data.jsonl"
for i in 1 3 5 7 8; do
    printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $((i + 1)) $((i % 2)) $((i + 1 + i % 2))
done > "$work/eval.jsonl"

# a row's eval fields: python prints "step key=value ..." per eval row
eval_rows() {
    python3 - "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if any(k.startswith("eval/") for k in r):
        print(r["step"], " ".join(f"{k}={r[k]}" for k in sorted(r) if k not in ("step", "time")))
EOF
}

run=(grpo --model "$model" --data "$work/data.jsonl" --reward exact,contains:0.5,length:0.1
     --num-generations 4 --batch-prompts 2 --max-new-tokens 6 --lr 1e-3 --seed 3 --threads 1)
if "$posttrain" "${run[@]}" --steps 5 --eval "$work/eval.jsonl" --eval-every 2 --eval-samples 3 \
       --out "$work/a" 2>"$work/a.log"; then
    ok "a 5-step run with --eval --eval-every 2 exits 0"
else
    cat "$work/a.log"; bad "the run with --eval failed"
fi
eval_rows "$work/a/metrics.jsonl" > "$work/a.rows"
if [ "$(cut -d' ' -f1 "$work/a.rows" | tr '\n' ' ')" = "0 2 4 5 " ]; then
    ok "eval rows at steps 0 (before training), 2, 4 (every 2) and 5 (the last)"
else
    cat "$work/a.rows"; bad "eval rows at steps 0 2 4 5"
fi
# every field, in range; sampled 3 per prompt; the reward the weighted sum
if python3 - "$work/a/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in rows if "eval/prompts" in r]
assert len(ev) == 4, ev
for r in ev:
    assert r["eval/prompts"] == 5 and r["eval/samples"] == 3, r
    for kind in ("greedy", "sampled"):
        acc, ex, co = r[f"eval/accuracy_{kind}"], r[f"eval/rewards/exact/mean_{kind}"], r[f"eval/rewards/contains/mean_{kind}"]
        ln, L = r[f"eval/rewards/length/mean_{kind}"], r[f"eval/mean_length_{kind}"]
        assert 0 <= acc <= 1 and 0 <= ex <= 1 and 0 <= co <= 1 and 1 <= L <= 6, r
        assert abs(ln + L / 6) < 1e-5, r
        assert abs(r[f"eval/reward_mean_{kind}"] - (ex + 0.5 * co + 0.1 * ln)) < 1e-5, r
        # correct: exact and contains (the binary rewards with weight > 0) both 1
        assert acc <= min(ex, co) + 1e-9, r
    # greedy scores 5 completions, sampled 15: multiples of 1/5 and 1/15
    assert abs(r["eval/accuracy_greedy"] * 5 - round(r["eval/accuracy_greedy"] * 5)) < 1e-4, r
    assert abs(r["eval/mean_length_sampled"] * 15 - round(r["eval/mean_length_sampled"] * 15)) < 1e-3, r
# the training rows are still one per step, 1..5
assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4, 5]
EOF
then
    ok "eval fields present and consistent (accuracy, per-reward means, weighted reward, lengths)"
else
    bad "eval fields"
fi
if [ "$(grep -c '^eval step [0-9]*: 5 prompts greedy reward [-0-9.]* accuracy [0-9.]*, sampled (T=1, 3 each) reward [-0-9.]* accuracy [0-9.]*$' "$work/a.log")" -eq 4 ]; then
    ok "an eval line on stderr per evaluation"
else
    cat "$work/a.log"; bad "eval lines on stderr"
fi

# evaluating does not disturb the training: the same weights without --eval
"$posttrain" "${run[@]}" --steps 5 --out "$work/b" 2>"$work/b.log" || { cat "$work/b.log"; bad "the run without --eval"; }
# held-out prompts longer than every training prompt (a longer generator and context)
printf '{"prompt": "12+13=", "answer": "25"}\n{"prompt": "1+1+1+1+1=", "answer": "5"}\n' > "$work/long.jsonl"
"$posttrain" "${run[@]}" --steps 5 --eval "$work/long.jsonl" --out "$work/b2" 2>"$work/b2.log" ||
    { cat "$work/b2.log"; bad "the run with long held-out prompts"; }
if cmp -s "$work/a/model.safetensors" "$work/b/model.safetensors" &&
   cmp -s "$work/b2/model.safetensors" "$work/b/model.safetensors"; then
    ok "the same weights with and without --eval (also with held-out prompts longer than the training ones)"
else
    bad "--eval changed the training"
fi

# resume: 2 steps then --resume auto to 5 gives the same eval rows
"$posttrain" "${run[@]}" --steps 2 --save-every 2 --eval "$work/eval.jsonl" --eval-every 2 --eval-samples 3 \
    --out "$work/c" 2>"$work/c.log" &&
"$posttrain" "${run[@]}" --steps 5 --save-every 2 --eval "$work/eval.jsonl" --eval-every 2 --eval-samples 3 \
    --out "$work/c" --resume auto 2>>"$work/c.log" || { cat "$work/c.log"; bad "the resumed run failed"; }
eval_rows "$work/c/metrics.jsonl" > "$work/c.rows"
if cmp -s "$work/a.rows" "$work/c.rows"; then
    ok "a run resumed at step 2 writes the same eval rows (each step once)"
else
    diff "$work/a.rows" "$work/c.rows"; bad "resumed eval rows"
fi

# greedy runs: no sampled evaluation
"$posttrain" "${run[@]}" --steps 1 --temperature 0 --eval "$work/eval.jsonl" --out "$work/d" 2>"$work/d.log"
if grep -q '"eval/accuracy_greedy"' "$work/d/metrics.jsonl" && ! grep -q 'sampled' "$work/d/metrics.jsonl" &&
   [ "$(eval_rows "$work/d/metrics.jsonl" | cut -d' ' -f1 | tr '\n' ' ')" = "0 1 " ]; then
    ok "--temperature 0: greedy evaluation only, at steps 0 and 1"
else
    cat "$work/d.log"; bad "greedy run's evaluation"
fi
# the length reward alone: no accuracy
"$posttrain" grpo --model "$model" --data "$work/data.jsonl" --reward length --num-generations 2 --batch-prompts 2 \
    --max-new-tokens 4 --steps 1 --threads 1 --eval "$work/eval.jsonl" --out "$work/e" 2>"$work/e.log"
if grep -q '"eval/reward_mean_greedy"' "$work/e/metrics.jsonl" && ! grep -q 'accuracy' "$work/e/metrics.jsonl"; then
    ok "--reward length: eval reward without an accuracy"
else
    cat "$work/e.log"; bad "length-only evaluation"
fi

error() { # error WANT_EXIT WANT_TEXT args...: fails before training starts
    local want_rc=$1 want=$2; shift 2
    rm -rf "$work/x"
    "$posttrain" grpo "$@" >/dev/null 2>"$work/err.txt"
    local rc=$?
    if [ $rc -eq "$want_rc" ] && grep -qF -- "$want" "$work/err.txt" && ! grep -q '^step 1' "$work/err.txt" &&
       [ ! -e "$work/x/metrics.jsonl" ]; then
        ok "error ($want): exit $rc before training"
    else
        echo "  got exit $rc: $(cat "$work/err.txt")"; bad "error ($*)"
    fi
}
base=(--model "$model" --data "$work/data.jsonl" --out "$work/x" --reward exact --steps 1 --threads 1)
error 2 "--eval-every needs --eval FILE.jsonl" "${base[@]}" --eval-every 2
error 2 "--eval-samples needs --eval FILE.jsonl" "${base[@]}" --eval-samples 2
error 2 "--eval-every needs an integer in [1," "${base[@]}" --eval "$work/eval.jsonl" --eval-every 0
error 1 "grpo --eval: PT_ENOTFOUND" "${base[@]}" --eval "$work/missing.jsonl"
printf '{"prompt": "1+1=", "answer": "2"}\nnot json\n' > "$work/badjson.jsonl"
error 1 "grpo --eval: PT_EFORMAT: $work/badjson.jsonl line 2: not valid JSON" "${base[@]}" --eval "$work/badjson.jsonl"
printf '{"prompt": "1+1="}\n' > "$work/noanswer.jsonl"
error 1 "--eval $work/noanswer.jsonl line 1: needs a string \"answer\"" "${base[@]}" --eval "$work/noanswer.jsonl"
: > "$work/empty.jsonl"
error 1 "--eval $work/empty.jsonl has no rows" "${base[@]}" --eval "$work/empty.jsonl"

stories=$shared/models/stories260K
if [ -f "$stories/model.safetensors" ]; then
    prompts=("Once upon a time, there was a little girl named Lily. She" "One day, Tom went to the"
             "It was a sunny day. Sue looked outside and saw" "Ben was very happy. Ben wanted to")
    answers=(dog park ball play)
    for i in 0 1 2 3; do
        printf '{"prompt": "%s", "answer": "%s"}\n' "${prompts[$i]}" "${answers[$i]}"
    done > "$work/s_eval.jsonl"
    # the greedy contains-reward and length computed apart: posttrain generate
    apart() { # apart MODEL -> "reward_mean mean_length"
        local hits=0 toks=0 i text n
        for i in 0 1 2 3; do
            "$posttrain" generate --model "$1" --prompt "${prompts[$i]}" --temperature 0 --max-new-tokens 16 \
                --threads 1 --print-ids > "$work/gen.txt" 2>/dev/null
            text=$(head -n -1 "$work/gen.txt")
            n=$(tail -n 1 "$work/gen.txt" | wc -w)
            toks=$((toks + n))
            case $text in *"${answers[$i]}"*) hits=$((hits + 1)) ;; esac
        done
        python3 -c "print(f'{$hits / 4:.6g} {$toks / 4:.6g}')"
    }
    if "$posttrain" grpo --model "$stories" --data "$work/s_eval.jsonl" --eval "$work/s_eval.jsonl" \
           --reward contains --num-generations 4 --batch-prompts 4 --max-new-tokens 16 --steps 3 --lr 3e-2 \
           --seed 1 --threads 1 --out "$work/s" 2>"$work/s.log"; then
        got=$(python3 - "$work/s/metrics.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "eval/prompts" in r:
        print(f'{r["eval/rewards/contains/mean_greedy"]:.6g} {r["eval/mean_length_greedy"]:.6g}')
EOF
)
        want="$(apart "$stories")
$(apart "$work/s")"
        if [ "$got" = "$want" ] && [ "$(echo "$want" | sort -u | wc -l)" -eq 2 ]; then
            ok "stories260K: greedy eval reward and length = generate + contains, before and after (which differ)"
        else
            echo "  eval rows: $got"; echo "  apart:     $want"; bad "stories260K eval against generate"
        fi
    else
        cat "$work/s.log"; bad "stories260K run with --eval"
    fi
else
    echo "SKIP stories260K comparison: $stories not found"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
