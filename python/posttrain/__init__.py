"""posttrain: a pure-Python (ctypes) binding of libposttrain.

Post-training of small Llama-family models on CPUs.  No compiled
extension: the package loads libposttrain.so with ctypes, from
$POSTTRAIN_LIBRARY, else the source tree's meson build dir (build/), else
ctypes.util.find_library("posttrain") / the system loader.

    import posttrain as pt
    with pt.Model.create({"vocab_size": 64, "hidden_size": 32, ...}) as m:
        print(m.loss(pt.Batch.next_token([[1, 2, 3, 4]])))

One convention throughout (docs/python.md): a call returns its value (a
named tuple when it has several, None when it has none) and raises
posttrain.Error (a subclass per status, e.g. InvalidArgument, NotFound,
ChecksumError, carrying .status and the library's message) when it fails.
Named C enums are IntEnums built from the library's name tables (Arch,
LossType, FinishReason, ...); arguments take a member or its name.
"""

from ._lib import VERSION as _VERSION
from ._lib import library_path
from ._util import numpy_available, use_numpy
from .errors import (STATUS_CLASSES, BusyError, CallbackError, Cancelled, ChecksumError, ClosedHandleError,
                     ConfigError, Error, ExistsError, FormatError, InternalError, InvalidArgument, IOFailure,
                     NonFiniteError, NoSpace, NotFound, OutOfMemory, PeerError, RangeError,
                     ShapeError, StateError, Unsupported, status_name, status_str)
from .enums import (Arch, ChatFamily, ChatRole, EnvAction, EpisodeEnd, FinishReason, GgufType,
                    KVCache, ISCorrection, ISLevel, LogLevel, LossType, OnError, OptimizerType,
                    RolloutLogprobs, RopeType, ScaleRewards, Schedule, SkipReason, SpmScores,
                    RunStart, Status, TimeKind, TurnEnd)
from .runtime import (LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARN, abort_on, blas_info, check_abort,
                      bf16_info, cpu_info, cpu_path, set_cpu_path, features, get_num_threads, has_feature, log_to_python, set_abort_callback,
                      set_log_callback, set_num_threads, version, version_number)
from .model import (LORA_TARGETS, Batch, Context, EvalResult, ForwardResult, Model,
                    config_from_json, config_num_params, config_to_json, default_config,
                    inspect_dir, load_config, validate_config, memory_estimate, dir_info_json,
                    dir_info_text)
from .tokenizer import DecodeStream, Tokenizer
from .chat import ChatIds, ChatTemplate, ToolCalls
from .train import (DatasetPosition, Dataset, EvalLoss, Optimizer, SftResult, StepResult,
                    TrainingBatch, dataset_defaults, load_checkpoint, load_checkpoint_model,
                    optimizer_defaults, plot_metrics, save_checkpoint, schedule_factor, sft_step)
from .generate import Generation, Generator, generate_defaults
from .grpo import (GrpoStats, RewardSample, RolloutBuffer, SampleInfo, grpo_defaults, grpo_step)
from .trainer import GRPOTrainer, TrainerState, TrainOutput
from .trl_config import GRPOConfig
from .sft_trainer import SFTConfig, SFTTrainer
from .episodes import (Append, Done, EnvProcess, Episode, Episodes, Pending, Turn, TurnInfo,
                       episode_defaults, play_episodes)
from .run import Run, RunState, check_output, run_state_from_json, run_state_to_json
from .goodput import Goodput, GoodputReport, young_daly_interval
from .dist import Dist, DistBackend, dist_defaults, has_mpi, launcher_rank, mpi_info
from .addition import (addition_held_out, addition_held_out_pairs, addition_problem, addition_score,
                       addition_teacher_pair, addition_train_pair, addition_prompt_ids, addition_evaluate,
                       addition_model_config, addition_save_traces, AdditionGrpo)
from . import safetensors
from . import builtin

# The project version (meson.build's, the one source; see _lib.VERSION), or
# the loaded library's when this copy of the package carries neither.
__version__ = _VERSION or version()

__all__ = [
    "library_path", "numpy_available", "use_numpy", "__version__",
    "addition_problem", "addition_held_out", "addition_train_pair", "addition_teacher_pair",
    "addition_held_out_pairs", "addition_score", "addition_prompt_ids", "addition_evaluate",
    "addition_model_config", "addition_save_traces", "AdditionGrpo",
    "Error", "InvalidArgument", "OutOfMemory", "IOFailure", "FormatError", "Unsupported",
    "NotFound", "Cancelled", "RangeError", "CallbackError", "StateError", "NoSpace",
    "ChecksumError", "NonFiniteError", "ShapeError", "ConfigError", "InternalError", "PeerError",
    "BusyError", "ExistsError", "ClosedHandleError", "STATUS_CLASSES", "status_name", "status_str",
    "Status", "Arch", "RopeType", "OptimizerType", "Schedule", "LogLevel", "ChatRole",
    "ChatFamily", "FinishReason", "KVCache", "ScaleRewards", "LossType", "ISLevel", "ISCorrection",
    "RolloutLogprobs", "SkipReason", "GgufType", "SpmScores", "TimeKind",
    "version", "version_number", "features", "has_feature", "blas_info", "cpu_path",
    "set_cpu_path", "cpu_info", "bf16_info", "set_num_threads", "get_num_threads", "set_log_callback", "log_to_python", "set_abort_callback", "check_abort",
    "abort_on", "LOG_ERROR", "LOG_WARN", "LOG_INFO", "LOG_DEBUG",
    "Model", "Context", "Batch", "ForwardResult", "EvalResult", "LORA_TARGETS",
    "default_config", "config_from_json", "load_config", "config_to_json", "config_num_params",
    "validate_config", "inspect_dir", "memory_estimate", "dir_info_json", "dir_info_text",
    "Tokenizer", "DecodeStream", "ChatTemplate", "ChatIds", "ToolCalls",
    "Optimizer", "Dataset", "sft_step", "save_checkpoint", "load_checkpoint", "load_checkpoint_model",
    "schedule_factor",
    "StepResult", "SftResult", "TrainingBatch", "EvalLoss", "DatasetPosition",
    "optimizer_defaults", "dataset_defaults", "plot_metrics", "safetensors", "builtin",
    "Generator", "Generation", "generate_defaults",
    "RolloutBuffer", "RewardSample", "SampleInfo", "GrpoStats", "grpo_step", "grpo_defaults",
    "GRPOTrainer", "GRPOConfig", "TrainerState", "TrainOutput", "SFTConfig", "SFTTrainer",
    "Append", "Done", "Pending", "Episode", "Episodes", "EnvProcess", "Turn", "TurnInfo",
    "episode_defaults",
    "play_episodes", "TurnEnd", "EpisodeEnd", "EnvAction", "OnError",
    "Goodput", "GoodputReport", "young_daly_interval",
    "Run", "RunState", "RunStart", "run_state_to_json", "run_state_from_json", "check_output",
    "Dist", "DistBackend", "dist_defaults", "has_mpi", "launcher_rank", "mpi_info",
]


def _version_tuple(v):
    return tuple(int(x) for x in v.split("-")[0].split(".")[:3])


# The library must be at least the version this binding comes with, and of
# the same major version (its ABI).
if _VERSION is not None:
    _need, _have = _version_tuple(_VERSION), _version_tuple(version())
    if _have < _need or _have[0] != _need[0]:
        raise ImportError("posttrain: this binding (%s) needs libposttrain %s or a later %d.x, "
                          "but %s is %s" % (_VERSION, _VERSION, _need[0], library_path, version()))
