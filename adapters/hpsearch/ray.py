"""The Ray Tune backend of ``Trainer.hyperparameter_search``.

``hyperparameter_search(backend="ray", **kwargs)`` passes ``kwargs`` to ``ray.tune.run`` (``scheduler``,
``search_alg``, ``progress_reporter``, ``resources_per_trial``, ``storage_path``, ``stop``, ...) plus
one of its own, ``address``: the Ray cluster to join when this process has not started Ray yet
(without it a local instance is started; ``ray.init`` also honours ``RAY_ADDRESS``).

How the trainer reaches the workers (docs/divergences.md): transformers pickles the trainer itself,
which fails with "cannot pickle weakref" once it has trained (its optimizer, scheduler and accelerator
hold weak references). Here the object store receives a fresh trainer of the same class, built from the
trainer's recorded constructor inputs (``trainer.search.clone(picklable=True, args=...)``: no model,
optimizer, scheduler or Lightning objects), with absolute output paths so that trial ``t`` writes
``output_dir/run-{t}/`` wherever Ray runs it. Each worker builds the
model with ``model_init``. An attribute that still cannot be pickled (a lock in a dataset, a callback
holding a file) is named in the error.

In a worker, every evaluation during training reports the metrics and the ``objective`` with
``ray.tune.report`` (and a checkpoint when the trainer saves one at that step); a trial that did not
evaluate during training evaluates once at the end and reports that. ``BestRun.run_summary`` is the
search's ``ray.tune.ResultGrid`` (the ``ExperimentAnalysis`` methods transformers users call still work on it).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import ray
from ray import tune
from ray.tune import ResultGrid
from ray.tune import schedulers as tune_schedulers

from hf_lightning.trainer_utils import BestRun, get_last_checkpoint
from hf_lightning.utils.constructor_inputs import ConstructorInputs

from ..protocols import TrainerFacade

__all__ = ["SearchResultGrid", "default_hp_space", "report", "run", "trial_id", "trial_params"]

logger = logging.getLogger(__name__)

# schedulers that decide on intermediate results, so they need evaluation during training
_NEEDS_EVALUATION = (
    tune_schedulers.AsyncHyperBandScheduler,
    tune_schedulers.HyperBandScheduler,
    tune_schedulers.MedianStoppingRule,
    tune_schedulers.PopulationBasedTraining,
)


def default_hp_space(trial: Any) -> dict[str, Any]:
    """transformers' default space, as Tune sampling objects."""
    return {
        "learning_rate": tune.loguniform(1e-6, 1e-4),
        "num_train_epochs": tune.choice(list(range(1, 6))),
        "seed": tune.uniform(1, 40),
        "per_device_train_batch_size": tune.choice([4, 8, 16, 32, 64]),
    }


def trial_params(trainer: Any, trial: dict[str, Any]) -> dict[str, Any]:
    """The trial's hyperparameters: its Tune config (without a ``wandb`` entry)."""
    return {key: value for key, value in trial.items() if key != "wandb"}


def trial_id(trial: Any) -> str:
    """The id Tune gave the running trial."""
    return str(tune.get_context().get_trial_id())


def report(trainer: Any, trial: Any, step: int, metrics: dict[str, float], objective: Any) -> None:
    """Report metrics and objective to Tune, with a checkpoint when the trainer saves one at this step."""
    _report(trainer, {**metrics, "objective": objective}, with_checkpoint=bool(trainer.control.should_save))


