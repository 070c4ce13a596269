"""Module paths that moved in the layout of ``docs/architecture.md`` keep importing.

``import hf_lightning.checkpoint_io`` (and the other paths below) load the module at its new home and
register it under the old name too, so ``from hf_lightning.trainer_utils_memory import ...`` style
imports and ``unittest.mock.patch("hf_lightning.trainer_data....")`` in user code keep working.
New code imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["MOVED_MODULES", "install_moved_module_aliases"]

#: old module path -> the module that now holds its code
MOVED_MODULES: dict[str, str] = {
    "hf_lightning.argparser": "hf_lightning.args.parser",
    "hf_lightning.enums": "hf_lightning.args.enums",
    "hf_lightning.training_args_fsdp": "hf_lightning.args.fsdp",
    "hf_lightning.training_args_normalize": "hf_lightning.args.normalize",
    "hf_lightning.training_args_runtime": "hf_lightning.args.runtime",
    "hf_lightning.training_args_setters": "hf_lightning.args.setters",
    "hf_lightning.training_args_validate": "hf_lightning.args.validate",
    "hf_lightning.callbacks_builtin": "hf_lightning.callbacks.builtin",
    "hf_lightning.callbacks_handler": "hf_lightning.callbacks.handler",
    "hf_lightning.checkpoint_folders": "hf_lightning.checkpoint.folders",
    "hf_lightning.checkpoint_io": "hf_lightning.checkpoint.io",
    "hf_lightning.checkpoint_weights": "hf_lightning.checkpoint.weights",
    "hf_lightning.rng_state": "hf_lightning.checkpoint.rng_state",
    "hf_lightning.jit_checkpoint": "hf_lightning.checkpoint.jit",
    "hf_lightning.data_dispatch": "hf_lightning.data.dispatch",
    "hf_lightning.seq2seq": "hf_lightning.trainer.seq2seq",
    "hf_lightning.hpsearch": "hf_lightning.trainer.hpsearch",
    "hf_lightning.trainer_checkpoint": "hf_lightning.trainer.checkpointing",
    "hf_lightning.trainer_data": "hf_lightning.trainer.data",
    "hf_lightning.trainer_eval": "hf_lightning.trainer.evaluation",
    "hf_lightning.trainer_eval_loop": "hf_lightning.trainer.eval_loop",
    "hf_lightning.trainer_logging": "hf_lightning.trainer.run",
    "hf_lightning.trainer_loop": "hf_lightning.adapters.callbacks.loop_driver",
    "hf_lightning.trainer_metrics": "hf_lightning.trainer.metrics",
    "hf_lightning.trainer_optim": "hf_lightning.trainer.optim",
    "hf_lightning.trainer_train": "hf_lightning.trainer.train",
    # the facade composed of parts: the log bookkeeping is TrainingRun, the loop driver is engine-side
    "hf_lightning.trainer.logs": "hf_lightning.trainer.run",
    "hf_lightning.trainer.loop": "hf_lightning.adapters.callbacks.loop_driver",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The target module ran when it was imported."""


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install_moved_module_aliases() -> None:
    """Register the finder once (idempotent)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
