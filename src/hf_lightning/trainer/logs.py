"""Logging and the log / evaluate / save decision after each optimizer step, as transformers does."""

from __future__ import annotations

from typing import Any

import torch

from hf_lightning.trainer.base import TrainerBase
from hf_lightning.trainer_utils import speed_metrics

__all__ = ["TrainerLoggingMixin"]


class TrainerLoggingMixin(TrainerBase):
    """``log`` and ``_maybe_log_save_evaluate``: ``state.log_history`` with transformers' keys and cadence."""

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Record ``logs`` in ``state.log_history`` (with epoch and step) and send them to the callbacks."""
        if self.state.epoch is not None:
            logs["epoch"] = self.state.epoch
        if self.args.include_num_input_tokens_seen not in ("no", False, None):
            logs["num_input_tokens_seen"] = self.state.num_input_tokens_seen
            if start_time is not None:
                seen = self.state.num_input_tokens_seen - self._initial_num_input_tokens_seen
                logs.update(speed_metrics("train", start_time, num_tokens=seen))
        output = {**logs, "step": self.state.global_step}
        self.state.log_history.append(output)
        self.control = self.callback_handler.on_log(self.args, self.state, self.control, logs)

    def _maybe_log_save_evaluate(
        self,
        tr_loss: torch.Tensor,
        grad_norm: Any,
        model: Any,
        trial: Any,
        epoch: float,
        ignore_keys_for_eval: list[str] | None,
        start_time: float,
        learning_rate: float | None = None,
    ) -> None:
        if self.control.should_log and self.state.global_step > self._globalstep_last_logged:
            tr_loss_scalar = self.accelerator.gather(tr_loss.detach()).mean().item()
            tr_loss -= tr_loss
            logs: dict[str, float] = {
                "loss": tr_loss_scalar / (self.state.global_step - self._globalstep_last_logged)
            }
            if grad_norm is not None:
                logs["grad_norm"] = grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm
            logs["learning_rate"] = learning_rate if learning_rate is not None else self._get_learning_rate()
            self._total_loss_scalar += tr_loss_scalar
            self._globalstep_last_logged = self.state.global_step
            self.store_flos()
            self.log(logs, start_time)
        if self.control.should_evaluate:
            metrics = self._evaluate(trial, ignore_keys_for_eval)
            is_new_best = self._determine_best_metric(metrics=metrics, trial=trial)
            if self.args.save_strategy == "best":
                self.control.should_save = is_new_best
        if self.control.should_save:
            self._save_checkpoint(model, trial)
            self.control = self.callback_handler.on_save(self.args, self.state, self.control)

    def _get_learning_rate(self) -> float:
        scheduler = self.lr_scheduler
        if (
            scheduler is None
            or isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
            or not hasattr(scheduler, "get_last_lr")
        ):
            return float(self.optimizer.param_groups[0]["lr"])
        return float(scheduler.get_last_lr()[0])
