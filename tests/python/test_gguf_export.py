"""Model.export_gguf / Model.export_lora_gguf over pt_model_export_gguf and
pt_lora_export_gguf: a tests/reference configuration with the stories260K
tokenizer fixture (tests/modelio/data/stories260K) exported, then read back
with the standard-library GGUF reader of tests/cli/gguf_read.py."""

import json
import os
import sys
import tempfile
import unittest

import ptest
import posttrain as pt

sys.path.insert(0, os.path.join(ptest.SOURCE_ROOT, "tests", "cli"))
import gguf_read  # noqa: E402

FIXTURE = os.path.join(ptest.SOURCE_ROOT, "tests", "modelio", "data", "stories260K")
REF = os.path.join(ptest.SOURCE_ROOT, "tests", "reference")


@unittest.skipUnless(pt.has_feature("gguf"), "the library has no GGUF export (feature gguf)")
class TestGgufExport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        with open(os.path.join(REF, "llama_tied_gqa", "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        cfg["vocab_size"] = 512
        self.dir = os.path.join(self.tmp.name, "tiny-llama")
        with pt.Model.create(cfg, seed=5) as m:
            m.save(self.dir, tokenizer_dir=FIXTURE)
        self.model = pt.Model.load(self.dir)

    def tearDown(self):
        self.model.close()
        self.tmp.cleanup()

    def read(self, path):
        version, kvs, tensors = gguf_read.read(path)
        self.assertEqual(version, 3)
        return {k: v for k, _, v in kvs}, [k for k, _, _ in kvs], tensors

    def test_export_f16(self):
        out = os.path.join(self.tmp.name, "m.gguf")
        self.model.export_gguf(out, type="f16")
        kv, keys, tensors = self.read(out)
        self.assertEqual(keys[:3], ["general.architecture", "general.type", "general.name"])
        self.assertEqual(kv["general.architecture"], "llama")
        self.assertEqual(kv["general.name"], "Tiny Llama")   # id_to_title of the directory name
        self.assertEqual(kv["general.file_type"], 1)
        self.assertEqual(kv["llama.block_count"], 2)
        self.assertEqual(kv["llama.attention.head_count_kv"], 2)
        self.assertEqual(kv["tokenizer.ggml.model"], "llama")
        self.assertEqual(kv["tokenizer.ggml.tokens"][1][:3], ["<unk>", "<s>", "</s>"])
        self.assertEqual(kv["tokenizer.ggml.bos_token_id"], 1)
        names = [t[0] for t in tensors]
        self.assertEqual(names[0], "token_embd.weight")   # "model.embed_tokens" sorts first
        self.assertNotIn("output.weight", names)           # tied
        self.assertEqual(len(names), 1 + 2 * 9 + 1)
        types = {t[0]: t[1] for t in tensors}
        self.assertEqual(types["blk.0.attn_q.weight"], "F16")
        self.assertEqual(types["blk.0.attn_norm.weight"], "F32")
        self.assertEqual([t[2] for t in tensors if t[0] == "blk.0.attn_k.weight"], [[32, 16]])

    def test_name_and_enum(self):
        out = os.path.join(self.tmp.name, "m.gguf")
        self.model.export_gguf(out, type=pt.GgufType.BF16, name="Mine")
        kv, _, _ = self.read(out)
        self.assertEqual(kv["general.name"], "Mine")
        self.assertEqual(kv["general.file_type"], 32)
        with self.assertRaises(pt.InvalidArgument):
            self.model.export_gguf(out, type="q4_k")
        with self.assertRaises(pt.InvalidArgument):
            self.model.export_gguf(out, type=True)

    def test_without_tokenizer(self):
        out = os.path.join(self.tmp.name, "m.gguf")
        with pt.Model.load(os.path.join(REF, "llama_tied_gqa")) as m:
            with self.assertRaises(pt.StateError):
                m.export_gguf(out)
        self.assertFalse(os.path.exists(out))

    def test_lora(self):
        out = os.path.join(self.tmp.name, "a.gguf")
        with self.assertRaises(pt.StateError):
            self.model.export_lora_gguf(out)
        self.model.add_lora(rank=2, alpha=4.0, targets=("q", "v"), seed=1)
        self.model.export_lora_gguf(out, type="f16")
        kv, _, tensors = self.read(out)
        self.assertEqual(kv["general.type"], "adapter")
        self.assertEqual(kv["adapter.type"], "lora")
        self.assertEqual(len(tensors), 2 * 2 * 2)   # 2 layers x q, v x A, B
        self.assertEqual(kv["general.name"], "Tiny Llama")   # no PEFT directory: the base's
        merged = os.path.join(self.tmp.name, "m.gguf")
        self.model.export_gguf(merged)
        self.assertTrue(self.model.has_lora)         # the model keeps its adapters
        _, _, t = self.read(merged)
        self.assertEqual(len(t), 20)
        # loaded from a PEFT directory: named after it, as convert_lora_to_gguf.py names it
        peft = os.path.join(self.tmp.name, "story-lora-v2")
        self.model.save_lora(peft)
        with pt.Model.load(self.dir) as m:
            m.load_lora(peft)
            m.export_lora_gguf(out)
            kv, keys, _ = self.read(out)
            self.assertEqual(kv["general.name"], "Story Lora v2")
            self.assertEqual(kv["general.version"], "v2")
            self.assertEqual(kv["general.basename"], "story")
            m.export_lora_gguf(out, name="Mine")
            kv, _, _ = self.read(out)
            self.assertEqual(kv["general.name"], "Mine")

    def test_spm_scores(self):
        out = os.path.join(self.tmp.name, "m.gguf")
        self.model.export_gguf(out)
        kv, _, _ = self.read(out)
        self.assertEqual(set(kv["tokenizer.ggml.scores"][1]), {-1000.0})   # the converter's
        self.model.export_gguf(out, spm_scores=pt.SpmScores.MERGES)
        kv, _, _ = self.read(out)
        scores = kv["tokenizer.ggml.scores"][1]
        with open(os.path.join(FIXTURE, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)["model"]
        first = {}
        for rank, mg in enumerate(tj["merges"]):
            piece = "".join(mg) if isinstance(mg, list) else mg.replace(" ", "", 1)
            first.setdefault(tj["vocab"][piece], rank)
        self.assertEqual(scores, [-float(first[i]) if i in first else -1e9 for i in range(512)])
        self.model.export_gguf(out, spm_scores="converter")
        with self.assertRaises(pt.InvalidArgument):
            self.model.export_gguf(out, spm_scores="sentencepiece")


if __name__ == "__main__":
    unittest.main()
