"""A DeepSpeed configuration's ``"auto"`` values filled from ``TrainingArguments``, as transformers fills them.

A DeepSpeed configuration (a dict or the path of a JSON file) may leave values to the trainer with
``"auto"``. transformers fills them in two stages, and so does :func:`fill_deepspeed_config`:

1. from ``TrainingArguments`` alone: micro batch size, gradient accumulation, the total batch
   (``world × micro × GA``), clipping, the optimizer's lr/betas/eps/weight decay, the warmup
   scheduler's bounds, ``fp16``/``bf16`` and node-local checkpoints with ``save_on_each_node``;
2. once the model and the number of steps are known: ZeRO bucket sizes from the model's
   ``hidden_size`` (``hidden²``, ``0.9·hidden²`` and ``10·hidden`` for ZeRO-3), the scheduler's
   ``total_num_steps`` and ``warmup_num_steps``.

A value that is not ``"auto"`` and disagrees with the arguments is an error listing every mismatch,
as in transformers. :func:`deepspeed_settings` is the plan's builder: the engine
(``hf_lightning.adapters.deepspeed``) receives its :class:`DeepSpeedSettings`, never the arguments.
Nothing here imports ``deepspeed`` or Lightning.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DeepSpeedSettings",
    "deepspeed_settings",
    "fill_deepspeed_config",
    "load_deepspeed_config",
    "trainer_deepspeed_settings",
    "zero_stage",
]

_HIDDEN_KEYS = (
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
)


def load_deepspeed_config(value: Any) -> dict[str, Any]:
    """A deep copy of ``deepspeed`` as a dict (``value`` is a dict or the path of a JSON file)."""
    if isinstance(value, Mapping):
        return copy.deepcopy(dict(value))
    if isinstance(value, str | os.PathLike):
        try:
            with open(value, encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"`TrainingArguments(deepspeed={value!r})`: reading the JSON file failed: {exc}"
            ) from exc
    raise ValueError(f"`TrainingArguments(deepspeed={value!r})` must be a dict or the path of a JSON file")


def zero_stage(config: Mapping[str, Any]) -> int:
    """The ZeRO stage of ``config`` (0 when it has no ``zero_optimization``)."""
    return int(config.get("zero_optimization", {}).get("stage", 0))


class _Filler:
    """Walks dotted keys of one config, fills ``"auto"`` and records mismatches."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.mismatches: list[str] = []

    def node(self, dotted: str) -> tuple[dict[str, Any] | None, str]:
        *parents, leaf = dotted.split(".")
        node: Any = self.config
        for key in parents:
            node = node.get(key)
            if not isinstance(node, dict):
                return None, leaf
        return node, leaf

    def is_auto(self, dotted: str) -> bool:
        node, leaf = self.node(dotted)
        return node is not None and node.get(leaf) == "auto"

    def fill(self, dotted: str, value: Any, source: str, must_match: bool = True) -> None:
        node, leaf = self.node(dotted)
        if node is None:
            return
        current = node.get(leaf)
        if current == "auto":
            node[leaf] = value
        elif must_match and current is not None and current != value:
            self.mismatches.append(f"- ds {dotted}={current} vs hf {source}={value}")


def _from_arguments(fill: _Filler, args: Any, world_size: int) -> None:
    micro, ga = args.per_device_train_batch_size, args.gradient_accumulation_steps
    strict = not args.auto_find_batch_size
    fill.fill("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size", strict)
    fill.fill("gradient_accumulation_steps", ga, "gradient_accumulation_steps")
    fill.fill("train_batch_size", world_size * micro * ga, "train_batch_size (calculated)", strict)
    fill.fill("gradient_clipping", args.max_grad_norm, "max_grad_norm")
    fill.fill("optimizer.params.lr", args.learning_rate, "learning_rate")
    fill.fill("optimizer.params.betas", [args.adam_beta1, args.adam_beta2], "adam_beta1+adam_beta2")
    fill.fill("optimizer.params.eps", args.adam_epsilon, "adam_epsilon")
    fill.fill("optimizer.params.weight_decay", args.weight_decay, "weight_decay")
    fill.fill("scheduler.params.warmup_min_lr", 0, "", must_match=False)
    fill.fill("scheduler.params.warmup_max_lr", args.learning_rate, "learning_rate")
    if args.save_on_each_node:
        fill.config.setdefault("checkpoint", {})["use_node_local_storage"] = True
    fill.fill("fp16.enabled", bool(args.fp16 or args.fp16_full_eval), "fp16|fp16_full_eval")
    fill.fill("bf16.enabled", bool(args.bf16 or args.bf16_full_eval), "bf16|bf16_full_eval")


