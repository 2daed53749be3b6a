"""GRPO and its variants (posttrain/grpo.h): the rollout buffer, rewards
(Python callables through pt_rollout_buffer_score) and pt_grpo_step.

Available when the loaded library has the "grpo" feature
(posttrain.has_feature("grpo")).

    buf = pt.RolloutBuffer(["correct", "format"], [1.0, 0.2])
    gens = buf.add_rollouts(model, prompts, num_generations=8, max_new_tokens=32,
                            temperature=0.7)
    buf.score("correct", lambda samples: [my_reward(s.completion) for s in samples])
    stats = pt.grpo_step(opt, buf, loss_type=pt.LossType.DAPO)   # or "dapo"; at T = 0.7
    buf.clear()

The generations' log-probabilities go in as the sampler's
(sampling_logprobs); the step records the trainer's pi_old itself and, by
default (TRL's), corrects for the difference (importance_sampling_correction).
A sample's advantages come from its rewards, from one reward per segment (a
run of loss-mask-1 tokens: an assistant turn), or are given per token
(docs/grpo.md).
"""

import collections
import ctypes
import math

from ._handle import Handle, out_handle
from ._lib import GrpoStats as _CGrpoStats
from ._lib import GrpoRoundUpdates, RolloutGenerated
from ._lib import (PT_GRPO_MAX_REWARD_FUNCS, REWARD_FN, GrpoOptions, RewardBatch,
                   RolloutBufferOptions, RolloutLogprobsOptions, RolloutSample, has_feature, lib)
from ._util import cstr, flat_float, int32_array, is_numpy
from .enums import (FinishReason, ISCorrection, ISLevel, LossType, RolloutLogprobs, ScaleRewards,
                    SkipReason, Status)
from .errors import Error, check, error_for, invalid
from .model import Batch, Context, Model

__all__ = ["RolloutBuffer", "RewardSample", "SampleInfo", "GrpoStats", "grpo_step",
           "grpo_defaults", "MAX_REWARD_FUNCS", "reward_arguments", "call_reward"]

MAX_REWARD_FUNCS = PT_GRPO_MAX_REWARD_FUNCS

# What a reward callable sees of one sample (in buffer order).
RewardSample = collections.namedtuple(
    "RewardSample", ["index", "ids", "prompt", "completion", "prompt_len", "group", "truncated"])
# RolloutBuffer.sample_info(i): what a sample holds, as added.
SampleInfo = collections.namedtuple("SampleInfo", ["n_ids", "prompt_len", "group"])

_STAT_FIELDS = [f for f in _CGrpoStats.field_names()
                if f not in ("n_reward_funcs", "reward_func_mean", "reward_func_std")]
# The step's statistics: every field of pt_grpo_stats; reward_func_mean and
# reward_func_std are dicts {reward function name: value} (NaN when no
# sample was scored by it).
GrpoStats = collections.namedtuple(
    "GrpoStats", _STAT_FIELDS[:3] + ["n_reward_funcs", "reward_func_mean", "reward_func_std"]
    + _STAT_FIELDS[3:])

_OPTION_FIELDS = GrpoOptions.field_names()
# Option fields holding a named enum.
_ENUMS = {"scale_rewards": ScaleRewards, "loss_type": LossType,
          "importance_sampling_level": ISLevel, "importance_sampling_correction": ISCorrection}


def _require():
    if not has_feature("grpo"):
        raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain has no GRPO API "
                        "(feature grpo, posttrain/grpo.h)")


def grpo_defaults():
    """pt_grpo_options_init()'s defaults as a dict (scale_rewards, loss_type,
    importance_sampling_level and importance_sampling_correction as
    ScaleRewards / LossType / ISLevel / ISCorrection members)."""
    _require()
    d = GrpoOptions.new().to_dict()
    for f, enum_type in _ENUMS.items():
        d[f] = enum_type.wrap(d[f])
    return d


def _grpo_options(options):
    o = GrpoOptions.new()
    for k, v in options.items():
        if k not in _OPTION_FIELDS:
            raise invalid("unknown grpo option %r (valid: %s)" % (k, ", ".join(_OPTION_FIELDS)),
                          "grpo_step")
        if k in _ENUMS:
            v = _ENUMS[k].coerce(v, k, "grpo_step")
        try:
            setattr(o, k, v)
        except TypeError as e:
            raise invalid("grpo option %r: %s" % (k, e), "grpo_step") from None
    return o


