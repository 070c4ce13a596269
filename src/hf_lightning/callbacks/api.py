"""The callback vocabulary of the HF Trainer: state, control, events and the handler that dispatches them.

A training run, written as the loop the events describe (``# <event>`` marks where each one fires)::

    # on_init_end                          (end of Trainer.__init__)
    # on_train_begin
    for epoch in epochs:
        # on_epoch_begin
        for step in optimizer_steps:
            # on_step_begin
            for micro_batch in accumulation_window:
                forward, backward
                # on_substep_end            (every micro-batch but the last)
            clip gradients
            # on_pre_optimizer_step
            optimizer.step()
            # on_optimizer_step
            # on_step_end                   (DefaultFlowCallback decides log / evaluate / save / stop)
            log -> # on_log;  evaluate -> # on_prediction_step ... # on_evaluate;  save -> # on_save
        # on_epoch_end
    # on_train_end
    predict -> # on_prediction_step ... # on_predict;   push_to_hub -> # on_push_begin

`TrainerState` is written to ``trainer_state.json`` with the same schema as ``transformers``, so a state
file of either library loads with the other. The built-in callbacks (`DefaultFlowCallback`,
`PrinterCallback`, `ProgressCallback`, `EarlyStoppingCallback`) live in ``builtin`` and the
`CallbackHandler` in ``handler``; the package ``hf_lightning.callbacks`` exports all of them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from hf_lightning.utils.logging import get_logger

__all__ = [
    "ExportableState",
    "TRAINER_EVENTS",
    "TrainerCallback",
    "TrainerControl",
    "TrainerState",
]

logger = get_logger(__name__)


#: Every event a `TrainerCallback` can receive, in the order they first fire in a training run.
TRAINER_EVENTS: tuple[str, ...] = (
    "on_init_end",
    "on_train_begin",
    "on_epoch_begin",
    "on_step_begin",
    "on_substep_end",
    "on_pre_optimizer_step",
    "on_optimizer_step",
    "on_step_end",
    "on_log",
    "on_prediction_step",
    "on_evaluate",
    "on_save",
    "on_epoch_end",
    "on_train_end",
    "on_predict",
    "on_push_begin",
)


class ExportableState:
    """Base class for objects whose state a checkpoint keeps in ``trainer_state.json`` and resume restores.

    Subclasses implement `state()`, returning ``{"args": {...}, "attributes": {...}}`` with JSON-friendly values:
    ``args`` are passed to the constructor by `from_state`, ``attributes`` are set on the new instance after.
    """

    def state(self) -> dict:
        """Return ``{"args": constructor kwargs, "attributes": other attributes}`` describing this object."""
        raise NotImplementedError(f"{type(self).__name__} must implement `state()` to be an ExportableState.")

    @classmethod
    def from_state(cls, state: dict):
        """Build an instance from what `state()` returned."""
        instance = cls(**state["args"])
        for name, value in state["attributes"].items():
            setattr(instance, name, value)
        return instance


def _export_callback_states(callbacks: list) -> dict[str, Any]:
    """Map class names to `state()` dicts; several callbacks of one class give a list of states."""
    states: dict[str, Any] = {}
    for callback in callbacks:
        if not isinstance(callback, ExportableState):
            raise TypeError(
                "`TrainerState(stateful_callbacks=...)` accepts only callbacks that inherit `ExportableState`, "
                f"got {type(callback).__name__}"
            )
        name = type(callback).__name__
        if name not in states:
            states[name] = callback.state()
        elif isinstance(states[name], list):
            states[name].append(callback.state())
        else:
            states[name] = [states[name], callback.state()]
    return states


def _trial_params(trial: Any) -> dict[str, Any]:
    """The hyperparameters of a search trial: an Optuna trial's ``params``, or a Ray/W&B config dict."""
    if isinstance(trial, dict):
        return trial
    params = getattr(trial, "params", None)
    if isinstance(params, dict):
        return params
    raise TypeError(
        f"`trial` must be an Optuna trial (with `.params`) or a dict of hyperparameters, got {type(trial).__name__}"
    )


