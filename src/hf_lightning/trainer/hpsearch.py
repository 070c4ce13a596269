"""``SearchRunner`` (``trainer.search``): ``Trainer.hyperparameter_search``, free of any search engine.

The search itself runs in a backend of ``hf_lightning.adapters.hpsearch`` (``optuna`` or ``ray``),
imported only when a search starts. Each backend module provides::

    default_hp_space(trial) -> dict          # transformers' default search space
    run(trainer, n_trials, direction, **kw)  # -> BestRun | list[BestRun]; calls trainer.search.run_trial
    trial_params(trainer, trial) -> dict     # the trial's hyperparameters
    trial_id(trial) -> str                   # names output_dir/run-{trial_id}/
    report(trainer, trial, step, metrics, objective)  # after each evaluation

A backend drives the search through this part's public methods (typed by
``hf_lightning.adapters.protocols.SearchPart``): ``run_trial``, ``clone``, ``base_args`` and
``save_tune_checkpoint``. A trial runs as transformers runs it, in one order that matters::

    _hp_search_setup(trial)   # a copy of the arguments with the trial's values (the seed included)
    train(trial=trial)        # seeds with the trial's seed, then model_init(trial) builds the model
        evaluate -> _report_to_hp_search(trial, step, metrics)  # objective -> backend (pruning)
    evaluate()                # only when no evaluation ran during training
    objective = compute_objective(metrics)

transformers builds the model before applying the trial's values, so a trial's ``seed`` never reaches
``model_init`` (docs/divergences.md). Here the trial's values go to a copy of ``TrainingArguments``
before the model is built, and the original arguments are back in place when the search ends.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import importlib.util
import random
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from hf_lightning.args.enums import HPSearchBackend, enum_value
from hf_lightning.trainer.engine_door import ENGINE
from hf_lightning.trainer_utils import BestRun, TrainerMemoryTracker, default_compute_objective
from hf_lightning.utils.logging import get_logger

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = [
    "HPSearchBackend",
    "SearchRunner",
    "default_hp_search_backend",
    "default_hp_space_optuna",
    "default_hp_space_ray",
]

logger = get_logger(__name__)

_DIRECTIONS = ("minimize", "maximize")


# module probed for availability, and the pip extra that installs it
_REQUIREMENTS = {HPSearchBackend.OPTUNA: ("optuna", "optuna"), HPSearchBackend.RAY: ("ray.tune", "ray")}


def _install_hint(backend: HPSearchBackend) -> str:
    return f'pip install "hf-lightning[{_REQUIREMENTS[backend][1]}]"'


def _is_available(backend: HPSearchBackend) -> bool:
    module = _REQUIREMENTS[backend][0]
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None and (
            importlib.util.find_spec(module) is not None
        )
    except (ImportError, ValueError):
        return False


def default_hp_search_backend() -> str:
    """The first installed backend, in transformers' order (Optuna, then Ray Tune)."""
    available = [backend for backend in HPSearchBackend if _is_available(backend)]
    if available:
        if len(available) > 1:
            logger.info(
                "%d hyperparameter search backends available; using %s.", len(available), available[0].value
            )
        return available[0].value
    hints = "\n".join(f" - {backend.value}: {_install_hint(backend)}" for backend in HPSearchBackend)
    raise ImportError(f"`hyperparameter_search()` needs a search backend, and none is installed:\n{hints}")


def _backend_name(backend: Any) -> HPSearchBackend:
    if backend is None:
        return HPSearchBackend(default_hp_search_backend())
    value = enum_value(backend)
    if value not in HPSearchBackend.values():
        raise ValueError(
            f"`hyperparameter_search(backend={value!r})` is not supported; choose one of: "
            f"{', '.join(repr(v) for v in HPSearchBackend.values())}"
        )
    return HPSearchBackend(value)


