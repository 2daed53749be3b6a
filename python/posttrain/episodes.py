"""Multi-turn episodes played from the KV cache (posttrain/episode.h), with a
Python callable as the environment.

Available when the loaded library has the "episodes" feature
(posttrain.has_feature("episodes")).

    def env(turn):                           # a Turn: the episode so far
        calls = tmpl.parse_tool_calls(turn.turn_text)
        if turn.final or not calls.calls:
            return pt.Done(rewards=[score(turn)])
        return pt.Append(text=render_tool_results(calls))   # or Append(ids=[...])

    eps = gen.play(prompts, env, groups=[0, 0, 1, 1], max_turns=4, tokenizer=tok,
                   decode_text=True, stop_ids=[im_end], max_new_tokens=64, seed=it)
    buf.add_episodes(eps)                    # ids, loss mask, logprobs, rewards, groups

The callable is called each time an episode's turn ends, on the calling
thread, and returns Done(rewards=..., turn_rewards=...), Append(ids=... or
text=..., turn_rewards=...), a list of ids (append them), a str (append
its encoding), or Pending (not ready: a tool still running elsewhere; the
others decode meanwhile and the callable is asked again).  An exception it raises ends that episode with the error
"<ExceptionType>: <message>" (on_error="continue", the default) or stops the
run and is re-raised (on_error="stop"), its __cause__ the CallbackError the
library reported and its .episodes the results so far.

The environment may instead be a process speaking JSON lines
(posttrain/env.h, the protocol of `posttrain grpo --env`): pass an
EnvProcess where the callable goes, and the library calls it directly.

    with pt.EnvProcess("python3 my_env.py", n_rewards=1, timeout=30) as env:
        eps = gen.play(prompts, env, max_turns=4, tokenizer=tok, decode_text=True)
        env.finish()                         # its end of input; raises if it failed
"""

import collections
import ctypes
import math

from ._handle import Handle, out_handle
from ._lib import (ENV_FN, PT_GRPO_MAX_REWARD_FUNCS, EnvProcessOptions, EnvReply, EpisodeOptions,
                   EpisodeStats, Episode_, GenerateOptions, env_process_fn, has_feature, lib)
from ._util import as_rows, cstr, int32_array, is_numpy
from .enums import EnvAction, EpisodeEnd, OnError, Status, TurnEnd
from .errors import Error, check, error_for, invalid

__all__ = ["Turn", "Append", "Done", "Pending", "Episode", "TurnInfo", "EpisodeStats", "Episodes",
           "EnvProcess", "play_episodes", "episode_defaults"]

# What the environment sees when a turn of an episode ended.  ids: the
# episode so far (prompt, sampled and appended ids); turn_ids: this turn's
# sampled ids (ids[turn_start:]); turn_end: a TurnEnd; final: 0 when the
# episode can go on, else the EpisodeEnd an Append would end it with
# (answer Done with the rewards); tokens_left: most ids an Append may add;
# turn_text, text: with decode_text, the turn and the whole completion
# decoded (None otherwise); attempt: 0, or how many times this turn's
# answer was Pending so far.
Turn = collections.namedtuple(
    "Turn", ["episode", "group", "turn", "ids", "prompt_len", "turn_start", "turn_ids",
             "turn_end", "final", "tokens_left", "turn_text", "text", "attempt"])
# One turn of a played episode: its sampled ids are ids[start:start + length].
TurnInfo = collections.namedtuple("TurnInfo", ["start", "length", "end"])
# A played episode.  completion = ids[prompt_len:]; loss_mask and logprobs
# are per completion token (1 / the sampling log-probability exactly on the
# sampled tokens, 0 elsewhere); rewards: n_reward_funcs floats (NaN:
# declined or never given); turn_rewards: one such list per turn; end: an
# EpisodeEnd; status: a Status (OK unless end is ERROR or STOPPED); error:
# None or the message.
Episode = collections.namedtuple(
    "Episode", ["index", "group", "ids", "prompt_len", "completion", "loss_mask", "logprobs",
                "turns", "rewards", "turn_rewards", "end", "truncated", "status", "error"])

