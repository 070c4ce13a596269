"""Batch collators and dataset helpers with the semantics of ``transformers``' Trainer.

* :func:`default_data_collator` stacks dict-like features into a batch; ``label`` / ``label_ids``
  become ``labels``.
* :class:`DefaultDataCollator` is the same as an object with a fixed ``return_tensors``.
* :class:`DataCollatorWithPadding` pads with the tokenizer (or any ``processing_class`` with a
  ``pad`` method) and renames ``label`` / ``label_ids`` to ``labels``.
* :func:`signature_columns`, :func:`remove_unused_columns` and :class:`RemoveColumnsCollator` drop
  the inputs a model's ``forward`` does not accept.
* :func:`compute_lengths` gives the per-sample lengths that the length-aware samplers need; a
  precomputed length column is used when present (read it before the columns are dropped).

Engine-free: torch, numpy and the standard library only.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hf_lightning.utils.logging import get_logger

__all__ = [
    "DataCollatorWithPadding",
    "DefaultDataCollator",
    "RemoveColumnsCollator",
    "compute_lengths",
    "default_data_collator",
    "remove_unused_columns",
    "signature_columns",
]

logger = get_logger(__name__)

_LABEL_KEYS = ("label", "label_ids")
_RETURN_TENSORS = ("pt", "np")


def _check_return_tensors(return_tensors: str, owner: str) -> None:
    if return_tensors not in _RETURN_TENSORS:
        raise ValueError(
            f"`{owner}(return_tensors={return_tensors!r})` is not supported; choose one of: "
            + ", ".join(repr(v) for v in _RETURN_TENSORS)
        )


def _as_dicts(features: Sequence[Any]) -> list[Mapping[str, Any]]:
    if not features:
        raise ValueError("`default_data_collator(features=[])` needs at least one feature")
    if isinstance(features[0], Mapping):
        return list(features)
    return [vars(f) for f in features]


def _torch_labels(first: Mapping[str, Any], features: list[Mapping[str, Any]]) -> torch.Tensor | None:
    label = first.get("label")
    if label is not None:
        scalar = label.item() if isinstance(label, torch.Tensor) else label
        dtype = torch.long if isinstance(scalar, (int, np.integer)) else torch.float
        return torch.tensor([f["label"] for f in features], dtype=dtype)
    label_ids = first.get("label_ids")
    if label_ids is None:
        return None
    if isinstance(label_ids, torch.Tensor):
        return torch.stack([f["label_ids"] for f in features])
    dtype = torch.long if isinstance(label_ids[0], (int, np.integer)) else torch.float
    return torch.tensor([f["label_ids"] for f in features], dtype=dtype)


def _numpy_labels(first: Mapping[str, Any], features: list[Mapping[str, Any]]) -> np.ndarray | None:
    label = first.get("label")
    if label is not None:
        scalar = label.item() if isinstance(label, np.ndarray) else label
        dtype = np.int64 if isinstance(scalar, (int, np.integer)) else np.float32
        return np.array([f["label"] for f in features], dtype=dtype)
    label_ids = first.get("label_ids")
    if label_ids is None:
        return None
    if isinstance(label_ids, np.ndarray):
        return np.stack([f["label_ids"] for f in features])
    dtype = np.int64 if isinstance(label_ids[0], (int, np.integer)) else np.float32
    return np.array([f["label_ids"] for f in features], dtype=dtype)


def _torch_stack(values: list[Any]) -> torch.Tensor:
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(values)
    if isinstance(first, np.ndarray):
        return torch.from_numpy(np.stack(values))
    return torch.tensor(values)


def _numpy_stack(values: list[Any]) -> np.ndarray:
    if isinstance(values[0], np.ndarray):
        return np.stack(values)
    return np.array(values)


def default_data_collator(features: Sequence[Any], return_tensors: str = "pt") -> dict[str, Any]:
    """Collate dict-like features (or objects with attributes) into one batch.

    Keys are taken from the first feature. ``label`` (one number per sample) and ``label_ids`` (one
    list per sample) become ``labels`` (``long`` for integers, ``float`` otherwise). Every other key
    whose first value is neither ``None`` nor a string is stacked: tensors with ``torch.stack``,
    arrays with ``np.stack``, numbers and lists with ``torch.tensor``.
    """
    _check_return_tensors(return_tensors, "default_data_collator")
    rows = _as_dicts(features)
    first = rows[0]
    labels = _torch_labels(first, rows) if return_tensors == "pt" else _numpy_labels(first, rows)
    stack = _torch_stack if return_tensors == "pt" else _numpy_stack
    batch: dict[str, Any] = {}
    if labels is not None:
        batch["labels"] = labels
    for key, value in first.items():
        if key in _LABEL_KEYS or value is None or isinstance(value, str):
            continue
        batch[key] = stack([row[key] for row in rows])
    return batch


@dataclasses.dataclass
class DefaultDataCollator:
    """:func:`default_data_collator` as an object, with ``return_tensors`` fixed at construction (a dataclass,
    as transformers')."""

    return_tensors: str = "pt"

    def __post_init__(self) -> None:
        _check_return_tensors(self.return_tensors, "DefaultDataCollator")

    def __call__(self, features: Sequence[Any], return_tensors: str | None = None) -> dict[str, Any]:
        return default_data_collator(features, return_tensors or self.return_tensors)


@dataclasses.dataclass
class DataCollatorWithPadding:
    """Pad a list of tokenized features to a batch with ``processing_class.pad`` (a dataclass, as transformers').

    Args:
        tokenizer: the tokenizer (or feature extractor / processor) whose ``pad`` method pads the
            features. ``processing_class=`` is accepted as the keyword spelling of the same thing.
        padding: ``True`` / ``"longest"``, ``"max_length"`` or ``False`` / ``"do_not_pad"``.
        max_length: the length to pad (or truncate) to with ``padding="max_length"``.
        pad_to_multiple_of: round the padded length up to a multiple of this number.
        return_tensors: ``"pt"`` or ``"np"``.

    ``label`` and ``label_ids`` in the padded batch are renamed to ``labels``.
    """

    tokenizer: Any = None
    padding: bool | str = True
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"
    processing_class: dataclasses.InitVar[Any] = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self, processing_class: Any) -> None:
        tokenizer = self.tokenizer
        if tokenizer is not None and processing_class is not None and processing_class is not tokenizer:
            raise ValueError(
                "`DataCollatorWithPadding(tokenizer=..., processing_class=...)`: pass only one of them"
            )
        pad_owner = tokenizer if tokenizer is not None else processing_class
        if pad_owner is None or not callable(getattr(pad_owner, "pad", None)):
            raise ValueError(
                "`DataCollatorWithPadding(tokenizer=...)` needs an object with a `pad` method "
                f"(a tokenizer or feature extractor), got {type(pad_owner).__name__}"
            )
        _check_return_tensors(self.return_tensors, "DataCollatorWithPadding")
        self.tokenizer = pad_owner

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = self._pad(features)
        for key in _LABEL_KEYS:
            if key in batch:
                batch["labels"] = batch[key]
                del batch[key]
        return batch

    def _pad(self, features: Sequence[Mapping[str, Any]]) -> Any:
        kwargs = {
            "padding": self.padding,
            "max_length": self.max_length,
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "return_tensors": self.return_tensors,
        }
        warnings_state = getattr(self.tokenizer, "deprecation_warnings", None)
        if not isinstance(warnings_state, dict):
            return self.tokenizer.pad(features, **kwargs)
        # Fast tokenizers warn that `pad` is slower than `__call__`; a collator has no other choice.
        key = "Asking-to-pad-a-fast-tokenizer"
        previous = warnings_state.get(key, False)
        warnings_state[key] = True
        try:
            return self.tokenizer.pad(features, **kwargs)
        finally:
            warnings_state[key] = previous


