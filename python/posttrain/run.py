"""A training run's directory, state, checkpoints and metrics: the library's
run layer (include/posttrain/run.h, feature "run"), shared with the CLI.

    with Run("out", kind="grpo", start="auto") as run:
        state, extra = run.load(model, optimizer) if run.resume_dir else (RunState.new(), {})
        ...                                         # the host's own loop
        run.log({"step": step, "loss": loss})       # one metrics row
        run.save(model, optimizer, state, {"num_generations": 8})

The directory is the CLI's: DIR/checkpoints/step-NNNNNNNN (complete
checkpoints; retention keep_last / keep_every), DIR/metrics.jsonl (one row
a step, "time" added; trimmed to the resumed step on resume), the lock
DIR/.posttrain.lock.  The run state (RunState: step, optimizer_steps,
epoch, cursor, rows, seed, order_rng, rng) and the host's own fields are
the checkpoint's host JSON (docs/run-directory.md).  GRPOTrainer and
SFTTrainer keep their run in one of these.
"""

import ctypes
import json
import logging
import math
import os

from ._handle import Handle
from ._lib import LOG_FN, RunInput, RunOptions, RunState, has_feature, lib
from ._util import fspath
from .enums import RunAction, RunStart, TimeKind
from .errors import Status, check, error_for, invalid

__all__ = ["Run", "RunState", "run_state_to_json", "run_state_from_json", "check_output",
           "host_model_fields"]

# The run's notes (pt_run_options.notes: --resume auto's choice, the resume
# and the goodput its relaunch lost, each checkpoint, save_auto's interval),
# the lines the CLI prints after "posttrain CMD: ", on the logger "posttrain".
_notes_logger = logging.getLogger("posttrain")


def _note(level, text, user):
    _notes_logger.log(logging.WARNING if level <= 1 else logging.INFO, "%s",
                      text.decode("utf-8", "replace") if text else "")


_NOTES = LOG_FN(_note)   # alive as long as the module
_SAVE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)   # pt_run_save_fn


def _require(what):
    if not has_feature("run"):
        raise error_for(Status.EUNSUPPORTED, "%s needs the library's run layer (feature \"run\"); "
                        "this libposttrain does not have it" % what, what)


def _take_string(ptr):
    """The text of a pt_free-owned char * (and free it); None for NULL."""
    if not ptr.value:
        return None
    try:
        return ctypes.string_at(ptr.value).decode("utf-8")
    finally:
        lib.pt_free(ptr)


