"""Validation step of `TrainingArguments.__post_init__`: a table of rules, every violation reported at once.

Each rule is a function of the (already normalised) arguments that returns the messages of the
problems it finds. ``check`` runs the whole table and raises one ``ValueError`` listing them all.
The rules raise where transformers 5.24 raises, plus a few the documentation states and transformers
does not enforce (marked *documented*), and values transformers accepts and then misbehaves with
(``_limits``, ``_ranges``: listed in docs/divergences.md).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import os
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hf_lightning.args.enums import METRIC_DRIVEN_SCHEDULERS, SAMPLING_STRATEGIES, enum_value
from hf_lightning.args.runtime import LOG_LEVELS, is_whole_or_ratio

__all__ = ["RULES", "ArgumentTypeError", "check", "check_types", "find_problems", "type_problem"]

_TOKENS_SEEN = ("all", "non_padding", "no")
_MP_CONTEXTS = ("fork", "spawn", "forkserver")


def _call(args: Any, **kwargs: Any) -> str:
    """How the user's call looks, for messages: ``TrainingArguments(a=1, b='x')``."""
    return f"{type(args).__name__}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


def _step_counts(args: Any) -> Iterator[str]:
    if args.logging_strategy == "steps" and args.logging_steps == 0:
        yield f"`{_call(args, logging_strategy='steps')}` needs `logging_steps` > 0, got 0"
    if args.eval_strategy == "steps" and not args.eval_steps:
        yield (
            f"`{_call(args, eval_strategy='steps')}` needs `eval_steps` > 0 or `logging_steps` > 0, "
            f"got {args.eval_steps!r} and {args.logging_steps!r}"
        )
    for strategy, steps in (
        ("logging_strategy", "logging_steps"),
        ("eval_strategy", "eval_steps"),
        ("save_strategy", "save_steps"),
    ):
        value = getattr(args, steps)
        if getattr(args, strategy) == "steps" and value is not None and not is_whole_or_ratio(value):
            yield f"`{_call(args, **{steps: value})}` must be a whole number when above 1 (a value < 1 is a ratio)"


def _best_model(args: Any) -> Iterator[str]:
    if not args.load_best_model_at_end or args.save_strategy == "best":
        return
    if args.eval_strategy != args.save_strategy:
        yield (
            f"`{_call(args, load_best_model_at_end=True)}` needs `eval_strategy` to equal `save_strategy` "
            f"(or save_strategy='best'), got {enum_value(args.eval_strategy)!r} and {enum_value(args.save_strategy)!r}"
        )
        return
    save, ev = args.save_steps, args.eval_steps
    if args.eval_strategy != "steps" or not ev or save % ev == 0:
        return
    if (save < 1) != (ev < 1):
        yield (
            f"`{_call(args, load_best_model_at_end=True)}` needs `save_steps` to be a multiple of `eval_steps`, "
            f"which cannot be guaranteed when one is a ratio and the other a count: got {save} and {ev}"
        )
    elif save >= 1 or (save * 1_000_000) % (ev * 1_000_000) != 0:  # transformers' arithmetic
        yield (
            f"`{_call(args, load_best_model_at_end=True)}` needs `save_steps` to be a multiple of `eval_steps`, "
            f"got {save} and {ev}"
        )


def _precision(args: Any) -> Iterator[str]:
    if args.fp16 and args.bf16:
        yield f"`{_call(args, fp16=True, bf16=True)}`: choose at most one of `fp16` and `bf16`"
    if args.fp16_full_eval and args.bf16_full_eval:
        yield f"`{_call(args, fp16_full_eval=True, bf16_full_eval=True)}`: choose at most one of the two"
    if args.tf32 and not _tf32_available():
        yield f"`{_call(args, tf32=True)}` needs an Ampere or newer CUDA GPU"


def _tf32_available() -> bool:
    import torch

    if not torch.cuda.is_available() or torch.version.cuda is None:
        return False
    return torch.cuda.get_device_properties(torch.cuda.current_device()).major >= 8


def _needs_eval(args: Any) -> Iterator[str]:
    evaluating = args.eval_strategy != "no"
    for name in METRIC_DRIVEN_SCHEDULERS:
        if args.lr_scheduler_type == name and not evaluating:
            yield f"`{_call(args, lr_scheduler_type=name)}` needs `eval_strategy` 'steps' or 'epoch', got 'no'"
    if args.save_strategy == "best" and not evaluating:  # documented
        yield f"`{_call(args, save_strategy='best')}` needs `eval_strategy` 'steps' or 'epoch', got 'no'"
    if args.eval_on_start and not evaluating:  # documented
        yield f"`{_call(args, eval_on_start=True)}` needs `eval_strategy` 'steps' or 'epoch', got 'no'"


