#!/bin/sh
# GRPO on a quantized base (issue 23): LoRA rank 8 on stories260K in Q8_0
# (tests/kernels/data/quant/stories192.q8_0.gguf, llama-quantize's file)
# with the built-in `contains` reward on the stories task of docs/grpo.md
# ("Does it learn?": 64 story openings to train on, 32 held out, the reward
# 1 when the 32-token continuation mentions a dog).  The held-out reward
# must rise: greedy from <= 0.1 at step 0 to >= 0.5 at step 15, sampled
# by at least 0.2, and a run resumed from its step-10 checkpoint must end
# with the same adapter bytes (measured: greedy 0 -> 1, sampled 0.008 -> 0.79
# in the release build, 0 -> 0.69 and 0.008 -> 0.25 in the ASan build on a
# Zen 5, whose other rounding takes RL on this small model elsewhere; the
# FP32 model's LoRA runs reach 0.59-0.91 sampled at step 15 over three
# seeds).  A run that does not learn stays at 0 and 0.01.
set -eu
posttrain=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The openings of bench/grpo_stories_curves.sh: 16 names x 6 templates, in a
# fixed order (every 3rd of the 96 held out).
i=0
for t in "Once upon a time, there was a little girl named %s. She" \
         "Once upon a time, there was a little boy named %s. He" "One day, %s went to the" \
         "%s was very happy. %s wanted to" "Once upon a time, %s and her mom went to the" \
         "It was a sunny day. %s looked outside and saw"; do
    for n in Lily Tom Sue Ben Anna Max Mia Sam Lucy Jack Emma Tim Zoe Leo Kate Bob; do
        p=$(printf "$t" "$n" "$n")
        row=$(printf '{"prompt":"%s","answer":"dog"}' "$p")
        if [ $((i % 3)) -eq 2 ]; then echo "$row" >> "$work/eval.jsonl"; else echo "$row" >> "$work/train.jsonl"; fi
        i=$((i + 1))
    done
done

"$posttrain" --threads 1 grpo --model "$data/stories192.q8_0.gguf" --data "$work/train.jsonl" \
    --eval "$work/eval.jsonl" --eval-every 15 --eval-samples 4 --out "$work/run" --reward contains \
    --max-new-tokens 32 --num-generations 8 --batch-prompts 4 --steps 15 --lr 3e-3 --seed 1 \
    --lora-rank 8 --lora-targets all --save-every 10 2> "$work/log" || { cat "$work/log"; exit 1; }
[ -f "$work/run/adapter/adapter_model.safetensors" ] || { echo "FAIL: no adapter"; exit 1; }
# "step": S ... "eval/reward_mean_greedy": G ... "eval/reward_mean_sampled": R
grep '"eval/reward_mean_greedy"' "$work/run/metrics.jsonl" |
    sed 's/^{"step": \([0-9]*\),.*"eval\/reward_mean_greedy": \([0-9.e-]*\),.*"eval\/reward_mean_sampled": \([0-9.e-]*\),.*/\1 \2 \3/' \
    > "$work/eval.txt"
cat "$work/eval.txt"
awk 'NR == 1 { s0 = $1; g0 = $2; r0 = $3 } NR == 2 { s1 = $1; g1 = $2; r1 = $3 }
     END { if (NR != 2 || s0 != 0 || s1 != 15 || g0 > 0.1 || g1 < 0.5 || r1 - r0 < 0.2) {
               print "FAIL: the held-out reward did not rise (step greedy sampled above)"; exit 1 }
           printf "GRPO on Q8_0: held-out reward greedy %g -> %g, sampled %g -> %g\n", g0, g1, r0, r1 }' \
    "$work/eval.txt"

# checkpoints and resume on the quantized base: a second run that starts from
# the first one's step-10 checkpoint ends with the same adapter bytes
"$posttrain" --threads 1 grpo --model "$data/stories192.q8_0.gguf" --data "$work/train.jsonl" \
    --out "$work/resumed" --reward contains --max-new-tokens 32 --num-generations 8 --batch-prompts 4 \
    --steps 15 --lr 3e-3 --seed 1 --lora-rank 8 --lora-targets all \
    --resume "$work/run/checkpoints/step-00000010" 2> "$work/log2" || { cat "$work/log2"; exit 1; }
cmp "$work/run/adapter/adapter_model.safetensors" "$work/resumed/adapter/adapter_model.safetensors" ||
    { echo "FAIL: the GRPO run resumed at step 10 ends with another adapter"; exit 1; }
echo "GRPO on Q8_0: resumed at step 10, the same adapter at step 15"
