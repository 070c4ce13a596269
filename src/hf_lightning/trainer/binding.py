"""``use_as_transformers_trainer()``: run a library's Trainer subclasses (TRL's, sentence-transformers') on hf_lightning.

Such libraries subclass ``transformers.Trainer`` and ``transformers.TrainingArguments`` when they are
imported (``class SFTTrainer(Trainer)``); nothing in their source can be pointed at another base
afterwards. The binding makes transformers' own names answer with hf_lightning's classes *before* the
library is imported::

    import hf_lightning

    with hf_lightning.use_as_transformers_trainer():
        from trl import SFTConfig, SFTTrainer      # now subclasses of hf_lightning's classes

    trainer = SFTTrainer(model=model, args=SFTConfig(output_dir="out"), train_dataset=data)

It binds ``Trainer``, ``TrainingArguments``, ``Seq2SeqTrainer`` and ``Seq2SeqTrainingArguments`` where
transformers defines them (``transformers.trainer``, ``transformers.training_args``, ...), which is where
transformers' lazy top-level module looks them up, also for a fresh top-level module transformers builds
while it imports (``processing_utils`` re-executes ``transformers/__init__.py``), and on the top-level
module itself. Leaving the ``with`` block (or ``binding.undo()``) puts transformers' classes back;
classes defined meanwhile keep hf_lightning's base. Called again while bound, it returns the same
binding. If a module already holds transformers' own classes (the library was imported first), it
raises ``RuntimeError`` naming those modules: import the library after the call, in a fresh process.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["TransformersBinding", "use_as_transformers_trainer"]

# (module where transformers defines the name, name, hf_lightning module that defines ours)
BOUND_NAMES: tuple[tuple[str, str, str], ...] = (
    ("transformers.trainer", "Trainer", "hf_lightning.trainer.trainer"),
    ("transformers.training_args", "TrainingArguments", "hf_lightning.args.training_args"),
    ("transformers.trainer_seq2seq", "Seq2SeqTrainer", "hf_lightning.trainer.seq2seq"),
    ("transformers.training_args_seq2seq", "Seq2SeqTrainingArguments", "hf_lightning.args.seq2seq"),
    # TRL's CallbackHandlerWithRefModel subclasses it: ours knows hf_lightning's DefaultFlowCallback
    ("transformers.trainer_callback", "CallbackHandler", "hf_lightning.callbacks.handler"),
)

_MISSING = object()
_active: TransformersBinding | None = None


class TransformersBinding:
    """The binding made by :func:`use_as_transformers_trainer`; a context manager that undoes it on exit."""

    def __init__(self) -> None:
        self.originals: dict[tuple[str, str], Any] = {}
        """transformers' classes, by (defining module, name)."""
        self.top_level: list[tuple[ModuleType, str, Any]] = []
        """(top-level ``transformers`` module, name, what it held before) for each name set on it."""

    @property
    def active(self) -> bool:
        return _active is self

    def bind(self) -> None:
        global _active
        ours = {name: getattr(importlib.import_module(home), name) for _, name, home in BOUND_NAMES}
        for module_name, name, _ in BOUND_NAMES:
            module = importlib.import_module(module_name)
            self.originals[(module_name, name)] = module.__dict__[name]
        _refuse_earlier_imports(self.originals)
        for module_name, name, _ in BOUND_NAMES:
            setattr(sys.modules[module_name], name, ours[name])
        top = sys.modules["transformers"]
        for name in ours:
            self.top_level.append((top, name, top.__dict__.get(name, _MISSING)))
            setattr(top, name, ours[name])
        _active = self

    def undo(self) -> None:
        """Put transformers' own classes back (no-op when already undone)."""
        global _active
        if _active is not self:
            return
        for (module_name, name), original in self.originals.items():
            setattr(sys.modules[module_name], name, original)
        for top, name, before in self.top_level:
            _restore(top, name, before if before is not _MISSING else self._original(name))
        current = sys.modules.get("transformers")
        if current is not None and all(current is not top for top, _, _ in self.top_level):
            for _, name, _ in BOUND_NAMES:  # a top-level module transformers rebuilt while bound
                if name in current.__dict__:
                    _restore(current, name, self._original(name))
        _active = None

    def _original(self, name: str) -> Any:
        return next(cls for (_, bound), cls in self.originals.items() if bound == name)

    def __enter__(self) -> TransformersBinding:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.undo()


def _restore(module: ModuleType, name: str, value: Any) -> None:
    setattr(module, name, value)


def _holders(originals: dict[tuple[str, str], Any]) -> list[str]:
    """``"module (Name)"`` for each module outside transformers that holds one of ``originals`` (or a
    subclass) as a global, and for each subclass defined outside transformers."""
    classes = tuple(originals.values())
    found = {
        f"{sub.__module__} ({sub.__qualname__})"
        for cls in classes
        for sub in _all_subclasses(cls)
        if not _is_transformers(sub.__module__)
    }
    with warnings.catch_warnings():  # reading a module's deprecated globals may warn
        warnings.simplefilter("ignore")
        seen: set[int] = set()
        for module_name, module in list(sys.modules.items()):
            if module is None or _is_transformers(module_name) or module_name.startswith("hf_lightning"):
                continue
            if id(module) in seen:  # an alias (multiprocessing's __mp_main__ is __main__)
                continue
            seen.add(id(module))
            for value in list(vars(module).values()):
                if _is_held(value, classes):
                    found.add(f"{module_name} ({value.__qualname__})")
    return sorted(found)


def _is_held(value: Any, classes: tuple[Any, ...]) -> bool:
    if not isinstance(value, type):
        return False
    try:
        return any(value is cls or issubclass(value, cls) for cls in classes)
    except TypeError:
        return False


def _all_subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    stack: list[type] = [cls]
    while stack:
        subclasses: list[type] = stack.pop().__subclasses__()
        for sub in subclasses:
            if sub not in found:
                found.add(sub)
                stack.append(sub)
    return found


def _is_transformers(module_name: str) -> bool:
    return module_name == "transformers" or module_name.startswith("transformers.")


def _refuse_earlier_imports(originals: dict[tuple[str, str], Any]) -> None:
    holders = _holders(originals)
    if holders:
        raise RuntimeError(
            "`hf_lightning.use_as_transformers_trainer()` must run before the libraries that subclass "
            "transformers' Trainer are imported, but these modules already hold transformers' own classes: "
            f"{'; '.join(holders)}. Call it first (before `import trl`, `import sentence_transformers`, ...), "
            "in a fresh Python process."
        )


def use_as_transformers_trainer() -> TransformersBinding:
    """Bind transformers' ``Trainer``, ``TrainingArguments``, ``Seq2SeqTrainer`` and ``Seq2SeqTrainingArguments``
    names to hf_lightning's until the returned binding is undone (see the module docstring).

    Raises:
        ImportError: transformers is not installed.
        RuntimeError: a module already holds transformers' own classes (imported before the call).
    """
    if _active is not None:
        return _active
    try:
        importlib.import_module("transformers")
    except ImportError as exc:
        raise ImportError(
            '`hf_lightning.use_as_transformers_trainer()` binds transformers\' names: pip install "hf-lightning[transformers]"'
        ) from exc
    binding = TransformersBinding()
    binding.bind()
    return binding
