"""TRL's GRPOConfig (trl 1.9, with the transformers TrainingArguments fields
it inherits), under TRL's own field names and defaults, checked when it is
built.

Every field TRL has is one of three kinds here (docs/grpo.md, "TRL's
GRPOConfig, option by option", has the table a test keeps true):

- used: it does what it does in TRL;
- ignored: accepted with any value and without effect, because it is about
  hardware, services or integrations this library does not have (GPUs,
  vLLM, DeepSpeed, the Hub, wandb ...) and changes nothing in the result;
- refused: accepted only at TRL's default; any other value is an
  InvalidArgument naming the field, why, and the table.

A name TRL does not have either is an InvalidArgument too.  Fields of
pt_grpo_options that TRL does not have (drop_zero_std_groups,
overlong_buffer, epsilon_low, ...) are accepted under their C names, and
scale_rewards also takes "rloo".

    from posttrain import GRPOConfig
    args = GRPOConfig(output_dir="out", learning_rate=1e-4, num_generations=8,
                      per_device_train_batch_size=16, max_completion_length=64,
                      loss_type="dapo", epsilon_high=0.28, max_steps=100)
"""

import math

from ._lib import GrpoOptions, has_feature
from .enums import ISCorrection, ISLevel, LossType, ScaleRewards
from .errors import Error, invalid

__all__ = ["GRPOConfig", "TABLE"]

TABLE = "docs/grpo.md, \"TRL's GRPOConfig, option by option\""

_MISSING = object()

