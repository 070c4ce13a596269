"""Warn when a run resumes with other step intervals or batch size than its checkpoint was written with.

transformers compares ``logging_steps``, ``eval_steps``, ``save_steps`` and the per-device train batch
size with the values stored in the checkpoint's ``trainer_state.json`` and warns once, one line per
difference. The run goes on with the new values.

Beyond transformers (silent there), :func:`report_resume_changes` says what a resume cannot do as the
arguments ask (docs/divergences.md):

- the checkpoint's step already reaches the run's length: ``train()`` returns without a step;
- ``learning_rate`` or the schedule differs from the checkpoint's ``training_args.json``: which one applies
  (a restored scheduler keeps the checkpoint's peak rate; the schedule's shape is the arguments');
- another number of processes or per-device batch than the checkpoint's: the samples of a step and the
  data order change.
"""

from __future__ import annotations

import os
import re
from typing import Any

from hf_lightning.checkpoint.io import CheckpointError, load_training_args, plain_args_dict
from hf_lightning.utils.logging import get_logger

__all__ = ["compare_trainer_and_checkpoint_args", "report_resume_changes", "resume_argument_differences"]

logger = get_logger("hf_lightning.trainer_utils")

_STEP_FIELDS = ("logging_steps", "eval_steps", "save_steps")
_warned: set[str] = set()


def resume_argument_differences(training_args: Any, trainer_state: Any) -> list[str]:
    """One line per difference between the arguments and the checkpoint's state (none: an empty list)."""
    lines = []
    for name in _STEP_FIELDS:
        ours, stored = getattr(training_args, name, None), getattr(trainer_state, name, None)
        if ours is not None and stored is not None and ours != stored:
            lines.append(f"{name}: {ours} (from args) != {stored} (from trainer_state.json)")
    stored_batch = getattr(trainer_state, "train_batch_size", None)
    if stored_batch is not None:
        per_device = stored_batch // max(1, getattr(training_args, "n_gpu", 1) or 1)
        if training_args.per_device_train_batch_size != per_device:
            lines.append(
                f"per_device_train_batch_size: {training_args.per_device_train_batch_size} (from args) "
                f"!= {per_device} (from trainer_state.json)"
            )
    return lines


def compare_trainer_and_checkpoint_args(training_args: Any, trainer_state: Any) -> None:
    """Log the differences once per process (the same message is not repeated)."""
    lines = resume_argument_differences(training_args, trainer_state)
    if not lines:
        return
    message = (
        "Warning: The following arguments do not match the ones in the `trainer_state.json` within the "
        "checkpoint directory: " + "".join(f"\n\t{line}" for line in lines)
    )
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


_SCHEDULE = ("lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "warmup_ratio")
_RNG_FILE = re.compile(r"^rng_state_(\d+)\.pth$")
_resume_logger = get_logger("hf_lightning.trainer")  # transformers.trainer's twin, where scripts look


def _saved_world_size(folder: str) -> int | None:
    """The processes that wrote ``folder``: one RNG file each (none in a ``save_only_model`` checkpoint)."""
    names = os.listdir(folder)
    ranks = [int(m.group(1)) for m in map(_RNG_FILE.match, names) if m]
    if ranks:
        return max(ranks) + 1
    return 1 if "rng_state.pth" in names else None


def _schedule_lines(args: Any, saved: dict[str, Any], restored: bool, step: int) -> list[str]:
    ours = plain_args_dict(args)
    lines = []
    if "learning_rate" in saved and saved["learning_rate"] != ours["learning_rate"]:
        applies = (
            f"the checkpoint's {saved['learning_rate']} applies: its optimizer and scheduler state, restored, "
            "hold it"
            if restored
            else "yours applies (the checkpoint has no optimizer or scheduler state to restore)"
        )
        lines.append(
            f"learning_rate: {ours['learning_rate']} (from args) != {saved['learning_rate']} (checkpoint): {applies}"
        )
    for name in _SCHEDULE:
        if name in saved and name in ours and saved[name] != ours[name]:
            lines.append(
                f"{name}: {ours[name]!r} (from args) != {saved[name]!r} (checkpoint): the schedule of the "
                + (
                    f"arguments applies from step {step + 2} on, at the checkpoint's peak learning rate (step "
                    f"{step + 1} keeps the rate the checkpoint stored)"
                    if restored
                    else f"arguments applies from step {step + 1} on"
                )
            )
    return lines


def _layout_line(args: Any, saved: dict[str, Any], saved_world: int | None, batch: int) -> str | None:
    saved_batch, saved_ga = saved.get("per_device_train_batch_size"), saved.get("gradient_accumulation_steps")
    if saved_world is None or not isinstance(saved_batch, int) or not isinstance(saved_ga, int):
        return None
    before = (saved_world, saved_batch, saved_ga)
    now = (max(int(args.world_size), 1), batch, int(args.gradient_accumulation_steps))
    if before == now:
        return None
    per_step = (before[0] * before[1] * before[2], now[0] * now[1] * now[2])
    layout = (
        f"the checkpoint was written by {before[0]} process(es) x per_device_train_batch_size {before[1]} x "
        f"gradient_accumulation_steps {before[2]} ({per_step[0]} samples per step); this run has {now[0]} x "
        f"{now[1]} x {now[2]} ({per_step[1]} per step)"
    )
    if per_step[0] == per_step[1]:
        return (
            f"{layout}: a step takes as many samples, cut into other micro-batches or processes, so random "
            "operations (dropout) draw other numbers than the saved run would have"
        )
    return (
        f"{layout}: the steps already trained are skipped as steps of {per_step[1]} samples, so the resumed "
        "epoch goes on from another sample than the saved run would have (some samples of this epoch are "
        "trained twice, others not at all), and every later step takes other samples"
    )


def report_resume_changes(args: Any, state: Any, folder: str, max_steps: int, batch_size: int) -> list[str]:
    """Warn about what resuming from ``folder`` (its ``state`` loaded) cannot do as ``args`` ask; returns
    the warnings. ``batch_size`` is this run's per-device batch (``auto_find_batch_size`` may lower it)."""
    step = int(state.global_step)
    warnings = []
    if step >= max_steps:
        warnings.append(
            f"Resuming from `{folder}` at step {step}, but this run trains {max_steps} steps (max_steps / "
            f"num_train_epochs): the checkpoint already reached it, so train() returns without a training step. "
            "Raise max_steps (or num_train_epochs) to train further."
        )
    try:
        saved = load_training_args(folder)
    except CheckpointError:  # transformers' pickled training_args.bin, or none: nothing to compare with
        saved = {}
    names = os.listdir(folder)
    restored = "optimizer.pt" in names and "scheduler.pt" in names
    lines = _schedule_lines(args, saved, restored, step) if saved else []
    if lines:
        warnings.append(
            f"Resuming from `{folder}` with another learning-rate schedule than the checkpoint's:"
            + "".join(f"\n\t{line}" for line in lines)
        )
    layout = _layout_line(args, saved, _saved_world_size(folder), batch_size)
    if layout:
        warnings.append(f"Resuming from `{folder}`: {layout}.")
    for message in warnings:
        _resume_logger.warning(message)
    return warnings
