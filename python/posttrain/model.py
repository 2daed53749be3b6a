"""Models, contexts and batches (posttrain/model.h, modelio.h, lora.h)."""

import array
import collections
import contextlib
import ctypes
import json
import os
import shutil
import tempfile
import weakref

from . import safetensors as _st
from ._handle import Handle, out_handle
from ._lib import (Batch_, EvalOptions, GgufExportOptions, LoraOptions, MemoryEstimate, MemoryEstimateOptions,
                   ModelConfig, ModelDirInfo, ModelLoadOptions, ModelSaveOptions, TensorInfo, has_feature, lib)
from ._lib import EvalResult as _CEvalResult
from ._util import as_rows, cstr, flat_float, flat_int32, fspath, shaped, want_numpy
from .enums import Arch, GgufType, RopeType, SpmScores, Status
from .errors import StateError, check, error_for, invalid

__all__ = [
    "Model", "Context", "Batch", "ForwardResult", "EvalResult",
    "default_config", "config_from_json", "load_config", "config_to_json",
    "config_num_params", "validate_config", "inspect_dir", "memory_estimate", "dir_info_json", "dir_info_text",
    "LORA_TARGETS",
]

LORA_TARGETS = {"q": 1, "k": 2, "v": 4, "o": 8, "gate": 16, "up": 32, "down": 64,
                "q_proj": 1, "k_proj": 2, "v_proj": 4, "o_proj": 8, "gate_proj": 16,
                "up_proj": 32, "down_proj": 64, "all_attn": 0x0f, "all": 0x7f}

_CONFIG_FIELDS = ModelConfig.field_names()
# Config fields holding a named enum: reported as members, accepted as names.
_CONFIG_ENUMS = {"arch": Arch, "rope_type": RopeType}

ForwardResult = collections.namedtuple("ForwardResult", ["logprobs", "logits"])
EvalResult = collections.namedtuple("EvalResult", ["loss", "tokens", "row_loss", "row_tokens"])


# ---- configurations -------------------------------------------------------------

def _struct_to_config(c):
    d = c.to_dict()
    for f, enum_type in _CONFIG_ENUMS.items():
        d[f] = enum_type.wrap(d[f])
    return d


def _config_struct(config):
    """A filled pt_model_config from a dict of its fields (names as in the C
    struct; arch and rope_type may be members of Arch / RopeType or their
    names), from a Hugging Face config.json
    dict (recognised by model_type or architectures), or a ModelConfig."""
    if isinstance(config, ModelConfig):
        return config
    if not isinstance(config, dict):
        raise invalid("config must be a dict, not %s" % type(config).__name__)
    if "model_type" in config or "architectures" in config:
        return _config_from_json_struct(json.dumps(config))
    c = ModelConfig.new()
    for k, v in config.items():
        if k not in _CONFIG_FIELDS:
            raise invalid("unknown model config field %r (known: %s)"
                          % (k, ", ".join(_CONFIG_FIELDS)), "config")
        if k in _CONFIG_ENUMS:
            v = _CONFIG_ENUMS[k].coerce(v, k, "config")
        if v is None and k.endswith("_token_id"):
            v = -1
        try:
            setattr(c, k, v)
        except TypeError as e:
            raise invalid("config field %r: %s" % (k, e), "config") from None
    # As in Hugging Face configs: head_dim defaults to hidden_size / heads.
    if "head_dim" not in config and c.num_attention_heads > 0 and c.head_dim == 0:
        c.head_dim = c.hidden_size // c.num_attention_heads
    return c


def _config_from_json_struct(text):
    c = ModelConfig.new()
    b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    check(lib.pt_model_config_from_json(ctypes.byref(c), b, len(b)), "pt_model_config_from_json")
    return c


def default_config():
    """pt_model_config_init()'s defaults as a dict."""
    c = ModelConfig.new()
    return _struct_to_config(c)


def config_from_json(text):
    """Parse a Hugging Face config.json (str, bytes or dict) into a config dict."""
    if isinstance(text, dict):
        text = json.dumps(text)
    return _struct_to_config(_config_from_json_struct(text))


def load_config(path):
    """Read DIR/config.json (or the file itself) into a config dict."""
    c = ModelConfig.new()
    check(lib.pt_model_config_load(ctypes.byref(c), fspath(path)), "pt_model_config_load")
    return _struct_to_config(c)


def config_to_json(config):
    """The Hugging Face config.json text for a configuration."""
    c = _config_struct(config)
    out = ctypes.c_void_p()
    check(lib.pt_model_config_to_json(ctypes.byref(out), ctypes.byref(c)), "pt_model_config_to_json")
    try:
        return ctypes.string_at(out.value).decode("utf-8")
    finally:
        lib.pt_free(out)


def config_num_params(config):
    c = _config_struct(config)
    n = ctypes.c_uint64()
    check(lib.pt_model_config_num_params(ctypes.byref(n), ctypes.byref(c)),
          "pt_model_config_num_params")
    return n.value


def validate_config(config):
    """Raise (ConfigError, InvalidArgument, ...) if the configuration is inconsistent."""
    c = _config_struct(config)
    check(lib.pt_model_config_validate(ctypes.byref(c)), "pt_model_config_validate")


