"""Learning-rate schedulers for every ``TrainingArguments.lr_scheduler_type``.

``get_scheduler(name, optimizer, num_warmup_steps, num_training_steps, scheduler_specific_kwargs)``
is the one entry point the Trainer uses; the ``get_*_schedule*`` builders carry transformers' public
names and signatures, so code that imports them from ``transformers.optimization`` can import them
from here instead. The step-to-factor functions live in :mod:`hf_lightning.optim.lr_lambdas`.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, ReduceLROnPlateau

from hf_lightning.args.enums import METRIC_DRIVEN_SCHEDULERS, enum_value
from hf_lightning.optim import lr_lambdas as lam
from hf_lightning.optim.greedy import GreedyLR
from hf_lightning.optim.layerwise import LayerWiseDummyOptimizer, layerwise_scheduler

__all__ = [
    "METRIC_DRIVEN_SCHEDULERS",
    "SCHEDULER_NAMES",
    "get_constant_schedule",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_cosine_with_hard_restarts_schedule_with_warmup",
    "get_cosine_with_min_lr_schedule_with_warmup",
    "get_cosine_with_min_lr_schedule_with_warmup_lr_rate",
    "get_greedy_schedule",
    "get_inverse_sqrt_schedule",
    "get_linear_schedule_with_warmup",
    "get_polynomial_decay_schedule_with_warmup",
    "get_reduce_on_plateau_schedule",
    "get_scheduler",
    "get_wsd_schedule",
    "steps_on_metric",
    "steps_per_update",
]


def get_constant_schedule(optimizer: Optimizer, last_epoch: int = -1) -> LambdaLR:
    """Keep the optimizer's learning rate."""
    return LambdaLR(optimizer, lam.constant_lambda, last_epoch=last_epoch)


def get_reduce_on_plateau_schedule(optimizer: Optimizer, **kwargs: Any) -> ReduceLROnPlateau:
    """``torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **kwargs)``; step it with a metric."""
    return ReduceLROnPlateau(optimizer, **kwargs)


def get_greedy_schedule(optimizer: Optimizer, **kwargs: Any) -> GreedyLR:
    """:class:`~hf_lightning.optim.greedy.GreedyLR` ``(optimizer, **kwargs)``; step it with a metric."""
    return GreedyLR(optimizer, **kwargs)


def get_constant_schedule_with_warmup(
    optimizer: Optimizer, num_warmup_steps: int, last_epoch: int = -1
) -> LambdaLR:
    """Linear warmup from 0 over ``num_warmup_steps``, then the optimizer's learning rate."""
    fn = partial(lam.constant_with_warmup_lambda, num_warmup_steps=num_warmup_steps)
    return LambdaLR(optimizer, fn, last_epoch=last_epoch)


def get_linear_schedule_with_warmup(
    optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int, last_epoch: int = -1
) -> LambdaLR:
    """Linear warmup from 0, then linear decay to 0 at ``num_training_steps``."""
    fn = partial(lam.linear_lambda, num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps)
    return LambdaLR(optimizer, fn, last_epoch)


def get_cosine_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> LambdaLR:
    """Linear warmup from 0, then a cosine of ``num_cycles`` waves (0.5: one half-wave down to 0)."""
    fn = partial(
        lam.cosine_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
    )
    return LambdaLR(optimizer, fn, last_epoch)


def get_cosine_with_hard_restarts_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: int = 1,
    last_epoch: int = -1,
) -> LambdaLR:
    """Linear warmup from 0, then ``num_cycles`` half-cosines from the full rate to 0, each restarting."""
    fn = partial(
        lam.cosine_with_hard_restarts_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
    )
    return LambdaLR(optimizer, fn, last_epoch)


