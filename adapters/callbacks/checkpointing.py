"""Implements ``TrainingArguments.save_strategy`` / ``save_steps`` / ``save_total_limit`` and best-model
tracking for a plain ``lightning.Trainer``: checkpoints in transformers' folder format.

``hf_lightning.Trainer`` saves through its own HF loop; this callback gives the same folders to a Lightning
user who fits any ``LightningModule`` (an ``HFModule`` saves its HF model with ``save_pretrained``, any
other module its own state dict as ``model.safetensors``)::

    trainer = lightning.Trainer(callbacks=[HFCheckpoint("out", save_strategy="best", monitor="val_loss")])
    trainer.fit(module)                    # -> out/checkpoint-{global_step}/ when val_loss improves

Each folder holds the model, ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth`` (per rank),
``trainer_state.json`` and, for an ``HFModule``, its ``TrainingArguments``; it is written crash-safely by
:func:`hf_lightning.checkpoint.store.save_checkpoint`. The best metric is read from ``trainer.callback_metrics``
after each validation. The callback's own state (best metric and checkpoint) round-trips through Lightning
checkpoints via ``state_dict`` / ``load_state_dict``.
"""

from __future__ import annotations

import math
import os
from typing import Any, cast

import lightning as L
import torch

from hf_lightning.args.runtime import is_whole_or_ratio, resolve_steps
from hf_lightning.best_metric import default_greater_is_better, improves
from hf_lightning.callbacks import TrainerState
from hf_lightning.checkpoint.durability import wait_for_durability
from hf_lightning.checkpoint.rotation import save_tracked_checkpoint
from hf_lightning.checkpoint.store import checkpoint_path, save_checkpoint

__all__ = ["HFCheckpoint", "save_hf_checkpoint"]

_STRATEGIES = ("no", "steps", "epoch", "best")


def _is_hf_module(pl_module: L.LightningModule) -> bool:
    """Whether ``pl_module`` is an ``HFModule`` or a subclass of it (one that adds metrics, say)."""
    from ..module import HFModule

    return isinstance(pl_module, HFModule)


def _model_of(pl_module: L.LightningModule) -> torch.nn.Module:
    """The model to save: an ``HFModule``'s wrapped HF model, else the LightningModule itself."""
    inner = getattr(pl_module, "model", None)
    return inner if _is_hf_module(pl_module) and isinstance(inner, torch.nn.Module) else pl_module


def _scheduler_of(trainer: L.Trainer, pl_module: L.LightningModule) -> Any:
    own = getattr(pl_module, "hf_lr_scheduler", None)
    if own is not None:
        return own
    configs = getattr(trainer, "lr_scheduler_configs", None) or []
    return configs[0].scheduler if configs else None


def save_hf_checkpoint(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    output_dir: str,
    *,
    state: TrainerState | None = None,
    save_only_model: bool = False,
    processing_class: Any = None,
) -> str:
    """Write ``output_dir/checkpoint-{trainer.global_step}`` for the module being fitted; returns its path.

    Every rank must call it (each writes its RNG state); the global rank 0 writes the shared files.
    """
    optimizers = trainer.optimizers
    state = (
        state
        if state is not None
        else TrainerState(global_step=trainer.global_step, epoch=float(trainer.current_epoch))
    )
    world = trainer.world_size
    return save_checkpoint(
        output_dir,
        trainer.global_step,
        model=_model_of(pl_module),
        optimizer=optimizers[0] if optimizers else None,
        scheduler=_scheduler_of(trainer, pl_module),
        scaler=getattr(trainer.precision_plugin, "scaler", None),
        state=state,
        args=cast(Any, pl_module).settings.saved_arguments if _is_hf_module(pl_module) else None,
        processing_class=processing_class,
        save_only_model=save_only_model,
        process_index=trainer.global_rank,
        world_size=world,
        is_main_process=trainer.is_global_zero,
        barrier=trainer.strategy.barrier if world > 1 else None,
    )


def _scalar(value: Any) -> float | None:
    if isinstance(value, torch.Tensor):
        return float(value.item()) if value.numel() == 1 else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


