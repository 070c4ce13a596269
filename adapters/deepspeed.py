"""``deepspeed`` → Lightning's ``DeepSpeedStrategy``, from the plan's :class:`DeepSpeedSettings`.

The ``"auto"`` values are filled as transformers fills them by the plan's builder
(``hf_lightning.args.deepspeed_config``, re-exported here); this module shapes the filled configuration for
Lightning and builds the strategy. Only :func:`build_deepspeed_strategy` imports ``deepspeed`` (through
Lightning), and names ``pip install "hf-lightning[deepspeed]"`` when it is missing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from hf_lightning.args.deepspeed_config import (
    DeepSpeedSettings,
    deepspeed_settings,
    fill_deepspeed_config,
    load_deepspeed_config,
    zero_stage,
)

__all__ = [
    "DeepSpeedSettings",
    "build_deepspeed_strategy",
    "deepspeed_settings",
    "engine_config",
    "fill_deepspeed_config",
    "for_lightning",
    "load_deepspeed_config",
    "zero_stage",
]


def engine_config(settings: DeepSpeedSettings, *, model: Any, num_training_steps: int) -> dict[str, Any]:
    """The configuration handed to DeepSpeed for a ``Trainer`` run: filled, then shaped for Lightning.

    The Trainer's optimizer and scheduler train (``zero_allow_untested_optimizer``, as transformers sets
    it for a client optimizer); an ``optimizer``/``scheduler`` section was built into them by the Trainer
    (``adapters/deepspeed_sections.py``), so it is not passed on. The Trainer's accumulation windows accumulate: Lightning's strategy sets
    DeepSpeed's ``gradient_accumulation_steps`` from its own ``accumulate_grad_batches`` (1), so the
    checked ``gradient_accumulation_steps`` and ``train_batch_size`` are not passed on.
    """
    config = settings.filled(model, num_training_steps)
    config.setdefault("gradient_clipping", 1.0)  # as transformers' Accelerate sets it when the key is absent
    return for_lightning(config)


def for_lightning(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as Lightning's ``DeepSpeedStrategy`` accepts it: no ``gradient_accumulation_steps`` or
    ``train_batch_size`` (Lightning derives them from ``accumulate_grad_batches``), the module's own
    optimizer allowed, and an ``"auto"`` still unfilled (it needs the model: ``plan.strategy`` is built
    without one) left to DeepSpeed's default. The ``optimizer``/``scheduler`` sections are not passed on:
    the module builds them (``DeepSpeedModule``, ``adapters/deepspeed_sections.py``)."""
    config = _without_auto(copy.deepcopy(dict(config)))
    config.pop("gradient_accumulation_steps", None)
    config.pop("train_batch_size", None)
    config["zero_allow_untested_optimizer"] = True
    if (
        config.pop("optimizer", None) is not None
    ):  # built by the module from the section: deepspeed_sections.py
        config["zero_force_ds_cpu_optimizer"] = False  # ZeRO-Offload steps that torch optimizer on the CPU
    config.pop("scheduler", None)
    if (config.get("checkpoint") or {}).get("load_universal"):
        raise NotImplementedError(
            "`TrainingArguments(deepspeed=...)` with `checkpoint.load_universal` is not supported by hf_lightning: "
            "DeepSpeed reads universal checkpoints with a full unpickler; remove the key"
        )
    return config


def _without_auto(node: dict[str, Any]) -> dict[str, Any]:
    return {
        key: _without_auto(value) if isinstance(value, dict) else value
        for key, value in node.items()
        if value != "auto"
    }


def _skip_shared_memory_op() -> None:
    """On CPU DeepSpeed compiles an optional shared-memory all-reduce (g++, ~80 s) at start-up; gloo
    serves without it."""
    import importlib

    module: Any = importlib.import_module("deepspeed.comm.torch")
    module.build_shm_op = lambda: None


def build_deepspeed_strategy(
    config: Mapping[str, Any], backend: str | None, *, cpu: bool = False, devices: int = 1
) -> Any:
    """Lightning's ``DeepSpeedStrategy`` for a filled ``config``; ``ImportError`` naming the extra.

    On CPU (DeepSpeed's CPU accelerator, gloo) the strategy is Lightning's with its CUDA-only check
    skipped and numbered CPU devices (DeepSpeed reads the device index as the local rank).
    """
    try:
        import deepspeed  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            '`TrainingArguments(deepspeed=...)` needs DeepSpeed: pip install "hf-lightning[deepspeed]"'
        ) from exc
    from lightning.pytorch.strategies import DeepSpeedStrategy

    config = for_lightning(config)
    if not cpu:
        return DeepSpeedStrategy(config=config, process_group_backend=backend)
    import torch

    _skip_shared_memory_op()

    class CPUDeepSpeedStrategy(DeepSpeedStrategy):
        """``DeepSpeedStrategy`` on DeepSpeed's CPU accelerator."""

        def setup_environment(self) -> None:
            super(DeepSpeedStrategy, self).setup_environment()  # all but the CUDAAccelerator check

    return CPUDeepSpeedStrategy(
        config=config,
        process_group_backend=backend or "gloo",
        parallel_devices=[torch.device("cpu", index) for index in range(devices)],
    )
