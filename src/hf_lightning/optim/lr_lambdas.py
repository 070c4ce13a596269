"""Learning-rate multipliers as pure functions of the optimizer step.

Each function maps ``current_step`` (the number of optimizer updates done so far) to the factor that
``torch.optim.lr_scheduler.LambdaLR`` multiplies the initial learning rate by. They are module-level
functions so that the ``functools.partial`` objects built from them pickle, which keeps
``scheduler.pt`` files interchangeable with the ones transformers writes.

The numbers follow transformers 5.24 (``transformers/optimization.py``) step for step; the parity
tests in ``tests/parity/test_schedulers_parity.py`` hold them to 1e-7.
"""

from __future__ import annotations

import math

__all__ = [
    "WSD_SHAPES",
    "constant_lambda",
    "constant_with_warmup_lambda",
    "cosine_lambda",
    "cosine_warmup_with_min_lr_lambda",
    "cosine_with_hard_restarts_lambda",
    "inverse_sqrt_lambda",
    "linear_lambda",
    "polynomial_decay_lambda",
    "wsd_lambda",
]

WSD_SHAPES = ("linear", "cosine", "1-sqrt")
"""Curve shapes accepted for the warmup and the decay phase of ``warmup_stable_decay``."""


def _warmup(current_step: int, num_warmup_steps: int) -> float:
    """Linear ramp from 0 to 1 over ``num_warmup_steps``."""
    return float(current_step) / float(max(1, num_warmup_steps))


def _progress(current_step: int, num_warmup_steps: int, num_training_steps: int) -> float:
    """Fraction of the post-warmup phase already done (may exceed 1 after the last step)."""
    return float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))


def constant_lambda(_current_step: int | None = None) -> float:
    """Always 1: keep the optimizer's learning rate."""
    return 1


def constant_with_warmup_lambda(current_step: int, *, num_warmup_steps: int) -> float:
    """Linear warmup, then 1."""
    if current_step < num_warmup_steps:
        return _warmup(current_step, num_warmup_steps)
    return 1.0


def linear_lambda(current_step: int, *, num_warmup_steps: int, num_training_steps: int) -> float:
    """Linear warmup, then a straight line down to 0 at ``num_training_steps``."""
    if current_step < num_warmup_steps:
        return _warmup(current_step, num_warmup_steps)
    remaining = float(num_training_steps - current_step)
    return max(0.0, remaining / float(max(1, num_training_steps - num_warmup_steps)))


def cosine_lambda(
    current_step: int,
    *,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float,
    min_lr_rate: float = 0.0,
) -> float:
    """Linear warmup, then ``num_cycles`` cosine waves between 1 and ``min_lr_rate``."""
    if current_step < num_warmup_steps:
        return _warmup(current_step, num_warmup_steps)
    progress = _progress(current_step, num_warmup_steps, num_training_steps)
    wave = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    return max(0, wave * (1 - min_lr_rate) + min_lr_rate)


def cosine_with_hard_restarts_lambda(
    current_step: int, *, num_warmup_steps: int, num_training_steps: int, num_cycles: int
) -> float:
    """Linear warmup, then ``num_cycles`` half-cosines that each restart at 1; 0 after the end."""
    if current_step < num_warmup_steps:
        return _warmup(current_step, num_warmup_steps)
    progress = _progress(current_step, num_warmup_steps, num_training_steps)
    if progress >= 1.0:
        return 0.0
    phase = (float(num_cycles) * progress) % 1.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * phase)))


def polynomial_decay_lambda(
    current_step: int,
    *,
    num_warmup_steps: int,
    num_training_steps: int,
    lr_end: float,
    power: float,
    lr_init: float,
) -> float:
    """Linear warmup, then ``(lr_init - lr_end) * remaining**power + lr_end``, as a factor of ``lr_init``.

    When warmup and training end on the same step there is no decay phase; transformers divides by
    zero there, this returns the final factor ``lr_end / lr_init`` instead.
    """
    if current_step < num_warmup_steps:
        return _warmup(current_step, num_warmup_steps)
    decay_steps = num_training_steps - num_warmup_steps
    if current_step > num_training_steps or decay_steps == 0:
        return lr_end / lr_init
    remaining = 1 - (current_step - num_warmup_steps) / decay_steps
    return ((lr_init - lr_end) * remaining**power + lr_end) / lr_init


def inverse_sqrt_lambda(current_step: int, *, num_warmup_steps: int, timescale: int) -> float:
    """Linear warmup, then ``1 / sqrt((step + timescale - warmup) / timescale)``."""
    if current_step < num_warmup_steps:
        return _warmup(current_step, num_warmup_steps)
    shifted = current_step + (timescale - num_warmup_steps)
    return 1.0 / math.sqrt(shifted / timescale)


def cosine_warmup_with_min_lr_lambda(
    current_step: int,
    *,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float,
    min_lr_rate: float = 0.0,
    warmup_lr_rate: float | None = None,
) -> float:
    """Warmup that never starts at 0, then a cosine down to ``min_lr_rate`` that reaches it on the last step.

    Without ``warmup_lr_rate`` the warmup factor of step ``s`` is ``(s + 1) / warmup``; with it, the
    warmup is a line from ``warmup_lr_rate`` (step 0) to 1 (step ``warmup - 1``).
    """
    step, warmup, total = float(current_step), float(num_warmup_steps), float(num_training_steps)
    if step < warmup:
        if warmup_lr_rate is None:
            return (step + 1.0) / max(1.0, warmup)
        start = float(warmup_lr_rate)
        return start + (1.0 - start) * step / max(1, warmup - 1)
    progress = (step - warmup + 1.0) / max(1.0, total - warmup)
    wave = 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress))
    return max(0, wave * (1 - min_lr_rate) + min_lr_rate)


def _wsd_curve(shape: str, progress: float, rising: bool, num_cycles: float) -> float:
    """One warmup (``rising``) or decay curve of warmup-stable-decay, between 0 and 1."""
    if shape == "linear":
        return progress if rising else 1.0 - progress
    if shape == "cosine":
        if rising:
            return 0.5 * (1.0 - math.cos(math.pi * progress))
        return 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    return 1.0 - math.sqrt(1.0 - progress) if rising else 1.0 - math.sqrt(progress)


def wsd_lambda(
    current_step: int,
    *,
    num_warmup_steps: int,
    num_stable_steps: int,
    num_decay_steps: int,
    warmup_type: str,
    decay_type: str,
    min_lr_ratio: float,
    num_cycles: float,
) -> float:
    """Warmup from ``min_lr_ratio`` to 1, hold 1, decay back to ``min_lr_ratio``, then stay there."""
    if current_step < num_warmup_steps:
        progress = _warmup(current_step, num_warmup_steps)
        factor = _wsd_curve(warmup_type, progress, True, num_cycles)
        return max(0.0, factor * (1.0 - min_lr_ratio) + min_lr_ratio)
    stable_end = num_warmup_steps + num_stable_steps
    if current_step < stable_end:
        return 1.0
    if current_step < stable_end + num_decay_steps:
        progress = float(current_step - stable_end) / float(max(1, num_decay_steps))
        factor = _wsd_curve(decay_type, progress, False, num_cycles)
        return max(0.0, factor * (1.0 - min_lr_ratio) + min_lr_ratio)
    return min_lr_ratio
