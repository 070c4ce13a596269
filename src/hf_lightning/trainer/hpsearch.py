"""``Trainer.hyperparameter_search``: the front door of the search, free of any search engine.

The search itself runs in a backend of ``hf_lightning.adapters.hpsearch`` (``optuna`` or ``ray``),
imported only when a search starts. Each backend module provides::

    default_hp_space(trial) -> dict          # transformers' default search space
    run(trainer, n_trials, direction, **kw)  # -> BestRun | list[BestRun]
    trial_params(trainer, trial) -> dict     # the trial's hyperparameters
    trial_id(trial) -> str                   # names output_dir/run-{trial_id}/
    report(trainer, trial, step, metrics, objective)  # after each evaluation

A trial runs as transformers runs it, in one order that matters::

    _hp_search_setup(trial)   # a copy of the arguments with the trial's values (the seed included)
    train(trial=trial)        # seeds with the trial's seed, then model_init(trial) builds the model
        evaluate -> _report_to_hp_search(trial, step, metrics)  # objective -> backend (pruning)
    evaluate()                # only when no evaluation ran during training
    objective = compute_objective(metrics)

transformers builds the model before applying the trial's values, so a trial's ``seed`` never reaches
``model_init`` (DESIGN.md, divergence 8). Here the trial's values go to a copy of ``TrainingArguments``
before the model is built, and the original arguments are back in place when the search ends.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
import logging
from types import ModuleType
from typing import Any

from hf_lightning.args.enums import ChoiceEnum
from hf_lightning.trainer.base import TrainerBase
from hf_lightning.trainer_utils import BestRun, default_compute_objective

__all__ = [
    "HPSearchBackend",
    "TrainerHPSearchMixin",
    "default_hp_search_backend",
    "default_hp_space_optuna",
    "default_hp_space_ray",
]

logger = logging.getLogger(__name__)

_DIRECTIONS = ("minimize", "maximize")


class HPSearchBackend(ChoiceEnum):
    """The search engines ``hyperparameter_search`` can run on, in the order it picks a default."""

    OPTUNA = "optuna"
    RAY = "ray"


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
    value = getattr(backend, "value", backend)
    if value not in HPSearchBackend.values():
        raise ValueError(
            f"`hyperparameter_search(backend={value!r})` is not supported; choose one of: "
            f"{', '.join(repr(v) for v in HPSearchBackend.values())}"
        )
    return HPSearchBackend(value)


def _backend_module(backend: Any) -> ModuleType:
    """``hf_lightning.adapters.hpsearch.<backend>``; ImportError naming the extra when the engine is missing."""
    name = HPSearchBackend(getattr(backend, "value", backend))
    if not _is_available(name):
        raise ImportError(
            f"`hyperparameter_search(backend={name.value!r})` needs {_REQUIREMENTS[name][0]}, "
            f"which is not installed: {_install_hint(name)}"
        )
    return importlib.import_module(f"hf_lightning.adapters.hpsearch.{name.value}")


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


class TrainerHPSearchMixin(TrainerBase):
    """``hyperparameter_search`` and the per-trial hooks ``train`` and evaluation call."""

    hp_space: Any = None
    compute_objective: Any = None
    objective: Any = None
    _trial: Any = None
    _trial_run_name: str | None = None
    _hp_base_args: Any = None
    _hp_applied_trial: Any = None

    def hyperparameter_search(
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
        (docs/hpsearch.md lists them)."""
        name = _backend_name(backend)
        module = _backend_module(name)
        if self.model_init is None:
            raise RuntimeError(
                "`hyperparameter_search()` needs `Trainer(model_init=...)`: every trial builds a "
                "fresh model with it. Pass a function returning the model instead of `model`."
            )
        _check_search_call(n_trials, direction, name)
        self.hp_search_backend = name
        self.hp_space = module.default_hp_space if hp_space is None else hp_space
        self.hp_name = hp_name
        self.compute_objective = default_compute_objective if compute_objective is None else compute_objective
        base_args = self._hp_base_args = self.args
        try:
            return module.run(self, n_trials, direction, **kwargs)
        finally:
            self.args, self._hp_base_args, self._hp_applied_trial = base_args, None, None
            self._train_batch_size = base_args.train_batch_size
            self.hp_search_backend = None

    # --- one trial -------------------------------------------------------------------------
    def _hp_search_setup(self, trial: Any) -> None:
        """Give the trial a copy of the arguments with its hyperparameters (before ``model_init`` runs)."""
        self._trial = trial
        if self.hp_search_backend is None or trial is None or trial is self._hp_applied_trial:
            return
        module = _backend_module(self.hp_search_backend)
        params = module.trial_params(self, trial)
        base = self._hp_base_args if self._hp_base_args is not None else self.args
        self.args = _apply_hyperparameters(base, params)
        run_id = module.trial_id(trial)
        self._trial_run_name = self.hp_name(trial) if self.hp_name is not None else f"run-{run_id}"
        self._train_batch_size = self.args.train_batch_size
        self._hp_applied_trial = trial
        logger.info("Trial: %s", params)

    def _run_hp_trial(self, trial: Any, resume_from_checkpoint: str | None = None) -> tuple[Any, dict | None]:
        """Train one trial; returns its objective and, when no evaluation ran during training, the metrics
        of the final ``evaluate()`` the objective was computed from."""
        self.objective = None
        self._hp_search_setup(trial)  # before train(): train() reads self.args before its own setup call
        try:
            self.train(resume_from_checkpoint=resume_from_checkpoint, trial=trial)
        finally:
            self._hp_applied_trial = None
            if self.is_in_train:  # stopped by the backend (a pruned trial) or an error
                self.is_in_train = False
                self._deactivate_neftune()
                self._memory_tracker = type(self._memory_tracker)(self.args.skip_memory_metrics)
        if self.objective is not None:
            return self.objective, None
        metrics = self.evaluate()
        self.objective = self.compute_objective(dict(metrics))
        return self.objective, metrics

    def _report_to_hp_search(self, trial: Any, step: int, metrics: dict[str, float]) -> None:
        """After each evaluation during training: compute the objective and hand it to the backend, which
        may stop the trial (Optuna pruning) or record it with a checkpoint (Ray Tune)."""
        if self.hp_search_backend is None or trial is None:
            return
        self.objective = self.compute_objective(dict(metrics))
        _backend_module(self.hp_search_backend).report(self, trial, step, dict(metrics), self.objective)

    def _tune_save_checkpoint(self, checkpoint_dir: str) -> str:
        """Write ``checkpoint_dir/checkpoint-{global_step}`` (model, optimizer, scheduler, state) for Ray Tune."""
        from hf_lightning.checkpoint.store import save_checkpoint

        self.state.stateful_callbacks["TrainerControl"] = self.control.state()
        return save_checkpoint(
            checkpoint_dir,
            self.state.global_step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.lr_scheduler,
            state=self.state,
            args=self.args,
            processing_class=self.processing_class,
        )

    # --- copies for parallel trials --------------------------------------------------------
    def _hp_search_clone(self) -> Any:
        """A trainer for one more trial: the same arguments, data and functions, but none of a run's state
        (model, optimizer, Lightning objects), so it can train in a thread or be pickled to a Ray worker."""
        from hf_lightning.callbacks import TrainerControl, TrainerState

        clone = copy.copy(self)
        clone.model = clone.model_wrapped = None
        clone.optimizer = clone.lr_scheduler = None
        for name in ("_eval_dataloaders", "_neftune_handle"):
            clone.__dict__.pop(name, None)
        clone.accelerator = type(self.accelerator)()
        if not self.args.skip_memory_metrics:
            logger.warning(
                "Memory metrics are not measured in parallel or remote trials "
                "(`TrainingArguments(skip_memory_metrics=False)` applies to sequential trials only)."
            )
        clone._memory_tracker = type(self._memory_tracker)(True)
        clone.callback_handler = _clone_handler(self.callback_handler)
        clone.control, clone.state = TrainerControl(), TrainerState()
        clone.is_in_train, clone._hp_applied_trial = False, None
        return clone


def _clone_handler(handler: Any) -> Any:
    """The callback list without run objects; callbacks deep-copied where possible (their state is per run)."""
    from hf_lightning.adapters.callbacks.logging import LightningLoggersCallback

    new = copy.copy(handler)
    new.callbacks = []
    for callback in handler.callbacks:
        if isinstance(callback, LightningLoggersCallback):  # re-created by each fit
            continue
        try:
            new.callbacks.append(copy.deepcopy(callback))
        except Exception:  # noqa: BLE001 - e.g. a callback holding a lock: share it, as a single trainer would
            new.callbacks.append(callback)
    new.model = new.optimizer = new.lr_scheduler = None
    new.train_dataloader = new.eval_dataloader = None
    return new
