"""The engine's one door: everything the facade (``hf_lightning.trainer``) asks of Lightning, Optuna and Ray.

The facade holds one :class:`Engine` (``hf_lightning.trainer.engine_door.ENGINE``) and reaches the engine
only through it, so the line between the two layers is this class: read it to see what the Trainer asks
of the engine. Each member imports its module when first used, so ``import hf_lightning`` loads no engine
and a search backend that is not installed fails only when it is asked for.

The members are the engine's own entry points (functions and classes, unchanged); the hooks the engine
calls back on the Trainer are typed in ``protocols.py``.
"""

from __future__ import annotations

import importlib
import random
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # aliased: the members below carry the same names
    from . import accelerator as _accelerator
    from . import evaluation as _evaluation
    from . import fit as _fit
    from . import samplers as _samplers
    from .callbacks import logging as _logging
    from .callbacks import loop_driver as _loop_driver

__all__ = ["Engine"]


def _load(module: str) -> ModuleType:
    """Import the engine module ``module`` (relative to this package) on first use.

    The first one imports Lightning, whose import draws from Python's global ``random`` (rich's style
    module, through Lightning's progress bars); that draw is undone, so a seed set before (the Trainer's
    ``set_seed``) gives the data and the model transformers' ``random`` numbers.
    """
    name = f"{__package__}.{module}"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    state = random.getstate()
    try:
        return importlib.import_module(name)
    finally:
        random.setstate(state)


class Engine:
    """The engine entry points the facade uses, grouped by the Trainer feature that needs them."""

    # --- construction: arguments, the accelerator, the report_to callbacks ---------------------------
    def check_supported(self, args: Any) -> None:
        """Refuse, naming the argument, what the engine cannot honour (``argument_table.py``)."""
        check_supported = _load("argument_table").check_supported
        check_supported(args, by_trainer=True)

    def accelerator(self, settings: Any) -> _accelerator.LightningAccelerator:
        """``trainer.accelerator``: accelerate's API on Lightning's strategy (``accelerator.py``), from the
        plan's ``AcceleratorSettings`` (``hf_lightning.args.accelerator``)."""
        LightningAccelerator = _load("accelerator").LightningAccelerator
        return LightningAccelerator(settings)

    def reporting_callbacks(self, args: Any) -> list[Any]:
        """The ``report_to`` callbacks (``callbacks/reporting.py``)."""
        reporting_callbacks = _load("callbacks.reporting").reporting_callbacks
        return reporting_callbacks(args)

    @property
    def LightningLoggersCallback(self) -> type[_logging.LightningLoggersCallback]:  # noqa: N802 - a class
        LightningLoggersCallback = _load("callbacks.logging").LightningLoggersCallback
        return LightningLoggersCallback

    # --- training ------------------------------------------------------------------------------
    @property
    def TrainLoopDriver(self) -> type[_loop_driver.TrainLoopDriver]:  # noqa: N802 - a class
        TrainLoopDriver = _load("callbacks.loop_driver").TrainLoopDriver
        return TrainLoopDriver

    @property
    def FitRequest(self) -> type[_fit.FitRequest]:  # noqa: N802 - a class
        FitRequest = _load("fit").FitRequest
        return FitRequest

    def run_fit(self, request: _fit.FitRequest) -> Any:
        """One Lightning fit of the prepared run (``fit.py``)."""
        run_fit = _load("fit").run_fit
        return run_fit(request)

    def section_optimizer(self, deepspeed: Any, model: Any) -> Any:
        """The optimizer of the DeepSpeed settings' ``optimizer`` section, or None (no section, no DeepSpeed)."""
        section_optimizer = _load("deepspeed_sections").section_optimizer
        return section_optimizer(deepspeed, model)

    def section_scheduler(self, deepspeed: Any, optimizer: Any, num_training_steps: int, model: Any) -> Any:
        """The scheduler of the DeepSpeed settings' ``scheduler`` section, or None."""
        section_scheduler = _load("deepspeed_sections").section_scheduler
        return section_scheduler(deepspeed, optimizer, num_training_steps, model)

    # --- data ------------------------------------------------------------------------------------
    def build_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
        """The training sampler of ``train_sampling_strategy`` (``samplers.py``)."""
        build_train_sampler = _load("samplers").build_train_sampler
        return build_train_sampler(*args, **kwargs)

    @property
    def BatchRebalanceSampler(self) -> type[_samplers.BatchRebalanceSampler]:  # noqa: N802 - a class
        BatchRebalanceSampler = _load("samplers").BatchRebalanceSampler
        return BatchRebalanceSampler

    @property
    def LengthGroupedSampler(self) -> type[_samplers.LengthGroupedSampler]:  # noqa: N802 - a class
        LengthGroupedSampler = _load("samplers").LengthGroupedSampler
        return LengthGroupedSampler

    # --- evaluation ------------------------------------------------------------------------------
    @property
    def EvalEngine(self) -> type[_evaluation.EvalEngine]:  # noqa: N802 - a class
        EvalEngine = _load("evaluation").EvalEngine
        return EvalEngine

    @property
    def EvalShardSampler(self) -> type[_evaluation.EvalShardSampler]:  # noqa: N802 - a class
        EvalShardSampler = _load("evaluation").EvalShardSampler
        return EvalShardSampler

    def eval_shard_rule(self, dataloader: Any) -> Any:
        """The loader's rule for the real rows of each gathered round (None: not sharded)."""
        return _load("evaluation").eval_shard_rule(dataloader)

    @property
    def EvalCollective(self) -> type[_evaluation.EvalCollective]:  # noqa: N802 - a class
        EvalCollective = _load("evaluation").EvalCollective
        return EvalCollective

    # --- hyperparameter search -----------------------------------------------------------------
    def hpsearch_backend(self, name: str) -> ModuleType:
        """``hpsearch/optuna.py`` or ``hpsearch/ray.py`` (imported now: the backend's package with it)."""
        return _load(f"hpsearch.{name}")