def _backend_module(backend: Any) -> ModuleType:
    """``hf_lightning.adapters.hpsearch.<backend>``; ImportError naming the extra when the engine is missing."""
    name = HPSearchBackend(enum_value(backend))
    if not _is_available(name):
        raise ImportError(
            f"`hyperparameter_search(backend={name.value!r})` needs {_REQUIREMENTS[name][0]}, "
            f"which is not installed: {_install_hint(name)}"
        )
    return ENGINE.hpsearch_backend(name.value)


def default_hp_space_optuna(trial: Any) -> dict[str, Any]:
    """transformers' default Optuna space: learning_rate, num_train_epochs, seed, per_device_train_batch_size."""
    return _backend_module(HPSearchBackend.OPTUNA).default_hp_space(trial)


def default_hp_space_ray(trial: Any) -> dict[str, Any]:
    """transformers' default Ray Tune space (the same four arguments, as Tune sampling objects)."""
    return _backend_module(HPSearchBackend.RAY).default_hp_space(trial)


def _check_search_call(n_trials: Any, direction: Any, backend: HPSearchBackend) -> None:
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"`hyperparameter_search(n_trials={n_trials!r})` must be an int >= 1.")
    directions = direction if isinstance(direction, list) else [direction]
    bad = [d for d in directions if d not in _DIRECTIONS]
    if bad or not directions:
        raise ValueError(
            f"`hyperparameter_search(direction={direction!r})` must be one of "
            f"{', '.join(repr(d) for d in _DIRECTIONS)}, or a non-empty list of them "
            "(one per objective, Optuna only)."
        )
    if isinstance(direction, list) and backend is not HPSearchBackend.OPTUNA:
        raise ValueError(
            f"`hyperparameter_search(direction={direction!r}, backend={backend.value!r})`: several "
            "objectives need backend='optuna'; give one direction for Ray Tune."
        )


def _apply_hyperparameters(args: Any, params: dict[str, Any]) -> Any:
    """A shallow copy of ``args`` holding ``params``, each cast to the type of the value it replaces."""
    fields = {f.name for f in dataclasses.fields(args)}
    new = copy.copy(args)
    for key, value in params.items():
        if key not in fields:
            logger.warning(
                "The hyperparameter %r of this trial is not a `%s` field; it is not applied to the "
                "arguments (model_init still receives it through the trial).",
                key,
                type(args).__name__,
            )
            continue
        old = getattr(args, key)
        if old is not None and value is not None:
            try:
                value = type(old)(value)
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"The search space gave {key}={value!r}, which cannot become the "
                    f"{type(old).__name__} that `{type(args).__name__}.{key}` holds: {error}"
                ) from error
        setattr(new, key, value)
    return new


