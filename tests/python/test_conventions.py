"""The binding's conventions (docs/python.md): enums built from the library's
name tables, taking members or names and reporting members; feature
detection from pt_features(); one return convention (values, named tuples,
None; posttrain errors carrying a Status); the version from meson.build
alone; the package's modules all installed."""

import ctypes
import os
import pickle
import re
import tempfile
import unittest

import ptest
import posttrain as pt
from posttrain import _lib

TINY = ptest.TINY
PY_DIR = os.path.join(ptest.SOURCE_ROOT, "python")


def lib_name(prefix, value):
    s = getattr(_lib.lib, "pt_%s_name" % prefix)(int(value))
    return s.decode() if s is not None else None


class TestEnums(unittest.TestCase):
    def test_members_come_from_the_library(self):
        self.assertEqual([(m.name, int(m)) for m in pt.Arch],
                         [("LLAMA", 0), ("QWEN2", 1), ("QWEN3", 2), ("MISTRAL", 3)])
        self.assertEqual([m.name for m in pt.RopeType], ["DEFAULT", "LLAMA3", "LINEAR"])
        self.assertEqual([m.name for m in pt.OptimizerType], ["ADAMW", "SGD"])
        self.assertEqual(int(pt.Schedule.COSINE), 2)
        self.assertEqual([(m.name, int(m)) for m in pt.LogLevel],
                         [("ERROR", 0), ("WARN", 1), ("INFO", 2), ("DEBUG", 3)])
        self.assertEqual([(m.name, int(m)) for m in pt.ChatRole],
                         [("SYSTEM", 0), ("USER", 1), ("ASSISTANT", 2), ("TOOL", 3)])
        self.assertEqual(int(pt.ChatFamily.CHATML), 1)       # families start at 1
        self.assertEqual([m.name for m in pt.ChatFamily],
                         ["CHATML", "QWEN3", "LLAMA3", "LLAMA2", "PHI3", "PLAIN"])
        self.assertEqual((int(pt.Status.OK), int(pt.Status.EINVAL), int(pt.Status.EINTERNAL)),
                         (0, -1, -16))
        self.assertEqual(int(pt.Status.EPEER), -17)
        self.assertEqual(int(pt.Status.EBUSY), -18)
        self.assertIs(pt.STATUS_CLASSES[pt.Status.EBUSY], pt.BusyError)
        self.assertEqual(int(pt.Status.EEXIST), -19)
        self.assertIs(pt.STATUS_CLASSES[pt.Status.EEXIST], pt.ExistsError)
        self.assertEqual(len(pt.Status), 20)
        if pt.has_feature("generate"):
            self.assertEqual([(m.name, int(m)) for m in pt.FinishReason],
                             [("STOP", 0), ("LENGTH", 1)])
        if pt.has_feature("grpo"):
            self.assertEqual(int(pt.LossType.DR_GRPO), 3)
            self.assertEqual([m.name for m in pt.ScaleRewards], ["GROUP", "BATCH", "NONE", "RLOO"])
            self.assertEqual([m.name for m in pt.ISLevel], ["TOKEN", "SEQUENCE"])
            self.assertEqual([m.name for m in pt.RolloutLogprobs], ["OLD", "REF", "SAMPLING"])
            self.assertEqual([m.name for m in pt.ISCorrection],
                             ["NONE", "TOKEN_TRUNCATE", "TOKEN_MASK", "SEQUENCE_TRUNCATE",
                              "SEQUENCE_MASK"])
        # Every member is the upper-case of the library's name for its value.
        for cls in (pt.Arch, pt.RopeType, pt.OptimizerType, pt.Schedule, pt.LogLevel, pt.ChatRole,
                    pt.ChatFamily, pt.FinishReason, pt.ScaleRewards, pt.LossType, pt.ISLevel,
                    pt.RolloutLogprobs, pt.ISCorrection):
            for m in cls:
                with self.subTest(enum=cls.__name__, member=m.name):
                    self.assertEqual(lib_name(cls._c_prefix, m), str(m))
                    self.assertEqual(m.name, str(m).upper())
        self.assertEqual(str(pt.Status.ECHECKSUM), "PT_ECHECKSUM")

    def test_str_int_and_format(self):
        m = pt.LossType.DR_GRPO if pt.has_feature("grpo") else pt.Schedule.COSINE
        name, value = str(m), int(m)
        self.assertEqual(name, "dr_grpo" if value == 3 else "cosine")
        self.assertEqual("%s %d" % (m, m), "%s %d" % (name, value))
        self.assertEqual(f"{m}|{m:>8}|{m:d}|{m:02d}", "%s|%8s|%d|%02d" % (name, name, value, value))
        self.assertEqual(m, value)                       # an IntEnum: equal to its C value
        self.assertIs(pickle.loads(pickle.dumps(m)), m)

    def test_names_parse_through_the_library(self):
        self.assertIs(pt.Arch("qwen3"), pt.Arch.QWEN3)
        self.assertIs(pt.Arch.coerce("mistral"), pt.Arch.MISTRAL)
        self.assertIs(pt.Arch.coerce(pt.Arch.QWEN2), pt.Arch.QWEN2)
        self.assertIs(pt.Arch.coerce(1), pt.Arch.QWEN2)
        self.assertIs(pt.ChatRole.coerce("ipython"), pt.ChatRole.TOOL)   # the library's alias
        # An int the library does not name passes through: C reports it.
        self.assertEqual(type(pt.Arch.coerce(9)), int)
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.Arch("qwen9")
        self.assertEqual(cm.exception.message, "pt_arch_from_name: unknown architecture 'qwen9' "
                         "(one of: llama, qwen2, qwen3, mistral)")
        self.assertEqual(cm.exception.function, "pt_arch_from_name")
        # Members of another enum, bools and other types are refused by the binding.
        for bad in (pt.Schedule.LINEAR, True, 1.5, None):
            with self.subTest(value=bad), self.assertRaises(pt.InvalidArgument) as cm:
                pt.Model.create(dict(TINY, arch=bad))
            self.assertIn("arch must be a posttrain.Arch, one of llama, qwen2, qwen3, mistral",
                          cm.exception.message)

    def test_values_come_back_as_members(self):
        with pt.Model.create(dict(TINY, arch="qwen2", attention_bias=True)) as m:
            self.assertIs(m.config["arch"], pt.Arch.QWEN2)
            self.assertIs(m.config["rope_type"], pt.RopeType.DEFAULT)
        with pt.Model.create(dict(TINY, arch=pt.Arch.LLAMA)) as m:
            self.assertIs(pt.default_config()["arch"], pt.Arch.LLAMA)
            with pt.Optimizer(m, type=pt.OptimizerType.SGD, schedule="cosine",
                              total_steps=10) as opt:
                self.assertIs(opt.options["type"], pt.OptimizerType.SGD)
                self.assertIs(opt.options["schedule"], pt.Schedule.COSINE)
            self.assertIs(pt.optimizer_defaults()["type"], pt.OptimizerType.ADAMW)
            self.assertIs(pt.optimizer_defaults()["schedule"], pt.Schedule.CONSTANT)
        self.assertEqual(pt.schedule_factor(pt.Schedule.LINEAR, 5, total_steps=10),
                         pt.schedule_factor("linear", 5, total_steps=10))
        self.assertIs(pt.ChatTemplate.from_name("llama3").family, pt.ChatFamily.LLAMA3)

    def test_log_levels(self):
        self.assertEqual((pt.LOG_ERROR, pt.LOG_WARN, pt.LOG_INFO, pt.LOG_DEBUG),
                         tuple(pt.LogLevel))
        got = []
        pt.set_log_callback(lambda level, msg: got.append(level), pt.LogLevel.DEBUG)
        try:
            with self.assertRaises(pt.NotFound):
                pt.Tokenizer.load("/nonexistent/posttrain-tokenizer.json")
        finally:
            pt.set_log_callback(None)
        self.assertTrue(got)
        self.assertTrue(all(type(level) is pt.LogLevel for level in got), got)
        # Names: the library's, case-insensitive here, and Python's "warning".
        for name in ("warn", "WARNING", "Debug"):
            pt.set_log_callback(lambda level, msg: None, name)
            pt.set_log_callback(None)
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.set_log_callback(lambda level, msg: None, "loud")
        self.assertEqual(cm.exception.message, "pt_log_level_from_name: unknown log level 'loud' "
                         "(one of: error, warn, info, debug)")

    def test_chat_roles(self):
        ct = pt.ChatTemplate.from_name("chatml")
        want = ct.render([("user", "x"), ("assistant", "y"), ("tool", "z")])
        self.assertEqual(ct.render([(pt.ChatRole.USER, "x"), (2, "y"),
                                    {"role": pt.ChatRole.TOOL, "content": "z"}]), want)
        with self.assertRaises(pt.InvalidArgument) as cm:
            ct.render([{"role": "wizard", "content": "x"}])
        self.assertEqual(cm.exception.function, "pt_chat_role_from_name")

    def test_statuses(self):
        with self.assertRaises(pt.NotFound) as cm:
            pt.Model.load("/nonexistent/posttrain-model")
        e = cm.exception
        self.assertIs(e.status, pt.Status.ENOTFOUND)
        self.assertEqual((e.status, e.status_name), (-6, "PT_ENOTFOUND"))
        self.assertIs(pickle.loads(pickle.dumps(e)).status, pt.Status.ENOTFOUND)
        self.assertTrue(all(isinstance(k, pt.Status) for k in pt.STATUS_CLASSES))
        self.assertIs(pt.STATUS_CLASSES[-14], pt.ShapeError)
        self.assertEqual(pt.Error(-99, "m").status, -99)      # a future code stays an int
        with pt.Model.create(TINY) as m, tempfile.TemporaryDirectory() as d:
            m.save(d, copy_tokenizer=False)
            os.remove(os.path.join(d, "model.safetensors"))
            self.assertIs(pt.inspect_dir(d)["weights_status"], pt.Status.ENOTFOUND)

    @unittest.skipUnless(pt.has_feature("grpo"), "the loaded libposttrain has no GRPO API")
    def test_grpo_enums(self):
        self.assertIs(pt.grpo_defaults()["loss_type"], pt.LossType.DAPO)
        with pt.Model.create(TINY, seed=3) as m, pt.Optimizer(m, lr=0.1) as opt, \
                pt.RolloutBuffer() as buf:
            buf.add_group([256, 1], [[2, 3], [4]], rewards=[1.0, 0.0])
            st = pt.grpo_step(opt, buf, loss_type=pt.LossType.BNPO,
                              scale_rewards=pt.ScaleRewards.RLOO,
                              importance_sampling_level="token")
            self.assertEqual(st.step, 1)
            self.assertEqual(buf.get_logprobs(1, pt.RolloutLogprobs.OLD), buf.get_logprobs(1))
            self.assertEqual(buf.get_logprobs(-1, "old"), buf.get_logprobs(1))
            with self.assertRaises(pt.InvalidArgument) as cm:
                buf.get_logprobs(0, "new")
            self.assertEqual(cm.exception.function, "pt_rollout_logprobs_from_name")
            with self.assertRaises(pt.InvalidArgument):
                pt.grpo_step(opt, buf, loss_type=pt.ScaleRewards.GROUP)