_STAT_FIELDS = EpisodeStats.field_names()
# Counters of a run (pt_episode_stats): episodes by end, turns, sampled,
# appended, prompt and prefill tokens (prompts once plus appended ids),
# forward tokens, batched steps, environment calls, seconds.
EpisodeStatsTuple = collections.namedtuple("EpisodeStats", _STAT_FIELDS)


def _require():
    if not has_feature("episodes"):
        raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain has no episode engine "
                        "(feature episodes, posttrain/episode.h)")


def episode_defaults():
    """pt_episode_options_init()'s defaults as a dict (without the sampling
    options, which are generate_defaults())."""
    _require()
    o = EpisodeOptions.new()
    d = {f: getattr(o, f) for f in ("max_turns", "max_total_tokens", "decode_text",
                                     "n_reward_funcs", "max_step_tokens")}
    d["on_error"] = OnError.wrap(o.on_error)
    return d


class Append:
    """The environment's answer: append ids (a list of ints) or text
    (encoded with the run's tokenizer; special tokens written in it are
    matched) to the episode, in the context but never in the loss; the
    model's next turn follows.  turn_rewards: rewards of the turn that just
    ended; rewards: the episode's, used if the limits refuse the append."""

    __slots__ = ("ids", "text", "rewards", "turn_rewards")

    def __init__(self, ids=None, text=None, rewards=None, turn_rewards=None):
        self.ids, self.text, self.rewards, self.turn_rewards = ids, text, rewards, turn_rewards

    def __repr__(self):
        return "Append(ids=%r, text=%r)" % (self.ids, self.text)


class Done:
    """The environment's answer: the episode is over, with its rewards (one
    per reward function, None/NaN declines; a single number for one) and
    optionally the rewards of the turn that just ended."""

    __slots__ = ("rewards", "turn_rewards")

    def __init__(self, rewards=None, turn_rewards=None):
        self.rewards, self.turn_rewards = rewards, turn_rewards

    def __repr__(self):
        return "Done(rewards=%r)" % (self.rewards,)


class Pending:
    """The environment's answer: not ready yet (a tool still running in
    another thread or process).  The episode's row waits, the others go on
    decoding, and the callable is called again with the same turn
    (Turn.attempt counting up) after the next batched step; when nothing
    else decodes, at once.  Return the class or an instance."""

    __slots__ = ()

    def __repr__(self):
        return "Pending()"


def _reward_array(values, k, what):
    if values is None:
        return None
    if not isinstance(values, (list, tuple)) and not is_numpy(values):
        values = [values]
    vals = list(values) if not is_numpy(values) else values.tolist()
    if len(vals) != k:
        raise ValueError("%s has %d values for %d reward functions" % (what, len(vals), k))
    return (ctypes.c_float * k)(*[math.nan if v is None else float(v) for v in vals])


def _fill_reply(rep, ans, k, keep):
    """Write the answer into the C reply (arrays kept alive in keep until
    the library has copied them)."""
    if isinstance(ans, (list, tuple)) or is_numpy(ans):
        ans = Append(ids=ans)
    elif isinstance(ans, (str, bytes)):
        ans = Append(text=ans)
    if ans is Pending or isinstance(ans, Pending):
        rep.action = int(EnvAction.PENDING)
        return
    if isinstance(ans, Done):
        rep.action = int(EnvAction.DONE)
    elif isinstance(ans, Append):
        rep.action = int(EnvAction.APPEND)
        if ans.ids is not None and ans.text is not None:
            raise ValueError("Append has both ids and text: give one or the other")
        if ans.ids is not None:
            arr, n = int32_array(ans.ids, "Append.ids")
            keep.append(arr)
            rep.ids = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))
            rep.n_ids = n
        if ans.text is not None:
            b = ans.text.encode("utf-8") if isinstance(ans.text, str) else bytes(ans.text)
            if b"\0" in b:
                raise ValueError("Append.text holds a NUL byte")
            keep.append(b)
            rep.text = b
    else:
        raise TypeError("the environment returned %r: expected posttrain.Append, posttrain.Done, "
                        "a list of ids or a str" % (ans,))
    for field in ("rewards", "turn_rewards"):
        arr = _reward_array(getattr(ans, field, None), k, field)
        if arr is not None:
            keep.append(arr)
            setattr(rep, field, ctypes.cast(arr, ctypes.POINTER(ctypes.c_float)))


