"""Gradient-accumulation windows: one Lightning batch = the micro-batches of one optimizer step.

transformers prefetches the ``gradient_accumulation_steps`` micro-batches of an optimizer step
before the first backward, so that ``num_items_in_batch`` (the target tokens of the whole
accumulated batch) is known when the first micro-batch's loss is normalised. We do the same, once,
here: ``AccumulationWindows`` wraps any DataLoader and yields lists of micro-batches. ``HFModule``
consumes a window per ``training_step`` with manual optimization, so Lightning's ``global_step``
counts optimizer updates and ``accumulate_grad_batches`` stays 1.

The last window of an epoch holds the remainder (``len(loader) % steps``), as in transformers.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["AccumulationWindows"]


class AccumulationWindows:
    """Re-iterable view of ``loader`` grouped into windows of ``steps`` micro-batches.

    Args:
        loader: any iterable of batches (usually a ``torch.utils.data.DataLoader``).
        steps: micro-batches per optimizer step (``gradient_accumulation_steps``).
        skip_windows: windows to skip at the start of the next iteration only (resuming mid-epoch).
    """

    def __init__(self, loader: Iterable[Any], steps: int, *, skip_windows: int = 0) -> None:
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"`AccumulationWindows(steps={steps!r})` needs a positive integer")
        self.loader = loader
        self.steps = steps
        self.skip_windows = skip_windows
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.loader)  # type: ignore[arg-type]
        return max(n // self.steps + int(n % self.steps > 0), 1) if n else 0

    @property
    def sampler(self) -> Any:
        """The loader's sampler: Lightning calls its ``set_epoch`` at each epoch start."""
        return getattr(self.loader, "sampler", None)

    @property
    def batch_sampler(self) -> Any:
        """The loader's batch sampler (``BatchRebalanceSampler``): Lightning calls its ``set_epoch`` too."""
        return getattr(self.loader, "batch_sampler", None)

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to the loader's sampler / batch sampler (Lightning does not reach them)."""
        self.epoch = epoch
        for target in (
            self.loader,
            getattr(self.loader, "sampler", None),
            getattr(self.loader, "batch_sampler", None),
        ):
            if target is not None and hasattr(target, "set_epoch"):
                target.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[Any]]:
        iterator = iter(self.loader)
        skip, self.skip_windows = self.skip_windows, 0
        if skip:
            # Consume the micro-batches already trained on, so the sampler order stays the same.
            for _ in itertools.islice(iterator, skip * self.steps):
                pass
        while True:
            window = list(itertools.islice(iterator, self.steps))
            if not window:
                return
            yield window
