"""``TrainingArguments(debug="underflow_overflow")``: find where a model's activations first turn inf or nan.

:class:`DebugUnderflowOverflow` (transformers' name; ``Trainer.train()`` attaches one to the model, or
attach it yourself) hooks the forward of every module. Each call makes a *frame*: the module's qualified
name and class, then the absolute minimum and maximum of the module's own parameters, of its inputs and of
its outputs. The newest ``max_frames_to_save`` frames are kept; as soon as a value holds an inf or a nan
they are printed, oldest first, and ``ValueError`` stops the run: the frames show the magnitudes growing
towards the overflow (or shrinking towards an underflow). A batch ends when the model's own forward
returns. ``trace_batch_nums`` prints every frame of the listed batches as they happen instead (no abort);
``abort_after_batch_num`` stops the run after that batch.

Example::

    from hf_lightning.debug_utils import DebugUnderflowOverflow

    debug = DebugUnderflowOverflow(model)  # then run the model; debug.remove() takes the hooks off
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from hf_lightning.args.enums import DebugOption

__all__ = [
    "DebugOption",
    "DebugUnderflowOverflow",
    "debug_for_training",
    "detect_overflow",
    "get_abs_min_max",
]

_INDENT = " " * 17  # the width of the two number columns


def detect_overflow(var: torch.Tensor, ctx: str) -> bool:
    """Whether ``var`` holds a nan or an inf (printed with ``ctx`` when it does)."""
    if not torch.is_tensor(var) or not (var.is_floating_point() or var.is_complex()):
        return False
    found = False
    for kind, test in (("nans", torch.isnan), ("infs", torch.isinf)):
        if bool(test(var).any()):
            print(f"{ctx} has {kind}")
            found = True
    return found


def get_abs_min_max(value: torch.Tensor, label: str) -> str:
    """``"<abs min> <abs max> <label>"`` of a tensor, as a frame line (an empty or bool tensor says so)."""
    if value.numel() == 0:
        return f"{'empty':>17} {label}"
    if value.dtype == torch.bool:
        return f"{'bool tensor':>17} {label}"
    size = value.detach().abs()
    return f"{float(size.min()):8.2e} {float(size.max()):8.2e} {label}"


def _labelled(value: Any, label: str) -> Iterator[tuple[Any, str]]:
    """``value`` and, for a tuple, list or mapping (a model output), its items, one level deep."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield item, f"{label}[{key!r}]"
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            if isinstance(item, (tuple, list)):
                yield from ((inner, f"{label}[{index}][{j}]") for j, inner in enumerate(item))
            else:
                yield item, f"{label}[{index}]"
    else:
        yield value, label


class DebugUnderflowOverflow:
    """Frames of every module's forward; prints the last ones and raises at the first inf/nan (module docstring).

    Args:
        model: the model whose modules are hooked.
        max_frames_to_save: how many of the newest frames are printed when an inf/nan appears.
        trace_batch_nums: batch numbers (from 0) whose frames are all printed as they happen.
        abort_after_batch_num: stop the run (``ValueError``) once this batch has finished.
    """

    def __init__(
        self,
        model: nn.Module,
        max_frames_to_save: int = 21,
        trace_batch_nums: Iterable[int] | None = None,
        abort_after_batch_num: int | None = None,
    ) -> None:
        self.model = model
        self.trace_batch_nums = list(trace_batch_nums or [])
        self.abort_after_batch_num = abort_after_batch_num
        self.frames: collections.deque[str] = collections.deque(maxlen=max_frames_to_save)
        self.batch_number = 0
        self._batch_opened = False
        names: dict[nn.Module, str] = {}
        for name, module in model.named_modules():
            names.setdefault(module, name)  # a shared module keeps its first name
        self.module_names = names
        self._handles = [module.register_forward_hook(self._on_forward) for module in model.modules()]

    def remove(self) -> None:
        """Take the hooks off the model."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _frame(self, module: nn.Module, inputs: Any, output: Any) -> tuple[str, bool]:
        lines = [f"{_INDENT} {self.module_names.get(module, '?')} {type(module).__name__}"]
        overflow = False
        parts = [(p, name) for name, p in module.named_parameters(recurse=False)]
        parts += list(_labelled(inputs, "input")) + list(_labelled(output, "output"))
        for value, label in parts:
            if torch.is_tensor(value):
                lines.append(get_abs_min_max(value, label))
                overflow = detect_overflow(value, label) or overflow
            else:
                lines.append(f"{'None' if value is None else 'not a tensor':>17} {label}")
        return "\n".join(lines), overflow

    def _on_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        tracing = self.batch_number in self.trace_batch_nums
        frame, overflow = self._frame(module, inputs, output)
        if not self._batch_opened:
            header = f"\n\n{_INDENT} *** Starting batch number={self.batch_number} ***\n{'abs min':8} {'abs max':8} metadata"
            frame = f"{header}\n{frame}"
            self._batch_opened = True
        if tracing:
            print(frame)
        else:
            self.frames.append(frame)
        if module is self.model:  # the model's own forward returns last: the batch is done
            self.batch_number += 1
            self._batch_opened = False
        if overflow and not tracing:
            self._print_frames()
            raise ValueError(
                "DebugUnderflowOverflow: inf/nan detected, aborting as there is no point running further. "
                "Please scroll up above this traceback to see the activation values prior to this event."
            )
        if self.abort_after_batch_num is not None and self.batch_number > self.abort_after_batch_num:
            raise ValueError(
                f"DebugUnderflowOverflow: aborting after {self.batch_number} batches due to "
                f"`abort_after_batch_num={self.abort_after_batch_num}` arg"
            )

    def _print_frames(self) -> None:
        print(f"\nDetected inf/nan during batch_number={self.batch_number}")
        print(f"Last {len(self.frames)} forward frames:")
        print(f"{'abs min':8} {'abs max':8} metadata")
        print("\n".join(self.frames))
        print("\n\n")
        self.frames.clear()


def debug_for_training(debug: Iterable[Any], model: nn.Module, n_gpu: int) -> DebugUnderflowOverflow | None:
    """What ``Trainer.train()`` attaches for ``TrainingArguments.debug``: a :class:`DebugUnderflowOverflow`
    for ``underflow_overflow`` (refused, as transformers refuses it, with several GPUs in one process);
    ``tpu_metrics_debug`` reports XLA's metrics on a TPU only, so without one it has nothing to add."""
    options = {DebugOption(option) for option in debug}
    if DebugOption.UNDERFLOW_OVERFLOW not in options:
        return None
    if n_gpu > 1:
        raise ValueError(
            "Currently --debug underflow_overflow is not supported under DP. Please use DDP with torchrun"
        )
    return DebugUnderflowOverflow(model)
