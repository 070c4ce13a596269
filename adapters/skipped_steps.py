"""Which updates the fp16 gradient scaler skipped, as accelerate tells transformers' Trainer.

With a ``GradScaler`` (``fp16=True`` on a GPU) an update whose gradients hold inf/NaN is skipped: the scaler
does not call the wrapped optimizer's ``step`` and lowers its scale. accelerate finds this out by watching
that call (``AcceleratedOptimizer.step_was_skipped``), and transformers then leaves the learning-rate
schedule where it was. Here the same watch runs around Lightning's optimizer step.
"""

from __future__ import annotations

from typing import Any

__all__ = ["step_reporting_skip", "unscale_for_clipping"]


def step_reporting_skip(trainer: Any, optimizer: Any) -> bool:
    """``optimizer.step()`` (a ``LightningOptimizer``) under Lightning ``trainer``; True when the precision
    plugin's gradient scaler skipped it. The answer is kept on the scaler, where
    ``trainer.accelerator.optimizer_step_was_skipped`` reads it."""
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    if scaler is None:
        optimizer.step()
        return False
    raw = getattr(optimizer, "optimizer", optimizer)
    own = raw.__dict__.get("step")  # an instance-level step (a wrapper's) is put back afterwards
    inner = raw.step
    ran: list[bool] = []

    def step(*args: Any, **kwargs: Any) -> Any:
        ran.append(True)
        return inner(*args, **kwargs)

    raw.step = step
    try:
        optimizer.step()
    finally:
        if own is None:
            del raw.step
        else:
            raw.step = own
    scaler._hf_step_skipped = not ran
    return not ran


def unscale_for_clipping(trainer: Any, optimizer: Any) -> None:
    """Unscale the gradients before they are clipped, unless the precision plugin already did.

    Lightning unscales before ``on_before_optimizer_step`` except for an optimizer that unscales inside its
    own ``step`` (a fused AdamW, transformers' default ``optim``); clipping those scaled gradients would cut
    them by the loss scale. accelerate unscales before clipping in every case; so does this. The scaler's
    ``step`` then hands the fused optimizer the inf check only, as under accelerate.
    """
    scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
    if scaler is None or not scaler.is_enabled():
        return
    from torch.amp.grad_scaler import OptState

    raw = getattr(optimizer, "optimizer", optimizer)
    state = scaler._per_optimizer_states[id(raw)]
    if state["stage"] is OptState.READY:
        scaler.unscale_(raw)
