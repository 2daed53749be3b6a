"""Data-parallel training through the binding (posttrain.Dist, dist.h).

Run alone by the python suite (a job of size 1: backend auto without a
launcher is single), and by every rank of `tests/dist/mpirun.sh N 120
python3 tests/python/test_dist.py` at 2 and 3 ranks when the library has
MPI (tests/python/meson.build).  Every rank runs the same tests in the same
order, so the collectives of one test meet; each rank regenerates every
rank's data from seeds and computes the expected results itself.  The
process exits with the job's verdict (0 only when every rank passed).

Checked: the job (rank, size, shard's formula and its errors naming both
numbers), allreduce_sum in rank order (numbers, lists, empty), broadcast
from each root (length sent first, None on the other ranks, a root without
bytes), barrier, agree (statuses, posttrain errors and Python exceptions,
PeerError naming the failed rank), data-parallel sft_step against one
process over the same global batches (weights within rel 1e-6 per tensor,
the same loss on every rank, global token counts, comm_seconds), with one
and two micro-batches per rank, data-parallel grpo_step over each rank's
share of the groups against one process, check_replicas after one flipped bit on one
rank (ChecksumError naming it, .bad_rank), Optimizer.set_dist / dist= and
what closing an attached Dist does, options and their errors, closed
handles, and an mpi4py communicator when mpi4py is importable."""

import gc
import math
import os
import random
import shutil
import struct
import sys
import tempfile
import unittest

import ptest
import posttrain as pt

# Weights of a scale the updates do not dwarf, so that max|a - b| / max|b|
# measures rounding rather than Adam's sign flips on near-zero weights.
TINY = dict(ptest.TINY, initializer_range=0.2)
D = None          # the job every test shares (MPI allows one initialisation per process)


def launched_size():
    """The number of ranks the MPI launcher started (1 without one)."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if os.environ.get(var):
            return int(os.environ[var])
    return 1


# ---- data-parallel SFT: every rank makes every rank's data -------------------

ROWS, SEQ, STEPS = 7, 9, 3


def global_batch(step):
    """ROWS rows of SEQ ids, targets the next id with about a third masked
    (-1), and loss weights 0.5 .. 1.25."""
    rng = random.Random(77 + step)
    V = TINY["vocab_size"]
    ids = [[rng.randrange(V) for _ in range(SEQ)] for _ in range(ROWS)]
    tg = [[ids[r][t + 1] if t + 1 < SEQ and rng.randrange(3) else -1 for t in range(SEQ)]
          for r in range(ROWS)]
    w = [[0.5 + 0.25 * rng.randrange(4) for _ in range(SEQ)] for _ in range(ROWS)]
    return ids, tg, w


def make_opt(model, dist=None):
    return pt.Optimizer(model, lr=1e-3, weight_decay=0.01, max_grad_norm=0.5, dist=dist)


def train(dist, n_micro):
    """STEPS steps from the same initial model: over every row in one process
    (dist None), or over this rank's shard of each global batch split into
    n_micro micro-batches when it has rows enough.  (model, [SftResult])."""
    model = pt.Model.create(TINY, seed=5)
    opt = make_opt(model, dist)
    rows = dist.shard(ROWS) if dist is not None else range(ROWS)
    out = []
    for s in range(STEPS):
        ids, tg, w = global_batch(s)
        k = 2 if n_micro > 1 and len(rows) > 1 else 1
        cut = rows.start + len(rows) // k
        parts = [range(rows.start, cut), range(cut, rows.stop)] if k == 2 else [rows]
        batches = [pt.Batch([ids[i] for i in p], [tg[i] for i in p]) for p in parts]
        weights = [[w[i] for i in p] for p in parts]
        out.append(opt.sft_step(batches, weights))
    opt.close()
    return model, out


def rel_diffs(a, b):
    """(the worst tensor's max|a - b| / max|b|: the worst single weight
    against its tensor's scale, the worst tensor's ||a - b|| / ||b||: its
    relative error).  Element-wise ratios are meaningless for weights near
    0, whose last bits follow the rounding of tiny Adam updates."""
    worst = worst_norm = 0.0
    for info in b.tensors():
        x, y = a.get_tensor(info["name"]).data, b.get_tensor(info["name"]).data
        diff = max(abs(p - q) for p, q in zip(x, y))
        scale = max(abs(q) for q in y)
        worst = max(worst, diff / scale if scale > 0 else diff)
        d2 = sum((p - q) ** 2 for p, q in zip(x, y))
        b2 = sum(q * q for q in y)
        worst_norm = max(worst_norm, math.sqrt(d2 / b2) if b2 > 0 else math.sqrt(d2))
    return worst, worst_norm


def max_rel_diff(a, b):
    """The worst tensor's max|a - b| / max|b|."""
    return rel_diffs(a, b)[0]


