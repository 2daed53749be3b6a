#!/bin/sh
# GRPO learning curves on stories260K (docs/grpo.md, "Does it learn?"):
# the verifiable reward `contains` (the completion mentions "dog"), full
# fine-tuning and LoRA, 3 seeds each, with held-out reward curves from
# --eval; and a learning-rate sweep of the full fine-tune.  Prints the
# tables docs/grpo.md quotes.
#
#   bench/grpo_stories_curves.sh [BUILD_DIR [MODEL_DIR [WORK_DIR]]]
#
# Environment: JOBS (runs at once, default 2), STEPS (default 30),
# EVAL_EVERY (default 5), SEEDS (default "1 2 3"), LRS (the sweep, default
# "1e-6 1e-5 1e-4 3e-4 1e-3"), LORA_LRS (the LoRA sweep, default "3e-4 1e-3
# 3e-3 1e-2"), LORA_LR (default 3e-3), FULL_LR (default 3e-4), SWEEP (0: skip
# the sweeps), CURVES (0: skip the seeds' runs).  Every run uses --threads 1.
set -eu
build=${1:-build}
model=${2:-../shared/data/models/stories260K}
work=${3:-$(mktemp -d)}
bin="$build/cli/posttrain"
JOBS=${JOBS:-2}
STEPS=${STEPS:-30}
EVAL_EVERY=${EVAL_EVERY:-5}
SEEDS=${SEEDS:-"1 2 3"}
LRS=${LRS:-"1e-6 1e-5 1e-4 3e-4 1e-3"}
LORA_LR=${LORA_LR:-3e-3}
LORA_LRS=${LORA_LRS:-"3e-4 1e-3 3e-3 1e-2"}
CURVES=${CURVES:-1}
FULL_LR=${FULL_LR:-3e-4}
SWEEP=${SWEEP:-1}
[ -x "$bin" ] || { echo "no $bin: build first (meson setup $build && ninja -C $build)" >&2; exit 1; }
[ -f "$model/config.json" ] || { echo "no model in $model" >&2; exit 1; }
mkdir -p "$work"
echo "work directory: $work" >&2

# 96 story openings (16 names x 6 templates), shuffled with a fixed seed:
# 64 to train on, 32 held out.  Every row's answer is "dog".
python3 - "$work" <<'EOF'
import json, random, sys
names = ["Lily", "Tom", "Sue", "Ben", "Anna", "Max", "Mia", "Sam", "Lucy", "Jack", "Emma", "Tim", "Zoe", "Leo",
         "Kate", "Bob"]
tmpl = ["Once upon a time, there was a little girl named {n}. She",
        "Once upon a time, there was a little boy named {n}. He",
        "One day, {n} went to the",
        "{n} was very happy. {n} wanted to",
        "Once upon a time, {n} and her mom went to the",
        "It was a sunny day. {n} looked outside and saw"]
rows = [t.format(n=n) for t in tmpl for n in names]
random.seed(3)
random.shuffle(rows)
for name, part in (("train", rows[:64]), ("eval", rows[64:])):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for p in part:
            f.write(json.dumps({"prompt": p, "answer": "dog"}) + "\n")
EOF

# run NAME SEED LR [extra options]: one GRPO run in $work/NAME
run() {
    name=$1 seed=$2 lr=$3
    shift 3
    "$bin" --threads 1 grpo --model "$model" --data "$work/train.jsonl" --eval "$work/eval.jsonl" \
        --eval-every "$EVAL_EVERY" --eval-samples 4 --out "$work/$name" --overwrite --reward contains \
        --max-new-tokens 32 --num-generations 8 --batch-prompts 4 --steps "$STEPS" --lr "$lr" --seed "$seed" \
        "$@" > "$work/$name.log" 2>&1 || { echo "run $name failed: $work/$name.log" >&2; return 1; }
}

# the runs, JOBS at a time
pids=""
launch() {
    run "$@" &
    pids="$pids $!"
    if [ "$(echo $pids | wc -w)" -ge "$JOBS" ]; then
        for p in $pids; do wait "$p"; done
        pids=""
    fi
}
t0=$(date +%s)
if [ "$CURVES" != 0 ]; then
    for s in $SEEDS; do
        launch "full-s$s" "$s" "$FULL_LR"
        launch "lora-s$s" "$s" "$LORA_LR" --lora-rank 8 --lora-targets all
    done
