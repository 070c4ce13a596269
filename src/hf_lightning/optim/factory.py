"""The optimizer factory of a plan: ``create_optimizer(model, args)`` as a callable of the model alone.

The engine builds the optimizer when it is given none (``HFModule.configure_optimizers``), but it never reads
the arguments: the plan hands it this factory, made from the arguments when the plan was built::

    factory = OptimizerFactory(TrainingArguments(output_dir="out", optim="adafactor"))
    optimizer = factory(model)          # the same optimizer as Trainer.create_optimizer's
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["OptimizerFactory"]


@dataclass(frozen=True)
class OptimizerFactory:
    """Builds transformers' optimizer (``args.optim``, two weight-decay groups) over a model's parameters."""

    args: Any
    """The ``TrainingArguments`` the plan was built from."""
    optimizer_cls_and_kwargs: tuple[Any, dict[str, Any]] | None = None
    """The ``Trainer(optimizer_cls_and_kwargs=...)`` argument, replacing ``args.optim``'s class and kwargs."""
    owner: Any = None
    """The Trainer whose ``get_decay_parameter_names`` and ``get_optimizer_cls_and_kwargs`` choose the groups
    and the class (a subclass's overrides apply, as in transformers' ``create_optimizer``); None: the rules
    of ``args`` alone."""

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        from hf_lightning.optim.optimizers import create_optimizer

        owner = self.owner
        if owner is None:
            return create_optimizer(model, self.args, self.optimizer_cls_and_kwargs)
        return create_optimizer(
            model,
            self.args,
            self.optimizer_cls_and_kwargs,
            decay_parameter_names=owner.get_decay_parameter_names,
            cls_and_kwargs=owner.get_optimizer_cls_and_kwargs,
        )

    def __repr__(self) -> str:  # the arguments themselves are printed by the plan's other groups
        given = "optimizer_cls_and_kwargs" if self.optimizer_cls_and_kwargs is not None else "args.optim"
        return f"OptimizerFactory(from {given})"
