"""Batched generation with a KV cache and seeded sampling (posttrain/generate.h).

Available when the loaded library has the "generate" feature
(posttrain.has_feature("generate"))."""

import collections
import ctypes
import weakref

from ._handle import Handle, out_handle
from ._lib import GenerateOptions, has_feature, lib
from ._util import as_rows, int32_array
from .enums import FinishReason, KVCache, Status
from .errors import check, error_for, invalid

__all__ = ["Generator", "Generation", "generate_defaults", "encode_prompts"]

# finish_reason: a FinishReason (STOP or LENGTH).
Generation = collections.namedtuple("Generation", ["tokens", "logprobs", "finish_reason"])

# The sampling options (the stop ids are an argument of their own).
_FIELDS = [f for f in GenerateOptions.field_names() if f not in ("stop_ids", "n_stop_ids")]


def _require():
    if not has_feature("generate"):
        raise error_for(Status.EUNSUPPORTED, "the loaded libposttrain has no pt_generate "
                        "(feature generate, posttrain/generate.h)")


def _is_text(x):
    return isinstance(x, (str, bytes))


def encode_prompts(prompts, tokenizer, add_special=True, what="generate"):
    """Prompts as token ids: a str (or UTF-8 bytes) is encoded with
    tokenizer.encode(text, add_special=add_special), a list of them
    element-wise; ids (a list of ints, or a list of such lists) pass through
    unchanged.  Returns what was given in the same shape (one row for one
    prompt).  A text prompt without a tokenizer is an InvalidArgument: the
    characters are never taken for ids."""
    if _is_text(prompts):
        if tokenizer is None:
            raise invalid("prompt %r is text but there is no tokenizer to encode it (the model "
                          "has none: pass tokenizer=, or give token ids)" % (prompts[:40],), what)
        return tokenizer.encode(prompts, add_special=add_special)
    if isinstance(prompts, (list, tuple)) and any(_is_text(p) for p in prompts):
        if not all(_is_text(p) for p in prompts):
            raise invalid("prompts mix text and token ids: give all as text or all as ids", what)
        return [encode_prompts(p, tokenizer, add_special, what) for p in prompts]
    return prompts


def _has_text(prompts):
    return _is_text(prompts) or (isinstance(prompts, (list, tuple)) and
                                 any(_is_text(p) for p in prompts))


def generate_defaults():
    """pt_generate_options_init()'s defaults as a dict."""
    _require()
    o = GenerateOptions.new()
    return {f: getattr(o, f) for f in _FIELDS}


