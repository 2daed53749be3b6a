"""Loading libposttrain.so and declaring its C API for ctypes.

Each struct is laid out here once, field for field as in
include/posttrain/*.h, and each function the binding calls is declared once,
in the table of the feature (pt_features()) that provides it.  A struct
with a `size` field stamped by a C pt_X_init() is registered with
@_stamped, which also declares that init function; Struct.new() builds one
with the library's defaults (tests/python/test_layout.py checks every size
against the one the C _init() writes).
"""

import ctypes
import ctypes.util
import os
import re

__all__ = ["lib", "library_path", "VERSION", "FEATURES", "has_feature"]

c_int = ctypes.c_int
c_int32 = ctypes.c_int32
c_int64 = ctypes.c_int64
c_uint64 = ctypes.c_uint64
c_uint = ctypes.c_uint
c_uint8 = ctypes.c_uint8
c_size_t = ctypes.c_size_t
c_double = ctypes.c_double
c_float = ctypes.c_float
c_bool = ctypes.c_bool
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
POINTER = ctypes.POINTER


# ---- finding the library -----------------------------------------------------

def _candidates():
    """(description, path-or-name) pairs in search order, computed lazily
    (find_library may run external tools, so only when reached)."""
    env = os.environ.get("POSTTRAIN_LIBRARY")
    if env:
        if os.path.isdir(env):
            yield "$POSTTRAIN_LIBRARY (directory)", os.path.join(env, "libposttrain.so")
        else:
            yield "$POSTTRAIN_LIBRARY", env
    here = os.path.dirname(os.path.abspath(__file__))
    # Installed by pip (pyproject.toml): the library bundled in the package.
    bundled = os.path.join(here, "libposttrain.so")
    if os.path.isfile(bundled):
        yield "the library bundled in the package", bundled
    # Run from the source tree: python/posttrain/_lib.py -> <root>/build/libposttrain/
    root = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(root, "meson.build")):
        yield ("the source tree's meson build dir",
               os.path.join(root, "build", "libposttrain", "libposttrain.so"))
    # Installed by meson: the library's install directory, recorded at install.
    try:
        from ._install_config import LIBDIR
    except ImportError:
        LIBDIR = None
    if LIBDIR:
        yield "the install prefix's libdir", os.path.join(LIBDIR, "libposttrain.so.0")
    found = ctypes.util.find_library("posttrain")
    if found:
        yield "ctypes.util.find_library('posttrain')", found
    else:
        yield "ctypes.util.find_library('posttrain')", "(nothing found)"
    yield "the system loader", "libposttrain.so.0"


def _load():
    env = os.environ.get("POSTTRAIN_LIBRARY")
    if env:
        # An explicit choice is never silently replaced by another library.
        what, path = next(_candidates())
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            raise ImportError("posttrain: cannot load libposttrain.so from %s %s (%s); unset "
                              "POSTTRAIN_LIBRARY to search the usual places" % (what, path, e)) \
                from None
    tried = []
    for what, path in _candidates():
        if path == "(nothing found)":
            tried.append("  %s: nothing found" % what)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("  %s: %s (%s)" % (what, path, e))
    raise ImportError(
        "posttrain: cannot load libposttrain.so; tried, in order:\n" + "\n".join(tried) +
        "\nSet POSTTRAIN_LIBRARY to the path of libposttrain.so (for example "
        "build/libposttrain/libposttrain.so, or PREFIX/lib/x86_64-linux-gnu/libposttrain.so.0).")


lib, library_path = _load()


# ---- the binding's version ------------------------------------------------------
# One source: the project version in the top-level meson.build.  An installed
# copy has it in _install_config.py (written by python/meson.build); a copy
# run from the source tree reads meson.build itself.  None when neither is
# there (a copied package): posttrain.__version__ then is the library's.

def _source_version():
    try:
        from ._install_config import VERSION as v
        if v and not v.startswith("@"):
            return v
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    build_file = os.path.join(os.path.dirname(os.path.dirname(here)), "meson.build")
    try:
        with open(build_file, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"\bproject\s*\((.*?)\)", text, re.S)
    v = m and re.search(r"\bversion\s*:\s*'([^']+)'", m.group(1))
    return v.group(1) if v else None


VERSION = _source_version()


# ---- features ----------------------------------------------------------------------

def _features(cdll, path):
    """The loaded library's pt_features() words; ImportError for a library
    that predates pt_features (and so the rest of this binding's API)."""
    try:
        fn = cdll.pt_features
    except AttributeError:
        try:
            vs = cdll.pt_version_string
            vs.restype, vs.argtypes = c_char_p, []
            have = "libposttrain " + vs().decode("utf-8", "replace")
        except (AttributeError, OSError):
            have = "a library without pt_version_string()"
        raise ImportError(
            "posttrain: %s is %s, which has no pt_features(); this binding needs libposttrain "
            "%s or newer (set POSTTRAIN_LIBRARY to a matching build)"
            % (path, have, VERSION or "with pt_features()")) from None
    fn.restype, fn.argtypes = c_char_p, []
    return frozenset((fn() or b"").decode("ascii", "replace").split())


FEATURES = _features(lib, library_path)


def has_feature(name):
    """True when the loaded library lists `name` in pt_features().  The
    capabilities are read once; the word naming the kernel path in use
    ("cpu-path=avx2", ...) follows pt_set_cpu_path, so it is asked live."""
    if name.startswith("cpu-path="):
        fn = lib.pt_features
        fn.restype, fn.argtypes = c_char_p, []
        return name in fn().decode("ascii", "replace").split()
    return name in FEATURES


# ---- structures ----------------------------------------------------------------------

class Struct(ctypes.Structure):
    """A C struct.  Those with a C pt_X_init() (see _stamped) are built by new()."""

    _init_fn = None

    @classmethod
    def field_names(cls):
        """The struct's fields in C order, without the ABI `size` stamp."""
        return [f[0] for f in cls._fields_ if f[0] != "size"]

    @classmethod
    def new(cls):
        """A struct holding the library's defaults (its pt_X_init())."""
        from .errors import check
        s = cls()
        check(getattr(lib, cls._init_fn)(ctypes.byref(s)), cls._init_fn)
        return s

    def to_dict(self):
        return {f: getattr(self, f) for f in self.field_names()}


# Size-stamped structs by C name: (class, name of its C _init()), for the
# layout test.  Only those of features the loaded library has.
OPTION_STRUCTS = {}
# Function declarations by feature (None: always declared): {name: (restype, argtypes)}.
_DECLS = {}


def _declare(feature, table):
    for name in table:   # each function is declared once
        if any(name in t for t in _DECLS.values()):
            raise AssertionError("posttrain._lib: %s is declared twice" % name)
    _DECLS.setdefault(feature, {}).update(table)


def _stamped(c_name, feature=None):
    """Register a struct whose size field its C c_name_init() stamps, and
    declare that init function."""
    def register(cls):
        cls._init_fn = c_name + "_init"
        _declare(feature, {cls._init_fn: (c_int, [POINTER(cls)])})
        if feature is None or has_feature(feature):
            OPTION_STRUCTS[c_name] = (cls, cls._init_fn)
        return cls
    return register


PT_MODEL_INFO_MAX_DTYPES = 24
PT_GRPO_MAX_REWARD_FUNCS = 8


