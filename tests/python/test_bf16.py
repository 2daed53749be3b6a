"""BF16 through the binding (pt_model_set_bf16, pt_set_cpu_path) on the real
stories260K model: Model.load(bf16=...), the bf16 property, the values a
frozen BF16 base shows (its FP32 values rounded to BF16), set_tensor refused
on it, logits near the PyTorch reference on every kernel path this CPU runs
(the others printed as skipped), Context.bf16_activations, and
GRPOTrainer(bf16=True).  Skips with a
printed reason without ../shared/data."""

import json
import math
import os
import struct
import unittest

import ptest
import posttrain as pt

PATHS = ["avx2", "avx512", "avx512bf16"]


def bf16_round(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", u))[0]


def rel_l2(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den)


class TestBF16(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = ptest.shared_data("bf16 (Python binding)")
        cls.dir = os.path.join(root, "models", "stories260K") if root else None

    def setUp(self):
        if self.dir is None:
            self.skipTest("shared data absent (../shared/data or $PT_SHARED_DATA)")

    def tearDown(self):
        pt.set_cpu_path(None)

    def test_modes_and_values(self):
        name = "model.layers.1.mlp.down_proj.weight"
        with pt.Model.load(self.dir) as m32, pt.Model.load(self.dir, bf16="frozen") as mb:
            self.assertIs(m32.bf16, False)
            self.assertEqual(mb.bf16, "frozen")
            self.assertEqual(mb.num_trainable_params, 0)
            w32 = m32.get_tensor(name).data
            wb = mb.get_tensor(name).data
            self.assertEqual(list(wb), [bf16_round(x) for x in w32])
            self.assertNotEqual(list(wb), list(w32))
            with self.assertRaises(pt.StateError):
                mb.set_tensor(name, w32)
            # norms stay FP32 and writable
            mb.set_tensor("model.norm.weight", m32.get_tensor("model.norm.weight"))
            with self.assertRaises(pt.InvalidArgument):
                mb.bf16 = "half"
            mb.bf16 = False
            self.assertEqual(list(mb.get_tensor(name).data), list(wb))
            mb.set_tensor(name, w32)   # writable again
            self.assertEqual(list(mb.get_tensor(name).data), list(w32))

    def test_logits_every_path(self):
        with open(os.path.join(self.dir, "reference", "logits.json"), encoding="utf-8") as f:
            ref = json.load(f)
        flat_ref = [v for row in ref["logits"] for v in row]
        detected = pt.cpu_info().split("up to ")[1].split(")")[0].split(";")[0]
        ran = []
        with pt.Model.load(self.dir, bf16="frozen") as mb:
            for p in PATHS:
                if PATHS.index(p) > PATHS.index(detected):
                    print("bf16 (Python): skipped path %s (this CPU runs up to %s)" % (p, detected))
                    with self.assertRaises(pt.Unsupported):
                        pt.set_cpu_path(p)
                    continue
                pt.set_cpu_path(p)
                self.assertEqual(pt.cpu_path(), p)
                self.assertTrue(pt.has_feature("cpu-path=" + p))
                got = [v for row in mb.logits(ref["input_ids"]) for v in row]
                e = rel_l2(got, flat_ref)
                self.assertLess(e, 2e-2, p)
                self.assertGreater(e, 1e-5, p)   # BF16 weights really in use
                ran.append("%s %.2e" % (p, e))
        print("bf16 (Python): logits vs PyTorch, rel L2:", ", ".join(ran))

    def test_grpo_trainer_bf16(self):
        with pt.Model.load(self.dir) as m, pt.Model.load(self.dir) as ref:
            m.add_lora(rank=4)
            tr = pt.GRPOTrainer(m, lambda completions, **kw: [float(len(c)) for c in completions],
                                [{"prompt": "Once upon a time"}] * 4, num_generations=2,
                                batch_prompts=2, max_new_tokens=8, ref_model=ref,
                                grpo={"beta": 0.1}, bf16=True, learning_rate=1e-3)
            self.assertIs(m.bf16, True)
            self.assertEqual(ref.bf16, "frozen")
            rounds = tr.train(rounds=1)
            self.assertGreaterEqual(len(rounds), 1)
            self.assertTrue(math.isfinite(rounds[0]["loss"]))

    def test_bf16_activations(self):
        """Context.bf16_activations: on by default for a context of a model
        whose base is frozen in BF16, off for an FP32 one and for full mixed
        precision; the forward's log-probs and loss the same bits either way;
        Model.bf16 on the model's own context follows."""
        ids = [1, 400, 33, 250, 71, 9, 300, 12] * 4
        tgt = ids[1:] + [-1]
        with pt.Model.load(self.dir) as m:
            ctx32 = m.context(1, len(ids))
            self.assertIs(ctx32.bf16_activations, False)
            m.bf16 = True
            self.assertIs(m.context(1, len(ids)).bf16_activations, False)
            m.bf16 = "frozen"
            ctx = m.context(1, len(ids))
            self.assertIs(ctx.bf16_activations, True)
            on = ctx.forward(ids, tgt, logits=False).logprobs
            l_on = ctx.loss(ids, tgt)
            ctx.bf16_activations = False
            self.assertIs(ctx.bf16_activations, False)
            off = ctx.forward(ids, tgt, logits=False).logprobs
            l_off = ctx.loss(ids, tgt)
            self.assertEqual(list(on), list(off))
            self.assertEqual(l_on, l_off)
            m.forward(ids, tgt, logits=False)          # the model's own context
            self.assertIs(m._ctx.bf16_activations, True)
            m.bf16 = False
            self.assertIs(m._ctx.bf16_activations, False)
            m.bf16 = True                              # full mixed precision: FP32 ones
            self.assertIs(m._ctx.bf16_activations, False)


if __name__ == "__main__":
    ptest.main()
