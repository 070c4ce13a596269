"""transformers' Trainer attributes that describe the engine and the model, for Trainer subclasses.

transformers' ``Trainer.__init__`` sets flags its subclasses read (TRL's trainers branch on
``is_deepspeed_enabled`` and ``is_fsdp_enabled``; sentence-transformers sets ``can_return_loss``). They
keep transformers' names and meanings here, decided from the accelerator and the model as transformers
decides them:

- ``is_deepspeed_enabled`` / ``is_fsdp_enabled``: the accelerator's state has a DeepSpeed / FSDP plugin;
  ``is_fsdp_xla_enabled`` (and its v1 / v2 forms): ``fsdp_config["xla"]`` (refused: no XLA engine);
- ``gather_function``: ``accelerator.gather_for_metrics`` (with ``eval_use_gather_object``);
- ``deepspeed``: the DeepSpeed engine once training wraps the model (None before);
- ``is_model_parallel``: the model spreads over several devices (``hf_device_map``);
  ``is_distributed_loading_by_transformers``: the model was sharded by ``from_pretrained``;
- ``place_model_on_device``: transformers' rule (``args.place_model_on_device`` unless a sharding engine,
  model parallelism or a full fp16/bf16 evaluation postpones the move);
- ``can_return_loss``: ``model.forward`` has ``return_loss=True`` (CLIP-like models).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from typing import Any

import torch

__all__ = [
    "PART_NAMES",
    "PART_VIEWS",
    "can_return_loss",
    "check_parts",
    "default_collator",
    "init_engine_attributes",
    "init_model_attributes",
    "parallel_size",
    "save_model_files",
    "unwrap_peft",
]

PART_NAMES = (
    "launcher",
    "steps",
    "run",
    "optim",
    "loaders",
    "evaluations",
    "eval_loop",
    "checkpoints",
    "search",
    "hub",
)
"""The attributes holding the Trainer's parts (``trainer.py``): names transformers' Trainer does not use, kept
for hf_lightning's parts (docs/subclassing.md)."""


PART_VIEWS = (
    property(
        lambda t: t.hub if t.hub.in_flight else None,
        doc="transformers' ``push_in_progress``: pushes in flight",
    ),
    property(
        lambda t: t.launcher.neftune_handle, doc="transformers' ``neftune_hook_handle``: NEFTune's hook"
    ),
    property(lambda t: t.eval_loop.model_preparation_time, doc="transformers' ``model_preparation_time``"),
)
"""``push_in_progress``, ``neftune_hook_handle``, ``model_preparation_time``: transformers' attributes, read from
the part that keeps them (the hub publisher has transformers' ``is_done()``)."""