# --- Dataset helpers -------------------------------------------------------------------------


def _processing_class(self: DataCollatorWithPadding) -> Any:
    """The object that pads (the same as ``tokenizer``)."""
    return self.tokenizer


# set after the dataclass is made: ``processing_class=`` is an init-only keyword, read back as ``tokenizer``
DataCollatorWithPadding.processing_class = property(_processing_class)  # type: ignore[attr-defined]


def signature_columns(model: Any, label_names: Sequence[str] | None = None) -> list[str]:
    """Return the input names ``model.forward`` accepts, plus the label names a collator maps.

    A PEFT wrapper is looked through to its base model. ``label``, ``label_ids`` and every name in
    ``label_names`` are appended, because the collators turn them into ``labels``.
    """
    target = model
    if callable(getattr(model, "get_base_model", None)):
        target = model.get_base_model()
    columns = list(inspect.signature(target.forward).parameters)
    for name in (*_LABEL_KEYS, *(label_names or ())):
        if name not in columns:
            columns.append(name)
    return columns


def _ignored_message(ignored: Sequence[str], description: str | None, model_name: str | None) -> str:
    """transformers' line for the dropped columns, word for word (a script or a log reader may match it)."""
    where = "" if description is None else f"in the {description} set"
    owner = f"`{model_name}.forward`" if model_name else "the model's `forward`"
    names = ", ".join(ignored)
    return (
        f"The following columns {where} don't have a corresponding argument in {owner} and have been ignored: "
        f"{names}. If {names} are not expected by {owner},  you can safely ignore this message."
    )


