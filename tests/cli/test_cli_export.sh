#!/usr/bin/env bash
# posttrain export: tests/reference/llama_tied_gqa given a 61-token cut of
# the stories260K tokenizer (tests/modelio/data/stories260K), exported and
# read back with tests/cli/gguf_read.py (python3 standard library): the last
# line names the path, size and tensor count; --type and --name; the usage
# errors (exit 2); a model without tokenizer (exit 1, the old file kept);
# a LoRA run's adapter as a GGUF adapter (named after its directory) and
# merged; training checkpoints (--checkpoint, LoRA and full: the last one
# exports to the same bytes as the run's --out, --adapter-only to those of
# --adapter OUT/adapter); --spm-scores; stories260K when ../shared/data is
# present.
set -euo pipefail
posttrain=$1 src=$2
ref=$src/tests/reference/llama_tied_gqa fixture=$src/tests/modelio/data/stories260K
reader=$src/tests/cli/gguf_read.py
work=$(mktemp -d /tmp/pt_cli_export.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
# The reader's whole output goes to a file first (grep -q or awk stopping
# early would break the pipe under pipefail).
kv() { python3 "$reader" "$1" > "$work/kv.txt" && awk -F'\t' -v k="$2" '$1 == k { print $3 }' "$work/kv.txt"; }
has_line() { python3 "$reader" "$1" > "$work/has.txt" && grep -q -- "$2" "$work/has.txt"; }
count_tensors() { python3 "$reader" "$1" > "$work/cnt.txt" && grep -c '^tensor' "$work/cnt.txt"; }

model=$work/tiny-llama
mkdir -p "$model"
cp "$ref/model.safetensors" "$fixture/tokenizer_config.json" "$model/"
# head_dim spelled out, as the config.json sft writes to --out has it (the
# converter writes attention.key_length only when config.json names it), so
# that a checkpoint (metadata from this base) and the run's --out export alike
python3 - "$ref/config.json" "$model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1], encoding="utf-8"))
c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
json.dump(c, open(sys.argv[2], "w", encoding="utf-8"), indent=2)
PY
python3 - "$fixture/tokenizer.json" "$model/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["model"]["vocab"] = {k: v for k, v in t["model"]["vocab"].items() if v < 61}
t["model"]["merges"] = []
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY

out=$work/m.gguf
if "$posttrain" export --model "$model" --out "$out" 2>"$work/e.log" &&
   [ "$(tail -n 1 "$work/e.log")" = "posttrain export: wrote $out ($(stat -c %s "$out") bytes, 20 tensors)" ] &&
   [ "$(kv "$out" general.architecture)" = "'llama'" ] &&
   [ "$(kv "$out" general.name)" = "'Tiny Llama'" ] &&
   [ "$(kv "$out" general.file_type)" = 0 ] &&
   [ "$(kv "$out" tokenizer.ggml.tokens)" = 61 ] &&
   [ "$(count_tensors "$out")" -eq 20 ] &&
   ! has_line "$out" $'^tensor\toutput.weight'; then
    ok "export writes 20 tensors (tied: no output.weight) and says so"
else
    cat "$work/e.log"; bad "export of the tiny model"
fi

if "$posttrain" export --model "$model" --out "$work/h.gguf" --type f16 --name 'My Tiny' 2>"$work/e.log" &&
   [ "$(kv "$work/h.gguf" general.name)" = "'My Tiny'" ] &&
   [ "$(kv "$work/h.gguf" general.file_type)" = 1 ] &&
   has_line "$work/h.gguf" $'^tensor\tblk.0.attn_q.weight\tF16' &&
   has_line "$work/h.gguf" $'^tensor\tblk.0.attn_norm.weight\tF32'; then
    ok "--type f16 (norms stay F32) and --name"
else
    cat "$work/e.log"; bad "--type f16 --name"
fi

echo keep > "$work/keep.gguf"
expect() { # exit code, message, args...
    local code=$1 msg=$2 rc=0
    shift 2
    "$posttrain" export "$@" 2>"$work/err.log" || rc=$?
    if [ "$rc" -eq "$code" ] && grep -q -- "$msg" "$work/err.log" && [ "$(cat "$work/keep.gguf")" = keep ]; then
        ok "export $* fails with $code ($msg), the file untouched"
    else
        cat "$work/err.log"; bad "export $*: exit $rc, expected $code with '$msg'"
    fi
}
expect 2 '--out' --model "$model"
expect 2 'q4' --model "$model" --out "$work/keep.gguf" --type q4
expect 2 '--merge needs --adapter' --model "$model" --out "$work/keep.gguf" --merge
expect 2 'converter' --model "$model" --out "$work/keep.gguf" --spm-scores sentencepiece
expect 2 '--adapter-only needs --checkpoint' --model "$model" --out "$work/keep.gguf" --adapter-only
expect 2 'give --model' --out "$work/keep.gguf"
mkdir -p "$work/ckpt" && echo '{}' > "$work/ckpt/MANIFEST.json"
expect 2 'training checkpoint' --model "$work/ckpt" --out "$work/keep.gguf"
expect 1 'no tokenizer' --model "$ref" --out "$work/keep.gguf"
expect 1 'PT_ENOTFOUND' --model "$work/missing" --out "$work/keep.gguf"

echo '{"input_ids": [1, 5, 9, 33, 17, 2, 40, 7, 7, 12]}' > "$work/one.jsonl"
if "$posttrain" --threads 2 sft --model "$model" --data "$work/one.jsonl" --out "$work/run" --steps 2 \
       --batch-size 1 --lora-rank 2 --lr 0.05 >/dev/null 2>"$work/sft.log" &&
   "$posttrain" export --model "$model" --adapter "$work/run/adapter" --out "$work/a.gguf" 2>"$work/e.log" &&
   [ "$(kv "$work/a.gguf" general.type)" = "'adapter'" ] &&
   [ "$(kv "$work/a.gguf" general.name)" = "'Adapter'" ] &&
   [ "$(kv "$work/a.gguf" adapter.type)" = "'lora'" ] &&
   grep -q "posttrain export: wrote $work/a.gguf (.* bytes, 8 tensors)" "$work/e.log" &&
   "$posttrain" export --model "$model" --adapter "$work/run/adapter" --merge --out "$work/mm.gguf" 2>"$work/e.log" &&
   [ "$(kv "$work/mm.gguf" general.type)" = "'model'" ] &&
   ! cmp -s "$work/mm.gguf" "$out" &&
   "$posttrain" export --model "$work/run" --out "$work/run.gguf" 2>"$work/e.log" &&
   [ "$(count_tensors "$work/run.gguf")" -eq 20 ]; then
    ok "a LoRA run: --adapter (8 adapter tensors), --adapter --merge, and the run's --out directory"
else
    cat "$work/sft.log" "$work/e.log"; bad "export of a LoRA run"
fi

# Checkpoints: 2 steps with --save-every 1; step 2 is the run's last.
ck=$work/runc/checkpoints
if "$posttrain" --threads 2 sft --model "$model" --data "$work/one.jsonl" --out "$work/runc" --steps 2 \
       --batch-size 1 --lora-rank 2 --lr 0.05 --save-every 1 >/dev/null 2>"$work/sft.log" &&
   "$posttrain" export --model "$work/runc" --name Run --out "$work/out2.gguf" 2>"$work/e.log" &&
   "$posttrain" export --checkpoint "$ck/step-00000002" --name Run --out "$work/ck2.gguf" 2>"$work/e.log" &&
   grep -q "checkpoint $ck/step-00000002 over .*tiny-llama with its LoRA adapters" "$work/e.log" &&
   cmp "$work/out2.gguf" "$work/ck2.gguf" &&
   "$posttrain" export --checkpoint "$ck/step-00000001" --model "$model" --name Run --out "$work/ck1.gguf" 2>"$work/e.log" &&
   [ "$(count_tensors "$work/ck1.gguf")" -eq 20 ] && ! cmp -s "$work/ck1.gguf" "$work/ck2.gguf" &&
   "$posttrain" export --model "$model" --adapter "$work/runc/adapter" --out "$work/ad.gguf" 2>"$work/e.log" &&
   "$posttrain" export --checkpoint "$ck/step-00000002" --adapter-only --name Adapter --out "$work/ck2a.gguf" 2>"$work/e.log" &&
   cmp "$work/ad.gguf" "$work/ck2a.gguf"; then
    ok "a LoRA checkpoint: step 2 exports as the run's --out (merged) and, --adapter-only, as OUT/adapter; step 1 differs"
else
    cat "$work/sft.log" "$work/e.log"; bad "export of a LoRA checkpoint"
fi
if "$posttrain" --threads 2 sft --model "$model" --data "$work/one.jsonl" --out "$work/runf" --steps 2 \
       --batch-size 1 --lr 0.01 --save-every 1 >/dev/null 2>"$work/sft.log" &&
   "$posttrain" export --model "$work/runf" --name Run --out "$work/f2.gguf" 2>"$work/e.log" &&
   "$posttrain" export --checkpoint "$work/runf/checkpoints/step-00000002" --name Run --out "$work/fck2.gguf" 2>"$work/e.log" &&
   cmp "$work/f2.gguf" "$work/fck2.gguf" &&
   "$posttrain" export --checkpoint "$work/runf/checkpoints/step-00000001" --name Run --out "$work/fck1.gguf" 2>"$work/e.log" &&
   ! cmp -s "$work/fck1.gguf" "$work/fck2.gguf"; then
    ok "a full fine-tune checkpoint: step 2 exports as the run's --out, step 1 differs"
else
    cat "$work/sft.log" "$work/e.log"; bad "export of a full checkpoint"
fi
expect 2 'full fine-tune' --checkpoint "$work/runf/checkpoints/step-00000002" --adapter-only --out "$work/keep.gguf"
expect 2 'not both' --checkpoint "$ck/step-00000002" --adapter "$work/runc/adapter" --out "$work/keep.gguf"
expect 1 'MANIFEST' --checkpoint "$work/runc" --out "$work/keep.gguf"

stories=$src/../shared/data/models/stories260K
if [ -d "$stories" ]; then
    if "$posttrain" export --model "$stories" --out "$work/s.gguf" --type bf16 2>"$work/e.log" &&
       [ "$(kv "$work/s.gguf" general.name)" = "'stories260K'" ] &&
       [ "$(kv "$work/s.gguf" general.size_label)" = "'260K'" ] &&
       [ "$(kv "$work/s.gguf" general.file_type)" = 32 ]; then
        ok "stories260K as bf16"
    else
        cat "$work/e.log"; bad "stories260K"
    fi
    # generate --bf16 reads the model straight into BF16; decoding widens the
    # weights and computes in FP32, and on the avx2 path prefill does too: the
    # same greedy ids as the BF16 GGUF's values loaded into FP32
    gen=(generate --prompt "Once upon a time" --max-new-tokens 24 --temperature 0 --print-ids)
    if PT_CPU=avx2 "$posttrain" "${gen[@]}" --model "$stories" --bf16 >"$work/g16.txt" 2>"$work/g.log" &&
       PT_CPU=avx2 "$posttrain" "${gen[@]}" --model "$work/s.gguf" >"$work/gg.txt" 2>>"$work/g.log" &&
       [ -s "$work/g16.txt" ] && cmp -s "$work/g16.txt" "$work/gg.txt"; then
        ok "generate --bf16 = the BF16 GGUF's values (avx2 path)"
    else
        cat "$work/g.log" "$work/g16.txt" "$work/gg.txt"; bad "generate --bf16"
    fi
else
    echo "SKIP stories260K: shared data not found at $stories"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
