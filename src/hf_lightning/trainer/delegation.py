"""``delegate``: a Trainer method carried out by one of the Trainer's parts.

``Trainer`` keeps transformers' method names (users override them and call them); most of them are
done by a named part the Trainer owns. The class body says so in one line::

    class Trainer:
        evaluate = delegate("evaluations", Evaluator.evaluate)

``trainer.evaluate(...)`` then calls ``trainer.evaluations.evaluate(...)`` with the same arguments. The
method keeps the part's signature and docstring (``help(Trainer.evaluate)``, ``inspect.signature``),
and a subclass that overrides ``evaluate`` replaces it as with any method: the parts call the
overridable methods through the Trainer, so the override is the one that runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["delegate", "held_by"]


class delegate:  # noqa: N801 - used like a decorator-made method in class bodies
    """A method of the owner class that calls ``method`` on ``self.<part>`` (see the module docstring)."""

    def __init__(self, part: str, method: Callable[..., Any]) -> None:
        self.part = part
        self.method = method
        self.function: Callable[..., Any] = self._forwarder(method.__name__)

    def _forwarder(self, name: str) -> Callable[..., Any]:
        part, target = self.part, self.method.__name__

        @functools.wraps(self.method)
        def forward(trainer: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(getattr(trainer, part), target)(*args, **kwargs)

        forward.__signature__ = inspect.signature(self.method)  # type: ignore[attr-defined]
        del forward.__wrapped__  # type: ignore[attr-defined]  # the signature above is the one to show
        forward.__name__ = name
        return forward

    def __set_name__(self, owner: type, name: str) -> None:
        self.function = self._forwarder(name)
        self.function.__qualname__ = f"{owner.__qualname__}.{name}"
        self.function.__module__ = owner.__module__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return self.function.__get__(instance, owner)


class held_by:  # noqa: N801 - used like ``property`` in class bodies
    """A transformers attribute of the owner class whose value a part holds: ``trainer.<name>`` reads and
    assigns ``trainer.<part>.<renames.get(name, name)>``. A class body makes several at once::

        state, control = held_by.views("run", 2)
    """

    def __init__(self, part: str, renames: dict[str, str] | None = None) -> None:
        self.part, self.renames, self.name = part, renames or {}, ""

    @classmethod
    def views(cls, part: str, count: int, renames: dict[str, str] | None = None) -> tuple[Any, ...]:
        """``count`` views (each takes its name from the class attribute it is assigned to)."""
        return tuple(cls(part, renames) for _ in range(count))

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.renames.get(name, name)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return self if instance is None else getattr(getattr(instance, self.part), self.name)

    def __set__(self, instance: Any, value: Any) -> None:
        setattr(getattr(instance, self.part), self.name, value)