def _numbers(args: Any) -> Iterator[str]:
    if args.warmup_steps < 0:
        yield f"`{_call(args, warmup_steps=args.warmup_steps)}` must be >= 0"
    n = args.torch_empty_cache_steps
    if n is not None and not (isinstance(n, int) and n > 0):
        yield f"`{_call(args, torch_empty_cache_steps=n)}` must be an integer > 0 or None"


def _dataloader(args: Any) -> Iterator[str]:
    if args.dataloader_num_workers == 0:
        if args.dataloader_prefetch_factor is not None:
            yield (
                f"`{_call(args, dataloader_prefetch_factor=args.dataloader_prefetch_factor)}` needs "
                "`dataloader_num_workers` > 0, got 0"
            )
        if args.dataloader_persistent_workers:  # documented
            yield f"`{_call(args, dataloader_persistent_workers=True)}` needs `dataloader_num_workers` > 0, got 0"


def _choices(args: Any) -> Iterator[str]:
    """String settings with a fixed set of values (documented; transformers checks them only on the CLI)."""
    for name, allowed in (
        ("log_level", tuple(LOG_LEVELS)),
        ("log_level_replica", tuple(LOG_LEVELS)),
        ("include_num_input_tokens_seen", _TOKENS_SEEN),
        ("train_sampling_strategy", SAMPLING_STRATEGIES),
        ("dataloader_multiprocessing_context", (None, *_MP_CONTEXTS)),
    ):
        value = getattr(args, name)
        if value not in allowed:
            shown = ", ".join(repr(a) for a in allowed)
            yield f"`{_call(args, **{name: value})}` is not supported; choose one of: {shown}"


class ArgumentTypeError(TypeError, ValueError):
    """A ``TrainingArguments`` field holds a value of the wrong type.

    A ``TypeError``; also a ``ValueError``, because transformers raises ``ValueError`` for some of these
    values (``torch_empty_cache_steps=2.5``) and code catching that keeps working.
    """


# Fields whose annotation is narrower than what transformers (and normalisation) accept.
_ACCEPTS: dict[str, Any] = {
    "fsdp": bool | str | list | None,
    "report_to": str | list | tuple | None,
    "optim_target_modules": str | list | tuple | None,
    "include_for_metrics": list | tuple,
    "label_names": list | tuple | None,
    "debug": str | list | tuple | None,
}
_NAMES = {int: "an int", float: "a number", bool: "a bool", str: "a str", dict: "a dict", list: "a list"}