fi
if [ "$SWEEP" != 0 ]; then
    for lr in $LRS; do
        launch "lr-$lr" 1 "$lr"
    done
    for lr in $LORA_LRS; do
        launch "lora-lr-$lr" 1 "$lr" --lora-rank 8 --lora-targets all
    done
fi
for p in $pids; do wait "$p"; done
echo "all runs: $(( $(date +%s) - t0 )) s wall" >&2

python3 - "$work" "$SEEDS" "$LRS" "$SWEEP" "$LORA_LRS" "$CURVES" <<'EOF'
import json, os, statistics, sys
work, seeds, lrs, sweep = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4] != "0"
lora_lrs, curves = sys.argv[5].split(), sys.argv[6] != "0"

def rows(name):
    ev, tr = {}, {}
    with open(os.path.join(work, name, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "goodput" in r:
                continue
            if "eval/reward_mean_greedy" in r:
                ev[r["step"]] = r
            elif "reward" in r:
                tr[r["step"]] = r
    return ev, tr

def sd(xs):
    return statistics.stdev(xs) if len(xs) > 1 else 0.0

for kind in ("full", "lora") if curves else ():
    runs = {s: rows(f"{kind}-s{s}") for s in seeds}
    steps = sorted(runs[seeds[0]][0])
    print(f"\n{kind}: held-out reward (fraction of completions containing 'dog'), sampled T=1 (4 per prompt) / greedy")
    print("| step | " + " | ".join(f"seed {s}" for s in seeds) + " | mean sampled | std sampled | mean greedy |")
    print("|---" * (len(seeds) + 4) + "|")
    for st in steps:
        samp = [runs[s][0][st]["eval/reward_mean_sampled"] for s in seeds]
        gr = [runs[s][0][st]["eval/reward_mean_greedy"] for s in seeds]
        cells = " | ".join(f"{a:.3f} / {b:.3f}" for a, b in zip(samp, gr))
        print(f"| {st} | {cells} | {statistics.mean(samp):.3f} | {sd(samp):.3f} | {statistics.mean(gr):.3f} |")
    # the training reward of the first step: the noise of one step's batch
    first = [runs[s][1][1]["reward"] for s in seeds]
    last = steps[-1]
    gain = [runs[s][0][last]["eval/reward_mean_sampled"] - runs[s][0][0]["eval/reward_mean_sampled"] for s in seeds]
    print(f"training reward at step 1 across seeds: mean {statistics.mean(first):.3f} std {sd(first):.3f}; "
          f"held-out sampled gain by step {last}: mean {statistics.mean(gain):.3f} std {sd(gain):.3f}")
    secs = []
    for s in seeds:
        with open(os.path.join(work, f"{kind}-s{s}.log")) as f:
            for line in f:
                if "goodput" in line and "wall" in line:
                    secs.append(float(line.split(" of ")[1].split(" s wall")[0]))
    if secs:
        print(f"wall per run: {min(secs):.0f}-{max(secs):.0f} s")

for what, prefix, sweep_lrs in (("full fine-tune", "lr-", lrs), ("LoRA rank 8, all targets", "lora-lr-", lora_lrs)):
    if not sweep:
        break
    print(f"\nlearning-rate sweep ({what}, seed 1): held-out sampled reward")
    print("| lr | step 0 | final | gain | greedy step 0 -> final |")
    print("|---|---|---|---|---|")
    for lr in sweep_lrs:
        ev, _ = rows(f"{prefix}{lr}")
        a, b = ev[min(ev)], ev[max(ev)]
        print(f"| {lr} | {a['eval/reward_mean_sampled']:.3f} | {b['eval/reward_mean_sampled']:.3f} | "
              f"{b['eval/reward_mean_sampled'] - a['eval/reward_mean_sampled']:+.3f} | "
              f"{a['eval/reward_mean_greedy']:.3f} -> {b['eval/reward_mean_greedy']:.3f} |")
EOF
