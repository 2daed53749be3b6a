"""One run directory for the CLI and Python (the library's run layer): a run
of `posttrain grpo` stopped at step k is continued by GRPOTrainer to N, and
a GRPOTrainer run stopped at k by `posttrain grpo --resume auto`, each
ending with the bytes of an uninterrupted CLI run of N steps, with each
step's metrics row once; the same for `posttrain sft` and SFTTrainer.

"Stopped at k": the run went on past its checkpoint of step k (its later
metrics rows written) and died before the next checkpoint, which is removed
here; resuming drops those rows and redoes the steps.  The configurations
are the equivalent ones of docs/python.md ("One run directory for the CLI
and Python"): the built-in rewards `contains` and `length` against Python
functions computing the same, the same rows, seed, G, prompts per step,
learning rate and linear schedule, gradient checkpointing on both sides.
Runs on stories260K (skipped, saying so, without the shared data or the
posttrain command)."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import ptest
import posttrain as pt

N, K = 4, 2           # steps in all, the step the first half stops at
G, P, MAX_NEW = 4, 2, 8
LR, SEED = 3e-3, 7
NAMES = ["Tom", "Lily", "Max", "Sue", "Ben", "Mia"]
GRPO_ROWS = [{"prompt": "Once upon a time, %s" % n, "answer": "the"} for n in NAMES]
SFT_ROWS = [{"prompt": "Once upon a time, %s had a" % n, "completion": " little dog."}
            for n in NAMES + ["Sam", "Amy"]]


def contains(completions, answer, **kw):
    """The CLI's built-in `contains`: 1 if the answer is in the completion."""
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]


def length(completion_ids, **kw):
    """The CLI's built-in `length`: -(completion tokens / --max-new-tokens)."""
    return [-len(ids) / MAX_NEW for ids in completion_ids]


def cli_path():
    lib = os.environ.get("POSTTRAIN_LIBRARY", "")
    if not lib:
        return None
    p = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(lib))), "cli", "posttrain")
    return p if os.access(p, os.X_OK) else None


def read(path):
    with open(path, "rb") as f:
        return f.read()


def metric_steps(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r["step"] for r in rows if "goodput" not in r and "step" in r]


