"""The real stories260K model through the binding against its reference
files (the ones tests/parity/test_stories.c uses): logits of
reference/logits.json within 1e-4, the float64 reference losses of
reference/loss.json within 1e-5, the story's ids through the tokenizer, and
the greedy path.  Skips with a printed reason without ../shared/data."""

import json
import os
import tempfile
import unittest

import ptest
import posttrain as pt

LOGITS_ATOL = 1e-4
LOSS_ATOL = 1e-5


class TestStories260K(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        root = ptest.shared_data("stories260K (Python binding)")
        cls.dir = os.path.join(root, "models", "stories260K") if root else None
        if cls.dir is None:
            return
        cls.ref = os.path.join(cls.dir, "reference")
        cls.model = pt.Model.load(cls.dir)

    @classmethod
    def tearDownClass(cls):
        if cls.dir is not None:
            cls.model.close()

    def setUp(self):
        if self.dir is None:
            self.skipTest("shared data absent (../shared/data or $PT_SHARED_DATA)")

    def load(self, name):
        with open(os.path.join(self.ref, name), encoding="utf-8") as f:
            return json.load(f)

    def test_memory_estimate_and_info_json(self):
        # hand computation: 260032 parameters; per token 5 * (4*64 + 2*64 +
        # 2*32 + 3*172 + 8) + 2*64 = 4988 values kept; LoRA r 16: 18496 a layer
        e = pt.memory_estimate(self.model.config)
        self.assertEqual((e["context"], e["seq"], e["batch"], e["lora_rank"]), (512, 256, 4, 16))
        self.assertEqual(e["weights_bytes"], 4 * 260032)
        self.assertEqual(e["kv_cache_bytes"], 2 * 5 * 32 * 512 * 4)
        self.assertEqual(e["activation_bytes"], 4 * 4 * 256 * 4988)
        self.assertEqual(e["lora_params"], 5 * 18496)
        self.assertEqual(pt.memory_estimate(self.model.config, batch=1, seq=1)["activation_bytes"], 4 * 4988)
        with self.assertRaises(pt.InvalidArgument):
            pt.memory_estimate(self.model.config, batch=0)
        doc = json.loads(pt.dir_info_json(self.dir, lora_rank=2))
        self.assertEqual(doc["dir"], self.dir)
        self.assertEqual(doc["num_params"], 260032)
        self.assertEqual(doc["memory"]["lora"]["adapter_params"], 5 * 18496 / 8)
        self.assertEqual(doc["memory"]["inference"]["total_bytes"], 4 * 260032 + 655360)
        text = pt.dir_info_text(self.dir)
        self.assertTrue(text.startswith("model:        %s\n" % self.dir))
        self.assertIn("parameters:   260032 (0.26 M)\n", text)
        # 4 * 260032 B = 1015.75 KiB of weights and 640 KiB of KV cache (1.62 MiB)
        self.assertIn("  inference:         1015.75 KiB weights + 640.00 KiB KV cache (1 sequence of 512 tokens)"
                      " = 1.62 MiB\n", text)

    def test_model(self):
        m = self.model
        cfg = m.config
        self.assertEqual((cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"],
                          cfg["num_attention_heads"], cfg["num_key_value_heads"]), (512, 64, 5, 8, 4))
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertEqual(m.num_params, 260032)
        self.assertEqual(m.source_dir, self.dir)
        self.assertEqual(m.tokenizer.vocab_size, 512)

    def test_logits(self):
        ref = self.load("logits.json")
        self.assertEqual(ref["shape"], [32, 512])
        got = self.model.logits(ref["input_ids"])
        worst = max(abs(a - b) for ra, rb in zip(got, ref["logits"]) for a, b in zip(ra, rb))
        print("stories260K logits max |diff| %.3g (tolerance %.0e)" % (worst, LOGITS_ATOL))
        self.assertLess(worst, LOGITS_ATOL)

    def test_losses(self):
        ref = self.load("loss.json")
        greedy = self.load("greedy_200_ids.json")
        self.assertEqual(len(greedy), 201)
        loss = self.model.loss(pt.Batch.next_token(greedy))
        self.assertAlmostEqual(loss, ref["greedy_200"]["loss"], delta=LOSS_ATOL)
        # the story through the model's tokenizer (BOS added by its post-processor)
        with open(os.path.join(self.ref, "story.txt"), encoding="utf-8") as f:
            story = f.read()
        ids = self.model.tokenizer.encode(story, add_special=True)
        self.assertEqual(ids, ref["story"]["ids"])
        loss = self.model.loss(pt.Batch.next_token(ids))
        self.assertAlmostEqual(loss, ref["story"]["loss"], delta=LOSS_ATOL)
        # -mean(logprobs) agrees, and so does pt_model_eval_jsonl
        b = pt.Batch.next_token(ids)
        lp = self.model.logprobs(b)
        self.assertAlmostEqual(-sum(lp) / len(lp), ref["story"]["loss"], delta=LOSS_ATOL)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "story.jsonl")
            with open(p, "w") as f:
                f.write(json.dumps({"text": story}) + "\n")
                f.write(json.dumps({"input_ids": greedy}) + "\n")
            r = self.model.eval_jsonl(p)
            self.assertEqual(r.row_tokens, [102, 200])
            self.assertAlmostEqual(r.row_loss[0], ref["story"]["loss"], delta=LOSS_ATOL)
            self.assertAlmostEqual(r.row_loss[1], ref["greedy_200"]["loss"], delta=LOSS_ATOL)

    def test_greedy_path(self):
        greedy = self.load("greedy_200_ids.json")
        lg = self.model.logits(greedy[:-1])
        argmax = [max(range(512), key=row.__getitem__) for row in lg]
        self.assertEqual(argmax, greedy[1:])
        with open(os.path.join(self.ref, "greedy_200.txt"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(self.model.tokenizer.decode(greedy, skip_special=True), text)

    def test_save_reload(self):
        with tempfile.TemporaryDirectory() as d:
            self.model.save(d)
            self.assertTrue(os.path.exists(os.path.join(d, "tokenizer.json")))
            with pt.Model.load(d) as m2:
                ids = self.load("logits.json")["input_ids"]
                self.assertEqual(m2.logits(ids), self.model.logits(ids))


if __name__ == "__main__":
    ptest.main()
