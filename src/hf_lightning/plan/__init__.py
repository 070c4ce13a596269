"""The plan: ``TrainingArguments`` translated once into frozen groups of plain values, one per idea.

``Trainer.plan`` (a :class:`TrainerPlan`) is built in ``Trainer.__init__`` by
``hf_lightning.args.translate.build_plan`` and rebuilt only when the arguments change: a new
``trainer.args`` object, or a field set on it (each set bumps :func:`args_version`).
``print(trainer.plan)`` shows what runs. The engine reads the step and data groups (``groups.py``);
the facade reads all of them (``facade.py``). The path of one argument: ``docs/architecture.md``.
"""

from __future__ import annotations

from typing import Any

from hf_lightning.plan.facade import (
    CheckpointSettings,
    EvalLoopSettings,
    HubSettings,
    RunLength,
    RuntimeSettings,
    ScheduleSettings,
)
from hf_lightning.plan.groups import DataSettings, EvalSettings, ModuleSettings
from hf_lightning.plan.trainer_plan import TrainerPlan

__all__ = [
    "CheckpointSettings",
    "DataSettings",
    "EvalLoopSettings",
    "EvalSettings",
    "HubSettings",
    "ModuleSettings",
    "RunLength",
    "RuntimeSettings",
    "ScheduleSettings",
    "TrainerPlan",
    "args_version",
    "current_plan",
]


def args_version(args: Any) -> int:
    """How many times a field of ``args`` was set (``TrainingArguments.__setattr__`` counts)."""
    return args.__dict__.get("_plan_version", 0)


class _Cache:
    """The plan an owner last built, with the arguments and version it was built from; a copy or a pickled
    owner (a trial's Trainer sent to a Ray worker) starts empty and builds its own."""

    __slots__ = ("args", "owner", "plan", "version")

    def __init__(self, owner: int = 0) -> None:
        self.owner = owner
        """``id`` of the owner: a shallow copy of the owner shares this object, and must not share its plan."""
        self.args: Any = None
        self.version = -1
        self.plan: TrainerPlan | None = None

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (_Cache, ())


def current_plan(owner: Any) -> TrainerPlan:
    """The plan of ``owner.args``, kept in ``owner`` and rebuilt when ``owner.args`` is another object or
    one of its fields was set since (transformers reads ``self.args`` live; so does this plan)."""
    args = owner.args
    cache = owner.__dict__.get("_plan_cache")
    if cache is None or cache.owner != id(owner):
        cache = owner.__dict__["_plan_cache"] = _Cache(id(owner))
    version = args_version(args)
    if cache.plan is None or cache.args is not args or cache.version != version:
        from hf_lightning.args.translate import build_plan  # the arguments' module imports the groups

        cache.plan, cache.args, cache.version = build_plan(args), args, version
    return cache.plan
