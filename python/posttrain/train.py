"""Optimizers, the SFT step, datasets and checkpoints (posttrain/train.h)."""

import collections
import ctypes
import json

from ._handle import Handle, out_handle
from ._lib import (Batch_, DatasetOptions, DatasetStats, LoraOptions, OptimizerOptions, PlotOptions, SftStats,
                   StepStats, has_feature, lib)
from ._util import cstr, flat_float, fspath, int32_array, shaped
from .enums import OptimizerType, Schedule, SkipReason
from .enums import Status
from .errors import ClosedHandleError, Unsupported, check, invalid
from .model import Batch, Context, Model

__all__ = ["Optimizer", "Dataset", "sft_step", "save_checkpoint", "load_checkpoint", "load_checkpoint_model",
           "schedule_factor", "StepResult", "SftResult", "TrainingBatch", "EvalLoss",
           "DatasetPosition"]

# The statistics of a step: the fields of pt_step_stats / pt_sft_stats.
StepResult = collections.namedtuple("StepResult", StepStats.field_names())
SftResult = collections.namedtuple("SftResult", SftStats.field_names())
# Dataset.next_batch(), .eval_loss() and .position.
TrainingBatch = collections.namedtuple("TrainingBatch", ["batch", "weights"])
EvalLoss = collections.namedtuple("EvalLoss", ["loss", "tokens"])
DatasetPosition = collections.namedtuple("DatasetPosition", ["epoch", "cursor"])

_OPT_FIELDS = OptimizerOptions.field_names()
_DATA_FIELDS = DatasetOptions.field_names()
# Optimizer option fields holding a named enum.
_OPT_ENUMS = {"type": OptimizerType, "schedule": Schedule}


def _result(cls, s):
    vals = {f: getattr(s, f) for f in cls._fields}
    if "skip_reason" in vals:
        vals["skip_reason"] = SkipReason.wrap(vals["skip_reason"])
    return cls(**vals)


def _apply(struct, fields, kwargs, what, enums=None):
    for k, v in kwargs.items():
        if k not in fields:
            raise invalid("unknown %s option %r (known: %s)" % (what, k, ", ".join(fields)))
        if enums and k in enums:
            v = enums[k].coerce(v, k)
        try:
            setattr(struct, k, v)
        except TypeError as e:
            raise invalid("%s option %r: %s" % (what, k, e)) from None


def _options_dict(o, enums):
    d = o.to_dict()
    for k, enum_type in enums.items():
        d[k] = enum_type.wrap(d[k])
    return d


def optimizer_defaults():
    """pt_optimizer_options_init()'s defaults as a dict (type and schedule as
    OptimizerType / Schedule members)."""
    return _options_dict(OptimizerOptions.new(), _OPT_ENUMS)


class Optimizer(Handle):
    """AdamW or SGD over a model's trainable parameters, with a schedule.

    Optimizer(model, type=OptimizerType.ADAMW|SGD (or "adamw"|"sgd"), lr=...,
    beta1, beta2, eps, momentum, weight_decay, decay_norms_and_biases,
    schedule=Schedule.CONSTANT|LINEAR|COSINE (or "constant"|"linear"|
    "cosine"), warmup_steps, total_steps, min_lr_ratio, max_grad_norm); unset
    fields keep pt_optimizer_options_init()'s defaults.  Keeps the model
    alive; closed when the model closes or its LoRA adapters change.
    dist: a posttrain.Dist to train data-parallel (see set_dist)."""

    _free_fn = "pt_optimizer_free"
    _kind = "optimizer"
    _needs_table = True
    _dist = None

    def __init__(self, model, dist=None, **options):
        o = OptimizerOptions.new()
        _apply(o, _OPT_FIELDS, options, "optimizer", _OPT_ENUMS)
        if dist is not None:
            _check_dist_arg(dist, "Optimizer")
        out = out_handle()
        check(lib.pt_optimizer_create(ctypes.byref(out), model._ptr, ctypes.byref(o)),
              "pt_optimizer_create")
        super().__init__(out.value)
        self.model = model
        self.options = _options_dict(o, _OPT_ENUMS)
        model._add_dependent(self)
        if dist is not None:
            self.set_dist(dist)

    def set_dist(self, dist):
        """Make sft_step and grpo_step data-parallel over a posttrain.Dist
        (pt_optimizer_set_dist): each rank passes its share of the global
        batch, the loss is normalised over the whole global batch and the
        gradients are summed across the ranks (step() after a backward of
        your own is not: it applies this rank's gradients alone).
        None detaches.  The optimizer keeps the Dist alive; closing the Dist
        first detaches it, and the next step raises ClosedHandleError."""
        if dist is not None:
            _check_dist_arg(dist, "Optimizer.set_dist")
        check(lib.pt_optimizer_set_dist(self._ptr, dist._ptr if dist is not None else None),
              "pt_optimizer_set_dist")
        self._dist = dist
        if dist is not None:
            dist._attach(self)

    @property
    def dist(self):
        """The attached posttrain.Dist, or None."""
        return self._dist

    def _check_dist(self):
        """ClosedHandleError when the attached Dist was closed: a step then
        would train this rank alone, and the replicas would drift apart."""
        d = self._dist
        if d is not None and d.closed:
            raise ClosedHandleError(
                Status.ESTATE, "the optimizer's distributed job is closed (%s): attach an open "
                "posttrain.Dist with set_dist(), or set_dist(None) to train in this process alone"
                % (d._closed_reason or "it was closed"), "Optimizer")

    def step(self):
        """Apply one update from the accumulated gradients, then zero them."""
        s = StepStats.new()
        check(lib.pt_optimizer_step(ctypes.byref(s), self._ptr), "pt_optimizer_step")
        return _result(StepResult, s)

    @property
    def lr(self):
        """The learning rate the next step will use."""
        return lib.pt_optimizer_lr(self._ptr)

    @property
    def step_count(self):
        """Steps applied so far."""
        return lib.pt_optimizer_step_count(self._ptr)

    def sft_step(self, batches, weights=None, context=None):
        """See posttrain.sft_step."""
        return sft_step(self, batches, weights, context)

    def grpo_step(self, buffer, context=None, **options):
        """See posttrain.grpo_step."""
        from .grpo import grpo_step
        return grpo_step(self, buffer, context, **options)