class TestFeatures(unittest.TestCase):
    def test_one_call(self):
        words = _lib.lib.pt_features().decode().split()
        self.assertEqual(pt.features(), frozenset(words))
        for w in words + ["no-such-feature", "sf", ""]:
            with self.subTest(feature=w):
                self.assertEqual(pt.has_feature(w), bool(_lib.lib.pt_has_feature(w.encode())))
        for w in ("sft", "lora", "lora-switch", "peft", "checkpoint", "chat", "tensor-info"):
            self.assertTrue(pt.has_feature(w), w)
        # The structs and functions of a feature are declared only with it.
        self.assertEqual("pt_generate_options" in _lib.OPTION_STRUCTS, pt.has_feature("generate"))
        self.assertEqual("pt_grpo_options" in _lib.OPTION_STRUCTS, pt.has_feature("grpo"))

    def test_older_library(self):
        class Old:
            """A library from before pt_features: it has pt_version_string only."""
            def __init__(self):
                self.pt_version_string = ctypes.CFUNCTYPE(ctypes.c_char_p)(lambda: b"0.0.9")

        with self.assertRaises(ImportError) as cm:
            _lib._features(Old(), "/old/libposttrain.so")
        self.assertEqual(str(cm.exception),
                         "posttrain: /old/libposttrain.so is libposttrain 0.0.9, which has no "
                         "pt_features(); this binding needs libposttrain %s or newer (set "
                         "POSTTRAIN_LIBRARY to a matching build)" % pt.__version__)


