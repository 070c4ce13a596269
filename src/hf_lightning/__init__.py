"""hf_lightning: the Hugging Face ``transformers`` Trainer API, running on PyTorch Lightning.

Change ``from transformers import Trainer, TrainingArguments`` to
``from hf_lightning import Trainer, TrainingArguments``; the script keeps working.
Names are imported lazily so that ``import hf_lightning`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from hf_lightning._moved import install_moved_module_aliases
from hf_lightning.utils.logging import get_logger as _library_logger

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # vocabulary
    "TrainingArguments": "args",
    "OptimizerNames": "args",
    "IntervalStrategy": "args",
    "SaveStrategy": "args",
    "SchedulerType": "args",
    "HubStrategy": "args",
    "Seq2SeqTrainingArguments": "args",
    "HfArgumentParser": "args",
    "HfArg": "args",
    "ParallelMode": "args",
    "TrainerCallback": "callbacks",
    "TrainerState": "callbacks",
    "TrainerControl": "callbacks",
    "CallbackHandler": "callbacks",
    "DefaultFlowCallback": "callbacks",
    "PrinterCallback": "callbacks",
    "ProgressCallback": "callbacks",
    "EarlyStoppingCallback": "callbacks",
    "ExportableState": "callbacks",
    "StopOnNonFinite": "callbacks",
    "BackgroundCheckpointing": "callbacks",
    "NonFiniteError": "callbacks",
    "TrainOutput": "trainer_utils",
    "EvalPrediction": "trainer_utils",
    "PredictionOutput": "trainer_utils",
    "EvalLoopOutput": "trainer_utils",
    "BestRun": "trainer_utils",
    "set_seed": "trainer_utils",
    "enable_full_determinism": "trainer_utils",
    "get_last_checkpoint": "trainer_utils",
    "get_scheduler": "optim",
    "default_data_collator": "data",
    "DefaultDataCollator": "data",
    "TrainerMemoryTracker": "trainer_utils",
    "find_executable_batch_size": "trainer_utils",
    **dict.fromkeys(
        (
            "get_linear_schedule_with_warmup",
            "get_cosine_schedule_with_warmup",
            "get_constant_schedule",
            "get_constant_schedule_with_warmup",
            "get_cosine_with_hard_restarts_schedule_with_warmup",
            "get_cosine_with_min_lr_schedule_with_warmup",
            "get_cosine_with_min_lr_schedule_with_warmup_lr_rate",
            "get_greedy_schedule",
            "get_inverse_sqrt_schedule",
            "get_polynomial_decay_schedule_with_warmup",
            "get_reduce_on_plateau_schedule",
            "get_wsd_schedule",
            "GreedyLR",
        ),
        "optim",
    ),
    "Adafactor": "optim",
    "CheckpointError": "checkpoint",
    "DiskFullError": "checkpoint",
    "OutputDirBusyError": "checkpoint",
    "DataCollatorWithPadding": "data",
    "torch_distributed_zero_first": "trainer_pt_utils",
    "logging": "utils",  # transformers.logging's place: hf_lightning.utils.logging
    # facade
    "Trainer": "trainer",
    "Seq2SeqTrainer": "trainer",
    "use_as_transformers_trainer": "trainer",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

#: transformers' tokenizer-side collators (masking, label padding for seq2seq and tokens, flattening): a script's
#: ``from hf_lightning import DataCollatorForSeq2Seq`` gets transformers' own class, so its batches are the same
_TRANSFORMERS_COLLATORS = frozenset(
    {
        "DataCollator",
        "DataCollatorForLanguageModeling",
        "DataCollatorForMultipleChoice",
        "DataCollatorForPermutationLanguageModeling",
        "DataCollatorForSeq2Seq",
        "DataCollatorForTokenClassification",
        "DataCollatorWithFlattening",
    }
)


install_moved_module_aliases()
_library_logger()  # the `hf_lightning` root logger and its bridge to transformers' verbosity (docs/logging.md)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if name in _TRANSFORMERS_COLLATORS:
        try:
            return getattr(importlib.import_module("transformers"), name)
        except ModuleNotFoundError as error:
            raise ImportError(
                f"hf_lightning.{name} is transformers' own collator (it works with a tokenizer): "
                "pip install transformers"
            ) from error
    if module_name is None:
        raise AttributeError(f"module 'hf_lightning' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"hf_lightning.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
