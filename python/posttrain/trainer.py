"""A GRPO training loop in TRL's shape (GRPOTrainer): a model (or its
path), reward functions fn(prompts, completions, completion_ids,
**columns, trainer_state, log_metric, log_extra) -> [float | None], a
dataset of rows {"prompt": text, ids or chat messages, other columns} and
TRL's GRPOConfig; each step generates, scores, steps, evaluates and saves,
and reports its metrics (TRL's names) with the time split into generation,
scoring, training, evaluation and saving.  A checkpoint holds the weights,
the optimizer and the run state (round, prompt order, random state), so
resuming continues the run bit for bit.

    from posttrain import GRPOConfig, GRPOTrainer
    trainer = GRPOTrainer(model="models/stories260K", reward_funcs=[correct, short],
                          args=GRPOConfig(output_dir="out", learning_rate=1e-4,
                                          max_steps=100, save_steps=10),
                          train_dataset=rows)
    trainer.train()                          # or resume_from_checkpoint=True

The older keywords (GRPOTrainer(model, funcs, rows, batch_prompts=...,
grpo={...}), train(rounds=N)) still work.  Built on RolloutBuffer,
grpo_step and the run layer (posttrain.Run: output_dir is a run directory
in posttrain grpo's layout, and either continues the other's run; features
"grpo" and "run"); see docs/python.md and docs/grpo.md.
"""

import collections
import ctypes
import json
import math
import os
import re
import time

from .chat import ChatTemplate
from .errors import Error, check, invalid
from .generate import encode_prompts
from .grpo import (MAX_REWARD_FUNCS, RolloutBuffer, call_reward, _grpo_options, _require,
                   _round_update)
from .model import Model, _lora_mask
from ._lib import (GrpoMetrics, GrpoResumeReport, GrpoRunFields, GrpoStats as _CGrpoStats,
                   PromptOrderOptions, RunState, has_feature, lib)
from .run import (Run, check_output, resume_trainer, run_state_to_json, _require as _require_run,
                  _take_string)
from .train import Optimizer, save_checkpoint
from .trl_config import GRPOConfig

__all__ = ["GRPOTrainer", "TrainerState", "TrainOutput"]

# What train() returns when the trainer was built TRL's way (transformers' TrainOutput).
TrainOutput = collections.namedtuple("TrainOutput", ["global_step", "training_loss", "metrics"])
# The keyword arguments of the old GRPOTrainer signature (before GRPOConfig).
_LEGACY = ("reward_weights", "num_generations", "num_generations_eval", "batch_prompts",
           "max_new_tokens", "temperature", "top_k", "top_p", "min_p", "stop_ids",
           "num_iterations", "learning_rate", "optimizer", "grpo", "seed", "shuffle",
           "add_special", "output_dir", "save_every", "eval_every", "bf16",
           "gradient_checkpointing")
# Names a reward function receives from the trainer itself.
_RESERVED = ("prompts", "completions", "completion_ids", "trainer_state", "log_metric",
             "log_extra")


class TrainerState:
    """The parts of transformers' TrainerState a reward function or a
    callback reads: global_step (optimizer steps, TRL's count), max_steps,
    epoch (fractional), num_train_epochs, logging_steps, eval_steps,
    save_steps, train_batch_size and log_history (the logged dicts)."""

    def __init__(self):
        self.global_step = 0
        self.max_steps = 0
        self.epoch = 0.0
        self.num_train_epochs = 0
        self.logging_steps = 0
        self.eval_steps = 0
        self.save_steps = 0
        self.train_batch_size = 0
        self.log_history = []

    def __repr__(self):
        return "TrainerState(global_step=%d, max_steps=%d, epoch=%.4g)" % (
            self.global_step, self.max_steps, self.epoch)


def _is_messages(p):
    """TRL's conversational format: a list of {"role", "content"} dicts."""
    return isinstance(p, (list, tuple)) and len(p) > 0 and all(
        isinstance(m, dict) and "role" in m for m in p)


def _steps(v, total):
    """transformers' logging/save/eval steps: a count, or a ratio of the
    total below 1."""
    if not v:
        return 0
    return max(1, math.ceil(v * total)) if v < 1 else int(v)

_MASK64 = (1 << 64) - 1
# The run's kind, as `posttrain grpo`'s (either continues the other's run).
_KIND = "grpo"
# Checkpoints of the run directory (docs/run-directory.md), and those of the
# older layout (output_dir/checkpoint-R, host "kind" posttrain.GRPOTrainer),
# which are refused with a message.
_CKPT_RE = re.compile(r"^step-(\d+)$")
_OLD_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")
_OLD_KIND = "posttrain.GRPOTrainer"


class _PromptOrder:
    """The run's prompt order: the library's pt_prompt_order (posttrain/
    grpo_run.h), the one `posttrain grpo` draws: a seeded shuffle per pass
    (or row order), recorded in the run state and continued on resume."""

    def __init__(self, rows, seed, shuffle, drop_last):
        o = PromptOrderOptions.new()
        o.rows = rows
        o.seed = seed & _MASK64
        o.no_shuffle = not shuffle
        o.drop_last = drop_last
        h = ctypes.c_void_p()
        check(lib.pt_prompt_order_create(ctypes.byref(h), ctypes.byref(o)), "pt_prompt_order_create")
        self._h = h

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            lib.pt_prompt_order_free(h)

    def next(self, n):
        out = (ctypes.c_int32 * n)()
        check(lib.pt_prompt_order_next(self._h, out, n), "pt_prompt_order_next")
        return list(out)

    @property
    def passes(self):
        return int(lib.pt_prompt_order_passes(self._h))

    def save(self, state):
        check(lib.pt_prompt_order_save(ctypes.byref(state), self._h), "pt_prompt_order_save")


def _make_parent(path):
    """transformers makes output_dir with its parents; the run layer makes
    the directory itself, in an existing parent."""
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    os.makedirs(parent, exist_ok=True)


def _new_goodput():
    """The run's goodput accountant (its totals ride in the checkpoints, as
    posttrain's do), or None without the feature."""
    if not has_feature("goodput"):
        return None
    from .goodput import Goodput
    return Goodput()


