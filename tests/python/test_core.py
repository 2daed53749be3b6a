"""Core checks that need no shared data: runtime settings, callbacks, and the
numbers of forward/logprobs/loss/gradient steps on tiny random models,
recomputed independently in Python."""

import json
import logging
import math
import os
import tempfile
import threading
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY
SEQS = [[256, 72, 101, 108, 108, 111, 44, 32, 119],
        [256, 50, 43, 51, 61, 53, 257, 258, 258]]


class TestRuntime(unittest.TestCase):
    def test_version_and_blas(self):
        n = pt.version_number()
        self.assertEqual(pt.version(), "%d.%d.%d" % (n // 10000, n // 100 % 100, n % 100))
        self.assertTrue(pt.blas_info().startswith("BLIS "), pt.blas_info())
        self.assertTrue(os.path.exists(pt.library_path), pt.library_path)

    def test_threads(self):
        old = pt.get_num_threads()
        try:
            pt.set_num_threads(1)
            self.assertEqual(pt.get_num_threads(), 1)
            pt.set_num_threads(2)
            self.assertEqual(pt.get_num_threads(), 2)
        finally:
            pt.set_num_threads(old)

    def test_status_names(self):
        for st, cls in pt.STATUS_CLASSES.items():
            name = pt.status_name(st)
            self.assertTrue(name.startswith("PT_E"), name)
            e = cls(st, "m")
            self.assertEqual(e.status_name, name)
            self.assertIsInstance(e, pt.Error)
        self.assertEqual(pt.status_name(-1), "PT_EINVAL")
        self.assertIs(pt.STATUS_CLASSES[-12], pt.ChecksumError)
        self.assertIs(pt.STATUS_CLASSES[-7], pt.Cancelled)

    def test_log_callback(self):
        got = []
        pt.set_log_callback(lambda level, msg: got.append((level, msg)), "debug")
        try:
            with self.assertRaises(pt.NotFound):
                pt.Model.load("/nonexistent/posttrain-model")
        finally:
            pt.set_log_callback(None)
        # Every error is logged at debug level with its status name.
        self.assertIn((pt.LOG_DEBUG, "PT_ENOTFOUND: /nonexistent/posttrain-model: not a directory"),
                      got)
        n = len(got)
        with self.assertRaises(pt.NotFound):
            pt.Model.load("/nonexistent/posttrain-model")
        self.assertEqual(len(got), n, "callback still called after removal")

    def test_log_to_python_logging(self):
        records = []

        class H(logging.Handler):
            def emit(self, record):
                records.append(record)
        logger = logging.getLogger("posttrain.test")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(H())
        pt.log_to_python(logger, max_level="debug")
        try:
            with self.assertRaises(pt.FormatError):
                pt.Tokenizer.from_json("{not json")
        finally:
            pt.set_log_callback(None)
        msgs = [(r.levelno, r.getMessage()) for r in records]
        self.assertIn((logging.DEBUG, "PT_EFORMAT: tokenizer.json: not valid JSON (near byte 2)"),
                      msgs)

    def test_abort_callback(self):
        with pt.Model.create(TINY, seed=1) as m:
            b = pt.Batch.next_token(SEQS)
            ref = m.loss(b)
            calls = []

            def stop():
                calls.append(1)
                return True
            pt.set_abort_callback(stop)
            try:
                with self.assertRaises(pt.Cancelled) as cm:
                    m.loss(b)
                self.assertEqual(cm.exception.message, "cancelled by the host's abort callback")
                with self.assertRaises(pt.Cancelled):
                    pt.check_abort()
            finally:
                pt.set_abort_callback(None)
            self.assertGreater(len(calls), 0)
            pt.check_abort()  # removed: no error
            self.assertEqual(m.loss(b), ref)
            # abort_on(event), and a callback that raises, cancel too.
            ev = threading.Event()
            with pt.abort_on(ev):
                self.assertEqual(m.loss(b), ref)
                ev.set()
                with self.assertRaises(pt.Cancelled):
                    m.loss(b)

            def broken():
                raise RuntimeError("boom")
            with pt.abort_on(broken):
                with self.assertRaises(pt.Cancelled):
                    m.loss(b)
            self.assertEqual(m.loss(b), ref)

    def test_abort_callback_is_per_thread(self):
        with pt.Model.create(TINY, seed=1) as m:
            b = pt.Batch.next_token(SEQS)
            out = {}

            def worker():
                pt.set_abort_callback(lambda: True)
                try:
                    m.loss(b)
                    out["r"] = "no error"
                except pt.Cancelled as e:
                    out["r"] = e.status_name
                finally:
                    pt.set_abort_callback(None)
            th = threading.Thread(target=worker)
            th.start()
            th.join()
            self.assertEqual(out["r"], "PT_ECANCELLED")
            self.assertGreater(m.loss(b), 0.0)   # this thread has no callback


class TestAddition(unittest.TestCase):
    def test_task(self):
        self.assertEqual(pt.addition_problem(59, 96), ("59+96=", "551"))
        self.assertEqual(pt.addition_problem(59, 96, slip=True), ("59+96=", "540"))
        self.assertEqual(pt.addition_problem(7, 5, digits=3), ("007+005=", "2100"))
        with self.assertRaises(pt.InvalidArgument):
            pt.addition_problem(100, 1)
        # an independent splitmix64 (the published constants) makes the same draws
        M = (1 << 64) - 1

        def mix(s):
            s = (s + 0x9E3779B97F4A7C15) & M
            z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & M
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
            return s, z ^ (z >> 31)

        def held(a, b):
            return mix((a * 1000003 + b) & M)[1] & 7 == 0

        self.assertEqual(sum(pt.addition_held_out(a, b) for a in range(30) for b in range(30)),
                         sum(held(a, b) for a in range(30) for b in range(30)))
        state = ref = 7919 + 17
        for _ in range(5):
            a, b, slipped, state = pt.addition_teacher_pair(state, digits=2, slip=0.5)
            while True:
                ref, x = mix(ref)
                ref, y = mix(ref)
                if not held(x % 100, y % 100):
                    break
            ref, z = mix(ref)
            self.assertEqual((a, b, slipped), (x % 100, y % 100, (z >> 11) * 2.0 ** -53 < 0.5))
        self.assertEqual(state, ref)
        pairs = pt.addition_held_out_pairs(50, digits=1)
        self.assertEqual(len(pairs), sum(held(a, b) for a in range(10) for b in range(10)))
        self.assertTrue(all(held(a, b) for a, b in pairs))

    def test_evaluate(self):
        # a model whose layers add nothing and whose embeddings are one-hot:
        # the next token is a function of the last, '=' -> '7' -> '0' -> EOS,
        # so every answer is "70": 3+4 and 0+7 right, 8+9 its slip, 2+2 wrong
        tok = pt.Tokenizer.bytes()
        self.assertEqual(pt.addition_prompt_ids(tok, 3, 4, digits=1), [tok.bos_id] + list(b"3+4="))
        H, V = 16, tok.vocab_size
        m = pt.Model.create({"vocab_size": V, "hidden_size": H, "intermediate_size": 24, "num_hidden_layers": 1,
                             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
                             "tie_word_embeddings": False}, seed=1)
        for t in m.tensors():
            m.set_tensor(t["name"], [1.0 if t["name"] == "model.norm.weight" else 0.0] * t["numel"])
        emb, head = [0.0] * (V * H), [0.0] * (V * H)
        for k, ch in enumerate(b"0123456789+="):
            emb[ch * H + k] = 1.0
        emb[tok.bos_id * H + 12] = 1.0
        head[ord("7") * H + 11] = head[ord("0") * H + 7] = head[tok.eos_id * H + 0] = 10.0
        m.set_tensor("model.embed_tokens.weight", emb)
        m.set_tensor("lm_head.weight", head)
        gen = pt.Generator(m, 3, 16)
        pairs = [(3, 4), (8, 9), (2, 2), (0, 7)]
        self.assertEqual(pt.addition_evaluate(gen, tok, pairs, digits=1), (2, 1))
        self.assertEqual(pt.addition_evaluate(gen, tok, pairs, digits=1, temperature=1.0, seed=3, batch=2), (2, 1))
        c = m.clone()
        self.assertEqual(c.get_tensor("lm_head.weight").data[ord("7") * H + 11], 10.0)
        self.assertEqual(pt.addition_evaluate(pt.Generator(c, 4, 16), tok, pairs, digits=1), (2, 1))
        with self.assertRaises(pt.InvalidArgument):
            pt.addition_evaluate(gen, tok, pairs, digits=1, batch=4)
        # the demo's GRPO: every completion is "70" and EOS, so the mean reward
        # is the share of the stream's problems whose sum is 7, every group
        # zero-std, and the KL against the frozen copy 0
        ctx, gen16 = pt.Context(m, 16, 16), pt.Generator(m, 16, 16)
        with pt.AdditionGrpo(m, tok, digits=1, prompts=8, group=2, beta=0.5, seed=3, loss_type="dapo") as grpo:
            state = 3 * 104729 + 3
            for step in (1, 2):
                sevens = 0
                for _ in range(8):
                    a, b, state = pt.addition_train_pair(state, digits=1)
                    sevens += a + b == 7
                stats = grpo.step(ctx, gen16)
                self.assertAlmostEqual(stats["reward"], sevens / 8, places=12)
                self.assertEqual(stats["frac_reward_zero_std"], 1.0)
                self.assertLess(abs(stats["kl"]), 1e-6)
                self.assertEqual(grpo.steps, step)
            with self.assertRaises(pt.InvalidArgument):
                grpo.step(ctx, gen)  # 16 rows, the generator has room for 3
        with self.assertRaises(pt.InvalidArgument):
            pt.AdditionGrpo(m, tok, group=1)
        with self.assertRaises(pt.InvalidArgument):
            pt.AdditionGrpo(m, tok, frob=1)
        cfg = pt.addition_model_config(tok, hidden=32, layers=3, heads=8, tied=True)
        self.assertEqual((cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                          cfg.head_dim, cfg.intermediate_size, cfg.max_position_embeddings, cfg.tie_word_embeddings),
                         (261, 32, 3, 8, 4, 96, 64, True))
        self.assertEqual(pt.Model.create(cfg, seed=1).num_params,
                         261 * 32 + 3 * (4 * 32 * 32 + 3 * 32 * 96 + 2 * 32) + 32)
        with self.assertRaises(pt.InvalidArgument):
            pt.addition_model_config(tok, hidden=32, heads=5)
        # the demo's first traces for seed 1 at slip 0.5 (test_addition's, by hand)
        with tempfile.TemporaryDirectory() as d:
            data = pt.Dataset.create(batch_size=1)
            path = os.path.join(d, "t.jsonl")
            wrong, state = pt.addition_save_traces(data, tok, 3, 1 * 7919 + 17, digits=2, slip=0.5, path=path)
            self.assertEqual((wrong, state), (1, 10372713005361036221))
            with open(path) as f:
                self.assertEqual([json.loads(line) for line in f],
                                 [{"prompt": "23+33=", "completion": "650"}, {"prompt": "74+89=", "completion": "350"},
                                  {"prompt": "97+83=", "completion": "081"}])
            self.assertEqual(data.stats["train_examples"] + data.stats["eval_examples"], 3)
            with self.assertRaises(pt.IOFailure) as cm:
                pt.addition_save_traces(data, tok, 3, state, path=os.path.join(d, "no", "t.jsonl"))
            self.assertIn("cannot write %s: No such file or directory" % os.path.join(d, "no", "t.jsonl"),
                          str(cm.exception))
        tok = pt.Tokenizer.bytes()
        eos = tok.eos_id
        self.assertEqual(pt.addition_score(tok, tok.encode("551") + [eos], 59, 96), (True, False))
        self.assertEqual(pt.addition_score(tok, tok.encode("540") + [eos], 59, 96), (False, True))
        self.assertEqual(pt.addition_score(tok, tok.encode("551"), 59, 96), (False, False))


class TestThreads(unittest.TestCase):
    def test_forwards_from_threads(self):
        # Several Python threads, one Context each, on one model: results equal
        # the sequential ones (ctypes releases the GIL during each call).
        with pt.Model.create(TINY, seed=2) as m:
            rows = [[256] + [(7 * i + 3 * k) % 256 for k in range(12)] for i in range(4)]
            want = [m.logits(r) for r in rows]
            got = [None] * 4
            errors = []

            def work(i):
                try:
                    with m.context(1, 13) as ctx:
                        for _ in range(5):
                            got[i] = ctx.forward(rows[i], logprobs=False).logits
                except Exception as e:   # reported below
                    errors.append(e)
            ths = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            self.assertEqual(errors, [])
            self.assertEqual(got, want)


class TestForward(unittest.TestCase):
    def setUp(self):
        self.m = pt.Model.create(TINY, seed=7)

    def tearDown(self):
        self.m.close()

    def test_config_and_params(self):
        cfg = self.m.config
        for k, v in TINY.items():
            self.assertEqual(cfg[k], v, k)
        self.assertEqual(cfg["head_dim"], 8)
        V, H, I, L = 261, 16, 32, 2
        kv = 8
        per_layer = H * H + 2 * H * kv + H * H + 3 * H * I + 2 * H
        self.assertEqual(self.m.num_params, 2 * V * H + L * per_layer + H)
        self.assertEqual(pt.config_num_params(cfg), self.m.num_params)
        # config.json text round trip
        self.assertEqual(pt.config_from_json(pt.config_to_json(cfg)), cfg)
        self.assertIsNone(self.m.source_dir)
        self.assertIsNone(self.m.tokenizer)

    def test_logprobs_match_logits(self):
        b = pt.Batch.next_token(SEQS)
        r = self.m.forward(b)
        self.assertEqual((len(r.logits), len(r.logits[0]), len(r.logits[0][0])), (2, 8, 261))
        for i in range(2):
            for t in range(8):
                ls = ptest.log_softmax_row(r.logits[i][t])
                tgt = b.targets[i][t]
                self.assertAlmostEqual(r.logprobs[i][t], ls[tgt], delta=1e-5)
        # logprobs() alone gives the same values; -1 targets give 0.
        tg = [row[:] for row in b.targets]
        tg[1][3] = -1
        lp = self.m.logprobs(b.input_ids, tg)
        self.assertEqual(lp[1][3], 0.0)
        self.assertEqual(lp[0], r.logprobs[0])

    def test_loss_is_minus_mean_logprob(self):
        b = pt.Batch.next_token(SEQS)
        r = self.m.forward(b, logits=True)
        # recompute from the logits alone
        total = n = 0
        for i in range(2):
            for t in range(8):
                total += ptest.log_softmax_row(r.logits[i][t])[b.targets[i][t]]
                n += 1
        loss = self.m.loss(b)
        self.assertAlmostEqual(loss, -total / n, delta=2e-6)
        self.assertGreater(loss, 4.0)   # about ln(261) = 5.56 for a fresh model
        # weighted loss: -sum(w lp) / sum(w)
        w = [[(i + t) % 3 * 0.5 for t in range(8)] for i in range(2)]
        lw = self.m.loss(b, weights=w)
        num = sum(w[i][t] * r.logprobs[i][t] for i in range(2) for t in range(8))
        den = sum(w[i][t] for i in range(2) for t in range(8))
        self.assertAlmostEqual(lw, -num / den, delta=2e-6)
        self.assertEqual(self.m.loss(b, weights=[[0.0] * 8] * 2), 0.0)

    def test_single_row_squeezes(self):
        ids = SEQS[0]
        lg = self.m.logits(ids)
        self.assertEqual((len(lg), len(lg[0])), (9, 261))
        lg2 = self.m.logits([ids])
        self.assertEqual(lg2[0], lg)
        # causal: a prefix's logits do not depend on later tokens
        self.assertEqual(self.m.logits(ids[:4]), lg[:4])

    def test_determinism_and_seed(self):
        with pt.Model.create(TINY, seed=7) as a, pt.Model.create(TINY, seed=8) as c:
            x = self.m.logits(SEQS[0])
            self.assertEqual(a.logits(SEQS[0]), x)
            self.assertNotEqual(c.logits(SEQS[0]), x)

    def test_save_load_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            self.m.save(d, copy_tokenizer=False)
            self.assertEqual(sorted(os.listdir(d)),
                             ["config.json", "generation_config.json", "model.safetensors"])
            self.assertEqual(pt.load_config(d), self.m.config)
            with pt.Model.load(d) as m2:
                self.assertEqual(m2.source_dir, d)
                self.assertEqual(m2.logits(SEQS), self.m.logits(SEQS))
        # state_dict and from_state_dict round trip, exactly
        sd = self.m.state_dict()
        self.assertEqual(len(sd["model.embed_tokens.weight"]), 261 * 16)
        self.assertEqual(sd["model.layers.0.self_attn.k_proj.weight"].shape, (8, 16))
        self.assertEqual(sum(len(t) for t in sd.values()), self.m.num_params)
        with pt.Model.from_state_dict(self.m.config, sd) as m3:
            self.assertEqual(m3.logits(SEQS), self.m.logits(SEQS))

    def test_explicit_context(self):
        b = pt.Batch.next_token(SEQS)
        with self.m.context(2, 8) as ctx:
            r = ctx.forward(b)
            self.assertEqual(r.logprobs, self.m.forward(b).logprobs)
            self.assertAlmostEqual(ctx.loss(b), self.m.loss(b), delta=0)
            with self.assertRaises(pt.InvalidArgument) as cm:
                ctx.forward(pt.Batch([list(range(9))]))
            self.assertIn("does not fit the context's 2 x 8", cm.exception.message)

    def test_numpy_results(self):
        if not pt.numpy_available():
            self.skipTest("numpy is not installed for this interpreter")
        import numpy as np
        b = pt.Batch.next_token(SEQS)
        r = self.m.forward(b, numpy=True)
        self.assertIsInstance(r.logits, np.ndarray)
        self.assertEqual(r.logits.shape, (2, 8, 261))
        self.assertEqual(r.logits.dtype, np.float32)
        self.assertEqual(r.logits.tolist(), self.m.forward(b).logits)
        # numpy inputs are accepted too
        lp = self.m.logprobs(np.array(b.input_ids), np.array(b.targets), numpy=True)
        self.assertEqual(lp.tolist(), r.logprobs.tolist())
        w = np.ones((2, 8), dtype=np.float64)
        self.assertEqual(self.m.loss(b, weights=w), self.m.loss(b))
        # state dicts as numpy arrays round-trip through from_state_dict
        sd = self.m.state_dict(numpy=True)
        self.assertEqual(sd["lm_head.weight"].shape, (261, 16))
        sd["lm_head.weight"] = sd["lm_head.weight"] * 0
        with pt.Model.from_state_dict(self.m.config, sd) as z:
            self.assertEqual(z.logits(SEQS[0], numpy=True).max(), 0.0)
            self.assertAlmostEqual(z.loss(b), np.log(261), delta=1e-5)
        # datasets hand out numpy weights on request
        with pt.Dataset.create(batch_size=1) as ds:
            ds.add(np.array([1, 2, 3]), [0, 1, 1])
            bb, ww = ds.next_batch(numpy=True)
            self.assertEqual(ww.tolist(), [[1.0, 1.0, 0.0]])


class TestTensors(unittest.TestCase):
    """The tensor table through pt_model_tensor_info: the same tensors and
    values as the saved files, writes that change the forward, gradients that
    equal the step SGD takes, LoRA flags, errors."""

    def test_table_matches_state_dict(self):
        with pt.Model.create(TINY, seed=3) as m:
            sd = m.state_dict()
            infos = m.tensors()
            self.assertEqual(sorted(i["name"] for i in infos), sorted(sd))
            for i in infos:
                t = m.get_tensor(i["name"])
                self.assertEqual(t.shape, sd[i["name"]].shape)
                self.assertEqual(list(t.data), list(sd[i["name"]].data), i["name"])
                self.assertEqual(i["numel"], len(t))
                self.assertTrue(i["trainable"] and not i["adapter"])
            self.assertEqual(m.tensor_info("model.norm.weight")["no_decay"], True)
            # the ctypes layout is the C struct's (the library stamps its size)
            from posttrain._lib import TensorInfo
            import ctypes
            self.assertEqual(m._tensor("model.norm.weight").size, ctypes.sizeof(TensorInfo))
            self.assertEqual(m.num_trainable_params, m.num_params)

    def test_set_tensor_changes_the_model(self):
        b = pt.Batch.next_token(SEQS)
        with pt.Model.create(TINY, seed=3) as m:
            self.assertGreater(abs(m.loss(b) - math.log(261)), 1e-3)
            m.set_tensor("model.norm.weight", [0.0] * 16)
            self.assertAlmostEqual(m.loss(b), math.log(261), delta=1e-5)
            self.assertEqual(list(m.get_tensor("model.norm.weight").data), [0.0] * 16)
            with self.assertRaises(pt.InvalidArgument) as cm:
                m.set_tensor("model.norm.weight", [1.0] * 15)
            self.assertIn("has 15 values, expected 16", cm.exception.message)
            with self.assertRaises(pt.NotFound) as cm:
                m.get_tensor("model.no_such.weight")
            self.assertIn("'model.no_such.weight'", cm.exception.message)

    def test_grad_is_what_sgd_subtracts(self):
        b = pt.Batch.next_token(SEQS)
        name = "model.layers.1.mlp.down_proj.weight"
        with pt.Model.create(TINY, seed=5) as m:
            self.assertIsNone(m.get_grad(name))
            m.loss(b, backward=True)
            g = m.get_grad(name)
            m.zero_grad()
            before = list(m.get_tensor(name).data)
            with sgd(m, 1.0) as opt:
                pt.sft_step(opt, b)
            after = list(m.get_tensor(name).data)
        self.assertIsNotNone(g)
        self.assertGreater(max(abs(v) for v in g.data), 0.0)
        worst = max(abs((x - y) - gv) for x, y, gv in zip(before, after, g.data))
        self.assertLess(worst, 1e-6)

    def test_lora_flags(self):
        with pt.Model.create(TINY, seed=3) as m:
            m.add_lora(rank=2, targets=("q", "v"))
            infos = m.tensors()
            adapters = [i for i in infos if i["adapter"]]
            self.assertEqual(len(adapters), 2 * 2 * 2)
            self.assertTrue(all(i["trainable"] for i in adapters))
            self.assertFalse(any(i["trainable"] for i in infos if not i["adapter"]))
            self.assertEqual(m.num_trainable_params, sum(i["numel"] for i in adapters))


def sgd(model, lr=1.0):
    return pt.Optimizer(model, type="sgd", lr=lr, momentum=0.0, weight_decay=0.0,
                        max_grad_norm=0.0)


class TestGradientStep(unittest.TestCase):
    """One SGD step with lr 1, no momentum, decay or clipping moves the
    weights by exactly minus the gradient: checked against the reported
    gradient norm, against lr 0.5, against the separate backward path, and
    by central finite differences of the loss along the step."""

    def test_sgd_step_is_minus_gradient(self):
        b = pt.Batch.next_token(SEQS)
        with pt.Model.create(TINY, seed=11) as m:
            before = ptest.tensors_flat(m.state_dict())
            loss0 = m.loss(b)
            with sgd(m, 1.0) as opt:
                s = pt.sft_step(opt, b)
            self.assertAlmostEqual(s.loss, loss0, delta=1e-6)
            self.assertEqual((s.step, s.lr, s.skipped), (1, 1.0, False))
            after = ptest.tensors_flat(m.state_dict())
        delta = {k: [x - y for x, y in zip(before[k], after[k])] for k in before}
        norm = math.sqrt(sum(v * v for d in delta.values() for v in d))
        self.assertAlmostEqual(norm / s.grad_norm, 1.0, delta=1e-4)
        for k in ("model.norm.weight", "lm_head.weight", "model.layers.1.mlp.down_proj.weight"):
            self.assertGreater(max(abs(v) for v in delta[k]), 0.0, k)

        # lr 0.5 from the same start moves half as far.
        with pt.Model.create(TINY, seed=11) as m, sgd(m, 0.5) as opt:
            pt.sft_step(opt, b)
            half = ptest.tensors_flat(m.state_dict())
        worst = max(abs((before[k][i] - half[k][i]) - 0.5 * delta[k][i])
                    for k in before for i in range(len(before[k])))
        self.assertLess(worst, 1e-6)

        # loss(backward=True) + Optimizer.step() is the same update.
        with pt.Model.create(TINY, seed=11) as m, sgd(m, 1.0) as opt:
            m.loss(b, backward=True)
            st = opt.step()
            self.assertAlmostEqual(st.grad_norm, s.grad_norm, delta=1e-6 * s.grad_norm)
            same = ptest.tensors_flat(m.state_dict())
        self.assertEqual(same, after)

        # forward + backward(dlogprobs = -1/N) + step: the same update again.
        with pt.Model.create(TINY, seed=11) as m, sgd(m, 1.0) as opt:
            m.forward(b, logits=False)
            m.backward([-1.0 / b.ntokens] * b.ntokens)
            opt.step()
            manual = ptest.tensors_flat(m.state_dict())
        worst = max(abs(manual[k][i] - after[k][i]) for k in after for i in range(len(after[k])))
        self.assertLess(worst, 1e-6)

        # Central finite differences along u = g/|g|: dL/du = |g|.
        eps = 1e-2
        sd = {}
        cfg = dict(TINY)

        def loss_at(h):
            for k, v in before.items():
                shape = shapes[k]
                sd[k] = (shape, [x + h * d / norm for x, d in zip(v, delta[k])])
            with pt.Model.from_state_dict(cfg, sd) as mm:
                return mm.loss(b)
        with pt.Model.create(TINY, seed=11) as m:
            shapes = {k: t.shape for k, t in m.state_dict().items()}
        self.assertAlmostEqual(loss_at(0.0), loss0, delta=0)
        fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps)
        self.assertAlmostEqual(fd / norm, 1.0, delta=2e-2)

    def test_adamw_first_step(self):
        # AdamW's first step is lr * (g / (|g| + eps) + wd * w) (bias-corrected
        # moments m = g, v = g^2), with no decay on norms by default; g comes
        # from the SGD lr=1 step.
        b = pt.Batch.next_token(SEQS)
        with pt.Model.create(TINY, seed=11) as m:
            w0 = ptest.tensors_flat(m.state_dict())
            with sgd(m, 1.0) as opt:
                pt.sft_step(opt, b)
            g = {k: [x - y for x, y in zip(w0[k], v)]
                 for k, v in ptest.tensors_flat(m.state_dict()).items()}
        lr, wd, eps = 1e-3, 0.1, 1e-8
        with pt.Model.create(TINY, seed=11) as m, \
                pt.Optimizer(m, type="adamw", lr=lr, weight_decay=wd, eps=eps,
                             max_grad_norm=0.0) as opt:
            s = pt.sft_step(opt, b)
            self.assertEqual(s.lr, lr)
            w1 = ptest.tensors_flat(m.state_dict())
        checked = 0
        for k in w0:
            decay = wd if not k.endswith("norm.weight") else 0.0
            for i in range(len(w0[k])):
                gi = g[k][i]
                if abs(gi) < 1e-5:
                    continue   # g recovered from float32 weights is too coarse there
                want = lr * (gi / (abs(gi) + eps) + decay * w0[k][i])
                self.assertAlmostEqual(w0[k][i] - w1[k][i], want, delta=2e-7, msg=k)
                checked += 1
        self.assertGreater(checked, 1000)

    def test_sft_step_weight_forms(self):
        # One batch's weights may be None, [None], per row, [per row] or flat;
        # zero weights on a row leave it out of the loss.
        b = pt.Batch.next_token(SEQS)
        losses = []
        for w in (None, [None], [[1.0] * 8] * 2, [[[1.0] * 8] * 2], [1.0] * 16):
            with pt.Model.create(TINY, seed=1) as m, pt.Optimizer(m) as o:
                losses.append(o.sft_step(b, w).loss)
        self.assertEqual(len(set(losses)), 1, losses)
        with pt.Model.create(TINY, seed=1) as m, pt.Optimizer(m) as o:
            only0 = m.loss(pt.Batch.next_token(SEQS[:1]))
            s = o.sft_step(b, [[1.0] * 8, [0.0] * 8])
            self.assertEqual(s.tokens, 8.0)
            self.assertAlmostEqual(s.loss, only0, delta=1e-6)

    def test_micro_batches_equal_one_batch(self):
        rows = [s[:7] for s in SEQS] + [[256, 1, 2, 3, 4, 5, 6]]
        big = pt.Batch.next_token(rows)
        parts = [pt.Batch.next_token(rows[:2]), pt.Batch.next_token(rows[2:])]
        with pt.Model.create(TINY, seed=5) as m, sgd(m, 1.0) as opt:
            s1 = pt.sft_step(opt, big)
            w1 = ptest.tensors_flat(m.state_dict())
        with pt.Model.create(TINY, seed=5) as m, sgd(m, 1.0) as opt:
            s2 = opt.sft_step(parts)
            w2 = ptest.tensors_flat(m.state_dict())
        self.assertAlmostEqual(s1.loss, s2.loss, delta=1e-6)
        self.assertEqual(s1.tokens, 18.0)
        self.assertEqual(s2.tokens, 18.0)
        worst = max(abs(w1[k][i] - w2[k][i]) for k in w1 for i in range(len(w1[k])))
        self.assertLess(worst, 1e-6)


if __name__ == "__main__":
    ptest.main()
