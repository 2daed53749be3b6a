#!/usr/bin/env bash
# posttrain grpo --env CMD on the committed tiny model (tests/reference/
# llama_tied_gqa with a character tokenizer): the environment process
# (tests/agent/grpo_env.py) sees exactly one request per turn with the row,
# the text so far and this turn's text; the metrics carry the rewards it
# returned; {"error": ..}, a line that is not JSON and a reply of the wrong
# shape are episode errors and the run finishes; a CMD that exits at once
# is a clear error without a hang; bad option combinations exit 2.  Every
# run is bounded by `timeout`.
set -uo pipefail
posttrain=$1 ref=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/pt_grpo_env.XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

model=$work/model
# shellcheck source=tiny_grpo_model.sh
. "$here/tiny_grpo_model.sh"
tiny_grpo_model "$ref" "$model"
for i in $(seq 0 7); do
    printf '{"prompt": "%d+%d=", "answer": "%d", "id": %d}\n' $i $((i % 3)) $((i + i % 3)) "$i"
done > "$work/data.jsonl"

# 2 steps x 2 prompts x 4 episodes x 2 turns (append " ok=" after the first,
# done with reward(text) after the second): 32 requests
base=(grpo --model "$model" --data "$work/data.jsonl" --num-generations 4 --batch-prompts 2 --max-new-tokens 4
      --lr 1e-3 --seed 3 --threads 2)
if timeout 60 "$posttrain" "${base[@]}" --steps 2 --env "python3 '$here/grpo_env.py' '$work/log.jsonl' twoturn" \
       --max-turns 2 --out "$work/out" 2>"$work/out.log"; then
    ok "a 2-step --env run exits 0"
else
    cat "$work/out.log"; bad "the --env run failed"
fi
if python3 - "$work/log.jsonl" "$work/out/metrics.jsonl" "$work/data.jsonl" <<'PY'
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
assert log[-1] == {"eof": True}, log[-1]       # the env saw the end of its input before posttrain exited
log = log[:-1]
assert len(log) == 32, len(log)
rows = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[3])}
def reward(text):
    return (sum(ord(c) for c in text) % 10) / 10.0
metrics = [json.loads(l) for l in open(sys.argv[2]) if '"goodput"' not in l]
assert len(metrics) == 2, metrics
for step in (1, 2):
    calls = [d["request"] for d in log if d["request"]["step"] == step]
    assert sorted((q["episode"], q["turn"]) for q in calls) == [(e, t) for e in range(8) for t in (0, 1)], calls
    rewards = []
    for e in range(8):
        t0, t1 = [q for q in calls if q["episode"] == e]
        assert t0["turn"] == 0 and t1["turn"] == 1 and t0["attempt"] == t1["attempt"] == 0
        assert t0["group"] == t1["group"] == e // 4
        assert t0["row"] == rows[t0["row"]["id"]] and t1["row"] == t0["row"]
        assert t0["final"] is False and t1["final"] == "max_turns", (t0, t1)
        assert t0["text"] == t0["turn_text"] and t1["text"].startswith(t0["text"]), (t0, t1)
        assert t1["text"].endswith(t1["turn_text"]) and "o k =" in t1["text"], t1
        rewards.append(reward(t1["text"]))
    m = metrics[step - 1]
    mean = sum(rewards) / 8
    assert abs(m["reward"] - mean) < 1e-5 and abs(m["rewards/env0/mean"] - mean) < 1e-5, (m["reward"], rewards)
    assert m["episodes"] == 8 and m["episodes/errors"] == 0 and m["episodes/done"] == 8, m
    assert m["episodes/turns_mean"] == 2 and m["episodes/env_calls"] == 16 and m["episodes/appended_tokens"] == 32, m
    # the groups of a step are its two prompts
    assert len({q["row"]["id"] for q in calls if q["group"] == 0}) == 1
PY
then
    ok "the env saw 32 requests (8 episodes x 2 turns x 2 steps, row, text, turn_text), then EOF; rewards in metrics are its"
else
    bad "the requests and metrics of the --env run"