def _hidden_size(model: Any) -> int | None:
    config = getattr(model, "config", None)
    for source in (config, getattr(config, "text_config", None)):
        if source is None:
            continue
        if hasattr(source, "hidden_size"):
            return int(source.hidden_size)
        if hasattr(source, "hidden_sizes"):
            return int(max(source.hidden_sizes))
    return None


def _from_model(fill: _Filler, model: Any) -> None:
    autos = [key for key in _HIDDEN_KEYS if fill.is_auto(key)]
    if not autos:
        return
    hidden = _hidden_size(model)
    if hidden is None:
        raise ValueError(
            f"`TrainingArguments(deepspeed=...)`: {autos} are 'auto' but the model's config has no `hidden_size` "
            "or `hidden_sizes`; give these keys integer values"
        )
    fill.fill(_HIDDEN_KEYS[0], hidden * hidden, "", must_match=False)
    if zero_stage(fill.config) == 3:
        fill.fill(_HIDDEN_KEYS[1], int(0.9 * hidden * hidden), "", must_match=False)
        fill.fill(_HIDDEN_KEYS[2], 10 * hidden, "", must_match=False)


def fill_deepspeed_config(
    args: Any, *, world_size: int = 1, model: Any = None, num_training_steps: int | None = None
) -> dict[str, Any]:
    """``args.deepspeed`` with its ``"auto"`` values filled; ``ValueError`` listing every mismatch.

    Without ``num_training_steps`` only the first stage runs (what ``TrainingArguments`` knows alone).
    """
    fill = _Filler(load_deepspeed_config(args.deepspeed))
    _from_arguments(fill, args, world_size)
    if num_training_steps is not None:
        _from_model(fill, model)
        fill.fill("scheduler.params.total_num_steps", num_training_steps, "num_training_steps (calculated)")
        warmup = max(1, args.get_warmup_steps(num_training_steps))
        fill.fill("scheduler.params.warmup_num_steps", warmup, "warmup_steps")
    if fill.mismatches:
        raise ValueError(
            "`TrainingArguments(deepspeed=...)`: these DeepSpeed values disagree with the arguments:\n"
            + "\n".join(fill.mismatches)
            + "\nSet them to 'auto' to take the arguments' values."
        )
    return fill.config


@dataclass(frozen=True)
class DeepSpeedSettings:
    """``deepspeed`` as the plan keeps it: the configuration filled from the arguments alone, its sections, and
    how to fill it once the model and the run's length are known (the engine never reads the arguments)."""

    config: dict[str, Any]
    stage: int
    cpu: bool
    """DeepSpeed's CPU accelerator (``use_cpu``, or no CUDA device)."""
    world_size: int = 1
    """The processes the batch-size values are checked against."""
    sections: frozenset[str] = frozenset()
    """Which of ``optimizer`` / ``scheduler`` the configuration has."""
    filler: Callable[..., dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    """``filler(model=..., num_training_steps=...)``: the configuration with its second-stage values filled."""

    def filled(self, model: Any, num_training_steps: int | None) -> dict[str, Any]:
        """The configuration with the model's and the run length's ``"auto"`` values filled too."""
        if self.filler is None:
            return copy.deepcopy(self.config)
        return self.filler(model=model, num_training_steps=num_training_steps)

    def describe(self, backend: str | None) -> str:
        kind = "CPU (gloo)" if self.cpu else "CUDA"
        return f"DeepSpeedStrategy(config=<ZeRO stage {self.stage}, 'auto' values filled>, process_group_backend={backend!r}) on {kind}"


def deepspeed_settings(args: Any, world_size: int, *, cpu: bool) -> DeepSpeedSettings | None:
    """The plan's DeepSpeed settings (``None`` without ``deepspeed``); mismatched values raise here."""
    if not args.deepspeed:
        return None
    config = fill_deepspeed_config(args, world_size=world_size)
    return DeepSpeedSettings(
        config=config,
        stage=zero_stage(config),
        cpu=cpu,
        world_size=world_size,
        sections=frozenset(name for name in ("optimizer", "scheduler") if name in config),
        filler=functools.partial(fill_deepspeed_config, args, world_size=world_size),
    )


def trainer_deepspeed_settings(args: Any) -> DeepSpeedSettings | None:
    """The DeepSpeed settings of ``args`` over its own processes (``args.world_size``), as the Trainer builds a
    configuration's ``optimizer`` / ``scheduler`` sections and an ``HFModule`` built from ``args`` reads them."""
    if not args.deepspeed:
        return None
    return deepspeed_settings(args, max(int(args.world_size), 1), cpu=bool(args.use_cpu))
