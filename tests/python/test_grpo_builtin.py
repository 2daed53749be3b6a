"""posttrain.builtin: the library's built-in rewards, prompt rows and
held-out evaluation from Python (posttrain/grpo_builtin.h).  Rewards on
hand-computed cases; rows (a bad line raises naming it); on stories260K
(skipped, saying so, without the shared data or the posttrain command):
evaluate() gives the numbers of `posttrain grpo --eval`'s step-0 row for the
same rows, rewards, sampling and seed, and GRPOTrainer with the built-in
reward functions scores a round as Python functions computing the same and
as `posttrain grpo --reward` does."""

import json
import math
import os
import subprocess
import tempfile
import unittest

import ptest
import posttrain as pt
from posttrain import builtin

ROWS = [{"prompt": "Once upon a time", "answer": "there"},
        {"prompt": "Lily and Tom", "answer": "Lily"},
        {"prompt": "The cat sat", "answer": "on the mat"},
        {"prompt": "One day, a little", "answer": "girl"},
        {"prompt": "Tim had a red", "answer": "zzz"}]


def cli_path():
    lib = os.environ.get("POSTTRAIN_LIBRARY", "")
    if not lib:
        return None
    p = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(lib))), "cli", "posttrain")
    return p if os.access(p, os.X_OK) else None


