"""Generation (posttrain/generate.h) through the binding: greedy tokens and
their log-probabilities against step-by-step forwards recomputed in Python,
seeded sampling, streams, stop ids, errors; stories260K's 200 reference
greedy tokens when ../shared/data is present."""

import json
import os
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY
PROMPTS = [[256, 72, 105], [256, 50, 43, 51, 61], [256, 72, 105]]


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)   # ties: lowest id, as pt_generate


@unittest.skipUnless(pt.has_feature("generate"), "the loaded libposttrain has no pt_generate")
class TestGenerate(unittest.TestCase):
    def setUp(self):
        self.m = pt.Model.create(TINY, seed=9)

    def tearDown(self):
        self.m.close()

    def test_defaults(self):
        self.assertEqual(pt.generate_defaults(),
                         {"max_new_tokens": 64, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                          "min_p": 0.0, "seed": 0, "stream_offset": 0})

    def test_greedy_matches_forward(self):
        out = self.m.generate(PROMPTS, max_new_tokens=6, temperature=0, stop_ids=[])
        self.assertEqual(len(out), 3)
        for p, g in zip(PROMPTS, out):
            self.assertIs(g.finish_reason, pt.FinishReason.LENGTH)
            seq = list(p)
            for k in range(6):
                row = self.m.logits(seq)[-1]
                tok = argmax(row)
                self.assertEqual(g.tokens[k], tok)
                self.assertAlmostEqual(g.logprobs[k], ptest.log_softmax_row(row)[tok], delta=2e-5)
                seq.append(tok)
        self.assertEqual(out[0], out[2])     # same prompt, same greedy result
        # top_k = 1 samples the argmax whatever the temperature
        again = self.m.generate(PROMPTS[1], max_new_tokens=6, temperature=1.3, top_k=1,
                                stop_ids=[], seed=5)
        self.assertEqual(again.tokens, out[1].tokens)

    def test_sampling_is_seeded(self):
        kw = dict(max_new_tokens=8, temperature=0.7, stop_ids=[])
        a = self.m.generate(PROMPTS, seed=1, **kw)
        self.assertEqual(self.m.generate(PROMPTS, seed=1, **kw), a)
        self.assertNotEqual([g.tokens for g in self.m.generate(PROMPTS, seed=2, **kw)],
                            [g.tokens for g in a])
        # rows draw from streams seed/(offset + b): row 2 alone with offset 2
        row2 = self.m.generate(PROMPTS[2], seed=1, stream_offset=2, **kw)
        self.assertEqual(row2, a[2])
        # sampled log-probabilities are log_softmax(logits / T) before filtering
        seq = list(PROMPTS[0])
        for k, tok in enumerate(a[0].tokens):
            row = [x / 0.7 for x in self.m.logits(seq)[-1]]
            self.assertAlmostEqual(a[0].logprobs[k], ptest.log_softmax_row(row)[tok], delta=2e-5)
            seq.append(tok)

    def test_stop_ids(self):
        g = self.m.generate(PROMPTS[0], max_new_tokens=6, temperature=0, stop_ids=[])
        stop = g.tokens[2]
        first = g.tokens.index(stop)
        s = self.m.generate(PROMPTS[0], max_new_tokens=6, temperature=0, stop_ids=[stop])
        self.assertIs(s.finish_reason, pt.FinishReason.STOP)
        self.assertEqual((int(s.finish_reason), str(s.finish_reason)), (0, "stop"))
        self.assertEqual(s.tokens, g.tokens[:first + 1])
        self.assertIsNone(self.m.generate(PROMPTS[0], max_new_tokens=2, logprobs=False).logprobs)

    def test_bf16_kv_cache(self):
        """A generator whose cache holds BF16 (kv_cache="bf16"): the forward's
        log-probabilities within BF16's rounding but not equal to the FP32
        cache's; back to FP32, the FP32 results bit for bit; a bad name."""
        self.assertIs(self.m.generator(1, 8, kv_cache="bf16").kv_cache, pt.KVCache.BF16)
        gen = self.m.generator(3, 16)
        self.assertIs(gen.kv_cache, pt.KVCache.FP32)
        a = gen.generate(PROMPTS, max_new_tokens=6, temperature=0, stop_ids=[])
        gen.kv_cache = "bf16"
        self.assertIs(gen.kv_cache, pt.KVCache.BF16)
        b = gen.generate(PROMPTS, max_new_tokens=6, temperature=0, stop_ids=[])
        self.assertNotEqual([g.logprobs for g in a], [g.logprobs for g in b])
        for p, g in zip(PROMPTS, b):
            seq = list(p)
            for k, tok in enumerate(g.tokens):
                row = self.m.logits(seq)[-1]
                self.assertAlmostEqual(g.logprobs[k], ptest.log_softmax_row(row)[tok], delta=5e-2)
                seq.append(tok)
        gen.kv_cache = pt.KVCache.FP32
        self.assertEqual(gen.generate(PROMPTS, max_new_tokens=6, temperature=0, stop_ids=[]), a)
        with self.assertRaises(pt.InvalidArgument) as cm:
            gen.kv_cache = "f16"
        self.assertEqual(cm.exception.message,
                         "pt_kv_cache_from_name: unknown KV-cache type 'f16' (one of: fp32, bf16)")
        self.assertIs(pt.Generator(self.m, 1, 8, kv_cache=pt.KVCache.BF16).kv_cache,
                      pt.KVCache.BF16)

    def test_generator_errors(self):
        gen = self.m.generator(2, 8)
        with self.assertRaises(pt.InvalidArgument) as cm:
            gen.generate(PROMPTS[0], max_new_tokens=10)
        self.assertEqual(cm.exception.message,
                         "pt_generate: prompt 0 (3 tokens) plus max_new_tokens 10 exceeds the "
                         "generator's max_seq 8")
        with self.assertRaises(pt.InvalidArgument) as cm:
            gen.generate(PROMPTS, max_new_tokens=2)
        self.assertEqual(cm.exception.message,
                         "pt_generate: batch 3 is outside 1 .. the generator's max_batch 2")
        with self.assertRaises(pt.RangeError) as cm:
            gen.generate(PROMPTS[0], max_new_tokens=2, stop_ids=[999])
        self.assertEqual(cm.exception.message,
                         "pt_generate: stop id 999 (stop_ids[0]) is outside the vocabulary [0, 261)")
        with self.assertRaises(pt.InvalidArgument) as cm:
            gen.generate(PROMPTS[0], max_new_tokens=2, temperature=-1)
        self.assertEqual(cm.exception.message,
                         "pt_generate: temperature -1 must be finite and >= 0 (0: greedy)")
        with pt.abort_on(lambda: True), self.assertRaises(pt.Cancelled):
            gen.generate(PROMPTS[0], max_new_tokens=2)
        self.m.add_lora(rank=2)
        with self.assertRaises(pt.ClosedHandleError) as cm:
            gen.generate(PROMPTS[0], max_new_tokens=2)
        self.assertIn("LoRA adapters changed", cm.exception.message)


