"""``lr_scheduler_type="greedy"``: a learning rate that follows the metric both ways.

``GreedyLR`` (https://arxiv.org/abs/2512.14527) divides the learning rate by ``factor`` after more than
``patience`` improving steps in a row and multiplies it by ``factor`` after more than ``patience``
steps without improvement, between ``min_lr`` and ``max_lr``. After ``reset_start`` reductions that
found every group already at ``min_lr`` it starts over from the initial learning rates.

Like ``torch.optim.lr_scheduler.ReduceLROnPlateau`` it is stepped with a metric:
``scheduler.step(loss)``. Its ``state_dict`` uses transformers' keys, so a ``scheduler.pt`` written by
either library loads in the other.
"""

from __future__ import annotations

from typing import Any

from torch.optim import Optimizer

__all__ = ["GreedyLR", "StreamingAverage"]


class StreamingAverage:
    """Mean of the last ``window_size`` values, kept with a running sum."""

    def __init__(self, window_size: int) -> None:
        self.window_size = window_size
        self.values: list[float] = []
        self.sum = 0.0

    def streamavg(self, value: float) -> float:
        """Add ``value`` to the window and return the window's mean."""
        self.values.append(value)
        self.sum += value
        if len(self.values) > self.window_size:
            self.sum -= self.values.pop(0)
        return self.sum / len(self.values)

    def state_dict(self) -> dict[str, Any]:
        """The window, for checkpoints."""
        return {"window_size": self.window_size, "values": list(self.values), "sum": self.sum}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a window saved by :meth:`state_dict`."""
        self.window_size = state_dict.get("window_size", self.window_size)
        self.values = list(state_dict.get("values", []))
        self.sum = state_dict.get("sum", 0.0)


def _per_group(
    value: float | list[float] | tuple[float, ...], optimizer: Optimizer, name: str
) -> list[float]:
    """Broadcast a bound to every parameter group, or check a per-group list has one entry each."""
    groups = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != groups:
            raise ValueError(
                f"`GreedyLR({name}=...)` needs {groups} values, one per parameter group; got {len(value)}"
            )
        return list(value)
    return [value] * groups


def _check_arguments(optimizer: Optimizer, mode: str, factor: float, threshold_mode: str) -> None:
    """Refuse arguments GreedyLR cannot work with, naming each."""
    if factor >= 1.0:
        raise ValueError(f"`GreedyLR(factor={factor})` must be below 1.0")
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"`GreedyLR(optimizer=...)` needs a torch Optimizer, got {type(optimizer).__name__}")
    if mode not in ("min", "max"):
        raise ValueError(f"`GreedyLR(mode={mode!r})` is not supported; choose one of: 'min', 'max'")
    if threshold_mode not in ("rel", "abs"):
        raise ValueError(
            f"`GreedyLR(threshold_mode={threshold_mode!r})` is not supported; choose one of: 'rel', 'abs'"
        )


_STATE_KEYS = (
    "factor", "min_lrs", "max_lrs", "patience", "verbose", "cooldown", "warmup", "cooldown_counter",
    "warmup_counter", "mode", "threshold", "threshold_mode", "best", "num_bad_epochs", "num_good_epochs",
    "eps", "last_epoch", "smooth", "window_size", "reset_start", "reset_start_original", "_last_lr",
    "_init_lrs",
)  # fmt: skip


class GreedyLR:
    """Raise the learning rate while the metric improves, lower it while it stalls.

    Arguments mirror ``transformers.optimization.GreedyLR``: ``mode`` ('min' or 'max'), ``factor``
    (< 1), ``patience``, ``threshold`` and ``threshold_mode`` ('rel' or 'abs') decide what counts as
    an improvement; ``cooldown`` / ``warmup`` are steps to pause after a decrease / increase;
    ``min_lr`` / ``max_lr`` bound the rate (one value or one per group); ``eps`` is the smallest
    change applied; ``smooth`` averages the metric over ``window_size`` steps first; ``reset_start``
    is how many reductions at the floor trigger a restart.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.95,
        patience: int = 10,
        threshold: float = 1e-6,
        threshold_mode: str = "abs",
        cooldown: int = 0,
        warmup: int = 0,
        min_lr: float | list[float] = 1e-3,
        max_lr: float | list[float] = 1.0,
        eps: float = 1e-8,
        verbose: bool = False,
        smooth: bool = False,
        window_size: int = 50,
        reset_start: int = 500,
    ) -> None:
        _check_arguments(optimizer, mode, factor, threshold_mode)
        self.optimizer = optimizer
        self.mode, self.factor, self.patience, self.verbose = mode, factor, patience, verbose
        self.threshold, self.threshold_mode, self.eps = threshold, threshold_mode, eps
        self.cooldown, self.warmup = cooldown, warmup
        self.cooldown_counter = self.warmup_counter = 0
        self.smooth, self.window_size = smooth, window_size
        self.reset_start = self.reset_start_original = reset_start
        self.last_epoch = 0
        self.min_lrs = _per_group(min_lr, optimizer, "min_lr")
        self.max_lrs = _per_group(max_lr, optimizer, "max_lr")
        self._init_lrs = [group["lr"] for group in optimizer.param_groups]
        self._last_lr = list(self._init_lrs)
        self.best = self._worst()
        self.num_bad_epochs = self.num_good_epochs = 0
        self._streaming_avg = StreamingAverage(window_size) if smooth else None

    def _worst(self) -> float:
        return float("inf") if self.mode == "min" else float("-inf")

    def step(self, metrics: float, epoch: int | None = None) -> None:
        """Record one metric value and adjust the learning rates if a streak is long enough."""
        current = float(metrics)
        if self.smooth and self._streaming_avg is not None:
            current = self._streaming_avg.streamavg(current)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.cooldown_counter > 0 or self.warmup_counter > 0:
            if self.cooldown_counter > 0:
                self.cooldown_counter -= 1
            else:
                self.warmup_counter -= 1
            self.num_bad_epochs = self.num_good_epochs = 0
        else:
            self._count(current)
            if self.num_good_epochs > self.patience:
                self._increase_lr(self.last_epoch)
                self.warmup_counter, self.num_good_epochs = self.warmup, 0
            elif self.num_bad_epochs > self.patience:
                self._reduce_lr(self.last_epoch)
                self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _count(self, current: float) -> None:
        """Extend the streak of good or bad steps."""
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs, self.num_good_epochs = 0, self.num_good_epochs + 1
        else:
            self.num_bad_epochs, self.num_good_epochs = self.num_bad_epochs + 1, 0

    def is_better(self, current: float, best: float) -> bool:
        """Whether ``current`` beats ``best`` by more than the threshold."""
        if self.mode == "min":
            bar = best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold
            return current < bar
        bar = best * (1.0 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold
        return current > bar

    def _reduce_lr(self, epoch: int) -> None:
        at_floor = True
        for i, group in enumerate(self.optimizer.param_groups):
            old = float(group["lr"])
            new = max(old * self.factor, self.min_lrs[i])
            if old - new > self.eps:
                group["lr"] = new
                if self.verbose:
                    print(f"Epoch {epoch}: reducing learning rate of group {i} to {new:.4e}.")
            at_floor = at_floor and not group["lr"] > self.min_lrs[i]
        if at_floor:
            self.reset_start -= 1
            if self.reset_start <= 0:
                self._reset()

    def _increase_lr(self, epoch: int) -> None:
        for i, group in enumerate(self.optimizer.param_groups):
            old = float(group["lr"])
            new = min(old / self.factor, self.max_lrs[i])
            if new - old > self.eps:
                group["lr"] = new
                if self.verbose:
                    print(f"Epoch {epoch}: increasing learning rate of group {i} to {new:.4e}.")
        self.reset_start = self.reset_start_original

    def _reset(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self._init_lrs):
            group["lr"] = lr
        self.best = self._worst()
        self.num_bad_epochs = self.num_good_epochs = 0
        self.cooldown_counter = self.warmup_counter = 0
        self.reset_start = self.reset_start_original
        if self.smooth and self._streaming_avg is not None:
            self._streaming_avg = StreamingAverage(self.window_size)
        if self.verbose:
            print("Scheduler reset to initial state.")

    def get_last_lr(self) -> list[float]:
        """The learning rates after the last step."""
        return self._last_lr

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, under transformers' key names."""
        state = {key: getattr(self, key) for key in _STATE_KEYS}
        if self.smooth and self._streaming_avg is not None:
            state["_streaming_avg"] = self._streaming_avg.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict` and put its learning rates back on the optimizer."""
        for key in _STATE_KEYS:
            setattr(self, key, state_dict.get(key, getattr(self, key)))
        if "_streaming_avg" in state_dict:
            if self._streaming_avg is None:
                self._streaming_avg = StreamingAverage(self.window_size)
            self._streaming_avg.load_state_dict(state_dict["_streaming_avg"])
        if "_last_lr" in state_dict:
            for group, lr in zip(self.optimizer.param_groups, self._last_lr):
                group["lr"] = lr