@_stamped("pt_model_config")
class ModelConfig(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("arch", c_int),
        ("vocab_size", c_int),
        ("hidden_size", c_int),
        ("intermediate_size", c_int),
        ("num_hidden_layers", c_int),
        ("num_attention_heads", c_int),
        ("num_key_value_heads", c_int),
        ("head_dim", c_int),
        ("max_position_embeddings", c_int),
        ("rms_norm_eps", c_double),
        ("rope_theta", c_double),
        ("rope_type", c_int),
        ("rope_factor", c_double),
        ("rope_low_freq_factor", c_double),
        ("rope_high_freq_factor", c_double),
        ("rope_original_max_position_embeddings", c_int),
        ("tie_word_embeddings", c_bool),
        ("attention_bias", c_bool),
        ("qk_norm", c_bool),
        ("sliding_window", c_int),
        ("initializer_range", c_double),
        ("bos_token_id", c_int),
        ("eos_token_id", c_int),
        ("pad_token_id", c_int),
    ]


@_stamped("pt_batch")
class Batch_(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("batch", c_int),
        ("seq", c_int),
        ("input_ids", POINTER(c_int32)),
        ("targets", POINTER(c_int32)),
        ("positions", POINTER(c_int32)),
        ("segments", POINTER(c_int32)),
        ("temperature", c_float),
    ]



class _DtypeInfo(Struct):
    _fields_ = [("name", ctypes.c_char * 16), ("tensors", c_uint64), ("bytes", c_uint64)]


@_stamped("pt_model_dir_info")
class ModelDirInfo(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("config", ModelConfig),
        ("num_params", c_uint64),
        ("num_files", c_int),
        ("num_tensors", c_uint64),
        ("weight_bytes", c_uint64),
        ("num_dtypes", c_int),
        ("dtypes", _DtypeInfo * PT_MODEL_INFO_MAX_DTYPES),
        ("sharded", c_bool),
        ("has_tokenizer", c_bool),
        ("has_generation_config", c_bool),
        ("weights_status", c_int),
        ("weights_problem", ctypes.c_char * 320),
        ("gguf_version", c_int),
        ("quantised", c_bool),
        ("tokenizer_status", c_int),
        ("tokenizer_problem", ctypes.c_char * 320),
    ]


@_stamped("pt_memory_estimate_options")
class MemoryEstimateOptions(Struct):
    _fields_ = [("size", c_size_t), ("context", c_int64), ("batch", c_int64), ("seq", c_int64),
                ("lora_rank", c_int64)]


@_stamped("pt_memory_estimate")
class MemoryEstimate(Struct):
    _fields_ = [("size", c_size_t)] + [(n, c_int64) for n in (
        "context", "kv_cache_slots", "batch", "seq", "lora_rank")] + [(n, ctypes.c_double) for n in (
        "weights_bytes", "kv_cache_bytes", "inference_bytes", "full_state_bytes", "activation_bytes",
        "full_finetune_bytes", "lora_params", "lora_state_bytes", "lora_activation_bytes", "lora_bytes")]


@_stamped("pt_model_load_options")
class ModelLoadOptions(Struct):
    _fields_ = [("size", c_size_t), ("load_tokenizer", c_bool), ("bf16", c_int), ("quantize", c_int)]


@_stamped("pt_model_save_options")
class ModelSaveOptions(Struct):
    _fields_ = [("size", c_size_t), ("tokenizer_dir", c_char_p), ("copy_tokenizer", c_bool)]


@_stamped("pt_eval_options")
class EvalOptions(Struct):
    _fields_ = [("size", c_size_t), ("max_length", c_int), ("add_special", c_bool)]


class EvalResult(Struct):
    _fields_ = [
        ("loss", c_double),
        ("tokens", c_int64),
        ("n_rows", c_size_t),
        ("row_loss", POINTER(c_double)),
        ("row_tokens", POINTER(c_int64)),
    ]


@_stamped("pt_plot_options", "plot")
class PlotOptions(Struct):
    _fields_ = [("size", c_size_t), ("width", c_int), ("height", c_int), ("title", c_char_p),
                ("series", ctypes.c_uint)]


@_stamped("pt_gguf_export_options", "gguf")
class GgufExportOptions(Struct):
    _fields_ = [("size", c_size_t), ("type", c_int), ("name", c_char_p), ("spm_scores", c_int)]


PT_TIME_KINDS = 9



# run.h: the run layer (docs/run-directory.md)
class RunInput(Struct):
    _fields_ = [
        ("name", c_char_p),
        ("path", c_char_p),
        ("tree", c_bool),
    ]


@_stamped("pt_run_options", "run")
class RunOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("dir", c_char_p),
        ("metrics", c_char_p),
        ("start", c_int),
        ("resume_from", c_char_p),
        ("kind", c_char_p),
        ("inputs", POINTER(RunInput)),
        ("n_inputs", c_size_t),
        ("dir_name", c_char_p),
        ("metrics_name", c_char_p),
        ("resume_name", c_char_p),
        ("keep_last", c_int64),
        ("keep_every", c_int64),
        ("save_every", c_int64),
        ("save_auto", c_bool),
        ("mtbf_seconds", c_double),
        ("dist", c_void_p),
        ("goodput", c_void_p),
        ("check_every", c_int64),
        ("on_mismatch", c_int),
        ("max_rollbacks", c_int),
        ("test_flip_rank", c_int),
        ("test_flip_step", c_int64),
        ("notes", c_void_p),        # a LOG_FN (level, text, user)
        ("notes_user", c_void_p),
        ("save_name", c_char_p),
        ("mismatch_name", c_char_p),
    ]


@_stamped("pt_run_state", "run")
class RunState(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("step", c_int64),
        ("optimizer_steps", c_int64),
        ("epoch", c_int64),
        ("cursor", c_int64),
        ("rows", c_int64),
        ("seed", c_uint64),
        ("order_rng", c_uint64),
        ("rng", c_uint64),
    ]


@_stamped("pt_goodput_report", "goodput")
class GoodputReport(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("wall", c_double),
        ("seconds", c_double * PT_TIME_KINDS),
        ("pending", c_double),
        ("goodput", c_double),
        ("steps_kept", c_int64),
        ("steps_lost", c_int64),
    ]


@_stamped("pt_dist_options", "dist")
class DistOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("backend", c_int),
        ("timeout_s", c_double),
        ("bucket_bytes", c_size_t),
    ]


@_stamped("pt_optimizer_options")
class OptimizerOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("type", c_int),
        ("lr", c_double),
        ("beta1", c_double),
        ("beta2", c_double),
        ("eps", c_double),
        ("momentum", c_double),
        ("weight_decay", c_double),
        ("decay_norms_and_biases", c_bool),
        ("schedule", c_int),
        ("warmup_steps", c_int64),
        ("total_steps", c_int64),
        ("min_lr_ratio", c_double),
        ("max_grad_norm", c_double),
    ]


@_stamped("pt_step_stats")
class StepStats(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("grad_norm", c_double),
        ("lr", c_double),
        ("step", c_int64),
        ("skipped", c_bool),
        ("skipped_total", c_int64),
        ("skip_reason", c_int),
    ]


@_stamped("pt_sft_stats")
class SftStats(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("loss", c_double),
        ("tokens", c_double),
        ("grad_norm", c_double),
        ("lr", c_double),
        ("step", c_int64),
        ("skipped", c_bool),
        ("skipped_total", c_int64),
        ("skip_reason", c_int),
        ("comm_seconds", c_double),
    ]