def _check_dist_arg(dist, function):
    if not has_feature("dist"):
        raise Unsupported(Status.EUNSUPPORTED, "the loaded libposttrain has no data-parallel "
                          "layer (feature dist)", function)
    from .dist import Dist
    if not isinstance(dist, Dist):
        raise invalid("dist must be a posttrain.Dist or None, not %r" % (dist,), function)
    dist._ptr   # ClosedHandleError when closed


def sft_step(optimizer, batches, weights=None, context=None):
    """One optimizer step over one Batch or a list of micro-batches (gradient
    accumulation): loss -sum(w*log p)/sum(w) over every target token.
    weights: None (1 on every target), or one entry per micro-batch, each
    None or B*T floats.  context defaults to the model's internal context
    sized for the largest micro-batch.  Returns SftResult."""
    if isinstance(batches, Batch):
        batches = [batches]
        # One batch: its weights (flat, per row, or numpy), or [those weights], or None.
        if isinstance(weights, (list, tuple)) and len(weights) == 1 and weights[0] is None:
            weights = None
        if weights is not None:
            weights = [weights]
    batches = list(batches)
    if not batches:
        raise invalid("sft_step needs at least one batch", "sft_step")
    for b in batches:
        if not isinstance(b, Batch):
            raise invalid("sft_step takes posttrain.Batch objects, not %s" % type(b).__name__)
    optimizer._check_dist()
    model = optimizer.model
    if context is None:
        big = Batch.__new__(Batch)
        big.batch = max(b.batch for b in batches)
        big.seq = max(b.seq for b in batches)
        context = model._context_for(big)
    elif not isinstance(context, Context):
        raise invalid("context must be a posttrain.Context")
    n = len(batches)
    arr = (type(batches[0]._c) * n)()
    for i, b in enumerate(batches):
        arr[i] = b._c
    wp = None
    keep = []
    if weights is not None:
        weights = list(weights)
        if len(weights) != n:
            raise invalid("%d weight entries for %d micro-batches" % (len(weights), n))
        wp = (ctypes.POINTER(ctypes.c_float) * n)()
        for i, (b, w) in enumerate(zip(batches, weights)):
            if w is None:
                continue
            if isinstance(w, ctypes.Array):
                fa = w
            else:
                fa = flat_float(w, b.ntokens, "weights[%d]" % i)
            keep.append(fa)
            wp[i] = ctypes.cast(fa, ctypes.POINTER(ctypes.c_float))
    s = SftStats.new()
    check(lib.pt_sft_step(ctypes.byref(s), optimizer._ptr, context._ptr, arr, wp, n),
          "pt_sft_step")
    return _result(SftResult, s)


def schedule_factor(schedule, step, warmup_steps=0, total_steps=0, min_lr_ratio=0.0):
    """Learning-rate multiplier of a schedule (a Schedule or its name) at a 0-based step."""
    f = ctypes.c_double()
    check(lib.pt_schedule_factor(ctypes.byref(f),
                                 Schedule.coerce(schedule, "schedule", "schedule_factor"),
                                 int(step), int(warmup_steps), int(total_steps),
                                 float(min_lr_ratio)), "pt_schedule_factor")
    return f.value


