"""The built-in addition task of `posttrain demo` (posttrain/addition.h):
"a+b=" with both operands written with `digits` digits, answered with the
sum's digits least significant first; the "slip" answer forgets the carries;
one pair in 8 (a fixed hash) is held out for evaluation.  Draws come from a
splitmix64 stream whose state the caller keeps (an int), so a Python host
makes the demo's data from its seed (the demo's teacher stream starts at
seed * 7919 + 17).

    prompt, answer = pt.addition_problem(59, 96, digits=2)     # "59+96=", "551"
    pairs = pt.addition_held_out_pairs(1000, digits=2)
    a, b, slipped, state = pt.addition_teacher_pair(state, digits=2, slip=0.7)
    correct, slipped = pt.addition_score(tokenizer, completion_ids, a, b, digits=2)
    correct, slipped = pt.addition_evaluate(generator, tokenizer, pairs, digits=2)   # the demo's scores
    model = pt.Model.create(pt.addition_model_config(tokenizer), seed)                # the demo's model
    wrong, state = pt.addition_save_traces(dataset, tokenizer, 20000, seed * 7919 + 17, path="t.jsonl")
    with pt.AdditionGrpo(model, tokenizer, digits=2, beta=0.1, seed=seed) as grpo:     # the demo's GRPO
        stats = grpo.step(context, generator)
"""

import ctypes
from os import fsencode

from ._handle import Handle
from ._lib import AdditionEvalOptions, AdditionGrpoOptions, ModelConfig, lib
from ._lib import GrpoStats as _CGrpoStats
from ._util import int32_array
from .enums import LossType, ScaleRewards
from .errors import check, invalid

__all__ = ["addition_problem", "addition_held_out", "addition_train_pair", "addition_teacher_pair",
           "addition_held_out_pairs", "addition_score", "addition_prompt_ids", "addition_evaluate",
           "addition_model_config", "addition_save_traces", "AdditionGrpo"]


def addition_problem(a, b, digits=2, slip=False):
    """(prompt, answer) of a + b: the right answer, or with slip the carries forgotten."""
    p, s = ctypes.create_string_buffer(64), ctypes.create_string_buffer(32)
    check(lib.pt_addition_problem(p, 64, s, 32, digits, a, b, slip), "pt_addition_problem")
    return p.value.decode(), s.value.decode()


def addition_held_out(a, b):
    """Whether the pair is held out (never drawn for training)."""
    return bool(lib.pt_addition_held_out(a, b))


def addition_train_pair(state, digits=2):
    """(a, b, new_state): a training pair drawn from the stream at state."""
    a, b, st = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_uint64(state)
    check(lib.pt_addition_train_pair(ctypes.byref(a), ctypes.byref(b), digits, ctypes.byref(st)),
          "pt_addition_train_pair")
    return a.value, b.value, st.value


def addition_teacher_pair(state, digits=2, slip=0.7):
    """(a, b, slipped, new_state): a teacher's trace, slipping with probability slip."""
    a, b, s, st = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_bool(), ctypes.c_uint64(state)
    check(lib.pt_addition_teacher_pair(ctypes.byref(a), ctypes.byref(b), ctypes.byref(s), digits, slip,
                                       ctypes.byref(st)), "pt_addition_teacher_pair")
    return a.value, b.value, s.value, st.value


def addition_held_out_pairs(n, digits=2):
    """Up to n distinct held-out pairs [(a, b), ...], the same for every seed."""
    buf = (ctypes.c_int64 * (2 * n))()
    got = ctypes.c_size_t()
    check(lib.pt_addition_held_out_pairs(buf, ctypes.byref(got), n, digits), "pt_addition_held_out_pairs")
    return [(buf[2 * i], buf[2 * i + 1]) for i in range(got.value)]


def addition_score(tokenizer, ids, a, b, digits=2):
    """(correct, slipped) of a completion's ids (with the EOS that ended it):
    exactly the answer and EOS, or exactly the slip and EOS where that differs."""
    arr, n = int32_array(ids, "ids")
    ok, sl = ctypes.c_bool(), ctypes.c_bool()
    check(lib.pt_addition_score(ctypes.byref(ok), ctypes.byref(sl), tokenizer._ptr, arr, n, digits, a, b),
          "pt_addition_score")
    return ok.value, sl.value


def addition_prompt_ids(tokenizer, a, b, digits=2):
    """The ids of the prompt "a+b=" with the tokenizer's special tokens (BOS first)."""
    buf, n = (ctypes.c_int32 * 64)(), ctypes.c_size_t()
    check(lib.pt_addition_prompt_ids(buf, 64, ctypes.byref(n), tokenizer._ptr, digits, a, b),
          "pt_addition_prompt_ids")
    return list(buf[:n.value])


