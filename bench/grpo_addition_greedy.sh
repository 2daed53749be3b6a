#!/bin/sh
# Greedy against sampled accuracy under GRPO (docs/grpo.md, "Greedy and
# sampled accuracy"): stories260K fine-tuned by SFT on 2-digit addition
# (answer digits least-significant first, as `posttrain demo`) and stopped
# part way (step 350 of an 850-step cosine run: greedy about 75%, sampled
# about 50% on held-out problems), then GRPO with the exact reward under
# several settings; held-out greedy and sampled accuracy from --eval, and
# per problem (posttrain generate, greedy and 16 samples at T=1) which
# problems moved.
#
#   bench/grpo_addition_greedy.sh [BUILD_DIR [MODEL_DIR [WORK_DIR]]]
#
# Environment: JOBS (runs at once, default 2), SETTINGS (default below:
# NAME:options pairs separated by spaces, options joined by commas),
# SFT_ROWS (SFT on the first N training problems, default all 9376),
# SFT_STEP (start from the SFT checkpoint of that step, default 350; 850:
# the converged model).  docs/grpo.md quotes the defaults and SFT_ROWS=1000
# SFT_STEP=850 (converged on 1000 problems: held-out errors made with
# confidence).
set -eu
build=${1:-build}
model=${2:-../shared/data/models/stories260K}
work=${3:-$(mktemp -d)}
bin="$build/cli/posttrain"
JOBS=${JOBS:-2}
SFT_ROWS=${SFT_ROWS:-0}
SFT_STEP=${SFT_STEP:-350}
SETTINGS=${SETTINGS:-"lr1e-5:--lr,1e-5 lr1e-4:--lr,1e-4 lr1e-3:--lr,1e-3 lr1e-4x3:--lr,1e-4,--steps,120 \
lr1e-4-T1.5:--lr,1e-4,--temperature,1.5 lr1e-4-G16:--lr,1e-4,--num-generations,16"}
[ -x "$bin" ] || { echo "no $bin: build first" >&2; exit 1; }
mkdir -p "$work"
echo "work directory: $work" >&2

# the problems: every a+b with a, b < 100; 1/16 held out (200 of them evaluated)
python3 - "$work" "$SFT_ROWS" <<'EOF'
import json, random, sys
random.seed(7)
tr, ev = [], []
for a in range(100):
    for b in range(100):
        (ev if random.random() < 1 / 16 else tr).append((f"{a:02d}+{b:02d}=", f"{a + b:03d}"[::-1]))
random.shuffle(tr)
w = sys.argv[1]
with open(f"{w}/sft.jsonl", "w") as f:
    for p, s in tr[:int(sys.argv[2]) or len(tr)]:
        f.write(json.dumps({"prompt": p, "completion": s}) + "\n")
with open(f"{w}/train.jsonl", "w") as f:
    for p, s in tr[:2000]:
        f.write(json.dumps({"prompt": p, "answer": s}) + "\n")
with open(f"{w}/eval.jsonl", "w") as f:
    for p, s in ev[:200]:
        f.write(json.dumps({"prompt": p, "answer": s}) + "\n")
EOF

# SFT, checkpointed at step SFT_STEP of 850, that checkpoint as the start
if [ ! -f "$work/sft.gguf" ]; then
    "$bin" --threads 1 sft --model "$model" --data "$work/sft.jsonl" --out "$work/sft" --overwrite --lr 3e-3 \
        --schedule cosine --warmup-steps 50 --batch-size 64 --steps 850 --save-every "$SFT_STEP" --log-every 50 \
        > "$work/sft.log" 2>&1
    "$bin" export --checkpoint "$work/sft/checkpoints/step-$(printf %08d "$SFT_STEP")" --out "$work/sft.gguf" --spm-scores merges \
        >> "$work/sft.log" 2>&1
fi

run() { # run NAME OPTIONS(comma-joined); a finished run is kept
    name=$1
    [ -f "$work/$name/model.safetensors" ] && return 0
    opts=$(echo "$2" | tr ',' ' ')
    # shellcheck disable=SC2086
    "$bin" --threads 1 grpo --model "$work/sft.gguf" --data "$work/train.jsonl" --eval "$work/eval.jsonl" \
        --eval-every 10 --eval-samples 8 --reward exact --max-new-tokens 4 --num-generations 8 --batch-prompts 8 \
        --steps 40 --seed 1 --out "$work/$name" --overwrite $opts > "$work/$name.log" 2>&1 ||
        { echo "run $name failed: $work/$name.log" >&2; return 1; }
}
pids=""
for s in $SETTINGS; do
    run "${s%%:*}" "${s#*:}" &
    pids="$pids $!"
    if [ "$(echo $pids | wc -w)" -ge "$JOBS" ]; then
        for p in $pids; do wait "$p"; done
        pids=""
    fi
