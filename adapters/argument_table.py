"""The argument table: every ``TrainingArguments`` field, the object that carries it, and its status.

One row per field, in the order of the specification. ``carrier`` names the Lightning object, callback
or facade component that honours the field; ``status`` is one of:

- ``"supported"``: the carrier implements it;
- ``"not yet"``: nobody carries it yet; :func:`check_supported` refuses a non-default value;
- ``"not applicable"``: transformers itself does not act on it (script flags, launcher values).

``docs/arguments.md`` is rendered from this table by ``tools/gen_arguments_doc.py``; a test keeps the two in
step and checks that the table and the dataclass name the same fields."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, cast

from hf_lightning.args.enums import SAMPLING_STRATEGIES, enum_value
from hf_lightning.args.runtime import devices_unannounced

__all__ = [
    "ARGUMENT_TABLE",
    "NOT_APPLICABLE",
    "NOT_YET",
    "SEQ2SEQ_ARGUMENT_TABLE",
    "STATUSES",
    "SUPPORTED",
    "ArgumentRow",
    "carriers_for",
    "check_supported",
    "field_default",
    "is_default_value",
    "non_default_fields",
    "not_yet_fields",
    "table_for",
]

SUPPORTED = "supported"
NOT_YET = "not yet"
NOT_APPLICABLE = "not applicable"
STATUSES = (SUPPORTED, NOT_YET, NOT_APPLICABLE)


@dataclass(frozen=True)
class ArgumentRow:
    """Who carries one ``TrainingArguments`` field, and whether it works today."""

    carrier: str
    """The Lightning object, callback or facade component that honours the field."""
    status: str = SUPPORTED
    """One of :data:`STATUSES`."""


def _rows(status: str, rows: Mapping[str, str]) -> dict[str, ArgumentRow]:
    return {name: ArgumentRow(carrier, status) for name, carrier in rows.items()}


_FACADE_OPT = "hf_lightning.optim.create_optimizer (called by the Trainer facade and HFModule)"
_SCHED = "Trainer facade (LR scheduler) + HFModule (the scheduler it builds when given none)"
_EVAL = "Evaluation loop"
_WHEN_EVAL = "DefaultFlowCallback (when to evaluate)"
_LOG_LEVEL = "TrainingArguments.get_process_log_level (the Trainer facade's per-process log level)"
_CKPT = "Trainer checkpointing (trainer/checkpointing.py; HFCheckpoint for a plain Lightning Trainer)"
_BEST = "Trainer best-model tracking (trainer/evaluation.py, trainer/checkpointing.py)"
_HUB = "Trainer Hub publisher (trainer/hub.py, through huggingface_hub.HfApi)"
_DATA = "Trainer facade DataLoader (trainer/data.py) + DataSettings"
_LOADER = "DataSettings.loader_kwargs(), the Trainer facade's DataLoader options"
_DDP = "DDPStrategy (used when WORLD_SIZE > 1)"
_TRACKIO = "Trackio reporter (adapters/callbacks/trackio.py, report_to='trackio')"
_SCRIPT = "informational (for the user's script; stored in to_dict)"

# Ordered as in the specification (and as the dataclass declares its fields).
_TABLE: dict[str, ArgumentRow] = {
    **_rows(
        SUPPORTED,
        {
            "output_dir": "lightning.Trainer(default_root_dir) + Trainer checkpointing",
            "per_device_train_batch_size": f"{_DATA} (train batch_size)",
            "num_train_epochs": "lightning.Trainer(max_epochs, max_steps)",
            "max_steps": "lightning.Trainer(max_steps)",
            "learning_rate": _FACADE_OPT,
            "lr_scheduler_type": _SCHED,
            "lr_scheduler_kwargs": _SCHED,
            "warmup_steps": "TrainingArguments.get_warmup_steps (the Trainer facade's LR scheduler) "
            "+ HFModule (the scheduler it builds when given none)",
            "optim": _FACADE_OPT,
            "optim_args": _FACADE_OPT,
            "weight_decay": f"{_FACADE_OPT}: decay parameter groups",
            "adam_beta1": _FACADE_OPT,
            "adam_beta2": _FACADE_OPT,
            "adam_epsilon": _FACADE_OPT,
        },
    ),
    "optim_target_modules": ArgumentRow(
        "hf_lightning.optim (GaLore / APOLLO low-rank parameter groups, called by the Trainer facade and HFModule)"
    ),
    **_rows(
        SUPPORTED,
        {
            "gradient_accumulation_steps": "HFModule (one Lightning batch = one accumulation window)",
            "average_tokens_across_devices": "HFModule (num_items_in_batch all-reduced across ranks)",
            "max_grad_norm": "HFModule (manual clipping, grad_norm logged)",
            "label_smoothing_factor": "HFModule (label smoother)",
            "bf16": "lightning.Trainer(precision='bf16-mixed')",
            "fp16": "lightning.Trainer(precision='16-mixed')",
            "bf16_full_eval": f"{_EVAL} (model cast to bfloat16)",
            "fp16_full_eval": f"{_EVAL} (model cast to float16)",
            "tf32": "Trainer facade (torch TF32 matmul flags)",
            "activation_checkpointing": "Trainer facade (model.activation_checkpointing_enable in train())",
            "activation_checkpointing_kwargs": "Trainer facade (model.activation_checkpointing_enable in train())",
            "gradient_checkpointing": "alias of activation_checkpointing",
            "gradient_checkpointing_kwargs": "alias of activation_checkpointing_kwargs",
            "torch_compile": "HFModule (torch.compile)",
            "torch_compile_backend": "HFModule (torch.compile backend)",
            "torch_compile_mode": "HFModule (torch.compile mode)",
        },
    ),
    "use_liger_kernel": ArgumentRow(
        "Trainer facade (hf_lightning.kernels: Liger kernels patched in at train(); CUDA only)"
    ),
    "liger_kernel_config": ArgumentRow("Trainer facade (kwargs of Liger's kernel patching at train())"),
    **_rows(
        SUPPORTED,
        {
            "use_cache": "Trainer facade (model.config.use_cache)",
            "neftune_noise_alpha": "Trainer facade (hf_lightning.neftune: noise on the input embeddings in train())",
            "torch_empty_cache_steps": "Trainer facade (empties the accelerator cache every N steps)",
        },
    ),
    "auto_find_batch_size": ArgumentRow(
        "Trainer facade (train() retries with 90% of the batch size on out-of-memory)"
    ),
    **_rows(
        SUPPORTED,
        {
            "logging_strategy": "HF logging (DefaultFlowCallback should_log)",
            "logging_steps": "HF logging + lightning.Trainer(log_every_n_steps)",
            "logging_first_step": "HF logging (DefaultFlowCallback should_log)",
            "log_on_each_node": _LOG_LEVEL,
            "logging_nan_inf_filter": "Trainer facade (NaN/Inf losses left out of the logged loss)",
            "include_num_input_tokens_seen": "Trainer facade (num_input_tokens_seen in trainer_state)",
            "log_level": _LOG_LEVEL,
            "log_level_replica": _LOG_LEVEL,
            "disable_tqdm": "lightning.Trainer(enable_progress_bar)",
            "report_to": "Lightning loggers (TensorBoardLogger, CSVLogger, MLFlowLogger, WandbLogger, CometLogger; "
            "Trackio and Kubeflow through HF callbacks)",
            "run_name": "Lightning loggers (run name / version)",
            "project": f"WandbLogger(project) / CometLogger(project) + {_TRACKIO}",
        },
    ),
    "trackio_space_id": ArgumentRow(_TRACKIO),
    "trackio_bucket_id": ArgumentRow(_TRACKIO),
    "trackio_static_space_id": ArgumentRow(_TRACKIO),
    **_rows(
        SUPPORTED,
        {
            "eval_strategy": _WHEN_EVAL,
            "eval_steps": _WHEN_EVAL,
            "eval_delay": _WHEN_EVAL,
            "per_device_eval_batch_size": "TrainingArguments.eval_batch_size (the Trainer facade's "
            "evaluation DataLoader)",
            "prediction_loss_only": _EVAL,
            "eval_on_start": "Trainer facade (evaluation before the first step)",
            "eval_do_concat_batches": f"{_EVAL} (gathering predictions)",
            "eval_use_gather_object": f"{_EVAL} (gathering predictions)",
            "eval_accumulation_steps": f"{_EVAL} (offloading predictions to CPU)",
            "include_for_metrics": f"{_EVAL} (compute_metrics inputs)",
            "batch_eval_metrics": f"{_EVAL} (compute_metrics per batch)",
            "save_only_model": _CKPT,
            "save_strategy": _CKPT,
            "save_steps": "DefaultFlowCallback (when to save; Trainer checkpointing writes)",
            "save_on_each_node": _CKPT,
            "save_total_limit": f"{_CKPT} (rotation)",
            "enable_jit_checkpoint": "JITCheckpoint Lightning callback (owns SIGTERM during fit)",
        },
    ),
    **_rows(
        SUPPORTED,
        {
            "push_to_hub": _HUB,
            "hub_token": _HUB,
            "hub_private_repo": _HUB,
            "hub_model_id": _HUB,
            "hub_strategy": _HUB,
            "hub_always_push": _HUB,
            "hub_revision": _HUB,
        },
    ),
    **_rows(
        SUPPORTED,
        {
            "load_best_model_at_end": _BEST,
            "metric_for_best_model": _BEST,
            "greater_is_better": _BEST,
            "ignore_data_skip": "Trainer facade (resume: skipping seen batches)",
            "restore_callback_states_from_checkpoint": "Trainer facade (resume: callback states)",
            "full_determinism": "lightning.Trainer(deterministic, benchmark) + Trainer facade (enable_full_determinism)",
            "seed": "Trainer facade (set_seed before model_init)",
            "data_seed": "DataSettings (the samplers' generator seed)",
            "use_cpu": "lightning.Trainer(accelerator='cpu')",
        },
    ),
    "accelerator_config": ArgumentRow(
        "Trainer accelerator (its dataloader_config and gradient_state; one process: every key; several "
        "processes: split_batches, the other batch keys at their defaults, else NotImplementedError)"
    ),
    "parallelism_config": ArgumentRow("tensor / context parallelism (not built)", NOT_YET),
    **_rows(
        SUPPORTED,
        {
            "dataloader_drop_last": f"{_DATA} (drop_last)",
            "dataloader_num_workers": f"{_DATA} (num_workers)",
            "dataloader_pin_memory": f"{_LOADER} (pin_memory)",
            "dataloader_persistent_workers": f"{_DATA} (persistent_workers)",
            "dataloader_prefetch_factor": f"{_LOADER} (prefetch_factor)",
            "dataloader_multiprocessing_context": f"{_LOADER} (multiprocessing_context)",
            "dataloader_in_order": f"{_LOADER} (in_order)",
            "remove_unused_columns": "Trainer facade (drops columns the model's forward does not take)",
            "label_names": "Trainer facade (label keys: evaluation loop, unused-column removal)",
            "train_sampling_strategy": f"Samplers ({', '.join(SAMPLING_STRATEGIES)})",
            "length_column_name": "Samplers (precomputed lengths)",
            "ddp_find_unused_parameters": f"{_DDP}(find_unused_parameters)",
            "ddp_bucket_cap_mb": f"{_DDP}(bucket_cap_mb)",
            "ddp_broadcast_buffers": f"{_DDP}(broadcast_buffers)",
            "ddp_static_graph": f"{_DDP}(static_graph)",
            "ddp_backend": f"{_DDP}(process_group_backend)",
            "ddp_timeout": f"{_DDP}(timeout)",
        },
    ),
    "fsdp": ArgumentRow("FSDP strategy (ModelParallelStrategy with fully_shard; FSDPStrategy for version 1)"),
    "fsdp_config": ArgumentRow(
        "FSDP strategy (wrap policy, reshard_after_forward, cpu_offload, activation_checkpointing, ...)"
    ),
    "deepspeed": ArgumentRow(
        'DeepSpeed strategy (DeepSpeedStrategy; "auto" values filled as transformers fills them)'
    ),
    "debug": ArgumentRow("Trainer facade (hf_lightning.debug_utils.DebugUnderflowOverflow on the model)"),
    "skip_memory_metrics": ArgumentRow("Trainer facade (TrainerMemoryTracker: *_mem_* metrics)"),
    **_rows(
        NOT_APPLICABLE,
        {
            "do_train": _SCRIPT,
            "do_eval": _SCRIPT,
            "do_predict": _SCRIPT,
            "resume_from_checkpoint": f"{_SCRIPT}; pass it to Trainer.train()",
            "local_rank": "informational (ranks come from the launcher's environment)",
        },
    ),
}

_SEQ2SEQ_TABLE: dict[str, ArgumentRow] = {
    "sortish_sampler": ArgumentRow("informational (transformers does not read it either)", NOT_APPLICABLE),
    "predict_with_generate": ArgumentRow("Seq2SeqTrainer (generate during evaluation)"),
    "generation_max_length": ArgumentRow("Seq2SeqTrainer (generate max_length)"),
    "generation_num_beams": ArgumentRow("Seq2SeqTrainer (generate num_beams)"),
    "generation_config": ArgumentRow("Seq2SeqTrainer (GenerationConfig)"),
}

ARGUMENT_TABLE: Mapping[str, ArgumentRow] = MappingProxyType(_TABLE)
"""Every ``TrainingArguments`` field → its carrier and status."""

SEQ2SEQ_ARGUMENT_TABLE: Mapping[str, ArgumentRow] = MappingProxyType(_SEQ2SEQ_TABLE)
"""The fields ``Seq2SeqTrainingArguments`` adds → their carrier and status."""


def table_for(args: Any) -> Mapping[str, ArgumentRow]:
    """The rows that apply to ``args`` (an instance or class): the seq2seq rows join when it has them."""
    names = {f.name for f in dataclasses.fields(args)}
    if names & set(_SEQ2SEQ_TABLE):
        return MappingProxyType({**_TABLE, **_SEQ2SEQ_TABLE})
    return ARGUMENT_TABLE


def carriers_for(args: Any) -> Mapping[str, str]:
    """For each field of ``args`` that the table knows, the object that carries it."""
    table = table_for(args)
    return MappingProxyType(
        {f.name: table[f.name].carrier for f in dataclasses.fields(args) if f.name in table}
    )


def field_default(field: dataclasses.Field) -> Any:
    """The default of a dataclass field (its factory called), or ``dataclasses.MISSING``."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def is_default_value(value: Any, default: Any) -> bool:
    """Whether ``value`` means the same as ``default`` after ``__post_init__`` normalisation.

    Normalisation turns some defaults into equivalents: ``""`` into ``[]``, ``None`` into an empty
    config object, a string into a ``str`` enum member.
    """
    value = enum_value(value)
    if _equal(value, default):
        return True
    if _is_empty(default) and _is_empty(value):
        return True
    if default is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            return _equal(value, type(value)())
        except TypeError:  # the config class has required fields: not a default instance
            return False
    return False