# -- the TrainingArguments fields TRL's configs inherit (transformers 5), with
# TRL's overrides (_BaseConfig: logging_steps 10, gradient_checkpointing True,
# bf16 None meaning "True unless fp16") ------------------------------------------
# name: (default, kind, why) ; kind "use", "ignore" or "refuse"
_HW = "hardware or distribution settings: no effect on a CPU run of this library"
_LOGS = "a logging or reporting integration this library does not have"
_HUB = "the Hugging Face Hub: this library does not upload"
TRAINING_ARGUMENTS = {
    "output_dir": (None, "use", ""),
    "per_device_train_batch_size": (8, "use", ""),
    "per_device_eval_batch_size": (8, "ignore", "evaluation samples num_generations_eval "
                                   "completions of every eval row at once"),
    "num_train_epochs": (3.0, "use", ""),
    "max_steps": (-1, "use", ""),
    "learning_rate": (5e-5, "use", ""),
    "lr_scheduler_type": ("linear", "use", ""),
    "lr_scheduler_kwargs": (None, "refuse", "the schedules here take no further arguments"),
    "warmup_steps": (0, "use", ""),
    "warmup_ratio": (None, "use", ""),
    "optim": ("adamw_torch_fused", "use", ""),
    "optim_args": (None, "refuse", "the optimizers here take no further arguments"),
    "weight_decay": (0.0, "use", ""),
    "adam_beta1": (0.9, "use", ""),
    "adam_beta2": (0.999, "use", ""),
    "adam_epsilon": (1e-8, "use", ""),
    "optim_target_modules": (None, "refuse", "GaLore and APOLLO do not exist here"),
    "gradient_accumulation_steps": (1, "use", ""),
    "average_tokens_across_devices": (True, "ignore", _HW),
    "max_grad_norm": (1.0, "use", ""),
    "label_smoothing_factor": (0.0, "refuse", "no label smoothing"),
    "bf16": (None, "use", ""),
    "fp16": (False, "refuse", "there is no FP16 arithmetic here (bf16=True is)"),
    "bf16_full_eval": (False, "ignore", _HW),
    "fp16_full_eval": (False, "ignore", _HW),
    "tf32": (None, "ignore", _HW),
    "gradient_checkpointing": (True, "use", ""),
    "gradient_checkpointing_kwargs": (None, "ignore", _HW),
    "torch_compile": (False, "ignore", _HW),
    "torch_compile_backend": (None, "ignore", _HW),
    "torch_compile_mode": (None, "ignore", _HW),
    "use_liger_kernel": (False, "ignore", _HW),
    "liger_kernel_config": (None, "ignore", _HW),
    "use_cache": (False, "ignore", _HW),
    "neftune_noise_alpha": (None, "refuse", "NEFTune noise does not exist here"),
    "torch_empty_cache_steps": (None, "ignore", _HW),
    "auto_find_batch_size": (False, "refuse", "TRL refuses it for GRPO too"),
    "logging_strategy": ("steps", "use", ""),
    "logging_steps": (10, "use", ""),
    "logging_first_step": (False, "use", ""),
    "log_on_each_node": (True, "ignore", _HW),
    "logging_nan_inf_filter": (True, "ignore", _LOGS),
    "include_num_input_tokens_seen": ("no", "ignore", _LOGS),
    "log_level": ("passive", "ignore", _LOGS),
    "log_level_replica": ("warning", "ignore", _LOGS),
    "disable_tqdm": (None, "use", ""),
    "report_to": ("none", "ignore", _LOGS),
    "run_name": (None, "ignore", _LOGS),
    "project": ("huggingface", "ignore", _LOGS),
    "trackio_space_id": ("trackio", "ignore", _LOGS),
    "logging_dir": (None, "ignore", _LOGS),
    "eval_strategy": ("no", "use", ""),
    "eval_steps": (None, "use", ""),
    "eval_delay": (0, "refuse", "evaluation starts at eval_steps"),
    "eval_on_start": (False, "use", ""),
    "prediction_loss_only": (False, "ignore", _LOGS),
    "eval_do_concat_batches": (True, "ignore", _HW),
    "eval_use_gather_object": (False, "ignore", _HW),
    "eval_accumulation_steps": (None, "ignore", _HW),
    "include_for_metrics": (None, "ignore", _LOGS),
    "batch_eval_metrics": (False, "ignore", _LOGS),
    "do_train": (False, "ignore", "not used by TRL's trainer either"),
    "do_eval": (False, "use", ""),
    "do_predict": (False, "ignore", "not used by TRL's trainer either"),
    "save_only_model": (False, "ignore", "checkpoints always hold the optimizer (resuming is exact)"),
    "save_strategy": ("steps", "use", ""),
    "save_steps": (500, "use", ""),
    "save_on_each_node": (False, "ignore", _HW),
    "save_total_limit": (None, "use", ""),
    "enable_jit_checkpoint": (False, "ignore", _HW),
    "push_to_hub": (False, "refuse", _HUB),
    "hub_token": (None, "ignore", _HUB),
    "hub_private_repo": (None, "ignore", _HUB),
    "hub_model_id": (None, "ignore", _HUB),
    "hub_strategy": ("every_save", "ignore", _HUB),
    "hub_always_push": (False, "ignore", _HUB),
    "hub_revision": (None, "ignore", _HUB),
    "load_best_model_at_end": (False, "refuse", "no best-model tracking"),
    "metric_for_best_model": (None, "ignore", "only with load_best_model_at_end"),
    "greater_is_better": (None, "ignore", "only with load_best_model_at_end"),
    "ignore_data_skip": (False, "ignore", "resuming restores the data order exactly, with no skipping"),
    "restore_callback_states_from_checkpoint": (False, "ignore", "callbacks keep no state here"),
    "full_determinism": (False, "ignore", "runs are always deterministic"),
    "seed": (42, "use", ""),
    "data_seed": (None, "use", ""),
    "use_cpu": (False, "ignore", _HW),
    "accelerator_config": (None, "ignore", _HW),
    "parallelism_config": (None, "ignore", _HW),
    "dataloader_drop_last": (False, "ignore", _HW),
    "dataloader_num_workers": (0, "ignore", _HW),
    "dataloader_pin_memory": (True, "ignore", _HW),
    "dataloader_persistent_workers": (False, "ignore", _HW),
    "dataloader_prefetch_factor": (None, "ignore", _HW),
    "remove_unused_columns": (True, "use", ""),
    "label_names": (None, "ignore", "not used by TRL's GRPO trainer"),
    "train_sampling_strategy": ("random", "ignore", "TRL's GRPO sampler ignores it (shuffle_dataset)"),
    "length_column_name": ("length", "ignore", "not used by TRL's GRPO trainer"),
    "ddp_find_unused_parameters": (None, "ignore", _HW),
    "ddp_bucket_cap_mb": (None, "ignore", _HW),
    "ddp_broadcast_buffers": (None, "ignore", _HW),
    "ddp_backend": (None, "ignore", _HW),
    "ddp_timeout": (1800, "ignore", _HW),
    "fsdp": (None, "ignore", _HW),
    "fsdp_config": (None, "ignore", _HW),
    "deepspeed": (None, "ignore", _HW),
    "debug": ("", "ignore", _LOGS),
    "skip_memory_metrics": (True, "ignore", _LOGS),
    "resume_from_checkpoint": (None, "ignore", "not used by the trainer (as in transformers): "
                               "pass it to train()"),
    "local_rank": (-1, "ignore", _HW),
    # transformers 4.x names still common in scripts
    "overwrite_output_dir": (False, "ignore", "a train() without resume_from_checkpoint "
                             "starts the run in output_dir afresh (its checkpoints and "
                             "metrics replaced), as transformers' Trainer writes over them"),
    "save_safetensors": (True, "ignore", "weights are always saved as safetensors"),
}