# ---- metrics --------------------------------------------------------------------

def plot_metrics(metrics_path, svg_path, width=None, height=None, title=None):
    """Draw a metrics JSONL file (what `posttrain sft` / `posttrain grpo` write:
    rows with a numeric "step") as an SVG at svg_path (pt_plot_metrics_svg):
    one panel per series present (loss, eval_loss, reward, kl, accuracy, lr),
    nulls left out.  width (default 720) and height (default 170 per panel
    plus 40) are pixels; title defaults to the metrics path.  The file is
    replaced atomically: on an error (NotFound, FormatError naming the line,
    InvalidArgument "no numeric series in ...") it is left as it was."""
    if not has_feature("plot"):
        raise Unsupported(Status.EUNSUPPORTED, "this libposttrain has no plot feature", "plot_metrics")
    o = PlotOptions.new()
    if width is not None:
        o.width = _whole(width, "width")
    if height is not None:
        o.height = _whole(height, "height")
    t = cstr(title, "title")
    o.title = t
    check(lib.pt_plot_metrics_svg(fspath(metrics_path, "metrics_path"), fspath(svg_path, "svg_path"),
                                  ctypes.byref(o)), "pt_plot_metrics_svg")


def _whole(v, what):
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid("plot_metrics: %s must be an int, not %s" % (what, type(v).__name__))
    if not -2**31 <= v < 2**31:
        raise invalid("plot_metrics: %s %d is out of range" % (what, v))
    return v


# ---- checkpoints ---------------------------------------------------------------

def save_checkpoint(path, model, optimizer, host_data=None):
    """Write a new checkpoint directory (trainable tensors, optimizer state,
    and host_data: any JSON-serialisable value, returned by load_checkpoint).
    An existing directory is never overwritten (StateError)."""
    hj = cstr(json.dumps(host_data), "host_data") if host_data is not None else None
    check(lib.pt_checkpoint_save(model._ptr, optimizer._ptr, hj, fspath(path)),
          "pt_checkpoint_save")


def load_checkpoint(path, model, optimizer):
    """Verify every checksum, then restore weights, moments and counters.
    Returns the host_data saved with it (None if none)."""
    out = ctypes.c_void_p()
    check(lib.pt_checkpoint_load(ctypes.byref(out), model._ptr, optimizer._ptr, fspath(path)),
          "pt_checkpoint_load")
    if not out.value:
        return None
    try:
        text = ctypes.string_at(out.value).decode("utf-8")
    finally:
        lib.pt_free(out)
    return json.loads(text) if text else None


def load_checkpoint_model(path, base=None, load_tokenizer=True):
    """The trained model of a run's checkpoint (OUT/checkpoints/step-N of
    posttrain sft or grpo, or of the trainers here), rebuilt as `posttrain
    export --checkpoint` does: the base model it records (or base), the
    adapters of a LoRA run added with the recorded rank, alpha and targets
    (pt_checkpoint_host_model), then the saved tensors (checksums verified)."""
    out, rec, lo, lora = ctypes.c_void_p(), ctypes.c_void_p(), LoraOptions.new(), ctypes.c_bool()
    check(lib.pt_checkpoint_read_host(ctypes.byref(out), fspath(path)), "pt_checkpoint_read_host")
    try:
        if out.value:
            check(lib.pt_checkpoint_host_model(ctypes.byref(rec), ctypes.byref(lo), ctypes.byref(lora),
                                               out.value), "pt_checkpoint_host_model")
    finally:
        lib.pt_free(out)
    try:
        base = base if base is not None else (ctypes.string_at(rec.value).decode() if rec.value else None)
    finally:
        lib.pt_free(rec)
    if base is None:
        raise invalid("checkpoint %s does not record its base model: give base=" % (path,),
                      "load_checkpoint_model")
    m = Model.load(base, load_tokenizer=load_tokenizer)
    try:
        if lora.value:
            check(lib.pt_model_add_lora(m._ptr, ctypes.byref(lo)), "pt_model_add_lora")
        check(lib.pt_checkpoint_load_weights(m._ptr, fspath(path)), "pt_checkpoint_load_weights")
    except BaseException:
        m.close()
        raise
    return m


# ---- datasets --------------------------------------------------------------------

def dataset_defaults():
    """pt_dataset_options_init()'s defaults as a dict."""
    d = DatasetOptions.new().to_dict()
    if d["chat_template"] is not None:
        d["chat_template"] = d["chat_template"].decode()
    return d


