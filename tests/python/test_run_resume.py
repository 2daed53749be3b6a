"""One run directory for the CLI and Python (the library's run layer): a run
of `posttrain grpo` stopped at step k is continued by GRPOTrainer to N, and
a GRPOTrainer run stopped at k by `posttrain grpo --resume auto`, each
ending with the bytes of an uninterrupted CLI run of N steps, with each
step's metrics row once; the same for `posttrain sft` and SFTTrainer.

"Stopped at k": the run went on past its checkpoint of step k (its later
metrics rows written) and died before the next checkpoint.  The trainers
really die there (a reward function or a callback raises in step k + 2,
after step k + 1's row); for the CLI the checkpoints after k (and the
final model) of a finished run are removed, which leaves what a kill
between step N's row and its checkpoint leaves.  Resuming drops the rows
after k and redoes the steps.  The configurations
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

TINY = ptest.TINY
N, K = 4, 2           # steps in all, the step the first half stops at
G, P, MAX_NEW = 4, 2, 8
LR, SEED = 3e-3, 7
NAMES = ["Tom", "Lily", "Max", "Sue", "Ben", "Mia"]
# ("was": its groups' rewards differ in every step, so every step trains)
GRPO_ROWS = [{"prompt": "Once upon a time, %s" % n, "answer": "was"} for n in NAMES]
SFT_ROWS = [{"prompt": "Once upon a time, %s had a" % n, "completion": " little dog."}
            for n in NAMES + ["Sam", "Amy"]]


def contains(completions, answer, **kw):
    """The CLI's built-in `contains`: 1 if the answer is in the completion."""
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]


def length(completion_ids, **kw):
    """The CLI's built-in `length`: -(completion tokens / --max-new-tokens)."""
    return [-len(ids) / MAX_NEW for ids in completion_ids]


class Crash(Exception):
    """The trainer's process dying part way (raised from inside a step)."""


def crash_at(step_of, at):
    """A reward function computing `contains` that raises in step `at`."""
    def contains_or_crash(completions, answer, trainer_state, **kw):
        if step_of(trainer_state) == at:
            raise Crash("killed in step %d" % at)
        return contains(completions, answer)
    contains_or_crash.__name__ = "contains"
    return contains_or_crash


def cli_path():
    lib = os.environ.get("POSTTRAIN_LIBRARY", "")
    if not lib:
        return None
    p = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(lib))), "cli", "posttrain")
    return p if os.access(p, os.X_OK) else None


def read(path):
    with open(path, "rb") as f:
        return f.read()


def host(out, step):
    with open(os.path.join(out, "checkpoints", "step-%08d" % step, "trainer_state.json")) as f:
        return json.load(f)["host"]


