"""The library's built-in GRPO rewards, prompt rows and held-out evaluation
(posttrain/grpo_builtin.h), the ones `posttrain grpo` uses.

    from posttrain.builtin import exact, contains, length, PromptRows, evaluate

exact, contains: reward functions for GRPOTrainer (TRL's shape: completions
and the rows' "answer" column, one float per completion), scored by
pt_builtin_reward_score as the CLI's --reward exact / contains;
length(max_new_tokens) makes the length penalty -(completion tokens /
max_new_tokens).  Their __name__ are the CLI's reward names, so the
trainer's metrics carry the CLI's keys (rewards/contains/mean).

PromptRows.load(path, tokenizer, ...): the {"prompt", "answer"} rows of a
JSONL file, encoded as the CLI encodes them (a bad row raises naming its
line); PromptRows.from_rows(rows, tokenizer) the same from dicts.

evaluate(model, rows, rewards, ...): the CLI's --eval: greedy and sampled
completions of the rows scored by the rewards; returns its metrics row as
a dict ("eval/reward_mean_greedy", ...), the numbers `posttrain grpo --eval`
writes for the same rows, rewards, sampling and seed.
"""

import ctypes
import json

from ._handle import Handle, out_handle
from ._lib import (BuiltinRewards, GenerateOptions, GrpoEvalOptions, GrpoEvalSums, PromptRow,
                   PromptRowsOptions, PromptRowsReport, has_feature, lib)
from ._util import int32_array
from .enums import BuiltinReward, RowsFault
from .errors import check, invalid

__all__ = ["exact", "contains", "length", "reward_score", "builtin_rewards", "PromptRows",
           "evaluate", "BuiltinReward", "RowsFault"]


def _require():
    if not has_feature("grpo-builtin"):
        raise invalid("this libposttrain has no built-in GRPO rewards (feature grpo-builtin)",
                      "posttrain.builtin")


def _b(s):
    return s.encode("utf-8") if isinstance(s, str) else s


def _text(c):
    """A completion as text: TRL's [{"role": "assistant", "content": ...}] or a str."""
    if isinstance(c, (list, tuple)):
        return c[-1]["content"] if c else ""
    return c


def reward_score(kind, text, answer=None, completion_tokens=0, max_new_tokens=64):
    """pt_builtin_reward_score: one built-in reward (BuiltinReward or its
    name) of one decoded completion."""
    _require()
    k = BuiltinReward.from_name(kind) if isinstance(kind, str) else BuiltinReward(kind)
    t = _b(text) if text is not None else None
    out = ctypes.c_float()
    check(lib.pt_builtin_reward_score(ctypes.byref(out), int(k), t, len(t) if t is not None else 0,
                                      _b(answer) if answer is not None else None,
                                      int(completion_tokens), int(max_new_tokens)),
          "pt_builtin_reward_score")
    return out.value


def exact(completions, answer, **kwargs):
    """1.0 if the completion (whitespace stripped) equals the answer (stripped), else 0.0."""
    return [reward_score(BuiltinReward.EXACT, _text(c), a) for c, a in zip(completions, answer)]


def contains(completions, answer, **kwargs):
    """1.0 if the answer appears in the completion, else 0.0."""
    return [reward_score(BuiltinReward.CONTAINS, _text(c), a) for c, a in zip(completions, answer)]


def length(max_new_tokens):
    """The length penalty -(completion tokens / max_new_tokens) as a reward function."""
    def length(completion_ids, **kwargs):
        return [reward_score(BuiltinReward.LENGTH, None, None, len(ids), max_new_tokens)
                for ids in completion_ids]
    return length


def builtin_rewards(rewards, max_new_tokens=64):
    """A pt_builtin_rewards from "exact,contains:0.5" (the CLI's --reward),
    a list of names, or a list of (name, weight)."""
    _require()
    if isinstance(rewards, str):
        items = []
        for item in rewards.split(","):
            name, _, w = item.partition(":")
            items.append((name, float(w) if w else 1.0))
    else:
        items = [(r, 1.0) if isinstance(r, str) else tuple(r) for r in rewards]
    rw = BuiltinRewards.new()
    rw.max_new_tokens = int(max_new_tokens)
    for name, w in items:
        check(lib.pt_builtin_rewards_add(ctypes.byref(rw), int(BuiltinReward.from_name(name)), float(w)),
              "pt_builtin_rewards_add")
    return rw


