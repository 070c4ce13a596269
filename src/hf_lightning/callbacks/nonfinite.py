"""Non-finite losses and weights: warn once, never checkpoint NaN weights, and (opt-in) stop at the first.

transformers keeps training after a NaN or infinite loss: with ``logging_nan_inf_filter=True`` (the
default) the logged loss hides it, the weights turn NaN from that step on, and the NaN checkpoints then
rotate the good ones out. Here (``docs/divergences.md``):

- :func:`observe_loss` warns once per run at the first non-finite training loss, with its step and value;
- :func:`observe_step` warns once per run at the first optimizer step that leaves a non-finite weight;
- :func:`refuse_nonfinite_checkpoint` tells the Trainer not to write a checkpoint whose weights are not
  finite, so the newest checkpoint on disk is always a finite one and rotation never deletes it for a
  NaN one;
- :func:`warn_nonfinite_save`: ``save_model()`` writes what it is asked to, but warns, naming the
  non-finite tensors and the weights it replaces in that folder (transformers writes them silently);
- :class:`StopOnNonFinite`, a ``TrainerCallback`` passed in ``callbacks=[...]``, raises
  :class:`NonFiniteError` at the first non-finite loss (before that step's optimizer update) or weight.

"Step k" is the k-th optimizer step, the one after which ``state.global_step == k``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from hf_lightning.callbacks.api import TrainerCallback
from hf_lightning.checkpoint.weights import WEIGHT_FILE_NAMES
from hf_lightning.utils.logging import get_logger

__all__ = [
    "NonFiniteError",
    "NonFiniteRecord",
    "StopOnNonFinite",
    "first_nonfinite_parameter",
    "observe_loss",
    "observe_step",
    "nonfinite_tensors",
    "refuse_nonfinite_checkpoint",
    "warn_nonfinite_save",
]

logger = get_logger(__name__)


class NonFiniteError(FloatingPointError):
    """Training met a NaN or infinite loss or weight; ``step`` is the optimizer step (1-based) it happened in."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


def _finite_probe(param: torch.Tensor) -> torch.Tensor:
    """The sum of ``param`` (accumulated in float32, or float64 for float64), as a float64 scalar."""
    if param.element_size() < 2:  # float8 has no sum kernel: the element-wise test, as 0 or NaN
        finite = torch.isfinite(param).all()
        return torch.where(finite, 0.0, float("nan")).to(torch.float64)
    wide = torch.float64 if param.dtype == torch.float64 else torch.float32
    return param.sum(dtype=wide).to(torch.float64)


def first_nonfinite_parameter(model: torch.nn.Module) -> str | None:
    """The name of the first parameter holding a NaN or ±inf, or ``None`` when all are finite."""
    by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
    for name, param in model.named_parameters():
        if param.is_floating_point() and param.numel():
            by_device.setdefault(param.device, []).append((name, param.detach()))
    bad: list[str] = []
    for named in by_device.values():  # one sum per parameter, one host sync per device
        # a NaN or ±inf element makes the sum NaN or ±inf; a finite sum proves every element finite. A sum
        # that overflowed from finite elements is checked element by element (the exact, slower test).
        sums = torch.stack([_finite_probe(p) for _, p in named]).cpu()
        if bool(torch.isfinite(sums).all()):
            continue
        first = next((name for name, p in named if not bool(torch.isfinite(p).all())), None)
        if first is not None:
            bad.append(first)
    return bad[0] if bad else None


class NonFiniteRecord:
    """What has been reported in one training run; the Trainer's training run owns one per ``train()``."""

    def __init__(self) -> None:
        self.loss_warned = False
        self.weights_warned = False
        self.window_nonfinite = False


def _distributed() -> bool:
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and (torch.distributed.get_world_size() > 1)
    )


def _stoppers(trainer: Any) -> list[StopOnNonFinite]:
    return [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, StopOnNonFinite)]


def observe_loss(record: NonFiniteRecord, trainer: Any, loss: torch.Tensor | float) -> None:
    """Called with each micro-batch's training loss (a tensor, or its value already read): warn at the run's
    first non-finite one, tell the stoppers."""
    value = loss if isinstance(loss, float) else float(loss.detach().float().sum())
    if math.isfinite(value):
        return
    step = trainer.state.global_step + 1
    record.window_nonfinite = True
    if not record.loss_warned:
        record.loss_warned = True
        hidden = trainer.args.logging_nan_inf_filter
        logger.warning(
            "Step %d: the training loss is %s. %s The weights are likely non-finite after this step; "
            "checkpoints with non-finite weights are not written. Pass `callbacks=[StopOnNonFinite()]` "
            "to stop training here instead.",
            step,
            value,
            "`logging_nan_inf_filter=True` leaves it out of the logged loss, which therefore looks normal."
            if hidden
            else "It is logged as is (`logging_nan_inf_filter=False`).",
        )
    for stopper in _stoppers(trainer):
        stopper.nonfinite_loss(step, value)


