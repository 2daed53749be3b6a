"""Every error path raises the exception class of its status, carrying the
C library's own message (pt_last_error), and closed handles raise."""

import gc
import os
import subprocess
import sys
import tempfile
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY


class TestErrors(unittest.TestCase):
    def assertPtError(self, cls, status_name, message, fn, *args, **kw):
        """fn(*args) raises exactly cls with that status and message (a
        substring when message ends with '...')."""
        with self.assertRaises(cls) as cm:
            fn(*args, **kw)
        e = cm.exception
        self.assertIs(type(e), cls)
        self.assertEqual(e.status_name, status_name)
        self.assertEqual(e.status, {v: k for k, v in
                                    ((s, pt.status_name(s)) for s in range(-17, 0))}[status_name])
        if message.endswith("..."):
            self.assertIn(message[:-3], e.message)
        else:
            self.assertEqual(e.message, message)
        self.assertIn(e.message, str(e))
        return e

    def test_bad_paths(self):
        self.assertPtError(pt.NotFound, "PT_ENOTFOUND", "/nonexistent/m: not a directory",
                           pt.Model.load, "/nonexistent/m")
        self.assertPtError(pt.NotFound, "PT_ENOTFOUND",
                           "/nonexistent/tokenizer.json: No such file or directory",
                           pt.Tokenizer.load, "/nonexistent/tokenizer.json")
        with tempfile.TemporaryDirectory() as d:
            self.assertPtError(pt.NotFound, "PT_ENOTFOUND", "config.json...", pt.Model.load, d)
            self.assertPtError(pt.NotFound, "PT_ENOTFOUND", "nope.jsonl...",
                               pt.Dataset.load_jsonl, os.path.join(d, "nope.jsonl"),
                               pt.Tokenizer.bytes())
            # a write below a regular file fails in mkdir: PT_EIO, also an OSError
            f = os.path.join(d, "file")
            open(f, "w").close()
            with pt.Model.create(TINY) as m:
                e = self.assertPtError(pt.IOFailure, "PT_EIO",
                                       "mkdir %s: Not a directory" % os.path.join(f, "sub"),
                                       m.save, os.path.join(f, "sub"))
                self.assertIsInstance(e, OSError)
                self.assertPtError(pt.StateError, "PT_ESTATE",
                                   "pt_lora_save_peft: the model has no LoRA adapters",
                                   m.save_lora, os.path.join(d, "adapter"))
            self.assertPtError(pt.FormatError, "PT_EFORMAT",
                               "%s: tokenizer.json: not valid JSON (near byte 0)" % f,
                               pt.Tokenizer.load, f)
        # builtin bases: NotFound is a LookupError, InvalidArgument a ValueError
        self.assertTrue(issubclass(pt.NotFound, LookupError))
        self.assertTrue(issubclass(pt.InvalidArgument, ValueError))
        self.assertTrue(issubclass(pt.IOFailure, OSError))
        self.assertTrue(issubclass(pt.NoSpace, pt.IOFailure))

    def test_bad_options_from_c(self):
        with pt.Model.create(TINY) as m:
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                               "optimizer options: lr -1 must be finite and >= 0",
                               pt.Optimizer, m, lr=-1)
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                               "optimizer options: unknown type 7", pt.Optimizer, m, type=7)
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                               "pt_model_add_lora: rank 0 must be in 1 .. 65536", m.add_lora, rank=0)
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                               "pt_model_loss: weight -1 at token 1 must be finite and >= 0",
                               m.loss, [[1, 2, 3]], [[2, 3, 4]], weights=[[1, -1, 1]])
            self.assertPtError(pt.RangeError, "PT_ERANGE",
                               "pt_model_forward: batch: target 999 at row 0 position 2 is outside the vocabulary "
                               "[0, 261) (use -1 for no target)",
                               m.forward, [[1, 2, 3]], [[2, 3, 999]])
            ctx = m.context(1, 4)
            self.assertPtError(pt.StateError, "PT_ESTATE", "pt_model_backward: no forward pass...",
                               ctx.backward, [0.0] * 4)
        self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                           "dataset options: batch_size 0 is not in [1, 65536]",
                           pt.Dataset.create, batch_size=0)
        self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                           "pt_set_num_threads: 0 is not in [1, 1024]", pt.set_num_threads, 0)
        self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                           "pt_schedule_factor: linear schedule needs total_steps > 0",
                           pt.schedule_factor, "linear", 5)
        self.assertPtError(pt.ConfigError, "PT_ECONFIG",
                           "model config: 'num_key_value_heads' (3) does not divide "
                           "'num_attention_heads' (2)",
                           pt.Model.create, dict(TINY, num_key_value_heads=3))

    def test_bad_options_in_python(self):
        # Options the binding rejects before calling C raise InvalidArgument too.
        self.assertPtError(pt.InvalidArgument, "PT_EINVAL", "unknown model config field 'bogus'...",
                           pt.Model.create, dict(TINY, bogus=1))
        with pt.Model.create(TINY) as m:
            # Enum names are parsed by the library: its message lists the names.
            e = self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                                   "pt_optimizer_type_from_name: unknown optimizer type 'adam' "
                                   "(one of: adamw, sgd)", pt.Optimizer, m, type="adam")
            self.assertEqual(e.function, "pt_optimizer_type_from_name")
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL", "unknown optimizer option 'lrate'...",
                               pt.Optimizer, m, lrate=1)
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL", "unknown LoRA target 'zz'...",
                               m.add_lora, targets=["q", "zz"])
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                               "input_ids row 1 has 2 entries, expected 3 (rows must have equal "
                               "length)", m.logits, [[1, 2, 3], [4, 5]])
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL", "weights has 2 values, expected 3",
                               m.loss, [1, 2, 3], [2, 3, 4], weights=[1, 1])
        self.assertPtError(pt.InvalidArgument, "PT_EINVAL", "unknown dataset option 'batch'...",
                           pt.Dataset.create, batch=3)

    def test_tokenizer_and_chat_errors(self):
        with pt.Tokenizer.bytes() as tok:
            self.assertPtError(pt.RangeError, "PT_ERANGE",
                               "pt_tokenizer_decode: tokenizer: decode: id 5000 at position 0 is outside the vocabulary "
                               "(size 261)", tok.decode, [5000])
            self.assertPtError(pt.NotFound, "PT_ENOTFOUND",
                               'token "nope-token" is not in the vocabulary',
                               tok.token_to_id, "nope-token")
            ct = pt.ChatTemplate.from_name("llama2")
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL", "content contains a NUL...",
                               ct.render, [{"role": "user", "content": "a\0b"}])
            self.assertPtError(pt.InvalidArgument, "PT_EINVAL",
                               "chat role 'wizard'...", ct.render,
                               [{"role": "wizard", "content": "x"}])
        self.assertPtError(pt.Unsupported, "PT_EUNSUPPORTED", "unknown chat template name 'nope'...",
                           pt.ChatTemplate.from_name, "nope")
        self.assertPtError(pt.FormatError, "PT_EFORMAT",
                           "tokenizer.json: not valid JSON (near byte 2)",
                           pt.Tokenizer.from_json, "{not json")

    def test_checkpoint_errors(self):
        with pt.Model.create(TINY) as m, pt.Optimizer(m) as opt, \
                tempfile.TemporaryDirectory() as d:
            ck = os.path.join(d, "ck")
            pt.save_checkpoint(ck, m, opt, {"step": 0})
            self.assertPtError(pt.StateError, "PT_ESTATE",
                               "pt_checkpoint_save: %s already exists (checkpoints are never "
                               "overwritten)" % ck, pt.save_checkpoint, ck, m, opt)
            self.assertPtError(pt.NotFound, "PT_ENOTFOUND",
                               "pt_checkpoint_load: checkpoint directory %s does not exist"
                               % (ck + "x"), pt.load_checkpoint, ck + "x", m, opt)
            os.makedirs(ck + "x")
            self.assertPtError(pt.FormatError, "PT_EFORMAT",
                               "checkpoint %s has no MANIFEST.json: it is incomplete or not a "
                               "checkpoint" % (ck + "x"), pt.load_checkpoint, ck + "x", m, opt)
            with open(os.path.join(ck, "model.safetensors"), "r+b") as f:
                f.seek(200)
                byte = f.read(1)
                f.seek(200)
                f.write(bytes([byte[0] ^ 1]))
            self.assertPtError(pt.ChecksumError, "PT_ECHECKSUM",
                               "checkpoint %s: model.safetensors has SHA-256..." % ck,
                               pt.load_checkpoint, ck, m, opt)

    def test_cancelled(self):
        with pt.Model.create(TINY) as m, pt.abort_on(lambda: True):
            self.assertPtError(pt.Cancelled, "PT_ECANCELLED",
                               "cancelled by the host's abort callback", m.logits, [1, 2, 3])

    def test_closed_handles(self):
        m = pt.Model.create(TINY)
        ctx = m.context(1, 8)
        opt = pt.Optimizer(m)
        m.logits([1, 2])
        m.close()
        m.close()   # idempotent
        self.assertTrue(m.closed and ctx.closed and opt.closed)
        self.assertPtError(pt.ClosedHandleError, "PT_ESTATE", "model is closed: close() was called",
                           m.logits, [1, 2])
        self.assertPtError(pt.ClosedHandleError, "PT_ESTATE",
                           "context is closed: its model was closed", ctx.forward, [1, 2])
        self.assertPtError(pt.ClosedHandleError, "PT_ESTATE",
                           "optimizer is closed: its model was closed", opt.step)
        self.assertTrue(issubclass(pt.ClosedHandleError, pt.StateError))
        with pt.Tokenizer.bytes() as tok:
            stream = tok.decode_stream()
        self.assertTrue(tok.closed and stream.closed)
        self.assertPtError(pt.ClosedHandleError, "PT_ESTATE", "tokenizer is closed...",
                           tok.encode, "x")
        self.assertPtError(pt.ClosedHandleError, "PT_ESTATE", "decode stream is closed...",
                           stream.step, 1)
        with pt.Dataset.create() as ds:
            pass
        self.assertPtError(pt.ClosedHandleError, "PT_ESTATE", "dataset is closed...", ds.next_batch)
        with self.assertRaises(pt.ClosedHandleError):
            with ds:
                pass
        # Adding adapters closes the model's existing contexts and optimizers.
        with pt.Model.create(TINY) as m2:
            c2 = m2.context(1, 4)
            o2 = pt.Optimizer(m2)
            m2.add_lora(rank=2)
            self.assertPtError(pt.ClosedHandleError, "PT_ESTATE",
                               "context is closed: the model's LoRA adapters changed...",
                               c2.forward, [1, 2])
            self.assertTrue(o2.closed)
            self.assertEqual(len(m2.logits([1, 2])), 2)   # a new internal context
        # A model's borrowed tokenizer is closed with the model.
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "rows.jsonl"), "w") as f:
                f.write('{"input_ids": [1, 2, 3]}\n')
            with pt.Dataset.load_jsonl(os.path.join(d, "rows.jsonl")) as ds2:
                self.assertEqual(ds2.stats["rows"], 1)

    def test_garbage_collected_handles(self):
        # Handles dropped without close() are freed by __del__, children first.
        for _ in range(3):
            m = pt.Model.create(TINY)
            o = pt.Optimizer(m)
            m.logits([1, 2, 3])
            del m
            self.assertFalse(o.closed)          # the optimizer keeps its model alive
            self.assertGreater(o.lr, 0.0)
            del o
            gc.collect()

    def test_no_reference_cycles(self):
        # A model with its internal context, generator and borrowed tokenizer in
        # use is freed by reference counting alone, as soon as it is dropped.
        import weakref
        root = ptest.shared_data("stories260K (reference-cycle check)")
        gc.disable()
        try:
            m = pt.Model.create(TINY)
            m.logits([1, 2, 3])
            m.loss(pt.Batch.next_token([1, 2, 3]), backward=True)
            if pt.has_feature("generate"):
                m.generate([1, 2], max_new_tokens=2)
            ref = weakref.ref(m)
            del m
            self.assertIsNone(ref())
            if root is not None:
                m = pt.Model.load(os.path.join(root, "models", "stories260K"))
                tok = m.tokenizer
                self.assertEqual(tok.encode("a"), [261])
                self.assertIs(m.tokenizer, tok)
                ref = weakref.ref(m)
                del m
                self.assertIsNotNone(ref())          # the tokenizer keeps its model alive
                self.assertEqual(tok.vocab_size, 512)
                del tok
                self.assertIsNone(ref())
        finally:
            gc.enable()

    @staticmethod
    def _copy_package(d):
        """A copy of the package in d, outside the source tree, without the
        install record and without a bundled library (a pip-installed one)."""
        import shutil
        shutil.copytree(os.path.dirname(pt.__file__), os.path.join(d, "posttrain"),
                        ignore=shutil.ignore_patterns("__pycache__", "_install_config.py",
                                                      "libposttrain.so"))

    def test_bundled_library(self):
        # As pip installs it: posttrain/libposttrain.so is loaded before any
        # other place (only $POSTTRAIN_LIBRARY comes first).
        import shutil
        with tempfile.TemporaryDirectory() as d:
            self._copy_package(d)
            bundled = os.path.join(d, "posttrain", "libposttrain.so")
            shutil.copyfile(pt.library_path, bundled)
            env = dict(os.environ, PYTHONPATH=d, PYTHONDONTWRITEBYTECODE="1")
            env.pop("POSTTRAIN_LIBRARY", None)
            code = "import posttrain as p; print(p.library_path); print(p.__version__)"
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, cwd=d)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.split(), [bundled, pt.version()])
            # An explicit POSTTRAIN_LIBRARY still wins over the bundled copy.
            env["POSTTRAIN_LIBRARY"] = os.path.join(d, "missing.so")
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, cwd=d)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("$POSTTRAIN_LIBRARY %s (" % env["POSTTRAIN_LIBRARY"], p.stderr)

    def test_library_not_found(self):
        # A copy of the package outside the source tree.
        with tempfile.TemporaryDirectory() as d:
            self._copy_package(d)

            def run(**extra):
                env = dict(os.environ, PYTHONPATH=d, PYTHONDONTWRITEBYTECODE="1", **extra)
                env.pop("LD_LIBRARY_PATH", None)
                if not extra:
                    env.pop("POSTTRAIN_LIBRARY", None)
                return subprocess.run([sys.executable, "-c", "import posttrain as p; "
                                       "print(p.library_path)"], env=env,
                                      capture_output=True, text=True, cwd=d)
            # An explicit POSTTRAIN_LIBRARY that does not load is an error, never
            # replaced by another library.
            missing = os.path.join(d, "missing.so")
            p = run(POSTTRAIN_LIBRARY=missing)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("ImportError: posttrain: cannot load libposttrain.so from "
                          "$POSTTRAIN_LIBRARY %s (" % missing, p.stderr)
            # POSTTRAIN_LIBRARY may name the directory holding the library.
            libdir = os.path.dirname(os.path.abspath(pt.library_path))
            if os.path.exists(os.path.join(libdir, "libposttrain.so")):
                p = run(POSTTRAIN_LIBRARY=libdir)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stdout.strip(), os.path.join(libdir, "libposttrain.so"))
            # Without it: ImportError naming every place tried, unless installed.
            p = run()
            if p.returncode == 0:
                self.skipTest("libposttrain is installed system-wide, so the loader found it")
            self.assertIn("ImportError: posttrain: cannot load libposttrain.so; tried, in order:",
                          p.stderr)
            self.assertIn("ctypes.util.find_library('posttrain'): nothing found", p.stderr)
            self.assertIn("the system loader: libposttrain.so.0", p.stderr)


if __name__ == "__main__":
    ptest.main()
