"""``OptimizerSetup`` (``trainer.optim``): the optimizer and scheduler the Trainer's methods create.

``Trainer.create_optimizer`` / ``create_scheduler`` keep transformers' signatures (users override them)
and call this part, which builds from ``args.optim`` and ``args.lr_scheduler_type`` through
:mod:`hf_lightning.optim`, and remembers whether the scheduler is its own (a scheduler it created
for one ``train()`` is created again for the next one, sized to that run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hf_lightning import optim as _optim
from hf_lightning.args.deepspeed_config import trainer_deepspeed_settings
from hf_lightning.trainer.engine_door import ENGINE

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = ["OptimizerSetup"]


class OptimizerSetup:
    """Creates the optimizer and scheduler unless the user passed them; answers questions about them."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.created_lr_scheduler = False
        """Whether ``trainer.lr_scheduler`` was created here (not passed with ``optimizers=``)."""
        self.created_optimizer = False
        """Whether ``trainer.optimizer`` was created here (not passed with ``optimizers=``)."""

    def forget_created_scheduler(self) -> None:
        """Drop a scheduler created for an earlier ``train()``, so this run creates its own."""
        if self.created_lr_scheduler:
            self.trainer.lr_scheduler, self.created_lr_scheduler = None, False

    def forget_created_optimizer(self) -> None:
        """Under DeepSpeed, drop an optimizer created for an earlier ``train()`` or batch-size attempt: ZeRO
        replaced its groups with flat copies, so this run creates a fresh one (transformers' ``deepspeed_init``
        does the same at each start)."""
        if self.created_optimizer and trainer_deepspeed_settings(self.trainer.args) is not None:
            self.trainer.optimizer, self.created_optimizer = None, False

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """``Trainer.create_optimizer``: the optimizer of ``args.optim`` (two weight-decay groups), or of a
        DeepSpeed configuration's ``optimizer`` section."""
        t = self.trainer
        if t.optimizer is None:
            target = model if model is not None else t.model
            # a DeepSpeed `optimizer` section, as DeepSpeed builds it; else the plan's rule (args.optim)
            section = ENGINE.section_optimizer(trainer_deepspeed_settings(t.args), target)
            t.optimizer = section or _optim.OptimizerFactory(t.args, t.optimizer_cls_and_kwargs, owner=t)(
                target
            )
            self.created_optimizer = True
        return t.optimizer

    def create_scheduler(
        self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None
    ) -> Any:
        """``Trainer.create_scheduler``: the scheduler of ``args.lr_scheduler_type``, or DeepSpeed's of a
        configuration's ``scheduler`` section."""
        t = self.trainer
        if t.lr_scheduler is None:
            optimizer = t.optimizer if optimizer is None else optimizer
            deepspeed = trainer_deepspeed_settings(t.args)
            if deepspeed is not None and optimizer is not None:
                # DeepSpeed drops empty groups (a LoRA model's empty no-decay group) when it wraps the
                # optimizer; transformers builds the scheduler after that, on the groups that remain
                optimizer.param_groups[:] = [g for g in optimizer.param_groups if len(g["params"]) != 0]
            section = ENGINE.section_scheduler(deepspeed, optimizer, num_training_steps, t.model)
            t.lr_scheduler = section or (
                _optim.get_trainer_scheduler(  # a layer-wise optimizer: one group, as transformers
                    t.plan.module.lr_scheduler_type,
                    optimizer=optimizer,
                    num_warmup_steps=t.args.get_warmup_steps(num_training_steps),
                    num_training_steps=num_training_steps,
                    scheduler_specific_kwargs=dict(t.plan.module.lr_scheduler_kwargs),
                )
            )
            self.created_lr_scheduler = True
        return t.lr_scheduler

    def _optimizer(self) -> torch.optim.Optimizer:
        optimizer = self.trainer.optimizer
        if optimizer is None:
            raise ValueError(
                "Trainer optimizer is None, please make sure you have setup the optimizer before."
            )
        return optimizer

    def learning_rates(self) -> list[float]:
        """``Trainer.get_learning_rates``: the learning rate of each parameter group."""
        return [group["lr"] for group in self._optimizer().param_groups]

    def optimizer_group(self, param: str | torch.nn.Parameter | None = None) -> Any:
        """``Trainer.get_optimizer_group``: the group holding ``param``, or every group's parameters."""
        groups = self._optimizer().param_groups
        if param is not None:
            for group in groups:
                if any(p is param for p in group["params"]):
                    return group
        return [group["params"] for group in groups]

    def learning_rate(self) -> float:
        """``Trainer._get_learning_rate``: the scheduler's last rate, else the first group's."""
        return _optim.current_learning_rate(self.trainer.optimizer, self.trainer.lr_scheduler)