def _text(ptr, n):
    if not ptr:
        return None
    return ctypes.string_at(ptr, n).decode("utf-8", "replace")


class Episodes(Handle):
    """The episodes of a run (pt_episode_results), copied into Python
    objects: a sequence of Episode, and .stats (EpisodeStats).  The C
    results stay alive until close() (a `with` block) so that
    RolloutBuffer.add_episodes can take them without another copy."""

    _free_fn = "pt_episode_results_free"
    _kind = "episode results"

    def __init__(self):
        _require()
        out = out_handle()
        check(lib.pt_episode_results_create(ctypes.byref(out)), "pt_episode_results_create")
        super().__init__(out.value)
        self.episodes = []
        self.stats = None
        self.n_reward_funcs = 1

    def _read(self):
        n = lib.pt_episode_results_size(self._ptr)
        eps = []
        for i in range(n):
            e = Episode_.new()
            check(lib.pt_episode_results_get(ctypes.byref(e), self._ptr, i),
                  "pt_episode_results_get")
            ids = e.ids[:e.n_ids]
            nc = e.n_ids - e.prompt_len
            k = e.n_reward_funcs
            turns = [TurnInfo(e.turn_start[t], e.turn_len[t], TurnEnd.wrap(e.turn_end[t]))
                     for t in range(e.n_turns)]
            trw = e.turn_rewards[:e.n_turns * k] if e.n_turns else []
            eps.append(Episode(
                e.index, e.group, ids, e.prompt_len, ids[e.prompt_len:],
                list(e.loss_mask[:nc]), list(e.logprobs[:nc]), turns, list(e.rewards[:k]),
                [trw[t * k:(t + 1) * k] for t in range(e.n_turns)], EpisodeEnd.wrap(e.end),
                bool(e.truncated), Status.wrap(e.status),
                e.error.decode("utf-8", "replace") if e.error else None))
            self.n_reward_funcs = k
        s = EpisodeStats.new()
        check(lib.pt_episode_results_stats(ctypes.byref(s), self._ptr),
              "pt_episode_results_stats")
        self.episodes = eps
        self.stats = EpisodeStatsTuple(**{f: getattr(s, f) for f in _STAT_FIELDS})

    def __len__(self):
        return len(self.episodes)

    def __getitem__(self, i):
        return self.episodes[i]

    def __iter__(self):
        return iter(self.episodes)

    def add_to(self, buffer):
        """Add the episodes that ended without error to a RolloutBuffer
        (pt_rollout_buffer_add_episodes): one sample each with its ids, loss
        mask, sampling log-probabilities, group, rewards and truncation.
        All or nothing; returns how many went in."""
        from .grpo import RolloutBuffer, SampleInfo
        if not isinstance(buffer, RolloutBuffer):
            raise invalid("add_to needs a posttrain.RolloutBuffer, not %s"
                          % type(buffer).__name__, "Episodes.add_to")
        n = ctypes.c_int()
        check(lib.pt_rollout_buffer_add_episodes(ctypes.byref(n), buffer._ptr, self._ptr),
              "pt_rollout_buffer_add_episodes")
        added = [e for e in self.episodes
                 if e.end not in (EpisodeEnd.ERROR, EpisodeEnd.STOPPED)]
        if len(added) != n.value:  # pragma: no cover - would be a binding bug
            raise error_for(Status.EINTERNAL, "the library added %d episodes, the binding "
                            "counted %d" % (n.value, len(added)), "Episodes.add_to")
        buffer._meta.extend(SampleInfo(len(e.ids), e.prompt_len, e.group) for e in added)
        return n.value


