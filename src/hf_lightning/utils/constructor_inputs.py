"""What a ``Trainer`` is constructed from: the recorded constructor call, and ``model_init``.

``Trainer.__init__``, and the ``__init__`` of each subclass, record the arguments of the outermost
constructor call, bound to that ``__init__``'s signature. A subclass that calls ``super().__init__(...)``
records what the subclass received, not what it passed on, so the same class can be built again::

    trainer = MyTrainer(model_init=init, args=args, extra=3)
    trainer._constructor_inputs.build(args=trial_args)   # MyTrainer(model_init=init, args=trial_args, extra=3)

A search trial that cannot reuse the trainer (parallel Optuna trials, Ray Tune workers) gets a trainer
built this way, as transformers' search reruns ``model_init`` for each trial, instead of a copy.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, cast

from torch import nn

__all__ = ["ConstructorInputs", "call_model_init", "record_subclass_inputs", "records_inputs"]

P = ParamSpec("P")

ATTRIBUTE = "_constructor_inputs"
"""The instance attribute holding the recorded ``ConstructorInputs``."""
_MARK = "__records_constructor_inputs__"


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


def records_inputs(init: Callable[Concatenate[Any, P], None]) -> Callable[Concatenate[Any, P], None]:
    """``init``, recording its call's arguments on the instance unless an outer ``__init__`` already did."""
    if getattr(init, _MARK, False):
        return init
    full = inspect.signature(init)
    signature = full.replace(parameters=list(full.parameters.values())[1:])

    @functools.wraps(init)
    def recording_init(self: Any, *args: P.args, **kwargs: P.kwargs) -> None:
        if ATTRIBUTE not in vars(self):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # the call itself fails below, with Python's own message
                bound = None
            if bound is not None:
                inputs = ConstructorInputs(type(self), signature, dict(bound.arguments))
                vars(self)[ATTRIBUTE] = inputs
        init(self, *args, **kwargs)

    setattr(recording_init, _MARK, True)
    return recording_init


def record_subclass_inputs(cls: type) -> None:
    """From ``Trainer.__init_subclass__``: the subclass's own ``__init__`` (when it has one) records its call."""
    init = cls.__dict__.get("__init__")
    if callable(init):
        cls.__init__ = records_inputs(init)  # type: ignore[misc]  # wrapped in place, signature kept


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