def rank0_value(d, value):
    """Rank 0's float, on every rank, bit for bit."""
    return struct.unpack("<d", d.broadcast(struct.pack("<d", value), 0))[0]


# ---- data-parallel GRPO: every rank makes every rank's groups ------------------

GROUPS, GSIZE = 5, 3


def group_samples(rnd, g):
    """The GSIZE samples of group g in round rnd: (prompt, completion, mask,
    old logprobs, rewards, truncated); the second reward declined now and
    then, group 1 a zero-std group."""
    rng = random.Random(5000 + 1000 * rnd + g)
    V = TINY["vocab_size"]
    out = []
    for _ in range(GSIZE):
        prompt = [rng.randrange(V) for _ in range(2 + rng.randrange(2))]
        nc = 2 + rng.randrange(4)
        comp = [rng.randrange(V) for _ in range(nc)]
        mask = [1] + [int(rng.randrange(5) != 0) for _ in range(nc - 1)]
        old = [-0.5 - 3.0 * rng.random() for _ in range(nc)]
        rewards = [0.5 if g == 1 else 0.5 * rng.randrange(3),
                   None if rng.randrange(4) == 0 else rng.random()]
        out.append((prompt, comp, mask, old, rewards, rng.randrange(4) == 0))
    return out


def grpo_train(dist):
    """Two rounds of GRPO (DAPO loss, group scaling) over every group in one
    process (dist None), or over this rank's share of the groups.  (model,
    last GrpoStats)."""
    model = pt.Model.create(TINY, seed=9)
    opt = make_opt(model, dist)
    groups = dist.shard(GROUPS) if dist is not None else range(GROUPS)
    for rnd in range(2):
        with pt.RolloutBuffer(["a", "b"], [1.0, 0.5]) as buf:
            for g in groups:
                for prompt, comp, mask, old, rewards, trunc in group_samples(rnd, g):
                    buf.add(prompt, comp, mask, old, group=g, rewards=rewards, truncated=trunc)
            st = opt.grpo_step(buf, loss_type="dapo", scale_rewards="group", epsilon_high=0.28,
                               max_completion_length=6)
    opt.close()
    return model, st