@_stamped("pt_dataset_options")
class DatasetOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("max_length", c_int),
        ("completion_only", c_bool),
        ("skip_bad_rows", c_bool),
        ("add_eos", c_bool),
        ("chat_template", c_char_p),
        ("eval_fraction", c_double),
        ("batch_size", c_int),
        ("pack", c_bool),
        ("shuffle", c_bool),
        ("seed", c_uint64),
    ]


@_stamped("pt_dataset_stats")
class DatasetStats(Struct):
    _fields_ = [("size", c_size_t)] + [(n, c_int64) for n in (
        "rows", "skipped_rows", "empty_rows", "truncated_rows", "truncated_tokens",
        "train_examples", "eval_examples", "train_tokens", "train_target_tokens",
        "epoch", "cursor")]


@_stamped("pt_lora_options")
class LoraOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("rank", c_int),
        ("alpha", c_double),
        ("targets", c_uint),
        ("dropout", c_double),
        ("seed", c_uint64),
    ]


class ChatToolCall(Struct):
    _fields_ = [("name", c_char_p), ("arguments", c_char_p)]


class ChatMessage(Struct):
    _fields_ = [("role", c_int), ("content", c_char_p), ("name", c_char_p),
                ("tool_calls", POINTER(ChatToolCall)), ("n_tool_calls", c_size_t)]


@_stamped("pt_chat_options")
class ChatOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("add_generation_prompt", c_int),
        ("bos", c_int),
        ("default_system", c_char_p),
        ("enable_thinking", c_int),
        ("date_string", c_char_p),
        ("tools_json", c_char_p),
        ("tools_in_user_message", c_int),
    ]


@_stamped("pt_tensor_info")
class TensorInfo(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("name", c_char_p),
        ("data", POINTER(c_float)),
        ("grad", POINTER(c_float)),
        ("ndim", c_int),
        ("shape", c_int64 * 2),
        ("numel", c_size_t),
        ("trainable", c_bool),
        ("adapter", c_bool),
        ("no_decay", c_bool),
    ]


@_stamped("pt_generate_options", "generate")
class GenerateOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("max_new_tokens", c_int),
        ("temperature", c_float),
        ("top_k", c_int),
        ("top_p", c_float),
        ("min_p", c_float),
        ("seed", c_uint64),
        ("stream_offset", c_uint64),
        ("stop_ids", POINTER(c_int32)),
        ("n_stop_ids", c_int),
    ]



@_stamped("pt_rollout_buffer_options", "grpo")
class RolloutBufferOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("n_reward_funcs", c_int),
        ("reward_names", POINTER(c_char_p)),
        ("reward_weights", POINTER(c_double)),
    ]


@_stamped("pt_rollout_sample", "grpo")
class RolloutSample(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_int),
        ("prompt_len", c_int),
        ("loss_mask", POINTER(c_uint8)),
        ("old_logprobs", POINTER(c_float)),
        ("ref_logprobs", POINTER(c_float)),
        ("group", c_int64),
        ("rewards", POINTER(c_float)),
        ("truncated", c_bool),
        ("sampling_logprobs", POINTER(c_float)),
        ("advantages", POINTER(c_float)),
        ("segment_rewards", POINTER(c_float)),
        ("n_segments", c_int),
    ]


@_stamped("pt_rollout_logprobs_options", "temperature")
class RolloutLogprobsOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("temperature", c_double),
    ]


class RewardItem(Struct):
    _fields_ = [
        ("ids", POINTER(c_int32)),
        ("n_ids", c_int),
        ("prompt_len", c_int),
        ("group", c_int64),
        ("truncated", c_bool),
    ]


class RewardBatch(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("n", c_int),
        ("items", POINTER(RewardItem)),
        ("func_index", c_int),
        ("func_name", c_char_p),
    ]


@_stamped("pt_grpo_options", "grpo")
class GrpoOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("scale_rewards", c_int),
        ("loss_type", c_int),
        ("importance_sampling_level", c_int),
        ("epsilon_low", c_double),
        ("epsilon_high", c_double),
        ("beta", c_double),
        ("max_completion_length", c_int),
        ("overlong_buffer", c_int),
        ("mask_truncated_completions", c_bool),
        ("drop_zero_std_groups", c_bool),
        ("global_tokens", c_double),
        ("global_samples", c_double),
        ("micro_batch", c_int),
        ("temperature", c_double),
        ("importance_sampling_correction", c_int),
        ("importance_sampling_clip_max", c_double),
        ("importance_sampling_clip_min", c_double),
        ("delta", c_double),
        ("top_entropy_quantile", c_double),
        ("vespo_k_pos", c_double),
        ("vespo_lambda_pos", c_double),
        ("vespo_k_neg", c_double),
        ("vespo_lambda_neg", c_double),
        ("entropy_coef", c_double),
        ("use_adaptive_entropy", c_bool),
        ("entropy_coef_min", c_double),
        ("entropy_coef_max", c_double),
        ("entropy_coef_delta", c_double),
        ("entropy_target", c_double),
        ("entropy_last", c_double),
    ]


# posttrain/grpo_builtin.h
@_stamped("pt_builtin_rewards", "grpo-builtin")
class BuiltinRewards(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("n", c_int),
        ("kinds", c_int * PT_GRPO_MAX_REWARD_FUNCS),
        ("weights", c_double * PT_GRPO_MAX_REWARD_FUNCS),
        ("max_new_tokens", c_int),
    ]


@_stamped("pt_builtin_reward_payload", "grpo-builtin")
class BuiltinRewardPayload(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("rewards", POINTER(BuiltinRewards)),
        ("tokenizer", c_void_p),
        ("answers", POINTER(c_char_p)),
        ("n_answers", c_int64),
    ]


@_stamped("pt_prompt_row", "grpo-builtin")
class PromptRow(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_int),
        ("answer", c_char_p),
        ("json", c_char_p),
    ]


@_stamped("pt_prompt_rows_options", "grpo-builtin")
class PromptRowsOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("chat_template", c_void_p),
        ("read_answer", c_bool),
        ("require_answer", c_bool),
        ("keep_json", c_bool),
        ("max_line", c_size_t),
        ("messages", c_bool),
    ]


@_stamped("pt_prompt_rows_report", "grpo-builtin")
class PromptRowsReport(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("fault", c_int),
        ("line", c_size_t),
    ]


PT_GRPO_EVAL_KINDS = 2


class GrpoEvalSums(Struct):
    """pt_grpo_eval_sums: doubles only, index 0 greedy, 1 sampled."""
    _fields_ = [
        ("completions", c_double * PT_GRPO_EVAL_KINDS),
        ("reward", c_double * PT_GRPO_EVAL_KINDS),
        ("correct", c_double * PT_GRPO_EVAL_KINDS),
        ("length", c_double * PT_GRPO_EVAL_KINDS),
        ("reward_func", (c_double * PT_GRPO_MAX_REWARD_FUNCS) * PT_GRPO_EVAL_KINDS),
    ]


@_stamped("pt_grpo_eval_options", "grpo-builtin")
class GrpoEvalOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("sampling", POINTER(GenerateOptions)),
        ("samples", c_int),
        ("seed", c_uint64),
        ("batch", c_int),
        ("begin", c_int64),
        ("count", c_int64),
    ]


