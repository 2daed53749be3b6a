"""The library's named enums as enum.IntEnum classes, built at import from
its own name tables (pt_X_name / pt_X_from_name), so they never drift from C.

Member names are the upper-case of the library's names (Arch.QWEN3,
LossType.DR_GRPO, ChatFamily.CHATML); str() of a member is the library's
name ("qwen3"), int() its C value.  Every function of the binding that takes
one of these accepts the member, its C value, or the library's name as a
string (parsed by pt_X_from_name, so an unknown name raises InvalidArgument
with the library's message, listing the accepted names); values the binding
reports back (a model's arch, a finish reason, a chat family) are members.
"""

import ctypes
import enum
import operator
import re

from ._lib import lib, has_feature

__all__ = ["LibEnum", "GgufType", "SpmScores", "Arch", "RopeType", "OptimizerType", "Schedule", "LogLevel", "ChatRole",
           "ChatFamily", "FinishReason", "KVCache", "ScaleRewards", "LossType", "ISLevel",
           "RolloutLogprobs", "ISCorrection", "SkipReason", "TimeKind", "DistBackend", "RunStart", "RunAction", "Status",
           "TurnEnd", "EpisodeEnd", "EnvAction", "OnError"]

# Values are read upwards (or downwards for statuses) until this many in a
# row have no name.
_RUN = 16


class LibEnum(enum.IntEnum):
    """Base of the binding's enums: an IntEnum whose names come from libposttrain."""

    def __str__(self):
        return type(self)._c_names[int(self)]

    def __format__(self, spec):
        # A numeric presentation type ("d", "x", "02d", ...) formats the C
        # value; anything else (no spec, "s", ">8") the library's name.
        if spec and spec[-1] in "bcdoxXneEfFgG%":
            return format(int(self), spec)
        return format(str(self), spec)

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, (str, bytes)):
            return cls.from_name(value)
        return None

    @classmethod
    def from_name(cls, name):
        """The member a library name denotes (pt_X_from_name; InvalidArgument
        with the library's message for an unknown name)."""
        from ._util import cstr
        from .errors import check, error_for
        if cls._c_prefix is None:
            want = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
            for v, n in cls._c_names.items():
                if n == want:
                    return cls(v)
            raise error_for(Status.EINVAL, "unknown %s %r (one of: %s)"
                            % (cls.__name__, want, ", ".join(cls._c_names.values())),
                            cls.__name__ + ".from_name")
        fn = "pt_%s_from_name" % cls._c_prefix
        out = ctypes.c_int()
        check(getattr(lib, fn)(ctypes.byref(out), cstr(name, cls.__name__, allow_none=False)), fn)
        return cls(out.value)

    @classmethod
    def wrap(cls, value):
        """A C value as reported back: the member, or the plain int when the
        library has no name for it."""
        try:
            return cls(int(value))
        except ValueError:
            return int(value)

    @classmethod
    def coerce(cls, value, what=None, function=None):
        """An argument as a C value: a member of this enum, the library's name
        (a str), or an int (passed through, so the library reports an unknown
        one itself).  Members of another enum, bools and anything else raise
        InvalidArgument."""
        if isinstance(value, cls):
            return value
        if isinstance(value, (str, bytes)):
            return cls.from_name(value)
        if not isinstance(value, (bool, enum.Enum)):
            try:
                return cls.wrap(operator.index(value))
            except TypeError:
                pass
        from .errors import invalid
        raise invalid("%s must be a posttrain.%s, one of %s, or its C value, not %r"
                      % (what or cls.__name__, cls.__name__,
                         ", ".join(cls._c_names.values()) or "(none in this library)", value),
                      function)


def _member_name(name):
    n = re.sub(r"[^0-9A-Za-z_]", "_", name).upper()
    return "_" + n if n[:1].isdigit() else n


def _build(cls_name, prefix, doc, feature=None, start=0, step=1, name_fn=None, unknown=None,
           strip=""):
    names = {}
    if feature is None or has_feature(feature):
        fn = name_fn or getattr(lib, "pt_%s_name" % prefix)
        v, misses = start, 0
        while misses < _RUN:
            s = fn(v)
            if s is None or s.decode("utf-8", "replace") == unknown:
                misses += 1
            else:
                names[v] = s.decode("utf-8", "replace")
                misses = 0
            v += step
    cls = LibEnum(cls_name, [(_member_name(n[len(strip):] if n.startswith(strip) else n), v)
                             for v, n in names.items()],
                  module=__name__, qualname=cls_name)
    cls.__doc__ = doc
    cls._c_prefix = prefix
    cls._c_names = names
    return cls


Arch = _build("Arch", "arch", "Model architecture (pt_arch): LLAMA, QWEN2, QWEN3, MISTRAL.")
RopeType = _build("RopeType", "rope_type", "RoPE scaling (pt_rope_type): DEFAULT, LLAMA3, LINEAR.")
OptimizerType = _build("OptimizerType", "optimizer_type",
                       "Optimizer (pt_optimizer_type): ADAMW, SGD.")
Schedule = _build("Schedule", "schedule_type",
                  "Learning-rate schedule (pt_schedule_type): CONSTANT, LINEAR, COSINE.")
