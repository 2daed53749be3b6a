"""Data-parallel training (posttrain/dist.h, docs/python.md "Data-parallel
training"): every process (rank) of a job holds the whole model, trains on
its share of each global batch, and the library sums the gradients across
the ranks in a fixed order, so N ranks give the weights of one process over
the same global batch (to rounding).

Available when the loaded library has the "dist" feature (always, in a
current library); over MPI when it also has "mpi" (has_mpi()).  The same
program runs alone (a job of size 1) or under `mpirun -np N`:

    with pt.Dist() as d, pt.Model.create(config, seed=1) as model:
        opt = pt.Optimizer(model, lr=1e-3, dist=d)   # or opt.set_dist(d)
        rows = d.shard(len(global_rows))             # a range: this rank's rows
        s = opt.sft_step(pt.Batch.next_token([global_rows[i] for i in rows]))
        # s.loss, s.tokens: of the global batch, the same on every rank
        d.check_replicas(opt)                        # ChecksumError if a replica drifted

Every method but shard() and the properties is a collective: every rank
calls it, in the same order, from one thread at a time.  A collective that
does not complete within timeout_s raises PeerError naming the ranks that
did not arrive, and the job is unusable from then on (every later call:
PeerError): exit non-zero and let mpirun end the others.  MPI can be
initialised once per process, so keep one Dist for the whole run (a Dist
still open at exit is closed then).
"""

import atexit
import ctypes
import numbers
import operator
import sys
import weakref

from . import _util
from ._handle import Handle, out_handle
from ._lib import DistOptions, has_feature, lib
from ._util import is_numpy, text, want_numpy
from .enums import DistBackend, Status
from .errors import Error, check, error_for, invalid, status_str

__all__ = ["Dist", "DistBackend", "dist_defaults", "has_mpi", "launcher_rank", "mpi_info"]

_FIELDS = DistOptions.field_names()
_ENUMS = {"backend": DistBackend}
# Broadcast's length word when the root has nothing to send.
_NO_DATA = 2**64 - 1


def _require(function):
    if not has_feature("dist"):
        raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain has no data-parallel layer "
                        "(feature dist, posttrain/dist.h)", function)


def has_mpi():
    """True when the loaded library was built with MPI (pt_dist_has_mpi; the
    feature word "mpi"): only then can a job have more than one process."""
    return has_feature("dist") and bool(lib.pt_dist_has_mpi())


def launcher_rank():
    """The rank an MPI launcher gave this process in its environment
    (pt_dist_launcher_rank: OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK), or 0,
    known before a Dist is created: to print a note once."""
    return lib.pt_dist_launcher_rank() if has_feature("dist") else 0


def mpi_info():
    """The MPI library the loaded libposttrain was built with, as `posttrain
    version` prints it (pt_dist_mpi_info: "Open MPI v4.1.4, ..."), or None."""
    return text(lib.pt_dist_mpi_info()) if has_mpi() else None


def dist_defaults():
    """pt_dist_options_init()'s defaults as a dict: backend (a DistBackend),
    timeout_s, bucket_bytes."""
    _require("dist_defaults")
    d = DistOptions.new().to_dict()
    d["backend"] = DistBackend.wrap(d["backend"])
    return d


def _whole(v, what, function, lo, hi):
    if isinstance(v, bool):
        raise invalid("%s must be an int, not bool" % what, function)
    try:
        n = operator.index(v)
    except TypeError:
        raise invalid("%s must be an int, not %r" % (what, v), function) from None
    if not lo <= n <= hi:
        raise invalid("%s %d is out of range" % (what, n), function)
    return n


def _real(v, what, function):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise invalid("%s must be a number, not %r" % (what, v), function)
    return float(v)


def _comm_address(comm):
    """The address of an mpi4py communicator's MPI_Comm handle (None for None)."""
    if comm is None:
        return None
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not isinstance(comm, mpi.Comm):
        raise invalid("comm must be an mpi4py communicator (mpi4py.MPI.Intracomm, e.g. "
                      "MPI.COMM_WORLD or one made by its Split), or None for MPI_COMM_WORLD; "
                      "not %r" % (comm,), "Dist")
    if not isinstance(comm, mpi.Intracomm) or comm == mpi.COMM_NULL:
        raise invalid("comm must be a valid intra-communicator, not %r" % (comm,), "Dist")
    return mpi._addressof(comm)


# Open jobs in creation order (weak references), closed at interpreter exit
# in reverse order so that MPI is finalised (Open MPI's mpirun reports a
# process that exits without MPI_Finalize as failed).
_live = []


def _close_all():
    while _live:
        d = _live.pop()()
        if d is not None:
            try:
                d._close("the interpreter exited")
            except Exception:  # pragma: no cover - shutdown
                pass


atexit.register(_close_all)