@_stamped("pt_grpo_stats", "grpo")
class GrpoStats(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("loss", c_double),
        ("reward", c_double),
        ("reward_std", c_double),
        ("n_reward_funcs", c_int),
        ("reward_func_mean", c_double * PT_GRPO_MAX_REWARD_FUNCS),
        ("reward_func_std", c_double * PT_GRPO_MAX_REWARD_FUNCS),
        ("frac_reward_zero_std", c_double),
        ("groups", c_int64),
        ("groups_dropped", c_int64),
        ("kl", c_double),
        ("entropy", c_double),
        ("clip_ratio_low", c_double),
        ("clip_ratio_high", c_double),
        ("clip_ratio_region", c_double),
        ("completion_mean_length", c_double),
        ("completion_min_length", c_double),
        ("completion_max_length", c_double),
        ("clipped_ratio", c_double),
        ("tokens", c_double),
        ("grad_norm", c_double),
        ("lr", c_double),
        ("step", c_int64),
        ("skipped", c_bool),
        ("skipped_total", c_int64),
        ("train_seconds", c_double),
        ("tokens_per_second", c_double),
        ("skip_reason", c_int),
        ("samples_unscored", c_int64),
        ("comm_seconds", c_double),
        ("sampling_logp_difference_mean", c_double),
        ("sampling_logp_difference_max", c_double),
        ("importance_sampling_ratio_min", c_double),
        ("importance_sampling_ratio_mean", c_double),
        ("importance_sampling_ratio_max", c_double),
        ("importance_sampling_corrected_fraction", c_double),
        ("cispo_clip_ratio", c_double),
        ("entropy_threshold", c_double),
        ("entropy_kept_fraction", c_double),
        ("segments", c_int64),
        ("frac_zero_std_groups", c_double),
        ("vespo_phi_seq_mean", c_double),
        ("entropy_measured", c_double),
        ("entropy_coef_next", c_double),
    ]


@_stamped("pt_episode_options", "episodes")
class EpisodeOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("sampling", POINTER(GenerateOptions)),
        ("max_turns", c_int),
        ("max_total_tokens", c_int),
        ("stop_strings", POINTER(c_char_p)),
        ("n_stop_strings", c_int),
        ("tokenizer", c_void_p),
        ("decode_text", c_bool),
        ("n_reward_funcs", c_int),
        ("on_error", c_int),
        ("max_step_tokens", c_int),
    ]


class EnvTurn(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("episode", c_int),
        ("group", c_int64),
        ("turn", c_int),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_int),
        ("prompt_len", c_int),
        ("turn_start", c_int),
        ("turn_end", c_int),
        ("final", c_int),
        ("tokens_left", c_int),
        ("turn_text", POINTER(ctypes.c_char)),
        ("turn_text_len", c_size_t),
        ("text", POINTER(ctypes.c_char)),
        ("text_len", c_size_t),
        ("attempt", c_int),
    ]


class EnvReply(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("action", c_int),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_int),
        ("text", c_char_p),
        ("rewards", POINTER(c_float)),
        ("turn_rewards", POINTER(c_float)),
        ("error", c_char_p),
    ]


@_stamped("pt_env_process_options", "env-process")
class EnvProcessOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("command", c_char_p),
        ("n_rewards", c_int),
        ("timeout", c_double),
        ("max_line", c_size_t),
        ("name", c_char_p),
        ("request", c_void_p),      # pt_env_request_fn: not used by the binding
        ("request_user", c_void_p),
    ]


@_stamped("pt_episode", "episodes")
class Episode_(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("index", c_int),
        ("group", c_int64),
        ("ids", POINTER(c_int32)),
        ("n_ids", c_int),
        ("prompt_len", c_int),
        ("loss_mask", POINTER(c_uint8)),
        ("logprobs", POINTER(c_float)),
        ("n_turns", c_int),
        ("turn_start", POINTER(c_int32)),
        ("turn_len", POINTER(c_int32)),
        ("turn_end", POINTER(c_int32)),
        ("n_reward_funcs", c_int),
        ("rewards", POINTER(c_float)),
        ("turn_rewards", POINTER(c_float)),
        ("end", c_int),
        ("truncated", c_bool),
        ("status", c_int),
        ("error", c_char_p),
    ]


@_stamped("pt_episode_stats", "episodes")
class EpisodeStats(Struct):
    _fields_ = [("size", c_size_t)] + [(n, c_int) for n in (
        "episodes", "done", "max_turns", "max_tokens", "errors", "stopped", "truncated")] + [
        (n, c_int64) for n in ("turns", "sampled_tokens", "appended_tokens", "prompt_tokens",
                               "prefill_tokens", "prompt_tokens_shared", "forward_tokens", "steps",
                               "env_calls")] + [
        (n, c_double) for n in ("seconds", "env_seconds", "tokens_per_second")] + [
        ("env_pending", c_int64)]


# ---- function declarations -------------------------------------------------

LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)
ABORT_FN = ctypes.CFUNCTYPE(c_int, c_void_p)
# pt_reward_fn: int (*)(float *rewards, const pt_reward_batch *batch, void *payload)
REWARD_FN = ctypes.CFUNCTYPE(c_int, POINTER(c_float), POINTER(RewardBatch), c_void_p)

# pt_env_fn: int (*)(pt_env_reply *reply, const pt_env_turn *turn, void *payload)
ENV_FN = ctypes.CFUNCTYPE(c_int, POINTER(EnvReply), POINTER(EnvTurn), c_void_p)

P = POINTER
vp = c_void_p        # opaque handles are passed as void pointers
pp = P(c_void_p)     # out-parameter for a handle

