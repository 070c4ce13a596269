"""The arguments a checkpoint records, fixed when the plan is built.

A checkpoint holds ``training_args.bin`` and ``training_args.json``; the engine's saver writes them from this
record (``ModuleSettings.saved_arguments``), so it never holds or reads the ``TrainingArguments`` themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["SavedArguments", "json_text_of"]


def json_text_of(args: Any) -> str:
    """``args.to_json_string()``; where a value is not JSON (a ``pathlib.Path`` the argument parser made of
    ``--generation_config DIR``), that value as text instead of transformers' ``TypeError``."""
    try:
        return str(args.to_json_string())
    except TypeError:
        return json.dumps(args.to_dict(), indent=2, default=str) + "\n"


@dataclass(frozen=True)
class SavedArguments:
    """``args.to_dict()`` and ``args.to_json_string()`` as they were when the plan was built (tokens hidden)."""

    values: Mapping[str, Any]
    json_text: str

    @classmethod
    def of(cls, args: Any) -> SavedArguments:
        return cls(MappingProxyType(dict(args.to_dict())), json_text_of(args))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def to_json_string(self) -> str:
        return self.json_text

    def __repr__(self) -> str:
        return f"SavedArguments({len(self.values)} fields)"
