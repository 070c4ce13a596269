"""What a ``Trainer`` is constructed from: the recorded constructor call, and ``model_init``.

``Trainer.__new__`` records the arguments of the outermost constructor call, bound to the signature of the
``__init__`` of the class being built. A subclass that calls ``super().__init__(...)`` records what the
subclass received, not what it passed on, so the same class can be built again::

    trainer = MyTrainer(model_init=init, args=args, extra=3)
    trainer._constructor_inputs.build(args=trial_args)   # MyTrainer(model_init=init, args=trial_args, extra=3)

A search trial that cannot reuse the trainer (parallel Optuna trials, Ray Tune workers) gets a trainer
built this way, as transformers' search reruns ``model_init`` for each trial, instead of a copy.
"""

from __future__ import annotations

import dataclasses
import inspect
import weakref
from collections.abc import Callable
from typing import Any, cast

from torch import nn

__all__ = ["ConstructorInputs", "call_model_init", "record_inputs"]

ATTRIBUTE = "_constructor_inputs"
"""The instance attribute holding the recorded ``ConstructorInputs``."""


@dataclasses.dataclass(frozen=True)
class ConstructorInputs:
    """The class a trainer was built as, and the arguments its outermost ``__init__`` received."""

    cls: type
    signature: inspect.Signature
    """The ``__init__`` signature the arguments are bound to (without ``self``)."""
    arguments: dict[str, Any]
    """Each argument given, by parameter name (``*args`` / ``**kwargs`` as a tuple / dict)."""

    def accepts(self, name: str) -> bool:
        """Whether ``build`` can give ``name``: a named parameter, or ``**kwargs`` with no ``*args`` values."""
        params = self.signature.parameters
        named = params.get(name)
        if named is not None:
            return named.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        positional = [p.name for p in params.values() if p.kind is inspect.Parameter.VAR_POSITIONAL]
        return self._var_keyword() is not None and not any(self.arguments.get(p) for p in positional)

    def build(self, **replace: Any) -> Any:
        """A new instance of the same class from the recorded arguments, with ``replace`` in place of those named."""
        arguments = dict(self.arguments)
        for name, value in replace.items():
            if not self.accepts(name):
                raise TypeError(f"`{self.cls.__name__}(...)` takes no argument {name!r} to replace.")
            if name in self.signature.parameters:
                arguments[name] = value
            else:
                var_keyword = cast(str, self._var_keyword())
                arguments[var_keyword] = {**arguments.get(var_keyword, {}), name: value}
        bound = inspect.BoundArguments(self.signature, arguments)  # type: ignore[arg-type]  # an ordered mapping
        return self.cls(*bound.args, **bound.kwargs)

    def _var_keyword(self) -> str | None:
        kinds = ((p.name, p.kind) for p in self.signature.parameters.values())
        return next((name for name, kind in kinds if kind is inspect.Parameter.VAR_KEYWORD), None)


def record_inputs(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """From ``Trainer.__new__``: the outermost constructor call's arguments, bound to the ``__init__`` of the
    class being built. Arguments that do not bind are not recorded: ``__init__`` then raises Python's own
    ``TypeError``, with no frame of this module in the traceback (as transformers' Trainer)."""
    cls = type(instance)
    signature = _SIGNATURES.get(cls)
    if signature is None:
        full = inspect.signature(cls.__init__)
        signature = _SIGNATURES[cls] = full.replace(parameters=list(full.parameters.values())[1:])
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return
    vars(instance)[ATTRIBUTE] = ConstructorInputs(cls, signature, dict(bound.arguments))


_SIGNATURES: weakref.WeakKeyDictionary[type, inspect.Signature] = weakref.WeakKeyDictionary()


def call_model_init(model_init: Callable[..., nn.Module] | None, trial: Any = None) -> nn.Module:
    """``Trainer.call_model_init``: a fresh model from ``model_init`` (given ``trial`` when it takes one argument)."""
    from hf_lightning.trainer_utils import number_of_arguments

    n_args = number_of_arguments(model_init)
    init = cast(Callable[..., nn.Module], model_init)  # None fails in number_of_arguments
    if n_args not in (0, 1):
        raise RuntimeError("model_init should have 0 or 1 argument.")
    model = init() if n_args == 0 else init(trial)
    if model is None:
        raise RuntimeError("model_init should not return None.")
    return model
