#!/usr/bin/env bash
# Every command as strict as the loader, and nothing on disk lost:
# info refuses the malformed directories eval refuses (--lenient describes
# them and still exits 1); outputs that hit an input are refused before
# anything is written; a used --out is refused (--resume auto continues it,
# --overwrite replaces it); a second run on one --out is locked out; a
# killed run's half-written checkpoint is removed; a resumed run's metrics
# hold each step once; generate honours max_position_embeddings; eval of an
# empty file fails.  Checksums of the model, data and checkpoints are
# compared before and after.  Usage: test_cli_safety.sh POSTTRAIN REF_MODEL_DIR
set -uo pipefail
exe=$1 ref=$2
work=$(mktemp -d /tmp/pt_cli_safety.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
sums() { find "$@" -type f -print0 2>/dev/null | sort -z | xargs -0 sha256sum; }

# expect NAME CODE NEEDLE ARGS...: exit CODE with NEEDLE (fixed) on stderr
expect() {
    name=$1 code=$2 needle=$3
    shift 3
    timeout 120 "$exe" "$@" >"$work/stdout" 2>"$work/stderr"
    rc=$?
    if [ "$rc" -eq "$code" ] && { [ -z "$needle" ] || grep -qF -- "$needle" "$work/stderr"; }; then
        ok "$name: exit $code, '$needle'"
    else
        bad "$name: exit $rc (want $code, '$needle'): $(cat "$work/stderr")"
    fi
}
# same NAME BEFORE: the checksums saved in BEFORE still hold
same() {
    if sums "${@:3}" | cmp -s - "$2"; then ok "$1: nothing on disk changed"; else bad "$1: files changed"; fi
}

model=$work/model
mkdir -p "$model"
cp "$ref/config.json" "$ref/model.safetensors" "$model/"
for i in $(seq 0 11); do
    printf '{"input_ids": [1, %d, %d, %d, %d, 2]}\n' $((i % 50 + 3)) $((i * 7 % 50 + 3)) $((i * 3 % 50 + 3)) \
        $((i * 11 % 50 + 3))
done > "$work/data.jsonl"
data=$work/data.jsonl
sums "$model" "$data" > "$work/inputs.sum"

# ---- info as strict as loading --------------------------------------------------
expect "info on a good directory" 0 "" info "$model"
mk() { rm -rf "$work/$1"; mkdir -p "$work/$1"; cp "$ref/config.json" "$work/$1/"; }
mk empty_header
printf '\002\000\000\000\000\000\000\000{}' > "$work/empty_header/model.safetensors"
mk missing_shard
printf '{"metadata": {}, "weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}\n' \
    > "$work/missing_shard/model.safetensors.index.json"
mk bad_shape
cp "$ref/model.safetensors" "$work/bad_shape/"
sed -i 's/"intermediate_size": 48/"intermediate_size": 64/' "$work/bad_shape/config.json"
for d in empty_header missing_shard bad_shape; do
    sums "$work/$d" > "$work/$d.sum"
    expect "info $d" 1 "is broken and will not load" info "$work/$d"
    [ -s "$work/stdout" ] && bad "info $d printed a report: $(cat "$work/stdout")" || ok "info $d reports nothing"
    expect "info --json $d" 1 "is broken and will not load" info --json "$work/$d"
    [ -s "$work/stdout" ] && bad "info --json $d printed" || ok "info --json $d prints nothing"
    expect "eval $d" 1 "" eval --model "$work/$d" --data "$data"
    expect "info --lenient $d" 1 "is broken and will not load" info --lenient "$work/$d"
    grep -q "WILL NOT LOAD" "$work/stdout" && ok "info --lenient $d says WILL NOT LOAD" ||
        bad "info --lenient $d: $(cat "$work/stdout")"
    same "$d" "$work/$d.sum" "$work/$d"
done
expect "missing shard named" 1 "model-00001-of-00002.safetensors" info "$work/missing_shard"
expect "bad shape named" 1 "the config needs" info "$work/bad_shape"
mk eos_list
cp "$ref/model.safetensors" "$work/eos_list/"
sed -i 's/"eos_token_id": 2/"eos_token_id": [2, 70000]/' "$work/eos_list/config.json"
expect "info: an eos_token_id list entry past the vocabulary" 1 "'eos_token_id'[1] = 70000 is out of range [0, 60]" \
    info "$work/eos_list"
expect "generate: the same" 1 "'eos_token_id'[1] = 70000 is out of range" generate --model "$work/eos_list" --prompt-ids "1 2"

# ---- outputs that hit inputs ------------------------------------------------------
sft=(sft --model "$model" --data "$data" --steps 2 --batch-size 2 --seed 1)
expect "--out = --model" 2 "--out $model is the same file as --model" "${sft[@]}" --out "$model"
ln -s "$model" "$work/model_link"
expect "--out a symlink to --model" 2 "is the same file as --model" "${sft[@]}" --out "$work/model_link"
expect "--out inside --model" 2 "is inside --model" "${sft[@]}" --out "$model/sub"
expect "--metrics = a model file" 2 "is inside --model" "${sft[@]}" --out "$work/o1" --metrics "$model/model.safetensors"
expect "--metrics = --data" 2 "--metrics $data is the same file as --data" "${sft[@]}" --out "$work/o1" --metrics "$data"
ln "$data" "$work/data_hardlink.jsonl"
expect "--metrics a hard link of --data" 2 "is the same file as --data" "${sft[@]}" --out "$work/o1" \
    --metrics "$work/data_hardlink.jsonl"
mkdir -p "$work/holder"
cp "$data" "$work/holder/train.jsonl"
sums "$work/holder" > "$work/holder.sum"
expect "--data inside --out" 2 "is inside --out" sft --model "$model" --data "$work/holder/train.jsonl" \
    --steps 1 --batch-size 2 --out "$work/holder"
same "--data inside --out" "$work/holder.sum" "$work/holder"
expect "grpo --out = --model" 2 "--out $model is the same file as --model" grpo --model "$model" --data "$data" \
    --reward exact --out "$model"
expect "grpo --metrics = --data" 2 "is the same file as --data" grpo --model "$model" --data "$data" \
    --reward exact --out "$work/g1" --metrics "$data"
same "the overlaps" "$work/inputs.sum" "$model" "$data"
[ ! -e "$work/o1" ] && ok "no --out was created by a refused run" || bad "a refused run created --out"

# ---- a used --out, --resume auto, --overwrite --------------------------------------
run=(--threads 1 "${sft[@]}" --save-every 2)
expect "a first run" 0 "saved the model" "${run[@]}" --steps 4 --out "$work/run"
sums "$work/run" | grep -v '\.posttrain\.lock' > "$work/run.sum"
expect "a used --out" 2 "already holds a run" "${run[@]}" --steps 4 --out "$work/run"
grep -qF -- "--resume auto" "$work/stderr" && grep -qF -- "--overwrite" "$work/stderr" &&
    ok "the refusal names --resume auto and --overwrite" || bad "refusal hint: $(cat "$work/stderr")"
if sums "$work/run" | grep -v '\.posttrain\.lock' | cmp -s - "$work/run.sum"; then
    ok "the refused run left metrics, checkpoints and model as they were"
else
    bad "the refused run changed $work/run"
fi
expect "grpo into a used --out" 2 "give --resume auto to continue it or --overwrite" grpo --model "$model" \
    --data "$data" --reward exact --out "$work/run"
cp -r "$work/run/checkpoints/step-00000002" "$work/ckpt2"
sums "$work/ckpt2" > "$work/ckpt2.sum"
expect "--out = --resume" 2 "is the same file as --resume" "${run[@]}" --out "$work/ckpt2" --resume "$work/ckpt2"
same "--out = --resume" "$work/ckpt2.sum" "$work/ckpt2"
expect "--metrics inside --resume" 2 "is inside --resume" "${run[@]}" --out "$work/o2" --resume "$work/ckpt2" \
    --metrics "$work/ckpt2/m.jsonl"
expect "a resume behind a later checkpoint" 1 "is past the resumed step 2" "${run[@]}" --steps 6 --out "$work/run" \
    --resume "$work/run/checkpoints/step-00000002"
steps() { grep -v '"goodput"' "$1" | grep -o '"step": [0-9]*' | awk '{printf "%s ", $2}'; }
[ "$(steps "$work/run/metrics.jsonl")" = "1 2 3 4 " ] && ok "the refused resume kept the metrics" ||
    bad "metrics after the refused resume: $(steps "$work/run/metrics.jsonl")"
expect "--resume auto continues" 0 "the latest checkpoint is $work/run/checkpoints/step-00000004" \
    "${run[@]}" --steps 6 --out "$work/run" --resume auto
[ "$(steps "$work/run/metrics.jsonl")" = "1 2 3 4 5 6 " ] && ok "--resume auto: metrics 1..6, each once" ||
    bad "metrics after --resume auto: $(steps "$work/run/metrics.jsonl")"
cmp -s "$work/ckpt2/model.safetensors" "$work/run/checkpoints/step-00000002/model.safetensors" &&
    ok "--resume auto kept the old checkpoints" || bad "an old checkpoint changed"
expect "--overwrite replaces" 0 "replacing the earlier run" "${run[@]}" --steps 2 --out "$work/run" --overwrite
[ "$(steps "$work/run/metrics.jsonl")" = "1 2 " ] && [ ! -e "$work/run/checkpoints/step-00000004" ] &&
    ok "--overwrite: fresh metrics, old checkpoints gone" || bad "--overwrite: $(steps "$work/run/metrics.jsonl")"
expect "--overwrite with --resume" 2 "give --resume or --overwrite, not both" "${run[@]}" --out "$work/run" \
    --overwrite --resume auto

# A killed run: metrics past its last checkpoint, a cut last row, a half-written checkpoint.
expect "a run to kill" 0 "saved the model" "${run[@]}" --steps 3 --out "$work/kill"
loss3=$(grep '"step": 3,' "$work/kill/metrics.jsonl" | grep -o '"loss": [0-9.e+-]*')
rm -rf "$work/kill/checkpoints/step-00000003"
mkdir "$work/kill/checkpoints/step-00000003.tmp-999999"
echo partial > "$work/kill/checkpoints/step-00000003.tmp-999999/model.safetensors"
printf '{"step": 4, "loss": 1.2' >> "$work/kill/metrics.jsonl"
expect "resume after a kill" 0 "removed $work/kill/checkpoints/step-00000003.tmp-999999" \
    "${run[@]}" --steps 3 --out "$work/kill" --resume auto
[ ! -e "$work/kill/checkpoints/step-00000003.tmp-999999" ] && ok "the stale checkpoint directory is gone" ||
    bad "the stale checkpoint directory is still there"
[ "$(steps "$work/kill/metrics.jsonl")" = "1 2 3 " ] && ok "metrics after the kill: 1..3, each once" ||
    bad "metrics after the kill: $(steps "$work/kill/metrics.jsonl")"
[ "$(grep '"step": 3,' "$work/kill/metrics.jsonl" | grep -o '"loss": [0-9.e+-]*')" = "$loss3" ] &&
    ok "the redone step 3 has the same loss ($loss3)" || bad "step 3's loss changed"
if grep -qi 'nan\|inf' "$work/kill/metrics.jsonl"; then bad "bare nan/inf in metrics"; else ok "metrics hold no bare nan/inf"; fi
if python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$work/kill/metrics.jsonl" 2>/dev/null; then
    ok "every metrics row is JSON"
else
    command -v python3 >/dev/null && bad "a metrics row is not JSON" || ok "(no python3: JSON check skipped)"
fi

# Retention: the last 2 checkpoints and every 3rd step's stay.
expect "--keep-last 2 --keep-every 3" 0 "saved the model" "${run[@]}" --steps 7 --save-every 1 --keep-last 2 \
    --keep-every 3 --out "$work/keep"
[ "$(ls "$work/keep/checkpoints" | tr '\n' ' ')" = "step-00000003 step-00000006 step-00000007 " ] &&
    ok "retention kept steps 3, 6 (every 3rd) and 6, 7 (the last 2)" ||
    bad "retention left: $(ls "$work/keep/checkpoints" | tr '\n' ' ')"

# Two runs on one --out: the second is locked out.
mkdir -p "$work/locked"
flock "$work/locked/.posttrain.lock" sleep 30 >/dev/null 2>&1 </dev/null &
holder=$!
for _ in $(seq 50); do flock -n "$work/locked/.posttrain.lock" true 2>/dev/null || break; sleep 0.1; done
expect "a second run on a locked --out" 1 "is in use by another posttrain run" "${run[@]}" --out "$work/locked"
[ ! -e "$work/locked/metrics.jsonl" ] && ok "the locked-out run wrote no metrics" || bad "the locked-out run wrote metrics"
pkill -P "$holder" 2>/dev/null; kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# ---- a metrics file that cannot be written, or is another run's ---------------------
expect "--metrics /dev/full fails the run" 1 "failed: the metrics file /dev/full could not be written (No space left on device)" \
    "${run[@]}" --steps 3 --out "$work/full" --metrics /dev/full
grep -qF "saved the model to $work/full" "$work/stderr" && [ -s "$work/full/model.safetensors" ] &&
    ok "--metrics /dev/full: the model was saved first" || bad "--metrics /dev/full: no model: $(cat "$work/stderr")"
grep -qF "error: cannot write the metrics file /dev/full" "$work/stderr" &&
    ok "--metrics /dev/full: said at the failed row" || bad "no message at the failed row"
# A file-size limit (EFBIG, as a full disk fails a write) that the metrics
# (about 150 bytes a step) pass near step 540 and the model (72 KB) does not.
( trap '' XFSZ; ulimit -f 80
  exec "$exe" --threads 1 "${sft[@]}" --steps 600 --out "$work/big" --metrics "$work/big.jsonl" ) \
    >"$work/stdout" 2>"$work/stderr"
rc=$?
[ "$rc" -eq 1 ] && grep -qF "the metrics file $work/big.jsonl could not be written (File too large)" "$work/stderr" &&
    [ -s "$work/big/model.safetensors" ] && ok "a metrics write past the size limit: model saved, exit 1, file named" ||
    bad "a metrics write past the size limit: exit $rc: $(tail -n 3 "$work/stderr")"
if python3 -c 'import json,sys; d=open(sys.argv[1]).read(); assert d.endswith("\n"); [json.loads(l) for l in d.splitlines()]' \
    "$work/big.jsonl"; then ok "the cut metrics file ends with a whole row ($(wc -l < "$work/big.jsonl") rows)"
else bad "the metrics file was cut mid-row: $(tail -c 80 "$work/big.jsonl")"; fi
: > "$work/shared.jsonl"
flock "$work/shared.jsonl" sleep 30 >/dev/null 2>&1 </dev/null &
holder=$!
for _ in $(seq 50); do flock -n "$work/shared.jsonl" true 2>/dev/null || break; sleep 0.1; done
expect "a run on a locked --metrics" 1 "the metrics file $work/shared.jsonl is in use by another posttrain run" \
    "${run[@]}" --out "$work/m_locked" --metrics "$work/shared.jsonl"
expect "a run on a locked --metrics, --overwrite" 1 "is in use by another posttrain run" \
    "${run[@]}" --out "$work/m_locked2" --metrics "$work/shared.jsonl" --overwrite
expect "grpo on a locked --metrics" 1 "is in use by another posttrain run" grpo --model "$model" --data "$data" \
    --reward exact --out "$work/g_locked" --metrics "$work/shared.jsonl"
[ ! -s "$work/shared.jsonl" ] && ok "the locked-out runs wrote no metrics row" || bad "a locked-out run wrote metrics"
pkill -P "$holder" 2>/dev/null; kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
expect "the same --metrics once free" 0 "saved the model" "${run[@]}" --steps 2 --out "$work/m_free" \
    --metrics "$work/shared.jsonl"
[ "$(steps "$work/shared.jsonl")" = "1 2 " ] && ok "its rows: 1 2" || bad "rows: $(steps "$work/shared.jsonl")"

# ---- export and plot: an output that is, is inside or holds an input -------------
fixture=$ref/../../modelio/data/stories260K
tm=$work/tokmodel
mkdir -p "$tm"
cp "$ref/config.json" "$ref/model.safetensors" "$tm/"
python3 - "$fixture/tokenizer.json" "$tm/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["model"]["vocab"] = {k: v for k, v in t["model"]["vocab"].items() if v < 61}
t["model"]["merges"] = []
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
expect "export to a new file" 0 "wrote $work/tm.gguf" export --model "$tm" --out "$work/tm.gguf"
expect "a LoRA run for export" 0 "saved the model" --threads 1 sft --model "$tm" --data "$data" --steps 2 \
    --batch-size 2 --seed 1 --lora-rank 2 --save-every 2 --out "$work/lrun"
mkdir -p "$work/hub"
for f in config.json model.safetensors tokenizer.json; do ln -s "$tm/$f" "$work/hub/$f"; done
ck=$work/lrun/checkpoints/step-00000002
sums "$tm" "$work/lrun" > "$work/export.sum"
for f in model.safetensors config.json tokenizer.json new.gguf; do
    expect "export --out DIR/$f" 2 "--out $tm/$f is inside --model $tm" export --model "$tm" --out "$tm/$f"
done
expect "export --out holding --model" 2 "--model $tm is inside --out $work" export --model "$tm" --out "$work"
expect "export --out a file the model directory links to" 2 "--out $tm/model.safetensors is the same file as --model $work/hub/model.safetensors" \
    export --model "$work/hub" --out "$tm/model.safetensors"
expect "export --out inside --adapter" 2 "is inside --adapter $work/lrun/adapter" \
    export --model "$tm" --adapter "$work/lrun/adapter" --out "$work/lrun/adapter/adapter_model.safetensors"
expect "export --merge --out = the adapter's weights" 2 "is inside --adapter" \
    export --model "$tm" --adapter "$work/lrun/adapter" --merge --out "$work/lrun/adapter/adapter_model.safetensors"
expect "export --out inside --checkpoint" 2 "is inside --checkpoint $ck" \
    export --checkpoint "$ck" --out "$ck/model.safetensors"
expect "export --out = the checkpoint's recorded base" 2 "is inside the checkpoint's base model" \
    export --checkpoint "$ck" --out "$tm/model.safetensors"
expect "export --checkpoint --model, --out inside it" 2 "is inside --model $tm" \
    export --checkpoint "$ck" --model "$tm" --out "$tm/tokenizer.json"
same "the export refusals" "$work/export.sum" "$tm" "$work/lrun"
expect "export of the checkpoint elsewhere" 0 "wrote $work/ck.gguf" export --checkpoint "$ck" --out "$work/ck.gguf"
cp "$work/run/metrics.jsonl" "$work/m.jsonl"
ln "$work/m.jsonl" "$work/m_hardlink.jsonl"
sums "$work/m.jsonl" > "$work/m.sum"
expect "plot --out = the metrics file" 2 "--out $work/m.jsonl is the same file as the metrics file" \
    plot "$work/m.jsonl" --out "$work/m.jsonl"
expect "plot --out a hard link of the metrics file" 2 "is the same file as the metrics file" \
    plot "$work/m.jsonl" --out "$work/m_hardlink.jsonl"
same "plot refusals" "$work/m.sum" "$work/m.jsonl"
expect "plot to another file" 0 "wrote $work/m.svg" plot "$work/m.jsonl" --out "$work/m.svg"

# ---- non-finite weights: no model, adapter or checkpoint with a NaN or an infinity loads
poke=$(dirname "$0")/poke_weight.py
cp -r "$model" "$work/nan_model"
python3 "$poke" "$work/nan_model/model.safetensors" model.layers.1.mlp.up_proj.weight 77 nan
nan_msg="PT_ENONFINITE: pt_model_load_dir: $work/nan_model: tensor 'model.layers.1.mlp.up_proj.weight': holds NaN at element 77"
expect "generate with a NaN weight" 1 "$nan_msg" generate --model "$work/nan_model" --prompt-ids "1 5 9" --max-new-tokens 2
expect "eval with a NaN weight" 1 "$nan_msg" eval --model "$work/nan_model" --data "$data"
expect "sft from a NaN weight" 1 "$nan_msg" sft --model "$work/nan_model" --data "$data" --out "$work/nan_out"
cp "$work/tm.gguf" "$work/inf.gguf"
python3 "$poke" "$work/inf.gguf" blk.0.ffn_up.weight 5 inf
expect "generate from a GGUF with +inf" 1 "PT_ENONFINITE: pt_model_load_dir: $work/inf.gguf: tensor 'blk.0.ffn_up.weight': holds +inf at element 5" \
    generate --model "$work/inf.gguf" --prompt-ids "1 5 9" --max-new-tokens 2
expect "the same GGUF unpoked" 0 "" generate --model "$work/tm.gguf" --prompt-ids "1 5 9" --max-new-tokens 2
cp -r "$work/lrun/adapter" "$work/nan_adapter"
python3 "$poke" "$work/nan_adapter/adapter_model.safetensors" base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight 3 nan
expect "export --merge of a NaN adapter" 1 "PT_ENONFINITE: pt_lora_load_peft: $work/nan_adapter/adapter_model.safetensors: tensor 'base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight': holds NaN at element 3" \
    export --model "$tm" --adapter "$work/nan_adapter" --merge --out "$work/nan_merged.gguf"
[ ! -e "$work/nan_merged.gguf" ] && ok "no merged GGUF was written" || bad "a GGUF was written from a NaN adapter"
# ... and export never writes one: a merge that overflows, a value beyond F16
cp -r "$work/lrun/adapter" "$work/big_adapter"
for t in lora_A lora_B; do
    python3 "$poke" "$work/big_adapter/adapter_model.safetensors" base_model.model.model.layers.0.self_attn.q_proj.$t.weight 0 3e38
done
expect "export --merge that overflows to +inf" 1 "PT_ENONFINITE: pt_model_export_gguf: $work/big_merged.gguf: tensor 'model.layers.0.self_attn.q_proj.weight' would hold +inf at element 0 with the LoRA update merged" \
    export --model "$tm" --adapter "$work/big_adapter" --merge --out "$work/big_merged.gguf"
[ ! -e "$work/big_merged.gguf" ] && ok "no GGUF was written from the overflowing merge" || bad "an overflowing merge was written"
expect "export --type f16 of an adapter beyond F16" 1 "pt_lora_export_gguf: $work/big_adapter.gguf: tensor 'blk.0.attn_q.weight.lora_a' would hold +inf in F16 (3e+38 is beyond its range)" \
    export --model "$tm" --adapter "$work/big_adapter" --type f16 --out "$work/big_adapter.gguf"
cp -r "$tm" "$work/wide"
python3 "$poke" "$work/wide/model.safetensors" model.layers.0.mlp.up_proj.weight 9 70000
expect "export --type f16 of a weight of 70000" 1 "tensor 'model.layers.0.mlp.up_proj.weight' would hold +inf in F16 (70000 is beyond its range) at element 9" \
    export --model "$work/wide" --type f16 --out "$work/wide16.gguf"
[ ! -e "$work/wide16.gguf" ] && ok "no F16 GGUF was written" || bad "an F16 GGUF with +inf was written"
expect "the same model as F32" 0 "wrote $work/wide32.gguf" export --model "$work/wide" --out "$work/wide32.gguf"
cp -r "$ck" "$work/nan_ckpt"
python3 "$poke" "$work/nan_ckpt/model.safetensors" model.layers.0.self_attn.q_proj.lora_B.weight 0 -inf
expect "export of a checkpoint with -inf" 1 "pt_checkpoint_load_weights $work/nan_ckpt: $work/nan_ckpt/model.safetensors: tensor 'model.layers.0.self_attn.q_proj.lora_B.weight': holds -inf at element 0" \
    export --checkpoint "$work/nan_ckpt" --out "$work/nan_ckpt.gguf"
[ ! -e "$work/nan_ckpt.gguf" ] && ok "no GGUF was written from it" || bad "a GGUF was written from a -inf checkpoint"
cp -r "$ck" "$work/nan_moment"
python3 "$poke" "$work/nan_moment/optimizer.safetensors" exp_avg_sq.model.layers.0.self_attn.v_proj.lora_A.weight 2 nan
expect "resume from a NaN moment" 1 "pt_checkpoint_load $work/nan_moment: $work/nan_moment/optimizer.safetensors: tensor 'exp_avg_sq.model.layers.0.self_attn.v_proj.lora_A.weight': holds NaN at element 2" \
    --threads 1 sft --model "$tm" --data "$data" --steps 4 --batch-size 2 --seed 1 --lora-rank 2 --out "$work/nan_resume" \
    --resume "$work/nan_moment"

# ---- a runaway learning rate: N skipped steps in a row stop the run -----------------
expect "sft --lr 1e10 stops" 1 "posttrain sft: stopped at step 11: 10 optimizer updates in a row were skipped as non-finite (steps 2 to 11" \
    --threads 1 "${sft[@]}" --steps 30 --lr 1e10 --out "$work/runaway"
[ "$(grep -c '"skipped": true' "$work/runaway/metrics.jsonl")" -eq 10 ] && [ "$(steps "$work/runaway/metrics.jsonl")" = "$(seq -s ' ' 1 11) " ] &&
    ok "the runaway run's metrics: steps 1..11, 10 skipped" || bad "runaway metrics: $(steps "$work/runaway/metrics.jsonl")"
[ ! -e "$work/runaway/model.safetensors" ] && ok "the runaway run saved no model" || bad "the runaway run saved a model"
expect "sft --lr 1e36 --max-skipped-steps 3" 1 "stopped at step 4: 3 optimizer updates in a row were skipped as non-finite (steps 2 to 4; the last: nonfinite_grad at learning rate 1e+36)" \
    --threads 1 "${sft[@]}" --steps 30 --lr 1e36 --max-skipped-steps 3 --out "$work/runaway3"
expect "--max-skipped-steps 0 never stops" 0 "saved the model to $work/runaway0 after 12 steps (11 optimizer updates skipped)" \
    --threads 1 "${sft[@]}" --steps 12 --lr 1e10 --max-skipped-steps 0 --out "$work/runaway0"
expect "a sound run's final line" 0 "saved the model to $work/sound after 3 steps (0 optimizer updates skipped)" \
    --threads 1 "${sft[@]}" --steps 3 --out "$work/sound"
expect "--max-skipped-steps -1" 2 "--max-skipped-steps" "${sft[@]}" --max-skipped-steps -1 --out "$work/never"

# ---- generate and eval -------------------------------------------------------------
expect "generate past max_position_embeddings" 1 "plus --max-new-tokens 126 exceeds the model's max_position_embeddings 128" \
    generate --model "$model" --prompt-ids "1 5 9" --max-new-tokens 126
expect "generate within max_position_embeddings" 0 "" generate --model "$model" --prompt-ids "1 5 9" --max-new-tokens 4
expect "generate past max_position_embeddings, opted in" 0 "" \
    generate --model "$model" --prompt-ids "1 5 9" --max-new-tokens 130 --allow-long-context --ignore-eos --print-ids
n_new=$(tail -n 1 "$work/stdout" | wc -w)
[ "$n_new" -eq 130 ] && ok "--allow-long-context generated 130 tokens past position 128" \
    || bad "--allow-long-context generated $n_new tokens, want 130: $(tail -n 2 "$work/stdout")"
: > "$work/empty.jsonl"
expect "eval of an empty file" 1 "has no rows to score" eval --model "$model" --data "$work/empty.jsonl"
expect "eval of a good file" 0 "" eval --model "$model" --data "$data"
expect "eval of /dev/zero stops at once" 1 "contains a NUL byte" eval --model "$model" --data /dev/zero
expect "sft of /dev/zero stops at once" 1 "contains a NUL byte" sft --model "$model" --data /dev/zero --out "$work/zero-out"
# a tokenizer.json of a type the library does not implement: sft says so, not "needs a tokenizer"
mkdir -p "$work/wordpiece"
cp "$ref/config.json" "$ref/model.safetensors" "$work/wordpiece/"
printf '{"version": "1.0", "added_tokens": [], "model": {"type": "WordPiece", "vocab": {"a": 0}}}\n' \
    > "$work/wordpiece/tokenizer.json"
printf '{"text": "Once upon a time"}\n' > "$work/text.jsonl"
expect "sft with an unsupported tokenizer type" 1 'PT_EUNSUPPORTED: '"$work"'/wordpiece/tokenizer.json: tokenizer.json: model.type: model "WordPiece" is not supported' \
    sft --model "$work/wordpiece" --data "$work/text.jsonl" --out "$work/wordpiece-out"
# ... and info, generate and grpo say what is wrong with a tokenizer.json, as
# strictly as the loader: one of an unsupported kind is left out (info says
# so, exit 0; generate and grpo name the reason, not a missing file); a
# malformed one, a directory, a dangling link or one of another vocabulary
# will not load (info exits 1 like the loader)
expect "info: an unsupported tokenizer.json" 0 "" info "$work/wordpiece"
grep -qF 'tokenizer:    not supported, the model loads without it: '"$work"'/wordpiece/tokenizer.json: tokenizer.json: model.type: model "WordPiece" is not supported' "$work/stdout" &&
    ok "info names the unsupported tokenizer" || bad "info on WordPiece: $(cat "$work/stdout")"
expect "info --json: an unsupported tokenizer.json" 0 "" info --json "$work/wordpiece"
grep -qF '"tokenizer_status": "PT_EUNSUPPORTED"' "$work/stdout" && ok "info --json: tokenizer_status" ||
    bad "info --json: $(grep tokenizer "$work/stdout")"
expect "generate --prompt, unsupported tokenizer" 1 "the model's tokenizer was not loaded: PT_EUNSUPPORTED: $work/wordpiece/tokenizer.json: tokenizer.json: model.type: model \"WordPiece\" is not supported" \
    generate --model "$work/wordpiece" --prompt "Once"
grep -q "has no tokenizer.json" "$work/stderr" && bad "generate still says the tokenizer.json is missing" ||
    ok "generate does not claim a missing tokenizer.json"
printf '{"prompt": "1+1=", "answer": "2"}\n' > "$work/g1.jsonl"
expect "grpo, unsupported tokenizer" 1 "the model's tokenizer was not loaded: PT_EUNSUPPORTED: $work/wordpiece/tokenizer.json" \
    grpo --model "$work/wordpiece" --data "$work/g1.jsonl" --reward exact --out "$work/wordpiece-grpo"
expect "generate --prompt, no tokenizer.json" 1 "the model directory $model has no tokenizer.json; a text prompt needs it: give --prompt-ids" \
    generate --model "$model" --prompt "Once"
mkdir -p "$work/tok_cut" "$work/tok_dir" "$work/tok_link" "$work/tok_vocab"
for d in tok_cut tok_dir tok_link tok_vocab; do cp "$ref/config.json" "$ref/model.safetensors" "$work/$d/"; done
head -c 100 "$tm/tokenizer.json" > "$work/tok_cut/tokenizer.json"
mkdir "$work/tok_dir/tokenizer.json"
ln -s "$work/nowhere.json" "$work/tok_link/tokenizer.json"
cp "$fixture/tokenizer.json" "$work/tok_vocab/"   # 512 ids for a model of 61
for d in "tok_cut|PT_EFORMAT: $work/tok_cut/tokenizer.json: tokenizer.json: not valid JSON" \
         "tok_dir|PT_EFORMAT: $work/tok_dir/tokenizer.json is a directory, not a file" \
         "tok_link|PT_ENOTFOUND: $work/tok_link/tokenizer.json is a symbolic link to a missing file" \
         "tok_vocab|PT_ESHAPE: $work/tok_vocab/tokenizer.json"; do
    tk=${d%%|*} msg=${d#*|}
    expect "info: $tk" 1 "$work/$tk is broken and will not load: $msg" info "$work/$tk"
    expect "info --lenient: $tk" 1 "is broken and will not load" info --lenient "$work/$tk"
    grep -qF "tokenizer:    WILL NOT LOAD: ${msg%%:*}" "$work/stdout" && ok "info --lenient: $tk says WILL NOT LOAD" ||
        bad "info --lenient $tk: $(grep tokenizer "$work/stdout")"
    expect "generate: $tk" 1 "$msg" generate --model "$work/$tk" --prompt-ids "1 2"
done
# A FIFO named config.json (or a data file) never blocks a command
mkdir -p "$work/fifo_cfg"
cp "$ref/model.safetensors" "$work/fifo_cfg/"
mkfifo "$work/fifo_cfg/config.json" "$work/fifo.jsonl"
expect "info: a FIFO config.json" 1 "$work/fifo_cfg/config.json is not a regular file (it is a FIFO)" info "$work/fifo_cfg"
expect "generate: a FIFO config.json" 1 "$work/fifo_cfg/config.json is not a regular file (it is a FIFO)" \
    generate --model "$work/fifo_cfg" --prompt-ids "1 2"
expect "eval: a FIFO with no writer as --data" 1 "has no rows to score" eval --model "$model" --data "$work/fifo.jsonl"
same "the whole suite" "$work/inputs.sum" "$model" "$data"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
