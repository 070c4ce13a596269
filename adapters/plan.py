"""``to_lightning(args)``: translate a ``TrainingArguments`` into Lightning objects, once.

The result, a frozen :class:`LightningPlan`, holds plain values grouped by who consumes them:
``trainer_kwargs`` for ``lightning.Trainer``, ``module`` for ``HFModule``, ``data`` for the data
loaders and samplers, ``distributed`` for the strategy, ``logger_specs`` for the loggers. Print a plan
to see which object carries each argument::

    plan = to_lightning(args, env=os.environ, cuda_available=torch.cuda.is_available())
    print(plan)
    trainer = lightning.Trainer(**plan.trainer_kwargs, callbacks=[...])

The translation is a pure function: it reads only its arguments (the launcher's variables come in
through ``env``) and builds the strategy and loggers lazily, on first access.

Fixed by design, whatever the arguments: ``HFModule`` optimises manually and each Lightning batch is
one gradient-accumulation window, so Lightning sees ``accumulate_grad_batches=1`` and
``gradient_clip_val=None`` (clipping is ``HFModule``'s) and ``trainer.global_step`` counts optimizer
updates; checkpoints (HF folder format) and samplers are ours, so Lightning's are off.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType
from typing import Any

import torch

from hf_lightning.args.enums import enum_value
from hf_lightning.args.trackers import tracker_settings
from hf_lightning.args.translate import (
    data_settings,
    eval_settings,
    module_settings,
    precisions,
)
from hf_lightning.plan.groups import DataSettings, EvalSettings, ModuleSettings

from .argument_table import carriers_for, check_supported, non_default_fields
from .loggers import LoggerSpec, logger_specs
from .strategy import (
    DistributedSettings,
    build_strategy,
    cluster_plugins,
    distributed_settings,
)

__all__ = [
    "DataSettings",
    "EvalSettings",
    "LightningPlan",
    "ModuleSettings",
    "data_settings",
    "eval_settings",
    "module_settings",
    "to_lightning",
]


@dataclass(frozen=True)
class LightningPlan:
    """``TrainingArguments`` translated for Lightning: plain values, grouped by consumer.

    Equal arguments give equal plans. ``trainer_kwargs``, ``strategy`` and ``loggers`` are built from
    the values on first access and then kept, so ``plan.trainer_kwargs["logger"]`` holds the very
    objects in ``plan.loggers``. Build one ``lightning.Trainer`` per plan (a strategy object belongs to
    one Trainer); call ``to_lightning`` again for another.
    """

    trainer_settings: Mapping[str, Any]
    """The ``lightning.Trainer`` keyword arguments that are plain values."""
    precision: str
    """Training precision: ``"bf16-mixed"``, ``"16-mixed"`` or ``"32-true"``."""
    eval_precision: str | None
    """``"bf16-true"`` / ``"16-true"`` with ``bf16_full_eval`` / ``fp16_full_eval``, else ``None``."""
    eval_dtype: torch.dtype | None
    """The dtype the evaluation loop casts the model to, or ``None`` to evaluate as trained."""
    distributed: DistributedSettings
    logger_specs: tuple[LoggerSpec, ...]
    module: ModuleSettings
    data: DataSettings
    seed: int
    full_determinism: bool
    tf32: bool | None
    num_update_steps_per_epoch: int | None
    process_log_level: int
    """The level Lightning's own log lines must reach to show (``TrainingArguments.get_process_log_level``)."""
    enable_jit_checkpoint: bool
    """Whether the fit owns SIGTERM to save a checkpoint before exiting (``JITCheckpoint``)."""
    carriers: Mapping[str, str] = field(repr=False)
    """For each ``TrainingArguments`` field, the object that carries it (``docs/arguments.md``)."""
    arguments_set: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """``(name, repr(value))`` of every argument that differs from its default, in field order."""

    @cached_property
    def strategy(self) -> Any:
        """``"auto"``, a ``DDPStrategy`` (``ddp_*``) or FSDP's strategy (``fsdp``/``fsdp_config``)."""
        return build_strategy(self.distributed)

    @cached_property
    def loggers(self) -> tuple[Any, ...]:
        """The Lightning loggers named by ``report_to``."""
        return tuple(spec.build() for spec in self.logger_specs)

    @property
    def plugins(self) -> tuple[Any, ...]:
        """Extra ``lightning.Trainer`` plugins: torchrun's cluster environment inside a SLURM allocation."""
        return cluster_plugins(self.distributed)

    @cached_property
    def trainer_kwargs(self) -> Mapping[str, Any]:
        """Keyword arguments for ``lightning.Trainer``; add your ``callbacks``."""
        return MappingProxyType(
            {
                **self.trainer_settings,
                "strategy": self.strategy,
                "logger": list(self.loggers) or False,
                "plugins": list(self.plugins) or None,
            }
        )

    def describe(self) -> str:
        """A readable account of the plan: Lightning arguments, strategy, loggers and groups."""
        settings = "\n".join(f"    {key}={value!r}," for key, value in self.trainer_settings.items())
        loggers = ", ".join(spec.describe() for spec in self.logger_specs) or "none (report_to='none')"
        evaluation = (
            f"{self.eval_precision} (model cast to {self.eval_dtype})"
            if self.eval_precision
            else "as trained"
        )
        return "\n".join(
            [
                "LightningPlan",
                f"  lightning.Trainer(\n{settings}\n  )",
                f"  strategy: {self.distributed.describe()}",
                f"  loggers: {loggers}",
                f"  evaluation precision: {evaluation}",
                f"  HFModule: {_describe_group(self.module)}",
                f"  data: {_describe_group(self.data)}",
                f"  seed={self.seed}, full_determinism={self.full_determinism}, tf32={self.tf32}",
                "  arguments set -> carrier:" + ("" if self.arguments_set else " none (all defaults)"),
                *(
                    f"    {name}={value} -> {self.carriers.get(name, 'not read by hf_lightning')}"
                    for name, value in self.arguments_set
                ),
            ]
        )

    def __str__(self) -> str:
        return self.describe()


