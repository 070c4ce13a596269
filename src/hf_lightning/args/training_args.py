"""`TrainingArguments`: every setting of a training run, with transformers' names and defaults.

One flat stdlib dataclass, so `HfArgumentParser` can build a command line from `dataclasses.fields`.
`__post_init__` normalises the values (`training_args_normalize`), then checks them against a rule
table (`training_args_validate`) that reports every problem in one `ValueError`. Derived values
(batch sizes, ranks, device) are functions of `hf_lightning.args.runtime`, the `set_*` helpers
functions of `hf_lightning.args.setters`; the class body binds each by name, so every method's home is
one import away and the class has no base besides ``object``.
"""

import json
import sys
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Literal

from hf_lightning.args import runtime, setters
from hf_lightning.args.accelerate_state import set_up_partial_state
from hf_lightning.args.enums import (
    SAMPLING_STRATEGIES,
    DebugOption,
    FSDPOption,
    HubStrategy,
    IntervalStrategy,
    OptimizerNames,
    ParallelMode,
    SaveStrategy,
    SchedulerType,
    enum_value,
)
from hf_lightning.args.normalize import normalize
from hf_lightning.args.runtime import LOG_LEVELS, resolve_steps
from hf_lightning.args.validate import check

__all__ = [
    "DebugOption",
    "FSDPOption",
    "HubStrategy",
    "IntervalStrategy",
    "OptimizerNames",
    "ParallelMode",
    "SaveStrategy",
    "SchedulerType",
    "TrainingArguments",
    "resolve_steps",
]

_LOG_LEVELS = list(LOG_LEVELS)


