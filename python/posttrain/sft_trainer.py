"""SFT in TRL's shape: SFTConfig (trl 1.9's fields and defaults, checked
when built, like GRPOConfig) and SFTTrainer(model, args, train_dataset,
eval_dataset, processing_class), over the library's dataset and SFT step
(pt_dataset, pt_sft_step), output_dir a run directory of the library's
run layer as `posttrain sft`'s --out (checkpoints/step-NNNNNNNN with
retention, metrics.jsonl, the lock; the same run state), so either can
resume the other's run on the same data.

    from posttrain import SFTTrainer, SFTConfig
    trainer = SFTTrainer(model="models/stories260K", train_dataset=rows,
                         args=SFTConfig(output_dir="out", max_steps=100))
    trainer.train()

Dataset formats (TRL's): {"text": ...} (or dataset_text_field), {"prompt",
"completion"} (text, or lists of messages), {"messages": [...]}; see
docs/python.md.
"""

import ctypes
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time

from ._lib import RunState, SftRowExtra, SftStats, has_feature, lib
from ._handle import out_handle
from .errors import check, invalid
from .model import Model
from .run import (Run, check_output, host_model_fields, resume_trainer, run_state_to_json,
                  _require as _require_run, _take_string)
from .train import Dataset, Optimizer, save_checkpoint
from .trainer import TrainerState, TrainOutput, _is_messages, _make_parent, _new_goodput
from .trl_config import TRAINING_ARGUMENTS, GRPOConfig

__all__ = ["SFTConfig", "SFTTrainer"]

SFT_TABLE = "docs/python.md, \"SFT from Python like TRL\""
_logger = logging.getLogger("posttrain")
_PROGRESS_LINE = 0   # PT_SFT_PROGRESS_LINE
_CKPT_RE = re.compile(r"^step-(\d+)$")

# TRL 1.9's SFTConfig's own fields (and the defaults it overrides).
SFT_FIELDS = {
    "learning_rate": (2e-5, "use", ""),
    "model_init_kwargs": (None, "ignore", "the model is loaded as it is"),
    "router_aux_loss_coef": (0.001, "ignore", "there are no mixture-of-experts models here"),
    "trust_remote_code": (False, "ignore", "no remote code is ever run"),
    "chat_template_path": (None, "use", ""),
    "dataset_text_field": ("text", "use", ""),
    "dataset_kwargs": (None, "refuse", "rows are always prepared by the trainer"),
    "dataset_num_proc": (None, "ignore", "tokenizing runs in the library"),
    "eos_token": (None, "refuse", "the tokenizer's EOS is used"),
    "max_length": (1024, "use", ""),
    "truncation_mode": ("keep_start", "use", ""),
    "shuffle_dataset": (False, "ignore", "the training rows are reshuffled every epoch, as "
                        "transformers' random sampler does"),
    "packing": (False, "use", ""),
    "packing_strategy": ("bfd", "use", ""),
    "padding_free": (False, "ignore", "batches are padded only to their longest row"),
    "pad_to_multiple_of": (None, "ignore", "batches are padded only to their longest row"),
    "eval_packing": (None, "refuse", "evaluation packs as training does"),
    "completion_only_loss": (None, "use", ""),
    "assistant_only_loss": (False, "use", ""),
    "loss_type": (None, "use", ""),
    "activation_offloading": (False, "ignore", "CPU only: nothing to offload"),
    "pad_token": (None, "ignore", "padding tokens are never trained on"),
}
_SFT_TABLE = dict(TRAINING_ARGUMENTS, **SFT_FIELDS)


class SFTConfig(GRPOConfig):
    """TRL's SFTConfig: every field by TRL's name with TRL's default
    (learning_rate 2e-5, max_length 1024, ...), checked when built."""

    _table = _SFT_TABLE
    _what = "SFTConfig"
    _doc = SFT_TABLE

    def _post_init(self):
        self._common_post_init()
        self._int("max_length", 1, allow_none=True)
        self._choice("truncation_mode", ["keep_start"])
        self._choice("packing_strategy", ["bfd"])
        if self.loss_type is None:
            self._set("loss_type", "chunked_nll")
        self._choice("loss_type", ["nll", "chunked_nll"])
        if self.completion_only_loss is not None:
            self._set("completion_only_loss", bool(self.completion_only_loss))
        self._set("assistant_only_loss", bool(self.assistant_only_loss))
        self._set("packing", bool(self.packing))
        if not isinstance(self.dataset_text_field, str) or not self.dataset_text_field:
            raise self._bad("dataset_text_field must be a column name")