class SearchRunner:
    """Runs ``hyperparameter_search`` and its trials; owns the search's own bookkeeping.

    It holds the search's attributes of transformers' Trainer (``hp_space``, ``compute_objective``,
    ``objective``, ``hp_name``, ``hp_search_backend``); the Trainer reads and assigns them as its own.
    The trial (``trainer._trial``) is held by the run object.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.hp_search_backend: Any = None
        self.hp_space: Callable[[Any], dict[str, Any]] | None = None
        self.hp_name: Callable[[Any], str] | None = None
        self.compute_objective: Callable[[dict[str, float]], Any] | None = None
        self.objective: Any = None
        self.base_args: Any = None
        """The ``TrainingArguments`` the search started with (each trial gets a copy with its values)."""
        self.applied_trial: Any = None
        """The trial whose values ``trainer.args`` holds now."""
        self.trial_run_name: str | None = None
        """``run-{trial id}`` (or ``hp_name(trial)``): the trial's folder under ``output_dir``."""

    def run(
        self,
        hp_space: Any = None,
        compute_objective: Any = None,
        n_trials: int = 20,
        direction: str | list[str] = "minimize",
        backend: str | None = None,
        hp_name: Any = None,
        **kwargs: Any,
    ) -> BestRun | list[BestRun]:
        """Search hyperparameters with Optuna or Ray Tune; returns the best run (a list for several
        directions). Each trial gets a fresh model from ``model_init``; ``kwargs`` go to the backend
        (docs/hpsearch.md lists them). The original arguments are back in place when the search ends."""
        t = self.trainer
        name = _backend_name(backend)
        module = _backend_module(name)
        if t.model_init is None:
            raise RuntimeError(
                "`hyperparameter_search()` needs `Trainer(model_init=...)`: every trial builds a "
                "fresh model with it. Pass a function returning the model instead of `model`."
            )
        _check_search_call(n_trials, direction, name)
        self.hp_search_backend = name
        self.hp_space = module.default_hp_space if hp_space is None else hp_space
        self.hp_name = hp_name
        self.compute_objective = default_compute_objective if compute_objective is None else compute_objective
        base_args = self.base_args = t.args
        try:
            return module.run(t, n_trials, direction, **kwargs)
        finally:
            t._use_args(base_args)
            self.base_args = self.applied_trial = None
            run = t.run  # the last trial's run object
            run.train_batch_size = base_args.train_batch_size
            self.hp_search_backend = None

    # --- what a backend asks about the run (so it reads no argument itself) -------------------
    @property
    def world_size(self) -> int:
        """Processes taking part in training (``args.world_size``)."""
        return int(self.trainer.args.world_size)

    @property
    def n_gpu(self) -> int:
        """GPUs this process drives (``args.n_gpu``)."""
        return int(self.trainer.args.n_gpu)

    @property
    def evaluates_during_training(self) -> bool:
        """Whether the arguments evaluate during training (``eval_strategy`` is not ``"no"``)."""
        return self.trainer.plan.schedule.eval_strategy != "no"

    # --- one trial -------------------------------------------------------------------------
    def setup_trial(self, trial: Any) -> None:
        """``Trainer._hp_search_setup``: a copy of the arguments with the trial's values (before ``model_init``)."""
        t, run = self.trainer, self.trainer.run
        run.trial = trial
        if t.hp_search_backend is None or trial is None or trial is self.applied_trial:
            return
        module = _backend_module(t.hp_search_backend)
        params = module.trial_params(t, trial)
        base = self.base_args if self.base_args is not None else t.args
        t._use_args(_apply_hyperparameters(base, params))
        run_id = module.trial_id(trial)
        self.trial_run_name = t.hp_name(trial) if t.hp_name is not None else f"run-{run_id}"
        run.train_batch_size = t.args.train_batch_size
        self.applied_trial = trial
        logger.info("Trial: %s", params)

    def run_trial(self, trial: Any, resume_from_checkpoint: str | None = None) -> tuple[Any, dict | None]:
        """Train one trial; returns its objective and, when no evaluation ran during training, the metrics
        of the final ``evaluate()`` the objective was computed from."""
        t, run = self.trainer, self.trainer.run
        if t._memory_tracker is None:  # a copy sent to a worker
            run.memory_tracker = TrainerMemoryTracker(skip_memory_metrics=True)
        self.objective = None
        compute_objective = cast(Callable[[dict[str, float]], Any], t.compute_objective)  # set by run()
        t._hp_search_setup(trial)  # before train(): train() reads trainer.args before its own setup call
        try:
            t.train(resume_from_checkpoint=resume_from_checkpoint, trial=trial)
        finally:
            self.applied_trial = None
            run = t.run  # this trial's run object
            if run.is_in_train:  # stopped by the backend (a pruned trial) or an error
                run.is_in_train = False
                t._deactivate_neftune()
                run.memory_tracker = type(t._memory_tracker)(t.plan.runtime.skip_memory_metrics)
        if t.objective is not None:
            return t.objective, None
        metrics = t.evaluate()
        self.objective = compute_objective(dict(metrics))
        return self.objective, metrics

    def report(self, trial: Any, step: int, metrics: dict[str, float]) -> None:
        """``Trainer._report_to_hp_search``: compute the objective and hand it to the backend, which may
        stop the trial (Optuna pruning) or record it with a checkpoint (Ray Tune)."""
        t = self.trainer
        if t.hp_search_backend is None or trial is None or t.compute_objective is None:
            return
        self.objective = t.compute_objective(dict(metrics))
        _backend_module(t.hp_search_backend).report(t, trial, step, dict(metrics), t.objective)

    def save_tune_checkpoint(self, checkpoint_dir: str) -> str:
        """``Trainer._tune_save_checkpoint``: ``checkpoint_dir/checkpoint-{global_step}`` for Ray Tune."""
        from hf_lightning.checkpoint.store import save_checkpoint

        t, run = self.trainer, self.trainer.run
        run.state.stateful_callbacks["TrainerControl"] = t.control.state()
        return save_checkpoint(
            checkpoint_dir,
            t.state.global_step,
            model=t.model,
            optimizer=t.optimizer,
            scheduler=t.lr_scheduler,
            state=t.state,
            args=t.args,
            processing_class=t.processing_class,
        )

    # --- fresh trainers for parallel trials -------------------------------------------------
    def clone(self, picklable: bool = False, args: Any = None) -> Trainer:
        """A fresh trainer for one more trial, built as this one was: ``type(trainer)(...)`` from its recorded
        constructor inputs (``utils/constructor_inputs.py``), with ``args`` (default: the search's base
        arguments) in place of its arguments. It shares the data and functions and holds none of a run's state; it takes
        copies of this trainer's current callbacks (their state is per run). Its model is dropped:
        ``train(trial)`` builds each trial's with ``model_init``. With ``picklable`` (no memory tracker: it
        holds thread primitives) it can be pickled to a Ray worker; ``run_trial`` makes a tracker there."""
        t = self.trainer
        base = args if args is not None else self.base_args if self.base_args is not None else t.args
        if not t.plan.runtime.skip_memory_metrics:
            logger.warning(
                "Memory metrics are not measured in parallel or remote trials "
                "(`TrainingArguments(skip_memory_metrics=False)` applies to sequential trials only)."
            )
        fresh = _construct_again(t, base)
        fresh.model = fresh.model_wrapped = fresh.callback_handler.model = None  # type: ignore[assignment]
        fresh.callback_handler.callbacks = _trial_callbacks(t.callback_handler.callbacks)
        fresh._memory_tracker = None if picklable else TrainerMemoryTracker(True)  # type: ignore[assignment]
        fresh.hp_search_backend, fresh.hp_space = t.hp_search_backend, t.hp_space
        fresh.hp_name, fresh.compute_objective = t.hp_name, t.compute_objective
        fresh.args = fresh.search.base_args = base
        return fresh


