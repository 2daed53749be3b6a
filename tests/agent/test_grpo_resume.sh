#!/usr/bin/env bash
# posttrain grpo checkpoints and bit-exact resume on the committed tiny model
# (tests/reference/llama_tied_gqa with the character tokenizer of
# tiny_grpo_model.sh), 7 prompt rows and 2 prompts per step, so the pass over
# the rows ends inside step 4 (a resume at step 2 continues a shuffled order
# part way, at rows the shuffle moved, and then reshuffles):
# 1. 4 rounds in one run equal 2 rounds with --save-every 2 and then a new
#    process with --resume auto to 4: the same weights (cmp), the same
#    checkpoints at steps 2 and 4 (weights and optimizer moments), the
#    metrics rows of steps 1-4 each once and equal but for timing fields;
#    for a full fine-tune, for LoRA (and its adapter), for beta > 0 with
#    --num-iterations 2, and for the adaptive entropy control (its state);
# 2. --resume CHECKPOINT_DIR into a new --out with a cosine schedule and
#    warmup equals the uninterrupted run;
# 3. resuming wrongly changes the result: another --seed (with its warning),
#    a checkpoint whose cursor was edited (manifest re-hashed); an edited
#    order_rng is refused as inconsistent;
# 4. --resume auto on an empty --out starts fresh; a used --out is refused;
#    a bad --resume path, a mismatched --num-generations / --batch-prompts /
#    data, an sft checkpoint, and --resume with --overwrite are clear errors;
# 5. posttrain export --checkpoint of a grpo LoRA checkpoint gives the bytes
#    of the run's adapter.
# Usage: test_grpo_resume.sh POSTTRAIN REF_MODEL_DIR
set -uo pipefail
posttrain=$1 ref=$2
work=$(mktemp -d /tmp/pt_grpo_resume.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

model=$work/model
# shellcheck source=tiny_grpo_model.sh
. "$(dirname "$0")/tiny_grpo_model.sh"
tiny_grpo_model "$ref" "$model"
for i in 0 1 2 3 4 5 6; do
    printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $i $((i % 3)) $((i + i % 3))
done > "$work/data.jsonl"

noseed=(grpo --model "$model" --data "$work/data.jsonl" --reward exact,contains:0.5,length:0.1 --num-generations 4
        --batch-prompts 2 --max-new-tokens 6 --lr 1e-3 --threads 2)
base=("${noseed[@]}" --seed 3)

# The metrics rows without the timing fields, one JSON line per row; the steps.
rows() {
    python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "goodput" in r:
        continue
    for k in ("gen_tokens_per_s", "train_tokens_per_s", "step_seconds", "time"):
        r.pop(k)
    print(json.dumps(r, sort_keys=True))
PY
}
steps() { grep -v '"goodput"' "$1" | grep -o '"step": [0-9]*' | awk '{printf "%s ", $2}'; }

# resume_case NAME ARGS...: 4 rounds in one run (checkpoints every 2) against
# 2 rounds, then --resume auto to 4 in a new process.
resume_case() {
    local name=$1; shift
    local full=$work/$name-full res=$work/$name-res
    if ! "$posttrain" "${base[@]}" "$@" --steps 4 --save-every 2 --out "$full" 2>"$work/$name-full.log"; then
        cat "$work/$name-full.log"; bad "$name: the 4-round run failed"; return
    fi
    if ! "$posttrain" "${base[@]}" "$@" --steps 2 --save-every 2 --out "$res" 2>"$work/$name-res1.log" ||
       ! "$posttrain" "${base[@]}" "$@" --steps 4 --save-every 2 --out "$res" --resume auto \
           2>"$work/$name-res2.log"; then
        cat "$work/$name-res1.log" "$work/$name-res2.log"; bad "$name: the 2 + 2 rounds failed"; return
    fi
    grep -qF "resumed at step 2 from $res/checkpoints/step-00000002" "$work/$name-res2.log" &&
        [ "$(grep -c '^step [34]/4 ' "$work/$name-res2.log")" -eq 2 ] &&
        ! grep -q '^step [12]/4 ' "$work/$name-res2.log" &&
        ok "$name: the second process resumes at step 2 and runs steps 3 and 4" ||
        { cat "$work/$name-res2.log"; bad "$name: the resume log"; }
    cmp "$full/model.safetensors" "$res/model.safetensors" &&
        ok "$name: bit-identical weights after 4 rounds" || bad "$name: the resumed weights differ"
    local f same=1
    for f in step-00000002/model.safetensors step-00000004/model.safetensors step-00000004/optimizer.safetensors; do
        cmp -s "$full/checkpoints/$f" "$res/checkpoints/$f" || { same=0; echo "  $f differs"; }
    done
    [ "$same" -eq 1 ] && ok "$name: the checkpoints of steps 2 and 4 are identical (weights, optimizer moments)" ||
        bad "$name: the checkpoints differ"
    ! cmp -s "$full/checkpoints/step-00000002/model.safetensors" "$full/checkpoints/step-00000004/model.safetensors" &&
        ok "$name: steps 3 and 4 changed the weights (the comparison is not vacuous)" ||
        bad "$name: steps 3 and 4 left the weights as they were"
    [ "$(steps "$res/metrics.jsonl")" = "1 2 3 4 " ] &&
        ok "$name: the metrics hold steps 1-4, each once" || bad "$name: metrics steps $(steps "$res/metrics.jsonl")"
    [ "$(rows "$full/metrics.jsonl")" = "$(rows "$res/metrics.jsonl")" ] && [ -n "$(rows "$full/metrics.jsonl")" ] &&
        ok "$name: the metrics rows equal the uninterrupted run's but for timing" ||
        { diff <(rows "$full/metrics.jsonl") <(rows "$res/metrics.jsonl"); bad "$name: the metrics rows differ"; }
}

resume_case plain
resume_case lora --lora-rank 2 --lora-targets all
if cmp -s "$work/lora-full/adapter/adapter_model.safetensors" "$work/lora-res/adapter/adapter_model.safetensors" &&
   [ "$(stat -c %s "$work/lora-full/checkpoints/step-00000002/model.safetensors")" -lt \
     "$(stat -c %s "$model/model.safetensors")" ]; then
    ok "lora: the PEFT adapters are identical; the checkpoints hold the adapters only"
else
    bad "lora: adapters or checkpoint contents"
fi
resume_case beta --beta 0.05 --num-iterations 2 --loss-type dr_grpo
# TRL's adaptive entropy control: its coefficient and last entropy live in
# the checkpoint (the tiny model's entropy is below the target 10, so the
# coefficient grows by 0.005 per update, 2 per round: 0.02, 0.03, 0.04, 0.05)
resume_case adaptive-entropy --entropy-coef 0.01 --use-adaptive-entropy --entropy-target 10 --num-iterations 2
if python3 - "$work/adaptive-entropy-res/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"goodput"' not in l]
got = [x["entropy_coef"] for x in r]
assert all(abs(g - w) < 1e-12 for g, w in zip(got, [0.02, 0.03, 0.04, 0.05])) and len(got) == 4, got
PY
then
    ok "adaptive-entropy: the coefficient continues across the resume (0.02 .. 0.05)"
else
    bad "adaptive-entropy: the coefficient after the resume"
fi
if python3 -c 'import json, sys; r = [json.loads(l) for l in open(sys.argv[1])]; assert any(x.get("kl", 0) > 0 for x in r[2:]), r' \
       "$work/beta-res/metrics.jsonl" 2>/dev/null; then
    ok "beta: the resumed steps have kl > 0 (the reference model was loaded again)"
else
    bad "beta: no kl after the resume"
fi

# --resume DIR (another run's checkpoint) into a new --out, cosine with warmup.
cos=(--schedule cosine --warmup-steps 1 --num-iterations 2 --steps 4)
"$posttrain" "${base[@]}" "${cos[@]}" --save-every 2 --out "$work/cos" 2>"$work/cos.log"
if "$posttrain" "${base[@]}" "${cos[@]}" --out "$work/cos2" --resume "$work/cos/checkpoints/step-00000002" \
       2>"$work/cos2.log" && cmp "$work/cos/model.safetensors" "$work/cos2/model.safetensors" &&
   [ "$(steps "$work/cos2/metrics.jsonl")" = "3 4 " ] &&
   [ "$(rows "$work/cos/metrics.jsonl" | tail -n 2)" = "$(rows "$work/cos2/metrics.jsonl")" ]; then
    ok "--resume DIR into a new --out, cosine schedule with warmup: identical weights, metrics rows 3-4"
else
    cat "$work/cos.log" "$work/cos2.log"; bad "--resume DIR with a cosine schedule"
fi

# ---- a wrong resume changes the result ------------------------------------------------
ck2=$work/plain-full/checkpoints/step-00000002
if "$posttrain" "${noseed[@]}" --seed 4 --steps 4 --out "$work/seed" --resume "$ck2" 2>"$work/seed.log" &&
   grep -qF "warning: the checkpoint was made with --seed 3, resuming with 4" "$work/seed.log" &&
   ! cmp -s "$work/plain-full/model.safetensors" "$work/seed/model.safetensors"; then
    ok "resuming with another --seed warns and gives other weights"
else
    cat "$work/seed.log"; bad "resume with another --seed"
fi
# edit_host CKPT KEY VALUE: set host.KEY in a copy's trainer_state.json and
# re-hash it in MANIFEST.json (so only the edit differs).
edit_host() {
    python3 - "$1" "$2" "$3" <<'PY'
import hashlib, json, sys
d, key, value = sys.argv[1:]
p = d + "/trainer_state.json"
s = json.load(open(p))
s["host"][key] = json.loads(value)
data = json.dumps(s, indent="\t").encode()
open(p, "wb").write(data)
m = json.load(open(d + "/MANIFEST.json"))
m["files"]["trainer_state.json"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": str(len(data))}
open(d + "/MANIFEST.json", "w").write(json.dumps(m, indent="\t"))
PY
}
cp -r "$ck2" "$work/ck_cursor"
edit_host "$work/ck_cursor" cursor 0
if "$posttrain" "${base[@]}" --steps 4 --out "$work/cursor" --resume "$work/ck_cursor" 2>"$work/cursor.log" &&
   ! cmp -s "$work/plain-full/model.safetensors" "$work/cursor/model.safetensors"; then
    ok "a checkpoint with another prompt cursor resumes to other weights (the cursor is restored)"
else
    cat "$work/cursor.log"; bad "an edited cursor"
fi
cp -r "$ck2" "$work/ck_control"
edit_host "$work/ck_control" cursor 4
if "$posttrain" "${base[@]}" --steps 4 --out "$work/control" --resume "$work/ck_control" 2>"$work/control.log" &&
   cmp -s "$work/plain-full/model.safetensors" "$work/control/model.safetensors"; then
    ok "control: the same edit with the saved cursor (4) resumes to the same weights"
else
    cat "$work/control.log"; bad "the edit control"
fi

expect() {   # NAME CODE NEEDLE ARGS...: exit CODE and NEEDLE (fixed) on stderr
    local name=$1 code=$2 needle=$3; shift 3
    "$posttrain" "$@" >/dev/null 2>"$work/err.txt"
    local rc=$?
    if [ "$rc" -eq "$code" ] && grep -qF -- "$needle" "$work/err.txt"; then
        ok "$name: exit $rc, '$needle'"
    else
        echo "  got exit $rc: $(cat "$work/err.txt")"; bad "$name"
    fi
}
cp -r "$ck2" "$work/ck_rng"
edit_host "$work/ck_rng" order_rng '"12345"'
expect "an edited order_rng" 1 "its prompt order state is inconsistent" "${base[@]}" --steps 4 --out "$work/rng" \
    --resume "$work/ck_rng"

# ---- --resume auto, a used --out, errors ------------------------------------------------
expect "--resume auto on an empty --out" 0 "holds no run yet; starting at step 0" "${base[@]}" --steps 4 \
    --save-every 2 --out "$work/fresh" --resume auto
cmp -s "$work/plain-full/model.safetensors" "$work/fresh/model.safetensors" &&
    [ "$(steps "$work/fresh/metrics.jsonl")" = "1 2 3 4 " ] &&
    ok "--resume auto on an empty --out equals a fresh run" || bad "--resume auto on an empty --out"
expect "a used --out" 2 "give --resume auto to continue it or --overwrite to replace it" "${base[@]}" --steps 4 \
    --out "$work/fresh"
expect "--resume with --overwrite" 2 "give --resume or --overwrite, not both" "${base[@]}" --out "$work/fresh" \
    --resume auto --overwrite
expect "a bad --resume path" 1 "checkpoint directory $work/nowhere does not exist" "${base[@]}" --steps 4 \
    --out "$work/bad1" --resume "$work/nowhere"
expect "--resume of a directory that is no checkpoint" 1 "MANIFEST.json" "${base[@]}" --steps 4 \
    --out "$work/bad2" --resume "$work/plain-full"
expect "a mismatched --num-generations" 1 \
    "was made with --num-generations 4, this run gives --num-generations 3: resume with --num-generations 4" \
    "${base[@]}" --num-generations 3 --steps 4 --out "$work/bad3" --resume "$ck2"
expect "a mismatched --batch-prompts" 1 "was made with --batch-prompts 2, this run gives --batch-prompts 3" \
    "${base[@]}" --batch-prompts 3 --steps 4 --out "$work/bad4" --resume "$ck2"
head -n 4 "$work/data.jsonl" > "$work/data4.jsonl"
expect "other data" 1 "was made with 7 prompt rows in --data, this run has 4" grpo --model "$model" \
    --data "$work/data4.jsonl" --reward exact,contains:0.5,length:0.1 --num-generations 4 --batch-prompts 2 \
    --max-new-tokens 6 --seed 3 --threads 2 --steps 4 --out "$work/bad5" --resume "$ck2"
expect "a LoRA checkpoint without --lora-rank" 1 "is of a LoRA run (rank 2): give that run's --lora-rank" "${base[@]}" --steps 4 --out "$work/bad6" \
    --resume "$work/lora-full/checkpoints/step-00000002"
printf '{"input_ids": [1, 5, 9, 33, 17, 2]}\n{"input_ids": [1, 7, 8, 30, 2]}\n' > "$work/sft.jsonl"
"$posttrain" --threads 2 sft --model "$model" --data "$work/sft.jsonl" --out "$work/sft" --steps 1 --batch-size 1 \
    --save-every 1 2>/dev/null
expect "an sft checkpoint" 1 "is a checkpoint of sft, not of grpo" "${base[@]}" --steps 4 \
    --out "$work/bad7" --resume "$work/sft/checkpoints/step-00000001"
expect "a grpo checkpoint given to sft" 1 "is a checkpoint of grpo, not of sft" \
    sft --model "$model" --data "$work/sft.jsonl" --out "$work/bad8" --steps 2 --batch-size 1 --resume "$ck2"

# ---- export of a grpo checkpoint --------------------------------------------------------
if "$posttrain" export --checkpoint "$work/lora-full/checkpoints/step-00000004" --adapter-only --name Adapter \
       --out "$work/ck.gguf" 2>"$work/e.log" &&
   grep -qF "over $model with its LoRA adapters" "$work/e.log" &&
   "$posttrain" export --model "$model" --adapter "$work/lora-full/adapter" --name Adapter --out "$work/ad.gguf" \
       2>>"$work/e.log" && cmp "$work/ck.gguf" "$work/ad.gguf"; then
    ok "export --checkpoint --adapter-only of grpo's last checkpoint gives the bytes of OUT/adapter"
else
    cat "$work/e.log"; bad "export of a grpo checkpoint"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