class Dataset(Handle):
    """Tokenized SFT examples with a training/evaluation split that hands out
    batches (pt_dataset).  Options as in pt_dataset_options: max_length,
    completion_only, skip_bad_rows, add_eos, chat_template, eval_fraction,
    batch_size, pack, shuffle, seed."""

    _free_fn = "pt_dataset_free"
    _kind = "dataset"

    @staticmethod
    def _options(options):
        o = DatasetOptions.new()
        keep = cstr(options.get("chat_template"), "chat_template")
        _apply(o, _DATA_FIELDS, {k: v for k, v in options.items() if k != "chat_template"},
               "dataset")
        o.chat_template = keep
        return o, keep

    @classmethod
    def create(cls, **options):
        """An empty dataset; add examples with add()."""
        o, keep = cls._options(options)
        out = out_handle()
        check(lib.pt_dataset_create(ctypes.byref(out), ctypes.byref(o)), "pt_dataset_create")
        d = cls(out.value)
        d.batch_size = o.batch_size
        return d

    @classmethod
    def load_jsonl(cls, path, tokenizer=None, **options):
        """Read a JSONL file ({"text"}, {"prompt","completion"}, {"messages"},
        {"input_ids","loss_mask"} rows), tokenizing with tokenizer (a
        Tokenizer, or a Model whose tokenizer to use)."""
        if isinstance(tokenizer, Model):
            tokenizer = tokenizer.tokenizer
        o, keep = cls._options(options)
        out = out_handle()
        check(lib.pt_dataset_load_jsonl(ctypes.byref(out), fspath(path),
                                        tokenizer._ptr if tokenizer is not None else None,
                                        ctypes.byref(o)), "pt_dataset_load_jsonl")
        d = cls(out.value)
        d.batch_size = o.batch_size
        return d

    def add(self, ids, loss_mask=None):
        """Add one tokenized example (loss_mask: 0/1 per token, None = all 1)."""
        arr, n = int32_array(ids, "ids")
        m = None
        if loss_mask is not None:
            mm = [1 if v else 0 for v in loss_mask]
            if len(mm) != n:
                raise invalid("loss_mask has %d entries for %d ids" % (len(mm), n), "Dataset.add")
            m = (ctypes.c_uint8 * max(n, 1))(*mm)
        check(lib.pt_dataset_add(self._ptr, arr, m, n), "pt_dataset_add")

    def next_batch(self, numpy=None):
        """TrainingBatch(batch, weights): the next training batch (a Batch,
        copied, so it stays valid) and its loss weights (B x T floats: nested
        lists, or a numpy array as use_numpy() / numpy= says)."""
        raw = Batch_.new()
        w = ctypes.POINTER(ctypes.c_float)()
        check(lib.pt_dataset_next_batch(ctypes.byref(raw), ctypes.byref(w), self._ptr),
              "pt_dataset_next_batch")
        cb = Batch._borrow(raw)
        n = cb.ntokens
        wa = (ctypes.c_float * n).from_buffer_copy(ctypes.string_at(w, 4 * n))
        return TrainingBatch(cb, shaped(wa, (cb.batch, cb.seq), numpy))

    def eval_loss(self, context=None, model=None):
        """EvalLoss(loss, tokens) over the evaluation split.  Pass a Context, or a
        Model to use its internal context sized for this dataset."""
        if context is None:
            if model is None:
                raise invalid("eval_loss needs a context or a model", "Dataset.eval_loss")
            big = Batch.__new__(Batch)
            big.batch = self.batch_size
            # batches are as long as their longest row, which fits the model
            big.seq = min(self.max_seq, model.config["max_position_embeddings"])
            context = model._context_for(big)
        loss, tokens = ctypes.c_double(), ctypes.c_double()
        check(lib.pt_dataset_eval_loss(ctypes.byref(loss), ctypes.byref(tokens), self._ptr,
                                       context._ptr), "pt_dataset_eval_loss")
        return EvalLoss(loss.value, tokens.value)

    @property
    def max_seq(self):
        """Longest row a batch can hold (what a context must be sized for)."""
        v = ctypes.c_int()
        check(lib.pt_dataset_max_seq(ctypes.byref(v), self._ptr), "pt_dataset_max_seq")
        return v.value

    @property
    def stats(self):
        """The dataset's counts (pt_dataset_stats) as a dict."""
        s = DatasetStats.new()
        check(lib.pt_dataset_get_stats(ctypes.byref(s), self._ptr), "pt_dataset_get_stats")
        return s.to_dict()

    @property
    def position(self):
        """DatasetPosition(epoch, cursor) in the training stream; assign it
        (or any (epoch, cursor) pair) to resume."""
        e, c = ctypes.c_int64(), ctypes.c_int64()
        check(lib.pt_dataset_get_position(ctypes.byref(e), ctypes.byref(c), self._ptr),
              "pt_dataset_get_position")
        return DatasetPosition(e.value, c.value)

    @position.setter
    def position(self, value):
        e, c = value
        check(lib.pt_dataset_set_position(self._ptr, int(e), int(c)), "pt_dataset_set_position")
