"""``TrainingArguments``, ``Seq2SeqTrainingArguments``, their enums and ``HfArgumentParser``."""

from __future__ import annotations

from hf_lightning.args.enums import (
    ChoiceEnum,
    DebugOption,
    FSDPOption,
    HubStrategy,
    IntervalStrategy,
    OptimizerNames,
    ParallelMode,
    SaveStrategy,
    SchedulerType,
)
from hf_lightning.args.parser import (
    HfArg,
    HfArgumentParser,
    string_to_bool,
)
from hf_lightning.args.seq2seq import (
    Seq2SeqTrainingArguments,
)
from hf_lightning.args.training_args import (
    TrainingArguments,
    resolve_steps,
)

__all__ = [
    "ChoiceEnum",
    "DebugOption",
    "FSDPOption",
    "HfArg",
    "HfArgumentParser",
    "HubStrategy",
    "IntervalStrategy",
    "OptimizerNames",
    "ParallelMode",
    "SaveStrategy",
    "SchedulerType",
    "Seq2SeqTrainingArguments",
    "TrainingArguments",
    "resolve_steps",
    "string_to_bool",
]
