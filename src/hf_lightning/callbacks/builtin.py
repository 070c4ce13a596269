"""The callbacks the Trainer ships: the default log/eval/save flow, log printing, progress bars, early stopping.

Their decisions match transformers 5.24 step for step (tests/parity/test_callbacks_parity.py). Strategy
arguments may be enum members or plain strings (``"steps"``, ``"epoch"``, ``"no"``, ``"best"``).
"""

from __future__ import annotations

from typing import Any

from hf_lightning.args.enums import enum_value
from hf_lightning.best_metric import improves
from hf_lightning.callbacks.api import ExportableState, TrainerCallback
from hf_lightning.trainer_utils import has_length
from hf_lightning.utils.logging import get_logger

__all__ = [
    "DefaultFlowCallback",
    "EarlyStoppingCallback",
    "EarlyStoppingSetupError",
    "PrinterCallback",
    "ProgressCallback",
]

logger = get_logger(__name__)


def _format_logs(logs: dict[str, Any], max_str_len: int | None = None) -> dict[str, Any]:
    """A copy of ``logs`` with floats as 4 significant digits and over-long strings replaced by a notice."""
    shown: dict[str, Any] = {}
    for key, value in logs.items():
        if isinstance(value, str) and max_str_len is not None and len(value) > max_str_len:
            shown[key] = (
                f"[String too long to display, length: {len(value)} > {max_str_len}. "
                "Consider increasing `max_str_len` if needed.]"
            )
        elif isinstance(value, float):
            shown[key] = f"{value:.4g}"
        else:
            shown[key] = value
    return shown


class EarlyStoppingSetupError(ValueError, AssertionError):
    """``EarlyStoppingCallback`` without a metric or without evaluations: a ``ValueError`` naming the argument,
    and the ``AssertionError`` transformers' callback raises there (``except AssertionError`` keeps working)."""


class DefaultFlowCallback(TrainerCallback):
    """Implements ``logging_strategy``, ``eval_strategy``, ``save_strategy`` and ``max_steps``: sets the
    control flags that make the Trainer log, evaluate, save and stop.

    Per step (``on_step_end``): log at step 1 with ``logging_first_step`` and every ``state.logging_steps``
    with the "steps" logging strategy; evaluate every ``state.eval_steps`` once ``global_step >= eval_delay``;
    save every ``state.save_steps`` (when > 0). At ``max_steps`` training stops, and a final evaluation and
    save are requested for the "steps" strategies. Per epoch (``on_epoch_end``) the "epoch" strategies do
    the same. ``save_strategy="best"`` saves are decided by the Trainer after each evaluation, not here.
    """

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        eval_by_steps = enum_value(args.eval_strategy) == "steps"
        eval_allowed = args.eval_delay <= step
        if step == 1 and args.logging_first_step:
            control.should_log = True
        if enum_value(args.logging_strategy) == "steps" and step % state.logging_steps == 0:
            control.should_log = True
        if eval_by_steps and step % state.eval_steps == 0 and eval_allowed:
            control.should_evaluate = True
        save_by_steps = enum_value(args.save_strategy) == "steps"
        if save_by_steps and state.save_steps > 0 and step % state.save_steps == 0:
            control.should_save = True
        if step >= state.max_steps:
            control.should_training_stop = True
            # A last evaluation unless this step already had one; a last save with step-based saving.
            if eval_by_steps and step % state.eval_steps != 0 and eval_allowed:
                control.should_evaluate = True
            if save_by_steps:
                control.should_save = True
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        if enum_value(args.logging_strategy) == "epoch":
            control.should_log = True
        if enum_value(args.eval_strategy) == "epoch" and args.eval_delay <= state.epoch:
            control.should_evaluate = True
        if enum_value(args.save_strategy) == "epoch":
            control.should_save = True
        return control