def _equal(left: Any, right: Any) -> bool:
    try:
        return bool(left == right)
    except Exception:  # tensors, arrays: an ambiguous truth value means "not the default"
        return False


def _is_empty(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, (str, list, dict, tuple)) and not value)


@functools.cache
def _normalized_defaults(cls: type) -> Mapping[str, Any]:
    """The field values of ``cls()``: defaults as ``__post_init__`` leaves them (empty if it needs arguments)."""
    try:
        with warnings.catch_warnings(), devices_unannounced():
            warnings.simplefilter("ignore")
            instance = cls()
    except (TypeError, ValueError):
        return MappingProxyType({})
    return MappingProxyType({f.name: getattr(instance, f.name) for f in dataclasses.fields(cls)})


def non_default_fields(args: Any) -> list[str]:
    """The fields of ``args`` (an instance) whose value differs from the default, in field order.

    A value counts as the default when it equals the field's declared default (see
    :func:`is_default_value`) or the value a default-constructed instance holds after ``__post_init__``
    (e.g. an ``accelerator_config`` filled with its default keys).
    """
    normalized = _normalized_defaults(cast(type, type(args)))
    missing = object()
    return [
        field.name
        for field in dataclasses.fields(args)
        if not is_default_value(value := getattr(args, field.name), field_default(field))
        and not _equal(value, normalized.get(field.name, missing))
    ]


