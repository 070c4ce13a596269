"""The Trainer's optimizer and scheduler methods, with transformers' signatures."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hf_lightning import optim as _optim
from hf_lightning.trainer.base import TrainerBase

__all__ = ["TrainerOptimMixin"]


class TrainerOptimMixin(TrainerBase):
    """``create_optimizer``, ``create_scheduler`` and the helpers around them."""

    def create_optimizer_and_scheduler(self, num_training_steps: int) -> None:
        """Create the optimizer and the scheduler unless the user passed them (``optimizers=``)."""
        self.create_optimizer()
        self.create_scheduler(num_training_steps=num_training_steps, optimizer=self.optimizer)

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """The optimizer of ``args.optim`` over two groups: with and without weight decay."""
        if self.optimizer is None:
            target = model if model is not None else self.model
            self.optimizer = _optim.create_optimizer(target, self.args, self.optimizer_cls_and_kwargs)
        return self.optimizer

    def create_scheduler(
        self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None
    ) -> Any:
        """The scheduler of ``args.lr_scheduler_type`` for ``num_training_steps`` optimizer steps."""
        if self.lr_scheduler is None:
            self.lr_scheduler = _optim.get_scheduler(
                self.args.lr_scheduler_type,
                optimizer=self.optimizer if optimizer is None else optimizer,
                num_warmup_steps=self.args.get_warmup_steps(num_training_steps),
                num_training_steps=num_training_steps,
                scheduler_specific_kwargs=self.args.lr_scheduler_kwargs or {},
            )
            self._created_lr_scheduler = True
        return self.lr_scheduler

    @staticmethod
    def get_optimizer_cls_and_kwargs(args: Any, model: nn.Module | None = None) -> tuple[Any, dict[str, Any]]:
        """The optimizer class and its keyword arguments for ``args.optim`` and ``args.optim_args``."""
        return _optim.get_optimizer_cls_and_kwargs(args, model)

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        """Names of the parameters that get weight decay (not biases, not normalisation weights)."""
        return _optim.get_decay_parameter_names(model)

    def get_learning_rates(self) -> list[float]:
        """The learning rate of each parameter group."""
        if self.optimizer is None:
            raise ValueError(
                "Trainer optimizer is None, please make sure you have setup the optimizer before."
            )
        return [group["lr"] for group in self.optimizer.param_groups]

    def get_optimizer_group(self, param: str | torch.nn.Parameter | None = None) -> Any:
        """The parameter group holding ``param``, or every group's parameters when None."""
        if self.optimizer is None:
            raise ValueError(
                "Trainer optimizer is None, please make sure you have setup the optimizer before."
            )
        if param is not None:
            for group in self.optimizer.param_groups:
                if any(p is param for p in group["params"]):
                    return group
        return [group["params"] for group in self.optimizer.param_groups]

    def get_num_trainable_parameters(self) -> int:
        """The number of parameters that require gradients."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)