_declare(None, {
    # common.h
    "pt_status_name": (c_char_p, [c_int]),
    "pt_status_str": (c_char_p, [c_int]),
    "pt_last_error": (c_char_p, []),
    "pt_last_status": (c_int, []),
    "pt_clear_error": (None, []),
    "pt_free": (None, [c_void_p]),
    "pt_version_number": (c_int, []),
    "pt_version_string": (c_char_p, []),
    "pt_blas_info": (c_char_p, []),
    "pt_features": (c_char_p, []),
    "pt_has_feature": (c_int, [c_char_p]),
    "pt_set_log_callback": (c_int, [LOG_FN, c_int, c_void_p]),
    "pt_set_abort_callback": (c_int, [ABORT_FN, c_void_p]),
    "pt_check_abort": (c_int, []),
    "pt_set_num_threads": (c_int, [c_int]),
    "pt_get_num_threads": (c_int, []),
    # model.h
    "pt_model_config_from_json": (c_int, [P(ModelConfig), c_char_p, c_size_t]),
    "pt_model_config_validate": (c_int, [P(ModelConfig)]),
    "pt_model_create": (c_int, [pp, P(ModelConfig), c_uint64]),
    "pt_model_free": (None, [vp]),
    "pt_model_get_config": (c_int, [P(ModelConfig), vp]),
    "pt_model_param_count": (c_uint64, [vp]),
    "pt_model_trainable_param_count": (c_uint64, [vp]),
    "pt_model_tensor_count": (c_size_t, [vp]),
    "pt_model_tensor_info": (c_int, [P(TensorInfo), vp, c_size_t]),
    "pt_model_find_tensor_info": (c_int, [P(TensorInfo), vp, ctypes.c_char_p]),
    "pt_context_create": (c_int, [pp, vp, c_int, c_int]),
    "pt_context_free": (None, [vp]),
    "pt_model_forward": (c_int, [vp, P(Batch_), P(c_float), P(c_float)]),
    "pt_model_backward": (c_int, [vp, P(c_float)]),
    "pt_model_zero_grad": (c_int, [vp]),
    "pt_model_alloc_grads": (c_int, [vp]),
    "pt_model_loss": (c_int, [vp, P(Batch_), P(c_float), c_bool, P(c_float)]),
    # modelio.h
    "pt_model_config_load": (c_int, [P(ModelConfig), c_char_p]),
    "pt_model_config_to_json": (c_int, [P(c_void_p), P(ModelConfig)]),
    "pt_model_config_num_params": (c_int, [P(c_uint64), P(ModelConfig)]),
    "pt_model_dir_inspect": (c_int, [P(ModelDirInfo), c_char_p]),
    # addition.h
    "pt_addition_problem": (c_int, [ctypes.c_char_p, c_size_t, ctypes.c_char_p, c_size_t, c_int, c_int64, c_int64,
                                    c_bool]),
    "pt_addition_held_out": (c_bool, [c_int64, c_int64]),
    "pt_addition_train_pair": (c_int, [P(c_int64), P(c_int64), c_int, P(c_uint64)]),
    "pt_addition_teacher_pair": (c_int, [P(c_int64), P(c_int64), P(c_bool), c_int, ctypes.c_double, P(c_uint64)]),
    "pt_addition_held_out_pairs": (c_int, [P(c_int64), P(c_size_t), c_size_t, c_int]),
    "pt_addition_score": (c_int, [P(c_bool), P(c_bool), vp, P(c_int32), c_size_t, c_int, c_int64, c_int64]),
    "pt_model_config_memory_estimate": (c_int, [P(MemoryEstimate), P(ModelConfig), P(MemoryEstimateOptions)]),
    "pt_model_dir_info_to_json": (c_int, [P(c_void_p), P(c_size_t), c_char_p, P(ModelDirInfo), P(MemoryEstimate)]),
    "pt_model_dir_info_to_text": (c_int, [P(c_void_p), P(c_size_t), c_char_p, P(ModelDirInfo), P(MemoryEstimate)]),
    "pt_model_load_dir": (c_int, [pp, c_char_p, P(ModelLoadOptions)]),
    "pt_model_source_dir": (c_char_p, [vp]),
    "pt_model_tokenizer": (c_void_p, [vp]),
    "pt_model_save_dir": (c_int, [vp, c_char_p, P(ModelSaveOptions)]),
    "pt_model_eval_jsonl": (c_int, [P(P(EvalResult)), vp, vp, c_char_p, P(EvalOptions)]),
    "pt_eval_result_free": (None, [P(EvalResult)]),
    # lora.h
    "pt_model_add_lora": (c_int, [vp, P(LoraOptions)]),
    "pt_model_has_lora": (c_bool, [vp]),
    "pt_model_get_lora": (c_int, [P(LoraOptions), vp]),
    "pt_model_merge_lora": (c_int, [vp]),
    "pt_model_remove_lora": (c_int, [vp]),
    "pt_lora_save_peft": (c_int, [vp, c_char_p, c_char_p]),
    "pt_lora_load_peft": (c_int, [vp, c_char_p]),
    # tokenizer.h
    "pt_tokenizer_load": (c_int, [pp, c_char_p]),
    "pt_tokenizer_load_memory": (c_int, [pp, c_char_p, c_size_t]),
    "pt_tokenizer_load_memory_config": (c_int, [pp, c_char_p, c_size_t, c_char_p, c_size_t]),
    "pt_tokenizer_create_bytes": (c_int, [pp]),
    "pt_tokenizer_free": (None, [vp]),
    "pt_tokenizer_encode": (c_int, [P(P(c_int32)), P(c_size_t), vp, c_char_p, c_size_t, c_uint]),
    "pt_tokenizer_decode": (c_int, [P(c_void_p), P(c_size_t), vp, P(c_int32), c_size_t, c_uint]),
    "pt_tokenizer_vocab_size": (c_int32, [vp]),
    "pt_tokenizer_token_to_id": (c_int, [P(c_int32), vp, c_char_p]),
    "pt_tokenizer_id_to_token": (c_char_p, [vp, c_int32]),
    "pt_tokenizer_is_special": (c_int, [vp, c_int32]),
    "pt_tokenizer_is_added": (c_int, [vp, c_int32]),
    "pt_tokenizer_bos_id": (c_int32, [vp]),
    "pt_tokenizer_eos_id": (c_int32, [vp]),
    "pt_tokenizer_pad_id": (c_int32, [vp]),
    "pt_tokenizer_unk_id": (c_int32, [vp]),
    "pt_tokenizer_bos_token": (c_char_p, [vp]),
    "pt_tokenizer_eos_token": (c_char_p, [vp]),
    "pt_tokenizer_pad_token": (c_char_p, [vp]),
    "pt_tokenizer_add_bos": (c_int, [vp]),
    "pt_tokenizer_add_eos": (c_int, [vp]),
    "pt_tokenizer_chat_template": (c_char_p, [vp, c_char_p]),
    "pt_decode_stream_create": (c_int, [pp, vp, c_uint]),
    "pt_decode_stream_step": (c_int, [P(c_void_p), P(c_size_t), vp, c_int32]),
    "pt_decode_stream_flush": (c_int, [P(c_void_p), P(c_size_t), vp]),
    "pt_decode_stream_free": (None, [vp]),
    # chat.h
    "pt_chat_template_create": (c_int, [pp, c_char_p]),
    "pt_chat_template_from_source": (c_int, [pp, c_char_p, c_char_p, c_char_p]),
    "pt_chat_template_from_tokenizer": (c_int, [pp, vp]),
    "pt_chat_template_free": (None, [vp]),
    "pt_chat_template_family": (c_int, [vp]),
    "pt_chat_template_name": (c_char_p, [vp]),
    "pt_chat_template_set_tokens": (c_int, [vp, c_char_p, c_char_p]),
    "pt_chat_render": (c_int, [P(c_void_p), P(c_size_t), vp, P(ChatMessage), c_size_t,
                               P(ChatOptions)]),
    "pt_chat_render_ids": (c_int, [P(P(c_int32)), P(P(ctypes.c_uint8)), P(c_size_t), vp, vp,
                                   P(ChatMessage), c_size_t, P(ChatOptions)]),
    "pt_chat_template_supports_tools": (c_int, [vp]),
    "pt_chat_parse_tool_calls": (c_int, [P(P(ChatToolCall)), P(c_size_t), P(c_size_t), vp, c_char_p,
                                         c_size_t]),
    # train.h
    "pt_optimizer_create": (c_int, [pp, vp, P(OptimizerOptions)]),
    "pt_optimizer_free": (None, [vp]),
    "pt_optimizer_step": (c_int, [P(StepStats), vp]),
    "pt_optimizer_lr": (c_double, [vp]),
    "pt_optimizer_step_count": (c_int64, [vp]),
    "pt_sft_step": (c_int, [P(SftStats), vp, vp, P(Batch_), P(P(c_float)), c_int]),
    "pt_dataset_create": (c_int, [pp, P(DatasetOptions)]),
    "pt_dataset_load_jsonl": (c_int, [pp, c_char_p, vp, P(DatasetOptions)]),
    "pt_dataset_add": (c_int, [vp, P(c_int32), P(ctypes.c_uint8), c_size_t]),
    "pt_dataset_free": (None, [vp]),
    "pt_dataset_get_stats": (c_int, [P(DatasetStats), vp]),
    "pt_dataset_next_batch": (c_int, [P(Batch_), P(P(c_float)), vp]),
    "pt_dataset_eval_loss": (c_int, [P(c_double), P(c_double), vp, vp]),
    "pt_dataset_max_seq": (c_int, [P(c_int), vp]),
    "pt_dataset_get_position": (c_int, [P(c_int64), P(c_int64), vp]),
    "pt_dataset_set_position": (c_int, [vp, c_int64, c_int64]),
    "pt_checkpoint_save": (c_int, [vp, vp, c_char_p, c_char_p]),
    "pt_checkpoint_load": (c_int, [P(c_void_p), vp, vp, c_char_p]),
    "pt_checkpoint_read_host": (c_int, [P(c_void_p), c_char_p]),
    "pt_checkpoint_load_weights": (c_int, [vp, c_char_p]),
    "pt_checkpoint_host_model": (c_int, [P(c_void_p), P(LoraOptions), P(c_bool), c_void_p]),
    "pt_schedule_factor": (c_int, [P(c_double), c_int, c_int64, c_int64, c_int64, c_double]),
})
_declare("generate", {
    "pt_generator_create": (c_int, [pp, vp, c_int, c_int]),
    "pt_model_stop_ids": (c_int, [P(c_int32), P(c_int), vp]),
    "pt_generator_free": (None, [vp]),
    "pt_generate": (c_int, [vp, P(c_int32), P(c_int32), c_int, P(GenerateOptions), P(c_int32),
                            P(c_int32), P(c_int32), P(c_float)]),
})
_declare("grpo", {
    "pt_rollout_buffer_create": (c_int, [pp, P(RolloutBufferOptions)]),
    "pt_rollout_buffer_free": (None, [vp]),
    "pt_rollout_buffer_add": (c_int, [vp, P(RolloutSample)]),
    "pt_rollout_buffer_add_group": (c_int, [vp, P(RolloutSample), c_int]),
    "pt_rollout_buffer_clear": (c_int, [vp]),
    "pt_rollout_buffer_size": (c_int, [vp]),
    "pt_rollout_buffer_set_reward": (c_int, [vp, c_int, c_int, c_float]),
    "pt_rollout_buffer_get_reward": (c_int, [P(c_float), vp, c_int, c_int]),
    "pt_rollout_buffer_compute_logprobs": (c_int, [vp, vp, c_int]),
    "pt_rollout_buffer_get_logprobs": (c_int, [P(c_float), vp, c_int, c_int]),
    "pt_rollout_buffer_score": (c_int, [vp, c_int, REWARD_FN, c_void_p]),
    "pt_grpo_step": (c_int, [P(GrpoStats), vp, vp, vp, P(GrpoOptions)]),
})
_declare("temperature", {
    "pt_rollout_buffer_compute_logprobs_with": (c_int, [vp, vp, c_int, P(RolloutLogprobsOptions)]),
})
_declare("grpo-segments", {
    "pt_rollout_buffer_set_segment_reward": (c_int, [vp, c_int, c_int, c_float]),
    "pt_rollout_buffer_get_segment_reward": (c_int, [P(c_float), vp, c_int, c_int]),
})
_declare("episodes", {
    "pt_episode_results_create": (c_int, [pp]),
    "pt_episode_results_free": (None, [vp]),
    "pt_episodes_run": (c_int, [vp, vp, P(c_int32), P(c_int32), P(c_int64), c_int,
                                P(EpisodeOptions), ENV_FN, c_void_p]),
    "pt_episode_results_size": (c_int, [vp]),
    "pt_episode_results_get": (c_int, [P(Episode_), vp, c_int]),
    "pt_episode_results_stats": (c_int, [P(EpisodeStats), vp]),
    "pt_rollout_buffer_add_episodes": (c_int, [P(c_int), vp, vp]),
})
_declare("grpo-builtin", {
    "pt_builtin_rewards_add": (c_int, [P(BuiltinRewards), c_int, c_double]),
    "pt_builtin_rewards_have_accuracy": (c_bool, [P(BuiltinRewards)]),
    "pt_builtin_reward_score": (c_int, [P(c_float), c_int, c_char_p, c_size_t, c_char_p, c_int, c_int]),
    "pt_builtin_reward_fn": (c_int, [P(c_float), P(RewardBatch), c_void_p]),
    "pt_prompt_rows_load": (c_int, [pp, P(PromptRowsReport), c_char_p, vp, P(PromptRowsOptions)]),
    "pt_prompt_rows_create": (c_int, [pp]),
    "pt_prompt_rows_add": (c_int, [vp, P(c_int32), c_int, c_char_p]),
    "pt_prompt_rows_free": (None, [vp]),
    "pt_prompt_rows_size": (c_int64, [vp]),
    "pt_prompt_rows_max_prompt_len": (c_int, [vp]),
    "pt_prompt_rows_get": (c_int, [P(PromptRow), vp, c_int64]),
    "pt_grpo_evaluate": (c_int, [P(GrpoEvalSums), vp, vp, vp, P(BuiltinRewards), P(GrpoEvalOptions)]),
    "pt_grpo_eval_row": (c_int, [P(c_void_p), P(GrpoEvalSums), P(BuiltinRewards), c_int, c_int64]),
})
_declare("env-process", {
    "pt_env_process_create": (c_int, [pp, P(EnvProcessOptions)]),
    "pt_env_process_free": (None, [vp]),
    "pt_env_process_close": (c_int, [vp]),
    "pt_env_process_failure": (c_char_p, [vp]),
    "pt_env_process_pid": (c_int64, [vp]),
    "pt_env_process_call": (c_int, [P(EnvReply), P(EnvTurn), c_void_p]),
})


