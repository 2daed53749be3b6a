"""posttrain.Model.load of a GGUF file: tests/reference/llama_tied_gqa
written here as llama.cpp's converter lays it out (metadata keys, tensor
names, Q/K rows permuted) loads into the same tensors and logits as the
Hugging Face directory, and inspect_dir describes it."""

import array
import os
import struct
import tempfile
import unittest

import ptest
import posttrain as pt

REF = os.path.join(ptest.SOURCE_ROOT, "tests", "reference", "llama_tied_gqa")

GGUF_U32, GGUF_F32, GGUF_STRING = 4, 6, 8

# Hugging Face name part -> llama.cpp name part (gguf-py constants.py).
NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf.split(".", 3)
    return "blk.%s.%s" % (layer, NAMES[rest])


def permute(data, rows, cols, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute of a [rows, cols] matrix."""
    d = rows // n_head
    out = array.array("f", bytes(4 * rows * cols))
    for r in range(rows):
        h, k = divmod(r, d)
        src = h * d + (k % 2) * (d // 2) + k // 2
        out[r * cols:(r + 1) * cols] = data[src * cols:(src + 1) * cols]
    return out


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kv, tensors):
    """GGUF v3: kv [(key, type, value)], tensors [(name, ne, array('f'))]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, ty, v in kv:
        out += gstr(key) + struct.pack("<I", ty)
        out += {GGUF_U32: lambda: struct.pack("<I", v), GGUF_F32: lambda: struct.pack("<f", v),
                GGUF_STRING: lambda: gstr(v)}[ty]()
    offset, blobs = 0, []
    for name, ne, data in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", 0, offset)
        blob = data.tobytes()
        blob += bytes(-len(blob) % 32)
        blobs.append(blob)
        offset += len(blob)
    out += bytes(-len(out) % 32)
    for b in blobs:
        out += b
    with open(path, "wb") as f:
        f.write(out)


class TestGGUF(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt-gguf-")
        cls.path = os.path.join(cls.tmp, "tiny.gguf")
        with pt.Model.load(REF) as m:
            c = m.config
            sd = m.state_dict()
        cls.hf_sd = sd
        nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
        tensors = []
        for name, t in sd.items():
            data = t.data
            if name.endswith("q_proj.weight"):
                data = permute(data, t.shape[0], t.shape[1], nh)
            elif name.endswith("k_proj.weight"):
                data = permute(data, t.shape[0], t.shape[1], nkv)
            tensors.append((gguf_name(name), tuple(reversed(t.shape)), data))
        kv = [("general.architecture", GGUF_STRING, "llama"),
              ("general.name", GGUF_STRING, "tiny"),
              ("llama.vocab_size", GGUF_U32, c["vocab_size"]),
              ("llama.context_length", GGUF_U32, c["max_position_embeddings"]),
              ("llama.embedding_length", GGUF_U32, c["hidden_size"]),
              ("llama.block_count", GGUF_U32, c["num_hidden_layers"]),
              ("llama.feed_forward_length", GGUF_U32, c["intermediate_size"]),
              ("llama.rope.dimension_count", GGUF_U32, c["hidden_size"] // nh),
              ("llama.attention.head_count", GGUF_U32, nh),
              ("llama.attention.head_count_kv", GGUF_U32, nkv),
              ("llama.rope.freq_base", GGUF_F32, c["rope_theta"]),
              ("llama.attention.layer_norm_rms_epsilon", GGUF_F32, c["rms_norm_eps"]),
              ("general.file_type", GGUF_U32, 0),
              ("tokenizer.ggml.bos_token_id", GGUF_U32, c["bos_token_id"]),
              ("tokenizer.ggml.eos_token_id", GGUF_U32, c["eos_token_id"])]
        write_gguf(cls.path, kv, tensors)

    @classmethod
    def tearDownClass(cls):
        for f in os.listdir(cls.tmp):
            os.remove(os.path.join(cls.tmp, f))
        os.rmdir(cls.tmp)

    def test_load_same_model(self):
        with pt.Model.load(REF) as hf, pt.Model.load(self.path) as gg:
            self.assertEqual(gg.config, hf.config)
            self.assertEqual(gg.source_dir, self.path)
            self.assertIsNone(gg.tokenizer)
            self.assertEqual(ptest.tensors_flat(gg.state_dict()), ptest.tensors_flat(self.hf_sd))
            ids = [3, 17, 42, 5, 60, 0, 9]
            a = hf.forward([ids], logprobs=False).logits
            b = gg.forward([ids], logprobs=False).logits
            self.assertEqual(ptest.flat(a), ptest.flat(b))

    def test_inspect(self):
        info = pt.inspect_dir(self.path)
        self.assertEqual(info["gguf_version"], 3)
        self.assertFalse(info["quantised"])
        self.assertEqual(info["num_files"], 1)
        self.assertEqual(info["num_tensors"], len(self.hf_sd))
        self.assertEqual(list(info["dtypes"]), ["F32"])
        self.assertEqual(info["config"]["num_key_value_heads"], 2)
        self.assertTrue(info["config"]["tie_word_embeddings"])
        self.assertEqual(info["weights_status"], pt.Status.OK)

    def test_truncated_file_refused(self):
        bad = os.path.join(self.tmp, "cut.gguf")
        with open(self.path, "rb") as f, open(bad, "wb") as g:
            g.write(f.read()[:-100])
        with self.assertRaises(pt.Error) as cm:
            pt.Model.load(bad)
        self.assertIn("cut.gguf", str(cm.exception))



QDATA = os.path.join(ptest.SOURCE_ROOT, "tests", "kernels", "data", "quant")


class QuantizedGGUF(unittest.TestCase):
    """A quantized GGUF (llama-quantize's Q8_0 of stories260K, ffn padded to
    192) loads frozen; its tensors read back dequantized; LoRA trains on it;
    quantize= on load gives the same values as llama-quantize."""

    def test_load_quantized(self):
        path = os.path.join(QDATA, "stories192.q8_0.gguf")
        with pt.Model.load(path) as m:
            self.assertEqual(m.num_trainable_params, 0)
            w = m.get_tensor("model.layers.0.self_attn.q_proj.weight")
            self.assertEqual(len(w.data), 64 * 64)
            with self.assertRaises(pt.Error) as cm:
                m.set_tensor("model.layers.0.self_attn.q_proj.weight", w)
            self.assertIn("quantized", str(cm.exception))
            m.add_lora(rank=2)
            self.assertGreater(m.num_trainable_params, 0)

    def test_quantize_on_load(self):
        shared = ptest.shared_data("quantize on load")
        src = os.path.join(shared, "models", "stories260K") if shared else None
        if not src or not os.path.isdir(src):
            self.skipTest("no shared stories260K")
        name = "model.layers.2.self_attn.v_proj.weight"
        with pt.Model.load(src, quantize="q4_0") as a, \
                pt.Model.load(os.path.join(QDATA, "stories192.q4_0.gguf")) as b:
            self.assertEqual(list(a.get_tensor(name).data), list(b.get_tensor(name).data))
        with self.assertRaises(ValueError):
            pt.Model.load(src, quantize="q5_1")


if __name__ == "__main__":
    ptest.main()