def _lora_host(model):
    """A checkpoint's "lora" host field as posttrain writes it (rank, alpha,
    the targets as pt_lora_options' bitmask), or None without adapters."""
    lo = model.lora if model.has_lora else None
    if not lo:
        return None
    return {"rank": lo["rank"], "alpha": lo["alpha"], "targets": _lora_mask(lo["targets"])}


def _isnan(x):
    return x != x


class GRPOTrainer:
    """GRPO over a list of rows from Python, one generation round at a time.

    TRL's way: GRPOTrainer(model, reward_funcs, args=GRPOConfig(...),
    train_dataset=rows, eval_dataset=None, processing_class=None,
    ref_model=None, callbacks=None, chat_template=None) (docs/python.md,
    "GRPO from Python like TRL").  The older keywords, described below:

    GRPOTrainer(model, reward_funcs, train_dataset, tokenizer=None, ...):

    model: a posttrain.Model (LoRA adapters, if any, added before).
    reward_funcs: a callable or a list of up to 8, each called as
        fn(prompts=[...], completions=[...], completion_ids=[...], **fields)
        with one entry per completion (RolloutBuffer.score_completions) and
        returning one float or None (declined) per completion.
    train_dataset: a list of dicts, each with "prompt" (a str, encoded with
        the tokenizer and its special tokens unless add_special=False, or a
        list of ids) and any other fields the rewards read; every row the
        same fields.
    tokenizer: default the model's; needed to decode completions.
    reward_weights: one per reward function (default all 1).
    eval_dataset: rows like train_dataset; evaluate() (and every eval_every
        rounds) samples num_generations_eval completions of each and reports
        the mean rewards without training.
    num_generations (G, >= 2), batch_prompts (prompts per round),
    max_new_tokens (TRL's max_completion_length), temperature, top_k,
    top_p, min_p, stop_ids: the sampling; num_iterations: grpo_step calls
    per round on the same buffer (TRL's mu).
    learning_rate and optimizer (a dict of further Optimizer options:
        schedule, warmup_steps, total_steps, weight_decay, max_grad_norm...).
    grpo: a dict of grpo_step options (loss_type, scale_rewards, epsilon_low,
        epsilon_high, beta, delta, mask_truncated_completions, ...);
        max_completion_length defaults to max_new_tokens, temperature to the
        sampling temperature.
    bf16: TRL's bf16=True: model.bf16 = True (mixed precision where the CPU
        has BF16 arithmetic; a frozen LoRA base kept in BF16) and the
        reference model frozen in BF16 (docs/bf16.md).
    ref_model: the frozen reference policy, required when grpo["beta"] > 0
        (e.g. the same directory loaded again), unless the model has LoRA
        adapters: the step then takes the frozen base as the reference.
    seed: the prompt order (a shuffle per pass, unless shuffle=False) and
        the sampling (round r samples from seed * 1000003 + r).
    output_dir, save_every: output_dir is the run directory (the run
        layer's, as posttrain grpo's --out: metrics.jsonl, the lock; a used
        one is refused unless resumed); a checkpoint every save_every
        rounds into output_dir/checkpoints/step-NNNNNNNN (the round).
    eval_every: evaluate every eval_every rounds (0: never).
    callback: called with each round's metrics dict as it is made.

    train(rounds=None, resume_from_checkpoint=None) runs the rounds (default
    one pass over the rows) and returns the list of metrics dicts of the
    rounds it ran; each has "round", the step's statistics under TRL's
    names, "skipped" and "skip_reason", and time/generation, time/scoring,
    time/training, time/evaluation, time/saving and time/round seconds.

    A round where every reward function declined every completion has no
    reward to learn from: pt_grpo_step skips it (the optimizer's step count
    does not move) and the round reports reward NaN, skipped True and
    skip_reason "no_rewards" (PT_SKIP_NO_REWARDS), then the next round
    follows.
    """

    def __init__(self, model, reward_funcs, args=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, reward_processing_classes=None, callbacks=None,
                 optimizers=(None, None), peft_config=None, tokenizer=None, ref_model=None,
                 callback=None, chat_template=None, **legacy):
        _require()
        unknown = sorted(set(legacy) - set(_LEGACY))
        if unknown:
            raise invalid("GRPOTrainer: unknown argument(s) %s (TRL's options go in "
                          "args=GRPOConfig(...))" % ", ".join(unknown), "GRPOTrainer")
        if isinstance(args, dict):
            args = GRPOConfig(**args)
        if args is not None and not isinstance(args, GRPOConfig):
            # the older signature GRPOTrainer(model, reward_funcs, train_dataset, ...)
            if train_dataset is not None:
                raise invalid("GRPOTrainer: args must be a GRPOConfig, not %s"
                              % type(args).__name__, "GRPOTrainer")
            train_dataset, args = args, None
            legacy = dict(legacy, _positional=True)
        if legacy and args is not None:
            raise invalid("GRPOTrainer: give the options in args=GRPOConfig(...) (%s are the "
                          "older keywords)" % ", ".join(sorted(k for k in legacy if k[0] != "_")),
                          "GRPOTrainer")
        if train_dataset is None:
            raise invalid("GRPOTrainer needs a train_dataset", "GRPOTrainer")
        if reward_processing_classes is not None:
            raise invalid("reward_processing_classes: reward models do not exist here (reward "
                          "functions are Python callables)", "GRPOTrainer")
        if optimizers is not None and tuple(optimizers) != (None, None):
            raise invalid("optimizers: the trainer makes its own Optimizer from the config "
                          "(learning_rate, lr_scheduler_type, optim, ...)", "GRPOTrainer")
        if peft_config is not None:
            raise invalid("peft_config: add the LoRA adapters to the model first "
                          "(model.add_lora(...)), then make the trainer", "GRPOTrainer")
        self._own_model = False
        self._own_ref = False
        model_path = None
        if isinstance(model, (str, bytes, os.PathLike)):
            # TRL's model="name or path": a model directory or a GGUF file
            model_path = model
            model = Model.load(model)
            self._own_model = True
        elif not isinstance(model, Model):
            raise invalid("model must be a posttrain.Model or the path of a model directory or "
                          "GGUF file, not %s" % type(model).__name__, "GRPOTrainer")
        self._model_path = os.fsdecode(model_path) if model_path is not None else \
            (model.source_dir or None)
        self._run = None
        self.goodput = None
        self._trl = not legacy
        if self._trl:
            args = args if args is not None else GRPOConfig()
            self.args = args
            s = self._settings_from_config(args)
        else:
            self.args = None
            s = self._settings_from_legacy(legacy)
        # TRL's gradient_checkpointing (its default True): the contexts made
        # for the updates recompute activations in the backward (docs/training.md)
        model.gradient_checkpointing = s["gradient_checkpointing"]
        if s["bf16"]:
            # TRL's bf16=True: mixed precision where the CPU has BF16
            # arithmetic, a frozen base (LoRA) and the reference in BF16
            model.bf16 = True
            if ref_model is not None:
                ref_model.bf16 = "frozen"
        self.model = model
        tok = processing_class if processing_class is not None else tokenizer
        self.tokenizer = tok if tok is not None else model.tokenizer
        if self.tokenizer is None:
            raise invalid("GRPOTrainer needs a tokenizer (the model has none: pass "
                          "processing_class= or tokenizer=)", "GRPOTrainer")
        self._chat_template_arg = chat_template
        self._template = None
        self._chat_kwargs = dict(s.get("chat_template_kwargs") or {})
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        if not funcs or len(funcs) > MAX_REWARD_FUNCS or not all(callable(f) for f in funcs):
            raise invalid("reward_funcs: 1 to %d callables" % MAX_REWARD_FUNCS, "GRPOTrainer")
        self.reward_funcs = funcs
        names = []
        for f in funcs:
            n = getattr(f, "__name__", None) or type(f).__name__
            base, k = n, 1
            while n in names:
                k += 1
                n = "%s_%d" % (base, k)
            names.append(n)
        self.reward_names = names
        rw = s["reward_weights"]
        self.reward_weights = [float(w) for w in rw] if rw is not None else [1.0] * len(funcs)
        if len(self.reward_weights) != len(funcs):
            raise invalid("%d reward weights for %d reward functions"
                          % (len(self.reward_weights), len(funcs)), "GRPOTrainer")
        self.add_special = s["add_special"]
        self.max_prompt_length = s.get("max_prompt_length")
        self.remove_unused_columns = s.get("remove_unused_columns", False)
        self.train_dataset = self._rows(train_dataset, "train_dataset")
        self.eval_dataset = (self._rows(eval_dataset, "eval_dataset")
                             if eval_dataset is not None else None)
        self._train_ids = [self._encode(r["prompt"]) for r in self.train_dataset]
        self._eval_ids = ([self._encode(r["prompt"]) for r in self.eval_dataset]
                          if self.eval_dataset is not None else None)
        self.num_generations = s["num_generations"]
        if self.num_generations < 2:
            raise invalid("num_generations %d: GRPO needs at least 2 completions per prompt"
                          % self.num_generations, "GRPOTrainer")
        self.num_generations_eval = s["num_generations_eval"] or self.num_generations
        self.batch_prompts = s["batch_prompts"]
        if self.batch_prompts < 1:
            raise invalid("batch_prompts must be >= 1", "GRPOTrainer")
        self.num_iterations = s["num_iterations"]
        if self.num_iterations < 1:
            raise invalid("num_iterations must be >= 1", "GRPOTrainer")
        self.generate_options = s["generate"]
        self.grpo_options = s["grpo"]
        # checked now, not at the first step after a whole generation round
        _grpo_options(self.grpo_options)
        if self.grpo_options.get("beta", 0) > 0 and ref_model is None and not model.has_lora \
                and model_path is not None:
            # TRL's habit: the reference is the same model loaded again, frozen
            ref_model = Model.load(model_path)
            if s["bf16"]:
                ref_model.bf16 = "frozen"
            self._own_ref = True
        if self.grpo_options.get("beta", 0) > 0 and ref_model is None and not model.has_lora:
            raise invalid("beta > 0 needs ref_model= (the frozen reference policy), or a model "
                          "with LoRA adapters (the frozen base is the reference)", "GRPOTrainer")
        self.ref_model = ref_model
        self.seed = s["seed"] & _MASK64
        self.data_seed = s["data_seed"] & _MASK64
        self.shuffle = s["shuffle"]
        self._drop_last = s["drop_last"]
        self.output_dir = os.fspath(s["output_dir"]) if s["output_dir"] is not None else None
        self.save_every = s["save_every"]
        self.eval_every = s["eval_every"]
        self.log_every = s["log_every"]
        self._unit = s["unit"]
        self.callback = callback
        self.callbacks = list(callbacks or [])
        # the length of a run: legacy, one pass over the rows in rounds; TRL,
        # max_steps optimizer steps or num_train_epochs passes (each round
        # is num_iterations optimizer steps)
        if self._trl:
            total = self._finish_config_settings()
            c = self.args
            self.log_every = _steps(c.logging_steps, total) if c.logging_strategy == "steps" else 0
            self.save_every = _steps(c.save_steps, total) if c.save_strategy == "steps" else 0
            self.eval_every = (_steps(c.eval_steps, total)
                               if c.eval_strategy == "steps" and eval_dataset is not None else 0)
            self._print_logs = not c.disable_tqdm
            self._log_first = bool(c.logging_first_step)
            self._eval_on_start = bool(c.eval_on_start) and eval_dataset is not None
            self._save_total_limit = c.save_total_limit
            # the run directory: a train() that does not resume starts it afresh
            # (transformers' Trainer writes over an earlier run's checkpoints)
            self._start = "overwrite"
            self._run_wanted = ("output_dir" in c._given and c.output_dir is not None) or bool(
                self.save_every and self.save_every <= total)
        else:
            total = -(-len(self.train_dataset) // self.batch_prompts)
            self._print_logs = self._log_first = self._eval_on_start = False
            self._save_total_limit = None
            self._start = "new"
            self._run_wanted = True
        self._max_steps = total
        self._default_rounds = -(-total // self._unit)
        self.state = TrainerState()
        self.state.max_steps = total
        self.state.num_train_epochs = s.get("num_train_epochs", 0)
        self.state.logging_steps = self.log_every
        self.state.eval_steps = self.eval_every
        self.state.save_steps = self.save_every
        self.state.train_batch_size = self.batch_prompts * self.num_generations
        if self.save_every and self.output_dir is None:
            raise invalid("save_every needs output_dir", "GRPOTrainer")
        self.optimizer = Optimizer(model, **s["optimizer"](self.state.max_steps))
        self.buffer = RolloutBuffer(self.reward_names, self.reward_weights)
        # The run's position: rounds done, and the prompt order (the
        # library's, as posttrain grpo's; rebuilt from the state on resume).
        self.round = 0
        self._order = _PromptOrder(len(self.train_dataset), self.data_seed, self.shuffle,
                                   self._drop_last)
        self.metrics = []
        self._pending_log = []
        self._pending_metrics = collections.defaultdict(list)
        self._pending_extra = collections.defaultdict(list)

    # -- settings ----------------------------------------------------------------------
    def _settings_from_legacy(self, kw):
        g = kw.get
        G = int(g("num_generations", 8))
        T = float(g("temperature", 1.0))
        max_new = int(g("max_new_tokens", 64))
        grpo = dict(g("grpo") or {})
        grpo.setdefault("max_completion_length", max_new)
        grpo.setdefault("temperature", T if T > 0 else 1.0)
        lr = float(g("learning_rate", 1e-6))
        opt = dict(g("optimizer") or {})
        bp = int(g("batch_prompts", 4))
        seed = int(g("seed", 0))
        return dict(
            bf16=bool(g("bf16", False)), reward_weights=g("reward_weights"),
            gradient_checkpointing=bool(g("gradient_checkpointing", False)),
            add_special=bool(g("add_special", True)), num_generations=G,
            num_generations_eval=int(g("num_generations_eval") or G), batch_prompts=bp,
            num_iterations=int(g("num_iterations", 1)),
            generate=dict(max_new_tokens=max_new, temperature=T, top_k=g("top_k"),
                          top_p=g("top_p"), min_p=g("min_p"), stop_ids=g("stop_ids")),
            grpo=grpo, seed=seed, data_seed=seed, shuffle=bool(g("shuffle", True)),
            drop_last=False, output_dir=g("output_dir"), save_every=int(g("save_every", 0)),
            eval_every=int(g("eval_every", 0)), log_every=0, unit=1, rounds=None,
            optimizer=lambda total: dict(opt, lr=lr))

    def _settings_from_config(self, c):
        P = c.prompts_per_step
        mu = c.num_iterations
        return dict(
            bf16=c.bf16, gradient_checkpointing=c.gradient_checkpointing,
            reward_weights=c.reward_weights, add_special=True,
            num_generations=c.num_generations, num_generations_eval=c.num_generations_eval,
            batch_prompts=P, num_iterations=mu,
            generate=dict(max_new_tokens=c.max_completion_length, temperature=c.temperature,
                          top_k=c.top_k or None, top_p=c.top_p if c.top_p < 1 else None,
                          min_p=c.min_p or None, stop_ids=None),
            grpo=c.grpo_options, seed=c.seed,
            data_seed=c.data_seed if c.data_seed is not None else c.seed,
            shuffle=bool(c.shuffle_dataset), drop_last=True, output_dir=c.output_dir,
            max_prompt_length=c.max_prompt_length,
            remove_unused_columns=bool(c.remove_unused_columns),
            chat_template_kwargs=c.chat_template_kwargs, unit=mu, rounds=None,
            num_train_epochs=c.num_train_epochs,
            save_every=0, eval_every=0, log_every=0,
            optimizer=c.optimizer_options)

    def _finish_config_settings(self):
        """The step counts of a TRL-style run, once the dataset is known."""
        c = self.args
        mu = self.num_iterations
        if c.max_steps > 0:
            total = c.max_steps
        else:
            per_epoch = len(self.train_dataset) // self.batch_prompts
            if per_epoch == 0:
                raise invalid("train_dataset has %d prompts, fewer than one step's %d "
                              "(generation_batch_size %d / num_generations %d)"
                              % (len(self.train_dataset), self.batch_prompts,
                                 c.generation_batch_size, c.num_generations), "GRPOTrainer")
            total = math.ceil(c.num_train_epochs * per_epoch) * mu
        return total

    # -- data ------------------------------------------------------------------------
    def _rows(self, rows, what):
        rows = list(rows)
        if not rows:
            raise invalid("%s is empty" % what, "GRPOTrainer")
        fields = None
        for i, r in enumerate(rows):
            if not isinstance(r, dict) or "prompt" not in r:
                raise invalid("%s row %d must be a dict with a \"prompt\"" % (what, i),
                              "GRPOTrainer")
            if fields is None:
                fields = set(r)
            elif set(r) != fields:
                raise invalid("%s row %d has fields %s, row 0 %s"
                              % (what, i, sorted(r), sorted(fields)), "GRPOTrainer")
        return rows

    def _chat_template(self):
        if self._template is None:
            t = self._chat_template_arg
            if isinstance(t, ChatTemplate):
                self._template = t
            elif isinstance(t, str):
                try:
                    self._template = ChatTemplate.from_name(t)
                except Error:
                    self._template = ChatTemplate.from_source(t)
            else:
                try:
                    self._template = ChatTemplate.from_tokenizer(self.tokenizer)
                except Error as e:
                    raise invalid("conversational prompts need a chat template, and the "
                                  "tokenizer has none (%s): pass chat_template= (a name such as "
                                  "\"chatml\" or \"plain\", a Jinja source, or a ChatTemplate)"
                                  % e.message, "GRPOTrainer") from None
        return self._template

    def _encode(self, prompt):
        if _is_messages(prompt):
            # TRL's conversational prompt: the chat template with the
            # generation prompt (apply_chat_template(..., add_generation_prompt=True))
            ids = self._chat_template().render_ids(self.tokenizer, prompt,
                                                   add_generation_prompt=True, numpy=False,
                                                   **self._chat_kwargs).ids
        else:
            ids = encode_prompts(prompt, self.tokenizer, self.add_special, "GRPOTrainer")
        ids = [int(t) for t in ids]
        if not ids:
            raise invalid("a prompt encodes to no tokens", "GRPOTrainer")
        if self.max_prompt_length is not None and len(ids) > self.max_prompt_length:
            ids = ids[-self.max_prompt_length:]    # TRL 0.x: the prompt's end is kept
        return ids

    # -- scoring -----------------------------------------------------------------------
    def _log_metric(self, name, value):
        """TRL's log_metric(name, value): averaged into the step's metrics."""
        self._pending_metrics[str(name)].append(float(value))

    def _log_extra(self, column, values):
        """TRL's log_extra(column, values): one value per completion, kept in
        the step's metrics under "extra"."""
        self._pending_extra[str(column)].extend(list(values))

    def _score(self, rows, prompts_in, gens_per_prompt):
        """Call every reward function once on the completions of rows (each
        a list of Generations) with TRL's arguments: prompts, completions
        (text, or [{"role": "assistant", "content": text}] for conversational
        prompts), completion_ids, every other column of the rows, and
        trainer_state, log_metric, log_extra.  Returns {name: values} in
        sample order."""
        prompts, completions, completion_ids = [], [], []
        keys = [] if self.remove_unused_columns else [f for f in rows[0] if f != "prompt"]
        for f in keys:
            if f in _RESERVED:
                raise invalid("row field %r would hide the reward function's own argument"
                              % f, "GRPOTrainer")
        columns = {f: [] for f in keys}
        for row, prompt, gens in zip(rows, prompts_in, gens_per_prompt):
            conv = _is_messages(prompt)
            for g in gens:
                prompts.append(prompt)
                completion_ids.append(list(g.tokens))
                text = self.tokenizer.decode(g.tokens, skip_special=True)
                completions.append([{"role": "assistant", "content": text}] if conv else text)
                for f in keys:
                    columns[f].append(row[f])
        columns.update(trainer_state=self.state, log_metric=self._log_metric,
                       log_extra=self._log_extra)
        out = {}
        for fn, name in zip(self.reward_funcs, self.reward_names):
            out[name] = call_reward(fn, name, prompts, completions, completion_ids, columns)
        return out

    def _prompt_text(self, row, ids):
        """What a reward function gets as the row's prompt: the text or the
        messages as given, else (ids) the decoded ids."""
        p = row["prompt"]
        return p if isinstance(p, str) or _is_messages(p) else \
            self.tokenizer.decode(ids, skip_special=True)

    # -- one round ---------------------------------------------------------------------
    def _round(self):
        step = self.round + 1
        t_start = time.perf_counter()
        idx = self._order.next(self.batch_prompts)
        rows = [self.train_dataset[i] for i in idx]
        prompt_ids = [self._train_ids[i] for i in idx]
        G = self.num_generations
        buf = self.buffer
        buf.clear()
        t0 = time.perf_counter()
        seed = (self.seed * 1000003 + step) & _MASK64   # as posttrain grpo
        gens = buf.add_rollouts(self.model, prompt_ids, G, seed=seed, **self._gen_options())
        t_gen = time.perf_counter() - t0

        t0 = time.perf_counter()
        # The buffer was cleared: its groups are 0 .. P-1, in the order of rows,
        # and its samples in the order of the generations.
        texts = [self._prompt_text(r, p) for r, p in zip(rows, prompt_ids)]
        self._pending_metrics.clear()
        self._pending_extra.clear()
        scores = self._score(rows, texts, gens)
        for k, name in enumerate(self.reward_names):
            buf.score(k, lambda samples, v=scores[name]: v)
        t_score = time.perf_counter() - t0

        t0 = time.perf_counter()
        if self.ref_model is not None:
            buf.compute_logprobs(self.ref_model, old=False, ref=True,
                                 temperature=self.grpo_options["temperature"])
        iters = self.num_iterations
        if self._trl:
            # TRL stops at max_steps optimizer steps, inside a generation batch's iterations
            iters = max(1, min(iters, self._max_steps - self.round * self._unit))
        # the round's updates as posttrain grpo makes them (pt_grpo_round_update:
        # TRL's adaptive entropy control carried in grpo_options); every
        # function declining every completion: the step skips (skip_reason
        # no_rewards), the optimizer's count unchanged
        stats, last, updates, loss_sum = _round_update(self.optimizer, buf, self.grpo_options, iters)
        losses = [loss_sum / updates]
        t_train = time.perf_counter() - t0
        self.round = step
        prev_step = self.state.global_step
        self.state.global_step = min(step * self._unit, self._max_steps) if self._trl else step
        if self._trl:
            per_epoch = max(1, len(self.train_dataset) // self.batch_prompts) * self._unit
            self.state.epoch = self.state.global_step / per_epoch

        m = {"round": step}
        m.update(self._step_metrics(stats, last, losses))
        for name, vals in sorted(self._pending_metrics.items()):
            m[name] = sum(vals) / len(vals)
        if self._pending_extra:
            m["extra"] = dict(self._pending_extra)
        gs = self.state.global_step

        def due(every):
            return every and (gs // every) != (prev_step // every)
        t_eval = 0.0
        if due(self.eval_every) and self.eval_dataset is not None:
            t0 = time.perf_counter()
            m.update(self.evaluate())
            t_eval = time.perf_counter() - t0
        m["time/generation"] = t_gen
        m["time/scoring"] = t_score
        m["time/training"] = t_train
        m["time/evaluation"] = t_eval
        if self._run is not None:
            # the metrics row before the checkpoint that covers it
            gen_tokens = sum(len(g.tokens) for gs in gens for g in gs)
            self._run.log(self._metrics_row(m, time.perf_counter() - t_start, stats, last,
                                            gen_tokens / t_gen if t_gen > 0 else 0.0))
        gp = self.goodput
        if gp is not None:
            # the round's time for goodput (kept once a checkpoint holds it)
            gp.add("generate", t_gen)
            gp.add("step", t_score + t_train)
            if t_eval:
                gp.add("eval", t_eval)
            gp.step_done()
        t_save = 0.0
        if due(self.save_every):
            t0 = time.perf_counter()
            m["checkpoint"] = self.save_checkpoint()
            t_save = time.perf_counter() - t0
            if gp is not None:
                gp.add("save", t_save)
        m["time/saving"] = t_save
        m["time/round"] = time.perf_counter() - t_start
        if self._trl:
            self._pending_log.append(m)
            if due(self.log_every) or (self._log_first and gs == 1) or gs >= self._max_steps:
                self._log()
        return m

    def _c_stats(self, st):
        """A GrpoStats as the C pt_grpo_stats it was read from."""
        c = _CGrpoStats.new()
        for f in _CGrpoStats.field_names():
            if f not in ("size", "reward_func_mean", "reward_func_std"):
                setattr(c, f, getattr(st, f))
        for k, name in enumerate(self.reward_names):
            c.reward_func_mean[k] = st.reward_func_mean[name]
            c.reward_func_std[k] = st.reward_func_std[name]
        return c

    def _metrics_row(self, m, seconds, first, last, gen_tps):
        """A round's row of output_dir/metrics.jsonl: the library's row of
        the round (pt_grpo_metrics_row: posttrain grpo's keys in its order,
        "step" the round, "lr" the learning rate, "step_seconds" the round's
        time), then "global_step" TRL's count, "optimizer_step" the
        optimizer's and the round's other metrics (time/..., eval/...,
        log_metric's); the round's own numbers at full precision."""
        names = [n.encode("utf-8") for n in self.reward_names]
        c_names = (ctypes.c_char_p * max(1, len(names)))(*names)
        cf, cl = self._c_stats(first), self._c_stats(last)
        o = _grpo_options(self.grpo_options)
        mm = GrpoMetrics.new()
        mm.step = m["round"]
        mm.first = ctypes.addressof(cf)
        mm.last = ctypes.addressof(cl)
        mm.grpo = ctypes.addressof(o)
        mm.n_reward_funcs = len(names)
        mm.reward_names = c_names
        mm.loss = m["loss"]
        mm.gen_tokens_per_s = gen_tps
        mm.train_tokens_per_s = first.tokens_per_second if last.train_seconds > 0 else 0.0
        mm.step_seconds = seconds
        out = ctypes.c_void_p()
        check(lib.pt_grpo_metrics_row(ctypes.byref(out), ctypes.byref(mm)), "pt_grpo_metrics_row")
        row = json.loads(_take_string(out))
        row["global_step"] = self.state.global_step
        row["optimizer_step"] = m["step"]
        for k, v in m.items():
            if k not in ("round", "step", "checkpoint"):
                row["lr" if k == "learning_rate" else k] = v
        return row

    def _log(self):
        """TRL's logging: the mean of each number over the steps since the
        last log, with "step" and "epoch", into state.log_history; printed
        unless disable_tqdm, and given to the callbacks' on_log."""
        rows, self._pending_log = self._pending_log, []
        if not rows:
            return
        keys = [k for k, v in rows[-1].items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
                and k not in ("round", "step", "tokens")]
        out = {}
        for k in keys:
            vals = [r[k] for r in rows if k in r and not _isnan(r[k])]
            out[k] = sum(vals) / len(vals) if vals else math.nan
        out["epoch"] = self.state.epoch
        out["step"] = self.state.global_step
        self.state.log_history.append(out)
        if self._print_logs:
            print({k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()},
                  flush=True)
        for cb in self.callbacks:
            on_log = getattr(cb, "on_log", None)
            if on_log is not None:
                on_log(self.args, self.state, None, logs=out)

    def _gen_options(self):
        return {k: v for k, v in self.generate_options.items() if v is not None}

    def _step_metrics(self, first, last, losses):
        m = {"reward": first.reward, "reward_std": first.reward_std}
        for name in self.reward_names:
            m["rewards/%s/mean" % name] = first.reward_func_mean[name]
            m["rewards/%s/std" % name] = first.reward_func_std[name]
        m["frac_reward_zero_std"] = first.frac_reward_zero_std
        m["completions/mean_length"] = first.completion_mean_length
        m["completions/min_length"] = first.completion_min_length
        m["completions/max_length"] = first.completion_max_length
        m["completions/clipped_ratio"] = first.clipped_ratio
        m["loss"] = sum(losses) / len(losses)
        m["kl"] = last.kl
        m["entropy"] = last.entropy
        m["clip_ratio/low_mean"] = last.clip_ratio_low
        m["clip_ratio/high_mean"] = last.clip_ratio_high
        m["clip_ratio/region_mean"] = last.clip_ratio_region
        m["grad_norm"] = last.grad_norm
        m["learning_rate"] = last.lr
        m["tokens"] = last.tokens
        m["step"] = last.step
        m["skipped"] = bool(last.skipped)
        m["skip_reason"] = str(last.skip_reason)
        return m

    # -- the loop ----------------------------------------------------------------------
    def train(self, resume_from_checkpoint=None, rounds=None, **kwargs):
        """Run until `rounds` rounds are done in all (default: TRL's length,
        max_steps or num_train_epochs, for a trainer built with a GRPOConfig;
        one pass over train_dataset for the older keywords), after resuming
        from a checkpoint when resume_from_checkpoint is a path (or True:
        the latest in output_dir; a fresh start when there is none).  A
        trainer built TRL's way returns TrainOutput(global_step,
        training_loss, metrics); one built with the older keywords the
        metrics of the rounds run now.  Every round's metrics are also
        appended to self.metrics."""
        if kwargs:
            raise invalid("train: unknown argument(s) %s" % ", ".join(sorted(kwargs)),
                          "GRPOTrainer.train")
        if isinstance(resume_from_checkpoint, int) and not isinstance(resume_from_checkpoint, bool):
            rounds, resume_from_checkpoint = resume_from_checkpoint, None   # train(N)
        self._resume(resume_from_checkpoint)
        if rounds is None:
            rounds = self._default_rounds
        t0 = time.perf_counter()
        if self._eval_on_start and self.round == 0:
            self.state.log_history.append(dict(self.evaluate(), step=0, epoch=0.0))
        out = []
        while self.round < int(rounds):
            m = self._round()
            out.append(m)
            self.metrics.append(m)
            if self.callback is not None:
                self.callback(m)
        if not self._trl:
            return out
        self._log()
        losses = [m["loss"] for m in out if not _isnan(m["loss"])]
        runtime = time.perf_counter() - t0
        loss = sum(losses) / len(losses) if losses else math.nan
        metrics = {"train_runtime": runtime, "train_loss": loss, "epoch": self.state.epoch,
                   "train_steps_per_second": len(out) * self._unit / runtime if runtime else 0.0}
        self.state.log_history.append(dict(metrics, step=self.state.global_step))
        return TrainOutput(self.state.global_step, loss, metrics)

    def _resume(self, resume_from_checkpoint):
        """The run directory (output_dir), opened at the first train() and
        held until close(): a fresh run (a trainer built with a GRPOConfig
        replaces an earlier run in it, as transformers does; with the older
        keywords a used directory is refused), or resumed (run.resume_trainer)."""
        resume_trainer(self, resume_from_checkpoint, "GRPOTrainer.train", self._start)

    def evaluate(self, eval_dataset=None):
        """Sample num_generations_eval completions of each evaluation row
        (the same seed every time, so evaluations compare) and report the
        mean of each reward function (NaN: every completion declined) and
        of the weighted sum, under "eval/..." keys.  No training."""
        rows = self._rows(eval_dataset, "eval_dataset") if eval_dataset is not None \
            else self.eval_dataset
        if rows is None:
            raise invalid("no eval_dataset", "GRPOTrainer.evaluate")
        ids = ([self._encode(r["prompt"]) for r in rows] if eval_dataset is not None
               else self._eval_ids)
        G = self.num_generations_eval
        flat = [p for p in ids for _ in range(G)]
        out = self.model.generate(flat, logprobs=False,
                                  seed=(self.seed * 1000003 + 0x5EED) & _MASK64,
                                  **self._gen_options())
        gens = [out[i * G:(i + 1) * G] for i in range(len(rows))]
        scores = self._score(rows, [self._prompt_text(r, p) for r, p in zip(rows, ids)], gens)
        m = {}
        n = len(flat)
        total = [0.0] * n
        scored = [False] * n
        for name, w in zip(self.reward_names, self.reward_weights):
            vals = scores[name]
            ok = [v for v in vals if not _isnan(v)]
            m["eval/rewards/%s/mean" % name] = sum(ok) / len(ok) if ok else math.nan
            for i, v in enumerate(vals):
                if not _isnan(v):
                    total[i] += w * v
                    scored[i] = True
        rs = [t for t, s in zip(total, scored) if s]
        m["eval/reward"] = sum(rs) / len(rs) if rs else math.nan
        m["eval/completions/mean_length"] = sum(len(g.tokens) for g in out) / n
        return m

    # -- the run directory and checkpoints (the CLI's layout) -------------------------
    def _run_state(self):
        """The run state of now (pt_run_state): the round is the run's step."""
        st = RunState.new()
        st.step = self.round
        st.optimizer_steps = self.optimizer.step_count
        st.epoch = self._order.passes
        st.seed = self.seed
        self._order.save(st)   # rng, order_rng, cursor, rows
        return st

    def _fields(self):
        """The GRPO fields a checkpoint records and a resume checks, as
        posttrain grpo's (pt_grpo_run_fields), with the C options they point to."""
        f = GrpoRunFields.new()
        f.num_generations = self.num_generations
        f.batch_prompts = self.batch_prompts
        f.num_iterations = self.num_iterations
        o = _grpo_options(self.grpo_options)
        f.grpo = ctypes.addressof(o)
        return f, o

    def _run_extra(self):
        """The host's own fields of a checkpoint: those `posttrain grpo` writes
        (model, lora; the library's pt_grpo_run_extra: num_generations,
        batch_prompts, num_iterations, the adaptive entropy state) and this
        trainer's (data_seed, shuffle, global_step)."""
        h = {"model": os.path.realpath(self._model_path) if self._model_path else "",
             "data_seed": str(self.data_seed), "shuffle": self.shuffle,
             "global_step": self.state.global_step, "trainer": "posttrain.GRPOTrainer"}
        lora = _lora_host(self.model)
        if lora:
            h["lora"] = lora
        f, _o = self._fields()
        out = ctypes.c_void_p()
        check(lib.pt_grpo_run_extra(ctypes.byref(out), json.dumps(h).encode(), ctypes.byref(f)),
              "pt_grpo_run_extra")
        return json.loads(_take_string(out))

    def _resume_fields(self, state, extra, path):
        """The checks posttrain grpo makes on resume (pt_grpo_run_resume: the
        batch shape, the prompt order, the optimizer's step count, the
        adaptive entropy state read back); InvalidArgument naming what differs."""
        f, o = self._fields()
        rep = GrpoResumeReport.new()
        st = lib.pt_grpo_run_resume(ctypes.byref(rep), json.dumps(extra).encode(), ctypes.byref(state),
                                    self._order._h, self.optimizer.step_count, ctypes.byref(f))
        fault = lib.pt_grpo_resume_fault_name(rep.fault).decode()
        if fault == "none":
            check(st, "pt_grpo_run_resume")
        else:
            lib.pt_clear_error()
            key = rep.key.decode() if rep.key else None
            msg = {"missing": "%s does not record %r (not a checkpoint of a GRPO run)" % (path, key),
                   "shape": "%s was made with %s %r, this trainer has %r: resume with the same data "
                            "and settings" % (path, key, rep.saved, rep.want),
                   "rows": "%s was made with rows %r, this trainer has %r: resume with the same "
                           "data and settings" % (path, rep.saved, rep.want),
                   "optimizer": "%s: the optimizer's step count %d does not match the recorded %d"
                                % (path, rep.want, rep.saved),
                   "entropy": "%s has no entropy_coef (made without use_adaptive_entropy)" % path}
            raise invalid(msg.get(fault, "%s: its prompt order state is inconsistent" % path),
                          "GRPOTrainer.load_checkpoint")
        if self.grpo_options.get("use_adaptive_entropy"):
            self.grpo_options["entropy_coef"] = o.entropy_coef
            self.grpo_options["entropy_last"] = o.entropy_last

    def _refuse_old_layout(self, path=None):
        """Checkpoints of the older layout (output_dir/checkpoint-R) are not
        read: say so rather than start afresh beside them."""
        old = []
        if path is not None:
            if _OLD_CKPT_RE.match(os.path.basename(os.path.normpath(os.fspath(path)))):
                old.append(os.fspath(path))
        elif self.output_dir is not None and os.path.isdir(self.output_dir):
            old = [os.path.join(self.output_dir, e) for e in sorted(os.listdir(self.output_dir))
                   if _OLD_CKPT_RE.match(e)]
        for d in old:
            try:
                with open(os.path.join(d, "trainer_state.json"), encoding="utf-8") as f:
                    kind = (json.load(f).get("host") or {}).get("kind")
            except (OSError, ValueError, AttributeError):
                continue
            if kind == _OLD_KIND:
                raise invalid("%s is a checkpoint of the older GRPOTrainer layout "
                              "(output_dir/checkpoint-R), which this version does not read: "
                              "checkpoints are now output_dir/checkpoints/step-NNNNNNNN, as "
                              "posttrain grpo writes them (docs/python.md); finish that run "
                              "with the posttrain that wrote it, or start a new one in "
                              "another output_dir" % d, "GRPOTrainer")

    def _open_run(self, start, resume_from=None):
        """Hold output_dir as the run directory (its lock, metrics file,
        checkpoints with retention) until close()."""
        self._refuse_old_layout(resume_from)
        if start in ("auto", "from"):
            self._refuse_old_layout()
        _make_parent(self.output_dir)
        if self.goodput is None:
            self.goodput = _new_goodput()
        self._run = Run(self.output_dir, _KIND, start=start, resume_from=resume_from,
                        inputs=[("model", self._model_path, True)],
                        keep_last=self._save_total_limit or 0, goodput=self.goodput)
        return self._run

    def _apply(self, state, extra, path):
        """Continue from a loaded checkpoint's run state and host fields:
        the same data and settings (InvalidArgument naming what differs)."""
        have = {"rows": (state.rows, len(self.train_dataset)), "seed": (state.seed, self.seed),
                "data_seed": (int(extra.get("data_seed", state.seed)), self.data_seed),
                "shuffle": (extra.get("shuffle", True), self.shuffle)}
        for key, (saved, now) in have.items():
            if saved != now:
                raise invalid("%s was made with %s %r, this trainer has %r: resume with the same "
                              "data and settings" % (path, key, saved, now),
                              "GRPOTrainer.load_checkpoint")
        # the batch shape, the prompt order (rebuilt from the state before
        # its shuffle), the optimizer's count and the entropy controller
        self._resume_fields(state, extra, path)
        self.round = int(state.step)
        if "global_step" in extra:
            self.state.global_step = int(extra["global_step"])
        else:   # a checkpoint of posttrain grpo: rounds of num_iterations updates
            self.state.global_step = (min(self.round * self._unit, self._max_steps)
                                      if self._trl else self.round)
        if self._trl:
            per_epoch = max(1, len(self.train_dataset) // self.batch_prompts) * self._unit
            self.state.epoch = self.state.global_step / per_epoch
        h = dict(extra)
        h.update(command=_KIND, step=self.round, optimizer_steps=state.optimizer_steps,
                 cursor=state.cursor, rows=state.rows, seed=str(state.seed),
                 order_rng=str(state.order_rng), rng=str(state.rng), epoch=state.epoch)
        return h

    def save_checkpoint(self, path=None):
        """Save the weights, the optimizer and the run's position: by default
        as output_dir/checkpoints/step-NNNNNNNN (NNNNNNNN the round, as
        `posttrain grpo` numbers its steps) through the run layer, the
        checkpoints beyond save_total_limit removed (the latest kept); or to
        `path`.  Returns the path."""
        _require_run("GRPOTrainer.save_checkpoint")
        if path is None:
            if self.output_dir is None:
                raise invalid("save_checkpoint needs a path or output_dir",
                              "GRPOTrainer.save_checkpoint")
            if self._run is None:
                # outside train(): the directory as it is (nothing removed)
                self._open_run("auto")
            return self._run.save(self.model, self.optimizer, self._run_state(), self._run_extra())
        host = json.loads(run_state_to_json(self._run_state(), _KIND, self._run_extra()))
        save_checkpoint(path, self.model, self.optimizer, host)
        return os.fspath(path)

    def latest_checkpoint(self):
        """The checkpoint of output_dir/checkpoints with the highest step, or None."""
        if self.output_dir is None:
            return None
        d = os.path.join(self.output_dir, "checkpoints")
        if not os.path.isdir(d):
            return None
        found = [(int(mm.group(1)), e) for e in os.listdir(d) for mm in [_CKPT_RE.match(e)] if mm]
        return os.path.join(d, max(found)[1]) if found else None

    def load_checkpoint(self, path):
        """Restore weights, optimizer and run position from a checkpoint of
        a GRPO run (this trainer's or `posttrain grpo`'s) with the same data
        and settings (InvalidArgument naming what differs; the checksums are
        verified first).  Returns its host fields as a dict."""
        _require_run("GRPOTrainer.load_checkpoint")
        self._refuse_old_layout(path)
        state = RunState.new()
        extra = ctypes.c_void_p()
        check(lib.pt_run_load_checkpoint(ctypes.byref(state), ctypes.byref(extra),
                                         self.model._ptr, self.optimizer._ptr, os.fsencode(path),
                                         _KIND.encode()), "pt_run_load_checkpoint")
        e = _take_string(extra)
        return self._apply(state, json.loads(e) if e else {}, path)

    def save_model(self, path=None):
        """The trained model in Hugging Face layout (default output_dir)."""
        path = path if path is not None else self.output_dir
        if path is None:
            raise invalid("save_model needs a path or output_dir", "GRPOTrainer.save_model")
        if has_feature("run"):   # never into the model it started from
            check_output("save_model's path", path, "model", self._model_path, True)
        self.model.save(path)

    def close(self):
        """Release the run directory (its lock), free the rollout buffer and
        the optimizer; the model stays open unless the trainer loaded it
        (model given as a path)."""
        if self._run is not None:
            self._run.close()
            self._run = None
        if self.goodput is not None:
            self.goodput.close()
            self.goodput = None
        self.buffer.close()
        self.optimizer.close()
        if self._template is not None and self._template is not self._chat_template_arg:
            self._template.close()
        if self._own_model:
            self.model.close()
        if self._own_ref:
            self.ref_model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