def addition_evaluate(generator, tokenizer, pairs, digits=2, temperature=0.0, seed=0, batch=0):
    """(correct, slipped): how many of pairs [(a, b), ...] the generator's model
    answers right, and with the carries forgotten, completing each prompt
    greedily (temperature 0) or sampled from seed (pair i from stream i), as
    posttrain demo scores its held-out problems; batch: pairs per call (0:
    the generator's max_batch)."""
    flat = [int(v) for p in pairs for v in p]
    arr = (ctypes.c_int64 * max(len(flat), 1))(*flat)
    o = AdditionEvalOptions.new()
    o.digits, o.temperature, o.seed, o.batch = digits, temperature, seed, batch
    ok, sl = ctypes.c_int64(), ctypes.c_int64()
    check(lib.pt_addition_evaluate(ctypes.byref(ok), ctypes.byref(sl), None, None, generator._ptr, tokenizer._ptr,
                                   arr, len(flat) // 2, ctypes.byref(o)), "pt_addition_evaluate")
    return ok.value, sl.value


def addition_model_config(tokenizer, hidden=64, layers=2, heads=16, tied=False):
    """The demo's tiny Llama for tokenizer (pt_addition_model_config): a
    ModelConfig for Model.create."""
    c = ModelConfig.new()
    check(lib.pt_addition_model_config(ctypes.byref(c), tokenizer._ptr, hidden, layers, heads, bool(tied)),
          "pt_addition_model_config")
    return c


def addition_save_traces(dataset, tokenizer, n, state, digits=2, slip=0.7, path=None):
    """(wrong, new_state): n traces of the teacher from the stream at state
    added to dataset (a Dataset) as SFT rows, as posttrain demo makes them
    (pt_addition_save_traces); wrong: how many answers are wrong.  path
    (optional): the traces also written there as {"prompt", "completion"}
    JSONL rows, atomically."""
    w, st = ctypes.c_int64(), ctypes.c_uint64(state)
    check(lib.pt_addition_save_traces(dataset._ptr, ctypes.byref(w), tokenizer._ptr, digits, slip, n,
                                      ctypes.byref(st), fsencode(path) if path is not None else None),
          "pt_addition_save_traces")
    return w.value, st.value

class AdditionGrpo(Handle):
    """The demo's GRPO loop on addition (pt_addition_grpo): each step() draws
    `prompts` training problems from seed's stream, samples `group`
    completions of each with the generator, rewards the exact answer and
    makes one AdamW update of the model (a KL term against a frozen copy of
    it with beta > 0).  Options (pt_addition_grpo_options): digits, prompts,
    group, lr, beta, temperature, loss_type (a LossType or its name),
    scale_rewards (a ScaleRewards or its name), drop_zero_std,
    bf16_reference, seed.  Closed when the model or the tokenizer closes."""

    _free_fn = "pt_addition_grpo_free"
    _kind = "addition GRPO"

    def __init__(self, model, tokenizer, **options):
        o = AdditionGrpoOptions.new()
        enums = {"loss_type": LossType, "scale_rewards": ScaleRewards}
        for k, v in options.items():
            if k == "size" or k not in AdditionGrpoOptions.field_names():
                raise invalid("unknown AdditionGrpo option %r" % k, "AdditionGrpo")
            setattr(o, k, enums[k].coerce(v, k) if k in enums else v)
        out = ctypes.c_void_p()
        check(lib.pt_addition_grpo_create(ctypes.byref(out), model._ptr, tokenizer._ptr, ctypes.byref(o)),
              "pt_addition_grpo_create")
        super().__init__(out.value)
        self.model, self.tokenizer = model, tokenizer
        model._add_dependent(self)
        tokenizer._add_dependent(self)

    def step(self, context, generator):
        """One step with a Context of the model and a Generator of it (room
        for prompts * group rows); the step's statistics as a dict of
        pt_grpo_stats fields."""
        s = _CGrpoStats.new()
        check(lib.pt_addition_grpo_step(ctypes.byref(s), self._ptr, context._ptr, generator._ptr),
              "pt_addition_grpo_step")
        return {k: v for k, v in s.to_dict().items() if k not in ("reward_func_mean", "reward_func_std")}

    @property
    def steps(self):
        """Steps made so far."""
        return lib.pt_addition_grpo_steps(self._ptr)