@unittest.skipUnless(pt.has_feature("generate"), "the loaded libposttrain has no pt_generate")
class TestStoriesGreedy(unittest.TestCase):
    def test_greedy_200(self):
        root = ptest.shared_data("stories260K greedy generation (Python binding)")
        if root is None:
            self.skipTest("shared data absent (../shared/data or $PT_SHARED_DATA)")
        d = os.path.join(root, "models", "stories260K")
        with open(os.path.join(d, "reference", "greedy_200_ids.json")) as f:
            ref = json.load(f)
        with open(os.path.join(d, "reference", "greedy_200.txt"), encoding="utf-8") as f:
            text = f.read()
        with pt.Model.load(d) as m:
            g = m.generate([ref[0]], max_new_tokens=200, temperature=0)
            self.assertIs(g.finish_reason, pt.FinishReason.LENGTH)
            self.assertEqual(g.tokens, ref[1:])
            self.assertEqual(m.tokenizer.decode(ref[:1] + g.tokens, skip_special=True), text)
            # with the cache in BF16 the same 200 tokens (measured; no near tie on the way)
            gen = pt.Generator(m, 1, 256, kv_cache="bf16")
            self.assertEqual(gen.generate([ref[0]], max_new_tokens=200, temperature=0).tokens,
                             ref[1:])

    def test_stop_ids(self):
        """Model.stop_ids: stories260K's config eos_token_id 2, its tokenizer's
        "</s>" the same id (once); a model without a tokenizer: the config's."""
        root = ptest.shared_data("stories260K stop ids (Python binding)")
        if root is None:
            self.skipTest("shared data absent (../shared/data or $PT_SHARED_DATA)")
        with pt.Model.load(os.path.join(root, "models", "stories260K")) as m:
            self.assertEqual(m.tokenizer.eos_id, 2)
            self.assertEqual(m.stop_ids, [2])
        with pt.Model.create(dict(TINY, eos_token_id=5)) as m:
            self.assertEqual(m.stop_ids, [5])
        with pt.Model.create(dict(TINY, eos_token_id=-1)) as m:
            self.assertEqual(m.stop_ids, [])


if __name__ == "__main__":
    ptest.main()
