"""Collators, lengths and stream dispatch with the semantics of transformers' Trainer."""

from __future__ import annotations

from hf_lightning.data.collators import (
    DataCollatorWithPadding,
    DefaultDataCollator,
    RemoveColumnsCollator,
    compute_lengths,
    default_data_collator,
    remove_unused_columns,
    signature_columns,
)

__all__ = [
    "DataCollatorWithPadding",
    "DefaultDataCollator",
    "RemoveColumnsCollator",
    "compute_lengths",
    "default_data_collator",
    "remove_unused_columns",
    "signature_columns",
]