def _float_array(values, n, what, allow_none=False):
    if values is None:
        return None
    if not is_numpy(values):
        values = [math.nan if (allow_none and v is None) else v for v in values]
    return flat_float(values, n, what)


class RolloutBuffer(Handle):
    """Completions with their log-probabilities, groups and rewards
    (pt_rollout_buffer).

    RolloutBuffer(reward_names=None, reward_weights=None): reward_names is a
    list of up to 8 names (a single str for one), default one function
    "reward0"; reward_weights one finite weight per function (default all
    1).  Use with `with`, or close() it."""

    _free_fn = "pt_rollout_buffer_free"
    _kind = "rollout buffer"

    def __init__(self, reward_names=None, reward_weights=None):
        _require()
        if isinstance(reward_names, (str, bytes)):
            reward_names = [reward_names]
        if reward_weights is not None and not is_numpy(reward_weights) and \
                not isinstance(reward_weights, (list, tuple)):
            reward_weights = [reward_weights]
        o = RolloutBufferOptions.new()
        names = list(reward_names) if reward_names is not None else None
        weights = [float(w) for w in reward_weights] if reward_weights is not None else None
        if names is not None and weights is not None and len(names) != len(weights):
            raise invalid("%d reward names but %d weights" % (len(names), len(weights)),
                          "RolloutBuffer")
        n = len(names) if names is not None else (len(weights) if weights is not None else 1)
        keep = []
        o.n_reward_funcs = n
        if names is not None:
            if len(set(names)) != len(names):
                raise invalid("reward names must be distinct: %r" % (names,), "RolloutBuffer")
            bn = [cstr(s, "reward name", allow_none=False) for s in names]
            arr = (ctypes.c_char_p * max(n, 1))(*bn)
            keep.append(arr)
            o.reward_names = arr
        if weights is not None:
            warr = (ctypes.c_double * max(n, 1))(*weights)
            keep.append(warr)
            o.reward_weights = warr
        out = out_handle()
        check(lib.pt_rollout_buffer_create(ctypes.byref(out), ctypes.byref(o)),
              "pt_rollout_buffer_create")
        super().__init__(out.value)
        self.reward_names = ([b.decode("utf-8") for b in bn] if names is not None
                             else ["reward%d" % k for k in range(n)])
        self.reward_weights = weights if weights is not None else [1.0] * n
        # What the C API does not hand back: each sample's (n_ids, prompt_len,
        # group), in buffer order (kept in step with every successful add).
        self._meta = []
        # The temperature of the last add_rollouts (grpo_step's default), or None.
        self.sampling_temperature = None

    # -- adding samples --------------------------------------------------------------
    def _sample(self, keep, prompt_ids, completion_ids, loss_mask, old_logprobs, ref_logprobs,
                group, rewards, truncated, what, sampling_logprobs=None, advantages=None,
                segment_rewards=None):
        if group is None:
            raise invalid("%s: group is required (samples with equal group ids form one group)"
                          % what, "RolloutBuffer.add")
        p = list(prompt_ids) if not is_numpy(prompt_ids) else prompt_ids.tolist()
        c = list(completion_ids) if not is_numpy(completion_ids) else completion_ids.tolist()
        ids, n_ids = int32_array(p + c, what + " ids")
        nc = len(c)
        s = RolloutSample.new()
        s.ids = ctypes.cast(ids, ctypes.POINTER(ctypes.c_int32))
        s.n_ids = n_ids
        s.prompt_len = len(p)
        keep.append(ids)
        if loss_mask is not None:
            mm = [int(v) for v in loss_mask]
            if len(mm) != nc:
                raise invalid("%s: loss_mask has %d entries for %d completion tokens"
                              % (what, len(mm), nc), "RolloutBuffer.add")
            if any(v < 0 or v > 255 for v in mm):
                raise invalid("%s: loss_mask entries must be 0 or 1" % what, "RolloutBuffer.add")
            ma = (ctypes.c_uint8 * max(nc, 1))(*mm)
            keep.append(ma)
            s.loss_mask = ctypes.cast(ma, ctypes.POINTER(ctypes.c_uint8))
        for field, vals in (("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs),
                            ("sampling_logprobs", sampling_logprobs), ("advantages", advantages)):
            if vals is not None:
                fa = _float_array(vals, nc, "%s: %s" % (what, field))
                keep.append(fa)
                setattr(s, field, ctypes.cast(fa, ctypes.POINTER(ctypes.c_float)))
        if segment_rewards is not None:
            if not isinstance(segment_rewards, (list, tuple)) and not is_numpy(segment_rewards):
                segment_rewards = [segment_rewards]
            n_seg = len(segment_rewards)
            sa = _float_array(segment_rewards, n_seg, "%s: segment_rewards" % what, allow_none=True)
            keep.append(sa)
            s.segment_rewards = ctypes.cast(sa, ctypes.POINTER(ctypes.c_float))
            s.n_segments = n_seg
        if rewards is not None:
            k = len(self.reward_names)
            if not isinstance(rewards, (list, tuple)) and not is_numpy(rewards):
                rewards = [rewards]
            ra = _float_array(rewards, k, "%s: rewards (one per reward function)" % what,
                              allow_none=True)
            keep.append(ra)
            s.rewards = ctypes.cast(ra, ctypes.POINTER(ctypes.c_float))
        s.group = int(group)
        s.truncated = bool(truncated)
        return s, SampleInfo(n_ids, len(p), int(group))

    def add(self, prompt_ids, completion_ids, loss_mask=None, old_logprobs=None,
            ref_logprobs=None, group=None, rewards=None, truncated=False, sampling_logprobs=None,
            advantages=None, segment_rewards=None):
        """Copy one sample in (pt_rollout_buffer_add).  Per completion token:
        loss_mask (1 = trained on, 0 = e.g. tool output; None: all 1),
        sampling_logprobs (the sampler's log-probabilities, e.g. a
        Generation's logprobs, <= 0), old_logprobs (the trainer's pi_old at
        the step's temperature; None, usual: recorded by the first
        grpo_step), ref_logprobs (needed when beta > 0), advantages (used as
        given, instead of rewards).  group is required: samples with equal
        group ids form one group.  rewards: one score per reward function
        (None or NaN: declined), or None (unscored).  segment_rewards: one
        reward per segment (a run of loss-mask-1 tokens: an assistant turn;
        None or NaN declines), advantages then per segment index within the
        group.  truncated: hit the length limit.  Returns its index."""
        self._ptr
        keep = []
        s, meta = self._sample(keep, prompt_ids, completion_ids, loss_mask, old_logprobs,
                               ref_logprobs, group, rewards, truncated, "sample",
                               sampling_logprobs, advantages, segment_rewards)
        check(lib.pt_rollout_buffer_add(self._ptr, ctypes.byref(s)), "pt_rollout_buffer_add")
        self._meta.append(meta)
        return len(self._meta) - 1

    def add_group(self, prompt_ids, completions, loss_masks=None, old_logprobs=None,
                  ref_logprobs=None, group=None, rewards=None, truncated=None,
                  sampling_logprobs=None, advantages=None, segment_rewards=None):
        """Copy G completions of one prompt in as one group, all or nothing
        (pt_rollout_buffer_add_group).  completions: G lists of ids; the
        other arguments are None or G per-completion entries (each as for
        add(); truncated: G bools).  group None picks a new id (one more
        than the largest in the buffer).  Returns the group id."""
        self._ptr
        comps = list(completions)
        G = len(comps)
        if G == 0:
            raise invalid("add_group: no completions", "RolloutBuffer.add_group")

        def per(x, name):
            if x is None:
                return [None] * G
            x = list(x)
            if len(x) != G:
                raise invalid("add_group: %s has %d entries for %d completions"
                              % (name, len(x), G), "RolloutBuffer.add_group")
            return x
        masks, olds, refs, rews = (per(loss_masks, "loss_masks"), per(old_logprobs, "old_logprobs"),
                                   per(ref_logprobs, "ref_logprobs"), per(rewards, "rewards"))
        samps, advs, segs = (per(sampling_logprobs, "sampling_logprobs"),
                             per(advantages, "advantages"), per(segment_rewards, "segment_rewards"))
        truncs = per(truncated, "truncated")
        if group is None:
            group = self._next_group()
        keep = []
        arr = (RolloutSample * G)()
        metas = []
        for i in range(G):
            s, meta = self._sample(keep, prompt_ids, comps[i], masks[i], olds[i], refs[i], group,
                                   rews[i], bool(truncs[i]), "completion %d" % i, samps[i], advs[i],
                                   segs[i])
            arr[i] = s
            metas.append(meta)
        check(lib.pt_rollout_buffer_add_group(self._ptr, arr, G), "pt_rollout_buffer_add_group")
        self._meta.extend(metas)
        return int(group)

    def _next_group(self):
        return max((m[2] for m in self._meta), default=-1) + 1

    def add_generations(self, prompts, generations):
        """Put model.generate()'s outputs in as one group per prompt.

        prompts: P prompts (lists of ids).  generations: either P lists of G
        Generation objects, or a flat list of P*G Generations in the order
        generate() returns them for the prompts each repeated G times
        ([p0]*G + [p1]*G + ...).  Each Generation's logprobs become the
        sampling log-probabilities (None if generated with logprobs=False;
        the step records the trainer's old ones), and finish_reason
        FinishReason.LENGTH marks it truncated.  New group ids are taken;
        returns them (one per prompt)."""
        prompts = [list(p) for p in prompts]
        gens = list(generations)
        P = len(prompts)
        if P == 0:
            raise invalid("add_generations: no prompts", "RolloutBuffer.add_generations")
        if gens and isinstance(gens[0], (list, tuple)) and not hasattr(gens[0], "tokens"):
            if len(gens) != P:
                raise invalid("add_generations: %d lists of generations for %d prompts"
                              % (len(gens), P), "RolloutBuffer.add_generations")
            per_prompt = [list(g) for g in gens]
        else:
            if len(gens) % P != 0 or not gens:
                raise invalid("add_generations: %d generations is not a multiple of %d prompts"
                              % (len(gens), P), "RolloutBuffer.add_generations")
            G = len(gens) // P
            per_prompt = [gens[i * G:(i + 1) * G] for i in range(P)]
        groups = []
        for p, gs in zip(prompts, per_prompt):
            groups.append(self.add_group(
                p, [g.tokens for g in gs],
                sampling_logprobs=(None if any(g.logprobs is None for g in gs)
                                   else [g.logprobs for g in gs]),
                truncated=[_truncated(g.finish_reason) for g in gs]))
        return groups

    def add_episodes(self, episodes):
        """Add the episodes of a posttrain.Episodes run that ended without
        error, one sample each (pt_rollout_buffer_add_episodes); returns how
        many went in."""
        return episodes.add_to(self)

    def add_rollouts(self, model, prompts, num_generations, tokenizer=None, add_special=True,
                     **generate_options):
        """Sample num_generations completions of each prompt with
        model.generate(..., logprobs=True) and add them as one group per
        prompt (add_generations).  generate_options go to model.generate
        (max_new_tokens, temperature, top_k, top_p, min_p, seed, stop_ids);
        row r samples from stream (seed, r), so pass a new seed each round.
        The temperature is remembered (sampling_temperature): grpo_step
        trains at it unless given another, as TRL's one `temperature` does.
        Text prompts are encoded as model.generate does (tokenizer, default
        the model's; add_special).  Returns the Generations, one list of
        num_generations per prompt."""
        G = int(num_generations)
        t = generate_options.get("temperature")
        if t is None:
            from .generate import generate_defaults
            t = generate_defaults()["temperature"]
        # greedy (0) trains the plain model: temperature 1
        self.sampling_temperature = float(t) if float(t) > 0 else 1.0
        if G < 1:
            raise invalid("num_generations %d must be >= 1" % G, "RolloutBuffer.add_rollouts")
        from .generate import encode_prompts
        if isinstance(prompts, (str, bytes)):
            prompts = [prompts]
        prompts = list(prompts)
        if tokenizer is None and any(isinstance(p, (str, bytes)) for p in prompts):
            tokenizer = model.tokenizer
        prompts = encode_prompts(prompts, tokenizer, add_special, "RolloutBuffer.add_rollouts")
        prompts = [list(p) for p in prompts]
        rows = [p for p in prompts for _ in range(G)]
        out = model.generate(rows, logprobs=True, **generate_options)
        self._add_generated(rows, out, G)
        return [out[i * G:(i + 1) * G] for i in range(len(prompts))]

    def _add_generated(self, rows, gens, G):
        """The generations of rows (each prompt repeated G times, in order)
        in as one group per prompt, new group ids, all or nothing
        (pt_rollout_buffer_add_generated: the samples posttrain grpo adds)."""
        self._ptr
        n = len(gens)
        stride = max(1, max(len(g.tokens) for g in gens))
        prompts, n_p = int32_array([t for p in rows for t in p], "add_rollouts prompt ids")
        plens, _ = int32_array([len(p) for p in rows], "add_rollouts prompt lengths")
        toks = (ctypes.c_int32 * (n * stride))()
        lps = (ctypes.c_float * (n * stride))()
        ntok = (ctypes.c_int32 * n)(*[len(g.tokens) for g in gens])
        fin = (ctypes.c_int32 * n)(*[int(g.finish_reason) for g in gens])
        for i, g in enumerate(gens):
            toks[i * stride:i * stride + len(g.tokens)] = [int(t) for t in g.tokens]
            lps[i * stride:i * stride + len(g.tokens)] = [float(v) for v in g.logprobs]
        r = RolloutGenerated.new()
        r.n = n
        r.prompts = ctypes.cast(prompts, ctypes.POINTER(ctypes.c_int32))
        r.prompt_lens = ctypes.cast(plens, ctypes.POINTER(ctypes.c_int32))
        r.tokens = toks
        r.n_tokens = ntok
        r.stride = stride
        r.logprobs = lps
        r.finish = fin
        r.group_size = G
        r.first_group = self._next_group()
        check(lib.pt_rollout_buffer_add_generated(self._ptr, ctypes.byref(r)),
              "pt_rollout_buffer_add_generated")
        self._meta.extend(SampleInfo(len(p) + len(g.tokens), len(p), r.first_group + i // G)
                          for i, (p, g) in enumerate(zip(rows, gens)))

    # -- contents --------------------------------------------------------------------
    def clear(self):
        """Forget every sample (the reward functions stay)."""
        check(lib.pt_rollout_buffer_clear(self._ptr), "pt_rollout_buffer_clear")
        self._meta = []

    def __len__(self):
        n = ctypes.c_int(lib.pt_rollout_buffer_size(self._ptr))
        if n.value != len(self._meta):  # pragma: no cover - would be a binding bug
            raise error_for(Status.EINTERNAL, "rollout buffer holds %d samples, the binding "
                            "counted %d" % (n.value, len(self._meta)), "RolloutBuffer.__len__")
        return n.value

    def sample_info(self, i):
        """SampleInfo(n_ids, prompt_len, group) of sample i, as added."""
        return self._meta[self._index(i)]

    @property
    def max_len(self):
        """The longest sample (prompt plus completion), 0 when empty."""
        return max((m[0] for m in self._meta), default=0)

    def _index(self, i):
        n = len(self._meta)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise invalid("sample %d is not in 0 .. %d" % (i, n - 1), "RolloutBuffer")
        return i

    def _func(self, k):
        if isinstance(k, str):
            if k not in self.reward_names:
                raise invalid("unknown reward function %r (the buffer's: %s)"
                              % (k, ", ".join(self.reward_names)), "RolloutBuffer")
            return self.reward_names.index(k)
        return int(k)

    def set_reward(self, sample, k, reward):
        """Set reward function k's (index or name) score of a sample; None or
        NaN declines."""
        v = math.nan if reward is None else float(reward)
        check(lib.pt_rollout_buffer_set_reward(self._ptr, self._index(sample), self._func(k), v),
              "pt_rollout_buffer_set_reward")

    def get_reward(self, sample, k):
        """Reward function k's score of a sample (NaN: declined or unscored)."""
        v = ctypes.c_float()
        check(lib.pt_rollout_buffer_get_reward(ctypes.byref(v), self._ptr, self._index(sample),
                                               self._func(k)), "pt_rollout_buffer_get_reward")
        return v.value

    def set_segment_reward(self, sample, segment, reward):
        """Set the reward of one segment of a sample added with
        segment_rewards; None or NaN declines."""
        v = math.nan if reward is None else float(reward)
        check(lib.pt_rollout_buffer_set_segment_reward(self._ptr, self._index(sample), int(segment), v),
              "pt_rollout_buffer_set_segment_reward")

    def get_segment_reward(self, sample, segment):
        """The reward of one segment of a sample (NaN: declined)."""
        v = ctypes.c_float()
        check(lib.pt_rollout_buffer_get_segment_reward(ctypes.byref(v), self._ptr,
                                                       self._index(sample), int(segment)),
              "pt_rollout_buffer_get_segment_reward")
        return v.value

    def rewards(self):
        """Every score: one list of len(reward_names) floats per sample."""
        K = len(self.reward_names)
        return [[self.get_reward(i, k) for k in range(K)] for i in range(len(self))]

    def score(self, k, fn):
        """Score every sample with reward function k (index or name) through
        fn(samples) -> rewards (pt_rollout_buffer_score).

        samples is a list of RewardSample(index, ids, prompt, completion,
        prompt_len, group, truncated) in buffer order; fn returns one value
        per sample (None or NaN: declined).  If fn raises, the buffer keeps
        its previous scores and that exception is re-raised, its __cause__
        the CallbackError (PT_ECALLBACK) the library reported.  An infinite
        reward is a CallbackError."""
        k = self._func(k)
        if not callable(fn):
            raise invalid("score: fn must be callable", "RolloutBuffer.score")
        failure = []

        def bridge(rewards, batch_p, payload):
            try:
                b = batch_p.contents
                if b.size != ctypes.sizeof(RewardBatch):
                    raise error_for(Status.EINTERNAL, "pt_reward_batch size %d is not the "
                                    "binding's %d" % (b.size, ctypes.sizeof(RewardBatch)),
                                    "RolloutBuffer.score")
                samples = []
                for i in range(b.n):
                    it = b.items[i]
                    ids = it.ids[:it.n_ids]
                    samples.append(RewardSample(i, ids, ids[:it.prompt_len], ids[it.prompt_len:],
                                                it.prompt_len, it.group, bool(it.truncated)))
                vals = fn(samples)
                vals = list(vals) if not is_numpy(vals) else vals.tolist()
                if len(vals) != b.n:
                    raise invalid("reward function %r returned %d values for %d samples"
                                  % (self.reward_names[k], len(vals), b.n), "RolloutBuffer.score")
                conv = [math.nan if v is None else float(v) for v in vals]
                for i, v in enumerate(conv):
                    rewards[i] = v
                return 0
            except BaseException as e:  # noqa: B902 - KeyboardInterrupt must not cross C
                failure.append(e)
                return 1

        cb = REWARD_FN(bridge)   # alive until pt_rollout_buffer_score returns
        st = lib.pt_rollout_buffer_score(self._ptr, k, cb, None)
        if failure:
            err = failure[0]
            try:
                check(st, "pt_rollout_buffer_score")
            except Error as pe:
                raise err from pe
            raise err
        check(st, "pt_rollout_buffer_score")

    def score_completions(self, k, fn, tokenizer, rows=None, prompts=None, skip_special=True):
        """Score every sample with reward function k (index or name) through
        a reward function in TRL's shape:

            fn(prompts, completions, completion_ids, **columns) -> values

        called once with one entry per sample in buffer order: prompts (the
        prompt texts: prompts[group] when given, else a row's "prompt" when
        it is a str, else the decoded prompt ids), completions
        (tokenizer.decode(completion ids, skip_special=skip_special)),
        completion_ids (lists of ids) and, as keyword arguments, every other
        field of the sample's row: rows maps a group id to its row (a dict;
        a list is indexed by group id), and a field "x" arrives as x=[the
        value of each sample's row].  Rows must all have the same fields.
        fn returns one float or None (declined: NaN) per sample; more or
        fewer values, or an infinite one, is an error with the buffer left
        as it was, the exception re-raised (RolloutBuffer.score).  Returns
        the values as floats (NaN for None; the buffer keeps them as float32),
        in buffer order."""
        if tokenizer is None:
            raise invalid("score_completions needs a tokenizer to decode the completions",
                          "RolloutBuffer.score_completions")
        if not callable(fn):
            raise invalid("score_completions: fn must be callable",
                          "RolloutBuffer.score_completions")
        name = self.reward_names[self._func(k)] if not isinstance(k, str) else k
        got = []

        def batch_fn(samples):
            args = reward_arguments(samples, tokenizer, rows, prompts, skip_special)
            vals = call_reward(fn, name, *args)
            got.append(vals)
            return vals
        self.score(k, batch_fn)
        return got[0]

    # -- log-probabilities -------------------------------------------------------------
    def _context(self, context_or_model, what):
        if isinstance(context_or_model, Context):
            return context_or_model
        if isinstance(context_or_model, Model):
            n = len(self)
            big = Batch.__new__(Batch)
            big.batch = max(1, min(n, 16))
            big.seq = max(1, self.max_len)
            return context_or_model._context_for(big)
        raise invalid("%s needs a posttrain.Context or a posttrain.Model, not %s"
                      % (what, type(context_or_model).__name__), what)

    def compute_logprobs(self, context_or_model, old=True, ref=False, sampling=False,
                         temperature=1.0):
        """Fill the old (old=True), reference (ref=True) and/or sampling
        (sampling=True) log-probabilities of every sample with a forward at
        `temperature` (log_softmax(logits / temperature):
        pt_rollout_buffer_compute_logprobs_with), replacing what the samples
        had.  A Model uses its internal context; for the reference pass the
        frozen reference model.  Give the step's temperature: grpo_step
        refuses values computed at another.  All or nothing."""
        ctx = self._context(context_or_model, "compute_logprobs")
        o = RolloutLogprobsOptions.new()
        o.temperature = float(temperature)
        for flag, which in ((old, RolloutLogprobs.OLD), (ref, RolloutLogprobs.REF),
                            (sampling, RolloutLogprobs.SAMPLING)):
            if flag:
                check(lib.pt_rollout_buffer_compute_logprobs_with(self._ptr, ctx._ptr, which,
                                                                  ctypes.byref(o)),
                      "pt_rollout_buffer_compute_logprobs_with")

    def get_logprobs(self, sample, which=RolloutLogprobs.OLD):
        """Sample's old, reference or sampling log-probabilities (which: a
        RolloutLogprobs, or "old" / "ref" / "sampling"), one per completion
        token (StateError when it has none yet)."""
        which = RolloutLogprobs.coerce(which, "which", "RolloutBuffer.get_logprobs")
        i = self._index(sample)
        n_ids, plen = self._meta[i][0], self._meta[i][1]
        out = (ctypes.c_float * (n_ids - plen))()
        check(lib.pt_rollout_buffer_get_logprobs(out, self._ptr, i, which),
              "pt_rollout_buffer_get_logprobs")
        return list(out)


_RESERVED = ("prompts", "completions", "completion_ids")


def _row_of(rows, group):
    if rows is None:
        return None
    try:
        return rows[group]
    except (KeyError, IndexError, TypeError):
        raise invalid("no row for group %r (rows has %d)" % (group, len(rows)),
                      "score_completions") from None


def reward_arguments(samples, tokenizer, rows=None, prompts=None, skip_special=True):
    """The arguments of a TRL-shaped reward function for samples (a list of
    RewardSample): (prompts, completions, completion_ids, columns), where
    columns maps every row field but "prompt" to its per-sample values
    (see RolloutBuffer.score_completions)."""
    p_text, c_text, c_ids = [], [], []
    columns = None
    for smp in samples:
        row = _row_of(rows, smp.group)
        if prompts is not None:
            p = prompts[smp.group]
        elif isinstance(row, dict) and isinstance(row.get("prompt"), str):
            p = row["prompt"]
        else:
            p = tokenizer.decode(smp.prompt, skip_special=skip_special)
        p_text.append(p)
        ids = list(smp.completion)
        c_ids.append(ids)
        c_text.append(tokenizer.decode(ids, skip_special=skip_special))
        if row is not None:
            if not isinstance(row, dict):
                raise invalid("a row must be a dict, not %s" % type(row).__name__,
                              "score_completions")
            keys = [f for f in row if f != "prompt"]
            if columns is None:
                for f in keys:
                    if f in _RESERVED:
                        raise invalid("row field %r would hide the reward function's own "
                                      "argument of that name" % f, "score_completions")
                columns = {f: [] for f in keys}
            elif set(keys) != set(columns):
                raise invalid("rows have different fields: %s and %s"
                              % (sorted(columns), sorted(keys)), "score_completions")
            for f in keys:
                columns[f].append(row[f])
    return p_text, c_text, c_ids, (columns or {})


def call_reward(fn, name, prompts, completions, completion_ids, columns):
    """Call a TRL-shaped reward function; its values as floats, None -> NaN
    (InvalidArgument for a wrong count or an infinite value)."""
    vals = fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
    if vals is None:
        raise invalid("reward function %r returned None instead of a list (one value or None per "
                      "completion)" % (name,), "score_completions")
    vals = vals.tolist() if is_numpy(vals) else list(vals)
    if len(vals) != len(completions):
        raise invalid("reward function %r returned %d values for %d completions"
                      % (name, len(vals), len(completions)), "score_completions")
    out = []
    for v in vals:
        x = math.nan if v is None else float(v)
        if math.isinf(x):
            raise invalid("reward function %r returned %r (rewards are finite, or None to "
                          "decline)" % (name, v), "score_completions")
        out.append(x)
    return out


def _truncated(finish_reason):
    """A Generation's finish_reason says it hit the length limit (a member,
    or the name "length" of a hand-made Generation)."""
    try:
        return FinishReason.coerce(finish_reason) == FinishReason.LENGTH
    except Error:
        return False


def grpo_step(optimizer, buffer, context=None, **options):
    """One optimizer step over the whole buffer (pt_grpo_step).

    options are pt_grpo_options fields by keyword: scale_rewards (a
    ScaleRewards: GROUP, BATCH, NONE, RLOO, or its lower-case name),
    loss_type (a LossType: GRPO, BNPO, DAPO, DR_GRPO, CISPO, VESPO, or its name),
    importance_sampling_level (an ISLevel: TOKEN, SEQUENCE), epsilon_low,
    epsilon_high, beta, max_completion_length, overlong_buffer,
    mask_truncated_completions, drop_zero_std_groups, global_tokens,
    global_samples, micro_batch, temperature (the sampling temperature;
    default: the buffer's sampling_temperature when add_rollouts set it,
    else 1), importance_sampling_correction (an ISCorrection: NONE,
    TOKEN_TRUNCATE, TOKEN_MASK, SEQUENCE_TRUNCATE, SEQUENCE_MASK; TRL's
    vllm_importance_sampling_mode), importance_sampling_clip_max,
    importance_sampling_clip_min, delta, top_entropy_quantile, vespo_k_pos,
    vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg, entropy_coef,
    use_adaptive_entropy, entropy_coef_min, entropy_coef_max,
    entropy_coef_delta, entropy_target, entropy_last (the host carries
    entropy_coef and entropy_last from the stats' entropy_coef_next and
    entropy_measured); unset ones
    keep pt_grpo_options_init()'s defaults (grpo_defaults()).  context: a
    Context of the optimizer's model (default: the model's internal one,
    sized for the buffer).  Returns GrpoStats."""
    _require()
    if not isinstance(buffer, RolloutBuffer):
        raise invalid("grpo_step needs a posttrain.RolloutBuffer, not %s"
                      % type(buffer).__name__, "grpo_step")
    if "temperature" not in options and buffer.sampling_temperature is not None:
        options = dict(options, temperature=buffer.sampling_temperature)
    o = _grpo_options(options)
    buffer._ptr
    optimizer._check_dist()
    if context is None:
        context = buffer._context(optimizer.model, "grpo_step")
    elif not isinstance(context, Context):
        raise invalid("context must be a posttrain.Context", "grpo_step")
    s = _CGrpoStats.new()
    check(lib.pt_grpo_step(ctypes.byref(s), optimizer._ptr, context._ptr, buffer._ptr,
                           ctypes.byref(o)), "pt_grpo_step")
    return _stats(s, buffer.reward_names)


def _round_update(optimizer, buffer, options, iterations):
    """A round's updates (pt_grpo_round_update, as posttrain grpo makes
    them): `iterations` steps of grpo_step's on the buffer, the adaptive
    entropy controller carried in `options` (a dict of grpo_step options,
    updated in place).  Returns (first, last, updates, loss_sum): the first
    and last updates' GrpoStats, the updates made and their losses added."""
    o = _grpo_options(options)
    optimizer._check_dist()
    context = buffer._context(optimizer.model, "grpo_step")
    u = GrpoRoundUpdates.new()
    check(lib.pt_grpo_round_update(ctypes.byref(u), optimizer._ptr, context._ptr, buffer._ptr,
                                   ctypes.byref(o), int(iterations), None, None),
          "pt_grpo_round_update")
    if o.use_adaptive_entropy:
        options["entropy_coef"] = o.entropy_coef
        options["entropy_last"] = o.entropy_last
    names = buffer.reward_names
    return _stats(u.first, names), _stats(u.last, names), u.updates, u.loss_sum


def _stats(s, names):
    """A C pt_grpo_stats as GrpoStats (the reward functions by name)."""
    vals = {f: getattr(s, f) for f in _STAT_FIELDS}
    vals["n_reward_funcs"] = s.n_reward_funcs
    vals["reward_func_mean"] = {names[k]: s.reward_func_mean[k] for k in range(s.n_reward_funcs)}
    vals["reward_func_std"] = {names[k]: s.reward_func_std[k] for k in range(s.n_reward_funcs)}
    vals["skipped"] = bool(vals["skipped"])
    vals["skip_reason"] = SkipReason.wrap(vals["skip_reason"])
    return GrpoStats(**vals)