class TestRunDirectory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = ptest.shared_data("the CLI and Python continuing each other's runs")
        cls.cli = cli_path()
        cls.model = os.path.join(root, "models", "stories260K") if root else None
        if cls.model is None or not os.path.isdir(cls.model) or cls.cli is None:
            why = ("no stories260K" if cls.model is None or not os.path.isdir(cls.model)
                   else "no posttrain command next to $POSTTRAIN_LIBRARY")
            print("SKIP CLI <-> Python resumes: %s" % why)
            raise unittest.SkipTest(why)
        if not pt.has_feature("run"):
            print("SKIP CLI <-> Python resumes: the library has no run layer")
            raise unittest.SkipTest("no run layer")

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def data(self, name, rows):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        return path

    def run_cli(self, *args):
        r = subprocess.run([self.cli, "--threads", "2"] + [str(a) for a in args],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stderr

    # -- GRPO ------------------------------------------------------------------------
    def grpo_cli(self, out, *extra):
        return self.run_cli("grpo", "--model", self.model, "--data", self.data("g.jsonl", GRPO_ROWS),
                            "--out", out, "--reward", "contains,length:0.5", "--steps", N,
                            "--batch-prompts", P, "--num-generations", G, "--max-new-tokens",
                            MAX_NEW, "--lr", LR, "--schedule", "linear", "--seed", SEED,
                            "--gradient-checkpointing", "--save-every", K, *extra)

    def grpo_trainer(self, out):
        # TRL's defaults: the linear schedule, gradient checkpointing on
        cfg = pt.GRPOConfig(output_dir=out, num_generations=G, generation_batch_size=P * G,
                            per_device_train_batch_size=P * G, max_completion_length=MAX_NEW,
                            learning_rate=LR, max_steps=N, seed=SEED, reward_weights=[1.0, 0.5],
                            save_steps=K, disable_tqdm=True)
        return pt.GRPOTrainer(self.model, [contains, length], args=cfg, train_dataset=GRPO_ROWS)

    def stop_at(self, out, k):
        """Leave `out` as a run killed after its last metrics row but before
        the checkpoint after step k: the later checkpoints and the final model
        go."""
        ck = os.path.join(out, "checkpoints")
        for e in os.listdir(ck):
            if int(e.split("-")[1]) > k:
                shutil.rmtree(os.path.join(ck, e))
        for fn in ("model.safetensors", "metrics.svg"):
            if os.path.exists(os.path.join(out, fn)):
                os.remove(os.path.join(out, fn))

    def test_grpo_cli_then_trainer(self):
        full = os.path.join(self.tmp, "full")
        self.grpo_cli(full)
        want = read(os.path.join(full, "model.safetensors"))
        want_ck = read(os.path.join(full, "checkpoints", "step-%08d" % N, "model.safetensors"))
        self.assertEqual(metric_steps(full), list(range(1, N + 1)))
        # the CLI's run, stopped after step K's checkpoint (its later rows written)
        out = os.path.join(self.tmp, "out")
        self.grpo_cli(out)
        self.stop_at(out, K)
        self.assertEqual(metric_steps(out), list(range(1, N + 1)))
        tr = self.grpo_trainer(out)
        res = tr.train(resume_from_checkpoint=True)
        self.assertEqual([m["round"] for m in tr.metrics], list(range(K + 1, N + 1)))
        self.assertEqual(res.global_step, N)
        tr.save_model()
        tr.close()
        self.assertEqual(read(os.path.join(out, "checkpoints", "step-%08d" % N,
                                           "model.safetensors")), want_ck)
        self.assertEqual(read(os.path.join(out, "model.safetensors")), want)
        # every step once: the CLI's rows to K, the trainer's after
        self.assertEqual(metric_steps(out), list(range(1, N + 1)))

    def test_grpo_trainer_then_cli(self):
        full = os.path.join(self.tmp, "full")
        self.grpo_cli(full)
        want = read(os.path.join(full, "model.safetensors"))
        out = os.path.join(self.tmp, "out")
        tr = self.grpo_trainer(out)
        tr.train()
        tr.close()
        self.assertEqual(sorted(os.listdir(os.path.join(out, "checkpoints"))),
                         ["step-%08d" % s for s in range(K, N + 1, K)])
        self.stop_at(out, K)
        err = self.grpo_cli(out, "--resume", "auto")
        self.assertIn("resumed at step %d" % K, err)
        self.assertEqual(read(os.path.join(out, "model.safetensors")), want)
        self.assertEqual(metric_steps(out), list(range(1, N + 1)))

    # -- SFT -------------------------------------------------------------------------
    def sft_cli(self, out, *extra):
        return self.run_cli("sft", "--model", self.model, "--data", self.data("s.jsonl", SFT_ROWS),
                            "--out", out, "--steps", N, "--lr", 1e-3, "--schedule", "linear",
                            "--batch-size", 4, "--seed", 42, "--max-length", 512, "--save-every",
                            K, *extra)

    def sft_trainer(self, out):
        cfg = pt.SFTConfig(output_dir=out, max_steps=N, save_steps=K,
                           per_device_train_batch_size=4, learning_rate=1e-3, seed=42,
                           disable_tqdm=True, max_length=512)
        return pt.SFTTrainer(model=self.model, train_dataset=SFT_ROWS, args=cfg)

    def test_sft_both_ways(self):
        full = os.path.join(self.tmp, "full")
        self.sft_cli(full)
        want = read(os.path.join(full, "model.safetensors"))
        # the CLI stopped at K, SFTTrainer to N
        a = os.path.join(self.tmp, "a")
        self.sft_cli(a)
        self.stop_at(a, K)
        tr = self.sft_trainer(a)
        tr.train(resume_from_checkpoint=True)
        self.assertEqual(tr.state.global_step, N)
        tr.save_model()
        tr.close()
        self.assertEqual(read(os.path.join(a, "model.safetensors")), want)
        self.assertEqual(metric_steps(a), list(range(1, N + 1)))
        # SFTTrainer stopped at K, the CLI to N
        b = os.path.join(self.tmp, "b")
        tr = self.sft_trainer(b)
        tr.train()
        tr.close()
        self.stop_at(b, K)
        err = self.sft_cli(b, "--resume", "auto")
        self.assertIn("resumed at step %d" % K, err)
        self.assertEqual(read(os.path.join(b, "model.safetensors")), want)
        self.assertEqual(metric_steps(b), list(range(1, N + 1)))


if __name__ == "__main__":
    ptest.main()
