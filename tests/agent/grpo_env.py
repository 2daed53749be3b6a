#!/usr/bin/env python3
"""A tiny environment for `posttrain grpo --env` (tests/agent/test_grpo_env.sh).

Usage: grpo_env.py LOG MODE.  Every request line is appended to LOG with the
reply it got ({"request": ..., "reply": ...}).  Each episode is two turns:
after turn 0 the environment appends " ok=", after turn 1 (the last, or any
final turn) it answers done with reward(text).  MODE "errors" also makes
some episodes fail: episode % 8 == 1 answers {"error": ...}, == 2 a line that
is not JSON, == 5 done with two rewards where one is expected.  MODE "long"
answers episode % 8 == 3 with a 200 000-byte line (over --env-max-line).
At the end of its input it logs {"eof": true}.
"""
import json
import sys


def reward(text):
    """A deterministic function of the completion text."""
    return (sum(ord(c) for c in text) % 10) / 10.0


def main():
    log_path, mode = sys.argv[1], sys.argv[2]
    with open(log_path, "a") as log:
        for line in sys.stdin:
            q = json.loads(line)
            ep = q["episode"]
            if mode == "errors" and ep % 8 == 1:
                reply = {"error": "tool broke"}
            elif mode == "errors" and ep % 8 == 2:
                reply = "this is not json"
            elif mode == "errors" and ep % 8 == 5:
                reply = {"done": True, "rewards": [1, 2]}
            elif mode == "long" and ep % 8 == 3:
                reply = {"error": "x" * 200000}
            elif q["turn"] == 0 and not q["final"]:
                reply = {"append": " ok="}
                if mode == "errors":
                    reply["turn_rewards"] = [0.5]
            else:
                reply = {"done": True, "rewards": [reward(q["text"])]}
                if mode == "errors":
                    reply["turn_rewards"] = [None]
            log.write(json.dumps({"request": q, "reply": reply}) + "\n")
            log.flush()
            out = reply if isinstance(reply, str) else json.dumps(reply)
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
        # posttrain closed our stdin: the end of the run
        log.write(json.dumps({"eof": True}) + "\n")


if __name__ == "__main__":
    main()