_VLLM = "vLLM is not used: generation is pt_generate on the training weights"
_FIRST = "the first"
# TRL 1.9's GRPOConfig's own fields (and the TrainingArguments defaults it
# overrides), with max_prompt_length of TRL 0.x.
GRPO_FIELDS = {
    "learning_rate": (1e-6, "use", ""),
    "remove_unused_columns": (False, "use", ""),
    "model_init_kwargs": (None, "ignore", "a transformers loading option; the model is loaded "
                          "from its directory or GGUF file as it is"),
    "trust_remote_code": (False, "ignore", "no remote code is ever run"),
    "router_aux_loss_coef": (0.001, "ignore", "there are no mixture-of-experts models here"),
    "disable_dropout": (False, "ignore", "there is no dropout"),
    "cast_lm_head_to_fp32": (False, "ignore", "the head is float32 already"),
    "num_generations": (8, "use", ""),
    "num_generations_eval": (None, "use", ""),
    "max_completion_length": (256, "use", ""),
    "max_prompt_length": (None, "use", ""),
    "ds3_gather_for_generation": (True, "ignore", _HW),
    "shuffle_dataset": (True, "use", ""),
    "pad_to_multiple_of": (None, "ignore", _HW),
    "generation_batch_size": (None, "use", ""),
    "steps_per_generation": (None, "use", ""),
    "temperature": (1.0, "use", ""),
    "top_p": (1.0, "use", ""),
    "top_k": (0, "use", ""),
    "min_p": (None, "use", ""),
    "generation_kwargs": (None, "refuse", "the sampler has exactly the options above"),
    "chat_template_kwargs": (None, "use", ""),
    "repetition_penalty": (1.0, "refuse", "the sampler has no repetition penalty (the "
                           "sampling log-probabilities would have to include it)"),
    "cache_implementation": (None, "ignore", _HW),
    "use_vllm": (False, "ignore", _VLLM),
    "vllm_mode": ("colocate", "ignore", _VLLM),
    "vllm_model_impl": ("vllm", "ignore", _VLLM),
    "vllm_enable_sleep_mode": (False, "ignore", _VLLM),
    "vllm_structured_outputs_regex": (None, "refuse", "no constrained generation"),
    "vllm_server_base_url": (None, "ignore", _VLLM),
    # TRL's all-zeros address, spelled so that no version-like literal is in python/
    # (test_conventions: the version has one source)
    "vllm_server_host": (".".join("0" * 4), "ignore", _VLLM),
    "vllm_server_port": (8000, "ignore", _VLLM),
    "vllm_server_timeout": (240.0, "ignore", _VLLM),
    "vllm_group_port": (51216, "ignore", _VLLM),
    "vllm_gpu_memory_utilization": (0.3, "ignore", _VLLM),
    "vllm_max_model_length": (None, "ignore", _VLLM),
    "vllm_tensor_parallel_size": (1, "ignore", _VLLM),
    "beta": (0.0, "use", ""),
    "num_iterations": (1, "use", ""),
    "epsilon": (0.2, "use", ""),
    "delta": (None, "use", ""),
    "epsilon_high": (None, "use", ""),
    "sapo_temperature_neg": (1.05, "ignore", "only for loss_type=\"sapo\", which does not exist here"),
    "sapo_temperature_pos": (1.0, "ignore", "only for loss_type=\"sapo\", which does not exist here"),
    "vespo_k_pos": (2.0, "use", ""),
    "vespo_lambda_pos": (3.0, "use", ""),
    "vespo_k_neg": (3.0, "use", ""),
    "vespo_lambda_neg": (2.0, "use", ""),
    "importance_sampling_level": ("token", "use", ""),
    "reward_weights": (None, "use", ""),
    "multi_objective_aggregation": ("sum_then_normalize", "refuse",
                                    "rewards are always summed, then normalised"),
    "scale_rewards": ("group", "use", ""),
    "loss_type": ("dapo", "use", ""),
    "mask_truncated_completions": (False, "use", ""),
    "sync_ref_model": (False, "refuse", "no call mixes two models' weights"),
    "ref_model_mixup_alpha": (0.6, "ignore", "only with sync_ref_model"),
    "ref_model_sync_steps": (512, "ignore", "only with sync_ref_model"),
    "top_entropy_quantile": (1.0, "use", ""),
    "entropy_coef": (0.0, "use", ""),
    "use_adaptive_entropy": (False, "use", ""),
    "entropy_coef_min": (0.0, "use", ""),
    "entropy_coef_max": (1.0, "use", ""),
    "entropy_coef_delta": (0.005, "use", ""),
    "entropy_target": (0.2, "use", ""),
    "max_tool_calling_iterations": (None, "refuse", "tool calling: use model.play_episodes "
                                    "(docs/episodes.md)"),
    "vllm_importance_sampling_correction": (True, "use", ""),
    "vllm_importance_sampling_mode": ("sequence_mask", "use", ""),
    "vllm_importance_sampling_clip_max": (3.0, "use", ""),
    "vllm_importance_sampling_clip_min": (None, "use", ""),
    "vllm_importance_sampling_cap": (None, "use", ""),
    "off_policy_mask_threshold": (None, "refuse", "DeepSeek-V3.2's off-policy masking is not "
                                  "implemented"),
    "use_bias_correction_kl": (False, "refuse", "DeepSeek-V3.2's KL correction is not implemented"),
    "log_completions": (False, "ignore", "reward functions and callbacks see every completion"),
    "log_multimodal": (True, "ignore", _LOGS),
    "num_completions_to_print": (None, "ignore", _LOGS),
    "log_unique_prompts": (False, "ignore", _LOGS),
    "log_completions_hub_repo": (None, "refuse", _HUB),
    "use_transformers_continuous_batching": (False, "ignore", _HW),
    "transformers_continuous_batching_config": (None, "ignore", _HW),
    "use_transformers_paged": (False, "ignore", _HW),
}
_GRPO_TABLE = dict(TRAINING_ARGUMENTS, **GRPO_FIELDS)

