"""Which code each carrier of the argument table names, and a check that it really reads the field.

A row's carrier (``adapters/argument_table.py``) is one or more parts joined by ``" + "``; each part
starts with a key of :data:`CARRIER_SOURCES`, which lists the code that carries it: a module, or one
function or class of a module (``"module:name"``), or a whole package. A part is honest when that
code reads the field: an attribute of that name (``args.<field>``, ``settings.<field>``, the plan
builder's ``args.<field>``) or the name as a string (``getattr(args, "<field>")``).
:func:`unread_claims` lists the parts that are not; ``tests/adapters/test_argument_table.py`` keeps it empty.

The code is read as text (``ast``), never imported.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["CARRIER_SOURCES", "UNCHECKED_STATUSES", "carrier_keys", "names_read", "unread_claims"]

_PLAN = "hf_lightning.adapters.plan"
_GROUPS = "hf_lightning.args.translate"
_DISTRIBUTED = "hf_lightning.args.distributed"
_FACADE = "hf_lightning.trainer"
_RUNTIME = "hf_lightning.args.runtime"

CARRIER_SOURCES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "lightning.Trainer": (
            f"{_PLAN}:_trainer_settings",
            f"{_PLAN}:_duration",
            f"{_PLAN}:_log_every_n_steps",
            f"{_GROUPS}:precisions",
            f"{_DISTRIBUTED}:distributed_settings",
        ),
        "HFModule": ("hf_lightning.adapters.module:HFModule",),
        "DataSettings": (f"{_GROUPS}:data_settings",),
        "DDPStrategy": (f"{_DISTRIBUTED}:distributed_settings",),
        "FSDP strategy": ("hf_lightning.args.fsdp_settings:fsdp_settings",),
        "DeepSpeed strategy": ("hf_lightning.args.deepspeed_config:deepspeed_settings",),
        "Samplers": (f"{_FACADE}.data", "hf_lightning.adapters.samplers"),
        "Trainer facade": (_FACADE,),
        "Trainer accelerator": ("hf_lightning.args.accelerator",),
        "Trainer Hub publisher": (f"{_FACADE}.hub",),
        "Trackio reporter": ("hf_lightning.adapters.callbacks.trackio",),
        "Trainer checkpointing": (f"{_FACADE}.checkpointing", "hf_lightning.checkpoint"),
        "Trainer best-model tracking": (f"{_FACADE}.evaluation", f"{_FACADE}.checkpointing"),
        "Evaluation loop": (
            f"{_FACADE}.eval_loop",
            f"{_FACADE}.evaluation",
            f"{_GROUPS}:eval_settings",
            f"{_GROUPS}:precisions",
        ),
        "HF logging": ("hf_lightning.callbacks.builtin",),
        "DefaultFlowCallback": ("hf_lightning.callbacks.builtin",),
        "hf_lightning.optim": ("hf_lightning.optim",),
        "TrainingArguments.get_warmup_steps": (f"{_RUNTIME}:get_warmup_steps",),
        "TrainingArguments.get_process_log_level": (
            f"{_RUNTIME}:get_process_log_level",
            f"{_RUNTIME}:should_log",
        ),
        "TrainingArguments.eval_batch_size": (f"{_RUNTIME}:eval_batch_size",),
        "Lightning loggers": ("hf_lightning.adapters.loggers",),
        "WandbLogger": ("hf_lightning.adapters.loggers",),
        "JITCheckpoint": (f"{_PLAN}:to_lightning",),
        "Seq2SeqTrainer": (f"{_FACADE}.seq2seq",),
        "alias of": ("hf_lightning.args.normalize",),
    }
)
"""Carrier key (how a carrier part starts) -> the code that carries it."""

UNCHECKED_STATUSES = ("not yet", "not applicable")
"""Rows with these statuses name no working carrier, so nothing is checked."""


def carrier_keys(carrier: str) -> list[str | None]:
    """The :data:`CARRIER_SOURCES` key of each ``" + "`` part of ``carrier`` (``None``: no key fits)."""
    keys = sorted(CARRIER_SOURCES, key=len, reverse=True)  # "Trainer facade ..." before shorter keys
    return [
        next((key for key in keys if part.strip().startswith(key)), None) for part in carrier.split(" + ")
    ]


def _module_path(module: str) -> list[Path]:
    """The source files of ``module`` (all of them for a package), found without importing it."""
    parts = module.split(".")
    spec = importlib.util.find_spec(".".join(parts[:2]))  # imports only the top package
    if spec is None:
        raise ValueError(f"CARRIER_SOURCES names {module!r}, which cannot be found")
    if spec.submodule_search_locations is None:
        return [Path(str(spec.origin))]
    base = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts[2:])
    if base.is_dir():
        return sorted(base.rglob("*.py"))
    return [base.with_suffix(".py")]


@functools.cache
def names_read(source: str) -> frozenset[str]:
    """Attribute names and identifier-like strings in ``source`` (``"module"`` or ``"module:name"``)."""
    module, _, name = source.partition(":")
    found: set[str] = set()
    for path in _module_path(module):
        tree: ast.AST = ast.parse(path.read_text(encoding="utf-8"))
        if name:
            tree = next(
                node
                for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name
            )
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                found.add(node.value)
    return frozenset(found)


def unread_claims(table: Mapping[str, Any]) -> list[str]:
    """``"field: carrier part"`` for every claimed carrier part whose code does not read the field.

    ``table`` maps field names to rows with ``carrier`` and ``status`` (``ArgumentRow``). A part no
    key fits is reported as well, so every carrier is checked.
    """
    problems = []
    for name, row in table.items():
        if row.status in UNCHECKED_STATUSES:
            continue
        for part, key in zip(row.carrier.split(" + "), carrier_keys(row.carrier)):
            if key is None:
                problems.append(f"{name}: {part.strip()!r} names no carrier of CARRIER_SOURCES")
            elif not any(name in names_read(source) for source in CARRIER_SOURCES[key]):
                problems.append(f"{name}: {part.strip()!r} does not read it")
    return problems
