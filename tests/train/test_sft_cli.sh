#!/usr/bin/env bash
# posttrain sft end to end on a committed tiny model (tests/reference/llama_tied_gqa):
# 1. one plain SGD step equals "weights minus the gradient";
# 2. N steps in one process equal k steps, checkpoint, exit, resume to N in a
#    new process (bit-identical weights and losses);
# 3. a damaged checkpoint is refused; bad options are usage errors.
set -euo pipefail
posttrain=$1 check=$2 model=$3
work=$(mktemp -d /tmp/pt_sft_cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

echo '{"input_ids": [1, 5, 9, 33, 17, 2, 40, 7, 7, 12]}' > "$work/one.jsonl"
if "$posttrain" --threads 2 sft --model "$model" --data "$work/one.jsonl" --out "$work/sgd" \
      --optimizer sgd --lr 1 --momentum 0 --weight-decay 0 --max-grad-norm 0 --steps 1 --batch-size 1 \
      2>"$work/sgd.log" && "$check" "$model" "$work/sgd" "$work/one.jsonl"; then
    ok "one SGD step is weights minus the gradient"
else
    cat "$work/sgd.log"; bad "one SGD step"
fi

for i in $(seq 0 11); do
    printf '{"input_ids": [1, %d, %d, %d, %d, %d, 2], "loss_mask": [0, 0, 1, 1, 1, 1, 1]}\n' \
        $((i % 50 + 3)) $((i * 7 % 50 + 3)) $((i * 3 % 50 + 3)) $((i * 11 % 50 + 3)) $((i * 13 % 50 + 3))
done > "$work/data.jsonl"
common=(sft --model "$model" --data "$work/data.jsonl" --optimizer adamw --lr 0.01 --weight-decay 0.1
        --schedule cosine --warmup-steps 2 --steps 8 --batch-size 3 --grad-accum 2 --seed 5 --save-every 3)
"$posttrain" --threads 2 "${common[@]}" --out "$work/full" 2>"$work/full.log"
"$posttrain" --threads 2 "${common[@]}" --out "$work/resumed" \
    --resume "$work/full/checkpoints/step-00000003" 2>"$work/resumed.log"
if cmp -s "$work/full/model.safetensors" "$work/resumed/model.safetensors"; then
    ok "resumed run ends with bit-identical weights"
else
    bad "resumed weights differ"
fi
if cmp -s "$work/full/checkpoints/step-00000006/optimizer.safetensors" \
          "$work/resumed/checkpoints/step-00000006/optimizer.safetensors"; then
    ok "resumed run has bit-identical optimizer moments at step 6"
else
    bad "resumed optimizer state differs"
fi
"$posttrain" --threads 2 "${common[@]}" --gradient-checkpointing --out "$work/ckpt" 2>"$work/ckpt.log"
if cmp -s "$work/full/model.safetensors" "$work/ckpt/model.safetensors"; then
    ok "--gradient-checkpointing ends with bit-identical weights"
else
    cat "$work/ckpt.log"; bad "--gradient-checkpointing weights differ"
fi
losses() { grep -o '"step": [0-9]*, "loss": [0-9.e+-]*' "$1" | awk -F'[:,]' '$2 > 3 {print $2, $4}'; }
if [ "$(losses "$work/full/metrics.jsonl")" = "$(losses "$work/resumed/metrics.jsonl")" ] &&
   [ "$(losses "$work/full/metrics.jsonl" | wc -l)" -eq 5 ]; then
    ok "losses of steps 4-8 are identical after resume"
else
    bad "losses differ after resume"
fi

lora=(sft --model "$model" --data "$work/data.jsonl" --lr 0.01 --steps 6 --batch-size 3 --seed 2
      --lora-rank 4 --lora-alpha 8 --lora-targets all --save-every 3)
"$posttrain" --threads 2 "${lora[@]}" --out "$work/lora" 2>"$work/lora.log"
"$posttrain" --threads 2 "${lora[@]}" --out "$work/lora2" --resume "$work/lora/checkpoints/step-00000003" \
    2>"$work/lora2.log"
if [ -f "$work/lora/adapter/adapter_config.json" ] && [ -f "$work/lora/adapter/adapter_model.safetensors" ] &&
   ! cmp -s "$work/lora/model.safetensors" "$model/model.safetensors" &&
   cmp -s "$work/lora/adapter/adapter_model.safetensors" "$work/lora2/adapter/adapter_model.safetensors" &&
   cmp -s "$work/lora/model.safetensors" "$work/lora2/model.safetensors"; then
    ok "LoRA: PEFT adapter and merged model saved; resume is bit-identical"
else
    cat "$work/lora.log" "$work/lora2.log"; bad "LoRA run"
fi
if [ "$(stat -c %s "$work/lora/checkpoints/step-00000003/model.safetensors")" -lt \
     "$(stat -c %s "$model/model.safetensors")" ]; then
    ok "LoRA checkpoints hold the adapters only"
else
    bad "LoRA checkpoint holds the base"
fi

printf 'x' >> "$work/full/checkpoints/step-00000003/trainer_state.json"
if "$posttrain" "${common[@]}" --out "$work/again" --resume "$work/full/checkpoints/step-00000003" \
      2>"$work/damaged.log"; then
    bad "a damaged checkpoint was accepted"
elif grep -q "PT_ECHECKSUM" "$work/damaged.log"; then
    ok "a damaged checkpoint is refused with PT_ECHECKSUM"
else
    cat "$work/damaged.log"; bad "damaged checkpoint: wrong error"
fi
# Kill -9 while checkpoints are being written: every step-* directory that
# exists must be complete and resumable (partial ones only under .tmp names).
killed_ok=1
for delay in 0.3 0.7 1.1; do
    rm -rf "$work/kill"
    "$posttrain" --threads 1 sft --model "$model" --data "$work/data.jsonl" --out "$work/kill" \
        --steps 100000 --batch-size 3 --save-every 1 2>/dev/null &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    last=$(ls -d "$work/kill/checkpoints/step-"* 2>/dev/null | grep -v '\.tmp' | tail -n 1)
    [ -n "$last" ] || continue
    n=$(basename "$last" | sed 's/step-0*//')
    if ! "$posttrain" --threads 1 sft --model "$model" --data "$work/data.jsonl" --out "$work/kill-resume" \
            --steps $((n + 1)) --batch-size 3 --resume "$last" 2>"$work/kill.log"; then
        cat "$work/kill.log"; killed_ok=0
    fi
    rm -rf "$work/kill-resume"
done
[ "$killed_ok" -eq 1 ] && ok "kill -9 during checkpointing leaves every checkpoint loadable" || bad "kill -9 checkpoint"

set +e
"$posttrain" sft --model "$model" --data "$work/data.jsonl" --out "$work/x" --lr fast 2>/dev/null
[ $? -eq 2 ] && ok "a bad option value is a usage error" || bad "bad option value"
"$posttrain" sft --model "$model" --data "$work/missing.jsonl" --out "$work/x" 2>"$work/missing.log"
[ $? -eq 1 ] && grep -q "missing.jsonl" "$work/missing.log" && ok "a missing data file is named" || bad "missing data file"
set -e
# LoRA on a BF16 base (--bf16: the base read straight into BF16 and frozen).
# On the avx2 path its products widen the BF16 weights to FP32, so with the
# activations kept in FP32 (--fp32-activations) the adapter is the one trained
# on the same values in FP32 (tests/train/round_bf16.py), bit for bit; with
# the default BF16 activations (docs/bf16.md, "Memory") close, not equal.
l16=(sft --data "$work/data.jsonl" --lr 0.01 --steps 4 --batch-size 3 --seed 2 --lora-rank 4
     --lora-alpha 8 --lora-targets all)
if python3 "$(dirname "$0")/round_bf16.py" "$model" "$work/base16" 2>"$work/l16.log" &&
   PT_CPU=avx2 "$posttrain" --threads 2 "${l16[@]}" --model "$model" --bf16 --fp32-activations \
       --out "$work/l16" 2>>"$work/l16.log" &&
   PT_CPU=avx2 "$posttrain" --threads 2 "${l16[@]}" --model "$work/base16" --out "$work/l16g" \
       2>>"$work/l16.log" &&
   grep -q "BF16 on" "$work/l16.log" &&
   cmp -s "$work/l16/adapter/adapter_model.safetensors" "$work/l16g/adapter/adapter_model.safetensors"
then
    ok "sft --bf16 --fp32-activations with LoRA: the adapter of the same run on the BF16 values in FP32 (avx2 path)"
else
    cat "$work/l16.log"; bad "sft --bf16 --fp32-activations with LoRA"
fi
if PT_CPU=avx2 "$posttrain" --threads 2 "${l16[@]}" --model "$model" --bf16 --out "$work/l16b" \
       2>>"$work/l16.log" &&
   python3 "$(dirname "$0")/safetensors_close.py" "$work/l16b/adapter/adapter_model.safetensors" \
       "$work/l16g/adapter/adapter_model.safetensors" 2e-2 >>"$work/l16.log"
then
    ok "sft --bf16 with LoRA and BF16 activations: close to the FP32 run ($(tail -n 1 "$work/l16.log"); avx2 path)"
else
    cat "$work/l16.log"; bad "sft --bf16 with LoRA and BF16 activations"
fi
# Full fine-tuning with --bf16 keeps FP32 activations by default: on the
# avx2 path (no BF16 arithmetic) the run is the FP32 run bit for bit;
# --bf16-activations rounds them (close, not equal); both flags: a usage error.
f16=(sft --data "$work/data.jsonl" --lr 0.01 --steps 4 --batch-size 3 --seed 2)
if PT_CPU=avx2 "$posttrain" --threads 2 "${f16[@]}" --model "$model" --out "$work/f32" 2>"$work/f16.log" &&
   PT_CPU=avx2 "$posttrain" --threads 2 "${f16[@]}" --model "$model" --bf16 --out "$work/f16" \
       2>>"$work/f16.log" &&
   cmp -s "$work/f32/model.safetensors" "$work/f16/model.safetensors"
then
    ok "sft --bf16 full fine-tuning: FP32 activations by default, the FP32 run bit for bit (avx2 path)"
else
    cat "$work/f16.log"; bad "sft --bf16 full fine-tuning default activations"
fi
if PT_CPU=avx2 "$posttrain" --threads 2 "${f16[@]}" --model "$model" --bf16 --bf16-activations \
       --out "$work/f16b" 2>>"$work/f16.log" &&
   ! cmp -s "$work/f32/model.safetensors" "$work/f16b/model.safetensors" &&
   python3 "$(dirname "$0")/safetensors_close.py" "$work/f16b/model.safetensors" \
       "$work/f32/model.safetensors" 2e-2 >>"$work/f16.log"
then
    ok "sft --bf16 --bf16-activations: rounded activations, close to the FP32 run ($(tail -n 1 "$work/f16.log"))"
else
    cat "$work/f16.log"; bad "sft --bf16 --bf16-activations"
fi
set +e
"$posttrain" "${f16[@]}" --model "$model" --bf16 --bf16-activations --fp32-activations \
    --out "$work/f16c" 2>"$work/f16c.log"
[ $? -eq 2 ] && grep -q "not both" "$work/f16c.log" && ok "--fp32-activations with --bf16-activations: a usage error" ||
    bad "both activation flags"
set -e

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