class ProgressCallback(TrainerCallback):
    """Shows a tqdm bar for training (in steps) and for each evaluation/prediction (in batches), and writes
    logs under the training bar. Strings longer than ``max_str_len`` are replaced by a notice; floats are
    shown with 4 significant digits; ``total_flos`` is not shown. Only the world's main process draws.
    """

    def __init__(self, max_str_len: int = 100):
        self.training_bar = None
        self.prediction_bar = None
        self.max_str_len = max_str_len
        self.current_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.training_bar = tqdm(total=state.max_steps, dynamic_ncols=True)
        self.current_step = 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None:
            self.training_bar.update(state.global_step - self.current_step)
            self.current_step = state.global_step

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        if state.is_world_process_zero and has_length(eval_dataloader):
            if self.prediction_bar is None:
                from tqdm.auto import tqdm

                self.prediction_bar = tqdm(
                    total=len(eval_dataloader), leave=self.training_bar is None, dynamic_ncols=True
                )
            self.prediction_bar.update(1)

    def _close_prediction_bar(self, state) -> None:
        if not state.is_world_process_zero:
            return
        if self.prediction_bar is not None:
            self.prediction_bar.close()
        self.prediction_bar = None

    def on_evaluate(self, args, state, control, **kwargs):
        self._close_prediction_bar(state)

    def on_predict(self, args, state, control, **kwargs):
        self._close_prediction_bar(state)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None:
            shown = _format_logs(logs or {}, self.max_str_len)
            shown.pop("total_flos", None)
            self.training_bar.write(str(shown))

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        if self.training_bar is not None:
            self.training_bar.close()
        self.training_bar = None


class PrinterCallback(TrainerCallback):
    """Prints each log dict (floats with 4 significant digits) on the local main process.

    Like transformers, it removes ``total_flos`` from the dict it receives, so callbacks after it do not see
    that key.
    """

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        logs.pop("total_flos", None)
        if state.is_local_process_zero:
            print(_format_logs(logs))


class EarlyStoppingCallback(TrainerCallback, ExportableState):
    """Implements early stopping: stops training after ``early_stopping_patience`` evaluations in a row
    that did not improve ``metric_for_best_model`` by more than ``early_stopping_threshold``.

    Improvement is judged against ``state.best_metric``, which the Trainer updates when it saves (so with
    ``save_steps`` different from ``eval_steps`` an evaluation only counts at save steps), in the direction
    ``greater_is_better`` gives. Needs ``metric_for_best_model`` and an ``eval_strategy`` other than "no".
    Its counter is saved in checkpoints (`ExportableState`).
    """

    def __init__(self, early_stopping_patience: int = 1, early_stopping_threshold: float | None = 0.0):
        self.early_stopping_patience = early_stopping_patience
        self.early_stopping_threshold = early_stopping_threshold
        # How many evaluations in a row failed to improve the metric.
        self.early_stopping_patience_counter = 0

    def check_metric_value(self, args, state, control, metric_value) -> None:
        """Reset the counter if ``metric_value`` improves on ``state.best_metric``; else count one more."""
        threshold = self.early_stopping_threshold or 0.0
        best = state.best_metric
        if improves(metric_value, best, args.greater_is_better) and (
            best is None or abs(metric_value - best) > threshold
        ):
            self.early_stopping_patience_counter = 0
        else:
            self.early_stopping_patience_counter += 1

    def on_train_begin(self, args, state, control, **kwargs):
        if not args.load_best_model_at_end:
            logger.warning(
                "Using EarlyStoppingCallback without load_best_model_at_end=True. "
                "Once training is finished, the best model will not be loaded automatically."
            )
        if args.metric_for_best_model is None:
            raise EarlyStoppingSetupError(
                "EarlyStoppingCallback requires metric_for_best_model to be defined: set "
                "`TrainingArguments(metric_for_best_model=...)` to the evaluation metric to watch, e.g. 'loss'."
            )
        if enum_value(args.eval_strategy) == "no":
            raise EarlyStoppingSetupError(
                "EarlyStoppingCallback requires IntervalStrategy of steps or epoch: "
                "`TrainingArguments(eval_strategy='no')` is not supported; choose one of: 'steps', 'epoch'."
            )

    def on_evaluate(self, args, state, control, metrics, **kwargs):
        name = args.metric_for_best_model
        if not name.startswith("eval_"):
            name = f"eval_{name}"
        value = metrics.get(name)
        if value is None:
            logger.warning(
                "early stopping required metric_for_best_model, but did not find %s so early stopping"
                " is disabled",
                name,
            )
            return
        self.check_metric_value(args, state, control, value)
        if self.early_stopping_patience_counter >= self.early_stopping_patience:
            control.should_training_stop = True

    def state(self) -> dict:
        """The patience and threshold as arguments, the counter as an attribute."""
        return {
            "args": {
                "early_stopping_patience": self.early_stopping_patience,
                "early_stopping_threshold": self.early_stopping_threshold,
            },
            "attributes": {"early_stopping_patience_counter": self.early_stopping_patience_counter},
        }