# TRL's names of optimizers and schedules, as the library's.
_OPTIMS = {"adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw",
           "adamw": "adamw", "sgd": "sgd"}
_SCHEDULES = {"linear": "linear", "constant": "constant", "constant_with_warmup": "constant",
              "cosine": "cosine"}
# The C fields GRPOConfig maps itself (a TRL field of another name sets them).
_MAPPED_C = {"epsilon_low", "epsilon_high", "delta", "importance_sampling_correction",
             "importance_sampling_clip_max", "importance_sampling_clip_min", "temperature",
             "max_completion_length", "scale_rewards", "loss_type", "beta",
             "importance_sampling_level", "mask_truncated_completions", "top_entropy_quantile",
             "micro_batch"}


def _c_fields():
    return GrpoOptions.field_names() if has_feature("grpo") else []


def field_kind(name):
    """("use" | "ignore" | "refuse" | "ours" | None, TRL's default, why) of a
    GRPOConfig keyword: a TRL field whose name is also a pt_grpo_options
    field (e.g. one the library gained later) is used whatever the table
    above says; "ours" is a pt_grpo_options field TRL does not have."""
    c = _c_fields()
    if name in _GRPO_TABLE:
        default, kind, why = _GRPO_TABLE[name]
        if kind != "use" and name in c:
            kind = "use"
        return kind, default, why
    if name in c and name not in ("size",):
        return "ours", _MISSING, ""
    return None, _MISSING, ""