def _finite(v):
    """JSON has no NaN or infinity: they are written as null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _extra_text(extra):
    if extra is None:
        return None
    if not isinstance(extra, dict):
        raise invalid("the host's fields must be a dict, not %s" % type(extra).__name__, "Run")
    return json.dumps(_finite(extra), allow_nan=False).encode()


def run_state_to_json(state, kind, extra=None):
    """The checkpoint host JSON text of a RunState, its kind and the host's
    own fields (pt_run_state_to_json)."""
    _require("run_state_to_json")
    out = ctypes.c_void_p()
    check(lib.pt_run_state_to_json(ctypes.byref(out), ctypes.byref(state), kind.encode(),
                                   _extra_text(extra)), "pt_run_state_to_json")
    return _take_string(out)


def host_model_fields(model_path, model):
    """The host fields every trainer records of the model it trains
    (pt_run_host_model): {"model": model_path resolved ("" for None),
    "lora": {"rank", "alpha", "targets" bitmask} when it has adapters}."""
    _require("host_model_fields")
    out = ctypes.c_void_p()
    check(lib.pt_run_host_model(ctypes.byref(out), os.fsencode(model_path) if model_path else None,
                                model._ptr), "pt_run_host_model")
    return json.loads(_take_string(out))


def run_state_from_json(text):
    """(RunState, kind, extra dict) of a checkpoint's host JSON text
    (pt_run_state_from_json; reads what the CLI wrote before the run layer)."""
    _require("run_state_from_json")
    state = RunState.new()
    kind, extra = ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.pt_run_state_from_json(ctypes.byref(state), ctypes.byref(kind), ctypes.byref(extra),
                                     text.encode() if isinstance(text, str) else text),
          "pt_run_state_from_json")
    k, e = _take_string(kind), _take_string(extra)
    return state, k, json.loads(e) if e else {}


def check_output(out_name, out, input_name, input_path, tree=False):
    """InvalidArgument (naming both) when the output `out` is, holds or lies
    inside the input `input_path` (with tree, any file of that directory):
    the check pt_run_open makes of its own outputs (pt_run_check_output).
    Nothing is checked when either path is None."""
    _require("check_output")
    if out is None or input_path is None:
        return
    inp = RunInput(str(input_name).encode(), fspath(input_path), bool(tree))
    check(lib.pt_run_check_output(str(out_name).encode(), fspath(out), ctypes.byref(inp)),
          "pt_run_check_output")


class Run(Handle):
    """A run directory held by this process (pt_run).

    Run(dir, kind, start="new", resume_from=None, metrics=None, inputs=(),
        keep_last=0, keep_every=0, save_every=0, save_auto=False,
        mtbf_seconds=0, names=None, dist=None, goodput=None, check_every=0,
        on_mismatch="rollback", max_rollbacks=3)

    start: "new" (a directory holding an earlier run is refused:
    ExistsError), "overwrite", "auto" (the latest complete checkpoint, or a
    fresh start) or "from" (resume_from, a checkpoint directory); a
    RunStart member works too.  inputs: (name, path) or (name, path, tree)
    the outputs must not overlap.  names: how messages name (dir, metrics,
    resume_from), default the trainers' argument names.  dist: a Dist (every
    rank opens the run together; rank 0 holds the directory); goodput: a
    Goodput whose totals the checkpoints carry and a resume restores (both
    borrowed: they must outlive the run).  check_every, on_mismatch,
    max_rollbacks: the replica checks' cadence and policy (check()).  The directory and the metrics
    file stay locked until close().  What the run does that a user wants told
    (the CLI's notes: the checkpoint resumed and the goodput lost, each
    checkpoint) is logged on the logger "posttrain" (INFO)."""

    _free_fn = "pt_run_close"
    _kind = "run"

    def __init__(self, dir, kind, start="new", resume_from=None, metrics=None, inputs=(),
                 keep_last=0, keep_every=0, save_every=0, save_auto=False, mtbf_seconds=0.0,
                 names=None, dist=None, goodput=None, check_every=0, on_mismatch="rollback",
                 max_rollbacks=3):
        _require("Run")
        o = RunOptions.new()
        keep = []    # what the options point at, alive until pt_run_open returns
        o.dir = fspath(dir)
        if metrics is not None:
            o.metrics = fspath(metrics)
        o.start = int(RunStart.coerce(start, "start", "Run"))
        if resume_from is not None:
            o.resume_from = fspath(resume_from)
        o.kind = str(kind).encode()
        ins = []
        for item in inputs:
            name, path = item[0], item[1]
            tree = bool(item[2]) if len(item) > 2 else False
            if path is None:
                continue
            ins.append(RunInput(str(name).encode(), fspath(path), tree))
        if ins:
            arr = (RunInput * len(ins))(*ins)
            keep.append(arr)
            o.inputs = ctypes.cast(arr, ctypes.POINTER(RunInput))
            o.n_inputs = len(ins)
        dn, mn, rn = names or ("output_dir", "metrics", "resume_from_checkpoint")
        o.dir_name, o.metrics_name, o.resume_name = dn.encode(), mn.encode(), rn.encode()
        o.keep_last, o.keep_every = int(keep_last or 0), int(keep_every or 0)
        o.save_every, o.save_auto = int(save_every or 0), bool(save_auto)
        o.mtbf_seconds = float(mtbf_seconds)
        o.check_every, o.max_rollbacks = int(check_every or 0), int(max_rollbacks)
        o.on_mismatch = int(RunAction.coerce(on_mismatch, "on_mismatch", "Run"))
        o.notes = ctypes.cast(_NOTES, ctypes.c_void_p).value
        o.save_name, o.mismatch_name = b"save_auto", b"on_mismatch"
        # borrowed handles: kept referenced as long as the run
        self._borrowed = (dist, goodput)
        if dist is not None:
            o.dist = dist._ptr
        if goodput is not None:
            o.goodput = goodput._ptr
        self.kind = str(kind)
        ptr = ctypes.c_void_p()
        check(lib.pt_run_open(ctypes.byref(ptr), ctypes.byref(o)), "pt_run_open")
        super().__init__(ptr.value)

    # -- where things are ------------------------------------------------------------
    def _text(self, fn):
        s = getattr(lib, fn)(self._ptr)
        return os.fsdecode(s) if s is not None else None

    @property
    def dir(self):
        return self._text("pt_run_dir")

    @property
    def metrics_path(self):
        return self._text("pt_run_metrics_path")

    @property
    def resume_dir(self):
        """The checkpoint this run continues from, or None (a fresh start)."""
        return self._text("pt_run_resume_dir")

    @property
    def last_checkpoint(self):
        return self._text("pt_run_last_checkpoint")

    # -- checkpoints -----------------------------------------------------------------
    def load(self, model, optimizer):
        """Resume: weights, optimizer, and (RunState, the host's own fields as
        a dict) from resume_dir; the metrics rows past its step are dropped
        (lost_seconds, lost_steps)."""
        state = RunState.new()
        extra = ctypes.c_void_p()
        check(lib.pt_run_load(ctypes.byref(state), ctypes.byref(extra), self._ptr, model._ptr,
                              optimizer._ptr), "pt_run_load")
        e = _take_string(extra)
        return state, json.loads(e) if e else {}

    def resumed(self, step):
        """The host applied load()'s state: log the resume's notes ("resumed
        at step STEP from DIR", the goodput its relaunch lost)."""
        check(lib.pt_run_resumed(self._ptr, int(step)), "pt_run_resumed")

    def save(self, model, optimizer, state, extra=None):
        """The checkpoint DIR/checkpoints/step-NNNNNNNN of state.step, then
        retention, then the metrics file synced; returns its path."""
        check(lib.pt_run_save(self._ptr, model._ptr, optimizer._ptr,
                              ctypes.byref(state), _extra_text(extra)), "pt_run_save")
        return self.last_checkpoint

    def trim_metrics(self, step):
        """Keep the metrics rows up to `step`, as load() does (after going
        back to the checkpoint of `step`); lost_seconds and lost_steps count
        the rows dropped."""
        check(lib.pt_run_trim_metrics(self._ptr, int(step)), "pt_run_trim_metrics")

    # -- jobs ----------------------------------------------------------------------
    @property
    def rank(self):
        return int(lib.pt_run_rank(self._ptr))

    @property
    def size(self):
        return int(lib.pt_run_size(self._ptr))

    def check_replicas(self, optimizer):
        """Compare every rank's parameters and optimizer state (collective);
        ChecksumError naming the ranks that differ."""
        bad = ctypes.c_int(-1)
        check(lib.pt_run_check_replicas(ctypes.byref(bad), self._ptr, optimizer._ptr),
              "pt_run_check_replicas")

    def rollback(self, model, optimizer):
        """Back to the last complete checkpoint (collective): (RunState, host
        dict) as load(); NotFound when there is none yet (start again)."""
        state = RunState.new()
        extra = ctypes.c_void_p()
        check(lib.pt_run_rollback(ctypes.byref(state), ctypes.byref(extra), self._ptr, model._ptr,
                                  optimizer._ptr), "pt_run_rollback")
        e = _take_string(extra)
        return state, json.loads(e) if e else {}

    @property
    def lost_seconds(self):
        return float(lib.pt_run_lost_seconds(self._ptr))

    @property
    def lost_steps(self):
        return int(lib.pt_run_lost_steps(self._ptr))

    @property
    def relaunch_seconds(self):
        """After load(): the wall time from the replaced run's last metrics
        row to this run's open (the stall before it died and the relaunch);
        goodput counts it as lost."""
        return float(lib.pt_run_relaunch_seconds(self._ptr))

    # -- metrics ---------------------------------------------------------------------
    def log(self, row):
        """Append one metrics row (a dict of JSON values; NaN and infinities
        are written as null); the library adds "time"."""
        if not isinstance(row, dict):
            raise invalid("a metrics row is a dict, not %s" % type(row).__name__, "Run.log")
        text = json.dumps(_finite(row), allow_nan=False, ensure_ascii=False)
        check(lib.pt_run_log(self._ptr, text.encode("utf-8")), "pt_run_log")

    @property
    def rows(self):
        """Metrics rows written by this run."""
        return int(lib.pt_run_rows(self._ptr))

    @property
    def metrics_error(self):
        """Why the metrics file could not be written (after a failed
        log()), or None."""
        e = lib.pt_run_metrics_error(self._ptr)
        return e.decode("utf-8", "replace") if e is not None else None

    # -- the interval ----------------------------------------------------------------
    def note_step(self, seconds):
        check(lib.pt_run_note_step(self._ptr, float(seconds)),
              "pt_run_note_step")

    def save_due(self, step, total):
        return bool(lib.pt_run_save_due(self._ptr, int(step), int(total)))

    @property
    def save_every(self):
        """The interval in steps (save_auto: 0 until chosen)."""
        return int(lib.pt_run_save_every(self._ptr))

    @property
    def last_save_seconds(self):
        return float(lib.pt_run_last_save_seconds(self._ptr))

    @property
    def mean_step_seconds(self):
        return float(lib.pt_run_mean_step_seconds(self._ptr))

    # -- fault handling and goodput of a job (run_fault.c) ------------------------------
    def section(self, kind):
        """End the open goodput section and open one of `kind` (a
        TimeKind name or value; None: none)."""
        k = -1 if kind is None else int(_time_kind(kind))
        check(lib.pt_run_section(self._ptr, k), "pt_run_section")

    def step_time(self, seconds, wait=0.0, generate=0.0):
        """One step done: seconds in all, wait of it at collectives,
        generate of it generating; the rest is step time."""
        check(lib.pt_run_step_time(self._ptr, float(seconds), float(wait), float(generate)),
              "pt_run_step_time")

    def report(self, step):
        """The end of a run: commit, then the goodput row {"step": ..,
        "goodput": {...}} as a dict (the CLI's last metrics row)."""
        out = ctypes.c_void_p()
        check(lib.pt_run_report_json(ctypes.byref(out), None, self._ptr, int(step)),
              "pt_run_report_json")
        return json.loads(_take_string(out))

    def agree(self, code):
        """Every rank's code in (0: success): (agreed, first_failed), the
        same on every rank (collective)."""
        agreed, first = ctypes.c_int(0), ctypes.c_int(-1)
        check(lib.pt_run_agree(ctypes.byref(agreed), ctypes.byref(first), self._ptr, int(code)),
              "pt_run_agree")
        return agreed.value, first.value

    def check_due(self, step):
        return bool(lib.pt_run_check_due(self._ptr, int(step)))

    def check(self, optimizer):
        """The replica check with the run's policy (collective): (action,
        bad_rank, status), action "continue", "rollback" or "stop"."""
        action, bad = ctypes.c_int(2), ctypes.c_int(-1)
        st = lib.pt_run_check(ctypes.byref(action), ctypes.byref(bad), self._ptr, optimizer._ptr)
        if st not in (0, int(Status.ECHECKSUM)):
            check(st, "pt_run_check")
        return RunAction(action.value).name.lower(), bad.value, st

    def step_end(self, optimizer, step, total, save):
        """The end of step `step` of `total` (pt_run_step_end, collective):
        when a checkpoint or a replica check is due, or at the last step,
        the replicas are compared first, then save() (the host's checkpoint,
        e.g. run.save(...)) when one is due, in their goodput sections.
        Returns the action, "continue", "rollback" (the host goes back:
        rollback()) or "stop"; an exception of save() is raised again."""
        raised = []

        def call(_user):
            try:
                save()
                return 0
            except BaseException as e:   # raised again below, not across C
                raised.append(e)
                return 1
        cb = _SAVE_FN(call)
        action = ctypes.c_int(2)
        st = lib.pt_run_step_end(ctypes.byref(action), self._ptr, optimizer._ptr, int(step), int(total),
                                 ctypes.cast(cb, ctypes.c_void_p), None)
        if raised:
            raise raised[0]
        if st not in (0, int(Status.ECHECKSUM)):
            check(st, "pt_run_step_end")
        return RunAction(action.value).name.lower()

    @property
    def rollbacks(self):
        return int(lib.pt_run_rollbacks(self._ptr))

    @property
    def last_step(self):
        """The step of the last complete checkpoint, or -1."""
        return int(lib.pt_run_last_step(self._ptr))


def _time_kind(kind):
    return TimeKind.coerce(kind, "kind", "Run.section")


def resume_trainer(trainer, path, who, fresh_start):
    """The run directory of a trainer (SFTTrainer, GRPOTrainer) at its first
    train(): opened and held until close() (a fresh run by `fresh_start`, or
    resumed from its latest checkpoint for path True, the run layer's
    "resume auto", a fresh start when the directory holds no run, or from
    the checkpoint path), the checkpoint loaded and applied
    (trainer._apply); the metrics rows after the resumed step are dropped.
    Without a run directory, or with the run held already, path (True: the
    latest checkpoint) is only loaded (trainer.load_checkpoint)."""
    path = path or None
    if trainer.output_dir is None or trainer._run is not None or (path is None
                                                                and not trainer._run_wanted):
        if path is True:
            path = trainer.latest_checkpoint()
        if path is not None:
            trainer.load_checkpoint(path)
        return
    _require(who)
    start = "auto" if path is True else "from" if path is not None else fresh_start
    trainer._run = trainer._open_run(start, None if path is True else path)
    if trainer._run.resume_dir is not None:
        state, extra = trainer._run.load(trainer.model, trainer.optimizer)
        trainer._apply(state, extra, trainer._run.resume_dir)
        trainer._run.resumed(state.step)