fi
grep -q '^step 2/2 reward .* episodes 8 errors 0 turns 2.00$' "$work/out.log" &&
    ok "the progress line counts episodes, errors and turns" || { cat "$work/out.log"; bad "progress line"; }

# --save-every and --resume auto with a deterministic environment: 1 step,
# then resumed to 2, gives the weights of the 2-step run above
env1="python3 '$here/grpo_env.py' '$work/log_r.jsonl' twoturn"
if timeout 60 "$posttrain" "${base[@]}" --steps 1 --env "$env1" --max-turns 2 --save-every 1 --out "$work/res" 2>"$work/res.log" &&
   timeout 60 "$posttrain" "${base[@]}" --steps 2 --env "$env1" --max-turns 2 --save-every 1 --resume auto --out "$work/res" \
       2>>"$work/res.log" && cmp -s "$work/out/model.safetensors" "$work/res/model.safetensors"; then
    ok "--env with --save-every and --resume auto: 1 + 1 steps give the 2-step run's weights"
else
    cat "$work/res.log"; bad "--env resume"
fi

# errors: per step, episode 1 answers {"error": ..}, 2 a line that is not
# JSON, 5 done with 2 rewards where --env-rewards is 1; with turn_rewards
if timeout 60 "$posttrain" "${base[@]}" --steps 2 --env "python3 '$here/grpo_env.py' '$work/log2.jsonl' errors" \
       --max-turns 2 --stop-string zz --out "$work/out2" 2>"$work/out2.log" &&
   python3 - "$work/log2.jsonl" "$work/out2/metrics.jsonl" <<'PY'
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
assert log[-1] == {"eof": True} and len(log) == 2 * (3 + 5 * 2) + 1, len(log)
metrics = [json.loads(l) for l in open(sys.argv[2]) if '"goodput"' not in l]
assert len(metrics) == 2
for m in metrics:
    assert m["episodes/errors"] == 3 and m["episodes/done"] == 5 and m["episodes/env_calls"] == 13, m
PY
then
    ok "an error reply, a malformed line and a wrong-shape reply are 3 episode errors per step; the run finishes"
else
    cat "$work/out2.log"; bad "the errors run"
fi
for want in "episode 1 turn 0: the environment returned 1: tool broke" \
            "episode 2 turn 0: the environment returned 1: --env reply is not one JSON value on a line: 'this is not json'" \
            "episode 5 turn 0: the environment returned 1: --env reply: \"rewards\" must be an array of 1 numbers"; do
    grep -qF -- "$want" "$work/out2.log" && ok "logged: $want" || bad "not logged: $want"
done

# a CMD that exits at once, one that answers nonsense: a clear error, no hang
timeout 20 "$posttrain" "${base[@]}" --steps 2 --env "exit 3" --out "$work/out3" 2>"$work/out3.log"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "posttrain grpo: step 1: --env 'exit 3' exited with status 3" "$work/out3.log"; then
    ok "--env 'exit 3': exit $rc, the message names the command and its status"
else
    cat "$work/out3.log"; bad "--env 'exit 3' (exit $rc)"
fi
timeout 20 "$posttrain" "${base[@]}" --steps 2 --env "cat" --out "$work/out4" 2>"$work/out4.log"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
   grep -qF "posttrain grpo: step 1: every episode failed (the first: episode 0 turn 0: the environment returned 1: --env reply: unknown key \"step\"" "$work/out4.log"; then
    ok "--env cat (replies of the wrong shape): exit $rc, every episode failed"
else
    cat "$work/out4.log"; bad "--env cat (exit $rc)"
fi

# Deadlines, a capped reply line and the process group (--env-timeout,
# --env-max-line).  An environment that never answers (it reads and drops
# its input) and one that never reads: the episode fails after the timeout,
# the group is ended and the run stops with a message, within seconds.
gone() { ! kill -0 "$(cat "$1")" 2>/dev/null; }
t0=$(date +%s)
timeout 60 "$posttrain" "${base[@]}" --steps 2 --env-timeout 1 \
    --env "sleep 300 & echo \$! > '$work/silent.pid'; cat > /dev/null" --out "$work/silent" 2>"$work/silent.log"
