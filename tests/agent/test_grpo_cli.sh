#!/usr/bin/env bash
# posttrain grpo end to end on a committed tiny model (tests/reference/
# llama_tied_gqa, vocabulary 61) given a hand-written character tokenizer:
# a few steps write metrics.jsonl with every field, the saved model loads,
# the same seed gives the same weights, LoRA and the GRPO options run, and
# bad options are clear usage errors.  A short run on stories260K when the
# shared data is there.
set -uo pipefail
posttrain=$1 ref=$2
shared=${PT_SHARED_DATA:-$(dirname "$0")/../../../shared/data}
work=$(mktemp -d /tmp/pt_grpo_cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

model=$work/model
# shellcheck source=tiny_grpo_model.sh
. "$(dirname "$0")/tiny_grpo_model.sh"
tiny_grpo_model "$ref" "$model"

for i in $(seq 0 7); do
    printf '{"prompt": "%d+%d=", "answer": "%d", "id": %d}\n' $i $((i % 3)) $((i + i % 3)) "$i"
done > "$work/data.jsonl"

run=(grpo --model "$model" --data "$work/data.jsonl" --reward exact,contains:0.5,length:0.1
     --num-generations 4 --batch-prompts 2 --max-new-tokens 6 --steps 3 --lr 1e-3 --seed 3 --threads 2)
if "$posttrain" "${run[@]}" --out "$work/out" 2>"$work/out.log"; then
    ok "a 3-step run exits 0"
else
    cat "$work/out.log"; bad "the 3-step run failed"
fi
cat "$work/out.log"
if [ "$(grep -c '^step [1-3]/3 reward ' "$work/out.log")" -eq 3 ] &&
   grep -q '^step 3/3 reward [-0-9.]* std [0-9.]* zero_std [0-9.]* clip [0-9.]* kl [-0-9.e]* len [0-9.]* loss .* grad_norm .* lr .* gen [0-9]* tok/s train [0-9]* tok/s' "$work/out.log"; then
    ok "a progress line per step with the reward, clip, kl, length, loss, grad norm, lr and tokens/s"
else
    bad "progress lines"
fi
if [ "$(tail -n 1 "$work/out.log")" = "posttrain grpo: plot: $work/out/metrics.svg" ] &&
   [ "$(grep -c '<polyline' "$work/out/metrics.svg")" -eq 5 ] &&
   [ "$(grep -A20 'id="accuracy"' "$work/out/metrics.svg" | grep -m1 '<polyline' | grep -o '[0-9.]*,[0-9.]*' | wc -l)" -eq 3 ]; then
    ok "the run ends with 'plot: OUT/metrics.svg': loss, reward, kl, accuracy and lr over 3 steps"
else
    bad "grpo's metrics.svg"
fi
fields='"step" "reward" "reward_std" "rewards/exact/mean" "rewards/contains/mean" "rewards/length/mean"
        "frac_reward_zero_std" "frac_zero_std_groups" "loss" "kl" "clip_ratio/region_mean" "completions/mean_length" "grad_norm" "lr"
        "gen_tokens_per_s" "train_tokens_per_s" "skipped"'
if [ -f "$work/out/metrics.jsonl" ] && [ "$(grep -vc '"goodput"' "$work/out/metrics.jsonl")" -eq 3 ] &&
   python3 - "$work/out/metrics.jsonl" $fields <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# the last row is the run's goodput (docs/distributed.md), the others one per step
g = rows.pop()["goodput"]
assert g["steps_kept"] == 3 and g["steps_lost"] == 0 and 0 < g["goodput"] <= 1, g
parts = sum(v for k, v in g.items() if k.startswith("seconds/")) + g["pending"]
assert abs(parts - g["wall"]) <= 1e-3 + 1e-3 * g["wall"], (parts, g)
for i, r in enumerate(rows):
    for k in sys.argv[2:]:
        k = k.strip('"')
        assert k in r, (i, k)
    assert r["step"] == i + 1
    assert -0.1 <= r["reward"] <= 1.5 and r["reward_std"] >= 0
    assert 0 <= r["frac_reward_zero_std"] <= 1 and 0 <= r["frac_zero_std_groups"] <= 1
    assert 1 <= r["completions/mean_length"] <= 6
    assert -1 <= r["rewards/length/mean"] < 0
    assert r["lr"] == 1e-3 and r["grad_norm"] >= 0 and r["gen_tokens_per_s"] > 0
PY
then
    ok "metrics.jsonl has one row per step with every field in range, then the goodput row"
else
    head -n 2 "$work/out/metrics.jsonl"; bad "metrics.jsonl"
fi
if "$posttrain" info "$work/out" >"$work/info.txt" 2>&1 && ! cmp -s "$work/out/model.safetensors" "$model/model.safetensors"; then
    ok "the trained model loads (posttrain info) and differs from the start"
else
    cat "$work/info.txt"; bad "the saved model"
fi
"$posttrain" "${run[@]}" --out "$work/again" 2>/dev/null
cmp -s "$work/out/model.safetensors" "$work/again/model.safetensors" &&
    ok "the same seed gives bit-identical weights" || bad "not deterministic"

"$posttrain" grpo --model "$model" --data "$work/data.jsonl" --reward contains --num-generations 3 --batch-prompts 2 \
    --max-new-tokens 4 --steps 2 --lr 1e-3 --beta 0.05 --epsilon 0.1 --epsilon-high 0.28 --loss-type dr_grpo \
    --scale-rewards none --num-iterations 2 --lora-rank 2 --lora-targets all --temperature 0.9 \
    --top-k 20 --top-p 0.95 --schedule cosine --warmup-steps 1 --out "$work/lora" 2>"$work/lora.log"
if [ $? -eq 0 ] && [ -f "$work/lora/adapter/adapter_model.safetensors" ] && "$posttrain" info "$work/lora" >/dev/null 2>&1 &&
   [ "$(grep -vc '"goodput"' "$work/lora/metrics.jsonl")" -eq 2 ] &&
   python3 -c 'import json, sys; r = [json.loads(l) for l in open(sys.argv[1])]; assert r[-2]["kl"] >= 0 and r[-2]["entropy"] > 0, r[-2]' \
       "$work/lora/metrics.jsonl"; then
    ok "LoRA, beta > 0 (reference model; kl and entropy reported), dr_grpo, --scale-rewards none, mu = 2, sampling filters"
else
    cat "$work/lora.log"; bad "the LoRA / GRPO options run"
fi

# --mask-truncated: completions cut at --max-new-tokens get no loss tokens
# (here nearly all are: the random model rarely samples EOS; a step with no
# loss token is skipped, not an error).
if "$posttrain" grpo --model "$model" --data "$work/data.jsonl" --reward exact --num-generations 2 --batch-prompts 2 \
       --max-new-tokens 3 --steps 1 --mask-truncated --scale-rewards rloo --loss-type grpo --out "$work/masked" \
       2>"$work/masked.log" && [ "$(grep -vc '"goodput"' "$work/masked/metrics.jsonl")" -eq 1 ]; then
    ok "--mask-truncated, rloo and the grpo loss run"
else
    cat "$work/masked.log"; bad "--mask-truncated run"
fi

# --temperature feeds the sampler and the step: at T 0.5 without filters the
# trainer's first-iteration log-probabilities are the sampler's (their
# difference is float rounding), the correction weights are 1; CISPO with
# the top-entropy quantile, then two-sided clipping with token_truncate
if "$posttrain" grpo --model "$model" --data "$work/data.jsonl" --reward contains --num-generations 4 --batch-prompts 2 \
       --max-new-tokens 5 --steps 2 --lr 1e-3 --temperature 0.5 --loss-type cispo --epsilon-high 5 \
       --top-entropy-quantile 0.5 --num-iterations 2 --out "$work/cispo" 2>"$work/cispo.log" &&
   python3 - "$work/cispo/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"goodput"' not in l]
assert len(rows) == 2, rows
for r in rows:
    assert r["sampling/sampling_logp_difference/max"] < 1e-4, r
    assert abs(r["sampling/importance_sampling_ratio/mean"] - 1) < 1e-4, r
    assert r["sampling/importance_sampling_corrected_fraction"] == 0, r
    assert 0 <= r["cispo_clip_ratio"] <= 1 and r["entropy_threshold"] > 0, r
    assert 0 < r["entropy_kept_fraction"] < 1, r
PY
then
    ok "--temperature 0.5 feeds the step: sampler and trainer agree (cispo, --top-entropy-quantile, mu = 2)"
else
    cat "$work/cispo.log"; head -n 2 "$work/cispo/metrics.jsonl"; bad "the T=0.5 cispo run"
fi
if "$posttrain" grpo --model "$model" --data "$work/data.jsonl" --reward contains --num-generations 4 --batch-prompts 2 \
       --max-new-tokens 5 --steps 1 --lr 1e-3 --temperature 0.8 --top-k 5 --delta 1.5 \
       --importance-sampling-correction token_truncate --importance-sampling-clip-max 2 \
       --importance-sampling-clip-min 0.5 --out "$work/delta" 2>"$work/delta.log" &&
   python3 - "$work/delta/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"goodput"' not in l][0]
# top-k: the sampler's distribution is the renormalised top 5, the trainer's the whole vocabulary
assert r["sampling/sampling_logp_difference/mean"] > 1e-3, r
assert 0.5 <= r["sampling/importance_sampling_ratio/min"] <= r["sampling/importance_sampling_ratio/max"] <= 2, r
assert "cispo_clip_ratio" not in r and "entropy_threshold" not in r
PY
then
    ok "--delta, token_truncate with its band; top-k makes the sampler differ from the trainer"
else
    cat "$work/delta.log"; bad "the --delta / token_truncate run"
fi

# vespo (TRL's gamma-weighted loss) with the token correction its rule needs
if "$posttrain" grpo --model "$model" --data "$work/data.jsonl" --reward contains --num-generations 4 --batch-prompts 2 \
       --max-new-tokens 5 --steps 1 --lr 1e-3 --num-iterations 2 --loss-type vespo --vespo-k-neg 2.5 \
       --importance-sampling-correction token_mask --out "$work/vespo" 2>"$work/vespo.log" &&
   python3 - "$work/vespo/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"goodput"' not in l][0]
assert 0 < r["vespo/phi_seq_mean"] <= 1.0001, r
assert "cispo_clip_ratio" not in r
PY
then
    ok "--loss-type vespo with token_mask runs and reports vespo/phi_seq_mean"
else
    cat "$work/vespo.log"; bad "the vespo run"
fi

# A runaway learning rate: 3 updates in a row skipped as non-finite stop the
# run (exit 1, why, no model); the metrics keep the rows up to that step.
if "$posttrain" "${run[@]}" --steps 20 --lr 1e30 --threads 1 --max-skipped-steps 3 --out "$work/runaway" \
       2>"$work/runaway.log"; then
    bad "grpo --lr 1e30 exited 0"
elif grep -q "posttrain grpo: stopped at step [0-9]*: 3 optimizer updates in a row were skipped as non-finite" "$work/runaway.log" &&
     [ ! -e "$work/runaway/model.safetensors" ] &&
     [ "$(tail -n 3 "$work/runaway/metrics.jsonl" | grep -c '"skipped": true')" -eq 3 ]; then
    ok "grpo --lr 1e30 --max-skipped-steps 3: stopped, said why, no model, the last 3 rows skipped"
else
    cat "$work/runaway.log"; bad "grpo --lr 1e30 --max-skipped-steps 3"
fi
if "$posttrain" "${run[@]}" --steps 2 --threads 1 --out "$work/sound" 2>"$work/sound.log" &&
   grep -q "saved the model to $work/sound after 2 steps (0 optimizer updates skipped)" "$work/sound.log"; then
    ok "the final line gives the skip count"
else
    cat "$work/sound.log"; bad "the final line's skip count"
fi

usage_error() {   # expected message, then arguments
    local want=$1; shift
    "$posttrain" grpo "$@" >/dev/null 2>"$work/err.txt"
    local rc=$?
    if [ $rc -ne 0 ] && grep -qF -- "$want" "$work/err.txt"; then
        ok "bad option ($*): exit $rc, '$want'"
    else
        echo "  got exit $rc: $(cat "$work/err.txt")"; bad "bad option ($*)"
    fi
}
base=(--model "$model" --data "$work/data.jsonl" --out "$work/x")
usage_error "--reward is required" "${base[@]}"
usage_error "--delta must be 0 (off) or above 1 + --epsilon-high (1.2)" "${base[@]}" --reward exact --delta 1.1
usage_error "--delta does not apply to --loss-type cispo" "${base[@]}" --reward exact --loss-type cispo \
    --epsilon-high 5 --delta 8
usage_error "--loss-type cispo needs --epsilon-high > 0" "${base[@]}" --reward exact --loss-type cispo \
    --epsilon-high 0
usage_error "--importance-sampling-clip-min must be below --importance-sampling-clip-max" "${base[@]}" \
    --reward exact --importance-sampling-clip-min 3
usage_error "--importance-sampling-clip-max needs a number >= 0 or inf, not 'x'" "${base[@]}" --reward exact \
    --importance-sampling-clip-max x
usage_error "--importance-sampling-clip-min needs a number >= 0, not 'inf'" "${base[@]}" --reward exact \
    --importance-sampling-clip-min inf
usage_error "--importance-sampling-correction token_truncate needs --importance-sampling-clip-min > 0" \
    "${base[@]}" --reward exact --importance-sampling-correction token_truncate --importance-sampling-clip-max inf
usage_error "--top-entropy-quantile needs a number in [0, 1], not '2'" "${base[@]}" --reward exact \
    --top-entropy-quantile 2
usage_error "unknown reward 'bleu'" "${base[@]}" --reward bleu
usage_error "the weight 'heavy' is not a number" "${base[@]}" --reward exact:heavy
usage_error "--loss-type: unknown loss type 'ppo' (one of: grpo, bnpo, dapo, dr_grpo, cispo, vespo)" "${base[@]}" --reward exact --loss-type ppo
usage_error "--loss-type vespo needs --importance-sampling-correction token_truncate, token_mask or none" \
    "${base[@]}" --reward exact --loss-type vespo
usage_error "--delta does not apply to --loss-type vespo" "${base[@]}" --reward exact --loss-type vespo \
    --importance-sampling-correction none --delta 8
usage_error "--vespo-k-pos needs a number in [0, 1e+06]" "${base[@]}" --reward exact --vespo-k-pos -1
usage_error "--entropy-coef-min must not be above --entropy-coef-max" "${base[@]}" --reward exact \
    --use-adaptive-entropy --entropy-coef-min 2
usage_error "--scale-rewards: unknown reward scaling 'max' (one of: group, batch, none, rloo)" "${base[@]}" --reward exact --scale-rewards max
usage_error "--num-generations needs an integer in [2, 1024]" "${base[@]}" --reward exact --num-generations 1
usage_error "--lr needs a number" "${base[@]}" --reward exact --lr fast
usage_error "--epsilon needs a number in" "${base[@]}" --reward exact --epsilon -1
usage_error "unknown option '--frobnicate'" "${base[@]}" --reward exact --frobnicate 1
usage_error "--model, --data and --out are required" --reward exact
usage_error "--steps needs a value" "${base[@]}" --reward exact --steps
usage_error "missing.jsonl" --model "$model" --data "$work/missing.jsonl" --out "$work/x" --reward exact
printf '{"prompt": "1+1="}\n' > "$work/noanswer.jsonl"
usage_error 'line 1: needs a string "answer"' --model "$model" --data "$work/noanswer.jsonl" --out "$work/x" --reward exact
printf '{"prompt": "1+1=", "answer": "2"}\nnot json\n' > "$work/badjson.jsonl"
usage_error "line 2: not valid JSON" --model "$model" --data "$work/badjson.jsonl" --out "$work/x" --reward exact
printf '{"prompt": "1+1=", "answer": "2"} junk\n' > "$work/trailing.jsonl"
usage_error "line 1: unexpected data after the JSON value" --model "$model" --data "$work/trailing.jsonl" --out "$work/x" --reward exact
printf '{"prompt": "1+1=\xff", "answer": "2"}\n' > "$work/badutf8.jsonl"
usage_error 'line 1: "prompt" is not valid UTF-8' --model "$model" --data "$work/badutf8.jsonl" --out "$work/x" --reward exact
usage_error "/dev/zero line 1: the line contains a NUL byte" --model "$model" --data /dev/zero --out "$work/x" --reward exact
usage_error "$work/nomodel" --model "$work/nomodel" --data "$work/data.jsonl" --out "$work/x" --reward exact

stories=$shared/models/stories260K
if [ -f "$stories/model.safetensors" ]; then
    printf '{"prompt": "Once upon a time", "answer": "there"}\n{"prompt": "Lily and Tom", "answer": "park"}\n' \
        > "$work/stories.jsonl"
    if "$posttrain" grpo --model "$stories" --data "$work/stories.jsonl" --reward contains,length:0.1 \
           --num-generations 4 --batch-prompts 2 --max-new-tokens 16 --steps 2 --lr 1e-4 --seed 1 --threads 2 \
           --out "$work/stories" 2>"$work/stories.log" && "$posttrain" info "$work/stories" >/dev/null 2>&1 &&
       [ "$(grep -vc '"goodput"' "$work/stories/metrics.jsonl")" -eq 2 ]; then
        ok "stories260K: 2 steps, metrics and a loadable model"
    else
        cat "$work/stories.log"; bad "stories260K run"
    fi
else
    echo "SKIP stories260K run: $stories not found"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