def env_process_fn():
    """pt_env_process_call as a pt_env_fn to hand to pt_episodes_run."""
    return ENV_FN(ctypes.cast(lib.pt_env_process_call, c_void_p).value)


_declare("plot", {
    "pt_plot_metrics_svg": (c_int, [c_char_p, c_char_p, P(PlotOptions)]),
})
_declare("gguf", {
    "pt_model_export_gguf": (c_int, [vp, c_char_p, P(GgufExportOptions)]),
    "pt_lora_export_gguf": (c_int, [vp, c_char_p, P(GgufExportOptions)]),
})
_declare("goodput", {
    "pt_goodput_create": (c_int, [pp]),
    "pt_goodput_free": (None, [vp]),
    "pt_goodput_add": (c_int, [vp, c_int, c_double]),
    "pt_goodput_begin": (c_int, [vp, c_int]),
    "pt_goodput_end": (c_int, [vp]),
    "pt_goodput_step_done": (c_int, [vp]),
    "pt_goodput_commit": (c_int, [vp]),
    "pt_goodput_rollback": (c_int, [vp]),
    "pt_goodput_get": (c_int, [P(GoodputReport), vp]),
    "pt_goodput_to_json": (c_int, [P(c_void_p), vp]),
    "pt_goodput_restore": (c_int, [vp, c_char_p, c_double, c_int64]),
    "pt_checkpoint_interval_young_daly": (c_int, [P(c_double), c_double, c_double]),
})
_declare("run", {
    "pt_run_state_to_json": (c_int, [P(c_void_p), P(RunState), c_char_p, c_char_p]),
    "pt_run_state_from_json": (c_int, [P(RunState), P(c_void_p), P(c_void_p), c_char_p]),
    "pt_run_host_model": (c_int, [P(c_void_p), c_char_p, vp]),
    "pt_run_open": (c_int, [pp, P(RunOptions)]),
    "pt_run_close": (None, [vp]),
    "pt_run_resume_dir": (c_char_p, [vp]),
    "pt_run_dir": (c_char_p, [vp]),
    "pt_run_metrics_path": (c_char_p, [vp]),
    "pt_run_last_checkpoint": (c_char_p, [vp]),
    "pt_run_load": (c_int, [P(RunState), P(c_void_p), vp, vp, vp]),
    "pt_run_load_checkpoint": (c_int, [P(RunState), P(c_void_p), vp, vp, c_char_p, c_char_p]),
    "pt_run_trim_metrics": (c_int, [vp, c_int64]),
    "pt_run_check_output": (c_int, [c_char_p, c_char_p, P(RunInput)]),
    "pt_run_lost_seconds": (c_double, [vp]),
    "pt_run_lost_steps": (c_int64, [vp]),
    "pt_run_relaunch_seconds": (c_double, [vp]),
    "pt_run_resumed": (c_int, [vp, c_int64]),
    "pt_run_save": (c_int, [vp, vp, vp, P(RunState), c_char_p]),
    "pt_run_log": (c_int, [vp, c_char_p]),
    "pt_run_rows": (c_int64, [vp]),
    "pt_run_metrics_error": (c_char_p, [vp]),
    "pt_run_note_step": (c_int, [vp, c_double]),
    "pt_run_save_due": (c_bool, [vp, c_int64, c_int64]),
    "pt_run_save_every": (c_int64, [vp]),
    "pt_run_check_replicas": (c_int, [P(c_int), vp, vp]),
    "pt_run_rollback": (c_int, [P(RunState), P(c_void_p), vp, vp, vp]),
    "pt_run_rank": (c_int, [vp]),
    "pt_run_size": (c_int, [vp]),
    "pt_run_last_save_seconds": (c_double, [vp]),
    "pt_run_mean_step_seconds": (c_double, [vp]),
    "pt_run_section": (c_int, [vp, c_int]),
    "pt_run_step_time": (c_int, [vp, c_double, c_double, c_double]),
    "pt_run_report_json": (c_int, [P(c_void_p), c_void_p, vp, c_int64]),
    "pt_run_agree": (c_int, [P(c_int), P(c_int), vp, c_int]),
    "pt_run_check_due": (c_bool, [vp, c_int64]),
    "pt_run_check": (c_int, [P(c_int), P(c_int), vp, vp]),
    "pt_run_rollbacks": (c_int, [vp]),
    "pt_run_last_step": (c_int64, [vp]),
})
# The SFT loop's helpers (posttrain/train.h, "an SFT run's loop"): SFTTrainer's
# micro-batches and metrics rows, as `posttrain sft`'s.
@_stamped("pt_sft_row_extra", "run")
class SftRowExtra(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("step", c_int64),
        ("step_seconds", c_double),
        ("step_tokens", c_int64),
        ("comm", c_bool),
        ("eval", c_bool),
        ("eval_loss", c_double),
    ]