class TestVersion(unittest.TestCase):
    def test_one_source(self):
        with open(os.path.join(ptest.SOURCE_ROOT, "meson.build"), encoding="utf-8") as f:
            project = re.search(r"project\((.*?)\)", f.read(), re.S).group(1)
        want = re.search(r"version\s*:\s*'([^']+)'", project).group(1)
        self.assertEqual(pt.__version__, want)
        self.assertEqual(pt.version(), want)        # this build's library
        with open(os.path.join(PY_DIR, "posttrain", "_install_config.py.in")) as f:
            self.assertIn('VERSION = "@VERSION@"', f.read())
        # No version literal anywhere in the binding.
        for dirpath, _, files in os.walk(PY_DIR):
            for fn in files:
                if fn.endswith((".py", ".in", ".build")):
                    with open(os.path.join(dirpath, fn), encoding="utf-8") as f:
                        text = f.read()
                    self.assertIsNone(re.search(r"\b\d+\.\d+\.\d+\b", text), fn)


class TestModules(unittest.TestCase):
    def test_chat_module(self):
        from posttrain import chat, tokenizer
        self.assertIs(pt.ChatTemplate, chat.ChatTemplate)
        self.assertIs(pt.ChatIds, chat.ChatIds)
        self.assertFalse(hasattr(tokenizer, "ChatTemplate"))
        with pt.Tokenizer.bytes() as tok:
            with self.assertRaises(pt.NotFound):
                tok.chat_template()            # the byte tokenizer has no chat_template

    def test_every_module_is_installed(self):
        with open(os.path.join(PY_DIR, "meson.build"), encoding="utf-8") as f:
            installed = set(re.findall(r"'posttrain/(\w+\.py)'", f.read()))
        here = {fn for fn in os.listdir(os.path.join(PY_DIR, "posttrain")) if fn.endswith(".py")
                and fn != "_install_config.py"}
        self.assertEqual(installed, here)