def _construct_again(trainer: Trainer, args: Any) -> Trainer:
    """``type(trainer)(**its constructor inputs, args=args)``, the user's callbacks given as copies (so their
    ``on_init_end`` runs on the copies); the global random generators are left as they were (the
    constructor seeds them, and a Ray search still draws its trials from them)."""
    inputs = trainer._constructor_inputs
    replace: dict[str, Any] = {"args": args} if inputs.accepts("args") else {}
    given = inputs.arguments.get("callbacks")
    if given and inputs.accepts("callbacks"):
        replace["callbacks"] = _trial_callbacks(given)
    with _global_generators_kept():
        return inputs.build(**replace)


@contextlib.contextmanager
def _global_generators_kept() -> Iterator[None]:
    python, numpy = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(numpy)


def _trial_callbacks(callbacks: list[Any]) -> list[Any]:
    """Copies of ``callbacks`` for a trial's trainer (deep where possible: their state is per run), without
    the engine's logger callbacks (re-created by each fit)."""
    copies = []
    for callback in callbacks:
        if isinstance(callback, ENGINE.LightningLoggersCallback):
            continue
        try:
            copies.append(copy.deepcopy(callback))
        except Exception:  # noqa: BLE001 - e.g. a callback holding a lock: share it, as a single trainer would
            copies.append(callback)
    return copies