class HFCheckpoint(L.Callback):
    """Writes transformers-format checkpoints from a ``lightning.Trainer`` (see the module docstring).

    Args:
        output_dir: where the ``checkpoint-{global_step}`` folders go.
        save_strategy: "steps" (every ``save_steps`` optimizer steps), "epoch" (each epoch end), "best"
            (after a validation that improved ``monitor``) or "no".
        save_steps: steps between saves; a float in (0, 1) is a ratio of the run's total steps.
        save_total_limit: keep at most this many folders (the newest and the best are always kept).
        monitor: the metric in ``trainer.callback_metrics`` that defines the best checkpoint.
        greater_is_better: whether a larger ``monitor`` is better; by default, unless its name ends in "loss".
        save_only_model: write only the model (no optimizer, scheduler or RNG state).
        processing_class: a tokenizer or processor saved into each folder (``save_pretrained``).
    """

    def __init__(
        self,
        output_dir: str | os.PathLike[str],
        save_strategy: str = "steps",
        save_steps: float = 500,
        save_total_limit: int | None = None,
        monitor: str | None = None,
        greater_is_better: bool | None = None,
        save_only_model: bool = False,
        processing_class: Any = None,
    ) -> None:
        if save_strategy not in _STRATEGIES:
            raise ValueError(
                f"`HFCheckpoint(save_strategy={save_strategy!r})` is not supported; choose one of: "
                f"{', '.join(_STRATEGIES)}."
            )
        if (
            isinstance(save_steps, bool)
            or not isinstance(save_steps, (int, float))
            or save_steps <= 0
            or not is_whole_or_ratio(save_steps)
        ):
            raise ValueError(
                f"`HFCheckpoint(save_steps={save_steps!r})` must be a positive int or a ratio in (0, 1)."
            )
        if save_strategy == "best" and monitor is None:
            raise ValueError("`HFCheckpoint(save_strategy='best')` needs `monitor`, the metric to improve.")
        if save_total_limit is not None and (not isinstance(save_total_limit, int) or save_total_limit < 1):
            raise ValueError(
                f"`HFCheckpoint(save_total_limit={save_total_limit!r})` must be None or an int >= 1."
            )
        self.output_dir = os.fspath(output_dir)
        self.save_strategy, self.save_steps, self.save_total_limit = (
            save_strategy,
            save_steps,
            save_total_limit,
        )
        self.monitor = monitor
        self.greater_is_better = (
            greater_is_better if greater_is_better is not None else default_greater_is_better(monitor)
        )
        self.save_only_model, self.processing_class = save_only_model, processing_class
        self.best_metric: float | None = None
        self.best_global_step: int | None = None
        self.best_model_checkpoint: str | None = None
        self.last_saved_step: int | None = None
        self.log_history: list[dict[str, float]] = []
        self._every = 0
        self._epoch = 0.0

    # --- Lightning hooks -----------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        total = trainer.estimated_stepping_batches if self.save_steps < 1 else 0
        if not math.isfinite(total):
            raise ValueError(
                f"`HFCheckpoint(save_steps={self.save_steps})` is a ratio of the total steps, which this "
                "run does not know; give `max_steps` to the lightning.Trainer or an int."
            )
        self._every = resolve_steps(self.save_steps, total)  # as TrainingArguments' *_steps ratios

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        batches = trainer.num_training_batches
        fraction = (batch_idx + 1) / batches if isinstance(batches, int) and batches > 0 else 0.0
        self._epoch = trainer.current_epoch + fraction
        step = trainer.global_step
        if (
            self.save_strategy == "steps"
            and step > 0
            and step % self._every == 0
            and step != self.last_saved_step
        ):
            self.save(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch = float(trainer.current_epoch + 1)
        if self.save_strategy == "epoch":
            self.save(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        wait_for_durability()  # the last checkpoint is on disk, rotation done (checkpoint/durability.py)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.monitor is None:
            return
        if self._improved(trainer) and self.save_strategy == "best":
            self.save(trainer, pl_module)
        elif self.best_global_step == self.last_saved_step == trainer.global_step:
            self.best_model_checkpoint = checkpoint_path(self.output_dir, trainer.global_step)

    # --- decisions --------------------------------------------------------------------------------
    def _improved(self, trainer: L.Trainer) -> bool:
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            raise KeyError(
                f"`HFCheckpoint(monitor={self.monitor!r})` is not among the logged metrics; "
                f"available: {sorted(metrics)}."
            )
        value = _scalar(metrics[self.monitor])
        if value is None:
            raise ValueError(
                f"`HFCheckpoint(monitor={self.monitor!r})` must name a single number, got "
                f"{type(metrics[self.monitor]).__name__} {metrics[self.monitor]!r}."
            )
        if not improves(value, self.best_metric, self.greater_is_better):
            return False
        self.best_metric, self.best_global_step = value, trainer.global_step
        return True

    def save(self, trainer: L.Trainer, pl_module: L.LightningModule) -> str:
        """Write ``checkpoint-{global_step}`` now (on every rank), track the best one and rotate."""
        step = trainer.global_step
        logs = {
            k: v for k, v in ((k, _scalar(v)) for k, v in trainer.callback_metrics.items()) if v is not None
        }
        self.log_history.append({**logs, "epoch": self._epoch, "step": step})

        def write(best: str | None) -> str:
            self.best_model_checkpoint = best
            return save_hf_checkpoint(
                trainer,
                pl_module,
                self.output_dir,
                state=self._state(trainer, step),
                save_only_model=self.save_only_model,
                processing_class=self.processing_class,
            )

        folder, _ = save_tracked_checkpoint(
            self.output_dir,
            step,
            best_global_step=self.best_global_step,
            best_model_checkpoint=self.best_model_checkpoint,
            write=write,
            save_total_limit=self.save_total_limit,
            is_saver=trainer.is_global_zero,
        )
        self.last_saved_step = step
        return folder

    def _state(self, trainer: L.Trainer, step: int) -> TrainerState:
        """The ``trainer_state.json`` of the folder being written."""
        return TrainerState(
            global_step=step,
            epoch=self._epoch,
            max_steps=max(trainer.max_steps, 0),
            save_steps=self._every or 500,
            best_metric=self.best_metric,
            best_global_step=self.best_global_step,
            best_model_checkpoint=self.best_model_checkpoint,
            log_history=list(self.log_history),
            num_train_epochs=trainer.max_epochs or 0,
            is_world_process_zero=trainer.is_global_zero,
        )

    # --- Lightning checkpoint state ------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "best_metric": self.best_metric,
            "best_global_step": self.best_global_step,
            "best_model_checkpoint": self.best_model_checkpoint,
            "last_saved_step": self.last_saved_step,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for key in ("best_metric", "best_global_step", "best_model_checkpoint", "last_saved_step"):
            setattr(self, key, state_dict.get(key))
