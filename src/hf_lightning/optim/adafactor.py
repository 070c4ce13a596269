"""Adafactor (Shazeer & Stern, 2018, https://arxiv.org/abs/1804.04235) in plain torch.

The update, the defaults and the argument checks match ``transformers.optimization.Adafactor`` (the
fairseq formulation), so ``optim="adafactor"`` trains the same numbers here as in transformers;
``tests/parity/test_optimizers_parity.py`` compares them step by step.

One step for a parameter ``p`` with gradient ``g`` (``t`` counts steps):

- ``beta2_t = 1 - t ** decay_rate``; the second moment of ``g**2 + eps[0]`` is kept factored (row and
  column means) for tensors with two or more dimensions, whole otherwise;
- ``u = g / sqrt(second moment)``, divided by ``max(1, rms(u) / clip_threshold)``;
- the step size is ``lr``, or with ``relative_step`` ``min(1e-2 or 1e-6 t, 1 / sqrt(t))``, times
  ``max(eps[1], rms(p))`` with ``scale_parameter``;
- ``beta1`` (optional) smooths the scaled update; ``weight_decay`` shrinks ``p`` by ``lr * weight_decay``.

fp16/bf16 parameters and gradients are updated in fp32 and written back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, cast, overload

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

__all__ = ["Adafactor", "AdafactorSchedule", "get_adafactor_schedule"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _rms(tensor: torch.Tensor) -> torch.Tensor:
    """Root mean square of all entries."""
    return tensor.norm(2) / (tensor.numel() ** 0.5)


def _factored_inverse_sqrt(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """``1 / sqrt(v)`` for the rank-1 estimate ``v = row col^T / mean(row)``."""
    row_part = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
    col_part = col.unsqueeze(-2).rsqrt()
    return torch.mul(row_part, col_part)


class Adafactor(Optimizer):
    """Adafactor with transformers' arguments and defaults.

    Args:
        params: parameters or parameter groups.
        lr: external learning rate; must be None when ``relative_step=True``.
        eps: (added to squared gradients, floor of the parameter scale).
        clip_threshold: bound on the RMS of the unscaled update.
        decay_rate: exponent of the second-moment decay ``1 - t ** decay_rate``.
        beta1: first-moment coefficient; None keeps no first moment.
        weight_decay: decoupled decay, multiplied by the step size.
        scale_parameter: scale the step by the parameter's RMS.
        relative_step: compute the step size from the step count instead of ``lr``.
        warmup_init: with ``relative_step``, grow the step size as ``1e-6 * t``.

    For an external schedule use ``scale_parameter=False, relative_step=False`` and an ``lr`` (what
    ``TrainingArguments(optim="adafactor")`` does).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float | None = None,
        eps: tuple[float, float] = (1e-30, 1e-3),
        clip_threshold: float = 1.0,
        decay_rate: float = -0.8,
        beta1: float | None = None,
        weight_decay: float = 0.0,
        scale_parameter: bool = True,
        relative_step: bool = True,
        warmup_init: bool = False,
    ) -> None:
        if lr is not None and relative_step:
            raise ValueError(
                f"`Adafactor(lr={lr}, relative_step=True)`: a manual lr needs relative_step=False"
            )
        if warmup_init and not relative_step:
            raise ValueError("`Adafactor(warmup_init=True)` needs relative_step=True")
        defaults = {
            "lr": lr,
            "eps": eps,
            "clip_threshold": clip_threshold,
            "decay_rate": decay_rate,
            "beta1": beta1,
            "weight_decay": weight_decay,
            "scale_parameter": scale_parameter,
            "relative_step": relative_step,
            "warmup_init": warmup_init,
        }
        super().__init__(params, defaults)

    @staticmethod
    def _get_lr(group: dict[str, Any], state: dict[str, Any]) -> float | torch.Tensor:
        """Step size of one parameter: relative or external, optionally scaled by its RMS."""
        step_size = group["lr"]
        if group["relative_step"]:
            ceiling = 1e-6 * state["step"] if group["warmup_init"] else 1e-2
            step_size = min(ceiling, 1.0 / math.sqrt(state["step"]))
        scale = max(group["eps"][1], state["RMS"]) if group["scale_parameter"] else 1.0
        return scale * step_size

    @staticmethod
    def _init_state(state: dict[str, Any], grad: torch.Tensor, factored: bool, first_moment: bool) -> None:
        """Create the moments on the first step, or move loaded ones to the gradient's device and dtype."""
        shape = grad.shape
        if not state:
            state["step"] = 0
            if first_moment:
                state["exp_avg"] = torch.zeros_like(grad)
            if factored:
                state["exp_avg_sq_row"] = torch.zeros(shape[:-1]).to(grad)
                state["exp_avg_sq_col"] = torch.zeros(shape[:-2] + shape[-1:]).to(grad)
            else:
                state["exp_avg_sq"] = torch.zeros_like(grad)
            state["RMS"] = 0
            return
        for key in ("exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq"):
            if key in state:
                state[key] = state[key].to(grad)

    @staticmethod
    def _normalised_update(group: dict[str, Any], state: dict[str, Any], grad: torch.Tensor) -> torch.Tensor:
        """Update the second moment and return the clipped ``g / sqrt(v)``."""
        beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
        squared = grad**2 + group["eps"][0]
        if "exp_avg_sq_row" in state:
            row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
            row.mul_(beta2t).add_(squared.mean(dim=-1), alpha=1.0 - beta2t)
            col.mul_(beta2t).add_(squared.mean(dim=-2), alpha=1.0 - beta2t)
            update = _factored_inverse_sqrt(row, col).mul_(grad)
        else:
            second = state["exp_avg_sq"]
            second.mul_(beta2t).add_(squared, alpha=1.0 - beta2t)
            update = second.rsqrt().mul_(grad)
        return update.div_((_rms(update) / group["clip_threshold"]).clamp_(min=1.0))

    def _update_param(self, group: dict[str, Any], p: torch.Tensor) -> None:
        grad = cast(torch.Tensor, p.grad)  # only called for parameters that have a gradient
        if grad.is_sparse:
            raise RuntimeError("Adafactor does not support sparse gradients.")
        if grad.dtype in _LOW_PRECISION:
            grad = grad.float()
        state = self.state[p]
        self._init_state(state, grad, factored=grad.dim() >= 2, first_moment=group["beta1"] is not None)
        master = p.float() if p.dtype in _LOW_PRECISION else p
        state["step"] += 1
        state["RMS"] = _rms(master)
        lr = self._get_lr(group, state)
        update = self._normalised_update(group, state, grad).mul_(lr)
        if group["beta1"] is not None:
            update = state["exp_avg"].mul_(group["beta1"]).add_(update, alpha=1 - group["beta1"])
        if group["weight_decay"] != 0:
            master.add_(master, alpha=-group["weight_decay"] * lr)
        master.add_(-update)
        if p.dtype in _LOW_PRECISION:
            p.copy_(master)

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Apply one update to every parameter that has a gradient; returns ``closure()`` if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update_param(group, p)
        return loss


class AdafactorSchedule(LambdaLR):
    """A stand-in scheduler that reports Adafactor's own step sizes (for logging ``learning_rate``).

    Before the first step it reports ``initial_lr``; afterwards, for each group whose first parameter
    has a gradient, the step size Adafactor used.
    """

    def __init__(self, optimizer: Adafactor, initial_lr: float = 0.0) -> None:
        for group in optimizer.param_groups:
            group["initial_lr"] = initial_lr
        super().__init__(optimizer, lambda _: initial_lr)
        for group in optimizer.param_groups:
            del group["initial_lr"]

    def get_lr(self) -> list[float | torch.Tensor]:
        opt = cast(Adafactor, self.optimizer)
        lrs = [
            opt._get_lr(group, opt.state[group["params"][0]])
            for group in opt.param_groups
            if group["params"][0].grad is not None
        ]
        return lrs or list(self.base_lrs)


def get_adafactor_schedule(optimizer: Adafactor, initial_lr: float = 0.0) -> AdafactorSchedule:
    """:class:`AdafactorSchedule` for ``optimizer``."""
    return AdafactorSchedule(optimizer, initial_lr)
