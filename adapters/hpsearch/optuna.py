"""The Optuna backend of ``Trainer.hyperparameter_search``.

``hyperparameter_search(backend="optuna", **kwargs)`` creates a study with the ``kwargs`` that
``optuna.create_study`` takes (``sampler``, ``pruner``, ``storage``, ``study_name``,
``load_if_exists``) and optimizes it with those of ``Study.optimize`` (``timeout``, ``n_jobs``,
``gc_after_trial``, ``catch``, ``callbacks``, ``show_progress_bar``). Each trial trains the trainer
(with ``n_jobs != 1``, a fresh trainer per trial, built from the trainer's constructor inputs) and
returns the objective.

Single objective: the objective is reported to the trial after every evaluation during training, and a
trial the pruner stops raises ``optuna.TrialPruned`` out of the training loop. Several ``direction``
values make a multi-objective study (no intermediate reports, as Optuna allows none) and return the
Pareto front as a list of ``BestRun``.

``n_trials`` counts the study's finished trials (complete or pruned), so a study loaded from
``storage`` (e.g. ``"sqlite:///hp.db"`` with the same ``study_name`` and ``load_if_exists=True``)
continues a search that was interrupted instead of running ``n_trials`` more
(transformers runs ``n_trials`` more each call).
"""

from __future__ import annotations

import gc
import inspect
import logging
from collections import Counter
from typing import Any, cast

import optuna
import torch

from hf_lightning.trainer_utils import BestRun

from ..protocols import TrainerFacade

__all__ = ["default_hp_space", "report", "run", "trial_id", "trial_params"]

logger = logging.getLogger(__name__)

_OPTIMIZE_KWARGS = ("timeout", "n_jobs", "gc_after_trial", "catch", "callbacks", "show_progress_bar")
_FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def default_hp_space(trial: optuna.Trial) -> dict[str, Any]:
    """transformers' default space: learning rate, epochs, seed and per-device batch size."""
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-6, 1e-4, log=True),
        "num_train_epochs": trial.suggest_int("num_train_epochs", 1, 5),
        "seed": trial.suggest_int("seed", 1, 40),
        "per_device_train_batch_size": trial.suggest_categorical(
            "per_device_train_batch_size", [4, 8, 16, 32, 64]
        ),
    }


def trial_params(trainer: Any, trial: optuna.Trial) -> dict[str, Any]:
    """The trial's hyperparameters: what the search space suggests for it."""
    return trainer.hp_space(trial)


def trial_id(trial: optuna.Trial) -> str:
    """The trial's number in its study."""
    return str(trial.number)


def report(trainer: Any, trial: Any, step: int, metrics: dict[str, float], objective: Any) -> None:
    """Report the objective at ``step``; stop the trial (``optuna.TrialPruned``) when the pruner says so."""
    study = getattr(trial, "study", None)  # a FixedTrial has none
    if study is None or len(study.directions) > 1:
        return
    trial.report(objective, step)
    if trial.should_prune():
        trainer.callback_handler.on_train_end(trainer.args, trainer.state, trainer.control)
        raise optuna.TrialPruned(f"Stopped at step {step} by the pruner (objective {objective}).")


def run(
    trainer: TrainerFacade, n_trials: int, direction: str | list[str], **kwargs: Any
) -> BestRun | list[BestRun]:
    """Create (or load) the study, run the trials it still lacks, return the best run(s)."""
    if trainer.search.world_size > 1:
        raise NotImplementedError(
            f"`hyperparameter_search(backend='optuna')` runs each trial on one process, but this process is one of "
            f"{trainer.search.world_size}. Start one search per process sharing a study (`storage=..., "
            "study_name=..., load_if_exists=True`), or use backend='ray'."
        )
    optimize_kwargs = {name: kwargs.pop(name) for name in _OPTIMIZE_KWARGS if name in kwargs}
    _check_study_kwargs(kwargs)
    directions = direction if isinstance(direction, list) else None
    # optuna checks the direction strings itself; its stubs only take the two literals
    study = optuna.create_study(
        direction=cast(Any, None if directions else direction), directions=cast(Any, directions), **kwargs
    )
    remaining = _remaining_trials(study, n_trials)
    if remaining > 0:
        objective = _objective(trainer, optimize_kwargs.get("n_jobs", 1))
        study.optimize(objective, n_trials=remaining, **optimize_kwargs)
    return _best_runs(study)


def _check_study_kwargs(kwargs: dict[str, Any]) -> None:
    allowed = [
        name
        for name in inspect.signature(optuna.create_study).parameters
        if name not in ("direction", "directions")
    ]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ValueError(
            f"`hyperparameter_search({unknown[0]}=...)` is not an argument of the Optuna backend; choose from "
            f"optuna.create_study: {', '.join(allowed)}; Study.optimize: {', '.join(_OPTIMIZE_KWARGS)}."
        )


def _remaining_trials(study: optuna.Study, n_trials: int) -> int:
    """How many trials to run so that the study holds ``n_trials`` finished (complete or pruned) ones."""
    states = Counter(trial.state for trial in study.get_trials(deepcopy=False))
    finished = sum(states[state] for state in _FINISHED)
    running = states[optuna.trial.TrialState.RUNNING]
    if running:
        logger.warning(
            "Study %r holds %d trial(s) still marked RUNNING (a search stopped without finishing "
            "them?); they do not count towards n_trials=%d.",
            study.study_name,
            running,
            n_trials,
        )
    if finished:
        logger.info(
            "Study %r already holds %d finished trial(s); running %d more to reach n_trials=%d.",
            study.study_name,
            finished,
            max(n_trials - finished, 0),
            n_trials,
        )
    return max(n_trials - finished, 0)


def _objective(trainer: TrainerFacade, n_jobs: int) -> Any:
    if n_jobs != 1:
        logger.warning(
            "`hyperparameter_search(n_jobs=%s)` runs trials in threads of one process: they share the "
            "global random state, so a trial's `seed` does not make it reproducible.",
            n_jobs,
        )

    def objective(trial: optuna.Trial) -> Any:
        local = trainer if n_jobs == 1 else trainer.search.clone()
        try:
            value, _ = local.search.run_trial(trial)
        finally:
            _release_memory()
        return value

    return objective


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _best_runs(study: optuna.Study) -> BestRun | list[BestRun]:
    if not any(trial.state == optuna.trial.TrialState.COMPLETE for trial in study.get_trials(deepcopy=False)):
        states = Counter(trial.state.name.lower() for trial in study.get_trials(deepcopy=False))
        summary = ", ".join(f"{count} {state}" for state, count in sorted(states.items())) or "no trials"
        raise RuntimeError(
            f"`hyperparameter_search()` finished without a completed trial ({summary}); there is no best run."
        )
    if len(study.directions) == 1:
        best = study.best_trial
        return BestRun(str(best.number), cast(float, best.value), best.params, study)  # a completed trial
    return [BestRun(str(best.number), best.values, best.params, study) for best in study.best_trials]
