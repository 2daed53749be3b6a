"""posttrain.SFTConfig / SFTTrainer in TRL's shape: the three dataset
formats with TRL's loss masks (completion-only for prompt/completion by
default, everything for text and, without assistant_only_loss, for
messages) counted by hand, a run equal bit for bit to the same steps made
by hand with Dataset + sft_step under the linear schedule, gradient
accumulation, checkpoints in the CLI's layout and an exact resume, and
SFTConfig's checks."""

import json
import os
import re
import shutil
import tempfile
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY
PC = [{"prompt": "q%d=" % i, "completion": "a%d" % (i % 3)} for i in range(10)]


def weights_bytes(model):
    return {k: v.data.tobytes() for k, v in model.state_dict(numpy=False).items()}


class TestSft(unittest.TestCase):
    def setUp(self):
        self.tok = pt.Tokenizer.bytes()
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tok.close()
        self.dir.cleanup()

    def trainer(self, model, rows, **cfg):
        cfg = dict(dict(disable_tqdm=True, output_dir=self.dir.name, save_strategy="no",
                        learning_rate=1e-2, per_device_train_batch_size=4), **cfg)
        return pt.SFTTrainer(model, args=pt.SFTConfig(**cfg), train_dataset=rows,
                             processing_class=self.tok)

    def targets(self, tr):
        return tr.train_data.stats["train_target_tokens"]

    def test_formats_and_loss_masks(self):
        enc = self.tok.encode
        with pt.Model.create(TINY, seed=1) as m:
            # prompt/completion: the completion and EOS (TRL's default completion_only_loss)
            tr = self.trainer(m, PC)
            want = sum(len(enc(r["prompt"] + r["completion"], add_special=True))
                       - len(enc(r["prompt"], add_special=True)) + 1 for r in PC)
            self.assertEqual(self.targets(tr), want)
            tr.close()
            # completion_only_loss=False: every token after the first, EOS included
            tr = self.trainer(m, PC, completion_only_loss=False)
            want = sum(len(enc(r["prompt"] + r["completion"], add_special=True)) for r in PC)
            self.assertEqual(self.targets(tr), want)
            tr.close()
            # text (and dataset_text_field): every token after the first, no EOS
            rows = [{"body": r["prompt"] + r["completion"]} for r in PC]
            tr = self.trainer(m, rows, dataset_text_field="body")
            want = sum(len(enc(r["body"], add_special=True)) - 1 for r in rows)
            self.assertEqual(self.targets(tr), want)
            tr.close()
            # messages: everything by default (TRL's assistant_only_loss=False), the
            # assistant turns with assistant_only_loss=True
            conv = [{"messages": [{"role": "user", "content": r["prompt"]},
                                  {"role": "assistant", "content": r["completion"]}]}
                    for r in PC]
            t = pt.ChatTemplate.from_name("chatml")
            ids = [t.render_ids(self.tok, r["messages"], numpy=False) for r in conv]
            tr = self.trainer(m, conv, chat_template_path="chatml")
            self.assertEqual(self.targets(tr), sum(len(x.ids) - 1 for x in ids))
            tr.close()
            tr = self.trainer(m, conv, chat_template_path="chatml", assistant_only_loss=True)
            self.assertEqual(self.targets(tr), sum(sum(x.mask) for x in ids))
            tr.close()
            # conversational prompt/completion: the completion's messages
            cpc = [{"prompt": r["messages"][:1], "completion": r["messages"][1:]} for r in conv]
            tr = self.trainer(m, cpc, chat_template_path="chatml")
            self.assertEqual(self.targets(tr), sum(sum(x.mask) for x in ids))
            tr.close()
            with self.assertRaises(pt.InvalidArgument):
                self.trainer(m, [{"prompt": "a", "completion": "b"}, {"text": "c"}])

    def test_same_as_by_hand_with_accumulation(self):
        # 10 rows, 4 per batch: 3 batches per epoch; 2 per step: 1 step per
        # epoch; 3 epochs: 3 steps, lr 1e-2 linear: 1e-2, 2/3e-2, 1/3e-2
        with pt.Model.create(TINY, seed=1) as m:
            tr = self.trainer(m, PC, gradient_accumulation_steps=2)
            self.assertEqual(tr.state.max_steps, 3)
            with self.assertLogs("posttrain", "INFO") as logs:
                out = tr.train()
            self.assertEqual(out.global_step, 3)
            got = weights_bytes(m)
            lrs = [h["learning_rate"] for h in tr.metrics]
            tr.close()
        for a, b in zip(lrs, [1e-2, 2e-2 / 3, 1e-2 / 3]):
            self.assertAlmostEqual(a, b, delta=1e-12)
        # `posttrain sft`'s progress line of every logged step (logging_steps 10: the last)
        lines = [r.getMessage() for r in logs.records if r.getMessage().startswith("step ")]
        self.assertEqual(len(lines), 1)
        self.assertRegex(lines[0], r"^step 3/3 loss \d+\.\d{4} lr 0\.00333 grad_norm \S+ \d+ tok/s "
                                   r"ETA 0m00s$")
        with pt.Model.create(TINY, seed=1) as m:
            path = os.path.join(self.dir.name, "pc.jsonl")
            with open(path, "w") as f:
                for r in PC:
                    f.write(json.dumps(r) + "\n")
            ds = pt.Dataset.load_jsonl(path, self.tok, max_length=64, completion_only=True,
                                       batch_size=4, shuffle=True, seed=42)
            opt = pt.Optimizer(m, lr=1e-2, schedule="linear", total_steps=3, max_grad_norm=1.0)
            for _ in range(3):
                b1, w1 = ds.next_batch()
                b2, w2 = ds.next_batch()
                opt.sft_step([b1, b2], [w1, w2])
            self.assertEqual(weights_bytes(m), got)
            opt.close()
            ds.close()

    def test_checkpoints_and_resume(self):
        with pt.Model.create(TINY, seed=1) as m:
            tr = self.trainer(m, PC, max_steps=4, save_strategy="steps", save_steps=2)
            tr.train()
            want = weights_bytes(m)
            tr.close()
        d = os.path.join(self.dir.name, "checkpoints")
        self.assertEqual(sorted(os.listdir(d)), ["step-00000002", "step-00000004"])
        with open(os.path.join(d, "step-00000002", "trainer_state.json")) as f:
            h = json.load(f)["host"]
        self.assertEqual((h["command"], h["step"], h["seed"]), ("sft", 2, "42"))
        self.assertEqual((h["rows"], h["optimizer_steps"]), ("10", "2"))   # the 10 examples, 2 updates
        self.assertIn("epoch", h)
        self.assertIn("cursor", h)
        with pt.Model.create(TINY, seed=9) as m:
            # step 2 in the run directory that holds step 4 would be overwritten: refused
            tr = self.trainer(m, PC, max_steps=4, save_strategy="no")
            with self.assertRaises(pt.ExistsError) as cm:
                tr.train(resume_from_checkpoint=os.path.join(d, "step-00000002"))
            self.assertIn("step-00000004 is past the resumed step 2", cm.exception.message)
            tr.close()
        with pt.Model.create(TINY, seed=9) as m:     # other weights: the checkpoint restores them
            # continued in another run directory from it
            tr = self.trainer(m, PC, max_steps=4, save_strategy="no",
                              output_dir=os.path.join(self.dir.name, "again"))
            tr.train(resume_from_checkpoint=os.path.join(d, "step-00000002"))
            self.assertEqual(tr.state.global_step, 4)
            self.assertEqual(weights_bytes(m), want)
            tr.close()

    def test_the_cli_resumes_it(self):
        """posttrain sft --resume continues a checkpoint of SFTTrainer to the
        same bytes as SFTTrainer itself (the CLI's layout and host keys)."""
        root = ptest.shared_data("SFTTrainer checkpoints resumed by posttrain sft")
        lib = os.environ.get("POSTTRAIN_LIBRARY", "")
        cli = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(lib))), "cli",
                           "posttrain") if lib else ""
        if root is None or not os.access(cli, os.X_OK):
            print("SKIP the CLI resume: %s" % ("no shared data" if root is None
                                                else "no posttrain command at %r" % cli))
            self.skipTest("no shared data or CLI")
        import subprocess
        model = os.path.join(root, "models", "stories260K")
        rows = [{"prompt": "Once upon a time, %s had a" % n, "completion": " little dog."}
                for n in ["Tom", "Lily", "Max", "Sue", "Ben", "Mia", "Sam", "Amy"]]
        data = os.path.join(self.dir.name, "rows.jsonl")
        with open(data, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        out = os.path.join(self.dir.name, "out")
        tr = pt.SFTTrainer(model=model, train_dataset=rows,
                           args=pt.SFTConfig(output_dir=out, max_steps=4, save_steps=2,
                                             per_device_train_batch_size=4, learning_rate=1e-3,
                                             disable_tqdm=True, max_length=512))
        tr.train()
        tr.close()
        ck = os.path.join(out, "checkpoints")
        with open(os.path.join(ck, "step-00000004", "model.safetensors"), "rb") as f:
            want = f.read()
        shutil.rmtree(os.path.join(ck, "step-00000004"))
        r = subprocess.run([cli, "--threads", "1", "sft", "--model", model, "--data", data,
                            "--out", out, "--resume", "auto", "--steps", "4", "--lr", "1e-3",
                            "--schedule", "linear", "--batch-size", "4", "--seed", "42",
                            "--max-length", "512", "--save-every", "2"],
                           capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resumed at step 2", r.stderr)
        with open(os.path.join(ck, "step-00000004", "model.safetensors"), "rb") as f:
            self.assertEqual(f.read(), want)

    def test_packing_and_config_checks(self):
        with pt.Model.create(TINY, seed=1) as m:
            tr = self.trainer(m, PC, packing=True, completion_only_loss=False)
            self.assertLess(tr.state.max_steps, self.trainer(m, PC).state.max_steps)
            tr.train()
            tr.close()
        c = pt.SFTConfig()
        self.assertEqual((c.learning_rate, c.max_length, c.lr_scheduler_type, c.packing,
                          c.completion_only_loss, c.assistant_only_loss, c.loss_type),
                         (2e-5, 1024, "linear", False, None, False, "chunked_nll"))
        for kw in (dict(loss_type="dft"), dict(truncation_mode="keep_end"),
                   dict(packing_strategy="wrapped"), dict(eos_token="</s>"), dict(foo=1),
                   dict(num_generations=4)):
            with self.subTest(kw=kw), self.assertRaises(pt.InvalidArgument) as cm:
                pt.SFTConfig(**kw)
            self.assertIn(list(kw)[0], cm.exception.message)


    def test_evaluate_by_hand(self):
        rows = PC[:5]
        with pt.Model.create(TINY, seed=3) as m:
            tr = pt.SFTTrainer(m, args=pt.SFTConfig(disable_tqdm=True, save_strategy="no",
                                                    per_device_eval_batch_size=2),
                               train_dataset=PC, eval_dataset=rows, processing_class=self.tok)
            got = tr.evaluate()
            # by hand: -log p of each completion token and EOS, over all of them
            total, n = 0.0, 0
            for r in rows:
                p = self.tok.encode(r["prompt"], add_special=True)
                ids = self.tok.encode(r["prompt"] + r["completion"], add_special=True) + [257]
                lp = m.logprobs(ids[:-1], ids[1:])
                for t in range(len(p) - 1, len(ids) - 1):
                    total -= lp[t]
                    n += 1
            self.assertEqual(got["eval_num_tokens"], n)
            self.assertAlmostEqual(got["eval_loss"], total / n, delta=1e-5)
            self.assertEqual(tr.evaluate(), got)    # the same split every time
            tr.close()

    def test_table(self):
        """docs/python.md's SFTConfig table: every name as it says."""
        from posttrain import sft_trainer
        doc = os.path.join(ptest.SOURCE_ROOT, "docs", "python.md")
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        start = text.index("| TRL `SFTConfig` |")
        end = text.index("\n\n", start)
        listed = set()
        d = pt.SFTConfig()
        for line in text[start:end].splitlines()[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            status = cells[1].split(":")[0]
            names = re.findall(r"`([a-z_][a-z0-9_]*)`", re.sub(r"\[[^\]]*\]", "", cells[0]))
            for name in names:
                listed.add(name)
                with self.subTest(name=name):
                    v = getattr(d, name)
                    pt.SFTConfig(**{name: v})
                    other = {"x": 1} if v is None else (not v if isinstance(v, bool) else None)
                    if status == "refused":
                        with self.assertRaises(pt.InvalidArgument) as cm:
                            pt.SFTConfig(**{name: other})
                        self.assertIn(name, cm.exception.message)
                        self.assertIn("not supported here", cm.exception.message)
                    elif status == "ignored" and other is not None:
                        pt.SFTConfig(**{name: other})
        self.assertEqual(sorted(set(sft_trainer.SFT_FIELDS) - listed), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
