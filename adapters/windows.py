"""Gradient-accumulation windows: one Lightning batch = the micro-batches of one optimizer step.

transformers prefetches the ``gradient_accumulation_steps`` micro-batches of an optimizer step
before the first backward, so that ``num_items_in_batch`` (the target tokens of the whole
accumulated batch) is known when the first micro-batch's loss is normalised. We do the same, once,
here: ``AccumulationWindows`` wraps any DataLoader and yields lists of micro-batches. ``HFModule``
consumes a window per ``training_step`` with manual optimization, so Lightning's ``global_step``
counts optimizer updates and ``accumulate_grad_batches`` stays 1.

The last window of an epoch holds the remainder (``len(loader) % steps``), as in transformers.
Like accelerate's data loader, the windows read one micro-batch ahead: the first micro-batch of the
next window is collated before a window is handed out, so ``GA + 1`` batches are collated before
the first forward and a random collator (masking, augmentation) draws from the global generator in
transformers' order.

``state_dict`` / ``load_state_dict`` make it resumable mid-epoch under Lightning: a checkpoint
records how many windows of the epoch were trained on, and ``fit(ckpt_path=...)`` skips them. The
count is as Lightning's training loop consumes windows: it fetches one window ahead of the step
only when the loader has no length.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import IterableDataset

__all__ = ["AccumulationWindows", "Window"]

_END = object()  # the end of the micro-batches


class Window(list):
    """The micro-batches of one optimizer step, as ``AccumulationWindows`` yields them.

    Its own type (a list, so Lightning's device transfer keeps it) tells ``HFModule`` that each item is a
    whole micro-batch, whatever the collator made of it: a dict, or a list (TRL's identity collator)."""


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
        self._yielded = 0  # windows handed out in the current iteration (skipped ones included)
        self._exhausted = False

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

    def state_dict(self) -> dict[str, int]:
        """The epoch and the windows of it already trained on (Lightning saves it in its checkpoints)."""
        # Lightning fetches one window ahead of the step only when it cannot tell the length.
        pending = 1 if self._yielded and not self._exhausted and not self._sized() else 0
        return {"epoch": self.epoch, "windows": self._yielded - pending}

    def _sized(self) -> bool:
        try:
            len(self.loader)  # type: ignore[arg-type]
        except TypeError:
            return False
        return True

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Skip the windows already trained on at the start of the next iteration."""
        self.skip_windows = int(state.get("windows", 0))

    def __iter__(self) -> Iterator[Window]:
        iterator = iter(self.loader)
        skip, self.skip_windows = self.skip_windows, 0
        self._yielded, self._exhausted = skip, False
        if skip:
            _skip_batches(self.loader, iterator, skip * self.steps)
        # One micro-batch of look-ahead, as accelerate's DataLoaderShard: the first micro-batch of the
        # next window is collated before this window's forwards (a random collator draws in that order).
        pending = next(iterator, _END)
        while pending is not _END:
            window = Window([pending, *itertools.islice(iterator, self.steps - 1)])
            pending = next(iterator, _END)
            self._yielded += 1
            yield window
        self._exhausted = True


def _skip_batches(loader: Any, iterator: Iterator[Any], count: int) -> None:
    """Pass over the first ``count`` batches of ``iterator``, so the sampler order stays the same.

    In a single-process DataLoader over a map-style dataset only the batch sampler advances: the
    skipped batches are neither loaded nor collated, so a random collator draws nothing for them
    (as accelerate's ``skip_first_batches``). Anything else is iterated and the batches dropped.
    """
    sampler_iter = getattr(iterator, "_sampler_iter", None)
    dataset = getattr(loader, "dataset", None)
    if (
        getattr(loader, "num_workers", None) == 0
        and sampler_iter is not None
        and not isinstance(dataset, IterableDataset)
    ):
        for _ in itertools.islice(sampler_iter, count):
            iterator._num_yielded += 1  # type: ignore[attr-defined]
        return
    for _ in itertools.islice(iterator, count):
        pass
