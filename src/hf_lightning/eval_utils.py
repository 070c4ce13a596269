"""Engine-free helpers of the evaluation loop: nested tensors, ragged padding, accumulation, metrics input.

Predictions, labels, inputs and losses come out of ``prediction_step`` as tensors or nested
tuples / lists / dicts of tensors. The loop concatenates them batch after batch along the first
dimension; when the second dimension (the sequence length) differs between batches, the shorter
ones are padded on the right with ``padding_index`` (-100, as transformers does).
``EvalAccumulator`` keeps the batches on the device and moves them to CPU NumPy arrays when asked
(``eval_accumulation_steps``) or at the end.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np
import torch

from hf_lightning.trainer_utils import EvalPrediction

__all__ = [
    "IGNORE_INDEX",
    "EvalAccumulator",
    "EvalLoopContainer",
    "concat_batches",
    "find_batch_size",
    "lookahead",
    "make_eval_prediction",
    "mean_eval_loss",
    "nested_concat",
    "nested_detach",
    "nested_numpify",
    "nested_truncate",
    "pad_and_concatenate",
    "pad_to_length",
    "prefix_metric_keys",
]

IGNORE_INDEX = -100


def find_batch_size(tensors: Any) -> int | None:
    """The first dimension of the first tensor or array found in ``tensors`` (nested), or None."""
    if isinstance(tensors, (list, tuple)):
        for item in tensors:
            size = find_batch_size(item)
            if size is not None:
                return size
    elif isinstance(tensors, Mapping):
        for item in tensors.values():
            size = find_batch_size(item)
            if size is not None:
                return size
    elif isinstance(tensors, (torch.Tensor, np.ndarray)):
        return tensors.shape[0] if tensors.ndim >= 1 else None
    return None


def _map(fn: Any, tensors: Any) -> Any:
    if isinstance(tensors, (list, tuple)):
        return type(tensors)(_map(fn, t) for t in tensors)
    if isinstance(tensors, Mapping):
        return cast(Any, type(tensors))({k: _map(fn, t) for k, t in tensors.items()})
    return fn(tensors)


def nested_detach(tensors: Any) -> Any:
    """``tensors`` detached from the graph (nested structures too); non-tensors are kept."""
    return _map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, tensors)


def _numpify(tensor: Any) -> Any:
    if not isinstance(tensor, torch.Tensor):
        return tensor
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:  # NumPy has no bfloat16
        tensor = tensor.to(torch.float32)
    return tensor.numpy()


def nested_numpify(tensors: Any) -> Any:
    """``tensors`` as CPU NumPy arrays (bfloat16 becomes float32), nested structures too."""
    return _map(_numpify, tensors)


def nested_truncate(tensors: Any, limit: int) -> Any:
    """The first ``limit`` rows of every tensor, array or list in ``tensors``."""
    return _map(lambda t: t[:limit], tensors)


def pad_to_length(tensor: torch.Tensor, length: int, pad_index: int, dim: int = 1) -> torch.Tensor:
    """``tensor`` padded on the right along ``dim`` to ``length`` with ``pad_index`` (unchanged if long enough)."""
    if tensor.ndim <= dim or tensor.shape[dim] >= length:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = length - tensor.shape[dim]
    return torch.cat([tensor, tensor.new_full(shape, pad_index)], dim=dim)


def pad_and_concatenate(first: Any, second: Any, padding_index: int = IGNORE_INDEX) -> Any:
    """Concatenate two tensors (or two arrays) along the first axis, padding the second axis if it differs."""
    is_torch = isinstance(first, torch.Tensor)
    first = first.reshape(1) if first.ndim == 0 else first
    second = second.reshape(1) if second.ndim == 0 else second
    if first.ndim == 1 or first.shape[1] == second.shape[1]:
        return torch.cat((first, second), dim=0) if is_torch else np.concatenate((first, second), axis=0)
    shape = (first.shape[0] + second.shape[0], max(first.shape[1], second.shape[1]), *first.shape[2:])
    result = (
        first.new_full(shape, padding_index) if is_torch else np.full_like(first, padding_index, shape=shape)
    )
    result[: first.shape[0], : first.shape[1]] = first
    result[first.shape[0] :, : second.shape[1]] = second
    return result


def nested_concat(tensors: Any, new_tensors: Any, padding_index: int = IGNORE_INDEX) -> Any:
    """`pad_and_concatenate` applied leaf by leaf to two structures of the same shape."""
    both_tensors = isinstance(tensors, torch.Tensor) and isinstance(new_tensors, torch.Tensor)
    if not both_tensors and type(tensors) is not type(new_tensors):
        raise TypeError(
            "Evaluation outputs changed structure between batches: got "
            f"{type(tensors).__name__} then {type(new_tensors).__name__}"
        )
    if isinstance(tensors, (list, tuple)):
        return type(tensors)(nested_concat(t, n, padding_index) for t, n in zip(tensors, new_tensors))
    if isinstance(tensors, Mapping):
        return cast(Any, type(tensors))(
            {k: nested_concat(t, new_tensors[k], padding_index) for k, t in tensors.items()}
        )
    if isinstance(tensors, (torch.Tensor, np.ndarray)):
        return pad_and_concatenate(tensors, new_tensors, padding_index)
    raise TypeError(f"Cannot concatenate evaluation outputs of type {type(tensors).__name__}")


def concat_batches(batches: list[Any], padding_index: int = IGNORE_INDEX, consume: bool = False) -> Any:
    """Concatenate a list of batches (tensors, arrays, or nested tuples / lists / dicts of them) along the
    first axis in one go; second axes of different lengths are padded on the right with ``padding_index``.

    The result equals concatenating the batches one after the other with `nested_concat`, without
    copying what was accumulated at each step. With ``consume`` the list is emptied as the batches are
    copied, so each batch can be freed once it is in the result (the peak stays near one copy).
    """
    first = batches[0]
    for batch in batches[1:]:
        if type(batch) is not type(first) and not (_is_array(batch) and _is_array(first)):
            raise TypeError(
                "Evaluation outputs changed structure between batches: got "
                f"{type(first).__name__} then {type(batch).__name__}"
            )
    if isinstance(first, (list, tuple)):
        # as nested_concat's zip: a list whose length changes between batches (one entry per image of a
        # batch, DETR's list of per-image label dicts) keeps as many entries as the shortest batch has
        columns = [[b[i] for b in batches] for i in range(min(len(b) for b in batches))]
        if consume:
            batches.clear()
        return type(first)(concat_batches(column, padding_index, consume) for column in columns)
    if isinstance(first, Mapping):
        by_key = {k: [b[k] for b in batches] for k in first}
        if consume:
            batches.clear()
        return cast(Any, type(first))(
            {k: concat_batches(column, padding_index, consume) for k, column in by_key.items()}
        )
    if not _is_array(first):
        raise TypeError(f"Cannot concatenate evaluation outputs of type {type(first).__name__}")
    return _pad_and_stack(batches, padding_index, consume)


def _is_array(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray))


def _pad_and_stack(batches: list[Any], padding_index: int, consume: bool) -> Any:
    if len(batches) == 1:  # a lone batch is kept as it is (a 0-d loss stays 0-d), as transformers keeps it
        only = batches[0]
        if consume:
            batches[0] = None
        return only
    shapes = [(1,) if b.ndim == 0 else tuple(b.shape) for b in batches]
    rows = sum(shape[0] for shape in shapes)
    ragged = len(shapes[0]) > 1 and len({shape[1] for shape in shapes}) > 1
    width = max(shape[1] for shape in shapes) if len(shapes[0]) > 1 else None
    shape = (rows, *shapes[0][1:]) if width is None else (rows, width, *shapes[0][2:])
    first = batches[0]
    if isinstance(first, torch.Tensor):
        dtype = functools.reduce(torch.promote_types, (b.dtype for b in batches))
        result: Any = torch.empty(shape, dtype=dtype, device=first.device)
    else:
        result = np.empty(shape, dtype=np.result_type(*batches))
    row = 0
    for index, (batch, batch_shape) in enumerate(zip(batches, shapes)):
        end = row + batch_shape[0]
        if ragged:
            result[row:end, : batch_shape[1]] = batch
            result[row:end, batch_shape[1] :] = padding_index
        else:
            result[row:end] = batch.reshape(batch_shape)
        row = end
        if consume:
            batches[index] = None
    return result


class EvalAccumulator:
    """One stream of evaluation outputs (losses, predictions, labels or inputs), batch after batch.

    Batches are kept as they come (on the device) until ``to_cpu_and_numpy`` moves them to CPU NumPy
    arrays (``eval_accumulation_steps``, or the end). ``get_arrays`` then concatenates them once along
    the first axis, ragged second axes padded with ``padding_index`` (``eval_do_concat_batches``), or
    returns the list of per-batch arrays. Concatenating once keeps the cost linear in the number of
    batches; transformers re-copies everything accumulated at every batch.
    """

    def __init__(self, do_concat: bool = True, padding_index: int = IGNORE_INDEX) -> None:
        self.do_concat = do_concat
        self.padding_index = padding_index
        self.tensors: list[Any] = []
        self.arrays: list[Any] = []

    def add(self, tensors: Any) -> None:
        """Append one (gathered) batch."""
        self.tensors.append(tensors)

    def to_cpu_and_numpy(self) -> None:
        """Move the batches held on the device to CPU NumPy arrays."""
        self.arrays.extend(nested_numpify(batch) for batch in self.tensors)
        self.tensors = []

    def get_arrays(self) -> Any:
        """Everything added so far, as NumPy: concatenated, or a list per batch (None when nothing was added)."""
        self.to_cpu_and_numpy()
        if not self.arrays:
            return None
        if not self.do_concat:
            return self.arrays
        result = concat_batches(self.arrays, self.padding_index, consume=True)
        self.arrays = [result]
        return result


class EvalLoopContainer(EvalAccumulator):
    """``transformers.trainer_pt_utils.EvalLoopContainer``'s name and arguments for :class:`EvalAccumulator`:
    ``do_nested_concat`` concatenates the batches added (ragged second axes padded with ``padding_index``),
    else ``get_arrays`` lists them."""

    def __init__(self, do_nested_concat: bool = True, padding_index: int = IGNORE_INDEX) -> None:
        super().__init__(do_concat=do_nested_concat, padding_index=padding_index)
        self.do_nested_concat = do_nested_concat


def make_eval_prediction(
    predictions: Any,
    label_ids: Any,
    *,
    inputs: Any = None,
    losses: Any = None,
    include_for_metrics: Iterable[str] = (),
) -> EvalPrediction:
    """The ``EvalPrediction`` handed to ``compute_metrics``: inputs and losses only when requested."""
    include = set(include_for_metrics or ())
    return EvalPrediction(
        predictions=predictions,
        label_ids=label_ids,
        inputs=inputs if "inputs" in include else None,
        losses=losses if "loss" in include else None,
    )


def mean_eval_loss(losses: Any, nan_inf_filter: bool) -> float | None:
    """The mean of the per-sample losses; with ``nan_inf_filter`` non-finite values are left out
    (unless every value is non-finite). None without losses."""
    if isinstance(losses, list):
        losses = np.concatenate(losses) if losses else None
    if not isinstance(losses, np.ndarray):
        return None
    finite = np.isfinite(losses)
    if nan_inf_filter and finite.any():
        losses = losses[finite]
    return losses.mean().item()


def prefix_metric_keys(metrics: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``metrics`` with every key that lacks it prefixed by ``{prefix}_`` (order kept as transformers does)."""
    for key in list(metrics):
        if not key.startswith(f"{prefix}_"):
            metrics[f"{prefix}_{key}"] = metrics.pop(key)
    return metrics


def lookahead(iterable: Iterable[Any]) -> Iterator[tuple[bool, Any]]:
    """Yield ``(is_last, item)`` for each item, reading one item ahead."""
    iterator = iter(iterable)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield False, current
        current = following
    yield True, current