def inspect_dir(path):
    """What a model directory (or GGUF file) holds, from config.json and the
    safetensors headers (or the GGUF metadata) alone (pt_model_dir_inspect),
    as a dict."""
    info = ModelDirInfo.new()
    check(lib.pt_model_dir_inspect(ctypes.byref(info), fspath(path)), "pt_model_dir_inspect")
    return {
        "config": _struct_to_config(info.config),
        "num_params": info.num_params,
        "num_files": info.num_files,
        "num_tensors": info.num_tensors,
        "weight_bytes": info.weight_bytes,
        "dtypes": {info.dtypes[i].name.decode(): {"tensors": info.dtypes[i].tensors,
                                                  "bytes": info.dtypes[i].bytes}
                   for i in range(info.num_dtypes)},
        "sharded": info.sharded,
        "has_tokenizer": info.has_tokenizer,
        "has_generation_config": info.has_generation_config,
        "weights_status": Status.wrap(info.weights_status),
        "weights_problem": info.weights_problem.decode("utf-8", "replace"),
        "gguf_version": info.gguf_version,
        "quantised": info.quantised,
    }


def _estimate(config, context, batch, seq, lora_rank):
    c = _config_struct(config)
    o = MemoryEstimateOptions.new()
    o.context, o.batch, o.seq, o.lora_rank = context, batch, seq, lora_rank
    e = MemoryEstimate.new()
    check(lib.pt_model_config_memory_estimate(ctypes.byref(e), ctypes.byref(c), ctypes.byref(o)),
          "pt_model_config_memory_estimate")
    return e


def memory_estimate(config, context=0, batch=4, seq=0, lora_rank=16):
    """The memory (bytes, FP32) a configuration needs for inference, full
    fine-tuning and LoRA, as posttrain info estimates it
    (pt_model_config_memory_estimate); context and seq 0: min(max positions,
    2048) and min(max positions, 256).  A dict of the estimate's fields."""
    e = _estimate(config, context, batch, seq, lora_rank)
    return {name: getattr(e, name) for name, _ in MemoryEstimate._fields_ if name != "size"}


def dir_info_json(path, context=0, batch=4, seq=0, lora_rank=16):
    """The JSON document `posttrain info --json PATH` prints (a str):
    pt_model_dir_inspect and the memory estimate through
    pt_model_dir_info_to_json."""
    return _dir_info("pt_model_dir_info_to_json", path, context, batch, seq, lora_rank)


def dir_info_text(path, context=0, batch=4, seq=0, lora_rank=16):
    """The text `posttrain info PATH` prints (a str), through
    pt_model_dir_info_to_text."""
    return _dir_info("pt_model_dir_info_to_text", path, context, batch, seq, lora_rank)


def _dir_info(formatter, path, context, batch, seq, lora_rank):
    info = ModelDirInfo.new()
    check(lib.pt_model_dir_inspect(ctypes.byref(info), fspath(path)), "pt_model_dir_inspect")
    e = _estimate(info.config, context, batch, seq, lora_rank)
    out = ctypes.c_void_p()
    check(getattr(lib, formatter)(ctypes.byref(out), None, fspath(path), ctypes.byref(info), ctypes.byref(e)),
          formatter)
    try:
        return ctypes.string_at(out.value).decode("utf-8")
    finally:
        lib.pt_free(out)

# ---- batches ------------------------------------------------------------------

