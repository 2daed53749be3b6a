"""A GRPO training loop in TRL's shape (GRPOTrainer): a model, a dataset of
rows {"prompt": ..., other fields}, reward functions
fn(prompts, completions, completion_ids, **fields) -> [float | None], and
options; each round generates, scores, steps, evaluates and saves, and
reports its metrics with the time split into generation, scoring, training,
evaluation and saving.  A checkpoint holds the weights, the optimizer and
the round, prompt order and random state, so resuming continues the run
bit for bit.

    trainer = pt.GRPOTrainer(model, [correct, short], rows, num_generations=8,
                             batch_prompts=4, learning_rate=1e-5, output_dir="out",
                             save_every=10)
    history = trainer.train(rounds=100)     # or resume_from_checkpoint=True

Built on RolloutBuffer, grpo_step and save_checkpoint / load_checkpoint
(feature "grpo"); see docs/python.md and docs/grpo.md.
"""

import math
import os
import re
import time

from .errors import invalid
from .generate import encode_prompts
from .grpo import MAX_REWARD_FUNCS, RolloutBuffer, call_reward, grpo_step, _require
from .train import Optimizer, load_checkpoint, save_checkpoint

__all__ = ["GRPOTrainer"]

_MASK64 = (1 << 64) - 1
# What a checkpoint's host data is recognised by.
_KIND = "posttrain.GRPOTrainer"
_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def _splitmix(state):
    """splitmix64: (next state, value)."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return state, z ^ (z >> 31)


def _isnan(x):
    return x != x


class GRPOTrainer:
    """GRPO over a list of rows from Python, one generation round at a time.

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
    output_dir, save_every: a checkpoint every save_every rounds into
        output_dir/checkpoint-R (R the round), never overwriting one.
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

    def __init__(self, model, reward_funcs, train_dataset, tokenizer=None, reward_weights=None,
                 eval_dataset=None, num_generations=8, num_generations_eval=None,
                 batch_prompts=4, max_new_tokens=64, temperature=1.0, top_k=None, top_p=None,
                 min_p=None, stop_ids=None, num_iterations=1, learning_rate=1e-6,
                 optimizer=None, grpo=None, ref_model=None, seed=0, shuffle=True,
                 add_special=True, output_dir=None, save_every=0, eval_every=0, callback=None,
                 bf16=False):
        _require()
        if bf16:
            # TRL's bf16=True: mixed precision where the CPU has BF16
            # arithmetic, a frozen base (LoRA) and the reference in BF16
            model.bf16 = True
            if ref_model is not None:
                ref_model.bf16 = "frozen"
        self.model = model
        self.tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        if self.tokenizer is None:
            raise invalid("GRPOTrainer needs a tokenizer (the model has none: pass tokenizer=)",
                          "GRPOTrainer")
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
        self.reward_weights = ([float(w) for w in reward_weights] if reward_weights is not None
                               else [1.0] * len(funcs))
        if len(self.reward_weights) != len(funcs):
            raise invalid("%d reward weights for %d reward functions"
                          % (len(self.reward_weights), len(funcs)), "GRPOTrainer")
        self.add_special = bool(add_special)
        self.train_dataset = self._rows(train_dataset, "train_dataset")
        self.eval_dataset = (self._rows(eval_dataset, "eval_dataset")
                             if eval_dataset is not None else None)
        self._train_ids = [self._encode(r["prompt"]) for r in self.train_dataset]
        self._eval_ids = ([self._encode(r["prompt"]) for r in self.eval_dataset]
                          if self.eval_dataset is not None else None)
        self.num_generations = int(num_generations)
        if self.num_generations < 2:
            raise invalid("num_generations %d: GRPO needs at least 2 completions per prompt"
                          % self.num_generations, "GRPOTrainer")
        self.num_generations_eval = int(num_generations_eval or self.num_generations)
        self.batch_prompts = int(batch_prompts)
        if self.batch_prompts < 1:
            raise invalid("batch_prompts must be >= 1", "GRPOTrainer")
        self.num_iterations = int(num_iterations)
        if self.num_iterations < 1:
            raise invalid("num_iterations must be >= 1", "GRPOTrainer")
        self.generate_options = dict(max_new_tokens=int(max_new_tokens),
                                     temperature=float(temperature), top_k=top_k, top_p=top_p,
                                     min_p=min_p, stop_ids=stop_ids)
        self.grpo_options = dict(grpo or {})
        self.grpo_options.setdefault("max_completion_length", int(max_new_tokens))
        self.grpo_options.setdefault("temperature", float(temperature) if temperature > 0 else 1.0)
        if self.grpo_options.get("beta", 0) > 0 and ref_model is None and not model.has_lora:
            raise invalid("beta > 0 needs ref_model= (the frozen reference policy), or a model "
                          "with LoRA adapters (the frozen base is the reference)", "GRPOTrainer")
        self.ref_model = ref_model
        self.seed = int(seed) & _MASK64
        self.shuffle = bool(shuffle)
        self.output_dir = os.fspath(output_dir) if output_dir is not None else None
        self.save_every = int(save_every)
        self.eval_every = int(eval_every)
        if self.save_every and self.output_dir is None:
            raise invalid("save_every needs output_dir", "GRPOTrainer")
        self.callback = callback
        self.optimizer = Optimizer(model, lr=float(learning_rate), **dict(optimizer or {}))
        self.buffer = RolloutBuffer(self.reward_names, self.reward_weights)
        # The run's position: rounds done, and the prompt order (rng the
        # splitmix state now, order_rng its state before the shuffle that
        # made `order`; the order is rebuilt from it on resume).
        self.round = 0
        self._rng = self._order_rng = self.seed ^ 0x6A09E667F3BCC908
        self._order = []
        self._cursor = 0
        self._new_pass()
        self.metrics = []

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

    def _encode(self, prompt):
        ids = encode_prompts(prompt, self.tokenizer, self.add_special, "GRPOTrainer")
        ids = [int(t) for t in ids]
        if not ids:
            raise invalid("a prompt encodes to no tokens", "GRPOTrainer")
        return ids

    def _new_pass(self):
        n = len(self.train_dataset)
        self._order_rng = self._rng
        order = list(range(n))
        if self.shuffle:
            for i in range(n - 1, 0, -1):
                self._rng, z = _splitmix(self._rng)
                j = z % (i + 1)
                order[i], order[j] = order[j], order[i]
        self._order = order
        self._cursor = 0

    def _next_rows(self):
        out = []
        for _ in range(self.batch_prompts):
            if self._cursor == len(self._order):
                self._new_pass()
            out.append(self._order[self._cursor])
            self._cursor += 1
        return out

    # -- scoring -----------------------------------------------------------------------
    def _score(self, rows, prompt_texts, gens_per_prompt):
        """Call every reward function on the completions of rows (each a list
        of Generations), as RolloutBuffer.score_completions does.  Returns
        {name: values} in sample order."""
        prompts, completions, completion_ids = [], [], []
        columns = {f: [] for f in rows[0] if f != "prompt"}
        for f in columns:
            if f in ("prompts", "completions", "completion_ids"):
                raise invalid("row field %r would hide the reward function's own argument"
                              % f, "GRPOTrainer")
        for row, text, gens in zip(rows, prompt_texts, gens_per_prompt):
            for g in gens:
                prompts.append(text)
                completion_ids.append(list(g.tokens))
                completions.append(self.tokenizer.decode(g.tokens, skip_special=True))
                for f in columns:
                    columns[f].append(row[f])
        out = {}
        for fn, name in zip(self.reward_funcs, self.reward_names):
            vals = call_reward(fn, name, prompts, completions, completion_ids, columns)
            out[name] = vals
        return out

    def _prompt_text(self, row, ids):
        p = row["prompt"]
        return p if isinstance(p, str) else self.tokenizer.decode(ids, skip_special=True)

    # -- one round ---------------------------------------------------------------------
    def _round(self):
        step = self.round + 1
        t_start = time.perf_counter()
        idx = self._next_rows()
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
        # The buffer was cleared: its groups are 0 .. P-1, in the order of rows.
        texts = [self._prompt_text(r, p) for r, p in zip(rows, prompt_ids)]
        for k, fn in enumerate(self.reward_funcs):
            buf.score_completions(k, fn, self.tokenizer, rows=rows, prompts=texts)
        t_score = time.perf_counter() - t0

        t0 = time.perf_counter()
        stats = None
        losses = []
        if self.ref_model is not None:
            buf.compute_logprobs(self.ref_model, old=False, ref=True,
                                 temperature=self.grpo_options["temperature"])
        for _ in range(self.num_iterations):
            # every function declining every completion: the step skips
            # (skip_reason no_rewards), the optimizer's count unchanged
            st = grpo_step(self.optimizer, buf, **self.grpo_options)
            if stats is None:
                stats = st
            last = st
            losses.append(st.loss)
        t_train = time.perf_counter() - t0
        self.round = step

        m = {"round": step}
        m.update(self._step_metrics(stats, last, losses))
        t_eval = 0.0
        if self.eval_every and step % self.eval_every == 0 and self.eval_dataset is not None:
            t0 = time.perf_counter()
            m.update(self.evaluate())
            t_eval = time.perf_counter() - t0
        t_save = 0.0
        if self.save_every and step % self.save_every == 0:
            t0 = time.perf_counter()
            m["checkpoint"] = self.save_checkpoint()
            t_save = time.perf_counter() - t0
        m["time/generation"] = t_gen
        m["time/scoring"] = t_score
        m["time/training"] = t_train
        m["time/evaluation"] = t_eval
        m["time/saving"] = t_save
        m["time/round"] = time.perf_counter() - t_start
        return m

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
    def train(self, rounds=None, resume_from_checkpoint=None):
        """Run until `rounds` rounds are done in all (default: one pass over
        train_dataset, rounded up), after resuming from a checkpoint when
        resume_from_checkpoint is a path (or True: the latest in
        output_dir; a fresh start when there is none).  Returns the metrics
        of the rounds run now (also appended to self.metrics)."""
        if resume_from_checkpoint:
            path = resume_from_checkpoint
            if path is True:
                path = self.latest_checkpoint()
            if path is not None:
                self.load_checkpoint(path)
        if rounds is None:
            rounds = -(-len(self.train_dataset) // self.batch_prompts)
        out = []
        while self.round < int(rounds):
            m = self._round()
            out.append(m)
            self.metrics.append(m)
            if self.callback is not None:
                self.callback(m)
        return out

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

    # -- checkpoints -------------------------------------------------------------------
    def _host_data(self):
        return {"kind": _KIND, "round": self.round, "rng": str(self._rng),
                "order_rng": str(self._order_rng), "cursor": self._cursor,
                "rows": len(self.train_dataset), "seed": str(self.seed),
                "batch_prompts": self.batch_prompts, "num_generations": self.num_generations,
                "shuffle": self.shuffle, "optimizer_step": self.optimizer.step_count}

    def save_checkpoint(self, path=None):
        """Save the weights, the optimizer and the run's position to path
        (default output_dir/checkpoint-R); returns the path."""
        if path is None:
            if self.output_dir is None:
                raise invalid("save_checkpoint needs a path or output_dir",
                              "GRPOTrainer.save_checkpoint")
            path = os.path.join(self.output_dir, "checkpoint-%d" % self.round)
            os.makedirs(self.output_dir, exist_ok=True)
        save_checkpoint(path, self.model, self.optimizer, self._host_data())
        return os.fspath(path)

    def latest_checkpoint(self):
        """The checkpoint of output_dir with the highest round, or None."""
        if self.output_dir is None or not os.path.isdir(self.output_dir):
            return None
        found = [(int(mm.group(1)), e) for e in os.listdir(self.output_dir)
                 for mm in [_CKPT_RE.match(e)] if mm]
        return os.path.join(self.output_dir, max(found)[1]) if found else None

    def load_checkpoint(self, path):
        """Restore weights, optimizer and run position from a checkpoint of
        a trainer with the same data and settings (InvalidArgument naming
        what differs; the checksums are verified first)."""
        h = load_checkpoint(path, self.model, self.optimizer)
        if not isinstance(h, dict) or h.get("kind") != _KIND:
            raise invalid("%s is not a checkpoint of a posttrain.GRPOTrainer" % path,
                          "GRPOTrainer.load_checkpoint")
        for key, have in (("rows", len(self.train_dataset)), ("seed", str(self.seed)),
                          ("batch_prompts", self.batch_prompts),
                          ("num_generations", self.num_generations), ("shuffle", self.shuffle)):
            if h.get(key) != have:
                raise invalid("%s was made with %s %r, this trainer has %r: resume with the same "
                              "data and settings" % (path, key, h.get(key), have),
                              "GRPOTrainer.load_checkpoint")
        if h["optimizer_step"] != self.optimizer.step_count:
            raise invalid("%s: the optimizer's step count %d does not match the recorded %d"
                          % (path, self.optimizer.step_count, h["optimizer_step"]),
                          "GRPOTrainer.load_checkpoint")
        # Rebuild the pass's order from the state before its shuffle.
        self._rng = int(h["order_rng"])
        self._new_pass()
        if self._rng != int(h["rng"]):
            raise invalid("%s: its prompt order state is inconsistent" % path,
                          "GRPOTrainer.load_checkpoint")
        self._cursor = int(h["cursor"])
        self.round = int(h["round"])
        return h

    def save_model(self, path=None):
        """The trained model in Hugging Face layout (default output_dir)."""
        path = path if path is not None else self.output_dir
        if path is None:
            raise invalid("save_model needs a path or output_dir", "GRPOTrainer.save_model")
        self.model.save(path)

    def close(self):
        """Free the rollout buffer and the optimizer (the model stays open)."""
        self.buffer.close()
        self.optimizer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