def observe_step(record: NonFiniteRecord, trainer: Any, grad_norm: float | None) -> None:
    """Called after each optimizer step: when the step saw a non-finite loss or gradient norm, check the
    weights and warn at the run's first non-finite one."""
    suspicious = record.window_nonfinite or (grad_norm is not None and not math.isfinite(float(grad_norm)))
    record.window_nonfinite = False
    if not suspicious or record.weights_warned:
        return
    name = first_nonfinite_parameter(trainer.model)
    if name is not None:
        _warn_weights(record, trainer.state.global_step, name)


def _warn_weights(record: NonFiniteRecord, step: int, name: str) -> None:
    record.weights_warned = True
    logger.warning(
        "Step %d: the model's weights are no longer finite (first: `%s`); every later step and evaluation "
        "computes NaN, and no checkpoint is written from here on.",
        step,
        name,
    )


def refuse_nonfinite_checkpoint(record: NonFiniteRecord, trainer: Any, folder: str) -> bool:
    """True (and a warning naming ``folder``) when the model's weights are not finite: do not write it."""
    name = first_nonfinite_parameter(trainer.model)
    if name is None:
        return False
    if not record.weights_warned:
        _warn_weights(record, trainer.state.global_step, name)
    logger.warning(
        "Not writing `%s`: the weights hold NaN or infinite values (first: `%s`). The checkpoints already "
        "written stay, and save_total_limit rotates none of them out for this one.",
        folder,
        name,
    )
    return True


def nonfinite_tensors(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors of ``tensors`` (a state dict) holding a NaN or ±inf."""
    named = [(name, t.detach()) for name, t in tensors.items() if t.is_floating_point() and t.numel()]
    if not named:
        return []
    flags = torch.stack([torch.isfinite(t).all().to("cpu") for _, t in named])
    return [named[i][0] for i in (~flags).nonzero().flatten().tolist()]


def warn_nonfinite_save(model: torch.nn.Module, folder: str, state_dict: Any = None) -> None:
    """``save_model(folder)``: warn when the weights about to be written hold NaN or infinite values,
    naming them, and saying that they replace the weights already in ``folder`` when it has some."""
    bad = nonfinite_tensors(state_dict if state_dict is not None else model.state_dict())
    if not bad:
        return
    shown = ", ".join(f"`{name}`" for name in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    present = [name for name in WEIGHT_FILE_NAMES if os.path.isfile(os.path.join(folder, name))]
    logger.warning(
        "save_model: the weights written to `%s` hold NaN or infinite values (%s)%s.",
        folder,
        shown,
        f"; they replace the weights that were in that folder ({', '.join(present)})" if present else "",
    )


class StopOnNonFinite(TrainerCallback):
    """Stop training with :class:`NonFiniteError` at the first NaN or infinite training loss or weight.

    A non-finite loss stops the run inside its step, before the optimizer update, so the weights and the
    checkpoints on disk stay finite. ``check_weights`` (default True) also checks every parameter after
    each optimizer step (one reduction per parameter), which catches an infinite gradient with a finite
    loss.
    """

    def __init__(self, check_weights: bool = True) -> None:
        self.check_weights = check_weights
        self._pending: tuple[int, float] | None = None

    def nonfinite_loss(self, step: int, value: float) -> None:
        """Raise :class:`NonFiniteError` for the loss ``value`` met in optimizer step ``step``.

        With several processes the loss is one process's own, so raising here could leave the others
        waiting in the gradient all-reduce: the error is raised at the end of the step instead, where
        every process checks its (all-reduced, hence equally non-finite) weights.
        """
        if _distributed():
            self._pending = (step, value)
            return
        raise NonFiniteError(
            f"StopOnNonFinite: the training loss is {value} at step {step}; training stops before this "
            f"step's optimizer update (the weights and checkpoints of step {step - 1} are finite).",
            step,
        )

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            raise NonFiniteError(
                f"StopOnNonFinite: the training loss is {pending[1]} at step {pending[0]}; training stops "
                "before this step is checkpointed.",
                pending[0],
            )
        if not self.check_weights or model is None:
            return
        name = first_nonfinite_parameter(model)
        if name is not None:
            raise NonFiniteError(
                f"StopOnNonFinite: the weights are not finite after step {state.global_step} "
                f"(first: `{name}`); training stops before this step is checkpointed.",
                state.global_step,
            )