def _format(row, text_field):
    """"text", "prompt_completion" or "messages"."""
    if "messages" in row:
        return "messages"
    if "prompt" in row and "completion" in row:
        return "prompt_completion"
    if text_field in row:
        return "text"
    raise invalid("an SFT row needs \"%s\", \"prompt\" and \"completion\", or \"messages\" "
                  "(it has %s)" % (text_field, sorted(row)), "SFTTrainer")


class SFTTrainer:
    """SFTTrainer(model, args=None, data_collator=None, train_dataset=None,
    eval_dataset=None, processing_class=None, ...): TRL's signature.  model
    a Model or a path (directory or GGUF file, loaded and closed with the
    trainer); processing_class a Tokenizer (default the model's)."""

    def __init__(self, model, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, compute_loss_func=None,
                 compute_metrics=None, callbacks=None, optimizers=(None, None),
                 optimizer_cls_and_kwargs=None, preprocess_logits_for_metrics=None,
                 peft_config=None, formatting_func=None):
        for name, v in (("data_collator", data_collator), ("compute_loss_func", compute_loss_func),
                        ("compute_metrics", compute_metrics),
                        ("optimizer_cls_and_kwargs", optimizer_cls_and_kwargs),
                        ("preprocess_logits_for_metrics", preprocess_logits_for_metrics),
                        ("peft_config", peft_config)):
            if v is not None:
                raise invalid("SFTTrainer: %s is not supported here (see %s)"
                              % (name, SFT_TABLE), "SFTTrainer")
        if optimizers is not None and tuple(optimizers) != (None, None):
            raise invalid("SFTTrainer: optimizers: the optimizer comes from the config",
                          "SFTTrainer")
        if isinstance(args, dict):
            args = SFTConfig(**args)
        self.args = args if args is not None else SFTConfig()
        if not isinstance(self.args, SFTConfig):
            raise invalid("args must be an SFTConfig", "SFTTrainer")
        if train_dataset is None:
            raise invalid("SFTTrainer needs a train_dataset", "SFTTrainer")
        self._own_model = False
        if isinstance(model, (str, bytes, os.PathLike)):
            self._model_path = os.fsdecode(model)
            model = Model.load(model)
            self._own_model = True
        elif isinstance(model, Model):
            self._model_path = model.source_dir or ""
        else:
            raise invalid("model must be a posttrain.Model or a path", "SFTTrainer")
        self.model = model
        c = self.args
        if c.bf16:
            model.bf16 = True
        model.gradient_checkpointing = c.gradient_checkpointing  # TRL's default: True
        self.tokenizer = processing_class if processing_class is not None else model.tokenizer
        if self.tokenizer is None:
            raise invalid("SFTTrainer needs a tokenizer (pass processing_class=)", "SFTTrainer")
        self.formatting_func = formatting_func
        self.callbacks = list(callbacks or [])
        self.output_dir = c.output_dir
        self.seed = (c.data_seed if c.data_seed is not None else c.seed) & ((1 << 64) - 1)
        self._run = None
        self.goodput = None
        self._tmp = tempfile.mkdtemp(prefix="posttrain-sft-")
        try:
            self.train_data = self._load(train_dataset, "train", shuffle=True)
            self.eval_data = (self._load(eval_dataset, "eval", shuffle=False)
                              if eval_dataset is not None else None)
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
        st = self.train_data.stats
        bs, ga = c.per_device_train_batch_size, c.gradient_accumulation_steps
        rows = st["train_examples"]
        if c.packing:
            # packed rows are about max_length tokens each
            rows = max(1, math.ceil(st["train_tokens"] / self._max_length))
        self._batches_per_epoch = max(1, math.ceil(rows / bs))
        per_epoch = max(1, self._batches_per_epoch // ga)
        total = c.max_steps if c.max_steps > 0 else math.ceil(c.num_train_epochs * per_epoch)
        self._per_epoch = per_epoch
        self.state = TrainerState()
        self.state.max_steps = total
        self.state.num_train_epochs = c.num_train_epochs
        self.state.train_batch_size = bs * ga
        self.log_every = _steps(c.logging_steps, total) if c.logging_strategy == "steps" else 0
        self.save_every = _steps(c.save_steps, total) if c.save_strategy == "steps" else 0
        self.eval_every = (_steps(c.eval_steps, total)
                           if c.eval_strategy == "steps" and self.eval_data is not None else 0)
        self.state.logging_steps, self.state.save_steps = self.log_every, self.save_every
        self.state.eval_steps = self.eval_every
        self.optimizer = Optimizer(model, **c.optimizer_options(total))
        # a step's micro-batches, copied out of the dataset by the library
        # (pt_sft_batches, as `posttrain sft` fills them)
        self._batches, self._last = None, None
        self._t_start, self._first_step, self._tokens_seen = time.perf_counter(), 0, 0
        if has_feature("run"):
            out = out_handle()
            check(lib.pt_sft_batches_create(ctypes.byref(out), self.train_data._ptr,
                                            c.gradient_accumulation_steps, 0, 0),
                  "pt_sft_batches_create")
            self._batches = out.value
        # the run directory: opened by train() when output_dir was given, a
        # checkpoint is due or a resume asked for; a train() that does not
        # resume starts it afresh (transformers writes over an earlier run)
        self._run_wanted = ("output_dir" in c._given and c.output_dir is not None) or bool(
            self.save_every and self.save_every <= total)
        self.metrics = []
        self._pending = []

    # -- data --------------------------------------------------------------------------
    def _rows(self, dataset, what):
        c = self.args
        out, fmt, conv = [], None, False
        for i, r in enumerate(dataset):
            if not isinstance(r, dict):
                raise invalid("%s row %d must be a dict" % (what, i), "SFTTrainer")
            if self.formatting_func is not None:
                r = {"text": self.formatting_func(r)}
                f = "text"
            else:
                f = _format(r, c.dataset_text_field)
            if fmt is None:
                fmt = f
            elif f != fmt:
                raise invalid("%s row %d is %s, row 0 %s: one format per dataset"
                              % (what, i, f, fmt), "SFTTrainer")
            if f == "text":
                text = r["text"] if self.formatting_func is not None else r[c.dataset_text_field]
                out.append({"text": text})
            elif f == "prompt_completion":
                p, comp = r["prompt"], r["completion"]
                if _is_messages(p) or _is_messages(comp):
                    # conversational prompt/completion: the conversation, loss on
                    # the completion's (assistant) messages
                    out.append({"messages": list(p) + list(comp)})
                    conv = True
                else:
                    out.append({"prompt": p, "completion": comp})
            else:
                out.append({"messages": r["messages"]})
        if not out:
            raise invalid("%s is empty" % what, "SFTTrainer")
        if conv:
            if any("prompt" in r for r in out):
                raise invalid("%s mixes conversational and text prompt/completion rows" % what,
                              "SFTTrainer")
            fmt = "conversational_prompt_completion"
        return out, fmt

    def _load(self, dataset, what, shuffle):
        c = self.args
        rows, fmt = self._rows(dataset, what)
        # TRL: completion-only loss for prompt/completion rows unless
        # completion_only_loss=False; for messages only with assistant_only_loss
        if fmt in ("prompt_completion", "conversational_prompt_completion"):
            completion_only = c.completion_only_loss is not False
        elif fmt == "messages":
            completion_only = c.assistant_only_loss
        else:
            completion_only = False
        ctx = self.model.config["max_position_embeddings"]
        self._max_length = min(c.max_length or ctx, ctx)
        template = None
        if fmt != "text" and fmt != "prompt_completion":
            template = self._template_name()
        path = os.path.join(self._tmp, what + ".jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        opts = dict(max_length=self._max_length, completion_only=completion_only,
                    batch_size=c.per_device_train_batch_size if what == "train" else 1,
                    pack=c.packing, shuffle=shuffle, seed=self.seed & ((1 << 64) - 1))
        if template is not None:
            opts["chat_template"] = template
        ds = Dataset.load_jsonl(path, self.tokenizer, **opts)
        ds.rows = len(rows)
        ds.format = fmt
        return ds

    def _template_name(self):
        from .chat import ChatTemplate
        p = self.args.chat_template_path
        if p is None:
            return None   # the tokenizer's own
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                with ChatTemplate.from_source(f.read()) as t:
                    return t.name
        with ChatTemplate.from_name(p) as t:
            return t.name

    # -- the loop ----------------------------------------------------------------------
    def _step(self):
        if self._batches is None:
            return self._step_batches()
        mb = self._batches
        check(lib.pt_sft_batches_fill(mb, self.train_data._ptr), "pt_sft_batches_fill")
        n = lib.pt_sft_batches_count(mb)
        micro = lib.pt_sft_batches_micro(mb)
        big = _Size(max(micro[i].batch for i in range(n)), max(micro[i].seq for i in range(n)))
        self.optimizer._check_dist()
        ctx = self.model._context_for(big)
        s = SftStats.new()
        t0 = time.perf_counter()
        check(lib.pt_sft_step(ctypes.byref(s), self.optimizer._ptr, ctx._ptr, micro,
                              lib.pt_sft_batches_weights(mb), n), "pt_sft_step")
        dt = time.perf_counter() - t0
        self._last = (s, dt, int(lib.pt_sft_batches_tokens(mb)))
        self._tokens_seen += self._last[2]
        return self._advance(s, dt)

    def _step_batches(self):
        """A library without pt_sft_batches: the batches through Python."""
        c = self.args
        batches, weights = [], []
        for _ in range(c.gradient_accumulation_steps):
            b, w = self.train_data.next_batch(numpy=False)
            batches.append(b)
            weights.append(w)
        t0 = time.perf_counter()
        s = self.optimizer.sft_step(batches, weights)
        dt = time.perf_counter() - t0
        self._last = None
        return self._advance(s, dt)

    def _advance(self, s, dt):
        self.state.global_step += 1
        self.state.epoch = self.state.global_step / self._per_epoch
        return {"loss": s.loss, "grad_norm": s.grad_norm, "learning_rate": s.lr,
                "num_tokens": s.tokens, "step_seconds": dt, "skipped": bool(s.skipped)}

    def _log_row(self, m):
        """The step's row of output_dir/metrics.jsonl: `posttrain sft`'s
        (pt_sft_metrics_row: the same keys and number formats)."""
        if self._last is None:
            self._run.log(_finite_row(m))
            return
        s, dt, tokens = self._last
        x = SftRowExtra.new()
        x.step, x.step_seconds, x.step_tokens = m["step"], dt, tokens
        if "eval_loss" in m:
            x.eval, x.eval_loss = True, m["eval_loss"]
        row = ctypes.c_void_p()
        check(lib.pt_sft_metrics_row(ctypes.byref(row), ctypes.byref(s), ctypes.byref(x)),
              "pt_sft_metrics_row")
        check(lib.pt_run_log(self._run._ptr, _take_string(row).encode("utf-8")), "pt_run_log")

    def train(self, resume_from_checkpoint=None, **kwargs):
        """Train to max_steps (or num_train_epochs), after resuming from a
        checkpoint (a path, or True: the latest of output_dir/checkpoints).
        Returns TrainOutput(global_step, training_loss, metrics)."""
        if kwargs:
            raise invalid("train: unknown argument(s) %s" % ", ".join(sorted(kwargs)),
                          "SFTTrainer.train")
        self._resume(resume_from_checkpoint or None)
        t0 = time.perf_counter()
        self._t_start, self._first_step, self._tokens_seen = t0, self.state.global_step, 0
        losses = []
        while self.state.global_step < self.state.max_steps:
            prev = self.state.global_step
            m = self._step()
            gs = self.state.global_step
            m["step"], m["epoch"] = gs, self.state.epoch

            def due(every):
                return every and gs // every != prev // every
            t_eval = 0.0
            if due(self.eval_every):
                t1 = time.perf_counter()
                m.update(self.evaluate())
                t_eval = time.perf_counter() - t1
            if self._run is not None:
                # the metrics row before the checkpoint that covers it
                self._log_row(m)
            gp = self.goodput
            if gp is not None:
                gp.add("step", m["step_seconds"])
                if t_eval:
                    gp.add("eval", t_eval)
                gp.step_done()
            if due(self.save_every):
                t1 = time.perf_counter()
                m["checkpoint"] = self.save_checkpoint()
                if gp is not None:
                    gp.add("save", time.perf_counter() - t1)
            self.metrics.append(m)
            losses.append(m["loss"])
            self._pending.append(m)
            if due(self.log_every) or (self.args.logging_first_step and gs == 1) or \
                    gs >= self.state.max_steps:
                self._log()
        runtime = time.perf_counter() - t0
        ok = [v for v in losses if v == v]
        loss = sum(ok) / len(ok) if ok else math.nan
        metrics = {"train_runtime": runtime, "train_loss": loss, "epoch": self.state.epoch}
        self.state.log_history.append(dict(metrics, step=self.state.global_step))
        return TrainOutput(self.state.global_step, loss, metrics)

    def _log(self):
        rows, self._pending = self._pending, []
        if not rows:
            return
        out = {}
        for k in ("loss", "grad_norm", "learning_rate", "eval_loss"):
            vals = [r[k] for r in rows if k in r and r[k] == r[k]]
            if vals:
                out[k] = sum(vals) / len(vals)
        out["num_tokens"] = sum(r["num_tokens"] for r in rows)
        out["epoch"] = self.state.epoch
        out["step"] = self.state.global_step
        self.state.log_history.append(out)
        self._log_progress(rows[-1])
        if not self.args.disable_tqdm:
            print({k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()},
                  flush=True)
        for cb in self.callbacks:
            on_log = getattr(cb, "on_log", None)
            if on_log is not None:
                on_log(self.args, self.state, None, logs=out)

    def _log_progress(self, m):
        """`posttrain sft`'s progress line of the step (pt_sft_progress) on
        the logger "posttrain" (INFO): its loss, learning rate and gradient
        norm, the tokens a second so far and the time left."""
        if self._last is None:
            return
        s, _, _ = self._last
        x = SftRowExtra.new()
        x.step = self.state.global_step
        if "eval_loss" in m:
            x.eval, x.eval_loss = True, m["eval_loss"]
        elapsed = time.perf_counter() - self._t_start
        left = self.state.max_steps - self.state.global_step
        done = self.state.global_step - self._first_step
        text = ctypes.c_void_p()
        check(lib.pt_sft_progress(ctypes.byref(text), ctypes.byref(s), ctypes.byref(x), self.state.max_steps,
                                  self._tokens_seen / elapsed if elapsed > 0 else 0.0,
                                  elapsed / done * left if done else math.nan, _PROGRESS_LINE),
              "pt_sft_progress")
        _logger.info("%s", _take_string(text).rstrip("\n"))

    def evaluate(self, eval_dataset=None):
        """{"eval_loss": mean token loss over eval_dataset, "eval_num_tokens"}."""
        if eval_dataset is not None:
            self._tmp = tempfile.mkdtemp(prefix="posttrain-sft-")
            try:
                ds = self._load(eval_dataset, "eval", shuffle=False)
            finally:
                shutil.rmtree(self._tmp, ignore_errors=True)
        else:
            ds = self.eval_data
        if ds is None:
            raise invalid("no eval_dataset", "SFTTrainer.evaluate")
        ds.position = (0, 0)
        # one row per batch (eval datasets are loaded with batch_size 1), so
        # no batch reaches into the next pass: stop when every target is counted
        want = ds.stats["train_target_tokens"]
        total, tokens = 0.0, 0.0
        while tokens < want:
            b, w = ds.next_batch(numpy=False)
            t = sum(1 for row in w for x in row if x > 0)
            if t:
                total += self.model.loss(b) * t
                tokens += t
        ds.position = (0, 0)
        if eval_dataset is not None:
            ds.close()
        return {"eval_loss": total / tokens if tokens else math.nan, "eval_num_tokens": tokens}

    # -- the run directory and checkpoints (the CLI's layout) -------------------------
    def _resume(self, path):
        resume_trainer(self, path, "SFTTrainer.train", "overwrite")

    def _open_run(self, start, resume_from=None):
        """output_dir as a run directory held until close(), with a goodput
        accountant whose totals ride in the checkpoints."""
        _make_parent(self.output_dir)
        if self.goodput is None:
            self.goodput = _new_goodput()
        return Run(self.output_dir, "sft", start=start, resume_from=resume_from,
                   inputs=[("model", self._model_path or None, True)],
                   keep_last=self.args.save_total_limit or 0, goodput=self.goodput)

    def _run_state(self):
        """The checkpoint's run state, as `posttrain sft` records it
        (pt_sft_run_state: the data position, seed and examples, the
        optimizer's step count)."""
        st = RunState.new()
        check(lib.pt_sft_run_state(ctypes.byref(st), self.train_data._ptr, self.optimizer._ptr,
                                   self.state.global_step), "pt_sft_run_state")
        return st

    def _run_extra(self):
        return dict(host_model_fields(self._model_path, self.model), trainer="posttrain.SFTTrainer")

    def _apply(self, state, extra, path):
        if state.seed != self.seed:
            raise invalid("%s was made with seed %d, this trainer has %d"
                          % (path, state.seed, self.seed), "SFTTrainer")
        # (checkpoints of posttrain sft before the run layer do not record it: 0)
        if state.optimizer_steps and state.optimizer_steps != self.optimizer.step_count:
            raise invalid("%s: the optimizer's step count %d does not match the recorded %d"
                          % (path, self.optimizer.step_count, state.optimizer_steps),
                          "SFTTrainer")
        self.train_data.position = (int(state.epoch), int(state.cursor))
        self.state.global_step = int(state.step)
        self.state.epoch = self.state.global_step / self._per_epoch
        h = dict(extra)
        h.update(command="sft", step=int(state.step), seed=str(state.seed),
                 epoch=int(state.epoch), cursor=int(state.cursor),
                 optimizer_steps=int(state.optimizer_steps))
        return h

    def save_checkpoint(self, path=None):
        """output_dir/checkpoints/step-NNNNNNNN through the run layer
        (weights, optimizer, data position; `posttrain sft --resume` reads
        it too; save_total_limit the retention), or `path`; returns the path."""
        _require_run("SFTTrainer.save_checkpoint")
        if path is not None:
            host = json.loads(run_state_to_json(self._run_state(), "sft", self._run_extra()))
            save_checkpoint(path, self.model, self.optimizer, host)
            return os.fspath(path)
        if self._run is None:
            self._run = self._open_run("auto")
        return self._run.save(self.model, self.optimizer, self._run_state(), self._run_extra())

    def latest_checkpoint(self):
        d = os.path.join(self.output_dir, "checkpoints")
        if not os.path.isdir(d):
            return None
        found = sorted((int(mm.group(1)), e) for e in os.listdir(d)
                       for mm in [_CKPT_RE.match(e)] if mm)
        return os.path.join(d, found[-1][1]) if found else None

    def load_checkpoint(self, path):
        """Weights, optimizer and data position from a checkpoint of an SFT
        run (this trainer's or `posttrain sft`'s); returns its host fields."""
        _require_run("SFTTrainer.load_checkpoint")
        state = RunState.new()
        extra = ctypes.c_void_p()
        check(lib.pt_run_load_checkpoint(ctypes.byref(state), ctypes.byref(extra),
                                         self.model._ptr, self.optimizer._ptr, os.fsencode(path),
                                         b"sft"), "pt_run_load_checkpoint")
        e = _take_string(extra)
        return self._apply(state, json.loads(e) if e else {}, path)

    def save_model(self, output_dir=None):
        """The model in Hugging Face layout (default output_dir), never into
        the model directory it started from."""
        path = output_dir if output_dir is not None else self.output_dir
        if has_feature("run"):
            check_output("save_model's path", path, "model", self._model_path or None, True)
        self.model.save(path)

    def close(self):
        """Release the run directory (its lock) and free the trainer's objects."""
        if self._run is not None:
            self._run.close()
            self._run = None
        if self.goodput is not None:
            self.goodput.close()
            self.goodput = None
        if self._batches is not None:
            lib.pt_sft_batches_free(self._batches)
            self._batches = None
        self.optimizer.close()
        self.train_data.close()
        if self.eval_data is not None:
            self.eval_data.close()
        if self._own_model:
            self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Size:
    """The rows and tokens a context must hold (Model._context_for)."""

    def __init__(self, batch, seq):
        self.batch, self.seq = batch, seq


def _finite_row(m):
    """A step's row of output_dir/metrics.jsonl ("step" the global step)."""
    return {k: v for k, v in m.items() if k != "checkpoint"}


def _steps(v, total):
    if not v:
        return 0
    return max(1, math.ceil(v * total)) if v < 1 else int(v)