def metric_rows(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


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

    def grpo_trainer(self, out, rewards=(contains, length), model=None, lr=LR):
        # TRL's defaults: the linear schedule, gradient checkpointing on
        cfg = pt.GRPOConfig(output_dir=out, num_generations=G, generation_batch_size=P * G,
                            per_device_train_batch_size=P * G, max_completion_length=MAX_NEW,
                            learning_rate=lr, max_steps=N, seed=SEED, reward_weights=[1.0, 0.5],
                            save_steps=K, disable_tqdm=True)
        return pt.GRPOTrainer(model or self.model, list(rewards), args=cfg,
                              train_dataset=GRPO_ROWS)

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
        # every step moves the weights: both halves matter
        self.assertTrue(all(r["grad_norm"] > 0 for r in metric_rows(full) if "grad_norm" in r))
        # the CLI's run, stopped after step K's checkpoint (its later rows written)
        out = os.path.join(self.tmp, "out")
        self.grpo_cli(out)
        self.stop_at(out, K)
        self.assertEqual(metric_steps(out), list(range(1, N + 1)))
        tr = self.grpo_trainer(out)
        with self.assertLogs("posttrain", level="INFO") as logs:
            res = tr.train(resume_from_checkpoint=True)
        # GRPOTrainer's run notes too (the run layer's, no trainer code)
        self.assertIn("resumed at step %d from %s" % (K, os.path.join(out, "checkpoints", "step-%08d" % K)),
                      [r.getMessage() for r in logs.records])
        self.assertEqual([m["round"] for m in tr.metrics], list(range(K + 1, N + 1)))
        self.assertEqual(res.global_step, N)
        tr.save_model()
        tr.close()
        self.assertEqual(read(os.path.join(out, "checkpoints", "step-%08d" % N,
                                           "model.safetensors")), want_ck)
        self.assertEqual(read(os.path.join(out, "model.safetensors")), want)
        # every step once: the CLI's rows to K, the trainer's after
        self.assertEqual(metric_steps(out), list(range(1, N + 1)))
        # goodput: the CLI's totals carried on; its steps after K (whose rows
        # were dropped) lost
        g = host(out, N)["goodput"]
        self.assertEqual((g["steps_kept"], g["steps_lost"]), (N, N - K))

    def test_grpo_trainer_then_cli(self):
        full = os.path.join(self.tmp, "full")
        self.grpo_cli(full)
        want = read(os.path.join(full, "model.safetensors"))
        out = os.path.join(self.tmp, "out")
        # killed while scoring step K + 2 (trainer_state.global_step counts
        # the steps done): rows 1 .. K + 1 written, the checkpoint of K the latest
        tr = self.grpo_trainer(out, (crash_at(lambda s: s.global_step + 1, K + 2), length))
        with self.assertRaises(Crash):
            tr.train()
        tr.close()
        self.assertEqual(os.listdir(os.path.join(out, "checkpoints")), ["step-%08d" % K])
        self.assertEqual(metric_steps(out), list(range(1, K + 2)))
        self.assertEqual(host(out, K)["goodput"]["steps_kept"], K)
        err = self.grpo_cli(out, "--resume", "auto")
        self.assertIn("resumed at step %d" % K, err)
        self.assertEqual(read(os.path.join(out, "model.safetensors")), want)
        self.assertEqual(metric_steps(out), list(range(1, N + 1)))
        # the trainer's goodput totals continued by the CLI: step K + 1 lost
        g = host(out, N)["goodput"]
        self.assertEqual((g["steps_kept"], g["steps_lost"]), (N, 1))

    def test_grpo_resume_checks_agree(self):
        """The CLI and the trainer refuse the same checkpoint for the same
        reason (pt_grpo_run_resume): another number of generations."""
        out = os.path.join(self.tmp, "out")
        self.grpo_cli(out)
        cfg = pt.GRPOConfig(output_dir=out, num_generations=G + 1, generation_batch_size=P * (G + 1),
                            per_device_train_batch_size=P * (G + 1), max_completion_length=MAX_NEW,
                            learning_rate=LR, max_steps=N + 1, seed=SEED, reward_weights=[1.0, 0.5],
                            save_steps=K, disable_tqdm=True)
        tr = pt.GRPOTrainer(self.model, [contains, length], args=cfg, train_dataset=GRPO_ROWS)
        ck = os.path.join(out, "checkpoints", "step-%08d" % K)
        with self.assertRaises(pt.InvalidArgument) as e:
            tr.load_checkpoint(ck)
        tr.close()
        self.assertIn("was made with num_generations %d, this trainer has %d" % (G, G + 1), str(e.exception))
        r = subprocess.run([self.cli, "--threads", "2", "grpo", "--model", self.model, "--data",
                            self.data("g.jsonl", GRPO_ROWS), "--out", os.path.join(self.tmp, "o2"),
                            "--reward", "contains,length:0.5", "--steps", str(N + 1), "--batch-prompts",
                            str(P), "--num-generations", str(G + 1), "--max-new-tokens", str(MAX_NEW),
                            "--seed", str(SEED), "--resume", ck], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("was made with --num-generations %d, this run gives --num-generations %d" % (G, G + 1),
                      r.stderr)

    def test_grpo_lora_trainer_then_cli(self):
        """LoRA: the adapters as --lora-rank 4 makes them (alpha the rank,
        q and v, initialised from the seed), the host's "lora" as the CLI's."""
        lora = ("--lora-rank", 4, "--lr", 3e-2)
        full = os.path.join(self.tmp, "full")
        self.grpo_cli(full, *lora)
        want = read(os.path.join(full, "checkpoints", "step-%08d" % N, "model.safetensors"))
        out = os.path.join(self.tmp, "out")
        with pt.Model.load(self.model) as m:
            m.add_lora(rank=4, alpha=4, targets=("q", "v"), seed=SEED)
            tr = self.grpo_trainer(out, (crash_at(lambda s: s.global_step + 1, K + 2), length),
                                   model=m, lr=3e-2)
            with self.assertRaises(Crash):
                tr.train()
            tr.close()
        with open(os.path.join(out, "checkpoints", "step-%08d" % K, "trainer_state.json")) as f:
            self.assertEqual(json.load(f)["host"]["lora"], {"rank": 4, "alpha": 4, "targets": 5})
        err = self.grpo_cli(out, "--resume", "auto", *lora)
        self.assertIn("resumed at step %d" % K, err)
        self.assertEqual(read(os.path.join(out, "checkpoints", "step-%08d" % N,
                                           "model.safetensors")), want)

    # -- SFT -------------------------------------------------------------------------
    def sft_cli(self, out, *extra):
        return self.run_cli("sft", "--model", self.model, "--data", self.data("s.jsonl", SFT_ROWS),
                            "--out", out, "--steps", N, "--lr", 1e-3, "--schedule", "linear",
                            "--batch-size", 4, "--seed", 42, "--max-length", 512, "--save-every",
                            K, *extra)

    def sft_trainer(self, out):
        cfg = pt.SFTConfig(output_dir=out, max_steps=N, save_steps=K, logging_steps=1,
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
        with self.assertLogs("posttrain", level="INFO") as logs:
            tr.train(resume_from_checkpoint=True)
        self.assertEqual(tr.state.global_step, N)
        # the run's notes, the CLI's lines (posttrain sft --resume auto), on the logger
        ck = os.path.join(a, "checkpoints", "step-%08d" % K)
        notes = [r.getMessage() for r in logs.records]
        self.assertEqual(notes[:2], ["resume_from_checkpoint auto: the latest checkpoint is " + ck,
                                     "resumed at step %d from %s" % (K, ck)])
        self.assertEqual(len([n for n in notes if n.startswith("resumed at")]), 1)
        lost = [n for n in notes if n.startswith("goodput: %d steps" % (N - K))]
        self.assertEqual(len(lost), 1, notes)
        self.assertRegex(lost[0], r"^goodput: %d steps \(\d+\.\d{3} s\) of the earlier run after step %d "
                                  r"are lost$" % (N - K, K))
        self.assertIn("checkpoint " + os.path.join(a, "checkpoints", "step-%08d" % N), notes)
        self.assertTrue(all(r.levelname == "INFO" and r.name == "posttrain" for r in logs.records))
        tr.save_model()
        tr.close()
        self.assertEqual(read(os.path.join(a, "model.safetensors")), want)
        self.assertEqual(metric_steps(a), list(range(1, N + 1)))
        # the trainer's rows are the CLI's (pt_sft_metrics_row): the same keys in the same order
        keys = [list(r) for r in metric_rows(a) if "goodput" not in r and "step" in r]
        self.assertEqual(keys[0], ["step", "loss", "tokens", "grad_norm", "lr", "skipped",
                                   "step_seconds", "tokens_per_s", "time"])
        self.assertEqual(keys, [keys[0]] * N)
        # SFTTrainer killed after step K + 1's row, the CLI to N
        b = os.path.join(self.tmp, "b")
        tr = self.sft_trainer(b)

        class Killer:
            def on_log(self, args, state, control, logs=None):
                if state.global_step == K + 1:
                    raise Crash("killed after step %d" % (K + 1))
        tr.callbacks.append(Killer())
        with self.assertRaises(Crash):
            tr.train()
        tr.close()
        self.assertEqual(os.listdir(os.path.join(b, "checkpoints")), ["step-%08d" % K])
        self.assertEqual(metric_steps(b), list(range(1, K + 2)))
        err = self.sft_cli(b, "--resume", "auto")
        self.assertIn("resumed at step %d" % K, err)
        self.assertEqual(read(os.path.join(b, "model.safetensors")), want)
        self.assertEqual(metric_steps(b), list(range(1, N + 1)))


class TestRunBinding(unittest.TestCase):
    """posttrain.Run on a tiny model: the lock, the start modes, the metrics
    rows, retention, the state round trip, the trim on resume, and the
    older GRPOTrainer layout refused."""

    def setUp(self):
        if not pt.has_feature("run"):
            print("SKIP the Run binding: the library has no run layer")
            self.skipTest("no run layer")
        self.dir = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.dir.name, "run")

    def tearDown(self):
        self.dir.cleanup()

    def test_fault_handling_and_goodput(self):
        gp = pt.Goodput()
        with pt.Run(self.out, "sft", goodput=gp, check_every=2) as run:
            run.section("startup")
            run.section(None)
            run.step_time(1.0, wait=0.25, generate=0.125)    # 0.625 s of step
            self.assertEqual(run.agree(0), (0, -1))             # a job of one
            self.assertEqual(run.agree(2), (2, 0))
            self.assertFalse(run.check_due(2))                  # one rank: nothing to compare
            self.assertEqual(run.last_step, -1)
            self.assertEqual(run.rollbacks, 0)
            row = run.report(3)
            self.assertEqual(row["step"], 3)
            g = row["goodput"]
            self.assertEqual((g["seconds/step"], g["seconds/wait"], g["seconds/generate"]),
                             (0.625, 0.25, 0.125))
            self.assertEqual((g["steps_kept"], g["steps_lost"], g["ranks"]), (1, 0, 1))
        with self.assertRaises(pt.InvalidArgument):
            pt.Run(self.out, "sft", start="overwrite", on_mismatch="continue")

    def test_step_end(self):
        # every 2 steps and at the last (5): saves after steps 2, 4 and 5,
        # each by the host's save(); one rank: no replica to compare
        saved = []
        with pt.Model.create(TINY, seed=1) as m, pt.Optimizer(m, lr=1e-3) as opt, \
                pt.Run(self.out, "sft", save_every=2, check_every=1) as run:
            for step in range(1, 6):
                def save():
                    st = pt.RunState.new()
                    st.step = step
                    saved.append(step)
                    run.save(m, opt, st)
                self.assertEqual(run.step_end(opt, step, 5, save), "continue")
            self.assertEqual(saved, [2, 4, 5])
            self.assertEqual(run.last_step, 5)

            def fails():
                raise KeyError("the host's own")
            with self.assertRaises(KeyError):
                run.step_end(opt, 2, 5, fails)
            self.assertEqual(run.step_end(opt, 3, 5, fails), "continue")   # not due: not called
            with self.assertRaises(pt.InvalidArgument):
                run.step_end(opt, 6, 5, fails)

    def test_lock_and_start_modes(self):
        with pt.Run(self.out, "grpo") as run:
            self.assertIsNone(run.resume_dir)
            with self.assertRaises(pt.BusyError):
                pt.Run(self.out, "grpo")
            run.log({"step": 1, "loss": 0.5})
        with self.assertRaises(pt.ExistsError) as cm:
            pt.Run(self.out, "grpo")                  # an earlier run: refused
        self.assertIn("metrics.jsonl", cm.exception.message)
        with pt.Run(self.out, "grpo", start="overwrite") as run:
            self.assertEqual(run.rows, 0)
            run.log({"step": 1})
            self.assertEqual(run.rows, 1)
        with self.assertRaises(pt.NotFound):
            pt.Run(self.out, "grpo", start=pt.RunStart.AUTO)   # a run, but no checkpoint
        with self.assertRaises(pt.InvalidArgument):
            pt.Run(self.out, "grpo", start="sideways")

    def test_save_load_trim_and_retention(self):
        with pt.Model.create(TINY, seed=1) as m, pt.Optimizer(m, lr=1e-3) as opt:
            with pt.Run(self.out, "grpo", keep_last=2, save_every=2) as run:
                self.assertEqual([run.save_due(s, 5) for s in range(1, 6)],
                                 [False, True, False, True, True])
                self.assertEqual(run.save_every, 2)
                run.note_step(0.5)
                run.note_step(1.5)
                self.assertEqual(run.mean_step_seconds, 1.0)
                self.assertIsNone(run.metrics_error)
                for step in range(1, 5):
                    run.log({"step": step, "loss": float("nan"), "step_seconds": 0.25 * step})
                    st = pt.RunState.new()
                    st.step, st.rows, st.cursor = step, 6, step % 3
                    st.seed, st.order_rng, st.rng = 7, 2 ** 64 - 1, 2 ** 53 + 1
                    path = run.save(m, opt, st, {"num_generations": 4, "note": "x"})
                    self.assertEqual(path, os.path.join(self.out, "checkpoints",
                                                        "step-%08d" % step))
                run.log({"step": 5, "step_seconds": 1.5})      # a step after the last checkpoint
                self.assertGreater(run.last_save_seconds, 0)
            # retention: the last 2
            self.assertEqual(sorted(os.listdir(os.path.join(self.out, "checkpoints"))),
                             ["step-00000003", "step-00000004"])
            with open(os.path.join(self.out, "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual([r["step"] for r in rows], [1, 2, 3, 4, 5])
            self.assertIsNone(rows[0]["loss"])                  # NaN as null
            self.assertIsInstance(rows[0]["time"], float)       # the writer's timestamp
            with pt.Run(self.out, "sft", start="auto") as run:   # another kind: refused
                with self.assertRaises(pt.StateError):
                    run.load(m, opt)
            with pt.Run(self.out, "grpo", start="auto") as run:
                self.assertTrue(run.resume_dir.endswith("step-00000004"))
                st, extra = run.load(m, opt)
                self.assertEqual((st.step, st.rows, st.cursor, st.seed), (4, 6, 1, 7))
                self.assertEqual((st.order_rng, st.rng), (2 ** 64 - 1, 2 ** 53 + 1))
                self.assertEqual(extra, {"num_generations": 4, "note": "x"})
                # the row of step 5 is dropped, its seconds lost
                self.assertEqual((run.lost_steps, run.lost_seconds), (1, 1.5))
            with open(os.path.join(self.out, "metrics.jsonl")) as f:
                self.assertEqual([json.loads(line)["step"] for line in f], [1, 2, 3, 4])
            with pt.Run(self.out, "grpo", start="auto") as run:    # back to step 3's
                run.trim_metrics(3)
                self.assertEqual((run.lost_steps, run.lost_seconds), (1, 1.0))
            with open(os.path.join(self.out, "metrics.jsonl")) as f:
                self.assertEqual([json.loads(line)["step"] for line in f], [1, 2, 3])
        text = pt.run_state_to_json(st, "grpo", {"a": [1, 2]})
        st2, kind, extra = pt.run_state_from_json(text)
        self.assertEqual((st2.rng, kind, extra), (2 ** 53 + 1, "grpo", {"a": [1, 2]}))

    def test_host_model_fields(self):
        """pt_run_host_model: the model's path resolved through a symlink,
        then LoRA rank 4, alpha 8, targets q, v and down = 1 + 4 + 64."""
        from posttrain.run import host_model_fields
        os.makedirs(os.path.join(self.dir.name, "base"))
        link = os.path.join(self.dir.name, "link")
        os.symlink("base", link)
        base = os.path.join(os.path.realpath(self.dir.name), "base")
        with pt.Model.create(TINY, seed=1) as m:
            self.assertEqual(host_model_fields(link, m), {"model": base})
            self.assertEqual(host_model_fields(None, m), {"model": ""})
            m.add_lora(rank=4, alpha=8, targets=("q", "v", "down"))
            self.assertEqual(host_model_fields(link, m),
                             {"model": base, "lora": {"rank": 4, "alpha": 8, "targets": 69}})

    def test_check_output(self):
        model = os.path.join(self.dir.name, "model")
        os.makedirs(model)
        pt.check_output("out", os.path.join(self.dir.name, "elsewhere"), "model", model, True)
        for out in (model, os.path.join(model, "sub"), self.dir.name):
            with self.subTest(out=out), self.assertRaises(pt.InvalidArgument) as cm:
                pt.check_output("save_model's path", out, "model", model, True)
            self.assertIn("model", cm.exception.message)

    def test_older_trainer_layout_is_refused(self):
        old = os.path.join(self.out, "checkpoint-2")
        os.makedirs(old)
        with open(os.path.join(old, "trainer_state.json"), "w") as f:
            json.dump({"host": {"kind": "posttrain.GRPOTrainer", "round": 2}}, f)
        rows = [{"prompt": "ab"}, {"prompt": "cd"}]
        with pt.Model.create(TINY, seed=1) as m, pt.Tokenizer.bytes() as tok:
            tr = pt.GRPOTrainer(m, lambda completions, **kw: [0.0] * len(completions),
                                args=pt.GRPOConfig(output_dir=self.out, num_generations=2,
                                                   per_device_train_batch_size=2,
                                                   max_completion_length=2, max_steps=1,
                                                   disable_tqdm=True),
                                train_dataset=rows, processing_class=tok)
            for how in (True, old):
                with self.assertRaises(pt.InvalidArgument) as cm:
                    tr.train(resume_from_checkpoint=how)
                self.assertIn("older GRPOTrainer layout", cm.exception.message)
                self.assertIn("checkpoints/step-NNNNNNNN", cm.exception.message)
            tr.close()


if __name__ == "__main__":
    ptest.main()