_declare("run", {
    "pt_sft_batches_create": (c_int, [pp, vp, c_int, c_int64, c_int64]),
    "pt_sft_batches_free": (None, [vp]),
    "pt_sft_batches_fill": (c_int, [vp, vp]),
    "pt_sft_batches_micro": (P(Batch_), [vp]),
    "pt_sft_batches_weights": (P(P(c_float)), [vp]),
    "pt_sft_batches_count": (c_int, [vp]),
    "pt_sft_batches_tokens": (c_int64, [vp]),
    "pt_sft_context_create": (c_int, [pp, vp, vp, c_int]),
    "pt_sft_total_steps": (c_int, [P(c_int64), vp, c_int, c_int64, c_double]),
    "pt_sft_eval_due": (c_bool, [vp, c_int64, c_int64, c_int64]),
    "pt_sft_metrics_row": (c_int, [P(c_void_p), P(SftStats), P(SftRowExtra)]),
})
_declare("dist", {
    "pt_dist_has_mpi": (c_bool, []),
    "pt_dist_mpi_info": (c_char_p, []),
    "pt_dist_launcher_rank": (c_int, []),
    "pt_dist_create": (c_int, [pp, c_void_p, P(DistOptions)]),
    "pt_dist_free": (None, [vp]),
    "pt_dist_rank": (c_int, [vp]),
    "pt_dist_get_backend": (c_int, [vp]),
    "pt_dist_size": (c_int, [vp]),
    "pt_dist_shard": (c_int, [P(c_int64), P(c_int64), vp, c_int64]),
    "pt_optimizer_set_dist": (c_int, [vp, vp]),
    "pt_dist_allreduce_sum": (c_int, [vp, P(c_double), c_size_t]),
    "pt_dist_broadcast": (c_int, [vp, c_void_p, c_size_t, c_int]),
    "pt_dist_barrier": (c_int, [vp]),
    "pt_dist_agree": (c_int, [P(c_int), vp, c_int]),
    "pt_dist_comm_seconds": (c_double, [vp]),
    "pt_dist_check_replicas": (c_int, [P(c_int), P(c_uint64), vp, vp]),
})
_declare("lora-switch", {
    "pt_model_set_lora_enabled": (c_int, [vp, c_bool]),
    "pt_model_lora_enabled": (c_bool, [vp]),
})
_declare("context-threads", {
    "pt_context_set_num_threads": (c_int, [vp, c_int]),
    "pt_context_get_num_threads": (c_int, [vp]),
    "pt_context_set_gradient_checkpointing": (c_int, [vp, c_bool]),
    "pt_context_get_gradient_checkpointing": (c_bool, [vp]),
    "pt_generator_set_num_threads": (c_int, [vp, c_int]),
    "pt_generator_get_num_threads": (c_int, [vp]),
    "pt_generator_set_kv_cache": (c_int, [vp, c_int]),
    "pt_generator_get_kv_cache": (c_int, [vp]),
})
_declare(None, {
    "pt_context_set_bf16_activations": (c_int, [vp, c_bool]),
    "pt_context_get_bf16_activations": (c_bool, [vp]),
})
_declare("cpu-dispatch", {
    "pt_set_cpu_path": (c_int, [c_char_p]),
    "pt_cpu_path": (c_char_p, []),
    "pt_cpu_info": (c_char_p, []),
    "pt_bf16_info": (c_char_p, []),
})
_declare("bf16", {
    "pt_model_set_bf16": (c_int, [vp, c_int]),
    "pt_model_get_bf16": (c_int, [vp]),
    "pt_model_weights_changed": (None, [vp]),
    "pt_model_copy_tensor": (c_int, [POINTER(c_float), c_size_t, vp, c_char_p]),
})
_declare("long-context", {
    "pt_model_set_allow_long_context": (c_int, [vp, c_bool]),
    "pt_model_allow_long_context": (c_bool, [vp]),
})

# posttrain/grpo_run.h: the prompt order of a GRPO run
@_stamped("pt_prompt_order_options", "grpo")
class PromptOrderOptions(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("rows", c_int64),
        ("seed", c_uint64),
        ("no_shuffle", c_bool),
        ("drop_last", c_bool),
    ]


_declare("grpo", {
    "pt_prompt_order_create": (c_int, [P(c_void_p), P(PromptOrderOptions)]),
    "pt_prompt_order_free": (None, [c_void_p]),
    "pt_prompt_order_restart": (c_int, [c_void_p]),
    "pt_prompt_order_next": (c_int, [c_void_p, P(c_int32), c_int]),
    "pt_prompt_order_passes": (c_int64, [c_void_p]),
    "pt_prompt_order_save": (c_int, [P(RunState), c_void_p]),
    "pt_prompt_order_load": (c_int, [c_void_p, P(RunState), P(c_int)]),
})