def unwrap_peft(model: Any) -> Any:
    """The base model of a PEFT wrapper (``get_base_model()``), else ``model`` (transformers' ``unwrap_peft_model``)."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base) and getattr(model, "peft_config", None) is not None:
        return get_base()
    return model


def can_return_loss(model: Any) -> bool:
    """Whether the class of ``model`` has a ``forward`` whose ``return_loss`` defaults to True."""
    forward = getattr(type(model), "forward", None)
    if forward is None:
        return False
    parameter = inspect.signature(forward).parameters.get("return_loss")
    return parameter is not None and parameter.default is True


def init_engine_attributes(trainer: Any) -> dict[str, Any]:
    """What transformers' ``create_accelerator_and_postprocess`` sets besides ``trainer.accelerator`` (by name;
    the Trainer assigns them)."""
    accelerator, args = trainer.accelerator, trainer.args
    flags: dict[str, Any] = {}
    flags["gather_function"] = functools.partial(
        accelerator.gather_for_metrics, use_gather_object=trainer.plan.evaluation.eval_use_gather_object
    )
    flags["is_deepspeed_enabled"] = getattr(accelerator.state, "deepspeed_plugin", None) is not None
    flags["is_fsdp_enabled"] = getattr(accelerator.state, "fsdp_plugin", None) is not None
    config = dict(args.fsdp_config or {})
    flags["is_fsdp_xla_enabled"] = args.fsdp and config.get(
        "xla", False
    )  # transformers' expression (None without fsdp)
    flags["is_fsdp_xla_v2_enabled"] = args.fsdp and config.get("xla_fsdp_v2", False)
    flags["is_fsdp_xla_v1_enabled"] = flags["is_fsdp_xla_enabled"] and not flags["is_fsdp_xla_v2_enabled"]
    flags["deepspeed"] = None
    return flags


def _model_parallel(model: Any, device: Any) -> bool:
    device_map = getattr(model, "hf_device_map", None)
    if device_map is None:
        return False
    devices = {d for d in device_map.values() if d not in ("cpu", "disk")}
    if len(devices) > 1:
        return True
    return len(devices) == 1 and torch.device(device) != torch.device(next(iter(devices)))


def init_model_attributes(trainer: Any, model: Any) -> dict[str, Any]:
    """transformers' model flags (see the module docstring), from ``model`` as given to the Trainer (by name;
    the Trainer assigns them)."""
    args = trainer.args
    flags: dict[str, Any] = {"is_model_parallel": _model_parallel(model, args.device)}
    flags["is_distributed_loading_by_transformers"] = bool(
        getattr(model, "is_distributed_loading_by_transformers", False)
    )
    if args.place_model_on_device is not None:
        flags["place_model_on_device"] = bool(args.place_model_on_device)
    else:
        flags["place_model_on_device"] = not (
            flags["is_model_parallel"]
            or trainer.is_deepspeed_enabled
            or args.fp16_full_eval
            or args.bf16_full_eval
            or trainer.is_fsdp_xla_enabled
            or trainer.is_fsdp_enabled
            or flags["is_distributed_loading_by_transformers"]
        )
    flags["can_return_loss"] = can_return_loss(unwrap_peft(model))
    _import_deepspeed_as_transformers()
    return flags


def _import_deepspeed_as_transformers() -> None:
    """Import DeepSpeed here when it is installed, as transformers' ``__init__`` does (accelerate's
    ``unwrap_model`` asks for ``DeepSpeedEngine``): its import-time console line ("Setting accelerator to
    CPU" on a machine without a GPU) then comes at construction, as with transformers, not at the first save."""
    if "deepspeed" in sys.modules or importlib.util.find_spec("deepspeed") is None:
        return
    try:
        import deepspeed  # noqa: F401, PLC0415
    except Exception:  # a broken install fails where it is used, with its own error
        return


def check_parts(trainer: Any) -> None:
    """Refuse to train when a subclass replaced one of the Trainer's parts, naming the attribute."""
    for name in PART_NAMES:
        part = trainer.__dict__.get(name)
        if part is None or not type(part).__module__.startswith("hf_lightning.trainer."):
            raise TypeError(
                f"`{type(trainer).__name__}.{name}` holds {part!r}, but hf_lightning's Trainer keeps one of its "
                f"parts under that name (docs/subclassing.md: {', '.join(PART_NAMES)}); rename the subclass's attribute"
            )


def parallel_size(trainer: Any, kind: str) -> int:
    """``get_tp_size`` / ``get_cp_size`` / ``get_sp_size`` as transformers reads them: the model's ``_tp_size``
    (tensor parallelism), else ``accelerator.parallelism_config`` (a test may patch it), else 1."""
    if kind == "tp" and (model_tp := getattr(trainer.model, "_tp_size", None)) is not None:
        return int(model_tp)
    config = getattr(trainer.accelerator, "parallelism_config", None)
    return int(getattr(config, f"{kind}_size", 1)) if config is not None else 1


def save_model_files(trainer: Any, output_dir: str | None = None, state_dict: dict | None = None) -> None:
    """``Trainer._save``: the model (``save_pretrained``, else ``model.safetensors``), the processing class (else
    the data collator's tokenizer) and the arguments in ``output_dir``, on the saving process; ``state_dict``
    replaces the model's own (a sharded model's gathered weights). ``save_model`` calls it."""
    from hf_lightning.checkpoint.store import save_model

    if not trainer.args.should_save:
        return
    output_dir = str(trainer.plan.checkpoint.output_dir) if output_dir is None else output_dir
    processing = trainer.checkpoints.processing_to_save()
    save_model(
        trainer.model, output_dir, processing_class=processing, args=trainer.args, state_dict=state_dict
    )


def default_collator(processing_class: Any, given: Any = None) -> Any:
    """``given``, else the collator transformers picks: ``DataCollatorWithPadding`` for a tokenizer or a
    sequence feature extractor (transformers' classes), else ``default_data_collator`` (an image processor or a
    ``ProcessorMixin`` has a ``pad`` too, but transformers stacks their outputs as they are)."""
    from hf_lightning.data.collators import DataCollatorWithPadding, default_data_collator

    if given is not None:
        return given
    if processing_class is not None and _pads_in_transformers(processing_class):
        return DataCollatorWithPadding(processing_class)
    return default_data_collator


_PADDING_CLASSES = (
    ("transformers.tokenization_utils_base", "PreTrainedTokenizerBase"),
    ("transformers.feature_extraction_sequence_utils", "SequenceFeatureExtractor"),
)


def _pads_in_transformers(processing_class: Any) -> bool:
    """transformers' test: an instance of its tokenizer or sequence feature extractor base class (a module not
    loaded holds no instance). Without transformers loaded, a processing class of the user's own pads if it
    has ``pad``."""
    if "transformers" not in sys.modules:
        return hasattr(processing_class, "pad")
    loaded = (sys.modules.get(module) for module, _ in _PADDING_CLASSES)
    bases = tuple(
        getattr(module, name) for module, (_, name) in zip(loaded, _PADDING_CLASSES) if module is not None
    )
    return bool(bases) and isinstance(processing_class, bases)