@dataclass
class TrainerState:
    """What the Trainer knows about the run; saved as ``trainer_state.json`` in every checkpoint.

    One step is one optimizer update: with ``gradient_accumulation_steps=n`` a step consumes ``n`` batches.
    ``epoch`` is fractional during training (``1.5`` is half-way through the second epoch). ``log_history``
    holds every dict passed to ``Trainer.log``. ``best_metric`` / ``best_global_step`` /
    ``best_model_checkpoint`` track the best evaluation when ``metric_for_best_model`` is set.
    ``stateful_callbacks`` maps callback class names to their `ExportableState.state()`; given a list of
    callbacks it converts them to that mapping.
    """

    epoch: float = 0
    global_step: int = 0
    max_steps: int = 0
    logging_steps: int = 500
    eval_steps: int = 500
    save_steps: int = 500
    train_batch_size: int | None = None
    num_train_epochs: int = 0
    num_input_tokens_seen: int = 0
    total_flos: float = 0
    log_history: list[dict[str, float]] = None  # type: ignore[assignment]
    best_metric: float | None = None
    best_global_step: int | None = None
    best_model_checkpoint: str | None = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    is_hyper_param_search: bool = False
    trial_name: str | None = None
    trial_params: dict[str, str | float | int | bool] | None = None
    stateful_callbacks: Any = None

    def __post_init__(self) -> None:
        if self.log_history is None:
            self.log_history = []
        if self.stateful_callbacks is None:
            self.stateful_callbacks = {}
        elif not isinstance(self.stateful_callbacks, dict):
            self.stateful_callbacks = _export_callback_states(list(self.stateful_callbacks))

    def save_to_json(self, json_path: str) -> None:
        """Write the state to ``json_path`` (indented, keys sorted: the same text transformers writes)."""
        text = json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(text)

    @classmethod
    def load_from_json(cls, json_path: str) -> TrainerState:
        """Read a state written by `save_to_json` (ours or transformers'); unknown keys are dropped with a warning."""
        with open(json_path, encoding="utf-8") as f:
            data = json.load(f)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            logger.warning("Ignoring unknown keys in %s: %s", json_path, ", ".join(unknown))
        return cls(**{k: v for k, v in data.items() if k in known})

    def compute_steps(self, args: Any, max_steps: int) -> None:
        """Resolve ``logging_steps``, ``eval_steps`` and ``save_steps`` from ``args``; values < 1 are ratios
        of ``max_steps``, rounded up."""
        for kind in ("logging", "eval", "save"):
            num_steps = getattr(args, f"{kind}_steps")
            if num_steps is None:
                continue
            if num_steps < 1:
                num_steps = math.ceil(max_steps * num_steps)
            setattr(self, f"{kind}_steps", num_steps)

    def init_training_references(
        self, trainer: Any, max_steps: int, num_train_epochs: Any, trial: Any
    ) -> None:
        """Record the run's totals, process ranks and search trial, read from a trainer-like object."""
        hp_name = getattr(trainer, "hp_name", None)
        current_trial = getattr(trainer, "_trial", None)
        if hp_name is not None and current_trial is not None:
            self.trial_name = hp_name(current_trial)
        self.trial_params = None if trial is None else _trial_params(trial)
        self.max_steps = max_steps
        self.num_train_epochs = num_train_epochs
        self.is_local_process_zero = trainer.is_local_process_zero()
        self.is_world_process_zero = trainer.is_world_process_zero()


@dataclass
class TrainerControl(ExportableState):
    """The switches callbacks flip to steer the loop.

    ``should_training_stop`` stays set once set (the run ends). ``should_epoch_stop`` is cleared at each
    epoch begin; ``should_save``, ``should_evaluate`` and ``should_log`` at each step begin, and each also
    by the event that carries it out (``on_save``, ``on_evaluate``, ``on_log``).
    """

    should_training_stop: bool = False
    should_epoch_stop: bool = False
    should_save: bool = False
    should_evaluate: bool = False
    should_log: bool = False

    def _new_training(self) -> None:
        """Reset for a new training run."""
        self.should_training_stop = False

    def _new_epoch(self) -> None:
        """Reset for a new epoch."""
        self.should_epoch_stop = False

    def _new_step(self) -> None:
        """Reset for a new optimizer step."""
        self.should_save = False
        self.should_evaluate = False
        self.should_log = False

    def state(self) -> dict:
        """All five flags as constructor arguments."""
        return {"args": dataclasses.asdict(self), "attributes": {}}


class TrainerCallback:
    """Base class for objects that watch the training loop and steer it through `TrainerControl`.

    Every event receives ``(args, state, control, **kwargs)``. ``kwargs`` always hold ``model``,
    ``processing_class``, ``optimizer``, ``lr_scheduler``, ``train_dataloader`` and ``eval_dataloader``;
    ``on_evaluate`` and ``on_predict`` add ``metrics``, ``on_log`` adds ``logs``. Only ``control`` may be
    changed; an event that returns a `TrainerControl` replaces the control the Trainer holds. The loop
    in the module docstring shows where each event fires.
    """

    def on_init_end(self, args, state, control, **kwargs):
        """At the end of ``Trainer.__init__``."""

    def on_train_begin(self, args, state, control, **kwargs):
        """At the beginning of training."""

    def on_train_end(self, args, state, control, **kwargs):
        """At the end of training."""

    def on_epoch_begin(self, args, state, control, **kwargs):
        """At the beginning of an epoch."""

    def on_epoch_end(self, args, state, control, **kwargs):
        """At the end of an epoch."""

    def on_step_begin(self, args, state, control, **kwargs):
        """At the beginning of an optimizer step (before its first micro-batch)."""

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        """After gradient clipping, before ``optimizer.step()``: gradients are final."""

    def on_optimizer_step(self, args, state, control, **kwargs):
        """After ``optimizer.step()``, before gradients are zeroed."""

    def on_substep_end(self, args, state, control, **kwargs):
        """At the end of a micro-batch inside a gradient-accumulation window."""

    def on_step_end(self, args, state, control, **kwargs):
        """At the end of an optimizer step, ``state.global_step`` already counting it."""

    def on_evaluate(self, args, state, control, **kwargs):
        """After an evaluation; ``metrics`` are in ``kwargs``."""

    def on_predict(self, args, state, control, metrics, **kwargs):
        """After a successful ``Trainer.predict``."""

    def on_save(self, args, state, control, **kwargs):
        """After a checkpoint is saved."""

    def on_log(self, args, state, control, **kwargs):
        """After ``Trainer.log``; the logged dict is ``kwargs["logs"]``."""

    def on_prediction_step(self, args, state, control, **kwargs):
        """After each batch of an evaluation or prediction loop."""

    def on_push_begin(self, args, state, control, **kwargs):
        """Before pushing to the Hub (``Trainer.push_to_hub`` and checkpoint pushes)."""