rc=$? t1=$(date +%s)
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((t1 - t0)) -lt 30 ] &&
   grep -qF "was ended (it gave no reply line within 1 s, --env-timeout)" "$work/silent.log"; then
    ok "a silent --env: exit $rc after $((t1 - t0)) s, the timeout named"
else
    cat "$work/silent.log"; bad "a silent --env (exit $rc, $((t1 - t0)) s)"
fi
sleep 0.5
gone "$work/silent.pid" && ok "the silent env's group (a background sleep of its shell) was ended" ||
    bad "the silent env's background process is still running"
t0=$(date +%s)
timeout 60 "$posttrain" "${base[@]}" --steps 2 --env-timeout 1 \
    --env "echo \$\$ > '$work/deaf.pid'; exec sleep 300" --out "$work/deaf" 2>"$work/deaf.log"
rc=$? t1=$(date +%s)
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((t1 - t0)) -lt 30 ] && grep -qF -- "--env-timeout" "$work/deaf.log"; then
    ok "an --env that never reads its input: exit $rc after $((t1 - t0)) s"
else
    cat "$work/deaf.log"; bad "an --env that never reads (exit $rc, $((t1 - t0)) s)"
fi
sleep 0.5
gone "$work/deaf.pid" && ok "it was ended" || bad "the deaf env is still running"
# a run that ends normally leaves nothing of its environment's group behind
if timeout 60 "$posttrain" "${base[@]}" --steps 1 --max-turns 2 \
       --env "sleep 300 & echo \$! > '$work/bg.pid'; python3 '$here/grpo_env.py' '$work/log5.jsonl' twoturn" \
       --out "$work/out5" 2>"$work/out5.log"; then
    sleep 0.5
    gone "$work/bg.pid" && ok "a finished run ends what its --env left running (the group)" ||
        bad "a background process of --env outlived the run"
else
    cat "$work/out5.log"; bad "the --env run with a background process"
fi
# a reply line over --env-max-line fails its episode only; the run goes on
if timeout 60 "$posttrain" "${base[@]}" --steps 2 --max-turns 2 --env-max-line 65536 \
       --env "python3 '$here/grpo_env.py' '$work/log6.jsonl' long" --out "$work/out6" 2>"$work/out6.log" &&
   grep -qF "episode 3 turn 0: the environment returned 1: --env reply line is longer than 65536 bytes (--env-max-line)" \
       "$work/out6.log" &&
   python3 - "$work/out6/metrics.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1]) if '"goodput"' not in l]
assert len(m) == 2 and all(r["episodes/errors"] == 1 and r["episodes/done"] == 7 for r in m), m
PY
then
    ok "a 200 000-byte reply over --env-max-line 65536: that episode fails, the next replies are read in step"
else
    cat "$work/out6.log"; bad "a reply over --env-max-line"
fi

usage_error() {   # expected message, then arguments
    local want=$1; shift
    timeout 20 "$posttrain" grpo "$@" >/dev/null 2>"$work/err.txt"
    local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$want" "$work/err.txt"; then
        ok "usage error ($*): exit 2, '$want'"
    else
        echo "  got exit $rc: $(cat "$work/err.txt")"; bad "usage error ($*)"
    fi
}
io=(--model "$model" --data "$work/data.jsonl" --out "$work/x")
usage_error "give --env or --reward, not both" "${io[@]}" --env cat --reward exact
usage_error "--reward is required (or --env CMD)" "${io[@]}"
usage_error "--eval does not apply to --env" "${io[@]}" --env cat --eval "$work/data.jsonl"
usage_error "--max-turns needs --env CMD" "${io[@]}" --reward exact --max-turns 2
usage_error "--stop-string needs --env CMD" "${io[@]}" --reward exact --stop-string x
usage_error "--env-rewards needs an integer in [1, 8]" "${io[@]}" --env cat --env-rewards 9
usage_error "--env-timeout needs --env CMD" "${io[@]}" --reward exact --env-timeout 5
usage_error "--env-max-line needs --env CMD" "${io[@]}" --reward exact --env-max-line 100
usage_error "--env-timeout" "${io[@]}" --env cat --env-timeout 0
[ ! -e "$work/x" ] && ok "usage errors write nothing" || bad "a usage error wrote --out"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