class EnvProcess(Handle):
    """An environment process (pt_env_process): /bin/sh -c command in a
    process group of its own, one JSON request line per turn on its stdin,
    one JSON reply line per turn from its stdout (docs/episodes.md), each
    within `timeout` seconds, a reply line at most `max_line` bytes.  Pass it
    as play_episodes' env.  n_rewards: floats in a reply's rewards (the run's
    n_reward_funcs; play_episodes defaults to it).  name: how messages name
    it (default "env process").  finish() ends its input and waits for it;
    close() (a `with` block) also ends what is left of its group."""

    _free_fn = "pt_env_process_free"
    _kind = "environment process"

    def __init__(self, command, n_rewards=1, timeout=None, max_line=None, name=None):
        if not has_feature("env-process"):
            raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain has no environment "
                            "process (feature \"env-process\")", "EnvProcess")
        o = EnvProcessOptions.new()
        self._command = cstr(command, "command", allow_none=False)
        o.command = self._command
        o.n_rewards = int(n_rewards)
        if timeout is not None:
            o.timeout = float(timeout)
        if max_line is not None:
            o.max_line = int(max_line)
        self._name = cstr(name, "name") if name is not None else None
        o.name = self._name
        out = out_handle()
        check(lib.pt_env_process_create(ctypes.byref(out), ctypes.byref(o)), "pt_env_process_create")
        super().__init__(out.value)
        self.n_rewards = o.n_rewards

    @property
    def failure(self):
        """None while the process is alive and answering; else why not."""
        f = lib.pt_env_process_failure(self._ptr)
        return f.decode("utf-8", "replace") if f is not None else None

    @property
    def pid(self):
        """The shell's process id (the leader of its group), 0 once reaped."""
        return lib.pt_env_process_pid(self._ptr)

    def finish(self):
        """Close its input, wait up to 5 s for it to exit, end what is left of
        its group.  Raises when it did not exit in time (PeerError), exited
        with a non-zero status or left processes running (CallbackError)."""
        check(lib.pt_env_process_close(self._ptr), "EnvProcess.finish")