class PromptRows(Handle):
    """The prompt rows of a GRPO data file (pt_prompt_rows)."""

    _free_fn = "pt_prompt_rows_free"
    _kind = "prompt rows"

    @classmethod
    def load(cls, path, tokenizer, chat_template=None, require_answer=False, read_answer=True,
             keep_json=False, messages=False):
        """Every {"prompt", "answer"} row of the JSONL file at path, each
        prompt encoded with tokenizer (its special tokens) or wrapped in
        chat_template (a ChatTemplate) as one user message; messages=True
        also takes rows with "messages" instead of "prompt" (rendered
        with chat_template and the generation prompt).  A bad row
        raises the library's error naming the file and line; .fault and
        .line of the exception say which (RowsFault) and where."""
        _require()
        o = PromptRowsOptions.new()
        o.chat_template = chat_template._ptr if chat_template is not None else None
        o.require_answer = bool(require_answer)
        o.read_answer = bool(read_answer)
        o.keep_json = bool(keep_json)
        o.messages = bool(messages)
        rep = PromptRowsReport.new()
        out = out_handle()
        st = lib.pt_prompt_rows_load(ctypes.byref(out), ctypes.byref(rep), _b(str(path)),
                                     tokenizer._ptr, ctypes.byref(o))
        try:
            check(st, "pt_prompt_rows_load")
        except Exception as e:
            e.fault, e.line = RowsFault(rep.fault), int(rep.line)
            raise
        return cls(out.value)

    @classmethod
    def from_rows(cls, rows, tokenizer=None, add_special=True):
        """Rows from dicts {"prompt": str or ids, "answer": str or absent}
        (a str prompt encoded with tokenizer and its special tokens)."""
        _require()
        out = out_handle()
        check(lib.pt_prompt_rows_create(ctypes.byref(out)), "pt_prompt_rows_create")
        self = cls(out.value)
        for r in rows:
            p = r["prompt"]
            ids = tokenizer.encode(p, add_special=add_special) if isinstance(p, str) else list(p)
            arr, n = int32_array(ids, "prompt ids")
            a = r.get("answer")
            check(lib.pt_prompt_rows_add(self._ptr, arr, n, _b(a) if a is not None else None),
                  "pt_prompt_rows_add")
        return self

    def __len__(self):
        return int(lib.pt_prompt_rows_size(self._ptr))

    @property
    def max_prompt_len(self):
        return int(lib.pt_prompt_rows_max_prompt_len(self._ptr))

    def __getitem__(self, i):
        """Row i as {"ids", "answer", "json"} (answer and json None when absent)."""
        n = len(self)
        if i < 0:
            i += n
        r = PromptRow.new()
        check(lib.pt_prompt_rows_get(ctypes.byref(r), self._ptr, int(i)), "pt_prompt_rows_get")
        return {"ids": list(r.ids[:r.n_ids]),
                "answer": r.answer.decode("utf-8") if r.answer is not None else None,
                "json": r.json.decode("utf-8") if r.json is not None else None}


def evaluate(model, rows, rewards, max_new_tokens=64, temperature=1.0, top_k=0, top_p=1.0,
             samples=1, seed=0, batch=None, step=0, tokenizer=None, generator=None):
    """pt_grpo_evaluate then pt_grpo_eval_row: the metrics row of `posttrain
    grpo --eval` (a dict with "step" and the "eval/..." keys) for rows (a
    PromptRows) and rewards (see builtin_rewards), the sampling of the run
    (max_new_tokens, temperature, top_k, top_p), samples (--eval-samples)
    and seed (--seed).  generator: a Generator to use (default one of
    `batch` rows, default every row, made here)."""
    _require()
    rw = rewards if isinstance(rewards, BuiltinRewards) else builtin_rewards(rewards, max_new_tokens)
    rw.max_new_tokens = int(max_new_tokens)
    tok = tokenizer if tokenizer is not None else model.tokenizer
    if tok is None:
        raise invalid("evaluate needs a tokenizer (the model has none)", "posttrain.builtin.evaluate")
    go = GenerateOptions.new()
    go.max_new_tokens = int(max_new_tokens)
    go.temperature = float(temperature)
    go.top_k = int(top_k)
    go.top_p = float(top_p)
    eo = GrpoEvalOptions.new()
    eo.sampling = ctypes.pointer(go)
    eo.samples = int(samples)
    eo.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    own = generator is None
    gen = generator if generator is not None else model.generator(
        batch or max(1, len(rows)), rows.max_prompt_len + int(max_new_tokens))
    eo.batch = int(batch or 0)
    sums = GrpoEvalSums()
    try:
        check(lib.pt_grpo_evaluate(ctypes.byref(sums), gen._ptr, rows._ptr, tok._ptr, ctypes.byref(rw),
                                   ctypes.byref(eo)), "pt_grpo_evaluate")
    finally:
        if own:
            gen.close()
    text = ctypes.c_void_p()
    check(lib.pt_grpo_eval_row(ctypes.byref(text), ctypes.byref(sums), ctypes.byref(rw), int(samples),
                               int(step)), "pt_grpo_eval_row")
    try:
        return json.loads(ctypes.string_at(text.value).decode("utf-8"))
    finally:
        lib.pt_free(text)
