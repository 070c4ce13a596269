"""``TrainerPlan``: every group the Trainer reads, built from one ``TrainingArguments``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hf_lightning.plan.facade import (
    CheckpointSettings,
    EvalLoopSettings,
    HubSettings,
    RunLength,
    RuntimeSettings,
    ScheduleSettings,
)
from hf_lightning.plan.groups import DataSettings, EvalSettings, ModuleSettings

__all__ = ["TrainerPlan"]


@dataclass(frozen=True)
class TrainerPlan:
    """Every group the Trainer reads, built from one ``TrainingArguments``."""

    module: ModuleSettings
    data: DataSettings
    schedule: ScheduleSettings
    checkpoint: CheckpointSettings
    hub: HubSettings
    evaluation: EvalLoopSettings
    length: RunLength
    runtime: RuntimeSettings
    eval_placement: EvalSettings
    """Where an evaluation outside ``train()`` runs and how its ranks meet (the engine's ``EvalEngine``)."""

    def __str__(self) -> str:
        lines = ["TrainerPlan("]
        for group in dataclasses.fields(self):
            lines.append(f"  {group.name}:")
            value = getattr(self, group.name)
            for item in dataclasses.fields(value):
                shown = getattr(value, item.name)
                if item.name.endswith("_token") and shown is not None:
                    shown = f"<{item.name.upper()}>"
                lines.append(f"    {item.name} = {shown!r}")
        lines.append(")")
        return "\n".join(lines)