class Batch:
    """B rows of T tokens for a forward or a training step (a pt_batch whose
    arrays this object owns).

    input_ids: a list of ids (one row) or a list of equal-length rows (or a
    1-D/2-D numpy array); targets, positions, segments alike, or None
    (targets None: no token has a target; positions None: 0..T-1).
    temperature: log-probabilities, entropies, loss and gradients are those
    of softmax(logits / temperature) (default 1; the logits stay raw)."""

    def __init__(self, input_ids, targets=None, positions=None, segments=None, temperature=1.0):
        rows, squeeze = as_rows(input_ids, "input_ids")
        B = len(rows)
        T = len(rows[0])
        if T == 0:
            raise invalid("input_ids rows are empty", "Batch")
        self.batch, self.seq, self.squeeze = B, T, squeeze
        self._ids = flat_int32(rows, B, T, "input_ids")
        self._tgt = self._opt(targets, "targets")
        self._pos = self._opt(positions, "positions")
        self._seg = self._opt(segments, "segments")
        self._c = Batch_.new()
        self._c.batch, self._c.seq = B, T
        self._c.temperature = float(temperature)
        I32P = ctypes.POINTER(ctypes.c_int32)
        self._c.input_ids = ctypes.cast(self._ids, I32P)
        for field, arr in (("targets", self._tgt), ("positions", self._pos),
                           ("segments", self._seg)):
            setattr(self._c, field, ctypes.cast(arr, I32P) if arr is not None else None)

    def _opt(self, x, what):
        if x is None:
            return None
        rows, _ = as_rows(x, what)
        return flat_int32(rows, self.batch, self.seq, what)

    @classmethod
    def next_token(cls, sequences, pad_id=0):
        """A language-modelling batch: each sequence s predicts s[1:] from
        s[:-1]; shorter rows are padded with pad_id (inputs) and -1 (targets).
        A single flat sequence gives a one-row batch whose results are
        squeezed to one row."""
        rows, squeeze = as_rows(sequences, "sequences")
        rows = [list(r) for r in rows]
        if any(len(r) < 2 for r in rows):
            raise invalid("every sequence needs at least 2 tokens", "Batch.next_token")
        T = max(len(r) for r in rows) - 1
        ids = [r[:-1] + [pad_id] * (T - len(r) + 1) for r in rows]
        tgt = [r[1:] + [-1] * (T - len(r) + 1) for r in rows]
        b = cls(ids, tgt)
        b.squeeze = squeeze   # one flat sequence in: results for one row out
        return b

    @classmethod
    def _borrow(cls, cb):
        """Copy a pt_batch the library owns (e.g. from pt_dataset_next_batch)."""
        self = cls.__new__(cls)
        B, T = cb.batch, cb.seq
        n = B * T
        self.batch, self.seq, self.squeeze = B, T, False

        def cp(p):
            if not p:
                return None
            return (ctypes.c_int32 * n).from_buffer_copy(ctypes.string_at(p, 4 * n))
        self._ids, self._tgt = cp(cb.input_ids), cp(cb.targets)
        self._pos, self._seg = cp(cb.positions), cp(cb.segments)
        self._c = Batch_.new()
        self._c.batch, self._c.seq = B, T
        self._c.temperature = cb.temperature
        I32P = ctypes.POINTER(ctypes.c_int32)
        for field, arr in (("input_ids", self._ids), ("targets", self._tgt),
                           ("positions", self._pos), ("segments", self._seg)):
            setattr(self._c, field, ctypes.cast(arr, I32P) if arr is not None else None)
        return self

    def _rows(self, arr):
        if arr is None:
            return None
        flat = list(arr)
        return [flat[i * self.seq:(i + 1) * self.seq] for i in range(self.batch)]

    @property
    def input_ids(self):
        return self._rows(self._ids)

    @property
    def targets(self):
        return self._rows(self._tgt)

    @property
    def positions(self):
        return self._rows(self._pos)

    @property
    def segments(self):
        return self._rows(self._seg)

    @property
    def ntokens(self):
        return self.batch * self.seq

    def __repr__(self):
        return "<posttrain.Batch %dx%d>" % (self.batch, self.seq)


def _as_batch(x, targets=None, positions=None, segments=None):
    if isinstance(x, Batch):
        if targets is not None or positions is not None or segments is not None:
            raise invalid("pass either a Batch or input_ids with targets/positions/segments")
        return x
    return Batch(x, targets, positions, segments)


def _out_shape(b, *rest):
    return ((b.seq,) if b.squeeze else (b.batch, b.seq)) + rest


# ---- contexts -------------------------------------------------------------------

class Context(Handle):
    """Activations of one forward pass for up to max_batch x max_seq tokens
    (pt_context).  Keeps its model alive; closed automatically when the model
    closes or its LoRA adapters change."""

    _free_fn = "pt_context_free"
    _kind = "context"
    _needs_table = True

    def __init__(self, model, max_batch, max_seq, _internal=False):
        out = out_handle()
        check(lib.pt_context_create(ctypes.byref(out), model._ptr, int(max_batch), int(max_seq)),
              "pt_context_create")
        super().__init__(out.value)
        # The model's own context refers back weakly (the model closes it), so
        # the two form no reference cycle and free by reference counting.
        self.model = weakref.proxy(model) if _internal else model
        self.max_batch, self.max_seq = int(max_batch), int(max_seq)
        self._last = None
        model._add_dependent(self)
        if getattr(model, "_grad_ckpt", False):
            self.gradient_checkpointing = True

    @property
    def gradient_checkpointing(self):
        """Gradient checkpointing (pt_context_set_gradient_checkpointing): keep
        only each layer's input for the backward and recompute the rest, a
        tenth of the activation memory for one more forward, the same
        results.  Off by default; contexts of a model whose
        gradient_checkpointing is set start with it on."""
        return bool(lib.pt_context_get_gradient_checkpointing(self._ptr))

    @gradient_checkpointing.setter
    def gradient_checkpointing(self, on):
        check(lib.pt_context_set_gradient_checkpointing(self._ptr, bool(on)),
              "pt_context_set_gradient_checkpointing")

    @property
    def bf16_activations(self):
        """BF16 activations (pt_context_set_bf16_activations): keep the
        activations the backward reads as BF16 copies (as PyTorch autocast's
        saved tensors), about half the activation memory; the forward's
        results unchanged, the gradients those of the rounded activations.
        On by default for a context of a model whose base is frozen in BF16
        (bf16 "frozen", or True with LoRA adapters), off for full
        mixed-precision training (Model.bf16 on its own context follows);
        no effect under gradient checkpointing."""
        return bool(lib.pt_context_get_bf16_activations(self._ptr))

    @bf16_activations.setter
    def bf16_activations(self, on):
        check(lib.pt_context_set_bf16_activations(self._ptr, bool(on)),
              "pt_context_set_bf16_activations")

    @property
    def num_threads(self):
        """The thread count calls on this context use (pt_context_get_num_threads);
        set it (pt_context_set_num_threads: 0 follows set_num_threads()) to give
        each of several host threads its own share of the cores."""
        return int(lib.pt_context_get_num_threads(self._ptr))

    @num_threads.setter
    def num_threads(self, n):
        check(lib.pt_context_set_num_threads(self._ptr, int(n)), "pt_context_set_num_threads")

    def fits(self, b):
        return b.batch <= self.max_batch and b.seq <= self.max_seq

    def forward(self, input_ids, targets=None, positions=None, segments=None,
                logprobs=True, logits=True, numpy=None):
        """Forward pass: ForwardResult(logprobs [B,T] or None, logits [B,T,V]
        or None); rows squeezed away when input_ids was one flat row.
        logprobs are log p(target), 0 where the target is -1."""
        self._ptr   # a closed context says so before its model is asked anything
        b = _as_batch(input_ids, targets, positions, segments)
        n = b.ntokens
        V = self.model.config["vocab_size"]
        lp = (ctypes.c_float * n)() if logprobs else None
        lg = (ctypes.c_float * (n * V))() if logits else None
        check(lib.pt_model_forward(self._ptr, ctypes.byref(b._c), lp, lg), "pt_model_forward")
        self._last = b
        return ForwardResult(
            shaped(lp, _out_shape(b), numpy) if logprobs else None,
            shaped(lg, _out_shape(b, V), numpy) if logits else None)

    def backward(self, dlogprobs):
        """Backward of the last forward on this context from dLoss/dlogprob
        per token (B*T values, flat or nested); accumulates into the model's
        gradients."""
        if self._last is None:
            n = self.max_batch * self.max_seq
        else:
            n = self._last.ntokens
        d = flat_float(dlogprobs, n, "dlogprobs")
        check(lib.pt_model_backward(self._ptr, d), "pt_model_backward")

    def loss(self, input_ids, targets=None, weights=None, backward=False,
             positions=None, segments=None):
        """Mean cross-entropy -sum(w*lp)/sum(w) over tokens with a target
        (pt_model_loss); with backward=True the gradients accumulate too."""
        b = _as_batch(input_ids, targets, positions, segments)
        w = flat_float(weights, b.ntokens, "weights") if weights is not None else None
        out = ctypes.c_float()
        check(lib.pt_model_loss(self._ptr, ctypes.byref(b._c), w, bool(backward),
                                ctypes.byref(out)), "pt_model_loss")
        self._last = b
        return out.value