def _f(default: Any, help: str, **extra: Any) -> Any:
    """A dataclass field with a default and its help text (plus argparse extras such as ``choices``)."""
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class TrainingArguments:
    """Everything that configures a `Trainer` run; drop-in for ``transformers.TrainingArguments``."""

    # Fields that may be given as a JSON string (e.g. from the command line) and are parsed to a dict.
    _VALID_DICT_FIELDS = [
        "accelerator_config",
        "fsdp_config",
        "deepspeed",
        "activation_checkpointing_kwargs",
        "gradient_checkpointing_kwargs",
        "lr_scheduler_kwargs",
    ]

    # --- Output ---
    output_dir: str | None = _f(None, "Folder for checkpoints and predictions (default 'trainer_output').")

    # --- Training Duration and Batch Size ---
    per_device_train_batch_size: int = _f(8, "Training batch size on each device.")
    num_train_epochs: float = _f(3.0, "Number of epochs to train; a fraction trains part of the last one.")
    max_steps: int = _f(-1, "If > 0, total optimizer steps to run; overrides num_train_epochs.")

    # --- Learning Rate & Scheduler ---
    learning_rate: float = _f(5e-5, "Peak learning rate of the optimizer.")
    lr_scheduler_type: SchedulerType | str = _f("linear", "Learning-rate schedule to use.")
    lr_scheduler_kwargs: dict | str | None = _f(
        None, "Extra keyword arguments for the schedule (dict or JSON)."
    )
    warmup_steps: float = _f(0, "Warmup steps; a value in [0, 1) is a ratio of the total steps.")

    # --- Optimizer ---
    optim: OptimizerNames | str = _f("adamw_torch_fused", "Optimizer to use.")
    optim_args: str | None = _f(None, "Extra optimizer options as 'key=value,key=value'.")
    weight_decay: float = _f(0.0, "Weight decay for all parameters except biases and norm weights.")
    adam_beta1: float = _f(0.9, "Beta1 of Adam-style optimizers.")
    adam_beta2: float = _f(0.999, "Beta2 of Adam-style optimizers.")
    adam_epsilon: float = _f(1e-8, "Epsilon of Adam-style optimizers.")
    optim_target_modules: None | str | list[str] = _f(
        None, "Modules that GaLore/APOLLO-style optimizers act on."
    )

    # --- Regularization & Training Stability ---
    gradient_accumulation_steps: int = _f(1, "Micro-batches accumulated into one optimizer step.")
    average_tokens_across_devices: bool = _f(
        True, "Sum the token count over all ranks when scaling the loss."
    )
    max_grad_norm: float = _f(1.0, "Clip gradients to this total norm (0 disables clipping).")
    label_smoothing_factor: float = _f(0.0, "Label smoothing epsilon (0 disables it).")

    # --- Mixed Precision ---
    bf16: bool = _f(False, "Train with bfloat16 mixed precision.")
    fp16: bool = _f(False, "Train with float16 mixed precision.")
    bf16_full_eval: bool = _f(False, "Evaluate fully in bfloat16.")
    fp16_full_eval: bool = _f(False, "Evaluate fully in float16.")
    tf32: bool | None = _f(None, "Allow TF32 matmuls on Ampere or newer GPUs.")

    # --- Activation Checkpointing ---
    activation_checkpointing: bool | None = _f(
        None, "Recompute activations in the backward pass to save memory.", nargs="?", const=True
    )
    activation_checkpointing_kwargs: dict[str, Any] | str | None = _f(
        None, "Keyword arguments for activation checkpointing (dict or JSON)."
    )
    gradient_checkpointing: bool | None = _f(
        None, "Deprecated name of activation_checkpointing.", nargs="?", const=True
    )
    gradient_checkpointing_kwargs: dict[str, Any] | str | None = _f(
        None, "Deprecated name of activation_checkpointing_kwargs."
    )

    # --- Compilation ---
    torch_compile: bool = _f(False, "Compile the model with torch.compile.")
    torch_compile_backend: str | None = _f(None, "torch.compile backend; setting it turns torch_compile on.")
    torch_compile_mode: str | None = _f(None, "torch.compile mode; setting it turns torch_compile on.")

    # --- Kernels ---
    use_liger_kernel: bool = _f(False, "Patch the model with Liger kernels.")
    liger_kernel_config: dict[str, bool] | None = _f(None, "Which Liger kernels to apply.")

    # --- Additional Optimizations ---
    use_cache: bool = _f(False, "Keep the model's key/value cache on during training.")
    neftune_noise_alpha: float | None = _f(None, "NEFTune embedding-noise strength (None disables it).")
    torch_empty_cache_steps: int | None = _f(None, "Empty the accelerator cache every this many steps.")
    auto_find_batch_size: bool = _f(
        False, "After an out-of-memory error, retry with 90 percent of the batch size."
    )

    # --- Logging & Monitoring ---
    logging_strategy: IntervalStrategy | str = _f("steps", "When to log: 'no', 'steps' or 'epoch'.")
    logging_steps: float = _f(500, "Log every this many steps; a value < 1 is a ratio of the total steps.")
    logging_first_step: bool = _f(False, "Also log after the first step.")
    log_on_each_node: bool = _f(True, "Log on the main process of every node, not only node 0.")
    logging_nan_inf_filter: bool = _f(True, "Leave nan/inf losses out of the logged average.")
    include_num_input_tokens_seen: str | bool = _f(
        "no", "Count input tokens seen: 'all', 'non_padding' or 'no' (True/False mean 'all'/'no')."
    )

    # --- Log Levels ---
    log_level: str = _f("passive", "Log level of the main process.", choices=_LOG_LEVELS)
    log_level_replica: str = _f("warning", "Log level of the other processes.", choices=_LOG_LEVELS)
    disable_tqdm: bool | None = _f(
        None, "Hide progress bars (default: hidden when logging is quieter than WARNING)."
    )

    # --- Experiment Tracking ---
    report_to: None | str | list[str] = _f("none", "Integrations to report to; 'all' or 'none' allowed.")
    run_name: str | None = _f(None, "Name of the run for the experiment trackers.")
    project: str = _f("huggingface", "Project name for trackers that group runs.")
    trackio_space_id: str | None = _f(None, "Trackio Space to log to.")
    trackio_bucket_id: str | None = _f(None, "Trackio bucket that stores the logs.")
    trackio_static_space_id: str | None | Literal[False] = _f(
        None, "Trackio static Space (False disables it)."
    )

    # --- Evaluation ---
    eval_strategy: IntervalStrategy | str = _f("no", "When to evaluate: 'no', 'steps' or 'epoch'.")
    eval_steps: float | None = _f(
        None, "Evaluate every this many steps (default logging_steps); < 1 is a ratio."
    )
    eval_delay: float = _f(0, "Epochs or steps to wait before the first evaluation.")
    per_device_eval_batch_size: int = _f(8, "Evaluation batch size on each device.")
    prediction_loss_only: bool = _f(False, "Return only the loss when evaluating or predicting.")
    eval_on_start: bool = _f(False, "Run an evaluation before the first training step.")
    eval_do_concat_batches: bool = _f(True, "Concatenate predictions of all batches into one array.")
    eval_use_gather_object: bool = _f(False, "Gather nested Python objects from all ranks during evaluation.")
    eval_accumulation_steps: int | None = _f(
        None, "Move predictions to CPU every this many evaluation steps."
    )

    # --- Metrics ---
    include_for_metrics: list[str] = field(
        default_factory=list, metadata={"help": "Extra inputs passed to compute_metrics: 'inputs', 'loss'."}
    )
    batch_eval_metrics: bool = _f(False, "Call compute_metrics on every batch and once at the end.")

    # --- Checkpointing & Saving ---
    save_only_model: bool = _f(False, "Save only the model, without optimizer, scheduler and RNG state.")
    save_strategy: SaveStrategy | str = _f("steps", "When to save: 'no', 'steps', 'epoch' or 'best'.")
    save_steps: float = _f(500, "Save every this many steps; a value < 1 is a ratio of the total steps.")
    save_on_each_node: bool = _f(False, "Save on the main process of every node (no shared storage).")
    save_total_limit: int | None = _f(None, "Keep at most this many checkpoints (the best one is kept).")
    enable_jit_checkpoint: bool = _f(False, "Save a checkpoint when the process receives SIGTERM.")

    # --- Hub Integration ---
    push_to_hub: bool = _f(False, "Push the model to the Hub each time it is saved.")
    hub_token: str | None = _f(None, "Token for the Hub.")
    hub_private_repo: bool | None = _f(None, "Create the Hub repository as private.")
    hub_model_id: str | None = _f(None, "Hub repository kept in sync with output_dir.")
    hub_strategy: HubStrategy | str = _f("every_save", "What to push to the Hub, and when.")
    hub_always_push: bool = _f(False, "Push even when the previous push has not finished.")
    hub_revision: str | None = _f(None, "Hub branch or revision to push to.")

    # --- Best Model Tracking ---
    load_best_model_at_end: bool = _f(False, "Load the best checkpoint when training ends.")
    metric_for_best_model: str | None = _f(None, "Metric that defines the best model (default 'loss').")
    greater_is_better: bool | None = _f(None, "Whether a larger metric is better (default: not a '*loss').")

    # --- Resuming Training ---
    ignore_data_skip: bool = _f(False, "On resume, do not skip the batches already seen.")
    restore_callback_states_from_checkpoint: bool = _f(False, "On resume, restore stateful callbacks too.")

    # --- Reproducibility ---
    full_determinism: bool = _f(False, "Make every operation deterministic (slow; for debugging).")
    seed: int = _f(42, "Random seed set at the start of training.")
    data_seed: int | None = _f(None, "Seed of the data samplers (default: seed).")

    # --- Hardware ---
    use_cpu: bool = _f(False, "Train on the CPU even when an accelerator is available.")

    # --- Accelerate ---
    accelerator_config: dict | str | None = _f(None, "Accelerator options (dict, JSON string or JSON file).")
    parallelism_config: Any | None = _f(None, "Parallelism layout object (accelerate ParallelismConfig).")

    # --- Dataloader ---
    dataloader_drop_last: bool = _f(False, "Drop the last incomplete batch.")
    dataloader_num_workers: int = _f(0, "Worker processes for data loading (0: the main process).")
    dataloader_pin_memory: bool = _f(True, "Pin memory in the data loaders.")
    dataloader_persistent_workers: bool = _f(False, "Keep the workers alive between epochs.")
    dataloader_prefetch_factor: int | None = _f(None, "Batches each worker loads ahead.")
    dataloader_multiprocessing_context: str | None = _f(
        None, "Start method of the workers.", choices=["fork", "spawn", "forkserver"]
    )
    dataloader_in_order: bool = _f(True, "Yield batches in the order they were dispatched to workers.")
    remove_unused_columns: bool = _f(True, "Drop dataset columns the model's forward does not accept.")
    label_names: list[str] | None = _f(None, "Input keys that hold the labels.")
    train_sampling_strategy: str = _f(
        "random",
        "Order of training samples.",
        choices=list(SAMPLING_STRATEGIES),
    )
    length_column_name: str = _f("length", "Column holding precomputed sample lengths.")

    # --- DDP ---
    ddp_find_unused_parameters: bool | None = _f(None, "DDP's find_unused_parameters flag.")
    ddp_bucket_cap_mb: int | None = _f(None, "DDP's bucket_cap_mb.")
    ddp_broadcast_buffers: bool | None = _f(None, "DDP's broadcast_buffers flag.")
    ddp_static_graph: bool | None = _f(None, "DDP's static_graph flag.")
    ddp_backend: str | None = _f(
        None,
        "Backend of torch.distributed.",
        choices=["nccl", "gloo", "mpi", "xccl", "hccl", "cncl", "mccl"],
    )
    ddp_timeout: int = _f(1800, "Timeout of torch.distributed collectives, in seconds.")

    # --- FSDP ---
    fsdp: str | None = _f(None, "Shard the model with FSDP (True, or legacy words).", nargs="?", const=True)
    fsdp_config: dict[str, Any] | str | None = _f(None, "FSDP options (dict, JSON string or JSON file).")

    # --- DeepSpeed ---
    deepspeed: dict | str | None = _f(None, "DeepSpeed config (dict, JSON string or JSON file).")

    # --- Debugging ---
    debug: str | list[DebugOption] = _f("", "Debug features, space separated: 'underflow_overflow'.")
    skip_memory_metrics: bool = _f(True, "Do not add memory profiling to the metrics.")

    # --- External Script Flags ---
    do_train: bool = _f(False, "Whether to train (for scripts; the Trainer ignores it).")
    do_eval: bool = _f(False, "Whether to evaluate (for scripts; set when eval_strategy is not 'no').")
    do_predict: bool = _f(False, "Whether to predict (for scripts; the Trainer ignores it).")
    resume_from_checkpoint: str | None = _f(None, "Checkpoint folder to resume from (for scripts).")
    local_rank: int = _f(-1, "Local rank given by old launchers; LOCAL_RANK is read instead.")

    def __post_init__(self) -> None:
        problems = normalize(self)
        check(self, problems)
        set_up_partial_state(self, configured=self.__dict__.get("_use_configured_state", False))
        runtime.announce_devices(self)  # where transformers' __post_init__ sets up its devices
        runtime.compile_tf32(self)  # then its TF32 step for torch_compile

    def __setattr__(self, name: str, value: Any) -> None:
        """Set the field and count the set, so ``Trainer.plan`` sees the change (``hf_lightning.plan``)."""
        object.__setattr__(self, name, value)
        self.__dict__["_plan_version"] = self.__dict__.get("_plan_version", 0) + 1

    def __str__(self) -> str:
        shown = {
            k: (f"<{k.upper()}>" if k.endswith("_token") else getattr(self, k)) for k in _init_names(self)
        }
        body = "".join(f"{k}={v},\n" for k, v in sorted(shown.items()))
        return f"{type(self).__name__}(\n{body})"

    __repr__ = __str__

    def to_dict(self) -> dict[str, Any]:
        """The init fields as plain values: enums become strings, tokens are masked as ``<HUB_TOKEN>``,
        a ``torch.dtype`` (a top-level field or a ``dtype`` key of a dict field) its name, ``"bfloat16"``."""
        return _dtypes_to_str({name: _plain(name, getattr(self, name)) for name in _init_names(self)})

    def to_json_string(self) -> str:
        """`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def to_sanitized_dict(self) -> dict[str, Any]:
        """`to_dict` plus the batch sizes, with every value that is not bool/int/float/str turned to str."""
        d = {
            **self.to_dict(),
            "train_batch_size": self.train_batch_size,
            "eval_batch_size": self.eval_batch_size,
        }
        return {k: v if type(v) in (bool, int, float, str) else str(v) for k, v in d.items()}

    # Derived from the running process (hf_lightning.args.runtime).
    world_size = property(runtime.world_size)
    process_index = property(runtime.process_index)
    local_process_index = property(runtime.local_process_index)
    n_gpu = property(runtime.n_gpu)
    device = property(runtime.device)
    parallel_mode = property(runtime.parallel_mode)
    train_batch_size = property(runtime.train_batch_size)
    eval_batch_size = property(runtime.eval_batch_size)
    ddp_timeout_delta = property(runtime.ddp_timeout_delta)
    should_log = property(runtime.should_log)
    should_save = property(runtime.should_save)
    place_model_on_device = property(runtime.place_model_on_device)
    deepspeed_plugin = property(runtime.deepspeed_plugin)
    distributed_state = property(runtime.distributed_state)
    get_process_log_level = runtime.get_process_log_level
    get_warmup_steps = runtime.get_warmup_steps
    main_process_first = runtime.main_process_first

    # The grouped setters (hf_lightning.args.setters); each returns the arguments.
    set_training = setters.set_training
    set_evaluate = setters.set_evaluate
    set_testing = setters.set_testing
    set_save = setters.set_save
    set_logging = setters.set_logging
    set_push_to_hub = setters.set_push_to_hub
    set_optimizer = setters.set_optimizer
    set_lr_scheduler = setters.set_lr_scheduler
    set_dataloader = setters.set_dataloader


def _init_names(args: Any) -> list[str]:
    return [f.name for f in fields(args) if f.init]


def _plain(name: str, value: Any) -> Any:
    """One field value as JSON-friendly data."""
    if name.endswith("_token"):
        return f"<{name.upper()}>"
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [enum_value(v) for v in value]
    if isinstance(value, dict):
        return _dtypes_to_str(value)
    if name == "parallelism_config" and value is not None and hasattr(value, "to_json"):
        return value.to_json()
    if value is not None and not isinstance(value, str | int | float) and hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def _dtypes_to_str(d: dict) -> dict:
    """A copy of ``d`` where a ``dtype`` key holding a ``torch.dtype`` becomes its short name, recursively;
    any other ``torch.dtype`` value of ``d`` itself too (it would not survive ``to_json_string``)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _dtypes_to_str(v)
        elif (k == "dtype" and v is not None and not isinstance(v, str)) or _is_torch_dtype(v):
            v = str(v).split(".")[-1]
        out[k] = v
    return out


def _is_torch_dtype(value: Any) -> bool:
    """``isinstance(value, torch.dtype)``, without importing torch here: a dtype exists only once it is."""
    torch_module = sys.modules.get("torch")
    return torch_module is not None and isinstance(value, torch_module.dtype)