def _same(a, b):
    if a is None or b is None:
        return a is b
    if isinstance(a, (list, tuple, dict)) and not a and not b:
        return True
    try:
        return a == b
    except Exception:  # noqa: BLE001 - an odd value is simply "not the default"
        return False


class GRPOConfig:
    """TRL's GRPOConfig: every field by TRL's name, with TRL's default
    (config.learning_rate is 1e-6, config.seed 42 ...), checked when built.
    An unknown name, a refused field set to anything but TRL's default, or
    a bad value raises InvalidArgument naming it (see module docstring)."""

    _table = _GRPO_TABLE
    _what = "GRPOConfig"
    _doc = TABLE

    def __init__(self, **kwargs):
        given = {}
        for k, v in kwargs.items():
            kind, default, why = field_kind(k) if self._table is _GRPO_TABLE else self._kind(k)
            if kind is None:
                raise invalid("%s: unknown option %r (TRL's %s has no such field%s; the fields "
                              "and what each does here: %s)"
                              % (self._what, k, self._what, ", nor has pt_grpo_options"
                                 if self._table is _GRPO_TABLE else "", self._doc), self._what)
            if kind == "refuse" and not _same(v, default):
                raise invalid("%s: TRL's option %s=%r is not supported here: %s (it must be left "
                              "at TRL's default %r; see %s)" % (self._what, k, v, why, default, self._doc),
                              self._what)
            given[k] = v
        for k, (default, _, _) in self._table.items():
            object.__setattr__(self, k, given.pop(k, default))
        # pt_grpo_options fields of ours
        for k, v in given.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_given", set(kwargs))
        object.__setattr__(self, "_ours", set(given))
        self._post_init()

    def _kind(self, name):
        default, kind, why = self._table.get(name, (_MISSING, None, ""))
        return kind, default, why

    def __setattr__(self, name, value):
        # as a dataclass field can be assigned, but checked again: the config
        # is rebuilt with the change (derived values recomputed)
        new = self.replace(**{name: value})
        self.__dict__.clear()
        self.__dict__.update(new.__dict__)

    def replace(self, **changes):
        """A new config with these fields changed (and checked)."""
        d = {k: getattr(self, k) for k in self._given | self._ours}
        d.update(changes)
        return type(self)(**d)

    def to_dict(self):
        """Every field (TRL's, then ours that were given) as a dict."""
        d = {k: getattr(self, k) for k in self._table}
        d.update({k: getattr(self, k) for k in self._ours})
        return d

    def __repr__(self):
        return "%s(%s)" % (self._what, ", ".join("%s=%r" % (k, getattr(self, k))
                                                 for k in sorted(self._given | self._ours)))

    def _set(self, name, value):
        object.__setattr__(self, name, value)

    def _bad(self, msg):
        return invalid("%s: %s" % (self._what, msg), self._what)

    # -- checks and derived values ----------------------------------------------------
    def _int(self, name, lo=None, allow_none=False):
        v = getattr(self, name)
        if v is None and allow_none:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
            raise self._bad("%s must be an integer, not %r" % (name, v))
        v = int(v)
        if lo is not None and v < lo:
            raise self._bad("%s must be >= %d, not %d" % (name, lo, v))
        self._set(name, v)
        return v

    def _float(self, name, allow_none=False, lo=None, hi=None):
        v = getattr(self, name)
        if v is None and allow_none:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self._bad("%s must be a finite number, not %r" % (name, v))
        v = float(v)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise self._bad("%s must be in [%s, %s], not %r" % (name, lo, hi, v))
        self._set(name, v)
        return v

    def _choice(self, name, choices):
        v = getattr(self, name)
        v = getattr(v, "value", v)   # a transformers enum member
        if not isinstance(v, str) or v not in choices:
            raise self._bad("%s=%r is not supported here (supported: %s; see %s)"
                            % (name, v, ", ".join(choices), self._doc))
        self._set(name, v)
        return v

    def _common_post_init(self):
        """The TrainingArguments part, shared with SFTConfig."""
        if self.output_dir is None:
            self._set("output_dir", "trainer_output")
        self._int("per_device_train_batch_size", 1)
        self._int("gradient_accumulation_steps", 1)
        self._float("num_train_epochs", lo=0.0)
        self._int("max_steps")
        self._float("learning_rate", lo=0.0)
        self._choice("lr_scheduler_type", list(_SCHEDULES))
        self._choice("optim", list(_OPTIMS))
        if self.warmup_ratio is not None:
            self._set("warmup_steps", self._float("warmup_ratio", lo=0.0, hi=1.0))
        w = self._float("warmup_steps", lo=0.0)
        if w >= 1 and w != int(w):
            raise self._bad("warmup_steps must be an integer, or a ratio in [0, 1), not %r" % w)
        for f in ("weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon"):
            self._float(f, lo=0.0)
        self._float("max_grad_norm", lo=0.0)
        if self.bf16 is None:
            self._set("bf16", False)   # float32 unless asked (docs: TRL's default differs)
        self._set("bf16", bool(self.bf16))
        self._set("gradient_checkpointing", bool(self.gradient_checkpointing))
        self._choice("logging_strategy", ["steps", "no"])
        self._float("logging_steps", lo=0.0)
        self._choice("save_strategy", ["steps", "no"])
        self._float("save_steps", lo=0.0)
        self._int("save_total_limit", 1, allow_none=True)
        self._choice("eval_strategy", ["no", "steps"])
        if self.eval_strategy != "no":
            self._set("do_eval", True)
            if not self.eval_steps:
                self._set("eval_steps", self.logging_steps)
        self._float("eval_steps", allow_none=True, lo=0.0)
        self._int("seed")
        self._int("data_seed", allow_none=True)

    def _post_init(self):
        self._common_post_init()
        G = self._int("num_generations", 2)
        self._int("num_generations_eval", 1, allow_none=True)
        self._int("max_completion_length", 1)
        self._int("max_prompt_length", 1, allow_none=True)
        self._int("num_iterations", 1)
        self._float("temperature", lo=0.0)
        self._float("top_p", lo=0.0, hi=1.0)
        self._int("top_k", 0)
        self._float("min_p", allow_none=True, lo=0.0, hi=1.0)
        self._float("beta", lo=0.0)
        self._float("epsilon", lo=0.0)
        self._float("epsilon_high", allow_none=True, lo=0.0)
        self._float("delta", allow_none=True, lo=0.0)
        self._float("top_entropy_quantile", lo=0.0, hi=1.0)
        if isinstance(self.scale_rewards, bool):
            self._set("scale_rewards", "group" if self.scale_rewards else "none")
        # the step per generation round (TRL's: one generation batch per step)
        bs, ga = self.per_device_train_batch_size, self.gradient_accumulation_steps
        gbs, spg = self.generation_batch_size, self.steps_per_generation
        if gbs is None and spg is None:
            spg = ga
            gbs = bs * spg
        elif gbs is not None and spg is None:
            gbs = self._int("generation_batch_size", 1)
            if gbs % bs:
                raise self._bad("generation_batch_size (%d) must be divisible by the global "
                                "batch size (%d)" % (gbs, bs))
            spg = gbs // bs
        elif gbs is None:
            spg = self._int("steps_per_generation", 1)
            gbs = bs * spg
        else:
            raise self._bad("'generation_batch_size' and 'steps_per_generation' can not be both "
                            "configured at the same time")
        if spg != ga:
            raise self._bad("steps_per_generation %d with gradient_accumulation_steps %d: "
                            "several optimizer steps per generation batch are not supported "
                            "here (one generation batch is one optimizer step per iteration; "
                            "see %s)" % (spg, ga, TABLE))
        self._set("generation_batch_size", gbs)
        self._set("steps_per_generation", spg)
        if gbs % G:
            raise self._bad("generation_batch_size (%d) must be divisible by num_generations (%d)"
                            % (gbs, G))
        if self.vllm_importance_sampling_cap is not None:
            self._set("vllm_importance_sampling_clip_max",
                      self._float("vllm_importance_sampling_cap", lo=0.0))
        self._float("vllm_importance_sampling_clip_max", allow_none=True, lo=0.0)
        self._float("vllm_importance_sampling_clip_min", allow_none=True, lo=0.0)
        lo, hi = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if lo is not None and hi is not None and lo >= hi:
            raise self._bad("vllm_importance_sampling_clip_min (%r) must be less than "
                            "vllm_importance_sampling_clip_max (%r)" % (lo, hi))
        if self.reward_weights is not None:
            try:
                self._set("reward_weights", [float(w) for w in self.reward_weights])
            except (TypeError, ValueError):
                raise self._bad("reward_weights must be a list of numbers, not %r"
                                % (self.reward_weights,)) from None
        ctk = self.chat_template_kwargs or {}
        bad = sorted(set(ctk) - {"enable_thinking", "default_system", "date_string", "tools"})
        if bad:
            raise self._bad("chat_template_kwargs %s: the templates here take enable_thinking, "
                            "default_system, date_string and tools" % bad)
        if "epsilon_low" in self._ours and "epsilon" in self._given:
            raise self._bad("give epsilon (TRL's name) or epsilon_low, not both")
        # the step's options, checked now (not at the first step)
        self._set("_grpo", self._grpo_options())

    def _grpo_options(self):
        """The pt_grpo_options (by field name) these settings give; every value
        is checked here by building the C struct."""
        if not has_feature("grpo"):
            return {}
        from .grpo import _grpo_options
        o = {"beta": self.beta,
             "epsilon_low": self.epsilon,
             "epsilon_high": self.epsilon_high if self.epsilon_high is not None else self.epsilon,
             "delta": self.delta if self.delta is not None else 0.0,
             "max_completion_length": self.max_completion_length,
             "mask_truncated_completions": bool(self.mask_truncated_completions),
             "top_entropy_quantile": self.top_entropy_quantile,
             "temperature": self.temperature if self.temperature > 0 else 1.0,
             "micro_batch": self.per_device_train_batch_size}
        enums = [("scale_rewards", "scale_rewards", ScaleRewards, self.scale_rewards),
                 ("loss_type", "loss_type", LossType, self.loss_type),
                 ("importance_sampling_level", "importance_sampling_level", ISLevel,
                  self.importance_sampling_level),
                 ("vllm_importance_sampling_mode", "importance_sampling_correction",
                  ISCorrection, self.vllm_importance_sampling_mode
                  if self.vllm_importance_sampling_correction else "none")]
        for trl_name, c_name, enum_type, value in enums:
            try:
                o[c_name] = enum_type.coerce(value, trl_name, "GRPOConfig")
            except Error as e:
                raise self._bad("%s=%r: %s (see %s)" % (trl_name, value, e.message, TABLE)) from None
        hi = self.vllm_importance_sampling_clip_max
        o["importance_sampling_clip_max"] = hi if hi is not None else math.inf
        lo = self.vllm_importance_sampling_clip_min
        o["importance_sampling_clip_min"] = lo if lo is not None else 0.0
        # TRL fields the library has under the same name, and ours
        for k in _c_fields():
            if k in ("size",) or k in _MAPPED_C and k not in self._ours:
                continue
            if k in self._ours or (k in self._table and getattr(self, k) is not None):
                o[k] = getattr(self, k)
        try:
            _grpo_options(o)
        except Error as e:
            raise self._bad("%s (see %s)" % (e.message, TABLE)) from None
        return o

    # -- what the trainer uses ------------------------------------------------------------
    def optimizer_options(self, total_steps):
        """pt_optimizer_options for a run of total_steps optimizer steps, as
        transformers' Trainer builds AdamW (or SGD) and the schedule."""
        w = self.warmup_steps
        warm = math.ceil(total_steps * w) if w < 1 and w > 0 else int(w)
        o = {"type": _OPTIMS[self.optim], "lr": self.learning_rate,
             "weight_decay": self.weight_decay, "max_grad_norm": self.max_grad_norm,
             "schedule": _SCHEDULES[self.lr_scheduler_type], "warmup_steps": warm,
             "total_steps": max(int(total_steps), 1)}
        if o["type"] == "adamw":
            o.update(beta1=self.adam_beta1, beta2=self.adam_beta2, eps=self.adam_epsilon)
        else:
            o["momentum"] = 0.0   # torch.optim.SGD's default, as transformers builds it
        return o

    @property
    def grpo_options(self):
        """The pt_grpo_options fields the step is called with (a copy)."""
        return dict(self._grpo)

    @property
    def prompts_per_step(self):
        return self.generation_batch_size // self.num_generations