class TestReturnConvention(unittest.TestCase):
    def test_named_tuples(self):
        with pt.Model.create(TINY, seed=1) as m, \
                pt.Dataset.create(batch_size=1, eval_fraction=0.5, shuffle=False) as ds:
            for k in range(4):
                self.assertIsNone(ds.add([1, 2, 3, k + 4], [0, 1, 1, 1]))
            nb = ds.next_batch()
            self.assertIsInstance(nb, pt.TrainingBatch)
            self.assertIsInstance(nb.batch, pt.Batch)
            b, w = nb
            self.assertEqual(w, nb.weights)
            self.assertEqual(len(w), 1)
            ev = ds.eval_loss(model=m)
            self.assertIsInstance(ev, pt.EvalLoss)
            loss, tokens = ev
            self.assertEqual((ev.loss, ev.tokens), (loss, tokens))
            self.assertGreater(ev.tokens, 0)
            pos = ds.position
            self.assertIsInstance(pos, pt.DatasetPosition)
            self.assertEqual((pos.epoch, pos.cursor), tuple(pos))
            ds.position = (pos.epoch, 0)
            self.assertEqual(ds.position.cursor, 0)
            self.assertIsNone(m.zero_grad())
        with pt.Tokenizer.bytes() as tok:
            r = pt.ChatTemplate.from_name("chatml").render_ids(tok, [("user", "a"),
                                                                     ("assistant", "b")])
            self.assertIsInstance(r, pt.ChatIds)
            ids, mask = r
            self.assertEqual((r.ids, r.mask), (ids, mask))
            self.assertEqual(len(ids), len(mask))

    @unittest.skipUnless(pt.has_feature("grpo"), "the loaded libposttrain has no GRPO API")
    def test_sample_info_and_indices(self):
        with pt.RolloutBuffer(["a"]) as buf:
            buf.add([1, 2], [3], group=7, rewards=[0.5])
            info = buf.sample_info(0)
            self.assertIsInstance(info, pt.SampleInfo)
            self.assertEqual((info.n_ids, info.prompt_len, info.group), (3, 2, 7))
            buf.set_reward(-1, "a", 2.0)                 # indices as everywhere: -1 the last
            self.assertEqual((buf.get_reward(0, "a"), buf.get_reward(-1, 0)), (2.0, 2.0))
            with self.assertRaises(pt.InvalidArgument):
                buf.get_reward(1, "a")

    def test_binding_errors_carry_a_status(self):
        with pt.Model.create(TINY) as m:
            with self.assertRaises(pt.StateError) as cm:
                m.backward([0.0])
            self.assertIs(cm.exception.status, pt.Status.ESTATE)
            self.assertEqual(cm.exception.function, "Model.backward")
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.safetensors")
            with open(bad, "wb") as f:
                f.write(b"\x04\0\0\0\0\0\0\0{no}")
            for path, cls, status in ((bad, pt.FormatError, pt.Status.EFORMAT),
                                      (os.path.join(d, "none"), pt.NotFound,
                                       pt.Status.ENOTFOUND)):
                with self.subTest(path=path), self.assertRaises(cls) as cm:
                    pt.safetensors.read(path)
                self.assertIs(cm.exception.status, status)
                self.assertEqual(cm.exception.function, "safetensors.read")
            with self.assertRaises(pt.InvalidArgument) as cm:
                pt.safetensors.write(os.path.join(d, "w.safetensors"), {"t": ((2, 2), [1.0])})
            self.assertEqual(cm.exception.function, "safetensors.write")
            self.assertIsInstance(cm.exception, ValueError)     # as before


