"""posttrain: a pure-Python (ctypes) binding of libposttrain.

Post-training of small Llama-family models on CPUs.  No compiled
extension: the package loads libposttrain.so with ctypes, from
$POSTTRAIN_LIBRARY, else the source tree's meson build dir (build/), else
ctypes.util.find_library("posttrain") / the system loader.

    import posttrain as pt
    with pt.Model.create({"vocab_size": 64, "hidden_size": 32, ...}) as m:
        print(m.loss(pt.Batch.next_token([[1, 2, 3, 4]])))

Every failing call raises posttrain.Error (a subclass per status, e.g.
InvalidArgument, NotFound, ChecksumError) with the library's message.
See docs/python.md.
"""

from ._lib import library_path
from ._util import numpy_available, use_numpy
from .errors import (STATUS_CLASSES, CallbackError, Cancelled, ChecksumError, ClosedHandleError,
                     ConfigError, Error, FormatError, InternalError, InvalidArgument, IOFailure,
                     NonFiniteError, NoSpace, NotFound, OutOfMemory, RangeError, ShapeError,
                     StateError, Unsupported, status_name, status_str)
from .runtime import (LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARN, abort_on, blas_info, check_abort,
                      get_num_threads, log_to_python, set_abort_callback, set_log_callback,
                      set_num_threads, version, version_number)
from .model import (ARCH, LORA_TARGETS, ROPE, Batch, Context, EvalResult, ForwardResult, Model,
                    config_from_json, config_num_params, config_to_json, default_config,
                    inspect_dir, load_config, validate_config)
from .tokenizer import ChatTemplate, DecodeStream, Tokenizer
from .train import (OPTIMIZERS, SCHEDULES, Dataset, Optimizer, SftResult, StepResult,
                    dataset_defaults, load_checkpoint, optimizer_defaults, save_checkpoint,
                    schedule_factor, sft_step)
from .generate import FINISH_REASONS, HAS_GENERATE, Generation, Generator, generate_defaults
from .grpo import (HAS_GRPO, IS_LEVELS, LOSS_TYPES, SCALE_REWARDS, GrpoStats, RewardSample,
                   RolloutBuffer, grpo_defaults, grpo_step)
from . import safetensors

__version__ = "0.1.0"   # of this binding; version() gives the loaded library's

__all__ = [
    "library_path", "numpy_available", "use_numpy",
    "Error", "InvalidArgument", "OutOfMemory", "IOFailure", "FormatError", "Unsupported",
    "NotFound", "Cancelled", "RangeError", "CallbackError", "StateError", "NoSpace",
    "ChecksumError", "NonFiniteError", "ShapeError", "ConfigError", "InternalError",
    "ClosedHandleError", "STATUS_CLASSES", "status_name", "status_str",
    "version", "version_number", "blas_info", "set_num_threads", "get_num_threads",
    "set_log_callback", "log_to_python", "set_abort_callback", "check_abort", "abort_on",
    "LOG_ERROR", "LOG_WARN", "LOG_INFO", "LOG_DEBUG",
    "Model", "Context", "Batch", "ForwardResult", "EvalResult", "ARCH", "ROPE", "LORA_TARGETS",
    "default_config", "config_from_json", "load_config", "config_to_json", "config_num_params",
    "validate_config", "inspect_dir",
    "Tokenizer", "DecodeStream", "ChatTemplate",
    "Optimizer", "Dataset", "sft_step", "save_checkpoint", "load_checkpoint", "schedule_factor",
    "StepResult", "SftResult", "OPTIMIZERS", "SCHEDULES", "optimizer_defaults",
    "dataset_defaults", "safetensors",
    "Generator", "Generation", "generate_defaults", "HAS_GENERATE", "FINISH_REASONS",
    "RolloutBuffer", "RewardSample", "GrpoStats", "grpo_step", "grpo_defaults", "HAS_GRPO",
    "SCALE_REWARDS", "LOSS_TYPES", "IS_LEVELS",
]

# The library's major version must match the one this binding was written for.
if version_number() // 10000 != 0:
    raise ImportError("posttrain: this binding is for libposttrain 0.x, but %s is %s"
                      % (library_path, version()))
