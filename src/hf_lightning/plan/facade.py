"""The plan's facade groups: what the ``hf_lightning.Trainer`` facade reads, one frozen group per idea.

Each group is built from ``TrainingArguments`` by one pure function of ``hf_lightning.args.translate``
(the group's name in snake case); strategies are
their plain string values (``"steps"``, ``"epoch"``, ``"best"``, ``"no"``). Field names are the
arguments' own, so ``trainer.plan.schedule.eval_strategy`` is ``args.eval_strategy`` translated once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "CheckpointSettings",
    "EvalLoopSettings",
    "HubSettings",
    "RunLength",
    "RuntimeSettings",
    "ScheduleSettings",
]


@dataclass(frozen=True)
class ScheduleSettings:
    """When to log, evaluate and save, and which metric is the best: the Trainer's loop and best-model
    tracking read these (``DefaultFlowCallback`` is handed ``args`` by the callback API and reads them)."""

    logging_strategy: str
    eval_strategy: str
    eval_on_start: bool
    save_strategy: str
    metric_for_best_model: str | None
    greater_is_better: bool | None
    load_best_model_at_end: bool


@dataclass(frozen=True)
class CheckpointSettings:
    """Where and how checkpoints are written, rotated and restored."""

    output_dir: str | None
    save_total_limit: int | None
    save_on_each_node: bool
    save_only_model: bool
    restore_callback_states_from_checkpoint: bool
    deepspeed: Any
    """The DeepSpeed config as given (a dict, JSON string or file), else ``None``."""


@dataclass(frozen=True)
class HubSettings:
    """Pushing to the Hugging Face Hub."""

    push_to_hub: bool
    hub_model_id: str | None
    hub_token: str | None
    hub_revision: str | None
    hub_strategy: str
    hub_private_repo: bool | None
    hub_always_push: bool

    def __repr__(self) -> str:  # the token never shows in a printed plan
        token = None if self.hub_token is None else "<HUB_TOKEN>"
        return (
            f"HubSettings(push_to_hub={self.push_to_hub}, hub_model_id={self.hub_model_id!r}, "
            f"hub_token={token}, hub_revision={self.hub_revision!r}, hub_strategy={self.hub_strategy!r}, "
            f"hub_private_repo={self.hub_private_repo}, hub_always_push={self.hub_always_push})"
        )


@dataclass(frozen=True)
class EvalLoopSettings:
    """How the evaluation loop gathers, accumulates and scores its batches."""

    prediction_loss_only: bool
    eval_do_concat_batches: bool
    batch_eval_metrics: bool
    include_for_metrics: tuple[str, ...]
    eval_accumulation_steps: int | None
    eval_use_gather_object: bool


@dataclass(frozen=True)
class RunLength:
    """How long ``train()`` runs, as asked (the steps it computes from the loader are the run's own)."""

    max_steps: int
    num_train_epochs: float
    ignore_data_skip: bool
    auto_find_batch_size: bool


@dataclass(frozen=True)
class RuntimeSettings:
    """The process set-up a run starts with: seeding, kernels, memory reporting, progress display."""

    seed: int
    full_determinism: bool
    tf32: bool | None
    use_liger_kernel: bool
    liger_kernel_config: Any
    skip_memory_metrics: bool
    disable_tqdm: bool
    use_cache: bool