def get_polynomial_decay_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    lr_end: float = 1e-7,
    power: float = 1.0,
    last_epoch: int = -1,
) -> LambdaLR:
    """Linear warmup from 0, then polynomial decay of degree ``power`` to ``lr_end``.

    The initial rate is ``optimizer.defaults["lr"]``; it must be above ``lr_end``.
    """
    lr_init = optimizer.defaults["lr"]
    if not lr_init > lr_end:
        raise ValueError(
            f"`lr_scheduler_kwargs={{'lr_end': {lr_end}}}` must be smaller than the initial learning rate {lr_init}"
        )
    fn = partial(
        lam.polynomial_decay_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        lr_end=lr_end,
        power=power,
        lr_init=lr_init,
    )
    return LambdaLR(optimizer, fn, last_epoch)


def get_inverse_sqrt_schedule(
    optimizer: Optimizer, num_warmup_steps: int, timescale: int | None = None, last_epoch: int = -1
) -> LambdaLR:
    """Linear warmup from 0, then inverse square-root decay; ``timescale`` defaults to the warmup (or 10,000)."""
    if timescale is None:
        timescale = num_warmup_steps or 10_000
    fn = partial(lam.inverse_sqrt_lambda, num_warmup_steps=num_warmup_steps, timescale=timescale)
    return LambdaLR(optimizer, fn, last_epoch=last_epoch)


def _min_lr_rate(optimizer: Optimizer, min_lr: float | None, min_lr_rate: float | None) -> float:
    """The floor of a min-lr cosine as a fraction of the initial rate, from exactly one of the two kwargs."""
    if min_lr is not None and min_lr_rate is not None:
        raise ValueError("`lr_scheduler_kwargs` sets both `min_lr` and `min_lr_rate`; set only one of them")
    if min_lr is not None:
        return min_lr / optimizer.defaults["lr"]
    if min_lr_rate is None:
        raise ValueError("this lr_scheduler_type needs `min_lr` or `min_lr_rate` in `lr_scheduler_kwargs`")
    return min_lr_rate


def get_cosine_with_min_lr_schedule_with_warmup(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    min_lr: float | None = None,
    min_lr_rate: float | None = None,
) -> LambdaLR:
    """Like the cosine schedule, but decaying to ``min_lr`` (or ``min_lr_rate`` x the initial rate)."""
    fn = partial(
        lam.cosine_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
        min_lr_rate=_min_lr_rate(optimizer, min_lr, min_lr_rate),
    )
    return LambdaLR(optimizer, fn, last_epoch)


def get_cosine_with_min_lr_schedule_with_warmup_lr_rate(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
    min_lr: float | None = None,
    min_lr_rate: float | None = None,
    warmup_lr_rate: float | None = None,
) -> LambdaLR:
    """Cosine to ``min_lr`` whose warmup starts above 0 (at ``warmup_lr_rate`` or ``1 / num_warmup_steps``)."""
    fn = partial(
        lam.cosine_warmup_with_min_lr_lambda,
        num_warmup_steps=num_warmup_steps,
        num_training_steps=num_training_steps,
        num_cycles=num_cycles,
        min_lr_rate=_min_lr_rate(optimizer, min_lr, min_lr_rate),
        warmup_lr_rate=warmup_lr_rate,
    )
    return LambdaLR(optimizer, fn, last_epoch)


def _check_wsd_shapes(**shapes: str) -> None:
    """Refuse a warmup or decay shape that warmup_stable_decay does not know, naming the key."""
    for key, value in shapes.items():
        if value not in lam.WSD_SHAPES:
            raise ValueError(
                f"`lr_scheduler_kwargs={{'{key}': {value!r}}}` is not supported; choose one of: "
                + ", ".join(repr(shape) for shape in lam.WSD_SHAPES)
            )