def _report(trainer: TrainerFacade, metrics: dict[str, Any], with_checkpoint: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if with_checkpoint:
            trainer.search.save_tune_checkpoint(folder)
            checkpoint = tune.Checkpoint.from_directory(folder)
        tune.report(metrics, checkpoint=checkpoint)


class SearchResultGrid(ResultGrid):
    """The search's ``ResultGrid``; also answers the ``ExperimentAnalysis`` calls transformers returned."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_experiment_analysis":
            raise AttributeError(name)
        return getattr(self._experiment_analysis, name)


def run(trainer: TrainerFacade, n_trials: int, direction: str, **kwargs: Any) -> BestRun:
    """Run ``n_trials`` samples of the space on Ray Tune; return the best trial by its last objective."""
    check_scheduler(trainer.search.evaluates_during_training, kwargs.get("scheduler"))
    payload = _worker_copy(trainer)
    _init_ray(kwargs.pop("address", None))
    if "resources_per_trial" not in kwargs:
        kwargs["resources_per_trial"] = default_resources(trainer.search.n_gpu)
        logger.info("No `resources_per_trial` given; each trial gets %s.", kwargs["resources_per_trial"])
    if "progress_reporter" not in kwargs:
        kwargs["progress_reporter"] = tune.CLIReporter(metric_columns=["objective"])
    trainable = tune.with_parameters(_trainable, trainer=payload)
    with _legacy_output():  # Ray's newer console output ignores `progress_reporter`
        analysis = tune.run(trainable, config=trainer.hp_space(None), num_samples=n_trials, **kwargs)
    scope = os.getenv("RAY_SCOPE", "last")
    best = analysis.get_best_trial(metric="objective", mode=direction[:3], scope=scope)
    if best is None:
        raise RuntimeError(
            "`hyperparameter_search(backend='ray')` finished without a trial reporting an "
            "`objective`; see the trial errors in the run summary."
        )
    return BestRun(best.trial_id, best.last_result["objective"], best.config, SearchResultGrid(analysis))


def default_resources(n_gpu: int) -> dict[str, int]:
    """One CPU per trial, and one GPU when this process drives any (``n_gpu``)."""
    resources = {"cpu": 1}
    if n_gpu > 0:
        resources["gpu"] = 1
    return resources


def check_scheduler(evaluates_during_training: bool, scheduler: Any) -> None:
    """A scheduler that stops or exploits trials on intermediate results needs evaluation during training."""
    if scheduler is None or evaluates_during_training:
        return
    base = getattr(scheduler, "_base_scheduler", scheduler)  # ResourceChangingScheduler wraps another
    if isinstance(scheduler, str):
        needs = scheduler not in ("fifo", "resource_changing")
        name = repr(scheduler)
    else:
        needs = isinstance(base, _NEEDS_EVALUATION)
        name = f"{type(base).__name__}(...)"
    if needs:
        raise ValueError(
            f"`hyperparameter_search(backend='ray', scheduler={name})` decides on the metrics each evaluation "
            "reports during training, but `TrainingArguments(eval_strategy='no')` never evaluates. Set "
            "eval_strategy='steps' or 'epoch' (with an eval_dataset), or leave out the scheduler."
        )


@contextlib.contextmanager
def _legacy_output() -> Iterator[None]:
    previous = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = previous


def _init_ray(address: str | None) -> None:
    if ray.is_initialized():
        if address is not None:
            raise ValueError(
                f"`hyperparameter_search(address={address!r})`: this process already runs Ray; call "
                "ray.shutdown() first, or leave out `address` to use the running instance."
            )
        return
    ray.init(address=address)


def _worker_copy(trainer: TrainerFacade) -> TrainerFacade:
    """The trainer as it travels to the workers: no run state, absolute paths, checked to pickle."""
    base = trainer.search.base_args if trainer.search.base_args is not None else trainer.args
    clone = trainer.search.clone(picklable=True, args=_absolute_paths(base))  # each worker makes its tracker
    try:
        ray.cloudpickle.dumps(clone)
    except Exception as error:  # noqa: BLE001 - any pickling failure: find which attribute causes it
        raise TypeError(_unpicklable_report(clone, error)) from error
    return clone


def _absolute_paths(args: Any) -> Any:
    """A shallow copy of ``args`` with absolute output paths (the trainer's own arguments keep theirs; a
    copy, not ``dataclasses.replace``, which would run ``__post_init__`` again)."""
    new = copy.copy(args)
    for name in ("output_dir", "logging_dir"):
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(new, name, os.path.abspath(value))
    return new


def _unpicklable_report(trainer: Any, error: Exception) -> str:
    problems = []
    for label, item in [*_attribute_items(trainer), *_constructor_arguments(trainer)]:
        try:
            ray.cloudpickle.dumps(item)
        except Exception as item_error:  # noqa: BLE001
            problems.append(f"  {label} ({type(item).__name__}): {item_error}")
    found = "\n".join(problems) or f"  (no single attribute; the trainer as a whole fails: {error})"
    return (
        "`hyperparameter_search(backend='ray')` sends the trainer to Ray workers by pickling it, and these "
        f"parts cannot be pickled:\n{found}\nBuild such objects inside `model_init` or module-level functions, "
        "make them picklable, or use backend='optuna' (trials in this process)."
    )


def _attribute_items(trainer: Any) -> list[tuple[str, Any]]:
    """``(label, value)`` for each attribute of the trainer, its callbacks and its parts' state one by one."""
    items: list[tuple[str, Any]] = []
    for name, value in vars(trainer).items():
        if isinstance(value, ConstructorInputs):  # listed last, by _constructor_arguments
            continue
        if name == "callback_handler":
            items += [(f"callback {type(cb).__name__}", cb) for cb in value.callbacks]
        elif getattr(value, "trainer", None) is trainer:  # a part of the trainer: its own state
            items += [
                (f"Trainer.{name}.{key}", item) for key, item in vars(value).items() if key != "trainer"
            ]
        else:
            items.append((f"Trainer.{name}", value))
    return items


def _constructor_arguments(trainer: Any) -> list[tuple[str, Any]]:
    """The recorded constructor call the trainer carries (``utils/constructor_inputs.py``), as
    ``("MyTrainer(extra=...)", value)``; after the attributes, so what both hold is named as the attribute."""
    inputs = next((v for v in vars(trainer).values() if isinstance(v, ConstructorInputs)), None)
    if inputs is None:
        return []
    return [(f"{inputs.cls.__name__}({name}=...)", value) for name, value in inputs.arguments.items()]


def _trainable(config: dict[str, Any], trainer: TrainerFacade) -> None:
    """One Tune trial: train (resuming from Tune's checkpoint after a restart or a PBT exploit)."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        objective, metrics = trainer.search.run_trial(config)
    else:
        with checkpoint.as_directory() as folder:
            objective, metrics = trainer.search.run_trial(
                config, resume_from_checkpoint=get_last_checkpoint(folder)
            )
    if metrics is not None:  # no evaluation during training: report the final one, with the final weights
        _report(trainer, {**metrics, "objective": objective, "done": True}, with_checkpoint=True)
