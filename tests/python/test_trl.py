"""GRPO from Python in TRL's shape: text prompts encoded with the tokenizer
(never read as ids), reward functions fn(prompts, completions,
completion_ids, **row fields) with None declining, the all-declined round
skipped, and posttrain.GRPOTrainer: its metrics and timings, and a run of N
rounds equal bit for bit to k rounds, a checkpoint and a resumed run."""

import json
import math
import os
import shutil
import tempfile
import time
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY
HAVE = pt.has_feature("grpo") and pt.has_feature("generate")


def weights_bytes(model):
    """Every tensor's bytes, by name (the model's exact state)."""
    return {k: v.data.tobytes() for k, v in model.state_dict(numpy=False).items()}


def saved_weights(model, d):
    """model.safetensors as the model saves it."""
    model.save(d, copy_tokenizer=False)
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        return f.read()


@unittest.skipUnless(pt.has_feature("generate"), "the loaded libposttrain has no pt_generate")
class TestTextPrompts(unittest.TestCase):
    def setUp(self):
        self.m = pt.Model.create(TINY, seed=4)
        self.tok = pt.Tokenizer.bytes()

    def tearDown(self):
        self.m.close()
        self.tok.close()

    def test_text_without_tokenizer_is_refused(self):
        self.assertIsNone(self.m.tokenizer)
        for prompts in ("12", ["12", "3"], b"12"):
            with self.subTest(prompts=prompts), self.assertRaises(pt.InvalidArgument) as cm:
                self.m.generate(prompts, max_new_tokens=2)
            self.assertIn("is text but there is no tokenizer", cm.exception.message)
            with self.assertRaises(pt.InvalidArgument):
                pt.Generator(self.m, 2, 8).generate(prompts, max_new_tokens=2)
        with self.assertRaises(pt.InvalidArgument) as cm:
            self.m.generate(["12", [1, 2]], max_new_tokens=2, tokenizer=self.tok)
        self.assertIn("mix text and token ids", cm.exception.message)
        # ids still mean ids
        self.assertEqual(len(self.m.generate([1, 2], max_new_tokens=2).tokens), 2)

    def test_text_is_encoded(self):
        opts = dict(max_new_tokens=5, seed=11, temperature=1.0, stop_ids=[])
        want = self.m.generate(self.tok.encode("12", add_special=True), **opts)
        self.assertEqual(self.tok.encode("12", add_special=True), [256, 49, 50])
        self.assertEqual(self.m.generate("12", tokenizer=self.tok, **opts), want)
        plain = self.m.generate(self.tok.encode("12"), **opts)
        self.assertEqual(self.m.generate("12", tokenizer=self.tok, add_special=False, **opts),
                         plain)
        texts = ["12", "hello", "12"]
        got = self.m.generate(texts, tokenizer=self.tok, **opts)
        ids = [self.tok.encode(t, add_special=True) for t in texts]
        self.assertEqual(got, self.m.generate(ids, **opts))
        g = pt.Generator(self.m, 3, 16)
        self.assertEqual(g.generate(texts, tokenizer=self.tok, **opts), got)

    @unittest.skipUnless(pt.has_feature("grpo"), "the loaded libposttrain has no GRPO API")
    def test_add_rollouts_encodes(self):
        with pt.RolloutBuffer() as buf:
            buf.add_rollouts(self.m, ["ab", "c"], 2, tokenizer=self.tok, max_new_tokens=3)
            self.assertEqual(len(buf), 4)
            for i, text in enumerate(["ab", "ab", "c", "c"]):
                info = buf.sample_info(i)
                self.assertEqual(info.prompt_len, len(self.tok.encode(text, add_special=True)))
                self.assertEqual(info.group, i // 2)

    def test_model_tokenizer_is_the_default(self):
        root = ptest.shared_data("stories260K text prompts (Python binding)")
        if root is None:
            self.skipTest("shared data absent")
        with pt.Model.load(os.path.join(root, "models", "stories260K")) as m:
            tok = m.tokenizer
            ids = tok.encode("Once upon a time", add_special=True)
            self.assertEqual(ids[0], tok.bos_id)
            opts = dict(max_new_tokens=4, temperature=0)
            self.assertEqual(m.generate("Once upon a time", **opts), m.generate(ids, **opts))


@unittest.skipUnless(HAVE, "no GRPO or generation API")
class TestTrlRewards(unittest.TestCase):
    def setUp(self):
        self.m = pt.Model.create(TINY, seed=4)
        self.tok = pt.Tokenizer.bytes()
        self.rows = [{"prompt": "ab", "answer": "x", "meta": {"id": 1}},
                     {"prompt": "cde", "answer": "y", "meta": {"id": 2}}]
        self.buf = pt.RolloutBuffer(["r"])
        self.gens = self.buf.add_rollouts(self.m, [r["prompt"] for r in self.rows], 3,
                                          tokenizer=self.tok, max_new_tokens=4, seed=3,
                                          stop_ids=[])

    def tearDown(self):
        self.buf.close()
        self.m.close()
        self.tok.close()

    def test_arguments_delivered_exactly(self):
        calls = []

        def reward(prompts, completions, **kwargs):
            calls.append(dict(kwargs, prompts=prompts, completions=completions))
            return [0.25 * i for i in range(len(completions))]

        got = self.buf.score_completions("r", reward, self.tok, rows=self.rows)
        self.assertEqual(len(calls), 1)
        c = calls[0]
        self.assertEqual(sorted(c), ["answer", "completion_ids", "completions", "meta", "prompts"])
        ids = [g.tokens for gs in self.gens for g in gs]
        self.assertEqual(c["completion_ids"], ids)
        self.assertEqual(c["completions"], [self.tok.decode(t, skip_special=True) for t in ids])
        self.assertEqual(c["prompts"], ["ab"] * 3 + ["cde"] * 3)
        self.assertEqual(c["answer"], ["x"] * 3 + ["y"] * 3)
        # the row's own objects, not copies
        self.assertTrue(all(v is self.rows[i // 3]["meta"] for i, v in enumerate(c["meta"])))
        self.assertEqual(got, [0.0, 0.25, 0.5, 0.75, 1.0, 1.25])
        self.assertEqual(self.buf.rewards(), [[v] for v in got])
        # prompts given: used as given; no rows: only the three arguments
        seen = []
        self.buf.score_completions(0, lambda prompts, completions, **kw: seen.append(
            (prompts, sorted(kw))) or [1.0] * 6, self.tok, prompts=["P0", "P1"])
        self.assertEqual(seen, [(["P0"] * 3 + ["P1"] * 3, ["completion_ids"])])
        # no rows and no prompts: the prompt ids decoded (the BOS dropped)
        seen = []
        self.buf.score_completions(0, lambda prompts, **kw: seen.append(prompts) or [1.0] * 6,
                                   self.tok)
        self.assertEqual(seen, [["ab"] * 3 + ["cde"] * 3])

    def test_none_declines(self):
        vals = self.buf.score_completions(
            "r", lambda completions, **kw: [None, 1.0, None, 2.0, 3.0, None], self.tok,
            rows=self.rows)
        self.assertTrue(math.isnan(vals[0]) and math.isnan(vals[2]) and math.isnan(vals[5]))
        self.assertEqual([vals[1], vals[3], vals[4]], [1.0, 2.0, 3.0])
        r = [x[0] for x in self.buf.rewards()]
        self.assertTrue(math.isnan(r[0]) and math.isnan(r[2]) and math.isnan(r[5]))
        self.assertEqual([r[1], r[3], r[4]], [1.0, 2.0, 3.0])
        with pt.Optimizer(self.m, lr=1e-3) as opt:
            st = pt.grpo_step(opt, self.buf)
        self.assertEqual(st.samples_unscored, 3)
        self.assertEqual(st.reward_func_mean["r"], 2.0)

    def test_bad_returns_leave_the_buffer(self):
        self.buf.score_completions("r", lambda completions, **kw: [1.0] * 6, self.tok)
        for bad, msg in (([1.0] * 5, "returned 5 values for 6 completions"),
                         ([1.0] * 5 + [math.inf], "rewards are finite"),
                         (None, "returned None instead of a list")):
            with self.subTest(msg=msg), self.assertRaises(pt.InvalidArgument) as cm:
                self.buf.score_completions("r", lambda completions, **kw: bad, self.tok)
            self.assertIn(msg, cm.exception.message)
            self.assertEqual(self.buf.rewards(), [[1.0]] * 6)
        with self.assertRaises(pt.InvalidArgument) as cm:
            self.buf.score_completions("r", lambda **kw: [1.0] * 6, self.tok,
                                       rows=[{"prompt": "a", "completions": 1}] * 2)
        self.assertIn("'completions' would hide", cm.exception.message)
        with self.assertRaises(pt.InvalidArgument):
            self.buf.score_completions("r", lambda **kw: [1.0] * 6, None)

    def test_all_declined_step_is_skipped(self):
        self.buf.score_completions("r", lambda completions, **kw: [None] * 6, self.tok)
        with pt.Optimizer(self.m, lr=1e-3) as opt:
            before = weights_bytes(self.m)
            st = pt.grpo_step(opt, self.buf)
            self.assertTrue(st.skipped)
            self.assertEqual(st.skip_reason, pt.SkipReason.NO_REWARDS)
            self.assertTrue(math.isnan(st.reward))
            self.assertEqual(st.samples_unscored, 6)
            self.assertEqual(st.skipped_total, 1)
            self.assertEqual(opt.step_count, 0)
            self.assertEqual(weights_bytes(self.m), before)

    def test_never_scored_is_refused_by_the_step(self):
        with pt.Optimizer(self.m, lr=1e-3) as opt:
            with self.assertRaises(pt.StateError) as cm:
                pt.grpo_step(opt, self.buf)
            self.assertIn("score the buffer first", cm.exception.message)
            self.assertEqual(opt.step_count, 0)


ROWS = [{"prompt": "q%d" % i, "answer": chr(97 + i)} for i in range(5)]


def has_answer(prompts, completions, answer, **kw):
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]


def brevity(completions, completion_ids, **kw):
    # declines the completions that end on a multiple of 4
    return [None if ids[-1] % 4 == 0 else -len(ids) / 8.0 for ids in completion_ids]


@unittest.skipUnless(HAVE, "no GRPO or generation API")
class TestTrainer(unittest.TestCase):
    def setUp(self):
        self.tok = pt.Tokenizer.bytes()
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tok.close()
        self.dir.cleanup()

    def trainer(self, model, out=None, **kw):
        opts = dict(tokenizer=self.tok, num_generations=3, batch_prompts=2, max_new_tokens=5,
                    learning_rate=3e-3, temperature=1.0, seed=7, eval_dataset=ROWS[:2],
                    eval_every=2, output_dir=out, save_every=2 if out else 0,
                    grpo={"loss_type": "dapo", "epsilon_high": 0.28})
        opts.update(kw)
        return pt.GRPOTrainer(model, [has_answer, brevity], ROWS, **opts)

    def test_metrics_and_timings(self):
        with pt.Model.create(TINY, seed=2) as m:
            seen = []
            tr = self.trainer(m, callback=seen.append)
            t0 = time.perf_counter()
            hist = tr.train(rounds=3)
            wall = time.perf_counter() - t0
            self.assertEqual([h["round"] for h in hist], [1, 2, 3])
            self.assertEqual(seen, hist)
            self.assertEqual(tr.optimizer.step_count, 3)
            parts = ["time/generation", "time/scoring", "time/training", "time/evaluation",
                     "time/saving"]
            for h in hist:
                for k in parts + ["time/round"]:
                    self.assertGreaterEqual(h[k], 0.0, k)
                self.assertGreater(h["time/generation"], 0.0)
                self.assertGreater(h["time/training"], 0.0)
                self.assertLessEqual(sum(h[k] for k in parts), h["time/round"])
                self.assertFalse(h["skipped"])
                self.assertEqual(h["skip_reason"], "none")
                self.assertEqual(h["step"], h["round"])
                for k in ("reward", "rewards/has_answer/mean", "rewards/brevity/mean", "loss",
                          "entropy", "grad_norm", "completions/mean_length"):
                    self.assertTrue(math.isfinite(h[k]), k)
                self.assertEqual(h["learning_rate"], 3e-3)
            self.assertLessEqual(sum(h["time/round"] for h in hist), wall)
            self.assertIn("eval/reward", hist[1])
            self.assertNotIn("eval/reward", hist[0])
            self.assertGreater(hist[1]["time/evaluation"], 0.0)
            # evaluation: the same sampling every time, no training
            before = weights_bytes(m)
            e1, e2 = tr.evaluate(), tr.evaluate()
            self.assertEqual(e1, e2)
            self.assertEqual(weights_bytes(m), before)
            self.assertEqual(sorted(e1), ["eval/completions/mean_length", "eval/reward",
                                          "eval/rewards/brevity/mean",
                                          "eval/rewards/has_answer/mean"])
            tr.close()

    def test_all_declined_round_is_skipped(self):
        def never(completions, **kw):
            return [None] * len(completions)

        with pt.Model.create(TINY, seed=2) as m:
            tr = pt.GRPOTrainer(m, never, ROWS, tokenizer=self.tok, num_generations=2,
                                batch_prompts=2, max_new_tokens=3, learning_rate=1e-2)
            before = weights_bytes(m)
            hist = tr.train(rounds=2)
            for h in hist:
                self.assertTrue(h["skipped"])
                self.assertEqual(h["skip_reason"], "no_rewards")
                self.assertTrue(math.isnan(h["reward"]))
                self.assertTrue(math.isnan(h["rewards/never/mean"]))
                self.assertEqual(h["step"], 0)
            self.assertEqual(tr.round, 2)
            self.assertEqual(tr.optimizer.step_count, 0)
            self.assertEqual(weights_bytes(m), before)
            tr.close()

    def test_resume_is_bit_identical(self):
        a_dir, b_dir = (os.path.join(self.dir.name, n) for n in ("a", "b"))
        # N = 6 rounds in one go (checkpoints at 2, 4 and 6 on the way; the
        # order's second pass starts in round 3: the cursor, the shuffle's
        # state and the round all matter for the bits)
        with pt.Model.create(TINY, seed=2) as m:
            tr = self.trainer(m, a_dir)
            full = tr.train(rounds=6)
            want = saved_weights(m, os.path.join(self.dir.name, "full"))
            want_opt_steps = tr.optimizer.step_count
            tr.close()
        # the run directory's layout (the CLI's): checkpoints/step-NNNNNNNN, the round
        self.assertEqual(sorted(os.listdir(os.path.join(a_dir, "checkpoints"))),
                         ["step-00000002", "step-00000004", "step-00000006"])
        self.assertGreater(sum(h["grad_norm"] > 0 for h in full[2:]), 1)   # the rest trains
        self.assertEqual(full[1]["checkpoint"],
                         os.path.join(a_dir, "checkpoints", "step-00000002"))
        # k = 2 rounds, a checkpoint, then a new process's worth of state
        with pt.Model.create(TINY, seed=2) as m:
            tr = self.trainer(m, b_dir)
            first = tr.train(rounds=2)
            tr.close()
        self.assertEqual([h["reward"] for h in first], [h["reward"] for h in full[:2]])
        with pt.Model.create(TINY, seed=99) as m:        # other weights: all restored
            tr = self.trainer(m, b_dir)
            rest = tr.train(rounds=6, resume_from_checkpoint=True)
            self.assertEqual([h["round"] for h in rest], [3, 4, 5, 6])
            self.assertEqual(tr.optimizer.step_count, want_opt_steps)
            got = saved_weights(m, os.path.join(self.dir.name, "resumed"))
            tr.close()
        self.assertEqual(got, want)
        for h, w in zip(rest, full[2:]):
            for k in ("reward", "loss", "grad_norm", "rewards/brevity/mean",
                      "completions/mean_length"):
                self.assertEqual(h[k], w[k], k)
        # the checkpoints of round 6 agree byte for byte too
        c6 = os.path.join("checkpoints", "step-00000006")
        names = sorted(os.listdir(os.path.join(a_dir, c6)))
        self.assertTrue(any(fn.endswith(".safetensors") for fn in names), names)
        for fn in names:
            if fn.endswith(".safetensors"):
                with open(os.path.join(a_dir, c6, fn), "rb") as f1, \
                        open(os.path.join(b_dir, c6, fn), "rb") as f2:
                    self.assertEqual(f1.read(), f2.read(), fn)
        # the metrics file: each round once (the resumed run's rows follow the first's)
        with open(os.path.join(b_dir, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual([r["step"] for r in rows], [1, 2, 3, 4, 5, 6])
        self.assertEqual([r["reward"] for r in rows], [h["reward"] for h in full])

    def test_resume_checks_the_settings(self):
        d = os.path.join(self.dir.name, "c")
        with pt.Model.create(TINY, seed=2) as m:
            tr = self.trainer(m, d)
            tr.train(rounds=2)
            tr.close()
            tr = self.trainer(m, d, seed=8)
            with self.assertRaises(pt.InvalidArgument) as cm:
                tr.train(rounds=3, resume_from_checkpoint=os.path.join(d, "checkpoints",
                                                                       "step-00000002"))
            self.assertIn("was made with seed 7, this trainer has 8", cm.exception.message)
            tr.close()
            with self.assertRaises(pt.InvalidArgument):
                self.trainer(m, None, save_every=1)      # save_every needs output_dir
            with self.assertRaises(pt.InvalidArgument):
                self.trainer(m, None, num_generations=1)
            with self.assertRaises(pt.InvalidArgument):
                self.trainer(m, None, grpo={"beta": 0.1})   # needs ref_model
            with self.assertRaises(pt.InvalidArgument):
                pt.GRPOTrainer(m, has_answer, ROWS)      # no tokenizer anywhere

    def test_reference_model_kl(self):
        with pt.Model.create(TINY, seed=2) as m, pt.Model.create(TINY, seed=2) as ref:
            tr = self.trainer(m, None, grpo={"beta": 0.05}, ref_model=ref, eval_every=0)
            hist = tr.train(rounds=3)
            self.assertEqual(hist[0]["kl"], 0.0)          # the policy is the reference yet
            for prev, h in zip(hist, hist[1:]):
                # it moves away once a step has changed the weights
                self.assertEqual(h["kl"] > 0, prev["grad_norm"] > 0 or prev["kl"] > 0)
            self.assertGreater(hist[-1]["kl"], 0.0)
            tr.close()
        # with LoRA adapters the frozen base is the reference (no second model)
        with pt.Model.create(TINY, seed=2) as m:
            m.add_lora(rank=2, alpha=4.0, seed=1)
            base = {k: v for k, v in weights_bytes(m).items() if "lora" not in k}
            tr = self.trainer(m, None, grpo={"beta": 0.05}, eval_every=0, learning_rate=3e-2)
            hist = tr.train(rounds=3)
            self.assertEqual(hist[0]["kl"], 0.0)
            self.assertGreater(hist[-1]["kl"], 0.0)
            self.assertEqual({k: v for k, v in weights_bytes(m).items() if "lora" not in k},
                             base)
            tr.close()



@unittest.skipUnless(HAVE, "no GRPO or generation API")
class TestTrlWay(unittest.TestCase):
    """GRPOTrainer(model, reward_funcs, args=GRPOConfig(...), train_dataset=...)."""

    def setUp(self):
        self.tok = pt.Tokenizer.bytes()
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tok.close()
        self.dir.cleanup()

    def test_conversational_prompts_and_reward_arguments(self):
        calls = []

        def reward(prompts, completions, completion_ids, answer, trainer_state, log_metric,
                   log_extra, **kw):
            calls.append(dict(prompts=prompts, completions=completions,
                              completion_ids=completion_ids, answer=answer,
                              step=trainer_state.global_step, rest=sorted(kw)))
            log_metric("custom/value", 10.0 * trainer_state.global_step + 1)
            log_metric("custom/value", 10.0 * trainer_state.global_step + 3)
            log_extra("note", ["n%d" % i for i in range(len(completions))])
            return [float(len(c[0]["content"]) % 3) for c in completions]

        rows = [{"prompt": [{"role": "user", "content": "ab"}], "answer": 1, "id": "r0"},
                {"prompt": [{"role": "user", "content": "cde"}], "answer": 2, "id": "r1"}]
        args = pt.GRPOConfig(num_generations=2, per_device_train_batch_size=4,
                             max_completion_length=4, max_steps=3, learning_rate=1e-3,
                             logging_steps=2, disable_tqdm=True, shuffle_dataset=False,
                             output_dir=self.dir.name, save_steps=1, save_total_limit=2)
        with pt.Model.create(TINY, seed=3) as m:
            tr = pt.GRPOTrainer(m, reward, args=args, train_dataset=rows,
                                processing_class=self.tok, chat_template="chatml")
            # the prompt through the template, with the generation prompt
            want = pt.ChatTemplate.from_name("chatml").render_ids(
                self.tok, rows[0]["prompt"], add_generation_prompt=True, numpy=False).ids
            self.assertEqual(tr._train_ids[0], list(want))
            self.assertEqual(self.tok.decode(want), "<|im_start|>user\nab<|im_end|>\n"
                             "<|im_start|>assistant\n")
            out = tr.train()
            self.assertEqual(out.global_step, 3)
            self.assertEqual(tr.optimizer.step_count, 3)
            self.assertEqual(len(calls), 3)
            c = calls[0]
            # TRL's arguments: the messages as given, the completions as assistant messages
            self.assertEqual(c["prompts"], [rows[0]["prompt"]] * 2 + [rows[1]["prompt"]] * 2)
            self.assertEqual(c["answer"], [1, 1, 2, 2])
            self.assertEqual(c["rest"], ["id"])
            self.assertEqual([x["step"] for x in calls], [0, 1, 2])
            for comp, ids in zip(c["completions"], c["completion_ids"]):
                self.assertEqual(comp, [{"role": "assistant",
                                         "content": self.tok.decode(ids, skip_special=True)}])
            # log_metric: the mean of a step's values; log_extra: the step's column
            self.assertEqual([h["custom/value"] for h in tr.metrics], [2.0, 12.0, 22.0])
            self.assertEqual(tr.metrics[0]["extra"], {"note": ["n0", "n1", "n2", "n3"]})
            # logging every 2 steps (and at the end): means over the steps since the last
            logs = [h for h in tr.state.log_history if "reward" in h]
            self.assertEqual([h["step"] for h in logs], [2, 3])
            self.assertEqual(logs[0]["custom/value"], 7.0)
            self.assertEqual(logs[1]["custom/value"], 22.0)
            self.assertAlmostEqual(logs[0]["reward"],
                                   (tr.metrics[0]["reward"] + tr.metrics[1]["reward"]) / 2)
            # the linear schedule over the 3 steps: lr, 2/3 lr, 1/3 lr
            lrs = [h["learning_rate"] for h in tr.metrics]
            for got, want_lr in zip(lrs, [1e-3, 2e-3 / 3, 1e-3 / 3]):
                self.assertAlmostEqual(got, want_lr, delta=1e-12)
            # checkpoints/step-<round>, the oldest beyond save_total_limit removed
            # (the run layer's keep_last), and a metrics row per step
            self.assertEqual(sorted(os.listdir(os.path.join(self.dir.name, "checkpoints"))),
                             ["step-00000002", "step-00000003"])
            with open(os.path.join(self.dir.name, "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual([r["step"] for r in rows], [1, 2, 3])
            self.assertEqual([r["custom/value"] for r in rows], [2.0, 12.0, 22.0])
            tr.close()

    def test_resume_is_bit_identical(self):
        # 4 steps in one go against 2 steps, a checkpoint, and 2 more resumed
        # in a new trainer from other initial weights (the linear schedule,
        # the prompt order and the sampling streams all continue); again with
        # TRL's adaptive entropy bonus, whose controller state the checkpoint
        # carries (an entropy target above the entropy: it moves each step)
        for k, extra in enumerate(({}, {"use_adaptive_entropy": True, "entropy_coef": 0.05,
                                        "entropy_target": 10.0})):
            with self.subTest(extra=extra):
                self._resume_case(os.path.join(self.dir.name, str(k)), extra)

    def _resume_case(self, root, extra):
        def cfg(out):
            return pt.GRPOConfig(num_generations=2, per_device_train_batch_size=4,
                                 max_completion_length=4, max_steps=4, learning_rate=3e-3,
                                 num_iterations=2, disable_tqdm=True, output_dir=out,
                                 save_steps=2, seed=5, **extra)
        a, b = os.path.join(root, "a"), os.path.join(root, "b")
        with pt.Model.create(TINY, seed=3) as m:
            tr = pt.GRPOTrainer(m, [has_answer, brevity], args=cfg(a), train_dataset=ROWS,
                                processing_class=self.tok)
            tr.train()
            want = weights_bytes(m)
            coef = tr.grpo_options.get("entropy_coef")
            tr.close()
        if extra:
            self.assertNotEqual(coef, extra["entropy_coef"])   # the controller moved it
        # a checkpoint per round of num_iterations (2) optimizer steps, named
        # by the round as posttrain grpo names its steps
        ck = os.path.join(a, "checkpoints")
        self.assertEqual(sorted(os.listdir(ck)), ["step-00000001", "step-00000002"])
        with pt.Model.create(TINY, seed=3) as m:
            tr = pt.GRPOTrainer(m, [has_answer, brevity], args=cfg(b), train_dataset=ROWS,
                                processing_class=self.tok)
            tr.train(rounds=1)       # one round of 2 iterations: step 2
            self.assertEqual(tr.state.global_step, 2)
            tr.close()
        shutil.rmtree(os.path.join(ck, "step-00000002"))
        with pt.Model.create(TINY, seed=8) as m:
            tr = pt.GRPOTrainer(m, [has_answer, brevity], args=cfg(a), train_dataset=ROWS,
                                processing_class=self.tok)
            out = tr.train(resume_from_checkpoint=True)
            self.assertEqual((out.global_step, tr.optimizer.step_count), (4, 4))
            self.assertEqual(weights_bytes(m), want)
            tr.close()
        # the row of round 2 written before its checkpoint was lost: once, redone
        with open(os.path.join(a, "metrics.jsonl")) as f:
            self.assertEqual([json.loads(line)["step"] for line in f], [1, 2])

    def test_no_template_is_an_error_naming_the_way_out(self):
        rows = [{"prompt": [{"role": "user", "content": "ab"}]}]
        with pt.Model.create(TINY, seed=3) as m, self.assertRaises(pt.InvalidArgument) as cm:
            pt.GRPOTrainer(m, lambda completions, **kw: [0.0] * len(completions),
                           args=pt.GRPOConfig(num_generations=2, per_device_train_batch_size=2),
                           train_dataset=rows, processing_class=self.tok)
        self.assertIn("chat_template=", cm.exception.message)

    def test_steps_epochs_and_iterations(self):
        # 5 prompts, 2 per step: 2 steps per epoch (the last prompt of a pass
        # is dropped, as TRL's sampler), 1.5 epochs -> 3 rounds; mu = 2: 6 steps
        args = pt.GRPOConfig(num_generations=2, per_device_train_batch_size=4,
                             max_completion_length=3, num_train_epochs=1.5, num_iterations=2,
                             learning_rate=1e-3, lr_scheduler_type="constant",
                             disable_tqdm=True, save_strategy="no")
        with pt.Model.create(TINY, seed=3) as m:
            tr = pt.GRPOTrainer(m, has_answer, args=args, train_dataset=ROWS,
                                processing_class=self.tok)
            self.assertEqual(tr.state.max_steps, 6)
            out = tr.train()
            self.assertEqual((out.global_step, tr.optimizer.step_count, tr.round), (6, 6, 3))
            self.assertEqual(tr.state.epoch, 1.5)
            seen = [r for m_ in tr.metrics for r in [m_["round"]]]
            self.assertEqual(seen, [1, 2, 3])
            tr.close()
        with pt.Model.create(TINY, seed=3) as m:
            tr = pt.GRPOTrainer(m, has_answer, args=args.replace(max_steps=3),
                                train_dataset=ROWS, processing_class=self.tok)
            out = tr.train()   # max_steps wins over epochs; the last round stops after 1 step
            self.assertEqual((out.global_step, tr.optimizer.step_count, tr.round), (3, 3, 2))
            tr.close()

    def test_older_and_trl_keywords_do_not_mix(self):
        with pt.Model.create(TINY, seed=3) as m:
            with self.assertRaises(pt.InvalidArgument):
                pt.GRPOTrainer(m, has_answer, args=pt.GRPOConfig(), train_dataset=ROWS,
                               processing_class=self.tok, batch_prompts=2)
            with self.assertRaises(pt.InvalidArgument):
                pt.GRPOTrainer(m, has_answer, train_dataset=ROWS, processing_class=self.tok,
                               per_device_train_batch_size=2)

    def test_model_by_path(self):
        root = ptest.shared_data("GRPOTrainer(model=path)")
        if root is None:
            self.skipTest("shared data absent")
        path = os.path.join(root, "models", "stories260K")
        rows = [{"prompt": "Once upon a time", "answer": "dog"}] * 2
        args = pt.GRPOConfig(num_generations=2, per_device_train_batch_size=2,
                             max_completion_length=4, max_steps=1, disable_tqdm=True)
        tr = pt.GRPOTrainer(model=path, reward_funcs=has_answer, args=args, train_dataset=rows)
        self.assertEqual(tr.model.source_dir, path)
        self.assertEqual(tr._train_ids[0], tr.tokenizer.encode("Once upon a time",
                                                                add_special=True))
        self.assertEqual(tr.train().global_step, 1)
        model = tr.model
        tr.close()   # it loaded the model, so it closes it
        with self.assertRaises(pt.ClosedHandleError):
            model.config
        # beta > 0 with the model given by path: the reference is that path loaded again
        tr = pt.GRPOTrainer(model=path, reward_funcs=has_answer, args=args.replace(beta=0.04),
                            train_dataset=rows)
        self.assertIsNotNone(tr.ref_model)
        self.assertIsNot(tr.ref_model, tr.model)
        self.assertEqual(tr.ref_model.source_dir, path)
        self.assertGreaterEqual(tr.train().global_step, 1)
        ref = tr.ref_model
        tr.close()
        with self.assertRaises(pt.ClosedHandleError):
            ref.config
        if pt.has_feature("gguf"):
            with pt.Model.load(path) as m:
                g = os.path.join(self.dir.name, "s.gguf")
                m.export_gguf(g)
            tr = pt.GRPOTrainer(model=g, reward_funcs=has_answer, args=args, train_dataset=rows)
            self.assertEqual(tr.train().global_step, 1)
            tr.close()
        else:
            print("SKIP the GGUF file path: the library has no gguf feature")

if __name__ == "__main__":
    ptest.main()