# posttrain/grpo_run.h: a round's updates (first, last: pt_grpo_stats)
@_stamped("pt_grpo_round_updates", "grpo")
class GrpoRoundUpdates(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("first", GrpoStats),
        ("last", GrpoStats),
        ("updates", c_int),
        ("loss_sum", c_double),
        ("train_seconds", c_double),
        ("comm_seconds", c_double),
    ]


_declare("grpo", {
    "pt_grpo_round_update": (c_int, [P(GrpoRoundUpdates), c_void_p, c_void_p, c_void_p, P(GrpoOptions),
                                     c_int, c_void_p, c_void_p]),
})


# posttrain/grpo_run.h: a GRPO checkpoint's own fields and the resume checks
@_stamped("pt_grpo_run_fields", "grpo")
class GrpoRunFields(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("num_generations", c_int),
        ("batch_prompts", c_int),
        ("num_iterations", c_int),
        ("grpo", c_void_p),
    ]


@_stamped("pt_grpo_resume_report", "grpo")
class GrpoResumeReport(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("fault", c_int),
        ("key", c_char_p),
        ("saved", c_int64),
        ("want", c_int64),
        ("num_iterations", c_int64),
    ]


_declare("grpo", {
    "pt_grpo_run_extra": (c_int, [P(c_void_p), c_char_p, P(GrpoRunFields)]),
    "pt_grpo_run_resume": (c_int, [P(GrpoResumeReport), c_char_p, P(RunState), c_void_p, c_int64,
                                   P(GrpoRunFields)]),
    "pt_grpo_resume_fault_name": (c_char_p, [c_int]),
    "pt_grpo_resume_fault_from_name": (c_int, [P(c_int), c_char_p]),
})


# posttrain/grpo_run.h: pt_generate's completions into the rollout buffer
@_stamped("pt_rollout_generated", "grpo")
class RolloutGenerated(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("n", c_int),
        ("prompts", POINTER(c_int32)),
        ("prompt_lens", POINTER(c_int32)),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", POINTER(c_int32)),
        ("stride", c_int),
        ("logprobs", POINTER(c_float)),
        ("finish", POINTER(c_int32)),
        ("group_size", c_int),
        ("first_group", c_int64),
    ]


_declare("grpo", {
    "pt_rollout_buffer_add_generated": (c_int, [c_void_p, P(RolloutGenerated)]),
})


# posttrain/grpo_run.h: a round's metrics row (first, last, grpo: pt_grpo_stats,
# pt_grpo_options; episodes: pt_grpo_episode_totals or NULL)
@_stamped("pt_grpo_metrics", "grpo")
class GrpoMetrics(Struct):
    _fields_ = [
        ("size", c_size_t),
        ("step", c_int64),
        ("first", c_void_p),
        ("last", c_void_p),
        ("grpo", c_void_p),
        ("n_reward_funcs", c_int),
        ("reward_names", POINTER(c_char_p)),
        ("loss", c_double),
        ("gen_tokens_per_s", c_double),
        ("train_tokens_per_s", c_double),
        ("step_seconds", c_double),
        ("comm", c_bool),
        ("comm_seconds", c_double),
        ("episodes", c_void_p),
    ]


_declare("grpo", {
    "pt_grpo_metrics_row": (c_int, [P(c_void_p), P(GrpoMetrics)]),
})

# Named enums: pt_X_name(int) -> const char * (NULL for an unknown value) and
# pt_X_from_name(int *, const char *), by feature (posttrain/enums.py builds
# the IntEnums from them).
ENUM_FUNCTIONS = {
    None: ["arch", "rope_type", "optimizer_type", "schedule_type", "log_level", "chat_role",
           "chat_family", "skip_reason"],
    "generate": ["finish_reason", "kv_cache"],
    "grpo": ["grpo_scale", "grpo_loss_type", "grpo_is_level", "rollout_logprobs",
             "prompt_order_fault"],
    "grpo-sampling": ["grpo_is_correction"],
    "grpo-builtin": ["builtin_reward", "prompt_rows_fault"],
    "episodes": ["turn_end", "episode_end", "env_action", "episode_on_error"],
    "gguf": ["gguf_ftype", "gguf_spm_scores"],
    "goodput": ["time_kind"],
    "run": ["run_start", "run_action"],
    "dist": ["dist_backend"],
}
for _feature, _prefixes in ENUM_FUNCTIONS.items():
    for _p in _prefixes:
        _declare(_feature, {"pt_%s_name" % _p: (c_char_p, [c_int]),
                            "pt_%s_from_name" % _p: (c_int, [P(c_int), c_char_p])})


@_stamped("pt_addition_eval_options")
class AdditionEvalOptions(Struct):
    _fields_ = [("size", c_size_t), ("digits", c_int), ("temperature", ctypes.c_double), ("seed", c_uint64),
                ("batch", c_int)]


_declare(None, {
    "pt_model_clone": (c_int, [P(c_void_p), c_void_p]),
    "pt_addition_prompt_ids": (c_int, [P(c_int32), c_size_t, P(c_size_t), c_void_p, c_int, c_int64, c_int64]),
    "pt_addition_evaluate": (c_int, [P(c_int64), P(c_int64), P(c_int32), P(c_int32), c_void_p, c_void_p,
                                     P(c_int64), c_size_t, P(AdditionEvalOptions)]),
})

# The run layer's host pieces (run_host.c, sft_run.c): a step's end, the
# SFT progress line and an SFT checkpoint's run state.
_declare("run", {
    "pt_run_step_end": (c_int, [P(c_int), vp, vp, c_int64, c_int64, c_void_p, c_void_p]),
    "pt_sft_progress": (c_int, [P(c_void_p), P(SftStats), P(SftRowExtra), c_int64, c_double, c_double, c_int]),
    "pt_sft_run_state": (c_int, [P(RunState), vp, vp, c_int64]),
})


@_stamped("pt_addition_grpo_options")
class AdditionGrpoOptions(Struct):
    _fields_ = [("size", c_size_t), ("digits", c_int), ("prompts", c_int), ("group", c_int),
                ("lr", ctypes.c_double), ("beta", ctypes.c_double), ("temperature", ctypes.c_double),
                ("loss_type", c_int), ("scale_rewards", c_int), ("drop_zero_std", c_bool),
                ("bf16_reference", c_bool), ("seed", c_uint64)]


_declare(None, {
    "pt_addition_model_config": (c_int, [P(ModelConfig), c_void_p, c_int, c_int, c_int, c_bool]),
    "pt_addition_grpo_create": (c_int, [P(c_void_p), c_void_p, c_void_p, P(AdditionGrpoOptions)]),
    "pt_addition_grpo_step": (c_int, [P(GrpoStats), c_void_p, c_void_p, c_void_p]),
    "pt_addition_grpo_steps": (c_int64, [c_void_p]),
    "pt_addition_grpo_free": (None, [c_void_p]),
    "pt_addition_save_traces": (c_int, [c_void_p, P(c_int64), c_void_p, c_int, ctypes.c_double, c_int64, P(c_uint64),
                                        c_char_p]),
})

# Declare what the loaded library has: every core function, and those of
# each feature it lists (a missing core symbol is an AttributeError here,
# at import, rather than a failure half-way through a program).
for _feature, _table in _DECLS.items():
    if _feature is not None and not has_feature(_feature):
        continue
    for _name, (_res, _args) in _table.items():
        _fn = getattr(lib, _name)
        _fn.restype = _res
        _fn.argtypes = _args
del _feature, _prefixes, _p, _table, _name, _res, _args, _fn
