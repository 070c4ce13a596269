"""Normalisation step of `TrainingArguments.__post_init__`: fill defaults and coerce types, as transformers does.

Each function edits the arguments in place. Problems found while coercing (an unknown enum value, say)
are returned as messages so the rule table can report them together with the rest.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from hf_lightning.args.enums import (
    METRIC_DRIVEN_SCHEDULERS,
    ChoiceEnum,
    DebugOption,
    HubStrategy,
    IntervalStrategy,
    OptimizerNames,
    SaveStrategy,
    SchedulerType,
)
from hf_lightning.args.fsdp import normalize_fsdp
from hf_lightning.args.trackers import available_integrations
from hf_lightning.args.validate import check_types
from hf_lightning.best_metric import default_greater_is_better
from hf_lightning.utils.logging import get_logger

__all__ = [
    "ACCELERATOR_CONFIG_DEFAULTS",
    "AcceleratorConfig",
    "available_integrations",
    "normalize",
    "parse_json_dict",
]

logger = get_logger("hf_lightning")

_ENUM_FIELDS: tuple[tuple[str, type[ChoiceEnum]], ...] = (
    ("eval_strategy", IntervalStrategy),
    ("logging_strategy", IntervalStrategy),
    ("save_strategy", SaveStrategy),
    ("hub_strategy", HubStrategy),
    ("lr_scheduler_type", SchedulerType),
    ("optim", OptimizerNames),
)

# Keys of transformers' AcceleratorConfig and their defaults.
ACCELERATOR_CONFIG_DEFAULTS: dict[str, Any] = {
    "split_batches": False,
    "dispatch_batches": None,
    "even_batches": True,
    "use_seedable_sampler": True,
    "non_blocking": False,
    "gradient_accumulation_kwargs": None,
}


class AcceleratorConfig(dict):
    """``TrainingArguments.accelerator_config`` after ``__post_init__``: a dict of every key, also read as
    transformers' ``AcceleratorConfig`` is (``.split_batches``, ``.to_dict()``).

    Built as transformers' dataclass is (``AcceleratorConfig(split_batches=True)``, ``from_json_file(path)``:
    the other keys at their defaults, an unknown keyword refused), it can be passed as ``accelerator_config``."""

    def __init__(self, values: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        unknown = sorted(set(fields) - {*ACCELERATOR_CONFIG_DEFAULTS, "use_configured_state"})
        if unknown:
            raise TypeError(f"AcceleratorConfig.__init__() got an unexpected keyword argument {unknown[0]!r}")
        if values is None:  # transformers' constructor: every field at its default
            values = {**ACCELERATOR_CONFIG_DEFAULTS, "use_configured_state": False}
        super().__init__({**values, **fields})

    @classmethod
    def from_json_file(cls, json_file: str | os.PathLike[str]) -> AcceleratorConfig:
        """The configuration of a JSON file (its keys over the defaults)."""
        with open(json_file, encoding="utf-8") as handle:
            return cls(**json.load(handle))

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"accelerator_config has no key {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        """``args.accelerator_config.dispatch_batches = False`` sets the key, as on transformers' dataclass."""
        self[name] = value

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self))

    def __repr__(self) -> str:
        """As transformers' dataclass shows itself in ``str(args)``: ``use_configured_state`` last, ``False``
        (both consume the value when the arguments are built)."""
        shown = {k: v for k, v in self.items() if k != "use_configured_state"}
        return repr({**shown, "use_configured_state": self.get("use_configured_state", False)})


def normalize(args: Any) -> list[str]:
    """Fill derived defaults and coerce values in place; return the problems found on the way.

    A value of the wrong type raises ``TypeError`` naming its field first (``validate.check_types``).
    """
    _accelerator_config_object(args)
    check_types(args)
    if args.output_dir is None:
        args.output_dir = "trainer_output"
    args.output_dir = os.path.expanduser(args.output_dir)
    for name in args._VALID_DICT_FIELDS:
        value = getattr(args, name)
        if isinstance(value, str) and value.startswith("{"):
            setattr(args, name, _parse_field(args, name, value))
    for name, needed in (("accelerator_config", True), ("fsdp_config", bool(args.fsdp))):
        value = getattr(args, name)
        if needed and isinstance(value, str | os.PathLike):
            setattr(args, name, _read_json_file(args, name, value))
    _resolve_checkpointing_aliases(args)
    if args.disable_tqdm is None:
        args.disable_tqdm = logger.getEffectiveLevel() > logging.WARNING
    if isinstance(args.include_num_input_tokens_seen, bool):
        args.include_num_input_tokens_seen = "all" if args.include_num_input_tokens_seen else "no"
    problems = _coerce_enums(args)
    if args.eval_strategy != "no" and not args.do_eval:
        args.do_eval = True
    _derive_defaults(args)
    args.report_to = _report_to_list(args.report_to)
    if is_kubeflow_available() and "kubeflow" not in args.report_to:  # as transformers: inside a TrainJob
        args.report_to = [*args.report_to, "kubeflow"]
    _integral_steps(args)
    _compile_settings(args)
    if args.use_cpu:
        args.dataloader_pin_memory = False
    problems += _accelerator_config(args)
    problems += normalize_fsdp(args)
    return problems