# ---- models ---------------------------------------------------------------------

class Model(Handle):
    """A Llama-family model (pt_model).

    Model.load(dir) reads a Hugging Face directory; Model.create(config,
    seed) builds a random one.  forward/logits/logprobs/loss run on an
    internal context sized for the largest batch seen so far; create a
    Context yourself for finer control."""

    _free_fn = "pt_model_free"
    _kind = "model"

    def __init__(self, ptr):
        super().__init__(ptr)
        self._ctx = None
        self._gen = None
        self._tok = None
        self._cfg = None

    # -- construction ------------------------------------------------------------
    @classmethod
    def create(cls, config, seed=0):
        """A model with parameters initialised from seed.  config: a dict of
        pt_model_config fields (missing ones keep pt_model_config_init's
        defaults, except head_dim: hidden_size / num_attention_heads when not
        given; arch "llama"/"qwen2"/"qwen3"/"mistral") or a Hugging Face
        config.json dict."""
        c = _config_struct(config)
        out = out_handle()
        check(lib.pt_model_create(ctypes.byref(out), ctypes.byref(c), int(seed)), "pt_model_create")
        return cls(out.value)

    def clone(self):
        """A new model with this one's configuration and a copy of its weights
        (pt_model_clone): BF16 off, no gradients, no LoRA, no tokenizer;
        Unsupported for a quantized or LoRA-adapted model or a frozen BF16 base."""
        out = out_handle()
        check(lib.pt_model_clone(ctypes.byref(out), self._ptr), "pt_model_clone")
        return Model(out.value)

    @classmethod
    def load(cls, path, load_tokenizer=True, bf16=False, quantize=None):
        """Load a Hugging Face model directory (config.json, safetensors
        weights, tokenizer.json when present and load_tokenizer), or a GGUF
        file (quantized ones too: the base is then frozen, LoRA only); bf16
        as the bf16 property takes it ("frozen" reads each matrix straight
        into BF16, so the whole FP32 copy never exists: the way to load a
        base for LoRA on BF16); quantize "q8_0" or "q4_0" quantizes the
        weights on load as llama-quantize --pure does."""
        o = ModelLoadOptions.new()
        o.load_tokenizer = bool(load_tokenizer)
        if bf16 == "frozen":
            o.bf16 = 2   # PT_BF16_FROZEN, streamed by the loader
        if quantize is not None:
            names = {"none": 0, "q4_0": 2, "q8_0": 8}
            if str(quantize).lower() not in names:
                raise ValueError("quantize must be one of none, q8_0, q4_0 (got %r)" % (quantize,))
            o.quantize = names[str(quantize).lower()]
        out = out_handle()
        check(lib.pt_model_load_dir(ctypes.byref(out), fspath(path), ctypes.byref(o)),
              "pt_model_load_dir")
        m = cls(out.value)
        if bf16:
            m.bf16 = bf16
        return m

    @classmethod
    def from_state_dict(cls, config, tensors):
        """A model from a configuration and {name: Tensor or (shape, values)}
        with Hugging Face names (as state_dict() returns), through a temporary
        directory."""
        d = tempfile.mkdtemp(prefix="posttrain-")
        try:
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write(config_to_json(config))
            _st.write(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
            return cls.load(d, load_tokenizer=False)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def _close(self, reason):
        # The internal context and generator first (held strongly here, so
        # this holds even when the garbage collector has cleared weak references).
        for h in (self._ctx, self._gen):
            if h is not None:
                h._close("its model was closed")
        self._ctx = None
        self._gen = None
        super()._close(reason)

    # -- properties ----------------------------------------------------------------
    @property
    def config(self):
        """The configuration as a dict (a copy)."""
        self._ptr
        if self._cfg is None:
            c = ModelConfig.new()
            check(lib.pt_model_get_config(ctypes.byref(c), self._ptr), "pt_model_get_config")
            self._cfg = _struct_to_config(c)
        return dict(self._cfg)

    @property
    def num_params(self):
        """Number of parameters of the base model (tied embeddings counted once;
        LoRA adapters are not counted)."""
        return lib.pt_model_param_count(self._ptr)

    _BF16_MODES = {False: 0, None: 0, "off": 0, True: 1, "on": 1, "frozen": 2}

    @property
    def bf16(self):
        """BF16 mode (pt_model_set_bf16): False (FP32), True (matrix weights
        get BF16 copies: a frozen base is kept only in BF16, and products are
        mixed precision where the CPU has BF16 arithmetic; TRL's bf16=True),
        or "frozen" (the whole base frozen and kept in BF16: a generator's or
        reference model)."""
        return {0: False, 1: True, 2: "frozen"}[lib.pt_model_get_bf16(self._ptr)]

    @bf16.setter
    def bf16(self, mode):
        key = mode.lower() if isinstance(mode, str) else mode
        if key not in self._BF16_MODES:
            raise invalid("bf16 must be False, True or \"frozen\", not %r" % (mode,),
                          "Model.bf16")
        check(lib.pt_model_set_bf16(self._ptr, self._BF16_MODES[key]), "pt_model_set_bf16")
        if self._ctx is not None and not self._ctx.closed:   # its own context follows
            mode = self._BF16_MODES[key]                      # the library's default rule
            self._ctx.bf16_activations = mode == 2 or (mode == 1 and self.has_lora)

    @property
    def source_dir(self):
        s = lib.pt_model_source_dir(self._ptr)
        return os.fsdecode(s) if s is not None else None

    @property
    def tokenizer(self):
        """The tokenizer loaded with the model (a borrowed handle, closed with
        the model), or None."""
        tok = self._tok() if self._tok is not None else None
        if tok is None or tok.closed:
            p = lib.pt_model_tokenizer(self._ptr)
            if not p:
                return None
            from .tokenizer import Tokenizer
            tok = Tokenizer._borrowed(p, self)
            self._tok = weakref.ref(tok)   # the tokenizer keeps the model alive, not back
        return tok

    @property
    def stop_ids(self):
        """The ids a completion of the model's text ends at, as `posttrain
        generate` stops (pt_model_stop_ids): the config's eos_token_id, then
        the tokenizer's eos id when that is another id in the vocabulary."""
        out, n = (ctypes.c_int32 * 2)(), ctypes.c_int()
        check(lib.pt_model_stop_ids(out, ctypes.byref(n), self._ptr), "pt_model_stop_ids")
        return list(out[:n.value])

    # -- saving --------------------------------------------------------------------
    def save(self, path, tokenizer_dir=None, copy_tokenizer=True):
        """Write the Hugging Face layout into path (config.json,
        model.safetensors F32, generation_config.json, tokenizer files)."""
        o = ModelSaveOptions.new()
        o.tokenizer_dir = fspath(tokenizer_dir, "tokenizer_dir") if tokenizer_dir else None
        o.copy_tokenizer = bool(copy_tokenizer)
        check(lib.pt_model_save_dir(self._ptr, fspath(path), ctypes.byref(o)), "pt_model_save_dir")

    def _gguf_options(self, type, name, function, spm_scores="converter"):
        if not has_feature("gguf"):
            raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain cannot write GGUF files "
                            "(feature gguf)", function)
        o = GgufExportOptions.new()
        o.type = int(GgufType.coerce(type, "type", function))
        o.name = cstr(name, "name")
        o.spm_scores = int(SpmScores.coerce(spm_scores, "spm_scores", function))
        return o

    def export_gguf(self, path, type="f32", name=None, spm_scores="converter"):
        """Write the model as the GGUF file llama.cpp's convert_hf_to_gguf.py
        writes for its directory (pt_model_export_gguf): type "f32", "f16" or
        "bf16" for the matrices (1-D tensors stay F32), name for general.name
        (default: derived from the source directory's name).  spm_scores, for
        a SentencePiece-style tokenizer.json: "converter" (every score -1000,
        as the converter writes; llama.cpp then tokenizes some texts
        differently from Hugging Face) or "merges" (scores from the merge
        ranks: llama.cpp tokenizes as Hugging Face).  LoRA adapters are merged
        into the written weights; the model needs its tokenizer (StateError
        otherwise)."""
        o = self._gguf_options(type, name, "Model.export_gguf", spm_scores)
        check(lib.pt_model_export_gguf(self._ptr, fspath(path), ctypes.byref(o)), "pt_model_export_gguf")

    def export_lora_gguf(self, path, type="f32", name=None):
        """Write the model's LoRA adapters as a GGUF LoRA adapter for
        llama.cpp's --lora (pt_lora_export_gguf; StateError without adapters).
        name: general.name (default: derived, as the converter derives it,
        from the PEFT directory the adapters were loaded from, else from the
        model's directory)."""
        o = self._gguf_options(type, name, "Model.export_lora_gguf")
        check(lib.pt_lora_export_gguf(self._ptr, fspath(path), ctypes.byref(o)), "pt_lora_export_gguf")

    def state_dict(self, numpy=None):
        """{name: Tensor} of the model's tensors as save() writes them (the
        C API has no tensor accessor, so this saves into a temporary directory
        and reads model.safetensors back).  Tensor.data is an array('f'), or
        each value is a numpy array with numpy=True."""
        self._ptr
        d = tempfile.mkdtemp(prefix="posttrain-")
        try:
            self.save(d, copy_tokenizer=False)
            tensors, _ = _st.read(os.path.join(d, "model.safetensors"))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if want_numpy(numpy):
            return {k: t.numpy() for k, t in tensors.items()}
        return tensors

    # -- the parameter tensors (live in the model; these methods copy) ------------------
    @property
    def num_trainable_params(self):
        """Parameters the optimizer updates: all of the base, or with LoRA
        adapters only theirs."""
        return lib.pt_model_trainable_param_count(self._ptr)

    def _tensor(self, name):
        t = TensorInfo.new()
        check(lib.pt_model_find_tensor_info(ctypes.byref(t), self._ptr, cstr(name, "name", False)),
              "pt_model_find_tensor_info")
        return t

    @staticmethod
    def _info_dict(t):
        shape = (t.shape[0],) if t.ndim == 1 else (t.shape[0], t.shape[1])
        return {"name": t.name.decode(), "shape": shape, "numel": t.numel,
                "trainable": bool(t.trainable), "adapter": bool(t.adapter),
                "no_decay": bool(t.no_decay)}

    def tensors(self):
        """[info] for every tensor, base first then LoRA adapters; each info is
        {name, shape, numel, trainable, adapter, no_decay}."""
        n = lib.pt_model_tensor_count(self._ptr)
        out = []
        for i in range(n):
            t = TensorInfo.new()
            check(lib.pt_model_tensor_info(ctypes.byref(t), self._ptr, i), "pt_model_tensor_info")
            out.append(self._info_dict(t))
        return out

    def tensor_info(self, name):
        """{name, shape, numel, trainable, adapter, no_decay} of one tensor
        (NotFound if the model has no such tensor)."""
        return self._info_dict(self._tensor(name))

    def _copy(self, t, ptr, numpy):
        shape = (t.shape[0],) if t.ndim == 1 else (t.shape[0], t.shape[1])
        data = array.array("f")
        data.frombytes(ctypes.string_at(ptr, t.numel * 4))
        tensor = _st.Tensor(shape, data)
        return tensor.numpy() if want_numpy(numpy) else tensor

    def get_tensor(self, name, numpy=None):
        """A copy of a tensor's values: a Tensor (shape, array('f')), or a
        numpy array with numpy=True."""
        t = self._tensor(name)
        if not t.data:   # a frozen base kept in BF16 or quantized: widened by the library
            buf = (ctypes.c_float * t.numel)()
            check(lib.pt_model_copy_tensor(buf, t.numel, self._ptr, cstr(name, "name", False)),
                  "pt_model_copy_tensor")
            return self._copy(t, ctypes.addressof(buf), numpy)
        return self._copy(t, t.data, numpy)

    def get_grad(self, name, numpy=None):
        """A copy of a tensor's accumulated gradient like get_tensor(), or None
        before the model has gradients."""
        t = self._tensor(name)
        return self._copy(t, t.grad, numpy) if t.grad else None

    def set_tensor(self, name, values):
        """Overwrite a tensor's values (flat or nested sequence, Tensor or numpy
        array with numel values).  Not while another thread runs a forward or
        backward on this model."""
        t = self._tensor(name)
        if isinstance(values, _st.Tensor):
            values = values.data
        if not t.data:
            raise StateError(Status.ESTATE, "%s is part of a frozen base kept in BF16 (set "
                             "model.bf16 = False first) or quantized (dequantize it first: "
                             "posttrain export --type f32)" % name, "Model.set_tensor")
        src = flat_float(values, t.numel, name)
        ctypes.memmove(t.data, src, t.numel * 4)
        lib.pt_model_weights_changed(self._ptr)   # BF16 copies follow

    # -- compute ---------------------------------------------------------------------
    @property
    def gradient_checkpointing(self):
        """Whether this model's contexts recompute activations in the backward
        (Context.gradient_checkpointing; Hugging Face's
        gradient_checkpointing_enable()).  Setting it applies to the contexts
        made from now on and to the model's own one."""
        return getattr(self, "_grad_ckpt", False)

    @gradient_checkpointing.setter
    def gradient_checkpointing(self, on):
        self._grad_ckpt = bool(on)
        if self._ctx is not None and not self._ctx.closed:
            self._ctx.gradient_checkpointing = self._grad_ckpt

    def gradient_checkpointing_enable(self):
        """Hugging Face's name for model.gradient_checkpointing = True."""
        self.gradient_checkpointing = True

    def context(self, max_batch, max_seq):
        """A new Context for up to max_batch x max_seq tokens."""
        return Context(self, max_batch, max_seq)

    def _context_for(self, b):
        ctx = self._ctx
        if ctx is not None and not ctx.closed and ctx.fits(b):
            return ctx
        mb, ms = b.batch, b.seq
        if ctx is not None and not ctx.closed:
            mb, ms = max(mb, ctx.max_batch), max(ms, ctx.max_seq)
            ctx.close()
        self._ctx = Context(self, mb, ms, _internal=True)
        return self._ctx

    def forward(self, input_ids, targets=None, positions=None, segments=None,
                logprobs=True, logits=True, numpy=None):
        """See Context.forward."""
        b = _as_batch(input_ids, targets, positions, segments)
        return self._context_for(b).forward(b, logprobs=logprobs, logits=logits, numpy=numpy)

    def logits(self, input_ids, positions=None, segments=None, numpy=None):
        """Raw logits [T, V] for one row or [B, T, V] for rows."""
        b = _as_batch(input_ids, None, positions, segments)
        return self._context_for(b).forward(b, logprobs=False, logits=True, numpy=numpy).logits

    def logprobs(self, input_ids, targets=None, positions=None, segments=None, numpy=None):
        """log p(target) per token (0 where the target is -1); input_ids may
        be a Batch carrying its targets."""
        b = _as_batch(input_ids, targets, positions, segments)
        return self._context_for(b).forward(b, logprobs=True, logits=False, numpy=numpy).logprobs

    def loss(self, input_ids, targets=None, weights=None, backward=False,
             positions=None, segments=None):
        """See Context.loss.  Batch.next_token(seqs) gives next-token targets."""
        b = _as_batch(input_ids, targets, positions, segments)
        return self._context_for(b).loss(b, weights=weights, backward=backward)

    def backward(self, dlogprobs):
        """Backward of the last forward made through this model's own methods."""
        if self._ctx is None or self._ctx.closed:
            raise error_for(Status.ESTATE, "no forward to run a backward for", "Model.backward")
        self._ctx.backward(dlogprobs)

    # -- generation (posttrain/generate.h) ---------------------------------------------
    def generator(self, max_batch, max_seq, kv_cache=None):
        """A new Generator (KV cache) for up to max_batch rows of max_seq tokens
        (kv_cache: "fp32", the default, or "bf16", as Generator)."""
        from .generate import Generator
        return Generator(self, max_batch, max_seq, kv_cache=kv_cache)

    def generate(self, prompts, max_new_tokens=None, tokenizer=None, add_special=True, **options):
        """Generator.generate on an internal generator sized for the call
        (grown as needed, like the internal context).  A str prompt (or a
        list of them) is encoded with tokenizer, default the model's own
        (with special tokens such as BOS unless add_special=False); without
        a tokenizer it is an InvalidArgument, never read as ids."""
        from .generate import Generator, _has_text, encode_prompts, generate_defaults
        if tokenizer is None and _has_text(prompts):
            tokenizer = self.tokenizer
        prompts = encode_prompts(prompts, tokenizer, add_special, "Model.generate")
        rows, _ = as_rows(prompts, "prompts")
        if max_new_tokens is None:
            max_new_tokens = generate_defaults()["max_new_tokens"]
        B = len(rows)
        T = max(len(list(r)) for r in rows) + int(max_new_tokens)
        g = self._gen
        if g is None or g.closed or g.max_batch < B or g.max_seq < T:
            if g is not None and not g.closed:
                B, T = max(B, g.max_batch), max(T, g.max_seq)
                g.close()
            g = self._gen = Generator(self, B, T, _internal=True)
        return g.generate(prompts, max_new_tokens=max_new_tokens, **options)

    def play_episodes(self, prompts, env, max_total_tokens, max_batch=None, **options):
        """Generator.play on an internal generator with room for max_batch
        rows (default: the number of prompts, at most 64) of max_total_tokens
        ids (grown as needed, like the internal context)."""
        from .generate import Generator
        rows, _ = as_rows(prompts, "prompts")
        B = int(max_batch) if max_batch is not None else min(len(rows), 64)
        T = int(max_total_tokens)
        g = self._gen
        if g is None or g.closed or g.max_batch < B or g.max_seq < T:
            if g is not None and not g.closed:
                B, T = max(B, g.max_batch), max(T, g.max_seq)
                g.close()
            g = self._gen = Generator(self, B, T, _internal=True)
        return g.play(prompts, env, max_total_tokens=max_total_tokens, **options)

    def zero_grad(self):
        check(lib.pt_model_zero_grad(self._ptr), "pt_model_zero_grad")

    def alloc_grads(self):
        check(lib.pt_model_alloc_grads(self._ptr), "pt_model_alloc_grads")

    def eval_jsonl(self, path, tokenizer=None, max_length=0, add_special=True):
        """Mean next-token loss over a JSONL file (pt_model_eval_jsonl).
        tokenizer defaults to the model's own."""
        if tokenizer is None:
            tokenizer = self.tokenizer
        o = EvalOptions.new()
        o.max_length = int(max_length)
        o.add_special = bool(add_special)
        out = ctypes.POINTER(_CEvalResult)()
        check(lib.pt_model_eval_jsonl(ctypes.byref(out), self._ptr,
                                      tokenizer._ptr if tokenizer is not None else None,
                                      fspath(path), ctypes.byref(o)), "pt_model_eval_jsonl")
        try:
            r = out.contents
            n = r.n_rows
            return EvalResult(r.loss, r.tokens, [r.row_loss[i] for i in range(n)],
                              [r.row_tokens[i] for i in range(n)])
        finally:
            lib.pt_eval_result_free(out)

    # -- LoRA ----------------------------------------------------------------------
    def _table_changed(self):
        self._ctx = None
        self._gen = None
        for d in list(self._dependents):
            if getattr(d, "_needs_table", False):
                d._close("the model's LoRA adapters changed (create contexts and optimizers "
                         "after adding, loading, merging or removing adapters)")

    def add_lora(self, rank=8, alpha=8.0, targets=("q", "v"), dropout=0.0, seed=0):
        """Attach LoRA adapters and freeze the base.  targets: names among
        q k v o gate up down (or q_proj ...), "all", "all_attn", or an int
        bitmask.  Closes this model's contexts and optimizers."""
        o = LoraOptions.new()
        o.rank, o.alpha, o.dropout, o.seed = int(rank), float(alpha), float(dropout), int(seed)
        o.targets = _lora_mask(targets)
        self._ptr
        self._table_changed()
        check(lib.pt_model_add_lora(self._ptr, ctypes.byref(o)), "pt_model_add_lora")

    @property
    def has_lora(self):
        return bool(lib.pt_model_has_lora(self._ptr))

    @property
    def lora_enabled(self):
        """True when the model has adapters and they are switched on.  Set it
        to False to compute the frozen base alone (e.g. GRPO's reference;
        a backward is refused meanwhile), True to switch them on again
        (pt_model_set_lora_enabled; StateError without adapters)."""
        if not has_feature("lora-switch"):
            return self.has_lora
        return bool(lib.pt_model_lora_enabled(self._ptr))

    @lora_enabled.setter
    def lora_enabled(self, enabled):
        if not has_feature("lora-switch"):
            raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain has no "
                            "pt_model_set_lora_enabled (feature lora-switch)", "Model.lora_enabled")
        check(lib.pt_model_set_lora_enabled(self._ptr, bool(enabled)),
              "pt_model_set_lora_enabled")

    @property
    def allow_long_context(self):
        """Whether contexts and generators may be longer than the model's
        max_position_embeddings (pt_model_allow_long_context; False by
        default, for rope scaling set it True)."""
        return bool(lib.pt_model_allow_long_context(self._ptr))

    @allow_long_context.setter
    def allow_long_context(self, allow):
        check(lib.pt_model_set_allow_long_context(self._ptr, bool(allow)),
              "pt_model_set_allow_long_context")

    @contextlib.contextmanager
    def lora_disabled(self):
        """with model.lora_disabled(): ... runs the block on the frozen base,
        switching the adapters on again however it ends."""
        self.lora_enabled = False
        try:
            yield self
        finally:
            if not self.closed:
                self.lora_enabled = True

    @property
    def lora(self):
        """The adapter settings as a dict, or None without adapters."""
        if not self.has_lora:
            return None
        o = LoraOptions.new()
        check(lib.pt_model_get_lora(ctypes.byref(o), self._ptr), "pt_model_get_lora")
        names = [n for n in ("q", "k", "v", "o", "gate", "up", "down") if o.targets & LORA_TARGETS[n]]
        return {"rank": o.rank, "alpha": o.alpha, "targets": names, "dropout": o.dropout,
                "seed": o.seed}

    def merge_lora(self):
        """Fold the adapters into the base (W += alpha/r * B A) and remove them."""
        self._ptr
        self._table_changed()
        check(lib.pt_model_merge_lora(self._ptr), "pt_model_merge_lora")

    def remove_lora(self):
        self._ptr
        self._table_changed()
        check(lib.pt_model_remove_lora(self._ptr), "pt_model_remove_lora")

    def save_lora(self, path, base_model_name_or_path=None):
        """Write a PEFT adapter directory (adapter_config.json,
        adapter_model.safetensors)."""
        check(lib.pt_lora_save_peft(self._ptr, fspath(path),
                                    cstr(base_model_name_or_path, "base_model_name_or_path")),
              "pt_lora_save_peft")

    def load_lora(self, path):
        """Read a PEFT LoRA adapter directory into this model (no adapters yet)."""
        self._ptr
        self._table_changed()
        check(lib.pt_lora_load_peft(self._ptr, fspath(path)), "pt_lora_load_peft")

    def lora_state_dict(self, numpy=None):
        """{PEFT name: Tensor} of the adapters, through save_lora."""
        self._ptr
        d = tempfile.mkdtemp(prefix="posttrain-")
        try:
            self.save_lora(d)
            tensors, _ = _st.read(os.path.join(d, "adapter_model.safetensors"))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if want_numpy(numpy):
            return {k: t.numpy() for k, t in tensors.items()}
        return tensors


def _lora_mask(targets):
    if isinstance(targets, int):
        return targets
    if isinstance(targets, str):
        targets = [targets]
    mask = 0
    for t in targets:
        if t not in LORA_TARGETS:
            raise invalid("unknown LoRA target %r (%s)" % (t, ", ".join(LORA_TARGETS)), "add_lora")
        mask |= LORA_TARGETS[t]
    return mask