def _describe_group(group: Any) -> str:
    text = ", ".join(f"{f.name}={getattr(group, f.name)!r}" for f in fields(group))
    return textwrap.fill(text, width=106, subsequent_indent="    ", break_long_words=False)


def _duration(args: Any, steps_per_epoch: int | None) -> tuple[int, int]:
    """``(max_steps, max_epochs)`` for Lightning, with transformers' arithmetic."""
    if args.max_steps > 0:
        return int(args.max_steps), -1
    epochs = float(args.num_train_epochs)
    if steps_per_epoch is not None:
        return math.ceil(epochs * steps_per_epoch), math.ceil(epochs)
    if epochs != int(epochs):
        raise ValueError(
            f"`TrainingArguments(num_train_epochs={args.num_train_epochs})` is fractional: pass "
            "`to_lightning(args, num_update_steps_per_epoch=...)` so training can stop partway "
            "through the last epoch, or set `max_steps`"
        )
    return -1, int(epochs)


def _log_every_n_steps(args: Any, max_steps: int) -> int | None:
    """``logging_steps`` when logging by steps; a ratio needs the total number of steps."""
    if enum_value(args.logging_strategy) != "steps":
        return None
    steps = args.logging_steps
    if steps >= 1:
        return int(steps)
    if steps > 0 and max_steps > 0:
        return max(1, math.ceil(max_steps * steps))
    return None


def _trainer_settings(
    args: Any, distributed: DistributedSettings, precision: str, steps_per_epoch: int | None
) -> dict[str, Any]:
    max_steps, max_epochs = _duration(args, steps_per_epoch)
    return {
        "accelerator": distributed.accelerator,
        "devices": distributed.devices,
        "num_nodes": distributed.num_nodes,
        "precision": precision,
        "max_steps": max_steps,
        "max_epochs": max_epochs,
        "deterministic": True if args.full_determinism else None,
        "benchmark": False if args.full_determinism else None,
        "enable_progress_bar": not bool(args.disable_tqdm),
        "log_every_n_steps": _log_every_n_steps(args, max_steps),
        "enable_checkpointing": False,
        "use_distributed_sampler": False,
        "num_sanity_val_steps": 0,
        "accumulate_grad_batches": 1,
        "gradient_clip_val": None,
        "default_root_dir": args.output_dir,
        "enable_model_summary": False,
    }


def to_lightning(
    args: Any,
    *,
    env: Mapping[str, str] | None = None,
    num_update_steps_per_epoch: int | None = None,
    cuda_available: bool = False,
    by_trainer: bool = False,
) -> LightningPlan:
    """Translate ``args`` (a ``TrainingArguments``) into a :class:`LightningPlan`.

    Args:
        args: the training arguments.
        env: the launcher's environment (``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, tracker variables such
            as ``TENSORBOARD_LOGGING_DIR``); pass ``os.environ`` to use the process's own. Default: empty.
        num_update_steps_per_epoch: optimizer updates in one epoch, when the training data has a
            length; turns ``num_train_epochs`` into ``max_steps`` (needed when it is fractional).
        cuda_available: pass ``torch.cuda.is_available()`` to train on CUDA.
        by_trainer: the plan is ``hf_lightning.Trainer``'s, whose DataLoaders and accelerator carry the
            Trainer-only arguments (``accelerator_config``); a Lightning user's plan refuses them.

    Raises:
        NotImplementedError: ``args`` sets arguments that hf_lightning does not carry yet (all named).
        ValueError: an argument (or launcher variable) has a value that cannot be honoured.
        ImportError: ``report_to`` names a tracker whose package is not installed.
    """
    check_supported(args, by_trainer=by_trainer)
    if num_update_steps_per_epoch is not None and (
        isinstance(num_update_steps_per_epoch, bool)
        or not isinstance(num_update_steps_per_epoch, int)
        or num_update_steps_per_epoch < 1
    ):
        raise ValueError(
            f"`to_lightning(num_update_steps_per_epoch={num_update_steps_per_epoch!r})` must be a positive int"
        )
    env = {} if env is None else dict(env)
    distributed = distributed_settings(args, env, cuda_available=cuda_available)
    precision, eval_precision, eval_dtype = precisions(args, cpu=distributed.on_cpu)
    settings = _trainer_settings(args, distributed, precision, num_update_steps_per_epoch)
    return LightningPlan(
        trainer_settings=MappingProxyType(settings),
        precision=precision,
        eval_precision=eval_precision,
        eval_dtype=eval_dtype,
        distributed=distributed,
        logger_specs=logger_specs(tracker_settings(args), env),
        module=module_settings(args),
        data=data_settings(args, cuda_available=cuda_available),
        seed=int(args.seed),
        full_determinism=bool(args.full_determinism),
        tf32=args.tf32,
        num_update_steps_per_epoch=num_update_steps_per_epoch,
        process_log_level=int(args.get_process_log_level()),
        enable_jit_checkpoint=bool(args.enable_jit_checkpoint),
        carriers=carriers_for(args),
        arguments_set=tuple((name, repr(getattr(args, name))) for name in non_default_fields(args)),
    )