LogLevel = _build("LogLevel", "log_level", "Log level (pt_log_level): ERROR, WARN, INFO, DEBUG.",
                  unknown="?")
ChatRole = _build("ChatRole", "chat_role",
                  "Chat message role (pt_chat_role): SYSTEM, USER, ASSISTANT, TOOL.")
ChatFamily = _build("ChatFamily", "chat_family",
                    "Chat template family (pt_chat_family): CHATML, QWEN3, LLAMA3, LLAMA2, PHI3, "
                    "PLAIN.")
FinishReason = _build("FinishReason", "finish_reason",
                      "Why a generated row ended (pt_finish_reason): STOP, LENGTH.", "generate")
KVCache = _build("KVCache", "kv_cache",
                 "What a generator's KV cache holds (pt_kv_cache): FP32, BF16.", "generate")
ScaleRewards = _build("ScaleRewards", "grpo_scale",
                      "GRPO advantage scaling (pt_grpo_scale): GROUP, BATCH, NONE, RLOO.", "grpo")
LossType = _build("LossType", "grpo_loss_type",
                  "GRPO loss (pt_grpo_loss_type): GRPO, BNPO, DAPO, DR_GRPO, CISPO, VESPO.", "grpo")
ISLevel = _build("ISLevel", "grpo_is_level",
                 "GRPO importance-sampling level (pt_grpo_is_level): TOKEN, SEQUENCE.", "grpo")
RolloutLogprobs = _build("RolloutLogprobs", "rollout_logprobs",
                         "Which log-probabilities of a rollout (pt_rollout_logprobs): OLD, REF, "
                         "SAMPLING.", "grpo")
ISCorrection = _build("ISCorrection", "grpo_is_correction",
                      "GRPO's correction for the sampler (pt_grpo_is_correction; TRL's "
                      "vllm_importance_sampling_mode): NONE, TOKEN_TRUNCATE, TOKEN_MASK, "
                      "SEQUENCE_TRUNCATE, SEQUENCE_MASK.", "grpo-sampling")
BuiltinReward = _build("BuiltinReward", "builtin_reward",
                       "A built-in reward (pt_builtin_reward): EXACT, CONTAINS, LENGTH.",
                       "grpo-builtin")
RowsFault = _build("RowsFault", "prompt_rows_fault",
                   "Why prompt rows could not be loaded (pt_prompt_rows_fault): NONE, READ, "
                   "NO_ANSWER, ENCODE, EMPTY_PROMPT, NO_ROWS.", "grpo-builtin")
TurnEnd = _build("TurnEnd", "turn_end",
                 "How a turn of an episode ended (pt_turn_end): STOP_ID, STOP_STRING, LENGTH, "
                 "MAX_TOKENS.", "episodes")
EpisodeEnd = _build("EpisodeEnd", "episode_end",
                    "How an episode ended (pt_episode_end): DONE, MAX_TURNS, MAX_TOKENS, ERROR, "
                    "STOPPED.", "episodes")
EnvAction = _build("EnvAction", "env_action",
                   "An environment's answer (pt_env_action): APPEND, DONE.", "episodes")
OnError = _build("OnError", "episode_on_error",
                 "What an environment failure does to a run of episodes (pt_episode_on_error): "
                 "CONTINUE, STOP.", "episodes")
GgufType = _build("GgufType", "gguf_ftype",
                   "Tensor type of a GGUF export (pt_gguf_ftype): F32, F16, BF16.", "gguf")
SpmScores = _build("SpmScores", "gguf_spm_scores",
                   "tokenizer.ggml.scores of a SentencePiece-style GGUF export "
                   "(pt_gguf_spm_scores): CONVERTER, MERGES.", "gguf")
SkipReason = _build("SkipReason", "skip_reason",
                    "Why a training step was skipped (pt_skip_reason): NONE, NO_TOKENS, "
                    "NONFINITE_LOSS, NONFINITE_GRAD, NONFINITE_UPDATE.")
TimeKind = _build("TimeKind", "time_kind",
                  "What a second of wall time was spent on (pt_time_kind): STEP, GENERATE, WAIT, "
                  "SAVE, LOAD, STARTUP, EVAL, LOST, OTHER.", "goodput")
DistBackend = _build("DistBackend", "dist_backend",
                     "Communication layer of a data-parallel job (pt_dist_backend): AUTO, SINGLE, "
                     "MPI.", "dist")
RunStart = _build("RunStart", "run_start",
                  "How a run starts in its directory (pt_run_start): NEW, OVERWRITE, AUTO "
                  "(resume the latest checkpoint, or start fresh), FROM (resume a given "
                  "checkpoint).", "run")
RunAction = _build("RunAction", "run_action",
                   "What a host does after a replica check (pt_run_action): CONTINUE, "
                   "ROLLBACK, STOP.", "run")
# Statuses: OK, EINVAL, ... from pt_status_name ("PT_EINVAL"; "PT_E?" for an
# unknown code), read downwards from 0; str() is the C symbol.
Status = _build("Status", None, "libposttrain status (pt_status): OK, EINVAL, ENOMEM, ...",
                start=0, step=-1, name_fn=lib.pt_status_name, unknown="PT_E?", strip="PT_")