@unittest.skipUnless(pt.has_feature("dist"), "the loaded libposttrain has no dist feature")
class TestJob(unittest.TestCase):
    """The shared job D: rank, size, shards, collectives."""

    def test_rank_and_size(self):
        self.assertEqual(D.size, launched_size())
        self.assertIn(D.rank, range(D.size))
        if os.environ.get("OMPI_COMM_WORLD_RANK"):
            self.assertEqual(D.rank, int(os.environ["OMPI_COMM_WORLD_RANK"]))
        self.assertEqual(repr(D), "<posttrain.Dist rank %d of %d>" % (D.rank, D.size))
        self.assertIs(D.options["backend"], pt.DistBackend.AUTO)
        # auto resolved: MPI under a launcher (with MPI built), else one process
        self.assertIs(D.backend, pt.DistBackend.MPI if pt.has_mpi() and launched_size() > 1 or
                      (pt.has_mpi() and os.environ.get("OMPI_COMM_WORLD_SIZE")) else pt.DistBackend.SINGLE)
        self.assertEqual(D.options["timeout_s"], 30.0)
        self.assertFalse(D.closed)

    def test_shard(self):
        size, rank = D.size, D.rank
        for n in range(size, size + 9):
            r = D.shard(n)
            self.assertIsInstance(r, range)
            expect_begin = sum(n // size + (q < n % size) for q in range(rank))
            self.assertEqual((r.start, len(r)), (expect_begin, n // size + (rank < n % size)))
            self.assertEqual(D.allreduce_sum(len(r)), n)
            # contiguous in rank order: the shards tile 0 .. n
            self.assertEqual(D.allreduce_sum(sum(r)), n * (n - 1) / 2)
        for n in (size - 1, -1):
            with self.assertRaises(pt.InvalidArgument) as cm:
                D.shard(n)
            self.assertIn("%d items cannot be shared by %d ranks" % (n, size), cm.exception.message)
            self.assertEqual(cm.exception.function, "pt_dist_shard")
        for bad in (1.5, True, "3", None):
            with self.subTest(n=bad), self.assertRaises(pt.InvalidArgument):
                D.shard(bad)

    def test_allreduce_sum(self):
        size, rank = D.size, D.rank
        mine = [0.1 * (rank + 1), float(rank), -2.0 ** (20 - 7 * rank), 1e300]
        expect = [0.1, 0.0, -2.0 ** 20, 1e300]
        for q in range(1, size):             # the rank-order fold ((r0 + r1) + r2)
            theirs = [0.1 * (q + 1), float(q), -2.0 ** (20 - 7 * q), 1e300]
            expect = [e + t for e, t in zip(expect, theirs)]
        got = D.allreduce_sum(mine, numpy=False)
        self.assertIsInstance(got, list)
        self.assertEqual(got, expect)
        self.assertEqual(D.allreduce_sum(tuple(mine), numpy=False), expect)
        self.assertEqual(D.allreduce_sum((x for x in mine), numpy=False), expect)
        self.assertEqual(D.allreduce_sum(rank + 0.5), size * (size - 1) / 2 + 0.5 * size)
        self.assertIsInstance(D.allreduce_sum(1), float)
        self.assertEqual(D.allreduce_sum([], numpy=False), [])
        self.assertTrue(math.isnan(D.allreduce_sum(float("nan") if rank == size - 1 else 1.0)))
        for bad in ("1", None, [1, "x"], [True], True, [[1.0]]):
            with self.subTest(values=bad), self.assertRaises(pt.InvalidArgument) as cm:
                D.allreduce_sum(bad)
            self.assertEqual(cm.exception.function, "Dist.allreduce_sum")

    def test_broadcast(self):
        size, rank = D.size, D.rank
        for root in range(size):
            got = D.broadcast(b"from rank %d" % rank if rank == root else None, root)
            self.assertEqual(got, b"from rank %d" % root)
            self.assertIsInstance(got, bytes)
        # any bytes-like object on the root; what the others pass is ignored
        self.assertEqual(D.broadcast(bytearray(b"\0\1\2") if rank == 0 else b"ignored"), b"\0\1\2")
        self.assertEqual(D.broadcast(memoryview(b"mv")), b"mv")
        self.assertEqual(D.broadcast(b""), b"")
        big = bytes(range(256)) * 4099
        self.assertEqual(D.broadcast(big if rank == size - 1 else None, size - 1), big)
        # a root without bytes: every rank raises, and the job goes on
        with self.assertRaises(pt.InvalidArgument) as cm:
            D.broadcast("text" if rank == 0 else None, 0)
        self.assertIn("the root, rank 0, gave no bytes-like object to broadcast",
                      cm.exception.message)
        with self.assertRaises(pt.InvalidArgument) as cm:
            D.broadcast(b"x", size)
        self.assertIn("is not a rank of this job of %d" % size, cm.exception.message)
        with self.assertRaises(pt.InvalidArgument):
            D.broadcast(b"x", "0")
        D.barrier()

    def test_agree(self):
        size, rank = D.size, D.rank
        bad = size - 1
        self.assertEqual(D.agree(), -1)
        self.assertEqual(D.agree(0), -1)
        self.assertEqual(D.agree(None), -1)
        # a status
        if rank == bad:
            with self.assertRaises(pt.OutOfMemory) as cm:
                D.agree(pt.Status.ENOMEM)
            self.assertEqual(str(cm.exception), "PT_ENOMEM: out of memory")
        else:
            with self.assertRaises(pt.PeerError) as cm:
                D.agree(0)
            self.assertEqual(cm.exception.message,
                             "pt_dist_agree: rank %d failed (PT_ENOMEM); its own message says why"
                             % bad)
        self.assertEqual(cm.exception.first_failed, bad)
        # a posttrain error: the failed rank gets its own exception back
        err = None
        if rank == bad:
            with self.assertRaises(pt.NotFound) as cm:
                pt.Tokenizer.load("/nonexistent/posttrain-tokenizer.json")
            err = cm.exception
        with self.assertRaises(pt.Error) as cm:
            D.agree(err)
        if rank == bad:
            self.assertIs(cm.exception, err)
        else:
            self.assertIsInstance(cm.exception, pt.PeerError)
            self.assertIn("rank %d failed (PT_ENOTFOUND)" % bad, cm.exception.message)
            self.assertEqual(cm.exception.first_failed, bad)
        # a Python exception (say rank 0's checkpoint write failed): PT_ECALLBACK
        oops = OSError(28, "No space left on device") if rank == 0 else None
        with self.assertRaises(Exception) as cm:
            D.agree(oops)
        if rank == 0:
            self.assertIs(cm.exception, oops)
        else:
            self.assertIn("rank 0 failed (PT_ECALLBACK)", cm.exception.message)
        # the lowest failed rank is named
        with self.assertRaises(pt.Error) as cm:
            D.agree(pt.Status.EIO if rank >= bad - 1 else 0)
        self.assertEqual(cm.exception.first_failed, max(bad - 1, 0))
        # arguments every rank rejects alike, before any collective
        with self.assertRaises(pt.InvalidArgument) as cm:
            D.agree(1)
        self.assertIn("status", cm.exception.message)
        for wrong in ("EIO", 1.5, True):
            with self.subTest(status=wrong), self.assertRaises(pt.InvalidArgument):
                D.agree(wrong)
        self.assertEqual(D.agree(), -1)

    @unittest.skipUnless(pt.has_feature("run"), "the loaded libposttrain has no run layer")
    def test_run_agree(self):
        """pt_run_agree in a run of the job: this rank's code when it failed,
        else the lowest failed rank's, the same on every rank."""
        size, rank = D.size, D.rank
        tmp = tempfile.mkdtemp() if rank == 0 else None
        base = os.fsdecode(D.broadcast(os.fsencode(tmp) if rank == 0 else None))
        try:
            with pt.Run(os.path.join(base, "run"), "sft", dist=D, check_every=2) as run:
                self.assertEqual(run.size, size)
                self.assertEqual(run.agree(0), (0, -1))
                bad = size - 1
                self.assertEqual(run.agree(2 if rank == bad else 0), (2, bad))
                # two failed: the lower one's code, except on the failed ranks
                code = {bad: 2, max(bad - 1, 0): 1}.get(rank, 0)
                agreed, first = run.agree(code)
                self.assertEqual(first, max(bad - 1, 0))
                self.assertEqual(agreed, code or (1 if size > 1 else 2))
                self.assertEqual(run.check_due(2), size > 1)
                self.assertFalse(run.check_due(3))
                D.barrier()
        finally:
            D.barrier()
            if rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)

    def test_comm_seconds(self):
        before = D.comm_seconds
        D.barrier()
        after = D.comm_seconds
        if D.size == 1:
            self.assertEqual((before, after), (0.0, 0.0))
        else:
            self.assertGreater(after, before)


@unittest.skipUnless(pt.has_feature("dist"), "the loaded libposttrain has no dist feature")
class TestDataParallel(unittest.TestCase):
    def test_equals_one_process(self):
        one, st1 = train(None, 1)
        start = pt.Model.create(TINY, seed=5)
        self.assertGreater(max_rel_diff(one, start), 1e-3)     # the weights moved
        start.close()
        for n_micro in (1, 2):
            with self.subTest(micro_batches=n_micro):
                dp, stn = train(D, n_micro)
                rel, norm_rel = rel_diffs(dp, one)
                if D.rank == 0:
                    print("\n%d ranks, %d micro-batches per rank: weights vs one process: worst "
                          "weight %.3g of its tensor's scale (L2 rel %.3g)"
                          % (D.size, n_micro, rel, norm_rel), file=sys.stderr)
                self.assertLessEqual(rel, 1e-6)
                for s in range(STEPS):
                    self.assertFalse(stn[s].skipped)
                    self.assertEqual(stn[s].step, s + 1)
                    self.assertEqual(stn[s].tokens, st1[s].tokens)          # global counts
                    self.assertLessEqual(abs(stn[s].loss - st1[s].loss), 1e-6 * abs(st1[s].loss))
                    # the same loss on every rank, bit for bit
                    self.assertEqual(rank0_value(D, stn[s].loss), stn[s].loss)
                    self.assertEqual(rank0_value(D, stn[s].grad_norm), stn[s].grad_norm)
                    if D.size == 1:
                        self.assertEqual(stn[s].comm_seconds, 0.0)
                    else:
                        self.assertGreater(stn[s].comm_seconds, 0.0)
                    self.assertEqual(st1[s].comm_seconds, 0.0)
                dp.close()
        one.close()

    @unittest.skipUnless(pt.has_feature("grpo") and "comm_seconds" in pt.GrpoStats._fields,
                         "the loaded libposttrain has no data-parallel GRPO")
    def test_grpo_equals_one_process(self):
        one, s1 = grpo_train(None)
        dp, sn = grpo_train(D)
        # As tests/dist/test_dist.c: GRPO's losses go through more reductions
        # (ratios, clipping, per-group normalisers), so each tensor within rel
        # 1e-6 as a whole (L2), every single weight within 1e-5 of its scale.
        rel, norm_rel = rel_diffs(dp, one)
        if D.rank == 0:
            print("\ngrpo, %d ranks: weights vs one process: rel %.3g (worst weight %.3g of its "
                  "tensor's scale)" % (D.size, norm_rel, rel), file=sys.stderr)
        self.assertLessEqual(norm_rel, 1e-6)
        self.assertLessEqual(rel, 1e-5)
        self.assertFalse(sn.skipped)
        # the statistics of the whole global batch, bit for bit on the reward side
        self.assertEqual((sn.groups, sn.tokens, sn.reward, sn.reward_std),
                         (s1.groups, s1.tokens, s1.reward, s1.reward_std))
        self.assertEqual(sn.groups, GROUPS)
        self.assertEqual(sn.reward_func_mean, s1.reward_func_mean)
        self.assertEqual(sn.frac_reward_zero_std, s1.frac_reward_zero_std)
        self.assertLessEqual(abs(sn.loss - s1.loss), 1e-5 * abs(s1.loss) + 1e-12)
        self.assertEqual(rank0_value(D, sn.loss), sn.loss)
        if D.size == 1:
            self.assertEqual(sn.comm_seconds, 0.0)
        else:
            self.assertGreater(sn.comm_seconds, 0.0)
        self.assertEqual(s1.comm_seconds, 0.0)
        one.close()
        dp.close()

    def test_check_replicas(self):
        model, _ = train(D, 1)
        with make_opt(model) as opt:
            h = D.check_replicas(opt)
            self.assertIsInstance(h, int)
            self.assertTrue(0 < h < 2 ** 64)
            self.assertEqual(D.broadcast(h.to_bytes(8, "little"), 0), h.to_bytes(8, "little"))
            # one bit of one weight of the last rank
            name = model.tensors()[3]["name"]
            t = model.get_tensor(name)
            good = t.data[5]
            u = struct.unpack("<I", struct.pack("<f", good))[0] ^ (1 << 3)
            flipped = struct.unpack("<f", struct.pack("<I", u))[0]
            if D.rank == D.size - 1:
                t.data[5] = flipped
                model.set_tensor(name, t)
            if D.size == 1:
                self.assertNotEqual(D.check_replicas(opt), h)    # nothing to compare with
            else:
                with self.assertRaises(pt.ChecksumError) as cm:
                    D.check_replicas(opt)
                e = cm.exception
                self.assertEqual(e.function, "pt_dist_check_replicas")
                self.assertIn("silent data corruption", e.message)
                if D.size == 2:
                    # two ranks that disagree name no culprit (bad_rank -1: None)
                    self.assertIn("no majority agrees: ranks 0 (", e.message)
                    self.assertIsNone(e.bad_rank)
                else:
                    self.assertIn("rank(s) %d (" % (D.size - 1), e.message)
                    self.assertIn("differ from the %d of %d ranks that agree"
                                  % (D.size - 1, D.size), e.message)
                    self.assertEqual(e.bad_rank, D.size - 1)
                # .hash: this rank's own
                if D.rank == D.size - 1:
                    self.assertNotEqual(e.hash, h)
                else:
                    self.assertEqual(e.hash, h)
            if D.rank == D.size - 1:
                t.data[5] = good
                model.set_tensor(name, t)
            self.assertEqual(D.check_replicas(opt), h)
            with self.assertRaises(pt.InvalidArgument):
                D.check_replicas(model)
        model.close()


@unittest.skipUnless(pt.has_feature("dist"), "the loaded libposttrain has no dist feature")
class TestOptimizerDist(unittest.TestCase):
    def test_attach_detach_and_close(self):
        ids, tg, w = global_batch(0)
        batch = pt.Batch(ids, tg)
        with pt.Model.create(TINY, seed=5) as m:
            single = pt.Dist(backend="single")
            opt = make_opt(m, single)
            self.assertIs(opt.dist, single)
            self.assertEqual(opt.sft_step(batch, [w]).step, 1)
            opt.set_dist(None)
            self.assertIsNone(opt.dist)
            opt.set_dist(single)
            # closing the job first detaches it: the next step refuses to train alone
            single.close()
            with self.assertRaises(pt.ClosedHandleError) as cm:
                opt.sft_step(batch, [w])
            self.assertIn("the optimizer's distributed job is closed (close() was called)",
                          cm.exception.message)
            self.assertEqual(opt.step_count, 1)
            with self.assertRaises(pt.ClosedHandleError):
                opt.set_dist(single)
            opt.set_dist(None)
            self.assertEqual(opt.sft_step(batch, [w]).step, 2)
            for bad in ("single", 1, m):
                with self.subTest(dist=bad), self.assertRaises(pt.InvalidArgument):
                    opt.set_dist(bad)
            with self.assertRaises(pt.InvalidArgument) as cm:
                pt.Optimizer(m, dist="auto")
            self.assertIn("dist must be a posttrain.Dist or None", cm.exception.message)
            opt.close()
            # the optimizer keeps its job alive
            opt = make_opt(m, pt.Dist(backend="single"))
            gc.collect()
            self.assertFalse(opt.dist.closed)
            self.assertEqual(opt.sft_step(batch, [w]).step, 1)
            job = opt.dist
            opt.close()
            job.close()


@unittest.skipUnless(pt.has_feature("dist"), "the loaded libposttrain has no dist feature")
class TestSingleAndOptions(unittest.TestCase):
    def test_backend_enum_and_features(self):
        self.assertEqual([(m.name, int(m)) for m in pt.DistBackend],
                         [("AUTO", 0), ("SINGLE", 1), ("MPI", 2)])
        self.assertEqual([str(m) for m in pt.DistBackend], ["auto", "single", "mpi"])
        self.assertIs(pt.DistBackend("mpi"), pt.DistBackend.MPI)
        self.assertIn("dist", pt.features())
        self.assertEqual(pt.has_mpi(), "mpi" in pt.features())
        # `posttrain version`'s "mpi:" line: one line, no trailing ", "
        info = pt.mpi_info()
        self.assertEqual(info is not None, pt.has_mpi())
        if info is not None:
            self.assertTrue(info and "\n" not in info and info[-1] not in ", ", info)
        keys = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
        saved = {k: os.environ.pop(k) for k in keys if k in os.environ}
        try:
            self.assertEqual(pt.launcher_rank(), 0)
            os.environ["PMI_RANK"] = "5"
            self.assertEqual(pt.launcher_rank(), 5)
            os.environ["OMPI_COMM_WORLD_RANK"] = "2"   # Open MPI's first
            self.assertEqual(pt.launcher_rank(), 2)
        finally:
            for k in keys:
                os.environ.pop(k, None)
            os.environ.update(saved)
        self.assertEqual(pt.dist_defaults(), {"backend": pt.DistBackend.AUTO, "timeout_s": 60.0,
                                              "bucket_bytes": 4 << 20})

    def test_single(self):
        for backend in ("single", pt.DistBackend.SINGLE, 1):
            with pt.Dist(backend=backend, timeout_s=5, bucket_bytes=4096) as s:
                self.assertEqual((s.rank, s.size), (0, 1))
                self.assertIs(s.options["backend"], pt.DistBackend.SINGLE)
                self.assertEqual((s.options["timeout_s"], s.options["bucket_bytes"]), (5.0, 4096))
                self.assertEqual(s.shard(5), range(0, 5))
                self.assertEqual(s.allreduce_sum([1.5, -2], numpy=False), [1.5, -2.0])
                self.assertEqual(s.broadcast(b"abc"), b"abc")
                s.barrier()
                self.assertEqual(s.agree(), -1)
                with self.assertRaises(pt.InvalidArgument) as cm:
                    s.shard(0)
                self.assertEqual(cm.exception.message,
                                 "pt_dist_shard: 0 items cannot be shared by 1 ranks (every rank "
                                 "needs at least one: give at least 1, or run fewer ranks)")
                with self.assertRaises(pt.InvalidArgument):
                    s.broadcast(b"abc", 1)
                with self.assertRaises(pt.NoSpace) as cm:
                    s.agree(pt.Status.ENOSPC)
                self.assertEqual(cm.exception.first_failed, 0)
                self.assertEqual(s.comm_seconds, 0.0)
        if D.size == 1:
            # without a launcher, auto is single
            with pt.Dist() as a:
                self.assertEqual((a.rank, a.size), (0, 1))

    def test_option_errors(self):
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.Dist(backend="tcp")
        self.assertEqual(cm.exception.message, "pt_dist_backend_from_name: unknown dist backend "
                         "'tcp' (one of: auto, single, mpi)")
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.Dist(backend=7)
        self.assertEqual(cm.exception.message, "pt_dist_create: unknown backend 7 (auto, single or mpi)")
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.Dist(backend="single", timeout_s=-1)
        self.assertIn("timeout_s -1 must be finite and >= 0", cm.exception.message)
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.Dist(backend="single", timeout_s=float("inf"))
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.Dist(backend="single", bucket_bytes=1024)
        self.assertEqual(cm.exception.message,
                         "pt_dist_create: bucket_bytes 1024 is not in [4096, 1073741824]")
        for kw in (dict(backend=pt.Arch.LLAMA), dict(backend=True), dict(timeout_s="60"),
                   dict(timeout_s=True), dict(bucket_bytes=4096.0), dict(bucket_bytes=-1),
                   dict(comm=object()), dict(comm=0)):
            with self.subTest(**{k: repr(v) for k, v in kw.items()}), \
                    self.assertRaises(pt.InvalidArgument) as cm:
                pt.Dist(**kw)
            self.assertEqual(cm.exception.function, "Dist")
        if not pt.has_mpi():
            with self.assertRaises(pt.Unsupported) as cm:
                pt.Dist(backend="mpi")
            self.assertIn("built without MPI", cm.exception.message)

    def test_closed_handle(self):
        s = pt.Dist(backend="single")
        s.close()
        s.close()                                   # idempotent
        self.assertTrue(s.closed)
        self.assertEqual(repr(s), "<posttrain.Dist closed>")
        for call in (lambda: s.rank, lambda: s.size, lambda: s.comm_seconds, lambda: s.shard(4),
                     lambda: s.allreduce_sum(1), lambda: s.broadcast(b"x"), s.barrier, s.agree):
            with self.assertRaises(pt.ClosedHandleError) as cm:
                call()
            self.assertEqual(cm.exception.message,
                             "distributed job is closed: close() was called")
        with self.assertRaises(pt.ClosedHandleError):
            with s:
                pass
        with pt.Model.create(TINY) as m, make_opt(m) as opt:
            with self.assertRaises(pt.ClosedHandleError):
                s.check_replicas(opt)
            with self.assertRaises(pt.ClosedHandleError):
                pt.Optimizer(m, dist=s)


@unittest.skipUnless(pt.has_feature("dist") and pt.has_mpi(), "no MPI in the loaded libposttrain")
class TestMpi4py(unittest.TestCase):
    """A communicator of mpi4py's (when it is importable, under a launcher)."""

    def test_communicators(self):
        if D.size == 1:
            self.skipTest("not under an MPI launcher")
        try:
            from mpi4py import MPI
        except ImportError:
            self.skipTest("mpi4py is not importable")
        world = MPI.COMM_WORLD
        with pt.Dist(comm=world, timeout_s=30) as w:
            self.assertEqual((w.rank, w.size), (world.Get_rank(), world.Get_size()))
            self.assertEqual(w.allreduce_sum(1), world.Get_size())
        # even and odd ranks, each its own job
        sub = world.Split(D.rank % 2, D.rank)
        try:
            with pt.Dist(comm=sub, timeout_s=30) as s:
                self.assertEqual((s.rank, s.size), (sub.Get_rank(), sub.Get_size()))
                self.assertEqual(s.allreduce_sum(D.rank),
                                 sum(r for r in range(D.size) if r % 2 == D.rank % 2))
                self.assertEqual(s.shard(sub.Get_size()), range(s.rank, s.rank + 1))
        finally:
            sub.Free()
        with self.assertRaises(pt.Unsupported) as cm:
            pt.Dist(backend="single", comm=world)
        self.assertIn("mpi_comm is given but the backend is single", cm.exception.message)
        with self.assertRaises(pt.InvalidArgument):
            pt.Dist(comm=MPI.COMM_NULL)


def main():
    global D
    if not pt.has_feature("dist"):
        print("SKIP test_dist: the loaded libposttrain has no dist feature", file=sys.stderr)
        return 77
    D = pt.Dist(timeout_s=30)
    if D.size > 1:
        pt.set_num_threads(1)           # N ranks on 2 cores
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2 if D.rank == 0 else 1)
    prog = unittest.main(module=__name__, exit=False, testRunner=runner)
    ok = prog.result.wasSuccessful()
    # every rank exits with the job's verdict
    try:
        failed = D.allreduce_sum(0.0 if ok else 1.0)
    except pt.Error as e:
        print("rank %d: the verdict could not be gathered: %s" % (D.rank, e), file=sys.stderr)
        failed = 1
    print("rank %d of %d: %s" % (D.rank, D.size, "FAILED" if failed else "passed"))
    D.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