def play_episodes(generator, prompts, env, groups=None, max_turns=None, max_total_tokens=None,
                  stop_strings=None, tokenizer=None, decode_text=False, n_reward_funcs=None,
                  on_error=None, max_step_tokens=None, max_new_tokens=None, temperature=None,
                  top_k=None, top_p=None, min_p=None, seed=None, stream_offset=None,
                  stop_ids=None):
    """Play one episode per prompt on a Generator (pt_episodes_run).

    prompts: lists of ids (more than the generator's max_batch is fine);
    env: the environment callable (see the module's doc) or an EnvProcess;
    groups: one int
    per prompt (default: the prompt's index).  max_turns (default 4),
    max_total_tokens (per episode, prompt included; default the generator's
    max_seq), stop_strings (end a turn; need tokenizer), tokenizer (a
    posttrain.Tokenizer: stop strings, decode_text, text answers),
    decode_text (Turn.turn_text and Turn.text), n_reward_funcs (default 1),
    on_error ("continue" or "stop", or an OnError), max_step_tokens (tokens
    per batched step; default all a step holds).  Sampling, per turn:
    max_new_tokens (the turn's limit), temperature, top_k, top_p, min_p,
    seed, stream_offset (episode e samples from stream (seed, stream_offset
    + e)), stop_ids (end a turn; None: the config's eos, []: none).
    Returns Episodes."""
    _require()
    gen_ptr = generator._ptr
    if isinstance(env, EnvProcess) and n_reward_funcs is None:
        n_reward_funcs = env.n_rewards
    rows, _ = as_rows(prompts, "prompts")
    rows = [list(r) for r in rows]
    n = len(rows)
    so = GenerateOptions.new()
    for name, v in (("max_new_tokens", max_new_tokens), ("temperature", temperature),
                    ("top_k", top_k), ("top_p", top_p), ("min_p", min_p), ("seed", seed),
                    ("stream_offset", stream_offset)):
        if v is not None:
            setattr(so, name, v)
    keep = []
    if stop_ids is not None:
        arr, ns = int32_array(stop_ids, "stop_ids")
        keep.append(arr)
        so.stop_ids = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))
        so.n_stop_ids = ns
    o = EpisodeOptions.new()
    o.sampling = ctypes.pointer(so)
    for name, v in (("max_turns", max_turns), ("max_total_tokens", max_total_tokens),
                    ("n_reward_funcs", n_reward_funcs), ("max_step_tokens", max_step_tokens)):
        if v is not None:
            setattr(o, name, int(v))
    if on_error is not None:
        o.on_error = OnError.coerce(on_error, "on_error", "play_episodes")
    if stop_strings is not None:
        if isinstance(stop_strings, (str, bytes)):
            stop_strings = [stop_strings]
        ss = [cstr(x, "stop string", allow_none=False) for x in stop_strings]
        sarr = (ctypes.c_char_p * max(len(ss), 1))(*ss)
        keep.append(sarr)
        o.stop_strings = sarr
        o.n_stop_strings = len(ss)
    if tokenizer is not None:
        o.tokenizer = tokenizer._ptr
    o.decode_text = bool(decode_text)
    ids, _ = int32_array([t for r in rows for t in r], "prompts")
    lens, _ = int32_array([len(r) for r in rows], "prompt lengths")
    garr = None
    if groups is not None:
        gl = [int(g) for g in groups]
        if len(gl) != n:
            raise invalid("%d groups for %d prompts" % (len(gl), n), "play_episodes")
        garr = (ctypes.c_int64 * n)(*gl)
    k = o.n_reward_funcs if 1 <= o.n_reward_funcs <= PT_GRPO_MAX_REWARD_FUNCS else 1
    failures = []
    reply_keep = []

    def bridge(reply_p, turn_p, payload):
        reply_keep.clear()   # the library copied the previous answer already
        rep = reply_p.contents
        try:
            if rep.size < ctypes.sizeof(EnvReply):  # pragma: no cover - binding bug
                raise error_for(Status.EINTERNAL, "pt_env_reply size %d is below the "
                                "binding's %d" % (rep.size, ctypes.sizeof(EnvReply)),
                                "play_episodes")
            if failures and not isinstance(failures[-1][1], Exception):
                raise failures[-1][1]       # interrupted: end the others at once
            t = turn_p.contents
            all_ids = t.ids[:t.n_ids]
            turn = Turn(t.episode, t.group, t.turn, all_ids, t.prompt_len, t.turn_start,
                        all_ids[t.turn_start:], TurnEnd.wrap(t.turn_end),
                        EpisodeEnd.wrap(t.final) if t.final else 0, t.tokens_left,
                        _text(t.turn_text, t.turn_text_len), _text(t.text, t.text_len),
                        t.attempt)
            _fill_reply(rep, env(turn), k, reply_keep)
            return 0
        except BaseException as e:  # noqa: B902 - nothing may cross into C
            failures.append((turn_p.contents.episode, e))
            msg = ("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")
            reply_keep.append(msg)
            rep.error = msg
            return 1

    if isinstance(env, EnvProcess):   # the library calls the process itself
        cb, payload = env_process_fn(), env._ptr
    else:
        cb, payload = ENV_FN(bridge), None   # alive until pt_episodes_run returns
    res = Episodes()
    try:
        st = lib.pt_episodes_run(res._ptr, gen_ptr, ids, lens, garr, n, ctypes.byref(o), cb, payload)
        try:
            res._read()       # after a failure too: the episodes that ended, the stopped
        except Error:
            if st == Status.OK:
                raise
        interrupt = next((e for _, e in failures if not isinstance(e, Exception)), None)
        if st != Status.OK:
            if failures and st == Status.ECALLBACK:
                err = failures[0][1]
                try:
                    check(st, "pt_episodes_run")
                except Error as pe:
                    err.episodes = res
                    raise err from pe
            check(st, "pt_episodes_run")
        if interrupt is not None:
            raise interrupt
    except BaseException:
        if not res.closed and not res.episodes:
            res.close()
        raise
    return res