def not_yet_fields(args: Any) -> list[str]:
    """The "not yet" fields of ``args`` that hold a non-default value, in field order."""
    table = table_for(args)
    return [name for name in non_default_fields(args) if name in table and table[name].status == NOT_YET]


def _shown(value: Any) -> str:
    """``repr`` of a value, with ``str`` enum members shown as their plain values."""
    if isinstance(value, Enum):
        return repr(enum_value(value))
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    return repr(value)


# Fields carried by hf_lightning.Trainer only (its DataLoaders, accelerator and train()): refused (when not at the
# default) where a Lightning user brings the DataLoader (HFModule(model, args), to_lightning(args)).
TRAINER_ONLY = frozenset({"accelerator_config", "debug"})


def check_supported(args: Any, *, by_trainer: bool = False) -> None:
    """Raise one ``NotImplementedError`` naming every "not yet" field that ``args`` sets (and, unless
    ``by_trainer``, every field of :data:`TRAINER_ONLY` it sets)."""
    names = not_yet_fields(args)
    trainer_only = [] if by_trainer else [n for n in non_default_fields(args) if n in TRAINER_ONLY]
    if not names and not trainer_only:
        return
    table, cls = table_for(args), type(args).__name__
    lines = "\n".join(
        [
            f"  `{cls}({name}={_shown(getattr(args, name))})` is not supported by hf_lightning yet "
            f"(carrier: {table[name].carrier})"
            for name in names
        ]
        + [
            f"  `{cls}({name}={_shown(getattr(args, name))})` is honoured by hf_lightning.Trainer only "
            "(its DataLoaders and accelerator), not with a DataLoader of your own"
            for name in trainer_only
        ]
    )
    names = names + trainer_only
    raise NotImplementedError(
        f"{len(names)} argument(s) set that hf_lightning does not carry yet; leave them at their defaults:\n"
        f"{lines}\nThe carrier and status of every argument: docs/arguments.md"
    )
