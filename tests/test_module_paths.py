"""transformers' Trainer-API module paths exist under hf_lightning with the names we implement.

Replacing ``transformers`` by ``hf_lightning`` on a script's Trainer-API import lines is enough:
``from transformers.trainer_utils import get_last_checkpoint`` becomes
``from hf_lightning.trainer_utils import get_last_checkpoint``.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

pytest.importorskip("transformers")

#: the submodules transformers' example scripts and user code import Trainer-API names from
MODULES = (
    "trainer_callback",
    "trainer_utils",
    "training_args",
    "training_args_seq2seq",
    "hf_argparser",
    "trainer_seq2seq",
    "optimization",
    "trainer_pt_utils",
)

#: where hf_lightning's implemented names are listed
OUR_PACKAGES = (
    "hf_lightning",
    "hf_lightning.args",
    "hf_lightning.callbacks",
    "hf_lightning.data",
    "hf_lightning.data.shards",
    "hf_lightning.eval_utils",
    "hf_lightning.loss",
    "hf_lightning.adapters",  # the samplers
    "hf_lightning.optim",
    "hf_lightning.trainer",
    "hf_lightning.trainer_utils",
    "hf_lightning.trainer_pt_utils",  # the padding helpers written there
)

#: names transformers has there that mean something else in hf_lightning
SAME_NAME_OTHER_THING = {
    # transformers': a Trainer method taking the Trainer; ours (hf_lightning.optim) takes the optimizer
    ("trainer_pt_utils", "get_learning_rates"),
    # transformers': (lengths, effective_batch_size, dp_size, grad_accum, ...) and its own balancing rule; ours
    # (hf_lightning.adapters) balances by another rule and takes other arguments
    ("trainer_pt_utils", "BatchRebalanceSampler"),
}


def _implemented() -> set[str]:
    names: set[str] = set()
    for package in OUR_PACKAGES:
        names |= set(importlib.import_module(package).__all__)
    return names


def _cases() -> list[tuple[str, str]]:
    implemented = _implemented()
    cases = []
    for module in MODULES:
        theirs = importlib.import_module(f"transformers.{module}")
        public = {
            name
            for name in dir(theirs)
            if not name.startswith("_") and not inspect.ismodule(getattr(theirs, name))
        }
        # each module's ``logger`` is its own (test_module_loggers_carry_transformers_warnings)
        cases += [(module, name) for name in sorted(public & implemented) if name != "logger"]
    return [case for case in cases if case not in SAME_NAME_OTHER_THING]


@pytest.mark.parametrize(("module", "name"), _cases())
def test_name_imports_from_our_module_of_the_same_path(module, name):
    """Each implemented name of transformers.<module> imports from hf_lightning.<module>."""
    ours = importlib.import_module(f"hf_lightning.{module}")
    assert getattr(ours, name) is not None


@pytest.mark.parametrize("module", MODULES)
def test_our_module_lists_its_names_in_all(module):
    """Every hf_lightning.<module> re-export module declares __all__, and each listed name resolves."""
    ours = importlib.import_module(f"hf_lightning.{module}")
    assert all(hasattr(ours, name) for name in ours.__all__)


def test_the_examples_get_last_checkpoint_import():
    """The import line of transformers' example scripts works with the package name swapped."""
    from transformers.trainer_utils import get_last_checkpoint as theirs

    from hf_lightning.trainer_utils import get_last_checkpoint

    assert get_last_checkpoint.__name__ == theirs.__name__


def test_logging_has_transformers_verbosity_api():
    """hf_lightning.utils.logging offers transformers.utils.logging's verbosity and handler functions."""
    from transformers.utils import logging as theirs

    from hf_lightning.utils import logging as ours

    api = [
        "get_logger", "get_verbosity", "set_verbosity", "set_verbosity_info", "set_verbosity_warning",
        "set_verbosity_debug", "set_verbosity_error", "enable_default_handler", "disable_default_handler",
        "enable_propagation", "disable_propagation", "enable_explicit_format", "reset_format",
        "add_handler", "remove_handler", "get_log_levels_dict", "DEBUG", "INFO", "WARNING", "ERROR",
        "CRITICAL", "FATAL", "WARN", "NOTSET",
    ]  # fmt: skip
    assert [n for n in api if hasattr(theirs, n) and not hasattr(ours, n)] == []


def test_trainer_module_names():
    """``from transformers.trainer import DEFAULT_CALLBACKS, TRAINER_STATE_NAME`` works swapped."""
    from transformers import trainer as theirs

    from hf_lightning.trainer import DEFAULT_CALLBACKS, DEFAULT_PROGRESS_CALLBACK, TRAINER_STATE_NAME

    assert [cb.__name__ for cb in DEFAULT_CALLBACKS] == [cb.__name__ for cb in theirs.DEFAULT_CALLBACKS]
    assert DEFAULT_PROGRESS_CALLBACK.__name__ == theirs.DEFAULT_PROGRESS_CALLBACK.__name__
    assert TRAINER_STATE_NAME == theirs.TRAINER_STATE_NAME


def _regression_trainer(out, callbacks=None, **kwargs):
    from hf_lightning import Trainer, TrainingArguments
    from tests.tiny import RegressionModel, regression_data

    args = TrainingArguments(str(out), report_to="none", disable_tqdm=True, use_cpu=True, **kwargs)
    data = regression_data(16)
    return Trainer(RegressionModel(), args, train_dataset=data, eval_dataset=data, callbacks=callbacks)


def test_module_loggers_carry_transformers_warnings(tmp_path):
    """A test that patches ``transformers.trainer_callback.logger.warning`` or ``transformers.trainer.logger
    .warning`` sees the same warning, formatted, through hf_lightning's module of the same path."""
    from unittest.mock import patch

    from hf_lightning import EarlyStoppingCallback, PrinterCallback

    with patch("hf_lightning.trainer_callback.logger.warning") as warn:
        _regression_trainer(tmp_path / "dup", callbacks=[PrinterCallback, PrinterCallback])
    assert "PrinterCallback" in warn.call_args[0][0] and "already one" in warn.call_args[0][0]

    steps = dict(save_strategy="steps", eval_strategy="steps", save_steps=2, eval_steps=2, max_steps=2)
    first = _regression_trainer(tmp_path, [EarlyStoppingCallback()], load_best_model_at_end=True, **steps)
    first.train()
    resumed = _regression_trainer(tmp_path, restore_callback_states_from_checkpoint=True, **steps)
    with patch("hf_lightning.trainer.logger.warning") as warn:
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert "EarlyStoppingCallback" in warn.call_args[0][0]