def write_rows(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write((json.dumps(r) if isinstance(r, dict) else r) + "\n")
    return path


@unittest.skipUnless(pt.has_feature("grpo-builtin"), "no grpo-builtin feature")
class TestBuiltin(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def test_rewards(self):
        self.assertEqual(builtin.exact([" 42 \n", "42x", "4 2"], ["42", "42", "42"]), [1.0, 0.0, 0.0])
        self.assertEqual(builtin.contains(["so it is 42.", "4 2", "x"], ["42", "42", ""]),
                         [1.0, 0.0, 1.0])
        # TRL's conversational completions
        self.assertEqual(builtin.contains([[{"role": "assistant", "content": "a 7"}]], ["7"]), [1.0])
        ln = builtin.length(20)
        self.assertEqual(ln.__name__, "length")
        self.assertEqual(ln(completion_ids=[[1] * 5, [1] * 20]), [-0.25, -1.0])
        self.assertEqual((builtin.exact.__name__, builtin.contains.__name__), ("exact", "contains"))
        rw = builtin.builtin_rewards("exact,contains:0.5,length:0.1", 8)
        self.assertEqual((rw.n, list(rw.kinds[:3]), list(rw.weights[:3]), rw.max_new_tokens),
                         (3, [0, 1, 2], [1.0, 0.5, 0.1], 8))
        with self.assertRaises(pt.ExistsError):
            builtin.builtin_rewards(["exact", ("exact", 2)])
        with self.assertRaises(pt.InvalidArgument):
            builtin.builtin_rewards("bleu")

    def test_rows(self):
        tok = pt.Tokenizer.bytes()
        good = write_rows(os.path.join(self.tmp, "good.jsonl"), ROWS[:2] + [{"prompt": "x"}])
        rows = builtin.PromptRows.load(good, tok)
        self.assertEqual(len(rows), 3)
        self.assertEqual(rows[0]["ids"], tok.encode("Once upon a time", add_special=True))
        self.assertEqual(rows[1]["answer"], "Lily")
        self.assertIsNone(rows[2]["answer"])
        self.assertEqual(rows.max_prompt_len, len(tok.encode("Once upon a time", add_special=True)))
        with self.assertRaises(pt.FormatError) as cm:
            builtin.PromptRows.load(good, tok, require_answer=True)
        self.assertIn("good.jsonl line 3: needs a string \"answer\"", str(cm.exception))
        self.assertEqual((cm.exception.fault, cm.exception.line), (builtin.RowsFault.NO_ANSWER, 3))
        bad = write_rows(os.path.join(self.tmp, "bad.jsonl"), [ROWS[0], "", "{not json"])
        with self.assertRaises(pt.FormatError) as cm:
            builtin.PromptRows.load(bad, tok)
        self.assertIn("bad.jsonl line 3", str(cm.exception))
        self.assertEqual((cm.exception.fault, cm.exception.line), (builtin.RowsFault.READ, 3))
        conv = write_rows(os.path.join(self.tmp, "conv.jsonl"),
                          [{"messages": [{"role": "user", "content": "2+2?"}], "answer": "4"}])
        tpl = pt.ChatTemplate.from_name("chatml")
        mrows = builtin.PromptRows.load(conv, tok, chat_template=tpl, messages=True)
        self.assertEqual(mrows[0]["ids"], builtin.PromptRows.load(
            write_rows(os.path.join(self.tmp, "p.jsonl"), [{"prompt": "2+2?"}]), tok,
            chat_template=tpl)[0]["ids"])
        made = builtin.PromptRows.from_rows(ROWS[:2], tok)
        self.assertEqual(made[0], dict(rows[0], json=None))


@unittest.skipUnless(pt.has_feature("grpo-builtin"), "no grpo-builtin feature")
class TestStories(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = ptest.shared_data("posttrain.builtin against posttrain grpo")
        cls.cli = cli_path()
        cls.model_dir = os.path.join(root, "models", "stories260K") if root else None
        if cls.model_dir is None or not os.path.isdir(cls.model_dir) or cls.cli is None:
            why = "no stories260K" if cls.cli else "no posttrain command next to $POSTTRAIN_LIBRARY"
            print("SKIP posttrain.builtin against posttrain grpo: %s" % why)
            raise unittest.SkipTest(why)
        cls.model = pt.Model.load(cls.model_dir)

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def cli_rows(self, *args):
        out = os.path.join(self.tmp, "out")
        r = subprocess.run([self.cli, "--threads", "2", "grpo", "--model", self.model_dir, "--out", out]
                           + [str(a) for a in args], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f]

    def test_evaluate_as_cli(self):
        path = write_rows(os.path.join(self.tmp, "rows.jsonl"), ROWS)
        cli = self.cli_rows("--data", path, "--eval", path, "--reward", "contains,exact:0.5,length:0.1",
                            "--max-new-tokens", 12, "--temperature", 0.8, "--top-k", 20,
                            "--eval-samples", 3, "--seed", 11, "--steps", 1, "--num-generations", 2,
                            "--batch-prompts", 2)[0]
        cli.pop("time", None)
        self.assertEqual(cli["step"], 0)
        rows = builtin.PromptRows.load(path, self.model.tokenizer)
        py = builtin.evaluate(self.model, rows, "contains,exact:0.5,length:0.1", max_new_tokens=12,
                              temperature=0.8, top_k=20, samples=3, seed=11)
        self.assertEqual(py, cli)
        # rows made in Python, another batch: the same numbers
        made = builtin.PromptRows.from_rows(ROWS, self.model.tokenizer)
        py2 = builtin.evaluate(self.model, made, [("contains", 1), ("exact", 0.5), ("length", 0.1)],
                               max_new_tokens=12, temperature=0.8, top_k=20, samples=3, seed=11,
                               batch=2)
        self.assertEqual(py2, cli)
        self.assertGreater(cli["eval/rewards/contains/mean_greedy"], 0)
        print("stories260K eval: CLI and Python: greedy reward %.4f, sampled %.4f"
              % (cli["eval/reward_mean_greedy"], cli["eval/reward_mean_sampled"]))

    def test_trainer_builtin_rewards(self):
        rows = [{"prompt": "Once upon a time, %s" % n, "answer": "was"}
                for n in ["Tom", "Lily", "Max", "Sue"]]
        G, P, M = 4, 2, 8

        def contains_py(completions, answer, **kw):
            return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]
        contains_py.__name__ = "contains"

        def length_py(completion_ids, **kw):
            return [-len(ids) / M for ids in completion_ids]
        length_py.__name__ = "length"

        def first_round(funcs):
            model = pt.Model.load(self.model_dir)
            cfg = pt.GRPOConfig(output_dir=os.path.join(self.tmp, "t%d" % id(funcs)), num_generations=G,
                                generation_batch_size=P * G, per_device_train_batch_size=P * G,
                                max_completion_length=M, learning_rate=3e-3, max_steps=1, seed=7,
                                reward_weights=[1.0, 0.5], disable_tqdm=True)
            tr = pt.GRPOTrainer(model, funcs, args=cfg, train_dataset=rows)
            tr.train()
            m = [r for r in tr.state.log_history if "reward" in r][0]
            tr.close()
            model.close()
            return m

        lib_m = first_round([builtin.contains, builtin.length(M)])
        py_m = first_round([contains_py, length_py])
        keys = ["reward", "reward_std", "rewards/contains/mean", "rewards/length/mean"]
        self.assertEqual([lib_m[k] for k in keys], [py_m[k] for k in keys])
        data = write_rows(os.path.join(self.tmp, "train.jsonl"), rows)
        cli = [r for r in self.cli_rows("--data", data, "--reward", "contains,length:0.5",
                                        "--steps", 1, "--batch-prompts", P, "--num-generations", G,
                                        "--max-new-tokens", M, "--lr", 3e-3, "--schedule", "linear",
                                        "--seed", 7, "--gradient-checkpointing")
               if "reward" in r][0]
        for k in keys:
            self.assertTrue(math.isclose(cli[k], lib_m[k], rel_tol=1e-5, abs_tol=1e-6),
                            "%s: CLI %r, Python %r" % (k, cli[k], lib_m[k]))


if __name__ == "__main__":
    ptest.main()
