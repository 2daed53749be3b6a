"""The goodput accountant (posttrain/goodput.h, docs/goodput.md): the share of
wall time that ends in kept training progress.

Available when the loaded library has the "goodput" feature
(posttrain.has_feature("goodput")).

    gp = pt.Goodput()                        # the wall clock starts
    with gp.section(pt.TimeKind.STARTUP):
        model = pt.Model.load(...)
    for step in range(1, steps + 1):
        with gp.section("step"):
            opt.sft_step(...)
        gp.step_done()
        if step % save_every == 0:
            with gp.section(pt.TimeKind.SAVE):
                gp.commit()                  # the checkpoint holds the steps so far
                pt.save_checkpoint(path, model, opt, {"goodput": json.loads(gp.to_json())})
    gp.commit()
    r = gp.report()                          # r.goodput, r.seconds[pt.TimeKind.SAVE], ...

    # resumed from that checkpoint, in a new process:
    host = pt.load_checkpoint(path, model, opt)
    gp.restore(host["goodput"], lost_seconds=...)   # time since the checkpoint, if known
"""

import collections
import contextlib
import ctypes
import json
import numbers
import operator

from ._handle import Handle, out_handle
from ._lib import GoodputReport as _CReport
from ._lib import has_feature, lib
from ._util import cstr
from .enums import Status, TimeKind
from .errors import check, error_for, invalid

__all__ = ["Goodput", "GoodputReport", "young_daly_interval"]

# Goodput.report(): the fields of pt_goodput_report; seconds is a dict
# {TimeKind: seconds} over every kind, in the enum's order.
GoodputReport = collections.namedtuple(
    "GoodputReport", ["wall", "seconds", "pending", "goodput", "steps_kept", "steps_lost"])


def _require(function):
    if not has_feature("goodput"):
        raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain has no goodput accountant "
                        "(feature goodput, posttrain/goodput.h)", function)


def _number(v, what, function):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise invalid("%s must be a number, not %r" % (what, v), function)
    return float(v)


class Goodput(Handle):
    """A goodput accountant (pt_goodput).  Its wall clock starts when it is
    created; time is attributed to a TimeKind by add(kind, seconds) or by
    timing a section (begin/end, or `with gp.section(kind):`).  STEP and
    GENERATE time is pending until commit() (kept) or rollback() (LOST).
    Kinds are TimeKind members, their names ("save") or C values."""

    _free_fn = "pt_goodput_free"
    _kind = "goodput accountant"

    def __init__(self):
        _require("Goodput")
        out = out_handle()
        check(lib.pt_goodput_create(ctypes.byref(out)), "pt_goodput_create")
        super().__init__(out.value)

    def add(self, kind, seconds):
        """Attribute `seconds` (finite, 0 .. 1e12) to `kind` (not OTHER)."""
        k = TimeKind.coerce(kind, "kind", "Goodput.add")
        s = _number(seconds, "seconds", "Goodput.add")
        check(lib.pt_goodput_add(self._ptr, int(k), s), "pt_goodput_add")

    def begin(self, kind):
        """Start timing a section of `kind` (StateError while one is open)."""
        k = TimeKind.coerce(kind, "kind", "Goodput.begin")
        check(lib.pt_goodput_begin(self._ptr, int(k)), "pt_goodput_begin")

    def end(self):
        """Add the open section's time to its kind (StateError when none is open)."""
        check(lib.pt_goodput_end(self._ptr), "pt_goodput_end")

    @contextlib.contextmanager
    def section(self, kind):
        """`with gp.section(TimeKind.SAVE):` times the block (also when it
        raises) with begin/end."""
        self.begin(kind)
        try:
            yield self
        finally:
            self.end()

    def step_done(self):
        """One more pending training step (kept at commit, lost at rollback)."""
        check(lib.pt_goodput_step_done(self._ptr), "pt_goodput_step_done")

    def commit(self):
        """Pending STEP and GENERATE time and steps become kept: call it when a
        checkpoint holding them is complete, and at the end of a run."""
        check(lib.pt_goodput_commit(self._ptr), "pt_goodput_commit")

    def rollback(self):
        """Pending STEP and GENERATE time becomes LOST and pending steps lost:
        call it when going back to the last checkpoint."""
        check(lib.pt_goodput_rollback(self._ptr), "pt_goodput_rollback")

    def report(self):
        """GoodputReport(wall, seconds, pending, goodput, steps_kept,
        steps_lost) as of now (pt_goodput_get): seconds[TimeKind.STEP] and
        [GENERATE] are committed time, [OTHER] the wall time nothing else
        accounts for; goodput = committed STEP + GENERATE over wall (NaN when
        wall is 0)."""
        r = _CReport.new()
        check(lib.pt_goodput_get(ctypes.byref(r), self._ptr), "pt_goodput_get")
        seconds = {k: r.seconds[int(k)] for k in TimeKind}
        return GoodputReport(r.wall, seconds, r.pending, r.goodput, r.steps_kept, r.steps_lost)

    def to_json(self):
        """The totals as of now as a JSON object (str), for a checkpoint's host
        JSON (pt_goodput_to_json).  Nothing is committed: call commit() first."""
        p = ctypes.c_void_p()
        check(lib.pt_goodput_to_json(ctypes.byref(p), self._ptr), "pt_goodput_to_json")
        try:
            return ctypes.string_at(p.value).decode("utf-8")
        finally:
            lib.pt_free(p)

    def restore(self, saved, lost_seconds=0.0, lost_steps=0):
        """Add the totals of a to_json() document (a str, bytes, or the dict it
        parses to) as pt_goodput_restore does: its pending time and steps, and
        lost_seconds / lost_steps, count as lost.  FormatError naming the key
        for a malformed document; StateError for a second restore; nothing
        changed on error."""
        if isinstance(saved, dict):
            try:
                saved = json.dumps(saved, allow_nan=False)
            except ValueError as e:
                raise invalid("saved: %s" % e, "Goodput.restore") from None
        text = cstr(saved, "saved", allow_none=False)
        s = _number(lost_seconds, "lost_seconds", "Goodput.restore")
        if isinstance(lost_steps, bool):
            raise invalid("lost_steps must be an int, not bool", "Goodput.restore")
        try:
            n = operator.index(lost_steps)
        except TypeError:
            raise invalid("lost_steps must be an int, not %r" % (lost_steps,),
                          "Goodput.restore") from None
        if not -2**63 <= n < 2**63:
            raise invalid("lost_steps %d is out of range" % n, "Goodput.restore")
        check(lib.pt_goodput_restore(self._ptr, text, s, n), "pt_goodput_restore")


def young_daly_interval(checkpoint_seconds, mtbf_seconds):
    """The working time between checkpoints that maximises goodput (Young-Daly,
    pt_checkpoint_interval_young_daly): sqrt(2 * checkpoint_seconds *
    mtbf_seconds), both finite and > 0 (InvalidArgument otherwise)."""
    _require("young_daly_interval")
    c = _number(checkpoint_seconds, "checkpoint_seconds", "young_daly_interval")
    m = _number(mtbf_seconds, "mtbf_seconds", "young_daly_interval")
    out = ctypes.c_double()
    check(lib.pt_checkpoint_interval_young_daly(ctypes.byref(out), c, m),
          "pt_checkpoint_interval_young_daly")
    return out.value