done
for p in $pids; do wait "$p"; done

python3 - "$work" "$bin" "$SETTINGS" <<'EOF'
import json, os, subprocess, sys
work, bin_, settings = sys.argv[1], sys.argv[2], [s.split(":")[0] for s in sys.argv[3].split()]
ev = [json.loads(l) for l in open(f"{work}/eval.jsonl")]

def per_problem(model):
    """Per held-out problem: greedy correct, and the fraction of 16 samples at T=1 that are."""
    out = []
    for r in ev:
        def gen(*extra):
            p = subprocess.run([bin_, "--threads", "1", "generate", "--model", model, "--prompt", r["prompt"],
                                "--max-new-tokens", "4", *extra], capture_output=True, text=True, check=True)
            return p.stdout
        g = gen("--temperature", "0").strip() == r["answer"]
        txt = gen("--temperature", "1", "--num-samples", "16", "--seed", "5")
        samples = [s.strip() for s in txt.split("\n") if not s.startswith("---")]
        # a sample's text is the lines after its header; 4 tokens never span lines here
        hits = sum(1 for s in samples if s == r["answer"])
        out.append((g, hits / 16))
    return out

base = per_problem(f"{work}/sft.gguf")
right = [i for i, (g, _) in enumerate(base) if g]
wrong = [i for i, (g, _) in enumerate(base) if not g]
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
print(f"start: {len(right)} of {len(ev)} held-out problems greedy-correct; sampled accuracy (16 at T=1) on them "
      f"{mean([base[i][1] for i in right]):.3f}, on the greedy-wrong ones {mean([base[i][1] for i in wrong]):.3f}")
print("\n| setting | eval greedy step 0 -> end | eval sampled (8 at the run's T) | zero-std groups (mean over steps) "
      "| greedy-right: sampled acc before -> after | greedy-wrong: sampled acc before -> after | greedy flips wrong->right / right->wrong |")
print("|---|---|---|---|---|---|---|")
for name in settings:
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    e = [r for r in rows if "eval/prompts" in r]
    t = [r for r in rows if "frac_reward_zero_std" in r]
    zs = mean([r["frac_reward_zero_std"] for r in t])
    after = per_problem(f"{work}/{name}")
    up = sum(1 for i in wrong if after[i][0])
    down = sum(1 for i in right if not after[i][0])
    print(f"| {name} | {e[0]['eval/accuracy_greedy']:.3f} -> {e[-1]['eval/accuracy_greedy']:.3f} | "
          f"{e[0]['eval/accuracy_sampled']:.3f} -> {e[-1]['eval/accuracy_sampled']:.3f} | {zs:.2f} | "
          f"{mean([base[i][1] for i in right]):.3f} -> {mean([after[i][1] for i in right]):.3f} | "
          f"{mean([base[i][1] for i in wrong]):.3f} -> {mean([after[i][1] for i in wrong]):.3f} | {up} / {down} |")
    # the greedy-wrong problems by their sampled accuracy at the start:
    # how many of each bucket the run flipped to greedy-right
    buckets = [("p=0", lambda p: p == 0), ("0<p<0.25", lambda p: 0 < p < 0.25),
               ("0.25<=p<0.5", lambda p: 0.25 <= p < 0.5), ("p>=0.5", lambda p: p >= 0.5)]
    cells = []
    for label, inb in buckets:
        ids = [i for i in wrong if inb(base[i][1])]
        cells.append(f"{label}: {sum(1 for i in ids if after[i][0])}/{len(ids)}")
    print("    greedy-wrong problems flipped, by sampled accuracy p at the start: " + ", ".join(cells))
    print("    curve (step: greedy / sampled): " + ", ".join(
        f"{r['step']}: {r['eval/accuracy_greedy']:.3f} / {r['eval/accuracy_sampled']:.3f}" for r in e))
EOF
