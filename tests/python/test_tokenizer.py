"""Tokenizers and chat templates through the binding: the built-in byte
tokenizer and ChatML without shared data; the reference vectors of
../shared/data/tokenizers and stories260K's tokenize.json when present."""

import json
import os
import unittest

import ptest
import posttrain as pt

MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3+3?"},
            {"role": "assistant", "content": "6, é"}]


class TestByteTokenizer(unittest.TestCase):
    def setUp(self):
        self.tok = pt.Tokenizer.bytes()

    def tearDown(self):
        self.tok.close()

    def test_encode_decode(self):
        t = self.tok
        self.assertEqual(t.vocab_size, 261)
        self.assertEqual(t.encode("héllo"), list("héllo".encode("utf-8")))
        self.assertEqual(t.encode("hi", add_special=True), [256, 104, 105])
        self.assertEqual(t.encode(""), [])
        self.assertEqual(t.encode("a<|im_end|>b"), [97, 260, 98])
        self.assertEqual(t.decode([104, 195, 169, 257]), "hé<|eos|>")
        self.assertEqual(t.decode([104, 195, 169, 257], skip_special=True), "hé")
        self.assertEqual(t.decode([0xff]), "\ufffd")
        self.assertEqual(t.encode(b"a\x00b"), [97, 0, 98])   # bytes with a NUL are fine
        self.assertEqual((t.bos_id, t.eos_id, t.pad_id), (256, 257, 258))
        self.assertEqual(t.id_to_token(32), "\u0120")
        self.assertIsNone(t.id_to_token(9999))
        self.assertEqual(t.token_to_id("<|im_start|>"), 259)
        self.assertTrue(t.is_special(256))
        self.assertFalse(t.is_special(65))

    def test_decode_stream(self):
        ids = self.tok.encode("naïve café 日本 🦙!")
        with self.tok.decode_stream() as s:
            pieces = [s.step(i) for i in ids]
            pieces.append(s.flush())
        self.assertEqual("".join(pieces), "naïve café 日本 🦙!")
        # a 4-byte character comes out whole, on its last byte
        i = pieces.index("🦙")
        self.assertEqual(pieces[i - 3:i], ["", "", ""])

    def test_chatml_render_and_mask(self):
        ct = pt.ChatTemplate.from_name("chatml")
        self.assertEqual((ct.name, ct.family), ("chatml", pt.ChatFamily.CHATML))
        self.assertEqual(str(ct.family), "chatml")
        text = ct.render(MESSAGES)
        self.assertEqual(text,
                         "<|im_start|>system\nBe brief.<|im_end|>\n"
                         "<|im_start|>user\n2+2?<|im_end|>\n"
                         "<|im_start|>assistant\n4<|im_end|>\n"
                         "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                         "<|im_start|>assistant\n6, é<|im_end|>\n")
        gen = ct.render(MESSAGES[:2], add_generation_prompt=True)
        self.assertTrue(gen.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"))
        ids, mask = ct.render_ids(self.tok, MESSAGES)
        self.assertEqual(ids, self.tok.encode(text))
        self.assertEqual(len(mask), len(ids))
        self.assertEqual(set(mask), {0, 1})
        # the masked tokens are exactly each assistant reply and its <|im_end|>
        spans, cur = [], []
        for i, m in zip(ids, mask):
            if m:
                cur.append(i)
            elif cur:
                spans.append(self.tok.decode(cur))
                cur = []
        self.assertEqual(spans, ["4<|im_end|>", "6, é<|im_end|>"])
        # (role, content) pairs and role ids work too
        self.assertEqual(ct.render([("user", "x"), (2, "y")]),
                         "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\ny<|im_end|>\n")

    def test_other_families(self):
        l2 = pt.ChatTemplate.from_name("llama2")
        self.assertEqual(l2.render(MESSAGES[:3]),
                         "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n2+2? [/INST] 4 </s>")
        self.assertEqual(l2.render(MESSAGES[:3], bos="none"),
                         "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n2+2? [/INST] 4 </s>")
        q = pt.ChatTemplate.from_name("qwen3")
        self.assertTrue(q.render(MESSAGES[1:2], add_generation_prompt=True,
                                 enable_thinking=False)
                        .endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
        plain = pt.ChatTemplate.from_name("plain")
        plain.set_tokens(eos_token="</e>")
        self.assertEqual(plain.render(MESSAGES[1:3]), "2+2?4</e>")


def read_jsonl(path):
    with open(path, "rb") as f:
        data = f.read().decode("utf-8")
    # decoded texts may hold U+2028/U+2029/U+0085: split on \n only
    return [json.loads(line) for line in data.split("\n") if line.strip()]


def text_bytes(s):
    return s.encode("utf-8", "surrogatepass")


class TestReferenceVectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = ptest.shared_data("tokenizer reference vectors (Python binding)")

    def setUp(self):
        if self.root is None:
            self.skipTest("shared data absent (../shared/data or $PT_SHARED_DATA)")

    def check_folder(self, name, vocab, bos, eos):
        d = os.path.join(self.root, "tokenizers", name)
        with pt.Tokenizer.load(d) as tok:
            self.assertEqual((tok.vocab_size, tok.bos_id, tok.eos_id), (vocab, bos, eos))
            n = 0
            for fname, expect in (("vectors.jsonl", 56), ("vectors-multilingual.jsonl", 149)):
                rows = read_jsonl(os.path.join(d, fname))
                self.assertEqual(len(rows), expect)
                for k, r in enumerate(rows):
                    with self.subTest(tokenizer=name, file=fname, line=k + 1):
                        ids = tok.encode(text_bytes(r["text"]), add_special=r["add_special_tokens"])
                        self.assertEqual(ids, r["ids"])
                        self.assertEqual(tok.decode(r["ids"]), r["decoded"])
                        n += 1
            self.assertEqual(n, 205)

    def test_gpt2(self):
        self.check_folder("gpt2", 50257, None, None)

    def test_llama3(self):
        self.check_folder("llama3", 128256, 128000, 128001)

    def test_qwen3(self):
        self.check_folder("qwen3", 151669, None, 151645)

    def test_llama_spm(self):
        self.check_folder("llama-spm", 32045, 1, 32000)

    def test_qwen3_chat_template(self):
        with pt.Tokenizer.load(os.path.join(self.root, "tokenizers", "qwen3")) as tok:
            self.assertIn("<|im_start|>", tok.chat_template_source())
            ct = tok.chat_template()
            self.assertEqual(ct.name, "qwen3")
            ids, mask = ct.render_ids(tok, MESSAGES[1:3])
            self.assertEqual(ids, tok.encode(ct.render(MESSAGES[1:3])))
            masked = tok.decode([i for i, m in zip(ids, mask) if m])
            self.assertEqual(masked, "<think>\n\n</think>\n\n4<|im_end|>")

    def test_stories260k_tokenize(self):
        d = os.path.join(self.root, "models", "stories260K")
        with open(os.path.join(d, "reference", "tokenize.json"), encoding="utf-8") as f:
            ref = json.load(f)
        # from memory, with and without the tokenizer_config.json text
        with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
            tj = f.read()
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            tc = f.read()
        with pt.Tokenizer.from_json(tj, tc) as t1, pt.Tokenizer.from_json(tj) as t2:
            self.assertEqual((t1.bos_token, t1.eos_token, t1.add_bos), ("<s>", "</s>", True))
            self.assertIsNone(t2.add_bos)
            text = ref["results"][0]["text"]
            self.assertEqual(t1.encode(text, add_special=True), t2.encode(text, add_special=True))
            self.assertEqual(t1.encode(text), ref["results"][0]["ids"])
        with pt.Tokenizer.load(d) as tok:
            self.assertEqual((tok.vocab_size, tok.bos_id, tok.eos_id, tok.add_bos), (512, 1, 2, True))
            self.assertEqual(len(ref["results"]), 50)
            for k, r in enumerate(ref["results"]):
                with self.subTest(case=k, text=r["text"]):
                    ids = tok.encode(r["text"])
                    self.assertEqual(ids, r["ids"])
                    self.assertEqual(tok.decode(ids, skip_special=True), r["decoded"])
                    ws = tok.encode(r["text"], add_special=True)
                    self.assertEqual(ws, r["ids_with_special"])
                    self.assertEqual([tok.id_to_token(i) for i in ws[1:]], r["tokens"])


if __name__ == "__main__":
    ptest.main()
