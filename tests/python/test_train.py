"""Training through the binding on tiny models (no shared data): a short SFT
run whose loss falls, datasets, schedules, checkpoints that resume
bit-identically, and LoRA adapters in the PEFT layout."""

import json
import os
import tempfile
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY


def write_rows(path, n=48):
    """prompt/completion rows: "a+b=" -> the sum's digits."""
    with open(path, "w") as f:
        for i in range(n):
            a, b = (i * 7) % 10, (i * 3 + 1) % 10
            f.write(json.dumps({"prompt": "%d+%d=" % (a, b), "completion": str(a + b)}) + "\n")


class TestSft(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.data = os.path.join(self.dir.name, "train.jsonl")
        write_rows(self.data)
        self.tok = pt.Tokenizer.bytes()

    def tearDown(self):
        self.tok.close()
        self.dir.cleanup()

    def dataset(self, **kw):
        opts = dict(batch_size=8, max_length=16, seed=3)
        opts.update(kw)
        return pt.Dataset.load_jsonl(self.data, self.tok, **opts)

    def test_dataset(self):
        with self.dataset(eval_fraction=0.25) as ds:
            st = ds.stats
            self.assertEqual(st["rows"], 48)
            self.assertEqual(st["train_examples"] + st["eval_examples"], 48)
            self.assertEqual(st["eval_examples"], 12)
            b, w = ds.next_batch()
            self.assertEqual(b.batch, 8)
            self.assertLessEqual(b.seq, ds.max_seq)
            for r in range(8):
                ids, tg = b.input_ids[r], b.targets[r]
                prompt = self.tok.decode(ids).split("=")[0]
                a, c = (int(x) for x in prompt.lstrip("<|bos|>").split("+"))
                # completion-only: targets are the sum's digits then EOS, the rest -1
                trained = [t for t in tg if t >= 0]
                self.assertEqual(trained, list(str(a + c).encode()) + [257])
                self.assertEqual([1.0 if t >= 0 else 0.0 for t in tg], w[r])
            self.assertEqual(ds.position, (0, 8))

    def test_host_examples(self):
        with pt.Dataset.create(batch_size=2, shuffle=False) as ds:
            ds.add([1, 2, 3, 4, 5], [0, 0, 1, 1, 1])
            ds.add([6, 7, 8])
            b, w = ds.next_batch()
            # whole examples per row, padded; target i is id i+1 where the mask
            # of id i+1 is 1
            self.assertEqual(b.input_ids, [[1, 2, 3, 4, 5], [6, 7, 8, 0, 0]])
            self.assertEqual(b.targets, [[-1, 3, 4, 5, -1], [7, 8, -1, -1, -1]])
            self.assertEqual(b.positions, [[0, 1, 2, 3, 4], [0, 1, 2, 0, 0]])
            self.assertIsNone(b.segments)
            self.assertEqual(w, [[0.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0]])

    def test_short_sft_run_loss_decreases(self):
        with pt.Model.create(TINY, seed=1) as m, self.dataset(eval_fraction=0.25) as ds, \
                pt.Optimizer(m, lr=1e-2, schedule="cosine", warmup_steps=2, total_steps=30) as opt:
            ctx = m.context(8, ds.max_seq)
            eval0, tokens = ds.eval_loss(ctx)
            # 12 held-out examples, each trained on its 1-2 sum digits and EOS
            self.assertTrue(24 <= tokens <= 36 and tokens == int(tokens), tokens)
            losses = []
            for step in range(30):
                b, w = ds.next_batch()
                s = opt.sft_step(b, [w], context=ctx)
                self.assertFalse(s.skipped)
                self.assertEqual(s.step, step + 1)
                self.assertAlmostEqual(s.lr, 1e-2 * pt.schedule_factor("cosine", step, 2, 30),
                                       delta=1e-12)
                losses.append(s.loss)
            eval1, _ = ds.eval_loss(ctx)
        first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
        self.assertLess(last, 0.5 * first, "losses: %r" % losses)
        self.assertLess(eval1, 0.5 * eval0)

    def test_schedule(self):
        self.assertEqual(pt.schedule_factor("linear", 0, 4, 10), 0.0)
        self.assertEqual(pt.schedule_factor("linear", 2, 4, 10), 0.5)
        self.assertAlmostEqual(pt.schedule_factor("linear", 7, 4, 10), 0.5, delta=1e-15)
        self.assertEqual(pt.schedule_factor("constant", 100), 1.0)
        with pt.Model.create(TINY) as m, \
                pt.Optimizer(m, lr=0.1, schedule="linear", warmup_steps=4, total_steps=10) as o:
            self.assertEqual(o.lr, 0.0)
            self.assertEqual(o.step_count, 0)
            self.assertEqual(o.options["schedule"], 1)

    def test_checkpoint_resume_is_identical(self):
        def setup():
            m = pt.Model.create(TINY, seed=2)
            ds = self.dataset()
            opt = pt.Optimizer(m, lr=3e-3, weight_decay=0.01)
            return m, ds, opt

        def run(m, ds, opt, n):
            out = []
            for _ in range(n):
                b, w = ds.next_batch()
                out.append(opt.sft_step(b, [w]).loss)
            return out

        ck = os.path.join(self.dir.name, "ck")
        m, ds, opt = setup()
        with m, ds, opt:
            run(m, ds, opt, 4)
            pt.save_checkpoint(ck, m, opt, {"position": list(ds.position), "note": "é"})
            tail = run(m, ds, opt, 5)
            final = ptest.tensors_flat(m.state_dict())
            self.assertEqual(opt.step_count, 9)
        self.assertEqual(sorted(os.listdir(ck)), ["MANIFEST.json", "model.safetensors",
                                                  "optimizer.safetensors", "trainer_state.json"])
        m, ds, opt = setup()
        with m, ds, opt:
            host = pt.load_checkpoint(ck, m, opt)
            self.assertEqual(host, {"position": [0, 32], "note": "é"})
            self.assertEqual(opt.step_count, 4)
            ds.position = host["position"]
            tail2 = run(m, ds, opt, 5)
            final2 = ptest.tensors_flat(m.state_dict())
        self.assertEqual(tail2, tail)         # bit-identical losses
        self.assertEqual(final2, final)       # and weights

    def test_checkpoint_model_rebuilt(self):
        """load_checkpoint_model: the base the host data records (or base=),
        LoRA adapters added as its "lora" says, the trained tensors loaded:
        the trained model's weights exactly."""
        base = os.path.join(self.dir.name, "base")
        with pt.Model.create(TINY, seed=3) as m:
            m.save(base, copy_tokenizer=False)
        for lora in (None, {"rank": 4, "alpha": 8.0, "targets": 5}):   # 5: q_proj | v_proj
            ck = os.path.join(self.dir.name, "ck-lora" if lora else "ck-full")
            with pt.Model.load(base) as m, self.dataset() as ds:
                if lora:
                    m.add_lora(rank=4, alpha=8.0, targets=("q", "v"))
                with pt.Optimizer(m, lr=1e-2) as opt:
                    for _ in range(2):
                        b, w = ds.next_batch()
                        opt.sft_step(b, [w])
                    host = {"model": base, "step": 2}
                    if lora:
                        host["lora"] = lora
                    pt.save_checkpoint(ck, m, opt, host)
                want = m.state_dict()
            with pt.load_checkpoint_model(ck) as r:
                self.assertEqual(r.has_lora, bool(lora))
                got = r.state_dict()
                self.assertEqual(sorted(got), sorted(want))
                self.assertEqual(ptest.tensors_flat(got), ptest.tensors_flat(want))
        with pt.Model.load(base) as m, pt.Optimizer(m, lr=1e-2) as opt:
            pt.save_checkpoint(os.path.join(self.dir.name, "ck-none"), m, opt, {"step": 0})
        with self.assertRaises(pt.InvalidArgument):
            pt.load_checkpoint_model(os.path.join(self.dir.name, "ck-none"))
        with pt.load_checkpoint_model(os.path.join(self.dir.name, "ck-none"), base=base) as r:
            self.assertFalse(r.has_lora)


class TestGradientCheckpointing(unittest.TestCase):
    def test_same_losses_and_weights(self):
        """model.gradient_checkpointing (Hugging Face's
        gradient_checkpointing_enable()) recomputes activations in the
        backward: the same losses and weights bit for bit."""
        seqs = [[256, 49, 43, 50, 61, 51, 257], [256, 52, 43, 52, 61, 56, 257]]
        b = pt.Batch.next_token(seqs)
        runs = []
        for ckpt in (False, True):
            with pt.Model.create(TINY, seed=4) as m:
                if ckpt:
                    m.gradient_checkpointing_enable()
                self.assertEqual(m.gradient_checkpointing, ckpt)
                with pt.Optimizer(m, lr=1e-2) as opt:
                    losses = [opt.sft_step(b).loss for _ in range(5)]
                    ctx = m.context(2, 7)
                    self.assertEqual(ctx.gradient_checkpointing, ckpt)
                    ctx.gradient_checkpointing = not ckpt
                    self.assertEqual(ctx.gradient_checkpointing, not ckpt)
                    ctx.close()
                runs.append((losses, ptest.tensors_flat(m.state_dict())))
        self.assertLess(runs[0][0][-1], runs[0][0][0])
        self.assertEqual(runs[1][0], runs[0][0])
        self.assertEqual(runs[1][1], runs[0][1])


class TestLora(unittest.TestCase):
    def test_lora_train_save_load_merge(self):
        seqs = [[256, 49, 43, 50, 61, 51, 257], [256, 52, 43, 52, 61, 56, 257]]
        b = pt.Batch.next_token(seqs)
        with tempfile.TemporaryDirectory() as d, pt.Model.create(TINY, seed=4) as m:
            base_logits = m.logits(seqs)
            n_base = m.num_params
            m.add_lora(rank=4, alpha=8, targets=["q", "v", "down"], seed=1)
            self.assertTrue(m.has_lora)
            self.assertEqual(m.lora, {"rank": 4, "alpha": 8.0, "targets": ["q", "v", "down"],
                                      "dropout": 0.0, "seed": 1})
            # a fresh adapter (B = 0) does not change the output
            self.assertEqual(m.logits(seqs), base_logits)
            self.assertEqual(m.num_params, n_base)   # the count covers the base only
            with pt.Optimizer(m, lr=1e-2) as opt:
                losses = [opt.sft_step(b).loss for _ in range(10)]
            self.assertLess(losses[-1], losses[0])
            tuned = m.logits(seqs)
            self.assertNotEqual(tuned, base_logits)

            ad = os.path.join(d, "adapter")
            m.save_lora(ad, "tiny-base")
            with open(os.path.join(ad, "adapter_config.json")) as f:
                acfg = json.load(f)
            self.assertEqual((acfg["r"], acfg["lora_alpha"], acfg["base_model_name_or_path"]),
                             (4, 8, "tiny-base"))
            self.assertEqual(sorted(acfg["target_modules"]), ["down_proj", "q_proj", "v_proj"])
            sd = m.lora_state_dict()
            self.assertIn("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight", sd)
            self.assertEqual(sd["base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight"]
                             .shape, (4, 16))
            self.assertEqual(sd["base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"]
                             .shape, (8, 4))
            # q: 16->16, v: 16->8, down: 32->16, rank 4, 2 layers
            self.assertEqual(len(sd), 2 * 3 * 2)
            self.assertEqual(sum(len(t) for t in sd.values()),
                             2 * 4 * ((16 + 16) + (16 + 8) + (32 + 16)))

            with pt.Model.create(TINY, seed=4) as m2:
                m2.load_lora(ad)
                self.assertEqual(m2.logits(seqs), tuned)
            m.merge_lora()
            self.assertFalse(m.has_lora)
            self.assertIsNone(m.lora)
            self.assertEqual(m.num_params, n_base)
            merged = m.logits(seqs)
            worst = max(abs(x - y) for x, y in zip(ptest.flat(merged), ptest.flat(tuned)))
            self.assertLess(worst, 1e-4)


class TestPlot(unittest.TestCase):
    """posttrain.plot_metrics over pt_plot_metrics_svg."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.m = os.path.join(self.dir.name, "metrics.jsonl")
        self.svg = os.path.join(self.dir.name, "metrics.svg")
        with open(self.m, "w") as f:
            for step, loss in enumerate([3.0, 2.5, None, 1.5], 1):
                f.write(json.dumps({"step": step, "loss": loss, "lr": 0.001}) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def points(self, svg, panel):
        g = svg[svg.index('id="%s"' % panel):]
        g = g[:g.index("</g>")]
        pts = g[g.index('points="') + 8:]
        pts = pts[:pts.index('"')]
        return [tuple(float(v) for v in p.split(",")) for p in pts.split()]

    def test_svg(self):
        self.assertTrue(pt.has_feature("plot"))
        pt.plot_metrics(self.m, self.svg, width=500, height=400, title="run <1>")
        with open(self.svg) as f:
            svg = f.read()
        self.assertIn('<svg xmlns="http://www.w3.org/2000/svg"', svg)
        self.assertIn('width="500" height="400"', svg)
        self.assertIn("run &lt;1&gt;", svg)
        self.assertEqual(svg.count("<polyline"), 2)
        loss = self.points(svg, "loss")
        self.assertEqual(len(loss), 3)                       # the null is left out
        ys = [y for _, y in loss]
        self.assertEqual(ys, sorted(ys))                     # 3.0 highest up ... 1.5 lowest
        self.assertAlmostEqual((ys[1] - ys[0]) / (ys[2] - ys[0]), 1 / 3, places=3)
        self.assertEqual(len(self.points(svg, "lr")), 4)
        self.assertNotIn("nan", svg)
        self.assertNotIn("inf", svg)
        pt.plot_metrics(self.m, self.svg)                    # defaults
        with open(self.svg) as f:
            self.assertIn('width="720" height="380"', f.read())

    def test_errors(self):
        with open(self.svg, "w") as f:
            f.write("keep")
        with self.assertRaises(pt.NotFound):
            pt.plot_metrics(os.path.join(self.dir.name, "missing.jsonl"), self.svg)
        with open(self.m, "w") as f:
            f.write('{"step": 1, "loss": 1}\n{"step": \n')
        with self.assertRaisesRegex(pt.FormatError, "line 2"):
            pt.plot_metrics(self.m, self.svg)
        with open(self.m, "w") as f:
            f.write('{"step": 1, "tokens": 4}\n')
        with self.assertRaisesRegex(pt.InvalidArgument, "no numeric series in"):
            pt.plot_metrics(self.m, self.svg)
        with open(self.m, "w") as f:
            f.write('{"step": 1, "loss": 1}\n')
        with self.assertRaisesRegex(pt.InvalidArgument, "width 5"):
            pt.plot_metrics(self.m, self.svg, width=5)
        with self.assertRaises(pt.InvalidArgument):
            pt.plot_metrics(self.m, self.svg, height="tall")
        with open(self.svg) as f:
            self.assertEqual(f.read(), "keep")


if __name__ == "__main__":
    ptest.main()