def remove_unused_columns(
    dataset: Any,
    signature_columns: Sequence[str],
    label_names: Sequence[str] | None = None,
    *,
    description: str | None = None,
    model_name: str | None = None,
) -> Any:
    """Drop the columns of a ``datasets.Dataset`` that the model's ``forward`` does not take.

    Columns named in ``signature_columns``, ``label_names``, ``label`` and ``label_ids`` are kept.
    The dropped columns are named in one INFO log line. A dataset without ``column_names`` (a plain
    torch dataset) is returned unchanged; wrap its collator in :class:`RemoveColumnsCollator`.
    Read a precomputed length column (:func:`compute_lengths`) before calling this.
    """
    names = getattr(dataset, "column_names", None)
    if not isinstance(names, list):
        return dataset
    keep = set(signature_columns) | set(_LABEL_KEYS) | set(label_names or ())
    ignored = [name for name in names if name not in keep]
    if len(ignored) == len(names):
        raise ValueError(
            f"None of the dataset columns ({', '.join(names)}) is an input of the model's forward "
            f"({', '.join(signature_columns)}); check the dataset, or set "
            "`TrainingArguments(remove_unused_columns=False)`"
        )
    if not ignored:
        return dataset
    logger.info(_ignored_message(ignored, description, model_name))
    return dataset.remove_columns(ignored)


class RemoveColumnsCollator:
    """Wrap a collator so that each dict feature keeps only the model's input columns.

    The torch-dataset counterpart of :func:`remove_unused_columns`: the dropped keys are logged once
    (INFO), on the first batch that has any. Features that are not dicts pass through unchanged.
    """

    def __init__(
        self,
        data_collator: Callable[[list[Any]], Any],
        signature_columns: Sequence[str],
        logger: logging.Logger | None = None,
        model_name: str | None = None,
        description: str | None = None,
    ) -> None:
        self.data_collator = data_collator
        self.signature_columns = list(signature_columns)
        self._keep = frozenset(self.signature_columns)
        self.logger = logger if logger is not None else get_logger(__name__)
        self.model_name = model_name
        self.description = description
        self.message_logged = False

    def _remove_columns(self, feature: Any) -> Any:
        if not isinstance(feature, dict):
            return feature
        keep = self._keep
        if keep.issuperset(feature):  # nothing to drop: a shallow copy, as the general case makes
            return dict(feature)
        if not self.message_logged:
            ignored = [key for key in feature if key not in keep]
            if ignored:
                self.logger.info(_ignored_message(ignored, self.description, self.model_name))
                self.message_logged = True
        return {key: value for key, value in feature.items() if key in keep}

    def __call__(self, features: list[Any]) -> Any:
        return self.data_collator([self._remove_columns(feature) for feature in features])


def _to_int_list(values: Any) -> list[int]:
    if isinstance(values, torch.Tensor):
        return [int(v) for v in values.tolist()]
    return [int(v) for v in values]


def compute_lengths(
    dataset: Any, length_column_name: str = "length", model_input_name: str | None = "input_ids"
) -> list[int]:
    """Return one length per sample, for ``group_by_length`` and ``batch_rebalance``.

    A ``datasets.Dataset`` column named ``length_column_name`` (or that key in every dict item) is
    used as is; otherwise the dataset is scanned once and ``len(item[model_input_name])`` taken.
    Call this before :func:`remove_unused_columns`, which drops the length column (transformers
    reads it too late and silently re-scans; docs/divergences.md, divergence 2).
    """
    model_input_name = model_input_name or "input_ids"
    names = getattr(dataset, "column_names", None)
    if isinstance(names, list):
        if length_column_name in names:
            return _to_int_list(dataset[length_column_name])
        if model_input_name in names:
            return [len(value) for value in dataset[model_input_name]]
    first = dataset[0] if len(dataset) > 0 else {}
    if not isinstance(first, Mapping) or model_input_name not in first and length_column_name not in first:
        found = (
            f"their keys: {sorted(map(str, first))}" if isinstance(first, Mapping) else type(first).__name__
        )
        raise ValueError(  # transformers' sentence, then what was found and the way out
            "Can only automatically infer lengths for datasets whose items are dictionaries with an "
            f"'{model_input_name}' key (or a '{length_column_name}' length column); got {found}. "
            "Pass the lengths explicitly."
        )
    if length_column_name in first:
        return [int(dataset[i][length_column_name]) for i in range(len(dataset))]
    return [len(dataset[i][model_input_name]) for i in range(len(dataset))]