def parse_json_dict(text: str) -> dict:
    """Parse a JSON object given on a command line; string leaves that spell a bool or number are converted."""
    return _convert_leaves(json.loads(text))


def _parse_field(args: Any, name: str, text: str) -> dict:
    try:
        parsed = parse_json_dict(text)
    except (ValueError, AttributeError) as exc:
        raise ValueError(
            f"`{type(args).__name__}({name}={text!r})` is not a valid JSON object: {exc}"
        ) from exc
    return parsed


def _read_json_file(args: Any, name: str, path: Any) -> dict:
    """The JSON object in the file ``path`` given for field ``name``; ``ValueError`` naming the field if not."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"`{type(args).__name__}({name}={path!r})` must be a dict, a JSON string or the path of a JSON "
            f"file; reading it failed: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise ValueError(f"`{type(args).__name__}({name}={path!r})`: the file must hold a JSON object")
    return data


def _convert_leaves(d: dict) -> dict:
    for key, value in d.items():
        if isinstance(value, dict):
            d[key] = _convert_leaves(value)
        elif isinstance(value, str) and value.lower() in ("true", "false"):
            d[key] = value.lower() == "true"
        elif isinstance(value, str) and value.isdigit():
            d[key] = int(value)
        elif isinstance(value, str) and value.replace(".", "", 1).isdigit():
            d[key] = float(value)
    return d


def _resolve_checkpointing_aliases(args: Any) -> None:
    """``gradient_checkpointing*`` feed ``activation_checkpointing*`` when those are unset, then mirror them."""
    for old, new in (
        ("gradient_checkpointing", "activation_checkpointing"),
        ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
    ):
        if getattr(args, new) is None and getattr(args, old) is not None:
            warnings.warn(
                f"`{old}` is deprecated and will be removed in v6. Use `{new}` instead.",
                FutureWarning,  # at this line, as transformers warns at its own: shown once per process
                stacklevel=1,
            )
            setattr(args, new, getattr(args, old))
        setattr(args, old, getattr(args, new))
    if args.activation_checkpointing is None:
        args.activation_checkpointing = args.gradient_checkpointing = False


def _coerce_enums(args: Any) -> list[str]:
    """Turn strategy/optimizer strings into enums; an unknown value is left as is and reported."""
    cls = type(args).__name__
    problems = []
    for name, enum in _ENUM_FIELDS:
        value = getattr(args, name)
        if value in enum.values():
            setattr(args, name, enum(value))
        else:
            problems.append(
                f"`{cls}({name}={value!r})` is not supported; choose one of: {', '.join(enum.values())}"
            )
    words = args.debug.split() if isinstance(args.debug, str) else list(args.debug or [])
    bad = [w for w in words if w not in DebugOption.values()]
    if bad:
        allowed = ", ".join(DebugOption.values())
        problems.append(f"`{cls}(debug={args.debug!r})` has unknown options {bad}; choose from: {allowed}")
    args.debug = [DebugOption(w) for w in words if w not in bad]
    return problems


def _derive_defaults(args: Any) -> None:
    """eval_steps from logging_steps; metric_for_best_model and greater_is_better."""
    if args.eval_strategy == "steps" and not args.eval_steps and args.logging_steps > 0:
        args.eval_steps = args.logging_steps
    needs_metric = args.load_best_model_at_end or args.lr_scheduler_type in METRIC_DRIVEN_SCHEDULERS
    if needs_metric and args.metric_for_best_model is None:
        args.metric_for_best_model = "loss"
    if args.greater_is_better is None and args.metric_for_best_model is not None:
        args.greater_is_better = default_greater_is_better(args.metric_for_best_model)


def _report_to_list(report_to: Any) -> list[str]:
    """``"all"`` → the installed integrations; ``"none"``/None → []; a single name → a one-item list."""
    if report_to in ("all", ["all"]):
        return available_integrations()
    if report_to in (None, "none", ["none"]):
        return []
    return list(report_to) if isinstance(report_to, list | tuple) else [report_to]


KUBEFLOW_SERVER_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"


def is_kubeflow_available(env: Mapping[str, str] | None = None) -> bool:
    """Whether the process runs in a Kubeflow TrainJob that wants progress reports (``report_to="kubeflow"``)."""
    env = os.environ if env is None else env
    if env.get("DISABLE_KUBEFLOW_INTEGRATION", "FALSE").upper() == "TRUE":
        return False
    return env.get(KUBEFLOW_SERVER_URL_ENV) is not None


def _accelerator_config(args: Any) -> list[str]:
    """accelerator_config as a dict over the defaults (as transformers' AcceleratorConfig serialises)."""
    given = args.accelerator_config
    if isinstance(given, str):
        with open(given, encoding="utf-8") as f:
            given = json.load(f)
    given = dict(given or {})
    configured = bool(given.pop("use_configured_state", False))
    args.__dict__["_use_configured_state"] = configured  # read by accelerate_state.set_up_partial_state
    if configured:  # consumed here, as transformers' device set-up does
        _check_configured_state(args)
    elif "accelerate" not in sys.modules:  # accelerate_state.py sets its state up only once it is imported;
        _DEVICES.set_up = True  # before, this flag stands for the state transformers' arguments would set up
    unknown = sorted(set(given) - set(ACCELERATOR_CONFIG_DEFAULTS))
    args.accelerator_config = AcceleratorConfig({**ACCELERATOR_CONFIG_DEFAULTS, **given})
    if unknown:
        cls, allowed = type(args).__name__, ", ".join(ACCELERATOR_CONFIG_DEFAULTS)
        return [f"`{cls}(accelerator_config=...)` has unknown keys {unknown}; allowed keys: {allowed}"]
    return []


def _accelerator_config_object(args: Any) -> None:
    """An ``AcceleratorConfig`` (transformers' or accelerate's dataclass) given as ``accelerator_config`` becomes
    its dict, as transformers reads it; a class instead of an instance is refused with transformers' error."""
    given = args.accelerator_config
    if isinstance(given, type):
        raise NotImplementedError(
            "Tried passing in a callable to `accelerator_config`, but this is not supported. Please pass in a "
            f"fully constructed `AcceleratorConfig` object instead (`{type(args).__name__}(accelerator_config="
            f"{given.__name__})`; a dict or the path of a JSON file also works)."
        )
    if given is not None and not isinstance(given, (dict, str)) and callable(getattr(given, "to_dict", None)):
        args.accelerator_config = dict(given.to_dict())


class _DEVICES:
    set_up = False
    """Whether arguments without ``use_configured_state`` were built in this process before accelerate was
    imported (transformers' would have set up accelerate's ``PartialState``; sentence-transformers builds its
    default arguments relying on it). Once accelerate is imported, its own state is set up and read."""


def _check_configured_state(args: Any) -> None:
    """``use_configured_state=True`` needs a state set up before the arguments: earlier arguments of this
    process, accelerate's ``PartialState``, or a ``torch.distributed`` process group, which the Lightning
    strategy then reuses."""
    partial_state = getattr(sys.modules.get("accelerate.state"), "PartialState", None)
    accelerate_state = dict(getattr(partial_state, "_shared_state", None) or {})
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    group_started = dist is not None and dist.is_available() and dist.is_initialized()
    if not accelerate_state and not group_started and not _DEVICES.set_up:
        raise ValueError(
            f"`{type(args).__name__}(accelerator_config={{'use_configured_state': True}})` needs a state "
            "configured before the arguments are built: earlier `TrainingArguments`, accelerate's "
            "`PartialState()` or a started `torch.distributed` process group; pass "
            "`use_configured_state=False` to let the Trainer set one up"
        )
    kind = str(getattr(accelerate_state.get("distributed_type"), "value", ""))
    if args.deepspeed and accelerate_state and kind != "DEEPSPEED":
        raise RuntimeError(
            f"`{type(args).__name__}(accelerator_config={{'use_configured_state': True}}, deepspeed=...)`: the "
            f"configured accelerate state is {kind or 'NO'}, not DEEPSPEED; set it up for DeepSpeed or pass "
            "`use_configured_state=False`"
        )


def _integral_steps(args: Any) -> None:
    """Whole-number ``*_steps`` above 1 become ints (non-whole ones are left for the rule table)."""
    for strategy, steps in (
        ("logging_strategy", "logging_steps"),
        ("eval_strategy", "eval_steps"),
        ("save_strategy", "save_steps"),
    ):
        value = getattr(args, steps)
        if getattr(args, strategy) == "steps" and value is not None and value > 1 and value == int(value):
            setattr(args, steps, int(value))


def _compile_settings(args: Any) -> None:
    """A compile backend or mode switches torch_compile on; the default backend is inductor."""
    if args.torch_compile_mode is not None or args.torch_compile_backend is not None:
        args.torch_compile = True
    if args.torch_compile and args.torch_compile_backend is None:
        args.torch_compile_backend = "inductor"