class Dist(Handle):
    """A data-parallel job (pt_dist): join it on every rank.

    Dist(backend=None, timeout_s=None, bucket_bytes=None, comm=None); None
    keeps pt_dist_options_init()'s default (dist_defaults()):
      backend       DistBackend.AUTO (or "auto"): MPI when the library has it
                    and the process was started by an MPI launcher (mpirun,
                    mpiexec, srun), MPI is initialised, or comm is given;
                    else SINGLE, a job of size 1.  MPI ("mpi"):
                    Unsupported without MPI.
      timeout_s     deadline of every collective, seconds (default 60; 0:
                    none, a lost peer then hangs the job as MPI does)
      bucket_bytes  gradient all-reduce bucket (default 4 MiB; 4 KiB .. 1 GiB)
      comm          an mpi4py intra-communicator (duplicated; the host keeps
                    MPI's lifetime), or None for MPI_COMM_WORLD (MPI is
                    initialised if nobody has, and finalised when the last
                    such job closes: MPI allows one initialisation per
                    process, so keep one Dist for the run)

    Creating and closing are collective (every rank).  .options holds the
    options as given (backend as requested).  Optimizers attached with
    Optimizer.set_dist (or Optimizer(..., dist=)) keep the Dist alive;
    closing it detaches them, and their next training step raises
    ClosedHandleError rather than silently training alone."""

    _free_fn = "pt_dist_free"
    _kind = "distributed job"

    def __init__(self, backend=None, timeout_s=None, bucket_bytes=None, comm=None):
        _require("Dist")
        o = DistOptions.new()
        if backend is not None:
            o.backend = DistBackend.coerce(backend, "backend", "Dist")
        if timeout_s is not None:
            o.timeout_s = _real(timeout_s, "timeout_s", "Dist")
        if bucket_bytes is not None:
            o.bucket_bytes = _whole(bucket_bytes, "bucket_bytes", "Dist", 0, 2**64 - 1)
        addr = _comm_address(comm)
        out = out_handle()
        check(lib.pt_dist_create(ctypes.byref(out), addr, ctypes.byref(o)), "pt_dist_create")
        super().__init__(out.value)
        self.options = o.to_dict()
        self.options["backend"] = DistBackend.wrap(self.options["backend"])
        self._comm = comm
        self._optimizers = weakref.WeakSet()
        _live[:] = [r for r in _live if r() is not None]
        _live.append(weakref.ref(self))

    def _close(self, reason):
        if self._p is None:
            return
        # Never leave an optimizer pointing at a freed job: detach it (its
        # next step raises ClosedHandleError, see Optimizer._check_dist).
        for opt in list(self._optimizers):
            if opt._p is not None and getattr(opt, "_dist", None) is self:
                lib.pt_optimizer_set_dist(opt._p, None)
        self._optimizers = weakref.WeakSet()
        super()._close(reason)

    def _attach(self, optimizer):
        self._optimizers.add(optimizer)

    # -- the job ------------------------------------------------------------------
    @property
    def rank(self):
        """This process's rank, 0 .. size - 1."""
        return lib.pt_dist_rank(self._ptr)

    @property
    def size(self):
        """The number of ranks of the job."""
        return lib.pt_dist_size(self._ptr)

    @property
    def backend(self):
        """The DistBackend the job runs on (SINGLE or MPI: auto resolved)."""
        return DistBackend(lib.pt_dist_get_backend(self._ptr))

    @property
    def comm_seconds(self):
        """Seconds this rank has spent inside collectives since the job was
        created (transfers, and waiting for the slowest rank)."""
        return lib.pt_dist_comm_seconds(self._ptr)

    def shard(self, n):
        """This rank's share of n global items (rows, or GRPO groups) as a
        range: contiguous in rank order, the first n % size ranks taking one
        more (not a collective).  Fewer items than ranks is InvalidArgument
        naming both numbers."""
        n = _whole(n, "n", "Dist.shard", -2**63, 2**63 - 1)
        begin, count = ctypes.c_int64(), ctypes.c_int64()
        check(lib.pt_dist_shard(ctypes.byref(begin), ctypes.byref(count), self._ptr, n),
              "pt_dist_shard")
        return range(begin.value, begin.value + count.value)

    # -- collectives --------------------------------------------------------------
    def allreduce_sum(self, values, numpy=None):
        """The sum over the ranks of values: a number (returns a float), or a
        sequence or numpy array of numbers, the same length on every rank
        (returns a list, or a float64 numpy array of the input's shape as
        use_numpy() / numpy= says).  Summed in rank order, so the result is
        the same bits on every rank."""
        p = self._ptr
        fn = "Dist.allreduce_sum"
        shape = None
        if is_numpy(values):
            a = _util._np.ascontiguousarray(values, dtype=_util._np.float64)
            shape = a.shape
            scalar = a.ndim == 0
            n = int(a.size)
            buf = (ctypes.c_double * max(n, 1)).from_buffer_copy(a.tobytes() or bytes(8))
        elif isinstance(values, numbers.Real) and not isinstance(values, bool):
            scalar, n = True, 1
            buf = (ctypes.c_double * 1)(float(values))
        elif isinstance(values, (str, bytes, bytearray, bool)) or values is None:
            raise invalid("values must be a number or a sequence of numbers, not %r" % (values,), fn)
        else:
            scalar = False
            try:
                vals = [_real(v, "values[%d]" % i, fn) for i, v in enumerate(values)]
            except TypeError:
                raise invalid("values must be a number or a sequence of numbers, not %r"
                              % (values,), fn) from None
            n = len(vals)
            buf = (ctypes.c_double * max(n, 1))(*vals)
        check(lib.pt_dist_allreduce_sum(p, buf, n), "pt_dist_allreduce_sum")
        if scalar:
            return buf[0]
        if want_numpy(numpy):
            out = _util._np.array(buf[:n], dtype=_util._np.float64)
            return out.reshape(shape) if shape is not None else out
        return buf[:n]

    def broadcast(self, data, root=0):
        """root's bytes on every rank: data is a bytes-like object on the
        root and ignored elsewhere (None will do); returns bytes.  The length
        travels first, so the other ranks need not know it.  A root without
        a bytes-like object makes every rank raise InvalidArgument."""
        fn = "Dist.broadcast"
        root = _whole(root, "root", fn, -2**31, 2**31 - 1)
        p = self._ptr
        payload, kind = None, None
        if self.rank == root:
            try:
                payload = memoryview(data).cast("B").tobytes()
            except TypeError:
                kind = type(data).__name__
        length = ctypes.c_uint64(len(payload) if payload is not None else _NO_DATA)
        check(lib.pt_dist_broadcast(p, ctypes.byref(length), 8, root), "pt_dist_broadcast")
        if length.value == _NO_DATA:
            raise invalid("the root, rank %d, gave no bytes-like object to broadcast%s"
                          % (root, " (a %s)" % kind if kind else ""), fn)
        n = length.value
        buf = (ctypes.c_char * max(n, 1))()
        if payload:
            ctypes.memmove(buf, payload, n)
        check(lib.pt_dist_broadcast(p, buf, n, root), "pt_dist_broadcast")
        return buf.raw[:n]

    def barrier(self):
        """Wait until every rank has arrived (under the deadline)."""
        check(lib.pt_dist_barrier(self._ptr), "pt_dist_barrier")

    def agree(self, status=0):
        """Agree on the outcome of something every rank did (e.g. rank 0
        saving a checkpoint).  status: 0 or None (this rank succeeded), a
        Status or PT_E* code, a posttrain.Error (its status), or any other
        exception (status PT_ECALLBACK).  Returns -1 when every rank
        succeeded.  Otherwise raises as pt_dist_agree returns: on a rank
        that failed, the exception it passed (or, for a status, the class
        of that status); on the others PeerError naming the lowest failed
        rank and its status, with that rank as .first_failed."""
        fn = "Dist.agree"
        exc = None
        if status is None:
            code = 0
        elif isinstance(status, Error):
            exc, code = status, int(status.status)
        elif isinstance(status, BaseException):
            exc, code = status, int(Status.ECALLBACK)
        else:
            try:
                if isinstance(status, bool):
                    raise TypeError
                code = operator.index(status)
            except TypeError:
                raise invalid("status must be 0, a posttrain.Status, a PT_E* code or an "
                              "exception, not %r" % (status,), fn) from None
            if not -2**31 <= code < 2**31:
                raise invalid("status %d is not 0 or a PT_E* status" % code, fn)
        p = self._ptr
        first = ctypes.c_int(-1)
        if exc is None:
            lib.pt_clear_error()   # this rank's message: the status's own description
        st = lib.pt_dist_agree(ctypes.byref(first), p, code)
        if st == 0:
            return first.value
        message = text(lib.pt_last_error()) or status_str(st)
        if exc is not None and st == code:
            raise exc
        e = error_for(st, message, "pt_dist_agree")
        e.first_failed = first.value if first.value >= 0 else None
        raise e

    def check_replicas(self, optimizer):
        """Silent data corruption check: every rank hashes its trainable
        parameters and optimizer's state; returns this rank's hash (an int)
        when all agree.  Otherwise ChecksumError on every rank, naming the
        rank(s) whose hash differs from the majority (with 2 ranks: both)
        and the step; .bad_rank is the first such rank, or None when no
        majority names one (2 ranks that disagree), .hash this rank's."""
        from .train import Optimizer
        if not isinstance(optimizer, Optimizer):
            raise invalid("check_replicas takes a posttrain.Optimizer, not %r" % (optimizer,),
                          "Dist.check_replicas")
        bad, h = ctypes.c_int(-1), ctypes.c_uint64(0)
        st = lib.pt_dist_check_replicas(ctypes.byref(bad), ctypes.byref(h), self._ptr,
                                        optimizer._ptr)
        if st == 0:
            return h.value
        message = text(lib.pt_last_error())
        e = error_for(st, message, "pt_dist_check_replicas")
        e.bad_rank = bad.value if bad.value >= 0 else None
        e.hash = h.value if st == Status.ECHECKSUM else None
        raise e

    def __repr__(self):
        if self._p is None:
            return "<posttrain.Dist closed>"
        return "<posttrain.Dist rank %d of %d>" % (self.rank, self.size)
