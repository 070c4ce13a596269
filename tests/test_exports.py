"""Every public name resolves (the lazy export tables point at real objects)."""

from __future__ import annotations

import pytest

import hf_lightning
import hf_lightning.adapters as adapters


@pytest.mark.parametrize("name", hf_lightning.__all__)
def test_hf_lightning_exports_resolve(name):
    """`from hf_lightning import <name>` works for every name in __all__."""
    assert getattr(hf_lightning, name) is not None


@pytest.mark.parametrize("name", adapters.__all__)
def test_adapters_exports_resolve(name):
    """`from hf_lightning.adapters import <name>` works for every name in __all__."""
    assert getattr(adapters, name) is not None


def test_transformers_top_level_names_exist():
    """The names a transformers Trainer script imports exist here too."""
    for name in (
        "Trainer",
        "TrainingArguments",
        "Seq2SeqTrainer",
        "Seq2SeqTrainingArguments",
        "HfArgumentParser",
        "TrainerCallback",
        "EarlyStoppingCallback",
        "TrainerState",
        "TrainerControl",
        "set_seed",
        "default_data_collator",
        "DataCollatorWithPadding",
        "EvalPrediction",
        "get_scheduler",
    ):
        assert hasattr(hf_lightning, name), name


def test_tokenizer_collators_are_transformers_own(monkeypatch):
    """``from hf_lightning import DataCollatorForSeq2Seq`` (a script with its imports swapped) gets transformers'
    class; without transformers the ImportError says what to install."""
    import sys

    import transformers

    for name in (
        "DataCollatorForSeq2Seq",
        "DataCollatorForLanguageModeling",
        "DataCollatorForTokenClassification",
    ):
        assert getattr(hf_lightning, name) is getattr(transformers, name)
    assert hf_lightning.DataCollatorWithPadding is not transformers.DataCollatorWithPadding  # ours
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(
        ImportError, match=r"DataCollatorForSeq2Seq is transformers' own.*pip install transformers"
    ):
        from hf_lightning import DataCollatorForSeq2Seq  # noqa: F401