class TestTrustFeatures(unittest.TestCase):
    """Per-context thread counts, the long-context opt-in and skip reasons
    reach Python as they are in C."""

    def test_context_and_generator_threads(self):
        with pt.Model.create(TINY, seed=3) as m:
            ctx = pt.Context(m, 2, 8)
            self.assertEqual(ctx.num_threads, pt.get_num_threads())   # 0: the process count
            ctx.num_threads = 1
            self.assertEqual(ctx.num_threads, 1)
            with self.assertRaises(pt.InvalidArgument) as cm:
                ctx.num_threads = -1
            self.assertIn("pt_context_set_num_threads", cm.exception.message)
            self.assertEqual(ctx.num_threads, 1)
            if pt.has_feature("generate"):
                g = pt.Generator(m, 1, 8)
                g.num_threads = 1
                self.assertEqual(g.num_threads, 1)
                with self.assertRaises(pt.InvalidArgument):
                    g.num_threads = 5000

    def test_long_context_opt_in(self):
        with pt.Model.create(TINY, seed=3) as m:
            longest = m.config["max_position_embeddings"]
            self.assertFalse(m.allow_long_context)
            with self.assertRaises(pt.RangeError) as cm:
                pt.Context(m, 1, longest + 1)
            self.assertIn("max_position_embeddings %d" % longest, cm.exception.message)
            m.allow_long_context = True
            self.assertTrue(m.allow_long_context)
            ctx = pt.Context(m, 1, longest + 1)
            self.assertEqual(ctx.max_seq, longest + 1)

    def test_skip_reason_is_an_enum(self):
        self.assertEqual([m.name for m in pt.SkipReason],
                         ["NONE", "NO_TOKENS", "NONFINITE_LOSS", "NONFINITE_GRAD",
                          "NONFINITE_UPDATE", "NO_REWARDS"])
        with pt.Model.create(TINY, seed=3) as m:
            opt = pt.Optimizer(m, lr=1e-3)
            # a batch with no target tokens is skipped, and says why
            r = pt.sft_step(opt, pt.Batch([[1, 2, 3]], targets=[[-1, -1, -1]]))
            self.assertTrue(r.skipped)
            self.assertIs(r.skip_reason, pt.SkipReason.NO_TOKENS)


if __name__ == "__main__":
    ptest.main()
