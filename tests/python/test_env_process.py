"""posttrain.EnvProcess (posttrain/env.h) through the binding: an environment
process speaking JSON lines, passed where play_episodes takes an environment.
A python3 script sees one request per turn and answers from it: rewards,
turn rewards and appended text arrive as it sent them; a process that exits
at once, one that never answers (the deadline) and a non-zero exit at the end
are their own errors; no child is left behind."""

import math
import os
import sys
import tempfile
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY
PROMPTS = [[256, 72, 105], [256, 50, 43, 51, 61], [256, 72, 105]]

SCRIPT = r'''
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    if set(q) != {"episode", "group", "turn", "attempt", "text", "turn_text", "turn_end", "final",
                  "tokens_left"}:
        r = {"error": "keys %s" % sorted(q)}
    elif q["turn"] == 0 and not q["final"]:
        r = {"append": "ok", "turn_rewards": [0.25, None]}
    else:
        r = {"done": True, "rewards": [q["episode"] + 0.5, q["turn"] * 2]}
    print(json.dumps(r), flush=True)
'''


def no_children(test):
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return
    test.fail("a child process is left: %d" % pid)


@unittest.skipUnless(pt.has_feature("env-process"), "the loaded libposttrain has no env-process")
class TestEnvProcess(unittest.TestCase):
    def setUp(self):
        self.m = pt.Model.create(TINY, seed=9)
        self.gen = self.m.generator(2, 64)
        self.tok = pt.Tokenizer.bytes()
        self.dir = tempfile.TemporaryDirectory()
        self.script = os.path.join(self.dir.name, "env.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def tearDown(self):
        self.tok.close()
        self.gen.close()
        self.m.close()
        self.dir.cleanup()

    def play(self, env, **kw):
        return self.gen.play(PROMPTS, env, max_turns=2, max_new_tokens=4, seed=5, stop_ids=[],
                             tokenizer=self.tok, decode_text=True, **kw)

    def test_rewards_and_appends_arrive(self):
        ok = self.tok.encode("ok")
        with pt.EnvProcess("'%s' '%s'" % (sys.executable, self.script), n_rewards=2,
                           timeout=30) as env:
            self.assertGreater(env.pid, 0)
            with self.play(env) as eps:      # n_reward_funcs from the process
                self.assertEqual(len(eps), 3)
                for i, e in enumerate(eps):
                    self.assertEqual(e.end, pt.EpisodeEnd.DONE, e.error)
                    self.assertEqual(len(e.turns), 2)
                    self.assertEqual(e.rewards, [i + 0.5, 2.0])
                    self.assertEqual(e.turn_rewards[0][0], 0.25)
                    nans = [e.turn_rewards[0][1]] + list(e.turn_rewards[1])
                    self.assertTrue(all(math.isnan(x) for x in nans), nans)
                    end0 = e.turns[0].start + e.turns[0].length
                    self.assertEqual(list(e.ids[end0:end0 + len(ok)]), list(ok))
                    self.assertEqual(e.turns[1].start, end0 + len(ok))
            self.assertIsNone(env.failure)
            env.finish()
            self.assertEqual(env.pid, 0)
        no_children(self)

    def test_failures(self):
        with pt.EnvProcess("exit 3") as env:
            with self.play(env) as eps:
                for e in eps:
                    self.assertEqual(e.end, pt.EpisodeEnd.ERROR)
                    self.assertIn("the environment returned 1: env process 'exit 3' exited with "
                                  "status 3", e.error)
            self.assertEqual(env.failure, "env process 'exit 3' exited with status 3")
        no_children(self)

    def test_deadline_stops_the_run(self):
        with pt.EnvProcess("cat > /dev/null", timeout=0.2, name="--env") as env:
            with self.assertRaises(pt.CallbackError) as cm:
                self.play(env, on_error="stop")
            self.assertIn("--env 'cat > /dev/null' was ended (it gave no reply line within 0.2 s, "
                          "--env-timeout)", str(cm.exception))
            self.assertIn("within 0.2 s", env.failure)
        no_children(self)

    def test_finish_and_options(self):
        env = pt.EnvProcess("read l; exit 5")
        with self.assertRaises(pt.CallbackError) as cm:
            env.finish()
        self.assertIn("exited with status 5 at the end", str(cm.exception))
        env.finish()                         # once
        env.close()
        with self.assertRaises(pt.ClosedHandleError):
            env.finish()
        with self.assertRaises(pt.InvalidArgument):
            pt.EnvProcess("cat", n_rewards=0)
        with self.assertRaises(pt.InvalidArgument):
            pt.EnvProcess("cat", timeout=0)
        with self.assertRaises(pt.InvalidArgument):
            pt.EnvProcess("")
        no_children(self)


if __name__ == "__main__":
    unittest.main()