def _matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` fits ``annotation`` (unions, Optional, Literal, enums, containers by their origin)."""
    origin = typing.get_origin(annotation)
    if annotation is Any or annotation is None and value is None:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(annotation))
    if origin is typing.Literal:
        return any(value is option or value == option for option in typing.get_args(annotation))
    target = origin or annotation
    if target is type(None):
        return value is None
    if target is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if target is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if target is str:
        return isinstance(value, (str, os.PathLike))
    if target is dict:
        return isinstance(value, Mapping)
    if isinstance(target, type) and issubclass(target, enum.Enum):
        return isinstance(value, target)
    return isinstance(target, type) and isinstance(value, target)


def _describe(annotation: Any) -> str:
    options = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    words = []
    for option in options:
        base = typing.get_origin(option) or option
        if option is type(None) or option is None:
            words.append("None")
        elif base is typing.Literal:
            words.append(" or ".join(repr(v) for v in typing.get_args(option)))
        elif isinstance(base, type) and issubclass(base, enum.Enum):
            words.append(f"a {base.__name__}")
        else:
            words.append(_NAMES.get(base, f"a {getattr(base, '__name__', base)}"))
    return " or ".join(dict.fromkeys(words))


def type_problem(args: Any, name: str, annotation: Any) -> str | None:
    """The message for field ``name`` when its value does not fit ``annotation``, else ``None``."""
    value = getattr(args, name)
    annotation = _ACCEPTS.get(name, annotation)
    if _matches(value, annotation):
        if isinstance(value, float) and not math.isfinite(value) and name not in ("max_grad_norm",):
            return f"`{_call(args, **{name: value})}` must be a finite number"
        return None
    return f"`{_call(args, **{name: value})}` must be {_describe(annotation)}, got {type(value).__name__}"


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def check_types(args: Any) -> None:
    """Raise one ``TypeError`` naming every field whose value has the wrong type (before normalisation)."""
    hints = _hints(type(args))
    problems = [
        message
        for field in dataclasses.fields(args)
        if field.init and field.name in hints
        for message in [type_problem(args, field.name, hints[field.name])]
        if message is not None
    ]
    if len(problems) == 1:
        raise ArgumentTypeError(problems[0])
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ArgumentTypeError(f"{len(problems)} problems with `{type(args).__name__}`:\n{lines}")


_AT_LEAST_ONE = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps")
_NON_NEGATIVE = ("learning_rate", "num_train_epochs", "weight_decay", "adam_epsilon", "dataloader_num_workers",
                 "logging_steps", "save_steps", "eval_delay")  # fmt: skip


def _ranges(args: Any) -> Iterator[str]:
    """Counts and rates that cannot work (transformers fails later, inside torch or with ZeroDivisionError)."""
    for name in _AT_LEAST_ONE:
        if getattr(args, name) < 1:
            yield f"`{_call(args, **{name: getattr(args, name)})}` must be an int >= 1"
    for name in _NON_NEGATIVE:
        if getattr(args, name) < 0:
            yield f"`{_call(args, **{name: getattr(args, name)})}` must be >= 0"
    for name in ("eval_accumulation_steps", "dataloader_prefetch_factor"):
        value = getattr(args, name)
        if value is not None and value < 1:
            yield f"`{_call(args, **{name: value})}` must be an int >= 1 or None"
    for name in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= getattr(args, name) < 1.0:
            yield f"`{_call(args, **{name: getattr(args, name)})}` must be in [0, 1)"
    if args.eval_steps is not None and args.eval_steps < 0:
        yield f"`{_call(args, eval_steps=args.eval_steps)}` must be >= 0 or None"


def _limits(args: Any) -> Iterator[str]:
    """Values transformers 5.24 accepts and then misbehaves with, silently (measured on the same script).

    The meanings transformers gives stay: ``max_steps=-1`` (the default) leaves the length to
    ``num_train_epochs``; ``save_total_limit=None`` (or 0, transformers' rotation skips it) keeps every
    checkpoint; ``max_grad_norm`` <= 0 disables clipping.
    """
    if args.max_steps < -1 or args.max_steps == 0:  # transformers: < -1 trains by epochs, 0 trains one step
        yield (
            f"`{_call(args, max_steps=args.max_steps)}` must be an int > 0, or -1 (the default: "
            "`num_train_epochs` decides how long to train)"
        )
    limit = args.save_total_limit
    if limit is not None and limit < 0:  # transformers: keeps every checkpoint
        yield f"`{_call(args, save_total_limit=limit)}` must be None (keep every checkpoint) or an int >= 0"
    if args.save_strategy == "steps" and args.save_steps == 0:  # transformers: saves at the end only
        yield (
            f"`{_call(args, save_strategy='steps', save_steps=0)}` needs `save_steps` > 0: a number of steps, "
            "or a ratio in (0, 1) of the total steps"
        )
    if not math.isfinite(args.max_grad_norm):  # transformers: NaN never clips; inf turns an inf norm into NaN
        yield (
            f"`{_call(args, max_grad_norm=args.max_grad_norm)}` must be a finite number: > 0 clips the gradients "
            "to that norm, <= 0 disables clipping (to log the gradient norm without clipping, use a large "
            "finite value such as 1e9)"
        )
    if not 0.0 <= args.label_smoothing_factor <= 1.0:  # transformers: negative target weights
        yield f"`{_call(args, label_smoothing_factor=args.label_smoothing_factor)}` must be in [0, 1]"
    alpha = args.neftune_noise_alpha
    if alpha is not None and not alpha > 0:  # transformers: uniform_() fails in the first step
        yield f"`{_call(args, neftune_noise_alpha=alpha)}` must be a number > 0, or None (no NEFTune)"
    if args.ddp_timeout <= 0:  # every collective would time out at once
        yield f"`{_call(args, ddp_timeout=args.ddp_timeout)}` must be a number of seconds > 0"


RULES: tuple[Callable[[Any], Iterator[str]], ...] = (
    _limits,
    _step_counts,
    _best_model,
    _precision,
    _needs_eval,
    _numbers,
    _dataloader,
    _choices,
    _ranges,
)


def find_problems(args: Any) -> list[str]:
    """Every rule violated by ``args``, one message each."""
    return [message for rule in RULES for message in rule(args)]


def check(args: Any, earlier: list[str] | None = None) -> None:
    """Raise one ``ValueError`` listing ``earlier`` problems and every violated rule; do nothing if none."""
    problems = [*(earlier or []), *find_problems(args)]
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ValueError(f"{len(problems)} problems with `{type(args).__name__}`:\n{lines}")