def get_wsd_schedule(
    optimizer: Optimizer,
    num_warmup_steps: int,
    num_decay_steps: int,
    num_training_steps: int | None = None,
    num_stable_steps: int | None = None,
    warmup_type: str = "linear",
    decay_type: str = "cosine",
    min_lr_ratio: float = 0,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> LambdaLR:
    """Warmup-stable-decay: rise from ``min_lr_ratio``, hold, fall back over ``num_decay_steps``.

    The stable phase lasts ``num_stable_steps`` if given, else what ``num_training_steps`` leaves.
    ``warmup_type`` and ``decay_type`` are each 'linear', 'cosine' or '1-sqrt'.
    """
    if num_training_steps is None and num_stable_steps is None:
        raise ValueError("warmup_stable_decay needs `num_training_steps` or `num_stable_steps`")
    if num_training_steps is not None and num_stable_steps is not None:
        warnings.warn(
            "Both num_training_steps and num_stable_steps are given; warmup_stable_decay uses num_stable_steps.",
            stacklevel=2,
        )
    _check_wsd_shapes(warmup_type=warmup_type, decay_type=decay_type)
    if num_stable_steps is None:
        # not None: one of the two is given (checked above)
        num_stable_steps = cast(int, num_training_steps) - num_warmup_steps - num_decay_steps
    fn = partial(
        lam.wsd_lambda,
        num_warmup_steps=num_warmup_steps,
        num_stable_steps=num_stable_steps,
        num_decay_steps=num_decay_steps,
        warmup_type=warmup_type,
        decay_type=decay_type,
        min_lr_ratio=min_lr_ratio,
        num_cycles=num_cycles,
    )
    return LambdaLR(optimizer, fn, last_epoch)


_BUILDERS: dict[str, Callable[..., Any]] = {
    "linear": get_linear_schedule_with_warmup,
    "cosine": get_cosine_schedule_with_warmup,
    "cosine_with_restarts": get_cosine_with_hard_restarts_schedule_with_warmup,
    "polynomial": get_polynomial_decay_schedule_with_warmup,
    "constant": get_constant_schedule,
    "constant_with_warmup": get_constant_schedule_with_warmup,
    "inverse_sqrt": get_inverse_sqrt_schedule,
    "reduce_lr_on_plateau": get_reduce_on_plateau_schedule,
    "cosine_with_min_lr": get_cosine_with_min_lr_schedule_with_warmup,
    "cosine_warmup_with_min_lr": get_cosine_with_min_lr_schedule_with_warmup_lr_rate,
    "warmup_stable_decay": get_wsd_schedule,
    "greedy": get_greedy_schedule,
}

SCHEDULER_NAMES: tuple[str, ...] = tuple(_BUILDERS)
"""Every accepted ``lr_scheduler_type``, as in transformers 5.24's ``SchedulerType``."""


def steps_on_metric(scheduler: Any) -> bool:
    """Whether ``scheduler`` is stepped with an evaluation metric (``ReduceLROnPlateau``, ``GreedyLR``, and
    any scheduler of the same kind): asked of the scheduler, whose ``step`` needs a first argument (the
    metric) where a schedule's ``step`` needs none. transformers' own ``GreedyLR`` counts too."""
    if scheduler is None or isinstance(scheduler, ReduceLROnPlateau):
        return scheduler is not None
    kind = type(scheduler)
    if kind not in _ON_METRIC:  # asked once per class: steps_per_update runs at every optimizer step
        try:
            first = next(iter(inspect.signature(scheduler.step).parameters.values()), None)
        except (AttributeError, TypeError, ValueError):  # no step, or one whose signature cannot be read
            first = None
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        _ON_METRIC[kind] = first is not None and first.kind in positional and first.default is first.empty
    return _ON_METRIC[kind]


_ON_METRIC: dict[type, bool] = {}


def steps_per_update(scheduler: Any) -> bool:
    """Whether ``scheduler`` is stepped once after every optimizer update: set and not metric-driven."""
    return scheduler is not None and not steps_on_metric(scheduler)


_IGNORE_KWARGS = ("constant", "constant_with_warmup")
_WARMUP_ONLY = ("constant_with_warmup", "inverse_sqrt", "warmup_stable_decay")


def _check_kwargs(name: str, builder: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Name the ``lr_scheduler_kwargs`` keys that the chosen schedule does not take (a TypeError, as in transformers)."""
    taken = set(inspect.signature(builder).parameters) - {
        "optimizer",
        "num_warmup_steps",
        "num_training_steps",
    }
    unknown = sorted(set(kwargs) - taken)
    if unknown:
        raise TypeError(
            f"`lr_scheduler_kwargs` keys {unknown} are not accepted by lr_scheduler_type={name!r}; "
            f"it takes: {', '.join(sorted(taken)) or 'nothing'}"
        )
    if name == "warmup_stable_decay" and "num_decay_steps" not in kwargs:
        raise TypeError(
            "lr_scheduler_type='warmup_stable_decay' needs `num_decay_steps` in `lr_scheduler_kwargs`"
        )


def _scheduler_key(name: Any) -> str:
    """The schedule's name as a plain string (from a str or a str-Enum), checked against the known ones."""
    key = str(enum_value(name))
    if key not in _BUILDERS:
        raise ValueError(
            f"`TrainingArguments(lr_scheduler_type={key!r})` is not supported; choose one of: "
            + ", ".join(SCHEDULER_NAMES)
        )
    return key


def _require(key: str, argument: str, value: int | None) -> None:
    """Raise ValueError (as transformers does) when a step count the schedule needs is missing."""
    if value is None:
        raise ValueError(f"lr_scheduler_type={key!r} requires `{argument}`, please provide that argument.")


def get_scheduler(
    name: str,
    optimizer: Optimizer,
    num_warmup_steps: int | None = None,
    num_training_steps: int | None = None,
    scheduler_specific_kwargs: dict[str, Any] | None = None,
) -> LRScheduler | GreedyLR | Any:
    """Build the scheduler called ``name`` (a ``SchedulerType`` value, as str or str-Enum).

    ``num_warmup_steps`` is required by every schedule except constant, reduce_lr_on_plateau and
    greedy; ``num_training_steps`` additionally by all but constant_with_warmup, inverse_sqrt and
    warmup_stable_decay (which may take ``num_stable_steps`` instead). ``scheduler_specific_kwargs``
    (``TrainingArguments.lr_scheduler_kwargs``) go to the builder; constant and
    constant_with_warmup take none, and ignore them with a warning as transformers ignores them.
    A layer-wise optimizer gets one scheduler per parameter, stepped in backward (the Trainer does
    not: see :func:`get_trainer_scheduler`).
    """
    if isinstance(optimizer, LayerWiseDummyOptimizer):  # one scheduler per parameter, stepped in backward
        return layerwise_scheduler(
            optimizer,
            lambda inner: get_scheduler(
                name, inner, num_warmup_steps, num_training_steps, scheduler_specific_kwargs
            ),
        )
    return get_trainer_scheduler(
        name, optimizer, num_warmup_steps, num_training_steps, scheduler_specific_kwargs
    )


def get_trainer_scheduler(
    name: str,
    optimizer: Optimizer,
    num_warmup_steps: int | None = None,
    num_training_steps: int | None = None,
    scheduler_specific_kwargs: dict[str, Any] | None = None,
) -> LRScheduler | GreedyLR:
    """:func:`get_scheduler` as the Trainer uses it: a layer-wise optimizer is scheduled as one group.

    transformers' Trainer hands ``get_scheduler`` its accelerate-wrapped optimizer, so the per-parameter
    branch never runs there: the logged rate follows the schedule and the inner rates stay fixed.
    """
    key = _scheduler_key(name)
    builder = _BUILDERS[key]
    kwargs = dict(scheduler_specific_kwargs or {})
    if key in _IGNORE_KWARGS and kwargs:
        warnings.warn(
            f"lr_scheduler_type={key!r} takes no `lr_scheduler_kwargs`; ignoring {sorted(kwargs)}",
            stacklevel=3,
        )
    if key == "constant":
        return builder(optimizer)
    if key in METRIC_DRIVEN_SCHEDULERS:
        return builder(optimizer, **kwargs)
    _require(key, "num_warmup_steps", num_warmup_steps)
    if key == "constant_with_warmup":
        return builder(optimizer, num_warmup_steps=num_warmup_steps)
    _check_kwargs(key, builder, kwargs)
    if key == "inverse_sqrt":
        return builder(optimizer, num_warmup_steps=num_warmup_steps, **kwargs)
    if key not in _WARMUP_ONLY:
        _require(key, "num_training_steps", num_training_steps)
    return builder(
        optimizer, num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps, **kwargs
    )