class Generator(Handle):
    """KV cache and working memory for up to max_batch rows of max_seq tokens
    (prompt plus completion) of one model (pt_generator).  Keeps the model
    alive; closed with it, or when its LoRA adapters change."""

    _free_fn = "pt_generator_free"
    _kind = "generator"
    _needs_table = True

    def __init__(self, model, max_batch, max_seq, kv_cache=None, _internal=False):
        """kv_cache: what the KV cache holds, KVCache.FP32 (the default) or
        KVCache.BF16 (or "fp32" / "bf16"): half the memory, keys and values
        rounded to BF16 as they are stored (pt_generator_set_kv_cache)."""
        _require()
        out = out_handle()
        check(lib.pt_generator_create(ctypes.byref(out), model._ptr, int(max_batch), int(max_seq)),
              "pt_generator_create")
        super().__init__(out.value)
        if kv_cache is not None:
            self.kv_cache = kv_cache
        # The model's own generator refers back weakly (no reference cycle).
        self.model = weakref.proxy(model) if _internal else model
        self.max_batch, self.max_seq = int(max_batch), int(max_seq)
        model._add_dependent(self)

    @property
    def num_threads(self):
        """The thread count generation on this generator uses
        (pt_generator_get_num_threads); settable (0 follows set_num_threads())."""
        return int(lib.pt_generator_get_num_threads(self._ptr))

    @num_threads.setter
    def num_threads(self, n):
        check(lib.pt_generator_set_num_threads(self._ptr, int(n)), "pt_generator_set_num_threads")

    @property
    def kv_cache(self):
        """What the KV cache holds (pt_generator_get_kv_cache): a KVCache.
        Settable (a KVCache or its name): a new cache, the cached rows
        dropped (pt_generator_set_kv_cache)."""
        return KVCache(lib.pt_generator_get_kv_cache(self._ptr))

    @kv_cache.setter
    def kv_cache(self, value):
        check(lib.pt_generator_set_kv_cache(self._ptr, int(KVCache(value))),
              "pt_generator_set_kv_cache")

    def play(self, prompts, env, **options):
        """Play one multi-turn episode per prompt from the KV cache with the
        environment callable env (posttrain.play_episodes; needs the
        "episodes" feature).  Returns posttrain.Episodes."""
        from .episodes import play_episodes
        return play_episodes(self, prompts, env, **options)

    def generate(self, prompts, max_new_tokens=None, temperature=None, top_k=None, top_p=None,
                 min_p=None, seed=None, stream_offset=None, stop_ids=None, logprobs=True,
                 tokenizer=None, add_special=True):
        """Complete each prompt (a list of ids, or a list of such lists; or
        a str, or a list of str: encoded with tokenizer, default the
        model's, with its special tokens such as BOS unless
        add_special=False; InvalidArgument when there is no tokenizer).

        Sampling options default to pt_generate_options_init()'s (64 new
        tokens, temperature 1, no top-k/top-p/min-p, seed 0); temperature 0
        is greedy.  stop_ids: None for the model's eos_token_id, [] for
        none, or a list of ids (a stop id is kept as the row's last token).
        Returns one Generation(tokens, logprobs, finish_reason) per prompt
        (finish_reason FinishReason.STOP or FinishReason.LENGTH); logprobs
        are log_softmax(logits / T) of each token before filtering (None
        with logprobs=False).  A single flat prompt gives a single
        Generation."""
        self._ptr
        if tokenizer is None and _has_text(prompts):
            tokenizer = self.model.tokenizer
        prompts = encode_prompts(prompts, tokenizer, add_special, "Generator.generate")
        rows, squeeze = as_rows(prompts, "prompts")
        rows = [list(r) for r in rows]
        B = len(rows)
        if any(len(r) == 0 for r in rows):
            raise invalid("every prompt needs at least one id", "Generator.generate")
        o = GenerateOptions.new()
        given = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                     top_p=top_p, min_p=min_p, seed=seed, stream_offset=stream_offset)
        for name in _FIELDS:
            if given.get(name) is not None:
                setattr(o, name, given[name])
        stop_arr = None
        if stop_ids is not None:
            stop_arr, n_stop = int32_array(stop_ids, "stop_ids")
            o.stop_ids = ctypes.cast(stop_arr, ctypes.POINTER(ctypes.c_int32))
            o.n_stop_ids = n_stop
        M = o.max_new_tokens
        if M < 1:
            raise invalid("max_new_tokens %d must be >= 1" % M, "Generator.generate")
        ids, _ = int32_array([t for r in rows for t in r], "prompts")
        lens, _ = int32_array([len(r) for r in rows], "prompt lengths")
        toks = (ctypes.c_int32 * (B * M))()
        ntok = (ctypes.c_int32 * B)()
        fin = (ctypes.c_int32 * B)()
        lps = (ctypes.c_float * (B * M))() if logprobs else None
        check(lib.pt_generate(self._ptr, ids, lens, B, ctypes.byref(o), toks, ntok, fin, lps),
              "pt_generate")
        out = []
        for b in range(B):
            n = ntok[b]
            out.append(Generation(list(toks[b * M:b * M + n]),
                                  list(lps[b * M:b * M + n]) if logprobs else None,
                                  FinishReason.wrap(fin[b])))
        return out[0] if squeeze else out
